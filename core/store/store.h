/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The sandbox store: sandbox records, idle deadlines, the session-name
 * registry and short-lived claims. Two backends share this interface:
 *   - Redis (hiredis) when redis.host is set: shared by every rock-admin
 *     process of a deployment; read-modify-write is atomic across processes.
 *   - In-process when no Redis is configured: one process only, not persistent.
 *
 * Records are JSON objects (json-c). The store treats them as opaque except
 * for the string member "state": records whose state is "pending" or
 * "running" are "active" and are indexed for list/batch and the idle sweep.
 *
 * All functions are thread-safe and bounded in time (Redis operations have a
 * timeout); on RK_STORE_ERROR a message is written to err (may be NULL).
 */
#ifndef RK_STORE_H
#define RK_STORE_H

#include <json-c/json.h>
#include <stddef.h>
#include <stdint.h>

/** Result of a store operation. */
typedef enum rk_store_rc {
    RK_STORE_OK = 0,
    RK_STORE_NOT_FOUND = 1, /* no such record / mapping */
    RK_STORE_EXISTS = 2,    /* create: an active record exists; reserve: name taken */
    RK_STORE_CONFLICT = 3,  /* commit/rollback/remove: the expected owner/value is gone */
    RK_STORE_ABORTED = 4,   /* update: the callback declined to write */
    RK_STORE_ERROR = -1,    /* store unreachable or failed; see err */
} rk_store_rc;

/** Connection settings for the Redis backend. */
struct rk_redis_cfg {
    const char *host;     /* non-empty */
    int port;             /* default 6379 */
    const char *password; /* NULL or "" for none; never logged */
    int db;               /* SELECT index */
    int connect_timeout_ms;
    int op_timeout_ms;      /* per command */
    int pool_size;          /* max concurrent connections */
    const char *key_prefix; /* e.g. "rock:"; NULL means "rock:" */
    /* High availability (Sentinel, ACL, WAIT). With sentinels set, host/port are ignored:
     * the master is discovered with SENTINEL get-master-addr-by-name, its
     * ROLE is verified, and it is re-discovered after a connection loss, a
     * -READONLY reply or a failed ROLE check. */
    const char *sentinels;              /* "host:port,host:port,..."; NULL or "" = fixed host */
    const char *master_name;            /* required with sentinels */
    const char *username;               /* ACL user for AUTH; NULL or "" = default user */
    const char *password_file;          /* read the password from this file (first line) */
    const char *sentinel_username;      /* AUTH for sentinels; NULL or "" = none */
    const char *sentinel_password;      /* never logged */
    const char *sentinel_password_file; /* read the sentinel password from this file */
    int min_replicas_ack;               /* WAIT for this many replicas after writes; 0 = off */
    int wait_timeout_ms;                /* bound of each WAIT; default 1000 */
};

struct rk_store;

/** Size of an error buffer that always fits store messages. */
#define RK_STORE_ERRLEN 256

/** Open the in-process store. Never fails except on OOM (NULL). */
struct rk_store *rk_store_open_memory(void);

/** Open the Redis store. Does not connect yet (connections are lazy and
 *  re-established with backoff); use rk_store_ping to check reachability. */
struct rk_store *rk_store_open_redis(const struct rk_redis_cfg *cfg);

/** Keep deleted records (state "deleted") queryable for seconds, then let
 *  them expire; 0 keeps them forever. Both backends; default 7 days
 *  (RK_STORE_DEFAULT_RETENTION_S). Call before the store is used. */
void rk_store_set_deleted_retention(struct rk_store *st, int64_t seconds);

/** Default retention of deleted records: 7 days. */
#define RK_STORE_DEFAULT_RETENTION_S (7 * 24 * 3600)

/** Close and free a store. */
void rk_store_close(struct rk_store *st);

/** 1 if the store is shared between processes (Redis). */
int rk_store_is_shared(const struct rk_store *st);

/** Check the store is reachable (PING). */
rk_store_rc rk_store_ping(struct rk_store *st, char *err, size_t errlen);

/* ---- sandbox records ---------------------------------------------------- */

/** Fetch a record. *out is a new reference the caller puts. The member
 *  "expire_time" (int, epoch seconds) is filled from the idle index when the
 *  sandbox is active. */
rk_store_rc rk_store_get(struct rk_store *st, const char *id, json_object **out, char *err,
                         size_t errlen);

/** Fetch several records at once; out[i] is NULL for unknown ids. */
rk_store_rc rk_store_get_many(struct rk_store *st, const char *const *ids, size_t n,
                              json_object **out, char *err, size_t errlen);

/** Insert a record for id unless an active record already exists
 *  (RK_STORE_EXISTS). Replaces an inactive (e.g. deleted) record.
 *  expire_time (epoch seconds) seeds the idle index; 0 = none. */
rk_store_rc rk_store_create(struct rk_store *st, const char *id, json_object *rec,
                            int64_t expire_time, char *err, size_t errlen);

/** Callback of rk_store_update: modify rec in place. Return 0 to write it,
 *  1 to leave the record unchanged (RK_STORE_ABORTED), -1 on error. May be
 *  called several times (optimistic retries); keep it free of side effects. */
typedef int (*rk_store_update_fn)(json_object *rec, void *ctx);

/** Atomic read-modify-write of an existing record (RK_STORE_NOT_FOUND if
 *  none). Keeps the active index consistent with the new state. If out is not
 *  NULL it receives a new reference to the record as written. */
rk_store_rc rk_store_update(struct rk_store *st, const char *id, rk_store_update_fn fn, void *ctx,
                            json_object **out, char *err, size_t errlen);

/** Ids of active records (pending or running). *ids_out is a malloc'd array
 *  of malloc'd strings; free with rk_store_free_ids. */
rk_store_rc rk_store_list_active(struct rk_store *st, char ***ids_out, size_t *n_out, char *err,
                                 size_t errlen);

/** One page of active ids in list order (create_time, then id): at most
 *  limit ids starting at offset; *total_out receives the number of active
 *  records. Redis reads an index (no scan of the records): the cost is one
 *  round trip and O(log N + limit). */
rk_store_rc rk_store_list_page(struct rk_store *st, size_t offset, size_t limit, char ***ids_out,
                               size_t *n_out, size_t *total_out, char *err, size_t errlen);

/** Number of active records per state (Redis: per-state index sets, SCARD). */
rk_store_rc rk_store_count_states(struct rk_store *st, size_t *pending_out, size_t *running_out,
                                  char *err, size_t errlen);

/** Free an id array from rk_store_list_active / rk_store_expired. */
void rk_store_free_ids(char **ids, size_t n);

/* ---- idle deadlines ------------------------------------------------------ */

/** Set the idle deadline (epoch seconds) of an active sandbox. */
rk_store_rc rk_store_touch(struct rk_store *st, const char *id, int64_t expire_time, char *err,
                           size_t errlen);

/** Active ids whose idle deadline is <= now (at most max). */
rk_store_rc rk_store_expired(struct rk_store *st, int64_t now, size_t max, char ***ids_out,
                             size_t *n_out, char *err, size_t errlen);

/** Take a named claim for ttl_s seconds unless someone holds it
 *  (RK_STORE_EXISTS). Used so only one process sweeps a sandbox. */
rk_store_rc rk_store_claim(struct rk_store *st, const char *name, int ttl_s, char *err,
                           size_t errlen);

/* ---- session-name registry ---------------------------------------------- */

/** Reserve a session name for ttl_s seconds. token_out (>= 64 bytes)
 *  receives the reservation token. A name with a committed mapping or a live
 *  reservation gives RK_STORE_EXISTS; an expired reservation is reclaimed. */
rk_store_rc rk_session_reserve(struct rk_store *st, const char *sandbox_id, const char *name,
                               int ttl_s, char *token_out, char *err, size_t errlen);

/** Replace our reservation with the backend session id. RK_STORE_CONFLICT if
 *  the reservation is no longer ours (expired and reclaimed, or removed). */
rk_store_rc rk_session_commit(struct rk_store *st, const char *sandbox_id, const char *name,
                              const char *token, const char *session_id, char *err, size_t errlen);

/** Drop our reservation (RK_STORE_CONFLICT if it is not ours any more). */
rk_store_rc rk_session_rollback(struct rk_store *st, const char *sandbox_id, const char *name,
                                const char *token, char *err, size_t errlen);

/** Look up a committed mapping; reservations read as RK_STORE_NOT_FOUND.
 *  *session_id_out is malloc'd. */
rk_store_rc rk_session_get(struct rk_store *st, const char *sandbox_id, const char *name,
                           char **session_id_out, char *err, size_t errlen);

/** Remove the mapping only if it still points at expected_session_id. */
rk_store_rc rk_session_remove(struct rk_store *st, const char *sandbox_id, const char *name,
                              const char *expected_session_id, char *err, size_t errlen);

/** Remove every mapping of a sandbox. */
rk_store_rc rk_session_clear(struct rk_store *st, const char *sandbox_id, char *err, size_t errlen);

/** Most session ids rk_session_take_all hands back (more are removed, not returned). */
#define RK_SESSION_TAKE_MAX 1024

/** Remove every mapping of a sandbox in one step and hand back the backend session ids of
 *  the committed ones (at most RK_SESSION_TAKE_MAX; free with rk_store_free_ids), so the
 *  caller can close them upstream. Reservations in flight are dropped: their commit then
 *  conflicts and the creator closes its backend session itself. */
rk_store_rc rk_session_take_all(struct rk_store *st, const char *sandbox_id, char ***ids_out,
                                size_t *n_out, char *err, size_t errlen);

/** Number of mappings (committed or reserved) of a sandbox, for tests/metrics. */
rk_store_rc rk_session_count(struct rk_store *st, const char *sandbox_id, size_t *n_out, char *err,
                             size_t errlen);

/* ---- counters for /metrics ---------------------------------------------- */

/** Total store errors since start (both backends). */
uint64_t rk_store_error_count(const struct rk_store *st);

/* ---- hot-path read and reconciler election -------------------------------- */

/** Fetch a record like rk_store_get and, when it is active and its
 *  "auto_clear_time" (minutes) is positive, move its idle deadline to
 *  now_s + minutes*60 if that is later (so the deadline is written at most once
 *  per second per sandbox). One Redis round trip. now_s <= 0: no touch (a
 *  plain read; the caller's throttle, domain/activity.h, decides when).
 *  mark (may be NULL) receives the reconciler's mark (rk_store_set_mark), ""
 *  if none, in the same round trip. */
rk_store_rc rk_store_get_touch(struct rk_store *st, const char *id, int64_t now_s,
                               json_object **out, char *mark, size_t marklen, char *err,
                               size_t errlen);

/** Take or renew the lease `name` for owner for ttl_ms milliseconds:
 *  RK_STORE_OK when owner holds it now, RK_STORE_EXISTS when another owner
 *  does. The in-process store always grants it (one process). */
rk_store_rc rk_store_lease(struct rk_store *st, const char *name, const char *owner, int ttl_ms,
                           char *err, size_t errlen);

/** Longest reconciler mark kept by the store. */
#define RK_STORE_MARK_MAX 512

/** Store the reconciler's mark (its last pass time and outcome), read back by
 *  rk_store_get_touch; truncated to RK_STORE_MARK_MAX - 1 bytes. */
rk_store_rc rk_store_set_mark(struct rk_store *st, const char *value, char *err, size_t errlen);

#endif /* RK_STORE_H */
