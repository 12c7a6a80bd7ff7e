#!/usr/bin/python3
"""Export a training checkpoint to Hugging Face model directories.

  export.py --ckpt work/dsv3/ckpt.pt --out tiny-dsv3 [--fp8-out tiny-dsv3-fp8]
  export.py --ckpt work/llama/ckpt.pt --out tiny-llama

BF16 directory: every tensor BF16 (round to nearest even) except
mlp.gate.e_score_correction_bias, which stays F32 as in DeepSeek-V3; split into
2 shards by layer, with model.safetensors.index.json ({"metadata":
{"total_size"}, "weight_map"}), config.json, generation_config.json and the
tokenizer files.

FP8 directory (DeepSeek only): the same BF16 values, then every linear that
DeepSeek-V3 stores in FP8 (all self_attn projections incl. kv_b_proj, the dense
MLP, routed and shared experts; not embed_tokens, norms, mlp.gate, lm_head)
becomes F8_E4M3 with a float32 `<name>_scale_inv` [ceil(out/128), ceil(in/128)]
(fp8.py), and config.json gains DeepSeek's quantization_config block.
"""
import argparse
import json
import os
import re
import shutil
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import fp8  # noqa: E402
import model_configs  # noqa: E402
import st_io  # noqa: E402

FP8_RE = re.compile(r"model\.layers\.\d+\.(self_attn\.(q_a_proj|q_b_proj|q_proj|kv_a_proj_with_mqa|kv_b_proj|o_proj)"
                    r"|mlp\.(gate_proj|up_proj|down_proj)"
                    r"|mlp\.experts\.\d+\.(gate_proj|up_proj|down_proj)"
                    r"|mlp\.shared_experts\.(gate_proj|up_proj|down_proj))\.weight$")


def is_fp8_linear(name):
    return bool(FP8_RE.match(name))


def shard_of(name, n_layers):
    """First shard: embeddings + first half of the layers; second: the rest + norm + lm_head."""
    m = re.match(r"model\.layers\.(\d+)\.", name)
    if m:
        return 0 if int(m.group(1)) < (n_layers + 1) // 2 else 1
    return 0 if name.startswith("model.embed_tokens") else 1


def write_dir(out, cfg, tensors, tok_dir):
    """tensors: name -> (dtype, numpy raw array)."""
    parts = [{}, {}]
    for n, v in tensors.items():
        parts[shard_of(n, cfg["num_hidden_layers"])][n] = v
    write_shards(out, cfg, parts, tok_dir)


def write_shards(out, cfg, parts, tok_dir=None):
    """parts: one dict name -> (dtype, numpy raw array) per shard, in order.  The
    tokenizer files are copied from tok_dir when given."""
    os.makedirs(out, exist_ok=True)
    for fn in os.listdir(out):
        if fn.endswith(".safetensors") or fn == "model.safetensors.index.json":
            os.remove(os.path.join(out, fn))
    nsh = len(parts)
    names = ["model-%05d-of-%05d.safetensors" % (i + 1, nsh) for i in range(nsh)]
    wmap, total = {}, 0
    for fn, p in zip(names, parts):
        total += st_io.write(os.path.join(out, fn), p, {"format": "pt"})
        for n in p:
            wmap[n] = fn
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(wmap.items()))}
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f, indent=2)
        f.write("\n")
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump(model_configs.GENERATION, f, indent=2)
        f.write("\n")
    for fn in ("tokenizer.json", "tokenizer_config.json") if tok_dir else ():
        shutil.copyfile(os.path.join(tok_dir, fn), os.path.join(out, fn))
    return names


def bf16_tensors(sd):
    out = {}
    for n, t in sd.items():
        if n.endswith("e_score_correction_bias"):
            out[n] = ("F32", t.detach().float().numpy())
        else:
            out[n] = ("BF16", st_io.bf16_bits(t.float()))
    return out


def fp8_tensors(bf):
    out = {}
    for n, (dt, arr) in bf.items():
        if is_fp8_linear(n):
            w = st_io.bf16_to_f32(arr)
            q, s = fp8.quantize_blocks(w)
            out[n] = ("F8_E4M3", q)
            out[n + "_scale_inv"] = ("F32", s)
        else:
            out[n] = (dt, arr)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckpt", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--fp8-out")
    ap.add_argument("--tokenizer-dir", default=os.path.join(HERE, "work", "tok"))
    a = ap.parse_args()
    st = torch.load(a.ckpt)
    cfg = st["cfg"]
    bf = bf16_tensors(st["model"])
    write_dir(a.out, cfg, bf, a.tokenizer_dir)
    print("wrote", a.out, "step", st["step"])
    if a.fp8_out:
        c8 = dict(cfg)
        c8["quantization_config"] = dict(model_configs.FP8_QUANT)
        write_dir(a.fp8_out, c8, fp8_tensors(bf), a.tokenizer_dir)
        print("wrote", a.fp8_out)


if __name__ == "__main__":
    main()
