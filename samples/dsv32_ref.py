#!/usr/bin/python3
"""PyTorch reference forward of DeepSeek-V3.2 (MLA + DSA lightning indexer + MoE), CPU torch 1.13.

DeepSeek's fixed V3.2 inference code (Indexer.forward, MLA.forward, act_quant,
fp8_index), re-implemented in float32 with the FP8 steps emulated exactly:
torch 1.13 has no float8 dtype, so e4m3fn rounding (ties to even, subnormals
down to 2^-9, saturation at 448) and the ue8m0 power-of-two block scales are
computed from float bits (`e4m3_round`, `ue8m0_scale`).

Per layer (x = input_layernorm output, qr = q_a_layernorm(q_a_proj(x))):
  indexer  q = wq_b(qr) [H_i, D] split [rope | nope]; k = LayerNorm(wk(x)) [D]
           RoPE on the first rope dims, NOT interleaved (rotate-half pairs j, j+rope/2)
           fp8: q, k = Hadamard(.) * D^-0.5, then act_quant per D-vector (ue8m0)
           w = weights_proj(x) * H_i^-0.5 * q_scale * D^-0.5
           score[m, n] = k_scale[n] * sum_h ReLU(q_code[m, h] . k_code[n]) * w[m, h]
           causal mask, top min(index_topk, end_pos) keys
  MLA      interleaved RoPE (adjacent pairs) as V3; fp8: the normed latent is
           rounded through e4m3 per 128-block (ue8m0) before caching and before
           kv_b_proj; scores of keys the indexer did not select are -inf.
dsa="float": no Hadamard, no e4m3 (a bf16 indexer's arithmetic, in float32).
Float64 accumulation: build and run the model inside `accumulation(torch.float64)`
(dsv3_ref): every product and sum in float64, the e4m3 and ue8m0 steps unchanged
(they land on the same grid); samples/dsv32_f64.py compares it with float32.

The model reuses dsv3_ref's MoE, norms and YaRN frequencies; module names are
the Hugging Face tensor names (model.layers.N.self_attn.indexer.wq_b.weight ...).
Forward: model(ids [B, S], cache=None) -> logits [B, S, V]; a Cache makes
successive calls continue the sequence (prefill then token-by-token decode).
"""
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dsv3_ref as v3  # noqa: E402
from dsv3_ref import acc, accumulation  # noqa: E402,F401

E4M3_MAX = 448.0
LATENT_BLOCK = 128


# ---------------------------------------------------------------- FP8 emulation

def e4m3_round(x):
    """Nearest float8_e4m3fn value of each element (ties to even), saturating at +-448."""
    x = acc(x)
    a = x.abs().clamp(max=E4M3_MAX)
    _, e = torch.frexp(a)                      # a = m * 2^e, m in [0.5, 1)
    q = torch.pow(2.0, (e - 4).to(x.dtype))    # quantum 2^(e-1-3) for normals
    q = torch.where(a < 2.0 ** -6, torch.full_like(a, 2.0 ** -9), q)
    r = torch.round(a / q) * q                 # torch.round: half to even
    r = r.clamp(max=E4M3_MAX)
    return torch.copysign(r, x)


def e4m3_bits(x):
    """float8_e4m3fn bit patterns (uint8 values in an int64 tensor) of e4m3-representable x."""
    x = e4m3_round(x)
    s = torch.signbit(x).long() << 7
    a = x.abs()
    _, e = torch.frexp(a)
    sub = a < 2.0 ** -6
    man_sub = (a * 512.0).long()
    exp = (e - 1 + 7).long()
    man = ((a / torch.pow(2.0, (e - 1).float()) - 1.0) * 8.0).round().long()
    return torch.where(sub, s | man_sub, s | (exp << 3) | man)


def ue8m0_scale(amax):
    """2^ceil(log2(max(amax, 1e-4) / 448)) from the float bits, as the reference kernel's fast_log2_ceil.

    In float64 accumulation the same power of two from frexp (s = m * 2^e,
    m in [0.5, 1): the ceiling is e - 1 when m is 0.5, else e): s is
    max(amax, 1e-4) / 448, a normal number in either dtype."""
    s = (acc(amax).clamp(min=1e-4) / E4M3_MAX).contiguous()
    if s.dtype == torch.float32:
        bits = s.view(torch.int32).long()
        e = ((bits >> 23) & 0xFF) - 127 + ((bits & 0x7FFFFF) != 0).long()
    else:
        m, e = torch.frexp(s)
        e = e.long() - (m == 0.5).long()
    return torch.pow(2.0, e.to(s.dtype))


def act_quant(x, block):
    """Blocks of `block` values along the last dim (a shorter last block): (e4m3 values, scales [..., nblocks])."""
    outs, scales = [], []
    for b0 in range(0, x.shape[-1], block):
        xb = acc(x[..., b0:b0 + block])
        s = ue8m0_scale(xb.abs().amax(-1, keepdim=True))
        outs.append(e4m3_round(xb / s))
        scales.append(s)
    return torch.cat(outs, -1), torch.cat(scales, -1)


def fp8_roundtrip(x, block):
    codes, scales = act_quant(x, block)
    out = []
    for i, b0 in enumerate(range(0, x.shape[-1], block)):
        out.append(codes[..., b0:b0 + block] * scales[..., i:i + 1])
    return torch.cat(out, -1)


def hadamard_matrix(n):
    h = torch.ones(1, 1)
    while h.shape[0] < n:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return h


def rotate_activation(x):
    """Walsh-Hadamard transform of the last dim (Sylvester order), scale D^-0.5."""
    n = x.shape[-1]
    return (acc(x) @ hadamard_matrix(n)) * n ** -0.5


def rope_half(x, pos, freqs):
    """x [B,S,(H,)d] rotated in pairs (j, j + d/2) (not interleaved)."""
    ang = acc(pos[..., None]) * freqs                  # [B,S,d/2]
    while ang.dim() < x.dim():
        ang = ang.unsqueeze(-2)
    cos, sin = torch.cos(ang), torch.sin(ang)
    h = x.shape[-1] // 2
    x1, x2 = acc(x[..., :h]), acc(x[..., h:])
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1)


# ---------------------------------------------------------------- model

class Cache:
    """Per layer: normed (and rounded) latents, roped k_pe, indexer key codes and scales."""

    def __init__(self, n_layers):
        self.lat = [None] * n_layers
        self.pe = [None] * n_layers
        self.ik = [None] * n_layers
        self.iks = [None] * n_layers
        self.length = 0


def cat_or(a, b):
    return b if a is None else torch.cat([a, b], 1)


class Indexer(nn.Module):
    def __init__(self, cfg, dsa):
        super().__init__()
        self.nh, self.hd = cfg["index_n_heads"], cfg["index_head_dim"]
        self.rope = cfg["qk_rope_head_dim"]
        self.topk = cfg["index_topk"]
        self.fp8 = dsa == "fp8"
        self.wq_b = v3.lin(cfg["q_lora_rank"], self.nh * self.hd)
        self.wk = v3.lin(cfg["hidden_size"], self.hd)
        self.k_norm = nn.LayerNorm(self.hd, eps=1e-6)
        self.weights_proj = v3.lin(cfg["hidden_size"], self.nh)
        self.last_topk = None   # [B, S, k] indices of the last call

    def forward(self, x, qr, pos, freqs, cache, li, start):
        B, S, _ = x.shape
        q = self.wq_b(qr).view(B, S, self.nh, self.hd)
        q = torch.cat([rope_half(q[..., :self.rope], pos, freqs), q[..., self.rope:]], -1)
        k = self.k_norm(self.wk(x))
        k = torch.cat([rope_half(k[..., :self.rope], pos, freqs), k[..., self.rope:]], -1)
        w = self.weights_proj(x) * self.nh ** -0.5                 # [B,S,H]
        if self.fp8:
            q, qs = act_quant(rotate_activation(q), self.hd)       # qs [B,S,H,1]
            k, ks = act_quant(rotate_activation(k), self.hd)       # ks [B,S,1]
            w = w.unsqueeze(-1) * qs * self.hd ** -0.5
        else:
            ks = torch.ones(B, S, 1)
            w = w.unsqueeze(-1) * self.hd ** -0.5
        if cache is not None:
            cache.ik[li] = cat_or(cache.ik[li], k)
            cache.iks[li] = cat_or(cache.iks[li], ks)
            k, ks = cache.ik[li], cache.iks[li]
        end = start + S
        logits = torch.einsum("bshd,btd->bsht", q, k)               # [B,S,H,T]
        score = (logits.clamp(min=0) * w).sum(2) * ks[..., 0][:, None, :]
        qpos = torch.arange(start, end)[:, None]
        kpos = torch.arange(end)[None, :]
        score = score.masked_fill(kpos > qpos, float("-inf"))
        # topk(min(index_topk, end_pos)); equal scores (ReLU makes exact zeros
        # common) go to the lower key, as a stable descending sort orders them
        idx = torch.sort(score, dim=-1, descending=True, stable=True)[1][..., :min(self.topk, end)]
        self.last_topk = idx
        return idx


class MLA32(v3.MLA):
    def __init__(self, cfg, dsa):
        super().__init__(cfg)
        self.indexer = Indexer(cfg, dsa)
        self.fp8 = dsa == "fp8"
        self.dense = False      # train_dsv32.py: attend to every causal key
        self.capture = None     # train_dsv32.py: a list receiving (x, qr, attention summed over heads, idx)

    def forward(self, x, pos, cache, li, start):
        B, S, _ = x.shape
        qr = self.q_a_layernorm(self.q_a_proj(x))
        q = self.q_b_proj(qr).view(B, S, self.nh, self.nope + self.rope)
        q_nope, q_pe = q[..., :self.nope], q[..., self.nope:]
        q_pe = v3.rope_adjacent(q_pe, pos, self.freqs)
        kv = self.kv_a_proj_with_mqa(x)
        c, k_pe = kv[..., :self.kvr], kv[..., self.kvr:]
        k_pe = v3.rope_adjacent(k_pe.unsqueeze(2), pos, self.freqs)[:, :, 0]     # [B,S,rope]
        lat = self.kv_a_layernorm(c)
        if self.fp8:
            lat = fp8_roundtrip(lat, LATENT_BLOCK)
        if cache is not None:
            cache.lat[li] = cat_or(cache.lat[li], lat)
            cache.pe[li] = cat_or(cache.pe[li], k_pe)
            lat, k_pe = cache.lat[li], cache.pe[li]
        T = lat.shape[1]
        idx = self.indexer(x, qr, pos, self.freqs, cache, li, start)            # [B,S,k]
        kvb = self.kv_b_proj(lat).view(B, T, self.nh, self.nope + self.vd)
        k_nope, v = kvb[..., :self.nope], kvb[..., self.nope:]
        scores = (torch.einsum("bshd,bthd->bsht", q_nope, k_nope) +
                  torch.einsum("bshr,btr->bsht", q_pe, k_pe)) * self.scale
        qpos = torch.arange(start, start + S)[:, None]
        kpos = torch.arange(T)[None, :]
        mask = torch.full((B, S, T), float("-inf")).scatter_(-1, idx, 0.0)
        mask = mask.masked_fill((kpos > qpos)[None], float("-inf"))
        if self.dense:
            mask = torch.zeros(B, S, T).masked_fill((kpos > qpos)[None], float("-inf"))
        scores = scores + mask[:, :, None, :]
        p = torch.softmax(acc(scores), -1)
        if self.capture is not None:
            self.capture.append((x.detach(), qr.detach(), p.sum(2).detach(), idx))
        o = torch.einsum("bsht,bthd->bshd", p, v)
        return self.o_proj(o.reshape(B, S, self.nh * self.vd))


class DSV32Layer(v3.DSV3Layer):
    def __init__(self, cfg, i, dsa):
        super().__init__(cfg, i)
        self.self_attn = MLA32(cfg, dsa)

    def forward(self, x, pos, cache, li, start):
        x = x + self.self_attn(self.input_layernorm(x), pos, cache, li, start)
        return x + self.mlp(self.post_attention_layernorm(x))


class Backbone32(nn.Module):
    def __init__(self, cfg, dsa):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg["vocab_size"], cfg["hidden_size"])
        self.layers = nn.ModuleList([DSV32Layer(cfg, i, dsa) for i in range(cfg["num_hidden_layers"])])
        self.norm = v3.RMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])


class DeepseekV32ForCausalLM(nn.Module):
    def __init__(self, cfg, dsa="fp8"):
        super().__init__()
        assert dsa in ("fp8", "float")
        self.cfg = cfg
        self.model = Backbone32(cfg, dsa)
        self.lm_head = v3.lin(cfg["hidden_size"], cfg["vocab_size"])

    def forward(self, ids, cache=None, return_hidden=False):
        B, S = ids.shape
        start = cache.length if cache is not None else 0
        pos = torch.arange(start, start + S)[None, :].expand(B, S)
        x = acc(self.model.embed_tokens(ids))
        for li, layer in enumerate(self.model.layers):
            x = layer(x, pos, cache, li, start)
        if cache is not None:
            cache.length = start + S
        x = self.model.norm(x)
        return x if return_hidden else self.lm_head(x)


def build(cfg, dsa="fp8"):
    return DeepseekV32ForCausalLM(cfg, dsa)
