/* SPDX-License-Identifier: Apache-2.0 */
/* In-process store: the string-keyed chained hash table (power-of-two buckets, FNV-1a)
 * every table of the store is made of. Owns its entries: keys are copied, values are
 * freed with the table's free_val. Not locked: callers hold the store's mutex. */
#include "store/store_memory_internal.h"

#include "base/util.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* FNV-1a hash of a string. */
static size_t hash_str(const char *s)
{
    return (size_t)rk_hash_str(s);
}

/* Initialise an empty map; -1 on OOM. */
int rkm_map_init(struct mem_map *m, void (*free_val)(void *))
{
    m->nbuckets = 64;
    m->count = 0;
    m->free_val = free_val;
    m->buckets = calloc(m->nbuckets, sizeof *m->buckets);
    return m->buckets ? 0 : -1;
}

/* Free every entry and the bucket array. */
void rkm_map_free(struct mem_map *m)
{
    if (!m->buckets)
        return;
    for (size_t i = 0; i < m->nbuckets; i++) {
        struct mem_ent *e = m->buckets[i];
        while (e) {
            struct mem_ent *next = e->next;
            m->free_val(e->val);
            free(e->key);
            free(e);
            e = next;
        }
    }
    free(m->buckets);
    m->buckets = NULL;
    m->count = 0;
}

/* Find the entry for key, or NULL. */
struct mem_ent *rkm_map_find(const struct mem_map *m, const char *key)
{
    for (struct mem_ent *e = m->buckets[hash_str(key) & (m->nbuckets - 1)]; e; e = e->next)
        if (strcmp(e->key, key) == 0)
            return e;
    return NULL;
}

/* Double the bucket array when the load factor exceeds 1 (best effort). */
static void map_grow(struct mem_map *m)
{
    if (m->count < m->nbuckets)
        return;
    size_t nb = m->nbuckets * 2;
    struct mem_ent **b = calloc(nb, sizeof *b);
    if (!b)
        return;
    for (size_t i = 0; i < m->nbuckets; i++) {
        struct mem_ent *e = m->buckets[i];
        while (e) {
            struct mem_ent *next = e->next;
            size_t h = hash_str(e->key) & (nb - 1);
            e->next = b[h];
            b[h] = e;
            e = next;
        }
    }
    free(m->buckets);
    m->buckets = b;
    m->nbuckets = nb;
}

/* Set key to val, freeing any previous value; takes ownership of val even on
 * failure. Returns -1 on OOM. */
int rkm_map_put(struct mem_map *m, const char *key, void *val)
{
    struct mem_ent *e = rkm_map_find(m, key);
    if (e) {
        m->free_val(e->val);
        e->val = val;
        return 0;
    }
    e = calloc(1, sizeof *e);
    char *k = strdup(key);
    if (!e || !k) {
        free(e);
        free(k);
        m->free_val(val);
        return -1;
    }
    map_grow(m);
    size_t h = hash_str(key) & (m->nbuckets - 1);
    e->key = k;
    e->val = val;
    e->next = m->buckets[h];
    m->buckets[h] = e;
    m->count++;
    return 0;
}

/* Remove key; 1 if it was there. */
int rkm_map_del(struct mem_map *m, const char *key)
{
    struct mem_ent **pp = &m->buckets[hash_str(key) & (m->nbuckets - 1)];
    for (; *pp; pp = &(*pp)->next) {
        struct mem_ent *e = *pp;
        if (strcmp(e->key, key) == 0) {
            *pp = e->next;
            m->free_val(e->val);
            free(e->key);
            free(e);
            m->count--;
            return 1;
        }
    }
    return 0;
}
