/* Small helpers: time, ids, memory, JSON event formatting, UTF-8 sanitising. */
#include "sim.h"

#include <ctype.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Milliseconds since the Unix epoch. */
int64_t sim_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Sleep for ms milliseconds (restarting on EINTR). */
void sim_sleep_ms(int64_t ms)
{
    if (ms <= 0)
        return;
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* Fill buf with n random bytes from /dev/urandom (falls back to rand()). */
static void sim_random(unsigned char *buf, size_t n)
{
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    size_t got = 0;
    if (fd >= 0) {
        while (got < n) {
            ssize_t k = read(fd, buf + got, n - got);
            if (k <= 0)
                break;
            got += (size_t)k;
        }
        close(fd);
    }
    for (; got < n; got++)
        buf[got] = (unsigned char)rand();
}

/* Random UUID4 with dashes. */
void sim_uuid(char out[37])
{
    unsigned char b[16];
    sim_random(b, sizeof b);
    b[6] = (unsigned char)((b[6] & 0x0f) | 0x40);
    b[8] = (unsigned char)((b[8] & 0x3f) | 0x80);
    snprintf(out, 37, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
             b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
             b[14], b[15]);
}

/* Random 32-hex-digit id (execd command ids). */
void sim_hex_id(char out[33])
{
    unsigned char b[16];
    sim_random(b, sizeof b);
    for (int i = 0; i < 16; i++)
        snprintf(out + 2 * i, 3, "%02x", b[i]);
}

/* Format ms as ISO-8601 UTC with microseconds, e.g. 2026-01-02T03:04:05.123000Z. */
void sim_iso_time(int64_t ms, char *out, size_t n)
{
    time_t s = (time_t)(ms / 1000);
    struct tm tm;
    gmtime_r(&s, &tm);
    char base[32];
    strftime(base, sizeof base, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out, n, "%s.%06dZ", base, (int)(ms % 1000) * 1000);
}

/* Parse an RFC 3339 timestamp (Z or +hh:mm, optional fraction) into ms; 0 on success. */
int sim_parse_iso_time(const char *s, int64_t *out_ms)
{
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    const char *p = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
    if (!p)
        return -1;
    int64_t frac_ms = 0;
    if (*p == '.') {
        p++;
        int digits = 0;
        while (*p >= '0' && *p <= '9') {
            if (digits < 3)
                frac_ms = frac_ms * 10 + (*p - '0');
            digits++;
            p++;
        }
        if (digits == 0)
            return -1;
        for (; digits < 3; digits++)
            frac_ms *= 10;
    }
    int64_t off = 0;
    if (*p == 'Z' || *p == 'z') {
        p++;
    } else if ((*p == '+' || *p == '-') && strlen(p) == 6 && p[3] == ':') {
        int hh = atoi(p + 1), mm = atoi(p + 4);
        off = (int64_t)(hh * 60 + mm) * 60000;
        if (*p == '-')
            off = -off;
        p += 6;
    } else if (*p) {
        return -1; /* no offset: UTC, like ensure_future_expiration does for naive datetimes */
    }
    if (*p)
        return -1;
    time_t t = timegm(&tm);
    *out_ms = (int64_t)t * 1000 + frac_ms - off;
    return 0;
}

/* malloc that aborts on failure. */
void *sim_xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        abort();
    return p;
}

/* realloc that aborts on failure. */
void *sim_xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q)
        abort();
    return q;
}

/* strerror(e) as Go's syscall.Errno.Error() spells it (lower-case first letter, e.g. "no such
 * file or directory"): execd's error messages carry Go's text. Thread-local buffer. */
const char *sim_go_strerror(int e)
{
    static _Thread_local char buf[128];
    snprintf(buf, sizeof buf, "%s", strerror(e));
    buf[0] = (char)tolower((unsigned char)buf[0]);
    return buf;
}

/* strdup that aborts on failure; NULL stays NULL. */
char *sim_strdup(const char *s)
{
    if (!s)
        return NULL;
    char *d = strdup(s);
    if (!d)
        abort();
    return d;
}

/* Length of a valid UTF-8 sequence at p (max n bytes), or 0 if invalid. */
static size_t sim_utf8_len(const unsigned char *p, size_t n)
{
    unsigned c = p[0];
    size_t len;
    unsigned min;
    if (c < 0x80)
        return 1;
    if ((c & 0xe0) == 0xc0) {
        len = 2;
        min = 0x80;
        c &= 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
        len = 3;
        min = 0x800;
        c &= 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
        len = 4;
        min = 0x10000;
        c &= 0x07;
    } else {
        return 0;
    }
    if (len > n)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        c = (c << 6) | (p[i] & 0x3f);
    }
    if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
        return 0;
    return len;
}

/* Copy len bytes replacing invalid UTF-8 with U+FFFD, like Go's JSON encoder (NUL is kept;
 * json-c writes it as \u0000). The output length is stored in *out_len. */
char *sim_sanitize_utf8(const char *in, size_t len, size_t *out_len)
{
    char *out = sim_xmalloc(len * 3 + 1);
    size_t o = 0;
    const unsigned char *p = (const unsigned char *)in;
    for (size_t i = 0; i < len;) {
        size_t k = sim_utf8_len(p + i, len - i);
        if (k == 0) {
            memcpy(out + o, "\xef\xbf\xbd", 3);
            o += 3;
            i++;
        } else {
            memcpy(out + o, p + i, k);
            o += k;
            i += k;
        }
    }
    out[o] = 0;
    *out_len = o;
    return out;
}

/* Serialise a stream event compactly, escaping <, > and & the way Go does. */
char *sim_json_event_string(json_object *o)
{
    const char *s =
        json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
    size_t n = strlen(s), extra = 0;
    for (size_t i = 0; i < n; i++)
        if (s[i] == '<' || s[i] == '>' || s[i] == '&')
            extra += 5;
    char *out = sim_xmalloc(n + extra + 1);
    size_t j = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '<' || s[i] == '>' || s[i] == '&') {
            j += (size_t)sprintf(out + j, "\\u%04x", (unsigned)s[i]);
        } else {
            out[j++] = s[i];
        }
    }
    out[j] = 0;
    return out;
}

/* mkdir -p; 0 on success. */
int sim_mkdir_p(const char *path, mode_t mode)
{
    char *tmp = sim_strdup(path);
    size_t n = strlen(tmp);
    for (size_t i = 1; i <= n; i++) {
        if (tmp[i] == '/' || tmp[i] == 0) {
            char save = tmp[i];
            tmp[i] = 0;
            if (mkdir(tmp, mode) != 0 && errno != EEXIST) {
                free(tmp);
                return -1;
            }
            tmp[i] = save;
        }
    }
    free(tmp);
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) {
        errno = ENOTDIR;
        return -1;
    }
    return 0;
}

/* Count a helper thread as running (so shutdown can wait for it). */
void sim_thread_started(void)
{
    pthread_mutex_lock(&g_sim.threads_mu);
    g_sim.nthreads++;
    pthread_mutex_unlock(&g_sim.threads_mu);
}

/* Mark a helper thread as finished. */
void sim_thread_finished(void)
{
    pthread_mutex_lock(&g_sim.threads_mu);
    g_sim.nthreads--;
    pthread_cond_broadcast(&g_sim.threads_cv);
    pthread_mutex_unlock(&g_sim.threads_mu);
}

/* Wait until all helper threads have finished. */
void sim_wait_threads(void)
{
    pthread_mutex_lock(&g_sim.threads_mu);
    while (g_sim.nthreads > 0)
        pthread_cond_wait(&g_sim.threads_cv, &g_sim.threads_mu);
    pthread_mutex_unlock(&g_sim.threads_mu);
}
