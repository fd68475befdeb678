/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The envd emulation's common ground (e2b_envd.h): which sandbox, whose
 * token, Connect's errors and envelopes, the client's deadline, and the
 * answers for what is not emulated.
 */
#include "api/e2b_envd.h"

#include <stdlib.h>
#include <string.h>

#include "access/auth.h"
#include "access/secret.h"
#include "api/e2b_map.h"
#include "base/app.h"
#include "domain/record.h"
#include "engine/http_server.h"
#include "engine/reply.h"
#include "engine/stream_reply.h"
#include "host/host.h"
#include "obs/log.h"
#include "store/store.h"

/* Connect's end-of-stream flag. */
#define END_STREAM 0x02u
/* Largest request message accepted (envd requests are small: paths, commands). */
#define MAX_MESSAGE (1u << 20)

const char *rk_envd_code(rk_status st)
{
    switch (st) {
    case RK_E_INVALID:
        return "invalid_argument";
    case RK_E_NOT_FOUND:
        return "not_found";
    case RK_E_CONFLICT:
        return "already_exists";
    case RK_E_UNSUPPORTED:
        return "unimplemented";
    case RK_E_NOT_RUNNING:
    case RK_E_UNAVAILABLE:
    case RK_E_UPSTREAM:
        return "unavailable";
    case RK_E_TIMEOUT:
        return "deadline_exceeded";
    case RK_E_CANCELLED:
        return "canceled";
    case RK_E_TOO_LARGE:
    case RK_E_NOMEM:
        return "resource_exhausted";
    default:
        return "internal";
    }
}

/* The HTTP status Connect gives an error code (unary RPCs). */
static unsigned code_http(const char *code)
{
    static const struct {
        const char *code;
        unsigned http;
    } map[] = {
        {"canceled", 499},           {"invalid_argument", 400},    {"deadline_exceeded", 504},
        {"not_found", 404},          {"already_exists", 409},      {"permission_denied", 403},
        {"resource_exhausted", 429}, {"failed_precondition", 400}, {"unimplemented", 501},
        {"unavailable", 503},        {"unauthenticated", 401}};
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (!strcmp(map[i].code, code))
            return map[i].http;
    return 500;
}

/* {"code": code, "message": message} (new reference). */
static json_object *error_object(const char *code, const char *message)
{
    json_object *o = json_object_new_object();
    json_object_object_add(o, "code", json_object_new_string(code));
    json_object_object_add(o, "message", json_object_new_string(message ? message : ""));
    return o;
}

void rk_envd_reply_message(struct rk_req *r, json_object *message)
{
    r->outcome = "success";
    rk_req_reply_json(r, 200, message);
}

void rk_envd_reply_error(struct rk_req *r, const char *code, const char *message)
{
    unsigned http = code_http(code);
    r->outcome = http >= 500 ? "server_error" : "client_error";
    rk_req_reply_json(r, http, error_object(code, message));
}

int rk_envd_envelope(struct rk_buf *out, unsigned flags, const char *json, size_t len)
{
    unsigned char head[5] = {(unsigned char)flags, (unsigned char)(len >> 24),
                             (unsigned char)(len >> 16), (unsigned char)(len >> 8),
                             (unsigned char)len};
    if (rk_buf_append(out, head, sizeof head) != 0)
        return -1;
    return rk_buf_append(out, json, len);
}

void rk_envd_reply_stream_error(struct rk_req *r, const char *code, const char *message)
{
    json_object *end = json_object_new_object();
    json_object_object_add(end, "error", error_object(code, message));
    size_t len = 0;
    const char *text = json_object_to_json_string_length(end, JSON_C_TO_STRING_PLAIN, &len);
    struct rk_buf b = {0};
    rk_envd_envelope(&b, END_STREAM, text, len);
    json_object_put(end);
    struct rk_outstream *s = rk_stream_new(b.len, 0, NULL, NULL);
    if (!s || rk_stream_push(s, b.data, b.len, 0) != 0) {
        rk_stream_unref(s);
        rk_buf_free(&b);
        rk_reply_detail(r, 500, "out of memory");
        return;
    }
    rk_buf_free(&b);
    rk_stream_close(s);
    r->outcome = "failed";
    rk_req_reply_stream(r, 200, "application/connect+json", s, NULL, NULL);
    rk_stream_unref(s);
}

void rk_envd_reply_call_error(struct rk_req *r, int stream)
{
    rk_status st = rk_call_error_code(r->call);
    const char *code = rk_envd_code(st == RK_OK ? RK_E_INTERNAL : st);
    const char *text = rk_call_error_text(r->call);
    if (!strcmp(code, "internal")) {
        rk_warn("[%s] envd request failed: %s", r->request_id, text);
        text = "internal error (see the rock-admin log for the request id)";
    }
    if (stream)
        rk_envd_reply_stream_error(r, code, text);
    else
        rk_envd_reply_error(r, code, text);
}

json_object *rk_envd_request(struct rk_req *r, int stream)
{
    const char *p = r->body ? r->body : "";
    size_t n = r->body ? r->body_len : 0;
    if (stream) {
        /* one envelope: flags 0, big-endian length, the JSON message */
        size_t len = n >= 5
                         ? ((size_t)(unsigned char)p[1] << 24 | (size_t)(unsigned char)p[2] << 16 |
                            (size_t)(unsigned char)p[3] << 8 | (size_t)(unsigned char)p[4])
                         : 0;
        if (n < 5 || (p[0] & 0x01) || len != n - 5) {
            rk_envd_reply_stream_error(r, "invalid_argument",
                                       "expected one uncompressed Connect envelope");
            return NULL;
        }
        p += 5;
        n = len;
    }
    json_object *o = NULL;
    if (n <= MAX_MESSAGE) {
        struct json_tokener *tok = json_tokener_new();
        o = json_tokener_parse_ex(tok, n ? p : "{}", n ? (int)n : 2);
        if (o && json_tokener_get_parse_end(tok) != (n ? n : 2)) {
            json_object_put(o);
            o = NULL;
        }
        json_tokener_free(tok);
    }
    if (!o || !json_object_is_type(o, json_type_object)) {
        json_object_put(o);
        if (stream)
            rk_envd_reply_stream_error(r, "invalid_argument", "the request is not a JSON object");
        else
            rk_envd_reply_error(r, "invalid_argument", "the request is not a JSON object");
        return NULL;
    }
    return o;
}

int64_t rk_envd_timeout_ms(struct rk_req *r)
{
    const char *t = rk_req_header(r, "connect-timeout-ms");
    if (!t || !*t)
        return 0;
    char *end = NULL;
    long long v = strtoll(t, &end, 10);
    return (*end || v <= 0) ? 0 : (int64_t)v;
}

/* Reply an error in the RPC's kind. */
static void fail(struct rk_req *r, int stream, const char *code, const char *message)
{
    if (stream)
        rk_envd_reply_stream_error(r, code, message);
    else
        rk_envd_reply_error(r, code, message);
}

/* 1 when presented is one of the sandbox's envd tokens: the one its create issued
 * (envd_token_sha256) or one a connect issued (envd_tokens_sha256, e2b_lifetime.c). Every
 * digest is compared, each in constant time. */
static int token_matches(json_object *rec, const char *presented)
{
    int ok = rk_secret_matches(rk_rec_str(rec, "envd_token_sha256"), presented);
    json_object *list = NULL;
    if (json_object_object_get_ex(rec, "envd_tokens_sha256", &list) &&
        json_object_is_type(list, json_type_array))
        for (size_t i = 0; i < json_object_array_length(list); i++)
            ok |= rk_secret_matches(json_object_get_string(json_object_array_get_idx(list, i)),
                                    presented);
    return ok;
}

int rk_envd_target(struct rk_req *r, enum rk_op op, int stream, struct rk_target *t)
{
    memset(t, 0, sizeof *t);
    const char *id = rk_req_header(r, "E2b-Sandbox-Id");
    const char *port = rk_req_header(r, "E2b-Sandbox-Port");
    if (!id || !*id || !rk_id_valid(id, strlen(id))) {
        fail(r, stream, "invalid_argument", "the E2b-Sandbox-Id header names no sandbox");
        return -1;
    }
    rk_req_set_sandbox(r, id);
    if (port && *port && atoi(port) != RK_ENVD_PORT) {
        fail(r, stream, "unimplemented",
             rk_arena_printf(r->call,
                             "rock-admin serves envd (port %d) here; reach other sandbox ports "
                             "through /apis/envs/sandbox/v1/sandboxes/%s/proxy/port/<port>/",
                             RK_ENVD_PORT, id));
        return -1;
    }
    char err[RK_STORE_ERRLEN];
    json_object *rec = NULL;
    rk_store_rc rc = rk_store_get(r->app->store, id, &rec, err, sizeof err);
    if (rc == RK_STORE_ERROR) {
        rk_warn("[%s] envd: sandbox store unavailable: %s", r->request_id, err);
        fail(r, stream, "unavailable", "sandbox store unavailable");
        return -1;
    }
    if (rc == RK_STORE_NOT_FOUND || rk_rec_state(rec) == RK_STATE_DELETED) {
        json_object_put(rec);
        /* the SDK reads "unavailable" as "the sandbox is not running any more" */
        fail(r, stream, "unavailable", rk_arena_printf(r->call, "Sandbox %s not found", id));
        return -1;
    }
    /* The sandbox's own token when authentication is on: one sandbox's token
     * cannot drive another. Compared in constant time; never logged. */
    if (rk_auth_enabled() && !token_matches(rec, rk_req_header(r, "X-Access-Token"))) {
        json_object_put(rec);
        r->outcome = "unauthorized";
        fail(r, stream, "unauthenticated",
             "send the sandbox's envdAccessToken (from its create answer) as X-Access-Token");
        return -1;
    }
    if (rk_dispatch_record(r->app, r->call, op, id, rec, t) != RK_OK) {
        rk_envd_reply_call_error(r, stream);
        return -1;
    }
    return 0;
}

void rk_envd_unimplemented(struct rk_req *r)
{
    const char *method = r->params[0] ? r->params[0] : "";
    const char *service =
        !strncmp(r->path, "/process.", 9) ? "process.Process" : "filesystem.Filesystem";
    const char *ct = rk_req_header(r, "Content-Type");
    int stream = ct && strstr(ct, "connect+") != NULL;
    fail(r, stream, "unimplemented",
         rk_arena_printf(r->call,
                         "%s/%s is not emulated by rock-admin: OpenSandbox's execd cannot back it "
                         "(see docs/e2b.md)",
                         service, method));
}

void rk_envd_health(struct rk_req *r)
{
    struct rk_target t;
    if (rk_envd_target(r, RK_OP_EXEC, 0, &t) != 0)
        return;
    rk_target_release(&t);
    r->outcome = "success";
    rk_req_reply_empty(r, 204);
}
