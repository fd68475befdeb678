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

#include "rkjson.h"

/** Result of a store operation. */
typedef enum rk_store_rc {
    RK_STORE_OK = 0,
    RK_STORE_NOT_FOUND = 1, /* no such record / mapping */
    RK_STORE_EXISTS = 2,    /* create: an active record exists; reserve: name taken */
    RK_STORE_CONFLICT = 3,  /* commit/rollback/remove: the expected owner/value is gone */
    RK_STORE_ABORTED = 4,   /* update: the callback declined to write */
    RK_STORE_FULL = 5,      /* create queue: its capacity is reached */
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
 *  1 to leave the record unchanged (RK_STORE_ABORTED), -1 on error; decide
 *  1 or -1 before changing anything (the in-process store hands over the
 *  stored record itself). May be called several times (optimistic retries);
 *  keep it free of side effects. */
typedef int (*rk_store_update_fn)(json_object *rec, void *ctx);

/** Atomic read-modify-write of an existing record (RK_STORE_NOT_FOUND if
 *  none). Keeps the active index consistent with the new state. If out is not
 *  NULL it receives a new reference to the record as written. */
rk_store_rc rk_store_update(struct rk_store *st, const char *id, rk_store_update_fn fn, void *ctx,
                            json_object **out, char *err, size_t errlen);

struct rk_store_found;
/** A look at a stored record before an update parses it (rk_store_update_many): return 1 to
 *  leave it as it is (RK_STORE_ABORTED, fn is not called), 0 to go on. It sees the record as
 *  the store found it: with Redis its text scanned in place (the json-c tree an update builds was
 *  most of what an update that changes nothing cost), a tree otherwise (found->expire_time is
 *  not given). A record it cannot look at goes to fn, which decides as ever. */
typedef int (*rk_store_check_fn)(const struct rk_store_found *found, void *ctx);

/** rk_store_update of the records ids[0..n), with fn and ctxs[i] for each, their outcomes in
 *  rcs[i]; check (NULL: none) looks at each record first. The Redis store reads them in one
 *  round trip and writes them in one more (records changed meanwhile are updated again one by
 *  one). RK_STORE_OK, or RK_STORE_ERROR when none could be tried (every rcs[i] says so then). */
rk_store_rc rk_store_update_many(struct rk_store *st, const char *const *ids, size_t n,
                                 rk_store_check_fn check, rk_store_update_fn fn, void *const *ctxs,
                                 rk_store_rc *rcs, char *err, size_t errlen);

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

/** Ids of the records that carry a background job (an archive or restore
 *  job's lease, see rk_store_rec_has_job), whatever their state, so a
 *  background pass can take over the jobs of a dead admin. Redis keeps them in
 *  a set written with each update (one round trip, O(jobs)); the in-process
 *  store scans its records. Free with rk_store_free_ids. */
rk_store_rc rk_store_list_jobs(struct rk_store *st, char ***ids_out, size_t *n_out, char *err,
                               size_t errlen);

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

/** What rk_store_view_touch shows: rc as rk_store_get_touch; rec (RK_STORE_OK only, else NULL)
 *  is the stored record itself, with its "expire_time" when active — borrowed and read-only:
 *  valid during the call only, never modified, serialised or referenced (json_object_get) by
 *  anything that outlives the call; mark and err as rk_store_get_touch. version names what fn
 *  sees (the record with its expire_time): it changes whenever either changes, and no other
 *  content of this store ever had it, so a caller may remember what it derived from a version
 *  (0 unless RK_STORE_OK). Runs under the store's lock: short, and never calls the store. */
typedef void rk_store_view_fn(void *ctx, rk_store_rc rc, json_object *rec, uint64_t version,
                              const char *mark, const char *err);

/** rk_store_get_touch without the copy, for a caller that only reads the record: fn sees it in
 *  place. 0 when fn was called; -1 when the store offers no such view (Redis, whose record is
 *  a reply to parse anyway): use rk_store_get_touch. */
int rk_store_view_touch(struct rk_store *st, const char *id, int64_t now_s, rk_store_view_fn *fn,
                        void *ctx);

/** What rk_store_view_many shows: the record of ids[i] (NULL when there is none), borrowed and
 *  read-only as with rk_store_view_fn (without "expire_time"); runs under the in-process
 *  store's lock: short, and never calls the store. Return 1 to keep the record: kept[i] then
 *  receives a record of the caller's own (as rk_store_get gives it); else 0. */
typedef int rk_store_view_each_fn(void *ctx, size_t i, json_object *rec);

/** Show each record of ids[0..n) to fn without a copy, for a caller that reads many records and
 *  keeps few of them whole (the reconciler's pass); kept (n slots, set to NULL first) receives
 *  the records fn asked to keep (release with json_object_put; may be NULL when fn never asks).
 *  Each record is seen atomically, the set is not (as rk_store_get_many). The in-process store
 *  shows its records in place, a chunk per hold of its lock, and copies only those kept; Redis
 *  reads them in chunks and shows each parsed reply (a kept one is handed over). */
rk_store_rc rk_store_view_many(struct rk_store *st, const char *const *ids, size_t n,
                               rk_store_view_each_fn *fn, void *ctx, json_object **kept, char *err,
                               size_t errlen);

/** A record as a read found it: its JSON text, scanned (lib/rkjson.h), with the idle
 *  deadline the store keeps beside it; or, for a text the scanner does not read (and for the
 *  in-process store, whose records are trees), the record itself. Everything is the store's,
 *  valid during the callback it is shown to only. */
struct rk_store_found {
    json_object *rec; /* the record as a tree (a text the scanner does not read; the in-process
                       * store's records), or NULL: the text */
    const char *text; /* the record's bytes */
    size_t len;
    const struct rku_json_member *m; /* the text's members */
    size_t n;
    int64_t expire_time; /* the record's idle deadline (the touch's when it touched) */
    int has_expire;      /* 0: none (expire_time unused) */
};

/** The found record as a tree, as rk_store_get_touch gives it (new reference; NULL when memory
 *  ran out or the text is not JSON). */
json_object *rk_store_found_tree(const struct rk_store_found *found);

/** What rk_store_scan_many shows: record i as found (NULL when there is none), without
 *  "expire_time"; runs under the in-process store's lock: short, and never calls the store. */
typedef void rk_store_scan_each_fn(void *ctx, size_t i, const struct rk_store_found *found);

/** Show each record of ids[0..n) to fn as rk_store_view_many does, with Redis as its scanned
 *  text, so that a caller who only looks at a few members builds no tree (the reconciler's
 *  glance at every pending record of a pass). */
rk_store_rc rk_store_scan_many(struct rk_store *st, const char *const *ids, size_t n,
                               rk_store_scan_each_fn *fn, void *ctx, char *err, size_t errlen);

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

/* ---- the create queue ---------------------------------------------------- */
/*
 * Sandbox creates waiting for the backend, shared by every admin on the store.
 * An entry is "queued" (ordered by its enqueue time, FIFO) until an admin
 * claims it; it is then "claimed" by that admin under a lease, renewed while
 * the backend create runs, until the admin marks it done. A claim whose lease
 * ran out (its admin died) goes back to the queue with its enqueue time, so
 * the next claim by any admin takes it first. An admin claims the entries it
 * queued itself at once and another admin's once they have waited
 * steal_after_ms (so a create normally runs where it was accepted, and the
 * others take over a backlog or a dead admin's queue). Claims never let more
 * than `concurrency` entries be claimed store-wide, nor more than `rate` be
 * claimed in one wall-clock second (0 = no rate limit). Times are the
 * callers' epoch milliseconds (the admins' clocks should agree to well within
 * a lease).
 */

/** Longest owner name of the create queue (an admin's host:pid:random). */
#define RK_CREATEQ_OWNER_MAX 127

/** One claimed create: the sandbox id (malloc'd), its enqueue time (epoch ms), whether an
 *  earlier claim of it lapsed (its admin died or stopped renewing while it held it, so that
 *  create may have reached the backend), and its record as the claim found it (the caller's
 *  copy, with no expire_time; NULL when the record is gone), read in the claim's own round
 *  trip. */
struct rk_createq_item {
    char *id;
    int64_t enqueued_ms;
    int retaken;
    json_object *rec;
};

/** What one claim may take. */
struct rk_createq_claim {
    const char *owner;       /* this admin (as given to push; <= RK_CREATEQ_OWNER_MAX bytes) */
    int64_t now_ms;          /* epoch ms */
    int lease_ms;            /* the claim holds this long unless renewed */
    size_t want;             /* at most this many items */
    int concurrency;         /* store-wide bound of claimed entries */
    int rate;                /* store-wide claims per wall-clock second; 0 = unbounded */
    int steal_after_ms;      /* another admin's entries are taken after waiting this long */
    const char *const *done; /* creates of owner that finished since its last claim */
    size_t n_done;
};

/** Queue a create for sandbox id at now_ms, owned by owner, unless queued and claimed
 *  entries already number max (RK_STORE_FULL). Queuing an id already queued or claimed
 *  is RK_STORE_OK and changes nothing. */
rk_store_rc rk_createq_push(struct rk_store *st, const char *id, const char *owner, int64_t now_ms,
                            long long max, char *err, size_t errlen);

/** Store the new record of sandbox id (as rk_store_create) and queue its create (as
 *  rk_createq_push) in one atomic step, so that no admin can die between the two and leave a
 *  pending record that nobody creates. RK_STORE_OK: both done; RK_STORE_EXISTS: nothing done,
 *  the id is active; RK_STORE_FULL: the record is stored but the queue already holds max
 *  entries (the caller fails the record); RK_STORE_ERROR: err says why. */
rk_store_rc rk_createq_create(struct rk_store *st, const char *id, json_object *rec,
                              int64_t expire_time, const char *owner, int64_t now_ms, long long max,
                              char *err, size_t errlen);

/** Claim the oldest eligible entries (see above). The claims owner holds of c->done[0..n_done)
 *  are dropped first, as rk_createq_done drops them (one owner no longer holds is left alone),
 *  in the same atomic step: an admin saves a round trip per create, and a finished create's place
 *  is free for this very claim. While other owners have creates queued, an owner holds at most
 *  its share of the concurrency (Redis; the concurrency divided by the owners holding claims, at
 *  least two), so that no admin keeps the store-wide concurrency to itself. Expired claims are then
 * put back in the queue, marked retaken until their create is done or cancelled; *requeued_out (may
 * be NULL) receives how many. *items_out (free with rk_createq_free_items) receives *n_out items in
 * enqueue order. */
rk_store_rc rk_createq_claim(struct rk_store *st, const struct rk_createq_claim *c,
                             struct rk_createq_item **items_out, size_t *n_out,
                             size_t *requeued_out, char *err, size_t errlen);

/** Extend every claim owner holds to deadline_ms (epoch ms); *n_out (may be NULL) receives
 *  how many it still held. */
rk_store_rc rk_createq_renew(struct rk_store *st, const char *owner, int64_t deadline_ms,
                             size_t *n_out, char *err, size_t errlen);

/** The create of id is finished (whatever its outcome): drop owner's claim.
 *  RK_STORE_CONFLICT when owner no longer holds it. */
rk_store_rc rk_createq_done(struct rk_store *st, const char *id, const char *owner, char *err,
                            size_t errlen);

/** Put owner's claim of id back in the queue with its enqueue time (the create was never
 *  started). RK_STORE_CONFLICT when owner no longer holds it. */
rk_store_rc rk_createq_release(struct rk_store *st, const char *id, const char *owner, char *err,
                               size_t errlen);

/** Remove id from the queue if it is still queued (not claimed): RK_STORE_OK when removed
 *  (its create will never run), RK_STORE_NOT_FOUND otherwise. */
rk_store_rc rk_createq_cancel(struct rk_store *st, const char *id, char *err, size_t errlen);

/** Where id is: *where_out 0 = not in the queue, 1 = queued, 2 = claimed. */
rk_store_rc rk_createq_where(struct rk_store *st, const char *id, int *where_out, char *err,
                             size_t errlen);

/** Queued and claimed entries, store-wide (for /metrics). */
rk_store_rc rk_createq_depth(struct rk_store *st, size_t *queued_out, size_t *claimed_out,
                             char *err, size_t errlen);

/** Free the items of rk_createq_claim. */
void rk_createq_free_items(struct rk_createq_item *items, size_t n);

#endif /* RK_STORE_H */
