/* fuzz_safetensors.c - libFuzzer target for the safetensors header parser
 * (dsq_st_parse_buffer, no file I/O), the row converters on whatever
 * parses, and, because it is the other JSON reader in formats/, the
 * config.json parser on the same bytes. Must never crash, leak or read
 * out of bounds; statuses are not checked. Seeds: corpus/safetensors/. */
#include "model_config.h"
#include "safetensors.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    dsq_st_model *m = NULL;
    dsq_diag d;
    dsq_diag_clear(&d);
    unsigned flags = size && (data[size - 1] & 1) ? DSQ_ST_OPEN_FP8_UNSCALED : 0;
    if (dsq_st_parse_buffer(&m, data, size, "fuzz", flags, &d) == DSQ_OK) {
        enum { CAP = 1 << 16 };
        float *out = malloc(CAP * sizeof *out);
        for (size_t i = 0; out && i < dsq_st_count(m); i++) {
            const dsq_st_tensor *t = dsq_st_get(m, i);
            if (dsq_st_find(m, t->name) != t) abort();
            (void)dsq_st_scale_of(m, t);
            (void)dsq_st_is_companion(m, t);
            int64_t rows = dsq_st_rows(t), cols = dsq_st_cols(t);
            if (cols <= 0 || cols > CAP) continue;
            int64_t n = CAP / cols;
            if (n > rows) n = rows;
            dsq_diag_clear(&d);
            (void)dsq_st_read_rows_f32(m, t, 0, n, out, &d);
            if (rows > n) (void)dsq_st_read_rows_f32(m, t, rows - 1, 1, out, &d);
        }
        free(out);
        for (size_t i = 0; i < dsq_st_meta_count(m); i++) {
            const char *k, *v;
            if (dsq_st_meta_at(m, i, &k, &v) == DSQ_OK && dsq_st_meta_get(m, k) != v) abort();
        }
        dsq_st_close(m);
    }
    dsq_model_config cfg;
    dsq_diag_clear(&d);
    (void)dsq_model_config_from_json_string(&cfg, (const char *)data, size, "fuzz", &d);
    dsq_model_config_release(&cfg);
    return 0;
}
