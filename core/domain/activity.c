/* SPDX-License-Identifier: Apache-2.0 */
/* The one owner of the idle touch (see activity.h). */
#include "domain/activity.h"

#include <stdatomic.h>

#include "base/app.h"
#include "base/util.h"
#include "obs/log.h"
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
    uint64_t h = 1469598103934665603ull;
    for (const unsigned char *p = (const unsigned char *)id; *p; p++)
        h = (h ^ *p) * 1099511628211ull;
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
    return deadline;
}
