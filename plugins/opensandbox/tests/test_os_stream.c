/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file test_os_stream.c
 * @brief Unit tests for the execd event-stream parser.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../os_internal.h"

/** Captured output of one parse. */
struct capture {
    struct os_sb out;
    struct os_sb err;
    struct os_sb order; /**< 'o' / 'e' per write */
    size_t cap;         /**< total bytes accepted before returning RK_E_TOO_LARGE (0 = none) */
};

/** Test sink. */
static rk_status cap_write(void *ctx, enum rk_stream stream, const char *buf, size_t len)
{
    struct capture *c = ctx;
    if (c->cap && c->out.len + c->err.len + len > c->cap)
        return RK_E_TOO_LARGE;
    os_sb_putn(stream == RK_STREAM_STDERR ? &c->err : &c->out, buf, len);
    os_sb_putn(&c->order, stream == RK_STREAM_STDERR ? "e" : "o", 1);
    return RK_OK;
}

/** Release a capture. */
static void cap_free(struct capture *c)
{
    os_sb_free(&c->out);
    os_sb_free(&c->err);
    os_sb_free(&c->order);
}

static const char *const STREAM_OK =
    "{\"type\":\"init\",\"text\":\"9f2c\",\"timestamp\":1}\n\n"
    "{\"type\":\"stdout\",\"text\":\"hi\",\"timestamp\":2}\n\n"
    "{\"type\":\"ping\",\"text\":\"pong\",\"timestamp\":3}\n\n"
    "{\"type\":\"stdout\",\"text\":\"\\n\",\"timestamp\":3}\n\n"
    "{\"type\":\"stderr\",\"text\":\"oops \\u003cx\\u003e \\ud83d\\ude00\",\"timestamp\":4}\n\n"
    "{\"type\":\"execution_complete\",\"timestamp\":5,\"execution_time\":9}\n\n"
    "{\"type\":\"ping\",\"text\":\"pong\",\"timestamp\":6}\n\n";

/** Parse `data` split at `split` (0 = whole) and return the final status. */
static rk_status parse_split(const char *data, size_t len, size_t split, struct capture *c,
                             struct os_stream *st)
{
    os_stream_init(st, cap_write, c, 0);
    rk_status s = RK_OK;
    if (split && split < len) {
        s = os_stream_feed(st, data, split);
        if (s == RK_OK)
            s = os_stream_feed(st, data + split, len - split);
    } else {
        s = os_stream_feed(st, data, len);
    }
    if (s == RK_OK)
        s = os_stream_finish(st);
    return s;
}

/** A complete stream split at every byte offset gives identical results. */
static void test_split_every_offset(void **state)
{
    (void)state;
    size_t len = strlen(STREAM_OK);
    for (size_t split = 0; split <= len; split++) {
        struct capture c = {0};
        struct os_stream st;
        assert_int_equal(parse_split(STREAM_OK, len, split, &c, &st), RK_OK);
        assert_string_equal(c.out.p, "hi\n\n");
        assert_string_equal(c.err.p, "oops <x> \xf0\x9f\x98\x80\n");
        assert_true(st.completed);
        assert_true(st.has_exit_code);
        assert_int_equal(st.exit_code, 0);
        assert_false(st.timed_out);
        assert_string_equal(st.init_id, "9f2c");
        assert_null(st.error_text);
        os_stream_free(&st);
        cap_free(&c);
    }
}

/** One byte per feed. */
static void test_byte_by_byte(void **state)
{
    (void)state;
    struct capture c = {0};
    struct os_stream st;
    os_stream_init(&st, cap_write, &c, 0);
    for (const char *p = STREAM_OK; *p; p++)
        assert_int_equal(os_stream_feed(&st, p, 1), RK_OK);
    assert_int_equal(os_stream_finish(&st), RK_OK);
    assert_string_equal(c.out.p, "hi\n\n");
    assert_string_equal(c.order.p, "oooee");
    os_stream_free(&st);
    cap_free(&c);
}

/** CRLF line ends, SSE "data:" prefixes, comments and event/id lines are tolerated. */
static void test_crlf_and_sse(void **state)
{
    (void)state;
    const char *s =
        "event: message\r\n: comment\r\nid: 1\r\nretry: 5\r\n"
        "data: {\"type\":\"stdout\",\"text\":\"a\"}\r\n\r\n"
        "\r\n\r\n"
        "data:{\"type\":\"stdout\",\"text\":\"b\"}\r\n\r\n"
        "not json at all\r\n"
        "{\"type\":\"error\",\"error\":{\"ename\":\"CommandExecError\",\"evalue\":\"7\","
        "\"traceback\":[\"exit status 7\"]}}\r\n\r\n";
    struct capture c = {0};
    struct os_stream st;
    assert_int_equal(parse_split(s, strlen(s), 0, &c, &st), RK_OK);
    assert_string_equal(c.out.p, "a\nb\n");
    assert_true(st.has_exit_code);
    assert_int_equal(st.exit_code, 7);
    assert_false(st.completed);
    assert_null(st.error_text);
    os_stream_free(&st);
    cap_free(&c);
}

/** Several events in one read, stdout/stderr order preserved. */
static void test_multiple_events_per_read(void **state)
{
    (void)state;
    const char *s = "{\"type\":\"stdout\",\"text\":\"1\"}\n{\"type\":\"stderr\",\"text\":\"2\"}\n"
                    "{\"type\":\"stdout\",\"text\":\"3\"}\n{\"type\":\"execution_complete\"}\n";
    struct capture c = {0};
    struct os_stream st;
    assert_int_equal(parse_split(s, strlen(s), 0, &c, &st), RK_OK);
    assert_string_equal(c.order.p, "ooeeoo");
    assert_string_equal(c.out.p, "1\n3\n");
    assert_string_equal(c.err.p, "2\n");
    os_stream_free(&st);
    cap_free(&c);
}

/** A stream without a terminal event is an upstream error, not success. */
static void test_missing_terminal(void **state)
{
    (void)state;
    const char *s = "{\"type\":\"init\",\"text\":\"x\"}\n\n{\"type\":\"stdout\",\"text\":\"a\"}\n\n"
                    "{\"type\":\"ping\",\"text\":\"pong\"}\n\n";
    struct capture c = {0};
    struct os_stream st;
    assert_int_equal(parse_split(s, strlen(s), 0, &c, &st), RK_E_UPSTREAM);
    assert_string_equal(st.error_text,
                        "upstream stream ended early: execd closed the event stream before the "
                        "command's completion event; the command may have run, so it was not "
                        "retried");
    assert_false(st.has_exit_code);
    os_stream_free(&st);
    cap_free(&c);

    struct capture c2 = {0};
    assert_int_equal(parse_split("", 0, 0, &c2, &st), RK_E_UPSTREAM);
    os_stream_free(&st);
    cap_free(&c2);
}

/** An unterminated last line is parsed at EOF. */
static void test_unterminated_tail(void **state)
{
    (void)state;
    const char *s = "{\"type\":\"stdout\",\"text\":\"a\"}\n{\"type\":\"execution_complete\"}";
    struct capture c = {0};
    struct os_stream st;
    assert_int_equal(parse_split(s, strlen(s), 0, &c, &st), RK_OK);
    assert_true(st.completed);
    os_stream_free(&st);
    cap_free(&c);
}

/** error event named like a timeout -> timed_out; killed -> exit -1; start failure -> text. */
static void test_error_events(void **state)
{
    (void)state;
    struct capture c = {0};
    struct os_stream st;
    const char *t =
        "{\"type\":\"error\",\"error\":{\"ename\":\"TimeoutError\",\"evalue\":\"x\"}}\n";
    assert_int_equal(parse_split(t, strlen(t), 0, &c, &st), RK_OK);
    assert_true(st.timed_out);
    assert_false(st.has_exit_code);
    os_stream_free(&st);

    const char *k =
        "{\"type\":\"error\",\"error\":{\"ename\":\"CommandExecError\",\"evalue\":\"-1\","
        "\"traceback\":[\"signal: killed\"]}}\n";
    assert_int_equal(parse_split(k, strlen(k), 0, &c, &st), RK_OK);
    assert_true(st.has_exit_code);
    assert_int_equal(st.exit_code, -1);
    assert_string_equal(st.error_text, "signal: killed");
    os_stream_free(&st);

    const char *f = "{\"type\":\"error\",\"error\":{\"ename\":\"StartError\",\"evalue\":\"exec: "
                    "not found\"}}\n";
    assert_int_equal(parse_split(f, strlen(f), 0, &c, &st), RK_OK);
    assert_false(st.has_exit_code);
    assert_string_equal(st.error_text, "StartError: exec: not found");
    os_stream_free(&st);
    cap_free(&c);
}

/** Session timeout arrives as a bare error object without a trailing newline. */
static void test_bare_error_object(void **state)
{
    (void)state;
    const char *s =
        "{\"type\":\"init\",\"text\":\"sess\"}\n\n{\"type\":\"stdout\",\"text\":\"a\"}\n\n"
        "{\"code\":\"RUNTIME_ERROR\",\"message\":\"error running in session. timeout "
        "after 30s\"}";
    size_t len = strlen(s);
    for (size_t split = 0; split <= len; split++) {
        struct capture c = {0};
        struct os_stream st;
        assert_int_equal(parse_split(s, len, split, &c, &st), RK_OK);
        assert_true(st.timed_out);
        assert_string_equal(c.out.p, "a\n");
        os_stream_free(&st);
        cap_free(&c);
    }
    const char *e = "{\"code\":\"RUNTIME_ERROR\",\"message\":\"error running in session. read "
                    "stdout: bufio.Scanner: token too long\"}";
    struct capture c = {0};
    struct os_stream st;
    assert_int_equal(parse_split(e, strlen(e), 0, &c, &st), RK_OK);
    assert_false(st.timed_out);
    assert_non_null(strstr(st.error_text, "token too long"));
    os_stream_free(&st);
    cap_free(&c);
}

/** Events after the terminal one are ignored. */
static void test_after_terminal(void **state)
{
    (void)state;
    const char *s = "{\"type\":\"execution_complete\"}\n{\"type\":\"stdout\",\"text\":\"late\"}\n"
                    "{\"code\":\"X\",\"message\":\"timeout\"}\n";
    struct capture c = {0};
    struct os_stream st;
    assert_int_equal(parse_split(s, strlen(s), 0, &c, &st), RK_OK);
    assert_null(c.out.p);
    assert_false(st.timed_out);
    os_stream_free(&st);
    cap_free(&c);
}

/** A sink refusing more output stops the parser with its status. */
static void test_sink_cap_propagates(void **state)
{
    (void)state;
    const char *s =
        "{\"type\":\"stdout\",\"text\":\"0123456789\"}\n"
        "{\"type\":\"stdout\",\"text\":\"0123456789\"}\n{\"type\":\"execution_complete\"}\n";
    struct capture c = {.cap = 15};
    struct os_stream st;
    os_stream_init(&st, cap_write, &c, 0);
    assert_int_equal(os_stream_feed(&st, s, strlen(s)), RK_E_TOO_LARGE);
    assert_int_equal(os_stream_feed(&st, "x", 1), RK_E_TOO_LARGE);
    assert_int_equal(os_stream_finish(&st), RK_E_TOO_LARGE);
    assert_string_equal(c.out.p, "0123456789\n");
    os_stream_free(&st);
    cap_free(&c);
}

/** A line longer than the parser's own cap fails cleanly with bounded memory. */
static void test_line_cap(void **state)
{
    (void)state;
    struct capture c = {0};
    struct os_stream st;
    os_stream_init(&st, cap_write, &c, 64);
    char chunk[40];
    memset(chunk, 'a', sizeof(chunk));
    assert_int_equal(os_stream_feed(&st, "{\"type\":\"stdout\",\"text\":\"", 25), RK_OK);
    assert_int_equal(os_stream_feed(&st, chunk, sizeof(chunk)), RK_E_TOO_LARGE);
    assert_true(st.cap <= 4096);
    os_stream_free(&st);
    cap_free(&c);
}

/** Run the suite. */
int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split_every_offset), cmocka_unit_test(test_byte_by_byte),
        cmocka_unit_test(test_crlf_and_sse),       cmocka_unit_test(test_multiple_events_per_read),
        cmocka_unit_test(test_missing_terminal),   cmocka_unit_test(test_unterminated_tail),
        cmocka_unit_test(test_error_events),       cmocka_unit_test(test_bare_error_object),
        cmocka_unit_test(test_after_terminal),     cmocka_unit_test(test_sink_cap_propagates),
        cmocka_unit_test(test_line_cap),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
