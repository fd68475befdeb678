/* SPDX-License-Identifier: Apache-2.0 */
/* The request object: accessors and answers (request.h). */
#include "engine/request.h"

#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/budget.h"
#include "base/json_text.h"
#include "engine/admission.h"
#include "base/app.h"
#include "engine/engine_internal.h"
#include "engine/envelope.h"
#include "engine/event_loops.h"
#include "engine/workers.h"
#include "obs/log.h"

const char *rk_req_header(struct rk_req *r, const char *name)
{
    return MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, name);
}

/* Iteration state for finding the last value of a query key. */
struct last_ctx {
    const char *name;
    const char *value;
};

static enum MHD_Result last_cb(void *cls, enum MHD_ValueKind kind, const char *key,
                               const char *value)
{
    (void)kind;
    struct last_ctx *c = cls;
    if (key && strcmp(key, c->name) == 0)
        c->value = value ? value : "";
    return MHD_YES;
}

const char *rk_req_query(struct rk_req *r, const char *name)
{
    /* ROCK (Starlette) takes the last value of a repeated key. */
    struct last_ctx c = {name, NULL};
    MHD_get_connection_values(r->conn, MHD_GET_ARGUMENT_KIND, last_cb, &c);
    return c.value;
}

struct each_ctx {
    void (*fn)(void *ctx, const char *k, const char *v);
    void *ctx;
};

static enum MHD_Result each_cb(void *cls, enum MHD_ValueKind kind, const char *key,
                               const char *value)
{
    (void)kind;
    struct each_ctx *e = cls;
    e->fn(e->ctx, key, value ? value : "");
    return MHD_YES;
}

void rk_req_query_each(struct rk_req *r, void (*fn)(void *ctx, const char *k, const char *v),
                       void *ctx)
{
    struct each_ctx e = {fn, ctx};
    MHD_get_connection_values(r->conn, MHD_GET_ARGUMENT_KIND, each_cb, &e);
}

void rk_req_header_each(struct rk_req *r, void (*fn)(void *ctx, const char *k, const char *v),
                        void *ctx)
{
    struct each_ctx e = {fn, ctx};
    MHD_get_connection_values(r->conn, MHD_HEADER_KIND, each_cb, &e);
}

const char *rk_req_raw_query(struct rk_req *r)
{
    const char *q = r->raw_uri ? strchr(r->raw_uri, '?') : NULL;
    return q ? q + 1 : "";
}

const char *rk_req_raw_path(struct rk_req *r)
{
    if (!r->raw_path) {
        const char *u = r->raw_uri ? r->raw_uri : r->path;
        const char *q = strchr(u, '?');
        r->raw_path = q ? strndup(u, (size_t)(q - u)) : strdup(u);
    }
    return r->raw_path ? r->raw_path : r->path;
}

void rk_req_set_sandbox(struct rk_req *r, const char *sandbox_id)
{
    size_t n = sandbox_id ? strlen(sandbox_id) : 0;
    if (!r || !rk_id_valid(sandbox_id, n))
        return;
    memcpy(r->sandbox_id, sandbox_id, n + 1);
}

int rk_req_client_fd(struct rk_req *r)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? ci->connect_fd : -1;
}

void rk_req_refuse_after_body(struct rk_req *r, void (*refuse)(struct rk_req *r))
{
    r->refusal = refuse;
}

/* ---- responses ---------------------------------------------------------------- */

/* Headers every response carries: the request id, and what the registered
 * admissions add (CORS headers for listed origins). */
static void add_common_headers(struct rk_req *r, struct MHD_Response *resp)
{
    MHD_add_response_header(resp, "X-Request-ID", r->request_id);
    rk_admission_decorate(r, resp);
}

void rk_req_reply_mhd(struct rk_req *r, unsigned http_status, struct MHD_Response *resp)
{
    if (r->responded) {
        MHD_destroy_response(resp);
        return;
    }
    add_common_headers(r, resp);
    r->responded = 1;
    r->http_status = http_status;
    if (!r->outcome)
        r->outcome = http_status < 400   ? "success"
                     : http_status < 500 ? "client_error"
                                         : "server_error";
    /* Queued by the event loop (rk_http_flush_reply): MHD_queue_response is
     * only valid on the connection's own thread. */
    r->reply_resp = resp;
}

void rk_req_suspend(struct rk_req *r)
{
    struct http_state *hs = r->app->http;
    r->suspended = 1;
    atomic_fetch_add(&hs->suspended, 1);
    MHD_suspend_connection(r->conn);
}

void rk_req_resume(struct rk_req *r)
{
    struct http_state *hs = r->app->http;
    struct MHD_Connection *conn = r->conn;
    struct rk_evloop *loop = r->loop;
    /* Nothing of r is touched after the resume: the loop may finish it at once. */
    atomic_fetch_sub(&hs->suspended, 1);
    MHD_resume_connection(conn);
    rk_evloop_wake(loop); /* the daemon has no inter-thread channel of its own */
}

int rk_req_submit(struct rk_req *r, void (*fn)(void *), void *arg)
{
    struct http_state *hs = r->app->http;
    return rk_workers_submit(hs->workers, fn, arg);
}

int rk_req_needs_worker(struct rk_req *r)
{
    if (!r->on_loop)
        return 0;
    r->wants_worker = 1;
    return 1;
}

void rk_req_defer(struct rk_req *r)
{
    r->deferred = 1;
    atomic_fetch_add(&r->holds, 1);
}

void rk_req_finish(struct rk_req *r)
{
    if (atomic_fetch_sub(&r->holds, 1) != 1)
        return;
    /* The last hold: the job is done. Resume only a connection the loop has
     * suspended for it; otherwise the loop finds it done when it calls again.
     * Nothing of r is touched after the exchange unless we resume. */
    if (atomic_exchange(&r->job_state, RK_JOB_DONE) == RK_JOB_WAITING)
        rk_req_resume(r);
}

int rk_req_wait_job(struct rk_req *r)
{
    if (atomic_load(&r->job_state) == RK_JOB_DONE)
        return 0;
    /* Suspended before the state says so, so the job's resume never comes
     * before the suspension. If the job ended in between, nobody else will
     * resume: resume at once and take the answer on the next call. */
    rk_req_suspend(r);
    int running = RK_JOB_RUNNING;
    if (!atomic_compare_exchange_strong(&r->job_state, &running, RK_JOB_WAITING))
        rk_req_resume(r);
    return 1;
}

/* Responses up to this size are not charged to the memory budget: they are
 * bounded by the connection count, and error replies must always get out. */
#define RK_UNCHARGED_REPLY_BYTES (64 * 1024)

void rk_req_reply_json(struct rk_req *r, unsigned http_status, json_object *body)
{
    rk_req_reply_json_headers(r, http_status, body, NULL, 0);
}

void rk_req_reply_bytes(struct rk_req *r, unsigned http_status, const char *content_type,
                        const void *data, size_t len)
{
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(len, (void *)(len ? data : ""), MHD_RESPMEM_MUST_COPY);
    if (!resp) {
        rk_err("request %s: out of memory building a response", r->request_id);
        return;
    }
    MHD_add_response_header(resp, "Content-Type", content_type);
    rk_req_reply_mhd(r, http_status, resp);
}

void rk_req_reply_empty(struct rk_req *r, unsigned http_status)
{
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (!resp) {
        rk_err("request %s: out of memory building a response", r->request_id);
        return;
    }
    rk_req_reply_mhd(r, http_status, resp);
}

void rk_req_reply_json_text(struct rk_req *r, unsigned http_status, const char *text, size_t len,
                            const struct rk_kv *headers, size_t n_headers)
{
    if (len > RK_UNCHARGED_REPLY_BYTES && !r->responded) {
        /* The copy MHD keeps until the client has read it. */
        if (rk_budget_take(&rk_mem_budget, (int64_t)len) != 0) {
            rk_req_reply_busy(r, "the response does not fit the memory budget "
                                 "(server.max_buffered_bytes)");
            return;
        }
        r->budget_charged += (int64_t)len;
    }
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(len, (void *)text, MHD_RESPMEM_MUST_COPY);
    if (!resp) {
        rk_err("request %s: out of memory building a response", r->request_id);
        return;
    }
    MHD_add_response_header(resp, "Content-Type", "application/json");
    for (size_t i = 0; i < n_headers; i++)
        MHD_add_response_header(resp, headers[i].key, headers[i].value);
    rk_req_reply_mhd(r, http_status, resp);
}

void rk_req_reply_json_headers(struct rk_req *r, unsigned http_status, json_object *body,
                               const struct rk_kv *headers, size_t n_headers)
{
    size_t len = 0;
    const char *text = json_object_to_json_string_length(body, RK_JSON_FLAGS, &len);
    if (text)
        rk_req_reply_json_text(r, http_status, text, len, headers, n_headers);
    else
        rk_err("request %s: out of memory building a response", r->request_id);
    json_object_put(body);
}

void rk_req_reply_busy(struct rk_req *r, const char *why)
{
    char msg[256];
    snprintf(msg, sizeof msg, "admin is busy: %s; retry later", why);
    const char *message = r->route ? r->route->fail_message : NULL;
    enum rk_shape shape = r->route ? (enum rk_shape)r->route->shape : RK_SHAPE_NULL;
    r->outcome = "busy";
    rk_req_reply_json(r, 503, rk_envelope_failure(message, msg, 5000, shape));
}

struct rku_curl_loop *rk_req_curl_loop(const struct rk_req *r)
{
    return r ? rk_evloop_curl(r->loop) : NULL;
}

struct rku_h1 *rk_req_h1(const struct rk_req *r)
{
    return r ? rk_evloop_h1(r->loop) : NULL;
}

struct rk_store_reader *rk_req_store_reader(const struct rk_req *r)
{
    return r && r->on_loop && r->loop == rk_evloop_current() ? rk_evloop_store_reader(r->loop)
                                                             : NULL;
}

int rk_req_on_loop(const struct rk_req *r)
{
    return r->on_loop;
}

void rk_req_loop_wake(struct rk_evloop *loop)
{
    rk_evloop_wake(loop);
}
