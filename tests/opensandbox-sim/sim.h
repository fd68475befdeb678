/* opensandbox-sim: a local stand-in for the OpenSandbox lifecycle server and execd.
 * Shared types and prototypes. Not an isolation boundary: commands run as the caller. */
#ifndef SIM_H
#define SIM_H

#include <json-c/json.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define SIM_EXECD_PORT 44772
#define SIM_EGRESS_PORT 18080
#define SIM_MAX_JSON_BODY (1024 * 1024)
#define SIM_PING_INTERVAL_MS 3000
#define SIM_MAX_LINE (4 * 1024 * 1024)
#define SIM_MAX_QUEUED (8 * 1024 * 1024)
#define SIM_MAX_LOG (4 * 1024 * 1024)
#define SIM_MAX_STATE (1024 * 1024)
#define SIM_MAX_CMDS_PER_SANDBOX 256
#define SIM_MAX_PGIDS 4096
#define SIM_ID_BUCKETS 16384 /* sandbox id index (a power of two) */

/* Stored sandbox states (Pending -> Running is derived from ready_ms). */
enum sim_state {
    SIM_PENDING,
    SIM_RUNNING,
    SIM_PAUSED,
    SIM_TERMINATED,
    SIM_FAILED,
    SIM_PAUSING,  /* pause accepted, processes stopped, Paused at transition_due_ms */
    SIM_RESUMING, /* resume accepted, processes still stopped until transition_due_ms */
};

/* Snapshot states, as the server's SnapshotState (Creating -> Ready | Failed). */
enum sim_snap_state {
    SIM_SNAP_CREATING,
    SIM_SNAP_READY,
    SIM_SNAP_FAILED,
};

/* A snapshot: a copy of a sandbox directory under <root>/.snapshots/<id>. */
struct sim_snapshot {
    struct sim_snapshot *next;
    char id[37];
    char sandbox_id[37];
    char *name;
    char *dir;
    json_object *entrypoint; /* the source's entrypoint, restored with the snapshot */
    enum sim_snap_state state;
    char reason[64];
    char message[256];
    int64_t created_ms, transition_ms;
};

/* Kinds of processes the simulator runs. */
enum sim_cmd_kind {
    SIM_CMD_FOREGROUND,
    SIM_CMD_BACKGROUND,
    SIM_CMD_SESSION,
};

/* One queued stream event (already serialised, without the trailing blank line). */
struct sim_event {
    struct sim_event *next;
    char *text;
    size_t len;
};

/* A running or finished process, shared by its reader thread, its stream and its sandbox. */
struct sim_cmd {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;
    char id[33];
    enum sim_cmd_kind kind;
    pid_t pid; /* also the process group id */
    int out_fd, err_fd, state_fd;
    int64_t started_ms, finished_ms, deadline_ms, timeout_ms;
    bool running, timed_out, consumer_gone;
    bool frozen;      /* its sandbox is paused: the stream sends nothing (no pings) */
    bool state_ready; /* session state dump complete (set before the terminal event) */
    int exit_code;    /* -1 when killed by a signal */
    int term_signal;
    struct sim_event *head, *tail;
    size_t queued;
    bool done;     /* no more events will be queued */
    char *trailer; /* bare error object appended without newline (session timeout) */
    char *log;     /* combined output of background commands */
    size_t log_len;
    char *state; /* session state dump (export -p, marker, pwd) */
    size_t state_len;
    char *session_id;
};

/* A bash session: saved exported variables and working directory. */
struct sim_session {
    struct sim_session *next;
    char id[37];
    char *cwd;
    char *exports;
    struct sim_cmd *running;
};

/* A sandbox: a directory plus the processes started in it. */
struct sim_sandbox {
    struct sim_sandbox *next, *prev; /* g_sim.sandboxes, newest first */
    struct sim_sandbox *hnext;       /* its g_sim.by_id bucket */
    char id[37];
    char *dir;
    json_object *image, *entrypoint, *metadata, *env, *platform;
    char *snapshot_id;
    int64_t seq, created_ms, ready_ms, expires_ms, transition_ms;
    int64_t transition_due_ms; /* Pausing -> Paused / Resuming -> Running */
    enum sim_state state;
    char reason[64];
    char message[128];
    struct sim_cmd *cmds[SIM_MAX_CMDS_PER_SANDBOX];
    int ncmds;
    pid_t *pgids;
    int npgids;
    struct sim_session *sessions;
};

/* Global configuration and state. */
struct sim_global {
    char listen_host[64];
    int listen_port;
    char root[4096];
    char *api_key;
    char *execd_header_name, *execd_header_value;
    char *egress_token; /* --egress-token: OPENSANDBOX-EGRESS-AUTH the egress API requires */
    int64_t ready_delay_ms;
    int64_t create_delay_ms; /* --create-delay-ms: POST /sandboxes answers after this long */
    int64_t execd_start_ms;  /* --execd-start-ms: execd answers this long after Running */
    int64_t max_timeout_s;
    int max_sandboxes;
    int max_connections; /* --max-connections: concurrent HTTP connections (default 512) */
    size_t max_upload;
    bool no_pause;      /* --no-pause: pause/resume answer 501 (Kubernetes runtime) */
    bool no_snapshots;  /* --no-snapshots: snapshot creation answers 501 */
    pthread_mutex_t mu; /* protects sandboxes and everything hanging off them */
    struct sim_sandbox *sandboxes, *oldest;    /* newest first; oldest = its last element */
    struct sim_sandbox *by_id[SIM_ID_BUCKETS]; /* the same sandboxes hashed by id */
    int nsandboxes;
    /* Where the last unfiltered list page ended (the sandbox at position page_at_i counted from
     * the newest when page_at_linked sandboxes had been linked), so that the next page starts
     * there instead of walking from the newest: a full listing is O(n), not O(n^2 / page size).
     * Linking adds at the newest end and moves every position one back (linked counts them);
     * unlinking drops the cursor. */
    struct sim_sandbox *page_at;
    long page_at_i;
    unsigned long page_at_linked, linked;
    struct sim_snapshot *snapshots; /* newest first; protected by mu */
    int64_t seq;
    _Atomic int shutting_down;
    _Atomic int list_pages_waiting; /* list requests in list_later_pages_latency_ms now */
    pthread_mutex_t threads_mu;
    pthread_cond_t threads_cv;
    int nthreads;
};

extern struct sim_global g_sim;

/* Per-request context built while MHD delivers the body. */
struct sim_req {
    char *body;
    size_t len, cap, limit;
    bool too_large;
    const char *method;
    const char *url;
    void *ws; /* pending WebSocket relay (sim_proxy.c) until its upgrade callback takes it */
};

/* Fault configuration (see sim_faults.c and README). */
struct sim_faults {
    int64_t lifecycle_latency_ms, execd_latency_ms;
    int64_t list_later_pages_latency_ms; /* list requests for page 2 on wait this long first */
    int lifecycle_status, execd_status;
    int64_t status_count; /* -1 = unlimited */
    bool drop_lifecycle, drop_execd;
    int64_t drop_count;
    int64_t refuse_until_ms;
    int64_t cut_stream_after; /* events; -1 = off */
    int64_t stall_stream_after;
    int64_t drop_create_reply_count;
    int64_t drop_create_reply_skip; /* creates answered before the next drop */
    /* Pause/resume and snapshot switches. */
    bool pause_unsupported, pause_fail, resume_fail, paused_execd_refuse;
    int64_t pause_delay_ms, resume_delay_ms;
    bool snapshot_unsupported, snapshot_fail, restore_fail;
    bool image_pull_fail; /* creates from an image fail as a failed docker pull */
    int64_t snapshot_delay_ms;
};

/* sim_util.c */
int64_t sim_now_ms(void);
void sim_sleep_ms(int64_t ms);
void sim_uuid(char out[37]);
void sim_hex_id(char out[33]);
void sim_iso_time(int64_t ms, char *out, size_t n);
int sim_parse_iso_time(const char *s, int64_t *out_ms);
char *sim_strdup(const char *s);
const char *sim_go_strerror(int e);
void *sim_xmalloc(size_t n);
void *sim_xrealloc(void *p, size_t n);
char *sim_json_event_string(json_object *o);
char *sim_sanitize_utf8(const char *in, size_t len, size_t *out_len);
int sim_mkdir_p(const char *path, mode_t mode);
void sim_thread_started(void);
void sim_thread_finished(void);
void sim_wait_threads(void);

/* sim_http.c */
enum MHD_Result sim_reply_json(struct MHD_Connection *c, unsigned status, json_object *o);
enum MHD_Result sim_reply_error(struct MHD_Connection *c, unsigned status, const char *code,
                                const char *message);
enum MHD_Result sim_reply_empty(struct MHD_Connection *c, unsigned status);
enum MHD_Result sim_reply_text(struct MHD_Connection *c, unsigned status, const char *text);
enum MHD_Result sim_reply_422(struct MHD_Connection *c, const char *type, const char *loc1,
                              const char *loc2, const char *msg);
enum MHD_Result sim_queue(struct MHD_Connection *c, unsigned status, struct MHD_Response *r);
const char *sim_host_for(struct MHD_Connection *c, char *buf, size_t n);
enum MHD_Result sim_access_handler(void *cls, struct MHD_Connection *c, const char *url,
                                   const char *method, const char *version, const char *upload_data,
                                   size_t *upload_data_size, void **con_cls);
void sim_request_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                           enum MHD_RequestTerminationCode toe);
enum MHD_Result sim_accept_policy(void *cls, const struct sockaddr *addr, socklen_t addrlen);

/* sim_lifecycle.c */
enum MHD_Result sim_lifecycle_handle(struct MHD_Connection *c, struct sim_req *r, const char *path);
enum sim_state sim_effective_state(struct sim_sandbox *sb, int64_t now);
struct sim_sandbox *sim_find_locked(const char *id);
void sim_link_locked(struct sim_sandbox *sb);
void sim_unlink_locked(struct sim_sandbox *sb);
void sim_sandbox_kill_all_locked(struct sim_sandbox *sb);
void sim_sandbox_free(struct sim_sandbox *sb);
void sim_expire_locked(int64_t now);
void sim_free_all(void);
void sim_kill_everything(void);

/* sim_pause.c */
void sim_signal_all_locked(struct sim_sandbox *sb, int sig);
enum MHD_Result sim_pause_handle(struct MHD_Connection *c, struct sim_sandbox *sb, bool pause,
                                 int64_t now);
bool sim_wait_unpaused(const char *id);
const char *sim_state_name(enum sim_state st);

/* sim_snapshot.c */
enum MHD_Result sim_snapshot_create(struct MHD_Connection *c, struct sim_req *r,
                                    const char *sandbox_id);
enum MHD_Result sim_snapshots_handle(struct MHD_Connection *c, struct sim_req *r, const char *path);
int sim_snapshot_restore(const char *snap_id, const char *dest_dir, json_object **entrypoint,
                         unsigned *status, const char **code, char *msg, size_t msgn);
void sim_snapshots_free_all(void);
int sim_copy_tree(const char *src, const char *dst, char *err, size_t errn);

/* sim_metrics.c */
enum MHD_Result sim_metrics_handle(struct MHD_Connection *c, const char *path);

/* sim_execd.c */
enum MHD_Result sim_execd_handle(struct MHD_Connection *c, struct sim_req *r, const char *id,
                                 const char *path);
enum MHD_Result sim_egress_handle(struct MHD_Connection *c, struct sim_req *r, const char *id,
                                  const char *path);

/* sim_process.c */
struct sim_cmd *sim_cmd_spawn(enum sim_cmd_kind kind, const char *script, const char *cwd,
                              char **envp, int64_t timeout_ms, const char *session_id, char *err,
                              size_t errn);
void sim_cmd_ref(struct sim_cmd *cmd);
void sim_cmd_unref(struct sim_cmd *cmd);
void sim_cmd_kill(struct sim_cmd *cmd, int sig);
struct MHD_Response *sim_cmd_stream_response(struct sim_cmd *cmd);
char **sim_build_env(struct sim_sandbox *sb, json_object *extra);
void sim_free_env(char **envp);

/* sim_files.c */
enum MHD_Result sim_files_handle(struct MHD_Connection *c, struct sim_req *r,
                                 struct sim_sandbox *sb, const char *path, const char *dir);
int sim_remove_all(const char *path);

/* sim_faults.c */
void sim_faults_get(struct sim_faults *out);
enum MHD_Result sim_faults_handle(struct MHD_Connection *c, struct sim_req *r, const char *path);
/* GET /_sim/stats: create counters (creates_in_flight, creates_in_flight_max, creates_total)
 * and list_pages_waiting. */
enum MHD_Result sim_stats_handle(struct MHD_Connection *c);
bool sim_fault_take_status(bool execd, int *status);
bool sim_fault_take_drop(bool execd);
bool sim_fault_take_drop_create(void);
void sim_faults_init(void);

/* sim_proxy.c */
enum MHD_Result sim_proxy_relay(struct MHD_Connection *c, struct sim_req *r, int port,
                                const char *path);
void sim_proxy_ws_free(void *ws);
void sim_proxy_ws_close_all(void);

#endif
