/* SPDX-License-Identifier: Apache-2.0 */
/* In-process store: claims, leases and the reconciler's mark. Owns the claims table
 * (name -> deadline ms, expired ones dropped as it fills), the lease (always ours: one
 * process) and the mark. */
#include "store/store_memory_internal.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

/* Drop expired claims so the table stays small (caller holds the lock). */
static void purge_claims(struct mem_map *claims, int64_t now_ms)
{
    for (size_t b = 0; b < claims->nbuckets; b++) {
        struct mem_ent **pp = &claims->buckets[b];
        while (*pp) {
            struct mem_ent *e = *pp;
            if (*(int64_t *)e->val <= now_ms) {
                *pp = e->next;
                claims->free_val(e->val);
                free(e->key);
                free(e);
                claims->count--;
            } else {
                pp = &e->next;
            }
        }
    }
}

/* Take a claim unless a live one exists. */
rk_store_rc rkm_claim(struct rk_store *st, const char *name, int ttl_s, char *err, size_t errlen)
{
    struct mem_store *m = rkm_store(st);
    int64_t now = rk_store_now_ms();
    rk_store_rc rc = RK_STORE_OK;
    pthread_mutex_lock(&m->mu);
    if (m->claims.count >= m->claims.nbuckets)
        purge_claims(&m->claims, now);
    struct mem_ent *e = rkm_map_find(&m->claims, name);
    if (e && *(int64_t *)e->val > now) {
        rc = RK_STORE_EXISTS;
    } else {
        int64_t *deadline = malloc(sizeof *deadline);
        if (!deadline) {
            rc = rkm_oom(err, errlen);
        } else {
            *deadline = now + (int64_t)ttl_s * 1000;
            if (rkm_map_put(&m->claims, name, deadline) != 0)
                rc = rkm_oom(err, errlen);
        }
    }
    pthread_mutex_unlock(&m->mu);
    return rc;
}

/* Keep the reconciler's mark. */
rk_store_rc rkm_set_mark(struct rk_store *st, const char *value, char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    struct mem_store *m = rkm_store(st);
    pthread_mutex_lock(&m->mu);
    snprintf(m->mark, sizeof m->mark, "%s", value);
    pthread_mutex_unlock(&m->mu);
    return RK_STORE_OK;
}

/* One process: the lease is always ours. */
rk_store_rc rkm_lease(struct rk_store *st, const char *name, const char *owner, int ttl_ms,
                      char *err, size_t errlen)
{
    (void)st;
    (void)name;
    (void)owner;
    (void)ttl_ms;
    (void)err;
    (void)errlen;
    return RK_STORE_OK;
}
