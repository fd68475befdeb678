/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fuzz the configuration parser entry point (core/config.c rk_config_load):
 * the input is written to an in-memory file and loaded as the YAML config,
 * then the opensandbox-like plugin view (core/config_plugin.c) is built from it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "config/config.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int fd = memfd_create("fuzz-config", 0);
    if (fd < 0)
        return 0;
    if (write(fd, data, size) != (ssize_t)size) {
        close(fd);
        return 0;
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    struct rk_problems p;
    memset(&p, 0, sizeof p);
    struct rk_config *cfg = rk_config_load(path, &p);
    if (cfg) {
        static const char *const protocols[] = {"http", "https", NULL};
        static const struct rk_cfg_key schema[] = {
            {.name = "endpoint", .type = RK_CFG_STR, .default_value = "127.0.0.1:8090"},
            {.name = "timeout_s", .type = RK_CFG_INT, .flags = RK_CFGF_POSITIVE},
            {.name = "use_server_proxy", .type = RK_CFG_BOOL},
            {.name = "ratio", .type = RK_CFG_DOUBLE},
            {.name = "protocol", .type = RK_CFG_ENUM, .enum_values = protocols},
            {.name = NULL},
        };
        struct rk_cfg *view = rk_config_plugin_view(cfg, "opensandbox", schema, &p);
        rk_cfg_free(view);
        rk_config_free(cfg);
    }
    rk_problems_free(&p);
    close(fd);
    return 0;
}
