/* quant_report.c - ds-quant's reports (see quant_report.h). */
#include "quant_report.h"

#include "dsq_json.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void fmt_bytes(char *buf, size_t n, double b)
{
    const char *u[] = { "B", "KB", "MB", "GB", "TB" };
    int i = 0;
    while (b >= 1000 && i < 4) {
        b /= 1000;
        i++;
    }
    snprintf(buf, n, i ? "%.2f %s" : "%.0f %s", b, u[i]);
}

static void shape_str(char *buf, size_t n, const dsq_plan_entry *e)
{
    size_t o = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < e->ndim && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, "%s%lld", i ? "," : "", (long long)e->shape[i]);
    if (o < n) snprintf(buf + o, n - o, "]");
}

void dsq_plan_report_json(json_object *o, const dsq_convert *c, const dsq_recipe *r)
{
    const dsq_plan *p = dsq_convert_plan(c);
    char reason[1200];
    json_object *by = json_object_new_object(), *plan = json_object_new_array();
    dsq_json_put_bool(o, "dry_run", 1);
    dsq_json_put_u64(o, "tensors", p->n);
    dsq_json_put_u64(o, "source_bytes", p->src_bytes);
    dsq_json_put_u64(o, "estimated_output_bytes", p->est_bytes);
    dsq_json_put_u64(o, "estimated_peak_rss_bytes", dsq_convert_peak_estimate(c));
    dsq_json_put_int(o, "num_hidden_layers", p->num_hidden_layers);
    for (int s = 0; s < DSQ_SCHEME_ID_COUNT; s++) {
        if (!p->count_by_scheme[s]) continue;
        json_object *k = json_object_new_object();
        dsq_json_put_u64(k, "tensors", p->count_by_scheme[s]);
        dsq_json_put_u64(k, "estimated_bytes", p->bytes_by_scheme[s]);
        json_object_object_add(by, dsq_scheme_by_id((uint32_t)s)->name, k);
    }
    json_object_object_add(o, "by_scheme", by);
    for (size_t i = 0; i < p->n; i++) {
        const dsq_plan_entry *e = &p->v[i];
        json_object *t = json_object_new_object(), *shape = json_object_new_array();
        dsq_plan_reason(r, e, reason, sizeof reason);
        for (int d = 0; d < e->ndim; d++) json_object_array_add(shape, json_object_new_int64(e->shape[d]));
        dsq_json_put_str(t, "name", e->name);
        dsq_json_put_str(t, "role", dsq_role_name(e->role.role));
        dsq_json_put_bool(t, "mtp", e->role.mtp);
        dsq_json_put_str(t, "dtype", dsq_dtype_name(e->src_dtype));
        json_object_object_add(t, "shape", shape);
        dsq_json_put_str(t, "scheme", e->scheme->name);
        dsq_json_put_int(t, "group_size", e->qshape.group_size);
        dsq_json_put_u64(t, "source_bytes", e->src_bytes);
        dsq_json_put_u64(t, "estimated_bytes", e->est_bytes);
        dsq_json_put_str(t, "rule", reason);
        json_object_array_add(plan, t);
    }
    json_object_object_add(o, "plan", plan);
}

void dsq_plan_report_text(FILE *f, const dsq_convert *c, const dsq_recipe *r, int level)
{
    const dsq_plan *p = dsq_convert_plan(c);
    uint64_t peak = dsq_convert_peak_estimate(c);
    char reason[1200], shp[160];
    if (level >= 2) {
        fprintf(f, "%-60s %-20s %-8s %-18s %-13s %5s %12s  %s\n", "tensor", "role", "dtype", "shape", "scheme",
                "group", "est. bytes", "rule");
        for (size_t i = 0; i < p->n; i++) {
            const dsq_plan_entry *e = &p->v[i];
            dsq_plan_reason(r, e, reason, sizeof reason);
            shape_str(shp, sizeof shp, e);
            fprintf(f, "%-60s %-20s %-8s %-18s %-13s %5d %12llu  %s%s\n", e->name, dsq_role_name(e->role.role),
                    dsq_dtype_name(e->src_dtype), shp, e->scheme->name, (int)e->qshape.group_size,
                    (unsigned long long)e->est_bytes, reason, e->role.mtp ? " [mtp]" : "");
        }
        fprintf(f, "\n");
    }
    char a[32], b[32], m[32];
    fmt_bytes(a, sizeof a, (double)p->src_bytes);
    fmt_bytes(b, sizeof b, (double)p->est_bytes);
    fmt_bytes(m, sizeof m, (double)peak);
    fprintf(f, "%zu tensors:", p->n);
    for (int s = 0; s < DSQ_SCHEME_ID_COUNT; s++)
        if (p->count_by_scheme[s]) fprintf(f, " %s %zu", dsq_scheme_by_id((uint32_t)s)->name, p->count_by_scheme[s]);
    fprintf(f, "\nsource %s -> estimated output %s before zstd; estimated peak memory %s\n", a, b, m);
}

static int cmp_err(const void *a, const void *b)
{
    const dsq_tensor_result *x = *(const dsq_tensor_result *const *)a;
    const dsq_tensor_result *y = *(const dsq_tensor_result *const *)b;
    if (x->rel_error != y->rel_error) return x->rel_error > y->rel_error ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* The measured tensors, worst error first. */
typedef struct worst_list {
    const dsq_tensor_result **m;
    size_t nm, nworst;
    double sum;
} worst_list;

static void worst_init(worst_list *w, const dsq_convert_summary *s)
{
    memset(w, 0, sizeof *w);
    w->m = calloc(s->tensors ? s->tensors : 1, sizeof *w->m);
    for (size_t i = 0; w->m && i < s->tensors; i++)
        if (s->results[i].rel_error >= 0) {
            w->m[w->nm++] = &s->results[i];
            w->sum += s->results[i].rel_error;
        }
    if (w->m) qsort(w->m, w->nm, sizeof *w->m, cmp_err);
    w->nworst = w->nm < 10 ? w->nm : 10;
}

void dsq_run_report_json(json_object *o, const dsq_run_report *rp)
{
    const dsq_convert_summary *s = rp->s;
    const char *in = rp->input, *out = rp->output, *calib_json = rp->calib_json;
    const int threads = rp->threads, sample = rp->error_sample;
    const uint64_t peak = rp->peak_rss;
    double gbs = s->seconds > 0 ? (double)s->bytes_converted / s->seconds / 1e9 : 0;
    worst_list wl;
    worst_init(&wl, s);
    const dsq_tensor_result **m = wl.m;
    const size_t nm = wl.nm, nworst = wl.nworst;
    const double sum = wl.sum;
    json_object *by = json_object_new_object();
    dsq_json_put_str(o, "input", in);
    dsq_json_put_str(o, "output", out);
    dsq_json_put_int(o, "shards", s->shards);
    dsq_json_put_u64(o, "tensors", s->tensors);
    dsq_json_put_u64(o, "resumed", s->resumed);
    for (int k = 0; k < DSQ_SCHEME_ID_COUNT; k++) {
        if (!s->count_by_scheme[k]) continue;
        json_object *e = json_object_new_object();
        dsq_json_put_u64(e, "tensors", s->count_by_scheme[k]);
        dsq_json_put_u64(e, "source_bytes", s->src_by_scheme[k]);
        dsq_json_put_u64(e, "stored_bytes", s->stored_by_scheme[k]);
        json_object_object_add(by, dsq_scheme_by_id((uint32_t)k)->name, e);
    }
    json_object_object_add(o, "by_scheme", by);
    dsq_json_put_u64(o, "bytes_in", s->bytes_in);
    dsq_json_put_u64(o, "bytes_converted", s->bytes_converted);
    dsq_json_put_u64(o, "bytes_raw", s->bytes_raw);
    dsq_json_put_u64(o, "bytes_stored", s->bytes_stored);
    dsq_json_put_u64(o, "bytes_out", s->bytes_out);
    dsq_json_put_num(o, "compression_ratio", s->bytes_out ? (double)s->bytes_in / (double)s->bytes_out : 0.0,
                     "%.4f");
    dsq_json_put_num(o, "zstd_ratio", s->bytes_stored ? (double)s->bytes_raw / (double)s->bytes_stored : 0.0,
                     "%.4f");
    dsq_json_put_num(o, "seconds", s->seconds, "%.3f");
    dsq_json_put_num(o, "gb_per_s", gbs, "%.3f");
    dsq_json_put_u64(o, "peak_rss_bytes", peak);
    dsq_json_put_int(o, "threads", threads);
    json_object *err = json_object_new_object(), *worst = json_object_new_array();
    char rows[32];
    snprintf(rows, sizeof rows, "1/%d", sample);
    dsq_json_put_str(err, "metric", "||W - deq(Q(W))|| / ||W||");
    dsq_json_put_str(err, "sample_rows", rows);
    dsq_json_put_u64(err, "measured", nm);
    dsq_json_put_num(err, "mean", nm ? sum / (double)nm : 0.0, "%.6g");
    dsq_json_put_num(err, "max", nm ? m[0]->rel_error : 0.0, "%.6g");
    for (size_t i = 0; i < nworst; i++) {
        json_object *w = json_object_new_object();
        dsq_json_put_str(w, "name", m[i]->name);
        dsq_json_put_str(w, "scheme", dsq_scheme_by_id(m[i]->scheme)->name);
        dsq_json_put_num(w, "rel_error", m[i]->rel_error, "%.6g");
        json_object_array_add(worst, w);
    }
    json_object_object_add(err, "worst", worst);
    json_object_object_add(o, "error", err);
    if (rp->level >= 3) {
        json_object *tr = json_object_new_array();
        for (size_t i = 0; i < s->tensors; i++) {
            const dsq_tensor_result *t = &s->results[i];
            json_object *e = json_object_new_object();
            dsq_json_put_str(e, "name", t->name);
            dsq_json_put_str(e, "role", dsq_role_name(t->role));
            dsq_json_put_str(e, "scheme", dsq_scheme_by_id(t->scheme)->name);
            dsq_json_put_u64(e, "source_bytes", t->src_bytes);
            dsq_json_put_u64(e, "raw_bytes", t->raw_bytes);
            dsq_json_put_u64(e, "stored_bytes", t->stored_bytes);
            /* negative: not measured (the row sample skipped it) */
            dsq_json_put_num(e, "rel_error", t->rel_error >= 0 ? t->rel_error : NAN, "%.6g");
            json_object_array_add(tr, e);
        }
        json_object_object_add(o, "tensor_results", tr);
    }
    /* the library's calibration summary is JSON text; parsed, so a
     * broken one is a null here instead of a broken document */
    if (calib_json) json_object_object_add(o, "calibration", json_tokener_parse(calib_json));
    if (s->export.format) {
        json_object *x = json_object_new_object();
        dsq_json_put_str(x, "format", s->export.format);
        dsq_json_put_u64(x, "tensors", s->export.out_tensors);
        dsq_json_put_int(x, "weight_files", s->export.shards);
        dsq_json_put_u64(x, "weight_bytes", s->export.weight_bytes);
        dsq_json_put_u64(x, "dequantized_to_float", s->export.dequantized);
        dsq_json_put_u64(x, "dropped", s->export.dropped);
        dsq_json_put_u64(x, "resumed", s->export.resumed);
        dsq_json_put_num(x, "max_scale_rel_rounding", s->export.max_scale_rel_rounding, "%.6g");
        json_object_object_add(o, "export", x);
    }
    free(wl.m);
}

void dsq_run_report_text(FILE *f, const dsq_run_report *rp)
{
    const dsq_convert_summary *s = rp->s;
    const char *out = rp->output;
    const int threads = rp->threads, sample = rp->error_sample;
    const uint64_t peak = rp->peak_rss;
    double gbs = s->seconds > 0 ? (double)s->bytes_converted / s->seconds / 1e9 : 0;
    worst_list wl;
    worst_init(&wl, s);
    const dsq_tensor_result **m = wl.m;
    const size_t nm = wl.nm, nworst = wl.nworst;
    const double sum = wl.sum;
    char a[32], b[32], r[32];
    fmt_bytes(a, sizeof a, (double)s->bytes_in);
    fmt_bytes(b, sizeof b, (double)s->bytes_out);
    fmt_bytes(r, sizeof r, (double)peak);
    fprintf(f, "%s: %zu tensors", out, s->tensors);
    for (int k = 0; k < DSQ_SCHEME_ID_COUNT; k++)
        if (s->count_by_scheme[k]) fprintf(f, ", %s %zu", dsq_scheme_by_id((uint32_t)k)->name, s->count_by_scheme[k]);
    if (s->resumed) fprintf(f, " (%zu from the interrupted run)", s->resumed);
    fprintf(f, "\n%s -> %s (%.2fx) in %.1f s, %.2f GB/s, peak RSS %s, %d threads\n", a, b,
            s->bytes_out ? (double)s->bytes_in / (double)s->bytes_out : 0.0, s->seconds, gbs, r, threads);
    if (s->export.format) {
        fprintf(f, "%s export: %zu tensors in %d file(s)", s->export.format, s->export.out_tensors,
                s->export.shards);
        if (s->export.dequantized)
            fprintf(f, ", %zu quantized tensors written as float (the target keeps them unquantized)",
                    s->export.dequantized);
        if (s->export.dropped) fprintf(f, ", %zu MTP-layer tensors dropped (the target has no MTP layer)",
                                       s->export.dropped);
        if (s->export.max_scale_rel_rounding > 0)
            fprintf(f, ", scales rounded to 16 bits (max relative change %.3g)", s->export.max_scale_rel_rounding);
        fprintf(f, "\n");
    }
    if (nm) {
        fprintf(f, "relative error (1 row in %d): mean %.4g, worst:\n", sample, sum / (double)nm);
        for (size_t i = 0; i < (nworst < 5 ? nworst : 5); i++)
            fprintf(f, "  %.4g  %s (%s)\n", m[i]->rel_error, m[i]->name, dsq_scheme_by_id(m[i]->scheme)->name);
    }
    free(wl.m);
}

/* A message through note (level 0: a warning). */

void dsq_calib_notes(const dsq_calib_result *r, void (*note)(void *ctx, int level, const char *msg), void *ctx)
{
    size_t nf = dsq_calib_fallback_count(r);
    for (size_t i = 0; i < nf && i < 8; i++) {
        const char *why;
        const char *name = dsq_calib_fallback(r, i, &why);
        dsq_notef(note, ctx, 0, "%s: %s", name, why);
    }
    if (nf > 8)
        dsq_notef(note, ctx, 0, "%zu more experts fell back to round-to-nearest (--json lists them; "
                                "--moe-calib all calibrates every expert)",
                  nf - 8);
    dsq_calib_totals t;
    dsq_calib_get_totals(r, &t);
    for (int l = 0; l < t.layers; l++) {
        const uint64_t *tok;
        int n;
        if (dsq_calib_coverage(r, l, &tok, &n) < 0 || n == 0) continue;
        uint64_t lo = tok[0], hi = tok[0], zero = 0;
        for (int e = 0; e < n; e++) {
            if (tok[e] < lo) lo = tok[e];
            if (tok[e] > hi) hi = tok[e];
            zero += tok[e] == 0;
        }
        dsq_notef(note, ctx, 3, "layer %d: tokens per expert %llu..%llu, %llu experts saw none", l,
                  (unsigned long long)lo, (unsigned long long)hi, (unsigned long long)zero);
    }
    dsq_notef(note, ctx, 2, "calibration: %llu tokens, %d groups searched (output MSE %.4g -> %.4g), %d smoothed, "
                            "%zu experts on RTN fallback, %.1f s",
              (unsigned long long)t.tokens, t.groups_searched, t.loss_identity, t.loss_best, t.groups_smoothed,
              t.fallback_experts, t.seconds);
    for (size_t i = 0; i < dsq_calib_rollback_count(r); i++) {
        double sv;
        const char *name = dsq_calib_rollback(r, i, &sv);
        dsq_notef(note, ctx, 2, "rollback: %s stays float (relative output error %.3g when quantized)", name, sv);
    }
}
