/* SPDX-License-Identifier: Apache-2.0 */
/* What the runtime routes share (runtime.h). */
#include "api/runtime.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/app.h"
#include "base/budget.h"
#include "base/decode.h"
#include "config/config.h"
#include "engine/http_server.h"
#include "engine/reply.h"
#include "host/host.h"
#include "host/plugin_loader.h"
#include "obs/metrics.h"

const char *const rk_bash_only[] = {"bash", NULL};

const char *rk_display_name(const struct rk_req *r)
{
    return r->app->plugin->desc->display_name;
}

json_object *rk_json_text(const char *s, size_t len)
{
    char *out = NULL;
    size_t out_len = 0;
    if (rk_decode(s, len, "utf-8", "replace", &out, &out_len, NULL, 0) != RK_DECODE_OK)
        return json_object_new_string("");
    json_object *o = json_object_new_string_len(out, (int)out_len);
    free(out);
    return o;
}

int64_t rk_seconds_to_ms(int has, double s)
{
    if (!has || !(s > 0))
        return 0;
    if (s > 9.0e12)
        return (int64_t)9.0e15;
    int64_t ms = llround(s * 1000.0);
    return ms < 1 ? 1 : ms;
}

void rk_timeout_repr(int has, double s, char out[64])
{
    if (has)
        rk_py_float(s, out);
    else
        snprintf(out, 64, "None");
}

void rk_command_deadline(struct rk_req *r, int64_t timeout_ms)
{
    int64_t margin_ms = (int64_t)r->app->cfg->runtime.command_timeout_margin_s * 1000;
    rk_call_set_deadline(r->call, timeout_ms ? rk_now_ms() + timeout_ms + margin_ms : 0);
}

int rk_command_timed_out(struct rk_call *call, rk_status st, const struct rk_exec_res *res)
{
    (void)call;
    return st == RK_E_TIMEOUT || (st == RK_OK && res->timed_out);
}

void rk_reply_timeout(struct rk_req *r, int has, double s, const char *what)
{
    char tbuf[64], msg[160];
    rk_timeout_repr(has, s, tbuf);
    snprintf(msg, sizeof msg, "Timeout (%ss) exceeded while running %s", tbuf, what);
    rk_reply_error(r, RK_E_TIMEOUT, msg);
}

const struct rk_kv *rk_env_overlay(struct rk_call *call, json_object *rec, json_object *req_env,
                                   size_t *n_out)
{
    json_object *base = NULL;
    if (!rec || !json_object_object_get_ex(rec, "env", &base) ||
        !json_object_is_type(base, json_type_object))
        base = NULL;
    size_t cap = (base ? (size_t)json_object_object_length(base) : 0) +
                 (req_env ? (size_t)json_object_object_length(req_env) : 0);
    *n_out = 0;
    if (cap == 0)
        return NULL;
    struct rk_kv *kv = rk_arena_alloc(call, cap * sizeof *kv);
    size_t n = 0;
    if (base) {
        json_object_object_foreach(base, k, val)
        {
            json_object *over = NULL;
            if (req_env && json_object_object_get_ex(req_env, k, &over) && over)
                val = over;
            if (!val || !json_object_is_type(val, json_type_string))
                continue;
            /* copies: the record and the request body are released before a command runs */
            kv[n].key = rk_arena_strdup(call, k);
            kv[n].value = rk_arena_strdup(call, json_object_get_string(val));
            n++;
        }
    }
    if (req_env) {
        json_object_object_foreach(req_env, k, val)
        {
            if (base && json_object_object_get_ex(base, k, NULL))
                continue;
            if (!val || !json_object_is_type(val, json_type_string))
                continue;
            kv[n].key = rk_arena_strdup(call, k);
            kv[n].value = rk_arena_strdup(call, json_object_get_string(val));
            n++;
        }
    }
    *n_out = n;
    return n ? kv : NULL;
}

void rk_collector_init(struct rk_collector *c, struct rk_call *call, int64_t limit,
                       const char *what, const char *key)
{
    memset(c, 0, sizeof *c);
    c->call = call;
    c->limit = limit > 0 ? limit : 0;
    c->what = what;
    c->key = key;
}

void rk_collector_free(struct rk_collector *c)
{
    rk_buf_free(&c->out);
    rk_buf_free(&c->err);
    rk_budget_give(&rk_mem_budget, c->charged);
    c->charged = 0;
}

/* rk_sink.write: append to the stream's buffer, refusing output past the cap. */
static rk_status collector_write(void *ctx, enum rk_stream stream, const char *buf, size_t len)
{
    struct rk_collector *c = ctx;
    if (c->limit && (uint64_t)(c->out.len + c->err.len) + len > (uint64_t)c->limit)
        return rk_call_set_error(c->call, RK_E_TOO_LARGE,
                                 "%s exceeds the configured limit of %lld bytes (%s)", c->what,
                                 (long long)c->limit, c->key);
    /* Collected bytes count against the process-wide memory budget while
     * they are held, so many concurrent large reads or outputs cannot grow
     * the process past server.max_buffered_bytes. */
    if (rk_budget_take(&rk_mem_budget, (int64_t)len) != 0) {
        c->over_budget = 1;
        return rk_call_set_error(c->call, RK_E_TOO_LARGE, "%s does not fit the memory budget",
                                 c->what);
    }
    c->charged += (int64_t)len;
    struct rk_buf *b = stream == RK_STREAM_STDERR ? &c->err : &c->out;
    if (rk_buf_append(b, buf, len))
        return rk_call_set_error(c->call, RK_E_NOMEM, "out of memory collecting %s", c->what);
    return RK_OK;
}

void rk_collector_output(struct rk_collector *c, struct rk_req *r)
{
    rk_collector_init(c, r->call, r->app->cfg->server.max_output_bytes, "command output",
                      "server.max_output_bytes");
}

struct rk_sink rk_collector_sink(struct rk_collector *c)
{
    struct rk_sink sink = {.write = collector_write, .ctx = c};
    return sink;
}

int rk_collector_reply_busy(struct rk_req *r, const struct rk_collector *c)
{
    if (!c->over_budget)
        return 0;
    rk_req_reply_busy(r, "the memory budget (server.max_buffered_bytes) is in use by other "
                         "requests");
    return 1;
}

void rk_append_error_text(struct rk_buf *b, const char *error_text)
{
    if (!error_text || !*error_text)
        return;
    if (b->len)
        rk_buf_append(b, "\n", 1);
    rk_buf_append(b, error_text, strlen(error_text));
}

void rk_exit_repr(const struct rk_exec_res *res, char out[24])
{
    if (res->has_exit_code)
        snprintf(out, 24, "%d", res->exit_code);
    else
        snprintf(out, 24, "None");
}

/* ---- asynchronous commands (ABI 1.2) --------------------------------------------- */

void rk_command_async_init(struct rk_command_async *a, struct rk_req *r, const char *op,
                           void (*complete)(struct rk_command_async *a, rk_status st))
{
    a->r = r;
    a->op = op;
    a->complete = complete;
    rk_collector_output(&a->col, r);
    a->sink = rk_collector_sink(&a->col);
    memset(&a->res, 0, sizeof a->res);
}

/* The call's completion (host->call_done), on the reporting thread. */
static void command_done(void *ctx, rk_status st)
{
    struct rk_command_async *a = ctx;
    struct rk_req *r = a->r;
    rk_metrics_upstream_end(a->op, st, a->mark);
    a->complete(a, st); /* replies and frees a */
    rk_req_finish(r);
}

void rk_command_async_begin(struct rk_command_async *a)
{
    rk_req_defer(a->r);
    a->mark = rk_metrics_upstream_start();
    rk_call_on_done(a->r->call, command_done, a);
}

void rk_command_async_started(struct rk_command_async *a, rk_status st)
{
    if (st == RK_OK)
        return; /* the plugin owns a until it reports the end */
    /* Not started: the plugin will not report, so complete here. */
    rk_call_done(a->r->call, st);
}
