/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Plugin configuration sections: a raw section kept by config.c is validated
 * against the rk_cfg_key schema the plugin declares and turned into the
 * read-only struct rk_cfg view handed to the plugin's init(), with the
 * host-table getters (rk_cfg_get_*) and rk_cfg_problem over that view.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config_internal.h"
#include "obs/log.h"

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
    char got[RK_CONFIG_VALUE_SHOWN_MAX + 64];
    long long iv;
    double dv;
    int bv;
    switch (k->type) {
    case RK_CFG_STR:
        rk_config_set_str(&e->s, text);
        break;
    case RK_CFG_ENUM: {
        if (!rk_config_in_list(k->enum_values, text)) {
            char list[512];
            enum_list(list, sizeof list, k->enum_values);
            snprintf(msg, size, "must be one of: %s", list);
            return msg;
        }
        rk_config_set_str(&e->s, text);
        break;
    }
    case RK_CFG_INT:
        if (quoted || rk_config_parse_int(text, &iv) != 0)
            goto type_error;
        if ((k->flags & RK_CFGF_POSITIVE) && iv <= 0) {
            snprintf(msg, size, "must be positive");
            return msg;
        }
        e->i = iv;
        break;
    case RK_CFG_BOOL:
        bv = quoted ? -1 : rk_config_parse_bool(text);
        if (bv < 0)
            goto type_error;
        e->b = bv;
        break;
    case RK_CFG_DOUBLE:
        if (quoted || rk_config_parse_double(text, &dv) != 0)
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
    rk_config_describe_value(got, sizeof got, text, 1, quoted, secret);
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
        rk_config_problem_at(v->p, v->path, line, v->name, k->name,
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
            rk_config_problem_at(v->p, v->path, line, v->name, k->name, "required key is missing");
        return;
    }
    if (!*text && k->type != RK_CFG_STR && k->type != RK_CFG_ENUM && !origin) {
        rk_config_problem_at(v->p, v->path, line, v->name, k->name, "expected %s, got \"\"",
                             type_noun(k->type));
        return;
    }
    if (convert_value(e, k, text, quoted, msg, sizeof msg)) {
        if (origin)
            rk_config_problem_at(v->p, v->path, line, v->name, k->name, "%s: %s", origin, msg);
        else
            rk_config_problem_at(v->p, v->path, line, v->name, k->name, "%s", msg);
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
    struct rk_cfg *v = rk_config_calloc(1, sizeof *v);
    v->path = rk_config_strdup(cfg ? cfg->path : "");
    v->name = rk_config_strdup(name);
    v->line = s ? s->line : 0;
    v->p = p;
    pthread_mutex_init(&v->lock, NULL);
    size_t n = 0;
    while (schema && schema[n].name)
        n++;
    v->e = rk_config_calloc(n, sizeof *v->e);
    v->n = n;
    for (size_t i = 0; i < n; i++) {
        v->e[i].name = rk_config_strdup(schema[i].name);
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
            rk_config_problem_at(p, v->path, s->values[i].line, name, s->values[i].key,
                                 "unknown key");
            v->extra_keys =
                rk_config_reallocarray(v->extra_keys, v->n_extra + 1, sizeof *v->extra_keys);
            v->extra_lines =
                rk_config_reallocarray(v->extra_lines, v->n_extra + 1, sizeof *v->extra_lines);
            v->extra_keys[v->n_extra] = rk_config_strdup(s->values[i].key);
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
        v->warned = rk_config_reallocarray(v->warned, v->n_warned + 1, sizeof *v->warned);
        v->warned[v->n_warned++] = rk_config_strdup(key);
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
    rk_config_problem_at(view->p, view->path, line, view->name, key, "%s", msg);
}
