/* SPDX-License-Identifier: Apache-2.0 */
/* Per-resource secrets: issue, digest, constant-time check (secret.h). */
#include "access/secret.h"

#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <stdio.h>
#include <string.h>

#include "base/util.h"

#define DIGEST_LEN 32

/* SHA-256 of s as lowercase hex into hex[RK_SECRET_DIGEST_HEX]; 0 on success. */
static int digest_hex(const char *s, char hex[RK_SECRET_DIGEST_HEX])
{
    unsigned char d[DIGEST_LEN];
    if (gnutls_hash_fast(GNUTLS_DIG_SHA256, s, strlen(s), d) != 0)
        return -1;
    for (size_t i = 0; i < DIGEST_LEN; i++)
        snprintf(hex + 2 * i, 3, "%02x", d[i]);
    volatile unsigned char *v = d;
    for (size_t i = 0; i < DIGEST_LEN; i++)
        v[i] = 0;
    return 0;
}

int rk_secret_issue(char out[33], char digest[RK_SECRET_DIGEST_HEX])
{
    rk_random_hex(out, 32);
    out[32] = '\0';
    return digest_hex(out, digest);
}

int rk_secret_matches(const char *digest, const char *presented)
{
    char hex[RK_SECRET_DIGEST_HEX];
    if (!digest || !presented || strlen(digest) != RK_SECRET_DIGEST_HEX - 1 ||
        digest_hex(presented, hex) != 0)
        return 0;
    unsigned diff = 0;
    for (size_t i = 0; i < RK_SECRET_DIGEST_HEX - 1; i++)
        diff |= (unsigned)(hex[i] ^ digest[i]);
    return diff == 0;
}
