/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Browser safety: CORS for the origins listed in server.cors_origins only
 * (default none: no CORS headers at all, never Access-Control-Allow-
 * Credentials), refusal of cross-site requests from other origins, and the
 * content-type policy of JSON routes (only JSON bodies are accepted, so a
 * "simple" cross-site text/plain or form POST never reaches a handler).
 */
#ifndef RK_CORS_H
#define RK_CORS_H

struct rk_config;
struct rk_problems;
struct rk_req;
struct MHD_Response;

/** Check server.cors_origins (each "scheme://host[:port]"); adds problems. */
void rk_cors_check_config(const struct rk_config *cfg, struct rk_problems *p);

/** Answer a CORS preflight (OPTIONS with Origin and Access-Control-Request-
 *  Method) before authentication: 204 for a listed origin, 403 otherwise.
 *  Returns non-zero if it replied. */
int rk_cors_preflight(struct rk_req *r);

/** After routing: refuse (403) requests carrying an Origin that is neither
 *  listed nor this server's own, and (415) bodies of JSON routes whose
 *  Content-Type is not JSON. Returns non-zero if it replied. */
int rk_cors_gate(struct rk_req *r);

/** Add the CORS response headers for a listed Origin (nothing otherwise). */
void rk_cors_add_headers(struct rk_req *r, struct MHD_Response *resp);

#endif /* RK_CORS_H */
