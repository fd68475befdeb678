/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The connection guard: every connection is tracked through its phases
 * (headers, body, handler, keep-alive) and one watchdog thread shuts down the
 * ones that break server.header_timeout or server.min_body_rate, or - when
 * fewer than server.reserved_connections slots are free - the ones that have
 * been sending headers the longest.
 */
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>

#include "base/app.h"
#include "base/util.h"
#include "config/config.h"
#include "engine/engine_internal.h"
#include "engine/ip_limit.h"
#include "engine/stream_reply.h"
#include "obs/log.h"

/* The tracker of conn (set when MHD reported the connection). */
struct conn_track *rk_track_of(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci =
        conn ? MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT) : NULL;
    return ci ? ci->socket_context : NULL;
}

/* Enter a phase (under the lock). */
void rk_track_phase(struct http_state *hs, struct conn_track *t, enum conn_phase ph)
{
    if (!t)
        return;
    pthread_mutex_lock(&hs->mu);
    t->phase = ph;
    t->phase_start_ms = rk_turn_ms();
    t->busy_ms = 0;
    t->body_bytes = 0;
    pthread_mutex_unlock(&hs->mu);
}

/* Mark the connection as inside (busy = 1) or outside our access handler;
 * add n body bytes. Time inside our code never counts against the client. */
void rk_track_busy(struct http_state *hs, struct conn_track *t, int busy, size_t n)
{
    if (!t)
        return;
    pthread_mutex_lock(&hs->mu);
    int64_t now = rk_turn_ms(); /* on a loop: its turn's time (a loop's handler is that short) */
    if (busy) {
        t->busy_since = now;
    } else if (t->busy_since) {
        t->busy_ms += now - t->busy_since;
        t->busy_since = 0;
    }
    t->body_bytes += n;
    pthread_mutex_unlock(&hs->mu);
}

/* MHD connection start/close: keep the tracker list. */
void rk_track_notify_cb(void *cls, struct MHD_Connection *conn, void **socket_context,
                        enum MHD_ConnectionNotificationCode toe)
{
    struct rk_app *app = cls;
    struct http_state *hs = app->http;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        struct conn_track *t = calloc(1, sizeof *t);
        if (!t)
            return;
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        t->fd = ci ? ci->connect_fd : -1;
        t->phase = PH_HEADERS;
        t->phase_start_ms = rk_now_ms();
        pthread_mutex_lock(&hs->mu);
        t->next = hs->conns;
        if (t->next)
            t->next->prev = t;
        hs->conns = t;
        hs->nconns++;
        pthread_mutex_unlock(&hs->mu);
        *socket_context = t;
        return;
    }
    atomic_fetch_sub(&hs->open, 1); /* counted by the accept policy */
    const union MHD_ConnectionInfo *ai =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    rk_ip_limit_give(hs->per_ip, ai ? ai->client_addr : NULL);
    struct conn_track *t = *socket_context;
    if (!t)
        return;
    /* MHD reports the close before it closes the socket, so the watchdog never
     * shuts down a descriptor that was reused. */
    pthread_mutex_lock(&hs->mu);
    if (t->prev)
        t->prev->next = t->next;
    else
        hs->conns = t->next;
    if (t->next)
        t->next->prev = t->prev;
    hs->nconns--;
    pthread_mutex_unlock(&hs->mu);
    *socket_context = NULL;
    free(t);
}

/* Shut a connection down (under the lock); its MHD thread then closes it. */
static void track_kill(struct conn_track *t, const char *why)
{
    if (t->closing || t->fd < 0)
        return;
    t->closing = 1;
    rk_info("closing a connection: %s", why);
    shutdown(t->fd, SHUT_RDWR);
}

/* One watchdog pass (under the lock). */
static void watchdog_pass(struct http_state *hs, const struct rk_config *cfg, int64_t now)
{
    int64_t header_ms = (int64_t)cfg->server.header_timeout_s * 1000;
    int64_t keepalive_ms = ((int64_t)cfg->server.connection_timeout_s + 1) * 1000 + header_ms;
    int64_t rate = cfg->server.min_body_rate;
    for (struct conn_track *t = hs->conns; t; t = t->next) {
        int64_t age = now - t->phase_start_ms;
        if (t->closing || t->busy_since)
            continue;
        if (t->phase == PH_HEADERS && age > header_ms) {
            track_kill(t, "header_timeout");
        } else if (t->phase == PH_KEEPALIVE && age > keepalive_ms) {
            track_kill(t, "header_timeout");
        } else if (t->phase == PH_BODY && rate > 0) {
            /* After a grace of header_timeout, the body must average min_body_rate. */
            int64_t eff = age - t->busy_ms - header_ms;
            if (eff > 0 && (double)t->body_bytes < (double)eff / 1000.0 * (double)rate)
                track_kill(t, "min_body_rate");
        }
    }
    /* Keep server.reserved_connections slots free for health probes: when the
     * connection table is that full, close the connections that have been
     * sending headers the longest (over a second: real clients send them at once). */
    int want_free = cfg->server.reserved_connections;
    int live = 0;
    for (struct conn_track *t = hs->conns; t; t = t->next)
        live += !t->closing;
    while (want_free > 0 && hs->conn_limit - live < want_free) {
        struct conn_track *oldest = NULL;
        for (struct conn_track *t = hs->conns; t; t = t->next)
            if (!t->closing && !t->busy_since &&
                (t->phase == PH_HEADERS || t->phase == PH_KEEPALIVE) &&
                now - t->phase_start_ms > 1000 &&
                (!oldest || t->phase_start_ms < oldest->phase_start_ms))
                oldest = t;
        if (!oldest)
            break;
        track_kill(oldest, "reserve");
        live--;
    }
}

/* Watchdog thread: a pass every 250 ms until rk_http_stop. */
void *rk_watchdog_main(void *arg)
{
    struct rk_app *app = arg;
    struct http_state *hs = app->http;
    pthread_mutex_lock(&hs->mu);
    while (!hs->stop) {
        watchdog_pass(hs, app->cfg, rk_now_ms());
        /* Streamed responses waiting for data (outside our lock: a resume
         * needs no lock of ours). */
        pthread_mutex_unlock(&hs->mu);
        rk_stream_tick(rk_now_ms());
        pthread_mutex_lock(&hs->mu);
        if (hs->stop)
            break;
        struct timespec ts = rk_time_after_ms(CLOCK_MONOTONIC, 250);
        pthread_cond_timedwait(&hs->cv, &hs->mu, &ts);
    }
    pthread_mutex_unlock(&hs->mu);
    return NULL;
}
