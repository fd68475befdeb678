/* SPDX-License-Identifier: Apache-2.0 */
/* Store tests: every store behaviour runs against the in-process backend and a
 * real redis-server started on a free loopback port; Redis-only tests cover
 * the key layout, WATCH retries, outages and authentication. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "redis_fixture.h"
#include "store/store.h"
#include "store/store_common.h"
#include "store/store_redis_internal.h"

enum backend { BACKEND_MEMORY, BACKEND_REDIS };

static const enum backend k_memory = BACKEND_MEMORY;
static const enum backend k_redis = BACKEND_REDIS;

/* Per-test state: the backend under test and an open store. */
struct tctx {
    enum backend kind;
    struct rk_store *st;
    char prefix[64];
};

static struct rk_redis_fixture g_redis;
static int g_seq;

/* Milliseconds on the monotonic clock. */
/* "Fails fast" means it did not hang: a generous bound that a loaded 2-core
 * machine cannot exceed (the configured timeouts are ~1 s; figures belong in
 * bench/, not in asserts). */
#define STORE_FAIL_FAST_LIMIT_MS 30000

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Sleep for ms milliseconds. */
static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Open a Redis store on 127.0.0.1:port. */
static struct rk_store *open_redis(int port, const char *password, const char *prefix, int pool)
{
    struct rk_redis_cfg cfg = {
        .host = "127.0.0.1",
        .port = port,
        .password = password,
        .db = 0,
        .connect_timeout_ms = 1000,
        .op_timeout_ms = 1000,
        .pool_size = pool,
        .key_prefix = prefix,
    };
    return rk_store_open_redis(&cfg);
}

/* Open a store of the kind in tc (a fresh key prefix for Redis). */
static struct rk_store *open_kind(struct tctx *tc)
{
    if (tc->kind == BACKEND_MEMORY)
        return rk_store_open_memory();
    return open_redis(g_redis.port, NULL, tc->prefix, 8);
}

/* Direct hiredis connection to the shared test server. */
static redisContext *raw_conn(int port)
{
    struct timeval tv = {1, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    assert_non_null(c);
    assert_int_equal(c->err, 0);
    return c;
}

/* Group setup: start the shared redis-server; fail loudly if impossible. */
static int group_setup(void **state)
{
    (void)state;
    char msg[512];
    if (rk_redis_fixture_start(&g_redis, 0, NULL, msg, sizeof msg) != 0) {
        fprintf(stderr, "test_store: cannot start redis-server: %s\n", msg);
        return -1;
    }
    return 0;
}

/* Group teardown: stop the shared redis-server. */
static int group_teardown(void **state)
{
    (void)state;
    rk_redis_fixture_stop(&g_redis);
    return 0;
}

/* Per-test setup: open the backend named by the prestate. */
static int setup(void **state)
{
    struct tctx *tc = calloc(1, sizeof *tc);
    if (!tc)
        return -1;
    tc->kind = *(const enum backend *)*state;
    snprintf(tc->prefix, sizeof tc->prefix, "t%d:%d:", (int)getpid(), ++g_seq);
    tc->st = open_kind(tc);
    if (!tc->st) {
        free(tc);
        return -1;
    }
    *state = tc;
    return 0;
}

/* Per-test teardown: close the store. */
static int teardown(void **state)
{
    struct tctx *tc = *state;
    rk_store_close(tc->st);
    free(tc);
    return 0;
}

/* Build a record {"state": state, "image": image}. */
static json_object *mkrec(const char *state, const char *image)
{
    json_object *o = json_object_new_object();
    json_object_object_add(o, "state", json_object_new_string(state));
    json_object_object_add(o, "image", json_object_new_string(image));
    return o;
}

/* Create a record and assert the result code. */
static void create_expect(struct rk_store *st, const char *id, const char *state, const char *image,
                          int64_t expire, rk_store_rc want)
{
    char err[RK_STORE_ERRLEN];
    json_object *rec = mkrec(state, image);
    rk_store_rc rc = rk_store_create(st, id, rec, expire, err, sizeof err);
    if (rc != want)
        fail_msg("create %s: rc %d, want %d (%s)", id, rc, want, err);
    json_object_put(rec);
}

/* Read a string member of a record (NULL if missing). */
static const char *member(json_object *o, const char *key)
{
    json_object *v = NULL;
    if (!json_object_object_get_ex(o, key, &v))
        return NULL;
    return json_object_get_string(v);
}

/* Read the "expire_time" member (-1 if missing). */
static int64_t expire_of(json_object *o)
{
    json_object *v = NULL;
    if (!json_object_object_get_ex(o, "expire_time", &v))
        return -1;
    return json_object_get_int64(v);
}

/* 1 if id is in the list. */
static int has_id(char **ids, size_t n, const char *id)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(ids[i], id) == 0)
            return 1;
    return 0;
}

/* Update callback: set "state" to the string in ctx. */
static int set_state(json_object *rec, void *ctx)
{
    json_object_object_add(rec, "state", json_object_new_string(ctx));
    return 0;
}

/* Update callback: decline. */
static int decline(json_object *rec, void *ctx)
{
    (void)rec;
    (void)ctx;
    return 1;
}

/* Update callback: fail. */
static int explode(json_object *rec, void *ctx)
{
    (void)rec;
    (void)ctx;
    return -1;
}

/* Update callback: increment the integer member "n". */
static int increment(json_object *rec, void *ctx)
{
    (void)ctx;
    json_object *v = NULL;
    int64_t n = json_object_object_get_ex(rec, "n", &v) ? json_object_get_int64(v) : 0;
    json_object_object_add(rec, "n", json_object_new_int64(n + 1));
    return 0;
}

/* create, get (deep copies, expire_time from the idle index), not found. */
static void test_create_get(void **state)
{
    struct tctx *tc = *state;
    char err[RK_STORE_ERRLEN];
    json_object *rec = mkrec("running", "python:3.11");
    assert_int_equal(rk_store_create(tc->st, "sbx-1", rec, 1000, err, sizeof err), RK_STORE_OK);
    json_object_object_add(rec, "image", json_object_new_string("changed-after-create"));
    json_object_put(rec);

    json_object *got = NULL;
    assert_int_equal(rk_store_get(tc->st, "sbx-1", &got, err, sizeof err), RK_STORE_OK);
    assert_string_equal(member(got, "image"), "python:3.11");
    assert_int_equal(expire_of(got), 1000);
    json_object_object_add(got, "image", json_object_new_string("changed-after-get"));
    json_object_put(got);
    assert_int_equal(rk_store_get(tc->st, "sbx-1", &got, err, sizeof err), RK_STORE_OK);
    assert_string_equal(member(got, "image"), "python:3.11");
    json_object_put(got);

    got = (json_object *)1;
    assert_int_equal(rk_store_get(tc->st, "nope", &got, err, sizeof err), RK_STORE_NOT_FOUND);
    assert_null(got);
    assert_int_equal(rk_store_ping(tc->st, err, sizeof err), RK_STORE_OK);
    assert_int_equal(rk_store_is_shared(tc->st), tc->kind == BACKEND_REDIS);
}

/* update writes, aborts, fails, and reports unknown ids. */
static void test_update(void **state)
{
    struct tctx *tc = *state;
    char err[RK_STORE_ERRLEN];
    create_expect(tc->st, "sbx-u", "pending", "img", 500, RK_STORE_OK);
    json_object *out = NULL;
    assert_int_equal(rk_store_update(tc->st, "sbx-u", set_state, "running", &out, err, sizeof err),
                     RK_STORE_OK);
    assert_string_equal(member(out, "state"), "running");
    assert_string_equal(member(out, "image"), "img");
    assert_int_equal(expire_of(out), 500);
    json_object_put(out);

    assert_int_equal(rk_store_update(tc->st, "sbx-u", decline, NULL, &out, err, sizeof err),
                     RK_STORE_ABORTED);
    assert_null(out);
    uint64_t errors = rk_store_error_count(tc->st);
    assert_int_equal(rk_store_update(tc->st, "sbx-u", explode, NULL, NULL, err, sizeof err),
                     RK_STORE_ERROR);
    assert_true(err[0] != '\0');
    assert_int_equal(rk_store_error_count(tc->st), errors + 1);

    json_object *got = NULL;
    assert_int_equal(rk_store_get(tc->st, "sbx-u", &got, err, sizeof err), RK_STORE_OK);
    assert_string_equal(member(got, "state"), "running");
    json_object_put(got);

    assert_int_equal(rk_store_update(tc->st, "ghost", increment, NULL, &out, err, sizeof err),
                     RK_STORE_NOT_FOUND);
    assert_null(out);
}

/* Update callback of a batch: ctx names what to do ("running", "decline", "explode"). */
static int batch_step(json_object *rec, void *ctx)
{
    if (strcmp(ctx, "decline") == 0)
        return 1;
    if (strcmp(ctx, "explode") == 0)
        return -1;
    return set_state(rec, ctx);
}

/* The state a check sees, as text (Redis) or as a tree, copied into buf. */
static const char *found_state(const struct rk_store_found *found, char *buf, size_t cap)
{
    if (found->rec)
        return member(found->rec, "state");
    const struct rku_json_span *v = rku_json_member_get(found->m, found->n, "state");
    return v ? rku_json_decode(v, buf, cap) : NULL;
}

/* What a check and its update saw. */
struct looked {
    int checks, texts, updates;
};

/* rk_store_check_fn: leave running records as they are. */
static int leave_running(const struct rk_store_found *found, void *ctx)
{
    struct looked *l = ctx;
    char buf[32];
    const char *st = found_state(found, buf, sizeof buf);
    l->checks++;
    l->texts += !found->rec;
    return st && strcmp(st, "running") == 0;
}

/* Update callback: count, then decline running records and set the rest running. */
static int counted_running(json_object *rec, void *ctx)
{
    struct looked *l = ctx;
    l->updates++;
    if (strcmp(member(rec, "state"), "running") == 0)
        return 1;
    return set_state(rec, "running");
}

/* A check looks at each record before the update parses it: a record it leaves is not handed
 * to the update (RK_STORE_ABORTED), the others are; Redis shows it the record's text, and a text
 * the scanner does not read (a \u escape) goes to the update, which decides as ever. */
static void test_update_many_checked(void **state)
{
    struct tctx *tc = *state;
    char err[RK_STORE_ERRLEN];
    create_expect(tc->st, "k-1", "running", "img", 0, RK_STORE_OK);
    create_expect(tc->st, "k-2", "pending", "img", 0, RK_STORE_OK);
    create_expect(tc->st, "k-3", "running", "a\x01z", 0, RK_STORE_OK); /* stored as "a\u0001z" */
    const char *ids[] = {"k-1", "k-2", "k-3", "k-ghost"};
    struct looked l[4] = {{0}};
    void *ctxs[] = {&l[0], &l[1], &l[2], &l[3]};
    rk_store_rc rcs[4];
    assert_int_equal(rk_store_update_many(tc->st, ids, 4, leave_running, counted_running, ctxs, rcs,
                                          err, sizeof err),
                     RK_STORE_OK);
    assert_int_equal(rcs[0], RK_STORE_ABORTED);
    assert_int_equal(rcs[1], RK_STORE_OK);
    assert_int_equal(rcs[2], RK_STORE_ABORTED);
    assert_int_equal(rcs[3], RK_STORE_NOT_FOUND);
    assert_int_equal(l[0].checks, 1);
    assert_int_equal(l[0].updates, 0); /* left by the check: never parsed for the update */
    assert_int_equal(l[1].checks, 1);
    assert_int_equal(l[1].updates, 1);
    int redis = tc->kind == BACKEND_REDIS;
    assert_int_equal(l[0].texts, redis); /* Redis: the text, scanned */
    /* k-3: Redis cannot show its text (the scanner refuses \u), the update decides; the
     * in-process store shows its tree to the check. */
    assert_int_equal(l[2].checks, redis ? 0 : 1);
    assert_int_equal(l[2].updates, redis ? 1 : 0);
    assert_int_equal(l[3].checks + l[3].updates, 0);
    json_object *got = NULL;
    assert_int_equal(rk_store_get(tc->st, "k-2", &got, err, sizeof err), RK_STORE_OK);
    assert_string_equal(member(got, "state"), "running");
    json_object_put(got);
}

/* Several updates at once: each record gets its own outcome, the written ones move in the
 * active index as one update would move them, and the others are left as they were. */
static void test_update_many(void **state)
{
    struct tctx *tc = *state;
    char err[RK_STORE_ERRLEN];
    create_expect(tc->st, "m-1", "pending", "img", 100, RK_STORE_OK);
    create_expect(tc->st, "m-2", "pending", "img", 0, RK_STORE_OK);
    create_expect(tc->st, "m-3", "pending", "img", 0, RK_STORE_OK);
    create_expect(tc->st, "m-4", "running", "img", 0, RK_STORE_OK);
    create_expect(tc->st, "m-5", "pending", "img", 0, RK_STORE_OK);
    const char *ids[] = {"m-1", "m-2", "ghost", "m-3", "m-4", "m-5"};
    void *ctxs[] = {"running", "decline", "running", "explode", "deleted", "running"};
    rk_store_rc rcs[6];
    assert_int_equal(
        rk_store_update_many(tc->st, ids, 6, NULL, batch_step, ctxs, rcs, err, sizeof err),
        RK_STORE_OK);
    assert_int_equal(rcs[0], RK_STORE_OK);
    assert_int_equal(rcs[1], RK_STORE_ABORTED);
    assert_int_equal(rcs[2], RK_STORE_NOT_FOUND);
    assert_int_equal(rcs[3], RK_STORE_ERROR);
    assert_int_equal(rcs[4], RK_STORE_OK);
    assert_int_equal(rcs[5], RK_STORE_OK);
    static const char *const want[] = {"running", "pending", NULL, "pending", "deleted", "running"};
    for (size_t i = 0; i < 6; i++) {
        json_object *got = NULL;
        rk_store_rc rc = rk_store_get(tc->st, ids[i], &got, err, sizeof err);
        if (!want[i]) {
            assert_int_equal(rc, RK_STORE_NOT_FOUND);
            continue;
        }
        assert_int_equal(rc, RK_STORE_OK);
        assert_string_equal(member(got, "state"), want[i]);
        if (i == 0)
            assert_int_equal(expire_of(got), 100); /* the idle deadline stays */
        json_object_put(got);
    }
    char **act = NULL;
    size_t n = 0;
    assert_int_equal(rk_store_list_active(tc->st, &act, &n, err, sizeof err), RK_STORE_OK);
    assert_int_equal(n, 4); /* m-4 deleted: out of the active set */
    assert_false(has_id(act, n, "m-4"));
    rk_store_free_ids(act, n);
    size_t pending = 0, running = 0;
    assert_int_equal(rk_store_count_states(tc->st, &pending, &running, err, sizeof err),
                     RK_STORE_OK);
    assert_int_equal(pending, 2); /* m-2, m-3 */
    assert_int_equal(running, 2); /* m-1, m-5 */
    /* nothing to do, and refusals */
    assert_int_equal(
        rk_store_update_many(tc->st, ids, 0, NULL, batch_step, ctxs, rcs, err, sizeof err),
        RK_STORE_OK);
    const char *bad[] = {"m-1", ""};
    assert_int_equal(
        rk_store_update_many(tc->st, bad, 2, NULL, batch_step, ctxs, rcs, err, sizeof err),
        RK_STORE_ERROR);
    assert_int_equal(rcs[0], RK_STORE_ERROR);
}

/* The active index follows the state; create is refused while active and
 * replaces a deleted record. */
static void test_active_index_and_replace(void **state)
{
    struct tctx *tc = *state;
    char err[RK_STORE_ERRLEN];
    char **ids = NULL;
    size_t n = 0;
    create_expect(tc->st, "a-1", "running", "img-1", 100, RK_STORE_OK);
    create_expect(tc->st, "a-2", "pending", "img-2", 0, RK_STORE_OK);
    create_expect(tc->st, "a-3", "stopped", "img-3", 100, RK_STORE_OK);
    assert_int_equal(rk_store_list_active(tc->st, &ids, &n, err, sizeof err), RK_STORE_OK);
    assert_int_equal(n, 2);
    assert_true(has_id(ids, n, "a-1") && has_id(ids, n, "a-2"));
    rk_store_free_ids(ids, n);

    create_expect(tc->st, "a-1", "pending", "other", 0, RK_STORE_EXISTS);
    create_expect(tc->st, "a-3", "running", "img-3b", 0, RK_STORE_OK);

    assert_int_equal(rk_store_update(tc->st, "a-1", set_state, "deleted", NULL, err, sizeof err),
                     RK_STORE_OK);
    assert_int_equal(rk_store_list_active(tc->st, &ids, &n, err, sizeof err), RK_STORE_OK);
    assert_int_equal(n, 2);
    assert_true(has_id(ids, n, "a-2") && has_id(ids, n, "a-3") && !has_id(ids, n, "a-1"));
    rk_store_free_ids(ids, n);
    assert_int_equal(rk_store_expired(tc->st, 1000, 10, &ids, &n, err, sizeof err), RK_STORE_OK);
    assert_int_equal(n, 0);
    rk_store_free_ids(ids, n);

    json_object *got = NULL;
    assert_int_equal(rk_store_get(tc->st, "a-1", &got, err, sizeof err), RK_STORE_OK);
    assert_string_equal(member(got, "state"), "deleted");
    assert_int_equal(expire_of(got), -1);
    json_object_put(got);

    create_expect(tc->st, "a-1", "pending", "img-new", 50, RK_STORE_OK);
    assert_int_equal(rk_store_get(tc->st, "a-1", &got, err, sizeof err), RK_STORE_OK);
    assert_string_equal(member(got, "image"), "img-new");
    assert_int_equal(expire_of(got), 50);
    json_object_put(got);
}

/* Update callback: set (ctx non-NULL: to that epoch) or remove the job lease. */
static int set_job_lease(json_object *rec, void *ctx)
{
    if (ctx)
        json_object_object_add(rec, "job_lease", json_object_new_int64(*(int64_t *)ctx));
    else
        json_object_object_del(rec, "job_lease");
    return 0;
}

/* list_jobs: records with a job lease, whatever their state; not deleted ones. */
static void test_job_index(void **state)
{
    struct tctx *tc = *state;
    char err[RK_STORE_ERRLEN];
    char **ids = NULL;
    size_t n = 0;
    int64_t lease = 12345;
    create_expect(tc->st, "j-1", "archiving", "img", 0, RK_STORE_OK);
    create_expect(tc->st, "j-2", "pending", "img", 0, RK_STORE_OK);
    create_expect(tc->st, "j-3", "running", "img", 0, RK_STORE_OK);
    assert_int_equal(rk_store_list_jobs(tc->st, &ids, &n, err, sizeof err), RK_STORE_OK);
    assert_int_equal(n, 0);
    rk_store_free_ids(ids, n);
    assert_int_equal(rk_store_update(tc->st, "j-1", set_job_lease, &lease, NULL, err, sizeof err),
                     RK_STORE_OK);
    assert_int_equal(rk_store_update(tc->st, "j-2", set_job_lease, &lease, NULL, err, sizeof err),
                     RK_STORE_OK);
    assert_int_equal(rk_store_list_jobs(tc->st, &ids, &n, err, sizeof err), RK_STORE_OK);
    assert_int_equal(n, 2);
    assert_true(has_id(ids, n, "j-1") && has_id(ids, n, "j-2") && !has_id(ids, n, "j-3"));
    rk_store_free_ids(ids, n);
    /* the job ends (lease removed) / the record is deleted with its lease */
    assert_int_equal(rk_store_update(tc->st, "j-1", set_job_lease, NULL, NULL, err, sizeof err),
                     RK_STORE_OK);
    assert_int_equal(rk_store_update(tc->st, "j-2", set_state, "deleted", NULL, err, sizeof err),
                     RK_STORE_OK);
    assert_int_equal(rk_store_list_jobs(tc->st, &ids, &n, err, sizeof err), RK_STORE_OK);
    assert_int_equal(n, 0);
    rk_store_free_ids(ids, n);
}

/* get_many returns NULL for unknown ids. */
static void test_get_many(void **state)
{
    struct tctx *tc = *state;
    char err[RK_STORE_ERRLEN];
    create_expect(tc->st, "m-1", "running", "one", 10, RK_STORE_OK);
    create_expect(tc->st, "m-3", "deleted", "three", 10, RK_STORE_OK);
    const char *ids[] = {"m-1", "m-2", "m-3"};
    json_object *out[3];
    assert_int_equal(rk_store_get_many(tc->st, ids, 3, out, err, sizeof err), RK_STORE_OK);
    assert_non_null(out[0]);
    assert_null(out[1]);
    assert_non_null(out[2]);
    assert_string_equal(member(out[0], "image"), "one");
    assert_int_equal(expire_of(out[0]), 10);
    assert_string_equal(member(out[2], "image"), "three");
    assert_int_equal(expire_of(out[2]), -1);
    json_object_put(out[0]);
    json_object_put(out[2]);
    assert_int_equal(rk_store_get_many(tc->st, ids, 0, out, err, sizeof err), RK_STORE_OK);
}

/* touch moves deadlines of active records only; expired honours now and max. */
static void test_touch_and_expired(void **state)
{
    struct tctx *tc = *state;
    char err[RK_STORE_ERRLEN];
    char **ids = NULL;
    size_t n = 0;
    create_expect(tc->st, "e-1", "running", "i", 100, RK_STORE_OK);
    create_expect(tc->st, "e-2", "running", "i", 200, RK_STORE_OK);
    create_expect(tc->st, "e-3", "running", "i", 300, RK_STORE_OK);
    create_expect(tc->st, "e-4", "running", "i", 0, RK_STORE_OK);

    assert_int_equal(rk_store_expired(tc->st, 250, 10, &ids, &n, err, sizeof err), RK_STORE_OK);
    assert_int_equal(n, 2);
    assert_true(has_id(ids, n, "e-1") && has_id(ids, n, "e-2"));
    rk_store_free_ids(ids, n);
    assert_int_equal(rk_store_expired(tc->st, 250, 1, &ids, &n, err, sizeof err), RK_STORE_OK);
    assert_int_equal(n, 1);
    rk_store_free_ids(ids, n);

    assert_int_equal(rk_store_touch(tc->st, "e-1", 400, err, sizeof err), RK_STORE_OK);
    assert_int_equal(rk_store_touch(tc->st, "e-4", 150, err, sizeof err), RK_STORE_OK);
    json_object *got = NULL;
    assert_int_equal(rk_store_get(tc->st, "e-1", &got, err, sizeof err), RK_STORE_OK);
    assert_int_equal(expire_of(got), 400);
    json_object_put(got);
    assert_int_equal(rk_store_expired(tc->st, 250, 10, &ids, &n, err, sizeof err), RK_STORE_OK);
    assert_int_equal(n, 2);
    assert_true(has_id(ids, n, "e-2") && has_id(ids, n, "e-4"));
    rk_store_free_ids(ids, n);

    /* Deleted and unknown sandboxes are not resurrected by a late touch. */
    assert_int_equal(rk_store_update(tc->st, "e-2", set_state, "deleted", NULL, err, sizeof err),
                     RK_STORE_OK);
    assert_int_equal(rk_store_touch(tc->st, "e-2", 10, err, sizeof err), RK_STORE_OK);
    assert_int_equal(rk_store_touch(tc->st, "ghost", 10, err, sizeof err), RK_STORE_OK);
    assert_int_equal(rk_store_expired(tc->st, 250, 10, &ids, &n, err, sizeof err), RK_STORE_OK);
    assert_int_equal(n, 1);
    assert_string_equal(ids[0], "e-4");
    rk_store_free_ids(ids, n);
    assert_int_equal(rk_store_get(tc->st, "e-2", &got, err, sizeof err), RK_STORE_OK);
    assert_int_equal(expire_of(got), -1);
    json_object_put(got);
    assert_int_equal(rk_store_get(tc->st, "ghost", &got, err, sizeof err), RK_STORE_NOT_FOUND);
    assert_int_equal(rk_store_list_active(tc->st, &ids, &n, err, sizeof err), RK_STORE_OK);
    assert_int_equal(n, 3);
    assert_false(has_id(ids, n, "e-2") || has_id(ids, n, "ghost"));
    rk_store_free_ids(ids, n);
}

/* Create a running record with an idle lifetime of `minutes` (auto_clear_time). */
static void create_idle(struct rk_store *st, const char *id, int minutes, int64_t expire)
{
    char err[RK_STORE_ERRLEN];
    json_object *rec = mkrec("running", "i");
    if (minutes >= 0)
        json_object_object_add(rec, "auto_clear_time", json_object_new_int(minutes));
    assert_int_equal(rk_store_create(st, id, rec, expire, err, sizeof err), RK_STORE_OK);
    json_object_put(rec);
}

/* get_touch at now_s: the deadline it shows. */
static int64_t touched(struct rk_store *st, const char *id, int64_t now_s)
{
    char err[RK_STORE_ERRLEN];
    json_object *got = NULL;
    assert_int_equal(rk_store_get_touch(st, id, now_s, &got, NULL, 0, err, sizeof err),
                     RK_STORE_OK);
    int64_t e = expire_of(got);
    json_object_put(got);
    return e;
}

/* The touch rules on a new record id with a 2-minute idle lifetime and deadline 100: moved to
 * now + 2 min, never backwards, a plain read with now <= 0, and a record that left the active
 * set is not brought back into the idle index. */
static void check_touch_rules(struct rk_store *st, const char *id)
{
    char err[RK_STORE_ERRLEN];
    create_idle(st, id, 2, 100);
    assert_int_equal(touched(st, id, 1000), 1120);
    assert_int_equal(touched(st, id, 500), 1120); /* an older clock never moves it back */
    assert_int_equal(touched(st, id, 1010), 1130);
    assert_int_equal(touched(st, id, 0), 1130);
    assert_int_equal(rk_store_update(st, id, set_state, "deleted", NULL, err, sizeof err),
                     RK_STORE_OK);
    assert_int_equal(touched(st, id, 5000), -1);
    char **ids = NULL;
    size_t n = 0;
    assert_int_equal(rk_store_expired(st, 1 << 30, 10, &ids, &n, err, sizeof err), RK_STORE_OK);
    assert_false(has_id(ids, n, id));
    rk_store_free_ids(ids, n);
}

/* get_touch: the record, its deadline moved to now + auto_clear_time (never backwards, only
 * for active records, set where there was none), and the reconciler's mark, in one call. */
static void test_get_touch(void **state)
{
    struct tctx *tc = *state;
    char err[RK_STORE_ERRLEN], mark[RK_STORE_MARK_MAX];
    json_object *got = NULL;
    create_idle(tc->st, "g-1", 2, 100);
    assert_int_equal(
        rk_store_get_touch(tc->st, "g-1", 1000, &got, mark, sizeof mark, err, sizeof err),
        RK_STORE_OK);
    assert_int_equal(expire_of(got), 1120);
    assert_string_equal(member(got, "state"), "running");
    assert_string_equal(mark, "");
    json_object_put(got);
    check_touch_rules(tc->st, "g-4");
    /* No idle lifetime: the deadline stays. */
    create_idle(tc->st, "g-2", -1, 100);
    assert_int_equal(touched(tc->st, "g-2", 1000), 100);
    assert_int_equal(rk_store_get_touch(tc->st, "ghost", 1000, &got, NULL, 0, err, sizeof err),
                     RK_STORE_NOT_FOUND);
    /* An active record without a deadline gets one (Redis: by script, as no ZADD XX can). */
    create_idle(tc->st, "g-3", 1, 0);
    assert_int_equal(touched(tc->st, "g-3", 2000), 2060);
    assert_int_equal(touched(tc->st, "g-3", 0), 2060); /* stored, not only shown */
    /* The mark comes back with the record. */
    assert_int_equal(rk_store_set_mark(tc->st, "1700000000000 1700000000500 ", err, sizeof err),
                     RK_STORE_OK);
    assert_int_equal(
        rk_store_get_touch(tc->st, "g-2", 1000, &got, mark, sizeof mark, err, sizeof err),
        RK_STORE_OK);
    assert_string_equal(mark, "1700000000000 1700000000500 ");
    json_object_put(got);
}

/* A Redis before 6.2 has no ZADD GT: its "syntax error" switches the store's touches to the
 * script, which keeps the same rule (raise only, only active records). */
static void test_touch_without_zadd_gt(void **state)
{
    struct tctx *tc = *state;
    struct redis_store *rs = rkr_store(tc->st);
    assert_int_equal(rkr_touch_refused(rs, "redis error: OOM command not allowed"), 0);
    assert_false(atomic_load(&rs->no_zadd_gt));
    assert_int_equal(rkr_touch_refused(rs, "redis error: ERR syntax error"), 1);
    assert_true(atomic_load(&rs->no_zadd_gt));
    check_touch_rules(tc->st, "s-1");
}

/* What a view_touch callback saw, copied out while it ran. */
struct seen {
    int calls;
    rk_store_rc rc;
    json_object *copy; /* a deep copy of the record shown */
    uint64_t version;
    char mark[RK_STORE_MARK_MAX];
};

/* rk_store_view_fn: copy what it shows. */
static void see(void *ctx, rk_store_rc rc, json_object *rec, uint64_t version, const char *mark,
                const char *err)
{
    (void)err;
    struct seen *s = ctx;
    s->calls++;
    s->rc = rc;
    s->version = version;
    s->copy = NULL;
    if (rec)
        assert_int_equal(json_object_deep_copy(rec, &s->copy, NULL), 0);
    snprintf(s->mark, sizeof s->mark, "%s", mark);
}

/* view_touch: the in-process store shows the record in place with what get_touch returns (the
 * touch, expire_time, the mark), and leaves the stored record as it was; Redis offers no view. */
static void test_view_touch(void **state)
{
    struct tctx *tc = *state;
    char err[RK_STORE_ERRLEN];
    struct seen s = {0};
    create_idle(tc->st, "v-1", 2, 100);
    if (tc->kind == BACKEND_REDIS) {
        assert_int_equal(rk_store_view_touch(tc->st, "v-1", 1000, see, &s), -1);
        assert_int_equal(s.calls, 0);
        return;
    }
    assert_int_equal(rk_store_set_mark(tc->st, "17 18 ", err, sizeof err), RK_STORE_OK);
    assert_int_equal(rk_store_view_touch(tc->st, "v-1", 1000, see, &s), 0);
    assert_int_equal(s.calls, 1);
    assert_int_equal(s.rc, RK_STORE_OK);
    assert_int_equal(expire_of(s.copy), 1120); /* touched, and shown with its deadline */
    assert_string_equal(member(s.copy, "state"), "running");
    assert_string_equal(s.mark, "17 18 ");
    /* The same as get_touch shows, and the view left nothing behind in the stored record. */
    json_object *got = NULL;
    assert_int_equal(rk_store_get_touch(tc->st, "v-1", 0, &got, NULL, 0, err, sizeof err),
                     RK_STORE_OK);
    assert_true(json_object_equal(got, s.copy));
    json_object_put(got);
    json_object_put(s.copy);
    /* The version names what the view shows: the same while nothing changes, new when the
     * deadline moves (a touch, either kind) or the record is written, never another record's. */
    uint64_t v1 = s.version;
    assert_true(v1 != 0);
    assert_int_equal(rk_store_view_touch(tc->st, "v-1", 0, see, &s), 0);
    assert_true(s.version == v1);
    json_object_put(s.copy);
    assert_int_equal(rk_store_view_touch(tc->st, "v-1", 2000, see, &s), 0);
    assert_int_equal(expire_of(s.copy), 2120);
    uint64_t v2 = s.version;
    assert_true(v2 != v1);
    json_object_put(s.copy);
    assert_int_equal(rk_store_view_touch(tc->st, "v-1", 2000, see, &s), 0); /* no move */
    assert_true(s.version == v2);
    json_object_put(s.copy);
    assert_int_equal(rk_store_touch(tc->st, "v-1", 2120, err, sizeof err), RK_STORE_OK);
    assert_int_equal(rk_store_view_touch(tc->st, "v-1", 0, see, &s), 0);
    assert_true(s.version == v2);
    json_object_put(s.copy);
    assert_int_equal(rk_store_touch(tc->st, "v-1", 3000, err, sizeof err), RK_STORE_OK);
    assert_int_equal(rk_store_view_touch(tc->st, "v-1", 0, see, &s), 0);
    assert_int_equal(expire_of(s.copy), 3000);
    uint64_t v3 = s.version;
    assert_true(v3 != v2 && v3 != v1);
    json_object_put(s.copy);
    create_idle(tc->st, "v-2", 2, 100);
    assert_int_equal(rk_store_view_touch(tc->st, "v-2", 0, see, &s), 0);
    assert_true(s.version != v1 && s.version != v2 && s.version != v3);
    uint64_t other = s.version;
    json_object_put(s.copy);
    int calls = s.calls;
    assert_int_equal(rk_store_update(tc->st, "v-1", set_state, "deleted", NULL, err, sizeof err),
                     RK_STORE_OK);
    assert_int_equal(rk_store_view_touch(tc->st, "v-1", 5000, see, &s), 0);
    assert_int_equal(s.rc, RK_STORE_OK);
    assert_int_equal(expire_of(s.copy), -1); /* not active: no deadline shown */
    assert_true(s.version != v1 && s.version != v2 && s.version != v3 && s.version != other);
    json_object_put(s.copy);
    assert_int_equal(rk_store_view_touch(tc->st, "ghost", 1000, see, &s), 0);
    assert_int_equal(s.calls, calls + 2);
    assert_int_equal(s.rc, RK_STORE_NOT_FOUND);
    assert_int_equal(s.version, 0);
    assert_null(s.copy);
    assert_int_equal(rk_store_view_touch(tc->st, "", 1000, see, &s), -1);
}

/* CLOCK_MONOTONIC in ms. */
static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The reconciler lease: one owner at a time in a shared store, always granted in-process. */
static void test_lease(void **state)
{
    struct tctx *tc = *state;
    char err[RK_STORE_ERRLEN];
    assert_int_equal(rk_store_lease(tc->st, "reconciler", "a", 60000, err, sizeof err),
                     RK_STORE_OK);
    assert_int_equal(rk_store_lease(tc->st, "reconciler", "a", 60000, err, sizeof err),
                     RK_STORE_OK); /* renewal */
    rk_store_rc other = rk_store_lease(tc->st, "reconciler", "b", 60000, err, sizeof err);
    assert_int_equal(other, rk_store_is_shared(tc->st) ? RK_STORE_EXISTS : RK_STORE_OK);
    if (!rk_store_is_shared(tc->st))
        return;
    /* An expired lease goes to whoever asks next. */
    assert_int_equal(rk_store_lease(tc->st, "short", "a", 50, err, sizeof err), RK_STORE_OK);
    int64_t until = mono_ms() + 10000;
    rk_store_rc rc;
    while ((rc = rk_store_lease(tc->st, "short", "b", 60000, err, sizeof err)) == RK_STORE_EXISTS &&
           mono_ms() < until) {
        struct timespec pause = {0, 10 * 1000000L}; /* poll the observable state */
        nanosleep(&pause, NULL);
    }
    assert_int_equal(rc, RK_STORE_OK);
    assert_int_equal(rk_store_lease(tc->st, "short", "a", 60000, err, sizeof err), RK_STORE_EXISTS);
}

/* Claims are exclusive until their TTL passes. */
static void test_claim(void **state)
{
    struct tctx *tc = *state;
    char err[RK_STORE_ERRLEN];
    assert_int_equal(rk_store_claim(tc->st, "sweep:x", 1, err, sizeof err), RK_STORE_OK);
    assert_int_equal(rk_store_claim(tc->st, "sweep:x", 1, err, sizeof err), RK_STORE_EXISTS);
    assert_int_equal(rk_store_claim(tc->st, "sweep:y", 30, err, sizeof err), RK_STORE_OK);
    sleep_ms(1150);
    assert_int_equal(rk_store_claim(tc->st, "sweep:x", 30, err, sizeof err), RK_STORE_OK);
    assert_int_equal(rk_store_claim(tc->st, "sweep:y", 30, err, sizeof err), RK_STORE_EXISTS);
}

/* What the last cq_claim returned beside the ids: retaken, and the record's image ("(none)"
 * without a record). */
static int claimed_retaken[8];
static char claimed_image[8][32];

/* Claim up to want creates for owner at now (a 1.5 s lease, everyone's entries stealable after
 * steal ms); returns how many and copies their ids into ids (each < 32 bytes). */
static size_t cq_claim(struct rk_store *st, const char *owner, int64_t now, size_t want, int conc,
                       int rate, int steal, char ids[][32], size_t *requeued)
{
    char err[RK_STORE_ERRLEN];
    struct rk_createq_claim c = {.owner = owner,
                                 .now_ms = now,
                                 .lease_ms = 1500,
                                 .want = want,
                                 .concurrency = conc,
                                 .rate = rate,
                                 .steal_after_ms = steal};
    struct rk_createq_item *items = NULL;
    size_t n = 0;
    assert_int_equal(rk_createq_claim(st, &c, &items, &n, requeued, err, sizeof err), RK_STORE_OK);
    for (size_t i = 0; i < n; i++) {
        snprintf(ids[i], 32, "%s", items[i].id);
        claimed_retaken[i] = items[i].retaken;
        const char *image = items[i].rec ? member(items[i].rec, "image") : "(none)";
        snprintf(claimed_image[i], 32, "%s", image ? image : "(no image)");
    }
    rk_createq_free_items(items, n);
    return n;
}

/* The create queue: FIFO claims bounded by the concurrency, the rate and the capacity; an
 * expired claim is queued again at its place; cancel only while queued; done and release only
 * by the holder; another owner's young entries wait for the steal delay. */
static void test_create_queue(void **state)
{
    struct tctx *tc = *state;
    struct rk_store *st = tc->st;
    char err[RK_STORE_ERRLEN], ids[8][32];
    size_t q = 9, c = 9, requeued = 0;
    int64_t t = 1700000000000LL;
    assert_int_equal(rk_createq_depth(st, &q, &c, err, sizeof err), RK_STORE_OK);
    assert_true(q == 0 && c == 0);
    const char *names[] = {"c1", "c2", "c3", "c4"};
    for (int i = 0; i < 4; i++)
        assert_int_equal(rk_createq_push(st, names[i], "a", t + i, 4, err, sizeof err),
                         RK_STORE_OK);
    assert_int_equal(rk_createq_push(st, "c2", "a", t + 9, 4, err, sizeof err), RK_STORE_OK);
    assert_int_equal(rk_createq_push(st, "c5", "a", t + 9, 4, err, sizeof err), RK_STORE_FULL);
    /* Concurrency 2: the two oldest. */
    assert_int_equal(cq_claim(st, "a", t + 10, 8, 2, 0, 2000, ids, &requeued), 2);
    assert_string_equal(ids[0], "c1");
    assert_string_equal(ids[1], "c2");
    assert_int_equal(cq_claim(st, "a", t + 10, 8, 2, 0, 2000, ids, &requeued), 0);
    int where = -1;
    assert_int_equal(rk_createq_where(st, "c1", &where, err, sizeof err), RK_STORE_OK);
    assert_int_equal(where, 2);
    assert_int_equal(rk_createq_where(st, "c3", &where, err, sizeof err), RK_STORE_OK);
    assert_int_equal(where, 1);
    /* Cancel: only a queued entry. */
    assert_int_equal(rk_createq_cancel(st, "c1", err, sizeof err), RK_STORE_NOT_FOUND);
    assert_int_equal(rk_createq_cancel(st, "c3", err, sizeof err), RK_STORE_OK);
    assert_int_equal(rk_createq_where(st, "c3", &where, err, sizeof err), RK_STORE_OK);
    assert_int_equal(where, 0);
    /* Done and release belong to the holder. */
    assert_int_equal(rk_createq_done(st, "c1", "b", err, sizeof err), RK_STORE_CONFLICT);
    assert_int_equal(rk_createq_done(st, "c1", "a", err, sizeof err), RK_STORE_OK);
    assert_int_equal(rk_createq_release(st, "c2", "a", err, sizeof err), RK_STORE_OK);
    assert_int_equal(rk_createq_depth(st, &q, &c, err, sizeof err), RK_STORE_OK);
    assert_true(q == 2 && c == 0); /* c2 (back at its place), c4 */
    /* Another owner's young entries wait for the steal delay; old ones do not. */
    assert_int_equal(cq_claim(st, "b", t + 100, 8, 8, 0, 2000, ids, &requeued), 0);
    assert_int_equal(cq_claim(st, "b", t + 5000, 1, 8, 0, 2000, ids, &requeued), 1);
    assert_string_equal(ids[0], "c2");
    assert_int_equal(claimed_retaken[0], 0); /* released, not lapsed */
    assert_string_equal(claimed_image[0], "(none)");
    /* b's claim expires (1.5 s lease, not renewed): a later claim queues it again, first. */
    assert_int_equal(rk_createq_renew(st, "a", t + 99999, NULL, err, sizeof err), RK_STORE_OK);
    assert_int_equal(cq_claim(st, "a", t + 7000, 8, 8, 0, 2000, ids, &requeued), 2);
    assert_int_equal(requeued, 1);
    assert_string_equal(ids[0], "c2");
    assert_string_equal(ids[1], "c4");
    assert_int_equal(claimed_retaken[0], 1); /* b's claim lapsed: its create may have run */
    assert_int_equal(claimed_retaken[1], 0);
    size_t renewed = 0;
    assert_int_equal(rk_createq_renew(st, "a", t + 99999, &renewed, err, sizeof err), RK_STORE_OK);
    assert_int_equal(renewed, 2);
    assert_int_equal(rk_createq_done(st, "c2", "b", err, sizeof err), RK_STORE_CONFLICT);
    assert_int_equal(rk_createq_done(st, "c2", "a", err, sizeof err), RK_STORE_OK);
    assert_int_equal(rk_createq_done(st, "c4", "a", err, sizeof err), RK_STORE_OK);
    /* Rate: at most 2 claims in one wall-clock second. */
    for (int i = 0; i < 4; i++)
        assert_int_equal(rk_createq_push(st, names[i], "a", t + 8000 + i, 100, err, sizeof err),
                         RK_STORE_OK);
    assert_int_equal(cq_claim(st, "a", t + 9000, 8, 8, 2, 2000, ids, &requeued), 2);
    assert_int_equal(claimed_retaken[0] + claimed_retaken[1], 0); /* done forgot the mark */
    assert_int_equal(cq_claim(st, "a", t + 9500, 8, 8, 2, 2000, ids, &requeued), 0);
    assert_int_equal(cq_claim(st, "a", t + 10000, 8, 8, 2, 2000, ids, &requeued), 2);
    assert_int_equal(rk_createq_depth(st, &q, &c, err, sizeof err), RK_STORE_OK);
    assert_int_equal(q, 0);
    assert_int_equal(c, 4);
}

/* A claim first drops the claims its owner finished (done list), in the same step: their places
 * are free for the claim itself; an id the owner does not hold (queued, another's claim,
 * unknown) is left as it is; an invalid id is refused. */
static void test_create_queue_claim_drops_finished(void **state)
{
    struct tctx *tc = *state;
    struct rk_store *st = tc->st;
    char err[RK_STORE_ERRLEN];
    int64_t t = 1700000000000LL;
    const char *names[] = {"f1", "f2", "f3", "f4"};
    for (int i = 0; i < 4; i++)
        assert_int_equal(rk_createq_push(st, names[i], "a", t + i, 100, err, sizeof err),
                         RK_STORE_OK);
    struct rk_createq_claim c = {.owner = "a",
                                 .now_ms = t + 10,
                                 .lease_ms = 60000,
                                 .want = 8,
                                 .concurrency = 2,
                                 .steal_after_ms = 2000};
    struct rk_createq_item *items = NULL;
    size_t n = 0;
    assert_int_equal(rk_createq_claim(st, &c, &items, &n, NULL, err, sizeof err), RK_STORE_OK);
    assert_int_equal(n, 2); /* f1, f2: the concurrency is full */
    rk_createq_free_items(items, n);
    /* f1 finished; f3 is queued, not claimed; "nobody" is unknown: only f1's place frees. */
    const char *done[] = {"f1", "f3", "nobody"};
    c.done = done;
    c.n_done = 3;
    assert_int_equal(rk_createq_claim(st, &c, &items, &n, NULL, err, sizeof err), RK_STORE_OK);
    assert_int_equal(n, 1);
    assert_string_equal(items[0].id, "f3");
    rk_createq_free_items(items, n);
    int where = -1;
    assert_int_equal(rk_createq_where(st, "f1", &where, err, sizeof err), RK_STORE_OK);
    assert_int_equal(where, 0); /* dropped */
    assert_int_equal(rk_createq_where(st, "f2", &where, err, sizeof err), RK_STORE_OK);
    assert_int_equal(where, 2);
    /* Another owner's done list does not drop a's claim of f2. */
    const char *not_b[] = {"f2"};
    c.owner = "b";
    c.done = not_b;
    c.n_done = 1;
    c.now_ms = t + 5000;
    assert_int_equal(rk_createq_claim(st, &c, &items, &n, NULL, err, sizeof err), RK_STORE_OK);
    assert_int_equal(n, 0);
    assert_int_equal(rk_createq_where(st, "f2", &where, err, sizeof err), RK_STORE_OK);
    assert_int_equal(where, 2);
    /* A claim that only drops (want 0). */
    const char *a_done[] = {"f2", "f3"};
    c.owner = "a";
    c.done = a_done;
    c.n_done = 2;
    c.want = 0;
    assert_int_equal(rk_createq_claim(st, &c, &items, &n, NULL, err, sizeof err), RK_STORE_OK);
    assert_int_equal(n, 0);
    size_t q = 9, cl = 9;
    assert_int_equal(rk_createq_depth(st, &q, &cl, err, sizeof err), RK_STORE_OK);
    assert_int_equal(q, 1); /* f4 */
    assert_int_equal(cl, 0);
    const char *bad[] = {""};
    c.done = bad;
    c.n_done = 1;
    assert_int_equal(rk_createq_claim(st, &c, &items, &n, NULL, err, sizeof err), RK_STORE_ERROR);
    assert_non_null(strstr(err, "invalid sandbox id"));
}

/* Redis: while another admin has creates queued, an admin holds at most its share of the
 * concurrency: the places it gives back beyond its share go to the other admin, instead of that
 * one's creates waiting for the steal delay while the first keeps the whole concurrency. */
static void test_redis_claim_leaves_given_back_places_to_others(void **state)
{
    struct tctx *tc = *state;
    struct rk_store *st = tc->st;
    char err[RK_STORE_ERRLEN], ids[8][32];
    int64_t t = 1700000000000LL;
    for (int i = 0; i < 6; i++) {
        char id[16];
        snprintf(id, sizeof id, "a%d", i);
        assert_int_equal(rk_createq_push(st, id, "a", t + i, 100, err, sizeof err), RK_STORE_OK);
    }
    /* Alone, a takes the whole concurrency (4). */
    assert_int_equal(cq_claim(st, "a", t + 10, 8, 4, 0, 2000, ids, NULL), 4); /* a0..a3 */
    assert_int_equal(rk_createq_push(st, "b0", "b", t + 20, 100, err, sizeof err), RK_STORE_OK);
    assert_int_equal(rk_createq_push(st, "b1", "b", t + 21, 100, err, sizeof err), RK_STORE_OK);
    /* a finished a0 and a1 while b waits: a holds 2 = its share, so it claims nothing more. */
    const char *done[] = {"a0", "a1"};
    struct rk_createq_claim c = {.owner = "a",
                                 .now_ms = t + 30,
                                 .lease_ms = 60000,
                                 .want = 8,
                                 .concurrency = 4,
                                 .steal_after_ms = 2000,
                                 .done = done,
                                 .n_done = 2};
    struct rk_createq_item *items = NULL;
    size_t n = 9;
    assert_int_equal(rk_createq_claim(st, &c, &items, &n, NULL, err, sizeof err), RK_STORE_OK);
    assert_int_equal(n, 0);
    /* b's claim gets the two places. */
    assert_int_equal(cq_claim(st, "b", t + 40, 8, 4, 0, 2000, ids, NULL), 2);
    assert_string_equal(ids[0], "b0");
    assert_string_equal(ids[1], "b1");
    /* With nobody else waiting, a's given-back place is a's again at once. */
    const char *done2[] = {"a2"};
    c.done = done2;
    c.n_done = 1;
    c.now_ms = t + 50;
    assert_int_equal(rk_createq_claim(st, &c, &items, &n, NULL, err, sizeof err), RK_STORE_OK);
    assert_int_equal(n, 1);
    assert_string_equal(items[0].id, "a4");
    rk_createq_free_items(items, n);
}

/* A new record and its queued create in one step: both stored; an active id changes nothing;
 * a full queue keeps the record (the caller fails it) and queues nothing. */
static void test_create_queued_record(void **state)
{
    struct tctx *tc = *state;
    struct rk_store *st = tc->st;
    char err[RK_STORE_ERRLEN], ids[8][32];
    size_t q = 9, c = 9, requeued = 0;
    int64_t t = 1700000000000LL;
    int where = -1;
    json_object *rec = mkrec("pending", "img:1"), *got = NULL;
    assert_int_equal(rk_createq_create(st, "n1", rec, 1000, "a", t, 2, err, sizeof err),
                     RK_STORE_OK);
    assert_int_equal(rk_store_get(st, "n1", &got, err, sizeof err), RK_STORE_OK);
    assert_string_equal(member(got, "image"), "img:1");
    json_object_put(got);
    assert_int_equal(rk_createq_where(st, "n1", &where, err, sizeof err), RK_STORE_OK);
    assert_int_equal(where, 1);
    /* The id is active: nothing is written, nothing queued twice. */
    json_object *other = mkrec("pending", "img:2");
    assert_int_equal(rk_createq_create(st, "n1", other, 1000, "a", t + 1, 2, err, sizeof err),
                     RK_STORE_EXISTS);
    assert_int_equal(rk_store_get(st, "n1", &got, err, sizeof err), RK_STORE_OK);
    assert_string_equal(member(got, "image"), "img:1");
    json_object_put(got);
    assert_int_equal(rk_createq_depth(st, &q, &c, err, sizeof err), RK_STORE_OK);
    assert_true(q == 1 && c == 0);
    /* Capacity 2: the second fits, the third is stored but not queued. */
    assert_int_equal(rk_createq_create(st, "n2", rec, 1000, "a", t + 2, 2, err, sizeof err),
                     RK_STORE_OK);
    assert_int_equal(rk_createq_create(st, "n3", other, 1000, "a", t + 3, 2, err, sizeof err),
                     RK_STORE_FULL);
    assert_int_equal(rk_store_get(st, "n3", &got, err, sizeof err), RK_STORE_OK);
    assert_string_equal(member(got, "image"), "img:2");
    json_object_put(got);
    assert_int_equal(rk_createq_where(st, "n3", &where, err, sizeof err), RK_STORE_OK);
    assert_int_equal(where, 0);
    /* What was queued is claimed in order, as pushed creates are. */
    assert_int_equal(cq_claim(st, "a", t + 10, 8, 8, 0, 2000, ids, &requeued), 2);
    assert_string_equal(ids[0], "n1");
    assert_string_equal(ids[1], "n2");
    assert_string_equal(claimed_image[0], "img:1"); /* the record, read by the claim */
    assert_string_equal(claimed_image[1], "img:1");
    json_object_put(rec);
    json_object_put(other);
}

/* rk_store_view_many's callback: note what it saw, keep the records of state "pending". */
struct viewed {
    int seen[4];
    char images[4][16];
};

static int note_view(void *ctx, size_t i, json_object *rec)
{
    struct viewed *v = ctx;
    v->seen[i]++;
    snprintf(v->images[i], sizeof v->images[i], "%s", rec ? member(rec, "image") : "-");
    return rec && strcmp(member(rec, "state"), "pending") == 0;
}

/* The reconciler's read: every record shown once (none: NULL), only the kept ones copied, and a
 * kept copy is the caller's (changing it changes nothing stored). */
static void test_view_many(void **state)
{
    struct tctx *tc = *state;
    char err[RK_STORE_ERRLEN];
    create_expect(tc->st, "v1", "running", "img-a", 0, RK_STORE_OK);
    create_expect(tc->st, "v2", "pending", "img-b", 0, RK_STORE_OK);
    create_expect(tc->st, "v4", "pending", "img-d", 0, RK_STORE_OK);
    const char *ids[] = {"v1", "v2", "v3", "v4"};
    json_object *kept[4];
    struct viewed v;
    memset(&v, 0, sizeof v);
    assert_int_equal(rk_store_view_many(tc->st, ids, 4, note_view, &v, kept, err, sizeof err),
                     RK_STORE_OK);
    for (int i = 0; i < 4; i++)
        assert_int_equal(v.seen[i], 1);
    assert_string_equal(v.images[0], "img-a");
    assert_string_equal(v.images[2], "-");
    assert_null(kept[0]);
    assert_null(kept[2]);
    assert_non_null(kept[1]);
    assert_string_equal(member(kept[1], "image"), "img-b");
    assert_string_equal(member(kept[3], "image"), "img-d");
    json_object_object_add(kept[1], "image", json_object_new_string("changed"));
    json_object *got = NULL;
    assert_int_equal(rk_store_get(tc->st, "v2", &got, err, sizeof err), RK_STORE_OK);
    assert_string_equal(member(got, "image"), "img-b");
    json_object_put(got);
    json_object_put(kept[1]);
    json_object_put(kept[3]);
    /* without a place to keep them, nothing is copied */
    assert_int_equal(rk_store_view_many(tc->st, ids, 4, note_view, &v, NULL, err, sizeof err),
                     RK_STORE_OK);
    assert_int_equal(v.seen[3], 2);
}

/* What test_scan_many saw of each record: its image, and whether as text or as a tree. */
struct scanned_seen {
    int seen[5];
    int as_text[5];
    char images[5][16];
};

static void note_scan(void *ctx, size_t i, const struct rk_store_found *found)
{
    struct scanned_seen *v = ctx;
    v->seen[i]++;
    if (!found) {
        snprintf(v->images[i], sizeof v->images[i], "-");
        return;
    }
    v->as_text[i] = !found->rec;
    json_object *tree = rk_store_found_tree(found);
    assert_non_null(tree);
    snprintf(v->images[i], sizeof v->images[i], "%s", member(tree, "image"));
    if (!found->rec) { /* the scanned members are the text's */
        const struct rku_json_span *img = rku_json_member_get(found->m, found->n, "image");
        assert_non_null(img);
        assert_int_equal(img->n, strlen(member(tree, "image")));
        assert_memory_equal(img->p, member(tree, "image"), img->n);
    }
    json_object_put(tree);
}

/* The reconciler's glance read: every record shown once (none: NULL); Redis shows a record of
 * json-c's form as its scanned text and any other one parsed. */
static void test_scan_many(void **state)
{
    struct tctx *tc = *state;
    char err[RK_STORE_ERRLEN];
    create_expect(tc->st, "s1", "running", "img-a", 0, RK_STORE_OK);
    create_expect(tc->st, "s2", "pending", "img-b", 0, RK_STORE_OK);
    create_expect(tc->st, "s4", "pending", "img-d", 0, RK_STORE_OK);
    create_expect(tc->st, "s5", "pending", "img-e", 0, RK_STORE_OK);
    if (tc->kind == BACKEND_REDIS) { /* a record not of json-c's form (spaces): parsed */
        char key[128];
        snprintf(key, sizeof key, "%ssandbox:s5", tc->prefix);
        redisContext *c = raw_conn(g_redis.port);
        redisReply *r =
            redisCommand(c, "SET %s %s", key, "{ \"state\": \"pending\", \"image\": \"img-e\" }");
        freeReplyObject(r);
        redisFree(c);
    }
    const char *ids[] = {"s1", "s2", "s3", "s4", "s5"};
    struct scanned_seen v;
    memset(&v, 0, sizeof v);
    assert_int_equal(rk_store_scan_many(tc->st, ids, 5, note_scan, &v, err, sizeof err),
                     RK_STORE_OK);
    static const char *const want[] = {"img-a", "img-b", "-", "img-d", "img-e"};
    for (int i = 0; i < 5; i++) {
        assert_int_equal(v.seen[i], 1);
        assert_string_equal(v.images[i], want[i]);
    }
    int redis = tc->kind == BACKEND_REDIS;
    assert_int_equal(v.as_text[0], redis);
    assert_int_equal(v.as_text[1], redis);
    assert_int_equal(v.as_text[3], redis);
    assert_int_equal(v.as_text[4], 0);
    const char *bad[] = {"s1", ""};
    assert_int_equal(rk_store_scan_many(tc->st, bad, 2, note_scan, &v, err, sizeof err),
                     RK_STORE_ERROR);
}

/* B90: a second reserve of the same name fails. */
static void test_b90_reserve_is_exclusive(void **state)
{
    struct tctx *tc = *state;
    char err[RK_STORE_ERRLEN], t1[64], t2[64];
    assert_int_equal(rk_session_reserve(tc->st, "sbx-1", "default", 120, t1, err, sizeof err),
                     RK_STORE_OK);
    assert_int_equal(strlen(t1), 32);
    assert_int_equal(strspn(t1, "0123456789abcdef"), 32);
    assert_int_equal(rk_session_reserve(tc->st, "sbx-1", "default", 120, t2, err, sizeof err),
                     RK_STORE_EXISTS);
    assert_string_equal(t2, "");
    assert_int_equal(rk_session_reserve(tc->st, "sbx-1", "other", 120, t2, err, sizeof err),
                     RK_STORE_OK);
    assert_string_not_equal(t1, t2);
}

/* B91: reservations are invisible; commit makes the id visible. */
static void test_b91_commit_makes_visible(void **state)
{
    struct tctx *tc = *state;
    char err[RK_STORE_ERRLEN], tok[64];
    char *sid = NULL;
    assert_int_equal(rk_session_reserve(tc->st, "sbx-1", "default", 120, tok, err, sizeof err),
                     RK_STORE_OK);
    assert_int_equal(rk_session_get(tc->st, "sbx-1", "default", &sid, err, sizeof err),
                     RK_STORE_NOT_FOUND);
    assert_null(sid);
    size_t n = 0;
    assert_int_equal(rk_session_count(tc->st, "sbx-1", &n, err, sizeof err), RK_STORE_OK);
    assert_int_equal(n, 1);
    assert_int_equal(
        rk_session_commit(tc->st, "sbx-1", "default", tok, "os-session-1", err, sizeof err),
        RK_STORE_OK);
    assert_int_equal(rk_session_get(tc->st, "sbx-1", "default", &sid, err, sizeof err),
                     RK_STORE_OK);
    assert_string_equal(sid, "os-session-1");
    free(sid);
    /* A committed mapping blocks new reservations even with TTL 0. */
    assert_int_equal(rk_session_reserve(tc->st, "sbx-1", "default", 0, tok, err, sizeof err),
                     RK_STORE_EXISTS);
    /* The token is spent: committing again conflicts. */
    assert_int_equal(rk_session_commit(tc->st, "sbx-1", "default", "0123", "os-x", err, sizeof err),
                     RK_STORE_CONFLICT);
}

/* B92: rollback releases the name. */
static void test_b92_rollback_releases(void **state)
{
    struct tctx *tc = *state;
    char err[RK_STORE_ERRLEN], tok[64];
    size_t n = 9;
    assert_int_equal(rk_session_reserve(tc->st, "sbx-1", "default", 120, tok, err, sizeof err),
                     RK_STORE_OK);
    assert_int_equal(rk_session_rollback(tc->st, "sbx-1", "default", tok, err, sizeof err),
                     RK_STORE_OK);
    assert_int_equal(rk_session_count(tc->st, "sbx-1", &n, err, sizeof err), RK_STORE_OK);
    assert_int_equal(n, 0);
    assert_int_equal(rk_session_rollback(tc->st, "sbx-1", "default", tok, err, sizeof err),
                     RK_STORE_CONFLICT);
    assert_int_equal(rk_session_commit(tc->st, "sbx-1", "default", tok, "late", err, sizeof err),
                     RK_STORE_CONFLICT);
    assert_int_equal(rk_session_reserve(tc->st, "sbx-1", "default", 120, tok, err, sizeof err),
                     RK_STORE_OK);
}

/* Reserve and commit name -> sid. */
static void map_session(struct rk_store *st, const char *sbx, const char *name, const char *sid)
{
    char err[RK_STORE_ERRLEN], tok[64];
    assert_int_equal(rk_session_reserve(st, sbx, name, 120, tok, err, sizeof err), RK_STORE_OK);
    assert_int_equal(rk_session_commit(st, sbx, name, tok, sid, err, sizeof err), RK_STORE_OK);
}

/* Assert the committed mapping of name (NULL = none). */
static void expect_session(struct rk_store *st, const char *sbx, const char *name, const char *want)
{
    char err[RK_STORE_ERRLEN];
    char *sid = NULL;
    rk_store_rc rc = rk_session_get(st, sbx, name, &sid, err, sizeof err);
    if (!want) {
        assert_int_equal(rc, RK_STORE_NOT_FOUND);
        return;
    }
    assert_int_equal(rc, RK_STORE_OK);
    assert_string_equal(sid, want);
    free(sid);
}

/* B93 + B94: remove deletes only the expected mapping. */
static void test_b93_b94_remove(void **state)
{
    struct tctx *tc = *state;
    char err[RK_STORE_ERRLEN];
    map_session(tc->st, "sbx-1", "default", "os-session-1");
    assert_int_equal(rk_session_remove(tc->st, "sbx-1", "default", "os-session-1", err, sizeof err),
                     RK_STORE_OK);
    expect_session(tc->st, "sbx-1", "default", NULL);
    assert_int_equal(rk_session_remove(tc->st, "sbx-1", "default", "os-session-1", err, sizeof err),
                     RK_STORE_NOT_FOUND);

    map_session(tc->st, "sbx-1", "default", "old-session");
    assert_int_equal(rk_session_remove(tc->st, "sbx-1", "default", "old-session", err, sizeof err),
                     RK_STORE_OK);
    map_session(tc->st, "sbx-1", "default", "new-session");
    assert_int_equal(rk_session_remove(tc->st, "sbx-1", "default", "old-session", err, sizeof err),
                     RK_STORE_CONFLICT);
    expect_session(tc->st, "sbx-1", "default", "new-session");

    /* A reservation is never removed by remove. */
    char tok[64];
    assert_int_equal(rk_session_reserve(tc->st, "sbx-1", "w", 120, tok, err, sizeof err),
                     RK_STORE_OK);
    assert_int_equal(rk_session_remove(tc->st, "sbx-1", "w", tok, err, sizeof err),
                     RK_STORE_CONFLICT);
}

/* B95: clear affects one sandbox only. */
static void test_b95_clear(void **state)
{
    struct tctx *tc = *state;
    char err[RK_STORE_ERRLEN];
    size_t n = 0;
    map_session(tc->st, "sbx-1", "default", "os-session-1");
    map_session(tc->st, "sbx-1", "worker", "os-session-2");
    map_session(tc->st, "sbx-2", "default", "os-session-3");
    assert_int_equal(rk_session_count(tc->st, "sbx-1", &n, err, sizeof err), RK_STORE_OK);
    assert_int_equal(n, 2);
    assert_int_equal(rk_session_clear(tc->st, "sbx-1", err, sizeof err), RK_STORE_OK);
    expect_session(tc->st, "sbx-1", "default", NULL);
    expect_session(tc->st, "sbx-1", "worker", NULL);
    expect_session(tc->st, "sbx-2", "default", "os-session-3");
    assert_int_equal(rk_session_count(tc->st, "sbx-1", &n, err, sizeof err), RK_STORE_OK);
    assert_int_equal(n, 0);
    assert_int_equal(rk_session_clear(tc->st, "sbx-1", err, sizeof err), RK_STORE_OK);
}

/* take_all frees every name of one sandbox and hands back the committed session ids only. */
static void test_session_take_all(void **state)
{
    struct tctx *tc = *state;
    char err[RK_STORE_ERRLEN], tok[64];
    char **ids = NULL;
    size_t n = 9;
    map_session(tc->st, "sbx-1", "default", "os-session-1");
    map_session(tc->st, "sbx-1", "worker", "os-session-2");
    map_session(tc->st, "sbx-2", "default", "os-session-3");
    assert_int_equal(rk_session_reserve(tc->st, "sbx-1", "pending", 120, tok, err, sizeof err),
                     RK_STORE_OK);
    assert_int_equal(rk_session_take_all(tc->st, "sbx-1", &ids, &n, err, sizeof err), RK_STORE_OK);
    assert_int_equal(n, 2);
    int one = strcmp(ids[0], "os-session-1") == 0 || strcmp(ids[1], "os-session-1") == 0;
    int two = strcmp(ids[0], "os-session-2") == 0 || strcmp(ids[1], "os-session-2") == 0;
    assert_true(one && two);
    rk_store_free_ids(ids, n);
    expect_session(tc->st, "sbx-1", "default", NULL);
    assert_int_equal(rk_session_count(tc->st, "sbx-1", &n, err, sizeof err), RK_STORE_OK);
    assert_int_equal(n, 0); /* the reservation went too: its commit now conflicts */
    assert_int_equal(
        rk_session_commit(tc->st, "sbx-1", "pending", tok, "os-session-4", err, sizeof err),
        RK_STORE_CONFLICT);
    expect_session(tc->st, "sbx-2", "default", "os-session-3");
    assert_int_equal(rk_session_reserve(tc->st, "sbx-1", "default", 120, tok, err, sizeof err),
                     RK_STORE_OK); /* the name is free again */
    assert_int_equal(rk_session_take_all(tc->st, "sbx-9", &ids, &n, err, sizeof err), RK_STORE_OK);
    assert_int_equal(n, 0);
    rk_store_free_ids(ids, n);
}

/* B97 + B98: TTL 0 reservations are reclaimed; stale owners lose. */
static void test_b97_b98_reclaim(void **state)
{
    struct tctx *tc = *state;
    char err[RK_STORE_ERRLEN], t1[64], t2[64];
    assert_int_equal(rk_session_reserve(tc->st, "sbx-1", "default", 0, t1, err, sizeof err),
                     RK_STORE_OK);
    sleep_ms(2);
    assert_int_equal(rk_session_reserve(tc->st, "sbx-1", "default", 0, t2, err, sizeof err),
                     RK_STORE_OK);
    assert_string_not_equal(t1, t2);
    assert_int_equal(
        rk_session_commit(tc->st, "sbx-1", "default", t1, "stale-session", err, sizeof err),
        RK_STORE_CONFLICT);
    assert_int_equal(rk_session_rollback(tc->st, "sbx-1", "default", t1, err, sizeof err),
                     RK_STORE_CONFLICT);
    assert_int_equal(
        rk_session_commit(tc->st, "sbx-1", "default", t2, "current-session", err, sizeof err),
        RK_STORE_OK);
    expect_session(tc->st, "sbx-1", "default", "current-session");
}

/* B99: conditional set (absent only) and conditional delete (value equals). */
static void test_b99_conditional(void **state)
{
    struct tctx *tc = *state;
    char err[RK_STORE_ERRLEN], tok[64];
    map_session(tc->st, "sbx-1", "default", "os-session-1");
    assert_int_equal(rk_session_reserve(tc->st, "sbx-1", "default", 120, tok, err, sizeof err),
                     RK_STORE_EXISTS);
    expect_session(tc->st, "sbx-1", "default", "os-session-1");
    assert_int_equal(rk_session_remove(tc->st, "sbx-1", "default", "os-session-1", err, sizeof err),
                     RK_STORE_OK);
    expect_session(tc->st, "sbx-1", "default", NULL);
}

/* Registry value rules shared by both backends (U29: unparsable = live). */
static void test_registry_value_rules(void **state)
{
    (void)state;
    assert_true(rk_store_value_blocks("s:os-1", 0));
    assert_true(rk_store_value_blocks("r:abc:2000", 1999));
    assert_false(rk_store_value_blocks("r:abc:2000", 2000));
    assert_false(rk_store_value_blocks("r:abc:2000", 5000));
    assert_true(rk_store_value_blocks("r:abc:soon", 5000));
    assert_true(rk_store_value_blocks("r:abc:", 5000));
    assert_true(rk_store_value_blocks("r:abc", 5000));
    assert_true(rk_store_value_blocks("r:abc:-1", 5000));
    assert_true(rk_store_value_blocks("x:abc:1", 5000));
    assert_true(rk_store_value_is_reservation_of("r:abc:1", "abc"));
    assert_false(rk_store_value_is_reservation_of("r:abcd:1", "abc"));
    assert_false(rk_store_value_is_reservation_of("s:abc:1", "abc"));
}

/* Invalid arguments are refused with a message and counted. */
static void test_invalid_arguments(void **state)
{
    struct tctx *tc = *state;
    char err[RK_STORE_ERRLEN], tok[64];
    char long_id[RK_STORE_MAX_NAME + 2];
    memset(long_id, 'x', sizeof long_id - 1);
    long_id[sizeof long_id - 1] = '\0';
    json_object *out = NULL;
    uint64_t before = rk_store_error_count(tc->st);
    assert_int_equal(rk_store_get(tc->st, "", &out, err, sizeof err), RK_STORE_ERROR);
    assert_non_null(strstr(err, "invalid"));
    assert_int_equal(rk_store_get(tc->st, long_id, &out, err, sizeof err), RK_STORE_ERROR);
    assert_int_equal(rk_session_reserve(tc->st, "sbx", NULL, 1, tok, err, sizeof err),
                     RK_STORE_ERROR);
    assert_int_equal(rk_session_commit(tc->st, "sbx", "n", "a:b", "sid", NULL, 0), RK_STORE_ERROR);
    assert_int_equal(rk_store_error_count(tc->st), before + 4);
}

/* Arguments of a concurrency worker thread. */
struct worker {
    struct rk_store *st;
    int iterations;
    int ok;
    int exists;
    int contention;
    int other;
};

/* Reserve the same name repeatedly, counting outcomes. */
static void *reserve_worker(void *arg)
{
    struct worker *w = arg;
    char err[RK_STORE_ERRLEN], tok[64];
    for (int i = 0; i < w->iterations; i++) {
        rk_store_rc rc = rk_session_reserve(w->st, "sbx-c", "shared", 120, tok, err, sizeof err);
        if (rc == RK_STORE_OK)
            w->ok++;
        else if (rc == RK_STORE_EXISTS)
            w->exists++;
        else
            w->other++;
    }
    return NULL;
}

/* Increment a counter record repeatedly, counting outcomes. */
static void *update_worker(void *arg)
{
    struct worker *w = arg;
    char err[RK_STORE_ERRLEN];
    for (int i = 0; i < w->iterations; i++) {
        rk_store_rc rc = rk_store_update(w->st, "counter", increment, NULL, NULL, err, sizeof err);
        if (rc == RK_STORE_OK)
            w->ok++;
        else if (rc == RK_STORE_ERROR && strstr(err, "store contention"))
            w->contention++;
        else
            w->other++;
    }
    return NULL;
}

#define NTHREADS 8
#define NSTORES 4

/* Run fn on NTHREADS threads; Redis threads share NSTORES separate stores. */
static void run_workers(struct tctx *tc, void *(*fn)(void *), int iterations, struct worker *sum)
{
    struct rk_store *stores[NSTORES] = {NULL};
    struct worker w[NTHREADS];
    pthread_t th[NTHREADS];
    for (int i = 0; i < NSTORES; i++)
        stores[i] = tc->kind == BACKEND_REDIS ? open_kind(tc) : NULL;
    for (int i = 0; i < NTHREADS; i++) {
        memset(&w[i], 0, sizeof w[i]);
        w[i].st = tc->kind == BACKEND_REDIS ? stores[i % NSTORES] : tc->st;
        assert_non_null(w[i].st);
        w[i].iterations = iterations;
        assert_int_equal(pthread_create(&th[i], NULL, fn, &w[i]), 0);
    }
    memset(sum, 0, sizeof *sum);
    for (int i = 0; i < NTHREADS; i++) {
        pthread_join(th[i], NULL);
        sum->ok += w[i].ok;
        sum->exists += w[i].exists;
        sum->contention += w[i].contention;
        sum->other += w[i].other;
    }
    for (int i = 0; i < NSTORES; i++)
        rk_store_close(stores[i]);
}

/* 8 threads x 50 reserves of one name: exactly one success. */
static void test_concurrent_reserve(void **state)
{
    struct tctx *tc = *state;
    struct worker sum;
    run_workers(tc, reserve_worker, 50, &sum);
    assert_int_equal(sum.ok, 1);
    assert_int_equal(sum.exists, NTHREADS * 50 - 1);
    assert_int_equal(sum.other, 0);
}

/* Concurrent read-modify-write loses no update. */
static void test_concurrent_update(void **state)
{
    struct tctx *tc = *state;
    char err[RK_STORE_ERRLEN];
    create_expect(tc->st, "counter", "running", "c", 0, RK_STORE_OK);
    struct worker sum;
    run_workers(tc, update_worker, 25, &sum);
    print_message("%d updates written, %d gave up after %d attempts\n", sum.ok, sum.contention,
                  RK_STORE_MAX_ATTEMPTS);
    assert_int_equal(sum.other, 0);
    assert_int_equal(sum.ok + sum.contention, NTHREADS * 25);
    assert_true(sum.ok > 0);
    json_object *got = NULL;
    assert_int_equal(rk_store_get(tc->st, "counter", &got, err, sizeof err), RK_STORE_OK);
    json_object *n = NULL;
    assert_true(json_object_object_get_ex(got, "n", &n));
    assert_int_equal(json_object_get_int64(n), sum.ok);
    json_object_put(got);
}

/* B96: the registry key is <prefix>sessions:<sandbox id>; the record layout too. */
static void test_redis_key_layout(void **state)
{
    (void)state;
    char err[RK_STORE_ERRLEN], tok[64];
    struct rk_store *st = open_redis(g_redis.port, NULL, "opensandbox:", 2);
    assert_non_null(st);
    assert_int_equal(rk_session_reserve(st, "sbx-1", "default", 120, tok, err, sizeof err),
                     RK_STORE_OK);
    create_expect(st, "sbx-k", "running", "img", 77, RK_STORE_OK);
    redisContext *c = raw_conn(g_redis.port);
    redisReply *r = redisCommand(c, "TYPE opensandbox:sessions:sbx-1");
    assert_string_equal(r->str, "hash");
    freeReplyObject(r);
    r = redisCommand(c, "HGET opensandbox:sessions:sbx-1 default");
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    assert_int_equal(strncmp(r->str, "r:", 2), 0);
    assert_non_null(strstr(r->str, tok));
    freeReplyObject(r);
    r = redisCommand(c, "TTL opensandbox:sessions:sbx-1");
    assert_int_equal(r->integer, -1);
    freeReplyObject(r);
    r = redisCommand(c, "ZSCORE opensandbox:expire sbx-k");
    assert_string_equal(r->str, "77");
    freeReplyObject(r);
    r = redisCommand(c, "SISMEMBER opensandbox:active sbx-k");
    assert_int_equal(r->integer, 1);
    freeReplyObject(r);
    r = redisCommand(c, "DEL opensandbox:sessions:sbx-1 opensandbox:sandbox:sbx-k "
                        "opensandbox:active opensandbox:expire");
    freeReplyObject(r);
    redisFree(c);
    rk_store_close(st);
}

/* U29: a reservation whose deadline cannot be parsed is live forever. */
static void test_redis_unparsable_reservation(void **state)
{
    struct tctx *tc = *state;
    char err[RK_STORE_ERRLEN], tok[64], key[128];
    snprintf(key, sizeof key, "%ssessions:sbx-1", tc->prefix);
    redisContext *c = raw_conn(g_redis.port);
    redisReply *r = redisCommand(c, "HSET %s default r:feed:garbage", key);
    freeReplyObject(r);
    assert_int_equal(rk_session_reserve(tc->st, "sbx-1", "default", 0, tok, err, sizeof err),
                     RK_STORE_EXISTS);
    r = redisCommand(c, "HSET %s default r:feed:1000", key);
    freeReplyObject(r);
    assert_int_equal(rk_session_reserve(tc->st, "sbx-1", "default", 0, tok, err, sizeof err),
                     RK_STORE_OK);
    redisFree(c);
}

/* State of the conflicting callback: counts calls, rewrites the key each time. */
struct conflict_ctx {
    redisContext *c;
    const char *key;
    int calls;
};

/* Update callback that changes the watched key behind the store's back. */
static int conflicting(json_object *rec, void *arg)
{
    struct conflict_ctx *cc = arg;
    cc->calls++;
    redisReply *r =
        redisCommand(cc->c, "SET %s {\"state\":\"running\",\"x\":%d}", cc->key, cc->calls);
    freeReplyObject(r);
    json_object_object_add(rec, "mine", json_object_new_boolean(1));
    return 0;
}

/* B100: a WATCH conflict on every EXEC gives exactly 5 attempts, then an error. */
static void test_redis_watch_retries(void **state)
{
    struct tctx *tc = *state;
    char err[RK_STORE_ERRLEN], key[128];
    create_expect(tc->st, "w-1", "running", "img", 0, RK_STORE_OK);
    snprintf(key, sizeof key, "%ssandbox:w-1", tc->prefix);
    struct conflict_ctx cc = {raw_conn(g_redis.port), key, 0};
    uint64_t before = rk_store_error_count(tc->st);
    json_object *out = NULL;
    assert_int_equal(rk_store_update(tc->st, "w-1", conflicting, &cc, &out, err, sizeof err),
                     RK_STORE_ERROR);
    assert_null(out);
    assert_int_equal(cc.calls, 5);
    assert_string_equal(err, "store contention: too many concurrent updates");
    assert_int_equal(rk_store_error_count(tc->st), before + 1);
    redisFree(cc.c);
    json_object *got = NULL;
    assert_int_equal(rk_store_get(tc->st, "w-1", &got, err, sizeof err), RK_STORE_OK);
    assert_null(member(got, "mine"));
    json_object_put(got);
}

/* A batch whose record another client changes between the read and the write: the block
 * writes nothing, and each update is done again on its own over what is stored then. ctx: a
 * conflict_ctx whose key is rewritten once (none when c is NULL). */
static int batch_conflicting(json_object *rec, void *arg)
{
    struct conflict_ctx *bc = arg;
    if (bc->calls++ == 0 && bc->c) { /* once: the first attempt's read is stale now */
        redisReply *r =
            redisCommand(bc->c, "SET %s {\"state\":\"pending\",\"image\":\"new\"}", bc->key);
        freeReplyObject(r);
    }
    json_object_object_add(rec, "state", json_object_new_string("running"));
    return 0;
}

static void test_redis_update_many_conflict(void **state)
{
    struct tctx *tc = *state;
    char err[RK_STORE_ERRLEN], key[128];
    create_expect(tc->st, "c-1", "pending", "img", 0, RK_STORE_OK);
    create_expect(tc->st, "c-2", "pending", "img", 0, RK_STORE_OK);
    snprintf(key, sizeof key, "%ssandbox:c-1", tc->prefix);
    struct conflict_ctx bc = {raw_conn(g_redis.port), key, 0}, quiet = {NULL, NULL, 0};
    const char *ids[] = {"c-1", "c-2"};
    void *ctxs[] = {&bc, &quiet};
    rk_store_rc rcs[2];
    assert_int_equal(
        rk_store_update_many(tc->st, ids, 2, NULL, batch_conflicting, ctxs, rcs, err, sizeof err),
        RK_STORE_OK);
    assert_int_equal(rcs[0], RK_STORE_OK);
    assert_int_equal(rcs[1], RK_STORE_OK);
    assert_int_equal(bc.calls, 2);    /* the batch, then its own update */
    assert_int_equal(quiet.calls, 2); /* the batch wrote nothing: c-2 again too */
    redisFree(bc.c);
    json_object *got = NULL;
    assert_int_equal(rk_store_get(tc->st, "c-1", &got, err, sizeof err), RK_STORE_OK);
    assert_string_equal(member(got, "state"), "running");
    assert_string_equal(member(got, "image"), "new"); /* applied over the other client's write */
    json_object_put(got);
    assert_int_equal(rk_store_get(tc->st, "c-2", &got, err, sizeof err), RK_STORE_OK);
    assert_string_equal(member(got, "state"), "running");
    json_object_put(got);
}

/* One thread of test_redis_updates_written_together: its own kind of update, repeated. */
struct grouped {
    struct rk_store *st;
    pthread_barrier_t *go;
    int t;                /* the thread's number */
    int ok, other, wrong; /* outcomes as expected, and not */
};

/* Threads 0-31 increment g-<t % 16> (two threads per record), 32-35 update a record that does
 * not exist, 36-39 decline, 40-43 fail: each checks its own outcome and text. */
static void *grouped_worker(void *arg)
{
    struct grouped *g = arg;
    char id[32], err[RK_STORE_ERRLEN];
    int kind = g->t < 32 ? 0 : 1 + (g->t - 32) / 4;
    snprintf(id, sizeof id, kind == 1 ? "g-missing-%d" : "g-%d", g->t % 16);
    pthread_barrier_wait(g->go);
    for (int i = 0; i < 40; i++) {
        err[0] = 0;
        rk_store_update_fn fn = kind == 2 ? decline : kind == 3 ? explode : increment;
        rk_store_rc rc = rk_store_update(g->st, id, fn, NULL, NULL, err, sizeof err);
        rk_store_rc want = kind == 0   ? RK_STORE_OK
                           : kind == 1 ? RK_STORE_NOT_FOUND
                           : kind == 2 ? RK_STORE_ABORTED
                                       : RK_STORE_ERROR;
        int text_ok = kind != 3 || (strstr(err, "update callback failed for") && strstr(err, id));
        if (rc == want && text_ok)
            g->ok++;
        else if (rc == RK_STORE_ERROR && strstr(err, "store contention"))
            g->other++; /* gave up after RK_STORE_MAX_ATTEMPTS: counted, not written */
        else
            g->wrong++;
    }
    return NULL;
}

/* The calls of one Redis command since the last CONFIG RESETSTAT. */
static long long command_calls(redisContext *c, const char *cmd)
{
    redisReply *r = redisCommand(c, "INFO commandstats");
    assert_non_null(r);
    char pat[64];
    snprintf(pat, sizeof pat, "cmdstat_%s:calls=", cmd);
    const char *at = r->type == REDIS_REPLY_STRING ? strstr(r->str, pat) : NULL;
    long long n = at ? atoll(at + strlen(pat)) : 0;
    freeReplyObject(r);
    return n;
}

/* Single updates made at the same moment by many threads of one admin are written together:
 * fewer MULTI blocks than updates, no update of a record lost (two threads per record), and
 * every caller gets its own outcome and failure text. */
static void test_redis_updates_written_together(void **state)
{
    struct tctx *tc = *state;
    char err[RK_STORE_ERRLEN], id[32];
    for (int r = 0; r < 16; r++) {
        snprintf(id, sizeof id, "g-%d", r);
        create_expect(tc->st, id, "running", "img", 0, RK_STORE_OK);
    }
    enum { NG = 44 };
    struct grouped g[NG];
    pthread_t th[NG];
    pthread_barrier_t go;
    assert_int_equal(pthread_barrier_init(&go, NULL, NG), 0);
    redisContext *c = raw_conn(g_redis.port);
    freeReplyObject(redisCommand(c, "CONFIG RESETSTAT"));
    for (int t = 0; t < NG; t++) {
        g[t] = (struct grouped){.st = tc->st, .go = &go, .t = t};
        assert_int_equal(pthread_create(&th[t], NULL, grouped_worker, &g[t]), 0);
    }
    int written = 0, gave_up = 0;
    for (int t = 0; t < NG; t++) {
        pthread_join(th[t], NULL);
        assert_int_equal(g[t].wrong, 0);
        if (t < 32) {
            written += g[t].ok;
            gave_up += g[t].other;
        } else {
            assert_int_equal(g[t].ok, 40);
        }
    }
    pthread_barrier_destroy(&go);
    long long blocks = command_calls(c, "exec");
    redisFree(c);
    print_message("%d updates written (%d gave up) in %lld MULTI blocks\n", written, gave_up,
                  blocks);
    assert_int_equal(written + gave_up, 32 * 40);
    assert_true(blocks * 4 < written * 3); /* written together: not one block per update */
    for (int r = 0; r < 16; r++) {         /* each record: every increment its two threads made */
        snprintf(id, sizeof id, "g-%d", r);
        json_object *got = NULL, *n = NULL;
        assert_int_equal(rk_store_get(tc->st, id, &got, err, sizeof err), RK_STORE_OK);
        assert_true(json_object_object_get_ex(got, "n", &n));
        assert_int_equal(json_object_get_int64(n), g[r].ok + g[r + 16].ok);
        json_object_put(got);
    }
}

/* An outage gives fast, clear errors; the same store recovers by itself. */
static void test_redis_outage_and_recovery(void **state)
{
    (void)state;
    char msg[512], err[RK_STORE_ERRLEN], tok[64];
    struct rk_redis_fixture fx = {0};
    if (rk_redis_fixture_start(&fx, 0, NULL, msg, sizeof msg) != 0)
        fail_msg("cannot start redis-server: %s", msg);
    struct rk_store *st = open_redis(fx.port, NULL, "outage:", 4);
    assert_non_null(st);
    assert_int_equal(rk_store_ping(st, err, sizeof err), RK_STORE_OK);
    create_expect(st, "o-1", "running", "img", 0, RK_STORE_OK);

    rk_redis_fixture_stop(&fx);
    uint64_t before = rk_store_error_count(st);
    /* A large pipeline on the stale pooled connection hits EPIPE; the store
     * must not let SIGPIPE kill the process (this test does not ignore it). */
    enum { NBIG = 10000 };
    char(*names)[16] = malloc(NBIG * sizeof *names);
    const char **ids = malloc(NBIG * sizeof *ids);
    json_object **outs = malloc(NBIG * sizeof *outs);
    assert_true(names && ids && outs);
    for (int i = 0; i < NBIG; i++) {
        snprintf(names[i], sizeof names[i], "big-%d", i);
        ids[i] = names[i];
    }
    assert_int_equal(rk_store_get_many(st, ids, NBIG, outs, err, sizeof err), RK_STORE_ERROR);
    assert_non_null(strstr(err, "redis"));
    free(names);
    free(ids);
    free(outs);
    for (int i = 0; i < 5; i++) {
        json_object *got = NULL;
        int64_t t0 = now_ms();
        rk_store_rc rc = i % 2 ? rk_store_get(st, "o-1", &got, err, sizeof err)
                               : rk_session_reserve(st, "o-1", "n", 1, tok, err, sizeof err);
        int64_t took = now_ms() - t0;
        assert_int_equal(rc, RK_STORE_ERROR);
        assert_true(took < STORE_FAIL_FAST_LIMIT_MS);
        if (!strstr(err, "redis"))
            fail_msg("error does not mention redis: %s", err);
    }
    assert_true(rk_store_error_count(st) >= before + 6);

    if (rk_redis_fixture_start(&fx, fx.port, NULL, msg, sizeof msg) != 0)
        fail_msg("cannot restart redis-server: %s", msg);
    int64_t deadline = now_ms() + 10000;
    rk_store_rc rc = RK_STORE_ERROR;
    while (now_ms() < deadline) {
        rc = rk_store_ping(st, err, sizeof err);
        if (rc == RK_STORE_OK)
            break;
        sleep_ms(100);
    }
    assert_int_equal(rc, RK_STORE_OK);
    create_expect(st, "o-2", "running", "img", 0, RK_STORE_OK);
    json_object *got = NULL;
    assert_int_equal(rk_store_get(st, "o-2", &got, err, sizeof err), RK_STORE_OK);
    json_object_put(got);
    rk_store_close(st);
    rk_redis_fixture_stop(&fx);
}

/* AUTH: the right password works, a wrong or missing one is a clear error. */
static void test_redis_password(void **state)
{
    (void)state;
    char msg[512], err[RK_STORE_ERRLEN];
    const char *pw = "s3cret-pw";
    struct rk_redis_fixture fx = {0};
    if (rk_redis_fixture_start(&fx, 0, pw, msg, sizeof msg) != 0)
        fail_msg("cannot start redis-server: %s", msg);
    struct rk_store *good = open_redis(fx.port, pw, NULL, 2);
    assert_int_equal(rk_store_ping(good, err, sizeof err), RK_STORE_OK);
    create_expect(good, "p-1", "running", "img", 0, RK_STORE_OK);
    rk_store_close(good);

    struct rk_store *bad = open_redis(fx.port, "wrong-pw", NULL, 2);
    assert_int_equal(rk_store_ping(bad, err, sizeof err), RK_STORE_ERROR);
    assert_non_null(strstr(err, "redis"));
    assert_non_null(strstr(err, "auth"));
    assert_null(strstr(err, "wrong-pw"));
    assert_int_equal(rk_store_error_count(bad), 1);
    rk_store_close(bad);

    struct rk_store *none = open_redis(fx.port, NULL, NULL, 2);
    json_object *got = NULL;
    assert_int_equal(rk_store_get(none, "p-1", &got, err, sizeof err), RK_STORE_ERROR);
    assert_non_null(strstr(err, "redis"));
    rk_store_close(none);
    rk_redis_fixture_stop(&fx);
}

/* Ping repeatedly, counting outcomes. */
static void *ping_worker(void *arg)
{
    struct worker *w = arg;
    char err[RK_STORE_ERRLEN];
    for (int i = 0; i < w->iterations; i++) {
        if (rk_store_ping(w->st, err, sizeof err) == RK_STORE_OK)
            w->ok++;
        else
            w->other++;
    }
    return NULL;
}

/* Callers wait for a free connection when the pool is exhausted. */
static void test_redis_pool_wait(void **state)
{
    (void)state;
    struct rk_store *st = open_redis(g_redis.port, NULL, NULL, 1);
    struct worker w[NTHREADS];
    pthread_t th[NTHREADS];
    for (int i = 0; i < NTHREADS; i++) {
        memset(&w[i], 0, sizeof w[i]);
        w[i].st = st;
        w[i].iterations = 50;
        assert_int_equal(pthread_create(&th[i], NULL, ping_worker, &w[i]), 0);
    }
    int ok = 0, other = 0;
    for (int i = 0; i < NTHREADS; i++) {
        pthread_join(th[i], NULL);
        ok += w[i].ok;
        other += w[i].other;
    }
    assert_int_equal(ok, NTHREADS * 50);
    assert_int_equal(other, 0);
    rk_store_close(st);
}

/* A Redis store refuses a missing host; an unreachable one fails fast. */
static void test_redis_open_and_unreachable(void **state)
{
    (void)state;
    char err[RK_STORE_ERRLEN];
    struct rk_redis_cfg cfg = {.host = ""};
    assert_null(rk_store_open_redis(&cfg));
    struct rk_store *st = open_redis(1, NULL, NULL, 1);
    assert_non_null(st);
    int64_t t0 = now_ms();
    assert_int_equal(rk_store_ping(st, err, sizeof err), RK_STORE_ERROR);
    assert_true(now_ms() - t0 < STORE_FAIL_FAST_LIMIT_MS);
    assert_non_null(strstr(err, "redis unavailable"));
    rk_store_close(st);
}

/* ---- retention, ACL, secrets from files, WAIT, Sentinel ---------- */

/* Retry op until it returns want or timeout_ms passes; returns the last rc. */
static rk_store_rc poll_get(struct rk_store *st, const char *id, rk_store_rc want, int timeout_ms)
{
    char err[RK_STORE_ERRLEN];
    int64_t deadline = now_ms() + timeout_ms;
    rk_store_rc rc;
    for (;;) {
        json_object *got = NULL;
        rc = rk_store_get(st, id, &got, err, sizeof err);
        json_object_put(got);
        if (rc == want || now_ms() > deadline)
            return rc;
        sleep_ms(50);
    }
}

/* Deleted records stay readable for the retention, then are gone; other
 * inactive and active records are kept. Both backends. */
static void test_deleted_retention(void **state)
{
    struct tctx *tc = *state;
    struct rk_store *st = tc->st;
    char err[RK_STORE_ERRLEN];
    rk_store_set_deleted_retention(st, 1);
    create_expect(st, "ret-del", "running", "img", 0, RK_STORE_OK);
    create_expect(st, "ret-run", "running", "img", 0, RK_STORE_OK);
    create_expect(st, "ret-stop", "running", "img", 0, RK_STORE_OK);
    assert_int_equal(rk_store_update(st, "ret-del", set_state, "deleted", NULL, err, sizeof err),
                     RK_STORE_OK);
    assert_int_equal(rk_store_update(st, "ret-stop", set_state, "stopped", NULL, err, sizeof err),
                     RK_STORE_OK);
    create_expect(st, "ret-born-deleted", "deleted", "img", 0, RK_STORE_OK);
    assert_int_equal(poll_get(st, "ret-del", RK_STORE_OK, 0), RK_STORE_OK);
    assert_int_equal(poll_get(st, "ret-del", RK_STORE_NOT_FOUND, 10000), RK_STORE_NOT_FOUND);
    assert_int_equal(poll_get(st, "ret-born-deleted", RK_STORE_NOT_FOUND, 10000),
                     RK_STORE_NOT_FOUND);
    assert_int_equal(poll_get(st, "ret-run", RK_STORE_OK, 0), RK_STORE_OK);
    assert_int_equal(poll_get(st, "ret-stop", RK_STORE_OK, 0), RK_STORE_OK);
    /* the id can be used again after it expired */
    create_expect(st, "ret-del", "running", "img", 0, RK_STORE_OK);
    /* retention 0 keeps deleted records */
    rk_store_set_deleted_retention(st, 0);
    assert_int_equal(rk_store_update(st, "ret-run", set_state, "deleted", NULL, err, sizeof err),
                     RK_STORE_OK);
    if (tc->kind == BACKEND_REDIS) {
        redisContext *c = raw_conn(g_redis.port);
        redisReply *r = redisCommand(c, "TTL %ssandbox:ret-run", tc->prefix);
        assert_int_equal(r->integer, -1);
        freeReplyObject(r);
        redisFree(c);
    }
}

/* The default retention is 7 days, written as the key's TTL. */
static void test_redis_retention_ttl(void **state)
{
    struct tctx *tc = *state;
    char err[RK_STORE_ERRLEN];
    create_expect(tc->st, "ttl-1", "running", "img", 0, RK_STORE_OK);
    assert_int_equal(rk_store_update(tc->st, "ttl-1", set_state, "deleted", NULL, err, sizeof err),
                     RK_STORE_OK);
    redisContext *c = raw_conn(g_redis.port);
    redisReply *r = redisCommand(c, "TTL %ssandbox:ttl-1", tc->prefix);
    assert_true(r->integer > 7 * 24 * 3600 - 60 && r->integer <= 7 * 24 * 3600);
    freeReplyObject(r);
    redisFree(c);
}

/* Write s to a fresh file in /tmp; path receives its name. */
static void write_secret(char path[64], const char *s)
{
    snprintf(path, 64, "/tmp/rk-test-secret-%d-%d", (int)getpid(), ++g_seq);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(s, f);
    fclose(f);
}

/* ACL user + password (from a file); wrong user or missing file: clear error
 * without the secret. */
static void test_redis_acl_user_password_file(void **state)
{
    (void)state;
    char msg[512], err[RK_STORE_ERRLEN], pwfile[64], badfile[64];
    const char *extra[] = {"--user",    "default", "off", "--user", "rockacl", "on",
                           ">acl-pw-9", "~*",      "&*",  "+@all",  NULL};
    struct rk_redis_fixture fx = {0};
    snprintf(fx.username, sizeof fx.username, "rockacl");
    if (rk_redis_fixture_start_ex(&fx, 0, "acl-pw-9", extra, msg, sizeof msg) != 0)
        fail_msg("cannot start redis-server: %s", msg);
    write_secret(pwfile, "acl-pw-9\n");
    struct rk_redis_cfg cfg = {.host = "127.0.0.1",
                               .port = fx.port,
                               .username = "rockacl",
                               .password_file = pwfile,
                               .op_timeout_ms = 1000,
                               .connect_timeout_ms = 1000,
                               .pool_size = 2};
    struct rk_store *st = rk_store_open_redis(&cfg);
    assert_non_null(st);
    assert_int_equal(rk_store_ping(st, err, sizeof err), RK_STORE_OK);
    create_expect(st, "acl-1", "running", "img", 0, RK_STORE_OK);
    rk_store_close(st);

    write_secret(badfile, "wrong-pw\n");
    cfg.password_file = badfile;
    st = rk_store_open_redis(&cfg);
    assert_int_equal(rk_store_ping(st, err, sizeof err), RK_STORE_ERROR);
    assert_non_null(strstr(err, "auth"));
    assert_null(strstr(err, "wrong-pw"));
    rk_store_close(st);

    cfg.password_file = "/nonexistent/rk-secret";
    assert_null(rk_store_open_redis(&cfg));
    unlink(pwfile);
    unlink(badfile);
    rk_redis_fixture_stop(&fx);
}

/* min_replicas_ack: without a replica every write that matters fails with a
 * clear error after the bounded wait; with one it succeeds. */
static void test_redis_wait_replicas(void **state)
{
    (void)state;
    char msg[512], err[RK_STORE_ERRLEN], tok[64], portbuf[16];
    struct rk_redis_fixture master = {0}, replica = {0};
    if (rk_redis_fixture_start(&master, 0, NULL, msg, sizeof msg) != 0)
        fail_msg("cannot start redis-server: %s", msg);
    struct rk_redis_cfg cfg = {.host = "127.0.0.1",
                               .port = master.port,
                               .op_timeout_ms = 2000,
                               .connect_timeout_ms = 1000,
                               .pool_size = 2,
                               .min_replicas_ack = 1,
                               .wait_timeout_ms = 200};
    struct rk_store *st = rk_store_open_redis(&cfg);
    json_object *rec = mkrec("running", "img");
    int64_t t0 = now_ms();
    assert_int_equal(rk_store_create(st, "w-1", rec, 0, err, sizeof err), RK_STORE_ERROR);
    assert_true(now_ms() - t0 < 1500);
    assert_non_null(strstr(err, "not confirmed by 1 replica"));
    /* the unconfirmed create was taken back: a retry is not a duplicate */
    json_object *out = NULL;
    assert_int_equal(rk_store_get(st, "w-1", &out, err, sizeof err), RK_STORE_NOT_FOUND);
    /* so is an unconfirmed record with its queued create: neither stays */
    assert_int_equal(rk_createq_create(st, "w-2", rec, 0, "a", 1, 10, err, sizeof err),
                     RK_STORE_ERROR);
    assert_non_null(strstr(err, "not confirmed"));
    assert_int_equal(rk_store_get(st, "w-2", &out, err, sizeof err), RK_STORE_NOT_FOUND);
    int where = -1;
    assert_int_equal(rk_createq_where(st, "w-2", &where, err, sizeof err), RK_STORE_OK);
    assert_int_equal(where, 0);
    redisContext *raw = raw_conn(master.port);
    redisReply *rr = redisCommand(raw, "SET rock:sandbox:w-0 {\"state\":\"running\"}");
    freeReplyObject(rr);
    assert_int_equal(rk_store_update(st, "w-0", set_state, "deleted", &out, err, sizeof err),
                     RK_STORE_ERROR);
    assert_non_null(strstr(err, "not confirmed"));
    assert_null(out);
    assert_int_equal(rk_session_reserve(st, "w-1", "s", 60, tok, err, sizeof err), RK_STORE_ERROR);
    assert_non_null(strstr(err, "not confirmed"));
    rr = redisCommand(raw, "HLEN rock:sessions:w-1"); /* and released */
    assert_int_equal(rr->integer, 0);
    freeReplyObject(rr);
    /* an unconfirmed commit becomes our expired reservation: the caller's
     * rollback removes it and the name is free again */
    rr = redisCommand(raw, "HSET rock:sessions:w-0 s r:%s:99999999999999",
                      "0123456789abcdef0123456789abcdef");
    freeReplyObject(rr);
    assert_int_equal(rk_session_commit(st, "w-0", "s", "0123456789abcdef0123456789abcdef", "sess-9",
                                       err, sizeof err),
                     RK_STORE_ERROR);
    char *sid_out = NULL;
    assert_int_equal(rk_session_get(st, "w-0", "s", &sid_out, err, sizeof err), RK_STORE_NOT_FOUND);
    assert_int_equal(
        rk_session_rollback(st, "w-0", "s", "0123456789abcdef0123456789abcdef", err, sizeof err),
        RK_STORE_ERROR); /* removed, only its WAIT is unconfirmed */
    rr = redisCommand(raw, "HLEN rock:sessions:w-0");
    assert_int_equal(rr->integer, 0);
    freeReplyObject(rr);
    redisFree(raw);

    snprintf(portbuf, sizeof portbuf, "%d", master.port);
    const char *extra[] = {"--replicaof", "127.0.0.1", portbuf, NULL};
    if (rk_redis_fixture_start_ex(&replica, 0, NULL, extra, msg, sizeof msg) != 0)
        fail_msg("cannot start the replica: %s", msg);
    /* With a replica the writes succeed; the bound of each WAIT is generous
     * from here on so that a busy machine (a slow ack) does not fail them. */
    rk_store_close(st);
    cfg.wait_timeout_ms = 2000;
    st = rk_store_open_redis(&cfg);
    /* Until the replica has synced, a create is written but not confirmed:
     * an error (the record exists, so use a fresh id per attempt). */
    int64_t deadline = now_ms() + 15000;
    rk_store_rc rc = RK_STORE_ERROR;
    for (int i = 0; now_ms() < deadline; i++) {
        char id[32];
        snprintf(id, sizeof id, "w-sync-%d", i);
        rc = rk_store_create(st, id, rec, 0, err, sizeof err);
        if (rc == RK_STORE_OK)
            break;
        assert_int_equal(rc, RK_STORE_ERROR);
        sleep_ms(100);
    }
    assert_int_equal(rc, RK_STORE_OK);
    create_expect(st, "w-2", "running", "img", 0, RK_STORE_OK);
    assert_int_equal(rk_store_update(st, "w-2", set_state, "deleted", &out, err, sizeof err),
                     RK_STORE_OK);
    assert_non_null(out);
    json_object_put(out);
    assert_int_equal(rk_session_reserve(st, "w-2", "s", 60, tok, err, sizeof err), RK_STORE_OK);
    assert_int_equal(rk_session_commit(st, "w-2", "s", tok, "sess-1", err, sizeof err),
                     RK_STORE_OK);
    json_object_put(rec);
    rk_store_close(st);
    rk_redis_fixture_stop(&replica);
    rk_redis_fixture_stop(&master);
}

/* A write sent to a replica gets -READONLY: a clear error, never success. */
static void test_redis_readonly_replica(void **state)
{
    (void)state;
    char msg[512], err[RK_STORE_ERRLEN], portbuf[16];
    struct rk_redis_fixture replica = {0};
    snprintf(portbuf, sizeof portbuf, "%d", g_redis.port);
    const char *extra[] = {"--replicaof", "127.0.0.1", portbuf, NULL};
    if (rk_redis_fixture_start_ex(&replica, 0, NULL, extra, msg, sizeof msg) != 0)
        fail_msg("cannot start the replica: %s", msg);
    struct rk_store *st = open_redis(replica.port, NULL, "ro:", 2);
    json_object *rec = mkrec("running", "img");
    assert_int_equal(rk_store_create(st, "ro-1", rec, 0, err, sizeof err), RK_STORE_ERROR);
    assert_non_null(strstr(err, "READONLY"));
    json_object_put(rec);
    rk_store_close(st);
    rk_redis_fixture_stop(&replica);
}

/* Sentinel: bad lists are refused; the master is found through the first
 * sentinel that answers; an unknown name is a clear error; after the master
 * moves (and the old one dies) the store re-discovers it; a sentinel naming a
 * replica fails the ROLE check. */
static void test_redis_sentinel_discovery(void **state)
{
    (void)state;
    char msg[512], err[RK_STORE_ERRLEN], sentinels[128], portbuf[16];
    struct rk_redis_cfg bad = {.sentinels = "127.0.0.1", .master_name = "m"};
    assert_null(rk_store_open_redis(&bad));
    bad.sentinels = "127.0.0.1:26379";
    bad.master_name = "";
    assert_null(rk_store_open_redis(&bad));

    struct rk_redis_fixture a = {0}, b = {0}, sen = {0}, rep = {0};
    if (rk_redis_fixture_start(&a, 0, NULL, msg, sizeof msg) != 0 ||
        rk_redis_fixture_start(&b, 0, NULL, msg, sizeof msg) != 0)
        fail_msg("cannot start redis-server: %s", msg);
    if (rk_redis_fixture_start_sentinel(&sen, a.port, "mymaster", msg, sizeof msg) != 0)
        fail_msg("cannot start a sentinel: %s", msg);
    snprintf(sentinels, sizeof sentinels, "127.0.0.1:1, [127.0.0.1]:%d", sen.port);
    struct rk_redis_cfg cfg = {.sentinels = sentinels,
                               .master_name = "mymaster",
                               .op_timeout_ms = 1000,
                               .connect_timeout_ms = 500,
                               .pool_size = 2,
                               .key_prefix = "sen:"};
    struct rk_store *st = rk_store_open_redis(&cfg);
    assert_non_null(st);
    assert_int_equal(rk_store_ping(st, err, sizeof err), RK_STORE_OK);
    create_expect(st, "s-1", "running", "img", 0, RK_STORE_OK);

    cfg.master_name = "nosuch";
    struct rk_store *unknown = rk_store_open_redis(&cfg);
    assert_int_equal(rk_store_ping(unknown, err, sizeof err), RK_STORE_ERROR);
    assert_non_null(strstr(err, "nosuch"));
    rk_store_close(unknown);

    /* Move the master: the sentinel now names b; a dies. */
    redisContext *c = raw_conn(sen.port);
    redisReply *r = redisCommand(c, "SENTINEL REMOVE mymaster");
    freeReplyObject(r);
    r = redisCommand(c, "SENTINEL MONITOR mymaster 127.0.0.1 %d 1", b.port);
    assert_int_equal(r->type, REDIS_REPLY_STATUS);
    freeReplyObject(r);
    rk_redis_fixture_stop(&a);
    int64_t deadline = now_ms() + 10000;
    json_object *rec = mkrec("running", "img");
    rk_store_rc rc = RK_STORE_ERROR;
    while (now_ms() < deadline &&
           (rc = rk_store_create(st, "s-2", rec, 0, err, sizeof err)) != RK_STORE_OK) {
        assert_non_null(strstr(err, "redis")); /* failures are clear errors */
        sleep_ms(100);
    }
    assert_int_equal(rc, RK_STORE_OK);
    redisContext *cb = raw_conn(b.port);
    r = redisCommand(cb, "EXISTS sen:sandbox:s-2");
    assert_int_equal(r->integer, 1);
    freeReplyObject(r);
    redisFree(cb);

    /* The sentinel names a replica: ROLE says so, the store refuses it. */
    snprintf(portbuf, sizeof portbuf, "%d", b.port);
    const char *extra[] = {"--replicaof", "127.0.0.1", portbuf, NULL};
    if (rk_redis_fixture_start_ex(&rep, 0, NULL, extra, msg, sizeof msg) != 0)
        fail_msg("cannot start the replica: %s", msg);
    r = redisCommand(c, "SENTINEL REMOVE mymaster");
    freeReplyObject(r);
    r = redisCommand(c, "SENTINEL MONITOR mymaster 127.0.0.1 %d 1", rep.port);
    freeReplyObject(r);
    redisFree(c);
    rk_redis_fixture_stop(&b);
    deadline = now_ms() + 10000;
    while (now_ms() < deadline) {
        rc = rk_store_ping(st, err, sizeof err);
        if (rc == RK_STORE_ERROR && strstr(err, "not the master"))
            break;
        sleep_ms(100);
    }
    assert_int_equal(rc, RK_STORE_ERROR);
    assert_non_null(strstr(err, "not the master"));
    json_object_put(rec);
    rk_store_close(st);
    rk_redis_fixture_stop(&rep);
    rk_redis_fixture_stop(&sen);
}

/* Build {"state": state, "create_time": t}. */
static void create_timed(struct rk_store *st, const char *id, const char *state, const char *t)
{
    char err[RK_STORE_ERRLEN];
    json_object *rec = mkrec(state, "img");
    json_object_object_add(rec, "create_time", json_object_new_string(t));
    assert_int_equal(rk_store_create(st, id, rec, 0, err, sizeof err), RK_STORE_OK);
    json_object_put(rec);
}

/* Pages come in list order (create_time, then id), only active records, with
 * the total; per-state counts follow every transition. Both backends. */
static void test_list_page_and_counts(void **state)
{
    struct tctx *tc = *state;
    struct rk_store *st = tc->st;
    char err[RK_STORE_ERRLEN];
    create_timed(st, "c", "running", "2026-01-01T00:00:02Z");
    create_timed(st, "a", "pending", "2026-01-01T00:00:01Z");
    create_timed(st, "b", "running", "2026-01-01T00:00:02Z");
    create_timed(st, "z", "running", "2026-01-01T00:00:00Z");
    create_timed(st, "gone", "deleted", "2025-01-01T00:00:00Z");
    char **ids = NULL;
    size_t n = 0, total = 0, p = 0, r = 0;
    assert_int_equal(rk_store_list_page(st, 0, 10, &ids, &n, &total, err, sizeof err), RK_STORE_OK);
    assert_int_equal(n, 4);
    assert_int_equal(total, 4);
    assert_string_equal(ids[0], "z");
    assert_string_equal(ids[1], "a");
    assert_string_equal(ids[2], "b");
    assert_string_equal(ids[3], "c");
    rk_store_free_ids(ids, n);
    assert_int_equal(rk_store_list_page(st, 1, 2, &ids, &n, &total, err, sizeof err), RK_STORE_OK);
    assert_int_equal(n, 2);
    assert_string_equal(ids[0], "a");
    assert_string_equal(ids[1], "b");
    rk_store_free_ids(ids, n);
    assert_int_equal(rk_store_list_page(st, 9, 2, &ids, &n, &total, err, sizeof err), RK_STORE_OK);
    assert_int_equal(n, 0);
    assert_int_equal(total, 4);
    rk_store_free_ids(ids, n);
    assert_int_equal(rk_store_count_states(st, &p, &r, err, sizeof err), RK_STORE_OK);
    assert_int_equal(p, 1);
    assert_int_equal(r, 3);
    assert_int_equal(rk_store_update(st, "a", set_state, "running", NULL, err, sizeof err),
                     RK_STORE_OK);
    assert_int_equal(rk_store_update(st, "c", set_state, "deleted", NULL, err, sizeof err),
                     RK_STORE_OK);
    assert_int_equal(rk_store_count_states(st, &p, &r, err, sizeof err), RK_STORE_OK);
    assert_int_equal(p, 0);
    assert_int_equal(r, 3);
    assert_int_equal(rk_store_list_page(st, 0, 10, &ids, &n, &total, err, sizeof err), RK_STORE_OK);
    assert_int_equal(total, 3);
    assert_string_equal(ids[2], "b");
    rk_store_free_ids(ids, n);
}

/* Update callback: set the string member named by the first of two strings to the second. */
static int set_member(json_object *rec, void *ctx)
{
    const char *const *kv = ctx;
    json_object_object_add(rec, kv[0], json_object_new_string(kv[1]));
    return 0;
}

/* Update callback: add (ctx non-NULL) or drop the record's job lease. */
static int set_job(json_object *rec, void *ctx)
{
    if (ctx)
        json_object_object_add(rec, "job_lease", json_object_new_string("owner 1"));
    else
        json_object_object_del(rec, "job_lease");
    return 0;
}

/* Index-set commands (SADD, SREM, ZADD, ZREM) Redis has executed so far. */
static long long index_calls(redisContext *c)
{
    redisReply *r = redisCommand(c, "INFO commandstats");
    assert_non_null(r);
    long long sum = 0;
    const char *names[] = {
        "cmdstat_sadd:calls=", "cmdstat_srem:calls=", "cmdstat_zadd:calls=", "cmdstat_zrem:calls="};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const char *at = strstr(r->str, names[i]);
        if (at)
            sum += strtoll(at + strlen(names[i]), NULL, 10);
    }
    freeReplyObject(r);
    return sum;
}

/* An update writes the index entries its change moves and no others: a member the indexes
 * do not depend on costs the record write alone; a new create_time moves the record in the
 * list order, a job lease in and out of the job set, a state between the state sets. */
static void test_redis_update_moves_only_changed_entries(void **state)
{
    struct tctx *tc = *state;
    struct rk_store *st = tc->st;
    char err[RK_STORE_ERRLEN];
    redisContext *c = raw_conn(g_redis.port);
    create_timed(st, "m1", "running", "2026-01-01T00:00:01Z");
    create_timed(st, "m2", "running", "2026-01-01T00:00:02Z");
    char **ids = NULL;
    size_t n = 0, total = 0, p = 0, r = 0;
    assert_int_equal(rk_store_list_page(st, 0, 10, &ids, &n, &total, err, sizeof err), RK_STORE_OK);
    rk_store_free_ids(ids, n);

    long long before = index_calls(c);
    const char *image[] = {"image", "other"};
    assert_int_equal(rk_store_update(st, "m1", set_member, image, NULL, err, sizeof err),
                     RK_STORE_OK);
    assert_int_equal(index_calls(c), before);
    json_object *got = NULL;
    assert_int_equal(rk_store_get(st, "m1", &got, err, sizeof err), RK_STORE_OK);
    assert_string_equal(json_object_get_string(json_object_object_get(got, "image")), "other");
    json_object_put(got);

    const char *later[] = {"create_time", "2026-01-01T00:00:03Z"};
    assert_int_equal(rk_store_update(st, "m1", set_member, later, NULL, err, sizeof err),
                     RK_STORE_OK);
    assert_int_equal(rk_store_list_page(st, 0, 10, &ids, &n, &total, err, sizeof err), RK_STORE_OK);
    assert_int_equal(n, 2);
    assert_int_equal(total, 2);
    assert_string_equal(ids[0], "m2");
    assert_string_equal(ids[1], "m1");
    rk_store_free_ids(ids, n);

    assert_int_equal(rk_store_update(st, "m2", set_job, "1", NULL, err, sizeof err), RK_STORE_OK);
    assert_int_equal(rk_store_list_jobs(st, &ids, &n, err, sizeof err), RK_STORE_OK);
    assert_int_equal(n, 1);
    assert_string_equal(ids[0], "m2");
    rk_store_free_ids(ids, n);
    assert_int_equal(rk_store_update(st, "m2", set_job, NULL, NULL, err, sizeof err), RK_STORE_OK);
    assert_int_equal(rk_store_list_jobs(st, &ids, &n, err, sizeof err), RK_STORE_OK);
    assert_int_equal(n, 0);
    rk_store_free_ids(ids, n);

    assert_int_equal(rk_store_update(st, "m2", set_state, "pending", NULL, err, sizeof err),
                     RK_STORE_OK);
    assert_int_equal(rk_store_count_states(st, &p, &r, err, sizeof err), RK_STORE_OK);
    assert_int_equal(p, 1);
    assert_int_equal(r, 1);
    redisFree(c);
}

/* Records written before the list index existed (only the active set) are
 * indexed on first use. */
static void test_redis_index_rebuild(void **state)
{
    struct tctx *tc = *state;
    char err[RK_STORE_ERRLEN];
    redisContext *c = raw_conn(g_redis.port);
    const char *recs[][2] = {{"old-1", "{\"state\":\"running\",\"create_time\":\"t2\"}"},
                             {"old-2", "{\"state\":\"pending\",\"create_time\":\"t1\"}"}};
    for (int i = 0; i < 2; i++) {
        freeReplyObject(redisCommand(c, "SET %ssandbox:%s %s", tc->prefix, recs[i][0], recs[i][1]));
        freeReplyObject(redisCommand(c, "SADD %sactive %s", tc->prefix, recs[i][0]));
    }
    redisFree(c);
    char **ids = NULL;
    size_t n = 0, total = 0, p = 0, r = 0;
    assert_int_equal(rk_store_list_page(tc->st, 0, 10, &ids, &n, &total, err, sizeof err),
                     RK_STORE_OK);
    assert_int_equal(n, 2);
    assert_string_equal(ids[0], "old-2");
    assert_string_equal(ids[1], "old-1");
    rk_store_free_ids(ids, n);
    assert_int_equal(rk_store_count_states(tc->st, &p, &r, err, sizeof err), RK_STORE_OK);
    assert_int_equal(p, 1);
    assert_int_equal(r, 1);
}

/* Sentinels with an ACL user: AUTH user password works; without it the
 * error names the sentinel and never shows the secret. */
static void test_redis_sentinel_acl(void **state)
{
    (void)state;
    char msg[512], err[RK_STORE_ERRLEN], sentinels[64];
    struct rk_redis_fixture sen = {0};
    if (rk_redis_fixture_start_sentinel_acl(&sen, g_redis.port, "aclmaster", "sentuser",
                                            "sent-pw-5", msg, sizeof msg) != 0)
        fail_msg("cannot start a sentinel: %s", msg);
    snprintf(sentinels, sizeof sentinels, "127.0.0.1:%d", sen.port);
    struct rk_redis_cfg cfg = {.sentinels = sentinels,
                               .master_name = "aclmaster",
                               .sentinel_username = "sentuser",
                               .sentinel_password = "sent-pw-5",
                               .op_timeout_ms = 1000,
                               .connect_timeout_ms = 500,
                               .pool_size = 1,
                               .key_prefix = "sacl:"};
    struct rk_store *st = rk_store_open_redis(&cfg);
    assert_int_equal(rk_store_ping(st, err, sizeof err), RK_STORE_OK);
    rk_store_close(st);
    cfg.sentinel_password = "bad-pw-6";
    st = rk_store_open_redis(&cfg);
    assert_int_equal(rk_store_ping(st, err, sizeof err), RK_STORE_ERROR);
    if (!strstr(err, "sentinel 127.0.0.1"))
        fail_msg("%s", err);
    assert_non_null(strstr(err, "auth"));
    assert_null(strstr(err, "bad-pw-6"));
    rk_store_close(st);
    rk_redis_fixture_stop(&sen);
}

#define BOTH(fn)                                                                                   \
    {#fn "[memory]", fn, setup, teardown, (void *)&k_memory},                                      \
    {                                                                                              \
#fn "[redis]", fn, setup, teardown, (void *)&k_redis                                       \
    }
#define REDIS_ONLY(fn)                                                                             \
    {                                                                                              \
#fn, fn, setup, teardown, (void *)&k_redis                                                 \
    }

/* Run every store test against both backends. */
int main(void)
{
    const struct CMUnitTest tests[] = {
        BOTH(test_create_get),
        BOTH(test_update),
        BOTH(test_update_many),
        BOTH(test_update_many_checked),
        BOTH(test_active_index_and_replace),
        BOTH(test_get_many),
        BOTH(test_job_index),
        BOTH(test_touch_and_expired),
        BOTH(test_claim),
        BOTH(test_get_touch),
        REDIS_ONLY(test_touch_without_zadd_gt),
        BOTH(test_view_touch),
        BOTH(test_lease),
        BOTH(test_create_queue),
        BOTH(test_create_queue_claim_drops_finished),
        BOTH(test_create_queued_record),
        BOTH(test_view_many),
        BOTH(test_scan_many),
        BOTH(test_b90_reserve_is_exclusive),
        BOTH(test_b91_commit_makes_visible),
        BOTH(test_b92_rollback_releases),
        BOTH(test_b93_b94_remove),
        BOTH(test_b95_clear),
        BOTH(test_session_take_all),
        BOTH(test_b97_b98_reclaim),
        BOTH(test_b99_conditional),
        BOTH(test_invalid_arguments),
        BOTH(test_concurrent_reserve),
        BOTH(test_concurrent_update),
        cmocka_unit_test(test_registry_value_rules),
        REDIS_ONLY(test_redis_key_layout),
        REDIS_ONLY(test_redis_update_moves_only_changed_entries),
        REDIS_ONLY(test_redis_unparsable_reservation),
        REDIS_ONLY(test_redis_watch_retries),
        REDIS_ONLY(test_redis_update_many_conflict),
        REDIS_ONLY(test_redis_updates_written_together),
        REDIS_ONLY(test_redis_claim_leaves_given_back_places_to_others),
        REDIS_ONLY(test_redis_outage_and_recovery),
        REDIS_ONLY(test_redis_password),
        REDIS_ONLY(test_redis_open_and_unreachable),
        REDIS_ONLY(test_redis_pool_wait),
        BOTH(test_deleted_retention),
        REDIS_ONLY(test_redis_retention_ttl),
        REDIS_ONLY(test_redis_acl_user_password_file),
        REDIS_ONLY(test_redis_wait_replicas),
        REDIS_ONLY(test_redis_readonly_replica),
        REDIS_ONLY(test_redis_sentinel_discovery),
        BOTH(test_list_page_and_counts),
        REDIS_ONLY(test_redis_index_rebuild),
        REDIS_ONLY(test_redis_sentinel_acl),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
