/* recipe.c - tensor roles from Hugging Face names, recipe rules, the plan
 * (see recipe.h). */
#include "recipe.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ================= roles ================= */

#define MAX_PARTS 32

typedef struct parts {
    int n;
    char buf[1100];
    const char *p[MAX_PARTS];
} parts;

static void split(parts *s, const char *name)
{
    snprintf(s->buf, sizeof s->buf, "%s", name);
    s->n = 0;
    char *q = s->buf;
    while (s->n < MAX_PARTS) {
        s->p[s->n++] = q;
        char *dot = strchr(q, '.');
        if (!dot) break;
        *dot = 0;
        q = dot + 1;
    }
}

static int is_uint(const char *s, int64_t *v)
{
    if (!*s) return 0;
    int64_t x = 0;
    for (const char *c = s; *c; c++) {
        if (*c < '0' || *c > '9' || x > (INT64_MAX - 9) / 10) return 0;
        x = x * 10 + (*c - '0');
    }
    *v = x;
    return 1;
}

/* Index of component `w` at or after `from` (before the suffix), or -1. */
static int find(const parts *s, const char *w, int from)
{
    for (int i = from; i < s->n - 1; i++)
        if (!strcmp(s->p[i], w)) return i;
    return -1;
}

static int ends_with(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !memcmp(s + a - b, suf, b);
}

void dsq_role_classify(const char *name, int64_t num_hidden_layers, dsq_role_info *out)
{
    memset(out, 0, sizeof *out);
    out->role = DSQ_ROLE_OTHER;
    out->layer = out->expert = -1;
    parts s;
    split(&s, name ? name : "");
    const char *suffix = s.p[s.n - 1];
    const char *module = s.n >= 2 ? s.p[s.n - 2] : "";
    const char *parent = s.n >= 3 ? s.p[s.n - 3] : "";

    int l = find(&s, "layers", 0);
    int64_t v;
    if (l >= 0 && l + 1 < s.n - 1 && is_uint(s.p[l + 1], &v)) out->layer = v;
    static const char *const mtp_only[] = { "eh_proj", "enorm", "hnorm", "shared_head" };
    for (size_t i = 0; i < sizeof mtp_only / sizeof mtp_only[0]; i++)
        if (find(&s, mtp_only[i], 0) >= 0) out->mtp = 1;
    if (out->layer >= 0 && num_hidden_layers > 0 && out->layer >= num_hidden_layers) out->mtp = 1;

    if (ends_with(suffix, DSQ_ST_SCALE_SUFFIX)) {
        out->fp8_scale = 1;
        out->role = DSQ_ROLE_QUANT_AUX;
        return;
    }
    if (!strcmp(suffix, "e_score_correction_bias")) { out->role = DSQ_ROLE_ROUTER_BIAS; return; }
    /* Norms first: a LayerNorm's bias is part of the norm, not a linear's. */
    if (strstr(module, "norm") || !strcmp(module, "ln_f") || !strcmp(module, "ln_1") ||
        !strcmp(module, "ln_2")) {
        out->role = DSQ_ROLE_NORM;
        return;
    }
    int moe_parent = !strcmp(parent, "mlp") || !strcmp(parent, "block_sparse_moe");
    if (!strcmp(suffix, "bias")) {
        out->role = (!strcmp(module, "gate") && moe_parent) ? DSQ_ROLE_ROUTER_BIAS
                                                             : DSQ_ROLE_LINEAR_BIAS;
        return;
    }
    if (strcmp(suffix, "weight") != 0) return;  /* inv_freq, buffers: other */

    if (!strcmp(module, "embed_tokens") || !strcmp(module, "wte") ||
        !strcmp(module, "word_embeddings")) {
        out->role = DSQ_ROLE_EMBED;
        return;
    }
    if (!strcmp(module, "lm_head") || (!strcmp(module, "head") && !strcmp(parent, "shared_head"))) {
        out->role = DSQ_ROLE_LM_HEAD;
        return;
    }
    if (!strcmp(module, "eh_proj")) { out->role = DSQ_ROLE_MTP; return; }
    int e = find(&s, "experts", 0);
    if (e >= 0 && e + 1 < s.n - 1 && is_uint(s.p[e + 1], &v)) {
        out->role = DSQ_ROLE_EXPERT_LINEAR;
        out->expert = v;
        return;
    }
    if (find(&s, "shared_experts", 0) >= 0 || find(&s, "shared_expert", 0) >= 0) {
        out->role = DSQ_ROLE_SHARED_EXPERT_LINEAR;
        return;
    }
    /* The router is "mlp.gate" exactly (gate_proj is a linear); Qwen2-MoE
     * also has a one-row "shared_expert_gate". */
    if ((!strcmp(module, "gate") && moe_parent) || !strcmp(module, "shared_expert_gate")) {
        out->role = DSQ_ROLE_ROUTER;
        return;
    }
    /* DeepSeek-V3.2's lightning indexer (self_attn.indexer.*): its own role,
     * kept float by default as msModelSlim's recipes exclude it */
    if (find(&s, "indexer", 0) >= 0) {
        out->role = DSQ_ROLE_INDEXER_LINEAR;
        return;
    }
    if (find(&s, "self_attn", 0) >= 0 || find(&s, "attn", 0) >= 0 || find(&s, "attention", 0) >= 0) {
        out->role = DSQ_ROLE_ATTN_LINEAR;
        return;
    }
    if (find(&s, "mlp", 0) >= 0 || find(&s, "feed_forward", 0) >= 0 ||
        find(&s, "block_sparse_moe", 0) >= 0) {
        out->role = DSQ_ROLE_MLP_LINEAR;
        return;
    }
}

int dsq_role_is_quantized_by_default(uint32_t role)
{
    return role == DSQ_ROLE_ATTN_LINEAR || role == DSQ_ROLE_MLP_LINEAR ||
           role == DSQ_ROLE_EXPERT_LINEAR || role == DSQ_ROLE_SHARED_EXPERT_LINEAR;
}

/* ================= schemes ================= */

static int is_int_scheme(const dsq_scheme *sc)
{
    return sc && sc->weight_bits <= 8;
}

int dsq_recipe_scheme(const char *name, const dsq_scheme **out, dsq_diag *d)
{
    return dsq_recipe_scheme_ex(name, 0, out, d);
}

int dsq_recipe_scheme_ex(const char *name, int calibrated, const dsq_scheme **out, dsq_diag *d)
{
    *out = NULL;
    if (name && !strcmp(name, "keep")) return DSQ_OK;
    const dsq_scheme *sc = name ? dsq_scheme_by_name(name) : NULL;
    if (!sc) {
        char list[512] = "";
        size_t o = 0;
        for (int i = 0; i < dsq_scheme_count() && o < sizeof list - 64; i++) {
            const dsq_scheme *x = dsq_scheme_at(i);
            if (!x) continue;
            o += (size_t)snprintf(list + o, sizeof list - o, "%s%s", o ? ", " : "", x->name);
        }
        return dsq_fail(d, DSQ_ERR_NOT_FOUND, NULL, NULL, -1,
                        "unknown scheme '%s' (known: %s, keep)", name ? name : "", list);
    }
    if (sc->needs_calibration && !calibrated) {
        if (sc->id == DSQ_SCHEME_W8A8)
            return dsq_fail(d, DSQ_ERR_UNSUPPORTED, NULL, NULL, -1,
                            "w8a8 (static) needs calibration statistics (--calib); use w8a8-dynamic");
        return dsq_fail(d, DSQ_ERR_UNSUPPORTED, NULL, NULL, -1,
                        "%s needs calibration statistics (--calib)", sc->name);
    }
    *out = sc;
    return DSQ_OK;
}

/* ================= recipe ================= */

static void recipe_zero(dsq_recipe *r)
{
    memset(r, 0, sizeof *r);
    r->group_size = DSQ_GROUP_DEFAULT;
}

int dsq_recipe_init(dsq_recipe *r, const char *scheme, dsq_diag *d)
{
    return dsq_recipe_init_ex(r, scheme, 0, d);
}

int dsq_recipe_init_ex(dsq_recipe *r, const char *scheme, int calibrated, dsq_diag *d)
{
    recipe_zero(r);
    r->calibrated = calibrated;
    const dsq_scheme *sc;
    DSQ_TRY(dsq_recipe_scheme_ex(scheme, calibrated, &sc, d));
    for (uint32_t role = 0; role < DSQ_ROLE_COUNT; role++)
        if (dsq_role_is_quantized_by_default(role)) r->role_scheme[role] = sc;
    return DSQ_OK;
}

/* Presets: one row each. Schemes by id; PRESET_NO_SCHEME for the MTP
 * experts means "as the routed experts". keep: regexes kept float, tried
 * before the role table. */
#define PRESET_NO_SCHEME UINT32_MAX
typedef struct preset_row {
    const char *name;
    uint32_t attn, mlp, shared, expert, mtp_expert;
    int needs_calibration;
    const char *calib_scheme;   /* what calibration prepares for (calib.h dsq_calib_opts.scheme) */
    const char *keep[4];
} preset_row;

static const preset_row g_preset_rows[] = {
    /* msModelSlim lab_practice/deepseek_v3/deepseek_w4a8_per_channel.yaml:
     * attention and dense / shared MLP W8A8 dynamic, routed experts W4A8,
     * MTP-layer experts W8A8 dynamic; the yaml excludes *kv_b_proj */
    { "deepseek-w4a8", DSQ_SCHEME_W8A8_DYNAMIC, DSQ_SCHEME_W8A8_DYNAMIC, DSQ_SCHEME_W8A8_DYNAMIC, DSQ_SCHEME_W4A8,
      DSQ_SCHEME_W8A8_DYNAMIC, 0, "w4a8", { "\\.kv_b_proj\\.weight$", NULL } },
    /* msModelSlim lab_practice/deepseek_v3_2/deepseek_w8a8.yaml (and the v0
     * DeepSeek W8A8 script's mix_cfg): attention W8A8 static (per-tensor
     * asymmetric activation, per-channel symmetric weight) except kv_b_proj,
     * every MLP (dense, shared, routed) W8A8 dynamic except the router */
    { "deepseek-w8a8", DSQ_SCHEME_W8A8, DSQ_SCHEME_W8A8_DYNAMIC, DSQ_SCHEME_W8A8_DYNAMIC, DSQ_SCHEME_W8A8_DYNAMIC,
      PRESET_NO_SCHEME, 1, "w8a8", { "\\.kv_b_proj\\.weight$", NULL } },
};
#define N_PRESETS (sizeof g_preset_rows / sizeof g_preset_rows[0])

static const char *const g_presets[] = { "deepseek-w4a8", "deepseek-w8a8", NULL };

const char *const *dsq_recipe_presets(void) { return g_presets; }

static const preset_row *preset_find(const char *name)
{
    for (size_t i = 0; name && i < N_PRESETS; i++)
        if (!strcmp(g_preset_rows[i].name, name)) return &g_preset_rows[i];
    return NULL;
}

int dsq_recipe_preset_needs_calibration(const char *preset)
{
    const preset_row *p = preset_find(preset);
    return p ? p->needs_calibration : 0;
}

const char *dsq_recipe_preset_calib_scheme(const char *preset)
{
    const preset_row *p = preset_find(preset);
    return p ? p->calib_scheme : NULL;
}

static int add_rule_at(dsq_recipe *r, size_t at, const char *regex, const dsq_scheme *sc, dsq_diag *d)
{
    int err;
    PCRE2_SIZE off;
    pcre2_code *code = pcre2_compile((PCRE2_SPTR)regex, PCRE2_ZERO_TERMINATED, 0, &err, &off, NULL);
    if (!code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1,
                        "bad regex '%s' at offset %zu: %s", regex, (size_t)off, (const char *)msg);
    }
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(code, NULL);
    dsq_recipe_rule *nv = realloc(r->rules, (r->nrules + 1) * sizeof *nv);
    char *pat = strdup(regex);
    if (!md || !nv || !pat) {
        if (nv) r->rules = nv;
        pcre2_match_data_free(md);
        pcre2_code_free(code);
        free(pat);
        return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    }
    r->rules = nv;
    memmove(&nv[at + 1], &nv[at], (r->nrules - at) * sizeof *nv);
    nv[at] = (dsq_recipe_rule){ .pattern = pat, .code = code, .match = md, .scheme = sc };
    r->nrules++;
    return DSQ_OK;
}

int dsq_recipe_init_preset(dsq_recipe *r, const char *preset, dsq_diag *d)
{
    recipe_zero(r);
    const preset_row *p = preset_find(preset);
    if (!p)
        return dsq_fail(d, DSQ_ERR_NOT_FOUND, NULL, NULL, -1, "unknown recipe '%s' (known: deepseek-w4a8, deepseek-w8a8)",
                        preset ? preset : "");
    const uint32_t ids[4] = { p->attn, p->mlp, p->shared, p->expert };
    const uint32_t roles[4] = { DSQ_ROLE_ATTN_LINEAR, DSQ_ROLE_MLP_LINEAR, DSQ_ROLE_SHARED_EXPERT_LINEAR,
                                DSQ_ROLE_EXPERT_LINEAR };
    for (int i = 0; i < 4; i++) {
        const dsq_scheme *sc = dsq_scheme_by_id(ids[i]);
        if (!sc) return dsq_fail(d, DSQ_ERR_INTERNAL, NULL, NULL, -1, "scheme table lacks scheme %u", ids[i]);
        r->role_scheme[roles[i]] = sc;
    }
    if (p->mtp_expert != PRESET_NO_SCHEME) r->mtp_expert_scheme = dsq_scheme_by_id(p->mtp_expert);
    r->preset = p->name;
    for (int k = 0; k < 4 && p->keep[k]; k++) {
        int rc = add_rule_at(r, r->nrules, p->keep[k], NULL, d);
        if (rc < 0) {
            dsq_recipe_release(r);
            return rc;
        }
    }
    return DSQ_OK;
}

int dsq_recipe_add_keep(dsq_recipe *r, const char *regex, dsq_diag *d)
{
    DSQ_TRY(add_rule_at(r, r->nuser, regex, NULL, d));
    r->nuser++;
    return DSQ_OK;
}

int dsq_recipe_keep_exact(dsq_recipe *r, const char *name, dsq_diag *d)
{
    /* \Q...\E quotes the name; a name holding "\E" could end the quote */
    if (!name || strstr(name, "\\E"))
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, name, -1, "cannot keep this tensor by name");
    size_t n = strlen(name) + 8;
    char *re = malloc(n);
    if (!re) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    snprintf(re, n, "^\\Q%s\\E$", name);
    int rc = add_rule_at(r, 0, re, NULL, d);
    free(re);
    if (rc == DSQ_OK) r->nuser++;
    return rc;
}

int dsq_recipe_add_rule(dsq_recipe *r, const char *spec, dsq_diag *d)
{
    const char *eq = spec ? strrchr(spec, '=') : NULL;
    if (!eq || eq == spec || !eq[1])
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1,
                        "--scheme-for wants REGEX=SCHEME, got '%s'", spec ? spec : "");
    const dsq_scheme *sc;
    DSQ_TRY(dsq_recipe_scheme_ex(eq + 1, r->calibrated, &sc, d));
    char *regex = strndup(spec, (size_t)(eq - spec));
    if (!regex) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    int rc = add_rule_at(r, r->nuser, regex, sc, d);
    free(regex);
    if (rc == DSQ_OK) r->nuser++;
    return rc;
}

void dsq_recipe_release(dsq_recipe *r)
{
    if (!r) return;
    for (size_t i = 0; i < r->nrules; i++) {
        pcre2_match_data_free(r->rules[i].match);
        pcre2_code_free(r->rules[i].code);
        free(r->rules[i].pattern);
    }
    free(r->rules);
    recipe_zero(r);
}

static int rule_matches(const dsq_recipe_rule *ru, const char *name)
{
    int rc = pcre2_match(ru->code, (PCRE2_SPTR)name, PCRE2_ZERO_TERMINATED, 0, 0, ru->match, NULL);
    return rc >= 0;
}

/* ================= decisions ================= */

static const dsq_scheme *keep_scheme(enum dsq_dtype dt)
{
    if (dt == DSQ_DTYPE_BF16 || dsq_dtype_is_fp8(dt)) return dsq_scheme_by_id(DSQ_SCHEME_BF16);
    return dsq_scheme_by_id(DSQ_SCHEME_F32);
}

static int float_dtype(enum dsq_dtype dt)
{
    return dt == DSQ_DTYPE_F32 || dt == DSQ_DTYPE_F16 || dt == DSQ_DTYPE_BF16 ||
           dt == DSQ_DTYPE_F64 || dt == DSQ_DTYPE_F8_E4M3 || dt == DSQ_DTYPE_F8_E5M2;
}

int dsq_recipe_decide(const dsq_recipe *r, const char *name, enum dsq_dtype dtype,
                      int ndim, const int64_t *shape, int64_t num_hidden_layers,
                      dsq_plan_entry *out, dsq_diag *d)
{
    memset(out, 0, sizeof *out);
    out->name = name;
    out->src_dtype = dtype;
    if (ndim < 0 || ndim > DSQ_ST_MAX_DIMS)
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, name, -1, "rank %d out of range", ndim);
    out->ndim = ndim;
    int64_t rows = 1, cols = 1;
    for (int i = 0; i < ndim; i++) {
        out->shape[i] = shape[i];
        if (ndim >= 2 && i == 0) rows = shape[0];
        else cols *= shape[i];
    }
    dsq_role_classify(name, num_hidden_layers, &out->role);
    if (!float_dtype(dtype))
        return dsq_fail(d, DSQ_ERR_UNSUPPORTED, NULL, name, -1,
                        "source dtype %s is not a float type (already quantized input is not supported)",
                        dsq_dtype_name(dtype));
    if (rows < 1 || cols < 1)
        return dsq_fail(d, DSQ_ERR_UNSUPPORTED, NULL, name, -1, "empty tensor (a zero dimension)");

    uint32_t role = out->role.role;
    int can_int = ndim >= 2 && !out->role.fp8_scale && role != DSQ_ROLE_LINEAR_BIAS &&
                  role != DSQ_ROLE_ROUTER_BIAS && role != DSQ_ROLE_NORM;
    const dsq_scheme *sc = NULL;
    int decided = 0;
    for (size_t i = 0; i < r->nrules && !decided; i++) {
        const dsq_recipe_rule *ru = &r->rules[i];
        if (!rule_matches(ru, name)) continue;
        if (is_int_scheme(ru->scheme) && !can_int) continue;
        sc = ru->scheme;
        out->rule = (int)i;
        decided = 1;
    }
    if (!decided) {
        if (out->role.mtp && role == DSQ_ROLE_EXPERT_LINEAR && r->mtp_expert_scheme) {
            sc = r->mtp_expert_scheme;
            out->rule = DSQ_PLAN_BY_PRESET;
        } else {
            sc = role < DSQ_ROLE_COUNT ? r->role_scheme[role] : NULL;
            out->rule = DSQ_PLAN_BY_ROLE;
        }
        if (is_int_scheme(sc) && !can_int) {
            sc = NULL;
            out->rule = DSQ_PLAN_BY_DTYPE;
        }
    }
    /* Calibration never runs the MTP layer (the engine does not evaluate it),
     * so a scheme that needs calibration statistics gets its dynamic
     * counterpart there (msModelSlim's recipe uses W8A8_DYNAMIC for MTP too). */
    if (sc && sc->needs_calibration && out->role.mtp) {
        sc = dsq_scheme_by_id(DSQ_SCHEME_W8A8_DYNAMIC);
        out->rule = DSQ_PLAN_BY_PRESET;
    }
    if (sc && sc->needs_calibration && !r->calibrated)   /* a preset's static scheme */
        return dsq_fail(d, DSQ_ERR_UNSUPPORTED, NULL, name, -1,
                        "recipe %s puts %s on this tensor: it needs calibration statistics (--calib or --stats)",
                        r->preset ? r->preset : "?", sc->name);
    if (!sc) {
        out->kept = 1;
        sc = keep_scheme(dtype);
        if (!sc) return dsq_fail(d, DSQ_ERR_INTERNAL, NULL, name, -1, "no float scheme in the table");
    }
    out->scheme = sc;
    int32_t g = sc->weight_bits == 4 ? r->group_size : 0;
    int rc = dsq_qshape_init(&out->qshape, sc, rows, cols, g);
    if (rc < 0)
        return dsq_fail(d, rc, NULL, name, -1,
                        "scheme %s cannot pack shape [%lld, %lld] with group size %d: %s",
                        sc->name, (long long)rows, (long long)cols, (int)g, dsq_strerror(rc));
    size_t bytes;
    rc = sc->blob_size(&out->qshape, &bytes);
    if (rc < 0) return dsq_fail(d, rc, NULL, name, -1, "blob size of %s: %s", sc->name, dsq_strerror(rc));
    out->est_bytes = bytes;
    uint64_t numel = 1;
    for (int i = 0; i < ndim; i++) numel *= (uint64_t)shape[i];
    out->src_bytes = numel * dsq_dtype_bits(dtype) / 8;
    return DSQ_OK;
}

/* ================= plan ================= */

static int cmp_source(const void *a, const void *b)
{
    const dsq_plan_entry *x = a, *y = b;
    if (x->t->shard != y->t->shard) return x->t->shard < y->t->shard ? -1 : 1;
    if (x->t->file_offset != y->t->file_offset) return x->t->file_offset < y->t->file_offset ? -1 : 1;
    return strcmp(x->name, y->name);   /* zero-size tensors share an offset */
}

int dsq_plan_build(dsq_plan *p, const dsq_recipe *r, const dsq_st_model *m,
                   int64_t num_hidden_layers, dsq_diag *d)
{
    memset(p, 0, sizeof *p);
    size_t n = dsq_st_count(m);
    if (num_hidden_layers <= 0) {
        /* No config: the MTP layer is the lowest layer with MTP-only tensors. */
        for (size_t i = 0; i < n; i++) {
            dsq_role_info ri;
            dsq_role_classify(dsq_st_get(m, i)->name, 0, &ri);
            if (ri.mtp && ri.layer >= 0 && (num_hidden_layers <= 0 || ri.layer < num_hidden_layers))
                num_hidden_layers = ri.layer;
        }
    }
    p->num_hidden_layers = num_hidden_layers;
    p->v = calloc(n ? n : 1, sizeof *p->v);
    if (!p->v) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const dsq_st_tensor *t = dsq_st_get(m, i);
        p->src_bytes += t->nbytes;
        if (dsq_st_is_companion(m, t)) continue;
        dsq_plan_entry *e = &p->v[p->n];
        int rc = dsq_recipe_decide(r, t->name, t->dtype, t->ndim, t->shape, num_hidden_layers, e, d);
        if (rc < 0) {
            if (d && !d->path[0]) snprintf(d->path, sizeof d->path, "%s", dsq_st_shard_path(m, t->shard));
            dsq_plan_release(p);
            return rc;
        }
        e->t = t;
        p->n++;
        p->est_bytes += e->est_bytes;
        p->count_by_scheme[e->scheme->id]++;
        p->bytes_by_scheme[e->scheme->id] += e->est_bytes;
    }
    qsort(p->v, p->n, sizeof *p->v, cmp_source);
    return DSQ_OK;
}

void dsq_plan_release(dsq_plan *p)
{
    if (!p) return;
    free(p->v);
    memset(p, 0, sizeof *p);
}

void dsq_plan_reason(const dsq_recipe *r, const dsq_plan_entry *e, char *buf, size_t n)
{
    if (e->rule >= 0 && (size_t)e->rule < r->nrules) {
        const dsq_recipe_rule *ru = &r->rules[e->rule];
        if ((size_t)e->rule >= r->nuser)
            snprintf(buf, n, "recipe %s: '%s'", r->preset ? r->preset : "?", ru->pattern);
        else if (!ru->scheme)
            snprintf(buf, n, "--keep '%s'", ru->pattern);
        else
            snprintf(buf, n, "--scheme-for '%s=%s'", ru->pattern, ru->scheme->name);
        return;
    }
    switch (e->rule) {
    case DSQ_PLAN_BY_PRESET:
        snprintf(buf, n, "recipe %s: mtp expert", r->preset ? r->preset : "?");
        break;
    case DSQ_PLAN_BY_DTYPE:
        snprintf(buf, n, "role %s (cannot hold an int scheme)", dsq_role_name(e->role.role));
        break;
    default:
        snprintf(buf, n, "role %s", dsq_role_name(e->role.role));
        break;
    }
}
