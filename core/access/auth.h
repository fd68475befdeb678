/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Bearer-token authentication (server.auth_tokens_file). Off when the key is
 * empty. Tokens are read from a file (one per line, optionally named, plain or
 * "sha256:<hex>"), kept only as SHA-256 digests and compared in constant time;
 * the file is re-read on SIGHUP. Clients send "Authorization: Bearer <t>" or
 * "XRL-Authorization: Bearer <t>" (what the ROCK SDKs set). The token itself
 * never reaches a log line, a metric or a response; its name does.
 */
#ifndef RK_AUTH_H
#define RK_AUTH_H

struct rk_config;
struct rk_problems;
struct rk_req;

/** Load the token file named by cfg (no-op when authentication is off).
 *  Problems name the file and line, never the content. Returns 0 or -1. */
int rk_auth_load(const struct rk_config *cfg, struct rk_problems *p);
/** Re-read the token file (SIGHUP). On any problem the previous tokens stay
 *  in force and the problems are logged. Returns 0 if the new set is active. */
int rk_auth_reload(void);
/** Non-zero when authentication is on. */
int rk_auth_enabled(void);
/** Drop every token (shutdown). */
void rk_auth_free(void);

/**
 * The request gate, run when a request's headers are complete. Returns 0 if
 * the request may proceed (r->auth_name holds the token's name, or "-" when
 * authentication is off or the route is public), otherwise replies 401 with a
 * ROCK envelope and `WWW-Authenticate: Bearer` and returns non-zero; for a
 * request that announces a body the 401 is deferred (r->auth_refused, see
 * rk_auth_reply_refused).
 * Public routes: /livez, /readyz, and /metrics when server.metrics_public.
 */
int rk_auth_gate(struct rk_req *r);

struct rk_buf;
/** Append the rock_admin_auth_requests_total series (nothing when
 *  authentication is off): accepted requests by token name, refused ones by
 *  reason ("missing" or "invalid"). */
void rk_auth_metrics_render(struct rk_buf *out);

/** Send the 401 that rk_auth_gate deferred (r->auth_refused) for a request
 *  with a body: the server drains the body first (bounded) so the client reads
 *  the answer instead of a reset connection. */
void rk_auth_reply_refused(struct rk_req *r);

/** Non-zero if the client header `name` carried rock-admin's own credential
 *  for this request, so it must not be forwarded into a sandbox. */
int rk_auth_header_is_ours(const struct rk_req *r, const char *name);

#endif /* RK_AUTH_H */
