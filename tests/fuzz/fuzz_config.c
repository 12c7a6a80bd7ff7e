/* fuzz_config.c - libFuzzer target for the config.json parser
 * (dsq_model_config_from_json_string) and the queries the planner and the
 * engine make on whatever parses. Must never crash, leak or read out of
 * bounds. Seeds: corpus/config/ (the bundled samples' configs and hostile
 * variants: n_routed_experts 0, kv_lora_rank 65, nulls). */
#include "model_config.h"

#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    dsq_model_config cfg;
    dsq_diag d;
    dsq_diag_clear(&d);
    if (dsq_model_config_from_json_string(&cfg, (const char *)data, size, "fuzz", &d) == DSQ_OK) {
        int64_t n = cfg.num_hidden_layers;
        for (int64_t l = 0; l < n && l < 64; l++) {
            (void)dsq_model_config_is_moe_layer(&cfg, l);
            (void)dsq_model_config_ffn_dim(&cfg, l);
        }
        (void)dsq_arch_is_deepseek(cfg.arch);
    }
    dsq_model_config_release(&cfg);
    return 0;
}
