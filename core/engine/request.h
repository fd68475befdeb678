/* SPDX-License-Identifier: Apache-2.0 */
/*
 * One HTTP request as handlers see it: struct rk_req, its accessors and its
 * answers. It lives until the connection finishes the response. A handler
 * answers with rk_req_reply_json() or installs its own libmicrohttpd response
 * with rk_req_reply_mhd(); every response carries X-Request-ID and the
 * headers the admission checks add.
 *
 * Threads: handlers run on a worker (engine/workers.h) while the connection
 * is suspended; the reply functions only keep the answer in the request, and
 * the event loop queues it once the connection is resumed. A handler that
 * answers later from another thread calls rk_req_defer() and, after the
 * reply, rk_req_finish().
 */
#ifndef RK_REQUEST_H
#define RK_REQUEST_H

#include <json-c/json.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "base/ident.h"
#include "engine/router.h"
#include "rock-admin/operator.h"

struct rk_app;
struct rk_route;
struct rk_call;
struct MHD_Response;
struct MHD_Connection;
struct rk_evloop;
struct rku_curl_loop;
struct rku_h1;
struct rk_store_reader;

/** Size of rk_req.auth_name (token names are at most 63 characters). */
#define RK_AUTH_NAME_MAX 64

/** rk_req.job_state: a job runs; the loop suspended the connection for it;
 *  it is done (the holds are gone). */
enum { RK_JOB_RUNNING = 0, RK_JOB_WAITING = 1, RK_JOB_DONE = 2 };

/** One in-flight HTTP request. */
struct rk_req {
    struct rk_app *app;
    struct MHD_Connection *conn;
    const struct rk_route *route;
    const char *method;                /* "GET", ... */
    const char *path;                  /* percent-decoded path without the query */
    char *raw_uri;                     /* as received: raw path + "?" + raw query */
    char *raw_path;                    /* raw_uri up to '?' (lazily split) */
    const char *params[RK_MAX_PARAMS]; /* decoded path parameters (point into param_buf) */
    char *param_buf;
    struct rk_call *call; /* deadline, arena, error slot, request id */
    int64_t start_ms;     /* monotonic start time */
    char request_id[40];  /* from X-Request-ID or generated */
    /* the sandbox the request names, for the access log: set by the router
     * (RK_ROUTE_SANDBOX_PARAM) and by the validators (sandbox_id fields) */
    char sandbox_id[RK_ID_MAX + 1];
    /* body handling */
    char *body; /* buffered body (JSON routes), NUL-terminated */
    size_t body_len;
    int body_too_large;
    void *route_ctx;                          /* streaming routes' private state */
    void (*route_ctx_free)(struct rk_req *r); /* called when the request ends */
    /* response */
    int responded;
    unsigned http_status;
    const char *outcome; /* "ok", "failed", "client_error", ... for metrics */
    /* limits and budgets */
    int data_slot;          /* holds one of the data-route slots (not health) */
    int64_t budget_charged; /* bytes taken from rk_mem_budget, given back at the end */
    int64_t body_reserved;  /* body bytes already covered by budget_charged */
    int budget_refused;     /* the body did not fit the budget: answer busy at the end */
    /* authentication (auth.c) */
    char auth_name[RK_AUTH_NAME_MAX]; /* token name for the access log, "-" if none */
    int auth_via_authorization;       /* the Authorization header carried our token */
    int auth_refused; /* 401 owed once the body is drained: 1 no token, 2 a wrong one */
    /* a refusal an admission check owes once the body is drained (rk_req_refuse_after_body) */
    void (*refusal)(struct rk_req *r);
    /* the event engine (http_server.c): the answer waiting for the loop, what
     * the suspended connection waits for, and the holds that keep it suspended
     * (the worker running its job, a deferral); the last one released resumes */
    struct MHD_Response *reply_resp;
    int job;                /* 0, or the job the connection waits for (http_server.c) */
    int suspended;          /* suspended by rk_req_suspend, not yet resumed (loop only) */
    int deferred;           /* rk_req_defer was called */
    int on_loop;            /* route code runs on the event loop (RK_ROUTE_LOOP_FIRST) */
    struct rk_evloop *loop; /* the event loop serving the connection (event_loops.c) */
    int wants_worker;       /* it called rk_req_needs_worker(): run it again on a worker */
    size_t body_kept;       /* body bytes a stream route left for later (see router.h) */
    atomic_int holds;
    atomic_int job_state; /* RK_JOB_RUNNING, _WAITING (the loop suspended for it), _DONE */
};

/** From an admission check: answer the request with refuse(r) once its
 *  body has been drained (bounded), so the client reads the refusal rather
 *  than a reset. */
void rk_req_refuse_after_body(struct rk_req *r, void (*refuse)(struct rk_req *r));

/** Request header value (case-insensitive) or NULL. */
const char *rk_req_header(struct rk_req *r, const char *name);
/** Decoded query argument or NULL. (Last value wins for repeated keys.) */
const char *rk_req_query(struct rk_req *r, const char *name);
/** Call fn for every query argument (decoded) in order. */
void rk_req_query_each(struct rk_req *r, void (*fn)(void *ctx, const char *k, const char *v),
                       void *ctx);
/** Call fn for every request header in order. */
void rk_req_header_each(struct rk_req *r, void (*fn)(void *ctx, const char *k, const char *v),
                        void *ctx);
/** Raw query string (after '?', not decoded) or "" */
const char *rk_req_raw_query(struct rk_req *r);
/** Raw path (before '?', not decoded). */
const char *rk_req_raw_path(struct rk_req *r);
/** Socket of the client connection (for client-gone checks and upgrades). */
int rk_req_client_fd(struct rk_req *r);

/** Note the sandbox the request names (for the access log); an id that
 *  breaks the identifier rule (base/ident.h) is not kept. */
void rk_req_set_sandbox(struct rk_req *r, const char *sandbox_id);

/** Answer 503 with a 5000 envelope "admin is busy: <why>" (a limit was reached). */
void rk_req_reply_busy(struct rk_req *r, const char *why);

/** Answer with a JSON body (takes ownership of body). */
void rk_req_reply_json(struct rk_req *r, unsigned http_status, json_object *body);
/** Answer with a JSON body and extra response headers (takes ownership of
 *  body; headers are copied). */
void rk_req_reply_json_headers(struct rk_req *r, unsigned http_status, json_object *body,
                               const struct rk_kv *headers, size_t n_headers);
/** Answer with a JSON body that is already text (len bytes, copied), charged to the memory
 *  budget like rk_req_reply_json_headers' serialization; headers are copied. */
void rk_req_reply_json_text(struct rk_req *r, unsigned http_status, const char *text, size_t len,
                            const struct rk_kv *headers, size_t n_headers);
/** Answer with len bytes of data (copied) of the given Content-Type. */
void rk_req_reply_bytes(struct rk_req *r, unsigned http_status, const char *content_type,
                        const void *data, size_t len);
/** Answer with an empty body (204 and the like). */
void rk_req_reply_empty(struct rk_req *r, unsigned http_status);
/** Answer with a prepared libmicrohttpd response (takes ownership). Any
 *  thread that owns the request: the response is kept and queued by the
 *  event loop (never MHD_queue_response off the loop). */
void rk_req_reply_mhd(struct rk_req *r, unsigned http_status, struct MHD_Response *resp);

/** Called by a handler running on a worker: the request will be answered
 *  later from another thread. The handler returns without a reply and the
 *  worker leaves the connection suspended until rk_req_finish(). */
void rk_req_defer(struct rk_req *r);
/** Called exactly once, from any thread, after one of the rk_req_reply_*
 *  functions answered a deferred request: hands the reply to the event loop
 *  (resumes the connection). The request stays valid until then. */
void rk_req_finish(struct rk_req *r);

/** Suspend the request's connection. Only on the event loop, inside one of
 *  the connection's libmicrohttpd callbacks (access handler, content reader);
 *  every suspension is ended by exactly one rk_req_resume(). */
void rk_req_suspend(struct rk_req *r);
/** Resume a connection suspended by rk_req_suspend (any thread). */
void rk_req_resume(struct rk_req *r);
/** For route code of an RK_ROUTE_LOOP_FIRST route: 1 when it runs on the
 *  event loop, where it must not block. The code then returns at once,
 *  having changed nothing and answered nothing, and the engine runs it again
 *  on a worker (where this returns 0). */
int rk_req_needs_worker(struct rk_req *r);

/** Run fn(arg) on the worker pool (engine/workers.h); 0, or -1 when its
 *  queue (server.worker_queue) is full or the server stops. */
int rk_req_submit(struct rk_req *r, void (*fn)(void *), void *arg);

/** The curl multi loop (lib/rkcurlloop.h) of the event loop serving r's connection: upstream
 *  transfers submitted there run on the connection's own thread, so their answers resume it
 *  without waking another thread. NULL if the request has no loop (never for a request from
 *  the HTTP engine). Submit from any thread. */
struct rku_curl_loop *rk_req_curl_loop(const struct rk_req *r);

/** The HTTP/1.1 client (lib/rkh1.h) of the event loop serving r's connection, for plain-HTTP
 *  upstreams at IP literals; the same thread rule as rk_req_curl_loop. NULL if the request has
 *  no loop. Submit from any thread. */
struct rku_h1 *rk_req_h1(const struct rk_req *r);

/** For route code running on the event loop (rk_req_on_loop): that loop's store reader
 *  (store/store_reader.h), whose callbacks come back on the same thread; NULL off the loop or
 *  when the store has none. */
struct rk_store_reader *rk_req_store_reader(const struct rk_req *r);

/** 1 while the route code of an RK_ROUTE_LOOP_FIRST route runs on the event loop (where it
 *  must not block), without asking for a worker (rk_req_needs_worker). */
int rk_req_on_loop(const struct rk_req *r);

/** Let the event loop that served a connection run libmicrohttpd soon (any thread, NULL-safe):
 *  after MHD_upgrade_action(MHD_UPGRADE_ACTION_CLOSE) on one of its upgraded connections from
 *  another thread (the loop's daemon has no inter-thread channel of its own). */
void rk_req_loop_wake(struct rk_evloop *loop);

#endif /* RK_REQUEST_H */
