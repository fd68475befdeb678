/* SPDX-License-Identifier: Apache-2.0 */
/* Logging to stderr: one line per event, timestamped, level-filtered.
 * Never pass secrets (API keys, passwords, env values, auth headers). */
#ifndef RK_LOG_H
#define RK_LOG_H

#include "rock-admin/operator.h"
#include <stdarg.h>
#include <stdint.h>

/** Set the most verbose level printed (default RK_LOG_INFO). */
void rk_log_set_level(enum rk_log_level level);

/** Log one line at level. */
void rk_log(enum rk_log_level level, const char *fmt, ...) RK_PRINTF(2, 3);

/** Log one line at level with an explicit va_list; prefix may be NULL. */
void rk_logv(enum rk_log_level level, const char *prefix, const char *fmt, va_list ap);

/** Log one line whatever the level (startup/ready/stop milestones). */
void rk_notice(const char *fmt, ...) RK_PRINTF(1, 2);

/** Line format (log.format): text (default) or one JSON object per line. */
enum rk_log_format {
    RK_LOG_FORMAT_TEXT = 0,
    RK_LOG_FORMAT_JSON = 1,
};

/** Choose the format of every following line. */
void rk_log_set_format(enum rk_log_format format);

/** One finished HTTP request, for the access log. Strings may be NULL. */
struct rk_access_entry {
    const char *request_id;
    const char *method;
    const char *path; /* decoded path, never the query string */
    const char *route;
    const char *outcome;
    const char *sandbox_id; /* the request's sandbox, when it names one */
    unsigned status;
    int64_t duration_ms;
    const char *token; /* name of the bearer token that authenticated it, or NULL */
};

/** Log a finished request at info level: "access id=... route=..." in text,
 *  an object with request_id, method, path, route, status, duration_ms,
 *  outcome and sandbox_id in JSON. */
void rk_log_access(const struct rk_access_entry *e);

#define rk_err(...) rk_log(RK_LOG_ERROR, __VA_ARGS__)
#define rk_warn(...) rk_log(RK_LOG_WARNING, __VA_ARGS__)
#define rk_info(...) rk_log(RK_LOG_INFO, __VA_ARGS__)
#define rk_debug(...) rk_log(RK_LOG_DEBUG, __VA_ARGS__)

#endif /* RK_LOG_H */
