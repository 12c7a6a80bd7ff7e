/* fuzz_engine.c - libFuzzer target for the engine's loader and a forward
 * pass over altered .dsq payloads. Once per process the bundled
 * samples/tiny-llama is converted (w8a8-dynamic, zstd level 0 so every
 * payload is raw and mutable) into a scratch .dsq. Each input is a list of 5-byte
 * patches (u32 little-endian offset into the payload region, u8 XOR mask);
 * the patched copy is opened with the hash check off (otherwise every
 * mutation stops at "SHA-256 mismatch", which the last input byte's low bit
 * also tests) and, if it loads, runs a 4-token prefill and a 1-token decode.
 * Quantized blobs carry headers, scales and zero points: a mutated one must
 * be refused or give finite/non-finite numbers, never crash or read out of
 * bounds. Seeds: corpus/engine/. Skips when the sample is absent. */
#include "container.h"
#include "convert.h"
#include "model.h"
#include "recipe.h"
#include "fuzz_util.h"

#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint8_t *base;
static size_t base_n;
static uint64_t pay_lo, pay_hi;   /* payload region [lo, hi) */

static int setup(void)
{
    if (access("samples/tiny-llama/config.json", R_OK) != 0) return -1;
    const char *out = fz_path(0, "base.dsq");
    dsq_recipe rec;
    dsq_diag d;
    dsq_diag_clear(&d);
    if (dsq_recipe_init_ex(&rec, "w8a8-dynamic", 0, &d) != DSQ_OK) abort();
    dsq_convert_opts o;
    dsq_convert_opts_init(&o);
    o.input = "samples/tiny-llama";
    o.output = out;
    o.recipe = &rec;
    o.threads = 1;
    o.zstd_level = 0;
    o.no_journal = 1;
    dsq_convert *c = NULL;
    dsq_convert_summary s;
    if (dsq_convert_prepare(&c, &o, &d) != DSQ_OK || dsq_convert_run(c, &s, &d) != DSQ_OK) abort();
    dsq_convert_free(c);
    dsq_recipe_release(&rec);
    dsq_ctr *r;
    if (dsq_ctr_open(&r, out, NULL) != DSQ_OK) abort();
    pay_lo = UINT64_MAX;
    for (size_t i = 0; i < dsq_ctr_count(r); i++) {
        const dsq_ctr_tensor_info *t = dsq_ctr_get(r, i);
        if (t->offset < pay_lo) pay_lo = t->offset;
        if (t->offset + t->stored_size > pay_hi) pay_hi = t->offset + t->stored_size;
    }
    dsq_ctr_close(r);
    FILE *f = fopen(out, "rb");
    if (!f) abort();
    fseek(f, 0, SEEK_END);
    base_n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    base = malloc(base_n);
    if (!base || fread(base, 1, base_n, f) != base_n) abort();
    fclose(f);
    return pay_hi > pay_lo ? 0 : -1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int state;   /* 0 not tried, 1 ready, -1 skipped */
    if (!state) state = setup() == 0 ? 1 : -1;
    if (state < 0) return 0;
    uint8_t *buf = malloc(base_n);
    if (!buf) return 0;
    memcpy(buf, base, base_n);
    for (size_t i = 0; i + 5 <= size && i < 5 * 64; i += 5) {
        uint32_t off = (uint32_t)data[i] | (uint32_t)data[i + 1] << 8 | (uint32_t)data[i + 2] << 16 |
                       (uint32_t)data[i + 3] << 24;
        buf[pay_lo + off % (pay_hi - pay_lo)] ^= data[i + 4];
    }
    const char *p = fz_path(1, "m.dsq");
    fz_write(p, buf, base_n);
    free(buf);
    dsq_model_opts mo;
    dsq_model_opts_default(&mo);
    mo.threads = 1;
    mo.max_ctx = 16;
    mo.no_verify = !(size && (data[size - 1] & 1));
    dsq_model *m = NULL;
    dsq_diag d;
    dsq_diag_clear(&d);
    if (dsq_model_open(&m, p, &mo, &d) == DSQ_OK) {
        dsq_state *st = dsq_state_create(m, 1, 16);
        int64_t V = dsq_model_get_config(m)->vocab_size;
        float *logits = malloc((size_t)V * sizeof *logits);
        int32_t tok[4] = { 1, 2, 3, (int32_t)(V - 1) };
        if (st && logits && dsq_forward(m, st, 0, tok, 4, logits, DSQ_FWD_LAST_LOGITS, &d) == DSQ_OK)
            (void)dsq_forward(m, st, 0, tok + 1, 1, logits, DSQ_FWD_LAST_LOGITS, &d);
        free(logits);
        dsq_state_free(st);
        dsq_model_free(m);
    }
    return 0;
}
