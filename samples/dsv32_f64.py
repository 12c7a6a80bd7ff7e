#!/usr/bin/python3
"""Where the DeepSeek-V3.2 reference itself is unstable: dsv32_ref.py in float32
against the same model with float64 accumulation.

The two runs differ by rounding noise (about 1e-7 relative) until a discrete
step amplifies it: a value crossing an e4m3 rounding boundary (a code one step
apart: a few percent of that value) or a ue8m0 scale boundary, a near-tie at
the indexer's top-k cut selecting another key, or a near-tie in the MoE gate
routing a token to another expert. For each of many short sequences longer
than index_topk, in prefill (the whole sequence in one call) and in decode
(token by token through the cache), this finds the first position whose
logits differ by more than --tol (max abs difference), and classifies its
cause as the first difference between the two runs at or before that
position that can move the logits (position, then layer, then the order
latent, top-k set, MoE routing; see classify): an e4m3 code or ue8m0 scale
of the MLA latent, the indexer's top-k set (after an indexer code flipped, or
a near-tie with equal codes), the MoE routing, or "none" (no discrete change:
the noise grew smoothly past --tol). Indexer code flips alone are counted
apart: they change nothing unless they change the top-k set.

  /usr/bin/python3 samples/dsv32_f64.py [--model samples/tiny-dsv32] [--n 100] [--len 96]
      [--dsa fp8 float] [--json OUT.json] [--readme samples/tiny-dsv32/README.md]

--readme rewrites the part of that file between the "dsv32_f64.py: begin" and
"dsv32_f64.py: end" markers with the result and a header naming the machine,
date, commit and command; nothing else writes there.
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import dsv32_ref as R  # noqa: E402

KINDS = ("latent", "iq", "ik", "topk", "moe")     # the order of the discrete steps in a layer


class Probe:
    """Records a run's discrete decisions: (position, layer, kind, codes) rows."""

    def __init__(self, model):
        self.model = model
        self.layer = 0
        self.seen = 0
        self.start = 0
        self.rows = []
        self.on = False
        self.hooks = []
        for li, layer in enumerate(model.model.layers):
            self.hooks.append(layer.register_forward_pre_hook(self._layer_hook(li)))
            self.hooks.append(layer.self_attn.indexer.register_forward_hook(self._topk_hook))
            if hasattr(layer.mlp, "gate"):
                self.hooks.append(layer.mlp.register_forward_hook(self._moe_hook))
        self.hooks.append(model.register_forward_pre_hook(self._model_hook))

    def _model_hook(self, mod, args):
        cache = args[1] if len(args) > 1 else None
        self.start = cache.length if cache is not None else 0

    def _layer_hook(self, li):
        def f(mod, args):
            self.layer = li
            self.seen = 0
        return f

    def add(self, kind, t):
        """t [B=1, S, ...]: one row per position."""
        for s in range(t.shape[1]):
            self.rows.append((self.start + s, self.layer, KINDS.index(kind), t[0, s]))

    def _topk_hook(self, mod, args, out):
        self.add("topk", torch.sort(out, -1)[0])

    def _moe_hook(self, mod, args, out):
        self.add("moe", torch.sort(mod.last[0], -1)[0].unsqueeze(0))


_PROBES = []
_act_quant = R.act_quant


def _recording_act_quant(x, block):
    """act_quant, recording codes and scales: the first call of a layer is the latent, then indexer q, k."""
    codes, scales = _act_quant(x, block)
    p = _PROBES[-1] if _PROBES and _PROBES[-1].on else None
    if p is not None:
        if p.seen > 2:
            raise ValueError("more than three act_quant calls in one layer")
        kind = KINDS[p.seen]
        p.seen += 1
        B, S = codes.shape[0], codes.shape[1]
        p.add(kind, torch.cat([codes.reshape(B, S, -1), torch.log2(scales).reshape(B, S, -1)], -1))
    return codes, scales


R.act_quant = _recording_act_quant


def run(model, probe, ids, decode):
    """logits [S, V] (float64) and the probe's rows, prefill or token by token."""
    probe.rows = []
    probe.on = True
    _PROBES.append(probe)
    try:
        with torch.no_grad():
            if decode:
                cache = R.Cache(len(model.model.layers))
                out = torch.cat([model(ids[:, i:i + 1], cache) for i in range(ids.shape[1])], 1)
            else:
                out = model(ids)
    finally:
        _PROBES.pop()
        probe.on = False
    return out[0].double(), probe.rows


def classify(rows32, rows64, upto, ncode=None):
    """The first difference at position <= upto that can move the logits: (cause, position, layer) or None.

    Rows pair up one to one (the same calls in the same order); an act_quant
    row holds the codes, then log2 of each scale. An indexer code (q or k)
    acts only through the top-k set, so its flips are not causes themselves;
    a changed top-k set is "topk (indexer e4m3)" when an indexer code of that
    layer differed (q at that position, k at it or before), else
    "topk (near-tie)". The others: "e4m3 (latent)" / "ue8m0 (latent)" (a code
    or block scale of the MLA latent), "moe" (the routed experts)."""
    a = sorted(rows32, key=lambda r: (r[0], r[1], r[2]))
    b = sorted(rows64, key=lambda r: (r[0], r[1], r[2]))
    if len(a) != len(b):
        raise ValueError("the two runs made different calls: %d and %d records" % (len(a), len(b)))
    ik_flipped = set()          # layers whose indexer keys differed so far
    iq_flipped = False          # the indexer query of the current (position, layer) differed
    for ra, rb in zip(a, b):
        pos, layer, kind = ra[0], ra[1], ra[2]
        if pos > upto:
            break
        if (rb[0], rb[1], rb[2]) != (pos, layer, kind):
            raise ValueError("the two runs' records do not pair up at position %d" % pos)
        va, vb = ra[3].double(), rb[3].double()
        name = KINDS[kind]
        if name == "iq" and torch.equal(va, vb):
            iq_flipped = False
        if torch.equal(va, vb):
            continue
        if name == "latent":
            nb = scales_count(va, name, ncode)
            return ("ue8m0 (latent)" if not torch.equal(va[-nb:], vb[-nb:]) else "e4m3 (latent)", pos, layer)
        if name == "iq":
            iq_flipped = True
            continue
        if name == "ik":
            ik_flipped.add(layer)
            continue
        if name == "topk":
            flip = layer in ik_flipped or iq_flipped
            return ("topk (indexer e4m3)" if flip else "topk (near-tie)", pos, layer)
        return (name, pos, layer)
    return None


def indexer_flips(rows32, rows64):
    """Whether any indexer code or scale (q or k) differs between the runs."""
    iq, ik = KINDS.index("iq"), KINDS.index("ik")
    a = sorted((r for r in rows32 if r[2] in (iq, ik)), key=lambda r: (r[0], r[1], r[2]))
    b = sorted((r for r in rows64 if r[2] in (iq, ik)), key=lambda r: (r[0], r[1], r[2]))
    return any(not torch.equal(ra[3].double(), rb[3].double()) for ra, rb in zip(a, b))


def scales_count(v, name, ncode):
    """How many trailing entries of an act_quant row are scales (ncode: name -> codes per row)."""
    return v.numel() - ncode[name]


def first_divergence(l32, l64, tol):
    """(position or -1, max abs logit difference per position)."""
    d = (l32 - l64).abs().max(-1)[0]
    over = (d > tol).nonzero()
    return (int(over[0, 0]) if over.numel() else -1), d


def load(model_dir, dsa, dtype):
    import evaluate
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    with R.accumulation(dtype):
        m = R.build(cfg, dsa)
        missing, unexpected = m.load_state_dict(evaluate.load_tensors(model_dir), strict=False)
    if missing or unexpected:
        raise ValueError("%s: missing %s, unexpected %s" % (model_dir, missing[:3], unexpected[:3]))
    return cfg, m.eval()


def sequences(model_dir, cfg, n, length):
    import bpe
    tok = bpe.Tokenizer.load(os.path.join(model_dir, "tokenizer.json"))
    ids = tok.encode(open(os.path.join(HERE, "data", "heldout.txt"), encoding="utf-8").read())
    step = length - 1
    n = min(n, (len(ids) - 1) // step)
    bos = cfg.get("bos_token_id")
    out = []
    for i in range(n):
        w = ids[i * step:(i + 1) * step]
        out.append(([bos] if bos is not None else []) + w[:length - (1 if bos is not None else 0)])
    return torch.tensor(out)


def code_sizes(cfg, dsa):
    """Codes per act_quant row: latent kv_lora_rank, indexer q heads x dim, k dim."""
    if dsa != "fp8":
        return {}
    return {"latent": cfg["kv_lora_rank"], "iq": cfg["index_n_heads"] * cfg["index_head_dim"],
            "ik": cfg["index_head_dim"]}


def compare(m32, m64, cfg, dsa, seqs, tol):
    p32, p64 = Probe(m32), Probe(m64)
    ncode = code_sizes(cfg, dsa)
    res = {}
    for mode in ("prefill", "decode"):
        firsts, causes, noise, quiet, flips, jumps = [], {}, [], {}, 0, []
        for s in range(seqs.shape[0]):
            ids = seqs[s:s + 1]
            l32, r32 = run(m32, p32, ids, mode == "decode")
            with R.accumulation(torch.float64):
                l64, r64 = run(m64, p64, ids, mode == "decode")
            pos, d = first_divergence(l32, l64, tol)
            upto = pos if pos >= 0 else ids.shape[1] - 1
            ev = classify(r32, r64, upto, ncode)
            flips += indexer_flips(r32, r64)
            if pos != 0:
                noise.append(float(d.max() if pos < 0 else d[:pos].max()))
            key = "none" if ev is None else ev[0]
            if pos < 0:
                if ev is not None:
                    quiet[key] = quiet.get(key, 0) + 1
                continue
            firsts.append(pos)
            jumps.append(float(d[pos:].max()))
            causes[key] = causes.get(key, 0) + 1
        res[mode] = {"sequences": int(seqs.shape[0]), "diverged": len(firsts),
                     "rate": len(firsts) / seqs.shape[0], "first_positions": sorted(firsts),
                     "causes": dict(sorted(causes.items(), key=lambda kv: -kv[1])),
                     "absorbed": dict(sorted(quiet.items(), key=lambda kv: -kv[1])),
                     "indexer_code_flips": flips,
                     "largest_difference_after": max(jumps) if jumps else 0.0,
                     "noise_before_divergence_max": max(noise) if noise else 0.0}
    for p in (p32, p64):
        for h in p.hooks:
            h.remove()
    return res


def header(cmd):
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        commit = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True,
                                text=True, cwd=HERE).stdout.strip() or "unknown"
        dirty = subprocess.run(["git", "diff", "--quiet", "HEAD", "--", "."], cwd=os.path.dirname(HERE)).returncode
        if dirty:
            commit += " (with uncommitted changes)"
    except OSError:
        commit = "unknown"
    return ["Generated by `samples/dsv32_f64.py`; do not edit by hand: rerun the command to update it.", "",
            "- machine: %s, %d cores available, torch %s" % (cpu, os.cpu_count() or 0, torch.__version__),
            "- date: %s" % time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "- commit: %s" % commit, "- command: `%s`" % cmd, ""]


def section(result, args, cmd, topk):
    lines = header(cmd)
    lines.append("The reference in float32 against the same model with float64 accumulation, on %d "
                 "sequences of %d tokens of `samples/data/heldout.txt` (index_topk %d), prefill and "
                 "token-by-token decode: a sequence diverges at the first position whose logits differ "
                 "by more than %g; the cause is the first discrete difference between the two runs at or "
                 "before it that can move the logits (e4m3 (latent): an e4m3 code of the MLA latent "
                 "changed, a value crossing a rounding boundary; ue8m0 (latent): a block scale "
                 "changed; topk: the indexer's selected keys changed, after an indexer e4m3 code "
                 "flipped or, with equal codes, a near-tie at the cut; moe: a token's routed experts "
                 "changed; none: no discrete change). Absorbed: sequences with such a difference "
                 "whose logits stayed within the tolerance. Indexer flips: sequences where an "
                 "indexer q or k code differed anywhere (harmless unless the top-k set changes). The last two "
                 "columns: the largest max-abs logit difference over the positions before the first "
                 "divergence (the sequences that never diverge: all positions), and from it on "
                 "(the size of the jumps)." % (args.n_used, args.len, topk, args.tol))
    lines += ["", "| `--dsa` | mode | diverged | rate | first divergent positions | causes | absorbed | "
              "indexer flips | largest difference before divergence | largest from it on |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for dsa in args.dsa:
        for mode in ("prefill", "decode"):
            r = result[dsa][mode]
            pos = r["first_positions"]
            ptxt = ", ".join(str(p) for p in pos) if pos else "-"
            ctxt = ", ".join("%s %d" % kv for kv in r["causes"].items()) or "-"
            atxt = ", ".join("%s %d" % kv for kv in r["absorbed"].items()) or "-"
            jtxt = "%.1e" % r["largest_difference_after"] if r["diverged"] else "-"
            lines.append("| %s | %s | %d/%d | %.1f%% | %s | %s | %s | %d/%d | %.1e | %s |" % (
                dsa, mode, r["diverged"], r["sequences"], 100 * r["rate"], ptxt, ctxt, atxt,
                r["indexer_code_flips"], r["sequences"],
                r["noise_before_divergence_max"], jtxt))
    return lines


def splice(path, lines):
    with open(path, encoding="utf-8") as f:
        text = f.read().split("\n")
    b = [i for i, l in enumerate(text) if l.startswith("<!-- dsv32_f64.py: begin")]
    e = [i for i, l in enumerate(text) if l.startswith("<!-- dsv32_f64.py: end")]
    if len(b) != 1 or len(e) != 1 or e[0] < b[0]:
        raise ValueError("%s: needs one dsv32_f64.py begin marker and one end marker after it" % path)
    out = text[:b[0] + 1] + lines + text[e[0]:]
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write("\n".join(out))
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=os.path.join(HERE, "tiny-dsv32"))
    ap.add_argument("--n", type=int, default=100, help="sequences (default 100)")
    ap.add_argument("--len", type=int, default=96, help="tokens per sequence (default 96)")
    ap.add_argument("--tol", type=float, default=1e-3, help="max abs logit difference (default 1e-3)")
    ap.add_argument("--dsa", nargs="+", default=["fp8", "float"], choices=["fp8", "float"])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json")
    ap.add_argument("--readme")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    result = {}
    topk = None
    for dsa in args.dsa:
        cfg, m32 = load(args.model, dsa, torch.float32)
        _, m64 = load(args.model, dsa, torch.float64)
        topk = cfg["index_topk"]
        if args.len <= topk:
            ap.error("--len %d: the sequences must be longer than index_topk %d" % (args.len, topk))
        seqs = sequences(args.model, cfg, args.n, args.len)
        args.n_used = int(seqs.shape[0])
        result[dsa] = compare(m32, m64, cfg, dsa, seqs, args.tol)
        for mode in ("prefill", "decode"):
            r = result[dsa][mode]
            print("dsa %s %s: %d/%d diverged (%s), causes %s, absorbed %s, indexer flips %d" % (
                dsa, mode, r["diverged"], r["sequences"], r["first_positions"], r["causes"], r["absorbed"],
                r["indexer_code_flips"]), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    if args.readme:
        rel = os.path.relpath(os.path.abspath(args.model), os.path.dirname(HERE))
        cmd = "/usr/bin/python3 samples/dsv32_f64.py --model %s --n %d --len %d --tol %g --dsa %s --readme %s" % (
            rel, args.n, args.len, args.tol, " ".join(args.dsa),
            os.path.relpath(os.path.abspath(args.readme), os.path.dirname(HERE)))
        splice(args.readme, section(result, args, cmd, topk))
        print("wrote %s" % args.readme)


if __name__ == "__main__":
    main()
