/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file test_os_map.c
 * @brief Unit tests for the pure mapping helpers (behaviour §0.3, B44-B47, formatting).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../os_internal.h"

/** Assert that a malloc'd result equals want, then free it. */
static void check_str(char *got, const char *want)
{
    assert_non_null(got);
    assert_string_equal(got, want);
    free(got);
}

/** Memory conversion table (B46 plus pass-through cases). */
static void test_memory(void **state)
{
    (void)state;
    check_str(os_mem_to_k8s("8g"), "8Gi");
    check_str(os_mem_to_k8s("8G"), "8Gi");
    check_str(os_mem_to_k8s("4096m"), "4096Mi");
    check_str(os_mem_to_k8s("4096M"), "4096Mi");
    check_str(os_mem_to_k8s("512Mi"), "512Mi");
    check_str(os_mem_to_k8s("2Gi"), "2Gi");
    check_str(os_mem_to_k8s("64Ki"), "64Ki");
    check_str(os_mem_to_k8s("512k"), "512k");
    check_str(os_mem_to_k8s("1024"), "1024");
    check_str(os_mem_to_k8s("8gb"), "8gb");
    check_str(os_mem_to_k8s("1T"), "1T");
    check_str(os_mem_to_k8s("8gi"), "8gi");
    check_str(os_mem_to_k8s(" 8g "), "8Gi");
    check_str(os_mem_to_k8s(""), "");
}

/** CPU formatting: limit_cpus wins when set; integral values print without ".0". */
static void test_cpu(void **state)
{
    (void)state;
    check_str(os_format_cpu(4, 0), "4");
    check_str(os_format_cpu(4.0, 0), "4");
    check_str(os_format_cpu(2.5, 0), "2.5");
    check_str(os_format_cpu(0.5, 0), "0.5");
    check_str(os_format_cpu(1, 2), "2");
    check_str(os_format_cpu(1, 1.5), "1.5");
    check_str(os_format_cpu(0.1, 0), "0.1");
}

/** Image registry prefix table (§0.3, B20, B21). */
static void test_image(void **state)
{
    (void)state;
    const char *p = "registry.example.com/library";
    check_str(os_qualify_image("python:3.11", p), "registry.example.com/library/python:3.11");
    check_str(os_qualify_image("team/python:3.11", p),
              "registry.example.com/library/team/python:3.11");
    check_str(os_qualify_image("ghcr.io/team/python:3.11", p), "ghcr.io/team/python:3.11");
    check_str(os_qualify_image("localhost:5000/python:3.11", p), "localhost:5000/python:3.11");
    check_str(os_qualify_image("localhost/python:3.11", p), "localhost/python:3.11");
    check_str(os_qualify_image("python:3.11", "registry.example.com/library/"),
              "registry.example.com/library/python:3.11");
    check_str(os_qualify_image(" python:3.11 ", p), "registry.example.com/library/python:3.11");
    /* No prefix: untouched, not even trimmed. */
    check_str(os_qualify_image(" python:3.11 ", NULL), " python:3.11 ");
    check_str(os_qualify_image(" python:3.11 ", ""), " python:3.11 ");
    check_str(os_qualify_image(" python:3.11 ", " / "), " python:3.11 ");
    check_str(os_qualify_image("   ", p), "");
}

/** State table (§0.3, B44, B45). */
static void test_state(void **state)
{
    (void)state;
    int failed = -1;
    assert_int_equal(os_map_state("Pending", &failed), RK_STATE_PENDING);
    assert_int_equal(failed, 0);
    assert_int_equal(os_map_state("Running", &failed), RK_STATE_RUNNING);
    assert_int_equal(os_map_state("Pausing", &failed), RK_STATE_STOPPED);
    assert_int_equal(os_map_state("Paused", &failed), RK_STATE_STOPPED);
    assert_int_equal(os_map_state("Stopping", &failed), RK_STATE_STOPPED);
    assert_int_equal(failed, 0);
    assert_int_equal(os_map_state("Failed", &failed), RK_STATE_STOPPED);
    assert_int_equal(failed, 1);
    assert_int_equal(os_map_state("Terminated", &failed), RK_STATE_DELETED);
    assert_int_equal(failed, 0);
    assert_int_equal(os_map_state("Unknown", &failed), RK_STATE_PENDING);
    assert_int_equal(os_map_state("running", &failed), RK_STATE_PENDING);
    assert_int_equal(os_map_state("Allocated", &failed), RK_STATE_PENDING);
    assert_int_equal(os_map_state("Resuming", &failed), RK_STATE_PENDING);
    assert_int_equal(os_map_state(NULL, &failed), RK_STATE_PENDING);
}

/** shlex.quote equivalence (B47, B67). */
static void test_quote(void **state)
{
    (void)state;
    check_str(os_shell_quote("hello world"), "'hello world'");
    check_str(os_shell_quote("echo"), "echo");
    check_str(os_shell_quote(""), "''");
    check_str(os_shell_quote("it's"), "'it'\"'\"'s'");
    check_str(os_shell_quote("/work/profile with spaces.sh"), "'/work/profile with spaces.sh'");
    check_str(os_shell_quote("a$b"), "'a$b'");
    check_str(os_shell_quote("-_@%+=:,./"), "-_@%+=:,./");
}

/** Session init command composition (B67). */
static void test_init_command(void **state)
{
    (void)state;
    struct rk_kv env[] = {{"GREETING", "hello world"}};
    const char *src[] = {"/work/profile with spaces.sh"};
    check_str(os_session_init_command(env, 1, src, 1),
              "export GREETING='hello world' && source '/work/profile with spaces.sh'");
    struct rk_kv env2[] = {{"A", "1"}, {"B", "x'y"}};
    check_str(os_session_init_command(env2, 2, NULL, 0), "export A=1 && export B='x'\"'\"'y'");
    check_str(os_session_init_command(NULL, 0, NULL, 0), "");
}

/** Python repr of strings. */
static void test_repr(void **state)
{
    (void)state;
    check_str(os_py_repr("missing", 7), "'missing'");
    check_str(os_py_repr("hello\n", 6), "'hello\\n'");
    check_str(os_py_repr("it's", 4), "\"it's\"");
    check_str(os_py_repr("a'b\"c", 5), "'a\\'b\"c'");
    check_str(os_py_repr("BAD-NAME", 8), "'BAD-NAME'");
    check_str(os_py_repr("t\tb\\", 4), "'t\\tb\\\\'");
    check_str(os_py_repr("\x01\x7f", 2), "'\\x01\\x7f'");
    check_str(os_py_repr("", 0), "''");
    check_str(os_py_repr("\xc3\xa9", 2), "'\xc3\xa9'");
}

/** Python float repr. */
static void test_float(void **state)
{
    (void)state;
    check_str(os_py_float(3), "3.0");
    check_str(os_py_float(9), "9.0");
    check_str(os_py_float(2.5), "2.5");
    check_str(os_py_float(0.001), "0.001");
    check_str(os_py_float(1.0), "1.0");
    check_str(os_py_float(0.1), "0.1");
    check_str(os_py_float(1200), "1200.0");
    check_str(os_py_float(123456789), "123456789.0");
    check_str(os_py_float(1e16), "1e+16");
    check_str(os_py_float(1.5e-5), "1.5e-05");
    check_str(os_py_float(0.0001), "0.0001");
    check_str(os_py_float(0), "0.0");
    check_str(os_py_float(3001 / 1000.0), "3.001");
}

/** Environment variable names. */
static void test_env_names(void **state)
{
    (void)state;
    assert_true(os_env_name_valid("A"));
    assert_true(os_env_name_valid("_x1"));
    assert_true(os_env_name_valid("WORKSPACE"));
    assert_false(os_env_name_valid("BAD-NAME"));
    assert_false(os_env_name_valid("1A"));
    assert_false(os_env_name_valid(""));
    assert_false(os_env_name_valid("A B"));
    assert_false(os_env_name_valid("\xc3\xa9"));
}

/** execd mode encoding both ways. */
static void test_mode(void **state)
{
    (void)state;
    int ok = 0;
    assert_int_equal(os_mode_from_decimal(644, &ok), 0644);
    assert_true(ok);
    assert_int_equal(os_mode_from_decimal(755, &ok), 0755);
    assert_int_equal(os_mode_from_decimal(0, &ok), 0);
    assert_true(ok);
    assert_int_equal(os_mode_from_decimal(4755, &ok), 04755);
    os_mode_from_decimal(648, &ok);
    assert_false(ok);
    os_mode_from_decimal(-1, &ok);
    assert_false(ok);
    assert_int_equal(os_mode_to_decimal(0644), 644);
    assert_int_equal(os_mode_to_decimal(0755), 755);
    assert_int_equal(os_mode_to_decimal(0), 0);
}

/** URL joining with and without scheme, path and trailing slash. */
static void test_join_url(void **state)
{
    (void)state;
    check_str(os_join_url("https", "a.example:8080", "/v1/sandboxes"),
              "https://a.example:8080/v1/sandboxes");
    check_str(os_join_url("http", "10.0.0.5:40123/proxy/44772/", "/command"),
              "http://10.0.0.5:40123/proxy/44772/command");
    check_str(os_join_url("http", "https://proxy.example/base?endpoint_token=abc", NULL),
              "https://proxy.example/base?endpoint_token=abc");
    check_str(os_join_url("https", "sandbox-osb-1-8080.example.test", NULL),
              "https://sandbox-osb-1-8080.example.test");
}

/** Error detail extraction from the several error body shapes. */
static void test_error_detail(void **state)
{
    (void)state;
    const char *b1 = "{\"code\":\"DOCKER::SANDBOX_NOT_FOUND\",\"message\":\"gone\"}";
    check_str(os_error_detail(404, b1, strlen(b1)), "HTTP 404 DOCKER::SANDBOX_NOT_FOUND: gone");
    const char *b2 = "{\"detail\":[{\"type\":\"missing\",\"loc\":[\"body\"],\"msg\":\"Field "
                     "required\"}]}";
    check_str(os_error_detail(422, b2, strlen(b2)), "HTTP 422 Field required");
    const char *b3 = "404 page not found";
    check_str(os_error_detail(404, b3, strlen(b3)), "HTTP 404 404 page not found");
    const char *b4 = "{\"code\":\"UNKNOWN\"}";
    check_str(os_error_detail(416, b4, strlen(b4)), "HTTP 416 UNKNOWN");
    check_str(os_error_detail(500, NULL, 0), "HTTP 500");
}

/** Case-insensitive substring. */
static void test_contains_ci(void **state)
{
    (void)state;
    assert_true(os_contains_ci("TimeoutError", "timeout"));
    assert_true(os_contains_ci("error running in session. TIMEOUT after 30s", "timeout"));
    assert_false(os_contains_ci("CommandExecError", "timeout"));
    assert_false(os_contains_ci(NULL, "timeout"));
}

/** Values in an upstream metadata filter are escaped on their own, so an id made of
 *  '&', '=' or '%26' stays one value after OpenSandbox's two decodes. */
static void test_metadata_filter(void **state)
{
    (void)state;
    check_str(os_query_escape("a-Z_0.9~"), "a-Z_0.9~");
    check_str(os_query_escape("a&b=c%26 /"), "a%26b%3Dc%2526%20%2F");
    check_str(os_metadata_filter("rock_sandbox_id", "abc123"), "rock_sandbox_id%3Dabc123");
    /* "x&rock_sandbox_id=victim" would otherwise add a second pair naming another sandbox. */
    check_str(os_metadata_filter("rock_sandbox_id", "x&rock_sandbox_id=victim"),
              "rock_sandbox_id%3Dx%2526rock_sandbox_id%253Dvictim");
    check_str(os_metadata_filter("rock_sandbox_id", "%26"), "rock_sandbox_id%3D%252526");
    check_str(os_metadata_filter("k", ""), "k%3D");
}

/** Run the suite. */
/** The refusal text for ep, or NULL when ep is a valid host[:port]. */
static const char *endpoint_why(const char *ep)
{
    const char *why = NULL;
    return os_endpoint_valid(ep, &why) ? NULL : why;
}

/** host[:port] checks (CURLU parses; the texts name the rule broken). */
static void test_endpoint_valid(void **state)
{
    (void)state;
    const char *good[] = {"opensandbox.example.com:8090",
                          "opensandbox.local",
                          "10.0.0.5:8080",
                          "[::1]:8080",
                          "[::1]",
                          "[fe80::1]:1",
                          "[::ffff:10.0.0.1]:65535",
                          "localhost:00080",
                          NULL};
    for (int i = 0; good[i]; i++)
        assert_null(endpoint_why(good[i]));
    struct {
        const char *ep;
        const char *why;
    } bad[] = {
        {"", "must not be empty; expected host[:port]"},
        {":8080", "has an empty host; expected host[:port]"},
        {":", "has an empty host; expected host[:port]"},
        {"::1", "has an empty host; expected host[:port]"},
        {"host:0", "has a port outside 1-65535"},
        {"host:65536", "has a port outside 1-65535"},
        {"host:99999", "has a port outside 1-65535"},
        {"[::1]:0", "has a port outside 1-65535"},
        {"[::1]:65536", "has a port outside 1-65535"},
        {"host:", "has an invalid port; expected 1-65535"},
        {"host:80a", "has an invalid port; expected 1-65535"},
        {"host:-1", "has an invalid port; expected 1-65535"},
        {"host:123456", "has an invalid port; expected 1-65535"},
        {"host:000080", "has an invalid port; expected 1-65535"},
        {"[::1]:", "has an invalid port; expected 1-65535"},
        {"[::1]:8o", "has an invalid port; expected 1-65535"},
        {"a:b:c", "has more than one ':'; write IPv6 addresses as [addr]:port"},
        {"[::1", "has an unterminated IPv6 address; expected [addr]:port"},
        {"[]:80", "has an unterminated IPv6 address; expected [addr]:port"},
        {"[::1]x", "has junk after the IPv6 address; expected [addr]:port"},
        {"[zz]:80", "has an invalid IPv6 address; expected [addr]:port"},
        {"user@host", "contains an invalid character; expected host[:port]"},
        {"ho^st", "contains an invalid character; expected host[:port]"},
        {"https://host", "must not contain a scheme; set protocol separately and use host[:port]"},
        {"host/v1", "must not contain a path, query or fragment; expected host[:port]"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *why = endpoint_why(bad[i].ep);
        assert_non_null(why);
        assert_string_equal(why, bad[i].why);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_memory),         cmocka_unit_test(test_cpu),
        cmocka_unit_test(test_image),          cmocka_unit_test(test_state),
        cmocka_unit_test(test_quote),          cmocka_unit_test(test_init_command),
        cmocka_unit_test(test_repr),           cmocka_unit_test(test_float),
        cmocka_unit_test(test_env_names),      cmocka_unit_test(test_mode),
        cmocka_unit_test(test_join_url),       cmocka_unit_test(test_error_detail),
        cmocka_unit_test(test_contains_ci),    cmocka_unit_test(test_metadata_filter),
        cmocka_unit_test(test_endpoint_valid),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
