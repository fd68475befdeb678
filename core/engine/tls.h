/* SPDX-License-Identifier: Apache-2.0 */
/*
 * HTTPS with libmicrohttpd's built-in TLS (GnuTLS): server.tls_cert_file and
 * server.tls_key_file (PEM). The certificate chain and key are loaded here,
 * checked to belong together, and handed to libmicrohttpd through
 * MHD_OPTION_HTTPS_CERT_CALLBACK, which asks for them at every handshake. A
 * reload (SIGHUP) swaps in the new pair atomically: new handshakes use it,
 * established connections keep theirs, and the listening socket never closes.
 */
#ifndef RK_TLS_H
#define RK_TLS_H

#include <stddef.h>

struct rk_config;
struct rk_problems;
struct MHD_OptionItem;

/** Load and check the certificate and key named by cfg (no-op when both keys
 *  are empty). Problems name the files, never their content. 0 or -1. */
int rk_tls_load(const struct rk_config *cfg, struct rk_problems *p);
/** Re-read both files (SIGHUP); on failure keep serving the previous pair and
 *  log why. Returns 0 if the new pair is active. */
int rk_tls_reload(void);
/** Non-zero when HTTPS is configured. */
int rk_tls_enabled(void);
/** Fill opts (room for n >= 3 items, MHD_OPTION_END-terminated) with the
 *  daemon options for HTTPS (certificate callback, TLS 1.2 and newer); only
 *  the terminator when TLS is off. */
void rk_tls_mhd_options(struct MHD_OptionItem *opts, size_t n);
/** Release every loaded certificate (after the daemon stopped). */
void rk_tls_free(void);

#endif /* RK_TLS_H */
