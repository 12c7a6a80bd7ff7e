/* test_export.c - ds-quant --format exports checked against the contracts
 * of docs/serving-exports.md (its AscendV1, AutoAWQ GEMM and
 * compressed-tensors sections), independently of the writer:
 * each exported tensor is decoded here from the format's own rules (AWQ
 * order, ascend int4 pairs along N, compressed-tensors sequential nibbles
 * and dim-0 zero points, ...) and compared with the .dsq's dequantized
 * blob of the same conversion; names, dtypes, shapes, description entries,
 * config keys and SHA256SUMS are checked too. Also: refusals write
 * nothing, an interrupted export resumed is byte-identical.
 * Uses samples/tiny-dsv3 (skipped when absent). */
#include "dsq_test.h"
#include "synth_ckpt.h"

#include "calib.h"
#include "container_set.h"
#include "convert.h"
#include "dsq_file.h"
#include "dsq_mem.h"
#include "dsq_sha256.h"
#include "export.h"
#include "export_read.h"
#include "recipe.h"
#include "safetensors.h"
#include "scheme.h"

#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MODEL "samples/tiny-dsv3"
static const char *g_model = MODEL;

static char *g_dir;

static int have_sample(void)
{
    if (dsq_path_exists(MODEL "/config.json")) return 1;
    fprintf(stderr, "skip: " MODEL " absent (samples/make_samples.sh)\n");
    return 0;
}

typedef struct xcase {
    const char *fmt, *scheme, *preset;
    int group;
    const char *keep;
    int calib;
} xcase;

static volatile int g_cancel;
static uint64_t g_stream;   /* nonzero: stream tensors above this many bytes */
static size_t g_stop_after;

static void on_prog(void *ctx, const dsq_convert_progress *p)
{
    (void)ctx;
    if (g_stop_after && p->tensors_done >= g_stop_after) g_cancel = 1;
}

static int target(void *ctx, const char *name, int64_t rows, int64_t cols, const dsq_scheme **sc, int32_t *gs)
{
    dsq_plan_entry e;
    int64_t shape[2] = { rows, cols };
    int rc = dsq_recipe_decide(ctx, name, DSQ_DTYPE_BF16, 2, shape, 0, &e, NULL);
    if (rc < 0) return rc;
    *sc = e.kept ? NULL : e.scheme;
    *gs = e.qshape.group_size;
    return DSQ_OK;
}

/* Convert MODEL with the case's recipe to out (format NULL: .dsq). */
static int run(const xcase *c, const char *format, const char *out, uint64_t shard, int resume, dsq_diag *d)
{
    dsq_recipe r;
    int rc = c->preset ? dsq_recipe_init_preset(&r, c->preset, d) : dsq_recipe_init_ex(&r, c->scheme, c->calib, d);
    assert_int_equal(rc, DSQ_OK);
    r.group_size = c->group;
    r.calibrated = c->calib;
    if (c->keep) assert_int_equal(dsq_recipe_add_keep(&r, c->keep, d), DSQ_OK);
    dsq_calib_result *cres = NULL;
    dsq_convert_opts o;
    dsq_convert_opts_init(&o);
    if (c->calib) {
        dsq_calib_opts co;
        dsq_calib_opts_init(&co);
        co.calib = "samples/data/calib.txt";
        co.data.n_samples = 4;
        co.data.seqlen = 64;
        co.scheme = c->scheme;
        co.group_size = c->group;
        co.target = target;
        co.target_ctx = &r;
        co.target_id = c->scheme;
        co.threads = 2;
        assert_int_equal(dsq_calib_run(g_model, &co, &cres, NULL, NULL, NULL, d), DSQ_OK);
        o.calib = cres;
    }
    o.input = g_model;
    o.output = out;
    o.recipe = &r;
    o.threads = 2;
    o.export_format = format;
    o.shard_bytes = shard;
    o.resume = resume;
    o.cancel = &g_cancel;
    if (g_stream) {
        o.stream_bytes = g_stream;
        o.piece_bytes = g_stream / 4;
    }
    o.progress = on_prog;
    dsq_convert *cv = NULL;
    rc = dsq_convert_prepare(&cv, &o, d);
    if (rc == DSQ_OK) {
        dsq_convert_summary s;
        rc = dsq_convert_run(cv, &s, d);
    }
    dsq_convert_free(cv);
    dsq_recipe_release(&r);
    dsq_calib_result_free(cres);
    return rc;
}

/* ---- reading the export ---- */

static const dsq_st_tensor *need(const dsq_st_model *m, const char *mod, const char *suf, enum dsq_dtype dt,
                                 int64_t d0, int64_t d1)
{
    char name[512];
    snprintf(name, sizeof name, "%s%s", mod, suf);
    const dsq_st_tensor *t = dsq_st_find(m, name);
    if (!t) fail_msg("missing tensor %s", name);
    if (t->dtype != dt) fail_msg("%s: dtype %s, want %s", name, dsq_dtype_name(t->dtype), dsq_dtype_name(dt));
    if (d1 < 0) {
        if (t->ndim != 1 || t->shape[0] != d0) fail_msg("%s: shape, want [%lld]", name, (long long)d0);
    } else if (t->ndim != 2 || t->shape[0] != d0 || t->shape[1] != d1) {
        fail_msg("%s: shape [%lld, %lld], want [%lld, %lld]", name, (long long)t->shape[0],
                 (long long)(t->ndim > 1 ? t->shape[1] : 0), (long long)d0, (long long)d1);
    }
    return t;
}

static float getf(const dsq_st_tensor *t, size_t i)
{
    if (t->dtype == DSQ_DTYPE_F32) { float f; memcpy(&f, t->data + 4 * i, 4); return f; }
    uint16_t h;
    memcpy(&h, t->data + 2 * i, 2);
    return t->dtype == DSQ_DTYPE_F16 ? dsq_f16_to_f32(h) : dsq_bf16_to_f32(h);
}
static int32_t geti32(const dsq_st_tensor *t, size_t i) { int32_t v; memcpy(&v, t->data + 4 * i, 4); return v; }
static int64_t geti64(const dsq_st_tensor *t, size_t i) { int64_t v; memcpy(&v, t->data + 8 * i, 8); return v; }
static int nib(uint32_t w, int i) { return (int)((w >> (4 * i)) & 0xF); }

static double g_max_rel;
static size_t g_mtp_seen;  /* MTP-layer tensors in the last .dsq checked */   /* worst |w_export - w_dsq| / (|scale| step) seen */

/* w (export's dequantized value) vs ref (the .dsq's): within `tol`. */
static void near(const char *name, int64_t n, int64_t k, double w, double ref, double tol)
{
    if (fabs(w - ref) > tol + 1e-12)
        fail_msg("%s [%lld, %lld]: export %.9g vs .dsq %.9g (tol %.3g)", name, (long long)n, (long long)k, w, ref, tol);
}

static int ends(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

static json_object *load_json(const char *dir, const char *name)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    json_object *o = json_object_from_file(p);
    if (!o) fail_msg("cannot read %s", p);
    return o;
}

static const char *jstr(json_object *o, const char *k)
{
    json_object *v;
    return json_object_object_get_ex(o, k, &v) && json_object_is_type(v, json_type_string) ? json_object_get_string(v)
                                                                                          : NULL;
}

/* Check one quantized .dsq tensor against its export tensors. */
static size_t check_quant(const char *fmt, const dsq_st_model *m, json_object *desc, const char *name,
                          const dsq_qview *v, const float *ref, enum dsq_dtype sdt)
{
    char mod[512];
    snprintf(mod, sizeof mod, "%.*s", (int)(strlen(name) - 7), name);
    const int64_t N = v->shape.rows, K = v->shape.cols, G = v->layout.ngroups, gs = v->layout.gsize;
    size_t used = 0;
    if (!strcmp(fmt, "ascend")) {
        char wn[600];
        snprintf(wn, sizeof wn, "%s.weight", mod);
        const char *type = jstr(desc, wn);
        if (!type) fail_msg("%s: no description entry", wn);
        if (!strcmp(type, "W8A8_DYNAMIC") || !strcmp(type, "W4A8_DYNAMIC")) {
            int w4 = !strcmp(type, "W4A8_DYNAMIC");
            const dsq_st_tensor *w = need(m, mod, ".weight", DSQ_DTYPE_I8, w4 ? N / 2 : N, K);
            const dsq_st_tensor *s = need(m, mod, ".weight_scale", DSQ_DTYPE_F32, N, 1);
            const dsq_st_tensor *o = need(m, mod, ".weight_offset", DSQ_DTYPE_F32, N, 1);
            used = 3;
            for (int64_t n = 0; n < N; n++) {
                assert_true(getf(o, (size_t)n) == 0.0f);
                double rowsum = 0;
                for (int64_t k = 0; k < K; k++) {
                    int q;
                    if (w4) {
                        uint8_t b = w->data[(size_t)(n / 2) * (size_t)K + (size_t)k];
                        int nb = n % 2 ? b >> 4 : b & 0xF;   /* low nibble: even row */
                        q = nb >= 8 ? nb - 16 : nb;          /* two's complement int4 */
                    } else {
                        q = (int8_t)w->data[(size_t)n * (size_t)K + (size_t)k];
                    }
                    float wv = (float)q * getf(s, (size_t)n);
                    near(wn, n, k, wv, ref[n * K + k], 0);
                    rowsum += (double)(float)((float)q * getf(s, (size_t)n));
                }
                if (w4) {
                    char sbn[600];
                    snprintf(sbn, sizeof sbn, "%s.scale_bias", mod);
                    const dsq_st_tensor *sb = dsq_st_find(m, sbn);
                    if (!sb) fail_msg("missing %s", sbn);
                    int64_t parts = ends(mod, "down_proj") ? 16 : 1;
                    assert_int_equal(sb->shape[1], parts);
                    double tot = 0;
                    for (int64_t p = 0; p < parts; p++) tot += getf(sb, (size_t)(n * parts + p));
                    near(sbn, n, 0, tot, 8.0 * rowsum, 1e-4 * (fabs(8.0 * rowsum) + 1));
                }
            }
            if (w4) used++;
        } else if (!strcmp(type, "W8A8")) {
            const dsq_st_tensor *w = need(m, mod, ".weight", DSQ_DTYPE_I8, N, K);
            const dsq_st_tensor *is = need(m, mod, ".input_scale", DSQ_DTYPE_F32, 1, -1);
            const dsq_st_tensor *io = need(m, mod, ".input_offset", DSQ_DTYPE_F32, 1, -1);
            const dsq_st_tensor *ds = need(m, mod, ".deq_scale", sdt == DSQ_DTYPE_F16 ? DSQ_DTYPE_I64 : DSQ_DTYPE_F32,
                                           N, -1);
            const dsq_st_tensor *qb = need(m, mod, ".quant_bias", DSQ_DTYPE_I32, N, -1);
            used = 5;
            float off = getf(io, 0), sx = getf(is, 0);
            assert_true(off == rintf(off) && off >= -128 && off <= 127);
            assert_true(sx == v->act_scale && off == (float)v->act_offset);
            for (int64_t n = 0; n < N; n++) {
                float dq;
                if (ds->dtype == DSQ_DTYPE_I64) {
                    int32_t b = (int32_t)geti64(ds, (size_t)n);
                    memcpy(&dq, &b, 4);
                } else {
                    dq = getf(ds, (size_t)n);
                }
                int64_t rs = 0;
                for (int64_t k = 0; k < K; k++) {
                    int q = (int8_t)w->data[(size_t)n * (size_t)K + (size_t)k];
                    rs += q;
                    /* effective weight q * deq_scale / input_scale */
                    near(mod, n, k, (double)q * dq / sx, ref[n * K + k], 1e-6 * fabs(ref[n * K + k]) + 1e-12);
                }
                assert_int_equal(geti32(qb, (size_t)n), (int32_t)(-off * (float)rs));
            }
        } else {
            fail_msg("%s: unexpected type %s", wn, type);
        }
    } else if (!strcmp(fmt, "awq")) {
        static const int REV[8] = { 0, 4, 1, 5, 2, 6, 3, 7 };
        const dsq_st_tensor *qw = need(m, mod, ".qweight", DSQ_DTYPE_I32, K, N / 8);
        const dsq_st_tensor *qz = need(m, mod, ".qzeros", DSQ_DTYPE_I32, G, N / 8);
        const dsq_st_tensor *sc = need(m, mod, ".scales", DSQ_DTYPE_F16, G, N);
        used = 3;
        for (int64_t k = 0; k < K; k++)
            for (int64_t n = 0; n < N; n++) {
                int64_t g = k / gs;
                int q = nib((uint32_t)geti32(qw, (size_t)(k * (N / 8) + n / 8)), REV[n % 8]);
                int z = nib((uint32_t)geti32(qz, (size_t)(g * (N / 8) + n / 8)), REV[n % 8]);
                float s16 = getf(sc, (size_t)(g * N + n)), s = v->scales[n * G + g];
                double w = (double)(q - z) * s16;
                /* the export's code is rounded against s16, the .dsq's
                 * against s: one step apart at most (test_exact_against_source
                 * holds the export to half a step of the source) */
                near(mod, n, k, w, ref[n * K + k],
                     s16 * 1.0001 + fabs((double)(q - z)) * fabs(s16 - s) * 1.0001 + fabs(ref[n * K + k]) * 1.2e-7);
                if (s > 0 && fabs(w - ref[n * K + k]) / s > g_max_rel) g_max_rel = fabs(w - ref[n * K + k]) / s;
            }
    } else {
        int packed = v->scheme->id == DSQ_SCHEME_AWQ_W4A16;
        const dsq_st_tensor *sc = need(m, mod, ".weight_scale", sdt, N, G);
        const dsq_st_tensor *w, *zp = NULL;
        if (packed) {
            w = need(m, mod, ".weight_packed", DSQ_DTYPE_I32, N, K / 8);
            zp = need(m, mod, ".weight_zero_point", DSQ_DTYPE_I32, (N + 7) / 8, G);
            const dsq_st_tensor *sh = need(m, mod, ".weight_shape", DSQ_DTYPE_I64, 2, -1);
            assert_true(geti64(sh, 0) == N && geti64(sh, 1) == K);
            used = 4;
        } else {
            w = need(m, mod, ".weight", DSQ_DTYPE_I8, N, K);
            used = 2;
        }
        for (int64_t n = 0; n < N; n++)
            for (int64_t k = 0; k < K; k++) {
                int64_t g = k / gs;
                int q, z = 0;
                if (packed) {
                    q = nib((uint32_t)geti32(w, (size_t)(n * (K / 8) + k / 8)), (int)(k % 8)) - 8;
                    z = nib((uint32_t)geti32(zp, (size_t)((n / 8) * G + g)), (int)(n % 8)) - 8;
                } else {
                    q = (int8_t)w->data[(size_t)n * (size_t)K + (size_t)k];
                    if (v->scheme->id == DSQ_SCHEME_W4A8) assert_true(q >= -8 && q <= 7);
                }
                float s = v->scales[n * G + g], sr = getf(sc, (size_t)(n * G + g));
                double wv = (double)(q - z) * sr;
                /* codes rounded against sr may be one step from the .dsq's */
                double one = sr != s ? sr * 1.0001 : 0.0;
                near(mod, n, k, wv, ref[n * K + k],
                     one + fabs((double)(q - z)) * fabs(sr - s) * 1.0001 + fabs(ref[n * K + k]) * 1.2e-7);
                if (s > 0 && fabs(wv - ref[n * K + k]) / s > g_max_rel) g_max_rel = fabs(wv - ref[n * K + k]) / s;
            }
    }
    return used;
}

static void check_sums(const char *dir)
{
    char p[1024], *txt = NULL;
    size_t len;
    snprintf(p, sizeof p, "%s/SHA256SUMS", dir);
    assert_int_equal(dsq_read_file(p, 1 << 20, &txt, &len, NULL), DSQ_OK);
    int lines = 0;
    for (char *line = strtok(txt, "\n"); line; line = strtok(NULL, "\n"), lines++) {
        assert_true(strlen(line) > 66 && line[64] == ' ' && line[65] == ' ');
        snprintf(p, sizeof p, "%s/%s", dir, line + 66);
        dsq_map mp;
        assert_int_equal(dsq_map_open(&mp, p, NULL), DSQ_OK);
        uint8_t h[DSQ_SHA256_LEN];
        char hex[2 * DSQ_SHA256_LEN + 1];
        dsq_sha256_buf(mp.data, (size_t)mp.size, h);
        dsq_map_close(&mp);
        dsq_sha256_hex(h, hex);
        if (memcmp(hex, line, 64) != 0) fail_msg("SHA256SUMS: %s does not match", line + 66);
    }
    assert_true(lines >= 3);
    free(txt);
}

/* The whole export directory against the .dsq of the same conversion. */
static void check_export(const char *fmt, const char *dsq, const char *dir)
{
    dsq_ctr_set *set = NULL;
    dsq_st_model *m = NULL;
    dsq_diag d;
    assert_int_equal(dsq_ctr_set_open(&set, dsq, &d), DSQ_OK);
    if (dsq_st_open(&m, dir, &d) != DSQ_OK) fail_msg("export does not open as safetensors: %s", d.msg);
    json_object *cfg = load_json(dir, "config.json"), *desc = NULL, *q = NULL;
    const char *td = jstr(cfg, "torch_dtype");
    enum dsq_dtype mdt = td && !strcmp(td, "float16") ? DSQ_DTYPE_F16 : td && !strcmp(td, "float32") ? DSQ_DTYPE_F32
                                                                                                    : DSQ_DTYPE_BF16;
    int has_q = json_object_object_get_ex(cfg, "quantization_config", &q);
    if (!strcmp(fmt, "ascend")) {
        assert_false(has_q);   /* ascendv1.py:234-235 removes it */
        desc = load_json(dir, "quant_model_description.json");
        assert_string_equal(jstr(desc, "version"), "1.0.0");
        assert_non_null(jstr(desc, "model_quant_type"));
        json_object *gsz;
        assert_true(json_object_object_get_ex(desc, "group_size", &gsz) && json_object_get_int(gsz) == 0);
        /* every tensor has an entry */
        for (size_t i = 0; i < dsq_st_count(m); i++)
            if (!jstr(desc, dsq_st_get(m, i)->name)) fail_msg("no description entry for %s", dsq_st_get(m, i)->name);
    } else {
        assert_true(has_q);
        const char *qm = jstr(q, "quant_method");
        assert_string_equal(qm, !strcmp(fmt, "awq") ? "awq" : "compressed-tensors");
        if (!strcmp(fmt, "awq")) {
            assert_string_equal(jstr(q, "version"), "gemm");
            assert_int_equal(mdt, DSQ_DTYPE_F16);
            /* substring rule: no entry may match a quantized linear, and
             * every float decoder linear must be matched by one */
            json_object *nc;
            json_object_object_get_ex(q, "modules_to_not_convert", &nc);
            for (size_t i = 0; i < dsq_st_count(m); i++) {
                const char *tn = dsq_st_get(m, i)->name;
                int quantized = ends(tn, ".qweight");
                int float_linear = ends(tn, "_proj.weight") && strstr(tn, "model.layers.");
                if (!quantized && !float_linear) continue;
                char mod2[512];
                snprintf(mod2, sizeof mod2, "%.*s", (int)(strlen(tn) - (quantized ? 8 : 7)), tn);
                int hit = 0;
                for (size_t k = 0; nc && k < json_object_array_length(nc); k++)
                    hit |= strstr(mod2, json_object_get_string(json_object_array_get_idx(nc, k))) != NULL;
                if (quantized && hit) fail_msg("modules_to_not_convert matches quantized %s", mod2);
                if (float_linear && !hit) fail_msg("float linear %s not in modules_to_not_convert", mod2);
            }
        } else {
            json_object *groups;
            assert_true(json_object_object_get_ex(q, "config_groups", &groups));
            json_object_object_foreach(groups, gk, gv) {
                (void)gk;
                json_object *wts;
                assert_true(json_object_object_get_ex(gv, "weights", &wts));
                assert_false(json_object_object_get_ex(wts, "scale_dtype", NULL));
                assert_false(json_object_object_get_ex(wts, "zp_dtype", NULL));
            }
        }
    }
    size_t expected = 0;
    json_object *nhl;
    char mtp_prefix[64] = "\x01";
    if (json_object_object_get_ex(cfg, "num_hidden_layers", &nhl))
        snprintf(mtp_prefix, sizeof mtp_prefix, "model.layers.%d.", json_object_get_int(nhl));
    g_mtp_seen = 0;
    for (size_t s = 0; s < dsq_ctr_set_shards(set); s++) {
        dsq_ctr *r = dsq_ctr_set_shard(set, s);
        for (size_t i = 0; i < dsq_ctr_count(r); i++) {
            const dsq_ctr_tensor_info *t = dsq_ctr_get(r, i);
            int mtp = !strncmp(t->name, mtp_prefix, strlen(mtp_prefix));
            g_mtp_seen += mtp;
            if (mtp && strcmp(fmt, "ascend") != 0) {
                /* awq / compressed-tensors drop the MTP layer */
                char pre[80];
                snprintf(pre, sizeof pre, "%s", mtp_prefix);
                for (size_t k = 0; k < dsq_st_count(m); k++)
                    if (!strncmp(dsq_st_get(m, k)->name, pre, strlen(pre)))
                        fail_msg("%s export holds MTP tensor %s", fmt, dsq_st_get(m, k)->name);
                continue;
            }
            uint8_t *blob = malloc(t->raw_size);
            assert_non_null(blob);
            assert_int_equal(dsq_ctr_read(r, t, blob, t->raw_size, &d), DSQ_OK);
            dsq_qview v;
            assert_int_equal(dsq_qview_init(&v, NULL, NULL, blob, t->raw_size, &d), DSQ_OK);
            float *ref = malloc((size_t)(v.shape.rows * v.shape.cols) * sizeof *ref);
            assert_non_null(ref);
            v.scheme->dequantize(&v, 0, v.shape.rows, ref);
            const dsq_st_tensor *ft = dsq_st_find(m, t->name);
            if (ft && ft->dtype != DSQ_DTYPE_I8 && ft->dtype != DSQ_DTYPE_I32) {
                /* float entry: the dsq values, rounded to the export dtype */
                assert_int_equal(ft->numel, (uint64_t)(v.shape.rows * v.shape.cols));
                double ulp = ft->dtype == DSQ_DTYPE_F32 ? 0 : ft->dtype == DSQ_DTYPE_F16 ? 1.0 / 2048 : 1.0 / 256;
                /* a quantized linear the target holds in float (AscendV1's
                 * kv_b_proj) is the source weight: within a step of the
                 * .dsq's, half a step where no clip search ran
                 * (test_kept_from_source checks the bytes) */
                int from_src = !mtp && v.scheme->weight_bits <= 8 && !strcmp(fmt, "ascend") && ends(t->name, ".kv_b_proj.weight");
                for (uint64_t e = 0; e < ft->numel; e++) {
                    double step = from_src ? v.scales[(int64_t)e / v.shape.cols * v.layout.ngroups +
                                                            (int64_t)e % v.shape.cols / v.layout.gsize] * 1.0001 : 0;
                    near(t->name, (int64_t)e, 0, getf(ft, (size_t)e), ref[e], step + fabs(ref[e]) * ulp + 6e-8 * (ulp > 0));
                }
                if (desc) assert_string_equal(jstr(desc, t->name), "FLOAT");
                if (mtp && ft->dtype == DSQ_DTYPE_I8) fail_msg("MTP tensor %s exported quantized", t->name);
                if (!strcmp(fmt, "awq")) assert_int_equal(ft->dtype, DSQ_DTYPE_F16);
                expected++;
            } else {
                assert_true(v.scheme->weight_bits <= 8);
                if (mtp) fail_msg("MTP tensor %s is not a FLOAT entry in the ascend export", t->name);
                expected += check_quant(fmt, m, desc, t->name, &v, ref, mdt);
            }
            free(ref);
            free(blob);
        }
    }
    /* nothing in the export that the .dsq does not explain */
    assert_int_equal(dsq_st_count(m), expected);
    check_sums(dir);
    json_object_put(cfg);
    if (desc) json_object_put(desc);
    dsq_st_close(m);
    dsq_ctr_set_close(set);
}

static void round_trip(const xcase *c)
{
    char dsq[512], dir[512];
    snprintf(dsq, sizeof dsq, "%s/m.dsq", g_dir);
    snprintf(dir, sizeof dir, "%s/x-%s", g_dir, c->fmt);
    dsq_diag d;
    g_max_rel = 0;
    if (run(c, NULL, dsq, 0, 0, &d) != DSQ_OK) fail_msg("dsq conversion: %s", d.msg);
    if (run(c, c->fmt, dir, 300000, 0, &d) != DSQ_OK) fail_msg("export %s: %s", c->fmt, d.msg);
    check_export(c->fmt, dsq, dir);
    fprintf(stderr, "  %s %s%s: max |w_export - w_dsq| / scale = %.3g\n", c->fmt,
            c->preset ? c->preset : c->scheme, c->calib ? " (calibrated)" : "", g_max_rel);
    dsq_test_rmtree(dir);
    unlink(dsq);
}

static void test_round_trips(void **state)
{
    (void)state;
    if (!have_sample()) { skip(); return; }
    static const xcase cases[] = {
        { "ascend", "w8a8-dynamic", NULL, 0, NULL, 0 },
        { "ascend", NULL, "deepseek-w4a8", 0, NULL, 0 },
        { "awq", "awq-w4a16", NULL, 64, "q_b_proj", 0 },
        { "awq", "awq-w4a16", NULL, 64, "q_b_proj|mlp\\.experts\\.", 0 },
        { "compressed-tensors", "awq-w4a16", NULL, 64, "q_b_proj", 0 },
        { "compressed-tensors", "w8a8-dynamic", NULL, 0, NULL, 0 },
        { "compressed-tensors", "w4a8", NULL, 0, NULL, 0 },
        { "compressed-tensors", NULL, "deepseek-w4a8", 0, NULL, 0 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) round_trip(&cases[i]);
    if (dsq_path_exists("samples/data/calib.txt")) {
        static const xcase cal[] = {
            { "ascend", "w8a8", NULL, 0, NULL, 1 },
            { "awq", "awq-w4a16", NULL, 64, "q_b_proj", 1 },
        };
        for (size_t i = 0; i < 2; i++) round_trip(&cal[i]);
    }
}

/* Refused combinations: DSQ_ERR_UNSUPPORTED, nothing created. */
static void test_refusals(void **state)
{
    (void)state;
    if (!have_sample()) { skip(); return; }
    static const struct { xcase c; const char *needle; } bad[] = {
        { { "ascend", "w4a8", NULL, 0, NULL, 0 }, "--recipe deepseek-w4a8" },
        { { "ascend", "awq-w4a16", NULL, 128, NULL, 0 }, "ascend has no" },
        { { "ascend", NULL, "deepseek-w4a8", 64, NULL, 0 }, "--group-size 0" },
        { { "awq", "w8a8-dynamic", NULL, 0, NULL, 0 }, "awq-w4a16" },
        { { "awq", "awq-w4a16", NULL, 64, NULL, 0 }, "--group-size" },
        { { "awq", "awq-w4a16", NULL, 0, NULL, 0 }, "per-channel AWQ" },
        { { "compressed-tensors", "awq-w4a16", NULL, 64, NULL, 0 }, "group size" },
        { { "ascend", "w8a8-dynamic", NULL, 0, "kv_a_proj_with_mqa", 0 }, "fused pair" },
        { { "awq", "awq-w4a16", NULL, 64, "self_attn.q_a_proj|q_b_proj", 0 }, "fused pair" },
    };
    char dir[512];
    snprintf(dir, sizeof dir, "%s/refused", g_dir);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        dsq_diag d;
        dsq_diag_clear(&d);
        int rc = run(&bad[i].c, bad[i].c.fmt, dir, 0, 0, &d);
        if (rc != DSQ_ERR_UNSUPPORTED || !strstr(d.msg, bad[i].needle))
            fail_msg("case %zu: rc %d, message '%s' (want '%s')", i, rc, d.msg, bad[i].needle);
        assert_false(dsq_path_exists(dir));
        char tmp[600];
        snprintf(tmp, sizeof tmp, "%s/.refused.partial", g_dir);
        assert_false(dsq_path_exists(tmp));
    }
}

/* AWQ stores float tensors and scales as F16: values beyond 65504 are
 * refused naming the tensor, and nothing is left behind. */
static void f16_case(const char *name, uint32_t role, const dsq_scheme *sc, int32_t group, float big)
{
    enum { N = 8, K = 64 };
    float w[N * K];
    for (int i = 0; i < N * K; i++) w[i] = (float)((i * 37) % 17 - 8) * 0.01f;
    w[5] = big;
    w[6] = -big;
    dsq_qshape qs;
    assert_int_equal(dsq_qshape_init(&qs, sc, N, K, group), DSQ_OK);
    size_t size;
    assert_int_equal(sc->blob_size(&qs, &size), DSQ_OK);
    uint8_t *blob = calloc(1, size);
    assert_non_null(blob);
    dsq_diag d;
    assert_int_equal(dsq_quantize_tensor(sc, w, &qs, NULL, blob, NULL, &d), DSQ_OK);
    dsq_export_src src;
    memset(&src, 0, sizeof src);
    src.name = name;
    dsq_role_classify(name, 4, &src.role);
    assert_int_equal(src.role.role, role);
    src.scheme = sc;
    src.src_dtype = DSQ_DTYPE_F32;
    src.ndim = 2;
    src.shape[0] = N;
    src.shape[1] = K;
    src.qshape = qs;
    char out[512];
    snprintf(out, sizeof out, "%s/f16", g_dir);
    dsq_export_opts o;
    memset(&o, 0, sizeof o);
    o.format = "awq";
    o.output = out;
    o.meta_json = "{\"config\": {\"torch_dtype\": \"bfloat16\"}}";
    dsq_export *ex = NULL;
    assert_int_equal(dsq_export_open(&ex, &o, &src, 1, &d), DSQ_OK);
    dsq_diag_clear(&d);
    int rc = dsq_export_put(ex, 0, blob, size, &d);
    assert_int_equal(rc, DSQ_ERR_UNSUPPORTED);
    if (strncmp(d.tensor, name, strlen(name) - 7) != 0) fail_msg("diag names '%s', not %s", d.tensor, name);
    assert_non_null(strstr(d.msg, "float16"));
    dsq_export_free(ex, 0);
    assert_false(dsq_path_exists(out));
    char part[600];
    snprintf(part, sizeof part, "%s/.f16.partial", g_dir);
    assert_false(dsq_path_exists(part));
    free(blob);
}

static void test_f16_range(void **state)
{
    (void)state;
    f16_case("model.layers.0.mlp.gate.weight", DSQ_ROLE_ROUTER, dsq_scheme_by_id(DSQ_SCHEME_F32), 0, 1e6f);
    f16_case("model.layers.0.mlp.down_proj.weight", DSQ_ROLE_MLP_LINEAR, dsq_scheme_by_id(DSQ_SCHEME_AWQ_W4A16),
             64, 2e6f);
}

/* A model with an MTP layer (synthetic, tests/fixtures): ascend writes
 * it as FLOAT entries (quantized MTP experts dequantized), awq and
 * compressed-tensors drop it. */
static void test_mtp(void **state)
{
    (void)state;
    dsq_synth_opts so;
    dsq_synth_defaults_tiny(&so);
    char model[512];
    snprintf(model, sizeof model, "%s/synth-mtp", g_dir);
    dsq_diag d;
    assert_int_equal(dsq_synth_write(&so, model, 0, NULL, &d), DSQ_OK);
    g_model = model;
    static const xcase cases[] = {
        { "ascend", NULL, "deepseek-w4a8", 0, NULL, 0 },
        { "ascend", "w8a8-dynamic", NULL, 0, NULL, 0 },
        { "awq", "awq-w4a16", NULL, 64, "q_b_proj", 0 },
        { "compressed-tensors", "w8a8-dynamic", NULL, 0, NULL, 0 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        round_trip(&cases[i]);
        assert_true(g_mtp_seen > 10);
    }
    g_model = MODEL;
    dsq_test_rmtree(model);
}

static int same_tree(const char *a, const char *b)
{
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "diff -r '%s' '%s' >/dev/null 2>&1", a, b);
    return system(cmd) == 0;
}

/* Interrupted after some shards, resumed: the same bytes. */
static void test_resume(void **state)
{
    (void)state;
    if (!have_sample()) { skip(); return; }
    xcase c = { "ascend", NULL, "deepseek-w4a8", 0, NULL, 0 };
    char a[512], b[512], part[512];
    snprintf(a, sizeof a, "%s/ra", g_dir);
    snprintf(b, sizeof b, "%s/rb", g_dir);
    snprintf(part, sizeof part, "%s/.rb.partial", g_dir);
    dsq_diag d;
    assert_int_equal(run(&c, "ascend", a, 200000, 0, &d), DSQ_OK);
    g_stop_after = 60;
    int rc = run(&c, "ascend", b, 200000, 0, &d);
    g_stop_after = 0;
    g_cancel = 0;
    assert_int_equal(rc, DSQ_ERR_INTERRUPTED);
    assert_false(dsq_path_exists(b));
    assert_true(dsq_path_is_dir(part));
    assert_int_equal(run(&c, "ascend", b, 200000, 1, &d), DSQ_OK);
    assert_true(same_tree(a, b));
    assert_false(dsq_path_exists(part));
    /* a resume with other options is refused, not mixed */
    g_stop_after = 60;
    assert_int_equal(run(&c, "ascend", b, 0, 0, &d), DSQ_ERR_EXISTS);
    g_stop_after = 0;
    g_cancel = 0;
    dsq_test_rmtree(a);
    dsq_test_rmtree(b);
}

/* Streamed tensors (row pieces: written piece by piece when the targets
 * are row-local, else gathered) give the same bytes as whole ones. */
static void test_streamed(void **state)
{
    (void)state;
    if (!have_sample()) { skip(); return; }
    static const xcase cases[] = {
        { "compressed-tensors", "w8a8-dynamic", NULL, 0, NULL, 0 },
        { "ascend", NULL, "deepseek-w4a8", 0, NULL, 0 },
        { "awq", "awq-w4a16", NULL, 64, "q_b_proj", 0 },
        { "compressed-tensors", "awq-w4a16", NULL, 0, NULL, 0 },
    };
    char a[512], b[512];
    snprintf(a, sizeof a, "%s/sa", g_dir);
    snprintf(b, sizeof b, "%s/sb", g_dir);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        dsq_diag d;
        assert_int_equal(run(&cases[i], cases[i].fmt, a, 0, 0, &d), DSQ_OK);
        g_stream = 64 << 10;
        int rc = run(&cases[i], cases[i].fmt, b, 0, 0, &d);
        g_stream = 0;
        if (rc != DSQ_OK) fail_msg("streamed %s: %s", cases[i].fmt, d.msg);
        if (!same_tree(a, b)) fail_msg("%s: streamed export differs", cases[i].fmt);
        dsq_test_rmtree(a);
        dsq_test_rmtree(b);
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

/* Exports exact against the source: every quantized linear of a direct
 * export (ds-quant --format F, no calibration), dequantized with the
 * format's own rule (its unpacker) and the scale as stored (BF16 for
 * compressed-tensors, F16 for AutoAWQ), is within half a quantization step
 * of the source weight: the codes are rounded against the stored scale,
 * not the f32 one. A code at either end of the grid may hold a weight
 * beyond it (int4 scales are searched and clip on purpose). */
static double max_steps(const char *dir)
{
    dsq_diag d;
    dsq_export_info *x = NULL;
    dsq_st_model *st = NULL, *src = NULL;
    assert_int_equal(dsq_export_detect(dir, &x, &d), DSQ_OK);
    assert_non_null(x);
    assert_int_equal(dsq_st_open(&st, dir, &d), DSQ_OK);
    assert_int_equal(dsq_st_open(&src, g_model, &d), DSQ_OK);
    double worst = 0;
    size_t nlin = 0;
    for (size_t i = 0; i < dsq_st_count(st); i++) {
        char mod[512], wn[600];
        if (dsq_export_module_of(x, dsq_st_get(st, i), mod, sizeof mod) != 1) continue;
        int64_t rows, cols;
        assert_int_equal(dsq_export_linear_shape(x, st, mod, &rows, &cols, &d), 1);
        uint8_t *blob = NULL;
        size_t size = 0;
        float *bias = NULL;
        if (dsq_export_read_linear(x, st, mod, rows, cols, &blob, &size, &bias, &d) != 1) fail_msg("%s: %s", mod, d.msg);
        const dsq_qblob_header *h = (const dsq_qblob_header *)blob;
        const dsq_scheme *sc = dsq_scheme_by_id(h->scheme_id);
        dsq_qshape qs;
        dsq_qview v;
        assert_int_equal(dsq_qshape_init(&qs, sc, rows, cols, h->group_size), DSQ_OK);
        assert_int_equal(dsq_qview_init(&v, sc, &qs, blob, size, &d), DSQ_OK);
        snprintf(wn, sizeof wn, "%s.weight", mod);
        const dsq_st_tensor *t = dsq_st_find(src, wn);
        assert_non_null(t);
        float *a = malloc(sizeof(float) * (size_t)(rows * cols)), *b = malloc(sizeof(float) * (size_t)(rows * cols));
        assert_true(a && b);
        sc->dequantize(&v, 0, rows, a);
        assert_int_equal(dsq_st_read_rows_f32(src, t, 0, rows, b, &d), DSQ_OK);
        for (int64_t n = 0; n < rows; n++)
            for (int64_t k = 0; k < cols; k++) {
                size_t g = (size_t)(n * v.layout.ngroups + k / v.layout.gsize);
                double step = v.scales[g], z = v.zeros ? v.zeros[g] : 0;
                double q = nearbyint((double)a[n * cols + k] / step) + z, u = (double)b[n * cols + k] / step + z;
                /* a code at the end of the grid holds what lies beyond it
                 * (a searched or clipped scale clips on purpose) */
                if ((q == sc->qmax && u > q) || (q == sc->qmin && u < q)) continue;
                double e = fabs(u - q);
                if (e > worst) worst = e;
            }
        free(a);
        free(b);
        free(blob);
        free(bias);
        nlin++;
    }
    assert_true(nlin > 0);
    dsq_st_close(src);
    dsq_st_close(st);
    dsq_export_info_free(x);
    return worst;
}

static void test_exact_against_source(void **state)
{
    (void)state;
    if (!have_sample()) return;
    g_model = MODEL;
    static const xcase cases[] = {
        { "compressed-tensors", "w8a8-dynamic", NULL, 0, NULL, 0 },
        { "compressed-tensors", "w4a8", NULL, 0, NULL, 0 },
        { "compressed-tensors", "awq-w4a16", NULL, 0, NULL, 0 },
        { "awq", "awq-w4a16", NULL, 64, "q_b_proj", 0 },
        { "ascend", "w8a8-dynamic", NULL, 0, NULL, 0 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char out[512];
        snprintf(out, sizeof out, "%s/exact-%zu", g_dir, i);
        dsq_diag d;
        if (run(&cases[i], cases[i].fmt, out, 0, 0, &d) != DSQ_OK) fail_msg("%s %s: %s", cases[i].fmt, cases[i].scheme, d.msg);
        double w = max_steps(out);
        printf("%s %s: worst |export - source| = %.4f quantization steps\n", cases[i].fmt, cases[i].scheme, w);
        /* half a step, and the f32 rounding of w / s */
        if (!(w <= 0.5 + 1e-4)) fail_msg("%s %s: a weight is %.4f steps from the source", cases[i].fmt, cases[i].scheme, w);
        dsq_test_rmtree(out);
    }
}

/* A quantized linear the target holds in float (AscendV1's kv_b_proj, which
 * vllm-ascend's MLA runs unquantized) is exported as the source's weight,
 * not as the dequantized codes: the bytes equal the source's. */
static void test_kept_from_source(void **state)
{
    (void)state;
    if (!have_sample()) return;
    g_model = MODEL;
    static const xcase c = { "ascend", "w8a8-dynamic", NULL, 0, NULL, 0 };
    char out[512];
    snprintf(out, sizeof out, "%s/kept", g_dir);
    dsq_diag d;
    if (run(&c, "ascend", out, 0, 0, &d) != DSQ_OK) fail_msg("ascend w8a8-dynamic: %s", d.msg);
    dsq_st_model *st = NULL, *src = NULL;
    assert_int_equal(dsq_st_open(&st, out, &d), DSQ_OK);
    assert_int_equal(dsq_st_open(&src, g_model, &d), DSQ_OK);
    json_object *desc = load_json(out, "quant_model_description.json");
    size_t seen = 0;
    for (size_t i = 0; i < dsq_st_count(src); i++) {
        const dsq_st_tensor *s = dsq_st_get(src, i);
        if (!ends(s->name, ".kv_b_proj.weight")) continue;
        const dsq_st_tensor *t = dsq_st_find(st, s->name);
        if (!t) continue;   /* the MTP layer is checked elsewhere */
        const char *ty = jstr(desc, s->name);
        if (!ty || strcmp(ty, "FLOAT")) fail_msg("%s: description %s, want FLOAT", s->name, ty ? ty : "(none)");
        assert_int_equal(t->dtype, s->dtype);
        assert_int_equal(t->nbytes, s->nbytes);
        if (memcmp(t->data, s->data, (size_t)s->nbytes) != 0) fail_msg("%s: not the source's bytes", s->name);
        seen++;
    }
    assert_true(seen > 0);
    json_object_put(desc);
    dsq_st_close(src);
    dsq_st_close(st);
    dsq_test_rmtree(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trips),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_resume),
        cmocka_unit_test(test_f16_range),
        cmocka_unit_test(test_mtp),
        cmocka_unit_test(test_streamed),
        cmocka_unit_test(test_exact_against_source),
        cmocka_unit_test(test_kept_from_source),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
