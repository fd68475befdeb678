/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file fake_server.h
 * @brief A tiny scripted HTTP/1.1 server for the plugin's request-shape tests.
 */
#ifndef OS_FAKE_SERVER_H
#define OS_FAKE_SERVER_H

#include <stddef.h>

/** One recorded request. */
struct fake_req {
    char method[16];
    char target[1024];  /**< path and query as sent */
    char headers[8192]; /**< raw header block, "\r\n"-separated */
    char *body;         /**< malloc'd, NUL-terminated (may be truncated to 1 MiB) */
    size_t body_len;
};

/** What the handler answers. */
struct fake_resp {
    int status;       /**< HTTP status */
    const char *body; /**< response body ("" if NULL) */
    int no_reply;     /**< close the connection without answering */
    int stream;       /**< send without Content-Length and close (stream style) */
    int stall_ms;     /**< after sending, keep the connection open this long (a stalled stream) */
};

/** Scripted behaviour: fill resp for req. */
typedef void (*fake_handler)(const struct fake_req *req, struct fake_resp *resp);

/** Start listening on 127.0.0.1:<ephemeral>; returns the port or -1. */
int fake_start(fake_handler handler);
/** Stop the server and free every recorded request. */
void fake_stop(void);
/** Number of requests recorded so far. */
int fake_count(void);
/** The i-th recorded request. */
const struct fake_req *fake_get(int i);
/** Value of header `name` (case-insensitive) in req, copied into buf; NULL if absent. */
const char *fake_header(const struct fake_req *req, const char *name, char *buf, size_t len);

#endif /* OS_FAKE_SERVER_H */
