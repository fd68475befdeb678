/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the envd emulation's routes share (docs/e2b.md): the sandbox a
 * request is for (E2b-Sandbox-Id, E2b-Sandbox-Port), its per-sandbox access
 * token (X-Access-Token, checked in constant time when authentication is
 * on, never logged), the gate, Connect's JSON error model and its
 * server-streaming envelopes (1 flag byte, 4-byte big-endian length, JSON;
 * flag 0x02 marks the end-of-stream message), and the deadline a client asks
 * for (connect-timeout-ms).
 */
#ifndef RK_E2B_ENVD_H
#define RK_E2B_ENVD_H

#include <json-c/json.h>
#include <stdint.h>

#include "base/util.h"
#include "domain/dispatch.h"
#include "engine/router.h"
#include "rock-admin/operator.h"

struct rk_req;

/** The port envd listens on in an E2B sandbox (E2b-Sandbox-Port). */
#define RK_ENVD_PORT 49983

/** Connect error code for a core error ("not_found", "deadline_exceeded"...). */
const char *rk_envd_code(rk_status st);

/** Answer a unary RPC with message (takes ownership), 200 application/json. */
void rk_envd_reply_message(struct rk_req *r, json_object *message);
/** Answer a unary RPC with Connect's error {"code","message"} and the HTTP
 *  status the protocol gives that code. */
void rk_envd_reply_error(struct rk_req *r, const char *code, const char *message);
/** Answer a server-streaming RPC that fails before it starts: 200
 *  application/connect+json holding only the end-of-stream error. */
void rk_envd_reply_stream_error(struct rk_req *r, const char *code, const char *message);
/** Answer the error recorded on r->call (stream: as a streaming RPC). */
void rk_envd_reply_call_error(struct rk_req *r, int stream);

/** Append one Connect envelope (flags 0 for a message, 0x02 for the end of
 *  the stream) holding json to out; -1 when out's cap refuses it. */
int rk_envd_envelope(struct rk_buf *out, unsigned flags, const char *json, size_t len);

/** The request message: the JSON body of a unary RPC, or the one enveloped
 *  message of a server-streaming one (stream). NULL after an error reply. */
json_object *rk_envd_request(struct rk_req *r, int stream);

/** The client's deadline in ms (connect-timeout-ms; 0 = none). */
int64_t rk_envd_timeout_ms(struct rk_req *r);

/**
 * The sandbox of an envd request: E2b-Sandbox-Id (required), the port
 * (E2b-Sandbox-Port, 49983 when absent; any other is refused with a pointer
 * to the HTTP proxy), the access token when authentication is on, then the
 * gate for op. 0 with t filled, or -1 after an error reply (stream: as a
 * streaming RPC).
 */
int rk_envd_target(struct rk_req *r, enum rk_op op, int stream, struct rk_target *t);

/* Handlers (e2b_envd.c): */
void rk_envd_unimplemented(struct rk_req *r); /* any RPC rock-admin does not emulate */
void rk_envd_health(struct rk_req *r);        /* GET /health: 204 while the sandbox runs */
/* e2b_process.c */
void rk_envd_process_start(struct rk_req *r);
void rk_envd_process_list(struct rk_req *r);
void rk_envd_process_signal(struct rk_req *r);
/* e2b_files.c */
void rk_envd_fs_stat(struct rk_req *r);
void rk_envd_fs_list(struct rk_req *r);
void rk_envd_fs_mkdir(struct rk_req *r);
void rk_envd_fs_remove(struct rk_req *r);
void rk_envd_fs_move(struct rk_req *r);
/* e2b_transfer.c: /files, streamed both ways */
void rk_envd_files_get(struct rk_req *r);
int rk_envd_files_begin(struct rk_req *r);
int rk_envd_files_body(struct rk_req *r, const char *data, size_t len);
void rk_envd_files_post(struct rk_req *r);

/* An envd route: the handler authenticates (the sandbox's access token). */
#define RK_ENVD_ROUTE(m, pat, nm, bm, fn)                                                          \
    {                                                                                              \
        .method = m, .pattern = pat, .name = nm, .body_mode = bm, .handler = fn,                   \
        .flags = RK_ROUTE_OWN_AUTH                                                                 \
    }

/** The envd routes, spliced into rk_e2b_routes (e2b_routes.c). */
#define RK_E2B_ENVD_ROUTES                                                                         \
    RK_ENVD_ROUTE("POST", "/process.Process/Start", "envd_process_start", RK_BODY_JSON,            \
                  rk_envd_process_start),                                                          \
        RK_ENVD_ROUTE("POST", "/process.Process/List", "envd_process_list", RK_BODY_JSON,          \
                      rk_envd_process_list),                                                       \
        RK_ENVD_ROUTE("POST", "/process.Process/SendSignal", "envd_process_signal", RK_BODY_JSON,  \
                      rk_envd_process_signal),                                                     \
        RK_ENVD_ROUTE("*", "/process.Process/{method}", "envd_unimplemented", RK_BODY_JSON,        \
                      rk_envd_unimplemented),                                                      \
        RK_ENVD_ROUTE("POST", "/filesystem.Filesystem/Stat", "envd_fs_stat", RK_BODY_JSON,         \
                      rk_envd_fs_stat),                                                            \
        RK_ENVD_ROUTE("POST", "/filesystem.Filesystem/ListDir", "envd_fs_list", RK_BODY_JSON,      \
                      rk_envd_fs_list),                                                            \
        RK_ENVD_ROUTE("POST", "/filesystem.Filesystem/MakeDir", "envd_fs_mkdir", RK_BODY_JSON,     \
                      rk_envd_fs_mkdir),                                                           \
        RK_ENVD_ROUTE("POST", "/filesystem.Filesystem/Remove", "envd_fs_remove", RK_BODY_JSON,     \
                      rk_envd_fs_remove),                                                          \
        RK_ENVD_ROUTE("POST", "/filesystem.Filesystem/Move", "envd_fs_move", RK_BODY_JSON,         \
                      rk_envd_fs_move),                                                            \
        RK_ENVD_ROUTE("*", "/filesystem.Filesystem/{method}", "envd_unimplemented", RK_BODY_JSON,  \
                      rk_envd_unimplemented),                                                      \
        RK_ENVD_ROUTE("GET", "/files", "envd_files_get", RK_BODY_NONE, rk_envd_files_get),         \
        {.method = "POST",                                                                         \
         .pattern = "/files",                                                                      \
         .name = "envd_files_post",                                                                \
         .body_mode = RK_BODY_STREAM,                                                              \
         .begin = rk_envd_files_begin,                                                             \
         .body = rk_envd_files_body,                                                               \
         .handler = rk_envd_files_post,                                                            \
         .flags = RK_ROUTE_OWN_AUTH},                                                              \
        RK_ENVD_ROUTE("GET", "/health", "envd_health", RK_BODY_NONE, rk_envd_health)

#endif /* RK_E2B_ENVD_H */
