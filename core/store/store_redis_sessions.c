/* SPDX-License-Identifier: Apache-2.0 */
/* Redis store: the session-name registry, one hash per sandbox (name -> "s:<session id>"
 * or "r:<token>:<deadline ms>"). Owns reserving a name (Redis TIME is the clock),
 * committing or rolling back the reservation, and reading, removing, clearing and counting
 * the mappings; an unconfirmed write (WAIT) is taken back so a retry is not refused. */
#include "store/store_redis_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Reserve a session name (Lua; Redis TIME is the clock). */
rk_store_rc rkr_reserve(struct rk_store *st, const char *sandbox_id, const char *name, int ttl_s,
                        const char *token, char *err, size_t errlen)
{
    struct redis_store *rs = rkr_store(st);
    char k[KEY_MAX], ttl[32];
    snprintf(ttl, sizeof ttl, "%lld", (long long)ttl_s * 1000);
    struct cmd c;
    rkr_cmd_build(&c, "EVAL", rkr_lua_reserve, "1", rkr_key_of(rs, k, "sessions:", sandbox_id),
                  name, token, ttl, (const char *)NULL);
    long long v = 0;
    rk_store_rc rc = rkr_run_write_int(rs, &c, &v, err, errlen);
    if (rc == RK_STORE_ERROR && v == 1) {
        /* Reserved but not confirmed: release it (best effort) so a retry of
         * the same name is not refused as taken. */
        char scratch[RK_STORE_ERRLEN];
        long long undone = 0;
        rkr_cmd_build(&c, "EVAL", rkr_lua_commit, "1", k, name, token, "", (const char *)NULL);
        rkr_run_int(rs, &c, &undone, scratch, sizeof scratch);
    }
    if (rc != RK_STORE_OK)
        return rc;
    return v == 1 ? RK_STORE_OK : RK_STORE_EXISTS;
}

/* Commit (value non-empty) or roll back (value "") our reservation. */
static rk_store_rc finish_reservation(struct redis_store *rs, const char *sandbox_id,
                                      const char *name, const char *token, const char *value,
                                      char *err, size_t errlen)
{
    char k[KEY_MAX];
    struct cmd c;
    rkr_cmd_build(&c, "EVAL", rkr_lua_commit, "1", rkr_key_of(rs, k, "sessions:", sandbox_id), name,
                  token, value, (const char *)NULL);
    long long v = 0;
    rk_store_rc rc = rkr_run_write_int(rs, &c, &v, err, errlen);
    if (rc == RK_STORE_ERROR && v == 1 && value[0]) {
        /* Committed but not confirmed: the caller closes the backend session
         * and rolls back, so make the mapping our (expired) reservation again. */
        char scratch[RK_STORE_ERRLEN];
        long long undone = 0;
        rkr_cmd_build(&c, "EVAL", rkr_lua_uncommit, "1", k, name, value, token, (const char *)NULL);
        rkr_run_int(rs, &c, &undone, scratch, sizeof scratch);
    }
    if (rc != RK_STORE_OK)
        return rc;
    return v == 1 ? RK_STORE_OK : RK_STORE_CONFLICT;
}

/* Replace our reservation with "s:<session id>". */
rk_store_rc rkr_commit(struct rk_store *st, const char *sandbox_id, const char *name,
                       const char *token, const char *session_id, char *err, size_t errlen)
{
    char *value = rk_store_session_value(session_id);
    if (!value)
        return rk_store_fail(err, errlen, "store: out of memory");
    rk_store_rc rc = finish_reservation(rkr_store(st), sandbox_id, name, token, value, err, errlen);
    free(value);
    return rc;
}

/* Delete our reservation. */
rk_store_rc rkr_rollback(struct rk_store *st, const char *sandbox_id, const char *name,
                         const char *token, char *err, size_t errlen)
{
    return finish_reservation(rkr_store(st), sandbox_id, name, token, "", err, errlen);
}

/* HGET and accept only committed mappings. */
rk_store_rc rkr_session_get(struct rk_store *st, const char *sandbox_id, const char *name,
                            char **session_id_out, char *err, size_t errlen)
{
    struct redis_store *rs = rkr_store(st);
    char k[KEY_MAX];
    struct cmd c;
    redisReply *r = NULL;
    rkr_cmd_build(&c, "HGET", rkr_key_of(rs, k, "sessions:", sandbox_id), name, (const char *)NULL);
    rk_store_rc rc = rkr_run(rs, &c, &r, err, errlen);
    if (rc != RK_STORE_OK)
        return rc;
    rc = RK_STORE_NOT_FOUND;
    if (r->type == REDIS_REPLY_STRING && r->len > 2 && strncmp(r->str, "s:", 2) == 0) {
        *session_id_out = strndup(r->str + 2, r->len - 2);
        rc = *session_id_out ? RK_STORE_OK : rk_store_fail(err, errlen, "store: out of memory");
    }
    freeReplyObject(r);
    return rc;
}

/* Delete the mapping only if it equals "s:<expected>" (Lua). */
rk_store_rc rkr_session_remove(struct rk_store *st, const char *sandbox_id, const char *name,
                               const char *expected, char *err, size_t errlen)
{
    struct redis_store *rs = rkr_store(st);
    char *value = rk_store_session_value(expected);
    if (!value)
        return rk_store_fail(err, errlen, "store: out of memory");
    char k[KEY_MAX];
    struct cmd c;
    rkr_cmd_build(&c, "EVAL", rkr_lua_remove, "1", rkr_key_of(rs, k, "sessions:", sandbox_id), name,
                  value, (const char *)NULL);
    long long v = 0;
    rk_store_rc rc = rkr_run_write_int(rs, &c, &v, err, errlen);
    free(value);
    if (rc != RK_STORE_OK)
        return rc;
    return v == 1 ? RK_STORE_OK : v == 0 ? RK_STORE_CONFLICT : RK_STORE_NOT_FOUND;
}

/* DEL the sandbox's session hash. */
rk_store_rc rkr_session_clear(struct rk_store *st, const char *sandbox_id, char *err, size_t errlen)
{
    struct redis_store *rs = rkr_store(st);
    char k[KEY_MAX];
    struct cmd c;
    rkr_cmd_build(&c, "DEL", rkr_key_of(rs, k, "sessions:", sandbox_id), (const char *)NULL);
    long long v = 0;
    return rkr_run_write_int(rs, &c, &v, err, errlen);
}

/* Take the sandbox's session hash (values and DEL in one Lua step); keep the "s:" ones. */
rk_store_rc rkr_session_take_all(struct rk_store *st, const char *sandbox_id, char ***ids_out,
                                 size_t *n_out, char *err, size_t errlen)
{
    struct redis_store *rs = rkr_store(st);
    char k[KEY_MAX];
    struct cmd c;
    redisReply *r = NULL;
    rkr_cmd_build(&c, "EVAL", rkr_lua_take_all, "1", rkr_key_of(rs, k, "sessions:", sandbox_id),
                  (const char *)NULL);
    rk_store_rc rc = rkr_run(rs, &c, &r, err, errlen);
    if (rc != RK_STORE_OK)
        return rc;
    if (r->type != REDIS_REPLY_ARRAY) {
        rc = rk_store_fail(err, errlen, "redis error: unexpected reply type %d", r->type);
        freeReplyObject(r);
        return rc;
    }
    size_t cap = r->elements < RK_SESSION_TAKE_MAX ? r->elements : RK_SESSION_TAKE_MAX;
    char **ids = calloc(cap ? cap : 1, sizeof *ids);
    size_t n = 0;
    if (!ids)
        rc = rk_store_fail(err, errlen, "store: out of memory");
    for (size_t i = 0; ids && i < r->elements && n < cap; i++) {
        const redisReply *e = r->element[i];
        if (e->type == REDIS_REPLY_STRING && e->len > 2 && strncmp(e->str, "s:", 2) == 0 &&
            (ids[n] = strndup(e->str + 2, e->len - 2)))
            n++;
    }
    freeReplyObject(r);
    *ids_out = ids;
    *n_out = n;
    return rc;
}

/* HLEN of the sandbox's session hash. */
rk_store_rc rkr_session_count(struct rk_store *st, const char *sandbox_id, size_t *n_out, char *err,
                              size_t errlen)
{
    struct redis_store *rs = rkr_store(st);
    char k[KEY_MAX];
    struct cmd c;
    rkr_cmd_build(&c, "HLEN", rkr_key_of(rs, k, "sessions:", sandbox_id), (const char *)NULL);
    long long v = 0;
    rk_store_rc rc = rkr_run_int(rs, &c, &v, err, errlen);
    if (rc == RK_STORE_OK)
        *n_out = v > 0 ? (size_t)v : 0;
    return rc;
}
