/* dtype.c - safetensors dtype names/sizes and 8-bit float conversions.
 * The fp8 tables were generated from the format definitions (bias 7 / 15,
 * subnormals at exponent 0) and are checked bit-exactly against a formula
 * in tests/test_safetensors.c. */
#include "dtype.h"

#include <math.h>
#include <string.h>

static const struct {
    const char *name;
    unsigned bits;
} dtype_info[DSQ_DTYPE_COUNT] = {
    [DSQ_DTYPE_INVALID]     = { "INVALID", 0 },
    [DSQ_DTYPE_BOOL]        = { "BOOL", 8 },
    [DSQ_DTYPE_F4]          = { "F4", 4 },
    [DSQ_DTYPE_F6_E2M3]     = { "F6_E2M3", 6 },
    [DSQ_DTYPE_F6_E3M2]     = { "F6_E3M2", 6 },
    [DSQ_DTYPE_U8]          = { "U8", 8 },
    [DSQ_DTYPE_I8]          = { "I8", 8 },
    [DSQ_DTYPE_F8_E5M2]     = { "F8_E5M2", 8 },
    [DSQ_DTYPE_F8_E4M3]     = { "F8_E4M3", 8 },
    [DSQ_DTYPE_F8_E8M0]     = { "F8_E8M0", 8 },
    [DSQ_DTYPE_F8_E4M3FNUZ] = { "F8_E4M3FNUZ", 8 },
    [DSQ_DTYPE_F8_E5M2FNUZ] = { "F8_E5M2FNUZ", 8 },
    [DSQ_DTYPE_I16]         = { "I16", 16 },
    [DSQ_DTYPE_U16]         = { "U16", 16 },
    [DSQ_DTYPE_F16]         = { "F16", 16 },
    [DSQ_DTYPE_BF16]        = { "BF16", 16 },
    [DSQ_DTYPE_I32]         = { "I32", 32 },
    [DSQ_DTYPE_U32]         = { "U32", 32 },
    [DSQ_DTYPE_F32]         = { "F32", 32 },
    [DSQ_DTYPE_C64]         = { "C64", 64 },
    [DSQ_DTYPE_F64]         = { "F64", 64 },
    [DSQ_DTYPE_I64]         = { "I64", 64 },
    [DSQ_DTYPE_U64]         = { "U64", 64 },
};

int dsq_dtype_valid(enum dsq_dtype t)
{
    return (int)t > 0 && (int)t < DSQ_DTYPE_COUNT;
}

enum dsq_dtype dsq_dtype_from_name_n(const char *name, size_t len)
{
    if (!name) return DSQ_DTYPE_INVALID;
    for (int i = 1; i < DSQ_DTYPE_COUNT; i++) {
        const char *n = dtype_info[i].name;
        if (strlen(n) == len && memcmp(n, name, len) == 0) return (enum dsq_dtype)i;
    }
    return DSQ_DTYPE_INVALID;
}

enum dsq_dtype dsq_dtype_from_name(const char *name)
{
    return name ? dsq_dtype_from_name_n(name, strlen(name)) : DSQ_DTYPE_INVALID;
}

const char *dsq_dtype_name(enum dsq_dtype t)
{
    return dsq_dtype_valid(t) ? dtype_info[t].name : "INVALID";
}

unsigned dsq_dtype_bits(enum dsq_dtype t)
{
    return dsq_dtype_valid(t) ? dtype_info[t].bits : 0;
}

int dsq_dtype_is_fp8(enum dsq_dtype t)
{
    return t == DSQ_DTYPE_F8_E5M2 || t == DSQ_DTYPE_F8_E4M3 || t == DSQ_DTYPE_F8_E8M0 ||
           t == DSQ_DTYPE_F8_E4M3FNUZ || t == DSQ_DTYPE_F8_E5M2FNUZ;
}

int dsq_dtype_to_f32_supported(enum dsq_dtype t)
{
    switch (t) {
    case DSQ_DTYPE_BOOL: case DSQ_DTYPE_U8: case DSQ_DTYPE_I8:
    case DSQ_DTYPE_F8_E5M2: case DSQ_DTYPE_F8_E4M3: case DSQ_DTYPE_F8_E8M0:
    case DSQ_DTYPE_I16: case DSQ_DTYPE_U16: case DSQ_DTYPE_F16: case DSQ_DTYPE_BF16:
    case DSQ_DTYPE_I32: case DSQ_DTYPE_U32: case DSQ_DTYPE_F32:
    case DSQ_DTYPE_F64: case DSQ_DTYPE_I64: case DSQ_DTYPE_U64:
        return 1;
    default:
        return 0;
    }
}

float dsq_fp8_e8m0_to_f32(uint8_t x)
{
    if (x == 0xff) return NAN;
    if (x == 0) return 0x1p-127f;      /* a float subnormal, still exact */
    uint32_t u = (uint32_t)x << 23;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Shared float -> small float rounding: mbits mantissa bits, bias, and the
 * largest finite code (without sign). Values are exact powers-of-two
 * rescalings, so rintf (round half to even in the default mode) decides. */
static unsigned fp8_round(float a, int mbits, int bias, int *exp_out)
{
    int e;
    frexpf(a, &e);                     /* a = f * 2^e, f in [0.5, 1) */
    e -= 1;                            /* a = g * 2^e, g in [1, 2) */
    int emin = 1 - bias;
    if (e < emin) {                    /* subnormal: step 2^(emin - mbits) */
        float q = rintf(ldexpf(a, mbits - emin));
        *exp_out = 0;
        return (unsigned)q;            /* q == 2^mbits encodes the min normal */
    }
    float m = rintf((ldexpf(a, -e) - 1.0f) * (float)(1 << mbits));
    if (m >= (float)(1 << mbits)) { m = 0; e += 1; }
    *exp_out = e + bias;
    return ((unsigned)(e + bias) << mbits) | (unsigned)m;
}

uint8_t dsq_f32_to_fp8_e4m3(float f)
{
    if (isnan(f)) return 0x7f;
    uint8_t sign = signbit(f) ? 0x80 : 0;
    float a = fabsf(f);
    if (a >= 448.0f) return sign | 0x7e;
    if (a == 0.0f) return sign;
    int ex;
    unsigned code = fp8_round(a, 3, 7, &ex);
    if (code > 0x7e) code = 0x7e;
    return sign | (uint8_t)code;
}

uint8_t dsq_f32_to_fp8_e5m2(float f)
{
    if (isnan(f)) return 0x7f;
    uint8_t sign = signbit(f) ? 0x80 : 0;
    float a = fabsf(f);
    if (isinf(a)) return sign | 0x7c;
    if (a == 0.0f) return sign;
    int ex;
    unsigned code = fp8_round(a, 2, 15, &ex);
    if (code >= 0x7c) code = 0x7c;     /* rounded past 57344: inf */
    return sign | (uint8_t)code;
}

/* e4m3fn: bias 7, 0x7f/0xff NaN, no inf */
const float dsq_fp8_e4m3_table[256] = {
    0.0f, 0.001953125f, 0.00390625f, 0.005859375f, 0.0078125f, 0.009765625f, 0.01171875f, 0.013671875f,
    0.015625f, 0.017578125f, 0.01953125f, 0.021484375f, 0.0234375f, 0.025390625f, 0.02734375f, 0.029296875f,
    0.03125f, 0.03515625f, 0.0390625f, 0.04296875f, 0.046875f, 0.05078125f, 0.0546875f, 0.05859375f,
    0.0625f, 0.0703125f, 0.078125f, 0.0859375f, 0.09375f, 0.1015625f, 0.109375f, 0.1171875f,
    0.125f, 0.140625f, 0.15625f, 0.171875f, 0.1875f, 0.203125f, 0.21875f, 0.234375f,
    0.25f, 0.28125f, 0.3125f, 0.34375f, 0.375f, 0.40625f, 0.4375f, 0.46875f,
    0.5f, 0.5625f, 0.625f, 0.6875f, 0.75f, 0.8125f, 0.875f, 0.9375f,
    1.0f, 1.125f, 1.25f, 1.375f, 1.5f, 1.625f, 1.75f, 1.875f,
    2.0f, 2.25f, 2.5f, 2.75f, 3.0f, 3.25f, 3.5f, 3.75f,
    4.0f, 4.5f, 5.0f, 5.5f, 6.0f, 6.5f, 7.0f, 7.5f,
    8.0f, 9.0f, 10.0f, 11.0f, 12.0f, 13.0f, 14.0f, 15.0f,
    16.0f, 18.0f, 20.0f, 22.0f, 24.0f, 26.0f, 28.0f, 30.0f,
    32.0f, 36.0f, 40.0f, 44.0f, 48.0f, 52.0f, 56.0f, 60.0f,
    64.0f, 72.0f, 80.0f, 88.0f, 96.0f, 104.0f, 112.0f, 120.0f,
    128.0f, 144.0f, 160.0f, 176.0f, 192.0f, 208.0f, 224.0f, 240.0f,
    256.0f, 288.0f, 320.0f, 352.0f, 384.0f, 416.0f, 448.0f, NAN,
    -0.0f, -0.001953125f, -0.00390625f, -0.005859375f, -0.0078125f, -0.009765625f, -0.01171875f, -0.013671875f,
    -0.015625f, -0.017578125f, -0.01953125f, -0.021484375f, -0.0234375f, -0.025390625f, -0.02734375f, -0.029296875f,
    -0.03125f, -0.03515625f, -0.0390625f, -0.04296875f, -0.046875f, -0.05078125f, -0.0546875f, -0.05859375f,
    -0.0625f, -0.0703125f, -0.078125f, -0.0859375f, -0.09375f, -0.1015625f, -0.109375f, -0.1171875f,
    -0.125f, -0.140625f, -0.15625f, -0.171875f, -0.1875f, -0.203125f, -0.21875f, -0.234375f,
    -0.25f, -0.28125f, -0.3125f, -0.34375f, -0.375f, -0.40625f, -0.4375f, -0.46875f,
    -0.5f, -0.5625f, -0.625f, -0.6875f, -0.75f, -0.8125f, -0.875f, -0.9375f,
    -1.0f, -1.125f, -1.25f, -1.375f, -1.5f, -1.625f, -1.75f, -1.875f,
    -2.0f, -2.25f, -2.5f, -2.75f, -3.0f, -3.25f, -3.5f, -3.75f,
    -4.0f, -4.5f, -5.0f, -5.5f, -6.0f, -6.5f, -7.0f, -7.5f,
    -8.0f, -9.0f, -10.0f, -11.0f, -12.0f, -13.0f, -14.0f, -15.0f,
    -16.0f, -18.0f, -20.0f, -22.0f, -24.0f, -26.0f, -28.0f, -30.0f,
    -32.0f, -36.0f, -40.0f, -44.0f, -48.0f, -52.0f, -56.0f, -60.0f,
    -64.0f, -72.0f, -80.0f, -88.0f, -96.0f, -104.0f, -112.0f, -120.0f,
    -128.0f, -144.0f, -160.0f, -176.0f, -192.0f, -208.0f, -224.0f, -240.0f,
    -256.0f, -288.0f, -320.0f, -352.0f, -384.0f, -416.0f, -448.0f, NAN,
};

/* e5m2: bias 15, 0x7c inf, 0x7d-0x7f NaN */
const float dsq_fp8_e5m2_table[256] = {
    0.0f, 1.52587890625e-05f, 3.0517578125e-05f, 4.57763671875e-05f, 6.103515625e-05f, 7.62939453125e-05f, 9.1552734375e-05f, 0.0001068115234375f,
    0.0001220703125f, 0.000152587890625f, 0.00018310546875f, 0.000213623046875f, 0.000244140625f, 0.00030517578125f, 0.0003662109375f, 0.00042724609375f,
    0.00048828125f, 0.0006103515625f, 0.000732421875f, 0.0008544921875f, 0.0009765625f, 0.001220703125f, 0.00146484375f, 0.001708984375f,
    0.001953125f, 0.00244140625f, 0.0029296875f, 0.00341796875f, 0.00390625f, 0.0048828125f, 0.005859375f, 0.0068359375f,
    0.0078125f, 0.009765625f, 0.01171875f, 0.013671875f, 0.015625f, 0.01953125f, 0.0234375f, 0.02734375f,
    0.03125f, 0.0390625f, 0.046875f, 0.0546875f, 0.0625f, 0.078125f, 0.09375f, 0.109375f,
    0.125f, 0.15625f, 0.1875f, 0.21875f, 0.25f, 0.3125f, 0.375f, 0.4375f,
    0.5f, 0.625f, 0.75f, 0.875f, 1.0f, 1.25f, 1.5f, 1.75f,
    2.0f, 2.5f, 3.0f, 3.5f, 4.0f, 5.0f, 6.0f, 7.0f,
    8.0f, 10.0f, 12.0f, 14.0f, 16.0f, 20.0f, 24.0f, 28.0f,
    32.0f, 40.0f, 48.0f, 56.0f, 64.0f, 80.0f, 96.0f, 112.0f,
    128.0f, 160.0f, 192.0f, 224.0f, 256.0f, 320.0f, 384.0f, 448.0f,
    512.0f, 640.0f, 768.0f, 896.0f, 1024.0f, 1280.0f, 1536.0f, 1792.0f,
    2048.0f, 2560.0f, 3072.0f, 3584.0f, 4096.0f, 5120.0f, 6144.0f, 7168.0f,
    8192.0f, 10240.0f, 12288.0f, 14336.0f, 16384.0f, 20480.0f, 24576.0f, 28672.0f,
    32768.0f, 40960.0f, 49152.0f, 57344.0f, INFINITY, NAN, NAN, NAN,
    -0.0f, -1.52587890625e-05f, -3.0517578125e-05f, -4.57763671875e-05f, -6.103515625e-05f, -7.62939453125e-05f, -9.1552734375e-05f, -0.0001068115234375f,
    -0.0001220703125f, -0.000152587890625f, -0.00018310546875f, -0.000213623046875f, -0.000244140625f, -0.00030517578125f, -0.0003662109375f, -0.00042724609375f,
    -0.00048828125f, -0.0006103515625f, -0.000732421875f, -0.0008544921875f, -0.0009765625f, -0.001220703125f, -0.00146484375f, -0.001708984375f,
    -0.001953125f, -0.00244140625f, -0.0029296875f, -0.00341796875f, -0.00390625f, -0.0048828125f, -0.005859375f, -0.0068359375f,
    -0.0078125f, -0.009765625f, -0.01171875f, -0.013671875f, -0.015625f, -0.01953125f, -0.0234375f, -0.02734375f,
    -0.03125f, -0.0390625f, -0.046875f, -0.0546875f, -0.0625f, -0.078125f, -0.09375f, -0.109375f,
    -0.125f, -0.15625f, -0.1875f, -0.21875f, -0.25f, -0.3125f, -0.375f, -0.4375f,
    -0.5f, -0.625f, -0.75f, -0.875f, -1.0f, -1.25f, -1.5f, -1.75f,
    -2.0f, -2.5f, -3.0f, -3.5f, -4.0f, -5.0f, -6.0f, -7.0f,
    -8.0f, -10.0f, -12.0f, -14.0f, -16.0f, -20.0f, -24.0f, -28.0f,
    -32.0f, -40.0f, -48.0f, -56.0f, -64.0f, -80.0f, -96.0f, -112.0f,
    -128.0f, -160.0f, -192.0f, -224.0f, -256.0f, -320.0f, -384.0f, -448.0f,
    -512.0f, -640.0f, -768.0f, -896.0f, -1024.0f, -1280.0f, -1536.0f, -1792.0f,
    -2048.0f, -2560.0f, -3072.0f, -3584.0f, -4096.0f, -5120.0f, -6144.0f, -7168.0f,
    -8192.0f, -10240.0f, -12288.0f, -14336.0f, -16384.0f, -20480.0f, -24576.0f, -28672.0f,
    -32768.0f, -40960.0f, -49152.0f, -57344.0f, -INFINITY, NAN, NAN, NAN,
};
