/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file os_internal.h
 * @brief Private declarations shared by the OpenSandbox operator plugin sources.
 *
 * The plugin's files in layer order, lowest first. A file calls functions of
 * files above it in this list only (never below, never in a circle); the
 * sections of this header follow the same order. tests/check_layers.sh checks
 * the built objects against this list (each numbered line below is read by it).
 *
 *    1. os_map.c        pure helpers: string builder, value tables, quoting, URLs (no I/O)
 *    2. os_stream.c     execd event-stream parser (no I/O)
 *    3. os_loop.c       one thread driving command streams with a curl multi handle and
 *                       librkutil's HTTP/1.1 client (rkh1.h, a few hundred bytes per open
 *                       stream); it runs jobs and knows nothing of the exchanges
 *    4. os_http.c       one HTTP exchange: pooled handles (librkutil), the call's deadline,
 *                       cancellation, bounded buffering; hands command streams to os_loop.c
 *    5. os_lcapi.c      the lifecycle server's client: requests, JSON replies, list pages (read
 *                       in place with librkutil's scanner where they allow it), failure texts
 *    6. os_endpoint.c   endpoint discovery and its per-instance cache
 *    7. os_proxy.c      ops.proxy_target and its guards (reserved ports, credential headers)
 *    8. os_lifecycle.c  create (with lost-reply adoption), status, kill, list
 *    9. os_renew.c      lifetime by renewal (renew_margin)
 *  10. os_pause.c      stop/restart by pause/resume (stop_mode: pause)
 *  11. os_snapshot.c   archive by snapshots (archive_enabled)
 *  12. os_execd.c      execd requests and streamed command runs
 *  13. os_ready.c      readiness: execd pings, one or many at once on the loop
 *  14. os_files.c      file stat/read/write through execd
 *  15. os_session.c    bash sessions through execd
 *  16. os_config.c     the section's schema and validation, configured capabilities, and the
 *                       instance's assembly (each module above sets up its own state)
 *  17. opensandbox.c   the descriptor and the ABI entry points
 *
 * Deadlines: the core owns every call's deadline (for a command: its timeout
 * plus runtime.command_timeout_margin) and os_http.c honours
 * host->deadline_ms(); the plugin adds no margin of its own.
 */
#ifndef OS_INTERNAL_H
#define OS_INTERNAL_H

#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <rock-admin/operator.h>

#include "rkcurlloop.h"
#include "rkh1.h"
#include "rkjson.h"

/** Port execd listens on inside every sandbox. */
/** The "execd answered" set (os_ep_ready_*): its hash buckets, the most entries it keeps and
 *  the longest key. Entries whose Running transition is older than OS_READY_WINDOW_S are never
 *  asked for again and are dropped; past the cap a sandbox is simply pinged once more. */
#define OS_READY_BUCKETS 4096
#define OS_READY_MAX 65536
#define OS_READY_KEY_MAX 128
/** How long after OpenSandbox reports a sandbox Running its execd must have answered a ping
 *  before the sandbox counts as running (os_lifecycle.c). */
#define OS_READY_WINDOW_S 120
#define OS_EXECD_PORT 44772
/** OpenSandbox's egress sidecar API port (its token: OPENSANDBOX-EGRESS-AUTH). */
#define OS_EGRESS_PORT 18080
/** Largest JSON body buffered from the lifecycle server or execd. */
#define OS_MAX_JSON_BODY (4u * 1024u * 1024u)
/** Largest single event line accepted from an execd stream. */
#define OS_MAX_EVENT_LINE (16u * 1024u * 1024u)
/** How long a resolved execd endpoint is reused. */
#define OS_ENDPOINT_TTL_MS 30000
/** Maximum number of cached endpoint resolutions. */
#define OS_ENDPOINT_CACHE_MAX 256

/* ------------------------------------------------------------------------ */
/* String builder and pure mapping helpers (os_map.c, no I/O)                */
/* ------------------------------------------------------------------------ */

/** Growable, NUL-terminated byte string; `oom` latches allocation failure. */
struct os_sb {
    char *p;
    size_t len;
    size_t cap;
    int oom;
};

void os_sb_putn(struct os_sb *sb, const char *s, size_t n);
void os_sb_puts(struct os_sb *sb, const char *s);
void os_sb_printf(struct os_sb *sb, const char *fmt, ...) RK_PRINTF(2, 3);
/** Hand over the buffer (never NULL unless out of memory); resets the builder. */
char *os_sb_take(struct os_sb *sb);
void os_sb_free(struct os_sb *sb);

char *os_mem_to_k8s(const char *mem);
char *os_format_cpu(double cpus, double limit_cpus);
/** The environment kv[0..n) as a JSON object of strings (a missing value as ""). */
struct json_object *os_env_object(const struct rk_kv *kv, size_t n);
char *os_qualify_image(const char *image, const char *prefix);
enum rk_state os_map_state(const char *state, int *failed);
char *os_shell_quote(const char *s);
char *os_py_repr(const char *s, size_t len);
char *os_py_float(double x);
int os_env_name_valid(const char *name);
int os_endpoint_valid(const char *endpoint, const char **why);
unsigned os_mode_from_decimal(int64_t digits, int *ok);
int64_t os_mode_to_decimal(unsigned mode);
char *os_error_detail(long http_status, const char *body, size_t len);
char *os_join_url(const char *protocol, const char *endpoint, const char *path);
int os_contains_ci(const char *hay, const char *needle);
/** Percent-encode every byte but RFC 3986 unreserved ones (A-Z a-z 0-9 - . _ ~). */
char *os_query_escape(const char *s);
/** The value of a `metadata=` list filter matching key=value exactly: each part is
 *  escaped on its own (OpenSandbox parses the filter with parse_qsl), then the
 *  whole filter is escaped again for the outer query string. */
char *os_metadata_filter(const char *key, const char *value);
char *os_session_init_command(const struct rk_kv *env, size_t env_len, const char *const *sources,
                              size_t sources_len);

/* ------------------------------------------------------------------------ */
/* execd event stream parser (os_stream.c, no I/O)                           */
/* ------------------------------------------------------------------------ */

/** Receives reconstructed output; a non-RK_OK return stops the parser. */
typedef rk_status (*os_output_fn)(void *ctx, enum rk_stream stream, const char *buf, size_t len);

/** Incremental parser state for one execd stream. */
struct os_stream {
    os_output_fn out;
    void *out_ctx;
    size_t max_line;   /**< longest accepted line (bytes) */
    char *buf;         /**< unparsed bytes */
    size_t len;        /**< bytes in buf */
    size_t cap;        /**< allocated size of buf */
    size_t scanned;    /**< prefix of buf known to contain no '\n' */
    int terminal;      /**< a terminal event was seen */
    int completed;     /**< execution_complete */
    int has_exit_code; /**< exit_code valid */
    int exit_code;     /**< from error.evalue or 0 on completion */
    int timed_out;     /**< an error named like "timeout" */
    int bare_error;    /**< terminal failure came as a bare {"code","message"} object */
    char *error_text;  /**< malloc'd failure description, or NULL */
    char init_id[80];  /**< id from the init event ("" if none) */
    rk_status status;  /**< sticky failure (sink, cap, memory) */
};

void os_stream_init(struct os_stream *st, os_output_fn out, void *ctx, size_t max_line);
rk_status os_stream_feed(struct os_stream *st, const char *data, size_t len);
rk_status os_stream_finish(struct os_stream *st);
void os_stream_free(struct os_stream *st);

/* ------------------------------------------------------------------------ */
/* Command-stream loop (os_loop.c)                                           */
/* ------------------------------------------------------------------------ */

struct os_loop;

/** One transfer run on the loop: the submitter prepares the easy handle and the fields
 *  above the line; the loop sets curl_code when the transfer ended. */
struct os_loop_job {
    void *curl;                     /**< CURL *, prepared by the submitter */
    int (*should_abort)(void *ctx); /**< polled for every open stream (client gone, deadlines) */
    void *ctx;                      /**< for should_abort */
    char *errbuf;                   /**< where a submission failure is described, or NULL */
    size_t errbuf_len;
    int curl_code; /**< the transfer's CURLcode, valid once os_loop_run returned 0 */
    /** Set for os_loop_submit: called on the loop thread when the transfer ended (curl_code
     *  set, the handle out of the multi); the job is the caller's again. */
    void (*on_done)(struct os_loop_job *j);
    /* loop-private */
    int done;               /**< guarded by the loop's mutex */
    pthread_cond_t cv;      /**< signalled when done is set */
    struct os_loop *lp;     /**< the loop running it */
    struct rku_curl_job rj; /**< the transfer on librkutil's curl loop */
};

/** A new loop; its thread starts on first use. NULL on OOM (streams then run on the
 *  request thread). */
struct os_loop *os_loop_new(void);
/** Stop the loop, wait for its transfers to end, free it (NULL-safe). */
void os_loop_free(struct os_loop *lp);
/** The loop's HTTP/1.1 client (served by its thread), or NULL (NULL-safe). */
struct rku_h1 *os_loop_h1(struct os_loop *lp);
/** Run j's prepared handle on the loop and wait; -1 when the loop is unavailable. */
int os_loop_run(struct os_loop *lp, struct os_loop_job *j);
/** Start j's prepared handle on the loop without waiting: j->on_done runs on the loop thread
 *  when it ended. -1 when the loop is unavailable or stopping (on_done is then not called). */
int os_loop_submit(struct os_loop *lp, struct os_loop_job *j);

/** A piece of blocking work that must not run on the loop thread (e.g. resolving an endpoint
 *  again before a command stream is retried). */
struct os_loop_task {
    void (*run)(struct os_loop_task *t); /**< runs on the loop's helper thread */
    struct os_loop_task *next;           /**< loop-private */
};
/** Run t->run on the loop's helper thread (one, started on first use; tasks run in order).
 *  -1 when the loop is stopping or the helper cannot start (t->run is then not called). */
int os_loop_defer(struct os_loop *lp, struct os_loop_task *t);

/* ------------------------------------------------------------------------ */
/* Instance (its fields are set up by os_config.c and the modules named)     */
/* ------------------------------------------------------------------------ */

struct rku_curl_pool;

/** One cached endpoint resolution (malloc'd strings). */
struct os_ep_entry {
    struct os_ep_entry *next;
    char *osid;
    int port;
    int64_t expires_ms;
    char *base;
    struct rk_kv *headers; /**< malloc'd keys and values */
    size_t headers_len;
};

struct os_ready_queue;

/** Per-instance state built by init(). Immutable after init except the cache. */
struct os_inst {
    const struct rk_host *host;
    char *endpoint;
    char *protocol;
    char *api_key; /**< NULL when unset; never logged */
    char *registry_prefix;
    int use_server_proxy;
    int64_t default_timeout_s;
    int64_t connect_timeout_s;
    int64_t sandbox_timeout_s;
    int64_t margin_s; /**< deprecated opensandbox.command_timeout_margin: parsed, unused */
    int64_t max_file_bytes;
    int allow_reserved_ports; /**< proxy may reach OS_EXECD_PORT / OS_EGRESS_PORT */
    int modules_ready;        /**< the modules' state below is set up (os_config_init) */
    /* os_endpoint.c */
    pthread_mutex_t ep_lock;
    struct os_ep_entry *ep_head;
    size_t ep_count;
    /** Sandboxes whose execd answered since their last transition to Running ("<osid>@<since>",
     *  a hash set of at most OS_READY_MAX, allocated on first use, under ep_lock): they are not
     *  pinged again. A ring of a few hundred made every list pass over thousands of new
     *  sandboxes ping them all again. */
    struct os_ready_entry **ready_tab;
    size_t ready_count;
    int64_t ready_pruned_ms;
    /** os_execd_ping, set by os_config.c: lets os_lifecycle.c (below os_ready.c) ask whether a
     *  sandbox's execd answers yet. */
    int (*execd_ping)(struct os_inst *inst, struct rk_call *call, const char *osid,
                      int64_t timeout_ms);
    /** os_execd_check, set by os_config.c: a list pass queues a background readiness check. */
    void (*execd_check)(struct os_inst *inst, const char *rock_id, const char *osid,
                        const char *since);
    /** os_ready.c: the queue of background readiness checks. */
    struct os_ready_queue *ready;
    /* os_http.c */
    void *share;                    /**< CURLSH: DNS cache and TLS sessions only */
    pthread_mutex_t share_locks[8]; /**< one per curl_lock_data value */
    int share_locks_ready;
    struct rku_curl_pool *pool; /**< idle easy handles, each with its own live connections */
    struct os_loop *loop;       /**< transfer thread for command streams (lazily started) */
    /* ABI 1.1 deployment options */
    int stop_mode;          /**< enum os_stop_mode */
    int archive_enabled;    /**< opensandbox.archive_enabled */
    int64_t renew_margin_s; /**< opensandbox.renew_margin (0 = no renewal) */
    int64_t state_wait_s;   /**< opensandbox.state_wait: bound for Paused/Running waits */
    /* os_renew.c */
    pthread_mutex_t renew_lock;
    struct os_renew_entry *renew_head; /**< last expiry set per sandbox (bounded) */
    size_t renew_count;
};

/** Most idle easy handles kept for reuse (each keeps its connections open). */
#define OS_CURL_POOL_MAX 64

/* ------------------------------------------------------------------------ */
/* HTTP transfers (os_http.c)                                                */
/* ------------------------------------------------------------------------ */

/** Set up the instance's loop, handle pool and curl share; NULL-safe on failure (exchanges
 *  then use fresh handles and their own connections). */
void os_http_init(struct os_inst *inst);
/** Stop the loop, destroy every pooled handle and the share (after the last request). */
void os_http_free(struct os_inst *inst);

/** Why a transfer was aborted by the progress callback. */
enum os_abort { OS_ABORT_NONE = 0, OS_ABORT_CANCELLED, OS_ABORT_CALL_DEADLINE, OS_ABORT_OWN };

/** One HTTP exchange: the request as described (os_xfer_init and the setters), carried by
 *  the loop's HTTP/1.1 client (rkh1.h) when it runs on the loop and its origin allows, by an
 *  easy handle from the instance's pool otherwise. */
struct os_xfer {
    struct os_inst *inst;
    struct rk_call *call;
    void *curl; /**< CURL *, once the exchange goes through libcurl (os_xfer_curl) */
    struct curl_slist *hdrs;
    char method[16];
    char *url;
    char *req_body;        /**< os_xfer_json's body (NULL: none) */
    int once;              /**< os_xfer_send_once */
    rk_status prep_status; /**< a setter ran out of memory: the exchange fails with it */
    char errbuf[256];
    long status;
    char *body; /**< buffered response (JSON or error text), NUL-terminated */
    size_t body_len;
    size_t body_max;
    int body_truncated;
    rk_status (*on_data)(void *ctx, const char *buf, size_t len); /**< streaming 2xx body */
    void *on_data_ctx;
    rk_status cb_status;
    int64_t own_deadline_ms;
    enum os_abort abort_reason;
    int timed_out; /**< curl timeout or own deadline */
    int not_sent;  /**< connection could not be established */
    int curl_code;
    int use_loop;           /**< set by the caller: run on the instance's loop (command streams) */
    struct os_loop_job job; /**< the loop's view of this exchange (os_xfer_perform fills it) */
    int64_t call_dl;        /**< the call's deadline when the exchange started (0 = none) */
    void (*done)(struct os_xfer *x, rk_status s); /**< os_xfer_start's completion */
    int on_h1;                                    /**< carried by the loop's HTTP/1.1 client */
    struct rku_h1_xchg h1;                        /**< that client's view of this exchange */
    struct os_h1_wait *h1_wait; /**< os_xfer_perform's waiter while on the client */
};

rk_status os_xfer_init(struct os_xfer *x, struct os_inst *inst, struct rk_call *call,
                       const char *method, const char *url, int64_t timeout_ms);
rk_status os_xfer_header(struct os_xfer *x, const char *name, const char *value);
void os_xfer_json(struct os_xfer *x, const char *json);
void os_xfer_send_once(struct os_xfer *x);
void os_xfer_limit(struct os_xfer *x, int64_t timeout_ms);
/** The exchange's easy handle, set up from the description (for options only libcurl has:
 *  uploads, speed limits); the exchange then always goes through libcurl. NULL on OOM. */
void *os_xfer_curl(struct os_xfer *x);
rk_status os_xfer_perform(struct os_xfer *x);
/** Start the exchange on the loop; done(x, status) reports its end (loop thread). RK_OK: done
 *  will run; otherwise it ended at once with that status (done not called). */
rk_status os_xfer_start(struct os_xfer *x, void (*done)(struct os_xfer *x, rk_status s));
const char *os_xfer_err(const struct os_xfer *x);
void os_xfer_cleanup(struct os_xfer *x);
char *os_escape(const char *s);

/* ------------------------------------------------------------------------ */
/* Lifecycle server client (os_lcapi.c)                                      */
/* ------------------------------------------------------------------------ */

struct json_object;
/** Prepare a lifecycle request to {protocol}://{endpoint}/v1{path} (API key, Accept). */
rk_status os_lc_xfer(struct os_xfer *x, struct os_inst *inst, struct rk_call *call,
                     const char *method, const char *path);
/** Prepare and perform one lifecycle request (JSON body optional; POSTs are sent at most once,
 *  os_xfer_send_once); x must be cleaned up. */
rk_status os_lc_request(struct os_inst *inst, struct rk_call *call, const char *method,
                        const char *path, const char *json_body, struct os_xfer *x);
/** The buffered response as a JSON object (new reference) or NULL. */
struct json_object *os_lc_body_json(const struct os_xfer *x);
/** String member of a JSON object or NULL. */
const char *os_lc_jstr(struct json_object *o, const char *key);
/** "reason: message", or whichever of the two is given (malloc'd), NULL when neither. */
char *os_lc_reason_text(const char *reason, const char *message);

/** One sandbox of a lifecycle list page, its strings decoded (NULL when absent or not a
 *  string); valid until the next os_lc_page_next or os_lc_page_close. */
struct os_lc_item {
    const char *id;
    const char *rock_id;                          /* metadata[<meta_key>] */
    const char *state, *reason, *message, *since; /* status.state, .reason, .message,
                                                   * .lastTransitionAt */
};
/** A list page (GET /sandboxes) being read: in place when its text is of the compact form
 *  librkutil's scanner reads (the lifecycle server's), else parsed with json-c; the items read
 *  either way are the same. */
struct os_lc_page {
    const char *meta_key;
    int scanned;                /* 1: read in place, 0: parsed */
    struct rku_json_span items; /* scanned: the items array, in the caller's body */
    size_t at;                  /* scanned: where the next item starts */
    char *scratch;              /* scanned: the current item's decoded strings */
    size_t cap;
    struct json_object *tree; /* parsed: the page */
    struct json_object *arr;  /* parsed: its items */
    size_t i, n;
    int more;         /* pagination.hasNextPage */
    long total_pages; /* pagination.totalPages, 0 when not given */
};
/** Open the page body[0..len) (kept by the caller until os_lc_page_close); the items' rock ids
 *  are read from metadata[meta_key]. -1 when it is not a list page (no "items" array). */
int os_lc_page_open(struct os_lc_page *pg, const char *body, size_t len, const char *meta_key);
/** The next item into *it: 1, or 0 after the last one. */
int os_lc_page_next(struct os_lc_page *pg, struct os_lc_item *it);
/** Release what the page holds. */
void os_lc_page_close(struct os_lc_page *pg);
/** Record "opensandbox <op> failed for <osid>: <detail>" for a non-2xx answer. */
rk_status os_lc_http_fail(struct os_inst *inst, struct rk_call *call, rk_status code,
                          const char *op, const char *osid, const struct os_xfer *x);
/** Record the failure of a transfer that got no HTTP answer. */
rk_status os_lc_xfer_fail(struct os_inst *inst, struct rk_call *call, rk_status s, const char *op,
                          const char *osid, const struct os_xfer *x);
/** Record the failure of a lifecycle request: no answer (s != RK_OK) or a non-2xx one. */
rk_status os_lc_fail(struct os_inst *inst, struct rk_call *call, rk_status s, rk_status code,
                     const char *op, const char *osid, const struct os_xfer *x);
/** Path "/sandboxes/{osid}{suffix}" (malloc'd) or NULL. */
char *os_sbx_path(const char *osid, const char *suffix);
/** The sandbox's upstream id, or the refusal when the record has none. */
rk_status os_need_upstream_id(struct os_inst *inst, struct rk_call *call,
                              const struct rk_sandbox_ref *ref, const char **osid);

/* ------------------------------------------------------------------------ */
/* Endpoint discovery and cache (os_endpoint.c)                              */
/* ------------------------------------------------------------------------ */

/** A resolved endpoint (arena-owned). */
struct os_endpoint {
    const char *base; /**< scheme://host[:port][/path][?query], no trailing '/' */
    struct rk_kv *headers;
    size_t headers_len;
    int from_cache;
};

/** Set up the instance's (empty) endpoint cache; 0 on success. */
int os_ep_cache_init(struct os_inst *inst);
/** Drop every cached endpoint and release the cache (after the last request). */
void os_ep_cache_free(struct os_inst *inst);
/** Resolve the endpoint of a sandbox port (cached for OS_ENDPOINT_TTL_MS when use_cache). */
rk_status os_lc_endpoint(struct os_inst *inst, struct rk_call *call, const char *osid, int port,
                         int use_cache, const char *op, struct os_endpoint *out);
/** Most headers kept from one endpoint reply. */
#define OS_ENDPOINT_HEADERS_MAX 64
/** The lifecycle path resolving osid's port (malloc'd; NULL when out of memory). */
char *os_ep_path(const struct os_inst *inst, const char *osid, int port);
/** Read an endpoint reply into *out (base malloc'd into *base, headers into hdrs[max] pointing
 *  into o) and cache it: 1, 0 when it names no endpoint, -1 when out of memory. */
int os_ep_from_reply(struct os_inst *inst, const char *osid, int port, struct json_object *o,
                     struct os_endpoint *out, struct rk_kv *hdrs, size_t max, char **base);
/** Drop cached endpoints of a sandbox (port -1 = every port). */
void os_ep_invalidate(struct os_inst *inst, const char *osid, int port);
/** 1 if the execd of osid answered since its Running transition at since (os_ep_ready_note). */
int os_ep_ready_known(struct os_inst *inst, const char *osid, const char *since);
/** Remember that the execd of osid answered after its Running transition at since. */
void os_ep_ready_note(struct os_inst *inst, const char *osid, const char *since);

/* ------------------------------------------------------------------------ */
/* Service proxy (os_proxy.c)                                                */
/* ------------------------------------------------------------------------ */

/** ops.proxy_target: the endpoint URL of a sandbox port plus its headers. */
rk_status os_proxy_target(struct os_inst *inst, struct rk_call *call,
                          const struct rk_sandbox_ref *ref, int port, enum rk_proxy_kind kind,
                          struct rk_proxy_target *out);
/** Refuse proxying to execd / egress ports unless allow_reserved_ports. */
rk_status os_proxy_check_port(struct os_inst *inst, struct rk_call *call, int port);
/** Mark endpoint headers that are backend credentials (ABI 1.1 header_flags). */
rk_status os_proxy_mark_credentials(struct os_inst *inst, struct rk_call *call,
                                    struct rk_proxy_target *out);

/* ------------------------------------------------------------------------ */
/* Lifecycle (os_lifecycle.c)                                                */
/* ------------------------------------------------------------------------ */

/** Add to a create or restore body (root) what every sandbox of this deployment is created
 *  with: its resource limits, the ROCK metadata labels (the ROCK id the lookups filter on), its
 *  lifetime (the idle timeout plus opensandbox.renew_margin when lifetimes are renewed, else
 *  opensandbox.sandbox_timeout) and secureAccess false. Returns the lifetime asked, s (0: none). */
int64_t os_lc_add_sandbox_fields(const struct os_inst *inst, const struct rk_create_spec *spec,
                                 struct json_object *root);
/** ops.create: POST /sandboxes, adopting what a lost reply created. */
rk_status os_lc_create(struct os_inst *inst, struct rk_call *call,
                       const struct rk_create_spec *spec, struct rk_created *out);
/** ops.status: the sandbox's state (found by ROCK id when the upstream id is unknown). */
rk_status os_lc_status(struct os_inst *inst, struct rk_call *call, const struct rk_sandbox_ref *ref,
                       struct rk_status_info *out);
/** ops.list: every sandbox this deployment created, all pages. */
rk_status os_lc_list(struct os_inst *inst, struct rk_call *call, rk_list_fn fn, void *ctx);
/** ops.destroy: the sandbox is gone afterwards (404 = gone). */
rk_status os_lc_destroy(struct os_inst *inst, struct rk_call *call,
                        const struct rk_sandbox_ref *ref);

/* ------------------------------------------------------------------------ */
/* Deployment options: renewal, pause/resume, snapshots (ABI 1.1)            */
/* ------------------------------------------------------------------------ */

/** opensandbox.stop_mode */
enum os_stop_mode { OS_STOP_REFUSE = 0, OS_STOP_DELETE = 1, OS_STOP_PAUSE = 2 };

/** Set up the instance's (empty) renewal cache; 0 on success (os_renew.c). */
int os_renew_init(struct os_inst *inst);
/** Free the renewal cache and its lock (after the last request). */
void os_renew_cache_free(struct os_inst *inst);
/** ops.renew: keep the expiry at idle_deadline + renew_margin, rate-limited. */
rk_status os_renew(struct os_inst *inst, struct rk_call *call, const struct rk_sandbox_ref *ref,
                   int64_t idle_deadline);
/** Remember that osid expires at expires_at (epoch seconds). */
void os_renew_note(struct os_inst *inst, const char *osid, int64_t expires_at);
/** After a pause: park the stopped sandbox for sandbox_timeout seconds. */
rk_status os_renew_parked(struct os_inst *inst, struct rk_call *call, const char *osid);

/** ops.stop with stop_mode pause (os_pause.c). */
rk_status os_lc_pause(struct os_inst *inst, struct rk_call *call, const struct rk_sandbox_ref *ref);
/** ops.restart with stop_mode pause. */
rk_status os_lc_resume(struct os_inst *inst, struct rk_call *call,
                       const struct rk_sandbox_ref *ref);
/** Wait (bounded by state_wait) until the sandbox reaches the state want. */
rk_status os_lc_wait_state(struct os_inst *inst, struct rk_call *call, const char *osid,
                           const char *want, const char *op);

/** ops.snapshot_create (os_snapshot.c). */
rk_status os_snapshot_create(struct os_inst *inst, struct rk_call *call,
                             const struct rk_sandbox_ref *ref, struct rk_snapshot *out);
/** ops.snapshot_get. */
rk_status os_snapshot_get(struct os_inst *inst, struct rk_call *call, const char *snapshot_id,
                          struct rk_snapshot *out);
/** ops.snapshot_delete. */
rk_status os_snapshot_delete(struct os_inst *inst, struct rk_call *call, const char *snapshot_id);
/** ops.restore_snapshot: create from the snapshot with the spec's resources. */
rk_status os_restore_snapshot(struct os_inst *inst, struct rk_call *call,
                              const struct rk_create_spec *spec, const char *snapshot_id,
                              struct rk_created *out);

/* ------------------------------------------------------------------------ */
/* execd operations (os_execd.c, os_files.c, os_session.c)                   */
/* ------------------------------------------------------------------------ */

/** Prepare an execd request: URL from the endpoint, its headers, request id. */
rk_status os_execd_xfer(struct os_xfer *x, struct os_inst *inst, struct rk_call *call,
                        const struct os_endpoint *ep, const char *method, const char *path,
                        int64_t timeout_ms);

/** Adds a body to an execd request; called with x == NULL and attempt -1 to ask
 *  whether a retry is possible (RK_OK = yes). */
typedef rk_status (*os_prep_fn)(struct os_xfer *x, void *ctx, int attempt);

/** Best effort after the call's deadline passed: one execd exchange on the cached endpoint,
 *  bounded on its own; the HTTP status or 0. */
long os_execd_after_deadline(struct os_inst *inst, struct rk_call *call, const char *osid,
                             const char *method, const char *path);

rk_status os_execd_simple(struct os_inst *inst, struct rk_call *call, const char *osid,
                          const char *op, const char *method, const char *path, int64_t timeout_ms,
                          os_prep_fn prep, void *ctx, struct os_xfer *x);

/** Outcome of one streamed execd run (command or session). */
struct os_run_opts {
    const char *op;     /**< operation name for messages */
    const char *path;   /**< "/command" or "/session/{sid}/run" */
    const char *body;   /**< JSON request body */
    int64_t timeout_ms; /**< command timeout (0 = none) */
    int session;        /**< 1: session run (all output is stdout) */
    /** Called exactly once when the run ends (NULL: none), in both forms and on every path
     *  (a run that could not start too), with the run's status and result, which it may
     *  change; asynchronous runs call it before host->call_done. */
    rk_status (*finish)(void *ctx, rk_status s, struct rk_exec_res *out);
    void *finish_ctx;
};

rk_status os_run_stream(struct os_inst *inst, struct rk_call *call, const char *osid,
                        const struct os_run_opts *opts, const struct rk_sink *sink,
                        struct rk_exec_res *out);
/** os_run_stream started on the loop (ABI 1.2): RK_OK, then the end goes to
 *  host->call_done (possibly before this returns); otherwise nothing was started. */
rk_status os_run_stream_start(struct os_inst *inst, struct rk_call *call, const char *osid,
                              const struct os_run_opts *opts, const struct rk_sink *sink,
                              struct rk_exec_res *out);
rk_status os_exec(struct os_inst *inst, struct rk_call *call, const struct rk_sandbox_ref *ref,
                  const struct rk_exec_req *req, const struct rk_sink *sink,
                  struct rk_exec_res *out);
rk_status os_exec_start(struct os_inst *inst, struct rk_call *call,
                        const struct rk_sandbox_ref *ref, const struct rk_exec_req *req,
                        const struct rk_sink *sink, struct rk_exec_res *out);
/* Readiness (os_ready.c) */
/** 1 if the sandbox's execd answers GET /ping with 200 within timeout_ms (0 on any failure;
 *  the call may carry the failure's detail). */
int os_execd_ping(struct os_inst *inst, struct rk_call *call, const char *osid, int64_t timeout_ms);
/** Queue a background check of whether the execd of osid (Running since since; rock_id its ROCK
 *  id) answers; the answer is noted (os_ep_ready_note) and reported to the core
 *  (host->state_report) when it does. Returns at once; a sandbox already queued,
 *  or a full queue, is left for a later call. */
void os_execd_check(struct os_inst *inst, const char *rock_id, const char *osid, const char *since);
/** Set up the instance's check queue; 0, or -1 when out of memory. */
int os_ready_init(struct os_inst *inst);
/** Drop the checks that have not started (before the loop stops). */
void os_ready_stop(struct os_inst *inst);
/** Release the queue (after the loop stopped and every running check ended). */
void os_ready_free(struct os_inst *inst);
rk_status os_file_stat(struct os_inst *inst, struct rk_call *call, const struct rk_sandbox_ref *ref,
                       const char *path, struct rk_file_info *out);
rk_status os_file_read(struct os_inst *inst, struct rk_call *call, const struct rk_sandbox_ref *ref,
                       const char *path, const struct rk_sink *sink);
rk_status os_file_write(struct os_inst *inst, struct rk_call *call,
                        const struct rk_sandbox_ref *ref, const char *path, unsigned mode,
                        const struct rk_source *source);
rk_status os_session_open(struct os_inst *inst, struct rk_call *call,
                          const struct rk_sandbox_ref *ref, const struct rk_session_opts *opts,
                          struct rk_session_opened *out);
rk_status os_session_run(struct os_inst *inst, struct rk_call *call,
                         const struct rk_sandbox_ref *ref, const char *session_id,
                         const struct rk_session_req *req, const struct rk_sink *sink,
                         struct rk_exec_res *out);
rk_status os_session_run_start(struct os_inst *inst, struct rk_call *call,
                               const struct rk_sandbox_ref *ref, const char *session_id,
                               const struct rk_session_req *req, const struct rk_sink *sink,
                               struct rk_exec_res *out);
rk_status os_session_close(struct os_inst *inst, struct rk_call *call,
                           const struct rk_sandbox_ref *ref, const char *session_id);

/* ------------------------------------------------------------------------ */
/* Configuration and instance assembly (os_config.c)                         */
/* ------------------------------------------------------------------------ */

/** Validate the section (reporting every problem) and build the instance. No I/O. */
rk_status os_config_init(const struct rk_host *host, const struct rk_cfg *cfg,
                         struct os_inst **out);
/** Free an instance and everything its modules set up. */
void os_config_free(struct os_inst *inst);
/** Capabilities this configured instance offers (ops.configured_caps). */
uint64_t os_configured_caps(struct os_inst *inst);
/** Schema of the plugin's YAML section. */
extern const struct rk_cfg_key os_config_keys[];

#endif /* OS_INTERNAL_H */
