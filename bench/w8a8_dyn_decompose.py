#!/usr/bin/python3
"""w8a8_dyn_decompose.py - where w8a8-dynamic's KL divergence comes from on
the trained sample: weight-only int8 against activation-only int8, per linear
type, and what SmoothQuant scales on up_proj -> down_proj can do for the dense
layer's down_proj.

  /usr/bin/python3 bench/w8a8_dyn_decompose.py [MODEL] [--types] [--down]

A fake-quant reference in PyTorch (samples/dsv3_ref.py, float32), not dsq:
W8A8_DYNAMIC's arithmetic (per-output-channel symmetric int8 weights, scale
max|w|/127; per-token symmetric int8 activations, scale max|x|/127, codes
clamped to +-127) is applied to the chosen linears, every other tensor float.
KL(float || quantized) per position over samples/data/heldout.txt cut as
samples/evaluate.py perplexity() does (windows of BOS + 511 tokens, every token
scored, so ~20k positions; ds-eval kld scores ~10k of the same text), mean,
median, p99, same top-1. SmoothQuant scales for the down_proj input come from
64 windows of samples/data/calib.txt: s_j = max|X_j|^a / max|W_j|^(1-a),
normalized by sqrt(max * min) (calib/smooth.h); "GPTQ" is the plain GPTQ
solve (damp 0.01, no act-order) on the smoothed input's X^T X; "LS refit"
refits the float weights to the quantized input first (W' = W X^T Xq (Xq^T
Xq)^-1, the one part of per-token rounding error a weight can absorb).
Measurement only (CPU-bound, one thread; --types and --down can run as two
processes).
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "samples"))
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import bpe  # noqa: E402
import evaluate as ev  # noqa: E402

torch.set_num_threads(1)
args = [a for a in sys.argv[1:] if not a.startswith("--")]
flags = [a for a in sys.argv[1:] if a.startswith("--")] or ["--types", "--down"]
MODEL = args[0] if args else os.path.join(HERE, "..", "samples", "tiny-dsv3")
DATA = os.path.join(HERE, "..", "samples", "data")
model, cfg = ev.load_dir(MODEL)
tok = bpe.Tokenizer.load(os.path.join(MODEL, "tokenizer.json"))


def windows(path, ctx=512):
    ids = tok.encode(open(path, encoding="utf-8").read())
    return [torch.tensor([[tok.bos_id] + ids[s:s + ctx - 1]]) for s in range(0, len(ids), ctx - 1)]


held = windows(os.path.join(DATA, "heldout.txt"))
# batches of 8 full windows, the last (shorter) window alone: the same positions
full = [w for w in held if w.shape[1] == held[0].shape[1]]
held = [torch.cat(full[i:i + 8]) for i in range(0, len(full), 8)] + [w for w in held if w.shape[1] != held[0].shape[1]]
cal = windows(os.path.join(DATA, "calib.txt"))[:64]


def qrow(w):
    s = w.abs().amax(1, keepdim=True).clamp_min(1e-12) / 127
    return (w / s).round().clamp(-127, 127) * s, s


def qtok(x):
    s = x.abs().amax(-1, keepdim=True).clamp_min(1e-12) / 127
    return (x / s).round().clamp(-127, 127) * s


def fq(lin, wq=True, aq=True, s=None, w=None):
    """forward of lin replaced by y = Qa(x / s) Qw(W s)^T (s, w optional)"""
    w = (lin.weight.data * s if s is not None else lin.weight.data) if w is None else w
    wq_ = qrow(w)[0] if wq is True else (w if wq is False else wq)

    def fwd(x):
        xs = x / s if s is not None else x
        return (qtok(xs) if aq else xs) @ wq_.t()
    return fwd


with torch.no_grad():
    base = [F.log_softmax(model(w[:, :-1]).float(), -1).reshape(-1, cfg["vocab_size"]) for w in held]


def kld(patch):
    """patch: {module: forward}; returns mean, median, p99, same top-1"""
    for m, f in patch.items():
        m.forward = f
    vals, same = [], 0
    with torch.no_grad():
        for w, b in zip(held, base):
            lq = F.log_softmax(model(w[:, :-1]).float(), -1).reshape(-1, cfg["vocab_size"])
            vals.append((b.exp() * (b - lq)).sum(-1))
            same += int((b.argmax(-1) == lq.argmax(-1)).sum())
    for m in patch:
        del m.forward   # back to the class's forward
    v = torch.cat(vals)
    return float(v.mean()), float(v.median()), float(v.quantile(0.99)), same / len(v)


def row(label, patch, extra=""):
    r = kld(patch)
    print(f"| {label} | {r[0]:.5f} | {r[1]:.2e} | {r[2]:.4f} | {100 * r[3]:.2f}% |{extra}", flush=True)


def linears():
    """(layer, type, module): type names the HF tensor role"""
    for li, layer in enumerate(model.model.layers):
        for name, m in layer.named_modules():
            if not isinstance(m, torch.nn.Linear):
                continue
            if ".experts." in name:
                t = "routed experts' " + name.rsplit(".", 1)[1]
            elif "shared_experts." in name:
                t = "shared experts' " + name.rsplit(".", 1)[1]
            elif name.startswith("mlp."):
                t = "dense " + name.rsplit(".", 1)[1]
            else:
                t = name.rsplit(".", 1)[1]
            yield li, t, m


if "--types" in flags:
    print("\nOne linear type quantized (all layers), the rest float; heldout.txt (both sides: ds-eval, "
          "docs/calibration.md):\n")
    print("| quantized | mode | KLD mean | median | p99 | same top-1 |\n|---|---|---|---|---|---|")
    types = {}
    for li, t, m in linears():
        types.setdefault(t, []).append(m)
    for t, ms in types.items():
        for mode, wq, aq in (("weights int8 only", True, False), ("activations int8 only", False, True)):
            r = kld({m: fq(m, wq, aq) for m in ms})
            print(f"| {t} | {mode} | {r[0]:.5f} | {r[1]:.2e} | {r[2]:.4f} | {100 * r[3]:.2f}% |", flush=True)

if "--down" in flags:
    for li, layer in enumerate(model.model.layers):
        if not hasattr(layer.mlp, "down_proj"):
            continue
        lin = layer.mlp.down_proj
        caps = []
        h = lin.register_forward_hook(lambda m, i, o: caps.append(i[0].reshape(-1, i[0].shape[-1]).clone()))
        with torch.no_grad():
            for w in cal:
                model(w[:, :-1])
        h.remove()
        X = torch.cat(caps)
        W = lin.weight.data
        am = X.abs().amax(0)
        tmax = X.abs().amax(1)
        print(f"\nLayer {li} dense down_proj input on {X.shape[0]} calibration tokens: per-channel max|x| "
              f"largest {float(am.max()):.1f}, median {float(am.median()):.1f}; per token max|x| / median|x| "
              f"median {float((tmax / X.abs().median(1).values.clamp_min(1e-12)).median()):.0f}; "
              f"{100 * float((X.abs() < tmax[:, None] / 254).float().mean()):.0f}% of the values round to 0 "
              "in per-token int8\n")
        print("| layer %d down_proj alone | KLD mean | median | p99 | same top-1 |\n|---|---|---|---|---|" % li)
        row("float", {})
        row("weights int8 only", {lin: fq(lin, True, False)})
        row("activations int8 only", {lin: fq(lin, False, True)})
        row("RTN (both)", {lin: fq(lin)})
        wm, xm = W.abs().amax(0).clamp_min(1e-5), am.clamp_min(1e-5)
        for a in (0.5, 0.6, 0.7, 1.0):
            s = xm ** a / wm ** (1 - a)
            s = s / (s.max() * s.min()).sqrt()
            row(f"smoothed a={a}: weights only", {lin: fq(lin, True, False, s)})
            row(f"smoothed a={a}: activations only", {lin: fq(lin, False, True, s)})
            row(f"smoothed a={a}: both", {lin: fq(lin, True, True, s)})
            if a != 0.6:
                continue
            Ws, Xs = W * s, X / s
            Xq = qtok(Xs)
            H = (Xs.t() @ Xs).double()
            sys.path.insert(0, HERE)
            from w8a8_gptq_ref import gptq   # noqa: E402
            row(f"smoothed a={a}: GPTQ weights, both", {lin: fq(lin, gptq(Ws, H, qrow(Ws)[1]), True, s)})
            A = (Xq.t() @ Xq).double()
            Wf = torch.linalg.solve(A, (Xq.t() @ Xs).double() @ Ws.double().t()).t().float()
            row(f"smoothed a={a}: LS refit + GPTQ, both", {lin: fq(lin, gptq(Wf, A, qrow(Wf)[1]), True, s)})
