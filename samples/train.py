#!/usr/bin/python3
"""Train a sample model (tiny-dsv3 or tiny-llama) on CPU.

Data: the GSM-style train split (gen_gsm.py, seed SEED_TRAIN, train phrasings
only) in the lm-eval few-shot layout, plus the training licenses (corpus.py).
Every window is BOS + text; GSM windows hold whole problems back to back (the
last one cut at the window end), so the model sees exactly the 5-shot prompt
layout it is evaluated with.  A fraction PROSE_FRAC of windows are prose.
Window contents depend only on (seed, step), so a resumed run sees the same data.

Options used by make_samples.sh's later phases: --question-weight W (loss weight
of GSM question tokens, answers and prose weigh 1), --drill-frac F (share of
windows made of arithmetic drill lines "a-b=<<a-b=c>>c", drawn from the
annotations of extra train-distribution problems), --stop-at S (phase boundary).

Optimiser: AdamW, linear warm-up then cosine decay to 10%, grad clip 1.0.
MoE balance: aux-loss-free bias update of e_score_correction_bias (sign rule,
rate BIAS_RATE) plus a small load-balancing loss (aux_loss_alpha).

Checkpoints (model + optimiser + step) go to OUT/ckpt.pt every --ckpt-every
steps and on SIGTERM/SIGINT; rerunning the same command resumes.

Usage: nice -n 5 train.py --arch dsv3 --out work/dsv3 --steps 400 --batch 4 --threads 1
"""
import argparse
import math
import os
import random
import signal
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bpe  # noqa: E402
import corpus  # noqa: E402
import dsv3_ref  # noqa: E402
import gen_gsm  # noqa: E402
import model_configs  # noqa: E402

PROSE_FRAC = 0.05
BIAS_RATE = 1e-3
N_TRAIN_PROBLEMS = 150000


def load_data(tok, work, level="full"):
    """Token arrays for train problems and prose, cached under work/."""
    import hashlib
    with open(os.path.join(work, "tokenizer.json"), "rb") as f:
        key = hashlib.sha256(f.read() + open(os.path.join(HERE, "gen_gsm.py"), "rb").read()).hexdigest()[:12]
    cache = os.path.join(work, f"train_tokens_{key}_{N_TRAIN_PROBLEMS}{'' if level == 'full' else '_' + level}.npz")
    if os.path.exists(cache):
        z = np.load(cache)
        offs = z["gsm_offs"]
        return z["gsm"], offs, z["prose"]
    rows = corpus.gsm_train(N_TRAIN_PROBLEMS, level)
    toks, offs = [], [0]
    for r in rows:
        t = tok.encode(corpus.fmt(r))
        toks.extend(t)
        offs.append(len(toks))
    prose = []
    for d in corpus.prose_docs():
        prose.extend(tok.encode(d))
    gsm, offs, prose = np.array(toks, np.int32), np.array(offs, np.int64), np.array(prose, np.int32)
    np.savez(cache + ".tmp.npz", gsm=gsm, gsm_offs=offs, prose=prose)
    os.replace(cache + ".tmp.npz", cache)
    return gsm, offs, prose


DRILL_SEED = 6006
N_DRILL_PROBLEMS = 60000


def load_drills(tok, level="full"):
    """Arithmetic drill lines "a-b=<<a-b=c>>c\n", one per calculator annotation of
    N_DRILL_PROBLEMS extra train-distribution problems (seed DRILL_SEED): the same
    operand distribution as the word problems, ~10x denser in arithmetic."""
    import re
    lines, cache = [], {}
    for r in gen_gsm.generate("train", N_DRILL_PROBLEMS, seed=DRILL_SEED, level=level):
        for expr, val in re.findall(r"<<([^=<>]+)=([^<>]+)>>", r["answer"]):
            line = f"{expr}=<<{expr}={val}>>{val}\n"
            if line not in cache:
                cache[line] = np.array(tok.encode(line), np.int32)
            lines.append(cache[line])
    return lines


def make_batch(step, seed, bs, seq, gsm, offs, prose, bos, answer_id, qweight=1.0, drills=None, drill_frac=0.0):
    """Token windows [bs, seq] and per-token loss weights (qweight on GSM question tokens,
    i.e. from "Question" up to and including the "Answer" token; 1 elsewhere)."""
    r = random.Random(seed * 1000003 + step)
    n_prob = len(offs) - 1
    rows, wrows = [], []
    for _ in range(bs):
        if r.random() < PROSE_FRAC:
            s = r.randrange(0, len(prose) - seq)
            body = prose[s:s + seq - 1]
            w = np.ones(seq - 1, np.float32)
        elif drill_frac > 0 and r.random() < drill_frac / (1 - PROSE_FRAC):
            parts, n = [], 0
            while n < seq - 1:
                p = drills[r.randrange(len(drills))]
                parts.append(p)
                n += len(p)
            body = np.concatenate(parts)[:seq - 1]
            w = np.ones(seq - 1, np.float32)
        else:
            parts, ws, n = [], [], 0
            while n < seq - 1:
                i = r.randrange(n_prob)
                p = gsm[offs[i]:offs[i + 1]]
                pw = np.ones(len(p), np.float32)
                k = np.flatnonzero(p == answer_id)
                pw[:(k[0] + 1 if len(k) else 0)] = qweight
                parts.append(p)
                ws.append(pw)
                n += len(p)
            body = np.concatenate(parts)[:seq - 1]
            w = np.concatenate(ws)[:seq - 1]
        rows.append(np.concatenate([[bos], body]))
        wrows.append(np.concatenate([[1.0], w]).astype(np.float32))
    x = torch.from_numpy(np.stack(rows).astype(np.int64))
    return x, torch.from_numpy(np.stack(wrows))


def init_weights(model, cfg):
    std = cfg.get("initializer_range", 0.02)
    nl = cfg["num_hidden_layers"]
    for name, p in model.named_parameters():
        if name.endswith("norm.weight") or "layernorm" in name:
            torch.nn.init.ones_(p)
        elif name.endswith("e_score_correction_bias"):
            torch.nn.init.zeros_(p)
        elif name.endswith(("o_proj.weight", "down_proj.weight")):
            torch.nn.init.normal_(p, 0.0, std / math.sqrt(2 * nl))
        else:
            torch.nn.init.normal_(p, 0.0, std)


def moe_layers(model):
    return [l.mlp for l in model.model.layers if isinstance(l.mlp, dsv3_ref.MoE)]


def balance_loss(model, cfg):
    """alpha * E * sum_i f_i * P_i over the batch (DeepSeek's auxiliary balance loss)."""
    tot = 0.0
    for m in moe_layers(model):
        idx, scores = m.last
        E, K = cfg["n_routed_experts"], cfg["num_experts_per_tok"]
        f = torch.bincount(idx.flatten(), minlength=E).float() * E / (K * idx.shape[0])
        p = (scores / scores.sum(-1, keepdim=True)).mean(0)
        tot = tot + (f.detach() * p).sum()
    return cfg.get("aux_loss_alpha", 0.0) * tot


@torch.no_grad()
def update_bias(model, cfg):
    loads = []
    for m in moe_layers(model):
        idx, _ = m.last
        load = torch.bincount(idx.flatten(), minlength=cfg["n_routed_experts"]).float()
        m.gate.e_score_correction_bias.add_(BIAS_RATE * torch.sign(load.mean() - load))
        loads.append(load / load.sum())
    return loads


def lr_at(step, steps, peak, warm):
    if step < warm:
        return peak * (step + 1) / warm
    t = (step - warm) / max(1, steps - warm)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, t))))


def adamw(model, lr, wd, **kw):
    """AdamW (betas 0.9/0.95) with weight decay wd on the matrices, none on vectors; kw: more
    torch.optim.AdamW options (fused)."""
    decay = [p for n, p in model.named_parameters() if p.requires_grad and p.dim() == 2]
    nodecay = [p for n, p in model.named_parameters() if p.requires_grad and p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": wd}, {"params": nodecay, "weight_decay": 0.0}],
                             lr=lr, betas=(0.9, 0.95), eps=1e-8, **kw)


def resume(ck, model, opt):
    """(step, checkpoint) from the checkpoint file ck into model and opt; (0, None) when there is none."""
    if not os.path.exists(ck):
        return 0, None
    st = torch.load(ck)
    model.load_state_dict(st["model"])
    opt.load_state_dict(st["opt"])
    print(f"resumed at step {st['step']}", flush=True)
    return st["step"], st


def save_ckpt(ck, model, opt, step, cfg, args):
    """model + optimiser + step (and cfg, the run's arguments) to ck, atomically."""
    tmp = ck + ".tmp"
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step, "cfg": cfg,
                "args": args}, tmp)
    os.replace(tmp, ck)


def stop_on_signal():
    """{"flag": False}, set to True on SIGTERM / SIGINT (the loop saves and stops)."""
    stop = {"flag": False}

    def on_sig(*_):
        stop["flag"] = True
    signal.signal(signal.SIGTERM, on_sig)
    signal.signal(signal.SIGINT, on_sig)
    return stop


def train_step(model, opt, cfg, x, wt, lr, moe):
    """One optimiser step at learning rate lr on token windows x, the loss weighted per token by
    wt (wt[:, t]: the weight of predicting x[:, t]); moe: the balance loss and the bias update.
    Returns (loss, grad norm before clipping, per-layer expert loads)."""
    for g in opt.param_groups:
        g["lr"] = lr
    model.train()
    logits = model(x[:, :-1])
    tl = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1), reduction="none")
    w = wt[:, 1:].reshape(-1)
    loss = (tl * w).sum() / w.sum()
    total = loss + (balance_loss(model, cfg) if moe else 0.0)
    opt.zero_grad(set_to_none=True)
    total.backward()
    gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    loads = update_bias(model, cfg) if moe else []
    return loss, gn, loads


def log_line(log, msg):
    """msg on stdout and as a line of the open log file."""
    print(msg, flush=True)
    log.write(msg + "\n")
    log.flush()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", choices=["dsv3", "llama"], required=True)
    ap.add_argument("--out", required=True, help="work dir for ckpt.pt and train.log")
    ap.add_argument("--tokenizer", default=os.path.join(HERE, "work", "tok", "tokenizer.json"))
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--batch", type=int, default=12)
    ap.add_argument("--seq", type=int, default=768)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=60)
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ckpt-every", type=int, default=50)
    ap.add_argument("--question-weight", type=float, default=1.0,
                    help="loss weight of GSM question tokens (answers and prose weigh 1)")
    ap.add_argument("--drill-frac", type=float, default=0.0, help="share of arithmetic-drill windows")
    ap.add_argument("--level", choices=["full", "small"], default="full",
                    help="operand ranges of the GSM-style problems (gen_gsm.generate level)")
    ap.add_argument("--stop-at", type=int, default=0, help="save and stop at this step (phase boundary)")
    ap.add_argument("--max-minutes", type=float, default=0, help="stop (with checkpoint) after this long")
    a = ap.parse_args()

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    os.makedirs(a.out, exist_ok=True)
    cfg = dict(model_configs.DSV3 if a.arch == "dsv3" else model_configs.LLAMA)
    tok = bpe.Tokenizer.load(a.tokenizer)
    gsm, offs, prose = load_data(tok, os.path.dirname(os.path.abspath(a.tokenizer)), a.level)
    answer_id = tok.vocab["Answer"]
    drills = load_drills(tok, a.level) if a.drill_frac > 0 else None
    model = dsv3_ref.build(cfg)
    init_weights(model, cfg)
    opt = adamw(model, a.lr, a.wd)
    ck = os.path.join(a.out, "ckpt.pt")
    step, _ = resume(ck, model, opt)
    nparam = sum(p.numel() for p in model.parameters())
    print(f"{a.arch}: {nparam/1e6:.2f}M params, {len(offs)-1} problems, {len(gsm)} gsm tokens, "
          f"{len(prose)} prose tokens", flush=True)

    def save():
        save_ckpt(ck, model, opt, step, cfg, vars(a))

    stop = stop_on_signal()
    log = open(os.path.join(a.out, "train.log"), "a")
    t0 = time.time()
    ema = None
    end = min(a.steps, a.stop_at) if a.stop_at else a.steps
    while step < end and not stop["flag"]:
        x, wt = make_batch(step, a.seed, a.batch, a.seq, gsm, offs, prose, tok.bos_id, answer_id, a.question_weight,
                           drills, a.drill_frac)
        lr = lr_at(step, a.steps, a.lr, a.warmup)
        loss, gn, loads = train_step(model, opt, cfg, x, wt, lr, a.arch == "dsv3")
        step += 1
        ema = loss.item() if ema is None else 0.95 * ema + 0.05 * loss.item()
        if step % 10 == 0 or step == 1:
            el = time.time() - t0
            lmax = max(float(l.max()) for l in loads) if loads else 0.0
            msg = (f"step {step} loss {loss.item():.4f} ema {ema:.4f} lr {lr:.2e} gnorm {float(gn):.2f} "
                   f"maxload {lmax:.3f} elapsed {el:.0f}s")
            log_line(log, msg)
        if step % a.ckpt_every == 0:
            save()
        if a.max_minutes and time.time() - t0 > a.max_minutes * 60:
            break
    save()
    print(f"saved {ck} at step {step}", flush=True)


if __name__ == "__main__":
    main()
