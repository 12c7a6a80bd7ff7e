#!/usr/bin/python3
"""A tiny random DeepSeek-V3.2 model and its reference logits (samples/dsv32_ref.py), for test_dsa.

usage: dsv32_fixture.py OUTDIR [NSEQ] [SEQLEN]

Writes OUTDIR/config.json and OUTDIR/model.safetensors (float32 weights, so
the engine reads exactly the values the reference uses), OUTDIR/ids.bin
(int32 [NSEQ, SEQLEN]) and, for dsa in (fp8, float), OUTDIR/ref_<dsa>.bin:
float32, per sequence the prefill logits [SEQLEN, V] (one forward over the
whole sequence) then the decode logits [SEQLEN, V] (one token per call
through the reference cache). index_topk (8) is well below SEQLEN, so the
later positions attend sparsely. OUTDIR/ref_fp8_f64.bin holds the fp8
prefill run with float64 accumulation (float64 values, [NSEQ, SEQLEN, V]):
where it and the float32 run disagree the reference itself sits on an e4m3
rounding or top-k boundary (samples/dsv32_f64.py measures how often)."""
import json
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "samples"))
import dsv32_ref as R  # noqa: E402
import model_configs  # noqa: E402
import st_io  # noqa: E402

CFG = dict(model_configs.DSV3,
           architectures=["DeepseekV32ForCausalLM"], model_type="deepseek_v32",
           vocab_size=96, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
           num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2, first_k_dense_replace=1,
           n_routed_experts=4, n_group=2, topk_group=1, num_experts_per_tok=2,
           q_lora_rank=32, kv_lora_rank=160, qk_nope_head_dim=16, qk_rope_head_dim=16, v_head_dim=16,
           max_position_embeddings=256,
           rope_scaling={"beta_fast": 32, "beta_slow": 1, "factor": 4, "mscale": 1.0, "mscale_all_dim": 1.0,
                         "original_max_position_embeddings": 64, "type": "yarn"},
           index_n_heads=4, index_head_dim=32, index_topk=8, torch_dtype="float32")
CFG.pop("auto_map", None)


def init(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            elif name.endswith(".bias") or name.endswith("e_score_correction_bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            elif p.dim() == 2 and "embed" not in name:
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[1] ** 0.5)
            else:
                p.copy_(torch.randn(p.shape, generator=g))


def main():
    out = sys.argv[1]
    nseq = int(sys.argv[2]) if len(sys.argv) > 2 else 32
    slen = int(sys.argv[3]) if len(sys.argv) > 3 else 20
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    ref = R.build(CFG, "fp8")
    init(ref, 1234)
    ref.eval()
    sd = {k: v for k, v in ref.state_dict().items()}
    tensors = {k: ("F32", v.detach().float().contiguous().numpy()) for k, v in sd.items()}
    st_io.write(os.path.join(out, "model.safetensors"), tensors, {"format": "pt"})
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(CFG, f, indent=2)
    g = torch.Generator().manual_seed(7)
    ids = torch.randint(0, CFG["vocab_size"], (nseq, slen), generator=g)
    ids.to(torch.int32).numpy().tofile(os.path.join(out, "ids.bin"))
    for dsa in ("fp8", "float"):
        m = R.build(CFG, dsa)
        m.load_state_dict(sd)
        m.eval()
        rows = []
        with torch.no_grad():
            for i in range(nseq):
                x = ids[i:i + 1]
                rows.append(m(x)[0])
                cache = R.Cache(CFG["num_hidden_layers"])
                rows.append(torch.cat([m(x[:, t:t + 1], cache)[0] for t in range(slen)], 0))
        torch.stack(rows).float().numpy().tofile(os.path.join(out, "ref_%s.bin" % dsa))
    with R.accumulation(torch.float64):
        m = R.build(CFG, "fp8")
        m.load_state_dict(sd)
        m.eval()
        with torch.no_grad():
            rows = [m(ids[i:i + 1])[0] for i in range(nseq)]
    torch.stack(rows).double().numpy().tofile(os.path.join(out, "ref_fp8_f64.bin"))
    print("wrote %s: %d sequences of %d tokens, vocab %d" % (out, nseq, slen, CFG["vocab_size"]))


if __name__ == "__main__":
    main()
