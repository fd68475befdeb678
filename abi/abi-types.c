/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A tiny shared object whose only purpose is to make every public type of
 * include/rock-admin/operator.h appear in its debug info, so that abidw can
 * record the ABI and abidiff can compare it with the checked-in baseline
 * (scripts/abi-check.sh). Not installed, not linked into anything.
 */
#include "rock-admin/operator.h"

/** Takes one of every public type; never called. */
RK_EXPORT_VISIBILITY void rk_abi_every_type(
    const struct rk_operator *op, const struct rk_operator_ops *ops, const struct rk_host *host,
    const struct rk_cfg_key *key, const struct rk_cap_msg *msg, const struct rk_kv *kv,
    const struct rk_sandbox_ref *ref, const struct rk_create_spec *spec, struct rk_created *created,
    struct rk_status_info *status, const struct rk_sink *sink, const struct rk_source *source,
    const struct rk_exec_req *exec_req, struct rk_exec_res *exec_res, struct rk_file_info *file,
    const struct rk_session_opts *sopts, struct rk_session_opened *sopened,
    const struct rk_session_req *sreq, struct rk_proxy_target *target, rk_status st,
    enum rk_cfg_type cfg_type, enum rk_state state, enum rk_stream stream, enum rk_proxy_kind kind,
    enum rk_log_level level);

void rk_abi_every_type(const struct rk_operator *op, const struct rk_operator_ops *ops,
                       const struct rk_host *host, const struct rk_cfg_key *key,
                       const struct rk_cap_msg *msg, const struct rk_kv *kv,
                       const struct rk_sandbox_ref *ref, const struct rk_create_spec *spec,
                       struct rk_created *created, struct rk_status_info *status,
                       const struct rk_sink *sink, const struct rk_source *source,
                       const struct rk_exec_req *exec_req, struct rk_exec_res *exec_res,
                       struct rk_file_info *file, const struct rk_session_opts *sopts,
                       struct rk_session_opened *sopened, const struct rk_session_req *sreq,
                       struct rk_proxy_target *target, rk_status st, enum rk_cfg_type cfg_type,
                       enum rk_state state, enum rk_stream stream, enum rk_proxy_kind kind,
                       enum rk_log_level level)
{
    (void)op, (void)ops, (void)host, (void)key, (void)msg, (void)kv, (void)ref, (void)spec;
    (void)created, (void)status, (void)sink, (void)source, (void)exec_req, (void)exec_res;
    (void)file, (void)sopts, (void)sopened, (void)sreq, (void)target, (void)st, (void)cfg_type;
    (void)state, (void)stream, (void)kind, (void)level;
}
