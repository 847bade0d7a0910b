/* Strict UTF-8 validation (RFC 3629: no overlongs, no surrogates, max U+10FFFF). */
#ifndef KB_UTF8_H
#define KB_UTF8_H
#include <stddef.h>
#include <stdint.h>
#include <string.h>

static inline int kb_utf8_valid(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        /* ASCII runs eight bytes at a time (most keys and strings are ASCII) */
        while (n - i >= 8) {
            uint64_t w;
            memcpy(&w, s + i, 8);
            if (w & 0x8080808080808080ULL) break;
            i += 8;
        }
        if (i >= n) break;
        uint8_t c = s[i];
        if (c < 0x80) { i++; continue; }
        size_t need;
        uint32_t cp;
        if ((c & 0xE0) == 0xC0) { need = 1; cp = c & 0x1F; if (c < 0xC2) return 0; }
        else if ((c & 0xF0) == 0xE0) { need = 2; cp = c & 0x0F; }
        else if ((c & 0xF8) == 0xF0) { need = 3; cp = c & 0x07; if (c > 0xF4) return 0; }
        else return 0;
        if (n - i <= need) return 0;
        for (size_t k = 1; k <= need; k++) {
            uint8_t cc = s[i + k];
            if ((cc & 0xC0) != 0x80) return 0;
            cp = (cp << 6) | (cc & 0x3F);
        }
        if (need == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) return 0;
        if (need == 3 && (cp < 0x10000 || cp > 0x10FFFF)) return 0;
        i += need + 1;
    }
    return 1;
}
#endif
