/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The relay's upstream transfers on the event loops (relay_http_loop.c): each runs
 * on the curl multi of its client connection's event loop. Private to the relay.
 */
#ifndef RK_RELAY_HTTP_LOOP_H
#define RK_RELAY_HTTP_LOOP_H

struct px_http;

/** Run px's prepared transfer on the curl loop of px->owner's event loop; the
 *  loop takes over one reference and one rk_relay_enter(), both dropped when
 *  the transfer ends. 0, or -1 when the loop is unavailable or stopping. */
int rk_http_loop_submit(struct px_http *px);

/** Ask the loop to unpause px's transfer (any thread; a pipe notification). */
void rk_http_loop_unpause(struct px_http *px);

#endif /* RK_RELAY_HTTP_LOOP_H */
