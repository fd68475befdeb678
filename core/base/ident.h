/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Identifier rules, checked at the API edge on every route and again by the
 * gate before any store call (docs/operations.md, "Hostile and careless
 * clients"):
 *   - sandbox ids: 1-128 bytes of [A-Za-z0-9._-]. ROCK's own ids are 32 hex
 *     digits; ids travel into upstream URLs, filters and store keys.
 *   - session names: 1-128 bytes without control characters (ROCK and its
 *     SDKs accept any text, e.g. "default", "bash-1"; names only reach the
 *     session registry, never an upstream URL).
 */
#ifndef RK_IDENT_H
#define RK_IDENT_H

#include <stddef.h>

#define RK_ID_MAX 128
/** The validation message for a sandbox id that breaks the rule. */
#define RK_ID_RULE_MSG "String should match pattern '^[A-Za-z0-9._-]{1,128}$'"
/** The validation message for a session name that breaks the rule. */
#define RK_SESSION_RULE_MSG "String should have 1 to 128 bytes and no control characters"
/** 1 if s[0..len) follows the sandbox id rule. */
int rk_id_valid(const char *s, size_t len);
/** 1 if s[0..len) follows the session name rule. */
int rk_session_name_valid(const char *s, size_t len);

#endif /* RK_IDENT_H */
