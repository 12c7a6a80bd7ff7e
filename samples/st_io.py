#!/usr/bin/python3
"""Minimal safetensors reader/writer (numpy only; the `safetensors` package is not installed).

Format (huggingface/safetensors): u64 LE header length N, N bytes of JSON
(space-padded so the data starts 8-aligned), then the tensors back to back.
The writer orders tensors like safetensors' `prepare()`: descending dtype (the
Rust enum order, which is increasing alignment), then name.
"""
import json
import struct

import numpy as np

# Rust `enum Dtype` order ("MUST be in increasing alignment order").
DTYPE_ORDER = ["BOOL", "F4", "F6_E2M3", "F6_E3M2", "U8", "I8", "F8_E5M2", "F8_E4M3", "F8_E8M0",
               "F8_E4M3FNUZ", "F8_E5M2FNUZ", "I16", "U16", "F16", "BF16", "I32", "U32", "F32", "C64",
               "F64", "I64", "U64"]
# Storage numpy dtype for the raw bytes we handle (BF16 and FP8 kept as raw bits).
NP_RAW = {"BF16": np.uint16, "F16": np.float16, "F32": np.float32, "F8_E4M3": np.uint8,
          "U8": np.uint8, "I8": np.int8, "I32": np.int32, "I64": np.int64, "F64": np.float64}


def write(path, tensors, metadata=None):
    """tensors: name -> (dtype string, numpy array of the raw storage type)."""
    names = sorted(tensors, key=lambda n: (-DTYPE_ORDER.index(tensors[n][0]), n))
    header = {}
    if metadata is not None:
        header["__metadata__"] = metadata
    off = 0
    blobs = []
    for n in names:
        dt, arr = tensors[n]
        arr = np.ascontiguousarray(arr, dtype=NP_RAW[dt])
        b = arr.tobytes()
        header[n] = {"dtype": dt, "shape": list(arr.shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    h = json.dumps(header, separators=(",", ":")).encode("utf-8")
    h += b" " * ((-len(h)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
    return off


def read(path):
    """name -> (dtype string, numpy array of raw storage), plus metadata."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n].decode("utf-8"))
    meta = header.pop("__metadata__", None)
    base = 8 + n
    out = {}
    for name, e in header.items():
        a, b = e["data_offsets"]
        arr = np.frombuffer(data[base + a:base + b], dtype=NP_RAW[e["dtype"]]).reshape(e["shape"])
        out[name] = (e["dtype"], arr)
    return out, meta


def bf16_bits(t):
    """torch float tensor -> uint16 numpy bits (round to nearest even, torch's cast)."""
    import torch
    return t.detach().to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)


def bf16_to_f32(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)
