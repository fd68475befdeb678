/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A small HTTP/1.1 client for event loops (see rkh1.h for its users and threads).
 *
 * Why not libcurl for these: a command stream stays open for as long as its command runs, and
 * thousands run at once. An open libcurl transfer costs about 11 KiB (the easy handle, its
 * connection, their buffers); here an open exchange is its state (struct rku_h1_xchg, some
 * 250 bytes inside the caller's exchange) and a socket: response bytes are read into one
 * buffer of the client and handed on at once, the request's bytes are dropped once the answer
 * starts. For a relayed request the work per exchange is what it needs: one send, one or two
 * reads, no per-transfer bookkeeping and no poll of the socket before each use.
 *
 * What it speaks: one request at a time per connection (no pipelining), request bodies with
 * Content-Length, responses framed by chunked coding, Content-Length or the connection's end;
 * interim 1xx answers are skipped, answers to HEAD end with their head. A connection whose
 * response ended cleanly and may be kept goes to a small idle set (idle_max, dropped after
 * H1_IDLE_MS or as soon as the server closes it); a request sent on a kept connection that
 * ends before any answer byte is sent once more on a new connection, as libcurl does, unless
 * the exchange is sent at most once (a create: the server may have acted on it). A
 * reader that cannot take more (ops->room) pauses the socket's reading until rku_h1_resume.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <curl/curl.h>
#include <pthread.h>

#include "rkh1.h"
#include "rkcurlloop.h"

/** Kept idle connections by default (all origins together) and how long one is kept. */
#define H1_IDLE_DEFAULT 64
#define H1_IDLE_MS 60000
/** How often every open exchange gets its abort check (client gone, deadlines). */
#define H1_SWEEP_MS 500
/** Deadlines are acted on at most this late (a walk of every exchange per step at most). */
#define H1_DEADLINE_STEP_MS 10
/** The read buffer, shared by every exchange (the loop thread only). */
#define H1_READ_BUF (64 * 1024)
/** Socket events handled per run (more wait for the next pass, which comes at once). */
#define H1_EVENTS 128

/** A kept connection idle for longer than this is checked before reuse (a server's idle
 *  timeout may have closed it, or it may have sent something unasked); one kept busy is used
 *  at once: its close would have shown in the client's last pass. */
#define H1_IDLE_CHECK_MS 1000
/** An exchange sent at most once (rku_h1_xchg.once) takes a kept connection only when it has
 *  been idle for less than this, and only after checking it is still open: a server closes an
 *  idle connection after its keep-alive timeout (uvicorn's is at least 1 s, 30 s by default for
 *  OpenSandbox's server), so a connection idle this briefly is not racing that close. */
#define H1_ONCE_IDLE_MS 500

/** What a socket's owner is. */
enum h1_kind { H1_XCHG = 1, H1_IDLE };

/** A socket's registration in the client's epoll set, indexed by descriptor: its owner now
 *  (an exchange or an idle slot: a connection changes hands without an epoll_ctl) and the
 *  generation its epoll entry carries (an event of a descriptor closed and reused within one
 *  batch names an older generation and is dropped). */
struct h1_reg {
    void *owner;
    uint32_t gen;
    uint8_t kind; /**< what owner is (enum h1_kind) */
    uint8_t out;  /**< EPOLLOUT is watched */
};

/** A kept connection. */
struct h1_idle {
    int fd; /**< -1: the slot is free */
    struct sockaddr_in6 addr;
    socklen_t addr_len;
    int64_t since_ms;
};

struct rku_h1 {
    pthread_mutex_t mu;
    struct rku_h1_xchg *queue;   /**< submitted, not started (guarded by mu) */
    struct rku_h1_xchg *resumes; /**< paused exchanges to read again (guarded by mu) */
    int queued;                  /**< exchanges in queue (guarded by mu) */
    int open;                    /**< exchanges started and not ended (guarded by mu) */
    int (*wake)(void *);         /**< asks the owner for a pass (any thread) */
    void *wake_ctx;
    int epfd;                   /**< the exchanges' and idle connections' sockets */
    struct rku_h1_xchg *active; /**< started exchanges (owner thread only) */
    int64_t sweep_at;           /**< next abort check of every exchange */
    int64_t earliest;           /**< earliest deadline of an open exchange (0: none) */
    int64_t swept_at;           /**< when every exchange was last walked */
    int idle_max;
    struct h1_idle *idle; /**< idle_max slots */
    struct h1_reg *regs;  /**< by descriptor (owner thread only) */
    size_t nregs;
    uint32_t gen;               /**< the last registration's generation */
    struct rku_curl_loop *cl;   /**< rku_h1_new_on: the loop whose thread runs this client */
    struct rku_loop_source src; /**< ... and this client as its event source */
    char buf[H1_READ_BUF];
};

/* ------------------------------------------------------------------------ */
/* The head buffer                                                           */
/* ------------------------------------------------------------------------ */

static void h1_buf_free(struct rku_h1_buf *b)
{
    free(b->p);
    memset(b, 0, sizeof *b);
}

/** Append n bytes (and keep a NUL after them); grows from 64 bytes, latches oom. */
static void h1_buf_putn(struct rku_h1_buf *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

/* ------------------------------------------------------------------------ */
/* The response parser (no I/O)                                              */
/* ------------------------------------------------------------------------ */

/** Parser states. */
enum {
    RS_HEAD = 0, /* reading the head */
    RS_LENGTH,   /* Content-Length body */
    RS_CLOSE,    /* body until the connection ends */
    RS_CH_SIZE,  /* chunk-size digits */
    RS_CH_EXT,   /* chunk extension, up to the line's end */
    RS_CH_LF,    /* the LF after a chunk-size line's CR */
    RS_CH_DATA,  /* chunk data */
    RS_CH_CR,    /* the CRLF after chunk data */
    RS_CH_DLF,
    RS_TRAILER, /* trailer lines up to an empty one */
    RS_DONE
};

void rku_h1_resp_reset(struct rku_h1_resp *r)
{
    size_t head_max = r->head_max;
    int head_only = r->head_only;
    h1_buf_free(&r->head);
    memset(r, 0, sizeof(*r));
    r->head_max = head_max;
    r->head_only = head_only;
}

/** 1 when the comma-separated header value v (length n) holds token t (case-insensitive). */
static int has_token(const char *v, size_t n, const char *t)
{
    size_t tl = strlen(t);
    size_t i = 0;
    while (i < n) {
        while (i < n && (v[i] == ' ' || v[i] == '\t' || v[i] == ','))
            i++;
        size_t s = i;
        while (i < n && v[i] != ',')
            i++;
        size_t e = i;
        while (e > s && (v[e - 1] == ' ' || v[e - 1] == '\t'))
            e--;
        if (e - s == tl && strncasecmp(v + s, t, tl) == 0)
            return 1;
    }
    return 0;
}

/** 1 when the last coding of a Transfer-Encoding value is chunked. */
static int last_is_chunked(const char *v, size_t n)
{
    size_t e = n;
    while (e > 0 && (v[e - 1] == ' ' || v[e - 1] == '\t'))
        e--;
    size_t s = e;
    while (s > 0 && v[s - 1] != ',')
        s--;
    while (s < e && (v[s] == ' ' || v[s] == '\t'))
        s++;
    return e - s == 7 && strncasecmp(v + s, "chunked", 7) == 0;
}

/** Read a complete head (r->head, ending in an empty line). 0, or -1 when it is not a valid
 *  HTTP/1.x response head. Sets status, framing and keep-alive; hands a final answer's
 *  headers to ops->on_header. */
/* Parse the complete head p[0..size) (it ends with its empty line; no NUL needed after it). */
static int parse_head(struct rku_h1_resp *r, const char *p, size_t size,
                      const struct rku_h1_ops *ops, void *ctx)
{
    const char *end = p + size;
    if (size < 13 || strncmp(p, "HTTP/1.", 7) != 0 || (p[7] != '0' && p[7] != '1') || p[8] != ' ')
        return -1;
    int minor = p[7] - '0';
    long st = 0;
    for (int i = 9; i < 12; i++) {
        if (p[i] < '0' || p[i] > '9')
            return -1;
        st = st * 10 + (p[i] - '0');
    }
    if (st < 100 || (p[12] != ' ' && p[12] != '\r' && p[12] != '\n'))
        return -1;
    r->status = st;
    int final = st >= 200;
    int keep = minor == 1, chunked = 0, te = 0, have_len = 0;
    int64_t len = 0;
    const char *line = memchr(p, '\n', (size_t)(end - p));
    while (line && ++line < end) {
        const char *eol = memchr(line, '\n', (size_t)(end - line));
        if (!eol)
            break;
        size_t ll = (size_t)(eol - line);
        if (ll && line[ll - 1] == '\r')
            ll--;
        if (ll == 0)
            break; /* the empty line that ends the head */
        /* A folded line (obs-fold) is refused (RFC 9112 5.2), and so is a bare CR. */
        const char *colon = memchr(line, ':', ll);
        if (!colon || colon == line || line[0] == ' ' || line[0] == '\t' || memchr(line, '\r', ll))
            return -1;
        size_t nl = (size_t)(colon - line);
        const char *v = colon + 1;
        size_t vl = ll - nl - 1;
        while (vl && (*v == ' ' || *v == '\t'))
            v++, vl--;
        while (vl && (v[vl - 1] == ' ' || v[vl - 1] == '\t'))
            vl--;
        if (final && ops->on_header)
            ops->on_header(ctx, line, nl, v, vl);
        if (nl == 17 && strncasecmp(line, "transfer-encoding", 17) == 0) {
            te = 1;
            chunked = last_is_chunked(v, vl);
        } else if (nl == 14 && strncasecmp(line, "content-length", 14) == 0) {
            int64_t n = 0;
            if (vl == 0 || vl > 18)
                return -1;
            for (size_t i = 0; i < vl; i++) {
                if (v[i] < '0' || v[i] > '9')
                    return -1;
                n = n * 10 + (v[i] - '0');
            }
            if (have_len && n != len)
                return -1; /* two different lengths: no way to tell where the body ends */
            have_len = 1;
            len = n;
        } else if (nl == 10 && strncasecmp(line, "connection", 10) == 0) {
            if (has_token(v, vl, "close"))
                keep = 0;
            else if (has_token(v, vl, "keep-alive"))
                keep = 1;
        }
        line = eol;
    }
    r->keep_alive = keep;
    if (final && r->head_only) {
        r->state = RS_DONE; /* the framing headers describe the GET answer, not sent */
    } else if (st == 204 || st == 304 || (st >= 100 && st < 200)) {
        r->state = RS_DONE;
    } else if (te) {
        /* RFC 9112 6.3: a coding other than chunked last runs until the connection ends. */
        r->state = chunked ? RS_CH_SIZE : RS_CLOSE;
        if (!chunked)
            r->keep_alive = 0;
    } else if (have_len) {
        r->left = len;
        r->state = len ? RS_LENGTH : RS_DONE;
    } else {
        r->state = RS_CLOSE;
        r->keep_alive = 0;
    }
    return 0;
}

/** Take head bytes from p; *used says how many. 1 once a final response's head is complete,
 *  0 for more, -1 when the head is invalid or too long. */
static int feed_head(struct rku_h1_resp *r, const char *p, size_t n, size_t *used,
                     const struct rku_h1_ops *ops, void *ctx)
{
    size_t max = r->head_max ? r->head_max : RKU_H1_HEAD_MAX;
    if (r->head.len == 0) {
        /* The usual case: the whole head came in this read. It is parsed where it lies,
         * without the copy into the head buffer (which a head split over reads needs). */
        size_t lim = n < max ? n : max;
        for (const char *nl = memchr(p, '\n', lim); nl;
             nl = memchr(nl + 1, '\n', lim - (size_t)(nl + 1 - p))) {
            size_t i = (size_t)(nl - p);
            if ((i >= 1 && p[i - 1] == '\n') || (i >= 2 && p[i - 1] == '\r' && p[i - 2] == '\n')) {
                *used = i + 1;
                return parse_head(r, p, i + 1, ops, ctx) == 0 ? 1 : -1;
            }
        }
    }
    size_t room = max - r->head.len;
    size_t take = n < room ? n : room;
    /* Look for the empty line from where the last feed stopped (3 bytes back). */
    size_t from = r->head.len > 3 ? r->head.len - 3 : 0;
    h1_buf_putn(&r->head, p, take); /* grows from 64 bytes: a slow head does not hold 16 KiB */
    if (r->head.oom)
        return -1;
    char *h = r->head.p;
    for (size_t i = from; i < r->head.len; i++) {
        if (h[i] != '\n')
            continue;
        int end = (i >= 1 && h[i - 1] == '\n') || (i >= 2 && h[i - 1] == '\r' && h[i - 2] == '\n');
        if (!end)
            continue;
        size_t head_end = i + 1;
        *used = take - (r->head.len - head_end);
        r->head.len = head_end;
        h[head_end] = '\0';
        return parse_head(r, r->head.p, r->head.len, ops, ctx) == 0 ? 1 : -1;
    }
    *used = take;
    if (take < n || r->head.len >= max) {
        r->too_big = 1;
        return -1;
    }
    return 0;
}

int rku_h1_resp_feed(struct rku_h1_resp *r, const char *p, size_t n, size_t *used,
                     const struct rku_h1_ops *ops, void *ctx)
{
    size_t i = 0;
    while (i < n && r->state != RS_DONE) {
        if (r->state == RS_HEAD) {
            size_t u = 0;
            int h = feed_head(r, p + i, n - i, &u, ops, ctx);
            i += u;
            if (h < 0) {
                *used = i;
                return RKU_H1_BAD;
            }
            if (h == 0)
                continue;
            if (r->status >= 100 && r->status < 200) {
                if (r->status == 101) {
                    *used = i;
                    return RKU_H1_BAD; /* never asked to switch protocols */
                }
                r->head.len = 0; /* an interim answer: the real one follows */
                r->state = RS_HEAD;
                continue;
            }
            h1_buf_free(&r->head);
            r->got_head = 1;
            ops->on_status(ctx, r->status);
            continue;
        }
        if (r->state == RS_LENGTH || r->state == RS_CLOSE || r->state == RS_CH_DATA) {
            size_t take = n - i;
            if (r->state != RS_CLOSE && (int64_t)take > r->left)
                take = (size_t)r->left;
            if (ops->on_body(ctx, p + i, take) != 0) {
                *used = i + take;
                return RKU_H1_STOP;
            }
            i += take;
            if (r->state != RS_CLOSE) {
                r->left -= (int64_t)take;
                if (r->left == 0)
                    r->state = r->state == RS_LENGTH ? RS_DONE : RS_CH_CR;
            }
            continue;
        }
        char c = p[i++];
        switch (r->state) {
        case RS_CH_SIZE: {
            int d = (c >= '0' && c <= '9')   ? c - '0'
                    : (c >= 'a' && c <= 'f') ? c - 'a' + 10
                    : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                                             : -1;
            if (d >= 0) {
                if (++r->digits > 15) {
                    *used = i;
                    return RKU_H1_BAD;
                }
                r->left = r->left * 16 + d;
                break;
            }
            if (r->digits == 0 || (c != ';' && c != ' ' && c != '\t' && c != '\r' && c != '\n')) {
                *used = i;
                return RKU_H1_BAD;
            }
            r->state = c == '\r' ? RS_CH_LF : c == '\n' ? RS_CH_DATA : RS_CH_EXT;
            break;
        }
        case RS_CH_EXT:
            if (c == '\n')
                r->state = RS_CH_DATA;
            else if (++r->line_len > RKU_H1_HEAD_MAX) {
                *used = i;
                return RKU_H1_BAD;
            }
            break;
        case RS_CH_LF:
            if (c != '\n') {
                *used = i;
                return RKU_H1_BAD;
            }
            r->state = RS_CH_DATA;
            break;
        case RS_CH_CR:
            if (c == '\n') {
                r->state = RS_CH_SIZE;
                r->left = 0;
                r->digits = 0;
            } else if (c == '\r') {
                r->state = RS_CH_DLF;
            } else {
                *used = i;
                return RKU_H1_BAD;
            }
            break;
        case RS_CH_DLF:
            if (c != '\n') {
                *used = i;
                return RKU_H1_BAD;
            }
            r->state = RS_CH_SIZE;
            r->left = 0;
            r->digits = 0;
            break;
        case RS_TRAILER:
            if (c == '\n') {
                if (r->line_len == 0)
                    r->state = RS_DONE;
                r->line_len = 0;
            } else if (c != '\r') {
                r->line_len++;
                if (++r->trailer_len > RKU_H1_HEAD_MAX) {
                    *used = i;
                    return RKU_H1_BAD;
                }
            }
            break;
        default:
            *used = i;
            return RKU_H1_BAD;
        }
        if (r->state == RS_CH_DATA) {
            /* A chunk-size line ended: size 0 is the last chunk, then the trailer. */
            r->line_len = 0;
            r->digits = 0;
            if (r->left == 0)
                r->state = RS_TRAILER;
        }
    }
    *used = i;
    return r->state == RS_DONE ? RKU_H1_DONE : RKU_H1_MORE;
}

int rku_h1_resp_eof(const struct rku_h1_resp *r)
{
    return r->state == RS_CLOSE || r->state == RS_DONE;
}

/* ------------------------------------------------------------------------ */
/* Targets                                                                   */
/* ------------------------------------------------------------------------ */

int rku_h1_target(struct rku_h1_xchg *hx, const char *url, const char **host, size_t *host_len,
                  const char **path)
{
    if (strncmp(url, "http://", 7) != 0)
        return 0;
    const char *h = url + 7, *p = h;
    char lit[INET6_ADDRSTRLEN];
    size_t ll;
    memset(&hx->addr, 0, sizeof(hx->addr));
    if (*p == '[') {
        const char *close = strchr(p, ']');
        if (!close || (size_t)(close - p - 1) >= sizeof lit)
            return 0;
        ll = (size_t)(close - p - 1);
        memcpy(lit, p + 1, ll);
        lit[ll] = '\0';
        if (inet_pton(AF_INET6, lit, &hx->addr.sin6_addr) != 1)
            return 0;
        hx->addr.sin6_family = AF_INET6;
        hx->addr_len = sizeof(struct sockaddr_in6);
        p = close + 1;
    } else {
        ll = strcspn(p, ":/?#");
        if (ll == 0 || ll >= sizeof lit)
            return 0;
        memcpy(lit, p, ll);
        lit[ll] = '\0';
        struct sockaddr_in *a4 = (struct sockaddr_in *)&hx->addr;
        if (inet_pton(AF_INET, lit, &a4->sin_addr) != 1)
            return 0; /* a name: libcurl resolves it */
        a4->sin_family = AF_INET;
        hx->addr_len = sizeof(struct sockaddr_in);
        p += ll;
    }
    long port = 80;
    if (*p == ':') {
        p++;
        port = 0;
        int digits = 0;
        while (*p >= '0' && *p <= '9' && digits < 6) {
            port = port * 10 + (*p++ - '0');
            digits++;
        }
        if (digits == 0 || port < 1 || port > 65535)
            return 0;
    }
    if (*p != '/' && *p != '\0')
        return 0;
    /* The path goes on the request line as it is: only visible ASCII (our paths are escaped). */
    for (const char *c = p; *c; c++) {
        if ((unsigned char)*c <= 0x20 || (unsigned char)*c >= 0x7f || *c == '#')
            return 0;
    }
    if (hx->addr.sin6_family == AF_INET6)
        hx->addr.sin6_port = htons((uint16_t)port);
    else
        ((struct sockaddr_in *)&hx->addr)->sin_port = htons((uint16_t)port);
    *host = h;
    *host_len = (size_t)(p - h);
    *path = *p ? p : "/";
    return 1;
}

/* ------------------------------------------------------------------------ */
/* The client on the loop                                                    */
/* ------------------------------------------------------------------------ */

/** Register fd for owner (EPOLLIN, and EPOLLOUT when out). 0, or -1. */
static int reg_add(struct rku_h1 *c, int fd, void *owner, int out)
{
    if ((size_t)fd >= c->nregs) {
        size_t n = c->nregs ? c->nregs : 64;
        while (n <= (size_t)fd)
            n *= 2;
        struct h1_reg *r = realloc(c->regs, n * sizeof *r);
        if (!r)
            return -1;
        memset(r + c->nregs, 0, (n - c->nregs) * sizeof *r);
        c->regs = r;
        c->nregs = n;
    }
    if (++c->gen == 0)
        c->gen = 1;
    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP | (out ? EPOLLOUT : 0),
                             .data.u64 = (uint64_t)c->gen << 32 | (uint32_t)fd};
    if (epoll_ctl(c->epfd, EPOLL_CTL_ADD, fd, &ev) != 0)
        return -1;
    c->regs[fd] = (struct h1_reg){.owner = owner, .gen = c->gen, .kind = H1_XCHG, .out = out};
    return 0;
}

/** Watch fd (registered) for EPOLLOUT or not; an epoll_ctl only when that changes. */
static int reg_out(struct rku_h1 *c, int fd, int out)
{
    struct h1_reg *r = &c->regs[fd];
    if (r->out == (out != 0))
        return 0;
    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP | (out ? EPOLLOUT : 0),
                             .data.u64 = (uint64_t)r->gen << 32 | (uint32_t)fd};
    if (epoll_ctl(c->epfd, EPOLL_CTL_MOD, fd, &ev) != 0)
        return -1;
    r->out = out != 0;
    return 0;
}

/** Take fd out of the set (before it is closed, or while its reading is paused). */
static void reg_del(struct rku_h1 *c, int fd)
{
    epoll_ctl(c->epfd, EPOLL_CTL_DEL, fd, NULL);
    if ((size_t)fd < c->nregs)
        c->regs[fd] = (struct h1_reg){0};
}

/** The registration an event names, or NULL for a stale one. */
static const struct h1_reg *reg_of(const struct rku_h1 *c, uint64_t data)
{
    size_t fd = (uint32_t)data;
    uint32_t gen = (uint32_t)(data >> 32);
    return fd < c->nregs && c->regs[fd].gen == gen && c->regs[fd].owner ? &c->regs[fd] : NULL;
}

static int same_addr(const struct h1_idle *e, const struct rku_h1_xchg *x)
{
    return e->addr_len == x->addr_len && memcmp(&e->addr, &x->addr, x->addr_len) == 0;
}

static void idle_close(struct rku_h1 *c, struct h1_idle *e)
{
    reg_del(c, e->fd);
    close(e->fd);
    e->fd = -1;
}

/** 1 when a kept connection is still usable: nothing to read, not closed by the server. */
static int idle_alive(int fd)
{
    char b;
    ssize_t n = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

/** Keep x's connection for the next exchange to its origin (closing the oldest when full). */
static void idle_put(struct rku_h1 *c, struct rku_h1_xchg *x, int64_t now)
{
    struct h1_idle *slot = NULL;
    for (int i = 0; i < c->idle_max; i++) {
        struct h1_idle *e = &c->idle[i];
        if (e->fd < 0) {
            slot = e;
            break;
        }
        if (!slot || e->since_ms < slot->since_ms)
            slot = e;
    }
    if (slot->fd >= 0)
        idle_close(c, slot);
    if (reg_out(c, x->fd, 0) != 0) {
        reg_del(c, x->fd);
        close(x->fd);
        x->fd = -1;
        return;
    }
    c->regs[x->fd].owner = slot;
    c->regs[x->fd].kind = H1_IDLE;
    slot->fd = x->fd;
    slot->addr = x->addr;
    slot->addr_len = x->addr_len;
    slot->since_ms = now;
    x->fd = -1;
}

/** A kept connection to x's origin, now x's, or -1. */
static int idle_take(struct rku_h1 *c, struct rku_h1_xchg *x, int64_t now)
{
    for (int i = 0; i < c->idle_max; i++) {
        struct h1_idle *e = &c->idle[i];
        if (e->fd < 0 || !same_addr(e, x))
            continue;
        int fd = e->fd;
        if (x->once && now - e->since_ms >= H1_ONCE_IDLE_MS)
            continue; /* may be closing: the exchange opens a new one */
        if ((x->once || now - e->since_ms >= H1_IDLE_CHECK_MS) && !idle_alive(fd)) {
            idle_close(c, e);
            continue;
        }
        e->fd = -1;
        c->regs[fd].owner = x;
        c->regs[fd].kind = H1_XCHG;
        return fd;
    }
    return -1;
}

/** x's deadline now (the earlier of the caller's and the connect bound; 0: none). */
static int64_t xchg_deadline(const struct rku_h1_xchg *x)
{
    int64_t dl = x->ops->deadline(x->ctx);
    if (x->connecting && x->connect_at > 0 && (dl == 0 || x->connect_at < dl))
        dl = x->connect_at;
    return dl;
}

static void note_deadline(struct rku_h1 *c, const struct rku_h1_xchg *x)
{
    int64_t dl = xchg_deadline(x);
    if (dl > 0 && (c->earliest == 0 || dl < c->earliest))
        c->earliest = dl;
}

/** End x with a libcurl code: out of the client, its connection kept (reuse) or closed, then
 *  on_done (which may free x: x is not touched after it). */
static void xchg_end(struct rku_h1 *c, struct rku_h1_xchg *x, int code, const char *err, int reuse,
                     int64_t now)
{
    if (x->fd >= 0) {
        if (reuse)
            idle_put(c, x, now);
        if (x->fd >= 0) {
            reg_del(c, x->fd);
            close(x->fd);
            x->fd = -1;
        }
    }
    if (x->prev)
        x->prev->next = x->next;
    else
        c->active = x->next;
    if (x->next)
        x->next->prev = x->prev;
    x->next = x->prev = NULL;
    free(x->req);
    x->req = NULL;
    rku_h1_resp_reset(&x->resp);
    pthread_mutex_lock(&c->mu);
    c->open--;
    x->open = 0;
    if (x->resume_queued) { /* a resume asked for before the end: nothing to do now */
        struct rku_h1_xchg **pp = &c->resumes;
        while (*pp && *pp != x)
            pp = &(*pp)->rnext;
        if (*pp)
            *pp = x->rnext;
        x->resume_queued = 0;
    }
    pthread_mutex_unlock(&c->mu);
    const struct rku_h1_ops *ops = x->ops;
    void *ctx = x->ctx;
    ops->on_done(ctx, code, err);
}

/** Describe a socket failure for x in its error text. */
static void xchg_fail(struct rku_h1 *c, struct rku_h1_xchg *x, int code, const char *what, int err,
                      int64_t now)
{
    char msg[160], ip[INET6_ADDRSTRLEN] = "?";
    int port;
    if (x->addr.sin6_family == AF_INET6) {
        inet_ntop(AF_INET6, &x->addr.sin6_addr, ip, sizeof ip);
        port = ntohs(x->addr.sin6_port);
    } else {
        const struct sockaddr_in *a4 = (const struct sockaddr_in *)&x->addr;
        inet_ntop(AF_INET, &a4->sin_addr, ip, sizeof ip);
        port = ntohs(a4->sin_port);
    }
    if (err)
        snprintf(msg, sizeof msg, "%s %s port %d: %s", what, ip, port, strerror(err));
    else
        snprintf(msg, sizeof msg, "%s %s port %d", what, ip, port);
    xchg_end(c, x, code, msg, 0, now);
}

/** Watch x's socket for what its phase needs: registered anew (add) or changed. */
static int xchg_watch(struct rku_h1 *c, struct rku_h1_xchg *x, int add)
{
    int out = x->sent < x->req_len;
    return add ? reg_add(c, x->fd, x, out) : reg_out(c, x->fd, out);
}

static int xchg_send(struct rku_h1 *c, struct rku_h1_xchg *x, int64_t now);

/** Open x's connection: a kept one (idle_take decides which) unless x is being resent. */
static void xchg_connect(struct rku_h1 *c, struct rku_h1_xchg *x, int64_t now)
{
    x->sent = 0;
    x->got_bytes = 0;
    x->reused = 0;
    x->connecting = 0;
    x->paused = 0;
    rku_h1_resp_reset(&x->resp);
    int fd = x->resent ? -1 : idle_take(c, x, now);
    if (fd >= 0) {
        x->fd = fd;
        x->reused = 1;
        note_deadline(c, x);
        xchg_send(c, x, now); /* at once: a kept connection is writable (watched from there) */
        return;
    }
    int family = x->addr.sin6_family == AF_INET6 ? AF_INET6 : AF_INET;
    fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        x->fd = -1;
        xchg_fail(c, x, CURLE_COULDNT_CONNECT, "Failed to open a socket to", errno, now);
        return;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    x->fd = fd;
    if (connect(fd, (const struct sockaddr *)&x->addr, x->addr_len) != 0) {
        if (errno != EINPROGRESS) {
            xchg_fail(c, x, CURLE_COULDNT_CONNECT, "Failed to connect to", errno, now);
            return;
        }
        x->connecting = 1;
        x->connect_at = x->connect_ms > 0 ? now + x->connect_ms : 0;
    }
    if (reg_add(c, fd, x, 1) != 0) {
        xchg_fail(c, x, CURLE_COULDNT_CONNECT, "Failed to watch connection to", errno, now);
        return;
    }
    note_deadline(c, x);
}

/** The request on a kept connection met its end before any answer: once more on a new one. */
static int xchg_resend(struct rku_h1 *c, struct rku_h1_xchg *x, int64_t now)
{
    if (!x->reused || x->got_bytes || x->resent || x->once)
        return 0;
    reg_del(c, x->fd);
    close(x->fd);
    x->fd = -1;
    x->resent = 1;
    xchg_connect(c, x, now);
    return 1;
}

/** Send what is left of the request. 1 when x ended or started over (its state is no longer
 *  this attempt's), 0 otherwise. */
static int xchg_send(struct rku_h1 *c, struct rku_h1_xchg *x, int64_t now)
{
    while (x->sent < x->req_len) {
        ssize_t n = send(x->fd, x->req + x->sent, x->req_len - x->sent, MSG_NOSIGNAL);
        if (n > 0) {
            x->sent += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        int err = errno;
        if (!xchg_resend(c, x, now))
            xchg_fail(c, x, CURLE_SEND_ERROR, "Failed to send the request to", err, now);
        return 1;
    }
    if (xchg_watch(c, x, 0) != 0) {
        xchg_fail(c, x, CURLE_SEND_ERROR, "Failed to watch connection to", errno, now);
        return 1;
    }
    return 0;
}

static void xchg_read(struct rku_h1 *c, struct rku_h1_xchg *x, int64_t now);

/** Socket activity on x. */
static void xchg_event(struct rku_h1 *c, struct rku_h1_xchg *x, uint32_t events, int64_t now)
{
    if (x->connecting) {
        if (!(events & (EPOLLOUT | EPOLLERR | EPOLLHUP)))
            return;
        int err = 0;
        socklen_t el = sizeof err;
        if (getsockopt(x->fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0)
            err = errno;
        if (err) {
            xchg_fail(c, x, CURLE_COULDNT_CONNECT, "Failed to connect to", err, now);
            return;
        }
        x->connecting = 0;
    }
    if (x->sent < x->req_len && (events & EPOLLOUT) && xchg_send(c, x, now))
        return;
    if (!(events & (EPOLLIN | EPOLLERR | EPOLLHUP)) || x->paused)
        return;
    xchg_read(c, x, now);
}

/** Read and parse what x's socket has, as far as x's reader has room. */
static void xchg_read(struct rku_h1 *c, struct rku_h1_xchg *x, int64_t now)
{
    size_t want = sizeof c->buf;
    if (x->ops->room) {
        size_t room = x->ops->room(x->ctx);
        if (room == 0) {
            /* Until rku_h1_resume, out of the set: a socket that failed meanwhile would
             * otherwise report its error in every pass. */
            x->paused = 1;
            reg_del(c, x->fd);
            return;
        }
        if (room < want)
            want = room;
    }
    ssize_t n = recv(x->fd, c->buf, want, 0);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return;
    if (n <= 0) {
        int err = n < 0 ? errno : 0;
        if (xchg_resend(c, x, now))
            return;
        if (n == 0 && rku_h1_resp_eof(&x->resp) && x->resp.got_head)
            xchg_end(c, x, CURLE_OK, NULL, 0, now);
        else if (!x->got_bytes)
            xchg_fail(c, x, err ? CURLE_RECV_ERROR : CURLE_GOT_NOTHING,
                      err ? "Failed to receive from" : "Empty reply from", err, now);
        else
            xchg_fail(c, x, err ? CURLE_RECV_ERROR : CURLE_PARTIAL_FILE,
                      err ? "Failed to receive from"
                          : "Connection closed before the answer ended by",
                      err, now);
        return;
    }
    if (!x->got_bytes) {
        x->got_bytes = 1;
        if (x->sent == x->req_len) {
            free(x->req); /* answered: never resent */
            x->req = NULL;
        }
    }
    size_t used = 0;
    int r = rku_h1_resp_feed(&x->resp, c->buf, (size_t)n, &used, x->ops, x->ctx);
    if (r == RKU_H1_MORE) {
        note_deadline(c, x); /* the callbacks may have moved the deadline */
        return;
    }
    if (r == RKU_H1_DONE) {
        /* Bytes beyond the answer, or a request not yet fully sent: the connection is not
         * in a state to be kept. */
        int reuse = x->resp.keep_alive && used == (size_t)n && x->sent == x->req_len;
        xchg_end(c, x, CURLE_OK, NULL, reuse, now);
    } else if (r == RKU_H1_STOP) {
        xchg_end(c, x, CURLE_WRITE_ERROR, "the answer's reader stopped", 0, now);
    } else if (x->resp.too_big) {
        xchg_fail(c, x, CURLE_RECV_ERROR, "Response headers too large from", 0, now);
    } else {
        xchg_fail(c, x, CURLE_WEIRD_SERVER_REPLY, "Malformed HTTP answer from", 0, now);
    }
}

/** Every exchange's abort check (and the deadlines that passed); recomputes the earliest. */
static void sweep(struct rku_h1 *c, int64_t now, int full)
{
    int64_t earliest = 0;
    struct rku_h1_xchg *x = c->active;
    while (x) {
        struct rku_h1_xchg *next = x->next;
        int64_t dl = xchg_deadline(x);
        if (x->connecting && x->connect_at > 0 && now >= x->connect_at) {
            xchg_fail(c, x, CURLE_OPERATION_TIMEDOUT, "Connection timed out to", 0, now);
        } else if ((full || (dl > 0 && now >= dl)) && x->ops->should_abort(x->ctx)) {
            xchg_end(c, x, CURLE_ABORTED_BY_CALLBACK, NULL, 0, now);
        } else if (dl > 0 && now >= dl) {
            /* The caller's check did not end it: its deadline is its own business now. */
            xchg_end(c, x, CURLE_OPERATION_TIMEDOUT, "Operation timed out", 0, now);
        } else if (dl > 0 && (earliest == 0 || dl < earliest)) {
            earliest = dl;
        }
        x = next;
    }
    c->earliest = earliest;
    for (int i = 0; full && i < c->idle_max; i++) {
        if (c->idle[i].fd >= 0 && now - c->idle[i].since_ms >= H1_IDLE_MS)
            idle_close(c, &c->idle[i]);
    }
}

/** Read the paused exchanges whose readers asked for more (owner thread). */
static void run_resumes(struct rku_h1 *c, int64_t now)
{
    pthread_mutex_lock(&c->mu);
    struct rku_h1_xchg *r = c->resumes;
    c->resumes = NULL;
    for (struct rku_h1_xchg *x = r; x; x = x->rnext)
        x->resume_queued = 0;
    pthread_mutex_unlock(&c->mu);
    while (r) {
        struct rku_h1_xchg *x = r;
        r = r->rnext; /* x may end below */
        if (!x->paused || x->fd < 0)
            continue;
        x->paused = 0;
        if (xchg_watch(c, x, 1) != 0) {
            xchg_fail(c, x, CURLE_RECV_ERROR, "Failed to watch connection to", errno, now);
            continue;
        }
        note_deadline(c, x);
        xchg_read(c, x, now); /* what waits in the socket (a pause again when still no room) */
    }
}

int rku_h1_run(struct rku_h1 *c, int64_t now)
{
    pthread_mutex_lock(&c->mu);
    struct rku_h1_xchg *q = c->queue;
    c->queue = NULL;
    c->open += c->queued;
    c->queued = 0;
    pthread_mutex_unlock(&c->mu);
    /* The queue is newest first: start in submission order. */
    struct rku_h1_xchg *rev = NULL;
    while (q) {
        struct rku_h1_xchg *next = q->next;
        q->next = rev;
        rev = q;
        q = next;
    }
    while (rev) {
        struct rku_h1_xchg *x = rev;
        rev = rev->next;
        x->prev = NULL;
        x->next = c->active;
        if (c->active)
            c->active->prev = x;
        c->active = x;
        xchg_connect(c, x, now);
    }
    run_resumes(c, now);
    struct epoll_event evs[H1_EVENTS];
    int n = epoll_wait(c->epfd, evs, H1_EVENTS, 0);
    for (int i = 0; i < n; i++) {
        const struct h1_reg *reg = reg_of(c, evs[i].data.u64);
        if (!reg)
            continue; /* a descriptor closed earlier in this batch */
        if (reg->kind == H1_IDLE) {
            struct h1_idle *e = reg->owner;
            if (e->fd >= 0 && !idle_alive(e->fd))
                idle_close(c, e); /* closed by the server (or it sent what nobody asked for) */
            continue;
        }
        xchg_event(c, reg->owner, evs[i].events, now);
    }
    int full = now >= c->sweep_at;
    /* A deadline pass walks every exchange: at most one per H1_DEADLINE_STEP_MS, so that
     * thousands of deadlines spread over time cost a bounded number of walks. */
    int64_t due = c->earliest;
    if (due > 0 && due < c->swept_at + H1_DEADLINE_STEP_MS)
        due = c->swept_at + H1_DEADLINE_STEP_MS;
    if (full || (due > 0 && now >= due)) {
        sweep(c, now, full);
        c->swept_at = now;
        due = c->earliest > 0 && c->earliest < now + H1_DEADLINE_STEP_MS ? now + H1_DEADLINE_STEP_MS
                                                                         : c->earliest;
    }
    if (full)
        c->sweep_at = now + H1_SWEEP_MS;
    if (n == H1_EVENTS)
        return 0; /* more events may wait */
    int64_t until = c->sweep_at;
    if (due > 0 && due < until)
        until = due;
    return until > now ? (int)(until - now) : 0;
}

int rku_h1_busy(struct rku_h1 *c)
{
    pthread_mutex_lock(&c->mu);
    int busy = c->queued > 0 || c->open > 0;
    pthread_mutex_unlock(&c->mu);
    return busy;
}

struct rku_h1 *rku_h1_new(int idle_max, int (*wake)(void *wake_ctx), void *wake_ctx)
{
    struct rku_h1 *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->idle_max = idle_max > 0 ? idle_max : H1_IDLE_DEFAULT;
    c->idle = calloc((size_t)c->idle_max, sizeof *c->idle);
    c->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (!c->idle || c->epfd < 0) {
        if (c->epfd >= 0)
            close(c->epfd);
        free(c->idle);
        free(c);
        return NULL;
    }
    pthread_mutex_init(&c->mu, NULL);
    for (int i = 0; i < c->idle_max; i++)
        c->idle[i].fd = -1;
    c->wake = wake;
    c->wake_ctx = wake_ctx;
    return c;
}

/* rku_h1_new_on's glue: the curl loop runs the client as its event source. */
static struct rku_h1 *of_src(struct rku_loop_source *src)
{
    return (struct rku_h1 *)((char *)src - offsetof(struct rku_h1, src));
}

static int src_run(struct rku_loop_source *src, int64_t now)
{
    return rku_h1_run(of_src(src), now);
}

static int src_busy(struct rku_loop_source *src)
{
    return rku_h1_busy(of_src(src));
}

static int src_wake(void *ctx)
{
    return rku_curl_loop_wake_source(ctx);
}

struct rku_h1 *rku_h1_new_on(struct rku_curl_loop *cl, int idle_max)
{
    struct rku_h1 *c = rku_h1_new(idle_max, src_wake, cl);
    if (!c)
        return NULL;
    c->cl = cl;
    c->src.fd = c->epfd;
    c->src.run = src_run;
    c->src.busy = src_busy;
    rku_curl_loop_set_source(cl, &c->src);
    return c;
}

int rku_h1_fd(const struct rku_h1 *c)
{
    return c->epfd;
}

int rku_h1_submit(struct rku_h1 *c, struct rku_h1_xchg *x)
{
    if (!c)
        return -1;
    x->fd = -1;
    x->resent = 0;
    x->prev = NULL;
    x->paused = 0;
    x->resume_queued = 0;
    size_t head_max = x->head_max;
    memset(&x->resp, 0, sizeof(x->resp));
    x->resp.head_max = head_max;
    x->resp.head_only = x->head_only;
    /* Under mu: the owner's run (which takes mu) cannot miss x once the wake is in. */
    pthread_mutex_lock(&c->mu);
    if (c->wake(c->wake_ctx) != 0) {
        pthread_mutex_unlock(&c->mu);
        return -1;
    }
    x->open = 1;
    x->next = c->queue;
    c->queue = x;
    c->queued++;
    pthread_mutex_unlock(&c->mu);
    return 0;
}

void rku_h1_resume(struct rku_h1 *c, struct rku_h1_xchg *x)
{
    pthread_mutex_lock(&c->mu);
    if (x->open && !x->resume_queued && c->wake(c->wake_ctx) == 0) {
        x->resume_queued = 1;
        x->rnext = c->resumes;
        c->resumes = x;
    }
    pthread_mutex_unlock(&c->mu);
}

void rku_h1_abort_all(struct rku_h1 *c)
{
    if (!c)
        return;
    int64_t now = 0;
    for (;;) {
        pthread_mutex_lock(&c->mu);
        struct rku_h1_xchg *q = c->queue;
        c->queue = NULL;
        c->open += c->queued;
        c->queued = 0;
        pthread_mutex_unlock(&c->mu);
        while (q) { /* queued: into the active list, ended below */
            struct rku_h1_xchg *x = q;
            q = q->next;
            x->prev = NULL;
            x->next = c->active;
            if (c->active)
                c->active->prev = x;
            c->active = x;
        }
        if (!c->active)
            return;
        while (c->active) /* on_done may submit again: the outer loop takes those too */
            xchg_end(c, c->active, CURLE_ABORTED_BY_CALLBACK, NULL, 0, now);
    }
}

void rku_h1_free(struct rku_h1 *c)
{
    if (!c)
        return;
    for (int i = 0; i < c->idle_max; i++) {
        if (c->idle[i].fd >= 0)
            close(c->idle[i].fd);
    }
    close(c->epfd);
    pthread_mutex_destroy(&c->mu);
    free(c->regs);
    free(c->idle);
    free(c);
}
