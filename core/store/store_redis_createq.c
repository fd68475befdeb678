/* SPDX-License-Identifier: Apache-2.0 */
/* Redis store: the create queue (store.h) and its Lua scripts. Keys under the prefix p:
 *   <p>createq              sorted set, queued id -> enqueue time (epoch ms): the FIFO
 *   <p>createq:own:<owner>  sorted set, the queued ids <owner> pushed (same scores)
 *   <p>createq:origin       hash, queued id -> the owner that pushed it
 *   <p>createq:claimed      sorted set, claimed id -> lease deadline (epoch ms)
 *   <p>createq:holder       hash, claimed id -> "<owner> <enqueue ms>"
 *   <p>createq:rate         hash {s: wall-clock second, n: claims in it} (create_rate)
 *   <p>createq:retaken      hash, id -> 1 once a claim of it lapsed (until done or cancelled)
 * Every change is one script, so the queue stays consistent across admins. The per-owner set
 * lets an admin take its own new entries at once (ZRANGE) and everyone's older than the
 * steal cutoff (ZRANGEBYSCORE on the FIFO) in O(log N + taken); the claimed set is bounded by
 * the concurrency, so renewing scans it. The scripts build the per-owner and rate keys from
 * the prefix they are given (one Redis, no cluster: the store is used that way). */
#include "store/store_redis_internal.h"

#include "obs/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Lua: push(K, A) with K: createq, claimed, origin, own; A: id, enqueue ms, max, owner.
 * 1 queued, 2 already there, 0 full. */
#define LUA_PUSH_FN                                                                                \
    "local function push(K, A)\n"                                                                  \
    "  if redis.call('ZSCORE', K[1], A[1]) or redis.call('ZSCORE', K[2], A[1]) then\n"             \
    "    return 2 end\n"                                                                           \
    "  if redis.call('ZCARD', K[1]) + redis.call('ZCARD', K[2]) >= tonumber(A[3]) then\n"          \
    "    return 0 end\n"                                                                           \
    "  redis.call('ZADD', K[1], A[2], A[1])\n"                                                     \
    "  redis.call('ZADD', K[4], A[2], A[1])\n"                                                     \
    "  redis.call('HSET', K[3], A[1], A[4])\n"                                                     \
    "  return 1\n"                                                                                 \
    "end\n"

static const char lua_push[] = LUA_PUSH_FN "return push(KEYS, ARGV)\n";

/* A new record and its queued create in one step. KEYS: the 6 of rkr_lua_create, then
 * createq, claimed, origin, own; ARGV: the 7 of rkr_lua_create, then enqueue ms, max, owner.
 * -1 the id is active (nothing written); else push's answer (0: the record is written, the
 * queue is full). */
static const char lua_create_queued[] = RKR_LUA_CREATE_FN LUA_PUSH_FN
    "if create({KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]},\n"
    "          {ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7]}) == 0 then\n"
    "  return -1 end\n"
    "return push({KEYS[7], KEYS[8], KEYS[9], KEYS[10]}, {ARGV[1], ARGV[8], ARGV[9], ARGV[10]})\n";

/* KEYS: createq, claimed, origin, holder; ARGV: owner, now ms, lease ms, want, concurrency,
 * rate, steal cutoff ms, "<p>createq:", "<p>sandbox:", the owner's finished creates (ids, each
 * followed by a NUL byte: ids are C strings). Their claims are dropped first (as lua_finish).
 * While other owners have creates queued, an owner holds at most its share of the concurrency
 * (divided by the owners holding claims, at least two): an admin that claims again as it
 * finishes would otherwise keep the whole store-wide concurrency to itself, and the others'
 * creates would wait for the steal delay.
 * Returns {requeued, id, enqueue ms, retaken (0/1), record JSON or nil, id, ...}. */
static const char lua_claim[] =
    "local now = tonumber(ARGV[2])\n"
    "local pre = ARGV[1] .. ' '\n"
    "for id in string.gmatch(ARGV[10], '([^%z]+)%z') do\n"
    "  local h = redis.call('HGET', KEYS[4], id)\n"
    "  if h and string.sub(h, 1, #pre) == pre then\n"
    "    redis.call('ZREM', KEYS[2], id)\n"
    "    redis.call('HDEL', KEYS[4], id)\n"
    "    redis.call('HDEL', ARGV[8] .. 'retaken', id)\n"
    "  end\n"
    "end\n"
    "local requeued = 0\n"
    "for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, 256)) do\n"
    "  local h = redis.call('HGET', KEYS[4], id)\n"
    "  local enq = now\n"
    "  if h then\n"
    "    local sp = string.find(h, ' ', 1, true)\n"
    "    if sp then enq = tonumber(string.sub(h, sp + 1)) or now end\n"
    "  end\n"
    "  redis.call('ZREM', KEYS[2], id)\n"
    "  redis.call('HDEL', KEYS[4], id)\n"
    "  redis.call('ZADD', KEYS[1], enq, id)\n"
    "  redis.call('HSET', ARGV[8] .. 'retaken', id, 1)\n"
    "  requeued = requeued + 1\n"
    "end\n"
    "local out = {requeued}\n"
    "local n = tonumber(ARGV[4])\n"
    "local room = tonumber(ARGV[5]) - redis.call('ZCARD', KEYS[2])\n"
    "if room > 0 and redis.call('ZCARD', KEYS[1]) >\n"
    "    redis.call('ZCARD', ARGV[8] .. 'own:' .. ARGV[1]) then\n"
    "  local mine, owners, seen_owner = 0, 1, {[ARGV[1]] = true}\n"
    "  for _, h in ipairs(redis.call('HVALS', KEYS[4])) do\n"
    "    local o = string.match(h, '^(.*) [^ ]*$') or h\n"
    "    if o == ARGV[1] then mine = mine + 1\n"
    "    elseif not seen_owner[o] then seen_owner[o] = true; owners = owners + 1 end\n"
    "  end\n"
    "  if owners < 2 then owners = 2 end\n"
    "  local share = math.ceil(tonumber(ARGV[5]) / owners) - mine\n"
    "  if share < room then room = share end\n"
    "end\n"
    "if room < n then n = room end\n"
    "local rate = tonumber(ARGV[6])\n"
    "local rkey = ARGV[8] .. 'rate'\n"
    "local sec = math.floor(now / 1000)\n"
    "local used = 0\n"
    "if rate > 0 then\n"
    "  local r = redis.call('HMGET', rkey, 's', 'n')\n"
    "  if tonumber(r[1]) == sec then used = tonumber(r[2]) or 0 end\n"
    "  if rate - used < n then n = rate - used end\n"
    "end\n"
    "if n <= 0 then return out end\n"
    "local old = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[7], 'WITHSCORES', 'LIMIT', 0,"
    " n)\n"
    "local mine = redis.call('ZRANGE', ARGV[8] .. 'own:' .. ARGV[1], 0, n - 1, 'WITHSCORES')\n"
    "local i, j, taken, seen = 1, 1, 0, {}\n"
    "while taken < n and (i <= #old or j <= #mine) do\n"
    "  local id, sc\n"
    "  if j > #mine or (i <= #old and tonumber(old[i + 1]) <= tonumber(mine[j + 1])) then\n"
    "    id, sc = old[i], old[i + 1]; i = i + 2\n"
    "  else\n"
    "    id, sc = mine[j], mine[j + 1]; j = j + 2\n"
    "  end\n"
    "  if not seen[id] then\n"
    "    seen[id] = true\n"
    "    local o = redis.call('HGET', KEYS[3], id)\n"
    "    if o then redis.call('ZREM', ARGV[8] .. 'own:' .. o, id) end\n"
    "    redis.call('HDEL', KEYS[3], id)\n"
    "    if redis.call('ZREM', KEYS[1], id) == 1 then\n"
    "      redis.call('ZADD', KEYS[2], now + tonumber(ARGV[3]), id)\n"
    "      redis.call('HSET', KEYS[4], id, ARGV[1] .. ' ' .. sc)\n"
    "      out[#out + 1] = id\n"
    "      out[#out + 1] = sc\n"
    "      out[#out + 1] = redis.call('HEXISTS', ARGV[8] .. 'retaken', id)\n"
    "      out[#out + 1] = redis.call('GET', ARGV[9] .. id)\n"
    "      taken = taken + 1\n"
    "    end\n"
    "  end\n"
    "end\n"
    "if rate > 0 and taken > 0 then\n"
    "  redis.call('HSET', rkey, 's', sec, 'n', used + taken)\n"
    "  redis.call('PEXPIRE', rkey, 5000)\n"
    "end\n"
    "return out\n";

/* KEYS: claimed, holder; ARGV: owner, deadline ms. How many claims were renewed. */
static const char lua_renew[] = "local n = 0\n"
                                "local pre = ARGV[1] .. ' '\n"
                                "local all = redis.call('HGETALL', KEYS[2])\n"
                                "for i = 1, #all, 2 do\n"
                                "  if string.sub(all[i + 1], 1, #pre) == pre then\n"
                                "    redis.call('ZADD', KEYS[1], 'XX', ARGV[2], all[i])\n"
                                "    n = n + 1\n"
                                "  end\n"
                                "end\n"
                                "return n\n";

/* KEYS: claimed, holder, createq; ARGV: id, owner, "1" to put it back in the queue,
 * "<p>createq:". 1 done, 0 not ours. */
static const char lua_finish[] =
    "local h = redis.call('HGET', KEYS[2], ARGV[1])\n"
    "local pre = ARGV[2] .. ' '\n"
    "if not h or string.sub(h, 1, #pre) ~= pre then return 0 end\n"
    "redis.call('ZREM', KEYS[1], ARGV[1])\n"
    "redis.call('HDEL', KEYS[2], ARGV[1])\n"
    "if ARGV[3] == '1' then\n"
    "  redis.call('ZADD', KEYS[3], tonumber(string.sub(h, #pre + 1)) or 0, ARGV[1])\n"
    "else\n"
    "  redis.call('HDEL', ARGV[4] .. 'retaken', ARGV[1])\n"
    "end\n"
    "return 1\n";

/* KEYS: createq, origin; ARGV: id, "<p>createq:". 1 removed from the queue, 0 not queued. */
static const char lua_cancel[] =
    "if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then return 0 end\n"
    "local o = redis.call('HGET', KEYS[2], ARGV[1])\n"
    "if o then redis.call('ZREM', ARGV[2] .. 'own:' .. o, ARGV[1]) end\n"
    "redis.call('HDEL', KEYS[2], ARGV[1])\n"
    "redis.call('HDEL', ARGV[2] .. 'retaken', ARGV[1])\n"
    "return 1\n";

/* The fixed keys of the queue. */
struct cq_keys {
    char q[KEY_MAX], claimed[KEY_MAX], origin[KEY_MAX], holder[KEY_MAX], base[KEY_MAX],
        records[KEY_MAX];
};

static void cq_keys(const struct redis_store *rs, struct cq_keys *k)
{
    rkr_key_of(rs, k->q, "createq", NULL);
    rkr_key_of(rs, k->claimed, "createq:claimed", NULL);
    rkr_key_of(rs, k->origin, "createq:origin", NULL);
    rkr_key_of(rs, k->holder, "createq:holder", NULL);
    rkr_key_of(rs, k->base, "createq:", NULL);
    rkr_key_of(rs, k->records, "sandbox:", NULL);
}

/* The arguments every enqueue shares: the owner's key, the time and the capacity. */
struct cq_push_args {
    char own[KEY_MAX], ms[32], mx[32];
};

static void cq_push_args(struct redis_store *rs, const char *owner, int64_t now_ms, long long max,
                         struct cq_push_args *a)
{
    rkr_key_of(rs, a->own, "createq:own:", owner);
    snprintf(a->ms, sizeof a->ms, "%lld", (long long)now_ms);
    snprintf(a->mx, sizeof a->mx, "%lld", max);
}

rk_store_rc rkr_cq_push(struct rk_store *st, const char *id, const char *owner, int64_t now_ms,
                        long long max, char *err, size_t errlen)
{
    struct redis_store *rs = rkr_store(st);
    struct cq_keys k;
    cq_keys(rs, &k);
    struct cq_push_args a;
    cq_push_args(rs, owner, now_ms, max, &a);
    struct cmd c;
    rkr_cmd_build(&c, "EVAL", lua_push, "4", k.q, k.claimed, k.origin, a.own, id, a.ms, a.mx, owner,
                  (const char *)NULL);
    long long v = 0;
    rk_store_rc rc = rkr_run_write_int(rs, &c, &v, err, errlen);
    if (rc != RK_STORE_OK)
        return rc;
    return v == 0 ? RK_STORE_FULL : RK_STORE_OK;
}

rk_store_rc rkr_cq_create(struct rk_store *st, const char *id, json_object *rec,
                          int64_t expire_time, const char *owner, int64_t now_ms, long long max,
                          char *err, size_t errlen)
{
    struct redis_store *rs = rkr_store(st);
    struct rkr_create_parts p;
    rk_store_rc rc = rkr_create_parts(rs, id, rec, expire_time, &p, err, errlen);
    if (rc != RK_STORE_OK)
        return rc;
    struct cq_keys k;
    cq_keys(rs, &k);
    struct cq_push_args a;
    cq_push_args(rs, owner, now_ms, max, &a);
    struct cmd c;
    rkr_cmd_build(&c, "EVAL", lua_create_queued, "10", (const char *)NULL);
    rkr_create_add_keys(&c, &p);
    rkr_cmd_add(&c, k.q);
    rkr_cmd_add(&c, k.claimed);
    rkr_cmd_add(&c, k.origin);
    rkr_cmd_add(&c, a.own);
    rkr_create_add_args(&c, id, &p);
    rkr_cmd_add(&c, a.ms);
    rkr_cmd_add(&c, a.mx);
    rkr_cmd_add(&c, owner);
    long long v = -2;
    rc = rkr_run_write_int(rs, &c, &v, err, errlen);
    if (rc == RK_STORE_ERROR && v >= 0) {
        /* Written but not confirmed by the replicas: take both back (best effort), as a
         * failed create does, so a retry with the same id is not refused as a duplicate. */
        char scratch[RK_STORE_ERRLEN];
        if (v == 1)
            rkr_cq_cancel(st, id, scratch, sizeof scratch);
        rkr_create_undo(rs, id, &p);
    }
    rkr_create_parts_free(&p);
    if (rc != RK_STORE_OK)
        return rc;
    return v == -1 ? RK_STORE_EXISTS : v == 0 ? RK_STORE_FULL : RK_STORE_OK;
}

rk_store_rc rkr_cq_claim(struct rk_store *st, const struct rk_createq_claim *cl,
                         struct rk_createq_item **items_out, size_t *n_out, size_t *requeued_out,
                         char *err, size_t errlen)
{
    struct redis_store *rs = rkr_store(st);
    struct cq_keys k;
    cq_keys(rs, &k);
    char now[32], lease[16], want[32], conc[16], rate[16], cutoff[32];
    snprintf(now, sizeof now, "%lld", (long long)cl->now_ms);
    snprintf(lease, sizeof lease, "%d", cl->lease_ms);
    snprintf(want, sizeof want, "%zu", cl->want);
    snprintf(conc, sizeof conc, "%d", cl->concurrency);
    snprintf(rate, sizeof rate, "%d", cl->rate);
    snprintf(cutoff, sizeof cutoff, "%lld", (long long)(cl->now_ms - cl->steal_after_ms));
    /* The finished creates, each id followed by a NUL byte. */
    size_t dlen = 0;
    for (size_t i = 0; i < cl->n_done; i++)
        dlen += strlen(cl->done[i]) + 1;
    char *done = malloc(dlen + 1);
    if (!done)
        return rk_store_fail(err, errlen, "store: out of memory");
    size_t at = 0;
    for (size_t i = 0; i < cl->n_done; i++) {
        size_t n = strlen(cl->done[i]) + 1;
        memcpy(done + at, cl->done[i], n);
        at += n;
    }
    done[at] = 0;
    struct cmd c;
    rkr_cmd_build(&c, "EVAL", lua_claim, "4", k.q, k.claimed, k.origin, k.holder, cl->owner, now,
                  lease, want, conc, rate, cutoff, k.base, k.records, done, (const char *)NULL);
    c.lens[c.argc - 1] = dlen; /* binary: the NUL bytes are separators */
    redisReply *r = NULL;
    rk_store_rc rc = rkr_run(rs, &c, &r, err, errlen);
    free(done);
    if (rc != RK_STORE_OK)
        return rc;
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 1 ||
        r->element[0]->type != REDIS_REPLY_INTEGER) {
        freeReplyObject(r);
        return rk_store_fail(err, errlen, "redis error: unexpected create-queue reply");
    }
    if (requeued_out)
        *requeued_out = (size_t)r->element[0]->integer;
    size_t n = (r->elements - 1) / 4;
    struct rk_createq_item *items = n ? calloc(n, sizeof *items) : NULL;
    if (n && !items) {
        freeReplyObject(r);
        return rk_store_fail(err, errlen, "store: out of memory");
    }
    size_t got = 0;
    for (size_t i = 0; i < n; i++) {
        redisReply *const *e = &r->element[1 + 4 * i]; /* id, enqueue ms, retaken, record */
        if (e[0]->type != REDIS_REPLY_STRING || e[1]->type != REDIS_REPLY_STRING)
            continue;
        items[got].id = strndup(e[0]->str, e[0]->len);
        if (!items[got].id)
            break;
        items[got].enqueued_ms = strtoll(e[1]->str, NULL, 10);
        items[got].retaken = e[2]->type == REDIS_REPLY_INTEGER && e[2]->integer == 1;
        char why[RK_STORE_ERRLEN];
        if (rkr_record_from(e[3], NULL, &items[got].rec, items[got].id, why, sizeof why) ==
            RK_STORE_ERROR)
            rk_warn("create queue: %s", why); /* its create is dropped: the record is broken */
        got++;
    }
    freeReplyObject(r);
    if (got == 0) {
        free(items);
        items = NULL;
    }
    *items_out = items;
    *n_out = got;
    return RK_STORE_OK;
}

rk_store_rc rkr_cq_renew(struct rk_store *st, const char *owner, int64_t deadline_ms, size_t *n_out,
                         char *err, size_t errlen)
{
    struct redis_store *rs = rkr_store(st);
    struct cq_keys k;
    cq_keys(rs, &k);
    char dl[32];
    snprintf(dl, sizeof dl, "%lld", (long long)deadline_ms);
    struct cmd c;
    rkr_cmd_build(&c, "EVAL", lua_renew, "2", k.claimed, k.holder, owner, dl, (const char *)NULL);
    long long v = 0;
    rk_store_rc rc = rkr_run_int(rs, &c, &v, err, errlen);
    if (rc == RK_STORE_OK && n_out)
        *n_out = (size_t)v;
    return rc;
}

/* Done or release (back in the queue). */
static rk_store_rc finish(struct rk_store *st, const char *id, const char *owner, const char *back,
                          char *err, size_t errlen)
{
    struct redis_store *rs = rkr_store(st);
    struct cq_keys k;
    cq_keys(rs, &k);
    struct cmd c;
    rkr_cmd_build(&c, "EVAL", lua_finish, "3", k.claimed, k.holder, k.q, id, owner, back, k.base,
                  (const char *)NULL);
    long long v = 0;
    rk_store_rc rc = rkr_run_int(rs, &c, &v, err, errlen);
    if (rc != RK_STORE_OK)
        return rc;
    return v == 1 ? RK_STORE_OK : RK_STORE_CONFLICT;
}

rk_store_rc rkr_cq_done(struct rk_store *st, const char *id, const char *owner, char *err,
                        size_t errlen)
{
    return finish(st, id, owner, "0", err, errlen);
}

rk_store_rc rkr_cq_release(struct rk_store *st, const char *id, const char *owner, char *err,
                           size_t errlen)
{
    return finish(st, id, owner, "1", err, errlen);
}

rk_store_rc rkr_cq_cancel(struct rk_store *st, const char *id, char *err, size_t errlen)
{
    struct redis_store *rs = rkr_store(st);
    struct cq_keys k;
    cq_keys(rs, &k);
    struct cmd c;
    rkr_cmd_build(&c, "EVAL", lua_cancel, "2", k.q, k.origin, id, k.base, (const char *)NULL);
    long long v = 0;
    rk_store_rc rc = rkr_run_write_int(rs, &c, &v, err, errlen);
    if (rc != RK_STORE_OK)
        return rc;
    return v == 1 ? RK_STORE_OK : RK_STORE_NOT_FOUND;
}

rk_store_rc rkr_cq_where(struct rk_store *st, const char *id, int *where_out, char *err,
                         size_t errlen)
{
    struct redis_store *rs = rkr_store(st);
    struct cq_keys k;
    cq_keys(rs, &k);
    struct cmd c[2];
    rkr_cmd_build(&c[0], "ZSCORE", k.q, id, (const char *)NULL);
    rkr_cmd_build(&c[1], "ZSCORE", k.claimed, id, (const char *)NULL);
    redisReply *r[2] = {NULL, NULL};
    rk_store_rc rc = rkr_run_pipeline(rs, c, 2, r, err, errlen);
    if (rc != RK_STORE_OK)
        return rc;
    *where_out = r[0]->type == REDIS_REPLY_STRING ? 1 : r[1]->type == REDIS_REPLY_STRING ? 2 : 0;
    freeReplyObject(r[0]);
    freeReplyObject(r[1]);
    return RK_STORE_OK;
}

rk_store_rc rkr_cq_depth(struct rk_store *st, size_t *queued_out, size_t *claimed_out, char *err,
                         size_t errlen)
{
    struct redis_store *rs = rkr_store(st);
    struct cq_keys k;
    cq_keys(rs, &k);
    struct cmd c[2];
    rkr_cmd_build(&c[0], "ZCARD", k.q, (const char *)NULL);
    rkr_cmd_build(&c[1], "ZCARD", k.claimed, (const char *)NULL);
    redisReply *r[2] = {NULL, NULL};
    rk_store_rc rc = rkr_run_pipeline(rs, c, 2, r, err, errlen);
    if (rc != RK_STORE_OK)
        return rc;
    if (r[0]->type == REDIS_REPLY_INTEGER && r[1]->type == REDIS_REPLY_INTEGER) {
        *queued_out = (size_t)r[0]->integer;
        *claimed_out = (size_t)r[1]->integer;
    } else {
        rc = rk_store_fail(err, errlen, "redis error: unexpected reply type");
    }
    freeReplyObject(r[0]);
    freeReplyObject(r[1]);
    return rc;
}
