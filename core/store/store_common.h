/* SPDX-License-Identifier: Apache-2.0 */
/* Private to the store: the backend vtable (called by store_api.c, filled by
 * store_memory.c and store_redis.c), the common head of a store object and
 * the helpers both backends use (store_common.c: tokens, the active-state
 * test, registry values). */
#ifndef RK_STORE_COMMON_H
#define RK_STORE_COMMON_H

#include "store/store.h"

#include <stdatomic.h>
#include <stdbool.h>

/** Longest sandbox id, session name, claim name or session id accepted. */
#define RK_STORE_MAX_NAME 256
/** Hex characters in a reservation token (128 random bits). */
#define RK_STORE_TOKEN_HEX 32
/** Most attempts of an optimistic (WATCH/MULTI/EXEC) transaction. */
#define RK_STORE_MAX_ATTEMPTS 5

/* The signature of each backend entry point, written once: the ops table below and the
 * backends' declarations (store_memory_internal.h, store_redis_internal.h) use them. */
typedef void rk_store_close_fn(struct rk_store *st);
typedef rk_store_rc rk_store_ping_fn(struct rk_store *st, char *err, size_t errlen);
typedef rk_store_rc rk_store_get_fn(struct rk_store *st, const char *id, json_object **out,
                                    char *err, size_t errlen);
typedef rk_store_rc rk_store_get_many_fn(struct rk_store *st, const char *const *ids, size_t n,
                                         json_object **out, char *err, size_t errlen);
typedef rk_store_rc rk_store_create_fn(struct rk_store *st, const char *id, json_object *rec,
                                       int64_t expire_time, char *err, size_t errlen);
typedef rk_store_rc rk_store_update_op_fn(struct rk_store *st, const char *id,
                                          rk_store_update_fn fn, void *ctx, json_object **out,
                                          char *err, size_t errlen);
typedef rk_store_rc rk_store_update_many_op_fn(struct rk_store *st, const char *const *ids,
                                               size_t n, rk_store_check_fn check,
                                               rk_store_update_fn fn, void *const *ctxs,
                                               rk_store_rc *rcs, char *err, size_t errlen);
typedef rk_store_rc rk_store_list_active_fn(struct rk_store *st, char ***ids_out, size_t *n_out,
                                            char *err, size_t errlen);
typedef rk_store_rc rk_store_touch_fn(struct rk_store *st, const char *id, int64_t expire_time,
                                      char *err, size_t errlen);
typedef rk_store_rc rk_store_expired_fn(struct rk_store *st, int64_t now, size_t max,
                                        char ***ids_out, size_t *n_out, char *err, size_t errlen);
typedef rk_store_rc rk_store_claim_fn(struct rk_store *st, const char *name, int ttl_s, char *err,
                                      size_t errlen);
typedef rk_store_rc rk_store_reserve_fn(struct rk_store *st, const char *sandbox_id,
                                        const char *name, int ttl_s, const char *token, char *err,
                                        size_t errlen);
typedef rk_store_rc rk_store_commit_fn(struct rk_store *st, const char *sandbox_id,
                                       const char *name, const char *token, const char *session_id,
                                       char *err, size_t errlen);
typedef rk_store_rc rk_store_rollback_fn(struct rk_store *st, const char *sandbox_id,
                                         const char *name, const char *token, char *err,
                                         size_t errlen);
typedef rk_store_rc rk_store_session_get_fn(struct rk_store *st, const char *sandbox_id,
                                            const char *name, char **session_id_out, char *err,
                                            size_t errlen);
typedef rk_store_rc rk_store_session_remove_fn(struct rk_store *st, const char *sandbox_id,
                                               const char *name, const char *expected_session_id,
                                               char *err, size_t errlen);
typedef rk_store_rc rk_store_session_clear_fn(struct rk_store *st, const char *sandbox_id,
                                              char *err, size_t errlen);
typedef rk_store_rc rk_store_session_take_all_fn(struct rk_store *st, const char *sandbox_id,
                                                 char ***ids_out, size_t *n_out, char *err,
                                                 size_t errlen);
typedef rk_store_rc rk_store_session_count_fn(struct rk_store *st, const char *sandbox_id,
                                              size_t *n_out, char *err, size_t errlen);
typedef rk_store_rc rk_store_get_touch_fn(struct rk_store *st, const char *id, int64_t now_s,
                                          json_object **out, char *mark, size_t marklen, char *err,
                                          size_t errlen);
typedef void rk_store_view_touch_fn(struct rk_store *st, const char *id, int64_t now_s,
                                    rk_store_view_fn *fn, void *ctx);
typedef rk_store_rc rk_store_view_many_op_fn(struct rk_store *st, const char *const *ids, size_t n,
                                             rk_store_view_each_fn *fn, void *ctx,
                                             json_object **kept, char *err, size_t errlen);
typedef rk_store_rc rk_store_scan_many_op_fn(struct rk_store *st, const char *const *ids, size_t n,
                                             rk_store_scan_each_fn *fn, void *ctx, char *err,
                                             size_t errlen);
typedef rk_store_rc rk_store_set_mark_fn(struct rk_store *st, const char *value, char *err,
                                         size_t errlen);
typedef rk_store_rc rk_store_lease_fn(struct rk_store *st, const char *name, const char *owner,
                                      int ttl_ms, char *err, size_t errlen);
typedef rk_store_rc rk_store_list_page_fn(struct rk_store *st, size_t offset, size_t limit,
                                          char ***ids_out, size_t *n_out, size_t *total_out,
                                          char *err, size_t errlen);
typedef rk_store_rc rk_store_count_states_fn(struct rk_store *st, size_t *pending_out,
                                             size_t *running_out, char *err, size_t errlen);

typedef rk_store_rc rk_createq_push_fn(struct rk_store *st, const char *id, const char *owner,
                                       int64_t now_ms, long long max, char *err, size_t errlen);
typedef rk_store_rc rk_createq_create_fn(struct rk_store *st, const char *id, json_object *rec,
                                         int64_t expire_time, const char *owner, int64_t now_ms,
                                         long long max, char *err, size_t errlen);
typedef rk_store_rc rk_createq_claim_fn(struct rk_store *st, const struct rk_createq_claim *c,
                                        struct rk_createq_item **items_out, size_t *n_out,
                                        size_t *requeued_out, char *err, size_t errlen);
typedef rk_store_rc rk_createq_renew_fn(struct rk_store *st, const char *owner, int64_t deadline_ms,
                                        size_t *n_out, char *err, size_t errlen);
typedef rk_store_rc rk_createq_id_owner_fn(struct rk_store *st, const char *id, const char *owner,
                                           char *err, size_t errlen);
typedef rk_store_rc rk_createq_cancel_fn(struct rk_store *st, const char *id, char *err,
                                         size_t errlen);
typedef rk_store_rc rk_createq_where_fn(struct rk_store *st, const char *id, int *where_out,
                                        char *err, size_t errlen);
typedef rk_store_rc rk_createq_depth_fn(struct rk_store *st, size_t *queued_out,
                                        size_t *claimed_out, char *err, size_t errlen);

/** Backend entry points; arguments are already validated by store_api.c. */
struct rk_store_ops {
    rk_store_close_fn *close;
    rk_store_ping_fn *ping;
    rk_store_get_fn *get;
    rk_store_get_many_fn *get_many;
    rk_store_create_fn *create;
    rk_store_update_op_fn *update;
    rk_store_update_many_op_fn *update_many; /* NULL: one update after the other */
    rk_store_list_active_fn *list_active;
    rk_store_touch_fn *touch;
    rk_store_expired_fn *expired;
    rk_store_claim_fn *claim;
    rk_store_reserve_fn *reserve;
    rk_store_commit_fn *commit;
    rk_store_rollback_fn *rollback;
    rk_store_session_get_fn *session_get;
    rk_store_session_remove_fn *session_remove;
    rk_store_session_clear_fn *session_clear;
    rk_store_session_take_all_fn *session_take_all;
    rk_store_session_count_fn *session_count;
    rk_store_get_touch_fn *get_touch;
    rk_store_view_touch_fn *view_touch;  /* NULL: the backend offers no in-place view */
    rk_store_view_many_op_fn *view_many; /* NULL: get_many in chunks, each record shown */
    rk_store_scan_many_op_fn *scan_many; /* NULL: view_many, each record shown as a tree */
    rk_store_set_mark_fn *set_mark;
    rk_store_lease_fn *lease;
    /* indexed list pages and per-state counts */
    rk_store_list_page_fn *list_page;
    rk_store_count_states_fn *count_states;
    /* records that carry a background job (archive/restore) */
    rk_store_list_active_fn *list_jobs;
    /* the create queue */
    rk_createq_push_fn *cq_push;
    rk_createq_create_fn *cq_create; /* the record and its queued create in one step */
    rk_createq_claim_fn *cq_claim;
    rk_createq_renew_fn *cq_renew;
    rk_createq_id_owner_fn *cq_done;
    rk_createq_id_owner_fn *cq_release;
    rk_createq_cancel_fn *cq_cancel;
    rk_createq_where_fn *cq_where;
    rk_createq_depth_fn *cq_depth;
    /* an event loop's asynchronous reader (store_reader.h); NULL when reads never block */
    struct rk_store_reader *(*reader_new)(struct rk_store *st);
};

/** Common head of every backend's store object (first member). */
struct rk_store {
    const struct rk_store_ops *ops;
    int shared;
    atomic_uint_least64_t errors;
    int64_t deleted_retention_s; /* 0 = keep deleted records forever */
};

/** Initialise the common head. */
void rk_store_base_init(struct rk_store *st, const struct rk_store_ops *ops, int shared);

/** Write a formatted message to err (if not NULL) and return RK_STORE_ERROR. */
rk_store_rc rk_store_fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/** 1 if rec's "state" is "pending" or "running". */
bool rk_store_rec_active(json_object *rec);

/** 1 if state (NULL: none) names an active state: "pending" or "running". */
bool rk_store_state_active(const char *state);

/** The idle touch of a read at now_s, both stores' one rule: for an active record rec whose
 *  idle deadline is current (0 = none), now_s + its auto_clear_time minutes when positive and
 *  later than current; else 0 (no touch). */
int64_t rk_store_touch_deadline(json_object *rec, int64_t now_s, int64_t current);

/** rk_store_touch_deadline for a record whose auto_clear_time is minutes (0: none). */
int64_t rk_store_idle_deadline(int64_t minutes, int64_t now_s, int64_t current);

/** 1 if rec's "state" is "deleted" (subject to the retention). */
bool rk_store_rec_deleted(json_object *rec);

/** 1 if rec carries a background job: a "job_lease" (set while an archive or
 *  restore job runs, removed when it ends) and it is not deleted. Both
 *  backends index these records for rk_store_list_jobs. */
bool rk_store_rec_has_job(json_object *rec);

/** Read a secret from the first line of path into a malloc'd string (trailing
 *  CR/LF stripped); NULL with msg filled on failure. The message never
 *  contains the secret. */
char *rk_store_read_secret_file(const char *path, char *msg, size_t msglen);

/** Sort key of a record in list order: "<create_time>\x01<id>" (malloc'd;
 *  byte order equals the list order: create_time, then id). */
char *rk_store_list_key(json_object *rec, const char *id);

/** Fill out with RK_STORE_TOKEN_HEX random lowercase hex characters + NUL; -1 on failure. */
int rk_store_new_token(char out[RK_STORE_TOKEN_HEX + 1]);

/** Wall clock in epoch milliseconds. */
int64_t rk_store_now_ms(void);

/** Registry value of a committed mapping: "s:<session id>" (malloc'd). */
char *rk_store_session_value(const char *session_id);

/** Registry value of a reservation: "r:<token>:<deadline ms>" (malloc'd). */
char *rk_store_reservation_value(const char *token, int64_t deadline_ms);

/** 1 if a registry value blocks a new reservation at now_ms: a committed
 *  mapping, a live reservation, or a reservation with an unparsable deadline. */
bool rk_store_value_blocks(const char *value, int64_t now_ms);

/** 1 if value is a reservation held by token. */
bool rk_store_value_is_reservation_of(const char *value, const char *token);

/** Release recs[0..n) and set each to NULL (a failed get_many hands back nothing). */
void rk_store_put_records(json_object **recs, size_t n);

/** Duplicate an array of n strings into a malloc'd array (NULL on OOM). */
char **rk_store_dup_ids(const char *const *ids, size_t n);

#endif /* RK_STORE_COMMON_H */
