/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file os_lifecycle.c
 * @brief Sandbox lifecycle: create (with lost-reply adoption), status, kill and the
 *        reconciler's list (requests through os_lcapi.c).
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <json-c/json.h>

#include "os_internal.h"

/** Metadata key that records the ROCK id upstream. */
#define OS_META_ROCK_ID "rock_sandbox_id"
/** Most list pages read while looking a sandbox up by metadata. */
#define OS_LIST_MAX_PAGES 10
/** Pages of 200 the reconciler's list pass reads at most (100,000 sandboxes). */
#define OS_RECONCILE_MAX_PAGES 500

/** One sandbox found by metadata. */
struct lc_found {
    char *id;
    char *state;
    char *reason;
    char *since; /* status.lastTransitionAt */
};

/** Free a found list. */
static void found_free(struct lc_found *f, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(f[i].id);
        free(f[i].state);
        free(f[i].reason);
        free(f[i].since);
    }
    free(f);
}

/** Reason text of a status object: "reason: message" or either part. */
static char *status_reason(json_object *st)
{
    return os_lc_reason_text(os_lc_jstr(st, "reason"), os_lc_jstr(st, "message"));
}

/** List sandboxes whose metadata rock_sandbox_id equals rock_id (all pages, bounded). */
static rk_status lc_find(struct os_inst *inst, struct rk_call *call, const char *rock_id,
                         const char *op, struct lc_found **out, size_t *out_n)
{
    *out = NULL;
    *out_n = 0;
    struct os_sb sb = {0};
    char *enc = os_metadata_filter(OS_META_ROCK_ID, rock_id);
    if (!enc)
        return inst->host->set_error(call, RK_E_NOMEM, "opensandbox %s failed: out of memory", op);
    struct lc_found *list = NULL;
    size_t n = 0, cap = 0;
    rk_status rs = RK_OK;
    for (int page = 1; page <= OS_LIST_MAX_PAGES && rs == RK_OK; page++) {
        os_sb_printf(&sb, "/sandboxes?metadata=%s&page=%d&pageSize=200", enc, page);
        char *path = os_sb_take(&sb);
        struct os_xfer x;
        rs = path ? os_lc_xfer(&x, inst, call, "GET", path) : RK_E_NOMEM;
        free(path);
        if (rs == RK_OK)
            rs = os_xfer_perform(&x);
        if (rs != RK_OK) {
            os_lc_xfer_fail(inst, call, rs == RK_E_TOO_LARGE ? RK_E_UPSTREAM : rs, op, rock_id, &x);
            os_xfer_cleanup(&x);
            break;
        }
        if (x.status != 200) {
            rs = os_lc_http_fail(inst, call, RK_E_UPSTREAM, op, rock_id, &x);
            os_xfer_cleanup(&x);
            break;
        }
        struct os_lc_page pg;
        if (os_lc_page_open(&pg, x.body, x.body_len, OS_META_ROCK_ID) != 0) {
            os_xfer_cleanup(&x);
            rs = inst->host->set_error(call, RK_E_UPSTREAM,
                                       "opensandbox %s failed for %s: malformed list response", op,
                                       rock_id);
            break;
        }
        struct os_lc_item it;
        int got;
        while ((got = os_lc_page_next(&pg, &it)) == 1) {
            if (!it.id)
                continue;
            if (n == cap) {
                size_t nc = cap ? cap * 2 : 16;
                struct lc_found *nl = realloc(list, nc * sizeof(*list));
                if (!nl) {
                    got = -1;
                    break;
                }
                list = nl;
                cap = nc;
            }
            list[n].id = strdup(it.id);
            list[n].state = it.state ? strdup(it.state) : NULL;
            list[n].reason = os_lc_reason_text(it.reason, it.message);
            list[n].since = it.since ? strdup(it.since) : NULL;
            n++;
        }
        int more = pg.more;
        os_lc_page_close(&pg);
        os_xfer_cleanup(&x);
        if (got < 0) {
            rs = RK_E_NOMEM;
            break;
        }
        if (!more)
            break;
    }
    free(enc);
    if (rs != RK_OK) {
        found_free(list, n);
        return rs;
    }
    for (size_t i = 0; i < n; i++) {
        if (!list[i].id) {
            found_free(list, n);
            return RK_E_NOMEM;
        }
    }
    *out = list;
    *out_n = n;
    return RK_OK;
}

/** Index of the preferred match (first not Terminated), or 0. */
static size_t found_pick(const struct lc_found *f, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (!f[i].state || strcmp(f[i].state, "Terminated") != 0)
            return i;
    }
    return 0;
}

/** DELETE one sandbox; 404 counts as success. */
static rk_status lc_kill(struct os_inst *inst, struct rk_call *call, const char *osid)
{
    char *path = os_sbx_path(osid, "");
    struct os_xfer x;
    rk_status s = path ? os_lc_xfer(&x, inst, call, "DELETE", path) : RK_E_NOMEM;
    free(path);
    if (s == RK_OK)
        s = os_xfer_perform(&x);
    if (s != RK_OK) {
        s = os_lc_xfer_fail(inst, call, s == RK_E_TOO_LARGE ? RK_E_UPSTREAM : s, "kill", osid, &x);
    } else if (!(x.status >= 200 && x.status < 300) && x.status != 404) {
        s = os_lc_http_fail(inst, call, RK_E_UPSTREAM, "kill", osid, &x);
    }
    os_xfer_cleanup(&x);
    return s;
}

int64_t os_lc_add_sandbox_fields(const struct os_inst *inst, const struct rk_create_spec *spec,
                                 json_object *root)
{
    json_object *res = json_object_new_object();
    char *cpu = os_format_cpu(spec->cpus, spec->limit_cpus);
    char *mem = (spec->memory && *spec->memory) ? os_mem_to_k8s(spec->memory) : NULL;
    if (cpu)
        json_object_object_add(res, "cpu", json_object_new_string(cpu));
    if (mem && *mem)
        json_object_object_add(res, "memory", json_object_new_string(mem));
    free(cpu);
    free(mem);
    json_object_object_add(root, "resourceLimits", res);
    json_object *md = json_object_new_object();
#define MD_OR_DEFAULT(v) ((v) && *(v) ? (v) : "default")
    json_object_object_add(md, OS_META_ROCK_ID,
                           json_object_new_string(spec->sandbox_id ? spec->sandbox_id : ""));
    json_object_object_add(md, "user_id", json_object_new_string(MD_OR_DEFAULT(spec->user_id)));
    json_object_object_add(md, "experiment_id",
                           json_object_new_string(MD_OR_DEFAULT(spec->experiment_id)));
    json_object_object_add(md, "namespace",
                           json_object_new_string(MD_OR_DEFAULT(spec->namespace_name)));
#undef MD_OR_DEFAULT
    json_object_object_add(root, "metadata", md);
    int64_t timeout = inst->sandbox_timeout_s;
    if (inst->renew_margin_s > 0 && spec->idle_timeout_s > 0) /* lifetime by renewal */
        timeout = spec->idle_timeout_s + inst->renew_margin_s;
    if (timeout > 0)
        json_object_object_add(root, "timeout", json_object_new_int64(timeout));
    json_object_object_add(root, "secureAccess", json_object_new_boolean(0));
    return timeout > 0 ? timeout : 0;
}

/** Build the create request body; NULL on OOM. */
static char *create_body(struct os_inst *inst, const struct rk_create_spec *spec, const char *image)
{
    json_object *root = json_object_new_object();
    json_object *img = json_object_new_object();
    json_object_object_add(img, "uri", json_object_new_string(image));
    json_object_object_add(root, "image", img);
    json_object *ep = json_object_new_array();
    json_object_array_add(ep, json_object_new_string("tail"));
    json_object_array_add(ep, json_object_new_string("-f"));
    json_object_array_add(ep, json_object_new_string("/dev/null"));
    json_object_object_add(root, "entrypoint", ep);
    if (spec->env_len)
        json_object_object_add(root, "env", os_env_object(spec->env, spec->env_len));
    os_lc_add_sandbox_fields(inst, spec, root);
    const char *s = json_object_to_json_string_ext(root, JSON_C_TO_STRING_PLAIN |
                                                             JSON_C_TO_STRING_NOSLASHESCAPE);
    char *r = s ? strdup(s) : NULL;
    json_object_put(root);
    return r;
}

/** Adopt a sandbox created by a request whose reply was lost; 1 if one was found. */
static int adopt_lost(struct os_inst *inst, struct rk_call *call, const char *rock_id,
                      struct rk_created *out)
{
    struct lc_found *f = NULL;
    size_t n = 0;
    if (lc_find(inst, call, rock_id, "create", &f, &n) != RK_OK || n == 0) {
        found_free(f, n);
        return 0;
    }
    size_t pick = found_pick(f, n);
    for (size_t i = 0; i < n; i++) {
        if (i != pick)
            lc_kill(inst, call, f[i].id); /* duplicates: best effort */
    }
    out->upstream_id = inst->host->arena_strdup(call, f[pick].id);
    found_free(f, n);
    inst->host->log(RK_LOG_WARNING, "create reply lost for %s; adopted the sandbox found upstream",
                    rock_id);
    return out->upstream_id != NULL;
}

/** Create a sandbox; on an unknown outcome, adopt the one recorded under spec->sandbox_id. */
rk_status os_lc_create(struct os_inst *inst, struct rk_call *call,
                       const struct rk_create_spec *spec, struct rk_created *out)
{
    const struct rk_host *h = inst->host;
    char *image = os_qualify_image(spec->image, inst->registry_prefix);
    char *body = image ? create_body(inst, spec, image) : NULL;
    if (!body) {
        free(image);
        return h->set_error(call, RK_E_NOMEM, "opensandbox create failed: out of memory");
    }
    out->image = h->arena_strdup(call, image);
    out->host_name = NULL;
    free(image);
    struct os_xfer x;
    rk_status s = os_lc_xfer(&x, inst, call, "POST", "/sandboxes");
    if (s == RK_OK) {
        /* Sent once: a second send would make a second sandbox; a lost reply surfaces as an
         * error, and adopt_lost() finds the sandbox it made. */
        os_xfer_send_once(&x);
        os_xfer_json(&x, body);
        s = os_xfer_perform(&x);
    }
    free(body);
    if (s == RK_OK && x.status >= 200 && x.status < 300) {
        json_object *o = os_lc_body_json(&x);
        const char *id = os_lc_jstr(o, "id");
        out->upstream_id = id ? h->arena_strdup(call, id) : NULL;
        json_object_put(o);
        if (out->upstream_id) {
            os_xfer_cleanup(&x);
            return RK_OK;
        }
        /* Accepted but unreadable: find it by metadata like a lost reply. */
    }
    int unknown =
        (s == RK_OK && (x.status < 300 || x.status == 502 || x.status == 503 || x.status == 504)) ||
        (s == RK_E_UNAVAILABLE && !x.not_sent) || s == RK_E_TOO_LARGE;
    if (unknown && spec->sandbox_id && *spec->sandbox_id &&
        adopt_lost(inst, call, spec->sandbox_id, out)) {
        os_xfer_cleanup(&x);
        return RK_OK;
    }
    if (s == RK_OK && x.status >= 200 && x.status < 300)
        s = h->set_error(call, RK_E_UPSTREAM, "opensandbox create failed: reply without an id");
    else if (s == RK_OK)
        s = os_lc_http_fail(inst, call, x.status >= 500 ? RK_E_UNAVAILABLE : RK_E_UPSTREAM,
                            "create", NULL, &x);
    else
        s = os_lc_xfer_fail(inst, call, s == RK_E_TOO_LARGE ? RK_E_UPSTREAM : s, "create", NULL,
                            &x);
    if (s == RK_E_TIMEOUT || s == RK_E_CANCELLED)
        s = RK_E_UNAVAILABLE;
    os_xfer_cleanup(&x);
    return s;
}

/** Fill *out from a status object. */
/* How long after OpenSandbox reports a sandbox Running (status.lastTransitionAt) its execd must
 * answer GET /ping before the sandbox counts as running (OS_READY_WINDOW_S, os_internal.h). The
 * docker runtime reports Running once the container has started; execd, started by the container's
 * bootstrap script, listens a moment later (seen on the real stand: the first command right after
 * Running was refused). Later, Running is trusted as it is, so a list pass pings only new or
 * resumed sandboxes. */
#define OS_READY_PING_MS 2000

/* 1 if the ISO-8601 UTC time iso ("2026-01-02T03:04:05.678Z") is within OS_READY_WINDOW_S of
 * now (or unparsable: then readiness is checked too). */
static int transition_recent(const char *iso)
{
    struct tm tm = {0};
    if (!iso || sscanf(iso, "%d-%d-%dT%d:%d:%d", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
                       &tm.tm_min, &tm.tm_sec) != 6)
        return 1;
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    time_t at = timegm(&tm);
    return at == (time_t)-1 || time(NULL) - at < OS_READY_WINDOW_S;
}

/* 1 if the sandbox's execd answers (remembered per Running transition, so a sandbox is
 * pinged only until its execd answered once). The ping itself is os_ready.c's (a layer
 * above), reached through inst->execd_ping. */
static int execd_answers(struct os_inst *inst, struct rk_call *call, const char *osid,
                         const char *since)
{
    if (os_ep_ready_known(inst, osid, since))
        return 1;
    if (!inst->execd_ping || !inst->execd_ping(inst, call, osid, OS_READY_PING_MS))
        return 0;
    os_ep_ready_note(inst, osid, since);
    return 1;
}

/* Map OpenSandbox's status into *out. osid and since (status.lastTransitionAt), when given, let
 * a sandbox that turned Running recently count as running only once its execd answers: asked
 * here, or, when check_later is given (a list pass), *check_later is set and the caller
 * queues the check (os_ready.c) and reports the sandbox pending meanwhile. */
static rk_status fill_status(struct os_inst *inst, struct rk_call *call, const char *state,
                             char *reason, const char *osid, const char *since, int *check_later,
                             struct rk_status_info *out)
{
    int failed = 0;
    out->state = os_map_state(state, &failed);
    out->failed = failed;
    out->reason = NULL;
    if (check_later)
        *check_later = 0;
    if (out->state == RK_STATE_RUNNING && osid && transition_recent(since) &&
        !os_ep_ready_known(inst, osid, since)) {
        if (check_later)
            *check_later = 1;
        else if (!execd_answers(inst, call, osid, since))
            out->state = RK_STATE_PENDING; /* not ready for commands yet */
    }
    if (failed) {
        out->reason =
            inst->host->arena_strdup(call, reason ? reason : "OpenSandbox reports Failed");
        if (!out->reason)
            return RK_E_NOMEM;
    }
    return RK_OK;
}

/** Current state of a sandbox (look it up by ROCK id when the upstream id is unknown). */
rk_status os_lc_status(struct os_inst *inst, struct rk_call *call, const struct rk_sandbox_ref *ref,
                       struct rk_status_info *out)
{
    const struct rk_host *h = inst->host;
    memset(out, 0, sizeof(*out));
    if (!ref->upstream_id) {
        struct lc_found *f = NULL;
        size_t n = 0;
        rk_status s = lc_find(inst, call, ref->sandbox_id, "get_state", &f, &n);
        if (s != RK_OK)
            return s == RK_E_TIMEOUT || s == RK_E_CANCELLED ? s : RK_E_UNAVAILABLE;
        if (n == 0) {
            found_free(f, n);
            return h->set_error(call, RK_E_NOT_FOUND,
                                "opensandbox get_state failed for %s: no sandbox with %s=%s",
                                ref->sandbox_id, OS_META_ROCK_ID, ref->sandbox_id);
        }
        size_t pick = found_pick(f, n);
        out->upstream_id = h->arena_strdup(call, f[pick].id);
        s = out->upstream_id ? fill_status(inst, call, f[pick].state, f[pick].reason,
                                           out->upstream_id, f[pick].since, NULL, out)
                             : RK_E_NOMEM;
        found_free(f, n);
        return s;
    }
    const char *osid = ref->upstream_id;
    char *path = os_sbx_path(osid, "");
    struct os_xfer x;
    rk_status s = path ? os_lc_xfer(&x, inst, call, "GET", path) : RK_E_NOMEM;
    free(path);
    if (s == RK_OK)
        s = os_xfer_perform(&x);
    if (s != RK_OK) {
        s = os_lc_xfer_fail(
            inst, call,
            (s == RK_E_CANCELLED || s == RK_E_TIMEOUT || s == RK_E_NOMEM) ? s : RK_E_UNAVAILABLE,
            "get_state", osid, &x);
    } else if (x.status == 404) {
        s = os_lc_http_fail(inst, call, RK_E_NOT_FOUND, "get_state", osid, &x);
    } else if (x.status != 200) {
        s = os_lc_http_fail(inst, call, x.status >= 500 ? RK_E_UNAVAILABLE : RK_E_UPSTREAM,
                            "get_state", osid, &x);
    } else {
        json_object *o = os_lc_body_json(&x), *st = NULL;
        if (!o || !json_object_object_get_ex(o, "status", &st)) {
            s = h->set_error(call, RK_E_UPSTREAM,
                             "opensandbox get_state failed for %s: malformed response", osid);
        } else {
            char *reason = status_reason(st);
            s = fill_status(inst, call, os_lc_jstr(st, "state"), reason, osid,
                            os_lc_jstr(st, "lastTransitionAt"), NULL, out);
            free(reason);
        }
        json_object_put(o);
    }
    os_xfer_cleanup(&x);
    return s;
}

/** Ensure the sandbox is gone (404 = gone; unknown id → look up by ROCK id). */
rk_status os_lc_destroy(struct os_inst *inst, struct rk_call *call,
                        const struct rk_sandbox_ref *ref)
{
    if (ref->upstream_id) {
        rk_status s = lc_kill(inst, call, ref->upstream_id);
        os_ep_invalidate(inst, ref->upstream_id, -1);
        return s;
    }
    struct lc_found *f = NULL;
    size_t n = 0;
    rk_status s = lc_find(inst, call, ref->sandbox_id, "kill", &f, &n);
    for (size_t i = 0; s == RK_OK && i < n; i++) {
        s = lc_kill(inst, call, f[i].id);
        os_ep_invalidate(inst, f[i].id, -1);
    }
    found_free(f, n);
    return s;
}

/** The sandboxes of a list pass whose readiness check was queued, reported after its last page. */
struct held_one {
    const char *osid, *since; /* within the same block, after rock_id */
    char rock_id[];
};
struct held {
    struct held_one **v;
    size_t n, cap;
};

/** Hold a sandbox back (copied: the page it came from is freed); -1 when out of memory (the
 *  caller reports it pending at once). */
static int held_add(struct held *hd, const char *rock_id, const char *osid, const char *since)
{
    if (hd->n == hd->cap) {
        size_t cap = hd->cap ? hd->cap * 2 : 64;
        struct held_one **v = realloc(hd->v, cap * sizeof *v);
        if (!v)
            return -1;
        hd->v = v;
        hd->cap = cap;
    }
    size_t lr = strlen(rock_id) + 1, lo = strlen(osid) + 1, ls = since ? strlen(since) + 1 : 0;
    struct held_one *e = malloc(sizeof *e + lr + lo + ls);
    if (!e)
        return -1;
    memcpy(e->rock_id, rock_id, lr);
    e->osid = memcpy(e->rock_id + lr, osid, lo);
    e->since = since ? memcpy(e->rock_id + lr + lo, since, ls) : NULL;
    hd->v[hd->n++] = e;
    return 0;
}

/** Report the held sandboxes: running once their execd answered, pending until then. */
static void held_report(struct os_inst *inst, const struct held *hd, rk_list_fn fn, void *ctx)
{
    for (size_t i = 0; i < hd->n; i++) {
        const struct held_one *e = hd->v[i];
        struct rk_status_info info = {0};
        info.state =
            os_ep_ready_known(inst, e->osid, e->since) ? RK_STATE_RUNNING : RK_STATE_PENDING;
        info.upstream_id = e->osid;
        fn(ctx, e->rock_id, &info);
    }
}

/** Release the held sandboxes (reported or not). */
static void held_free(struct held *hd)
{
    for (size_t i = 0; i < hd->n; i++)
        free(hd->v[i]);
    free(hd->v);
}

/** List pages of a pass in flight at once (the next ones requested while one is read). */
#define OS_LIST_WINDOW 4

struct list_window;

/** One page of a list pass: its exchange and how it ended. */
struct list_page {
    struct os_xfer x; /* first: the completion finds its page from the exchange */
    struct list_window *w;
    rk_status s;
    int started, done;
};

/** The pages of a pass in flight, by page number modulo OS_LIST_WINDOW. */
struct list_window {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct list_page p[OS_LIST_WINDOW];
};

/** os_xfer_start's completion of a page (loop thread, or the caller's when the loop is gone). */
static void list_page_done(struct os_xfer *x, rk_status s)
{
    struct list_page *lp = (struct list_page *)x;
    struct list_window *w = lp->w;
    pthread_mutex_lock(&w->mu);
    lp->s = s;
    lp->done = 1;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

/** Request page number page of the listing into its slot (its end reported to the window). */
static void list_page_start(struct os_inst *inst, struct rk_call *call, struct list_window *w,
                            int page)
{
    struct list_page *lp = &w->p[page % OS_LIST_WINDOW];
    struct os_sb sb = {0};
    os_sb_printf(&sb, "/sandboxes?page=%d&pageSize=200", page);
    char *path = os_sb_take(&sb);
    memset(&lp->x, 0, sizeof lp->x);
    rk_status s = path ? os_lc_xfer(&lp->x, inst, call, "GET", path) : RK_E_NOMEM;
    free(path);
    lp->started = 1;
    lp->done = 0;
    lp->w = w;
    if (s == RK_OK)
        s = os_xfer_start(&lp->x, list_page_done);
    if (s != RK_OK) { /* ended at once: no completion will come */
        pthread_mutex_lock(&w->mu);
        lp->s = s;
        lp->done = 1;
        pthread_mutex_unlock(&w->mu);
    }
}

/** Wait for the page in slot lp to end. */
static void list_page_wait(struct list_window *w, struct list_page *lp)
{
    pthread_mutex_lock(&w->mu);
    while (!lp->done)
        pthread_cond_wait(&w->cv, &w->mu);
    pthread_mutex_unlock(&w->mu);
}

/** Report the sandboxes of one answered page (see os_lc_list); its pagination into *more and
 *  *total_pages. */
static rk_status list_page_read(struct os_inst *inst, struct rk_call *call, struct list_page *lp,
                                struct held *held, rk_list_fn fn, void *ctx, int *more,
                                long *total_pages)
{
    const struct rk_host *h = inst->host;
    struct os_xfer *x = &lp->x;
    rk_status rs = lp->s;
    if (rs != RK_OK)
        return os_lc_xfer_fail(inst, call, rs == RK_E_TOO_LARGE ? RK_E_UPSTREAM : rs, "list", "*",
                               x);
    if (x->status != 200)
        return os_lc_http_fail(inst, call, RK_E_UPSTREAM, "list", "*", x);
    struct os_lc_page pg;
    if (os_lc_page_open(&pg, x->body, x->body_len, OS_META_ROCK_ID) != 0)
        return h->set_error(call, RK_E_UPSTREAM,
                            "opensandbox list failed: malformed list response");
    struct os_lc_item it;
    int got;
    while ((got = os_lc_page_next(&pg, &it)) == 1) {
        if (!it.id || !it.rock_id || !*it.rock_id)
            continue; /* not created by rock-admin */
        char *reason = os_lc_reason_text(it.reason, it.message);
        struct rk_status_info info = {0};
        int check = 0;
        rs = fill_status(inst, call, it.state, reason, it.id, it.since, &check, &info);
        free(reason);
        if (rs != RK_OK)
            break;
        if (check) { /* not ready for commands until its execd answers */
            inst->execd_check(inst, it.rock_id, it.id, it.since);
            if (held_add(held, it.rock_id, it.id, it.since) == 0)
                continue; /* reported after the last page */
            info.state = RK_STATE_PENDING;
        }
        info.upstream_id = it.id;
        fn(ctx, it.rock_id, &info);
    }
    *more = pg.more;
    *total_pages = pg.total_pages;
    os_lc_page_close(&pg);
    if (got < 0)
        rs = h->set_error(call, RK_E_NOMEM, "opensandbox list failed: out of memory");
    return rs;
}

/**
 * ops.list: every sandbox this deployment created (those carrying the rock id in
 * metadata["rock_sandbox_id"], set at create), all pages of GET /sandboxes with
 * pageSize 200 (the maximum the server's list route accepts). RK_OK only after a
 * complete pass; a truncated pass (more than OS_RECONCILE_MAX_PAGES pages) is an error
 * so the reconciler never takes a partial list as "the others vanished". The pages are read in
 * order, and while one is read the next ones are already requested (up to OS_LIST_WINDOW in
 * flight on the instance's loop; as many as the first page's pagination.totalPages says there
 * are, and one after another when it says nothing): at 16,000 sandboxes a pass reads 80 pages,
 * and one at a time each waited for the previous answer. A page beyond the end (the listing
 * shrank meanwhile) is answered empty and ends the pass as hasNextPage false does. A sandbox that
 * turned Running recently and whose execd was not heard from yet has its readiness check queued
 * (os_ready.c) and is reported after the last page (held_report): running if its check answered
 * while the later pages were read (the checks run on the instance's loop meanwhile), pending
 * otherwise, and a later pass reports it running once its execd answered. The pass never waits
 * for a check.
 */
rk_status os_lc_list(struct os_inst *inst, struct rk_call *call, rk_list_fn fn, void *ctx)
{
    const struct rk_host *h = inst->host;
    struct held held = {0};
    struct list_window *w = calloc(1, sizeof *w);
    if (!w)
        return h->set_error(call, RK_E_NOMEM, "opensandbox list failed: out of memory");
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    rk_status rs = RK_OK;
    int next_start = 1, last_known = 1, complete = 0;
    for (int page = 1; page <= OS_RECONCILE_MAX_PAGES; page++) {
        while (next_start <= last_known && next_start < page + OS_LIST_WINDOW &&
               next_start <= OS_RECONCILE_MAX_PAGES)
            list_page_start(inst, call, w, next_start++);
        struct list_page *lp = &w->p[page % OS_LIST_WINDOW];
        list_page_wait(w, lp);
        int more = 0;
        long total = 0;
        rs = list_page_read(inst, call, lp, &held, fn, ctx, &more, &total);
        os_xfer_cleanup(&lp->x);
        lp->started = 0;
        if (rs != RK_OK)
            break;
        if (!more) {
            complete = 1;
            break;
        }
        if (total > last_known)
            last_known = total < OS_RECONCILE_MAX_PAGES ? (int)total : OS_RECONCILE_MAX_PAGES;
        if (last_known < page + 1)
            last_known = page + 1; /* more, whatever the count said */
    }
    for (int i = 0; i < OS_LIST_WINDOW; i++) { /* pages requested beyond the end */
        if (!w->p[i].started)
            continue;
        list_page_wait(w, &w->p[i]);
        os_xfer_cleanup(&w->p[i].x);
    }
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    free(w);
    if (complete)
        held_report(inst, &held, fn, ctx);
    else if (rs == RK_OK)
        rs = h->set_error(call, RK_E_UPSTREAM, "opensandbox list failed: more than %d pages",
                          OS_RECONCILE_MAX_PAGES);
    held_free(&held);
    return rs;
}
