/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The admission table: checks that the layers above the engine register at
 * start-up and the engine runs at fixed points of every request, so that the
 * engine itself knows no token or browser rule (access/ registers those).
 */
#ifndef RK_ADMISSION_H
#define RK_ADMISSION_H

struct rk_req;
struct MHD_Response;

/** Where in a request an admission check runs (in this order). */
enum rk_admit_point {
    RK_ADMIT_BEFORE_ROUTE = 1, /* headers complete, before routing (CORS preflight) */
    RK_ADMIT_MATCHED,          /* route looked up, before 404/405 are answered (tokens) */
    RK_ADMIT_ROUTED,           /* a route was found, before its body is read (origin, type) */
};

/** An admission check that a layer above the engine registers at start-up
 *  (access/ registers CORS and token checks). check returns 0 to let the
 *  request go on, non-zero once it answered the request or deferred its
 *  refusal (rk_req_refuse_after_body). decorate, when set, adds headers to
 *  every response. */
struct rk_admission {
    const char *name;
    enum rk_admit_point point;
    int (*check)(struct rk_req *r);
    void (*decorate)(struct rk_req *r, struct MHD_Response *resp);
};

/** Register an admission check (static storage; before rk_http_start).
 *  Checks of one point run in registration order. 0, or -1 when full. */
int rk_http_admission_add(const struct rk_admission *a);
/** Forget every admission check (tests). */
void rk_http_admission_reset(void);
/** Run the checks registered for one point, in registration order; non-zero
 *  when one of them answered the request (or deferred its refusal). */
int rk_admission_run(struct rk_req *r, enum rk_admit_point point);
/** Let every registered check add its headers to a response. */
void rk_admission_decorate(struct rk_req *r, struct MHD_Response *resp);

#endif /* RK_ADMISSION_H */
