#!/usr/bin/env python3
"""synth_to_gguf.py - write a DeepSeek-V3 safetensors checkpoint (as made by
bench/gen_synth) as a llama.cpp GGUF file (arch "deepseek2"), so that
bench/vs_llamacpp.sh can run llama.cpp on the very weights dsq runs.

    PYTHONPATH=$LLAMA_CPP_DIR/gguf-py python3 bench/synth_to_gguf.py MODEL_DIR OUT.gguf
    PYTHONPATH=$LLAMA_CPP_DIR/gguf-py python3 bench/synth_to_gguf.py --bpw FILE.gguf

--bpw prints the bits per weight of a (quantized) GGUF over its projection
matrices (attention and FFN weights, not norms, the router, embeddings or the
output head) and the share of those weights in each GGUF type: llama-quantize
falls back from a K-quant to another type for rows not a multiple of 256
(Q4_K -> Q5_0), so a "Q4_K_M" file can be mostly 5-bit.

Why our own converter: llama.cpp's convert_hf_to_gguf.py needs transformers
(and a real tokenizer), which this machine cannot install. This one reads the
safetensors with numpy (memory-mapped; BF16 stays as raw uint16 bits) and
writes through llama.cpp's own gguf-py package, so the file layout is the one
the llama.cpp build at hand expects. Only for benchmarking: the vocabulary is
a dummy byte-level BPE of the model's vocab size (llama-bench feeds random
token ids and never tokenizes text), unless the checkpoint's tokenizer.json
is a byte-level BPE covering every id (the bundled samples), which is then
written as it is, with the deepseek-v3 pre-tokenizer (the samples use its
split rules), so that llama-perplexity can score text.

Facts it follows (llama.cpp's DeepSeek V2/V3 converter and model loader):
- tensors map to GGUF names through gguf-py's TensorNameMap for DEEPSEEK2;
  e_score_correction_bias is renamed to e_score_correction.bias first;
  routed experts are stacked per layer into one 3-D tensor per projection
  (ffn_{gate,up,down}_exps); MTP layers (index >= num_hidden_layers) dropped.
- 1-D tensors, norms, the router (ffn_gate_inp) and non-.weight tensors are
  F32 (llama.cpp's CPU ops take only F32 there); every other matrix is BF16.
- builds whose gguf-py knows ATTN_K_B (MLA absorption, from spring 2025 on)
  also get kv_b split into k_b (transposed) and v_b, with the *_mla head
  sizes, as their converter writes; older builds get kv_b only.
- group-limited routing (n_group/topk_group) is not a GGUF key in older
  builds; it is written when gguf-py has the writer for it.
"""
import json
import os
import struct
import sys
import types

import numpy as np


def _import_gguf():
    # gguf-py imports sentencepiece (SPM vocab only) at import time; we never
    # use it, and Debian 12 does not package it: stand in an empty module.
    try:
        import sentencepiece  # noqa: F401
    except ImportError:
        stub = types.ModuleType("sentencepiece")
        stub.SentencePieceProcessor = None
        sys.modules["sentencepiece"] = stub
    import gguf
    return gguf


ST_DTYPES = {"BF16": (np.uint16, 2), "F16": (np.float16, 2), "F32": (np.float32, 4)}


def fail(msg):
    sys.stderr.write("synth_to_gguf: %s\n" % msg)
    sys.exit(1)


def read_safetensors(path):
    """name -> (dtype string, shape, numpy view) over a memory map, every
    header field bounds-checked against the file (input is hostile)."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) != 8:
            fail("%s: too short for a safetensors header" % path)
        (hlen,) = struct.unpack("<Q", head)
        if hlen > min(size - 8, 100 << 20):
            fail("%s: header length %d out of range" % (path, hlen))
        header = json.loads(f.read(hlen))
    mm = np.memmap(path, dtype=np.uint8, mode="r")
    base = 8 + hlen
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dt = info.get("dtype")
        if dt not in ST_DTYPES:
            fail("%s: tensor %s has dtype %s (BF16, F16, F32 only)" % (path, name, dt))
        npdt, esz = ST_DTYPES[dt]
        shape = [int(d) for d in info["shape"]]
        a, b = (int(x) for x in info["data_offsets"])
        n = 1
        for d in shape:
            if d < 0:
                fail("%s: tensor %s has a negative dimension" % (path, name))
            n *= d
        if a < 0 or b < a or base + b > size or b - a != n * esz:
            fail("%s: tensor %s has offsets [%d, %d) that do not fit its shape or the file"
                 % (path, name, a, b))
        out[name] = (dt, shape, mm[base + a:base + b].view(npdt).reshape(shape))
    return out


def load_tensors(model_dir):
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    tensors = {}
    for fn in files:
        if os.path.basename(fn) != fn:
            fail("index names a shard outside the model directory: %s" % fn)
        tensors.update(read_safetensors(os.path.join(model_dir, fn)))
    return tensors


def to_f32(dt, arr):
    if dt == "BF16":
        return (arr.astype(np.uint32) << 16).view(np.float32)
    return np.asarray(arr, dtype=np.float32)


def byte_level_chars():
    """GPT-2 byte-level alphabet: byte b -> one printable unicode char."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


def dummy_vocab(gguf, n_vocab, bos, eos):
    """A loadable BPE vocab of exactly n_vocab tokens: the special tokens, the
    256 byte tokens, then two-letter merges of printable ASCII (each with its
    merge rule), then unused fillers."""
    T = gguf.TokenType
    tokens = ["<|dummy_special_%d|>" % i for i in range(max(bos, eos) + 1)]
    types_ = [T.CONTROL] * len(tokens)
    tokens += byte_level_chars()
    types_ += [T.NORMAL] * 256
    merges = []
    ascii_ = [chr(c) for c in range(ord("!"), ord("~") + 1)]
    for a in ascii_:
        for b in ascii_:
            if len(tokens) >= n_vocab:
                break
            tokens.append(a + b)
            types_.append(T.NORMAL)
            merges.append(a + " " + b)
    while len(tokens) < n_vocab:
        tokens.append("<|unused_%d|>" % len(tokens))
        types_.append(T.UNUSED)
    if len(tokens) > n_vocab:
        fail("vocab_size %d is smaller than the %d special and byte tokens" % (n_vocab, len(tokens)))
    return tokens, types_, merges


def hf_vocab(gguf, model_dir, n_vocab):
    """The checkpoint's own byte-level BPE (tokenizer.json), when it covers
    exactly n_vocab ids (the dsq samples); None otherwise (gen_synth's
    placeholder tokenizer), and the dummy vocab is used."""
    path = os.path.join(model_dir, "tokenizer.json")
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        tj = json.load(f)
    model = tj.get("model") or {}
    if model.get("type") != "BPE":
        return None
    by_id = {}
    for tok, i in model.get("vocab", {}).items():
        by_id[int(i)] = tok
    special = set()
    for a in tj.get("added_tokens", []):
        by_id[int(a["id"])] = a["content"]
        if a.get("special"):
            special.add(int(a["id"]))
    if sorted(by_id) != list(range(n_vocab)):
        return None
    T = gguf.TokenType
    tokens = [by_id[i] for i in range(n_vocab)]
    types_ = [T.CONTROL if i in special else T.NORMAL for i in range(n_vocab)]
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
    return tokens, types_, merges


def write_metadata(gguf, w, cfg, n_layer, name):
    w.add_name("dsq bench conversion of %s" % name)
    w.add_block_count(n_layer)
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_rope_freq_base(cfg["rope_theta"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_expert_used_count(cfg["num_experts_per_tok"])
    w.add_leading_dense_block_count(cfg["first_k_dense_replace"])
    w.add_vocab_size(cfg["vocab_size"])
    if cfg.get("q_lora_rank"):
        w.add_q_lora_rank(cfg["q_lora_rank"])
    w.add_kv_lora_rank(cfg["kv_lora_rank"])
    nope, rope, vdim = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]
    if split_kv_b(gguf):
        # MLA-absorbing builds: the cache holds the latent (one "KV head" of
        # kv_lora + rope); the per-head sizes move to the *_mla keys.
        w.add_head_count_kv(1)
        w.add_key_length(cfg["kv_lora_rank"] + rope)
        w.add_value_length(cfg["kv_lora_rank"])
        w.add_key_length_mla(nope + rope)
        w.add_value_length_mla(vdim)
    else:
        w.add_head_count_kv(cfg["num_key_value_heads"])
        w.add_key_length(nope + rope)
        w.add_value_length(vdim)
    w.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
    w.add_expert_count(cfg["n_routed_experts"])
    w.add_expert_shared_count(cfg["n_shared_experts"])
    w.add_expert_weights_scale(cfg["routed_scaling_factor"])
    w.add_expert_weights_norm(cfg["norm_topk_prob"])
    scoring = cfg.get("scoring_func", "softmax")
    if scoring == "sigmoid":
        w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
    elif scoring == "softmax":
        w.add_expert_gating_func(gguf.ExpertGatingFuncType.SOFTMAX)
    else:
        fail("unsupported scoring_func %r" % scoring)
    if hasattr(w, "add_expert_group_count") and cfg.get("n_group"):
        w.add_expert_group_count(cfg["n_group"])
        w.add_expert_group_used_count(cfg["topk_group"])
    w.add_rope_dimension_count(rope)
    rs = cfg.get("rope_scaling") or {}
    if rs.get("type", rs.get("rope_type")) == "yarn" and "factor" in rs:
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(rs["factor"])
        w.add_rope_scaling_orig_ctx_len(rs["original_max_position_embeddings"])
        w.add_rope_scaling_yarn_log_mul(0.1 * rs["mscale_all_dim"])
    w.add_file_type(gguf.LlamaFileType.MOSTLY_BF16)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)


def split_kv_b(gguf):
    return hasattr(gguf.MODEL_TENSOR, "ATTN_K_B")


def keep_f32(gguf, new_name, ndim):
    return (ndim <= 1 or new_name.endswith("_norm.weight") or not new_name.endswith(".weight")
            or ".ffn_gate_inp." in new_name)


def linear_bpw(path):
    reader = _import_gguf().GGUFReader(path)
    nbytes = n = 0
    share = {}
    for t in reader.tensors:
        name = t.name
        if not name.endswith(".weight") or "norm" in name or "gate_inp" in name:
            continue
        if "attn" not in name and "ffn" not in name:
            continue
        k = int(np.prod([int(x) for x in t.shape]))
        nbytes += int(t.n_bytes)
        n += k
        share[t.tensor_type.name] = share.get(t.tensor_type.name, 0) + k
    if not n:
        fail("%s: no projection weights" % path)
    mix = ", ".join("%s %.0f%%" % (ty, 100.0 * v / n) for ty, v in sorted(share.items(), key=lambda kv: -kv[1]))
    print("%.2f %s" % (nbytes * 8.0 / n, mix))


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--bpw":
        linear_bpw(sys.argv[2])
        return
    if len(sys.argv) != 3:
        sys.stderr.write("usage: synth_to_gguf.py MODEL_DIR OUT.gguf\n")
        sys.exit(2)
    model_dir, out = sys.argv[1], sys.argv[2]
    gguf = _import_gguf()
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    if cfg.get("model_type") not in ("deepseek_v3", "deepseek_v2"):
        fail("model_type %r: only DeepSeek V2/V3 checkpoints" % cfg.get("model_type"))
    n_layer = int(cfg["num_hidden_layers"])
    n_exp = int(cfg["n_routed_experts"])
    tensors = load_tensors(model_dir)
    nmap = gguf.get_tensor_name_map(gguf.MODEL_ARCH.DEEPSEEK2, n_layer)

    w = gguf.GGUFWriter(out + ".tmp", gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.DEEPSEEK2])
    write_metadata(gguf, w, cfg, n_layer, os.path.basename(os.path.normpath(model_dir)))
    bos, eos = int(cfg.get("bos_token_id", 0)), int(cfg.get("eos_token_id", 1))
    vocab = hf_vocab(gguf, model_dir, int(cfg["vocab_size"]))
    toks, ttypes, merges = vocab or dummy_vocab(gguf, int(cfg["vocab_size"]), bos, eos)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("deepseek-v3")
    w.add_token_list(toks)
    w.add_token_types(ttypes)
    w.add_token_merges(merges)
    w.add_bos_token_id(bos)
    w.add_eos_token_id(eos)
    tcfg = os.path.join(model_dir, "tokenizer_config.json")
    if vocab and os.path.exists(tcfg):
        with open(tcfg, encoding="utf-8") as f:
            tc = json.load(f)
        w.add_add_bos_token(bool(tc.get("add_bos_token", True)))
        w.add_add_eos_token(bool(tc.get("add_eos_token", False)))

    def emit(hf_name, dt, arr):
        new = nmap.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        if new is None:
            fail("no GGUF name for tensor %s" % hf_name)
        if keep_f32(gguf, new, arr.ndim):
            w.add_tensor(new, np.ascontiguousarray(to_f32(dt, arr)))
        elif dt == "BF16":
            w.add_tensor(new, arr, raw_dtype=gguf.GGMLQuantizationType.BF16)
        else:
            # F16/F32 matrices: write BF16 like the source checkpoints do.
            f = to_f32(dt, arr)
            w.add_tensor(new, (np.ascontiguousarray(f).view(np.uint32) >> 16).astype(np.uint16),
                         raw_dtype=gguf.GGMLQuantizationType.BF16)

    experts = {}
    for name in sorted(tensors):
        dt, shape, arr = tensors[name]
        hf = name.replace("e_score_correction_bias", "e_score_correction.bias")
        parts = hf.split(".")
        if hf.startswith("model.layers.") and int(parts[2]) >= n_layer:
            continue                       # MTP layer: not run by llama.cpp
        if ".mlp.experts." in hf:
            bid, xid, proj = int(parts[2]), int(parts[5]), parts[6]
            if not 0 <= xid < n_exp:
                fail("expert index %d out of range in %s" % (xid, name))
            experts.setdefault((bid, proj), {})[xid] = (dt, arr)
            continue
        emit(hf, dt, arr)
        if hf.endswith("kv_b_proj.weight") and split_kv_b(gguf):
            nh, nope, vdim = cfg["num_attention_heads"], cfg["qk_nope_head_dim"], cfg["v_head_dim"]
            if shape != [nh * (nope + vdim), cfg["kv_lora_rank"]]:
                fail("%s has shape %s" % (name, shape))
            kv = arr.reshape(nh, nope + vdim, shape[1])
            emit(hf.replace("kv_b_proj", "k_b_proj"), dt, np.ascontiguousarray(kv[:, :nope, :].transpose(0, 2, 1)))
            emit(hf.replace("kv_b_proj", "v_b_proj"), dt, np.ascontiguousarray(kv[:, nope:, :]))
    for (bid, proj), per in sorted(experts.items()):
        if len(per) != n_exp:
            fail("layer %d %s: %d of %d experts present" % (bid, proj, len(per), n_exp))
        dts = {per[x][0] for x in per}
        if len(dts) != 1:
            fail("layer %d %s: experts of mixed dtypes" % (bid, proj))
        stacked = np.stack([per[x][1] for x in range(n_exp)])
        emit("model.layers.%d.mlp.experts.%s.weight" % (bid, proj), dts.pop(), stacked)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(out + ".tmp", out)   # atomic: a half-written file never carries the name


if __name__ == "__main__":
    main()
