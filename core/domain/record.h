/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Sandbox records (stored JSON) and the status object clients see (§4.3).
 *
 * Stored members: sandbox_id, state, image, image_os, cpus, memory, disk,
 * num_gpus, accelerator_type, user_id, experiment_id, namespace, cluster_name,
 * env (object), metadata (object), extended_params {backend, <tag>_id},
 * host_name, create_time/start_time/stop_time/delete_time/archive_time (ISO),
 * auto_clear_time (minutes), expire_time (epoch, from the idle index),
 * state_history (<= 100 entries), failure {phase, message} when the backend
 * reported a failure, envd_token_sha256 (hex digest of the E2B envd access
 * token, only for sandboxes POST /sandboxes made with authentication on;
 * never shown). Not shown to clients either: create_deadline,
 * create_startup_timeout and create_request_id (the create's), create_failed,
 * backend_state.
 */
#ifndef RK_RECORD_H
#define RK_RECORD_H

#include <json-c/json.h>

#include "domain/record_src.h"
#include "rock-admin/operator.h"

/** "pending", "running", ... ; NULL for invalid values. */
const char *rk_state_name(enum rk_state st);
/** Parse a state name; 0 if unknown. */
enum rk_state rk_state_parse(const char *s);
/** 1 for pending and running. */
int rk_state_is_active(enum rk_state st);

/** String member or NULL. */
const char *rk_rec_str(json_object *rec, const char *key);
/** Set a string member (NULL sets JSON null). */
void rk_rec_set_str(json_object *rec, const char *key, const char *value);
/** Stored state of a record (0 if missing). */
enum rk_state rk_rec_state(json_object *rec);
/** rk_rec_state of a record read as a tree or as text. */
enum rk_state rk_src_state(struct rk_rec_src *rec);
/** extended_params.backend or NULL (also when it is empty). */
const char *rk_rec_backend(json_object *rec);
/** rk_rec_backend of a record read as a tree or as text. */
const char *rk_src_backend(struct rk_rec_src *rec);
/** extended_params.<tag>_id or NULL. */
const char *rk_rec_upstream_id(json_object *rec, const char *tag);
/** rk_rec_upstream_id of a record read as a tree or as text. */
const char *rk_src_upstream_id(struct rk_rec_src *rec, const char *tag);
/** Set extended_params.backend = tag and extended_params.<tag>_id = id (if id). */
void rk_rec_set_backend(json_object *rec, const char *tag, const char *upstream_id);

/** Move the record to state `to` via `event`, stamping times and appending a
 *  history entry when the state really changes (capped at 100). */
void rk_rec_transition(json_object *rec, enum rk_state to, const char *event);

/** What a new pending record is made of (strings borrowed). */
struct rk_rec_start {
    const char *sandbox_id, *image, *image_os;
    const char *memory;           /* normalised, e.g. "8.00g" */
    const char *memory_requested; /* as the client wrote it */
    const char *disk, *accelerator_type;
    const char *user_id, *experiment_id, *namespace_name, *cluster_name;
    const char *backend_tag; /* the loaded plugin's tag (fail-closed key) */
    double cpus, limit_cpus; /* limit_cpus 0 = unset */
    int has_gpus;
    double num_gpus;
    int64_t now_s;                 /* creation time (epoch seconds) */
    int64_t accepted_ms;           /* when start_async accepted it (epoch ms; 0: unknown) */
    int64_t auto_clear_minutes;    /* idle timeout */
    int64_t create_deadline_s;     /* until then a missing backend sandbox is "still creating" */
    int64_t startup_timeout_s;     /* the create's startup timeout (the queued create reads it) */
    const char *request_id;        /* the start request's id (the create logs under it) */
    json_object *env;              /* object of strings or NULL (copied): the sandbox environment */
    json_object *metadata;         /* object of strings or NULL (copied): the client's metadata */
    const char *envd_token_digest; /* hex SHA-256 of the E2B envd access token, or NULL */
};

/** The record's "env" (the sandbox environment a client gave at start) as a
 *  key/value array in call's arena, for the create spec; NULL with *n_out 0
 *  when there is none. */
const struct rk_kv *rk_rec_env(struct rk_call *call, json_object *rec, size_t *n_out);

/** The stored record of a sandbox that start/start_async just accepted
 *  (state pending, empty history, backend tag set). New reference. */
json_object *rk_rec_new_pending(const struct rk_rec_start *s);

/** Normalise a memory string to GiB with two decimals ("8g" -> "8.00g").
 *  Returns 0 and writes out, or -1 if invalid. bytes_out may be NULL. */
int rk_memory_normalize(const char *mem, char out[32], double *bytes_out);

#endif /* RK_RECORD_H */
