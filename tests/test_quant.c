/* test_quant.c - the quantization schemes, looping over the scheme table:
 * layouts and round trips, analytic error bounds, every kernel level against
 * the scalar reference (bit for bit on integer paths), gemm against a float
 * reference, thread-count independence, hostile blobs. */
#include "dsq_test.h"
#include "scheme.h"
#include "actq.h"
#include "kernels.h"
#include "dsq_mem.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers ------------------------------------------------------------- */

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void) { return dsq_test_xorshift(&g_rng); }
static float frand(void) { return (float)rnd() / 4294967296.0f; }          /* [0,1) */
static float nrand(void)                                                      /* ~N(0,1) */
{
    float s = 0;
    for (int i = 0; i < 4; i++) s += frand();
    return (s - 2.0f) * 1.7320508f;
}

static float *rand_matrix(int64_t rows, int64_t cols, float scale)
{
    float *w = malloc((size_t)(rows * cols) * sizeof *w);
    assert_non_null(w);
    for (int64_t i = 0; i < rows * cols; i++) w[i] = nrand() * scale;
    /* a few outliers and a zero row make scales interesting */
    if (rows * cols > 10) w[(rnd() % (uint32_t)(rows * cols))] = 9.0f * scale;
    if (rows > 2) memset(w + cols, 0, (size_t)cols * sizeof *w);
    return w;
}

typedef struct { int64_t rows, cols; int32_t g; } shp;
static const shp g_shapes[] = {
    { 1, 1, 0 }, { 3, 5, 0 }, { 7, 64, 0 }, { 17, 130, 0 }, { 33, 300, 0 }, { 8, 1000, 0 },
    { 5, 4163, 0 }, { 9, 200, 64 }, { 6, 384, 128 }, { 11, 1000, 128 }, { 4, 513, 256 },
    { 3, 100, 128 }, { 70, 257, 64 },
    /* int4 decode tiles (8 rows, T 1..3, both nibble halves per load) with
     * groups of several 128-column blocks, a ragged last group, tail rows
     * and prefetch past a pool item into the next one */
    { 75, 700, 256 }, { 21, 1000, 384 },
    /* T = 1 row-stream decode (w4_dec_rows: per channel, or groups of 512+) */
    { 13, 1500, 512 }, { 9, 2000, 640 },
};
#define N_SHAPES ((int)(sizeof g_shapes / sizeof g_shapes[0]))

static int shape_ok(const dsq_scheme *sc, const shp *s)
{
    return s->g == 0 || sc->weight_bits == 4;
}

/* Static activation statistics for x drawn by rand_x(). */
static float g_amin[8192], g_amax[8192];
static void set_act_stats(dsq_qparams *p, const dsq_scheme *sc, int64_t cols)
{
    if (sc->act != DSQ_ACT_INT8_STATIC) return;
    for (int64_t j = 0; j < cols; j++) { g_amin[j] = -1.5f; g_amax[j] = 3.0f; }
    p->act_min = g_amin;
    p->act_max = g_amax;
}
static float *rand_x(int64_t T, int64_t cols)
{
    float *x = malloc((size_t)(T * cols) * sizeof *x);
    assert_non_null(x);
    for (int64_t i = 0; i < T * cols; i++) x[i] = -1.5f + 4.5f * frand();
    return x;
}

/* Quantize in three row chunks, out of order (row 0's chunk in the middle). */
static uint8_t *make_blob(const dsq_scheme *sc, const dsq_qshape *sh, const float *w,
                          const dsq_qparams *p, size_t *size, uint8_t fill)
{
    assert_int_equal(sc->blob_size(sh, size), 0);
    uint8_t *blob = dsq_aligned_alloc(*size);
    assert_non_null(blob);
    memset(blob, fill, *size);
    int64_t a = sh->rows / 3, b = 2 * sh->rows / 3;
    dsq_diag d;
    dsq_diag_clear(&d);
    assert_int_equal(sc->quantize(w + b * sh->cols, b, sh->rows - b, sh, p, blob, &d), 0);
    assert_int_equal(sc->quantize(w, 0, a, sh, p, blob, &d), 0);
    assert_int_equal(sc->quantize(w + a * sh->cols, a, b - a, sh, p, blob, &d), 0);
    return blob;
}

/* ---- table ---------------------------------------------------------------- */

static void test_table(void **state)
{
    (void)state;
    assert_int_equal(DSQ_SCHEME_F32, 0);
    assert_int_equal(DSQ_SCHEME_BF16, 1);
    assert_int_equal(DSQ_SCHEME_W8A8_DYNAMIC, 2);
    assert_int_equal(DSQ_SCHEME_W8A8, 3);
    assert_int_equal(DSQ_SCHEME_W4A8, 4);
    assert_int_equal(DSQ_SCHEME_AWQ_W4A16, 5);
    const char *names[] = { "f32", "bf16", "w8a8-dynamic", "w8a8", "w4a8", "awq-w4a16" };
    for (uint32_t id = 0; id < 6; id++) {
        const dsq_scheme *s = dsq_scheme_by_id(id);
        assert_non_null(s);
        assert_int_equal(s->id, id);
        assert_string_equal(s->name, names[id]);
        assert_ptr_equal(dsq_scheme_by_name(names[id]), s);
        assert_non_null(s->blob_size);
        assert_non_null(s->quantize);
        assert_non_null(s->dequantize);
        assert_non_null(s->gemm);
        assert_non_null(s->gemm_ref);
        assert_non_null(s->gemm_scratch);
        assert_non_null(s->error_bound);
    }
    assert_ptr_equal(dsq_scheme_by_name("w4a16"), dsq_scheme_by_id(DSQ_SCHEME_AWQ_W4A16));
    assert_ptr_equal(dsq_scheme_by_name("W8A8-Dynamic"), dsq_scheme_by_id(2));
    assert_null(dsq_scheme_by_name("q4_0"));
    assert_null(dsq_scheme_by_id(DSQ_SCHEME_F16));
    assert_null(dsq_scheme_by_id(99));
    int n = 0;
    for (int i = 0; i < dsq_scheme_count(); i++) n += dsq_scheme_at(i) != NULL;
    assert_int_equal(n, 6);
    assert_null(dsq_scheme_at(-1));
    assert_null(dsq_scheme_at(dsq_scheme_count()));
}

static void test_int4_pack(void **state)
{
    (void)state;
    for (int64_t cols = 1; cols < 400; cols += 37) {
        uint8_t codes[400], row[256];
        size_t rb = (size_t)(cols + 127) / 128 * 64;
        for (int64_t j = 0; j < cols; j++) codes[j] = (uint8_t)(rnd() & 15);
        memset(row, 0xee, sizeof row);
        dsq_i4_pack_row(codes, cols, row, rb);
        for (int64_t j = 0; j < cols; j++) assert_int_equal(dsq_i4_get(row, j), codes[j]);
        for (int64_t j = cols; j < (int64_t)rb * 2; j++) assert_int_equal(dsq_i4_get(row, j), 0);
        assert_int_equal(row[rb], 0xee);  /* nothing past the row */
    }
}

/* Layout sizes and group-size rules. */
static void test_layout_rules(void **state)
{
    (void)state;
    const dsq_scheme *w4 = dsq_scheme_by_id(DSQ_SCHEME_W4A8), *w8 = dsq_scheme_by_id(2);
    dsq_qshape s = { 10, 1000, 128 };
    dsq_qlayout L;
    assert_int_equal(dsq_qlayout_get(w4, &s, &L), 0);
    assert_int_equal(L.ngroups, 8);
    assert_int_equal(L.row_bytes, 8 * 64);
    assert_int_equal(L.w_off, 64);
    assert_int_equal(L.s_off % 64, 0);
    assert_int_equal(L.total, 64 + 10 * 512 + dsq_align_up(10 * 8 * 4, 64));
    s.group_size = 96;
    size_t n;
    assert_int_equal(w4->blob_size(&s, &n), DSQ_ERR_UNSUPPORTED);
    s.group_size = 128;
    assert_int_equal(w8->blob_size(&s, &n), DSQ_ERR_UNSUPPORTED);
    s.group_size = 0;
    s.cols = DSQ_QMAX_INT_COLS + 1;
    assert_int_equal(w8->blob_size(&s, &n), DSQ_ERR_UNSUPPORTED);
    s.cols = 0;
    assert_int_equal(w8->blob_size(&s, &n), DSQ_ERR_INVALID_ARG);
    s.rows = INT64_MAX / 2;
    s.cols = 100;
    assert_true(w8->blob_size(&s, &n) < 0);
    dsq_qshape d;
    assert_int_equal(dsq_qshape_init(&d, dsq_scheme_by_id(DSQ_SCHEME_AWQ_W4A16), 4, 256,
                                     DSQ_GROUP_DEFAULT), 0);
    assert_int_equal(d.group_size, 128);
}

/* ---- round trip, bounds, padding, determinism ------------------------------ */

/* gemv_i / gemv_t (MLA's absorbed decode reads a quantized kv_b in place)
 * against a double product of the reference's dequantization deq, within
 * the float dot bound, rows split at an odd row (the engine runs heads as
 * row windows): y = W x and y += a^T W. */
static void check_absorb_kernels(const dsq_kernels *k, const dsq_qview *v, const float *deq)
{
    const int64_t rows = v->shape.rows, cols = v->shape.cols, r1 = rows / 2 | 1;
    const int is_int = v->scheme->id == DSQ_SCHEME_W8A8_DYNAMIC || v->scheme->id == DSQ_SCHEME_W8A8 ||
                       v->scheme->id == DSQ_SCHEME_W4A8;
    float *x = malloc((size_t)cols * sizeof *x), *y = malloc((size_t)(rows > cols ? rows : cols) * sizeof *y);
    float *a = malloc((size_t)rows * sizeof *a);
    assert_non_null(x);
    assert_non_null(y);
    assert_non_null(a);
    for (int64_t c = 0; c < cols; c++) x[c] = (float)sin(0.37 * (double)c + 0.1);
    for (int64_t n = 0; n < rows; n++) a[n] = (float)cos(0.61 * (double)n);
    if (k->gemv_i) {
        k->gemv_i(v, x, 1, 0, r1 < rows ? r1 : rows, y);
        if (r1 < rows) k->gemv_i(v, x, 1, r1, rows, y);
        for (int64_t n = 0; n < rows; n++) {
            double ref = 0.0, mag = 0.0;
            for (int64_t c = 0; c < cols; c++) {
                ref += (double)deq[n * cols + c] * x[c];
                mag += fabs((double)deq[n * cols + c] * x[c]);
            }
            if (!(fabs((double)y[n] - ref) <= 2.0 * (double)cols * 0x1p-24 * mag + 1e-30)) {
                fprintf(stderr, "%s/%s gemv_i [%lld x %lld] row %lld: %g vs %g\n", k->name, v->scheme->name,
                        (long long)rows, (long long)cols, (long long)n, y[n], ref);
                fail();
            }
        }
    }
    /* gemv_t: int views, and awq (the absorbed path reads an awq kv_b in place too) */
    if (k->gemv_t && (is_int || v->scheme->id == DSQ_SCHEME_AWQ_W4A16)) {
        for (int64_t c = 0; c < cols; c++) y[c] = 0.25f * x[c];
        k->gemv_t(v, 0, r1 < rows ? r1 : rows, a, y);
        if (r1 < rows) k->gemv_t(v, r1, rows, a + r1, y);
        for (int64_t c = 0; c < cols; c++) {
            double ref = 0.25 * (double)x[c], mag = fabs(ref);
            for (int64_t n = 0; n < rows; n++) {
                ref += (double)a[n] * deq[n * cols + c];
                mag += fabs((double)a[n] * deq[n * cols + c]);
            }
            if (!(fabs((double)y[c] - ref) <= 2.0 * (double)(rows + 2) * 0x1p-24 * mag + 1e-30)) {
                fprintf(stderr, "%s/%s gemv_t [%lld x %lld] column %lld: %g vs %g\n", k->name, v->scheme->name,
                        (long long)rows, (long long)cols, (long long)c, y[c], ref);
                fail();
            }
        }
    }
    free(x);
    free(y);
    free(a);
}

static void check_scheme_roundtrip(const dsq_scheme *sc, const shp *s)
{
    dsq_qshape sh = { s->rows, s->cols, s->g };
    float *w = rand_matrix(sh.rows, sh.cols, 0.05f);
    dsq_qparams p;
    dsq_qparams_init(&p);
    set_act_stats(&p, sc, sh.cols);
    size_t n1, n2;
    uint8_t *b1 = make_blob(sc, &sh, w, &p, &n1, 0xAA);
    /* every byte is written: a differently pre-filled buffer and a single
     * whole-tensor call give the identical blob */
    uint8_t *b2 = make_blob(sc, &sh, w, &p, &n2, 0x55);
    assert_int_equal(n1, n2);
    assert_memory_equal(b1, b2, n1);
    memset(b2, 0x33, n2);
    dsq_pool *pool = dsq_pool_create(2);
    assert_int_equal(dsq_quantize_tensor(sc, w, &sh, &p, b2, pool, NULL), 0);
    dsq_pool_free(pool);
    assert_memory_equal(b1, b2, n1);

    dsq_qview v;
    dsq_diag d;
    dsq_diag_clear(&d);
    assert_int_equal(dsq_qview_init(&v, sc, &sh, b1, n1, &d), 0);
    assert_int_equal(dsq_qview_init(&v, NULL, NULL, b1, n1, &d), 0);
    assert_ptr_equal(v.scheme, sc);

    /* W row padding is zero */
    for (int64_t r = 0; r < sh.rows; r++) {
        const uint8_t *row = v.w + (size_t)r * v.layout.row_bytes;
        if (sc->weight_bits != 4)
            for (size_t i = (size_t)(sh.cols * sc->weight_bits / 8); i < v.layout.row_bytes; i++)
                assert_int_equal(row[i], 0);
        else
            for (int64_t c = sh.cols; c < (int64_t)v.layout.row_bytes * 2; c++)
                assert_int_equal(dsq_i4_get(row, c), 0);
    }
    /* dequantize: analytic bound per element, and every level's
     * dequant_tile gives the same values */
    float *deq = malloc((size_t)(sh.rows * sh.cols) * sizeof *deq);
    float *tile = malloc((size_t)(sh.rows * sh.cols) * sizeof *tile);
    sc->dequantize(&v, 0, sh.rows, deq);
    for (int64_t r = 0; r < sh.rows; r++)
        for (int64_t c = 0; c < sh.cols; c++) {
            float wv = w[r * sh.cols + c], dv = deq[r * sh.cols + c];
            double bound = sc->error_bound(&v, r, c, wv);
            if (!(fabs((double)wv - dv) <= bound)) {
                fprintf(stderr, "%s [%lld,%lld] g%d: w=%g deq=%g bound=%g\n", sc->name,
                        (long long)r, (long long)c, s->g, wv, dv, bound);
                fail();
            }
        }
    /* zero row (row 1 when rows > 2) dequantizes to zeros with finite scales */
    if (sh.rows > 2)
        for (int64_t c = 0; c < sh.cols; c++) assert_true(deq[sh.cols + c] == 0.0f);
    const dsq_kernels *lv[8];
    int nl = dsq_kernels_list(lv, 8);
    for (int l = 0; l < nl; l++) {
        check_absorb_kernels(lv[l], &v, deq);
        if (!lv[l]->dequant_tile) continue;
        lv[l]->dequant_tile(&v, 0, sh.rows, 0, sh.cols, tile, sh.cols);
        if (memcmp(deq, tile, (size_t)(sh.rows * sh.cols) * sizeof *deq)) {
            fprintf(stderr, "%s/%s dequant_tile differs [%lld x %lld]\n", lv[l]->name, sc->name,
                    (long long)sh.rows, (long long)sh.cols);
            fail();
        }
        /* windows that start inside a group, on and off a 64-column
         * boundary, and end before the row does (MLA reads kv_b this way) */
        const int64_t k0s[] = { 64, 1, 192 };
        for (int wi = 0; wi < 3; wi++) {
            const int64_t k0 = k0s[wi], k1 = sh.cols - 1, r0 = sh.rows / 2;
            if (k0 >= k1) continue;
            lv[l]->dequant_tile(&v, r0, sh.rows, k0, k1, tile, k1 - k0);
            for (int64_t r = r0; r < sh.rows; r++)
                if (memcmp(deq + r * sh.cols + k0, tile + (r - r0) * (k1 - k0), (size_t)(k1 - k0) * sizeof *deq)) {
                    fprintf(stderr, "%s/%s dequant_tile window [%lld, %lld) differs at row %lld\n", lv[l]->name,
                            sc->name, (long long)k0, (long long)k1, (long long)r);
                    fail();
                }
        }
    }
    /* relative error helper */
    double e2 = 0, r2 = 0;
    assert_int_equal(dsq_qrel_error(&v, w, 0, sh.rows, NULL, &e2, &r2), 0);
    double rel = r2 > 0 ? sqrt(e2 / r2) : 0;
    double lim = sc->weight_bits == 32 ? 0 : sc->weight_bits == 16 ? 0.005 : sc->weight_bits == 8 ? 0.02 : 0.25;
    if (!(rel <= lim)) {
        fprintf(stderr, "%s rel error %g > %g\n", sc->name, rel, lim);
        fail();
    }
    free(deq);
    free(tile);
    free(b1);
    free(b2);
    free(w);
}

static void test_roundtrip_bounds(void **state)
{
    (void)state;
    for (int i = 0; i < dsq_scheme_count(); i++) {
        const dsq_scheme *sc = dsq_scheme_at(i);
        if (!sc) continue;
        for (int k = 0; k < N_SHAPES; k++)
            if (shape_ok(sc, &g_shapes[k])) check_scheme_roundtrip(sc, &g_shapes[k]);
    }
}

/* ---- primitive kernels: every level == ref bit for bit --------------------- */

static void test_primitives_match_ref(void **state)
{
    (void)state;
    const dsq_kernels *lv[8], *ref = dsq_kernels_ref();
    int nl = dsq_kernels_list(lv, 8);
    assert_true(nl >= 1);
    assert_ptr_equal(lv[0], ref);
    fprintf(stderr, "kernel levels on this CPU:");
    for (int l = 0; l < nl; l++) fprintf(stderr, " %s", lv[l]->name);
    fprintf(stderr, " (dispatch: %s)\n", dsq_kernels_get()->name);
    enum { N = 1000 };
    float *x = malloc(N * sizeof *x);
    int8_t q0[N], q1[N];
    for (int iter = 0; iter < 60; iter++) {
        int64_t n = 1 + rnd() % N;
        float sc = 0.01f + frand();
        for (int64_t i = 0; i < n; i++) x[i] = nrand() * 60.0f * sc;
        /* exact halves, zeros, signed zeros, huge values */
        for (int j = 0; j < 6; j++) x[rnd() % n] = ((float)(int)(rnd() % 200) - 100.0f + 0.5f) * sc;
        x[rnd() % n] = -0.0f;
        x[rnd() % n] = 1.00390625f;            /* bf16 ties */
        x[rnd() % n] = -3.3895314e38f;         /* rounds to -inf in bf16 */
        if (iter % 3 == 0) x[rnd() % n] = 1e30f;
        x[rnd() % n] = 1.5e-39f * sc;          /* subnormal */
        x[rnd() % n] = -3e-36f * sc;           /* normal, lo subnormal */
        int nonfinite = iter % 4 == 1;
        if (nonfinite) {
            x[rnd() % n] = NAN;
            x[rnd() % n] = -INFINITY;
        }
        /* the bf16 split: hi is bf16(x), hi + lo = x within 2^-16 |x| (plus
         * half the smallest bf16 subnormal), lo = 0 when hi is not finite */
        {
            uint16_t hs[N], ls[N];
            ref->split_bf16(x, n, hs, ls);
            for (int64_t i = 0; i < n; i++) {
                assert_int_equal(hs[i], dsq_f32_to_bf16(x[i]));
                float hf = dsq_bf16_to_f32(hs[i]);
                if (!isfinite(hf)) {
                    assert_int_equal(ls[i], 0);
                    continue;
                }
                double e = fabs((double)x[i] - (double)hf - (double)dsq_bf16_to_f32(ls[i]));
                assert_true(e <= 0x1p-16 * fabs((double)x[i]) + 0x1p-134);
            }
        }
        int32_t add = iter % 2 ? 8 : (int32_t)(rnd() % 20) - 10;
        int32_t lo = iter % 2 ? 0 : -128, hi = iter % 2 ? 15 : 127;
        ref->quant_i8(x, n, sc, add, lo, hi, q0);
        uint32_t a0 = ref->absmax_bits(x, n);
        float mn0 = 0, mx0 = 0, mn1, mx1;
        if (!nonfinite) ref->minmax(x, n, &mn0, &mx0);
        for (int l = 1; l < nl; l++) {
            memset(q1, 0x5a, sizeof q1);
            lv[l]->quant_i8(x, n, sc, add, lo, hi, q1);
            assert_memory_equal(q0, q1, (size_t)n);
            assert_int_equal(lv[l]->absmax_bits(x, n), a0);
            assert_int_equal(lv[l]->sum_i8(q0, n), ref->sum_i8(q0, n));
            uint16_t h0[N], h1[N];
            ref->f32_to_bf16(x, n, h0);
            lv[l]->f32_to_bf16(x, n, h1);
            assert_memory_equal(h0, h1, (size_t)n * 2);
            uint16_t l0[N], l1[N];
            ref->split_bf16(x, n, h0, l0);
            lv[l]->split_bf16(x, n, h1, l1);
            assert_memory_equal(h0, h1, (size_t)n * 2);
            assert_memory_equal(l0, l1, (size_t)n * 2);
            if (!nonfinite) {
                lv[l]->minmax(x, n, &mn1, &mx1);
                assert_true(mn0 == mn1 && mx0 == mx1);
            }
        }
    }
    free(x);
}

/* ---- gemm ------------------------------------------------------------------ */

static const int64_t g_T[] = { 1, 2, 3, 4, 5, 7, 8, 13, 17 };

/* float reference of deq(W) . deq(Q(x)) in double; absolute-sum for tolerance */
static void float_reference(const dsq_qview *v, const float *deq, const float *x, int64_t T,
                            double *yref, double *yabs)
{
    const dsq_scheme *sc = v->scheme;
    int64_t rows = v->shape.rows, cols = v->shape.cols, kpad = dsq_act_kpad(cols);
    float *xd = malloc((size_t)(T * cols) * sizeof *xd);
    int8_t *q = malloc((size_t)(T * kpad));
    float *s = malloc((size_t)T * sizeof *s);
    if (sc->act == DSQ_ACT_INT8_TOKEN) {
        dsq_actq_token(x, T, cols, q, kpad, s);
        for (int64_t t = 0; t < T; t++)
            for (int64_t k = 0; k < cols; k++) xd[t * cols + k] = (float)q[t * kpad + k] * s[t];
    } else if (sc->act == DSQ_ACT_INT8_STATIC) {
        dsq_actq_static(x, T, cols, q, kpad, v->act_scale, v->act_offset);
        for (int64_t t = 0; t < T; t++)
            for (int64_t k = 0; k < cols; k++)
                xd[t * cols + k] = (float)((double)(q[t * kpad + k] - v->act_offset) * v->act_scale);
    } else if (sc->act == DSQ_ACT_INT16_BLOCK) {
        dsq_actq16_fake(x, T, cols, xd);
    } else {
        memcpy(xd, x, (size_t)(T * cols) * sizeof *xd);
    }
    for (int64_t t = 0; t < T; t++)
        for (int64_t n = 0; n < rows; n++) {
            double a = 0, b = 0;
            for (int64_t k = 0; k < cols; k++) {
                double p = (double)deq[n * cols + k] * xd[t * cols + k];
                a += p;
                b += fabs(p);
            }
            yref[t * rows + n] = a;
            yabs[t * rows + n] = b;
        }
    free(xd);
    free(q);
    free(s);
}

/* awq-w4a16 on each level's bf16 kernel (gemm_awq) with 1, 2 and 3 split
 * terms, whatever DSQ_BF16_TERMS says: within the float dot bound plus the
 * split's error per activation (one term rounds x to bf16, 2^-9 |x|, allowed
 * twice that; two terms 2^-16 |x|; three within the dot bound; scheme.h),
 * with and without a pool, and the same bits for every pool size. */
static void check_awq_terms(const dsq_qview *v, const float *x, int64_t T, const dsq_kernels **lv,
                            int nl, dsq_pool **pools, const float *y0, const double *ya)
{
    const int64_t cols = v->shape.cols;
    const size_t ny = (size_t)(T * v->shape.rows);
    float *y1 = malloc(ny * sizeof *y1), *y2 = malloc(ny * sizeof *y2);
    for (int l = 0; l < nl; l++)
        for (int terms = 1; terms <= 3; terms++)
            for (int pi = 0; pi < 3; pi++) {
                float *y = pi ? y2 : y1;
                memset(y, 0xff, ny * sizeof *y);
                int rc = dsq_awq_gemm_terms(lv[l], v, x, T, y, pools[pi], NULL, 0, terms);
                if (rc == DSQ_ERR_UNSUPPORTED) break;   /* no gemm_awq, or g not a multiple of 128 */
                assert_int_equal(rc, 0);
                const double split = terms == 1 ? 0x1p-8 : terms == 2 ? 0x1p-16 : 0.0;
                for (size_t i = 0; i < ny; i++) {
                    double tol = (2.0 * cols * 0x1p-24 + split) * ya[i] + 1e-30;
                    if (!(fabs((double)y[i] - y0[i]) <= tol)) {
                        fprintf(stderr, "%s awq terms=%d [%lld x %lld] T=%lld i=%zu: %g vs ref %g\n",
                                lv[l]->name, terms, (long long)v->shape.rows, (long long)cols,
                                (long long)T, i, y[i], y0[i]);
                        fail();
                    }
                }
                if (pi) assert_memory_equal(y1, y2, ny * sizeof *y1);
            }
    free(y1);
    free(y2);
}

static void check_gemm(const dsq_scheme *sc, const shp *s)
{
    dsq_qshape sh = { s->rows, s->cols, s->g };
    float *w = rand_matrix(sh.rows, sh.cols, 0.05f);
    dsq_qparams p;
    dsq_qparams_init(&p);
    set_act_stats(&p, sc, sh.cols);
    size_t nb;
    uint8_t *blob = make_blob(sc, &sh, w, &p, &nb, 0);
    dsq_qview v;
    assert_int_equal(dsq_qview_init(&v, sc, &sh, blob, nb, NULL), 0);
    float *deq = malloc((size_t)(sh.rows * sh.cols) * sizeof *deq);
    sc->dequantize(&v, 0, sh.rows, deq);
    const dsq_kernels *lv[8];
    int nl = dsq_kernels_list(lv, 8);
    dsq_pool *pools[3] = { NULL, dsq_pool_create(2), dsq_pool_create(3) };
    /* int8 activations: every level gives the reference's bits; float and
     * int16 (awq) ones: within the float dot bound of the reference's dot
     * of deq(W) with x as the scheme rounds it */
    int is_int = sc->act == DSQ_ACT_INT8_TOKEN || sc->act == DSQ_ACT_INT8_STATIC;
    for (size_t ti = 0; ti < sizeof g_T / sizeof g_T[0]; ti++) {
        int64_t T = g_T[ti];
        float *x = rand_x(T, sh.cols);
        size_t ny = (size_t)(T * sh.rows);
        float *y0 = malloc(ny * sizeof *y0), *y1 = malloc(ny * sizeof *y1);
        double *yr = malloc(ny * sizeof *yr), *ya = malloc(ny * sizeof *ya);
        assert_int_equal(sc->gemm_ref(&v, x, T, y0), 0);
        float_reference(&v, deq, x, T, yr, ya);
        for (size_t i = 0; i < ny; i++) {
            double tol = (is_int ? 1e-5 : 4.0 * sh.cols * 0x1p-24) * ya[i] + 1e-30;
            if (!(fabs(y0[i] - yr[i]) <= tol)) {
                fprintf(stderr, "%s ref [%lld x %lld g%d] T=%lld i=%zu: %g vs %g (tol %g)\n",
                        sc->name, (long long)sh.rows, (long long)sh.cols, s->g, (long long)T, i,
                        y0[i], yr[i], tol);
                fail();
            }
        }
        for (int l = 0; l < nl; l++) {
            for (int pi = 0; pi < 3; pi++) {
                memset(y1, 0xff, ny * sizeof *y1);
                assert_int_equal(dsq_qgemm_with(lv[l], &v, x, T, y1, pools[pi], NULL, 0), 0);
                if (is_int) {
                    if (memcmp(y0, y1, ny * sizeof *y0) != 0) {
                        for (size_t i = 0; i < ny; i++)
                            if (memcmp(&y0[i], &y1[i], 4))
                                fprintf(stderr, "%s/%s [%lld x %lld g%d] T=%lld i=%zu: %.9g vs ref %.9g\n",
                                        lv[l]->name, sc->name, (long long)sh.rows, (long long)sh.cols,
                                        s->g, (long long)T, i, y1[i], y0[i]);
                        fail();
                    }
                } else {
                    for (size_t i = 0; i < ny; i++) {
                        /* + the activation split of bf16 prefill (scheme.h) */
                        double split = lv[l]->bf16_split && (sc->id == DSQ_SCHEME_BF16 ||
                                                             sc->id == DSQ_SCHEME_AWQ_W4A16)
                                           ? 0x1p-16 : 0.0;
                        double tol = (2.0 * sh.cols * 0x1p-24 + split) * ya[i] + 1e-30;
                        if (!(fabs((double)y1[i] - y0[i]) <= tol)) {
                            fprintf(stderr, "%s/%s T=%lld i=%zu: %g vs ref %g\n", lv[l]->name,
                                    sc->name, (long long)T, i, y1[i], y0[i]);
                            fail();
                        }
                    }
                }
            }
        }
        if (sc->id == DSQ_SCHEME_AWQ_W4A16) {   /* the bf16 kernel multiplies x as given */
            float *xf = malloc((size_t)(T * sh.cols) * sizeof *xf);
            dsq_actq16_fake(x, T, sh.cols, xf);
            check_awq_terms(&v, xf, T, lv, nl, pools, y0, ya);
            free(xf);
        }
        /* the dispatched gemm: any thread count gives identical bits */
        float *y2 = malloc(ny * sizeof *y2);
        assert_int_equal(sc->gemm(&v, x, T, y1, NULL, NULL, 0), 0);
        for (int pi = 1; pi < 3; pi++) {
            size_t need = sc->gemm_scratch(&v, T, dsq_pool_size(pools[pi]));
            void *scr = dsq_aligned_alloc(need);
            assert_int_equal(sc->gemm(&v, x, T, y2, pools[pi], scr, need), 0);
            assert_memory_equal(y1, y2, ny * sizeof *y1);
            free(scr);
        }
        free(y2);
        free(x);
        free(y0);
        free(y1);
        free(yr);
        free(ya);
    }
    for (int pi = 1; pi < 3; pi++) dsq_pool_free(pools[pi]);
    free(deq);
    free(blob);
    free(w);
}

static void test_gemm(void **state)
{
    (void)state;
    for (int i = 0; i < dsq_scheme_count(); i++) {
        const dsq_scheme *sc = dsq_scheme_at(i);
        if (!sc) continue;
        for (int k = 0; k < N_SHAPES; k++)
            if (shape_ok(sc, &g_shapes[k])) check_gemm(sc, &g_shapes[k]);
    }
}

/* A larger matrix through the float sgemm path (T > gemv threshold, several
 * K tiles) and the int paths, still checked against the reference. */
static void test_gemm_large(void **state)
{
    (void)state;
    /* 333 rows: 6 pool items of 64 rows, mapped to blocks out of order at
     * decode with 2 and 3 threads (dsq_decode_block), 5 tail rows. 1100
     * rows: bf16 prefill takes pool tasks of 128 rows on 1 thread and 64 on
     * 2 and 3 (scheme_float.c, bf16_task_rows), 12 tail rows, K = 300 not a
     * multiple of 32: the same bits for every split */
    static const shp big[] = { { 130, 1300, 0 }, { 67, 2200, 128 }, { 333, 200, 0 }, { 1100, 300, 0 } };
    for (int i = 0; i < dsq_scheme_count(); i++) {
        const dsq_scheme *sc = dsq_scheme_at(i);
        if (!sc) continue;
        for (int k = 0; k < (int)(sizeof big / sizeof big[0]); k++)
            if (shape_ok(sc, &big[k])) check_gemm(sc, &big[k]);
    }
}

/* awq-w4a16's f32 kernel (gemv_awq) of every level that has one, called
 * directly on x in its order (dsq_awq_perm16) and through the dispatch of
 * every level (ref, avx2, avx512, neon: whichever path the level takes):
 * odd row counts, K not a multiple of 128, T = 1..6 (the kernel's token
 * chunks of 4 and their remainders), row ranges that split 4-row tiles, and
 * pools of 1..3 threads giving the same bits. Each weight is the
 * reference's deq, so the bound is the float dot's alone (no split term),
 * except the one-bf16-term kernel where the dispatch picks it. */
/* An awq-w4a16 view of a random matrix of shape s (row 0 all zeros when
 * zero_row), with its blob, weights and dequantized copy (freed by the
 * caller). */
static void awq_fixture(const shp *s, int zero_row, dsq_qview *v, uint8_t **blob, float **w,
                        float **deq)
{
    const dsq_scheme *sc = dsq_scheme_by_id(DSQ_SCHEME_AWQ_W4A16);
    dsq_qshape sh = { s->rows, s->cols, s->g };
    *w = rand_matrix(sh.rows, sh.cols, 0.05f);
    if (zero_row)
        for (int64_t k = 0; k < sh.cols; k++) (*w)[k] = 0.0f;
    dsq_qparams p;
    dsq_qparams_init(&p);
    size_t nb;
    *blob = make_blob(sc, &sh, *w, &p, &nb, 0);
    assert_int_equal(dsq_qview_init(v, sc, &sh, *blob, nb, NULL), 0);
    *deq = malloc((size_t)(sh.rows * sh.cols) * sizeof **deq);
    sc->dequantize(v, 0, sh.rows, *deq);
}

static void check_awq_f32(const shp *s, double worst[2])
{
    const dsq_qshape sh = { s->rows, s->cols, s->g };
    dsq_qview v;
    uint8_t *blob;
    float *w, *deq;
    awq_fixture(s, 0, &v, &blob, &w, &deq);
    const dsq_kernels *lv[8];
    const int nl = dsq_kernels_list(lv, 8);
    dsq_pool *pools[3] = { NULL, dsq_pool_create(2), dsq_pool_create(3) };
    const int64_t kp = (sh.cols + 127) / 128 * 128;
    for (int64_t T = 1; T <= 6; T++) {
        float *x = rand_x(T, sh.cols);
        const size_t ny = (size_t)(T * sh.rows);
        float *xp = calloc((size_t)(T * kp), sizeof *xp);
        float *y = malloc(ny * sizeof *y), *y1 = malloc(ny * sizeof *y1);
        double *yr = malloc(ny * sizeof *yr), *ya = malloc(ny * sizeof *ya);
        float_reference(&v, deq, x, T, yr, ya);
        /* the f32 kernel multiplies x as given: the rounded x the
         * dispatch gives it (and yr is the dot with) */
        float *xf = malloc((size_t)(T * sh.cols) * sizeof *xf);
        dsq_actq16_fake(x, T, sh.cols, xf);
        for (int64_t t = 0; t < T; t++)
            for (int64_t q = 0; q < kp; q++) {
                int64_t c = q / 128 * 128 + dsq_awq_perm16((int)(q % 128));
                if (c < sh.cols) xp[t * kp + q] = xf[t * sh.cols + c];
            }
        const double dot = 2.0 * (double)sh.cols * 0x1p-24;
        for (int l = 0; l < nl; l++) {
            if (lv[l]->gemv_awq && (s->g == 0 || s->g % 64 == 0)) {
                /* rows [0, r1) and [r1, rows): r1 odd, so tiles split */
                const int64_t r1 = sh.rows / 2 | 1;
                memset(y, 0xff, ny * sizeof *y);
                lv[l]->gemv_awq(&v, xp, T, kp, 0, r1 < sh.rows ? r1 : sh.rows, y);
                if (r1 < sh.rows) lv[l]->gemv_awq(&v, xp, T, kp, r1, sh.rows, y);
                for (size_t i = 0; i < ny; i++) {
                    const double e = fabs((double)y[i] - yr[i]) / (ya[i] + 1e-30);
                    if (!(e <= dot)) {
                        fprintf(stderr, "%s gemv_awq [%lld x %lld g%d] T=%lld i=%zu: %g vs %g\n",
                                lv[l]->name, (long long)sh.rows, (long long)sh.cols, s->g,
                                (long long)T, i, y[i], yr[i]);
                        fail();
                    }
                    if (strcmp(lv[l]->name, "ref") && e > worst[0]) worst[0] = e;
                }
            }
            if (strcmp(lv[l]->name, "ref") && T <= 4) {   /* the float driver's gemv_f, for the record */
                lv[l]->gemv_f(&v, xf, T, 0, sh.rows, y);
                for (size_t i = 0; i < ny; i++) {
                    const double e = fabs((double)y[i] - yr[i]) / (ya[i] + 1e-30);
                    if (e > worst[1]) worst[1] = e;
                }
            }
            const int one = dsq_bf16_terms(&v) == 1 && lv[l]->gemm_awq;
            for (int pi = 0; pi < 3; pi++) {
                float *o = pi ? y1 : y;
                memset(o, 0xff, ny * sizeof *o);
                assert_int_equal(dsq_awq_gemm_with(lv[l], &v, x, T, o, pools[pi], NULL, 0), 0);
                for (size_t i = 0; i < ny; i++) {
                    double tol = (dot + (one ? 0x1p-8 : 0.0)) * ya[i] + 1e-30;
                    if (!(fabs((double)o[i] - yr[i]) <= tol)) {
                        fprintf(stderr, "%s awq dispatch [%lld x %lld g%d] T=%lld i=%zu: %g vs %g\n",
                                lv[l]->name, (long long)sh.rows, (long long)sh.cols, s->g,
                                (long long)T, i, o[i], yr[i]);
                        fail();
                    }
                }
                if (pi) assert_memory_equal(y, y1, ny * sizeof *y);
            }
        }
        free(x);
        free(xf);
        free(xp);
        free(y);
        free(y1);
        free(yr);
        free(ya);
    }
    for (int pi = 1; pi < 3; pi++) dsq_pool_free(pools[pi]);
    free(deq);
    free(blob);
    free(w);
}

/* awq-w4a16 kernel shapes: odd rows and column tails, groups of 64 x odd
 * (the f32 kernel only), 128, 256 and one per row. */
static const shp g_awq_shapes[] = {
    { 1, 1, 0 },      { 5, 100, 0 },    { 7, 130, 0 },
    { 13, 300, 0 },   { 9, 383, 128 },  { 6, 384, 128 },
    { 33, 1000, 128 }, { 10, 513, 256 }, { 3, 4163, 0 },
    { 4, 257, 64 },   { 7, 1000, 64 },  { 5, 700, 192 },
    { 6, 200, 320 },
    /* g128 with full blocks, g256 and one group
     * per row with full blocks */
    { 29, 512, 128 }, { 23, 1024, 256 }, { 19, 640, 0 },
    /* one full block per row */
    { 13, 128, 128 },
    /* over DSQ_GEMM_SERIAL_MACS at T=1: the pools
     * split it, 7 blocks of 48 rows (the last 12)
     * in dsq_rowsplit order, some items empty */
    { 300, 3584, 128 },
};

static void test_awq_f32_kernel(void **state)
{
    (void)state;
    const shp *sh = g_awq_shapes;
    const size_t nsh = sizeof g_awq_shapes / sizeof g_awq_shapes[0];
    double worst[2] = { 0.0, 0.0 };
    for (size_t i = 0; i < nsh; i++) check_awq_f32(&sh[i], worst);
    /* the worst error relative to sum |w x| of the fast levels, for the
     * record (the bound above is 2 cols 2^-24, far looser than f32 sums) */
    fprintf(stderr, "awq: worst |y - ref| / sum|w x|: gemv_awq %.3g, gemv_f %.3g\n", worst[0],
            worst[1]);
}

/* awq-w4a16's int16 path (kernels.h awq16_prep / gemv_awq16): every level
 * that has it gives the scalar twin's codes and bits, on odd rows, columns
 * not a multiple of 128, groups of 128 and 256 and one per row, T = 1..6
 * (the kernel's 6-row one-token tiles, 2-row tiles of 4, 2 and 1 tokens),
 * row ranges that split tiles; each token's bits are those of a T = 1 call;
 * a zero weight row (every code at its zero point) gives exactly 0; a block
 * with an Inf gives NaN; and the result is within the int16 rounding of x
 * (sum_k |deq_k| xs_b / 2) plus the float dot bound of the exact dot. */
static void check_awq16(const shp *s)
{
    const dsq_qshape sh = { s->rows, s->cols, s->g };
    dsq_qview v;
    uint8_t *blob;
    float *w, *deq;
    awq_fixture(s, 1, &v, &blob, &w, &deq);   /* row 0: all codes at the zero point */
    const dsq_kernels *lv[8];
    const int nl = dsq_kernels_list(lv, 8);
    for (int64_t T = 1; T <= 6; T++) {
        float *x = rand_x(T, sh.cols);
        if (T == 3) x[sh.cols + sh.cols / 2] = INFINITY;   /* token 1: one block non-finite */
        const size_t ny = (size_t)(T * sh.rows), ab = dsq_awq16_act_bytes(T, sh.cols);
        void *b0 = dsq_aligned_alloc(ab), *b1 = dsq_aligned_alloc(ab), *b2 = dsq_aligned_alloc(ab);
        memset(b0, 0x5a, ab);
        memset(b1, 0x5a, ab);
        dsq_awq16_act a0, a1, a2;
        dsq_awq16_act_init(&a0, b0, T, sh.cols);
        dsq_awq16_act_init(&a1, b1, T, sh.cols);
        for (int64_t t = 0; t < T; t++) dsq_awq16_prep_scalar(x + t * sh.cols, sh.cols, t, &a0);
        float *y0 = malloc(ny * sizeof *y0), *y = malloc(ny * sizeof *y);
        dsq_gemv_awq16_scalar(&v, &a0, 0, sh.rows, y0);
        for (int l = 0; l < nl; l++) {
            if (!lv[l]->gemv_awq16) continue;
            for (int64_t t = 0; t < T; t++) lv[l]->awq16_prep(x + t * sh.cols, sh.cols, t, &a1);
            assert_memory_equal(b0, b1, ab);
            const int64_t r1 = sh.rows / 2 | 1;
            memset(y, 0xff, ny * sizeof *y);
            lv[l]->gemv_awq16(&v, &a1, 0, r1 < sh.rows ? r1 : sh.rows, y);
            if (r1 < sh.rows) lv[l]->gemv_awq16(&v, &a1, r1, sh.rows, y);
            for (size_t i = 0; i < ny; i++)
                if (memcmp(&y[i], &y0[i], 4)) {
                    fprintf(stderr, "%s gemv_awq16 [%lld x %lld g%d] T=%lld i=%zu: %.9g vs twin %.9g\n",
                            lv[l]->name, (long long)sh.rows, (long long)sh.cols, s->g, (long long)T,
                            i, y[i], y0[i]);
                    fail();
                }
            /* token by token: the same bits */
            for (int64_t t = 0; t < T; t++) {
                b2 = b2 ? b2 : dsq_aligned_alloc(dsq_awq16_act_bytes(1, sh.cols));
                dsq_awq16_act_init(&a2, b2, 1, sh.cols);
                lv[l]->awq16_prep(x + t * sh.cols, sh.cols, 0, &a2);
                float *yt = malloc((size_t)sh.rows * sizeof *yt);
                lv[l]->gemv_awq16(&v, &a2, 0, sh.rows, yt);
                assert_memory_equal(yt, y0 + t * sh.rows, (size_t)sh.rows * sizeof *yt);
                free(yt);
            }
        }
        for (int64_t t = 0; t < T; t++) {
            const int bad = T == 3 && t == 1;
            assert_true(bad ? isnan(y0[t * sh.rows]) : y0[t * sh.rows] == 0.0f);
            if (bad) continue;
            for (int64_t n = 0; n < sh.rows; n++) {
                double e = 0, dot = 0, abs = 0;
                for (int64_t k = 0; k < sh.cols; k++) {
                    const double d = deq[n * sh.cols + k], xk = x[t * sh.cols + k];
                    dot += d * xk;
                    abs += fabs(d * xk);
                    e += fabs(d) * a0.xs[t * a0.nb + k / 128] * 0.5;
                }
                const double tol = e + 2.0 * sh.cols * 0x1p-24 * (abs + e) + 1e-30;
                if (!(fabs(y0[t * sh.rows + n] - dot) <= tol)) {
                    fprintf(stderr, "awq16 bound [%lld x %lld g%d] T=%lld t=%lld n=%lld: %g vs %g (tol %g)\n",
                            (long long)sh.rows, (long long)sh.cols, s->g, (long long)T, (long long)t,
                            (long long)n, y0[t * sh.rows + n], dot, tol);
                    fail();
                }
            }
        }
        free(x);
        free(y0);
        free(y);
        free(b0);
        free(b1);
        free(b2);
        b2 = NULL;
    }
    free(deq);
    free(blob);
    free(w);
}

static void test_awq16_kernel(void **state)
{
    (void)state;
    /* one token, rows of A16_ROW_MIN..A16_ROW_COLS columns streamed one
     * by one (g128, one group per row, a ragged last block), and past
     * A16_ROW_COLS in 6-row tiles, beside the shared shapes */
    static const shp more[] = { { 40, 2048, 128 }, { 11, 1500, 0 }, { 7, 1100, 256 },
                                { 20, 4224, 128 }, { 8, 4352, 256 } };
    for (size_t i = 0; i < sizeof g_awq_shapes / sizeof g_awq_shapes[0]; i++)
        if (g_awq_shapes[i].g % 128 == 0) check_awq16(&g_awq_shapes[i]);
    for (size_t i = 0; i < sizeof more / sizeof more[0]; i++) check_awq16(&more[i]);
}

/* dsq_gemm_many: every scheme's gemms in one job (split ones as one pool
 * job, the others after it) give each gemm's bits alone, on no pool and on
 * pools of 2 and 3 threads: two matrices of one shape sharing x (one
 * prepared x), shapes over the serial threshold (pool split in
 * dsq_rowsplit order) and under it, odd rows, K tails, groups of 128 and
 * per row, T = 1, 2, 3, 5, and more tasks than one job takes (72). */
static void test_gemm_many(void **state)
{
    (void)state;
    static const shp sh[] = { { 300, 3584, 128 }, { 300, 3584, 128 }, { 131, 1300, 0 }, { 67, 2200, 128 } };
    enum { NS = 4, REP = 3, MAXN = DSQ_SCHEME_ID_COUNT * NS * REP };
    dsq_qview v[DSQ_SCHEME_ID_COUNT][NS];
    uint8_t *blobs[DSQ_SCHEME_ID_COUNT][NS];
    int have[DSQ_SCHEME_ID_COUNT] = { 0 };
    for (int i = 0; i < dsq_scheme_count(); i++) {
        const dsq_scheme *sc = dsq_scheme_at(i);
        if (!sc) continue;
        dsq_qparams p;
        dsq_qparams_init(&p);
        if (sc->needs_calibration) {
            p.has_act_static = 1;
            p.act_scale = 0.02f;
            p.act_offset = 3.0f;
        }
        for (int k = 0; k < NS; k++) {
            dsq_qshape q = { sh[k].rows, sh[k].cols, shape_ok(sc, &sh[k]) ? sh[k].g : 0 };
            float *w = rand_matrix(q.rows, q.cols, 0.05f);
            size_t nb;
            blobs[i][k] = make_blob(sc, &q, w, &p, &nb, 0);
            assert_int_equal(dsq_qview_init(&v[i][k], sc, &q, blobs[i][k], nb, NULL), 0);
            free(w);
        }
        have[i] = 1;
    }
    dsq_pool *pools[3] = { NULL, dsq_pool_create(2), dsq_pool_create(3) };
    static const int64_t Ts[] = { 1, 2, 3, 5 };
    for (size_t ti = 0; ti < sizeof Ts / sizeof Ts[0]; ti++) {
        const int64_t T = Ts[ti];
        float *xa = rand_x(T, 3584), *xb = rand_x(T, 1300), *xc = rand_x(T, 2200);
        const float *xs[NS] = { xa, xa, xb, xc };
        dsq_gemm_task t[MAXN];
        float *ref[MAXN];
        int n = 0;
        for (int rep = 0; rep < REP; rep++)
            for (int i = 0; i < dsq_scheme_count(); i++) {
                if (!have[i]) continue;
                for (int k = 0; k < NS; k++) {
                    const dsq_qview *vv = &v[i][k];
                    const size_t ny = (size_t)(T * vv->shape.rows);
                    t[n].v = vv;
                    t[n].x = xs[k];
                    t[n].T = T;
                    t[n].y = malloc(ny * sizeof(float));
                    ref[n] = malloc(ny * sizeof(float));
                    assert_int_equal(vv->scheme->gemm(vv, xs[k], T, ref[n], NULL, NULL, 0), 0);
                    n++;
                }
            }
        assert_true(n > 64);
        for (int pi = 0; pi < 3; pi++) {
            for (int j = 0; j < n; j++) memset(t[j].y, 0xff, (size_t)(T * t[j].v->shape.rows) * sizeof(float));
            /* the caller's scratch, then none (allocated inside) */
            const size_t need = dsq_gemm_many_scratch(t, n < 64 ? n : 64, dsq_pool_size(pools[pi]));
            void *scr = pi == 1 ? NULL : dsq_aligned_alloc(need ? need : 64);
            assert_int_equal(dsq_gemm_many(t, n, pools[pi], scr, pi == 1 ? 0 : need), 0);
            free(scr);
            for (int j = 0; j < n; j++) {
                if (memcmp(t[j].y, ref[j], (size_t)(T * t[j].v->shape.rows) * sizeof(float)) != 0) {
                    fprintf(stderr, "gemm_many %s [%lld x %lld] T=%lld task %d pool %d differs\n",
                            t[j].v->scheme->name, (long long)t[j].v->shape.rows,
                            (long long)t[j].v->shape.cols, (long long)T, j, pi);
                    fail();
                }
            }
        }
        for (int j = 0; j < n; j++) {
            free(t[j].y);
            free(ref[j]);
        }
        free(xa);
        free(xb);
        free(xc);
    }
    /* hostile arguments */
    dsq_gemm_task bad = { NULL, NULL, 1, NULL };
    assert_int_equal(dsq_gemm_many(&bad, 1, NULL, NULL, 0), DSQ_ERR_INVALID_ARG);
    assert_int_equal(dsq_gemm_many(NULL, 1, NULL, NULL, 0), DSQ_ERR_INVALID_ARG);
    assert_int_equal(dsq_gemm_many(NULL, 0, NULL, NULL, 0), 0);
    for (int pi = 1; pi < 3; pi++) dsq_pool_free(pools[pi]);
    for (int i = 0; i < dsq_scheme_count(); i++)
        if (have[i])
            for (int k = 0; k < NS; k++) free(blobs[i][k]);
}

/* ---- error paths ----------------------------------------------------------- */

static void test_nonfinite(void **state)
{
    (void)state;
    for (int i = 0; i < dsq_scheme_count(); i++) {
        const dsq_scheme *sc = dsq_scheme_at(i);
        if (!sc) continue;
        dsq_qshape sh = { 4, 100, 0 };
        float *w = rand_matrix(4, 100, 1.0f);
        dsq_qparams p;
        dsq_qparams_init(&p);
        set_act_stats(&p, sc, 100);
        size_t n;
        assert_int_equal(sc->blob_size(&sh, &n), 0);
        uint8_t *blob = dsq_aligned_alloc(n);
        for (int kind = 0; kind < 3; kind++) {
            float bad = kind == 0 ? NAN : kind == 1 ? INFINITY : -INFINITY;
            w[2 * 100 + 37] = bad;
            dsq_diag d;
            dsq_diag_clear(&d);
            p.allow_nonfinite = 0;
            assert_int_equal(sc->quantize(w, 0, 4, &sh, &p, blob, &d), DSQ_ERR_NONFINITE);
            assert_non_null(strstr(d.msg, "row 2 column 37"));
            p.allow_nonfinite = 1;
            assert_int_equal(sc->quantize(w, 0, 4, &sh, &p, blob, &d), 0);
            dsq_qview v;
            assert_int_equal(dsq_qview_init(&v, sc, &sh, blob, n, NULL), 0);
            float out[100];
            sc->dequantize(&v, 2, 1, out);
            for (int c = 0; c < 100; c++) assert_true(isfinite(out[c]));
            if (kind == 0) assert_true(out[37] == 0.0f || sc->symmetric == 0);
        }
        free(blob);
        free(w);
    }
}

static void test_zero_rows(void **state)
{
    (void)state;
    for (int i = 0; i < dsq_scheme_count(); i++) {
        const dsq_scheme *sc = dsq_scheme_at(i);
        if (!sc || !sc->has_scales) continue;
        dsq_qshape sh = { 3, 300, sc->weight_bits == 4 ? 128 : 0 };
        float w[900] = { 0 };
        w[0] = 1e-38f; /* subnormal-scale group */
        w[2 * 300 + 5] = -1e-44f;
        dsq_qparams p;
        dsq_qparams_init(&p);
        set_act_stats(&p, sc, 300);
        size_t n;
        uint8_t *blob = make_blob(sc, &sh, w, &p, &n, 0x7f);
        dsq_qview v;
        assert_int_equal(dsq_qview_init(&v, sc, &sh, blob, n, NULL), 0);
        for (int64_t j = 0; j < 3 * v.layout.ngroups; j++) {
            assert_true(isfinite(v.scales[j]));
            assert_true(v.scales[j] > 0.0f);
        }
        float out[900];
        sc->dequantize(&v, 0, 3, out);
        for (int j = 0; j < 900; j++) assert_true(fabsf(out[j] - w[j]) <= 1e-5f);
        /* and the gemm of a zero row is exactly 0 */
        float x[600], y[6];
        for (int j = 0; j < 600; j++) x[j] = frand();
        assert_int_equal(sc->gemm(&v, x, 2, y, NULL, NULL, 0), 0);
        assert_true(y[1] == 0.0f && y[4] == 0.0f);
        free(blob);
    }
}

static void test_w8a8_needs_stats(void **state)
{
    (void)state;
    const dsq_scheme *sc = dsq_scheme_by_name("w8a8");
    assert_true(sc->needs_calibration);
    dsq_qshape sh = { 2, 64, 0 };
    float w[128];
    for (int i = 0; i < 128; i++) w[i] = nrand();
    size_t n;
    assert_int_equal(sc->blob_size(&sh, &n), 0);
    uint8_t *blob = dsq_aligned_alloc(n);
    dsq_diag d;
    dsq_diag_clear(&d);
    assert_int_equal(sc->quantize(w, 0, 2, &sh, NULL, blob, &d), DSQ_ERR_INVALID_ARG);
    assert_string_equal(d.msg, "w8a8 needs calibration statistics");
    dsq_qparams p;
    dsq_qparams_init(&p);
    assert_int_equal(sc->quantize(w, 0, 2, &sh, &p, blob, NULL), DSQ_ERR_INVALID_ARG);
    /* explicit params */
    p.has_act_static = 1;
    p.act_scale = 0.02f;
    p.act_offset = -3.0f;
    assert_int_equal(sc->quantize(w, 0, 2, &sh, &p, blob, NULL), 0);
    dsq_qview v;
    assert_int_equal(dsq_qview_init(&v, sc, &sh, blob, n, NULL), 0);
    assert_true(v.act_scale == 0.02f);
    assert_int_equal(v.act_offset, -3);
    p.act_offset = 0.5f;
    assert_int_equal(sc->quantize(w, 0, 2, &sh, &p, blob, NULL), DSQ_ERR_INVALID_ARG);
    /* absmax statistics: symmetric */
    float am[64];
    for (int i = 0; i < 64; i++) am[i] = i == 9 ? -12.7f : 1.0f;
    dsq_qparams_init(&p);
    p.act_absmax = am;
    assert_int_equal(sc->quantize(w, 0, 2, &sh, &p, blob, NULL), 0);
    assert_int_equal(dsq_qview_init(&v, sc, &sh, blob, n, NULL), 0);
    assert_true(fabsf(v.act_scale - 0.1f) < 1e-7f);
    assert_int_equal(v.act_offset, 0);
    /* min/max: asymmetric, range covers [min, max] */
    float mn[64], mx[64];
    for (int i = 0; i < 64; i++) { mn[i] = -1.0f; mx[i] = 4.1f; }
    dsq_qparams_init(&p);
    p.act_min = mn;
    p.act_max = mx;
    assert_int_equal(sc->quantize(w, 0, 2, &sh, &p, blob, NULL), 0);
    assert_int_equal(dsq_qview_init(&v, sc, &sh, blob, n, NULL), 0);
    assert_true(fabsf(v.act_scale - 5.1f / 255.0f) < 1e-6f);
    assert_int_equal(v.act_offset, -128 + 50);
    /* stats are divided by in_scale unless already smoothed */
    float ins[64];
    for (int i = 0; i < 64; i++) ins[i] = 2.0f;
    p.in_scale = ins;
    assert_int_equal(sc->quantize(w, 0, 2, &sh, &p, blob, NULL), 0);
    assert_int_equal(dsq_qview_init(&v, sc, &sh, blob, n, NULL), 0);
    assert_true(fabsf(v.act_scale - 2.55f / 255.0f) < 1e-6f);
    p.act_stats_smoothed = 1;
    assert_int_equal(sc->quantize(w, 0, 2, &sh, &p, blob, NULL), 0);
    assert_int_equal(dsq_qview_init(&v, sc, &sh, blob, n, NULL), 0);
    assert_true(fabsf(v.act_scale - 5.1f / 255.0f) < 1e-6f);
    free(blob);
}

/* in_scale: W' = W * s is encoded; gemm(x / s) approximates W x, and the
 * relative error helper measures against the original W. */
static void test_in_scale(void **state)
{
    (void)state;
    const int64_t R = 16, C = 256;
    float *w = rand_matrix(R, C, 0.1f);
    float s[256], x[256], xs[256];
    for (int j = 0; j < C; j++) {
        s[j] = 0.25f + 2.0f * frand();
        x[j] = nrand();
        xs[j] = x[j] / s[j];
    }
    for (int i = 0; i < dsq_scheme_count(); i++) {
        const dsq_scheme *sc = dsq_scheme_at(i);
        if (!sc) continue;
        dsq_qshape sh = { R, C, sc->weight_bits == 4 ? 64 : 0 };
        dsq_qparams p;
        dsq_qparams_init(&p);
        p.in_scale = s;
        set_act_stats(&p, sc, C);
        for (int j = 0; j < C; j++) { g_amin[j] = -4.0f; g_amax[j] = 4.0f; }
        size_t n;
        uint8_t *blob = make_blob(sc, &sh, w, &p, &n, 0);
        dsq_qview v;
        assert_int_equal(dsq_qview_init(&v, sc, &sh, blob, n, NULL), 0);
        double e2 = 0, r2 = 0;
        assert_int_equal(dsq_qrel_error(&v, w, 0, R, s, &e2, &r2), 0);
        double rel = sqrt(e2 / r2);
        if (!(rel < (sc->weight_bits == 4 ? 0.35 : 0.04))) {
            fprintf(stderr, "%s: in_scale rel error %g\n", sc->name, rel);
            fail();
        }
        float y[16];
        assert_int_equal(sc->gemm(&v, xs, 1, y, NULL, NULL, 0), 0);
        for (int64_t r = 0; r < R; r++) {
            double ref = 0, mag = 0;
            for (int j = 0; j < C; j++) {
                ref += (double)w[r * C + j] * x[j];
                mag += fabs((double)w[r * C + j] * x[j]);
            }
            assert_true(fabs(y[r] - ref) <= 0.15 * mag + 1e-6);
        }
        /* a bad in_scale is refused */
        s[3] = 0.0f;
        assert_int_equal(sc->quantize(w, 0, R, &sh, &p, blob, NULL), DSQ_ERR_INVALID_ARG);
        s[3] = 1.0f;
        free(blob);
    }
    free(w);
}

/* Clip search never does worse than plain RTN on the searched metric. */
static void test_clip_search(void **state)
{
    (void)state;
    const int64_t R = 8, C = 512;
    float *w = rand_matrix(R, C, 0.02f);
    for (int i = 0; i < 40; i++) w[rnd() % (R * C)] *= 8.0f;   /* outliers */
    float imp[512];
    for (int j = 0; j < C; j++) imp[j] = 0.1f + frand();
    for (int i = 0; i < dsq_scheme_count(); i++) {
        const dsq_scheme *sc = dsq_scheme_at(i);
        if (!sc || !sc->has_scales) continue;
        for (int useimp = 0; useimp < 2; useimp++) {
            dsq_qshape sh = { R, C, sc->weight_bits == 4 ? 128 : 0 };
            dsq_qparams p;
            dsq_qparams_init(&p);
            set_act_stats(&p, sc, C);
            /* the clip grid against min/max RTN (searched params: test_qsearch.c) */
            p.range_search = -1;
            if (useimp) p.importance = imp;
            double err[2];
            for (int clip = 0; clip < 2; clip++) {
                p.clip_search = clip;
                size_t n;
                uint8_t *blob = make_blob(sc, &sh, w, &p, &n, 0);
                dsq_qview v;
                assert_int_equal(dsq_qview_init(&v, sc, &sh, blob, n, NULL), 0);
                float *deq = malloc((size_t)(R * C) * sizeof *deq);
                sc->dequantize(&v, 0, R, deq);
                err[clip] = 0;
                for (int64_t k = 0; k < R * C; k++) {
                    double d = (double)w[k] - deq[k];
                    if (useimp) d *= imp[k % C];
                    err[clip] += d * d;
                }
                /* the grid bound still holds with clipping */
                for (int64_t k = 0; k < R * C; k++)
                    assert_true(fabs((double)w[k] - deq[k]) <= sc->error_bound(&v, k / C, k % C, w[k]));
                free(deq);
                free(blob);
            }
            assert_true(err[1] <= err[0] * (1 + 1e-9));
            if (sc->weight_bits == 4) assert_true(err[1] < err[0]);  /* outliers: clipping helps */
        }
    }
    free(w);
}

/* ---- activation quantization ------------------------------------------------ */

static void test_actq(void **state)
{
    (void)state;
    const dsq_kernels *lv[8];
    int nl = dsq_kernels_list(lv, 8);
    enum { T = 3, C = 300, KP = 384 };
    float x[T * C];
    for (int i = 0; i < T * C; i++) x[i] = nrand();
    x[0] = 0; x[1] = 12.7f;
    for (int k = 0; k < C; k++) x[2 * C + k] = 0.0f;   /* all-zero token */
    int8_t q0[T * KP], q1[T * KP];
    float s0[T], s1[T];
    dsq_actq_token_k(dsq_kernels_ref(), x, T, C, q0, KP, s0);
    assert_true(s0[0] == 12.7f / 127.0f);
    assert_int_equal(q0[1], 127);
    assert_true(s0[2] > 0.0f && isfinite(s0[2]));
    for (int k = C; k < KP; k++) assert_int_equal(q0[k], 0);
    int8_t q2[T * KP];
    for (int l = 0; l < nl; l++) {
        dsq_actq_token_k(lv[l], x, T, C, q1, KP, s1);
        assert_memory_equal(q0, q1, sizeof q0);
        assert_memory_equal(s0, s1, sizeof s0);
        dsq_actq_static_k(dsq_kernels_ref(), x, T, C, q2, KP, 0.01f, -7);
        dsq_actq_static_k(lv[l], x, T, C, q1, KP, 0.01f, -7);
        assert_memory_equal(q2, q1, sizeof q2);
    }
    /* static: offset shifts, saturates at -128..127 */
    float xs[4] = { 0.0f, 1e9f, -1e9f, NAN };
    int8_t qs[128];
    dsq_actq_static(xs, 1, 4, qs, 128, 0.5f, -20);
    assert_int_equal(qs[0], -20);
    assert_int_equal(qs[1], 127);
    assert_int_equal(qs[2], -128);
    assert_int_equal(qs[3], -128);
    /* NaN activations propagate to the scale instead of vanishing */
    float xn[4] = { 1.0f, NAN, 2.0f, 3.0f };
    float sn;
    dsq_actq_token(xn, 1, 4, qs, 128, &sn);
    assert_true(isnan(sn));
    /* group sums */
    int32_t gs[2 * 3];
    dsq_actq_token(x, T, C, q0, KP, s0);
    dsq_actq_group_sums(q0, T, KP, 256, 2, gs, T);
    for (int t = 0; t < T; t++) {
        int32_t a = 0, b = 0;
        for (int k = 0; k < 256; k++) a += q0[t * KP + k];
        for (int k = 256; k < KP; k++) b += q0[t * KP + k];
        assert_int_equal(gs[t], a);
        assert_int_equal(gs[T + t], b);
    }
}

/* ---- hostile blobs ---------------------------------------------------------- */

static void test_hostile_blobs(void **state)
{
    (void)state;
    for (int i = 0; i < dsq_scheme_count(); i++) {
        const dsq_scheme *sc = dsq_scheme_at(i);
        if (!sc) continue;
        dsq_qshape sh = { 5, 200, sc->weight_bits == 4 ? 64 : 0 };
        float *w = rand_matrix(5, 200, 1.0f);
        dsq_qparams p;
        dsq_qparams_init(&p);
        set_act_stats(&p, sc, 200);
        size_t n;
        uint8_t *blob = make_blob(sc, &sh, w, &p, &n, 0);
        uint8_t *cp = dsq_aligned_alloc(n + 64);
        dsq_qview v;
        dsq_diag d;
        memcpy(cp, blob, n);
        assert_int_equal(dsq_qview_init(&v, sc, &sh, cp, n, NULL), 0);
        /* size off by one either way, and tiny */
        dsq_diag_clear(&d);
        assert_int_equal(dsq_qview_init(&v, sc, &sh, cp, n - 1, &d), DSQ_ERR_TRUNCATED);
        assert_true(d.msg[0] != 0);
        assert_true(dsq_qview_init(&v, sc, &sh, cp, n + 1, NULL) < 0);
        assert_int_equal(dsq_qview_init(&v, sc, &sh, cp, 10, NULL), DSQ_ERR_TRUNCATED);
        /* misaligned */
        memcpy(cp + 1, blob, n);
        assert_true(dsq_qview_init(&v, sc, &sh, cp + 1, n, NULL) < 0);
        memcpy(cp, blob, n);
        /* wrong shape / scheme expected by the caller */
        dsq_qshape other = sh;
        other.rows++;
        assert_int_equal(dsq_qview_init(&v, sc, &other, cp, n, NULL), DSQ_ERR_SHAPE);
        const dsq_scheme *wrong = dsq_scheme_by_id(sc->id == 2 ? 4 : 2);
        assert_true(dsq_qview_init(&v, wrong, NULL, cp, n, NULL) < 0);
        /* header fields */
        cp[0] = 'X';
        assert_int_equal(dsq_qview_init(&v, sc, &sh, cp, n, NULL), DSQ_ERR_FORMAT);
        memcpy(cp, blob, n);
        cp[4] = 2;
        assert_int_equal(dsq_qview_init(&v, sc, &sh, cp, n, NULL), DSQ_ERR_UNSUPPORTED);
        memcpy(cp, blob, n);
        cp[8] = 6;  /* reserved id */
        assert_int_equal(dsq_qview_init(&v, NULL, NULL, cp, n, NULL), DSQ_ERR_UNSUPPORTED);
        memcpy(cp, blob, n);
        cp[60] = 1;
        assert_int_equal(dsq_qview_init(&v, sc, NULL, cp, n, NULL), DSQ_ERR_FORMAT);
        memcpy(cp, blob, n);
        /* a header claiming a huge shape must not pass or overflow */
        int64_t huge = INT64_MAX / 3;
        memcpy(cp + 16, &huge, 8);
        assert_true(dsq_qview_init(&v, NULL, NULL, cp, n, NULL) < 0);
        memcpy(cp, blob, n);
        if (sc->has_scales) {
            float bad[3] = { NAN, INFINITY, -1.0f };
            dsq_qlayout L;
            assert_int_equal(dsq_qlayout_get(sc, &sh, &L), 0);
            for (int b = 0; b < 3; b++) {
                memcpy(cp, blob, n);
                memcpy(cp + L.s_off + 4 * 3, &bad[b], 4);
                dsq_diag_clear(&d);
                assert_int_equal(dsq_qview_init(&v, sc, &sh, cp, n, &d), DSQ_ERR_NONFINITE);
                assert_int_equal(d.offset, (int64_t)(L.s_off + 12));
            }
        }
        if (sc->has_zeros) {
            memcpy(cp, blob, n);
            dsq_qview_init(&v, sc, &sh, cp, n, NULL);
            cp[v.layout.z_off + 3] = 16;
            assert_int_equal(dsq_qview_init(&v, sc, &sh, cp, n, NULL), DSQ_ERR_FORMAT);
        }
        if (sc->act == DSQ_ACT_INT8_STATIC) {
            memcpy(cp, blob, n);
            float z = 0.0f;
            memcpy(cp + 48, &z, 4);
            assert_int_equal(dsq_qview_init(&v, sc, &sh, cp, n, NULL), DSQ_ERR_NONFINITE);
        }
        /* random header corruption: never crashes (ASan), only errors or a
         * view whose sizes still match the buffer */
        for (int it = 0; it < 300; it++) {
            memcpy(cp, blob, n);
            int nflip = 1 + (int)(rnd() % 3);
            for (int f = 0; f < nflip; f++) cp[rnd() % 64] ^= (uint8_t)(1u << (rnd() % 8));
            if (dsq_qview_init(&v, NULL, NULL, cp, n, NULL) == 0) {
                assert_int_equal(v.layout.total, n);
                float *out = malloc((size_t)(v.shape.rows * v.shape.cols) * sizeof *out);
                v.scheme->dequantize(&v, 0, v.shape.rows, out);
                free(out);
            }
        }
        /* random corruption anywhere (codes, scales, zeros, sums): rejected,
         * or every kernel level runs without touching memory it should not */
        const dsq_kernels *lv[8];
        int nl = dsq_kernels_list(lv, 8);
        float x[2 * 200], y[2 * 5];
        for (int j = 0; j < 400; j++) x[j] = nrand();
        for (int it = 0; it < 60; it++) {
            memcpy(cp, blob, n);
            for (int f = 0; f < 8; f++) cp[64 + rnd() % (n - 64)] = (uint8_t)rnd();
            if (dsq_qview_init(&v, sc, &sh, cp, n, NULL) != 0) continue;
            for (int l = 0; l < nl; l++)
                assert_int_equal(dsq_qgemm_with(lv[l], &v, x, 2, y, NULL, NULL, 0), 0);
        }
        free(cp);
        free(blob);
        free(w);
    }
}

/* bf16 prefill keeps f32 activations' precision: x = 1 + 2^-10 is not a
 * bf16 (it rounds to 1), so a kernel that rounded activations to one bf16
 * would be 2^-10 off on every term of an all-positive dot; the split keeps
 * it within the f32 accumulation error. Every level, token counts on both
 * sides of the packed path's threshold, and every bf16_terms of the view
 * (0: the default, 3): two and three terms stay within 2^-16, one term (on
 * levels with a native bf16 dot product; the others ignore it) is
 * activations rounded to bf16: off by 2^-11..2^-8 relative, no more, and
 * really that far off, so a view option that did not reach the kernel fails. */
static void test_bf16_prefill_precision(void **state)
{
    (void)state;
    const dsq_scheme *sc = dsq_scheme_by_id(DSQ_SCHEME_BF16);
    dsq_qshape sh = { 37, 3000, 0 };
    float *w = malloc((size_t)(sh.rows * sh.cols) * sizeof *w);
    for (int64_t i = 0; i < sh.rows * sh.cols; i++) w[i] = 1.0f + (float)(i % 7) * 0.125f;
    size_t nb;
    uint8_t *blob = make_blob(sc, &sh, w, NULL, &nb, 0);
    dsq_qview v;
    assert_int_equal(dsq_qview_init(&v, sc, &sh, blob, nb, NULL), 0);
    enum { TMAX = 26 };
    float *x = malloc((size_t)(TMAX * sh.cols) * sizeof *x), y[TMAX * 37];
    for (int64_t i = 0; i < TMAX * sh.cols; i++) x[i] = 1.0f + 0x1p-10f + (float)(i % 3) * 0x1p-12f;
    const dsq_kernels *lv[8];
    int nl = dsq_kernels_list(lv, 8);
    static const int Ts[] = { 3, 9, 26 };
    for (int l = 0; l < nl; l++)
        for (int ti = 0; ti < 3; ti++)
            for (int terms = 0; terms <= 3; terms++) {
                const int64_t T = Ts[ti];
                const int one = terms == 1 && lv[l]->bf16_split;
                v.bf16_terms = terms;
                assert_int_equal(dsq_qgemm_with(lv[l], &v, x, T, y, NULL, NULL, 0), 0);
                for (int64_t t = 0; t < T; t++)
                    for (int64_t n = 0; n < sh.rows; n++) {
                        double ref = 0.0;
                        for (int64_t k = 0; k < sh.cols; k++)
                            ref += (double)w[n * sh.cols + k] * x[t * sh.cols + k];
                        double rel = fabs(y[t * sh.rows + n] - ref) / ref;
                        if (one ? !(rel >= 0x1p-11 && rel <= 0x1p-8) : !(rel < 0x1p-16)) {
                            fprintf(stderr, "%s bf16 prefill terms=%d T=%lld t=%lld n=%lld rel err %g\n",
                                    lv[l]->name, terms, (long long)T, (long long)t, (long long)n, rel);
                            fail();
                        }
                    }
            }
    free(x);
    free(blob);
    free(w);
}

/* gemm_bf16 of every level called directly, with one, two and three split
 * terms (the driver picks one, from DSQ_BF16_TERMS) and unsplit (xh NULL:
 * the native level's f32 path, three terms at T >= 8): within the float dot
 * bound plus 2^-8 (one term), 2^-16 (two terms), 2^-23 (three) or 0 (unsplit) of sum|w x| of the exact
 * dot; rows, tokens and columns with tails of every tile and chunk size (83
 * rows: the packed path's 64-row blocks, one full and one of 19, the second
 * call's starting at row 5). */
static void test_bf16_kernel_terms(void **state)
{
    (void)state;
    const dsq_scheme *sc = dsq_scheme_by_id(DSQ_SCHEME_BF16);
    dsq_qshape sh = { 83, 2100, 0 };   /* > one 2048-column chunk, ragged 32-column tail */
    float *w = rand_matrix(sh.rows, sh.cols, 0.05f);
    size_t nb;
    uint8_t *blob = make_blob(sc, &sh, w, NULL, &nb, 0);
    dsq_qview v;
    assert_int_equal(dsq_qview_init(&v, sc, &sh, blob, nb, NULL), 0);
    float *deq = malloc((size_t)(sh.rows * sh.cols) * sizeof *deq);
    sc->dequantize(&v, 0, sh.rows, deq);
    enum { T = 29 };   /* calls below take 3 (dot-layout tile), 11 and 29 (packed: 12-token tiles + tails) */
    const int64_t kp = (sh.cols + DSQ_BF16_KALIGN - 1) / DSQ_BF16_KALIGN * DSQ_BF16_KALIGN;
    float *x = rand_x(T, sh.cols), *r = malloc((size_t)sh.cols * sizeof *r), y[T * 83];
    uint16_t *pl[3];
    for (int i = 0; i < 3; i++) pl[i] = calloc((size_t)(T * kp), sizeof(uint16_t));
    for (int64_t t = 0; t < T; t++) {
        dsq_split_bf16_scalar(x + t * sh.cols, sh.cols, pl[0] + t * kp, pl[1] + t * kp);
        for (int64_t c = 0; c < sh.cols; c++)
            r[c] = x[t * sh.cols + c] - dsq_bf16_to_f32(pl[0][t * kp + c]);
        dsq_split_bf16_scalar(r, sh.cols, pl[1] + t * kp, pl[2] + t * kp);
    }
    const dsq_kernels *lv[8];
    int nl = dsq_kernels_list(lv, 8);
    for (int l = 0; l < nl; l++) {
        if (!lv[l]->gemm_bf16) continue;
        for (int terms = 0; terms <= 3; terms++)   /* 0: not split (xh NULL), x itself */
        for (int nt = 3; nt <= T; nt = nt == 3 ? 11 : nt == 11 ? T : T + 1) {
            dsq_bfact a = { nt, x, kp, terms ? pl[0] : NULL, terms >= 2 ? pl[1] : NULL, terms == 3 ? pl[2] : NULL, 0 };
            memset(y, 0xff, sizeof y);
            lv[l]->gemm_bf16(&v, &a, 0, 5, y);     /* two calls: row ranges as the pool gives */
            lv[l]->gemm_bf16(&v, &a, 5, sh.rows, y);
            double rel = lv[l]->bf16_split && terms ? (terms == 1 ? 0x1p-8 : terms == 2 ? 0x1p-16 : 0x1p-23) : 0.0;
            for (int64_t t = 0; t < nt; t++)
                for (int64_t n = 0; n < sh.rows; n++) {
                    double ex = 0, ab = 0;
                    for (int64_t k = 0; k < sh.cols; k++) {
                        double p = (double)deq[n * sh.cols + k] * x[t * sh.cols + k];
                        ex += p;
                        ab += fabs(p);
                    }
                    double tol = (2.0 * sh.cols * 0x1p-24 + rel) * ab + 1e-30;
                    if (!(fabs(y[t * sh.rows + n] - ex) <= tol)) {
                        fprintf(stderr, "%s gemm_bf16 terms=%d t=%lld n=%lld: %g vs %g\n", lv[l]->name,
                                terms, (long long)t, (long long)n, y[t * sh.rows + n], ex);
                        fail();
                    }
                }
        }
    }
    /* the terms really count: w = 1 and x = 1 + 2^-10 + 2^-18 (hi = 1,
     * lo = 2^-10, lo2 = 2^-18; every partial sum of 64 columns exact):
     * three terms give the exact dot, two lose 2^-18 of it, one 2^-10 */
    {
        dsq_qshape s2 = { 4, 64, 0 };
        float w1[4 * 64], x1[13 * 64], y1[13 * 4];   /* 5 tokens: dot-layout tile; 13: packed */
        for (int i = 0; i < 4 * 64; i++) w1[i] = 1.0f;
        for (int i = 0; i < 13 * 64; i++) x1[i] = 1.0f + 0x1p-10f + 0x1p-18f;
        size_t nb2;
        uint8_t *b2 = make_blob(sc, &s2, w1, NULL, &nb2, 0);
        dsq_qview v2;
        assert_int_equal(dsq_qview_init(&v2, sc, &s2, b2, nb2, NULL), 0);
        uint16_t q[3][13 * 64];
        for (int i = 0; i < 13 * 64; i++) {
            q[0][i] = 0x3f80;   /* 1 */
            q[1][i] = 0x3a80;   /* 2^-10 */
            q[2][i] = 0x3680;   /* 2^-18 */
        }
        uint16_t hs[64], ls[64];
        dsq_split_bf16_scalar(x1, 64, hs, ls);
        assert_int_equal(hs[0], q[0][0]);
        assert_int_equal(ls[0], q[1][0]);
        const double exact = 64.0 * (1.0 + 0x1p-10 + 0x1p-18);
        for (int l = 0; l < nl; l++) {
            if (!lv[l]->gemm_bf16 || !lv[l]->bf16_split) continue;
            for (int terms = 0; terms <= 3; terms++)   /* 0: not split, x as is: exact too */
            for (int nt = 5; nt <= 13; nt += 8) {
                dsq_bfact a = { nt, x1, 64, terms ? q[0] : NULL, terms >= 2 ? q[1] : NULL, terms == 3 ? q[2] : NULL, 0 };
                lv[l]->gemm_bf16(&v2, &a, 0, 4, y1);
                for (int i = 0; i < nt * 4; i++) {
                    if (terms == 3 || terms == 0) assert_true(y1[i] == (float)exact);
                    else if (terms == 2) assert_true(fabs(y1[i] - exact) >= 0.5 * 64.0 * 0x1p-18);
                    else assert_true(fabs(y1[i] - exact) >= 0.5 * 64.0 * 0x1p-10);
                }
            }
        }
        free(b2);
    }
#if defined(__x86_64__)
    /* the packed block entry point (for formats that dequantize to bf16):
     * columns [512, 1024) of the first 13 rows, packed here by hand, one term */
    for (int l = 0; l < nl; l++) {
        if (strcmp(lv[l]->name, "avx512bf16") != 0) continue;
        uint32_t *wp = dsq_aligned_alloc(2 * DSQ_BF16_PACK_KC / 2 * 16 * sizeof *wp);
        assert_non_null(wp);
        memset(wp, 0, 2 * DSQ_BF16_PACK_KC / 2 * 16 * sizeof *wp);
        const int64_t k0 = 512, np = 256, pr = 13;   /* rows of the block */
        for (int64_t n = 0; n < pr; n++) {
            const uint16_t *row = (const uint16_t *)(const void *)(v.w + (size_t)n * v.layout.row_bytes);
            for (int64_t p = 0; p < np; p++)
                wp[((n / 16) * (DSQ_BF16_PACK_KC / 2) + p) * 16 + n % 16] =
                    row[k0 + 2 * p] | (uint32_t)row[k0 + 2 * p + 1] << 16;
        }
        dsq_bfact a = { T, x, kp, pl[0], NULL, NULL, 0 };
        dsq_avx512bf16_packed_block(wp, np, &a, k0, 1, y, sh.rows, 0, (int)pr);
        for (int64_t t = 0; t < T; t++)
            for (int64_t n = 0; n < pr; n++) {
                double ex = 0, ab = 0;
                for (int64_t k = k0; k < k0 + 2 * np; k++) {
                    double p = (double)deq[n * sh.cols + k] * x[t * sh.cols + k];
                    ex += p;
                    ab += fabs(p);
                }
                if (!(fabs(y[t * sh.rows + n] - ex) <= (2.0 * 512 * 0x1p-24 + 0x1p-8) * ab + 1e-30)) {
                    fprintf(stderr, "packed block t=%lld n=%lld: %g vs %g\n", (long long)t, (long long)n,
                            y[t * sh.rows + n], ex);
                    fail();
                }
            }
        free(wp);
    }
#endif
    for (int i = 0; i < 3; i++) free(pl[i]);
    free(r);
    free(x);
    free(deq);
    free(blob);
    free(w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_int4_pack),
        cmocka_unit_test(test_layout_rules),
        cmocka_unit_test(test_primitives_match_ref),
        cmocka_unit_test(test_actq),
        cmocka_unit_test(test_roundtrip_bounds),
        cmocka_unit_test(test_bf16_prefill_precision),
        cmocka_unit_test(test_bf16_kernel_terms),
        cmocka_unit_test(test_gemm),
        cmocka_unit_test(test_gemm_large),
        cmocka_unit_test(test_awq_f32_kernel),
        cmocka_unit_test(test_awq16_kernel),
        cmocka_unit_test(test_gemm_many),
        cmocka_unit_test(test_nonfinite),
        cmocka_unit_test(test_zero_rows),
        cmocka_unit_test(test_w8a8_needs_stats),
        cmocka_unit_test(test_in_scale),
        cmocka_unit_test(test_clip_search),
        cmocka_unit_test(test_hostile_blobs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
