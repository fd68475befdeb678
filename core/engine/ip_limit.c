/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Connections per client address (ip_limit.h): a chained hash of the
 * addresses that hold connections, with their counts, under one lock. An
 * entry exists only while its address holds a connection, so the table is
 * bounded by server.max_connections.
 */
#include "engine/ip_limit.h"

#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define BUCKETS 1024

struct ip_entry {
    struct ip_entry *next;
    unsigned char key[17]; /* family byte + up to 16 address bytes */
    int count;
};

struct rk_ip_limit {
    pthread_mutex_t mu;
    int per_ip;
    struct ip_entry *b[BUCKETS];
};

/* The address as a key (IPv4-mapped IPv6 as the IPv4 address). 0 for an unknown family. */
static size_t key_of(const struct sockaddr *sa, unsigned char key[17])
{
    memset(key, 0, 17);
    if (sa && sa->sa_family == AF_INET) {
        key[0] = 4;
        memcpy(key + 1, &((const struct sockaddr_in *)sa)->sin_addr, 4);
        return 5;
    }
    if (sa && sa->sa_family == AF_INET6) {
        const unsigned char *a = ((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr;
        static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        if (memcmp(a, mapped, 12) == 0) {
            key[0] = 4;
            memcpy(key + 1, a + 12, 4);
            return 5;
        }
        key[0] = 6;
        memcpy(key + 1, a, 16);
        return 17;
    }
    return 0;
}

static unsigned bucket_of(const unsigned char *key, size_t n)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (size_t i = 0; i < n; i++)
        h = (h ^ key[i]) * 16777619u;
    return h % BUCKETS;
}

struct rk_ip_limit *rk_ip_limit_new(int per_ip)
{
    struct rk_ip_limit *l = calloc(1, sizeof *l);
    if (!l)
        return NULL;
    pthread_mutex_init(&l->mu, NULL);
    l->per_ip = per_ip;
    return l;
}

int rk_ip_limit_take(struct rk_ip_limit *l, const struct sockaddr *addr)
{
    unsigned char key[17];
    size_t n = key_of(addr, key);
    if (!l || l->per_ip <= 0 || !n)
        return 1;
    unsigned h = bucket_of(key, n);
    int ok = 1;
    pthread_mutex_lock(&l->mu);
    struct ip_entry *e = l->b[h];
    while (e && memcmp(e->key, key, sizeof key) != 0)
        e = e->next;
    if (!e) {
        e = calloc(1, sizeof *e);
        if (e) {
            memcpy(e->key, key, sizeof key);
            e->next = l->b[h];
            l->b[h] = e;
        }
    }
    if (!e || e->count >= l->per_ip)
        ok = 0;
    else
        e->count++;
    pthread_mutex_unlock(&l->mu);
    return ok;
}

void rk_ip_limit_give(struct rk_ip_limit *l, const struct sockaddr *addr)
{
    unsigned char key[17];
    size_t n = key_of(addr, key);
    if (!l || l->per_ip <= 0 || !n)
        return;
    unsigned h = bucket_of(key, n);
    pthread_mutex_lock(&l->mu);
    struct ip_entry **p = &l->b[h];
    while (*p && memcmp((*p)->key, key, sizeof key) != 0)
        p = &(*p)->next;
    if (*p && --(*p)->count <= 0) {
        struct ip_entry *e = *p;
        *p = e->next;
        free(e);
    }
    pthread_mutex_unlock(&l->mu);
}

void rk_ip_limit_free(struct rk_ip_limit *l)
{
    if (!l)
        return;
    for (int i = 0; i < BUCKETS; i++)
        while (l->b[i]) {
            struct ip_entry *e = l->b[i];
            l->b[i] = e->next;
            free(e);
        }
    pthread_mutex_destroy(&l->mu);
    free(l);
}
