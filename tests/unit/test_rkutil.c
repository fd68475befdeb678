/* SPDX-License-Identifier: Apache-2.0 */
/* librkutil (lib/rkutil.c): the helpers the core and the plugins share. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "rkutil.h"

static void check(char *got, const char *want)
{
    assert_non_null(got);
    assert_string_equal(got, want);
    free(got);
}

static void test_shell_quote(void **state)
{
    (void)state;
    check(rku_shell_quote("echo"), "echo");
    check(rku_shell_quote(""), "''");
    check(rku_shell_quote(NULL), "''");
    check(rku_shell_quote("hello world"), "'hello world'");
    check(rku_shell_quote("it's"), "'it'\"'\"'s'");
    check(rku_shell_quote("-_@%+=:,./"), "-_@%+=:,./");
    check(rku_shell_quote("a$b"), "'a$b'");
    check(rku_shell_quote("\xc3\xa9"), "'\xc3\xa9'"); /* non-ASCII is never "safe" */
}

static void test_py_repr(void **state)
{
    (void)state;
    check(rku_py_repr("", 0), "''");
    check(rku_py_repr("hello\n", 6), "'hello\\n'");
    check(rku_py_repr("it's", 4), "\"it's\"");
    check(rku_py_repr("a'b\"c", 5), "'a\\'b\"c'");
    check(rku_py_repr("t\tb\\", 4), "'t\\tb\\\\'");
    check(rku_py_repr("\x01\x7f", 2), "'\\x01\\x7f'");
    check(rku_py_repr("\xc3\xa9", 2), "'\xc3\xa9'");                  /* printable UTF-8 passes */
    check(rku_py_repr("\xc2\x85", 2), "'\\x85'");                     /* C1 control escaped */
    check(rku_py_repr("a\xff", 2), "'a\\udcff'");                     /* undecodable byte */
    check(rku_py_repr("\xed\xa0\x80", 3), "'\\udced\\udca0\\udc80'"); /* surrogate */
    check(rku_py_repr("\0x", 2), "'\\x00x'");
}

static void test_py_float(void **state)
{
    (void)state;
    static const struct {
        double v;
        const char *want;
    } cases[] = {
        {3, "3.0"},
        {2.5, "2.5"},
        {0.001, "0.001"},
        {0.1, "0.1"},
        {1200, "1200.0"},
        {1e16, "1e+16"},
        {1.5e-5, "1.5e-05"},
        {0.0001, "0.0001"},
        {0, "0.0"},
        {-0.0, "-0.0"},
        {3.001, "3.001"},
        {9.99, "9.99"},
        {123456789, "123456789.0"},
        {-2.75, "-2.75"},
        {1e300, "1e+300"},
    };
    char out[64];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rku_py_float(cases[i].v, out);
        assert_string_equal(out, cases[i].want);
    }
}

static void test_utf8_decode(void **state)
{
    (void)state;
    unsigned cp = 0;
    assert_int_equal(rku_utf8_decode((const unsigned char *)"A", 1, &cp), 1);
    assert_int_equal(cp, 'A');
    assert_int_equal(rku_utf8_decode((const unsigned char *)"\xe2\x82\xac", 3, &cp), 3);
    assert_int_equal(cp, 0x20ac);
    assert_int_equal(rku_utf8_decode((const unsigned char *)"\xf0\x9f\x98\x80", 4, &cp), 4);
    assert_int_equal(cp, 0x1f600);
    assert_int_equal(rku_utf8_decode((const unsigned char *)"\xc0\xaf", 2, &cp), 0); /* overlong */
    assert_int_equal(rku_utf8_decode((const unsigned char *)"\xe2\x82", 2, &cp), 0); /* short */
    assert_int_equal(rku_utf8_decode((const unsigned char *)"\xf4\x90\x80\x80", 4, &cp), 0);
    assert_int_equal(rku_utf8_decode((const unsigned char *)"", 0, &cp), 0);
}

static void test_strip(void **state)
{
    (void)state;
    const char *s = " \t\n ab c \r\v\f";
    size_t n = strlen(s);
    rku_strip(&s, &n);
    assert_int_equal(n, 4);
    assert_memory_equal(s, "ab c", 4);
    const char *blank = " \t\n";
    n = strlen(blank);
    rku_strip(&blank, &n);
    assert_int_equal(n, 0);
    const char *empty = "";
    n = 0;
    rku_strip(&empty, &n);
    assert_int_equal(n, 0);
    const char *inner = "x";
    n = 1;
    rku_strip(&inner, &n);
    assert_int_equal(n, 1);
    assert_int_equal(*inner, 'x');
}

static void test_random_hex(void **state)
{
    (void)state;
    char a[33], b[33];
    rku_random_hex(a, 32);
    rku_random_hex(b, 32);
    assert_int_equal(strlen(a), 32);
    assert_int_equal(strspn(a, "0123456789abcdef"), 32);
    assert_string_not_equal(a, b);
    char odd[8];
    rku_random_hex(odd, 7);
    assert_int_equal(strlen(odd), 7);
}

/* rku_time_after_ms: now + ms on that clock, nanoseconds normalised. */
static void test_time_after_ms(void **state)
{
    (void)state;
    struct timespec now, t;
    for (int64_t ms = 0; ms <= 2500; ms += 499) {
        clock_gettime(CLOCK_MONOTONIC, &now);
        t = rku_time_after_ms(CLOCK_MONOTONIC, ms);
        assert_true(t.tv_nsec >= 0 && t.tv_nsec < 1000000000L);
        int64_t d = (int64_t)(t.tv_sec - now.tv_sec) * 1000 + (t.tv_nsec - now.tv_nsec) / 1000000;
        assert_true(d >= ms && d <= ms + 50);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shell_quote),   cmocka_unit_test(test_py_repr),
        cmocka_unit_test(test_py_float),      cmocka_unit_test(test_utf8_decode),
        cmocka_unit_test(test_random_hex),    cmocka_unit_test(test_strip),
        cmocka_unit_test(test_time_after_ms),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
