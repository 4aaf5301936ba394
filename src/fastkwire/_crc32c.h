/* CRC32C (Castagnoli), the checksum of Kafka record batches.
 *
 * x86-64 with SSE4.2 (checked at run time) uses the CPU's crc32 instruction, 8 bytes at
 * a time; ARMv8 builds with the CRC extension use theirs; everything else a
 * slicing-by-8 table (8 lookups per 8 bytes). All return the same values. */
#ifndef FASTKWIRE_CRC32C_H
#define FASTKWIRE_CRC32C_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

static uint32_t fkw_crc_table[8][256];

static void fkw_crc32c_init(void) {
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        fkw_crc_table[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++)
        for (int t = 1; t < 8; t++)
            fkw_crc_table[t][n] = (fkw_crc_table[t - 1][n] >> 8) ^ fkw_crc_table[0][fkw_crc_table[t - 1][n] & 0xFF];
}

static uint32_t fkw_crc32c_table(uint32_t crc, const unsigned char *p, size_t n) {
    crc = ~crc;
    while (n >= 8) {
        uint32_t lo = crc ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
        crc = fkw_crc_table[7][lo & 0xFF] ^ fkw_crc_table[6][(lo >> 8) & 0xFF] ^
              fkw_crc_table[5][(lo >> 16) & 0xFF] ^ fkw_crc_table[4][lo >> 24] ^
              fkw_crc_table[3][p[4]] ^ fkw_crc_table[2][p[5]] ^
              fkw_crc_table[1][p[6]] ^ fkw_crc_table[0][p[7]];
        p += 8;
        n -= 8;
    }
    while (n--)
        crc = fkw_crc_table[0][(crc ^ *p++) & 0xFF] ^ (crc >> 8);
    return ~crc;
}

#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
#include <nmmintrin.h>
#define FKW_CRC_HW 1
__attribute__((target("sse4.2")))
static uint32_t fkw_crc32c_hw(uint32_t crc, const unsigned char *p, size_t n) {
    uint64_t c = ~crc;
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c = _mm_crc32_u64(c, v);
        p += 8;
        n -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    while (n--)
        c32 = _mm_crc32_u8(c32, *p++);
    return ~c32;
}
/* Three lanes at once: the crc32 instruction takes 3 cycles but can start one every
 * cycle, so three independent streams run about three times as fast as one. The lanes'
 * registers are joined by shifting (see fkw_crc_shift). */
__attribute__((target("sse4.2")))
static void fkw_crc32c_hw3(uint32_t *a, uint32_t *b, uint32_t *c, const unsigned char *p, size_t lane) {
    uint64_t ca = *a, cb = *b, cc = *c;
    for (size_t i = 0; i < lane; i += 8) {
        uint64_t va, vb, vc;
        memcpy(&va, p + i, 8);
        memcpy(&vb, p + lane + i, 8);
        memcpy(&vc, p + 2 * lane + i, 8);
        ca = _mm_crc32_u64(ca, va);
        cb = _mm_crc32_u64(cb, vb);
        cc = _mm_crc32_u64(cc, vc);
    }
    *a = (uint32_t)ca; *b = (uint32_t)cb; *c = (uint32_t)cc;
}
#define FKW_CRC_HW3 1
static int fkw_crc_has_hw(void) { return __builtin_cpu_supports("sse4.2"); }
#elif defined(_MSC_VER) && defined(_M_X64)
#include <intrin.h>
#include <nmmintrin.h>
#define FKW_CRC_HW 1
static uint32_t fkw_crc32c_hw(uint32_t crc, const unsigned char *p, size_t n) {
    uint64_t c = ~crc;
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c = _mm_crc32_u64(c, v);
        p += 8;
        n -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    while (n--)
        c32 = _mm_crc32_u8(c32, *p++);
    return ~c32;
}
static int fkw_crc_has_hw(void) {
    int info[4];
    __cpuid(info, 1);
    return (info[2] >> 20) & 1;  /* ECX bit 20: SSE4.2 */
}
#elif defined(__aarch64__) && defined(__ARM_FEATURE_CRC32)
#include <arm_acle.h>
#define FKW_CRC_HW 1
static uint32_t fkw_crc32c_hw(uint32_t crc, const unsigned char *p, size_t n) {
    uint32_t c = ~crc;
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c = __crc32cd(c, v);
        p += 8;
        n -= 8;
    }
    while (n--)
        c = __crc32cb(c, *p++);
    return ~c;
}
static int fkw_crc_has_hw(void) { return 1; }
#else
#define FKW_CRC_HW 0
static uint32_t fkw_crc32c_hw(uint32_t crc, const unsigned char *p, size_t n) {
    return fkw_crc32c_table(crc, p, n);
}
static int fkw_crc_has_hw(void) { return 0; }
#endif

static int fkw_crc_hw_on = -1;

#ifdef FKW_CRC_HW3
#define FKW_LANE 8192
/* fkw_shift[k][b]: the raw register (b << 8k) after FKW_LANE zero bytes. The register
 * update is linear, so any register after those zeros is four lookups. */
static uint32_t fkw_shift[4][256];

static uint32_t fkw_raw_zeros(uint32_t r, size_t n) {
    while (n--)
        r = fkw_crc_table[0][r & 0xFF] ^ (r >> 8);
    return r;
}

static void fkw_shift_init(void) {
    uint32_t basis[32];
    for (int i = 0; i < 32; i++)
        basis[i] = fkw_raw_zeros((uint32_t)1 << i, FKW_LANE);
    for (int k = 0; k < 4; k++)
        for (int b = 0; b < 256; b++) {
            uint32_t v = 0;
            for (int bit = 0; bit < 8; bit++)
                if (b & (1 << bit))
                    v ^= basis[8 * k + bit];
            fkw_shift[k][b] = v;
        }
}

static inline uint32_t fkw_crc_shift(uint32_t r) {
    return fkw_shift[0][r & 0xFF] ^ fkw_shift[1][(r >> 8) & 0xFF] ^
           fkw_shift[2][(r >> 16) & 0xFF] ^ fkw_shift[3][r >> 24];
}

static uint32_t fkw_crc32c_hw_lanes(uint32_t crc, const unsigned char *p, size_t n) {
    uint32_t r = ~crc;
    while (n >= 3 * FKW_LANE) {
        uint32_t b = 0, c = 0;
        fkw_crc32c_hw3(&r, &b, &c, p, FKW_LANE);
        r = fkw_crc_shift(fkw_crc_shift(r) ^ b) ^ c;
        p += 3 * FKW_LANE;
        n -= 3 * FKW_LANE;
    }
    return fkw_crc32c_hw(~r, p, n);
}
#endif

/* Call once (module init) before fkw_crc32c. */
static void fkw_crc32c_setup(void) {
    fkw_crc32c_init();
    fkw_crc_hw_on = FKW_CRC_HW && fkw_crc_has_hw();
#ifdef FKW_CRC_HW3
    fkw_shift_init();
#endif
}

static uint32_t fkw_crc32c(uint32_t crc, const unsigned char *p, size_t n) {
    if (!fkw_crc_hw_on)
        return fkw_crc32c_table(crc, p, n);
#ifdef FKW_CRC_HW3
    return fkw_crc32c_hw_lanes(crc, p, n);
#else
    return fkw_crc32c_hw(crc, p, n);
#endif
}

#endif
