#!/usr/bin/python3
"""config.json contents of the sample models.

tiny-dsv3 carries every key of deepseek-ai/DeepSeek-V3's config.json
(docs/checkpoints.md, "config.json", plus the HF bookkeeping keys), scaled down.  num_nextn_predict_layers is 0:
no MTP layer is trained or stored.  max_position_embeddings (2048) is larger than
rope_scaling.original_max_position_embeddings (512), so YaRN frequency blending
and the mscale^2 softmax correction are both active, as in the real model.
"""

VOCAB = 3072

DSV3 = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "auto_map": {
        "AutoConfig": "configuration_deepseek.DeepseekV3Config",
        "AutoModel": "modeling_deepseek.DeepseekV3Model",
        "AutoModelForCausalLM": "modeling_deepseek.DeepseekV3ForCausalLM",
    },
    "aux_loss_alpha": 0.001,
    "bos_token_id": 0,
    "eos_token_id": 1,
    "ep_size": 1,
    "first_k_dense_replace": 1,
    "hidden_act": "silu",
    "hidden_size": 256,
    "initializer_range": 0.02,
    "intermediate_size": 512,
    "kv_lora_rank": 64,
    "max_position_embeddings": 2048,
    "model_type": "deepseek_v3",
    "moe_intermediate_size": 64,
    "moe_layer_freq": 1,
    "n_group": 4,
    "n_routed_experts": 16,
    "n_shared_experts": 1,
    "norm_topk_prob": True,
    "num_attention_heads": 4,
    "num_experts_per_tok": 4,
    "num_hidden_layers": 4,
    "num_key_value_heads": 4,
    "num_nextn_predict_layers": 0,
    "pretraining_tp": 1,
    "q_lora_rank": 96,
    "qk_nope_head_dim": 32,
    "qk_rope_head_dim": 16,
    "rms_norm_eps": 1e-06,
    "rope_scaling": {
        "beta_fast": 32,
        "beta_slow": 1,
        "factor": 4,
        "mscale": 1.0,
        "mscale_all_dim": 1.0,
        "original_max_position_embeddings": 512,
        "type": "yarn",
    },
    "rope_theta": 10000,
    "routed_scaling_factor": 2.5,
    "scoring_func": "sigmoid",
    "seq_aux": True,
    "tie_word_embeddings": False,
    "topk_group": 2,
    "topk_method": "noaux_tc",
    "torch_dtype": "bfloat16",
    "transformers_version": "4.33.1",
    "use_cache": True,
    "v_head_dim": 32,
    "vocab_size": VOCAB,
}


# mid-dsv3 (samples/train_gpu.py): the larger sample, trained on one GPU
# on more varied text.  Every matrix dimension a multiple of 128 as in DeepSeek-V3
# (q_lora 256, kv_lora 128, experts 128 wide); 32 routed experts in 4 groups,
# 4 per token from 2 groups; 26M parameters, 52 MB in BF16.
DSV3_MID = dict(DSV3, hidden_size=384, intermediate_size=1024, kv_lora_rank=128, moe_intermediate_size=128,
                n_routed_experts=32, num_attention_heads=6, num_key_value_heads=6, num_hidden_layers=5,
                q_lora_rank=256, qk_nope_head_dim=64, qk_rope_head_dim=32, v_head_dim=64)

FP8_QUANT = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": [128, 128]}

LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 0,
    "eos_token_id": 1,
    "head_dim": 48,
    "hidden_act": "silu",
    "hidden_size": 192,
    "initializer_range": 0.02,
    "intermediate_size": 512,
    "max_position_embeddings": 2048,
    "mlp_bias": False,
    "model_type": "llama",
    "num_attention_heads": 4,
    "num_hidden_layers": 4,
    "num_key_value_heads": 2,
    "pretraining_tp": 1,
    "rms_norm_eps": 1e-05,
    "rope_scaling": None,
    "rope_theta": 10000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.44.2",
    "use_cache": True,
    "vocab_size": VOCAB,
}

GENERATION = {"_from_model_config": True, "bos_token_id": 0, "eos_token_id": 1, "do_sample": False,
              "transformers_version": "4.33.1"}
