/* SPDX-License-Identifier: Apache-2.0 */
/*
 * WebSocket protocol pieces of the relays (RFC 6455): the handshake's accept
 * key (SHA-1 and base64 from GnuTLS) and key check, our close frames, and the
 * frame boundary tracker that lets a byte-transparent relay insert a close
 * frame. Frames stay hand-written: the relay passes them byte for byte, and
 * no linked library tracks frames of a stream it does not own (libcurl's
 * WebSocket API owns the connection and re-frames).
 */
#include <ctype.h>
#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "relay/relay_common.h"

/* SHA-1 over a whole buffer (GnuTLS). */
int rk_sha1(const void *data, size_t len, unsigned char out[20])
{
    return gnutls_hash_fast(GNUTLS_DIG_SHA1, data, len, out) == 0 ? 0 : -1;
}

/* RFC 4648 base64 with padding (GnuTLS: no line breaks, no armour without a label). */
int rk_base64(const unsigned char *in, size_t len, char *out)
{
    out[0] = '\0';
    if (len > UINT_MAX)
        return -1;
    gnutls_datum_t src = {(unsigned char *)in, (unsigned)len}, enc = {NULL, 0};
    if (gnutls_base64_encode2(&src, &enc) < 0)
        return -1;
    if (enc.size)
        memcpy(out, enc.data, enc.size);
    out[enc.size] = '\0';
    gnutls_free(enc.data);
    return 0;
}

/* RFC 6455 §4.2.2: base64(SHA-1(key + GUID)). */
int rk_ws_accept_key(const char *key, char out[29])
{
    static const char guid[] = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
    char buf[128];
    int n = snprintf(buf, sizeof buf, "%s%s", key ? key : "", guid);
    if (n < 0 || (size_t)n >= sizeof buf)
        n = (int)sizeof buf - 1;
    unsigned char digest[20];
    out[0] = '\0';
    if (rk_sha1(buf, (size_t)n, digest) != 0)
        return -1;
    return rk_base64(digest, sizeof digest, out);
}

/* A key is base64 of 16 bytes: 22 characters and "==". */
int rk_ws_key_valid(const char *key)
{
    if (!key || strlen(key) != 24 || key[22] != '=' || key[23] != '=')
        return 0;
    for (int i = 0; i < 22; i++)
        if (!isalnum((unsigned char)key[i]) && key[i] != '+' && key[i] != '/')
            return 0;
    return 1;
}

/* FIN + close opcode, unmasked (server to client). */
size_t rk_ws_close_frame(uint16_t code, const char *reason, unsigned char *out, size_t outlen)
{
    size_t rlen = reason ? strlen(reason) : 0;
    if (rlen > 123) {
        rlen = 123;
        while (rlen > 0 && ((unsigned char)reason[rlen] & 0xC0) == 0x80)
            rlen--;
    }
    if (outlen < 4 + rlen)
        return 0;
    out[0] = 0x88;
    out[1] = (unsigned char)(2 + rlen);
    out[2] = (unsigned char)(code >> 8);
    out[3] = (unsigned char)code;
    if (rlen)
        memcpy(out + 4, reason, rlen);
    return 4 + rlen;
}

/* Walk frame headers and skip payloads. */
void rk_ws_track(struct rk_ws_tracker *t, const unsigned char *data, size_t len)
{
    while (len > 0) {
        if (t->in_payload) {
            uint64_t n = t->remain < len ? t->remain : len;
            t->remain -= n;
            data += n;
            len -= (size_t)n;
            if (t->remain == 0)
                t->in_payload = 0;
            continue;
        }
        t->hdr[t->hdr_len++] = *data++;
        len--;
        if (t->hdr_len < 2)
            continue;
        unsigned l7 = t->hdr[1] & 0x7F;
        size_t need = 2 + (l7 == 126 ? 2 : l7 == 127 ? 8 : 0) + ((t->hdr[1] & 0x80) ? 4 : 0);
        if (t->hdr_len < need)
            continue;
        uint64_t plen = l7;
        if (l7 == 126)
            plen = (uint64_t)t->hdr[2] << 8 | t->hdr[3];
        else if (l7 == 127) {
            plen = 0;
            for (int i = 0; i < 8; i++)
                plen = plen << 8 | t->hdr[2 + i];
        }
        t->hdr_len = 0;
        t->remain = plen;
        t->in_payload = plen > 0;
    }
}

/* Between frames: no header or payload bytes pending. */
int rk_ws_at_boundary(const struct rk_ws_tracker *t)
{
    return !t->in_payload && t->hdr_len == 0;
}
