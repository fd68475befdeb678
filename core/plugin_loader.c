/* SPDX-License-Identifier: Apache-2.0 */
/* The only file that includes ltdl.h. */
#include "plugin_loader.h"

#include <dirent.h>
#include <ltdl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "config.h"
#include "host.h"
#include "log.h"
#include "util.h"

/* Size of the ABI 1.0 ops table up to the last mandatory entry point. */
#define OPS_MIN_SIZE (offsetof(struct rk_operator_ops, destroy) + sizeof(void *))

/* Capability bit <-> entry point pairs checked at load (bit set iff op non-NULL). */
struct cap_op {
    uint64_t cap;
    const char *op_name;
    size_t offset;
};
static const struct cap_op cap_ops[] = {
    {RK_CAP_EXEC, "exec", offsetof(struct rk_operator_ops, exec)},
    {RK_CAP_FILE_READ, "file_read", offsetof(struct rk_operator_ops, file_read)},
    {RK_CAP_FILE_STAT, "file_stat", offsetof(struct rk_operator_ops, file_stat)},
    {RK_CAP_FILE_WRITE, "file_write", offsetof(struct rk_operator_ops, file_write)},
    {RK_CAP_SESSION, "session_open", offsetof(struct rk_operator_ops, session_open)},
    {RK_CAP_SESSION, "session_run", offsetof(struct rk_operator_ops, session_run)},
    {RK_CAP_SESSION, "session_close", offsetof(struct rk_operator_ops, session_close)},
    {RK_CAP_STOP, "stop", offsetof(struct rk_operator_ops, stop)},
    {RK_CAP_RESTART, "restart", offsetof(struct rk_operator_ops, restart)},
    {RK_CAP_ARCHIVE, "archive", offsetof(struct rk_operator_ops, archive)},
    {RK_CAP_RESTORE, "restore", offsetof(struct rk_operator_ops, restore)},
    {RK_CAP_COMMIT, "commit", offsetof(struct rk_operator_ops, commit)},
    {RK_CAP_STATISTICS, "statistics", offsetof(struct rk_operator_ops, statistics)},
    {RK_CAP_CONFIGURED, "configured_caps", offsetof(struct rk_operator_ops, configured_caps)},
    {RK_CAP_SNAPSHOT, "snapshot_create", offsetof(struct rk_operator_ops, snapshot_create)},
    {RK_CAP_SNAPSHOT, "snapshot_get", offsetof(struct rk_operator_ops, snapshot_get)},
    {RK_CAP_SNAPSHOT, "snapshot_delete", offsetof(struct rk_operator_ops, snapshot_delete)},
    {RK_CAP_SNAPSHOT, "restore_snapshot", offsetof(struct rk_operator_ops, restore_snapshot)},
    {RK_CAP_RENEW, "renew", offsetof(struct rk_operator_ops, renew)},
};

/* Read a function-pointer slot of the ops table if the plugin's table has it. */
static void *ops_slot(const struct rk_operator_ops *ops, size_t offset)
{
    if (offset + sizeof(void *) > ops->struct_size)
        return NULL;
    void *p;
    memcpy(&p, (const char *)ops + offset, sizeof p);
    return p;
}

/* [a-z0-9_]+ */
static int valid_name(const char *s)
{
    if (!s || !*s)
        return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '_'))
            return 0;
    return 1;
}

int rk_plugin_check_descriptor(const struct rk_operator *d, const char *stem, char *why,
                               size_t whylen)
{
#define REFUSE(...)                                                                                \
    do {                                                                                           \
        snprintf(why, whylen, __VA_ARGS__);                                                        \
        return -1;                                                                                 \
    } while (0)
    if (d->magic != RK_OPERATOR_MAGIC)
        REFUSE("magic check failed: descriptor has 0x%08x, expected 0x%08x (not a rock-admin "
               "operator plugin)",
               (unsigned)d->magic, (unsigned)RK_OPERATOR_MAGIC);
    if (d->abi_major != RK_OPERATOR_ABI_MAJOR)
        REFUSE("ABI major check failed: plugin built against operator ABI %u.%u, daemon "
               "provides %d.%d: rebuild the plugin against the installed SDK",
               d->abi_major, d->abi_minor, RK_OPERATOR_ABI_MAJOR, RK_OPERATOR_ABI_MINOR);
    if (d->abi_minor > RK_OPERATOR_ABI_MINOR)
        REFUSE("ABI minor check failed: plugin needs operator ABI %u.%u, daemon provides "
               "only %d.%d: upgrade rock-admin or rebuild the plugin",
               d->abi_major, d->abi_minor, RK_OPERATOR_ABI_MAJOR, RK_OPERATOR_ABI_MINOR);
    if (d->struct_size < sizeof(struct rk_operator))
        REFUSE("descriptor size check failed: plugin descriptor is %u bytes, ABI %d.%d needs "
               "at least %zu",
               (unsigned)d->struct_size, RK_OPERATOR_ABI_MAJOR, RK_OPERATOR_ABI_MINOR,
               sizeof(struct rk_operator));
    if (d->abi_flags != RK_ABI_FLAGS)
        REFUSE("layout flags check failed: plugin has 0x%x, daemon has 0x%x (built for another "
               "architecture)",
               (unsigned)d->abi_flags, (unsigned)RK_ABI_FLAGS);
    if (!valid_name(d->name))
        REFUSE("name check failed: \"%s\" is not [a-z0-9_]+", d->name ? d->name : "(null)");
    if (stem && strcmp(d->name, stem) != 0)
        REFUSE("name check failed: descriptor name is \"%s\" but the file is \"%s.so\"", d->name,
               stem);
    if (!d->backend_tag || !*d->backend_tag)
        REFUSE("backend tag check failed: backend_tag is empty");
    if (!d->display_name || !*d->display_name)
        REFUSE("display name check failed: display_name is empty");
    if (!(d->flags & RK_OPF_THREADSAFE))
        REFUSE("flags check failed: RK_OPF_THREADSAFE is required by ABI %d",
               RK_OPERATOR_ABI_MAJOR);
    /* A plugin may only use the bits of the ABI minor it was built with. */
    uint64_t known_caps = d->abi_minor >= 1 ? RK_CAP_ALL_1_1 : RK_CAP_ALL_1_0;
    if (d->caps & ~known_caps)
        REFUSE("capability check failed: unknown capability bits 0x%llx",
               (unsigned long long)(d->caps & ~known_caps));
    const struct rk_operator_ops *ops = d->ops;
    if (!ops)
        REFUSE("entry point check failed: ops table is NULL");
    if (ops->struct_size < OPS_MIN_SIZE)
        REFUSE("ops size check failed: ops table is %u bytes, at least %zu needed",
               (unsigned)ops->struct_size, (size_t)OPS_MIN_SIZE);
    if (!ops->init || !ops->fini || !ops->create || !ops->status || !ops->destroy)
        REFUSE("entry point check failed: init, fini, create, status and destroy are mandatory");
    for (size_t i = 0; i < sizeof cap_ops / sizeof cap_ops[0]; i++) {
        int has_cap = (d->caps & cap_ops[i].cap) != 0;
        int has_op = ops_slot(ops, cap_ops[i].offset) != NULL;
        if (has_cap && !has_op)
            REFUSE("capability check failed: capability 0x%llx is declared but entry point %s "
                   "is NULL",
                   (unsigned long long)cap_ops[i].cap, cap_ops[i].op_name);
        if (!has_cap && has_op)
            REFUSE("capability check failed: entry point %s is set but capability 0x%llx is "
                   "not declared",
                   cap_ops[i].op_name, (unsigned long long)cap_ops[i].cap);
    }
    uint64_t proxy_caps = RK_CAP_PROXY_HTTP | RK_CAP_PROXY_WS | RK_CAP_PORT_FORWARD;
    int has_proxy = ops_slot(ops, offsetof(struct rk_operator_ops, proxy_target)) != NULL;
    if ((d->caps & proxy_caps) && !has_proxy)
        REFUSE("capability check failed: a proxy capability is declared but entry point "
               "proxy_target is NULL");
    if (!(d->caps & proxy_caps) && has_proxy)
        REFUSE("capability check failed: entry point proxy_target is set but no proxy "
               "capability is declared");
    if ((d->caps & RK_CAP_SESSION_INTERACTIVE) && !(d->caps & RK_CAP_SESSION))
        REFUSE("capability check failed: RK_CAP_SESSION_INTERACTIVE needs RK_CAP_SESSION");
    for (const struct rk_cfg_key *k = d->config; k && k->name; k++) {
        if (!valid_name(k->name))
            REFUSE("config schema check failed: key \"%s\" is not [a-z0-9_]+", k->name);
        if (k->type < RK_CFG_STR || k->type > RK_CFG_ENUM)
            REFUSE("config schema check failed: key %s has unknown type %d", k->name, (int)k->type);
        if (k->type == RK_CFG_ENUM && (!k->enum_values || !k->enum_values[0]))
            REFUSE("config schema check failed: enum key %s has no values", k->name);
        for (const struct rk_cfg_key *k2 = d->config; k2 != k; k2++)
            if (strcmp(k2->name, k->name) == 0)
                REFUSE("config schema check failed: key %s is declared twice", k->name);
    }
    return 0;
#undef REFUSE
}

/* Comma-separated stems of *.so files in dir (or "none"). */
static void list_plugins(const char *dir, char *out, size_t outlen)
{
    out[0] = '\0';
    DIR *dh = opendir(dir);
    size_t used = 0;
    if (dh) {
        struct dirent *e;
        while ((e = readdir(dh)) != NULL) {
            size_t n = strlen(e->d_name);
            if (n <= 3 || strcmp(e->d_name + n - 3, ".so") != 0)
                continue;
            int w = snprintf(out + used, outlen - used, "%s%.*s", used ? ", " : "", (int)(n - 3),
                             e->d_name);
            if (w < 0 || (size_t)w >= outlen - used)
                break;
            used += (size_t)w;
        }
        closedir(dh);
    }
    if (!used)
        snprintf(out, outlen, "none");
}

static int ltdl_ready;

struct rk_plugin *rk_plugin_load(const char *dir, const char *name, struct rk_problems *p)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.so", dir, name);
    struct stat sb;
    if (stat(path, &sb) != 0) {
        char found[1024];
        list_plugins(dir, found, sizeof found);
        rk_problems_add(p,
                        "runtime.operator_type: unknown operator type \"%s\": no %s; plugins "
                        "found in %s: %s",
                        name, path, dir, found);
        return NULL;
    }
    if (!ltdl_ready) {
        if (lt_dlinit() != 0) {
            rk_problems_add(p, "%s: cannot initialise libltdl: %s", path, lt_dlerror());
            return NULL;
        }
        ltdl_ready = 1;
    }
    /* Resident (never unloaded: dlclose would skip atexit handlers), local
     * symbols, immediate binding is enforced at link time (-z now). */
    lt_dladvise advise;
    lt_dladvise_init(&advise);
    lt_dladvise_resident(&advise);
    lt_dladvise_local(&advise);
    lt_dlhandle h = lt_dlopenadvise(path, advise);
    lt_dladvise_destroy(&advise);
    if (!h) {
        rk_problems_add(p, "%s: plugin refused: cannot load: %s", path, lt_dlerror());
        return NULL;
    }
    const struct rk_operator *desc = lt_dlsym(h, RK_OPERATOR_SYMBOL);
    if (!desc) {
        rk_problems_add(p,
                        "%s: plugin refused: descriptor symbol check failed: no exported "
                        "symbol \"%s\" (declare it with RK_OPERATOR_EXPORT)",
                        path, RK_OPERATOR_SYMBOL);
        lt_dlclose(h);
        return NULL;
    }
    char why[512];
    if (rk_plugin_check_descriptor(desc, name, why, sizeof why) != 0) {
        rk_problems_add(p, "%s: plugin refused: %s", path, why);
        lt_dlclose(h);
        return NULL;
    }
    struct rk_plugin *pl = calloc(1, sizeof *pl);
    if (!pl)
        abort();
    pl->desc = desc;
    size_t n = desc->ops->struct_size < sizeof pl->ops ? desc->ops->struct_size : sizeof pl->ops;
    memcpy(&pl->ops, desc->ops, n); /* slots past the plugin's size stay NULL */
    pl->path = rk_xstrdup(path);
    pl->handle = h;
    return pl;
}

int rk_plugin_init(struct rk_plugin *pl, const struct rk_config *cfg, struct rk_problems *p)
{
    size_t before = p->n;
    pl->cfg_view = rk_config_plugin_view(cfg, pl->desc->name, pl->desc->config, p);
    if (!pl->cfg_view || p->n > before)
        return -1;
    rk_host_set_plugin_name(pl->desc->name);
    void *inst = NULL;
    rk_status st = pl->ops.init(&rk_host_table, pl->cfg_view, &inst);
    if (st != RK_OK || p->n > before) {
        if (p->n == before)
            rk_problems_add(p, "%s: plugin init failed (%s)", pl->path, rk_status_name(st));
        if (st == RK_OK)
            pl->ops.fini(inst);
        return -1;
    }
    pl->inst = inst;
    pl->initialised = 1;
    /* ABI 1.1: the configured instance may narrow its declared caps. */
    pl->caps = pl->desc->caps;
    if ((pl->caps & RK_CAP_CONFIGURED) && pl->ops.configured_caps)
        pl->caps &= pl->ops.configured_caps(inst) | RK_CAP_CONFIGURED;
    return 0;
}

void rk_plugin_unload(struct rk_plugin *pl)
{
    if (!pl)
        return;
    if (pl->initialised)
        pl->ops.fini(pl->inst);
    rk_cfg_free(pl->cfg_view);
    /* The module is resident: lt_dlclose only drops our reference. */
    lt_dlclose((lt_dlhandle)pl->handle);
    free(pl->path);
    free(pl);
}

const char *rk_plugin_unsupported(const struct rk_plugin *pl, uint64_t cap, const char *opname,
                                  char *buf, size_t buflen)
{
    for (const struct rk_cap_msg *m = pl->desc->unsupported; m && m->cap; m++)
        if ((m->cap & cap) && m->message)
            return m->message;
    snprintf(buf, buflen, "%s backend does not support %s", pl->desc->display_name, opname);
    return buf;
}
