/* SPDX-License-Identifier: Apache-2.0 */
/* Private to core/store/: what the files of the in-process store share. The store object,
 * its tables and records, and the functions each file offers the others:
 *   store_memory.c           the store object: open, close, the ops table
 *   store_memory_map.c       the string-keyed hash table
 *   store_memory_records.c   sandbox records: get, create, update, touch, get_touch, purge
 *   store_memory_index.c     lists over the records: active, expired, pages, state counts
 *   store_memory_sessions.c  the session-name registry
 *   store_memory_lease.c     claims, leases and the reconciler's mark
 *   store_memory_createq.c   the create queue
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
    uint64_t version;    /* new whenever rec or expire changes (rkm_new_version) */
};

/* A deleted record due to be purged (FIFO in deletion order). */
struct purge_ent {
    struct purge_ent *next;
    int64_t at_ms;
    char id[];
};

/* One create-queue entry: queued (claimed_until 0) or claimed. */
struct cq_ent {
    struct cq_ent *prev, *next; /* in the queue or in the claimed list */
    int64_t enqueued_ms;
    int64_t claimed_until;                /* epoch ms; 0 = queued */
    int retaken;                          /* a claim of it lapsed */
    char owner[RK_CREATEQ_OWNER_MAX + 1]; /* "" = nobody's (queued again) */
    char id[];
};

/* A doubly linked list of entries. */
struct cq_list {
    struct cq_ent *head, *tail;
    size_t n;
};

/* The memory store. */
struct mem_store {
    struct rk_store base;
    pthread_mutex_t mu;
    struct mem_map records;       /* id -> struct mem_rec */
    struct mem_map sessions;      /* sandbox id -> struct mem_map (name -> char *value) */
    struct mem_map claims;        /* name -> int64_t deadline ms */
    uint64_t versions;            /* the last version given to a record (rkm_new_version) */
    char mark[RK_STORE_MARK_MAX]; /* the reconciler's mark */
    struct purge_ent *purge_head, *purge_tail;
    struct mem_map cq_index;  /* id -> struct cq_ent (owned by the lists) */
    struct cq_list cq_queued; /* FIFO by enqueue time */
    struct cq_list cq_claimed;
    int64_t cq_rate_sec; /* the wall-clock second cq_rate_used counts */
    int cq_rate_used;
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

/* ---- the backend entry points (struct rk_store_ops), by the file that defines them ---- */

/* store_memory_records.c */
rk_store_get_fn rkm_get;
rk_store_get_many_fn rkm_get_many;
rk_store_view_touch_fn rkm_view_touch;
rk_store_view_many_op_fn rkm_view_many;
rk_store_create_fn rkm_create;
rk_store_update_op_fn rkm_update;
rk_store_touch_fn rkm_touch;
rk_store_get_touch_fn rkm_get_touch;
/* store_memory_index.c */
rk_store_list_active_fn rkm_list_active;
rk_store_list_active_fn rkm_list_jobs;
rk_store_expired_fn rkm_expired;
rk_store_list_page_fn rkm_list_page;
rk_store_count_states_fn rkm_count_states;
/* store_memory_sessions.c */
rk_store_reserve_fn rkm_reserve;
rk_store_commit_fn rkm_commit;
rk_store_rollback_fn rkm_rollback;
rk_store_session_get_fn rkm_session_get;
rk_store_session_remove_fn rkm_session_remove;
rk_store_session_clear_fn rkm_session_clear;
rk_store_session_take_all_fn rkm_session_take_all;
rk_store_session_count_fn rkm_session_count;
/* store_memory_createq.c */
/** Free every create-queue entry. */
void rkm_cq_free(struct mem_store *m);
/** A copy of record id as get shows it, without expire_time (caller holds the lock); NULL
 *  when there is none (or no memory). */
json_object *rkm_record_copy_locked(struct mem_store *m, const char *id);
/** Value destructor of cq_index: nothing (the lists own the entries). */
void rkm_cq_keep(void *v);
rk_createq_push_fn rkm_cq_push;
rk_createq_create_fn rkm_cq_create;
rk_createq_claim_fn rkm_cq_claim;
rk_createq_renew_fn rkm_cq_renew;
rk_createq_id_owner_fn rkm_cq_done;
rk_createq_id_owner_fn rkm_cq_release;
rk_createq_cancel_fn rkm_cq_cancel;
rk_createq_where_fn rkm_cq_where;
rk_createq_depth_fn rkm_cq_depth;
/* store_memory_lease.c */
rk_store_claim_fn rkm_claim;
rk_store_lease_fn rkm_lease;
rk_store_set_mark_fn rkm_set_mark;

#endif /* RK_STORE_MEMORY_INTERNAL_H */
