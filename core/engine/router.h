/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The route matcher. It knows no route of its own: the layers above hand it
 * their tables at start-up (rk_router_use; main.c: the relay's routes, then
 * the API's), and it matches a request against them in that order without
 * allocating; only the matched route's path parameters are copied.
 */
#ifndef RK_ROUTER_H
#define RK_ROUTER_H

#include <stddef.h>

struct rk_req;

/** Maximum path parameters a route can capture. */
#define RK_MAX_PARAMS 4

/** Where the matched route's path parameters go: v[] points into *buf
 *  (allocated by the matcher, the previous *buf freed). */
struct rk_params {
    const char **v; /* RK_MAX_PARAMS slots */
    char **buf;
};

/** The common prefix of every sandbox route. */
#define RK_API_PREFIX "/apis/envs/sandbox/v1"

/** How a route takes its request body. */
enum rk_body_mode {
    RK_BODY_NONE = 0,   /* body ignored (GET-style) */
    RK_BODY_JSON = 1,   /* buffered up to server.max_body_bytes, then handler() */
    RK_BODY_STREAM = 2, /* begin() at headers, body() per chunk, handler() at the end */
};

/** A route. Patterns are literal segments and "{name}" captures; a trailing
 *  "{*}" captures the rest of the path (may be empty or contain '/'). */
struct rk_route {
    const char *method;  /* "GET", "POST", or "*" for any */
    const char *pattern; /* e.g. RK_API_PREFIX "/sandboxes/{id}/restart" */
    const char *name;    /* metrics label, e.g. "start_async" */
    enum rk_body_mode body_mode;
    /** Called once headers are complete (stream routes; optional), on a
     *  worker (it may block; RK_ROUTE_LOOP_FIRST: first on the loop). Return
     *  0 to continue; non-zero means the route already replied. */
    int (*begin)(struct rk_req *r);
    /** Called for every chunk of body (stream routes), on the event loop: it
     *  must not block. Return 0 to continue; non-zero stops reading (the
     *  route replies in handler()). A route that cannot take all len bytes
     *  yet calls rk_req_suspend(), sets r->body_kept to the bytes it did not
     *  take, and calls rk_req_resume() once it can take more (they are handed
     *  again). Called once more with (NULL, 0) on the loop when the body is
     *  complete, before handler(). */
    int (*body)(struct rk_req *r, const char *data, size_t len);
    /** Produces the response: on a worker, unless the route is
     *  RK_ROUTE_INLINE (or RK_ROUTE_LOOP_FIRST: first tried on the loop); a WebSocket route's
     * handler (gate, upstream set-up, 101 answer) runs on a worker at the headers. */
    void (*handler)(struct rk_req *r);
    int websocket;            /* 1: matched only for Upgrade: websocket requests */
    const char *fail_message; /* route "message" on failures, e.g. "execute command failed" */
    int shape;                /* enum rk_shape: result object on 4000/5000 failures */
    unsigned flags;           /* RK_ROUTE_* facts handlers branch on (never the name) */
    /** When set, the route is chosen by this request header rather than by its
     *  path: it is tried before every path route and matches (its pattern is
     *  then "/{*}", any path) when the request carries the header with a value
     *  other than select_not (NULL: any value). */
    const char *select_header;
    const char *select_not;
};

/* Route flags. */
#define RK_ROUTE_VNC 0x1u           /* relay to the fixed VNC port, no port selection */
#define RK_ROUTE_PORT_PATH 0x2u     /* /proxy/{id}/port/{port}/...: sub-path starts at "port/" */
#define RK_ROUTE_HEALTH 0x4u        /* probes and metrics: always admitted, even at the limits */
#define RK_ROUTE_SANDBOX_PARAM 0x8u /* the first path parameter is a sandbox id */
#define RK_ROUTE_INLINE 0x10u       /* answers from memory: the handler runs on the event loop */
#define RK_ROUTE_API_KEY 0x20u      /* E2B: X-API-Key may carry the bearer token too */
#define RK_ROUTE_OWN_AUTH 0x40u     /* E2B envd: the handler checks a per-sandbox token */
#define RK_ROUTE_E2B_PORT 0x80u     /* E2B sandbox port: id and port from E2b-Sandbox-Id/-Port */
/* begin() and handler() are first run on the event loop; code that would block
 * there calls rk_req_needs_worker() and returns, and the engine runs it again
 * on a worker (see request.h). */
#define RK_ROUTE_LOOP_FIRST 0x100u

/** Result of matching a request line. */
enum rk_match {
    RK_MATCH_OK = 0,
    RK_MATCH_NOT_FOUND = 1,
    RK_MATCH_BAD_METHOD = 2,
    RK_MATCH_REDIRECT = 3, /* trailing slash: redirect to the path without it */
};

/** A request header by name (case-insensitive), or NULL: how the router sees
 *  the headers that select_header routes are chosen by. */
typedef const char *(*rk_router_header_fn)(void *ctx, const char *name);

/** Find the route for method+decoded path (and, through header(hctx, name)
 *  when header is set, the select_header routes). With params, the matched
 *  route's path parameters are copied there. */
enum rk_match rk_router_match(const char *method, const char *path, int is_websocket,
                              rk_router_header_fn header, void *hctx,
                              const struct rk_route **route_out, struct rk_params *params);

/** Maximum number of route tables the router holds. */
#define RK_ROUTER_MAX_TABLES 4

/** Add a route table (NULL-pattern terminated, static storage) after the
 *  ones added before; tables are tried in that order. Called at start-up,
 *  before the server runs. Returns 0, or -1 when RK_ROUTER_MAX_TABLES are
 *  in use already. */
int rk_router_use(const struct rk_route *table);
/** Forget every table (tests). */
void rk_router_reset(void);

#endif /* RK_ROUTER_H */
