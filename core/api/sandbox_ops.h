/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The sandbox reads and moves that more than one API answers (ROCK's routes
 * and E2B's: get, delete, pause as stop, connect as restart): each records
 * its error on r->call instead of replying, so every route answers in its own
 * wire format from the same decision.
 */
#ifndef RK_SANDBOX_OPS_H
#define RK_SANDBOX_OPS_H

#include <json-c/json.h>

#include "rock-admin/operator.h"

struct rk_req;

/**
 * The status object of sandbox id (routes_status.c): the store's record when
 * the reconciler keeps it current, otherwise refreshed from the backend
 * through the gate. Without include_all only pending and running sandboxes
 * are found. On RK_OK *out is a new status object; otherwise the error
 * (RK_E_NOT_FOUND for an unknown id) is on r->call.
 */
rk_status rk_sandbox_status(struct rk_req *r, const char *id, int include_all, json_object **out);

/**
 * Delete sandbox id through the gate (routes_state.c): unknown and deleted
 * ids are a no-op (RK_OK), archiving and (for plugins without
 * RK_CAP_DELETE_PENDING) pending ones are refused, archived ones lose their
 * snapshot first. Errors are on r->call.
 */
rk_status rk_sandbox_delete(struct rk_req *r, const char *id);

/**
 * Stop sandbox id through the gate (routes_state.c; ROCK: pending or running
 * -> stopped, which the plugin's stop mode makes a pause or a refusal).
 * Already stopped is RK_OK (SDK close() may call it twice); archiving,
 * archived and deleted are refused. Errors are on r->call.
 */
rk_status rk_sandbox_stop(struct rk_req *r, const char *id);

/**
 * Restart sandbox id through the gate (routes_state.c): stopped -> pending
 * (resume), archived -> pending (restore from the snapshot,
 * RK_CAP_SNAPSHOT); the idle timer restarts and old sessions end. The
 * backend reports running later (rk_lifecycle_wait_running waits for it).
 * Errors are on r->call.
 */
rk_status rk_sandbox_restart(struct rk_req *r, const char *id);

#endif /* RK_SANDBOX_OPS_H */
