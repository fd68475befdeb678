/* SPDX-License-Identifier: Apache-2.0 */
/* Redis store: the connection pool and Sentinel discovery. Owns connecting (AUTH, SELECT),
 * asking the sentinels for the master and checking its ROLE, checking connections out of
 * and back into the bounded pool with the shared reconnect backoff, and the wire: sending
 * a pipeline and reading its replies, and judging a failed connection or error reply. */
#include "store/store_redis_internal.h"
#include "base/util.h"
#include "obs/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Free the contexts in list. */
void rkr_free_contexts(redisContext **list, int n)
{
    for (int i = 0; i < n; i++)
        redisFree(list[i]);
}

int rkr_setup_cmds(const char *user, const char *password, int db, struct cmd steps[2],
                   char dbbuf[16])
{
    int n = 0;
    if (password && password[0] && user && user[0])
        rkr_cmd_build(&steps[n++], "AUTH", user, password, (const char *)NULL);
    else if (password && password[0])
        rkr_cmd_build(&steps[n++], "AUTH", password, (const char *)NULL);
    if (db != 0) {
        snprintf(dbbuf, 16, "%d", db);
        rkr_cmd_build(&steps[n++], "SELECT", dbbuf, (const char *)NULL);
    }
    return n;
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
    char dbbuf[16];
    int nsteps = rkr_setup_cmds(user, password, db, steps, dbbuf);
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

/* Check out a connection, connecting lazily (with backoff) when none is idle
 * and the pool has room; waits at most op_timeout_ms for a free slot. SIGPIPE
 * needs no per-request mask: the process ignores it once (main and
 * rk_store_open_redis), so a write to a closed Redis socket fails with EPIPE
 * instead of killing the process (a mask would cost 12 syscalls per request). */
rk_store_rc rkr_op_begin(struct redis_store *rs, struct rop *op, char *err, size_t errlen)
{
    memset(op, 0, sizeof *op);
    op->rs = rs;
    int64_t deadline = rk_now_ms() + rs->op_timeout_ms;
    char msg[128];
    pthread_mutex_lock(&rs->mu);
    for (;;) {
        if (rs->n_idle > 0) {
            op->c = rs->idle[--rs->n_idle];
            op->reused = true;
            rs->busy++;
            pthread_mutex_unlock(&rs->mu);
            return RK_STORE_OK;
        }
        if (rs->busy < rs->pool_size) {
            if (rk_now_ms() < rs->retry_at_ms) {
                snprintf(msg, sizeof msg, "%s", rs->last_err);
                pthread_mutex_unlock(&rs->mu);
                return rk_store_fail(err, errlen, "redis unavailable: %s", msg);
            }
            rs->busy++;
            pthread_mutex_unlock(&rs->mu);
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
            rs->retry_at_ms = rk_now_ms() + rs->backoff_ms;
            snprintf(rs->last_err, sizeof rs->last_err, "%s", msg);
            pthread_cond_signal(&rs->cv);
            pthread_mutex_unlock(&rs->mu);
            return rk_store_fail(err, errlen, "redis unavailable: %s", msg);
        }
        int64_t left = deadline - rk_now_ms();
        if (left <= 0)
            break;
        struct timespec ts = rk_time_after_ms(CLOCK_MONOTONIC, left);
        pthread_cond_timedwait(&rs->cv, &rs->mu, &ts);
    }
    pthread_mutex_unlock(&rs->mu);
    return rk_store_fail(err, errlen, "redis busy: no free connection within %d ms",
                         rs->op_timeout_ms);
}

/* Return a connection. A broken one is freed together with every idle one
 * (they share the server and are most likely dead too). */
void rkr_op_end(struct rop *op)
{
    struct redis_store *rs = op->rs;
    pthread_mutex_lock(&rs->mu);
    rs->busy--;
    if (op->broken) {
        redisFree(op->c);
        rkr_free_contexts(rs->idle, rs->n_idle);
        rs->n_idle = 0;
        rs->master_known = false; /* sentinel mode: ask again on the next connect */
    } else {
        rs->idle[rs->n_idle++] = op->c;
    }
    /* One connection (or one slot) became free: wake one waiter, not all of them. */
    pthread_cond_signal(&rs->cv);
    pthread_mutex_unlock(&rs->mu);
    op->c = NULL;
}

/* Describe a connection-level failure and mark the connection broken. */
rk_store_rc rkr_io_fail(struct rop *op, char *err, size_t errlen)
{
    op->broken = true;
    /* the server closed it (EOF, reset, broken pipe), as opposed to a timeout */
    op->closed = op->c->err == REDIS_ERR_EOF ||
                 (op->c->err == REDIS_ERR_IO && (strcmp(op->c->errstr, strerror(ECONNRESET)) == 0 ||
                                                 strcmp(op->c->errstr, strerror(EPIPE)) == 0));
    const char *why = op->c->err ? op->c->errstr : "no reply";
    if (op->c->err == REDIS_ERR_EOF || op->c->err == REDIS_ERR_IO)
        return rk_store_fail(err, errlen, "redis unavailable: %s", why);
    return rk_store_fail(err, errlen, "redis error: %s", why);
}

/* Describe an error reply (the connection stays usable). */
rk_store_rc rkr_reply_fail(const redisReply *r, char *err, size_t errlen)
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
int rkr_get_reply(redisContext *c, void **reply)
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
rk_store_rc rkr_op_pipeline(struct rop *op, const struct cmd *cmds, size_t n, redisReply **replies,
                            char *err, size_t errlen)
{
    for (size_t i = 0; i < n; i++)
        replies[i] = NULL;
    for (size_t i = 0; i < n; i++)
        if (redisAppendCommandArgv(op->c, cmds[i].argc, (const char **)cmds[i].argv,
                                   cmds[i].lens) != REDIS_OK)
            return rkr_io_fail(op, err, errlen);
    for (size_t i = 0; i < n; i++) {
        void *r = NULL;
        if (rkr_get_reply(op->c, &r) != REDIS_OK || !r) {
            for (size_t j = 0; j < i; j++)
                freeReplyObject(replies[j]);
            if (r)
                freeReplyObject(r);
            return rkr_io_fail(op, err, errlen);
        }
        replies[i] = r;
        if (wrong_server(r))
            op->broken = true;
    }
    return RK_STORE_OK;
}
