/* SPDX-License-Identifier: Apache-2.0 */
/* Header filtering for proxied requests: rock-admin tokens and backend credentials stay out. */
#include "relay/proxy_guard.h"

#include <strings.h>

#include "access/auth.h"
#include "rock-admin/operator.h"

/* The plugin marked header i a credential. */
int rk_proxy_guard_endpoint_header(const struct rk_proxy_target *pt, size_t i)
{
    return pt && pt->header_flags && i < pt->headers_len &&
           (pt->header_flags[i] & RK_PROXY_HEADER_CREDENTIAL) != 0;
}

/* Our token, or the name of a marked credential. */
int rk_proxy_guard_client_header(const struct rk_req *r, const struct rk_proxy_target *pt,
                                 const char *name)
{
    if (rk_auth_header_is_ours(r, name))
        return 1;
    for (size_t i = 0; pt && i < pt->headers_len; i++)
        if (rk_proxy_guard_endpoint_header(pt, i) && pt->headers[i].key &&
            strcasecmp(pt->headers[i].key, name) == 0)
            return 1;
    return 0;
}
