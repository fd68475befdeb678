/* SPDX-License-Identifier: Apache-2.0 */
/* The curl-multi transfer loop (see rkcurlloop.h). */
#include "rkcurlloop.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "rkutil.h"

/* epoll events handled per wake-up. */
#define LOOP_EVENTS 64
/* The loop thread's stack: curl's call chains and the callbacks, no more. */
#define LOOP_STACK (256 * 1024)

struct rku_curl_loop {
    pthread_mutex_t mu;
    pthread_t thread;
    int started;
    int stop;                    /* guarded by mu */
    int joined;                  /* rku_curl_loop_stop ran (caller side) */
    struct rku_curl_job *queue;  /* submitted, not yet in the multi (guarded by mu) */
    struct rku_curl_job *wakes;  /* on_wake to run (guarded by mu) */
    CURLM *multi;                /* loop thread only (after start) */
    int epfd;                    /* curl's sockets and the eventfd */
    int wakefd;                  /* eventfd: a submission, wake or stop is pending */
    int64_t timer_at;            /* curl's next timeout (monotonic ms), -1 when none */
    struct rku_curl_job *active; /* transfers in the multi (loop thread only) */
    int sweep_ms;
    int64_t sweep_at; /* next sweep (monotonic ms; loop side) */
    long max_connects;
    int driven;                  /* no thread: the owner runs passes (rku_curl_loop_run) */
    int drained;                 /* driven: stopped with nothing open (guarded by mu) */
    int adopted;                 /* driven: owner is set (guarded by mu) */
    pthread_t owner;             /* driven: the thread that runs the passes */
    int local_due;               /* owner thread only: its own submission awaits a pass */
    struct rku_loop_source *src; /* the other event source, or NULL (set before start) */
    int src_wake;                /* a wake of src is pending (guarded by mu) */
    int src_run;                 /* src runs in this pass (loop thread only) */
};

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* CURLMOPT_SOCKETFUNCTION: mirror curl's interest in a socket into the epoll set. */
static int sock_cb(CURL *e, curl_socket_t s, int what, void *userp, void *socketp)
{
    (void)e;
    (void)socketp;
    struct rku_curl_loop *lp = userp;
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
    struct rku_curl_loop *lp = userp;
    lp->timer_at = timeout_ms < 0 ? -1 : mono_ms() + timeout_ms;
    return 0;
}

/* Wake the loop thread. */
static void wake(struct rku_curl_loop *lp)
{
    uint64_t one = 1;
    ssize_t w = write(lp->wakefd, &one, sizeof one);
    (void)w; /* EAGAIN: a wake-up is already pending */
}

/* The transfer ended: out of the multi and the active list, handed back. */
static void finish(struct rku_curl_loop *lp, struct rku_curl_job *j, CURLcode cc)
{
    curl_multi_remove_handle(lp->multi, j->curl);
    curl_easy_setopt(j->curl, CURLOPT_PRIVATE, NULL);
    if (j->prev)
        j->prev->next = j->next;
    else
        lp->active = j->next;
    if (j->next)
        j->next->prev = j->prev;
    j->next = j->prev = NULL;
    j->in_loop = 0;
    j->on_done(j, (int)cc);
}

/* Take the submitted transfers into the multi and run the queued wakes.
 * Returns the stop flag. */
static int take_requests(struct rku_curl_loop *lp)
{
    uint64_t n;
    lp->local_due = 0; /* the owner's own submissions are taken below */
    while (read(lp->wakefd, &n, sizeof n) == (ssize_t)sizeof n)
        ;
    pthread_mutex_lock(&lp->mu);
    struct rku_curl_job *q = lp->queue, *w = lp->wakes;
    lp->queue = lp->wakes = NULL;
    int stop = lp->stop;
    if (lp->src_wake)
        lp->src_run = 1;
    lp->src_wake = 0;
    pthread_mutex_unlock(&lp->mu);
    while (q) {
        struct rku_curl_job *next = q->next;
        q->prev = NULL;
        q->next = lp->active;
        if (lp->active)
            lp->active->prev = q;
        lp->active = q;
        q->in_loop = 1;
        if (curl_multi_add_handle(lp->multi, q->curl) != CURLM_OK)
            finish(lp, q, CURLE_FAILED_INIT);
        q = next;
    }
    while (w) {
        struct rku_curl_job *next = w->wnext;
        pthread_mutex_lock(&lp->mu);
        w->wake_queued = 0;
        pthread_mutex_unlock(&lp->mu);
        w->on_wake(w); /* may release w */
        w = next;
    }
    return stop;
}

/* Hand back every transfer curl reports finished. */
static void reap(struct rku_curl_loop *lp)
{
    CURLMsg *msg;
    int left;
    while ((msg = curl_multi_info_read(lp->multi, &left))) {
        if (msg->msg != CURLMSG_DONE)
            continue;
        struct rku_curl_job *j = NULL;
        curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&j);
        CURLcode cc = msg->data.result;
        if (j)
            finish(lp, j, cc);
        else
            curl_multi_remove_handle(lp->multi, msg->easy_handle);
    }
}

/* The abort check of every open transfer. */
static void sweep(struct rku_curl_loop *lp, int64_t now)
{
    struct rku_curl_job *j = lp->active;
    while (j) {
        struct rku_curl_job *next = j->next;
        if (j->should_abort && j->should_abort(j, now))
            finish(lp, j, CURLE_ABORTED_BY_CALLBACK);
        j = next;
    }
}

/* Milliseconds until the loop must act without socket activity (curl's timer, the sweep). */
static int next_wait(const struct rku_curl_loop *lp)
{
    int64_t now = mono_ms();
    int64_t until = lp->sweep_at;
    if (lp->timer_at >= 0 && lp->timer_at < until)
        until = lp->timer_at;
    if (lp->src && lp->src->due_at >= 0 && lp->src->due_at < until)
        until = lp->src->due_at;
    return until > now ? (int)(until - now) : 0;
}

/* One pass: take the queued requests, wait at most max_wait ms (and no longer than curl's timer
 * and the sweep allow) for socket activity, act on it, hand back finished transfers, sweep when
 * due. Returns 1 when the loop stops and has nothing open. */
static int loop_pass(struct rku_curl_loop *lp, int max_wait)
{
    struct epoll_event evs[LOOP_EVENTS];
    int running = 0;
    int stop = take_requests(lp);
    if (stop && !lp->active && !(lp->src && lp->src->busy(lp->src)))
        return 1;
    int wait = lp->src_run ? 0 : next_wait(lp); /* a woken source runs in this pass */
    if (wait > max_wait)
        wait = max_wait;
    int n = epoll_wait(lp->epfd, evs, LOOP_EVENTS, wait);
    for (int i = 0; i < n; i++) {
        int fd = evs[i].data.fd;
        if (fd == lp->wakefd)
            continue; /* drained by take_requests */
        if (lp->src && fd == lp->src->fd) {
            lp->src_run = 1;
            continue;
        }
        int mask = 0;
        if (evs[i].events & EPOLLIN)
            mask |= CURL_CSELECT_IN;
        if (evs[i].events & EPOLLOUT)
            mask |= CURL_CSELECT_OUT;
        if (evs[i].events & (EPOLLERR | EPOLLHUP))
            mask |= CURL_CSELECT_ERR;
        curl_multi_socket_action(lp->multi, fd, mask, &running);
    }
    int64_t now = mono_ms();
    if (lp->timer_at >= 0 && now >= lp->timer_at) {
        lp->timer_at = -1;
        curl_multi_socket_action(lp->multi, CURL_SOCKET_TIMEOUT, 0, &running);
    }
    reap(lp);
    if (lp->src && (lp->src_run || (lp->src->due_at >= 0 && now >= lp->src->due_at))) {
        lp->src_run = 0;
        int again = lp->src->run(lp->src, now);
        lp->src->due_at = again < 0 ? -1 : mono_ms() + again;
    }
    if (now >= lp->sweep_at) {
        sweep(lp, now);
        lp->sweep_at = now + lp->sweep_ms;
    }
    return 0;
}

/* The loop thread. */
static void *loop_main(void *arg)
{
    struct rku_curl_loop *lp = arg;
    rku_thread_c_locale(); /* callbacks may parse JSON (json-c's per-parse locale switch) */
    while (!loop_pass(lp, 1 << 30))
        ;
    return NULL;
}

/* The multi, the epoll set and the eventfd (under lp->mu or before the loop is shared). */
static int loop_init(struct rku_curl_loop *lp)
{
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
    if (lp->src) {
        ev.data.fd = lp->src->fd;
        if (epoll_ctl(lp->epfd, EPOLL_CTL_ADD, lp->src->fd, &ev) != 0)
            goto fail;
    }
    lp->timer_at = -1;
    lp->sweep_at = mono_ms() + lp->sweep_ms;
    curl_multi_setopt(lp->multi, CURLMOPT_SOCKETFUNCTION, sock_cb);
    curl_multi_setopt(lp->multi, CURLMOPT_SOCKETDATA, lp);
    curl_multi_setopt(lp->multi, CURLMOPT_TIMERFUNCTION, timer_cb);
    curl_multi_setopt(lp->multi, CURLMOPT_TIMERDATA, lp);
    if (lp->max_connects > 0)
        curl_multi_setopt(lp->multi, CURLMOPT_MAXCONNECTS, lp->max_connects);
    return 0;
fail:
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

/* Start the thread on first use (under lp->mu). 0 on success. */
static int loop_start(struct rku_curl_loop *lp)
{
    if (lp->started)
        return 0;
    if (lp->driven || loop_init(lp) != 0)
        return -1; /* a driven loop is started by rku_curl_loop_new_driven */
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, LOOP_STACK);
    int rc = pthread_create(&lp->thread, &attr, loop_main, lp);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        curl_multi_cleanup(lp->multi);
        close(lp->epfd);
        close(lp->wakefd);
        lp->multi = NULL;
        lp->epfd = lp->wakefd = -1;
        return -1;
    }
    lp->started = 1;
    return 0;
}

struct rku_curl_loop *rku_curl_loop_new(int sweep_ms, long max_connects)
{
    struct rku_curl_loop *lp = calloc(1, sizeof *lp);
    if (!lp)
        return NULL;
    pthread_mutex_init(&lp->mu, NULL);
    lp->epfd = lp->wakefd = -1;
    lp->sweep_ms = sweep_ms > 0 ? sweep_ms : 250;
    lp->max_connects = max_connects;
    return lp;
}

struct rku_curl_loop *rku_curl_loop_new_driven(int sweep_ms, long max_connects)
{
    struct rku_curl_loop *lp = rku_curl_loop_new(sweep_ms, max_connects);
    if (!lp)
        return NULL;
    lp->driven = 1;
    if (loop_init(lp) != 0) {
        pthread_mutex_destroy(&lp->mu);
        free(lp);
        return NULL;
    }
    lp->started = 1;
    return lp;
}

int rku_curl_loop_fd(const struct rku_curl_loop *lp)
{
    return lp->epfd;
}

int rku_curl_loop_run(struct rku_curl_loop *lp)
{
    if (loop_pass(lp, 0)) {
        pthread_mutex_lock(&lp->mu);
        lp->drained = 1;
        pthread_mutex_unlock(&lp->mu);
    }
    return next_wait(lp);
}

int rku_curl_loop_drained(struct rku_curl_loop *lp)
{
    pthread_mutex_lock(&lp->mu);
    int d = lp->drained;
    pthread_mutex_unlock(&lp->mu);
    return d;
}

void rku_curl_loop_adopt(struct rku_curl_loop *lp)
{
    pthread_mutex_lock(&lp->mu);
    if (lp->driven) {
        lp->owner = pthread_self();
        lp->adopted = 1;
    }
    pthread_mutex_unlock(&lp->mu);
}

int rku_curl_loop_due(const struct rku_curl_loop *lp)
{
    return lp->local_due;
}

/* Under lp->mu: 1 when the caller is the owner of a driven loop, which then notes the pending
 * submission for its next pass instead of waking the loop's descriptor. Wakes (the unpauses of
 * streaming transfers) keep the descriptor: taken the same way, they made a 100 MiB relayed
 * transfer churn much more memory (its RSS under AddressSanitizer grew 75 MiB instead of under
 * 64), which points at more pause/unpause cycles, each of which copies the paused chunk. */
static int on_owner(struct rku_curl_loop *lp)
{
    if (!lp->adopted || !pthread_equal(lp->owner, pthread_self()))
        return 0;
    lp->local_due = 1;
    return 1;
}

int rku_curl_loop_submit(struct rku_curl_loop *lp, struct rku_curl_job *j)
{
    if (!lp || !j->on_done)
        return -1;
    pthread_mutex_lock(&lp->mu);
    if (lp->stop || loop_start(lp) != 0) {
        pthread_mutex_unlock(&lp->mu);
        return -1;
    }
    curl_easy_setopt(j->curl, CURLOPT_PRIVATE, (char *)j);
    j->prev = NULL;
    j->next = lp->queue;
    lp->queue = j; /* the loop acts for the job from here */
    int local = on_owner(lp);
    pthread_mutex_unlock(&lp->mu);
    if (!local)
        wake(lp);
    return 0;
}

void rku_curl_loop_set_source(struct rku_curl_loop *lp, struct rku_loop_source *src)
{
    pthread_mutex_lock(&lp->mu);
    if (!lp->started && !lp->driven) {
        src->due_at = -1;
        lp->src = src;
    }
    pthread_mutex_unlock(&lp->mu);
}

int rku_curl_loop_wake_source(struct rku_curl_loop *lp)
{
    pthread_mutex_lock(&lp->mu);
    if (!lp->src || lp->stop || loop_start(lp) != 0) {
        pthread_mutex_unlock(&lp->mu);
        return -1;
    }
    lp->src_wake = 1;
    pthread_mutex_unlock(&lp->mu);
    wake(lp);
    return 0;
}

int rku_curl_loop_wake_job(struct rku_curl_loop *lp, struct rku_curl_job *j)
{
    int queued = 0;
    pthread_mutex_lock(&lp->mu);
    if (lp->started && !lp->stop && !j->wake_queued && j->on_wake) {
        j->wake_queued = 1;
        j->wnext = lp->wakes;
        lp->wakes = j;
        queued = 1;
    }
    pthread_mutex_unlock(&lp->mu);
    if (queued)
        wake(lp);
    return queued;
}

void rku_curl_loop_stop(struct rku_curl_loop *lp)
{
    if (!lp)
        return;
    pthread_mutex_lock(&lp->mu);
    int started = lp->started;
    lp->stop = 1;
    int joined = lp->joined;
    lp->joined = 1;
    pthread_mutex_unlock(&lp->mu);
    if (!started || joined)
        return;
    if (lp->driven) {
        wake(lp); /* the owner's passes end the open transfers (rku_curl_loop_drained) */
        return;
    }
    wake(lp);
    pthread_join(lp->thread, NULL);
    /* Wakes queued while the loop drained its last transfers: theirs to release. */
    struct rku_curl_job *w = lp->wakes;
    lp->wakes = NULL;
    while (w) {
        struct rku_curl_job *next = w->wnext;
        w->wake_queued = 0;
        w->on_wake(w);
        w = next;
    }
    curl_multi_cleanup(lp->multi);
    close(lp->epfd);
    close(lp->wakefd);
    lp->multi = NULL;
    lp->epfd = lp->wakefd = -1;
}

/* A driven loop whose owner no longer runs it: what is still queued or open ends here as
 * aborted (on_done on this thread), then the multi and descriptors go. */
static void driven_close(struct rku_curl_loop *lp)
{
    take_requests(lp);
    while (lp->active)
        finish(lp, lp->active, CURLE_ABORTED_BY_CALLBACK);
    take_requests(lp); /* wakes queued by on_done */
    curl_multi_cleanup(lp->multi);
    close(lp->epfd);
    close(lp->wakefd);
    lp->multi = NULL;
    lp->epfd = lp->wakefd = -1;
}

void rku_curl_loop_free(struct rku_curl_loop *lp)
{
    if (!lp)
        return;
    rku_curl_loop_stop(lp);
    if (lp->driven && lp->multi)
        driven_close(lp);
    pthread_mutex_destroy(&lp->mu);
    free(lp);
}
