/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file test_os_proxy.c
 * @brief Unit tests for the service-proxy guards (os_proxy.c): reserved ports
 *        and the egress credential marked in header_flags (ABI 1.1).
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

/** An instance from the schema defaults plus allow_reserved_ports. */
static struct os_inst *inst_with(const char *allow)
{
    struct mock_cfg_entry e[] = {
        {"endpoint", "127.0.0.1:8090"}, {"allow_reserved_ports", allow}, {NULL, NULL}};
    struct rk_cfg cfg = {e, os_config_keys};
    struct os_inst *inst = NULL;
    mock_reset();
    assert_int_equal(os_config_init(&mock_host, &cfg, &inst), RK_OK);
    return inst;
}

/** execd and egress ports are refused by default with a message naming the key. */
static void test_reserved_ports_refused(void **state)
{
    (void)state;
    struct os_inst *inst = inst_with(NULL);
    assert_int_equal(os_proxy_check_port(inst, mock_call(), OS_EGRESS_PORT), RK_E_INVALID);
    assert_non_null(strstr(mock_last_error, "port 18080 is reserved by OpenSandbox (egress"));
    assert_non_null(strstr(mock_last_error, "opensandbox.allow_reserved_ports"));
    assert_int_equal(os_proxy_check_port(inst, mock_call(), OS_EXECD_PORT), RK_E_INVALID);
    assert_non_null(strstr(mock_last_error, "port 44772 is reserved by OpenSandbox (execd)"));
    assert_int_equal(os_proxy_check_port(inst, mock_call(), 8080), RK_OK);
    os_config_free(inst);
    inst = inst_with("true");
    assert_int_equal(os_proxy_check_port(inst, mock_call(), OS_EGRESS_PORT), RK_OK);
    assert_int_equal(os_proxy_check_port(inst, mock_call(), OS_EXECD_PORT), RK_OK);
    os_config_free(inst);
}

/** OPENSANDBOX-EGRESS-AUTH (any case) is a credential; other headers route. */
static void test_egress_header_marked(void **state)
{
    (void)state;
    struct os_inst *inst = inst_with(NULL);
    struct rk_kv h[] = {{"X-Route", "a"}, {"opensandbox-egress-auth", "tok"}, {"X-Other", "b"}};
    struct rk_proxy_target pt = {"http://127.0.0.1:1", h, 3, NULL};
    assert_int_equal(os_proxy_mark_credentials(inst, mock_call(), &pt), RK_OK);
    assert_non_null(pt.header_flags);
    assert_int_equal(pt.header_flags[0], 0);
    assert_int_equal(pt.header_flags[1], RK_PROXY_HEADER_CREDENTIAL);
    assert_int_equal(pt.header_flags[2], 0);
    struct rk_proxy_target none = {"http://127.0.0.1:1", NULL, 0, NULL};
    assert_int_equal(os_proxy_mark_credentials(inst, mock_call(), &none), RK_OK);
    assert_null(none.header_flags);
    os_config_free(inst);
    mock_reset();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reserved_ports_refused),
        cmocka_unit_test(test_egress_header_marked),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
