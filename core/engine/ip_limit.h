/* SPDX-License-Identifier: Apache-2.0 */
/*
 * server.per_ip_connections across all event loops: how many connections
 * each client address holds (ip_limit.c). The accept policy takes a slot, the
 * connection's close gives it back.
 */
#ifndef RK_ENGINE_IP_LIMIT_H
#define RK_ENGINE_IP_LIMIT_H

#include <sys/socket.h>

struct rk_ip_limit;

/** A table admitting at most per_ip connections per address (0: no limit).
 *  NULL on OOM. */
struct rk_ip_limit *rk_ip_limit_new(int per_ip);

/** Take a slot for addr: 1 when admitted, 0 when the address is at its limit
 *  (or the table cannot grow). Any thread. */
int rk_ip_limit_take(struct rk_ip_limit *l, const struct sockaddr *addr);

/** Give back a slot taken for addr. Any thread. */
void rk_ip_limit_give(struct rk_ip_limit *l, const struct sockaddr *addr);

/** Free the table (NULL-safe). */
void rk_ip_limit_free(struct rk_ip_limit *l);

#endif /* RK_ENGINE_IP_LIMIT_H */
