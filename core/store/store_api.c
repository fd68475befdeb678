/* SPDX-License-Identifier: Apache-2.0 */
/* The store's public entry points (store.h): argument checks, dispatch to the backend
 * through its ops table, the error counter and the per-call store metrics. */
#include "store/store_common.h"

#include "base/util.h"
#include "obs/metrics.h"
#include "store/store_reader.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Clear err so a stale message is never mistaken for a new one. */
static void err_reset(char *err, size_t errlen)
{
    if (err && errlen > 0)
        err[0] = '\0';
}

/* Start of this thread's current backend call (CLOCK_MONOTONIC ns). */
static _Thread_local int64_t call_start_ns;

/* Count an error result and observe the round trip since call_start_ns
 * under the operation named by the calling function ("rk_store_get" ->
 * "get", "rk_session_reserve" -> "session_reserve"); pass any rc through. */
static rk_store_rc counted_call(struct rk_store *st, const char *fn, rk_store_rc rc)
{
    if (rc == RK_STORE_ERROR)
        atomic_fetch_add(&st->errors, 1);
    const char *op = strncmp(fn, "rk_store_", 9) == 0 ? fn + 9
                     : strncmp(fn, "rk_", 3) == 0     ? fn + 3
                                                      : fn;
    rk_metrics_store(op, (double)(rk_mono_ns() - call_start_ns) / 1e9);
    return rc;
}

/* counted(st, st->ops->x(...)): the comma operator starts the clock before
 * the backend call is evaluated. */
#define counted(st, rc) (call_start_ns = rk_mono_ns(), counted_call((st), __func__, (rc)))

/* Validate a name-like argument (non-empty, bounded). */
static bool name_ok(const char *s)
{
    return s && s[0] && strnlen(s, RK_STORE_MAX_NAME + 1) <= RK_STORE_MAX_NAME;
}

/* Report an invalid argument, counting it unless the store itself is NULL. */
static rk_store_rc invalid(struct rk_store *st, const char *what, char *err, size_t errlen)
{
    if (st)
        atomic_fetch_add(&st->errors, 1);
    return rk_store_fail(err, errlen, "store: invalid %s", what);
}

/* Check the store and the other arguments (args_ok: else "invalid argument"), then each
 * (what, name) pair after errlen in turn, up to a NULL what: the first name that is not
 * name_ok is reported as "invalid <what>". Failures are counted; RK_STORE_OK if all pass. */
static rk_store_rc check(struct rk_store *st, bool args_ok, char *err, size_t errlen, ...)
{
    if (!st || !args_ok)
        return invalid(st, "argument", err, errlen);
    rk_store_rc rc = RK_STORE_OK;
    va_list ap;
    va_start(ap, errlen);
    for (const char *what; rc == RK_STORE_OK && (what = va_arg(ap, const char *)) != NULL;)
        if (!name_ok(va_arg(ap, const char *)))
            rc = invalid(st, what, err, errlen);
    va_end(ap);
    return rc;
}

/* Set the retention of deleted records (0 = forever). */
void rk_store_set_deleted_retention(struct rk_store *st, int64_t seconds)
{
    if (st)
        st->deleted_retention_s = seconds > 0 ? seconds : 0;
}

/* Close the store through its backend. */
void rk_store_close(struct rk_store *st)
{
    if (st)
        st->ops->close(st);
}

/* 1 for the Redis backend. */
int rk_store_is_shared(const struct rk_store *st)
{
    return st ? st->shared : 0;
}

/* PING the backend. */
rk_store_rc rk_store_ping(struct rk_store *st, char *err, size_t errlen)
{
    err_reset(err, errlen);
    if (!st)
        return invalid(st, "store", err, errlen);
    return counted(st, st->ops->ping(st, err, errlen));
}

/* Fetch one record. */
rk_store_rc rk_store_get(struct rk_store *st, const char *id, json_object **out, char *err,
                         size_t errlen)
{
    err_reset(err, errlen);
    if (out)
        *out = NULL;
    rk_store_rc rc = check(st, out != NULL, err, errlen, "sandbox id", id, NULL);
    if (rc != RK_STORE_OK)
        return rc;
    return counted(st, st->ops->get(st, id, out, err, errlen));
}

/* Fetch several records. */
rk_store_rc rk_store_get_many(struct rk_store *st, const char *const *ids, size_t n,
                              json_object **out, char *err, size_t errlen)
{
    err_reset(err, errlen);
    if (!st || (n > 0 && (!ids || !out)))
        return invalid(st, "argument", err, errlen);
    for (size_t i = 0; i < n; i++)
        out[i] = NULL;
    for (size_t i = 0; i < n; i++)
        if (!name_ok(ids[i]))
            return invalid(st, "sandbox id", err, errlen);
    if (n == 0)
        return RK_STORE_OK;
    return counted(st, st->ops->get_many(st, ids, n, out, err, errlen));
}

/* Insert a record unless an active one exists. */
rk_store_rc rk_store_create(struct rk_store *st, const char *id, json_object *rec,
                            int64_t expire_time, char *err, size_t errlen)
{
    err_reset(err, errlen);
    if (!st || !json_object_is_type(rec, json_type_object))
        return invalid(st, "record", err, errlen);
    if (!name_ok(id))
        return invalid(st, "sandbox id", err, errlen);
    return counted(st, st->ops->create(st, id, rec, expire_time, err, errlen));
}

/** Records read per get_many when a backend offers no in-place view. */
#define VIEW_MANY_CHUNK 256

/* Show many records, copying only those the caller keeps. */
rk_store_rc rk_store_view_many(struct rk_store *st, const char *const *ids, size_t n,
                               rk_store_view_each_fn *fn, void *ctx, json_object **kept, char *err,
                               size_t errlen)
{
    err_reset(err, errlen);
    if (!st || !fn || (n > 0 && !ids))
        return invalid(st, "argument", err, errlen);
    for (size_t i = 0; kept && i < n; i++)
        kept[i] = NULL;
    for (size_t i = 0; i < n; i++)
        if (!name_ok(ids[i]))
            return invalid(st, "sandbox id", err, errlen);
    if (n == 0)
        return RK_STORE_OK;
    if (st->ops->view_many)
        return counted(st, st->ops->view_many(st, ids, n, fn, ctx, kept, err, errlen));
    json_object *recs[VIEW_MANY_CHUNK];
    for (size_t off = 0; off < n; off += VIEW_MANY_CHUNK) {
        size_t m = n - off < VIEW_MANY_CHUNK ? n - off : VIEW_MANY_CHUNK;
        rk_store_rc rc = counted(st, st->ops->get_many(st, ids + off, m, recs, err, errlen));
        if (rc != RK_STORE_OK)
            return rc;
        for (size_t i = 0; i < m; i++) {
            if (fn(ctx, off + i, recs[i]) && kept && recs[i])
                kept[off + i] = recs[i]; /* handed over: it is a copy already */
            else
                json_object_put(recs[i]);
        }
    }
    return RK_STORE_OK;
}

json_object *rk_store_found_tree(const struct rk_store_found *found)
{
    if (found->rec)
        return json_object_get(found->rec);
    json_tokener *tok = json_tokener_new();
    if (!tok)
        return NULL;
    json_object *o = json_tokener_parse_ex(tok, found->text, (int)found->len);
    json_tokener_free(tok);
    /* the scanner read it: json-c reads it too (an object), unless memory ran out */
    if (o && found->has_expire &&
        json_object_object_add(o, "expire_time", json_object_new_int64(found->expire_time)) != 0) {
        json_object_put(o);
        o = NULL;
    }
    return o;
}

/* rk_store_view_each_fn of rk_store_scan_many on a store without a scan of its own: the record
 * shown as found. */
struct scan_shim {
    rk_store_scan_each_fn *fn;
    void *ctx;
};

static int scan_shim(void *ctx, size_t i, json_object *rec)
{
    struct scan_shim *sh = ctx;
    struct rk_store_found found = {.rec = rec};
    sh->fn(sh->ctx, i, rec ? &found : NULL);
    return 0;
}

/* Show many records as found. */
rk_store_rc rk_store_scan_many(struct rk_store *st, const char *const *ids, size_t n,
                               rk_store_scan_each_fn *fn, void *ctx, char *err, size_t errlen)
{
    if (st && fn && st->ops->scan_many) {
        err_reset(err, errlen);
        if (n > 0 && !ids)
            return invalid(st, "argument", err, errlen);
        for (size_t i = 0; i < n; i++)
            if (!name_ok(ids[i]))
                return invalid(st, "sandbox id", err, errlen);
        return n ? counted(st, st->ops->scan_many(st, ids, n, fn, ctx, err, errlen)) : RK_STORE_OK;
    }
    struct scan_shim sh = {fn, ctx};
    return rk_store_view_many(st, ids, n, fn ? scan_shim : NULL, &sh, NULL, err, errlen);
}

/* Read-modify-write one record. */
rk_store_rc rk_store_update(struct rk_store *st, const char *id, rk_store_update_fn fn, void *ctx,
                            json_object **out, char *err, size_t errlen)
{
    err_reset(err, errlen);
    if (out)
        *out = NULL;
    rk_store_rc rc = check(st, fn != NULL, err, errlen, "sandbox id", id, NULL);
    if (rc != RK_STORE_OK)
        return rc;
    return counted(st, st->ops->update(st, id, fn, ctx, out, err, errlen));
}

/* A check and an update as one rk_store_update_fn (stores without update_many). */
struct checked_update {
    rk_store_check_fn check;
    rk_store_update_fn fn;
    void *ctx;
};

static int checked_update(json_object *rec, void *arg)
{
    const struct checked_update *cu = arg;
    struct rk_store_found found = {.rec = rec};
    if (cu->check(&found, cu->ctx) == 1)
        return 1;
    return cu->fn(rec, cu->ctx);
}

/* Read-modify-write several records. */
rk_store_rc rk_store_update_many(struct rk_store *st, const char *const *ids, size_t n,
                                 rk_store_check_fn look, rk_store_update_fn fn, void *const *ctxs,
                                 rk_store_rc *rcs, char *err, size_t errlen)
{
    err_reset(err, errlen);
    rk_store_rc rc = check(st, fn != NULL && (n == 0 || (ids && ctxs && rcs)), err, errlen, NULL);
    for (size_t i = 0; rc == RK_STORE_OK && i < n; i++)
        rc = check(st, true, err, errlen, "sandbox id", ids[i], NULL);
    if (rc != RK_STORE_OK) {
        for (size_t i = 0; rcs && i < n; i++)
            rcs[i] = rc;
        return rc;
    }
    if (n == 0)
        return RK_STORE_OK;
    if (!st->ops->update_many) {
        for (size_t i = 0; i < n; i++) {
            struct checked_update cu = {look, fn, ctxs[i]};
            rcs[i] = look ? rk_store_update(st, ids[i], checked_update, &cu, NULL, err, errlen)
                          : rk_store_update(st, ids[i], fn, ctxs[i], NULL, err, errlen);
        }
        return RK_STORE_OK;
    }
    return counted(st, st->ops->update_many(st, ids, n, look, fn, ctxs, rcs, err, errlen));
}

/* List active ids. */
rk_store_rc rk_store_list_active(struct rk_store *st, char ***ids_out, size_t *n_out, char *err,
                                 size_t errlen)
{
    err_reset(err, errlen);
    if (ids_out)
        *ids_out = NULL;
    if (n_out)
        *n_out = 0;
    if (!st || !ids_out || !n_out)
        return invalid(st, "argument", err, errlen);
    return counted(st, st->ops->list_active(st, ids_out, n_out, err, errlen));
}

/* Ids of records that carry a background job. */
rk_store_rc rk_store_list_jobs(struct rk_store *st, char ***ids_out, size_t *n_out, char *err,
                               size_t errlen)
{
    err_reset(err, errlen);
    if (ids_out)
        *ids_out = NULL;
    if (n_out)
        *n_out = 0;
    if (!st || !ids_out || !n_out)
        return invalid(st, "argument", err, errlen);
    return counted(st, st->ops->list_jobs(st, ids_out, n_out, err, errlen));
}

/* A page of active ids in list order. */
rk_store_rc rk_store_list_page(struct rk_store *st, size_t offset, size_t limit, char ***ids_out,
                               size_t *n_out, size_t *total_out, char *err, size_t errlen)
{
    err_reset(err, errlen);
    if (ids_out)
        *ids_out = NULL;
    if (n_out)
        *n_out = 0;
    if (total_out)
        *total_out = 0;
    if (!st || !ids_out || !n_out || !total_out)
        return invalid(st, "argument", err, errlen);
    return counted(st,
                   st->ops->list_page(st, offset, limit, ids_out, n_out, total_out, err, errlen));
}

/* Active records per state. */
rk_store_rc rk_store_count_states(struct rk_store *st, size_t *pending_out, size_t *running_out,
                                  char *err, size_t errlen)
{
    err_reset(err, errlen);
    if (pending_out)
        *pending_out = 0;
    if (running_out)
        *running_out = 0;
    if (!st || !pending_out || !running_out)
        return invalid(st, "argument", err, errlen);
    return counted(st, st->ops->count_states(st, pending_out, running_out, err, errlen));
}

/* Set the idle deadline of an active sandbox. */
rk_store_rc rk_store_touch(struct rk_store *st, const char *id, int64_t expire_time, char *err,
                           size_t errlen)
{
    err_reset(err, errlen);
    rk_store_rc rc = check(st, true, err, errlen, "sandbox id", id, NULL);
    if (rc != RK_STORE_OK)
        return rc;
    return counted(st, st->ops->touch(st, id, expire_time, err, errlen));
}

/* Active ids whose idle deadline has passed. */
rk_store_rc rk_store_expired(struct rk_store *st, int64_t now, size_t max, char ***ids_out,
                             size_t *n_out, char *err, size_t errlen)
{
    err_reset(err, errlen);
    if (ids_out)
        *ids_out = NULL;
    if (n_out)
        *n_out = 0;
    if (!st || !ids_out || !n_out)
        return invalid(st, "argument", err, errlen);
    if (max == 0)
        return RK_STORE_OK;
    return counted(st, st->ops->expired(st, now, max, ids_out, n_out, err, errlen));
}

/* Take a named claim. */
rk_store_rc rk_store_claim(struct rk_store *st, const char *name, int ttl_s, char *err,
                           size_t errlen)
{
    err_reset(err, errlen);
    rk_store_rc rc = check(st, true, err, errlen, "claim name", name, NULL);
    if (rc != RK_STORE_OK)
        return rc;
    return counted(st, st->ops->claim(st, name, ttl_s < 1 ? 1 : ttl_s, err, errlen));
}

/* Reserve a session name and hand out a fresh token. */
rk_store_rc rk_session_reserve(struct rk_store *st, const char *sandbox_id, const char *name,
                               int ttl_s, char *token_out, char *err, size_t errlen)
{
    err_reset(err, errlen);
    if (token_out)
        token_out[0] = '\0';
    rk_store_rc rc = check(st, token_out && ttl_s >= 0, err, errlen, "sandbox id", sandbox_id,
                           "session name", name, NULL);
    if (rc != RK_STORE_OK)
        return rc;
    char token[RK_STORE_TOKEN_HEX + 1];
    if (rk_store_new_token(token) != 0)
        return counted(st, rk_store_fail(err, errlen, "store: no random bytes for a token"));
    rc = counted(st, st->ops->reserve(st, sandbox_id, name, ttl_s, token, err, errlen));
    if (rc == RK_STORE_OK)
        memcpy(token_out, token, sizeof token);
    return rc;
}

/* Check the arguments shared by commit and rollback. */
static rk_store_rc check_owner_args(struct rk_store *st, const char *sandbox_id, const char *name,
                                    const char *token, char *err, size_t errlen)
{
    rk_store_rc rc =
        check(st, true, err, errlen, "sandbox id", sandbox_id, "session name", name, NULL);
    if (rc == RK_STORE_OK && (!name_ok(token) || strchr(token, ':')))
        rc = invalid(st, "reservation token", err, errlen);
    return rc;
}

/* Turn our reservation into a committed mapping. */
rk_store_rc rk_session_commit(struct rk_store *st, const char *sandbox_id, const char *name,
                              const char *token, const char *session_id, char *err, size_t errlen)
{
    err_reset(err, errlen);
    rk_store_rc rc = check_owner_args(st, sandbox_id, name, token, err, errlen);
    if (rc == RK_STORE_OK)
        rc = check(st, true, err, errlen, "session id", session_id, NULL);
    if (rc != RK_STORE_OK)
        return rc;
    return counted(st, st->ops->commit(st, sandbox_id, name, token, session_id, err, errlen));
}

/* Drop our reservation. */
rk_store_rc rk_session_rollback(struct rk_store *st, const char *sandbox_id, const char *name,
                                const char *token, char *err, size_t errlen)
{
    err_reset(err, errlen);
    rk_store_rc rc = check_owner_args(st, sandbox_id, name, token, err, errlen);
    if (rc != RK_STORE_OK)
        return rc;
    return counted(st, st->ops->rollback(st, sandbox_id, name, token, err, errlen));
}

/* Look up a committed mapping. */
rk_store_rc rk_session_get(struct rk_store *st, const char *sandbox_id, const char *name,
                           char **session_id_out, char *err, size_t errlen)
{
    err_reset(err, errlen);
    if (session_id_out)
        *session_id_out = NULL;
    rk_store_rc rc = check(st, session_id_out != NULL, err, errlen, "sandbox id", sandbox_id,
                           "session name", name, NULL);
    if (rc != RK_STORE_OK)
        return rc;
    return counted(st, st->ops->session_get(st, sandbox_id, name, session_id_out, err, errlen));
}

/* Remove a mapping that still points at the expected session id. */
rk_store_rc rk_session_remove(struct rk_store *st, const char *sandbox_id, const char *name,
                              const char *expected_session_id, char *err, size_t errlen)
{
    err_reset(err, errlen);
    rk_store_rc rc = check(st, true, err, errlen, "sandbox id", sandbox_id, "session name", name,
                           "session id", expected_session_id, NULL);
    if (rc != RK_STORE_OK)
        return rc;
    return counted(st,
                   st->ops->session_remove(st, sandbox_id, name, expected_session_id, err, errlen));
}

/* Remove every mapping of a sandbox. */
rk_store_rc rk_session_clear(struct rk_store *st, const char *sandbox_id, char *err, size_t errlen)
{
    err_reset(err, errlen);
    rk_store_rc rc = check(st, true, err, errlen, "sandbox id", sandbox_id, NULL);
    if (rc != RK_STORE_OK)
        return rc;
    return counted(st, st->ops->session_clear(st, sandbox_id, err, errlen));
}

/* Remove every mapping of a sandbox and hand back the committed session ids. */
rk_store_rc rk_session_take_all(struct rk_store *st, const char *sandbox_id, char ***ids_out,
                                size_t *n_out, char *err, size_t errlen)
{
    err_reset(err, errlen);
    if (ids_out)
        *ids_out = NULL;
    if (n_out)
        *n_out = 0;
    rk_store_rc rc =
        check(st, ids_out != NULL && n_out != NULL, err, errlen, "sandbox id", sandbox_id, NULL);
    if (rc != RK_STORE_OK)
        return rc;
    return counted(st, st->ops->session_take_all(st, sandbox_id, ids_out, n_out, err, errlen));
}

/* Count the mappings of a sandbox. */
rk_store_rc rk_session_count(struct rk_store *st, const char *sandbox_id, size_t *n_out, char *err,
                             size_t errlen)
{
    err_reset(err, errlen);
    if (n_out)
        *n_out = 0;
    rk_store_rc rc = check(st, n_out != NULL, err, errlen, "sandbox id", sandbox_id, NULL);
    if (rc != RK_STORE_OK)
        return rc;
    return counted(st, st->ops->session_count(st, sandbox_id, n_out, err, errlen));
}

/* Errors counted since the store was opened. */
uint64_t rk_store_error_count(const struct rk_store *st)
{
    return st ? (uint64_t)atomic_load(&((struct rk_store *)st)->errors) : 0;
}

/* Fetch a record and refresh its idle deadline (throttled) in one round trip. */
rk_store_rc rk_store_get_touch(struct rk_store *st, const char *id, int64_t now_s,
                               json_object **out, char *mark, size_t marklen, char *err,
                               size_t errlen)
{
    err_reset(err, errlen);
    err_reset(mark, marklen);
    if (out)
        *out = NULL;
    rk_store_rc rc = check(st, out != NULL, err, errlen, "sandbox id", id, NULL);
    if (rc != RK_STORE_OK)
        return rc;
    return counted(st, st->ops->get_touch(st, id, now_s, out, mark, marklen, err, errlen));
}

/* View a record in place (in-process store) with the same touch as rk_store_get_touch. */
int rk_store_view_touch(struct rk_store *st, const char *id, int64_t now_s, rk_store_view_fn *fn,
                        void *ctx)
{
    if (!st || !st->ops->view_touch || !fn || !name_ok(id))
        return -1;
    call_start_ns = rk_mono_ns();
    st->ops->view_touch(st, id, now_s, fn, ctx);
    counted_call(st, "get_touch", RK_STORE_OK);
    return 0;
}

int rk_store_reads_block(const struct rk_store *st)
{
    return st->shared;
}

struct rk_store_reader *rk_store_reader_new(struct rk_store *st)
{
    return st->ops->reader_new ? st->ops->reader_new(st) : NULL;
}

/* Store the reconciler's mark. */
rk_store_rc rk_store_set_mark(struct rk_store *st, const char *value, char *err, size_t errlen)
{
    err_reset(err, errlen);
    if (!st || !value)
        return invalid(st, "argument", err, errlen);
    return counted(st, st->ops->set_mark(st, value, err, errlen));
}

/* Take or renew a named lease. */
rk_store_rc rk_store_lease(struct rk_store *st, const char *name, const char *owner, int ttl_ms,
                           char *err, size_t errlen)
{
    err_reset(err, errlen);
    rk_store_rc rc = check(st, owner && *owner, err, errlen, "lease name", name, NULL);
    if (rc != RK_STORE_OK)
        return rc;
    return counted(st, st->ops->lease(st, name, owner, ttl_ms, err, errlen));
}

/* ---- the create queue ---- */

/* An owner name the queue can store. */
static bool owner_ok(const char *owner)
{
    return !owner || strnlen(owner, RK_CREATEQ_OWNER_MAX + 1) <= RK_CREATEQ_OWNER_MAX;
}

/* Queue one create. */
rk_store_rc rk_createq_push(struct rk_store *st, const char *id, const char *owner, int64_t now_ms,
                            long long max, char *err, size_t errlen)
{
    err_reset(err, errlen);
    rk_store_rc rc =
        check(st, max > 0 && owner_ok(owner), err, errlen, "sandbox id", id, "owner", owner, NULL);
    if (rc != RK_STORE_OK)
        return rc;
    return counted(st, st->ops->cq_push(st, id, owner, now_ms, max, err, errlen));
}

/* A new record and its queued create, in one step. */
rk_store_rc rk_createq_create(struct rk_store *st, const char *id, json_object *rec,
                              int64_t expire_time, const char *owner, int64_t now_ms, long long max,
                              char *err, size_t errlen)
{
    err_reset(err, errlen);
    if (!st || !json_object_is_type(rec, json_type_object))
        return invalid(st, "record", err, errlen);
    rk_store_rc rc =
        check(st, max > 0 && owner_ok(owner), err, errlen, "sandbox id", id, "owner", owner, NULL);
    if (rc != RK_STORE_OK)
        return rc;
    return counted(st,
                   st->ops->cq_create(st, id, rec, expire_time, owner, now_ms, max, err, errlen));
}

/* Claim the oldest eligible creates. */
rk_store_rc rk_createq_claim(struct rk_store *st, const struct rk_createq_claim *c,
                             struct rk_createq_item **items_out, size_t *n_out,
                             size_t *requeued_out, char *err, size_t errlen)
{
    err_reset(err, errlen);
    if (items_out)
        *items_out = NULL;
    if (n_out)
        *n_out = 0;
    if (requeued_out)
        *requeued_out = 0;
    rk_store_rc rc = check(st,
                           c && items_out && n_out && c->lease_ms > 0 && owner_ok(c->owner) &&
                               (c->done || !c->n_done),
                           err, errlen, "owner", c ? c->owner : NULL, NULL);
    for (size_t i = 0; rc == RK_STORE_OK && i < c->n_done; i++)
        rc = check(st, true, err, errlen, "sandbox id", c->done[i], NULL);
    if (rc != RK_STORE_OK)
        return rc;
    return counted(st, st->ops->cq_claim(st, c, items_out, n_out, requeued_out, err, errlen));
}

/* Renew every claim of owner. */
rk_store_rc rk_createq_renew(struct rk_store *st, const char *owner, int64_t deadline_ms,
                             size_t *n_out, char *err, size_t errlen)
{
    err_reset(err, errlen);
    if (n_out)
        *n_out = 0;
    rk_store_rc rc = check(st, owner_ok(owner), err, errlen, "owner", owner, NULL);
    if (rc != RK_STORE_OK)
        return rc;
    return counted(st, st->ops->cq_renew(st, owner, deadline_ms, n_out, err, errlen));
}

/* Drop a finished claim. */
rk_store_rc rk_createq_done(struct rk_store *st, const char *id, const char *owner, char *err,
                            size_t errlen)
{
    err_reset(err, errlen);
    rk_store_rc rc =
        check(st, owner_ok(owner), err, errlen, "sandbox id", id, "owner", owner, NULL);
    if (rc != RK_STORE_OK)
        return rc;
    return counted(st, st->ops->cq_done(st, id, owner, err, errlen));
}

/* Give an unstarted claim back to the queue. */
rk_store_rc rk_createq_release(struct rk_store *st, const char *id, const char *owner, char *err,
                               size_t errlen)
{
    err_reset(err, errlen);
    rk_store_rc rc =
        check(st, owner_ok(owner), err, errlen, "sandbox id", id, "owner", owner, NULL);
    if (rc != RK_STORE_OK)
        return rc;
    return counted(st, st->ops->cq_release(st, id, owner, err, errlen));
}

/* Take a still-queued create out of the queue. */
rk_store_rc rk_createq_cancel(struct rk_store *st, const char *id, char *err, size_t errlen)
{
    err_reset(err, errlen);
    rk_store_rc rc = check(st, true, err, errlen, "sandbox id", id, NULL);
    if (rc != RK_STORE_OK)
        return rc;
    return counted(st, st->ops->cq_cancel(st, id, err, errlen));
}

/* Where a create is. */
rk_store_rc rk_createq_where(struct rk_store *st, const char *id, int *where_out, char *err,
                             size_t errlen)
{
    err_reset(err, errlen);
    if (where_out)
        *where_out = 0;
    rk_store_rc rc = check(st, where_out != NULL, err, errlen, "sandbox id", id, NULL);
    if (rc != RK_STORE_OK)
        return rc;
    return counted(st, st->ops->cq_where(st, id, where_out, err, errlen));
}

/* Queue sizes. */
rk_store_rc rk_createq_depth(struct rk_store *st, size_t *queued_out, size_t *claimed_out,
                             char *err, size_t errlen)
{
    err_reset(err, errlen);
    if (queued_out)
        *queued_out = 0;
    if (claimed_out)
        *claimed_out = 0;
    if (!st || !queued_out || !claimed_out)
        return invalid(st, "argument", err, errlen);
    return counted(st, st->ops->cq_depth(st, queued_out, claimed_out, err, errlen));
}

/* Free claimed items. */
void rk_createq_free_items(struct rk_createq_item *items, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(items[i].id);
        json_object_put(items[i].rec);
    }
    free(items);
}
