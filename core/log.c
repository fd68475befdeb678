/* SPDX-License-Identifier: Apache-2.0 */
#include "log.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static enum rk_log_level max_level = RK_LOG_INFO;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

static const char *const level_names[] = {"error", "warning", "info", "debug"};

/* Rate limit of repeated identical lines (issue 15: libmicrohttpd's accept error at the
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

static void write_line(const char *level_name, const char *prefix, const char *fmt, va_list ap)
{
    char line[2048];
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    int n = snprintf(line, sizeof line, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %s: %s%s",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                     ts.tv_nsec / 1000000, level_name, prefix ? prefix : "", prefix ? ": " : "");
    if (n < 0 || (size_t)n >= sizeof line)
        n = 0;
    vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    /* One write per line so concurrent threads never interleave within a line. */
    size_t len = strnlen(line, sizeof line - 2);
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
    int same = msg_len == last_len && memcmp(msg, last_msg, msg_len) == 0;
    if (same && now_ms - last_written_ms < LOG_REPEAT_WINDOW_MS) {
        repeats++;
        pthread_mutex_unlock(&log_lock);
        return;
    }
    if (repeats) {
        fprintf(stderr, "%.*s notice: last message repeated %lu times\n", 24, line, repeats);
        repeats = 0;
    }
    fwrite(line, 1, len, stderr);
    fflush(stderr);
    if (msg_len <= sizeof last_msg) {
        memcpy(last_msg, msg, msg_len);
        last_len = msg_len;
    } else {
        last_len = 0;
    }
    last_written_ms = now_ms;
    pthread_mutex_unlock(&log_lock);
}

void rk_log(enum rk_log_level level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    rk_logv(level, NULL, fmt, ap);
    va_end(ap);
}
