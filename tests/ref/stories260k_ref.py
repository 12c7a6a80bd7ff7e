#!/usr/bin/python3
"""stories260k_ref.py - PyTorch reference numbers for tests/test_stories260k.c.

Implements karpathy/llama2.c's model.py Transformer directly on the legacy
.bin checkpoint (interleaved RoPE, q/k rows as stored, no HF conversion) and
llama2.c run.c's tokenizer encode()/decode() on tok512.bin, then prints one
JSON object (the golden file tests/data/stories260k_ref.json):

    /usr/bin/python3 tests/ref/stories260k_ref.py > tests/data/stories260k_ref.json

Defaults read ../shared/data (never copied into the repo); see --help.

Evaluation protocol (the C test repeats it exactly; the token stream's
SHA-256 is recorded so a tokenizer difference fails loudly):
  * text: tinystories_val.txt, whose paragraphs are separated by blank lines.
    Blank-line runs ("\\n\\n+") become a single "\\n": llama2.c's training
    stories separate paragraphs with one newline (its sample output does the
    same), so the doubled newlines of this file would be out of distribution.
    Story boundaries are not marked in the file, so the whole text is ONE
    document: BOS, then encode(text) with run.c's rules (dummy-prefix space,
    best-score merges, <0xXX> byte fallback). No EOS (llama2.c pretokenizes
    with bos=True, eos=False).
  * windows: llama2.c PretokDataset batching without the shuffle. Window i
    is stream[i*ctx : i*ctx + ctx + 1]; inputs are its first ctx tokens,
    targets its last ctx, and every position is scored (as the training
    loss). Windows are independent (fresh KV cache); only window 0 starts
    with BOS. n_windows * ctx tokens are scored.
  * greedy: from BOS, argmax each step, stop at BOS (run.c generate())
    or after --greedy-steps tokens.

Numbers are computed in float64 (the golden) and float32 (what llama2.c's
own PyTorch code computes), both from the fp32 weights. quant_mean_nll holds
the first --quant-windows windows for the weights rounded to bf16 and for
fake-quantized w8a8-dynamic / awq-w4a16 (quant/scheme.h math: weights
quantized in float32 as the C code does, then a float64 forward; w8a8 also
rounds every decoder linear's input to per-token int8).
"""
import argparse
import hashlib
import heapq
import json
import math
import os
import re
import struct
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.path.normpath(os.path.join(HERE, "..", "..", "..", "shared", "data"))


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for blk in iter(lambda: f.read(1 << 20), b""):
            h.update(blk)
    return h.hexdigest()


# ---- tokenizer: llama2.c run.c build_tokenizer / encode / decode ----------

class Llama2cTokenizer:
    def __init__(self, path, vocab_size):
        data = open(path, "rb").read()
        (self.max_token_length,) = struct.unpack_from("<i", data, 0)
        off = 4
        self.vocab, self.scores = [], []
        for _ in range(vocab_size):
            score, n = struct.unpack_from("<fi", data, off)
            off += 8
            self.vocab.append(data[off:off + n])
            self.scores.append(score)
            off += n
        # run.c's bsearch over a sorted copy: with no duplicate strings in
        # the vocabulary (checked) this is a plain dict.
        self.lookup = {}
        for i, v in enumerate(self.vocab):
            if v in self.lookup:
                raise SystemExit("duplicate vocabulary entry %r" % v)
            self.lookup[v] = i

    def _symbols(self, text):
        """run.c's first pass: dummy prefix, then one token per UTF-8
        codepoint (or one <0xXX> per byte when the codepoint is unknown)."""
        out = []
        if text:
            out.append(self.lookup[b" "])
        i, n = 0, len(text)
        while i < n:
            j = i + 1
            # continuation bytes, at most 4 bytes per codepoint (run.c)
            while j < n and (text[j] & 0xC0) == 0x80 and j - i < 4:
                j += 1
            cp = text[i:j]
            if cp in self.lookup:
                out.append(self.lookup[cp])
            else:
                out.extend(b + 3 for b in cp)
            i = j
        return out

    def encode_naive(self, text):
        """run.c's merge loop verbatim (O(n^2)); the check for encode()."""
        toks = self._symbols(text)
        while True:
            best, best_id, best_idx = -1e10, -1, -1
            for i in range(len(toks) - 1):
                tid = self.lookup.get(self.vocab[toks[i]] + self.vocab[toks[i + 1]], -1)
                if tid != -1 and self.scores[tid] > best:
                    best, best_id, best_idx = self.scores[tid], tid, i
            if best_idx == -1:
                return toks
            toks[best_idx:best_idx + 2] = [best_id]

    def encode(self, text):
        """Same result as encode_naive in O(n log n): run.c merges the
        leftmost of the best-scoring pairs; a heap keyed (-score, position)
        pops exactly that pair, because merged symbols keep the position of
        their left part and positions stay in left-to-right order."""
        toks = self._symbols(text)
        n = len(toks)
        prev = list(range(-1, n - 1))
        nxt = list(range(1, n + 1))
        alive = [True] * n
        heap = []

        def push(i):
            j = nxt[i]
            if j < n:
                tid = self.lookup.get(self.vocab[toks[i]] + self.vocab[toks[j]], -1)
                if tid != -1:
                    heapq.heappush(heap, (-self.scores[tid], i, toks[i], toks[j], tid))

        for i in range(n - 1):
            push(i)
        while heap:
            _, i, a, b, tid = heapq.heappop(heap)
            if not alive[i] or toks[i] != a:
                continue
            j = nxt[i]
            if j >= n or toks[j] != b:
                continue  # stale entry
            toks[i] = tid
            alive[j] = False
            nxt[i] = nxt[j]
            if nxt[j] < n:
                prev[nxt[j]] = i
            if prev[i] >= 0:
                push(prev[i])
            push(i)
        return [toks[i] for i in range(n) if alive[i]]

    def decode(self, ids):
        """run.c decode() for a generated sequence that starts after BOS."""
        out = b""
        prev = 1
        for t in ids:
            piece = self.vocab[t]
            if prev == 1 and piece.startswith(b" "):
                piece = piece[1:]
            m = re.fullmatch(rb"<0x([0-9A-F]{2})>", piece)
            if m:
                piece = bytes([int(m.group(1), 16)])
            out += piece
            prev = t
        return out.decode("utf-8", errors="replace")


# ---- model: llama2.c model.py on the legacy checkpoint --------------------

def load_llama2c(path, dtype):
    data = open(path, "rb").read()
    dim, hidden, n_layers, n_heads, n_kv, vocab, seq_len = struct.unpack_from("<7i", data, 0)
    shared = vocab > 0
    vocab = abs(vocab)
    hd = dim // n_heads
    kv_dim = n_kv * hd
    w = torch.frombuffer(bytearray(data[28:]), dtype=torch.float32)
    off = 0

    def take(*shape):
        nonlocal off
        n = 1
        for s in shape:
            n *= s
        t = w[off:off + n].reshape(*shape).to(dtype)
        off += n
        return t

    p = {"dim": dim, "hidden": hidden, "n_layers": n_layers, "n_heads": n_heads,
         "n_kv_heads": n_kv, "vocab": vocab, "seq_len": seq_len, "shared": shared}
    p["emb"] = take(vocab, dim)
    p["att_norm"] = take(n_layers, dim)
    p["wq"] = take(n_layers, dim, dim)
    p["wk"] = take(n_layers, kv_dim, dim)
    p["wv"] = take(n_layers, kv_dim, dim)
    p["wo"] = take(n_layers, dim, dim)
    p["ffn_norm"] = take(n_layers, dim)
    p["w1"] = take(n_layers, hidden, dim)
    p["w2"] = take(n_layers, dim, hidden)
    p["w3"] = take(n_layers, hidden, dim)
    p["norm"] = take(dim)
    p["freq_cos"] = take(seq_len, hd // 2)
    p["freq_sin"] = take(seq_len, hd // 2)
    p["out"] = p["emb"] if shared else take(vocab, dim)
    if off != w.numel():
        raise SystemExit("%s: %d trailing floats" % (path, w.numel() - off))
    return p


def rmsnorm(x, wt, eps=1e-5):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * wt


def rope_tables(p, T, dtype):
    # model.py precompute_freqs_cis(dim // n_heads, max_seq_len), theta 1e4
    hd = p["dim"] // p["n_heads"]
    freqs = 1.0 / (10000.0 ** (torch.arange(0, hd, 2, dtype=torch.float64)[: hd // 2] / hd))
    t = torch.arange(T, dtype=torch.float64)
    ang = torch.outer(t, freqs)
    return torch.cos(ang).to(dtype), torch.sin(ang).to(dtype)


def apply_rope(x, cos, sin):
    # model.py apply_rotary_emb: consecutive pairs (2i, 2i+1) rotate together
    xr, xi = x.reshape(*x.shape[:-1], -1, 2).unbind(-1)
    c = cos[None, :, None, :]
    s = sin[None, :, None, :]
    yr = xr * c - xi * s
    yi = xr * s + xi * c
    return torch.stack([yr, yi], dim=-1).flatten(3)


def act_quant_i8(x):
    """Per-token symmetric int8 activations (quant/scheme.h w8a8-dynamic):
    s = max(amax / 127, 2^-100), q = clamp(rint(x / s), -127, 127)."""
    s = (x.abs().amax(-1, keepdim=True) / 127.0).clamp(min=2.0 ** -100)
    return torch.round(x / s).clamp(-127, 127) * s


def forward(p, tokens):
    """tokens [B, T] -> logits [B, T, vocab] (model.py Transformer.forward).
    p["actq"] quantizes the input of every decoder linear (w8a8-dynamic)."""
    B, T = tokens.shape
    dim, H, KVH = p["dim"], p["n_heads"], p["n_kv_heads"]
    hd = dim // H
    dtype = p["emb"].dtype
    aq = act_quant_i8 if p.get("actq") else (lambda x: x)
    cos, sin = rope_tables(p, T, dtype)
    mask = torch.full((T, T), float("-inf"), dtype=dtype).triu(1)
    h = p["emb"][tokens]
    for l in range(p["n_layers"]):
        x = aq(rmsnorm(h, p["att_norm"][l]))
        q = (x @ p["wq"][l].T).view(B, T, H, hd)
        k = (x @ p["wk"][l].T).view(B, T, KVH, hd)
        v = (x @ p["wv"][l].T).view(B, T, KVH, hd)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        rep = H // KVH  # repeat_kv: query head h reads kv head h // rep
        k = k.repeat_interleave(rep, dim=2)
        v = v.repeat_interleave(rep, dim=2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-1, -2)) / math.sqrt(hd) + mask
        o = (F.softmax(att, dim=-1) @ v).transpose(1, 2).reshape(B, T, dim)
        h = h + aq(o) @ p["wo"][l].T
        x = aq(rmsnorm(h, p["ffn_norm"][l]))
        h = h + aq(F.silu(x @ p["w1"][l].T) * (x @ p["w3"][l].T)) @ p["w2"][l].T
    return rmsnorm(h, p["norm"]) @ p["out"].T


# ---- fake quantization (quant/scheme.h math, in float32 like the C code) --

def fq_w8(w):
    """int8 symmetric per output row: s = max(amax / 127, 2^-100)."""
    s = (w.abs().amax(1, keepdim=True) / 127.0).clamp(min=2.0 ** -100)
    return torch.round(w / s).clamp(-127, 127) * s


def fq_awq(w, group=128):
    """AutoAWQ asymmetric int4 per (row, group of columns), last group ragged,
    min/max widened to include 0: s = max(max - min, 1e-5) / 15,
    z = clamp(-rint(min / s), 0, 15), q = clamp(rint(w / s) + z, 0, 15)."""
    out = torch.empty_like(w)
    for c0 in range(0, w.shape[1], group):
        g = w[:, c0:c0 + group]
        mx = g.amax(1, keepdim=True).clamp(min=0)
        mn = g.amin(1, keepdim=True).clamp(max=0)
        s = (mx - mn).clamp(min=1e-5) / 15.0
        z = (-torch.round(mn / s)).clamp(0, 15)
        q = (torch.round(g / s) + z).clamp(0, 15)
        out[:, c0:c0 + group] = (q - z) * s
    return out


def fake_quant(p32, scheme, dtype):
    """Quantize the decoder linears of a float32 model (embedding, norms and
    the tied classifier stay float, as ds-quant's default recipe keeps them).
    Row permutations (the HF q/k order) do not change per-row quantization."""
    fq = fq_w8 if scheme == "w8a8-dynamic" else fq_awq
    q = dict(p32)
    for key in ("wq", "wk", "wv", "wo", "w1", "w2", "w3"):
        q[key] = torch.stack([fq(w) for w in p32[key]])
    q = {k: (v.to(dtype) if torch.is_tensor(v) else v) for k, v in q.items()}
    q["actq"] = scheme == "w8a8-dynamic"
    return q


def window_nll(p, stream, n_windows, ctx, batch=8):
    """Mean NLL of each window (inputs ctx tokens, targets shifted by one)."""
    means = []
    for b0 in range(0, n_windows, batch):
        rows = [stream[i * ctx: i * ctx + ctx + 1] for i in range(b0, min(n_windows, b0 + batch))]
        t = torch.tensor(rows, dtype=torch.long)
        logits = forward(p, t[:, :-1])
        nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), t[:, 1:].reshape(-1),
                              reduction="none").view(len(rows), ctx)
        means.extend(nll.mean(1).tolist())
    return means


def greedy(p, steps):
    ids = [1]
    for _ in range(steps):
        logits = forward(p, torch.tensor([ids], dtype=torch.long))[0, -1]
        nxt = int(torch.argmax(logits))
        if nxt == 1:
            break
        ids.append(nxt)
    return ids[1:]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=os.path.join(SHARED, "stories260K", "stories260K.bin"))
    ap.add_argument("--tokenizer", default=os.path.join(SHARED, "stories260K", "tok512.bin"))
    ap.add_argument("--data", default=os.path.join(SHARED, "text", "tinystories_val.txt"))
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--windows", type=int, default=64)
    ap.add_argument("--greedy-steps", type=int, default=64)
    ap.add_argument("--quant-windows", type=int, default=16,
                    help="windows scored for the fake-quantized models")
    ap.add_argument("--check-encode", type=int, default=200,
                    help="paragraphs to encode both ways as a self-check")
    a = ap.parse_args()
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))

    p64 = load_llama2c(a.model, torch.float64)
    p32 = load_llama2c(a.model, torch.float32)
    tok = Llama2cTokenizer(a.tokenizer, p64["vocab"])

    raw = open(a.data, "rb").read()
    text = re.sub(rb"\n\n+", b"\n", raw)
    for para in text.split(b"\n")[: a.check_encode]:
        if tok.encode(para) != tok.encode_naive(para):
            raise SystemExit("heap encode != run.c encode on %r" % para[:60])
    need = a.windows * a.ctx + 1
    full = [1] + tok.encode(text)
    stream = full
    if len(stream) < need:
        raise SystemExit("text has %d tokens, need %d" % (len(stream), need))
    stream = stream[:need]
    tok_hash = hashlib.sha256(struct.pack("<%di" % need, *stream)).hexdigest()

    with torch.no_grad():
        w64 = window_nll(p64, stream, a.windows, a.ctx)
        w32 = window_nll(p32, stream, a.windows, a.ctx)
        g = greedy(p64, a.greedy_steps)
        quant = {}
        for scheme in ("w8a8-dynamic", "awq-w4a16"):
            wq = window_nll(fake_quant(p32, scheme, torch.float64), stream, a.quant_windows, a.ctx)
            quant[scheme] = sum(wq) / len(wq)
        wb = window_nll({k: (v.to(torch.bfloat16).to(torch.float64) if torch.is_tensor(v) else v)
                         for k, v in p32.items()}, stream, a.quant_windows, a.ctx)
        quant["bf16"] = sum(wb) / len(wb)
        quant["f32"] = sum(w64[: a.quant_windows]) / a.quant_windows
        # the checkpoint's own RoPE tables agree with model.py's formula
        cos, sin = rope_tables(p64, p64["seq_len"], torch.float64)
        rope_diff = max(float((cos - p64["freq_cos"]).abs().max()),
                        float((sin - p64["freq_sin"]).abs().max()))
    mean64 = sum(w64) / len(w64)  # equal-size windows: mean of means
    mean32 = sum(w32) / len(w32)
    out = {
        "what": "llama2.c model.py reference on stories260K (tests/ref/stories260k_ref.py)",
        "model_sha256": sha256_file(a.model),
        "tokenizer_sha256": sha256_file(a.tokenizer),
        "data_sha256": sha256_file(a.data),
        "protocol": "text: blank-line runs -> one newline, one document: [BOS] + run.c encode(text); "
                    "window i = stream[i*ctx : i*ctx+ctx+1], inputs first ctx, all ctx targets scored",
        "ctx": a.ctx,
        "n_windows": a.windows,
        "n_scored": a.windows * a.ctx,
        "text_tokens": len(full),
        "tokens_sha256": tok_hash,
        "first_tokens": stream[:16],
        "mean_nll": mean64,
        "mean_nll_f32": mean32,
        "ppl": math.exp(mean64),
        "window_nll": w64,
        "rope_table_max_diff": rope_diff,
        "quant_windows": a.quant_windows,
        "quant_mean_nll": quant,
        "greedy_ids": g,
        "greedy_text": tok.decode(g),
    }
    json.dump(out, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
