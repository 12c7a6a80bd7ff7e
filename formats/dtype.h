/* dtype.h - the safetensors dtype table and 8-bit float decoding.
 *
 * enum dsq_dtype lists every dtype name the safetensors format defines
 * (huggingface/safetensors src/tensor.rs `enum Dtype`), in the same order,
 * which the format documents as "increasing alignment order". The writer
 * relies on that order: safetensors prepare() sorts tensors by descending
 * dtype then name, i.e. by descending enum value here.
 *
 * Values are pinned (they may be stored in dsq files); never renumber.
 * 0 is DSQ_DTYPE_INVALID so a zeroed struct never looks like a real dtype. */
#ifndef DSQ_DTYPE_H
#define DSQ_DTYPE_H

#include <stddef.h>
#include <stdint.h>

enum dsq_dtype {
    DSQ_DTYPE_INVALID     = 0,
    DSQ_DTYPE_BOOL        = 1,
    DSQ_DTYPE_F4          = 2,  /* e2m1, two per byte */
    DSQ_DTYPE_F6_E2M3     = 3,
    DSQ_DTYPE_F6_E3M2     = 4,
    DSQ_DTYPE_U8          = 5,
    DSQ_DTYPE_I8          = 6,
    DSQ_DTYPE_F8_E5M2     = 7,
    DSQ_DTYPE_F8_E4M3     = 8,  /* torch.float8_e4m3fn: no inf, max 448 */
    DSQ_DTYPE_F8_E8M0     = 9,  /* exponent only (ue8m0 scales) */
    DSQ_DTYPE_F8_E4M3FNUZ = 10,
    DSQ_DTYPE_F8_E5M2FNUZ = 11,
    DSQ_DTYPE_I16         = 12,
    DSQ_DTYPE_U16         = 13,
    DSQ_DTYPE_F16         = 14,
    DSQ_DTYPE_BF16        = 15,
    DSQ_DTYPE_I32         = 16,
    DSQ_DTYPE_U32         = 17,
    DSQ_DTYPE_F32         = 18,
    DSQ_DTYPE_C64         = 19,
    DSQ_DTYPE_F64         = 20,
    DSQ_DTYPE_I64         = 21,
    DSQ_DTYPE_U64         = 22,
    DSQ_DTYPE_COUNT       = 23  /* sentinel: one past the last valid value */
};

/* Exact, case-sensitive safetensors name ("BF16") -> dtype;
 * DSQ_DTYPE_INVALID for anything else (including NULL). */
enum dsq_dtype dsq_dtype_from_name(const char *name);
/* Same for a name that is not NUL-terminated. */
enum dsq_dtype dsq_dtype_from_name_n(const char *name, size_t len);
/* Safetensors name of a dtype; "INVALID" for values outside the enum. */
const char *dsq_dtype_name(enum dsq_dtype t);
/* Bits per element (4, 6, 8, 16, 32, 64); 0 for an invalid value. */
unsigned dsq_dtype_bits(enum dsq_dtype t);
/* 1 for valid enum values. */
int dsq_dtype_valid(enum dsq_dtype t);
/* 1 for the 8-bit float dtypes (F8_*), 0 otherwise. */
int dsq_dtype_is_fp8(enum dsq_dtype t);
/* 1 if dsq_st_read_rows_f32 can convert this dtype to float. */
int dsq_dtype_to_f32_supported(enum dsq_dtype t);

/* ---- 8-bit floats (decoding via 256-entry constant tables) ----
 * e4m3fn (OCP FP8, torch.float8_e4m3fn): bias 7, no infinities,
 *   0x7f/0xff are NaN, max finite 448, min subnormal 2^-9.
 * e5m2 (torch.float8_e5m2): bias 15, IEEE-like with inf and NaN, max 57344.
 * e8m0 (ue8m0 scale): 2^(e-127), 0xff is NaN. */
extern const float dsq_fp8_e4m3_table[256];
extern const float dsq_fp8_e5m2_table[256];

static inline float dsq_fp8_e4m3_to_f32(uint8_t x) { return dsq_fp8_e4m3_table[x]; }
static inline float dsq_fp8_e5m2_to_f32(uint8_t x) { return dsq_fp8_e5m2_table[x]; }
float dsq_fp8_e8m0_to_f32(uint8_t x);

/* float -> e4m3fn, round to nearest even, saturating to +-448 (as
 * torch's .to(float8_e4m3fn) after clamping); NaN -> 0x7f. Makes test
 * data, and serves FP8 activation emulation. */
uint8_t dsq_f32_to_fp8_e4m3(float f);
/* float -> e5m2, round to nearest even; overflow gives inf; NaN -> 0x7f. */
uint8_t dsq_f32_to_fp8_e5m2(float f);

#endif
