/* SPDX-License-Identifier: Apache-2.0 */
/* The admission table (admission.h). */
#include "engine/admission.h"

#include <stddef.h>

#define RK_MAX_ADMISSIONS 8
static const struct rk_admission *admissions[RK_MAX_ADMISSIONS];
static int nadmissions;

int rk_http_admission_add(const struct rk_admission *a)
{
    if (nadmissions >= RK_MAX_ADMISSIONS)
        return -1;
    admissions[nadmissions++] = a;
    return 0;
}

void rk_http_admission_reset(void)
{
    nadmissions = 0;
}

int rk_admission_run(struct rk_req *r, enum rk_admit_point point)
{
    for (int i = 0; i < nadmissions; i++)
        if (admissions[i]->check && admissions[i]->point == point && admissions[i]->check(r))
            return 1;
    return 0;
}

void rk_admission_decorate(struct rk_req *r, struct MHD_Response *resp)
{
    for (int i = 0; i < nadmissions; i++)
        if (admissions[i]->decorate)
            admissions[i]->decorate(r, resp);
}
