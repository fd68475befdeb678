/* SPDX-License-Identifier: Apache-2.0 */
/* The background pass: a thread that deletes sandboxes whose idle deadline
 * passed, takes over the archive/restore jobs of a dead admin, and clears the
 * session mappings status reads left to the background. Safe with several
 * processes: each sandbox and each job is claimed in the store first. */
#ifndef RK_SWEEPER_H
#define RK_SWEEPER_H

struct rk_app;

/** Start the background thread: idle sweep every runtime.sweep_interval (none
 *  when 0), take-over of dead archive/restore jobs and the deferred session
 *  clean-up every few seconds (always). */
int rk_sweeper_start(struct rk_app *app);
/** Stop and join it. */
void rk_sweeper_stop(struct rk_app *app);
/** One sweep pass (for tests); returns how many sandboxes were deleted. */
int rk_sweeper_run_once(struct rk_app *app);

#endif /* RK_SWEEPER_H */
