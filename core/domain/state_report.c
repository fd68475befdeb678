/* SPDX-License-Identifier: Apache-2.0 */
/*
 * State reports (see state_report.h). The receiver runs on the plugin's thread, so it only
 * copies the report into the queue and signals; an applying thread takes a chunk of reports,
 * reads their records in one store call, checks each is still what its report is about
 * (pending under the reported backend id: a record deleted, failed or re-created meanwhile is
 * left alone) and applies the report through rk_lifecycle_reconcile, the same path a list
 * pass takes. The state patch itself is conditional on the record still being pending, so a
 * pass (or another applier) applying the same news at the same time changes the record once.
 *
 * Why several appliers on a shared store: a Redis update is two round trips (WATCH + read,
 * MULTI .. EXEC), so one thread applied about 2,000 reports a second in a 16,000 create
 * burst on two cores, and the news of sandboxes that ran waited seconds in the queue; the
 * in-process store's update is a lock and a few microseconds, where more threads would only
 * contend for it. The extra appliers start only for a backlog (the first chunk taken while
 * more wait and no applier is free) and end when idle, so an admin at rest has one.
 */
#include "rkutil.h"
#include "domain/state_report.h"

#include <errno.h>
#include <pthread.h>
#include <time.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/app.h"
#include "base/ident.h"
#include "base/util.h"
#include "domain/lifecycle.h"
#include "domain/record.h"
#include "host/host.h"
#include "host/plugin_loader.h"
#include "obs/log.h"
#include "obs/metrics.h"
#include "store/store.h"

/** Deadline of the store work for one chunk of reports. */
#define REPORT_BATCH_MS 30000
/** Reports one applier takes at a time (their records read in one store call). */
#define REPORT_CHUNK 64
/** Applying threads at most: on a shared store (Redis), where an update waits for round trips;
 *  on the in-process store, where it does not. One always runs; the others start when reports
 *  wait and no applier is free, and end after APPLIER_IDLE_MS without reports. */
#define APPLIERS_SHARED 4
#define APPLIERS_LOCAL 1
#define APPLIER_IDLE_MS 30000

/* One queued report: the ROCK id and the backend id, both in the same block. */
struct report {
    struct report *next;
    char *upstream;
    char id[];
};

static pthread_mutex_t sr_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t sr_cv; /* CLOCK_MONOTONIC; from start to stop */
static struct report *sr_head, *sr_tail;
static size_t sr_count;    /* queued */
static size_t sr_applying; /* taken by the applying threads, not finished */
static int sr_taking;      /* 1 while reports are queued (start .. stop) */
static int sr_stop;
static pthread_t sr_thread;                                  /* the applier that always runs */
static int sr_max;                                           /* appliers at most */
static int sr_extra;                                         /* the others running now */
static int sr_idle;                                          /* appliers waiting for reports */
static pthread_cond_t sr_exit_cv = PTHREAD_COND_INITIALIZER; /* an extra one ended */
static struct rk_app *sr_app;
/* For /metrics. */
static _Atomic unsigned long long sr_applied, sr_ignored, sr_dropped, sr_failed;

/* rk_state_report_fn, on the plugin's thread: queue a pending -> running report. */
static void receive(const char *sandbox_id, const struct rk_status_info *info)
{
    if (info->state != RK_STATE_RUNNING || info->failed || !info->upstream_id) {
        sr_ignored++; /* only the news that a pending sandbox now runs is taken */
        return;
    }
    /* The ROCK id comes from the backend (the sandbox's metadata): it reaches a store key only
     * when it has the form of one (base/ident.h), as a client's id does. */
    size_t li = strnlen(sandbox_id, 256), lu = strnlen(info->upstream_id, 256);
    if (li == 256 || !rk_id_valid(sandbox_id, li) || lu == 0 || lu == 256) {
        sr_ignored++;
        return;
    }
    pthread_mutex_lock(&sr_mu);
    if (!sr_taking || sr_count + sr_applying >= RK_STATE_REPORTS_MAX) {
        pthread_mutex_unlock(&sr_mu);
        sr_dropped++;
        return;
    }
    struct report *r = malloc(sizeof *r + li + 1 + lu + 1);
    if (!r) {
        pthread_mutex_unlock(&sr_mu);
        sr_dropped++;
        return;
    }
    memcpy(r->id, sandbox_id, li);
    r->id[li] = '\0';
    r->upstream = r->id + li + 1;
    memcpy(r->upstream, info->upstream_id, lu);
    r->upstream[lu] = '\0';
    r->next = NULL;
    if (sr_tail)
        sr_tail->next = r;
    else
        sr_head = r;
    sr_tail = r;
    if (sr_count++ == 0)
        pthread_cond_signal(&sr_cv);
    pthread_mutex_unlock(&sr_mu);
}

/* What fits() compares the records of a chunk with. */
struct fit_ctx {
    struct report *const *r; /* the chunk's reports, in the order of the ids read */
    const char *tag;
};

/* rk_store_view_each_fn: keep (copy) record i only when its report is about it as it is now:
 * pending under the reported backend id. */
static int fits(void *ctx, size_t i, json_object *rec)
{
    const struct fit_ctx *f = ctx;
    struct rk_rec_glance g;
    int yes = rec && rk_lifecycle_glance(rec, f->tag, &g) == 0 && g.present &&
              g.state == RK_STATE_PENDING && g.upstream &&
              strcmp(g.upstream, f->r[i]->upstream) == 0;
    if (rec)
        rk_lifecycle_glance_free(&g);
    return yes;
}

/* A report whose record takes rk_lifecycle_reconcile's own path (a failed create, a restore):
 * its record read again, applied when it still fits. */
static void apply_one(struct rk_app *app, struct rk_call *call, struct report *r)
{
    const char *id = r->id;
    json_object *rec = NULL;
    char err[RK_STORE_ERRLEN];
    struct fit_ctx f = {.r = &r, .tag = app->plugin->desc->backend_tag};
    if (rk_store_view_many(app->store, &id, 1, fits, &f, &rec, err, sizeof err) != RK_STORE_OK ||
        !rec) {
        sr_ignored++;
        return;
    }
    struct rk_status_info info = {.state = RK_STATE_RUNNING, .upstream_id = r->upstream};
    if (rk_lifecycle_reconcile(app, call, &rec, &info) != RK_OK)
        rk_call_clear_error(call);
    sr_ignored++; /* a failed create or a restore does not become running from a report */
    json_object_put(rec);
}

/* Apply the n reports of a chunk: the records still pending under the reported backend ids
 * recorded running together (rk_lifecycle_running_many: one store update of them all). */
static void apply_chunk(struct rk_app *app, struct report *const *chunk, size_t n)
{
    const char *ids[REPORT_CHUNK], *ups[REPORT_CHUNK];
    enum rk_running_outcome out[REPORT_CHUNK];
    if (app->stopping)
        return;
    for (size_t i = 0; i < n; i++) {
        ids[i] = chunk[i]->id;
        ups[i] = chunk[i]->upstream;
    }
    rk_lifecycle_running_many(app, ids, ups, n, out);
    struct rk_call *call = NULL;
    for (size_t i = 0; i < n; i++) {
        switch (out[i]) {
        case RK_RUNNING_NOW:
            sr_applied++;
            rk_info("sandbox %s: pending -> running (reported by the plugin)", ids[i]);
            break;
        case RK_RUNNING_OTHER:
            if (!call)
                call = rk_call_new("state-report", -1, rk_now_ms() + REPORT_BATCH_MS);
            if (call)
                apply_one(app, call, chunk[i]);
            else
                sr_failed++;
            break;
        case RK_RUNNING_CHANGED:
            sr_ignored++; /* gone, or no longer pending under that backend id */
            break;
        default:
            sr_failed++; /* the store failed: the next list pass brings the news again */
            break;
        }
    }
    rk_call_free(call);
}

static void *extra_main(void *arg);

/* Another applier, when reports wait that no applier is free to take (sr_mu held). */
static void more_appliers_locked(struct rk_app *app)
{
    if (!sr_head || sr_idle > 0 || 1 + sr_extra >= sr_max || sr_stop)
        return;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED); /* stop waits for sr_extra */
    pthread_attr_setstacksize(&attr, 256 * 1024);
    pthread_t th;
    if (pthread_create(&th, &attr, extra_main, app) == 0) {
        sr_extra++; /* else the running ones take the reports */
        rk_debug("state reports: applier %d of %d started for %zu waiting", 1 + sr_extra, sr_max,
                 sr_count);
    }
    pthread_attr_destroy(&attr);
}

/* Apply the queued reports, a chunk at a time, until stopped; an extra applier also ends after
 * APPLIER_IDLE_MS without reports. Called and returns with sr_mu held. */
static void apply_queued_locked(struct rk_app *app, int extra)
{
    struct report *chunk[REPORT_CHUNK];
    for (;;) {
        int timed_out = 0;
        while (!sr_stop && !sr_head && !timed_out) {
            sr_idle++;
            if (extra) {
                struct timespec ts = rk_time_after_ms(CLOCK_MONOTONIC, APPLIER_IDLE_MS);
                timed_out = pthread_cond_timedwait(&sr_cv, &sr_mu, &ts) == ETIMEDOUT;
            } else {
                pthread_cond_wait(&sr_cv, &sr_mu);
            }
            sr_idle--;
        }
        if (sr_stop || !sr_head)
            return;
        size_t n = 0;
        while (sr_head && n < REPORT_CHUNK) {
            chunk[n++] = sr_head;
            sr_head = sr_head->next;
        }
        if (!sr_head)
            sr_tail = NULL;
        sr_count -= n;
        sr_applying += n; /* still counted against the bound until applied */
        if (sr_head && sr_idle > 0)
            pthread_cond_signal(&sr_cv); /* more for a free applier */
        more_appliers_locked(app);
        pthread_mutex_unlock(&sr_mu);
        apply_chunk(app, chunk, n);
        for (size_t i = 0; i < n; i++)
            free(chunk[i]);
        pthread_mutex_lock(&sr_mu);
        sr_applying -= n;
    }
}

/* Thread: the applier that always runs. */
static void *applier_main(void *arg)
{
    rku_thread_c_locale(); /* records are parsed and written here */
    pthread_mutex_lock(&sr_mu);
    apply_queued_locked(arg, 0);
    pthread_mutex_unlock(&sr_mu);
    return NULL;
}

/* Thread (detached; rk_state_reports_stop waits for it): an applier for a backlog. */
static void *extra_main(void *arg)
{
    rku_thread_c_locale();
    pthread_mutex_lock(&sr_mu);
    apply_queued_locked(arg, 1);
    sr_extra--;
    pthread_cond_broadcast(&sr_exit_cv);
    pthread_mutex_unlock(&sr_mu);
    return NULL;
}

/* /metrics: what became of the plugin's reports. */
static void metrics_collect(void *arg, struct rk_buf *out)
{
    (void)arg;
    rk_metrics_family(out, "rock_admin_state_reports_total", "counter",
                      "Sandbox state reports the plugin made outside calls (a background readiness "
                      "check that answered), by outcome: applied (pending -> running at once), "
                      "ignored (the record was no longer pending under that backend id, or the "
                      "report was not pending -> running), dropped (the queue was full), failed "
                      "(the store did not answer: the next list pass applies the news).");
    rk_buf_printf(out,
                  "rock_admin_state_reports_total{outcome=\"applied\"} %llu\n"
                  "rock_admin_state_reports_total{outcome=\"ignored\"} %llu\n"
                  "rock_admin_state_reports_total{outcome=\"dropped\"} %llu\n"
                  "rock_admin_state_reports_total{outcome=\"failed\"} %llu\n",
                  (unsigned long long)sr_applied, (unsigned long long)sr_ignored,
                  (unsigned long long)sr_dropped, (unsigned long long)sr_failed);
}

int rk_state_reports_start(struct rk_app *app)
{
    sr_app = app;
    sr_stop = 0;
    sr_max = rk_store_is_shared(app->store) ? APPLIERS_SHARED : APPLIERS_LOCAL;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* the extra appliers' idle waits */
    pthread_cond_init(&sr_cv, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&sr_thread, NULL, applier_main, app) != 0) {
        pthread_cond_destroy(&sr_cv);
        sr_app = NULL;
        return -1;
    }
    pthread_mutex_lock(&sr_mu);
    sr_taking = 1;
    pthread_mutex_unlock(&sr_mu);
    rk_host_on_state_report(receive);
    rk_metrics_collector_add("state_reports", metrics_collect, NULL);
    return 0;
}

void rk_state_reports_stop(void)
{
    if (!sr_app)
        return;
    rk_host_on_state_report(NULL);
    pthread_mutex_lock(&sr_mu);
    sr_taking = 0;
    sr_stop = 1;
    pthread_cond_broadcast(&sr_cv);
    pthread_mutex_unlock(&sr_mu);
    pthread_join(sr_thread, NULL);
    /* receive() may still be running on the plugin's thread: it sees sr_taking == 0. */
    pthread_mutex_lock(&sr_mu);
    while (sr_extra > 0)
        pthread_cond_wait(&sr_exit_cv, &sr_mu);
    while (sr_head) {
        struct report *r = sr_head;
        sr_head = r->next;
        free(r);
    }
    sr_tail = NULL;
    sr_count = sr_applying = 0;
    pthread_mutex_unlock(&sr_mu);
    pthread_cond_destroy(&sr_cv); /* no applier waits on it, receive() no longer signals it */
    sr_app = NULL;
}
