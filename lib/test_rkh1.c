/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file test_rkh1.c
 * @brief The event loops' HTTP/1.1 client (rkh1.c): answer framing (chunked, Content-Length, close;
 * split at every byte), malformed answers, which URLs it carries, and on real loopback sockets
 *        keep-alive reuse, the resend of a request whose kept connection died unanswered, and
 *        requests sent at most once (never resent, no long-idle kept connection).
 */
#include <setjmp.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <curl/curl.h>

#include "rkcurlloop.h"
#include "rkh1.h"

/** What a parse delivered. */
struct got {
    long status;
    int statuses;
    char body[4096];
    size_t body_len;
    int stop_after; /**< on_body asks to stop once this many bytes arrived (0: never) */
};

static void g_status(void *ctx, long st)
{
    struct got *g = ctx;
    g->status = st;
    g->statuses++;
}

static int g_body(void *ctx, const char *p, size_t n)
{
    struct got *g = ctx;
    assert_true(g->body_len + n < sizeof g->body);
    memcpy(g->body + g->body_len, p, n);
    g->body_len += n;
    return g->stop_after && g->body_len >= (size_t)g->stop_after ? -1 : 0;
}

static const struct rku_h1_ops parse_ops = {.on_status = g_status, .on_body = g_body};

/** Feed msg in pieces of step bytes (0: whole); the result and bytes taken in total. */
static int feed(const char *msg, size_t len, size_t step, struct got *g, struct rku_h1_resp *r,
                size_t *taken)
{
    memset(r, 0, sizeof(*r));
    *taken = 0;
    int res = RKU_H1_MORE;
    while (*taken < len) {
        size_t n = step && step < len - *taken ? step : len - *taken;
        size_t used = 0;
        res = rku_h1_resp_feed(r, msg + *taken, n, &used, &parse_ops, g);
        *taken += used;
        if (res != RKU_H1_MORE)
            break;
        assert_int_equal(used, n); /* MORE takes everything */
    }
    return res;
}

/** A chunked answer with extensions, an interim 100 and a trailer, split at every size, ends
 *  exactly where it ends and delivers the body without the coding. */
static void test_chunked_every_split(void **state)
{
    (void)state;
    const char *msg = "HTTP/1.1 100 Continue\r\n\r\n"
                      "HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, Chunked\r\nX: y\r\n\r\n"
                      "5;ext=1\r\nhello\r\n"
                      "A\r\n, world!!\n\r\n"
                      "0\r\nTrailer: t\r\n\r\n"
                      "NEXT";
    size_t len = strlen(msg), want = len - 4;
    for (size_t step = 0; step <= len; step++) {
        struct got g = {0};
        struct rku_h1_resp r;
        size_t taken;
        assert_int_equal(feed(msg, len, step, &g, &r, &taken), RKU_H1_DONE);
        assert_int_equal(taken, want);
        assert_int_equal(g.status, 200);
        assert_int_equal(g.statuses, 1);
        assert_int_equal(g.body_len, 15);
        assert_memory_equal(g.body, "hello, world!!\n", 15);
        assert_int_equal(r.keep_alive, 1);
        rku_h1_resp_reset(&r);
    }
}

/** Content-Length frames the body; bytes after it are not taken. */
static void test_content_length(void **state)
{
    (void)state;
    const char *msg = "HTTP/1.1 404 Not Found\r\nContent-Length: 7\r\n"
                      "Connection: keep-alive\r\n\r\n{\"a\":1}junk";
    for (size_t step = 0; step < 8; step++) {
        struct got g = {0};
        struct rku_h1_resp r;
        size_t taken;
        assert_int_equal(feed(msg, strlen(msg), step, &g, &r, &taken), RKU_H1_DONE);
        assert_int_equal(taken, strlen(msg) - 4);
        assert_int_equal(g.status, 404);
        assert_int_equal(g.body_len, 7);
        assert_int_equal(r.keep_alive, 1);
        rku_h1_resp_reset(&r);
    }
}

/** No framing: the body runs to the connection's end, which completes it; such a connection
 *  and an HTTP/1.0 or "Connection: close" one is not kept. 204 has no body. */
static void test_close_framed_and_keep_alive(void **state)
{
    (void)state;
    struct got g = {0};
    struct rku_h1_resp r;
    size_t taken;
    const char *a = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\ndata: 1\n\n";
    assert_int_equal(feed(a, strlen(a), 3, &g, &r, &taken), RKU_H1_MORE);
    assert_int_equal(g.body_len, 9);
    assert_true(rku_h1_resp_eof(&r));
    assert_int_equal(r.keep_alive, 0);
    rku_h1_resp_reset(&r);

    const char *b = "HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n";
    memset(&g, 0, sizeof g);
    assert_int_equal(feed(b, strlen(b), 0, &g, &r, &taken), RKU_H1_DONE);
    assert_int_equal(r.keep_alive, 0);
    rku_h1_resp_reset(&r);

    const char *c = "HTTP/1.1 204 No Content\r\nConnection: Close\r\n\r\n";
    memset(&g, 0, sizeof g);
    assert_int_equal(feed(c, strlen(c), 0, &g, &r, &taken), RKU_H1_DONE);
    assert_int_equal(g.status, 204);
    assert_int_equal(r.keep_alive, 0);
    assert_false(rku_h1_resp_eof(&(struct rku_h1_resp){0}));
    rku_h1_resp_reset(&r);
}

/** Malformed answers are refused, not guessed at; a reader that stops is obeyed. */
static void test_malformed(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "HTTP/2 200 OK\r\n\r\n",
        "HTTP/1.1 2x0 OK\r\n\r\n",
        "ICY 200 OK\r\n\r\n",
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello",
        "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
        "HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1000000000000000\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabX\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct got g = {0};
        struct rku_h1_resp r;
        size_t taken;
        int res = feed(bad[i], strlen(bad[i]), 0, &g, &r, &taken);
        if (res != RKU_H1_BAD)
            fail_msg("accepted: %s", bad[i]);
        rku_h1_resp_reset(&r);
    }
    /* A head that never ends is refused at 16 KiB. */
    static char big[20000];
    memcpy(big, "HTTP/1.1 200 OK\r\n", 17);
    for (size_t i = 17; i < sizeof big; i++)
        big[i] = (i % 64) == 63 ? '\n' : 'a';
    struct got g = {0};
    struct rku_h1_resp r;
    size_t taken;
    assert_int_equal(feed(big, sizeof big, 1000, &g, &r, &taken), RKU_H1_BAD);
    assert_true(taken <= 16 * 1024);
    rku_h1_resp_reset(&r);

    const char *s = "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n0123456789";
    memset(&g, 0, sizeof g);
    g.stop_after = 4;
    assert_int_equal(feed(s, strlen(s), 2, &g, &r, &taken), RKU_H1_STOP);
    rku_h1_resp_reset(&r);
}

/** The headers one final head handed over, joined "name=value;". */
struct hdrs {
    char text[512];
    size_t len;
};

static void h_header(void *ctx, const char *n, size_t nl, const char *v, size_t vl)
{
    struct hdrs *h = ctx;
    int w =
        snprintf(h->text + h->len, sizeof h->text - h->len, "%.*s=%.*s;", (int)nl, n, (int)vl, v);
    assert_true(w > 0 && (size_t)w < sizeof h->text - h->len);
    h->len += (size_t)w;
}

static void h_status(void *ctx, long st)
{
    (void)ctx;
    (void)st;
}

static int h_body(void *ctx, const char *p, size_t n)
{
    (void)p;
    struct hdrs *h = ctx;
    h->len += 1000 * n; /* any body byte shows as a length no head gives */
    return 0;
}

static const struct rku_h1_ops head_ops = {
    .on_header = h_header, .on_status = h_status, .on_body = h_body};

/** A final head's headers are handed over trimmed, an interim head's are not; the answer to a
 *  HEAD request ends with its head whatever its framing headers say; folded lines and bare CRs
 *  are refused; a head over the exchange's own bound is refused as too big. */
static void test_headers_and_head_only(void **state)
{
    (void)state;
    const char *msg = "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"
                      "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A:  spaced \t\r\nX-Empty:\r\n\r\n"
                      "hello";
    for (size_t step = 0; step < 9; step++) {
        struct hdrs h = {{0}, 0};
        struct rku_h1_resp r;
        memset(&r, 0, sizeof r);
        r.head_only = 1;
        size_t taken = 0, len = strlen(msg);
        int res = RKU_H1_MORE;
        while (taken < len && res == RKU_H1_MORE) {
            size_t n = step && step < len - taken ? step : len - taken, used = 0;
            res = rku_h1_resp_feed(&r, msg + taken, n, &used, &head_ops, &h);
            taken += used;
        }
        assert_int_equal(res, RKU_H1_DONE);
        assert_int_equal(taken, len - 5); /* the body a GET would get is not part of it */
        assert_string_equal(h.text, "Content-Length=5;X-A=spaced;X-Empty=;");
        assert_int_equal(r.keep_alive, 1);
        rku_h1_resp_reset(&r);
        assert_int_equal(r.head_only, 1); /* the exchange's settings survive a reset */
    }
    static const char *const bad[] = {
        "HTTP/1.1 200 OK\r\nX-A: a\r\n  folded\r\n\r\n",
        "HTTP/1.1 200 OK\r\nX-A: a\rb\r\n\r\n",
    };
    for (size_t i = 0; i < 2; i++) {
        struct hdrs h = {{0}, 0};
        struct rku_h1_resp r;
        memset(&r, 0, sizeof r);
        size_t used = 0;
        assert_int_equal(rku_h1_resp_feed(&r, bad[i], strlen(bad[i]), &used, &head_ops, &h),
                         RKU_H1_BAD);
        assert_int_equal(r.too_big, 0);
        rku_h1_resp_reset(&r);
    }
    char big[300];
    snprintf(big, sizeof big, "HTTP/1.1 200 OK\r\nX-Big: %0200d\r\n\r\n", 7);
    struct hdrs h = {{0}, 0};
    struct rku_h1_resp r;
    memset(&r, 0, sizeof r);
    r.head_max = 128;
    size_t used = 0;
    assert_int_equal(rku_h1_resp_feed(&r, big, strlen(big), &used, &head_ops, &h), RKU_H1_BAD);
    assert_int_equal(r.too_big, 1);
    rku_h1_resp_reset(&r);
    r.head_max = 0; /* the default bound holds it (the body then runs to the connection's end) */
    h.len = 0;
    assert_int_equal(rku_h1_resp_feed(&r, big, strlen(big), &used, &head_ops, &h), RKU_H1_MORE);
    assert_int_equal(r.got_head, 1);
    assert_int_equal(r.too_big, 0);
    rku_h1_resp_reset(&r);
}

/** Only plain HTTP to IP literals with a clean path is carried; the rest is libcurl's. */
static void test_targets(void **state)
{
    (void)state;
    struct rku_h1_xchg x;
    const char *host, *path;
    size_t hl;
    assert_int_equal(rku_h1_target(&x, "http://127.0.0.1:8080/a/b?c=%20d", &host, &hl, &path), 1);
    assert_int_equal(hl, strlen("127.0.0.1:8080"));
    assert_memory_equal(host, "127.0.0.1:8080", hl);
    assert_string_equal(path, "/a/b?c=%20d");
    assert_int_equal(ntohs(((struct sockaddr_in *)&x.addr)->sin_port), 8080);
    assert_int_equal(rku_h1_target(&x, "http://[::1]:9/x", &host, &hl, &path), 1);
    assert_int_equal(x.addr.sin6_family, AF_INET6);
    assert_int_equal(ntohs(x.addr.sin6_port), 9);
    assert_int_equal(rku_h1_target(&x, "http://10.0.0.1", &host, &hl, &path), 1);
    assert_string_equal(path, "/");
    assert_int_equal(ntohs(((struct sockaddr_in *)&x.addr)->sin_port), 80);
    static const char *const no[] = {
        "https://127.0.0.1/",       "http://localhost:80/",   "http://127.0.0.1:0/",
        "http://127.0.0.1:99999/",  "http://127.0.0.1/a b",   "http://127.0.0.1/a\r\nX: y",
        "http://1.2.3.4@evil.com/", "http://127.0.0.1:80x/",  "http://[::1/",
        "ftp://127.0.0.1/",         "http://127.0.0.1/#frag", "http://300.1.1.1/",
    };
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) {
        if (rku_h1_target(&x, no[i], &host, &hl, &path))
            fail_msg("carried: %s", no[i]);
    }
}

/* ---- on real sockets --------------------------------------------------- */

static int srv_fd;
/* Connections the server thread accepted; atomic: some tests read it while the server runs. */
static atomic_int srv_accepts;

/** Read one request head (and no body: the test sends GETs); 0 at EOF. */
static int read_req(int fd)
{
    char buf[2048];
    size_t n = 0;
    while (n < sizeof buf - 1) {
        ssize_t r = read(fd, buf + n, sizeof buf - 1 - n);
        if (r <= 0)
            return 0;
        n += (size_t)r;
        buf[n] = '\0';
        if (strstr(buf, "\r\n\r\n"))
            return 1;
    }
    return 0;
}

/** Connection 1 answers its first request and reads a second, then closes unanswered (a
 *  server's keep-alive timeout racing the request); connection 2 answers. */
static void *server_main(void *arg)
{
    (void)arg;
    static const char ok1[] = "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\none";
    static const char ok2[] =
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\ntwo\r\n0\r\n\r\n";
    int a = accept(srv_fd, NULL, NULL);
    srv_accepts++;
    if (a < 0 || !read_req(a) || write(a, ok1, sizeof ok1 - 1) < 0 || !read_req(a))
        return NULL;
    close(a);
    int b = accept(srv_fd, NULL, NULL);
    srv_accepts++;
    if (b >= 0 && read_req(b) && write(b, ok2, sizeof ok2 - 1) > 0)
        read_req(b); /* until the client closes or keeps it */
    if (b >= 0)
        close(b);
    return NULL;
}

/** One exchange's outcome, reported on the loop thread. */
struct run {
    struct got g;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done, code;
    int64_t deadline; /**< 5 s after the request was sent */
};

static int r_abort(void *ctx)
{
    (void)ctx;
    return 0;
}

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t r_deadline(void *ctx)
{
    struct run *r = (struct run *)((char *)ctx - offsetof(struct run, g));
    return r->deadline;
}

static void r_done(void *ctx, int code, const char *err)
{
    (void)err;
    struct run *r = (struct run *)((char *)ctx - offsetof(struct run, g));
    pthread_mutex_lock(&r->mu);
    r->code = code;
    r->done = 1;
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

static const struct rku_h1_ops run_ops = {.on_status = g_status,
                                          .on_body = g_body,
                                          .should_abort = r_abort,
                                          .deadline = r_deadline,
                                          .on_done = r_done};

/** Send GET / to port through c and wait for the end; once: sent at most once. */
static void run_req(struct rku_h1 *c, int port, struct run *r, int once)
{
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/", port);
    struct rku_h1_xchg x;
    memset(&x, 0, sizeof x);
    const char *host, *path;
    size_t hl;
    assert_int_equal(rku_h1_target(&x, url, &host, &hl, &path), 1);
    x.req = strdup("GET / HTTP/1.1\r\nHost: t\r\n\r\n");
    x.req_len = strlen(x.req);
    x.ops = &run_ops;
    x.ctx = &r->g;
    x.once = once;
    memset(r, 0, sizeof *r);
    r->deadline = mono_ms() + 5000;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    assert_int_equal(rku_h1_submit(c, &x), 0);
    pthread_mutex_lock(&r->mu);
    while (!r->done)
        pthread_cond_wait(&r->cv, &r->mu);
    pthread_mutex_unlock(&r->mu);
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
    assert_null(x.req); /* the client frees the request */
}

static void run_get(struct rku_h1 *c, int port, struct run *r)
{
    run_req(c, port, r, 0);
}

/** Listen on 127.0.0.1:<ephemeral>; the port. */
static int listen_any(void)
{
    srv_fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    assert_int_equal(bind(srv_fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(srv_fd, 8), 0);
    getsockname(srv_fd, (struct sockaddr *)&a, &al);
    srv_accepts = 0;
    return ntohs(a.sin_port);
}

/** A client on its own loop, and (when server is not NULL) a loopback server thread. */
struct rig {
    int port; /**< the server's port (listen_any) */
    pthread_t th;
    int has_server;
    struct rku_curl_loop *cl;
    struct rku_h1 *c;
};

/** Start the server thread server (or none) and the client. */
static void rig_up(struct rig *g, void *(*server)(void *))
{
    memset(g, 0, sizeof *g);
    if (server) {
        g->port = listen_any();
        g->has_server = 1;
        assert_int_equal(pthread_create(&g->th, NULL, server, NULL), 0);
    }
    g->cl = rku_curl_loop_new(100, 0);
    assert_non_null(g->cl);
    g->c = rku_h1_new_on(g->cl, 0);
    assert_non_null(g->c);
}

/** Stop the client (freeing it closes its kept connections, which ends the server's last
 *  read), then the server. */
static void rig_down(struct rig *g)
{
    rku_curl_loop_stop(g->cl);
    rku_h1_free(g->c);
    if (g->has_server)
        pthread_join(g->th, NULL);
    rku_curl_loop_free(g->cl);
    if (g->has_server)
        close(srv_fd);
}

/** rig_up, then one GET the server answers: its connection is kept for the next exchange. */
static void rig_up_kept(struct rig *g, void *(*server)(void *), struct run *r)
{
    rig_up(g, server);
    run_get(g->c, g->port, r);
    assert_int_equal(r->code, CURLE_OK);
}

/** A request that must not be sent twice (a create) goes out on the connection kept from the
 *  request before; the server closes it unanswered (it may have acted on it), so the loss is
 *  reported, not resent; the next request opens a new connection. */
static void test_once_is_not_resent(void **state)
{
    (void)state;
    struct rig g;
    struct run r;
    rig_up_kept(&g, server_main, &r);
    run_req(g.c, g.port, &r, 1);
    assert_int_equal(r.code, CURLE_GOT_NOTHING); /* resent, the server would have answered */
    assert_int_equal(r.g.statuses, 0);
    assert_int_equal(srv_accepts, 1); /* it went out on the kept connection */
    run_get(g.c, g.port, &r);
    assert_int_equal(r.code, CURLE_OK);
    assert_memory_equal(r.g.body, "two", 3);
    rig_down(&g);
    assert_int_equal(srv_accepts, 2);
}

/** Connection 1 answers one request and stays open; connection 2 answers two. */
static void *server_two_conns_main(void *arg)
{
    (void)arg;
    static const char ok[] = "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\none";
    int a = accept(srv_fd, NULL, NULL);
    srv_accepts++;
    if (a < 0 || !read_req(a) || write(a, ok, sizeof ok - 1) < 0)
        return NULL;
    int b = accept(srv_fd, NULL, NULL);
    srv_accepts++;
    for (int i = 0; i < 2 && b >= 0 && read_req(b); i++) {
        if (write(b, ok, sizeof ok - 1) < 0)
            break;
    }
    read_req(b); /* until the client closes its kept connections */
    read_req(a);
    close(b);
    close(a);
    return NULL;
}

/** A request sent at most once takes no kept connection that has been idle for long (the
 *  server's keep-alive timeout may be closing it): it opens a new one, which is kept after its
 *  answer like any other and serves the next request. */
static void test_once_takes_no_long_idle_connection(void **state)
{
    (void)state;
    struct rig g;
    struct run r;
    rig_up_kept(&g, server_two_conns_main, &r);
    usleep(600 * 1000); /* longer than H1_ONCE_IDLE_MS */
    run_req(g.c, g.port, &r, 1);
    assert_int_equal(r.code, CURLE_OK);
    assert_int_equal(srv_accepts, 2);
    run_req(g.c, g.port, &r, 1); /* connection 2, just used: taken (connection 1 is not) */
    assert_int_equal(r.code, CURLE_OK);
    rig_down(&g);
    assert_int_equal(srv_accepts, 2);
}

/** The second request goes out on the kept connection; the server closes it unanswered, so it
 *  is sent once more on a new connection and answered there. */
static void test_reuse_and_resend(void **state)
{
    (void)state;
    struct rig g;
    struct run r;
    rig_up_kept(&g, server_main, &r);
    assert_int_equal(r.g.status, 200);
    assert_memory_equal(r.g.body, "one", 3);
    run_get(g.c, g.port, &r);
    assert_int_equal(r.code, CURLE_OK);
    assert_memory_equal(r.g.body, "two", 3);
    assert_int_equal(r.g.body_len, 3);
    rig_down(&g);
    assert_int_equal(srv_accepts, 2);
}

/** Nothing listens: the exchange fails as not connected (libcurl's code). */
static void test_refused(void **state)
{
    (void)state;
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    bind(s, (struct sockaddr *)&a, sizeof a);
    getsockname(s, (struct sockaddr *)&a, &al);
    int port = ntohs(a.sin_port);
    close(s); /* a port nobody listens on */
    struct rig g;
    rig_up(&g, NULL);
    struct run r;
    run_get(g.c, port, &r);
    assert_int_equal(r.code, CURLE_COULDNT_CONNECT);
    assert_int_equal(r.g.statuses, 0);
    rig_down(&g);
}

/* ---- a reader that takes less than the answer: pause and resume ------------------------- */

#define BIG_BODY (200 * 1024)

/** Answers one GET with BIG_BODY bytes of a known pattern. */
static void *server_big_main(void *arg)
{
    (void)arg;
    int a = accept(srv_fd, NULL, NULL);
    srv_accepts++;
    if (a < 0 || !read_req(a))
        return NULL;
    char head[128];
    int hl = snprintf(head, sizeof head, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n", BIG_BODY);
    static char body[BIG_BODY];
    for (size_t i = 0; i < sizeof body; i++)
        body[i] = (char)('a' + i % 26);
    if (write(a, head, (size_t)hl) == hl) {
        size_t off = 0;
        while (off < sizeof body) {
            ssize_t w = write(a, body + off, sizeof body - off);
            if (w <= 0)
                break;
            off += (size_t)w;
        }
    }
    read_req(a); /* until the client closes its kept connection */
    close(a);
    return NULL;
}

/** A reader with a budget: room says what is left of it, 0 when spent (the exchange pauses). */
struct slow {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    size_t budget, got, over; /**< over: bytes handed beyond what room allowed */
    int pauses, done, code, bad_byte;
};

static void s_status(void *ctx, long st)
{
    (void)ctx;
    assert_int_equal(st, 200);
}

static int s_body(void *ctx, const char *p, size_t n)
{
    struct slow *s = ctx;
    pthread_mutex_lock(&s->mu);
    if (n > s->budget)
        s->over += n - s->budget;
    s->budget = n > s->budget ? 0 : s->budget - n;
    for (size_t i = 0; i < n; i++)
        if (p[i] != (char)('a' + (s->got + i) % 26))
            s->bad_byte = 1;
    s->got += n;
    pthread_mutex_unlock(&s->mu);
    return 0;
}

static size_t s_room(void *ctx)
{
    struct slow *s = ctx;
    pthread_mutex_lock(&s->mu);
    size_t b = s->budget;
    if (b == 0) {
        s->pauses++;
        pthread_cond_signal(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return b;
}

static int s_abort(void *ctx)
{
    (void)ctx;
    return 0;
}

static int64_t s_deadline(void *ctx)
{
    (void)ctx;
    return mono_ms() + 10000;
}

static void s_done(void *ctx, int code, const char *err)
{
    (void)err;
    struct slow *s = ctx;
    pthread_mutex_lock(&s->mu);
    s->code = code;
    s->done = 1;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

static const struct rku_h1_ops slow_ops = {.on_status = s_status,
                                           .on_body = s_body,
                                           .room = s_room,
                                           .should_abort = s_abort,
                                           .deadline = s_deadline,
                                           .on_done = s_done};

/** A reader that takes 10,000 bytes at a time gets the whole answer, never more than it had
 *  room for, in order, pausing each time its room is spent and going on when another thread
 *  resumes the exchange. */
static void test_pause_and_resume(void **state)
{
    (void)state;
    struct rig g;
    rig_up(&g, server_big_main);
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/", g.port);
    struct rku_h1_xchg x;
    memset(&x, 0, sizeof x);
    const char *host, *path;
    size_t hl;
    assert_int_equal(rku_h1_target(&x, url, &host, &hl, &path), 1);
    x.req = strdup("GET / HTTP/1.1\r\nHost: t\r\n\r\n");
    x.req_len = strlen(x.req);
    x.ops = &slow_ops;
    struct slow s;
    memset(&s, 0, sizeof s);
    pthread_mutex_init(&s.mu, NULL);
    pthread_cond_init(&s.cv, NULL);
    s.budget = 10000;
    x.ctx = &s;
    assert_int_equal(rku_h1_submit(g.c, &x), 0);
    /* handled: the pauses answered so far. A pause may come before this thread looks (the loop
     * fills the budget at once), so wait for one not answered yet rather than for the next. */
    int handled = 0;
    pthread_mutex_lock(&s.mu);
    while (!s.done) {
        while (!s.done && s.pauses == handled)
            pthread_cond_wait(&s.cv, &s.mu);
        if (s.done)
            break;
        handled = s.pauses;
        s.budget = 10000; /* the reader drained: room again */
        pthread_mutex_unlock(&s.mu);
        rku_h1_resume(g.c, &x);
        pthread_mutex_lock(&s.mu);
    }
    pthread_mutex_unlock(&s.mu);
    assert_int_equal(s.code, CURLE_OK);
    assert_int_equal(s.got, BIG_BODY);
    assert_int_equal(s.over, 0);
    assert_int_equal(s.bad_byte, 0);
    assert_true(s.pauses >= BIG_BODY / 10000);
    rku_h1_resume(g.c, &x); /* after the end: nothing happens */
    rig_down(&g);
    pthread_cond_destroy(&s.cv);
    pthread_mutex_destroy(&s.mu);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chunked_every_split),
        cmocka_unit_test(test_content_length),
        cmocka_unit_test(test_close_framed_and_keep_alive),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_headers_and_head_only),
        cmocka_unit_test(test_targets),
        cmocka_unit_test(test_reuse_and_resend),
        cmocka_unit_test(test_once_is_not_resent),
        cmocka_unit_test(test_once_takes_no_long_idle_connection),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_pause_and_resume),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
