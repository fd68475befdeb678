/* SPDX-License-Identifier: Apache-2.0 */
/* Handle pool and worker-thread cache of the HTTP relay (see relay_pool.h). */
#include "relay/relay_pool.h"

#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "rkcurlpool.h"

/* ---- easy handles per origin -------------------------------------------------------------- */

/* The handles live in librkutil's pool (the plugin uses the same one), keyed by
 * the scheme://host[:port] of the URL. Created on first use; never freed (the
 * shutdown cleans up the idle handles). */
static pthread_once_t pool_once = PTHREAD_ONCE_INIT;
static struct rku_curl_pool *pool;

/* pthread_once: create the relay's pool with its bounds. */
static void pool_create(void)
{
    pool = rku_curl_pool_new(RK_RELAY_POOL_TOTAL, RK_RELAY_POOL_PER_ORIGIN);
}

/* The relay's pool (NULL on OOM: handles are then created and cleaned up each time). */
static struct rku_curl_pool *relay_pool(void)
{
    pthread_once(&pool_once, pool_create);
    return pool;
}

CURL *rk_relay_curl_get(const char *url)
{
    char origin[RKU_CURL_KEY_MAX];
    if (rku_curl_origin(url, origin) != 0)
        return curl_easy_init();
    return rku_curl_pool_get(relay_pool(), origin);
}

void rk_relay_curl_put(const char *url, CURL *c, int reusable)
{
    char origin[RKU_CURL_KEY_MAX];
    if (rku_curl_origin(url, origin) != 0)
        reusable = 0;
    rku_curl_pool_put(relay_pool(), origin, c, reusable);
}

void rk_relay_pool_shutdown(void)
{
    rku_curl_pool_clear(relay_pool());
}
