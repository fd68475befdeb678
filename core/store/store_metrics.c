/* SPDX-License-Identifier: Apache-2.0 */
/* The store's /metrics families (store_metrics.h). */
#include "store/store_metrics.h"

#include "base/util.h"
#include "obs/metrics.h"
#include "store/store.h"

void rk_store_metrics_collect(void *arg, struct rk_buf *out)
{
    struct rk_store *store = arg;
    char err[RK_STORE_ERRLEN];
    size_t pending = 0, running = 0;
    int ok = rk_store_count_states(store, &pending, &running, err, sizeof err) == RK_STORE_OK;
    rk_metrics_family(out, "rock_admin_store_errors_total", "counter",
                      "Failed store (Redis) operations.");
    rk_buf_printf(out, "rock_admin_store_errors_total %llu\n",
                  (unsigned long long)rk_store_error_count(store));
    rk_metrics_family(out, "rock_admin_sandboxes", "gauge", "Active sandboxes by state.");
    if (ok)
        rk_buf_printf(out,
                      "rock_admin_sandboxes{state=\"pending\"} %llu\n"
                      "rock_admin_sandboxes{state=\"running\"} %llu\n",
                      (unsigned long long)pending, (unsigned long long)running);
}
