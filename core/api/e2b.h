/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The E2B-compatible API at the server root (docs/e2b.md): the lifecycle
 * routes ROCK 1.11 serves (e2b_routes.c), the SDK's other lifetime calls
 * (e2b_lifetime.c) and the envd emulation the `e2b`
 * SDK's sandbox side talks to (e2b_envd.c, e2b_process.c, e2b_files.c).
 * main.c hands rk_e2b_routes to the router after the API's table.
 */
#ifndef RK_E2B_H
#define RK_E2B_H

#include <stddef.h>

#include "engine/router.h"

struct rk_req;

/** The E2B routes (NULL-pattern terminated), for rk_router_use. */
extern const struct rk_route rk_e2b_routes[];

/* e2b_routes.c: the lifecycle (E2B's OpenAPI, X-API-Key). */
void rk_e2b_create(struct rk_req *r); /* POST /sandboxes, /v2/sandboxes */
void rk_e2b_get(struct rk_req *r);    /* GET /sandboxes/{sandboxID} */
void rk_e2b_delete(struct rk_req *r); /* DELETE /sandboxes/{sandboxID} */
void rk_e2b_list(struct rk_req *r);   /* GET /v2/sandboxes, /sandboxes */

/* e2b_lifetime.c: the SDK's lifetime calls beyond ROCK's four. */
void rk_e2b_set_timeout(struct rk_req *r); /* POST /sandboxes/{sandboxID}/timeout */
void rk_e2b_connect(struct rk_req *r);     /* POST /v2/sandboxes/{sandboxID}/connect */
void rk_e2b_pause(struct rk_req *r);       /* POST /sandboxes/{sandboxID}/pause */

#endif /* RK_E2B_H */
