/* SPDX-License-Identifier: Apache-2.0 */
/* In-process store: lists over the records. Owns the active list, the job list, the ids whose idle
 * deadline has passed, list pages in list order (sorted by rk_store_list_key on each
 * call: no index is kept) and the per-state counts. */
#include "store/store_memory_internal.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Which records collect() keeps. */
enum mem_pick {
    PICK_ACTIVE, /* active, with a deadline filter */
    PICK_JOBS,   /* carrying a background job (rk_store_rec_has_job) */
};

/* 1 if r is picked: PICK_ACTIVE with now >= 0 keeps those whose deadline is <= now. */
static int picked(const struct mem_rec *r, enum mem_pick pick, int64_t now)
{
    if (pick == PICK_JOBS)
        return rk_store_rec_has_job(r->rec);
    return r->active && (now < 0 || (r->expire > 0 && r->expire <= now));
}

/* Collect ids of the picked records (at most max). */
static rk_store_rc collect(struct mem_store *m, enum mem_pick pick, int64_t now, size_t max,
                           char ***ids_out, size_t *n_out, char *err, size_t errlen)
{
    size_t cap = 16, n = 0;
    char **ids = malloc(cap * sizeof *ids);
    if (!ids)
        return rkm_oom(err, errlen);
    for (size_t b = 0; b < m->records.nbuckets && n < max; b++) {
        for (struct mem_ent *e = m->records.buckets[b]; e && n < max; e = e->next) {
            struct mem_rec *r = e->val;
            if (!picked(r, pick, now))
                continue;
            if (n == cap) {
                char **grown = realloc(ids, cap * 2 * sizeof *ids);
                if (!grown)
                    goto fail;
                ids = grown;
                cap *= 2;
            }
            ids[n] = strdup(e->key);
            if (!ids[n])
                goto fail;
            n++;
        }
    }
    *ids_out = ids;
    *n_out = n;
    return RK_STORE_OK;
fail:
    rk_store_free_ids(ids, n);
    return rkm_oom(err, errlen);
}

/* Ids of active records. */
rk_store_rc rkm_list_active(struct rk_store *st, char ***ids_out, size_t *n_out, char *err,
                            size_t errlen)
{
    struct mem_store *m = rkm_store(st);
    pthread_mutex_lock(&m->mu);
    rk_store_rc rc = collect(m, PICK_ACTIVE, -1, SIZE_MAX, ids_out, n_out, err, errlen);
    pthread_mutex_unlock(&m->mu);
    return rc;
}

/* Ids of records that carry a background job (a scan: one process, few records). */
rk_store_rc rkm_list_jobs(struct rk_store *st, char ***ids_out, size_t *n_out, char *err,
                          size_t errlen)
{
    struct mem_store *m = rkm_store(st);
    pthread_mutex_lock(&m->mu);
    rk_store_rc rc = collect(m, PICK_JOBS, -1, SIZE_MAX, ids_out, n_out, err, errlen);
    pthread_mutex_unlock(&m->mu);
    return rc;
}

/* Active ids whose deadline is <= now. */
rk_store_rc rkm_expired(struct rk_store *st, int64_t now, size_t max, char ***ids_out,
                        size_t *n_out, char *err, size_t errlen)
{
    struct mem_store *m = rkm_store(st);
    pthread_mutex_lock(&m->mu);
    rkm_purge_due(m);
    rk_store_rc rc = collect(m, PICK_ACTIVE, now < 0 ? 0 : now, max, ids_out, n_out, err, errlen);
    pthread_mutex_unlock(&m->mu);
    return rc;
}

/* One active record's list key and id, for sorting a page. */
struct page_ent {
    char *key; /* rk_store_list_key */
    const char *id;
};

/* Byte order of list keys. */
static int page_cmp(const void *a, const void *b)
{
    return strcmp(((const struct page_ent *)a)->key, ((const struct page_ent *)b)->key);
}

/* Sort every active record by list key and copy ids [offset, offset+limit). */
rk_store_rc rkm_list_page(struct rk_store *st, size_t offset, size_t limit, char ***ids_out,
                          size_t *n_out, size_t *total_out, char *err, size_t errlen)
{
    struct mem_store *m = rkm_store(st);
    rk_store_rc rc = RK_STORE_OK;
    pthread_mutex_lock(&m->mu);
    struct page_ent *all = calloc(m->records.count ? m->records.count : 1, sizeof *all);
    size_t n = 0;
    for (size_t b = 0; all && b < m->records.nbuckets; b++)
        for (struct mem_ent *e = m->records.buckets[b]; e; e = e->next) {
            struct mem_rec *r = e->val;
            if (!r->active)
                continue;
            all[n].id = e->key;
            all[n].key = rk_store_list_key(r->rec, e->key);
            if (!all[n].key)
                rc = rkm_oom(err, errlen);
            n++;
        }
    if (!all)
        rc = rkm_oom(err, errlen);
    char **ids = NULL;
    size_t k = 0;
    if (rc == RK_STORE_OK) {
        qsort(all, n, sizeof *all, page_cmp);
        size_t first = offset < n ? offset : n;
        size_t want = n - first < limit ? n - first : limit;
        ids = calloc(want ? want : 1, sizeof *ids);
        if (!ids)
            rc = rkm_oom(err, errlen);
        for (; ids && k < want; k++)
            if (!(ids[k] = strdup(all[first + k].id))) {
                rc = rkm_oom(err, errlen);
                break;
            }
    }
    pthread_mutex_unlock(&m->mu);
    for (size_t i = 0; all && i < n; i++)
        free(all[i].key);
    free(all);
    if (rc != RK_STORE_OK) {
        rk_store_free_ids(ids, k);
        return rc;
    }
    *ids_out = ids;
    *n_out = k;
    *total_out = n;
    return RK_STORE_OK;
}

/* Count active records by state. */
rk_store_rc rkm_count_states(struct rk_store *st, size_t *pending_out, size_t *running_out,
                             char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    struct mem_store *m = rkm_store(st);
    pthread_mutex_lock(&m->mu);
    for (size_t b = 0; b < m->records.nbuckets; b++)
        for (struct mem_ent *e = m->records.buckets[b]; e; e = e->next) {
            struct mem_rec *r = e->val;
            json_object *v = NULL;
            if (!r->active || !json_object_object_get_ex(r->rec, "state", &v))
                continue;
            if (strcmp(json_object_get_string(v), "pending") == 0)
                (*pending_out)++;
            else
                (*running_out)++;
        }
    pthread_mutex_unlock(&m->mu);
    return RK_STORE_OK;
}
