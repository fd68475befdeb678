/* SPDX-License-Identifier: Apache-2.0 */
/*
 * YAML configuration: core sections parsed into struct rk_config through a key
 * table, unknown top-level sections kept raw, and plugin sections validated
 * against the schema the plugin declares. Problems never contain secret values.
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <yaml.h>

#include "log.h"

#ifndef PKGLIBDIR
#define PKGLIBDIR "/usr/local/lib/rock-admin"
#endif

/* Longest piece of a user value quoted in a problem line. */
#define VALUE_SHOWN_MAX 80

/* ------------------------------------------------------------------------ */
/* Small helpers                                                             */
/* ------------------------------------------------------------------------ */

/* Abort on allocation failure: configuration strings are tiny. */
static void oom(void)
{
    fputs("rock-admin: out of memory while reading the configuration\n", stderr);
    abort();
}

/* strdup that aborts on OOM. */
static char *xstrdup(const char *s)
{
    char *r = strdup(s ? s : "");
    if (!r)
        oom();
    return r;
}

/* calloc that aborts on OOM. */
static void *xcalloc(size_t n, size_t size)
{
    void *r = calloc(n ? n : 1, size ? size : 1);
    if (!r)
        oom();
    return r;
}

/* realloc of an array that aborts on OOM or overflow. */
static void *xreallocarray(void *ptr, size_t n, size_t size)
{
    if (size && n > SIZE_MAX / size)
        oom();
    size_t bytes = n * size;
    void *r = realloc(ptr, bytes ? bytes : 1);
    if (!r)
        oom();
    return r;
}

/* Replace *dst with a copy of src. */
static void set_str(char **dst, const char *src)
{
    char *copy = xstrdup(src);
    free(*dst);
    *dst = copy;
}

/* Case-insensitive ASCII equality. */
static int ascii_caseeq(const char *a, const char *b)
{
    for (; *a && *b; a++, b++)
        if (tolower((unsigned char)*a) != tolower((unsigned char)*b))
            return 0;
    return *a == *b;
}

/* Parse a decimal integer with an optional sign; 0 on success, -1 if invalid. */
static int parse_int(const char *s, long long *out)
{
    const char *p = s;
    if (*p == '+' || *p == '-')
        p++;
    if (!*p)
        return -1;
    for (const char *q = p; *q; q++)
        if (!isdigit((unsigned char)*q))
            return -1;
    errno = 0;
    char *end = NULL;
    long long v = strtoll(s, &end, 10);
    if (errno == ERANGE || !end || *end)
        return -1;
    *out = v;
    return 0;
}

/* Parse a YAML-style boolean (true/false/yes/no/on/off); 1, 0 or -1 if invalid. */
static int parse_bool(const char *s)
{
    if (ascii_caseeq(s, "true") || ascii_caseeq(s, "yes") || ascii_caseeq(s, "on"))
        return 1;
    if (ascii_caseeq(s, "false") || ascii_caseeq(s, "no") || ascii_caseeq(s, "off"))
        return 0;
    return -1;
}

/* Parse a finite decimal number (no hex, inf or nan); 0 on success, -1 if invalid. */
static int parse_double(const char *s, double *out)
{
    int digits = 0;
    for (const char *q = s; *q; q++) {
        if (isdigit((unsigned char)*q))
            digits = 1;
        else if (!strchr("+-.eE", *q))
            return -1;
    }
    if (!digits)
        return -1;
    errno = 0;
    char *end = NULL;
    double v = strtod(s, &end);
    if (errno == ERANGE || !end || *end || !isfinite(v))
        return -1;
    *out = v;
    return 0;
}

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
/* Problems                                                                  */
/* ------------------------------------------------------------------------ */

/* Append a formatted line; control characters become spaces so each problem stays one line. */
void rk_problems_add(struct rk_problems *p, const char *fmt, ...)
{
    if (!p)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    char *line = malloc((size_t)n + 1);
    if (!line)
        oom();
    va_start(ap, fmt);
    vsnprintf(line, (size_t)n + 1, fmt, ap);
    va_end(ap);
    for (char *c = line; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f)
            *c = ' ';
    p->lines = xreallocarray(p->lines, p->n + 1, sizeof *p->lines);
    p->lines[p->n++] = line;
}

/* Free every problem line and reset the list. */
void rk_problems_free(struct rk_problems *p)
{
    if (!p)
        return;
    for (size_t i = 0; i < p->n; i++)
        free(p->lines[i]);
    free(p->lines);
    p->lines = NULL;
    p->n = 0;
}

/* Add "file:line: sect.key: msg" ("file: ..." when line is 0; no ".key" when key is NULL). */
static void problem_at(struct rk_problems *p, const char *file, int line, const char *sect,
                       const char *key, const char *fmt, ...) RK_PRINTF(6, 7);

/* Implementation of problem_at. */
static void problem_at(struct rk_problems *p, const char *file, int line, const char *sect,
                       const char *key, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    char where[32] = "";
    if (line > 0)
        snprintf(where, sizeof where, ":%d", line);
    rk_problems_add(p, "%s%s: %s%s%s: %s", file, where, sect, key ? "." : "", key ? key : "", msg);
}

/*
 * Describe an offending value for a type error: `"abc"`, `the quoted string "abc"`,
 * `a mapping or a sequence`, or for secrets only its kind (`a string`).
 */
static void describe_value(char *buf, size_t size, const char *text, int is_scalar, int quoted,
                           int secret)
{
    if (!is_scalar) {
        snprintf(buf, size, "a mapping or a sequence");
        return;
    }
    if (secret) {
        long long iv;
        double dv;
        if (quoted)
            snprintf(buf, size, "a string");
        else if (parse_int(text, &iv) == 0)
            snprintf(buf, size, "an integer");
        else if (parse_double(text, &dv) == 0)
            snprintf(buf, size, "a number");
        else if (parse_bool(text) >= 0)
            snprintf(buf, size, "a boolean");
        else
            snprintf(buf, size, "a string");
        return;
    }
    size_t len = strlen(text);
    int cut = len > VALUE_SHOWN_MAX;
    snprintf(buf, size, "%s\"%.*s%s\"", quoted ? "the quoted string " : "",
             (int)(cut ? VALUE_SHOWN_MAX : len), text, cut ? "..." : "");
}

/* ------------------------------------------------------------------------ */
/* Core key table                                                            */
/* ------------------------------------------------------------------------ */

/* Value kinds of core keys. */
enum core_type {
    CT_STR,    /* char *, any scalar */
    CT_INT,    /* int in [min, max] */
    CT_I64,    /* int64_t in [min, max] */
    CT_BOOL,   /* int 0/1 */
    CT_DOUBLE, /* double > 0 */
    CT_SIZE,   /* char *, a size like "64g" */
    CT_LEVEL,  /* char *, a log level */
    CT_LOGFMT, /* char *, a log format: text|json (issue 16) */
    CT_OPTYPE, /* char *, [a-z0-9_]+ */
    CT_ANY,    /* accepted and ignored (ROCK compatibility) */
    CT_LIST,   /* char **, NULL-terminated, from a sequence of strings */
};

/* Core key flags. */
#define CKF_SECRET 0x1u

/* One key of a core section. */
struct core_key {
    const char *section;
    const char *key;
    enum core_type type;
    size_t off;
    long long min, max;
    unsigned flags;
    const char *min_msg; /* message when below min, or NULL for the generic one */
};

#define F(member) offsetof(struct rk_config, member)

/* Every key of every core section, grouped by section in dump order. */
static const struct core_key core_keys[] = {
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
    {"server", "thread_stack_kib", CT_INT, F(server.thread_stack_kib), 64, INT_MAX / 1024, 0, NULL},
    /* issue 10: limits against hostile and careless clients */
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
    /* issue 13: the core owns command deadlines (timeout + this grace). */
    {"runtime", "command_timeout_margin", CT_INT, F(runtime.command_timeout_margin_s), 0, 86400, 0,
     NULL},
    /* issue 12: X-Key allow-list of /archive (comma-separated; unset = any key) */
    {"runtime", "archive_keys", CT_STR, F(runtime.archive_keys), 0, 0, CKF_SECRET, NULL},
    {"redis", "host", CT_STR, F(redis.host), 0, 0, 0, NULL},
    {"redis", "port", CT_INT, F(redis.port), 1, 65535, 0, NULL},
    {"redis", "password", CT_STR, F(redis.password), 0, 0, CKF_SECRET, NULL},
    {"redis", "db", CT_INT, F(redis.db), 0, INT_MAX, 0, NULL},
    {"redis", "connect_timeout_ms", CT_INT, F(redis.connect_timeout_ms), 1, INT_MAX, 0, NULL},
    {"redis", "timeout_ms", CT_INT, F(redis.timeout_ms), 1, INT_MAX, 0, NULL},
    {"redis", "pool_size", CT_INT, F(redis.pool_size), 1, INT_MAX, 0, NULL},
    {"redis", "key_prefix", CT_STR, F(redis.key_prefix), 0, 0, 0, NULL},
    /* issue 14: Sentinel, ACL, secrets from files, WAIT, retention */
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
    /* issue 15: state from a reconciler; proxy endpoint cache */
    {"runtime", "reconcile_interval_ms", CT_INT, F(perf.reconcile_interval_ms), 0, INT_MAX, 0,
     NULL},
    {"proxy", "endpoint_cache_ttl_ms", CT_INT, F(perf.proxy_endpoint_ttl_ms), 0, INT_MAX, 0, NULL},
    /* issue 16: log.format */
    {"log", "format", CT_LOGFMT, F(log.format), 0, 0, 0, NULL},
};

#undef F

#define N_CORE_KEYS (sizeof core_keys / sizeof core_keys[0])

/* Names of the core sections. */
static const char *const core_sections[] = {"server",    "runtime", "redis",
                                            "scheduler", "proxy",   "log"};

/* Accepted log levels. */
static const char *const log_levels[] = {"error", "warning", "info", "debug", NULL};
/* Accepted log formats (issue 16). */
static const char *const log_formats[] = {"text", "json", NULL};

/* True if s is one of the NULL-terminated list. */
static int in_list(const char *const *list, const char *s)
{
    for (size_t i = 0; list && list[i]; i++)
        if (!strcmp(list[i], s))
            return 1;
    return 0;
}

/* Pointer to the field of cfg described by k. */
static void *field(struct rk_config *cfg, const struct core_key *k)
{
    return (char *)cfg + k->off;
}

/* Const pointer to the field of cfg described by k. */
static const void *cfield(const struct rk_config *cfg, const struct core_key *k)
{
    return (const char *)cfg + k->off;
}

/* A config holding every default (path ""). */
struct rk_config *rk_config_defaults(void)
{
    struct rk_config *c = xcalloc(1, sizeof *c);
    c->path = xstrdup("");
    c->server.host = xstrdup("0.0.0.0");
    c->server.port = 8080;
    c->server.max_connections = 4096;
    c->server.per_ip_connections = -1;
    c->server.connection_timeout_s = 60;
    c->server.max_body_bytes = 64ll * 1024 * 1024;
    c->server.max_header_bytes = 32768;
    c->server.max_upload_bytes = 1024ll * 1024 * 1024;
    c->server.max_output_bytes = 16ll * 1024 * 1024;
    c->server.max_read_bytes = 64ll * 1024 * 1024;
    c->server.drain_timeout_s = 30;
    c->server.thread_stack_kib = 256;
    c->server.max_buffered_bytes = 512ll * 1024 * 1024;
    c->server.max_spool_bytes = 1024ll * 1024 * 1024;
    c->server.header_timeout_s = 15;
    c->server.min_body_rate = 1024;
    c->server.reserved_connections = 4;
    c->server.auth_tokens_file = xstrdup("");
    c->server.metrics_public = 0;
    c->server.tls_cert_file = xstrdup("");
    c->server.tls_key_file = xstrdup("");
    c->server.cors_origins = xcalloc(1, sizeof(char *));
    c->runtime.operator_type = xstrdup("");
    c->runtime.plugin_dir = xstrdup(PKGLIBDIR);
    c->runtime.stop_as_delete = 0;
    c->runtime.default_auto_clear_minutes = 30;
    c->runtime.max_cpus = 16;
    c->runtime.max_memory = xstrdup("64g");
    c->runtime.max_disk = xstrdup("256g");
    c->runtime.sweep_interval_s = 30;
    c->runtime.session_reservation_ttl_s = 120;
    c->runtime.start_wait_s = 85;
    c->runtime.command_timeout_margin_s = 30; /* issue 13 */
    c->perf.reconcile_interval_ms = 1000;     /* issue 15 */
    c->perf.proxy_endpoint_ttl_ms = 5000;     /* issue 15 */
    c->redis.host = xstrdup("");
    c->redis.port = 6379;
    c->redis.password = xstrdup("");
    c->redis.db = 0;
    c->redis.connect_timeout_ms = 1000;
    c->redis.timeout_ms = 2000;
    c->redis.pool_size =
        64; /* issue 15: >= wrk -c64 concurrency; waiting for a connection costs more */
    c->redis.key_prefix = xstrdup("rock:");
    c->redis.sentinels = xcalloc(1, sizeof(char *));
    c->redis.master_name = xstrdup("");
    c->redis.username = xstrdup("");
    c->redis.password_file = xstrdup("");
    c->redis.sentinel_username = xstrdup("");
    c->redis.sentinel_password = xstrdup("");
    c->redis.sentinel_password_file = xstrdup("");
    c->redis.min_replicas_ack = 0;
    c->redis.wait_timeout_ms = 1000;
    c->redis.deleted_retention_s = 7 * 24 * 3600;
    c->scheduler.enabled = 0;
    c->proxy.timeout_s = 120;
    c->proxy.connect_timeout_s = 5;
    c->log.level = xstrdup("info");
    c->log.format = xstrdup("text");
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
    for (size_t i = 0; i < N_CORE_KEYS; i++) {
        const struct core_key *k = &core_keys[i];
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
    char got[VALUE_SHOWN_MAX + 64];
    if (v->type != YAML_SCALAR_NODE)
        snprintf(got, sizeof got, "%s", node_kind(v));
    else
        describe_value(got, sizeof got, scalar_text(v), 1, scalar_quoted(v),
                       (k->flags & CKF_SECRET) != 0);
    problem_at(L->p, L->file, line, k->section, k->key, "expected %s, got %s", expected, got);
}

/* Report a range problem for an integer core key. */
static void core_range_error(struct loader *L, const struct core_key *k, int line, long long v)
{
    int unbounded = k->max == INT_MAX || k->max == INT64_MAX;
    if (v < k->min && k->min_msg)
        problem_at(L->p, L->file, line, k->section, k->key, "%s", k->min_msg);
    else if (v < k->min && k->min == 0 && unbounded)
        problem_at(L->p, L->file, line, k->section, k->key, "must not be negative");
    else if (v < k->min && unbounded)
        problem_at(L->p, L->file, line, k->section, k->key, "must be at least %lld", k->min);
    else if (unbounded)
        problem_at(L->p, L->file, line, k->section, k->key, "must be at most %lld", k->max);
    else
        problem_at(L->p, L->file, line, k->section, k->key, "must be between %lld and %lld", k->min,
                   k->max);
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
    char **list = xcalloc(n + 1, sizeof *list);
    size_t used = 0;
    for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top;
         it++) {
        yaml_node_t *item = yaml_document_get_node(L->doc, *it);
        if (!item || item->type != YAML_SCALAR_NODE || is_null_node(item)) {
            problem_at(L->p, L->file, item ? node_line(item) : line, k->section, k->key,
                       "expected a list of strings, got an item that is %s", node_kind(item));
            continue;
        }
        list[used++] = xstrdup(scalar_text(item));
    }
    strlist_free(*(char ***)field(L->cfg, k));
    *(char ***)field(L->cfg, k) = list;
}

/* Cross-key checks of the redis HA keys (issue 14): every sentinel is
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
            problem_at(L->p, L->file, L->sentinels_line, "redis", "sentinels",
                       "expected host:port, got \"%.64s\"", item);
    }
    if (!*L->cfg->redis.master_name)
        problem_at(L->p, L->file, L->sentinels_line, "redis", "master_name",
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
            set_str(field(L->cfg, k), text);
        break;
    case CT_SIZE:
        if (!scalar)
            core_type_error(L, k, line, "a size", v);
        else if (!is_size_text(text))
            core_type_error(L, k, line, "a size such as \"64g\"", v);
        else
            set_str(field(L->cfg, k), text);
        break;
    case CT_LEVEL:
        if (!scalar)
            core_type_error(L, k, line, "a string", v);
        else if (!in_list(log_levels, text))
            problem_at(L->p, L->file, line, k->section, k->key,
                       "must be one of: error, warning, info, debug");
        else
            set_str(field(L->cfg, k), text);
        break;
    case CT_LOGFMT:
        if (!scalar)
            core_type_error(L, k, line, "a string", v);
        else if (!in_list(log_formats, text))
            problem_at(L->p, L->file, line, k->section, k->key, "must be one of: text, json");
        else
            set_str(field(L->cfg, k), text);
        break;
    case CT_OPTYPE:
        L->operator_type_line = line;
        L->operator_type_bad = !scalar || (*text && !is_plugin_name(text));
        if (!scalar)
            core_type_error(L, k, line, "a string", v);
        else if (L->operator_type_bad)
            problem_at(L->p, L->file, line, k->section, k->key,
                       "must contain only a-z, 0-9 and _, got \"%.*s\"", VALUE_SHOWN_MAX, text);
        else
            set_str(field(L->cfg, k), text);
        break;
    case CT_INT:
    case CT_I64:
        if (!plain || parse_int(text, &iv) != 0)
            core_type_error(L, k, line, "an integer", v);
        else if (iv < k->min || iv > k->max)
            core_range_error(L, k, line, iv);
        else if (k->type == CT_INT)
            *(int *)field(L->cfg, k) = (int)iv;
        else
            *(int64_t *)field(L->cfg, k) = (int64_t)iv;
        break;
    case CT_BOOL:
        bv = plain ? parse_bool(text) : -1;
        if (bv < 0)
            core_type_error(L, k, line, "a boolean", v);
        else
            *(int *)field(L->cfg, k) = bv;
        break;
    case CT_DOUBLE:
        if (!plain || parse_double(text, &dv) != 0)
            core_type_error(L, k, line, "a number", v);
        else if (dv <= 0)
            problem_at(L->p, L->file, line, k->section, k->key, "must be positive");
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
    unsigned char seen[N_CORE_KEYS] = {0};
    for (yaml_node_pair_t *pr = sec->data.mapping.pairs.start; pr < sec->data.mapping.pairs.top;
         pr++) {
        yaml_node_t *kn = yaml_document_get_node(L->doc, pr->key);
        yaml_node_t *vn = yaml_document_get_node(L->doc, pr->value);
        int line = node_line(kn);
        if (kn->type != YAML_SCALAR_NODE) {
            problem_at(L->p, L->file, line, name, NULL, "keys must be strings");
            continue;
        }
        const char *key = scalar_text(kn);
        size_t i;
        for (i = 0; i < N_CORE_KEYS; i++)
            if (!strcmp(core_keys[i].section, name) && !strcmp(core_keys[i].key, key))
                break;
        if (i == N_CORE_KEYS) {
            problem_at(L->p, L->file, line, name, key, "unknown key");
            continue;
        }
        if (seen[i]++) {
            problem_at(L->p, L->file, line, name, key, "duplicate key");
            continue;
        }
        apply_core_key(L, &core_keys[i], line, vn);
    }
}

/* Keep an unknown top-level section (a mapping node) raw for plugins. */
static void load_raw_section(struct loader *L, const char *name, int line, const yaml_node_t *sec)
{
    struct rk_config *c = L->cfg;
    c->sections = xreallocarray(c->sections, c->n_sections + 1, sizeof *c->sections);
    struct rk_cfg_raw_section *s = &c->sections[c->n_sections++];
    memset(s, 0, sizeof *s);
    s->name = xstrdup(name);
    s->line = line;
    size_t npairs = (size_t)(sec->data.mapping.pairs.top - sec->data.mapping.pairs.start);
    s->values = xcalloc(npairs, sizeof *s->values);
    for (yaml_node_pair_t *pr = sec->data.mapping.pairs.start; pr < sec->data.mapping.pairs.top;
         pr++) {
        yaml_node_t *kn = yaml_document_get_node(L->doc, pr->key);
        yaml_node_t *vn = yaml_document_get_node(L->doc, pr->value);
        int kline = node_line(kn);
        if (kn->type != YAML_SCALAR_NODE) {
            problem_at(L->p, L->file, kline, name, NULL, "keys must be strings");
            continue;
        }
        const char *key = scalar_text(kn);
        int dup = 0;
        for (size_t j = 0; j < s->n; j++)
            dup |= !strcmp(s->values[j].key, key);
        if (dup) {
            problem_at(L->p, L->file, kline, name, key, "duplicate key");
            continue;
        }
        struct rk_cfg_raw_value *rv = &s->values[s->n++];
        rv->key = xstrdup(key);
        rv->line = kline;
        rv->is_scalar = vn && vn->type == YAML_SCALAR_NODE;
        rv->is_quoted = rv->is_scalar && scalar_quoted(vn);
        rv->value = rv->is_scalar && !is_null_node(vn) ? xstrdup(scalar_text(vn)) : NULL;
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
            problem_at(L->p, L->file, line, name, NULL, "duplicate section");
            continue;
        }
        int mapping = vn && vn->type == YAML_MAPPING_NODE;
        if (is_core_section(name)) {
            if (!strcmp(name, "runtime"))
                L->runtime_line = line;
            if (!mapping)
                problem_at(L->p, L->file, line, name, NULL, "expected a mapping, got %s",
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
        problem_at(L->p, L->file, node_line(kn), scalar_text(kn), NULL,
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
        oom();
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
    set_str(&cfg->path, path);
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
        problem_at(p, path, L.operator_type_line ? L.operator_type_line : L.runtime_line, "runtime",
                   "operator_type", "required key is missing");
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

/* ------------------------------------------------------------------------ */
/* Plugin views                                                              */
/* ------------------------------------------------------------------------ */

/* One validated, typed key of a plugin section. */
struct cfg_entry {
    char *name;
    enum rk_cfg_type type;
    uint32_t flags;
    int set; /* 0 = unset (getters return NULL/0) */
    char *s; /* STR/ENUM */
    int64_t i;
    int b;
    double d;
    int line; /* line of the key, 0 if absent from the file */
};

/* The read-only view handed to a plugin's init(). */
struct rk_cfg {
    char *path;
    char *name;
    int line; /* line of the section, 0 if absent */
    struct rk_problems *p;
    struct cfg_entry *e;
    size_t n;
    char **extra_keys; /* keys present in the file but not in the schema */
    int *extra_lines;
    size_t n_extra;
    pthread_mutex_t lock; /* guards warned */
    char **warned;
    size_t n_warned;
};

/* Human name of a schema type, with its article. */
static const char *type_noun(enum rk_cfg_type t)
{
    switch (t) {
    case RK_CFG_INT:
        return "an integer";
    case RK_CFG_BOOL:
        return "a boolean";
    case RK_CFG_DOUBLE:
        return "a number";
    case RK_CFG_STR:
    case RK_CFG_ENUM:
        break;
    }
    return "a string";
}

/* Build "one of: a, b, c" for an enum key into buf. */
static void enum_list(char *buf, size_t size, const char *const *vals)
{
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; vals && vals[i] && used < size; i++) {
        int n = snprintf(buf + used, size - used, "%s%s", i ? ", " : "", vals[i]);
        if (n < 0)
            break;
        used += (size_t)n;
    }
}

/*
 * Convert text into entry e per its schema key. Returns NULL on success or a
 * static-format message written into msg (never containing secret text).
 */
static const char *convert_value(struct cfg_entry *e, const struct rk_cfg_key *k, const char *text,
                                 int quoted, char *msg, size_t size)
{
    int secret = (k->flags & RK_CFGF_SECRET) != 0;
    char got[VALUE_SHOWN_MAX + 64];
    long long iv;
    double dv;
    int bv;
    switch (k->type) {
    case RK_CFG_STR:
        set_str(&e->s, text);
        break;
    case RK_CFG_ENUM: {
        if (!in_list(k->enum_values, text)) {
            char list[512];
            enum_list(list, sizeof list, k->enum_values);
            snprintf(msg, size, "must be one of: %s", list);
            return msg;
        }
        set_str(&e->s, text);
        break;
    }
    case RK_CFG_INT:
        if (quoted || parse_int(text, &iv) != 0)
            goto type_error;
        if ((k->flags & RK_CFGF_POSITIVE) && iv <= 0) {
            snprintf(msg, size, "must be positive");
            return msg;
        }
        e->i = iv;
        break;
    case RK_CFG_BOOL:
        bv = quoted ? -1 : parse_bool(text);
        if (bv < 0)
            goto type_error;
        e->b = bv;
        break;
    case RK_CFG_DOUBLE:
        if (quoted || parse_double(text, &dv) != 0)
            goto type_error;
        if ((k->flags & RK_CFGF_POSITIVE) && dv <= 0) {
            snprintf(msg, size, "must be positive");
            return msg;
        }
        e->d = dv;
        break;
    default:
        snprintf(msg, size, "has an unknown type %d in the plugin schema", (int)k->type);
        return msg;
    }
    e->set = 1;
    return NULL;
type_error:
    describe_value(got, sizeof got, text, 1, quoted, secret);
    snprintf(msg, size, "expected %s, got %s", type_noun(k->type), got);
    return msg;
}

/* Find the raw value named key in section s (NULL if s is NULL or key absent). */
static const struct rk_cfg_raw_value *raw_find(const struct rk_cfg_raw_section *s, const char *key)
{
    for (size_t i = 0; s && i < s->n; i++)
        if (!strcmp(s->values[i].key, key))
            return &s->values[i];
    return NULL;
}

/* Validate and store one schema key k from raw section s into e. */
static void view_key(struct rk_cfg *v, const struct rk_cfg_raw_section *s,
                     const struct rk_cfg_key *k, struct cfg_entry *e)
{
    const struct rk_cfg_raw_value *rv = raw_find(s, k->name);
    const char *text = NULL;
    const char *origin = NULL; /* NULL = the file */
    int quoted = 0, nulled = 0;
    char msg[640];
    e->line = rv ? rv->line : 0;
    int line = rv ? rv->line : v->line;
    if (rv && !rv->is_scalar) {
        problem_at(v->p, v->path, line, v->name, k->name,
                   "expected %s, got a mapping or a sequence", type_noun(k->type));
        return;
    }
    if (rv && rv->value) {
        text = rv->value;
        quoted = rv->is_quoted;
    } else if (rv) {
        nulled = (k->flags & RK_CFGF_NULLABLE) != 0;
    }
    const char *env = k->env_fallback ? getenv(k->env_fallback) : NULL;
    char envwhere[160] = "";
    if ((!text || !*text) && env && *env) {
        text = env;
        quoted = 0;
        snprintf(envwhere, sizeof envwhere, "environment variable %s", k->env_fallback);
        origin = envwhere;
    }
    if (!text && !nulled && k->default_value) {
        text = k->default_value;
        quoted = 0;
        origin = "plugin default";
    }
    if (!text || (!*text && (k->type == RK_CFG_STR || k->type == RK_CFG_ENUM) &&
                  (k->flags & RK_CFGF_REQUIRED))) {
        if (k->flags & RK_CFGF_REQUIRED)
            problem_at(v->p, v->path, line, v->name, k->name, "required key is missing");
        return;
    }
    if (!*text && k->type != RK_CFG_STR && k->type != RK_CFG_ENUM && !origin) {
        problem_at(v->p, v->path, line, v->name, k->name, "expected %s, got \"\"",
                   type_noun(k->type));
        return;
    }
    if (convert_value(e, k, text, quoted, msg, sizeof msg)) {
        if (origin)
            problem_at(v->p, v->path, line, v->name, k->name, "%s: %s", origin, msg);
        else
            problem_at(v->p, v->path, line, v->name, k->name, "%s", msg);
    }
}

/* Validate section name against schema and build the plugin's view (NULL on problems). */
struct rk_cfg *rk_config_plugin_view(const struct rk_config *cfg, const char *name,
                                     const struct rk_cfg_key *schema, struct rk_problems *p)
{
    if (!name)
        name = "";
    size_t before = p ? p->n : 0;
    const struct rk_cfg_raw_section *s = NULL;
    for (size_t i = 0; cfg && i < cfg->n_sections; i++)
        if (!strcmp(cfg->sections[i].name, name))
            s = &cfg->sections[i];
    struct rk_cfg *v = xcalloc(1, sizeof *v);
    v->path = xstrdup(cfg ? cfg->path : "");
    v->name = xstrdup(name);
    v->line = s ? s->line : 0;
    v->p = p;
    pthread_mutex_init(&v->lock, NULL);
    size_t n = 0;
    while (schema && schema[n].name)
        n++;
    v->e = xcalloc(n, sizeof *v->e);
    v->n = n;
    for (size_t i = 0; i < n; i++) {
        v->e[i].name = xstrdup(schema[i].name);
        v->e[i].type = schema[i].type;
        v->e[i].flags = schema[i].flags;
        view_key(v, s, &schema[i], &v->e[i]);
    }
    for (size_t i = 0; s && i < s->n; i++) {
        size_t j;
        for (j = 0; j < n; j++)
            if (!strcmp(schema[j].name, s->values[i].key))
                break;
        if (j == n) {
            problem_at(p, v->path, s->values[i].line, name, s->values[i].key, "unknown key");
            v->extra_keys = xreallocarray(v->extra_keys, v->n_extra + 1, sizeof *v->extra_keys);
            v->extra_lines = xreallocarray(v->extra_lines, v->n_extra + 1, sizeof *v->extra_lines);
            v->extra_keys[v->n_extra] = xstrdup(s->values[i].key);
            v->extra_lines[v->n_extra++] = s->values[i].line;
        }
    }
    if (p && p->n > before) {
        rk_cfg_free(v);
        return NULL;
    }
    return v;
}

/* Free a plugin view. */
void rk_cfg_free(struct rk_cfg *view)
{
    if (!view)
        return;
    for (size_t i = 0; i < view->n; i++) {
        free(view->e[i].name);
        free(view->e[i].s);
    }
    free(view->e);
    for (size_t i = 0; i < view->n_extra; i++)
        free(view->extra_keys[i]);
    free(view->extra_keys);
    free(view->extra_lines);
    for (size_t i = 0; i < view->n_warned; i++)
        free(view->warned[i]);
    free(view->warned);
    pthread_mutex_destroy(&view->lock);
    free(view->path);
    free(view->name);
    free(view);
}

/* Warn once per key about a plugin asking for a key it did not declare or with the wrong type. */
static void warn_once(const struct rk_cfg *view, const char *key, const char *what)
{
    struct rk_cfg *v = (struct rk_cfg *)view;
    pthread_mutex_lock(&v->lock);
    int seen = 0;
    for (size_t i = 0; i < v->n_warned; i++)
        seen |= !strcmp(v->warned[i], key);
    if (!seen) {
        v->warned = xreallocarray(v->warned, v->n_warned + 1, sizeof *v->warned);
        v->warned[v->n_warned++] = xstrdup(key);
    }
    pthread_mutex_unlock(&v->lock);
    if (!seen)
        rk_warn("config: plugin read %s.%s, %s (plugin bug)", v->name, key, what);
}

/* Entry for key with one of the given types, or NULL (after a one-time warning). */
static const struct cfg_entry *lookup(const struct rk_cfg *view, const char *key,
                                      enum rk_cfg_type t1, enum rk_cfg_type t2)
{
    if (!view || !key)
        return NULL;
    for (size_t i = 0; i < view->n; i++) {
        if (strcmp(view->e[i].name, key))
            continue;
        if (view->e[i].type != t1 && view->e[i].type != t2) {
            warn_once(view, key, "a key of another type");
            return NULL;
        }
        return &view->e[i];
    }
    warn_once(view, key, "a key missing from its schema");
    return NULL;
}

/* String or enum value, NULL if unset or not declared. */
const char *rk_cfg_get_str(const struct rk_cfg *view, const char *key)
{
    const struct cfg_entry *e = lookup(view, key, RK_CFG_STR, RK_CFG_ENUM);
    return e && e->set ? e->s : NULL;
}

/* Integer value, 0 if unset or not declared. */
int64_t rk_cfg_get_int(const struct rk_cfg *view, const char *key)
{
    const struct cfg_entry *e = lookup(view, key, RK_CFG_INT, RK_CFG_INT);
    return e && e->set ? e->i : 0;
}

/* Boolean value, 0 if unset or not declared. */
int rk_cfg_get_bool(const struct rk_cfg *view, const char *key)
{
    const struct cfg_entry *e = lookup(view, key, RK_CFG_BOOL, RK_CFG_BOOL);
    return e && e->set ? e->b : 0;
}

/* Number value (integers widen), 0 if unset or not declared. */
double rk_cfg_get_double(const struct rk_cfg *view, const char *key)
{
    const struct cfg_entry *e = lookup(view, key, RK_CFG_DOUBLE, RK_CFG_INT);
    if (!e || !e->set)
        return 0;
    return e->type == RK_CFG_INT ? (double)e->i : e->d;
}

/* Add "file:line: section.key: msg" at the key's line, else the section's. */
void rk_cfg_problem(const struct rk_cfg *view, const char *key, const char *fmt, ...)
{
    if (!view)
        return;
    int line = view->line;
    for (size_t i = 0; key && i < view->n; i++)
        if (!strcmp(view->e[i].name, key) && view->e[i].line)
            line = view->e[i].line;
    for (size_t i = 0; key && i < view->n_extra; i++)
        if (!strcmp(view->extra_keys[i], key))
            line = view->extra_lines[i];
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    problem_at(view->p, view->path, line, view->name, key, "%s", msg);
}

/* ------------------------------------------------------------------------ */
/* Dump                                                                      */
/* ------------------------------------------------------------------------ */

/* Emit "section.key: value" for a string, redacted when secret. */
static void emit_str(void (*emit)(const char *, void *), void *ctx, const char *sect,
                     const char *key, const char *val, int secret)
{
    char line[1024];
    if (!val)
        snprintf(line, sizeof line, "%s.%s: null", sect, key);
    else if (!*val)
        snprintf(line, sizeof line, "%s.%s: \"\"", sect, key);
    else
        snprintf(line, sizeof line, "%s.%s: %s", sect, key, secret ? "********" : val);
    emit(line, ctx);
}

/* Emit one "section.key: value" line per effective setting, secrets redacted. */
void rk_config_dump(const struct rk_config *cfg, const struct rk_cfg *plugin_view,
                    const struct rk_cfg_key *schema, void (*emit)(const char *line, void *ctx),
                    void *ctx)
{
    char line[1024];
    (void)schema; /* the view keeps its own copy of the schema's names, types and flags */
    if (!emit)
        return;
    for (size_t i = 0; cfg && i < N_CORE_KEYS; i++) {
        const struct core_key *k = &core_keys[i];
        const void *f = cfield(cfg, k);
        switch (k->type) {
        case CT_STR:
        case CT_SIZE:
        case CT_LEVEL:
        case CT_LOGFMT:
        case CT_OPTYPE:
            emit_str(emit, ctx, k->section, k->key, *(char *const *)f,
                     (k->flags & CKF_SECRET) != 0);
            continue;
        case CT_INT:
            snprintf(line, sizeof line, "%s.%s: %d", k->section, k->key, *(const int *)f);
            break;
        case CT_I64:
            snprintf(line, sizeof line, "%s.%s: %lld", k->section, k->key,
                     (long long)*(const int64_t *)f);
            break;
        case CT_BOOL:
            snprintf(line, sizeof line, "%s.%s: %s", k->section, k->key,
                     *(const int *)f ? "true" : "false");
            break;
        case CT_DOUBLE:
            snprintf(line, sizeof line, "%s.%s: %g", k->section, k->key, *(const double *)f);
            break;
        case CT_LIST: {
            char *const *list = *(char **const *)f;
            size_t used = (size_t)snprintf(line, sizeof line, "%s.%s: [", k->section, k->key);
            for (size_t j = 0; list && list[j] && used < sizeof line; j++)
                used += (size_t)snprintf(line + used, sizeof line - used, "%s\"%s\"", j ? ", " : "",
                                         list[j]);
            if (used < sizeof line)
                snprintf(line + used, sizeof line - used, "]");
            break;
        }
        case CT_ANY:
            continue;
        }
        emit(line, ctx);
    }
    for (size_t i = 0; plugin_view && i < plugin_view->n; i++) {
        const struct cfg_entry *e = &plugin_view->e[i];
        int secret = (e->flags & RK_CFGF_SECRET) != 0;
        const char *sect = plugin_view->name;
        if (!e->set) {
            snprintf(line, sizeof line, "%s.%s: null", sect, e->name);
        } else if (e->type == RK_CFG_STR || e->type == RK_CFG_ENUM) {
            emit_str(emit, ctx, sect, e->name, e->s, secret);
            continue;
        } else if (secret) {
            snprintf(line, sizeof line, "%s.%s: ********", sect, e->name);
        } else if (e->type == RK_CFG_INT) {
            snprintf(line, sizeof line, "%s.%s: %lld", sect, e->name, (long long)e->i);
        } else if (e->type == RK_CFG_BOOL) {
            snprintf(line, sizeof line, "%s.%s: %s", sect, e->name, e->b ? "true" : "false");
        } else {
            snprintf(line, sizeof line, "%s.%s: %g", sect, e->name, e->d);
        }
        emit(line, ctx);
    }
}
