/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libmicrohttpd glue. Concurrency model (docs/architecture.md "Concurrency"):
 * server.event_threads event loops (event_loops.c: a thread each, running one
 * libmicrohttpd daemon in epoll mode on the shared listening socket) parse requests, run the
 * admission checks, route and read bodies; they never block. Everything that may block - the route
 * handlers, a stream route's begin(), a WebSocket route's set-up - runs as a
 * job on the worker pool (workers.h, server.workers threads, at most
 * server.worker_queue waiting) while the connection is suspended; the
 * handler's answer is kept in the request and queued here, on the loop, once
 * the worker resumed the connection. Idle keep-alive connections cost a few
 * KiB of libmicrohttpd state and no thread. Routes flagged RK_ROUTE_INLINE
 * (answers from memory) run on the loop.
 */
#include "engine/http_server.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/app.h"
#include "base/budget.h"
#include "config/config.h"
#include "engine/envelope.h"
#include "host/host.h"
#include "obs/log.h"
#include "obs/metrics.h"
#include "engine/router.h"
#include "rkutil.h"
#include "engine/tls.h"
#include "base/util.h"
#include "engine/engine_internal.h"
#include "engine/event_loops.h"
#include "engine/ip_limit.h"
#include "engine/workers.h"

/* Each buffered JSON body byte is charged this many times to the memory budget. */
#define RK_BODY_CHARGE 3

/* Answer a refusal that waited for the body (once; nothing if answered). */
/* rk_router_header_fn over a request. */
static const char *router_header(void *ctx, const char *name)
{
    return rk_req_header(ctx, name);
}

static void answer_refusal(struct rk_req *r)
{
    if (r->refusal && !r->responded)
        r->refusal(r);
}

/* A FastAPI-style {"detail"} error of the engine itself (404, 405, 413, 500). */
static void reply_detail(struct rk_req *r, unsigned http_status, const char *detail)
{
    r->outcome = http_status >= 500 ? "server_error" : "client_error";
    rk_req_reply_json(r, http_status, rk_envelope_detail(detail));
}

/* 1 for the routes that must answer whatever the load (probes and metrics). */
static int is_health_route(const struct rk_route *route)
{
    return route && (route->flags & RK_ROUTE_HEALTH);
}

/* What a suspended connection waits for (rk_req.job). */
enum {
    JOB_NONE = 0,
    JOB_BEGIN,   /* a stream route's begin() or a WebSocket route's handler, at the headers */
    JOB_HANDLER, /* the route handler, once the body is complete */
};

/* The worker pool's job: run the route code the connection waits for, then
 * drop the worker's hold (the last hold resumes the connection). */
static void run_job_code(struct rk_req *r)
{
    if (r->job == JOB_BEGIN) {
        if (r->route->websocket)
            r->route->handler(r);
        else
            r->route->begin(r);
    } else {
        r->route->handler(r);
        /* A deferred request is answered by another thread: not read here. */
        if (!r->deferred && !r->responded && !r->wants_worker)
            reply_detail(r, 500, "handler produced no response");
    }
}

static void run_job(void *arg)
{
    struct rk_req *r = arg;
    run_job_code(r);
    rk_req_finish(r);
}

/* Queue the job (on the loop). A full queue is answered at once with 5000
 * "busy", nothing done. The caller then waits for the job with
 * rk_req_wait_job (which suspends the connection unless the job is done). */
static int queue_job(struct rk_req *r, int job)
{
    struct http_state *hs = r->app->http;
    r->job = job;
    atomic_store(&r->job_state, RK_JOB_RUNNING);
    atomic_store(&r->holds, 1);
    if (rk_workers_submit(hs->workers, run_job, r) != 0) {
        r->job = JOB_NONE;
        atomic_store(&r->holds, 0);
        atomic_fetch_add(&hs->refused, 1);
        rk_req_reply_busy(r, "all workers are busy and their queue is full (server.worker_queue)");
        return -1;
    }
    return 0;
}

/* Start a job: on the loop first when the route allows it (RK_ROUTE_LOOP_FIRST)
 * and the route code did not ask for a worker, else on the pool (queue_job).
 * The connection then waits for it exactly as for a queued job: a job that
 * ended on the loop is found done on the next call, one that deferred its
 * answer resumes the connection when it finishes. */
static int start_job(struct rk_req *r, int job)
{
    if (r->route->flags & RK_ROUTE_LOOP_FIRST) {
        r->job = job;
        atomic_store(&r->job_state, RK_JOB_RUNNING);
        atomic_store(&r->holds, 1);
        r->on_loop = 1;
        r->wants_worker = 0;
        run_job_code(r);
        r->on_loop = 0;
        if (!r->wants_worker) {
            rk_req_finish(r);
            return 0;
        }
        r->wants_worker = 0; /* nothing done: run it again on a worker */
    }
    return queue_job(r, job);
}

/* The job the connection waited for is done (on the loop): what is left of
 * its answer. */
static void job_ended(struct rk_req *r)
{
    int job = r->job;
    r->job = JOB_NONE;
    if (!r->responded && (job == JOB_HANDLER || r->route->websocket))
        reply_detail(r, 500, "handler produced no response");
}

/* Queue the answer a handler left in the request (on the loop, inside the
 * connection's access handler). */
static void flush_reply(struct rk_req *r)
{
    struct MHD_Response *resp = r->reply_resp;
    if (!resp)
        return;
    r->reply_resp = NULL;
    if (MHD_queue_response(r->conn, r->http_status, resp) != MHD_YES)
        rk_warn("request %s: cannot queue the response", r->request_id);
    MHD_destroy_response(resp);
}

/* 1 for routes whose code answers from memory and runs on the event loop. */
static int runs_inline(const struct rk_route *route)
{
    return route->flags & RK_ROUTE_INLINE;
}

/* Request-start checks, run once when the headers are complete and the route
 * is known. Returns 0 to go on, or non-zero after answering. This is the place
 * for further admission checks (authentication, ...). */
static int admit_request(struct rk_req *r)
{
    struct http_state *hs = r->app->http;
    if (is_health_route(r->route))
        return 0;
    if (atomic_fetch_add(&hs->data_active, 1) >= hs->data_limit) {
        atomic_fetch_sub(&hs->data_active, 1);
        rk_req_reply_busy(r, "all connection slots for data routes are in use "
                             "(server.max_connections minus server.reserved_connections)");
        return 1;
    }
    r->data_slot = 1;
    return 0;
}

/* ---- request lifecycle ------------------------------------------------------ */

/* Called by MHD with the raw request URI before anything else. */
static void *uri_log_cb(void *cls, const char *uri, struct MHD_Connection *conn)
{
    struct rk_app *app = cls;
    struct conn_track *t = rk_track_of(conn);
    if (t && t->phase == PH_KEEPALIVE)
        rk_track_phase(app->http, t, PH_HEADERS);
    struct rk_req *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->app = cls;
    r->loop = rk_evloop_current();
    r->raw_uri = strdup(uri ? uri : "/");
    r->start_ms = rk_turn_ms();
    return r;
}

/* Keep a client's X-Request-ID when it is sane; otherwise make one. */
static void choose_request_id(struct rk_req *r)
{
    const char *given = rk_req_header(r, "X-Request-ID");
    if (given) {
        size_t n = strlen(given);
        int ok = n > 0 && n < sizeof r->request_id;
        for (size_t i = 0; ok && i < n; i++)
            ok = isalnum((unsigned char)given[i]) || strchr("-_.:", given[i]);
        if (ok) {
            memcpy(r->request_id, given, n + 1);
            return;
        }
    }
    rk_unique_hex(r->request_id, 32);
}

static int is_websocket_upgrade(struct rk_req *r)
{
    const char *up = rk_req_header(r, "Upgrade");
    return up && strcasestr(up, "websocket") != NULL;
}

/* Answer 404/405/307 for requests that match no route. */
static void reply_unrouted(struct rk_req *r, enum rk_match m)
{
    if (m == RK_MATCH_BAD_METHOD) {
        reply_detail(r, 405, "Method Not Allowed");
        return;
    }
    if (m == RK_MATCH_REDIRECT) {
        struct rk_buf loc = {0};
        rk_buf_append(&loc, r->path, strlen(r->path) - 1);
        const char *q = rk_req_raw_query(r);
        if (*q)
            rk_buf_printf(&loc, "?%s", q);
        struct MHD_Response *resp =
            MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
        MHD_add_response_header(resp, "Location", rk_buf_cstr(&loc));
        rk_buf_free(&loc);
        r->outcome = "redirect";
        rk_req_reply_mhd(r, 307, resp);
        return;
    }
    reply_detail(r, 404, "Not Found");
}

/* 413 for a JSON body over server.max_body_bytes. */
static void reply_too_large(struct rk_req *r)
{
    char msg[160];
    snprintf(msg, sizeof msg,
             "Request body exceeds the configured limit of %lld bytes (server.max_body_bytes)",
             (long long)r->app->cfg->server.max_body_bytes);
    reply_detail(r, 413, msg);
}

/* 503 busy for a JSON body that does not fit the memory budget. */
static void reply_body_busy(struct rk_req *r)
{
    rk_req_reply_busy(r, "the memory budget for request bodies is in use "
                         "(server.max_buffered_bytes)");
}

/* JSON routes: take the budget for the whole declared body at once, so
 * concurrent bodies are admitted whole or refused whole rather than all
 * stalling half-charged. Each buffered byte is charged RK_BODY_CHARGE times:
 * the body, its parsed tree and the copies a handler makes of its strings.
 * Returns non-zero after answering (never, today: refusals answer at the end). */
static int reserve_body(struct rk_req *r)
{
    if (r->responded || r->route->body_mode != RK_BODY_JSON)
        return 0;
    const char *cl = rk_req_header(r, "Content-Length");
    char *end = NULL;
    long long n = cl ? strtoll(cl, &end, 10) : 0;
    if (!cl || end == cl || *end || n <= 0 || n > r->app->cfg->server.max_body_bytes)
        return 0; /* chunked, empty or too large (413 later): charged as it comes */
    if (rk_budget_take(&rk_mem_budget, (int64_t)n * RK_BODY_CHARGE) != 0) {
        /* Read and drop the body (at most max_body_bytes, at min_body_rate),
         * then answer: a client that writes its whole body before reading
         * gets the 503 instead of a reset. */
        r->budget_refused = 1;
        return 0;
    }
    r->budget_charged += (int64_t)n * RK_BODY_CHARGE;
    r->body_reserved = n;
    return 0;
}

static enum MHD_Result handle_request(struct rk_app *app, struct MHD_Connection *conn,
                                      const char *url, const char *method, const char *upload_data,
                                      size_t *upload_data_size, void **con_cls)
{
    struct http_state *hs = app->http;
    struct rk_req *r = *con_cls;
    if (!r)
        return MHD_NO;

    if (!r->call) {
        /* First call: headers are complete. */
        r->conn = conn;
        r->method = method;
        r->path = url;
        choose_request_id(r);
        r->call = rk_call_new(r->request_id, rk_req_client_fd(r), 0);
        atomic_fetch_add(&hs->inflight, 1);
        rk_metrics_inflight_add(1);
        /* The admissions registered by the layers above (access/: CORS
         * preflight, tokens, cross-site and content type) at their points. */
        if (rk_admission_run(r, RK_ADMIT_BEFORE_ROUTE))
            return MHD_YES;
        struct rk_params params = {.v = r->params, .buf = &r->param_buf};
        enum rk_match m = rk_router_match(method, url, is_websocket_upgrade(r), router_header, r,
                                          &r->route, &params);
        if (m != RK_MATCH_OK)
            r->route = NULL;
        else if (r->route->flags & RK_ROUTE_SANDBOX_PARAM)
            rk_req_set_sandbox(r, r->params[0]);
        if (rk_admission_run(
                r, RK_ADMIT_MATCHED)) /* before 404/405: unknown paths are not disclosed */
            return MHD_YES;
        if (m != RK_MATCH_OK) {
            reply_unrouted(r, m);
            return MHD_YES;
        }
        if (rk_admission_run(r, RK_ADMIT_ROUTED) || admit_request(r) || reserve_body(r))
            return MHD_YES;
        /* The body must not be read before begin() ran: suspended at once. */
        if (((r->route->body_mode == RK_BODY_STREAM && r->route->begin) ||
             (r->route->websocket && r->route->handler)) &&
            start_job(r, JOB_BEGIN) == 0 && !rk_req_wait_job(r))
            job_ended(r);
        return MHD_YES;
    }

    if (r->job != JOB_NONE) {
        /* Called again while a job runs (or once it ended and resumed us). */
        if (rk_req_wait_job(r))
            return MHD_YES;
        job_ended(r);
        return MHD_YES;
    }

    if (*upload_data_size > 0) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        if (r->responded)
            return MHD_YES; /* discard the rest */
        if (r->refusal) {
            /* A refused request's body: drain (bounded, nothing kept) so the
             * client reads the refusal rather than a reset; past that, answer
             * at once. */
            r->body_len += n;
            if (r->body_len > (size_t)16 * 1024 * 1024)
                answer_refusal(r);
            return MHD_YES;
        }
        if (r->body_too_large) {
            /* Drain a bounded amount so the client reads our 413 instead of
             * a reset; past that, answer at once and let MHD close. */
            r->body_len += n;
            if (r->body_len > (size_t)16 * 1024 * 1024)
                reply_too_large(r);
            return MHD_YES;
        }
        if (!r->route || r->route->body_mode == RK_BODY_NONE)
            return MHD_YES;
        if (r->route->body_mode == RK_BODY_STREAM) {
            r->body_kept = 0;
            if (r->route->body && r->route->body(r, upload_data, n))
                r->body_too_large = 1; /* the route stopped reading */
            /* Bytes the route could not take yet (it suspended the connection
             * and resumes it when it can): libmicrohttpd hands them again. */
            *upload_data_size = r->body_kept <= n ? r->body_kept : 0;
            r->body_kept = 0;
            return MHD_YES;
        }
        int64_t limit = app->cfg->server.max_body_bytes;
        if ((int64_t)(r->body_len + n) > limit) {
            r->body_too_large = 1;
            free(r->body);
            r->body = NULL;
            r->body_len = n;
            return MHD_YES;
        }
        if (r->budget_refused)
            return MHD_YES; /* discard; answered at the end */
        /* Bytes past the Content-Length reserved at the start (chunked bodies). */
        int64_t extra = (int64_t)(r->body_len + n) - r->body_reserved;
        if (extra > 0) {
            if (rk_budget_take(&rk_mem_budget, extra * RK_BODY_CHARGE) != 0) {
                free(r->body);
                r->body = NULL;
                r->body_len = 0;
                r->budget_refused = 1;
                return MHD_YES;
            }
            r->budget_charged += extra * RK_BODY_CHARGE;
            r->body_reserved += extra;
        }
        char *nb = realloc(r->body, r->body_len + n + 1);
        if (!nb) {
            r->body_too_large = 1;
            reply_detail(r, 500, "out of memory");
            return MHD_YES;
        }
        r->body = nb;
        memcpy(r->body + r->body_len, upload_data, n);
        r->body_len += n;
        r->body[r->body_len] = '\0';
        return MHD_YES;
    }

    /* Final call: the whole body has arrived. */
    rk_track_phase(app->http, rk_track_of(conn), PH_HANDLER);
    answer_refusal(r); /* a refusal deferred until the body was drained */
    if (!r->responded && r->budget_refused)
        reply_body_busy(r);
    if (!r->responded && r->body_too_large && r->route && r->route->body_mode == RK_BODY_JSON)
        reply_too_large(r);
    if (!r->responded && r->route && !r->route->websocket) {
        if (r->route->body_mode == RK_BODY_STREAM && r->route->body)
            r->route->body(r, NULL, 0); /* the end of the body, on the loop */
        if (!runs_inline(r->route)) {
            /* Not suspended yet: libmicrohttpd calls again at once (no answer
             * queued) and the second call suspends. Suspending in this call
             * would leave the connection in its reading state, and a client
             * that half-closed after its request would be cut when it is
             * resumed (libmicrohttpd 0.9.75 closes on reading the end). */
            if (start_job(r, JOB_HANDLER) == 0) {
                if (atomic_load(&r->job_state) != RK_JOB_DONE)
                    return MHD_YES;
                job_ended(r); /* it answered on the loop (or already on a worker) */
            }
        } else {
            r->route->handler(r);
            if (!r->responded)
                reply_detail(r, 500, "handler produced no response");
        }
    }
    if (!r->responded)
        reply_detail(r, 500, "no response");
    return MHD_YES;
}
/* MHD access callback: the request handling above, with the connection marked
 * busy while our code runs or a job it waits for does (a suspended connection
 * stays busy), the body bytes counted for min_body_rate, and the answer a
 * handler left queued here, on the loop. */
static enum MHD_Result access_handler(void *cls, struct MHD_Connection *conn, const char *url,
                                      const char *method, const char *version,
                                      const char *upload_data, size_t *upload_data_size,
                                      void **con_cls)
{
    (void)version;
    rku_thread_c_locale(); /* once per event thread: cheap json-c parses */
    struct rk_app *app = cls;
    struct conn_track *t = rk_track_of(conn);
    struct rk_req *r = *con_cls;
    if (r && !r->call)
        rk_track_phase(app->http, t, PH_BODY);
    size_t n = *upload_data_size;
    if (!r || !r->suspended)
        rk_track_busy(app->http, t, 1, 0);
    if (r)
        r->suspended = 0; /* resumed (or never suspended) */
    enum MHD_Result res =
        handle_request(app, conn, url, method, upload_data, upload_data_size, con_cls);
    if (r && r->suspended)
        return res; /* a job or the route's consumer resumes it */
    rk_track_busy(app->http, t, 0, n - *upload_data_size);
    /* A job still running owns the answer: the next call takes it. */
    if (r && r->job == JOB_NONE) {
        flush_reply(r);
        /* A WebSocket route has upgraded (or answered): no deadline from here. */
        if (r->route && r->route->websocket && r->responded)
            rk_track_phase(app->http, t, PH_HANDLER);
    }
    return res;
}

/* Called by MHD when a request ends (answered, failed or client gone). */
static void completed_cb(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    struct rk_app *app = cls;
    struct http_state *hs = app->http;
    struct rk_req *r = *con_cls;
    if (!r)
        return;
    *con_cls = NULL;
    if (r->call) {
        int64_t dur = rk_turn_ms() - r->start_ms;
        const char *route = r->route ? r->route->name : "unrouted";
        const char *outcome = r->outcome ? r->outcome : "unknown";
        if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK && r->http_status != 101)
            outcome = "client_closed";
        rk_metrics_request(route, outcome, r->http_status, dur);
        /* Only a sandbox id that passed the identifier rule (noted by the
         * router or the validator) is logged: a refused request's text is
         * the client's, not a sandbox. */
        struct rk_access_entry e = {.request_id = r->request_id,
                                    .method = r->method,
                                    .path = r->path,
                                    .route = route,
                                    .outcome = outcome,
                                    .sandbox_id = r->sandbox_id[0] ? r->sandbox_id : NULL,
                                    .status = r->http_status,
                                    .duration_ms = dur,
                                    .token = r->auth_name[0] ? r->auth_name : NULL};
        rk_log_access(&e);
        atomic_fetch_sub(&hs->inflight, 1);
        rk_metrics_inflight_add(-1);
    }
    if (r->data_slot)
        atomic_fetch_sub(&hs->data_active, 1);
    rk_budget_give(&rk_mem_budget, r->budget_charged);
    struct conn_track *t = rk_track_of(conn);
    if (t && t->phase != PH_KEEPALIVE && toe == MHD_REQUEST_TERMINATED_COMPLETED_OK)
        rk_track_phase(hs, t, PH_KEEPALIVE);
    if (r->reply_resp)
        MHD_destroy_response(r->reply_resp);
    if (r->route_ctx_free)
        r->route_ctx_free(r);
    rk_call_free(r->call);
    free(r->body);
    free(r->param_buf);
    free(r->raw_uri);
    free(r->raw_path);
    free(r);
}

/* Metrics collector: the worker pool's load and its refusals. */
static void workers_collect(void *arg, struct rk_buf *out)
{
    struct rk_app *app = arg;
    struct http_state *hs = app->http;
    int queued = 0, running = 0;
    if (!hs || !hs->workers)
        return;
    rk_workers_load(hs->workers, &queued, &running);
    rk_metrics_family(out, "rock_admin_worker_queue_depth", "gauge",
                      "Jobs waiting for a worker (bounded by server.worker_queue).");
    rk_buf_printf(out, "rock_admin_worker_queue_depth %d\n", queued);
    rk_metrics_family(out, "rock_admin_workers_busy", "gauge",
                      "Workers running a job (of server.workers).");
    rk_buf_printf(out, "rock_admin_workers_busy %d\n", running);
    rk_metrics_family(out, "rock_admin_worker_queue_full_total", "counter",
                      "Requests answered busy because the worker queue was full.");
    rk_buf_printf(out, "rock_admin_worker_queue_full_total %lld\n",
                  (long long)atomic_load(&hs->refused));
}

/* MHD accept policy: enforce server.max_connections and server.per_ip_connections over all
 * event loops (each has a daemon of its own, so libmicrohttpd's limits would be per loop).
 * libmicrohttpd splits its own limit between the threads and, at the limit,
 * stops accepting (new connections would wait in the listen backlog); the
 * engine gives it room and closes the connections over the limit at once
 * instead, as the thread-per-connection engine did, so a client sees a
 * refusal it can retry. Both counts are given back in rk_track_notify_cb. */
static enum MHD_Result accept_policy_cb(void *cls, const struct sockaddr *addr, socklen_t addrlen)
{
    (void)addrlen;
    struct rk_app *app = cls;
    struct http_state *hs = app->http;
    if (atomic_fetch_add(&hs->open, 1) >= hs->conn_limit) {
        atomic_fetch_sub(&hs->open, 1);
        return MHD_NO;
    }
    if (!rk_ip_limit_take(hs->per_ip, addr)) {
        atomic_fetch_sub(&hs->open, 1);
        return MHD_NO;
    }
    return MHD_YES;
}

/* Route libmicrohttpd's own diagnostics into our log. */
static void mhd_logger(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    size_t n = strlen(line);
    while (n && (line[n - 1] == '\n' || line[n - 1] == '\r'))
        line[--n] = '\0';
    rk_log(RK_LOG_WARNING, "http: %s", line);
}

/* The listening socket all event loops accept from (non-blocking, close-on-exec, address
 * reuse, IPv6 only for an IPv6 address); -1 with errno set. */
static int listen_socket(const struct sockaddr_storage *ss, socklen_t len)
{
    int fd = socket(ss->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    int on = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    if (ss->ss_family == AF_INET6)
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &on, sizeof on);
    if (bind(fd, (const struct sockaddr *)ss, len) != 0 || listen(fd, 1024) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

/* The port fd is bound to (the configured one unless it was 0). */
static int bound_port(int fd, int configured)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) != 0)
        return configured;
    if (ss.ss_family == AF_INET6)
        return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    return ntohs(((struct sockaddr_in *)&ss)->sin_port);
}

int rk_http_start(struct rk_app *app)
{
    struct http_state *hs = calloc(1, sizeof *hs);
    if (!hs)
        return -1;
    app->http = hs;
    const struct rk_config *cfg = app->cfg;
    pthread_mutex_init(&hs->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&hs->cv, &ca);
    pthread_condattr_destroy(&ca);

    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    socklen_t sslen;
    /* No internal thread: the event loops (event_loops.c) run the daemons. */
    unsigned flags = MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ITC | MHD_ALLOW_UPGRADE |
                     MHD_USE_ERROR_LOG;
    const char *host = cfg->server.host;
    struct MHD_OptionItem tls_opts[3];
    rk_tls_mhd_options(tls_opts, 3);
    if (rk_tls_enabled())
        flags |= MHD_USE_TLS;
    if (strchr(host, ':')) {
        struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons((uint16_t)cfg->server.port);
        if (inet_pton(AF_INET6, host, &a6->sin6_addr) != 1) {
            rk_err("server.host: \"%s\" is not an IPv6 address", host);
            return -1;
        }
        flags |= MHD_USE_IPv6;
        sslen = sizeof *a6;
    } else {
        struct sockaddr_in *a4 = (struct sockaddr_in *)&ss;
        a4->sin_family = AF_INET;
        a4->sin_port = htons((uint16_t)cfg->server.port);
        if (inet_pton(AF_INET, host, &a4->sin_addr) != 1) {
            rk_err("server.host: \"%s\" is not an IPv4 address", host);
            return -1;
        }
        sslen = sizeof *a4;
    }

    rk_budget_init(cfg->server.max_buffered_bytes, cfg->server.max_spool_bytes);
    if (cfg->server.thread_stack_kib_set)
        rk_warn("server.thread_stack_kib is deprecated and ignored: connections no longer "
                "have a thread (see server.event_threads and server.workers)");
    hs->workers = rk_workers_new(cfg->server.workers, cfg->server.worker_queue);
    if (!hs->workers)
        return -1;
    rk_metrics_collector_add("workers", workers_collect, app);
    hs->conn_limit = cfg->server.max_connections;
    hs->data_limit = cfg->server.max_connections - cfg->server.reserved_connections;
    if (hs->data_limit < 1)
        hs->data_limit = 1;
    /* -1 (the default): a quarter of the connections per client address. */
    int per_ip = cfg->server.per_ip_connections;
    if (per_ip < 0)
        per_ip = cfg->server.max_connections / 4 > 0 ? cfg->server.max_connections / 4 : 1;
    hs->per_ip = rk_ip_limit_new(per_ip);
    if (!hs->per_ip)
        return -1;

    int lfd = listen_socket(&ss, sslen);
    if (lfd < 0) {
        rk_err("cannot listen on %s:%d (address in use or not permitted)", host, cfg->server.port);
        return -1;
    }
    hs->port = bound_port(lfd, cfg->server.port);
    int n = cfg->server.event_threads > 0 ? cfg->server.event_threads : 1;
    hs->daemons = calloc((size_t)n, sizeof *hs->daemons);
    hs->loops = calloc((size_t)n, sizeof *hs->loops);
    if (!hs->daemons || !hs->loops) {
        close(lfd);
        return -1;
    }
    /* libmicrohttpd's own connection limit never binds: accept_policy_cb enforces
     * server.max_connections and server.per_ip_connections over all loops. Each daemon gets its
     * own descriptor of the one listening socket (it closes it when it stops). */
    unsigned mhd_limit = cfg->server.max_connections >= 0x3fffffff
                             ? 0x3fffffffu
                             : (unsigned)cfg->server.max_connections + 1;
    for (int i = 0; i < n; i++) {
        int fd = fcntl(lfd, F_DUPFD_CLOEXEC, 0);
        struct MHD_Daemon *d =
            fd < 0 ? NULL
                   : MHD_start_daemon(
                         flags, 0, accept_policy_cb, app, access_handler, app,
                         MHD_OPTION_EXTERNAL_LOGGER, mhd_logger, NULL, MHD_OPTION_LISTEN_SOCKET, fd,
                         MHD_OPTION_CONNECTION_LIMIT, mhd_limit, MHD_OPTION_CONNECTION_TIMEOUT,
                         (unsigned)cfg->server.connection_timeout_s,
                         MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)cfg->server.max_header_bytes,
                         MHD_OPTION_URI_LOG_CALLBACK, uri_log_cb, app, MHD_OPTION_NOTIFY_COMPLETED,
                         completed_cb, app, MHD_OPTION_NOTIFY_CONNECTION, rk_track_notify_cb, app,
                         MHD_OPTION_ARRAY, tls_opts, MHD_OPTION_END);
        if (!d) {
            /* fd is not closed here: whether libmicrohttpd already did is not documented, and
             * the daemon exits on this error anyway. */
            rk_err("cannot start the HTTP server on %s:%d", host, cfg->server.port);
            close(lfd);
            return -1;
        }
        hs->daemons[i] = d;
        hs->nloops = i + 1;
        hs->loops[i] = rk_evloop_new(d, app->store);
        if (!hs->loops[i]) {
            close(lfd);
            return -1;
        }
    }
    close(lfd); /* the daemons hold their own descriptors of it */
    for (int i = 0; i < n; i++)
        if (rk_evloop_start(hs->loops[i]) != 0)
            return -1;
    if (pthread_create(&hs->watchdog, NULL, rk_watchdog_main, app) != 0) {
        rk_err("cannot start the connection watchdog thread");
        return -1;
    }
    hs->watchdog_started = 1;
    return 0;
}

int rk_http_port(const struct rk_app *app)
{
    const struct http_state *hs = app->http;
    return hs ? hs->port : 0;
}

void rk_http_quiesce(struct rk_app *app)
{
    struct http_state *hs = app->http;
    if (!hs || !hs->nloops || hs->quiesced)
        return;
    /* Not MHD_quiesce_daemon: it takes the listening socket out of the daemon's epoll set
     * while that daemon's loop may be inside it (libmicrohttpd 0.9.75 aborts on a failed
     * removal: "Failed to remove listen FD from epoll set"). Instead every daemon's
     * descriptor of the listening socket is pointed at a fresh unbound socket: once the
     * last one is replaced the listener itself is closed (the kernel takes it out of every
     * epoll set and refuses new connections, which is what a balancer needs to see), and
     * the descriptors libmicrohttpd holds stay valid - nothing ever fires on them - until
     * MHD_stop_daemon closes them. */
    for (int i = 0; i < hs->nloops; i++) {
        const union MHD_DaemonInfo *di =
            hs->daemons[i] ? MHD_get_daemon_info(hs->daemons[i], MHD_DAEMON_INFO_LISTEN_FD) : NULL;
        int lfd = di ? di->listen_fd : -1;
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        int family =
            lfd >= 0 && getsockname(lfd, (struct sockaddr *)&ss, &sl) == 0 ? ss.ss_family : AF_INET;
        int idle = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (lfd < 0 || idle < 0 || dup3(idle, lfd, O_CLOEXEC) < 0)
            rk_warn("cannot stop listening for the drain (%s): new connections are still accepted",
                    strerror(errno));
        if (idle >= 0)
            close(idle);
    }
    hs->quiesced = 1;
}

int rk_http_inflight(const struct rk_app *app)
{
    const struct http_state *hs = app->http;
    return hs ? atomic_load(&((struct http_state *)hs)->inflight) : 0;
}

void rk_http_stop(struct rk_app *app)
{
    struct http_state *hs = app->http;
    if (!hs)
        return;
    if (hs->watchdog_started) {
        pthread_mutex_lock(&hs->mu);
        hs->stop = 1;
        pthread_cond_signal(&hs->cv);
        pthread_mutex_unlock(&hs->mu);
        pthread_join(hs->watchdog, NULL);
    }
    /* Let the workers finish what they run and what is queued: every job
     * resumes its connection at its end. The event loops still run; what
     * they queue from now on is answered busy. */
    if (hs->workers)
        rk_workers_stop(hs->workers);
    /* libmicrohttpd refuses to stop with suspended connections: give the
     * resumes and deferred requests (plugins' own loops) a bounded time. */
    int64_t until = rk_now_ms() + 5000;
    while (atomic_load(&hs->suspended) > 0 && rk_now_ms() < until) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    /* The loops' upstream transfers end (the daemon is stopping: they abort) while the loops
     * still run; then the loop threads stop. */
    for (int i = 0; i < hs->nloops; i++)
        rk_evloop_stop_transfers(hs->loops[i]);
    for (int i = 0; i < hs->nloops; i++)
        while (!rk_evloop_transfers_done(hs->loops[i]) && rk_now_ms() < until) {
            struct timespec ts = {0, 10 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
    for (int i = 0; i < hs->nloops; i++)
        rk_evloop_join(hs->loops[i]);
    if (atomic_load(&hs->suspended) > 0) {
        rk_warn("%d request(s) still suspended at shutdown: the HTTP server is left as it is",
                atomic_load(&hs->suspended));
        return;
    }
    for (int i = 0; i < hs->nloops; i++) {
        rk_evloop_free(hs->loops[i]); /* transfers still open end here, aborted */
        if (hs->daemons[i])
            MHD_stop_daemon(hs->daemons[i]);
    }
    free(hs->loops);
    free(hs->daemons);
    rk_ip_limit_free(hs->per_ip);
    rk_workers_free(hs->workers);
    pthread_mutex_destroy(&hs->mu);
    pthread_cond_destroy(&hs->cv);
    free(hs);
    app->http = NULL;
}
