/* SPDX-License-Identifier: Apache-2.0 */
/* The store's own /metrics families (a collector for obs/metrics.h). */
#ifndef RK_STORE_METRICS_H
#define RK_STORE_METRICS_H

struct rk_buf;

/** Collector (rk_metrics_collector_fn) with arg = the struct rk_store:
 *  rock_admin_store_errors_total and rock_admin_sandboxes{state} (active
 *  sandboxes by state, read from the store's per-state index). */
void rk_store_metrics_collect(void *store, struct rk_buf *out);

#endif /* RK_STORE_METRICS_H */
