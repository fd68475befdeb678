/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The relay transfer loop: every upstream transfer of the HTTP relay runs on
 * one librkutil curl loop (lib/rkcurlloop.h: one thread, one libcurl multi
 * handle on epoll), so a relayed request holds no thread, and the multi's
 * connection cache keeps the upstream keep-alive connections for the next
 * request to the same origin. This file is the relay's side of it: what a
 * finished transfer, an unpause and the periodic check mean for a px_http.
 *
 * Callbacks (header, write, read, progress) run on this thread and never
 * block. Backpressure both ways pauses the transfer instead of waiting:
 *   - upstream -> client: when the response pipe has no room for a chunk, the
 *     write callback pauses the receive side and asks the pipe for a
 *     notification; the content reader on the event loop drains the pipe and
 *     the notification unpauses the transfer here;
 *   - client -> upstream: when the request pipe is empty and open, the read
 *     callback pauses the send side; the body callback on the event loop fills
 *     the pipe and the notification unpauses it.
 * Unpause requests from other threads go through the loop's wake queue: only
 * the loop thread touches the multi and the easy handles in it.
 *
 * Idle transfers get no curl callbacks, so every transfer is checked each
 * RELAY_LOOP_SWEEP_MS: cancellation, the daemon's shutdown, a client that left
 * (its connection is suspended, libmicrohttpd does not watch it) and the
 * inactivity limit (proxy.timeout_s; waiting for a slow client that reads the
 * answer is not upstream inactivity).
 */
#include "relay/relay_http_loop.h"

#include <pthread.h>
#include <stddef.h>

#include "base/util.h"
#include "obs/log.h"
#include "relay/relay_common.h"
#include "relay/relay_http_internal.h"
#include "rkcurlloop.h"

/* How often every transfer gets its checks (cancellation, client gone, inactivity). */
#define RELAY_LOOP_SWEEP_MS 250
/* Idle upstream keep-alive connections the multi keeps (as the handle pool's bound). */
#define RELAY_LOOP_MAXCONNECTS 512

static pthread_mutex_t loop_mu = PTHREAD_MUTEX_INITIALIZER;
static struct rku_curl_loop *loop; /* created on first use (under loop_mu) */
static int loop_stopped;           /* under loop_mu */

static struct px_http *px_of(struct rku_curl_job *j)
{
    return (struct px_http *)((char *)j - offsetof(struct px_http, job));
}

/* The transfer ended (loop thread): the handle back to the pool (kept with
 * its connection after a complete exchange), the result published, the pipes
 * closed, the loop's reference dropped. */
static void px_done(struct rku_curl_job *j, int cc)
{
    struct px_http *px = px_of(j);
    CURLcode res = (CURLcode)cc;
    pthread_mutex_lock(&px->mu);
    int complete = res == CURLE_OK && !px->cancel && !px->discard_body;
    pthread_mutex_unlock(&px->mu);
    rk_px_finish(px, res, complete);
    if (px->req)
        rk_bytepipe_abort(px->req); /* body() stops feeding a finished transfer */
    rk_bytepipe_close(px->resp);
    rk_px_unref(px);
    rk_relay_leave();
}

/* An unpause request (loop thread); drops the reference the request took. */
static void px_wake(struct rku_curl_job *j)
{
    struct px_http *px = px_of(j);
    if (j->in_loop && px->curl && (px->paused_recv || px->paused_send)) {
        px->paused_recv = px->paused_send = 0;
        rk_px_touch(px); /* waiting for the client is not upstream inactivity */
        curl_easy_pause(px->curl, CURLPAUSE_CONT);
    }
    rk_px_unref(px);
}

/* The periodic check of an open transfer (loop thread). */
static int px_check(struct rku_curl_job *j, int64_t now)
{
    (void)now; /* the relay's checks run on its own clock (rk_now_ms) */
    return rk_px_should_abort(px_of(j), rk_now_ms());
}

/* The loop, created on first use; NULL once shut down. */
static struct rku_curl_loop *the_loop(void)
{
    pthread_mutex_lock(&loop_mu);
    if (!loop && !loop_stopped) {
        loop = rku_curl_loop_new(RELAY_LOOP_SWEEP_MS, RELAY_LOOP_MAXCONNECTS);
        if (!loop)
            rk_err("cannot start the relay transfer loop");
    }
    struct rku_curl_loop *lp = loop;
    pthread_mutex_unlock(&loop_mu);
    return lp;
}

int rk_http_loop_submit(struct px_http *px)
{
    struct rku_curl_loop *lp = the_loop();
    px->job.curl = px->curl;
    px->job.on_done = px_done;
    px->job.on_wake = px_wake;
    px->job.should_abort = px_check;
    if (!lp || rku_curl_loop_submit(lp, &px->job) != 0)
        return -1;
    return 0;
}

void rk_http_loop_unpause(struct px_http *px)
{
    struct rku_curl_loop *lp = the_loop();
    if (!lp)
        return;
    pthread_mutex_lock(&px->mu);
    px->refs++; /* the wake's; px_wake drops it */
    pthread_mutex_unlock(&px->mu);
    if (!rku_curl_loop_wake_job(lp, &px->job))
        rk_px_unref(px);
}

void rk_http_loop_shutdown(void)
{
    pthread_mutex_lock(&loop_mu);
    struct rku_curl_loop *lp = loop;
    loop_stopped = 1;
    pthread_mutex_unlock(&loop_mu);
    /* After its transfers ended (they abort: the daemon stops). The loop object
     * stays: a late unpause or submission finds it stopped and does nothing. */
    rku_curl_loop_stop(lp);
}
