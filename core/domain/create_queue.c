/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The create queue (create_queue.h).
 *
 * Threads: one feeder and up to runtime.create_concurrency workers. The
 * feeder claims as many queued creates as there are free worker slots (the
 * store also caps the claims store-wide and per second), keeps the claims of
 * this admin alive (renewing their lease every RENEW_MS) and hands each claim
 * to a worker through a local list no longer than the free slots. A worker
 * runs one backend create at a time with the run function main.c gives
 * (rk_lifecycle_create_queued, with the record the claim read in its own round
 * trip) and hands the finished create to the feeder, whose next claim drops its
 * claim in the same store step (rk_createq_claim's done list: no round trip of
 * its own per create; a worker drops it itself once the feeder has stopped). Workers are started
 * when a claim finds none idle and end after IDLE_EXIT_MS without work, so an idle admin holds no
 * create thread. The feeder is woken at once by a local submit or a finished create, and otherwise
 * polls every POLL_MS: that is how it sees creates other admins queued (taken after STEAL_AFTER_MS)
 * and claims of dead admins (queued again after LEASE_MS).
 */
#include "domain/create_queue.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/app.h"
#include "base/util.h"
#include "config/config.h"
#include "host/host.h"
#include "obs/log.h"
#include "obs/metrics.h"
#include "store/store.h"

/** A claim holds this long unless renewed; a dead admin's creates wait this long. */
#define LEASE_MS 15000
/** How often the feeder renews this admin's claims. */
#define RENEW_MS 5000
/** How often the feeder looks for creates other admins queued. */
#define POLL_MS 200
/** Another admin's queued create is taken after waiting this long. */
#define STEAL_AFTER_MS 2000
/** A worker without work for this long ends. */
#define IDLE_EXIT_MS 30000
/** Most creates claimed in one store round trip. */
#define CLAIM_MAX 256

/* A claimed create waiting for a worker: what the claim returned. */
struct job {
    struct job *next;
    int64_t enqueued_ms;
    int retaken;
    json_object *rec; /* owned; NULL: the record is gone */
    char id[];
};

static void job_free(struct job *j)
{
    json_object_put(j->rec);
    free(j);
}

static struct {
    pthread_mutex_t mu;
    pthread_cond_t feed_cv;  /* the feeder waits here (kick) */
    pthread_cond_t work_cv;  /* idle workers wait here */
    pthread_cond_t exit_cv;  /* stop waits here for the workers */
    struct job *head, *tail; /* claimed, not started */
    size_t n_jobs;
    char **done; /* finished creates whose claims the next claim drops (owned) */
    size_t n_done, cap_done;
    int n_workers, n_idle, running;
    int kicked, stop, started;
    pthread_t feeder;
    struct rk_app *app;
    rk_create_run_fn run;
    char owner[RK_CREATEQ_OWNER_MAX + 1]; /* this admin in the store: host:pid:random */
} q = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* Counters for /metrics. */
static atomic_ullong refused_total, takeover_total, started_total;

/* Wait-time histogram (enqueue -> backend call), seconds. */
static const double wait_bounds[] = {0.01, 0.05, 0.1, 0.25, 0.5, 1,   2.5,
                                     5,    10,   30,  60,   120, 300, 600};
static unsigned long long wait_counts[sizeof wait_bounds / sizeof wait_bounds[0] + 1];
static struct rk_histogram wait_hist = RK_HISTOGRAM_INIT(wait_bounds, wait_counts);

static void *worker_main(void *arg);

/* Append a claimed create to the local list (taking its record) and make sure a worker takes
 * it (caller holds q.mu). 0, or -1 when no worker can run it. */
static int add_job_locked(struct rk_createq_item *it)
{
    size_t len = strlen(it->id);
    struct job *j = malloc(sizeof *j + len + 1);
    if (!j)
        return -1;
    memcpy(j->id, it->id, len + 1);
    j->enqueued_ms = it->enqueued_ms;
    j->retaken = it->retaken;
    j->rec = it->rec;
    it->rec = NULL;
    j->next = NULL;
    if (q.tail)
        q.tail->next = j;
    else
        q.head = j;
    q.tail = j;
    q.n_jobs++;
    if (q.n_idle < (int)q.n_jobs && q.n_workers < q.app->cfg->runtime.create_concurrency) {
        if (rk_app_bg_start(worker_main, NULL) == 0)
            q.n_workers++;
        else if (q.n_workers == 0)
            rk_warn("create queue: cannot start a create worker");
    }
    pthread_cond_signal(&q.work_cv);
    return 0;
}

/* Hand the finished create id to the feeder (caller holds q.mu). 0, or -1 when the feeder
 * has stopped or memory ran out (the caller drops the claim itself). */
static int done_add_locked(const char *id)
{
    if (q.stop)
        return -1;
    if (q.n_done == q.cap_done) {
        size_t cap = q.cap_done ? q.cap_done * 2 : 64;
        char **nd = realloc(q.done, cap * sizeof *nd);
        if (!nd)
            return -1;
        q.done = nd;
        q.cap_done = cap;
    }
    if (!(q.done[q.n_done] = strdup(id)))
        return -1;
    q.n_done++;
    return 0;
}

/* Take up to max finished creates out of the list into out (caller holds q.mu); how many. */
static size_t done_take_locked(char **out, size_t max)
{
    size_t n = q.n_done < max ? q.n_done : max;
    if (n) /* q.done is NULL until the first finished create */
        memcpy(out, q.done + q.n_done - n, n * sizeof *out);
    q.n_done -= n;
    return n;
}

/* Drop the claims of finished creates one by one and free the ids (the feeder is stopping,
 * or could not take them). */
static void done_drop(char **ids, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char err[RK_STORE_ERRLEN];
        if (rk_createq_done(q.app->store, ids[i], q.owner, err, sizeof err) == RK_STORE_ERROR)
            rk_warn("create queue: sandbox %s: cannot drop its finished create: %s", ids[i], err);
        free(ids[i]);
    }
}

/* Give a claim back to the queue (it was never started). */
static void release(const char *id)
{
    char err[RK_STORE_ERRLEN];
    if (rk_createq_release(q.app->store, id, q.owner, err, sizeof err) == RK_STORE_ERROR)
        rk_warn("create queue: sandbox %s: cannot give its create back: %s", id, err);
}

/* Thread: claim creates for free worker slots, renew the claims, wait. */
static void *feeder_main(void *arg)
{
    struct rk_app *app = arg;
    const struct rk_config *cfg = app->cfg;
    int64_t next_renew = 0, last_warn = 0;
    char *done[CLAIM_MAX];
    pthread_mutex_lock(&q.mu);
    while (!q.stop) {
        long long free_slots =
            (long long)cfg->runtime.create_concurrency - q.running - (long long)q.n_jobs;
        int busy = q.running + (int)q.n_jobs > 0;
        size_t n_done = done_take_locked(done, CLAIM_MAX);
        q.kicked = 0;
        pthread_mutex_unlock(&q.mu);

        size_t want = free_slots > 0 ? (size_t)free_slots : 0, got = 0;
        if (want > CLAIM_MAX)
            want = CLAIM_MAX;
        char err[RK_STORE_ERRLEN];
        struct rk_createq_item *items = NULL;
        if (want > 0 || n_done > 0) {
            struct rk_createq_claim c = {.owner = q.owner,
                                         .now_ms = rk_epoch_ms(),
                                         .lease_ms = LEASE_MS,
                                         .want = want,
                                         .concurrency = cfg->runtime.create_concurrency,
                                         .rate = cfg->runtime.create_rate,
                                         .steal_after_ms = STEAL_AFTER_MS,
                                         .done = (const char *const *)done,
                                         .n_done = n_done};
            size_t requeued = 0;
            if (rk_createq_claim(app->store, &c, &items, &got, &requeued, err, sizeof err) !=
                RK_STORE_OK) {
                if (rk_now_ms() - last_warn > 10000) { /* at most one line per 10 s */
                    rk_warn("create queue: cannot claim creates: %s", err);
                    last_warn = rk_now_ms();
                }
                got = 0;
                /* The finished creates go with the next claim. */
                pthread_mutex_lock(&q.mu);
                for (size_t i = 0; i < n_done; i++) {
                    if (done_add_locked(done[i]) == 0)
                        continue;
                    pthread_mutex_unlock(&q.mu);
                    char *one = strdup(done[i]);
                    if (one)
                        done_drop(&one, 1);
                    pthread_mutex_lock(&q.mu);
                }
                pthread_mutex_unlock(&q.mu);
            }
            for (size_t i = 0; i < n_done; i++)
                free(done[i]);
            if (requeued) {
                atomic_fetch_add(&takeover_total, requeued);
                rk_info("create queue: %zu create(s) whose admin stopped renewing were queued "
                        "again",
                        requeued);
            }
        }
        if (busy && rk_now_ms() >= next_renew) {
            if (rk_createq_renew(app->store, q.owner, rk_epoch_ms() + LEASE_MS, NULL, err,
                                 sizeof err) != RK_STORE_OK)
                rk_warn("create queue: cannot renew the claims of this admin: %s", err);
            next_renew = rk_now_ms() + RENEW_MS;
        }

        pthread_mutex_lock(&q.mu);
        for (size_t i = 0; i < got; i++) {
            if (q.stop || add_job_locked(&items[i]) != 0) {
                pthread_mutex_unlock(&q.mu);
                release(items[i].id);
                pthread_mutex_lock(&q.mu);
            }
        }
        rk_createq_free_items(items, got);
        if (q.stop)
            break;
        if ((got > 0 && got == want) || q.n_done > 0)
            continue; /* there may be more: claim again at once */
        if (!q.kicked) {
            struct timespec ts = rk_time_after_ms(CLOCK_MONOTONIC, POLL_MS);
            pthread_cond_timedwait(&q.feed_cv, &q.mu, &ts);
        }
    }
    /* Stopping: the finished creates handed over since the last claim are dropped here (the
     * workers drop theirs themselves from now on). */
    while (q.n_done > 0) {
        size_t n = done_take_locked(done, CLAIM_MAX);
        pthread_mutex_unlock(&q.mu);
        done_drop(done, n);
        pthread_mutex_lock(&q.mu);
    }
    free(q.done);
    q.done = NULL;
    q.cap_done = 0;
    pthread_mutex_unlock(&q.mu);
    return NULL;
}

/* Thread: run claimed creates one at a time; end when idle or stopping. */
static void *worker_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&q.mu);
    for (;;) {
        int timed_out = 0;
        while (!q.head && !q.stop && !timed_out) {
            struct timespec ts = rk_time_after_ms(CLOCK_MONOTONIC, IDLE_EXIT_MS);
            q.n_idle++;
            timed_out = pthread_cond_timedwait(&q.work_cv, &q.mu, &ts) == ETIMEDOUT;
            q.n_idle--;
        }
        if (!q.head || q.stop)
            break; /* idle too long, or stopping (unstarted jobs are given back) */
        struct job *j = q.head;
        q.head = j->next;
        if (!q.head)
            q.tail = NULL;
        q.n_jobs--;
        q.running++;
        struct rk_app *app = q.app;
        rk_create_run_fn run = q.run;
        pthread_mutex_unlock(&q.mu);

        rk_histogram_observe(&wait_hist, (double)(rk_epoch_ms() - j->enqueued_ms) / 1000.0);
        atomic_fetch_add(&started_total, 1);
        run(app, j->id, j->rec, j->retaken);

        pthread_mutex_lock(&q.mu);
        if (done_add_locked(j->id) != 0) { /* the feeder has stopped: drop the claim here */
            pthread_mutex_unlock(&q.mu);
            char *id = strdup(j->id);
            if (id)
                done_drop(&id, 1);
            else
                rk_warn("create queue: sandbox %s: out of memory dropping its finished create",
                        j->id);
            pthread_mutex_lock(&q.mu);
        }
        job_free(j);
        q.running--;
        q.kicked = 1;
        pthread_cond_signal(&q.feed_cv);
    }
    q.n_workers--;
    pthread_cond_broadcast(&q.exit_cv);
    pthread_mutex_unlock(&q.mu);
    rk_app_bg_leave();
    return NULL;
}

/* /metrics: the queue's families. */
static void collect(void *arg, struct rk_buf *out)
{
    struct rk_app *app = arg;
    char err[RK_STORE_ERRLEN];
    size_t queued = 0, claimed = 0;
    int ok = rk_createq_depth(app->store, &queued, &claimed, err, sizeof err) == RK_STORE_OK;
    rk_metrics_family(out, "rock_admin_create_queue_depth", "gauge",
                      "Sandbox creates waiting in the create queue (every admin on the store).");
    if (ok)
        rk_buf_printf(out, "rock_admin_create_queue_depth %zu\n", queued);
    rk_metrics_family(out, "rock_admin_create_queue_claimed", "gauge",
                      "Sandbox creates claimed by an admin and not finished (every admin on the "
                      "store; at most runtime.create_concurrency).");
    if (ok)
        rk_buf_printf(out, "rock_admin_create_queue_claimed %zu\n", claimed);
    pthread_mutex_lock(&q.mu);
    int running = q.running, workers = q.n_workers;
    pthread_mutex_unlock(&q.mu);
    rk_metrics_family(out, "rock_admin_creates_in_flight", "gauge",
                      "Backend create calls this admin is running now.");
    rk_buf_printf(out, "rock_admin_creates_in_flight %d\n", running);
    rk_metrics_family(out, "rock_admin_create_workers", "gauge",
                      "Create worker threads of this admin (started on demand).");
    rk_buf_printf(out, "rock_admin_create_workers %d\n", workers);
    rk_metrics_family(out, "rock_admin_creates_started_total", "counter",
                      "Backend creates this admin started from the queue.");
    rk_buf_printf(out, "rock_admin_creates_started_total %llu\n",
                  (unsigned long long)atomic_load(&started_total));
    rk_metrics_family(out, "rock_admin_create_queue_refused_total", "counter",
                      "start_async requests refused because the create queue was full "
                      "(runtime.create_queue_max).");
    rk_buf_printf(out, "rock_admin_create_queue_refused_total %llu\n",
                  (unsigned long long)atomic_load(&refused_total));
    rk_metrics_family(out, "rock_admin_create_queue_takeovers_total", "counter",
                      "Claimed creates this admin queued again because their admin stopped "
                      "renewing the claim.");
    rk_buf_printf(out, "rock_admin_create_queue_takeovers_total %llu\n",
                  (unsigned long long)atomic_load(&takeover_total));
    rk_histogram_render(&wait_hist, out, "rock_admin_create_wait_seconds",
                        "Time from start_async queuing a create to this admin starting it.");
}

int rk_create_queue_start(struct rk_app *app, rk_create_run_fn run)
{
    char host[64] = "host";
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = '\0';
    unsigned long long salt =
        (unsigned long long)rk_now_ms() ^ ((unsigned long long)getpid() << 20);
    pthread_mutex_lock(&q.mu);
    q.app = app;
    q.run = run;
    snprintf(q.owner, sizeof q.owner, "%s:%ld:%llx", host, (long)getpid(), salt);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&q.feed_cv, &ca);
    pthread_cond_init(&q.work_cv, &ca);
    pthread_cond_init(&q.exit_cv, &ca);
    pthread_condattr_destroy(&ca);
    q.stop = 0;
    int rc = pthread_create(&q.feeder, NULL, feeder_main, app);
    q.started = rc == 0;
    pthread_mutex_unlock(&q.mu);
    if (rc != 0)
        return -1;
    rk_metrics_collector_add("create_queue", collect, app);
    rk_info("create queue: up to %d backend creates at once%s (owner %s)",
            app->cfg->runtime.create_concurrency,
            app->cfg->runtime.create_rate > 0 ? ", rate-limited" : "", q.owner);
    return 0;
}

void rk_create_queue_stop(struct rk_app *app, int64_t deadline_ms)
{
    (void)app;
    pthread_mutex_lock(&q.mu);
    if (!q.started) {
        pthread_mutex_unlock(&q.mu);
        return;
    }
    q.stop = 1;
    pthread_cond_broadcast(&q.feed_cv);
    pthread_cond_broadcast(&q.work_cv);
    pthread_mutex_unlock(&q.mu);
    pthread_join(q.feeder, NULL);
    /* Claims no worker started go back to the queue for another admin. */
    pthread_mutex_lock(&q.mu);
    struct job *jobs = q.head;
    q.head = q.tail = NULL;
    q.n_jobs = 0;
    pthread_mutex_unlock(&q.mu);
    while (jobs) {
        struct job *next = jobs->next;
        release(jobs->id);
        job_free(jobs);
        jobs = next;
    }
    pthread_mutex_lock(&q.mu);
    while (q.n_workers > 0 && rk_now_ms() < deadline_ms) {
        struct timespec ts = rk_time_after_ms(CLOCK_MONOTONIC, 50);
        pthread_cond_timedwait(&q.exit_cv, &q.mu, &ts);
    }
    if (q.n_workers > 0)
        rk_warn("create queue: %d backend create(s) still running at shutdown", q.running);
    q.started = 0;
    pthread_mutex_unlock(&q.mu);
}

/* A submit's outcome: a full queue is counted and named on call; a queued create wakes the
 * feeder. */
static void submitted(struct rk_call *call, rk_store_rc rc, long long max)
{
    if (rc == RK_STORE_FULL) {
        atomic_fetch_add(&refused_total, 1);
        rk_call_set_error(call, RK_E_UNAVAILABLE,
                          "the create queue is full (runtime.create_queue_max: %lld creates "
                          "queued or running)",
                          max);
        return;
    }
    if (rc != RK_STORE_OK)
        return;
    pthread_mutex_lock(&q.mu);
    q.kicked = 1;
    if (q.started)
        pthread_cond_signal(&q.feed_cv);
    pthread_mutex_unlock(&q.mu);
}

/* This admin's name as the owner of what it queues. */
static const char *queue_owner(void)
{
    return q.owner[0] ? q.owner : "unstarted";
}

rk_status rk_create_queue_submit(struct rk_app *app, struct rk_call *call, const char *id)
{
    char err[RK_STORE_ERRLEN];
    long long max = (long long)app->cfg->runtime.create_queue_max;
    rk_store_rc rc =
        rk_createq_push(app->store, id, queue_owner(), rk_epoch_ms(), max, err, sizeof err);
    submitted(call, rc, max);
    if (rc == RK_STORE_FULL)
        return RK_E_UNAVAILABLE;
    if (rc != RK_STORE_OK)
        return rk_call_set_error(call, RK_E_UNAVAILABLE, "sandbox store unavailable: %s", err);
    return RK_OK;
}

rk_store_rc rk_create_queue_submit_new(struct rk_app *app, struct rk_call *call, const char *id,
                                       json_object *rec, int64_t expire_time, char *err,
                                       size_t errlen)
{
    long long max = (long long)app->cfg->runtime.create_queue_max;
    rk_store_rc rc = rk_createq_create(app->store, id, rec, expire_time, queue_owner(),
                                       rk_epoch_ms(), max, err, errlen);
    submitted(call, rc, max);
    return rc;
}

int rk_create_queue_cancel(struct rk_app *app, const char *id)
{
    char err[RK_STORE_ERRLEN];
    rk_store_rc rc = rk_createq_cancel(app->store, id, err, sizeof err);
    if (rc == RK_STORE_OK)
        return 1;
    if (rc == RK_STORE_ERROR) {
        rk_warn("sandbox %s: cannot take its create out of the queue: %s", id, err);
        return -1;
    }
    return 0;
}

int rk_create_queue_pending(struct rk_app *app, const char *id)
{
    char err[RK_STORE_ERRLEN];
    int where = 0;
    if (rk_createq_where(app->store, id, &where, err, sizeof err) != RK_STORE_OK)
        return 0;
    return where != 0;
}
