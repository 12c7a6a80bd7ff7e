/* eval_metrics.c - perplexity windows, the DSQLOGP base file and KL
 * divergence (see eval_metrics.h for the conventions and the file layout). */
#include "eval_metrics.h"
#include "dsq_mem.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ====================================================================== */
/* per-row math                                                           */
/* ====================================================================== */

double dsq_log_sum_exp(const float *x, size_t n)
{
    float mx = x[0];
    for (size_t i = 1; i < n; i++)
        if (x[i] > mx) mx = x[i];
    if (isinf(mx)) return mx; /* all -inf, or a +inf logit */
    double s = 0;
    for (size_t i = 0; i < n; i++) s += exp((double)x[i] - (double)mx);
    return (double)mx + log(s);
}

double dsq_token_nll(const float *x, size_t n, int32_t target)
{
    return dsq_log_sum_exp(x, n) - (double)x[target];
}

int32_t dsq_argmax_f32(const float *x, size_t n)
{
    size_t best = 0;
    for (size_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return (int32_t)best;
}

/* ====================================================================== */
/* windows                                                                */
/* ====================================================================== */

int dsq_ppl_plan_init(dsq_ppl_plan *p, size_t n_tokens, size_t n_ctx, int32_t bos, dsq_diag *d)
{
    memset(p, 0, sizeof *p);
    if (n_ctx < 3 || n_ctx > INT32_MAX)
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1,
                        "context %zu out of range: windows need 3 to 2^31-1 tokens", n_ctx);
    if (n_tokens < n_ctx)
        return dsq_fail(d, DSQ_ERR_DATA, NULL, NULL, -1,
                        "the text tokenizes to only %zu tokens, fewer than one window of %zu",
                        n_tokens, n_ctx);
    p->n_ctx = n_ctx;
    p->first = n_ctx / 2;
    p->n_chunks = n_tokens / n_ctx;
    p->per_chunk = n_ctx - 1 - p->first;
    p->bos = bos;
    return DSQ_OK;
}

void dsq_ppl_window(const dsq_ppl_plan *p, const int32_t *tokens, size_t chunk, int32_t *out)
{
    memcpy(out, tokens + chunk * p->n_ctx, p->n_ctx * sizeof *out);
    if (p->bos >= 0) out[0] = p->bos;
}

static int check_tokens(const int32_t *t, size_t n, size_t vocab, const char *what, dsq_diag *d)
{
    for (size_t i = 0; i < n; i++)
        if (t[i] < 0 || (size_t)t[i] >= vocab)
            return dsq_fail(d, DSQ_ERR_DATA, NULL, NULL, -1,
                            "%s token %zu is id %d, outside the vocabulary of %zu", what, i,
                            (int)t[i], vocab);
    return DSQ_OK;
}

/* ====================================================================== */
/* record encoding                                                        */
/* ====================================================================== */

size_t dsq_logp_record_size(int encoding, size_t vocab, int top_k)
{
    size_t n = 16 + 8 * (size_t)top_k;
    if (encoding == DSQ_LOGP_U16) n += 2 * (vocab + (vocab & 1));
    return n;
}

static void put_f32(uint8_t *p, float f) { dsq_store_u32le(p, dsq_f32_bits(f)); }
static float get_f32(const uint8_t *p) { return dsq_bits_f32(dsq_load_u32le(p)); }

typedef struct { float v; uint32_t id; } topent;

/* a ranks above b: larger value, then smaller id */
static int ranks_above(float av, uint32_t aid, float bv, uint32_t bid)
{
    return av > bv || (av == bv && aid < bid);
}

/* Min-heap (worst at the root) of the k best entries. */
static void heap_sift_down(topent *h, int n, int i)
{
    for (;;) {
        int l = 2 * i + 1, r = l + 1, w = i;
        if (l < n && ranks_above(h[w].v, h[w].id, h[l].v, h[l].id)) w = l;
        if (r < n && ranks_above(h[w].v, h[w].id, h[r].v, h[r].id)) w = r;
        if (w == i) return;
        topent t = h[i]; h[i] = h[w]; h[w] = t;
        i = w;
    }
}

static int cmp_topent(const void *a, const void *b)
{
    const topent *x = a, *y = b;
    if (ranks_above(x->v, x->id, y->v, y->id)) return -1;
    if (ranks_above(y->v, y->id, x->v, x->id)) return 1;
    return 0;
}

/* The k best logits, sorted best first. */
static void top_k(const float *x, size_t n, int k, topent *out)
{
    int m = 0;
    for (size_t i = 0; i < n; i++) {
        if (m < k) {
            out[m].v = x[i];
            out[m].id = (uint32_t)i;
            m++;
            if (m == k)
                for (int j = k / 2 - 1; j >= 0; j--) heap_sift_down(out, k, j);
        } else if (ranks_above(x[i], (uint32_t)i, out[0].v, out[0].id)) {
            out[0].v = x[i];
            out[0].id = (uint32_t)i;
            heap_sift_down(out, k, 0);
        }
    }
    qsort(out, (size_t)m, sizeof *out, cmp_topent);
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* Walks ids in increasing order against the sorted top-k ids: O(V + k). */
typedef struct { uint32_t ids[DSQ_LOGP_MAX_TOPK]; int k, pos; } top_walk;

static void top_walk_init(top_walk *w, const topent *t, int k)
{
    for (int i = 0; i < k; i++) w->ids[i] = t[i].id;
    qsort(w->ids, (size_t)k, sizeof w->ids[0], cmp_u32);
    w->k = k;
    w->pos = 0;
}

/* Membership of id; ids must be queried in increasing order. */
static int top_walk_has(top_walk *w, uint32_t id)
{
    while (w->pos < w->k && w->ids[w->pos] < id) w->pos++;
    return w->pos < w->k && w->ids[w->pos] == id;
}

int dsq_logp_encode(const dsq_logp_info *info, const float *logits, int32_t target, uint8_t *rec)
{
    size_t V = info->vocab;
    int K = (int)info->top_k;
    if (target < 0 || (size_t)target >= V || K < 1 || K > DSQ_LOGP_MAX_TOPK || (size_t)K > V)
        return DSQ_ERR_INVALID_ARG;
    double lse = dsq_log_sum_exp(logits, V);
    if (!isfinite(lse)) return DSQ_ERR_NONFINITE;
    topent top[DSQ_LOGP_MAX_TOPK];
    top_k(logits, V, K, top);
    top_walk tw;
    top_walk_init(&tw, top, K);
    uint8_t *kp = rec + 16;
    for (int i = 0; i < K; i++) {
        dsq_store_u32le(kp + 8 * i, top[i].id);
        put_f32(kp + 8 * i + 4, (float)((double)top[i].v - lse));
    }
    put_f32(rec, (float)((double)logits[target] - lse));
    double tail = 0; /* probability mass of unrepresented tokens */
    if (info->encoding == DSQ_LOGP_U16) {
        float lo = logits[0];
        for (size_t i = 1; i < V; i++)
            if (logits[i] < lo) lo = logits[i];
        double top_lp = (double)top[0].v - lse;
        double floor_lp = (double)lo - lse;
        if (floor_lp < top_lp - 16) floor_lp = top_lp - 16;
        float min_lp = (float)floor_lp;
        float scale = (float)((top_lp - (double)min_lp) / 65535.0);
        /* flat rows (every logit equal, or within float rounding of the
         * top): min_lp rounded to float can land just above top_lp, and a
         * negative scale is a malformed record to dsq_logp_compare; with
         * scale 0 every code is 0 and all but the top-k are the tail */
        if (!(scale > 0)) scale = 0;
        put_f32(rec + 8, scale);
        put_f32(rec + 12, min_lp);
        uint8_t *codes = kp + 8 * (size_t)K;
        for (size_t i = 0; i < V; i++) {
            double lp = (double)logits[i] - lse;
            uint16_t c = 0;
            if (scale > 0 && lp > (double)min_lp) {
                double q = nearbyint((lp - (double)min_lp) / (double)scale);
                c = q >= 65535 ? 65535 : q <= 0 ? 0 : (uint16_t)q;
            }
            memcpy(codes + 2 * i, &c, 2);
            if (!top_walk_has(&tw, (uint32_t)i) && c == 0) tail += exp(lp);
        }
        if (V & 1) memset(codes + 2 * V, 0, 2);
    } else {
        put_f32(rec + 8, 0.0f);
        put_f32(rec + 12, 0.0f);
        for (size_t i = 0; i < V; i++)
            if (!top_walk_has(&tw, (uint32_t)i)) tail += exp((double)logits[i] - lse);
    }
    put_f32(rec + 4, tail > 0 ? (float)log(tail) : -INFINITY);
    return DSQ_OK;
}

int dsq_logp_compare(const dsq_logp_info *info, const uint8_t *rec, const float *logits,
                     int32_t target, uint8_t *scratch, dsq_logp_cmp *out)
{
    size_t V = info->vocab;
    int K = (int)info->top_k;
    memset(out, 0, sizeof *out);
    float target_lp = get_f32(rec), tail_lp = get_f32(rec + 4);
    float scale = get_f32(rec + 8), min_lp = get_f32(rec + 12);
    const uint8_t *kp = rec + 16, *codes = kp + 8 * (size_t)K;
    if (isnan(target_lp) || isnan(tail_lp) || tail_lp > 0 || !isfinite(scale) || scale < 0 ||
        !isfinite(min_lp))
        return DSQ_ERR_FORMAT;
    for (int i = 0; i < K; i++) {
        uint32_t id = dsq_load_u32le(kp + 8 * i);
        float lp = get_f32(kp + 8 * i + 4);
        if (id >= V || isnan(lp) || scratch[id]) {
            for (int j = 0; j < i; j++) scratch[dsq_load_u32le(kp + 8 * j)] = 0;
            return DSQ_ERR_FORMAT;
        }
        scratch[id] = 1;
    }
    double lse = dsq_log_sum_exp(logits, V);
    int u16 = info->encoding == DSQ_LOGP_U16;
    /* A = sum p (lp - lq) and S = sum p over the represented tokens */
    double A = 0, S = 0;
    for (int i = 0; i < K; i++) {
        double lp = get_f32(kp + 8 * i + 4), p = exp(lp);
        uint32_t id = dsq_load_u32le(kp + 8 * i);
        A += p * (lp - ((double)logits[id] - lse));
        S += p;
    }
    float tmax = -INFINITY; /* largest new logit on the tail */
    for (size_t i = 0; i < V; i++) {
        if (scratch[i]) continue;
        uint16_t c = 0;
        if (u16) memcpy(&c, codes + 2 * i, 2);
        if (c) {
            double lp = (double)min_lp + (double)scale * c, p = exp(lp);
            A += p * (lp - ((double)logits[i] - lse));
            S += p;
        } else if (logits[i] > tmax) {
            tmax = logits[i];
        }
    }
    /* Rescale the represented probabilities by r so they sum to exactly
     * 1 - P_T: quantization errors then cancel to first order (for p' = r p,
     * sum p' (lp' - lq) = r A + (1 - P_T) log r). */
    double pt = isfinite(tail_lp) ? exp((double)tail_lp) : 0;
    double kl = A;
    if (S > 0 && pt < 1) {
        double r = (1 - pt) / S;
        kl = r * A + (1 - pt) * log(r);
    }
    if (pt > 0) {
        double s = 0;
        if (tmax > -INFINITY) {
            for (size_t i = 0; i < V; i++) {
                if (scratch[i]) continue;
                uint16_t c = 0;
                if (u16) memcpy(&c, codes + 2 * i, 2);
                if (!c) s += exp((double)logits[i] - (double)tmax);
            }
        }
        double log_qt = s > 0 ? (double)tmax + log(s) - lse : -INFINITY;
        kl += pt * ((double)tail_lp - log_qt); /* +inf when the new model puts no mass there */
    }
    for (int i = 0; i < K; i++) scratch[dsq_load_u32le(kp + 8 * i)] = 0;
    out->kld = kl;
    out->nll = lse - (double)logits[target];
    out->nll_base = -(double)target_lp;
    out->same_top = (uint32_t)dsq_argmax_f32(logits, V) == dsq_load_u32le(kp);
    return DSQ_OK;
}

/* ====================================================================== */
/* writer                                                                 */
/* ====================================================================== */

static void header_bytes(const dsq_logp_info *in, uint8_t h[DSQ_LOGP_HEADER])
{
    memset(h, 0, DSQ_LOGP_HEADER);
    memcpy(h, DSQ_LOGP_MAGIC, 8); /* includes the NUL */
    uint32_t f[10] = { DSQ_LOGP_VERSION, DSQ_LOGP_HEADER, in->vocab, in->n_ctx, in->first,
                       in->n_chunks, in->encoding, in->top_k, (uint32_t)in->bos, in->record_size };
    for (int i = 0; i < 10; i++) dsq_store_u32le(h + 8 + 4 * i, f[i]);
    dsq_store_u64le(h + 48, in->n_scored);
}

int dsq_logp_writer_open(dsq_logp_writer *w, const char *path, unsigned flags,
                         const dsq_ppl_plan *p, const int32_t *tokens, size_t vocab,
                         int encoding, int top_k, dsq_diag *d)
{
    memset(w, 0, sizeof *w);
    w->out.fd = -1;
    w->out.slot = -1;
    if (encoding != DSQ_LOGP_U16 && encoding != DSQ_LOGP_TOPK)
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, path, NULL, -1, "unknown log-prob encoding %d", encoding);
    if (top_k < 1 || top_k > DSQ_LOGP_MAX_TOPK || (size_t)top_k > vocab || vocab > INT32_MAX)
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, path, NULL, -1,
                        "top-k %d out of range 1..%d (and at most the vocabulary)", top_k,
                        DSQ_LOGP_MAX_TOPK);
    size_t n_tok = p->n_chunks * p->n_ctx;
    DSQ_TRY(check_tokens(tokens, n_tok, vocab, "input", d));
    dsq_logp_info *in = &w->info;
    in->vocab = (uint32_t)vocab;
    in->n_ctx = (uint32_t)p->n_ctx;
    in->first = (uint32_t)p->first;
    in->n_chunks = (uint32_t)p->n_chunks;
    in->encoding = (uint32_t)encoding;
    in->top_k = (uint32_t)top_k;
    in->bos = p->bos;
    in->record_size = (uint32_t)dsq_logp_record_size(encoding, vocab, top_k);
    in->n_scored = (uint64_t)p->n_chunks * p->per_chunk;
    if (p->n_chunks > UINT32_MAX)
        return dsq_fail(d, DSQ_ERR_OVERFLOW, path, NULL, -1, "too many windows");
    size_t bufsz;
    if (dsq_mul_size(p->per_chunk, in->record_size, &bufsz) < 0)
        return dsq_fail(d, DSQ_ERR_OVERFLOW, path, NULL, -1, "record buffer size overflows");
    w->buf = malloc(bufsz ? bufsz : 1);
    if (!w->buf) return dsq_fail(d, DSQ_ERR_NOMEM, path, NULL, -1, "out of memory");
    uint8_t h[DSQ_LOGP_HEADER], th[DSQ_SHA256_LEN];
    header_bytes(in, h);
    dsq_sha256 hs;
    int rc = dsq_sha256_init(&hs);
    if (rc < 0) { free(w->buf); w->buf = NULL; return dsq_fail(d, rc, path, NULL, -1, "sha-256 init failed"); }
    /* windows exactly as fed: BOS written over each first token */
    int32_t *win = malloc(p->n_ctx * sizeof *win);
    if (!win) { dsq_sha256_release(&hs); free(w->buf); w->buf = NULL; return dsq_fail(d, DSQ_ERR_NOMEM, path, NULL, -1, "out of memory"); }
    rc = dsq_outfile_open(&w->out, path, flags, d);
    if (rc == DSQ_OK) rc = dsq_outfile_write(&w->out, h, sizeof h, d);
    dsq_sha256_update(&hs, h, sizeof h);
    for (size_t c = 0; c < p->n_chunks && rc == DSQ_OK; c++) {
        dsq_ppl_window(p, tokens, c, win);
        rc = dsq_outfile_write(&w->out, win, p->n_ctx * sizeof *win, d);
        dsq_sha256_update(&hs, win, p->n_ctx * sizeof *win);
    }
    free(win);
    dsq_sha256_final(&hs, th);
    if (rc == DSQ_OK) rc = dsq_outfile_write(&w->out, th, sizeof th, d);
    if (rc == DSQ_OK) rc = dsq_sha256_init(&w->data_hash);
    if (rc < 0) {
        dsq_outfile_abort(&w->out);
        free(w->buf);
        w->buf = NULL;
        return rc;
    }
    w->open = 1;
    return DSQ_OK;
}

int dsq_logp_writer_append(dsq_logp_writer *w, const uint8_t *recs, size_t n, dsq_diag *d)
{
    if (!w->open || w->written + n > w->info.n_scored)
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, w->out.path, NULL, -1, "more records than the header declares");
    size_t bytes = n * w->info.record_size;
    dsq_sha256_update(&w->data_hash, recs, bytes);
    w->written += n;
    return dsq_outfile_write(&w->out, recs, bytes, d);
}

int dsq_logp_writer_commit(dsq_logp_writer *w, dsq_diag *d)
{
    if (!w->open) return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "writer not open");
    if (w->written != w->info.n_scored) {
        int rc = dsq_fail(d, DSQ_ERR_INTERNAL, w->out.path, NULL, -1,
                          "%llu of %llu records written", (unsigned long long)w->written,
                          (unsigned long long)w->info.n_scored);
        dsq_logp_writer_abort(w);
        return rc;
    }
    uint8_t dh[DSQ_SHA256_LEN];
    dsq_sha256_final(&w->data_hash, dh);
    w->open = 0;
    int rc = dsq_outfile_write(&w->out, dh, sizeof dh, d);
    if (rc == DSQ_OK) rc = dsq_outfile_commit(&w->out, d);
    else dsq_outfile_abort(&w->out);
    free(w->buf);
    w->buf = NULL;
    return rc;
}

void dsq_logp_writer_abort(dsq_logp_writer *w)
{
    if (w->open) dsq_sha256_release(&w->data_hash);
    w->open = 0;
    if (w->out.path || w->out.tmp_path) dsq_outfile_abort(&w->out); /* never on a zeroed struct */
    free(w->buf);
    w->buf = NULL;
}

/* ====================================================================== */
/* reader                                                                 */
/* ====================================================================== */

/* Validate the bytes r->map holds (file or caller's buffer); r->path set. */
static int reader_check(dsq_logp_reader *r, const char *path, dsq_diag *d)
{
    const uint8_t *m = r->map.data;
    uint64_t size = r->map.size;
    int rc = DSQ_OK;
#define BAD(st, off, ...) do { rc = dsq_fail(d, st, path, NULL, off, __VA_ARGS__); goto fail; } while (0)
    if (size < DSQ_LOGP_HEADER) BAD(DSQ_ERR_TRUNCATED, (int64_t)size, "file too short for a DSQLOGP header");
    if (memcmp(m, DSQ_LOGP_MAGIC, 8) != 0) BAD(DSQ_ERR_FORMAT, 0, "not a dsq base log-prob file (bad magic)");
    uint32_t version = dsq_load_u32le(m + 8), hsize = dsq_load_u32le(m + 12);
    if (version != DSQ_LOGP_VERSION) BAD(DSQ_ERR_UNSUPPORTED, 8, "version %u not supported (expected %d)", version, DSQ_LOGP_VERSION);
    if (hsize != DSQ_LOGP_HEADER) BAD(DSQ_ERR_FORMAT, 12, "header size %u, expected %d", hsize, DSQ_LOGP_HEADER);
    dsq_logp_info *in = &r->info;
    in->vocab = dsq_load_u32le(m + 16);
    in->n_ctx = dsq_load_u32le(m + 20);
    in->first = dsq_load_u32le(m + 24);
    in->n_chunks = dsq_load_u32le(m + 28);
    in->encoding = dsq_load_u32le(m + 32);
    in->top_k = dsq_load_u32le(m + 36);
    in->bos = (int32_t)dsq_load_u32le(m + 40);
    in->record_size = dsq_load_u32le(m + 44);
    in->n_scored = dsq_load_u64le(m + 48);
    for (int i = 56; i < 64; i++)
        if (m[i]) BAD(DSQ_ERR_FORMAT, i, "reserved header bytes are not zero");
    if (in->vocab < 2 || in->vocab > INT32_MAX) BAD(DSQ_ERR_FORMAT, 16, "vocabulary size %u out of range", in->vocab);
    if (in->n_ctx < 3 || in->n_ctx > INT32_MAX) BAD(DSQ_ERR_FORMAT, 20, "context %u out of range", in->n_ctx);
    if (in->first != in->n_ctx / 2) BAD(DSQ_ERR_FORMAT, 24, "first scored position %u is not n_ctx/2", in->first);
    if (in->n_chunks < 1) BAD(DSQ_ERR_FORMAT, 28, "no windows");
    if (in->encoding != DSQ_LOGP_U16 && in->encoding != DSQ_LOGP_TOPK) BAD(DSQ_ERR_FORMAT, 32, "unknown encoding %u", in->encoding);
    if (in->top_k < 1 || in->top_k > DSQ_LOGP_MAX_TOPK || in->top_k > in->vocab) BAD(DSQ_ERR_FORMAT, 36, "top-k %u out of range", in->top_k);
    if (in->bos < -1 || (in->bos >= 0 && (uint32_t)in->bos >= in->vocab)) BAD(DSQ_ERR_FORMAT, 40, "bos id %d out of range", in->bos);
    if (in->record_size != dsq_logp_record_size((int)in->encoding, in->vocab, (int)in->top_k))
        BAD(DSQ_ERR_FORMAT, 44, "record size %u does not match encoding, vocabulary and top-k", in->record_size);
    uint64_t per = in->n_ctx - 1 - in->first, n_tok, rec_bytes, want;
    if (in->n_scored != (uint64_t)in->n_chunks * per) BAD(DSQ_ERR_FORMAT, 48, "scored count does not match windows");
    if (dsq_mul_u64((uint64_t)in->n_chunks, in->n_ctx, &n_tok) < 0 ||
        dsq_mul_u64(in->n_scored, in->record_size, &rec_bytes) < 0 ||
        __builtin_add_overflow((uint64_t)DSQ_LOGP_HEADER + 2 * DSQ_SHA256_LEN, rec_bytes, &want) ||
        n_tok > UINT64_MAX / 8 || __builtin_add_overflow(want, 4 * n_tok, &want))
        BAD(DSQ_ERR_OVERFLOW, 16, "declared sizes overflow");
    if (size < want) BAD(DSQ_ERR_TRUNCATED, (int64_t)size, "file is %llu bytes, header declares %llu",
                         (unsigned long long)size, (unsigned long long)want);
    if (size > want) BAD(DSQ_ERR_FORMAT, (int64_t)want, "file is %llu bytes, header declares %llu",
                         (unsigned long long)size, (unsigned long long)want);
    uint8_t th[DSQ_SHA256_LEN];
    size_t hashed = DSQ_LOGP_HEADER + 4 * (size_t)n_tok;
    if ((rc = dsq_sha256_buf(m, hashed, th)) < 0) BAD(rc, -1, "sha-256 failed");
    if (memcmp(th, m + hashed, DSQ_SHA256_LEN) != 0)
        BAD(DSQ_ERR_CHECKSUM, (int64_t)hashed, "token hash mismatch: header or tokens are corrupt");
    memcpy(r->token_hash, th, sizeof th);
    r->tokens = (const int32_t *)(const void *)(m + DSQ_LOGP_HEADER);
    r->records = m + hashed + DSQ_SHA256_LEN;
    for (uint64_t i = 0; i < n_tok; i++) {
        int32_t t = (int32_t)dsq_load_u32le(m + DSQ_LOGP_HEADER + 4 * i);
        if (t < 0 || (uint32_t)t >= in->vocab)
            BAD(DSQ_ERR_FORMAT, (int64_t)(DSQ_LOGP_HEADER + 4 * i), "token id %d outside the vocabulary", t);
    }
#undef BAD
    return DSQ_OK;
fail:
    return rc;
}

int dsq_logp_reader_open(dsq_logp_reader *r, const char *path, dsq_diag *d)
{
    memset(r, 0, sizeof *r);
    r->map.fd = -1;
    DSQ_TRY(dsq_map_open(&r->map, path, d));
    r->path = strdup(path);
    int rc = r->path ? reader_check(r, path, d) : dsq_fail(d, DSQ_ERR_NOMEM, path, NULL, -1, "out of memory");
    if (rc < 0) dsq_logp_reader_close(r);
    return rc;
}

int dsq_logp_reader_open_mem(dsq_logp_reader *r, const void *data, size_t size, const char *name,
                             dsq_diag *d)
{
    memset(r, 0, sizeof *r);
    r->map.fd = -1;
    if (!name) name = "<memory>";
    if (!data && size) return dsq_fail(d, DSQ_ERR_INVALID_ARG, name, NULL, -1, "null buffer");
    /* the tokens are used in place as int32_t */
    if ((uintptr_t)data % _Alignof(int32_t))
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, name, NULL, -1, "buffer is not 4-byte aligned");
    r->map.data = data;
    r->map.size = size;
    r->borrowed = 1;
    r->path = strdup(name);
    int rc = r->path ? reader_check(r, name, d) : dsq_fail(d, DSQ_ERR_NOMEM, name, NULL, -1, "out of memory");
    if (rc < 0) dsq_logp_reader_close(r);
    return rc;
}

int dsq_logp_reader_verify(const dsq_logp_reader *r, dsq_diag *d)
{
    uint8_t h[DSQ_SHA256_LEN];
    size_t n = (size_t)(r->info.n_scored * r->info.record_size);
    int rc = dsq_sha256_buf(r->records, n, h);
    if (rc < 0) return dsq_fail(d, rc, r->path, NULL, -1, "sha-256 failed");
    if (memcmp(h, r->records + n, DSQ_SHA256_LEN) != 0)
        return dsq_fail(d, DSQ_ERR_CHECKSUM, r->path, NULL, (int64_t)(r->records + n - r->map.data),
                        "log-prob data hash mismatch: the file is corrupt");
    return DSQ_OK;
}

void dsq_logp_reader_close(dsq_logp_reader *r)
{
    if (!r->borrowed) dsq_map_close(&r->map); /* open_mem: the caller's buffer */
    free(r->path);
    memset(r, 0, sizeof *r);
    r->map.fd = -1;
}

void dsq_logp_reader_plan(const dsq_logp_reader *r, dsq_ppl_plan *p)
{
    p->n_ctx = r->info.n_ctx;
    p->first = r->info.first;
    p->n_chunks = r->info.n_chunks;
    p->per_chunk = r->info.n_ctx - 1 - r->info.first;
    p->bos = r->info.bos;
}

/* ====================================================================== */
/* perplexity                                                             */
/* ====================================================================== */

typedef struct {
    const float *logits;
    const int32_t *targets;  /* per scored position */
    size_t vocab;
    double *nll;
    /* save */
    const dsq_logp_info *info;
    uint8_t *recs;
    int *status;
    /* kld */
    const uint8_t *base;
    uint8_t *scratch;        /* vocab bytes per thread */
    dsq_logp_cmp *cmp;
} pos_job;

static void ppl_pos(void *ctx, size_t j, int tid)
{
    (void)tid;
    pos_job *jb = ctx;
    const float *row = jb->logits + j * jb->vocab;
    jb->nll[j] = dsq_token_nll(row, jb->vocab, jb->targets[j]);
    if (jb->recs) {
        int rc = dsq_logp_encode(jb->info, row, jb->targets[j], jb->recs + j * jb->info->record_size);
        if (rc < 0) jb->status[j] = rc;
    }
}

static int alloc_logits(float **out, size_t rows, size_t vocab, dsq_diag *d)
{
    size_t n;
    if (dsq_mul_size(rows, vocab, &n) < 0 || dsq_mul_size(n, sizeof(float), &n) < 0)
        return dsq_fail(d, DSQ_ERR_OVERFLOW, NULL, NULL, -1, "logits buffer size overflows");
    *out = malloc(n ? n : 1);
    return *out ? DSQ_OK : dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory (%zu bytes of logits)", n);
}

int dsq_ppl_run(const dsq_ppl_plan *p, const int32_t *tokens, size_t vocab,
                dsq_window_logits_fn fn, void *user, struct dsq_logp_writer *save,
                const dsq_eval_hooks *h, dsq_ppl_result *r, dsq_diag *d)
{
    static const dsq_eval_hooks none;
    if (!h) h = &none;
    memset(r, 0, sizeof *r);
    if (!p->n_chunks || !vocab) return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "empty plan");
    DSQ_TRY(check_tokens(tokens, p->n_chunks * p->n_ctx, vocab, "input", d));
    if (save && (save->info.vocab != vocab || save->info.n_ctx != p->n_ctx || save->info.n_chunks != p->n_chunks))
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "log-prob writer opened for another plan");
    size_t per = p->per_chunk;
    float *logits = NULL;
    int32_t *win = malloc(p->n_ctx * sizeof *win);
    double *nll = malloc(per * sizeof *nll);
    int *status = calloc(per, sizeof *status);
    int rc = alloc_logits(&logits, per, vocab, d);
    if (rc == DSQ_OK && (!win || !nll || !status)) rc = dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    double sum = 0, sum2 = 0;
    uint64_t count = 0;
    for (size_t c = 0; c < p->n_chunks && rc == DSQ_OK; c++) {
        if (h->cancel && *h->cancel) { rc = DSQ_ERR_INTERRUPTED; break; }
        dsq_ppl_window(p, tokens, c, win);
        rc = fn(user, win, p->n_ctx, p->first, logits, d);
        if (rc < 0) break;
        pos_job jb = { .logits = logits, .targets = win + p->first + 1, .vocab = vocab, .nll = nll,
                       .info = save ? &save->info : NULL, .recs = save ? save->buf : NULL,
                       .status = status };
        dsq_pool_run(h->pool, per, ppl_pos, &jb);
        for (size_t j = 0; j < per; j++) {
            if (status[j] < 0 || !isfinite(nll[j])) {
                rc = dsq_fail(d, status[j] < 0 ? status[j] : DSQ_ERR_NONFINITE, NULL, NULL, -1,
                              "window %zu position %zu: non-finite logits", c, p->first + j);
                break;
            }
            sum += nll[j];
            sum2 += nll[j] * nll[j];
            count++;
        }
        if (rc == DSQ_OK && save) rc = dsq_logp_writer_append(save, save->buf, per, d);
        if (rc == DSQ_OK && h->progress) h->progress(h->progress_user, c + 1, p->n_chunks);
    }
    free(win);
    free(nll);
    free(status);
    free(logits);
    if (rc < 0) return rc;
    r->n_chunks = p->n_chunks;
    r->count = count;
    r->nll_sum = sum;
    r->nll2_sum = sum2;
    r->mean_nll = sum / (double)count;
    r->ppl = exp(r->mean_nll);
    double var = sum2 / (double)count - r->mean_nll * r->mean_nll;
    r->ppl_stderr = count > 1 && var > 0 ? r->ppl * sqrt(var / (double)(count - 1)) : 0;
    return DSQ_OK;
}

/* ====================================================================== */
/* KL divergence                                                          */
/* ====================================================================== */

double dsq_percentile_sorted(const float *v, size_t n, double q)
{
    if (n == 0) return NAN;
    if (q <= 0) return v[0];
    if (q >= 1) return v[n - 1];
    double pos = q * (double)(n - 1);
    size_t i = (size_t)pos;
    double f = pos - (double)i;
    size_t j = i + 1 < n ? i + 1 : n - 1;
    return (1 - f) * (double)v[i] + f * (double)v[j];
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static void kld_pos(void *ctx, size_t j, int tid)
{
    pos_job *jb = ctx;
    jb->status[j] = dsq_logp_compare(jb->info, jb->base + j * jb->info->record_size,
                                     jb->logits + j * jb->vocab, jb->targets[j],
                                     jb->scratch + (size_t)tid * jb->vocab, &jb->cmp[j]);
}

void dsq_kld_sums_add(dsq_kld_sums *s, double kld, double nll, double nll_base)
{
    s->kld += kld;
    s->kld2 += kld * kld;
    s->nll += nll;
    s->nll_base += nll_base;
    double df = nll - nll_base, dp = exp(-nll) - exp(-nll_base);
    s->diff += df;
    s->diff2 += df * df;
    s->dp2 += dp * dp;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int dsq_kld_bootstrap(const float *klds, uint64_t count, size_t per_window, unsigned n_boot, uint64_t seed,
                      double *lo, double *hi)
{
    *lo = *hi = 0.0;
    if (count == 0) return DSQ_OK;
    if (per_window == 0 || per_window > count) per_window = (size_t)count;
    size_t nw = (size_t)((count + per_window - 1) / per_window);
    double *ws = malloc(nw * sizeof *ws), *cnt = malloc(nw * sizeof *cnt);
    double *means = n_boot ? malloc((size_t)n_boot * sizeof *means) : NULL;
    if (!ws || !cnt || (n_boot && !means)) {
        free(ws);
        free(cnt);
        free(means);
        return DSQ_ERR_NOMEM;
    }
    double total = 0.0;
    for (size_t w = 0; w < nw; w++) {
        uint64_t a = (uint64_t)w * per_window, b = a + per_window < count ? a + per_window : count;
        double sum = 0.0;
        for (uint64_t i = a; i < b; i++) sum += klds[i];
        ws[w] = sum;
        cnt[w] = (double)(b - a);
        total += sum;
    }
    *lo = *hi = total / (double)count;
    uint64_t x = seed ? seed : 1;
    for (unsigned k = 0; k < n_boot; k++) {
        double sum = 0.0, nn = 0.0;
        for (size_t w = 0; w < nw; w++) {
            x ^= x >> 12;   /* xorshift64* */
            x ^= x << 25;
            x ^= x >> 27;
            uint64_t u = x * 0x2545f4914f6cdd1dull;
            size_t pick = (size_t)((u >> 11) % nw);
            sum += ws[pick];
            nn += cnt[pick];
        }
        means[k] = sum / nn;
    }
    if (n_boot) {
        qsort(means, n_boot, sizeof *means, cmp_double);
        /* linear interpolation between order statistics, at pos = q (n - 1),
         * as dsq_percentile_sorted places it (on doubles: a + f (b - a)) */
        for (int t = 0; t < 2; t++) {
            double pos = (t ? 0.975 : 0.025) * (double)(n_boot - 1);
            size_t i = (size_t)pos;
            double f = pos - (double)i, v = i + 1 < n_boot ? means[i] + f * (means[i + 1] - means[i]) : means[i];
            if (t) *hi = v;
            else *lo = v;
        }
    }
    free(ws);
    free(cnt);
    free(means);
    return DSQ_OK;
}

int dsq_kld_finish(dsq_kld_result *r, const dsq_kld_sums *s, float *klds, uint64_t count, size_t per_window)
{
    DSQ_TRY(dsq_kld_bootstrap(klds, count, per_window, DSQ_KLD_BOOT_N, DSQ_KLD_BOOT_SEED, &r->kld_mean_lo,
                              &r->kld_mean_hi));
    double n = (double)count;
    r->count = count;
    r->kld_mean = s->kld / n;
    double var = s->kld2 / n - r->kld_mean * r->kld_mean;
    r->kld_stderr = count > 1 && var > 0 ? sqrt(var / (n - 1)) : 0;
    qsort(klds, count, sizeof *klds, cmp_float);
    r->kld_min = klds[0];
    r->kld_max = klds[count - 1];
    r->kld_p01 = dsq_percentile_sorted(klds, count, 0.01);
    r->kld_p05 = dsq_percentile_sorted(klds, count, 0.05);
    r->kld_p10 = dsq_percentile_sorted(klds, count, 0.10);
    r->kld_median = dsq_percentile_sorted(klds, count, 0.50);
    r->kld_p90 = dsq_percentile_sorted(klds, count, 0.90);
    r->kld_p95 = dsq_percentile_sorted(klds, count, 0.95);
    r->kld_p99 = dsq_percentile_sorted(klds, count, 0.99);
    r->kld_p999 = dsq_percentile_sorted(klds, count, 0.999);
    r->ppl = exp(s->nll / n);
    r->ppl_base = exp(s->nll_base / n);
    r->ppl_ratio = r->ppl / r->ppl_base;
    r->ppl_delta = r->ppl - r->ppl_base;
    r->ln_ratio_mean = s->diff / n;
    var = s->diff2 / n - r->ln_ratio_mean * r->ln_ratio_mean;
    r->ln_ratio_stderr = count > 1 && var > 0 ? sqrt(var / (n - 1)) : 0;
    r->dp_rms = sqrt(s->dp2 / n);
    return DSQ_OK;
}

int dsq_kld_run(const dsq_logp_reader *base, size_t vocab, dsq_window_logits_fn fn,
                void *user, const dsq_eval_hooks *h, dsq_kld_result *r, dsq_diag *d)
{
    static const dsq_eval_hooks none;
    if (!h) h = &none;
    memset(r, 0, sizeof *r);
    const dsq_logp_info *in = &base->info;
    if (vocab != in->vocab)
        return dsq_fail(d, DSQ_ERR_SHAPE, base->path, NULL, -1,
                        "the model has %zu logits per token, the base was computed with %u",
                        vocab, in->vocab);
    dsq_ppl_plan p;
    dsq_logp_reader_plan(base, &p);
    size_t per = p.per_chunk, nthreads = (size_t)dsq_pool_size(h->pool);
    float *logits = NULL;
    float *klds = malloc((size_t)in->n_scored * sizeof *klds);
    dsq_logp_cmp *cmp = malloc(per * sizeof *cmp);
    int *status = calloc(per, sizeof *status);
    uint8_t *scratch = calloc(nthreads, vocab);
    int rc = alloc_logits(&logits, per, vocab, d);
    if (rc == DSQ_OK && (!klds || !cmp || !status || !scratch))
        rc = dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    dsq_sha256 hs;
    int hashing = 0;
    if (rc == DSQ_OK) {
        rc = dsq_sha256_init(&hs);
        hashing = rc == DSQ_OK;
    }
    dsq_kld_sums sums = { 0 };
    uint64_t count = 0, same = 0;
    for (size_t c = 0; c < p.n_chunks && rc == DSQ_OK; c++) {
        if (h->cancel && *h->cancel) { rc = DSQ_ERR_INTERRUPTED; break; }
        const int32_t *win = base->tokens + c * p.n_ctx; /* stored as fed */
        const uint8_t *recs = base->records + (size_t)c * per * in->record_size;
        dsq_sha256_update(&hs, recs, per * in->record_size);
        rc = fn(user, win, p.n_ctx, p.first, logits, d);
        if (rc < 0) break;
        pos_job jb = { .logits = logits, .targets = win + p.first + 1, .vocab = vocab,
                       .info = in, .base = recs, .scratch = scratch, .cmp = cmp, .status = status };
        dsq_pool_run(h->pool, per, kld_pos, &jb);
        for (size_t j = 0; j < per; j++) {
            const dsq_logp_cmp *x = &cmp[j];
            if (status[j] < 0) {
                rc = dsq_fail(d, status[j], base->path, NULL,
                              (int64_t)(recs + j * in->record_size - base->map.data),
                              "window %zu position %zu: malformed record", c, p.first + j);
                break;
            }
            if (!isfinite(x->nll) || isnan(x->kld)) {
                rc = dsq_fail(d, DSQ_ERR_NONFINITE, NULL, NULL, -1,
                              "window %zu position %zu: non-finite logits", c, p.first + j);
                break;
            }
            klds[count++] = (float)x->kld;
            dsq_kld_sums_add(&sums, x->kld, x->nll, x->nll_base);
            same += (uint64_t)x->same_top;
        }
        if (rc == DSQ_OK && h->progress) h->progress(h->progress_user, c + 1, p.n_chunks);
    }
    if (hashing) {
        uint8_t dh[DSQ_SHA256_LEN];
        dsq_sha256_final(&hs, dh);
        const uint8_t *stored = base->records + in->n_scored * in->record_size;
        if (rc == DSQ_OK && memcmp(dh, stored, DSQ_SHA256_LEN) != 0)
            rc = dsq_fail(d, DSQ_ERR_CHECKSUM, base->path, NULL, (int64_t)(stored - base->map.data),
                          "log-prob data hash mismatch: the base file is corrupt");
    }
    if (rc == DSQ_OK) {
        rc = dsq_kld_finish(r, &sums, klds, count, per);
        if (rc < 0) rc = dsq_fail(d, rc, NULL, NULL, -1, "out of memory");
    }
    if (rc == DSQ_OK) {
        double n = (double)count;
        r->same_top = (double)same / n;
        r->same_top_stderr = count > 1 ? sqrt(r->same_top * (1 - r->same_top) / (n - 1)) : 0;
    }
    free(logits);
    free(klds);
    free(cmp);
    free(status);
    free(scratch);
    return rc;
}
