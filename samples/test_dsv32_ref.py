#!/usr/bin/python3
"""Tests of the DeepSeek-V3.2 reference (dsv32_ref.py): the e4m3 / ue8m0 emulation
against known bit patterns and against fp8.py's decode table, the Hadamard
transform, the indexer's RoPE layout, the model's sparse == dense rule, float64
accumulation (every step in float64, the e4m3 grid unchanged) and
dsv32_f64.py's divergence finding and cause classification.

Run: /usr/bin/python3 samples/test_dsv32_ref.py (needs torch; numpy for fp8.py)."""
import math
import os
import sys
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dsv32_ref as R  # noqa: E402
import fp8  # noqa: E402


def tiny_cfg(topk=8):
    return {
        "architectures": ["DeepseekV32ForCausalLM"], "model_type": "deepseek_v32",
        "vocab_size": 64, "hidden_size": 32, "intermediate_size": 48, "moe_intermediate_size": 16,
        "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 2,
        "q_lora_rank": 24, "kv_lora_rank": 160, "qk_nope_head_dim": 8, "qk_rope_head_dim": 8,
        "v_head_dim": 8, "n_routed_experts": 4, "n_shared_experts": 1, "num_experts_per_tok": 2,
        "n_group": 2, "topk_group": 1, "routed_scaling_factor": 2.5, "norm_topk_prob": True,
        "first_k_dense_replace": 1, "moe_layer_freq": 1, "rms_norm_eps": 1e-6, "rope_theta": 10000,
        "max_position_embeddings": 256, "rope_scaling": None,
        "index_n_heads": 4, "index_head_dim": 16, "index_topk": topk,
    }


class E4M3(unittest.TestCase):
    def test_known_bits(self):
        cases = [(448.0, 0x7E), (1.0, 0x38), (2.0 ** -9, 0x01), (2.0 ** -6, 0x08), (-2.0, 0xC0),
                 (240.0, 0x77), (0.5 * 2.0 ** -9, 0x00),          # tie 0 | 2^-9 -> even 0
                 (1.5 * 2.0 ** -9, 0x02),                          # tie 1 | 2 (x 2^-9) -> even 2
                 (1.0625, 0x38),                                   # tie 1.0 | 1.125 -> 1.0
                 (1.1875, 0x3A),                                   # tie 1.125 | 1.25 -> 1.25
                 (500.0, 0x7E), (-1e9, 0xFE), (7 * 2.0 ** -9, 0x07), (0.0, 0x00)]
        x = torch.tensor([c[0] for c in cases])
        got = R.e4m3_bits(x).tolist()
        self.assertEqual(got, [c[1] for c in cases])

    def test_every_code_is_a_fixed_point(self):
        table = torch.tensor(fp8.decode_table())
        ok = ~torch.isnan(table)
        v = table[ok]
        self.assertTrue(torch.equal(R.e4m3_round(v), v))
        self.assertEqual(R.e4m3_bits(v).tolist(), [b for b in range(256) if ok[b]])

    def test_rounding_is_nearest(self):
        g = torch.Generator().manual_seed(1)
        x = torch.randn(20000, generator=g) * torch.pow(2.0, torch.randint(-12, 9, (20000,), generator=g).float())
        r = R.e4m3_round(x)
        table = torch.tensor(fp8.decode_table())
        table = table[~torch.isnan(table)]
        d = (x.clamp(-448, 448)[:, None] - table[None, :]).abs()
        best = d.min(1)[0]
        self.assertTrue(torch.equal((x.clamp(-448, 448) - r).abs(), best))

    def test_ue8m0(self):
        amax = torch.tensor([448.0, 448.0001, 224.0, 300.0, 0.0, 1.0, 896.0, 897.0])
        want = [1.0, 2.0, 0.5, 1.0, 2.0 ** -22, 2.0 ** -8, 2.0, 4.0]
        self.assertEqual(R.ue8m0_scale(amax).tolist(), want)

    def test_act_quant_blocks(self):
        x = torch.randn(3, 160)
        codes, s = R.act_quant(x, 128)
        self.assertEqual(tuple(s.shape), (3, 2))
        self.assertTrue(((codes.abs() <= 448)).all())
        m = torch.log2(s)
        self.assertTrue(torch.equal(m, m.round()))            # powers of two
        y = R.fp8_roundtrip(x, 128)
        self.assertLess(((y - x).abs() / x.abs().clamp(min=1e-3)).median().item(), 0.07)


class Transforms(unittest.TestCase):
    def test_hadamard(self):
        h = R.hadamard_matrix(4)
        self.assertEqual(h.tolist(), [[1, 1, 1, 1], [1, -1, 1, -1], [1, 1, -1, -1], [1, -1, -1, 1]])
        x = torch.randn(5, 128)
        y = R.rotate_activation(x)
        self.assertTrue(torch.allclose(y.norm(dim=-1), x.norm(dim=-1), rtol=1e-5))
        self.assertTrue(torch.allclose(R.rotate_activation(y), x, atol=1e-5))
        e = torch.zeros(1, 8)
        e[0, 0] = 1
        self.assertTrue(torch.allclose(R.rotate_activation(e), torch.full((1, 8), 8 ** -0.5)))

    def test_rope_half_pairs(self):
        freqs = torch.tensor([0.5, 0.25])
        x = torch.tensor([[[1.0, 2.0, 3.0, 4.0]]])
        pos = torch.tensor([[3]])
        y = R.rope_half(x, pos, freqs)[0, 0]
        a = [1.5, 0.75]
        want = [1 * math.cos(a[0]) - 3 * math.sin(a[0]), 2 * math.cos(a[1]) - 4 * math.sin(a[1]),
                1 * math.sin(a[0]) + 3 * math.cos(a[0]), 2 * math.sin(a[1]) + 4 * math.cos(a[1])]
        self.assertTrue(torch.allclose(y, torch.tensor(want), atol=1e-6))


class Model(unittest.TestCase):
    def make(self, topk, dsa="fp8"):
        torch.manual_seed(3)
        m = R.build(tiny_cfg(topk), dsa)
        with torch.no_grad():
            for p in m.parameters():
                p.normal_(0, 0.3)
        return m.eval()

    def test_sparse_equals_dense_within_topk(self):
        ids = torch.randint(0, 64, (1, 12))
        with torch.no_grad():
            a = self.make(12)(ids)
            b = self.make(1000)(ids)
            c = self.make(6)(ids)
        self.assertTrue(torch.equal(a, b))                 # every key selected either way
        self.assertTrue(torch.equal(a[:, :6], c[:, :6]))   # rows 0..5 see <= 6 keys
        self.assertGreater((a[:, 6:] - c[:, 6:]).abs().max().item(), 1e-3)

    def test_decode_matches_prefill(self):
        ids = torch.randint(0, 64, (1, 14))
        m = self.make(5)
        with torch.no_grad():
            full = m(ids)
            cache = R.Cache(2)
            steps = [m(ids[:, :4], cache)] + [m(ids[:, i:i + 1], cache) for i in range(4, 14)]
        dec = torch.cat(steps, 1)
        self.assertLess((dec - full).abs().max().item(), 1e-3)


class Float64(unittest.TestCase):
    """accumulation(torch.float64): every step in float64, the same model."""

    def test_fp8_steps_keep_float64(self):
        g = torch.Generator().manual_seed(5)
        x = torch.randn(4, 160, generator=g, dtype=torch.float64) * 3
        with R.accumulation(torch.float64):
            self.assertEqual(R.e4m3_round(x).dtype, torch.float64)
            codes, s = R.act_quant(x, 128)
            self.assertEqual((codes.dtype, s.dtype), (torch.float64, torch.float64))
            self.assertEqual(R.rotate_activation(x[:, :128]).dtype, torch.float64)
            self.assertEqual(R.ue8m0_scale(x.abs().amax(-1)).dtype, torch.float64)
            # x + 1e-12 would vanish in float32; a float64 Hadamard keeps it
            y = R.rotate_activation(x[:, :128] + 1e-12) - R.rotate_activation(x[:, :128])
            self.assertGreater(y.abs().max().item(), 0.0)
        self.assertEqual(torch.get_default_dtype(), torch.float32)    # restored

    def test_same_grid_as_float32(self):
        # on float32 values the e4m3 codes and ue8m0 scales do not depend on the dtype
        g = torch.Generator().manual_seed(6)
        x = torch.randn(64, 256, generator=g) * torch.pow(2.0, torch.randint(-14, 10, (64, 1), generator=g).float())
        c32, s32 = R.act_quant(x, 128)
        with R.accumulation(torch.float64):
            c64, s64 = R.act_quant(x.double(), 128)
        self.assertTrue(torch.equal(c32.double(), c64))
        self.assertTrue(torch.equal(s32.double(), s64))
        amax = torch.tensor([448.0, 448.0001, 224.0, 300.0, 0.0, 1.0, 896.0, 897.0, 3e-7, 2.0 ** -20 * 448])
        with R.accumulation(torch.float64):
            self.assertEqual(R.ue8m0_scale(amax.double()).tolist(), R.ue8m0_scale(amax).tolist())

    def test_model_runs_in_float64(self):
        torch.manual_seed(3)
        m32 = R.build(tiny_cfg(6), "fp8")
        with torch.no_grad():
            for p in m32.parameters():
                p.normal_(0, 0.3)
        with R.accumulation(torch.float64):
            m64 = R.build(tiny_cfg(6), "fp8")
            m64.load_state_dict(m32.state_dict())
        dtypes = set()
        hooks = [mod.register_forward_hook(lambda mod, a, out: dtypes.add(out.dtype)
                                           if torch.is_tensor(out) and out.is_floating_point() else None)
                 for mod in m64.modules()]
        ids = torch.randint(0, 64, (1, 14))
        with torch.no_grad():
            a = m32.eval()(ids)
            with R.accumulation(torch.float64):
                b = m64.eval()(ids)
        for h in hooks:
            h.remove()
        self.assertEqual(dtypes, {torch.float64})
        self.assertEqual(b.dtype, torch.float64)
        d = (a.double() - b).abs().max().item()
        self.assertGreater(d, 0.0)     # not the float32 run again
        self.assertLess(d, 1e-3)       # the same model


class F64Compare(unittest.TestCase):
    """dsv32_f64.py: the first divergent position and the first discrete difference."""

    def test_first_divergence(self):
        import dsv32_f64 as C
        a = torch.zeros(6, 4, dtype=torch.float64)
        b = a.clone()
        b[2, 1] = 1e-5
        b[4, 3] = -1e-2
        self.assertEqual(C.first_divergence(a, b, 1e-3)[0], 4)
        self.assertEqual(C.first_divergence(a, b, 1e-1)[0], -1)

    def test_classify(self):
        import dsv32_f64 as C
        n = {"latent": 3, "iq": 2, "ik": 2}
        row = lambda pos, layer, kind, v: (pos, layer, C.KINDS.index(kind), torch.tensor(v, dtype=torch.float64))
        base = [row(0, 0, "latent", [1, 2, 3, -7]), row(0, 0, "iq", [4, 5, -6]), row(0, 0, "ik", [1, 1, 0]),
                row(0, 0, "topk", [0]), row(1, 0, "latent", [1, 2, 3, -7]), row(1, 0, "iq", [4, 5, -6]),
                row(1, 0, "ik", [2, 2, 0]), row(1, 0, "topk", [0, 1]), row(1, 1, "moe", [0, 2]),
                row(2, 0, "latent", [1, 1, 1, -7]), row(2, 0, "iq", [4, 5, -6]), row(2, 0, "ik", [3, 3, 0]),
                row(2, 0, "topk", [0, 1])]
        at = {(r[0], r[1], C.KINDS[r[2]]): i for i, r in enumerate(base)}

        def changed(key, v):
            out = list(base)
            out[at[key]] = row(key[0], key[1], key[2], v)
            return out

        self.assertIsNone(C.classify(base, list(base), 2, n))
        self.assertFalse(C.indexer_flips(base, list(base)))
        lat = changed((1, 0, "latent"), [1, 2.5, 3, -7])
        self.assertEqual(C.classify(base, lat, 2, n), ("e4m3 (latent)", 1, 0))
        self.assertIsNone(C.classify(base, lat, 0, n))          # after the divergence: not its cause
        self.assertEqual(C.classify(base, changed((1, 0, "latent"), [1, 2, 3, -8]), 2, n), ("ue8m0 (latent)", 1, 0))
        # an indexer code alone moves nothing; with the top-k set after it, that is the cause
        iq = changed((1, 0, "iq"), [4, 5.5, -6])
        self.assertIsNone(C.classify(base, iq, 2, n))
        self.assertTrue(C.indexer_flips(base, iq))
        iq[at[(2, 0, "topk")]] = row(2, 0, "topk", [0, 2])
        self.assertEqual(C.classify(base, iq, 2, n), ("topk (near-tie)", 2, 0))   # q of position 1 only
        ik = changed((1, 0, "ik"), [2, 2.5, 0])
        ik[at[(2, 0, "topk")]] = row(2, 0, "topk", [0, 2])
        self.assertEqual(C.classify(base, ik, 2, n), ("topk (indexer e4m3)", 2, 0))   # keys stay cached
        q2 = changed((2, 0, "iq"), [4, 5, -6.5])
        q2[at[(2, 0, "topk")]] = row(2, 0, "topk", [1, 0.5])
        self.assertEqual(C.classify(base, q2, 2, n), ("topk (indexer e4m3)", 2, 0))
        moe = changed((1, 1, "moe"), [0, 3])
        self.assertEqual(C.classify(base, moe, 2, n), ("moe", 1, 1))
        moe[at[(2, 0, "latent")]] = row(2, 0, "latent", [1, 1, 2, -7])
        self.assertEqual(C.classify(base, moe, 2, n), ("moe", 1, 1))            # the earlier one
        self.assertEqual(C.classify(list(reversed(base)), moe, 2, n), ("moe", 1, 1))

    def test_probe_pairs_up_runs(self):
        import dsv32_f64 as C
        torch.manual_seed(4)
        cfg = tiny_cfg(5)
        m32 = R.build(cfg, "fp8")
        with torch.no_grad():
            for p in m32.parameters():
                p.normal_(0, 0.3)
        with R.accumulation(torch.float64):
            m64 = R.build(cfg, "fp8")
            m64.load_state_dict(m32.state_dict())
        seqs = torch.randint(0, 64, (3, 9))
        res = C.compare(m32.eval(), m64.eval(), cfg, "fp8", seqs, 1e-3)
        for mode in ("prefill", "decode"):
            r = res[mode]
            self.assertEqual(r["sequences"], 3)
            self.assertEqual(r["diverged"], len(r["first_positions"]))
            self.assertEqual(sum(r["causes"].values()), r["diverged"])
            self.assertLessEqual(r["indexer_code_flips"], 3)
            self.assertLess(r["noise_before_divergence_max"], 1e-3)
            self.assertEqual(r["largest_difference_after"] > 1e-3, r["diverged"] > 0)
        # the records name every layer's latent, indexer q and k, top-k and MoE steps
        p = C.Probe(m32)
        _, rows = C.run(m32, p, seqs[:1], True)
        kinds = {(r[1], C.KINDS[r[2]]) for r in rows}
        self.assertEqual(kinds, {(li, k) for li in range(2) for k in C.KINDS if k != "moe" or li >= 1})
        self.assertEqual(len(rows), 9 * (2 * 4 + 1))


if __name__ == "__main__":
    unittest.main()
