/* SPDX-License-Identifier: Apache-2.0 */
/* The only file that includes ltdl.h (and dlfcn.h). */
#include "host/plugin_loader.h"

#include <dirent.h>
#include <dlfcn.h>
#include <ltdl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "config/config.h"
#include "host/host.h"
#include "obs/log.h"
#include "base/util.h"

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
    {RK_CAP_LIST, "list", offsetof(struct rk_operator_ops, list)},
    {RK_CAP_CONFIGURED, "configured_caps", offsetof(struct rk_operator_ops, configured_caps)},
    {RK_CAP_SNAPSHOT, "snapshot_create", offsetof(struct rk_operator_ops, snapshot_create)},
    {RK_CAP_SNAPSHOT, "snapshot_get", offsetof(struct rk_operator_ops, snapshot_get)},
    {RK_CAP_SNAPSHOT, "snapshot_delete", offsetof(struct rk_operator_ops, snapshot_delete)},
    {RK_CAP_SNAPSHOT, "restore_snapshot", offsetof(struct rk_operator_ops, restore_snapshot)},
    {RK_CAP_RENEW, "renew", offsetof(struct rk_operator_ops, renew)},
};

/* The optional asynchronous forms (ABI 1.2): allowed only with their bit. */
static const struct cap_op async_ops[] = {
    {RK_CAP_EXEC, "exec_start", offsetof(struct rk_operator_ops, exec_start)},
    {RK_CAP_SESSION, "session_run_start", offsetof(struct rk_operator_ops, session_run_start)},
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

/* Upper bounds on what a descriptor may declare (a corrupt table must not
 * make the loader walk memory forever). */
#define MAX_ELEMENT_SIZE 4096u
#define MAX_CONFIG_KEYS 1024u
#define MAX_CAP_MSGS 256u

/* Copy a NULL-terminated plugin array with stride `stride` into a calloc'd
 * array of `count + 1` core elements of size `core_size`, each zero-extended;
 * the terminator is recognised by a NULL pointer at offset 0 (config) or a
 * zero uint64_t at offset 0 (cap messages). Returns NULL and sets *too_many
 * when there is no terminator within `max` elements. */
static void *copy_array(const void *src, size_t stride, size_t core_size, size_t max, int *too_many)
{
    *too_many = 0;
    size_t n = 0;
    for (;; n++) {
        if (n >= max) {
            *too_many = 1;
            return NULL;
        }
        const char *e = (const char *)src + n * stride;
        char first[8];
        memcpy(first, e, sizeof first); /* both element types start with 8 bytes */
        static const char zero[8];
        if (memcmp(first, zero, sizeof zero) == 0)
            break;
    }
    char *dst = calloc(n + 1, core_size);
    if (!dst)
        abort();
    size_t take = stride < core_size ? stride : core_size;
    for (size_t i = 0; i < n; i++)
        memcpy(dst + i * core_size, (const char *)src + i * stride, take);
    return dst;
}

void rk_plugin_desc_free(struct rk_plugin_desc *d)
{
    if (!d)
        return;
    free(d->config);
    free(d->unsupported);
    d->config = NULL;
    d->unsupported = NULL;
}

int rk_plugin_adopt_descriptor(const struct rk_operator *raw, const char *stem,
                               struct rk_plugin_desc *out, char *why, size_t whylen)
{
#define REFUSE(...)                                                                                \
    do {                                                                                           \
        snprintf(why, whylen, __VA_ARGS__);                                                        \
        rk_plugin_desc_free(out);                                                                  \
        return -1;                                                                                 \
    } while (0)
    memset(out, 0, sizeof *out);
    /* magic, abi_major, abi_minor and struct_size exist in every version. */
    if (raw->magic != RK_OPERATOR_MAGIC)
        REFUSE("magic check failed: descriptor has 0x%08x, expected 0x%08x (not a rock-admin "
               "operator plugin)",
               (unsigned)raw->magic, (unsigned)RK_OPERATOR_MAGIC);
    if (raw->abi_major != RK_OPERATOR_ABI_MAJOR)
        REFUSE("ABI major check failed: plugin built against operator ABI %u.%u, daemon "
               "provides %d.%d: rebuild the plugin against the installed SDK",
               raw->abi_major, raw->abi_minor, RK_OPERATOR_ABI_MAJOR, RK_OPERATOR_ABI_MINOR);
    if (raw->abi_minor > RK_OPERATOR_ABI_MINOR)
        REFUSE("ABI minor check failed: plugin needs operator ABI %u.%u, daemon provides "
               "only %d.%d: upgrade rock-admin or rebuild the plugin",
               raw->abi_major, raw->abi_minor, RK_OPERATOR_ABI_MAJOR, RK_OPERATOR_ABI_MINOR);
    if (raw->struct_size < RK_OPERATOR_SIZE_1_0)
        REFUSE("descriptor size check failed: plugin descriptor is %u bytes, ABI %d.x needs "
               "at least %zu",
               (unsigned)raw->struct_size, RK_OPERATOR_ABI_MAJOR, (size_t)RK_OPERATOR_SIZE_1_0);
    /* The minor-version rule: read only the plugin's own size; the fields it
     * does not know stay zero. */
    size_t dn = raw->struct_size < sizeof out->desc ? raw->struct_size : sizeof out->desc;
    memcpy(&out->desc, raw, dn);
    struct rk_operator *d = &out->desc;
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
    /* A 1.0 plugin may only use the 1.0 bits. RK_CAP_SCHEDULER is one of them
     * (reserved, no entry point): accepted here, dropped from the effective
     * caps by rk_plugin_init(). */
    uint64_t known_caps = d->abi_minor >= 1 ? RK_CAP_ALL : RK_CAP_ALL_1_0;
    if (d->caps & ~known_caps)
        REFUSE("capability check failed: unknown capability bits 0x%llx",
               (unsigned long long)(d->caps & ~known_caps));
    const struct rk_operator_ops *raw_ops = d->ops;
    if (!raw_ops)
        REFUSE("entry point check failed: ops table is NULL");
    if (raw_ops->struct_size < OPS_MIN_SIZE)
        REFUSE("ops size check failed: ops table is %u bytes, at least %zu needed",
               (unsigned)raw_ops->struct_size, (size_t)OPS_MIN_SIZE);
    size_t on = raw_ops->struct_size < sizeof out->ops ? raw_ops->struct_size : sizeof out->ops;
    memcpy(&out->ops, raw_ops, on); /* slots past the plugin's size stay NULL */
    d->ops = &out->ops;
    const struct rk_operator_ops *ops = &out->ops;
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
    /* ABI 1.2: the asynchronous forms are optional; each needs the capability
     * (and so the blocking form) it belongs to. A plugin built for an older
     * minor has no such slots: whatever its table holds there is not read. */
    if (d->abi_minor < 2) {
        out->ops.exec_start = NULL;
        out->ops.session_run_start = NULL;
    }
    for (size_t i = 0; i < sizeof async_ops / sizeof async_ops[0]; i++)
        if (ops_slot(ops, async_ops[i].offset) && !(d->caps & async_ops[i].cap))
            REFUSE("capability check failed: entry point %s is set but capability 0x%llx is "
                   "not declared",
                   async_ops[i].op_name, (unsigned long long)async_ops[i].cap);
    if ((d->caps & RK_CAP_SESSION_INTERACTIVE) && !(d->caps & RK_CAP_SESSION))
        REFUSE("capability check failed: RK_CAP_SESSION_INTERACTIVE needs RK_CAP_SESSION");
    /* Arrays: the plugin's element size (0 = the 1.0 size), copied into core
     * elements so the rest of the core walks them with its own stride. */
    size_t key_size = d->config_key_size ? d->config_key_size : RK_CFG_KEY_SIZE_1_0;
    size_t msg_size = d->cap_msg_size ? d->cap_msg_size : RK_CAP_MSG_SIZE_1_0;
    if (key_size < RK_CFG_KEY_SIZE_1_0 || key_size > MAX_ELEMENT_SIZE ||
        key_size % sizeof(void *) != 0)
        REFUSE("element size check failed: config_key_size is %zu, expected a multiple of %zu "
               "between %zu and %u",
               key_size, sizeof(void *), (size_t)RK_CFG_KEY_SIZE_1_0, MAX_ELEMENT_SIZE);
    if (msg_size < RK_CAP_MSG_SIZE_1_0 || msg_size > MAX_ELEMENT_SIZE ||
        msg_size % sizeof(void *) != 0)
        REFUSE("element size check failed: cap_msg_size is %zu, expected a multiple of %zu "
               "between %zu and %u",
               msg_size, sizeof(void *), (size_t)RK_CAP_MSG_SIZE_1_0, MAX_ELEMENT_SIZE);
    int too_many = 0;
    if (d->config) {
        out->config =
            copy_array(d->config, key_size, sizeof(struct rk_cfg_key), MAX_CONFIG_KEYS, &too_many);
        if (too_many)
            REFUSE("config schema check failed: more than %u keys or no NULL-name terminator",
                   MAX_CONFIG_KEYS);
        d->config = out->config;
    }
    if (d->unsupported) {
        out->unsupported = copy_array(d->unsupported, msg_size, sizeof(struct rk_cap_msg),
                                      MAX_CAP_MSGS, &too_many);
        if (too_many)
            REFUSE("refusal text check failed: more than %u entries or no cap-0 terminator",
                   MAX_CAP_MSGS);
        d->unsupported = out->unsupported;
    }
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

int rk_plugin_check_descriptor(const struct rk_operator *desc, const char *stem, char *why,
                               size_t whylen)
{
    struct rk_plugin_desc tmp;
    if (rk_plugin_adopt_descriptor(desc, stem, &tmp, why, whylen) != 0)
        return -1;
    rk_plugin_desc_free(&tmp);
    return 0;
}

int rk_plugin_minor_at_least(const struct rk_plugin *pl, unsigned minor)
{
    return pl->desc->abi_minor >= minor;
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

/* dlopen the plugin with RTLD_NOW. On failure writes "unresolved symbol check
 * failed: undefined symbol NAME ..." (or the loader's text) to why. */
static void *bind_now(const char *path, char *why, size_t whylen)
{
    dlerror();
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (h)
        return h;
    const char *err = dlerror();
    if (!err)
        err = "unknown dynamic loader error";
    const char *sym = strstr(err, "undefined symbol: ");
    if (sym) {
        sym += strlen("undefined symbol: ");
        size_t n = strcspn(sym, " \t\n(,");
        snprintf(why, whylen,
                 "unresolved symbol check failed: undefined symbol %.*s (link the plugin "
                 "against the library that provides it)",
                 (int)n, sym);
    } else {
        snprintf(why, whylen, "cannot load: %s", err);
    }
    return NULL;
}

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
    /* Bind every symbol now: a plugin with an unresolved import is refused
     * here, naming the symbol, instead of crashing on first use. glibc keeps
     * this immediate binding when libltdl opens the same object below. */
    char unresolved[512];
    void *now_handle = bind_now(path, unresolved, sizeof unresolved);
    if (!now_handle) {
        rk_problems_add(p, "%s: plugin refused: %s", path, unresolved);
        return NULL;
    }
    /* Resident (never unloaded: dlclose would skip atexit handlers), local
     * symbols. */
    lt_dladvise advise;
    lt_dladvise_init(&advise);
    lt_dladvise_resident(&advise);
    lt_dladvise_local(&advise);
    lt_dlhandle h = lt_dlopenadvise(path, advise);
    lt_dladvise_destroy(&advise);
    dlclose(now_handle); /* libltdl holds its own reference now */
    if (!h) {
        rk_problems_add(p, "%s: plugin refused: cannot load: %s", path, lt_dlerror());
        return NULL;
    }
    const struct rk_operator *raw = lt_dlsym(h, RK_OPERATOR_SYMBOL);
    if (!raw) {
        rk_problems_add(p,
                        "%s: plugin refused: descriptor symbol check failed: no exported "
                        "symbol \"%s\" (declare it with RK_OPERATOR_EXPORT)",
                        path, RK_OPERATOR_SYMBOL);
        lt_dlclose(h);
        return NULL;
    }
    struct rk_plugin_desc *adopted = calloc(1, sizeof *adopted);
    if (!adopted)
        abort();
    char why[512];
    if (rk_plugin_adopt_descriptor(raw, name, adopted, why, sizeof why) != 0) {
        rk_problems_add(p, "%s: plugin refused: %s", path, why);
        free(adopted);
        lt_dlclose(h);
        return NULL;
    }
    struct rk_plugin *pl = calloc(1, sizeof *pl);
    if (!pl)
        abort();
    pl->adopted = adopted;
    pl->desc = &adopted->desc;
    pl->ops = adopted->ops;
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
    /* The effective caps: RK_CAP_SCHEDULER is reserved (accepted by the
     * descriptor check, ignored here, so nothing can depend on it); ABI 1.1:
     * the configured instance may narrow its declared caps. */
    pl->caps = pl->desc->caps & ~RK_CAP_SCHEDULER;
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
    rk_plugin_desc_free(pl->adopted);
    free(pl->adopted);
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
