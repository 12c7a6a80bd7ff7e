/* fuzz_stats.c - libFuzzer target for the calibration statistics file read
 * by `ds-quant --stats`: the input is the file's metadata JSON; the target
 * writes a statistics file carrying it and runs a full --stats calibration
 * (dsq_calib_run) of the bundled samples/tiny-dsv3 on it, so every metadata
 * field read (format, version, model.config_sha256, data.*, search.*,
 * moe_calib_all) sees hostile values. The file's payloads are protected by
 * SHA-256, so mutating its bytes would only exercise the container checks
 * (fuzz_container does that). Seeds: corpus/stats/. Skips (returns) when the
 * sample is absent. */
#include "calib.h"
#include "stats_file.h"
#include "fuzz_util.h"

#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MODEL "samples/tiny-dsv3"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (access(MODEL "/config.json", R_OK) != 0) return 0;
    char *meta = malloc(size + 1);
    if (!meta) return 0;
    memcpy(meta, data, size);
    meta[size] = 0;
    const char *p = fz_path(0, "stats.dsq");
    dsq_stats_writer *w;
    if (dsq_stats_writer_open(&w, p, "fuzz", DSQ_STATS_OVERWRITE, NULL) != DSQ_OK) abort();
    /* The container only takes a JSON object as metadata. */
    if (dsq_stats_writer_finish(w, meta, NULL) != DSQ_OK) { free(meta); return 0; }
    free(meta);
    static const char *const schemes[] = { "awq-w4a16", "w8a8", "w4a8" };
    dsq_calib_opts o;
    dsq_calib_opts_init(&o);
    o.scheme = schemes[size % 3];
    o.group_size = 32;
    o.threads = 1;
    o.load_stats = p;
    dsq_calib_result *r = NULL;
    dsq_diag d;
    dsq_diag_clear(&d);
    (void)dsq_calib_run(MODEL, &o, &r, NULL, NULL, NULL, &d);
    dsq_calib_result_free(r);
    return 0;
}
