/* Java's Utils.murmur2, the hash Kafka's default partitioners use for keys. */
#ifndef FASTKWIRE_MURMUR2_H
#define FASTKWIRE_MURMUR2_H
#include <Python.h>
#include <stdint.h>

static inline uint32_t fk_murmur2(const unsigned char *p, Py_ssize_t n) {
    const uint32_t m = 0x5bd1e995;
    uint32_t h = (uint32_t)0x9747b28c ^ (uint32_t)n;
    Py_ssize_t i, n4 = n / 4;
    for (i = 0; i < n4; i++) {
        uint32_t k = (uint32_t)p[4 * i] | ((uint32_t)p[4 * i + 1] << 8) |
                     ((uint32_t)p[4 * i + 2] << 16) | ((uint32_t)p[4 * i + 3] << 24);
        k *= m;
        k ^= k >> 24;
        k *= m;
        h *= m;
        h ^= k;
    }
    i = n & ~(Py_ssize_t)3;
    switch (n % 4) {
    case 3:
        h ^= (uint32_t)p[i + 2] << 16;
        /* fall through */
    case 2:
        h ^= (uint32_t)p[i + 1] << 8;
        /* fall through */
    case 1:
        h ^= p[i];
        h *= m;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    return h;
}
#endif
