/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Starting a sandbox once a route has read its request: the business checks
 * (memory and cpus against the runtime maximums), the pending record and the
 * queueing of the backend create (domain/create_queue.c). One
 * path for every way in (ROCK's /start and /start_async, E2B's POST
 * /sandboxes), so a sandbox is the same record whichever route made it.
 */
#ifndef RK_START_SUBMIT_H
#define RK_START_SUBMIT_H

#include <json-c/json.h>
#include <stdint.h>

#include "rock-admin/operator.h"

struct rk_req;

/** What a route asks to start (strings borrowed). */
struct rk_start_req {
    const char *sandbox_id; /* NULL or "": a new random id */
    const char *image, *image_os;
    const char *memory; /* as requested, e.g. "8g" */
    const char *disk;   /* NULL: none */
    const char *accelerator_type;
    double cpus, limit_cpus;
    int has_gpus;
    double num_gpus;
    int64_t auto_clear_minutes; /* idle lifetime (> 0) */
    int has_startup_timeout;
    double startup_timeout_s;
    const char *user_id, *experiment_id, *namespace_name, *cluster_name;
    json_object *env;              /* object of strings or NULL: the sandbox environment */
    json_object *metadata;         /* object of strings or NULL: stored as the record's metadata */
    const char *envd_token_digest; /* hex SHA-256 of the E2B envd access token, or NULL */
};

/**
 * Check s, restore an archived s->sandbox_id (RK_CAP_RESTORE) or create its
 * pending record, and submit the backend create. On RK_OK *id_out is the
 * sandbox id (arena); otherwise the error is recorded on r->call (RK_E_INVALID
 * for the business checks and an existing id, RK_E_UNAVAILABLE for the store,
 * RK_E_INTERNAL when the submission failed) and nothing is left behind.
 */
rk_status rk_start_submit(struct rk_req *r, const struct rk_start_req *s, const char **id_out);

#endif /* RK_START_SUBMIT_H */
