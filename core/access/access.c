/* SPDX-License-Identifier: Apache-2.0 */
/* The access layer's admission checks, registered with the engine (access.h). */
#include "access/access.h"

#include "access/auth.h"
#include "access/cors.h"
#include "engine/http_server.h"
#include "obs/metrics.h"

static const struct rk_admission checks[] = {
    {.name = "cors_preflight",
     .point = RK_ADMIT_BEFORE_ROUTE,
     .check = rk_cors_preflight,
     .decorate = rk_cors_add_headers},
    {.name = "token", .point = RK_ADMIT_MATCHED, .check = rk_auth_gate},
    {.name = "origin_and_type", .point = RK_ADMIT_ROUTED, .check = rk_cors_gate},
};

/* Collector: rock_admin_auth_requests_total. */
static void auth_metrics(void *arg, struct rk_buf *out)
{
    (void)arg;
    rk_auth_metrics_render(out);
}

int rk_access_install(void)
{
    for (size_t i = 0; i < sizeof checks / sizeof checks[0]; i++)
        if (rk_http_admission_add(&checks[i]) != 0)
            return -1;
    return rk_metrics_collector_add("auth", auth_metrics, NULL);
}
