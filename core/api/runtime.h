/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the runtime routes (commands, sessions, files) share: output
 * collection capped by server.max_output_bytes / server.max_read_bytes and
 * charged to the memory budget, the command deadline, the sandbox env
 * overlay and the Python-style texts of their answers. Collected bytes are
 * never logged.
 *
 * Command timeouts have one owner, the core, and one place in it:
 * rk_command_deadline sets the call's deadline to the command's timeout plus
 * runtime.command_timeout_margin (time for the backend to report its own
 * kill); the plugin only honours it (host->deadline_ms) and reports how the
 * command ended, which rk_command_timed_out maps without deciding again.
 */
#ifndef RK_RUNTIME_H
#define RK_RUNTIME_H

#include <json-c/json.h>
#include <stdint.h>

#include "base/util.h"
#include "rock-admin/operator.h"

struct rk_req;
struct rk_call;

/** Collects stdout/stderr (or file bytes) with one cap over both buffers. */
struct rk_collector {
    struct rk_call *call;
    struct rk_buf out; /* stdout, or file data */
    struct rk_buf err; /* stderr */
    int64_t limit;     /* 0 = unlimited */
    const char *what;  /* "command output" / "file" */
    const char *key;   /* config key named in the error */
    int64_t charged;   /* bytes taken from rk_mem_budget, given back by rk_collector_free */
    int over_budget;   /* the global memory budget refused more bytes */
};

/** Start a collector with a cap of limit bytes (0 = none); what and key name
 *  the data and the config key in the cap's error. */
void rk_collector_init(struct rk_collector *c, struct rk_call *call, int64_t limit,
                       const char *what, const char *key);
/** Start a collector for command output (server.max_output_bytes). */
void rk_collector_output(struct rk_collector *c, struct rk_req *r);
/** Free a collector's buffers and give its bytes back to the budget. */
void rk_collector_free(struct rk_collector *c);
/** The rk_sink that writes into c. */
struct rk_sink rk_collector_sink(struct rk_collector *c);
/** If the memory budget stopped the collection, answer 503 "admin is busy"
 *  and return 1. */
int rk_collector_reply_busy(struct rk_req *r, const struct rk_collector *c);

/** A JSON string of bytes that may not be valid UTF-8 (invalid sequences
 *  become U+FFFD so the response stays valid JSON). */
json_object *rk_json_text(const char *s, size_t len);

/** The only value of the session_type / action_type literals. */
extern const char *const rk_bash_only[];

/** Seconds (has: a value applies) to the ABI's milliseconds (0 = none). */
int64_t rk_seconds_to_ms(int has, double s);
/** "9.0" like Python's str(float), or "None" for no timeout. */
void rk_timeout_repr(int has, double s, char out[64]);

/** Set the call's deadline for a command of timeout_ms (0 = none): the
 *  timeout plus runtime.command_timeout_margin. */
void rk_command_deadline(struct rk_req *r, int64_t timeout_ms);
/** 1 if the plugin reported that the command ran out of time: RK_E_TIMEOUT
 *  (the deadline passed), or a result whose backend killed it for time. */
int rk_command_timed_out(struct rk_call *call, rk_status st, const struct rk_exec_res *res);

/**
 * A command run through a plugin's asynchronous entry point (ABI 1.2:
 * exec_start, session_run_start). The route keeps, in a heap context that
 * embeds this struct, everything the command and its reply need; the request
 * is deferred (engine/request.h) and answered on the thread that reports the
 * end, usually the plugin's event loop. Only what is non-blocking happens
 * there: collect, map, reply (rk_command_timed_out and the envelope), count
 * the upstream metrics, release.
 */
struct rk_command_async {
    struct rk_req *r;
    const char *op; /* upstream metric name: "exec" / "session_run" */
    int64_t mark;   /* rk_metrics_upstream_start */
    struct rk_collector col;
    struct rk_exec_res res;
    struct rk_sink sink; /* writes into col */
    /* The route's mapping of the outcome onto the reply. It answers r and
     * frees the context (collector included); it must not block. */
    void (*complete)(struct rk_command_async *a, rk_status st);
};

/** Set a up for r: output collector (server.max_output_bytes), sink, result. */
void rk_command_async_init(struct rk_command_async *a, struct rk_req *r, const char *op,
                           void (*complete)(struct rk_command_async *a, rk_status st));
/** Right before the start entry point: defer the request and make the call's
 *  completion (host->call_done) run a->complete, the metrics and
 *  rk_req_finish. */
void rk_command_async_begin(struct rk_command_async *a);
/** Right after the start entry point returned st: RK_OK leaves the end to the
 *  plugin; anything else completes at once. Either way neither a nor the
 *  request may be touched afterwards by the caller. */
void rk_command_async_started(struct rk_command_async *a, rk_status st);

/** Reply the ROCK timeout failure "Timeout (<s>s) exceeded while running
 *  <what>" for a command of has/s seconds. */
void rk_reply_timeout(struct rk_req *r, int has, double s, const char *what);

/** The sandbox's stored env overlaid by the request's (B54/B80): sandbox keys
 *  first in their order, request values win, request-only keys appended.
 *  Arena copies; *n_out entries (NULL when none). */
const struct rk_kv *rk_env_overlay(struct rk_call *call, json_object *rec, json_object *req_env,
                                   size_t *n_out);

/** Append a backend error that is not a timeout to b (U24). */
void rk_append_error_text(struct rk_buf *b, const char *error_text);
/** Exit code as Python prints it ("None" when the backend gave none). */
void rk_exit_repr(const struct rk_exec_res *res, char out[24]);

/** The plugin's display name ("OpenSandbox") for user-facing texts. */
const char *rk_display_name(const struct rk_req *r);

#endif /* RK_RUNTIME_H */
