/* SPDX-License-Identifier: Apache-2.0 */
/* Archive and restore jobs by backend snapshots (archive.h): record patches,
 * the job threads, and the take-over of a job whose admin died. */
#include "domain/archive.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/app.h"
#include "domain/dispatch.h"
#include "host/host.h"
#include "obs/log.h"
#include "obs/metrics.h"
#include "host/plugin_loader.h"
#include "domain/record.h"
#include "store/store.h"
#include "base/util.h"

/* Lease of a running job; refreshed on every poll (about once a second). */
#define JOB_LEASE_S 10
/* Lease while one plugin call may block for long (resume + snapshot, create). */
#define JOB_LONG_LEASE_S 900
/* Longest time a snapshot may stay Creating before the archive fails. */
#define ARCHIVE_MAX_S 3600
/* Upper bound of concurrent archive/restore jobs (each holds one thread). */
#define MAX_JOBS 128

static atomic_int jobs;

/* ---- record patches ------------------------------------------------------------ */

/* One atomic change of a record (see rk_store_update). */
struct jpatch {
    enum rk_state expect;    /* apply only in this state */
    enum rk_state to;        /* transition (0 = none) */
    const char *event;       /* transition event */
    const char *tag;         /* backend tag */
    const char *upstream_id; /* set extended_params.<tag>_id */
    int drop_upstream;       /* remove extended_params.<tag>_id */
    const char *snapshot_id; /* set snapshot_id */
    int snapshot_if_absent;  /* abort when a snapshot_id is already recorded */
    int drop_snapshot;       /* remove snapshot_id */
    int snapshot_restored;   /* move snapshot_id to restored_from */
    int drop_restored;       /* remove restored_from */
    const char *host_name;   /* set host_name */
    const char *error;       /* set archive_error (NULL leaves it) */
    int clear_error;         /* remove archive_error */
    int64_t lease;           /* set job_lease (epoch s; 0 leaves it) */
    int drop_lease;          /* remove job_lease */
    int restoring;           /* 1 sets restoring, -1 removes it */
    int archive_time;        /* stamp archive_time */
    int require_restoring;   /* apply only while restoring is set */
};

static int apply_jpatch(json_object *rec, void *ctx)
{
    struct jpatch *p = ctx;
    if (p->expect && rk_rec_state(rec) != p->expect)
        return 1;
    json_object *v;
    if (p->require_restoring &&
        !(json_object_object_get_ex(rec, "restoring", &v) && v && json_object_get_boolean(v)))
        return 1;
    if (p->snapshot_if_absent && rk_rec_str(rec, "snapshot_id"))
        return 1; /* another job recorded its snapshot first */
    if (p->upstream_id)
        rk_rec_set_backend(rec, p->tag, p->upstream_id);
    if (p->drop_upstream && json_object_object_get_ex(rec, "extended_params", &v) && v) {
        char key[128];
        snprintf(key, sizeof key, "%s_id", p->tag);
        json_object_object_del(v, key);
    }
    if (p->snapshot_id)
        rk_rec_set_str(rec, "snapshot_id", p->snapshot_id);
    if (p->drop_snapshot)
        json_object_object_del(rec, "snapshot_id");
    if (p->snapshot_restored && rk_rec_str(rec, "snapshot_id")) {
        /* The restored sandbox uses it (Docker refuses to delete it until
         * the sandbox is gone); it is deleted with the sandbox or replaced
         * by the next archive. */
        rk_rec_set_str(rec, "restored_from", rk_rec_str(rec, "snapshot_id"));
        json_object_object_del(rec, "snapshot_id");
    }
    if (p->drop_restored)
        json_object_object_del(rec, "restored_from");
    if (p->host_name)
        rk_rec_set_str(rec, "host_name", p->host_name);
    if (p->error)
        rk_rec_set_str(rec, "archive_error", p->error);
    if (p->clear_error)
        json_object_object_del(rec, "archive_error");
    if (p->lease)
        json_object_object_add(rec, "job_lease", json_object_new_int64(p->lease));
    if (p->drop_lease)
        json_object_object_del(rec, "job_lease");
    if (p->restoring > 0)
        json_object_object_add(rec, "restoring", json_object_new_boolean(1));
    if (p->restoring < 0)
        json_object_object_del(rec, "restoring");
    if (p->archive_time) {
        char now[32];
        rk_iso_time(rk_epoch_s(), now);
        rk_rec_set_str(rec, "archive_time", now);
    }
    if (p->to)
        rk_rec_transition(rec, p->to, p->event);
    return 0;
}

/* Apply a patch; *out (if given) receives the stored record. */
static rk_store_rc jpatch_apply(struct rk_app *app, const char *id, struct jpatch *p,
                                json_object **out)
{
    char err[RK_STORE_ERRLEN];
    json_object *o = NULL;
    rk_store_rc rc = rk_store_update(app->store, id, apply_jpatch, p, &o, err, sizeof err);
    if (rc == RK_STORE_ERROR)
        rk_warn("sandbox %s: cannot update its record: %s", id, err);
    if (out)
        *out = o;
    else if (o)
        json_object_put(o);
    return rc;
}

static int64_t rec_int(json_object *rec, const char *key)
{
    json_object *v;
    return json_object_object_get_ex(rec, key, &v) && v ? json_object_get_int64(v) : 0;
}

void rk_archive_drop_restored(struct rk_app *app, struct rk_call *call, json_object *rec)
{
    const struct rk_plugin *pl = app->plugin;
    if (!(pl->caps & RK_CAP_SNAPSHOT))
        return;
    /* restored_from: the snapshot the sandbox was restored from; snapshot_id of
     * a record that is not archived: a restore that never finished. */
    enum rk_state st0 = rk_rec_state(rec);
    int keeps_snapshot = st0 == RK_STATE_ARCHIVED || st0 == RK_STATE_ARCHIVING;
    const char *keys[2] = {"restored_from", keeps_snapshot ? NULL : "snapshot_id"};
    for (int i = 0; i < 2; i++) {
        const char *snap = keys[i] ? rk_rec_str(rec, keys[i]) : NULL;
        if (!snap)
            continue;
        rk_metrics_upstream_begin();
        rk_status st = pl->ops.snapshot_delete(pl->inst, call, snap);
        rk_metrics_upstream("snapshot_delete", st);
        if (st != RK_OK)
            rk_warn("sandbox %s: cannot delete its snapshot %s: %s", rk_rec_str(rec, "sandbox_id"),
                    snap, rk_call_error_text(call));
        rk_call_clear_error(call);
    }
}

/* ---- background jobs ------------------------------------------------------------- */

struct job {
    struct rk_app *app;
    char id[256];
    char snapshot_id[256]; /* restore: the snapshot to create from */
    int restore;           /* 0 archive, 1 restore */
    struct rk_create_spec spec;
    char *strs[5]; /* owned copies behind spec */
};

static void job_free(struct job *j)
{
    for (size_t i = 0; i < sizeof j->strs / sizeof j->strs[0]; i++)
        free(j->strs[i]);
    free(j);
}

static void nap_s(int s)
{
    struct timespec ts = {s, 0};
    nanosleep(&ts, NULL);
}

/* The archive failed: pause the source again, drop the snapshot, back to stopped. */
static void archive_fail(struct rk_app *app, struct rk_call *call, json_object *rec,
                         const char *snap, const char *why)
{
    const struct rk_plugin *pl = app->plugin;
    const char *id = rk_rec_str(rec, "sandbox_id");
    char *msg = rk_strdup_printf("archive failed: %s", why ? why : "unknown error");
    struct rk_sandbox_ref ref = {id, rk_rec_upstream_id(rec, pl->desc->backend_tag),
                                 pl->desc->backend_tag, RK_STATE_ARCHIVING};
    /* snapshot_create may have resumed it: the record will say stopped again. */
    if ((pl->caps & RK_CAP_STOP) && ref.upstream_id) {
        rk_metrics_upstream_begin();
        rk_status st = pl->ops.stop(pl->inst, call, &ref);
        rk_metrics_upstream("stop", st);
        if (st != RK_OK)
            rk_warn("sandbox %s: cannot pause it again after the failed archive: %s", id,
                    rk_call_error_text(call));
    }
    if (snap) {
        rk_metrics_upstream_begin();
        rk_status st = pl->ops.snapshot_delete(pl->inst, call, snap);
        rk_metrics_upstream("snapshot_delete", st);
    }
    struct jpatch p = {.expect = RK_STATE_ARCHIVING,
                       .to = RK_STATE_STOPPED,
                       .event = "archive_failed",
                       .tag = pl->desc->backend_tag,
                       .drop_snapshot = 1,
                       .error = msg,
                       .drop_lease = 1};
    jpatch_apply(app, id, &p, NULL);
    rk_warn("sandbox %s: %s", id, msg);
    free(msg);
}

/* Archive: snapshot (unless one is recorded), wait for Ready, release the source. */
static void run_archive(struct rk_app *app, struct rk_call *call, const char *id)
{
    const struct rk_plugin *pl = app->plugin;
    const char *tag = pl->desc->backend_tag;
    json_object *rec = NULL;
    struct jpatch lease = {.expect = RK_STATE_ARCHIVING, .lease = rk_epoch_s() + JOB_LONG_LEASE_S};
    if (jpatch_apply(app, id, &lease, &rec) != RK_STORE_OK || !rec) {
        json_object_put(rec);
        return; /* no longer archiving */
    }
    struct rk_sandbox_ref ref = {id, rk_rec_upstream_id(rec, tag), tag, RK_STATE_ARCHIVING};
    char snap[256] = "";
    if (rk_rec_str(rec, "snapshot_id"))
        snprintf(snap, sizeof snap, "%s", rk_rec_str(rec, "snapshot_id"));
    if (!*snap) {
        struct rk_snapshot s = {0};
        rk_metrics_upstream_begin();
        rk_status st = pl->ops.snapshot_create(pl->inst, call, &ref, &s);
        rk_metrics_upstream("snapshot_create", st);
        if (st != RK_OK || !s.snapshot_id) {
            archive_fail(app, call, rec, NULL,
                         st != RK_OK ? rk_call_error_text(call) : "no snapshot id");
            json_object_put(rec);
            return;
        }
        snprintf(snap, sizeof snap, "%s", s.snapshot_id);
        struct jpatch p = {.expect = RK_STATE_ARCHIVING,
                           .snapshot_id = snap,
                           .snapshot_if_absent = 1,
                           .lease = rk_epoch_s() + JOB_LEASE_S};
        if (jpatch_apply(app, id, &p, NULL) != RK_STORE_OK) {
            /* Deleted meanwhile, or another job won: leave no extra snapshot
             * behind (a Creating one cannot be deleted yet: wait for it). */
            for (int i = 0; i < 600 && !app->stopping; i++) {
                rk_call_clear_error(call);
                if (pl->ops.snapshot_delete(pl->inst, call, snap) != RK_E_CONFLICT)
                    break;
                nap_s(1);
            }
            json_object_put(rec);
            return;
        }
    }
    int64_t give_up = rk_epoch_s() + ARCHIVE_MAX_S;
    for (;;) {
        if (app->stopping) {
            json_object_put(rec); /* the lease runs out; another process takes over */
            return;
        }
        struct rk_snapshot s = {0};
        rk_call_clear_error(call);
        rk_metrics_upstream_begin();
        rk_status st = pl->ops.snapshot_get(pl->inst, call, snap, &s);
        rk_metrics_upstream("snapshot_get", st);
        if (st == RK_OK && s.state == RK_SNAPSHOT_READY)
            break;
        if ((st == RK_OK && s.state == RK_SNAPSHOT_FAILED) || st == RK_E_NOT_FOUND) {
            archive_fail(app, call, rec, st == RK_OK ? snap : NULL,
                         st == RK_OK ? (s.reason ? s.reason : "snapshot failed")
                                     : rk_call_error_text(call));
            json_object_put(rec);
            return;
        }
        if (rk_epoch_s() > give_up) {
            archive_fail(app, call, rec, snap, "snapshot not ready in time");
            json_object_put(rec);
            return;
        }
        struct jpatch p = {.expect = RK_STATE_ARCHIVING, .lease = rk_epoch_s() + JOB_LEASE_S};
        if (jpatch_apply(app, id, &p, NULL) != RK_STORE_OK) {
            json_object_put(rec);
            return;
        }
        nap_s(1);
    }
    /* Ready: release the source sandbox (the snapshot is the archive now). */
    if (ref.upstream_id) {
        rk_metrics_upstream_begin();
        rk_status st = pl->ops.destroy(pl->inst, call, &ref);
        rk_metrics_upstream("destroy", st);
        if (st != RK_OK)
            rk_warn("sandbox %s: archived, but releasing its source sandbox failed (it expires "
                    "on its own): %s",
                    id, rk_call_error_text(call));
    }
    if (rk_rec_str(rec, "restored_from")) /* the snapshot this one was restored from */
        rk_archive_drop_restored(app, call, rec);
    struct jpatch done = {.expect = RK_STATE_ARCHIVING,
                          .to = RK_STATE_ARCHIVED,
                          .event = "archive_done",
                          .tag = tag,
                          .drop_restored = 1,
                          .drop_upstream = 1,
                          .clear_error = 1,
                          .drop_lease = 1,
                          .archive_time = 1};
    jpatch_apply(app, id, &done, NULL);
    rk_info("sandbox %s: archived as snapshot %s", id, snap);
    json_object_put(rec);
}

/* Restore: create from the snapshot; success records the new backend id. */
static void run_restore(struct rk_app *app, struct rk_call *call, struct job *j)
{
    const struct rk_plugin *pl = app->plugin;
    const char *tag = pl->desc->backend_tag;
    struct rk_created out = {0};
    rk_metrics_upstream_begin();
    rk_status st = pl->ops.restore_snapshot(pl->inst, call, &j->spec, j->snapshot_id, &out);
    rk_metrics_upstream("restore_snapshot", st);
    if (st == RK_OK && out.upstream_id) {
        struct jpatch p = {.expect = RK_STATE_PENDING,
                           .require_restoring = 1,
                           .tag = tag,
                           .upstream_id = out.upstream_id,
                           .host_name = out.host_name ? out.host_name : out.upstream_id,
                           .snapshot_restored = 1,
                           .restoring = -1,
                           .drop_lease = 1};
        if (jpatch_apply(app, j->id, &p, NULL) != RK_STORE_OK) {
            struct rk_sandbox_ref ref = {j->id, out.upstream_id, tag, RK_STATE_DELETED};
            pl->ops.destroy(pl->inst, call, &ref); /* nobody owns it any more */
        } else {
            rk_info("sandbox %s: restored from snapshot %s", j->id, j->snapshot_id);
        }
        return;
    }
    char *msg = rk_strdup_printf("restore failed: %s",
                                 st != RK_OK ? rk_call_error_text(call) : "no sandbox id");
    struct jpatch p = {.expect = RK_STATE_PENDING,
                       .require_restoring = 1,
                       .to = RK_STATE_ARCHIVED,
                       .event = "restore_failed",
                       .restoring = -1,
                       .drop_lease = 1,
                       .error = msg};
    jpatch_apply(app, j->id, &p, NULL);
    rk_warn("sandbox %s: %s", j->id, msg);
    free(msg);
}

static void *job_thread(void *arg)
{
    struct job *j = arg;
    char rid[300];
    snprintf(rid, sizeof rid, "%s-%s", j->restore ? "restore" : "archive", j->id);
    struct rk_call *call = rk_call_new(rid, -1, 0);
    if (j->restore)
        run_restore(j->app, call, j);
    else
        run_archive(j->app, call, j->id);
    rk_call_free(call);
    job_free(j);
    atomic_fetch_sub(&jobs, 1);
    rk_app_bg_leave();
    return NULL;
}

static rk_status spawn(struct rk_call *call, struct job *j)
{
    if (atomic_fetch_add(&jobs, 1) >= MAX_JOBS) {
        atomic_fetch_sub(&jobs, 1);
        job_free(j);
        return rk_call_set_error(call, RK_E_UNAVAILABLE,
                                 "too many archive/restore jobs in progress (limit %d)", MAX_JOBS);
    }
    if (rk_app_bg_start(job_thread, j) != 0) {
        atomic_fetch_sub(&jobs, 1);
        job_free(j);
        return rk_call_set_error(call, RK_E_INTERNAL, "cannot start the archive job");
    }
    return RK_OK;
}

static struct job *job_new(struct rk_app *app, const char *id)
{
    struct job *j = calloc(1, sizeof *j);
    if (!j)
        abort();
    j->app = app;
    snprintf(j->id, sizeof j->id, "%s", id);
    return j;
}

/* ---- entry points --------------------------------------------------------------- */

rk_status rk_archive_start(struct rk_app *app, struct rk_call *call, const char *id)
{
    return spawn(call, job_new(app, id));
}

void rk_archive_recover(struct rk_app *app, json_object *rec)
{
    if (rk_rec_state(rec) != RK_STATE_ARCHIVING || !(app->plugin->caps & RK_CAP_SNAPSHOT))
        return;
    if (rec_int(rec, "job_lease") >= rk_epoch_s())
        return; /* its job is alive */
    const char *id = rk_rec_str(rec, "sandbox_id");
    if (!id)
        return;
    char claim[300], err[RK_STORE_ERRLEN];
    snprintf(claim, sizeof claim, "archive-job:%s", id);
    if (rk_store_claim(app->store, claim, JOB_LEASE_S, err, sizeof err) != RK_STORE_OK)
        return; /* another process took it */
    rk_info("sandbox %s: archive job lost its admin; taking it over", id);
    struct rk_call *call = rk_call_new("archive-recover", -1, 0);
    if (rk_archive_start(app, call, id) != RK_OK)
        rk_warn("sandbox %s: %s", id, rk_call_error_text(call));
    rk_call_free(call);
}

static char *dup_or_null(const char *s)
{
    return s ? rk_xstrdup(s) : NULL;
}

rk_status rk_restore_start(struct rk_app *app, struct rk_call *call, json_object *rec)
{
    const char *id = rk_rec_str(rec, "sandbox_id");
    const char *snap = rk_rec_str(rec, "snapshot_id");
    if (!id || !snap)
        return rk_call_set_error(call, RK_E_INVALID,
                                 "Sandbox %s cannot be restored: it has no snapshot", id ? id : "");
    struct job *j = job_new(app, id);
    j->restore = 1;
    snprintf(j->snapshot_id, sizeof j->snapshot_id, "%s", snap);
    const char *mem = rk_rec_str(rec, "memory_requested");
    j->strs[0] = dup_or_null(rk_rec_str(rec, "image"));
    j->strs[1] = dup_or_null(mem ? mem : rk_rec_str(rec, "memory"));
    j->strs[2] = dup_or_null(rk_rec_str(rec, "user_id"));
    j->strs[3] = dup_or_null(rk_rec_str(rec, "experiment_id"));
    j->strs[4] = dup_or_null(rk_rec_str(rec, "namespace"));
    json_object *v;
    j->spec.sandbox_id = j->id;
    j->spec.image = j->strs[0];
    j->spec.memory = j->strs[1];
    j->spec.user_id = j->strs[2];
    j->spec.experiment_id = j->strs[3];
    j->spec.namespace_name = j->strs[4];
    j->spec.cpus = json_object_object_get_ex(rec, "cpus", &v) && v ? json_object_get_double(v) : 0;
    j->spec.limit_cpus =
        json_object_object_get_ex(rec, "limit_cpus", &v) && v ? json_object_get_double(v) : 0;
    j->spec.idle_timeout_s = rec_int(rec, "auto_clear_time") * 60;
    struct jpatch p = {.expect = RK_STATE_ARCHIVED,
                       .to = RK_STATE_PENDING,
                       .event = "restore",
                       .restoring = 1,
                       .clear_error = 1,
                       .lease = rk_epoch_s() + JOB_LONG_LEASE_S};
    json_object *stored = NULL;
    rk_store_rc rc = jpatch_apply(app, id, &p, &stored);
    if (rc != RK_STORE_OK) {
        json_object_put(stored);
        job_free(j);
        if (rc == RK_STORE_ABORTED)
            return rk_call_set_error(call, RK_E_INVALID,
                                     "Sandbox %s cannot be restarted: its state changed", id);
        return rk_call_set_error(call, RK_E_UNAVAILABLE, "sandbox store unavailable");
    }
    rk_dispatch_touch(app, stored); /* active again: the idle timer runs */
    json_object_put(stored);
    char idbuf[256];
    snprintf(idbuf, sizeof idbuf, "%s", id);
    rk_status st = spawn(call, j); /* frees j on failure */
    if (st != RK_OK) {
        /* No job will run: back to archived at once (not after the lease). */
        struct jpatch back = {.expect = RK_STATE_PENDING,
                              .require_restoring = 1,
                              .to = RK_STATE_ARCHIVED,
                              .event = "restore_failed",
                              .restoring = -1,
                              .drop_lease = 1};
        jpatch_apply(app, idbuf, &back, NULL);
    }
    return st;
}

int rk_restore_in_progress(json_object *rec)
{
    json_object *v;
    return json_object_object_get_ex(rec, "restoring", &v) && v && json_object_get_boolean(v);
}

/* A restore whose admin died (its lease ran out): the snapshot is still
 * there, so the record goes back to archived and a client may restart it. */
static void restore_take_over(struct rk_app *app, json_object *rec)
{
    const char *id = rk_rec_str(rec, "sandbox_id");
    if (!id || !rk_restore_in_progress(rec) || rec_int(rec, "job_lease") >= rk_epoch_s())
        return;
    char idbuf[256];
    snprintf(idbuf, sizeof idbuf, "%s", id);
    struct jpatch p = {.expect = RK_STATE_PENDING,
                       .require_restoring = 1,
                       .to = RK_STATE_ARCHIVED,
                       .event = "restore_failed",
                       .restoring = -1,
                       .drop_lease = 1,
                       .error = "restore failed: the admin running it stopped"};
    if (jpatch_apply(app, idbuf, &p, NULL) == RK_STORE_OK)
        rk_info("sandbox %s: restore job lost its admin; back to archived", idbuf);
}

void rk_archive_take_over_jobs(struct rk_app *app)
{
    if (!app->plugin || !(app->plugin->caps & RK_CAP_SNAPSHOT))
        return;
    char err[RK_STORE_ERRLEN];
    char **ids = NULL;
    size_t n = 0;
    if (rk_store_list_jobs(app->store, &ids, &n, err, sizeof err) != RK_STORE_OK) {
        rk_warn("job take-over: %s", err);
        return;
    }
    json_object **recs = n ? calloc(n, sizeof *recs) : NULL;
    if (n && !recs)
        rk_warn("job take-over: out of memory");
    else if (n && rk_store_get_many(app->store, (const char *const *)ids, n, recs, err,
                                    sizeof err) != RK_STORE_OK)
        rk_warn("job take-over: %s", err);
    else
        for (size_t i = 0; i < n && !app->stopping; i++) {
            if (!recs[i])
                continue; /* gone since the list */
            if (rk_rec_state(recs[i]) == RK_STATE_ARCHIVING)
                rk_archive_recover(app, recs[i]);
            else
                restore_take_over(app, recs[i]);
        }
    for (size_t i = 0; recs && i < n; i++)
        json_object_put(recs[i]);
    free(recs);
    rk_store_free_ids(ids, n);
}

rk_status rk_archive_delete_snapshot(struct rk_app *app, struct rk_call *call, json_object *rec)
{
    const struct rk_plugin *pl = app->plugin;
    const char *snap = rk_rec_str(rec, "snapshot_id");
    if (!snap || !(pl->caps & RK_CAP_SNAPSHOT) || !pl->ops.snapshot_delete)
        return RK_OK;
    rk_metrics_upstream_begin();
    rk_status st = pl->ops.snapshot_delete(pl->inst, call, snap);
    rk_metrics_upstream("snapshot_delete", st);
    return st;
}
