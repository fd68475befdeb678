/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Service proxy: HTTP relay (libcurl, streamed both ways) and WebSocket relay
 * (libmicrohttpd upgrade + byte-transparent socket relay) to applications
 * inside sandboxes, at endpoints the plugin resolves (proxy_target).
 */
#ifndef RK_RELAY_H
#define RK_RELAY_H

struct rk_route;

/** Proxy, VNC and portforward routes (NULL-pattern terminated); the router
 *  matches them after the main table. */
extern const struct rk_route rk_relay_routes[];

#endif /* RK_RELAY_H */
