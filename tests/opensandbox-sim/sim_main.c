/* opensandbox-sim entry point: options, HTTP daemon start-up, janitor, clean shutdown. */
#include "sim.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct sim_global g_sim = {
    .mu = PTHREAD_MUTEX_INITIALIZER,
    .threads_mu = PTHREAD_MUTEX_INITIALIZER,
    .threads_cv = PTHREAD_COND_INITIALIZER,
};

/* Print usage to f. */
static void sim_usage(FILE *f)
{
    fprintf(f, "usage: opensandbox-sim --listen HOST:PORT --root DIR [options]\n"
               "  --listen HOST:PORT       IPv4 address to bind (PORT 0 = pick a free port)\n"
               "  --root DIR               directory holding one sub-directory per sandbox\n"
               "  --api-key KEY            require OPEN-SANDBOX-API-KEY on the lifecycle API\n"
               "  --ready-delay-ms N       Pending -> Running delay (default 300)\n"
               "  --create-delay-ms N      POST /sandboxes answers after N ms (default 0)\n"
               "  --execd-start-ms N       execd answers N ms after Running (default 0)\n"
               "  --execd-header NAME:VAL  execd requires this header; discovery returns it\n"
               "  --egress-token TOKEN     egress API requires OPENSANDBOX-EGRESS-AUTH: TOKEN;\n"
               "                           discovery of port 18080 returns it\n"
               "  --max-sandboxes N        live sandbox cap (default 64)\n"
               "  --max-connections N      concurrent HTTP connections (default 512)\n"
               "  --max-timeout-s N        largest accepted sandbox timeout (default 86400)\n"
               "  --max-upload-mb N        request body cap for uploads/proxy (default 0 = none)\n"
               "  --no-pause               pause/resume answer 501 (like a Kubernetes runtime)\n"
               "  --no-snapshots           snapshot creation answers 501 (runtime without it)\n"
               "Prints 'opensandbox-sim ready on http://HOST:PORT' when ready; SIGTERM/SIGINT\n"
               "kill every process it started and exit 0. Fault control API: /_sim/faults.\n");
}

/* Parse a non-negative integer option value or exit(2). */
static int64_t sim_opt_num(const char *name, const char *v)
{
    char *end;
    errno = 0;
    long long n = strtoll(v, &end, 10);
    if (!*v || *end || errno || n < 0) {
        fprintf(stderr, "opensandbox-sim: %s needs a non-negative integer\n", name);
        exit(2);
    }
    return n;
}

/* Parse the command line into g_sim; exits on error. */
static void sim_parse_args(int argc, char **argv)
{
    const char *listen = NULL, *root = NULL;
    g_sim.ready_delay_ms = 300;
    g_sim.max_sandboxes = 64;
    g_sim.max_timeout_s = 86400;
    g_sim.max_upload = 0; /* no cap: the real execd and server proxy have none */
    g_sim.max_connections = 512;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            sim_usage(stdout);
            exit(0);
        }
        if (!strcmp(a, "--no-pause")) {
            g_sim.no_pause = true;
            continue;
        }
        if (!strcmp(a, "--no-snapshots")) {
            g_sim.no_snapshots = true;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "opensandbox-sim: unknown option or missing value: %s\n", a);
            sim_usage(stderr);
            exit(2);
        }
        const char *v = argv[++i];
        if (!strcmp(a, "--listen")) {
            listen = v;
        } else if (!strcmp(a, "--root")) {
            root = v;
        } else if (!strcmp(a, "--api-key")) {
            free(g_sim.api_key);
            g_sim.api_key = sim_strdup(v);
        } else if (!strcmp(a, "--ready-delay-ms")) {
            g_sim.ready_delay_ms = sim_opt_num(a, v);
        } else if (!strcmp(a, "--create-delay-ms")) {
            g_sim.create_delay_ms = sim_opt_num(a, v);
        } else if (!strcmp(a, "--execd-start-ms")) {
            g_sim.execd_start_ms = sim_opt_num(a, v);
        } else if (!strcmp(a, "--max-sandboxes")) {
            g_sim.max_sandboxes = (int)sim_opt_num(a, v);
        } else if (!strcmp(a, "--max-connections")) {
            g_sim.max_connections = (int)sim_opt_num(a, v);
        } else if (!strcmp(a, "--max-timeout-s")) {
            g_sim.max_timeout_s = sim_opt_num(a, v);
        } else if (!strcmp(a, "--max-upload-mb")) {
            g_sim.max_upload = (size_t)sim_opt_num(a, v) * 1024 * 1024;
        } else if (!strcmp(a, "--egress-token")) {
            free(g_sim.egress_token);
            g_sim.egress_token = sim_strdup(v);
        } else if (!strcmp(a, "--execd-header")) {
            const char *colon = strchr(v, ':');
            if (!colon || colon == v) {
                fprintf(stderr, "opensandbox-sim: --execd-header needs NAME:VALUE\n");
                exit(2);
            }
            free(g_sim.execd_header_name);
            free(g_sim.execd_header_value);
            g_sim.execd_header_name = strndup(v, (size_t)(colon - v));
            g_sim.execd_header_value = sim_strdup(colon + 1);
        } else {
            fprintf(stderr, "opensandbox-sim: unknown option %s\n", a);
            sim_usage(stderr);
            exit(2);
        }
    }
    if (!listen || !root) {
        sim_usage(stderr);
        exit(2);
    }
    const char *colon = strrchr(listen, ':');
    if (!colon || (size_t)(colon - listen) >= sizeof g_sim.listen_host) {
        fprintf(stderr, "opensandbox-sim: --listen needs HOST:PORT\n");
        exit(2);
    }
    memcpy(g_sim.listen_host, listen, (size_t)(colon - listen));
    g_sim.listen_host[colon - listen] = 0;
    if (!strcmp(g_sim.listen_host, "localhost"))
        snprintf(g_sim.listen_host, sizeof g_sim.listen_host, "127.0.0.1");
    int64_t port = sim_opt_num("--listen port", colon + 1);
    if (port > 65535) {
        fprintf(stderr, "opensandbox-sim: bad port\n");
        exit(2);
    }
    g_sim.listen_port = (int)port;
    if (sim_mkdir_p(root, 0755) != 0 || !realpath(root, g_sim.root)) {
        fprintf(stderr, "opensandbox-sim: cannot use --root %s: %s\n", root, strerror(errno));
        exit(2);
    }
}

/* Janitor: applies sandbox expiry every 200 ms until shutdown. */
static void *sim_janitor(void *arg)
{
    (void)arg;
    while (!g_sim.shutting_down) {
        pthread_mutex_lock(&g_sim.mu);
        sim_expire_locked(sim_now_ms());
        pthread_mutex_unlock(&g_sim.mu);
        sim_sleep_ms(200);
    }
    return NULL;
}

/* Program entry. */
int main(int argc, char **argv)
{
    sim_parse_args(argc, argv);
    sim_faults_init();
    signal(SIGPIPE, SIG_IGN);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL);

    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)g_sim.listen_port)};
    if (inet_pton(AF_INET, g_sim.listen_host, &sa.sin_addr) != 1) {
        fprintf(stderr, "opensandbox-sim: --listen host must be an IPv4 address\n");
        return 2;
    }
    /* A thread per connection (handlers block: command streams, injected latency), each
     * with a 512 KiB stack instead of glibc's 8 MiB, so that glibc's cache of freed stacks (40
     * MiB) keeps about 80 of them: a burst of fresh connections (a create per connection) then
     * reuses stacks instead of mapping and unmapping 8 MiB per connection, whose unmapping
     * interrupts every core to flush its TLB. */
    enum { SIM_THREAD_STACK = 512 * 1024 };
    struct MHD_Daemon *d = MHD_start_daemon(
        MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL |
            MHD_USE_ERROR_LOG | MHD_ALLOW_UPGRADE,
        0, sim_accept_policy, NULL, sim_access_handler, NULL, MHD_OPTION_SOCK_ADDR,
        (struct sockaddr *)&sa, MHD_OPTION_NOTIFY_COMPLETED, sim_request_completed, NULL,
        MHD_OPTION_THREAD_STACK_SIZE, (size_t)SIM_THREAD_STACK, MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned int)600, MHD_OPTION_CONNECTION_LIMIT, (unsigned int)g_sim.max_connections,
        MHD_OPTION_END);
    if (!d) {
        fprintf(stderr, "opensandbox-sim: cannot listen on %s:%d\n", g_sim.listen_host,
                g_sim.listen_port);
        return 1;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    if (info && info->port)
        g_sim.listen_port = info->port;
    pthread_t janitor;
    if (pthread_create(&janitor, NULL, sim_janitor, NULL) != 0) {
        fprintf(stderr, "opensandbox-sim: cannot start janitor thread\n");
        MHD_stop_daemon(d);
        return 1;
    }
    printf("opensandbox-sim ready on http://%s:%d\n", g_sim.listen_host, g_sim.listen_port);
    fflush(stdout);

    int sig = 0;
    while (sigwait(&set, &sig) != 0)
        ;
    g_sim.shutting_down = 1;
    sim_kill_everything();
    sim_proxy_ws_close_all(); /* WebSocket relays end on shutting_down */
    MHD_stop_daemon(d);
    sim_wait_threads();
    pthread_join(janitor, NULL);
    sim_free_all();
    sim_snapshots_free_all();
    free(g_sim.api_key);
    free(g_sim.execd_header_name);
    free(g_sim.execd_header_value);
    free(g_sim.egress_token);
    return 0;
}
