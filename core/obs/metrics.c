/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Prometheus text exposition (format 0.0.4). Every family is a small fixed
 * table guarded by its own mutex; label values are string constants (route
 * names, classes, operation names) compared by content, so the number of
 * series is bounded by the code, never by traffic. A table that is full
 * drops new series rather than growing.
 */
#include "obs/metrics.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/app.h"
#include "base/status.h"
#include "base/util.h"

#ifndef PACKAGE_VERSION
#define PACKAGE_VERSION "0.1.0"
#endif

#define MAX_SERIES 128
#define MAX_BUCKETS 20

/* Requests and plugin calls: commands may run for many minutes. */
static const double slow_buckets[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
                                      2.5,   5,    10,    30,   60,  300,  1200};
/* Store round trips: sub-millisecond in memory, a few ms to Redis. */
static const double fast_buckets[] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                      0.01,   0.025,   0.05,   0.1,   0.25,   1};
#define NSLOW (sizeof slow_buckets / sizeof slow_buckets[0])
#define NFAST (sizeof fast_buckets / sizeof fast_buckets[0])

/* One histogram family with one label. */
struct histo_series {
    const char *label;
    unsigned long long bucket[MAX_BUCKETS]; /* non-cumulative counts */
    unsigned long long count;
    double sum;
};
struct histo {
    pthread_mutex_t mu;
    const double *bounds;
    size_t nbounds;
    struct histo_series s[MAX_SERIES];
    size_t n;
};

/* Counter keyed by two labels. */
struct pair_series {
    const char *a, *b;
    unsigned long long count;
};
struct pair_counter {
    pthread_mutex_t mu;
    struct pair_series s[MAX_SERIES];
    size_t n;
};

/* Gauge keyed by one label. */
struct gauge_series {
    const char *label;
    long long value;
};

static struct histo request_hist = {PTHREAD_MUTEX_INITIALIZER, slow_buckets, NSLOW, {{0}}, 0};
static struct histo upstream_hist = {PTHREAD_MUTEX_INITIALIZER, slow_buckets, NSLOW, {{0}}, 0};
static struct histo store_hist = {PTHREAD_MUTEX_INITIALIZER, fast_buckets, NFAST, {{0}}, 0};
static struct pair_counter requests = {PTHREAD_MUTEX_INITIALIZER, {{0}}, 0};
static struct pair_counter upstream_calls = {PTHREAD_MUTEX_INITIALIZER, {{0}}, 0};

static pthread_mutex_t gauge_mu = PTHREAD_MUTEX_INITIALIZER;
static long long inflight;
static long long upstream_inflight;
static long long upstream_async; /* of which started asynchronously (ABI 1.2) */

/* Start of this thread's current plugin call (monotonic ns), 0 when none. */
static _Thread_local int64_t upstream_mark_ns;

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Wall-clock start of the process, for process_start_time_seconds. */
static double start_time_s;
static pthread_once_t start_once = PTHREAD_ONCE_INIT;
static void record_start(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    start_time_s = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void histo_observe(struct histo *h, const char *label, double seconds)
{
    if (seconds < 0)
        seconds = 0;
    pthread_mutex_lock(&h->mu);
    size_t i;
    for (i = 0; i < h->n; i++)
        if (strcmp(h->s[i].label, label) == 0)
            break;
    if (i == h->n && h->n < MAX_SERIES) {
        memset(&h->s[i], 0, sizeof h->s[i]);
        h->s[h->n++].label = label;
    }
    if (i < h->n) {
        size_t b = 0;
        while (b < h->nbounds && seconds > h->bounds[b])
            b++;
        if (b < h->nbounds)
            h->s[i].bucket[b]++;
        h->s[i].count++;
        h->s[i].sum += seconds;
    }
    pthread_mutex_unlock(&h->mu);
}

static void pair_inc(struct pair_counter *c, const char *a, const char *b)
{
    pthread_mutex_lock(&c->mu);
    size_t i;
    for (i = 0; i < c->n; i++)
        if (strcmp(c->s[i].a, a) == 0 && strcmp(c->s[i].b, b) == 0)
            break;
    if (i == c->n && c->n < MAX_SERIES)
        c->s[c->n++] = (struct pair_series){a, b, 0};
    if (i < c->n)
        c->s[i].count++;
    pthread_mutex_unlock(&c->mu);
}

const char *rk_metrics_route_class(const char *route)
{
    static const struct {
        const char *cls;
        const char *names[10];
    } classes[] = {
        {"ops", {"root", "livez", "readyz", "metrics", "openapi", "docs", "unrouted"}},
        {"status",
         {"get_status", "is_alive", "get_sandbox_statistics", "list", "batch", "get_token"}},
        {"lifecycle",
         {"start_async", "start", "stop", "delete", "restart", "archive", "commit",
          "commit_status"}},
        {"command", {"execute", "create_session", "run_in_session", "close_session"}},
        {"file", {"read_file", "write_file", "upload"}},
    };
    if (!route)
        return "other";
    for (size_t c = 0; c < sizeof classes / sizeof classes[0]; c++)
        for (size_t i = 0; i < 10 && classes[c].names[i]; i++)
            if (strcmp(classes[c].names[i], route) == 0)
                return classes[c].cls;
    if (strstr(route, "proxy") || strstr(route, "vnc") || strstr(route, "portforward"))
        return "proxy";
    return "other";
}

void rk_metrics_request(const char *route, const char *outcome, unsigned http_status,
                        int64_t duration_ms)
{
    (void)http_status;
    pthread_once(&start_once, record_start);
    pair_inc(&requests, route, outcome);
    histo_observe(&request_hist, rk_metrics_route_class(route), (double)duration_ms / 1000.0);
}

void rk_metrics_inflight_add(int delta)
{
    pthread_once(&start_once, record_start);
    pthread_mutex_lock(&gauge_mu);
    inflight += delta;
    pthread_mutex_unlock(&gauge_mu);
}

void rk_metrics_upstream_begin(void)
{
    pthread_mutex_lock(&gauge_mu);
    if (!upstream_mark_ns)
        upstream_inflight++;
    pthread_mutex_unlock(&gauge_mu);
    upstream_mark_ns = now_ns();
}

/* rk_status names as label values ("ok", "upstream_unavailable", ...),
 * computed once so that the counters can keep pointers to them. */
#define NSTATUS 32
static char status_labels[NSTATUS][40];
static pthread_once_t status_once = PTHREAD_ONCE_INIT;
static void fill_status_labels(void)
{
    for (int i = 0; i < NSTATUS; i++) {
        snprintf(status_labels[i], sizeof status_labels[i], "%s", rk_status_name((rk_status)-i));
        for (char *c = status_labels[i]; *c; c++)
            if (*c == ' ')
                *c = '_';
    }
}

static const char *status_label(rk_status st)
{
    pthread_once(&status_once, fill_status_labels);
    return st <= 0 && st > -NSTATUS ? status_labels[-st] : "other";
}

void rk_metrics_upstream(const char *op, rk_status st)
{
    pair_inc(&upstream_calls, op, status_label(st));
    int64_t mark = upstream_mark_ns;
    if (!mark)
        return;
    upstream_mark_ns = 0;
    pthread_mutex_lock(&gauge_mu);
    upstream_inflight--;
    pthread_mutex_unlock(&gauge_mu);
    histo_observe(&upstream_hist, op, (double)(now_ns() - mark) / 1e9);
}

int64_t rk_metrics_upstream_start(void)
{
    pthread_mutex_lock(&gauge_mu);
    upstream_inflight++;
    upstream_async++;
    pthread_mutex_unlock(&gauge_mu);
    return now_ns();
}

void rk_metrics_upstream_end(const char *op, rk_status st, int64_t mark)
{
    pair_inc(&upstream_calls, op, status_label(st));
    pthread_mutex_lock(&gauge_mu);
    upstream_inflight--;
    upstream_async--;
    pthread_mutex_unlock(&gauge_mu);
    histo_observe(&upstream_hist, op, (double)(now_ns() - mark) / 1e9);
}

void rk_metrics_store(const char *op, double seconds)
{
    histo_observe(&store_hist, op, seconds);
}

/* ---- collectors: families that other layers own ------------------------------ */

#define MAX_COLLECTORS 8
static struct {
    const char *name;
    rk_metrics_collector_fn fn;
    void *arg;
} collectors[MAX_COLLECTORS];
/* Collectors may be added while /metrics is served (the reconciler starts after the server):
 * an entry is written first and then published by the count (release; render acquires it);
 * adders take collectors_mu. */
static _Atomic int ncollectors;
static pthread_mutex_t collectors_mu = PTHREAD_MUTEX_INITIALIZER;
static char operator_name[64], operator_version[64];

int rk_metrics_collector_add(const char *name, rk_metrics_collector_fn fn, void *arg)
{
    pthread_mutex_lock(&collectors_mu);
    int n = atomic_load_explicit(&ncollectors, memory_order_relaxed);
    if (n >= MAX_COLLECTORS || !fn) {
        pthread_mutex_unlock(&collectors_mu);
        return -1;
    }
    collectors[n].name = name;
    collectors[n].fn = fn;
    collectors[n].arg = arg;
    atomic_store_explicit(&ncollectors, n + 1, memory_order_release);
    pthread_mutex_unlock(&collectors_mu);
    return 0;
}

void rk_metrics_collectors_reset(void)
{
    pthread_mutex_lock(&collectors_mu);
    atomic_store_explicit(&ncollectors, 0, memory_order_release);
    pthread_mutex_unlock(&collectors_mu);
}

void rk_metrics_set_operator(const char *name, const char *version)
{
    snprintf(operator_name, sizeof operator_name, "%s", name ? name : "");
    snprintf(operator_version, sizeof operator_version, "%s", version ? version : "");
}

void rk_metrics_family(struct rk_buf *out, const char *name, const char *type, const char *help)
{
    rk_buf_printf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void render_histo(struct rk_buf *out, struct histo *h, const char *name, const char *label,
                         const char *help)
{
    rk_metrics_family(out, name, "histogram", help);
    pthread_mutex_lock(&h->mu);
    for (size_t i = 0; i < h->n; i++) {
        const struct histo_series *s = &h->s[i];
        unsigned long long cum = 0;
        for (size_t b = 0; b < h->nbounds; b++) {
            cum += s->bucket[b];
            rk_buf_printf(out, "%s_bucket{%s=\"%s\",le=\"%g\"} %llu\n", name, label, s->label,
                          h->bounds[b], cum);
        }
        rk_buf_printf(out,
                      "%s_bucket{%s=\"%s\",le=\"+Inf\"} %llu\n%s_sum{%s=\"%s\"} %.6f\n"
                      "%s_count{%s=\"%s\"} %llu\n",
                      name, label, s->label, s->count, name, label, s->label, s->sum, name, label,
                      s->label, s->count);
    }
    pthread_mutex_unlock(&h->mu);
}

static void render_pairs(struct rk_buf *out, struct pair_counter *c, const char *name,
                         const char *la, const char *lb, const char *help)
{
    rk_metrics_family(out, name, "counter", help);
    pthread_mutex_lock(&c->mu);
    for (size_t i = 0; i < c->n; i++)
        rk_buf_printf(out, "%s{%s=\"%s\",%s=\"%s\"} %llu\n", name, la, c->s[i].a, lb, c->s[i].b,
                      c->s[i].count);
    pthread_mutex_unlock(&c->mu);
}

void rk_metrics_render(struct rk_app *app, struct rk_buf *out)
{
    pthread_once(&start_once, record_start);
    rk_metrics_family(out, "rock_admin_build_info", "gauge",
                      "Build and plugin information; the value is always 1.");
    rk_buf_printf(out,
                  "rock_admin_build_info{version=\"%s\",abi=\"%d.%d\",operator=\"%s\","
                  "operator_version=\"%s\"} 1\n",
                  PACKAGE_VERSION, RK_OPERATOR_ABI_MAJOR, RK_OPERATOR_ABI_MINOR, operator_name,
                  operator_version);
    rk_metrics_family(out, "rock_admin_process_start_time_seconds", "gauge",
                      "Start time of the process since the Unix epoch in seconds.");
    rk_buf_printf(out, "rock_admin_process_start_time_seconds %.3f\n", start_time_s);

    render_pairs(out, &requests, "rock_admin_requests_total", "route", "outcome",
                 "Finished HTTP requests by route and outcome.");
    render_histo(out, &request_hist, "rock_admin_request_duration_seconds", "class",
                 "HTTP request duration by route class.");
    pthread_mutex_lock(&gauge_mu);
    long long inflight_now = inflight, upstream_now = upstream_inflight;
    long long async_now = upstream_async;
    pthread_mutex_unlock(&gauge_mu);
    rk_metrics_family(out, "rock_admin_inflight_requests", "gauge", "HTTP requests being handled.");
    rk_buf_printf(out, "rock_admin_inflight_requests %lld\n", inflight_now);

    render_pairs(out, &upstream_calls, "rock_admin_upstream_calls_total", "op", "outcome",
                 "Operator plugin (upstream) calls by operation and outcome.");
    render_histo(out, &upstream_hist, "rock_admin_upstream_call_duration_seconds", "op",
                 "Operator plugin (upstream) call duration by operation.");
    rk_metrics_family(out, "rock_admin_upstream_inflight_calls", "gauge",
                      "Operator plugin (upstream) calls in progress.");
    rk_buf_printf(out, "rock_admin_upstream_inflight_calls %lld\n", upstream_now);
    rk_metrics_family(out, "rock_admin_upstream_async_calls", "gauge",
                      "Of those, commands a plugin runs with its asynchronous entry points "
                      "(ABI 1.2): no thread waits for them.");
    rk_buf_printf(out, "rock_admin_upstream_async_calls %lld\n", async_now);

    render_histo(out, &store_hist, "rock_admin_store_duration_seconds", "op",
                 "Store (Redis or in-process) round-trip duration by operation.");
    rk_metrics_family(out, "rock_admin_draining", "gauge",
                      "1 while the process drains for shutdown.");
    rk_buf_printf(out, "rock_admin_draining %d\n", app && app->draining ? 1 : 0);
    int n = atomic_load_explicit(&ncollectors, memory_order_acquire);
    for (int i = 0; i < n; i++)
        collectors[i].fn(collectors[i].arg, out);
}

void rk_histogram_observe(struct rk_histogram *h, double seconds)
{
    if (seconds < 0)
        seconds = 0;
    size_t b = 0;
    while (b < h->n && seconds > h->bounds[b])
        b++;
    pthread_mutex_lock(&h->mu);
    h->counts[b]++;
    h->sum += seconds;
    pthread_mutex_unlock(&h->mu);
}

void rk_histogram_render(struct rk_histogram *h, struct rk_buf *out, const char *name,
                         const char *help)
{
    rk_metrics_family(out, name, "histogram", help);
    pthread_mutex_lock(&h->mu);
    unsigned long long cum = 0;
    for (size_t b = 0; b < h->n; b++) {
        cum += h->counts[b];
        rk_buf_printf(out, "%s_bucket{le=\"%g\"} %llu\n", name, h->bounds[b], cum);
    }
    cum += h->counts[h->n];
    rk_buf_printf(out, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n", name, cum, name,
                  h->sum, name, cum);
    pthread_mutex_unlock(&h->mu);
}
