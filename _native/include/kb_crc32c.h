/* CRC-32C (Castagnoli): hardware when the CPU has it, slicing-by-8 otherwise.
 * See kb_crc32c.c. Call kb_crc32c_init() once before anything else. */
#ifndef KB_CRC32C_H
#define KB_CRC32C_H
#include <stddef.h>
#include <stdint.h>

void kb_crc32c_init(void);
/* Extends `crc` (the CRC-32C of earlier bytes, 0 to start) over buf[0:len). */
uint32_t kb_crc32c(uint32_t crc, const void *buf, size_t len);
uint32_t kb_crc32c_sw(uint32_t crc, const void *buf, size_t len);
uint32_t kb_crc32c_hw(uint32_t crc, const void *buf, size_t len);
int kb_crc32c_hw_available(void);
const char *kb_crc32c_impl(void);
#endif
