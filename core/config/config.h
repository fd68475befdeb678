/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The YAML configuration (libyaml). Core sections are parsed into struct
 * rk_config with defaults; every other top-level section is kept raw so the
 * loaded plugin's declared schema can validate its own section. Problems are
 * collected as "file:line: key: problem" lines (never containing secret values).
 */
#ifndef RK_CONFIG_H
#define RK_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "rock-admin/operator.h"

/** Collected configuration problems. */
struct rk_problems {
    char **lines;
    size_t n;
};
/** Add a formatted problem line. */
void rk_problems_add(struct rk_problems *p, const char *fmt, ...) RK_PRINTF(2, 3);
/** Free all lines. */
void rk_problems_free(struct rk_problems *p);

/** One scalar of a raw (plugin) section. */
struct rk_cfg_raw_value {
    char *key;
    char *value;   /* scalar text; NULL for YAML null or a non-scalar */
    int is_scalar; /* 0 for mappings/sequences (always a type error) */
    int is_quoted; /* the scalar was quoted (a string, never a number/bool) */
    int line;      /* 1-based line of the key */
};

/** A top-level section the core does not know (a plugin section). */
struct rk_cfg_raw_section {
    char *name;
    int line;
    struct rk_cfg_raw_value *values;
    size_t n;
};

/** Parsed configuration with defaults applied. Strings are never NULL. */
struct rk_config {
    char *path; /* file it came from ("" for embedded defaults) */
    struct {
        char *host;               /* default "0.0.0.0" */
        int port;                 /* default 8080 */
        int max_connections;      /* default 4096 */
        int per_ip_connections;   /* default -1 = max_connections/4; 0 = unlimited */
        int connection_timeout_s; /* idle timeout, default 60, never 0 */
        int64_t max_body_bytes;   /* JSON bodies, default 64 MiB */
        int max_header_bytes;     /* per-connection header memory, default 16384 */
        int64_t max_upload_bytes; /* /upload, default 1 GiB; 0 = unlimited */
        int64_t max_output_bytes; /* command output kept per request, default 16 MiB */
        int64_t max_read_bytes;   /* /read_file content, default 64 MiB */
        int drain_timeout_s;      /* SIGTERM drain deadline, default 30 */
        int thread_stack_kib;     /* deprecated and ignored (no thread per connection) */
        int thread_stack_kib_set; /* the file set thread_stack_kib: warn at start-up */
        /* the event engine (docs/architecture.md "Concurrency") */
        int event_threads; /* libmicrohttpd event loops, default online CPUs (1..64) */
        int workers;       /* worker pool threads, default max(16, 8 x CPUs) */
        int worker_queue;  /* jobs waiting for a worker, default 4096 */
        /* limits against hostile and careless clients */
        int64_t max_buffered_bytes; /* global budget for buffered bodies/responses, 512 MiB */
        int64_t max_spool_bytes;    /* total /upload spool, default 1 GiB; 0 = unlimited */
        int header_timeout_s;       /* request line + headers deadline, default 15 */
        int min_body_rate;          /* bytes/s a body must average, default 1024; 0 = off */
        int reserved_connections;   /* slots kept for /livez /readyz /metrics, default 4 */
        /* Securing rock-admin (auth.c, tls.c, cors.c) */
        char *auth_tokens_file; /* "" = authentication off (default) */
        int metrics_public;     /* /metrics answers without a token, default 0 */
        char *tls_cert_file;    /* PEM chain; "" = plain HTTP (default) */
        char *tls_key_file;     /* PEM private key */
        char **cors_origins;    /* NULL-terminated list; empty = no CORS headers */
    } server;
    struct {
        char *operator_type;            /* required */
        char *plugin_dir;               /* default PKGLIBDIR */
        int stop_as_delete;             /* default 0 */
        int default_auto_clear_minutes; /* default 30 */
        double max_cpus;                /* default 16 */
        char *max_memory;               /* default "64g" */
        char *max_disk;                 /* default "256g" */
        int sweep_interval_s;           /* idle sweep, default 30; 0 disables */
        int session_reservation_ttl_s;  /* default 120 */
        int start_wait_s;               /* /start waits this long, default 85 */
        int command_timeout_margin_s;   /* grace after a command timeout, default 30 */
        int reconcile_interval_ms;      /* reconciler pass period, default 1000; 0 = off */
        /* the create queue (domain/create_queue.c) */
        int create_concurrency;   /* backend creates at once, store-wide; default 64 */
        int create_rate;          /* backend creates started per second; 0 = no limit */
        int64_t create_queue_max; /* queued + running creates, store-wide; default 100000 */
        /* /archive access */
        char *archive_keys; /* X-Key allow-list of /archive, comma-separated; NULL = any */
    } runtime;
    struct {
        char *host; /* "" = in-process store */
        int port;   /* default 6379 */
        char *password;
        int db;
        int connect_timeout_ms; /* default 1000 */
        int timeout_ms;         /* default 2000 */
        int pool_size;          /* default 64 */
        char *key_prefix;       /* default "rock:" */
        /* high availability */
        char **sentinels;             /* NULL-terminated "host:port" list (empty = fixed host) */
        char *master_name;            /* sentinel master name */
        char *username;               /* ACL user ("" = default user) */
        char *password_file;          /* password from this file's first line */
        char *sentinel_username;      /* AUTH for sentinels */
        char *sentinel_password;      /* secret */
        char *sentinel_password_file; /* sentinel password from a file */
        int min_replicas_ack;         /* WAIT for N replicas after writes; 0 = off */
        int wait_timeout_ms;          /* bound of each WAIT, default 1000 */
        int64_t deleted_retention_s;  /* keep deleted records, default 7 days; 0 = forever */
    } redis;
    struct {
        int enabled;
    } scheduler;
    struct {
        int timeout_s;             /* upstream app timeout, default 120 */
        int connect_timeout_s;     /* default 5 */
        int endpoint_cache_ttl_ms; /* proxy endpoint cache TTL, default 5000 */
        int relay_threads; /* WebSocket/port-forward relay loops; 0 (default) = one per CPU */
    } proxy;
    struct {
        char *level;  /* error|warning|info|debug, default info */
        char *format; /* text|json, default text */
    } log;
    struct rk_cfg_raw_section *sections; /* unknown top-level sections, raw */
    size_t n_sections;
};

/** Config with every default and no file (the embedded defaults). */
struct rk_config *rk_config_defaults(void);

/**
 * Load and validate the core sections of a YAML file. Unknown keys in core
 * sections, wrong types, bad values and a missing runtime.operator_type are
 * problems. Returns NULL only on I/O or YAML syntax errors (also reported as
 * a problem); otherwise a config, possibly with problems in p.
 */
struct rk_config *rk_config_load(const char *path, struct rk_problems *p);

/** Free a config. */
void rk_config_free(struct rk_config *cfg);

/**
 * Validate the section `name` against a plugin schema and build the read-only
 * view handed to the plugin. A missing section validates as empty. Problems:
 * unknown key, wrong type, missing required key, bad enum value, non-positive
 * value for RK_CFGF_POSITIVE. Empty values of keys with env_fallback are read
 * from that environment variable. Returns NULL if there were problems.
 * The view keeps a pointer to p so rk_cfg_problem (called by the plugin's
 * init) can add lines; p must outlive the plugin's init().
 */
struct rk_cfg *rk_config_plugin_view(const struct rk_config *cfg, const char *name,
                                     const struct rk_cfg_key *schema, struct rk_problems *p);

/** Free a plugin view. */
void rk_cfg_free(struct rk_cfg *view);

/** Host-table getters over a plugin view (see struct rk_host). */
const char *rk_cfg_get_str(const struct rk_cfg *view, const char *key);
int64_t rk_cfg_get_int(const struct rk_cfg *view, const char *key);
int rk_cfg_get_bool(const struct rk_cfg *view, const char *key);
double rk_cfg_get_double(const struct rk_cfg *view, const char *key);
/** Record a plugin-reported problem as "file:line: section.key: problem". */
void rk_cfg_problem(const struct rk_cfg *view, const char *key, const char *fmt, ...)
    RK_PRINTF(3, 4);

/** Print the effective config (secrets redacted) as YAML-ish lines to fp-like callback. */
void rk_config_dump(const struct rk_config *cfg, const struct rk_cfg *plugin_view,
                    const struct rk_cfg_key *schema, void (*emit)(const char *line, void *ctx),
                    void *ctx);

#endif /* RK_CONFIG_H */
