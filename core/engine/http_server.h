/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The HTTP front end (libmicrohttpd in epoll mode: server.event_threads event
 * loops that never block, and a worker pool for everything that may).
 *
 * Each request gets a struct rk_req (request.h). Routes are matched when the
 * headers are complete; JSON routes get their body buffered (bounded by
 * server.max_body_bytes) and their handler queued on the worker pool
 * (workers.h) while the connection is suspended; streaming routes receive
 * body chunks on the loop as they arrive. Admission checks registered from
 * above (admission.h) run at fixed points.
 *
 * Limits (docs/operations.md "Limits"): headers must arrive within
 * server.header_timeout, bodies must average server.min_body_rate bytes/s
 * (time spent in our own handlers does not count), a per-address connection
 * limit, server.reserved_connections slots that only /livez, /readyz and
 * /metrics may use, server.worker_queue jobs waiting for a worker, and
 * buffered JSON bodies and responses are charged to the global memory budget
 * (budget.h).
 */
#ifndef RK_HTTP_SERVER_H
#define RK_HTTP_SERVER_H

#include "engine/admission.h"
#include "engine/request.h"

struct rk_app;

/** Start listening per app->cfg->server. Returns 0, or -1 with an error logged. */
int rk_http_start(struct rk_app *app);
/** Port actually bound (after start). */
int rk_http_port(const struct rk_app *app);
/** Stop accepting new connections (drain begins). */
void rk_http_quiesce(struct rk_app *app);
/** Number of requests currently being handled. */
int rk_http_inflight(const struct rk_app *app);
/** Stop the daemon and free it (in-flight connections are closed). */
void rk_http_stop(struct rk_app *app);

#endif /* RK_HTTP_SERVER_H */
