/* SPDX-License-Identifier: Apache-2.0 */
/*
 * librkutil: the one curl-multi transfer loop, used by the core's HTTP relay
 * (core/relay/relay_http_loop.c) and by the OpenSandbox plugin's command
 * streams (plugins/opensandbox/os_loop.c).
 *
 * One thread drives every submitted easy handle with one libcurl multi handle
 * on epoll (curl_multi_socket_action): a pass touches only the transfers with
 * socket activity or an expired curl timer, so thousands of idle transfers
 * cost no CPU, and the multi's connection cache keeps upstream keep-alive
 * connections for the next transfer to the same origin. curl calls back only
 * for active transfers, so every sweep_ms the loop asks each open transfer
 * whether it must end (client gone, deadline, shutdown).
 *
 * Only the loop thread touches the multi and the easy handles in it. Other
 * threads submit jobs and ask for a job's on_wake to run on the loop (to
 * unpause a transfer, for instance) through a queue and an eventfd.
 * Callbacks (curl's and the job's) run on the loop thread and must not block.
 */
#ifndef RK_UTIL_CURLLOOP_H
#define RK_UTIL_CURLLOOP_H

#include <stdint.h>

#include <curl/curl.h>

struct rku_curl_loop;

/** One transfer, embedded in the submitter's own state. The submitter sets
 *  curl, on_done and, as needed, should_abort and on_wake; the rest is the
 *  loop's. */
struct rku_curl_job {
    CURL *curl; /**< prepared easy handle (CURLOPT_PRIVATE is the loop's) */
    /** On the loop thread once the transfer ended and the handle is out of the
     *  multi: curl_code is its CURLcode (CURLE_FAILED_INIT when the multi
     *  refused it, CURLE_ABORTED_BY_CALLBACK after should_abort). The job is
     *  the submitter's again. */
    void (*on_done)(struct rku_curl_job *j, int curl_code);
    /** Optional, on the loop thread every sweep for every open transfer:
     *  non-zero ends it. now_ms is CLOCK_MONOTONIC milliseconds. */
    int (*should_abort)(struct rku_curl_job *j, int64_t now_ms);
    /** Optional, on the loop thread after rku_curl_loop_wake_job. */
    void (*on_wake)(struct rku_curl_job *j);
    /* loop-private */
    struct rku_curl_job *next, *prev; /* submission queue / active list */
    struct rku_curl_job *wnext;       /* wake queue (under the loop's lock) */
    int wake_queued;                  /* under the loop's lock */
    int in_loop;                      /* in the multi (loop thread only) */
};

/** Another event source served on the loop's thread: an owner's own sockets
 *  (the OpenSandbox plugin's HTTP/1.1 command streams), so that one thread
 *  carries both. Its descriptor (typically an epoll set of its own) joins the
 *  loop's set. run is called on the loop thread in every pass in which the
 *  descriptor was readable, a wake was asked for (rku_curl_loop_wake_source)
 *  or the time it last asked for came; it returns the milliseconds until it
 *  must run again without activity (-1: only on activity). busy says whether
 *  it still has work open: a stopping loop keeps running it until it has
 *  none (its work ends by its deadlines, as transfers do). */
struct rku_loop_source {
    int fd;
    int (*run)(struct rku_loop_source *src, int64_t now_ms);
    int (*busy)(struct rku_loop_source *src);
    /* loop-private */
    int64_t due_at; /* -1: none */
};

/** A loop (its thread starts on the first submission). sweep_ms: how often
 *  open transfers get should_abort; max_connects: idle connections the
 *  multi keeps (0: libcurl's default). NULL on OOM. */
struct rku_curl_loop *rku_curl_loop_new(int sweep_ms, long max_connects);

/** A loop without a thread of its own, for an owner that has an event loop:
 *  it watches rku_curl_loop_fd (readable when the loop has work) and calls
 *  rku_curl_loop_run from one thread, its own. Submissions and wakes from
 *  any thread work as for a threaded loop. NULL on OOM. */
struct rku_curl_loop *rku_curl_loop_new_driven(int sweep_ms, long max_connects);

/** A driven loop's descriptor (an epoll set): readable when socket activity,
 *  a submission or a wake is pending. */
int rku_curl_loop_fd(const struct rku_curl_loop *lp);

/** A driven loop: the calling thread is its owner from now on. Its own
 *  submissions then skip the descriptor's wake-up (a write and a read of an
 *  eventfd each) and are reported by rku_curl_loop_due instead. */
void rku_curl_loop_adopt(struct rku_curl_loop *lp);

/** The owner's thread only: 1 while its own submission waits for a pass
 *  (rku_curl_loop_run clears it), 0 otherwise. */
int rku_curl_loop_due(const struct rku_curl_loop *lp);

/** One pass of a driven loop on its owner's thread, without waiting: returns
 *  the milliseconds after which it must run again even without activity on
 *  its descriptor (curl's timer, the sweep). */
int rku_curl_loop_run(struct rku_curl_loop *lp);

/** 1 once a stopped driven loop has nothing open (any thread). */
int rku_curl_loop_drained(struct rku_curl_loop *lp);

/** Hand j to the loop. 0, or -1 when the loop is stopping or its thread
 *  cannot start (on_done is then not called). */
int rku_curl_loop_submit(struct rku_curl_loop *lp, struct rku_curl_job *j);

/** Attach src to a threaded loop before its first use (one source per
 *  loop; it stays attached until the loop is freed). */
void rku_curl_loop_set_source(struct rku_curl_loop *lp, struct rku_loop_source *src);

/** Run the source soon on the loop thread, starting the thread on first use
 *  (any thread). 0, or -1 when the loop is stopping or cannot start. */
int rku_curl_loop_wake_source(struct rku_curl_loop *lp);

/** Run j->on_wake on the loop thread soon. 1 when queued now, 0 when a wake
 *  of j is already queued or the loop stops (nothing queued). j must stay
 *  valid until on_wake ran: a caller that counts references takes one before
 *  and drops it in on_wake (and drops it itself when this returns 0). */
int rku_curl_loop_wake_job(struct rku_curl_loop *lp, struct rku_curl_job *j);

/** Stop taking submissions, wait until every open transfer ended (they end by
 *  their deadlines or should_abort), join the thread. Idempotent. A driven
 *  loop is not waited for: its owner's passes end the open transfers
 *  (rku_curl_loop_drained says when). */
void rku_curl_loop_stop(struct rku_curl_loop *lp);

/** Stop (as rku_curl_loop_stop) and free the loop (NULL-safe). A driven loop
 *  is freed on its owner's thread or once the owner no longer runs it; what
 *  is still open then ends with CURLE_ABORTED_BY_CALLBACK. */
void rku_curl_loop_free(struct rku_curl_loop *lp);

#endif /* RK_UTIL_CURLLOOP_H */
