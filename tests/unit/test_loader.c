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

#include "config.h"
#include "plugin_loader.h"

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

#define RK_STR_(x) #x
#define RK_STR(x) RK_STR_(x)

static void test_other_major(void **state)
{
    (void)state;
    expect_refusal("abi_other_major", "ABI major check failed",
                   "operator ABI 2." RK_STR(RK_OPERATOR_ABI_MINOR) ", daemon provides "
                   "1." RK_STR(RK_OPERATOR_ABI_MINOR));
}

static void test_newer_minor(void **state)
{
    (void)state;
    expect_refusal("abi_newer_minor", "ABI minor check failed", "1.1");
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
        cmocka_unit_test(test_check_descriptor_rules),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
