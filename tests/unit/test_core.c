/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests of core helpers: envelope shapes, record/status encoding,
 * quoting and Python-compatible formatting, memory normalisation, the
 * gate's decision and its refusal order, and the byte pipe. */
#include <malloc.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/app.h"
#include "base/budget.h"
#include "base/bytepipe.h"
#include "base/ident.h"
#include "rkjson.h"
#include "base/json_text.h"
#include "base/util.h"
#include "domain/dispatch.h"
#include "engine/envelope.h"
#include "host/host.h"
#include "host/plugin_loader.h"
#include "obs/log.h"
#include "domain/lifecycle.h"
#include "domain/record.h"
#include "domain/status_text.h"
#include "store/store.h"
#include "base/util.h"
#include "config/config.h"
#include "api/validate.h"
#include "api/e2b_map.h"
#include "access/secret.h"
#include "engine/stream_reply.h"

static const char *js(json_object *o)
{
    return json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN);
}

static void test_envelope_success_and_failures(void **state)
{
    (void)state;
    json_object *o = rk_envelope_success(json_object_new_string("x deleted"));
    assert_string_equal(js(o), "{\"status\":\"Success\",\"message\":null,\"error\":null,"
                               "\"result\":\"x deleted\"}");
    json_object_put(o);
    o = rk_envelope_failure("read file failed", "boom", 5000, RK_SHAPE_READ_FILE);
    assert_string_equal(js(o), "{\"status\":\"Failed\",\"message\":\"read file failed\","
                               "\"error\":\"boom\",\"result\":{\"content\":\"\",\"code\":5000,"
                               "\"failure_reason\":\"boom\"}}");
    json_object_put(o);
    o = rk_envelope_failure("run in session failed", "session 'x' does not exist", 0,
                            RK_SHAPE_RUN_SESSION);
    assert_string_equal(js(o), "{\"status\":\"Failed\",\"message\":\"run in session failed\","
                               "\"error\":\"session 'x' does not exist\",\"result\":null}");
    json_object_put(o);
    o = rk_envelope_failure("stop sandbox failed", "no", 4000, RK_SHAPE_SANDBOX_RESPONSE);
    assert_string_equal(js(o), "{\"status\":\"Failed\",\"message\":\"stop sandbox failed\","
                               "\"error\":\"no\",\"result\":{\"code\":4000,\"exit_code\":null,"
                               "\"failure_reason\":\"no\"}}");
    json_object_put(o);
    assert_int_equal(rk_status_rock_code(RK_E_NOT_RUNNING), 4000);
    assert_int_equal(rk_status_rock_code(RK_E_UNAVAILABLE), 5000);
    assert_int_equal(rk_status_rock_code(RK_E_TIMEOUT), 0);
    assert_int_equal(rk_status_rock_code(RK_E_COMMAND), 0);
}

/* Request ids: 32 lowercase hex digits, different every time (no system call after the first). */
static void test_unique_hex(void **state)
{
    (void)state;
    char a[33], b[33], c[9];
    rk_unique_hex(a, 32);
    rk_unique_hex(b, 32);
    assert_int_equal(strlen(a), 32);
    assert_int_equal(strspn(a, "0123456789abcdef"), 32);
    assert_string_not_equal(a, b);
    rk_unique_hex(c, 8);
    assert_int_equal(strlen(c), 8);
}

static void test_shell_quote(void **state)
{
    (void)state;
    struct rk_buf b = {0};
    rk_shell_quote(&b, "echo");
    rk_buf_append(&b, " ", 1);
    rk_shell_quote(&b, "hello world");
    rk_buf_append(&b, " ", 1);
    rk_shell_quote(&b, "it's");
    rk_buf_append(&b, " ", 1);
    rk_shell_quote(&b, "");
    assert_string_equal(rk_buf_cstr(&b), "echo 'hello world' 'it'\"'\"'s' ''");
    rk_buf_free(&b);
}

/* FNV-1a, 64-bit: the published test vectors. */
/* The case-insensitive comparison's first-byte shortcut, and a reserved buffer. */
static void test_strcaseeq_and_reserve(void **state)
{
    (void)state;
    assert_true(rk_strcaseeq("Content-Length", "content-length"));
    assert_true(rk_strcaseeq("", ""));
    assert_false(rk_strcaseeq("@a", "`a")); /* equal under | 0x20, not letters */
    assert_false(rk_strcaseeq("x-a", "x-b"));
    assert_false(rk_strcaseeq("a", ""));
    assert_false(rk_strcaseeq(NULL, "a"));
    struct rk_buf b = {0};
    assert_int_equal(rk_buf_reserve(&b, 1000), 0);
    const char *data = b.data;
    char chunk[100];
    memset(chunk, 'x', sizeof chunk);
    for (int i = 0; i < 10; i++)
        assert_int_equal(rk_buf_append(&b, chunk, sizeof chunk), 0);
    assert_ptr_equal(b.data, data); /* no growth on the way */
    assert_int_equal(b.len, 1000);
    assert_int_equal(b.data[1000], '\0');
    assert_int_equal(rk_buf_append(&b, "y", 1), 0); /* beyond it: grows as before */
    assert_int_equal(b.len, 1001);
    rk_buf_free(&b);
}

/* rk_turn_ms: the clock on a thread that runs no loop; frozen between two turns on one that
 * does, while rk_now_ms goes on. */
static void *turn_clock_thread(void *arg)
{
    int64_t *out = arg;
    struct timespec ms30 = {0, 30 * 1000000L};
    out[0] = rk_turn_ms();
    nanosleep(&ms30, NULL);
    out[1] = rk_turn_ms();
    int64_t t = rk_now_ms_turn();
    nanosleep(&ms30, NULL);
    out[2] = rk_turn_ms() - t;
    out[3] = rk_now_ms() - t;
    out[4] = rk_now_ms_turn() - t;
    return NULL;
}

static void test_turn_clock(void **state)
{
    (void)state;
    int64_t v[5];
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, turn_clock_thread, v), 0);
    pthread_join(th, NULL);
    assert_true(v[1] - v[0] >= 25); /* no turn: the clock */
    assert_int_equal(v[2], 0);      /* within a turn: its start */
    assert_true(v[3] >= 25);
    assert_true(v[4] >= 25); /* the next turn reads the clock again */
}

static void test_hash_str(void **state)
{
    (void)state;
    assert_true(rk_hash_str("") == 0xcbf29ce484222325ull);
    assert_true(rk_hash_str("a") == 0xaf63dc4c8601ec8cull);
    assert_true(rk_hash_str("foobar") == 0x85944171f73967e8ull);
}

static void test_py_repr_and_float(void **state)
{
    (void)state;
    struct rk_buf b = {0};
    rk_py_repr(&b, "out\n", 4);
    assert_string_equal(rk_buf_cstr(&b), "'out\\n'");
    rk_buf_free(&b);
    rk_py_repr(&b, "it's", 4);
    assert_string_equal(rk_buf_cstr(&b), "\"it's\"");
    rk_buf_free(&b);
    rk_py_repr(&b, "a\\b\t\x01", 5);
    assert_string_equal(rk_buf_cstr(&b), "'a\\\\b\\t\\x01'");
    rk_buf_free(&b);
    char f[64];
    rk_py_float(9, f);
    assert_string_equal(f, "9.0");
    rk_py_float(2.5, f);
    assert_string_equal(f, "2.5");
    rk_py_float(0.1, f);
    assert_string_equal(f, "0.1");
}

static void test_memory_normalize(void **state)
{
    (void)state;
    char out[32];
    assert_int_equal(rk_memory_normalize("8g", out, NULL), 0);
    assert_string_equal(out, "8.00g");
    assert_int_equal(rk_memory_normalize("4096m", out, NULL), 0);
    assert_string_equal(out, "4.00g");
    assert_int_equal(rk_memory_normalize("512Mi", out, NULL), 0);
    assert_string_equal(out, "0.50g");
    assert_int_equal(rk_memory_normalize("1T", out, NULL), 0);
    assert_string_equal(out, "1024.00g");
    assert_int_equal(rk_memory_normalize("lots", out, NULL), -1);
    assert_int_equal(rk_memory_normalize("8x", out, NULL), -1);
}

static void test_status_object(void **state)
{
    (void)state;
    json_object *rec = json_object_new_object();
    rk_rec_set_str(rec, "sandbox_id", "abc");
    rk_rec_set_str(rec, "state", "pending");
    rk_rec_set_str(rec, "image", "python:3.11");
    rk_rec_set_backend(rec, "opensandbox", "osb-1");
    assert_string_equal(rk_rec_backend(rec), "opensandbox");
    assert_string_equal(rk_rec_upstream_id(rec, "opensandbox"), "osb-1");
    rk_rec_transition(rec, RK_STATE_RUNNING, "alive");
    rk_rec_transition(rec, RK_STATE_RUNNING, "alive"); /* no-op: same state */
    json_object *st = rk_rec_status(rec, RK_STATE_RUNNING, 1);
    json_object *v;
    const char *nonnull[] = {"host_name",       "host_ip",      "status",
                             "port_mapping",    "image",        "gateway_version",
                             "swe_rex_version", "user_id",      "experiment_id",
                             "namespace",       "cpus",         "memory",
                             "is_alive",        "state_history"};
    for (size_t i = 0; i < sizeof nonnull / sizeof nonnull[0]; i++) {
        assert_true(json_object_object_get_ex(st, nonnull[i], &v));
        assert_non_null(v);
    }
    json_object_object_get_ex(st, "state_history", &v);
    assert_int_equal(json_object_array_length(v), 1);
    json_object_object_get_ex(st, "host_name", &v);
    assert_string_equal(json_object_get_string(v), "abc");
    json_object_object_get_ex(st, "start_time", &v);
    assert_non_null(v);
    json_object_put(st);
    /* history is capped at 100 entries */
    for (int i = 0; i < 120; i++)
        rk_rec_transition(rec, i % 2 ? RK_STATE_RUNNING : RK_STATE_STOPPED, "flip");
    json_object_object_get_ex(rec, "state_history", &v);
    assert_int_equal(json_object_array_length(v), 100);
    json_object_put(rec);
}

/* What json-c writes for v with the answers' flags (RK_JSON_FLAGS); v is released. */
static char *json_c_text(json_object *v)
{
    char *t = strdup(json_object_to_json_string_ext(v, RK_JSON_FLAGS));
    json_object_put(v);
    return t;
}

/* json_text.h writes byte for byte what json-c writes: every byte value in a string (an
 * embedded NUL included), doubles integral and not, and the other value types. */
static void test_json_text_matches_json_c(void **state)
{
    (void)state;
    char all[257];
    for (int i = 0; i < 256; i++)
        all[i] = (char)i;
    all[256] = '\0';
    struct rk_buf b = {0};
    json_object *s = json_object_new_string_len(all, 256);
    assert_int_equal(rk_json_value(&b, s), 0);
    char *want = json_c_text(s);
    assert_string_equal(rk_buf_cstr(&b), want);
    free(want);
    rk_buf_free(&b);
    assert_int_equal(rk_json_str(&b, all + 1), 0); /* the bytes 1..255 as a C string */
    want = json_c_text(json_object_new_string(all + 1));
    assert_string_equal(rk_buf_cstr(&b), want);
    free(want);
    rk_buf_free(&b);

    const double ds[] = {0.1, 1, 2, 2.5, -0.0, 1e-7, 1e21, 123456789012345678.0, 1.0 / 3, -4};
    for (size_t i = 0; i < sizeof ds / sizeof ds[0]; i++) {
        assert_int_equal(rk_json_double(&b, ds[i]), 0);
        want = json_c_text(json_object_new_double(ds[i]));
        assert_string_equal(rk_buf_cstr(&b), want);
        free(want);
        rk_buf_free(&b);
    }
    assert_int_equal(rk_json_double(&b, 0.0 / 0.0), 0); /* JSON has no NaN */
    assert_string_equal(rk_buf_cstr(&b), "null");
    rk_buf_free(&b);

    const char *values[] = {"null",
                            "true",
                            "false",
                            "-7",
                            "12345678901",
                            "[1,\"a/b\",{}]",
                            "{\"k\":[null,2.5,{\"x\":\"\\u00e9\\n\"}]}",
                            "[]",
                            "{}"};
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
        json_object *v = json_tokener_parse(values[i]);
        assert_int_equal(rk_json_value(&b, v), 0);
        want = json_c_text(v);
        assert_string_equal(rk_buf_cstr(&b), want);
        free(want);
        rk_buf_free(&b);
    }
    /* a cap holds: nothing beyond it is written */
    struct rk_buf small = {.cap = 4};
    assert_int_equal(rk_json_str(&small, "too long"), -1);
    assert_true(small.len <= 4);
    rk_buf_free(&small);
}

/* The status text of a record, member by member and in order, and its envelope as json-c
 * writes the same envelope around the parsed status. */
static void test_status_text_exact(void **state)
{
    (void)state;
    json_object *rec = json_tokener_parse(
        "{\"sandbox_id\":\"sb-1\",\"state\":\"running\",\"image\":\"py:3/\\\"q\\\"\","
        "\"cpus\":2,\"memory\":\"2.00g\",\"num_gpus\":null,\"disk\":\"50G\","
        "\"user_id\":\"u\",\"namespace\":7,\"metadata\":{\"a\":\"b\"},"
        "\"create_time\":\"2026-12-07T10:00:00+08:00\",\"expire_time\":1796641852,"
        "\"failure\":{\"phase\":\"image_pull\",\"message\":\"no \\\"such\\\" image\"},"
        "\"state_history\":[{\"to_state\":\"running\"}],\"backend_state\":\"running\"}");
    assert_non_null(rec);
    char iso[32];
    rk_iso_time(1796641852, iso);
    char want[2048];
    snprintf(
        want, sizeof want,
        "{\"sandbox_id\":\"sb-1\",\"status\":{\"image_pull\":{\"status\":\"failed\","
        "\"message\":\"no \\\"such\\\" image\"}},\"state\":\"stopped\",\"port_mapping\":{},"
        "\"host_name\":\"sb-1\",\"host_ip\":\"\",\"is_alive\":false,\"image\":\"py:3/\\\"q\\\"\","
        "\"metadata\":{\"a\":\"b\"},\"gateway_version\":\"0.0.45\",\"swe_rex_version\":\"1.2.17\","
        "\"user_id\":\"u\",\"experiment_id\":\"default\",\"namespace\":\"default\","
        "\"cpus\":2.0,\"memory\":\"2.00g\",\"num_gpus\":null,\"accelerator_type\":null,"
        "\"disk\":\"50G\",\"disk_limit_rootfs\":\"50G\",\"start_time\":null,\"stop_time\":null,"
        "\"create_time\":\"2026-12-07T10:00:00+08:00\",\"archive_time\":null,"
        "\"delete_time\":null,\"auto_stop_time\":\"%s\",\"auto_archive_time\":null,"
        "\"auto_delete_time\":null,\"state_history\":[{\"to_state\":\"running\"}]}",
        iso);
    struct rk_buf b = {0};
    struct rk_rec_src src = rk_src_tree(rec);
    assert_int_equal(rk_rec_status_text(&src, RK_STATE_STOPPED, 0, &b), 0);
    assert_string_equal(rk_buf_cstr(&b), want);
    assert_string_equal(rk_rec_status_host(&src), "sb-1");

    struct rk_buf env = {0};
    assert_int_equal(rk_envelope_success_text(&env, b.data, b.len), 0);
    char *env_want = json_c_text(rk_envelope_success(rk_rec_status(rec, RK_STATE_STOPPED, 0)));
    assert_string_equal(rk_buf_cstr(&env), env_want);
    free(env_want);
    rk_buf_free(&env);
    rk_buf_free(&b);

    /* defaults: no metadata, cpus, memory, history, host; a pending record has no stop time
     * shown and an inactive one no auto_stop_time */
    json_object *bare = json_tokener_parse("{\"state\":\"deleted\",\"expire_time\":5,"
                                           "\"state_history\":{},\"metadata\":null}");
    src = rk_src_tree(bare);
    assert_int_equal(rk_rec_status_text(&src, RK_STATE_DELETED, 0, &b), 0);
    json_object *st = json_tokener_parse(rk_buf_cstr(&b));
    assert_non_null(st);
    assert_string_equal(json_object_get_string(json_object_object_get(st, "host_name")), "-");
    assert_string_equal(js(json_object_object_get(st, "metadata")), "{}");
    assert_string_equal(js(json_object_object_get(st, "state_history")), "[]");
    assert_string_equal(js(json_object_object_get(st, "cpus")), "2.0");
    assert_string_equal(json_object_get_string(json_object_object_get(st, "memory")), "8.00g");
    assert_null(json_object_object_get(st, "auto_stop_time"));
    assert_string_equal(js(json_object_object_get(st, "status")), "{}");
    json_object_put(st);
    rk_buf_free(&b);
    json_object_put(bare);
    json_object_put(rec);
}

/* ---- a record read as its text (lib/rkjson.h, domain/record_src.h) --------- */

/* Append the reconciler's glance at rec (rk_lifecycle_glance_src, tag "opensandbox"). */
static int glance_text(struct rk_buf *b, struct rk_rec_src *rec)
{
    struct rk_rec_glance g;
    if (rk_lifecycle_glance_src(rec, "opensandbox", &g) != 0)
        return -1;
    char line[256];
    snprintf(line, sizeof line, "|glance %d %d %d %lld %s", g.present, (int)g.state, g.observed,
             (long long)g.create_deadline, g.upstream ? g.upstream : "(none)");
    rk_lifecycle_glance_free(&g);
    return rk_buf_append(b, line, strlen(line));
}

/* Everything the record readers answer for rec, as one line: the status, its host, the backend
 * tag, the typed members the status path reads, the reconciler's glance (a new string). */
static char *readers_answer(struct rk_rec_src *rec, int alive)
{
    struct rk_buf b = {0};
    const char *host = rk_rec_status_host(rec), *tag = rk_src_backend(rec);
    char extra[128];
    snprintf(extra, sizeof extra, "|%s|%s|%lld|%d|%d|%d|%d", host, tag ? tag : "(none)",
             (long long)rk_src_int64(rec, "auto_clear_time"), rk_src_bool(rec, "create_failed"),
             rk_src_has(rec, "auto_clear_time"), rk_src_is(rec, "failure", RKU_JSON_OBJECT),
             (int)rk_src_state(rec));
    assert_int_equal(rk_rec_status_text(rec, rk_src_state(rec), alive, &b), 0);
    assert_int_equal(rk_buf_append(&b, extra, strlen(extra)), 0);
    assert_int_equal(glance_text(&b, rec), 0);
    assert_false(rec->oom);
    char *out = strdup(rk_buf_cstr(&b));
    rk_buf_free(&b);
    return out;
}

/* The readers' answers for text read as scanned text (with the deadline expire when
 * has_expire), and as the tree json-c parses from it (expire_time set the same way): into
 * *from_text / *from_tree. Returns 1 when the scanner and the text readers took it, 0 when it is
 * left to json-c (then *from_text is NULL), -1 when json-c does not read it as an object, -2
 * when the scanner took what json-c does not. */
static int status_both_ways(const char *text, int64_t expire, int has_expire, int alive,
                            char **from_text, char **from_tree)
{
    size_t len = strlen(text);
    *from_text = *from_tree = NULL;
    json_tokener *tok = json_tokener_new();
    json_object *tree = json_tokener_parse_ex(tok, text, (int)len);
    int complete = json_tokener_get_error(tok) == json_tokener_success;
    json_tokener_free(tok);
    struct rku_json_member m[96];
    int n = rku_json_scan_object(text, len, m, 96);
    if (!tree || !complete || !json_object_is_type(tree, json_type_object)) {
        json_object_put(tree);
        return n >= 0 ? -2 : -1;
    }
    if (has_expire)
        json_object_object_add(tree, "expire_time", json_object_new_int64(expire));
    struct rk_rec_src tsrc = rk_src_tree(tree);
    *from_tree = readers_answer(&tsrc, alive);
    /* without a deadline from the store, the record's own one (as the reader reads it) */
    const struct rku_json_span *own =
        n >= 0 ? rku_json_member_get(m, (size_t)n, "expire_time") : NULL;
    if (!has_expire && own && own->kind != RKU_JSON_NULL && own->kind != RKU_JSON_INT) {
        n = -1; /* the reader parses it */
    } else if (!has_expire && own && own->kind == RKU_JSON_INT) {
        expire = rku_json_int(own);
        has_expire = 1;
    }
    struct rk_rec_src src;
    int took = n >= 0 && rk_src_text(&src, text, len, m, (size_t)n, expire, has_expire) == 0;
    if (took) {
        *from_text = readers_answer(&src, alive);
        rk_src_release(&src);
    }
    json_object_put(tree);
    return took;
}

/* A record as rock-admin stores it: json-c's PLAIN text of the tree. */
static char *stored_text(const char *json)
{
    json_object *o = json_tokener_parse(json);
    assert_non_null(o);
    char *t = strdup(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
    json_object_put(o);
    return t;
}

static void test_status_from_text_same_as_tree(void **state)
{
    (void)state;
    /* stored records of every shape the status reads: "/" (json-c writes "\/"), named escapes,
     * doubles kept as written, nested values, failures, defaults, nulls, odd member types */
    static const char *const recs[] = {
        "{\"sandbox_id\":\"sb-1\",\"state\":\"running\",\"image\":\"ghcr.io/org/py:3.11\","
        "\"cpus\":2,\"memory\":\"2.00g\",\"num_gpus\":null,\"disk\":\"50G\",\"user_id\":\"u/1\","
        "\"namespace\":7,\"metadata\":{\"a\":\"b/c\",\"n\":[1,2.50,-3e2,true,null,{}]},"
        "\"create_time\":\"2026-12-07T10:00:00+08:00\",\"auto_clear_time\":30,"
        "\"extended_params\":{\"backend\":\"opensandbox\",\"opensandbox_id\":\"x\"},"
        "\"failure\":{\"phase\":\"image/pull\",\"message\":\"no \\\"such\\\"\\n\\t image\\\\\"},"
        "\"state_history\":[{\"to_state\":\"running\",\"at\":1.0}],\"backend_state\":\"stopped\"}",
        "{\"state\":\"pending\",\"cpus\":0.5,\"create_failed\":true,\"host_name\":\"h\\b\\f\\r\","
        "\"extended_params\":{\"backend\":\"\"},\"failure\":\"not an object\",\"metadata\":[]}",
        "{\"state\":\"deleted\",\"expire_time\":5,\"state_history\":{},\"metadata\":null,"
        "\"cpus\":null,\"auto_clear_time\":null,\"create_failed\":null,\"extended_params\":7}",
        "{\"state\":\"running\",\"expire_time\":null,\"sandbox_id\":\"\",\"host_name\":\"\","
        "\"image\":null,\"memory\":12,\"failure\":{\"phase\":null,\"message\":5},"
        "\"create_failed\":false,\"num_gpus\":1.25,\"accelerator_type\":\"\\u00e9\\u0001\"}",
        "{\"state\":\"running\",\"auto_clear_time\":2.5,\"cpus\":\"4\",\"create_failed\":1}",
        "{\"state\":\"stopped\"}",
        "{}",
    };
    size_t took = 0;
    for (size_t i = 0; i < sizeof recs / sizeof recs[0]; i++) {
        char *text = stored_text(recs[i]);
        for (int e = 0; e < 3; e++) {
            char *a, *b;
            int r = status_both_ways(text, e == 2 ? 1796641852 : 0, e != 0, (int)i & 1, &a, &b);
            assert_true(r >= 0);
            if (r == 1) {
                assert_string_equal(a, b);
                took++;
            }
            free(a);
            free(b);
        }
        free(text);
    }
    /* the \u escapes (record 4) and odd types (record 5) are json-c's; the rest the scanner's */
    assert_int_equal(took, 3 * (sizeof recs / sizeof recs[0] - 2));
}

static void test_json_scan_refuses_what_it_cannot_copy(void **state)
{
    (void)state;
    struct rku_json_member m[8];
    static const char *const refused[] = {
        "{\"a\":\"\\u0041\"}",
        "{\"a\":\"x\001\"}",
        "{\"a\": 1}",
        "{\"a\":[1, 2]}",
        "{\"a\":-0}",
        "{\"a\":99999999999999999999}",
        "{\"a\":1e999}",
        "{\"a\":1,\"a\":2}",
        "{\"a\":{\"b\":1,\"b\":2}}",
        "{\"a\\/\":1}",
        "{\"a\":01}",
        "{\"a\":1.}",
        "{\"a\":tru}",
        "{\"a\":1,}",
        "[1]",
        "{\"a\":1}x",
        "{\"a\":\"x}",
        "{\"a\":\"\\x\"}",
        "",
        "{\"a\":[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]}",
        "{\"1\":1,\"2\":2,\"3\":3,\"4\":4,\"5\":5,\"6\":6,\"7\":7,\"8\":8,\"9\":9}",
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++)
        if (rku_json_scan_object(refused[i], strlen(refused[i]), m, 8) >= 0)
            fail_msg("the scanner took %s", refused[i]);
    const char *ok =
        " {\"a\":\"x\\/y\\\\/\",\"b\":{\"c\":[1,2.50,-3E+2,true,false,null]},\"d\":-7} \n";
    assert_int_equal(rku_json_scan_object(ok, strlen(ok), m, 8), 3);
    const struct rku_json_span *a = rku_json_member_get(m, 3, "a");
    const struct rku_json_span *b = rku_json_member_get(m, 3, "b");
    const struct rku_json_span *d = rku_json_member_get(m, 3, "d");
    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(d);
    assert_null(rku_json_member_get(m, 3, "c"));
    assert_int_equal(a->kind, RKU_JSON_STRING);
    assert_int_equal(b->kind, RKU_JSON_OBJECT);
    assert_int_equal(d->kind, RKU_JSON_INT);
    assert_int_equal(rku_json_int(d), -7);
    char out[16];
    assert_string_equal(rku_json_decode(a, out, sizeof out), "x/y\\/");
    assert_null(rku_json_decode(a, out, 5)); /* does not fit */
    char copy[64];
    size_t cn = rku_json_copy(a, copy);
    cn += rku_json_copy(b, copy + cn);
    copy[cn] = 0;
    assert_string_equal(copy, "\"x/y\\\\/\"{\"c\":[1,2.50,-3E+2,true,false,null]}");
    /* the array's elements one by one */
    const struct rku_json_span *arr = NULL;
    struct rku_json_member bm[2];
    assert_int_equal(rku_json_scan_object(b->p, b->n, bm, 2), 1);
    arr = rku_json_member_get(bm, 1, "c");
    assert_non_null(arr);
    static const char *const elems[] = {"1", "2.50", "-3E+2", "true", "false", "null"};
    size_t at = 0, k = 0;
    struct rku_json_span el;
    while (rku_json_array_next(arr, &at, &el) == 1) {
        assert_true(k < 6);
        assert_int_equal(el.n, strlen(elems[k]));
        assert_memory_equal(el.p, elems[k], el.n);
        k++;
    }
    assert_int_equal(k, 6);
    assert_int_equal(rku_json_array_next(arr, &at, &el), 0); /* stays at the end */
    assert_int_equal(rku_json_array_next(a, &at, &el), -1);  /* not an array */
    struct rku_json_span empty = {"[]", 2, RKU_JSON_ARRAY};
    at = 0;
    assert_int_equal(rku_json_array_next(&empty, &at, &el), 0);
}

/* Random damage to a stored record: whatever the scanner takes, json-c reads as an object too,
 * and the status written from the text is the tree's, byte for byte. */
static void test_status_from_text_under_damage(void **state)
{
    (void)state;
    char *base = stored_text(
        "{\"sandbox_id\":\"sb-9\",\"state\":\"running\",\"image\":\"a/b:c\",\"cpus\":1.5,"
        "\"metadata\":{\"k\":\"v\\\"w\"},\"auto_clear_time\":10,\"create_failed\":false,"
        "\"backend_state\":\"running\","
        "\"failure\":{\"phase\":\"p\",\"message\":\"m\"},\"state_history\":[{\"t\":1}],"
        "\"disk\":\"5G\",\"num_gpus\":0,\"expire_time\":12,\"create_deadline\":99,"
        "\"extended_params\":{\"backend\":\"opensandbox\",\"opensandbox_id\":\"u-1\"}}");
    static const char alphabet[] = "{}[]\":,\\/01-.eE+tfnu ax\x01\x7f\xc3";
    size_t len = strlen(base), took = 0;
    srand(7);
    for (int it = 0; it < 20000; it++) {
        char text[1024];
        memcpy(text, base, len + 1);
        for (int k = 1 + rand() % 3; k > 0; k--)
            text[(size_t)rand() % len] = alphabet[(size_t)rand() % (sizeof alphabet - 1)];
        char *a, *b;
        int r = status_both_ways(text, 1796641852, it & 1, 1, &a, &b);
        if (r == -2)
            fail_msg("the scanner took what json-c does not: %s", text);
        if (r == 1) {
            if (strcmp(a, b) != 0)
                fail_msg("%s\ntext: %s\ntree: %s", text, a, b);
            took++;
        }
        free(a);
        free(b);
    }
    assert_true(took > 1000); /* the test exercised the text path */
    free(base);
}

/* ---- the gate's decision (domain/dispatch.h) ---------------------------------
 * A plugin as the gate sees it: tag "testop", caps given per test, one refusal
 * text of its own (stop); everything else gets the generic text. */
static const struct rk_cap_msg gate_msgs[] = {
    {RK_CAP_STOP, "Testop backend does not support stop; delete the sandbox instead"},
    {0, NULL},
};

struct gate_fx {
    struct rk_operator desc;
    struct rk_plugin pl;
    struct rk_app app;
};

static void gate_fx_init(struct gate_fx *fx, uint64_t caps)
{
    memset(fx, 0, sizeof *fx);
    fx->desc.name = "testop";
    fx->desc.backend_tag = "testop";
    fx->desc.display_name = "Testop";
    fx->desc.caps = caps;
    fx->desc.unsupported = gate_msgs;
    fx->pl.desc = &fx->desc;
    fx->pl.caps = caps;
    fx->app.plugin = &fx->pl;
}

/* A stored record: state (NULL = absent), backend tag (NULL = no
 * extended_params) and upstream id (NULL = not recorded). */
static json_object *gate_rec(const char *state, const char *tag, const char *upstream)
{
    json_object *rec = json_object_new_object();
    json_object_object_add(rec, "sandbox_id", json_object_new_string("sbx-1"));
    if (state)
        json_object_object_add(rec, "state", json_object_new_string(state));
    if (tag)
        rk_rec_set_backend(rec, tag, upstream);
    return rec;
}

/* Decide op on rec (then release rec) and check the verdict: the status, the
 * exact message (NULL: none recorded), *owned and *upstream. Every refusal is
 * a ROCK 4000. */
static void gate_expect(const struct gate_fx *fx, enum rk_op op, json_object *rec, rk_status want,
                        const char *msg, int want_owned, const char *want_upstream)
{
    struct rk_call *call = rk_call_new("gate-test", -1, 0);
    int owned = -1;
    const char *upstream = "unset";
    rk_status st = rk_gate_decide(&fx->app, call, op, "sbx-1", rec, &owned, &upstream);
    if (st != want || (msg && strcmp(rk_call_error_text(call), msg) != 0))
        fail_msg("%s: status %d \"%s\", want %d \"%s\"", rk_op_info(op)->name, (int)st,
                 rk_call_error_text(call), (int)want, msg ? msg : "");
    if (msg) {
        assert_int_equal(rk_call_error_code(call), want);
        assert_int_equal(rk_status_rock_code(st), 4000);
    } else {
        assert_int_equal(rk_call_error_code(call), RK_OK);
    }
    assert_int_equal(owned, want_owned);
    if (want_upstream)
        assert_string_equal(upstream, want_upstream);
    else
        assert_null(upstream);
    rk_call_free(call);
    json_object_put(rec);
}

/* The reconciler's glance says "nothing to do" only where rk_lifecycle_reconcile changes nothing:
 * a listed sandbox whose record has no backend id yet is the create queue's while its create
 * deadline runs (whatever the listing says), and is looked at once the deadline passed or when
 * the listing gives no backend id. */
static void test_glance_leaves_an_uncreated_listed_sandbox_to_the_queue(void **state)
{
    (void)state;
    struct gate_fx fx;
    gate_fx_init(&fx, 0);
    const struct rk_status_info listed[] = {
        {.state = RK_STATE_RUNNING, .upstream_id = "osb-1"},
        {.state = RK_STATE_PENDING, .upstream_id = "osb-1"},
        {.state = RK_STATE_STOPPED, .failed = 1, .reason = "boom", .upstream_id = "osb-1"},
    };
    for (size_t i = 0; i < sizeof listed / sizeof *listed; i++) {
        json_object *rec = gate_rec("pending", "testop", NULL);
        json_object_object_add(rec, "create_deadline", json_object_new_int64(rk_epoch_s() + 600));
        struct rk_rec_glance g;
        assert_int_equal(rk_lifecycle_glance(rec, "testop", &g), 0);
        assert_true(g.present);
        assert_null(g.upstream);
        assert_int_equal(rk_lifecycle_glance_needs(&g, &listed[i]), 0);
        char *before = strdup(json_object_to_json_string(rec));
        struct rk_call *call = rk_call_new("glance-test", -1, 0);
        assert_int_equal(rk_lifecycle_reconcile(&fx.app, call, &rec, &listed[i]), RK_OK);
        assert_string_equal(json_object_to_json_string(rec), before); /* nothing changed */
        rk_call_free(call);
        free(before);
        /* Past the create deadline, or listed without a backend id: looked at. */
        g.create_deadline = rk_epoch_s() - 1;
        assert_int_equal(rk_lifecycle_glance_needs(&g, &listed[i]), 1);
        g.create_deadline = rk_epoch_s() + 600;
        struct rk_status_info no_id = listed[i];
        no_id.upstream_id = NULL;
        assert_int_equal(rk_lifecycle_glance_needs(&g, &no_id), 1);
        rk_lifecycle_glance_free(&g);
        json_object_put(rec);
    }
}

#define MISSING_TAG "Testop sandbox metadata is missing required backend"
#define FOREIGN_TAG "Sandbox backend other conflicts with configured operator testop"
#define NOT_RUNNING(s) "Sandbox sbx-1 is not running (state=" s ")"

/* Every refusal of the decision in its documented order (tag present, tag
 * equal, capability, state, then a running record's backend id), each with its
 * exact message; where several apply, the first in that order decides. */
static void test_gate_refusal_order(void **state)
{
    (void)state;
    struct gate_fx fx;
    gate_fx_init(&fx, RK_CAP_EXEC | RK_CAP_FILE_WRITE | RK_CAP_ARCHIVE);

    /* 2. No backend tag: refused, whatever else is wrong (a missing capability
     * and a wrong state too); the record is not this operator's. */
    gate_expect(&fx, RK_OP_EXEC, gate_rec("running", NULL, NULL), RK_E_INVALID, MISSING_TAG, 0,
                NULL);
    gate_expect(&fx, RK_OP_EXEC, gate_rec("running", "", "up-1"), RK_E_INVALID, MISSING_TAG, 0,
                NULL);
    gate_expect(&fx, RK_OP_EXEC, gate_rec("stopped", NULL, NULL), RK_E_INVALID, MISSING_TAG, 0,
                NULL);
    gate_expect(&fx, RK_OP_SESSION_CREATE, gate_rec("stopped", NULL, NULL), RK_E_INVALID,
                MISSING_TAG, 0, NULL);
    gate_expect(&fx, RK_OP_STATUS, gate_rec("running", NULL, NULL), RK_E_INVALID, MISSING_TAG, 0,
                NULL);

    /* 3. Another backend's record: refused before capability and state. */
    gate_expect(&fx, RK_OP_EXEC, gate_rec("running", "other", "up-1"), RK_E_INVALID, FOREIGN_TAG, 0,
                NULL);
    gate_expect(&fx, RK_OP_SESSION_CREATE, gate_rec("stopped", "other", NULL), RK_E_INVALID,
                FOREIGN_TAG, 0, NULL);
    gate_expect(&fx, RK_OP_DELETE, gate_rec("running", "other", "up-1"), RK_E_INVALID, FOREIGN_TAG,
                0, NULL);

    /* 4. Capability, before state: the plugin's own text, else the generic one;
     * from here on the record is this operator's (owned). */
    gate_expect(&fx, RK_OP_STOP, gate_rec("running", "testop", "up-1"), RK_E_UNSUPPORTED,
                "Testop backend does not support stop; delete the sandbox instead", 1, NULL);
    gate_expect(&fx, RK_OP_SESSION_CREATE, gate_rec("stopped", "testop", NULL), RK_E_UNSUPPORTED,
                "Testop backend does not support create_session", 1, NULL);
    /* write_file needs FILE_WRITE and FILE_STAT: the missing one is refused */
    gate_expect(&fx, RK_OP_FILE_WRITE, gate_rec("running", "testop", "up-1"), RK_E_UNSUPPORTED,
                "Testop backend does not support write_file", 1, NULL);
    gate_expect(&fx, RK_OP_PROXY_HTTP, gate_rec("running", "testop", "up-1"), RK_E_UNSUPPORTED,
                "Testop backend does not support http proxy", 1, NULL);

    /* 5. State, before the backend id. */
    gate_expect(&fx, RK_OP_EXEC, gate_rec("stopped", "testop", NULL), RK_E_NOT_RUNNING,
                NOT_RUNNING("stopped"), 1, NULL);
    gate_expect(&fx, RK_OP_EXEC, gate_rec("pending", "testop", "up-1"), RK_E_NOT_RUNNING,
                NOT_RUNNING("pending"), 1, NULL);
    gate_expect(&fx, RK_OP_EXEC, gate_rec("archived", "testop", "up-1"), RK_E_NOT_RUNNING,
                NOT_RUNNING("archived"), 1, NULL);
    gate_expect(&fx, RK_OP_EXEC, gate_rec(NULL, "testop", "up-1"), RK_E_NOT_RUNNING,
                NOT_RUNNING("unknown"), 1, NULL);

    /* Last: a running record must carry its backend id. */
    gate_expect(&fx, RK_OP_EXEC, gate_rec("running", "testop", NULL), RK_E_INVALID,
                "Testop sandbox metadata is missing testop_id", 1, NULL);

    /* Passed: the backend id comes back; operations without a state
     * precondition pass in any state, with or without the id. */
    gate_expect(&fx, RK_OP_EXEC, gate_rec("running", "testop", "up-1"), RK_OK, NULL, 1, "up-1");
    gate_expect(&fx, RK_OP_STATUS, gate_rec("pending", "testop", NULL), RK_OK, NULL, 1, NULL);
    gate_expect(&fx, RK_OP_DELETE, gate_rec("stopped", "testop", "up-1"), RK_OK, NULL, 1, "up-1");
    gate_expect(&fx, RK_OP_ARCHIVE, gate_rec("stopped", "testop", "up-1"), RK_OK, NULL, 1, "up-1");

    /* Archive by snapshots (ABI 1.1): RK_CAP_SNAPSHOT stands in for
     * RK_CAP_ARCHIVE; without either it is refused. */
    gate_fx_init(&fx, RK_CAP_SNAPSHOT);
    gate_expect(&fx, RK_OP_ARCHIVE, gate_rec("stopped", "testop", "up-1"), RK_OK, NULL, 1, "up-1");
    gate_fx_init(&fx, 0);
    gate_expect(&fx, RK_OP_ARCHIVE, gate_rec("stopped", "testop", "up-1"), RK_E_UNSUPPORTED,
                "Testop backend does not support archive", 1, NULL);
    gate_expect(&fx, RK_OP_STOP, gate_rec("stopped", "other", "up-1"), RK_E_INVALID, FOREIGN_TAG, 0,
                NULL);
}

/* The whole gate over a store: the id rule and "record exists" come first,
 * then the decision above; a target that passed carries the record's facts. */
static void test_gate_dispatch_store(void **state)
{
    (void)state;
    struct gate_fx fx;
    gate_fx_init(&fx, RK_CAP_EXEC);
    fx.app.store = rk_store_open_memory();
    assert_non_null(fx.app.store);
    char err[RK_STORE_ERRLEN];
    json_object *rec = gate_rec("running", "testop", "up-1");
    assert_int_equal(rk_store_create(fx.app.store, "sbx-1", rec, 0, err, sizeof err), RK_STORE_OK);
    json_object_put(rec);
    rec = gate_rec("running", NULL, NULL);
    json_object_object_add(rec, "sandbox_id", json_object_new_string("sbx-untagged"));
    assert_int_equal(rk_store_create(fx.app.store, "sbx-untagged", rec, 0, err, sizeof err),
                     RK_STORE_OK);
    json_object_put(rec);

    static const struct {
        const char *id;
        enum rk_op op;
        rk_status want;
        const char *msg;
    } cases[] = {
        {"a&b", RK_OP_EXEC, RK_E_INVALID, "sandbox_id: " RK_ID_RULE_MSG},
        {"nope", RK_OP_EXEC, RK_E_NOT_FOUND, "Sandbox nope not found"},
        {"nope", RK_OP_STOP, RK_E_NOT_FOUND, "Sandbox nope not found"},
        {"sbx-untagged", RK_OP_STOP, RK_E_INVALID, MISSING_TAG},
        {"sbx-1", RK_OP_STOP, RK_E_UNSUPPORTED,
         "Testop backend does not support stop; delete the sandbox instead"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct rk_call *call = rk_call_new("gate-test", -1, 0);
        struct rk_target t;
        rk_status st = rk_dispatch(&fx.app, call, cases[i].op, cases[i].id, &t);
        if (st != cases[i].want || strcmp(rk_call_error_text(call), cases[i].msg) != 0)
            fail_msg("%s: status %d \"%s\", want %d \"%s\"", cases[i].id, (int)st,
                     rk_call_error_text(call), (int)cases[i].want, cases[i].msg);
        assert_int_equal(rk_status_rock_code(st), 4000);
        assert_null(t.rec);
        rk_call_free(call);
    }

    struct rk_call *call = rk_call_new("gate-test", -1, 0);
    struct rk_target t;
    assert_int_equal(rk_dispatch(&fx.app, call, RK_OP_EXEC, "sbx-1", &t), RK_OK);
    assert_non_null(t.rec);
    assert_string_equal(t.ref.sandbox_id, "sbx-1");
    assert_string_equal(t.ref.upstream_id, "up-1");
    assert_string_equal(t.ref.backend_tag, "testop");
    assert_int_equal(t.ref.state, RK_STATE_RUNNING);
    rk_target_release(&t);
    rk_call_free(call);
    rk_store_close(fx.app.store);
}

/* RK_CAP_SCHEDULER is reserved: a descriptor may set it (1.0 and 1.1 plugins
 * alike, no entry point needed) and the effective caps never carry it. */
static void test_scheduler_cap_reserved(void **state)
{
    (void)state;
    const char *dir = getenv("ROCK_TEST_PLUGIN_DIR");
    if (!dir || !*dir)
        skip();
    struct rk_problems p = {0};
    struct rk_plugin *pl = rk_plugin_load(dir, "abi_good", &p);
    assert_non_null(pl);
    struct rk_operator d = *pl->desc;
    struct rk_operator_ops ops = pl->ops;
    d.ops = &ops;
    d.caps = RK_CAP_SCHEDULER;
    char why[512];
    assert_int_equal(rk_plugin_check_descriptor(&d, "abi_good", why, sizeof why), 0);
    d.abi_minor = 0;
    assert_int_equal(rk_plugin_check_descriptor(&d, "abi_good", why, sizeof why), 0);
    /* The loaded plugin declares it: accepted, and dropped by init. */
    pl->adopted->desc.caps |= RK_CAP_SCHEDULER;
    struct rk_config *cfg = rk_config_defaults();
    assert_int_equal(rk_plugin_init(pl, cfg, &p), 0);
    assert_int_equal(p.n, 0);
    assert_int_equal(pl->desc->caps & RK_CAP_SCHEDULER, RK_CAP_SCHEDULER);
    assert_int_equal(pl->caps & RK_CAP_SCHEDULER, 0);
    assert_int_equal(pl->caps, pl->desc->caps & ~RK_CAP_SCHEDULER);
    rk_plugin_unload(pl);
    rk_config_free(cfg);
    rk_problems_free(&p);
}

struct pipe_job {
    struct rk_bytepipe *p;
    size_t total;
};

static void *pipe_writer(void *arg)
{
    struct pipe_job *j = arg;
    char chunk[777];
    for (size_t i = 0; i < sizeof chunk; i++)
        chunk[i] = (char)i;
    size_t sent = 0;
    while (sent < j->total) {
        size_t n = j->total - sent < sizeof chunk ? j->total - sent : sizeof chunk;
        if (rk_bytepipe_write(j->p, chunk, n) != 0)
            break;
        sent += n;
    }
    rk_bytepipe_close(j->p);
    return NULL;
}

static void test_bytepipe_streams_bounded(void **state)
{
    (void)state;
    struct pipe_job j = {rk_bytepipe_new(1000), 1 << 20};
    pthread_t th;
    pthread_create(&th, NULL, pipe_writer, &j);
    size_t got = 0, pos = 0;
    char buf[333];
    ssize_t n;
    while ((n = rk_bytepipe_read(j.p, buf, sizeof buf, 5000)) > 0) {
        for (ssize_t i = 0; i < n; i++, pos++)
            assert_int_equal((unsigned char)buf[i], (unsigned char)((pos % 777) & 0xff));
        got += (size_t)n;
    }
    assert_int_equal(n, 0);
    assert_int_equal(got, j.total);
    pthread_join(th, NULL);
    rk_bytepipe_free(j.p);
}

/* Write n bytes of the sequence k % 251 from *k on; returns what write_timed returned. */
static int pipe_put(struct rk_bytepipe *p, size_t n, size_t *k, size_t *written)
{
    char *b = malloc(n);
    for (size_t i = 0; i < n; i++)
        b[i] = (char)((*k + i) % 251);
    int rc = rk_bytepipe_write_timed(p, b, n, 10, written);
    *k += *written;
    free(b);
    return rc;
}

/* Read n bytes and check they continue the sequence at *k. */
static void pipe_check(struct rk_bytepipe *p, size_t n, size_t *k)
{
    char buf[4096];
    while (n > 0) {
        ssize_t got = rk_bytepipe_read(p, buf, n < sizeof buf ? n : sizeof buf, 1000);
        assert_true(got > 0);
        for (ssize_t i = 0; i < got; i++, (*k)++)
            assert_int_equal((unsigned char)buf[i], (unsigned char)(*k % 251));
        n -= (size_t)got;
    }
}

/* A pipe's ring starts small and grows only as far as its bound, keeping the bytes it holds
 * in order when it grows while they wrap around the ring's end. */
static void test_bytepipe_grows_to_its_bound(void **state)
{
    (void)state;
#ifdef __GLIBC__
    /* a pipe bounded at 1 MiB does not take 1 MiB up front */
    struct mallinfo2 m0 = mallinfo2();
    struct rk_bytepipe *big = rk_bytepipe_new(1 << 20);
    struct mallinfo2 m1 = mallinfo2();
    assert_true(m1.uordblks + m1.hblkhd < m0.uordblks + m0.hblkhd + 64 * 1024);
    rk_bytepipe_free(big);
#endif
    struct rk_bytepipe *p = rk_bytepipe_new(100000);
    size_t wk = 0, rk = 0, w = 0;
    assert_int_equal(rk_bytepipe_room(p), 100000);
    assert_int_equal(pipe_put(p, 10000, &wk, &w), 0);
    pipe_check(p, 6000, &rk);
    assert_int_equal(pipe_put(p, 11000, &wk, &w), 0); /* wraps around the first ring's end */
    assert_int_equal(pipe_put(p, 30000, &wk, &w), 0); /* grows with wrapped bytes held */
    assert_int_equal(rk_bytepipe_room(p), 100000 - 45000);
    /* the bound holds: a write past it waits, times out and says how much went in */
    assert_int_equal(pipe_put(p, 70000, &wk, &w), 1);
    assert_int_equal(w, 55000);
    assert_int_equal(rk_bytepipe_room(p), 0);
    pipe_check(p, 100000, &rk);
    assert_int_equal(pipe_put(p, 100000, &wk, &w), 0); /* full bound again, from empty */
    pipe_check(p, 100000, &rk);
    rk_bytepipe_close(p);
    char c;
    assert_int_equal(rk_bytepipe_read(p, &c, 1, 1000), 0);
    assert_int_equal(wk, rk);
    rk_bytepipe_free(p);
}

/* Identifier rules, range checks and the byte budgets. */
static void test_identifiers_ranges_budget(void **state)
{
    (void)state;
    assert_true(rk_id_valid("0123456789abcdef0123456789abcdef", 32));
    assert_true(rk_id_valid("A-z_0.9", 7));
    char longid[130];
    memset(longid, 'a', sizeof longid);
    assert_true(rk_id_valid(longid, 128));
    assert_false(rk_id_valid(longid, 129));
    assert_false(rk_id_valid("", 0));
    assert_false(rk_id_valid("a&b", 3));
    assert_false(rk_id_valid("a=b", 3));
    assert_false(rk_id_valid("a%26", 4));
    assert_false(rk_id_valid("a\0b", 3));
    assert_false(rk_id_valid("a/b", 3));
    assert_false(rk_id_valid("caf\xc3\xa9", 5));
    assert_true(rk_session_name_valid("w\xc3\xa9ird: name/1", 14));
    assert_false(rk_session_name_valid("a\nb", 3));
    assert_false(rk_session_name_valid(longid, 129));

    struct rk_v v;
    rk_v_init(&v, NULL, "body");
    assert_int_equal(rk_v_irange(&v, "n", 5, 0, 10), 5);
    assert_true(rk_v_ok(&v));
    assert_int_equal(rk_v_irange(&v, "n", INT64_MAX, INT64_MIN, 100), 100);
    assert_string_equal(rk_v_text(&v), "body.n: Input should be less than or equal to 100");
    rk_v_free(&v);
    rk_v_init(&v, NULL, "body");
    assert_true(rk_v_frange(&v, "t", 1e308, 0, 1e6) == 1e6);
    assert_string_equal(rk_v_text(&v), "body.t: Input should be in the range [0, 1e+06]");
    rk_v_free(&v);
    assert_int_equal(rk_sat_i64(INT64_MAX, 1, 1000), 1000);

    rk_budget_init(100, 0);
    assert_int_equal(rk_budget_take(&rk_mem_budget, 60), 0);
    assert_int_equal(rk_budget_take(&rk_mem_budget, 60), -1);
    assert_int_equal(rk_budget_used(&rk_mem_budget), 60);
    assert_int_equal(rk_budget_take(&rk_mem_budget, 40), 0);
    rk_budget_give(&rk_mem_budget, 100);
    assert_int_equal(rk_budget_take(&rk_mem_budget, INT64_MAX), -1);
    assert_int_equal(rk_budget_take(&rk_spool_budget, INT64_MAX / 2), 0); /* 0 = unlimited */
    rk_budget_give(&rk_spool_budget, INT64_MAX / 2);
    rk_budget_init(0, 0);
}

/* Identical log lines in a burst are written once, the rest counted (as accept errors at the
 * descriptor limit are). Every copy is accounted for: written or reported as repeated. */
static void test_log_repeats_rate_limited(void **state)
{
    (void)state;
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    fflush(stderr);
    int saved = dup(2);
    assert_true(saved >= 0);
    assert_true(dup2(fds[1], 2) >= 0);
    for (int i = 0; i < 1000; i++)
        rk_warn("accept failed: too many open files");
    rk_warn("something else");
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    close(fds[1]);
    char out[65536];
    size_t len = 0;
    ssize_t n;
    while (len < sizeof out - 1 && (n = read(fds[0], out + len, sizeof out - 1 - len)) > 0)
        len += (size_t)n;
    close(fds[0]);
    out[len] = '\0';
    unsigned long written = 0, repeated = 0;
    int other = 0;
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
        const char *r = strstr(line, "last message repeated ");
        if (strstr(line, "something else"))
            other = 1;
        if (strstr(line, "accept failed: too many open files"))
            written++;
        else if (r)
            repeated += strtoul(r + strlen("last message repeated "), NULL, 10);
    }
    assert_true(written >= 1 && written < 10);
    assert_int_equal(written + repeated, 1000);
    assert_true(other); /* the next different line is written (after the repeat count) */
}

/* E2B mapping: timeout rounding, state names, the detail shape; secrets; base64; the
 * stream queue's bound and the room a producer keeps for its last message. */
static void test_e2b_mapping_secret_stream(void **state)
{
    (void)state;
    assert_int_equal(rk_e2b_timeout_minutes(0), 1);
    assert_int_equal(rk_e2b_timeout_minutes(60), 1);
    assert_int_equal(rk_e2b_timeout_minutes(61), 2);
    assert_int_equal(rk_e2b_timeout_minutes(120), 2);
    assert_int_equal(rk_e2b_timeout_minutes(121), 3);
    assert_string_equal(rk_e2b_state("pending"), "running");
    assert_string_equal(rk_e2b_state("stopped"), "paused");
    assert_string_equal(rk_e2b_state("archived"), "paused");
    assert_null(rk_e2b_state("deleted"));
    assert_int_equal(rk_e2b_http_status(RK_E_NOT_FOUND), 404);
    assert_int_equal(rk_e2b_http_status(RK_E_INVALID), 400);
    assert_int_equal(rk_e2b_http_status(RK_E_INTERNAL), 500);
    json_object *st = json_tokener_parse(
        "{\"sandbox_id\":\"s1\",\"image\":\"img\",\"state\":\"running\",\"cpus\":1.5,"
        "\"memory\":\"2.00g\",\"disk\":\"50G\",\"create_time\":\"2026-01-01T00:00:00+08:00\","
        "\"auto_stop_time\":\"2026-01-01T00:05:00+08:00\",\"metadata\":{\"k\":\"v\"}}");
    json_object *d = rk_e2b_detail(st);
    assert_string_equal(js(d),
                        "{\"sandboxID\":\"s1\",\"templateID\":\"img\",\"clientID\":"
                        "\"rock-admin\",\"state\":\"running\",\"startedAt\":"
                        "\"2026-01-01T00:00:00+08:00\",\"endAt\":\"2026-01-01T00:05:00+08:00\","
                        "\"cpuCount\":2,\"memoryMB\":2048,\"diskSizeMB\":51200,\"metadata\":"
                        "{\"k\":\"v\"},\"envdVersion\":\"" RK_E2B_ENVD_VERSION "\"}");
    json_object_put(d);
    json_object_put(st);

    char tok[33], digest[RK_SECRET_DIGEST_HEX], other[33], od[RK_SECRET_DIGEST_HEX];
    assert_int_equal(rk_secret_issue(tok, digest), 0);
    assert_int_equal(rk_secret_issue(other, od), 0);
    assert_int_equal(strlen(tok), 32);
    assert_string_not_equal(tok, other);
    assert_true(rk_secret_matches(digest, tok));
    assert_false(rk_secret_matches(digest, other));
    assert_false(rk_secret_matches(digest, NULL));
    assert_false(rk_secret_matches(NULL, tok));
    assert_false(rk_secret_matches("abc", tok));

    struct rk_buf b = {0};
    rk_buf_base64(&b, "\x00\x01\x02\xff", 4);
    rk_buf_base64(&b, "hi\n", 3);
    assert_string_equal(rk_buf_cstr(&b), "AAEC/w==aGkK");
    rk_buf_free(&b);

    struct rk_outstream *s = rk_stream_new(10, 0, NULL, NULL);
    assert_int_equal(rk_stream_push(s, "12345", 5, 4), 0);
    assert_int_equal(rk_stream_push(s, "12", 2, 4), -1); /* would eat the kept room */
    assert_int_equal(rk_stream_push(s, "12345", 5, 0), 0);
    assert_int_equal(rk_stream_push(s, "x", 1, 0), -1); /* full */
    rk_stream_close(s);
    assert_int_equal(rk_stream_push(s, "", 0, 0), -1); /* closed */
    assert_false(rk_stream_finished(s));
    rk_stream_unref(s);

    /* a stream grows past its first allocation up to its capacity, not beyond */
    s = rk_stream_new(1 << 20, 0, NULL, NULL);
    char chunk[1000];
    for (int i = 0; i < 300; i++) {
        memset(chunk, 'a' + i % 26, sizeof chunk);
        assert_int_equal(rk_stream_push(s, chunk, sizeof chunk, 0), 0);
    }
    assert_int_equal(rk_stream_push(s, chunk, 1 << 20, 0), -1); /* over the capacity */
    rk_stream_unref(s);

    /* a waiting push fills what is free, then waits for a reader until its deadline; an
     * aborted stream refuses at once */
    s = rk_stream_new(10, 0, NULL, NULL);
    assert_int_equal(rk_stream_push_wait(s, "123456", 6, 0), 0);
    int64_t t0 = rk_now_ms();
    assert_int_equal(rk_stream_push_wait(s, "abcdef", 6, t0 + 300), -2);
    assert_true(rk_now_ms() - t0 >= 300);
    assert_int_equal(rk_stream_push(s, "x", 1, 0), -1); /* the 4 bytes that fitted went in */
    rk_stream_abort(s);
    assert_int_equal(rk_stream_push_wait(s, "y", 1, 0), -1);
    rk_stream_unref(s);
}

int main(void)
{
    rk_time_init();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_envelope_success_and_failures),
        cmocka_unit_test(test_json_text_matches_json_c),
        cmocka_unit_test(test_status_text_exact),
        cmocka_unit_test(test_status_from_text_same_as_tree),
        cmocka_unit_test(test_json_scan_refuses_what_it_cannot_copy),
        cmocka_unit_test(test_status_from_text_under_damage),
        cmocka_unit_test(test_log_repeats_rate_limited),
        cmocka_unit_test(test_shell_quote),
        cmocka_unit_test(test_hash_str),
        cmocka_unit_test(test_strcaseeq_and_reserve),
        cmocka_unit_test(test_turn_clock),
        cmocka_unit_test(test_unique_hex),
        cmocka_unit_test(test_py_repr_and_float),
        cmocka_unit_test(test_memory_normalize),
        cmocka_unit_test(test_status_object),
        cmocka_unit_test(test_gate_refusal_order),
        cmocka_unit_test(test_glance_leaves_an_uncreated_listed_sandbox_to_the_queue),
        cmocka_unit_test(test_gate_dispatch_store),
        cmocka_unit_test(test_scheduler_cap_reserved),
        cmocka_unit_test(test_bytepipe_streams_bounded),
        cmocka_unit_test(test_bytepipe_grows_to_its_bound),
        cmocka_unit_test(test_identifiers_ranges_budget),
        cmocka_unit_test(test_e2b_mapping_secret_stream),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
