/* SPDX-License-Identifier: Apache-2.0 */
/* In-process store: string-keyed hash tables guarded by one mutex. Records are
 * deep copies, so callers never share json objects with the store. Deleted
 * records are kept for the deleted retention, then purged: a FIFO of
 * (id, purge time) in deletion order, popped lazily on every write, so the
 * cost is O(purged) and reads of a purged-but-not-popped record already see
 * it gone.
 *
 * This file owns the store object: opening and closing it, PING and the ops
 * table. The operations live in the store_memory_*.c files listed in
 * store_memory_internal.h. */
#include "store/store_memory_internal.h"

#include <pthread.h>
#include <stdlib.h>

/* Value destructor for a sandbox's session map. */
static void free_session_map(void *v)
{
    struct mem_map *m = v;
    if (m) {
        rkm_map_free(m);
        free(m);
    }
}

/* Free the memory store. */
static void mem_close(struct rk_store *st)
{
    struct mem_store *m = rkm_store(st);
    while (m->purge_head) {
        struct purge_ent *p = m->purge_head;
        m->purge_head = p->next;
        free(p);
    }
    rkm_map_free(&m->records);
    rkm_map_free(&m->sessions);
    rkm_map_free(&m->claims);
    rkm_cq_free(m);
    pthread_mutex_destroy(&m->mu);
    free(m);
}

/* Always reachable. */
static rk_store_rc mem_ping(struct rk_store *st, char *err, size_t errlen)
{
    (void)st;
    (void)err;
    (void)errlen;
    return RK_STORE_OK;
}

static const struct rk_store_ops mem_ops = {
    .close = mem_close,
    .ping = mem_ping,
    .get = rkm_get,
    .get_many = rkm_get_many,
    .create = rkm_create,
    .update = rkm_update,
    .list_active = rkm_list_active,
    .list_jobs = rkm_list_jobs,
    .touch = rkm_touch,
    .expired = rkm_expired,
    .claim = rkm_claim,
    .reserve = rkm_reserve,
    .commit = rkm_commit,
    .rollback = rkm_rollback,
    .session_get = rkm_session_get,
    .session_remove = rkm_session_remove,
    .session_clear = rkm_session_clear,
    .session_take_all = rkm_session_take_all,
    .session_count = rkm_session_count,
    .get_touch = rkm_get_touch,
    .view_touch = rkm_view_touch,
    .view_many = rkm_view_many,
    .lease = rkm_lease,
    .set_mark = rkm_set_mark,
    .list_page = rkm_list_page,
    .count_states = rkm_count_states,
    .cq_push = rkm_cq_push,
    .cq_create = rkm_cq_create,
    .cq_claim = rkm_cq_claim,
    .cq_renew = rkm_cq_renew,
    .cq_done = rkm_cq_done,
    .cq_release = rkm_cq_release,
    .cq_cancel = rkm_cq_cancel,
    .cq_where = rkm_cq_where,
    .cq_depth = rkm_cq_depth,
};

/* Open the in-process store. */
struct rk_store *rk_store_open_memory(void)
{
    struct mem_store *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    if (rkm_map_init(&m->records, rkm_free_rec) != 0 ||
        rkm_map_init(&m->sessions, free_session_map) != 0 || rkm_map_init(&m->claims, free) != 0 ||
        rkm_map_init(&m->cq_index, rkm_cq_keep) != 0) {
        rkm_map_free(&m->records);
        rkm_map_free(&m->sessions);
        rkm_map_free(&m->claims);
        rkm_map_free(&m->cq_index);
        free(m);
        return NULL;
    }
    pthread_mutex_init(&m->mu, NULL);
    rk_store_base_init(&m->base, &mem_ops, 0);
    return &m->base;
}
