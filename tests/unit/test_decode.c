/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for core/decode.c: Python-compatible bytes.decode(). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/decode.h"

/* Decode and expect success with exactly want (want_len bytes). */
static void expect_ok(const char *in, size_t len, const char *enc, const char *errors,
                      const char *want, size_t want_len)
{
    char *out = NULL;
    size_t out_len = 0;
    char msg[256];
    enum rk_decode_rc rc = rk_decode(in, len, enc, errors, &out, &out_len, msg, sizeof msg);
    assert_int_equal(rc, RK_DECODE_OK);
    assert_non_null(out);
    assert_int_equal(out_len, want_len);
    assert_memory_equal(out, want, want_len);
    assert_int_equal(out[out_len], '\0');
    free(out);
}

/* Decode and expect failure rc with message want. */
static void expect_err(const char *in, size_t len, const char *enc, const char *errors,
                       enum rk_decode_rc want_rc, const char *want)
{
    char *out = (char *)1;
    size_t out_len = 7;
    char msg[256];
    enum rk_decode_rc rc = rk_decode(in, len, enc, errors, &out, &out_len, msg, sizeof msg);
    assert_int_equal(rc, want_rc);
    assert_null(out);
    assert_string_equal(msg, want);
}

#define OK(in, enc, errors, want) expect_ok(in, sizeof(in) - 1, enc, errors, want, sizeof(want) - 1)
#define ERR(in, enc, errors, rc, want) expect_err(in, sizeof(in) - 1, enc, errors, rc, want)

/* Valid UTF-8 of every length passes through unchanged; defaults apply. */
static void test_valid_utf8(void **state)
{
    (void)state;
    OK("hello", NULL, NULL, "hello");
    OK("a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80z", "utf-8", "strict",
       "a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80z");
    OK("\xed\x9f\xbf\xee\x80\x80\xf4\x8f\xbf\xbf", "utf8", "strict",
       "\xed\x9f\xbf\xee\x80\x80\xf4\x8f\xbf\xbf");
    OK("", "UTF-8", "strict", "");
    expect_ok("a\0b", 3, "utf_8", "strict", "a\0b", 3);
}

/* The invalid start byte message of Python. */
static void test_invalid_start_byte(void **state)
{
    (void)state;
    ERR("hello\xffworld", "utf-8", "strict", RK_DECODE_ERROR,
        "'utf-8' codec can't decode byte 0xff in position 5: invalid start byte");
    ERR("\x80", NULL, NULL, RK_DECODE_ERROR,
        "'utf-8' codec can't decode byte 0x80 in position 0: invalid start byte");
    ERR("ab\xf5\x80\x80\x80", "utf-8", "strict", RK_DECODE_ERROR,
        "'utf-8' codec can't decode byte 0xf5 in position 2: invalid start byte");
}

/* Sequences cut short by the end of the data. */
static void test_truncated(void **state)
{
    (void)state;
    ERR("x\xe2\x82", "utf-8", "strict", RK_DECODE_ERROR,
        "'utf-8' codec can't decode bytes in position 1-2: unexpected end of data");
    ERR("\xe2", "utf-8", "strict", RK_DECODE_ERROR,
        "'utf-8' codec can't decode byte 0xe2 in position 0: unexpected end of data");
    ERR("\xf0\x9f\x98", "utf-8", "strict", RK_DECODE_ERROR,
        "'utf-8' codec can't decode bytes in position 0-2: unexpected end of data");
    /* A bad continuation wins over the end of data. */
    ERR("\xe2\x41", "utf-8", "strict", RK_DECODE_ERROR,
        "'utf-8' codec can't decode byte 0xe2 in position 0: invalid continuation byte");
    ERR("\xe2\x82\x41", "utf-8", "strict", RK_DECODE_ERROR,
        "'utf-8' codec can't decode bytes in position 0-1: invalid continuation byte");
}

/* Overlong forms are refused like CPython does. */
static void test_overlong(void **state)
{
    (void)state;
    ERR("\xc0\x80", "utf-8", "strict", RK_DECODE_ERROR,
        "'utf-8' codec can't decode byte 0xc0 in position 0: invalid start byte");
    ERR("\xc1\xbf", "utf-8", "strict", RK_DECODE_ERROR,
        "'utf-8' codec can't decode byte 0xc1 in position 0: invalid start byte");
    ERR("\xe0\x80\x80", "utf-8", "strict", RK_DECODE_ERROR,
        "'utf-8' codec can't decode byte 0xe0 in position 0: invalid continuation byte");
    ERR("\xf0\x80\x80\x80", "utf-8", "strict", RK_DECODE_ERROR,
        "'utf-8' codec can't decode byte 0xf0 in position 0: invalid continuation byte");
    ERR("\xf4\x90\x80\x80", "utf-8", "strict", RK_DECODE_ERROR,
        "'utf-8' codec can't decode byte 0xf4 in position 0: invalid continuation byte");
}

/* Encoded surrogates are invalid. */
static void test_surrogates(void **state)
{
    (void)state;
    ERR("ok\xed\xa0\x80", "utf-8", "strict", RK_DECODE_ERROR,
        "'utf-8' codec can't decode byte 0xed in position 2: invalid continuation byte");
    /* replace: 0xed, then 0xa0 and 0x80 are stray continuation bytes. */
    OK("\xed\xa0\x80", "utf-8", "replace", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");
}

/* replace emits one U+FFFD per maximal invalid subpart. */
static void test_replace(void **state)
{
    (void)state;
    OK("hello\xffworld", "utf-8", "replace", "hello\xef\xbf\xbdworld");
    OK("\xe2\x82X", "utf-8", "replace", "\xef\xbf\xbdX");
    OK("a\xf0\x9f\x98", "utf-8", "replace", "a\xef\xbf\xbd");
    OK("\xff\xfe", "ascii", "replace", "\xef\xbf\xbd\xef\xbf\xbd");
}

/* ignore drops invalid bytes. */
static void test_ignore(void **state)
{
    (void)state;
    OK("a\xff-\xe2\x82z", "utf-8", "ignore", "a-z");
    OK("a\x80\x81z", "ascii", "ignore", "az");
}

/* backslashreplace writes \xNN per byte of the bad range. */
static void test_backslashreplace(void **state)
{
    (void)state;
    OK("a\xff-", "utf-8", "backslashreplace", "a\\xff-");
    OK("\xe2\x82X", "utf-8", "backslashreplace", "\\xe2\\x82X");
    OK("\xe9t\xe9", "ascii", "backslashreplace", "\\xe9t\\xe9");
}

/* latin-1 maps every byte; aliases resolve. */
static void test_latin1(void **state)
{
    (void)state;
    unsigned char all[256];
    for (int i = 0; i < 256; i++)
        all[i] = (unsigned char)i;
    char *out = NULL;
    size_t out_len = 0;
    char msg[128];
    assert_int_equal(
        rk_decode((const char *)all, 256, "latin-1", "strict", &out, &out_len, msg, sizeof msg),
        RK_DECODE_OK);
    assert_int_equal(out_len, 128 + 2 * 128);
    /* Round trip: UTF-8 back to latin-1 gives the original bytes. */
    unsigned char back[256];
    size_t j = 0;
    for (size_t i = 0; i < out_len; i++) {
        unsigned char c = (unsigned char)out[i];
        if (c < 0x80) {
            back[j++] = c;
        } else {
            assert_true(c == 0xc2 || c == 0xc3);
            back[j++] = (unsigned char)(((c & 0x1f) << 6) | ((unsigned char)out[i + 1] & 0x3f));
            i++;
        }
    }
    assert_int_equal(j, 256);
    assert_memory_equal(back, all, 256);
    free(out);
    OK("caf\xe9", "latin1", NULL, "caf\xc3\xa9");
    OK("caf\xe9", "ISO-8859-1", NULL, "caf\xc3\xa9");
    OK("caf\xe9", "iso8859_1", NULL, "caf\xc3\xa9");
}

/* ascii strict failure text. */
static void test_ascii(void **state)
{
    (void)state;
    OK("plain", "ascii", "strict", "plain");
    OK("plain", "US-ASCII", "strict", "plain");
    ERR("ab\xe9", "ascii", "strict", RK_DECODE_ERROR,
        "'ascii' codec can't decode byte 0xe9 in position 2: ordinal not in range(128)");
}

/* Unknown names give Python's LookupError texts. */
static void test_unknown_names(void **state)
{
    (void)state;
    ERR("x", "klingon", "strict", RK_DECODE_UNKNOWN_ENCODING, "unknown encoding: klingon");
    ERR("x\xff", "utf-8", "bogus", RK_DECODE_UNKNOWN_HANDLER, "unknown error handler name 'bogus'");
    /* Like Python, the handler is only looked up when it is needed. */
    OK("fine", "utf-8", "bogus", "fine");
    assert_int_equal(rk_decode_known_encoding("Utf-8"), 1);
    assert_int_equal(rk_decode_known_encoding("utf-16"), 0);
}

/* Runs the decode tests. */
int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_utf8),    cmocka_unit_test(test_invalid_start_byte),
        cmocka_unit_test(test_truncated),     cmocka_unit_test(test_overlong),
        cmocka_unit_test(test_surrogates),    cmocka_unit_test(test_replace),
        cmocka_unit_test(test_ignore),        cmocka_unit_test(test_backslashreplace),
        cmocka_unit_test(test_latin1),        cmocka_unit_test(test_ascii),
        cmocka_unit_test(test_unknown_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
