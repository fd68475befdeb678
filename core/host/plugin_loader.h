/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Loading operator plugins (libltdl). This module is the only one that
 * includes ltdl.h. A plugin is refused, with one log line naming the check and
 * both values, unless every symbol it imports resolves at load time and its
 * descriptor passes every check of rk_plugin_adopt_descriptor().
 */
#ifndef RK_PLUGIN_LOADER_H
#define RK_PLUGIN_LOADER_H

#include <stddef.h>

#include "rock-admin/operator.h"

struct rk_config;
struct rk_problems;
struct rk_cfg;

/** A loaded operator plugin. Everything the core reads of the plugin's
 *  tables is a core-owned copy in the core's own layout (zero-extended). */
struct rk_plugin {
    const struct rk_operator *desc; /* = &adopted.desc */
    struct rk_operator_ops ops;     /* copy of adopted.ops (kept for call sites) */
    struct rk_plugin_desc *adopted; /* descriptor, ops and arrays as copied */
    void *inst;                     /* from init() */
    struct rk_cfg *cfg_view;        /* the validated section */
    char *path;                     /* file it was loaded from */
    void *handle;                   /* lt_dlhandle */
    int initialised;
    uint64_t caps; /* effective caps after init: desc->caps without the reserved
                      RK_CAP_SCHEDULER, narrowed by ops.configured_caps (ABI 1.1) */
};

/**
 * The core's copy of a plugin's descriptor: each versioned struct copied by
 * the plugin's own size (descriptor struct_size, ops struct_size, array
 * element sizes) into zero-filled storage of the core's layout. desc.ops,
 * desc.config and desc.unsupported point at the copies below; desc.struct_size,
 * desc.config_key_size and desc.cap_msg_size keep the plugin's values.
 */
struct rk_plugin_desc {
    struct rk_operator desc;
    struct rk_operator_ops ops;
    struct rk_cfg_key *config;      /* NULL-name terminated, or NULL */
    struct rk_cap_msg *unsupported; /* cap-0 terminated, or NULL */
};

/** Size of the ABI 1.0 descriptor (up to and including ops). */
#define RK_OPERATOR_SIZE_1_0 (offsetof(struct rk_operator, ops) + sizeof(void *))
/** Element sizes of the ABI 1.0 arrays. */
#define RK_CFG_KEY_SIZE_1_0 (offsetof(struct rk_cfg_key, doc) + sizeof(void *))
#define RK_CAP_MSG_SIZE_1_0 (offsetof(struct rk_cap_msg, message) + sizeof(void *))

/**
 * Copy a plugin's descriptor into *out (see struct rk_plugin_desc) and check
 * it before any plugin code runs: magic, ABI major equal, minor not newer,
 * descriptor at least the 1.0 size, abi_flags, name format and equality with
 * `stem` (if non-NULL), backend tag, THREADSAFE flag, unknown capability bits,
 * each capability backed by its entry point (and no entry point without its
 * bit), mandatory entry points, ops struct_size, array element sizes, config
 * schema well-formed. Returns 0, or -1 with one actionable sentence in why
 * (*out is then released). Release a success with rk_plugin_desc_free().
 */
int rk_plugin_adopt_descriptor(const struct rk_operator *raw, const char *stem,
                               struct rk_plugin_desc *out, char *why, size_t whylen);

/** Free the arrays of an adopted descriptor. */
void rk_plugin_desc_free(struct rk_plugin_desc *d);

/** rk_plugin_adopt_descriptor() without keeping the copy (for tests and tools). */
int rk_plugin_check_descriptor(const struct rk_operator *desc, const char *stem, char *why,
                               size_t whylen);

/** Non-zero if the plugin was built against ABI minor >= minor (fields of
 *  that minor may be passed to / read from it). */
int rk_plugin_minor_at_least(const struct rk_plugin *pl, unsigned minor);

/** Load <dir>/<name>.so and check its descriptor. On refusal adds a problem
 *  line (and, for an unknown name, the list of plugins found) and returns NULL. */
struct rk_plugin *rk_plugin_load(const char *dir, const char *name, struct rk_problems *p);

/** Validate the plugin's config section and call its init(), then set
 *  pl->caps (the reserved RK_CAP_SCHEDULER dropped, ops.configured_caps
 *  applied). Returns 0 or -1 with problems added. */
int rk_plugin_init(struct rk_plugin *pl, const struct rk_config *cfg, struct rk_problems *p);

/** Call fini() (if initialised) and release the plugin. The module stays
 *  resident until exit. */
void rk_plugin_unload(struct rk_plugin *pl);

/** The refusal text for a missing capability: the plugin's own text, or
 *  "<display_name> backend does not support <opname>" in buf. */
const char *rk_plugin_unsupported(const struct rk_plugin *pl, uint64_t cap, const char *opname,
                                  char *buf, size_t buflen);

#endif /* RK_PLUGIN_LOADER_H */
