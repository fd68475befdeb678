/* SPDX-License-Identifier: Apache-2.0 */
/* Sandbox lifecycle (lifecycle.h): background create, status refresh and the
 * reconciler's transitions, guarded transitions, delete, restore, waits. */
#include "domain/lifecycle.h"
#include "domain/endpoint_cache.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/app.h"
#include "domain/archive.h"
#include "domain/create_queue.h"
#include "config/config.h"
#include "domain/dispatch.h"
#include "host/host.h"
#include "obs/log.h"
#include "obs/metrics.h"
#include "host/plugin_loader.h"
#include "domain/record.h"
#include "store/store.h"
#include "base/util.h"

/* ---- record patches --------------------------------------------------------- */

/* A change applied atomically to a stored record (see rk_store_update). */
struct patch {
    enum rk_state expect;    /* apply only in this state (0 = any) */
    enum rk_state to;        /* transition target (0 = none) */
    const char *event;       /* transition event */
    const char *tag;         /* backend tag for upstream_id */
    const char *upstream_id; /* set extended_params.<tag>_id */
    const char *image;       /* replace image */
    const char *host_name;   /* replace host_name */
    const char *failure;     /* set failure phase message */
    int create_failed;       /* mark the create as failed */
    int create_done;         /* drop create_deadline */
    enum rk_state seen;      /* out: state found */
    const char *observed;    /* set "backend_state" (reconciler: non-active backend state) */
    int clear_observed;      /* drop "backend_state" */
    int adopted;             /* out: the record already carried upstream_id (not deleted) */
};

static int apply_patch(json_object *rec, void *ctx)
{
    struct patch *p = ctx;
    p->seen = rk_rec_state(rec);
    const char *have = p->upstream_id ? rk_rec_upstream_id(rec, p->tag) : NULL;
    p->adopted = have && strcmp(have, p->upstream_id) == 0 && p->seen != RK_STATE_DELETED;
    if (p->expect && p->seen != p->expect)
        return 1;
    if (p->upstream_id)
        rk_rec_set_backend(rec, p->tag, p->upstream_id);
    if (p->image)
        rk_rec_set_str(rec, "image", p->image);
    if (p->host_name)
        rk_rec_set_str(rec, "host_name", p->host_name);
    if (p->failure) {
        json_object *f = json_object_new_object();
        json_object_object_add(f, "phase", json_object_new_string(p->tag ? p->tag : "backend"));
        json_object_object_add(f, "message", json_object_new_string(p->failure));
        json_object_object_add(rec, "failure", f);
    }
    if (p->create_failed)
        json_object_object_add(rec, "create_failed", json_object_new_boolean(1));
    if (p->create_done)
        json_object_object_del(rec, "create_deadline");
    if (p->observed)
        rk_rec_set_str(rec, "backend_state", p->observed);
    if (p->clear_observed)
        json_object_object_del(rec, "backend_state");
    if (p->to)
        rk_rec_transition(rec, p->to, p->event);
    return 0;
}

/* Apply a patch; returns the store rc and replaces *rec_io (if given) with the
 * record as stored. */
static rk_store_rc patch_record(struct rk_app *app, const char *id, struct patch *p,
                                json_object **rec_io)
{
    char err[RK_STORE_ERRLEN];
    json_object *out = NULL; /* the record as written, asked for only when the caller takes it */
    rk_store_rc rc =
        rk_store_update(app->store, id, apply_patch, p, rec_io ? &out : NULL, err, sizeof err);
    if (rc == RK_STORE_ERROR)
        rk_warn("sandbox %s: cannot update its record: %s", id, err);
    if (rc == RK_STORE_OK && p->to && p->to != RK_STATE_RUNNING)
        rk_ep_cache_forget_sandbox(id); /* cached proxy endpoints die with it */
    if (rc == RK_STORE_OK && rec_io && out) {
        json_object_put(*rec_io);
        *rec_io = out;
    } else if (out) {
        json_object_put(out);
    }
    return rc;
}

static void clear_sessions(struct rk_app *app, const char *id)
{
    char err[RK_STORE_ERRLEN];
    if (rk_session_clear(app->store, id, err, sizeof err) != RK_STORE_OK)
        rk_warn("sandbox %s: cannot clear its session mappings: %s", id, err);
}

/* ---- session clean-up after a read (background) -------------------------------- */

/* Most sandboxes whose session clean-up waits for a background pass; past it
 * the oldest is dropped with a warning (its mappings stay until the id is
 * deleted again). */
#define MAX_DEFERRED 4096

static pthread_mutex_t deferred_mu = PTHREAD_MUTEX_INITIALIZER;
static char *deferred[MAX_DEFERRED];
static size_t n_deferred;

/* A status read found the sandbox gone: its session mappings are cleared by
 * the next background pass (rk_lifecycle_run_deferred), not by the read. */
static void defer_clear_sessions(const char *id)
{
    char *copy = rk_xstrdup(id);
    pthread_mutex_lock(&deferred_mu);
    if (n_deferred == MAX_DEFERRED) {
        rk_warn("sandbox %s: session clean-up queue full; mappings left behind", deferred[0]);
        free(deferred[0]);
        memmove(deferred, deferred + 1, (MAX_DEFERRED - 1) * sizeof *deferred);
        n_deferred--;
    }
    deferred[n_deferred++] = copy;
    pthread_mutex_unlock(&deferred_mu);
}

void rk_lifecycle_run_deferred(struct rk_app *app)
{
    for (;;) {
        pthread_mutex_lock(&deferred_mu);
        char *id = n_deferred ? deferred[--n_deferred] : NULL;
        pthread_mutex_unlock(&deferred_mu);
        if (!id)
            return;
        clear_sessions(app, id);
        free(id);
    }
}

/* ---- the backend create of a queued record ------------------------------------- */

/* A create failed for good: the record leaves pending at once (pending -> deleted, event
 * "create_failed", the reason kept as its failed phase), as ROCK's immediate clean-up
 * removes it, so the next get_status answers "not found" (include_all_states: deleted,
 * with the reason). A create whose reply was lost may still have made a sandbox upstream:
 * it is looked up by the ROCK id and removed (best effort; one the lookup cannot reach
 * ends with its OpenSandbox lifetime). */
static void create_failed(struct rk_app *app, const char *id, const char *why)
{
    const struct rk_plugin *pl = app->plugin;
    struct patch p = {.expect = RK_STATE_PENDING,
                      .to = RK_STATE_DELETED,
                      .event = "create_failed",
                      .tag = pl->desc->backend_tag,
                      .failure = why,
                      .create_failed = 1,
                      .create_done = 1};
    if (patch_record(app, id, &p, NULL) != RK_STORE_OK)
        return; /* deleted meanwhile (its delete removed what there was), or store down */
    clear_sessions(app, id);
    struct rk_call *call = rk_call_new("create-cleanup", -1, 0);
    struct rk_sandbox_ref ref = {id, NULL, pl->desc->backend_tag, RK_STATE_DELETED};
    rk_status st;
    RK_UPSTREAM(st, pl, destroy, call, &ref);
    if (st != RK_OK)
        rk_warn("sandbox %s: clean-up after the failed create could not check the backend "
                "(a sandbox it made lives until its lifetime ends): %s",
                id, rk_call_error_text(call));
    rk_call_free(call);
}

/* Does the record of a claimed create still wait for it: pending, without a backend sandbox
 * and without a failure? (Deleted, stopped or created meanwhile: no.) */
static int create_wanted(json_object *rec, const char *tag)
{
    json_object *v;
    return rec && rk_rec_state(rec) == RK_STATE_PENDING && !rk_rec_upstream_id(rec, tag) &&
           !(json_object_object_get_ex(rec, "create_failed", &v) && json_object_get_boolean(v));
}

/* A string member of rec copied (NULL when absent). */
static char *rec_dup(json_object *rec, const char *key)
{
    const char *s = rk_rec_str(rec, key);
    return s ? rk_xstrdup(s) : NULL;
}

/* A number member of rec, or def. */
static double rec_num(json_object *rec, const char *key, double def)
{
    json_object *v;
    return json_object_object_get_ex(rec, key, &v) && v ? json_object_get_double(v) : def;
}

/* The backend answered with upstream (created, or found after a lost reply): record it, or
 * remove the new backend sandbox when the record was deleted or created meanwhile. */
static void record_created(struct rk_app *app, struct rk_call *call, const char *id,
                           const struct rk_created *out)
{
    const struct rk_plugin *pl = app->plugin;
    struct patch p = {.expect = RK_STATE_PENDING,
                      .tag = pl->desc->backend_tag,
                      .upstream_id = out->upstream_id,
                      .image = out->image,
                      .host_name = out->host_name ? out->host_name : out->upstream_id,
                      .create_done = 1};
    rk_store_rc rc = patch_record(app, id, &p, NULL);
    if (rc == RK_STORE_ABORTED && p.adopted) {
        /* A status read found the new sandbox by its ROCK id first and recorded it (and may
         * have seen it running): it is this create's, and it stays. */
        rk_info("sandbox %s: created in backend (already recorded)", id);
    } else if (rc != RK_STORE_OK) {
        /* The record was deleted (or is gone) while we created: do not
         * leave a sandbox that no record owns. */
        struct rk_sandbox_ref ref = {id, out->upstream_id, pl->desc->backend_tag, RK_STATE_DELETED};
        rk_status ds;
        RK_UPSTREAM(ds, pl, destroy, call, &ref);
        rk_info("sandbox %s: deleted during create; removed the new backend sandbox (%s)", id,
                ds == RK_OK ? "ok" : rk_call_error_text(call));
    } else {
        rk_info("sandbox %s: created in backend", id);
    }
}

void rk_lifecycle_create_queued(struct rk_app *app, const char *id, json_object *rec, int retaken)
{
    const struct rk_plugin *pl = app->plugin;
    const char *tag = pl->desc->backend_tag;
    if (!create_wanted(rec, tag))
        return; /* deleted, stopped or created meanwhile: nothing to do */
    /* What the backend create needs, from the record start_async stored. */
    struct rk_create_spec spec = {0};
    spec.sandbox_id = id;
    char *image = rec_dup(rec, "image");
    char *memory = rec_dup(rec, "memory_requested");
    if (!memory)
        memory = rec_dup(rec, "memory");
    char *user = rec_dup(rec, "user_id");
    char *exp = rec_dup(rec, "experiment_id");
    char *ns = rec_dup(rec, "namespace");
    const char *rid = rk_rec_str(rec, "create_request_id");
    spec.image = image;
    spec.memory = memory;
    spec.user_id = user;
    spec.experiment_id = exp;
    spec.namespace_name = ns;
    spec.cpus = rec_num(rec, "cpus", 2.0);
    spec.limit_cpus = rec_num(rec, "limit_cpus", 0);
    spec.idle_timeout_s = (int64_t)rec_num(rec, "auto_clear_time", 0) * 60;
    spec.startup_timeout_s = (int64_t)rec_num(rec, "create_startup_timeout", 600);
    struct rk_call *call = rk_call_new(rid ? rid : "create", -1, 0);
    spec.env = rk_rec_env(call, rec, &spec.env_len); /* copied into the call's arena */

    struct rk_created out = {0};
    rk_status st = RK_E_NOT_FOUND;
    if (retaken) {
        /* An admin that claimed this create before died or lost its claim: the backend may
         * have the sandbox already. Adopt it rather than create a second one. */
        struct rk_sandbox_ref ref = {id, NULL, tag, RK_STATE_PENDING};
        struct rk_status_info info = {0};
        RK_UPSTREAM(st, pl, status, call, &ref, &info);
        if (st == RK_OK && info.upstream_id && info.state != RK_STATE_DELETED) {
            out.upstream_id = info.upstream_id;
            out.host_name = info.upstream_id;
            rk_info("sandbox %s: an earlier create attempt reached the backend; adopted it", id);
            record_created(app, call, id, &out);
            goto done;
        }
        rk_call_clear_error(call);
        memset(&out, 0, sizeof out);
    }
    RK_UPSTREAM(st, pl, create, call, &spec, &out);
    if (st == RK_OK && out.upstream_id) {
        record_created(app, call, id, &out);
    } else {
        if (st == RK_OK)
            rk_call_set_error(call, RK_E_UPSTREAM, "backend returned no sandbox id");
        char *msg = rk_strdup_printf(
            "Sandbox %s submission failed and has been marked for immediate deletion: %s", id,
            rk_call_error_text(call));
        rk_warn("%s", msg);
        create_failed(app, id, msg);
        free(msg);
    }
done:
    rk_call_free(call);
    free(image);
    free(memory);
    free(user);
    free(exp);
    free(ns);
}

/* ---- time to alive ------------------------------------------------------------- */

/* Histogram of rock_admin_sandbox_start_seconds: start_async accepted -> recorded running. */
static const double start_bounds[] = {0.5, 1,  2,  3,  4,  5,   6,   7,  8,
                                      10,  15, 20, 30, 60, 120, 300, 600};
static unsigned long long start_counts[sizeof start_bounds / sizeof start_bounds[0] + 1];
static struct rk_histogram start_hist = RK_HISTOGRAM_INIT(start_bounds, start_counts);

/* When start_async accepted a record that never ran yet (epoch ms), else 0: the start of a
 * sandbox's first pending -> running, the one the histogram measures. */
static int64_t first_start_accepted_ms(json_object *rec)
{
    json_object *v;
    if (rk_rec_str(rec, "start_time") ||
        !json_object_object_get_ex(rec, "create_accepted_ms", &v) || !v)
        return 0;
    return json_object_get_int64(v);
}

void rk_lifecycle_metrics_collect(void *arg, struct rk_buf *out)
{
    (void)arg;
    rk_histogram_render(&start_hist, out, "rock_admin_sandbox_start_seconds",
                        "From start_async accepting a sandbox to this admin recording it running "
                        "(alive) for the first time: the create queue, the backend's start and the "
                        "admin's detection of it.");
}

/* ---- status refresh ----------------------------------------------------------- */

/* The sandbox is gone: a background pass clears its sessions now, a read
 * (touch) leaves them to the next one. */
static void gone_sessions(struct rk_app *app, const char *id, int touch)
{
    if (touch)
        defer_clear_sessions(id);
    else
        clear_sessions(app, id);
}

/* patch_record for apply_backend_state. A client's read (touch) gets the record as stored: it
 * becomes the answer. The reconciler's pass only looks at its copy to decide what else to patch
 * and whether anything changed, so its copy gets the same patch (the store checked expect
 * against the stored record) instead of a second copy of the stored record: with the in-process
 * store that copy was about 40% of a pass's apply time in a create burst. */
static rk_store_rc state_patch(struct rk_app *app, const char *id, struct patch *p,
                               json_object **rec_io, int touch)
{
    if (touch)
        return patch_record(app, id, p, rec_io);
    rk_store_rc rc = patch_record(app, id, p, NULL);
    if (rc == RK_STORE_OK && *rec_io) {
        struct patch mine = *p; /* p keeps what the store's application found (seen, adopted) */
        mine.expect = 0;
        apply_patch(*rec_io, &mine);
    }
    return rc;
}

/* The patch of a pending record the backend has running. */
static struct patch running_patch(json_object *rec)
{
    json_object *obs = NULL;
    return (struct patch){.expect = RK_STATE_PENDING,
                          .to = RK_STATE_RUNNING,
                          .event = "alive",
                          .clear_observed =
                              json_object_object_get_ex(rec, "backend_state", &obs) && obs};
}

/* A sandbox accepted at accepted (epoch ms, 0: unknown) was recorded running now. */
static void observe_start(int64_t accepted)
{
    if (accepted > 0)
        rk_histogram_observe(&start_hist, (double)(rk_epoch_ms() - accepted) / 1000.0);
}

/* Apply what the backend said about a sandbox (status() or a list pass) to its record.
 * info == NULL with st == RK_E_NOT_FOUND: the backend has no such sandbox. touch: refresh the
 * idle deadline when active (a client asked; the reconciler never touches). */
static rk_status apply_backend_state(struct rk_app *app, struct rk_call *call, json_object **rec_io,
                                     rk_status st, const struct rk_status_info *info_in, int touch,
                                     enum rk_state *shown, int *alive)
{
    const struct rk_plugin *pl = app->plugin;
    json_object *rec = *rec_io;
    /* Copy what we need: patch_record() replaces (and frees) *rec_io. */
    char id[256], upstream[256];
    snprintf(id, sizeof id, "%s",
             rk_rec_str(rec, "sandbox_id") ? rk_rec_str(rec, "sandbox_id") : "");
    enum rk_state stored = rk_rec_state(rec);
    *shown = stored;
    *alive = 0;
    json_object *cf;
    if (json_object_object_get_ex(rec, "create_failed", &cf) && json_object_get_boolean(cf))
        return RK_OK; /* the failed phase tells the client why */
    /* A restore under way (a dead one is rk_archive_take_over_jobs' business). */
    if (rk_restore_in_progress(rec)) {
        rk_dispatch_touch_rec(app, *rec_io);
        return RK_OK; /* shown pending until the restore recorded its backend id */
    }

    const char *tag = pl->desc->backend_tag;
    const char *up = rk_rec_upstream_id(rec, tag);
    snprintf(upstream, sizeof upstream, "%s", up ? up : "");
    struct rk_sandbox_ref ref = {id, up ? upstream : NULL, tag, stored};
    struct rk_status_info info = {0};
    if (info_in)
        info = *info_in;

    if (st == RK_E_NOT_FOUND) {
        if (call)
            rk_call_clear_error(call);
        if (!ref.upstream_id) {
            json_object *dl;
            int64_t deadline = 0;
            if (json_object_object_get_ex(*rec_io, "create_deadline", &dl) && dl)
                deadline = json_object_get_int64(dl);
            if (rk_epoch_s() < deadline)
                return RK_OK; /* the create is still running somewhere */
            if (rk_create_queue_pending(app, id))
                return RK_OK; /* still waiting in the create queue (or running) */
            /* The create never completed: it failed, and the record leaves pending. */
            struct patch p = {.expect = RK_STATE_PENDING,
                              .to = RK_STATE_DELETED,
                              .event = "create_failed",
                              .tag = tag,
                              .failure = "sandbox creation did not complete: the backend has "
                                         "no sandbox for this id",
                              .create_failed = 1,
                              .create_done = 1};
            if (state_patch(app, id, &p, rec_io, touch) == RK_STORE_OK) {
                gone_sessions(app, id, touch);
                *shown = RK_STATE_DELETED;
            }
            return RK_OK;
        }
        /* The backend no longer knows it: it is gone for good. */
        struct patch p = {.to = RK_STATE_DELETED, .event = "vanished"};
        state_patch(app, id, &p, rec_io, touch);
        gone_sessions(app, id, touch);
        *shown = RK_STATE_DELETED;
        return RK_OK;
    }
    if (st != RK_OK)
        return st;

    if (info.upstream_id && !ref.upstream_id) {
        /* The reconciler leaves a sandbox whose create is still within its deadline to the
         * create queue: its worker records the reply (a lost one is looked up by the plugin's
         * create, a dead admin's claim is taken again and adopts), and the pass's snapshot of
         * the record is older than the listing, so adopting here would mostly rewrite what
         * the worker just wrote (thousands of writes per pass in a create burst). */
        json_object *dl;
        if (!touch && json_object_object_get_ex(*rec_io, "create_deadline", &dl) && dl &&
            rk_epoch_s() < json_object_get_int64(dl))
            return RK_OK;
        /* Adopted after a lost create reply (reconciled by rock id). */
        struct patch p = {.tag = tag,
                          .upstream_id = info.upstream_id,
                          .host_name = info.upstream_id,
                          .create_done = 1};
        state_patch(app, id, &p, rec_io, touch);
    }
    /* Reconciler (touch == 0): a non-active backend state the record cannot express (e.g. a
     * failed sandbox shows as stopped) is kept in "backend_state" for store-only reads. */
    json_object *obs = NULL;
    int has_observed = json_object_object_get_ex(*rec_io, "backend_state", &obs) && obs;
    switch (info.state) {
    case RK_STATE_RUNNING:
        *alive = 1;
        *shown = RK_STATE_RUNNING;
        if (stored == RK_STATE_PENDING) {
            int64_t accepted = first_start_accepted_ms(*rec_io);
            struct patch p = running_patch(*rec_io);
            if (state_patch(app, id, &p, rec_io, touch) == RK_STORE_OK)
                observe_start(accepted);
        } else if (has_observed) {
            struct patch p = {.clear_observed = 1};
            state_patch(app, id, &p, rec_io, touch);
        }
        if (touch)
            rk_dispatch_touch_rec(app, *rec_io);
        break;
    case RK_STATE_PENDING:
        *shown = RK_STATE_PENDING;
        if (touch)
            rk_dispatch_touch_rec(app, *rec_io);
        break;
    case RK_STATE_DELETED: {
        struct patch p = {.to = RK_STATE_DELETED, .event = "terminated"};
        state_patch(app, id, &p, rec_io, touch);
        gone_sessions(app, id, touch);
        *shown = RK_STATE_DELETED;
        break;
    }
    default:
        *shown = info.state ? info.state : stored;
        if (info.failed) {
            json_object *f;
            if (!json_object_object_get_ex(*rec_io, "failure", &f) || !f) {
                struct patch p = {.tag = tag,
                                  .failure = info.reason ? info.reason : "backend reports failure"};
                state_patch(app, id, &p, rec_io, touch);
            }
        }
        if (!touch && info.state && info.state != stored) {
            const char *name = rk_state_name(info.state);
            const char *had = has_observed ? json_object_get_string(obs) : NULL;
            if (name && (!had || strcmp(had, name) != 0)) {
                struct patch p = {.observed = name};
                state_patch(app, id, &p, rec_io, touch);
            }
        }
        break;
    }
    return RK_OK;
}

rk_status rk_lifecycle_refresh(struct rk_app *app, struct rk_call *call, json_object **rec_io,
                               enum rk_state *shown, int *alive)
{
    const struct rk_plugin *pl = app->plugin;
    json_object *rec = *rec_io;
    *shown = rk_rec_state(rec);
    *alive = 0;
    json_object *cf;
    if (json_object_object_get_ex(rec, "create_failed", &cf) && json_object_get_boolean(cf))
        return RK_OK; /* the failed phase tells the client why */
    char id[256], upstream[256];
    snprintf(id, sizeof id, "%s",
             rk_rec_str(rec, "sandbox_id") ? rk_rec_str(rec, "sandbox_id") : "");
    const char *tag = pl->desc->backend_tag;
    const char *up = rk_rec_upstream_id(rec, tag);
    snprintf(upstream, sizeof upstream, "%s", up ? up : "");
    struct rk_sandbox_ref ref = {id, up ? upstream : NULL, tag, *shown};
    struct rk_status_info info = {0};
    rk_status st;
    RK_UPSTREAM(st, pl, status, call, &ref, &info);
    return apply_backend_state(app, call, rec_io, st, &info, 1, shown, alive);
}

int rk_lifecycle_glance_src(struct rk_rec_src *rec, const char *tag, struct rk_rec_glance *g)
{
    memset(g, 0, sizeof *g);
    if (!rk_state_is_active(rk_src_state(rec)))
        return 0;
    const char *backend = rk_src_backend(rec);
    if (!backend || strcmp(backend, tag) != 0)
        return 0; /* fail closed: never touch another backend's record */
    g->present = 1;
    g->state = rk_src_state(rec);
    g->observed = rk_src_has(rec, "backend_state") || rk_src_has(rec, "failure");
    if (rk_src_has(rec, "create_deadline"))
        g->create_deadline = rk_src_int64(rec, "create_deadline");
    const char *up = rk_src_upstream_id(rec, tag);
    if (up && !(g->upstream = strdup(up)))
        return -1;
    return rec->oom ? -1 : 0;
}

int rk_lifecycle_glance(json_object *rec, const char *tag, struct rk_rec_glance *g)
{
    struct rk_rec_src src = rk_src_tree(rec);
    if (!rec) {
        memset(g, 0, sizeof *g);
        return 0;
    }
    return rk_lifecycle_glance_src(&src, tag, g);
}

void rk_lifecycle_glance_free(struct rk_rec_glance *g)
{
    free(g->upstream);
    g->upstream = NULL;
}

/* Kept beside apply_backend_state, whose no-op cases these are: a listed sandbox in the state
 * the record holds, under the record's backend id, with nothing observed to clear or record
 * (RUNNING and PENDING change nothing then); and an unlisted one whose create still runs
 * within its deadline (the early return of the NOT_FOUND branch). */
int rk_lifecycle_glance_needs(const struct rk_rec_glance *g, const struct rk_status_info *info)
{
    if (!g->present)
        return 0;
    if (!info)
        return !(g->state == RK_STATE_PENDING && !g->upstream && rk_epoch_s() < g->create_deadline);
    /* Listed while its record has no backend id yet: the create queue's while the create deadline
     * runs, whatever the listing says (apply_backend_state's first rule for a listed sandbox).
     * In a create burst these are thousands per pass, each read again for nothing. */
    if (!g->upstream && info->upstream_id && rk_epoch_s() < g->create_deadline)
        return 0;
    if (g->observed || info->failed || !g->upstream || !info->upstream_id ||
        strcmp(g->upstream, info->upstream_id) != 0)
        return 1;
    return !((info->state == RK_STATE_RUNNING || info->state == RK_STATE_PENDING) &&
             info->state == g->state);
}

int rk_lifecycle_glance_same(const struct rk_rec_glance *a, const struct rk_rec_glance *b)
{
    return a->present == b->present && a->state == b->state && a->observed == b->observed &&
           !a->upstream == !b->upstream && (!a->upstream || strcmp(a->upstream, b->upstream) == 0);
}

rk_status rk_lifecycle_reconcile(struct rk_app *app, struct rk_call *call, json_object **rec_io,
                                 const struct rk_status_info *info)
{
    enum rk_state shown;
    int alive;
    return apply_backend_state(app, call, rec_io, info ? RK_OK : RK_E_NOT_FOUND, info, 0, &shown,
                               &alive);
}

/* What rk_lifecycle_running_many's update found in one stored record. */
struct running_ctx {
    const char *tag, *upstream;
    int64_t accepted;             /* out: when its start_async was accepted (0: unknown) */
    enum rk_running_outcome seen; /* out: RK_RUNNING_NOW when the patch applies */
};

/* rk_store_update_fn: kept beside apply_backend_state, which records a pending record the
 * backend reports running under its backend id with running_patch alone, unless its create
 * failed or a restore is under way (then it takes its own path). Decided on the stored record. */
static int running_if_plain(json_object *rec, void *arg)
{
    struct running_ctx *c = arg;
    const char *up = rk_rec_upstream_id(rec, c->tag);
    const char *backend = rk_rec_backend(rec);
    json_object *cf;
    if (rk_rec_state(rec) != RK_STATE_PENDING || !backend || strcmp(backend, c->tag) != 0 || !up ||
        strcmp(up, c->upstream) != 0) { /* fail closed: never another backend's record */
        c->seen = RK_RUNNING_CHANGED;
        return 1;
    }
    if ((json_object_object_get_ex(rec, "create_failed", &cf) && json_object_get_boolean(cf)) ||
        rk_restore_in_progress(rec)) {
        c->seen = RK_RUNNING_OTHER;
        return 1;
    }
    c->seen = RK_RUNNING_NOW;
    c->accepted = first_start_accepted_ms(rec);
    struct patch p = running_patch(rec);
    return apply_patch(rec, &p);
}

/* rk_store_check_fn: running_if_plain's first test on the record as the store found it (a
 * record no longer pending under that backend id is left without a tree of it: in a burst most
 * are, a state report or the reconciler having recorded them running first). */
static int running_check(const struct rk_store_found *found, void *arg)
{
    struct running_ctx *c = arg;
    struct rk_rec_src src = rk_src_tree(found->rec);
    if (!found->rec && rk_src_text(&src, found->text, found->len, found->m, found->n, 0, 0) != 0)
        return 0; /* a type the text readers leave to json-c: running_if_plain decides */
    const char *up = rk_src_upstream_id(&src, c->tag);
    const char *backend = rk_src_backend(&src);
    int changed = rk_src_state(&src) != RK_STATE_PENDING || !backend ||
                  strcmp(backend, c->tag) != 0 || !up || strcmp(up, c->upstream) != 0;
    rk_src_release(&src);
    if (changed)
        c->seen = RK_RUNNING_CHANGED;
    return changed;
}

void rk_lifecycle_running_many(struct rk_app *app, const char *const *ids,
                               const char *const *upstreams, size_t n, enum rk_running_outcome *out)
{
    if (n == 0)
        return;
    struct running_ctx *cs = calloc(n, sizeof *cs);
    void **ctxs = malloc(n * sizeof *ctxs);
    rk_store_rc *rcs = malloc(n * sizeof *rcs);
    char err[RK_STORE_ERRLEN] = "out of memory";
    int ok = cs && ctxs && rcs;
    for (size_t i = 0; ok && i < n; i++) {
        cs[i] =
            (struct running_ctx){.tag = app->plugin->desc->backend_tag, .upstream = upstreams[i]};
        ctxs[i] = &cs[i];
    }
    if (ok)
        ok = rk_store_update_many(app->store, ids, n, running_check, running_if_plain, ctxs, rcs,
                                  err, sizeof err) == RK_STORE_OK;
    for (size_t i = 0; i < n; i++) {
        rk_store_rc rc = ok ? rcs[i] : RK_STORE_ERROR;
        if (rc == RK_STORE_OK) {
            out[i] = RK_RUNNING_NOW;
            observe_start(cs[i].accepted);
        } else if (rc == RK_STORE_ABORTED && cs[i].seen == RK_RUNNING_OTHER) {
            out[i] = RK_RUNNING_OTHER;
        } else if (rc == RK_STORE_ABORTED || rc == RK_STORE_NOT_FOUND) {
            out[i] = RK_RUNNING_CHANGED;
        } else {
            out[i] = RK_RUNNING_FAILED;
            rk_warn("sandbox %s: cannot record it running: %s", ids[i], err);
        }
    }
    free(cs);
    free(ctxs);
    free(rcs);
}

/* ---- delete -------------------------------------------------------------------- */

rk_status rk_lifecycle_delete(struct rk_app *app, struct rk_call *call, json_object *rec,
                              const char *event)
{
    const struct rk_plugin *pl = app->plugin;
    const char *id = rk_rec_str(rec, "sandbox_id");
    const char *tag = pl->desc->backend_tag;
    struct rk_sandbox_ref ref = {id, rk_rec_upstream_id(rec, tag), tag, rk_rec_state(rec)};
    rk_status st = RK_OK;
    /* A create still in the queue is taken out: the backend never hears of the sandbox. */
    int dequeued =
        ref.state == RK_STATE_PENDING && !ref.upstream_id && rk_create_queue_cancel(app, id) == 1;
    if (!dequeued)
        RK_UPSTREAM(st, pl, destroy, call, &ref);
    if (st != RK_OK)
        return st; /* the record stays as it was (B40) */
    struct patch p = {.to = RK_STATE_DELETED, .event = event};
    rk_store_rc rc = patch_record(app, id, &p, NULL);
    if (rc == RK_STORE_ERROR)
        return rk_call_set_error(call, RK_E_UNAVAILABLE,
                                 "sandbox %s was deleted in the backend but its record could not "
                                 "be updated: sandbox store unavailable",
                                 id);
    clear_sessions(app, id);                  /* failures are only logged (B29) */
    rk_archive_drop_restored(app, call, rec); /* snapshots it still held (ABI 1.1) */
    return RK_OK;
}

/* ---- restore (RK_CAP_RESTORE) ------------------------------------------------------ */

rk_status rk_lifecycle_restore(struct rk_app *app, struct rk_call *call, const char *id,
                               int *restored)
{
    const struct rk_plugin *pl = app->plugin;
    *restored = 0;
    if (!(pl->caps & (RK_CAP_RESTORE | RK_CAP_SNAPSHOT)))
        return RK_OK; /* a start on the id creates a new sandbox, as before */
    char err[RK_STORE_ERRLEN];
    json_object *rec = NULL;
    rk_store_rc rc = rk_store_get(app->store, id, &rec, err, sizeof err);
    if (rc == RK_STORE_ERROR)
        return rk_call_set_error(call, RK_E_UNAVAILABLE, "sandbox store unavailable: %s", err);
    if (rc != RK_STORE_OK || rk_rec_state(rec) != RK_STATE_ARCHIVED) {
        json_object_put(rec);
        return RK_OK;
    }
    struct rk_target t;
    if (pl->caps & RK_CAP_SNAPSHOT) {
        /* ABI 1.1: restore from the stored snapshot (archive.c), never
         * overwrite the record and leak its snapshot. */
        rk_status st = rk_dispatch_record(app, call, RK_OP_STATUS, id, rec, &t);
        if (st != RK_OK)
            return st;
        st = rk_restore_start(app, call, t.rec);
        rk_target_release(&t);
        if (st == RK_OK)
            *restored = 1;
        return st;
    }
    rk_status st = rk_dispatch_record(app, call, RK_OP_RESTORE, id, rec, &t);
    if (st != RK_OK)
        return st;
    RK_UPSTREAM(st, pl, restore, call, &t.ref);
    rk_target_release(&t);
    if (st != RK_OK)
        return st; /* the record stays archived */
    struct patch p = {.expect = RK_STATE_ARCHIVED, .to = RK_STATE_PENDING, .event = "restore"};
    if (patch_record(app, id, &p, NULL) == RK_STORE_ERROR)
        return rk_call_set_error(call, RK_E_UNAVAILABLE,
                                 "sandbox %s was restored in the backend but its record could "
                                 "not be updated: sandbox store unavailable",
                                 id);
    *restored = 1;
    return RK_OK;
}

/* ---- waiting for running (POST /start) ------------------------------------------------ */

rk_status rk_lifecycle_wait_running(struct rk_app *app, struct rk_call *call, const char *id,
                                    int wait_s)
{
    int64_t until = rk_now_ms() + (int64_t)wait_s * 1000;
    while (rk_now_ms() < until && !rk_call_cancelled(call)) {
        char err[RK_STORE_ERRLEN];
        json_object *rec = NULL;
        if (rk_store_get(app->store, id, &rec, err, sizeof err) == RK_STORE_OK) {
            enum rk_state shown;
            int alive = 0;
            if (rk_lifecycle_refresh(app, call, &rec, &shown, &alive) != RK_OK)
                rk_call_clear_error(call);
            json_object *cf;
            int failed = json_object_object_get_ex(rec, "failure", &cf) && cf;
            if (failed) {
                const char *why = rk_rec_str(cf, "message");
                rk_call_set_error(call, RK_E_INTERNAL, "%s", why ? why : "sandbox creation failed");
            }
            json_object_put(rec);
            if (alive)
                return RK_OK;
            if (failed)
                return RK_E_INTERNAL;
        } else if (rec) {
            json_object_put(rec);
        }
        /* Poll once a second, but never sleep past the deadline. */
        int64_t left = until - rk_now_ms();
        if (left > 0)
            usleep((useconds_t)(left < 1000 ? left : 1000) * 1000);
    }
    return rk_call_set_error(call, RK_E_TIMEOUT, "sandbox %s not running after %ds", id, wait_s);
}

/* ---- guarded transitions ------------------------------------------------------------- */

/* A transition that only applies while the record is in one of two states. */
struct guarded_ctx {
    enum rk_state from_a, from_b, to;
    const char *event;
};

static int apply_guarded(json_object *rec, void *ctx)
{
    struct guarded_ctx *g = ctx;
    enum rk_state st = rk_rec_state(rec);
    if (st != g->from_a && st != g->from_b)
        return 1;
    rk_rec_transition(rec, g->to, g->event);
    return 0;
}

rk_store_rc rk_lifecycle_transition(struct rk_app *app, const char *id, enum rk_state from_a,
                                    enum rk_state from_b, enum rk_state to, const char *event)
{
    struct guarded_ctx g = {from_a, from_b, to, event};
    char err[RK_STORE_ERRLEN];
    rk_ep_cache_forget_sandbox(id); /* cached proxy endpoints die with the state change */
    rk_store_rc rc = rk_store_update(app->store, id, apply_guarded, &g, NULL, err, sizeof err);
    if (rc == RK_STORE_ERROR)
        rk_warn("sandbox %s: cannot record state %s: %s", id, rk_state_name(to), err);
    return rc;
}

void rk_lifecycle_reset_sessions(struct rk_app *app, struct rk_call *call, json_object *rec)
{
    const struct rk_plugin *pl = app->plugin;
    const char *id = rk_rec_str(rec, "sandbox_id");
    if (!id)
        return;
    char err[RK_STORE_ERRLEN];
    char **ids = NULL;
    size_t n = 0;
    if (rk_session_take_all(app->store, id, &ids, &n, err, sizeof err) != RK_STORE_OK) {
        rk_warn("sandbox %s: cannot free its session names after the restart: %s", id, err);
        return;
    }
    const char *tag = pl->desc->backend_tag;
    struct rk_sandbox_ref ref = {id, rk_rec_upstream_id(rec, tag), tag, rk_rec_state(rec)};
    for (size_t i = 0; i < n && (pl->caps & RK_CAP_SESSION); i++) {
        rk_status st;
        RK_UPSTREAM(st, pl, session_close, call, &ref, ids[i]);
        if (st != RK_OK) {
            rk_warn("sandbox %s: closing an old session after the restart failed: %s", id,
                    rk_call_error_text(call));
            rk_call_clear_error(call);
        }
    }
    if (n)
        rk_info("sandbox %s: restarted; %zu old session(s) closed, their names are free", id, n);
    rk_store_free_ids(ids, n);
}

void rk_lifecycle_vanished(struct rk_app *app, const char *id, enum rk_state from)
{
    if (rk_lifecycle_transition(app, id, from, from, RK_STATE_DELETED, "vanished") == RK_STORE_OK)
        clear_sessions(app, id);
}

/* ---- stop / restart / archive ------------------------------------------------------- */

rk_status rk_lifecycle_state_op(struct rk_app *app, struct rk_call *call, enum rk_op op,
                                const struct rk_sandbox_ref *ref, enum rk_state to)
{
    const struct rk_plugin *pl = app->plugin;
    rk_status (*fn)(void *, struct rk_call *, const struct rk_sandbox_ref *) =
        op == RK_OP_STOP      ? pl->ops.stop
        : op == RK_OP_RESTART ? pl->ops.restart
        : op == RK_OP_ARCHIVE ? pl->ops.archive
                              : NULL;
    if (!fn)
        return rk_call_set_error(call, RK_E_INTERNAL, "operation %d is not a state change",
                                 (int)op);
    const char *event = rk_op_info(op)->name;
    rk_metrics_upstream_begin();
    rk_status st = fn(pl->inst, call, ref);
    rk_metrics_upstream(event, st);
    if (st != RK_OK)
        return st;
    /* The backend changed state: record it (a store failure is logged). */
    struct patch p = {.to = to, .event = event};
    patch_record(app, ref->sandbox_id, &p, NULL);
    return RK_OK;
}
