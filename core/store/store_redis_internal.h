/* SPDX-License-Identifier: Apache-2.0 */
/* Private to core/store/: what the files of the Redis store share. The store object and its
 * connection pool, a command, a checked-out connection, and the functions each file offers
 * the others:
 *   store_redis.c           the store object: settings, open and close, the ops table
 *   store_redis_conn.c      the connection pool and Sentinel discovery
 *   store_redis_cmd.c       commands: argument vectors, run, pipeline, EVALSHA, WAIT
 *   store_redis_lua.c       the Lua scripts and their SCRIPT LOAD digests
 *   store_redis_records.c   sandbox records: get, create, update, touch, get_touch, the
 *                           touch a read owes
 *   store_redis_index.c     the active, idle-deadline, list and per-state indexes
 *   store_redis_sessions.c  the session-name registry
 *   store_redis_lease.c     claims, leases and the reconciler's mark
 *   store_redis_createq.c   the create queue (with its own scripts)
 *   store_redis_reader.c    an event loop's asynchronous reader (store_reader.h)
 * The key layout is described in store_redis.c. */
#ifndef RK_STORE_REDIS_INTERNAL_H
#define RK_STORE_REDIS_INTERNAL_H

#include "store/store_common.h"

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PREFIX_MAX 64
#define KEY_MAX (PREFIX_MAX + RK_STORE_MAX_NAME + 16)
#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 5000
#define MAX_ARGS 24
#define SENTINEL_BACKOFF_MAX_MS 1000 /* retry faster while a failover settles */
#define GET_CHUNK 1000               /* ids per get_many round trip */
#define INDEX_RECHECK_MS 60000       /* how often list/count re-check index:v2 */
#define HOST_MAX 256

/* One sentinel address. */
struct sentinel_addr {
    char host[HOST_MAX];
    int port;
};

/* The Redis store and its connection pool. */
struct redis_store {
    struct rk_store base;
    char *host;
    char *password;
    int port;
    int db;
    int connect_timeout_ms;
    int op_timeout_ms;
    int pool_size;
    char prefix[PREFIX_MAX + 1];
    char *username;                  /* NULL = default user */
    char *master_name;               /* sentinel mode only */
    char *sentinel_username;         /* NULL = no AUTH user for sentinels */
    char *sentinel_password;         /* NULL = no AUTH for sentinels */
    struct sentinel_addr *sentinels; /* NULL = fixed host */
    int n_sentinels;
    int min_replicas_ack; /* 0 = no WAIT */
    int wait_timeout_ms;

    pthread_mutex_t mu;
    pthread_cond_t cv;
    redisContext **idle; /* pool_size slots */
    int n_idle;
    int busy;            /* checked out or connecting */
    int64_t retry_at_ms; /* monotonic; no new connection before this */
    int backoff_ms;      /* 0 while healthy */
    char last_err[128];
    char cur_host[HOST_MAX]; /* the master in use (guarded by mu) */
    int cur_port;
    bool master_known;      /* sentinel mode: cur_host/cur_port are current */
    int next_sentinel;      /* ask this one first */
    int64_t index_seen_ms;  /* monotonic time index:v2 was last seen; 0 = never */
    atomic_bool no_zadd_gt; /* the server refused ZADD GT (before Redis 6.2): touch by script */

    /* Single updates waiting to be written together (store_redis_group.c), under group_mu. */
    pthread_mutex_t group_mu;
    pthread_cond_t group_cv;
    struct rkr_group_entry *group_head, *group_tail;
    struct rkr_group_entry *group_flying; /* the updates of the batches being written */
    int group_writers;                    /* batches being written */
};

/* One command: argument vectors for redisCommandArgv. */
struct cmd {
    int argc;
    const char *argv[MAX_ARGS];
    size_t lens[MAX_ARGS];
};

/* A checked-out connection. */
struct rop {
    struct redis_store *rs;
    redisContext *c;
    bool broken;
    bool reused; /* taken from the idle list (not connected for this operation) */
    bool closed; /* broken because the server had closed it (rkr_io_fail) */
};

/* Return the Redis store behind the interface pointer. */
static inline struct redis_store *rkr_store(struct rk_store *st)
{
    return (struct redis_store *)st;
}

/* ---- store_redis_conn.c: connection pool and Sentinel discovery ---- */

/** The commands that set a new connection up: AUTH [user] password when password is set,
 *  SELECT db when db is not 0 (dbbuf holds its argument). Returns how many (0-2). */
int rkr_setup_cmds(const char *user, const char *password, int db, struct cmd steps[2],
                   char dbbuf[16]);
/** Free the contexts in list. */
void rkr_free_contexts(redisContext **list, int n);
/** Check out a connection (connecting lazily, with the pool's backoff); waits at most
 *  op_timeout_ms for a free slot. */
rk_store_rc rkr_op_begin(struct redis_store *rs, struct rop *op, char *err, size_t errlen);
/** Return a connection to the pool (a broken one is freed with every idle one). */
void rkr_op_end(struct rop *op);
/** Describe a connection-level failure and mark the connection broken. */
rk_store_rc rkr_io_fail(struct rop *op, char *err, size_t errlen);
/** Describe an error reply (the connection stays usable). */
rk_store_rc rkr_reply_fail(const redisReply *r, char *err, size_t errlen);
/** redisGetReply for a blocking context, reading into a small stack buffer first. */
int rkr_get_reply(redisContext *c, void **reply);
/** Send n commands in one round trip and read every reply into replies[i]; on failure
 *  nothing needs freeing. */
rk_store_rc rkr_op_pipeline(struct rop *op, const struct cmd *cmds, size_t n, redisReply **replies,
                            char *err, size_t errlen);

/* ---- store_redis_cmd.c: commands ---- */

/** Append one string argument to a command (silently bounded by MAX_ARGS). */
void rkr_cmd_add(struct cmd *c, const char *s);
/** Build a command from a NULL-terminated list of strings. */
void rkr_cmd_build(struct cmd *c, const char *first, ...);
/** Format "<prefix><kind><name>" into buf and return it. */
const char *rkr_key_of(const struct redis_store *rs, char buf[KEY_MAX], const char *kind,
                       const char *name);
/** Run one command on a checked-out connection (EVAL as EVALSHA); error replies become
 *  errors. */
rk_store_rc rkr_op_command(struct rop *op, const struct cmd *c, redisReply **out, char *err,
                           size_t errlen);
/** Check out a connection, run one command, return the connection. */
rk_store_rc rkr_run(struct redis_store *rs, const struct cmd *c, redisReply **out, char *err,
                    size_t errlen);
/** Send n commands in one round trip on a pooled connection (replies[i] are the caller's). */
rk_store_rc rkr_run_pipeline(struct redis_store *rs, const struct cmd *cmds, size_t n,
                             redisReply **replies, char *err, size_t errlen);
/** As rkr_run_pipeline for reads (and idempotent touches): run once more, on a new
 *  connection, when the idle connection it used had been closed by the server (a dropped
 *  idle connection, CLIENT KILL, a restarted Redis), so that no read fails for that. */
rk_store_rc rkr_run_read(struct redis_store *rs, const struct cmd *cmds, size_t n,
                         redisReply **replies, char *err, size_t errlen);
/** rkr_run for a read, with rkr_run_read's one retry on a connection found closed. */
rk_store_rc rkr_run_read1(struct redis_store *rs, const struct cmd *c, redisReply **out, char *err,
                          size_t errlen);
/** Run a command expecting an integer reply. */
rk_store_rc rkr_run_int(struct redis_store *rs, const struct cmd *c, long long *val, char *err,
                        size_t errlen);
/** After a write on op's connection: WAIT for min_replicas_ack replicas. */
rk_store_rc rkr_op_wait_replicas(struct rop *op, char *err, size_t errlen);
/** Run a write expecting an integer reply, confirmed by WAIT when min_replicas_ack > 0. */
rk_store_rc rkr_run_write_int(struct redis_store *rs, const struct cmd *c, long long *val,
                              char *err, size_t errlen);
/** Copy the string elements of an array reply into a malloc'd id list. */
rk_store_rc rkr_ids_from_array(const redisReply *r, char ***ids_out, size_t *n_out, char *err,
                               size_t errlen);

/* ---- store_redis_lua.c: the Lua scripts ---- */

/** Lua: the function create(K, A) of rkr_lua_create (K: its 6 keys, A: its 7 arguments; 1 if
 *  written, 0 if the id is active), shared with the create queue's record-and-create script. */
#define RKR_LUA_CREATE_FN                                                                          \
    "local function create(K, A)\n"                                                                \
    "  if redis.call('SISMEMBER', K[2], A[1]) == 1 then return 0 end\n"                            \
    "  if tonumber(A[5]) > 0 then redis.call('SET', K[1], A[2], 'EX', A[5])\n"                     \
    "  else redis.call('SET', K[1], A[2]) end\n"                                                   \
    "  if A[3] == '1' then\n"                                                                      \
    "    redis.call('SADD', K[2], A[1])\n"                                                         \
    "    if tonumber(A[4]) > 0 then redis.call('ZADD', K[3], A[4], A[1])\n"                        \
    "    else redis.call('ZREM', K[3], A[1]) end\n"                                                \
    "    redis.call('ZADD', K[4], 0, A[6])\n"                                                      \
    "    local on, off = K[6], K[5]\n"                                                             \
    "    if A[7] == 'pending' then on, off = K[5], K[6] end\n"                                     \
    "    redis.call('SADD', on, A[1])\n"                                                           \
    "    redis.call('SREM', off, A[1])\n"                                                          \
    "  else\n"                                                                                     \
    "    redis.call('ZREM', K[3], A[1])\n"                                                         \
    "  end\n"                                                                                      \
    "  return 1\n"                                                                                 \
    "end\n"

extern const char rkr_lua_create[];
extern const char rkr_lua_uncreate[];
extern const char rkr_lua_uncommit[];
extern const char rkr_lua_reindex[];
extern const char rkr_lua_touch[];
extern const char rkr_lua_reserve[];
extern const char rkr_lua_commit[];
extern const char rkr_lua_remove[];
extern const char rkr_lua_take_all[];
extern const char rkr_lua_touch_later[];
extern const char rkr_lua_lease[];
/** The SHA1 of script (SCRIPT LOAD on first use): 0 and sha filled, -1 to fall back to EVAL. */
int rkr_script_sha(struct rop *op, const char *script, char sha[41]);
/** The SHA1 of script if a SCRIPT LOAD learnt it already: 0 and sha filled, else -1. */
int rkr_script_sha_known(const char *script, char sha[41]);
/** Forget every learnt digest (the server lost its scripts). */
void rkr_script_forget(void);

/* ---- store_redis_records.c: records ---- */

/** Parse a record reply (nil: RK_STORE_NOT_FOUND) and add the idle deadline from a ZSCORE
 *  reply (score may be NULL) when the record is active. */
rk_store_rc rkr_record_from(const redisReply *rec, const redisReply *score, json_object **out,
                            const char *id, char *err, size_t errlen);
/** Add expire_time from a ZSCORE reply to an active record (nothing for a nil score). */
void rkr_record_add_score(json_object *rec, const redisReply *score);
/** One record update on its own: read under WATCH, written in a MULTI block, retried when the
 *  record changed meanwhile (the single update of struct rk_store_ops, without grouping). */
rk_store_rc rkr_update_one(struct rk_store *st, const char *id, rk_store_update_fn fn, void *ctx,
                           json_object **out, char *err, size_t errlen);
/** rkr_update_many, with each update's own failure text in errs[i] when errs is given. */
rk_store_rc rkr_update_batch(struct rk_store *st, const char *const *ids, size_t n,
                             rk_store_check_fn check, rk_store_update_fn fn, void *const *ctxs,
                             rk_store_rc *rcs, char (*errs)[RK_STORE_ERRLEN], char *err,
                             size_t errlen);

/* ---- store_redis_group.c: single updates written together ---- */

/** Set up and release the group of a store (its lock and condition). 0 or -1. */
int rkr_group_init(struct redis_store *rs);
void rkr_group_destroy(struct redis_store *rs);
/** The idle touch a read at now_s (<= 0: none) owes rec, a record read with its deadline
 *  (rkr_record_from): when the record is active and now_s + auto_clear_time minutes is later
 *  than its deadline, that new deadline, also set as rec's expire_time (*had_deadline: rec had
 *  one); else 0. The rule of the in-process store's touch (store_memory_records.c). */
int64_t rkr_touch_due(json_object *rec, int64_t now_s, bool *had_deadline);
/** Key and number buffers of a touch command. */
struct rkr_touch_bufs {
    char active[KEY_MAX], expire[KEY_MAX], deadline[32];
};
/** The command that raises id's idle deadline to deadline (from rkr_touch_due): ZADD XX GT
 *  when the record had a deadline and the server knows GT (XX: a record that left the active
 *  set meanwhile left the deadline index with it, and stays out; GT: concurrent touches never
 *  lower it), else EVAL of rkr_lua_touch_later, which checks both itself. */
void rkr_touch_cmd(struct redis_store *rs, struct cmd *c, struct rkr_touch_bufs *b, const char *id,
                   int64_t deadline, bool had_deadline);
/** A touch command's error text: 1 when it says the server has no ZADD GT (Redis before 6.2;
 *  the store touches by script from then on), else 0. */
int rkr_touch_refused(struct redis_store *rs, const char *error);

/* ---- store_redis_reader.c: an event loop's asynchronous reader ---- */

/** A reader on the store's master (store_reader.h). */
struct rk_store_reader *rkr_reader_new(struct rk_store *st);

/* ---- store_redis_index.c: indexes and lists ---- */

/** Key buffers of the list and per-state indexes. */
struct index_keys {
    char bycreated[KEY_MAX], pending[KEY_MAX], running[KEY_MAX];
};
/** Append the index upkeep of one record's write to a MULTI block. */
void rkr_index_cmds(const struct redis_store *rs, struct index_keys *k, struct cmd *wr, int *nw,
                    const char *id, bool active, bool pending, const char *old_key,
                    const char *new_key);

/** What rkr_lua_create is given for one new record: its 6 keys and 7 arguments. */
struct rkr_create_parts {
    char keys[6][KEY_MAX];
    char exp[32], ttl[32];
    const char *json; /**< owned by the record */
    const char *state;
    const char *active;
    char *lkey; /**< malloc'd */
};
/** Fill p for record rec of id (free with rkr_create_parts_free). */
rk_store_rc rkr_create_parts(struct redis_store *rs, const char *id, json_object *rec,
                             int64_t expire_time, struct rkr_create_parts *p, char *err,
                             size_t errlen);
void rkr_create_parts_free(struct rkr_create_parts *p);
/** Append the script's keys, then (after any other keys) its arguments. */
void rkr_create_add_keys(struct cmd *c, const struct rkr_create_parts *p);
void rkr_create_add_args(struct cmd *c, const char *id, const struct rkr_create_parts *p);
/** Take back a create the replicas did not confirm, if the record is still what we wrote. */
void rkr_create_undo(struct redis_store *rs, const char *id, const struct rkr_create_parts *p);

/* ---- the backend entry points (struct rk_store_ops), by the file that defines them ---- */

/* store_redis_records.c */
rk_store_get_fn rkr_get;
rk_store_get_many_fn rkr_get_many;
rk_store_scan_many_op_fn rkr_scan_many;
rk_store_create_fn rkr_create;
rk_store_update_many_op_fn rkr_update_many;
rk_store_touch_fn rkr_touch;
rk_store_get_touch_fn rkr_get_touch;
/* store_redis_group.c */
rk_store_update_op_fn rkr_update;
/* store_redis_index.c */
rk_store_list_active_fn rkr_list_active;
rk_store_list_active_fn rkr_list_jobs;
rk_store_expired_fn rkr_expired;
rk_store_list_page_fn rkr_list_page;
rk_store_count_states_fn rkr_count_states;
/* store_redis_sessions.c */
rk_store_reserve_fn rkr_reserve;
rk_store_commit_fn rkr_commit;
rk_store_rollback_fn rkr_rollback;
rk_store_session_get_fn rkr_session_get;
rk_store_session_remove_fn rkr_session_remove;
rk_store_session_clear_fn rkr_session_clear;
rk_store_session_take_all_fn rkr_session_take_all;
rk_store_session_count_fn rkr_session_count;
/* store_redis_createq.c */
rk_createq_push_fn rkr_cq_push;
rk_createq_create_fn rkr_cq_create;
rk_createq_claim_fn rkr_cq_claim;
rk_createq_renew_fn rkr_cq_renew;
rk_createq_id_owner_fn rkr_cq_done;
rk_createq_id_owner_fn rkr_cq_release;
rk_createq_cancel_fn rkr_cq_cancel;
rk_createq_where_fn rkr_cq_where;
rk_createq_depth_fn rkr_cq_depth;
/* store_redis_lease.c */
rk_store_claim_fn rkr_claim;
rk_store_lease_fn rkr_lease;
rk_store_set_mark_fn rkr_set_mark;

#endif /* RK_STORE_REDIS_INTERNAL_H */
