/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Bearer-token authentication: the token file, its SHA-256 digests, the
 * constant-time check and the 401 answer. See auth.h and docs/operations.md
 * ("Securing rock-admin") for the file format.
 */
#include "access/auth.h"

#include <ctype.h>
#include <errno.h>
#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "base/app.h"
#include "config/config.h"
#include "engine/envelope.h"
#include "engine/reply.h"
#include "engine/http_server.h"
#include "engine/router.h"
#include "obs/log.h"
#include "base/util.h"

#define DIGEST_LEN 32
/* Shortest plain token accepted: shorter ones are guessable. */
#define MIN_TOKEN_LEN 16
/* Longest line of the token file (a token plus a name). */
#define MAX_LINE 1024
/* At most this many tokens (bounds the per-request comparison work). */
#define MAX_TOKENS 1024

/* One accepted token: its digest and the name logged for it. */
struct token {
    unsigned char digest[DIGEST_LEN];
    char name[RK_AUTH_NAME_MAX];
};

/* The active token set; replaced whole on reload. */
struct token_set {
    struct token *t;
    size_t n;
};

/* Requests accepted per token name (names outlive reloads), refused per reason. */
struct name_count {
    char name[RK_AUTH_NAME_MAX];
    unsigned long long n;
};
static pthread_mutex_t g_count_mu = PTHREAD_MUTEX_INITIALIZER;
static struct name_count g_accepted[MAX_TOKENS];
static size_t g_n_accepted;
static unsigned long long g_missing, g_invalid, g_other_names;

static pthread_rwlock_t g_lock = PTHREAD_RWLOCK_INITIALIZER;
static struct token_set g_set;
static char *g_path;         /* NULL = authentication off */
static int g_metrics_public; /* /metrics needs no token */

/* Overwrite memory that held a secret (not optimised away). */
static void wipe(void *p, size_t n)
{
    volatile unsigned char *v = p;
    while (n--)
        *v++ = 0;
}

/* SHA-256 of len bytes; 0 on success. */
static int sha256(const void *data, size_t len, unsigned char out[DIGEST_LEN])
{
    return gnutls_hash_fast(GNUTLS_DIG_SHA256, data, len, out) == 0 ? 0 : -1;
}

/* Parse 64 hex digits into a digest; 0 on success. */
static int parse_hex_digest(const char *s, unsigned char out[DIGEST_LEN])
{
    if (strlen(s) != 2 * DIGEST_LEN)
        return -1;
    for (size_t i = 0; i < DIGEST_LEN; i++) {
        unsigned v = 0;
        for (int j = 0; j < 2; j++) {
            int c = tolower((unsigned char)s[2 * i + j]);
            if (c >= '0' && c <= '9')
                v = v * 16 + (unsigned)(c - '0');
            else if (c >= 'a' && c <= 'f')
                v = v * 16 + (unsigned)(c - 'a' + 10);
            else
                return -1;
        }
        out[i] = (unsigned char)v;
    }
    return 0;
}

/* True for a name safe to log: [A-Za-z0-9._@-]{1,63}. */
static int valid_name(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n >= RK_AUTH_NAME_MAX)
        return 0;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && !strchr("._@-", *s))
            return 0;
    return 1;
}

/*
 * Read path into a token set. Line format (see docs/operations.md):
 *   <token> [<name>]            a plain token, at least 16 characters
 *   sha256:<64 hex> [<name>]    the SHA-256 of a token (hex)
 * Blank lines and lines starting with '#' are ignored. Problems name the file
 * and line only. Returns 0 with *out filled, or -1.
 */
static int read_tokens(const char *path, struct token_set *out, struct rk_problems *p)
{
    memset(out, 0, sizeof *out);
    FILE *fp = fopen(path, "r");
    if (!fp) {
        rk_problems_add(p, "server.auth_tokens_file: %s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fileno(fp), &st) == 0 && (st.st_mode & S_IROTH))
        rk_warn("server.auth_tokens_file: %s is readable by every user; chmod 600 it", path);
    size_t before = p->n;
    char line[MAX_LINE + 2];
    int lineno = 0;
    while (fgets(line, sizeof line, fp)) {
        lineno++;
        size_t len = strlen(line);
        if (len == sizeof line - 1 && line[len - 1] != '\n') {
            rk_problems_add(p, "%s:%d: server.auth_tokens_file: line longer than %d bytes", path,
                            lineno, MAX_LINE);
            int c;
            while ((c = fgetc(fp)) != EOF && c != '\n')
                ;
            continue;
        }
        char *save = NULL;
        char *secret = strtok_r(line, " \t\r\n", &save);
        if (!secret || *secret == '#')
            continue;
        char *name = strtok_r(NULL, " \t\r\n", &save);
        char *extra = strtok_r(NULL, " \t\r\n", &save);
        if (extra) {
            rk_problems_add(p, "%s:%d: server.auth_tokens_file: expected \"<token> [<name>]\"",
                            path, lineno);
            continue;
        }
        if (name && !valid_name(name)) {
            rk_problems_add(p,
                            "%s:%d: server.auth_tokens_file: a name may contain only A-Z, a-z, "
                            "0-9, '.', '_', '@' and '-' (at most %d characters)",
                            path, lineno, RK_AUTH_NAME_MAX - 1);
            continue;
        }
        struct token tk;
        memset(&tk, 0, sizeof tk);
        if (strncmp(secret, "sha256:", 7) == 0) {
            if (parse_hex_digest(secret + 7, tk.digest) != 0) {
                rk_problems_add(p,
                                "%s:%d: server.auth_tokens_file: sha256: must be followed by 64 "
                                "hex digits",
                                path, lineno);
                continue;
            }
        } else if (strlen(secret) < MIN_TOKEN_LEN) {
            rk_problems_add(p, "%s:%d: server.auth_tokens_file: token shorter than %d characters",
                            path, lineno, MIN_TOKEN_LEN);
            continue;
        } else if (sha256(secret, strlen(secret), tk.digest) != 0) {
            rk_problems_add(p, "%s:%d: server.auth_tokens_file: cannot hash the token", path,
                            lineno);
            continue;
        }
        if (name)
            snprintf(tk.name, sizeof tk.name, "%s", name);
        else
            snprintf(tk.name, sizeof tk.name, "line%d", lineno);
        int dup = 0;
        for (size_t i = 0; i < out->n; i++)
            dup |= !strcmp(out->t[i].name, tk.name);
        if (dup) {
            rk_problems_add(p, "%s:%d: server.auth_tokens_file: duplicate name \"%s\"", path,
                            lineno, tk.name);
            continue;
        }
        if (out->n >= MAX_TOKENS) {
            rk_problems_add(p, "%s:%d: server.auth_tokens_file: more than %d tokens", path, lineno,
                            MAX_TOKENS);
            break;
        }
        struct token *nt = realloc(out->t, (out->n + 1) * sizeof *nt);
        if (!nt) {
            rk_problems_add(p, "server.auth_tokens_file: out of memory");
            break;
        }
        out->t = nt;
        out->t[out->n++] = tk;
    }
    wipe(line, sizeof line);
    if (ferror(fp))
        rk_problems_add(p, "server.auth_tokens_file: %s: read error", path);
    fclose(fp);
    if (p->n == before && out->n == 0)
        rk_problems_add(p,
                        "server.auth_tokens_file: %s holds no token, so every request would be "
                        "refused",
                        path);
    if (p->n > before) {
        free(out->t);
        memset(out, 0, sizeof *out);
        return -1;
    }
    return 0;
}

int rk_auth_load(const struct rk_config *cfg, struct rk_problems *p)
{
    rk_auth_free();
    g_metrics_public = cfg->server.metrics_public;
    if (!cfg->server.auth_tokens_file || !*cfg->server.auth_tokens_file)
        return 0;
    struct token_set s;
    if (read_tokens(cfg->server.auth_tokens_file, &s, p) != 0)
        return -1;
    pthread_rwlock_wrlock(&g_lock);
    g_set = s;
    g_path = strdup(cfg->server.auth_tokens_file);
    pthread_rwlock_unlock(&g_lock);
    return g_path ? 0 : -1;
}

int rk_auth_reload(void)
{
    pthread_rwlock_rdlock(&g_lock);
    char *path = g_path ? strdup(g_path) : NULL;
    pthread_rwlock_unlock(&g_lock);
    if (!path)
        return 0;
    struct rk_problems p = {0};
    struct token_set s;
    int rc = read_tokens(path, &s, &p);
    if (rc != 0) {
        for (size_t i = 0; i < p.n; i++)
            rk_err("%s", p.lines[i]);
        rk_err("SIGHUP: keeping the previous authentication tokens");
    } else {
        pthread_rwlock_wrlock(&g_lock);
        struct token_set old = g_set;
        g_set = s;
        pthread_rwlock_unlock(&g_lock);
        wipe(old.t, old.n * sizeof *old.t);
        free(old.t);
        rk_notice("SIGHUP: %zu authentication token(s) loaded from %s", s.n, path);
    }
    rk_problems_free(&p);
    free(path);
    return rc;
}

int rk_auth_enabled(void)
{
    pthread_rwlock_rdlock(&g_lock);
    int on = g_path != NULL;
    pthread_rwlock_unlock(&g_lock);
    return on;
}

void rk_auth_free(void)
{
    pthread_rwlock_wrlock(&g_lock);
    if (g_set.t)
        wipe(g_set.t, g_set.n * sizeof *g_set.t);
    free(g_set.t);
    memset(&g_set, 0, sizeof g_set);
    free(g_path);
    g_path = NULL;
    pthread_rwlock_unlock(&g_lock);
}

/* The token after "Bearer " (scheme case-insensitive), or NULL. */
static const char *bearer_token(const char *value)
{
    if (!value)
        return NULL;
    while (*value == ' ' || *value == '\t')
        value++;
    if (strncasecmp(value, "Bearer", 6) != 0 || (value[6] != ' ' && value[6] != '\t'))
        return NULL;
    value += 7;
    while (*value == ' ' || *value == '\t')
        value++;
    return *value ? value : NULL;
}

/*
 * Look a presented token (the bare secret) up. Every stored digest is compared in full with no
 * early exit, so the time taken does not depend on which token (if any)
 * matched or how many leading bytes agreed. Copies the name on a match.
 */
static int token_matches_raw(const char *tok, char name[RK_AUTH_NAME_MAX])
{
    if (!tok)
        return 0;
    while (*tok == ' ' || *tok == '\t')
        tok++;
    size_t len = strlen(tok);
    while (len && (tok[len - 1] == ' ' || tok[len - 1] == '\t'))
        len--;
    unsigned char d[DIGEST_LEN];
    if (sha256(tok, len, d) != 0)
        return 0;
    int found = 0;
    pthread_rwlock_rdlock(&g_lock);
    for (size_t i = 0; i < g_set.n; i++) {
        unsigned diff = 0;
        for (size_t j = 0; j < DIGEST_LEN; j++)
            diff |= (unsigned)(g_set.t[i].digest[j] ^ d[j]);
        /* Branch-free select of the first matching name. */
        int hit = (int)(1u & ((diff - 1u) >> 8)) & !found;
        if (hit)
            memcpy(name, g_set.t[i].name, RK_AUTH_NAME_MAX);
        found |= hit;
    }
    pthread_rwlock_unlock(&g_lock);
    wipe(d, sizeof d);
    return found;
}

/* token_matches_raw on the token of an "Authorization: Bearer <t>" value. */
static int token_matches(const char *value, char name[RK_AUTH_NAME_MAX])
{
    return token_matches_raw(bearer_token(value), name);
}

/* Count an accepted request under the token's name (bounded table). */
static void count_accepted(const char *name)
{
    pthread_mutex_lock(&g_count_mu);
    size_t i;
    for (i = 0; i < g_n_accepted; i++)
        if (!strcmp(g_accepted[i].name, name))
            break;
    if (i == g_n_accepted && g_n_accepted < MAX_TOKENS)
        snprintf(g_accepted[g_n_accepted++].name, RK_AUTH_NAME_MAX, "%s", name);
    if (i < g_n_accepted)
        g_accepted[i].n++;
    else
        g_other_names++;
    pthread_mutex_unlock(&g_count_mu);
}

void rk_auth_metrics_render(struct rk_buf *out)
{
    if (!rk_auth_enabled())
        return;
    pthread_mutex_lock(&g_count_mu);
    rk_buf_printf(out, "# HELP rock_admin_auth_requests_total Requests by authentication result "
                       "(accepted: by token name).\n"
                       "# TYPE rock_admin_auth_requests_total counter\n");
    for (size_t i = 0; i < g_n_accepted; i++)
        rk_buf_printf(out,
                      "rock_admin_auth_requests_total{result=\"accepted\",token=\"%s\"} %llu\n",
                      g_accepted[i].name, g_accepted[i].n);
    if (g_other_names)
        rk_buf_printf(out, "rock_admin_auth_requests_total{result=\"accepted\",token=\"\"} %llu\n",
                      g_other_names);
    rk_buf_printf(out,
                  "rock_admin_auth_requests_total{result=\"missing\",token=\"\"} %llu\n"
                  "rock_admin_auth_requests_total{result=\"invalid\",token=\"\"} %llu\n",
                  g_missing, g_invalid);
    pthread_mutex_unlock(&g_count_mu);
}

/* True for the routes that answer without a token. */
static int is_public(const struct rk_req *r)
{
    const char *path = r->path ? r->path : "";
    if (strcmp(r->method, "GET") != 0 && strcmp(r->method, "HEAD") != 0)
        return 0;
    return !strcmp(path, "/livez") || !strcmp(path, "/readyz") ||
           (g_metrics_public && !strcmp(path, "/metrics"));
}

/* 401 with a ROCK envelope and a Bearer challenge. */
static void reply_unauthorized(struct rk_req *r, int presented)
{
    const char *error = presented ? "invalid bearer token"
                                  : "authentication required: send \"Authorization: Bearer "
                                    "<token>\" or \"XRL-Authorization: Bearer <token>\"";
    json_object *body;
    if (r->route && (r->route->flags & RK_ROUTE_API_KEY)) { /* E2B's error object */
        body = json_object_new_object();
        json_object_object_add(body, "code", json_object_new_int(401));
        json_object_object_add(body, "message",
                               json_object_new_string(presented ? "invalid API key"
                                                                : "authentication required: send "
                                                                  "X-API-Key: <token>"));
    } else {
        body = rk_envelope_failure("unauthorized", error, 0, RK_SHAPE_NULL);
    }
    size_t len = 0;
    const char *text = json_object_to_json_string_length(
        body, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &len);
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(len, (void *)text, MHD_RESPMEM_MUST_COPY);
    json_object_put(body);
    if (!resp) {
        rk_reply_detail(r, 500, "out of memory");
        return;
    }
    MHD_add_response_header(resp, "Content-Type", "application/json");
    MHD_add_response_header(resp, "WWW-Authenticate",
                            presented ? "Bearer realm=\"rock-admin\", error=\"invalid_token\""
                                      : "Bearer realm=\"rock-admin\"");
    r->outcome = "unauthorized";
    rk_req_reply_mhd(r, 401, resp);
}

int rk_auth_gate(struct rk_req *r)
{
    snprintf(r->auth_name, sizeof r->auth_name, "-");
    if (!rk_auth_enabled() || is_public(r))
        return 0;
    /* E2B envd routes: the handler checks the sandbox's own access token. */
    if (r->route && (r->route->flags & RK_ROUTE_OWN_AUTH))
        return 0;
    const char *authz = rk_req_header(r, "Authorization");
    const char *xrl = rk_req_header(r, "XRL-Authorization");
    const char *api_key =
        r->route && (r->route->flags & RK_ROUTE_API_KEY) ? rk_req_header(r, "X-API-Key") : NULL;
    char name[RK_AUTH_NAME_MAX];
    int ok = 0;
    if (authz && token_matches(authz, name))
        ok = r->auth_via_authorization = 1;
    else if (xrl && token_matches(xrl, name))
        ok = 1;
    else if (api_key && *api_key && token_matches_raw(api_key, name))
        ok = 1;
    if (ok) {
        memcpy(r->auth_name, name, sizeof r->auth_name);
        count_accepted(name);
        return 0;
    }
    int presented =
        bearer_token(authz) != NULL || bearer_token(xrl) != NULL || (api_key && *api_key);
    pthread_mutex_lock(&g_count_mu);
    if (presented)
        g_invalid++;
    else
        g_missing++;
    pthread_mutex_unlock(&g_count_mu);
    const char *cl = rk_req_header(r, "Content-Length");
    if (rk_req_header(r, "Transfer-Encoding") || (cl && strspn(cl, " 0") != strlen(cl))) {
        r->auth_refused = presented ? 2 : 1; /* answered once the body is drained */
        r->outcome = "unauthorized";
        rk_req_refuse_after_body(r, rk_auth_reply_refused);
        return 1;
    }
    reply_unauthorized(r, presented);
    return 1;
}

void rk_auth_reply_refused(struct rk_req *r)
{
    if (r->auth_refused && !r->responded)
        reply_unauthorized(r, r->auth_refused == 2);
}

int rk_auth_header_is_ours(const struct rk_req *r, const char *name)
{
    return r && r->auth_via_authorization && strcasecmp(name, "authorization") == 0;
}
