/* Server-proxy relay for application ports: a simple blocking HTTP/1.0 relay to 127.0.0.1:P,
 * and for requests with `Upgrade: websocket` a raw byte relay after the app's 101 answer. */
#include "sim.h"

#include <fcntl.h>
#include <poll.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#define SIM_PROXY_MAX_RESPONSE (64 * 1024 * 1024)
#define SIM_PROXY_IO_TIMEOUT_S 180

/* Growable request buffer. */
struct sim_buf {
    char *d;
    size_t len;
};

/* Append n bytes to b. */
static void sim_buf_add(struct sim_buf *b, const char *s, size_t n)
{
    b->d = sim_xrealloc(b->d, b->len + n + 1);
    memcpy(b->d + b->len, s, n);
    b->len += n;
    b->d[b->len] = 0;
}

/* True for hop-by-hop or otherwise non-forwarded request headers. */
static bool sim_skip_header(const char *k)
{
    static const char *skip[] = {"Host",
                                 "Connection",
                                 "Keep-Alive",
                                 "Proxy-Connection",
                                 "Transfer-Encoding",
                                 "Upgrade",
                                 "TE",
                                 "Trailer",
                                 "Content-Length",
                                 "Authorization",
                                 "Cookie",
                                 "OPEN-SANDBOX-API-KEY",
                                 "Expect"};
    for (size_t i = 0; i < sizeof skip / sizeof skip[0]; i++)
        if (strcasecmp(k, skip[i]) == 0)
            return true;
    return false;
}

/* MHD iterator copying forwardable headers into the outgoing request. */
static enum MHD_Result sim_copy_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                       const char *value)
{
    (void)kind;
    struct sim_buf *b = cls;
    if (sim_skip_header(key) || !value)
        return MHD_YES;
    sim_buf_add(b, key, strlen(key));
    sim_buf_add(b, ": ", 2);
    sim_buf_add(b, value, strlen(value));
    sim_buf_add(b, "\r\n", 2);
    return MHD_YES;
}

/* MHD iterator re-encoding query arguments. */
static enum MHD_Result sim_copy_arg(void *cls, enum MHD_ValueKind kind, const char *key,
                                    const char *value)
{
    (void)kind;
    struct sim_buf *b = cls;
    const char *parts[2] = {key, value ? value : ""};
    if (b->len && b->d[b->len - 1] != '?')
        sim_buf_add(b, "&", 1);
    for (int i = 0; i < 2; i++) {
        if (i == 1)
            sim_buf_add(b, "=", 1);
        for (const unsigned char *p = (const unsigned char *)parts[i]; *p; p++) {
            char enc[4];
            if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
                strchr("-._~/", *p)) {
                sim_buf_add(b, (const char *)p, 1);
            } else {
                snprintf(enc, sizeof enc, "%%%02X", *p);
                sim_buf_add(b, enc, 3);
            }
        }
    }
    return MHD_YES;
}

#define SIM_WS_MAX_HEAD (64 * 1024)
#define SIM_WS_BUF (64 * 1024)
#define SIM_WS_LINGER_MS 5000

/* A WebSocket relay between the client's upgraded socket and the app's socket. */
struct sim_ws {
    int up_fd;
    int port;
    char *leftover; /* app bytes read past its 101 head */
    size_t leftover_len;
    char *what; /* "<client url> -> 127.0.0.1:P<path>" for the log */
};

/* Relays inside their upgrade callback (sim_proxy_ws_close_all waits for them). */
static pthread_mutex_t sim_ws_mu = PTHREAD_MUTEX_INITIALIZER;
static int sim_ws_active;

/* On shutdown (g_sim.shutting_down set): wait up to 3 s until every relay has stopped and
 * handed its socket back to MHD, so MHD_stop_daemon finds no upgraded connection open. */
void sim_proxy_ws_close_all(void)
{
    int64_t until = sim_now_ms() + 3000;
    pthread_mutex_lock(&sim_ws_mu);
    while (sim_ws_active > 0 && sim_now_ms() < until) {
        pthread_mutex_unlock(&sim_ws_mu);
        sim_sleep_ms(20);
        pthread_mutex_lock(&sim_ws_mu);
    }
    pthread_mutex_unlock(&sim_ws_mu);
}

/* Free a relay (NULL allowed): closes the app socket. */
void sim_proxy_ws_free(void *p)
{
    struct sim_ws *ws = p;
    if (!ws)
        return;
    if (ws->up_fd >= 0)
        close(ws->up_fd);
    free(ws->leftover);
    free(ws->what);
    free(ws);
}

/* True when the request asks for a WebSocket upgrade. */
static bool sim_is_ws_upgrade(struct MHD_Connection *c)
{
    const char *up = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Upgrade");
    return up && strcasestr(up, "websocket") != NULL;
}

/* Connect to 127.0.0.1:port with the proxy's I/O timeouts; -1 with errno on failure. */
static int sim_connect_app(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct timeval tv = {.tv_sec = SIM_PROXY_IO_TIMEOUT_S};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

/* Send all of buf on a blocking socket; 0 on success. */
static int sim_send_all(int fd, const char *buf, size_t len)
{
    size_t off = 0;
    while (off < len) {
        ssize_t k = send(fd, buf + off, len - off, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        off += (size_t)k;
    }
    return 0;
}

/* MHD iterator copying the handshake's headers (all but Host and the API key). */
static enum MHD_Result sim_copy_ws_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                          const char *value)
{
    (void)kind;
    struct sim_buf *b = cls;
    if (!value || !strcasecmp(key, "Host") || !strcasecmp(key, "OPEN-SANDBOX-API-KEY") ||
        !strcasecmp(key, "Content-Length") || !strcasecmp(key, "Transfer-Encoding"))
        return MHD_YES;
    sim_buf_add(b, key, strlen(key));
    sim_buf_add(b, ": ", 2);
    sim_buf_add(b, value, strlen(value));
    sim_buf_add(b, "\r\n", 2);
    return MHD_YES;
}

/* One direction of the relay: bytes read from one socket, not yet written to the other. */
struct sim_pipe {
    char *d;
    size_t off, len;
    bool eof;       /* the source sent FIN (or failed) */
    bool shut;      /* FIN passed on to the destination */
    uint64_t total; /* bytes delivered */
};

/* Move bytes from src to dst through p without blocking; -1 on a hard error, 1 on progress. */
static int sim_pipe_step(struct sim_pipe *p, int src, int dst)
{
    int progress = 0;
    if (!p->eof && p->len == 0) {
        ssize_t n = recv(src, p->d, SIM_WS_BUF, 0);
        if (n > 0) {
            p->off = 0;
            p->len = (size_t)n;
            progress = 1;
        } else if (n == 0) {
            p->eof = true;
            progress = 1;
        } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            return -1;
        }
    }
    if (p->off < p->len) {
        ssize_t n = send(dst, p->d + p->off, p->len - p->off, MSG_NOSIGNAL);
        if (n > 0) {
            p->off += (size_t)n;
            p->total += (uint64_t)n;
            progress = 1;
            if (p->off == p->len)
                p->off = p->len = 0;
        } else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            return -1;
        }
    }
    if (p->eof && p->len == 0 && !p->shut) {
        shutdown(dst, SHUT_WR);
        p->shut = true;
        progress = 1;
    }
    return progress;
}

/* Upgrade callback (the connection's own thread: MHD runs thread-per-connection, so it may
 * block): relays bytes both ways until both sides closed, an error, or shutdown. */
static void sim_ws_upgraded(void *cls, struct MHD_Connection *connection, void *req_cls,
                            const char *extra_in, size_t extra_in_size, MHD_socket sock,
                            struct MHD_UpgradeResponseHandle *urh)
{
    (void)connection;
    struct sim_ws *ws = cls;
    struct sim_req *r = req_cls;
    if (r && r->ws == ws)
        r->ws = NULL; /* ours now */
    pthread_mutex_lock(&sim_ws_mu);
    sim_ws_active++;
    pthread_mutex_unlock(&sim_ws_mu);
    struct sim_pipe c2u = {.d = sim_xmalloc(SIM_WS_BUF)}, u2c = {.d = sim_xmalloc(SIM_WS_BUF)};
    const char *why = "closed";
    /* Bytes the client sent right after its handshake go first (blocking socket still). */
    if (extra_in_size && sim_send_all(ws->up_fd, extra_in, extra_in_size) != 0) {
        why = "app write failed";
        goto out;
    }
    c2u.total += extra_in_size;
    int fl = fcntl(sock, F_GETFL);
    if (fl >= 0)
        fcntl(sock, F_SETFL, fl | O_NONBLOCK);
    fl = fcntl(ws->up_fd, F_GETFL);
    if (fl >= 0)
        fcntl(ws->up_fd, F_SETFL, fl | O_NONBLOCK);
    /* App bytes read past its 101 head go to the client first. */
    size_t lo = 0;
    while (lo < ws->leftover_len) {
        ssize_t n = send(sock, ws->leftover + lo, ws->leftover_len - lo, MSG_NOSIGNAL);
        if (n > 0) {
            lo += (size_t)n;
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
            struct pollfd pf = {.fd = sock, .events = POLLOUT};
            if (g_sim.shutting_down)
                break;
            poll(&pf, 1, 200);
        } else {
            why = "client write failed";
            goto out;
        }
    }
    u2c.total += lo;
    int64_t linger_since = 0;
    while (!g_sim.shutting_down) {
        int a = sim_pipe_step(&c2u, sock, ws->up_fd);
        int b = sim_pipe_step(&u2c, ws->up_fd, sock);
        if (a < 0 || b < 0) {
            why = "socket error";
            break;
        }
        if (c2u.shut && u2c.shut)
            break;
        if ((c2u.eof || u2c.eof) && !linger_since)
            linger_since = sim_now_ms();
        if (linger_since && sim_now_ms() - linger_since > SIM_WS_LINGER_MS) {
            why = "half-closed too long";
            break;
        }
        if (a || b)
            continue;
        struct pollfd pfd[2] = {{.fd = sock}, {.fd = ws->up_fd}};
        if (!c2u.eof && c2u.len == 0)
            pfd[0].events |= POLLIN;
        if (u2c.len > 0)
            pfd[0].events |= POLLOUT;
        if (!u2c.eof && u2c.len == 0)
            pfd[1].events |= POLLIN;
        if (c2u.len > 0)
            pfd[1].events |= POLLOUT;
        for (int i = 0; i < 2; i++)
            if (!pfd[i].events)
                pfd[i].fd = -1; /* no busy loop on POLLHUP of a finished side */
        poll(pfd, 2, 200);
    }
    if (g_sim.shutting_down)
        why = "simulator shutting down";
out:
    fprintf(stderr,
            "opensandbox-sim: websocket relay %s %s (%llu bytes to the app, %llu bytes to the "
            "client)\n",
            ws->what, why, (unsigned long long)c2u.total, (unsigned long long)u2c.total);
    free(c2u.d);
    free(u2c.d);
    sim_proxy_ws_free(ws);
    MHD_upgrade_action(urh, MHD_UPGRADE_ACTION_CLOSE);
    pthread_mutex_lock(&sim_ws_mu);
    sim_ws_active--;
    pthread_mutex_unlock(&sim_ws_mu);
}

/* WebSocket through the server proxy: forward the handshake to 127.0.0.1:port; on 101 answer
 * the client with the same head and relay raw bytes, else 502. */
static enum MHD_Result sim_proxy_ws(struct MHD_Connection *c, struct sim_req *r, int port,
                                    const char *path)
{
    struct sim_buf req = {0};
    sim_buf_add(&req, r->method, strlen(r->method));
    sim_buf_add(&req, " ", 1);
    sim_buf_add(&req, *path ? path : "/", *path ? strlen(path) : 1);
    struct sim_buf q = {0};
    sim_buf_add(&q, "?", 1);
    MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, sim_copy_arg, &q);
    if (q.len > 1)
        sim_buf_add(&req, q.d, q.len);
    free(q.d);
    size_t mlen = strlen(r->method) + 1;
    char *what = NULL;
    if (asprintf(&what, "%s -> 127.0.0.1:%d%.*s", r->url, port, (int)(req.len - mlen),
                 req.d + mlen) < 0)
        what = NULL;
    char line[512];
    snprintf(line, sizeof line, " HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n", port);
    sim_buf_add(&req, line, strlen(line));
    MHD_get_connection_values(c, MHD_HEADER_KIND, sim_copy_ws_header, &req);
    sim_buf_add(&req, "\r\n", 2);

    char msg[256];
    int fd = sim_connect_app(port);
    if (fd < 0) {
        snprintf(msg, sizeof msg, "Could not connect to the backend sandbox 127.0.0.1:%d: %s", port,
                 strerror(errno));
        free(req.d);
        free(what);
        return sim_reply_error(c, 502, "GENERAL::UNKNOWN_ERROR", msg);
    }
    int rc = sim_send_all(fd, req.d, req.len);
    free(req.d);
    struct sim_buf head = {0};
    char *hend = NULL;
    char buf[16384];
    while (rc == 0 && !hend && head.len < SIM_WS_MAX_HEAD) {
        ssize_t k = recv(fd, buf, sizeof buf, 0);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        size_t from = head.len > 3 ? head.len - 3 : 0;
        sim_buf_add(&head, buf, (size_t)k);
        hend = strstr(head.d + from, "\r\n\r\n");
    }
    int status = 0;
    if (!hend || sscanf(head.d, "HTTP/%*d.%*d %d", &status) != 1 || status != 101) {
        if (hend && status)
            snprintf(msg, sizeof msg,
                     "the backend sandbox 127.0.0.1:%d refused the WebSocket upgrade (HTTP %d)",
                     port, status);
        else
            snprintf(msg, sizeof msg, "invalid WebSocket handshake answer from 127.0.0.1:%d", port);
        close(fd);
        free(head.d);
        free(what);
        return sim_reply_error(c, 502, "GENERAL::UNKNOWN_ERROR", msg);
    }
    struct sim_ws *ws = calloc(1, sizeof *ws);
    if (!ws) {
        close(fd);
        free(head.d);
        free(what);
        return MHD_NO;
    }
    ws->up_fd = fd;
    ws->port = port;
    ws->what = what ? what : sim_strdup("?");
    size_t body_off = (size_t)(hend - head.d) + 4;
    ws->leftover_len = head.len - body_off;
    if (ws->leftover_len) {
        ws->leftover = sim_xmalloc(ws->leftover_len);
        memcpy(ws->leftover, head.d + body_off, ws->leftover_len);
    }
    struct MHD_Response *mr = MHD_create_response_for_upgrade(sim_ws_upgraded, ws);
    if (!mr) {
        free(head.d);
        sim_proxy_ws_free(ws);
        return MHD_NO;
    }
    r->ws = ws; /* freed by sim_request_completed if the upgrade never happens */
    *hend = 0;
    char *save = NULL;
    char *l = strtok_r(head.d, "\r\n", &save); /* status line */
    while ((l = strtok_r(NULL, "\r\n", &save))) {
        char *colon = strchr(l, ':');
        if (!colon)
            continue;
        *colon = 0;
        char *v = colon + 1;
        while (*v == ' ' || *v == '\t')
            v++;
        /* MHD writes Connection: Upgrade itself; it adds its own Date. */
        if (!strcasecmp(l, "Connection") || !strcasecmp(l, "Content-Length") ||
            !strcasecmp(l, "Transfer-Encoding") || !strcasecmp(l, "Date") ||
            !strcasecmp(l, "Keep-Alive"))
            continue;
        MHD_add_response_header(mr, l, v);
    }
    free(head.d);
    fprintf(stderr, "opensandbox-sim: websocket relay %s open\n", ws->what);
    return sim_queue(c, MHD_HTTP_SWITCHING_PROTOCOLS, mr);
}

/* Relay the request to 127.0.0.1:port and answer with the upstream response. */
enum MHD_Result sim_proxy_relay(struct MHD_Connection *c, struct sim_req *r, int port,
                                const char *path)
{
    if (sim_is_ws_upgrade(c))
        return sim_proxy_ws(c, r, port, path);
    struct sim_buf req = {0};
    char line[512];
    snprintf(line, sizeof line, "%s %s", r->method, *path ? path : "/");
    sim_buf_add(&req, line, strlen(line));
    struct sim_buf q = {0};
    sim_buf_add(&q, "?", 1);
    MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, sim_copy_arg, &q);
    if (q.len > 1)
        sim_buf_add(&req, q.d, q.len);
    free(q.d);
    snprintf(line, sizeof line, " HTTP/1.0\r\nHost: 127.0.0.1:%d\r\nConnection: close\r\n", port);
    sim_buf_add(&req, line, strlen(line));
    MHD_get_connection_values(c, MHD_HEADER_KIND, sim_copy_header, &req);
    snprintf(line, sizeof line, "Content-Length: %zu\r\n\r\n", r->len);
    sim_buf_add(&req, line, strlen(line));
    if (r->len)
        sim_buf_add(&req, r->body, r->len);

    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct timeval tv = {.tv_sec = SIM_PROXY_IO_TIMEOUT_S};
    if (fd >= 0) {
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    }
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        char msg[256];
        snprintf(msg, sizeof msg, "Could not connect to the backend sandbox 127.0.0.1:%d: %s", port,
                 strerror(errno));
        if (fd >= 0)
            close(fd);
        free(req.d);
        return sim_reply_error(c, 502, "GENERAL::UNKNOWN_ERROR", msg);
    }
    size_t off = 0;
    while (off < req.len) {
        ssize_t k = send(fd, req.d + off, req.len - off, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        off += (size_t)k;
    }
    free(req.d);
    struct sim_buf resp = {0};
    char buf[65536];
    for (;;) {
        ssize_t k = recv(fd, buf, sizeof buf, 0);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        if (resp.len + (size_t)k > SIM_PROXY_MAX_RESPONSE)
            break;
        sim_buf_add(&resp, buf, (size_t)k);
    }
    close(fd);
    char *hend = resp.d ? strstr(resp.d, "\r\n\r\n") : NULL;
    int status = 0;
    if (!hend || sscanf(resp.d, "HTTP/%*d.%*d %d", &status) != 1 || status < 100) {
        free(resp.d);
        return sim_reply_error(c, 502, "GENERAL::UNKNOWN_ERROR",
                               "invalid response from the backend sandbox");
    }
    size_t body_off = (size_t)(hend - resp.d) + 4;
    struct MHD_Response *mr = MHD_create_response_from_buffer(
        resp.len - body_off, resp.d + body_off, MHD_RESPMEM_MUST_COPY);
    *hend = 0;
    char *save = NULL;
    char *l = strtok_r(resp.d, "\r\n", &save); /* status line */
    while ((l = strtok_r(NULL, "\r\n", &save))) {
        char *colon = strchr(l, ':');
        if (!colon)
            continue;
        *colon = 0;
        char *v = colon + 1;
        while (*v == ' ')
            v++;
        if (!sim_skip_header(l) && mr)
            MHD_add_response_header(mr, l, v);
    }
    free(resp.d);
    return sim_queue(c, (unsigned)status, mr);
}
