/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file os_loop.c
 * @brief One transfer thread driving the instance's command streams with a curl multi handle.
 *
 * A command stream (execd POST /command, a session run) stays open for as long as the command
 * runs, possibly hours. Driven with curl_easy_perform on the request's own thread, each stream
 * holds a private multi handle and connection cache and runs libcurl's deep call chains (its
 * printf keeps a 4 KiB table on the stack) on that thread, whose touched stack stays resident:
 * about 20 KiB per in-flight command beyond what the request needs anyway. Here the request
 * thread hands the prepared easy handle to one loop thread and sleeps on a condition variable;
 * the loop runs every stream in one multi handle (one shared connection cache, so execd
 * connections are reused across requests) and wakes the waiter when its transfer ends.
 *
 * The loop is event driven (curl_multi_socket_action on epoll): a pass touches only the streams
 * with socket activity or an expired curl timer, so thousands of idle streams cost nothing.
 * Idle streams still need their progress check (client gone, deadlines), which curl runs only
 * for active transfers, so the loop runs each job's should_abort callback over every open stream
 * each OS_LOOP_SWEEP_MS.
 *
 * The loop knows jobs (struct os_loop_job), not the plugin's exchanges: os_http.c submits a job
 * and gets its result back, and nothing here calls into os_http.c.
 *
 * ABI 1.2: a job may also be submitted without a waiter (os_loop_submit, the asynchronous
 * command forms): its on_done callback runs on the loop thread when the transfer ends, so no
 * thread at all waits for an in-flight command. What such a completion has to do that may block
 * (resolving an endpoint again) goes to one helper thread (os_loop_defer), never to the loop.
 *
 * Callbacks (write, progress) run on the loop thread. They must not block: the streams routed
 * here only parse events and append to the core's in-memory collectors (non-blocking by
 * contract of their sinks). Transfers whose callbacks may wait for a client (uploads, downloads)
 * keep using curl_easy_perform on the request thread (os_xfer_perform).
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>

#include "os_internal.h"
#include "rkutil.h"

/** How often every open stream gets its abort check (client gone, deadlines). */
#define OS_LOOP_SWEEP_MS 500
/** epoll events handled per wake-up. */
#define OS_LOOP_EVENTS 64

struct os_loop {
    pthread_mutex_t mu;
    pthread_t thread;
    int started;
    int stop;                   /**< guarded by mu */
    struct os_loop_job *queue;  /**< submitted, not yet in the multi (guarded by mu) */
    CURLM *multi;               /**< loop thread only (after start) */
    int epfd;                   /**< epoll set: curl's sockets and the wake-up eventfd */
    int wakefd;                 /**< eventfd: a submission or stop is pending */
    int64_t timer_at;           /**< curl's next timeout (monotonic ms), -1 when none */
    struct os_loop_job *active; /**< transfers in the multi (loop thread only) */
    /* the helper thread for blocking follow-ups (os_loop_defer), guarded by mu */
    pthread_t helper;
    int helper_started;
    int helper_stop;
    pthread_cond_t helper_cv;
    struct os_loop_task *tasks, *tasks_tail;
};

/** Monotonic milliseconds. */
static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/** CURLMOPT_SOCKETFUNCTION: mirror curl's interest in a socket into the epoll set. */
static int sock_cb(CURL *e, curl_socket_t s, int what, void *userp, void *socketp)
{
    (void)e;
    (void)socketp;
    struct os_loop *lp = userp;
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

/** CURLMOPT_TIMERFUNCTION: remember when curl wants to be called back. */
static int timer_cb(CURLM *m, long timeout_ms, void *userp)
{
    (void)m;
    struct os_loop *lp = userp;
    lp->timer_at = timeout_ms < 0 ? -1 : mono_ms() + timeout_ms;
    return 0;
}

/** Unlink j from the active list. */
static void active_unlink(struct os_loop *lp, struct os_loop_job *j)
{
    if (j->prev)
        j->prev->next = j->next;
    else
        lp->active = j->next;
    if (j->next)
        j->next->prev = j->prev;
    j->next = j->prev = NULL;
}

/** Take j out of the multi, mark it finished with cc and wake its waiter. */
static void finish(struct os_loop *lp, struct os_loop_job *j, CURLcode cc)
{
    curl_multi_remove_handle(lp->multi, j->curl);
    active_unlink(lp, j);
    if (j->on_done) {
        /* Submitted without a waiter: hand the result back on this thread. */
        curl_easy_setopt(j->curl, CURLOPT_PRIVATE, NULL);
        j->curl_code = (int)cc;
        j->on_done(j);
        return;
    }
    pthread_mutex_lock(&lp->mu);
    j->curl_code = (int)cc;
    j->done = 1;
    pthread_cond_signal(&j->cv);
    pthread_mutex_unlock(&lp->mu);
}

/** Add the submitted transfers to the multi. Returns the stop flag. */
static int take_submissions(struct os_loop *lp)
{
    uint64_t n;
    while (read(lp->wakefd, &n, sizeof n) == (ssize_t)sizeof n)
        ;
    pthread_mutex_lock(&lp->mu);
    struct os_loop_job *q = lp->queue;
    lp->queue = NULL;
    int stop = lp->stop;
    pthread_mutex_unlock(&lp->mu);
    while (q) {
        struct os_loop_job *next = q->next;
        q->prev = NULL;
        q->next = lp->active;
        if (lp->active)
            lp->active->prev = q;
        lp->active = q;
        CURLMcode mc = curl_multi_add_handle(lp->multi, q->curl);
        if (mc != CURLM_OK) {
            if (q->errbuf && q->errbuf_len)
                snprintf(q->errbuf, q->errbuf_len, "%s", curl_multi_strerror(mc));
            finish(lp, q, CURLE_FAILED_INIT);
        }
        q = next;
    }
    return stop;
}

/** Hand back every transfer curl reports finished. */
static void reap(struct os_loop *lp)
{
    CURLMsg *msg;
    int left;
    while ((msg = curl_multi_info_read(lp->multi, &left))) {
        if (msg->msg != CURLMSG_DONE)
            continue;
        struct os_loop_job *j = NULL;
        curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&j);
        CURLcode cc = msg->data.result;
        if (j)
            finish(lp, j, cc);
        else
            curl_multi_remove_handle(lp->multi, msg->easy_handle);
    }
}

/** The abort check for every open stream (curl runs it only for active ones). */
static void sweep(struct os_loop *lp)
{
    struct os_loop_job *j = lp->active;
    while (j) {
        struct os_loop_job *next = j->next;
        if (j->should_abort && j->should_abort(j->ctx))
            finish(lp, j, CURLE_ABORTED_BY_CALLBACK);
        j = next;
    }
}

/** The loop thread. */
static void *loop_main(void *arg)
{
    struct os_loop *lp = arg;
    rku_thread_c_locale(); /* the stream parser runs json-c on every event */
    int64_t sweep_at = mono_ms() + OS_LOOP_SWEEP_MS;
    struct epoll_event evs[OS_LOOP_EVENTS];
    int running = 0;
    for (;;) {
        int stop = take_submissions(lp);
        if (stop && !lp->active)
            break;
        int64_t now = mono_ms();
        int64_t until = sweep_at;
        if (lp->timer_at >= 0 && lp->timer_at < until)
            until = lp->timer_at;
        int wait = until > now ? (int)(until - now) : 0;
        int n = epoll_wait(lp->epfd, evs, OS_LOOP_EVENTS, wait);
        for (int i = 0; i < n; i++) {
            int fd = evs[i].data.fd;
            if (fd == lp->wakefd)
                continue; /* drained by take_submissions */
            int mask = 0;
            if (evs[i].events & EPOLLIN)
                mask |= CURL_CSELECT_IN;
            if (evs[i].events & EPOLLOUT)
                mask |= CURL_CSELECT_OUT;
            if (evs[i].events & (EPOLLERR | EPOLLHUP))
                mask |= CURL_CSELECT_ERR;
            curl_multi_socket_action(lp->multi, fd, mask, &running);
        }
        now = mono_ms();
        if (lp->timer_at >= 0 && now >= lp->timer_at) {
            lp->timer_at = -1;
            curl_multi_socket_action(lp->multi, CURL_SOCKET_TIMEOUT, 0, &running);
        }
        reap(lp);
        if (now >= sweep_at) {
            sweep(lp);
            sweep_at = now + OS_LOOP_SWEEP_MS;
        }
    }
    return NULL;
}

/** Start the loop on first use (config checks never create it); called with lp->mu held.
 *  0 on success. */
static int loop_start(struct os_loop *lp)
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
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    int rc = pthread_create(&lp->thread, &attr, loop_main, lp);
    pthread_attr_destroy(&attr);
    if (rc != 0)
        goto fail;
    lp->started = 1;
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

/** Create a loop; its thread starts on first use. NULL on OOM (streams then run on the
 *  request thread). */
struct os_loop *os_loop_new(void)
{
    struct os_loop *lp = calloc(1, sizeof(*lp));
    if (!lp)
        return NULL;
    pthread_mutex_init(&lp->mu, NULL);
    pthread_cond_init(&lp->helper_cv, NULL);
    lp->epfd = lp->wakefd = -1;
    return lp;
}

/** The helper thread: runs deferred tasks in order until stopped and drained. */
static void *helper_main(void *arg)
{
    struct os_loop *lp = arg;
    rku_thread_c_locale();
    pthread_mutex_lock(&lp->mu);
    for (;;) {
        struct os_loop_task *t = lp->tasks;
        if (!t) {
            if (lp->helper_stop)
                break;
            pthread_cond_wait(&lp->helper_cv, &lp->mu);
            continue;
        }
        lp->tasks = t->next;
        if (!lp->tasks)
            lp->tasks_tail = NULL;
        pthread_mutex_unlock(&lp->mu);
        t->run(t);
        pthread_mutex_lock(&lp->mu);
    }
    pthread_mutex_unlock(&lp->mu);
    return NULL;
}

int os_loop_defer(struct os_loop *lp, struct os_loop_task *t)
{
    if (!lp)
        return -1;
    pthread_mutex_lock(&lp->mu);
    if (lp->helper_stop) {
        pthread_mutex_unlock(&lp->mu);
        return -1;
    }
    if (!lp->helper_started) {
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setstacksize(&attr, 256 * 1024);
        int rc = pthread_create(&lp->helper, &attr, helper_main, lp);
        pthread_attr_destroy(&attr);
        if (rc != 0) {
            pthread_mutex_unlock(&lp->mu);
            return -1;
        }
        lp->helper_started = 1;
    }
    t->next = NULL;
    if (lp->tasks_tail)
        lp->tasks_tail->next = t;
    else
        lp->tasks = t;
    lp->tasks_tail = t;
    pthread_cond_signal(&lp->helper_cv);
    pthread_mutex_unlock(&lp->mu);
    return 0;
}

/** Wake the loop thread. */
static void wake(struct os_loop *lp)
{
    uint64_t one = 1;
    ssize_t w = write(lp->wakefd, &one, sizeof one);
    (void)w; /* EAGAIN: a wake-up is already pending */
}

/** Stop the loop (after the last request): waits for running transfers, which end by their
 *  deadline or cancellation (the host reports every call cancelled at shutdown). */
void os_loop_free(struct os_loop *lp)
{
    if (!lp)
        return;
    pthread_mutex_lock(&lp->mu);
    int started = lp->started;
    lp->stop = 1;
    pthread_mutex_unlock(&lp->mu);
    if (started) {
        wake(lp);
        pthread_join(lp->thread, NULL);
    }
    /* The helper drains its tasks (completions ending their calls) before it stops; a task
     * that starts a transfer now finds the loop stopped and runs it on the helper itself. */
    pthread_mutex_lock(&lp->mu);
    int helper = lp->helper_started;
    lp->helper_stop = 1;
    pthread_cond_signal(&lp->helper_cv);
    pthread_mutex_unlock(&lp->mu);
    if (helper)
        pthread_join(lp->helper, NULL);
    if (started) {
        curl_multi_cleanup(lp->multi);
        close(lp->epfd);
        close(lp->wakefd);
    }
    pthread_cond_destroy(&lp->helper_cv);
    pthread_mutex_destroy(&lp->mu);
    free(lp);
}

/** Start a job whose on_done reports its end (no waiter). */
int os_loop_submit(struct os_loop *lp, struct os_loop_job *j)
{
    if (!lp || !j->on_done)
        return -1;
    pthread_mutex_lock(&lp->mu);
    if (lp->stop || loop_start(lp) != 0) {
        pthread_mutex_unlock(&lp->mu);
        return -1;
    }
    curl_easy_setopt(j->curl, CURLOPT_PRIVATE, (char *)j);
    j->done = 0;
    j->prev = NULL;
    j->next = lp->queue;
    lp->queue = j; /* the loop acts for the job from here */
    pthread_mutex_unlock(&lp->mu);
    wake(lp);
    return 0;
}

/** Run a job's prepared easy handle on the loop and wait for it to end; the result is in
 *  j->curl_code. Returns -1 when the loop is unavailable (the caller runs it itself). */
int os_loop_run(struct os_loop *lp, struct os_loop_job *j)
{
    if (!lp)
        return -1;
    pthread_mutex_lock(&lp->mu);
    if (lp->stop || loop_start(lp) != 0) {
        pthread_mutex_unlock(&lp->mu);
        return -1;
    }
    j->on_done = NULL;
    curl_easy_setopt(j->curl, CURLOPT_PRIVATE, (char *)j);
    pthread_cond_init(&j->cv, NULL);
    j->done = 0;
    j->prev = NULL;
    j->next = lp->queue;
    lp->queue = j;
    pthread_mutex_unlock(&lp->mu);
    wake(lp);
    pthread_mutex_lock(&lp->mu);
    while (!j->done)
        pthread_cond_wait(&j->cv, &lp->mu);
    pthread_mutex_unlock(&lp->mu);
    pthread_cond_destroy(&j->cv);
    curl_easy_setopt(j->curl, CURLOPT_PRIVATE, NULL);
    return 0;
}
