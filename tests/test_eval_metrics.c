/* test_eval_metrics.c - perplexity windows, NLL, KL divergence and the
 * DSQLOGP base file, all driven by hand-made logits. */
#include "dsq_test.h"
#include "eval_metrics.h"
#include "dsq_mem.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- a fake model --------------------------------------------------------- */

/* Logits after position p depend on the window up to p (causal) and on a
 * perturbation that makes a "quantized" variant differ. */
typedef struct {
    size_t vocab;
    double eps;          /* perturbation size */
    int calls;
    int32_t seen[8][64]; /* windows received */
    size_t seen_first;
    int nan_at_call;     /* 1-based call that returns a NaN, 0 never */
} fake;

static void fake_row(const fake *f, const int32_t *w, size_t p, float *row)
{
    double ctx = 0;
    for (size_t i = 0; i <= p; i++) ctx += 0.37 * w[i] + 0.11 * (double)i;
    for (size_t v = 0; v < f->vocab; v++)
        row[v] = (float)(2.5 * sin(0.7 * (double)v + 1.3 * w[p] + 0.05 * ctx) + 0.2 * (double)(v % 3) +
                         f->eps * cos(1.9 * (double)v + (double)p));
}

static int fake_logits(void *u, const int32_t *w, size_t n, size_t first, float *logits, dsq_diag *d)
{
    (void)d;
    fake *f = u;
    if (f->calls < 8) memcpy(f->seen[f->calls], w, (n < 64 ? n : 64) * sizeof *w);
    f->calls++;
    f->seen_first = first;
    for (size_t p = first; p + 1 < n; p++) fake_row(f, w, p, logits + (p - first) * f->vocab);
    if (f->nan_at_call == f->calls) logits[1] = NAN;
    return 0;
}

/* independent reference math */
static double ref_lse(const float *x, size_t n)
{
    double m = -INFINITY, s = 0;
    for (size_t i = 0; i < n; i++) if (x[i] > m) m = x[i];
    for (size_t i = 0; i < n; i++) s += exp((double)x[i] - m);
    return m + log(s);
}

static double ref_kl(const float *p, const float *q, size_t n)
{
    double lp = ref_lse(p, n), lq = ref_lse(q, n), kl = 0;
    for (size_t i = 0; i < n; i++) {
        double a = p[i] - lp, b = q[i] - lq;
        kl += exp(a) * (a - b);
    }
    return kl;
}

#define NEAR(a, b, tol) do { double a_ = (a), b_ = (b); \
    if (!(fabs(a_ - b_) <= (tol))) fail_msg("%s = %.12g, want %.12g (tol %g)", #a, a_, b_, (double)(tol)); } while (0)

/* ---- row math ----------------------------------------------------------------- */

static void test_nll_math(void **state)
{
    (void)state;
    float u[5] = { 0, 0, 0, 0, 0 };
    NEAR(dsq_token_nll(u, 5, 3), log(5.0), 1e-12);
    float x[4] = { 1.0f, 3.0f, -2.0f, 3.0f };
    double lse = log(exp(1.0) + 2 * exp(3.0) + exp(-2.0));
    NEAR(dsq_log_sum_exp(x, 4), lse, 1e-12);
    NEAR(dsq_token_nll(x, 4, 2), lse + 2.0, 1e-12);
    assert_int_equal(dsq_argmax_f32(x, 4), 1); /* first of the tie */
    /* huge logits do not overflow */
    float big[3] = { 1000.0f, 999.0f, -1000.0f };
    NEAR(dsq_token_nll(big, 3, 0), log(1 + exp(-1.0) + exp(-2000.0)), 1e-9);
    float s[5] = { 1, 2, 3, 4, 5 };
    NEAR(dsq_percentile_sorted(s, 5, 0.5), 3.0, 0);
    NEAR(dsq_percentile_sorted(s, 4, 0.5), 2.5, 1e-12);
    NEAR(dsq_percentile_sorted(s, 5, 0.99), 4.96, 1e-6);
    NEAR(dsq_percentile_sorted(s, 5, 0.0), 1.0, 0);
    NEAR(dsq_percentile_sorted(s, 5, 1.0), 5.0, 0);
}

/* ---- windows ------------------------------------------------------------------- */

static void test_plan(void **state)
{
    (void)state;
    dsq_ppl_plan p;
    assert_int_equal(dsq_ppl_plan_init(&p, 1100, 512, 1, NULL), 0);
    assert_int_equal(p.first, 256);
    assert_int_equal(p.per_chunk, 255);
    assert_int_equal(p.n_chunks, 2);
    assert_int_equal(dsq_ppl_plan_init(&p, 3, 3, -1, NULL), 0);
    assert_int_equal(p.per_chunk, 1);
    dsq_diag d;
    dsq_diag_clear(&d);
    assert_int_equal(dsq_ppl_plan_init(&p, 100, 512, 1, &d), DSQ_ERR_DATA);
    assert_non_null(strstr(d.msg, "only 100 tokens"));
    assert_int_equal(dsq_ppl_plan_init(&p, 100, 2, 1, NULL), DSQ_ERR_INVALID_ARG);

    int32_t t[8] = { 10, 11, 12, 13, 14, 15, 16, 17 }, w[4];
    assert_int_equal(dsq_ppl_plan_init(&p, 8, 4, 99, NULL), 0);
    dsq_ppl_window(&p, t, 1, w);
    assert_int_equal(w[0], 99);
    assert_int_equal(w[1], 15);
    assert_int_equal(t[4], 14); /* the input is not modified */
}

static void test_ppl_hand(void **state)
{
    (void)state;
    enum { V = 7, NCTX = 6, NTOK = 13 };
    int32_t tok[NTOK];
    for (int i = 0; i < NTOK; i++) tok[i] = (i * 5 + 2) % V;
    dsq_ppl_plan p;
    assert_int_equal(dsq_ppl_plan_init(&p, NTOK, NCTX, 0, NULL), 0);
    assert_int_equal(p.n_chunks, 2);
    fake f = { .vocab = V };
    dsq_ppl_result r;
    assert_int_equal(dsq_ppl_run(&p, tok, V, fake_logits, &f, NULL, NULL, &r, NULL), 0);
    /* windows: BOS over the first token, non-overlapping, the leftover unused */
    assert_int_equal(f.calls, 2);
    assert_int_equal(f.seen_first, 3);
    for (int c = 0; c < 2; c++) {
        assert_int_equal(f.seen[c][0], 0);
        for (int i = 1; i < NCTX; i++) assert_int_equal(f.seen[c][i], tok[c * NCTX + i]);
    }
    /* by hand: positions 3 and 4 of each window predict tokens 4 and 5 */
    double sum = 0, sum2 = 0;
    for (int c = 0; c < 2; c++) {
        int32_t w[NCTX];
        memcpy(w, tok + c * NCTX, sizeof w);
        w[0] = 0;
        for (int pos = 3; pos <= 4; pos++) {
            float row[V];
            fake_row(&f, w, (size_t)pos, row);
            double nll = ref_lse(row, V) - row[w[pos + 1]];
            sum += nll;
            sum2 += nll * nll;
        }
    }
    assert_int_equal(r.count, 4);
    NEAR(r.nll_sum, sum, 1e-9);
    NEAR(r.mean_nll, sum / 4, 1e-9);
    NEAR(r.ppl, exp(sum / 4), 1e-9);
    double var = sum2 / 4 - (sum / 4) * (sum / 4);
    NEAR(r.ppl_stderr, exp(sum / 4) * sqrt(var / 3), 1e-9);

    /* same numbers with a thread pool */
    dsq_pool *pool = dsq_pool_create(3);
    assert_non_null(pool);
    dsq_eval_hooks h = { .pool = pool };
    dsq_ppl_result r2;
    assert_int_equal(dsq_ppl_run(&p, tok, V, fake_logits, &f, NULL, &h, &r2, NULL), 0);
    assert_memory_equal(&r, &r2, sizeof r);
    dsq_pool_free(pool);

    /* bad input */
    int32_t badtok[NTOK];
    memcpy(badtok, tok, sizeof tok);
    badtok[7] = V;
    dsq_diag d;
    dsq_diag_clear(&d);
    assert_int_equal(dsq_ppl_run(&p, badtok, V, fake_logits, &f, NULL, NULL, &r, &d), DSQ_ERR_DATA);
    fake g = { .vocab = V, .nan_at_call = 2 };
    dsq_diag_clear(&d);
    assert_int_equal(dsq_ppl_run(&p, tok, V, fake_logits, &g, NULL, NULL, &r, &d), DSQ_ERR_NONFINITE);
    assert_non_null(strstr(d.msg, "window 1"));
    volatile int cancel = 1;
    dsq_eval_hooks hc = { .cancel = &cancel };
    assert_int_equal(dsq_ppl_run(&p, tok, V, fake_logits, &f, NULL, &hc, &r, NULL), DSQ_ERR_INTERRUPTED);
}

static int uniform_logits(void *u, const int32_t *w, size_t n, size_t first, float *logits, dsq_diag *d)
{
    (void)w; (void)d;
    size_t V = *(size_t *)u;
    memset(logits, 0, (n - 1 - first) * V * sizeof *logits);
    return 0;
}

static void test_ppl_uniform(void **state)
{
    (void)state;
    size_t V = 11;
    int32_t tok[40];
    for (int i = 0; i < 40; i++) tok[i] = i % 11;
    dsq_ppl_plan p;
    assert_int_equal(dsq_ppl_plan_init(&p, 40, 8, -1, NULL), 0);
    dsq_ppl_result r;
    assert_int_equal(dsq_ppl_run(&p, tok, V, uniform_logits, &V, NULL, NULL, &r, NULL), 0);
    assert_int_equal(r.count, 5 * 3);
    NEAR(r.ppl, 11.0, 1e-9);
    NEAR(r.ppl_stderr, 0.0, 1e-9);
}

/* ---- records and KLD ---------------------------------------------------------------- */

static void make_info(dsq_logp_info *in, int enc, size_t V, int K)
{
    memset(in, 0, sizeof *in);
    in->vocab = (uint32_t)V;
    in->encoding = (uint32_t)enc;
    in->top_k = (uint32_t)K;
    in->record_size = (uint32_t)dsq_logp_record_size(enc, V, K);
}

static void test_record_kld(void **state)
{
    (void)state;
    enum { V = 301 };
    float a[V], b[V];
    for (int i = 0; i < V; i++) {
        a[i] = (float)(3 * sin(0.37 * i) + (i == 17 ? 6 : 0));
        b[i] = a[i] + (float)(0.3 * cos(1.1 * i));
    }
    uint8_t *scratch = calloc(V, 1), *rec = malloc(dsq_logp_record_size(DSQ_LOGP_U16, V, 256));
    dsq_logp_info in;
    dsq_logp_cmp c;
    double exact = ref_kl(a, b, V);
    assert_true(exact > 0.01);

    /* topk, most tokens represented: identical logits give ~0 */
    make_info(&in, DSQ_LOGP_TOPK, V, 256);
    in.top_k = 256; /* < V: tail bucket */
    in.record_size = (uint32_t)dsq_logp_record_size(DSQ_LOGP_TOPK, V, 256);
    assert_int_equal(dsq_logp_encode(&in, a, 5, rec), 0);
    assert_int_equal(dsq_logp_compare(&in, rec, a, 5, scratch, &c), 0);
    NEAR(c.kld, 0.0, 1e-6);
    assert_int_equal(c.same_top, 1);
    NEAR(c.nll_base, ref_lse(a, V) - a[5], 1e-5);
    NEAR(c.nll, c.nll_base, 1e-5);
    assert_int_equal(dsq_logp_compare(&in, rec, b, 5, scratch, &c), 0);
    /* merging the tail can only lower KL, and by little here */
    assert_true(c.kld <= exact + 1e-6);
    assert_true(c.kld > 0.5 * exact);
    for (int i = 0; i < V; i++) assert_int_equal(scratch[i], 0);

    /* coarse KL by hand for a small top-k */
    make_info(&in, DSQ_LOGP_TOPK, V, 4);
    assert_int_equal(dsq_logp_encode(&in, a, 5, rec), 0);
    assert_int_equal(dsq_load_u32le(rec + 16), 17); /* top-1 */
    assert_int_equal(dsq_logp_compare(&in, rec, b, 5, scratch, &c), 0);
    {
        /* top-4 of a by hand */
        int top[4], m = 0;
        for (int k = 0; k < 4; k++) {
            int best = -1;
            for (int i = 0; i < V; i++) {
                int used = 0;
                for (int j = 0; j < m; j++) used |= top[j] == i;
                if (!used && (best < 0 || a[i] > a[best])) best = i;
            }
            top[m++] = best;
        }
        double la = ref_lse(a, V), lb = ref_lse(b, V), kl = 0, pa = 0, qb = 0;
        for (int k = 0; k < 4; k++) {
            double x = a[top[k]] - la, y = b[top[k]] - lb;
            kl += exp(x) * (x - y);
            pa += exp(x);
            qb += exp(y);
        }
        kl += (1 - pa) * (log(1 - pa) - log(1 - qb));
        NEAR(c.kld, kl, 1e-6);
    }

    /* u16: close to the exact value; identical models near zero */
    make_info(&in, DSQ_LOGP_U16, V, 8);
    assert_int_equal(dsq_logp_encode(&in, a, 5, rec), 0);
    assert_int_equal(dsq_logp_compare(&in, rec, a, 5, scratch, &c), 0);
    NEAR(c.kld, 0.0, 1e-7);
    assert_int_equal(dsq_logp_compare(&in, rec, b, 5, scratch, &c), 0);
    NEAR(c.kld, exact, 1e-3 * exact);
    assert_true(c.kld > 0);
    /* the same with odd vocab padding and top_k 1 */
    make_info(&in, DSQ_LOGP_U16, V, 1);
    assert_int_equal(dsq_logp_encode(&in, a, 5, rec), 0);
    assert_int_equal(dsq_logp_compare(&in, rec, b, 5, scratch, &c), 0);
    NEAR(c.kld, exact, 1e-3 * exact);

    /* a hostile record: top-k id out of range */
    make_info(&in, DSQ_LOGP_TOPK, V, 4);
    assert_int_equal(dsq_logp_encode(&in, a, 5, rec), 0);
    dsq_store_u32le(rec + 16 + 8, V + 5);
    assert_int_equal(dsq_logp_compare(&in, rec, b, 5, scratch, &c), DSQ_ERR_FORMAT);
    for (int i = 0; i < V; i++) assert_int_equal(scratch[i], 0);
    free(scratch);
    free(rec);
}

/* ---- the base file ---------------------------------------------------------------- */

static void corrupt_byte(const char *path, long off)
{
    FILE *fp = fopen(path, "r+b");
    assert_non_null(fp);
    assert_int_equal(fseek(fp, off, SEEK_SET), 0);
    int ch = fgetc(fp);
    assert_int_equal(fseek(fp, off, SEEK_SET), 0);
    fputc(ch ^ 0x40, fp);
    fclose(fp);
}

static void copy_file(const char *from, const char *to, long trim, int append)
{
    FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
    assert_non_null(a);
    assert_non_null(b);
    fseek(a, 0, SEEK_END);
    long n = ftell(a) - trim;
    fseek(a, 0, SEEK_SET);
    for (long i = 0; i < n; i++) fputc(fgetc(a), b);
    if (append) fputc(0, b);
    fclose(a);
    fclose(b);
}

static int open_rc(const char *path)
{
    dsq_logp_reader r;
    int rc = dsq_logp_reader_open(&r, path, NULL);
    if (rc == 0) {
        rc = dsq_logp_reader_verify(&r, NULL);
        dsq_logp_reader_close(&r);
    }
    return rc;
}

static void roundtrip(int enc, int K)
{
    enum { V = 50, NCTX = 16, NTOK = 70 };
    int32_t tok[NTOK];
    for (int i = 0; i < NTOK; i++) tok[i] = (i * 13 + 5) % V;
    char *dir = dsq_test_tmpdir(), path[4200], other[4200];
    snprintf(path, sizeof path, "%s/base.logp", dir);
    snprintf(other, sizeof other, "%s/bad.logp", dir);

    dsq_ppl_plan p;
    assert_int_equal(dsq_ppl_plan_init(&p, NTOK, NCTX, 1, NULL), 0);
    dsq_logp_writer w;
    assert_int_equal(dsq_logp_writer_open(&w, path, 0, &p, tok, V, enc, K, NULL), 0);
    fake base = { .vocab = V };
    dsq_ppl_result pr;
    assert_int_equal(dsq_ppl_run(&p, tok, V, fake_logits, &base, &w, NULL, &pr, NULL), 0);
    assert_int_equal(dsq_logp_writer_commit(&w, NULL), 0);

    dsq_logp_reader r;
    assert_int_equal(dsq_logp_reader_open(&r, path, NULL), 0);
    assert_int_equal(dsq_logp_reader_verify(&r, NULL), 0);
    assert_int_equal(r.info.vocab, V);
    assert_int_equal(r.info.n_ctx, NCTX);
    assert_int_equal(r.info.first, NCTX / 2);
    assert_int_equal(r.info.n_chunks, 4);
    assert_int_equal(r.info.n_scored, 4 * 7);
    assert_int_equal(r.info.bos, 1);
    assert_int_equal(r.info.encoding, enc);
    assert_int_equal(r.info.top_k, K);
    for (int c = 0; c < 4; c++) {
        assert_int_equal(r.tokens[c * NCTX], 1);
        for (int i = 1; i < NCTX; i++) assert_int_equal(r.tokens[c * NCTX + i], tok[c * NCTX + i]);
    }
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal((size_t)st.st_size, 64 + 4 * 4 * NCTX + 32 + 28 * dsq_logp_record_size(enc, V, K) + 32);

    /* same model: KLD ~ 0, identical ppl */
    dsq_kld_result k;
    fake same = { .vocab = V };
    assert_int_equal(dsq_kld_run(&r, V, fake_logits, &same, NULL, &k, NULL), 0);
    assert_int_equal(k.count, 28);
    NEAR(k.kld_mean, 0.0, 1e-6);
    NEAR(k.same_top, 1.0, 0);
    NEAR(k.ppl, pr.ppl, 1e-9 * pr.ppl);
    NEAR(k.ppl_base, pr.ppl, 1e-5 * pr.ppl);
    NEAR(k.ppl_ratio, 1.0, 1e-5);
    /* a perturbed model: positive, percentiles ordered, ratio consistent */
    fake q = { .vocab = V, .eps = 0.4 };
    dsq_pool *pool = dsq_pool_create(2);
    dsq_eval_hooks h = { .pool = pool };
    assert_int_equal(dsq_kld_run(&r, V, fake_logits, &q, &h, &k, NULL), 0);
    assert_true(k.kld_mean > 1e-3);
    assert_true(k.kld_min <= k.kld_median && k.kld_median <= k.kld_p99 && k.kld_p99 <= k.kld_max);
    /* the noise band of the mean: around it, inside the per-position range */
    assert_true(k.kld_mean_lo <= k.kld_mean && k.kld_mean <= k.kld_mean_hi);
    assert_true(k.kld_mean_lo >= k.kld_min && k.kld_mean_hi <= k.kld_max);
    assert_true(k.kld_mean_hi > k.kld_mean_lo);
    NEAR(k.ppl_ratio, k.ppl / k.ppl_base, 1e-12);
    NEAR(log(k.ppl_ratio), k.ln_ratio_mean, 1e-9);
    /* exact mean KL by hand over the same windows */
    double sum = 0;
    for (int c = 0; c < 4; c++) {
        for (int pos = NCTX / 2; pos < NCTX - 1; pos++) {
            float ra[V], rb[V];
            fake_row(&base, r.tokens + c * NCTX, (size_t)pos, ra);
            fake_row(&q, r.tokens + c * NCTX, (size_t)pos, rb);
            sum += ref_kl(ra, rb, V);
        }
    }
    if (K >= V || enc == DSQ_LOGP_U16) NEAR(k.kld_mean, sum / 28, 1e-3 * sum / 28);
    else assert_true(k.kld_mean <= sum / 28 + 1e-6);
    dsq_pool_free(pool);
    /* wrong vocabulary */
    assert_int_equal(dsq_kld_run(&r, V + 1, fake_logits, &q, NULL, &k, NULL), DSQ_ERR_SHAPE);
    long rec0 = (long)(r.records - r.map.data);
    dsq_logp_reader_close(&r);

    /* corruption: a token, a record byte, truncation, extra bytes, magic */
    copy_file(path, other, 0, 0);
    corrupt_byte(other, 64 + 4 * 5);
    assert_int_equal(open_rc(other), DSQ_ERR_CHECKSUM);
    copy_file(path, other, 0, 0);
    corrupt_byte(other, rec0 + 7);
    assert_int_equal(open_rc(other), DSQ_ERR_CHECKSUM);
    assert_int_equal(dsq_logp_reader_open(&r, other, NULL), 0);
    fake q2 = { .vocab = V };
    assert_int_equal(dsq_kld_run(&r, V, fake_logits, &q2, NULL, &k, NULL), DSQ_ERR_CHECKSUM);
    dsq_logp_reader_close(&r);
    copy_file(path, other, 5, 0);
    assert_int_equal(open_rc(other), DSQ_ERR_TRUNCATED);
    copy_file(path, other, 0, 1);
    assert_int_equal(open_rc(other), DSQ_ERR_FORMAT);
    copy_file(path, other, 0, 0);
    corrupt_byte(other, 0);
    assert_int_equal(open_rc(other), DSQ_ERR_FORMAT);
    copy_file(path, other, 0, 0);
    corrupt_byte(other, 16); /* vocab: u16 record size no longer matches; topk: token hash */
    assert_int_equal(open_rc(other), enc == DSQ_LOGP_U16 ? DSQ_ERR_FORMAT : DSQ_ERR_CHECKSUM);
    dsq_test_write(other, "DSQ", 3);
    assert_int_equal(open_rc(other), DSQ_ERR_TRUNCATED);
    dsq_test_write(other, "", 0);
    assert_int_equal(open_rc(other), DSQ_ERR_TRUNCATED);
    assert_int_equal(open_rc("/nonexistent/x.logp"), DSQ_ERR_NOT_FOUND);

    /* an existing output is refused without overwrite; an aborted writer leaves nothing */
    assert_int_equal(dsq_logp_writer_open(&w, path, 0, &p, tok, V, enc, K, NULL), DSQ_ERR_EXISTS);
    char fresh[4200];
    snprintf(fresh, sizeof fresh, "%s/aborted.logp", dir);
    assert_int_equal(dsq_logp_writer_open(&w, fresh, 0, &p, tok, V, enc, K, NULL), 0);
    volatile int cancel = 1;
    dsq_eval_hooks hc = { .cancel = &cancel };
    assert_int_equal(dsq_ppl_run(&p, tok, V, fake_logits, &base, &w, &hc, &pr, NULL), DSQ_ERR_INTERRUPTED);
    dsq_logp_writer_abort(&w);
    assert_int_equal(access(fresh, F_OK), -1);
    /* commit before all records is refused and leaves nothing */
    assert_int_equal(dsq_logp_writer_open(&w, fresh, 0, &p, tok, V, enc, K, NULL), 0);
    assert_int_equal(dsq_logp_writer_commit(&w, NULL), DSQ_ERR_INTERNAL);
    assert_int_equal(access(fresh, F_OK), -1);
    dsq_logp_writer_abort(&w); /* harmless after commit failed */

    dsq_test_rmtree(dir);
    free(dir);
}

static void test_base_file_u16(void **state) { (void)state; roundtrip(DSQ_LOGP_U16, 8); }
static void test_base_file_topk(void **state) { (void)state; roundtrip(DSQ_LOGP_TOPK, 5); }
static void test_base_file_topk_all(void **state) { (void)state; roundtrip(DSQ_LOGP_TOPK, 50); }

/* A record that is well-hashed but hostile is still refused by kld. */
static void test_base_file_hostile_record(void **state)
{
    (void)state;
    enum { V = 20, NCTX = 8, NTOK = 16 };
    int32_t tok[NTOK];
    for (int i = 0; i < NTOK; i++) tok[i] = i % V;
    char *dir = dsq_test_tmpdir(), path[4200];
    snprintf(path, sizeof path, "%s/h.logp", dir);
    dsq_ppl_plan p;
    assert_int_equal(dsq_ppl_plan_init(&p, NTOK, NCTX, -1, NULL), 0);
    dsq_logp_writer w;
    assert_int_equal(dsq_logp_writer_open(&w, path, 0, &p, tok, V, DSQ_LOGP_TOPK, 3, NULL), 0);
    fake f = { .vocab = V };
    dsq_ppl_result pr;
    assert_int_equal(dsq_ppl_run(&p, tok, V, fake_logits, &f, &w, NULL, &pr, NULL), 0);
    assert_int_equal(dsq_logp_writer_commit(&w, NULL), 0);
    dsq_logp_reader r;
    assert_int_equal(dsq_logp_reader_open(&r, path, NULL), 0);
    long rec0 = (long)(r.records - r.map.data);
    size_t nrec = (size_t)(r.info.n_scored * r.info.record_size);
    dsq_logp_reader_close(&r);
    /* rewrite: top-1 id of record 2 out of range, then fix the data hash */
    FILE *fp = fopen(path, "r+b");
    assert_non_null(fp);
    uint8_t *buf = malloc(nrec);
    fseek(fp, rec0, SEEK_SET);
    assert_int_equal(fread(buf, 1, nrec, fp), nrec);
    dsq_store_u32le(buf + 2 * dsq_logp_record_size(DSQ_LOGP_TOPK, V, 3) + 16, 1000);
    uint8_t h[32];
    dsq_sha256_buf(buf, nrec, h);
    fseek(fp, rec0, SEEK_SET);
    fwrite(buf, 1, nrec, fp);
    fwrite(h, 1, 32, fp);
    fclose(fp);
    free(buf);
    assert_int_equal(dsq_logp_reader_open(&r, path, NULL), 0);
    assert_int_equal(dsq_logp_reader_verify(&r, NULL), 0);
    dsq_kld_result k;
    dsq_diag d;
    dsq_diag_clear(&d);
    assert_int_equal(dsq_kld_run(&r, V, fake_logits, &f, NULL, &k, &d), DSQ_ERR_FORMAT);
    assert_non_null(strstr(d.msg, "malformed record"));
    dsq_logp_reader_close(&r);
    dsq_test_rmtree(dir);
    free(dir);
}

/* The bootstrap band of the mean KLD: resamples whole windows, so windows
 * that agree give a zero-width band, and a band grows with the spread
 * between windows; deterministic for a seed, and a short last window is
 * its own unit. */
static void test_kld_bootstrap(void **state)
{
    (void)state;
    enum { W = 40, P = 25 };
    float *k = malloc(W * P * sizeof *k);
    double lo, hi, lo2, hi2;
    /* identical windows (values differ inside each): no spread between windows */
    for (int w = 0; w < W; w++)
        for (int p = 0; p < P; p++) k[w * P + p] = 0.001f * (float)(p + 1);
    assert_int_equal(dsq_kld_bootstrap(k, W * P, P, 500, 7, &lo, &hi), 0);
    assert_true(fabs(lo - 0.013) < 1e-9 && fabs(hi - 0.013) < 1e-9);
    /* one window holds a large value: the band must contain the mean and
     * exclude neither side, and must be wide (the window is in or out) */
    k[3 * P + 7] = 10.0f;
    double mean = 0.0;
    for (int i = 0; i < W * P; i++) mean += k[i];
    mean /= W * P;
    assert_int_equal(dsq_kld_bootstrap(k, W * P, P, 2000, DSQ_KLD_BOOT_SEED, &lo, &hi), 0);
    assert_true(lo < mean && mean < hi);
    assert_true(lo < 0.0131 + 1e-6);           /* resamples without the window */
    assert_true(hi > mean + 0.5 * (mean - 0.013));
    assert_int_equal(dsq_kld_bootstrap(k, W * P, P, 2000, DSQ_KLD_BOOT_SEED, &lo2, &hi2), 0);
    assert_true(lo == lo2 && hi == hi2);
    /* positions as units (per_window 1) give a narrower band than windows
     * here only if the spread sits between windows; the big value is one
     * position either way, so both contain the mean */
    assert_int_equal(dsq_kld_bootstrap(k, W * P, 1, 2000, DSQ_KLD_BOOT_SEED, &lo2, &hi2), 0);
    assert_true(lo2 < mean && mean < hi2);
    /* the seed is used (windows that all differ: the percentiles move) */
    float *v = malloc(W * P * sizeof *v);
    for (int i = 0; i < W * P; i++) v[i] = 0.001f * (float)(1 + (i / P * 7919) % 37) + 1e-5f * (float)(i % P);
    assert_int_equal(dsq_kld_bootstrap(v, W * P, P, 2000, 1, &lo, &hi), 0);
    assert_int_equal(dsq_kld_bootstrap(v, W * P, P, 2000, 99, &lo2, &hi2), 0);
    assert_true(lo2 != lo || hi2 != hi);
    free(v);
    /* a short last window, no resamples, nothing */
    assert_int_equal(dsq_kld_bootstrap(k, W * P - 3, P, 0, 1, &lo, &hi), 0);
    double m2 = 0.0;
    for (int i = 0; i < W * P - 3; i++) m2 += k[i];
    m2 /= W * P - 3;
    assert_true(fabs(lo - m2) < 1e-12 && fabs(hi - m2) < 1e-12);
    assert_int_equal(dsq_kld_bootstrap(k, 0, P, 100, 1, &lo, &hi), 0);
    assert_true(lo == 0.0 && hi == 0.0);
    /* one window: every resample is that window */
    assert_int_equal(dsq_kld_bootstrap(k, P, P, 100, 1, &lo, &hi), 0);
    assert_true(fabs(lo - hi) < 1e-15);
    free(k);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nll_math),
        cmocka_unit_test(test_plan),
        cmocka_unit_test(test_ppl_hand),
        cmocka_unit_test(test_ppl_uniform),
        cmocka_unit_test(test_record_kld),
        cmocka_unit_test(test_base_file_u16),
        cmocka_unit_test(test_base_file_topk),
        cmocka_unit_test(test_base_file_topk_all),
        cmocka_unit_test(test_base_file_hostile_record),
        cmocka_unit_test(test_kld_bootstrap),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
