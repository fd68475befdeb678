/* SPDX-License-Identifier: Apache-2.0 */
/* The sandbox id and session name rules (ident.h). */
#include "base/ident.h"

int rk_id_valid(const char *s, size_t len)
{
    if (!s || len == 0 || len > RK_ID_MAX)
        return 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

int rk_session_name_valid(const char *s, size_t len)
{
    if (!s || len == 0 || len > RK_ID_MAX)
        return 0;
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
            return 0;
    return 1;
}
