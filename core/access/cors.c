/* SPDX-License-Identifier: Apache-2.0 */
/* Browser safety: CORS allow-list, preflight, cross-site refusal, content-type policy. */
#include "access/cors.h"

#include <ctype.h>
#include <microhttpd.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "base/app.h"
#include "config/config.h"
#include "engine/envelope.h"
#include "engine/reply.h"
#include "engine/http_server.h"
#include "engine/router.h"

/* Request headers a listed origin may send (what the ROCK SDKs and proxies use). */
#define ALLOWED_HEADERS                                                                            \
    "Authorization, XRL-Authorization, Content-Type, X-Request-ID, X-ROCK-Target-Port, "           \
    "ROUTE-KEY, "                                                                                  \
    "X-Cluster"

/* True if s is "http://" or "https://" followed by a host[:port] with no path. */
static int valid_origin(const char *s)
{
    const char *h = NULL;
    if (strncasecmp(s, "http://", 7) == 0)
        h = s + 7;
    else if (strncasecmp(s, "https://", 8) == 0)
        h = s + 8;
    if (!h || !*h)
        return 0;
    for (; *h; h++)
        if (!isalnum((unsigned char)*h) && !strchr(".-:[]", *h))
            return 0;
    return 1;
}

void rk_cors_check_config(const struct rk_config *cfg, struct rk_problems *p)
{
    for (size_t i = 0; cfg->server.cors_origins && cfg->server.cors_origins[i]; i++)
        if (!valid_origin(cfg->server.cors_origins[i]))
            rk_problems_add(p,
                            "%s: server.cors_origins: \"%.80s\" is not an origin such as "
                            "\"https://app.example.com\" (scheme://host[:port], no path, no "
                            "wildcard)",
                            cfg->path, cfg->server.cors_origins[i]);
}

/* The request's Origin if it is in server.cors_origins, else NULL. */
static const char *listed_origin(struct rk_req *r)
{
    const char *origin = rk_req_header(r, "Origin");
    char *const *list = r->app->cfg->server.cors_origins;
    if (!origin || !*origin)
        return NULL;
    for (size_t i = 0; list && list[i]; i++)
        if (strcasecmp(list[i], origin) == 0)
            return origin;
    return NULL;
}

/* True if Origin names this server itself (its host[:port] equals Host). */
static int same_origin(struct rk_req *r, const char *origin)
{
    const char *host = rk_req_header(r, "Host");
    const char *sep = strstr(origin, "://");
    return host && sep && strcasecmp(sep + 3, host) == 0;
}

void rk_cors_add_headers(struct rk_req *r, struct MHD_Response *resp)
{
    const char *origin = listed_origin(r);
    if (!origin)
        return;
    MHD_add_response_header(resp, "Access-Control-Allow-Origin", origin);
    MHD_add_response_header(resp, "Access-Control-Expose-Headers", "X-Request-ID");
    MHD_add_response_header(resp, "Vary", "Origin");
}

int rk_cors_preflight(struct rk_req *r)
{
    if (strcmp(r->method, "OPTIONS") != 0 || !rk_req_header(r, "Origin") ||
        !rk_req_header(r, "Access-Control-Request-Method"))
        return 0;
    if (!listed_origin(r)) {
        rk_reply_detail(r, 403,
                        "Cross-origin request refused: the origin is not listed in "
                        "server.cors_origins");
        return 1;
    }
    struct MHD_Response *resp = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
    if (!resp)
        return 0;
    MHD_add_response_header(resp, "Access-Control-Allow-Methods",
                            "GET, POST, PUT, PATCH, DELETE, HEAD");
    /* A listed origin may send what it asks for (the SDKs' extra headers vary); only
     * header-name characters are echoed. */
    const char *want = rk_req_header(r, "Access-Control-Request-Headers");
    int sane = want && *want && strlen(want) < 1024 &&
               strspn(want, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_, ") ==
                   strlen(want);
    MHD_add_response_header(resp, "Access-Control-Allow-Headers", sane ? want : ALLOWED_HEADERS);
    MHD_add_response_header(resp, "Access-Control-Max-Age", "600");
    r->outcome = "preflight";
    rk_req_reply_mhd(r, 204, resp);
    return 1;
}

/* True if the request announces a body. */
static int has_body(struct rk_req *r)
{
    const char *cl = rk_req_header(r, "Content-Length");
    if (rk_req_header(r, "Transfer-Encoding"))
        return 1;
    return cl && strspn(cl, " 0") != strlen(cl);
}

/* True for application/json or any application/...+json media type. */
static int is_json_type(const char *ct)
{
    if (!ct)
        return 0;
    while (*ct == ' ' || *ct == '\t')
        ct++;
    size_t n = strcspn(ct, ";");
    while (n && (ct[n - 1] == ' ' || ct[n - 1] == '\t'))
        n--;
    if (n == 16 && strncasecmp(ct, "application/json", 16) == 0)
        return 1;
    return n > 17 && strncasecmp(ct, "application/", 12) == 0 &&
           strncasecmp(ct + n - 5, "+json", 5) == 0;
}

int rk_cors_gate(struct rk_req *r)
{
    const char *origin = rk_req_header(r, "Origin");
    if (origin && !listed_origin(r) && !same_origin(r, origin)) {
        rk_reply_detail(r, 403,
                        "Cross-origin request refused: the origin is not listed in "
                        "server.cors_origins");
        return 1;
    }
    if (r->route && r->route->body_mode == RK_BODY_JSON && strcmp(r->method, "GET") != 0 &&
        strcmp(r->method, "HEAD") != 0 && has_body(r) &&
        !is_json_type(rk_req_header(r, "Content-Type"))) {
        rk_reply_detail(r, 415,
                        "Unsupported Media Type: send the request body as "
                        "Content-Type: application/json");
        return 1;
    }
    return 0;
}
