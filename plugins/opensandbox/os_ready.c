/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file os_ready.c
 * @brief Readiness: does a Running sandbox's execd answer yet (GET /ping)?
 *
 * OpenSandbox reports a sandbox Running once its container started; execd listens a moment
 * later, so a sandbox that turned Running recently counts as running only once its execd
 * answered (os_lifecycle.c decides when to ask, os_endpoint.c remembers who answered).
 *
 * A status read asks about one sandbox and waits (os_execd_ping). A list pass asks about every
 * sandbox that turned Running since the last pass, after a burst thousands: one at a time, each
 * an endpoint lookup on the lifecycle server and a ping, a pass answered a few hundred per
 * second (a few dozen against a server whose endpoint lookup takes tens of milliseconds) and
 * the rest stayed pending for pass after pass. os_execd_ping_many asks OS_READY_PARALLEL at a
 * time on the instance's loop: each sandbox is a two-step exchange (the endpoint, then the
 * ping) driven by completion callbacks, and the calling thread only starts new ones while the
 * pass's budget lasts and waits for the last to end. Every exchange has its own bound
 * (OS_READY_STEP_MS), so the wait is bounded too.
 */
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <time.h>

#include <json-c/json.h>

#include "os_internal.h"
#include "rkutil.h"

/** Sandboxes asked about at once by a list pass: each holds one upstream connection. */
#define OS_READY_PARALLEL 32
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

/** What the caller of os_execd_ping_many waits for. */
struct ready_batch {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    size_t in_flight; /**< checks started and not ended */
};

/** One sandbox's check: its exchange (the endpoint lookup, then the ping). */
struct ready_check {
    struct os_xfer x;
    struct os_inst *inst;
    struct ready_batch *b;
    struct os_ping_item *item;
    int pinging; /**< 0: the endpoint lookup is running; 1: the ping */
};

/** A check ended: tell the waiter (after this the batch may be gone). */
static void batch_leave(struct ready_batch *b)
{
    pthread_mutex_lock(&b->mu);
    b->in_flight--;
    pthread_cond_signal(&b->cv);
    pthread_mutex_unlock(&b->mu);
}

/** The check ended (ready or not): record it, free it and tell the waiter. */
static void check_end(struct ready_check *c, int ready)
{
    struct ready_batch *b = c->b;
    c->item->ready = ready;
    free(c);
    batch_leave(b);
}

static void check_step_done(struct os_xfer *x, rk_status s);

/** Start the ping once the endpoint reply arrived (it has been parsed and cached). 1 when the
 *  exchange runs (check_step_done will end the check). */
static int ping_start(struct ready_check *c, json_object *reply)
{
    struct rk_kv hdrs[OS_ENDPOINT_HEADERS_MAX];
    struct os_endpoint ep;
    char *base = NULL;
    int started = 0;
    if (os_ep_from_reply(c->inst, c->item->osid, OS_EXECD_PORT, reply, &ep, hdrs,
                         OS_ENDPOINT_HEADERS_MAX, &base) == 1 &&
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
    struct ready_check *c = (struct ready_check *)((char *)x - offsetof(struct ready_check, x));
    int ok = s == RK_OK && x->status == 200;
    if (c->pinging) {
        os_xfer_cleanup(x);
        check_end(c, ok);
        return;
    }
    json_object *reply = ok ? os_lc_body_json(x) : NULL;
    os_xfer_cleanup(x);
    int running = reply && ping_start(c, reply);
    json_object_put(reply);
    if (!running)
        check_end(c, 0);
}

/** Start the check of one sandbox: its endpoint lookup (the batch counts it in flight). */
static void check_start(struct os_inst *inst, struct ready_batch *b, struct os_ping_item *item)
{
    struct ready_check *c = calloc(1, sizeof(*c));
    char *path = c ? os_ep_path(inst, item->osid, OS_EXECD_PORT) : NULL;
    if (!path) { /* out of memory: not ready (asked again next pass) */
        free(c);
        batch_leave(b);
        return;
    }
    c->inst = inst;
    c->b = b;
    c->item = item;
    rk_status s = os_lc_xfer(&c->x, inst, NULL, "GET", path);
    free(path);
    if (s == RK_OK) {
        os_xfer_limit(&c->x, OS_READY_STEP_MS);
        if (os_xfer_start(&c->x, check_step_done) == RK_OK)
            return;
    }
    os_xfer_cleanup(&c->x);
    check_end(c, 0);
}

/**
 * Ask whether the execd of each of items[0..n) answers, OS_READY_PARALLEL at a time on the
 * instance's loop (each: the endpoint lookup, then GET /ping), and set items[i].ready. Checks
 * start while budget_ms from the first lasts; those not started by then stay not ready (a later
 * pass asks again). Returns once every started check ended (each step is bounded).
 */
void os_execd_ping_many(struct os_inst *inst, struct os_ping_item *items, size_t n,
                        int64_t budget_ms)
{
    const struct rk_host *h = inst->host;
    struct ready_batch b = {.in_flight = 0};
    pthread_mutex_init(&b.mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&b.cv, &ca);
    pthread_condattr_destroy(&ca);
    for (size_t i = 0; i < n; i++)
        items[i].ready = 0;
    int64_t stop_at = h->now_ms() + budget_ms;
    size_t next = 0;
    pthread_mutex_lock(&b.mu);
    for (;;) {
        while (b.in_flight < OS_READY_PARALLEL && next < n && h->now_ms() < stop_at) {
            b.in_flight++;
            pthread_mutex_unlock(&b.mu);
            check_start(inst, &b, &items[next++]); /* may end at once (takes b.mu) */
            pthread_mutex_lock(&b.mu);
        }
        int64_t now = h->now_ms();
        if (b.in_flight == 0 && (next == n || now >= stop_at))
            break;
        /* Wake for an ended check, or at the budget's end to stop starting new ones. */
        int64_t wait_ms = now < stop_at ? stop_at - now : 100;
        if (wait_ms > 100)
            wait_ms = 100;
        struct timespec ts = rku_time_after_ms(CLOCK_MONOTONIC, wait_ms);
        pthread_cond_timedwait(&b.cv, &b.mu, &ts);
    }
    pthread_mutex_unlock(&b.mu);
    pthread_cond_destroy(&b.cv);
    pthread_mutex_destroy(&b.mu);
}
