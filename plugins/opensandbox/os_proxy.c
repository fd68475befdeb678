/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file os_proxy.c
 * @brief Guards on the service proxy: reserved ports and credential headers.
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

rk_status os_proxy_check_port(struct os_inst *inst, struct rk_call *call, int port)
{
    if (inst->allow_reserved_ports || (port != OS_EXECD_PORT && port != OS_EGRESS_PORT))
        return RK_OK;
    return inst->host->set_error(call, RK_E_INVALID,
                                 "port %d is reserved by OpenSandbox (%s) and cannot be proxied; "
                                 "an operator can allow it with opensandbox.allow_reserved_ports",
                                 port, port == OS_EXECD_PORT ? "execd" : "egress sidecar");
}

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
