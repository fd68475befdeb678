/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Answering a request with the ROCK envelope: the route's failure message and
 * result shape (router.h) with the code of the status (envelope.h), or a
 * FastAPI-style {"detail"} error.
 */
#ifndef RK_REPLY_H
#define RK_REPLY_H

#include <json-c/json.h>
#include <stddef.h>

#include "rock-admin/operator.h"

struct rk_req;

/** Reply Success with result (takes ownership). */
void rk_reply_ok(struct rk_req *r, json_object *result);

/** Reply Success with a result that is already JSON text (len bytes, copied). */
void rk_reply_ok_text(struct rk_req *r, const char *result, size_t len);

/** Reply Failed for status st with text error, using the route's message and
 *  shape (code from rk_status_rock_code). */
void rk_reply_error(struct rk_req *r, rk_status st, const char *error);

/** Reply Failed for the error recorded on r->call. */
void rk_reply_call_error(struct rk_req *r);

/** Reply a validation failure: message "invalid parameter", result null. */
void rk_reply_invalid(struct rk_req *r, const char *error);

/** Reply {"detail": detail} with an HTTP status (404, 405, 400, 413, 500...). */
void rk_reply_detail(struct rk_req *r, unsigned http_status, const char *detail);

#endif /* RK_REPLY_H */
