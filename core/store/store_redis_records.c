/* SPDX-License-Identifier: Apache-2.0 */
/* Redis store: sandbox records. Owns reading records with their idle deadlines (get,
 * get_many in chunks of GET_CHUNK), creating one (Lua, undone when replicas do not confirm
 * it), the optimistic WATCH/MULTI/EXEC update, the idle touch, and the hot-path read that
 * touches (get_touch: MGET + ZSCORE, and, at most once per sandbox and second (the caller's
 * throttle), a ZADD XX GT that raises the deadline). */
#include "store/store_redis_internal.h"

#include "obs/log.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void rkr_record_add_score(json_object *o, const redisReply *score)
{
    if (score && score->type == REDIS_REPLY_STRING && rk_store_rec_active(o)) {
        char buf[64];
        snprintf(buf, sizeof buf, "%.*s", (int)(score->len < 63 ? score->len : 63), score->str);
        json_object_object_add(o, "expire_time", json_object_new_int64((int64_t)strtod(buf, NULL)));
    }
}

rk_store_rc rkr_record_from(const redisReply *rec, const redisReply *score, json_object **out,
                            const char *id, char *err, size_t errlen)
{
    *out = NULL;
    if (rec->type == REDIS_REPLY_NIL)
        return RK_STORE_NOT_FOUND;
    if (rec->type != REDIS_REPLY_STRING)
        return rk_store_fail(err, errlen, "redis error: record %s has reply type %d", id,
                             rec->type);
    json_tokener *tok = json_tokener_new();
    if (!tok)
        return rk_store_fail(err, errlen, "store: out of memory");
    json_object *o = json_tokener_parse_ex(tok, rec->str, (int)rec->len);
    bool complete = json_tokener_get_error(tok) == json_tokener_success;
    json_tokener_free(tok);
    if (!o || !complete || !json_object_is_type(o, json_type_object)) {
        json_object_put(o);
        return rk_store_fail(err, errlen, "store: record %s is not a JSON object", id);
    }
    rkr_record_add_score(o, score);
    *out = o;
    return RK_STORE_OK;
}

/* n records and their idle deadlines in one MULTI/EXEC round trip: *ex is the EXEC reply (two
 * elements per id: GET, ZSCORE), inside *replies (release with free_replies). */
static rk_store_rc read_chunk(struct rk_store *st, const char *const *ids, size_t n,
                              redisReply ***replies, const redisReply **ex, char *err,
                              size_t errlen)
{
    struct redis_store *rs = rkr_store(st);
    size_t ncmd = 2 * n + 2;
    struct cmd *cmds = calloc(ncmd, sizeof *cmds);
    char(*keys)[KEY_MAX] = malloc(n * sizeof *keys);
    *replies = calloc(ncmd, sizeof **replies);
    char zkey[KEY_MAX];
    rk_store_rc rc = RK_STORE_OK;
    if (!cmds || !keys || !*replies) {
        rc = rk_store_fail(err, errlen, "store: out of memory");
        goto out;
    }
    rkr_key_of(rs, zkey, "expire", NULL);
    rkr_cmd_build(&cmds[0], "MULTI", (const char *)NULL);
    for (size_t i = 0; i < n; i++) {
        rkr_cmd_build(&cmds[1 + 2 * i], "GET", rkr_key_of(rs, keys[i], "sandbox:", ids[i]),
                      (const char *)NULL);
        rkr_cmd_build(&cmds[2 + 2 * i], "ZSCORE", zkey, ids[i], (const char *)NULL);
    }
    rkr_cmd_build(&cmds[ncmd - 1], "EXEC", (const char *)NULL);
    rc = rkr_run_read(rs, cmds, ncmd, *replies, err, errlen);
    if (rc != RK_STORE_OK)
        goto out;
    *ex = (*replies)[ncmd - 1];
    if ((*ex)->type == REDIS_REPLY_ERROR)
        rc = rkr_reply_fail(*ex, err, errlen);
    else if ((*ex)->type != REDIS_REPLY_ARRAY || (*ex)->elements != 2 * n)
        rc = rk_store_fail(err, errlen, "redis error: unexpected EXEC reply");
    for (size_t i = 0; rc == RK_STORE_OK && i < n; i++)
        if ((*ex)->element[2 * i]->type == REDIS_REPLY_ERROR)
            rc = rkr_reply_fail((*ex)->element[2 * i], err, errlen);
out:
    free(keys);
    free(cmds);
    return rc;
}

/* Release read_chunk's replies for n ids. */
static void free_replies(redisReply **replies, size_t n)
{
    if (replies)
        for (size_t i = 0; i < 2 * n + 2; i++)
            if (replies[i])
                freeReplyObject(replies[i]);
    free(replies);
}

/* Fetch n records and their idle deadlines in one MULTI/EXEC round trip. */
static rk_store_rc get_many_chunk(struct rk_store *st, const char *const *ids, size_t n,
                                  json_object **out, char *err, size_t errlen)
{
    redisReply **replies = NULL;
    const redisReply *ex = NULL;
    for (size_t i = 0; i < n; i++)
        out[i] = NULL;
    rk_store_rc rc = read_chunk(st, ids, n, &replies, &ex, err, errlen);
    for (size_t i = 0; i < n && rc == RK_STORE_OK; i++) {
        rk_store_rc r = rkr_record_from(ex->element[2 * i], ex->element[2 * i + 1], &out[i], ids[i],
                                        err, errlen);
        if (r == RK_STORE_ERROR)
            rc = r;
    }
    if (rc != RK_STORE_OK)
        rk_store_put_records(out, n);
    free_replies(replies, n);
    return rc;
}

/* Members of a record rkr_scan_many locates (a record has about 40). */
#define SCAN_MEMBERS_MAX 96

/* Show n records as found, in one MULTI/EXEC round trip: each reply's text scanned where it
 * lies, parsed only when the scanner does not read it. */
static rk_store_rc scan_chunk(struct rk_store *st, const char *const *ids, size_t n, size_t off,
                              rk_store_scan_each_fn *fn, void *ctx, char *err, size_t errlen)
{
    redisReply **replies = NULL;
    const redisReply *ex = NULL;
    rk_store_rc rc = read_chunk(st, ids, n, &replies, &ex, err, errlen);
    for (size_t i = 0; i < n && rc == RK_STORE_OK; i++) {
        const redisReply *rec = ex->element[2 * i];
        if (rec->type == REDIS_REPLY_NIL) {
            fn(ctx, off + i, NULL);
            continue;
        }
        struct rku_json_member m[SCAN_MEMBERS_MAX];
        int nm = rec->type == REDIS_REPLY_STRING
                     ? rku_json_scan_object(rec->str, rec->len, m, SCAN_MEMBERS_MAX)
                     : -1;
        if (nm >= 0) {
            struct rk_store_found found = {
                .text = rec->str, .len = rec->len, .m = m, .n = (size_t)nm};
            fn(ctx, off + i, &found);
            continue;
        }
        json_object *o = NULL;
        rc = rkr_record_from(rec, NULL, &o, ids[i], err, errlen);
        if (rc == RK_STORE_OK) {
            struct rk_store_found found = {.rec = o};
            fn(ctx, off + i, &found);
        } else if (rc == RK_STORE_NOT_FOUND) {
            rc = RK_STORE_OK;
            fn(ctx, off + i, NULL);
        }
        json_object_put(o);
    }
    free_replies(replies, n);
    return rc;
}

rk_store_rc rkr_scan_many(struct rk_store *st, const char *const *ids, size_t n,
                          rk_store_scan_each_fn *fn, void *ctx, char *err, size_t errlen)
{
    for (size_t off = 0; off < n; off += GET_CHUNK) {
        size_t m = n - off < GET_CHUNK ? n - off : GET_CHUNK;
        rk_store_rc rc = scan_chunk(st, ids + off, m, off, fn, ctx, err, errlen);
        if (rc != RK_STORE_OK)
            return rc;
    }
    return RK_STORE_OK;
}

/* Fetch n records in chunks of GET_CHUNK (one round trip each), so a list of
 * 100,000 ids neither builds one huge transaction nor blocks Redis long. */
rk_store_rc rkr_get_many(struct rk_store *st, const char *const *ids, size_t n, json_object **out,
                         char *err, size_t errlen)
{
    for (size_t off = 0; off < n; off += GET_CHUNK) {
        size_t m = n - off < GET_CHUNK ? n - off : GET_CHUNK;
        rk_store_rc rc = get_many_chunk(st, ids + off, m, out + off, err, errlen);
        if (rc != RK_STORE_OK) {
            rk_store_put_records(out, off);
            return rc;
        }
    }
    return RK_STORE_OK;
}

/* Fetch one record. */
rk_store_rc rkr_get(struct rk_store *st, const char *id, json_object **out, char *err,
                    size_t errlen)
{
    const char *ids[1] = {id};
    rk_store_rc rc = rkr_get_many(st, ids, 1, out, err, errlen);
    if (rc == RK_STORE_OK && !*out)
        return RK_STORE_NOT_FOUND;
    return rc;
}

/* Insert a record unless the id is in the active set (one Lua script). */
rk_store_rc rkr_create_parts(struct redis_store *rs, const char *id, json_object *rec,
                             int64_t expire_time, struct rkr_create_parts *p, char *err,
                             size_t errlen)
{
    static const char *const kinds[6] = {"sandbox:",  "active",        "expire",
                                         "bycreated", "state:pending", "state:running"};
    for (int i = 0; i < 6; i++)
        rkr_key_of(rs, p->keys[i], kinds[i], i == 0 ? id : NULL);
    snprintf(p->exp, sizeof p->exp, "%lld", (long long)(expire_time > 0 ? expire_time : 0));
    snprintf(p->ttl, sizeof p->ttl, "%lld",
             (long long)(rk_store_rec_deleted(rec) ? rs->base.deleted_retention_s : 0));
    json_object *stv = NULL;
    p->state =
        json_object_object_get_ex(rec, "state", &stv) && stv ? json_object_get_string(stv) : "";
    p->active = rk_store_rec_active(rec) ? "1" : "0";
    p->json = json_object_to_json_string_ext(rec, JSON_C_TO_STRING_PLAIN);
    p->lkey = rk_store_list_key(rec, id);
    if (!p->json || !p->lkey || !p->state) {
        free(p->lkey);
        p->lkey = NULL;
        return rk_store_fail(err, errlen, "store: out of memory");
    }
    return RK_STORE_OK;
}

void rkr_create_parts_free(struct rkr_create_parts *p)
{
    free(p->lkey);
    p->lkey = NULL;
}

void rkr_create_add_keys(struct cmd *c, const struct rkr_create_parts *p)
{
    for (int i = 0; i < 6; i++)
        rkr_cmd_add(c, p->keys[i]);
}

void rkr_create_add_args(struct cmd *c, const char *id, const struct rkr_create_parts *p)
{
    rkr_cmd_add(c, id);
    rkr_cmd_add(c, p->json);
    rkr_cmd_add(c, p->active);
    rkr_cmd_add(c, p->exp);
    rkr_cmd_add(c, p->ttl);
    rkr_cmd_add(c, p->lkey);
    rkr_cmd_add(c, p->state);
}

void rkr_create_undo(struct redis_store *rs, const char *id, const struct rkr_create_parts *p)
{
    char scratch[RK_STORE_ERRLEN];
    long long undone = 0;
    struct cmd c;
    rkr_cmd_build(&c, "EVAL", rkr_lua_uncreate, "6", (const char *)NULL);
    rkr_create_add_keys(&c, p);
    rkr_cmd_add(&c, id);
    rkr_cmd_add(&c, p->json);
    rkr_cmd_add(&c, p->lkey);
    rkr_run_int(rs, &c, &undone, scratch, sizeof scratch);
}

rk_store_rc rkr_create(struct rk_store *st, const char *id, json_object *rec, int64_t expire_time,
                       char *err, size_t errlen)
{
    struct redis_store *rs = rkr_store(st);
    struct rkr_create_parts p;
    rk_store_rc rc = rkr_create_parts(rs, id, rec, expire_time, &p, err, errlen);
    if (rc != RK_STORE_OK)
        return rc;
    struct cmd c;
    rkr_cmd_build(&c, "EVAL", rkr_lua_create, "6", (const char *)NULL);
    rkr_create_add_keys(&c, &p);
    rkr_create_add_args(&c, id, &p);
    long long v = 0;
    rc = rkr_run_write_int(rs, &c, &v, err, errlen);
    if (rc == RK_STORE_ERROR && v == 1)
        /* Written but not confirmed by the replicas: the client is told it failed, so take
         * it back (best effort) and a retry with the same id is not refused as a duplicate. */
        rkr_create_undo(rs, id, &p);
    rkr_create_parts_free(&p);
    if (rc != RK_STORE_OK)
        return rc;
    return v == 1 ? RK_STORE_OK : RK_STORE_EXISTS;
}

/* Sleep a little before retrying a transaction (grows with attempt). */
static void retry_pause(int attempt)
{
    unsigned char r = 0;
    char tok[RK_STORE_TOKEN_HEX + 1];
    if (rk_store_new_token(tok) == 0)
        r = (unsigned char)tok[0];
    long ms = 1 + (long)(r % (unsigned)(4 * attempt + 1));
    struct timespec ts = {0, ms * 1000000L};
    nanosleep(&ts, NULL);
}

/* Send UNWATCH (best effort) before handing the connection back. */
static void unwatch(struct rop *op)
{
    struct cmd c;
    redisReply *r = NULL;
    char scratch[RK_STORE_ERRLEN];
    rkr_cmd_build(&c, "UNWATCH", (const char *)NULL);
    if (rkr_op_command(op, &c, &r, scratch, sizeof scratch) == RK_STORE_OK)
        freeReplyObject(r);
}

/* True if rec's state is "pending" (rkr_index_cmds keeps it in the pending set). */
static bool rec_pending(json_object *rec)
{
    json_object *stv = NULL;
    return json_object_object_get_ex(rec, "state", &stv) &&
           json_object_is_type(stv, json_type_string) &&
           strcmp(json_object_get_string(stv), "pending") == 0;
}

/* One record's write, prepared from what its read found: the commands of its part of a MULTI
 * block, which writes the record and only the index entries its change moves (the active set,
 * the idle deadlines, bycreated, the per-state sets, the job set). Every write of a record goes
 * through here or a script that keeps the same entries (rkr_lua_create), atomically, so entries
 * a change does not move are already right. */
struct prepared {
    json_object *rec; /* the record as changed (its text is in wr) */
    bool active;
    char score[64]; /* the idle deadline read with it ("": none) */
    char rkey[KEY_MAX], akey[KEY_MAX], zkey[KEY_MAX], jkey[KEY_MAX];
    struct index_keys ik;
    char ttl[32];
    char *old_key, *new_key; /* list-order keys (the index commands name them) */
    struct cmd wr[10];
    int nw;
};

/* Release what a prepared write holds. */
static void prepared_clear(struct prepared *p)
{
    json_object_put(p->rec);
    free(p->old_key);
    free(p->new_key);
    p->rec = NULL;
    p->old_key = p->new_key = NULL;
}

/* The read of id's record for an update: WATCH, GET and ZSCORE into rd[0..3). */
static void read_cmds(struct redis_store *rs, struct prepared *p, const char *id, struct cmd rd[3])
{
    rkr_key_of(rs, p->rkey, "sandbox:", id);
    rkr_key_of(rs, p->akey, "active", NULL);
    rkr_key_of(rs, p->zkey, "expire", NULL);
    rkr_key_of(rs, p->jkey, "jobs", NULL);
    rkr_cmd_build(&rd[0], "WATCH", p->rkey, (const char *)NULL);
    rkr_cmd_build(&rd[1], "GET", p->rkey, (const char *)NULL);
    rkr_cmd_build(&rd[2], "ZSCORE", p->zkey, id, (const char *)NULL);
}

/* 1 when check leaves the record of reply r as it is (looked at as its text, scanned). */
static int checked_out(const redisReply *r, rk_store_check_fn check, void *ctx)
{
    if (r->type != REDIS_REPLY_STRING)
        return 0;
    struct rku_json_member m[SCAN_MEMBERS_MAX];
    int nm = rku_json_scan_object(r->str, r->len, m, SCAN_MEMBERS_MAX);
    if (nm < 0)
        return 0; /* a text the scanner does not read: fn decides on the tree */
    struct rk_store_found found = {.text = r->str, .len = r->len, .m = m, .n = (size_t)nm};
    return check(&found, ctx) == 1;
}

/* Apply fn to the record the replies rr[0..3) of read_cmds found, and prepare its write in p.
 * Frees the replies. 0: a write is prepared (p->rec holds the record); else *rc says why not
 * (RK_STORE_NOT_FOUND, RK_STORE_ABORTED, RK_STORE_ERROR). */
static int prepare(struct redis_store *rs, struct prepared *p, const char *id, redisReply **rr,
                   rk_store_check_fn check, rk_store_update_fn fn, void *ctx, rk_store_rc *rc,
                   char *err, size_t errlen)
{
    json_object *rec = NULL;
    *rc = RK_STORE_OK;
    for (int i = 0; i < 3; i++)
        if (rr[i]->type == REDIS_REPLY_ERROR && *rc == RK_STORE_OK)
            *rc = rkr_reply_fail(rr[i], err, errlen);
    if (*rc == RK_STORE_OK && check && checked_out(rr[1], check, ctx))
        *rc = RK_STORE_ABORTED; /* left as it is, without a tree of it */
    if (*rc == RK_STORE_OK)
        *rc = rkr_record_from(rr[1], NULL, &rec, id, err, errlen);
    p->score[0] = 0;
    if (rr[2]->type == REDIS_REPLY_STRING)
        snprintf(p->score, sizeof p->score, "%.*s", (int)(rr[2]->len < 63 ? rr[2]->len : 63),
                 rr[2]->str);
    for (int i = 0; i < 3; i++)
        freeReplyObject(rr[i]);
    if (*rc != RK_STORE_OK)
        return -1;
    bool was_active = rk_store_rec_active(rec), was_pending = rec_pending(rec);
    bool had_job = rk_store_rec_has_job(rec);
    char *old_key = rk_store_list_key(rec, id);
    if (!old_key) {
        *rc = rk_store_fail(err, errlen, "store: out of memory");
        json_object_put(rec);
        return -1;
    }
    int f = fn(rec, ctx);
    if (f != 0 || !json_object_is_type(rec, json_type_object)) {
        *rc = f == 1 ? RK_STORE_ABORTED
              : f == 0
                  ? rk_store_fail(err, errlen, "store: update produced a non-object for %s", id)
                  : rk_store_fail(err, errlen, "store: update callback failed for %s", id);
        json_object_put(rec);
        free(old_key);
        return -1;
    }
    bool active = rk_store_rec_active(rec), pending = rec_pending(rec);
    bool has_job = rk_store_rec_has_job(rec);
    char *new_key = rk_store_list_key(rec, id);
    snprintf(p->ttl, sizeof p->ttl, "%lld",
             (long long)(rk_store_rec_deleted(rec) ? rs->base.deleted_retention_s : 0));
    const char *json = json_object_to_json_string_ext(rec, JSON_C_TO_STRING_PLAIN);
    if (!json || !new_key) {
        *rc = rk_store_fail(err, errlen, "store: out of memory");
        json_object_put(rec);
        free(old_key);
        free(new_key);
        return -1;
    }
    int nw = 0;
    struct cmd *wr = p->wr;
    if (strcmp(p->ttl, "0") != 0) /* deleted: kept for the retention, then gone */
        rkr_cmd_build(&wr[nw++], "SET", p->rkey, json, "EX", p->ttl, (const char *)NULL);
    else
        rkr_cmd_build(&wr[nw++], "SET", p->rkey, json, (const char *)NULL);
    if (active && !was_active) {
        rkr_cmd_build(&wr[nw++], "SADD", p->akey, id, (const char *)NULL);
    } else if (!active && was_active) {
        rkr_cmd_build(&wr[nw++], "SREM", p->akey, id, (const char *)NULL);
        rkr_cmd_build(&wr[nw++], "ZREM", p->zkey, id, (const char *)NULL);
    }
    if (active != was_active || (active && (pending != was_pending || strcmp(old_key, new_key))))
        rkr_index_cmds(rs, &p->ik, wr, &nw, id, active, pending, old_key, new_key);
    if (has_job != had_job)
        rkr_cmd_build(&wr[nw++], has_job ? "SADD" : "SREM", p->jkey, id, (const char *)NULL);
    p->old_key = old_key;
    p->new_key = new_key;
    p->nw = nw;
    p->rec = rec;
    p->active = active;
    return 0;
}

/* The EXEC reply ex: 1 when a watched record changed meanwhile (nothing was written: retry),
 * else 0 with *rc the outcome. */
static int exec_outcome(const redisReply *ex, rk_store_rc *rc, char *err, size_t errlen)
{
    *rc = RK_STORE_OK;
    if (ex->type == REDIS_REPLY_NIL)
        return 1;
    if (ex->type == REDIS_REPLY_ERROR)
        *rc = rkr_reply_fail(ex, err, errlen);
    else if (ex->type != REDIS_REPLY_ARRAY)
        *rc = rk_store_fail(err, errlen, "redis error: unexpected EXEC reply");
    else
        for (size_t i = 0; i < ex->elements && *rc == RK_STORE_OK; i++)
            if (ex->element[i]->type == REDIS_REPLY_ERROR)
                *rc = rkr_reply_fail(ex->element[i], err, errlen);
    return 0;
}

/* MULTI, the prepared writes p[0..n) that have a record, EXEC: one round trip. 1 to retry (a
 * watched record changed), else 0 with *rc the outcome. */
static int write_prepared(struct rop *op, struct prepared *p, size_t n, rk_store_rc *rc, char *err,
                          size_t errlen)
{
    size_t total = 2;
    for (size_t i = 0; i < n; i++)
        total += p[i].rec ? (size_t)p[i].nw : 0;
    struct cmd *wr = malloc(total * sizeof *wr);
    redisReply **wrr = malloc(total * sizeof *wrr);
    if (!wr || !wrr) {
        free(wr);
        free(wrr);
        *rc = rk_store_fail(err, errlen, "store: out of memory");
        return 0;
    }
    size_t nw = 0;
    rkr_cmd_build(&wr[nw++], "MULTI", (const char *)NULL);
    for (size_t i = 0; i < n; i++)
        for (int k = 0; p[i].rec && k < p[i].nw; k++)
            wr[nw++] = p[i].wr[k];
    rkr_cmd_build(&wr[nw++], "EXEC", (const char *)NULL);
    int retry = 0;
    *rc = rkr_op_pipeline(op, wr, nw, wrr, err, errlen);
    if (*rc == RK_STORE_OK) {
        retry = exec_outcome(wrr[nw - 1], rc, err, errlen);
        for (size_t i = 0; i < nw; i++)
            freeReplyObject(wrr[i]);
    }
    free(wr);
    free(wrr);
    return retry;
}

/* One optimistic attempt of rk_store_update: 1 means "retry". */
static int update_attempt(struct rop *op, const char *id, rk_store_update_fn fn, void *ctx,
                          json_object **out, rk_store_rc *rc, char *err, size_t errlen)
{
    struct prepared p = {0};
    struct cmd rd[3];
    redisReply *rr[3];
    read_cmds(op->rs, &p, id, rd);
    *rc = rkr_op_pipeline(op, rd, 3, rr, err, errlen);
    if (*rc != RK_STORE_OK)
        return 0;
    if (prepare(op->rs, &p, id, rr, NULL, fn, ctx, rc, err, errlen) != 0) {
        unwatch(op);
        return 0;
    }
    int retry = write_prepared(op, &p, 1, rc, err, errlen);
    if (!retry && *rc == RK_STORE_OK && out) {
        if (p.active && p.score[0])
            json_object_object_add(p.rec, "expire_time",
                                   json_object_new_int64((int64_t)strtod(p.score, NULL)));
        *out = p.rec;
        p.rec = NULL;
    }
    prepared_clear(&p);
    return retry;
}

/* Optimistic read-modify-write with WATCH/MULTI/EXEC, at most 5 attempts. */
rk_store_rc rkr_update_one(struct rk_store *st, const char *id, rk_store_update_fn fn, void *ctx,
                           json_object **out, char *err, size_t errlen)
{
    struct rop op;
    rk_store_rc rc = rkr_op_begin(rkr_store(st), &op, err, errlen);
    if (rc != RK_STORE_OK)
        return rc;
    for (int attempt = 1; attempt <= RK_STORE_MAX_ATTEMPTS; attempt++) {
        if (!update_attempt(&op, id, fn, ctx, out, &rc, err, errlen)) {
            if (rc == RK_STORE_OK && rkr_op_wait_replicas(&op, err, errlen) != RK_STORE_OK) {
                rc = RK_STORE_ERROR;
                if (out) {
                    json_object_put(*out);
                    *out = NULL;
                }
            }
            rkr_op_end(&op);
            return rc;
        }
        if (attempt < RK_STORE_MAX_ATTEMPTS)
            retry_pause(attempt);
    }
    rkr_op_end(&op);
    return rk_store_fail(err, errlen, "store contention: too many concurrent updates");
}

/* Several updates in two round trips: every record read under WATCH in one pipeline, every
 * write in one MULTI block. When any of the records changed meanwhile, the block writes nothing
 * and each of those updates is done again on its own (rkr_update_one). errs, when given, gets
 * each update's own failure text; else they share err. */
rk_store_rc rkr_update_batch(struct rk_store *st, const char *const *ids, size_t n,
                             rk_store_check_fn check, rk_store_update_fn fn, void *const *ctxs,
                             rk_store_rc *rcs, char (*errs)[RK_STORE_ERRLEN], char *err,
                             size_t errlen)
{
    struct redis_store *rs = rkr_store(st);
    struct prepared *p = calloc(n, sizeof *p);
    struct cmd *rd = malloc(3 * n * sizeof *rd);
    redisReply **rr = malloc(3 * n * sizeof *rr);
    rk_store_rc rc = RK_STORE_OK;
    struct rop op;
    int have_op = 0;
    if (!p || !rd || !rr) {
        rc = rk_store_fail(err, errlen, "store: out of memory");
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        read_cmds(rs, &p[i], ids[i], &rd[3 * i]);
    if ((rc = rkr_op_begin(rs, &op, err, errlen)) != RK_STORE_OK)
        goto out;
    have_op = 1;
    if ((rc = rkr_op_pipeline(&op, rd, 3 * n, rr, err, errlen)) != RK_STORE_OK)
        goto out;
    size_t writes = 0;
    for (size_t i = 0; i < n; i++)
        if (prepare(rs, &p[i], ids[i], &rr[3 * i], check, fn, ctxs[i], &rcs[i],
                    errs ? errs[i] : err, errs ? RK_STORE_ERRLEN : errlen) == 0)
            writes++;
    if (!writes) {
        unwatch(&op);
        goto out;
    }
    rk_store_rc wrc;
    int retry = write_prepared(&op, p, n, &wrc, err, errlen);
    if (!retry && wrc == RK_STORE_OK && rkr_op_wait_replicas(&op, err, errlen) != RK_STORE_OK)
        wrc = RK_STORE_ERROR;
    rkr_op_end(&op);
    have_op = 0;
    for (size_t i = 0; i < n; i++) {
        if (!p[i].rec)
            continue;
        if (retry)
            rcs[i] = rkr_update_one(st, ids[i], fn, ctxs[i], NULL, errs ? errs[i] : err,
                                    errs ? RK_STORE_ERRLEN : errlen);
        else
            rcs[i] = wrc;
        if (!retry && wrc != RK_STORE_OK && errs)
            snprintf(errs[i], RK_STORE_ERRLEN, "%s", err);
    }
out:
    if (rc != RK_STORE_OK)
        for (size_t i = 0; i < n; i++) {
            rcs[i] = rc;
            if (errs)
                snprintf(errs[i], RK_STORE_ERRLEN, "%s", err);
        }
    if (have_op)
        rkr_op_end(&op);
    if (p)
        for (size_t i = 0; i < n; i++)
            prepared_clear(&p[i]);
    free(p);
    free(rd);
    free(rr);
    return rc;
}

rk_store_rc rkr_update_many(struct rk_store *st, const char *const *ids, size_t n,
                            rk_store_check_fn check, rk_store_update_fn fn, void *const *ctxs,
                            rk_store_rc *rcs, char *err, size_t errlen)
{
    return rkr_update_batch(st, ids, n, check, fn, ctxs, rcs, NULL, err, errlen);
}

/* Set the idle deadline only for ids in the active set (one Lua script). */
rk_store_rc rkr_touch(struct rk_store *st, const char *id, int64_t expire_time, char *err,
                      size_t errlen)
{
    struct redis_store *rs = rkr_store(st);
    char k1[KEY_MAX], k2[KEY_MAX], exp[32];
    snprintf(exp, sizeof exp, "%lld", (long long)(expire_time > 0 ? expire_time : 0));
    struct cmd c;
    rkr_cmd_build(&c, "EVAL", rkr_lua_touch, "2", rkr_key_of(rs, k1, "active", NULL),
                  rkr_key_of(rs, k2, "expire", NULL), id, exp, (const char *)NULL);
    long long v = 0;
    return rkr_run_int(rs, &c, &v, err, errlen);
}

/* Record, idle deadline and reconciler mark with two plain commands (MGET record mark, ZSCORE)
 * in one round trip, without the touch. A frame of its own (not inlined): request threads of
 * in-flight commands keep whatever stack depth they once reached resident. */
__attribute__((noinline)) static rk_store_rc get_plain(struct redis_store *rs, const char *id,
                                                       json_object **out, char *mark,
                                                       size_t marklen, char *err, size_t errlen)
{
    char k1[KEY_MAX], k3[KEY_MAX], k4[KEY_MAX];
    struct cmd cmds[2];
    rkr_cmd_build(&cmds[0], "MGET", rkr_key_of(rs, k1, "sandbox:", id),
                  rkr_key_of(rs, k4, "reconcile_mark", NULL), (const char *)NULL);
    rkr_cmd_build(&cmds[1], "ZSCORE", rkr_key_of(rs, k3, "expire", NULL), id, (const char *)NULL);
    redisReply *rep[2];
    rk_store_rc rc = rkr_run_read(rs, cmds, 2, rep, err, errlen);
    if (rc != RK_STORE_OK)
        return rc;
    const redisReply *m = rep[0];
    if (m->type == REDIS_REPLY_ERROR) {
        rc = rkr_reply_fail(m, err, errlen);
    } else if (m->type != REDIS_REPLY_ARRAY || m->elements != 2) {
        rc = rk_store_fail(err, errlen, "redis error: unexpected reply type %d", m->type);
    } else {
        rc = rkr_record_from(m->element[0], rep[1], out, id, err, errlen);
        if (mark && marklen && m->element[1]->type == REDIS_REPLY_STRING)
            snprintf(mark, marklen, "%.*s", (int)m->element[1]->len, m->element[1]->str);
    }
    for (int i = 0; i < 2; i++)
        freeReplyObject(rep[i]);
    return rc;
}

int64_t rkr_touch_due(json_object *rec, int64_t now_s, bool *had_deadline)
{
    json_object *v;
    *had_deadline = false;
    if (!rec || !rk_store_rec_active(rec))
        return 0;
    int64_t current = 0;
    if (json_object_object_get_ex(rec, "expire_time", &v) && v) {
        *had_deadline = true;
        current = json_object_get_int64(v);
    }
    int64_t deadline = rk_store_touch_deadline(rec, now_s, current);
    if (deadline)
        json_object_object_add(rec, "expire_time", json_object_new_int64(deadline));
    return deadline;
}

void rkr_touch_cmd(struct redis_store *rs, struct cmd *c, struct rkr_touch_bufs *b, const char *id,
                   int64_t deadline, bool had_deadline)
{
    snprintf(b->deadline, sizeof b->deadline, "%lld", (long long)deadline);
    rkr_key_of(rs, b->expire, "expire", NULL);
    if (had_deadline && !atomic_load_explicit(&rs->no_zadd_gt, memory_order_relaxed)) {
        rkr_cmd_build(c, "ZADD", b->expire, "XX", "GT", b->deadline, id, (const char *)NULL);
        return;
    }
    rkr_cmd_build(c, "EVAL", rkr_lua_touch_later, "2", rkr_key_of(rs, b->active, "active", NULL),
                  b->expire, id, b->deadline, (const char *)NULL);
}

int rkr_touch_refused(struct redis_store *rs, const char *error)
{
    /* Redis before 6.2 reads GT as a member and answers "ERR syntax error". */
    if (!error || !strstr(error, "syntax error"))
        return 0;
    if (!atomic_exchange(&rs->no_zadd_gt, true))
        rk_info("store: this Redis has no ZADD GT (before 6.2): idle touches use a script");
    return 1;
}

/* Record + idle deadline (+ mark) with two plain commands in one round trip (get_plain); when
 * now_s > 0 (the caller's throttle, domain/activity.c, lets one read per sandbox and second
 * touch) and the touch is due, a second round trip raises the deadline (rkr_touch_cmd). Plain
 * commands, not a script: a script that read and touched at once cost Redis 17 us of CPU per
 * call against about 3 us for these (redis-benchmark, Redis 7.0), and Redis is the one
 * process every admin shares. */
rk_store_rc rkr_get_touch(struct rk_store *st, const char *id, int64_t now_s, json_object **out,
                          char *mark, size_t marklen, char *err, size_t errlen)
{
    struct redis_store *rs = rkr_store(st);
    rk_store_rc rc = get_plain(rs, id, out, mark, marklen, err, errlen);
    bool had = false;
    int64_t deadline = rc == RK_STORE_OK ? rkr_touch_due(*out, now_s, &had) : 0;
    if (deadline == 0)
        return rc;
    for (int attempt = 0; attempt < 2; attempt++) {
        struct cmd c;
        struct rkr_touch_bufs b;
        rkr_touch_cmd(rs, &c, &b, id, deadline, had);
        redisReply *r = NULL;
        rc = rkr_run_read1(rs, &c, &r, err, errlen); /* the touch only raises: safe to resend */
        freeReplyObject(r);
        if (rc == RK_STORE_OK || c.argc == 0 || strcmp(c.argv[0], "ZADD") != 0 ||
            !rkr_touch_refused(rs, err))
            break; /* done, or failed; a ZADD GT refused is sent again as the script */
    }
    if (rc != RK_STORE_OK) {
        json_object_put(*out);
        *out = NULL;
    }
    return rc;
}
