/* export_dsq.c - a .dsq (file or sharded set) to the directory a serving
 * engine loads (see dsq_export_from_dsq in export.h). Every tensor is read
 * with its SHA-256 checked, then handed to the same writer ds-quant
 * --format uses, in the .dsq's order, so both give the same bytes. */
#include "export.h"
#include "container.h"
#include "container_set.h"
#include "convert.h"
#include "dsq_sha256.h"

#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int64_t config_layers(const char *meta)
{
    json_object *m = json_tokener_parse(meta), *c, *n;
    int64_t v = 0;
    if (m && json_object_object_get_ex(m, "config", &c) && json_object_is_type(c, json_type_object) &&
        json_object_object_get_ex(c, "num_hidden_layers", &n) && json_object_is_type(n, json_type_int))
        v = json_object_get_int64(n);
    json_object_put(m);
    return v;
}

/* Tensors in .dsq order: shard by shard, index order within each. */
static int build_src(dsq_ctr_set *set, const char *meta, dsq_export_src **out, const dsq_ctr_tensor_info ***infos,
                     dsq_ctr ***owners, size_t *n, dsq_diag *d)
{
    size_t total = 0;
    for (size_t s = 0; s < dsq_ctr_set_shards(set); s++) total += dsq_ctr_count(dsq_ctr_set_shard(set, s));
    dsq_export_src *v = calloc(total ? total : 1, sizeof *v);
    const dsq_ctr_tensor_info **inf = calloc(total ? total : 1, sizeof *inf);
    dsq_ctr **own = calloc(total ? total : 1, sizeof *own);
    if (!v || !inf || !own) {
        free(v); free(inf); free(own);
        return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    }
    int64_t layers = config_layers(meta);
    size_t k = 0;
    for (size_t s = 0; s < dsq_ctr_set_shards(set); s++) {
        dsq_ctr *r = dsq_ctr_set_shard(set, s);
        for (size_t i = 0; i < dsq_ctr_count(r); i++, k++) {
            const dsq_ctr_tensor_info *t = dsq_ctr_get(r, i);
            dsq_export_src *x = &v[k];
            inf[k] = t;
            own[k] = r;
            x->name = t->name;
            dsq_role_classify(t->name, layers, &x->role);
            x->scheme = dsq_scheme_by_id(t->scheme);
            if (!x->scheme) {
                free(v); free(inf); free(own);
                return dsq_fail(d, DSQ_ERR_UNSUPPORTED, dsq_ctr_set_shard_path(set, s), t->name, -1,
                                "unknown scheme id %u", t->scheme);
            }
            x->src_dtype = dsq_dtype_from_name(t->src_dtype);
            x->ndim = (int)t->ndim;
            int64_t rows = 1, cols = 1;
            for (uint32_t j = 0; j < t->ndim && j < 8; j++) {
                x->shape[j] = t->shape[j];
                if (t->ndim >= 2 && j == 0) rows = t->shape[0];
                else cols *= t->shape[j];
            }
            int rc = dsq_qshape_init(&x->qshape, x->scheme, rows, cols, (int32_t)t->group_size);
            if (rc < 0) {
                free(v); free(inf); free(own);
                return dsq_fail(d, rc, dsq_ctr_set_shard_path(set, s), t->name, -1, "bad shape for %s",
                                x->scheme->name);
            }
        }
    }
    *out = v;
    *infos = inf;
    *owners = own;
    *n = total;
    return DSQ_OK;
}

/* The resume fingerprint: the .dsq's identity (every tensor's hash and the
 * metadata) and the options that shape the output. */
static void fingerprint(dsq_ctr_set *set, const char *meta, const dsq_export_opts *o, char fp[2 * DSQ_SHA256_LEN + 1])
{
    dsq_sha256 h;
    snprintf(fp, 2 * DSQ_SHA256_LEN + 1, "-");
    if (dsq_sha256_init(&h) != DSQ_OK) return;
    for (size_t s = 0; s < dsq_ctr_set_shards(set); s++) {
        dsq_ctr *r = dsq_ctr_set_shard(set, s);
        for (size_t i = 0; i < dsq_ctr_count(r); i++) dsq_sha256_update(&h, dsq_ctr_get(r, i)->sha256, DSQ_SHA256_LEN);
    }
    dsq_sha256_update(&h, meta, strlen(meta));
    char tail[96];
    snprintf(tail, sizeof tail, "%s %llu", o->format, (unsigned long long)o->shard_bytes);
    dsq_sha256_update(&h, tail, strlen(tail));
    uint8_t dig[DSQ_SHA256_LEN];
    dsq_sha256_final(&h, dig);
    dsq_sha256_hex(dig, fp);
}

int dsq_export_from_dsq(const char *in, const dsq_export_opts *opts, const dsq_export_hooks *hk,
                        dsq_export_summary *s, dsq_diag *d)
{
    static const dsq_export_hooks none;
    const dsq_export_hooks *h = hk ? hk : &none;
    memset(s, 0, sizeof *s);
    DSQ_TRY(dsq_export_check_output(opts->output, in, opts->overwrite, opts->resume, d));
    dsq_ctr_set *set = NULL;
    DSQ_TRY(dsq_ctr_set_open(&set, in, d));
    const char *meta = dsq_ctr_metadata(dsq_ctr_set_shard(set, 0), NULL);
    char fp[2 * DSQ_SHA256_LEN + 1];
    fingerprint(set, meta, opts, fp);
    dsq_export_opts o = *opts;
    o.fingerprint = fp;
    o.meta_json = meta;
    dsq_export_src *src = NULL;
    const dsq_ctr_tensor_info **inf = NULL;
    dsq_ctr **own = NULL;
    size_t n = 0;
    dsq_export *ex = NULL;
    int rc = build_src(set, meta, &src, &inf, &own, &n, d);
    if (rc == DSQ_OK) rc = dsq_export_open(&ex, &o, src, n, d);
    uint8_t *buf = NULL;
    size_t cap = 0;
    for (size_t i = rc == DSQ_OK ? dsq_export_resume_from(ex) : n; rc == DSQ_OK && i < n; i++) {
        if (h->cancel && *h->cancel) {
            rc = dsq_fail(d, DSQ_ERR_INTERRUPTED, NULL, NULL, -1, "interrupted");
            break;
        }
        size_t need = (size_t)inf[i]->raw_size;
        if (need > cap) {
            uint8_t *nb = realloc(buf, need);
            if (!nb) { rc = dsq_fail(d, DSQ_ERR_NOMEM, NULL, inf[i]->name, -1, "out of memory"); break; }
            buf = nb;
            cap = need;
        }
        rc = dsq_ctr_read(own[i], inf[i], buf, cap, d);   /* checks the SHA-256 */
        if (rc == DSQ_OK) rc = dsq_export_put(ex, i, buf, need, d);
        if (h->progress) h->progress(h->progress_ctx, i + 1, n);
    }
    free(buf);
    if (rc == DSQ_OK) rc = dsq_export_finish(ex, s, d);
    rc = dsq_export_end(ex, rc, d);   /* keeps the partial export for --resume when interrupted or full */
    free(src);
    free(inf);
    free(own);
    dsq_ctr_set_close(set);
    return rc;
}
