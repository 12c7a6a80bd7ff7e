/* test_bf16src.c - quantizing from BF16 source rows (quant/bf16src.h) gives
 * the same blob bytes, status and message as widening to f32 and calling the
 * scheme's quantize, for every row of the scheme table: odd shapes, ragged
 * groups, row ranges that do and do not start at row 0, unaligned sources,
 * NaN / Inf / subnormals / signed zeros, allow_nonfinite and in_scale. */
#include "dsq_test.h"
#include "bf16src.h"
#include "dsq_mem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void store_u16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }

static uint64_t g_rng = 0x243f6a8885a308d3ull;
static uint32_t rnd(void) { return dsq_test_xorshift(&g_rng); }

/* Random finite BF16 weights (|x| around 2^-4..2^3), plus the special
 * values of `kind`: 0 none, 1 subnormals / signed zeros / extremes,
 * 2 + a NaN, 3 + an Inf, 4 + a -Inf. */
static void fill(uint8_t *src, int64_t n, int kind)
{
    for (int64_t i = 0; i < n; i++) {
        uint16_t h = (uint16_t)((rnd() & 0x807f) | ((0x3b + rnd() % 8) << 7));
        store_u16(src + 2 * i, h);
    }
    if (kind >= 1 && n > 6) {
        static const uint16_t sp[] = { 0x0001, 0x8001, 0x8000, 0x0000, 0x007f, 0x7f7f, 0xff7f };
        for (size_t k = 0; k < sizeof sp / sizeof sp[0]; k++)
            store_u16(src + 2 * (rnd() % (uint32_t)n), sp[k]);
    }
    static const uint16_t bad[] = { 0x7fc1, 0x7f80, 0xff80 };
    if (kind >= 2) store_u16(src + 2 * (rnd() % (uint32_t)n), bad[kind - 2]);
}

typedef struct { int64_t rows, cols; int32_t g; } shp;
static const shp g_shapes[] = {
    { 1, 1, 0 }, { 3, 5, 0 }, { 2, 33, 0 }, { 5, 130, 0 }, { 4, 1000, 0 }, { 3, 4163, 0 },
    { 9, 200, 64 }, { 6, 384, 128 }, { 4, 513, 256 }, { 7, 257, 64 },
    /* several runs of widened rows (bf16src.c: 64 KiB of floats each):
     * 5 + 2 rows, one row per run, 5 + 4 rows */
    { 7, 3000, 0 }, { 2, 17000, 0 }, { 9, 3072, 128 },
};

static float g_amin[17408], g_amax[17408], g_inscale[17408];

/* One comparison: rows [r0, r0 + nr) of an src of sh, fast vs reference. */
static void compare(const dsq_scheme *sc, const dsq_qshape *sh, const uint8_t *src, int64_t r0,
                    int64_t nr, const dsq_qparams *p, size_t bytes)
{
    uint8_t *a = malloc(bytes), *b = malloc(bytes);
    float *fa = malloc((size_t)(sh->rows * sh->cols) * sizeof *fa + 4);
    float *fb = malloc((size_t)(sh->rows * sh->cols) * sizeof *fb + 4);
    assert_true(a && b && fa && fb);
    memset(a, 0xa5, bytes);
    memset(b, 0xa5, bytes);
    dsq_diag da, db;
    dsq_diag_clear(&da);
    dsq_diag_clear(&db);
    const uint8_t *s = src + 2 * (size_t)(r0 * sh->cols);
    int widened = -1;
    int ra = dsq_quantize_bf16src(sc, s, r0, nr, sh, p, a, fa, &widened, &da);
    int rb = dsq_quantize_bf16src_ref(sc, s, r0, nr, sh, p, b, fb, &db);
    assert_int_equal(ra, rb);
    assert_true(widened == 0 || widened == 1);
    assert_string_equal(da.msg, db.msg);
    if (memcmp(a, b, bytes) != 0) {
        size_t k = 0;
        while (a[k] == b[k]) k++;
        fprintf(stderr, "%s [%lld x %lld g%d] rows %lld+%lld: byte %zu %02x vs %02x\n", sc->name,
                (long long)sh->rows, (long long)sh->cols, (int)sh->group_size, (long long)r0,
                (long long)nr, k, a[k], b[k]);
        fail();
    }
    /* Where the fallback ran, the float rows are there for the caller. */
    if (widened == 1 && ra != DSQ_ERR_INVALID_ARG)
        assert_memory_equal(fa, fb, (size_t)(nr * sh->cols) * sizeof *fa);
    free(a);
    free(b);
    free(fa);
    free(fb);
}

static void test_matches_reference(void **state)
{
    (void)state;
    for (int j = 0; j < 17408; j++) {
        g_amin[j] = -1.5f;
        g_amax[j] = 3.0f;
        g_inscale[j] = 0.5f + (float)(rnd() % 1000) / 500.0f;
    }
    int direct = 0;
    for (int i = 0; i < dsq_scheme_count(); i++) {
        const dsq_scheme *sc = dsq_scheme_at(i);
        if (!sc) continue;
        for (size_t s = 0; s < sizeof g_shapes / sizeof g_shapes[0]; s++) {
            const shp *h = &g_shapes[s];
            if (h->g != 0 && sc->weight_bits != 4) continue;
            dsq_qshape sh = { h->rows, h->cols, h->g };
            size_t bytes;
            if (sc->blob_size(&sh, &bytes) != 0) continue;
            /* +1: an odd address for the unaligned case */
            uint8_t *buf = malloc(2 * (size_t)(h->rows * h->cols) + 1);
            assert_non_null(buf);
            for (int kind = 0; kind < 5; kind++) {
                for (int unal = 0; unal < 2; unal++) {
                    uint8_t *src = buf + unal;
                    fill(src, h->rows * h->cols, kind);
                    for (int v = 0; v < 4; v++) {
                        dsq_qparams p;
                        dsq_qparams_init(&p);
                        if (sc->act == DSQ_ACT_INT8_STATIC) {
                            p.act_min = g_amin;
                            p.act_max = g_amax;
                        }
                        p.allow_nonfinite = v & 1;
                        if (v & 2) p.in_scale = g_inscale;
                        compare(sc, &sh, src, 0, h->rows, &p, bytes);
                        if (h->rows > 2) compare(sc, &sh, src, 1, h->rows - 2, &p, bytes);
                        if (sc->id == DSQ_SCHEME_BF16 && kind < 2 && !(v & 2)) {
                            /* the direct path is the one under test here */
                            uint8_t *o = malloc(bytes);
                            float *f = malloc((size_t)(h->rows * h->cols) * sizeof *f);
                            int widened = -1;
                            assert_int_equal(dsq_quantize_bf16src(sc, src, 0, h->rows, &sh, &p, o, f,
                                                                  &widened, NULL), 0);
                            assert_int_equal(widened, 0);
                            direct++;
                            free(o);
                            free(f);
                        }
                    }
                }
            }
            free(buf);
        }
    }
    assert_true(direct > 0);
}

/* Bad arguments fail the same way on both paths. */
static void test_bad_args(void **state)
{
    (void)state;
    const dsq_scheme *sc = dsq_scheme_by_id(DSQ_SCHEME_BF16);
    dsq_qshape sh = { 4, 64, 0 };
    size_t bytes;
    assert_int_equal(sc->blob_size(&sh, &bytes), 0);
    uint8_t src[4 * 64 * 2];
    fill(src, 4 * 64, 0);
    /* rows outside the shape */
    compare(sc, &sh, src, 3, 2, NULL, bytes);
    uint8_t *o = malloc(bytes);
    float f[4 * 64];
    int widened;
    assert_true(dsq_quantize_bf16src(sc, src, 0, 4, &sh, NULL, NULL, f, &widened, NULL) < 0);
    free(o);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches_reference),
        cmocka_unit_test(test_bad_args),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
