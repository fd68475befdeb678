/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Prometheus metrics. Names follow the Prometheus conventions (base units:
 * _seconds, _bytes; counters end in _total) and `promtool check metrics`
 * passes on the exposition. Label sets are bounded: route names and classes
 * come from the route table, operations and outcomes from fixed sets; nothing
 * is labelled per sandbox. docs/operations.md lists every metric.
 */
#ifndef RK_METRICS_H
#define RK_METRICS_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "rock-admin/operator.h"

struct rk_app;
struct rk_buf;

/** Count one finished request: requests_total{route,outcome} and the latency
 *  histogram of the route's class (rk_metrics_route_class). */
void rk_metrics_request(const char *route, const char *outcome, unsigned http_status,
                        int64_t duration_ms);
/** In-flight requests gauge. */
void rk_metrics_inflight_add(int delta);
/** Mark the start of a plugin (upstream) call on this thread: the next
 *  rk_metrics_upstream() on the same thread observes the call's latency and
 *  the in-flight gauge counts the call until then. */
void rk_metrics_upstream_begin(void);
/** Count one plugin (upstream) call by operation and result; observes its
 *  latency when rk_metrics_upstream_begin() marked its start. */
void rk_metrics_upstream(const char *op, rk_status st);
/** Start of a plugin call that ends on another thread (an asynchronous entry
 *  point, ABI 1.2): counted in flight until rk_metrics_upstream_end(); the
 *  returned mark is handed to it. */
int64_t rk_metrics_upstream_start(void);
/** End of a call started with rk_metrics_upstream_start (any thread): like
 *  rk_metrics_upstream, latency measured from mark. */
void rk_metrics_upstream_end(const char *op, rk_status st, int64_t mark);
/** Observe one store (Redis or in-process) round trip of operation op. */
void rk_metrics_store(const char *op, double seconds);
/** The class of a route name for the latency histogram: "ops", "status",
 *  "lifecycle", "command", "file", "proxy" or "other". */
const char *rk_metrics_route_class(const char *route);
/** A collector appends the families a layer above owns to a scrape
 *  (Prometheus text; rk_metrics_family for the HELP/TYPE lines). */
typedef void (*rk_metrics_collector_fn)(void *arg, struct rk_buf *out);
/** Register a collector at start-up; collectors render after the core's
 *  own families, in registration order. 0, or -1 when the table is full. */
int rk_metrics_collector_add(const char *name, rk_metrics_collector_fn fn, void *arg);
/** Forget every collector (tests). */
void rk_metrics_collectors_reset(void);
/** The loaded operator's name and version for rock_admin_build_info. */
void rk_metrics_set_operator(const char *name, const char *version);
/** Append the "# HELP" and "# TYPE" lines of one family. */
void rk_metrics_family(struct rk_buf *out, const char *name, const char *type, const char *help);
/** An unlabelled histogram of seconds with fixed bucket bounds, owned by the layer that
 *  observes it and rendered by its collector (e.g. a queue's wait). Define one with
 *  RK_HISTOGRAM_INIT over a static array of bounds and one of n + 1 counts. */
struct rk_histogram {
    pthread_mutex_t mu;
    const double *bounds;       /**< ascending upper bounds (le) */
    size_t n;                   /**< number of bounds */
    unsigned long long *counts; /**< n + 1 (the last: above every bound) */
    double sum;
};
#define RK_HISTOGRAM_INIT(bounds, counts)                                                          \
    {                                                                                              \
        PTHREAD_MUTEX_INITIALIZER, (bounds), sizeof(bounds) / sizeof((bounds)[0]), (counts), 0     \
    }
/** Observe one value (seconds; a negative one counts as 0). */
void rk_histogram_observe(struct rk_histogram *h, double seconds);
/** Append the family (HELP/TYPE, cumulative buckets, +Inf, _sum, _count). */
void rk_histogram_render(struct rk_histogram *h, struct rk_buf *out, const char *name,
                         const char *help);

/** Render the exposition text: the core's families, then every collector's. */
void rk_metrics_render(struct rk_app *app, struct rk_buf *out);

#endif /* RK_METRICS_H */
