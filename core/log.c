/* SPDX-License-Identifier: Apache-2.0 */
#include "log.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static enum rk_log_level max_level = RK_LOG_INFO;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

static const char *const level_names[] = {"error", "warning", "info", "debug"};

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
    pthread_mutex_lock(&log_lock);
    fwrite(line, 1, len, stderr);
    fflush(stderr);
    pthread_mutex_unlock(&log_lock);
}

void rk_log(enum rk_log_level level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    rk_logv(level, NULL, fmt, ap);
    va_end(ap);
}
