#!/usr/bin/python3
"""Train mid-dsv3, the larger DeepSeek-V3-architecture sample, on one GPU.

The bundled tiny-dsv3 (5M parameters, GSM-style text only) is small enough that a
few near-tie tokens carry a quantizer's mean KLD.  mid-dsv3 has 26M parameters
(model_configs.DSV3_MID: hidden 384, 5 layers, 32 routed experts of which 4 per
token, every matrix dimension a multiple of 128 as in DeepSeek-V3) and is trained
on more varied text:

  source      share  what
  gsm_syn     0.40   gen_gsm train problems, 60,000 "full" + 60,000 "small" level
  drill       0.10   arithmetic drill lines (train.load_drills, "small" level)
  gsm_real    0.15   GSM8K train ($DSQ_DATA/gsm8k/train.jsonl), 7,473 problems
  stories     0.13   TinyStories validation text, all but its last 1/8 of lines
  wiki        0.17   WikiText-2 raw test text, all but its last 1/8 of lines
  prose       0.05   the training licenses (corpus.prose_docs)

The last 1/8 of the lines of the two text files (heldout_split) is never trained
on: bench/calib_quality.sh scores quantized models on it.  Real GSM8K test
problems and samples/data/heldout.txt are held out as well.

Two steps, so that the GPU machine needs no tokenizer and no data directory:
  train_gpu.py prep --out samples/work/mid          (CPU: tokenize, data.npz)
  train_gpu.py train --data samples/work/mid/data.npz --out DIR --minutes 6
The train step measures its own step time over the first steps and fixes the
step count from --minutes, then runs a cosine schedule over exactly that many
steps (the count is logged: --steps N reproduces the run without the timer).
It writes DIR/mid-dsv3/: BF16 safetensors in 4 shards of under 16 MiB + index,
config.json, generation_config.json, and DIR/train.log.  The tokenizer files are
tiny-dsv3's: copy samples/tiny-dsv3/tokenizer*.json into DIR/mid-dsv3
(samples/README.md gives the commands).
"""
import argparse
import json
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import dsv3_ref  # noqa: E402
import model_configs  # noqa: E402

MIX = [("gsm_syn", 0.40), ("drill", 0.10), ("gsm_real", 0.15), ("stories", 0.13), ("wiki", 0.17),
       ("prose", 0.05)]
DOC_SOURCES = ("gsm_syn", "gsm_real")      # windows of whole problems back to back
SHARD_LIMIT = 15_000_000                   # bytes; the device returns files of at most 16 MiB


def heldout_split(lines):
    """(train, held-out): the held-out part is the last len/8 lines (bench/calib_quality.sh
    cuts the same with tail -n: its tail8)."""
    k = len(lines) // 8
    return lines[:len(lines) - k], lines[len(lines) - k:]


def prep(a):
    import bpe
    import corpus
    import gen_gsm
    import train as tr
    tok = bpe.Tokenizer.load(a.tokenizer)
    arrays = {}

    def docs(name, texts):
        toks, offs = [], [0]
        for t in texts:
            toks.extend(tok.encode(t))
            offs.append(len(toks))
        arrays[name] = np.array(toks, np.uint16)
        arrays[name + "_offs"] = np.array(offs, np.int64)
        print(f"{name}: {len(texts)} docs, {len(toks)} tokens", flush=True)

    syn = gen_gsm.generate("train", 60000, level="full") + gen_gsm.generate("train", 60000, level="small")
    docs("gsm_syn", [corpus.fmt(r) for r in syn])
    with open(os.path.join(a.shared, "gsm8k", "train.jsonl"), encoding="utf-8") as f:
        real = [json.loads(l) for l in f if l.strip()]
    docs("gsm_real", [corpus.fmt(r) for r in real])
    for name, fn in (("stories", "tinystories_val.txt"), ("wiki", "wiki.test.raw")):
        with open(os.path.join(a.shared, "text", fn), encoding="utf-8") as f:
            lines = f.read().splitlines(keepends=True)
        train_lines, _ = heldout_split(lines)
        docs(name, ["".join(train_lines)])
    docs("prose", corpus.prose_docs())
    drills = tr.load_drills(tok, "small")
    arrays["drill"] = np.concatenate(drills).astype(np.uint16)
    arrays["drill_offs"] = np.concatenate([[0], np.cumsum([len(d) for d in drills])]).astype(np.int64)
    print(f"drill: {len(drills)} lines, {len(arrays['drill'])} tokens", flush=True)
    arrays["bos"] = np.array([tok.bos_id], np.int64)
    os.makedirs(a.out, exist_ok=True)
    tmp = os.path.join(a.out, "data.tmp.npz")
    np.savez_compressed(tmp, **arrays)
    os.replace(tmp, os.path.join(a.out, "data.npz"))


def make_batch(rng, bs, seq, data, bos):
    """[bs, seq] windows: BOS + whole documents back to back (problem sources, drill
    lines) or a contiguous stretch (text sources); the source drawn per row by MIX."""
    names = [n for n, _ in MIX]
    p = np.array([w for _, w in MIX])
    rows = []
    for src in rng.choice(len(names), size=bs, p=p / p.sum()):
        name = names[src]
        toks, offs = data[name], data[name + "_offs"]
        if name in DOC_SOURCES or name == "drill":
            parts, n = [], 0
            while n < seq - 1:
                i = rng.integers(len(offs) - 1)
                parts.append(toks[offs[i]:offs[i + 1]])
                n += len(parts[-1])
            body = np.concatenate(parts)[:seq - 1]
        else:
            s = rng.integers(0, len(toks) - seq)
            body = toks[s:s + seq - 1]
        rows.append(np.concatenate([[bos], body.astype(np.int64)]))
    return torch.from_numpy(np.stack(rows))


def causal_sdpa(q, k, v, mask, scale):
    """dsv3_ref.sdpa for training (no cache, no padding): the fused kernel, same math."""
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)


def export(model, cfg, out):
    import export as export_mod
    import st_io
    tensors = {}
    for n, t in model.state_dict().items():
        t = t.detach().float().cpu()
        tensors[n] = ("F32", t.numpy()) if n.endswith("e_score_correction_bias") else ("BF16", st_io.bf16_bits(t))

    def order(n):   # embeddings, layers in order, final norm and lm_head last
        if n.startswith("model.layers."):
            return (1, int(n.split(".")[2]), n)
        return (0 if n.startswith("model.embed_tokens") else 2, 0, n)
    parts, size = [{}], 0   # fill each shard up to SHARD_LIMIT, tensor by tensor
    for n in sorted(tensors, key=order):
        b = tensors[n][1].nbytes
        if size + b > SHARD_LIMIT and parts[-1]:
            parts.append({})
            size = 0
        parts[-1][n] = tensors[n]
        size += b
    return export_mod.write_shards(out, cfg, parts)


def train(a):
    import train as tr
    dev = torch.device(a.device)
    torch.manual_seed(a.seed)
    cfg = dict(model_configs.DSV3_MID)
    if a.smoke:   # a few steps of a narrow model on CPU: checks the script, not the recipe
        cfg.update(num_hidden_layers=2, n_routed_experts=8, hidden_size=128, intermediate_size=256)
    z = np.load(a.data)
    data = {k: z[k] for k in z.files}
    bos = int(data["bos"][0])
    os.makedirs(a.out, exist_ok=True)
    log = open(os.path.join(a.out, "train.log"), "a")

    def say(msg):
        print(msg, flush=True)
        log.write(msg + "\n")
        log.flush()
    if hasattr(F, "scaled_dot_product_attention"):   # torch >= 2.1 (not Debian's 1.13)
        dsv3_ref.sdpa = causal_sdpa
    gate_fwd = dsv3_ref.Gate.forward

    def gate_f32(self, x):   # routing in f32 as at inference, not in autocast's bf16
        with torch.autocast(device_type=x.device.type, enabled=False):
            return gate_fwd(self, x.float())
    dsv3_ref.Gate.forward = gate_f32
    model = dsv3_ref.build(cfg)
    tr.init_weights(model, cfg)
    model.to(dev)
    nparam = sum(p.numel() for p in model.parameters())
    say(f"mid-dsv3: {nparam / 1e6:.2f}M params, device {dev}"
        + (f" ({torch.cuda.get_device_name(dev)})" if dev.type == "cuda" else "")
        + ", sources " + ", ".join(f"{n} {len(data[n])} tok" for n, _ in MIX))
    opt = tr.adamw(model, a.lr, a.wd, **({"fused": True} if dev.type == "cuda" else {}))
    amp = dev.type == "cuda"
    steps = a.steps
    t0 = time.time()
    step, tstart = 0, None
    run_loss, run_n, last_mean = 0.0, 0, float("nan")   # mean loss over each log interval
    while steps == 0 or step < steps:
        rng = np.random.default_rng([a.seed, step])
        x = make_batch(rng, a.batch, a.seq, data, bos).to(dev, non_blocking=True)
        lr = tr.lr_at(step, steps or 10 ** 9, a.lr, a.warmup)
        for g in opt.param_groups:
            g["lr"] = lr
        with torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=amp):
            logits = model(x[:, :-1])
            loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1))
            total = loss + tr.balance_loss(model, cfg)
        opt.zero_grad(set_to_none=True)
        total.backward()
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        loads = tr.update_bias(model, cfg)
        run_loss, run_n = run_loss + loss.detach(), run_n + 1   # no host sync per step
        step += 1
        if step == 5:
            if dev.type == "cuda":
                torch.cuda.synchronize()
            tstart = time.time()
        if steps == 0 and step == 25:   # fix the schedule from the measured step time
            if dev.type == "cuda":
                torch.cuda.synchronize()
            per = (time.time() - tstart) / 20
            steps = max(step + 1, int((a.minutes * 60 - (time.time() - t0)) / per) + step)
            say(f"step time {per * 1e3:.1f} ms ({a.batch * a.seq / per / 1e3:.0f}k tok/s): "
                f"schedule fixed at {steps} steps (rerun with --steps {steps})")
        if step % a.log_every == 0 or step == 1:
            last_mean = float(run_loss) / run_n
            run_loss, run_n = 0.0, 0
            lmax = max(float(l.max()) for l in loads) if loads else 0.0
            say(f"step {step} loss {loss.item():.4f} mean {last_mean:.4f} lr {lr:.2e} gnorm {float(gn):.2f} "
                f"maxload {lmax:.3f} elapsed {time.time() - t0:.0f}s")
        if a.smoke and step >= 3:
            break
    say(f"trained {step} steps x {a.batch} x {a.seq} tokens = {step * a.batch * a.seq / 1e6:.1f}M tokens "
        f"in {time.time() - t0:.0f}s; mean loss of the last logged interval {last_mean:.4f}")
    model.cpu()
    names = export(model, cfg, os.path.join(a.out, "mid-dsv3"))
    say("wrote " + ", ".join(names))


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prep")
    p.add_argument("--out", required=True)
    p.add_argument("--tokenizer", default=os.path.join(HERE, "tiny-dsv3", "tokenizer.json"))
    p.add_argument("--shared", default=os.environ.get("DSQ_DATA", ""),
                   help="the sample-training data directory (text/, gsm8k/; default $DSQ_DATA)")
    t = sub.add_parser("train")
    t.add_argument("--data", required=True)
    t.add_argument("--out", required=True)
    t.add_argument("--device", default="cuda")
    t.add_argument("--minutes", type=float, default=6.0, help="training time budget (fixes --steps)")
    t.add_argument("--steps", type=int, default=0, help="step count (0: from --minutes)")
    t.add_argument("--batch", type=int, default=64)
    t.add_argument("--seq", type=int, default=1024)
    t.add_argument("--lr", type=float, default=1.5e-3)
    t.add_argument("--warmup", type=int, default=150)
    t.add_argument("--wd", type=float, default=0.1)
    t.add_argument("--seed", type=int, default=1234)
    t.add_argument("--log-every", type=int, default=50)
    t.add_argument("--smoke", action="store_true", help="3 steps of a narrow model (script check)")
    a = ap.parse_args()
    prep(a) if a.cmd == "prep" else train(a)


if __name__ == "__main__":
    main()
