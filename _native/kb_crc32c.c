/*
 * CRC-32C (Castagnoli), the checksum of Kafka's RecordBatch v2.
 *
 * Polynomial 0x1EDC6F41, reflected 0x82F63B78; initial value and final XOR 0xFFFFFFFF.
 * kb_crc32c(0, "123456789", 9) == 0xE3069283 (RFC 3720 B.4 check value).
 *
 * Three implementations, chosen once at kb_crc32c_init() by what the CPU reports:
 *   - x86_64 with SSE4.2: the `crc32` instruction on 8 bytes at a time, over three
 *     independent lanes for long buffers (the instruction has a latency of 3 cycles and a
 *     throughput of 1 per cycle, so three lanes keep the unit busy), lanes combined with
 *     "shift by N zero bytes" operators kept as 4 x 256 tables;
 *   - aarch64 with the CRC extension: the `crc32cx` instruction, same three lanes;
 *   - anywhere: table-driven slicing-by-8.
 *
 * Internally the lanes work on the raw register (no pre/post inversion): for a message
 * A||B, reg(A||B) = shift_|B|(reg(A)) XOR reg_from_zero(B).
 *
 * Thread safety: kb_crc32c_init() builds the tables and must run once before any other
 * call (the Python module does it at import, under the GIL); afterwards every function
 * is pure and may run concurrently without the GIL.
 */
#include "kb_crc32c.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) || defined(_M_X64)
#define KB_X86 1
#include <nmmintrin.h>
#endif

#if defined(__aarch64__)
#define KB_ARM 1
#include <sys/auxv.h>
#ifndef HWCAP_CRC32
#define HWCAP_CRC32 (1 << 7)
#endif
#endif

#define POLY 0x82F63B78u

/* Lane lengths for the interleaved hardware paths. */
#define LONG_LANE 8192
#define SHORT_LANE 256

static uint32_t sw_table[8][256];
static uint32_t shift_long[4][256];  /* reg -> reg after LONG_LANE zero bytes */
static uint32_t shift_short[4][256]; /* reg -> reg after SHORT_LANE zero bytes */
static int initialized = 0;

typedef uint32_t (*crc_raw_fn)(uint32_t reg, const unsigned char *p, size_t n);
static crc_raw_fn active_raw = NULL;
static const char *active_name = "uninitialized";

static inline uint64_t load_le64(const unsigned char *p) {
    uint64_t v;
    memcpy(&v, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

/* ---- software: slicing-by-8 ------------------------------------------------------ */

static uint32_t sw_raw(uint32_t reg, const unsigned char *p, size_t n) {
    while (n && ((uintptr_t)p & 7)) {
        reg = sw_table[0][(reg ^ *p++) & 0xff] ^ (reg >> 8);
        n--;
    }
    while (n >= 8) {
        uint64_t w = load_le64(p) ^ reg;
        reg = sw_table[7][w & 0xff] ^ sw_table[6][(w >> 8) & 0xff] ^
              sw_table[5][(w >> 16) & 0xff] ^ sw_table[4][(w >> 24) & 0xff] ^
              sw_table[3][(w >> 32) & 0xff] ^ sw_table[2][(w >> 40) & 0xff] ^
              sw_table[1][(w >> 48) & 0xff] ^ sw_table[0][w >> 56];
        p += 8;
        n -= 8;
    }
    while (n--) {
        reg = sw_table[0][(reg ^ *p++) & 0xff] ^ (reg >> 8);
    }
    return reg;
}

/* Register after feeding `nbytes` zero bytes, one byte at a time (init only). */
static uint32_t zeros_slow(uint32_t reg, size_t nbytes) {
    while (nbytes--) reg = sw_table[0][reg & 0xff] ^ (reg >> 8);
    return reg;
}

/* The operator "feed nbytes zeros" is linear over GF(2): compute it on the 32 basis
 * vectors, then tabulate it per byte position of the register. */
static void build_shift_table(uint32_t table[4][256], size_t nbytes) {
    uint32_t basis[32];
    for (int i = 0; i < 32; i++) basis[i] = zeros_slow(1u << i, nbytes);
    for (int k = 0; k < 4; k++) {
        for (int b = 0; b < 256; b++) {
            uint32_t r = 0;
            for (int bit = 0; bit < 8; bit++)
                if (b & (1 << bit)) r ^= basis[8 * k + bit];
            table[k][b] = r;
        }
    }
}

static inline uint32_t shift(const uint32_t table[4][256], uint32_t reg) {
    return table[0][reg & 0xff] ^ table[1][(reg >> 8) & 0xff] ^
           table[2][(reg >> 16) & 0xff] ^ table[3][reg >> 24];
}

/* ---- x86_64 SSE4.2 ------------------------------------------------------------- */

#ifdef KB_X86
__attribute__((target("sse4.2")))
static uint32_t hw_raw(uint32_t reg, const unsigned char *p, size_t n) {
    uint64_t r0 = reg;
    while (n && ((uintptr_t)p & 7)) {
        r0 = _mm_crc32_u8((uint32_t)r0, *p++);
        n--;
    }
    /* three lanes of LONG_LANE, then of SHORT_LANE */
    while (n >= 3 * LONG_LANE) {
        uint64_t r1 = 0, r2 = 0;
        const unsigned char *end = p + LONG_LANE;
        do {
            r0 = _mm_crc32_u64(r0, load_le64(p));
            r1 = _mm_crc32_u64(r1, load_le64(p + LONG_LANE));
            r2 = _mm_crc32_u64(r2, load_le64(p + 2 * LONG_LANE));
            p += 8;
        } while (p < end);
        r0 = shift(shift_long, (uint32_t)r0) ^ (uint32_t)r1;
        r0 = shift(shift_long, (uint32_t)r0) ^ (uint32_t)r2;
        p += 2 * LONG_LANE;
        n -= 3 * LONG_LANE;
    }
    while (n >= 3 * SHORT_LANE) {
        uint64_t r1 = 0, r2 = 0;
        const unsigned char *end = p + SHORT_LANE;
        do {
            r0 = _mm_crc32_u64(r0, load_le64(p));
            r1 = _mm_crc32_u64(r1, load_le64(p + SHORT_LANE));
            r2 = _mm_crc32_u64(r2, load_le64(p + 2 * SHORT_LANE));
            p += 8;
        } while (p < end);
        r0 = shift(shift_short, (uint32_t)r0) ^ (uint32_t)r1;
        r0 = shift(shift_short, (uint32_t)r0) ^ (uint32_t)r2;
        p += 2 * SHORT_LANE;
        n -= 3 * SHORT_LANE;
    }
    while (n >= 8) {
        r0 = _mm_crc32_u64(r0, load_le64(p));
        p += 8;
        n -= 8;
    }
    while (n--) r0 = _mm_crc32_u8((uint32_t)r0, *p++);
    return (uint32_t)r0;
}

static int hw_available(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("sse4.2");
}
#endif

/* ---- aarch64 CRC extension ------------------------------------------------------ */

#ifdef KB_ARM
static inline __attribute__((target("+crc"))) uint32_t arm_crc64(uint32_t r, uint64_t v) {
    uint32_t out;
    __asm__("crc32cx %w0, %w1, %x2" : "=r"(out) : "r"(r), "r"(v));
    return out;
}
static inline __attribute__((target("+crc"))) uint32_t arm_crc8(uint32_t r, uint8_t v) {
    uint32_t out;
    __asm__("crc32cb %w0, %w1, %w2" : "=r"(out) : "r"(r), "r"((uint32_t)v));
    return out;
}

__attribute__((target("+crc")))
static uint32_t hw_raw(uint32_t reg, const unsigned char *p, size_t n) {
    uint32_t r0 = reg;
    while (n && ((uintptr_t)p & 7)) {
        r0 = arm_crc8(r0, *p++);
        n--;
    }
    while (n >= 3 * LONG_LANE) {
        uint32_t r1 = 0, r2 = 0;
        const unsigned char *end = p + LONG_LANE;
        do {
            r0 = arm_crc64(r0, load_le64(p));
            r1 = arm_crc64(r1, load_le64(p + LONG_LANE));
            r2 = arm_crc64(r2, load_le64(p + 2 * LONG_LANE));
            p += 8;
        } while (p < end);
        r0 = shift(shift_long, r0) ^ r1;
        r0 = shift(shift_long, r0) ^ r2;
        p += 2 * LONG_LANE;
        n -= 3 * LONG_LANE;
    }
    while (n >= 8) {
        r0 = arm_crc64(r0, load_le64(p));
        p += 8;
        n -= 8;
    }
    while (n--) r0 = arm_crc8(r0, *p++);
    return r0;
}

static int hw_available(void) { return (getauxval(AT_HWCAP) & HWCAP_CRC32) != 0; }
#endif

/* ---- public ------------------------------------------------------------------- */

void kb_crc32c_init(void) {
    if (initialized) return;
    for (uint32_t b = 0; b < 256; b++) {
        uint32_t r = b;
        for (int k = 0; k < 8; k++) r = (r & 1) ? (r >> 1) ^ POLY : r >> 1;
        sw_table[0][b] = r;
    }
    for (uint32_t b = 0; b < 256; b++) {
        uint32_t r = sw_table[0][b];
        for (int t = 1; t < 8; t++) {
            r = sw_table[0][r & 0xff] ^ (r >> 8);
            sw_table[t][b] = r;
        }
    }
    build_shift_table(shift_long, LONG_LANE);
    build_shift_table(shift_short, SHORT_LANE);
    active_raw = sw_raw;
    active_name = "slicing-by-8";
#if defined(KB_X86)
    if (hw_available()) {
        active_raw = hw_raw;
        active_name = "sse4.2";
    }
#elif defined(KB_ARM)
    if (hw_available()) {
        active_raw = hw_raw;
        active_name = "armv8-crc";
    }
#endif
    initialized = 1;
}

uint32_t kb_crc32c(uint32_t crc, const void *buf, size_t len) {
    return ~active_raw(~crc, (const unsigned char *)buf, len);
}

uint32_t kb_crc32c_sw(uint32_t crc, const void *buf, size_t len) {
    return ~sw_raw(~crc, (const unsigned char *)buf, len);
}

int kb_crc32c_hw_available(void) {
#if defined(KB_X86) || defined(KB_ARM)
    return hw_available();
#else
    return 0;
#endif
}

uint32_t kb_crc32c_hw(uint32_t crc, const void *buf, size_t len) {
#if defined(KB_X86) || defined(KB_ARM)
    return ~hw_raw(~crc, (const unsigned char *)buf, len);
#else
    return kb_crc32c_sw(crc, buf, len);
#endif
}

const char *kb_crc32c_impl(void) { return active_name; }
