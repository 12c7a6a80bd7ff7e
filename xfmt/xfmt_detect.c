/* xfmt_detect.c - recognise a serving export directory and hand its
 * description to its format's parser (the table, xfmt.c); module matchers the
 * formats share. Input is hostile: every value is type-checked; unknown
 * schemes are refused, not guessed. */
#include "xfmt_internal.h"
#include "dsq_file.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT_JSON_MAX (64u << 20)   /* descriptions of 671B models are ~10 MB */

const char *dsq_export_kind_name(enum dsq_export_kind k)
{
    const dsq_xfmt *f = dsq_xfmt_of_kind(k);
    return f ? f->name : "none";
}

enum dsq_export_kind dsq_export_kind_of(const dsq_export_info *x) { return x ? x->kind : DSQ_EXPORT_NONE; }
const char *dsq_export_desc_file(const dsq_export_info *x) { return x ? x->file : ""; }
const char *dsq_export_torch_dtype(const dsq_export_info *x) { return x ? x->torch_dtype : ""; }

void dsq_xm_free(dsq_xmatcher *m, size_t n)
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
    dsq_xm_free(x->skip, x->n_skip);
    for (size_t i = 0; i < x->n_groups; i++) dsq_xm_free(x->groups[i].targets, x->groups[i].n_targets);
    free(x);
}

/* JSON strings list -> matchers. "re:" is a Python re.match pattern
 * (anchored at the start, compressed-tensors utils/match.py); PCRE2 reads
 * the patterns these tools write (".*mlp.gate$", "re:.*lm_head"). */
int dsq_xm_parse(json_object *arr, const char *file, const char *key, int regex_ok, dsq_xmatcher **out,
                 size_t *n, dsq_diag *d)
{
    *out = NULL;
    *n = 0;
    if (!arr || json_object_is_type(arr, json_type_null)) return DSQ_OK;
    if (!json_object_is_type(arr, json_type_array))
        return dsq_fail(d, DSQ_ERR_JSON, file, NULL, -1, "\"%s\" must be a list of strings or null", key);
    size_t len = json_object_array_length(arr);
    dsq_xmatcher *m = calloc(len ? len : 1, sizeof *m);
    if (!m) return DSQ_ERR_NOMEM;
    for (size_t i = 0; i < len; i++) {
        json_object *e = json_object_array_get_idx(arr, i);
        if (!json_object_is_type(e, json_type_string)) {
            dsq_xm_free(m, i);
            return dsq_fail(d, DSQ_ERR_JSON, file, NULL, -1, "\"%s\"[%zu] is not a string", key, i);
        }
        const char *s = json_object_get_string(e);
        m[i].text = strdup(s);
        if (!m[i].text) { dsq_xm_free(m, i + 1); return DSQ_ERR_NOMEM; }
        m[i].is_linear_class = strcmp(s, "Linear") == 0;
        if (regex_ok && strncmp(s, "re:", 3) == 0) {
            int err;
            PCRE2_SIZE off;
            m[i].re = pcre2_compile((PCRE2_SPTR)(s + 3), PCRE2_ZERO_TERMINATED, PCRE2_ANCHORED | PCRE2_UTF,
                                    &err, &off, NULL);
            if (!m[i].re) {
                dsq_xm_free(m, i + 1);
                return dsq_fail(d, DSQ_ERR_FORMAT, file, NULL, -1, "\"%s\"[%zu] '%s' is not a valid regex", key, i, s);
            }
        }
    }
    *out = m;
    *n = len;
    return DSQ_OK;
}

int dsq_xm_re_match(const pcre2_code *re, const char *s)
{
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    if (!md) return 0;
    int rc = pcre2_match(re, (PCRE2_SPTR)s, strlen(s), 0, 0, md, NULL);
    pcre2_match_data_free(md);
    return rc >= 0;
}

int dsq_xm_any(const dsq_xmatcher *m, size_t n, const char *module, int substring)
{
    for (size_t i = 0; i < n; i++) {
        if (m[i].re ? dsq_xm_re_match(m[i].re, module)
                    : substring ? strstr(module, m[i].text) != NULL : strcmp(module, m[i].text) == 0)
            return 1;
    }
    return 0;
}

/* never quantized by the target loaders: not nn.Linear (embedding, DeepSeek
 * MoEGate) or built with quant_config=None / as ParallelLMHead */
int dsq_x_always_float(const char *module)
{
    return !strcmp(module, "model.embed_tokens") || !strcmp(module, "lm_head") ||
           dsq_x_ends_with(module, ".mlp.gate") || strncmp(module, "model.layers.", 13) != 0;
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

static const dsq_xfmt *format_with_desc(void)
{
    const dsq_xfmt *const *t = dsq_xfmt_table();
    for (size_t i = 0; t[i]; i++)
        if (t[i]->desc_file) return t[i];
    return NULL;
}

static const dsq_xfmt *format_with_method(const char *m)
{
    const dsq_xfmt *const *t = dsq_xfmt_table();
    for (size_t i = 0; t[i]; i++)
        if (t[i]->quant_method && !strcmp(t[i]->quant_method, m)) return t[i];
    return NULL;
}

int dsq_export_parse(const char *desc, size_t desc_len, const char *name_desc, const char *config,
                     size_t config_len, const char *name_cfg, dsq_export_info **out, dsq_diag *d)
{
    *out = NULL;
    dsq_export_info *x = calloc(1, sizeof *x);
    if (!x) return DSQ_ERR_NOMEM;
    json_object *root = NULL;
    int rc = DSQ_OK;
    const dsq_xfmt *df = format_with_desc();
    if (desc && df) {
        /* a description file of its own; config.json's torch_dtype fixes the
         * static W8A8 deq_scale dtype */
        x->f = df;
        x->kind = df->kind;
        snprintf(x->file, sizeof x->file, "%s", name_desc ? name_desc : df->desc_file);
        rc = parse_text(desc, desc_len, x->file, &root, d);
        if (rc == DSQ_OK) rc = df->parse(x, root, d);
        if (rc == DSQ_OK && config) {
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
            else if ((x->f = format_with_method(json_object_get_string(m))) != NULL) {
                x->kind = x->f->kind;
                rc = x->f->parse(x, q, d);
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
    const dsq_xfmt *df = format_with_desc();
    char pd[4096], pc[4096];
    snprintf(pd, sizeof pd, "%s/%s", dir, df ? df->desc_file : DSQ_EXPORT_ASCEND_DESC);
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

int dsq_export_spec_of(const dsq_export_info *x, const char *module, dsq_export_spec *spec, dsq_diag *d)
{
    memset(spec, 0, sizeof *spec);
    spec->type = DSQ_EQ_FLOAT;
    spec->src = x->file;
    return x->f ? x->f->spec_of(x, module, spec, d) : DSQ_OK;
}
