/* fuzz_export_dir.c - libFuzzer target: the serving-export directory reader
 * (xfmt/: description parser, module lookup, shape check and unpackers) on
 * an export held in memory.
 *
 * Input: byte 0 selects; bytes 1..4 are the little-endian length L of a
 * JSON text that follows (clamped to what is there); the rest is one
 * safetensors file. Selector bit 0: 0 = the text is
 * quant_model_description.json (AscendV1), 1 = config.json (AutoAWQ /
 * compressed-tensors quantization_config). Bit 1: also unpack each module
 * with a shape one row larger than stored (the contract check must refuse
 * it cleanly). Bit 2: parse FP8 without scale (DSQ_ST_OPEN_FP8_UNSCALED).
 *
 * Every tensor names a module (its primary tensor per dsq_xfmt_module_of,
 * else the name less its last component); each module is asked its shape
 * and, when it holds at most 1 << 20 weights, unpacked. Must never crash,
 * leak or read out of bounds; any status is acceptable, but a quantized
 * unpack must return a blob and a shape query that succeeds a positive one.
 * Seeds: corpus/export_dir/ (tests/fuzz/gen_export_dir_seeds.py). */
#include "safetensors.h"
#include "xfmt.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { MAX_WEIGHTS = 1 << 20 };

static void unpack(const dsq_export_info *x, const dsq_st_model *st, const char *module,
                   int64_t rows, int64_t cols)
{
    if (rows <= 0 || cols <= 0 || rows > MAX_WEIGHTS || cols > MAX_WEIGHTS ||
        rows * cols > MAX_WEIGHTS)
        return;
    uint8_t *blob = NULL;
    size_t bsize = 0;
    float *bias = NULL;
    dsq_diag d;
    dsq_diag_clear(&d);
    int rc = dsq_xfmt_unpack_linear(x, st, module, rows, cols, &blob, &bsize, &bias, &d);
    if (rc == 1 && (!blob || !bsize)) abort();
    if (rc != 1 && (blob || bias)) abort();
    free(blob);
    free(bias);
}

static void probe(const dsq_export_info *x, const dsq_st_model *st, const char *module, int grow)
{
    int64_t rows = 0, cols = 0;
    dsq_diag d;
    dsq_diag_clear(&d);
    int rc = dsq_xfmt_linear_shape(x, st, module, &rows, &cols, &d);
    if (rc == 1) {
        if (rows <= 0 || cols <= 0) abort();
        unpack(x, st, module, rows, cols);
        if (grow) unpack(x, st, module, rows + 1, cols);
    } else if (rc == 0) {
        /* float module: the unpacker checks "<module>.weight" against a shape */
        char wn[640];
        snprintf(wn, sizeof wn, "%s.weight", module);
        const dsq_st_tensor *w = dsq_st_find(st, wn);
        if (w) unpack(x, st, module, dsq_st_rows(w), dsq_st_cols(w));
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 5) return 0;
    unsigned sel = data[0];
    size_t len = (size_t)data[1] | (size_t)data[2] << 8 | (size_t)data[3] << 16 |
                 (size_t)data[4] << 24;
    if (len > size - 5) len = size - 5;
    const char *txt = (const char *)data + 5;
    const uint8_t *stbuf = data + 5 + len;
    size_t stlen = size - 5 - len;

    dsq_export_info *x = NULL;
    dsq_diag d;
    dsq_diag_clear(&d);
    int rc = (sel & 1) ? dsq_export_parse(NULL, 0, NULL, txt, len, "config.json", &x, &d)
                       : dsq_export_parse(txt, len, DSQ_EXPORT_ASCEND_DESC, NULL, 0, NULL, &x, &d);
    if (rc < 0 && x) abort();
    if (rc < 0 || !x) return 0;

    dsq_st_model *st = NULL;
    dsq_diag_clear(&d);
    if (dsq_st_parse_buffer(&st, stbuf, stlen, "model.safetensors",
                            (sel & 4) ? DSQ_ST_OPEN_FP8_UNSCALED : 0, &d) == DSQ_OK) {
        char last[600] = "";
        for (size_t i = 0; i < dsq_st_count(st); i++) {
            const dsq_st_tensor *t = dsq_st_get(st, i);
            char module[600];
            if (dsq_xfmt_module_of(x, t, module, sizeof module) != 1) {
                const char *dot = strrchr(t->name, '.');
                size_t n = dot ? (size_t)(dot - t->name) : strlen(t->name);
                if (n >= sizeof module) continue;
                memcpy(module, t->name, n);
                module[n] = '\0';
            }
            if (!strcmp(module, last)) continue; /* probe a run of one module's tensors once */
            probe(x, st, module, sel & 2);
            memcpy(last, module, sizeof last);
        }
        dsq_st_close(st);
    }
    dsq_export_info_free(x);
    return 0;
}
