/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Private to the engine's files (http_server.c, watchdog.c, request.c): the
 * server state and the per-connection tracker the watchdog follows.
 */
#ifndef RK_ENGINE_INTERNAL_H
#define RK_ENGINE_INTERNAL_H

#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

struct rk_app;
struct rk_config;
struct rk_workers;
struct rk_req;
struct rk_evloop;
struct rk_ip_limit;

/* What a connection is waiting for (the watchdog's view of it). */
enum conn_phase {
    PH_HEADERS,   /* a new connection: request line and headers (header_timeout) */
    PH_BODY,      /* headers done, body arriving (min_body_rate) */
    PH_HANDLER,   /* our handler runs or the response is being sent: no deadline */
    PH_KEEPALIVE, /* between requests on a persistent connection */
};

/* One open connection, tracked for deadlines and eviction. Fields are guarded
 * by http_state.mu; the event threads and the watchdog both touch them. */
struct conn_track {
    struct conn_track *prev, *next;
    int fd;
    enum conn_phase phase;
    int64_t phase_start_ms;
    int64_t busy_ms;    /* time spent inside our access handler during this phase */
    int64_t busy_since; /* non-zero while inside it */
    uint64_t body_bytes;
    int closing; /* the watchdog shut the socket down */
};

struct http_state {
    /* the event loops (event_loops.c): one libmicrohttpd daemon each, all on one socket */
    struct MHD_Daemon **daemons;
    struct rk_evloop **loops;
    int nloops;
    struct rk_ip_limit *per_ip; /* server.per_ip_connections over all loops (ip_limit.c) */
    int port;
    atomic_int inflight;
    int quiesced;
    /* limits */
    int conn_limit;         /* MHD connection limit (server.max_connections) */
    int data_limit;         /* data-route requests admitted at once */
    atomic_int data_active; /* data-route requests being served */
    pthread_mutex_t mu;     /* guards conns, nconns, stop */
    pthread_cond_t cv;
    struct conn_track *conns; /* newest first */
    int nconns;
    int stop;
    pthread_t watchdog;
    int watchdog_started;
    /* the event engine */
    struct rk_workers *workers; /* the pool handlers run on (workers.h) */
    atomic_int suspended;       /* connections suspended and not yet resumed */
    atomic_llong refused;       /* requests answered busy: the worker queue was full */
    atomic_int open;            /* connections admitted by accept_policy_cb, not yet closed */
};

/** On the loop, inside one of the connection's callbacks: suspend the
 *  connection until the request's job is done (rk_req_finish resumes it).
 *  Returns 1 when suspended, 0 when the job is done already. */
int rk_req_wait_job(struct rk_req *r);
/** The tracker of conn (set when MHD reported the connection), or NULL. */
struct conn_track *rk_track_of(struct MHD_Connection *conn);
/** Enter a phase (takes the lock). */
void rk_track_phase(struct http_state *hs, struct conn_track *t, enum conn_phase ph);
/** Mark the connection as inside (busy = 1) or outside our access handler and
 *  add n body bytes: time inside our code never counts against the client. */
void rk_track_busy(struct http_state *hs, struct conn_track *t, int busy, size_t n);
/** MHD_OPTION_NOTIFY_CONNECTION callback (cls = the struct rk_app): keeps the
 *  tracker list. */
void rk_track_notify_cb(void *cls, struct MHD_Connection *conn, void **socket_context,
                        enum MHD_ConnectionNotificationCode toe);
/** The watchdog thread (arg = the struct rk_app): a pass every 250 ms until
 *  http_state.stop. */
void *rk_watchdog_main(void *arg);

#endif /* RK_ENGINE_INTERNAL_H */
