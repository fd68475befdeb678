/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file os_config.c
 * @brief Config schema of the `opensandbox:` section, its validation, the capabilities a
 *        configured instance offers, and the assembly of the instance: the values are parsed
 *        here, then each module sets up its own state (os_ep_cache_init, os_renew_init,
 *        os_http_init) and releases it again in os_config_free.
 */
#include <stdlib.h>
#include <string.h>

#include "os_internal.h"

/** The deprecated command_timeout_margin's default: other values log a warning. */
#define OS_LEGACY_MARGIN_DEFAULT 30

static const char *const os_protocols[] = {"http", "https", NULL};
static const char *const os_stop_modes[] = {"refuse", "delete", "pause", NULL};

/** Schema of the plugin's YAML section; the core validates types and flags. */
const struct rk_cfg_key os_config_keys[] = {
    {"endpoint", RK_CFG_STR, RK_CFGF_REQUIRED, NULL, NULL, NULL,
     "OpenSandbox lifecycle server as host[:port] (no scheme, no path)"},
    {"protocol", RK_CFG_ENUM, 0, "https", os_protocols, NULL,
     "scheme for the lifecycle server and for execd endpoints"},
    {"api_key", RK_CFG_STR, RK_CFGF_SECRET | RK_CFGF_NULLABLE, NULL, NULL, "OPEN_SANDBOX_API_KEY",
     "sent as OPEN-SANDBOX-API-KEY to the lifecycle server only"},
    {"runtime", RK_CFG_STR, 0, "docker", NULL, NULL,
     "informational; the OpenSandbox server selects the runtime"},
    {"image_registry_prefix", RK_CFG_STR, RK_CFGF_NULLABLE, NULL, NULL, NULL,
     "registry prefixed to images that do not name a registry"},
    {"namespace", RK_CFG_STR, 0, "rock", NULL, NULL, "accepted for compatibility; unused"},
    {"use_server_proxy", RK_CFG_BOOL, 0, "false", NULL, NULL,
     "route execd traffic through the OpenSandbox server proxy (no fallback)"},
    {"default_timeout", RK_CFG_INT, RK_CFGF_POSITIVE, "600", NULL, NULL,
     "per-request timeout in seconds for lifecycle and file calls"},
    {"connect_timeout", RK_CFG_INT, RK_CFGF_POSITIVE, "5", NULL, NULL,
     "TCP/TLS connect timeout in seconds for every upstream call"},
    {"sandbox_timeout", RK_CFG_INT, 0, "86400", NULL, NULL,
     "OpenSandbox lifetime backstop in seconds sent on create (0 = none, else >= 60)"},
    {"command_timeout_margin", RK_CFG_INT, 0, "30", NULL, NULL,
     "deprecated and ignored (a value other than 30 logs a warning); the one command margin is "
     "runtime.command_timeout_margin"},
    {"max_file_bytes", RK_CFG_INT, RK_CFGF_POSITIVE, "67108864", NULL, NULL,
     "largest file read_file returns, in bytes"},
    {"allow_reserved_ports", RK_CFG_BOOL, 0, "false", NULL, NULL,
     "let the service proxy reach execd (44772) and the egress sidecar (18080)"},
    /* Lifecycle deployment options (ABI 1.1 configured capabilities). */
    {"stop_mode", RK_CFG_ENUM, 0, "refuse", os_stop_modes, NULL,
     "/stop: refuse (ROCK's refusal), delete (kill), pause (OpenSandbox pause; restart resumes)"},
    {"archive_enabled", RK_CFG_BOOL, 0, "false", NULL, NULL,
     "archive stopped sandboxes into OpenSandbox snapshots; restart restores them"},
    {"renew_margin", RK_CFG_INT, 0, "0", NULL, NULL,
     "seconds OpenSandbox's expiry is kept ahead of the idle deadline (0 = fixed sandbox_timeout)"},
    {"state_wait", RK_CFG_INT, RK_CFGF_POSITIVE, "60", NULL, NULL,
     "longest wait in seconds for OpenSandbox to reach Paused/Running during stop and archive"},
    {NULL, 0, 0, NULL, NULL, NULL, NULL},
};

/** Capabilities this configured instance offers (ops.configured_caps). */
uint64_t os_configured_caps(struct os_inst *inst)
{
    uint64_t caps = RK_CAP_EXEC | RK_CAP_FILE_READ | RK_CAP_FILE_STAT | RK_CAP_FILE_WRITE |
                    RK_CAP_SESSION | RK_CAP_PROXY_HTTP | RK_CAP_PROXY_WS | RK_CAP_DELETE_PENDING |
                    RK_CAP_CONFIGURED;
    if (inst->stop_mode == OS_STOP_PAUSE)
        caps |= RK_CAP_STOP | RK_CAP_RESTART;
    else if (inst->stop_mode == OS_STOP_DELETE)
        caps |= RK_CAP_STOP_DELETES;
    if (inst->archive_enabled)
        caps |= RK_CAP_SNAPSHOT;
    if (inst->renew_margin_s > 0)
        caps |= RK_CAP_RENEW;
    return caps;
}

/** strdup that maps NULL to NULL. */
static char *dup_or_null(const char *s)
{
    return s ? strdup(s) : NULL;
}

/** Free an instance and everything it owns: each module releases its own state (transfers
 *  first, since the loop's streams hold pooled handles), then the parsed values. */
void os_config_free(struct os_inst *inst)
{
    if (!inst)
        return;
    if (inst->modules_ready) {
        os_ready_stop(inst); /* nothing new starts while the loop's transfers end */
        os_http_free(inst);
        os_ready_free(inst);
        os_ep_cache_free(inst);
        os_renew_cache_free(inst);
    }
    free(inst->endpoint);
    free(inst->protocol);
    if (inst->api_key) {
        /* Do not leave the key in freed heap memory. */
        volatile char *k = inst->api_key;
        while (*k)
            *k++ = '\0';
    }
    free(inst->api_key);
    free(inst->registry_prefix);
    free(inst);
}

/** Validate the section (reporting every problem) and build the instance. No I/O. */
rk_status os_config_init(const struct rk_host *host, const struct rk_cfg *cfg, struct os_inst **out)
{
    int bad = 0;
    const char *why = NULL;
    const char *endpoint = host->cfg_str(cfg, "endpoint");
    if (!os_endpoint_valid(endpoint, &why)) {
        host->cfg_problem(cfg, "endpoint", "%s", why);
        bad = 1;
    }
    const char *protocol = host->cfg_str(cfg, "protocol");
    if (!protocol)
        protocol = "https";
    if (strcmp(protocol, "http") != 0 && strcmp(protocol, "https") != 0) {
        host->cfg_problem(cfg, "protocol", "must be http or https");
        bad = 1;
    }
    int64_t default_timeout = host->cfg_int(cfg, "default_timeout");
    if (default_timeout <= 0) {
        host->cfg_problem(cfg, "default_timeout", "OpenSandbox default_timeout must be positive");
        bad = 1;
    }
    int64_t connect_timeout = host->cfg_int(cfg, "connect_timeout");
    if (connect_timeout <= 0) {
        host->cfg_problem(cfg, "connect_timeout", "must be positive");
        bad = 1;
    }
    int64_t sandbox_timeout = host->cfg_int(cfg, "sandbox_timeout");
    if (sandbox_timeout != 0 && sandbox_timeout < 60) {
        host->cfg_problem(cfg, "sandbox_timeout",
                          "must be 0 (no OpenSandbox expiry) or at least 60 seconds");
        bad = 1;
    }
    /* Deprecated: a command's deadline is the core's (runtime.command_timeout_margin). The key is
     * still accepted and range-checked so existing files load, and has no effect. */
    int64_t margin = host->cfg_int(cfg, "command_timeout_margin");
    if (margin < 0 || margin > 86400) {
        host->cfg_problem(cfg, "command_timeout_margin", "must be between 0 and 86400 seconds");
        bad = 1;
    }
    int64_t max_file = host->cfg_int(cfg, "max_file_bytes");
    if (max_file <= 0) {
        host->cfg_problem(cfg, "max_file_bytes", "must be positive");
        bad = 1;
    }
    const char *stop_mode = host->cfg_str(cfg, "stop_mode");
    int mode = OS_STOP_REFUSE;
    if (stop_mode && !strcmp(stop_mode, "delete"))
        mode = OS_STOP_DELETE;
    else if (stop_mode && !strcmp(stop_mode, "pause"))
        mode = OS_STOP_PAUSE;
    int archive_enabled = host->cfg_bool(cfg, "archive_enabled") ? 1 : 0;
    if (archive_enabled && mode != OS_STOP_PAUSE) {
        /* Only a stopped sandbox can be archived, and only pause makes one. */
        host->cfg_problem(cfg, "archive_enabled", "needs opensandbox.stop_mode: pause");
        bad = 1;
    }
    int64_t renew_margin = host->cfg_int(cfg, "renew_margin");
    if (renew_margin != 0 && (renew_margin < 10 || renew_margin > 7 * 86400)) {
        host->cfg_problem(cfg, "renew_margin",
                          "must be 0 (no renewal) or between 10 and 604800 seconds");
        bad = 1;
    }
    if (renew_margin != 0 && sandbox_timeout == 0) {
        host->cfg_problem(cfg, "renew_margin",
                          "renewal needs an OpenSandbox expiry (sandbox_timeout must not be 0)");
        bad = 1;
    }
    int64_t state_wait = host->cfg_int(cfg, "state_wait");
    if (bad)
        return RK_E_INVALID;

    if (margin != OS_LEGACY_MARGIN_DEFAULT)
        host->log(RK_LOG_WARNING,
                  "opensandbox.command_timeout_margin is deprecated and ignored: a command's "
                  "deadline is its timeout plus runtime.command_timeout_margin");

    struct os_inst *inst = calloc(1, sizeof(*inst));
    if (!inst)
        return RK_E_NOMEM;
    inst->host = host;
    const char *key = host->cfg_str(cfg, "api_key");
    const char *prefix = host->cfg_str(cfg, "image_registry_prefix");
    inst->endpoint = strdup(endpoint);
    inst->protocol = strdup(protocol);
    inst->api_key = (key && *key) ? strdup(key) : NULL;
    inst->registry_prefix = dup_or_null(prefix);
    inst->use_server_proxy = host->cfg_bool(cfg, "use_server_proxy") ? 1 : 0;
    inst->default_timeout_s = default_timeout;
    inst->connect_timeout_s = connect_timeout;
    inst->sandbox_timeout_s = sandbox_timeout;
    inst->margin_s = margin;
    inst->max_file_bytes = max_file;
    inst->allow_reserved_ports = host->cfg_bool(cfg, "allow_reserved_ports") ? 1 : 0;
    inst->stop_mode = mode;
    inst->archive_enabled = archive_enabled;
    inst->renew_margin_s = renew_margin;
    inst->state_wait_s = state_wait > 0 ? state_wait : 60;
    if (!inst->endpoint || !inst->protocol || (key && *key && !inst->api_key) ||
        (prefix && !inst->registry_prefix)) {
        os_config_free(inst);
        return RK_E_NOMEM;
    }
    /* Each module sets up its own state. */
    inst->execd_ping = os_execd_ping;
    inst->execd_check = os_execd_check;
    if (os_ep_cache_init(inst) != 0) {
        os_config_free(inst);
        return RK_E_NOMEM;
    }
    if (os_renew_init(inst) != 0) {
        pthread_mutex_destroy(&inst->ep_lock);
        os_config_free(inst);
        return RK_E_NOMEM;
    }
    os_http_init(inst);
    inst->modules_ready = 1;
    if (os_ready_init(inst) != 0) {
        os_config_free(inst);
        return RK_E_NOMEM;
    }
    *out = inst;
    return RK_OK;
}
