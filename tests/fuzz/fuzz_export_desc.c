/* fuzz_export_desc.c - libFuzzer target: the export description parser
 * (xfmt/xfmt_detect.c and the formats' parsers) on arbitrary bytes.
 *
 * Byte 0 picks the file: even = quant_model_description.json (AscendV1),
 * odd = config.json (AutoAWQ / compressed-tensors quantization_config); the
 * rest is its text. Whatever parses is queried for a set of module names
 * (embeddings, attention, experts, router, lm_head), which exercises the
 * description lookup, AWQ substring and compressed-tensors regex matching.
 * Must never crash, leak or read out of bounds; any status is acceptable. */
#include "xfmt.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const MODULES[] = {
    "model.embed_tokens", "lm_head", "model.layers.0.self_attn.q_a_proj",
    "model.layers.0.self_attn.kv_b_proj", "model.layers.3.mlp.gate",
    "model.layers.3.mlp.experts.0.up_proj", "model.layers.3.mlp.experts.255.down_proj",
    "model.layers.61.eh_proj", "", "model.layers.",
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    const char *txt = (const char *)data + 1;
    size_t len = size - 1;
    dsq_export_info *x = NULL;
    dsq_diag d;
    dsq_diag_clear(&d);
    int rc = (data[0] & 1) ? dsq_export_parse(NULL, 0, NULL, txt, len, "config.json", &x, &d)
                           : dsq_export_parse(txt, len, DSQ_EXPORT_ASCEND_DESC, NULL, 0, NULL, &x, &d);
    if (rc < 0 && x) abort();
    if (rc == 0 && x) {
        for (size_t i = 0; i < sizeof MODULES / sizeof *MODULES; i++) {
            dsq_export_spec s;
            dsq_diag_clear(&d);
            if (dsq_export_spec_of(x, MODULES[i], &s, &d) == 0 && s.type != DSQ_EQ_FLOAT &&
                dsq_export_kind_of(x) == DSQ_EXPORT_NONE)
                abort();
        }
        (void)dsq_export_ascend_type(x, "model.embed_tokens.weight");
        dsq_export_info_free(x);
    }
    return 0;
}
