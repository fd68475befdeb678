/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file test_os_http.c
 * @brief Request-shape tests of the plugin against a scripted loopback HTTP server:
 *        create body and headers, lost-reply adoption, status mapping, kill, execd
 *        routing (endpoint headers, no API key), streamed exec and proxy targets.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>
#include <curl/curl.h>
#include <json-c/json.h>

#include "../os_internal.h"
#include "fake_server.h"
#include "mock_host.h"

static int port;
static char endpoint[64];
static const char *scenario = "";

/** Scripted upstream: lifecycle routes under /v1, execd under /proxy/44772. */
static void handler(const struct fake_req *rq, struct fake_resp *r)
{
    static char buf[1024];
    const char *t = rq->target;
    if (strcmp(rq->method, "POST") == 0 && strcmp(t, "/v1/sandboxes") == 0) {
        if (strcmp(scenario, "lost") == 0) {
            r->no_reply = 1;
            return;
        }
        r->status = 202;
        r->body = "{\"id\":\"osb-1\",\"status\":{\"state\":\"Pending\"}}";
    } else if (strncmp(t, "/v1/sandboxes?metadata=", 23) == 0) {
        r->body = strcmp(scenario, "lost") == 0
                      ? "{\"items\":[{\"id\":\"osb-9\",\"status\":{\"state\":\"Running\"}}],"
                        "\"pagination\":{\"hasNextPage\":false}}"
                      : "{\"items\":[],\"pagination\":{\"hasNextPage\":false}}";
    } else if (strcmp(rq->method, "GET") == 0 && strcmp(t, "/v1/sandboxes/osb-failed") == 0) {
        r->body = "{\"id\":\"osb-failed\",\"status\":{\"state\":\"Failed\",\"reason\":"
                  "\"PROVISIONING_ERROR\",\"message\":\"boom\"}}";
    } else if (strcmp(rq->method, "GET") == 0 && strcmp(t, "/v1/sandboxes/osb-term") == 0) {
        r->body = "{\"id\":\"osb-term\",\"status\":{\"state\":\"Terminated\"}}";
    } else if (strcmp(rq->method, "GET") == 0 && strcmp(t, "/v1/sandboxes/osb-gone") == 0) {
        r->status = 404;
        r->body = "{\"code\":\"DOCKER::SANDBOX_NOT_FOUND\",\"message\":\"gone\"}";
    } else if (strcmp(rq->method, "DELETE") == 0 && strncmp(t, "/v1/sandboxes/", 14) == 0) {
        r->status = strcmp(t, "/v1/sandboxes/osb-gone") == 0 ? 404 : 204;
    } else if (strcmp(t, "/v1/sandboxes/osb-1/endpoints/44772?use_server_proxy=false") == 0 &&
               strcmp(scenario, "dead-execd") == 0) {
        /* execd moved away: nothing listens on port 1 */
        r->body = "{\"endpoint\":\"127.0.0.1:1/proxy/44772\",\"headers\":{}}";
    } else if (strcmp(t, "/v1/sandboxes/osb-1/endpoints/44772?use_server_proxy=false") == 0) {
        snprintf(buf, sizeof buf,
                 "{\"endpoint\":\"127.0.0.1:%d/proxy/44772\",\"headers\":{\"X-Sandbox-Token\":"
                 "\"abc\"}}",
                 port);
        r->body = buf;
    } else if (strcmp(t, "/v1/sandboxes/osb-1/endpoints/9000?use_server_proxy=false") == 0) {
        r->body = "{\"endpoint\":\"https://proxy.example/base?endpoint_token=abc\","
                  "\"headers\":{\"X-Endpoint\":\"yes\"}}";
    } else if (strcmp(t, "/proxy/44772/command") == 0) {
        r->stream = 1;
        r->body =
            "{\"type\":\"init\",\"text\":\"c1\"}\n\n{\"type\":\"stdout\",\"text\":\"out\"}\n\n"
            "{\"type\":\"stderr\",\"text\":\"err\"}\n\n{\"type\":\"error\",\"error\":{\"ename\":"
            "\"CommandExecError\",\"evalue\":\"7\",\"traceback\":[\"exit status 7\"]}}\n\n";
    } else if (strcmp(rq->method, "POST") == 0 && strcmp(t, "/proxy/44772/session") == 0) {
        r->body = "{\"session_id\":\"s1\"}";
    } else if (strcmp(t, "/proxy/44772/session/s1/run") == 0) {
        r->stream = 1; /* the init command's stream stalls after its init event */
        r->body = "{\"type\":\"init\",\"text\":\"r1\"}\n\n";
        r->stall_ms = 1500;
    } else if (strcmp(rq->method, "DELETE") == 0 && strcmp(t, "/proxy/44772/session/s1") == 0) {
        r->body = "{}";
    } else if (strncmp(scenario, "pages", 5) == 0 && strncmp(t, "/v1/sandboxes?page=", 19) == 0) {
        /* Five pages of one sandbox each: "pages-counted" says so (totalPages 5) but the listing
         * shrank and page 3 is the last; "pages-uncounted" gives no count. */
        int pg = atoi(t + 19);
        int counted = strcmp(scenario, "pages-counted") == 0;
        snprintf(buf, sizeof buf,
                 "{\"items\":[{\"id\":\"osb-p%d\",\"metadata\":{\"rock_sandbox_id\":\"sbx-p%d\"},"
                 "\"status\":{\"state\":\"Running\",\"lastTransitionAt\":"
                 "\"2020-01-01T00:00:00.000Z\"}}],\"pagination\":{%s\"hasNextPage\":%s}}",
                 pg, pg, counted ? "\"totalPages\":5," : "", pg < 3 ? "true" : "false");
        r->body = pg <= 5 ? buf : "{\"items\":[],\"pagination\":{\"hasNextPage\":false}}";
    } else if (strcmp(t, "/v1/sandboxes?page=1&pageSize=200") == 0 ||
               strcmp(t, "/v1/sandboxes?page=2&pageSize=200") == 0) {
        /* A listing of two pages: osb-new turned Running a moment ago (its readiness is checked),
         * osb-old long ago (trusted as it is), osb-slow a moment ago too. */
        char now[32];
        time_t tt = time(NULL);
        strftime(now, sizeof now, "%Y-%m-%dT%H:%M:%S.000Z", gmtime(&tt));
        if (t[19] == '1')
            snprintf(buf, sizeof buf,
                     "{\"items\":[{\"id\":\"osb-new\",\"metadata\":{\"rock_sandbox_id\":"
                     "\"sbx-new\"},\"status\":{\"state\":\"Running\",\"lastTransitionAt\":"
                     "\"%s\"}},{\"id\":\"osb-old\",\"metadata\":{\"rock_sandbox_id\":\"sbx-old\"},"
                     "\"status\":{\"state\":\"Running\",\"lastTransitionAt\":"
                     "\"2020-01-01T00:00:00.000Z\"}}],\"pagination\":{\"hasNextPage\":true}}",
                     now);
        else
            snprintf(buf, sizeof buf,
                     "{\"items\":[{\"id\":\"osb-slow\",\"metadata\":{\"rock_sandbox_id\":"
                     "\"sbx-slow\"},\"status\":{\"state\":\"Running\",\"lastTransitionAt\":"
                     "\"%s\"}}],\"pagination\":{\"hasNextPage\":false}}",
                     now);
        r->body = buf;
    } else if (strncmp(t, "/proxy/44772/files/info?path=", 29) == 0) {
        r->status = 404;
        r->body = "{\"code\":\"FILE_NOT_FOUND\",\"message\":\"file not found\"}";
    } else {
        r->status = 599;
    }
}

/** Start the fake upstream and an instance configured against it. */
static void *start(const char *use_proxy)
{
    mock_reset();
    port = fake_start(handler);
    assert_true(port > 0);
    snprintf(endpoint, sizeof endpoint, "127.0.0.1:%d", port);
    static struct mock_cfg_entry e[6];
    e[0] = (struct mock_cfg_entry){"endpoint", endpoint};
    e[1] = (struct mock_cfg_entry){"protocol", "http"};
    e[2] = (struct mock_cfg_entry){"api_key", "secret"};
    e[3] = (struct mock_cfg_entry){"use_server_proxy", use_proxy};
    e[4] = (struct mock_cfg_entry){"image_registry_prefix", "registry.example.com/library"};
    e[5] = (struct mock_cfg_entry){NULL, NULL};
    static struct rk_cfg cfg;
    cfg = (struct rk_cfg){e, os_config_keys};
    struct os_inst *inst = NULL;
    assert_int_equal(os_config_init(&mock_host, &cfg, &inst), RK_OK);
    return inst;
}

/** Stop everything. */
static void stop(void *inst)
{
    os_config_free(inst);
    fake_stop();
    mock_reset();
    scenario = "";
}

/** String member of a JSON object path a.b. */
static const char *jget(json_object *o, const char *a, const char *b)
{
    json_object *v = NULL;
    if (!json_object_object_get_ex(o, a, &v))
        return NULL;
    if (b && !json_object_object_get_ex(v, b, &v))
        return NULL;
    return json_object_get_string(v);
}

/** create: body mapping and lifecycle headers. */
static void test_create_body(void **state)
{
    (void)state;
    void *inst = start("false");
    struct rk_kv env[] = {{"WORKSPACE", "/workspace"}};
    struct rk_create_spec spec = {.sandbox_id = "sbx-2",
                                  .image = "python:3.11",
                                  .cpus = 4,
                                  .memory = "8g",
                                  .env = env,
                                  .env_len = 1,
                                  .user_id = "u1"};
    struct rk_created out = {0};
    assert_int_equal(os_lc_create(inst, mock_call(), &spec, &out), RK_OK);
    assert_string_equal(out.upstream_id, "osb-1");
    assert_string_equal(out.image, "registry.example.com/library/python:3.11");
    assert_int_equal(fake_count(), 1);
    const struct fake_req *rq = fake_get(0);
    char h[256];
    assert_string_equal(fake_header(rq, "OPEN-SANDBOX-API-KEY", h, sizeof h), "secret");
    assert_string_equal(fake_header(rq, "X-Request-ID", h, sizeof h), "test-request-id");
    json_object *o = json_tokener_parse(rq->body);
    assert_non_null(o);
    assert_string_equal(jget(o, "image", "uri"), "registry.example.com/library/python:3.11");
    assert_string_equal(jget(o, "resourceLimits", "cpu"), "4");
    assert_string_equal(jget(o, "resourceLimits", "memory"), "8Gi");
    assert_string_equal(jget(o, "env", "WORKSPACE"), "/workspace");
    assert_string_equal(jget(o, "metadata", "rock_sandbox_id"), "sbx-2");
    assert_string_equal(jget(o, "metadata", "user_id"), "u1");
    assert_string_equal(jget(o, "metadata", "experiment_id"), "default");
    assert_string_equal(jget(o, "metadata", "namespace"), "default");
    json_object *md, *ep, *to;
    assert_true(json_object_object_get_ex(o, "metadata", &md));
    assert_int_equal(json_object_object_length(md), 4);
    assert_true(json_object_object_get_ex(o, "entrypoint", &ep));
    assert_string_equal(
        json_object_to_json_string_ext(ep, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE),
        "[\"tail\",\"-f\",\"/dev/null\"]");
    assert_true(json_object_object_get_ex(o, "timeout", &to));
    assert_true(json_object_is_type(to, json_type_int));
    assert_int_equal(json_object_get_int64(to), 86400);
    json_object_put(o);
    stop(inst);
}

/** A member of a request body as compact JSON ("" when absent), copied into out. */
static const char *jmember(json_object *o, const char *key, char *out, size_t outlen)
{
    json_object *v = NULL;
    out[0] = '\0';
    if (json_object_object_get_ex(o, key, &v))
        snprintf(out, outlen, "%s",
                 json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN |
                                                       JSON_C_TO_STRING_NOSLASHESCAPE));
    return out;
}

/** restore_snapshot: the sandbox is made from the snapshot with exactly what a create of the same
 *  spec asks for (resources, the ROCK metadata the lookups filter on, lifetime, secureAccess),
 *  and without the create's image, entrypoint and env. */
static void test_restore_body_same_as_create(void **state)
{
    (void)state;
    void *inst = start("false");
    struct rk_kv env[] = {{"WORKSPACE", "/workspace"}};
    struct rk_create_spec spec = {.sandbox_id = "sbx-3",
                                  .image = "python:3.11",
                                  .cpus = 1.5,
                                  .limit_cpus = 3,
                                  .memory = "512m",
                                  .env = env,
                                  .env_len = 1,
                                  .user_id = "u7",
                                  .experiment_id = "exp",
                                  .namespace_name = "ns"};
    struct rk_created out = {0};
    assert_int_equal(os_lc_create(inst, mock_call(), &spec, &out), RK_OK);
    assert_int_equal(os_restore_snapshot(inst, mock_call(), &spec, "snap-1", &out), RK_OK);
    assert_string_equal(out.upstream_id, "osb-1");
    assert_int_equal(fake_count(), 2);
    json_object *c = json_tokener_parse(fake_get(0)->body);
    json_object *r = json_tokener_parse(fake_get(1)->body);
    assert_non_null(c);
    assert_non_null(r);
    const char *same[] = {"resourceLimits", "metadata", "timeout", "secureAccess"};
    for (size_t i = 0; i < sizeof same / sizeof same[0]; i++) {
        char a[512], b[512];
        assert_string_not_equal(jmember(c, same[i], a, sizeof a), "");
        assert_string_equal(jmember(r, same[i], b, sizeof b), a);
    }
    char v[512];
    assert_string_equal(jmember(r, "snapshotId", v, sizeof v), "\"snap-1\"");
    assert_string_equal(jmember(r, "image", v, sizeof v), "");
    assert_string_equal(jmember(r, "entrypoint", v, sizeof v), "");
    assert_string_equal(jmember(r, "env", v, sizeof v), "");
    assert_string_equal(jmember(c, "metadata", v, sizeof v),
                        "{\"rock_sandbox_id\":\"sbx-3\",\"user_id\":\"u7\",\"experiment_id\":"
                        "\"exp\",\"namespace\":\"ns\"}");
    json_object_put(c);
    json_object_put(r);
    stop(inst);
}

/** create: a lost reply is resolved by listing metadata rock_sandbox_id. */
static void test_create_lost_reply(void **state)
{
    (void)state;
    void *inst = start("false");
    scenario = "lost";
    struct rk_create_spec spec = {.sandbox_id = "sbx-7", .image = "python:3.11", .cpus = 1};
    struct rk_created out = {0};
    assert_int_equal(os_lc_create(inst, mock_call(), &spec, &out), RK_OK);
    assert_string_equal(out.upstream_id, "osb-9");
    assert_int_equal(fake_count(), 2);
    assert_string_equal(fake_get(1)->target,
                        "/v1/sandboxes?metadata=rock_sandbox_id%3Dsbx-7&page=1&pageSize=200");
    stop(inst);
}

/** Query injection: a crafted ROCK id in the metadata lookup (the clean-up path that kills
 *  what it finds) stays one escaped value, so it cannot select another sandbox. */
static void test_lookup_escapes_crafted_id(void **state)
{
    (void)state;
    void *inst = start("false");
    scenario = "";
    struct rk_sandbox_ref ref = {.sandbox_id = "x&rock_sandbox_id=victim"};
    assert_int_equal(os_lc_destroy(inst, mock_call(), &ref), RK_OK);
    assert_int_equal(fake_count(), 1); /* the list only: nothing matched, nothing killed */
    assert_string_equal(fake_get(0)->target, "/v1/sandboxes?metadata="
                                             "rock_sandbox_id%3Dx%2526rock_sandbox_id%253Dvictim"
                                             "&page=1&pageSize=200");
    stop(inst);
}

/** status: Failed with reason, Terminated, 404; lookup without upstream id. */
static void test_status(void **state)
{
    (void)state;
    void *inst = start("false");
    struct rk_status_info si;
    struct rk_sandbox_ref ref = {.sandbox_id = "sbx-1", .upstream_id = "osb-failed"};
    assert_int_equal(os_lc_status(inst, mock_call(), &ref, &si), RK_OK);
    assert_int_equal(si.state, RK_STATE_STOPPED);
    assert_true(si.failed);
    assert_string_equal(si.reason, "PROVISIONING_ERROR: boom");
    ref.upstream_id = "osb-term";
    assert_int_equal(os_lc_status(inst, mock_call(), &ref, &si), RK_OK);
    assert_int_equal(si.state, RK_STATE_DELETED);
    assert_false(si.failed);
    ref.upstream_id = "osb-gone";
    assert_int_equal(os_lc_status(inst, mock_call(), &ref, &si), RK_E_NOT_FOUND);
    assert_non_null(strstr(mock_last_error, "opensandbox get_state failed for osb-gone: HTTP 404"));
    ref.upstream_id = NULL;
    assert_int_equal(os_lc_status(inst, mock_call(), &ref, &si), RK_E_NOT_FOUND);
    stop(inst);
}

/** destroy: 404 and 204 both succeed. */
static void test_destroy(void **state)
{
    (void)state;
    void *inst = start("false");
    struct rk_sandbox_ref ref = {.sandbox_id = "sbx-1", .upstream_id = "osb-gone"};
    assert_int_equal(os_lc_destroy(inst, mock_call(), &ref), RK_OK);
    ref.upstream_id = "osb-1";
    assert_int_equal(os_lc_destroy(inst, mock_call(), &ref), RK_OK);
    assert_string_equal(fake_get(1)->method, "DELETE");
    stop(inst);
}

/** Test sink collecting both streams. */
static rk_status sink_write(void *ctx, enum rk_stream s, const char *b, size_t n)
{
    struct os_sb *sbs = ctx;
    os_sb_putn(&sbs[s == RK_STREAM_STDERR ? 1 : 0], b, n);
    return RK_OK;
}

/** exec: endpoint discovery, endpoint headers, no API key to execd, body shape, outcome. */
static void test_exec_routing(void **state)
{
    (void)state;
    void *inst = start("false");
    struct os_sb out[2] = {{0}, {0}};
    struct rk_sink sink = {sink_write, out};
    struct rk_kv env[] = {{"A", "B"}};
    struct rk_exec_req req = {
        .command = "secret-command", .cwd = "/work", .env = env, .env_len = 1, .timeout_ms = 9000};
    struct rk_sandbox_ref ref = {.sandbox_id = "sbx-1", .upstream_id = "osb-1"};
    struct rk_exec_res res;
    assert_int_equal(os_exec(inst, mock_call(), &ref, &req, &sink, &res), RK_OK);
    assert_string_equal(out[0].p, "out\n");
    assert_string_equal(out[1].p, "err\n");
    assert_true(res.has_exit_code);
    assert_int_equal(res.exit_code, 7);
    assert_false(res.timed_out);
    assert_int_equal(fake_count(), 2);
    const struct fake_req *ep = fake_get(0), *cmd = fake_get(1);
    char h[256];
    assert_string_equal(ep->target, "/v1/sandboxes/osb-1/endpoints/44772?use_server_proxy=false");
    assert_string_equal(fake_header(ep, "OPEN-SANDBOX-API-KEY", h, sizeof h), "secret");
    assert_string_equal(cmd->target, "/proxy/44772/command");
    assert_null(fake_header(cmd, "OPEN-SANDBOX-API-KEY", h, sizeof h));
    assert_string_equal(fake_header(cmd, "X-Sandbox-Token", h, sizeof h), "abc");
    assert_string_equal(fake_header(cmd, "X-Request-ID", h, sizeof h), "test-request-id");
    json_object *o = json_tokener_parse(cmd->body), *to;
    assert_string_equal(jget(o, "command", NULL), "secret-command");
    assert_string_equal(jget(o, "cwd", NULL), "/work");
    assert_string_equal(jget(o, "envs", "A"), "B");
    assert_true(json_object_object_get_ex(o, "timeout", &to));
    assert_true(json_object_is_type(to, json_type_int));
    assert_int_equal(json_object_get_int64(to), 9000);
    json_object_put(o);
    os_sb_free(&out[0]);
    os_sb_free(&out[1]);

    /* A second call reuses the cached endpoint; file_stat maps FILE_NOT_FOUND to exists=0. */
    struct rk_file_info fi;
    assert_int_equal(os_file_stat(inst, mock_call(), &ref, "/tmp/a b+c", &fi), RK_OK);
    assert_false(fi.exists);
    assert_int_equal(fake_count(), 3);
    assert_string_equal(fake_get(2)->target, "/proxy/44772/files/info?path=%2Ftmp%2Fa%20b%2Bc");
    stop(inst);
}

/** exec_start (ABI 1.2): the stream runs on the loop and the end arrives through call_done with
 *  the blocking form's outcome; a cached endpoint that refuses connections is resolved again
 *  (on the loop's helper thread) and the command is sent to the new one. */
static void test_exec_start(void **state)
{
    (void)state;
    void *inst = start("false");
    struct os_sb out[2] = {{0}, {0}};
    struct rk_sink sink = {sink_write, out};
    struct rk_exec_req req = {.command = "x", .timeout_ms = 9000};
    struct rk_sandbox_ref ref = {.sandbox_id = "sbx-1", .upstream_id = "osb-1"};
    struct rk_exec_res res;
    int n = 0;
    /* A freshly resolved execd that refuses the connection: no second attempt, the end is
     * reported as an unreachable upstream (and the endpoint leaves the cache). */
    scenario = "dead-execd";
    assert_int_equal(os_exec_start(inst, mock_call(), &ref, &req, &sink, &res), RK_OK);
    assert_int_equal(mock_wait_done(&n), RK_E_UNAVAILABLE);
    assert_int_equal(n, 1);
    assert_int_equal(fake_count(), 1);
    /* The dead endpoint cached by another call; execd has moved on meanwhile. */
    struct os_endpoint ep;
    assert_int_equal(os_lc_endpoint(inst, mock_call(), "osb-1", OS_EXECD_PORT, 1, "test", &ep),
                     RK_OK);
    scenario = "";
    assert_int_equal(os_exec_start(inst, mock_call(), &ref, &req, &sink, &res), RK_OK);
    assert_int_equal(mock_wait_done(&n), RK_OK);
    assert_int_equal(n, 1);
    assert_string_equal(out[0].p, "out\n");
    assert_string_equal(out[1].p, "err\n");
    assert_true(res.has_exit_code);
    assert_int_equal(res.exit_code, 7);
    /* resolved once more after the refused connection, then the command went to execd */
    assert_int_equal(fake_count(), 4);
    assert_string_equal(fake_get(2)->target,
                        "/v1/sandboxes/osb-1/endpoints/44772?use_server_proxy=false");
    assert_string_equal(fake_get(3)->target, "/proxy/44772/command");
    os_sb_free(&out[0]);
    os_sb_free(&out[1]);
    stop(inst);
}

/** proxy_target: endpoint with scheme, path and query kept; headers passed; no API key. */
static void test_proxy_target(void **state)
{
    (void)state;
    void *inst = start("false");
    struct rk_sandbox_ref ref = {.sandbox_id = "sbx-1", .upstream_id = "osb-1"};
    struct rk_proxy_target pt;
    assert_int_equal(os_proxy_target(inst, mock_call(), &ref, 9000, RK_PROXY_HTTP, &pt), RK_OK);
    assert_string_equal(pt.base_url, "https://proxy.example/base?endpoint_token=abc");
    assert_int_equal(pt.headers_len, 1);
    assert_string_equal(pt.headers[0].key, "X-Endpoint");
    assert_string_equal(pt.headers[0].value, "yes");
    assert_int_equal(os_proxy_target(inst, mock_call(), &ref, 9000, RK_PROXY_TCP, &pt),
                     RK_E_UNSUPPORTED);
    stop(inst);
}

/** A session's init that runs out of the call's deadline (set by the core) reports the init
 *  timeout, and the half-opened session is still deleted after the deadline. */
static void test_session_init_deadline(void **state)
{
    (void)state;
    void *inst = start("false");
    struct rk_sandbox_ref ref = {.sandbox_id = "sbx", .upstream_id = "osb-1"};
    struct rk_kv env[] = {{"A", "1"}};
    struct rk_session_opts opts = {.env = env, .env_len = 1, .startup_timeout_ms = 100};
    struct rk_session_opened out = {0};
    mock_deadline_ms = mock_host.now_ms() + 300;
    assert_int_equal(os_session_open(inst, mock_call(), &ref, &opts, &out), RK_E_TIMEOUT);
    assert_string_equal(mock_last_error,
                        "Timeout (0.1s) exceeded while initializing OpenSandbox session");
    int n = fake_count();
    assert_true(n >= 4);
    assert_string_equal(fake_get(n - 1)->method, "DELETE");
    assert_string_equal(fake_get(n - 1)->target, "/proxy/44772/session/s1");
    char h[64];
    assert_string_equal(fake_header(fake_get(n - 1), "X-Request-ID", h, sizeof h),
                        "test-request-id");
    stop(inst);
}

/** What a list pass reported: one entry per sandbox, in the order reported. */
struct listed {
    char rock_id[16], upstream_id[16];
    enum rk_state state;
};
static struct listed listed[8];
static int nlisted;

static void collect_listed(void *ctx, const char *rock_id, const struct rk_status_info *info)
{
    (void)ctx;
    assert_true(nlisted < 8);
    snprintf(listed[nlisted].rock_id, sizeof listed[nlisted].rock_id, "%s", rock_id);
    snprintf(listed[nlisted].upstream_id, sizeof listed[nlisted].upstream_id, "%s",
             info->upstream_id);
    listed[nlisted++].state = info->state;
}

/** A readiness check the test answers at once for osb-new (the check ran while the later pages
 *  were read) and never for the others. */
static void check_answers_new(struct os_inst *inst, const char *rock_id, const char *osid,
                              const char *since)
{
    /* The check carries the sandbox's ROCK id: its answer is reported to the core by it. */
    assert_string_equal(rock_id, strcmp(osid, "osb-new") == 0    ? "sbx-new"
                                 : strcmp(osid, "osb-slow") == 0 ? "sbx-slow"
                                                                 : "?");
    if (strcmp(osid, "osb-new") == 0)
        os_ep_ready_note(inst, osid, since);
}

/** list: a sandbox that turned Running a moment ago is reported after the last page, running
 *  when its readiness check answered during the pass and pending when it did not; one that turned
 *  Running long ago is reported as it is, in page order. */
static void test_list_reports_checked_after_last_page(void **state)
{
    (void)state;
    struct os_inst *inst = start("false");
    inst->execd_check = check_answers_new;
    nlisted = 0;
    assert_int_equal(os_lc_list(inst, mock_call(), collect_listed, NULL), RK_OK);
    assert_int_equal(nlisted, 3);
    assert_string_equal(listed[0].rock_id, "sbx-old");
    assert_int_equal(listed[0].state, RK_STATE_RUNNING);
    assert_string_equal(listed[1].rock_id, "sbx-new");
    assert_string_equal(listed[1].upstream_id, "osb-new");
    assert_int_equal(listed[1].state, RK_STATE_RUNNING);
    assert_string_equal(listed[2].rock_id, "sbx-slow");
    assert_string_equal(listed[2].upstream_id, "osb-slow");
    assert_int_equal(listed[2].state, RK_STATE_PENDING);
    /* The next pass: osb-new is known to answer, so it is reported in page order. */
    nlisted = 0;
    assert_int_equal(os_lc_list(inst, mock_call(), collect_listed, NULL), RK_OK);
    assert_string_equal(listed[0].rock_id, "sbx-new");
    assert_int_equal(listed[0].state, RK_STATE_RUNNING);
    stop(inst);
}

/** The list pages requested of the fake server so far. */
static int page_requests(void)
{
    int n = 0;
    for (int i = 0; i < fake_count(); i++)
        n += strncmp(fake_get(i)->target, "/v1/sandboxes?page=", 19) == 0;
    return n;
}

/** list: the pages after the first are requested while the earlier ones are read (as many as
 *  the first page counts, OS_LIST_WINDOW at a time), read in order, and the pass ends at the
 *  page that says it is the last even when the count promised more; without a count the pages
 *  are requested one after the other. */
static void test_list_requests_pages_ahead(void **state)
{
    (void)state;
    struct os_inst *inst = start("false");
    scenario = "pages-counted";
    nlisted = 0;
    assert_int_equal(os_lc_list(inst, mock_call(), collect_listed, NULL), RK_OK);
    assert_int_equal(nlisted, 3);
    for (int i = 0; i < 3; i++) {
        char want[32];
        snprintf(want, sizeof want, "sbx-p%d", i + 1);
        assert_string_equal(listed[i].rock_id, want);
        assert_int_equal(listed[i].state, RK_STATE_RUNNING);
    }
    /* Pages 4 and 5 were asked for before page 3 said it was the last. */
    assert_int_equal(page_requests(), 5);
    stop(inst);

    inst = start("false");
    scenario = "pages-uncounted";
    nlisted = 0;
    assert_int_equal(os_lc_list(inst, mock_call(), collect_listed, NULL), RK_OK);
    assert_int_equal(nlisted, 3);
    assert_string_equal(listed[2].rock_id, "sbx-p3");
    assert_int_equal(page_requests(), 3);
    scenario = "";
    stop(inst);
}

/** What a list page's reader gave: its items as one text, and whether it was read in place. */
static char *page_items(const char *body, size_t len, int *scanned, int *more)
{
    struct os_lc_page pg;
    if (os_lc_page_open(&pg, body, len, "rock_sandbox_id") != 0)
        return NULL;
    struct os_sb sb = {0};
    struct os_lc_item it;
    while (os_lc_page_next(&pg, &it) == 1) {
        const char *f[] = {it.id, it.rock_id, it.state, it.reason, it.message, it.since};
        for (size_t i = 0; i < 6; i++)
            os_sb_printf(&sb, "%s|", f[i] ? f[i] : "(null)");
        os_sb_puts(&sb, "\n");
    }
    *scanned = pg.scanned;
    *more = pg.more | (int)(pg.total_pages << 1); /* both compared */
    os_lc_page_close(&pg);
    char *out = os_sb_take(&sb);
    return out ? out : strdup("");
}

/** The same page read both ways: in place, and parsed (json-c stops at the end of the object, so
 *  a byte after it makes the scanner refuse the text and leaves json-c's reading unchanged).
 *  1 when the page itself was read in place. */
static int expect_same_items(const char *body, size_t len, int want_scanned)
{
    char *forced = malloc(len + 2);
    assert_non_null(forced);
    memcpy(forced, body, len);
    forced[len] = 'x';
    forced[len + 1] = 0;
    int s1 = 0, s2 = 0, m1 = 0, m2 = 0;
    char *a = page_items(body, len, &s1, &m1), *b = page_items(forced, len + 1, &s2, &m2);
    if (want_scanned >= 0)
        assert_int_equal(s1, want_scanned);
    assert_int_equal(s2, 0);
    if (!a || !b) {
        assert_null(a); /* not a list page: neither reading finds one */
        assert_null(b);
    } else {
        assert_string_equal(a, b);
        assert_int_equal(m1, m2);
    }
    free(a);
    free(b);
    free(forced);
    return s1;
}

/** A list page is read in place when it is of the lifecycle server's compact form, and gives the
 *  items json-c gives; under random damage whatever is read in place equals json-c's reading. */
static void test_list_page_in_place_same_as_parsed(void **state)
{
    (void)state;
    static const char page[] =
        "{\"items\":[{\"id\":\"osb-1\",\"image\":{\"uri\":\"python:3.11\"},\"entrypoint\":[\"/bin/"
        "sh\",\"-c\",\"sleep 1\"],\"metadata\":{\"rock_sandbox_id\":\"sbx-1\",\"team\":\"r\\/l\"},"
        "\"status\":{\"state\":\"Running\",\"reason\":\"Ready\",\"message\":\"up \\\"now\\\"\\n\","
        "\"lastTransitionAt\":\"2026-12-07T10:00:00Z\"},\"resourceLimits\":{\"cpu\":\"1\","
        "\"memory\":\"2Gi\"},\"createdAt\":\"2026-12-07T09:59:58Z\",\"expiresAt\":null},"
        "\"stray\",7,{\"id\":\"osb-2\",\"metadata\":\"not an object\",\"status\":{\"state\":"
        "\"Pending\"}},{\"id\":\"osb-3\",\"metadata\":{\"rock_sandbox_id\":\"sbx-\xc3\xa9\"},"
        "\"status\":{\"state\":\"Failed\",\"reason\":7,\"message\":\"no image\"}},{\"id\":5,"
        "\"metadata\":{\"rock_sandbox_id\":\"sbx-4\"}}],\"pagination\":{\"page\":1,\"pageSize\":"
        "200,\"totalItems\":4,\"totalPages\":2,\"hasNextPage\":true}}";
    int scanned = 0, more = 0;
    char *items = page_items(page, strlen(page), &scanned, &more);
    assert_non_null(items);
    assert_int_equal(scanned, 1);
    assert_int_equal(more, 1 | 2 << 1); /* hasNextPage, totalPages 2 */
    assert_string_equal(items, "osb-1|sbx-1|Running|Ready|up \"now\"\n|2026-12-07T10:00:00Z|\n"
                               "(null)|(null)|(null)|(null)|(null)|(null)|\n"
                               "(null)|(null)|(null)|(null)|(null)|(null)|\n"
                               "osb-2|(null)|Pending|(null)|(null)|(null)|\n"
                               "osb-3|sbx-\xc3\xa9|Failed|(null)|no image|(null)|\n"
                               "(null)|sbx-4|(null)|(null)|(null)|(null)|\n");
    free(items);
    expect_same_items(page, strlen(page), 1);
    /* What the scanner leaves to json-c: whitespace, \u escapes, repeated names, a hasNextPage
     * of another type; and what is no list page at all. */
    static const char *const others[] = {
        "{\"items\": [], \"pagination\": {\"hasNextPage\": false}}",
        "{\"items\":[{\"id\":\"\\u006fsb\",\"metadata\":{\"rock_sandbox_id\":\"s\"}}]}",
        "{\"items\":[{\"id\":\"a\",\"id\":\"b\",\"metadata\":{\"rock_sandbox_id\":\"s\"}}]}",
        "{\"items\":[],\"pagination\":{\"hasNextPage\":1}}",
        "{\"items\":{}}",
        "[]",
        "{\"items\":[]",
    };
    for (size_t i = 0; i < sizeof others / sizeof *others; i++)
        expect_same_items(others[i], strlen(others[i]), 0);
    /* Random damage: a byte replaced, removed or repeated, a few times over. */
    static const char alphabet[] = "{}[]\",:\\/0-9.eEtrufalsn \x01\xc3\xa9"
                                   "a";
    unsigned seed = 12345;
    int in_place = 0;
    size_t len0 = strlen(page);
    char *buf = malloc(len0 + 64);
    assert_non_null(buf);
    for (int round = 0; round < 5000; round++) {
        memcpy(buf, page, len0 + 1);
        size_t len = len0;
        int hits = 1 + (int)((seed = seed * 1103515245u + 12345u) >> 16) % 3;
        for (int h = 0; h < hits; h++) {
            seed = seed * 1103515245u + 12345u;
            size_t at = (seed >> 8) % len;
            int kind = (int)(seed >> 4) % 3;
            if (kind == 0) {
                buf[at] = alphabet[(seed >> 20) % (sizeof alphabet - 1)];
            } else if (kind == 1 && len > 1) {
                memmove(buf + at, buf + at + 1, len - at);
                len--;
            } else {
                memmove(buf + at + 1, buf + at, len - at + 1);
                len++;
            }
        }
        in_place += expect_same_items(buf, len, -1);
    }
    free(buf);
    assert_true(in_place > 500); /* the damage left many pages the scanner reads */
}

/** Run the suite. */
int main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_body),
        cmocka_unit_test(test_restore_body_same_as_create),
        cmocka_unit_test(test_create_lost_reply),
        cmocka_unit_test(test_lookup_escapes_crafted_id),
        cmocka_unit_test(test_status),
        cmocka_unit_test(test_destroy),
        cmocka_unit_test(test_exec_routing),
        cmocka_unit_test(test_exec_start),
        cmocka_unit_test(test_proxy_target),
        cmocka_unit_test(test_session_init_deadline),
        cmocka_unit_test(test_list_reports_checked_after_last_page),
        cmocka_unit_test(test_list_page_in_place_same_as_parsed),
        cmocka_unit_test(test_list_requests_pages_ahead),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
