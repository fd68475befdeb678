/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Per-resource secrets (the E2B envd access token of a sandbox): issued from
 * the kernel RNG, kept only as a SHA-256 hex digest, compared in constant
 * time. The secret itself is handed to its owner once and never logged.
 */
#ifndef RK_SECRET_H
#define RK_SECRET_H

#include <stddef.h>

/** Hex characters of a digest (SHA-256) plus the terminating NUL. */
#define RK_SECRET_DIGEST_HEX 65

/** A new secret of 32 lowercase hex characters into out[33] and its digest
 *  into digest[RK_SECRET_DIGEST_HEX]. 0, or -1 when hashing failed. */
int rk_secret_issue(char out[33], char digest[RK_SECRET_DIGEST_HEX]);

/** 1 when presented (may be NULL) hashes to digest, compared without an
 *  early exit; 0 otherwise (also for a NULL or malformed digest). */
int rk_secret_matches(const char *digest, const char *presented);

#endif /* RK_SECRET_H */
