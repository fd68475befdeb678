/* SPDX-License-Identifier: Apache-2.0 */
/*
 * hello.so: the smallest complete rock-admin operator plugin.
 *
 * "Sandboxes" are entries in an in-memory table; create makes one that is
 * running at once, status reports it, destroy removes it, and exec answers
 * `echo ARGS` by printing ARGS (any other command fails with exit code 127).
 * It shows the whole contract a real backend plugin follows: one exported
 * descriptor, a declarative config schema, capability bits with refusal texts,
 * arena-owned results, thread safety, and errors reported with set_error().
 *
 * Build it out of tree against the installed SDK:
 *     cc $(pkg-config --cflags rock-admin-plugin) -shared -fPIC -o hello.so hello.c -lpthread
 */
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rock-admin/operator.h>

/* One instance per daemon, built by init() from the validated config. */
struct hello {
    const struct rk_host *host; /* the core's services; valid until fini() */
    pthread_mutex_t mu;         /* every entry point may run on many threads */
    long long next_id;
    long long max_sandboxes;
    char **ids; /* live upstream ids (malloc'd, owned by the instance) */
    size_t n;
};

/* ---- config schema: the core parses and validates the `hello:` section ---- */

static const struct rk_cfg_key hello_config[] = {
    {.name = "max_sandboxes",
     .type = RK_CFG_INT,
     .flags = RK_CFGF_POSITIVE,
     .default_value = "100",
     .doc = "how many sandboxes may exist at once"},
    {.name = NULL},
};

/* Texts the core answers with when a client asks for something not offered. */
static const struct rk_cap_msg hello_unsupported[] = {
    {RK_CAP_STOP, "Hello backend does not support stop; delete the sandbox instead"},
    {RK_CAP_FILE_READ, "Hello backend has no files"},
    {0, NULL},
};

/* ---- lifecycle ------------------------------------------------------------- */

static rk_status hello_init(const struct rk_host *host, const struct rk_cfg *cfg, void **inst_out)
{
    /* init() validates and builds; it never contacts a backend (rock-admin -t runs it). */
    struct hello *h = calloc(1, sizeof *h);
    if (!h)
        return RK_E_NOMEM;
    h->host = host;
    h->max_sandboxes = host->cfg_int(cfg, "max_sandboxes");
    if (h->max_sandboxes > 100000) {
        host->cfg_problem(cfg, "max_sandboxes", "must be at most 100000, got %lld",
                          h->max_sandboxes);
        free(h);
        return RK_E_INVALID;
    }
    pthread_mutex_init(&h->mu, NULL);
    host->log(RK_LOG_INFO, "hello operator ready (max_sandboxes=%lld)", h->max_sandboxes);
    *inst_out = h;
    return RK_OK;
}

static void hello_fini(void *inst)
{
    struct hello *h = inst;
    for (size_t i = 0; i < h->n; i++)
        free(h->ids[i]);
    free(h->ids);
    pthread_mutex_destroy(&h->mu);
    free(h);
}

/* Index of an upstream id, or -1. Caller holds h->mu. */
static long find_locked(const struct hello *h, const char *id)
{
    for (size_t i = 0; id && i < h->n; i++)
        if (strcmp(h->ids[i], id) == 0)
            return (long)i;
    return -1;
}

static rk_status hello_create(void *inst, struct rk_call *call, const struct rk_create_spec *spec,
                              struct rk_created *out)
{
    struct hello *h = inst;
    char id[64];
    pthread_mutex_lock(&h->mu);
    if ((long long)h->n >= h->max_sandboxes) {
        pthread_mutex_unlock(&h->mu);
        return h->host->set_error(call, RK_E_UNAVAILABLE, "hello: %lld sandboxes already exist",
                                  h->max_sandboxes);
    }
    snprintf(id, sizeof id, "hello-%lld", ++h->next_id);
    char **grown = realloc(h->ids, (h->n + 1) * sizeof *grown);
    char *copy = strdup(id);
    if (!grown || !copy) {
        if (grown)
            h->ids = grown;
        free(copy);
        pthread_mutex_unlock(&h->mu);
        return h->host->set_error(call, RK_E_NOMEM, "hello: out of memory");
    }
    h->ids = grown;
    h->ids[h->n++] = copy;
    pthread_mutex_unlock(&h->mu);

    /* Results live in the per-request arena: the core frees them. */
    out->upstream_id = h->host->arena_strdup(call, id);
    out->image = NULL;     /* the image is used as requested */
    out->host_name = NULL; /* shown as the upstream id */
    if (!out->upstream_id)
        return RK_E_NOMEM;
    /* log_call (ABI 1.1) puts the request id on the line; an older core
     * lacks it, so test before calling. */
    if (RK_HOST_HAS(h->host, log_call))
        h->host->log_call(call, RK_LOG_INFO, "created %s for %s", id, spec->sandbox_id);
    else
        h->host->log(RK_LOG_INFO, "created %s for %s (request %s)", id, spec->sandbox_id,
                     h->host->request_id(call));
    return RK_OK;
}

static rk_status hello_status(void *inst, struct rk_call *call, const struct rk_sandbox_ref *ref,
                              struct rk_status_info *out)
{
    struct hello *h = inst;
    if (!ref->upstream_id) /* create outcome unknown; nothing to look up by in memory */
        return h->host->set_error(call, RK_E_NOT_FOUND, "hello: no sandbox for %s",
                                  ref->sandbox_id);
    pthread_mutex_lock(&h->mu);
    long i = find_locked(h, ref->upstream_id);
    pthread_mutex_unlock(&h->mu);
    if (i < 0)
        return h->host->set_error(call, RK_E_NOT_FOUND, "hello: %s is gone", ref->upstream_id);
    out->state = RK_STATE_RUNNING;
    out->failed = 0;
    out->reason = NULL;
    out->upstream_id = NULL;
    return RK_OK;
}

static rk_status hello_destroy(void *inst, struct rk_call *call, const struct rk_sandbox_ref *ref)
{
    struct hello *h = inst;
    (void)call;
    pthread_mutex_lock(&h->mu);
    long i = find_locked(h, ref->upstream_id);
    if (i >= 0) {
        free(h->ids[i]);
        h->ids[i] = h->ids[--h->n];
    }
    pthread_mutex_unlock(&h->mu);
    return RK_OK; /* "already gone" is success */
}

/* ---- commands -------------------------------------------------------------- */

static rk_status hello_exec(void *inst, struct rk_call *call, const struct rk_sandbox_ref *ref,
                            const struct rk_exec_req *req, const struct rk_sink *sink,
                            struct rk_exec_res *out)
{
    struct hello *h = inst;
    (void)ref;
    if (h->host->cancelled(call))
        return RK_E_CANCELLED;
    out->has_exit_code = 1;
    out->timed_out = 0;
    out->error_text = NULL;
    const char *cmd = req->command;
    if (strncmp(cmd, "echo", 4) == 0 && (cmd[4] == ' ' || cmd[4] == '\0')) {
        const char *args = cmd[4] ? cmd + 5 : "";
        /* Output goes to the core's sink; stop if it says so (cap hit, client gone). */
        rk_status st = sink->write(sink->ctx, RK_STREAM_STDOUT, args, strlen(args));
        if (st == RK_OK)
            st = sink->write(sink->ctx, RK_STREAM_STDOUT, "\n", 1);
        if (st != RK_OK)
            return st;
        out->exit_code = 0;
        return RK_OK;
    }
    static const char msg[] = "hello: only echo is available\n";
    rk_status st = sink->write(sink->ctx, RK_STREAM_STDERR, msg, sizeof msg - 1);
    if (st != RK_OK)
        return st;
    out->exit_code = 127;
    return RK_OK;
}

/* ---- the descriptor: the one exported symbol -------------------------------- */

static const struct rk_operator_ops hello_ops = {
    .struct_size = sizeof(struct rk_operator_ops),
    .init = hello_init,
    .fini = hello_fini,
    .create = hello_create,
    .status = hello_status,
    .destroy = hello_destroy,
    .exec = hello_exec,
};

RK_OPERATOR_EXPORT = {
    .magic = RK_OPERATOR_MAGIC,
    .abi_major = RK_OPERATOR_ABI_MAJOR,
    .abi_minor = RK_OPERATOR_ABI_MINOR,
    .struct_size = sizeof(struct rk_operator),
    .abi_flags = RK_ABI_FLAGS,
    .name = "hello",        /* file hello.so, runtime.operator_type: hello */
    .backend_tag = "hello", /* written into every record; checked on every request */
    .display_name = "Hello",
    .version = "1.0.0",
    .flags = RK_OPF_THREADSAFE,
    .caps = RK_CAP_EXEC | RK_CAP_DELETE_PENDING,
    .config = hello_config,
    .unsupported = hello_unsupported,
    .ops = &hello_ops,
    RK_OPERATOR_ELEMENT_SIZES, /* strides of hello_config[] and hello_unsupported[] (1.1) */
};
