/* SPDX-License-Identifier: Apache-2.0 */
/* Private to core/store/: what the files of the in-process store share. The store object,
 * its tables and records, and the functions each file offers the others:
 *   store_memory.c           the store object: open, close, the ops table
 *   store_memory_map.c       the string-keyed hash table
 *   store_memory_records.c   sandbox records: get, create, update, touch, get_touch, purge
 *   store_memory_index.c     lists over the records: active, expired, pages, state counts
 *   store_memory_sessions.c  the session-name registry
 *   store_memory_lease.c     claims, leases and the reconciler's mark
 * The entry points take the store's mutex themselves; the map functions and those marked
 * "caller holds the lock" expect it held. */
#ifndef RK_STORE_MEMORY_INTERNAL_H
#define RK_STORE_MEMORY_INTERNAL_H

#include "store/store_common.h"

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One hash table entry; val is owned and freed with the table's free_val. */
struct mem_ent {
    struct mem_ent *next;
    char *key;
    void *val;
};

/* A chained hash table with power-of-two buckets. */
struct mem_map {
    struct mem_ent **buckets;
    size_t nbuckets;
    size_t count;
    void (*free_val)(void *val);
};

/* A sandbox record with its idle deadline (0 = none). */
struct mem_rec {
    json_object *rec;
    int64_t expire;
    bool active;
    int64_t purge_at_ms; /* deleted: gone at this epoch ms; 0 = kept */
};

/* A deleted record due to be purged (FIFO in deletion order). */
struct purge_ent {
    struct purge_ent *next;
    int64_t at_ms;
    char id[];
};

/* The memory store. */
struct mem_store {
    struct rk_store base;
    pthread_mutex_t mu;
    struct mem_map records;       /* id -> struct mem_rec */
    struct mem_map sessions;      /* sandbox id -> struct mem_map (name -> char *value) */
    struct mem_map claims;        /* name -> int64_t deadline ms */
    char mark[RK_STORE_MARK_MAX]; /* the reconciler's mark */
    struct purge_ent *purge_head, *purge_tail;
};

/* Return the memory store behind the interface pointer. */
static inline struct mem_store *rkm_store(struct rk_store *st)
{
    return (struct mem_store *)st;
}

/* Report an allocation failure. */
static inline rk_store_rc rkm_oom(char *err, size_t errlen)
{
    return rk_store_fail(err, errlen, "store: out of memory");
}

/* ---- store_memory_map.c: the hash table (callers hold the store's mutex) ---- */

/** Initialise an empty map; -1 on OOM. */
int rkm_map_init(struct mem_map *m, void (*free_val)(void *));
/** Free every entry and the bucket array. */
void rkm_map_free(struct mem_map *m);
/** Find the entry for key, or NULL. */
struct mem_ent *rkm_map_find(const struct mem_map *m, const char *key);
/** Set key to val (taking ownership of val even on failure); -1 on OOM. */
int rkm_map_put(struct mem_map *m, const char *key, void *val);
/** Remove key; 1 if it was there. */
int rkm_map_del(struct mem_map *m, const char *key);

/* ---- store_memory_records.c ---- */

/** Value destructor for records. */
void rkm_free_rec(void *v);
/** Drop records whose retention ran out (caller holds the lock). */
void rkm_purge_due(struct mem_store *m);

/* ---- the backend entry points (struct rk_store_ops), one file per concern ---- */

/* store_memory_records.c */
rk_store_rc rkm_get(struct rk_store *st, const char *id, json_object **out, char *err,
                    size_t errlen);
rk_store_rc rkm_get_many(struct rk_store *st, const char *const *ids, size_t n, json_object **out,
                         char *err, size_t errlen);
rk_store_rc rkm_create(struct rk_store *st, const char *id, json_object *rec, int64_t expire_time,
                       char *err, size_t errlen);
rk_store_rc rkm_update(struct rk_store *st, const char *id, rk_store_update_fn fn, void *ctx,
                       json_object **out, char *err, size_t errlen);
rk_store_rc rkm_touch(struct rk_store *st, const char *id, int64_t expire_time, char *err,
                      size_t errlen);
rk_store_rc rkm_get_touch(struct rk_store *st, const char *id, int64_t now_s, json_object **out,
                          char *mark, size_t marklen, char *err, size_t errlen);
/* store_memory_index.c */
rk_store_rc rkm_list_active(struct rk_store *st, char ***ids_out, size_t *n_out, char *err,
                            size_t errlen);
rk_store_rc rkm_expired(struct rk_store *st, int64_t now, size_t max, char ***ids_out,
                        size_t *n_out, char *err, size_t errlen);
rk_store_rc rkm_list_page(struct rk_store *st, size_t offset, size_t limit, char ***ids_out,
                          size_t *n_out, size_t *total_out, char *err, size_t errlen);
rk_store_rc rkm_count_states(struct rk_store *st, size_t *pending_out, size_t *running_out,
                             char *err, size_t errlen);
/* store_memory_sessions.c */
rk_store_rc rkm_reserve(struct rk_store *st, const char *sandbox_id, const char *name, int ttl_s,
                        const char *token, char *err, size_t errlen);
rk_store_rc rkm_commit(struct rk_store *st, const char *sandbox_id, const char *name,
                       const char *token, const char *session_id, char *err, size_t errlen);
rk_store_rc rkm_rollback(struct rk_store *st, const char *sandbox_id, const char *name,
                         const char *token, char *err, size_t errlen);
rk_store_rc rkm_session_get(struct rk_store *st, const char *sandbox_id, const char *name,
                            char **session_id_out, char *err, size_t errlen);
rk_store_rc rkm_session_remove(struct rk_store *st, const char *sandbox_id, const char *name,
                               const char *expected, char *err, size_t errlen);
rk_store_rc rkm_session_clear(struct rk_store *st, const char *sandbox_id, char *err,
                              size_t errlen);
rk_store_rc rkm_session_count(struct rk_store *st, const char *sandbox_id, size_t *n_out, char *err,
                              size_t errlen);
/* store_memory_lease.c */
rk_store_rc rkm_claim(struct rk_store *st, const char *name, int ttl_s, char *err, size_t errlen);
rk_store_rc rkm_lease(struct rk_store *st, const char *name, const char *owner, int ttl_ms,
                      char *err, size_t errlen);
rk_store_rc rkm_set_mark(struct rk_store *st, const char *value, char *err, size_t errlen);

#endif /* RK_STORE_MEMORY_INTERNAL_H */
