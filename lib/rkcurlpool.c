/* SPDX-License-Identifier: Apache-2.0 */
/* librkutil: the pool of idle libcurl easy handles (see rkcurlpool.h). */
#include "rkcurlpool.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* One idle handle and the key it was given back under ("" for none). */
struct pooled {
    char key[RKU_CURL_KEY_MAX];
    CURL *c;
};

struct rku_curl_pool {
    pthread_mutex_t mu;
    size_t total;   /* capacity of idle[] */
    size_t per_key; /* most idle handles under one key */
    size_t len;     /* idle handles, newest last */
    struct pooled *idle;
};

struct rku_curl_pool *rku_curl_pool_new(size_t total, size_t per_key)
{
    struct rku_curl_pool *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->idle = total ? calloc(total, sizeof *p->idle) : NULL;
    if (total && !p->idle) {
        free(p);
        return NULL;
    }
    if (pthread_mutex_init(&p->mu, NULL) != 0) {
        free(p->idle);
        free(p);
        return NULL;
    }
    p->total = total;
    p->per_key = per_key;
    return p;
}

void rku_curl_pool_clear(struct rku_curl_pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    for (size_t i = 0; i < p->len; i++)
        curl_easy_cleanup(p->idle[i].c);
    p->len = 0;
    pthread_mutex_unlock(&p->mu);
}

void rku_curl_pool_free(struct rku_curl_pool *p)
{
    if (!p)
        return;
    rku_curl_pool_clear(p);
    pthread_mutex_destroy(&p->mu);
    free(p->idle);
    free(p);
}

CURL *rku_curl_pool_get(struct rku_curl_pool *p, const char *key)
{
    CURL *c = NULL;
    if (p && (!key || strlen(key) < RKU_CURL_KEY_MAX)) {
        pthread_mutex_lock(&p->mu);
        for (size_t i = p->len; i-- > 0;) { /* newest first: its connection is warmest */
            if (!key || strcmp(p->idle[i].key, key) == 0) {
                c = p->idle[i].c;
                p->idle[i] = p->idle[--p->len];
                break;
            }
        }
        pthread_mutex_unlock(&p->mu);
    }
    return c ? c : curl_easy_init();
}

void rku_curl_pool_put(struct rku_curl_pool *p, const char *key, CURL *c, int reusable)
{
    if (!c)
        return;
    const char *k = key ? key : "";
    size_t klen = strlen(k);
    if (p && reusable && klen < RKU_CURL_KEY_MAX) {
        curl_easy_reset(c); /* keeps the live connections */
        pthread_mutex_lock(&p->mu);
        size_t same = 0;
        for (size_t i = 0; i < p->len; i++)
            same += strcmp(p->idle[i].key, k) == 0;
        if (p->len < p->total && same < p->per_key) {
            memcpy(p->idle[p->len].key, k, klen + 1);
            p->idle[p->len].c = c;
            p->len++;
            c = NULL;
        }
        pthread_mutex_unlock(&p->mu);
    }
    if (c)
        curl_easy_cleanup(c);
}

int rku_curl_origin(const char *url, char out[RKU_CURL_KEY_MAX])
{
    const char *p = strstr(url, "://");
    size_t n = p ? (size_t)(p + 3 - url) + strcspn(p + 3, "/?#") : strlen(url);
    if (n >= RKU_CURL_KEY_MAX)
        return -1;
    memcpy(out, url, n);
    out[n] = '\0';
    return 0;
}
