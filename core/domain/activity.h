/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The idle touch: activity on a sandbox (a runtime call, a proxied request)
 * moves its idle deadline to now + its idle timeout (auto_clear_time, in
 * minutes). This file is the one owner of that decision: when a touch is due
 * (at most once per second per sandbox and process: the deadline has 1 s
 * resolution) and which deadline it writes, and of the renewal that follows
 * it: a plugin with RK_CAP_RENEW is told every new idle deadline so that the
 * backend's own expiry stays ahead of it (the plugin rate-limits its upstream
 * calls). Every kind of activity renews: runtime calls (dispatch), status
 * polls, and relayed traffic (rk_activity_touch). The endpoint cache only
 * caches endpoints; a relay serving from it calls rk_activity_touch.
 */
#ifndef RK_ACTIVITY_H
#define RK_ACTIVITY_H

#include <stdint.h>

#include <json-c/json.h>

struct rk_app;

/** The idle deadline (epoch seconds) activity at now_s gives a sandbox whose
 *  idle timeout is idle_minutes; 0 when it has none (idle_minutes <= 0). */
int64_t rk_activity_deadline(int64_t now_s, int64_t idle_minutes);

/** 1 when activity on id in second now_s is the first this process saw in
 *  that second (and records it), else 0: the touch throttle. Cheap and
 *  lock-free; a hash collision between two ids costs one extra touch. */
int rk_activity_due(const char *id, int64_t now_s);

/** 1 when rk_activity_due(id, now_s) would be 1, without recording anything:
 *  for code that must know beforehand whether a touch (a store write) is due. */
int rk_activity_pending(const char *id, int64_t now_s);

/** The second a read-and-touch of id (rk_store_get_touch) should touch in:
 *  now when a touch is due (rk_activity_due), else 0 (a plain read). */
int64_t rk_activity_touch_second(const char *id);

/** Activity on sandbox id whose idle timeout is idle_minutes: when a touch is
 *  due, writes rk_activity_deadline(now) to the store (which moves it only for
 *  an active sandbox) and renews the backend's expiry (rk_activity_renew, with
 *  the stored record: one more store read when the plugin renews). May block:
 *  call it off the event loop unless rk_activity_pending said no touch is due.
 *  Returns the deadline written, or 0 when nothing was written (no idle
 *  timeout, not due, or a store error, which is logged). */
int64_t rk_activity_touch(struct rk_app *app, const char *id, int64_t idle_minutes);

/** 1 when the loaded plugin renews backend expiries (RK_CAP_RENEW with
 *  ops.renew): activity then makes a plugin call (rate-limited by the plugin). */
int rk_activity_can_renew(const struct rk_app *app);

/** Tell the plugin the new idle deadline of the sandbox in rec (an active
 *  record of the loaded operator) so it keeps the backend's own expiry ahead
 *  of it. A plugin call, bounded by 10 s; a failure is logged (the next
 *  activity retries). Nothing when the plugin does not renew. */
void rk_activity_renew(struct rk_app *app, json_object *rec, int64_t idle_deadline);

/** rk_activity_renew for activity now on the record rec (active, with an idle
 *  timeout; nothing otherwise): the deadline is rk_activity_deadline(now). */
void rk_activity_renew_used(struct rk_app *app, json_object *rec);

#endif /* RK_ACTIVITY_H */
