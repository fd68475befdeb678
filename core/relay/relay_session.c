/* SPDX-License-Identifier: Apache-2.0 */
/* One upgraded relay as a non-blocking state machine on a relay loop (see relay_session.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "relay/relay_session.h"

#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/app.h"
#include "engine/request.h"
#include "base/util.h"
#include "config/config.h"
#include "obs/log.h"
#include "relay/relay_common.h"
#include "relay/relay_loop.h"
#include "relay/relay_touch.h"

/** Bytes read from a side at once; also the backpressure mark: a side is read
 *  only while the other direction holds less than this. */
#define SESSION_CHUNK (32 * 1024)
/** How long our close frame waits for the client's answer. */
#define SESSION_CLOSE_WAIT_MS 2000
/** Rounds of reading and writing before a busy relay lets the others run. */
#define SESSION_ROUNDS 16

/* Bytes waiting for one side; data is allocated only while it holds bytes. */
struct pending {
    unsigned char *data;
    size_t off, len, cap; /* the bytes are data[off, len) */
    int64_t since;        /* waiting, and none taken, since then (ms) */
};

enum session_state { ST_RELAY, ST_CLOSING, ST_FINISHING };

struct rk_session {
    struct rk_loop_item it; /* first */
    struct rk_upgrade *up;
    const struct rk_relay_kind *kind;
    struct MHD_UpgradeResponseHandle *urh;
    int cfd;
    struct rk_loop_watch wc, wu;
    char *extra; /* the client's bytes read with the handshake, until start */
    size_t extra_len;
    struct pending to_c, to_u;
    enum session_state state;
    unsigned c_rd : 1, c_wr : 1, u_rd : 1, u_wr : 1; /* worth trying (edge-triggered) */
    unsigned c_eof : 1, u_eof : 1, c_dead : 1, u_failed : 1;
    unsigned wait_answer : 1, answered : 1, draining : 1, ending : 1, oom : 1, moved : 1;
    int64_t answer_deadline; /* the client's answer to our close, 0 = not yet waiting */
    int64_t cut_deadline;    /* the drain's cut, 0 = none */
    int64_t stall_ms;        /* proxy.timeout */
    int64_t last_touch;      /* when traffic last touched the sandbox (relay_touch.h) */
};

struct rk_upgrade *rk_session_up(struct rk_session *s)
{
    return s->up;
}

int rk_session_draining(const struct rk_session *s)
{
    return s->draining;
}

int rk_session_closing(const struct rk_session *s)
{
    return s->state != ST_RELAY;
}

/* ---- pending bytes ----------------------------------------------------------------- */

/* Append to a pending buffer; -1 on OOM. */
static int pend_add(struct pending *p, const void *d, size_t n)
{
    if (p->off && p->off == p->len)
        p->off = p->len = 0;
    if (p->len + n > p->cap) {
        if (p->off) { /* compact first */
            memmove(p->data, p->data + p->off, p->len - p->off);
            p->len -= p->off;
            p->off = 0;
        }
        if (p->len + n > p->cap) {
            size_t cap = p->len + n < 4096 ? 4096 : p->len + n;
            unsigned char *nd = realloc(p->data, cap);
            if (!nd)
                return -1;
            p->data = nd;
            p->cap = cap;
        }
    }
    memcpy(p->data + p->len, d, n);
    p->len += n;
    return 0;
}

static size_t pend_bytes(const struct pending *p)
{
    return p->len - p->off;
}

/* Drop n sent bytes; the buffer is freed once empty. */
static void pend_took(struct pending *p, size_t n)
{
    p->off += n;
    if (p->off == p->len) {
        free(p->data);
        memset(p, 0, sizeof *p);
    }
}

/* ---- writing ------------------------------------------------------------------------ */

/* One write to the client: bytes taken, 0 when full, -1 when the client is gone. */
static ssize_t client_write(struct rk_session *s, const void *d, size_t n)
{
    ssize_t k = send(s->cfd, d, n, MSG_NOSIGNAL);
    if (k > 0)
        return k;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
        if (errno != EINTR)
            s->c_wr = 0;
        return 0;
    }
    s->c_dead = 1;
    s->ending = 1;
    return -1;
}

/* One write to the upstream, the same way. */
static ssize_t upstream_write(struct rk_session *s, const void *d, size_t n)
{
    ssize_t k = s->kind->up_send(s->up, d, n);
    if (k > 0)
        return k;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
        if (errno != EINTR)
            s->u_wr = 0;
        return 0;
    }
    s->u_failed = 1;
    return -1;
}

/* Queue or send; what is not taken at once waits. */
static void queue_to(struct rk_session *s, struct pending *p, int to_client, const void *data,
                     size_t len)
{
    const unsigned char *d = data;
    if (s->ending || len == 0)
        return;
    if (!to_client && (s->u_failed || s->u_eof))
        return; /* nowhere to go */
    int can = to_client ? s->c_wr : s->u_wr;
    while (pend_bytes(p) == 0 && can && len > 0) {
        ssize_t k = to_client ? client_write(s, d, len) : upstream_write(s, d, len);
        if (k <= 0) {
            if (k < 0)
                return;
            break;
        }
        d += k;
        len -= (size_t)k;
        can = to_client ? s->c_wr : s->u_wr;
    }
    if (len == 0)
        return;
    int64_t since = pend_bytes(p) ? p->since : rk_now_ms();
    if (pend_add(p, d, len) != 0) {
        rk_warn("%s to sandbox %s: out of memory", s->up->what, s->up->sandbox_id);
        s->oom = 1;
        s->ending = 1;
        return;
    }
    p->since = since;
}

void rk_session_to_client(struct rk_session *s, const void *data, size_t len)
{
    queue_to(s, &s->to_c, 1, data, len);
}

void rk_session_to_upstream(struct rk_session *s, const void *data, size_t len)
{
    queue_to(s, &s->to_u, 0, data, len);
}

/* Write pending bytes while the side takes them. Returns 1 on progress. */
static int flush(struct rk_session *s, struct pending *p, int to_client)
{
    int progress = 0;
    while (pend_bytes(p) && (to_client ? s->c_wr : s->u_wr) && !s->ending) {
        ssize_t k = to_client ? client_write(s, p->data + p->off, pend_bytes(p))
                              : upstream_write(s, p->data + p->off, pend_bytes(p));
        if (k <= 0) {
            if (k < 0 && !to_client)
                pend_took(p, pend_bytes(p)); /* the upstream failed: drop */
            break;
        }
        pend_took(p, (size_t)k); /* emptied: since is 0 again */
        if (pend_bytes(p))
            p->since = rk_now_ms();
        progress = 1;
    }
    return progress;
}

/* ---- closing -------------------------------------------------------------------------- */

void rk_session_close(struct rk_session *s, uint16_t code, const char *reason, int wait_answer)
{
    if (s->state == ST_CLOSING)
        return;
    s->state = ST_CLOSING;
    s->wait_answer = wait_answer ? 1 : 0;
    unsigned char frame[160];
    size_t n = rk_ws_close_frame(code, reason, frame, sizeof frame);
    rk_session_to_client(s, frame, n);
}

void rk_session_finish(struct rk_session *s)
{
    if (s->state == ST_RELAY)
        s->state = ST_FINISHING;
}

void rk_session_cut_at(struct rk_session *s, int64_t deadline_ms)
{
    if (!s->cut_deadline || deadline_ms < s->cut_deadline)
        s->cut_deadline = deadline_ms;
}

/* ---- the state machine ------------------------------------------------------------------ */

/* Take the readiness the loop noted. */
static void take_events(struct rk_session *s)
{
    uint32_t e = s->wc.events;
    s->wc.events = 0;
    if (e & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
        s->c_rd = 1;
    if (e & (EPOLLOUT | EPOLLHUP | EPOLLERR))
        s->c_wr = 1;
    e = s->wu.events;
    s->wu.events = 0;
    if (e & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
        s->u_rd = 1;
    if (e & (EPOLLOUT | EPOLLHUP | EPOLLERR))
        s->u_wr = 1;
}

/* Read from the client when the state and the upstream's backlog allow. Returns 1 on progress. */
static int read_client(struct rk_session *s, unsigned char *buf)
{
    if (!s->c_rd || s->c_eof)
        return 0;
    int relaying = s->state == ST_RELAY && pend_bytes(&s->to_u) == 0 &&
                   (!s->kind->answers_client || pend_bytes(&s->to_c) < SESSION_CHUNK);
    int answer = s->state == ST_CLOSING && s->wait_answer && pend_bytes(&s->to_c) == 0;
    if (!relaying && !answer)
        return 0;
    ssize_t n = recv(s->cfd, buf, SESSION_CHUNK, 0);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
        if (errno != EINTR)
            s->c_rd = 0;
        return 0;
    }
    if (answer) { /* the client's close frame (or its end) */
        s->answered = 1;
        return 1;
    }
    if (n > 0) {
        s->moved = 1;
        s->kind->from_client(s, buf, (size_t)n);
        return 1;
    }
    s->c_eof = 1;
    s->kind->client_end(s);
    return 1;
}

/* Read from the upstream when the client's backlog is written. Returns 1 on progress. */
static int read_upstream(struct rk_session *s, unsigned char *buf)
{
    if (!s->u_rd || s->u_eof || s->u_failed || s->state != ST_RELAY || pend_bytes(&s->to_c))
        return 0;
    size_t head = s->kind->up_headroom;
    ssize_t n = s->kind->up_recv(s->up, buf + head, SESSION_CHUNK);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
        if (errno != EINTR)
            s->u_rd = 0;
        return 0;
    }
    if (n > 0) {
        s->moved = 1;
        s->kind->from_upstream(s, buf + head, (size_t)n);
        return 1;
    }
    s->u_eof = 1;
    s->kind->upstream_end(s, n < 0);
    return 1;
}

/* Whether the relay is complete. */
static int done(struct rk_session *s)
{
    if (s->ending)
        return 1;
    int empty = !pend_bytes(&s->to_c) && !pend_bytes(&s->to_u);
    if (s->state == ST_FINISHING)
        return empty;
    if (s->state == ST_CLOSING)
        return !pend_bytes(&s->to_c) && (!pend_bytes(&s->to_u) || s->u_eof) &&
               (!s->wait_answer || s->answered || s->c_eof);
    return 0;
}

static void session_end(struct rk_session *s);

/* The next moment the relay must be looked at, or 0. */
static int64_t next_deadline(const struct rk_session *s)
{
    int64_t d = 0;
    int64_t c[4] = {s->to_c.since ? s->to_c.since + s->stall_ms : 0,
                    s->to_u.since ? s->to_u.since + s->stall_ms : 0, s->answer_deadline,
                    s->cut_deadline};
    for (int i = 0; i < 4; i++)
        if (c[i] && (!d || c[i] < d))
            d = c[i];
    return d;
}

/* Move bytes until nothing moves, the relay ends, or it has had its share. */
static void session_pump(struct rk_session *s)
{
    size_t cap;
    unsigned char *buf = rk_loop_scratch(&s->it, &cap);
    take_events(s);
    int progress = 0;
    for (int round = 0; round < SESSION_ROUNDS; round++) {
        progress = flush(s, &s->to_c, 1);
        progress |= flush(s, &s->to_u, 0);
        if (s->u_failed && !s->u_eof) {
            s->u_eof = 1;
            s->kind->upstream_end(s, 1);
        }
        if (done(s))
            break;
        progress |= read_client(s, buf);
        if (done(s))
            break;
        progress |= read_upstream(s, buf);
        if (s->u_failed && !s->u_eof) {
            s->u_eof = 1;
            s->kind->upstream_end(s, 1);
        }
        if (done(s) || !progress)
            break;
    }
    if (done(s)) {
        session_end(s);
        return;
    }
    if (progress)
        rk_loop_again(&s->it);                 /* more to do: after the other relays */
    if (s->moved && s->up->idle_minutes > 0) { /* traffic is activity on the sandbox */
        int64_t now = rk_now_ms();
        if (now - s->last_touch >= rk_relay_touch_interval_ms(s->up->idle_minutes)) {
            rk_relay_touch_note(s->up->sandbox_id, s->up->idle_minutes);
            s->last_touch = now;
        }
    }
    s->moved = 0;
    if (s->state == ST_CLOSING && s->wait_answer && !s->answer_deadline && !pend_bytes(&s->to_c))
        s->answer_deadline = rk_now_ms() + SESSION_CLOSE_WAIT_MS;
    int64_t d = next_deadline(s);
    if (d && (!s->it.deadline_ms || d < s->it.deadline_ms))
        rk_loop_timer(&s->it, d);
}

/* ---- loop hooks ---------------------------------------------------------------------- */

static void op_run(struct rk_loop_item *it)
{
    session_pump((struct rk_session *)it);
}

/* A deadline passed (or an earlier armed one: look again). */
static void op_timer(struct rk_loop_item *it)
{
    struct rk_session *s = (struct rk_session *)it;
    int64_t now = rk_now_ms();
    int c_stalled = s->to_c.since && now >= s->to_c.since + s->stall_ms;
    if (c_stalled || (s->to_u.since && now >= s->to_u.since + s->stall_ms)) {
        rk_info("%s to sandbox %s: the %s took no bytes for %lld s, closing", s->up->what,
                s->up->sandbox_id, c_stalled ? "client" : "application",
                (long long)(s->stall_ms / 1000));
        s->ending = 1;
    } else if ((s->answer_deadline && now >= s->answer_deadline) ||
               (s->cut_deadline && now >= s->cut_deadline)) {
        s->ending = 1;
    }
    if (s->ending) {
        session_end(s);
        return;
    }
    session_pump(s);
}

static void op_drain(struct rk_loop_item *it)
{
    struct rk_session *s = (struct rk_session *)it;
    if (s->draining)
        return;
    s->draining = 1;
    if (s->state == ST_RELAY)
        s->kind->drain(s);
    session_pump(s);
}

static void op_abort(struct rk_loop_item *it)
{
    session_end((struct rk_session *)it);
}

static void op_start(struct rk_loop_item *it)
{
    struct rk_session *s = (struct rk_session *)it;
    struct rk_upgrade *up = s->up;
    s->stall_ms = (int64_t)up->app->cfg->proxy.timeout_s * 1000;
    s->last_touch = rk_now_ms(); /* the gate touched it before the 101 */
    if (rk_loop_watch_add(it, &s->wc, s->cfd) != 0) {
        rk_warn("%s to sandbox %s: cannot watch the client socket", up->what, up->sandbox_id);
        session_end(s);
        return;
    }
    s->c_rd = s->c_wr = 1;
    int ufd = up->close_code || !s->kind ? -1 : s->kind->upstream_fd(up);
    if (up->close_code) {
        rk_session_close(s, up->close_code, up->close_reason, 1);
    } else if (ufd < 0 || rk_loop_watch_add(it, &s->wu, ufd) != 0) {
        rk_session_close(s, 1011, "Proxy error: no upstream", 1);
    } else {
        s->u_rd = s->u_wr = 1;
        if (s->kind->start)
            s->kind->start(s);
        if (s->extra_len)
            s->kind->from_client(s, (unsigned char *)s->extra, s->extra_len);
    }
    free(s->extra);
    s->extra = NULL;
    s->extra_len = 0;
    session_pump(s);
}

static const struct rk_loop_item_ops session_ops = {
    .start = op_start, .run = op_run, .timer = op_timer, .drain = op_drain, .abort = op_abort};

/* Give everything back: the watches, the loop's bookkeeping, the client socket
 * (to libmicrohttpd, which closes it), the relay's state. */
static void session_end(struct rk_session *s)
{
    rk_loop_watch_del(&s->wc);
    rk_loop_watch_del(&s->wu);
    if (s->it.loop)
        rk_loop_item_done(&s->it);
    if (!s->c_dead)
        shutdown(s->cfd, SHUT_RDWR);
    MHD_upgrade_action(s->urh, MHD_UPGRADE_ACTION_CLOSE);
    rk_req_loop_wake(s->up->loop); /* the loop cleans the connection up */
    s->up->release(s->up);
    free(s->to_c.data);
    free(s->to_u.data);
    free(s->extra);
    free(s);
    rk_relay_leave();
}

int rk_session_start(struct rk_upgrade *up, int sock, const char *extra, size_t extra_len,
                     struct MHD_UpgradeResponseHandle *urh)
{
    struct rk_session *s = calloc(1, sizeof *s);
    if (!s)
        return -1;
    if (extra_len) {
        s->extra = malloc(extra_len);
        if (!s->extra) {
            free(s);
            return -1;
        }
        memcpy(s->extra, extra, extra_len);
        s->extra_len = extra_len;
    }
    int fl = fcntl(sock, F_GETFL);
    if (fl >= 0)
        fcntl(sock, F_SETFL, fl | O_NONBLOCK);
    s->it.ops = &session_ops;
    s->up = up;
    s->kind = up->kind;
    s->urh = urh;
    s->cfd = sock;
    s->wc.fd = s->wu.fd = -1;
    if (rk_relay_loop_adopt(&s->it) != 0) {
        free(s->extra);
        free(s);
        return -1;
    }
    return 0;
}
