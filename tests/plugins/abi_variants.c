/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Deliberately broken operator plugins for the loader tests. One source,
 * built once per VARIANT_* macro; each variant violates exactly one rule.
 */
#include <stddef.h>

#include "rock-admin/operator.h"

static rk_status v_init(const struct rk_host *host, const struct rk_cfg *cfg, void **inst)
{
    (void)host;
    (void)cfg;
    static int dummy;
    *inst = &dummy;
    return RK_OK;
}
static void v_fini(void *inst)
{
    (void)inst;
}
static rk_status v_create(void *inst, struct rk_call *call, const struct rk_create_spec *spec,
                          struct rk_created *out)
{
    (void)inst;
    (void)call;
    (void)spec;
    out->upstream_id = "x";
    return RK_OK;
}
static rk_status v_status(void *inst, struct rk_call *call, const struct rk_sandbox_ref *ref,
                          struct rk_status_info *out)
{
    (void)inst;
    (void)call;
    (void)ref;
    out->state = RK_STATE_RUNNING;
    return RK_OK;
}
static rk_status v_destroy(void *inst, struct rk_call *call, const struct rk_sandbox_ref *ref)
{
    (void)inst;
    (void)call;
    (void)ref;
    return RK_OK;
}

static const struct rk_operator_ops ops = {
    .struct_size = sizeof(struct rk_operator_ops),
    .init = v_init,
    .fini = v_fini,
    .create = v_create,
    .status = v_status,
    .destroy = v_destroy,
};

#ifdef VARIANT_NO_SYMBOL
/* Exports a differently named descriptor: the loader must not find it. */
#define DESCRIPTOR RK_EXPORT_VISIBILITY const struct rk_operator wrong_symbol_name
#else
#define DESCRIPTOR RK_OPERATOR_EXPORT
#endif

DESCRIPTOR = {
#ifdef VARIANT_BAD_MAGIC
    .magic = 0xdeadbeefu,
#else
    .magic = RK_OPERATOR_MAGIC,
#endif
#ifdef VARIANT_OTHER_MAJOR
    .abi_major = RK_OPERATOR_ABI_MAJOR + 1,
#else
    .abi_major = RK_OPERATOR_ABI_MAJOR,
#endif
#ifdef VARIANT_NEWER_MINOR
    .abi_minor = RK_OPERATOR_ABI_MINOR + 1,
#else
    .abi_minor = RK_OPERATOR_ABI_MINOR,
#endif
#ifdef VARIANT_SMALL_STRUCT
    .struct_size = sizeof(struct rk_operator) - 8,
#else
    .struct_size = sizeof(struct rk_operator),
#endif
    .abi_flags = RK_ABI_FLAGS,
    .name = PLUGIN_NAME,
    .backend_tag = PLUGIN_NAME,
    .display_name = "Variant",
    .version = "0",
    .flags = RK_OPF_THREADSAFE,
#ifdef VARIANT_CAP_WITHOUT_OP
    .caps = RK_CAP_EXEC,
#else
    .caps = 0,
#endif
    .config = NULL,
    .unsupported = NULL,
    .ops = &ops,
};
