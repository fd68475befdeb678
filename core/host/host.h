/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The host side of the operator ABI: the rk_host table handed to plugins and
 * the per-request struct rk_call (arena, deadline, cancellation, error slot).
 */
#ifndef RK_HOST_H
#define RK_HOST_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "rock-admin/operator.h"

/** The host table given to the plugin's init(). */
extern const struct rk_host rk_host_table;

/** Set the prefix used for plugin log lines (the plugin name). */
void rk_host_set_plugin_name(const char *name);

/** Mark the daemon as stopping: every call reports cancelled. */
void rk_host_shutdown(void);

/** Create a call. client_fd < 0 disables client-gone detection; deadline 0 = none. */
struct rk_call *rk_call_new(const char *request_id, int client_fd, int64_t deadline_ms);
/** Free a call and its arena. */
void rk_call_free(struct rk_call *call);
/** Set or replace the absolute deadline (monotonic ms; 0 = none). */
void rk_call_set_deadline(struct rk_call *call, int64_t deadline_ms);

/** Completion of an operation a plugin started asynchronously (ABI 1.2):
 *  st is the status the blocking form would have returned. Runs on the
 *  thread that reported it (the plugin's loop, or the starting thread). */
typedef void (*rk_call_done_fn)(void *ctx, rk_status st);
/** Set the completion of the asynchronous operation about to start on call
 *  (one at a time; cleared when it runs). */
void rk_call_on_done(struct rk_call *call, rk_call_done_fn fn, void *ctx);
/** The host table's call_done: run and clear the call's completion. Also
 *  what the core calls itself when a start entry point refused to start. */
void rk_call_done(struct rk_call *call, rk_status st);

/** Receiver of the plugin's state reports (ABI 1.3 host->state_report): runs on the
 *  reporting thread (the plugin's loop) and must not block. */
typedef void (*rk_state_report_fn)(const char *sandbox_id, const struct rk_status_info *info);
/** Route the plugin's state reports to fn (NULL: ignore them, the default). */
void rk_host_on_state_report(rk_state_report_fn fn);

/** Allocate n zeroed bytes in the call's arena; NULL on failure or when the
 *  size cannot be rounded without overflow (the ABI's arena_alloc). */
void *rk_arena_try_alloc(struct rk_call *call, size_t n);
/** Arena helpers for the core (memory lives until rk_call_free). Abort on OOM. */
void *rk_arena_alloc(struct rk_call *call, size_t n);
char *rk_arena_strdup(struct rk_call *call, const char *s);
char *rk_arena_strndup(struct rk_call *call, const char *s, size_t n);
char *rk_arena_printf(struct rk_call *call, const char *fmt, ...) RK_PRINTF(2, 3);

/** Record an error (replaces an earlier one); returns code. */
rk_status rk_call_set_error(struct rk_call *call, rk_status code, const char *fmt, ...)
    RK_PRINTF(3, 4);
/** The recorded error code (RK_OK if none). */
rk_status rk_call_error_code(const struct rk_call *call);
/** The recorded error text, or a generic text for the code. */
const char *rk_call_error_text(const struct rk_call *call);
/** Forget the recorded error. */
void rk_call_clear_error(struct rk_call *call);
/** Cancel a call from any thread (its work is no longer wanted: the client of
 *  a streamed answer left, or the work was killed): rk_call_cancelled reports
 *  it from then on. */
void rk_call_cancel(struct rk_call *call);
/** Non-zero when the client left, the deadline passed, the call was
 *  cancelled or the daemon stops. */
int rk_call_cancelled(const struct rk_call *call);
/** Non-zero when the call has a deadline and it has passed. */
int rk_call_deadline_passed(const struct rk_call *call);
/** The request id. */
const char *rk_call_request_id(const struct rk_call *call);

#endif /* RK_HOST_H */
