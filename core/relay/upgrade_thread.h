/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Upgraded (WebSocket) connections over TLS. Over plain HTTP a relay may block
 * in libmicrohttpd's upgrade callback: the socket is the client's. Over TLS,
 * libmicrohttpd hands the callback one end of a socket pair and encrypts and
 * decrypts on the connection's own thread only once the callback returns, and
 * it reports the request complete right then. So with TLS the relay runs on a
 * thread of its own and takes its state over from the request.
 */
#ifndef RK_UPGRADE_THREAD_H
#define RK_UPGRADE_THREAD_H

#include <stddef.h>

struct MHD_UpgradeResponseHandle;

/** Relays the upgraded socket until done, then releases it with
 *  MHD_UPGRADE_ACTION_CLOSE. */
typedef void (*rk_upgrade_serve_fn)(void *state, int sock, const char *extra, size_t extra_len,
                                    struct MHD_UpgradeResponseHandle *urh);
/** Frees the relay's state after serve returned. */
typedef void (*rk_upgrade_release_fn)(void *state);

/**
 * Called from an upgrade callback (after rk_relay_enter()). Returns 0 if TLS
 * is off: the caller serves inline. Otherwise copies extra, starts a detached
 * thread (stack_bytes) that runs serve, release and rk_relay_leave(), and
 * returns 1: the caller must give up state (clear the request's route_ctx) and
 * return. Returns -1 if the thread could not start (nothing was taken).
 */
int rk_upgrade_detach(rk_upgrade_serve_fn serve, rk_upgrade_release_fn release, void *state,
                      int sock, const char *extra, size_t extra_len,
                      struct MHD_UpgradeResponseHandle *urh, size_t stack_bytes);

#endif /* RK_UPGRADE_THREAD_H */
