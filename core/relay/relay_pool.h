/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Reuse for the HTTP relay: libcurl easy handles kept per upstream origin
 * (each keeps its live keep-alive connection, so a proxied request reuses the
 * TCP connection of an earlier one, like nginx's upstream keepalive). Bounded;
 * anything beyond the bound is freed. The transfers run on the relay transfer
 * loop (relay_http_loop.h), whose multi handle keeps the idle connections. The handle pool itself
 * is librkutil's (lib/rkcurlpool.h, shared with the plugins); this file only keys it by origin and
 * sets the relay's bounds.
 */
#ifndef RK_RELAY_POOL_H
#define RK_RELAY_POOL_H

#include <curl/curl.h>

/** Most idle handles kept per origin and in total. */
#define RK_RELAY_POOL_PER_ORIGIN 64
#define RK_RELAY_POOL_TOTAL 512

/** An easy handle for url (reset, with live connections to its origin when one was pooled),
 *  or a new one; NULL on OOM. */
CURL *rk_relay_curl_get(const char *url);

/** Give a handle back: kept (after curl_easy_reset, connections stay open) when reusable and
 *  there is room, else cleaned up. url is the one passed to rk_relay_curl_get. */
void rk_relay_curl_put(const char *url, CURL *c, int reusable);

/** Free every pooled handle (shutdown, after the HTTP engine stopped). */
void rk_relay_pool_shutdown(void);

#endif /* RK_RELAY_POOL_H */
