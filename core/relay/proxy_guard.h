/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Which headers may cross into a sandbox on a proxied request. Proxied
 * requests are built by the client, so neither rock-admin's own credential nor
 * a backend credential the plugin marked (RK_PROXY_HEADER_CREDENTIAL, ABI 1.1)
 * may ride on them.
 */
#ifndef RK_PROXY_GUARD_H
#define RK_PROXY_GUARD_H

#include <stddef.h>

struct rk_req;
struct rk_proxy_target;

/** Non-zero if the client header `name` must not be forwarded: it carried the
 *  client's rock-admin token, or it has the name of a credential header. */
int rk_proxy_guard_client_header(const struct rk_req *r, const struct rk_proxy_target *pt,
                                 const char *name);

/** Non-zero if endpoint header i is a backend credential (never forwarded). */
int rk_proxy_guard_endpoint_header(const struct rk_proxy_target *pt, size_t i);

#endif /* RK_PROXY_GUARD_H */
