/* test_export_read.c - export readers (the unpackers of xfmt/, through
 * engine/export_read.c) on hand-built export directories, good and hostile
 * (docs/serving-exports.md).
 *
 * Also a dump helper for tests/cli/export_read.sh:
 *   test_export_read --dump DIR OUTDIR   writes OUTDIR/index.txt
 *   ("module rows cols float_offset" per quantized linear) and OUTDIR/deq.f32
 *   (the C reader's dequantized weights), which tests/export_reader.mjs
 *   compares with its own reading. */
#include "dsq_test.h"
#include "dsq_file.h"
#include "dsq_mem.h"
#include "dtype.h"
#include "xfmt.h"
#include "export_read.h"
#include "model.h"
#include "safetensors.h"
#include "scheme.h"
#include "st_writer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 16
#define K 64
#define MOD "model.layers.0.mlp.down_proj"

/* ---- fixture building -------------------------------------------------- */

typedef struct fx {
    dsq_st_writer *w;
    char *dir;
} fx;

/* config.json written next to an ascend description (its torch_dtype fixes
 * the deq_scale dtype; serving-exports.md "## AscendV1") */
static const char *g_ascend_cfg = "{}";

static void fx_init(fx *f)
{
    f->w = dsq_st_writer_create();
    assert_non_null(f->w);
    f->dir = dsq_test_tmpdir();
}

static void add(fx *f, const char *suffix, enum dsq_dtype dt, int ndim, int64_t d0, int64_t d1, const void *data)
{
    char name[256];
    snprintf(name, sizeof name, "%s.%s", MOD, suffix);
    int64_t shape[2] = { d0, d1 };
    uint64_t numel = ndim == 2 ? (uint64_t)(d0 * d1) : (uint64_t)d0;
    assert_int_equal(dsq_st_writer_add_copy(f->w, name, dt, ndim, shape, data, numel * dsq_dtype_bits(dt) / 8), 0);
}

/* write the shard plus a JSON file; open, detect, read the linear */
static int fx_read(fx *f, const char *json_name, const char *json, uint8_t **blob, size_t *size, float **bias,
                   dsq_diag *d)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", f->dir, json_name);
    dsq_test_write(p, json, strlen(json));
    if (strcmp(json_name, "config.json")) {
        snprintf(p, sizeof p, "%s/config.json", f->dir);
        dsq_test_write(p, g_ascend_cfg, strlen(g_ascend_cfg));
    }
    snprintf(p, sizeof p, "%s/model.safetensors", f->dir);
    dsq_diag_clear(d);
    assert_int_equal(dsq_st_writer_write(f->w, p, 0, DSQ_OUT_OVERWRITE, d), 0);
    dsq_st_writer_free(f->w);
    dsq_export_info *x = NULL;
    int rc = dsq_export_detect(f->dir, &x, d);
    dsq_st_model *st = NULL;
    if (rc == 0) {
        assert_non_null(x);
        rc = dsq_st_open(&st, f->dir, d);
    }
    if (rc == 0) rc = dsq_export_read_linear(x, st, MOD, N, K, blob, size, bias, d);
    dsq_st_close(st);
    dsq_export_info_free(x);
    dsq_test_rmtree(f->dir);
    free(f->dir);
    return rc;
}

static void dequant(const uint8_t *blob, size_t size, float *out)
{
    dsq_qview v;
    dsq_diag d;
    dsq_diag_clear(&d);
    assert_int_equal(dsq_qview_init(&v, NULL, NULL, blob, size, &d), 0);
    assert_int_equal(v.shape.rows, N);
    assert_int_equal(v.shape.cols, K);
    v.scheme->dequantize(&v, 0, N, out);
}

/* deterministic codes in [lo, hi] */
static int code(int n, int k, int lo, int hi) { return lo + (n * 7 + k * 13 + (n * k) % 5) % (hi - lo + 1); }

static const char *ASC_W8DYN = "{\"version\":\"1.0.0\",\"model_quant_type\":\"W8A8_DYNAMIC\",\"group_size\":0,"
                               "\"metadata\":{},\"optional\":{},\"" MOD ".weight\":\"W8A8_DYNAMIC\"}";

static void ascend_w8dyn(fx *f, int8_t *q, float *s, float *off)
{
    fx_init(f);
    for (int n = 0; n < N; n++) {
        s[n] = 0.01f * (float)(n + 1);
        off[n] = 0.0f;
        for (int k = 0; k < K; k++) q[n * K + k] = (int8_t)code(n, k, -127, 127);
    }
    add(f, "weight", DSQ_DTYPE_I8, 2, N, K, q);
}

/* ---- Ascend ------------------------------------------------------------- */

static void test_ascend_w8a8_dynamic(void **st)
{
    (void)st;
    fx f;
    int8_t q[N * K];
    float s[N], off[N], out[N * K];
    ascend_w8dyn(&f, q, s, off);
    add(&f, "weight_scale", DSQ_DTYPE_F32, 2, N, 1, s);
    add(&f, "weight_offset", DSQ_DTYPE_F32, 2, N, 1, off);
    uint8_t *blob;
    size_t size;
    float *bias;
    dsq_diag d;
    assert_int_equal(fx_read(&f, DSQ_EXPORT_ASCEND_DESC, ASC_W8DYN, &blob, &size, &bias, &d), 1);
    assert_null(bias);
    dequant(blob, size, out);
    for (int i = 0; i < N * K; i++) assert_true(out[i] == (float)q[i] * s[i / K]);
    assert_int_equal(((const dsq_qblob_header *)blob)->scheme_id, DSQ_SCHEME_W8A8_DYNAMIC);
    free(blob);
}

static void expect_refused(fx *f, const char *json_name, const char *json, const char *tensor_part, const char *msg_part)
{
    uint8_t *blob = NULL;
    size_t size;
    float *bias;
    dsq_diag d;
    int rc = fx_read(f, json_name, json, &blob, &size, &bias, &d);
    char buf[1400];
    dsq_diag_format(&d, buf, sizeof buf);
    print_message("refused: %s\n", buf);
    assert_true(rc < 0);
    assert_null(blob);
    if (tensor_part) assert_non_null(strstr(d.tensor, tensor_part));
    if (msg_part) assert_non_null(strstr(d.msg, msg_part));
}

static void test_ascend_hostile(void **st)
{
    (void)st;
    fx f;
    int8_t q[N * K];
    float s[N], off[N];
    uint16_t s16[N];
    /* missing description entry for the linear */
    ascend_w8dyn(&f, q, s, off);
    add(&f, "weight_scale", DSQ_DTYPE_F32, 2, N, 1, s);
    add(&f, "weight_offset", DSQ_DTYPE_F32, 2, N, 1, off);
    expect_refused(&f, DSQ_EXPORT_ASCEND_DESC, "{\"version\":\"1.0.0\",\"model_quant_type\":\"W8A8_DYNAMIC\"}",
                   MOD ".weight", "no description entry");
    /* wrong dtype: F16 weight_scale */
    ascend_w8dyn(&f, q, s, off);
    for (int n = 0; n < N; n++) s16[n] = 0x3c00;
    add(&f, "weight_scale", DSQ_DTYPE_F16, 2, N, 1, s16);
    add(&f, "weight_offset", DSQ_DTYPE_F32, 2, N, 1, off);
    expect_refused(&f, DSQ_EXPORT_ASCEND_DESC, ASC_W8DYN, "weight_scale", "dtype F16");
    /* transposed scale [1, N] */
    ascend_w8dyn(&f, q, s, off);
    add(&f, "weight_scale", DSQ_DTYPE_F32, 2, 1, N, s);
    add(&f, "weight_offset", DSQ_DTYPE_F32, 2, N, 1, off);
    expect_refused(&f, DSQ_EXPORT_ASCEND_DESC, ASC_W8DYN, "weight_scale", "expected [16, 1]");
    /* nonzero weight_offset */
    ascend_w8dyn(&f, q, s, off);
    off[3] = 1.0f;
    add(&f, "weight_scale", DSQ_DTYPE_F32, 2, N, 1, s);
    add(&f, "weight_offset", DSQ_DTYPE_F32, 2, N, 1, off);
    expect_refused(&f, DSQ_EXPORT_ASCEND_DESC, ASC_W8DYN, "weight_offset", "must be 0");
    /* unknown type, and a non-string entry */
    ascend_w8dyn(&f, q, s, off);
    expect_refused(&f, DSQ_EXPORT_ASCEND_DESC, "{\"" MOD ".weight\":\"W4A4_MXFP4\"}", MOD ".weight", "not supported");
    ascend_w8dyn(&f, q, s, off);
    expect_refused(&f, DSQ_EXPORT_ASCEND_DESC, "{\"" MOD ".weight\":8}", MOD ".weight", "type string");
    ascend_w8dyn(&f, q, s, off);
    expect_refused(&f, DSQ_EXPORT_ASCEND_DESC, "{\"group_size\":\"0\"}", "group_size", NULL);
}

static const char *ASC_W8 = "{\"group_size\":0,\"" MOD ".weight\":\"W8A8\"}";

static void test_ascend_w8a8_static(void **st)
{
    (void)st;
    fx f;
    int8_t q[N * K];
    float s[N], off[N], deq[N], out[N * K];
    int32_t qb[N];
    float in_s = 0.0371f, in_o = -5.0f;
    int64_t deq_i64[N];
    for (int variant = 0; variant < 2; variant++) {
        ascend_w8dyn(&f, q, s, off);
        for (int n = 0; n < N; n++) {
            deq[n] = in_s * s[n];
            int32_t rs = 0;
            for (int k = 0; k < K; k++) rs += q[n * K + k];
            float bias = (float)(n - 4) * 0.25f;
            qb[n] = (int32_t)rintf(bias / deq[n]) - (int32_t)in_o * rs;
            uint32_t bits;
            memcpy(&bits, &deq[n], 4);
            deq_i64[n] = (int64_t)(int32_t)bits;
        }
        add(&f, "input_scale", DSQ_DTYPE_F32, 1, 1, 0, &in_s);
        add(&f, "input_offset", DSQ_DTYPE_F32, 1, 1, 0, &in_o);
        if (variant == 0) add(&f, "deq_scale", DSQ_DTYPE_F32, 1, N, 0, deq);
        else add(&f, "deq_scale", DSQ_DTYPE_I64, 1, N, 0, deq_i64);   /* fp16 model */
        add(&f, "quant_bias", DSQ_DTYPE_I32, 1, N, 0, qb);
        uint8_t *blob;
        size_t size;
        float *bias;
        dsq_diag d;
        g_ascend_cfg = variant == 0 ? "{\"torch_dtype\": \"bfloat16\"}" : "{\"torch_dtype\": \"float16\"}";
        assert_int_equal(fx_read(&f, DSQ_EXPORT_ASCEND_DESC, ASC_W8, &blob, &size, &bias, &d), 1);
        g_ascend_cfg = "{}";
        const dsq_qblob_header *h = (const dsq_qblob_header *)blob;
        assert_int_equal(h->scheme_id, DSQ_SCHEME_W8A8);
        assert_true(h->act_scale == in_s);
        assert_int_equal(h->act_offset, -5);
        dequant(blob, size, out);
        for (int i = 0; i < N * K; i++) {
            assert_true(fabs(out[i] - q[i] * (double)deq[i / K] / in_s) <= 4e-7 * fabs(out[i]) + 1e-30);
        }
        /* engine's effective per-row factor act_scale * s_w is deq_scale exactly */
        dsq_qview v;
        dsq_diag_clear(&d);
        assert_int_equal(dsq_qview_init(&v, NULL, NULL, blob, size, &d), 0);
        for (int n = 0; n < N; n++) assert_true(in_s * v.scales[n] == deq[n]);
        assert_non_null(bias);
        for (int n = 0; n < N; n++) assert_true(fabs(bias[n] - (n - 4) * 0.25) <= deq[n]);
        free(blob);
        free(bias);
    }
    /* non-integer input_offset */
    ascend_w8dyn(&f, q, s, off);
    float bad_o = 2.5f;
    add(&f, "input_scale", DSQ_DTYPE_F32, 1, 1, 0, &in_s);
    add(&f, "input_offset", DSQ_DTYPE_F32, 1, 1, 0, &bad_o);
    add(&f, "deq_scale", DSQ_DTYPE_F32, 1, N, 0, deq);
    add(&f, "quant_bias", DSQ_DTYPE_I32, 1, N, 0, qb);
    expect_refused(&f, DSQ_EXPORT_ASCEND_DESC, ASC_W8, "input_offset", "whole number");
    /* deq_scale dtype unlike the model's torch_dtype: vllm-ascend allocates
     * float32 for bf16 and int64 for fp16 (m/w8a8_static.py:80-83) and would
     * copy the other one in by value */
    for (int variant = 0; variant < 2; variant++) {
        ascend_w8dyn(&f, q, s, off);
        add(&f, "input_scale", DSQ_DTYPE_F32, 1, 1, 0, &in_s);
        add(&f, "input_offset", DSQ_DTYPE_F32, 1, 1, 0, &in_o);
        if (variant == 0) add(&f, "deq_scale", DSQ_DTYPE_F32, 1, N, 0, deq);
        else add(&f, "deq_scale", DSQ_DTYPE_I64, 1, N, 0, deq_i64);
        add(&f, "quant_bias", DSQ_DTYPE_I32, 1, N, 0, qb);
        g_ascend_cfg = variant == 0 ? "{\"torch_dtype\": \"float16\"}" : "{\"dtype\": \"bfloat16\"}";
        expect_refused(&f, DSQ_EXPORT_ASCEND_DESC, ASC_W8, "deq_scale", variant == 0 ? "int64" : "float32");
        g_ascend_cfg = "{}";
    }
}

static const char *ASC_W4 = "{\"group_size\":0,\"" MOD ".weight\":\"W4A8_DYNAMIC\"}";

static void w4a8_fixture(fx *f, int swap, float *s, int8_t *q)
{
    static int8_t packed[N / 2 * K];
    static float sb[N * 16], off[N];
    fx_init(f);
    for (int n = 0; n < N; n++) {
        s[n] = 0.02f * (float)(n + 1);
        off[n] = 0;
        for (int k = 0; k < K; k++) q[n * K + k] = (int8_t)code(n * 3 + 1, k, -8, 7);
    }
    for (int j = 0; j < N / 2; j++)
        for (int k = 0; k < K; k++) {
            int lo = q[2 * j * K + k], hi = q[(2 * j + 1) * K + k];
            if (swap) { int t = lo; lo = hi; hi = t; }
            packed[j * K + k] = (int8_t)(uint8_t)(((unsigned)hi << 4) | ((unsigned)lo & 15u));
        }
    memset(sb, 0, sizeof sb);
    for (int n = 0; n < N; n++)
        for (int k = 0; k < K; k++) sb[n * 16 + k / (K / 16)] += 8.0f * (float)q[n * K + k] * s[n];
    add(f, "weight", DSQ_DTYPE_I8, 2, N / 2, K, packed);
    add(f, "weight_scale", DSQ_DTYPE_F32, 2, N, 1, s);
    add(f, "weight_offset", DSQ_DTYPE_F32, 2, N, 1, off);
    add(f, "scale_bias", DSQ_DTYPE_F32, 2, N, 16, sb);
}

static void test_ascend_w4a8(void **st)
{
    (void)st;
    fx f;
    float s[N], out[N * K];
    int8_t q[N * K];
    w4a8_fixture(&f, 0, s, q);
    uint8_t *blob;
    size_t size;
    float *bias;
    dsq_diag d;
    assert_int_equal(fx_read(&f, DSQ_EXPORT_ASCEND_DESC, ASC_W4, &blob, &size, &bias, &d), 1);
    assert_int_equal(((const dsq_qblob_header *)blob)->scheme_id, DSQ_SCHEME_W4A8);
    dequant(blob, size, out);
    for (int i = 0; i < N * K; i++) assert_true(out[i] == (float)q[i] * s[i / K]);
    free(blob);
    /* nibble order swapped (high nibble = even row): scale_bias disagrees */
    w4a8_fixture(&f, 1, s, q);
    expect_refused(&f, DSQ_EXPORT_ASCEND_DESC, ASC_W4, "scale_bias", "nibble order");
    /* group_size must be 0 */
    w4a8_fixture(&f, 0, s, q);
    expect_refused(&f, DSQ_EXPORT_ASCEND_DESC, "{\"group_size\":64,\"" MOD ".weight\":\"W4A8_DYNAMIC\"}", "group_size", NULL);
}

/* ---- AutoAWQ ------------------------------------------------------------ */

#define G 64
static const int AWQ_ORDER[8] = { 0, 2, 4, 6, 1, 3, 5, 7 };
static const char *AWQ_CFG = "{\"quantization_config\":{\"quant_method\":\"awq\",\"zero_point\":true,\"group_size\":64,"
                             "\"bits\":4,\"version\":\"gemm\",\"modules_to_not_convert\":null}}";

static void awq_fixture(fx *f, int sequential, int transposed_scales, uint8_t *q, uint8_t *z, float *sv)
{
    static int32_t qw[K * N / 8], qz[(K / G) * N / 8];
    static uint16_t sc[(K / G) * N];
    fx_init(f);
    memset(qw, 0, sizeof qw);
    memset(qz, 0, sizeof qz);
    for (int n = 0; n < N; n++) {
        z[n] = (uint8_t)code(n, 1, 0, 15);
        sv[n] = dsq_f16_to_f32((uint16_t)(0x2000 + n * 37));
        sc[n] = (uint16_t)(0x2000 + n * 37);
        for (int k = 0; k < K; k++) q[n * K + k] = (uint8_t)code(n, k, 0, 15);
    }
    for (int n = 0; n < N; n++) {
        int c = n / 8, i = sequential ? n % 8 : 0;
        if (!sequential)
            for (int t = 0; t < 8; t++) if (AWQ_ORDER[t] == n % 8) i = t;
        qz[c] |= (int32_t)((uint32_t)z[n] << (4 * i));
        for (int k = 0; k < K; k++) qw[k * (N / 8) + c] |= (int32_t)((uint32_t)q[n * K + k] << (4 * i));
    }
    add(f, "qweight", DSQ_DTYPE_I32, 2, K, N / 8, qw);
    add(f, "qzeros", DSQ_DTYPE_I32, 2, K / G, N / 8, qz);
    if (transposed_scales) add(f, "scales", DSQ_DTYPE_F16, 2, N, K / G, sc);
    else add(f, "scales", DSQ_DTYPE_F16, 2, K / G, N, sc);
}

static void test_awq(void **st)
{
    (void)st;
    fx f;
    uint8_t q[N * K], z[N];
    float sv[N], out[N * K];
    awq_fixture(&f, 0, 0, q, z, sv);
    uint8_t *blob;
    size_t size;
    float *bias;
    dsq_diag d;
    assert_int_equal(fx_read(&f, "config.json", AWQ_CFG, &blob, &size, &bias, &d), 1);
    assert_int_equal(((const dsq_qblob_header *)blob)->scheme_id, DSQ_SCHEME_AWQ_W4A16);
    dequant(blob, size, out);
    for (int i = 0; i < N * K; i++) assert_true(out[i] == (float)((int)q[i] - (int)z[i / K]) * sv[i / K]);
    free(blob);
    /* sequential packing (compressed-tensors order) reads as other values */
    awq_fixture(&f, 1, 0, q, z, sv);
    assert_int_equal(fx_read(&f, "config.json", AWQ_CFG, &blob, &size, &bias, &d), 1);
    dequant(blob, size, out);
    int differ = 0;
    for (int i = 0; i < N * K; i++) differ += out[i] != (float)((int)q[i] - (int)z[i / K]) * sv[i / K];
    assert_true(differ > 0);
    free(blob);
    /* scales [N, K/G] instead of [K/G, N] */
    awq_fixture(&f, 0, 1, q, z, sv);
    expect_refused(&f, "config.json", AWQ_CFG, "scales", "expected [1, 16]");
    /* bits as a string; version gemv */
    awq_fixture(&f, 0, 0, q, z, sv);
    expect_refused(&f, "config.json", "{\"quantization_config\":{\"quant_method\":\"awq\",\"bits\":\"4\"}}", "bits", NULL);
    awq_fixture(&f, 0, 0, q, z, sv);
    expect_refused(&f, "config.json", "{\"quantization_config\":{\"quant_method\":\"awq\",\"version\":\"gemv\"}}",
                   "version", "GEMM only");
    /* a float weight where the config implies AWQ: allowed when
     * modules_to_not_convert is empty (vLLM infers float modules from dtypes),
     * refused when the list names other modules */
    static uint16_t wf[N * K];
    memset(wf, 0, sizeof wf);
    fx_init(&f);
    add(&f, "weight", DSQ_DTYPE_F16, 2, N, K, wf);
    assert_int_equal(fx_read(&f, "config.json", AWQ_CFG, &blob, &size, &bias, &d), 0);
    fx_init(&f);
    add(&f, "weight", DSQ_DTYPE_F16, 2, N, K, wf);
    expect_refused(&f, "config.json", "{\"quantization_config\":{\"quant_method\":\"awq\",\"group_size\":64,"
                   "\"modules_to_not_convert\":[\"kv_b_proj\"]}}", "qweight", "missing");
    /* packed along K (wrong packing dimension): shape refused */
    fx_init(&f);
    static int32_t qk[(K / 8) * N];
    memset(qk, 0, sizeof qk);
    add(&f, "qweight", DSQ_DTYPE_I32, 2, K / 8, N, qk);
    expect_refused(&f, "config.json", AWQ_CFG, "qweight", "expected [64, 2]");
}

/* ---- compressed-tensors --------------------------------------------------- */

static const char *CT_PACK = "{\"quantization_config\":{\"quant_method\":\"compressed-tensors\",\"format\":\"pack-quantized\","
    "\"quantization_status\":\"compressed\",\"config_groups\":{\"group_0\":{\"targets\":[\"Linear\"],\"weights\":"
    "{\"num_bits\":4,\"type\":\"int\",\"symmetric\":false,\"strategy\":\"group\",\"group_size\":64,\"dynamic\":false,"
    "\"actorder\":null},\"input_activations\":null,\"format\":\"pack-quantized\"}},\"ignore\":[\"lm_head\",\"re:.*mlp.gate$\"]}}";

static void test_ct(void **st)
{
    (void)st;
    fx f;
    static int32_t wp[N * K / 8], zp[(N / 8) * (K / G)];
    static float sv[N], out[N * K];
    static int qv[N * K], zv[N];
    int64_t shape[2] = { N, K };
    fx_init(&f);
    memset(wp, 0, sizeof wp);
    memset(zp, 0, sizeof zp);
    for (int n = 0; n < N; n++) {
        zv[n] = code(n, 2, -8, 7);
        sv[n] = 0.125f * (float)(n + 1);
        zp[n / 8] |= (int32_t)((uint32_t)(zv[n] + 8) << (4 * (n % 8)));
        for (int k = 0; k < K; k++) {
            qv[n * K + k] = code(n, k, -8, 7);
            wp[n * (K / 8) + k / 8] |= (int32_t)((uint32_t)(qv[n * K + k] + 8) << (4 * (k % 8)));
        }
    }
    add(&f, "weight_packed", DSQ_DTYPE_I32, 2, N, K / 8, wp);
    add(&f, "weight_zero_point", DSQ_DTYPE_I32, 2, N / 8, K / G, zp);
    add(&f, "weight_scale", DSQ_DTYPE_F32, 2, N, K / G, sv);
    add(&f, "weight_shape", DSQ_DTYPE_I64, 1, 2, 0, shape);
    uint8_t *blob;
    size_t size;
    float *bias;
    dsq_diag d;
    assert_int_equal(fx_read(&f, "config.json", CT_PACK, &blob, &size, &bias, &d), 1);
    dequant(blob, size, out);
    for (int i = 0; i < N * K; i++) assert_true(out[i] == (float)(qv[i] - zv[i / K]) * sv[i / K]);
    free(blob);
    /* weight_shape disagreeing with the linear */
    fx_init(&f);
    int64_t bad_shape[2] = { K, N };
    add(&f, "weight_packed", DSQ_DTYPE_I32, 2, N, K / 8, wp);
    add(&f, "weight_zero_point", DSQ_DTYPE_I32, 2, N / 8, K / G, zp);
    add(&f, "weight_scale", DSQ_DTYPE_F32, 2, N, K / G, sv);
    add(&f, "weight_shape", DSQ_DTYPE_I64, 1, 2, 0, bad_shape);
    expect_refused(&f, "config.json", CT_PACK, "weight_shape", NULL);
    /* ignored by regex: the module must be float, quantized tensors refused */
    fx_init(&f);
    add(&f, "weight_packed", DSQ_DTYPE_I32, 2, N, K / 8, wp);
    char cfg[2048];
    snprintf(cfg, sizeof cfg, "%s", CT_PACK);
    char *ig = strstr(cfg, "re:.*mlp.gate$");
    memcpy(ig, "re:.*down_pro.", 14);
    expect_refused(&f, "config.json", cfg, "weight_packed", "float");
    /* config_groups of the wrong type */
    fx_init(&f);
    expect_refused(&f, "config.json", "{\"quantization_config\":{\"quant_method\":\"compressed-tensors\",\"config_groups\":[]}}",
                   "config_groups", NULL);
}

/* ---- dump helper ------------------------------------------------------------ */

static int dump(const char *dir, const char *outdir)
{
    dsq_diag d;
    dsq_diag_clear(&d);
    dsq_export_info *x = NULL;
    dsq_st_model *st = NULL;
    int rc = dsq_export_detect(dir, &x, &d);
    if (rc == 0 && !x) rc = dsq_fail(&d, DSQ_ERR_FORMAT, dir, NULL, -1, "not an export directory");
    if (rc == 0) rc = dsq_st_open(&st, dir, &d);
    char p[4096];
    snprintf(p, sizeof p, "%s/index.txt", outdir);
    FILE *idx = rc == 0 ? fopen(p, "w") : NULL;
    snprintf(p, sizeof p, "%s/deq.f32", outdir);
    FILE *bin = idx ? fopen(p, "wb") : NULL;
    if (rc == 0 && !bin) rc = dsq_fail(&d, DSQ_ERR_IO, outdir, NULL, -1, "cannot write the dump");
    uint64_t off = 0;
    for (size_t i = 0; rc == 0 && i < dsq_st_count(st); i++) {
        char mod[512];
        if (!dsq_export_module_of(x, dsq_st_get(st, i), mod, sizeof mod)) continue;
        int64_t rows, cols;
        rc = dsq_export_linear_shape(x, st, mod, &rows, &cols, &d);
        if (rc <= 0) break;
        uint8_t *blob;
        size_t size;
        float *bias;
        rc = dsq_export_read_linear(x, st, mod, rows, cols, &blob, &size, &bias, &d);
        if (rc <= 0) break;
        dsq_qview v;
        rc = dsq_qview_init(&v, NULL, NULL, blob, size, &d);
        float *w = rc == 0 ? malloc((size_t)(rows * cols) * sizeof *w) : NULL;
        if (w) {
            v.scheme->dequantize(&v, 0, rows, w);
            fprintf(idx, "%s %lld %lld %llu\n", mod, (long long)rows, (long long)cols, (unsigned long long)off);
            fwrite(w, sizeof *w, (size_t)(rows * cols), bin);
            off += (uint64_t)(rows * cols);
        }
        free(w);
        free(blob);
        free(bias);
        rc = rc < 0 ? rc : 0;
    }
    if (idx) fclose(idx);
    if (bin) fclose(bin);
    dsq_st_close(st);
    dsq_export_info_free(x);
    if (rc < 0) {
        char buf[1400];
        dsq_diag_format(&d, buf, sizeof buf);
        fprintf(stderr, "dump: %s\n", buf);
        return 1;
    }
    return 0;
}

/* ---- model-level helpers for tests/cli/export_read.sh -------------------------- */

static int open_model(const char *path, int lazy, dsq_model **m)
{
    dsq_model_opts o;
    dsq_model_opts_default(&o);
    o.threads = 2;
    o.lazy = lazy;
    dsq_diag d;
    dsq_diag_clear(&d);
    int rc = dsq_model_open(m, path, &o, &d);
    if (rc < 0) {
        char buf[1400];
        dsq_diag_format(&d, buf, sizeof buf);
        fprintf(stderr, "open %s: %s\n", path, buf);
    }
    return rc;
}

/* the linears of a loaded layer, in a fixed order */
static int layer_linears(const dsq_model *m, const dsq_layer *ly, const dsq_linear **out, int cap)
{
    const dsq_linear *ls[] = { &ly->q, &ly->k, &ly->v, &ly->o, &ly->q_a, &ly->q_b, &ly->kv_a, &ly->kv_b,
                               &ly->mlp.gate, &ly->mlp.up, &ly->mlp.down, &ly->router,
                               &ly->shared.gate, &ly->shared.up, &ly->shared.down };
    int n = 0;
    for (size_t i = 0; i < sizeof ls / sizeof *ls && n < cap; i++) out[n++] = ls[i];
    for (int64_t e = 0; ly->experts && e < dsq_model_get_config(m)->n_routed_experts && n + 3 <= cap; e++) {
        out[n++] = &ly->experts[e].gate;
        out[n++] = &ly->experts[e].up;
        out[n++] = &ly->experts[e].down;
    }
    return n;
}

/* --compare-dsq EXPORT DSQ TOL: every linear's dequantized weight in the export
 * equals the .dsq's within relative TOL (the scale dtype's rounding); prints the
 * max relative and absolute differences. Exit 1 beyond TOL or on a scheme
 * mismatch of a quantized linear. */
static int compare_dsq(const char *exp_dir, const char *dsq, double tol)
{
    dsq_model *a = NULL, *b = NULL;
    if (open_model(exp_dir, 0, &a) < 0 || open_model(dsq, 0, &b) < 0) {
        dsq_model_free(a);
        dsq_model_free(b);
        return 1;
    }
    double max_rel = 0, max_abs = 0;
    long bad = 0, nlin = 0, nw = 0;
    const dsq_weights *wa = dsq_model_weights(a), *wb = dsq_model_weights(b);
    for (int64_t l = 0; l < dsq_model_get_config(a)->num_hidden_layers; l++) {
        const dsq_linear *la[1024], *lb[1024];
        int na = layer_linears(a, &wa->layers[l], la, 1024), nb = layer_linears(b, &wb->layers[l], lb, 1024);
        for (int i = 0; i < na && i < nb; i++) {
            const dsq_qview *va = &la[i]->w, *vb = &lb[i]->w;
            if (!va->scheme || !vb->scheme) continue;
            int qa = va->scheme->id >= DSQ_SCHEME_W8A8_DYNAMIC, qb = vb->scheme->id >= DSQ_SCHEME_W8A8_DYNAMIC;
            /* Ascend has no static W8A8 MoE scheme: w8a8 experts are exported as
             * W8A8_DYNAMIC with the same int8 codes and scales */
            int w8pair = (va->scheme->id == DSQ_SCHEME_W8A8 || va->scheme->id == DSQ_SCHEME_W8A8_DYNAMIC) &&
                         (vb->scheme->id == DSQ_SCHEME_W8A8 || vb->scheme->id == DSQ_SCHEME_W8A8_DYNAMIC);
            if (qa && qb && va->scheme->id != vb->scheme->id && !w8pair) {
                fprintf(stderr, "FAIL: %s: export %s vs .dsq %s\n", la[i]->name, va->scheme->name, vb->scheme->name);
                bad++;
                continue;
            }
            if (qa != qb) { if (qb) fprintf(stderr, "note: %s: float in the export, %s in the .dsq\n", la[i]->name, vb->scheme->name); continue; }
            if (!qa) continue;
            nlin++;
            int64_t R = va->shape.rows, C = va->shape.cols;
            float *x = malloc((size_t)C * sizeof *x), *y = malloc((size_t)C * sizeof *y);
            for (int64_t r = 0; r < R; r++) {
                va->scheme->dequantize(va, r, 1, x);
                vb->scheme->dequantize(vb, r, 1, y);
                for (int64_t c = 0; c < C; c++) {
                    double d = fabs((double)x[c] - (double)y[c]), rel = y[c] != 0 ? d / fabs(y[c]) : (d > 0 ? 1 : 0);
                    if (d > max_abs) max_abs = d;
                    if (rel > max_rel) max_rel = rel;
                    if (rel > tol) {
                        if (bad < 5) fprintf(stderr, "FAIL: %s[%lld][%lld]: export %g vs .dsq %g\n", la[i]->name, (long long)r, (long long)c, x[c], y[c]);
                        bad++;
                    }
                    nw++;
                }
            }
            free(x);
            free(y);
        }
    }
    printf("%s vs %s: %ld quantized linears, %ld weights, max rel diff %.3e, max abs diff %.3e (tolerance %.3e)\n",
           exp_dir, dsq, nlin, nw, max_rel, max_abs, tol);
    dsq_model_free(a);
    dsq_model_free(b);
    return bad || !nlin ? 1 : 0;
}

/* --lazy-check DIR: logits of an eager and a lazy (calibration-style) load of
 * the same model agree bit for bit. */
static int lazy_check(const char *dir)
{
    dsq_model *m[2] = { NULL, NULL };
    float *lg[2] = { NULL, NULL };
    int32_t toks[24];
    for (int i = 0; i < 24; i++) toks[i] = (int32_t)(1 + (i * 37) % 200);
    int rc = 0;
    for (int k = 0; k < 2 && rc == 0; k++) {
        rc = open_model(dir, k, &m[k]);
        if (rc < 0) break;
        int64_t V = dsq_model_get_config(m[k])->vocab_size;
        lg[k] = malloc((size_t)(24 * V) * sizeof(float));
        dsq_state *s = dsq_state_create(m[k], 1, 64);
        dsq_diag d;
        dsq_diag_clear(&d);
        rc = lg[k] && s ? dsq_forward(m[k], s, 0, toks, 24, lg[k], 0, &d) : DSQ_ERR_NOMEM;
        dsq_state_free(s);
    }
    int out = 1;
    if (rc == 0) {
        size_t n = (size_t)(24 * dsq_model_get_config(m[0])->vocab_size);
        out = memcmp(lg[0], lg[1], n * sizeof(float)) != 0;
        printf("%s: eager and lazy logits %s\n", dir, out ? "DIFFER" : "identical");
    }
    for (int k = 0; k < 2; k++) { free(lg[k]); dsq_model_free(m[k]); }
    return out;
}

int main(int argc, char **argv)
{
    if (argc == 5 && !strcmp(argv[1], "--compare-dsq")) return compare_dsq(argv[2], argv[3], atof(argv[4]));
    if (argc == 3 && !strcmp(argv[1], "--lazy-check")) return lazy_check(argv[2]);
    if (argc == 4 && !strcmp(argv[1], "--dump")) return dump(argv[2], argv[3]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ascend_w8a8_dynamic),
        cmocka_unit_test(test_ascend_hostile),
        cmocka_unit_test(test_ascend_w8a8_static),
        cmocka_unit_test(test_ascend_w4a8),
        cmocka_unit_test(test_awq),
        cmocka_unit_test(test_ct),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
