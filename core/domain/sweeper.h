/* SPDX-License-Identifier: Apache-2.0 */
/* Idle expiry: a background thread that deletes sandboxes whose idle deadline
 * passed, and clears the session mappings status reads left to the
 * background. Safe with several processes: each sandbox is claimed in the
 * store before it is swept. */
#ifndef RK_SWEEPER_H
#define RK_SWEEPER_H

struct rk_app;

/** Start the sweeper thread (no-op when runtime.sweep_interval is 0). */
int rk_sweeper_start(struct rk_app *app);
/** Stop and join it. */
void rk_sweeper_stop(struct rk_app *app);
/** One sweep pass (for tests); returns how many sandboxes were deleted. */
int rk_sweeper_run_once(struct rk_app *app);

#endif /* RK_SWEEPER_H */
