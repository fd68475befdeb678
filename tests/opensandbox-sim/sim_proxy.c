/* Server-proxy relay for application ports: a simple blocking HTTP/1.0 relay to 127.0.0.1:P.
 * WebSocket upgrades are not relayed (use the direct endpoint 127.0.0.1:P for those). */
#include "sim.h"

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

/* Relay the request to 127.0.0.1:port and answer with the upstream response. */
enum MHD_Result sim_proxy_relay(struct MHD_Connection *c, struct sim_req *r, int port,
                                const char *path)
{
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
