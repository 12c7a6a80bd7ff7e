#!/usr/bin/python3
"""Golden reference outputs for the C engine and tokenizer (samples/golden/).

For each model directory (tiny-dsv3 BF16, tiny-dsv3-fp8 dequantized, tiny-llama)
and each prompt in PROMPTS:
  * the prompt token ids (BOS + encode(prompt)),
  * float32 logits of the LAST_N final positions of a full forward over the
    prompt (row-major [LAST_N, vocab], little-endian) in <model>.logits.f32,
  * the greedy continuation (GREEDY_N tokens; argmax, first index on ties,
    full recompute each step, no stop condition) and, per step, the margin
    top1 - top2 logit (a C engine may legitimately diverge after a step whose
    margin is within its numerical error).
Weights: BF16 -> float32 exactly; FP8 -> float32(fp8) * scale in float32.
All arithmetic float32 (torch CPU), so a C engine should match to ~1e-4 relative.

tokenizer_cases.json: extra strings and their ids (no BOS) under the sample
tokenizer, for checking a C implementation of the DeepSeek pre-tokenizer + BPE.

Usage: make_golden.py [--out golden]
"""
import argparse
import json
import os
import re
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bpe  # noqa: E402
import evaluate  # noqa: E402

LAST_N = 3
GREEDY_N = 24
MODELS = ["tiny-dsv3", "tiny-dsv3-fp8", "tiny-llama"]


def prompts():
    shots = evaluate.read_jsonl(os.path.join(HERE, "data", "gsm_fewshot.jsonl"))
    test = evaluate.read_jsonl(os.path.join(HERE, "data", "gsm_test.jsonl"))
    return [
        "Question: Tom has 3 boxes of 12 pens. He gives away 5 pens. How many pens does Tom have left?\nAnswer:",
        evaluate.fmt(shots[0]) + "Question: " + test[0]["question"] + "\nAnswer:",
        "This License applies to any program or other work which contains a notice placed by the copyright",
        "Question: Mia buys 4 packs of 6 stickers and 2 packs of 9 stickers. How many stickers did she buy?\nAnswer: Mia",
    ]


TOKENIZER_CASES = [
    "Hello world",
    "Question: Anna has 12 apples.\nAnswer: 3*12=<<3*12=36>>36\n#### 36\n\n",
    "1234567 and 1,000.50 dollars",
    "  leading spaces,\ttabs\tand\n\n\nnewlines  \n",
    "it's don't we'll I'M",
    "caf\u00e9 na\u00efve \u00fcber \u00c5ngstr\u00f6m",
    "\u4e2d\u6587\u5b57\u7b26 \u3072\u3089\u304c\u306a \u30ab\u30bf\u30ab\u30ca mixed\u6f22\u5b57",
    "emoji \U0001F600 and symbols \u20ac\u00a3\u00a5 \u00bd \u0663\u0664",
    "punctuation!!! ...??? (a) [b] {c} <d> @e #f $g %h ^i &j *k",
    bpe.BOS + "special tokens inline" + bpe.EOS,
    "x=<<3-1=2>>2.",
    "",
]


@torch.no_grad()
def run_model(d, plist, tok):
    model, cfg = evaluate.load_dir(d)
    blobs, entries = [], []
    for p in plist:
        ids = tok.encode(p, add_bos=True)
        x = torch.tensor([ids])
        logits = model(x)[0].float()
        last = logits[-LAST_N:].contiguous().numpy().astype("<f4")
        gen, margins = [], []
        cur = list(ids)
        for _ in range(GREEDY_N):
            lg = model(torch.tensor([cur]))[0, -1]
            t = int(torch.argmax(lg))
            top2 = torch.topk(lg, 2)[0]
            margins.append(round(float(top2[0] - top2[1]), 6))
            gen.append(t)
            cur.append(t)
        entries.append({"n_tokens": len(ids), "positions": list(range(len(ids) - LAST_N, len(ids))),
                        "offset_bytes": sum(b.nbytes for b in blobs), "shape": list(last.shape),
                        "argmax": [int(i) for i in last.argmax(-1)], "greedy_ids": gen, "greedy_margins": margins,
                        "greedy_text": tok.decode(gen)})
        blobs.append(last)
    return np.concatenate([b.reshape(-1) for b in blobs]), entries, cfg["vocab_size"]


def dump(obj, path):
    """JSON with one-line number lists (readable diffs, small files)."""
    text = json.dumps(obj, ensure_ascii=False, indent=1)
    text = re.sub(r"\[\s*(-?[0-9.e+-]+(?:,\s*-?[0-9.e+-]+)*)\s*\]",
                  lambda m: "[" + ", ".join(x.strip() for x in m.group(1).split(",")) + "]", text)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(HERE, "golden"))
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    os.makedirs(a.out, exist_ok=True)
    tok = bpe.Tokenizer.load(os.path.join(HERE, "tiny-dsv3", "tokenizer.json"))
    plist = prompts()
    doc = {
        "description": "see samples/make_golden.py; logits files are little-endian float32 [positions, vocab] "
                       "blocks back to back, one block per prompt at offset_bytes",
        "bos_added": True,
        "last_n_positions": LAST_N,
        "greedy_tokens": GREEDY_N,
        "prompts": [{"text": p, "ids": tok.encode(p, add_bos=True)} for p in plist],
        "models": {},
    }
    for m in MODELS:
        d = os.path.join(HERE, m)
        if not os.path.exists(os.path.join(d, "config.json")):
            print("skip", m, "(not exported)")
            continue
        flat, entries, vocab = run_model(d, plist, tok)
        fn = m + ".logits.f32"
        flat.astype("<f4").tofile(os.path.join(a.out, fn))
        doc["models"][m] = {"dir": "samples/" + m, "logits_file": fn, "vocab_size": vocab, "prompts": entries}
        print(m, [e["greedy_text"][:40] for e in entries])
    dump(doc, os.path.join(a.out, "golden.json"))
    cases = [{"text": s, "ids": tok.encode(s), "pieces": tok.pieces(s)} for s in TOKENIZER_CASES]
    dump({"tokenizer": "samples/tiny-dsv3/tokenizer.json", "bos_added": False,
          "note": "pieces = the three Split stages of the pre_tokenizer before ByteLevel mapping; "
                  "special tokens inside text are matched first (they are not pre-split)",
          "cases": cases}, os.path.join(a.out, "tokenizer_cases.json"))


if __name__ == "__main__":
    main()
