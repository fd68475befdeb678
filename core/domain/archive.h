/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Archive and restore by backend snapshots (ABI 1.1, RK_CAP_SNAPSHOT), driven
 * by ROCK's state machine (rock-admin-api.md §4.2):
 *   archive:  stopped -> archiving -> archived (archive_done)
 *                                  -> stopped  (archive_failed)
 *   restore:  archived -> pending (restore) -> running (alive)
 *                                           -> archived (restore_failed)
 * The slow parts run on background threads. Progress lives in the record
 * (snapshot_id, job_lease), so when the admin that ran a job dies, the next
 * background pass (the reconciler's) or an /archive retry after the lease ran
 * out takes the job over. Status reads never do: they only read.
 */
#ifndef RK_ARCHIVE_H
#define RK_ARCHIVE_H

#include <json-c/json.h>

#include "rock-admin/operator.h"

struct rk_app;
struct rk_call;

/** Start the archive job of a record the caller just moved to archiving. */
rk_status rk_archive_start(struct rk_app *app, struct rk_call *call, const char *id);

/** Take over an archiving record's job if its lease ran out (another admin
 *  died mid-archive): called by rk_archive_take_over_jobs and /archive. Cheap
 *  when there is nothing to do. */
void rk_archive_recover(struct rk_app *app, json_object *rec);

/** The background take-over of jobs whose admin died, for every plugin with
 *  snapshots and whatever the reconciler's setting: reads the records the
 *  store lists as carrying a job (rk_store_list_jobs) and, once a job's lease
 *  ran out, resumes an archive (rk_archive_recover) or moves a restore back to
 *  archived (its snapshot is still there). Run by the background pass
 *  (domain/sweeper.c); status reads never do it. */
void rk_archive_take_over_jobs(struct rk_app *app);

/** Restore an archived sandbox: archived -> pending now, the backend create
 *  from its snapshot in the background. Error (record unchanged) on call. */
rk_status rk_restore_start(struct rk_app *app, struct rk_call *call, json_object *rec);

/** For status refresh: 1 if the record is a restore in progress (do not ask
 *  the backend yet; a restore whose admin died reads as in progress until the
 *  background take-over moved it back to archived), 0 if not. */
int rk_restore_in_progress(json_object *rec);

/** Delete the snapshot of an archived record (none = success). */
rk_status rk_archive_delete_snapshot(struct rk_app *app, struct rk_call *call, json_object *rec);

/** Best effort, once a sandbox is gone or archived anew: delete the snapshot
 *  it was restored from (`restored_from`) and, unless the record is archived
 *  or archiving, the snapshot of an unfinished restore (`snapshot_id`). */
void rk_archive_drop_restored(struct rk_app *app, struct rk_call *call, json_object *rec);

#endif /* RK_ARCHIVE_H */
