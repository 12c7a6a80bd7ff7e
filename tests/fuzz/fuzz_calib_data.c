/* fuzz_calib_data.c - libFuzzer target for `--calib FILE`: the input is the
 * calibration file, read as plain text and as JSONL (first byte picks the
 * format forced or auto-detected), tokenized with the bundled sample's
 * tokenizer and cut into samples (dsq_calib_data_load). Seeds:
 * corpus/calib_data/. Skips when the sample tokenizer is absent. */
#include "calib_data.h"
#include "tokenizer.h"
#include "fuzz_util.h"

#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static dsq_tokenizer *tok;
    static int tried;
    if (!tried) {
        tried = 1;
        if (dsq_tokenizer_load(&tok, "samples/tiny-llama/tokenizer.json", NULL) != DSQ_OK) tok = NULL;
    }
    if (!tok) return 0;
    const char *p = fz_path(0, "calib.txt");
    fz_write(p, data, size);
    dsq_calib_data_opts o;
    dsq_calib_data_opts_init(&o);
    o.n_samples = 4;
    o.seqlen = 16 + (size ? data[0] % 48 : 0);
    o.seed = size;
    o.format = size ? data[size - 1] % 3 : 0;   /* 0 auto, 1 text, 2 JSONL */
    dsq_calib_data cd;
    memset(&cd, 0, sizeof cd);
    dsq_diag d;
    dsq_diag_clear(&d);
    if (dsq_calib_data_load(&cd, p, tok, &o, &d) == DSQ_OK) dsq_calib_data_release(&cd);
    return 0;
}
