/* calib_checkpoint.c - the statistics file as input and as the per-layer
 * checkpoint: layer statistics written and read back, the fingerprint that
 * ties a checkpoint to its model, data and options, and the metadata that
 * --stats checks. */
#include "calib_int.h"

#include <json-c/json.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ==== statistics I/O ====================================================== */

int dsq_calib_write_layer_stats(calib_run *c, const dsq_layer_stats *ls)
{
    char name[512];
    for (int i = 0; i < ls->nsites; i++) {
        uint8_t *b;
        size_t n;
        if (dsq_stats_encode_site(&ls->sites[i], &b, &n) < 0)
            return dsq_fail(c->d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
        dsq_stats_name(name, sizeof name, ls->layer, "site", ls->sites[i].name);
        int rc = dsq_stats_writer_put(c->w, name, b, n, 1, 0, c->d);
        free(b);
        DSQ_TRY(rc);
    }
    if (ls->n_experts > 0) {
        dsq_stats_name(name, sizeof name, ls->layer, "experts", NULL);
        DSQ_TRY(dsq_stats_writer_put(c->w, name, ls->expert_tokens, (size_t)ls->n_experts * sizeof(uint64_t), 8, 0,
                                     c->d));
    }
    return DSQ_OK;
}

int dsq_calib_src_get(calib_run *c, const char *name, void **buf, size_t *n)
{
    return c->rd ? dsq_stats_reader_get(c->rd, name, buf, n, NULL, c->d)
                 : dsq_stats_writer_get(c->w, name, buf, n, NULL, c->d);
}

typedef struct load_ctx {
    calib_run *c;
    dsq_layer_stats *ls;
    int rc;
} load_ctx;

static void load_site_cb(void *ctx, const dsq_linear *l)
{
    load_ctx *x = ctx;
    if (x->rc < 0) return;
    calib_run *c = x->c;
    char site[400], name[512];
    dsq_calib_site_of(l->name, c->cfg->q_lora_rank > 0, site, sizeof site);
    if (dsq_layer_stats_find(x->ls, site)) return;
    dsq_stats_name(name, sizeof name, x->ls->layer, "site", site);
    void *buf = NULL;
    size_t n = 0;
    dsq_diag tmp;
    int rc = dsq_calib_stats_try(c, name, &buf, &n, &tmp);
    if (rc == DSQ_ERR_NOT_FOUND && dsq_calib_expert_of(l->name) >= 0) return; /* an expert that saw no token */
    if (rc < 0) {
        x->rc = dsq_fail(c->d, rc, tmp.path, name, tmp.offset, "%s", tmp.msg);
        return;
    }
    dsq_act_stats st;
    rc = dsq_stats_decode_site(buf, n, site, &st, c->d);
    free(buf);
    if (rc < 0) {
        x->rc = rc;
        return;
    }
    if (st.in != l->in) {   /* hostile or foreign file: never index past the model's width */
        x->rc = dsq_fail(c->d, DSQ_ERR_FORMAT, NULL, name, -1, "statistics have %lld channels, the model %lld",
                         (long long)st.in, (long long)l->in);
        dsq_act_stats_release(&st);
        return;
    }
    dsq_act_stats *dst;
    rc = dsq_layer_stats_get(x->ls, site, st.in, 0, 0, &dst);
    if (rc == DSQ_OK) rc = dsq_act_stats_merge(dst, &st);
    if (rc < 0) x->rc = dsq_fail(c->d, rc, NULL, name, -1, "statistics do not fit the model");
    dsq_act_stats_release(&st);
}

static int load_layer_stats(calib_run *c, int layer, dsq_layer_stats *ls)
{
    const dsq_layer *ly = &dsq_model_weights(c->m)->layers[layer];
    load_ctx x = { c, ls, DSQ_OK };
    dsq_calib_each_linear(ly, ls->n_experts, load_site_cb, &x);
    if (x.rc < 0) return x.rc;
    if (ls->n_experts > 0) {
        char name[512];
        dsq_stats_name(name, sizeof name, layer, "experts", NULL);
        void *buf = NULL;
        size_t n = 0;
        DSQ_TRY(dsq_calib_src_get(c, name, &buf, &n));
        if (n != (size_t)ls->n_experts * sizeof(uint64_t)) {
            free(buf);
            return dsq_fail(c->d, DSQ_ERR_FORMAT, NULL, name, -1, "expert counts do not match the model");
        }
        memcpy(ls->expert_tokens, buf, n);
        free(buf);
    }
    return DSQ_OK;
}

int dsq_calib_n_experts(const calib_run *c, int layer)
{
    return dsq_model_config_is_moe_layer(c->cfg, layer) ? (int)c->cfg->n_routed_experts : 0;
}

/* A layer whose statistics come from a file (--stats or the checkpoint). */
int dsq_calib_layer_from_file(calib_run *c, int layer)
{
    dsq_calib_report(c, layer, -1, "load");
    dsq_layer_stats ls;
    DSQ_TRY(dsq_layer_stats_init(&ls, layer, dsq_calib_n_experts(c, layer)));
    int rc = dsq_model_layer_load(c->m, layer, c->d);
    if (rc == DSQ_OK) rc = load_layer_stats(c, layer, &ls);
    if (rc == DSQ_OK) rc = dsq_calib_do_layer(c, layer, &ls, 0);
    dsq_model_layer_release(c->m, layer);
    dsq_layer_stats_release(&ls);
    return rc;
}

/* ==== fingerprint and metadata ============================================ */

static void hex(const uint8_t *h, char *out) { dsq_sha256_hex(h, out); }

int dsq_calib_stats_fingerprint(calib_run *c, const dsq_calib_data *cd, char *out)
{
    char cfg_hex[65], tok_hex[65], buf[2048];
    uint8_t h[DSQ_SHA256_LEN];
    DSQ_TRY(dsq_sha256_buf(c->cfg->raw_json ? c->cfg->raw_json : "", c->cfg->raw_len, h));
    hex(h, cfg_hex);
    hex(cd->sha256, tok_hex);
    const dsq_calib_opts *o = c->o;
    snprintf(buf, sizeof buf,
             "dsq-calib-v1|cfg=%s|tok=%s|n=%d|L=%d|all=%d|min=%d|scheme=%s|gs=%d|grid=%d|cap=%d,%d|seed=%llu|"
             "target=%s|smooth=%d|alpha=%.9g|aset=%d",
             cfg_hex, tok_hex, cd->n_samples, cd->seqlen, o->moe_calib_all, o->min_expert_tokens, c->scheme->name,
             (int)o->group_size, o->n_grid, o->awq_tokens, o->awq_expert_tokens, (unsigned long long)o->data.seed,
             o->target_id ? o->target_id : "", o->smooth, (double)o->alpha, o->alpha_set);
    if (dsq_calib_attn_seqs(c) > 0) /* likewise: only when the attention block loss is on */
        snprintf(buf + strlen(buf), sizeof buf - strlen(buf), "|attn=%d,%d", dsq_calib_attn_seqs(c), o->awq_attn_seqlen);
    if (o->smooth_method) /* likewise: SmoothQuant runs keep their fingerprints */
        snprintf(buf + strlen(buf), sizeof buf - strlen(buf), "|smooth_method=%d", o->smooth_method);
    if (o->gptq) /* only then: fingerprints of runs without GPTQ stay as they were */
        snprintf(buf + strlen(buf), sizeof buf - strlen(buf), "|gptq=%.9g", o->gptq_damp);
    DSQ_TRY(dsq_sha256_buf(buf, strlen(buf), h));
    hex(h, out);
    return DSQ_OK;
}

char *dsq_calib_stats_meta(calib_run *c, const dsq_calib_data *cd)
{
    json_object *root = json_object_new_object(), *mo = json_object_new_object(), *da = json_object_new_object(),
                *se = json_object_new_object();
    char hx[65];
    uint8_t h[DSQ_SHA256_LEN];
    json_object_object_add(root, "format", json_object_new_string(DSQ_STATS_FORMAT));
    json_object_object_add(root, "version", json_object_new_int(DSQ_STATS_VERSION));
    json_object_object_add(mo, "arch", json_object_new_string(dsq_arch_name(c->cfg->arch)));
    json_object_object_add(mo, "layers", json_object_new_int64(c->cfg->num_hidden_layers));
    json_object_object_add(mo, "hidden_size", json_object_new_int64(c->cfg->hidden_size));
    dsq_sha256_buf(c->cfg->raw_json ? c->cfg->raw_json : "", c->cfg->raw_len, h);
    hex(h, hx);
    json_object_object_add(mo, "config_sha256", json_object_new_string(hx));
    json_object_object_add(root, "model", mo);
    json_object_object_add(da, "file", c->o->calib ? json_object_new_string(c->o->calib) : NULL);
    json_object_object_add(da, "samples", json_object_new_int(cd->n_samples));
    json_object_object_add(da, "seqlen", json_object_new_int(cd->seqlen));
    json_object_object_add(da, "seed", json_object_new_int64((int64_t)c->o->data.seed));
    hex(cd->sha256, hx);
    json_object_object_add(da, "tokens_sha256", json_object_new_string(hx));
    json_object_object_add(root, "data", da);
    json_object_object_add(root, "moe_calib_all", json_object_new_boolean(c->o->moe_calib_all));
    json_object_object_add(root, "min_expert_tokens", json_object_new_int(c->o->min_expert_tokens));
    json_object_object_add(se, "scheme", json_object_new_string(c->scheme->name));
    json_object_object_add(se, "group_size", json_object_new_int(c->o->group_size));
    json_object_object_add(se, "grid", json_object_new_int(c->o->n_grid));
    json_object_object_add(root, "search", se);
    /* what the checkpoint's journal was tied to, kept in the finished file:
     * --resume reuses that file only for the same data and options */
    if (dsq_calib_stats_fingerprint(c, cd, hx) == DSQ_OK)
        json_object_object_add(root, "fingerprint", json_object_new_string(hx));
    char *s = strdup(json_object_to_json_string_ext(root, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
    json_object_put(root);
    return s;
}

/* --stats: the file must describe this model. Every field is type-checked:
 * a null or mistyped value is a broken file, never a default. */
static int meta_type_error(calib_run *c, const char *field, const char *want)
{
    return dsq_fail(c->d, DSQ_ERR_JSON, dsq_stats_reader_path(c->rd), NULL, -1,
                    "statistics metadata: \"%s\" must be %s", field, want);
}

int dsq_calib_check_stats_meta(calib_run *c)
{
    json_object *root = json_tokener_parse(dsq_stats_reader_meta(c->rd)), *mo = NULL, *se = NULL, *da = NULL;
    int rc = DSQ_OK;
    const char *p = dsq_stats_reader_path(c->rd);
    const char *sv = NULL;
    uint8_t h[DSQ_SHA256_LEN];
    char hx[65];
    dsq_sha256_buf(c->cfg->raw_json ? c->cfg->raw_json : "", c->cfg->raw_len, h);
    hex(h, hx);
    if (!root || !json_object_is_type(root, json_type_object))
        rc = dsq_fail(c->d, DSQ_ERR_JSON, p, NULL, -1, "statistics metadata is not a JSON object");
    else if (dsq_json_get_obj(root, "model", &mo) != DSQ_JSON_OK)
        rc = meta_type_error(c, "model", "an object");
    else if (dsq_json_get_str(mo, "config_sha256", &sv) != DSQ_JSON_OK)
        rc = meta_type_error(c, "model.config_sha256", "a string");
    else if (strcmp(sv, hx) != 0)
        rc = dsq_fail(c->d, DSQ_ERR_STATE, p, NULL, -1, "statistics were collected on another model (config.json differs)");
    int b = 0;
    int t = rc == DSQ_OK ? dsq_json_get_bool(root, "moe_calib_all", &b) : DSQ_JSON_ABSENT;
    if (t == DSQ_JSON_BADTYPE) rc = meta_type_error(c, "moe_calib_all", "true or false");
    else if (t == DSQ_JSON_OK) c->moe_all = b;
    t = rc == DSQ_OK ? dsq_json_get_obj(root, "data", &da) : DSQ_JSON_ABSENT;
    if (t == DSQ_JSON_BADTYPE) rc = meta_type_error(c, "data", "an object");
    if (rc == DSQ_OK && da) {
        int64_t n = c->data_samples, L = c->data_seqlen, seed = (int64_t)c->data_seed;
        const char *file = NULL;
        json_object *fv = NULL;
        /* "file": null is what the writer records for pre-tokenized data */
        int null_file = json_object_object_get_ex(da, "file", &fv) && fv == NULL;
        if (!null_file && dsq_json_get_str(da, "file", &file) == DSQ_JSON_BADTYPE)
            rc = meta_type_error(c, "data.file", "a string or null");
        else if ((t = dsq_json_get_int(da, "samples", &n)) == DSQ_JSON_BADTYPE || n < 0 || n > INT32_MAX)
            rc = meta_type_error(c, "data.samples", "an integer in [0, 2^31)");
        else if ((t = dsq_json_get_int(da, "seqlen", &L)) == DSQ_JSON_BADTYPE || L < 0 || L > INT32_MAX)
            rc = meta_type_error(c, "data.seqlen", "an integer in [0, 2^31)");
        else if (dsq_json_get_int(da, "seed", &seed) == DSQ_JSON_BADTYPE)
            rc = meta_type_error(c, "data.seed", "an integer");
        if (rc == DSQ_OK) {
            if (file && !(c->data_file = strdup(file)))
                rc = dsq_fail(c->d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
            c->data_samples = (int)n;
            c->data_seqlen = (int)L;
            c->data_seed = (uint64_t)seed;
            c->r->tot.tokens = (uint64_t)c->data_samples * (uint64_t)c->data_seqlen;
        }
    }
    t = rc == DSQ_OK ? dsq_json_get_obj(root, "search", &se) : DSQ_JSON_ABSENT;
    if (t == DSQ_JSON_BADTYPE) rc = meta_type_error(c, "search", "an object");
    if (rc == DSQ_OK && se) {
        t = dsq_json_get_str(se, "scheme", &sv);
        if (t == DSQ_JSON_BADTYPE) rc = meta_type_error(c, "search.scheme", "a string");
        else if (t == DSQ_JSON_OK && c->flavor == DSQ_GROUPS_AWQ && strcmp(sv, c->scheme->name) != 0)
            rc = dsq_fail(c->d, DSQ_ERR_STATE, p, NULL, -1, "statistics were searched for %s, not %s; calibrate again",
                          sv, c->scheme->name);
    }
    json_object_put(root);
    return rc;
}

int dsq_calib_check_own_stats(calib_run *c, const dsq_calib_data *cd)
{
    char fp[65];
    DSQ_TRY(dsq_calib_stats_fingerprint(c, cd, fp));
    json_object *root = json_tokener_parse(dsq_stats_reader_meta(c->rd));
    const char *sv = NULL;
    int t = dsq_json_get_str(root, "fingerprint", &sv), rc = DSQ_OK;
    const char *p = dsq_stats_reader_path(c->rd);
    if (t == DSQ_JSON_BADTYPE) rc = meta_type_error(c, "fingerprint", "a string");
    else if (t != DSQ_JSON_OK)
        rc = dsq_fail(c->d, DSQ_ERR_STATE, p, NULL, -1,
                      "finished calibration checkpoint records no fingerprint, so --resume cannot tell whether it "
                      "was made with this run's data and options (remove it, or run without --resume)");
    else if (strcmp(sv, fp) != 0)
        rc = dsq_fail(c->d, DSQ_ERR_STATE, p, NULL, -1,
                      "finished calibration checkpoint was made with other calibration data or options (another "
                      "model, --calib, --calib-samples, --calib-seqlen, seed, scheme, rule or search setting); "
                      "run without --resume to calibrate again");
    json_object_put(root);
    return rc;
}
