/* HTTP plumbing: body accumulation, routing, reply helpers, request-level faults. */
#include "sim.h"

#include <stdatomic.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Queue a response (echoing or generating X-Request-ID) and release our reference to it. */
enum MHD_Result sim_queue(struct MHD_Connection *c, unsigned status, struct MHD_Response *r)
{
    if (!r)
        return MHD_NO;
    const char *rid = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Request-ID");
    char gen[33];
    if (!rid || !*rid || strlen(rid) > 200) {
        sim_hex_id(gen);
        rid = gen;
    }
    MHD_add_response_header(r, "X-Request-ID", rid);
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

/* Reply with a JSON document (consumes o). */
enum MHD_Result sim_reply_json(struct MHD_Connection *c, unsigned status, json_object *o)
{
    const char *s =
        json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(s), (void *)s, MHD_RESPMEM_MUST_COPY);
    json_object_put(o);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, "Content-Type", "application/json");
    return sim_queue(c, status, r);
}

/* Reply with {"code","message"} (either may be NULL to omit it). */
enum MHD_Result sim_reply_error(struct MHD_Connection *c, unsigned status, const char *code,
                                const char *message)
{
    json_object *o = json_object_new_object();
    if (code)
        json_object_object_add(o, "code", json_object_new_string(code));
    if (message)
        json_object_object_add(o, "message", json_object_new_string(message));
    return sim_reply_json(c, status, o);
}

/* Reply with an empty body. */
enum MHD_Result sim_reply_empty(struct MHD_Connection *c, unsigned status)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
    return sim_queue(c, status, r);
}

/* Reply with plain text. */
enum MHD_Result sim_reply_text(struct MHD_Connection *c, unsigned status, const char *text)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(text), (void *)text, MHD_RESPMEM_MUST_COPY);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, "Content-Type", "text/plain; charset=utf-8");
    return sim_queue(c, status, r);
}

/* FastAPI-style 422 validation error: {"detail":[{"type","loc","msg"}]}. */
enum MHD_Result sim_reply_422(struct MHD_Connection *c, const char *type, const char *loc1,
                              const char *loc2, const char *msg)
{
    json_object *d = json_object_new_object();
    json_object_object_add(d, "type", json_object_new_string(type));
    json_object *loc = json_object_new_array();
    if (strcmp(loc1, "body") != 0 && strcmp(loc1, "query") != 0 && strcmp(loc1, "path") != 0)
        json_object_array_add(loc, json_object_new_string("body"));
    json_object_array_add(loc, json_object_new_string(loc1));
    if (loc2)
        json_object_array_add(loc, json_object_new_string(loc2));
    json_object_object_add(d, "loc", loc);
    json_object_object_add(d, "msg", json_object_new_string(msg));
    json_object *arr = json_object_new_array();
    json_object_array_add(arr, d);
    json_object *o = json_object_new_object();
    json_object_object_add(o, "detail", arr);
    return sim_reply_json(c, 422, o);
}

/* The host:port clients should use to reach us (Host header, else the bound address). */
const char *sim_host_for(struct MHD_Connection *c, char *buf, size_t n)
{
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Host");
    if (h && *h && strlen(h) < n && !strpbrk(h, "/ \t"))
        snprintf(buf, n, "%s", h);
    else
        snprintf(buf, n, "%s:%d", g_sim.listen_host, g_sim.listen_port);
    return buf;
}

/* Accept policy: implements the "refuse connections" fault by closing right after accept. */
enum MHD_Result sim_accept_policy(void *cls, const struct sockaddr *addr, socklen_t addrlen)
{
    (void)cls;
    (void)addr;
    (void)addrlen;
    struct sim_faults f;
    sim_faults_get(&f);
    return sim_now_ms() < f.refuse_until_ms ? MHD_NO : MHD_YES;
}

/* Body size limit for a request. */
static size_t sim_body_limit(const char *url)
{
    if (strstr(url, "/files/upload") || strstr(url, "/proxy/"))
        return g_sim.max_upload ? g_sim.max_upload : SIZE_MAX; /* 0: no cap, like execd */
    return SIM_MAX_JSON_BODY;
}

/* Split "/sandboxes/<id>/<kind>/rest" into id and rest; returns kind start or NULL. */
static const char *sim_split_sandbox(const char *p, char *id, size_t idn, const char **rest)
{
    if (strncmp(p, "/sandboxes/", 11) != 0)
        return NULL;
    const char *s = p + 11;
    const char *e = strchr(s, '/');
    if (!e || (size_t)(e - s) >= idn || e == s)
        return NULL;
    memcpy(id, s, (size_t)(e - s));
    id[e - s] = 0;
    const char *kind = e + 1;
    const char *k_end = strchr(kind, '/');
    *rest = k_end ? k_end : kind + strlen(kind);
    return kind;
}

/* Route "<port>/rest" of a proxy path (the server proxy /sandboxes/<id>/proxy/<port>, and
 * execd's own reverse proxy /proxy/<port> that the Docker provider's bridge-mode endpoints
 * `<host>:<mapped port>/proxy/<port>` point at): 44772 is execd, 18080 the egress stand-in,
 * anything else is relayed to 127.0.0.1:<port>. */
static enum MHD_Result sim_port_route(struct MHD_Connection *c, struct sim_req *r, const char *id,
                                      const char *ps)
{
    char *end;
    long port = strtol(ps, &end, 10);
    if (end == ps || port < 1 || port > 65535 || (*end && *end != '/'))
        return sim_reply_error(c, 400, "GENERAL::UNKNOWN_ERROR", "invalid port");
    if (port == SIM_EXECD_PORT)
        return sim_execd_handle(c, r, id, end);
    if (port == SIM_EGRESS_PORT)
        return sim_egress_handle(c, r, id, end);
    pthread_mutex_lock(&g_sim.mu);
    struct sim_sandbox *sb = sim_find_locked(id);
    enum sim_state state = sb ? sim_effective_state(sb, sim_now_ms()) : SIM_TERMINATED;
    pthread_mutex_unlock(&g_sim.mu);
    if (!sb)
        return sim_reply_error(c, 404, "DOCKER::SANDBOX_NOT_FOUND", "sandbox not found");
    if (state != SIM_RUNNING)
        return sim_reply_error(c, 502, "GENERAL::UNKNOWN_ERROR",
                               "Could not connect to the backend sandbox: not running");
    return sim_proxy_relay(c, r, (int)port, end);
}

/* Create requests (POST /sandboxes) being answered now, the most ever at once, and all. */
static atomic_int sim_creates_now, sim_creates_max;
static atomic_llong sim_creates_total;
/* The client connections creates arrived on. The daemon runs a thread per connection, so a
 * connection's thread notes its first create in a thread-local flag. A client that keeps its
 * connections sends many creates on few of them. */
static atomic_int sim_create_connections;
static _Thread_local bool sim_conn_has_created;

/* Count this thread's connection when it brings its first create. */
static void sim_note_create_connection(void)
{
    if (!sim_conn_has_created) {
        sim_conn_has_created = true;
        atomic_fetch_add(&sim_create_connections, 1);
    }
}

/* GET /_sim/stats: the create counters (tests assert a client's create concurrency). */
enum MHD_Result sim_stats_handle(struct MHD_Connection *c)
{
    json_object *o = json_object_new_object();
    json_object_object_add(o, "creates_in_flight", json_object_new_int(sim_creates_now));
    json_object_object_add(o, "creates_in_flight_max", json_object_new_int(sim_creates_max));
    json_object_object_add(o, "creates_total", json_object_new_int64(sim_creates_total));
    json_object_object_add(o, "create_connections", json_object_new_int(sim_create_connections));
    json_object_object_add(o, "list_pages_waiting", json_object_new_int(g_sim.list_pages_waiting));
    return sim_reply_json(c, 200, o);
}

static enum MHD_Result sim_route(struct MHD_Connection *c, struct sim_req *r);

/* Route a complete request; a create is counted while it is answered and first waits
 * --create-delay-ms (a backend API that takes time to accept a sandbox). */
static enum MHD_Result sim_dispatch(struct MHD_Connection *c, struct sim_req *r)
{
    const char *p = r->url;
    if (strncmp(p, "/v1/", 4) == 0)
        p += 3;
    if (strcmp(r->method, "POST") != 0 || strcmp(p, "/sandboxes") != 0)
        return sim_route(c, r);
    int now = atomic_fetch_add(&sim_creates_now, 1) + 1;
    int max = atomic_load(&sim_creates_max);
    while (now > max && !atomic_compare_exchange_weak(&sim_creates_max, &max, now))
        ;
    atomic_fetch_add(&sim_creates_total, 1);
    sim_note_create_connection();
    sim_sleep_ms(g_sim.create_delay_ms);
    enum MHD_Result ret = sim_route(c, r);
    atomic_fetch_sub(&sim_creates_now, 1);
    return ret;
}

/* Route a complete request. */
static enum MHD_Result sim_route(struct MHD_Connection *c, struct sim_req *r)
{
    const char *url = r->url;
    if (strncmp(url, "/_sim/", 6) == 0)
        return sim_faults_handle(c, r, url + 5);
    const char *p = url;
    if (strncmp(p, "/v1/", 4) == 0 || strcmp(p, "/v1") == 0)
        p += 3;
    char id[64];
    const char *rest = NULL;
    const char *kind = sim_split_sandbox(p, id, sizeof id, &rest);
    bool execd = kind && (strncmp(kind, "execd", 5) == 0 || strncmp(kind, "proxy/", 6) == 0 ||
                          strncmp(kind, "egress", 6) == 0);
    if (execd && strncmp(kind, "execd", 5) == 0 && kind[5] != '/' && kind[5] != 0)
        execd = false;
    struct sim_faults f;
    sim_faults_get(&f);
    sim_sleep_ms(execd ? f.execd_latency_ms : f.lifecycle_latency_ms);
    if (sim_fault_take_drop(execd))
        return MHD_NO;
    int st;
    if (sim_fault_take_status(execd, &st))
        return sim_reply_error(c, (unsigned)st, "SIM::INJECTED_FAULT", "injected failure");
    if (execd && !sim_wait_unpaused(id))
        return sim_reply_error(c, 502, "GENERAL::UNKNOWN_ERROR",
                               "Could not connect to the backend sandbox: sandbox is paused");
    if (execd && strncmp(kind, "execd", 5) == 0 && strncmp(rest, "/proxy/", 7) == 0)
        return sim_port_route(c, r, id, rest + 7); /* execd's own /proxy/<port> route */
    if (execd && strncmp(kind, "execd", 5) == 0)
        return sim_execd_handle(c, r, id, rest);
    if (execd && strncmp(kind, "egress", 6) == 0)
        return sim_egress_handle(c, r, id, rest);
    if (execd)
        return sim_port_route(c, r, id, kind + 6); /* server proxy /sandboxes/<id>/proxy/<port> */
    return sim_lifecycle_handle(c, r, p);
}

/* MHD access handler: accumulates the body (bounded) and dispatches once complete. */
enum MHD_Result sim_access_handler(void *cls, struct MHD_Connection *c, const char *url,
                                   const char *method, const char *version, const char *upload_data,
                                   size_t *upload_data_size, void **con_cls)
{
    (void)cls;
    (void)version;
    struct sim_req *r = *con_cls;
    if (!r) {
        r = calloc(1, sizeof *r);
        if (!r)
            return MHD_NO;
        r->limit = sim_body_limit(url);
        r->method = method;
        r->url = url;
        *con_cls = r;
        return MHD_YES;
    }
    if (*upload_data_size > 0) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        if (r->too_large || n > r->limit - r->len) {
            r->too_large = true;
            return MHD_YES;
        }
        if (r->len + n + 1 > r->cap) {
            size_t cap = r->cap ? r->cap : 4096;
            while (cap < r->len + n + 1)
                cap *= 2;
            r->body = sim_xrealloc(r->body, cap);
            r->cap = cap;
        }
        memcpy(r->body + r->len, upload_data, n);
        r->len += n;
        r->body[r->len] = 0;
        return MHD_YES;
    }
    if (r->too_large)
        return sim_reply_error(c, 413, "GENERAL::UNKNOWN_ERROR", "request body too large");
    if (!r->body) {
        r->body = sim_xmalloc(1);
        r->body[0] = 0;
    }
    return sim_dispatch(c, r);
}

/* Free the per-request context. */
void sim_request_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                           enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)c;
    (void)toe;
    struct sim_req *r = *con_cls;
    if (!r)
        return;
    sim_proxy_ws_free(r->ws); /* a WebSocket relay whose upgrade never happened */
    free(r->body);
    free(r);
    *con_cls = NULL;
}
