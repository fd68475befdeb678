/* SPDX-License-Identifier: Apache-2.0 */
/* Redis store (hiredis 0.14, plain Redis types). Key layout under a prefix p:
 *   <p>sandbox:<id>        string, the record's JSON text
 *   <p>active              set of active sandbox ids
 *   <p>expire              sorted set, active id -> idle deadline (epoch s)
 *   <p>claim:<name>        string with a TTL (SET NX EX)
 *   <p>sessions:<sandbox>  hash, name -> "s:<session id>" | "r:<token>:<deadline ms>"
 *   <p>bycreated           sorted set (all scores 0) of "<create_time>\x01<id>" of
 *                          active ids: list pages in list order with ZRANGE
 *   <p>state:pending|running  set per active state (counts for /metrics)
 *   <p>index:v2            marker: the two indexes above are complete (rebuilt
 *                          once from <p>active for data written before them)
 * Record creation, touch and every registry change are Lua scripts (atomic in
 * Redis); rk_store_update is WATCH/MULTI/EXEC with at most 5 attempts.
 * Connections come from a bounded pool; broken ones are freed and reconnection
 * is lazy with an exponential backoff shared by the pool.
 *
 * High availability: with sentinels configured the master's address comes
 * from SENTINEL get-master-addr-by-name (first sentinel that answers), every
 * new connection checks ROLE is "master", and the address is forgotten (so the
 * next connection asks the sentinels again) when a connection breaks, a reply
 * is -READONLY/-LOADING/-MASTERDOWN, or the ROLE check fails. With
 * min_replicas_ack > 0 the writes that matter are followed by WAIT on the same
 * connection (pipelined when the write is one command); fewer confirmations
 * than asked is an error. Records in state "deleted" are written with a TTL of
 * the deleted retention. get_many works in chunks of GET_CHUNK ids, one round
 * trip each. */
#include "store/store_common.h"
#include "obs/log.h"

#include <errno.h>
#include <hiredis/hiredis.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PREFIX_MAX 64
#define KEY_MAX (PREFIX_MAX + RK_STORE_MAX_NAME + 16)
#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 5000
#define MAX_ARGS 16
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
    bool master_known;     /* sentinel mode: cur_host/cur_port are current */
    int next_sentinel;     /* ask this one first */
    int64_t index_seen_ms; /* monotonic time index:v2 was last seen; 0 = never */
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
    "if tonumber(ARGV[5]) > 0 then redis.call('SET', KEYS[1], ARGV[2], 'EX', ARGV[5])\n"
    "else redis.call('SET', KEYS[1], ARGV[2]) end\n"
    "if ARGV[3] == '1' then\n"
    "  redis.call('SADD', KEYS[2], ARGV[1])\n"
    "  if tonumber(ARGV[4]) > 0 then redis.call('ZADD', KEYS[3], ARGV[4], ARGV[1])\n"
    "  else redis.call('ZREM', KEYS[3], ARGV[1]) end\n"
    "  redis.call('ZADD', KEYS[4], 0, ARGV[6])\n"
    "  local on, off = KEYS[6], KEYS[5]\n"
    "  if ARGV[7] == 'pending' then on, off = KEYS[5], KEYS[6] end\n"
    "  redis.call('SADD', on, ARGV[1])\n"
    "  redis.call('SREM', off, ARGV[1])\n"
    "else\n"
    "  redis.call('ZREM', KEYS[3], ARGV[1])\n"
    "end\n"
    "return 1\n";

/* Undo our create (KEYS as LUA_CREATE) if the record is still exactly what we
 * wrote (ARGV[2]); used when replicas did not confirm it. */
static const char LUA_UNCREATE[] = "if redis.call('GET', KEYS[1]) ~= ARGV[2] then return 0 end\n"
                                   "redis.call('DEL', KEYS[1])\n"
                                   "redis.call('SREM', KEYS[2], ARGV[1])\n"
                                   "redis.call('ZREM', KEYS[3], ARGV[1])\n"
                                   "redis.call('ZREM', KEYS[4], ARGV[3])\n"
                                   "redis.call('SREM', KEYS[5], ARGV[1])\n"
                                   "redis.call('SREM', KEYS[6], ARGV[1])\n"
                                   "return 1\n";

/* Turn our unconfirmed commit (ARGV[2], the "s:" value of name ARGV[1]) back
 * into our reservation, already expired ("r:<token ARGV[3]>:0"): the caller's
 * rollback then removes it, and nobody is blocked if it does not. */
static const char LUA_UNCOMMIT[] =
    "if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then return 0 end\n"
    "redis.call('HSET', KEYS[1], ARGV[1], 'r:' .. ARGV[3] .. ':0')\n"
    "return 1\n";

/* Index the given active ids (ARGV[2..]) under prefix ARGV[1] in bycreated
 * and the per-state sets; ids no longer active are skipped. */
static const char LUA_REINDEX[] =
    "local p = ARGV[1]\n"
    "for i = 2, #ARGV do\n"
    "  local id = ARGV[i]\n"
    "  local v = redis.call('GET', p .. 'sandbox:' .. id)\n"
    "  if v and redis.call('SISMEMBER', p .. 'active', id) == 1 then\n"
    "    local ok, rec = pcall(cjson.decode, v)\n"
    "    if ok and type(rec) == 'table' then\n"
    "      local t = rec['create_time']\n"
    "      if type(t) ~= 'string' then t = '' end\n"
    "      redis.call('ZADD', p .. 'bycreated', 0, t .. '\\1' .. id)\n"
    "      if rec['state'] == 'pending' then redis.call('SADD', p .. 'state:pending', id)\n"
    "      else redis.call('SADD', p .. 'state:running', id) end\n"
    "    end\n"
    "  end\n"
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

/* Open host:port, authenticate (AUTH [user] password when password is set)
 * and select db (when not 0); NULL with msg filled on failure. */
static redisContext *connect_one(struct redis_store *rs, const char *host, int port,
                                 const char *user, const char *password, int db, char *msg,
                                 size_t msglen)
{
    struct timeval ct = {rs->connect_timeout_ms / 1000, (rs->connect_timeout_ms % 1000) * 1000};
    struct timeval ot = {rs->op_timeout_ms / 1000, (rs->op_timeout_ms % 1000) * 1000};
    redisContext *c = redisConnectWithTimeout(host, port, ct);
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
    if (password && password[0] && user && user[0])
        cmd_build(&steps[nsteps++], "AUTH", user, password, (const char *)NULL);
    else if (password && password[0])
        cmd_build(&steps[nsteps++], "AUTH", password, (const char *)NULL);
    if (db != 0) {
        snprintf(dbbuf, sizeof dbbuf, "%d", db);
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

/* Ask the sentinels, in turn, for the master's address. 0 on success. */
static int discover_master(struct redis_store *rs, char host[HOST_MAX], int *port, char *msg,
                           size_t msglen)
{
    pthread_mutex_lock(&rs->mu);
    int first = rs->next_sentinel;
    pthread_mutex_unlock(&rs->mu);
    char why[128] = "no sentinel configured";
    for (int k = 0; k < rs->n_sentinels; k++) {
        int i = (first + k) % rs->n_sentinels;
        const struct sentinel_addr *sa = &rs->sentinels[i];
        redisContext *c = connect_one(rs, sa->host, sa->port, rs->sentinel_username,
                                      rs->sentinel_password, 0, why, sizeof why);
        if (!c) {
            snprintf(msg, msglen, "sentinel %.60s:%d: %.50s", sa->host, sa->port, why);
            continue;
        }
        redisReply *r = redisCommand(c, "SENTINEL get-master-addr-by-name %s", rs->master_name);
        int ok = r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
                 r->element[0]->type == REDIS_REPLY_STRING &&
                 r->element[1]->type == REDIS_REPLY_STRING && r->element[0]->len < HOST_MAX;
        if (ok) {
            snprintf(host, HOST_MAX, "%.*s", (int)r->element[0]->len, r->element[0]->str);
            *port = atoi(r->element[1]->str);
            ok = *port > 0 && *port <= 65535;
        }
        if (!ok) {
            if (!r)
                snprintf(why, sizeof why, "%.100s", c->errstr);
            else if (r->type == REDIS_REPLY_ERROR)
                snprintf(why, sizeof why, "%.*s", (int)(r->len > 100 ? 100 : r->len), r->str);
            else
                snprintf(why, sizeof why, "does not know master \"%.64s\"", rs->master_name);
        }
        if (r)
            freeReplyObject(r);
        redisFree(c);
        if (ok) {
            pthread_mutex_lock(&rs->mu);
            rs->next_sentinel = i;
            pthread_mutex_unlock(&rs->mu);
            return 0;
        }
        snprintf(msg, msglen, "sentinel %.60s:%d: %.50s", sa->host, sa->port, why);
    }
    if (rs->n_sentinels == 0)
        snprintf(msg, msglen, "%s", why);
    return -1;
}

/* Check a fresh connection talks to a master (ROLE). 0 if it does. */
static int verify_master(redisContext *c, const char *host, int port, char *msg, size_t msglen)
{
    redisReply *r = redisCommand(c, "ROLE");
    int ok = r && r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
             r->element[0]->type == REDIS_REPLY_STRING && r->element[0]->len == 6 &&
             memcmp(r->element[0]->str, "master", 6) == 0;
    if (!ok) {
        if (!r)
            snprintf(msg, msglen, "ROLE at %.50s:%d failed: %.40s", host, port, c->errstr);
        else if (r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
                 r->element[0]->type == REDIS_REPLY_STRING)
            snprintf(msg, msglen, "%.50s:%d is a %.*s, not the master", host, port,
                     (int)(r->element[0]->len > 16 ? 16 : r->element[0]->len), r->element[0]->str);
        else
            snprintf(msg, msglen, "ROLE at %.50s:%d: unexpected reply", host, port);
    }
    if (r)
        freeReplyObject(r);
    return ok ? 0 : -1;
}

/* Connect to the master: the fixed host, or the one the sentinels name (asked
 * again whenever the last known address went stale), checked with ROLE. */
static redisContext *connect_master(struct redis_store *rs, char *msg, size_t msglen)
{
    char host[HOST_MAX];
    int port;
    pthread_mutex_lock(&rs->mu);
    bool known = rs->n_sentinels == 0 || rs->master_known;
    snprintf(host, sizeof host, "%s", rs->cur_host);
    port = rs->cur_port;
    pthread_mutex_unlock(&rs->mu);
    if (!known) {
        if (discover_master(rs, host, &port, msg, msglen) != 0)
            return NULL;
        pthread_mutex_lock(&rs->mu);
        if (strcmp(rs->cur_host, host) != 0 || rs->cur_port != port)
            rk_info("store: sentinels name %s:%d as redis master \"%s\"", host, port,
                    rs->master_name);
        snprintf(rs->cur_host, sizeof rs->cur_host, "%s", host);
        rs->cur_port = port;
        rs->master_known = true;
        pthread_mutex_unlock(&rs->mu);
    }
    redisContext *c = connect_one(rs, host, port, rs->username, rs->password, rs->db, msg, msglen);
    if (c && rs->n_sentinels > 0 && verify_master(c, host, port, msg, msglen) != 0) {
        redisFree(c);
        c = NULL;
    }
    if (!c && rs->n_sentinels > 0) {
        pthread_mutex_lock(&rs->mu);
        rs->master_known = false;
        pthread_mutex_unlock(&rs->mu);
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
            op->c = connect_master(rs, msg, sizeof msg);
            pthread_mutex_lock(&rs->mu);
            if (op->c) {
                if (rs->backoff_ms > 0)
                    rk_info("store: redis connection to %s:%d restored", rs->cur_host,
                            rs->cur_port);
                rs->backoff_ms = 0;
                rs->retry_at_ms = 0;
                pthread_mutex_unlock(&rs->mu);
                return RK_STORE_OK;
            }
            rs->busy--;
            if (rs->backoff_ms == 0 && rs->n_sentinels > 0)
                rk_warn("store: redis master \"%s\" unavailable: %s", rs->master_name, msg);
            else if (rs->backoff_ms == 0)
                rk_warn("store: redis %s:%d unavailable: %s", rs->cur_host, rs->cur_port, msg);
            rs->backoff_ms = rs->backoff_ms == 0 ? BACKOFF_MIN_MS : rs->backoff_ms * 2;
            if (rs->backoff_ms > BACKOFF_MAX_MS)
                rs->backoff_ms = BACKOFF_MAX_MS;
            if (rs->n_sentinels > 0 && rs->backoff_ms > SENTINEL_BACKOFF_MAX_MS)
                rs->backoff_ms = SENTINEL_BACKOFF_MAX_MS;
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
        rs->master_known = false; /* sentinel mode: ask again on the next connect */
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

/* True for an error reply meaning "this server is not (or not yet) the
 * master": the connection is dropped so the master is discovered again. */
static bool wrong_server(const redisReply *r)
{
    if (r->type == REDIS_REPLY_ARRAY) {
        for (size_t i = 0; i < r->elements; i++)
            if (r->element[i] && wrong_server(r->element[i]))
                return true;
        return false;
    }
    if (r->type != REDIS_REPLY_ERROR || !r->str)
        return false;
    return strncmp(r->str, "READONLY", 8) == 0 || strncmp(r->str, "LOADING", 7) == 0 ||
           strncmp(r->str, "MASTERDOWN", 10) == 0 || strstr(r->str, "-READONLY") != NULL ||
           strstr(r->str, "READONLY You can't write") != NULL;
}

/* redisGetReply for a blocking context without hiredis's 16 KiB stack array. hiredis's
 * redisBufferRead reads into char[16384] on the stack, so every request thread that waits for a
 * Redis reply touches 16 KiB more of its stack, which stays resident for the thread's life (a
 * connection thread per in-flight request: 16 KiB x 5,000). Here the first read goes to a 2 KiB
 * stack buffer (a get_status reply fits; the frame stays shallower than where an in-flight
 * command waits) and only a longer reply gets a 16 KiB heap buffer, freed after the read. Same
 * errors as hiredis: a read timeout (SO_RCVTIMEO) or EOF sets c->err and fails. */
static int get_reply(redisContext *c, void **reply)
{
    void *aux = NULL;
    if (redisGetReplyFromReader(c, &aux) != REDIS_OK)
        return REDIS_ERR;
    if (aux == NULL) {
        int wdone = 0;
        do {
            if (redisBufferWrite(c, &wdone) != REDIS_OK)
                return REDIS_ERR;
        } while (!wdone);
        enum { FIRST_CHUNK = 2048, READ_CHUNK = 16 * 1024 };
        char first[FIRST_CHUNK];
        char *buf = first, *heap = NULL;
        size_t cap = sizeof first;
        int rc = REDIS_OK;
        while (aux == NULL && rc == REDIS_OK) {
            ssize_t n = read(c->fd, buf, cap);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0) {
                c->err = n == 0 ? REDIS_ERR_EOF : REDIS_ERR_IO;
                snprintf(c->errstr, sizeof c->errstr, "%s",
                         n == 0 ? "Server closed the connection" : strerror(errno));
                rc = REDIS_ERR;
            } else if (redisReaderFeed(c->reader, buf, (size_t)n) != REDIS_OK) {
                c->err = c->reader->err;
                snprintf(c->errstr, sizeof c->errstr, "%s", c->reader->errstr);
                rc = REDIS_ERR;
            } else if (redisGetReplyFromReader(c, &aux) != REDIS_OK) {
                rc = REDIS_ERR;
            } else if (aux == NULL && !heap && (heap = malloc(READ_CHUNK)) != NULL) {
                buf = heap; /* a long reply: read the rest in bigger chunks */
                cap = READ_CHUNK;
            }
        }
        free(heap);
        if (rc != REDIS_OK)
            return rc;
    }
    *reply = aux;
    return REDIS_OK;
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
        if (get_reply(op->c, &r) != REDIS_OK || !r) {
            for (size_t j = 0; j < i; j++)
                freeReplyObject(replies[j]);
            if (r)
                freeReplyObject(r);
            return io_fail(op, err, errlen);
        }
        replies[i] = r;
        if (wrong_server(r))
            op->broken = true;
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

/* Send n commands in one round trip on a pooled connection and read every reply (replies[i] are
 * the caller's to free on success). */
static rk_store_rc run_pipeline(struct redis_store *rs, const struct cmd *cmds, size_t n,
                                redisReply **replies, char *err, size_t errlen)
{
    struct rop op;
    rk_store_rc rc = op_begin(rs, &op, err, errlen);
    if (rc != RK_STORE_OK)
        return rc;
    rc = op_pipeline(&op, cmds, n, replies, err, errlen);
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

/* Format WAIT <min_replicas_ack> <wait_timeout_ms> into c (bufs hold the numbers). */
static void wait_cmd(const struct redis_store *rs, struct cmd *c, char nbuf[16], char tbuf[16])
{
    snprintf(nbuf, 16, "%d", rs->min_replicas_ack);
    snprintf(tbuf, 16, "%d", rs->wait_timeout_ms);
    cmd_build(c, "WAIT", nbuf, tbuf, (const char *)NULL);
}

/* Judge a WAIT reply: fewer confirmations than asked is an error. */
static rk_store_rc wait_result(const struct redis_store *rs, const redisReply *r, char *err,
                               size_t errlen)
{
    if (r->type == REDIS_REPLY_ERROR)
        return reply_fail(r, err, errlen);
    if (r->type != REDIS_REPLY_INTEGER)
        return rk_store_fail(err, errlen, "redis error: unexpected WAIT reply type %d", r->type);
    if (r->integer < rs->min_replicas_ack)
        return rk_store_fail(err, errlen,
                             "redis write not confirmed by %d replica(s) within %d ms (%lld did); "
                             "it may be lost if the master fails now; retry",
                             rs->min_replicas_ack, rs->wait_timeout_ms, r->integer);
    return RK_STORE_OK;
}

/* Fewer replicas than asked may mean a master the sentinels already replaced
 * (cut off from its replicas): in Sentinel mode drop the connection so the
 * next one asks the sentinels again. */
static void note_short_wait(struct rop *op, const redisReply *r)
{
    if (op->rs->n_sentinels > 0 && r->type == REDIS_REPLY_INTEGER &&
        r->integer < op->rs->min_replicas_ack)
        op->broken = true;
}

/* After a write on op's connection: WAIT for min_replicas_ack replicas. */
static rk_store_rc op_wait_replicas(struct rop *op, char *err, size_t errlen)
{
    struct redis_store *rs = op->rs;
    if (rs->min_replicas_ack <= 0)
        return RK_STORE_OK;
    char nbuf[16], tbuf[16];
    struct cmd c;
    redisReply *r = NULL;
    wait_cmd(rs, &c, nbuf, tbuf);
    rk_store_rc rc = op_pipeline(op, &c, 1, &r, err, errlen);
    if (rc != RK_STORE_OK)
        return rc;
    note_short_wait(op, r);
    rc = wait_result(rs, r, err, errlen);
    freeReplyObject(r);
    return rc;
}

/* Run a write expecting an integer reply; with min_replicas_ack > 0, WAIT is
 * pipelined behind it (same round trip) and must confirm the write. */
static rk_store_rc run_write_int(struct redis_store *rs, const struct cmd *c, long long *val,
                                 char *err, size_t errlen)
{
    if (rs->min_replicas_ack <= 0)
        return run_int(rs, c, val, err, errlen);
    struct rop op;
    rk_store_rc rc = op_begin(rs, &op, err, errlen);
    if (rc != RK_STORE_OK)
        return rc;
    char nbuf[16], tbuf[16];
    struct cmd cmds[2];
    redisReply *r[2];
    cmds[0] = *c;
    wait_cmd(rs, &cmds[1], nbuf, tbuf);
    rc = op_pipeline(&op, cmds, 2, r, err, errlen);
    if (rc == RK_STORE_OK)
        note_short_wait(&op, r[1]);
    op_end(&op);
    if (rc != RK_STORE_OK)
        return rc;
    if (r[0]->type == REDIS_REPLY_ERROR)
        rc = reply_fail(r[0], err, errlen);
    else if (r[0]->type != REDIS_REPLY_INTEGER)
        rc = rk_store_fail(err, errlen, "redis error: unexpected reply type %d", r[0]->type);
    else
        *val = r[0]->integer;
    if (rc == RK_STORE_OK)
        rc = wait_result(rs, r[1], err, errlen);
    freeReplyObject(r[0]);
    freeReplyObject(r[1]);
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
    if (rs->sentinel_password) {
        explicit_bzero(rs->sentinel_password, strlen(rs->sentinel_password));
        free(rs->sentinel_password);
    }
    free(rs->username);
    free(rs->sentinel_username);
    free(rs->master_name);
    free(rs->sentinels);
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
static rk_store_rc get_many_chunk(struct rk_store *st, const char *const *ids, size_t n,
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
    rc = run_pipeline(rs, cmds, ncmd, replies, err, errlen);
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

/* Fetch n records in chunks of GET_CHUNK (one round trip each), so a list of
 * 100,000 ids neither builds one huge transaction nor blocks Redis long. */
static rk_store_rc redis_get_many(struct rk_store *st, const char *const *ids, size_t n,
                                  json_object **out, char *err, size_t errlen)
{
    for (size_t off = 0; off < n; off += GET_CHUNK) {
        size_t m = n - off < GET_CHUNK ? n - off : GET_CHUNK;
        rk_store_rc rc = get_many_chunk(st, ids + off, m, out + off, err, errlen);
        if (rc != RK_STORE_OK) {
            for (size_t i = 0; i < off; i++) {
                json_object_put(out[i]);
                out[i] = NULL;
            }
            return rc;
        }
    }
    return RK_STORE_OK;
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
    char k1[KEY_MAX], k2[KEY_MAX], k3[KEY_MAX], k4[KEY_MAX], k5[KEY_MAX], k6[KEY_MAX], exp[32],
        ttl[32];
    snprintf(exp, sizeof exp, "%lld", (long long)(expire_time > 0 ? expire_time : 0));
    snprintf(ttl, sizeof ttl, "%lld",
             (long long)(rk_store_rec_deleted(rec) ? st->deleted_retention_s : 0));
    const char *json = json_object_to_json_string_ext(rec, JSON_C_TO_STRING_PLAIN);
    if (!json)
        return rk_store_fail(err, errlen, "store: out of memory");
    struct cmd c;
    char *lkey = rk_store_list_key(rec, id);
    json_object *stv = NULL;
    const char *state =
        json_object_object_get_ex(rec, "state", &stv) && stv ? json_object_get_string(stv) : "";
    if (!lkey)
        return rk_store_fail(err, errlen, "store: out of memory");
    cmd_build(&c, "EVAL", LUA_CREATE, "6", key_of(rs, k1, "sandbox:", id),
              key_of(rs, k2, "active", NULL), key_of(rs, k3, "expire", NULL),
              key_of(rs, k4, "bycreated", NULL), key_of(rs, k5, "state:pending", NULL),
              key_of(rs, k6, "state:running", NULL), (const char *)NULL);
    cmd_add(&c, id);
    cmd_add(&c, json);
    cmd_add(&c, rk_store_rec_active(rec) ? "1" : "0");
    cmd_add(&c, exp);
    cmd_add(&c, ttl);
    cmd_add(&c, lkey);
    cmd_add(&c, state);
    long long v = 0;
    rk_store_rc rc = run_write_int(rs, &c, &v, err, errlen);
    if (rc == RK_STORE_ERROR && v == 1) {
        /* Written but not confirmed by the replicas: the client is told it
         * failed, so take it back (best effort) and a retry with the same id
         * is not refused as a duplicate. */
        char scratch[RK_STORE_ERRLEN];
        long long undone = 0;
        cmd_build(&c, "EVAL", LUA_UNCREATE, "6", k1, k2, k3, k4, k5, k6, id, json, lkey,
                  (const char *)NULL);
        run_int(rs, &c, &undone, scratch, sizeof scratch);
    }
    free(lkey);
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

/* Key buffers of the list and per-state indexes. */
struct index_keys {
    char bycreated[KEY_MAX], pending[KEY_MAX], running[KEY_MAX];
};

/* Append the index maintenance of one record's write to a MULTI block:
 * active -> in bycreated under new_key (old_key dropped when it changed) and
 * in the set of its state; inactive -> out of both. */
static void index_cmds(const struct redis_store *rs, struct index_keys *k, struct cmd *wr, int *nw,
                       const char *id, bool active, bool pending, const char *old_key,
                       const char *new_key)
{
    key_of(rs, k->bycreated, "bycreated", NULL);
    key_of(rs, k->pending, "state:pending", NULL);
    key_of(rs, k->running, "state:running", NULL);
    if (active) {
        cmd_build(&wr[(*nw)++], "ZADD", k->bycreated, "0", new_key, (const char *)NULL);
        if (strcmp(old_key, new_key) != 0)
            cmd_build(&wr[(*nw)++], "ZREM", k->bycreated, old_key, (const char *)NULL);
        cmd_build(&wr[(*nw)++], "SADD", pending ? k->pending : k->running, id, (const char *)NULL);
        cmd_build(&wr[(*nw)++], "SREM", pending ? k->running : k->pending, id, (const char *)NULL);
    } else {
        cmd_build(&wr[(*nw)++], "ZREM", k->bycreated, old_key, new_key, (const char *)NULL);
        cmd_build(&wr[(*nw)++], "SREM", k->pending, id, (const char *)NULL);
        cmd_build(&wr[(*nw)++], "SREM", k->running, id, (const char *)NULL);
    }
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
    char *old_key = rk_store_list_key(rec, id);
    if (!old_key) {
        *rc = rk_store_fail(err, errlen, "store: out of memory");
        json_object_put(rec);
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
        free(old_key);
        unwatch(op);
        return 0;
    }
    bool active = rk_store_rec_active(rec);
    json_object *stv = NULL;
    bool pending = json_object_object_get_ex(rec, "state", &stv) &&
                   strcmp(json_object_get_string(stv), "pending") == 0;
    char *new_key = rk_store_list_key(rec, id);
    char ttl[32];
    snprintf(ttl, sizeof ttl, "%lld",
             (long long)(rk_store_rec_deleted(rec) ? rs->base.deleted_retention_s : 0));
    const char *json = json_object_to_json_string_ext(rec, JSON_C_TO_STRING_PLAIN);
    if (!json || !new_key) {
        *rc = rk_store_fail(err, errlen, "store: out of memory");
        json_object_put(rec);
        free(old_key);
        free(new_key);
        unwatch(op);
        return 0;
    }
    struct cmd wr[12];
    redisReply *wrr[12];
    struct index_keys ik;
    int nw = 0;
    cmd_build(&wr[nw++], "MULTI", (const char *)NULL);
    if (strcmp(ttl, "0") != 0) /* deleted: kept for the retention, then gone */
        cmd_build(&wr[nw++], "SET", rkey, json, "EX", ttl, (const char *)NULL);
    else
        cmd_build(&wr[nw++], "SET", rkey, json, (const char *)NULL);
    if (active) {
        cmd_build(&wr[nw++], "SADD", akey, id, (const char *)NULL);
    } else {
        cmd_build(&wr[nw++], "SREM", akey, id, (const char *)NULL);
        cmd_build(&wr[nw++], "ZREM", zkey, id, (const char *)NULL);
    }
    index_cmds(rs, &ik, wr, &nw, id, active, pending, old_key, new_key);
    cmd_build(&wr[nw++], "EXEC", (const char *)NULL);
    *rc = op_pipeline(op, wr, (size_t)nw, wrr, err, errlen);
    free(old_key);
    free(new_key);
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
            if (rc == RK_STORE_OK && op_wait_replicas(&op, err, errlen) != RK_STORE_OK) {
                rc = RK_STORE_ERROR;
                if (out) {
                    json_object_put(*out);
                    *out = NULL;
                }
            }
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
    rk_store_rc rc = run_write_int(rs, &c, &v, err, errlen);
    if (rc == RK_STORE_ERROR && v == 1) {
        /* Reserved but not confirmed: release it (best effort) so a retry of
         * the same name is not refused as taken. */
        char scratch[RK_STORE_ERRLEN];
        long long undone = 0;
        cmd_build(&c, "EVAL", LUA_COMMIT, "1", k, name, token, "", (const char *)NULL);
        run_int(rs, &c, &undone, scratch, sizeof scratch);
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
    cmd_build(&c, "EVAL", LUA_COMMIT, "1", key_of(rs, k, "sessions:", sandbox_id), name, token,
              value, (const char *)NULL);
    long long v = 0;
    rk_store_rc rc = run_write_int(rs, &c, &v, err, errlen);
    if (rc == RK_STORE_ERROR && v == 1 && value[0]) {
        /* Committed but not confirmed: the caller closes the backend session
         * and rolls back, so make the mapping our (expired) reservation again. */
        char scratch[RK_STORE_ERRLEN];
        long long undone = 0;
        cmd_build(&c, "EVAL", LUA_UNCOMMIT, "1", k, name, value, token, (const char *)NULL);
        run_int(rs, &c, &undone, scratch, sizeof scratch);
    }
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
    rk_store_rc rc = run_write_int(rs, &c, &v, err, errlen);
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
    return run_write_int(rs, &c, &v, err, errlen);
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

/* In-process throttle of the idle touch. The script moves a deadline at most once per second
 * (its now is in seconds), so once this process has touched a sandbox in the current second,
 * further reads in that second skip the script: plain MGET + ZSCORE in one round trip cost
 * Redis far less CPU than the script (measured: 22 us of Redis CPU per get_status with the
 * script on every read, on the same 2 cores as rock-admin). Slots are indexed by a hash of the id
 * and hold (hash high bits, second); a collision only causes an extra touch. */
#define TOUCH_SLOTS 4096
static _Atomic uint64_t touch_slots[TOUCH_SLOTS];

/* True when this process has not touched id in second now_s yet (and records that it does). */
static bool touch_due(const char *id, int64_t now_s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (const unsigned char *p = (const unsigned char *)id; *p; p++)
        h = (h ^ *p) * 1099511628211ull;
    uint64_t want = (h & 0xffffffff00000000ull) | (uint32_t)now_s;
    _Atomic uint64_t *slot = &touch_slots[h % TOUCH_SLOTS];
    if (atomic_load_explicit(slot, memory_order_relaxed) == want)
        return false;
    atomic_store_explicit(slot, want, memory_order_relaxed);
    return true;
}

/* Record, idle deadline and reconciler mark with two plain commands (MGET record mark, ZSCORE)
 * in one round trip, without the touch. */
__attribute__((noinline)) static rk_store_rc get_plain(struct redis_store *rs, const char *id,
                                                       json_object **out, char *mark,
                                                       size_t marklen, char *err, size_t errlen)
{
    char k1[KEY_MAX], k3[KEY_MAX], k4[KEY_MAX];
    struct cmd cmds[2];
    cmd_build(&cmds[0], "MGET", key_of(rs, k1, "sandbox:", id),
              key_of(rs, k4, "reconcile_mark", NULL), (const char *)NULL);
    cmd_build(&cmds[1], "ZSCORE", key_of(rs, k3, "expire", NULL), id, (const char *)NULL);
    redisReply *rep[2];
    rk_store_rc rc = run_pipeline(rs, cmds, 2, rep, err, errlen);
    if (rc != RK_STORE_OK)
        return rc;
    const redisReply *m = rep[0];
    if (m->type == REDIS_REPLY_ERROR) {
        rc = reply_fail(m, err, errlen);
    } else if (m->type != REDIS_REPLY_ARRAY || m->elements != 2) {
        rc = rk_store_fail(err, errlen, "redis error: unexpected reply type %d", m->type);
    } else {
        rc = record_from(m->element[0], rep[1], out, id, err, errlen);
        if (mark && marklen && m->element[1]->type == REDIS_REPLY_STRING)
            snprintf(mark, marklen, "%.*s", (int)m->element[1]->len, m->element[1]->str);
    }
    for (int i = 0; i < 2; i++)
        freeReplyObject(rep[i]);
    return rc;
}

/* Both reads are separate frames (not inlined into their caller): request threads of in-flight
 * commands keep whatever stack depth they once reached resident, so each path's key buffers
 * are only on the stack when that path runs. */
static rk_store_rc get_touch_script(struct redis_store *rs, const char *id, int64_t now_s,
                                    json_object **out, char *mark, size_t marklen, char *err,
                                    size_t errlen) __attribute__((noinline));

/* Record + idle deadline (+ mark): one EVALSHA with the idle touch, or, when this process
 * already touched the sandbox this second, plain reads (see touch_due). */
static rk_store_rc redis_get_touch(struct rk_store *st, const char *id, int64_t now_s,
                                   json_object **out, char *mark, size_t marklen, char *err,
                                   size_t errlen)
{
    struct redis_store *rs = rstore(st);
    if (now_s <= 0 || !touch_due(id, now_s))
        return get_plain(rs, id, out, mark, marklen, err, errlen);
    return get_touch_script(rs, id, now_s, out, mark, marklen, err, errlen);
}

/* The touching read: one EVALSHA of LUA_GET_TOUCH. */
static rk_store_rc get_touch_script(struct redis_store *rs, const char *id, int64_t now_s,
                                    json_object **out, char *mark, size_t marklen, char *err,
                                    size_t errlen)
{
    char k1[KEY_MAX], k2[KEY_MAX], k3[KEY_MAX], k4[KEY_MAX], nowbuf[32];
    snprintf(nowbuf, sizeof nowbuf, "%lld", (long long)now_s);
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

/* Make sure bycreated and the per-state sets cover data written before they
 * existed: when the marker index:v2 is missing (checked at most once a
 * minute), index every id of the active set, GET_CHUNK ids per script call,
 * then set the marker. Deleting the marker makes a running fleet re-index
 * (e.g. after a rolling upgrade from a version without these indexes). */
static rk_store_rc ensure_index(struct redis_store *rs, char *err, size_t errlen)
{
    pthread_mutex_lock(&rs->mu);
    bool ready = rs->index_seen_ms > 0 && mono_ms() - rs->index_seen_ms < INDEX_RECHECK_MS;
    pthread_mutex_unlock(&rs->mu);
    if (ready)
        return RK_STORE_OK;
    char mkey[KEY_MAX], akey[KEY_MAX];
    struct cmd c;
    redisReply *r = NULL;
    cmd_build(&c, "EXISTS", key_of(rs, mkey, "index:v2", NULL), (const char *)NULL);
    long long have = 0;
    rk_store_rc rc = run_int(rs, &c, &have, err, errlen);
    if (rc != RK_STORE_OK)
        return rc;
    if (!have) {
        cmd_build(&c, "SMEMBERS", key_of(rs, akey, "active", NULL), (const char *)NULL);
        rc = run(rs, &c, &r, err, errlen);
        if (rc != RK_STORE_OK)
            return rc;
        char **ids = NULL;
        size_t n = 0;
        rc = ids_from_array(r, &ids, &n, err, errlen);
        freeReplyObject(r);
        if (rc != RK_STORE_OK)
            return rc;
        const char **argv = malloc((GET_CHUNK + 4) * sizeof *argv);
        size_t *lens = malloc((GET_CHUNK + 4) * sizeof *lens);
        if (!argv || !lens)
            rc = rk_store_fail(err, errlen, "store: out of memory");
        for (size_t off = 0; rc == RK_STORE_OK && off < n; off += GET_CHUNK) {
            size_t m = n - off < GET_CHUNK ? n - off : GET_CHUNK, k = 0;
            argv[k++] = "EVAL";
            argv[k++] = LUA_REINDEX;
            argv[k++] = "0";
            argv[k++] = rs->prefix;
            for (size_t i = 0; i < m; i++)
                argv[k++] = ids[off + i];
            for (size_t i = 0; i < k; i++)
                lens[i] = strlen(argv[i]);
            struct rop op;
            rc = op_begin(rs, &op, err, errlen);
            if (rc != RK_STORE_OK)
                break;
            redisReply *rr = NULL;
            if (redisAppendCommandArgv(op.c, (int)k, argv, lens) != REDIS_OK ||
                get_reply(op.c, (void **)&rr) != REDIS_OK || !rr)
                rc = io_fail(&op, err, errlen);
            else if (rr->type == REDIS_REPLY_ERROR)
                rc = reply_fail(rr, err, errlen);
            if (rr)
                freeReplyObject(rr);
            op_end(&op);
        }
        free(argv);
        free(lens);
        rk_store_free_ids(ids, n);
        if (rc != RK_STORE_OK)
            return rc;
        cmd_build(&c, "SET", mkey, "1", (const char *)NULL);
        rc = run(rs, &c, &r, err, errlen);
        if (rc != RK_STORE_OK)
            return rc;
        freeReplyObject(r);
        rk_info("store: indexed %zu active sandbox record(s) for list pages and state counts", n);
    }
    pthread_mutex_lock(&rs->mu);
    rs->index_seen_ms = mono_ms();
    pthread_mutex_unlock(&rs->mu);
    return RK_STORE_OK;
}

/* ZCARD + ZRANGE of bycreated in one round trip; ids are the part after \x01. */
static rk_store_rc redis_list_page(struct rk_store *st, size_t offset, size_t limit,
                                   char ***ids_out, size_t *n_out, size_t *total_out, char *err,
                                   size_t errlen)
{
    struct redis_store *rs = rstore(st);
    rk_store_rc rc = ensure_index(rs, err, errlen);
    if (rc != RK_STORE_OK)
        return rc;
    char k[KEY_MAX], from[32], to[32];
    key_of(rs, k, "bycreated", NULL);
    if (limit == 0 || offset > (size_t)INT64_MAX - limit)
        limit = 0;
    snprintf(from, sizeof from, "%zu", offset);
    snprintf(to, sizeof to, "%zu", limit ? offset + limit - 1 : offset);
    struct cmd cmds[2];
    redisReply *r[2];
    cmd_build(&cmds[0], "ZCARD", k, (const char *)NULL);
    cmd_build(&cmds[1], "ZRANGE", k, from, to, (const char *)NULL);
    rc = run_pipeline(rs, cmds, 2, r, err, errlen);
    if (rc != RK_STORE_OK)
        return rc;
    if (r[0]->type != REDIS_REPLY_INTEGER || r[1]->type != REDIS_REPLY_ARRAY) {
        rc = r[0]->type == REDIS_REPLY_ERROR   ? reply_fail(r[0], err, errlen)
             : r[1]->type == REDIS_REPLY_ERROR ? reply_fail(r[1], err, errlen)
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
static rk_store_rc redis_count_states(struct rk_store *st, size_t *pending_out, size_t *running_out,
                                      char *err, size_t errlen)
{
    struct redis_store *rs = rstore(st);
    rk_store_rc rc = ensure_index(rs, err, errlen);
    if (rc != RK_STORE_OK)
        return rc;
    char kp[KEY_MAX], kr[KEY_MAX];
    struct cmd cmds[2];
    redisReply *r[2];
    cmd_build(&cmds[0], "SCARD", key_of(rs, kp, "state:pending", NULL), (const char *)NULL);
    cmd_build(&cmds[1], "SCARD", key_of(rs, kr, "state:running", NULL), (const char *)NULL);
    rc = run_pipeline(rs, cmds, 2, r, err, errlen);
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
    .list_page = redis_list_page,
    .count_states = redis_count_states,
};

/* Parse "host:port,host:port" (IPv6 as [addr]:port) into rs->sentinels. */
static int parse_sentinels(struct redis_store *rs, const char *list)
{
    size_t cap = 1;
    for (const char *p = list; *p; p++)
        cap += *p == ',';
    rs->sentinels = calloc(cap, sizeof *rs->sentinels);
    if (!rs->sentinels)
        return -1;
    const char *p = list;
    while (*p) {
        size_t len = strcspn(p, ",");
        const char *item = p, *end = p + len;
        p = *end ? end + 1 : end;
        while (item < end && (*item == ' ' || *item == '\t'))
            item++;
        while (end > item && (end[-1] == ' ' || end[-1] == '\t'))
            end--;
        if (item == end)
            continue;
        const char *colon = end;
        while (colon > item && colon[-1] != ':')
            colon--;
        char *stop = NULL;
        long port = colon > item ? strtol(colon, &stop, 10) : 0;
        const char *h = item, *he = colon > item ? colon - 1 : item;
        if (he - h >= 2 && *h == '[' && he[-1] == ']') {
            h++;
            he--;
        }
        if (port < 1 || port > 65535 || stop != end || he <= h || he - h >= HOST_MAX) {
            rk_err("store: redis.sentinels: \"%.*s\" is not host:port", (int)(end - item), item);
            return -1;
        }
        struct sentinel_addr *sa = &rs->sentinels[rs->n_sentinels++];
        snprintf(sa->host, sizeof sa->host, "%.*s", (int)(he - h), h);
        sa->port = (int)port;
    }
    if (rs->n_sentinels == 0) {
        rk_err("store: redis.sentinels lists no sentinel");
        return -1;
    }
    return 0;
}

/* strdup of a non-empty string; NULL for NULL or "" (*fail set on OOM). */
static char *dup_opt(const char *s, int *fail)
{
    if (!s || !s[0])
        return NULL;
    char *d = strdup(s);
    if (!d)
        *fail = 1;
    return d;
}

/* Copy the HA settings (sentinels, ACL user, secrets, WAIT) into rs. */
static int apply_ha_settings(struct redis_store *rs, const struct rk_redis_cfg *cfg)
{
    int fail = 0;
    char msg[160];
    if (cfg->password_file && cfg->password_file[0]) {
        free(rs->password);
        rs->password = rk_store_read_secret_file(cfg->password_file, msg, sizeof msg);
        if (!rs->password) {
            rk_err("store: redis.password_file: %s", msg);
            return -1;
        }
    }
    rs->username = dup_opt(cfg->username, &fail);
    rs->sentinel_username = dup_opt(cfg->sentinel_username, &fail);
    rs->sentinel_password = dup_opt(cfg->sentinel_password, &fail);
    if (cfg->sentinel_password_file && cfg->sentinel_password_file[0]) {
        free(rs->sentinel_password);
        rs->sentinel_password =
            rk_store_read_secret_file(cfg->sentinel_password_file, msg, sizeof msg);
        if (!rs->sentinel_password) {
            rk_err("store: redis.sentinel_password_file: %s", msg);
            return -1;
        }
    }
    if (cfg->sentinels && cfg->sentinels[0]) {
        if (!cfg->master_name || !cfg->master_name[0]) {
            rk_err("store: redis.sentinels is set but redis.master_name is not");
            return -1;
        }
        rs->master_name = dup_opt(cfg->master_name, &fail);
        if (fail || parse_sentinels(rs, cfg->sentinels) != 0)
            return -1;
    }
    rs->min_replicas_ack = cfg->min_replicas_ack > 0 ? cfg->min_replicas_ack : 0;
    rs->wait_timeout_ms = cfg->wait_timeout_ms > 0 ? cfg->wait_timeout_ms : 1000;
    if (rs->min_replicas_ack > 0 && rs->wait_timeout_ms >= rs->op_timeout_ms) {
        /* the WAIT reply must arrive before the socket read gives up */
        rs->wait_timeout_ms = rs->op_timeout_ms / 2 > 0 ? rs->op_timeout_ms / 2 : 1;
        rk_warn("store: redis.wait_timeout_ms must be below redis.timeout_ms; using %d ms",
                rs->wait_timeout_ms);
    }
    return fail ? -1 : 0;
}

/* Open the Redis store; connections are made on first use. */
struct rk_store *rk_store_open_redis(const struct rk_redis_cfg *cfg)
{
    bool sentinel_mode = cfg && cfg->sentinels && cfg->sentinels[0];
    if (!cfg || (!sentinel_mode && (!cfg->host || !cfg->host[0]))) {
        rk_err("store: neither redis.host nor redis.sentinels is set");
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
    rs->host = strdup(cfg->host && cfg->host[0] ? cfg->host : "sentinel");
    snprintf(rs->cur_host, sizeof rs->cur_host, "%s", rs->host ? rs->host : "");
    rs->cur_port = rs->port;
    rs->password = cfg->password && cfg->password[0] ? strdup(cfg->password) : NULL;
    rs->idle = calloc((size_t)rs->pool_size, sizeof *rs->idle);
    pthread_mutex_init(&rs->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int cv_ok = pthread_cond_init(&rs->cv, &ca) == 0;
    pthread_condattr_destroy(&ca);
    if (!cv_ok) {
        pthread_mutex_destroy(&rs->mu);
        free(rs->host);
        free(rs->password);
        free(rs->idle);
        free(rs);
        return NULL;
    }
    rk_store_base_init(&rs->base, &redis_ops, 1);
    if (!rs->host || (cfg->password && cfg->password[0] && !rs->password) || !rs->idle ||
        apply_ha_settings(rs, cfg) != 0) {
        redis_close(&rs->base);
        return NULL;
    }
    return &rs->base;
}
