/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The relay transfer loop (relay_http_loop.c): one thread, one libcurl multi handle
 * on epoll, every upstream transfer of the HTTP relay. Private to the relay.
 */
#ifndef RK_RELAY_HTTP_LOOP_H
#define RK_RELAY_HTTP_LOOP_H

struct px_http;

/** Run px's prepared transfer on the loop (started on first use); the loop
 *  takes over one reference and one rk_relay_enter(), both dropped when the
 *  transfer ends. 0, or -1 when the loop is unavailable or stopping. */
int rk_http_loop_submit(struct px_http *px);

/** Ask the loop to unpause px's transfer (any thread; a pipe notification). */
void rk_http_loop_unpause(struct px_http *px);

/** Stop the loop once its transfers ended (they abort: the daemon stops). */
void rk_http_loop_shutdown(void);

#endif /* RK_RELAY_HTTP_LOOP_H */
