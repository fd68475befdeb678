/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Endpoint cache (see endpoint_cache.h): a small open hash table under one
 * mutex, bounded to EP_MAX entries. Expired entries are removed lazily; when
 * the table is full a new endpoint is simply not cached.
 */
#include "domain/endpoint_cache.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

/** Most cached endpoints. */
#define EP_MAX 4096
/** Hash buckets. */
#define EP_BUCKETS 1024

struct ep_ent {
    struct ep_ent *next;
    char *id;
    int port;
    int kind;
    int64_t stored_ms;
    struct rk_ep ep;
};

static pthread_mutex_t ep_mu = PTHREAD_MUTEX_INITIALIZER;
static struct ep_ent *ep_tab[EP_BUCKETS];
static size_t ep_count;

/* FNV-1a over the id, mixed with port and kind. */
static size_t ep_hash(const char *id, int port, int kind)
{
    uint64_t h = 1469598103934665603ULL;
    for (const char *s = id; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ULL;
    }
    h ^= (uint64_t)port * 31u + (uint64_t)kind;
    h *= 1099511628211ULL;
    return (size_t)(h % EP_BUCKETS);
}

/* Free a copy's members. */
void rk_ep_free(struct rk_ep *e)
{
    if (!e)
        return;
    free(e->headers ? (void *)e->headers : (void *)e->base_url); /* the one block (ep_copy) */
    memset(e, 0, sizeof *e);
}

/* Deep copy of an endpoint, credential flags included (a hit must not turn a
 * backend credential into a routing header), in one allocation: the header array first (so
 * it is aligned), then the flags, then the strings. 0 on success. */
static int ep_copy(struct rk_ep *dst, const char *base_url, const struct rk_kv *h, size_t n,
                   const uint32_t *flags, int64_t idle_minutes)
{
    memset(dst, 0, sizeof *dst);
    dst->idle_minutes = idle_minutes;
    size_t size = n * sizeof *dst->headers + (flags ? n * sizeof *flags : 0) + strlen(base_url) + 1;
    for (size_t i = 0; i < n; i++)
        size += (h[i].key ? strlen(h[i].key) + 1 : 0) + (h[i].value ? strlen(h[i].value) + 1 : 0);
    char *block = malloc(size);
    if (!block)
        return -1;
    char *p = block;
    if (n) {
        dst->headers = (struct rk_kv *)(void *)p;
        p += n * sizeof *dst->headers;
    }
    if (n && flags) {
        dst->header_flags = (uint32_t *)(void *)p;
        memcpy(p, flags, n * sizeof *flags);
        p += n * sizeof *flags;
    }
    size_t l = strlen(base_url) + 1;
    dst->base_url = memcpy(p, base_url, l);
    p += l;
    for (size_t i = 0; i < n; i++) {
        dst->headers[i].key = dst->headers[i].value = NULL;
        if (h[i].key) {
            l = strlen(h[i].key) + 1;
            dst->headers[i].key = memcpy(p, h[i].key, l);
            p += l;
        }
        if (h[i].value) {
            l = strlen(h[i].value) + 1;
            dst->headers[i].value = memcpy(p, h[i].value, l);
            p += l;
        }
    }
    dst->headers_len = n;
    return 0;
}

/* Unlink and free *pp (caller holds ep_mu). */
static void ep_unlink(struct ep_ent **pp)
{
    struct ep_ent *e = *pp;
    *pp = e->next;
    rk_ep_free(&e->ep);
    free(e->id);
    free(e);
    ep_count--;
}

/* Lookup: a deep copy of a fresh entry; a stale one is removed. */
int rk_ep_cache_get(const char *id, int port, int kind, int64_t ttl_ms, struct rk_ep *out)
{
    if (ttl_ms <= 0 || !id)
        return -1;
    int64_t now = rk_now_ms();
    int rc = -1;
    pthread_mutex_lock(&ep_mu);
    for (struct ep_ent **pp = &ep_tab[ep_hash(id, port, kind)]; *pp;) {
        struct ep_ent *e = *pp;
        if (e->port == port && e->kind == kind && strcmp(e->id, id) == 0) {
            if (now - e->stored_ms >= ttl_ms) {
                ep_unlink(pp);
                break;
            }
            rc = ep_copy(out, e->ep.base_url, e->ep.headers, e->ep.headers_len, e->ep.header_flags,
                         e->ep.idle_minutes);
            break;
        }
        pp = &e->next;
    }
    pthread_mutex_unlock(&ep_mu);
    return rc;
}

/* Insert or replace (not cached when the table is full). */
void rk_ep_cache_put(const char *id, int port, int kind, const struct rk_proxy_target *pt,
                     int64_t idle_minutes)
{
    if (!id || !pt || !pt->base_url)
        return;
    struct ep_ent *n = calloc(1, sizeof *n);
    if (!n)
        return;
    n->id = strdup(id);
    n->port = port;
    n->kind = kind;
    n->stored_ms = rk_now_ms();
    if (!n->id || ep_copy(&n->ep, pt->base_url, pt->headers, pt->headers_len, pt->header_flags,
                          idle_minutes) != 0) {
        free(n->id);
        free(n);
        return;
    }
    size_t b = ep_hash(id, port, kind);
    pthread_mutex_lock(&ep_mu);
    for (struct ep_ent **pp = &ep_tab[b]; *pp;) {
        struct ep_ent *e = *pp;
        if (e->port == port && e->kind == kind && strcmp(e->id, id) == 0)
            ep_unlink(pp); /* replaced */
        else
            pp = &e->next;
    }
    if (ep_count < EP_MAX) {
        n->next = ep_tab[b];
        ep_tab[b] = n;
        ep_count++;
        n = NULL;
    }
    pthread_mutex_unlock(&ep_mu);
    if (n) {
        rk_ep_free(&n->ep);
        free(n->id);
        free(n);
    }
}

/* Drop one entry. */
void rk_ep_cache_forget(const char *id, int port, int kind)
{
    if (!id)
        return;
    pthread_mutex_lock(&ep_mu);
    for (struct ep_ent **pp = &ep_tab[ep_hash(id, port, kind)]; *pp;) {
        struct ep_ent *e = *pp;
        if (e->port == port && e->kind == kind && strcmp(e->id, id) == 0)
            ep_unlink(pp);
        else
            pp = &e->next;
    }
    pthread_mutex_unlock(&ep_mu);
}

/* Drop every entry of a sandbox. */
void rk_ep_cache_forget_sandbox(const char *id)
{
    if (!id)
        return;
    pthread_mutex_lock(&ep_mu);
    for (size_t b = 0; b < EP_BUCKETS && ep_count; b++)
        for (struct ep_ent **pp = &ep_tab[b]; *pp;) {
            if (strcmp((*pp)->id, id) == 0)
                ep_unlink(pp);
            else
                pp = &(*pp)->next;
        }
    pthread_mutex_unlock(&ep_mu);
}

/* Drop everything. */
void rk_ep_cache_clear(void)
{
    pthread_mutex_lock(&ep_mu);
    for (size_t b = 0; b < EP_BUCKETS; b++)
        while (ep_tab[b])
            ep_unlink(&ep_tab[b]);
    pthread_mutex_unlock(&ep_mu);
}
