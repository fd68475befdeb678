/* SPDX-License-Identifier: Apache-2.0 */
/* Redis store (hiredis 0.14, plain Redis types). Key layout under a prefix p:
 *   <p>sandbox:<id>        string, the record's JSON text
 *   <p>active              set of active sandbox ids
 *   <p>expire              sorted set, active id -> idle deadline (epoch s)
 *   <p>claim:<name>        string with a TTL (SET NX EX)
 *   <p>sessions:<sandbox>  hash, name -> "s:<session id>" | "r:<token>:<deadline ms>"
 * Record creation, touch and every registry change are Lua scripts (atomic in
 * Redis); rk_store_update is WATCH/MULTI/EXEC with at most 5 attempts.
 * Connections come from a bounded pool; broken ones are freed and reconnection
 * is lazy with an exponential backoff shared by the pool. */
#include "store_common.h"
#include "log.h"

#include <errno.h>
#include <hiredis/hiredis.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PREFIX_MAX 64
#define KEY_MAX (PREFIX_MAX + RK_STORE_MAX_NAME + 16)
#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 5000
#define MAX_ARGS 12

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

    pthread_mutex_t mu;
    pthread_cond_t cv;
    redisContext **idle; /* pool_size slots */
    int n_idle;
    int busy;            /* checked out or connecting */
    int64_t retry_at_ms; /* monotonic; no new connection before this */
    int backoff_ms;      /* 0 while healthy */
    char last_err[128];
};

/* One command: argument vectors for redisCommandArgv. */
struct cmd {
    int argc;
    const char *argv[MAX_ARGS];
    size_t lens[MAX_ARGS];
};

/* A checked-out connection plus the caller's SIGPIPE state. */
struct rop {
    struct redis_store *rs;
    redisContext *c;
    bool broken;
    bool pipe_was_pending;
    sigset_t old_mask;
};

static const char LUA_CREATE[] =
    "if redis.call('SISMEMBER', KEYS[2], ARGV[1]) == 1 then return 0 end\n"
    "redis.call('SET', KEYS[1], ARGV[2])\n"
    "if ARGV[3] == '1' then\n"
    "  redis.call('SADD', KEYS[2], ARGV[1])\n"
    "  if tonumber(ARGV[4]) > 0 then redis.call('ZADD', KEYS[3], ARGV[4], ARGV[1])\n"
    "  else redis.call('ZREM', KEYS[3], ARGV[1]) end\n"
    "else\n"
    "  redis.call('ZREM', KEYS[3], ARGV[1])\n"
    "end\n"
    "return 1\n";

static const char LUA_TOUCH[] =
    "if redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 0 then return 0 end\n"
    "if tonumber(ARGV[2]) > 0 then redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])\n"
    "else redis.call('ZREM', KEYS[2], ARGV[1]) end\n"
    "return 1\n";

static const char LUA_RESERVE[] =
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    "local v = redis.call('HGET', KEYS[1], ARGV[1])\n"
    "if v then\n"
    "  if string.sub(v, 1, 2) ~= 'r:' then return 0 end\n"
    "  local d = string.match(v, '^r:.*:(%d+)$')\n"
    "  if not d or tonumber(d) > now then return 0 end\n"
    "end\n"
    "redis.call('HSET', KEYS[1], ARGV[1],\n"
    "  'r:' .. ARGV[2] .. ':' .. string.format('%d', now + tonumber(ARGV[3])))\n"
    "return 1\n";

static const char LUA_COMMIT[] = "local v = redis.call('HGET', KEYS[1], ARGV[1])\n"
                                 "local mine = 'r:' .. ARGV[2] .. ':'\n"
                                 "if not v or string.sub(v, 1, #mine) ~= mine then return 0 end\n"
                                 "if ARGV[3] == '' then redis.call('HDEL', KEYS[1], ARGV[1])\n"
                                 "else redis.call('HSET', KEYS[1], ARGV[1], ARGV[3]) end\n"
                                 "return 1\n";

static const char LUA_REMOVE[] = "local v = redis.call('HGET', KEYS[1], ARGV[1])\n"
                                 "if not v then return -1 end\n"
                                 "if v ~= ARGV[2] then return 0 end\n"
                                 "redis.call('HDEL', KEYS[1], ARGV[1])\n"
                                 "return 1\n";

/* CLOCK_MONOTONIC in milliseconds. */
static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Return the Redis store behind the interface pointer. */
static struct redis_store *rstore(struct rk_store *st)
{
    return (struct redis_store *)st;
}

/* Append one string argument to a command (silently bounded by MAX_ARGS). */
static void cmd_add(struct cmd *c, const char *s)
{
    if (c->argc < MAX_ARGS) {
        c->argv[c->argc] = s;
        c->lens[c->argc] = strlen(s);
        c->argc++;
    }
}

/* Build a command from a NULL-terminated list of strings. */
static void cmd_build(struct cmd *c, const char *first, ...)
{
    va_list ap;
    c->argc = 0;
    va_start(ap, first);
    for (const char *s = first; s; s = va_arg(ap, const char *))
        cmd_add(c, s);
    va_end(ap);
}

/* Format "<prefix><kind><name>" into buf (always fits: names are bounded). */
static const char *key_of(const struct redis_store *rs, char buf[KEY_MAX], const char *kind,
                          const char *name)
{
    snprintf(buf, KEY_MAX, "%s%s%s", rs->prefix, kind, name ? name : "");
    return buf;
}

/* Free the contexts in list. */
static void free_contexts(redisContext **list, int n)
{
    for (int i = 0; i < n; i++)
        redisFree(list[i]);
}

/* Open, authenticate and select; NULL with msg filled on failure. */
static redisContext *connect_one(struct redis_store *rs, char *msg, size_t msglen)
{
    struct timeval ct = {rs->connect_timeout_ms / 1000, (rs->connect_timeout_ms % 1000) * 1000};
    struct timeval ot = {rs->op_timeout_ms / 1000, (rs->op_timeout_ms % 1000) * 1000};
    redisContext *c = redisConnectWithTimeout(rs->host, rs->port, ct);
    if (!c) {
        snprintf(msg, msglen, "out of memory");
        return NULL;
    }
    if (c->err) {
        snprintf(msg, msglen, "%.100s", c->errstr);
        redisFree(c);
        return NULL;
    }
    if (redisSetTimeout(c, ot) != REDIS_OK) {
        snprintf(msg, msglen, "cannot set timeout: %.90s", c->errstr);
        redisFree(c);
        return NULL;
    }
    redisEnableKeepAlive(c);
    struct cmd steps[2];
    int nsteps = 0;
    char dbbuf[16];
    if (rs->password && rs->password[0])
        cmd_build(&steps[nsteps++], "AUTH", rs->password, (const char *)NULL);
    if (rs->db != 0) {
        snprintf(dbbuf, sizeof dbbuf, "%d", rs->db);
        cmd_build(&steps[nsteps++], "SELECT", dbbuf, (const char *)NULL);
    }
    for (int i = 0; i < nsteps; i++) {
        redisReply *r = redisCommandArgv(c, steps[i].argc, steps[i].argv, steps[i].lens);
        const char *what =
            strcmp(steps[i].argv[0], "AUTH") == 0 ? "authentication failed" : "SELECT failed";
        if (!r) {
            snprintf(msg, msglen, "%s: %.90s", what, c->errstr);
            redisFree(c);
            return NULL;
        }
        if (r->type == REDIS_REPLY_ERROR) {
            snprintf(msg, msglen, "%s: %.*s", what, (int)(r->len > 80 ? 80 : r->len), r->str);
            freeReplyObject(r);
            redisFree(c);
            return NULL;
        }
        freeReplyObject(r);
    }
    return c;
}

/* SIGPIPE: the process ignores it once (main and rk_store_open_redis), so a write to a
 * closed Redis socket fails with EPIPE instead of killing the process. No per-request
 * signal-mask syscalls (they cost 12 syscalls per request). */
static void pipe_guard_begin(struct rop *op)
{
    (void)op;
}

/* Counterpart of pipe_guard_begin (nothing to restore). */
static void pipe_guard_end(struct rop *op)
{
    (void)op;
}

/* Check out a connection, connecting lazily (with backoff) when none is idle
 * and the pool has room; waits at most op_timeout_ms for a free slot. */
static rk_store_rc op_begin(struct redis_store *rs, struct rop *op, char *err, size_t errlen)
{
    memset(op, 0, sizeof *op);
    op->rs = rs;
    int64_t deadline = mono_ms() + rs->op_timeout_ms;
    char msg[128];
    pthread_mutex_lock(&rs->mu);
    for (;;) {
        if (rs->n_idle > 0) {
            op->c = rs->idle[--rs->n_idle];
            rs->busy++;
            pthread_mutex_unlock(&rs->mu);
            pipe_guard_begin(op);
            return RK_STORE_OK;
        }
        if (rs->busy < rs->pool_size) {
            if (mono_ms() < rs->retry_at_ms) {
                snprintf(msg, sizeof msg, "%s", rs->last_err);
                pthread_mutex_unlock(&rs->mu);
                return rk_store_fail(err, errlen, "redis unavailable: %s", msg);
            }
            rs->busy++;
            pthread_mutex_unlock(&rs->mu);
            pipe_guard_begin(op);
            op->c = connect_one(rs, msg, sizeof msg);
            pthread_mutex_lock(&rs->mu);
            if (op->c) {
                if (rs->backoff_ms > 0)
                    rk_info("store: redis connection to %s:%d restored", rs->host, rs->port);
                rs->backoff_ms = 0;
                rs->retry_at_ms = 0;
                pthread_mutex_unlock(&rs->mu);
                return RK_STORE_OK;
            }
            rs->busy--;
            if (rs->backoff_ms == 0)
                rk_warn("store: redis %s:%d unavailable: %s", rs->host, rs->port, msg);
            rs->backoff_ms = rs->backoff_ms == 0 ? BACKOFF_MIN_MS : rs->backoff_ms * 2;
            if (rs->backoff_ms > BACKOFF_MAX_MS)
                rs->backoff_ms = BACKOFF_MAX_MS;
            rs->retry_at_ms = mono_ms() + rs->backoff_ms;
            snprintf(rs->last_err, sizeof rs->last_err, "%s", msg);
            pthread_cond_signal(&rs->cv);
            pthread_mutex_unlock(&rs->mu);
            pipe_guard_end(op);
            return rk_store_fail(err, errlen, "redis unavailable: %s", msg);
        }
        int64_t left = deadline - mono_ms();
        if (left <= 0)
            break;
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_sec += left / 1000;
        ts.tv_nsec += (left % 1000) * 1000000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&rs->cv, &rs->mu, &ts);
    }
    pthread_mutex_unlock(&rs->mu);
    return rk_store_fail(err, errlen, "redis busy: no free connection within %d ms",
                         rs->op_timeout_ms);
}

/* Return a connection. A broken one is freed together with every idle one
 * (they share the server and are most likely dead too). */
static void op_end(struct rop *op)
{
    struct redis_store *rs = op->rs;
    pthread_mutex_lock(&rs->mu);
    rs->busy--;
    if (op->broken) {
        redisFree(op->c);
        free_contexts(rs->idle, rs->n_idle);
        rs->n_idle = 0;
    } else {
        rs->idle[rs->n_idle++] = op->c;
    }
    /* One connection (or one slot) became free: wake one waiter, not all of them. */
    pthread_cond_signal(&rs->cv);
    pthread_mutex_unlock(&rs->mu);
    pipe_guard_end(op);
    op->c = NULL;
}

/* Describe a connection-level failure and mark the connection broken. */
static rk_store_rc io_fail(struct rop *op, char *err, size_t errlen)
{
    op->broken = true;
    const char *why = op->c->err ? op->c->errstr : "no reply";
    if (op->c->err == REDIS_ERR_EOF || op->c->err == REDIS_ERR_IO)
        return rk_store_fail(err, errlen, "redis unavailable: %s", why);
    return rk_store_fail(err, errlen, "redis error: %s", why);
}

/* Describe an error reply (the connection stays usable). */
static rk_store_rc reply_fail(const redisReply *r, char *err, size_t errlen)
{
    return rk_store_fail(err, errlen, "redis error: %.*s", (int)(r->len > 160 ? 160 : r->len),
                         r->str ? r->str : "");
}

/* Send n commands in one round trip and read every reply; replies[i] are
 * filled on success. On failure nothing needs freeing. */
static rk_store_rc op_pipeline(struct rop *op, const struct cmd *cmds, size_t n,
                               redisReply **replies, char *err, size_t errlen)
{
    for (size_t i = 0; i < n; i++)
        replies[i] = NULL;
    for (size_t i = 0; i < n; i++)
        if (redisAppendCommandArgv(op->c, cmds[i].argc, (const char **)cmds[i].argv,
                                   cmds[i].lens) != REDIS_OK)
            return io_fail(op, err, errlen);
    for (size_t i = 0; i < n; i++) {
        void *r = NULL;
        if (redisGetReply(op->c, &r) != REDIS_OK || !r) {
            for (size_t j = 0; j < i; j++)
                freeReplyObject(replies[j]);
            if (r)
                freeReplyObject(r);
            return io_fail(op, err, errlen);
        }
        replies[i] = r;
    }
    return RK_STORE_OK;
}

/* Script digests learnt with SCRIPT LOAD, keyed by the script text's address (scripts are
 * static constants). */
#define SCRIPT_CACHE_MAX 32
static struct {
    const char *script;
    char sha[41];
} script_cache[SCRIPT_CACHE_MAX];
static int script_cache_len;
static pthread_mutex_t script_cache_mu = PTHREAD_MUTEX_INITIALIZER;

/* The SHA1 of script (SCRIPT LOAD on first use); 0 and sha filled, -1 to fall back to EVAL. */
static int script_sha(struct rop *op, const char *script, char sha[41])
{
    pthread_mutex_lock(&script_cache_mu);
    for (int i = 0; i < script_cache_len; i++)
        if (script_cache[i].script == script) {
            memcpy(sha, script_cache[i].sha, 41);
            pthread_mutex_unlock(&script_cache_mu);
            return 0;
        }
    pthread_mutex_unlock(&script_cache_mu);
    redisReply *r = redisCommand(op->c, "SCRIPT LOAD %s", script);
    if (!r) {
        op->broken = true;
        return -1;
    }
    int ok = r->type == REDIS_REPLY_STRING && r->len == 40;
    if (ok) {
        memcpy(sha, r->str, 40);
        sha[40] = '\0';
        pthread_mutex_lock(&script_cache_mu);
        if (script_cache_len < SCRIPT_CACHE_MAX) {
            script_cache[script_cache_len].script = script;
            memcpy(script_cache[script_cache_len].sha, sha, 41);
            script_cache_len++;
        }
        pthread_mutex_unlock(&script_cache_mu);
    }
    freeReplyObject(r);
    return ok ? 0 : -1;
}

/* Run one command on a checked-out connection; error replies become errors. EVAL is sent as
 * EVALSHA (the script's text crosses the wire once per server), and again as EVAL when the
 * server answers NOSCRIPT (restarted or SCRIPT FLUSH). */
static rk_store_rc op_command(struct rop *op, const struct cmd *c, redisReply **out, char *err,
                              size_t errlen)
{
    *out = NULL;
    redisReply *r = NULL;
    char sha[41];
    if (c->argc >= 2 && strcmp(c->argv[0], "EVAL") == 0 && script_sha(op, c->argv[1], sha) == 0) {
        struct cmd e = *c;
        e.argv[0] = "EVALSHA";
        e.lens[0] = 7;
        e.argv[1] = sha;
        e.lens[1] = 40;
        rk_store_rc rc = op_pipeline(op, &e, 1, &r, err, errlen);
        if (rc != RK_STORE_OK)
            return rc;
        if (r->type != REDIS_REPLY_ERROR || !r->str || strncmp(r->str, "NOSCRIPT", 8) != 0) {
            if (r->type == REDIS_REPLY_ERROR) {
                rc = reply_fail(r, err, errlen);
                freeReplyObject(r);
                return rc;
            }
            *out = r;
            return RK_STORE_OK;
        }
        freeReplyObject(r);
        r = NULL;
        pthread_mutex_lock(&script_cache_mu);
        script_cache_len = 0; /* the server lost its scripts: learn them again */
        pthread_mutex_unlock(&script_cache_mu);
    }
    if (op->broken)
        return io_fail(op, err, errlen);
    rk_store_rc rc = op_pipeline(op, c, 1, &r, err, errlen);
    if (rc != RK_STORE_OK)
        return rc;
    if (r->type == REDIS_REPLY_ERROR) {
        rc = reply_fail(r, err, errlen);
        freeReplyObject(r);
        return rc;
    }
    *out = r;
    return RK_STORE_OK;
}

/* Check out a connection, run one command, return the connection. */
static rk_store_rc run(struct redis_store *rs, const struct cmd *c, redisReply **out, char *err,
                       size_t errlen)
{
    struct rop op;
    *out = NULL;
    rk_store_rc rc = op_begin(rs, &op, err, errlen);
    if (rc != RK_STORE_OK)
        return rc;
    rc = op_command(&op, c, out, err, errlen);
    op_end(&op);
    return rc;
}

/* Run a command expecting an integer reply. */
static rk_store_rc run_int(struct redis_store *rs, const struct cmd *c, long long *val, char *err,
                           size_t errlen)
{
    redisReply *r = NULL;
    rk_store_rc rc = run(rs, c, &r, err, errlen);
    if (rc != RK_STORE_OK)
        return rc;
    if (r->type == REDIS_REPLY_INTEGER)
        *val = r->integer;
    else
        rc = rk_store_fail(err, errlen, "redis error: unexpected reply type %d", r->type);
    freeReplyObject(r);
    return rc;
}

/* Copy the string elements of an array reply into a malloc'd id list. */
static rk_store_rc ids_from_array(const redisReply *r, char ***ids_out, size_t *n_out, char *err,
                                  size_t errlen)
{
    if (r->type != REDIS_REPLY_ARRAY)
        return rk_store_fail(err, errlen, "redis error: unexpected reply type %d", r->type);
    char **ids = calloc(r->elements ? r->elements : 1, sizeof *ids);
    if (!ids)
        return rk_store_fail(err, errlen, "store: out of memory");
    size_t n = 0;
    for (size_t i = 0; i < r->elements; i++) {
        const redisReply *e = r->element[i];
        if (e->type != REDIS_REPLY_STRING)
            continue;
        ids[n] = strndup(e->str, e->len);
        if (!ids[n]) {
            rk_store_free_ids(ids, n);
            return rk_store_fail(err, errlen, "store: out of memory");
        }
        n++;
    }
    *ids_out = ids;
    *n_out = n;
    return RK_STORE_OK;
}

/* Free the store, its contexts and settings. */
static void redis_close(struct rk_store *st)
{
    struct redis_store *rs = rstore(st);
    free_contexts(rs->idle, rs->n_idle);
    free(rs->idle);
    free(rs->host);
    if (rs->password) {
        explicit_bzero(rs->password, strlen(rs->password));
        free(rs->password);
    }
    pthread_mutex_destroy(&rs->mu);
    pthread_cond_destroy(&rs->cv);
    free(rs);
}

/* PING the server. */
static rk_store_rc redis_ping(struct rk_store *st, char *err, size_t errlen)
{
    struct cmd c;
    redisReply *r = NULL;
    cmd_build(&c, "PING", (const char *)NULL);
    rk_store_rc rc = run(rstore(st), &c, &r, err, errlen);
    freeReplyObject(r);
    return rc;
}

/* Parse a record and add expire_time from a ZSCORE reply when active. */
static rk_store_rc record_from(const redisReply *rec, const redisReply *score, json_object **out,
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
    if (score && score->type == REDIS_REPLY_STRING && rk_store_rec_active(o)) {
        char buf[64];
        snprintf(buf, sizeof buf, "%.*s", (int)(score->len < 63 ? score->len : 63), score->str);
        json_object_object_add(o, "expire_time", json_object_new_int64((int64_t)strtod(buf, NULL)));
    }
    *out = o;
    return RK_STORE_OK;
}

/* Fetch n records and their idle deadlines in one MULTI/EXEC round trip. */
static rk_store_rc redis_get_many(struct rk_store *st, const char *const *ids, size_t n,
                                  json_object **out, char *err, size_t errlen)
{
    struct redis_store *rs = rstore(st);
    size_t ncmd = 2 * n + 2;
    struct cmd *cmds = calloc(ncmd, sizeof *cmds);
    char(*keys)[KEY_MAX] = malloc(n * sizeof *keys);
    redisReply **replies = calloc(ncmd, sizeof *replies);
    char zkey[KEY_MAX];
    rk_store_rc rc = RK_STORE_OK;
    if (!cmds || !keys || !replies) {
        rc = rk_store_fail(err, errlen, "store: out of memory");
        goto out;
    }
    key_of(rs, zkey, "expire", NULL);
    cmd_build(&cmds[0], "MULTI", (const char *)NULL);
    for (size_t i = 0; i < n; i++) {
        cmd_build(&cmds[1 + 2 * i], "GET", key_of(rs, keys[i], "sandbox:", ids[i]),
                  (const char *)NULL);
        cmd_build(&cmds[2 + 2 * i], "ZSCORE", zkey, ids[i], (const char *)NULL);
    }
    cmd_build(&cmds[ncmd - 1], "EXEC", (const char *)NULL);
    struct rop op;
    rc = op_begin(rs, &op, err, errlen);
    if (rc != RK_STORE_OK)
        goto out;
    rc = op_pipeline(&op, cmds, ncmd, replies, err, errlen);
    op_end(&op);
    if (rc != RK_STORE_OK)
        goto out;
    const redisReply *ex = replies[ncmd - 1];
    if (ex->type == REDIS_REPLY_ERROR) {
        rc = reply_fail(ex, err, errlen);
        goto out;
    }
    if (ex->type != REDIS_REPLY_ARRAY || ex->elements != 2 * n) {
        rc = rk_store_fail(err, errlen, "redis error: unexpected EXEC reply");
        goto out;
    }
    for (size_t i = 0; i < n && rc == RK_STORE_OK; i++) {
        const redisReply *rec = ex->element[2 * i];
        if (rec->type == REDIS_REPLY_ERROR) {
            rc = reply_fail(rec, err, errlen);
            break;
        }
        rk_store_rc r = record_from(rec, ex->element[2 * i + 1], &out[i], ids[i], err, errlen);
        if (r == RK_STORE_ERROR)
            rc = r;
    }
    if (rc != RK_STORE_OK)
        for (size_t i = 0; i < n; i++) {
            json_object_put(out[i]);
            out[i] = NULL;
        }
out:
    if (replies)
        for (size_t i = 0; i < ncmd; i++)
            if (replies[i])
                freeReplyObject(replies[i]);
    free(replies);
    free(keys);
    free(cmds);
    return rc;
}

/* Fetch one record. */
static rk_store_rc redis_get(struct rk_store *st, const char *id, json_object **out, char *err,
                             size_t errlen)
{
    const char *ids[1] = {id};
    rk_store_rc rc = redis_get_many(st, ids, 1, out, err, errlen);
    if (rc == RK_STORE_OK && !*out)
        return RK_STORE_NOT_FOUND;
    return rc;
}

/* Insert a record unless the id is in the active set (one Lua script). */
static rk_store_rc redis_create(struct rk_store *st, const char *id, json_object *rec,
                                int64_t expire_time, char *err, size_t errlen)
{
    struct redis_store *rs = rstore(st);
    char k1[KEY_MAX], k2[KEY_MAX], k3[KEY_MAX], exp[32];
    snprintf(exp, sizeof exp, "%lld", (long long)(expire_time > 0 ? expire_time : 0));
    const char *json = json_object_to_json_string_ext(rec, JSON_C_TO_STRING_PLAIN);
    if (!json)
        return rk_store_fail(err, errlen, "store: out of memory");
    struct cmd c;
    cmd_build(&c, "EVAL", LUA_CREATE, "3", key_of(rs, k1, "sandbox:", id),
              key_of(rs, k2, "active", NULL), key_of(rs, k3, "expire", NULL), id, json,
              rk_store_rec_active(rec) ? "1" : "0", exp, (const char *)NULL);
    long long v = 0;
    rk_store_rc rc = run_int(rs, &c, &v, err, errlen);
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
    cmd_build(&c, "UNWATCH", (const char *)NULL);
    if (op_command(op, &c, &r, scratch, sizeof scratch) == RK_STORE_OK)
        freeReplyObject(r);
}

/* One optimistic attempt of rk_store_update: 1 means "retry". */
static int update_attempt(struct rop *op, const char *id, rk_store_update_fn fn, void *ctx,
                          json_object **out, rk_store_rc *rc, char *err, size_t errlen)
{
    struct redis_store *rs = op->rs;
    char rkey[KEY_MAX], akey[KEY_MAX], zkey[KEY_MAX];
    key_of(rs, rkey, "sandbox:", id);
    key_of(rs, akey, "active", NULL);
    key_of(rs, zkey, "expire", NULL);
    struct cmd rd[3];
    redisReply *rr[3];
    cmd_build(&rd[0], "WATCH", rkey, (const char *)NULL);
    cmd_build(&rd[1], "GET", rkey, (const char *)NULL);
    cmd_build(&rd[2], "ZSCORE", zkey, id, (const char *)NULL);
    *rc = op_pipeline(op, rd, 3, rr, err, errlen);
    if (*rc != RK_STORE_OK)
        return 0;
    json_object *rec = NULL;
    for (int i = 0; i < 3; i++)
        if (rr[i]->type == REDIS_REPLY_ERROR && *rc == RK_STORE_OK)
            *rc = reply_fail(rr[i], err, errlen);
    if (*rc == RK_STORE_OK)
        *rc = record_from(rr[1], NULL, &rec, id, err, errlen);
    char score[64] = "";
    if (rr[2]->type == REDIS_REPLY_STRING)
        snprintf(score, sizeof score, "%.*s", (int)(rr[2]->len < 63 ? rr[2]->len : 63), rr[2]->str);
    for (int i = 0; i < 3; i++)
        freeReplyObject(rr[i]);
    if (*rc != RK_STORE_OK) {
        unwatch(op);
        return 0;
    }
    int f = fn(rec, ctx);
    if (f != 0 || !json_object_is_type(rec, json_type_object)) {
        *rc = f == 1 ? RK_STORE_ABORTED
              : f == 0
                  ? rk_store_fail(err, errlen, "store: update produced a non-object for %s", id)
                  : rk_store_fail(err, errlen, "store: update callback failed for %s", id);
        json_object_put(rec);
        unwatch(op);
        return 0;
    }
    bool active = rk_store_rec_active(rec);
    const char *json = json_object_to_json_string_ext(rec, JSON_C_TO_STRING_PLAIN);
    if (!json) {
        *rc = rk_store_fail(err, errlen, "store: out of memory");
        json_object_put(rec);
        unwatch(op);
        return 0;
    }
    struct cmd wr[5];
    redisReply *wrr[5];
    int nw = 0;
    cmd_build(&wr[nw++], "MULTI", (const char *)NULL);
    cmd_build(&wr[nw++], "SET", rkey, json, (const char *)NULL);
    if (active) {
        cmd_build(&wr[nw++], "SADD", akey, id, (const char *)NULL);
    } else {
        cmd_build(&wr[nw++], "SREM", akey, id, (const char *)NULL);
        cmd_build(&wr[nw++], "ZREM", zkey, id, (const char *)NULL);
    }
    cmd_build(&wr[nw++], "EXEC", (const char *)NULL);
    *rc = op_pipeline(op, wr, (size_t)nw, wrr, err, errlen);
    if (*rc != RK_STORE_OK) {
        json_object_put(rec);
        return 0;
    }
    const redisReply *ex = wrr[nw - 1];
    int retry = 0;
    if (ex->type == REDIS_REPLY_NIL) {
        retry = 1;
    } else if (ex->type == REDIS_REPLY_ERROR) {
        *rc = reply_fail(ex, err, errlen);
    } else if (ex->type != REDIS_REPLY_ARRAY) {
        *rc = rk_store_fail(err, errlen, "redis error: unexpected EXEC reply");
    } else {
        for (size_t i = 0; i < ex->elements && *rc == RK_STORE_OK; i++)
            if (ex->element[i]->type == REDIS_REPLY_ERROR)
                *rc = reply_fail(ex->element[i], err, errlen);
    }
    for (int i = 0; i < nw; i++)
        freeReplyObject(wrr[i]);
    if (!retry && *rc == RK_STORE_OK && out) {
        if (active && score[0])
            json_object_object_add(rec, "expire_time",
                                   json_object_new_int64((int64_t)strtod(score, NULL)));
        *out = rec;
        rec = NULL;
    }
    json_object_put(rec);
    return retry;
}

/* Optimistic read-modify-write with WATCH/MULTI/EXEC, at most 5 attempts. */
static rk_store_rc redis_update(struct rk_store *st, const char *id, rk_store_update_fn fn,
                                void *ctx, json_object **out, char *err, size_t errlen)
{
    struct rop op;
    rk_store_rc rc = op_begin(rstore(st), &op, err, errlen);
    if (rc != RK_STORE_OK)
        return rc;
    for (int attempt = 1; attempt <= RK_STORE_MAX_ATTEMPTS; attempt++) {
        if (!update_attempt(&op, id, fn, ctx, out, &rc, err, errlen)) {
            op_end(&op);
            return rc;
        }
        if (attempt < RK_STORE_MAX_ATTEMPTS)
            retry_pause(attempt);
    }
    op_end(&op);
    return rk_store_fail(err, errlen, "store contention: too many concurrent updates");
}

/* SMEMBERS of the active set. */
static rk_store_rc redis_list_active(struct rk_store *st, char ***ids_out, size_t *n_out, char *err,
                                     size_t errlen)
{
    struct redis_store *rs = rstore(st);
    char k[KEY_MAX];
    struct cmd c;
    redisReply *r = NULL;
    cmd_build(&c, "SMEMBERS", key_of(rs, k, "active", NULL), (const char *)NULL);
    rk_store_rc rc = run(rs, &c, &r, err, errlen);
    if (rc == RK_STORE_OK)
        rc = ids_from_array(r, ids_out, n_out, err, errlen);
    if (r)
        freeReplyObject(r);
    return rc;
}

/* Set the idle deadline only for ids in the active set (one Lua script). */
static rk_store_rc redis_touch(struct rk_store *st, const char *id, int64_t expire_time, char *err,
                               size_t errlen)
{
    struct redis_store *rs = rstore(st);
    char k1[KEY_MAX], k2[KEY_MAX], exp[32];
    snprintf(exp, sizeof exp, "%lld", (long long)(expire_time > 0 ? expire_time : 0));
    struct cmd c;
    cmd_build(&c, "EVAL", LUA_TOUCH, "2", key_of(rs, k1, "active", NULL),
              key_of(rs, k2, "expire", NULL), id, exp, (const char *)NULL);
    long long v = 0;
    return run_int(rs, &c, &v, err, errlen);
}

/* ZRANGEBYSCORE expire -inf now LIMIT 0 max. */
static rk_store_rc redis_expired(struct rk_store *st, int64_t now, size_t max, char ***ids_out,
                                 size_t *n_out, char *err, size_t errlen)
{
    struct redis_store *rs = rstore(st);
    char k[KEY_MAX], nowbuf[32], maxbuf[32];
    snprintf(nowbuf, sizeof nowbuf, "%lld", (long long)now);
    snprintf(maxbuf, sizeof maxbuf, "%zu", max > (size_t)INT32_MAX ? (size_t)INT32_MAX : max);
    struct cmd c;
    redisReply *r = NULL;
    cmd_build(&c, "ZRANGEBYSCORE", key_of(rs, k, "expire", NULL), "-inf", nowbuf, "LIMIT", "0",
              maxbuf, (const char *)NULL);
    rk_store_rc rc = run(rs, &c, &r, err, errlen);
    if (rc == RK_STORE_OK)
        rc = ids_from_array(r, ids_out, n_out, err, errlen);
    if (r)
        freeReplyObject(r);
    return rc;
}

/* SET <p>claim:<name> 1 NX EX ttl. */
static rk_store_rc redis_claim(struct rk_store *st, const char *name, int ttl_s, char *err,
                               size_t errlen)
{
    struct redis_store *rs = rstore(st);
    char k[KEY_MAX], ttl[16];
    snprintf(ttl, sizeof ttl, "%d", ttl_s);
    struct cmd c;
    redisReply *r = NULL;
    cmd_build(&c, "SET", key_of(rs, k, "claim:", name), "1", "NX", "EX", ttl, (const char *)NULL);
    rk_store_rc rc = run(rs, &c, &r, err, errlen);
    if (rc != RK_STORE_OK)
        return rc;
    rc = r->type == REDIS_REPLY_NIL ? RK_STORE_EXISTS : RK_STORE_OK;
    freeReplyObject(r);
    return rc;
}

/* Reserve a session name (Lua; Redis TIME is the clock). */
static rk_store_rc redis_reserve(struct rk_store *st, const char *sandbox_id, const char *name,
                                 int ttl_s, const char *token, char *err, size_t errlen)
{
    struct redis_store *rs = rstore(st);
    char k[KEY_MAX], ttl[32];
    snprintf(ttl, sizeof ttl, "%lld", (long long)ttl_s * 1000);
    struct cmd c;
    cmd_build(&c, "EVAL", LUA_RESERVE, "1", key_of(rs, k, "sessions:", sandbox_id), name, token,
              ttl, (const char *)NULL);
    long long v = 0;
    rk_store_rc rc = run_int(rs, &c, &v, err, errlen);
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
    cmd_build(&c, "EVAL", LUA_COMMIT, "1", key_of(rs, k, "sessions:", sandbox_id), name, token,
              value, (const char *)NULL);
    long long v = 0;
    rk_store_rc rc = run_int(rs, &c, &v, err, errlen);
    if (rc != RK_STORE_OK)
        return rc;
    return v == 1 ? RK_STORE_OK : RK_STORE_CONFLICT;
}

/* Replace our reservation with "s:<session id>". */
static rk_store_rc redis_commit(struct rk_store *st, const char *sandbox_id, const char *name,
                                const char *token, const char *session_id, char *err, size_t errlen)
{
    char *value = rk_store_session_value(session_id);
    if (!value)
        return rk_store_fail(err, errlen, "store: out of memory");
    rk_store_rc rc = finish_reservation(rstore(st), sandbox_id, name, token, value, err, errlen);
    free(value);
    return rc;
}

/* Delete our reservation. */
static rk_store_rc redis_rollback(struct rk_store *st, const char *sandbox_id, const char *name,
                                  const char *token, char *err, size_t errlen)
{
    return finish_reservation(rstore(st), sandbox_id, name, token, "", err, errlen);
}

/* HGET and accept only committed mappings. */
static rk_store_rc redis_session_get(struct rk_store *st, const char *sandbox_id, const char *name,
                                     char **session_id_out, char *err, size_t errlen)
{
    struct redis_store *rs = rstore(st);
    char k[KEY_MAX];
    struct cmd c;
    redisReply *r = NULL;
    cmd_build(&c, "HGET", key_of(rs, k, "sessions:", sandbox_id), name, (const char *)NULL);
    rk_store_rc rc = run(rs, &c, &r, err, errlen);
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
static rk_store_rc redis_session_remove(struct rk_store *st, const char *sandbox_id,
                                        const char *name, const char *expected, char *err,
                                        size_t errlen)
{
    struct redis_store *rs = rstore(st);
    char *value = rk_store_session_value(expected);
    if (!value)
        return rk_store_fail(err, errlen, "store: out of memory");
    char k[KEY_MAX];
    struct cmd c;
    cmd_build(&c, "EVAL", LUA_REMOVE, "1", key_of(rs, k, "sessions:", sandbox_id), name, value,
              (const char *)NULL);
    long long v = 0;
    rk_store_rc rc = run_int(rs, &c, &v, err, errlen);
    free(value);
    if (rc != RK_STORE_OK)
        return rc;
    return v == 1 ? RK_STORE_OK : v == 0 ? RK_STORE_CONFLICT : RK_STORE_NOT_FOUND;
}

/* DEL the sandbox's session hash. */
static rk_store_rc redis_session_clear(struct rk_store *st, const char *sandbox_id, char *err,
                                       size_t errlen)
{
    struct redis_store *rs = rstore(st);
    char k[KEY_MAX];
    struct cmd c;
    cmd_build(&c, "DEL", key_of(rs, k, "sessions:", sandbox_id), (const char *)NULL);
    long long v = 0;
    return run_int(rs, &c, &v, err, errlen);
}

/* HLEN of the sandbox's session hash. */
static rk_store_rc redis_session_count(struct rk_store *st, const char *sandbox_id, size_t *n_out,
                                       char *err, size_t errlen)
{
    struct redis_store *rs = rstore(st);
    char k[KEY_MAX];
    struct cmd c;
    cmd_build(&c, "HLEN", key_of(rs, k, "sessions:", sandbox_id), (const char *)NULL);
    long long v = 0;
    rk_store_rc rc = run_int(rs, &c, &v, err, errlen);
    if (rc == RK_STORE_OK)
        *n_out = v > 0 ? (size_t)v : 0;
    return rc;
}

/* ---- issue 15: get-and-touch in one round trip, reconciler lease ---------------------- */

/* GET the record and its idle deadline; when the id is active and the record has a positive
 * auto_clear_time (minutes), move the deadline to now + minutes*60 if that is later. The
 * deadline has 1 s resolution, so the ZADD is written at most once per second per sandbox. */
static const char LUA_GET_TOUCH[] =
    "local rec = redis.call('GET', KEYS[1])\n"
    "if not rec then return false end\n"
    "local mark = redis.call('GET', KEYS[4])\n"
    "local score = redis.call('ZSCORE', KEYS[3], ARGV[1])\n"
    "if tonumber(ARGV[2]) > 0 and redis.call('SISMEMBER', KEYS[2], ARGV[1]) == 1 then\n"
    "  local m = tonumber(string.match(rec, '\"auto_clear_time\":%s*(%d+)'))\n"
    "  if m and m > 0 then\n"
    "    local d = tonumber(ARGV[2]) + m * 60\n"
    "    if not score or d > tonumber(score) then\n"
    "      redis.call('ZADD', KEYS[3], d, ARGV[1])\n"
    "      score = tostring(d)\n"
    "    end\n"
    "  end\n"
    "end\n"
    "return {rec, score or false, mark or false}\n";

/* Take or renew a lease: set when free or already ours, with a TTL in ms. */
static const char LUA_LEASE[] = "local v = redis.call('GET', KEYS[1])\n"
                                "if v and v ~= ARGV[1] then return 0 end\n"
                                "redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])\n"
                                "return 1\n";

/* One EVALSHA: record + idle deadline, with the throttled idle touch. */
static rk_store_rc redis_get_touch(struct rk_store *st, const char *id, int64_t now_s,
                                   json_object **out, char *mark, size_t marklen, char *err,
                                   size_t errlen)
{
    struct redis_store *rs = rstore(st);
    char k1[KEY_MAX], k2[KEY_MAX], k3[KEY_MAX], k4[KEY_MAX], nowbuf[32];
    snprintf(nowbuf, sizeof nowbuf, "%lld", (long long)(now_s > 0 ? now_s : 0));
    struct cmd c;
    cmd_build(&c, "EVAL", LUA_GET_TOUCH, "4", key_of(rs, k1, "sandbox:", id),
              key_of(rs, k2, "active", NULL), key_of(rs, k3, "expire", NULL),
              key_of(rs, k4, "reconcile_mark", NULL), id, nowbuf, (const char *)NULL);
    redisReply *r = NULL;
    rk_store_rc rc = run(rs, &c, &r, err, errlen);
    if (rc != RK_STORE_OK)
        return rc;
    if (r->type == REDIS_REPLY_NIL) {
        rc = RK_STORE_NOT_FOUND;
    } else if (r->type != REDIS_REPLY_ARRAY || r->elements < 1) {
        rc = rk_store_fail(err, errlen, "redis error: unexpected reply type %d", r->type);
    } else {
        rc = record_from(r->element[0], r->elements > 1 ? r->element[1] : NULL, out, id, err,
                         errlen);
        if (mark && marklen && r->elements > 2 && r->element[2]->type == REDIS_REPLY_STRING)
            snprintf(mark, marklen, "%.*s", (int)r->element[2]->len, r->element[2]->str);
    }
    freeReplyObject(r);
    return rc;
}

/* SET <p>lease:<name> owner PX ttl when free or ours (one script). */
static rk_store_rc redis_lease(struct rk_store *st, const char *name, const char *owner, int ttl_ms,
                               char *err, size_t errlen)
{
    struct redis_store *rs = rstore(st);
    char k[KEY_MAX], ttl[16];
    snprintf(ttl, sizeof ttl, "%d", ttl_ms > 0 ? ttl_ms : 1);
    struct cmd c;
    cmd_build(&c, "EVAL", LUA_LEASE, "1", key_of(rs, k, "lease:", name), owner, ttl,
              (const char *)NULL);
    long long v = 0;
    rk_store_rc rc = run_int(rs, &c, &v, err, errlen);
    if (rc != RK_STORE_OK)
        return rc;
    return v == 1 ? RK_STORE_OK : RK_STORE_EXISTS;
}

/* SET <p>reconcile_mark value. */
static rk_store_rc redis_set_mark(struct rk_store *st, const char *value, char *err, size_t errlen)
{
    struct redis_store *rs = rstore(st);
    char k[KEY_MAX], v[RK_STORE_MARK_MAX];
    snprintf(v, sizeof v, "%s", value);
    struct cmd c;
    redisReply *r = NULL;
    cmd_build(&c, "SET", key_of(rs, k, "reconcile_mark", NULL), v, (const char *)NULL);
    rk_store_rc rc = run(rs, &c, &r, err, errlen);
    freeReplyObject(r);
    return rc;
}

static const struct rk_store_ops redis_ops = {
    .close = redis_close,
    .ping = redis_ping,
    .get = redis_get,
    .get_many = redis_get_many,
    .create = redis_create,
    .update = redis_update,
    .list_active = redis_list_active,
    .touch = redis_touch,
    .expired = redis_expired,
    .claim = redis_claim,
    .reserve = redis_reserve,
    .commit = redis_commit,
    .rollback = redis_rollback,
    .session_get = redis_session_get,
    .session_remove = redis_session_remove,
    .session_clear = redis_session_clear,
    .session_count = redis_session_count,
    .get_touch = redis_get_touch,
    .lease = redis_lease,
    .set_mark = redis_set_mark,
};

/* Open the Redis store; connections are made on first use. */
struct rk_store *rk_store_open_redis(const struct rk_redis_cfg *cfg)
{
    if (!cfg || !cfg->host || !cfg->host[0]) {
        rk_err("store: redis host is not set");
        return NULL;
    }
    const char *prefix = cfg->key_prefix ? cfg->key_prefix : "rock:";
    if (strlen(prefix) > PREFIX_MAX) {
        rk_err("store: redis key prefix longer than %d characters", PREFIX_MAX);
        return NULL;
    }
    /* Writes to a closed Redis socket must fail with EPIPE, not kill the process: ignore
     * SIGPIPE once (unless the embedding program installed its own handler). */
    struct sigaction sa_old;
    if (sigaction(SIGPIPE, NULL, &sa_old) == 0 && sa_old.sa_handler == SIG_DFL)
        signal(SIGPIPE, SIG_IGN);
    struct redis_store *rs = calloc(1, sizeof *rs);
    if (!rs)
        return NULL;
    rs->port = cfg->port > 0 ? cfg->port : 6379;
    rs->db = cfg->db;
    rs->connect_timeout_ms = cfg->connect_timeout_ms > 0 ? cfg->connect_timeout_ms : 2000;
    rs->op_timeout_ms = cfg->op_timeout_ms > 0 ? cfg->op_timeout_ms : 2000;
    rs->pool_size = cfg->pool_size > 0 ? cfg->pool_size : 16;
    snprintf(rs->prefix, sizeof rs->prefix, "%s", prefix);
    rs->host = strdup(cfg->host);
    rs->password = cfg->password && cfg->password[0] ? strdup(cfg->password) : NULL;
    rs->idle = calloc((size_t)rs->pool_size, sizeof *rs->idle);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int cv_ok = pthread_cond_init(&rs->cv, &ca) == 0;
    pthread_condattr_destroy(&ca);
    if (!rs->host || (cfg->password && cfg->password[0] && !rs->password) || !rs->idle || !cv_ok) {
        if (cv_ok)
            pthread_cond_destroy(&rs->cv);
        free(rs->host);
        free(rs->password);
        free(rs->idle);
        free(rs);
        return NULL;
    }
    pthread_mutex_init(&rs->mu, NULL);
    rk_store_base_init(&rs->base, &redis_ops, 1);
    return &rs->base;
}
