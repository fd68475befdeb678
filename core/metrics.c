/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Prometheus text exposition. Label sets are bounded by construction: route
 * names come from the route table, outcomes and operations from fixed sets;
 * nothing is labelled per sandbox. Counters live in small fixed tables.
 */
#include "metrics.h"

#include <pthread.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "app.h"
#include "auth.h"
#include "host.h"
#include "record.h"
#include "store.h"
#include "util.h"

#define MAX_SERIES 256
static const double buckets[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                 1,     2.5,  5,     10,   30,  60,   300};
#define NBUCKETS (sizeof buckets / sizeof buckets[0])

struct req_series {
    const char *route, *outcome;
    unsigned long long count;
};
struct dur_series {
    const char *route;
    unsigned long long bucket[NBUCKETS];
    unsigned long long count;
    double sum;
};
struct up_series {
    const char *op;
    rk_status st;
    unsigned long long count;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct req_series reqs[MAX_SERIES];
static size_t n_reqs;
static struct dur_series durs[MAX_SERIES];
static size_t n_durs;
static struct up_series ups[MAX_SERIES];
static size_t n_ups;
static long long inflight;

void rk_metrics_request(const char *route, const char *outcome, unsigned http_status,
                        int64_t duration_ms)
{
    (void)http_status;
    pthread_mutex_lock(&mu);
    size_t i;
    for (i = 0; i < n_reqs; i++)
        if (reqs[i].route == route && strcmp(reqs[i].outcome, outcome) == 0)
            break;
    if (i == n_reqs && n_reqs < MAX_SERIES)
        reqs[n_reqs++] = (struct req_series){route, outcome, 0};
    if (i < n_reqs)
        reqs[i].count++;
    for (i = 0; i < n_durs; i++)
        if (durs[i].route == route)
            break;
    if (i == n_durs && n_durs < MAX_SERIES)
        durs[n_durs++] = (struct dur_series){.route = route};
    if (i < n_durs) {
        double s = (double)duration_ms / 1000.0;
        for (size_t b = 0; b < NBUCKETS; b++)
            if (s <= buckets[b])
                durs[i].bucket[b]++;
        durs[i].count++;
        durs[i].sum += s;
    }
    pthread_mutex_unlock(&mu);
}

void rk_metrics_inflight_add(int delta)
{
    pthread_mutex_lock(&mu);
    inflight += delta;
    pthread_mutex_unlock(&mu);
}

void rk_metrics_upstream(const char *op, rk_status st)
{
    pthread_mutex_lock(&mu);
    size_t i;
    for (i = 0; i < n_ups; i++)
        if (strcmp(ups[i].op, op) == 0 && ups[i].st == st)
            break;
    if (i == n_ups && n_ups < MAX_SERIES)
        ups[n_ups++] = (struct up_series){op, st, 0};
    if (i < n_ups)
        ups[i].count++;
    pthread_mutex_unlock(&mu);
}

/* Count active sandboxes by state from the store's per-state index (O(1)). */
static void count_states(struct rk_app *app, unsigned long long *pending,
                         unsigned long long *running, int *ok)
{
    char err[RK_STORE_ERRLEN];
    size_t p = 0, n = 0;
    *ok = rk_store_count_states(app->store, &p, &n, err, sizeof err) == RK_STORE_OK;
    *pending = p;
    *running = n;
}

void rk_metrics_render(struct rk_app *app, struct rk_buf *out)
{
    unsigned long long pending = 0, running = 0;
    int states_ok = 0;
    count_states(app, &pending, &running, &states_ok);

    pthread_mutex_lock(&mu);
    rk_buf_printf(out, "# HELP rock_admin_requests_total Finished HTTP requests by route and "
                       "outcome.\n# TYPE rock_admin_requests_total counter\n");
    for (size_t i = 0; i < n_reqs; i++)
        rk_buf_printf(out, "rock_admin_requests_total{route=\"%s\",outcome=\"%s\"} %llu\n",
                      reqs[i].route, reqs[i].outcome, reqs[i].count);
    rk_buf_printf(out, "# HELP rock_admin_request_duration_seconds Request duration by route.\n"
                       "# TYPE rock_admin_request_duration_seconds histogram\n");
    for (size_t i = 0; i < n_durs; i++) {
        for (size_t b = 0; b < NBUCKETS; b++)
            rk_buf_printf(out,
                          "rock_admin_request_duration_seconds_bucket{route=\"%s\",le=\"%g\"} "
                          "%llu\n",
                          durs[i].route, buckets[b], durs[i].bucket[b]);
        rk_buf_printf(out,
                      "rock_admin_request_duration_seconds_bucket{route=\"%s\",le=\"+Inf\"} %llu\n"
                      "rock_admin_request_duration_seconds_sum{route=\"%s\"} %.6f\n"
                      "rock_admin_request_duration_seconds_count{route=\"%s\"} %llu\n",
                      durs[i].route, durs[i].count, durs[i].route, durs[i].sum, durs[i].route,
                      durs[i].count);
    }
    rk_buf_printf(out, "# HELP rock_admin_upstream_calls_total Operator plugin (upstream) calls "
                       "by operation and outcome.\n# TYPE rock_admin_upstream_calls_total "
                       "counter\n");
    for (size_t i = 0; i < n_ups; i++) {
        char outcome[40];
        snprintf(outcome, sizeof outcome, "%s", rk_status_name(ups[i].st));
        for (char *c = outcome; *c; c++)
            if (*c == ' ')
                *c = '_';
        rk_buf_printf(out, "rock_admin_upstream_calls_total{op=\"%s\",outcome=\"%s\"} %llu\n",
                      ups[i].op, outcome, ups[i].count);
    }
    rk_buf_printf(out,
                  "# HELP rock_admin_inflight_requests Requests being handled.\n"
                  "# TYPE rock_admin_inflight_requests gauge\nrock_admin_inflight_requests "
                  "%lld\n",
                  inflight);
    pthread_mutex_unlock(&mu);
    rk_buf_printf(out,
                  "# HELP rock_admin_store_errors_total Store (Redis) errors.\n"
                  "# TYPE rock_admin_store_errors_total counter\n"
                  "rock_admin_store_errors_total %llu\n",
                  (unsigned long long)rk_store_error_count(app->store));
    rk_buf_printf(out, "# HELP rock_admin_sandboxes Active sandboxes by state.\n"
                       "# TYPE rock_admin_sandboxes gauge\n");
    if (states_ok)
        rk_buf_printf(out,
                      "rock_admin_sandboxes{state=\"pending\"} %llu\n"
                      "rock_admin_sandboxes{state=\"running\"} %llu\n",
                      pending, running);
    rk_buf_printf(out,
                  "# HELP rock_admin_draining 1 while the process drains for shutdown.\n"
                  "# TYPE rock_admin_draining gauge\nrock_admin_draining %d\n",
                  app->draining ? 1 : 0);
    rk_auth_metrics_render(out);
}
