/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The fail-closed gate every sandbox route goes through, in this order:
 *   1. find the record              -> 4000 "Sandbox <id> not found"
 *   2. backend tag present          -> 4000 "<Display> sandbox metadata is missing
 *                                       required backend"
 *   3. tag equals the loaded plugin -> 4000 "Sandbox backend X conflicts with
 *                                       configured operator Y"
 *   4. capability present           -> 4000 with the plugin's refusal text
 *   5. state precondition           -> 4000 "Sandbox <id> is not running (state=<s>)"
 * and only then the plugin. The gate decides first (no store write during
 * the checks), then acts: activity operations refresh the idle deadline of a
 * record this operator owns even when the request is then refused for a
 * capability or state reason (the original's U35 behaviour).
 */
#ifndef RK_DISPATCH_H
#define RK_DISPATCH_H

#include <json-c/json.h>

#include "rock-admin/operator.h"

struct rk_app;
struct rk_call;

/** Operations that target one sandbox. */
enum rk_op {
    RK_OP_STATUS = 0,
    RK_OP_EXEC,
    RK_OP_FILE_READ,
    RK_OP_FILE_WRITE,
    RK_OP_UPLOAD,
    RK_OP_SESSION_CREATE,
    RK_OP_SESSION_RUN,
    RK_OP_SESSION_CLOSE,
    RK_OP_STOP,
    RK_OP_RESTART,
    RK_OP_ARCHIVE,
    RK_OP_COMMIT,
    RK_OP_STATISTICS,
    RK_OP_DELETE,
    RK_OP_PROXY_HTTP,
    RK_OP_PROXY_WS,
    RK_OP_PORT_FORWARD,
    RK_OP_RESTORE,
    RK_OP_COUNT
};

/** Static facts about an operation (for the gate and its table-driven test). */
struct rk_op_info {
    const char *name;  /* used in "<Display> backend does not support <name>" */
    uint64_t cap;      /* required capability bit, 0 = none */
    int needs_running; /* state precondition */
    int touches_idle;  /* refreshes the idle deadline */
};

/** Facts of op. */
const struct rk_op_info *rk_op_info(enum rk_op op);

/** A sandbox that passed the gate. */
struct rk_target {
    json_object *rec;          /* stored record (owned; released by rk_target_release) */
    struct rk_sandbox_ref ref; /* strings point into rec */
};

/** Before a long call: copy t->ref's strings into call's arena and release the
 *  record (t->rec becomes NULL), so an in-flight command does not keep the parsed
 *  record (several KiB) for its whole run. */
void rk_target_detach(struct rk_target *t, struct rk_call *call);

/** Run the gate for op on sandbox_id. On failure the error is recorded on
 *  call and returned; t is then empty. */
rk_status rk_dispatch(struct rk_app *app, struct rk_call *call, enum rk_op op,
                      const char *sandbox_id, struct rk_target *t);

/** The gate for a record the caller already read (avoids a second store
 *  read): checks 2-5 on rec, whose reference it takes over (kept in t on
 *  success, released on failure). */
rk_status rk_dispatch_record(struct rk_app *app, struct rk_call *call, enum rk_op op,
                             const char *sandbox_id, json_object *rec, struct rk_target *t);

/**
 * The gate's decision alone, checks 2-5 of the order above on a stored
 * record, then "running needs its backend id" ("<Display> sandbox metadata is
 * missing <tag>_id"): no store access, no touch, no plugin call. Returns RK_OK
 * or the refusal recorded on call (the first check that fails decides);
 * *owned is 1 once checks 2-3 passed (the record is this operator's, so the
 * caller may refresh its idle deadline), *upstream its backend id (NULL when
 * refused before the id is read). rec stays the caller's. rk_dispatch() and
 * rk_dispatch_record() act on this decision; exposed for its unit test.
 */
rk_status rk_gate_decide(const struct rk_app *app, struct rk_call *call, enum rk_op op,
                         const char *sandbox_id, json_object *rec, int *owned,
                         const char **upstream);

/** Release a target. */
void rk_target_release(struct rk_target *t);

/** Refresh the idle deadline of an active sandbox from its record (and renew the
 *  backend's expiry, rk_activity_renew). */
void rk_dispatch_touch(struct rk_app *app, json_object *rec);
/** Same as rk_dispatch_touch (name used by lifecycle code). */
#define rk_dispatch_touch_rec rk_dispatch_touch

#endif /* RK_DISPATCH_H */
