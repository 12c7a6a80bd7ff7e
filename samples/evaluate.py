#!/usr/bin/python3
"""Load a sample model directory and measure it with the python reference.

  * load_dir(dir): config.json + model.safetensors.index.json shards -> float32
    model.  BF16 -> float32 exactly; F8_E4M3 weights with weight_scale_inv are
    dequantized to float32 as fp8 * scale (no BF16 rounding).
  * perplexity(model, tok, text, ctx=512): tokens = encode(text) without BOS,
    cut into consecutive chunks of ctx-1 tokens; each window is [BOS] + chunk and
    every chunk token is scored (the first from BOS alone).  ppl = exp(mean NLL).
  * gsm(model, tok, test, fewshot): lm-eval gsm8k v3 layout, 5-shot.  For test
    item i the shots are fewshot[(5*i + j) % len(fewshot)], j = 0..4, each
    "Question: {q}\\nAnswer: {a}\\n\\n"; the prompt ends "Question: {q}\\nAnswer:"
    and starts with BOS.  Greedy, stop at "Question:" / "</s>" / "<|im_end|>" /
    EOS or after max_new tokens; strict-match and flexible-extract scored as lm-eval.

Usage: evaluate.py DIR [--gsm N] [--ppl] [--threads 2] [--json OUT]
       evaluate.py --ckpt work/dsv3/ckpt.pt ...   (a training checkpoint, float32)
"""
import argparse
import json
import math
import os
import re
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bpe  # noqa: E402
import dsv3_ref  # noqa: E402
import fp8  # noqa: E402
import st_io  # noqa: E402

DATA = os.path.join(HERE, "data")
UNTIL = ["Question:", "</s>", "<|im_end|>"]
APACHE_MARK = "\n                                 Apache License\n"   # first line of Apache-2.0 in heldout.txt


def load_tensors(d):
    """name -> float32 torch tensor for a model directory (sharded or single file)."""
    idx = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(idx):
        with open(idx) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    raw = {}
    for fn in files:
        t, _ = st_io.read(os.path.join(d, fn))
        raw.update(t)
    out = {}
    for name, (dt, arr) in raw.items():
        if name.endswith("_scale_inv"):
            continue
        if dt == "F8_E4M3":
            sdt, s = raw[name + "_scale_inv"]
            assert sdt == "F32"
            out[name] = torch.from_numpy(fp8.dequantize_blocks(arr, s))
        elif dt == "BF16":
            out[name] = torch.from_numpy(st_io.bf16_to_f32(arr).copy())
        else:
            out[name] = torch.from_numpy(arr.astype(np.float32))
    return out


def load_dir(d):
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    m = dsv3_ref.build(cfg)
    sd = load_tensors(d)
    missing, unexpected = m.load_state_dict(sd, strict=False)
    assert not missing and not unexpected, (missing, unexpected)
    m.eval()
    return m, cfg


def load_ckpt(path):
    st = torch.load(path)
    m = dsv3_ref.build(st["cfg"])
    m.load_state_dict(st["model"])
    m.eval()
    return m, st["cfg"]


@torch.no_grad()
def perplexity(model, tok, text, ctx=512):
    ids = tok.encode(text)
    n = ctx - 1
    nll, cnt = 0.0, 0
    for s in range(0, len(ids), n):
        chunk = ids[s:s + n]
        x = torch.tensor([[tok.bos_id] + chunk])
        logits = model(x[:, :-1]).float()
        l = F.cross_entropy(logits[0], x[0, 1:], reduction="sum")
        nll += float(l)
        cnt += len(chunk)
    return math.exp(nll / cnt), cnt


def fmt(row):
    return "Question: " + row["question"] + "\nAnswer: " + row["answer"] + "\n\n"


def gsm_prompt(i, row, fewshot):
    shots = "".join(fmt(fewshot[(5 * i + j) % len(fewshot)]) for j in range(5))
    return shots + "Question: " + row["question"] + "\nAnswer:"


@torch.no_grad()
def greedy(model, prompts_ids, max_new, stop_fn, eos_id):
    """Batched greedy decoding with left padding and a KV cache; returns new token lists."""
    B = len(prompts_ids)
    L = max(len(p) for p in prompts_ids)
    x = torch.zeros(B, L, dtype=torch.long)
    valid = torch.zeros(B, L + max_new, dtype=torch.bool)
    for b, p in enumerate(prompts_ids):
        x[b, L - len(p):] = torch.tensor(p)
        valid[b, L - len(p):] = True
    cache = dsv3_ref.KVCache(len(model.model.layers))
    logits = model(x, cache=cache, key_valid=valid)
    out = [[] for _ in range(B)]
    done = [False] * B
    for _ in range(max_new):
        nxt = logits[:, -1].argmax(-1)
        for b in range(B):
            if not done[b]:
                t = int(nxt[b])
                out[b].append(t)
                if t == eos_id or stop_fn(out[b]):
                    done[b] = True
        if all(done):
            break
        logits = model(nxt[:, None], cache=cache, key_valid=valid)
    return out


def cut_until(text):
    for u in UNTIL:
        k = text.find(u)
        if k >= 0:
            text = text[:k]
    return text


def normalize(s):
    s = s.replace(",", "").replace("$", "")
    s = re.sub(r"(?s).*#### ", "", s)
    s = re.sub(r"\.$", "", s)
    return s.strip().lower()


def strict(text):
    m = re.search(r"#### (\-?[0-9\.\,]+)", text)
    return m.group(1) if m else "[invalid]"


def flexible(text):
    ms = re.findall(r"(-?[$0-9.,]{2,})|(-?[0-9]+)", text)
    if not ms:
        return "[invalid]"
    g = ms[-1]
    return g[0] if g[0] else g[1]


def gsm(model, tok, test, fewshot, max_new=160, batch=16, log=None):
    prompts = [tok.encode(gsm_prompt(i, r, fewshot), add_bos=True) for i, r in enumerate(test)]
    order = sorted(range(len(test)), key=lambda i: len(prompts[i]))

    def stop_fn(ids):
        text = tok.decode(ids)
        return any(u in text for u in UNTIL)
    results = [None] * len(test)
    for s in range(0, len(order), batch):
        ids = order[s:s + batch]
        gens = greedy(model, [prompts[i] for i in ids], max_new, stop_fn, tok.eos_id)
        for i, g in zip(ids, gens):
            text = cut_until(tok.decode(g))
            ref = normalize(test[i]["answer"])
            results[i] = {"output": text, "strict": normalize(strict(text)) == ref,
                          "flexible": normalize(flexible(text)) == ref}
        if log:
            done = [r for r in results if r]
            log(f"gsm {len(done)}/{len(test)} strict {sum(r['strict'] for r in done)/len(done):.3f}")
    n = len(test)
    return {"n": n, "strict": sum(r["strict"] for r in results) / n,
            "flexible": sum(r["flexible"] for r in results) / n, "results": results,
            "max_prompt_tokens": max(len(p) for p in prompts)}


def read_jsonl(p):
    with open(p, encoding="utf-8") as f:
        return [json.loads(l) for l in f if l.strip()]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir", nargs="?")
    ap.add_argument("--ckpt")
    ap.add_argument("--tokenizer")
    ap.add_argument("--gsm", type=int, default=0, help="number of test problems (0: skip)")
    ap.add_argument("--ppl", action="store_true")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    if a.ckpt:
        model, cfg = load_ckpt(a.ckpt)
        tokp = a.tokenizer or os.path.join(HERE, "work", "tok", "tokenizer.json")
    else:
        model, cfg = load_dir(a.dir)
        tokp = a.tokenizer or os.path.join(a.dir, "tokenizer.json")
    tok = bpe.Tokenizer.load(tokp)
    res = {}
    t0 = time.time()
    if a.ppl:
        with open(os.path.join(DATA, "heldout.txt"), encoding="utf-8") as f:
            text = f.read()
        ppl, n = perplexity(model, tok, text)
        res["heldout_ppl"], res["heldout_tokens"] = ppl, n
        k = text.find(APACHE_MARK)
        if k > 0:
            res["heldout_gsm_part_ppl"] = perplexity(model, tok, text[:k])[0]
            res["heldout_prose_part_ppl"] = perplexity(model, tok, text[k:])[0]
            print(f"parts: gsm {res['heldout_gsm_part_ppl']:.4f} prose {res['heldout_prose_part_ppl']:.4f}")
        print(f"heldout ppl {ppl:.4f} over {n} tokens ({time.time()-t0:.0f}s)", flush=True)
    if a.gsm:
        test = read_jsonl(os.path.join(DATA, "gsm_test.jsonl"))[:a.gsm]
        shots = read_jsonl(os.path.join(DATA, "gsm_fewshot.jsonl"))
        r = gsm(model, tok, test, shots, log=lambda m: print(m, flush=True))
        res["gsm"] = {k: r[k] for k in ("n", "strict", "flexible", "max_prompt_tokens")}
        res["gsm_outputs"] = [x["output"] for x in r["results"]]
        print(f"gsm strict {r['strict']:.4f} flexible {r['flexible']:.4f} n {r['n']} ({time.time()-t0:.0f}s)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
