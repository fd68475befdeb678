/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file operator.h
 * @brief The rock-admin operator plugin ABI: the only header a plugin needs.
 *
 * An operator plugin is a shared object that rock-admin loads with libltdl. It
 * translates sandbox operations (lifecycle, commands, files, sessions, proxy
 * endpoint resolution) into one backend's protocol. The plugin never sees HTTP
 * clients, the store (Redis) or the admin's environment: the core owns the
 * wire format, the ROCK envelope, the session-name registry and byte relays.
 *
 * A plugin exports exactly one symbol, a constant `struct rk_operator`, with
 * RK_OPERATOR_EXPORT(). The loader checks that descriptor before any plugin
 * code runs (magic, ABI version, struct sizes, layout flags, name, capability
 * bits against entry points, config schema) and refuses the plugin with one
 * log line naming the failed check otherwise.
 *
 * Versioning (the Varnish rule), as the loader enforces it:
 *   - ABI major changes on any removal, reordering or change of meaning of an
 *     existing field, entry point, host function, capability bit or status
 *     code. The core loads a plugin only if its major equals the core's.
 *   - ABI minor changes when something is appended: a field at the END of a
 *     struct, an entry point at the end of the ops table, a host function at
 *     the end of the host table, a new capability bit, a new enumerator. The
 *     core loads a plugin whose minor is lower than or equal to its own; a
 *     plugin with a newer minor is refused at load.
 *   - Versioned structs the plugin hands to the core carry their own size:
 *     the descriptor (`struct_size`, at least the 1.0 size), the ops table
 *     (`struct_size`, at least up to `destroy`), and the two arrays
 *     (`config_key_size`, `cap_msg_size`: element strides, 0 or absent means
 *     the 1.0 element size). The core copies each of them by the plugin's own
 *     size into a zero-filled copy of its own layout and never reads the
 *     plugin's memory past that size, so fields a plugin does not know read as
 *     0 / NULL. Zero must therefore always mean "absent, 1.0 behaviour".
 *   - The host table is the core's and at least as new as the plugin's
 *     minor (newer plugins are refused); RK_HOST_HAS() checks a member's
 *     presence (table size) and that it is set: use it for members appended
 *     after 1.0 when one source is built against several SDKs.
 *   - Structs the core passes in (specs, requests, refs) may grow at the end;
 *     a plugin reads only the fields it knows. Structs the plugin fills (out
 *     parameters) are zero-filled by the core at the core's size, and the core
 *     reads a field appended in minor N only from a plugin built for >= N.
 *   - `struct rk_kv` and the enum types keep their layout for the whole major.
 *   - Every symbol a plugin imports must resolve when it is loaded: the loader
 *     binds all symbols immediately and refuses the plugin with one line naming
 *     the first unresolved symbol (no lazy failure on first use).
 *   - `abi/` holds an abidw baseline of each released minor (operator-1.0.abi,
 *     operator-1.1.abi, ...). CI (scripts/abi-check.sh) checks this header
 *     against every one of them and fails on any change except appends, and on
 *     an append without a minor bump.
 *   - Members are marked by the minor that added them: section comments
 *     ("---- ABI 1.1 ----") in structs and tables, "(since 1.1)" on members.
 *
 * Ownership:
 *   - Everything the core passes in (specs, refs, strings, arrays) is borrowed
 *     for the duration of the call only; copy what you keep.
 *   - Everything the plugin returns through out-parameters must live in the
 *     per-call arena (host->arena_alloc / arena_strdup) or in static storage.
 *     The core frees the arena when the request ends. Never free() across the
 *     boundary in either direction.
 *   - On a non-RK_OK return, out-parameters are ignored by the core.
 *
 * Threading:
 *   - init() and fini() run once, on the main thread, before any request and
 *     after the last one.
 *   - Every other entry point may be called concurrently from many threads
 *     (one thread per in-flight request), so plugins declare
 *     RK_OPF_THREADSAFE and keep per-instance state thread-safe.
 *   - Calls may block (upstream I/O) but must honour host->deadline_ms() and
 *     poll host->cancelled() in long loops.
 *   - While an entry point waits, a thread of the plugin's own may act for it:
 *     call the host functions that take its rk_call and write to its sink,
 *     one thread at a time, handing over with a mutex or condition variable,
 *     and never after the entry point returned. The sinks of exec and
 *     session_run never block (output is collected in memory), so an event
 *     loop may feed many of them (the OpenSandbox plugin drives all command
 *     streams from one libcurl multi thread this way).
 *   - Asynchronous forms (ABI 1.2, optional): exec_start and
 *     session_run_start take the same arguments as exec and session_run but
 *     return as soon as the command is in flight, so a plugin with its own
 *     event loop holds no thread per running command. The rules:
 *       * Return RK_OK: the operation is started and the plugin reports its
 *         end exactly once with host->call_done(call, status), where status
 *         is what the blocking form would have returned (record the detail
 *         with set_error first, fill `out` first). Any other return: nothing
 *         was started, call_done must NOT be called; the core answers with
 *         that status as for the blocking form.
 *       * call_done may be called from any thread, including the one that is
 *         still inside exec_start (the command ended at once). Until then
 *         `call`, `ref`, `req` (and everything it points to), `session_id`,
 *         `sink` and `out` stay valid and belong to the plugin; from the
 *         moment call_done is entered they are the core's again: the plugin
 *         touches none of them after (not even to unlock something stored in
 *         them), and the core may free the call before call_done returns.
 *       * One thread at a time acts for a call: the thread that called
 *         exec_start until it hands the call over to the plugin's loop
 *         (with a mutex, a queue, ...), then that loop. Host functions that
 *         take the call (set_error, arena_*, deadline_ms, cancelled,
 *         request_id, log_call) and sink->write may be used from the acting
 *         thread; sink->write never blocks.
 *       * exec_start may block briefly for set-up (resolving an endpoint),
 *         like any entry point, but never for the command itself.
 *       * The core owns the deadline as for the blocking form: honour
 *         host->deadline_ms() (end with RK_E_TIMEOUT once it passed) and
 *         poll host->cancelled() for every running command (e.g. each few
 *         hundred ms) and end it with RK_E_CANCELLED. The core has no other
 *         way to end a started command: a plugin that never calls call_done
 *         leaves its client waiting.
 *       * call_done runs the core's completion (mapping the result, the reply)
 *         on the calling thread and returns quickly without blocking or
 *         calling back into the plugin; do not call it with a lock held that
 *         another entry point may wait for.
 *       * The blocking forms stay mandatory with their capability bits (the
 *         core may call either); the async slots are used only when set.
 *       * At shutdown every call reports cancelled(), so every started
 *         command ends before fini() runs; fini() may assume none is left.
 *
 * Errors cross the boundary as an rk_status plus a message recorded with
 * host->set_error(). Only the core turns them into ROCK envelopes:
 *   RK_E_INVALID, RK_E_NOT_FOUND, RK_E_CONFLICT, RK_E_UNSUPPORTED,
 *   RK_E_NOT_RUNNING                       -> code 4000 (bad request)
 *   RK_E_UPSTREAM, RK_E_UNAVAILABLE, RK_E_NOMEM, RK_E_INTERNAL,
 *   RK_E_TOO_LARGE                         -> code 5000 (internal)
 *   RK_E_TIMEOUT, RK_E_COMMAND, RK_E_CANCELLED -> Failed with a null result
 *
 * ABI changelog (newest first):
 *   1.2 (2026-12-02)  Asynchronous command forms (see "Threading"):
 *                     - appended to rk_operator_ops: exec_start and
 *                       session_run_start, optional asynchronous forms of
 *                       exec and session_run (same arguments; they return
 *                       once the command is in flight). Gated by the existing
 *                       RK_CAP_EXEC / RK_CAP_SESSION bits (no new bit): the
 *                       loader refuses an async slot without its capability;
 *                       the core uses the async form whenever it is set;
 *                     - appended to rk_host: call_done(call, status), the
 *                       completion report of an async form, callable from
 *                       any thread exactly once per started operation.
 *                     File transfer and proxy_target have no async form:
 *                     file_write pulls from a blocking rk_source (an async
 *                     form needs a pausable source, a new contract) and
 *                     file_read is bounded by max_read_bytes; proxy_target is
 *                     a short, cached lookup with no long wait to give back.
 *   1.1 (2026-11-30)  Keeps the minor-version promise for 1.0 plugins:
 *                     - the core copies the descriptor by its struct_size
 *                       (1.0 descriptors keep loading; newer minors refused);
 *                     - appended to rk_operator: config_key_size and
 *                       cap_msg_size, element strides of config[] and
 *                       unsupported[] so both arrays can grow in a minor;
 *                     - appended to rk_host: log_call() (log line carrying
 *                       the request id of a call);
 *                     - arena_alloc returns NULL on failure (as documented)
 *                       and refuses sizes whose rounding would overflow;
 *                     - unresolved symbols refused at load, naming the symbol;
 *                     - every capability bit but one has an effect:
 *                       RK_CAP_RESTORE (start on an archived id calls restore),
 *                       RK_CAP_SESSION_INTERACTIVE (appended to
 *                       rk_session_req: flags, expect, expect_len; to
 *                       rk_exec_res: expect_string), RK_CAP_PORT_FORWARD
 *                       (the core tunnels the portforward WebSocket to the
 *                       tcp://host:port that proxy_target returns for
 *                       RK_PROXY_TCP);
 *                     - RK_CAP_SCHEDULER is reserved: the loader accepts the
 *                       bit and ignores it (the core has no worker scheduler;
 *                       scheduler.enabled logs one warning with or without it).
 *                     - ops.list + RK_CAP_LIST: enumerate this deployment's
 *                       sandboxes in one paged pass, so a reconciler learns
 *                       state without a status call per request.
 *                     - appended to rk_proxy_target: header_flags, so a
 *                       plugin marks endpoint headers as backend
 *                       credentials (RK_PROXY_HEADER_CREDENTIAL) the core
 *                       never puts on a client-controlled proxied request;
 *                       unmarked headers are routing headers, as in 1.0.
 *                     Lifecycle (stop modes, archive by snapshots, renew):
 *                     - ops.configured_caps + RK_CAP_CONFIGURED: the configured
 *                       instance narrows its descriptor's caps after init()
 *                       (e.g. a deployment option turns stop off).
 *                     - RK_CAP_STOP_DELETES (no entry point): /stop destroys.
 *                     - ops.snapshot_create/snapshot_get/snapshot_delete/
 *                       restore_snapshot + RK_CAP_SNAPSHOT, struct rk_snapshot:
 *                       archive and restore by backend snapshots, driven by
 *                       the core's state machine.
 *                     - ops.renew + RK_CAP_RENEW: keep the backend's own
 *                       expiry ahead of the core's idle deadline.
 *   1.0 (2026-11-29)  First public ABI: descriptor, ops table, host table,
 *                     declarative config schema, capability bits.
 */
#ifndef ROCK_ADMIN_OPERATOR_H
#define ROCK_ADMIN_OPERATOR_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Major version of the operator ABI this header describes. */
#define RK_OPERATOR_ABI_MAJOR 1
/** Minor version of the operator ABI this header describes. */
#define RK_OPERATOR_ABI_MINOR 2
/** First field of every descriptor: ASCII "RKOP". */
#define RK_OPERATOR_MAGIC 0x524b4f50u
/** Name of the symbol the loader looks up in a plugin. */
#define RK_OPERATOR_SYMBOL "rk_operator"

/** Build-layout bits; a plugin whose bits differ from the core's is refused. */
#define RK_ABI_FLAG_LP64 0x1u
#if UINTPTR_MAX == 0xffffffffffffffffu
#define RK_ABI_FLAGS RK_ABI_FLAG_LP64
#else
#define RK_ABI_FLAGS 0u
#endif

#if defined(__GNUC__)
#define RK_PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))
#define RK_EXPORT_VISIBILITY __attribute__((visibility("default")))
#else
#define RK_PRINTF(fmt, args)
#define RK_EXPORT_VISIBILITY
#endif

/**
 * Declare the plugin's descriptor. Expands to the exported constant
 * `rk_operator`; write the initializer after it:
 *
 *     RK_OPERATOR_EXPORT = { .magic = RK_OPERATOR_MAGIC, ... };
 */
#define RK_OPERATOR_EXPORT RK_EXPORT_VISIBILITY const struct rk_operator rk_operator

/* ------------------------------------------------------------------------ */
/* Status codes                                                              */
/* ------------------------------------------------------------------------ */

/** Result of every entry point. 0 is success; errors are negative. */
typedef enum rk_status {
    RK_OK = 0,
    RK_E_INVALID = -1,     /**< bad input (4000) */
    RK_E_NOT_FOUND = -2,   /**< object does not exist upstream (4000) */
    RK_E_CONFLICT = -3,    /**< already exists / state conflict (4000) */
    RK_E_UNSUPPORTED = -4, /**< the backend cannot do this (4000) */
    RK_E_NOT_RUNNING = -5, /**< sandbox not running (4000) */
    RK_E_TIMEOUT = -6,     /**< an operation timed out (Failed, result null) */
    RK_E_CANCELLED = -7,   /**< the client went away (Failed, result null) */
    RK_E_UPSTREAM = -8,    /**< upstream answered badly (5000) */
    RK_E_UNAVAILABLE = -9, /**< upstream unreachable (5000) */
    RK_E_NOMEM = -10,      /**< out of memory (5000) */
    RK_E_INTERNAL = -11,   /**< bug or unexpected state (5000) */
    RK_E_TOO_LARGE = -12,  /**< a configured size cap was exceeded (5000) */
    RK_E_COMMAND = -13,    /**< a command the plugin ran failed (Failed, result null) */
} rk_status;

/* ------------------------------------------------------------------------ */
/* Capabilities                                                              */
/* ------------------------------------------------------------------------ */

/**
 * Capability bits. Each bit requires the named entry point to be non-NULL;
 * the loader refuses a plugin that sets a bit without its entry point, sets an
 * entry point without its bit, or sets an unknown bit. The core refuses an
 * operation whose bit is missing before calling the plugin, with the text from
 * the descriptor's `unsupported` list or "<display_name> backend does not
 * support <operation>".
 */
#define RK_CAP_EXEC (1ull << 0)                /**< ops.exec */
#define RK_CAP_FILE_READ (1ull << 1)           /**< ops.file_read */
#define RK_CAP_FILE_STAT (1ull << 2)           /**< ops.file_stat */
#define RK_CAP_FILE_WRITE (1ull << 3)          /**< ops.file_write */
#define RK_CAP_SESSION (1ull << 4)             /**< ops.session_open/run/close */
#define RK_CAP_SESSION_INTERACTIVE (1ull << 5) /**< interactive/expect in session_run (>= 1.1) */
#define RK_CAP_PROXY_HTTP (1ull << 6)          /**< ops.proxy_target, kind HTTP */
#define RK_CAP_PROXY_WS (1ull << 7)            /**< ops.proxy_target, kind WS */
#define RK_CAP_PORT_FORWARD (1ull << 8)        /**< ops.proxy_target, kind TCP (tunnel, 1.1) */
#define RK_CAP_STOP (1ull << 9)                /**< ops.stop */
#define RK_CAP_RESTART (1ull << 10)            /**< ops.restart */
#define RK_CAP_ARCHIVE (1ull << 11)            /**< ops.archive */
#define RK_CAP_RESTORE (1ull << 12)            /**< ops.restore */
#define RK_CAP_COMMIT (1ull << 13)             /**< ops.commit */
#define RK_CAP_STATISTICS (1ull << 14)         /**< ops.statistics */
#define RK_CAP_DELETE_PENDING (1ull << 15)     /**< ops.destroy may be called while pending */
/** Reserved: accepted at load and ignored. The core has no worker scheduler, so
 *  the bit has no effect (scheduler.enabled logs one warning with or without it). */
#define RK_CAP_SCHEDULER (1ull << 16)
/** Every bit ABI 1.0 knows. */
#define RK_CAP_ALL_1_0 ((1ull << 17) - 1)
/* ---- ABI 1.1 capability bits: append new bits here (next free: 1ull << 22)
 * and add them to RK_CAP_ALL. ---- */
#define RK_CAP_LIST (1ull << 17)         /**< ops.list (since 1.1) */
#define RK_CAP_CONFIGURED (1ull << 18)   /**< ops.configured_caps (since 1.1) */
#define RK_CAP_STOP_DELETES (1ull << 19) /**< /stop destroys; no entry point (since 1.1) */
#define RK_CAP_SNAPSHOT (1ull << 20)     /**< ops.snapshot_*, restore_snapshot (since 1.1) */
#define RK_CAP_RENEW (1ull << 21)        /**< ops.renew (since 1.1) */
/** Every bit this header knows; a plugin setting any other bit is refused. */
#define RK_CAP_ALL                                                                                 \
    (RK_CAP_ALL_1_0 | RK_CAP_LIST | RK_CAP_CONFIGURED | RK_CAP_STOP_DELETES | RK_CAP_SNAPSHOT |    \
     RK_CAP_RENEW)

/** Descriptor flags. */
#define RK_OPF_THREADSAFE 0x1u /**< required in ABI 1 */

/**
 * Text the core uses verbatim when it refuses an operation for a missing cap.
 * The array's stride is the descriptor's cap_msg_size (0 = the 1.0 size), so
 * a minor may append fields here.
 */
struct rk_cap_msg {
    uint64_t cap;        /**< one RK_CAP_* bit; 0 terminates the list */
    const char *message; /**< e.g. "OpenSandbox backend does not support stop ..." */
};

/* ------------------------------------------------------------------------ */
/* Configuration schema (declared by the plugin, validated by the core)      */
/* ------------------------------------------------------------------------ */

/** Value types of a config key. */
enum rk_cfg_type {
    RK_CFG_STR = 1,    /**< string */
    RK_CFG_INT = 2,    /**< 64-bit integer */
    RK_CFG_BOOL = 3,   /**< true/false */
    RK_CFG_DOUBLE = 4, /**< floating point number */
    RK_CFG_ENUM = 5,   /**< string restricted to enum_values */
};

/** Key flags. */
#define RK_CFGF_REQUIRED 0x1u /**< startup is refused when the key is absent */
#define RK_CFGF_SECRET 0x2u   /**< value is never printed or logged */
#define RK_CFGF_POSITIVE 0x4u /**< numbers must be > 0 */
#define RK_CFGF_NULLABLE 0x8u /**< YAML null (~) is accepted and means "unset" */

/**
 * One key of the plugin's YAML section. Arrays end with name == NULL. The
 * array's stride is the descriptor's config_key_size (0 = the 1.0 size), so a
 * minor may append fields here.
 */
struct rk_cfg_key {
    const char *name;               /**< key in the plugin's section */
    enum rk_cfg_type type;          /**< value type */
    uint32_t flags;                 /**< RK_CFGF_* */
    const char *default_value;      /**< textual default, or NULL for none */
    const char *const *enum_values; /**< NULL-terminated, for RK_CFG_ENUM */
    const char *env_fallback;       /**< env var read by the core when the value is empty */
    const char *doc;                /**< one line shown by documentation tools */
};

/** Read-only view of the validated section, handed to init(). */
struct rk_cfg;

/* ------------------------------------------------------------------------ */
/* Data exchanged with entry points                                          */
/* ------------------------------------------------------------------------ */

/** Per-request handle: deadline, cancellation, arena, error slot. Opaque. */
struct rk_call;

/** A key/value string pair (environment variables, headers). */
struct rk_kv {
    const char *key;
    const char *value;
};

/** ROCK sandbox states. */
enum rk_state {
    RK_STATE_PENDING = 1,
    RK_STATE_RUNNING = 2,
    RK_STATE_STOPPED = 3,
    RK_STATE_ARCHIVING = 4,
    RK_STATE_ARCHIVED = 5,
    RK_STATE_DELETED = 6,
};

/** The sandbox an operation targets (borrowed). */
struct rk_sandbox_ref {
    const char *sandbox_id;  /**< the ROCK id clients use */
    const char *upstream_id; /**< backend id from create(); NULL if not known yet */
    const char *backend_tag; /**< always equals the plugin's backend_tag */
    enum rk_state state;     /**< stored state */
};

/** What a client asked to create (borrowed). */
struct rk_create_spec {
    const char *sandbox_id;  /**< ROCK id; also record it upstream for reconciliation */
    const char *image;       /**< image as requested */
    double cpus;             /**< requested cpus */
    double limit_cpus;       /**< 0 when unset */
    const char *memory;      /**< as requested, e.g. "8g" */
    const struct rk_kv *env; /**< sandbox environment */
    size_t env_len;
    const char *user_id;        /**< from X-User-Id, default "default" */
    const char *experiment_id;  /**< from X-Experiment-Id */
    const char *namespace_name; /**< from X-Namespace */
    int64_t idle_timeout_s;     /**< client's idle timeout (auto_clear_time_minutes * 60) */
    int64_t startup_timeout_s;  /**< how long the client waits for running */
};

/** Result of create() (arena). */
struct rk_created {
    const char *upstream_id; /**< backend id, required */
    const char *image;       /**< image actually used (e.g. registry-qualified) or NULL */
    const char *host_name;   /**< shown as host_name; NULL means "use upstream_id" */
};

/** Result of status() (arena). */
struct rk_status_info {
    enum rk_state state;     /**< mapped ROCK state */
    int failed;              /**< 1 if the backend reports a failure (reason says why) */
    const char *reason;      /**< human-readable detail or NULL */
    const char *upstream_id; /**< set when the plugin discovered the id (ref had NULL) */
};

/**
 * Callback of ops.list: one sandbox this deployment owns. sandbox_id is the
 * ROCK id recorded at create (NULL if the backend lost it), info its current
 * state (info->upstream_id set). Borrowed for the callback's duration.
 */
typedef void (*rk_list_fn)(void *ctx, const char *sandbox_id, const struct rk_status_info *info);

/** Output stream ids passed to rk_sink.write. */
enum rk_stream { RK_STREAM_DATA = 0, RK_STREAM_STDOUT = 1, RK_STREAM_STDERR = 2 };

/**
 * Push-style byte consumer provided by the core. write() returns RK_OK to
 * continue; any other status (e.g. RK_E_TOO_LARGE when an output cap is hit,
 * RK_E_CANCELLED when the client left) must make the plugin stop and return
 * that status. Bytes are borrowed for the duration of write() only.
 */
struct rk_sink {
    rk_status (*write)(void *ctx, enum rk_stream stream, const char *buf, size_t len);
    void *ctx;
};

/**
 * Pull-style byte producer provided by the core (uploads). read() fills up to
 * len bytes and returns how many it wrote, 0 at end of data, or -1 on error
 * (the client went away; the plugin must abort the upstream write). It may
 * block until data arrives; the signature fits a libcurl read callback.
 */
struct rk_source {
    long long (*read)(void *ctx, char *buf, size_t len);
    void *ctx;
    long long size; /**< total size if known, else -1 */
};

/** A command to run (borrowed). */
struct rk_exec_req {
    const char *command;     /**< run through a POSIX shell */
    const char *cwd;         /**< working directory or NULL */
    const struct rk_kv *env; /**< sandbox env overlaid by the request's; may be empty */
    size_t env_len;
    /**
     * Command timeout; 0 = none. The core owns this deadline: it also sets the
     * call's deadline_ms() to start + timeout_ms + runtime.command_timeout_margin
     * and answers a timeout itself. The plugin only honours it (passes
     * timeout_ms upstream unchanged, stops waiting and returns RK_E_TIMEOUT when
     * deadline_ms() passes, sets rk_exec_res.timed_out when the backend says
     * the command was killed for time); it adds no margin of its own.
     */
    int64_t timeout_ms;
};

/** Outcome of a command (arena). */
struct rk_exec_res {
    int has_exit_code;      /**< 0 if the backend reported no exit code */
    int exit_code;          /**< valid if has_exit_code */
    int timed_out;          /**< the command hit timeout_ms */
    const char *error_text; /**< backend error that is not a timeout, or NULL */
    /* ---- ABI 1.1 ---- */
    const char *expect_string; /**< the expect string that matched (session_run), or NULL */
};

/** File metadata returned by file_stat() (out-param, plain values). */
struct rk_file_info {
    int exists;    /**< 0 if the path does not exist (not an error) */
    unsigned mode; /**< permission bits, e.g. 0644 */
    int64_t size;  /**< bytes, -1 if unknown */
};

/** Options for opening a session (borrowed). */
struct rk_session_opts {
    const struct rk_kv *env; /**< exported once at open, sandbox env overlaid */
    size_t env_len;
    const char *const *startup_source; /**< files sourced once at open */
    size_t startup_source_len;
    const char *remote_user;    /**< requested user or NULL */
    int64_t startup_timeout_ms; /**< limit for the init commands */
};

/** Result of session_open() (arena). */
struct rk_session_opened {
    const char *session_id; /**< opaque backend session id */
    const char *output;     /**< init output ("" if none) */
};

/** rk_session_req.flags (1.1). */
#define RK_SESSF_INTERACTIVE 0x1u      /**< is_interactive_command */
#define RK_SESSF_INTERACTIVE_QUIT 0x2u /**< is_interactive_quit */

/** A command for session_run() (borrowed). */
struct rk_session_req {
    const char *command;
    int64_t timeout_ms; /**< the core's command deadline; 0 = none (see rk_exec_req) */
    /* ---- ABI 1.1: set only when the plugin has RK_CAP_SESSION_INTERACTIVE ---- */
    uint32_t flags;            /**< RK_SESSF_* */
    const char *const *expect; /**< strings to wait for (may be NULL) */
    size_t expect_len;         /**< number of expect strings */
};

/** What kind of relay a proxy target is for. */
enum rk_proxy_kind { RK_PROXY_HTTP = 1, RK_PROXY_WS = 2, RK_PROXY_TCP = 3 };

/**
 * header_flags bit (ABI 1.1): this endpoint header is a backend credential
 * (e.g. OpenSandbox's OPENSANDBOX-EGRESS-AUTH). The core drops it, and any
 * client header of the same name, from every proxied request, since those
 * requests are controlled by the client. Headers without the bit are routing
 * headers: they reach the upstream and override the client's.
 */
#define RK_PROXY_HEADER_CREDENTIAL 0x1u

/** Where the core relays proxied traffic (arena). */
struct rk_proxy_target {
    /** HTTP/WS: http(s)://host[:port][/path][?query]; the core appends the path.
     *  TCP (port forwarding): tcp://host:port or tcp://[v6]:port, which the core
     *  connects to and tunnels the WebSocket's data frames through; headers are
     *  not used. */
    const char *base_url;
    const struct rk_kv *headers; /**< headers that must reach the upstream, override the client's */
    size_t headers_len;
    /* ---- ABI 1.1 ---- */
    /** NULL (every header is a routing header), or headers_len
     *  RK_PROXY_HEADER_* bit sets, one per header. The core zeroes the struct
     *  before the call, so a 1.0 plugin leaves it NULL. */
    const uint32_t *header_flags;
};

/** Lifecycle of a backend snapshot (ABI 1.1). */
enum rk_snapshot_state {
    RK_SNAPSHOT_CREATING = 1, /**< accepted, capture in progress */
    RK_SNAPSHOT_READY = 2,    /**< usable by restore_snapshot() */
    RK_SNAPSHOT_FAILED = 3,   /**< capture failed; reason says why */
};

/** A backend snapshot (arena; ABI 1.1). */
struct rk_snapshot {
    const char *snapshot_id;      /**< backend snapshot id */
    enum rk_snapshot_state state; /**< current state */
    const char *reason;           /**< failure detail or NULL */
};

/* ------------------------------------------------------------------------ */
/* Host services (the core's table, handed to init())                        */
/* ------------------------------------------------------------------------ */

/** Log levels for host->log. */
enum rk_log_level { RK_LOG_ERROR = 0, RK_LOG_WARNING = 1, RK_LOG_INFO = 2, RK_LOG_DEBUG = 3 };

/**
 * Services the core offers to plugins. Starts with its own size and version;
 * test optional members with RK_HOST_HAS(). All functions are thread-safe.
 */
struct rk_host {
    uint32_t struct_size; /**< sizeof(struct rk_host) as the core built it */
    uint16_t abi_major;   /**< core's RK_OPERATOR_ABI_MAJOR */
    uint16_t abi_minor;   /**< core's RK_OPERATOR_ABI_MINOR */

    /** Log one line; the core prefixes the plugin name. Never pass secrets. */
    void (*log)(enum rk_log_level level, const char *fmt, ...) RK_PRINTF(2, 3);
    /** Record the error detail for this call; returns code for `return host->set_error(...)`. */
    rk_status (*set_error)(struct rk_call *call, rk_status code, const char *fmt, ...)
        RK_PRINTF(3, 4);
    /** Allocate n zeroed bytes freed when the request ends; NULL on failure. */
    void *(*arena_alloc)(struct rk_call *call, size_t n);
    /** Copy a string into the arena; NULL on failure. */
    char *(*arena_strdup)(struct rk_call *call, const char *s);
    /** Absolute deadline of this call on the CLOCK_MONOTONIC ms scale; 0 = none. */
    int64_t (*deadline_ms)(const struct rk_call *call);
    /** Current CLOCK_MONOTONIC time in ms. */
    int64_t (*now_ms)(void);
    /** Non-zero once the client left or the daemon is shutting down. */
    int (*cancelled)(const struct rk_call *call);
    /** Request id to send upstream as X-Request-ID (never NULL). */
    const char *(*request_id)(const struct rk_call *call);

    /** Value of a string/enum key (default applied); NULL if unset. */
    const char *(*cfg_str)(const struct rk_cfg *cfg, const char *key);
    /** Value of an integer key (default applied); 0 if unset. */
    int64_t (*cfg_int)(const struct rk_cfg *cfg, const char *key);
    /** Value of a boolean key (default applied); 0 if unset. */
    int (*cfg_bool)(const struct rk_cfg *cfg, const char *key);
    /** Value of a double key (default applied); 0 if unset. */
    double (*cfg_double)(const struct rk_cfg *cfg, const char *key);
    /**
     * Report a semantic problem with a key from init(); the core prints it as
     * "file:line: section.key: problem". init() then returns RK_E_INVALID.
     */
    void (*cfg_problem)(const struct rk_cfg *cfg, const char *key, const char *fmt, ...)
        RK_PRINTF(3, 4);

    /* ---- ABI 1.1 (test with RK_HOST_HAS(host, member)) ---- */

    /**
     * Log one line about a call: like log(), and the line carries the call's
     * request id (the one in the access log), so plugin lines can be matched
     * to requests. Never pass secrets.
     */
    void (*log_call)(const struct rk_call *call, enum rk_log_level level, const char *fmt, ...)
        RK_PRINTF(3, 4);

    /* ---- ABI 1.2 (test with RK_HOST_HAS(host, member)) ---- */

    /**
     * Report the end of an operation started with an asynchronous entry
     * point (exec_start, session_run_start; since 1.2): st is what the
     * blocking form would have returned. Exactly once per operation whose
     * start returned RK_OK, from any thread. From the moment it is entered,
     * call, ref, req, session_id, sink and out are the core's: the plugin
     * must not touch them any more (see "Threading" above).
     */
    void (*call_done)(struct rk_call *call, rk_status st);
};

/** True if the host table has member `field` and it is set. */
#define RK_HOST_HAS(host, field)                                                                   \
    ((host)->struct_size >= offsetof(struct rk_host, field) + sizeof((host)->field) &&             \
     (host)->field != NULL)

/* ------------------------------------------------------------------------ */
/* Entry points                                                              */
/* ------------------------------------------------------------------------ */

/**
 * The plugin's function table. Starts with its own size. `inst` is the value
 * init() stored; `call` is the per-request handle. Optional members are gated
 * by capability bits (see RK_CAP_*). Sections mark the minor that added the
 * members; a plugin built for an older minor has a shorter table (struct_size)
 * and the core reads the newer slots as NULL.
 */
struct rk_operator_ops {
    /* ---- ABI 1.0 ---- */
    uint32_t struct_size; /**< sizeof(struct rk_operator_ops) as the plugin saw it */

    /** Mandatory. Validate config (host->cfg_problem) and build the instance.
     *  Must not contact any upstream (rock-admin -t calls it). */
    rk_status (*init)(const struct rk_host *host, const struct rk_cfg *cfg, void **inst_out);
    /** Mandatory. Free the instance; called once after the last request. */
    void (*fini)(void *inst);

    /** Mandatory. Create a sandbox; may block until the backend accepted it.
     *  If the outcome is unknown (reply lost), find it by spec->sandbox_id. */
    rk_status (*create)(void *inst, struct rk_call *call, const struct rk_create_spec *spec,
                        struct rk_created *out);
    /** Mandatory. Current state. ref->upstream_id may be NULL (create outcome
     *  unknown): then look the sandbox up by ref->sandbox_id and set
     *  out->upstream_id, or return RK_E_NOT_FOUND. RK_E_NOT_FOUND means the
     *  backend has no such sandbox (gone). */
    rk_status (*status)(void *inst, struct rk_call *call, const struct rk_sandbox_ref *ref,
                        struct rk_status_info *out);
    /** Mandatory. Ensure the sandbox is gone; "already gone" is RK_OK. */
    rk_status (*destroy)(void *inst, struct rk_call *call, const struct rk_sandbox_ref *ref);

    /** RK_CAP_STOP. */
    rk_status (*stop)(void *inst, struct rk_call *call, const struct rk_sandbox_ref *ref);
    /** RK_CAP_RESTART. */
    rk_status (*restart)(void *inst, struct rk_call *call, const struct rk_sandbox_ref *ref);
    /** RK_CAP_ARCHIVE. */
    rk_status (*archive)(void *inst, struct rk_call *call, const struct rk_sandbox_ref *ref);
    /** RK_CAP_RESTORE. Called when a client starts an id whose record is
     *  archived; on RK_OK the sandbox goes archived -> pending. */
    rk_status (*restore)(void *inst, struct rk_call *call, const struct rk_sandbox_ref *ref);
    /** RK_CAP_COMMIT. image_tag is the target image. */
    rk_status (*commit)(void *inst, struct rk_call *call, const struct rk_sandbox_ref *ref,
                        const char *image_tag);
    /** RK_CAP_STATISTICS. Writes a JSON object to sink (RK_STREAM_DATA). */
    rk_status (*statistics)(void *inst, struct rk_call *call, const struct rk_sandbox_ref *ref,
                            const struct rk_sink *sink);

    /** RK_CAP_EXEC. Output goes to sink as STDOUT/STDERR chunks in order. */
    rk_status (*exec)(void *inst, struct rk_call *call, const struct rk_sandbox_ref *ref,
                      const struct rk_exec_req *req, const struct rk_sink *sink,
                      struct rk_exec_res *out);

    /** RK_CAP_FILE_READ. File bytes go to sink (RK_STREAM_DATA).
     *  A missing file is RK_E_NOT_FOUND. */
    rk_status (*file_read)(void *inst, struct rk_call *call, const struct rk_sandbox_ref *ref,
                           const char *path, const struct rk_sink *sink);
    /** RK_CAP_FILE_STAT. A missing file is RK_OK with out->exists = 0. */
    rk_status (*file_stat)(void *inst, struct rk_call *call, const struct rk_sandbox_ref *ref,
                           const char *path, struct rk_file_info *out);
    /** RK_CAP_FILE_WRITE. Write source to path with permission bits mode,
     *  creating missing parent directories. Stream; never buffer it whole. */
    rk_status (*file_write)(void *inst, struct rk_call *call, const struct rk_sandbox_ref *ref,
                            const char *path, unsigned mode, const struct rk_source *source);

    /** RK_CAP_SESSION. Open a session: check remote_user, validate env names,
     *  open, run the init exports/sources once. On failure close what was opened. */
    rk_status (*session_open)(void *inst, struct rk_call *call, const struct rk_sandbox_ref *ref,
                              const struct rk_session_opts *opts, struct rk_session_opened *out);
    /** RK_CAP_SESSION. Run in an open session; output (stdout+stderr) to sink. */
    rk_status (*session_run)(void *inst, struct rk_call *call, const struct rk_sandbox_ref *ref,
                             const char *session_id, const struct rk_session_req *req,
                             const struct rk_sink *sink, struct rk_exec_res *out);
    /** RK_CAP_SESSION. Close a session. */
    rk_status (*session_close)(void *inst, struct rk_call *call, const struct rk_sandbox_ref *ref,
                               const char *session_id);

    /** RK_CAP_PROXY_HTTP / PROXY_WS / PORT_FORWARD. Resolve where traffic for
     *  `port` inside the sandbox goes; the core relays the bytes itself. */
    rk_status (*proxy_target)(void *inst, struct rk_call *call, const struct rk_sandbox_ref *ref,
                              int port, enum rk_proxy_kind kind, struct rk_proxy_target *out);

    /* ---- ABI 1.1 ---- */

    /** RK_CAP_LIST (since 1.1). Call fn once per sandbox this deployment created
     *  (all pages), with the same state mapping as status(). Returns RK_OK only
     *  after a complete pass (a partial list must not be taken as "the others
     *  vanished"). The core asks status() about each active sandbox a complete
     *  pass did not report before it records the sandbox gone: a listing paged by
     *  offset misses a sandbox that moved between pages while it was read. */
    rk_status (*list)(void *inst, struct rk_call *call, rk_list_fn fn, void *ctx);

    /** RK_CAP_CONFIGURED (since 1.1). Capabilities the configured instance
     *  offers, called once right after init(); the core uses desc->caps & this
     *  value. Lets a deployment option (e.g. OpenSandbox stop_mode) enable or
     *  refuse an operation whose entry point the plugin always carries. */
    uint64_t (*configured_caps)(void *inst);
    /** RK_CAP_SNAPSHOT (since 1.1). Start a snapshot of a stopped sandbox
     *  (the plugin brings the source into whatever state its backend needs)
     *  and return once the backend accepted it: out->snapshot_id is required.
     *  The core polls snapshot_get(), then destroys the source (success) or
     *  stops it again (failure). */
    rk_status (*snapshot_create)(void *inst, struct rk_call *call, const struct rk_sandbox_ref *ref,
                                 struct rk_snapshot *out);
    /** RK_CAP_SNAPSHOT (since 1.1). Current state of a snapshot; a missing one
     *  is RK_E_NOT_FOUND. */
    rk_status (*snapshot_get)(void *inst, struct rk_call *call, const char *snapshot_id,
                              struct rk_snapshot *out);
    /** RK_CAP_SNAPSHOT (since 1.1). Delete a snapshot; "already gone" is RK_OK. */
    rk_status (*snapshot_delete)(void *inst, struct rk_call *call, const char *snapshot_id);
    /** RK_CAP_SNAPSHOT (since 1.1). Create a sandbox from a snapshot (like
     *  create(); the spec carries the ROCK id and the stored resources). */
    rk_status (*restore_snapshot)(void *inst, struct rk_call *call,
                                  const struct rk_create_spec *spec, const char *snapshot_id,
                                  struct rk_created *out);
    /** RK_CAP_RENEW (since 1.1). The core's idle deadline of the sandbox is now
     *  idle_deadline (epoch seconds): make the backend keep it at least that
     *  long. Called on activity; the plugin rate-limits upstream calls. */
    rk_status (*renew)(void *inst, struct rk_call *call, const struct rk_sandbox_ref *ref,
                       int64_t idle_deadline);

    /* ---- ABI 1.2 ---- */

    /** Optional, needs RK_CAP_EXEC (since 1.2). The asynchronous form of
     *  exec: start the command and return RK_OK once it is in flight; report
     *  its end with host->call_done(). Output goes to sink as for exec.
     *  Arguments stay valid until call_done (see "Threading" above). */
    rk_status (*exec_start)(void *inst, struct rk_call *call, const struct rk_sandbox_ref *ref,
                            const struct rk_exec_req *req, const struct rk_sink *sink,
                            struct rk_exec_res *out);
    /** Optional, needs RK_CAP_SESSION (since 1.2). The asynchronous form of
     *  session_run, with the same rules as exec_start. */
    rk_status (*session_run_start)(void *inst, struct rk_call *call,
                                   const struct rk_sandbox_ref *ref, const char *session_id,
                                   const struct rk_session_req *req, const struct rk_sink *sink,
                                   struct rk_exec_res *out);
};

/* ------------------------------------------------------------------------ */
/* Descriptor                                                                */
/* ------------------------------------------------------------------------ */

/**
 * The one exported, constant descriptor of a plugin. Fields in this order;
 * new fields are appended at the end (the core reads only struct_size bytes).
 */
struct rk_operator {
    uint32_t magic;           /**< RK_OPERATOR_MAGIC */
    uint16_t abi_major;       /**< RK_OPERATOR_ABI_MAJOR at plugin build time */
    uint16_t abi_minor;       /**< RK_OPERATOR_ABI_MINOR at plugin build time */
    uint32_t struct_size;     /**< sizeof(struct rk_operator) */
    uint32_t abi_flags;       /**< RK_ABI_FLAGS */
    const char *name;         /**< [a-z0-9_]+, equals the file stem and runtime.operator_type */
    const char *backend_tag;  /**< stored in extended_params.backend; the fail-closed key */
    const char *display_name; /**< for messages, e.g. "OpenSandbox" */
    const char *version;      /**< plugin version, logged at load */
    uint32_t flags;           /**< RK_OPF_*; RK_OPF_THREADSAFE is required */
    uint64_t caps;            /**< RK_CAP_* bits */
    const struct rk_cfg_key *config; /**< schema of the plugin's section, NULL-name terminated */
    const struct rk_cap_msg *unsupported; /**< refusal texts, cap == 0 terminated; may be NULL */
    const struct rk_operator_ops *ops;    /**< entry points */

    /* ---- ABI 1.1 (0 or absent = the 1.0 element size) ---- */
    uint32_t config_key_size; /**< sizeof(struct rk_cfg_key): stride of config[] */
    uint32_t cap_msg_size;    /**< sizeof(struct rk_cap_msg): stride of unsupported[] */
};

/**
 * Fill the 1.1 element-size fields of a descriptor initializer:
 *     RK_OPERATOR_EXPORT = { ..., .ops = &ops, RK_OPERATOR_ELEMENT_SIZES };
 */
#define RK_OPERATOR_ELEMENT_SIZES                                                                  \
    .config_key_size = sizeof(struct rk_cfg_key), .cap_msg_size = sizeof(struct rk_cap_msg)

#ifdef __cplusplus
}
#endif

#endif /* ROCK_ADMIN_OPERATOR_H */
