/* calib_result.c - the calibration result (calib.h): entries by tensor
 * name, owned allocations, fallbacks, rollbacks, coverage, the fingerprint
 * and the summary JSON. */
#include "calib_int.h"

#include <json-c/json.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

void *dsq_calib_own(dsq_calib_result *r, size_t bytes)
{
    if (r->nb == r->cb) {
        size_t nc = r->cb ? r->cb * 2 : 256;
        void **nv = realloc(r->blocks, nc * sizeof *nv);
        if (!nv) return NULL;
        r->blocks = nv;
        r->cb = nc;
    }
    void *p = calloc(1, bytes ? bytes : 1);
    if (p) r->blocks[r->nb++] = p;
    return p;
}

char *dsq_calib_own_str(dsq_calib_result *r, const char *s)
{
    char *p = dsq_calib_own(r, strlen(s) + 1);
    if (p) memcpy(p, s, strlen(s) + 1);
    return p;
}

static uint64_t hname(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) h = (h ^ *p) * 0x100000001b3ull;
    return h;
}

const dsq_calib_tensor *dsq_calib_lookup(const dsq_calib_result *r, const char *name)
{
    if (!r || !r->hcap || !name) return NULL;
    for (uint64_t h = hname(name);; h++) {
        int64_t i = r->hash[h & (r->hcap - 1)];
        if (i < 0) return NULL;
        if (strcmp(r->e[i].name, name) == 0) return &r->e[i];
    }
}

static int rehash(dsq_calib_result *r, size_t ncap)
{
    int64_t *nh = malloc(ncap * sizeof *nh);
    if (!nh) return DSQ_ERR_NOMEM;
    for (size_t i = 0; i < ncap; i++) nh[i] = -1;
    for (size_t k = 0; k < r->n; k++)
        for (uint64_t h = hname(r->e[k].name);; h++)
            if (nh[h & (ncap - 1)] < 0) {
                nh[h & (ncap - 1)] = (int64_t)k;
                break;
            }
    free(r->hash);
    r->hash = nh;
    r->hcap = ncap;
    return DSQ_OK;
}

/* Find or create the entry of name; shapes must agree. */
int dsq_calib_entry(dsq_calib_result *r, const char *name, int64_t rows, int64_t cols, dsq_calib_tensor **out,
                 dsq_diag *d)
{
    dsq_calib_tensor *t = (dsq_calib_tensor *)dsq_calib_lookup(r, name);
    if (t) {
        if (t->rows != rows || t->cols != cols)
            return dsq_fail(d, DSQ_ERR_INTERNAL, NULL, name, -1, "calibration entry shape mismatch");
        *out = t;
        return DSQ_OK;
    }
    if (r->n == r->cap) {
        size_t nc = r->cap ? r->cap * 2 : 256;
        dsq_calib_tensor *nv = realloc(r->e, nc * sizeof *nv);
        if (!nv) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
        r->e = nv;
        r->cap = nc;
    }
    if ((r->n + 1) * 2 > r->hcap && rehash(r, r->hcap ? r->hcap * 2 : 512) < 0)
        return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    t = &r->e[r->n];
    memset(t, 0, sizeof *t);
    t->name = dsq_calib_own_str(r, name);
    if (!t->name) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    t->rows = rows;
    t->cols = cols;
    t->status = DSQ_CALIB_CALIBRATED;
    t->sensitivity = -1.0;
    for (uint64_t h = hname(name);; h++)
        if (r->hash[h & (r->hcap - 1)] < 0) {
            r->hash[h & (r->hcap - 1)] = (int64_t)r->n;
            break;
        }
    r->n++;
    *out = t;
    return DSQ_OK;
}

void dsq_calib_result_free(dsq_calib_result *r)
{
    if (!r) return;
    for (size_t i = 0; i < r->nb; i++) free(r->blocks[i]);
    free(r->blocks);
    free(r->e);
    free(r->hash);
    for (size_t i = 0; i < r->nfb; i++) {
        free(r->fb_name[i]);
        free(r->fb_reason[i]);
    }
    free(r->fb_name);
    free(r->fb_reason);
    if (r->clip_map) munmap(r->clip_map, r->clip_maplen);
    if (r->clip_fd1 > 0) close(r->clip_fd1 - 1);
    free(r->clip_off);
    free(r->rb);
    for (int l = 0; l < r->n_layers && r->cov; l++) free(r->cov[l]);
    free(r->cov);
    free(r->cov_n);
    free(r->info);
    free(r);
}

size_t dsq_calib_fallback_count(const dsq_calib_result *r) { return r ? r->nfb : 0; }

const char *dsq_calib_fallback(const dsq_calib_result *r, size_t i, const char **reason)
{
    if (!r || i >= r->nfb) return NULL;
    if (reason) *reason = r->fb_reason[i];
    return r->fb_name[i];
}

size_t dsq_calib_rollback_count(const dsq_calib_result *r) { return r ? r->nrb : 0; }

const char *dsq_calib_rollback(const dsq_calib_result *r, size_t i, double *sensitivity)
{
    if (!r || i >= r->nrb) return NULL;
    if (sensitivity) *sensitivity = r->e[r->rb[i]].sensitivity;
    return r->e[r->rb[i]].name;
}

int dsq_calib_coverage(const dsq_calib_result *r, int layer, const uint64_t **tokens, int *n)
{
    *tokens = NULL;
    *n = 0;
    if (!r || layer < 0 || layer >= r->n_layers) return DSQ_ERR_INVALID_ARG;
    *tokens = r->cov[layer];
    *n = r->cov_n[layer];
    return DSQ_OK;
}

void dsq_calib_get_totals(const dsq_calib_result *r, dsq_calib_totals *t)
{
    *t = r->tot;
    t->tensors = r->n;
    t->fallback_experts = r->nfb;
}

int dsq_calib_apply_rows(const dsq_calib_tensor *t, int64_t row0, int64_t nrows, int64_t cols, float *w)
{
    if (!t || row0 < 0 || nrows < 0 || cols < 1) return DSQ_ERR_INVALID_ARG;
    if (t->cols == 0) {   /* 1-D: flat elements */
        if ((row0 + nrows) * cols > t->rows) return DSQ_ERR_SHAPE;
        if (t->row_scale)
            for (int64_t k = 0; k < nrows * cols; k++) w[k] *= t->row_scale[row0 * cols + k];
        return DSQ_OK;
    }
    if (cols != t->cols || row0 + nrows > t->rows) return DSQ_ERR_SHAPE;
    for (int64_t i = 0; i < nrows; i++) {
        float *row = w + i * cols;
        if (t->row_scale) {
            float rs = t->row_scale[row0 + i];
            if (rs != 1.0f)
                for (int64_t j = 0; j < cols; j++) row[j] *= rs;
        }
        if (t->in_scale)
            for (int64_t j = 0; j < cols; j++) row[j] *= t->in_scale[j];
        if (t->clip_idx) {
            int64_t g = t->clip_gs > 0 && t->clip_gs < cols ? t->clip_gs : cols;
            dsq_awq_clip_apply(row, 1, cols, t->clip_gs, t->clip_idx + (row0 + i) * ((cols + g - 1) / g));
        }
    }
    return DSQ_OK;
}

void dsq_calib_qparams(const dsq_calib_tensor *t, dsq_qparams *qp)
{
    if (!t) return;
    qp->importance = t->importance;
    if (t->clip) qp->clip_search = 1;
    if (!qp->range_search) qp->range_search = t->range_search;
    if (t->has_act_static) {
        qp->has_act_static = 1;
        qp->act_scale = t->act_scale;
        qp->act_offset = t->act_offset;
    }
}

int dsq_calib_fingerprint(const dsq_calib_result *r, char hex[65])
{
    dsq_sha256 h;
    if (dsq_sha256_init(&h) < 0) return DSQ_ERR_NOMEM;
    for (size_t i = 0; i < r->n; i++) {
        const dsq_calib_tensor *t = &r->e[i];
        int64_t hd[6] = { t->rows, t->cols, t->status, t->clip, t->clip_idx ? t->clip_gs : -1, t->rolled_back };
        dsq_sha256_update(&h, t->name, strlen(t->name) + 1);
        dsq_sha256_update(&h, hd, sizeof hd);
        const float *v[3] = { t->in_scale, t->row_scale, t->importance };
        const int64_t len[3] = { t->cols, t->rows, t->cols };
        for (int k = 0; k < 3; k++) {
            uint8_t present = v[k] != NULL;
            dsq_sha256_update(&h, &present, 1);
            if (present) dsq_sha256_update(&h, v[k], (size_t)len[k] * sizeof(float));
        }
        if (t->clip_idx) {
            int64_t g = t->clip_gs > 0 && t->clip_gs < t->cols ? t->clip_gs : t->cols;
            dsq_sha256_update(&h, t->clip_idx, (size_t)(t->rows * ((t->cols + g - 1) / g)));
        }
        float act[3] = { (float)t->has_act_static, t->act_scale, t->act_offset };
        dsq_sha256_update(&h, act, sizeof act);
        if (t->gptq_blob) dsq_sha256_update(&h, t->gptq_blob, t->gptq_blob_size);
    }
    uint8_t out[DSQ_SHA256_LEN];
    dsq_sha256_final(&h, out);
    dsq_sha256_hex(out, hex);
    return DSQ_OK;
}

int dsq_calib_summary_json(const dsq_calib_result *r, int timing, char **json)
{
    *json = NULL;
    json_object *root = r->info ? json_tokener_parse(r->info) : json_object_new_object();
    if (!root) return DSQ_ERR_NOMEM;
    json_object *g = json_object_new_object();
    json_object_object_add(g, "searched", json_object_new_int(r->tot.groups_searched));
    json_object_object_add(g, "smoothed", json_object_new_int(r->tot.groups_smoothed));
    json_object_object_add(g, "identity", json_object_new_int(r->tot.groups_identity));
    json_object_object_add(g, "loss_rtn", json_object_new_double(r->tot.loss_identity));
    json_object_object_add(g, "loss_searched", json_object_new_double(r->tot.loss_best));
    json_object_object_add(root, "groups", g);
    json_object_object_add(root, "tensors", json_object_new_int64((int64_t)r->n));
    json_object_object_add(root, "tokens", json_object_new_int64((int64_t)r->tot.tokens));
    if (timing && r->tot.samples > 0) { /* a fresh run (not --stats): what it used; not in metadata,
                                          * which must not depend on --stats vs --calib */
        json_object_object_add(root, "samples", json_object_new_int(r->tot.samples));
        json_object_object_add(root, "seqlen", json_object_new_int(r->tot.seqlen));
        json_object_object_add(root, "samples_requested", json_object_new_int(r->tot.samples_requested));
    }
    json_object *fb = json_object_new_array();
    for (size_t i = 0; i < r->nfb; i++) json_object_array_add(fb, json_object_new_string(r->fb_name[i]));
    json_object_object_add(root, "fallback_rtn_experts", fb);
    if (r->tot.gptq_tensors) {
        json_object *gq = json_object_new_object();
        json_object_object_add(gq, "tensors", json_object_new_int64((int64_t)r->tot.gptq_tensors));
        json_object_object_add(gq, "rtn_fallback", json_object_new_int64((int64_t)r->tot.gptq_rtn));
        json_object_object_add(root, "gptq", gq);
    }
    if (r->nrb || r->rb) {   /* --rollback: what stays float, and why */
        json_object *rb = json_object_new_array();
        for (size_t k = 0; k < r->nrb; k++) {
            json_object *o = json_object_new_object();
            json_object_object_add(o, "tensor", json_object_new_string(r->e[r->rb[k]].name));
            json_object_object_add(o, "sensitivity", json_object_new_double(r->e[r->rb[k]].sensitivity));
            json_object_array_add(rb, o);
        }
        json_object_object_add(root, "rollback", rb);
    }
    char hx[65];
    if (dsq_calib_fingerprint(r, hx) == DSQ_OK) json_object_object_add(root, "sha256", json_object_new_string(hx));
    if (timing) {
        json_object *t = json_object_new_object();
        json_object_object_add(t, "total", json_object_new_double(r->tot.seconds));
        json_object_object_add(t, "forward", json_object_new_double(r->tot.seconds_forward));
        json_object_object_add(t, "search", json_object_new_double(r->tot.seconds_search));
        if (r->tot.gptq_tensors) json_object_object_add(t, "gptq", json_object_new_double(r->tot.seconds_gptq));
        json_object_object_add(root, "seconds", t);
    }
    *json = strdup(json_object_to_json_string_ext(root, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
    json_object_put(root);
    return *json ? DSQ_OK : DSQ_ERR_NOMEM;
}
