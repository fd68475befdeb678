/* SPDX-License-Identifier: Apache-2.0 */
#include "base/budget.h"

struct rk_budget rk_mem_budget = {.key = "max_buffered_bytes"};
struct rk_budget rk_spool_budget = {.key = "max_spool_bytes"};

void rk_budget_init(int64_t mem_limit, int64_t spool_limit)
{
    rk_mem_budget.limit = mem_limit;
    rk_spool_budget.limit = spool_limit;
}

int rk_budget_take(struct rk_budget *b, int64_t n)
{
    if (n <= 0)
        return 0;
    long long cur = atomic_load(&b->used);
    for (;;) {
        if (b->limit > 0 && (n > b->limit || cur > b->limit - n))
            return -1;
        if (atomic_compare_exchange_weak(&b->used, &cur, cur + n))
            return 0;
    }
}

void rk_budget_give(struct rk_budget *b, int64_t n)
{
    if (n > 0)
        atomic_fetch_sub(&b->used, n);
}

int64_t rk_budget_used(const struct rk_budget *b)
{
    return atomic_load(&((struct rk_budget *)b)->used);
}
