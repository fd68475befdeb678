/* SPDX-License-Identifier: Apache-2.0 */
/*
 * YAML configuration, core sections: the core key table, the defaults, and
 * loading a file (core sections parsed into struct rk_config through the key
 * table, unknown top-level sections kept raw for the plugin; see
 * config_plugin.c). Problems never contain secret values.
 */
#include "config/config.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

#include "config/config_internal.h"

#ifndef PKGLIBDIR
#define PKGLIBDIR "/usr/local/lib/rock-admin"
#endif

/* True for a memory/disk size such as "64g", "512Mi", "1.5GB" or plain bytes. */
static int is_size_text(const char *s)
{
    const char *p = s;
    if (!isdigit((unsigned char)*p))
        return 0;
    while (isdigit((unsigned char)*p))
        p++;
    if (*p == '.') {
        p++;
        if (!isdigit((unsigned char)*p))
            return 0;
        while (isdigit((unsigned char)*p))
            p++;
    }
    if (*p && strchr("kKmMgGtTpP", *p)) {
        p++;
        if (*p == 'i' || *p == 'I')
            p++;
    }
    if (*p == 'b' || *p == 'B')
        p++;
    return *p == '\0';
}

/* True for a non-empty string of [a-z0-9_]. */
static int is_plugin_name(const char *s)
{
    if (!*s)
        return 0;
    for (; *s; s++)
        if (!(islower((unsigned char)*s) || isdigit((unsigned char)*s) || *s == '_'))
            return 0;
    return 1;
}

/* ------------------------------------------------------------------------ */
/* Core key table                                                            */
/* ------------------------------------------------------------------------ */

#define F(member) offsetof(struct rk_config, member)

/* Every key of every core section, grouped by section in dump order. */
const struct core_key rk_core_keys[] = {
    {"server", "host", CT_STR, F(server.host), 0, 0, 0, NULL},
    {"server", "port", CT_INT, F(server.port), 0, 65535, 0, NULL},
    {"server", "max_connections", CT_INT, F(server.max_connections), 1, INT_MAX, 0, NULL},
    {"server", "per_ip_connections", CT_INT, F(server.per_ip_connections), -1, INT_MAX, 0, NULL},
    {"server", "connection_timeout", CT_INT, F(server.connection_timeout_s), 1, INT_MAX, 0,
     "must be at least 1 (0 disables the idle timeout, which is unsafe)"},
    {"server", "max_body_bytes", CT_I64, F(server.max_body_bytes), 0, INT64_MAX, 0, NULL},
    {"server", "max_header_bytes", CT_INT, F(server.max_header_bytes), 1024, INT_MAX, 0, NULL},
    {"server", "max_upload_bytes", CT_I64, F(server.max_upload_bytes), 0, INT64_MAX, 0, NULL},
    {"server", "max_output_bytes", CT_I64, F(server.max_output_bytes), 0, INT64_MAX, 0, NULL},
    {"server", "max_read_bytes", CT_I64, F(server.max_read_bytes), 0, INT64_MAX, 0, NULL},
    {"server", "drain_timeout", CT_INT, F(server.drain_timeout_s), 0, INT_MAX, 0, NULL},
    /* deprecated: accepted, warned about at start-up, ignored */
    {"server", "thread_stack_kib", CT_INT, F(server.thread_stack_kib), 64, INT_MAX / 1024,
     CKF_DEPRECATED, NULL},
    /* the event engine: loops, worker pool and its queue */
    {"server", "event_threads", CT_INT, F(server.event_threads), 1, 64, 0, NULL},
    {"server", "workers", CT_INT, F(server.workers), 1, 4096, 0, NULL},
    {"server", "worker_queue", CT_INT, F(server.worker_queue), 1, 1 << 20, 0, NULL},
    /* limits against hostile and careless clients */
    {"server", "max_buffered_bytes", CT_I64, F(server.max_buffered_bytes), 0, INT64_MAX, 0, NULL},
    {"server", "max_spool_bytes", CT_I64, F(server.max_spool_bytes), 0, INT64_MAX, 0, NULL},
    {"server", "header_timeout", CT_INT, F(server.header_timeout_s), 1, INT_MAX, 0, NULL},
    {"server", "min_body_rate", CT_INT, F(server.min_body_rate), 0, INT_MAX, 0, NULL},
    {"server", "reserved_connections", CT_INT, F(server.reserved_connections), 0, INT_MAX, 0, NULL},
    /* Securing rock-admin: tokens, TLS, browser safety (see docs/operations.md). */
    {"server", "auth_tokens_file", CT_STR, F(server.auth_tokens_file), 0, 0, 0, NULL},
    {"server", "metrics_public", CT_BOOL, F(server.metrics_public), 0, 0, 0, NULL},
    {"server", "tls_cert_file", CT_STR, F(server.tls_cert_file), 0, 0, 0, NULL},
    {"server", "tls_key_file", CT_STR, F(server.tls_key_file), 0, 0, 0, NULL},
    {"server", "cors_origins", CT_LIST, F(server.cors_origins), 0, 0, 0, NULL},
    {"runtime", "operator_type", CT_OPTYPE, F(runtime.operator_type), 0, 0, 0, NULL},
    {"runtime", "plugin_dir", CT_STR, F(runtime.plugin_dir), 0, 0, 0, NULL},
    {"runtime", "stop_as_delete", CT_BOOL, F(runtime.stop_as_delete), 0, 0, 0, NULL},
    {"runtime", "default_auto_clear_minutes", CT_INT, F(runtime.default_auto_clear_minutes), 0,
     INT_MAX, 0, NULL},
    {"runtime", "max_cpus", CT_DOUBLE, F(runtime.max_cpus), 0, 0, 0, NULL},
    {"runtime", "max_memory", CT_SIZE, F(runtime.max_memory), 0, 0, 0, NULL},
    {"runtime", "max_disk", CT_SIZE, F(runtime.max_disk), 0, 0, 0, NULL},
    {"runtime", "sweep_interval", CT_INT, F(runtime.sweep_interval_s), 0, INT_MAX, 0, NULL},
    {"runtime", "session_reservation_ttl", CT_INT, F(runtime.session_reservation_ttl_s), 1, INT_MAX,
     0, NULL},
    {"runtime", "start_wait", CT_INT, F(runtime.start_wait_s), 0, INT_MAX, 0, NULL},
    /* the core owns command deadlines (timeout + this grace). */
    {"runtime", "command_timeout_margin", CT_INT, F(runtime.command_timeout_margin_s), 0, 86400, 0,
     NULL},
    /* X-Key allow-list of /archive (comma-separated; unset = any key) */
    {"runtime", "archive_keys", CT_STR, F(runtime.archive_keys), 0, 0, CKF_SECRET, NULL},
    {"redis", "host", CT_STR, F(redis.host), 0, 0, 0, NULL},
    {"redis", "port", CT_INT, F(redis.port), 1, 65535, 0, NULL},
    {"redis", "password", CT_STR, F(redis.password), 0, 0, CKF_SECRET, NULL},
    {"redis", "db", CT_INT, F(redis.db), 0, INT_MAX, 0, NULL},
    {"redis", "connect_timeout_ms", CT_INT, F(redis.connect_timeout_ms), 1, INT_MAX, 0, NULL},
    {"redis", "timeout_ms", CT_INT, F(redis.timeout_ms), 1, INT_MAX, 0, NULL},
    {"redis", "pool_size", CT_INT, F(redis.pool_size), 1, INT_MAX, 0, NULL},
    {"redis", "key_prefix", CT_STR, F(redis.key_prefix), 0, 0, 0, NULL},
    /* Sentinel, ACL, secrets from files, WAIT, retention */
    {"redis", "sentinels", CT_LIST, F(redis.sentinels), 0, 0, 0, NULL},
    {"redis", "master_name", CT_STR, F(redis.master_name), 0, 0, 0, NULL},
    {"redis", "username", CT_STR, F(redis.username), 0, 0, 0, NULL},
    {"redis", "password_file", CT_STR, F(redis.password_file), 0, 0, 0, NULL},
    {"redis", "sentinel_username", CT_STR, F(redis.sentinel_username), 0, 0, 0, NULL},
    {"redis", "sentinel_password", CT_STR, F(redis.sentinel_password), 0, 0, CKF_SECRET, NULL},
    {"redis", "sentinel_password_file", CT_STR, F(redis.sentinel_password_file), 0, 0, 0, NULL},
    {"redis", "min_replicas_ack", CT_INT, F(redis.min_replicas_ack), 0, INT_MAX, 0, NULL},
    {"redis", "wait_timeout_ms", CT_INT, F(redis.wait_timeout_ms), 1, INT_MAX, 0, NULL},
    {"redis", "deleted_retention", CT_I64, F(redis.deleted_retention_s), 0, INT64_MAX / 1000, 0,
     NULL},
    {"scheduler", "enabled", CT_BOOL, F(scheduler.enabled), 0, 0, 0, NULL},
    {"scheduler", "worker_cache_ttl", CT_ANY, 0, 0, 0, 0, NULL},
    {"scheduler", "tasks", CT_ANY, 0, 0, 0, 0, NULL},
    {"proxy", "timeout", CT_INT, F(proxy.timeout_s), 1, INT_MAX, 0, NULL},
    {"proxy", "connect_timeout", CT_INT, F(proxy.connect_timeout_s), 1, INT_MAX, 0, NULL},
    {"log", "level", CT_LEVEL, F(log.level), 0, 0, 0, NULL},
    /* state from a reconciler; proxy endpoint cache */
    {"runtime", "reconcile_interval_ms", CT_INT, F(runtime.reconcile_interval_ms), 0, INT_MAX, 0,
     NULL},
    /* the create queue */
    {"runtime", "create_concurrency", CT_INT, F(runtime.create_concurrency), 1, 4096, 0, NULL},
    {"runtime", "create_rate", CT_INT, F(runtime.create_rate), 0, 1000000, 0, NULL},
    {"runtime", "create_queue_max", CT_I64, F(runtime.create_queue_max), 1, 100000000, 0, NULL},
    {"proxy", "endpoint_cache_ttl_ms", CT_INT, F(proxy.endpoint_cache_ttl_ms), 0, INT_MAX, 0, NULL},
    /* relay loops of the WebSocket and port-forward relays (0 = one per CPU) */
    {"proxy", "relay_threads", CT_INT, F(proxy.relay_threads), 0, 1024, 0, NULL},
    /* log.format */
    {"log", "format", CT_LOGFMT, F(log.format), 0, 0, 0, NULL},
};

#undef F

#define RK_N_CORE_KEYS (sizeof rk_core_keys / sizeof rk_core_keys[0])

/* Number of entries of rk_core_keys (for the other config files). */
const size_t rk_n_core_keys = RK_N_CORE_KEYS;

/* Names of the core sections. */
static const char *const core_sections[] = {"server",    "runtime", "redis",
                                            "scheduler", "proxy",   "log"};

/* Accepted log levels. */
static const char *const log_levels[] = {"error", "warning", "info", "debug", NULL};
/* Accepted log formats. */
static const char *const log_formats[] = {"text", "json", NULL};

/* Pointer to the field of cfg described by k. */
static void *field(struct rk_config *cfg, const struct core_key *k)
{
    return (char *)cfg + k->off;
}

/* A config holding every default (path ""). */
struct rk_config *rk_config_defaults(void)
{
    struct rk_config *c = rk_config_calloc(1, sizeof *c);
    c->path = rk_config_strdup("");
    c->server.host = rk_config_strdup("0.0.0.0");
    c->server.port = 8080;
    c->server.max_connections = 4096;
    c->server.per_ip_connections = -1;
    c->server.connection_timeout_s = 60;
    c->server.max_body_bytes = 64ll * 1024 * 1024;
    c->server.max_header_bytes = 16384;
    c->server.max_upload_bytes = 1024ll * 1024 * 1024;
    c->server.max_output_bytes = 16ll * 1024 * 1024;
    c->server.max_read_bytes = 64ll * 1024 * 1024;
    c->server.drain_timeout_s = 30;
    c->server.thread_stack_kib = 256;
    /* One event loop per core; a worker pool large enough that blocking
     * backend calls (mostly waiting on the network) keep every core busy. */
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (cpus < 1)
        cpus = 1;
    c->server.event_threads = cpus > 64 ? 64 : (int)cpus;
    c->server.workers = cpus * 8 > 16 ? (cpus * 8 > 4096 ? 4096 : (int)cpus * 8) : 16;
    c->server.worker_queue = 4096;
    c->server.max_buffered_bytes = 512ll * 1024 * 1024;
    c->server.max_spool_bytes = 1024ll * 1024 * 1024;
    c->server.header_timeout_s = 15;
    c->server.min_body_rate = 1024;
    c->server.reserved_connections = 4;
    c->server.auth_tokens_file = rk_config_strdup("");
    c->server.metrics_public = 0;
    c->server.tls_cert_file = rk_config_strdup("");
    c->server.tls_key_file = rk_config_strdup("");
    c->server.cors_origins = rk_config_calloc(1, sizeof(char *));
    c->runtime.operator_type = rk_config_strdup("");
    c->runtime.plugin_dir = rk_config_strdup(PKGLIBDIR);
    c->runtime.stop_as_delete = 0;
    c->runtime.default_auto_clear_minutes = 30;
    c->runtime.max_cpus = 16;
    c->runtime.max_memory = rk_config_strdup("64g");
    c->runtime.max_disk = rk_config_strdup("256g");
    c->runtime.sweep_interval_s = 30;
    c->runtime.session_reservation_ttl_s = 120;
    c->runtime.start_wait_s = 85;
    c->runtime.command_timeout_margin_s = 30;
    c->runtime.reconcile_interval_ms = 1000;
    c->runtime.create_concurrency = 64;
    c->runtime.create_rate = 0;
    c->runtime.create_queue_max = 100000;
    c->proxy.endpoint_cache_ttl_ms = 5000;
    c->redis.host = rk_config_strdup("");
    c->redis.port = 6379;
    c->redis.password = rk_config_strdup("");
    c->redis.db = 0;
    c->redis.connect_timeout_ms = 1000;
    c->redis.timeout_ms = 2000;
    c->redis.pool_size = 64; /* >= wrk -c64 concurrency; waiting for a connection costs more */
    c->redis.key_prefix = rk_config_strdup("rock:");
    c->redis.sentinels = rk_config_calloc(1, sizeof(char *));
    c->redis.master_name = rk_config_strdup("");
    c->redis.username = rk_config_strdup("");
    c->redis.password_file = rk_config_strdup("");
    c->redis.sentinel_username = rk_config_strdup("");
    c->redis.sentinel_password = rk_config_strdup("");
    c->redis.sentinel_password_file = rk_config_strdup("");
    c->redis.min_replicas_ack = 0;
    c->redis.wait_timeout_ms = 1000;
    c->redis.deleted_retention_s = 7 * 24 * 3600;
    c->scheduler.enabled = 0;
    c->proxy.timeout_s = 120;
    c->proxy.connect_timeout_s = 5;
    c->log.level = rk_config_strdup("info");
    c->log.format = rk_config_strdup("text");
    return c;
}

/* Free a NULL-terminated string list. */
static void strlist_free(char **list)
{
    for (size_t i = 0; list && list[i]; i++)
        free(list[i]);
    free(list);
}

/* Free a config, its strings and its raw sections. */
void rk_config_free(struct rk_config *cfg)
{
    if (!cfg)
        return;
    free(cfg->path);
    for (size_t i = 0; i < RK_N_CORE_KEYS; i++) {
        const struct core_key *k = &rk_core_keys[i];
        if (k->type == CT_STR || k->type == CT_SIZE || k->type == CT_LEVEL ||
            k->type == CT_OPTYPE || k->type == CT_LOGFMT)
            free(*(char **)field(cfg, k));
        if (k->type == CT_LIST)
            strlist_free(*(char ***)field(cfg, k));
    }
    for (size_t i = 0; i < cfg->n_sections; i++) {
        struct rk_cfg_raw_section *s = &cfg->sections[i];
        for (size_t j = 0; j < s->n; j++) {
            free(s->values[j].key);
            free(s->values[j].value);
        }
        free(s->values);
        free(s->name);
    }
    free(cfg->sections);
    free(cfg);
}

/* ------------------------------------------------------------------------ */
/* Loading                                                                   */
/* ------------------------------------------------------------------------ */

/* State of one rk_config_load call. */
struct loader {
    const char *file;
    struct rk_problems *p;
    yaml_document_t *doc;
    struct rk_config *cfg;
    int runtime_line;       /* line of the runtime section, 0 if absent */
    int operator_type_line; /* line of runtime.operator_type, 0 if absent */
    int operator_type_bad;  /* runtime.operator_type was present but refused */
    int sentinels_line;     /* line of redis.sentinels, 0 if absent */
};

/* 1-based line where a node starts. */
static int node_line(const yaml_node_t *n)
{
    return (int)n->start_mark.line + 1;
}

/* Text of a scalar node. */
static const char *scalar_text(const yaml_node_t *n)
{
    return (const char *)n->data.scalar.value;
}

/* True if the scalar was written with quotes (or as a block literal). */
static int scalar_quoted(const yaml_node_t *n)
{
    return n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE &&
           n->data.scalar.style != YAML_ANY_SCALAR_STYLE;
}

/* True for a plain YAML null: empty, ~, null, Null or NULL. */
static int is_null_node(const yaml_node_t *n)
{
    if (!n)
        return 1;
    if (n->type != YAML_SCALAR_NODE || scalar_quoted(n))
        return 0;
    const char *s = scalar_text(n);
    return !*s || !strcmp(s, "~") || !strcmp(s, "null") || !strcmp(s, "Null") || !strcmp(s, "NULL");
}

/* Kind of a node as a noun phrase for messages. */
static const char *node_kind(const yaml_node_t *n)
{
    if (!n || is_null_node(n))
        return "null";
    if (n->type == YAML_MAPPING_NODE)
        return "a mapping";
    if (n->type == YAML_SEQUENCE_NODE)
        return "a sequence";
    return "a scalar";
}

/* Report a type error for core key k with the value node v. */
static void core_type_error(struct loader *L, const struct core_key *k, int line,
                            const char *expected, const yaml_node_t *v)
{
    char got[RK_CONFIG_VALUE_SHOWN_MAX + 64];
    if (v->type != YAML_SCALAR_NODE)
        snprintf(got, sizeof got, "%s", node_kind(v));
    else
        rk_config_describe_value(got, sizeof got, scalar_text(v), 1, scalar_quoted(v),
                                 (k->flags & CKF_SECRET) != 0);
    rk_config_problem_at(L->p, L->file, line, k->section, k->key, "expected %s, got %s", expected,
                         got);
}

/* Report a range problem for an integer core key. */
static void core_range_error(struct loader *L, const struct core_key *k, int line, long long v)
{
    int unbounded = k->max == INT_MAX || k->max == INT64_MAX;
    if (v < k->min && k->min_msg)
        rk_config_problem_at(L->p, L->file, line, k->section, k->key, "%s", k->min_msg);
    else if (v < k->min && k->min == 0 && unbounded)
        rk_config_problem_at(L->p, L->file, line, k->section, k->key, "must not be negative");
    else if (v < k->min && unbounded)
        rk_config_problem_at(L->p, L->file, line, k->section, k->key, "must be at least %lld",
                             k->min);
    else if (unbounded)
        rk_config_problem_at(L->p, L->file, line, k->section, k->key, "must be at most %lld",
                             k->max);
    else
        rk_config_problem_at(L->p, L->file, line, k->section, k->key,
                             "must be between %lld and %lld", k->min, k->max);
}

/* Parse a sequence of strings (e.g. server.cors_origins) into a NULL-terminated list. */
static void apply_strlist(struct loader *L, const struct core_key *k, int line,
                          const yaml_node_t *v)
{
    if (!strcmp(k->key, "sentinels"))
        L->sentinels_line = line;
    if (v->type != YAML_SEQUENCE_NODE) {
        core_type_error(L, k, line, "a list of strings", v);
        return;
    }
    size_t n = (size_t)(v->data.sequence.items.top - v->data.sequence.items.start);
    char **list = rk_config_calloc(n + 1, sizeof *list);
    size_t used = 0;
    for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top;
         it++) {
        yaml_node_t *item = yaml_document_get_node(L->doc, *it);
        if (!item || item->type != YAML_SCALAR_NODE || is_null_node(item)) {
            rk_config_problem_at(L->p, L->file, item ? node_line(item) : line, k->section, k->key,
                                 "expected a list of strings, got an item that is %s",
                                 node_kind(item));
            continue;
        }
        list[used++] = rk_config_strdup(scalar_text(item));
    }
    strlist_free(*(char ***)field(L->cfg, k));
    *(char ***)field(L->cfg, k) = list;
}

/* Cross-key checks of the redis HA keys: every sentinel is
 * host:port (IPv6 as [addr]:port) and master_name is set with sentinels. */
static void check_redis_ha(struct loader *L)
{
    char **list = L->cfg->redis.sentinels;
    if (!list || !list[0])
        return;
    for (size_t i = 0; list[i]; i++) {
        const char *item = list[i], *end = item + strlen(item), *colon = strrchr(item, ':');
        long port = 0;
        int digits = colon && colon + 1 < end;
        for (const char *c = colon ? colon + 1 : end; c < end && digits; c++)
            digits = *c >= '0' && *c <= '9' && (port = port * 10 + (*c - '0')) <= 65535;
        if (!colon || colon == item || !digits || port < 1)
            rk_config_problem_at(L->p, L->file, L->sentinels_line, "redis", "sentinels",
                                 "expected host:port, got \"%.64s\"", item);
    }
    if (!*L->cfg->redis.master_name)
        rk_config_problem_at(L->p, L->file, L->sentinels_line, "redis", "master_name",
                             "required when redis.sentinels is set");
}

/* Parse the value v of core key k (key at line) into the config. */
static void apply_core_key(struct loader *L, const struct core_key *k, int line,
                           const yaml_node_t *v)
{
    if (k->type == CT_ANY || is_null_node(v))
        return;
    if (k->type == CT_LIST) {
        apply_strlist(L, k, line, v);
        return;
    }
    int scalar = v->type == YAML_SCALAR_NODE;
    const char *text = scalar ? scalar_text(v) : "";
    int plain = scalar && !scalar_quoted(v);
    long long iv;
    double dv;
    int bv;
    switch (k->type) {
    case CT_STR:
        if (!scalar)
            core_type_error(L, k, line, "a string", v);
        else
            rk_config_set_str(field(L->cfg, k), text);
        break;
    case CT_SIZE:
        if (!scalar)
            core_type_error(L, k, line, "a size", v);
        else if (!is_size_text(text))
            core_type_error(L, k, line, "a size such as \"64g\"", v);
        else
            rk_config_set_str(field(L->cfg, k), text);
        break;
    case CT_LEVEL:
        if (!scalar)
            core_type_error(L, k, line, "a string", v);
        else if (!rk_config_in_list(log_levels, text))
            rk_config_problem_at(L->p, L->file, line, k->section, k->key,
                                 "must be one of: error, warning, info, debug");
        else
            rk_config_set_str(field(L->cfg, k), text);
        break;
    case CT_LOGFMT:
        if (!scalar)
            core_type_error(L, k, line, "a string", v);
        else if (!rk_config_in_list(log_formats, text))
            rk_config_problem_at(L->p, L->file, line, k->section, k->key,
                                 "must be one of: text, json");
        else
            rk_config_set_str(field(L->cfg, k), text);
        break;
    case CT_OPTYPE:
        L->operator_type_line = line;
        L->operator_type_bad = !scalar || (*text && !is_plugin_name(text));
        if (!scalar)
            core_type_error(L, k, line, "a string", v);
        else if (L->operator_type_bad)
            rk_config_problem_at(L->p, L->file, line, k->section, k->key,
                                 "must contain only a-z, 0-9 and _, got \"%.*s\"",
                                 RK_CONFIG_VALUE_SHOWN_MAX, text);
        else
            rk_config_set_str(field(L->cfg, k), text);
        break;
    case CT_INT:
    case CT_I64:
        if (!plain || rk_config_parse_int(text, &iv) != 0)
            core_type_error(L, k, line, "an integer", v);
        else if (iv < k->min || iv > k->max)
            core_range_error(L, k, line, iv);
        else if (k->type == CT_INT)
            *(int *)field(L->cfg, k) = (int)iv;
        else
            *(int64_t *)field(L->cfg, k) = (int64_t)iv;
        break;
    case CT_BOOL:
        bv = plain ? rk_config_parse_bool(text) : -1;
        if (bv < 0)
            core_type_error(L, k, line, "a boolean", v);
        else
            *(int *)field(L->cfg, k) = bv;
        break;
    case CT_DOUBLE:
        if (!plain || rk_config_parse_double(text, &dv) != 0)
            core_type_error(L, k, line, "a number", v);
        else if (dv <= 0)
            rk_config_problem_at(L->p, L->file, line, k->section, k->key, "must be positive");
        else
            *(double *)field(L->cfg, k) = dv;
        break;
    case CT_ANY:
    case CT_LIST:
        break;
    }
}

/* Parse a core section (a mapping node) named name. */
static void load_core_section(struct loader *L, const char *name, const yaml_node_t *sec)
{
    unsigned char seen[RK_N_CORE_KEYS] = {0};
    for (yaml_node_pair_t *pr = sec->data.mapping.pairs.start; pr < sec->data.mapping.pairs.top;
         pr++) {
        yaml_node_t *kn = yaml_document_get_node(L->doc, pr->key);
        yaml_node_t *vn = yaml_document_get_node(L->doc, pr->value);
        int line = node_line(kn);
        if (kn->type != YAML_SCALAR_NODE) {
            rk_config_problem_at(L->p, L->file, line, name, NULL, "keys must be strings");
            continue;
        }
        const char *key = scalar_text(kn);
        size_t i;
        for (i = 0; i < RK_N_CORE_KEYS; i++)
            if (!strcmp(rk_core_keys[i].section, name) && !strcmp(rk_core_keys[i].key, key))
                break;
        if (i == RK_N_CORE_KEYS) {
            rk_config_problem_at(L->p, L->file, line, name, key, "unknown key");
            continue;
        }
        if (seen[i]++) {
            rk_config_problem_at(L->p, L->file, line, name, key, "duplicate key");
            continue;
        }
        apply_core_key(L, &rk_core_keys[i], line, vn);
        if (rk_core_keys[i].flags & CKF_DEPRECATED)
            L->cfg->server.thread_stack_kib_set = 1; /* the only deprecated key */
    }
}

/* Keep an unknown top-level section (a mapping node) raw for plugins. */
static void load_raw_section(struct loader *L, const char *name, int line, const yaml_node_t *sec)
{
    struct rk_config *c = L->cfg;
    c->sections = rk_config_reallocarray(c->sections, c->n_sections + 1, sizeof *c->sections);
    struct rk_cfg_raw_section *s = &c->sections[c->n_sections++];
    memset(s, 0, sizeof *s);
    s->name = rk_config_strdup(name);
    s->line = line;
    size_t npairs = (size_t)(sec->data.mapping.pairs.top - sec->data.mapping.pairs.start);
    s->values = rk_config_calloc(npairs, sizeof *s->values);
    for (yaml_node_pair_t *pr = sec->data.mapping.pairs.start; pr < sec->data.mapping.pairs.top;
         pr++) {
        yaml_node_t *kn = yaml_document_get_node(L->doc, pr->key);
        yaml_node_t *vn = yaml_document_get_node(L->doc, pr->value);
        int kline = node_line(kn);
        if (kn->type != YAML_SCALAR_NODE) {
            rk_config_problem_at(L->p, L->file, kline, name, NULL, "keys must be strings");
            continue;
        }
        const char *key = scalar_text(kn);
        int dup = 0;
        for (size_t j = 0; j < s->n; j++)
            dup |= !strcmp(s->values[j].key, key);
        if (dup) {
            rk_config_problem_at(L->p, L->file, kline, name, key, "duplicate key");
            continue;
        }
        struct rk_cfg_raw_value *rv = &s->values[s->n++];
        rv->key = rk_config_strdup(key);
        rv->line = kline;
        rv->is_scalar = vn && vn->type == YAML_SCALAR_NODE;
        rv->is_quoted = rv->is_scalar && scalar_quoted(vn);
        rv->value = rv->is_scalar && !is_null_node(vn) ? rk_config_strdup(scalar_text(vn)) : NULL;
    }
}

/* True if name is a core section. */
static int is_core_section(const char *name)
{
    for (size_t i = 0; i < sizeof core_sections / sizeof core_sections[0]; i++)
        if (!strcmp(core_sections[i], name))
            return 1;
    return 0;
}

/* True if a scalar key equal to kn appears among the pairs [first, upto). */
static int key_seen_before(yaml_document_t *doc, const yaml_node_pair_t *first,
                           const yaml_node_pair_t *upto, const yaml_node_t *kn)
{
    for (const yaml_node_pair_t *q = first; q < upto; q++) {
        yaml_node_t *other = yaml_document_get_node(doc, q->key);
        if (other && other->type == YAML_SCALAR_NODE &&
            !strcmp(scalar_text(other), scalar_text(kn)))
            return 1;
    }
    return 0;
}

/* Walk the top-level mapping: core sections parsed, the rest kept raw. */
static void load_root(struct loader *L, const yaml_node_t *root)
{
    const yaml_node_pair_t *first = root->data.mapping.pairs.start;
    const yaml_node_pair_t *top = root->data.mapping.pairs.top;
    for (const yaml_node_pair_t *pr = first; pr < top; pr++) {
        yaml_node_t *kn = yaml_document_get_node(L->doc, pr->key);
        yaml_node_t *vn = yaml_document_get_node(L->doc, pr->value);
        int line = node_line(kn);
        if (kn->type != YAML_SCALAR_NODE) {
            rk_problems_add(L->p, "%s:%d: section names must be strings", L->file, line);
            continue;
        }
        const char *name = scalar_text(kn);
        if (key_seen_before(L->doc, first, pr, kn)) {
            rk_config_problem_at(L->p, L->file, line, name, NULL, "duplicate section");
            continue;
        }
        int mapping = vn && vn->type == YAML_MAPPING_NODE;
        if (is_core_section(name)) {
            if (!strcmp(name, "runtime"))
                L->runtime_line = line;
            if (!mapping)
                rk_config_problem_at(L->p, L->file, line, name, NULL, "expected a mapping, got %s",
                                     node_kind(vn));
            else
                load_core_section(L, name, vn);
        } else if (mapping) {
            load_raw_section(L, name, line, vn);
        }
    }
    /* A non-mapping unknown section only matters when it is the selected plugin's. */
    for (const yaml_node_pair_t *pr = first; pr < top; pr++) {
        yaml_node_t *kn = yaml_document_get_node(L->doc, pr->key);
        yaml_node_t *vn = yaml_document_get_node(L->doc, pr->value);
        if (kn->type != YAML_SCALAR_NODE || (vn && vn->type == YAML_MAPPING_NODE) ||
            strcmp(scalar_text(kn), L->cfg->runtime.operator_type) ||
            key_seen_before(L->doc, first, pr, kn))
            continue;
        rk_config_problem_at(L->p, L->file, node_line(kn), scalar_text(kn), NULL,
                             "expected a mapping, got %s", node_kind(vn));
    }
}

/* Report a libyaml parser error as a syntax problem. */
static void syntax_problem(struct rk_problems *p, const char *path, const yaml_parser_t *parser)
{
    rk_problems_add(p, "%s:%d: YAML syntax error: %s%s%s", path, (int)parser->problem_mark.line + 1,
                    parser->problem ? parser->problem : "unknown error", parser->context ? " " : "",
                    parser->context ? parser->context : "");
}

/* Parse path; NULL only for I/O or syntax errors (see config.h). */
struct rk_config *rk_config_load(const char *path, struct rk_problems *p)
{
    FILE *fp = fopen(path, "rb");
    struct stat st;
    if (fp && fstat(fileno(fp), &st) == 0 && S_ISDIR(st.st_mode)) {
        fclose(fp);
        fp = NULL;
        errno = EISDIR;
    }
    if (!fp) {
        rk_problems_add(p, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    yaml_parser_t parser;
    yaml_document_t doc, next;
    if (!yaml_parser_initialize(&parser))
        rk_config_oom();
    yaml_parser_set_input_file(&parser, fp);
    struct rk_config *cfg = NULL;
    if (!yaml_parser_load(&parser, &doc)) {
        syntax_problem(p, path, &parser);
        goto out;
    }
    /* Read on so a syntax error anywhere in the file is reported. */
    if (!yaml_parser_load(&parser, &next)) {
        syntax_problem(p, path, &parser);
        yaml_document_delete(&doc);
        goto out;
    }
    cfg = rk_config_defaults();
    rk_config_set_str(&cfg->path, path);
    struct loader L = {.file = path, .p = p, .doc = &doc, .cfg = cfg};
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (root && !is_null_node(root)) {
        if (root->type != YAML_MAPPING_NODE)
            rk_problems_add(p, "%s:%d: expected a mapping of sections at the top level, got %s",
                            path, node_line(root), node_kind(root));
        else
            load_root(&L, root);
    }
    check_redis_ha(&L);
    if (!*cfg->runtime.operator_type && !L.operator_type_bad)
        rk_config_problem_at(p, path, L.operator_type_line ? L.operator_type_line : L.runtime_line,
                             "runtime", "operator_type", "required key is missing");
    yaml_node_t *extra = yaml_document_get_root_node(&next);
    if (extra)
        rk_problems_add(p, "%s:%d: only one YAML document is supported", path, node_line(extra));
    yaml_document_delete(&next);
    yaml_document_delete(&doc);
out:
    yaml_parser_delete(&parser);
    fclose(fp);
    return cfg;
}
