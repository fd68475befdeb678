/* SPDX-License-Identifier: Apache-2.0 */
/*
 * State reports (see state_report.h). The receiver runs on the plugin's thread, so it only
 * copies the report into the queue and signals; the applying thread reads each record,
 * checks it is still what the report is about (pending under the reported backend id: a
 * record deleted, failed or re-created meanwhile is left alone) and applies the report
 * through rk_lifecycle_reconcile, the same path a list pass takes. The state patch itself is
 * conditional on the record still being pending, so a pass applying the same news at the
 * same time changes the record once.
 */
#include "rkutil.h"
#include "domain/state_report.h"

#include <pthread.h>
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

/** Deadline of the store work for one batch of reports. */
#define REPORT_BATCH_MS 30000

/* One queued report: the ROCK id and the backend id, both in the same block. */
struct report {
    struct report *next;
    char *upstream;
    char id[];
};

static pthread_mutex_t sr_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t sr_cv = PTHREAD_COND_INITIALIZER;
static struct report *sr_head, *sr_tail;
static size_t sr_count;    /* queued */
static size_t sr_applying; /* taken by the applying thread, not finished */
static int sr_taking;      /* 1 while reports are queued (start .. stop) */
static int sr_stop;
static pthread_t sr_thread;
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

/* What fits() compares a record with. */
struct fit_ctx {
    const struct report *r;
    const char *tag;
};

/* rk_store_view_each_fn: keep (copy) the record only when the report is about it as it is now:
 * pending under the reported backend id. */
static int fits(void *ctx, size_t i, json_object *rec)
{
    (void)i;
    const struct fit_ctx *f = ctx;
    struct rk_rec_glance g;
    int yes = rec && rk_lifecycle_glance(rec, f->tag, &g) == 0 && g.present &&
              g.state == RK_STATE_PENDING && g.upstream && strcmp(g.upstream, f->r->upstream) == 0;
    if (rec)
        rk_lifecycle_glance_free(&g);
    return yes;
}

/* Apply one report to its record, if the record is still pending under the reported id. */
static void apply(struct rk_app *app, struct rk_call *call, const struct report *r)
{
    char err[RK_STORE_ERRLEN];
    json_object *rec = NULL;
    struct fit_ctx f = {.r = r, .tag = app->plugin->desc->backend_tag};
    const char *one = r->id;
    if (rk_store_view_many(app->store, &one, 1, fits, &f, &rec, err, sizeof err) != RK_STORE_OK) {
        sr_failed++; /* the next pass brings the news again */
        rk_debug("state report for sandbox %s: %s", r->id, err);
        return;
    }
    if (!rec) {
        sr_ignored++; /* gone, or no longer pending under that backend id */
        return;
    }
    struct rk_status_info info = {.state = RK_STATE_RUNNING, .upstream_id = r->upstream};
    if (rk_lifecycle_reconcile(app, call, &rec, &info) != RK_OK)
        rk_call_clear_error(call);
    if (rec && rk_rec_state(rec) == RK_STATE_RUNNING) {
        sr_applied++;
        rk_info("sandbox %s: pending -> running (reported by the plugin)", r->id);
    } else {
        sr_ignored++; /* the stored record changed since it was read: the patch expected pending */
    }
    json_object_put(rec);
}

/* Thread: apply the queued reports, a batch (everything queued) at a time. */
static void *applier_main(void *arg)
{
    rku_thread_c_locale(); /* records are parsed and written here */
    struct rk_app *app = arg;
    pthread_mutex_lock(&sr_mu);
    for (;;) {
        while (!sr_stop && !sr_head)
            pthread_cond_wait(&sr_cv, &sr_mu);
        if (sr_stop)
            break;
        struct report *batch = sr_head;
        sr_head = sr_tail = NULL;
        sr_applying = sr_count; /* still counted against the bound until applied */
        sr_count = 0;
        pthread_mutex_unlock(&sr_mu);
        struct rk_call *call = rk_call_new("state-report", -1, rk_now_ms() + REPORT_BATCH_MS);
        while (batch) {
            struct report *r = batch;
            batch = r->next;
            if (call && !app->stopping)
                apply(app, call, r);
            free(r);
        }
        if (call)
            rk_call_free(call);
        pthread_mutex_lock(&sr_mu);
        sr_applying = 0;
    }
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
    if (pthread_create(&sr_thread, NULL, applier_main, app) != 0)
        return -1;
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
    pthread_cond_signal(&sr_cv);
    pthread_mutex_unlock(&sr_mu);
    pthread_join(sr_thread, NULL);
    /* receive() may still be running on the plugin's thread: it sees sr_taking == 0. */
    pthread_mutex_lock(&sr_mu);
    while (sr_head) {
        struct report *r = sr_head;
        sr_head = r->next;
        free(r);
    }
    sr_tail = NULL;
    sr_count = sr_applying = 0;
    pthread_mutex_unlock(&sr_mu);
    sr_app = NULL;
}
