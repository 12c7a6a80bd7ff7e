#!/usr/bin/python3
"""Make tiny-dsv32 (DeepSeek-V3.2 architecture) from tiny-dsv3: its weights, frozen, plus a
lightning indexer per layer trained the way DeepSeek trained V3.2's, on CPU.

  train_dsv32.py --src tiny-dsv3 --out tiny-dsv32 --fp8-out tiny-dsv32-fp8

1. Dense warm-up: the model attends densely; each layer's indexer is fitted by KL
   divergence to the layer's attention distribution summed over heads and
   L1-normalised (target p[t, s]), against softmax over the causal keys of the
   indexer's float scores sum_h ReLU(q_h . k_s) w_h.
2. Sparse stage: the model attends only to the indexer's top index_topk keys; the
   KL is taken over the selected keys only (both distributions renormalised there).
The model itself stays frozen in both stages (DeepSeek also trains it in the
sparse stage; a frozen tiny-dsv3 keeps the sample's other numbers comparable).
Data: windows of samples/data/calib.txt (held-out text is not trained on).

Writes the BF16 directory (tiny-dsv3's tensors unchanged, indexer linears BF16,
k_norm F32) and the FP8 directory: every linear DeepSeek ships in FP8 (tiny-dsv3-fp8's
set plus indexer.wq_b and indexer.wk; weights_proj stays BF16) as F8_E4M3 with
power-of-two (ue8m0) block scales, and quantization_config with scale_fmt ue8m0.
Then measures, on samples/data/heldout.txt, dense vs sparse perplexity (fp8 and
float DSA) and the indexer's recall of the dense attention's top keys, and writes
the README.
"""
import argparse
import json
import math
import os
import shutil
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bpe  # noqa: E402
import dsv32_ref as R  # noqa: E402
import evaluate  # noqa: E402
import export  # noqa: E402
import fp8  # noqa: E402
import st_io  # noqa: E402

INDEX = {"index_n_heads": 4, "index_head_dim": 64, "index_topk": 64}
FP8_INDEXER = ("indexer.wq_b.weight", "indexer.wk.weight")


def windows(tok, path, seq, bos):
    ids = tok.encode(open(path, encoding="utf-8").read())
    n = (len(ids) - 1) // (seq - 1)
    return torch.tensor([[bos] + ids[i * (seq - 1):(i + 1) * (seq - 1)] for i in range(n)])


def index_scores(ix, x, qr, pos, freqs):
    """Differentiable float indexer scores [B,S,T] with the causal mask."""
    B, S, _ = x.shape
    q = ix.wq_b(qr).view(B, S, ix.nh, ix.hd)
    q = torch.cat([R.rope_half(q[..., :ix.rope], pos, freqs), q[..., ix.rope:]], -1)
    k = ix.k_norm(ix.wk(x))
    k = torch.cat([R.rope_half(k[..., :ix.rope], pos, freqs), k[..., ix.rope:]], -1)
    w = ix.weights_proj(x) * (ix.nh ** -0.5 * ix.hd ** -0.5)
    sc = (torch.einsum("bshd,btd->bsht", q, k).clamp(min=0) * w.unsqueeze(-1)).sum(2)
    causal = torch.arange(S)[None, :] > torch.arange(S)[:, None]
    return sc.masked_fill(causal[None], float("-inf"))


def attn_layers(model):
    return [layer.self_attn for layer in model.model.layers]


def step_loss(model, ids, sparse):
    B, S = ids.shape
    caps = []
    for a in attn_layers(model):
        a.dense = not sparse
        a.capture = caps
    with torch.no_grad():
        model(ids)
    pos = torch.arange(S)[None, :].expand(B, S)
    loss = 0.0
    for a, (x, qr, p, idx) in zip(attn_layers(model), caps):
        a.capture = None
        t = p / p.sum(-1, keepdim=True)                       # heads summed, L1-normalised
        sc = index_scores(a.indexer, x, qr, pos, a.freqs)
        if sparse:
            sel = torch.full_like(sc, float("-inf")).scatter_(-1, idx, 0.0)
            sc = sc + sel
            t = t * torch.isfinite(sel)
            t = t / t.sum(-1, keepdim=True).clamp(min=1e-20)
        logq = torch.log_softmax(sc, -1)
        kl = (t * (torch.log(t.clamp(min=1e-20)) - logq.masked_fill(t == 0, 0.0))).sum(-1)
        loss = loss + kl[:, 1:].mean()
    return loss / len(caps)


def ppl_and_recall(model, data, dsa_topk):
    """Perplexity of data [N, S] and the indexer's recall of each layer's dense top-k keys."""
    nll, n, hit, tot = 0.0, 0, 0, 0
    for a in attn_layers(model):
        a.dense = dsa_topk is None
    caps = []
    with torch.no_grad():
        for i in range(data.shape[0]):
            x = data[i:i + 1]
            for a in attn_layers(model):
                a.capture = caps if dsa_topk is None else None
            logits = model(x)
            nll += F.cross_entropy(logits[0, :-1].float(), x[0, 1:], reduction="sum").item()
            n += x.shape[1] - 1
            for a, (_, _, p, idx) in zip(attn_layers(model), caps):
                k = a.indexer.topk
                S = p.shape[1]
                for q in range(k, S):                       # rows that have more keys than k
                    dense_top = set(p[0, q, :q + 1].topk(k)[1].tolist())
                    hit += len(dense_top & set(idx[0, q].tolist()))
                    tot += k
            caps.clear()
    for a in attn_layers(model):
        a.capture = None
        a.dense = False
    return math.exp(nll / n), (hit / tot if tot else float("nan"))


def ue8m0_blocks(w):
    """fp8.quantize_blocks with each block scale rounded up to a power of two (ue8m0)."""
    w = np.asarray(w, np.float32)
    o, i = w.shape
    B = fp8.BLOCK
    so, si = -(-o // B), -(-i // B)
    scale = np.ones((so, si), np.float32)
    q = np.zeros((o, i), np.uint8)
    for bi in range(so):
        for bj in range(si):
            t = w[bi * B:(bi + 1) * B, bj * B:(bj + 1) * B]
            s = float(R.ue8m0_scale(torch.tensor(float(np.abs(t).max()))))
            scale[bi, bj] = s
            q[bi * B:(bi + 1) * B, bj * B:(bj + 1) * B] = fp8.encode(t / s)
    return q, scale


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", default=os.path.join(HERE, "tiny-dsv3"))
    ap.add_argument("--out", default=os.path.join(HERE, "tiny-dsv32"))
    ap.add_argument("--fp8-out", default=os.path.join(HERE, "tiny-dsv32-fp8"))
    ap.add_argument("--dense-steps", type=int, default=240)
    ap.add_argument("--sparse-steps", type=int, default=60)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    with open(os.path.join(args.src, "config.json")) as f:
        cfg = json.load(f)
    cfg.update(architectures=["DeepseekV32ForCausalLM"], model_type="deepseek_v32", **INDEX)
    cfg.pop("auto_map", None)
    model = R.build(cfg, "float")
    src = evaluate.load_tensors(args.src)
    missing, unexpected = model.load_state_dict(src, strict=False)
    assert not unexpected and all(".indexer." in m for m in missing), (missing, unexpected)
    for name, p in model.named_parameters():
        p.requires_grad_(".indexer." in name)
        if ".indexer." in name and p.dim() == 2:
            with torch.no_grad():
                p.normal_(0, p.shape[1] ** -0.5)
    model.eval()
    tok = bpe.Tokenizer.load(os.path.join(args.src, "tokenizer.json"))
    train = windows(tok, os.path.join(HERE, "data", "calib.txt"), args.seq, cfg["bos_token_id"])
    held = windows(tok, os.path.join(HERE, "data", "heldout.txt"), args.seq, cfg["bos_token_id"])
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.0)
    g = torch.Generator().manual_seed(args.seed)
    log = []
    t0 = time.time()
    total = args.dense_steps + args.sparse_steps
    for step in range(total):
        sparse = step >= args.dense_steps
        lr = args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / total)))
        for grp in opt.param_groups:
            grp["lr"] = lr
        b = train[torch.randint(0, train.shape[0], (args.batch,), generator=g)]
        loss = step_loss(model, b, sparse)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        if step % 20 == 0 or step == total - 1:
            line = "step %d (%s) kl %.4f lr %.2g %.0fs" % (step, "sparse" if sparse else "dense", loss.item(), lr,
                                                          time.time() - t0)
            print(line, flush=True)
            log.append(line)

    # tensors: tiny-dsv3's as stored, plus the indexer
    raw = {}
    for fn in sorted(set(json.load(open(os.path.join(args.src, "model.safetensors.index.json")))["weight_map"].values())):
        t, _ = st_io.read(os.path.join(args.src, fn))
        raw.update(t)
    for name, p in model.state_dict().items():
        if ".indexer." not in name:
            continue
        if "k_norm" in name:
            raw[name] = ("F32", p.float().numpy())
        else:
            raw[name] = ("BF16", st_io.bf16_bits(p))
    export.write_dir(args.out, cfg, raw, args.src)
    fcfg = dict(cfg, quantization_config={"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                          "scale_fmt": "ue8m0", "weight_block_size": [128, 128]})
    fraw = {}
    for name, (dt, arr) in raw.items():
        if export.is_fp8_linear(name) or name.endswith(FP8_INDEXER):
            w = st_io.bf16_to_f32(arr) if dt == "BF16" else arr.astype(np.float32)
            q, s = ue8m0_blocks(w)
            fraw[name] = ("F8_E4M3", q)
            fraw[name + "_scale_inv"] = ("F32", s)
        else:
            fraw[name] = (dt, arr)
    export.write_dir(args.fp8_out, fcfg, fraw, args.src)

    # measurements on held-out text (the BF16 weights as written)
    rows = []
    for dsa in ("fp8", "float"):
        m = R.build(cfg, dsa)
        m.load_state_dict(evaluate.load_tensors(args.out))
        m.eval()
        pd, rec = ppl_and_recall(m, held, None)
        ps, _ = ppl_and_recall(m, held, cfg["index_topk"])
        rows.append((dsa, pd, ps, rec))
    with open(os.path.join(args.out, "train_log.txt"), "w") as f:
        f.write("\n".join(log) + "\n")
    with open(os.path.join(args.out, "measured.json"), "w") as f:
        json.dump({"heldout_windows": int(held.shape[0]), "seq": args.seq,
                   "rows": [{"dsa": r[0], "ppl_dense": r[1], "ppl_sparse": r[2], "recall_top_k": r[3]} for r in rows]},
                  f, indent=1)
    for r in rows:
        print("dsa %s: heldout ppl dense %.3f, sparse (top %d) %.3f, indexer recall of the dense top-%d keys %.3f"
              % (r[0], r[1], cfg["index_topk"], r[2], cfg["index_topk"], r[3]))


if __name__ == "__main__":
    main()
