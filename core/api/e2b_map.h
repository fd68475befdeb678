/* SPDX-License-Identifier: Apache-2.0 */
/*
 * E2B's wire shapes (the `e2b` SDK's OpenAPI client, 2.51.0) built from
 * rock-admin's sandbox records and status objects: the Sandbox answer of a
 * create, SandboxDetail and ListedSandbox, the error object
 * {"code": <http status>, "message": ...}, the status a core error maps to,
 * and the timeout rounding. Pure JSON and arithmetic: answering a request
 * with them is e2b_routes.c's.
 */
#ifndef RK_E2B_MAP_H
#define RK_E2B_MAP_H

#include <json-c/json.h>
#include <stdint.h>

#include "rock-admin/operator.h"

struct rk_req;

/** The envd version rock-admin's envd emulation answers as: new enough for
 *  the SDK's plain (user-less) requests and octet-stream uploads, older than
 *  the file metadata and watch features it does not emulate. */
#define RK_E2B_ENVD_VERSION "0.5.7"

/** The client id shown in E2B's Sandbox objects. */
#define RK_E2B_CLIENT_ID "rock-admin"

/** Idle lifetime in whole minutes for an E2B `timeout` in seconds: rounded
 *  up, at least 1. */
int64_t rk_e2b_timeout_minutes(int64_t seconds);

/** E2B's state name for a sandbox state: "running" (pending, running) or
 *  "paused" (stopped, archiving, archived); NULL for deleted. */
const char *rk_e2b_state(const char *rock_state);

/** The create answer (E2B `Sandbox`): sandboxID, templateID, clientID,
 *  envdVersion, envdAccessToken (when one was issued), domain null. */
json_object *rk_e2b_sandbox(const char *id, const char *template_id, const char *envd_token);

/** E2B's SandboxDetail / ListedSandbox from a status object (rk_rec_status
 *  shape): sandboxID, templateID, clientID, state, startedAt, endAt,
 *  cpuCount, memoryMB, diskSizeMB, metadata, envdVersion. NULL when the
 *  sandbox is deleted. */
json_object *rk_e2b_detail(json_object *status);

/** HTTP status for a core error: 400 invalid/unsupported, 404 not found,
 *  409 conflict/not running, 503 unavailable, 504 timeout, 500 otherwise. */
unsigned rk_e2b_http_status(rk_status st);

/** Answer {"code": http_status, "message": message}. */
void rk_e2b_reply_error(struct rk_req *r, unsigned http_status, const char *message);

/** Answer the error recorded on r->call in E2B's shape; a 500 carries a
 *  generic message (the detail goes to the log, never to the client). */
void rk_e2b_reply_call_error(struct rk_req *r);

#endif /* RK_E2B_MAP_H */
