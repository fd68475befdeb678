/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Loading operator plugins (libltdl). This module is the only one that
 * includes ltdl.h. A plugin is refused, with one log line naming the check and
 * both values, unless its descriptor passes every check of
 * rk_plugin_check_descriptor().
 */
#ifndef RK_PLUGIN_LOADER_H
#define RK_PLUGIN_LOADER_H

#include <stddef.h>

#include "rock-admin/operator.h"

struct rk_config;
struct rk_problems;
struct rk_cfg;

/** A loaded operator plugin. */
struct rk_plugin {
    const struct rk_operator *desc; /* the plugin's descriptor */
    struct rk_operator_ops ops;     /* copy, zero-extended to the core's size */
    void *inst;                     /* from init() */
    struct rk_cfg *cfg_view;        /* the validated section */
    char *path;                     /* file it was loaded from */
    void *handle;                   /* lt_dlhandle */
    int initialised;
    uint64_t caps; /* desc->caps narrowed by ops.configured_caps (ABI 1.1) after init */
};

/**
 * Check a descriptor before any plugin code runs: magic, ABI major equal,
 * minor not newer, struct_size, abi_flags, name format and equality with
 * `stem`, backend tag, THREADSAFE flag, unknown capability bits, each
 * capability backed by its entry point (and no entry point without its bit),
 * mandatory entry points, ops struct_size, config schema well-formed.
 * Returns 0, or -1 with one actionable sentence in why.
 */
int rk_plugin_check_descriptor(const struct rk_operator *desc, const char *stem, char *why,
                               size_t whylen);

/** Load <dir>/<name>.so and check its descriptor. On refusal adds a problem
 *  line (and, for an unknown name, the list of plugins found) and returns NULL. */
struct rk_plugin *rk_plugin_load(const char *dir, const char *name, struct rk_problems *p);

/** Validate the plugin's config section and call its init(). Returns 0 or -1
 *  with problems added. */
int rk_plugin_init(struct rk_plugin *pl, const struct rk_config *cfg, struct rk_problems *p);

/** Call fini() (if initialised) and release the plugin. The module stays
 *  resident until exit. */
void rk_plugin_unload(struct rk_plugin *pl);

/** The refusal text for a missing capability: the plugin's own text, or
 *  "<display_name> backend does not support <opname>" in buf. */
const char *rk_plugin_unsupported(const struct rk_plugin *pl, uint64_t cap, const char *opname,
                                  char *buf, size_t buflen);

#endif /* RK_PLUGIN_LOADER_H */
