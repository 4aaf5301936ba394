/* The C helpers of _records.pyx: record objects made without zeroing, and the column
   writer's varints, copies and values. */
#ifndef FKW_RECORDS_H
#define FKW_RECORDS_H

#include <Python.h>
#include <stdint.h>
#include <string.h>

#define fkw_gc_new(tp) ((PyObject*)PyObject_GC_New(PyObject, (tp)))

#if defined(__GNUC__) || defined(__clang__)
#define FKW_ALWAYS_INLINE static inline __attribute__((always_inline))
#else
#define FKW_ALWAYS_INLINE static inline
#endif

/* A checked binary column: its values' offsets ascend within its data. */
typedef struct {
    const unsigned char* data;
    const int32_t* offs;
    const uint8_t* nulls;
    Py_ssize_t span;     /* from the first value's start to the last one's end */
    Py_ssize_t longest;  /* the longest value's bytes */
    int width;           /* the bytes of that value's length: the most any takes */
} fkw_column;

FKW_ALWAYS_INLINE unsigned char* fkw_put_uvarint(unsigned char* o, uint64_t v) {
    while (v > 0x7F) {
        *o++ = (unsigned char)((v & 0x7F) | 0x80);
        v >>= 7;
    }
    *o = (unsigned char)v;
    return o + 1;
}

/* memcpy, with copies up to 128 bytes (keys, values, header fields) done in place:
   a call to memcpy costs more than copying them (read_columns: a fifth faster). */
FKW_ALWAYS_INLINE void fkw_copy(unsigned char* d, const unsigned char* s, size_t n) {
    uint64_t a, b;
    uint32_t c, e;
    size_t k;
    if (n > 128) {
        memcpy(d, s, n);
    } else if (n > 16) {  /* 16-byte moves, the last one overlapping */
        for (k = 0; k + 16 < n; k += 16) {
            memcpy(&a, s + k, 8); memcpy(&b, s + k + 8, 8);
            memcpy(d + k, &a, 8); memcpy(d + k + 8, &b, 8);
        }
        memcpy(&a, s + n - 16, 8); memcpy(&b, s + n - 8, 8);
        memcpy(d + n - 16, &a, 8); memcpy(d + n - 8, &b, 8);
    } else if (n >= 8) {  /* two 8-byte moves that may overlap */
        memcpy(&a, s, 8); memcpy(&b, s + n - 8, 8);
        memcpy(d, &a, 8); memcpy(d + n - 8, &b, 8);
    } else if (n >= 4) {
        memcpy(&c, s, 4); memcpy(&e, s + n - 4, 4);
        memcpy(d, &c, 4); memcpy(d + n - 4, &e, 4);
    } else {
        while (n--) *d++ = *s++;
    }
}

/* Value i of a checked column: its length (zigzag) and bytes, or -1 for null. */
FKW_ALWAYS_INLINE unsigned char* fkw_put_value(unsigned char* o, const fkw_column* b,
                                               Py_ssize_t i) {
    size_t n = (size_t)(b->offs[i + 1] - b->offs[i]);
    if (b->nulls[i]) {
        *o = 1;
        return o + 1;
    }
    o = fkw_put_uvarint(o, (uint64_t)n << 1);
    fkw_copy(o, b->data + b->offs[i], n);
    return o + n;
}

/* The bytes of an unsigned varint: one per started 7 bits, without a loop. */
static inline int fkw_uvarint_size(unsigned long long v) {
#if defined(__GNUC__) || defined(__clang__)
    return (int)(((63 - __builtin_clzll(v | 1)) * 9 + 73) >> 6);
#else
    int n = 1;
    while (v > 0x7F) { v >>= 7; n++; }
    return n;
#endif
}

#endif
