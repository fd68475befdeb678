/* SPDX-License-Identifier: Apache-2.0 */
/*
 * State reports: what a plugin learnt about a sandbox outside any call (ABI 1.3
 * host->state_report), applied to the sandbox's record as soon as it arrives rather than at
 * the reconciler's next list pass. The plugin's background readiness checks report this way
 * when a sandbox that a pass left pending (its service did not answer yet) answers: without
 * the report the sandbox turned alive one pass later (a pass over 16,000 sandboxes of a
 * create burst takes about a second).
 *
 * Only one report is taken: pending -> running, for the backend id the record carries. The
 * reports wait in a bounded queue (RK_STATE_REPORTS_MAX; one that does not fit is dropped: the
 * next pass brings the same news) and are applied a chunk at a time by one thread, or by up to
 * four on a shared store (Redis), whose updates wait for round trips (the others start for a
 * backlog and end when idle).
 */
#ifndef RK_STATE_REPORT_H
#define RK_STATE_REPORT_H

struct rk_app;

/** Reports queued or being applied at most (about 100 bytes each). */
#define RK_STATE_REPORTS_MAX 65536

/** Start taking the plugin's reports (the threads that apply them); 0 on success. */
int rk_state_reports_start(struct rk_app *app);
/** Stop taking reports, drop those not applied yet and join the threads. */
void rk_state_reports_stop(void);

#endif /* RK_STATE_REPORT_H */
