/* A 64-bit seeded hash for compaction keys (an xxHash64-style single-lane mix; our own
 * code, not xxHash). Two seeds give the 128-bit key identity of the offset map. */
#ifndef KB_HASH_H
#define KB_HASH_H
#include <stdint.h>
#include <string.h>

#define KB_SEED1 0x9E3779B97F4A7C15ULL
#define KB_SEED2 0xC2B2AE3D27D4EB4FULL

static const uint64_t KB_P1 = 0x9E3779B185EBCA87ULL;
static const uint64_t KB_P2 = 0xC2B2AE3D27D4EB4FULL;
static const uint64_t KB_P3 = 0x165667B19E3779F9ULL;
static const uint64_t KB_P4 = 0x85EBCA77C2B2AE63ULL;

static inline uint64_t kb_rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

static inline uint64_t kb_hash64(const uint8_t *p, size_t n, uint64_t seed) {
    uint64_t h = seed + KB_P3 + (uint64_t)n * KB_P1;
    while (n >= 8) {
        uint64_t k;
        memcpy(&k, p, 8);
        k *= KB_P2;
        k = kb_rotl64(k, 31);
        k *= KB_P1;
        h ^= k;
        h = kb_rotl64(h, 27) * KB_P1 + KB_P4;
        p += 8;
        n -= 8;
    }
    if (n >= 4) {
        uint32_t k;
        memcpy(&k, p, 4);
        h ^= (uint64_t)k * KB_P1;
        h = kb_rotl64(h, 23) * KB_P2 + KB_P3;
        p += 4;
        n -= 4;
    }
    while (n--) {
        h ^= (*p++) * KB_P4;
        h = kb_rotl64(h, 11) * KB_P1;
    }
    h ^= h >> 33;
    h *= KB_P2;
    h ^= h >> 29;
    h *= KB_P3;
    h ^= h >> 32;
    return h;
}
#endif
