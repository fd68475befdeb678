/* SPDX-License-Identifier: Apache-2.0 */
/* Loader refusals: each deliberately broken plugin (tests/plugins/abi_variants.c)
 * is a real shared object; each must be refused with a one-line reason that
 * names the check, and a good one must load and initialise. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "config/config.h"
#include "host/host.h"
#include "host/plugin_loader.h"

static const char *plugin_dir(void)
{
    const char *d = getenv("ROCK_TEST_PLUGIN_DIR");
    return d ? d : ".libs";
}

/* Load name and return the single problem line (or NULL if it loaded). */
static char *refusal(const char *name)
{
    struct rk_problems p = {0};
    struct rk_plugin *pl = rk_plugin_load(plugin_dir(), name, &p);
    char *line = NULL;
    if (pl) {
        assert_int_equal(p.n, 0);
        rk_plugin_unload(pl);
    } else {
        assert_int_equal(p.n, 1);
        assert_null(strchr(p.lines[0], '\n'));
        line = strdup(p.lines[0]);
    }
    rk_problems_free(&p);
    return line;
}

static void expect_refusal(const char *name, const char *needle1, const char *needle2)
{
    char *line = refusal(name);
    assert_non_null(line);
    if (!strstr(line, needle1) || (needle2 && !strstr(line, needle2)))
        fail_msg("refusal for %s lacks \"%s\"/\"%s\": %s", name, needle1, needle2 ? needle2 : "",
                 line);
    free(line);
}

static void test_good_plugin_loads(void **state)
{
    (void)state;
    assert_null(refusal("abi_good"));
}

static void test_wrong_magic(void **state)
{
    (void)state;
    expect_refusal("abi_bad_magic", "magic check failed", "0xdeadbeef");
}

static void test_other_major(void **state)
{
    (void)state;
    expect_refusal("abi_other_major", "ABI major check failed", "operator ABI 2.");
}

static void test_newer_minor(void **state)
{
    (void)state;
    /* Built with RK_OPERATOR_ABI_MINOR + 1: refused, naming both versions. */
    char need[64];
    snprintf(need, sizeof need, "needs operator ABI %d.%d, daemon provides only %d.%d",
             RK_OPERATOR_ABI_MAJOR, RK_OPERATOR_ABI_MINOR + 1, RK_OPERATOR_ABI_MAJOR,
             RK_OPERATOR_ABI_MINOR);
    expect_refusal("abi_newer_minor", "ABI minor check failed", need);
}

static void test_cap_without_op(void **state)
{
    (void)state;
    expect_refusal("abi_cap_without_op", "capability check failed", "entry point exec is NULL");
}

static void test_missing_symbol(void **state)
{
    (void)state;
    expect_refusal("abi_no_symbol", "descriptor symbol check failed", "rk_operator");
}

static void test_small_struct(void **state)
{
    (void)state;
    expect_refusal("abi_small_struct", "descriptor size check failed", NULL);
}

/* A plugin binary built against the exact 1.0 header (tests/plugins/abi-1.0)
 * loads: its smaller descriptor is copied by its own size, the 1.1 fields
 * read as zero, and its arrays are walked with the 1.0 strides. */
static void test_v10_plugin_loads(void **state)
{
    (void)state;
    struct rk_problems p = {0};
    struct rk_plugin *pl = rk_plugin_load(plugin_dir(), "testop_v10", &p);
    if (!pl)
        fail_msg("1.0 plugin refused: %s", p.n ? p.lines[0] : "?");
    assert_int_equal(pl->desc->abi_minor, 0);
    assert_int_equal(pl->desc->struct_size, RK_OPERATOR_SIZE_1_0);
    assert_true(pl->desc->struct_size < sizeof(struct rk_operator));
    assert_int_equal(pl->desc->config_key_size, 0);
    assert_int_equal(pl->desc->cap_msg_size, 0);
    assert_false(rk_plugin_minor_at_least(pl, 1));
    assert_string_equal(pl->desc->config[0].name, "proxy_base");
    size_t nkeys = 0;
    while (pl->desc->config[nkeys].name)
        nkeys++;
    assert_true(nkeys >= 3);
    char buf[128];
    assert_string_equal(
        rk_plugin_unsupported(pl, RK_CAP_PORT_FORWARD, "portforward", buf, sizeof buf),
        "testop backend does not support portforward in this release");
    assert_non_null(pl->ops.exec);
    assert_non_null(pl->ops.proxy_target);
    rk_plugin_unload(pl);
    rk_problems_free(&p);
}

/* A current plugin reports the current minor and the element sizes. */
static void test_current_plugin_minor(void **state)
{
    (void)state;
    struct rk_problems p = {0};
    struct rk_plugin *pl = rk_plugin_load(plugin_dir(), "testop", &p);
    assert_non_null(pl);
    assert_int_equal(pl->desc->abi_minor, RK_OPERATOR_ABI_MINOR);
    assert_int_equal(pl->desc->struct_size, sizeof(struct rk_operator));
    assert_int_equal(pl->desc->config_key_size, sizeof(struct rk_cfg_key));
    assert_true(rk_plugin_minor_at_least(pl, 1));
    rk_plugin_unload(pl);
    rk_problems_free(&p);
}

/* Elements larger than the core's are walked by the plugin's stride. */
static void test_wide_elements(void **state)
{
    (void)state;
    struct rk_problems p = {0};
    struct rk_plugin *pl = rk_plugin_load(plugin_dir(), "abi_wide_elements", &p);
    if (!pl)
        fail_msg("wide-element plugin refused: %s", p.n ? p.lines[0] : "?");
    assert_string_equal(pl->desc->config[0].name, "first_key");
    assert_string_equal(pl->desc->config[1].name, "second_key");
    assert_int_equal(pl->desc->config[1].type, RK_CFG_INT);
    assert_null(pl->desc->config[2].name);
    char buf[128];
    assert_string_equal(rk_plugin_unsupported(pl, RK_CAP_EXEC, "execute", buf, sizeof buf),
                        "wide: no exec");
    rk_plugin_unload(pl);
    rk_problems_free(&p);
}

/* An unresolved import is refused at load, in one line naming the symbol. */
static void test_unresolved_symbol(void **state)
{
    (void)state;
    expect_refusal("abi_unresolved", "unresolved symbol check failed",
                   "rk_fixture_missing_function");
}

/* arena_alloc keeps its documented contract: NULL on failure, no overflow. */
static void test_arena_alloc_contract(void **state)
{
    (void)state;
    struct rk_call *call = rk_call_new("rid", -1, 0);
    const struct rk_host *h = &rk_host_table;
    assert_null(h->arena_alloc(call, SIZE_MAX));
    assert_null(h->arena_alloc(call, SIZE_MAX - 8));
    /* (A large size that passes the guard would reach malloc, whose NULL is
     * passed through as well; not exercised: sanitizers abort on it.) */
    unsigned char *a = h->arena_alloc(call, 100);
    assert_non_null(a);
    for (int i = 0; i < 100; i++)
        assert_int_equal(a[i], 0);
    assert_non_null(h->arena_alloc(call, 0));
    assert_string_equal(h->arena_strdup(call, "abc"), "abc");
    /* 1.1 host members are present and reachable through RK_HOST_HAS. */
    assert_true(RK_HOST_HAS(h, log_call));
    h->log_call(call, RK_LOG_DEBUG, "log_call %s", "works");
    rk_call_free(call);
}

static void test_unknown_operator_lists_plugins(void **state)
{
    (void)state;
    char *line = refusal("no_such_operator");
    assert_non_null(line);
    assert_non_null(strstr(line, "unknown operator type \"no_such_operator\""));
    assert_non_null(strstr(line, "testop"));
    free(line);
}

static void test_check_descriptor_rules(void **state)
{
    (void)state;
    /* Direct checks of rules that need no shared object. */
    static const struct rk_operator_ops ops = {.struct_size = sizeof(struct rk_operator_ops)};
    struct rk_operator d = {
        .magic = RK_OPERATOR_MAGIC,
        .abi_major = RK_OPERATOR_ABI_MAJOR,
        .abi_minor = RK_OPERATOR_ABI_MINOR,
        .struct_size = sizeof(struct rk_operator),
        .abi_flags = RK_ABI_FLAGS,
        .name = "x",
        .backend_tag = "x",
        .display_name = "X",
        .flags = RK_OPF_THREADSAFE,
        .ops = &ops,
    };
    char why[512];
    assert_int_equal(rk_plugin_check_descriptor(&d, "x", why, sizeof why), -1);
    assert_non_null(strstr(why, "mandatory"));
    d.name = "Bad-Name";
    assert_int_equal(rk_plugin_check_descriptor(&d, NULL, why, sizeof why), -1);
    assert_non_null(strstr(why, "name check failed"));
    d.name = "x";
    d.flags = 0;
    assert_int_equal(rk_plugin_check_descriptor(&d, "x", why, sizeof why), -1);
    assert_non_null(strstr(why, "THREADSAFE"));
    d.flags = RK_OPF_THREADSAFE;
    d.caps = 1ull << 60;
    assert_int_equal(rk_plugin_check_descriptor(&d, "x", why, sizeof why), -1);
    assert_non_null(strstr(why, "unknown capability bits"));
    d.caps = 0;
    d.abi_flags = RK_ABI_FLAGS ^ 1u;
    assert_int_equal(rk_plugin_check_descriptor(&d, "x", why, sizeof why), -1);
    assert_non_null(strstr(why, "layout flags"));
}

/* Element sizes below the 1.0 element or above the bound are refused. */
static void test_element_size_rules(void **state)
{
    (void)state;
    struct rk_problems p = {0};
    struct rk_plugin *pl = rk_plugin_load(plugin_dir(), "abi_good", &p);
    assert_non_null(pl);
    /* Start from a descriptor that passes, then break one size at a time. */
    struct rk_operator d = *pl->desc;
    struct rk_operator_ops ops = pl->ops;
    d.ops = &ops;
    char why[512];
    assert_int_equal(rk_plugin_check_descriptor(&d, "abi_good", why, sizeof why), 0);
    d.config_key_size = 8;
    assert_int_equal(rk_plugin_check_descriptor(&d, "abi_good", why, sizeof why), -1);
    assert_non_null(strstr(why, "element size check failed: config_key_size is 8"));
    d.config_key_size = 0; /* 0 = the 1.0 size */
    assert_int_equal(rk_plugin_check_descriptor(&d, "abi_good", why, sizeof why), 0);
    d.cap_msg_size = 1u << 20;
    assert_int_equal(rk_plugin_check_descriptor(&d, "abi_good", why, sizeof why), -1);
    assert_non_null(strstr(why, "cap_msg_size"));
    rk_plugin_unload(pl);
    rk_problems_free(&p);
}

/* ABI 1.2: the asynchronous forms are optional, need their capability, and
 * are not read from a plugin built for an older minor; a 1.1 plugin binary
 * (testop_v11) and a 1.0 one load with none, the current testop and one built for 1.2
 * (testop_v12) have both. */
static void test_async_entry_points(void **state)
{
    (void)state;
    struct rk_problems p = {0};
    struct rk_plugin *pl = rk_plugin_load(plugin_dir(), "testop", &p);
    assert_non_null(pl);
    assert_non_null(pl->ops.exec_start);
    assert_non_null(pl->ops.session_run_start);
    struct rk_operator d = *pl->desc;
    struct rk_operator_ops ops = pl->ops;
    d.ops = &ops;
    char why[512];
    assert_int_equal(rk_plugin_check_descriptor(&d, "testop", why, sizeof why), 0);
    d.caps &= ~RK_CAP_SESSION_INTERACTIVE;
    d.caps &= ~RK_CAP_EXEC;
    ops.exec = NULL;
    assert_int_equal(rk_plugin_check_descriptor(&d, "testop", why, sizeof why), -1);
    assert_non_null(strstr(why, "entry point exec_start is set but capability 0x1"));
    ops.exec_start = NULL; /* without its async form the plugin is fine again */
    assert_int_equal(rk_plugin_check_descriptor(&d, "testop", why, sizeof why), 0);
    /* A descriptor that claims 1.1: whatever sits in the 1.2 slots is ignored. */
    d = *pl->desc;
    ops = pl->ops;
    d.ops = &ops;
    d.abi_minor = 1;
    struct rk_plugin_desc adopted;
    assert_int_equal(rk_plugin_adopt_descriptor(&d, "testop", &adopted, why, sizeof why), 0);
    assert_null(adopted.ops.exec_start);
    assert_null(adopted.ops.session_run_start);
    assert_non_null(adopted.ops.exec);
    rk_plugin_desc_free(&adopted);
    rk_plugin_unload(pl);
    rk_problems_free(&p);
    const char *old[] = {"testop_v10", "testop_v11", "testop_v12"};
    for (size_t i = 0; i < 3; i++) {
        struct rk_problems q = {0};
        struct rk_plugin *o = rk_plugin_load(plugin_dir(), old[i], &q);
        if (!o)
            fail_msg("%s refused: %s", old[i], q.n ? q.lines[0] : "?");
        assert_int_equal(o->desc->abi_minor, i);
        assert_non_null(o->ops.exec);
        if (i < 2) { /* the asynchronous forms came with 1.2 */
            assert_null(o->ops.exec_start);
            assert_null(o->ops.session_run_start);
        } else {
            assert_non_null(o->ops.exec_start);
            assert_non_null(o->ops.session_run_start);
        }
        rk_plugin_unload(o);
        rk_problems_free(&q);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good_plugin_loads),
        cmocka_unit_test(test_wrong_magic),
        cmocka_unit_test(test_other_major),
        cmocka_unit_test(test_newer_minor),
        cmocka_unit_test(test_cap_without_op),
        cmocka_unit_test(test_missing_symbol),
        cmocka_unit_test(test_small_struct),
        cmocka_unit_test(test_unknown_operator_lists_plugins),
        cmocka_unit_test(test_v10_plugin_loads),
        cmocka_unit_test(test_current_plugin_minor),
        cmocka_unit_test(test_wide_elements),
        cmocka_unit_test(test_unresolved_symbol),
        cmocka_unit_test(test_arena_alloc_contract),
        cmocka_unit_test(test_element_size_rules),
        cmocka_unit_test(test_check_descriptor_rules),
        cmocka_unit_test(test_async_entry_points),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
