/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The relay's transfers on the event loops: every upstream transfer of the
 * HTTP relay runs on the curl multi loop of the event loop that serves the
 * client's connection (rk_req_curl_loop, engine/event_loops.c: the same
 * thread, one libcurl multi handle per loop on that loop's epoll set), so a
 * relayed request holds no thread and wakes none, and each multi's connection
 * cache keeps upstream keep-alive connections for the next request to the
 * same origin. This file is the relay's side of it: what a finished transfer,
 * an unpause and the periodic check mean for a px_http.
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
 * Idle transfers get no curl callbacks, so every transfer is checked every
 * 250 ms (the loop's sweep): cancellation, the daemon's shutdown, a client that left
 * (its connection is suspended, libmicrohttpd does not watch it) and the
 * inactivity limit (proxy.timeout_s; waiting for a slow client that reads the
 * answer is not upstream inactivity).
 */
#include "relay/relay_http_loop.h"

#include <pthread.h>
#include <stddef.h>

#include "base/util.h"
#include "engine/request.h"
#include "obs/log.h"
#include "relay/relay_common.h"
#include "relay/relay_http_internal.h"
#include "rkcurlloop.h"

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

int rk_http_loop_submit(struct px_http *px)
{
    struct rku_curl_loop *lp = rk_req_curl_loop(px->owner);
    px->loop = lp;
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
    struct rku_curl_loop *lp = px->loop;
    if (!lp)
        return;
    pthread_mutex_lock(&px->mu);
    px->refs++; /* the wake's; px_wake drops it */
    pthread_mutex_unlock(&px->mu);
    if (!rku_curl_loop_wake_job(lp, &px->job))
        rk_px_unref(px);
}
