/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Reuse for the HTTP relay: libcurl easy handles kept per upstream origin
 * (each keeps its live keep-alive connection, so a proxied request reuses the
 * TCP connection of an earlier one, like nginx's upstream keepalive), and a
 * cache of idle worker threads so a request does not create a thread. Both are
 * bounded; anything beyond the bound is freed. The handle pool itself is
 * librkutil's (lib/rkcurlpool.h, shared with the plugins); this file only keys
 * it by origin and sets the relay's bounds.
 */
#ifndef RK_RELAY_POOL_H
#define RK_RELAY_POOL_H

#include <curl/curl.h>

/** Most idle handles kept per origin and in total. */
#define RK_RELAY_POOL_PER_ORIGIN 64
#define RK_RELAY_POOL_TOTAL 512
/** Most idle worker threads kept, and how long one waits for work. */
#define RK_RELAY_IDLE_WORKERS 64
#define RK_RELAY_WORKER_IDLE_MS 30000

/** An easy handle for url (reset, with live connections to its origin when one was pooled),
 *  or a new one; NULL on OOM. */
CURL *rk_relay_curl_get(const char *url);

/** Give a handle back: kept (after curl_easy_reset, connections stay open) when reusable and
 *  there is room, else cleaned up. url is the one passed to rk_relay_curl_get. */
void rk_relay_curl_put(const char *url, CURL *c, int reusable);

/** Run fn(arg) on an idle cached worker thread or a new detached one
 *  (stack_bytes); 0 on success. */
int rk_relay_run(void (*fn)(void *), void *arg, size_t stack_bytes);

/** Free every pooled handle and stop idle workers (shutdown). */
void rk_relay_pool_shutdown(void);

#endif /* RK_RELAY_POOL_H */
