/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file os_proxy.c
 * @brief The service proxy's target (ops.proxy_target) and its guards: reserved ports and
 *        credential headers.
 *
 * OpenSandbox returns, with the endpoint of its egress sidecar (port 18080),
 * the header OPENSANDBOX-EGRESS-AUTH: the token that lets a caller rewrite the
 * sandbox's network policy (components/egress: authorize() compares it with
 * OPENSANDBOX_EGRESS_TOKEN). OpenSandbox's own server proxy strips it from
 * user traffic; rock-admin's proxy is user traffic too, so the header is
 * marked as a credential (ABI 1.1) and the core never forwards it. execd
 * (44772) and the egress API are backend control planes, not applications:
 * proxying to them is refused unless opensandbox.allow_reserved_ports is set.
 */
#include <string.h>
#include <strings.h>

#include "os_internal.h"

/** Endpoint headers that are backend credentials, never routing headers. */
static const char *const os_credential_headers[] = {"OPENSANDBOX-EGRESS-AUTH", NULL};

/** Refuse execd / egress ports unless opensandbox.allow_reserved_ports. */
rk_status os_proxy_check_port(struct os_inst *inst, struct rk_call *call, int port)
{
    if (inst->allow_reserved_ports || (port != OS_EXECD_PORT && port != OS_EGRESS_PORT))
        return RK_OK;
    return inst->host->set_error(call, RK_E_INVALID,
                                 "port %d is reserved by OpenSandbox (%s) and cannot be proxied; "
                                 "an operator can allow it with opensandbox.allow_reserved_ports",
                                 port, port == OS_EXECD_PORT ? "execd" : "egress sidecar");
}

/** Mark endpoint headers that are backend credentials (ABI 1.1 header_flags). */
rk_status os_proxy_mark_credentials(struct os_inst *inst, struct rk_call *call,
                                    struct rk_proxy_target *out)
{
    if (!out->headers_len)
        return RK_OK;
    uint32_t *flags = inst->host->arena_alloc(call, out->headers_len * sizeof *flags);
    if (!flags)
        return inst->host->set_error(call, RK_E_NOMEM, "out of memory");
    for (size_t i = 0; i < out->headers_len; i++)
        for (size_t j = 0; os_credential_headers[j]; j++)
            if (out->headers[i].key && !strcasecmp(out->headers[i].key, os_credential_headers[j]))
                flags[i] |= RK_PROXY_HEADER_CREDENTIAL;
    out->header_flags = flags;
    return RK_OK;
}

/** Where the core relays traffic for a sandbox port: endpoint URL plus its headers. */
rk_status os_proxy_target(struct os_inst *inst, struct rk_call *call,
                          const struct rk_sandbox_ref *ref, int port, enum rk_proxy_kind kind,
                          struct rk_proxy_target *out)
{
    const char *osid = NULL;
    if (kind == RK_PROXY_TCP)
        return inst->host->set_error(call, RK_E_UNSUPPORTED,
                                     "OpenSandbox backend does not support portforward in this "
                                     "release");
    if (port < 1 || port > 65535)
        return inst->host->set_error(call, RK_E_INVALID, "invalid port %d", port);
    rk_status s = os_proxy_check_port(inst, call, port);
    if (s != RK_OK)
        return s;
    s = os_need_upstream_id(inst, call, ref, &osid);
    if (s != RK_OK)
        return s;
    struct os_endpoint ep;
    s = os_lc_endpoint(inst, call, osid, port, 1, "get_endpoint", &ep);
    if (s != RK_OK)
        return s;
    out->base_url = ep.base;
    out->headers = ep.headers;
    out->headers_len = ep.headers_len;
    return os_proxy_mark_credentials(inst, call, out);
}
