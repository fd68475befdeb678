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
 * The loop itself is librkutil's (lib/rkcurlloop.h, shared with the core's HTTP relay): event
 * driven (curl_multi_socket_action on epoll), so thousands of idle streams cost nothing, and each
 * job's should_abort runs over every open stream each OS_LOOP_SWEEP_MS (curl checks progress
 * only for active transfers). This file adds what the plugin needs on top: waiters that sleep
 * until their job ended (os_loop_run), and the helper thread for blocking follow-ups.
 *
 * The loop knows jobs (struct os_loop_job), not the plugin's exchanges: os_http.c submits a job
 * and gets its result back, and nothing here calls into os_http.c.
 *
 * ABI 1.2: a job may also be submitted without a waiter (os_loop_submit, the asynchronous
 * command forms): its on_done callback runs on the loop thread when the transfer ends, so no
 * thread at all waits for an in-flight command. What such a completion has to do that may block
 * (resolving an endpoint again) goes to one helper thread (os_loop_defer), never to the loop.
 *
 * The same thread also runs librkutil's small HTTP/1.1 client (lib/rkh1.c), which carries
 * the execd exchanges on IP literals with far less memory per open stream than a libcurl transfer;
 * os_http.c chooses per exchange.
 *
 * Callbacks (write, progress) run on the loop thread. They must not block: the streams routed
 * here only parse events and append to the core's in-memory collectors (non-blocking by
 * contract of their sinks). Transfers whose callbacks may wait for a client (uploads, downloads)
 * keep using curl_easy_perform on the request thread (os_xfer_perform).
 */
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include <curl/curl.h>

#include "os_internal.h"
#include "rkcurlloop.h"
#include "rkutil.h"

/** How often every open stream gets its abort check (client gone, deadlines). */
#define OS_LOOP_SWEEP_MS 500

struct os_loop {
    pthread_mutex_t mu;       /**< the waiters' done flags and the helper's queue */
    struct rku_curl_loop *cl; /**< the transfer loop (its thread starts on first use) */
    struct rku_h1 *h1;        /**< the small HTTP/1.1 client on the same thread, or NULL */
    /* the helper thread for blocking follow-ups (os_loop_defer), guarded by mu */
    pthread_t helper;
    int helper_started;
    int helper_stop;
    pthread_cond_t helper_cv;
    struct os_loop_task *tasks, *tasks_tail;
};

static struct os_loop_job *job_of(struct rku_curl_job *rj)
{
    return (struct os_loop_job *)((char *)rj - offsetof(struct os_loop_job, rj));
}

/** The transfer ended (loop thread): hand the result to on_done, or wake the waiter. */
static void job_done(struct rku_curl_job *rj, int cc)
{
    struct os_loop_job *j = job_of(rj);
    if (cc == CURLE_FAILED_INIT && j->errbuf && j->errbuf_len && !j->errbuf[0])
        snprintf(j->errbuf, j->errbuf_len, "the transfer loop could not take the request");
    if (j->on_done) {
        /* Submitted without a waiter: hand the result back on this thread. */
        j->curl_code = cc;
        j->on_done(j);
        return;
    }
    pthread_mutex_lock(&j->lp->mu);
    j->curl_code = cc;
    j->done = 1;
    pthread_cond_signal(&j->cv);
    pthread_mutex_unlock(&j->lp->mu);
}

/** The periodic check of an open stream (loop thread). */
static int job_check(struct rku_curl_job *rj, int64_t now_ms)
{
    (void)now_ms;
    struct os_loop_job *j = job_of(rj);
    return j->should_abort && j->should_abort(j->ctx);
}

/** Create a loop; its thread starts on first use. NULL on OOM (streams then run on the
 *  request thread). */
struct os_loop *os_loop_new(void)
{
    struct os_loop *lp = calloc(1, sizeof(*lp));
    if (!lp)
        return NULL;
    lp->cl = rku_curl_loop_new(OS_LOOP_SWEEP_MS, 0);
    if (!lp->cl) {
        free(lp);
        return NULL;
    }
    lp->h1 = rku_h1_new_on(lp->cl, 0); /* NULL: every exchange goes through libcurl */
    pthread_mutex_init(&lp->mu, NULL);
    pthread_cond_init(&lp->helper_cv, NULL);
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

/** Stop the loop (after the last request): waits for running transfers, which end by their
 *  deadline or cancellation (the host reports every call cancelled at shutdown). */
void os_loop_free(struct os_loop *lp)
{
    if (!lp)
        return;
    rku_curl_loop_stop(lp->cl);
    /* The helper drains its tasks (completions ending their calls) before it stops; a task
     * that starts a transfer now finds the loop stopped and runs it on the helper itself. */
    pthread_mutex_lock(&lp->mu);
    int helper = lp->helper_started;
    lp->helper_stop = 1;
    pthread_cond_signal(&lp->helper_cv);
    pthread_mutex_unlock(&lp->mu);
    if (helper)
        pthread_join(lp->helper, NULL);
    rku_curl_loop_free(lp->cl);
    rku_h1_free(lp->h1);
    pthread_cond_destroy(&lp->helper_cv);
    pthread_mutex_destroy(&lp->mu);
    free(lp);
}

/** The loop's HTTP/1.1 client, or NULL (NULL-safe). */
struct rku_h1 *os_loop_h1(struct os_loop *lp)
{
    return lp ? lp->h1 : NULL;
}

/** Prepare j's loop job. */
static void job_init(struct os_loop *lp, struct os_loop_job *j)
{
    j->lp = lp;
    j->done = 0;
    j->rj.curl = j->curl;
    j->rj.on_done = job_done;
    j->rj.should_abort = job_check;
    j->rj.on_wake = NULL;
}

/** Start a job whose on_done reports its end (no waiter). */
int os_loop_submit(struct os_loop *lp, struct os_loop_job *j)
{
    if (!lp || !j->on_done)
        return -1;
    job_init(lp, j);
    return rku_curl_loop_submit(lp->cl, &j->rj);
}

/** Run a job's prepared easy handle on the loop and wait for it to end; the result is in
 *  j->curl_code. Returns -1 when the loop is unavailable (the caller runs it itself). */
int os_loop_run(struct os_loop *lp, struct os_loop_job *j)
{
    if (!lp)
        return -1;
    j->on_done = NULL;
    job_init(lp, j);
    pthread_cond_init(&j->cv, NULL);
    if (rku_curl_loop_submit(lp->cl, &j->rj) != 0) {
        pthread_cond_destroy(&j->cv);
        return -1;
    }
    pthread_mutex_lock(&lp->mu);
    while (!j->done)
        pthread_cond_wait(&j->cv, &lp->mu);
    pthread_mutex_unlock(&lp->mu);
    pthread_cond_destroy(&j->cv);
    return 0;
}
