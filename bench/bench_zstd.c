/* bench_zstd.c - what zstd buys on quantized payloads, per setting:
 * the ratio and the CPU cost of compressing every tensor of a .dsq, one
 * frame per tensor as ds-quant writes them, at several levels, negative
 * ("fast") levels and with literal (Huffman) compression forced on or off.
 *
 *   build/bench/bench_zstd FILE.dsq [MAX_GB]
 *
 * Reads each tensor's raw payload (decompressed if stored compressed), up
 * to MAX_GB (default 1) of raw bytes, then for each setting compresses them
 * all on one thread and prints: stored / raw (payloads the container would
 * keep raw, because compression saves under 2%, count as raw, as in
 * dsq_ctr_encode), thread CPU seconds per GB of raw bytes, and the bytes
 * saved per CPU-second spent. CPU time, not wall: the machine may be shared.
 * A negative level is zstd's --fast=N; "literals huf" forces the Huffman
 * coding of literals that zstd skips at those levels. */
#define ZSTD_STATIC_LINKING_ONLY   /* ZSTD_c_literalCompressionMode */
#include "cli.h"
#include "container.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zstd.h>

static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct setting { const char *name; int level; int literals; } setting;

int main(int argc, char **argv)
{
    dsq_cli cli;
    dsq_cli_init(&cli, "bench_zstd");
    if (argc < 2 || argc > 3) return dsq_cli_usage_error(&cli, "expected FILE.dsq [MAX_GB]");
    double max_gb = argc == 3 ? atof(argv[2]) : 1.0;
    dsq_diag d;
    dsq_diag_clear(&d);
    dsq_ctr *r = NULL;
    int rc = dsq_ctr_open(&r, argv[1], &d);
    if (rc < 0) return dsq_cli_fail(&cli, rc, &d);
    size_t n = dsq_ctr_count(r), k = 0;
    uint8_t **raw = calloc(n ? n : 1, sizeof *raw);
    size_t *len = calloc(n ? n : 1, sizeof *len), maxlen = 0;
    uint64_t total = 0;
    for (size_t i = 0; i < n && rc == DSQ_OK && total < max_gb * 1e9; i++) {
        const dsq_ctr_tensor_info *t = dsq_ctr_get(r, i);
        if (!t->raw_size) continue;
        raw[k] = malloc(t->raw_size);
        if (!raw[k]) { rc = DSQ_ERR_NOMEM; break; }
        rc = dsq_ctr_read(r, t, raw[k], t->raw_size, &d);
        len[k] = t->raw_size;
        if (len[k] > maxlen) maxlen = len[k];
        total += len[k++];
    }
    dsq_ctr_close(r);
    if (rc < 0) return dsq_cli_fail(&cli, rc, &d);
    printf("%s: %zu tensors, %.3f GB raw\n", argv[1], k, (double)total / 1e9);
    static const setting S[] = {
        { "level 1", 1, ZSTD_ps_auto },          { "level 1, literals raw", 1, ZSTD_ps_disable },
        { "level 3", 3, ZSTD_ps_auto },          { "level -1", -1, ZSTD_ps_auto },
        { "level -1, literals huf", -1, ZSTD_ps_enable }, { "level -3, literals huf", -3, ZSTD_ps_enable },
        { "level -5, literals huf", -5, ZSTD_ps_enable }, { "level -3", -3, ZSTD_ps_auto },
        { "level -5", -5, ZSTD_ps_auto },       { "level -64, literals huf", -64, ZSTD_ps_enable },
        { "level -1024, literals huf", -1024, ZSTD_ps_enable },
    };
    size_t cap = ZSTD_compressBound(maxlen);
    uint8_t *buf = malloc(cap ? cap : 1);
    ZSTD_CCtx *c = ZSTD_createCCtx();
    if (!buf || !c) return dsq_cli_fail(&cli, DSQ_ERR_NOMEM, NULL);
    printf("%-24s %8s %10s %12s %14s\n", "setting", "ratio", "CPU-s/GB", "raw tensors", "MB saved/CPU-s");
    /* s = -1: one untimed pass first. Whatever setting came first measured
     * about twice its CPU (1.2 -> 2.4-2.7 CPU-s/GB in either order), a
     * warm-up cost of the process, not of the setting. */
    for (long s = -1; s < (long)(sizeof S / sizeof *S); s++) {
        const setting *st = &S[s < 0 ? 0 : s];
        uint64_t stored = 0;
        size_t kept_raw = 0;
        double t0 = cpu_now();
        for (size_t i = 0; i < k; i++) {
            ZSTD_CCtx_reset(c, ZSTD_reset_session_and_parameters);
            ZSTD_CCtx_setParameter(c, ZSTD_c_compressionLevel, st->level);
            ZSTD_CCtx_setParameter(c, ZSTD_c_literalCompressionMode, st->literals);
            ZSTD_CCtx_setParameter(c, ZSTD_c_contentSizeFlag, 1);
            size_t z = ZSTD_compress2(c, buf, cap, raw[i], len[i]);
            if (ZSTD_isError(z) || (unsigned __int128)z * 50u >= (unsigned __int128)len[i] * 49u) {
                z = len[i];
                kept_raw++;
            }
            stored += z;
        }
        double cpu = cpu_now() - t0;
        if (s < 0) continue;
        printf("%-24s %8.4f %10.3f %7zu/%-4zu %14.1f\n", st->name, (double)stored / (double)total,
               cpu / ((double)total / 1e9), kept_raw, k, (double)(total - stored) / 1e6 / cpu);
    }
    ZSTD_freeCCtx(c);
    free(buf);
    for (size_t i = 0; i < k; i++) free(raw[i]);
    free(raw);
    free(len);
    return 0;
}
