/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The ROCK response envelope {"status","message","error","result"} and the
 * per-route failure result shapes of the wire contract (§2.4). Business and
 * validation errors are HTTP 200 with status "Failed". Pure JSON builders:
 * answering a request with them is reply.h's.
 */
#ifndef RK_ENVELOPE_H
#define RK_ENVELOPE_H

#include <json-c/json.h>

#include "base/util.h"

#include "rock-admin/operator.h"

/** The `result` object a route carries on 4000/5000 failures. */
enum rk_shape {
    RK_SHAPE_NULL = 0,         /* result: null */
    RK_SHAPE_SANDBOX_RESPONSE, /* {"code","exit_code","failure_reason"} */
    RK_SHAPE_START,            /* start object with code + failure_reason */
    RK_SHAPE_EXECUTE,          /* {"stdout":"","stderr":"","exit_code":null} */
    RK_SHAPE_CREATE_SESSION,   /* {"output":"","session_type":"bash"} */
    RK_SHAPE_RUN_SESSION,      /* {"session_type":"bash","output":"",...} */
    RK_SHAPE_CLOSE_SESSION,    /* {"session_type":"bash"} */
    RK_SHAPE_READ_FILE,        /* {"content":""} */
    RK_SHAPE_WRITE_FILE,       /* {"success":false,"message":""} */
    RK_SHAPE_UPLOAD,           /* {"success":false,"message":"","file_name":""} */
    RK_SHAPE_LIST,             /* list result with items [] */
    RK_SHAPE_BATCH,            /* batch result with statuses null */
};

/** ROCK code for a plugin/core status: 4000, 5000, or 0 (result null). */
int rk_status_rock_code(rk_status st);

/** {"status":"Success","message":null,"error":null,"result":result} (takes result). */
json_object *rk_envelope_success(json_object *result);

/** rk_envelope_success as JSON text around result, already JSON text of len bytes, appended
 *  to out. -1 when out's cap would be exceeded or memory ran out. */
int rk_envelope_success_text(struct rk_buf *out, const char *result, size_t len);

/** Failed envelope: code 0 gives result null, otherwise the shape filled
 *  with code and failure_reason = error. */
json_object *rk_envelope_failure(const char *message, const char *error, int code,
                                 enum rk_shape shape);

/** {"detail": detail}: the body of FastAPI-style HTTP errors (404, 405, 413...). */
json_object *rk_envelope_detail(const char *detail);

#endif /* RK_ENVELOPE_H */
