/* SPDX-License-Identifier: Apache-2.0 */
/* Prometheus metrics: bounded label sets only (route, outcome, op), never per-sandbox. */
#ifndef RK_METRICS_H
#define RK_METRICS_H

#include <stdint.h>

#include "rock-admin/operator.h"

struct rk_app;
struct rk_buf;

/** Count one finished request. */
void rk_metrics_request(const char *route, const char *outcome, unsigned http_status,
                        int64_t duration_ms);
/** In-flight gauge. */
void rk_metrics_inflight_add(int delta);
/** Count one plugin (upstream) call by operation and result. */
void rk_metrics_upstream(const char *op, rk_status st);
/** Render the exposition text (sandboxes by state read from the store). */
void rk_metrics_render(struct rk_app *app, struct rk_buf *out);

#endif /* RK_METRICS_H */
