#!/usr/bin/python3
"""Consistency checks for samples/ (pure Python + numpy; no torch).

  1. every GSM answer: each <<expr=val>> evaluates to val, the text after >> is
     val, and the final `#### N` equals the last annotation's value;
  2. train/test disjointness: the regenerated train split shares no question and
     no question template (numbers, names and items masked) with the test split;
     few-shot problems are train-template problems not in the test split;
  3. every model directory: shards are valid safetensors (header, offsets, no
     holes, sizes, writer order), the index maps exactly the shard tensors and its
     total_size is right; FP8 tensors have F32 weight_scale_inv of the block shape;
  4. config.json keys equal DeepSeek-V3's key set (plus quantization_config for
     the FP8 copy); Llama config has the HF Llama keys;
  5. tokenizer.json carries DeepSeek-V3's exact pre_tokenizer and special ids, and
     re-encoding the golden prompts / tokenizer cases with bpe.py gives the stored ids;
  6. golden logits files have the sizes golden.json describes;
  7. tiny-dsv3-chat: tiny-dsv3's config and tokenizer.json, and DeepSeek-V3.1's
     chat_template (by sha256) in its tokenizer_config.json.
Exit status 0 when everything passes.
"""
import hashlib
import json
import math
import os
import re
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bpe  # noqa: E402
import gen_gsm  # noqa: E402

FAILS = []
V31_SHA256 = "37cabd20b2b62e3efe7fa55533ef0bc6e1eae63b60cf77265b2a09632aa1358d"   # DeepSeek-V3.1's chat_template

DSV3_KEYS = {
    "architectures", "attention_bias", "attention_dropout", "auto_map", "aux_loss_alpha", "bos_token_id",
    "eos_token_id", "ep_size", "first_k_dense_replace", "hidden_act", "hidden_size", "initializer_range",
    "intermediate_size", "kv_lora_rank", "max_position_embeddings", "model_type", "moe_intermediate_size",
    "moe_layer_freq", "n_group", "n_routed_experts", "n_shared_experts", "norm_topk_prob",
    "num_attention_heads", "num_experts_per_tok", "num_hidden_layers", "num_key_value_heads",
    "num_nextn_predict_layers", "pretraining_tp", "q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim",
    "rms_norm_eps", "rope_scaling", "rope_theta", "routed_scaling_factor", "scoring_func", "seq_aux",
    "tie_word_embeddings", "topk_group", "topk_method", "torch_dtype", "transformers_version", "use_cache",
    "v_head_dim", "vocab_size"}
ROPE_KEYS = {"beta_fast", "beta_slow", "factor", "mscale", "mscale_all_dim", "original_max_position_embeddings",
             "type"}
LLAMA_KEYS = {"architectures", "bos_token_id", "eos_token_id", "hidden_act", "hidden_size", "intermediate_size",
              "max_position_embeddings", "model_type", "num_attention_heads", "num_hidden_layers",
              "num_key_value_heads", "rms_norm_eps", "rope_theta", "tie_word_embeddings", "torch_dtype",
              "vocab_size"}
DTYPE_ORDER = ["BOOL", "F4", "F6_E2M3", "F6_E3M2", "U8", "I8", "F8_E5M2", "F8_E4M3", "F8_E8M0",
               "F8_E4M3FNUZ", "F8_E5M2FNUZ", "I16", "U16", "F16", "BF16", "I32", "U32", "F32", "C64",
               "F64", "I64", "U64"]
DTYPE_BITS = {"BOOL": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8,
              "F8_E8M0": 8, "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8, "I16": 16, "U16": 16, "F16": 16, "BF16": 16,
              "I32": 32, "U32": 32, "F32": 32, "C64": 64, "F64": 64, "I64": 64, "U64": 64}
FP8_RE = re.compile(r"model\.layers\.\d+\.(self_attn\.(q_a_proj|q_b_proj|q_proj|kv_a_proj_with_mqa|kv_b_proj|o_proj)"
                    r"|mlp\.(gate_proj|up_proj|down_proj)|mlp\.experts\.\d+\.(gate_proj|up_proj|down_proj)"
                    r"|mlp\.shared_experts\.(gate_proj|up_proj|down_proj))\.weight$")


def check(ok, what):
    if not ok:
        FAILS.append(what)
        print("FAIL", what)


def read_jsonl(p):
    with open(p, encoding="utf-8") as f:
        return [json.loads(l) for l in f if l.strip()]


# ------------------------------------------------------------------ 1. arithmetic

def eval_expr(e):
    """+ - * / over non-negative integers, usual precedence; exact rationals."""
    from fractions import Fraction
    toks = re.findall(r"\d+|[-+*/()]", e)
    if "".join(toks) != e.replace(" ", ""):
        raise ValueError("bad expression " + e)
    pos = [0]

    def atom():
        t = toks[pos[0]]
        pos[0] += 1
        if t == "(":
            v = add()
            pos[0] += 1
            return v
        return Fraction(int(t))

    def mul():
        v = atom()
        while pos[0] < len(toks) and toks[pos[0]] in "*/":
            op = toks[pos[0]]
            pos[0] += 1
            r = atom()
            v = v * r if op == "*" else v / r
        return v

    def add():
        v = mul()
        while pos[0] < len(toks) and toks[pos[0]] in "+-":
            op = toks[pos[0]]
            pos[0] += 1
            r = mul()
            v = v + r if op == "+" else v - r
        return v
    return add()


def check_answer(row, where):
    ans = row["answer"]
    lines = ans.split("\n")
    m = re.fullmatch(r"#### (-?\d+)", lines[-1])
    check(m is not None, f"{where}: last line is not '#### N'")
    if not m:
        return
    anns = re.findall(r"<<([^=<>]+)=([^<>]+)>>(\S*)", ans)
    check(2 <= len(anns) <= 4, f"{where}: {len(anns)} steps")
    for expr, val, after in anns:
        v = eval_expr(expr)
        check(v == int(val), f"{where}: {expr} != {val}")
        check(v.denominator == 1 and v >= 0, f"{where}: non-integer or negative step {expr}")
        check(after.rstrip(".") == val, f"{where}: text after annotation {after!r} != {val}")
        check(ans.count(f"{expr}=<<{expr}={val}>>") >= 1, f"{where}: step not written as expr=<<expr=val>>")
    if anns:
        check(int(anns[-1][1]) == int(m.group(1)), f"{where}: #### {m.group(1)} != last step {anns[-1][1]}")


# ------------------------------------------------------------------ 2. disjointness

def skeleton(q):
    words = sorted({n for n, _, _ in gen_gsm.NAMES} | set(gen_gsm.ITEMS) | set(gen_gsm.CONTAINERS)
                   | set(gen_gsm.FOODS) | set(gen_gsm.GOODS) | set(gen_gsm.PLACES), key=len, reverse=True)
    pat = skeleton.pat = getattr(skeleton, "pat", None) or re.compile(
        r"\b(" + "|".join(re.escape(w) for w in words) + r")\b", re.I)
    q = re.sub(r"\d+", "#", q)
    q = pat.sub("X", q)
    return re.sub(r"\b(he|she|his|her|He|She|His|Her)\b", "P", q)


def check_disjoint(test, fewshot, n_train):
    train = gen_gsm.generate("train", n_train) + gen_gsm.generate("train", n_train, level="small")
    tq = {r["question"] for r in train}
    check(not any(r["question"] in tq for r in test), "a test question occurs in the train split")
    fq = {r["question"] for r in fewshot}
    check(not (fq & {r["question"] for r in test}), "a few-shot question occurs in the test split")
    # templates: 20,000 problems per level already hit every train template many times
    tsk = {skeleton(r["question"]) for r in train[:20000] + train[n_train:n_train + 20000]}
    bad = [r["question"] for r in test if skeleton(r["question"]) in tsk]
    check(not bad, f"{len(bad)} test questions share a train template, e.g. {bad[:1]}")
    regen = gen_gsm.generate("test", len(test), level="small")
    check(regen == test, "data/gsm_test.jsonl differs from gen_gsm.py output")
    check(gen_gsm.generate("fewshot", len(fewshot), level="small") == fewshot,
          "data/gsm_fewshot.jsonl differs from gen_gsm.py")


# ------------------------------------------------------------------ 3. safetensors

def read_header(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    check(n % 8 == 0, f"{path}: header length {n} not a multiple of 8")
    raw = data[8:8 + n]
    check(raw[:1] == b"{", f"{path}: header does not start with '{{'")
    hdr = json.loads(raw.decode("utf-8"))
    meta = hdr.pop("__metadata__", None)
    if meta is not None:
        check(all(isinstance(v, str) for v in meta.values()), f"{path}: non-string metadata")
    spans = []
    for name, e in hdr.items():
        check(e["dtype"] in DTYPE_BITS, f"{path}: {name} bad dtype {e['dtype']}")
        a, b = e["data_offsets"]
        numel = math.prod(e["shape"])
        check((b - a) * 8 == numel * DTYPE_BITS[e["dtype"]], f"{path}: {name} size mismatch")
        spans.append((a, b, name))
    spans.sort()
    end = 0
    for a, b, name in spans:
        check(a == end, f"{path}: hole or overlap before {name}")
        end = b
    check(len(data) == 8 + n + end, f"{path}: file size {len(data)} != {8 + n + end}")
    order = [nm for _, _, nm in spans]
    want = sorted(hdr, key=lambda k: (-DTYPE_ORDER.index(hdr[k]["dtype"]), k))
    check(order == want, f"{path}: tensors not in safetensors writer order")
    return hdr, data, 8 + n


def check_model_dir(d, kind):
    cfg = json.load(open(os.path.join(d, "config.json")))
    idx = json.load(open(os.path.join(d, "model.safetensors.index.json")))
    files = sorted(set(idx["weight_map"].values()))
    check(len(files) >= 2, f"{d}: fewer than 2 shards")
    all_t, total = {}, 0
    for fn in files:
        hdr, data, base = read_header(os.path.join(d, fn))
        for name, e in hdr.items():
            check(idx["weight_map"].get(name) == fn, f"{d}: {name} not mapped to {fn}")
            all_t[name] = (e, data, base)
            total += e["data_offsets"][1] - e["data_offsets"][0]
    check(set(all_t) == set(idx["weight_map"]), f"{d}: index and shards disagree")
    check(idx["metadata"].get("total_size") == total, f"{d}: total_size {idx['metadata'].get('total_size')} != {total}")
    if kind == "llama":
        check(LLAMA_KEYS <= set(cfg), f"{d}: missing llama keys {LLAMA_KEYS - set(cfg)}")
        check(cfg["architectures"] == ["LlamaForCausalLM"], f"{d}: architectures")
        for name, (e, _, _) in all_t.items():
            check(e["dtype"] == "BF16", f"{d}: {name} is {e['dtype']}")
        return cfg, all_t
    want = DSV3_KEYS | ({"quantization_config"} if kind == "fp8" else set())
    check(set(cfg) == want, f"{d}: config keys differ: extra {set(cfg) - want} missing {want - set(cfg)}")
    check(set(cfg["rope_scaling"]) == ROPE_KEYS, f"{d}: rope_scaling keys")
    check(cfg["architectures"] == ["DeepseekV3ForCausalLM"] and cfg["model_type"] == "deepseek_v3", f"{d}: arch")
    if kind == "fp8":
        check(cfg["quantization_config"] == {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                             "weight_block_size": [128, 128]}, f"{d}: quantization_config")
    L, E = cfg["num_hidden_layers"], cfg["n_routed_experts"]
    for i in range(L):
        p = f"model.layers.{i}."
        for n in ("input_layernorm.weight", "post_attention_layernorm.weight", "self_attn.q_a_proj.weight",
                  "self_attn.q_a_layernorm.weight", "self_attn.q_b_proj.weight",
                  "self_attn.kv_a_proj_with_mqa.weight", "self_attn.kv_a_layernorm.weight",
                  "self_attn.kv_b_proj.weight", "self_attn.o_proj.weight"):
            check(p + n in all_t, f"{d}: missing {p + n}")
        if i < cfg["first_k_dense_replace"]:
            for n in ("gate_proj", "up_proj", "down_proj"):
                check(f"{p}mlp.{n}.weight" in all_t, f"{d}: missing {p}mlp.{n}.weight")
        else:
            check(all_t.get(p + "mlp.gate.e_score_correction_bias", ({"dtype": "?"},))[0]["dtype"] == "F32",
                  f"{d}: {p}mlp.gate.e_score_correction_bias not F32")
            check(all_t[p + "mlp.gate.weight"][0]["shape"] == [E, cfg["hidden_size"]], f"{d}: gate shape")
            for e in range(E):
                check(f"{p}mlp.experts.{e}.down_proj.weight" in all_t, f"{d}: missing expert {e} in layer {i}")
            check(f"{p}mlp.shared_experts.up_proj.weight" in all_t, f"{d}: missing shared expert layer {i}")
    for n in ("model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"):
        check(n in all_t, f"{d}: missing {n}")
    for name, (e, data, base) in all_t.items():
        if name.endswith("_scale_inv"):
            continue
        if kind == "fp8" and FP8_RE.match(name):
            check(e["dtype"] == "F8_E4M3", f"{d}: {name} should be F8_E4M3")
            s = all_t.get(name + "_scale_inv")
            check(s is not None, f"{d}: {name}_scale_inv missing")
            if s:
                o, i = e["shape"]
                check(s[0]["dtype"] == "F32" and s[0]["shape"] == [-(-o // 128), -(-i // 128)],
                      f"{d}: {name}_scale_inv shape/dtype")
            a, b = e["data_offsets"]
            blob = data[base + a:base + b]
            check(b"\x7f" not in blob and b"\xff" not in blob, f"{d}: {name} has FP8 NaN codes")
        elif name.endswith("e_score_correction_bias"):
            pass
        else:
            check(e["dtype"] == "BF16", f"{d}: {name} is {e['dtype']}, want BF16")
    return cfg, all_t


# ------------------------------------------------------------------ 5/6. tokenizer and golden

def check_tokenizer(d, vocab_size):
    tj = json.load(open(os.path.join(d, "tokenizer.json"), encoding="utf-8"))
    check(tj["pre_tokenizer"] == bpe.DS_PRETOKENIZER, f"{d}: pre_tokenizer differs from DeepSeek-V3's")
    check(tj["model"]["type"] == "BPE" and tj["model"]["byte_fallback"] is False, f"{d}: model type/flags")
    check(tj["decoder"]["type"] == "ByteLevel", f"{d}: decoder")
    sp = {a["content"]: a["id"] for a in tj["added_tokens"]}
    check(sp.get(bpe.BOS) == 0 and sp.get(bpe.EOS) == 1, f"{d}: BOS/EOS ids")
    ids = set(tj["model"]["vocab"].values()) | set(sp.values())
    check(max(ids) < vocab_size and len(ids) == max(ids) + 1, f"{d}: vocab ids not dense below vocab_size")
    tc = json.load(open(os.path.join(d, "tokenizer_config.json"), encoding="utf-8"))
    check(tc["add_bos_token"] is True and tc["bos_token"]["content"] == bpe.BOS
          and tc["eos_token"]["content"] == bpe.EOS, f"{d}: tokenizer_config")


def check_chat():
    d, base = os.path.join(HERE, "tiny-dsv3-chat"), os.path.join(HERE, "tiny-dsv3")
    if not os.path.exists(os.path.join(d, "tokenizer_config.json")):
        return      # reported by the model directory checks
    same = lambda f: open(os.path.join(d, f), "rb").read() == open(os.path.join(base, f), "rb").read()
    check(same("tokenizer.json") and same("config.json"), f"{d}: config.json / tokenizer.json differ from tiny-dsv3's")
    tc = json.load(open(os.path.join(d, "tokenizer_config.json"), encoding="utf-8"))
    t = tc.get("chat_template")
    check(isinstance(t, str) and hashlib.sha256(t.encode("utf-8")).hexdigest() == V31_SHA256,
          f"{d}: chat_template is not DeepSeek-V3.1's")
    tb = json.load(open(os.path.join(base, "tokenizer_config.json"), encoding="utf-8"))
    check({k: v for k, v in tc.items() if k != "chat_template"} == tb, f"{d}: tokenizer_config differs from tiny-dsv3's")


def check_golden():
    g = os.path.join(HERE, "golden")
    if not os.path.exists(os.path.join(g, "golden.json")):
        check(False, "golden/golden.json missing")
        return
    doc = json.load(open(os.path.join(g, "golden.json"), encoding="utf-8"))
    tok = bpe.Tokenizer.load(os.path.join(HERE, "tiny-dsv3", "tokenizer.json"))
    for p in doc["prompts"]:
        check(tok.encode(p["text"], add_bos=True) == p["ids"], "golden prompt ids differ from bpe.py")
    for m, e in doc["models"].items():
        size = os.path.getsize(os.path.join(g, e["logits_file"]))
        want = sum(4 * math.prod(x["shape"]) for x in e["prompts"])
        check(size == want, f"golden {m}: logits file {size} bytes, want {want}")
        for x, p in zip(e["prompts"], doc["prompts"]):
            check(x["n_tokens"] == len(p["ids"]) and x["shape"][1] == e["vocab_size"], f"golden {m}: shapes")
    cases = json.load(open(os.path.join(g, "tokenizer_cases.json"), encoding="utf-8"))
    for c in cases["cases"]:
        check(tok.encode(c["text"]) == c["ids"], f"tokenizer case {c['text'][:30]!r} differs")
        check(tok.pieces(c["text"]) == c["pieces"], f"tokenizer case pieces {c['text'][:30]!r} differ")
        check(tok.decode(c["ids"], skip_special=False) == c["text"], f"tokenizer case {c['text'][:30]!r} round trip")


def main():
    data = os.path.join(HERE, "data")
    test = read_jsonl(os.path.join(data, "gsm_test.jsonl"))
    fewshot = read_jsonl(os.path.join(data, "gsm_fewshot.jsonl"))
    check(len(test) == 300, "gsm_test.jsonl should hold 300 problems")
    for i, r in enumerate(test):
        check_answer(r, f"gsm_test:{i + 1}")
    for i, r in enumerate(fewshot):
        check_answer(r, f"gsm_fewshot:{i + 1}")
    for lv in ("full", "small"):
        for i, r in enumerate(gen_gsm.generate("train", 3000, level=lv)):
            check_answer(r, f"train[{lv}]:{i + 1}")
    check_disjoint(test, fewshot, int(os.environ.get("SAMPLES_N_TRAIN", "150000")))
    for name, kind in (("tiny-dsv3", "bf16"), ("tiny-dsv3-fp8", "fp8"), ("tiny-llama", "llama"),
                       ("tiny-dsv3-chat", "bf16")):
        d = os.path.join(HERE, name)
        if not os.path.exists(os.path.join(d, "config.json")):
            check(False, f"{name}/config.json missing")
            continue
        cfg, _ = check_model_dir(d, kind)
        check_tokenizer(d, cfg["vocab_size"])
    check_chat()
    check_golden()
    total = 0
    for root, _, files in os.walk(HERE):
        if os.sep + "work" in root[len(HERE):] or "__pycache__" in root:
            continue
        total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
    check(total < 56 * 1024 * 1024, f"samples/ is {total} bytes (limit 56 MB)")
    print(("FAILED %d checks" % len(FAILS)) if FAILS else "samples: all checks passed")
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
