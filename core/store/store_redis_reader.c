/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Redis store: the asynchronous reader of one event loop (store_reader.h). One hiredis
 * asynchronous context on the master the connection pool found, its socket in an epoll set
 * of its own that the loop watches like its curl multi. A read is what the pool's rkr_get_touch
 * sends: MGET record mark + ZSCORE, pipelined with every other read of the same turn, and, when
 * the read may touch and the touch is due, the touch command (rkr_touch_cmd) sent from the
 * ZSCORE's reply; the read completes with the touch's reply.
 *
 * hiredis 0.14 has no timeouts on asynchronous contexts: each read carries its deadline
 * (the store's op_timeout_ms, connecting included) and a read past it drops the connection,
 * failing every read still pending on it (their callers read again on a worker). Replies
 * come in the order of the commands, so the oldest pending read carries the nearest
 * deadline. Callbacks are delivered after hiredis returns, never from inside it.
 *
 * A record is handed over as its text, scanned in place (lib/rkjson.h): no json-c tree
 * is built for a poll. The touch reads the two members it needs from the scan. A text the
 * scanner does not read (not of the form json-c writes) is parsed as before. Scanned texts are
 * remembered (struct rec_slot): a sandbox polled again whose record came back byte for byte the
 * same is not copied or scanned again. The bytes decide, so nothing can be stale.
 */
#include "store/store_reader.h"
#include "store/store_redis_internal.h"

#include "rkjson.h"
#include "base/util.h"
#include "obs/log.h"
#include "obs/metrics.h"

#include <arpa/inet.h>
#include <errno.h>
#include <hiredis/async.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

/* Reads one reader keeps in flight; beyond them reads go to the workers. */
#define READER_PENDING_MAX 4096
/* Members of a record the scanner locates (a record has about 40). */
#define REC_MEMBERS_MAX 96
/* Scanned records one reader remembers (direct-mapped by the id's hash), and the largest one. */
#define REC_CACHE_SLOTS 64
#define REC_CACHE_MAX_BYTES 4096

/* A record's text, copied out of its reply and scanned: never changed once made, shared by the
 * reads that found it and its slot (loop thread only: a plain count). */
struct scanned {
    int refs;
    int n; /* members in m, -1: the scanner does not read the text */
    struct rku_json_member *m;
    size_t len;
    char raw[]; /* the text, then the members */
};

/* One remembered record. */
struct rec_slot {
    char *id; /* NULL: empty */
    struct scanned *sc;
};

/* One read: MGET + ZSCORE (+ the touch), one callback. */
struct read {
    struct read *next;
    struct rk_store_reader *rd;
    rk_store_read_cb *cb;
    void *arg;
    int64_t deadline_ms;
    int64_t start_ns;
    int64_t touch_s; /* the second a touch is for, 0: no touch */
    int parts;       /* replies still to come */
    int failed;
    rk_store_rc rc;
    json_object *rec;   /* the record parsed (a text the scanner does not read) */
    struct scanned *sc; /* the record's text, one reference */
    int64_t expire;
    int has_expire;
    char mark[RK_STORE_MARK_MAX];
    char err[RK_STORE_ERRLEN];
    char id[RK_STORE_MAX_NAME + 1];
};

struct rk_store_reader {
    struct redis_store *rs;
    redisAsyncContext *ac;
    int epfd;
    int fd;          /* the context's socket while registered, else -1 */
    uint32_t events; /* EPOLLIN / EPOLLOUT interest hiredis asked for */
    int broken;      /* an AUTH or SELECT failed: drop the connection */
    int disabled;    /* the master is named by a host name: never connect from a loop */
    char host[HOST_MAX];
    int port;
    int64_t retry_at_ms;
    int backoff_ms;
    struct read *head, *tail; /* in command order */
    size_t n_pending;
    struct rec_slot cache[REC_CACHE_SLOTS];
};

/* ---- the epoll set hiredis drives --------------------------------------------------------- */

static void set_events(struct rk_store_reader *rd, uint32_t events)
{
    if (!rd->ac)
        return;
    int fd = rd->ac->c.fd;
    struct epoll_event ev = {.events = events};
    if (events == 0) {
        if (rd->fd >= 0)
            epoll_ctl(rd->epfd, EPOLL_CTL_DEL, rd->fd, &ev);
        rd->fd = -1;
    } else if (rd->fd < 0) {
        if (epoll_ctl(rd->epfd, EPOLL_CTL_ADD, fd, &ev) == 0)
            rd->fd = fd;
    } else {
        epoll_ctl(rd->epfd, EPOLL_CTL_MOD, fd, &ev);
    }
    rd->events = events;
}

static void ev_add_read(void *p)
{
    struct rk_store_reader *rd = p;
    set_events(rd, rd->events | EPOLLIN);
}

static void ev_del_read(void *p)
{
    struct rk_store_reader *rd = p;
    set_events(rd, rd->events & ~(uint32_t)EPOLLIN);
}

static void ev_add_write(void *p)
{
    struct rk_store_reader *rd = p;
    set_events(rd, rd->events | EPOLLOUT);
}

static void ev_del_write(void *p)
{
    struct rk_store_reader *rd = p;
    set_events(rd, rd->events & ~(uint32_t)EPOLLOUT);
}

/* The context is being freed (by us or by hiredis after an I/O error). */
static void ev_cleanup(void *p)
{
    struct rk_store_reader *rd = p;
    struct epoll_event ev = {0};
    if (rd->fd >= 0)
        epoll_ctl(rd->epfd, EPOLL_CTL_DEL, rd->fd, &ev);
    rd->fd = -1;
    rd->events = 0;
}

/* ---- connection --------------------------------------------------------------------------- */

/* Wait before the next connection attempt (doubling, bounded as the pool's backoff). */
static void back_off(struct rk_store_reader *rd)
{
    rd->backoff_ms = rd->backoff_ms == 0 ? BACKOFF_MIN_MS : rd->backoff_ms * 2;
    if (rd->backoff_ms > BACKOFF_MAX_MS)
        rd->backoff_ms = BACKOFF_MAX_MS;
    rd->retry_at_ms = rk_now_ms() + rd->backoff_ms;
}

static void on_connect(const redisAsyncContext *ac, int status)
{
    struct rk_store_reader *rd = ac->data;
    if (status != REDIS_OK) {
        /* hiredis frees the context after this callback */
        if (rd->ac == ac)
            rd->ac = NULL;
        back_off(rd);
    } else {
        rd->backoff_ms = 0;
    }
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
    struct rk_store_reader *rd = ac->data;
    if (rd->ac == ac)
        rd->ac = NULL;
    if (status != REDIS_OK)
        back_off(rd);
}

/* The reply to AUTH or SELECT: an error reply makes every later read fail; drop the
 * connection at the end of this turn and try again after the backoff. */
static void on_setup_reply(redisAsyncContext *ac, void *reply, void *priv)
{
    (void)priv;
    struct rk_store_reader *rd = ac->data;
    const redisReply *r = reply;
    if (r && r->type == REDIS_REPLY_ERROR)
        rd->broken = 1;
}

/* Tear the connection down now: pending reads fail with why. Not from inside hiredis. */
static void drop(struct rk_store_reader *rd, const char *why)
{
    redisAsyncContext *ac = rd->ac;
    if (!ac)
        return;
    for (struct read *q = rd->head; q; q = q->next)
        if (q->parts > 0 && !q->err[0])
            snprintf(q->err, sizeof q->err, "redis %.100s:%d: %.100s", rd->host, rd->port, why);
    rd->ac = NULL;
    redisAsyncFree(ac); /* every pending command's callback runs with no reply */
    back_off(rd);
}

/* 1 when host is a numeric IPv4 or IPv6 address (connecting needs no name lookup). */
static int numeric_host(const char *host)
{
    unsigned char buf[sizeof(struct in6_addr)];
    return inet_pton(AF_INET, host, buf) == 1 || inet_pton(AF_INET6, host, buf) == 1;
}

/* The master the pool uses now: 0 and host/port filled, or -1 when it is not known. */
static int current_master(struct redis_store *rs, char host[HOST_MAX], int *port)
{
    pthread_mutex_lock(&rs->mu);
    int known = rs->n_sentinels == 0 || rs->master_known;
    snprintf(host, HOST_MAX, "%s", rs->cur_host);
    *port = rs->cur_port;
    pthread_mutex_unlock(&rs->mu);
    return known ? 0 : -1;
}

/* A connection to the pool's master, opened (without waiting) when there is none: 0, or -1
 * when none can be used now. A pool that moved to another master takes the reader along. */
static int ensure_connection(struct rk_store_reader *rd)
{
    char host[HOST_MAX];
    int port;
    if (rd->disabled || current_master(rd->rs, host, &port) != 0)
        return -1;
    if (rd->ac && (strcmp(host, rd->host) != 0 || port != rd->port))
        drop(rd, "the master moved");
    if (rd->ac)
        return rd->broken ? -1 : 0;
    if (rk_now_ms() < rd->retry_at_ms)
        return -1;
    if (!numeric_host(host)) {
        rd->disabled = 1;
        rk_info("store: redis master %s is a host name: status reads use the worker pool", host);
        return -1;
    }
    redisAsyncContext *ac = redisAsyncConnect(host, port);
    if (!ac)
        return -1;
    if (ac->err) {
        redisAsyncFree(ac);
        back_off(rd);
        return -1;
    }
    snprintf(rd->host, sizeof rd->host, "%s", host);
    rd->port = port;
    rd->ac = ac;
    rd->broken = 0;
    ac->data = rd;
    ac->ev.data = rd;
    ac->ev.addRead = ev_add_read;
    ac->ev.delRead = ev_del_read;
    ac->ev.addWrite = ev_add_write;
    ac->ev.delWrite = ev_del_write;
    ac->ev.cleanup = ev_cleanup;
    redisAsyncSetConnectCallback(ac, on_connect);
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
    ev_add_write(rd); /* the connect completes when the socket is writable */
    struct redis_store *rs = rd->rs;
    struct cmd setup[2];
    char dbbuf[16];
    int n = rkr_setup_cmds(rs->username, rs->password, rs->db, setup, dbbuf);
    for (int i = 0; i < n; i++)
        if (redisAsyncCommandArgv(ac, on_setup_reply, NULL, setup[i].argc, setup[i].argv,
                                  setup[i].lens) != REDIS_OK)
            rd->broken = 1;
    return rd->broken ? -1 : 0;
}

/* ---- reads -------------------------------------------------------------------------------- */

/* One part of a read has its reply (NULL: the connection went away). */
static void part_done(struct read *q, const redisReply *r)
{
    q->parts--;
    if (q->failed)
        return;
    if (!r) {
        q->failed = 1;
        if (!q->err[0])
            snprintf(q->err, sizeof q->err, "redis connection lost");
    } else if (r->type == REDIS_REPLY_ERROR) {
        q->failed = 1;
        rkr_reply_fail(r, q->err, sizeof q->err);
    }
}

/* ---- records ------------------------------------------------------------------------------ */

static void scanned_put(struct scanned *sc)
{
    if (sc && --sc->refs == 0)
        free(sc);
}

/* The text of reply rec copied and scanned (one reference), or NULL when memory ran out. */
static struct scanned *scanned_new(const redisReply *rec)
{
    struct rku_json_member m[REC_MEMBERS_MAX];
    int n = rku_json_scan_object(rec->str, rec->len, m, REC_MEMBERS_MAX);
    size_t at = (sizeof(struct scanned) + rec->len + _Alignof(struct rku_json_member) - 1) /
                _Alignof(struct rku_json_member) * _Alignof(struct rku_json_member);
    struct scanned *sc = malloc(at + (n > 0 ? (size_t)n : 0) * sizeof *m);
    if (!sc)
        return NULL;
    sc->refs = 1;
    sc->n = n;
    sc->len = rec->len;
    memcpy(sc->raw, rec->str, rec->len);
    sc->m = (struct rku_json_member *)(void *)((char *)sc + at);
    for (int i = 0; i < n; i++) { /* the same spans, in the copy */
        sc->m[i] = m[i];
        sc->m[i].key.p = sc->raw + (m[i].key.p - rec->str);
        sc->m[i].value.p = sc->raw + (m[i].value.p - rec->str);
    }
    return sc;
}

static struct rec_slot *slot_of(struct rk_store_reader *rd, const char *id)
{
    return &rd->cache[rk_hash_str(id) % REC_CACHE_SLOTS];
}

/* The scanned text of reply rec for id: the remembered one when its bytes are the same, else a
 * new one, remembered when small enough. One reference for the caller, NULL when memory ran
 * out. */
static struct scanned *scanned_for(struct rk_store_reader *rd, const char *id,
                                   const redisReply *rec)
{
    struct rec_slot *sl = slot_of(rd, id);
    if (sl->id && strcmp(sl->id, id) == 0 && sl->sc->len == rec->len &&
        memcmp(sl->sc->raw, rec->str, rec->len) == 0) {
        sl->sc->refs++;
        return sl->sc;
    }
    struct scanned *sc = scanned_new(rec);
    if (!sc || rec->len > REC_CACHE_MAX_BYTES)
        return sc;
    char *kept = strdup(id);
    if (!kept)
        return sc;
    free(sl->id);
    scanned_put(sl->sc);
    sl->id = kept;
    sl->sc = sc;
    sc->refs++;
    return sc;
}

/* MGET record mark: the record's text, scanned, kept for on_zscore. */
static void on_mget(redisAsyncContext *ac, void *reply, void *priv)
{
    (void)ac;
    struct read *q = priv;
    const redisReply *r = reply;
    part_done(q, r);
    if (q->failed)
        return;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
        q->failed = 1;
        snprintf(q->err, sizeof q->err, "redis error: unexpected reply type %d", r->type);
        return;
    }
    if (r->element[1]->type == REDIS_REPLY_STRING)
        snprintf(q->mark, sizeof q->mark, "%.*s", (int)r->element[1]->len, r->element[1]->str);
    const redisReply *rec = r->element[0];
    if (rec->type != REDIS_REPLY_STRING) { /* nil: not found; anything else an error */
        q->rc = rkr_record_from(rec, NULL, &q->rec, q->id, q->err, sizeof q->err);
        return;
    }
    q->sc = scanned_for(q->rd, q->id, rec);
    if (!q->sc) {
        q->failed = 1;
        snprintf(q->err, sizeof q->err, "store: out of memory");
    }
}

/* The idle deadline of q's scanned record, from the ZSCORE reply r, and the touch's deadline
 * (returned, 0: no touch) computed from them as rkr_touch_due does on a tree. -1 when the text
 * is not one the scanner reads, or a member the touch reads has a type json-c would convert
 * (parse it instead). */
static int64_t text_touch(struct read *q, const redisReply *r, bool *had)
{
    const struct rku_json_member *m = q->sc->m;
    if (q->sc->n < 0)
        return -1;
    size_t n = (size_t)q->sc->n;
    const struct rku_json_span *st = rku_json_member_get(m, n, "state");
    const struct rku_json_span *acm = rku_json_member_get(m, n, "auto_clear_time");
    const struct rku_json_span *own = rku_json_member_get(m, n, "expire_time");
    if ((acm && acm->kind != RKU_JSON_NULL && acm->kind != RKU_JSON_INT) ||
        (own && own->kind != RKU_JSON_NULL && own->kind != RKU_JSON_INT))
        return -1;
    char state[16];
    bool active = st && rk_store_state_active(rku_json_decode(st, state, sizeof state));
    *had = false;
    if (active && r->type == REDIS_REPLY_STRING) { /* as rkr_record_add_score */
        char buf[64];
        snprintf(buf, sizeof buf, "%.*s", (int)(r->len < 63 ? r->len : 63), r->str);
        q->expire = (int64_t)strtod(buf, NULL);
        *had = true;
    } else if (own && own->kind == RKU_JSON_INT) {
        q->expire = rku_json_int(own);
        *had = true;
    }
    q->has_expire = *had;
    if (!active || !acm || acm->kind != RKU_JSON_INT)
        return 0;
    int64_t deadline = rk_store_idle_deadline(rku_json_int(acm), q->touch_s, *had ? q->expire : 0);
    if (deadline) {
        q->expire = deadline;
        q->has_expire = 1;
    }
    return deadline;
}

/* The touch's reply. A ZADD GT the server does not know fails this read (its caller reads again
 * on a worker, by script from then on: rkr_touch_refused). */
static void on_touch(redisAsyncContext *ac, void *reply, void *priv)
{
    (void)ac;
    struct read *q = priv;
    const redisReply *r = reply;
    part_done(q, r);
    if (r && r->type == REDIS_REPLY_ERROR)
        rkr_touch_refused(q->rd->rs, r->str);
}

/* ZSCORE expire id: the idle deadline of an active record; then the touch, when one is due. */
static void on_zscore(redisAsyncContext *ac, void *reply, void *priv)
{
    struct read *q = priv;
    const redisReply *r = reply;
    part_done(q, r);
    if (q->failed || q->rc != RK_STORE_OK)
        return;
    bool had = false;
    int64_t deadline = q->sc ? text_touch(q, r, &had) : 0;
    if (deadline < 0) { /* parse it as before */
        redisReply text = {.type = REDIS_REPLY_STRING, .str = q->sc->raw, .len = q->sc->len};
        q->rc = rkr_record_from(&text, r, &q->rec, q->id, q->err, sizeof q->err);
        deadline = q->rec ? rkr_touch_due(q->rec, q->touch_s, &had) : 0;
    }
    if (deadline == 0)
        return;
    struct cmd c;
    struct rkr_touch_bufs b;
    rkr_touch_cmd(q->rd->rs, &c, &b, q->id, deadline, had);
    q->parts++;
    if (redisAsyncCommandArgv(ac, on_touch, q, c.argc, c.argv, c.lens) != REDIS_OK) {
        q->parts--;
        q->failed = 1;
        snprintf(q->err, sizeof q->err, "redis: cannot queue the idle touch");
    }
}

/* Hand the finished reads at the head of the queue to their callers. */
static void deliver(struct rk_store_reader *rd)
{
    while (rd->head && rd->head->parts == 0) {
        struct read *q = rd->head;
        rd->head = q->next;
        if (!rd->head)
            rd->tail = NULL;
        rd->n_pending--;
        if (q->failed) {
            json_object_put(q->rec);
            q->rec = NULL;
            q->rc = RK_STORE_ERROR;
            atomic_fetch_add(&rd->rs->base.errors, 1);
        }
        rk_metrics_store("get_touch", (double)(rk_mono_ns() - q->start_ns) / 1e9);
        struct rk_store_found found = {0};
        if (q->rc == RK_STORE_OK) {
            found.rec = q->rec;
            found.text = q->sc ? q->sc->raw : NULL;
            found.len = q->sc ? q->sc->len : 0;
            found.m = q->sc && !q->rec ? q->sc->m : NULL;
            found.n = q->sc && !q->rec && q->sc->n > 0 ? (size_t)q->sc->n : 0;
            found.expire_time = q->expire;
            found.has_expire = q->has_expire;
        }
        q->cb(q->arg, q->rc, q->rc == RK_STORE_OK ? &found : NULL, q->mark, q->err);
        json_object_put(q->rec);
        scanned_put(q->sc);
        free(q);
    }
}

int rk_store_reader_get_touch(struct rk_store_reader *rd, const char *id, int64_t now_s,
                              rk_store_read_cb *cb, void *arg)
{
    size_t idlen = id ? strnlen(id, RK_STORE_MAX_NAME + 1) : 0;
    if (!rd || idlen == 0 || idlen > RK_STORE_MAX_NAME || rd->n_pending >= READER_PENDING_MAX ||
        ensure_connection(rd) != 0)
        return -1;
    struct read *q = calloc(1, sizeof *q);
    if (!q)
        return -1;
    memcpy(q->id, id, idlen);
    q->cb = cb;
    q->arg = arg;
    q->rc = RK_STORE_OK;
    q->start_ns = rk_mono_ns();
    q->deadline_ms = rk_now_ms() + rd->rs->op_timeout_ms;
    struct redis_store *rs = rd->rs;
    q->rd = rd;
    q->touch_s = now_s > 0 ? now_s : 0;
    char k1[KEY_MAX], k3[KEY_MAX], k4[KEY_MAX];
    struct cmd mget, zscore;
    rkr_cmd_build(&mget, "MGET", rkr_key_of(rs, k1, "sandbox:", id),
                  rkr_key_of(rs, k4, "reconcile_mark", NULL), (const char *)NULL);
    rkr_cmd_build(&zscore, "ZSCORE", rkr_key_of(rs, k3, "expire", NULL), id, (const char *)NULL);
    q->parts = 2;
    int ok = redisAsyncCommandArgv(rd->ac, on_mget, q, mget.argc, mget.argv, mget.lens) == REDIS_OK;
    if (ok)
        ok = redisAsyncCommandArgv(rd->ac, on_zscore, q, zscore.argc, zscore.argv, zscore.lens) ==
             REDIS_OK;
    else
        q->parts = 0;
    if (!ok && q->parts == 2)
        q->parts = 1; /* the MGET is queued: its reply (or its failure) still comes */
    if (!ok && q->parts == 0) {
        free(q); /* nothing was queued */
        return -1;
    }
    if (!ok)
        q->failed = 1; /* half queued: it completes as failed, the caller reads again */
    if (rd->tail)
        rd->tail->next = q;
    else
        rd->head = q;
    rd->tail = q;
    rd->n_pending++;
    return 0;
}

int rk_store_reader_run(struct rk_store_reader *rd)
{
    struct epoll_event ev;
    if (rd->ac && epoll_wait(rd->epfd, &ev, 1, 0) == 1) {
        if (ev.events & (EPOLLIN | EPOLLERR | EPOLLHUP))
            redisAsyncHandleRead(rd->ac); /* may free the context (on_disconnect) */
        if (rd->ac && (ev.events & (EPOLLOUT | EPOLLERR | EPOLLHUP)))
            redisAsyncHandleWrite(rd->ac);
    }
    if (rd->broken)
        drop(rd, "AUTH or SELECT refused");
    int64_t now = rk_now_ms();
    if (rd->head && rd->head->parts > 0 && rd->head->deadline_ms <= now) {
        char why[64];
        snprintf(why, sizeof why, "no answer within %d ms", rd->rs->op_timeout_ms);
        drop(rd, why);
    }
    deliver(rd);
    if (!rd->head)
        return -1;
    int64_t left = rd->head->deadline_ms - rk_now_ms();
    return left > 0 ? (int)left : 0;
}

int rk_store_reader_fd(const struct rk_store_reader *rd)
{
    return rd->epfd;
}

struct rk_store_reader *rkr_reader_new(struct rk_store *st)
{
    struct rk_store_reader *rd = calloc(1, sizeof *rd);
    if (!rd)
        return NULL;
    rd->rs = rkr_store(st);
    rd->fd = -1;
    rd->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (rd->epfd < 0) {
        free(rd);
        return NULL;
    }
    return rd;
}

void rk_store_reader_free(struct rk_store_reader *rd)
{
    if (!rd)
        return;
    drop(rd, "the server stops");
    for (struct read *q = rd->head; q; q = q->next)
        if (q->parts > 0) { /* never sent: no context was there to fail it */
            q->parts = 0;
            q->failed = 1;
        }
    deliver(rd);
    for (size_t i = 0; i < REC_CACHE_SLOTS; i++) {
        free(rd->cache[i].id);
        scanned_put(rd->cache[i].sc);
    }
    close(rd->epfd);
    free(rd);
}
