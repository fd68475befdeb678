/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file mock_host.h
 * @brief A minimal in-memory rk_host for the plugin's unit tests.
 */
#ifndef OS_MOCK_HOST_H
#define OS_MOCK_HOST_H

#include <rock-admin/operator.h>

/** One fake config value. */
struct mock_cfg_entry {
    const char *key;
    const char *value; /**< textual; NULL = unset */
};

/** A fake validated config section: explicit values, schema defaults otherwise. */
struct rk_cfg {
    const struct mock_cfg_entry *entries;
    const struct rk_cfg_key *schema;
};

/** Problems reported through cfg_problem, most recent last. */
extern char mock_problem_keys[16][64];
extern char mock_problem_texts[16][256];
extern int mock_problem_count;
/** Last error recorded with set_error. */
extern char mock_last_error[1024];
extern rk_status mock_last_code;
/** Non-zero makes host->cancelled() report cancellation. */
extern volatile int mock_cancelled_flag;
/** Value host->deadline_ms() returns (0 = none). */
extern int64_t mock_deadline_ms;

/** The host table. */
extern const struct rk_host mock_host;

/** Reset problems, errors, cancellation, deadline and free the arena. */
void mock_reset(void);
/** A fake call handle. */
struct rk_call *mock_call(void);
/** Wait (up to 20 s) for host->call_done; returns its status, *count how many calls arrived
 *  since the last wait (0 after a timeout). */
rk_status mock_wait_done(int *count);

#endif /* OS_MOCK_HOST_H */
