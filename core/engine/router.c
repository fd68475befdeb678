/* SPDX-License-Identifier: Apache-2.0 */
#include "engine/router.h"

#include <stdlib.h>
#include <string.h>

#include "engine/envelope.h"
#include "engine/http_server.h"
#include "relay/relay.h"
#include "api/routes.h"
#include "base/util.h"

#define P RK_API_PREFIX

/* JSON route helper: method, path, name, handler, failure message, shape. */
#define JSON_ROUTE(m, pat, nm, fn, msg, shp)                                                       \
    {                                                                                              \
        .method = m, .pattern = pat, .name = nm, .body_mode = RK_BODY_JSON, .handler = fn,         \
        .fail_message = msg, .shape = shp                                                          \
    }
#define GET_ROUTE(pat, nm, fn, msg, shp)                                                           \
    {                                                                                              \
        .method = "GET", .pattern = pat, .name = nm, .body_mode = RK_BODY_NONE, .handler = fn,     \
        .fail_message = msg, .shape = shp                                                          \
    }

const struct rk_route rk_routes[] = {
    GET_ROUTE("/", "root", rk_route_root, NULL, RK_SHAPE_NULL),
    GET_ROUTE("/livez", "livez", rk_route_livez, NULL, RK_SHAPE_NULL),
    GET_ROUTE("/readyz", "readyz", rk_route_readyz, NULL, RK_SHAPE_NULL),
    GET_ROUTE("/metrics", "metrics", rk_route_metrics, NULL, RK_SHAPE_NULL),
    GET_ROUTE("/openapi.json", "openapi", rk_route_openapi, NULL, RK_SHAPE_NULL),
    GET_ROUTE("/docs", "docs", rk_route_docs, NULL, RK_SHAPE_NULL),
    JSON_ROUTE("POST", P "/start_async", "start_async", rk_route_start_async,
               "async start sandbox failed", RK_SHAPE_START),
    JSON_ROUTE("POST", P "/start", "start", rk_route_start, "start sandbox failed", RK_SHAPE_START),
    GET_ROUTE(P "/get_status", "get_status", rk_route_get_status, "get sandbox status failed",
              RK_SHAPE_SANDBOX_RESPONSE),
    GET_ROUTE(P "/is_alive", "is_alive", rk_route_is_alive, "get sandbox is alive failed",
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
    {.method = "POST",
     .pattern = P "/sandboxes/{id}/restart",
     .name = "restart",
     .body_mode = RK_BODY_NONE,
     .handler = rk_route_restart_path,
     .fail_message = "restart sandbox failed",
     .shape = RK_SHAPE_START},
    {.method = "POST",
     .pattern = P "/sandboxes/{id}/archive",
     .name = "archive",
     .body_mode = RK_BODY_NONE,
     .handler = rk_route_archive,
     .fail_message = "archive sandbox failed",
     .shape = RK_SHAPE_SANDBOX_RESPONSE},
    JSON_ROUTE("POST", P "/commit", "commit", rk_route_commit, "commit sandbox failed",
               RK_SHAPE_SANDBOX_RESPONSE),
    GET_ROUTE(P "/commit/{id}", "commit_status", rk_route_commit_get, "get commit status failed",
              RK_SHAPE_SANDBOX_RESPONSE),
    GET_ROUTE(P "/sandboxes", "list", rk_route_list, "list sandboxes failed", RK_SHAPE_LIST),
    JSON_ROUTE("POST", P "/sandboxes/batch", "batch", rk_route_batch,
               "batch get sandbox status failed", RK_SHAPE_BATCH),
    GET_ROUTE(P "/get_token", "get_token", rk_route_get_token, "get oss sts token failed",
              RK_SHAPE_SANDBOX_RESPONSE),
    {.method = "POST",
     .pattern = P "/host/proxy/{*}",
     .name = "host_proxy",
     .body_mode = RK_BODY_NONE,
     .handler = rk_route_host_proxy,
     .fail_message = "host proxy post failed",
     .shape = RK_SHAPE_SANDBOX_RESPONSE},
    {.method = "*",
     .pattern = P "/proxy/{id}/{*}",
     .name = "proxy_stub",
     .body_mode = RK_BODY_JSON,
     .handler = rk_route_proxy_stub,
     .fail_message = "http proxy failed",
     .shape = RK_SHAPE_SANDBOX_RESPONSE},
    {.pattern = NULL},
};

/* Match one pattern against a path; captures go to params (decoded copies
 * appended to buf). Returns 1 on match. */
static int match_pattern(const char *pat, const char *path, const char **params, char *buf,
                         size_t *buf_used)
{
    int np = 0;
    const char *p = pat, *s = path;
    while (*p) {
        if (strncmp(p, "{*}", 3) == 0) {
            params[np++] = buf + *buf_used;
            size_t n = strlen(s);
            memcpy(buf + *buf_used, s, n + 1);
            *buf_used += n + 1;
            return 1;
        }
        if (*p == '{') {
            const char *close = strchr(p, '}');
            const char *seg_end = strchr(s, '/');
            size_t n = seg_end ? (size_t)(seg_end - s) : strlen(s);
            if (n == 0 || np >= RK_MAX_PARAMS)
                return 0;
            params[np++] = buf + *buf_used;
            memcpy(buf + *buf_used, s, n);
            buf[*buf_used + n] = '\0';
            *buf_used += n + 1;
            s += n;
            p = close + 1;
            continue;
        }
        if (*p != *s)
            return 0;
        p++;
        s++;
    }
    return *s == '\0';
}

/* Try one table; 1 = matched route, 2 = path matched with another method. */
static int match_table(const struct rk_route *table, const char *method, const char *path,
                       int is_ws, const struct rk_route **out, struct rk_req *r)
{
    int path_seen = 0;
    for (const struct rk_route *rt = table; rt->pattern; rt++) {
        if (rt->websocket != is_ws)
            continue;
        const char *params[RK_MAX_PARAMS] = {0};
        size_t used = 0;
        size_t need = strlen(path) * 2 + 16;
        char *buf = malloc(need);
        if (!buf)
            return 0;
        if (!match_pattern(rt->pattern, path, params, buf, &used)) {
            free(buf);
            continue;
        }
        if (strcmp(rt->method, "*") != 0 && strcmp(rt->method, method) != 0 &&
            !(strcmp(method, "HEAD") == 0 && strcmp(rt->method, "GET") == 0)) {
            path_seen = 1;
            free(buf);
            continue;
        }
        *out = rt;
        if (r) {
            free(r->param_buf);
            r->param_buf = buf;
            memcpy(r->params, params, sizeof r->params);
        } else {
            free(buf);
        }
        return 1;
    }
    return path_seen ? 2 : 0;
}

enum rk_match rk_router_match(const char *method, const char *path, int is_websocket,
                              const struct rk_route **route_out, struct rk_req *r)
{
    int a = match_table(rk_relay_routes, method, path, is_websocket, route_out, r);
    if (a == 1)
        return RK_MATCH_OK;
    int b = match_table(rk_routes, method, path, is_websocket, route_out, r);
    if (b == 1)
        return RK_MATCH_OK;
    if (a == 2 || b == 2)
        return RK_MATCH_BAD_METHOD;
    /* FastAPI redirects a trailing slash to the path without it. */
    size_t n = strlen(path);
    if (n > 1 && path[n - 1] == '/') {
        char *trimmed = rk_xstrdup(path);
        trimmed[n - 1] = '\0';
        const struct rk_route *rt;
        int c = match_table(rk_relay_routes, method, trimmed, is_websocket, &rt, NULL);
        if (c == 0)
            c = match_table(rk_routes, method, trimmed, is_websocket, &rt, NULL);
        free(trimmed);
        if (c != 0)
            return RK_MATCH_REDIRECT;
    }
    return RK_MATCH_NOT_FOUND;
}
