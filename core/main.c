/* SPDX-License-Identifier: Apache-2.0 */
/* rock-admin: command line, startup, signal handling and graceful drain. */
#include <curl/curl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "app.h"
#include "config.h"
#include "host.h"
#include "http_server.h"
#include "log.h"
#include "plugin_loader.h"
#include "relay.h"
#include "store.h"
#include "sweeper.h"
#include "util.h"

#ifndef SYSCONFDIR
#define SYSCONFDIR "/etc"
#endif
#ifndef PACKAGE_VERSION
#define PACKAGE_VERSION "0.1.0"
#endif

static void usage(FILE *fp)
{
    fprintf(fp,
            "Usage: rock-admin [-c FILE] [-p PORT] [-t] [--version] [-h]\n"
            "Serve the ROCK Admin API, delegating sandboxes to the configured operator plugin.\n\n"
            "  -c, --config FILE  configuration file (default $ROCK_CONFIG, else %s/rock-admin/"
            "rock-admin.yml)\n"
            "  -p, --port PORT    listen on PORT instead of server.port\n"
            "  -t, --test         check the configuration and the plugin, then exit 0 or 1\n"
            "      --version      print the version and the operator ABI version\n"
            "  -h, --help         show this help\n",
            SYSCONFDIR);
}

static void print_problems(const struct rk_problems *p)
{
    for (size_t i = 0; i < p->n; i++)
        fprintf(stderr, "%s\n", p->lines[i]);
}

/* Emit callback for rk_config_dump: one line per setting on stdout. */
static void dump_line(const char *line, void *ctx)
{
    (void)ctx;
    printf("  %s\n", line);
}

/* Open the store the config asks for. */
static struct rk_store *open_store(const struct rk_config *cfg)
{
    if (!*cfg->redis.host) {
        rk_warn("redis.host is empty: using the in-process store; sandbox state is not shared "
                "between processes and is lost on restart");
        return rk_store_open_memory();
    }
    struct rk_redis_cfg rc = {
        .host = cfg->redis.host,
        .port = cfg->redis.port,
        .password = cfg->redis.password,
        .db = cfg->redis.db,
        .connect_timeout_ms = cfg->redis.connect_timeout_ms,
        .op_timeout_ms = cfg->redis.timeout_ms,
        .pool_size = cfg->redis.pool_size,
        .key_prefix = cfg->redis.key_prefix,
    };
    struct rk_store *st = rk_store_open_redis(&rc);
    if (!st)
        return NULL;
    char err[RK_STORE_ERRLEN];
    if (rk_store_ping(st, err, sizeof err) != RK_STORE_OK)
        rk_warn("redis at %s:%d is not reachable yet (%s); requests needing it fail until it is",
                cfg->redis.host, cfg->redis.port, err);
    else
        rk_info("using redis at %s:%d db %d", cfg->redis.host, cfg->redis.port, cfg->redis.db);
    return st;
}

/* Wait for SIGTERM/SIGINT (blocked in every thread), then drain. */
static void wait_and_drain(struct rk_app *app, sigset_t *set)
{
    for (;;) {
        int sig = 0;
        if (sigwait(set, &sig) != 0)
            continue;
        if (sig == SIGHUP) {
            rk_info("SIGHUP ignored: restart the service to apply configuration changes");
            continue;
        }
        rk_info("received %s: draining (up to %d s)", sig == SIGTERM ? "SIGTERM" : "SIGINT",
                app->cfg->server.drain_timeout_s);
        break;
    }
    app->draining = 1;
    rk_http_quiesce(app);
    int64_t deadline = rk_now_ms() + (int64_t)app->cfg->server.drain_timeout_s * 1000;
    while (rk_http_inflight(app) > 0 && rk_now_ms() < deadline) {
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    int left = rk_http_inflight(app);
    if (left > 0)
        rk_warn("drain deadline reached: aborting %d in-flight request(s)", left);
    app->stopping = 1;
    rk_host_shutdown();
    if (rk_app_bg_wait(rk_now_ms() + 5000) > 0)
        rk_warn("background jobs still running at exit");
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"config", required_argument, NULL, 'c'}, {"port", required_argument, NULL, 'p'},
        {"test", no_argument, NULL, 't'},         {"version", no_argument, NULL, 'V'},
        {"help", no_argument, NULL, 'h'},         {NULL, 0, NULL, 0},
    };
    const char *cfg_path = getenv("ROCK_CONFIG");
    const char *port_opt = NULL;
    int test_only = 0;
    int c;
    while ((c = getopt_long(argc, argv, "c:p:th", longopts, NULL)) != -1) {
        switch (c) {
        case 'c':
            cfg_path = optarg;
            break;
        case 'p':
            port_opt = optarg;
            break;
        case 't':
            test_only = 1;
            break;
        case 'V':
            printf("rock-admin %s (operator ABI %d.%d)\n", PACKAGE_VERSION, RK_OPERATOR_ABI_MAJOR,
                   RK_OPERATOR_ABI_MINOR);
            return 0;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc) {
        usage(stderr);
        return 2;
    }
    if (!cfg_path || !*cfg_path)
        cfg_path = SYSCONFDIR "/rock-admin/rock-admin.yml";

    /* Signals are handled synchronously by the main thread only. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    rk_time_init();
    struct rk_problems problems = {0};
    struct rk_config *cfg = rk_config_load(cfg_path, &problems);
    if (cfg && port_opt) {
        char *end;
        long port = strtol(port_opt, &end, 10);
        if (*end || port < 0 || port > 65535)
            rk_problems_add(&problems, "--port: \"%s\" is not a port number", port_opt);
        else
            cfg->server.port = (int)port;
    }
    if (!cfg || problems.n) {
        print_problems(&problems);
        rk_problems_free(&problems);
        rk_config_free(cfg);
        return 1;
    }
    if (!strcmp(cfg->log.level, "error"))
        rk_log_set_level(RK_LOG_ERROR);
    else if (!strcmp(cfg->log.level, "warning"))
        rk_log_set_level(RK_LOG_WARNING);
    else if (!strcmp(cfg->log.level, "debug"))
        rk_log_set_level(RK_LOG_DEBUG);

    /* ROCK_PLUGIN_DIR overrides runtime.plugin_dir (tests, uninstalled builds). */
    const char *pdir = getenv("ROCK_PLUGIN_DIR");
    if (pdir && *pdir) {
        free(cfg->runtime.plugin_dir);
        cfg->runtime.plugin_dir = strdup(pdir);
    }
    /* libcurl is initialised once, before any plugin can use it. */
    curl_global_init(CURL_GLOBAL_DEFAULT);
    struct rk_plugin *pl =
        rk_plugin_load(cfg->runtime.plugin_dir, cfg->runtime.operator_type, &problems);
    if (pl)
        rk_plugin_init(pl, cfg, &problems);
    if (problems.n) {
        print_problems(&problems);
        rk_problems_free(&problems);
        rk_plugin_unload(pl);
        rk_config_free(cfg);
        curl_global_cleanup();
        return 1;
    }
    if (cfg->scheduler.enabled && !(pl->caps & RK_CAP_SCHEDULER))
        rk_warn("Scheduler is enabled but unsupported for operator_type=%s; skipping worker "
                "scheduler",
                cfg->runtime.operator_type);
    if (cfg->runtime.stop_as_delete)
        rk_warn("runtime.stop_as_delete is deprecated; use the operator's stop mode instead "
                "(opensandbox.stop_mode: delete)%s",
                (pl->caps & RK_CAP_STOP) ? "; ignored because the operator can stop" : "");
    if (test_only) {
        printf("rock-admin: configuration %s is valid (operator %s %s, ABI %u.%u)\n", cfg_path,
               pl->desc->name, pl->desc->version ? pl->desc->version : "", pl->desc->abi_major,
               pl->desc->abi_minor);
        rk_config_dump(cfg, pl->cfg_view, pl->desc->config, dump_line, NULL);
        rk_plugin_unload(pl);
        rk_config_free(cfg);
        curl_global_cleanup();
        return 0;
    }
    rk_notice("rock-admin %s starting: operator %s %s (ABI %u.%u) from %s", PACKAGE_VERSION,
              pl->desc->name, pl->desc->version ? pl->desc->version : "", pl->desc->abi_major,
              pl->desc->abi_minor, pl->path);

    struct rk_app app = {.cfg = cfg, .plugin = pl};
    app.store = open_store(cfg);
    int rc = 1;
    if (!app.store) {
        rk_err("cannot open the sandbox store");
        goto out;
    }
    if (rk_http_start(&app) != 0)
        goto out;
    if (rk_sweeper_start(&app) != 0)
        rk_warn("cannot start the idle sweeper");
    rk_notice("rock-admin ready on http://%s:%d", cfg->server.host, rk_http_port(&app));
    wait_and_drain(&app, &set);
    rk_sweeper_stop(&app);
    rc = 0;
out:
    rk_http_stop(&app);
    /* Detached HTTP relay workers may still be inside libcurl. */
    rk_relay_wait(rk_now_ms() + 5000);
    rk_plugin_unload(pl);
    rk_store_close(app.store);
    rk_config_free(cfg);
    curl_global_cleanup();
    rk_notice("rock-admin stopped");
    return rc;
}
