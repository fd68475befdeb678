/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The idle touch of the relays on the loops. Bytes moving through a WebSocket
 * or port-forward relay are activity on its sandbox, but the touch writes to
 * the store (Redis: a network round trip) and a relay loop must never wait on
 * it. A loop only notes the touch (rk_relay_touch_note: a short lock and a
 * copy into a bounded queue; nothing when the queue is full, the relay's next
 * traffic notes it again) and one worker thread makes the store call through
 * domain/activity.c, which keeps the per-second throttle and decides the
 * deadline. Each relay notes at most once per RK_RELAY_TOUCH_EVERY_MS of
 * traffic (or half its idle timeout, when shorter).
 */
#ifndef RK_RELAY_TOUCH_H
#define RK_RELAY_TOUCH_H

#include <stdint.h>

struct rk_app;

/** How often a busy relay touches its sandbox at most. */
#define RK_RELAY_TOUCH_EVERY_MS 60000

/** Start the touch worker. Returns 0 or -1 (logged). */
int rk_relay_touch_start(struct rk_app *app);

/** Note activity on sandbox id (idle timeout idle_minutes; nothing when <= 0).
 *  Never blocks on the store. */
void rk_relay_touch_note(const char *id, int64_t idle_minutes);

/** The interval between two notes of one relay. */
int64_t rk_relay_touch_interval_ms(int64_t idle_minutes);

/** Stop the worker; touches not made yet are dropped. Idempotent. */
void rk_relay_touch_stop(void);

#endif /* RK_RELAY_TOUCH_H */
