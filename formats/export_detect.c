/* export_detect.c - parse quant_model_description.json / quantization_config
 * of an export directory (formats.md 3.4, 4.1, 5.1). Input is hostile: every
 * value is type-checked; unknown schemes are refused, not guessed. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "export_detect.h"
#include "dsq_file.h"

#include <json-c/json.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define EXPORT_JSON_MAX (64u << 20)   /* descriptions of 671B models are ~10 MB */
#define CT_MAX_GROUPS   64

/* A module matcher: exact name, substring (AWQ), or anchored regex ("re:").
 * compressed-tensors semantics, read from vllm-project/compressed-tensors
 * @0186d7ae src/compressed_tensors/utils/match.py (match_name / is_match):
 * "re:P" is re.match(P, name) (anchored at the start only), anything else is
 * name equality; "Linear" matches every linear class (LinearBase); a module
 * is quantized when a target matches and no ignore entry does. */
typedef struct matcher {
    char *text;
    pcre2_code *re;          /* "re:" patterns */
    int is_linear_class;     /* CT target "Linear" */
} matcher;

typedef struct ct_group {
    matcher *targets;
    size_t n_targets;
    int has_weights, bits, group_size, symmetric, is_float;
    int has_input, input_dynamic;
    char format[32];
} ct_group;

typedef struct desc_entry { char *name; char *type; } desc_entry;

struct dsq_export_info {
    enum dsq_export_kind kind;
    char file[512];
    /* ascend */
    desc_entry *desc;
    size_t n_desc;
    int ascend_group_size;
    char torch_dtype[32];    /* config.json torch_dtype (or dtype), "" if absent */
    /* awq */
    int awq_group, awq_zero_point;
    matcher *skip;           /* AWQ modules_to_not_convert (substrings) / CT ignore */
    size_t n_skip;
    /* ct */
    ct_group groups[CT_MAX_GROUPS];
    size_t n_groups;
    char ct_format[32];
};

const char *dsq_export_kind_name(enum dsq_export_kind k)
{
    switch (k) {
    case DSQ_EXPORT_ASCEND: return "ascend";
    case DSQ_EXPORT_AWQ:    return "awq";
    case DSQ_EXPORT_CT:     return "compressed-tensors";
    default:                return "none";
    }
}

enum dsq_export_kind dsq_export_kind_of(const dsq_export_info *x) { return x ? x->kind : DSQ_EXPORT_NONE; }
const char *dsq_export_desc_file(const dsq_export_info *x) { return x ? x->file : ""; }

static void matcher_free(matcher *m, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(m[i].text);
        if (m[i].re) pcre2_code_free(m[i].re);
    }
    free(m);
}

void dsq_export_info_free(dsq_export_info *x)
{
    if (!x) return;
    for (size_t i = 0; i < x->n_desc; i++) { free(x->desc[i].name); free(x->desc[i].type); }
    free(x->desc);
    matcher_free(x->skip, x->n_skip);
    for (size_t i = 0; i < x->n_groups; i++) matcher_free(x->groups[i].targets, x->groups[i].n_targets);
    free(x);
}

static int desc_cmp(const void *a, const void *b)
{
    return strcmp(((const desc_entry *)a)->name, ((const desc_entry *)b)->name);
}

/* JSON strings list -> matchers. "re:" is a Python re.match pattern
 * (anchored at the start, compressed-tensors utils/match.py); PCRE2 reads
 * the patterns these tools write (".*mlp.gate$", "re:.*lm_head"). */
static int parse_matchers(json_object *arr, const char *file, const char *key, int regex_ok,
                          matcher **out, size_t *n, dsq_diag *d)
{
    *out = NULL;
    *n = 0;
    if (!arr || json_object_is_type(arr, json_type_null)) return DSQ_OK;
    if (!json_object_is_type(arr, json_type_array))
        return dsq_fail(d, DSQ_ERR_JSON, file, NULL, -1, "\"%s\" must be a list of strings or null", key);
    size_t len = json_object_array_length(arr);
    matcher *m = calloc(len ? len : 1, sizeof *m);
    if (!m) return DSQ_ERR_NOMEM;
    for (size_t i = 0; i < len; i++) {
        json_object *e = json_object_array_get_idx(arr, i);
        if (!json_object_is_type(e, json_type_string)) {
            matcher_free(m, i);
            return dsq_fail(d, DSQ_ERR_JSON, file, NULL, -1, "\"%s\"[%zu] is not a string", key, i);
        }
        const char *s = json_object_get_string(e);
        m[i].text = strdup(s);
        if (!m[i].text) { matcher_free(m, i + 1); return DSQ_ERR_NOMEM; }
        m[i].is_linear_class = strcmp(s, "Linear") == 0;
        if (regex_ok && strncmp(s, "re:", 3) == 0) {
            int err;
            PCRE2_SIZE off;
            m[i].re = pcre2_compile((PCRE2_SPTR)(s + 3), PCRE2_ZERO_TERMINATED, PCRE2_ANCHORED | PCRE2_UTF,
                                    &err, &off, NULL);
            if (!m[i].re) {
                matcher_free(m, i + 1);
                return dsq_fail(d, DSQ_ERR_FORMAT, file, NULL, -1, "\"%s\"[%zu] '%s' is not a valid regex", key, i, s);
            }
        }
    }
    *out = m;
    *n = len;
    return DSQ_OK;
}

static int re_match(const pcre2_code *re, const char *s)
{
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    if (!md) return 0;
    int rc = pcre2_match(re, (PCRE2_SPTR)s, strlen(s), 0, 0, md, NULL);
    pcre2_match_data_free(md);
    return rc >= 0;
}

/* ---- ascend -------------------------------------------------------------- */

static const char *const ASCEND_GLOBAL_STR[] = { "version", "model_quant_type", "kv_quant_type", "kv_cache_type",
                                                 "fa_quant_type", "reduce_quant_type" };

static int parse_ascend(dsq_export_info *x, json_object *root, dsq_diag *d)
{
    if (!json_object_is_type(root, json_type_object))
        return dsq_fail(d, DSQ_ERR_JSON, x->file, NULL, -1, "top level is not an object");
    size_t cap = (size_t)json_object_object_length(root);
    x->desc = calloc(cap ? cap : 1, sizeof *x->desc);
    if (!x->desc) return DSQ_ERR_NOMEM;
    json_object_object_foreach(root, key, val) {
        int global = 0;
        for (size_t i = 0; i < sizeof ASCEND_GLOBAL_STR / sizeof *ASCEND_GLOBAL_STR; i++)
            if (strcmp(key, ASCEND_GLOBAL_STR[i]) == 0) global = 1;
        if (global) {
            if (!json_object_is_type(val, json_type_string))
                return dsq_fail(d, DSQ_ERR_JSON, x->file, key, -1, "\"%s\" must be a string", key);
            continue;
        }
        if (!strcmp(key, "metadata") || !strcmp(key, "optional")) {
            if (!json_object_is_type(val, json_type_object))
                return dsq_fail(d, DSQ_ERR_JSON, x->file, key, -1, "\"%s\" must be an object", key);
            continue;
        }
        if (!strcmp(key, "group_size")) {
            if (!json_object_is_type(val, json_type_int) || json_object_get_int64(val) < 0 ||
                json_object_get_int64(val) > (1 << 20))
                return dsq_fail(d, DSQ_ERR_JSON, x->file, key, -1, "\"group_size\" must be a non-negative integer");
            x->ascend_group_size = (int)json_object_get_int64(val);
            continue;
        }
        if (!json_object_is_type(val, json_type_string))
            return dsq_fail(d, DSQ_ERR_JSON, x->file, key, -1, "entry must be a type string such as \"W8A8_DYNAMIC\"");
        desc_entry *e = &x->desc[x->n_desc++];
        e->name = strdup(key);
        e->type = strdup(json_object_get_string(val));
        if (!e->name || !e->type) return DSQ_ERR_NOMEM;
    }
    qsort(x->desc, x->n_desc, sizeof *x->desc, desc_cmp);
    for (size_t i = 1; i < x->n_desc; i++)
        if (!strcmp(x->desc[i].name, x->desc[i - 1].name))
            return dsq_fail(d, DSQ_ERR_FORMAT, x->file, x->desc[i].name, -1, "duplicate entry");
    return DSQ_OK;
}

const char *dsq_export_torch_dtype(const dsq_export_info *x) { return x ? x->torch_dtype : ""; }

/* torch_dtype (newer transformers: dtype) of config.json; a missing or
 * non-string value leaves it "" (the model loader reports a bad config). */
static void take_torch_dtype(dsq_export_info *x, json_object *cfg)
{
    json_object *v = NULL;
    if (!json_object_is_type(cfg, json_type_object)) return;
    if ((json_object_object_get_ex(cfg, "torch_dtype", &v) && json_object_is_type(v, json_type_string)) ||
        (json_object_object_get_ex(cfg, "dtype", &v) && json_object_is_type(v, json_type_string)))
        snprintf(x->torch_dtype, sizeof x->torch_dtype, "%s", json_object_get_string(v));
}

const char *dsq_export_ascend_type(const dsq_export_info *x, const char *tensor)
{
    if (!x || x->kind != DSQ_EXPORT_ASCEND) return NULL;
    desc_entry key = { (char *)tensor, NULL };
    const desc_entry *e = bsearch(&key, x->desc, x->n_desc, sizeof *x->desc, desc_cmp);
    return e ? e->type : NULL;
}

/* ---- awq ----------------------------------------------------------------- */

static int get_int_alias(json_object *q, const char *a, const char *b, int64_t *v, int *found)
{
    json_object *o = NULL;
    *found = 0;
    if (!json_object_object_get_ex(q, a, &o) && !json_object_object_get_ex(q, b, &o)) return DSQ_OK;
    if (!json_object_is_type(o, json_type_int)) return DSQ_ERR_JSON;
    *v = json_object_get_int64(o);
    *found = 1;
    return DSQ_OK;
}

static int parse_awq(dsq_export_info *x, json_object *q, dsq_diag *d)
{
    int64_t bits = 4, g = 128;
    int found;
    if (get_int_alias(q, "bits", "w_bit", &bits, &found) < 0)
        return dsq_fail(d, DSQ_ERR_JSON, x->file, "quantization_config.bits", -1, "must be an integer");
    if (bits != 4)
        return dsq_fail(d, DSQ_ERR_UNSUPPORTED, x->file, "quantization_config.bits", -1,
                        "AWQ with %lld bits is not supported (4 only)", (long long)bits);
    if (get_int_alias(q, "group_size", "q_group_size", &g, &found) < 0)
        return dsq_fail(d, DSQ_ERR_JSON, x->file, "quantization_config.group_size", -1, "must be an integer");
    if (g != -1 && (g <= 0 || g > (1 << 20)))
        return dsq_fail(d, DSQ_ERR_FORMAT, x->file, "quantization_config.group_size", -1,
                        "group_size %lld must be positive or -1", (long long)g);
    x->awq_group = (int)g;   /* -1: whole input dimension */
    json_object *o;
    if (json_object_object_get_ex(q, "version", &o)) {
        if (!json_object_is_type(o, json_type_string))
            return dsq_fail(d, DSQ_ERR_JSON, x->file, "quantization_config.version", -1, "must be a string");
        if (strcasecmp(json_object_get_string(o), "gemm") != 0)
            return dsq_fail(d, DSQ_ERR_UNSUPPORTED, x->file, "quantization_config.version", -1,
                            "AWQ version '%s' is not supported (GEMM only)", json_object_get_string(o));
    }
    x->awq_zero_point = 1;
    if (json_object_object_get_ex(q, "zero_point", &o)) {
        if (!json_object_is_type(o, json_type_boolean))
            return dsq_fail(d, DSQ_ERR_JSON, x->file, "quantization_config.zero_point", -1, "must be true or false");
        x->awq_zero_point = json_object_get_boolean(o);
    }
    if (!x->awq_zero_point)
        return dsq_fail(d, DSQ_ERR_UNSUPPORTED, x->file, "quantization_config.zero_point", -1,
                        "symmetric AWQ (zero_point false) is not supported");
    o = NULL;
    json_object_object_get_ex(q, "modules_to_not_convert", &o);
    return parse_matchers(o, x->file, "modules_to_not_convert", 0, &x->skip, &x->n_skip, d);
}

/* ---- compressed-tensors -------------------------------------------------- */

static int ct_args(dsq_export_info *x, const char *gname, json_object *w, ct_group *g, dsq_diag *d)
{
    char key[160];
    snprintf(key, sizeof key, "config_groups.%s.weights", gname);
    if (!json_object_is_type(w, json_type_object))
        return dsq_fail(d, DSQ_ERR_JSON, x->file, key, -1, "must be an object");
    json_object *o;
    g->bits = 8;
    if (json_object_object_get_ex(w, "num_bits", &o)) {
        if (!json_object_is_type(o, json_type_int)) return dsq_fail(d, DSQ_ERR_JSON, x->file, key, -1, "num_bits must be an integer");
        g->bits = (int)json_object_get_int64(o);
    }
    if (json_object_object_get_ex(w, "type", &o)) {
        if (!json_object_is_type(o, json_type_string)) return dsq_fail(d, DSQ_ERR_JSON, x->file, key, -1, "type must be a string");
        g->is_float = strcmp(json_object_get_string(o), "int") != 0;
    }
    g->symmetric = 1;
    if (json_object_object_get_ex(w, "symmetric", &o)) {
        if (!json_object_is_type(o, json_type_boolean)) return dsq_fail(d, DSQ_ERR_JSON, x->file, key, -1, "symmetric must be a boolean");
        g->symmetric = json_object_get_boolean(o);
    }
    const char *strategy = "tensor";
    if (json_object_object_get_ex(w, "strategy", &o) && !json_object_is_type(o, json_type_null)) {
        if (!json_object_is_type(o, json_type_string)) return dsq_fail(d, DSQ_ERR_JSON, x->file, key, -1, "strategy must be a string");
        strategy = json_object_get_string(o);
    }
    g->group_size = 0;
    if (json_object_object_get_ex(w, "group_size", &o) && !json_object_is_type(o, json_type_null)) {
        if (!json_object_is_type(o, json_type_int)) return dsq_fail(d, DSQ_ERR_JSON, x->file, key, -1, "group_size must be an integer");
        g->group_size = (int)json_object_get_int64(o);
    }
    if (json_object_object_get_ex(w, "actorder", &o) && !json_object_is_type(o, json_type_null))
        return dsq_fail(d, DSQ_ERR_UNSUPPORTED, x->file, key, -1, "actorder (weight_g_idx) is not supported");
    if (json_object_object_get_ex(w, "dynamic", &o) && !(json_object_is_type(o, json_type_boolean) && !json_object_get_boolean(o)))
        return dsq_fail(d, DSQ_ERR_UNSUPPORTED, x->file, key, -1, "dynamic weights are not supported");
    if (g->is_float || (g->bits != 4 && g->bits != 8))
        return dsq_fail(d, DSQ_ERR_UNSUPPORTED, x->file, key, -1, "only int4 / int8 weights are supported");
    if (!strcmp(strategy, "channel")) g->group_size = 0;
    else if (!strcmp(strategy, "group")) {
        if (g->group_size <= 0) return dsq_fail(d, DSQ_ERR_FORMAT, x->file, key, -1, "group strategy needs group_size > 0");
    } else
        return dsq_fail(d, DSQ_ERR_UNSUPPORTED, x->file, key, -1, "weight strategy '%s' is not supported (channel, group)", strategy);
    return DSQ_OK;
}

static int parse_ct(dsq_export_info *x, json_object *q, dsq_diag *d)
{
    json_object *o;
    if (json_object_object_get_ex(q, "format", &o) && !json_object_is_type(o, json_type_null)) {
        if (!json_object_is_type(o, json_type_string))
            return dsq_fail(d, DSQ_ERR_JSON, x->file, "quantization_config.format", -1, "must be a string");
        snprintf(x->ct_format, sizeof x->ct_format, "%s", json_object_get_string(o));
    }
    if (json_object_object_get_ex(q, "quantization_status", &o)) {
        if (!json_object_is_type(o, json_type_string) || strcmp(json_object_get_string(o), "compressed"))
            return dsq_fail(d, DSQ_ERR_UNSUPPORTED, x->file, "quantization_config.quantization_status", -1,
                            "must be \"compressed\" (weights of other states are not stored as codes)");
    }
    json_object *groups;
    if (!json_object_object_get_ex(q, "config_groups", &groups) || !json_object_is_type(groups, json_type_object))
        return dsq_fail(d, DSQ_ERR_JSON, x->file, "quantization_config.config_groups", -1, "missing or not an object");
    json_object_object_foreach(groups, gname, gv) {
        if (x->n_groups == CT_MAX_GROUPS)
            return dsq_fail(d, DSQ_ERR_UNSUPPORTED, x->file, gname, -1, "more than %d config groups", CT_MAX_GROUPS);
        ct_group *g = &x->groups[x->n_groups++];
        if (!json_object_is_type(gv, json_type_object))
            return dsq_fail(d, DSQ_ERR_JSON, x->file, gname, -1, "config group is not an object");
        json_object *t = NULL;
        json_object_object_get_ex(gv, "targets", &t);
        if (!t || !json_object_is_type(t, json_type_array))
            return dsq_fail(d, DSQ_ERR_JSON, x->file, gname, -1, "config group has no \"targets\" list");
        DSQ_TRY(parse_matchers(t, x->file, "targets", 1, &g->targets, &g->n_targets, d));
        json_object *w = NULL;
        if (json_object_object_get_ex(gv, "weights", &w) && !json_object_is_type(w, json_type_null)) {
            g->has_weights = 1;
            DSQ_TRY(ct_args(x, gname, w, g, d));
        }
        json_object *ia = NULL;
        if (json_object_object_get_ex(gv, "input_activations", &ia) && !json_object_is_type(ia, json_type_null)) {
            if (!json_object_is_type(ia, json_type_object))
                return dsq_fail(d, DSQ_ERR_JSON, x->file, gname, -1, "input_activations must be an object or null");
            json_object *dy = NULL;
            g->has_input = 1;
            g->input_dynamic = json_object_object_get_ex(ia, "dynamic", &dy) && json_object_is_type(dy, json_type_boolean) &&
                               json_object_get_boolean(dy);
            if (!g->input_dynamic)
                return dsq_fail(d, DSQ_ERR_UNSUPPORTED, x->file, gname, -1,
                                "static input activations are not supported (dynamic per-token only)");
        }
        const char *fmt = x->ct_format;
        json_object *f = NULL;
        if (json_object_object_get_ex(gv, "format", &f) && !json_object_is_type(f, json_type_null)) {
            if (!json_object_is_type(f, json_type_string))
                return dsq_fail(d, DSQ_ERR_JSON, x->file, gname, -1, "format must be a string");
            fmt = json_object_get_string(f);
        }
        snprintf(g->format, sizeof g->format, "%s", fmt);
        if (g->has_weights && strcmp(g->format, "pack-quantized") && strcmp(g->format, "int-quantized") &&
            strcmp(g->format, "naive-quantized"))
            return dsq_fail(d, DSQ_ERR_UNSUPPORTED, x->file, gname, -1,
                            "format '%s' is not supported (pack-quantized, int-quantized)", g->format);
        if (g->has_weights && !strcmp(g->format, "pack-quantized") && g->bits != 4)
            return dsq_fail(d, DSQ_ERR_UNSUPPORTED, x->file, gname, -1, "pack-quantized with %d bits (4 only)", g->bits);
    }
    o = NULL;
    json_object_object_get_ex(q, "ignore", &o);
    return parse_matchers(o, x->file, "ignore", 1, &x->skip, &x->n_skip, d);
}

/* ---- entry points -------------------------------------------------------- */

static int parse_text(const char *txt, size_t len, const char *file, json_object **out, dsq_diag *d)
{
    json_tokener *tok = json_tokener_new();
    if (!tok) return DSQ_ERR_NOMEM;
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT);
    *out = len > INT32_MAX ? NULL : json_tokener_parse_ex(tok, txt, (int)len);
    enum json_tokener_error e = json_tokener_get_error(tok);
    json_tokener_free(tok);
    if (!*out || e != json_tokener_success) {
        json_object_put(*out);
        *out = NULL;
        return dsq_fail(d, DSQ_ERR_JSON, file, NULL, -1, "not valid JSON: %s", json_tokener_error_desc(e));
    }
    return DSQ_OK;
}

int dsq_export_parse(const char *desc, size_t desc_len, const char *name_desc,
                     const char *config, size_t config_len, const char *name_cfg,
                     dsq_export_info **out, dsq_diag *d)
{
    *out = NULL;
    dsq_export_info *x = calloc(1, sizeof *x);
    if (!x) return DSQ_ERR_NOMEM;
    json_object *root = NULL;
    int rc = DSQ_OK;
    if (desc) {
        x->kind = DSQ_EXPORT_ASCEND;
        snprintf(x->file, sizeof x->file, "%s", name_desc ? name_desc : DSQ_EXPORT_ASCEND_DESC);
        rc = parse_text(desc, desc_len, x->file, &root, d);
        if (rc == DSQ_OK) rc = parse_ascend(x, root, d);
        if (rc == DSQ_OK && config) {
            /* its torch_dtype fixes the static W8A8 deq_scale dtype (4.3) */
            json_object *c = NULL;
            rc = parse_text(config, config_len, name_cfg ? name_cfg : "config.json", &c, d);
            if (rc == DSQ_OK) take_torch_dtype(x, c);
            json_object_put(c);
        }
    } else if (config) {
        snprintf(x->file, sizeof x->file, "%s", name_cfg ? name_cfg : "config.json");
        rc = parse_text(config, config_len, x->file, &root, d);
        json_object *q = NULL, *m = NULL;
        if (rc == DSQ_OK && json_object_is_type(root, json_type_object) &&
            json_object_object_get_ex(root, "quantization_config", &q) && !json_object_is_type(q, json_type_null)) {
            if (!json_object_is_type(q, json_type_object))
                rc = dsq_fail(d, DSQ_ERR_JSON, x->file, "quantization_config", -1, "must be an object");
            else if (!json_object_object_get_ex(q, "quant_method", &m) || !json_object_is_type(m, json_type_string))
                rc = dsq_fail(d, DSQ_ERR_JSON, x->file, "quantization_config.quant_method", -1, "missing or not a string");
            else if (!strcmp(json_object_get_string(m), "awq")) {
                x->kind = DSQ_EXPORT_AWQ;
                rc = parse_awq(x, q, d);
            } else if (!strcmp(json_object_get_string(m), "compressed-tensors")) {
                x->kind = DSQ_EXPORT_CT;
                rc = parse_ct(x, q, d);
            }
        }
    }
    json_object_put(root);
    if (rc < 0 || x->kind == DSQ_EXPORT_NONE) {
        dsq_export_info_free(x);
        return rc;
    }
    *out = x;
    return DSQ_OK;
}

int dsq_export_detect(const char *dir, dsq_export_info **out, dsq_diag *d)
{
    *out = NULL;
    if (!dsq_path_is_dir(dir)) return DSQ_OK;
    char pd[4096], pc[4096];
    snprintf(pd, sizeof pd, "%s/%s", dir, DSQ_EXPORT_ASCEND_DESC);
    snprintf(pc, sizeof pc, "%s/config.json", dir);
    char *desc = NULL, *cfg = NULL;
    size_t ld = 0, lc = 0;
    int rc = DSQ_OK;
    if (dsq_path_exists(pd)) rc = dsq_read_file(pd, EXPORT_JSON_MAX, &desc, &ld, d);
    if (rc == DSQ_OK && dsq_path_exists(pc)) rc = dsq_read_file(pc, EXPORT_JSON_MAX, &cfg, &lc, d);
    if (rc == DSQ_OK && (desc || cfg)) rc = dsq_export_parse(desc, ld, pd, cfg, lc, pc, out, d);
    free(desc);
    free(cfg);
    return rc;
}

/* ---- per-module storage ---------------------------------------------------- */

static int ends_with(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcmp(s + a - b, suf) == 0;
}

static int matches(const matcher *m, size_t n, const char *module, int substring)
{
    for (size_t i = 0; i < n; i++) {
        if (m[i].re ? re_match(m[i].re, module)
                    : substring ? strstr(module, m[i].text) != NULL : strcmp(module, m[i].text) == 0)
            return 1;
    }
    return 0;
}

int dsq_export_spec_of(const dsq_export_info *x, const char *module, dsq_export_spec *spec, dsq_diag *d)
{
    memset(spec, 0, sizeof *spec);
    spec->type = DSQ_EQ_FLOAT;
    spec->src = x->file;
    /* never quantized by the target loaders: not nn.Linear (embedding, DeepSeek
     * MoEGate) or built with quant_config=None / as ParallelLMHead */
    int always_float = !strcmp(module, "model.embed_tokens") || !strcmp(module, "lm_head") ||
                       ends_with(module, ".mlp.gate") || strncmp(module, "model.layers.", 13) != 0;
    if (x->kind == DSQ_EXPORT_ASCEND) {
        char key[600];
        snprintf(key, sizeof key, "%s.weight", module);
        const char *t = dsq_export_ascend_type(x, key);
        if (!t) {
            if (ends_with(module, ".mlp.gate")) return DSQ_OK;   /* router: built without quant_config */
            return dsq_fail(d, DSQ_ERR_FORMAT, x->file, key, -1,
                            "no description entry (vllm-ascend raises KeyError; float tensors need \"FLOAT\")");
        }
        if (!strcmp(t, "FLOAT")) return DSQ_OK;
        if (always_float)
            return dsq_fail(d, DSQ_ERR_FORMAT, x->file, key, -1, "type %s, but this module must be \"FLOAT\"", t);
        if (!strcmp(t, "W8A8_DYNAMIC")) spec->type = DSQ_EQ_ASCEND_W8A8_DYNAMIC;
        else if (!strcmp(t, "W8A8")) spec->type = DSQ_EQ_ASCEND_W8A8;
        else if (!strcmp(t, "W4A8_DYNAMIC")) {
            if (x->ascend_group_size != 0)
                return dsq_fail(d, DSQ_ERR_UNSUPPORTED, x->file, "group_size", -1,
                                "W4A8_DYNAMIC needs \"group_size\": 0 (per-channel; formats.md 4.5)");
            spec->type = DSQ_EQ_ASCEND_W4A8_DYNAMIC;
        } else
            return dsq_fail(d, DSQ_ERR_UNSUPPORTED, x->file, key, -1,
                            "quantization type '%s' is not supported (FLOAT, W8A8, W8A8_DYNAMIC, W4A8_DYNAMIC)", t);
        return DSQ_OK;
    }
    if (always_float) return DSQ_OK;
    if (x->kind == DSQ_EXPORT_AWQ) {
        if (matches(x->skip, x->n_skip, module, 1)) return DSQ_OK;   /* AutoAWQ module.py:62 substring rule */
        spec->type = DSQ_EQ_AWQ_GEMM;
        spec->float_if_absent = x->n_skip == 0;
        spec->bits = 4;
        spec->group_size = x->awq_group;
        return DSQ_OK;
    }
    /* compressed-tensors: ignore wins, then the first group whose targets match */
    if (matches(x->skip, x->n_skip, module, 0)) return DSQ_OK;
    for (size_t i = 0; i < x->n_groups; i++) {
        const ct_group *g = &x->groups[i];
        int hit = 0;
        for (size_t k = 0; k < g->n_targets && !hit; k++)
            hit = g->targets[k].is_linear_class || (g->targets[k].re ? re_match(g->targets[k].re, module)
                                                                     : !strcmp(g->targets[k].text, module));
        if (!hit) continue;
        if (!g->has_weights) return DSQ_OK;
        spec->bits = g->bits;
        spec->group_size = g->group_size;
        spec->symmetric = g->symmetric;
        spec->act_dynamic = g->has_input && g->input_dynamic;
        spec->type = !strcmp(g->format, "pack-quantized") ? DSQ_EQ_CT_PACK : DSQ_EQ_CT_INT;
        if (spec->type == DSQ_EQ_CT_INT && !spec->symmetric)
            return dsq_fail(d, DSQ_ERR_UNSUPPORTED, x->file, module, -1, "asymmetric int-quantized weights are not supported");
        if (spec->type == DSQ_EQ_CT_INT && !spec->act_dynamic && spec->bits == 8)
            return dsq_fail(d, DSQ_ERR_UNSUPPORTED, x->file, module, -1,
                            "int8 weights without int8 activations (W8A16) are not supported");
        return DSQ_OK;
    }
    return DSQ_OK;
}
