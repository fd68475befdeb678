/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file test_os_config.c
 * @brief Unit tests for config validation in init() (no upstream contact) and the descriptor.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../os_internal.h"
#include "mock_host.h"

/** Run os_config_init with the given entries; returns the status (instance freed). */
static rk_status try_config(const struct mock_cfg_entry *entries, struct os_inst **keep)
{
    struct rk_cfg cfg = {entries, os_config_keys};
    struct os_inst *inst = NULL;
    mock_reset();
    rk_status s = os_config_init(&mock_host, &cfg, &inst);
    if (s == RK_OK && keep)
        *keep = inst;
    else if (s == RK_OK)
        os_config_free(inst);
    return s;
}

/** Validate one endpoint value. */
static rk_status try_endpoint(const char *ep)
{
    struct mock_cfg_entry e[] = {{"endpoint", ep}, {NULL, NULL}};
    return try_config(e, NULL);
}

/** Good host[:port] forms are accepted. */
static void test_endpoint_accepted(void **state)
{
    (void)state;
    assert_int_equal(try_endpoint("opensandbox.example.com:8090"), RK_OK);
    assert_int_equal(try_endpoint("opensandbox.local"), RK_OK);
    assert_int_equal(try_endpoint("10.0.0.5:8080"), RK_OK);
    assert_int_equal(try_endpoint("[::1]:8080"), RK_OK);
    assert_int_equal(try_endpoint("[fe80::1]"), RK_OK);
    assert_int_equal(try_endpoint("localhost:1"), RK_OK);
    assert_int_equal(try_endpoint("localhost:65535"), RK_OK);
    assert_int_equal(mock_problem_count, 0);
}

/** Schemes, paths and bad ports are rejected with a problem on `endpoint`. */
static void test_endpoint_rejected(void **state)
{
    (void)state;
    const char *bad[] = {"https://opensandbox.example.com",
                         "http://x:8080",
                         "opensandbox.example.com/v1",
                         "opensandbox.example.com:8080/",
                         "host?x=1",
                         "host#frag",
                         "",
                         "host:0",
                         "host:65536",
                         "host:",
                         "host:80a",
                         ":8080",
                         "user@host:80",
                         "a b",
                         "::1",
                         "[::1",
                         NULL};
    for (int i = 0; bad[i]; i++) {
        assert_int_equal(try_endpoint(bad[i]), RK_E_INVALID);
        assert_int_equal(mock_problem_count, 1);
        assert_string_equal(mock_problem_keys[0], "endpoint");
    }
    assert_int_equal(try_endpoint("https://x"), RK_E_INVALID);
    assert_non_null(strstr(mock_problem_texts[0], "scheme"));
    assert_int_equal(try_endpoint("x/y"), RK_E_INVALID);
    assert_non_null(strstr(mock_problem_texts[0], "path"));
}

/** Defaults are applied and kept. */
static void test_defaults(void **state)
{
    (void)state;
    struct mock_cfg_entry e[] = {{"endpoint", "os.local:8080"}, {NULL, NULL}};
    struct os_inst *inst = NULL;
    assert_int_equal(try_config(e, &inst), RK_OK);
    assert_string_equal(inst->endpoint, "os.local:8080");
    assert_string_equal(inst->protocol, "https");
    assert_null(inst->api_key);
    assert_null(inst->registry_prefix);
    assert_int_equal(inst->use_server_proxy, 0);
    assert_int_equal(inst->default_timeout_s, 600);
    assert_int_equal(inst->connect_timeout_s, 5);
    assert_int_equal(inst->sandbox_timeout_s, 86400);
    assert_int_equal(inst->margin_s, 30);
    assert_int_equal(inst->max_file_bytes, 67108864);
    os_config_free(inst);
}

/** Explicit values are kept verbatim; an empty api_key means "no key". */
static void test_overrides(void **state)
{
    (void)state;
    struct mock_cfg_entry e[] = {{"endpoint", "api.opensandbox.example.com"},
                                 {"api_key", "secret"},
                                 {"protocol", "http"},
                                 {"use_server_proxy", "true"},
                                 {"default_timeout", "1200"},
                                 {"image_registry_prefix", "registry.example.com/library"},
                                 {"sandbox_timeout", "0"},
                                 {NULL, NULL}};
    struct os_inst *inst = NULL;
    assert_int_equal(try_config(e, &inst), RK_OK);
    assert_string_equal(inst->protocol, "http");
    assert_string_equal(inst->api_key, "secret");
    assert_int_equal(inst->use_server_proxy, 1);
    assert_int_equal(inst->default_timeout_s, 1200);
    assert_int_equal(inst->sandbox_timeout_s, 0);
    assert_string_equal(inst->registry_prefix, "registry.example.com/library");
    os_config_free(inst);

    struct mock_cfg_entry e2[] = {{"endpoint", "h"}, {"api_key", ""}, {NULL, NULL}};
    assert_int_equal(try_config(e2, &inst), RK_OK);
    assert_null(inst->api_key);
    os_config_free(inst);
}

/** Numeric keys are range-checked; every problem is reported. */
static void test_numeric_problems(void **state)
{
    (void)state;
    struct mock_cfg_entry e[] = {{"endpoint", "h:1"},
                                 {"default_timeout", "0"},
                                 {"sandbox_timeout", "59"},
                                 {"connect_timeout", "-1"},
                                 {"command_timeout_margin", "-5"},
                                 {"max_file_bytes", "0"},
                                 {NULL, NULL}};
    assert_int_equal(try_config(e, NULL), RK_E_INVALID);
    assert_int_equal(mock_problem_count, 5);
    assert_string_equal(mock_problem_keys[0], "default_timeout");
    assert_string_equal(mock_problem_texts[0], "OpenSandbox default_timeout must be positive");
    assert_string_equal(mock_problem_keys[1], "connect_timeout");
    assert_string_equal(mock_problem_keys[2], "sandbox_timeout");

    struct mock_cfg_entry ok60[] = {{"endpoint", "h"}, {"sandbox_timeout", "60"}, {NULL, NULL}};
    assert_int_equal(try_config(ok60, NULL), RK_OK);
    struct mock_cfg_entry proto[] = {{"endpoint", "h"}, {"protocol", "ftp"}, {NULL, NULL}};
    assert_int_equal(try_config(proto, NULL), RK_E_INVALID);
    assert_string_equal(mock_problem_keys[0], "protocol");
}

/** Lifecycle options (stop_mode, archive_enabled, renew_margin) decide the configured caps. */
static void test_lifecycle_options(void **state)
{
    (void)state;
    const uint64_t mode_caps =
        RK_CAP_STOP | RK_CAP_RESTART | RK_CAP_STOP_DELETES | RK_CAP_SNAPSHOT | RK_CAP_RENEW;
    struct os_inst *inst = NULL;
    struct mock_cfg_entry def[] = {{"endpoint", "h"}, {NULL, NULL}};
    assert_int_equal(try_config(def, &inst), RK_OK);
    uint64_t caps = os_configured_caps(inst);
    assert_int_equal(caps & mode_caps, 0); /* refuse: ROCK's documented refusals */
    assert_true(caps & RK_CAP_CONFIGURED);
    assert_true(caps & RK_CAP_EXEC);
    os_config_free(inst);

    struct mock_cfg_entry del[] = {{"endpoint", "h"}, {"stop_mode", "delete"}, {NULL, NULL}};
    assert_int_equal(try_config(del, &inst), RK_OK);
    assert_int_equal(os_configured_caps(inst) & mode_caps, RK_CAP_STOP_DELETES);
    os_config_free(inst);

    struct mock_cfg_entry all[] = {{"endpoint", "h"},
                                   {"stop_mode", "pause"},
                                   {"archive_enabled", "true"},
                                   {"renew_margin", "120"},
                                   {NULL, NULL}};
    assert_int_equal(try_config(all, &inst), RK_OK);
    assert_int_equal(os_configured_caps(inst) & mode_caps,
                     RK_CAP_STOP | RK_CAP_RESTART | RK_CAP_SNAPSHOT | RK_CAP_RENEW);
    os_config_free(inst);

    /* archive needs a stopped sandbox, which only pause makes */
    struct mock_cfg_entry arch[] = {{"endpoint", "h"}, {"archive_enabled", "true"}, {NULL, NULL}};
    assert_int_equal(try_config(arch, NULL), RK_E_INVALID);
    assert_string_equal(mock_problem_keys[0], "archive_enabled");
    assert_string_equal(mock_problem_texts[0], "needs opensandbox.stop_mode: pause");
    struct mock_cfg_entry small[] = {{"endpoint", "h"}, {"renew_margin", "5"}, {NULL, NULL}};
    assert_int_equal(try_config(small, NULL), RK_E_INVALID);
    assert_string_equal(mock_problem_keys[0], "renew_margin");
    struct mock_cfg_entry noexp[] = {
        {"endpoint", "h"}, {"renew_margin", "30"}, {"sandbox_timeout", "0"}, {NULL, NULL}};
    assert_int_equal(try_config(noexp, NULL), RK_E_INVALID);
    assert_string_equal(mock_problem_keys[0], "renew_margin");
}

/** The exported descriptor: identity, capabilities, refusal texts, schema. */
static void test_descriptor(void **state)
{
    (void)state;
    extern const struct rk_operator rk_operator;
    const struct rk_operator *d = &rk_operator;
    assert_int_equal(d->magic, RK_OPERATOR_MAGIC);
    assert_string_equal(d->name, "opensandbox");
    assert_string_equal(d->backend_tag, "opensandbox");
    assert_string_equal(d->display_name, "OpenSandbox");
    assert_true(d->flags & RK_OPF_THREADSAFE);
    uint64_t want = RK_CAP_EXEC | RK_CAP_FILE_READ | RK_CAP_FILE_STAT | RK_CAP_FILE_WRITE |
                    RK_CAP_SESSION | RK_CAP_PROXY_HTTP | RK_CAP_PROXY_WS | RK_CAP_DELETE_PENDING |
                    RK_CAP_LIST | RK_CAP_CONFIGURED | RK_CAP_STOP | RK_CAP_RESTART |
                    RK_CAP_STOP_DELETES | RK_CAP_SNAPSHOT | RK_CAP_RENEW;
    assert_int_equal(d->caps, want);
    /* stop/restart exist for stop_mode pause; configured_caps() narrows them
     * per deployment (the default, refuse, offers neither). */
    assert_non_null(d->ops->stop);
    assert_non_null(d->ops->restart);
    assert_non_null(d->ops->configured_caps);
    assert_null(d->ops->statistics);
    assert_non_null(d->ops->proxy_target);
    int found = 0;
    for (const struct rk_cap_msg *m = d->unsupported; m->cap; m++) {
        if (m->cap == RK_CAP_STOP) {
            assert_string_equal(m->message,
                                "OpenSandbox backend does not support stop by default. "
                                "OpenSandbox pause requires creating the sandbox with persistence "
                                "enabled; use delete instead.");
            found++;
        }
        if (m->cap == RK_CAP_PORT_FORWARD) {
            assert_string_equal(m->message,
                                "OpenSandbox backend does not support portforward in this release");
            found++;
        }
    }
    assert_int_equal(found, 2);
    int secret = 0;
    for (const struct rk_cfg_key *k = d->config; k->name; k++) {
        if (strcmp(k->name, "api_key") == 0) {
            secret = (k->flags & RK_CFGF_SECRET) && (k->flags & RK_CFGF_NULLABLE) &&
                     strcmp(k->env_fallback, "OPEN_SANDBOX_API_KEY") == 0;
        }
    }
    assert_true(secret);
}

/** Run the suite. */
int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_endpoint_accepted), cmocka_unit_test(test_endpoint_rejected),
        cmocka_unit_test(test_defaults),          cmocka_unit_test(test_overrides),
        cmocka_unit_test(test_numeric_problems),  cmocka_unit_test(test_descriptor),
        cmocka_unit_test(test_lifecycle_options),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    mock_reset();
    return rc;
}
