/* llama2c.c - see llama2c.h. */
#include "llama2c.h"

#include "dsq_mem.h"
#include "st_writer.h"

#include <errno.h>
#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#define AK42_MAGIC 0x616b3432u   /* llama2.c export.py version 1+ files */
#define ROPE_THETA 10000.0
#define ROPE_TOL   1e-3          /* stored tables are float32 cos/sin */

static const char *const header_names[7] = {
    "dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "seq_len"
};

/* ---- layout ------------------------------------------------------------ */

/* Reserve n0*n1*n2 floats at *off; record the array's start in *at. */
static int reserve(uint64_t *off, uint64_t *at, uint64_t n0, uint64_t n1, uint64_t n2,
                   const char *what, const char *path, dsq_diag *d)
{
    uint64_t n, bytes;
    if (dsq_mul_u64(n0, n1, &n) || dsq_mul_u64(n, n2, &n) || dsq_mul_u64(n, 4, &bytes) ||
        *off + bytes < *off)
        return dsq_fail(d, DSQ_ERR_OVERFLOW, path, what, (int64_t)*off,
                        "array size overflows 64 bits");
    *at = *off;
    *off += bytes;
    return DSQ_OK;
}

int dsq_llama2c_parse(const uint8_t *data, uint64_t size, const char *path,
                      dsq_llama2c_config *cfg, dsq_llama2c_layout *lay, dsq_diag *d)
{
    memset(cfg, 0, sizeof *cfg);
    memset(lay, 0, sizeof *lay);
    if (size < 4 || !data)
        return dsq_fail(d, DSQ_ERR_TRUNCATED, path, NULL, (int64_t)size,
                        "file is %llu bytes, shorter than the %d-byte llama2.c header",
                        (unsigned long long)size, DSQ_LLAMA2C_HEADER_BYTES);
    if (dsq_load_u32le(data) == AK42_MAGIC) {
        int32_t version = size >= 8 ? (int32_t)dsq_load_u32le(data + 4) : -1;
        return dsq_fail(d, DSQ_ERR_UNSUPPORTED, path, NULL, 0,
                        "llama2.c versioned export (magic ak42, version %d); only the legacy "
                        "format (export.py --version 0) is supported", (int)version);
    }
    if (size < DSQ_LLAMA2C_HEADER_BYTES)
        return dsq_fail(d, DSQ_ERR_TRUNCATED, path, NULL, (int64_t)size,
                        "file is %llu bytes, shorter than the %d-byte llama2.c header",
                        (unsigned long long)size, DSQ_LLAMA2C_HEADER_BYTES);
    int32_t h[7];
    for (int i = 0; i < 7; i++) h[i] = (int32_t)dsq_load_u32le(data + 4 * i);
    for (int i = 0; i < 7; i++) {
        int bad = i == 5 ? (h[i] == 0 || h[i] == INT32_MIN) : h[i] <= 0;
        if (bad)
            return dsq_fail(d, DSQ_ERR_FORMAT, path, NULL, 4 * i,
                            "header field %s is %d", header_names[i], (int)h[i]);
    }
    cfg->dim = h[0];
    cfg->hidden_dim = h[1];
    cfg->n_layers = h[2];
    cfg->n_heads = h[3];
    cfg->n_kv_heads = h[4];
    cfg->shared_classifier = h[5] > 0;
    cfg->vocab_size = h[5] > 0 ? h[5] : -h[5];
    cfg->seq_len = h[6];
    if (cfg->dim % cfg->n_heads != 0)
        return dsq_fail(d, DSQ_ERR_FORMAT, path, NULL, 12,
                        "dim %d is not a multiple of n_heads %d", (int)cfg->dim, (int)cfg->n_heads);
    int32_t head = cfg->dim / cfg->n_heads;
    if (head % 2 != 0)
        return dsq_fail(d, DSQ_ERR_FORMAT, path, NULL, 12,
                        "head size %d is odd (RoPE rotates pairs)", (int)head);
    if (cfg->n_kv_heads > cfg->n_heads || cfg->n_heads % cfg->n_kv_heads != 0)
        return dsq_fail(d, DSQ_ERR_FORMAT, path, NULL, 16,
                        "n_heads %d is not a multiple of n_kv_heads %d",
                        (int)cfg->n_heads, (int)cfg->n_kv_heads);

    uint64_t dim = (uint64_t)cfg->dim, hid = (uint64_t)cfg->hidden_dim;
    uint64_t L = (uint64_t)cfg->n_layers, V = (uint64_t)cfg->vocab_size;
    uint64_t kv = (uint64_t)cfg->n_kv_heads * (uint64_t)head;
    uint64_t off = DSQ_LLAMA2C_HEADER_BYTES;
    DSQ_TRY(reserve(&off, &lay->emb, V, dim, 1, "tok_embeddings", path, d));
    DSQ_TRY(reserve(&off, &lay->att_norm, L, dim, 1, "attention_norm", path, d));
    DSQ_TRY(reserve(&off, &lay->wq, L, dim, dim, "wq", path, d));
    DSQ_TRY(reserve(&off, &lay->wk, L, kv, dim, "wk", path, d));
    DSQ_TRY(reserve(&off, &lay->wv, L, kv, dim, "wv", path, d));
    DSQ_TRY(reserve(&off, &lay->wo, L, dim, dim, "wo", path, d));
    DSQ_TRY(reserve(&off, &lay->ffn_norm, L, dim, 1, "ffn_norm", path, d));
    DSQ_TRY(reserve(&off, &lay->w1, L, hid, dim, "w1", path, d));
    DSQ_TRY(reserve(&off, &lay->w2, L, dim, hid, "w2", path, d));
    DSQ_TRY(reserve(&off, &lay->w3, L, hid, dim, "w3", path, d));
    DSQ_TRY(reserve(&off, &lay->norm, dim, 1, 1, "norm", path, d));
    DSQ_TRY(reserve(&off, &lay->freq_real, (uint64_t)cfg->seq_len, (uint64_t)head / 2, 1,
                    "freq_cis_real", path, d));
    DSQ_TRY(reserve(&off, &lay->freq_imag, (uint64_t)cfg->seq_len, (uint64_t)head / 2, 1,
                    "freq_cis_imag", path, d));
    if (cfg->shared_classifier) lay->cls = lay->emb;
    else DSQ_TRY(reserve(&off, &lay->cls, V, dim, 1, "output", path, d));
    lay->total = off;
    if (size < off)
        return dsq_fail(d, DSQ_ERR_TRUNCATED, path, NULL, (int64_t)size,
                        "file is %llu bytes but its header declares %llu (%s classifier)",
                        (unsigned long long)size, (unsigned long long)off,
                        cfg->shared_classifier ? "shared" : "unshared");
    if (size > off)
        return dsq_fail(d, DSQ_ERR_FORMAT, path, NULL, (int64_t)off,
                        "%llu trailing bytes after the %llu the header declares (%s classifier)",
                        (unsigned long long)(size - off), (unsigned long long)off,
                        cfg->shared_classifier ? "shared" : "unshared");
    return DSQ_OK;
}

static float load_f32(const uint8_t *p) { return dsq_bits_f32(dsq_load_u32le(p)); }

/* model.py precompute_freqs_cis(head, seq_len) with theta 10000: the stored
 * tables must be that, or config.json would describe another model. */
static int check_rope(const dsq_llama2c *m, dsq_diag *d)
{
    int64_t half = m->cfg.dim / m->cfg.n_heads / 2;
    const uint8_t *re = m->map.data + m->lay.freq_real, *im = m->map.data + m->lay.freq_imag;
    for (int64_t t = 0; t < m->cfg.seq_len; t++) {
        for (int64_t i = 0; i < half; i++) {
            double f = pow(ROPE_THETA, -(double)(2 * i) / (double)(2 * half));
            double c = cos((double)t * f), s = sin((double)t * f);
            size_t k = (size_t)(t * half + i) * 4;
            float rc = load_f32(re + k), rs = load_f32(im + k);
            if (!(fabs(rc - c) <= ROPE_TOL && fabs(rs - s) <= ROPE_TOL)) {
                int imag = !(fabs(rc - c) <= ROPE_TOL);
                return dsq_fail(d, DSQ_ERR_UNSUPPORTED, m->path,
                                imag ? "freq_cis_real" : "freq_cis_imag",
                                (int64_t)((imag ? m->lay.freq_real : m->lay.freq_imag) + k),
                                "stored RoPE table differs from theta %.0f at position %lld, "
                                "pair %lld", ROPE_THETA, (long long)t, (long long)i);
            }
        }
    }
    return DSQ_OK;
}

int dsq_llama2c_open(dsq_llama2c *m, const char *path, dsq_diag *d)
{
    memset(m, 0, sizeof *m);
    m->map.fd = -1;
    m->path = strdup(path);
    if (!m->path) return dsq_fail(d, DSQ_ERR_NOMEM, path, NULL, -1, "out of memory");
    int rc = dsq_map_open(&m->map, path, d);
    if (rc == DSQ_OK)
        rc = dsq_llama2c_parse(m->map.data, m->map.size, path, &m->cfg, &m->lay, d);
    if (rc == DSQ_OK) rc = check_rope(m, d);
    if (rc < 0) dsq_llama2c_close(m);
    return rc;
}

void dsq_llama2c_close(dsq_llama2c *m)
{
    if (!m) return;
    if (m->path) dsq_map_close(&m->map);
    free(m->path);
    memset(m, 0, sizeof *m);
    m->map.fd = -1;
}

/* ---- Hugging Face output ---------------------------------------------- */

void dsq_llama2c_hf_opts_default(dsq_llama2c_hf_opts *o)
{
    memset(o, 0, sizeof *o);
    o->dtype = DSQ_DTYPE_F32;
}

static int tied(const dsq_llama2c *m, const dsq_llama2c_hf_opts *o)
{
    return m->cfg.shared_classifier && !o->untie;
}

/* config.json of the HF Llama the checkpoint becomes. The float fields keep
 * the texts HF writes (json-c would print 1e-05 as 1.0000000000000001e-05). */
int dsq_llama2c_config_json(const dsq_llama2c *m, const dsq_llama2c_hf_opts *o,
                            char **out, dsq_diag *d)
{
    dsq_llama2c_hf_opts def;
    if (!o) { dsq_llama2c_hf_opts_default(&def); o = &def; }
    const dsq_llama2c_config *c = &m->cfg;
    const struct { const char *k; int v; } ints[] = {
        { "vocab_size", c->vocab_size }, { "hidden_size", c->dim }, { "intermediate_size", c->hidden_dim },
        { "num_hidden_layers", c->n_layers }, { "num_attention_heads", c->n_heads },
        { "num_key_value_heads", c->n_kv_heads }, { "head_dim", c->dim / c->n_heads },
        { "max_position_embeddings", c->seq_len },
    };
    int bad = 0;
    json_object *j = json_object_new_object(), *arch = json_object_new_array();
    if (!arch || json_object_array_add(arch, json_object_new_string("LlamaForCausalLM")) != 0) bad = 1;
#define PUT(key, val) do { json_object *v_ = (val); \
        if (!j || json_object_object_add(j, key, v_) != 0) { json_object_put(v_); bad = 1; } } while (0)
    PUT("architectures", arch);
    PUT("model_type", json_object_new_string("llama"));
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) PUT(ints[i].k, json_object_new_int(ints[i].v));
    PUT("hidden_act", json_object_new_string("silu"));
    PUT("rms_norm_eps", json_object_new_double_s(1e-05, "1e-05"));
    PUT("rope_theta", json_object_new_double_s(10000.0, "10000.0"));
    PUT("rope_scaling", NULL);
    PUT("attention_bias", json_object_new_boolean(0));
    PUT("mlp_bias", json_object_new_boolean(0));
    PUT("tie_word_embeddings", json_object_new_boolean(tied(m, o)));
    PUT("bos_token_id", json_object_new_int(1));
    PUT("eos_token_id", json_object_new_int(2));
    PUT("torch_dtype", json_object_new_string(o->dtype == DSQ_DTYPE_BF16 ? "bfloat16" : "float32"));
    PUT("use_cache", json_object_new_boolean(1));
#undef PUT
    const char *t = bad ? NULL : json_object_to_json_string_ext(j, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED);
    char *s = t ? malloc(strlen(t) + 2) : NULL;
    if (s) sprintf(s, "%s\n", t);
    json_object_put(j);
    if (!s) return dsq_fail(d, DSQ_ERR_NOMEM, m->path, NULL, -1, "out of memory");
    *out = s;
    return DSQ_OK;
}

/* One output tensor: rows x cols float32 at src in the checkpoint, rows
 * optionally permuted per head (heads > 0) from interleaved to half-split
 * RoPE order. */
typedef struct out_tensor {
    const dsq_llama2c *m;
    char name[96];
    uint64_t src;
    int64_t rows, cols;   /* a vector is one row */
    int ndim;             /* 1 for norm weights */
    int64_t heads;
    enum dsq_dtype dtype;
} out_tensor;

static int fill_tensor(void *ctx, const char *name, void *dst, uint64_t nbytes, dsq_diag *d)
{
    const out_tensor *t = ctx;
    const uint8_t *base = t->m->map.data + t->src;
    size_t esz = t->dtype == DSQ_DTYPE_BF16 ? 2 : 4;
    if (nbytes != (uint64_t)t->rows * (uint64_t)t->cols * esz)
        return dsq_fail(d, DSQ_ERR_INTERNAL, t->m->path, name, -1, "fill size mismatch");
    int64_t per = t->heads > 0 ? t->rows / t->heads : 0, half = per / 2;
    for (int64_t r = 0; r < t->rows; r++) {
        int64_t sr = r;
        if (t->heads > 0) {
            /* new row h*per + j*half + i  <-  old row h*per + 2i + j */
            int64_t h = r / per, k = r % per, j = k / half, i = k % half;
            sr = h * per + 2 * i + j;
        }
        const uint8_t *s = base + (size_t)(sr * t->cols) * 4;
        uint8_t *o = (uint8_t *)dst + (size_t)(r * t->cols) * esz;
        for (int64_t c = 0; c < t->cols; c++) {
            uint32_t u = dsq_load_u32le(s + (size_t)c * 4);
            float v = dsq_bits_f32(u);
            if (!isfinite(v))
                return dsq_fail(d, DSQ_ERR_NONFINITE, t->m->path, name,
                                (int64_t)(t->src + (uint64_t)(sr * t->cols + c) * 4),
                                "weight [%lld, %lld] is not finite", (long long)sr, (long long)c);
            if (esz == 2) {
                uint16_t b = dsq_f32_to_bf16(v);
                memcpy(o + (size_t)c * 2, &b, 2);
            } else {
                memcpy(o + (size_t)c * 4, &u, 4);
            }
        }
    }
    return DSQ_OK;
}

/* rows 0: a 1-D vector of cols floats (norm weights). */
static void set(out_tensor *t, const dsq_llama2c *m, enum dsq_dtype dt, const char *name,
                uint64_t src, int64_t rows, int64_t cols, int64_t heads)
{
    t->m = m;
    t->ndim = rows > 0 ? 2 : 1;
    if (rows <= 0) rows = 1;
    snprintf(t->name, sizeof t->name, "%s", name);
    t->src = src;
    t->rows = rows;
    t->cols = cols;
    t->heads = heads;
    t->dtype = dt;
}

static int make_dir(const char *dir, dsq_diag *d)
{
    if (mkdir(dir, 0755) == 0) return DSQ_OK;
    if (errno == EEXIST && dsq_path_is_dir(dir)) return DSQ_OK;
    return dsq_fail_errno(d, errno, dir, "cannot create the output directory");
}

int dsq_llama2c_to_hf(const dsq_llama2c *m, const char *out_dir,
                      const dsq_llama2c_hf_opts *o, dsq_diag *d)
{
    dsq_llama2c_hf_opts def;
    if (!o) { dsq_llama2c_hf_opts_default(&def); o = &def; }
    if (o->dtype != DSQ_DTYPE_F32 && o->dtype != DSQ_DTYPE_BF16)
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, out_dir, NULL, -1,
                        "output dtype %s: only F32 and BF16", dsq_dtype_name(o->dtype));
    if (!m->map.data)
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, m->path, NULL, -1, "checkpoint is not open");
    const dsq_llama2c_config *c = &m->cfg;
    const dsq_llama2c_layout *y = &m->lay;
    int64_t dim = c->dim, hid = c->hidden_dim, V = c->vocab_size, L = c->n_layers;
    int64_t kv = (int64_t)c->n_kv_heads * (dim / c->n_heads);
    size_t nt = 2 + 9 * (size_t)L + 1;
    out_tensor *ts = calloc(nt, sizeof *ts);
    if (!ts) return dsq_fail(d, DSQ_ERR_NOMEM, m->path, NULL, -1, "out of memory");
    size_t k = 0;
    enum dsq_dtype dt = o->dtype;
    set(&ts[k++], m, dt, "model.embed_tokens.weight", y->emb, V, dim, 0);
    for (int64_t l = 0; l < L; l++) {
        char n[96];
        uint64_t dd = (uint64_t)(dim * dim) * 4, kd = (uint64_t)(kv * dim) * 4;
        uint64_t hd = (uint64_t)(hid * dim) * 4, d4 = (uint64_t)dim * 4, ul = (uint64_t)l;
#define NAME(s) (snprintf(n, sizeof n, "model.layers.%lld.%s", (long long)l, s), n)
        set(&ts[k++], m, dt, NAME("input_layernorm.weight"), y->att_norm + ul * d4, 0, dim, 0);
        set(&ts[k++], m, dt, NAME("self_attn.q_proj.weight"), y->wq + ul * dd, dim, dim, c->n_heads);
        set(&ts[k++], m, dt, NAME("self_attn.k_proj.weight"), y->wk + ul * kd, kv, dim, c->n_kv_heads);
        set(&ts[k++], m, dt, NAME("self_attn.v_proj.weight"), y->wv + ul * kd, kv, dim, 0);
        set(&ts[k++], m, dt, NAME("self_attn.o_proj.weight"), y->wo + ul * dd, dim, dim, 0);
        set(&ts[k++], m, dt, NAME("post_attention_layernorm.weight"), y->ffn_norm + ul * d4, 0, dim, 0);
        set(&ts[k++], m, dt, NAME("mlp.gate_proj.weight"), y->w1 + ul * hd, hid, dim, 0);
        set(&ts[k++], m, dt, NAME("mlp.down_proj.weight"), y->w2 + ul * hd, dim, hid, 0);
        set(&ts[k++], m, dt, NAME("mlp.up_proj.weight"), y->w3 + ul * hd, hid, dim, 0);
#undef NAME
    }
    set(&ts[k++], m, dt, "model.norm.weight", y->norm, 0, dim, 0);
    if (!tied(m, o)) set(&ts[k++], m, dt, "lm_head.weight", y->cls, V, dim, 0);

    char *json = NULL, *st_path = NULL, *cfg_path = NULL;
    dsq_st_writer *w = NULL;
    int rc = make_dir(out_dir, d);
    if (rc == DSQ_OK) rc = dsq_llama2c_config_json(m, o, &json, d);
    if (rc == DSQ_OK) {
        st_path = dsq_path_join(out_dir, "model.safetensors");
        cfg_path = dsq_path_join(out_dir, "config.json");
        w = dsq_st_writer_create();
        if (!st_path || !cfg_path || !w) rc = dsq_fail(d, DSQ_ERR_NOMEM, out_dir, NULL, -1, "out of memory");
    }
    if (rc == DSQ_OK) rc = dsq_st_writer_set_meta(w, "format", "pt");
    for (size_t i = 0; rc == DSQ_OK && i < k; i++) {
        int64_t shape[2] = { ts[i].rows, ts[i].cols };
        if (ts[i].ndim == 1) shape[0] = ts[i].cols;
        rc = dsq_st_writer_add_lazy(w, ts[i].name, dt, ts[i].ndim, shape, fill_tensor, &ts[i]);
        if (rc < 0) rc = dsq_fail(d, rc, out_dir, ts[i].name, -1, "cannot add tensor");
    }
    if (rc == DSQ_OK) rc = dsq_st_writer_write(w, st_path, 0, o->out_flags, d);
    /* config.json last: a directory with a config is a complete model */
    if (rc == DSQ_OK) rc = dsq_write_file_atomic(cfg_path, json, strlen(json), o->out_flags, d);
    dsq_st_writer_free(w);
    free(json);
    free(st_path);
    free(cfg_path);
    free(ts);
    return rc;
}

int dsq_llama2c_convert(const char *bin_path, const char *out_dir,
                        const dsq_llama2c_hf_opts *o, dsq_diag *d)
{
    dsq_llama2c m;
    DSQ_TRY(dsq_llama2c_open(&m, bin_path, d));
    int rc = dsq_llama2c_to_hf(&m, out_dir, o, d);
    dsq_llama2c_close(&m);
    return rc;
}

/* ---- a llama2.c checkpoint used as a model (ds-quant, ds-eval) ---------- */

int dsq_llama2c_is_checkpoint(const char *path)
{
    size_t n = path ? strlen(path) : 0;
    /* by name: a broken .bin then gets llama2.c's diagnosis (size, header)
     * instead of "not a safetensors file" */
    return n >= 5 && !strcmp(path + n - 4, ".bin") && dsq_path_exists(path) && !dsq_path_is_dir(path);
}

char *dsq_llama2c_find_tokenizer(const char *bin_path)
{
    dsq_llama2c m;
    if (dsq_llama2c_open(&m, bin_path, NULL) < 0) return NULL;
    int32_t vocab = m.cfg.vocab_size;
    dsq_llama2c_close(&m);
    char *dir = strdup(bin_path);
    if (!dir) return NULL;
    char *sl = strrchr(dir, '/');
    if (sl) sl[1] = 0; else dir[0] = 0;
    /* llama2.c's names: tokenizer.bin (run.c's default), tok<vocab>.bin
     * (tinystories.py train_vocab / export for a custom vocabulary) */
    char name[64], *p = NULL;
    for (int k = 0; k < 2 && !p; k++) {
        if (k == 0) snprintf(name, sizeof name, "tokenizer.bin");
        else snprintf(name, sizeof name, "tok%d.bin", (int)vocab);
        size_t l = strlen(dir) + strlen(name) + 1;
        p = malloc(l);
        if (!p) break;
        snprintf(p, l, "%s%s", dir, name);
        if (!dsq_path_exists(p) || dsq_path_is_dir(p)) { free(p); p = NULL; }
    }
    free(dir);
    return p;
}

static int copy_file(const char *from, const char *to, dsq_diag *d)
{
    char *buf;
    size_t n;
    DSQ_TRY(dsq_read_file(from, (size_t)1 << 30, &buf, &n, d));
    int rc = dsq_write_file_atomic(to, buf, n, 0, d);
    free(buf);
    return rc;
}

int dsq_llama2c_to_temp_dir(const char *bin_path, const char *tokenizer, char **out_dir, dsq_diag *d)
{
    *out_dir = NULL;
    const char *tmp = getenv("TMPDIR");
    if (!tmp || !*tmp) tmp = "/tmp";
    size_t l = strlen(tmp) + sizeof "/dsq-llama2c-XXXXXX";
    char *dir = malloc(l);
    if (!dir) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    snprintf(dir, l, "%s/dsq-llama2c-XXXXXX", tmp);
    if (!mkdtemp(dir)) {
        int rc = dsq_fail_errno(d, errno, dir, "cannot create a temporary directory");
        free(dir);
        return rc;
    }
    dsq_llama2c_hf_opts o;
    dsq_llama2c_hf_opts_default(&o);   /* float32: the conversion is exact */
    int rc = dsq_llama2c_convert(bin_path, dir, &o, d);
    char *tok_src = tokenizer ? strdup(tokenizer) : dsq_llama2c_find_tokenizer(bin_path);
    if (rc == DSQ_OK && tok_src) {
        char *t = dsq_path_join(dir, "tokenizer.bin");
        rc = t ? copy_file(tok_src, t, d) : dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
        free(t);
    }
    free(tok_src);
    if (rc < 0) {
        dsq_llama2c_temp_dir_remove(dir);
        return rc;
    }
    *out_dir = dir;
    return DSQ_OK;
}

void dsq_llama2c_temp_dir_remove(char *dir)
{
    if (!dir) return;
    DIR *dp = opendir(dir);
    struct dirent *e;
    while (dp && (e = readdir(dp))) {
        if (e->d_name[0] == '.') continue;   /* only what the conversion wrote */
        char *p = dsq_path_join(dir, e->d_name);
        if (p) unlink(p);
        free(p);
    }
    if (dp) closedir(dp);
    rmdir(dir);
    free(dir);
}
