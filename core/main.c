/* SPDX-License-Identifier: Apache-2.0 */
/* rock-admin: command line, startup, signal handling and graceful drain. */
#include <curl/curl.h>
#include <getopt.h>
#include <malloc.h>
#include <signal.h>
#include <sys/resource.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/app.h"
#include "access/access.h"
#include "access/auth.h"
#include "config/config.h"
#include "access/cors.h"
#include "host/host.h"
#include "engine/http_server.h"
#include "obs/log.h"
#include "host/plugin_loader.h"
#include "relay/relay.h"
#include "api/routes.h"
#include "api/e2b.h"
#include "engine/router.h"
#include "obs/metrics.h"
#include "store/store.h"
#include "store/store_metrics.h"
#include "domain/sweeper.h"
#include "domain/create_queue.h"
#include "domain/lifecycle.h"
#include "domain/reconciler.h"
#include "domain/state_report.h"
#include "domain/endpoint_cache.h"
#include "relay/relay_loop.h"
#include "relay/relay_pool.h"
#include "relay/relay_touch.h"
#include "engine/tls.h"
#include "base/util.h"

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

/* The sentinel list as the store takes it: "host:port,host:port" (caller frees). */
static char *join_sentinels(char *const *list)
{
    size_t n = 1;
    for (size_t i = 0; list[i]; i++)
        n += strlen(list[i]) + 1;
    char *out = calloc(1, n);
    if (!out)
        return NULL;
    for (size_t i = 0; list[i]; i++) {
        if (i)
            strcat(out, ",");
        strcat(out, list[i]);
    }
    return out;
}

/* Open the store the config asks for. */
static struct rk_store *open_store(const struct rk_config *cfg)
{
    if (!*cfg->redis.host && !cfg->redis.sentinels[0]) {
        rk_warn("redis.host is empty: using the in-process store; sandbox state is not shared "
                "between processes and is lost on restart");
        struct rk_store *mst = rk_store_open_memory();
        rk_store_set_deleted_retention(mst, cfg->redis.deleted_retention_s);
        return mst;
    }
    char *sentinels = join_sentinels(cfg->redis.sentinels);
    if (!sentinels)
        return NULL;
    struct rk_redis_cfg rc = {
        .host = cfg->redis.host,
        .port = cfg->redis.port,
        .password = cfg->redis.password,
        .db = cfg->redis.db,
        .connect_timeout_ms = cfg->redis.connect_timeout_ms,
        .op_timeout_ms = cfg->redis.timeout_ms,
        .pool_size = cfg->redis.pool_size,
        .key_prefix = cfg->redis.key_prefix,
        .sentinels = sentinels,
        .master_name = cfg->redis.master_name,
        .username = cfg->redis.username,
        .password_file = cfg->redis.password_file,
        .sentinel_username = cfg->redis.sentinel_username,
        .sentinel_password = cfg->redis.sentinel_password,
        .sentinel_password_file = cfg->redis.sentinel_password_file,
        .min_replicas_ack = cfg->redis.min_replicas_ack,
        .wait_timeout_ms = cfg->redis.wait_timeout_ms,
    };
    struct rk_store *st = rk_store_open_redis(&rc);
    if (!st) {
        free(sentinels);
        return NULL;
    }
    rk_store_set_deleted_retention(st, cfg->redis.deleted_retention_s);
    if (*sentinels) {
        char err[RK_STORE_ERRLEN];
        if (rk_store_ping(st, err, sizeof err) != RK_STORE_OK)
            rk_warn("redis master \"%s\" is not reachable yet (%s); requests needing it fail "
                    "until it is",
                    cfg->redis.master_name, err);
        else
            rk_info("using redis master \"%s\" via sentinels %s", cfg->redis.master_name,
                    sentinels);
        free(sentinels);
        return st;
    }
    free(sentinels);
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
    int sig = 0;
    for (;;) {
        if (sigwait(set, &sig) != 0)
            continue;
        if (sig == SIGHUP) {
            /* Tokens and the TLS certificate are re-read; the rest needs a restart. */
            rk_auth_reload();
            rk_tls_reload();
            rk_info("SIGHUP: other configuration changes need a restart");
            continue;
        }
        break;
    }
    app->draining = 1;
    rk_http_quiesce(app);
    rk_relay_loops_drain(); /* WebSocket and port-forward relays: 1001 between frames */
    /* Logged once readiness reports draining and the listener is closed
     * (tests wait for this line). */
    rk_info("received %s: draining (up to %d s)", sig == SIGTERM ? "SIGTERM" : "SIGINT",
            app->cfg->server.drain_timeout_s);
    int64_t deadline = rk_now_ms() + (int64_t)app->cfg->server.drain_timeout_s * 1000;
    while (rk_http_inflight(app) > 0 && rk_now_ms() < deadline) {
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    /* Upgraded sessions live on the relay loops and are no longer in flight for the
     * server: let them send their 1001 close and get the answer before it stops. */
    rk_relay_wait(deadline);
    int left = rk_http_inflight(app);
    if (left > 0)
        rk_warn("drain deadline reached: aborting %d in-flight request(s)", left);
    /* Creates running now finish (a few seconds at most); the queued ones stay in the
     * store for another admin (or this one after a restart). */
    int64_t creates_until = rk_now_ms() + 3000;
    rk_create_queue_stop(app, deadline > creates_until ? deadline : creates_until);
    app->stopping = 1;
    rk_host_shutdown();
    if (rk_app_bg_wait(rk_now_ms() + 5000) > 0)
        rk_warn("background jobs still running at exit");
}

/* proxy.relay_threads, 0 = one loop per online CPU. */
static int relay_threads(const struct rk_config *cfg)
{
    if (cfg->proxy.relay_threads > 0)
        return cfg->proxy.relay_threads;
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > 64 ? 64 : (int)n;
}

/* File descriptors per connection (client socket + upstream connection) and a reserve for
 * pooled connections, Redis, plugins and logs: server.max_connections is checked against the
 * descriptor limit with these. */
#define FDS_PER_CONNECTION 2
#define FDS_RESERVE 1024

/* Raise the soft RLIMIT_NOFILE to the hard limit (as nginx's worker_rlimit_nofile does) and
 * lower server.max_connections when it cannot fit; the outcome is written to line. */
static void fit_fd_limit(struct rk_config *cfg, char *line, size_t len)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) {
        snprintf(line, len, "file descriptors: limit unknown");
        return;
    }
    rlim_t before = rl.rlim_cur;
    if (rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
            rl.rlim_cur = before;
    }
    long long limit = rl.rlim_cur == RLIM_INFINITY ? (1LL << 30) : (long long)rl.rlim_cur;
    long long fit = (limit - FDS_RESERVE) / FDS_PER_CONNECTION;
    if (fit < 16)
        fit = 16;
    const char *verdict = "fits";
    if ((long long)cfg->server.max_connections > fit) {
        cfg->server.max_connections = (int)fit;
        verdict = "lowered to fit";
    }
    snprintf(line, len,
             "file descriptors: soft limit %lld (was %lld, hard %lld); server.max_connections %d "
             "%s (%d per connection + %d reserved)",
             limit, (long long)before, rl.rlim_max == RLIM_INFINITY ? -1LL : (long long)rl.rlim_max,
             cfg->server.max_connections, verdict, FDS_PER_CONNECTION, FDS_RESERVE);
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"config", required_argument, NULL, 'c'}, {"port", required_argument, NULL, 'p'},
        {"test", no_argument, NULL, 't'},         {"version", no_argument, NULL, 'V'},
        {"help", no_argument, NULL, 'h'},         {NULL, 0, NULL, 0},
    };
    /* No glibc fastbins: a request frees many small objects, and every later allocation of
     * 1 KiB or more (response buffers, the call arena) then ran malloc_consolidate over them
     * (3% of get_status CPU). Freed chunks past the per-thread cache go straight to the normal
     * bins instead (get_status 2-3% cheaper, measured). */
    mallopt(M_MXFAST, 0);
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
    if (cfg) {
        /* Securing rock-admin: token file, TLS pair, CORS origins (also checked by -t). */
        rk_auth_load(cfg, &problems);
        rk_tls_load(cfg, &problems);
        rk_cors_check_config(cfg, &problems);
    }
    if (!cfg || problems.n) {
        rk_auth_free();
        rk_tls_free();
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
    rk_log_set_format(!strcmp(cfg->log.format, "json") ? RK_LOG_FORMAT_JSON : RK_LOG_FORMAT_TEXT);

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
        rk_auth_free();
        rk_tls_free();
        rk_plugin_unload(pl);
        rk_config_free(cfg);
        curl_global_cleanup();
        return 1;
    }
    /* rock-admin has no worker scheduler; RK_CAP_SCHEDULER is reserved and
     * dropped by the loader, so the original's warning always applies. */
    if (cfg->scheduler.enabled)
        rk_warn("Scheduler is enabled but unsupported for operator_type=%s; skipping worker "
                "scheduler",
                cfg->runtime.operator_type);
    char fd_line[256];
    int max_conn_asked = cfg->server.max_connections;
    fit_fd_limit(cfg, fd_line, sizeof fd_line);
    if (cfg->runtime.stop_as_delete)
        rk_warn("runtime.stop_as_delete is deprecated; use the operator's stop mode instead "
                "(opensandbox.stop_mode: delete)%s",
                (pl->caps & RK_CAP_STOP) ? "; ignored because the operator can stop" : "");
    if (test_only) {
        printf("rock-admin: configuration %s is valid (operator %s %s, ABI %u.%u)\n", cfg_path,
               pl->desc->name, pl->desc->version ? pl->desc->version : "", pl->desc->abi_major,
               pl->desc->abi_minor);
        printf("rock-admin: %s\n", fd_line);
        rk_config_dump(cfg, pl->cfg_view, pl->desc->config, dump_line, NULL);
        rk_auth_free();
        rk_tls_free();
        rk_plugin_unload(pl);
        rk_config_free(cfg);
        curl_global_cleanup();
        return 0;
    }
    rk_notice("rock-admin %s starting: operator %s %s (ABI %u.%u) from %s", PACKAGE_VERSION,
              pl->desc->name, pl->desc->version ? pl->desc->version : "", pl->desc->abi_major,
              pl->desc->abi_minor, pl->path);

    if (cfg->server.max_connections < max_conn_asked)
        rk_warn("%s: server.max_connections %d does not fit the descriptor limit", fd_line,
                max_conn_asked);
    else
        rk_info("%s", fd_line);

    struct rk_app app = {.cfg = cfg, .plugin = pl};
    app.store = open_store(cfg);
    int rc = 1;
    if (!app.store) {
        rk_err("cannot open the sandbox store");
        goto out;
    }
    /* The relay's routes are matched before the API's (its /proxy/{id}/port/...
     * form wins over the API's /proxy/{id}/{*} stub). */
    rk_router_use(rk_relay_routes);
    rk_router_use(rk_api_routes);
    rk_router_use(rk_e2b_routes);
    rk_metrics_set_operator(pl->desc->name, pl->desc->version);
    rk_metrics_collector_add("store", rk_store_metrics_collect, app.store);
    rk_metrics_collector_add("lifecycle", rk_lifecycle_metrics_collect, NULL);
    rk_access_install();
    if (rk_relay_touch_start(&app) != 0 || rk_relay_loops_start(&app, relay_threads(cfg)) != 0)
        goto out;
    if (rk_create_queue_start(&app, rk_lifecycle_create_queued) != 0) {
        rk_err("cannot start the create queue");
        goto out;
    }
    if (rk_http_start(&app) != 0)
        goto out;
    if (rk_sweeper_start(&app) != 0)
        rk_warn("cannot start the background thread (idle sweep, job take-over)");
    if (rk_reconciler_start(&app) != 0)
        rk_warn("cannot start the reconciler; status reads ask the backend");
    if (rk_state_reports_start(&app) != 0)
        rk_warn("cannot start the thread that applies the plugin's state reports; list passes "
                "bring the same news later");
    rk_notice("rock-admin ready on %s://%s:%d%s", rk_tls_enabled() ? "https" : "http",
              cfg->server.host, rk_http_port(&app),
              rk_auth_enabled() ? " (bearer-token authentication on)" : "");
    wait_and_drain(&app, &set);
    rk_state_reports_stop();
    rk_reconciler_stop(&app);
    rk_sweeper_stop(&app);
    rc = 0;
out:
    rk_relay_loops_stop(); /* every relay still open is closed and freed */
    rk_relay_touch_stop();
    rk_create_queue_stop(&app, rk_now_ms() + 3000);
    rk_http_stop(&app);
    /* Detached HTTP relay workers may still be inside libcurl. */
    rk_relay_wait(rk_now_ms() + 5000);
    rk_relay_pool_shutdown();
    rk_ep_cache_clear();
    rk_plugin_unload(pl);
    rk_store_close(app.store);
    rk_auth_free();
    rk_tls_free();
    rk_config_free(cfg);
    curl_global_cleanup();
    rk_notice("rock-admin stopped");
    return rc;
}
