/* Kafka wire primitives: big-endian integers and zigzag varints, bounds-checked.
 *
 * Every reader takes [p, end) and never touches a byte at or after `end`.
 * Varint readers return the number of bytes consumed, 0 if the input ends inside the
 * varint, or -1 if it runs longer than its type allows (5 bytes for int32, 10 for int64).
 */
#ifndef KB_WIRE_H
#define KB_WIRE_H
#include <stdint.h>
#include <string.h>

static inline uint16_t kb_load_be16(const uint8_t *p) {
    uint16_t v; memcpy(&v, p, 2); return __builtin_bswap16(v);
}
static inline uint32_t kb_load_be32(const uint8_t *p) {
    uint32_t v; memcpy(&v, p, 4); return __builtin_bswap32(v);
}
static inline uint64_t kb_load_be64(const uint8_t *p) {
    uint64_t v; memcpy(&v, p, 8); return __builtin_bswap64(v);
}
static inline void kb_store_be16(uint8_t *p, uint16_t v) {
    v = __builtin_bswap16(v); memcpy(p, &v, 2);
}
static inline void kb_store_be32(uint8_t *p, uint32_t v) {
    v = __builtin_bswap32(v); memcpy(p, &v, 4);
}
static inline void kb_store_be64(uint8_t *p, uint64_t v) {
    v = __builtin_bswap64(v); memcpy(p, &v, 8);
}

/* Unsigned LEB128 of at most max_bytes bytes. */
static inline int kb_read_uvarint(const uint8_t *p, const uint8_t *end, int max_bytes, uint64_t *out) {
    uint64_t v = 0;
    int shift = 0;
    for (int i = 0; i < max_bytes; i++) {
        if (p + i >= end) return 0;
        uint8_t b = p[i];
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) { *out = v; return i + 1; }
        shift += 7;
    }
    return -1;
}

/* Zigzag varint (int32, up to 5 bytes). */
static inline int kb_read_varint(const uint8_t *p, const uint8_t *end, int32_t *out) {
    uint64_t u;
    int n = kb_read_uvarint(p, end, 5, &u);
    if (n > 0) {
        if (u > 0xFFFFFFFFull) return -1;
        uint32_t w = (uint32_t)u;
        *out = (int32_t)((w >> 1) ^ (uint32_t)(-(int32_t)(w & 1)));
    }
    return n;
}

/* Zigzag varlong (int64, up to 10 bytes). */
static inline int kb_read_varlong(const uint8_t *p, const uint8_t *end, int64_t *out) {
    uint64_t u;
    int n = kb_read_uvarint(p, end, 10, &u);
    if (n > 0) *out = (int64_t)((u >> 1) ^ (uint64_t)(-(int64_t)(u & 1)));
    return n;
}

/* Writers: `p` must have room for 10 bytes; they return the bytes written. */
static inline int kb_write_uvarint(uint8_t *p, uint64_t v) {
    int n = 0;
    while (v >= 0x80) { p[n++] = (uint8_t)(v | 0x80); v >>= 7; }
    p[n++] = (uint8_t)v;
    return n;
}
static inline int kb_write_varint(uint8_t *p, int32_t v) {
    return kb_write_uvarint(p, (uint32_t)(((uint32_t)v << 1) ^ (uint32_t)(v >> 31)));
}
static inline int kb_write_varlong(uint8_t *p, int64_t v) {
    return kb_write_uvarint(p, ((uint64_t)v << 1) ^ (uint64_t)(v >> 63));
}
static inline int kb_varint_size(int32_t v) {
    uint32_t u = ((uint32_t)v << 1) ^ (uint32_t)(v >> 31);
    int n = 1;
    while (u >= 0x80) { u >>= 7; n++; }
    return n;
}
static inline int kb_varlong_size(int64_t v) {
    uint64_t u = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    int n = 1;
    while (u >= 0x80) { u >>= 7; n++; }
    return n;
}
#endif
