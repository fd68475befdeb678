/* SPDX-License-Identifier: Apache-2.0 */
/*
 * librkutil: the one pool of idle libcurl easy handles, used by the core's
 * HTTP relay (core/relay/relay_pool.c) and by the OpenSandbox plugin
 * (plugins/opensandbox/os_http.c).
 *
 * A handle given back is reset (curl_easy_reset keeps its live keep-alive
 * connections and caches) and kept for the next exchange, so a later request
 * reuses an open TCP/TLS connection and skips the set-up of a fresh handle.
 * Handles are kept under a key: a caller that wants connection reuse per
 * upstream keys them by origin (rku_curl_origin); a caller whose handles may
 * go anywhere uses the NULL key, which matches every handle. The pool is
 * bounded in total and per key; a handle beyond the bound is cleaned up.
 * Thread-safe; newest handle first (its connection is the warmest).
 */
#ifndef RK_UTIL_CURLPOOL_H
#define RK_UTIL_CURLPOOL_H

#include <stddef.h>

#include <curl/curl.h>

/** Longest pool key, NUL included; longer keys are not pooled. */
#define RKU_CURL_KEY_MAX 256

struct rku_curl_pool;

/** A pool keeping at most total idle handles, at most per_key under one key.
 *  NULL on OOM (rku_curl_pool_get/put then fall back to plain init/cleanup). */
struct rku_curl_pool *rku_curl_pool_new(size_t total, size_t per_key);

/** Clean up every idle handle and free the pool (NULL-safe). Handles lent out
 *  are the borrowers' to clean up. */
void rku_curl_pool_free(struct rku_curl_pool *p);

/** Clean up every idle handle; the pool stays usable (NULL-safe). */
void rku_curl_pool_clear(struct rku_curl_pool *p);

/** An idle handle kept under key (NULL: any handle), options at their
 *  defaults, or a new one from curl_easy_init; NULL on OOM. */
CURL *rku_curl_pool_get(struct rku_curl_pool *p, const char *key);

/** Give a handle back under key (NULL: no key). Kept, after curl_easy_reset,
 *  when reusable and there is room; otherwise cleaned up. c may be NULL. */
void rku_curl_pool_put(struct rku_curl_pool *p, const char *key, CURL *c, int reusable);

/** The scheme://authority prefix of url into out (a plain cut at the first
 *  '/', '?' or '#' after "://"), for keying handles by origin; 0 if it fits,
 *  -1 if it is RKU_CURL_KEY_MAX bytes or longer. */
int rku_curl_origin(const char *url, char out[RKU_CURL_KEY_MAX]);

#endif /* RK_UTIL_CURLPOOL_H */
