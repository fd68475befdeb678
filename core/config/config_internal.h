/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Private to the configuration files (config.c, config_common.c,
 * config_plugin.c, config_dump.c): the OOM-aborting allocators, scalar parsing
 * and problem lines they share, the core key table, and the plugin view
 * layout. Everything else includes config.h only.
 */
#ifndef RK_CONFIG_INTERNAL_H
#define RK_CONFIG_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "config/config.h"

/* Longest piece of a user value quoted in a problem line. */
#define RK_CONFIG_VALUE_SHOWN_MAX 80

/* ---- helpers (config_common.c) ------------------------------------------ */

/* Abort on allocation failure: configuration strings are tiny. */
void rk_config_oom(void);
/* strdup that aborts on OOM (NULL copies as ""). */
char *rk_config_strdup(const char *s);
/* calloc that aborts on OOM. */
void *rk_config_calloc(size_t n, size_t size);
/* realloc of an array that aborts on OOM or overflow. */
void *rk_config_reallocarray(void *ptr, size_t n, size_t size);
/* Replace *dst with a copy of src. */
void rk_config_set_str(char **dst, const char *src);
/* Parse a decimal integer with an optional sign; 0 on success, -1 if invalid. */
int rk_config_parse_int(const char *s, long long *out);
/* Parse a YAML-style boolean (true/false/yes/no/on/off); 1, 0 or -1 if invalid. */
int rk_config_parse_bool(const char *s);
/* Parse a finite decimal number (no hex, inf or nan); 0 on success, -1 if invalid. */
int rk_config_parse_double(const char *s, double *out);
/* True if s is one of the NULL-terminated list. */
int rk_config_in_list(const char *const *list, const char *s);
/* Add "file:line: sect.key: msg" ("file: ..." when line is 0; no ".key" when key is NULL). */
void rk_config_problem_at(struct rk_problems *p, const char *file, int line, const char *sect,
                          const char *key, const char *fmt, ...) RK_PRINTF(6, 7);
/*
 * Describe an offending value for a type error: `"abc"`, `the quoted string "abc"`,
 * `a mapping or a sequence`, or for secrets only its kind (`a string`).
 */
void rk_config_describe_value(char *buf, size_t size, const char *text, int is_scalar, int quoted,
                              int secret);

/* ---- core key table (config.c) ------------------------------------------ */

/* Value kinds of core keys. */
enum core_type {
    CT_STR,    /* char *, any scalar */
    CT_INT,    /* int in [min, max] */
    CT_I64,    /* int64_t in [min, max] */
    CT_BOOL,   /* int 0/1 */
    CT_DOUBLE, /* double > 0 */
    CT_SIZE,   /* char *, a size like "64g" */
    CT_LEVEL,  /* char *, a log level */
    CT_LOGFMT, /* char *, a log format: text|json */
    CT_OPTYPE, /* char *, [a-z0-9_]+ */
    CT_ANY,    /* accepted and ignored (ROCK compatibility) */
    CT_LIST,   /* char **, NULL-terminated, from a sequence of strings */
};

/* Core key flags. */
#define CKF_SECRET 0x1u
#define CKF_DEPRECATED 0x2u /* accepted and ignored; the start-up warns */

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

/* Every key of every core section, grouped by section in dump order. */
extern const struct core_key rk_core_keys[];
/* Number of entries of rk_core_keys. */
extern const size_t rk_n_core_keys;

/* ---- plugin view (config_plugin.c) -------------------------------------- */

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

#endif /* RK_CONFIG_INTERNAL_H */
