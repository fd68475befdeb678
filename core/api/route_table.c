/* SPDX-License-Identifier: Apache-2.0 */
/* The ROCK Admin API's route table and the operational endpoints (the relay's
 * routes are in relay/relay_http.c); main.c hands both to the router. */
#include "api/routes.h"

#include "engine/envelope.h"
#include "engine/router.h"

#define P RK_API_PREFIX

/* Route helpers: method, path, name, body mode, handler, failure message, shape. */
#define ROUTE(m, pat, nm, bm, fn, msg, shp)                                                        \
    {                                                                                              \
        .method = m, .pattern = pat, .name = nm, .body_mode = bm, .handler = fn,                   \
        .fail_message = msg, .shape = shp                                                          \
    }
#define JSON_ROUTE(m, pat, nm, fn, msg, shp) ROUTE(m, pat, nm, RK_BODY_JSON, fn, msg, shp)
#define GET_ROUTE(pat, nm, fn, msg, shp) ROUTE("GET", pat, nm, RK_BODY_NONE, fn, msg, shp)
/* A GET route whose handler runs on the event loop first and moves to a worker when it
 * would block (RK_ROUTE_LOOP_FIRST). */
#define LOOP_GET_ROUTE(pat, nm, fn, msg, shp)                                                      \
    {                                                                                              \
        .method = "GET", .pattern = pat, .name = nm, .body_mode = RK_BODY_NONE, .handler = fn,     \
        .fail_message = msg, .shape = shp, .flags = RK_ROUTE_LOOP_FIRST                            \
    }
/* A probe: always admitted, even at the limits. */
#define HEALTH_ROUTE(pat, nm, fn)                                                                  \
    {                                                                                              \
        .method = "GET", .pattern = pat, .name = nm, .handler = fn, .flags = RK_ROUTE_HEALTH       \
    }
/* A GET route that answers from memory: its handler runs on the event loop. */
#define INLINE_ROUTE(pat, nm, fn, fl)                                                              \
    {                                                                                              \
        .method = "GET", .pattern = pat, .name = nm, .handler = fn,                                \
        .flags = RK_ROUTE_INLINE | (fl)                                                            \
    }
/* A route whose first path parameter is the sandbox id (no JSON body unless bm says so). */
#define SANDBOX_ROUTE(m, pat, nm, bm, fn, msg, shp)                                                \
    {                                                                                              \
        .method = m, .pattern = pat, .name = nm, .body_mode = bm, .handler = fn,                   \
        .fail_message = msg, .shape = shp, .flags = RK_ROUTE_SANDBOX_PARAM                         \
    }

const struct rk_route rk_api_routes[] = {
    INLINE_ROUTE("/", "root", rk_route_root, 0),
    INLINE_ROUTE("/livez", "livez", rk_route_livez, RK_ROUTE_HEALTH),
    /* readyz pings the store (a Redis round trip): on the worker pool */
    HEALTH_ROUTE("/readyz", "readyz", rk_route_readyz),
    INLINE_ROUTE("/metrics", "metrics", rk_route_metrics, RK_ROUTE_HEALTH),
    INLINE_ROUTE("/openapi.json", "openapi", rk_route_openapi, 0),
    INLINE_ROUTE("/docs", "docs", rk_route_docs, 0),
    JSON_ROUTE("POST", P "/start_async", "start_async", rk_route_start_async,
               "async start sandbox failed", RK_SHAPE_START),
    JSON_ROUTE("POST", P "/start", "start", rk_route_start, "start sandbox failed", RK_SHAPE_START),
    /* the status reads: answered on the loop from the store reader when they can be */
    LOOP_GET_ROUTE(P "/get_status", "get_status", rk_route_get_status, "get sandbox status failed",
                   RK_SHAPE_SANDBOX_RESPONSE),
    LOOP_GET_ROUTE(P "/is_alive", "is_alive", rk_route_is_alive, "get sandbox is alive failed",
                   RK_SHAPE_SANDBOX_RESPONSE),
    GET_ROUTE(P "/get_sandbox_statistics", "get_sandbox_statistics", rk_route_statistics,
              "get sandbox statistics failed", RK_SHAPE_SANDBOX_RESPONSE),
    JSON_ROUTE("POST", P "/execute", "execute", rk_route_execute, "execute command failed",
               RK_SHAPE_EXECUTE),
    JSON_ROUTE("POST", P "/create_session", "create_session", rk_route_create_session,
               "create session failed", RK_SHAPE_CREATE_SESSION),
    JSON_ROUTE("POST", P "/run_in_session", "run_in_session", rk_route_run_in_session,
               "run in session failed", RK_SHAPE_RUN_SESSION),
    JSON_ROUTE("POST", P "/close_session", "close_session", rk_route_close_session,
               "close session failed", RK_SHAPE_CLOSE_SESSION),
    JSON_ROUTE("POST", P "/read_file", "read_file", rk_route_read_file, "read file failed",
               RK_SHAPE_READ_FILE),
    JSON_ROUTE("POST", P "/write_file", "write_file", rk_route_write_file, "write file failed",
               RK_SHAPE_WRITE_FILE),
    {.method = "POST",
     .pattern = P "/upload",
     .name = "upload",
     .body_mode = RK_BODY_STREAM,
     .begin = rk_route_upload_begin,
     .body = rk_route_upload_body,
     .handler = rk_route_upload,
     .fail_message = "upload file failed",
     .shape = RK_SHAPE_UPLOAD},
    JSON_ROUTE("POST", P "/stop", "stop", rk_route_stop, "stop sandbox failed",
               RK_SHAPE_SANDBOX_RESPONSE),
    JSON_ROUTE("POST", P "/delete", "delete", rk_route_delete, "delete sandbox failed",
               RK_SHAPE_SANDBOX_RESPONSE),
    JSON_ROUTE("POST", P "/restart", "restart", rk_route_restart, "restart sandbox failed",
               RK_SHAPE_START),
    SANDBOX_ROUTE("POST", P "/sandboxes/{id}/restart", "restart", RK_BODY_NONE,
                  rk_route_restart_path, "restart sandbox failed", RK_SHAPE_START),
    SANDBOX_ROUTE("POST", P "/sandboxes/{id}/archive", "archive", RK_BODY_NONE, rk_route_archive,
                  "archive sandbox failed", RK_SHAPE_SANDBOX_RESPONSE),
    JSON_ROUTE("POST", P "/commit", "commit", rk_route_commit, "commit sandbox failed",
               RK_SHAPE_SANDBOX_RESPONSE),
    SANDBOX_ROUTE("GET", P "/commit/{id}", "commit_status", RK_BODY_NONE, rk_route_commit_get,
                  "get commit status failed", RK_SHAPE_SANDBOX_RESPONSE),
    GET_ROUTE(P "/sandboxes", "list", rk_route_list, "list sandboxes failed", RK_SHAPE_LIST),
    JSON_ROUTE("POST", P "/sandboxes/batch", "batch", rk_route_batch,
               "batch get sandbox status failed", RK_SHAPE_BATCH),
    GET_ROUTE(P "/get_token", "get_token", rk_route_get_token, "get oss sts token failed",
              RK_SHAPE_SANDBOX_RESPONSE),
    ROUTE("POST", P "/host/proxy/{*}", "host_proxy", RK_BODY_NONE, rk_route_host_proxy,
          "host proxy post failed", RK_SHAPE_SANDBOX_RESPONSE),
    SANDBOX_ROUTE("*", P "/proxy/{id}/{*}", "proxy_stub", RK_BODY_JSON, rk_route_proxy_stub,
                  "http proxy failed", RK_SHAPE_SANDBOX_RESPONSE),
    {.pattern = NULL},
};
