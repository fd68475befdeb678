/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Idle expiry. Every runtime.sweep_interval seconds each admin process looks
 * for active sandboxes whose idle deadline passed and deletes them (the
 * backend cannot stop them). Before touching one, a process takes a short
 * claim in the store, so concurrent sweepers never race on the same sandbox,
 * and it re-reads the deadline (another process may have renewed it). The
 * claim outlives the delete, and a deleted sandbox leaves the idle index, so
 * across N processes each expired sandbox is deleted once; the work is
 * O(expired) (a range query on the idle index), never a scan of all records.
 * Each pass also clears the session mappings that status reads found
 * orphaned (rk_lifecycle_run_deferred): reads leave that work to the
 * background.
 *
 * The same thread takes over the archive and restore jobs of a dead admin
 * (rk_archive_take_over_jobs) every JOB_SCAN_MS, for every plugin with
 * snapshots and whether or not the reconciler runs: a job's lease is
 * JOB_LEASE_S (10 s, domain/archive.c), so a dead job is resumed within about
 * 15 s. So the thread runs even with runtime.sweep_interval 0 (idle sweep off).
 */
#include "domain/sweeper.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "base/app.h"
#include "config/config.h"
#include "host/host.h"
#include "domain/archive.h"
#include "domain/lifecycle.h"
#include "obs/log.h"
#include "host/plugin_loader.h"
#include "domain/record.h"
#include "store/store.h"
#include "base/util.h"

#define SWEEP_BATCH 100
#define SWEEP_MAX_BATCHES 50
/** How often the thread looks for jobs to take over (half their lease). */
#define JOB_SCAN_MS 5000

static pthread_mutex_t sw_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t sw_cv;
static int sw_stop;

/* One batch: up to SWEEP_BATCH expired ids; *n_seen receives how many the
 * store returned. Returns the number deleted by this process. */
static int sweep_batch(struct rk_app *app, size_t *n_seen)
{
    char err[RK_STORE_ERRLEN];
    char **ids = NULL;
    size_t n = 0;
    *n_seen = 0;
    if (rk_store_expired(app->store, rk_epoch_s(), SWEEP_BATCH, &ids, &n, err, sizeof err) !=
        RK_STORE_OK) {
        rk_warn("idle sweep: %s", err);
        return 0;
    }
    *n_seen = n;
    int deleted = 0;
    for (size_t i = 0; i < n && !app->stopping; i++) {
        char claim[256];
        snprintf(claim, sizeof claim, "sweep:%s", ids[i]);
        if (rk_store_claim(app->store, claim, 60, err, sizeof err) != RK_STORE_OK)
            continue; /* another process is on it */
        json_object *rec = NULL;
        if (rk_store_get(app->store, ids[i], &rec, err, sizeof err) != RK_STORE_OK) {
            json_object_put(rec);
            continue;
        }
        json_object *exp;
        int64_t deadline = 0;
        if (json_object_object_get_ex(rec, "expire_time", &exp) && exp)
            deadline = json_object_get_int64(exp);
        if (!rk_state_is_active(rk_rec_state(rec)) || deadline > rk_epoch_s()) {
            json_object_put(rec); /* renewed meanwhile */
            continue;
        }
        const char *backend = rk_rec_backend(rec);
        if (!backend || strcmp(backend, app->plugin->desc->backend_tag) != 0) {
            json_object_put(rec); /* fail closed: never touch another backend's sandbox */
            continue;
        }
        struct rk_call *call = rk_call_new("idle-sweep", -1, 0);
        if (rk_lifecycle_delete(app, call, rec, "idle_timeout") == RK_OK) {
            rk_info("sandbox %s: idle deadline passed; deleted", ids[i]);
            deleted++;
        } else {
            rk_warn("sandbox %s: idle delete failed: %s", ids[i], rk_call_error_text(call));
        }
        rk_call_free(call);
        json_object_put(rec);
    }
    rk_store_free_ids(ids, n);
    return deleted;
}

/* Sweep batches while full batches keep yielding deletions (a deleted sandbox
 * leaves the idle index, so the next batch holds new ids); stop at a batch
 * where nothing was ours to delete (others hold the claims) or after
 * SWEEP_MAX_BATCHES, so one pass is bounded and costs O(expired). */
int rk_sweeper_run_once(struct rk_app *app)
{
    int total = 0;
    for (int b = 0; b < SWEEP_MAX_BATCHES && !app->stopping; b++) {
        size_t seen = 0;
        int deleted = sweep_batch(app, &seen);
        total += deleted;
        if (seen < SWEEP_BATCH || deleted == 0)
            break;
    }
    return total;
}

/* Wakes every JOB_SCAN_MS (or the sweep interval when shorter): job take-over
 * and the deferred session clean-up on each wake, the idle sweep once the
 * sweep interval passed (never with runtime.sweep_interval 0). */
static void *sweeper_main(void *arg)
{
    struct rk_app *app = arg;
    int64_t sweep_ms = (int64_t)app->cfg->runtime.sweep_interval_s * 1000;
    int64_t wake_ms = sweep_ms > 0 && sweep_ms < JOB_SCAN_MS ? sweep_ms : JOB_SCAN_MS;
    int64_t next_sweep = rk_now_ms() + sweep_ms;
    pthread_mutex_lock(&sw_mu);
    while (!sw_stop) {
        struct timespec ts = rk_time_after_ms(CLOCK_MONOTONIC, wake_ms);
        pthread_cond_timedwait(&sw_cv, &sw_mu, &ts);
        if (sw_stop)
            break;
        pthread_mutex_unlock(&sw_mu);
        rk_archive_take_over_jobs(app);
        if (sweep_ms > 0 && rk_now_ms() >= next_sweep) {
            rk_sweeper_run_once(app);
            next_sweep = rk_now_ms() + sweep_ms;
        }
        rk_lifecycle_run_deferred(app);
        pthread_mutex_lock(&sw_mu);
    }
    pthread_mutex_unlock(&sw_mu);
    return NULL;
}

int rk_sweeper_start(struct rk_app *app)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&sw_cv, &ca);
    pthread_condattr_destroy(&ca);
    sw_stop = 0;
    if (pthread_create(&app->sweeper, NULL, sweeper_main, app) != 0)
        return -1;
    app->sweeper_running = 1;
    return 0;
}

void rk_sweeper_stop(struct rk_app *app)
{
    if (!app->sweeper_running)
        return;
    pthread_mutex_lock(&sw_mu);
    sw_stop = 1;
    pthread_cond_broadcast(&sw_cv);
    pthread_mutex_unlock(&sw_mu);
    pthread_join(app->sweeper, NULL);
    pthread_cond_destroy(&sw_cv);
    app->sweeper_running = 0;
}
