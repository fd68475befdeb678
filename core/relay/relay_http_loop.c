/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The relay transfer loop: one thread drives every upstream transfer of the
 * HTTP relay with one libcurl multi handle on epoll (curl_multi_socket_action),
 * so a relayed request holds no thread, and the multi's connection cache keeps
 * the upstream keep-alive connections for the next request to the same origin.
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
 * Unpause requests from other threads go through a queue and an eventfd: only
 * this thread touches the multi and the easy handles in it.
 *
 * Idle transfers get no curl callbacks, so every transfer is checked each
 * RELAY_LOOP_SWEEP_MS: cancellation, the daemon's shutdown, a client that left
 * (its connection is suspended, libmicrohttpd does not watch it) and the
 * inactivity limit (proxy.timeout_s; waiting for a slow client that reads the
 * answer is not upstream inactivity).
 */
#include "relay/relay_http_loop.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "base/app.h"
#include "base/util.h"
#include "obs/log.h"
#include "relay/relay_common.h"
#include "relay/relay_http_internal.h"

/* How often every transfer gets its checks (cancellation, client gone, inactivity). */
#define RELAY_LOOP_SWEEP_MS 250
/* Idle upstream keep-alive connections the multi keeps (as the handle pool's bound). */
#define RELAY_LOOP_MAXCONNECTS 512
/* epoll events handled per wake-up. */
#define RELAY_LOOP_EVENTS 64

struct http_loop {
    pthread_mutex_t mu;
    pthread_t thread;
    int started;
    int stop;                  /* guarded by mu */
    struct px_http *submitted; /* to add to the multi (guarded by mu) */
    struct px_http *unpause;   /* to unpause (guarded by mu; each holds a reference) */
    CURLM *multi;              /* loop thread only */
    int epfd;
    int wakefd;
    int64_t timer_at;       /* curl's next timeout (monotonic ms), -1 when none */
    struct px_http *active; /* transfers in the multi (loop thread only) */
};

static struct http_loop loop = {.mu = PTHREAD_MUTEX_INITIALIZER, .epfd = -1, .wakefd = -1};

/* CURLMOPT_SOCKETFUNCTION: mirror curl's interest in a socket into the epoll set. */
static int sock_cb(CURL *e, curl_socket_t s, int what, void *userp, void *socketp)
{
    (void)e;
    (void)socketp;
    struct http_loop *lp = userp;
    if (what == CURL_POLL_REMOVE) {
        epoll_ctl(lp->epfd, EPOLL_CTL_DEL, s, NULL);
        return 0;
    }
    struct epoll_event ev;
    memset(&ev, 0, sizeof ev);
    ev.events = ((what & CURL_POLL_IN) ? EPOLLIN : 0) | ((what & CURL_POLL_OUT) ? EPOLLOUT : 0);
    ev.data.fd = s;
    if (epoll_ctl(lp->epfd, EPOLL_CTL_MOD, s, &ev) != 0 && errno == ENOENT)
        epoll_ctl(lp->epfd, EPOLL_CTL_ADD, s, &ev);
    return 0;
}

/* CURLMOPT_TIMERFUNCTION: remember when curl wants to be called back. */
static int timer_cb(CURLM *m, long timeout_ms, void *userp)
{
    (void)m;
    struct http_loop *lp = userp;
    lp->timer_at = timeout_ms < 0 ? -1 : rk_now_ms() + timeout_ms;
    return 0;
}

/* Wake the loop thread. */
static void wake(struct http_loop *lp)
{
    uint64_t one = 1;
    ssize_t w = write(lp->wakefd, &one, sizeof one);
    (void)w; /* EAGAIN: a wake-up is already pending */
}

/* The transfer ended: out of the multi, the handle back to the pool (kept with
 * its connection after a complete exchange), the result published, the pipes
 * closed, the loop's reference dropped. */
static void finish(struct http_loop *lp, struct px_http *px, CURLcode res)
{
    curl_multi_remove_handle(lp->multi, px->curl);
    if (px->lprev)
        px->lprev->lnext = px->lnext;
    else
        lp->active = px->lnext;
    if (px->lnext)
        px->lnext->lprev = px->lprev;
    px->lnext = px->lprev = NULL;
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

/* Take the submitted transfers into the multi and run the unpause requests.
 * Returns the stop flag. */
static int take_requests(struct http_loop *lp)
{
    uint64_t n;
    while (read(lp->wakefd, &n, sizeof n) == (ssize_t)sizeof n)
        ;
    pthread_mutex_lock(&lp->mu);
    struct px_http *q = lp->submitted, *u = lp->unpause;
    lp->submitted = lp->unpause = NULL;
    int stop = lp->stop;
    pthread_mutex_unlock(&lp->mu);
    while (q) {
        struct px_http *next = q->lnext;
        q->lprev = NULL;
        q->lnext = lp->active;
        if (lp->active)
            lp->active->lprev = q;
        lp->active = q;
        q->in_loop = 1;
        if (curl_multi_add_handle(lp->multi, q->curl) != CURLM_OK)
            finish(lp, q, CURLE_FAILED_INIT);
        q = next;
    }
    while (u) {
        struct px_http *next = u->unext;
        pthread_mutex_lock(&lp->mu);
        u->unpause_queued = 0;
        pthread_mutex_unlock(&lp->mu);
        if (u->in_loop && u->curl && (u->paused_recv || u->paused_send)) {
            u->paused_recv = u->paused_send = 0;
            rk_px_touch(u); /* waiting for the client is not upstream inactivity */
            curl_easy_pause(u->curl, CURLPAUSE_CONT);
        }
        rk_px_unref(u);
        u = next;
    }
    return stop;
}

/* Hand back every transfer curl reports finished. */
static void reap(struct http_loop *lp)
{
    CURLMsg *msg;
    int left;
    while ((msg = curl_multi_info_read(lp->multi, &left))) {
        if (msg->msg != CURLMSG_DONE)
            continue;
        struct px_http *px = NULL;
        curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&px);
        CURLcode res = msg->data.result;
        if (px)
            finish(lp, px, res);
        else
            curl_multi_remove_handle(lp->multi, msg->easy_handle);
    }
}

/* The checks of every transfer (curl calls back only for active ones). */
static void sweep(struct http_loop *lp, int64_t now)
{
    struct px_http *px = lp->active;
    while (px) {
        struct px_http *next = px->lnext;
        if (rk_px_should_abort(px, now))
            finish(lp, px, CURLE_ABORTED_BY_CALLBACK);
        px = next;
    }
}

/* The loop thread. */
static void *loop_main(void *arg)
{
    struct http_loop *lp = arg;
    int64_t sweep_at = rk_now_ms() + RELAY_LOOP_SWEEP_MS;
    struct epoll_event evs[RELAY_LOOP_EVENTS];
    int running = 0;
    for (;;) {
        int stop = take_requests(lp);
        if (stop && !lp->active)
            break;
        int64_t now = rk_now_ms();
        int64_t until = sweep_at;
        if (lp->timer_at >= 0 && lp->timer_at < until)
            until = lp->timer_at;
        int wait = until > now ? (int)(until - now) : 0;
        int n = epoll_wait(lp->epfd, evs, RELAY_LOOP_EVENTS, wait);
        for (int i = 0; i < n; i++) {
            int fd = evs[i].data.fd;
            if (fd == lp->wakefd)
                continue; /* drained by take_requests */
            int mask = 0;
            if (evs[i].events & EPOLLIN)
                mask |= CURL_CSELECT_IN;
            if (evs[i].events & EPOLLOUT)
                mask |= CURL_CSELECT_OUT;
            if (evs[i].events & (EPOLLERR | EPOLLHUP))
                mask |= CURL_CSELECT_ERR;
            curl_multi_socket_action(lp->multi, fd, mask, &running);
        }
        now = rk_now_ms();
        if (lp->timer_at >= 0 && now >= lp->timer_at) {
            lp->timer_at = -1;
            curl_multi_socket_action(lp->multi, CURL_SOCKET_TIMEOUT, 0, &running);
        }
        reap(lp);
        if (now >= sweep_at) {
            sweep(lp, now);
            sweep_at = now + RELAY_LOOP_SWEEP_MS;
        }
    }
    return NULL;
}

/* Start the loop on first use (under lp->mu). 0 on success. */
static int loop_start(struct http_loop *lp)
{
    if (lp->started)
        return 0;
    lp->multi = curl_multi_init();
    lp->epfd = epoll_create1(EPOLL_CLOEXEC);
    lp->wakefd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (!lp->multi || lp->epfd < 0 || lp->wakefd < 0)
        goto fail;
    struct epoll_event ev;
    memset(&ev, 0, sizeof ev);
    ev.events = EPOLLIN;
    ev.data.fd = lp->wakefd;
    if (epoll_ctl(lp->epfd, EPOLL_CTL_ADD, lp->wakefd, &ev) != 0)
        goto fail;
    lp->timer_at = -1;
    curl_multi_setopt(lp->multi, CURLMOPT_SOCKETFUNCTION, sock_cb);
    curl_multi_setopt(lp->multi, CURLMOPT_SOCKETDATA, lp);
    curl_multi_setopt(lp->multi, CURLMOPT_TIMERFUNCTION, timer_cb);
    curl_multi_setopt(lp->multi, CURLMOPT_TIMERDATA, lp);
    /* Idle upstream keep-alive connections the multi keeps for reuse. */
    curl_multi_setopt(lp->multi, CURLMOPT_MAXCONNECTS, (long)RELAY_LOOP_MAXCONNECTS);
    if (pthread_create(&lp->thread, NULL, loop_main, lp) != 0)
        goto fail;
    lp->started = 1;
    return 0;
fail:
    rk_err("cannot start the relay transfer loop");
    if (lp->multi)
        curl_multi_cleanup(lp->multi);
    if (lp->epfd >= 0)
        close(lp->epfd);
    if (lp->wakefd >= 0)
        close(lp->wakefd);
    lp->multi = NULL;
    lp->epfd = lp->wakefd = -1;
    return -1;
}

int rk_http_loop_submit(struct px_http *px)
{
    struct http_loop *lp = &loop;
    pthread_mutex_lock(&lp->mu);
    if (lp->stop || loop_start(lp) != 0) {
        pthread_mutex_unlock(&lp->mu);
        return -1;
    }
    curl_easy_setopt(px->curl, CURLOPT_PRIVATE, (char *)px);
    px->lprev = NULL;
    px->lnext = lp->submitted;
    lp->submitted = px;
    pthread_mutex_unlock(&lp->mu);
    wake(lp);
    return 0;
}

void rk_http_loop_unpause(struct px_http *px)
{
    struct http_loop *lp = &loop;
    pthread_mutex_lock(&lp->mu);
    if (!px->unpause_queued && !lp->stop) {
        px->unpause_queued = 1;
        pthread_mutex_lock(&px->mu);
        px->refs++;
        pthread_mutex_unlock(&px->mu);
        px->unext = lp->unpause;
        lp->unpause = px;
    }
    pthread_mutex_unlock(&lp->mu);
    wake(lp);
}

void rk_http_loop_shutdown(void)
{
    struct http_loop *lp = &loop;
    pthread_mutex_lock(&lp->mu);
    int started = lp->started;
    lp->stop = 1;
    pthread_mutex_unlock(&lp->mu);
    if (!started)
        return;
    wake(lp);
    pthread_join(lp->thread, NULL);
    curl_multi_cleanup(lp->multi);
    close(lp->epfd);
    close(lp->wakefd);
    lp->started = 0;
}
