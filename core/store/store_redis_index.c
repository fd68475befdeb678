/* SPDX-License-Identifier: Apache-2.0 */
/* Redis store: indexes and lists. Owns the active set and the idle-deadline sorted set as
 * lists (list_active, expired), the list order index bycreated and the per-state sets:
 * their upkeep in an update's MULTI block, their one-time rebuild for data written before
 * them (index:v2), list pages and the per-state counts. */
#include "store/store_redis_internal.h"
#include "base/util.h"
#include "obs/log.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Append the index maintenance of one record's write to a MULTI block:
 * active -> in bycreated under new_key (old_key dropped when it changed) and
 * in the set of its state; inactive -> out of both. */
void rkr_index_cmds(const struct redis_store *rs, struct index_keys *k, struct cmd *wr, int *nw,
                    const char *id, bool active, bool pending, const char *old_key,
                    const char *new_key)
{
    rkr_key_of(rs, k->bycreated, "bycreated", NULL);
    rkr_key_of(rs, k->pending, "state:pending", NULL);
    rkr_key_of(rs, k->running, "state:running", NULL);
    if (active) {
        rkr_cmd_build(&wr[(*nw)++], "ZADD", k->bycreated, "0", new_key, (const char *)NULL);
        if (strcmp(old_key, new_key) != 0)
            rkr_cmd_build(&wr[(*nw)++], "ZREM", k->bycreated, old_key, (const char *)NULL);
        rkr_cmd_build(&wr[(*nw)++], "SADD", pending ? k->pending : k->running, id,
                      (const char *)NULL);
        rkr_cmd_build(&wr[(*nw)++], "SREM", pending ? k->running : k->pending, id,
                      (const char *)NULL);
    } else {
        rkr_cmd_build(&wr[(*nw)++], "ZREM", k->bycreated, old_key, new_key, (const char *)NULL);
        rkr_cmd_build(&wr[(*nw)++], "SREM", k->pending, id, (const char *)NULL);
        rkr_cmd_build(&wr[(*nw)++], "SREM", k->running, id, (const char *)NULL);
    }
}

/* Run a command whose reply is an array of ids and copy them into a malloc'd list. */
static rk_store_rc run_ids(struct redis_store *rs, const struct cmd *c, char ***ids_out,
                           size_t *n_out, char *err, size_t errlen)
{
    redisReply *r = NULL;
    rk_store_rc rc = rkr_run(rs, c, &r, err, errlen);
    if (rc == RK_STORE_OK)
        rc = rkr_ids_from_array(r, ids_out, n_out, err, errlen);
    if (r)
        freeReplyObject(r);
    return rc;
}

/* SMEMBERS of the active set. */
rk_store_rc rkr_list_active(struct rk_store *st, char ***ids_out, size_t *n_out, char *err,
                            size_t errlen)
{
    struct redis_store *rs = rkr_store(st);
    char k[KEY_MAX];
    struct cmd c;
    rkr_cmd_build(&c, "SMEMBERS", rkr_key_of(rs, k, "active", NULL), (const char *)NULL);
    return run_ids(rs, &c, ids_out, n_out, err, errlen);
}

/* SMEMBERS of the job set (records with a job lease, kept by rkr_update). */
rk_store_rc rkr_list_jobs(struct rk_store *st, char ***ids_out, size_t *n_out, char *err,
                          size_t errlen)
{
    struct redis_store *rs = rkr_store(st);
    char k[KEY_MAX];
    struct cmd c;
    rkr_cmd_build(&c, "SMEMBERS", rkr_key_of(rs, k, "jobs", NULL), (const char *)NULL);
    return run_ids(rs, &c, ids_out, n_out, err, errlen);
}

/* ZRANGEBYSCORE expire -inf now LIMIT 0 max. */
rk_store_rc rkr_expired(struct rk_store *st, int64_t now, size_t max, char ***ids_out,
                        size_t *n_out, char *err, size_t errlen)
{
    struct redis_store *rs = rkr_store(st);
    char k[KEY_MAX], nowbuf[32], maxbuf[32];
    snprintf(nowbuf, sizeof nowbuf, "%lld", (long long)now);
    snprintf(maxbuf, sizeof maxbuf, "%zu", max > (size_t)INT32_MAX ? (size_t)INT32_MAX : max);
    struct cmd c;
    rkr_cmd_build(&c, "ZRANGEBYSCORE", rkr_key_of(rs, k, "expire", NULL), "-inf", nowbuf, "LIMIT",
                  "0", maxbuf, (const char *)NULL);
    return run_ids(rs, &c, ids_out, n_out, err, errlen);
}

/* Make sure bycreated and the per-state sets cover data written before they
 * existed: when the marker index:v2 is missing (checked at most once a
 * minute), index every id of the active set, GET_CHUNK ids per script call,
 * then set the marker. Deleting the marker makes a running fleet re-index
 * (e.g. after a rolling upgrade from a version without these indexes). */
static rk_store_rc ensure_index(struct redis_store *rs, char *err, size_t errlen)
{
    pthread_mutex_lock(&rs->mu);
    bool ready = rs->index_seen_ms > 0 && rk_now_ms() - rs->index_seen_ms < INDEX_RECHECK_MS;
    pthread_mutex_unlock(&rs->mu);
    if (ready)
        return RK_STORE_OK;
    char mkey[KEY_MAX];
    struct cmd c;
    redisReply *r = NULL;
    rkr_cmd_build(&c, "EXISTS", rkr_key_of(rs, mkey, "index:v2", NULL), (const char *)NULL);
    long long have = 0;
    rk_store_rc rc = rkr_run_int(rs, &c, &have, err, errlen);
    if (rc != RK_STORE_OK)
        return rc;
    if (!have) {
        char **ids = NULL;
        size_t n = 0;
        rc = rkr_list_active(&rs->base, &ids, &n, err, errlen);
        if (rc != RK_STORE_OK)
            return rc;
        const char **argv = malloc((GET_CHUNK + 4) * sizeof *argv);
        size_t *lens = malloc((GET_CHUNK + 4) * sizeof *lens);
        if (!argv || !lens)
            rc = rk_store_fail(err, errlen, "store: out of memory");
        for (size_t off = 0; rc == RK_STORE_OK && off < n; off += GET_CHUNK) {
            size_t m = n - off < GET_CHUNK ? n - off : GET_CHUNK, k = 0;
            argv[k++] = "EVAL";
            argv[k++] = rkr_lua_reindex;
            argv[k++] = "0";
            argv[k++] = rs->prefix;
            for (size_t i = 0; i < m; i++)
                argv[k++] = ids[off + i];
            for (size_t i = 0; i < k; i++)
                lens[i] = strlen(argv[i]);
            struct rop op;
            rc = rkr_op_begin(rs, &op, err, errlen);
            if (rc != RK_STORE_OK)
                break;
            redisReply *rr = NULL;
            if (redisAppendCommandArgv(op.c, (int)k, argv, lens) != REDIS_OK ||
                rkr_get_reply(op.c, (void **)&rr) != REDIS_OK || !rr)
                rc = rkr_io_fail(&op, err, errlen);
            else if (rr->type == REDIS_REPLY_ERROR)
                rc = rkr_reply_fail(rr, err, errlen);
            if (rr)
                freeReplyObject(rr);
            rkr_op_end(&op);
        }
        free(argv);
        free(lens);
        rk_store_free_ids(ids, n);
        if (rc != RK_STORE_OK)
            return rc;
        rkr_cmd_build(&c, "SET", mkey, "1", (const char *)NULL);
        rc = rkr_run(rs, &c, &r, err, errlen);
        if (rc != RK_STORE_OK)
            return rc;
        freeReplyObject(r);
        rk_info("store: indexed %zu active sandbox record(s) for list pages and state counts", n);
    }
    pthread_mutex_lock(&rs->mu);
    rs->index_seen_ms = rk_now_ms();
    pthread_mutex_unlock(&rs->mu);
    return RK_STORE_OK;
}

/* ZCARD + ZRANGE of bycreated in one round trip; ids are the part after \x01. */
rk_store_rc rkr_list_page(struct rk_store *st, size_t offset, size_t limit, char ***ids_out,
                          size_t *n_out, size_t *total_out, char *err, size_t errlen)
{
    struct redis_store *rs = rkr_store(st);
    rk_store_rc rc = ensure_index(rs, err, errlen);
    if (rc != RK_STORE_OK)
        return rc;
    char k[KEY_MAX], from[32], to[32];
    rkr_key_of(rs, k, "bycreated", NULL);
    if (limit == 0 || offset > (size_t)INT64_MAX - limit)
        limit = 0;
    snprintf(from, sizeof from, "%zu", offset);
    snprintf(to, sizeof to, "%zu", limit ? offset + limit - 1 : offset);
    struct cmd cmds[2];
    redisReply *r[2];
    rkr_cmd_build(&cmds[0], "ZCARD", k, (const char *)NULL);
    rkr_cmd_build(&cmds[1], "ZRANGE", k, from, to, (const char *)NULL);
    rc = rkr_run_pipeline(rs, cmds, 2, r, err, errlen);
    if (rc != RK_STORE_OK)
        return rc;
    if (r[0]->type != REDIS_REPLY_INTEGER || r[1]->type != REDIS_REPLY_ARRAY) {
        rc = r[0]->type == REDIS_REPLY_ERROR   ? rkr_reply_fail(r[0], err, errlen)
             : r[1]->type == REDIS_REPLY_ERROR ? rkr_reply_fail(r[1], err, errlen)
                                               : rk_store_fail(err, errlen,
                                                               "redis error: "
                                                               "unexpected reply");
    } else {
        *total_out = r[0]->integer > 0 ? (size_t)r[0]->integer : 0;
        size_t n = limit ? r[1]->elements : 0, got = 0;
        char **ids = calloc(n ? n : 1, sizeof *ids);
        bool oom = !ids;
        for (size_t i = 0; !oom && i < n; i++) {
            const redisReply *e = r[1]->element[i];
            const char *sep = e->type == REDIS_REPLY_STRING ? memchr(e->str, 1, e->len) : NULL;
            if (!sep)
                continue; /* not written by us: skip */
            ids[got] = strndup(sep + 1, e->len - (size_t)(sep + 1 - e->str));
            oom = !ids[got];
            got += !oom;
        }
        if (oom) {
            rk_store_free_ids(ids, got);
            rc = rk_store_fail(err, errlen, "store: out of memory");
        } else {
            *ids_out = ids;
            *n_out = got;
        }
    }
    freeReplyObject(r[0]);
    freeReplyObject(r[1]);
    return rc;
}

/* SCARD of the two per-state sets in one round trip. */
rk_store_rc rkr_count_states(struct rk_store *st, size_t *pending_out, size_t *running_out,
                             char *err, size_t errlen)
{
    struct redis_store *rs = rkr_store(st);
    rk_store_rc rc = ensure_index(rs, err, errlen);
    if (rc != RK_STORE_OK)
        return rc;
    char kp[KEY_MAX], kr[KEY_MAX];
    struct cmd cmds[2];
    redisReply *r[2];
    rkr_cmd_build(&cmds[0], "SCARD", rkr_key_of(rs, kp, "state:pending", NULL), (const char *)NULL);
    rkr_cmd_build(&cmds[1], "SCARD", rkr_key_of(rs, kr, "state:running", NULL), (const char *)NULL);
    rc = rkr_run_pipeline(rs, cmds, 2, r, err, errlen);
    if (rc != RK_STORE_OK)
        return rc;
    if (r[0]->type == REDIS_REPLY_INTEGER && r[1]->type == REDIS_REPLY_INTEGER) {
        *pending_out = r[0]->integer > 0 ? (size_t)r[0]->integer : 0;
        *running_out = r[1]->integer > 0 ? (size_t)r[1]->integer : 0;
    } else {
        rc = rk_store_fail(err, errlen, "redis error: unexpected SCARD reply");
    }
    freeReplyObject(r[0]);
    freeReplyObject(r[1]);
    return rc;
}
