/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The reconciler (see reconciler.h). Staleness bound: a state change upstream
 * is visible through get_status after at most one interval plus one pass
 * (list + writes), i.e. about 2 s with the default 1 s interval, and after at
 * most the lease TTL (3 intervals, at least 3 s) more when the elected admin
 * dies and another one takes the lease over.
 *
 * Ordering: the store's active records are read BEFORE the list call, so a
 * sandbox created during the pass is never mistaken for a vanished one; a
 * record without an upstream id (create still running) is only failed after
 * its create deadline, exactly as the per-request status path does.
 *
 * A long pass keeps vouching (pass_beat): while it makes progress (records read, list
 * pages, records applied) it renews its lease and stores a progress beat at least every
 * interval, so another admin does not start a second pass beside it and status reads
 * keep coming from the store instead of all falling back to the backend at once (which
 * made a busy backend busier: passes of 7-12 s at 16,000 sandboxes did exactly that).
 * A pass that stops making progress (a hung list) stops beating, and reads fall back
 * after the usual bound. The staleness bound stays one interval plus one pass.
 *
 * A pass does not read every record every time: records an earlier pass found settled
 * (running under their backend id, nothing observed, left alone) are remembered, and a pass
 * takes their glance from memory, reading each of them again every SETTLED_REREAD passes
 * (staggered by id). A change upstream still shows at once: the listing then disagrees with
 * the glance and the record is read before anything is applied. A change made in the store
 * alone reaches the pass within SETTLED_REREAD intervals; the requests that make such changes
 * write their outcome themselves. The memory is dropped whenever a pass does not complete.
 *
 * Archive and restore jobs whose admin died are not the reconciler's: the
 * background pass (domain/sweeper.c) takes them over for every plugin. After
 * a pass the reconciler clears the session mappings that status reads left to
 * the background.
 */
#include "rkutil.h"
#include "domain/reconciler.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/app.h"
#include "config/config.h"
#include "host/host.h"
#include "domain/create_queue.h"
#include "domain/lifecycle.h"
#include "obs/log.h"
#include "obs/metrics.h"
#include "host/plugin_loader.h"
#include "domain/record.h"
#include "store/store.h"
#include "base/util.h"

/** Name of the store lease that elects the reconciling admin. */
#define RECONCILE_LEASE "reconciler"
/** Deadline of one pass (list pages + store writes). */
#define RECONCILE_PASS_MS 30000

static pthread_mutex_t rc_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t rc_cv;
static int rc_stop;
static _Atomic int rc_running; /* read by request threads (rk_reconciler_active) */
static pthread_t rc_thread;
static char rc_owner[128]; /* this process in the lease: host:pid:random */
static int rc_leader;      /* 1 while this process holds the lease (for log lines) */

/* One sandbox as the backend listed it (copied out of the plugin's callback). */
struct listed {
    char *rock_id;
    char *upstream_id;
    char *reason;
    enum rk_state state;
    int failed;
};

/* A pass's progress beat (pass_beat): when the last one was stored, and whether the lease
 * was lost to another admin meanwhile. */
struct beat {
    struct rk_app *app;
    int64_t last_ms;
    int lost;
};

/* Everything one list pass returned. */
struct listing {
    struct listed *v;
    size_t n, cap;
    int oom;
    struct beat *beat; /* beaten as pages arrive */
};

/* 1 if the plugin can list and the reconciler is enabled in the config. */
static int can_reconcile(const struct rk_app *app)
{
    return app && app->plugin && (app->plugin->desc->caps & RK_CAP_LIST) && app->plugin->ops.list &&
           app->cfg->runtime.reconcile_interval_ms > 0;
}

int rk_reconciler_active(const struct rk_app *app)
{
    return rc_running && can_reconcile(app);
}

static int pass_beat(struct beat *b);

/* rk_list_fn: copy one listed sandbox. */
static void collect(void *ctx, const char *sandbox_id, const struct rk_status_info *info)
{
    struct listing *l = ctx;
    if (l->beat)
        pass_beat(l->beat);
    if (!sandbox_id || !info || l->oom)
        return;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        struct listed *nv = realloc(l->v, cap * sizeof *nv);
        if (!nv) {
            l->oom = 1;
            return;
        }
        l->v = nv;
        l->cap = cap;
    }
    struct listed *e = &l->v[l->n];
    e->rock_id = strdup(sandbox_id);
    e->upstream_id = info->upstream_id ? strdup(info->upstream_id) : NULL;
    e->reason = info->reason ? strdup(info->reason) : NULL;
    e->state = info->state;
    e->failed = info->failed;
    if (!e->rock_id || (info->upstream_id && !e->upstream_id) || (info->reason && !e->reason)) {
        free(e->rock_id);
        free(e->upstream_id);
        free(e->reason);
        l->oom = 1;
        return;
    }
    l->n++;
}

/* Free a listing. */
static void listing_free(struct listing *l)
{
    for (size_t i = 0; i < l->n; i++) {
        free(l->v[i].rock_id);
        free(l->v[i].upstream_id);
        free(l->v[i].reason);
    }
    free(l->v);
}

/* qsort/bsearch order: by ROCK id. */
static int by_rock_id(const void *a, const void *b)
{
    return strcmp(((const struct listed *)a)->rock_id, ((const struct listed *)b)->rock_id);
}

/* The listed entry for a record: the one with the record's upstream id, else (create outcome
 * unknown) the first that is not deleted, else any. NULL when the backend did not list it. */
static const struct listed *find_listed(const struct listing *l, const char *rock_id,
                                        const char *upstream)
{
    if (l->n == 0 || !rock_id)
        return NULL;
    struct listed key = {.rock_id = (char *)rock_id};
    const struct listed *hit = bsearch(&key, l->v, l->n, sizeof *l->v, by_rock_id);
    if (!hit)
        return NULL;
    const struct listed *lo = hit, *hi = hit;
    while (lo > l->v && strcmp(lo[-1].rock_id, rock_id) == 0)
        lo--;
    while (hi + 1 < l->v + l->n && strcmp(hi[1].rock_id, rock_id) == 0)
        hi++;
    if (upstream) {
        for (const struct listed *e = lo; e <= hi; e++)
            if (e->upstream_id && strcmp(e->upstream_id, upstream) == 0)
                return e;
        return NULL; /* only other upstream sandboxes carry this id: ours is gone */
    }
    for (const struct listed *e = lo; e <= hi; e++)
        if (e->state != RK_STATE_DELETED)
            return e;
    return lo;
}

/* Staleness bound of store-only reads, ms: three intervals, at least 3 s. */
static int64_t fresh_ms(const struct rk_app *app)
{
    int64_t b = (int64_t)app->cfg->runtime.reconcile_interval_ms * 3;
    return b < 3000 ? 3000 : b;
}

/* Mark format: "<epoch ms of the last successful pass> <epoch ms of the last pass end or
 * progress beat> <1 while a pass is in progress, else 0> <error>". (Admins before the beat
 * wrote no third number; their marks read as "no pass in progress".) */
int rk_reconciler_mark_fresh(const struct rk_app *app, const char *mark)
{
    long long ok_ms = 0, at_ms = 0;
    int busy = 0;
    if (!mark || sscanf(mark, "%lld %lld %d", &ok_ms, &at_ms, &busy) < 1 || ok_ms <= 0)
        return 0;
    int64_t now = rk_epoch_ms(), bound = fresh_ms(app);
    if (now - ok_ms < bound)
        return 1;
    /* A pass in progress that beat recently vouches for what the previous one stored, for
     * as long as a pass may take. */
    return busy == 1 && now - at_ms < bound && now - ok_ms < bound + RECONCILE_PASS_MS;
}

/* What a stored mark says about the pass. */
enum mark_kind { MARK_DONE, MARK_FAILED, MARK_PROGRESS };

/* Record the outcome or the progress of a pass in the store for every admin's reads. */
static void put_mark(struct rk_app *app, enum mark_kind kind, const char *error)
{
    static long long last_ok_ms;
    long long now = (long long)rk_epoch_ms();
    if (kind == MARK_DONE)
        last_ok_ms = now;
    if (kind == MARK_PROGRESS && last_ok_ms == 0)
        return; /* no pass of ours to vouch for yet: leave the mark as it is */
    char mark[RK_STORE_MARK_MAX], err[RK_STORE_ERRLEN];
    snprintf(mark, sizeof mark, "%lld %lld %d %s", last_ok_ms, now, kind == MARK_PROGRESS,
             error ? error : "");
    if (rk_store_set_mark(app->store, mark, err, sizeof err) != RK_STORE_OK)
        rk_warn("reconciler: cannot store the pass mark: %s", err);
}

/* Take or renew the lease; 1 if this process reconciles. */
static int hold_lease(struct rk_app *app)
{
    int ttl = (int)fresh_ms(app);
    char err[RK_STORE_ERRLEN];
    rk_store_rc rc = rk_store_lease(app->store, RECONCILE_LEASE, rc_owner, ttl, err, sizeof err);
    int leader = rc == RK_STORE_OK;
    if (rc == RK_STORE_ERROR)
        rk_warn("reconciler: lease: %s", err);
    if (leader != rc_leader)
        rk_info("reconciler: this admin %s the reconciler", leader ? "is now" : "is no longer");
    rc_leader = leader;
    return leader;
}

/* Every interval at most while a pass makes progress: renew the lease and store a progress
 * mark. -1 once the lease went to another admin (the pass then stops writing). */
static int pass_beat(struct beat *b)
{
    if (b->lost)
        return -1;
    int64_t now = rk_now_ms();
    if (now - b->last_ms < fresh_ms(b->app) / 3)
        return 0;
    b->last_ms = now;
    if (!hold_lease(b->app)) {
        b->lost = 1;
        return -1;
    }
    put_mark(b->app, MARK_PROGRESS, NULL);
    return 0;
}

/** A remembered settled record is read again at least every this many passes (see the top). */
#define SETTLED_REREAD 8

/* A record earlier passes found settled and left alone (reconciler thread only). */
struct settled {
    char *id;
    char *upstream;
};
static struct settled *rc_settled; /* sorted by id */
static size_t rc_nsettled;
static unsigned rc_pass_no;
/* Pending records with a backend id that the last complete pass did not see listed (sorted ids,
 * reconciler thread only): the next pass asks about those it misses again (see missed_before). */
static char **rc_missed;
static size_t rc_nmissed;
/* For /metrics (read by the scraping thread). */
static _Atomic unsigned long long rc_passes_total, rc_read_total, rc_unlisted_deferred;
/* confirm_unlisted's answers: the sandbox exists, is gone, or the backend did not say. */
static _Atomic unsigned long long rc_unlisted_exists, rc_unlisted_gone, rc_unlisted_failed;
static _Atomic size_t rc_remembered;

/* qsort/bsearch order of an array of ids. */
static int by_id_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Forget the pending records the last pass missed (taking over the list of the next pass, or
 * dropping it: a pass did not complete, or the lease moved). */
static void missed_set(char **ids, size_t n)
{
    rk_store_free_ids(rc_missed, rc_nmissed);
    rc_missed = ids;
    rc_nmissed = n;
    if (n)
        qsort(rc_missed, rc_nmissed, sizeof *rc_missed, by_id_str);
}

/* Note that this pass missed pending record id, in *list (room for max ids, allocated at the
 * first); 1, or 0 out of memory (then it is asked about at once). */
static int missed_add(char ***list, size_t *n, size_t max, const char *id)
{
    if (!*list && !(*list = calloc(max, sizeof **list)))
        return 0;
    if (*n == max || !((*list)[*n] = strdup(id)))
        return 0;
    (*n)++;
    return 1;
}

/* 1 when the last complete pass missed pending record id too. */
static int missed_before(const char *id)
{
    return rc_nmissed && bsearch(&id, rc_missed, rc_nmissed, sizeof *rc_missed, by_id_str);
}

/* Forget every settled record (a pass did not complete, or the lease moved), and the pending
 * records the last pass missed. */
static void settled_clear(void)
{
    missed_set(NULL, 0);
    for (size_t i = 0; i < rc_nsettled; i++) {
        free(rc_settled[i].id);
        free(rc_settled[i].upstream);
    }
    free(rc_settled);
    rc_settled = NULL;
    rc_nsettled = 0;
    rc_remembered = 0;
}

/* qsort/bsearch order of struct settled: by ROCK id. */
static int by_settled_id(const void *a, const void *b)
{
    return strcmp(((const struct settled *)a)->id, ((const struct settled *)b)->id);
}

/* FNV-1a of a ROCK id: staggers the re-reads over the passes. */
static unsigned id_hash(const char *s)
{
    return (unsigned)rk_hash_str(s);
}

/* 1 when this pass may take record id's glance from memory (filled into g); 0 when it must
 * read the record; -1 out of memory. */
static int settled_glance(const char *id, struct rk_rec_glance *g)
{
    struct settled key = {.id = (char *)id};
    const struct settled *m =
        rc_nsettled ? bsearch(&key, rc_settled, rc_nsettled, sizeof key, by_settled_id) : NULL;
    if (!m || (id_hash(id) + rc_pass_no) % SETTLED_REREAD == 0)
        return 0;
    memset(g, 0, sizeof *g);
    g->present = 1;
    g->state = RK_STATE_RUNNING;
    g->upstream = strdup(m->upstream);
    return g->upstream ? 1 : -1;
}

/* Settled: running under its backend id, nothing observed, and left alone by the pass. */
static int is_settled(const struct rk_rec_glance *g, char acted)
{
    return g->present && g->state == RK_STATE_RUNNING && g->upstream && !g->observed && !acted;
}

/* After a complete pass: remember the records it found settled. Takes their ids and backend
 * ids out of ids and g. */
static void settled_keep(char **ids, size_t n, struct rk_rec_glance *g, const char *acted)
{
    settled_clear();
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        m += is_settled(&g[i], acted[i]);
    if (!m || !(rc_settled = malloc(m * sizeof *rc_settled)))
        return; /* out of memory: the next pass reads everything */
    for (size_t i = 0; i < n; i++) {
        if (!is_settled(&g[i], acted[i]))
            continue;
        rc_settled[rc_nsettled].id = ids[i];
        rc_settled[rc_nsettled].upstream = g[i].upstream;
        ids[i] = NULL;
        g[i].upstream = NULL;
        rc_nsettled++;
    }
    qsort(rc_settled, rc_nsettled, sizeof *rc_settled, by_settled_id);
    rc_remembered = rc_nsettled;
}

/* /metrics: what the passes of this admin cost the store. */
static void metrics_collect(void *arg, struct rk_buf *out)
{
    (void)arg;
    rk_metrics_family(out, "rock_admin_reconciler_passes_total", "counter",
                      "Complete reconciler passes this admin ran.");
    rk_buf_printf(out, "rock_admin_reconciler_passes_total %llu\n",
                  (unsigned long long)rc_passes_total);
    rk_metrics_family(out, "rock_admin_reconciler_records_read_total", "counter",
                      "Sandbox records the reconciler passes of this admin read from the store.");
    rk_buf_printf(out, "rock_admin_reconciler_records_read_total %llu\n",
                  (unsigned long long)rc_read_total);
    rk_metrics_family(out, "rock_admin_reconciler_settled_remembered", "gauge",
                      "Settled records the next pass takes from memory instead of the store.");
    rk_buf_printf(out, "rock_admin_reconciler_settled_remembered %zu\n", (size_t)rc_remembered);
    rk_metrics_family(out, "rock_admin_reconciler_unlisted_checks_total", "counter",
                      "Active sandboxes a complete listing did not show, asked about with a status "
                      "call, by answer (exists: it had moved between list pages).");
    rk_metrics_family(
        out, "rock_admin_reconciler_unlisted_deferred_total", "counter",
        "Pending sandboxes with a backend id that a complete listing did not show, left "
        "to the next pass instead of asked about (a sandbox created during the listing "
        "can move an older one past the pages read).");
    rk_buf_printf(out, "rock_admin_reconciler_unlisted_deferred_total %llu\n",
                  (unsigned long long)rc_unlisted_deferred);
    rk_buf_printf(out,
                  "rock_admin_reconciler_unlisted_checks_total{result=\"exists\"} %llu\n"
                  "rock_admin_reconciler_unlisted_checks_total{result=\"gone\"} %llu\n"
                  "rock_admin_reconciler_unlisted_checks_total{result=\"failed\"} %llu\n",
                  (unsigned long long)rc_unlisted_exists, (unsigned long long)rc_unlisted_gone,
                  (unsigned long long)rc_unlisted_failed);
}

/** Records read from the store between two progress beats. */
#define READ_CHUNK 1024

/* What the snapshot keeps of the records: a glance at each, and (shared store only) a copy of
 * those that are not settled (see glance_one). */
struct snapshot {
    struct rk_rec_glance *g;
    json_object **kept;
    const char *tag;
    int keep; /* copy the unsettled records (the store is shared: a read again is a round trip) */
    int oom;
};

/* rk_store_scan_each_fn: glance at one record as the store found it (Redis: its text, no tree
 * built). A settled record (running under its backend id, nothing observed: almost every record
 * of a deployment at rest) is not copied, nor is a pending one (in a create burst, every record
 * of every pass: the pass records those the listing shows running 64 at a time, deciding on the
 * stored record, and reads again the few others it changes). With Redis the rest (stopped,
 * failed: those a pass is likely to change) are kept whole for the apply step, which then needs
 * no second round trip. The in-process store keeps none: reading a record again costs what the
 * copy would. */
static void glance_found(void *ctx, size_t i, const struct rk_store_found *found)
{
    struct snapshot *sn = ctx;
    struct rk_rec_glance *g = &sn->g[i];
    memset(g, 0, sizeof *g);
    if (!found)
        return;
    json_object *tree = NULL;
    struct rk_rec_src src = rk_src_tree(found->rec);
    if (!found->rec && rk_src_text(&src, found->text, found->len, found->m, found->n, 0, 0) != 0) {
        tree = rk_store_found_tree(found); /* a type the text readers do not read: parsed */
        src = rk_src_tree(tree);
        if (!tree) {
            sn->oom = 1;
            return;
        }
    }
    if (rk_lifecycle_glance_src(&src, sn->tag, g) != 0)
        sn->oom = 1;
    rk_src_release(&src);
    if (sn->keep && g->present && g->state != RK_STATE_PENDING &&
        !(g->state == RK_STATE_RUNNING && g->upstream && !g->observed))
        sn->kept[i] = tree         ? json_object_get(tree)
                      : found->rec ? json_object_get(found->rec)
                                   : rk_store_found_tree(found);
    json_object_put(tree);
}

/* Glance at the active records ids[0..n) into sn, beating between chunks. */
static rk_store_rc read_records(struct rk_app *app, struct beat *b, char **ids, size_t n,
                                struct snapshot *sn, char *err, size_t errlen)
{
    for (size_t off = 0; off < n; off += READ_CHUNK) {
        size_t m = n - off < READ_CHUNK ? n - off : READ_CHUNK;
        struct snapshot part = {
            .g = sn->g + off, .kept = sn->kept + off, .tag = sn->tag, .keep = sn->keep};
        rk_store_rc rc = rk_store_scan_many(app->store, (const char *const *)ids + off, m,
                                            glance_found, &part, err, errlen);
        if (rc == RK_STORE_OK && part.oom) {
            snprintf(err, errlen, "out of memory");
            rc = RK_STORE_ERROR;
        }
        if (rc != RK_STORE_OK)
            return rc;
        if (pass_beat(b) != 0) {
            snprintf(err, errlen, "the reconciler lease went to another admin");
            return RK_STORE_ERROR;
        }
    }
    return RK_STORE_OK;
}

/* Release the snapshot. */
static void snapshot_free(struct snapshot *sn, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (sn->g)
            rk_lifecycle_glance_free(&sn->g[i]);
        if (sn->kept)
            json_object_put(sn->kept[i]);
    }
    free(sn->g);
    free(sn->kept);
}

/* A record the listing did not show is asked about once more before the pass records it gone.
 * A lifecycle list is paged by offset (OpenSandbox's server slices its sorted list), so a
 * sandbox deleted from a page already read moves the next page forward by one and a pass never
 * sees one sandbox that exists. The plugin's status() answers for that one sandbox: RK_OK with
 * *info filled (it exists: applied as if listed), RK_E_NOT_FOUND (gone), anything else (the
 * backend did not say: the record is left as it is to the next pass). A record whose create
 * waits in the queue or runs is not asked about: the pass changes nothing for it. A pending
 * record with a backend id is asked about only when the previous complete pass missed it too:
 * the server lists newest first, several pages are requested at once, and when a later page is
 * served before an earlier one, the sandboxes created in between push older ones past the
 * boundary of the two. In a create burst that hid about a hundred sandboxes a run, each asked
 * about on the pass's thread, at the peak a second or two of the pass; one that really vanished
 * while pending is recorded a pass later. */
static rk_status confirm_unlisted(struct rk_app *app, struct rk_call *call, const char *id,
                                  const struct rk_rec_glance *g, struct rk_status_info *info)
{
    if (!g->upstream && rk_create_queue_pending(app, id))
        return RK_E_NOT_FOUND; /* apply_backend_state leaves it to the queue */
    const struct rk_plugin *pl = app->plugin;
    struct rk_sandbox_ref ref = {id, g->upstream, pl->desc->backend_tag, g->state};
    rk_status st;
    RK_UPSTREAM(st, pl, status, call, &ref, info);
    if (st == RK_OK && !info->upstream_id && g->upstream)
        info->upstream_id = g->upstream; /* status() names it only when it looked it up */
    if (st == RK_OK) {
        rc_unlisted_exists++;
        rk_debug("reconciler: sandbox %s was not listed but exists upstream (%s)", id,
                 rk_state_name(info->state));
    } else if (st == RK_E_NOT_FOUND) {
        rc_unlisted_gone++;
    } else {
        rc_unlisted_failed++;
        rk_debug("reconciler: sandbox %s was not listed and its status failed: %s", id,
                 rk_call_error_text(call));
    }
    return st;
}

/* What apply_one's still_same compares a record with. */
struct recheck {
    const struct rk_rec_glance *was;
    const char *tag;
};

/* rk_store_view_each_fn: keep (copy) the record only while it is what the snapshot saw. */
static int still_same(void *ctx, size_t i, json_object *rec)
{
    (void)i;
    const struct recheck *rc = ctx;
    if (!rec)
        return 0;
    struct rk_rec_glance now;
    int same =
        rk_lifecycle_glance(rec, rc->tag, &now) == 0 && rk_lifecycle_glance_same(rc->was, &now);
    rk_lifecycle_glance_free(&now);
    return same;
}

/* Apply what the backend listed (e, NULL: not listed) to record id, glanced as g in the
 * snapshot, whose copy *kept the snapshot may hold. A record without a copy that the pass would
 * change (a settled one that stopped, failed or vanished upstream; with the in-process store any
 * record) is read again, and applied only while it still is what the snapshot saw (one changed
 * since is left to the next pass: the listing may predate the change). 1 if its state or failure
 * changed; *acted is set when the record needed a look (it is then not remembered as settled). */
static int apply_one(struct rk_app *app, struct rk_call *call, const char *id,
                     const struct rk_rec_glance *g, json_object **kept, const struct listed *e,
                     char *acted)
{
    struct rk_status_info info = {0};
    if (e) {
        info.state = e->state;
        info.failed = e->failed;
        info.reason = e->reason;
        info.upstream_id = e->upstream_id;
    }
    const struct rk_status_info *seen = e ? &info : NULL; /* NULL: the backend has it not */
    if (!rk_lifecycle_glance_needs(g, seen))
        return 0;
    *acted = 1; /* read again next pass, whatever happens here */
    json_object *rec = *kept;
    *kept = NULL;
    if (!rec) {
        /* Looked at in place first, copied only while it is what the snapshot saw: in a create
         * burst most such records were changed meanwhile (the create worker recorded its reply,
         * a state report turned it running), and a copy of each cost more than the pass's
         * other work on them. */
        char err[RK_STORE_ERRLEN];
        struct recheck rc = {.was = g, .tag = app->plugin->desc->backend_tag};
        const char *one = id;
        if (rk_store_view_many(app->store, &one, 1, still_same, &rc, &rec, err, sizeof err) !=
                RK_STORE_OK ||
            !rec)
            return 0; /* changed or gone meanwhile, or the store failed (the next pass sees it) */
    }
    if (!e) {
        rk_status cst = confirm_unlisted(app, call, id, g, &info);
        if (cst != RK_OK && cst != RK_E_NOT_FOUND) {
            rk_call_clear_error(call);
            json_object_put(rec);
            return 0;
        }
        if (cst == RK_OK)
            seen = &info;
        else
            rk_call_clear_error(call);
    }
    enum rk_state before = rk_rec_state(rec);
    json_object *cf0;
    int failed_before = json_object_object_get_ex(rec, "failure", &cf0) && cf0;
    if (rk_lifecycle_reconcile(app, call, &rec, seen) != RK_OK)
        rk_call_clear_error(call);
    json_object *cf1;
    int failed_after = rec && json_object_object_get_ex(rec, "failure", &cf1) && cf1;
    int changed = rec && (rk_rec_state(rec) != before || failed_after != failed_before);
    if (changed)
        rk_info("reconciler: sandbox %s: %s -> %s", id, rk_state_name(before),
                rk_state_name(rk_rec_state(rec)));
    json_object_put(rec);
    return changed;
}

/** Records a pass records running in one store update (rk_lifecycle_running_many). */
#define RUNNING_BATCH 64

/* The records of a pass that the backend lists running and the snapshot saw pending under the
 * listed backend id, with nothing observed: recorded running together (the common case of a
 * create burst), each decided on its stored record. */
struct running_batch {
    size_t at[RUNNING_BATCH]; /* their places in the pass */
    const struct listed *e[RUNNING_BATCH];
    size_t n;
};

/* 1 when record i (glanced as g, listed as e) goes into the running batch. */
static int batchable(const struct rk_rec_glance *g, const struct listed *e)
{
    return e && e->state == RK_STATE_RUNNING && !e->failed && e->upstream_id && g->present &&
           g->state == RK_STATE_PENDING && !g->observed && g->upstream &&
           strcmp(g->upstream, e->upstream_id) == 0;
}

/* Record the batch running; a record that takes its own path (a failed create, a restore) is
 * applied alone. The number whose state changed. */
static int flush_running(struct rk_app *app, struct rk_call *call, struct running_batch *rb,
                         char **ids, struct snapshot *sn, char *acted)
{
    const char *bid[RUNNING_BATCH], *bup[RUNNING_BATCH];
    enum rk_running_outcome out[RUNNING_BATCH];
    int changed = 0;
    for (size_t j = 0; j < rb->n; j++) {
        bid[j] = ids[rb->at[j]];
        bup[j] = rb->e[j]->upstream_id;
    }
    rk_lifecycle_running_many(app, bid, bup, rb->n, out);
    for (size_t j = 0; j < rb->n; j++) {
        size_t i = rb->at[j];
        if (out[j] == RK_RUNNING_NOW) {
            changed++;
            rk_info("reconciler: sandbox %s: pending -> running", bid[j]);
        } else if (out[j] == RK_RUNNING_OTHER) {
            changed += apply_one(app, call, ids[i], &sn->g[i], &sn->kept[i], rb->e[j], &acted[i]);
        }
    }
    rb->n = 0;
    return changed;
}

/* Step 1 of a pass: the glances of the active records ids[0..n) into sn, from the memory of
 * settled records where it may be used and from the store for the rest (their number in
 * *n_read). */
static rk_store_rc glance_records(struct rk_app *app, struct beat *b, char **ids, size_t n,
                                  struct snapshot *sn, size_t *n_read, char *err, size_t errlen)
{
    size_t *at = malloc(n * sizeof *at);
    char **read_ids = malloc(n * sizeof *read_ids);
    size_t nr = 0;
    rk_store_rc rc = RK_STORE_OK;
    if (!at || !read_ids)
        goto oom;
    for (size_t i = 0; i < n; i++) {
        int from_memory = settled_glance(ids[i], &sn->g[i]);
        if (from_memory < 0)
            goto oom;
        if (!from_memory) {
            at[nr] = i;
            read_ids[nr++] = ids[i];
        }
    }
    struct snapshot part = {.g = nr ? calloc(nr, sizeof *part.g) : NULL,
                            .kept = nr ? calloc(nr, sizeof *part.kept) : NULL,
                            .tag = sn->tag,
                            .keep = sn->keep};
    if (nr && (!part.g || !part.kept)) {
        free(part.g);
        free(part.kept);
        goto oom;
    }
    if (nr)
        rc = read_records(app, b, read_ids, nr, &part, err, errlen);
    for (size_t j = 0; j < nr; j++) { /* into place (snapshot_free releases them) */
        sn->g[at[j]] = part.g[j];
        sn->kept[at[j]] = part.kept[j];
    }
    free(part.g);
    free(part.kept);
    free(at);
    free(read_ids);
    *n_read = nr;
    return rc;
oom:
    free(at);
    free(read_ids);
    snprintf(err, errlen, "out of memory");
    return RK_STORE_ERROR;
}

int rk_reconciler_run_once(struct rk_app *app)
{
    if (!can_reconcile(app) || !hold_lease(app)) {
        settled_clear(); /* another admin reconciles: what it changes is not known here */
        return -1;
    }
    char err[RK_STORE_ERRLEN];
    char **ids = NULL;
    size_t n = 0, n_read = 0;
    int64_t t0 = rk_now_ms(), t_read = 0, t_list = 0;
    struct beat beat = {.app = app, .last_ms = t0};
    rc_pass_no++;
    /* 1. Snapshot the active records first (see the ordering note above). */
    if (rk_store_list_active(app->store, &ids, &n, err, sizeof err) != RK_STORE_OK) {
        rk_warn("reconciler: %s", err);
        settled_clear();
        return -1;
    }
    struct snapshot sn = {.g = n ? calloc(n, sizeof *sn.g) : NULL,
                          .kept = n ? calloc(n, sizeof *sn.kept) : NULL,
                          .tag = app->plugin->desc->backend_tag,
                          .keep = rk_store_is_shared(app->store)};
    char *acted = n ? calloc(n, 1) : NULL;
    int fits = !n || (sn.g && sn.kept && acted);
    if (n && (!fits ||
              glance_records(app, &beat, ids, n, &sn, &n_read, err, sizeof err) != RK_STORE_OK)) {
        rk_warn("reconciler: %s", fits ? err : "out of memory");
        settled_clear();
        snapshot_free(&sn, n);
        free(acted);
        rk_store_free_ids(ids, n);
        return -1;
    }
    rc_read_total += n_read;
    t_read = rk_now_ms();
    /* 2. One complete list pass. */
    const struct rk_plugin *pl = app->plugin;
    struct rk_call *call = rk_call_new("reconciler", -1, rk_now_ms() + RECONCILE_PASS_MS);
    struct listing l = {.beat = &beat};
    rk_status st = RK_E_NOMEM;
    if (call)
        RK_UPSTREAM(st, pl, list, call, collect, &l);
    int changed = -1;
    char **next_missed = NULL; /* what this pass misses (see missed_before) */
    size_t n_next_missed = 0;
    if (st != RK_OK || l.oom) {
        const char *why = l.oom  ? "out of memory"
                          : call ? rk_call_error_text(call)
                                 : "out of memory";
        rk_warn("reconciler: list failed: %s", why);
        if (beat.last_ms != t0 && !beat.lost)
            put_mark(app, MARK_FAILED, why); /* the progress beats no longer vouch */
        settled_clear();
        goto out;
    }
    t_list = rk_now_ms();
    if (l.n)
        qsort(l.v, l.n, sizeof *l.v, by_rock_id);
    /* 3. Apply: only differences are written (rk_lifecycle_reconcile patches on change). */
    changed = 0;
    size_t i = 0;
    struct running_batch rb = {.n = 0};
    for (; i < n && !app->stopping && pass_beat(&beat) == 0; i++) {
        if (!sn.g[i].present)
            continue;
        const struct listed *e = find_listed(&l, ids[i], sn.g[i].upstream);
        if (batchable(&sn.g[i], e)) {
            acted[i] = 1; /* read again next pass, whatever happens to it */
            rb.at[rb.n] = i;
            rb.e[rb.n++] = e;
            if (rb.n == RUNNING_BATCH)
                changed += flush_running(app, call, &rb, ids, &sn, acted);
        } else if (!e && sn.g[i].state == RK_STATE_PENDING && sn.g[i].upstream &&
                   !missed_before(ids[i]) && missed_add(&next_missed, &n_next_missed, n, ids[i])) {
            acted[i] = 1; /* read again next pass */
            rc_unlisted_deferred++;
        } else {
            changed += apply_one(app, call, ids[i], &sn.g[i], &sn.kept[i], e, &acted[i]);
        }
    }
    if (rb.n && !beat.lost && !app->stopping)
        changed += flush_running(app, call, &rb, ids, &sn, acted);
    if (beat.lost) {
        rk_info("reconciler: the lease went to another admin during a pass of %lld ms; it "
                "stopped there",
                (long long)(rk_now_ms() - t0));
        settled_clear();
        goto out;
    }
    if (i == n) {
        settled_keep(ids, n, sn.g, acted);
        missed_set(next_missed, n_next_missed);
        next_missed = NULL;
        n_next_missed = 0;
    } else {
        settled_clear(); /* stopping */
    }
    put_mark(app, MARK_DONE, NULL);
    rc_passes_total++;
    rk_debug("reconciler: pass over %zu records (%zu read, %zu remembered settled), %zu listed, "
             "%d changed in %lld ms (store read %lld ms, list %lld ms, apply %lld ms)",
             n, n_read, rc_nsettled, l.n, changed, (long long)(rk_now_ms() - t0),
             (long long)(t_read - t0), (long long)(t_list - t_read),
             (long long)(rk_now_ms() - t_list));
out:
    rk_store_free_ids(next_missed, n_next_missed);
    listing_free(&l);
    if (call)
        rk_call_free(call);
    snapshot_free(&sn, n);
    free(acted);
    rk_store_free_ids(ids, n);
    return changed;
}

/* Thread: one pass per interval until stopped. Passes start an interval apart (a long pass is
 * followed by a quarter interval's rest), so the time between two pass ends, which bounds the
 * staleness of store reads, stays an interval while a pass takes less than one. */
static void *reconciler_main(void *arg)
{
    rku_thread_c_locale(); /* it parses every stored record each pass */
    struct rk_app *app = arg;
    int interval = app->cfg->runtime.reconcile_interval_ms;
    pthread_mutex_lock(&rc_mu);
    while (!rc_stop) {
        pthread_mutex_unlock(&rc_mu);
        int64_t began = rk_now_ms();
        rk_reconciler_run_once(app);
        rk_lifecycle_run_deferred(app);
        int64_t rest = interval - (rk_now_ms() - began);
        if (rest < interval / 4)
            rest = interval / 4;
        pthread_mutex_lock(&rc_mu);
        if (rc_stop)
            break;
        struct timespec ts = rk_time_after_ms(CLOCK_MONOTONIC, rest);
        pthread_cond_timedwait(&rc_cv, &rc_mu, &ts);
    }
    pthread_mutex_unlock(&rc_mu);
    return NULL;
}

int rk_reconciler_start(struct rk_app *app)
{
    if (!can_reconcile(app))
        return 0;
    char host[64] = "host";
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = '\0';
    unsigned long long salt =
        (unsigned long long)rk_now_ms() ^ ((unsigned long long)getpid() << 20);
    snprintf(rc_owner, sizeof rc_owner, "%s:%ld:%llx", host, (long)getpid(), salt);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&rc_cv, &ca);
    pthread_condattr_destroy(&ca);
    rc_stop = 0;
    if (pthread_create(&rc_thread, NULL, reconciler_main, app) != 0) {
        pthread_cond_destroy(&rc_cv);
        return -1;
    }
    rc_running = 1;
    rk_metrics_collector_add("reconciler", metrics_collect, app);
    rk_info("reconciler: every %d ms (status reads come from the store)",
            app->cfg->runtime.reconcile_interval_ms);
    return 0;
}

void rk_reconciler_stop(struct rk_app *app)
{
    (void)app;
    if (!rc_running)
        return;
    pthread_mutex_lock(&rc_mu);
    rc_stop = 1;
    pthread_cond_broadcast(&rc_cv);
    pthread_mutex_unlock(&rc_mu);
    pthread_join(rc_thread, NULL);
    pthread_cond_destroy(&rc_cv);
    settled_clear();
    rc_running = 0;
}
