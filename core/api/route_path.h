/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The one path every sandbox route takes: validate the request (validate.h),
 * pass the fail-closed gate for the route's operation (its row in the op
 * table of domain/dispatch.c decides capability, state and idle touch), call
 * the plugin (RK_UPSTREAM, domain/lifecycle.h, times it for the upstream
 * metrics) and reply (rk_path_fail for a plugin failure). A handler keeps
 * only what is its own: the fields it reads and the result it builds.
 */
#ifndef RK_ROUTE_PATH_H
#define RK_ROUTE_PATH_H

#include <json-c/json.h>

#include "api/validate.h"
#include "domain/dispatch.h"
#include "domain/lifecycle.h"
#include "engine/http_server.h"
#include "engine/reply.h"

/** One sandbox request on its way from validation to the reply. */
struct rk_route_path {
    struct rk_req *r;
    struct rk_v v;      /* validation problems */
    json_object *body;  /* the parsed JSON body (NULL for query routes or a bad body) */
    struct rk_target t; /* the sandbox that passed the gate */
};

/** Start on the JSON body: validation at "body", the body parsed into p->body. */
void rk_path_body(struct rk_route_path *p, struct rk_req *r);

/** rk_path_body, then the body's required sandbox_id (NonBlank, the
 *  identifier rule; noted on the request): the start of every route on one
 *  sandbox's body. NULL when it is missing or invalid (the problem is kept
 *  for rk_path_valid / rk_path_gate). */
const char *rk_path_sandbox(struct rk_route_path *p, struct rk_req *r);

/** Start on the query string: validation at "query". */
void rk_path_query(struct rk_route_path *p, struct rk_req *r);

/** Validation done: reply "invalid parameter" and return -1 when there were
 *  problems, else 0. */
int rk_path_valid(struct rk_route_path *p);

/** rk_path_valid, then the gate for op on id: 0 when p->t holds the
 *  target, -1 after the refusal was replied. */
int rk_path_gate(struct rk_route_path *p, enum rk_op op, const char *id);

/** Reply a plugin failure st: the error the plugin recorded, or a generic
 *  one naming st when it recorded none. */
void rk_path_fail(struct rk_route_path *p, rk_status st);

/** rk_path_fail for a request without its path (a completion that runs
 *  after the path was released). */
void rk_reply_plugin_failure(struct rk_req *r, rk_status st);

/** Release what the path holds (target, problems, body). */
void rk_path_end(struct rk_route_path *p);

/** Reply Success with the string "<id> <what>" ("<id> stopped", ...). */
void rk_reply_id_text(struct rk_req *r, const char *id, const char *what);

/** Reply the 5000 "sandbox store unavailable: <err>". */
void rk_reply_store_error(struct rk_req *r, const char *err);

/** {"code": null, "exit_code": null, "failure_reason": null}: the head of
 *  every sandbox result object. */
json_object *rk_result_head(void);

/** rk_result_head as JSON text appended to b, the object left open for the members that
 *  follow (the caller writes them, each after a comma, and the closing brace). -1 when b's
 *  cap would be exceeded or memory ran out. */
int rk_result_head_text(struct rk_buf *b);

/** The start object returned by start, start_async and restart (§5.1). */
json_object *rk_start_result(const char *id, const char *disk);

/** The body's sandbox_id (required; RK_V_NONBLANK in flags strips it), or
 *  NULL after a validation reply. */
const char *rk_body_sandbox_id(struct rk_req *r, unsigned flags);

/**
 * A state-changing plugin operation (stop, restart, archive) through the
 * gate: the sandbox must be in `from` (0 = any), the plugin is called, and
 * the record moves to `to`. Replies on failure and returns -1.
 */
int rk_route_state_op(struct rk_req *r, const char *id, enum rk_op op, enum rk_state to,
                      enum rk_state from);

#endif /* RK_ROUTE_PATH_H */
