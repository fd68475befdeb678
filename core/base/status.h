/* SPDX-License-Identifier: Apache-2.0 */
/* Names of the operator ABI's status codes (rk_status). */
#ifndef RK_STATUS_H
#define RK_STATUS_H

#include "rock-admin/operator.h"

/** Generic name of a status ("timeout", "upstream error", ...). */
const char *rk_status_name(rk_status st);

#endif /* RK_STATUS_H */
