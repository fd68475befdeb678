/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The effective configuration dump (rock-admin -t): one "section.key: value"
 * line per core key and per key of the plugin's view, secrets redacted.
 */
#include <stdio.h>

#include "config/config_internal.h"

/* Const pointer to the field of cfg described by k. */
static const void *core_field(const struct rk_config *cfg, const struct core_key *k)
{
    return (const char *)cfg + k->off;
}

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
    for (size_t i = 0; cfg && i < rk_n_core_keys; i++) {
        const struct core_key *k = &rk_core_keys[i];
        const void *f = core_field(cfg, k);
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
