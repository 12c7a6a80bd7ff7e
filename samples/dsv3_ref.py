#!/usr/bin/python3
"""PyTorch reference forward passes: DeepSeek-V3 (MLA + MoE) and Llama.

Written from docs/checkpoints.md, "Routing" and "Multi-head latent attention"
(deepseek-ai/DeepSeek-V3 inference/model.py) and HF transformers' Llama.  Module names reproduce the
Hugging Face tensor names exactly, so `state_dict()` keys are checkpoint keys
(model.layers.N.self_attn.q_a_proj.weight, ..., lm_head.weight).

DeepSeek-V3 details:
  * MLA, naive (non-absorbed) path: q = q_b(q_a_norm(q_a(x))) -> [H, nope+rope];
    kv_a_proj_with_mqa(x) -> [kv_lora | rope]; k_pe (shared by all heads) gets RoPE;
    kv_b(kv_a_norm(kv)) -> [H, nope+v].
  * RoPE rotates ADJACENT pairs (x[2i], x[2i+1]); YaRN frequency blend and the
    softmax mscale^2 correction apply when max_position_embeddings >
    rope_scaling.original_max_position_embeddings (the reference's
    max_seq_len > original_seq_len test).
  * MoE gate: sigmoid scores; e_score_correction_bias only for selection;
    groups scored by the sum of their top-2 biased scores, top topk_group groups
    kept (others -inf), top-k experts; weights = unbiased sigmoid scores,
    normalised (norm_topk_prob), times routed_scaling_factor; plus shared experts.
  * All math in torch's default dtype, float32 (weights are upcast from whatever they
    were stored in); `accumulation(torch.float64)` builds and runs a model in float64.
Forward signature for both models: forward(ids [B,S], cache=None, key_valid=None)
-> logits [B,S,V].  `cache` (a KVCache) enables incremental decoding with left
padding: key_valid [B,T_total] marks real (non-pad) positions.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def acc(x):
    """x in the accumulation dtype: torch's default, float32 unless `accumulation` changed it."""
    return x.to(torch.get_default_dtype())


class accumulation:
    """with accumulation(torch.float64): build, load and run a model in float64."""

    def __init__(self, dtype):
        self.dtype = dtype

    def __enter__(self):
        self.prev = torch.get_default_dtype()
        torch.set_default_dtype(self.dtype)
        return self

    def __exit__(self, *exc):
        torch.set_default_dtype(self.prev)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        x = acc(x)
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return acc(self.weight) * x


def lin(i, o):
    return nn.Linear(i, o, bias=False)


class MLP(nn.Module):
    def __init__(self, hidden, inter):
        super().__init__()
        self.gate_proj = lin(hidden, inter)
        self.up_proj = lin(hidden, inter)
        self.down_proj = lin(inter, hidden)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class KVCache:
    """Per-layer key/value tensors [B, H, T, d] plus absolute positions."""

    def __init__(self, n_layers):
        self.k = [None] * n_layers
        self.v = [None] * n_layers
        self.length = 0

    def update(self, layer, k, v):
        if self.k[layer] is not None:
            k = torch.cat([self.k[layer], k], 2)
            v = torch.cat([self.v[layer], v], 2)
        self.k[layer], self.v[layer] = k, v
        return k, v


def attn_mask(S, T, device, key_valid):
    """[B or 1, 1, S, T] bool: query i (absolute T-S+i) sees keys <= itself that are valid."""
    q_abs = torch.arange(T - S, T, device=device)[:, None]
    k_abs = torch.arange(T, device=device)[None, :]
    m = (k_abs <= q_abs)[None, None]
    if key_valid is not None:
        m = m & key_valid[:, None, None, :T]
        m = m | (k_abs == q_abs)[None, None]   # a pad query still needs one key (its output is unused)
    return m


def sdpa(q, k, v, mask, scale):
    s = torch.matmul(q, k.transpose(-1, -2)) * scale
    s = s.masked_fill(~mask, float("-inf"))
    p = torch.softmax(acc(s), -1)
    return torch.matmul(p, v)


def positions_for(B, S, start, key_valid, device):
    """Positions [B,S]: absolute index minus the number of left pads (0 for pads)."""
    pos = torch.arange(start, start + S, device=device)[None, :].expand(B, S)
    if key_valid is not None:
        npad = (~key_valid[:, :start + S]).long().cumsum(1)[:, start:start + S]
        pos = (pos - npad).clamp(min=0)
    return pos


# ---------------------------------------------------------------- DeepSeek-V3

def yarn_freqs(cfg):
    """Per-pair inverse frequencies [rope_dim/2], as DeepSeek inference/model.py precompute_freqs_cis."""
    dim = cfg["qk_rope_head_dim"]
    base = cfg["rope_theta"]
    rs = cfg.get("rope_scaling") or {}
    freqs = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.get_default_dtype()) / dim))
    orig = rs.get("original_max_position_embeddings", cfg["max_position_embeddings"])
    if rs and cfg["max_position_embeddings"] > orig:
        factor, bf, bs = rs["factor"], rs["beta_fast"], rs["beta_slow"]

        def corr_dim(nrot):
            return dim * math.log(orig / (nrot * 2 * math.pi)) / (2 * math.log(base))
        low = max(math.floor(corr_dim(bf)), 0)
        high = min(math.ceil(corr_dim(bs)), dim - 1)
        if low == high:
            high += 0.001
        ramp = ((torch.arange(dim // 2, dtype=torch.get_default_dtype()) - low) / (high - low)).clamp(0, 1)
        smooth = 1 - ramp
        freqs = freqs / factor * (1 - smooth) + freqs * smooth
    return freqs


def softmax_scale(cfg):
    s = (cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"]) ** -0.5
    rs = cfg.get("rope_scaling") or {}
    if rs and cfg["max_position_embeddings"] > rs.get("original_max_position_embeddings", 1 << 62):
        m = 0.1 * rs.get("mscale", 1.0) * math.log(rs["factor"]) + 1.0
        s = s * m * m
    return s


def rope_adjacent(x, pos, freqs):
    """x [B,S,H,d] rotated in adjacent pairs by angle pos*freq (complex multiply)."""
    ang = acc(pos[..., None]) * freqs          # [B,S,d/2]
    cos, sin = torch.cos(ang)[:, :, None, :], torch.sin(ang)[:, :, None, :]
    x0, x1 = acc(x[..., 0::2]), acc(x[..., 1::2])
    return torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], -1).flatten(-2)


class MLA(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        h = cfg["hidden_size"]
        self.nh = cfg["num_attention_heads"]
        self.nope, self.rope, self.vd = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]
        self.kvr = cfg["kv_lora_rank"]
        qk = self.nope + self.rope
        if cfg.get("q_lora_rank"):
            self.q_a_proj = lin(h, cfg["q_lora_rank"])
            self.q_a_layernorm = RMSNorm(cfg["q_lora_rank"], cfg["rms_norm_eps"])
            self.q_b_proj = lin(cfg["q_lora_rank"], self.nh * qk)
        else:
            self.q_proj = lin(h, self.nh * qk)
        self.kv_a_proj_with_mqa = lin(h, self.kvr + self.rope)
        self.kv_a_layernorm = RMSNorm(self.kvr, cfg["rms_norm_eps"])
        self.kv_b_proj = lin(self.kvr, self.nh * (self.nope + self.vd))
        self.o_proj = lin(self.nh * self.vd, h)
        self.scale = softmax_scale(cfg)
        self.register_buffer("freqs", yarn_freqs(cfg), persistent=False)

    def forward(self, x, pos, mask, cache, li):
        B, S, _ = x.shape
        if hasattr(self, "q_a_proj"):
            q = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x)))
        else:
            q = self.q_proj(x)
        q = q.view(B, S, self.nh, self.nope + self.rope)
        q_nope, q_pe = q[..., :self.nope], q[..., self.nope:]
        q_pe = rope_adjacent(q_pe, pos, self.freqs)
        kv = self.kv_a_proj_with_mqa(x)
        c, k_pe = kv[..., :self.kvr], kv[..., self.kvr:]
        k_pe = rope_adjacent(k_pe.unsqueeze(2), pos, self.freqs)          # [B,S,1,rope]
        kvb = self.kv_b_proj(self.kv_a_layernorm(c)).view(B, S, self.nh, self.nope + self.vd)
        k_nope, v = kvb[..., :self.nope], kvb[..., self.nope:]
        k = torch.cat([k_nope, k_pe.expand(B, S, self.nh, self.rope)], -1)
        q = torch.cat([q_nope, q_pe], -1)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        if cache is not None:
            k, v = cache.update(li, k, v)
        o = sdpa(q, k, v, mask, self.scale)
        return self.o_proj(o.transpose(1, 2).reshape(B, S, self.nh * self.vd))


class Gate(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.E = cfg["n_routed_experts"]
        self.k = cfg["num_experts_per_tok"]
        self.ng, self.tg = cfg["n_group"], cfg["topk_group"]
        self.scale = cfg["routed_scaling_factor"]
        self.norm = cfg["norm_topk_prob"]
        self.weight = nn.Parameter(torch.empty(self.E, cfg["hidden_size"]))
        # F32 in the checkpoint; a parameter without gradient (updated aux-loss-free in training).
        self.e_score_correction_bias = nn.Parameter(torch.zeros(self.E), requires_grad=False)

    def forward(self, x):
        """x [T,h] -> weights [T,k], indices [T,k], sigmoid scores [T,E]."""
        scores = torch.sigmoid(F.linear(acc(x), acc(self.weight)))
        biased = scores + acc(self.e_score_correction_bias)
        if self.ng > 1:
            g = biased.view(-1, self.ng, self.E // self.ng)
            gscore = g.topk(2, dim=-1)[0].sum(-1)                              # [T, ng]
            gidx = gscore.topk(self.tg, dim=-1)[1]
            keep = torch.zeros_like(gscore, dtype=torch.bool).scatter_(1, gidx, True)
            biased = g.masked_fill(~keep[..., None], float("-inf")).view(-1, self.E)
        idx = biased.topk(self.k, dim=-1)[1]
        w = scores.gather(1, idx)
        if self.norm:
            w = w / w.sum(-1, keepdim=True)
        return w * self.scale, idx, scores


class MoE(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        h, mi = cfg["hidden_size"], cfg["moe_intermediate_size"]
        self.gate = Gate(cfg)
        self.experts = nn.ModuleList([MLP(h, mi) for _ in range(cfg["n_routed_experts"])])
        self.shared_experts = MLP(h, mi * cfg["n_shared_experts"]) if cfg.get("n_shared_experts") else None
        self.last = None   # (idx, scores) of the last call, for load balancing in training

    def forward(self, x):
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        w, idx, scores = self.gate(x)
        self.last = (idx, scores)
        y = torch.zeros_like(x)
        for e in range(len(self.experts)):
            tok, slot = (idx == e).nonzero(as_tuple=True)
            if tok.numel() == 0:
                continue
            out = self.experts[e](x[tok]) * w[tok, slot, None]
            y = y.index_add(0, tok, out)
        if self.shared_experts is not None:
            y = y + self.shared_experts(x)
        return y.view(shape)


class DSV3Layer(nn.Module):
    def __init__(self, cfg, i):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])
        self.self_attn = MLA(cfg)
        self.post_attention_layernorm = RMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])
        dense = i < cfg["first_k_dense_replace"] or i % cfg.get("moe_layer_freq", 1) != 0
        self.mlp = MLP(cfg["hidden_size"], cfg["intermediate_size"]) if dense else MoE(cfg)

    def forward(self, x, pos, mask, cache, li):
        x = x + self.self_attn(self.input_layernorm(x), pos, mask, cache, li)
        return x + self.mlp(self.post_attention_layernorm(x))


class Backbone(nn.Module):
    def __init__(self, cfg, layer_cls):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg["vocab_size"], cfg["hidden_size"])
        self.layers = nn.ModuleList([layer_cls(cfg, i) for i in range(cfg["num_hidden_layers"])])
        self.norm = RMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])


class CausalLM(nn.Module):
    layer_cls = None

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.model = Backbone(cfg, self.layer_cls)
        self.lm_head = lin(cfg["hidden_size"], cfg["vocab_size"])

    def forward(self, ids, cache=None, key_valid=None, return_hidden=False):
        B, S = ids.shape
        start = cache.length if cache is not None else 0
        T = start + S
        pos = positions_for(B, S, start, key_valid, ids.device)
        mask = attn_mask(S, T, ids.device, key_valid)
        x = acc(self.model.embed_tokens(ids))
        for li, layer in enumerate(self.model.layers):
            x = layer(x, pos, mask, cache, li)
        if cache is not None:
            cache.length = T
        x = self.model.norm(x)
        return x if return_hidden else self.lm_head(x)


class DeepseekV3ForCausalLM(CausalLM):
    layer_cls = DSV3Layer


# ---------------------------------------------------------------- Llama

def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], -1)


class LlamaAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        h = cfg["hidden_size"]
        self.nh, self.nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
        self.hd = cfg.get("head_dim") or h // self.nh
        self.q_proj = lin(h, self.nh * self.hd)
        self.k_proj = lin(h, self.nkv * self.hd)
        self.v_proj = lin(h, self.nkv * self.hd)
        self.o_proj = lin(self.nh * self.hd, h)
        inv = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, self.hd, 2, dtype=torch.get_default_dtype()) / self.hd))
        self.register_buffer("inv_freq", inv, persistent=False)

    def forward(self, x, pos, mask, cache, li):
        B, S, _ = x.shape
        q = self.q_proj(x).view(B, S, self.nh, self.hd).transpose(1, 2)
        k = self.k_proj(x).view(B, S, self.nkv, self.hd).transpose(1, 2)
        v = self.v_proj(x).view(B, S, self.nkv, self.hd).transpose(1, 2)
        ang = acc(pos[..., None]) * self.inv_freq
        emb = torch.cat([ang, ang], -1)[:, None]                              # [B,1,S,hd]
        cos, sin = emb.cos(), emb.sin()
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if cache is not None:
            k, v = cache.update(li, k, v)
        rep = self.nh // self.nkv
        k = k.repeat_interleave(rep, 1)
        v = v.repeat_interleave(rep, 1)
        o = sdpa(q, k, v, mask, self.hd ** -0.5)
        return self.o_proj(o.transpose(1, 2).reshape(B, S, self.nh * self.hd))


class LlamaLayer(nn.Module):
    def __init__(self, cfg, i):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])
        self.self_attn = LlamaAttention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])
        self.mlp = MLP(cfg["hidden_size"], cfg["intermediate_size"])

    def forward(self, x, pos, mask, cache, li):
        x = x + self.self_attn(self.input_layernorm(x), pos, mask, cache, li)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaForCausalLM(CausalLM):
    layer_cls = LlamaLayer


def build(cfg):
    arch = cfg["architectures"][0]
    return {"DeepseekV3ForCausalLM": DeepseekV3ForCausalLM, "LlamaForCausalLM": LlamaForCausalLM}[arch](cfg)
