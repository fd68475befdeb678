/* SPDX-License-Identifier: Apache-2.0 */
#include "obs/log.h"

#include <json-c/json.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static enum rk_log_level max_level = RK_LOG_INFO;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static enum rk_log_format log_format = RK_LOG_FORMAT_TEXT;

static const char *const level_names[] = {"error", "warning", "info", "debug"};

/* Rate limit of repeated identical lines (libmicrohttpd's accept error at the
 * descriptor limit was logged ~800,000 times per second). A line identical to the previous
 * one within LOG_REPEAT_WINDOW_MS of its last written copy is counted instead of written;
 * the count is written as "last message repeated N times" before the next different line
 * or once the window passed. Guarded by log_lock. */
#define LOG_REPEAT_WINDOW_MS 1000
static char last_msg[2048];
static size_t last_len;
static int64_t last_written_ms;
static unsigned long repeats;

void rk_log_set_level(enum rk_log_level level)
{
    max_level = level;
}

void rk_log_set_format(enum rk_log_format format)
{
    log_format = format;
}

/* Format and write one line; level_name is printed as the severity. */
static void write_line(const char *level_name, const char *prefix, const char *fmt, va_list ap);

void rk_logv(enum rk_log_level level, const char *prefix, const char *fmt, va_list ap)
{
    if (level > max_level)
        return;
    write_line(level_names[level], prefix, fmt, ap);
}

void rk_notice(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    write_line("notice", NULL, fmt, ap);
    va_end(ap);
}

/* "2026-01-21T11:38:00.123Z" into buf (at least 64 bytes). */
static void format_time(char *buf, size_t size)
{
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    snprintf(buf, size, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", (tm.tm_year + 1900) % 10000,
             (tm.tm_mon + 1) % 100, tm.tm_mday % 100, tm.tm_hour % 100, tm.tm_min % 100,
             tm.tm_sec % 100, (int)(ts.tv_nsec / 1000000) % 1000);
}

/* Repeat filter (caller holds log_lock): 1 when key repeats the previous line within the
 * window (count it, write nothing); else 0, with *flushed set to the number of suppressed
 * copies of the previous line to report first, and key remembered. */
static int repeat_suppressed(const char *key, size_t klen, int64_t now_ms, unsigned long *flushed)
{
    *flushed = 0;
    if (klen == last_len && memcmp(key, last_msg, klen) == 0 &&
        now_ms - last_written_ms < LOG_REPEAT_WINDOW_MS) {
        repeats++;
        return 1;
    }
    *flushed = repeats;
    repeats = 0;
    if (klen <= sizeof last_msg) {
        memcpy(last_msg, key, klen);
        last_len = klen;
    } else {
        last_len = 0;
    }
    last_written_ms = now_ms;
    return 0;
}

/* CLOCK_REALTIME in ms. */
static int64_t log_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Write one JSON object (takes ownership) as one line, in one write. */
static void write_json(json_object *o)
{
    size_t len = 0;
    const char *text = json_object_to_json_string_length(
        o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &len);
    pthread_mutex_lock(&log_lock);
    fwrite(text, 1, len, stderr);
    fputc('\n', stderr);
    fflush(stderr);
    pthread_mutex_unlock(&log_lock);
    json_object_put(o);
}

/* {"time","level","msg"}: the JSON form of one text line. */
static void write_json_line(const char *level_name, const char *prefix, const char *fmt, va_list ap)
{
    enum { MSG_MAX = 2048, KEY_MAX = 2200 };
    char when[64];
    /* Heap, not stack: a log call deep in a request would otherwise touch 4 KiB more of every
     * connection thread's stack, resident for the thread's life. */
    char *msg = malloc(MSG_MAX), *key = malloc(KEY_MAX);
    if (!msg || !key) {
        free(msg);
        free(key);
        return;
    }
    format_time(when, sizeof when);
    int n = prefix ? snprintf(msg, MSG_MAX, "%s: ", prefix) : 0;
    if (n < 0 || (size_t)n >= MSG_MAX)
        n = 0;
    vsnprintf(msg + n, MSG_MAX - (size_t)n, fmt, ap);
    int klen = snprintf(key, KEY_MAX, "%s:%s", level_name, msg);
    unsigned long flushed = 0;
    pthread_mutex_lock(&log_lock);
    int skip = repeat_suppressed(key, klen > 0 ? (size_t)klen : 0, log_now_ms(), &flushed);
    pthread_mutex_unlock(&log_lock);
    free(key);
    if (skip) {
        free(msg);
        return;
    }
    if (flushed) {
        char note[64];
        snprintf(note, sizeof note, "last message repeated %lu times", flushed);
        json_object *r = json_object_new_object();
        json_object_object_add(r, "time", json_object_new_string(when));
        json_object_object_add(r, "level", json_object_new_string("notice"));
        json_object_object_add(r, "msg", json_object_new_string(note));
        write_json(r);
    }
    json_object *o = json_object_new_object();
    json_object_object_add(o, "time", json_object_new_string(when));
    json_object_object_add(o, "level", json_object_new_string(level_name));
    json_object_object_add(o, "msg", json_object_new_string(msg));
    free(msg);
    write_json(o);
}

/* A JSON string, or null for NULL. */
static json_object *str_or_null(const char *s)
{
    return s ? json_object_new_string(s) : NULL;
}

void rk_log_access(const struct rk_access_entry *e)
{
    if (RK_LOG_INFO > max_level)
        return;
    if (log_format != RK_LOG_FORMAT_JSON) {
        rk_log(RK_LOG_INFO,
               "access id=%s method=%s path=%s route=%s status=%u duration_ms=%lld outcome=%s "
               "token=%s",
               e->request_id ? e->request_id : "-", e->method ? e->method : "-",
               e->path ? e->path : "-", e->route ? e->route : "-", e->status,
               (long long)e->duration_ms, e->outcome ? e->outcome : "-", e->token ? e->token : "-");
        return;
    }
    char when[64];
    format_time(when, sizeof when);
    json_object *o = json_object_new_object();
    json_object_object_add(o, "time", json_object_new_string(when));
    json_object_object_add(o, "level", json_object_new_string("info"));
    json_object_object_add(o, "msg", json_object_new_string("access"));
    json_object_object_add(o, "request_id", str_or_null(e->request_id));
    json_object_object_add(o, "method", str_or_null(e->method));
    json_object_object_add(o, "path", str_or_null(e->path));
    json_object_object_add(o, "route", str_or_null(e->route));
    json_object_object_add(o, "status", json_object_new_int((int)e->status));
    json_object_object_add(o, "duration_ms", json_object_new_int64(e->duration_ms));
    json_object_object_add(o, "outcome", str_or_null(e->outcome));
    json_object_object_add(o, "sandbox_id", str_or_null(e->sandbox_id));
    json_object_object_add(o, "token", str_or_null(e->token));
    write_json(o);
}

static void write_line(const char *level_name, const char *prefix, const char *fmt, va_list ap)
{
    if (log_format == RK_LOG_FORMAT_JSON) {
        write_json_line(level_name, prefix, fmt, ap);
        return;
    }
    enum { LINE_MAX_BYTES = 2048 };
    /* Heap, not stack (see write_json_line). */
    char *line = malloc(LINE_MAX_BYTES);
    if (!line)
        return;
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    int n = snprintf(line, LINE_MAX_BYTES, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %s: %s%s",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                     ts.tv_nsec / 1000000, level_name, prefix ? prefix : "", prefix ? ": " : "");
    if (n < 0 || (size_t)n >= LINE_MAX_BYTES)
        n = 0;
    vsnprintf(line + n, LINE_MAX_BYTES - (size_t)n, fmt, ap);
    /* One write per line so concurrent threads never interleave within a line. */
    size_t len = strnlen(line, LINE_MAX_BYTES - 2);
    for (size_t i = 0; i < len; i++)
        if (line[i] == '\n' || line[i] == '\r')
            line[i] = ' ';
    line[len++] = '\n';
    /* The message without its timestamp, to spot repeats. */
    const char *msg = memchr(line, ' ', len);
    msg = msg ? msg + 1 : line;
    size_t msg_len = len - (size_t)(msg - line);
    int64_t now_ms = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    pthread_mutex_lock(&log_lock);
    unsigned long flushed = 0;
    if (repeat_suppressed(msg, msg_len, now_ms, &flushed)) {
        pthread_mutex_unlock(&log_lock);
        free(line);
        return;
    }
    if (flushed)
        fprintf(stderr, "%.*s notice: last message repeated %lu times\n", 24, line, flushed);
    fwrite(line, 1, len, stderr);
    fflush(stderr);
    pthread_mutex_unlock(&log_lock);
    free(line);
}

void rk_log(enum rk_log_level level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    rk_logv(level, NULL, fmt, ap);
    va_end(ap);
}
