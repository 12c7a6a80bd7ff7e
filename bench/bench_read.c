/* bench_read.c - how fast can dsq read a big BF16 checkpoint, hash it and
 * compress it, compared with the kernel just streaming the file (cat)?
 *
 *   build/bench/bench_read [-T N] [--levels 1,2,3] [--no-container] [FILE]
 *   build/bench/bench_read --make FILE GB      (only write the test file)
 *
 * FILE defaults to $DSQ_BENCH_FILE or bench/out/bench_read_bf16.safetensors;
 * a missing default file is generated first (~$DSQ_BENCH_GB GB, default 3):
 * Llama-7B-shaped BF16 tensors with N(0, 0.02) values (realistic exponents,
 * so zstd ratios resemble real weights), written with the safetensors writer.
 *
 * Runs, in one process and on the same (page-cached) file:
 *   cat FILE > /dev/null   twice; the first warms the cache, the second is
 *                          the reference all ratios are relative to
 *   sha256 over mmap views (1 thread, then T threads, per tensor)
 *   dsq_st_read_rows_f32 (BF16 -> f32, T threads)
 *   dsq_ctr_encode = SHA-256 + zstd level L (T threads), L in --levels
 *   .dsq write (zstd 1) into bench/out, then dsq_ctr_open + dsq_ctr_verify
 * Prints GB/s of source bytes and the ratio to warm cat. Speed only: caches
 * cannot be dropped here, so every number is a page-cache number. */
#include "cli.h"
#include "container.h"
#include "dsq_file.h"
#include "dsq_mem.h"
#include "dsq_sha256.h"
#include "dsq_thread.h"
#include "safetensors.h"
#include "st_writer.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PIECE (64u << 20)  /* work item size: balances threads over big tensors */

/* ---- test file ---- */

static int fill_bf16(void *ctx, const char *name, void *dst, uint64_t nbytes, dsq_diag *d)
{
    (void)ctx; (void)d;
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (const char *p = name; *p; p++) x = (x ^ (uint8_t)*p) * 1099511628211ull;
    uint16_t *o = dst;
    for (uint64_t i = 0; i < nbytes / 2; i++) {
        /* Irwin-Hall(4) ~ N(0,1), scaled to std 0.02 like trained weights. */
        float s = 0;
        for (int k = 0; k < 4; k++) {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            s += (float)(x >> 40) * (1.0f / 16777216.0f);
        }
        o[i] = dsq_f32_to_bf16((s - 2.0f) * 1.7320508f * 0.02f);
    }
    return 0;
}

static int make_file(const char *path, double gb)
{
    const int64_t hidden = 4096, inter = 11008, vocab = 32000;
    dsq_st_writer *w = dsq_st_writer_create();
    if (!w) return 1;
    int64_t sh[2];
    uint64_t total = 0;
    char name[128];
    sh[0] = vocab; sh[1] = hidden;
    dsq_st_writer_add_lazy(w, "model.embed_tokens.weight", DSQ_DTYPE_BF16, 2, sh, fill_bf16, NULL);
    dsq_st_writer_add_lazy(w, "lm_head.weight", DSQ_DTYPE_BF16, 2, sh, fill_bf16, NULL);
    total += 2 * (uint64_t)(vocab * hidden * 2);
    static const char *const attn[] = { "q_proj", "k_proj", "v_proj", "o_proj" };
    static const char *const mlp[] = { "gate_proj", "up_proj", "down_proj" };
    for (int l = 0; total < gb * 1e9; l++) {
        for (int i = 0; i < 4; i++) {
            snprintf(name, sizeof name, "model.layers.%d.self_attn.%s.weight", l, attn[i]);
            sh[0] = hidden; sh[1] = hidden;
            dsq_st_writer_add_lazy(w, name, DSQ_DTYPE_BF16, 2, sh, fill_bf16, NULL);
            total += (uint64_t)(hidden * hidden * 2);
        }
        for (int i = 0; i < 3; i++) {
            snprintf(name, sizeof name, "model.layers.%d.mlp.%s.weight", l, mlp[i]);
            sh[0] = i == 2 ? hidden : inter; sh[1] = i == 2 ? inter : hidden;
            dsq_st_writer_add_lazy(w, name, DSQ_DTYPE_BF16, 2, sh, fill_bf16, NULL);
            total += (uint64_t)(hidden * inter * 2);
        }
        for (int i = 0; i < 2; i++) {
            snprintf(name, sizeof name, "model.layers.%d.%s.weight", l,
                     i ? "post_attention_layernorm" : "input_layernorm");
            sh[0] = hidden;
            dsq_st_writer_add_lazy(w, name, DSQ_DTYPE_BF16, 1, sh, fill_bf16, NULL);
        }
    }
    dsq_diag d;
    dsq_diag_clear(&d);
    fprintf(stderr, "bench_read: writing %s (%.2f GB) ...\n", path, total / 1e9);
    int rc = dsq_st_writer_write(w, path, 0, DSQ_OUT_OVERWRITE, &d);
    dsq_st_writer_free(w);
    if (rc < 0) {
        char msg[1024];
        dsq_diag_format(&d, msg, sizeof msg);
        fprintf(stderr, "bench_read: %s\n", msg);
        return 1;
    }
    return 0;
}

/* ---- work items ---- */

typedef struct piece {
    const dsq_st_tensor *t;
    uint64_t off, len;       /* byte range within the tensor */
    int64_t row0, nrows;     /* same range in rows (read_rows_f32) */
} piece;

typedef struct job {
    const dsq_st_model *m;
    piece *p;
    size_t np;
    int level;
    float **fbuf;            /* per-thread f32 buffers */
    atomic_uint_fast64_t stored;
    atomic_int err;
} job;

static void task_sha(void *ctx, size_t i, int tid)
{
    (void)tid;
    job *j = ctx;
    uint8_t h[32];
    dsq_sha256_buf(j->p[i].t->data + j->p[i].off, (size_t)j->p[i].len, h);
}

static void task_f32(void *ctx, size_t i, int tid)
{
    job *j = ctx;
    if (dsq_st_read_rows_f32(j->m, j->p[i].t, j->p[i].row0, j->p[i].nrows, j->fbuf[tid], NULL) < 0)
        atomic_store(&j->err, 1);
}

static void task_encode(void *ctx, size_t i, int tid)
{
    (void)tid;
    job *j = ctx;
    dsq_ctr_blob b;
    if (dsq_ctr_encode(j->p[i].t->data + j->p[i].off, (size_t)j->p[i].len, j->level, &b, NULL) < 0) {
        atomic_store(&j->err, 1);
        return;
    }
    atomic_fetch_add(&j->stored, b.stored_size);
    dsq_ctr_blob_free(&b);
}

/* Cut every tensor into whole-row pieces of about PIECE bytes. */
static piece *make_pieces(const dsq_st_model *m, size_t *np, size_t *max_floats)
{
    size_t cap = 256, n = 0;
    piece *p = malloc(cap * sizeof *p);
    *max_floats = 0;
    for (size_t i = 0; p && i < dsq_st_count(m); i++) {
        const dsq_st_tensor *t = dsq_st_get(m, i);
        int64_t rows = dsq_st_rows(t), cols = dsq_st_cols(t);
        if (!t->nbytes || rows <= 0) continue;
        uint64_t row_bytes = t->nbytes / (uint64_t)rows;
        int64_t per = row_bytes ? (int64_t)(PIECE / row_bytes) : rows;
        if (per < 1) per = 1;
        for (int64_t r = 0; r < rows; r += per) {
            if (n == cap) { cap *= 2; piece *q = realloc(p, cap * sizeof *p); if (!q) { free(p); return NULL; } p = q; }
            int64_t k = rows - r < per ? rows - r : per;
            p[n++] = (piece){ t, (uint64_t)r * row_bytes, (uint64_t)k * row_bytes, r, k };
            if ((size_t)(k * cols) > *max_floats) *max_floats = (size_t)(k * cols);
        }
    }
    *np = n;
    return p;
}

/* ---- timing helpers ---- */

static double g_cat = 0;   /* warm cat GB/s, the reference */

static void report(const char *what, uint64_t bytes, double secs, const char *extra)
{
    double gbs = bytes / 1e9 / secs;
    printf("  %-34s %7.2f GB/s  %5.2fx cat  (%.2f s)%s%s\n", what, gbs,
           g_cat > 0 ? gbs / g_cat : 0, secs, extra ? "  " : "", extra ? extra : "");
    fflush(stdout);
}

static double time_cat(const char *path)
{
    char cmd[4400];
    snprintf(cmd, sizeof cmd, "cat '%s' > /dev/null", path);
    double t0 = dsq_now();
    if (system(cmd) != 0) { fprintf(stderr, "bench_read: cat failed\n"); exit(1); }
    return dsq_now() - t0;
}

static void run_pool(dsq_pool *pool, job *j, dsq_task_fn fn, const char *what, uint64_t bytes,
                     int extra_ratio)
{
    atomic_store(&j->stored, 0);
    atomic_store(&j->err, 0);
    double t0 = dsq_now();
    dsq_pool_run(pool, j->np, fn, j);
    double dt = dsq_now() - t0;
    if (atomic_load(&j->err)) { fprintf(stderr, "bench_read: %s failed\n", what); exit(1); }
    char extra[64] = "";
    if (extra_ratio)
        snprintf(extra, sizeof extra, "stored %.1f%% of raw", 100.0 * atomic_load(&j->stored) / bytes);
    report(what, bytes, dt, extra_ratio ? extra : NULL);
}

/* Write the whole model as .dsq (zstd 1, blobs encoded on the pool in
 * batches, appended in order), then open + verify it. */
static void bench_container(const dsq_st_model *m, dsq_pool *pool, const char *out, uint64_t bytes)
{
    dsq_diag d;
    dsq_diag_clear(&d);
    dsq_ctr_writer *w;
    double t0 = dsq_now();
    if (dsq_ctr_writer_open(&w, out, DSQ_OUT_OVERWRITE, &d) < 0) goto fail;
    for (size_t i = 0; i < dsq_st_count(m); i++) {
        const dsq_st_tensor *t = dsq_st_get(m, i);
        dsq_ctr_tensor_info info = { .name = t->name, .src_dtype = dsq_dtype_name(t->dtype),
                                     .scheme = 1, .ndim = (uint32_t)t->ndim };
        for (int k = 0; k < t->ndim; k++) info.shape[k] = t->shape[k];
        /* Streamed like a converter would for big tensors. */
        if (dsq_ctr_writer_begin(w, &info, 1, &d) < 0) goto fail;
        for (uint64_t o = 0; o < t->nbytes; o += PIECE) {
            size_t k = (size_t)(t->nbytes - o < PIECE ? t->nbytes - o : PIECE);
            if (dsq_ctr_writer_chunk(w, t->data + o, k, &d) < 0) goto fail;
        }
        if (dsq_ctr_writer_end(w, &d) < 0) goto fail;
    }
    if (dsq_ctr_writer_finish(w, &d) < 0) { w = NULL; goto fail; }
    report(".dsq write, streamed zstd-1, 1 thr", bytes, dsq_now() - t0, NULL);

    dsq_ctr *r;
    t0 = dsq_now();
    if (dsq_ctr_open(&r, out, &d) < 0) goto fail;
    double t_open = dsq_now() - t0;
    t0 = dsq_now();
    if (dsq_ctr_verify(r, dsq_pool_size(pool), NULL, &d) < 0) goto fail;
    char extra[64];
    snprintf(extra, sizeof extra, "open %.3f s", t_open);
    report(".dsq open + verify (zstd-1)", bytes, dsq_now() - t0, extra);
    dsq_ctr_close(r);
    (void)pool;
    return;
fail:
    {
        char msg[1024];
        dsq_diag_format(&d, msg, sizeof msg);
        fprintf(stderr, "bench_read: container: %s\n", msg);
        exit(1);
    }
}

int main(int argc, char **argv)
{
    const char *path = getenv("DSQ_BENCH_FILE");
    int threads = 0, container = 1;
    char levels[64] = "1,2,3";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--make") && i + 2 < argc) {
            return make_file(argv[i + 1], atof(argv[i + 2]));
        } else if (!strcmp(argv[i], "-T") && i + 1 < argc) {
            threads = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--levels") && i + 1 < argc) {
            snprintf(levels, sizeof levels, "%s", argv[++i]);
        } else if (!strcmp(argv[i], "--no-container")) {
            container = 0;
        } else if (argv[i][0] == '-') {
            fprintf(stderr, "usage: bench_read [-T N] [--levels 1,2,3] [--no-container] [FILE]\n"
                            "       bench_read --make FILE GB\n");
            return 2;
        } else {
            path = argv[i];
        }
    }
    if (!path) {
        path = "bench/out/bench_read_bf16.safetensors";
        if (!dsq_path_exists(path)) {
            const char *gbs = getenv("DSQ_BENCH_GB");
            mkdir("bench/out", 0755);
            if (make_file(path, gbs ? atof(gbs) : 3.0) != 0) return 1;
        }
    }
    dsq_diag d;
    dsq_diag_clear(&d);
    dsq_st_model *m;
    if (dsq_st_open_ex(&m, path, DSQ_ST_OPEN_FP8_UNSCALED | DSQ_ST_OPEN_NO_SCALE_SCAN, &d) < 0) {
        char msg[1024];
        dsq_diag_format(&d, msg, sizeof msg);
        fprintf(stderr, "bench_read: %s\n", msg);
        return 1;
    }
    struct stat st;
    stat(path, &st);
    uint64_t bytes = dsq_st_total_bytes(m);
    dsq_pool *pool = dsq_pool_create(threads);
    int nt = dsq_pool_size(pool);
    printf("bench_read: %s: %.2f GB file, %zu tensors, %d threads\n", path, st.st_size / 1e9,
           dsq_st_count(m), nt);

    double c1 = time_cat(path), c2 = time_cat(path);
    g_cat = st.st_size / 1e9 / c2;
    printf("  %-34s %7.2f GB/s  (%.2f s)\n", "cat > /dev/null (1st, warms cache)", st.st_size / 1e9 / c1, c1);
    printf("  %-34s %7.2f GB/s  1.00x cat  (%.2f s)\n", "cat > /dev/null (warm)", g_cat, c2);

    size_t np, maxf;
    piece *p = make_pieces(m, &np, &maxf);
    job j = { .m = m, .p = p, .np = np };
    atomic_init(&j.stored, 0);
    atomic_init(&j.err, 0);
    if (!p) return 1;

    run_pool(NULL, &j, task_sha, "mmap view + sha256, 1 thread", bytes, 0);
    char what[64];
    snprintf(what, sizeof what, "mmap view + sha256, %d threads", nt);
    run_pool(pool, &j, task_sha, what, bytes, 0);

    j.fbuf = calloc((size_t)nt, sizeof *j.fbuf);
    for (int k = 0; k < nt; k++) j.fbuf[k] = malloc(maxf * sizeof(float));
    snprintf(what, sizeof what, "read_rows_f32 (bf16->f32), %d thr", nt);
    run_pool(pool, &j, task_f32, what, bytes, 0);
    for (int k = 0; k < nt; k++) free(j.fbuf[k]);
    free(j.fbuf);
    j.fbuf = NULL;

    for (char *s = strtok(levels, ","); s; s = strtok(NULL, ",")) {
        j.level = atoi(s);
        snprintf(what, sizeof what, "sha256 + zstd-%d encode, %d thr", j.level, nt);
        run_pool(pool, &j, task_encode, what, bytes, 1);
    }
    if (container) {
        const char *out = "bench/out/bench_read.dsq";
        mkdir("bench/out", 0755);
        bench_container(m, pool, out, bytes);
        unlink(out);
    }
    printf("  peak RSS %.2f GB (mmap'd pages count)\n", dsq_peak_rss() / 1e9);
    free(p);
    dsq_pool_free(pool);
    dsq_st_close(m);
    return 0;
}
