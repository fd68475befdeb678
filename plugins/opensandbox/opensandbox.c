/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file opensandbox.c
 * @brief The OpenSandbox operator descriptor and the ABI entry points (thin glue).
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "os_internal.h"

/** ops.init: validate the section and build the instance; never contacts upstream. */
static rk_status op_init(const struct rk_host *host, const struct rk_cfg *cfg, void **inst_out)
{
    struct os_inst *inst = NULL;
    rk_status s = os_config_init(host, cfg, &inst);
    if (s == RK_OK)
        *inst_out = inst;
    return s;
}

/** ops.fini: free the instance. */
static void op_fini(void *inst)
{
    os_config_free(inst);
}

/** ops.create. */
static rk_status op_create(void *inst, struct rk_call *call, const struct rk_create_spec *spec,
                           struct rk_created *out)
{
    struct os_inst *in = inst;
    /* OpenSandbox counts the lifetime from when it handles the create: note the expiry from
     * before the request, never later than the real one (the real server took seconds to
     * create; an expiry noted after the reply was that much too late and delayed renewals). */
    int64_t asked = (int64_t)time(NULL);
    rk_status s = os_lc_create(in, call, spec, out);
    if (s == RK_OK && in->renew_margin_s > 0 && spec->idle_timeout_s > 0 && out->upstream_id)
        os_renew_note(in, out->upstream_id, asked + spec->idle_timeout_s + in->renew_margin_s);
    return s;
}

/** ops.status. */
static rk_status op_status(void *inst, struct rk_call *call, const struct rk_sandbox_ref *ref,
                           struct rk_status_info *out)
{
    return os_lc_status(inst, call, ref, out);
}

/** ops.destroy. */
static rk_status op_destroy(void *inst, struct rk_call *call, const struct rk_sandbox_ref *ref)
{
    return os_lc_destroy(inst, call, ref);
}

/** ops.exec. */
static rk_status op_exec(void *inst, struct rk_call *call, const struct rk_sandbox_ref *ref,
                         const struct rk_exec_req *req, const struct rk_sink *sink,
                         struct rk_exec_res *out)
{
    return os_exec(inst, call, ref, req, sink, out);
}

/** ops.exec_start (ABI 1.2): the command runs on the instance's loop; no thread waits. */
static rk_status op_exec_start(void *inst, struct rk_call *call, const struct rk_sandbox_ref *ref,
                               const struct rk_exec_req *req, const struct rk_sink *sink,
                               struct rk_exec_res *out)
{
    return os_exec_start(inst, call, ref, req, sink, out);
}

/** ops.file_read. */
static rk_status op_file_read(void *inst, struct rk_call *call, const struct rk_sandbox_ref *ref,
                              const char *path, const struct rk_sink *sink)
{
    return os_file_read(inst, call, ref, path, sink);
}

/** ops.file_stat. */
static rk_status op_file_stat(void *inst, struct rk_call *call, const struct rk_sandbox_ref *ref,
                              const char *path, struct rk_file_info *out)
{
    return os_file_stat(inst, call, ref, path, out);
}

/** ops.file_write. */
static rk_status op_file_write(void *inst, struct rk_call *call, const struct rk_sandbox_ref *ref,
                               const char *path, unsigned mode, const struct rk_source *source)
{
    return os_file_write(inst, call, ref, path, mode, source);
}

/** ops.session_open. */
static rk_status op_session_open(void *inst, struct rk_call *call, const struct rk_sandbox_ref *ref,
                                 const struct rk_session_opts *opts, struct rk_session_opened *out)
{
    return os_session_open(inst, call, ref, opts, out);
}

/** ops.session_run. */
static rk_status op_session_run(void *inst, struct rk_call *call, const struct rk_sandbox_ref *ref,
                                const char *session_id, const struct rk_session_req *req,
                                const struct rk_sink *sink, struct rk_exec_res *out)
{
    return os_session_run(inst, call, ref, session_id, req, sink, out);
}

/** ops.session_run_start (ABI 1.2): like op_exec_start for a session command. */
static rk_status op_session_run_start(void *inst, struct rk_call *call,
                                      const struct rk_sandbox_ref *ref, const char *session_id,
                                      const struct rk_session_req *req, const struct rk_sink *sink,
                                      struct rk_exec_res *out)
{
    return os_session_run_start(inst, call, ref, session_id, req, sink, out);
}

/** ops.session_close. */
static rk_status op_session_close(void *inst, struct rk_call *call,
                                  const struct rk_sandbox_ref *ref, const char *session_id)
{
    return os_session_close(inst, call, ref, session_id);
}

/** ops.proxy_target. */
static rk_status op_proxy_target(void *inst, struct rk_call *call, const struct rk_sandbox_ref *ref,
                                 int port, enum rk_proxy_kind kind, struct rk_proxy_target *out)
{
    return os_proxy_target(inst, call, ref, port, kind, out);
}

/** ops.list (ABI 1.1): the reconciler's paged pass. */
static rk_status op_list(void *inst, struct rk_call *call, rk_list_fn fn, void *ctx)
{
    return os_lc_list(inst, call, fn, ctx);
}

/** ops.stop (stop_mode pause). */
static rk_status op_stop(void *inst, struct rk_call *call, const struct rk_sandbox_ref *ref)
{
    return os_lc_pause(inst, call, ref);
}

/** ops.restart (stop_mode pause). */
static rk_status op_restart(void *inst, struct rk_call *call, const struct rk_sandbox_ref *ref)
{
    return os_lc_resume(inst, call, ref);
}

/** ops.configured_caps (ABI 1.1). */
static uint64_t op_configured_caps(void *inst)
{
    return os_configured_caps(inst);
}

/** ops.snapshot_create (archive_enabled). */
static rk_status op_snapshot_create(void *inst, struct rk_call *call,
                                    const struct rk_sandbox_ref *ref, struct rk_snapshot *out)
{
    return os_snapshot_create(inst, call, ref, out);
}

/** ops.snapshot_get. */
static rk_status op_snapshot_get(void *inst, struct rk_call *call, const char *snapshot_id,
                                 struct rk_snapshot *out)
{
    return os_snapshot_get(inst, call, snapshot_id, out);
}

/** ops.snapshot_delete. */
static rk_status op_snapshot_delete(void *inst, struct rk_call *call, const char *snapshot_id)
{
    return os_snapshot_delete(inst, call, snapshot_id);
}

/** ops.restore_snapshot. */
static rk_status op_restore_snapshot(void *inst, struct rk_call *call,
                                     const struct rk_create_spec *spec, const char *snapshot_id,
                                     struct rk_created *out)
{
    return os_restore_snapshot(inst, call, spec, snapshot_id, out);
}

/** ops.renew (renew_margin > 0). */
static rk_status op_renew(void *inst, struct rk_call *call, const struct rk_sandbox_ref *ref,
                          int64_t idle_deadline)
{
    return os_renew(inst, call, ref, idle_deadline);
}

static const struct rk_operator_ops os_ops = {
    .struct_size = sizeof(struct rk_operator_ops),
    .init = op_init,
    .fini = op_fini,
    .create = op_create,
    .status = op_status,
    .destroy = op_destroy,
    .exec = op_exec,
    .file_read = op_file_read,
    .file_stat = op_file_stat,
    .file_write = op_file_write,
    .session_open = op_session_open,
    .session_run = op_session_run,
    .session_close = op_session_close,
    .proxy_target = op_proxy_target,
    .list = op_list,
    .stop = op_stop,
    .restart = op_restart,
    .configured_caps = op_configured_caps,
    .snapshot_create = op_snapshot_create,
    .snapshot_get = op_snapshot_get,
    .snapshot_delete = op_snapshot_delete,
    .restore_snapshot = op_restore_snapshot,
    .renew = op_renew,
    .exec_start = op_exec_start,
    .session_run_start = op_session_run_start,
};

static const struct rk_cap_msg os_unsupported[] = {
    {RK_CAP_STOP, "OpenSandbox backend does not support stop by default. OpenSandbox pause "
                  "requires creating the sandbox with persistence enabled; use delete instead."},
    {RK_CAP_RESTART,
     "OpenSandbox backend does not support restart by default. OpenSandbox resume requires "
     "creating the sandbox with persistence enabled; create a new sandbox instead."},
    {RK_CAP_SESSION_INTERACTIVE, "OpenSandbox sessions do not support interactive commands"},
    {RK_CAP_PORT_FORWARD, "OpenSandbox backend does not support portforward in this release"},
    {RK_CAP_ARCHIVE, "archive not supported on OpenSandboxOperator"},
    {RK_CAP_RESTORE, "restore not supported on OpenSandboxOperator"},
    {RK_CAP_COMMIT, "commit not supported on OpenSandboxOperator"},
    {RK_CAP_STATISTICS, "OpenSandbox backend does not support get_sandbox_statistics"},
    {RK_CAP_SNAPSHOT, "archive not supported on OpenSandboxOperator"},
    {0, NULL},
};

RK_OPERATOR_EXPORT = {
    .magic = RK_OPERATOR_MAGIC,
    .abi_major = RK_OPERATOR_ABI_MAJOR,
    .abi_minor = RK_OPERATOR_ABI_MINOR,
    .struct_size = sizeof(struct rk_operator),
    .abi_flags = RK_ABI_FLAGS,
    .name = "opensandbox",
    .backend_tag = "opensandbox",
    .display_name = "OpenSandbox",
    .version = "1.2.0",
    .flags = RK_OPF_THREADSAFE,
    .caps = RK_CAP_EXEC | RK_CAP_FILE_READ | RK_CAP_FILE_STAT | RK_CAP_FILE_WRITE | RK_CAP_SESSION |
            RK_CAP_PROXY_HTTP | RK_CAP_PROXY_WS | RK_CAP_DELETE_PENDING | RK_CAP_LIST |
            /* ABI 1.1: narrowed by opensandbox.stop_mode / archive_enabled / renew_margin */
            RK_CAP_CONFIGURED | RK_CAP_STOP | RK_CAP_RESTART | RK_CAP_STOP_DELETES |
            RK_CAP_SNAPSHOT | RK_CAP_RENEW,
    .config = os_config_keys,
    .unsupported = os_unsupported,
    .ops = &os_ops,
};
