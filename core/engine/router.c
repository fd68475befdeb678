/* SPDX-License-Identifier: Apache-2.0 */
/* The route matcher (router.h). */
#include "engine/router.h"

#include <stdlib.h>
#include <string.h>

static const struct rk_route *tables[RK_ROUTER_MAX_TABLES];
static int ntables;

int rk_router_use(const struct rk_route *table)
{
    if (ntables >= RK_ROUTER_MAX_TABLES)
        return -1;
    tables[ntables++] = table;
    return 0;
}

void rk_router_reset(void)
{
    ntables = 0;
}

/* One captured path parameter: a span of the path. */
struct span {
    const char *p;
    size_t n;
};

/* Match one pattern against path[0..len); captures are spans of the path.
 * Returns the number of captures + 1 on a match, 0 otherwise. */
static int match_pattern(const char *pat, const char *path, size_t len,
                         struct span caps[RK_MAX_PARAMS])
{
    int np = 0;
    const char *p = pat, *s = path, *end = path + len;
    while (*p) {
        if (strncmp(p, "{*}", 3) == 0) {
            if (np >= RK_MAX_PARAMS)
                return 0;
            caps[np++] = (struct span){s, (size_t)(end - s)};
            return np + 1;
        }
        if (*p == '{') {
            const char *close = strchr(p, '}');
            const char *seg_end = memchr(s, '/', (size_t)(end - s));
            size_t n = seg_end ? (size_t)(seg_end - s) : (size_t)(end - s);
            if (n == 0 || np >= RK_MAX_PARAMS)
                return 0;
            caps[np++] = (struct span){s, n};
            s += n;
            p = close + 1;
            continue;
        }
        if (s == end || *p != *s)
            return 0;
        p++;
        s++;
    }
    return s == end ? np + 1 : 0;
}

/* Copy the captures (one allocation for the matched route only). */
static int keep_params(struct rk_params *out, const struct span *caps, int n)
{
    size_t need = 0;
    for (int i = 0; i < n; i++)
        need += caps[i].n + 1;
    char *buf = malloc(need ? need : 1);
    if (!buf)
        return -1;
    free(*out->buf);
    *out->buf = buf;
    memset(out->v, 0, sizeof(const char *) * RK_MAX_PARAMS);
    for (int i = 0; i < n; i++) {
        memcpy(buf, caps[i].p, caps[i].n);
        buf[caps[i].n] = '\0';
        out->v[i] = buf;
        buf += caps[i].n + 1;
    }
    return 0;
}

/* Try every table; 1 = matched route, 2 = path matched with another method,
 * 0 = no route has this path. */
static int match_tables(const char *method, const char *path, size_t len, int is_ws,
                        const struct rk_route **out, struct rk_params *params)
{
    int path_seen = 0;
    for (int t = 0; t < ntables; t++) {
        for (const struct rk_route *rt = tables[t]; rt->pattern; rt++) {
            if (rt->websocket != is_ws || rt->select_header)
                continue;
            struct span caps[RK_MAX_PARAMS];
            int m = match_pattern(rt->pattern, path, len, caps);
            if (!m)
                continue;
            if (strcmp(rt->method, "*") != 0 && strcmp(rt->method, method) != 0 &&
                !(strcmp(method, "HEAD") == 0 && strcmp(rt->method, "GET") == 0)) {
                path_seen = 1;
                continue;
            }
            if (params && keep_params(params, caps, m - 1) != 0)
                return 0;
            *out = rt;
            return 1;
        }
    }
    return path_seen ? 2 : 0;
}

/* The first select_header route the request's headers choose (1), or 0. */
static int match_selected(const char *method, const char *path, size_t len, int is_ws,
                          rk_router_header_fn header, void *hctx, const struct rk_route **out,
                          struct rk_params *params)
{
    for (int t = 0; t < ntables; t++) {
        for (const struct rk_route *rt = tables[t]; rt->pattern; rt++) {
            if (!rt->select_header || rt->websocket != is_ws)
                continue;
            const char *v = header(hctx, rt->select_header);
            if (!v || (rt->select_not && strcmp(v, rt->select_not) == 0))
                continue;
            if (strcmp(rt->method, "*") != 0 && strcmp(rt->method, method) != 0)
                continue;
            struct span caps[RK_MAX_PARAMS];
            int m = match_pattern(rt->pattern, path, len, caps);
            if (!m)
                continue;
            if (params && keep_params(params, caps, m - 1) != 0)
                return 0;
            *out = rt;
            return 1;
        }
    }
    return 0;
}

enum rk_match rk_router_match(const char *method, const char *path, int is_websocket,
                              rk_router_header_fn header, void *hctx,
                              const struct rk_route **route_out, struct rk_params *params)
{
    size_t n = strlen(path);
    if (header &&
        match_selected(method, path, n, is_websocket, header, hctx, route_out, params) == 1)
        return RK_MATCH_OK;
    int a = match_tables(method, path, n, is_websocket, route_out, params);
    if (a == 1)
        return RK_MATCH_OK;
    if (a == 2)
        return RK_MATCH_BAD_METHOD;
    /* FastAPI redirects a trailing slash to the path without it. */
    if (n > 1 && path[n - 1] == '/') {
        const struct rk_route *rt;
        if (match_tables(method, path, n - 1, is_websocket, &rt, NULL) != 0)
            return RK_MATCH_REDIRECT;
    }
    return RK_MATCH_NOT_FOUND;
}
