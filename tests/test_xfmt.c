/* test_xfmt.c - the serving-format table (xfmt/xfmt.h), format by format:
 * every scheme a format lists is packed by the export writer (plan, pack,
 * config / description) and unpacked by the reader (detect, spec, unpack),
 * and the blob read back must equal the blob written, byte for byte. A
 * format added to the table is covered without a line here.
 *
 * The source blob's scales are rounded to 8 significant bits first, so that
 * every scale dtype a format stores (F32, BF16, F16) holds them exactly; the
 * static W8A8 activation scale is a power of two, so Ascend's deq_scale =
 * input_scale * weight_scale unfolds exactly.
 *
 * The vLLM targets refuse a quantized V3.2 indexer wk / weights_proj. */
#include "dsq_test.h"
#include "dsq_file.h"
#include "dsq_mem.h"
#include "export.h"
#include "safetensors.h"
#include "scheme.h"
#include "xfmt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 16
#define K 256

static char *g_dir;
static uint64_t g_rng = 0x9e3779b97f4a7c15ull;

static float frand(void) { return (float)((double)dsq_test_xorshift(&g_rng) / 4294967296.0 * 2.0 - 1.0); }

/* a scale every stored dtype holds exactly: 8 significant bits */
static float round8(float s)
{
    int e;
    double m = frexp((double)s, &e);
    return (float)ldexp(nearbyint(m * 256.0) / 256.0, e);
}

/* The modules every scheme is tried on: an attention linear and a routed
 * expert (AscendV1 takes W4A8 on routed experts only, and stores a routed
 * expert's static W8A8 as W8A8_DYNAMIC). */
static const char *const MODULES[] = { "model.layers.0.self_attn.o_proj", "model.layers.1.mlp.experts.0.down_proj" };
static const uint32_t ROLES[] = { DSQ_ROLE_ATTN_LINEAR, DSQ_ROLE_EXPERT_LINEAR };

static uint8_t *make_blob(const dsq_scheme *sc, int32_t group, dsq_qshape *qs, size_t *size)
{
    if (dsq_qshape_init(qs, sc, N, K, group) != DSQ_OK) return NULL;   /* the scheme has no such groups */
    assert_int_equal(sc->blob_size(qs, size), DSQ_OK);
    uint8_t *blob = dsq_aligned_alloc(*size);
    assert_non_null(blob);
    memset(blob, 0, *size);
    float *w = malloc(sizeof(float) * N * K);
    assert_non_null(w);
    for (int i = 0; i < N * K; i++) w[i] = 0.05f * frand();
    dsq_qparams p;
    dsq_qparams_init(&p);
    if (sc->id == DSQ_SCHEME_W8A8) {
        p.has_act_static = 1;
        p.act_scale = 0.015625f;   /* 2^-6 */
        p.act_offset = 3.0f;
    }
    dsq_diag d;
    assert_int_equal(dsq_quantize_tensor(sc, w, qs, &p, blob, NULL, &d), DSQ_OK);
    free(w);
    dsq_qlayout lay;
    assert_int_equal(dsq_qlayout_get(sc, qs, &lay), DSQ_OK);
    for (int64_t i = 0; sc->has_scales && i < (int64_t)N * lay.ngroups; i++) {
        float s;
        memcpy(&s, blob + lay.s_off + 4 * (size_t)i, 4);
        s = round8(s);
        memcpy(blob + lay.s_off + 4 * (size_t)i, &s, 4);
    }
    return blob;
}

/* A BF16 model's config of model_type deepseek_v3 / deepseek_v32. */
static const char V3_META[] = "{\"config\": {\"model_type\": \"deepseek_v3\", \"torch_dtype\": \"bfloat16\"}}";
static const char V32_META[] = "{\"config\": {\"model_type\": \"deepseek_v32\", \"torch_dtype\": \"bfloat16\"}}";

/* dsq_export_open of the one N x K source tensor *src (filled here: name,
 * role, layer, a routed expert being expert 0, quantized as sc / qs; the
 * export reads it until freed) to out in format f. */
static int open_one(dsq_export **ex, dsq_export_src *src, const dsq_xfmt *f, const char *name, uint32_t role,
                    int layer, const dsq_scheme *sc, const dsq_qshape *qs, const char *meta, const char *out,
                    dsq_diag *d)
{
    memset(src, 0, sizeof *src);
    src->name = name;
    src->role.role = role;
    src->role.layer = layer;
    src->role.expert = role == DSQ_ROLE_EXPERT_LINEAR ? 0 : -1;
    src->scheme = sc;
    src->src_dtype = DSQ_DTYPE_BF16;
    src->ndim = 2;
    src->shape[0] = N;
    src->shape[1] = K;
    src->qshape = *qs;
    dsq_export_opts o;
    memset(&o, 0, sizeof o);
    o.format = f->name;
    o.output = out;
    o.meta_json = meta;
    dsq_diag_clear(d);
    return dsq_export_open(ex, &o, src, 1, d);
}

/* 1 when the round trip ran, 0 when the format's plan refuses the
 * (scheme, group size) combination. */
static int round_trip(const dsq_xfmt *f, const dsq_scheme *sc, int32_t group, int m)
{
    const char *MODULE = MODULES[m];
    char NAME[128];
    snprintf(NAME, sizeof NAME, "%s.weight", MODULE);
    dsq_qshape qs;
    size_t size;
    uint8_t *blob = make_blob(sc, group, &qs, &size);
    if (!blob) return 0;
    char out[512];
    snprintf(out, sizeof out, "%s/%s-%s-%d-%d", g_dir, f->name, sc->name, (int)group, m);
    dsq_export_src src;
    dsq_export *ex = NULL;
    dsq_diag d;
    int rc = open_one(&ex, &src, f, NAME, ROLES[m], m, sc, &qs, V3_META, out, &d);
    if (rc == DSQ_ERR_UNSUPPORTED) {
        free(blob);
        return 0;
    }
    if (rc != DSQ_OK) fail_msg("%s %s g%d: open: %s", f->name, sc->name, (int)group, d.msg);
    if (dsq_export_put(ex, 0, blob, size, &d) != DSQ_OK) fail_msg("%s %s: put: %s", f->name, sc->name, d.msg);
    dsq_export_summary sum;
    if (dsq_export_finish(ex, &sum, &d) != DSQ_OK) fail_msg("%s %s: finish: %s", f->name, sc->name, d.msg);
    dsq_export_free(ex, 0);

    dsq_export_info *x = NULL;
    if (dsq_export_detect(out, &x, &d) != DSQ_OK || !x) fail_msg("%s %s: not detected: %s", f->name, sc->name, d.msg);
    assert_int_equal(dsq_export_kind_of(x), f->kind);
    dsq_st_model *st = NULL;
    if (dsq_st_open(&st, out, &d) != DSQ_OK) fail_msg("%s %s: open: %s", f->name, sc->name, d.msg);
    uint8_t *back = NULL;
    size_t bsize = 0;
    float *bias = NULL;
    rc = dsq_xfmt_unpack_linear(x, st, MODULE, N, K, &back, &bsize, &bias, &d);
    if (rc != 1) fail_msg("%s %s g%d: unpack gave %d: %s", f->name, sc->name, (int)group, rc, d.msg);
    assert_null(bias);
    int64_t rows = 0, cols = 0;
    assert_int_equal(dsq_xfmt_linear_shape(x, st, MODULE, &rows, &cols, &d), 1);
    assert_int_equal(rows, N);
    assert_int_equal(cols, K);
    const dsq_qblob_header *hw = (const dsq_qblob_header *)blob, *hr = (const dsq_qblob_header *)back;
    if (hr->scheme_id == hw->scheme_id) {
        if (bsize != size)
            fail_msg("%s %s g%d: blob of %zu bytes read back as %zu", f->name, sc->name, (int)group, size, bsize);
        for (size_t i = 0; i < size; i++)
            if (blob[i] != back[i])
                fail_msg("%s %s g%d %s: blob byte %zu differs (%02x written, %02x read back)", f->name, sc->name,
                         (int)group, MODULE, i, blob[i], back[i]);
    } else {
        /* stored as another scheme: the weights it computes with are the same */
        const dsq_scheme *sb = dsq_scheme_by_id(hr->scheme_id);
        assert_non_null(sb);
        dsq_qshape qb;
        assert_int_equal(dsq_qshape_init(&qb, sb, N, K, (int32_t)hr->group_size), DSQ_OK);
        dsq_qview vw, vr;
        assert_int_equal(dsq_qview_init(&vw, sc, &qs, blob, size, &d), DSQ_OK);
        assert_int_equal(dsq_qview_init(&vr, sb, &qb, back, bsize, &d), DSQ_OK);
        float *a = malloc(sizeof(float) * N * K), *b = malloc(sizeof(float) * N * K);
        assert_true(a && b);
        sc->dequantize(&vw, 0, N, a);
        sb->dequantize(&vr, 0, N, b);
        for (int i = 0; i < N * K; i++)
            if (a[i] != b[i])
                fail_msg("%s %s g%d %s (read back as %s): weight %d is %g, written %g", f->name, sc->name,
                         (int)group, MODULE, sb->name, i, (double)b[i], (double)a[i]);
        free(a);
        free(b);
    }
    free(back);
    dsq_st_close(st);
    dsq_export_info_free(x);
    free(blob);
    return 1;
}

static void test_round_trip(void **state)
{
    (void)state;
    const dsq_xfmt *const *t = dsq_xfmt_table();
    int nfmt = 0;
    for (size_t i = 0; t[i]; i++, nfmt++) {
        const dsq_xfmt *f = t[i];
        assert_ptr_equal(dsq_xfmt_find(f->name), f);
        assert_ptr_equal(dsq_xfmt_of_kind(f->kind), f);
        assert_non_null(f->schemes);
        int nsch = 0;
        for (const uint32_t *id = f->schemes; *id != 0xFFFFFFFFu; id++, nsch++) {
            const dsq_scheme *sc = dsq_scheme_by_id(*id);
            assert_non_null(sc);
            int ran = 0;
            static const int32_t groups[] = { 0, 64, 128 };
            for (size_t g = 0; g < sizeof groups / sizeof *groups; g++)
                for (int m = 0; m < 2; m++) ran += round_trip(f, sc, groups[g], m);
            if (!ran) fail_msg("%s lists %s but refuses it at every group size", f->name, sc->name);
            printf("%s %s: %d (group size, module) pairs round-trip exactly\n", f->name, sc->name, ran);
        }
        assert_true(nsch > 0);
    }
    assert_int_equal(nfmt, 3);
}

/* Open an export of one quantized V3.2 indexer linear (the format's first
 * scheme, group size 64): the status of the plan, its message in d. */
static int open_indexer(const dsq_xfmt *f, const char *name, const char *tag, dsq_diag *d)
{
    const dsq_scheme *sc = dsq_scheme_by_id(f->schemes[0]);
    assert_non_null(sc);
    dsq_qshape qs;
    assert_int_equal(dsq_qshape_init(&qs, sc, N, K, 64), DSQ_OK);
    char out[512];
    snprintf(out, sizeof out, "%s/indexer-%s-%s", g_dir, f->name, tag);
    dsq_export_src src;
    dsq_export *ex = NULL;
    int rc = open_one(&ex, &src, f, name, DSQ_ROLE_INDEXER_LINEAR, 0, sc, &qs, V32_META, out, d);
    if (rc == DSQ_OK) dsq_export_free(ex, 0);
    else assert_null(ex);
    return rc;
}

/* vLLM builds the V3.2 indexer's wk and weights_proj unquantized: the vLLM
 * targets (AutoAWQ, compressed-tensors) refuse them quantized, naming the
 * tensor, and take wq_b, which vLLM quantizes. */
static void test_indexer_float_only(void **state)
{
    (void)state;
    static const char *const FORMATS[] = { "awq", "compressed-tensors" };
    static const char *const FLOAT_ONLY[] = { "model.layers.0.self_attn.indexer.wk.weight",
                                              "model.layers.0.self_attn.indexer.weights_proj.weight" };
    for (size_t i = 0; i < sizeof FORMATS / sizeof *FORMATS; i++) {
        const dsq_xfmt *f = dsq_xfmt_find(FORMATS[i]);
        assert_non_null(f);
        dsq_diag d;
        for (size_t j = 0; j < sizeof FLOAT_ONLY / sizeof *FLOAT_ONLY; j++) {
            int rc = open_indexer(f, FLOAT_ONLY[j], j ? "weights_proj" : "wk", &d);
            if (rc != DSQ_ERR_UNSUPPORTED) fail_msg("%s %s: open gave %d, expected a refusal", f->name, FLOAT_ONLY[j], rc);
            assert_int_equal(d.status, DSQ_ERR_UNSUPPORTED);
            assert_string_equal(d.tensor, FLOAT_ONLY[j]);
            if (!strstr(d.msg, "unquantized")) fail_msg("%s %s: message was: %s", f->name, FLOAT_ONLY[j], d.msg);
        }
        int rc = open_indexer(f, "model.layers.0.self_attn.indexer.wq_b.weight", "wq_b", &d);
        if (rc != DSQ_OK) fail_msg("%s wq_b: open gave %d: %s", f->name, rc, d.msg);
    }
}

static int setup(void **state)
{
    (void)state;
    g_dir = dsq_test_tmpdir();
    return g_dir ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    dsq_test_rmtree(g_dir);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_indexer_float_only),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
