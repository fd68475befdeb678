/* SPDX-License-Identifier: Apache-2.0 */
/* Answering a request with a ROCK envelope (reply.h). */
#include "engine/reply.h"

#include "engine/envelope.h"
#include "engine/http_server.h"
#include "engine/router.h"
#include "host/host.h"

void rk_reply_ok(struct rk_req *r, json_object *result)
{
    r->outcome = "success";
    rk_req_reply_json(r, 200, rk_envelope_success(result));
}

void rk_reply_ok_text(struct rk_req *r, const char *result, size_t len)
{
    struct rk_buf body = {0};
    if (rk_envelope_success_text(&body, result, len) != 0) {
        rk_buf_free(&body);
        rk_req_reply_busy(r, "out of memory building the response");
        return;
    }
    r->outcome = "success";
    rk_req_reply_json_text(r, 200, body.data, body.len, NULL, 0);
    rk_buf_free(&body);
}

void rk_reply_error(struct rk_req *r, rk_status st, const char *error)
{
    const char *message = r->route ? r->route->fail_message : NULL;
    enum rk_shape shape = r->route ? (enum rk_shape)r->route->shape : RK_SHAPE_NULL;
    int code = rk_status_rock_code(st);
    r->outcome = code == 5000 ? "server_error" : "failed";
    rk_req_reply_json(r, 200, rk_envelope_failure(message, error, code, shape));
}

void rk_reply_call_error(struct rk_req *r)
{
    rk_status st = rk_call_error_code(r->call);
    if (st == RK_OK)
        st = RK_E_INTERNAL;
    rk_reply_error(r, st, rk_call_error_text(r->call));
}

void rk_reply_invalid(struct rk_req *r, const char *error)
{
    r->outcome = "invalid";
    rk_req_reply_json(r, 200, rk_envelope_failure("invalid parameter", error, 0, RK_SHAPE_NULL));
}

void rk_reply_detail(struct rk_req *r, unsigned http_status, const char *detail)
{
    r->outcome = http_status >= 500 ? "server_error" : "client_error";
    rk_req_reply_json(r, http_status, rk_envelope_detail(detail));
}
