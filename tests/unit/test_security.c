/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests of the security modules' file handling: the token file (auth.c),
 * the TLS pair checks that need no certificate (tls.c) and server.cors_origins
 * (cors.c). Problems must name the file and line, never a secret. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "access/auth.h"
#include "config/config.h"
#include "access/cors.h"
#include "engine/tls.h"

/* Write text to a fresh temporary file; returns its malloc'd path. */
static char *temp_file(const char *text)
{
    char *path = strdup("/tmp/rock-test-tokens-XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    return path;
}

/* True if any problem line contains needle. */
static int problems_contain(const struct rk_problems *p, const char *needle)
{
    for (size_t i = 0; i < p->n; i++)
        if (strstr(p->lines[i], needle))
            return 1;
    return 0;
}

/* Load a token file with the given content; returns rk_auth_load's result. */
static int load_tokens(const char *text, struct rk_problems *p, char **path_out)
{
    struct rk_config *cfg = rk_config_defaults();
    char *path = temp_file(text);
    free(cfg->server.auth_tokens_file);
    cfg->server.auth_tokens_file = strdup(path);
    int rc = rk_auth_load(cfg, p);
    rk_config_free(cfg);
    if (path_out)
        *path_out = path;
    else {
        unlink(path);
        free(path);
    }
    return rc;
}

static void test_token_file_accepted(void **state)
{
    (void)state;
    struct rk_problems p = {0};
    assert_int_equal(load_tokens("# comment\n\n  alice-0123456789abcdef  alice \n"
                                 "sha256:9F86D081884C7D659A2FEAA0C55AD015A3BF4F1B2B0B822CD15D6C15B0"
                                 "F00A08 bob\r\n"
                                 "carol-0123456789abcdef\n",
                                 &p, NULL),
                     0);
    assert_int_equal(p.n, 0);
    assert_true(rk_auth_enabled());
    rk_auth_free();
    assert_false(rk_auth_enabled());
}

static void test_token_file_problems_name_lines_not_secrets(void **state)
{
    (void)state;
    struct rk_problems p = {0};
    char *path = NULL;
    assert_int_equal(load_tokens("short-secret\n"
                                 "alice-0123456789abcdef bad/name\n"
                                 "sha256:abc0 x\n"
                                 "dave-0123456789abcdef a b\n"
                                 "erin-0123456789abcdef dup\n"
                                 "fred-0123456789abcdef dup\n",
                                 &p, &path),
                     -1);
    assert_false(rk_auth_enabled());
    char where[256];
    for (int line = 1; line <= 4; line++) {
        snprintf(where, sizeof where, "%s:%d: server.auth_tokens_file", path, line);
        assert_true(problems_contain(&p, where));
    }
    assert_true(problems_contain(&p, "shorter than 16"));
    assert_true(problems_contain(&p, "64 hex digits"));
    assert_true(problems_contain(&p, "duplicate name \"dup\""));
    for (size_t i = 0; i < p.n; i++) {
        assert_null(strstr(p.lines[i], "short-secret"));
        assert_null(strstr(p.lines[i], "0123456789abcdef"));
    }
    rk_problems_free(&p);
    unlink(path);
    free(path);
    assert_int_equal(load_tokens("# only a comment\n", &p, NULL), -1);
    assert_true(problems_contain(&p, "holds no token"));
    rk_problems_free(&p);
}

static void test_auth_off_and_missing_file(void **state)
{
    (void)state;
    struct rk_problems p = {0};
    struct rk_config *cfg = rk_config_defaults();
    assert_int_equal(rk_auth_load(cfg, &p), 0);
    assert_false(rk_auth_enabled());
    free(cfg->server.auth_tokens_file);
    cfg->server.auth_tokens_file = strdup("/nonexistent/rock-tokens");
    assert_int_equal(rk_auth_load(cfg, &p), -1);
    assert_true(problems_contain(&p, "/nonexistent/rock-tokens: cannot open"));
    rk_problems_free(&p);
    rk_config_free(cfg);
}

static void test_tls_pair_rules(void **state)
{
    (void)state;
    struct rk_problems p = {0};
    struct rk_config *cfg = rk_config_defaults();
    assert_int_equal(rk_tls_load(cfg, &p), 0);
    assert_false(rk_tls_enabled());
    free(cfg->server.tls_cert_file);
    cfg->server.tls_cert_file = strdup("/nonexistent/cert.pem");
    assert_int_equal(rk_tls_load(cfg, &p), -1);
    assert_true(problems_contain(&p, "must be set together"));
    free(cfg->server.tls_key_file);
    cfg->server.tls_key_file = strdup("/nonexistent/key.pem");
    rk_problems_free(&p);
    assert_int_equal(rk_tls_load(cfg, &p), -1);
    assert_true(problems_contain(&p, "server.tls_cert_file: /nonexistent/cert.pem: cannot open"));
    char *junk = temp_file("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n");
    free(cfg->server.tls_cert_file);
    cfg->server.tls_cert_file = strdup(junk);
    free(cfg->server.tls_key_file);
    cfg->server.tls_key_file = strdup(junk);
    rk_problems_free(&p);
    assert_int_equal(rk_tls_load(cfg, &p), -1);
    assert_true(p.n > 0);
    assert_false(rk_tls_enabled());
    unlink(junk);
    free(junk);
    rk_problems_free(&p);
    rk_config_free(cfg);
}

static void test_cors_origins_checked(void **state)
{
    (void)state;
    struct rk_problems p = {0};
    struct rk_config *cfg = rk_config_defaults();
    free(cfg->server.cors_origins);
    cfg->server.cors_origins = calloc(6, sizeof(char *));
    const char *vals[] = {"https://ok.example", "http://localhost:3000", "*",
                          "https://x.example/path", "ftp://x.example"};
    for (int i = 0; i < 5; i++)
        cfg->server.cors_origins[i] = strdup(vals[i]);
    rk_cors_check_config(cfg, &p);
    assert_int_equal(p.n, 3);
    assert_true(problems_contain(&p, "\"*\" is not an origin"));
    assert_true(problems_contain(&p, "\"https://x.example/path\""));
    assert_true(problems_contain(&p, "\"ftp://x.example\""));
    rk_problems_free(&p);
    rk_config_free(cfg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_token_file_accepted),
        cmocka_unit_test(test_token_file_problems_name_lines_not_secrets),
        cmocka_unit_test(test_auth_off_and_missing_file),
        cmocka_unit_test(test_tls_pair_rules),
        cmocka_unit_test(test_cors_origins_checked),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
