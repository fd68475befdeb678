/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file os_stream.c
 * @brief Incremental parser for execd's event stream (newline-delimited JSON, SSE tolerant).
 *
 * Each event is one JSON object on its own line. Bytes may arrive split at any
 * offset; complete lines are parsed, the remainder is kept for the next feed.
 * stdout/stderr events carry one line without its terminator; the parser
 * writes each as text + "\n" (a "\n" text is an empty line).
 */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "os_internal.h"

/** Reset a parser; `out` receives reconstructed output. */
void os_stream_init(struct os_stream *st, os_output_fn out, void *ctx, size_t max_line)
{
    memset(st, 0, sizeof(*st));
    st->out = out;
    st->out_ctx = ctx;
    st->max_line = max_line ? max_line : OS_MAX_EVENT_LINE;
    st->status = RK_OK;
}

/** Release the parser's buffers. */
void os_stream_free(struct os_stream *st)
{
    free(st->buf);
    free(st->error_text);
    st->buf = NULL;
    st->error_text = NULL;
    st->len = st->cap = st->scanned = 0;
}

/** Record the first failure text. */
static void set_error_text(struct os_stream *st, const char *text)
{
    if (st->error_text)
        return;
    st->error_text = strdup(text ? text : "unknown error");
    if (!st->error_text)
        st->status = RK_E_NOMEM;
}

/** Parse a decimal integer string fully; returns 1 on success. */
static int parse_int(const char *s, int *out)
{
    if (!s || !*s)
        return 0;
    errno = 0;
    char *end;
    long v = strtol(s, &end, 10);
    while (*end && isspace((unsigned char)*end))
        end++;
    if (errno || *end || v < -2147483647L || v > 2147483647L)
        return 0;
    *out = (int)v;
    return 1;
}

/** Handle an `error` event: exit code, timeout or failure text. */
static void on_error_event(struct os_stream *st, json_object *ev)
{
    json_object *err = NULL, *v;
    const char *ename = NULL, *evalue = NULL, *tb0 = NULL;
    if (json_object_object_get_ex(ev, "error", &err) &&
        json_object_is_type(err, json_type_object)) {
        if (json_object_object_get_ex(err, "ename", &v))
            ename = json_object_get_string(v);
        if (json_object_object_get_ex(err, "evalue", &v))
            evalue = json_object_get_string(v);
        if (json_object_object_get_ex(err, "traceback", &v) &&
            json_object_is_type(v, json_type_array) && json_object_array_length(v) > 0)
            tb0 = json_object_get_string(json_object_array_get_idx(v, 0));
    }
    st->terminal = 1;
    if (ename && os_contains_ci(ename, "timeout")) {
        st->timed_out = 1;
        return;
    }
    int code;
    if (parse_int(evalue, &code)) {
        st->has_exit_code = 1;
        st->exit_code = code;
        if (code < 0 && tb0)
            set_error_text(st, tb0);
        return;
    }
    struct os_sb sb = {0};
    os_sb_printf(&sb, "%s: %s", ename ? ename : "Error", evalue ? evalue : (tb0 ? tb0 : ""));
    char *t = os_sb_take(&sb);
    if (!t) {
        st->status = RK_E_NOMEM;
        return;
    }
    set_error_text(st, t);
    free(t);
}

/** Handle a bare `{"code","message"}` object (session timeout / server failure). */
static void on_bare_error(struct os_stream *st, json_object *ev)
{
    json_object *v;
    const char *code = NULL, *msg = NULL;
    if (json_object_object_get_ex(ev, "code", &v))
        code = json_object_get_string(v);
    if (json_object_object_get_ex(ev, "message", &v))
        msg = json_object_get_string(v);
    st->terminal = 1;
    st->bare_error = 1;
    if (os_contains_ci(msg, "timeout") || os_contains_ci(code, "timeout")) {
        st->timed_out = 1;
        return;
    }
    struct os_sb sb = {0};
    if (code && msg)
        os_sb_printf(&sb, "%s: %s", code, msg);
    else
        os_sb_puts(&sb, msg ? msg : code);
    char *t = os_sb_take(&sb);
    if (!t) {
        st->status = RK_E_NOMEM;
        return;
    }
    set_error_text(st, t);
    free(t);
}

/** Emit one output line to the consumer. */
static void emit_line(struct os_stream *st, enum rk_stream stream, const char *text, size_t n)
{
    if (!st->out)
        return;
    rk_status s;
    if (n == 1 && text[0] == '\n') {
        s = st->out(st->out_ctx, stream, "\n", 1);
    } else {
        s = n ? st->out(st->out_ctx, stream, text, n) : RK_OK;
        if (s == RK_OK && (n == 0 || text[n - 1] != '\n'))
            s = st->out(st->out_ctx, stream, "\n", 1);
    }
    if (s != RK_OK)
        st->status = s;
}

/** Parse and dispatch one complete line (without its '\n'). */
static void handle_line(struct os_stream *st, char *line, size_t n)
{
    if (n && line[n - 1] == '\r')
        n--;
    while (n && (line[0] == ' ' || line[0] == '\t')) {
        line++;
        n--;
    }
    if (n == 0 || line[0] == ':')
        return;
    if (n >= 5 && strncmp(line, "data:", 5) == 0) {
        line += 5;
        n -= 5;
        while (n && line[0] == ' ') {
            line++;
            n--;
        }
    } else if ((n >= 6 && strncmp(line, "event:", 6) == 0) ||
               (n >= 3 && strncmp(line, "id:", 3) == 0) ||
               (n >= 6 && strncmp(line, "retry:", 6) == 0)) {
        return;
    }
    if (n == 0)
        return;
    json_tokener *tok = json_tokener_new_ex(64);
    if (!tok) {
        st->status = RK_E_NOMEM;
        return;
    }
    json_object *ev = json_tokener_parse_ex(tok, line, (int)n);
    json_tokener_free(tok);
    if (!ev || !json_object_is_type(ev, json_type_object)) {
        json_object_put(ev);
        return; /* unparsable line: ignored (contract 4.3) */
    }
    json_object *tv, *txt;
    const char *type = NULL;
    if (json_object_object_get_ex(ev, "type", &tv))
        type = json_object_get_string(tv);
    if (!type) {
        if (!st->terminal && (json_object_object_get_ex(ev, "code", NULL) ||
                              json_object_object_get_ex(ev, "message", NULL)))
            on_bare_error(st, ev);
    } else if (st->terminal) {
        /* After the terminal event only pings may follow; ignore everything. */
    } else if (strcmp(type, "stdout") == 0 || strcmp(type, "stderr") == 0) {
        const char *t = "";
        size_t tn = 0;
        if (json_object_object_get_ex(ev, "text", &txt)) {
            t = json_object_get_string(txt);
            tn = (size_t)json_object_get_string_len(txt);
        }
        emit_line(st, type[3] == 'o' ? RK_STREAM_STDOUT : RK_STREAM_STDERR, t, tn);
    } else if (strcmp(type, "init") == 0) {
        if (json_object_object_get_ex(ev, "text", &txt)) {
            const char *t = json_object_get_string(txt);
            if (t && strlen(t) < sizeof(st->init_id))
                strcpy(st->init_id, t);
        }
    } else if (strcmp(type, "execution_complete") == 0) {
        st->terminal = 1;
        st->completed = 1;
        st->has_exit_code = 1;
        st->exit_code = 0;
    } else if (strcmp(type, "error") == 0) {
        on_error_event(st, ev);
    }
    json_object_put(ev);
}

/** Feed bytes; parses every complete line. Returns the sticky status. */
rk_status os_stream_feed(struct os_stream *st, const char *data, size_t len)
{
    if (st->status != RK_OK)
        return st->status;
    if (st->len + len + 1 > st->cap) {
        size_t cap = st->cap ? st->cap : 4096;
        while (cap < st->len + len + 1)
            cap *= 2;
        char *b = realloc(st->buf, cap);
        if (!b)
            return st->status = RK_E_NOMEM;
        st->buf = b;
        st->cap = cap;
    }
    memcpy(st->buf + st->len, data, len);
    st->len += len;
    size_t start = 0;
    size_t pos = st->scanned;
    while (pos < st->len && st->status == RK_OK) {
        char *nl = memchr(st->buf + pos, '\n', st->len - pos);
        if (!nl)
            break;
        size_t end = (size_t)(nl - st->buf);
        handle_line(st, st->buf + start, end - start);
        start = pos = end + 1;
    }
    if (start) {
        memmove(st->buf, st->buf + start, st->len - start);
        st->len -= start;
    }
    st->scanned = st->len;
    if (st->status == RK_OK && st->len > st->max_line)
        st->status = RK_E_TOO_LARGE;
    /* Nothing pending: give the buffer back, so an idle stream (a long command
     * between its events) holds none; the next chunk allocates again. */
    if (st->len == 0 && st->cap > 0) {
        free(st->buf);
        st->buf = NULL;
        st->cap = 0;
    }
    return st->status;
}

/** End of stream: parse the unterminated remainder; RK_E_UPSTREAM without a terminal event. */
rk_status os_stream_finish(struct os_stream *st)
{
    if (st->status != RK_OK)
        return st->status;
    if (st->len) {
        handle_line(st, st->buf, st->len);
        st->len = st->scanned = 0;
        if (st->status != RK_OK)
            return st->status;
    }
    if (!st->terminal) {
        /* execd closed the stream without its completion event (seen on the real execd
         * behind its /proxy path): the command may have run, so it is never re-sent. */
        set_error_text(st, "upstream stream ended early: execd closed the event stream before "
                           "the command's completion event; the command may have run, so it "
                           "was not retried");
        return RK_E_UPSTREAM;
    }
    return RK_OK;
}
