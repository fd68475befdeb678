/* SPDX-License-Identifier: Apache-2.0 */
/* Who may reach the API: the access layer's admission checks (CORS, tokens). */
#ifndef RK_ACCESS_H
#define RK_ACCESS_H

/** Register the access checks with the engine (engine/http_server.h
 *  rk_http_admission_add), in their order: CORS preflight before routing
 *  (and CORS headers on every response), the bearer token once the route is
 *  looked up, cross-site Origin and JSON Content-Type once it is found.
 *  Also registers the token counters with /metrics (obs/metrics.h).
 *  Call once before rk_http_start. 0, or -1 if the engine's table is full. */
int rk_access_install(void);

#endif /* RK_ACCESS_H */
