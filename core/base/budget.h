/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Process-wide byte budgets that bound what hostile or careless clients can
 * make the daemon hold:
 *   - memory: bytes of request bodies buffered for JSON routes and of JSON
 *     responses waiting to be sent (server.max_buffered_bytes);
 *   - spool: bytes of /upload file parts written to temporary files before
 *     the form's sandbox_id was known (server.max_spool_bytes).
 * A request that would go over a budget is refused (503, envelope 5000
 * "admin is busy ...") instead of growing the process or the disk.
 */
#ifndef RK_BUDGET_H
#define RK_BUDGET_H

#include <stdatomic.h>
#include <stdint.h>

/** One budget: bytes in use and the limit (0 = unlimited). */
struct rk_budget {
    const char *key; /* configuration key, for messages */
    int64_t limit;
    atomic_llong used;
};

/** Buffered request/response bytes (server.max_buffered_bytes). */
extern struct rk_budget rk_mem_budget;
/** Upload spool bytes (server.max_spool_bytes). */
extern struct rk_budget rk_spool_budget;

/** Set both limits (at start-up, before any request). */
void rk_budget_init(int64_t mem_limit, int64_t spool_limit);
/** Take n bytes; 0 on success, -1 (nothing taken) when over the limit. */
int rk_budget_take(struct rk_budget *b, int64_t n);
/** Give back n bytes taken earlier. */
void rk_budget_give(struct rk_budget *b, int64_t n);
/** Bytes currently in use. */
int64_t rk_budget_used(const struct rk_budget *b);

#endif /* RK_BUDGET_H */
