/* SPDX-License-Identifier: Apache-2.0 */
/* The one owner of the idle touch (see activity.h). */
#include "domain/activity.h"

#include <stdatomic.h>

#include "base/app.h"
#include "base/util.h"
#include "domain/record.h"
#include "host/host.h"
#include "host/plugin_loader.h"
#include "obs/log.h"
#include "obs/metrics.h"
#include "store/store.h"

/** Throttle slots, indexed by a hash of the sandbox id. */
#define ACTIVITY_SLOTS 4096

/* Each slot holds (high 32 bits of the id's hash, the second it was last touched in). */
static _Atomic uint64_t activity_slots[ACTIVITY_SLOTS];

/* Deadline of activity at now_s. */
int64_t rk_activity_deadline(int64_t now_s, int64_t idle_minutes)
{
    return idle_minutes > 0 ? now_s + idle_minutes * 60 : 0;
}

/* The throttle slot of id (FNV-1a) and the value it holds once id was seen in second now_s. */
static _Atomic uint64_t *activity_slot(const char *id, int64_t now_s, uint64_t *want)
{
    uint64_t h = rk_hash_str(id);
    *want = (h & 0xffffffff00000000ull) | (uint32_t)now_s;
    return &activity_slots[h % ACTIVITY_SLOTS];
}

/* First activity on id in second now_s? */
int rk_activity_due(const char *id, int64_t now_s)
{
    uint64_t want;
    _Atomic uint64_t *slot = activity_slot(id, now_s, &want);
    return atomic_exchange_explicit(slot, want, memory_order_relaxed) != want;
}

/* Would rk_activity_due(id, now_s) say 1? (Reads only.) */
int rk_activity_pending(const char *id, int64_t now_s)
{
    uint64_t want;
    _Atomic uint64_t *slot = activity_slot(id, now_s, &want);
    return atomic_load_explicit(slot, memory_order_relaxed) != want;
}

/* The throttled second for a read-and-touch. */
int64_t rk_activity_touch_second(const char *id)
{
    int64_t now = rk_epoch_s();
    return id && rk_activity_due(id, now) ? now : 0;
}

/* Throttled store touch of one sandbox. */
int64_t rk_activity_touch(struct rk_app *app, const char *id, int64_t idle_minutes)
{
    if (!id || idle_minutes <= 0)
        return 0;
    int64_t now = rk_epoch_s();
    if (!rk_activity_due(id, now))
        return 0;
    int64_t deadline = rk_activity_deadline(now, idle_minutes);
    char err[RK_STORE_ERRLEN];
    if (rk_store_touch(app->store, id, deadline, err, sizeof err) != RK_STORE_OK) {
        rk_warn("cannot refresh idle deadline of %s: %s", id, err);
        return 0;
    }
    if (rk_activity_can_renew(app)) { /* the backend id is in the record */
        json_object *rec = NULL;
        if (rk_store_get(app->store, id, &rec, err, sizeof err) == RK_STORE_OK) {
            if (rk_state_is_active(rk_rec_state(rec)))
                rk_activity_renew(app, rec, deadline);
            json_object_put(rec);
        } else {
            rk_warn("cannot renew the backend expiry of %s: %s", id, err);
        }
    }
    return deadline;
}

int rk_activity_can_renew(const struct rk_app *app)
{
    const struct rk_plugin *pl = app->plugin;
    return pl && (pl->caps & RK_CAP_RENEW) && pl->ops.renew;
}

void rk_activity_renew(struct rk_app *app, json_object *rec, int64_t idle_deadline)
{
    const struct rk_plugin *pl = app->plugin;
    if (!rk_activity_can_renew(app))
        return;
    const char *up = rk_rec_upstream_id(rec, pl->desc->backend_tag);
    if (!up)
        return;
    /* The plugin rate-limits; an upstream call here is bounded (10 s). */
    struct rk_call *call = rk_call_new("renew", -1, rk_now_ms() + 10000);
    if (!call)
        return;
    struct rk_sandbox_ref ref = {rk_rec_str(rec, "sandbox_id"), up, pl->desc->backend_tag,
                                 rk_rec_state(rec)};
    rk_metrics_upstream_begin();
    rk_status st = pl->ops.renew(pl->inst, call, &ref, idle_deadline);
    rk_metrics_upstream("renew", st); /* ends the in-flight mark whatever the outcome */
    if (st != RK_OK) {
        rk_warn("sandbox %s: cannot renew its backend expiry: %s", ref.sandbox_id,
                rk_call_error_text(call));
    }
    rk_call_free(call);
}

void rk_activity_renew_used(struct rk_app *app, json_object *rec)
{
    if (!rk_activity_can_renew(app) || !rk_state_is_active(rk_rec_state(rec)))
        return;
    json_object *m;
    int64_t minutes = 0;
    if (json_object_object_get_ex(rec, "auto_clear_time", &m) && m)
        minutes = json_object_get_int64(m);
    if (minutes > 0)
        rk_activity_renew(app, rec, rk_activity_deadline(rk_epoch_s(), minutes));
}
