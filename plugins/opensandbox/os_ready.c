/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file os_ready.c
 * @brief Readiness: does a Running sandbox's execd answer yet (GET /ping)?
 *
 * OpenSandbox reports a sandbox Running once its container started; execd listens a moment
 * later, so a sandbox that turned Running recently counts as running only once its execd
 * answered (os_lifecycle.c decides when to ask, os_endpoint.c remembers who answered).
 *
 * A status read asks about one sandbox and waits (os_execd_ping). A list pass does not wait:
 * it reports a sandbox that turned Running recently and was not heard from as pending and
 * queues its check (os_execd_check); the checks run in the background on the instance's loop,
 * OS_READY_PARALLEL at a time, each a two-step exchange (the endpoint lookup, then the ping)
 * driven by completion callbacks and bounded by OS_READY_STEP_MS per step, and one that
 * answers is noted (os_ep_ready_note), so the next pass reports the sandbox running, and is
 * reported to the core at once (host->state_report, ABI 1.3), which then records the sandbox
 * running without waiting for that pass. After a
 * burst of thousands of new sandboxes, passes waiting for their checks (one at a time, later
 * within a time budget) left most of them pending pass after pass; now a pass costs the same
 * whatever the checks take, and the checks keep the loop busy between passes.
 *
 * The queue is bounded (OS_READY_QUEUED_MAX: a sandbox not queued is queued by a later pass)
 * and holds each sandbox once; os_ready_stop drops what has not started before the loop
 * stops (the running checks end by their bounds).
 */
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <json-c/json.h>

#include "os_internal.h"
#include "rkutil.h"

/** Readiness checks running at once: each holds one upstream connection. */
#define OS_READY_PARALLEL 64
/** Readiness checks queued or running at most. */
#define OS_READY_QUEUED_MAX 65536
/** Hash buckets of the check queue. */
#define OS_READY_QUEUE_BUCKETS 4096
/** Bound of each step of a batched readiness check (the endpoint lookup, the ping). */
#define OS_READY_STEP_MS 2000

int os_execd_ping(struct os_inst *inst, struct rk_call *call, const char *osid, int64_t timeout_ms)
{
    struct os_xfer x;
    if (os_execd_simple(inst, call, osid, "ping", "GET", "/ping", timeout_ms, NULL, NULL, &x) !=
        RK_OK)
        return 0;
    int ok = x.status == 200;
    os_xfer_cleanup(&x);
    return ok;
}

/** One sandbox's check, queued or running: its exchange (the endpoint lookup, then the ping). */
struct os_ready_check {
    struct os_xfer x;
    struct os_inst *inst;
    struct os_ready_check *hnext; /**< same hash bucket */
    struct os_ready_check *qnext; /**< next queued (not started) */
    char *since;                  /**< status.lastTransitionAt the answer is noted with */
    char *rock_id;                /**< the ROCK id (after osid in the same block) */
    int pinging;                  /**< 0: the endpoint lookup is running; 1: the ping */
    char osid[];
};

/** The queue of an instance (inst->ready). */
struct os_ready_queue {
    pthread_mutex_t mu;
    struct os_ready_check *tab[OS_READY_QUEUE_BUCKETS]; /**< queued and running, by osid */
    struct os_ready_check *head, *tail;                 /**< queued, oldest first */
    size_t count, running;
    int stopped;
};

static size_t check_bucket(const char *osid)
{
    size_t h = 5381;
    for (const unsigned char *p = (const unsigned char *)osid; *p; p++)
        h = h * 33 + *p;
    return h % OS_READY_QUEUE_BUCKETS;
}

static void check_step_done(struct os_xfer *x, rk_status s);

/** Take the checks that may start now off the queue (under q->mu): a list linked by qnext. */
static struct os_ready_check *take_startable_locked(struct os_ready_queue *q)
{
    struct os_ready_check *first = NULL, **tail = &first;
    while (!q->stopped && q->running < OS_READY_PARALLEL && q->head) {
        struct os_ready_check *c = q->head;
        q->head = c->qnext;
        if (!q->head)
            q->tail = NULL;
        c->qnext = NULL;
        *tail = c;
        tail = &c->qnext;
        q->running++;
    }
    return first;
}

static int check_start(struct os_ready_check *c);

/** Start every check in the list (taken by take_startable_locked), and the queued ones that
 *  may take the place of those that could not start (iteratively: no recursion). */
static void start_all(struct os_ready_queue *q, struct os_ready_check *c)
{
    while (c) {
        int failed = 0;
        while (c) {
            struct os_ready_check *next = c->qnext;
            c->qnext = NULL;
            if (check_start(c) != 0)
                failed = 1;
            c = next;
        }
        if (!failed)
            return;
        pthread_mutex_lock(&q->mu);
        c = take_startable_locked(q);
        pthread_mutex_unlock(&q->mu);
    }
}

/** Tell the core at once that a sandbox the list pass reported pending now runs (ABI 1.3
 *  host->state_report), rather than leaving the news to the next pass. */
static void report_running(struct os_inst *inst, const struct os_ready_check *c)
{
    const struct rk_host *h = inst->host;
    if (!RK_HOST_HAS(h, state_report))
        return; /* a core before 1.3: the next pass reports it */
    struct rk_status_info info = {.state = RK_STATE_RUNNING, .upstream_id = c->osid};
    h->state_report(c->rock_id, &info);
}

/** A running check ended (ready or not): note the answer and free it; with pump, start the
 *  queued checks that may run now. */
static void check_end(struct os_ready_check *c, int ready, int pump)
{
    struct os_inst *inst = c->inst;
    struct os_ready_queue *q = inst->ready;
    if (ready) {
        os_ep_ready_note(inst, c->osid, c->since);
        report_running(inst, c);
    }
    pthread_mutex_lock(&q->mu);
    struct os_ready_check **pp = &q->tab[check_bucket(c->osid)];
    while (*pp && *pp != c)
        pp = &(*pp)->hnext;
    if (*pp)
        *pp = c->hnext;
    q->count--;
    q->running--;
    struct os_ready_check *next = pump ? take_startable_locked(q) : NULL;
    pthread_mutex_unlock(&q->mu);
    free(c->since);
    free(c);
    start_all(q, next);
}

/** Start the ping once the endpoint reply arrived (it has been parsed and cached). 1 when the
 *  exchange runs (check_step_done will end the check). */
static int ping_start(struct os_ready_check *c, json_object *reply)
{
    struct rk_kv hdrs[OS_ENDPOINT_HEADERS_MAX];
    struct os_endpoint ep;
    char *base = NULL;
    int started = 0;
    if (os_ep_from_reply(c->inst, c->osid, OS_EXECD_PORT, reply, &ep, hdrs, OS_ENDPOINT_HEADERS_MAX,
                         &base) == 1 &&
        os_execd_xfer(&c->x, c->inst, NULL, &ep, "GET", "/ping", OS_READY_STEP_MS) == RK_OK) {
        c->pinging = 1;
        started = os_xfer_start(&c->x, check_step_done) == RK_OK;
        if (!started)
            os_xfer_cleanup(&c->x);
    }
    free(base);
    return started;
}

/** os_xfer_start's completion (the loop thread, or the caller when the loop is unavailable). */
static void check_step_done(struct os_xfer *x, rk_status s)
{
    struct os_ready_check *c =
        (struct os_ready_check *)((char *)x - offsetof(struct os_ready_check, x));
    int ok = s == RK_OK && x->status == 200;
    if (c->pinging) {
        os_xfer_cleanup(x);
        check_end(c, ok, 1);
        return;
    }
    json_object *reply = ok ? os_lc_body_json(x) : NULL;
    os_xfer_cleanup(x);
    int running = reply && ping_start(c, reply);
    json_object_put(reply);
    if (!running)
        check_end(c, 0, 1);
}

/** Start a check taken off the queue: its endpoint lookup. 0 when it runs; -1 when it ended
 *  at once (not ready: a later pass queues it again; the caller starts the next). */
static int check_start(struct os_ready_check *c)
{
    char *path = os_ep_path(c->inst, c->osid, OS_EXECD_PORT);
    rk_status s = path ? os_lc_xfer(&c->x, c->inst, NULL, "GET", path) : RK_E_NOMEM;
    free(path);
    if (s == RK_OK) {
        os_xfer_limit(&c->x, OS_READY_STEP_MS);
        if (os_xfer_start(&c->x, check_step_done) == RK_OK)
            return 0;
    }
    os_xfer_cleanup(&c->x);
    check_end(c, 0, 0);
    return -1;
}

void os_execd_check(struct os_inst *inst, const char *rock_id, const char *osid, const char *since)
{
    struct os_ready_queue *q = inst->ready;
    if (!q || !osid || !rock_id)
        return;
    size_t len = strlen(osid), rlen = strlen(rock_id);
    pthread_mutex_lock(&q->mu);
    size_t b = check_bucket(osid);
    struct os_ready_check *c = q->tab[b];
    while (c && strcmp(c->osid, osid) != 0)
        c = c->hnext;
    if (c || q->stopped || q->count >= OS_READY_QUEUED_MAX) {
        pthread_mutex_unlock(&q->mu); /* queued already, or full: a later pass asks again */
        return;
    }
    c = calloc(1, sizeof(*c) + len + 1 + rlen + 1);
    char *sc = since ? strdup(since) : NULL;
    if (!c || (since && !sc)) {
        pthread_mutex_unlock(&q->mu);
        free(c);
        free(sc);
        return;
    }
    c->inst = inst;
    c->since = sc;
    memcpy(c->osid, osid, len + 1);
    c->rock_id = memcpy(c->osid + len + 1, rock_id, rlen + 1);
    c->hnext = q->tab[b];
    q->tab[b] = c;
    if (q->tail)
        q->tail->qnext = c;
    else
        q->head = c;
    q->tail = c;
    q->count++;
    struct os_ready_check *start = take_startable_locked(q);
    pthread_mutex_unlock(&q->mu);
    start_all(q, start);
}

int os_ready_init(struct os_inst *inst)
{
    struct os_ready_queue *q = calloc(1, sizeof(*q));
    if (!q || pthread_mutex_init(&q->mu, NULL) != 0) {
        free(q);
        return -1;
    }
    inst->ready = q;
    return 0;
}

void os_ready_stop(struct os_inst *inst)
{
    struct os_ready_queue *q = inst->ready;
    if (!q)
        return;
    pthread_mutex_lock(&q->mu);
    q->stopped = 1;
    struct os_ready_check *c = q->head;
    q->head = q->tail = NULL;
    while (c) { /* queued, never started: unlink and free */
        struct os_ready_check *next = c->qnext;
        struct os_ready_check **pp = &q->tab[check_bucket(c->osid)];
        while (*pp && *pp != c)
            pp = &(*pp)->hnext;
        if (*pp)
            *pp = c->hnext;
        q->count--;
        free(c->since);
        free(c);
        c = next;
    }
    pthread_mutex_unlock(&q->mu);
}

void os_ready_free(struct os_inst *inst)
{
    struct os_ready_queue *q = inst->ready;
    if (!q)
        return;
    /* The loop has stopped: every running check ended (os_http_free waited for it). */
    pthread_mutex_destroy(&q->mu);
    free(q);
    inst->ready = NULL;
}
