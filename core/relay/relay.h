/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Service proxy: HTTP relay (libcurl, streamed both ways) and WebSocket relay
 * (libmicrohttpd upgrade + byte-transparent socket relay) to applications
 * inside sandboxes, at endpoints the plugin resolves (proxy_target).
 */
#ifndef RK_RELAY_H
#define RK_RELAY_H

#include <stdint.h>

#include "engine/router.h"

/** Proxy, VNC and portforward routes (NULL-pattern terminated); the router
 *  matches them before the main table. */
extern const struct rk_route rk_relay_routes[];

/** Wait until detached relay workers finished or deadline_ms (monotonic)
 *  passed; returns how many are still running. */
int rk_relay_wait(int64_t deadline_ms);

#endif /* RK_RELAY_H */
