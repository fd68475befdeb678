/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file fake_server.c
 * @brief A tiny scripted HTTP/1.1 server (one request per connection) for unit tests.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fake_server.h"

#define FAKE_MAX_REQS 64
#define FAKE_MAX_BODY (1u << 20)

static int listen_fd = -1;
static pthread_t thread;
static fake_handler cur_handler;
static struct fake_req reqs[FAKE_MAX_REQS];
static int nreqs;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

/** Read until the header terminator; returns bytes read (headers + any body prefix). */
static ssize_t read_head(int fd, char *buf, size_t cap, size_t *head_len)
{
    size_t n = 0;
    while (n < cap - 1) {
        ssize_t r = read(fd, buf + n, cap - 1 - n);
        if (r <= 0)
            return -1;
        n += (size_t)r;
        buf[n] = '\0';
        char *e = strstr(buf, "\r\n\r\n");
        if (e) {
            *head_len = (size_t)(e - buf) + 4;
            return (ssize_t)n;
        }
    }
    return -1;
}

/** Append bytes to a request body (bounded). */
static void body_add(struct fake_req *rq, const char *p, size_t n)
{
    if (rq->body_len + n > FAKE_MAX_BODY)
        n = FAKE_MAX_BODY - rq->body_len;
    memcpy(rq->body + rq->body_len, p, n);
    rq->body_len += n;
    rq->body[rq->body_len] = '\0';
}

/** Read a request body by Content-Length or chunked encoding. */
static void read_body(int fd, struct fake_req *rq, const char *pre, size_t pre_len)
{
    char v[64];
    rq->body = calloc(1, FAKE_MAX_BODY + 1);
    if (fake_header(rq, "Content-Length", v, sizeof v)) {
        size_t want = (size_t)strtoull(v, NULL, 10);
        body_add(rq, pre, pre_len < want ? pre_len : want);
        size_t got = pre_len < want ? pre_len : want;
        char buf[65536];
        while (got < want) {
            ssize_t r = read(fd, buf, sizeof buf);
            if (r <= 0)
                break;
            body_add(rq, buf, (size_t)r);
            got += (size_t)r;
        }
    } else if (fake_header(rq, "Transfer-Encoding", v, sizeof v)) {
        /* Keep the raw chunked stream; stop at the terminating chunk. */
        body_add(rq, pre, pre_len);
        char buf[65536];
        while (!strstr(rq->body, "\r\n0\r\n\r\n") && strncmp(rq->body, "0\r\n\r\n", 5) != 0) {
            ssize_t r = read(fd, buf, sizeof buf);
            if (r <= 0)
                break;
            body_add(rq, buf, (size_t)r);
        }
    }
}

/** Serve one connection. */
static void serve(int fd)
{
    static char buf[1 << 16];
    size_t head_len = 0;
    ssize_t n = read_head(fd, buf, sizeof buf, &head_len);
    if (n < 0)
        return;
    pthread_mutex_lock(&lock);
    if (nreqs >= FAKE_MAX_REQS) {
        pthread_mutex_unlock(&lock);
        return;
    }
    struct fake_req *rq = &reqs[nreqs];
    pthread_mutex_unlock(&lock);
    memset(rq, 0, sizeof(*rq));
    sscanf(buf, "%15s %1023s", rq->method, rq->target);
    char *eol = strstr(buf, "\r\n");
    size_t hl = head_len - (size_t)(eol + 2 - buf);
    if (hl >= sizeof rq->headers)
        hl = sizeof rq->headers - 1;
    memcpy(rq->headers, eol + 2, hl);
    read_body(fd, rq, buf + head_len, (size_t)n - head_len);
    pthread_mutex_lock(&lock);
    nreqs++;
    pthread_mutex_unlock(&lock);
    struct fake_resp resp = {200, "", 0, 0, 0};
    cur_handler(rq, &resp);
    if (resp.no_reply)
        return;
    const char *body = resp.body ? resp.body : "";
    char head[512];
    int hn;
    if (resp.stream)
        hn = snprintf(
            head, sizeof head,
            "HTTP/1.1 %d X\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n",
            resp.status);
    else
        hn = snprintf(head, sizeof head,
                      "HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                      "Connection: close\r\n\r\n",
                      resp.status, strlen(body));
    if (write(fd, head, (size_t)hn) < 0 || write(fd, body, strlen(body)) < 0)
        return;
    if (resp.stall_ms > 0)
        usleep((useconds_t)resp.stall_ms * 1000);
}

/** Accept loop. */
static void *accept_loop(void *arg)
{
    (void)arg;
    for (;;) {
        int fd = accept(listen_fd, NULL, NULL);
        if (fd < 0)
            return NULL;
        serve(fd);
        shutdown(fd, SHUT_RDWR);
        close(fd);
    }
}

/** Start the server; returns its port. */
int fake_start(fake_handler handler)
{
    cur_handler = handler;
    listen_fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = 0};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t sl = sizeof sa;
    if (listen_fd < 0 || bind(listen_fd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
        listen(listen_fd, 16) != 0 || getsockname(listen_fd, (struct sockaddr *)&sa, &sl) != 0)
        return -1;
    if (pthread_create(&thread, NULL, accept_loop, NULL) != 0)
        return -1;
    return ntohs(sa.sin_port);
}

/** Stop the server and forget the recorded requests. */
void fake_stop(void)
{
    shutdown(listen_fd, SHUT_RDWR);
    close(listen_fd);
    pthread_join(thread, NULL);
    listen_fd = -1;
    for (int i = 0; i < nreqs; i++)
        free(reqs[i].body);
    nreqs = 0;
}

/** Number of recorded requests. */
int fake_count(void)
{
    pthread_mutex_lock(&lock);
    int n = nreqs;
    pthread_mutex_unlock(&lock);
    return n;
}

/** The i-th recorded request. */
const struct fake_req *fake_get(int i)
{
    return &reqs[i];
}

/** Case-insensitive header lookup in the raw block. */
const char *fake_header(const struct fake_req *req, const char *name, char *buf, size_t len)
{
    size_t nl = strlen(name);
    const char *p = req->headers;
    while (*p) {
        const char *e = strstr(p, "\r\n");
        if (!e)
            e = p + strlen(p);
        if ((size_t)(e - p) > nl && strncasecmp(p, name, nl) == 0 && p[nl] == ':') {
            const char *v = p + nl + 1;
            while (*v == ' ')
                v++;
            size_t vl = (size_t)(e - v);
            if (vl >= len)
                vl = len - 1;
            memcpy(buf, v, vl);
            buf[vl] = '\0';
            return buf;
        }
        p = *e ? e + 2 : e;
    }
    return NULL;
}
