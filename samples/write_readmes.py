#!/usr/bin/python3
"""Write tiny-dsv3/README.md, tiny-dsv3-fp8/README.md and tiny-llama/README.md.

Numbers come from samples/work/eval_<model>.json (evaluate.py --json) and the
training checkpoints' saved arguments, so the READMEs always state what the
python reference measured on the committed weights.
"""
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
W = os.path.join(HERE, "work")


def load_eval(m):
    with open(os.path.join(W, f"eval_{m}.json")) as f:
        return json.load(f)


def sizes(d):
    return sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d) if f.endswith(".safetensors"))


def train_args(arch):
    st = torch.load(os.path.join(W, arch, "ckpt.pt"))
    return st["args"], st["step"]


def results_table(rows):
    out = ["| model | held-out ppl (whole file) | GSM part ppl | prose part ppl | GSM 5-shot strict | flexible |",
           "|---|---|---|---|---|---|"]
    for name, e in rows:
        g = e["gsm"]
        out.append(f"| {name} | {e['heldout_ppl']:.3f} | {e['heldout_gsm_part_ppl']:.3f} | "
                   f"{e['heldout_prose_part_ppl']:.2f} | {g['strict']*100:.1f}% ({round(g['strict']*g['n'])}/{g['n']}) | "
                   f"{g['flexible']*100:.1f}% |")
    return "\n".join(out)


COMMON_EVAL = """Measured with `samples/evaluate.py` (python reference `samples/dsv3_ref.py`, float32
math on the stored weights) over `samples/data/heldout.txt` ({tokens} tokens, 512-token
windows) and the 300 problems of `samples/data/gsm_test.jsonl` (lm-eval gsm8k layout,
5-shot, greedy); the exact protocol is in `samples/data/README.md`."""


def main():
    ev = {m: load_eval(m) for m in ("tiny-dsv3", "tiny-dsv3-fp8", "tiny-llama")}
    (_, dstep), (_, lstep) = train_args("dsv3"), train_args("llama")
    cfg = json.load(open(os.path.join(HERE, "tiny-dsv3", "config.json")))
    lcfg = json.load(open(os.path.join(HERE, "tiny-llama", "config.json")))
    tokens = ev["tiny-dsv3"]["heldout_tokens"]
    def train_txt(arch, phases, step):
        ph = "\n".join(f"{i + 1}. `{p}`" for i, p in enumerate(phases))
        return (f"Trained from scratch on CPU by `samples/train.py --arch {arch} --batch 4 --seq 768 --lr 2e-3 "
                f"--warmup 40 --seed 1234` in phases, each resuming the previous checkpoint "
                f"(`samples/make_samples.sh`):\n\n{ph}\n\n"
                f"{step} AdamW steps of 4 x 768 tokens ({step * 4 * 768 / 1e6:.2f}M tokens; betas 0.9/0.95, "
                f"weight decay 0.1, clip 1.0; learning rate: linear warm-up over the first 40 steps, then cosine from "
                f"2e-3 down to 2e-4 at the phase's `--steps`, so each later phase raises it again). "
                f"Data: the GSM-style train split (`samples/gen_gsm.py`, train templates only) in the few-shot "
                f"`Question:/Answer:` layout, 5% windows of Debian license text (`samples/corpus.py`; Apache-2.0 "
                f"held out), and with `--drill-frac F` a share F of windows made of arithmetic drill lines "
                f"`a-b=<<a-b=c>>c` taken from the annotations of extra train-distribution problems.  `--question-weight 0.2` weighs the "
                f"loss of question tokens by 0.2 (answers and prose 1).  Phases were added when a checkpoint "
                f"evaluation showed the model failing to copy numbers (phase 2) and to add/subtract (phases 3-4); "
                f"the last phases switch to the `small` operand ranges of `gen_gsm.py` (products up to 30, "
                f"answers below 70), which `samples/data/` uses too.")
    dtrain = train_txt("dsv3", ["--steps 400", "--steps 1400 --question-weight 0.2 --stop-at 850",
                                "--steps 1700 --question-weight 0.2 --drill-frac 0.35 --stop-at 1100",
                                "--steps 2600 --question-weight 0.2 --drill-frac 0.5 --stop-at 1400",
                                "--steps 2400 --question-weight 0.2 --drill-frac 0.5 --level small --stop-at 1600",
                                "--steps 2000 --question-weight 0.2 --drill-frac 0.5 --level small"], dstep)
    ltrain = train_txt("llama", ["--steps 300", "--steps 700 --question-weight 0.2 --drill-frac 0.35",
                                 "--steps 1100 --question-weight 0.2 --drill-frac 0.5 --level small"], lstep)

    d = f"""# tiny-dsv3

A tiny DeepSeek-V3-architecture model (`DeepseekV3ForCausalLM`, `model_type`
`deepseek_v3`) for testing dsq end to end: MLA with q/kv LoRA ranks and decoupled
RoPE (adjacent pairs, YaRN factor {cfg['rope_scaling']['factor']} over an original context of
{cfg['rope_scaling']['original_max_position_embeddings']}, so the mscale^2 softmax correction is active), {cfg['num_hidden_layers']} layers of which
the first {cfg['first_k_dense_replace']} is dense, then MoE with {cfg['n_routed_experts']} routed experts in {cfg['n_group']} groups (top-{cfg['topk_group']}
groups, top-{cfg['num_experts_per_tok']} experts, sigmoid scores, `e_score_correction_bias`, routed
scaling {cfg['routed_scaling_factor']}) plus {cfg['n_shared_experts']} shared expert.

* hidden {cfg['hidden_size']}, heads {cfg['num_attention_heads']}, q_lora_rank {cfg['q_lora_rank']}, kv_lora_rank {cfg['kv_lora_rank']},
  qk_nope/qk_rope/v head dims {cfg['qk_nope_head_dim']}/{cfg['qk_rope_head_dim']}/{cfg['v_head_dim']}, dense intermediate {cfg['intermediate_size']},
  expert intermediate {cfg['moe_intermediate_size']}, vocab {cfg['vocab_size']}.
* `config.json` has every key of DeepSeek-V3's config.json (scaled down);
  `num_nextn_predict_layers` is 0: there is no MTP layer (no `model.layers.{cfg['num_hidden_layers']}.*`).
  `auto_map` is kept for key parity, but no `*.py` modelling files are shipped
  (HF transformers >= 4.50 loads `deepseek_v3` natively).
* Weights: BF16 (round to nearest even from the float32 training weights), except
  `mlp.gate.e_score_correction_bias`, which is F32 as in DeepSeek-V3; two shards plus
  `model.safetensors.index.json` ({sizes(os.path.join(HERE, 'tiny-dsv3')):,} bytes of tensors).
* Tokenizer: byte-level BPE trained by `samples/train_tokenizer.py` (3,072 ids: BOS 0,
  EOS 1, PAD 2, 256 bytes, 2,813 merges) with DeepSeek-V3's exact pre_tokenizer,
  normalizer, post_processor and decoder objects.

## Training

{dtrain}

## Results (BF16, python reference)

{COMMON_EVAL.format(tokens=tokens)}

{results_table([("tiny-dsv3 (BF16)", ev["tiny-dsv3"]), ("tiny-dsv3-fp8 (dequantized)", ev["tiny-dsv3-fp8"])])}

Regenerate: `make samples` (see `samples/README.md`).
"""
    f8 = f"""# tiny-dsv3-fp8

The weights of `samples/tiny-dsv3` stored the way DeepSeek-V3 ships them: every
linear that DeepSeek stores in FP8 (all `self_attn` projections including
`kv_b_proj`, the dense MLP, routed experts and shared experts) is `F8_E4M3`
(E4M3FN: round to nearest even, max 448, no inf) with a float32
`<name>_scale_inv` of shape [ceil(out/128), ceil(in/128)]: scale = amax(128x128 block) / 448,
dequantized weight = fp8 value * scale.  `model.embed_tokens`, all norms,
`mlp.gate.weight` (router) and `lm_head` stay BF16, `e_score_correction_bias` F32.
The FP8 values were computed from the BF16 weights of tiny-dsv3.  `config.json`
= tiny-dsv3's plus DeepSeek's `quantization_config`
`{{"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": [128, 128]}}`.
Tensor bytes: {sizes(os.path.join(HERE, 'tiny-dsv3-fp8')):,}.

## Results (dequantized to float32, python reference)

{COMMON_EVAL.format(tokens=tokens)}

{results_table([("tiny-dsv3 (BF16)", ev["tiny-dsv3"]), ("tiny-dsv3-fp8 (dequantized)", ev["tiny-dsv3-fp8"])])}
"""
    ll = f"""# tiny-llama

A small dense `LlamaForCausalLM` (HF Llama tensor names, rotate-half RoPE, GQA) with
the same tokenizer as tiny-dsv3: hidden {lcfg['hidden_size']}, {lcfg['num_hidden_layers']} layers, {lcfg['num_attention_heads']} heads of {lcfg['head_dim']},
{lcfg['num_key_value_heads']} KV heads, intermediate {lcfg['intermediate_size']}, rope_theta {lcfg['rope_theta']}, RMSNorm eps {lcfg['rms_norm_eps']},
untied lm_head.  All tensors BF16 in two shards ({sizes(os.path.join(HERE, 'tiny-llama')):,} bytes of tensors).

## Training

{ltrain}

## Results (BF16, python reference)

{COMMON_EVAL.format(tokens=tokens)}

{results_table([("tiny-llama (BF16)", ev["tiny-llama"])])}
"""
    for name, text in (("tiny-dsv3", d), ("tiny-dsv3-fp8", f8), ("tiny-llama", ll)):
        with open(os.path.join(HERE, name, "README.md"), "w") as f:
            f.write(text)
    print(results_table([(m, e) for m, e in ev.items()]))


if __name__ == "__main__":
    sys.exit(main())
