/* kernels_neon.c - AArch64 NEON kernels with the dotprod extension (SDOT,
 * Armv8.2+; chosen at run time from HWCAP_ASIMDDP, so the file builds for
 * plain armv8-a). SDOT multiplies signed by signed bytes, so w8 needs no
 * offset trick; w4 codes u = q + 8 (0..15) are valid signed bytes and
 * sum(q x) = sum(u x) - 8 * (group sum of x). Integer kernels reproduce
 * kernels_ref.c bit for bit; float epilogues follow the reference order.
 * CI runs the quant tests on them: `make neon-check` cross-builds
 * tests/test_quant.c for aarch64 and runs it under qemu-user (which reports
 * the dotprod HWCAP), comparing every primitive and gemm with the reference. */
#if defined(__aarch64__)

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("dotprod"))), apply_to = function)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC target("arch=armv8.2-a+dotprod")
#pragma GCC optimize("fp-contract=off")
#endif

#include "kernels.h"
#include "dsq_mem.h"
#include "kernels_scalar.h"

#include <arm_neon.h>
#include <math.h>
#include <string.h>

#define AI static inline __attribute__((always_inline))

/* SDOT. GCC's arm_neon.h declares vdotq_s32 under its own target pragma;
 * older clang only with -march=...+dotprod, hence the asm form. */
AI int32x4_t dot_s8(int32x4_t acc, int8x16_t a, int8x16_t b)
{
#if defined(__ARM_FEATURE_DOTPROD) || !defined(__clang__)
    return vdotq_s32(acc, a, b);
#else
    __asm__("sdot %0.4s, %1.16b, %2.16b" : "+w"(acc) : "w"(a), "w"(b));
    return acc;
#endif
}

/* ---- quantize-side primitives -------------------------------------------- */

static uint32_t n_absmax_bits(const float *x, int64_t n)
{
    const uint32x4_t mask = vdupq_n_u32(0x7fffffffu);
    uint32x4_t m0 = vdupq_n_u32(0), m1 = m0;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        m0 = vmaxq_u32(m0, vandq_u32(vld1q_u32((const uint32_t *)(const void *)(x + i)), mask));
        m1 = vmaxq_u32(m1, vandq_u32(vld1q_u32((const uint32_t *)(const void *)(x + i + 4)), mask));
    }
    uint32_t m = vmaxvq_u32(vmaxq_u32(m0, m1));
    for (; i < n; i++) {
        uint32_t b = dsq_f32_bits(x[i]) & 0x7fffffffu;
        if (b > m) m = b;
    }
    return m;
}

static void n_minmax(const float *x, int64_t n, float *mn, float *mx)
{
    float32x4_t lo = vdupq_n_f32(x[0]), hi = lo;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        float32x4_t a = vld1q_f32(x + i);
        lo = vminq_f32(lo, a);
        hi = vmaxq_f32(hi, a);
    }
    float a = vminvq_f32(lo), b = vmaxvq_f32(hi);
    for (; i < n; i++) { a = x[i] < a ? x[i] : a; b = x[i] > b ? x[i] : b; }
    *mn = a;
    *mx = b;
}

AI int32x4_t quant4(const float *x, float32x4_t vs, float32x4_t vlo, float32x4_t vhi, int32x4_t vadd)
{
    float32x4_t r = vrndnq_f32(vdivq_f32(vld1q_f32(x), vs));
    r = vminnmq_f32(vmaxnmq_f32(r, vlo), vhi);   /* maxNum(NaN, lo) = lo, as fmaxf */
    return vaddq_s32(vcvtq_s32_f32(r), vadd);
}

static void n_quant_i8(const float *x, int64_t n, float scale, int32_t add, int32_t lo, int32_t hi,
                       int8_t *q)
{
    const float32x4_t vs = vdupq_n_f32(scale);
    const float32x4_t vlo = vdupq_n_f32((float)(lo - add)), vhi = vdupq_n_f32((float)(hi - add));
    const int32x4_t vadd = vdupq_n_s32(add);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        int16x8_t a = vcombine_s16(vmovn_s32(quant4(x + i, vs, vlo, vhi, vadd)),
                                   vmovn_s32(quant4(x + i + 4, vs, vlo, vhi, vadd)));
        int16x8_t b = vcombine_s16(vmovn_s32(quant4(x + i + 8, vs, vlo, vhi, vadd)),
                                   vmovn_s32(quant4(x + i + 12, vs, vlo, vhi, vadd)));
        vst1q_s8(q + i, vcombine_s8(vmovn_s16(a), vmovn_s16(b)));
    }
    const float flo = (float)(lo - add), fhi = (float)(hi - add);
    for (; i < n; i++) {
        float r = rintf(x[i] / scale);
        r = fminf(fmaxf(r, flo), fhi);
        q[i] = (int8_t)((int32_t)r + add);
    }
}

static int32_t n_sum_i8(const int8_t *q, int64_t n)
{
    int32x4_t acc = vdupq_n_s32(0);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) acc = vpadalq_s16(acc, vpaddlq_s8(vld1q_s8(q + i)));
    int32_t s = vaddvq_s32(acc);
    for (; i < n; i++) s += q[i];
    return s;
}

static void n_f32_to_bf16(const float *x, int64_t n, uint16_t *out)
{
    const uint32x4_t absm = vdupq_n_u32(0x7fffffffu), inf = vdupq_n_u32(0x7f800000u);
    const uint32x4_t r7 = vdupq_n_u32(0x7fffu), one = vdupq_n_u32(1), qnan = vdupq_n_u32(0x40);
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        uint32x4_t u = vld1q_u32((const uint32_t *)(const void *)(x + i));
        uint32x4_t isnan = vcgtq_u32(vandq_u32(u, absm), inf);
        uint32x4_t r = vshrq_n_u32(vaddq_u32(u, vaddq_u32(r7, vandq_u32(vshrq_n_u32(u, 16), one))), 16);
        uint32x4_t nanv = vorrq_u32(vshrq_n_u32(u, 16), qnan);
        vst1_u16(out + i, vmovn_u32(vbslq_u32(isnan, nanv, r)));
    }
    for (; i < n; i++) out[i] = dsq_f32_to_bf16(x[i]);
}

/* ---- w8 gemm ------------------------------------------------------------- */

AI void w8_store(const dsq_qview *v, const dsq_actbuf *a, int64_t n, int64_t t, int32_t acc, float *y)
{
    float out;
    if (v->scheme->act == DSQ_ACT_INT8_STATIC) {
        uint32_t u = (uint32_t)acc - (uint32_t)v->act_offset * (uint32_t)v->rowsum[n];
        out = (float)(int32_t)u * (v->act_scale * v->scales[n]);
    } else {
        out = ((float)acc * v->scales[n]) * a->scale[t];
    }
    y[t * v->shape.rows + n] = out;
}

AI void w8_block(const dsq_qview *v, const dsq_actbuf *a, int64_t n, int64_t t0, const int R,
                 const int TT, float *y)
{
    const size_t ws = v->layout.row_bytes;
    const int64_t klen = (int64_t)ws, kpad = a->kpad;
    const int8_t *w = (const int8_t *)(v->w + (size_t)n * ws);
    const int8_t *x = a->q + t0 * kpad;
    int32x4_t acc[4][4];
    for (int r = 0; r < R; r++)
        for (int t = 0; t < TT; t++) acc[r][t] = vdupq_n_s32(0);
    for (int64_t k = 0; k < klen; k += 16) {
        int8x16_t wv[4];
        for (int r = 0; r < R; r++) wv[r] = vld1q_s8(w + (size_t)r * ws + k);
        for (int t = 0; t < TT; t++) {
            int8x16_t xv = vld1q_s8(x + t * kpad + k);
            for (int r = 0; r < R; r++) acc[r][t] = dot_s8(acc[r][t], wv[r], xv);
        }
    }
    for (int r = 0; r < R; r++)
        for (int t = 0; t < TT; t++) w8_store(v, a, n + r, t0 + t, vaddvq_s32(acc[r][t]), y);
}

static void n_gemm_w8(const dsq_qview *v, const dsq_actbuf *a, int64_t n0, int64_t n1, float *y)
{
    const int64_t T = a->T;
    int64_t n = n0;
    for (; n + 4 <= n1; n += 4) {
        int64_t t = 0;
        for (; t + 4 <= T; t += 4) w8_block(v, a, n, t, 4, 4, y);
        for (; t < T; t++) w8_block(v, a, n, t, 4, 1, y);
    }
    for (; n < n1; n++) {
        int64_t t = 0;
        for (; t + 4 <= T; t += 4) w8_block(v, a, n, t, 1, 4, y);
        for (; t < T; t++) w8_block(v, a, n, t, 1, 1, y);
    }
}

/* ---- w4 gemm ------------------------------------------------------------- */

AI void w4_block(const dsq_qview *v, const dsq_actbuf *a, int64_t n, int64_t t0, const int R,
                 const int TT, float *y)
{
    const int64_t ng = v->layout.ngroups, gs = v->layout.gsize, kpad = a->kpad, T = a->T;
    const size_t ws = v->layout.row_bytes;
    const uint8x16_t m4 = vdupq_n_u8(0x0f);
    const uint8_t *wr = v->w + (size_t)n * ws;
    float fsum[4][4];
    for (int r = 0; r < R; r++)
        for (int t = 0; t < TT; t++) fsum[r][t] = 0.0f;
    for (int64_t g = 0; g < ng; g++) {
        int64_t k0 = g * gs, k1 = g == ng - 1 ? kpad : k0 + gs;
        int32x4_t acc[4][4];
        for (int r = 0; r < R; r++)
            for (int t = 0; t < TT; t++) acc[r][t] = vdupq_n_s32(0);
        for (int64_t k = k0; k < k1; k += 64) {
            const int64_t boff = (k >> 7) * 64;
            const int hi = (k & 64) != 0;
            for (int j = 0; j < 4; j++) {
                int8x16_t c[4];
                for (int r = 0; r < R; r++) {
                    uint8x16_t b = vld1q_u8(wr + (size_t)r * ws + boff + 16 * j);
                    c[r] = vreinterpretq_s8_u8(hi ? vshrq_n_u8(b, 4) : vandq_u8(b, m4));
                }
                for (int t = 0; t < TT; t++) {
                    int8x16_t xv = vld1q_s8(a->q + (t0 + t) * kpad + k + 16 * j);
                    for (int r = 0; r < R; r++) acc[r][t] = dot_s8(acc[r][t], c[r], xv);
                }
            }
        }
        for (int r = 0; r < R; r++) {
            const float s = v->scales[(n + r) * ng + g];
            for (int t = 0; t < TT; t++) {
                uint32_t u = (uint32_t)vaddvq_s32(acc[r][t]) - 8u * (uint32_t)a->gsum[g * T + t0 + t];
                fsum[r][t] = fmaf((float)(int32_t)u, s, fsum[r][t]);
            }
        }
    }
    for (int r = 0; r < R; r++)
        for (int t = 0; t < TT; t++)
            y[(t0 + t) * v->shape.rows + n + r] = fsum[r][t] * a->scale[t0 + t];
}

static void n_gemm_w4(const dsq_qview *v, const dsq_actbuf *a, int64_t n0, int64_t n1, float *y)
{
    const int64_t T = a->T;
    int64_t n = n0;
    for (; n + 4 <= n1; n += 4) {
        int64_t t = 0;
        for (; t + 4 <= T; t += 4) w4_block(v, a, n, t, 4, 4, y);
        for (; t < T; t++) w4_block(v, a, n, t, 4, 1, y);
    }
    for (; n < n1; n++) {
        int64_t t = 0;
        for (; t + 4 <= T; t += 4) w4_block(v, a, n, t, 1, 4, y);
        for (; t < T; t++) w4_block(v, a, n, t, 1, 1, y);
    }
}

/* ---- float schemes ------------------------------------------------------- */

/* 16 weights of a row from column k (awq: k..k+15 inside one 64-column half
 * block and one group; f32/bf16: any k), as 4 vectors. */
AI void load16(const dsq_qview *v, const uint8_t *row, int64_t n, int64_t k, float32x4_t out[4])
{
    if (v->scheme->id == DSQ_SCHEME_F32) {
        const float *f = (const float *)(const void *)row + k;
        for (int i = 0; i < 4; i++) out[i] = vld1q_f32(f + 4 * i);
    } else if (v->scheme->id == DSQ_SCHEME_BF16) {
        const uint16_t *h = (const uint16_t *)(const void *)row + k;
        for (int i = 0; i < 2; i++) {
            uint16x8_t b = vld1q_u16(h + 8 * i);
            out[2 * i] = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(b), 16));
            out[2 * i + 1] = vreinterpretq_f32_u32(vshll_n_u16(vget_high_u16(b), 16));
        }
    } else {
        size_t gi = (size_t)n * (size_t)v->layout.ngroups + (size_t)(k / v->layout.gsize);
        uint8x16_t b = vld1q_u8(row + (k >> 7) * 64 + (k & 63));
        uint8x16_t c = (k & 64) ? vshrq_n_u8(b, 4) : vandq_u8(b, vdupq_n_u8(0x0f));
        int8x16_t d = vsubq_s8(vreinterpretq_s8_u8(c), vdupq_n_s8((int8_t)v->zeros[gi]));
        int16x8_t lo = vmovl_s8(vget_low_s8(d)), hi = vmovl_s8(vget_high_s8(d));
        const float s = v->scales[gi];
        out[0] = vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo))), s);
        out[1] = vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_high_s16(lo))), s);
        out[2] = vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi))), s);
        out[3] = vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_high_s16(hi))), s);
    }
}

static void n_gemv_f(const dsq_qview *v, const float *x, int64_t T, int64_t n0, int64_t n1, float *y)
{
    const int64_t rows = v->shape.rows, cols = v->shape.cols;
    const int awq = v->scheme->id == DSQ_SCHEME_AWQ_W4A16;
    for (int64_t n = n0; n < n1; n++) {
        const uint8_t *row = v->w + (size_t)n * v->layout.row_bytes;
        /* awq: vector part stops at the last full 16 inside the row */
        for (int64_t t = 0; t < T; t++) {
            const float *xr = x + t * cols;
            float32x4_t acc[4] = { vdupq_n_f32(0), vdupq_n_f32(0), vdupq_n_f32(0), vdupq_n_f32(0) };
            int64_t k = 0;
            for (; k + 16 <= cols; k += 16) {
                if (awq && (k / v->layout.gsize) != ((k + 15) / v->layout.gsize)) break;
                float32x4_t w[4];
                load16(v, row, n, k, w);
                for (int i = 0; i < 4; i++) acc[i] = vfmaq_f32(acc[i], w[i], vld1q_f32(xr + k + 4 * i));
            }
            float s = vaddvq_f32(vaddq_f32(vaddq_f32(acc[0], acc[1]), vaddq_f32(acc[2], acc[3])));
            for (; k < cols; k++) s += dsq_deq_scalar(v, row, n, k) * xr[k];
            y[t * rows + n] = s;
        }
    }
}

static void n_dequant_tile(const dsq_qview *v, int64_t n0, int64_t n1, int64_t k0, int64_t k1,
                           float *out, int64_t ldo)
{
    const int flt = v->scheme->id == DSQ_SCHEME_F32 || v->scheme->id == DSQ_SCHEME_BF16 ||
                    v->scheme->id == DSQ_SCHEME_AWQ_W4A16;
    for (int64_t n = n0; n < n1; n++) {
        const uint8_t *row = v->w + (size_t)n * v->layout.row_bytes;
        float *o = out + (n - n0) * ldo - k0;
        int64_t k = k0;
        if (flt && (v->scheme->id != DSQ_SCHEME_AWQ_W4A16 || (k & 15) == 0))
            for (; k + 16 <= k1; k += 16) {
                float32x4_t w[4];
                load16(v, row, n, k, w);
                for (int i = 0; i < 4; i++) vst1q_f32(o + k + 4 * i, w[i]);
            }
        /* int schemes (MLA's absorbed kv_b reads its rows through here at
         * every decode step): (q or u - 8) * s, 16 columns at a time */
        const int w4 = v->scheme->id == DSQ_SCHEME_W4A8;
        const int w8 = v->scheme->id == DSQ_SCHEME_W8A8_DYNAMIC || v->scheme->id == DSQ_SCHEME_W8A8;
        if (w8 || (w4 && (k & 15) == 0))
            for (; k + 16 <= k1; k += 16) {
                int8x16_t d;
                float s;
                if (w4) {
                    uint8x16_t b = vld1q_u8(row + (k >> 7) * 64 + (k & 63));
                    uint8x16_t c = (k & 64) ? vshrq_n_u8(b, 4) : vandq_u8(b, vdupq_n_u8(0x0f));
                    d = vsubq_s8(vreinterpretq_s8_u8(c), vdupq_n_s8(8));
                    s = v->scales[(size_t)n * (size_t)v->layout.ngroups + (size_t)(k / v->layout.gsize)];
                } else {
                    d = vld1q_s8((const int8_t *)row + k);
                    s = v->scales[n];
                }
                int16x8_t lo = vmovl_s8(vget_low_s8(d)), hi = vmovl_s8(vget_high_s8(d));
                vst1q_f32(o + k, vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo))), s));
                vst1q_f32(o + k + 4, vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_high_s16(lo))), s));
                vst1q_f32(o + k + 8, vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi))), s));
                vst1q_f32(o + k + 12, vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_high_s16(hi))), s));
            }
        for (; k < k1; k++) o[k] = dsq_deq_scalar(v, row, n, k);
    }
}

/* bf16 prefill: blocks of 8 rows (about 112 KB at 7168 columns, cache
 * resident) through gemv_f, widening the weights on the fly; each block is
 * read from memory once for all tokens. */
static void n_gemm_bf16(const dsq_qview *v, const dsq_bfact *a, int64_t n0, int64_t n1, float *y)
{
    for (int64_t n = n0; n < n1; n += 8) n_gemv_f(v, a->x, a->T, n, n + 8 < n1 ? n + 8 : n1, y);
}

const dsq_kernels dsq_kernels_neon_impl = {
    .name = "neon",
    .absmax_bits = n_absmax_bits,
    .minmax = n_minmax,
    .quant_i8 = n_quant_i8,
    .qstats = dsq_qstats_scalar,   /* no vector versions yet */
    .qtrial = dsq_qtrial_scalar,
    .qtrials = dsq_qtrials_scalar,
    .sum_i8 = n_sum_i8,
    .f32_to_bf16 = n_f32_to_bf16,
    .split_bf16 = dsq_split_bf16_scalar,
    .gemm_bf16 = n_gemm_bf16,
    .gemm_w8 = n_gemm_w8,
    .gemm_w4 = n_gemm_w4,
    .gemv_f = n_gemv_f,
    .dequant_tile = n_dequant_tile,
};

#if defined(__clang__)
#pragma clang attribute pop
#endif

#else
typedef int dsq_kernels_neon_unused; /* ISO C forbids an empty translation unit */
#endif /* __aarch64__ */
