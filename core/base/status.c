/* SPDX-License-Identifier: Apache-2.0 */
/* Names of the ABI status codes (status.h). */
#include "base/status.h"

const char *rk_status_name(rk_status st)
{
    switch (st) {
    case RK_OK:
        return "ok";
    case RK_E_INVALID:
        return "invalid request";
    case RK_E_NOT_FOUND:
        return "not found";
    case RK_E_CONFLICT:
        return "conflict";
    case RK_E_UNSUPPORTED:
        return "unsupported operation";
    case RK_E_NOT_RUNNING:
        return "sandbox not running";
    case RK_E_TIMEOUT:
        return "timeout";
    case RK_E_CANCELLED:
        return "cancelled";
    case RK_E_UPSTREAM:
        return "upstream error";
    case RK_E_UNAVAILABLE:
        return "upstream unavailable";
    case RK_E_NOMEM:
        return "out of memory";
    case RK_E_INTERNAL:
        return "internal error";
    case RK_E_TOO_LARGE:
        return "size limit exceeded";
    case RK_E_COMMAND:
        return "command failed";
    }
    return "internal error";
}
