/* SPDX-License-Identifier: Apache-2.0 */
/*
 * In-process cache of proxy endpoints: sandbox id + port + kind -> what the
 * plugin's proxy_target answered (and the sandbox's idle timeout the gate
 * read with it), for proxy.endpoint_cache_ttl_ms. A hit skips the dispatch
 * gate's store read and the plugin. It only caches: whether a hit refreshes
 * the idle deadline is domain/activity.c's decision. Entries are dropped when
 * a relay to them fails, and every entry of a sandbox is dropped when it
 * leaves the running state through this process.
 */
#ifndef RK_ENDPOINT_CACHE_H
#define RK_ENDPOINT_CACHE_H

#include <stdint.h>

#include "rock-admin/operator.h"

/** One cached endpoint (a malloc'd copy). */
struct rk_ep {
    char *base_url;
    struct rk_kv *headers; /* all of it (strings, arrays) lives in one block: base_url's */
    size_t headers_len;
    uint32_t *header_flags; /* NULL or headers_len RK_PROXY_HEADER_* bits (ABI 1.1) */
    int64_t idle_minutes;   /* the sandbox's idle timeout (auto_clear_time) when resolved */
};

/** Copy of the entry for (id, port, kind) if younger than ttl_ms; 0 and *out
 *  filled on a hit, -1 on a miss. */
int rk_ep_cache_get(const char *id, int port, int kind, int64_t ttl_ms, struct rk_ep *out);

/** Store (a copy of) an endpoint resolved by the plugin. */
void rk_ep_cache_put(const char *id, int port, int kind, const struct rk_proxy_target *pt,
                     int64_t idle_minutes);

/** Drop the entry for (id, port, kind) (a relay to it failed). */
void rk_ep_cache_forget(const char *id, int port, int kind);

/** Drop every entry of a sandbox (it stopped, was deleted or vanished). */
void rk_ep_cache_forget_sandbox(const char *id);

/** Free a copy returned by rk_ep_cache_get. */
void rk_ep_free(struct rk_ep *e);

/** Drop everything (shutdown, tests). */
void rk_ep_cache_clear(void);

#endif /* RK_ENDPOINT_CACHE_H */
