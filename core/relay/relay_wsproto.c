/* SPDX-License-Identifier: Apache-2.0 */
/*
 * WebSocket protocol pieces of the relays (RFC 6455): the handshake's accept
 * key (SHA-1 + base64) and key check, our close frames, and the frame
 * boundary tracker that lets a byte-transparent relay insert a close frame.
 */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "relay/relay_common.h"

/* Rotate left. */
static uint32_t rol32(uint32_t v, int n)
{
    return (v << n) | (v >> (32 - n));
}

/* One 64-byte block of SHA-1 (FIPS 180-4). */
static void sha1_block(uint32_t h[5], const unsigned char *blk)
{
    uint32_t w[80];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)blk[4 * i] << 24 | (uint32_t)blk[4 * i + 1] << 16 |
               (uint32_t)blk[4 * i + 2] << 8 | blk[4 * i + 3];
    for (int i = 16; i < 80; i++)
        w[i] = rol32(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4];
    for (int i = 0; i < 80; i++) {
        uint32_t f, k;
        if (i < 20) {
            f = (b & c) | (~b & d);
            k = 0x5A827999;
        } else if (i < 40) {
            f = b ^ c ^ d;
            k = 0x6ED9EBA1;
        } else if (i < 60) {
            f = (b & c) | (b & d) | (c & d);
            k = 0x8F1BBCDC;
        } else {
            f = b ^ c ^ d;
            k = 0xCA62C1D6;
        }
        uint32_t t = rol32(a, 5) + f + e + k + w[i];
        e = d;
        d = c;
        c = rol32(b, 30);
        b = a;
        a = t;
    }
    h[0] += a;
    h[1] += b;
    h[2] += c;
    h[3] += d;
    h[4] += e;
}

/* SHA-1 over a whole buffer. */
void rk_sha1(const void *data, size_t len, unsigned char out[20])
{
    uint32_t h[5] = {0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476, 0xC3D2E1F0};
    const unsigned char *p = data;
    size_t left = len;
    while (left >= 64) {
        sha1_block(h, p);
        p += 64;
        left -= 64;
    }
    unsigned char tail[128] = {0};
    memcpy(tail, p, left);
    tail[left] = 0x80;
    size_t tlen = left + 1 + 8 <= 64 ? 64 : 128;
    uint64_t bits = (uint64_t)len * 8;
    for (int i = 0; i < 8; i++)
        tail[tlen - 1 - i] = (unsigned char)(bits >> (8 * i));
    sha1_block(h, tail);
    if (tlen == 128)
        sha1_block(h, tail + 64);
    for (int i = 0; i < 5; i++) {
        out[4 * i] = (unsigned char)(h[i] >> 24);
        out[4 * i + 1] = (unsigned char)(h[i] >> 16);
        out[4 * i + 2] = (unsigned char)(h[i] >> 8);
        out[4 * i + 3] = (unsigned char)h[i];
    }
}

/* RFC 4648 base64 with padding. */
void rk_base64(const unsigned char *in, size_t len, char *out)
{
    static const char tbl[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t o = 0;
    for (size_t i = 0; i < len; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16;
        if (i + 1 < len)
            v |= (uint32_t)in[i + 1] << 8;
        if (i + 2 < len)
            v |= in[i + 2];
        out[o++] = tbl[(v >> 18) & 63];
        out[o++] = tbl[(v >> 12) & 63];
        out[o++] = i + 1 < len ? tbl[(v >> 6) & 63] : '=';
        out[o++] = i + 2 < len ? tbl[v & 63] : '=';
    }
    out[o] = '\0';
}

/* RFC 6455 §4.2.2: base64(SHA-1(key + GUID)). */
void rk_ws_accept_key(const char *key, char out[29])
{
    static const char guid[] = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
    char buf[128];
    int n = snprintf(buf, sizeof buf, "%s%s", key, guid);
    if (n < 0 || (size_t)n >= sizeof buf)
        n = (int)sizeof buf - 1;
    unsigned char digest[20];
    rk_sha1(buf, (size_t)n, digest);
    rk_base64(digest, sizeof digest, out);
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
