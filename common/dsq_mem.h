/* dsq_mem.h - little-endian loads/stores, half-precision conversions and
 * overflow-checked size arithmetic. Header-only: these sit on hot paths. */
#ifndef DSQ_MEM_H
#define DSQ_MEM_H

#include <stdint.h>
#include <stddef.h>
#include <string.h>
#include <math.h>

static inline uint16_t dsq_load_u16le(const void *p) { uint16_t v; memcpy(&v, p, 2); return v; }
static inline uint32_t dsq_load_u32le(const void *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static inline uint64_t dsq_load_u64le(const void *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static inline void dsq_store_u32le(void *p, uint32_t v) { memcpy(p, &v, 4); }
static inline void dsq_store_u64le(void *p, uint64_t v) { memcpy(p, &v, 8); }
/* (x86-64 and aarch64 are both little-endian; the build refuses others.) */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "dsq assumes a little-endian host"
#endif

static inline float dsq_bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint32_t dsq_f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

static inline float dsq_bf16_to_f32(uint16_t h) { return dsq_bits_f32((uint32_t)h << 16); }

/* Round to nearest even, as torch's .to(bfloat16); NaN stays a quiet NaN. */
static inline uint16_t dsq_f32_to_bf16(float f)
{
    uint32_t u = dsq_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float dsq_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ffu;
    if (exp == 0) {
        /* zero or subnormal: value = man * 2^-24 */
        float v = (float)man * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    if (exp == 31) return dsq_bits_f32(sign | 0x7f800000u | (man << 13));
    return dsq_bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

/* Round to nearest even; overflow gives Inf. */
static inline uint16_t dsq_f32_to_f16(float f)
{
    uint32_t u = dsq_f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return sign | 0x7e00u;
    if (a >= 0x477ff000u) return sign | 0x7c00u;      /* >= 65520 rounds to inf */
    if (a < 0x38800000u) {                              /* subnormal or zero in f16 */
        float v = dsq_bits_f32(a) * 16777216.0f;        /* scale by 2^24 */
        return sign | (uint16_t)lrintf(v);
    }
    uint32_t r = a + 0x0fffu + ((a >> 13) & 1u);
    return sign | (uint16_t)((r - 0x38000000u) >> 13);
}

/* Checked arithmetic: return 0 on success, -1 on overflow. */
static inline int dsq_mul_size(size_t a, size_t b, size_t *out)
{
    return __builtin_mul_overflow(a, b, out) ? -1 : 0;
}
static inline int dsq_add_size(size_t a, size_t b, size_t *out)
{
    return __builtin_add_overflow(a, b, out) ? -1 : 0;
}
static inline int dsq_mul_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    return __builtin_mul_overflow(a, b, out) ? -1 : 0;
}

static inline size_t dsq_align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

/* A transparent huge page (x86-64 and aarch64 with 4 KiB base pages):
 * the alignment dsq_aligned_alloc and dsq_map_open give big buffers. */
#define DSQ_HUGE_PAGE ((size_t)2 << 20)

/* 64-byte aligned allocation for SIMD buffers (2 MiB aligned and advised
 * for huge pages from 4 MiB on: dsq_thread.c); free with free(). */
void *dsq_aligned_alloc(size_t size);

#endif
