/* SPDX-License-Identifier: Apache-2.0 */
/* Stored sandbox records (record.h): states, fields and the status object
 * the API returns. */
#include "domain/record.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/util.h"
#include "host/host.h"

#define RK_HISTORY_MAX 100

static const char *const state_names[] = {NULL,        "pending",  "running", "stopped",
                                          "archiving", "archived", "deleted"};

const char *rk_state_name(enum rk_state st)
{
    if ((int)st < 1 || (int)st > 6)
        return NULL;
    return state_names[st];
}

enum rk_state rk_state_parse(const char *s)
{
    if (!s)
        return 0;
    for (int i = 1; i <= 6; i++)
        if (strcmp(s, state_names[i]) == 0)
            return (enum rk_state)i;
    return 0;
}

int rk_state_is_active(enum rk_state st)
{
    return st == RK_STATE_PENDING || st == RK_STATE_RUNNING;
}

const char *rk_rec_str(json_object *rec, const char *key)
{
    struct rk_rec_src src = rk_src_tree(rec);
    return rk_src_str(&src, key);
}

void rk_rec_set_str(json_object *rec, const char *key, const char *value)
{
    json_object_object_add(rec, key, value ? json_object_new_string(value) : NULL);
}

enum rk_state rk_src_state(struct rk_rec_src *rec)
{
    return rk_state_parse(rk_src_str(rec, "state"));
}

enum rk_state rk_rec_state(json_object *rec)
{
    struct rk_rec_src src = rk_src_tree(rec);
    return rk_src_state(&src);
}

const char *rk_src_backend(struct rk_rec_src *rec)
{
    const char *b = rk_src_sub_str(rec, "extended_params", "backend");
    return b && *b ? b : NULL;
}

const char *rk_rec_backend(json_object *rec)
{
    struct rk_rec_src src = rk_src_tree(rec);
    return rk_src_backend(&src);
}

const char *rk_src_upstream_id(struct rk_rec_src *rec, const char *tag)
{
    if (!tag)
        return NULL;
    char key[128];
    snprintf(key, sizeof key, "%s_id", tag);
    const char *id = rk_src_sub_str(rec, "extended_params", key);
    return id && *id ? id : NULL;
}

const char *rk_rec_upstream_id(json_object *rec, const char *tag)
{
    struct rk_rec_src src = rk_src_tree(rec);
    return rk_src_upstream_id(&src, tag);
}

void rk_rec_set_backend(json_object *rec, const char *tag, const char *upstream_id)
{
    json_object *ep;
    if (!json_object_object_get_ex(rec, "extended_params", &ep) || !ep ||
        !json_object_is_type(ep, json_type_object)) {
        ep = json_object_new_object();
        json_object_object_add(rec, "extended_params", ep);
    }
    json_object_object_add(ep, "backend", json_object_new_string(tag));
    if (upstream_id) {
        char key[128];
        snprintf(key, sizeof key, "%s_id", tag);
        json_object_object_add(ep, key, json_object_new_string(upstream_id));
    }
}

void rk_rec_transition(json_object *rec, enum rk_state to, const char *event)
{
    enum rk_state from = rk_rec_state(rec);
    char now[32];
    rk_iso_time(rk_epoch_s(), now);
    if (from == to)
        return;
    rk_rec_set_str(rec, "state", rk_state_name(to));
    if (to == RK_STATE_RUNNING && !rk_rec_str(rec, "start_time"))
        rk_rec_set_str(rec, "start_time", now);
    if (to == RK_STATE_DELETED)
        rk_rec_set_str(rec, "delete_time", now);
    if (to == RK_STATE_STOPPED)
        rk_rec_set_str(rec, "stop_time", now);
    json_object *hist;
    if (!json_object_object_get_ex(rec, "state_history", &hist) || !hist ||
        !json_object_is_type(hist, json_type_array)) {
        hist = json_object_new_array();
        json_object_object_add(rec, "state_history", hist);
    }
    json_object *h = json_object_new_object();
    json_object_object_add(h, "from_state",
                           from ? json_object_new_string(rk_state_name(from)) : NULL);
    json_object_object_add(h, "to_state", json_object_new_string(rk_state_name(to)));
    json_object_object_add(h, "event", json_object_new_string(event));
    json_object_object_add(h, "timestamp", json_object_new_string(now));
    json_object_array_add(hist, h);
    size_t n = json_object_array_length(hist);
    if (n > RK_HISTORY_MAX)
        json_object_array_del_idx(hist, 0, n - RK_HISTORY_MAX);
}

int rk_memory_normalize(const char *mem, char out[32], double *bytes_out)
{
    if (!mem)
        return -1;
    while (isspace((unsigned char)*mem))
        mem++;
    char *end;
    double v = strtod(mem, &end);
    if (end == mem || !isfinite(v) || v < 0)
        return -1;
    char unit[8] = {0};
    size_t ul = 0;
    while (*end && !isspace((unsigned char)*end) && ul < sizeof unit - 1)
        unit[ul++] = (char)tolower((unsigned char)*end++);
    while (isspace((unsigned char)*end))
        end++;
    if (*end)
        return -1;
    double mult;
    if (ul == 0 || strcmp(unit, "b") == 0)
        mult = 1;
    else if (!strcmp(unit, "k") || !strcmp(unit, "kb") || !strcmp(unit, "ki"))
        mult = 1024.0;
    else if (!strcmp(unit, "m") || !strcmp(unit, "mb") || !strcmp(unit, "mi"))
        mult = 1024.0 * 1024;
    else if (!strcmp(unit, "g") || !strcmp(unit, "gb") || !strcmp(unit, "gi"))
        mult = 1024.0 * 1024 * 1024;
    else if (!strcmp(unit, "t") || !strcmp(unit, "tb") || !strcmp(unit, "ti"))
        mult = 1024.0 * 1024 * 1024 * 1024;
    else
        return -1;
    double bytes = v * mult;
    if (bytes_out)
        *bytes_out = bytes;
    snprintf(out, 32, "%.2fg", bytes / (1024.0 * 1024 * 1024));
    return 0;
}

const struct rk_kv *rk_rec_env(struct rk_call *call, json_object *rec, size_t *n_out)
{
    json_object *env = NULL;
    *n_out = 0;
    if (!json_object_object_get_ex(rec, "env", &env) ||
        !json_object_is_type(env, json_type_object) || json_object_object_length(env) == 0)
        return NULL;
    struct rk_kv *kv = rk_arena_alloc(call, (size_t)json_object_object_length(env) * sizeof *kv);
    size_t n = 0;
    json_object_object_foreach(env, k, val)
    {
        kv[n].key = rk_arena_strdup(call, k);
        kv[n].value = rk_arena_strdup(call, json_object_get_string(val));
        n++;
    }
    *n_out = n;
    return kv;
}

json_object *rk_rec_new_pending(const struct rk_rec_start *s)
{
    char iso[32];
    rk_iso_time(s->now_s, iso);
    json_object *rec = json_object_new_object();
    rk_rec_set_str(rec, "sandbox_id", s->sandbox_id);
    rk_rec_set_str(rec, "state", "pending");
    rk_rec_set_str(rec, "image", s->image);
    rk_rec_set_str(rec, "image_os", s->image_os);
    json_object_object_add(rec, "cpus", json_object_new_double(s->cpus));
    if (s->limit_cpus > 0)
        json_object_object_add(rec, "limit_cpus", json_object_new_double(s->limit_cpus));
    rk_rec_set_str(rec, "memory", s->memory);
    rk_rec_set_str(rec, "memory_requested", s->memory_requested);
    rk_rec_set_str(rec, "disk", s->disk);
    json_object_object_add(rec, "num_gpus",
                           s->has_gpus ? json_object_new_double(s->num_gpus) : NULL);
    rk_rec_set_str(rec, "accelerator_type", s->accelerator_type);
    rk_rec_set_str(rec, "user_id", s->user_id);
    rk_rec_set_str(rec, "experiment_id", s->experiment_id);
    rk_rec_set_str(rec, "namespace", s->namespace_name);
    rk_rec_set_str(rec, "cluster_name", s->cluster_name);
    json_object *env = NULL, *md = NULL;
    if (s->env)
        json_object_deep_copy(s->env, &env, NULL);
    if (s->metadata)
        json_object_deep_copy(s->metadata, &md, NULL);
    json_object_object_add(rec, "env", env ? env : json_object_new_object());
    json_object_object_add(rec, "metadata", md ? md : json_object_new_object());
    if (s->envd_token_digest)
        rk_rec_set_str(rec, "envd_token_sha256", s->envd_token_digest);
    rk_rec_set_str(rec, "create_time", iso);
    if (s->accepted_ms > 0) /* the start of rock_admin_sandbox_start_seconds */
        json_object_object_add(rec, "create_accepted_ms", json_object_new_int64(s->accepted_ms));
    json_object_object_add(rec, "auto_clear_time", json_object_new_int64(s->auto_clear_minutes));
    json_object_object_add(rec, "state_history", json_object_new_array());
    rk_rec_set_backend(rec, s->backend_tag, NULL);
    json_object_object_add(rec, "create_deadline", json_object_new_int64(s->create_deadline_s));
    json_object_object_add(rec, "create_startup_timeout",
                           json_object_new_int64(s->startup_timeout_s));
    if (s->request_id)
        rk_rec_set_str(rec, "create_request_id", s->request_id);
    return rec;
}
