/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The relay loops: a small fixed number of threads (proxy.relay_threads),
 * each an epoll set with a timer heap, on which every upgraded WebSocket and
 * port-forward relay lives after libmicrohttpd's upgrade callback handed it
 * over. No thread per relay, no polling: a loop sleeps in epoll_wait until a
 * socket of one of its relays is ready or the nearest relay deadline passes.
 *
 * An item (a relay session, relay_session.c) is handed to a loop from any
 * thread (rk_relay_loop_adopt); from then on everything about it runs on
 * that loop's thread: its start, its socket events, its timer, the drain and
 * the final abort at shutdown. Sockets are watched edge-triggered for input
 * and output at once; the item keeps reading or writing until EAGAIN or until
 * it stops on purpose (backpressure) and asks to run again (rk_loop_again)
 * when it yields with work left, so one busy relay cannot starve the others.
 */
#ifndef RK_RELAY_LOOP_H
#define RK_RELAY_LOOP_H

#include <stddef.h>
#include <stdint.h>

struct rk_app;
struct rk_loop;
struct rk_loop_item;

/** What a loop does with an item; every call runs on the item's loop thread. */
struct rk_loop_item_ops {
    /** Adopted: watch the sockets, start moving bytes. */
    void (*start)(struct rk_loop_item *it);
    /** Readiness was reported on one of its watches, or it asked to run again. */
    void (*run)(struct rk_loop_item *it);
    /** Its deadline (rk_loop_timer) passed. */
    void (*timer)(struct rk_loop_item *it);
    /** The daemon started draining: end soon, politely. */
    void (*drain)(struct rk_loop_item *it);
    /** The loops stop: end now and free everything. */
    void (*abort)(struct rk_loop_item *it);
};

/** Loop bookkeeping of one item; embedded in the item (zeroed, ops set). */
struct rk_loop_item {
    const struct rk_loop_item_ops *ops;
    struct rk_loop *loop;
    struct rk_loop_item *prev, *next;             /* the loop's list of items */
    struct rk_loop_item *ready_prev, *ready_next; /* the run-again list */
    int ready;
    int64_t deadline_ms; /* armed timer (monotonic ms), 0 = none */
    size_t heap_at;      /* 1-based position in the loop's timer heap, 0 = not armed */
};

/** One watched socket of an item: events accumulate here until the item runs. */
struct rk_loop_watch {
    struct rk_loop_item *item;
    int fd;
    uint32_t events; /* EPOLL* bits seen since the item last cleared them */
};

/** Start n loop threads (n >= 1). Returns 0, or -1 (logged). */
int rk_relay_loops_start(struct rk_app *app, int n);

/** Hand it to a loop (round robin), from any thread; the loop calls
 *  ops->start on its thread. Returns 0, or -1 when no loop takes items (not
 *  started or stopping): the caller still owns it. */
int rk_relay_loop_adopt(struct rk_loop_item *it);

/** Watch fd for input, output and hang-up (edge-triggered). 0 or -1. */
int rk_loop_watch_add(struct rk_loop_item *it, struct rk_loop_watch *w, int fd);
/** Stop watching (before the fd is closed or handed back). */
void rk_loop_watch_del(struct rk_loop_watch *w);

/** Arm the item's one timer at deadline_ms (monotonic), replacing the armed
 *  one; 0 disarms it. */
void rk_loop_timer(struct rk_loop_item *it, int64_t deadline_ms);

/** Run the item again after the loop served the others (it yielded with work
 *  left that no socket event will announce). */
void rk_loop_again(struct rk_loop_item *it);

/** The loop's scratch buffer (valid during the current call on its thread). */
unsigned char *rk_loop_scratch(struct rk_loop_item *it, size_t *len);

/** The item ends: forget it (timer, lists). Its watches must be removed
 *  first; the item frees itself afterwards. */
void rk_loop_item_done(struct rk_loop_item *it);

/** Begin the drain on every loop: each item's ops->drain runs on its loop, and
 *  items adopted from now on are drained right after they start. */
void rk_relay_loops_drain(void);

/** Stop the loops: every item still alive is aborted (closed and freed) on its
 *  loop, the threads are joined and the loops freed. Idempotent. */
void rk_relay_loops_stop(void);

/** Number of loop threads running (0 before start and after stop). */
int rk_relay_loops_count(void);

#endif /* RK_RELAY_LOOP_H */
