/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The reconciler: learns the backend's state the way a controller does. Every
 * runtime.reconcile_interval_ms one admin process (elected with a store lease;
 * with the in-process store it is always this process) lists every sandbox the
 * deployment owns through the plugin's ops.list (RK_CAP_LIST) and writes the
 * changes into the store: pending -> running, failures, terminated and
 * vanished sandboxes. get_status, is_alive, list and batch then read the store
 * only. Plugins without RK_CAP_LIST keep the per-request status call. The pass
 * is also where archive and restore jobs whose admin died are taken over.
 */
#ifndef RK_RECONCILER_H
#define RK_RECONCILER_H

struct rk_app;

/** 1 if status reads come from the store (the plugin can list and the
 *  reconciler is enabled), 0 if every status read asks the plugin. */
int rk_reconciler_active(const struct rk_app *app);

/** 1 if mark (from rk_store_get_touch) says a pass succeeded recently enough
 *  for store-only reads: within 3 intervals (at least 3 s). Otherwise reads
 *  fall back to asking the backend. */
int rk_reconciler_mark_fresh(const struct rk_app *app, const char *mark);

/** Start the reconciler thread when rk_reconciler_active(); 0 on success. */
int rk_reconciler_start(struct rk_app *app);

/** Stop and join the thread (no-op if it was not started). */
void rk_reconciler_stop(struct rk_app *app);

/** One pass (also used by tests): take/renew the lease, list, apply, take
 *  over dead archive/restore jobs.
 *  Returns the number of records changed, or -1 when the pass did not run
 *  (lease held elsewhere, store or backend unavailable). */
int rk_reconciler_run_once(struct rk_app *app);

#endif /* RK_RECONCILER_H */
