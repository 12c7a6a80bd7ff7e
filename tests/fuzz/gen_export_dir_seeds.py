#!/usr/bin/env python3
"""Seed corpus for fuzz_export_dir: cut a few linears out of real exports.

Usage: gen_export_dir_seeds.py OUT_DIR NAME=EXPORT_DIR [NAME=EXPORT_DIR ...]

Each EXPORT_DIR is a ds-quant --format ascend / awq / compressed-tensors
directory (for example of samples/tiny-dsv3). From it this writes
OUT_DIR/NAME and OUT_DIR/NAME-grow, each the fuzz input layout of
fuzz_export_dir.c: a selector byte (bit 0: config.json rather than
quant_model_description.json; bit 1: also unpack one row too many), the
little-endian uint32 length of the JSON text, the text, then a safetensors
file holding only the tensors of MODULES (two routed experts' down_proj,
which must be stored alike, and the float router). An AscendV1 description
is cut to the same tensors and its top-level non-tensor keys. Every seed
stays under 64 KiB.

The committed corpus/export_dir/ came from samples/tiny-dsv3 converted with
ds-quant -q --format F and: ascend --scheme w8a8-dynamic
(ascend-w8a8-dynamic), ascend --recipe deepseek-w4a8 (ascend-w4a8-dynamic),
compressed-tensors --scheme w8a8-dynamic (ct-int8) and --scheme w4a8
(ct-w4a8), compressed-tensors --scheme awq-w4a16 --group-size 0
(ct-pack-channel) and --group-size 64 --keep self_attn (ct-pack-group),
awq --scheme awq-w4a16 --group-size 64 --keep self_attn (awq-gemm).
"""
import json
import os
import struct
import sys

MODULES = ("model.layers.1.mlp.experts.0.down_proj", "model.layers.1.mlp.experts.1.down_proj",
           "model.layers.1.mlp.gate")
LIMIT = 64 << 10


def read_st(path):
    with open(path, "rb") as f:
        buf = f.read()
    (n,) = struct.unpack("<Q", buf[:8])
    hdr = json.loads(buf[8 : 8 + n])
    return hdr, buf[8 + n :]


def cut_st(hdr, data, keep):
    out_hdr, blobs, off = {}, [], 0
    for name in sorted(keep):
        info = hdr[name]
        a, b = info["data_offsets"]
        blobs.append(data[a:b])
        out_hdr[name] = {"dtype": info["dtype"], "shape": info["shape"],
                         "data_offsets": [off, off + (b - a)]}
        off += b - a
    text = json.dumps(out_hdr, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(blobs)


def seed(export_dir):
    desc_path = os.path.join(export_dir, "quant_model_description.json")
    ascend = os.path.exists(desc_path)
    st_path = os.path.join(export_dir, "quant_model_weights.safetensors" if ascend
                           else "model.safetensors")
    hdr, data = read_st(st_path)
    keep = [k for k in hdr if k != "__metadata__" and
            any(k.startswith(m + ".") for m in MODULES)]
    if not keep:
        sys.exit("%s: none of %s" % (st_path, ", ".join(MODULES)))
    st = cut_st(hdr, data, keep)
    if ascend:
        with open(desc_path) as f:
            desc = json.load(f)
        cut = {k: v for k, v in desc.items()
               if k in keep or not (k.startswith("model.") or k.startswith("lm_head"))}
        text, sel = json.dumps(cut, indent=1).encode(), 0
    else:
        with open(os.path.join(export_dir, "config.json"), "rb") as f:
            text, sel = f.read(), 1
    return sel, text, st


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    out = argv[1]
    os.makedirs(out, exist_ok=True)
    for arg in argv[2:]:
        name, _, export_dir = arg.partition("=")
        sel, text, st = seed(export_dir)
        for suffix, bits in (("", 0), ("-grow", 2)):
            blob = bytes([sel | bits]) + struct.pack("<I", len(text)) + text + st
            if len(blob) >= LIMIT:
                sys.exit("%s: seed of %d bytes is over %d" % (name, len(blob), LIMIT))
            with open(os.path.join(out, name + suffix), "wb") as f:
                f.write(blob)


if __name__ == "__main__":
    main(sys.argv)
