/* bench_ledger.c - throughput of the resume ledger's check:
 * --resume re-hashes the source bytes (weight plus FP8 scale) of every
 * tensor it reuses with dsq_ledger_hash, one tensor after another. This
 * times exactly that over a whole checkpoint, twice (the first pass reads
 * from disk unless the files are cached, the second from the page cache).
 *
 *   build/bench/bench_ledger MODEL_DIR_OR_FILE */
#include "cli.h"
#include "convert_ledger.h"
#include "safetensors.h"

#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    dsq_cli cli;
    dsq_cli_init(&cli, "bench_ledger");
    if (argc != 2) return dsq_cli_usage_error(&cli, "expected MODEL (directory, index or .safetensors)");
    dsq_diag d;
    dsq_diag_clear(&d);
    dsq_st_model *m = NULL;
    int rc = dsq_st_open(&m, argv[1], &d);
    if (rc < 0) return dsq_cli_fail(&cli, rc, &d);
    uint64_t bytes = 0;
    for (size_t i = 0; i < dsq_st_count(m); i++) bytes += dsq_st_get(m, i)->nbytes;
    for (int pass = 0; pass < 2; pass++) {
        double t0 = dsq_now();
        uint8_t h[DSQ_SHA256_LEN];
        for (size_t i = 0; i < dsq_st_count(m) && rc == DSQ_OK; i++) {
            const dsq_st_tensor *t = dsq_st_get(m, i);
            size_t n = strlen(t->name);
            if (n > 10 && !strcmp(t->name + n - 10, "_scale_inv")) continue;   /* hashed with its weight */
            /* one piece; blocks of 1 MiB of float32, as the conversion cuts them */
            int64_t rows = dsq_st_rows(t), cols = dsq_st_cols(t);
            int64_t br = cols > 0 ? (int64_t)((1u << 20) / ((uint64_t)cols * 4)) : 1;
            rc = dsq_ledger_hash(m, t, rows, rows, br < 1 ? 1 : br, h);
        }
        double s = dsq_now() - t0;
        if (rc < 0) break;
        printf("pass %d (%s): %.3f GB hashed in %.2f s = %.0f MB/s\n", pass + 1,
               pass ? "page cache" : "as found", (double)bytes / 1e9, s, (double)bytes / 1e6 / s);
    }
    dsq_st_close(m);
    if (rc < 0) return dsq_cli_fail(&cli, rc, &d);
    return 0;
}
