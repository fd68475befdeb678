/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Deliberately broken operator plugins for the loader tests. One source,
 * built once per VARIANT_* macro; each variant violates exactly one rule.
 */
#include <stddef.h>

#include "rock-admin/operator.h"

#ifdef VARIANT_UNRESOLVED
/* Defined nowhere: with lazy binding this would only fail on first call. */
extern int rk_fixture_missing_function(void);
#endif

static rk_status v_init(const struct rk_host *host, const struct rk_cfg *cfg, void **inst)
{
    (void)host;
    (void)cfg;
#ifdef VARIANT_UNRESOLVED
    if (rk_fixture_missing_function() != 0)
        return RK_E_INTERNAL;
#endif
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

#ifdef VARIANT_WIDE_ELEMENTS
/* Elements of a hypothetical later minor: the 1.x fields plus one more. The
 * core must step over the extra field using config_key_size/cap_msg_size. */
struct wide_key {
    struct rk_cfg_key k;
    const char *future;
};
struct wide_msg {
    struct rk_cap_msg m;
    const char *future;
};
static const struct wide_key wide_keys[] = {
    {{"first_key", RK_CFG_STR, 0, "one", NULL, NULL, "first"}, "x"},
    {{"second_key", RK_CFG_INT, 0, "2", NULL, NULL, "second"}, "y"},
    {{NULL, 0, 0, NULL, NULL, NULL, NULL}, NULL},
};
static const struct wide_msg wide_msgs[] = {
    {{RK_CAP_STOP, "wide: no stop"}, "x"},
    {{RK_CAP_EXEC, "wide: no exec"}, "y"},
    {{0, NULL}, NULL},
};
#endif

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
    .struct_size = offsetof(struct rk_operator, ops), /* smaller than any 1.x descriptor */
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
#ifdef VARIANT_WIDE_ELEMENTS
    .config = &wide_keys[0].k,
    .unsupported = &wide_msgs[0].m,
    .ops = &ops,
    .config_key_size = sizeof(struct wide_key),
    .cap_msg_size = sizeof(struct wide_msg),
#else
    .config = NULL,
    .unsupported = NULL,
    .ops = &ops,
    RK_OPERATOR_ELEMENT_SIZES,
#endif
};
