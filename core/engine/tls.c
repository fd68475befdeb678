/* SPDX-License-Identifier: Apache-2.0 */
/*
 * TLS certificate and key for the HTTPS daemon, with reload on SIGHUP.
 *
 * Why a certificate callback rather than MHD_OPTION_HTTPS_MEM_CERT/KEY and a
 * new daemon on reload: libmicrohttpd 0.9.75 (Debian 12) copies the PEM into
 * its own GnuTLS credentials at start and offers no way to replace them; a
 * second daemon would have to bind the same port (a window where connections
 * are refused, or SO_REUSEPORT load-sharing with the old daemon) and the old
 * daemon's in-flight requests would be cut when it stops.
 * MHD_OPTION_HTTPS_CERT_CALLBACK (GnuTLS retrieve_function2) instead lets
 * every handshake pick up the current pair. GnuTLS does not copy what the
 * callback returns, so every loaded generation stays allocated until
 * rk_tls_free() at exit (a few KiB per SIGHUP).
 */
#include "engine/tls.h"

#include <errno.h>
#include <gnutls/abstract.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "config/config.h"
#include "obs/log.h"

/* Largest PEM file read (a long chain fits easily). */
#define MAX_PEM_BYTES (1024 * 1024)
/* Most certificates in a chain. */
#define MAX_CHAIN 16

/* One loaded certificate chain with its key. */
struct tls_gen {
    gnutls_pcert_st pcert[MAX_CHAIN];
    unsigned n;
    gnutls_privkey_t key;
    struct tls_gen *older;
};

static _Atomic(struct tls_gen *) g_current;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER; /* load/reload/free */
static char *g_cert_path, *g_key_path;

/* Overwrite memory that held key material. */
static void wipe(void *p, size_t n)
{
    volatile unsigned char *v = p;
    while (n--)
        *v++ = 0;
}

/* Read a whole file (at most MAX_PEM_BYTES) into d; 0 or -1 with a problem. */
static int read_file(const char *key, const char *path, gnutls_datum_t *d, struct rk_problems *p)
{
    d->data = NULL;
    d->size = 0;
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        rk_problems_add(p, "server.%s: %s: cannot open: %s", key, path, strerror(errno));
        return -1;
    }
    unsigned char *buf = malloc(MAX_PEM_BYTES + 1);
    size_t n = buf ? fread(buf, 1, MAX_PEM_BYTES + 1, fp) : 0;
    int err = ferror(fp);
    fclose(fp);
    if (!buf || err || n == 0 || n > MAX_PEM_BYTES) {
        rk_problems_add(p, "server.%s: %s: %s", key, path,
                        !buf     ? "out of memory"
                        : err    ? "read error"
                        : n == 0 ? "the file is empty"
                                 : "larger than 1 MiB");
        if (buf)
            wipe(buf, n);
        free(buf);
        return -1;
    }
    buf[n] = 0;
    d->data = buf;
    d->size = (unsigned)n;
    return 0;
}

/* Free one generation (not linked ones). */
static void gen_free(struct tls_gen *g)
{
    for (unsigned i = 0; i < g->n; i++)
        gnutls_pcert_deinit(&g->pcert[i]);
    if (g->key)
        gnutls_privkey_deinit(g->key);
    free(g);
}

/* Warn when the leaf certificate is expired or not yet valid. */
static void check_validity(const char *path, const gnutls_datum_t *cert)
{
    gnutls_x509_crt_t crt;
    if (gnutls_x509_crt_init(&crt) < 0)
        return;
    if (gnutls_x509_crt_import(crt, cert, GNUTLS_X509_FMT_PEM) >= 0) {
        time_t now = time(NULL);
        if (gnutls_x509_crt_get_expiration_time(crt) < now)
            rk_warn("server.tls_cert_file: %s has expired", path);
        else if (gnutls_x509_crt_get_activation_time(crt) > now)
            rk_warn("server.tls_cert_file: %s is not valid yet", path);
    }
    gnutls_x509_crt_deinit(crt);
}

/* Load both files into a new generation; NULL with problems on failure. */
static struct tls_gen *load_pair(const char *cert_path, const char *key_path, struct rk_problems *p)
{
    gnutls_datum_t cert, key;
    if (read_file("tls_cert_file", cert_path, &cert, p) != 0)
        return NULL;
    if (read_file("tls_key_file", key_path, &key, p) != 0) {
        free(cert.data);
        return NULL;
    }
    struct stat st;
    if (stat(key_path, &st) == 0 && (st.st_mode & S_IROTH))
        rk_warn("server.tls_key_file: %s is readable by every user; chmod 600 it", key_path);
    struct tls_gen *g = calloc(1, sizeof *g);
    int rc = g ? 0 : GNUTLS_E_MEMORY_ERROR;
    /* The pair check: GnuTLS refuses a key that does not match the certificate. */
    gnutls_certificate_credentials_t cred = NULL;
    if (rc >= 0)
        rc = gnutls_certificate_allocate_credentials(&cred);
    if (rc >= 0) {
        rc = gnutls_certificate_set_x509_key_mem2(cred, &cert, &key, GNUTLS_X509_FMT_PEM, NULL, 0);
        if (rc < 0)
            rk_problems_add(p, "server.tls_cert_file/tls_key_file: %s and %s: %s", cert_path,
                            key_path, gnutls_strerror(rc));
    }
    if (cred)
        gnutls_certificate_free_credentials(cred);
    if (rc >= 0) {
        g->n = MAX_CHAIN;
        rc = gnutls_pcert_list_import_x509_raw(g->pcert, &g->n, &cert, GNUTLS_X509_FMT_PEM, 0);
        if (rc < 0) {
            g->n = 0;
            rk_problems_add(p, "server.tls_cert_file: %s: %s", cert_path, gnutls_strerror(rc));
        }
    }
    if (rc >= 0 && (rc = gnutls_privkey_init(&g->key)) >= 0) {
        rc = gnutls_privkey_import_x509_raw(g->key, &key, GNUTLS_X509_FMT_PEM, NULL, 0);
        if (rc < 0)
            rk_problems_add(p, "server.tls_key_file: %s: %s", key_path, gnutls_strerror(rc));
    }
    if (rc >= 0)
        check_validity(cert_path, &cert);
    wipe(key.data, key.size);
    free(key.data);
    free(cert.data);
    if (rc < 0 && g) {
        gen_free(g);
        g = NULL;
    }
    return g;
}

int rk_tls_load(const struct rk_config *cfg, struct rk_problems *p)
{
    const char *cert = cfg->server.tls_cert_file, *key = cfg->server.tls_key_file;
    rk_tls_free();
    if (!*cert && !*key)
        return 0;
    if (!*cert || !*key) {
        rk_problems_add(p, "%s: server.tls_cert_file and server.tls_key_file must be set together",
                        cfg->path);
        return -1;
    }
    if (MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES ||
        MHD_is_feature_supported(MHD_FEATURE_HTTPS_CERT_CALLBACK) != MHD_YES) {
        rk_problems_add(p, "server.tls_cert_file: this libmicrohttpd was built without TLS "
                           "support (GnuTLS)");
        return -1;
    }
    struct tls_gen *g = load_pair(cert, key, p);
    if (!g)
        return -1;
    pthread_mutex_lock(&g_mu);
    g_cert_path = strdup(cert);
    g_key_path = strdup(key);
    atomic_store(&g_current, g);
    pthread_mutex_unlock(&g_mu);
    return 0;
}

int rk_tls_reload(void)
{
    pthread_mutex_lock(&g_mu);
    int rc = 0;
    if (atomic_load(&g_current)) {
        struct rk_problems p = {0};
        struct tls_gen *g = load_pair(g_cert_path, g_key_path, &p);
        if (!g) {
            for (size_t i = 0; i < p.n; i++)
                rk_err("%s", p.lines[i]);
            rk_err("SIGHUP: keeping the previous TLS certificate");
            rc = -1;
        } else {
            g->older = atomic_load(&g_current);
            atomic_store(&g_current, g);
            rk_notice("SIGHUP: TLS certificate reloaded from %s", g_cert_path);
        }
        rk_problems_free(&p);
    }
    pthread_mutex_unlock(&g_mu);
    return rc;
}

int rk_tls_enabled(void)
{
    return atomic_load(&g_current) != NULL;
}

/* GnuTLS asks for the server certificate at every handshake. */
static int cert_callback(gnutls_session_t session, const gnutls_datum_t *req_ca_dn, int nreqs,
                         const gnutls_pk_algorithm_t *pk_algos, int pk_algos_length,
                         gnutls_pcert_st **pcert, unsigned int *pcert_length,
                         gnutls_privkey_t *pkey)
{
    (void)session;
    (void)req_ca_dn;
    (void)nreqs;
    (void)pk_algos;
    (void)pk_algos_length;
    struct tls_gen *g = atomic_load(&g_current);
    if (!g)
        return -1;
    *pcert = g->pcert;
    *pcert_length = g->n;
    *pkey = g->key;
    return 0;
}

/* GnuTLS priorities: its defaults without TLS 1.0/1.1 (deprecated, RFC 8996). */
#define TLS_PRIORITIES "NORMAL:-VERS-TLS1.0:-VERS-TLS1.1:-VERS-DTLS-ALL"

void rk_tls_mhd_options(struct MHD_OptionItem *opts, size_t n)
{
    size_t i = 0;
    if (rk_tls_enabled() && n >= 3)
        opts[i++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_PRIORITIES, 0, TLS_PRIORITIES};
    if (rk_tls_enabled() && n >= 3)
        opts[i++] =
            (struct MHD_OptionItem){MHD_OPTION_HTTPS_CERT_CALLBACK, 0,
                                    (void *)(gnutls_certificate_retrieve_function2 *)cert_callback};
    opts[i] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};
}

void rk_tls_free(void)
{
    pthread_mutex_lock(&g_mu);
    struct tls_gen *g = atomic_exchange(&g_current, NULL);
    while (g) {
        struct tls_gen *older = g->older;
        gen_free(g);
        g = older;
    }
    free(g_cert_path);
    free(g_key_path);
    g_cert_path = g_key_path = NULL;
    pthread_mutex_unlock(&g_mu);
}
