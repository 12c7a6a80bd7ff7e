#!/usr/bin/python3
"""FP8 E4M3FN block quantization as stored by DeepSeek-V3, numpy only.

The storage contract is docs/checkpoints.md, "FP8 E4M3 weights and weight_scale_inv".

torch 1.13 has no float8 dtype, so encoding is done here: E4M3FN = 1 sign,
4 exponent (bias 7), 3 mantissa bits, no infinities, 0x7F/0xFF are NaN, max
finite 448.  Rounding is to nearest, ties to even; values beyond 448 saturate
to 448 (they cannot occur after block scaling).

Block scales: weight [out, in] is cut into 128x128 tiles (edge tiles partial);
scale[i, j] = amax(tile) / 448 (1.0 for an all-zero tile), stored float32 as
`weight_scale_inv`, and dequant is fp8 * scale (the stored value is the
multiplier despite its name).
"""
import numpy as np

BLOCK = 128
FP8_MAX = 448.0


def decode_table():
    """float32 value of every byte 0..255 (NaN for 0x7F, 0xFF)."""
    v = np.zeros(256, np.float32)
    for b in range(256):
        s, e, m = b >> 7, (b >> 3) & 0xF, b & 7
        if e == 0xF and m == 7:
            x = np.nan
        elif e == 0:
            x = m / 8.0 * 2.0 ** -6
        else:
            x = (1 + m / 8.0) * 2.0 ** (e - 7)
        v[b] = -x if s else x
    return v


TABLE = decode_table()
_POS = TABLE[:0x7F]            # codes 0x00..0x7E, ascending, all finite


def encode(x):
    """float array -> uint8 E4M3FN codes (round to nearest even, saturating)."""
    x = np.asarray(x, np.float32)
    a = np.minimum(np.abs(x), FP8_MAX)
    hi = np.searchsorted(_POS, a, side="left").clip(0, len(_POS) - 1)   # first code with value >= a
    lo = (hi - 1).clip(0)
    dlo, dhi = a - _POS[lo], _POS[hi] - a
    pick_hi = (dhi < dlo) | ((dhi == dlo) & (hi % 2 == 0))
    code = np.where(pick_hi, hi, lo).astype(np.uint8)
    code = np.where(a == _POS[hi], hi, code).astype(np.uint8)          # exact hits
    sign = (np.signbit(x) & (code != 0)).astype(np.uint8) << 7
    return code | sign


def quantize_blocks(w):
    """w float32 [out, in] -> (uint8 codes [out, in], float32 scale [ceil(out/128), ceil(in/128)])."""
    w = np.asarray(w, np.float32)
    o, i = w.shape
    so, si = -(-o // BLOCK), -(-i // BLOCK)
    scale = np.ones((so, si), np.float32)
    q = np.zeros((o, i), np.uint8)
    for bi in range(so):
        for bj in range(si):
            t = w[bi * BLOCK:(bi + 1) * BLOCK, bj * BLOCK:(bj + 1) * BLOCK]
            amax = float(np.abs(t).max())
            s = np.float32(amax / FP8_MAX) if amax > 0 else np.float32(1.0)
            scale[bi, bj] = s
            q[bi * BLOCK:(bi + 1) * BLOCK, bj * BLOCK:(bj + 1) * BLOCK] = encode(t / s)
    return q, scale


def dequantize_blocks(q, scale):
    """uint8 codes + float32 block scales -> float32 weight (fp8 value * scale, in float32)."""
    w = TABLE[q]
    s = np.repeat(np.repeat(scale, BLOCK, 0), BLOCK, 1)[:q.shape[0], :q.shape[1]]
    return (w * s).astype(np.float32)
