/* example.c - libdsq from a program of your own: the two halves of dsq's
 * job through the public API (dsq.h), with nothing but pkg-config:
 *
 *   cc example.c $(pkg-config --cflags --libs dsq) -o example
 *   ./example                                    # tensor round trip only
 *   ./example MODEL TEXT [TOKENS]                # + perplexity, as ds-eval ppl
 *
 * 1. Convert a tensor: quantize a float32 weight matrix with a scheme from
 *    the scheme table (awq-w4a16 here; any name ds-quant --scheme takes),
 *    check the blob as a reader would (dsq_qview_init), dequantize it and
 *    report the relative error ||W - deq(Q(W))|| / ||W||.
 * 2. Perplexity: open a model (safetensors directory or .dsq), tokenize a
 *    text with the tokenizer beside it, and score it over non-overlapping
 *    512-token windows exactly as `ds-eval ppl --ctx 512 --limit-tokens
 *    TOKENS` does (llama-perplexity rules: BOS over each window's first
 *    token, second half scored). tests/cli/install.sh compares the two.
 *
 * Errors: every call returns a negative dsq_status and fills a dsq_diag
 * naming file, tensor and offset; dsq_diag_format makes it one line. */
#include <dsq.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(const char *what, const dsq_diag *d)
{
    char msg[1024];
    dsq_diag_format(d, msg, sizeof msg);
    fprintf(stderr, "example: %s: %s\n", what, msg);
    return 1;
}

/* ---- 1. one tensor through the scheme API ---------------------------- */

/* sqrt by Newton's method: keeps the example free of -lm, so the link line
 * is exactly pkg-config's */
static double root(double x)
{
    double r = x > 1 ? x : 1;
    for (int i = 0; i < 60 && x > 0; i++) r = 0.5 * (r + x / r);
    return x > 0 ? r : 0;
}

static int convert_tensor(const char *scheme_name)
{
    enum { ROWS = 64, COLS = 256 };
    const dsq_scheme *sc = dsq_scheme_by_name(scheme_name);
    if (!sc) { fprintf(stderr, "example: unknown scheme %s\n", scheme_name); return 1; }
    float *w = malloc(sizeof(float) * ROWS * COLS), *back = malloc(sizeof(float) * ROWS * COLS);
    if (!w || !back) return free(w), free(back), 1;
    uint32_t s = 12345;                       /* a deterministic "weight": LCG noise */
    for (int i = 0; i < ROWS * COLS; i++) {
        s = s * 1664525u + 1013904223u;
        w[i] = ((float)(s >> 8) / 16777216.0f - 0.5f) * 0.1f;
    }
    dsq_diag d;
    dsq_diag_clear(&d);
    dsq_qshape shape;
    dsq_qparams qp;
    dsq_qparams_init(&qp);
    size_t size = 0;
    int rc = dsq_qshape_init(&shape, sc, ROWS, COLS, DSQ_GROUP_DEFAULT);
    if (rc == DSQ_OK) rc = sc->blob_size(&shape, &size);
    /* blobs need 4-byte alignment; 64 is what the container gives */
    uint8_t *blob = rc == DSQ_OK ? aligned_alloc(64, (size + 63) / 64 * 64) : NULL;
    if (rc == DSQ_OK && !blob) rc = DSQ_ERR_NOMEM;
    if (rc == DSQ_OK) rc = dsq_quantize_tensor(sc, w, &shape, &qp, blob, NULL, &d);
    dsq_qview v;
    if (rc == DSQ_OK) rc = dsq_qview_init(&v, sc, &shape, blob, size, &d);
    if (rc == DSQ_OK) sc->dequantize(&v, 0, ROWS, back);
    double e2 = 0, r2 = 0;
    for (int i = 0; rc == DSQ_OK && i < ROWS * COLS; i++) {
        e2 += (double)(w[i] - back[i]) * (w[i] - back[i]);
        r2 += (double)w[i] * w[i];
    }
    if (rc == DSQ_OK)
        printf("tensor %dx%d %s: %zu bytes (f32 %zu), group %d, relative error %.5f\n", ROWS, COLS, sc->name,
               size, sizeof(float) * ROWS * COLS, (int)shape.group_size, root(e2 / r2));
    free(blob);
    free(w);
    free(back);
    if (rc < 0) { if (d.status == DSQ_OK) dsq_fail(&d, rc, NULL, NULL, -1, "%s", dsq_strerror(rc)); return fail("convert", &d); }
    return 0;
}

/* ---- 2. perplexity through the eval API ------------------------------- */

typedef struct { dsq_model *m; dsq_state *st; } runner;

/* dsq_window_logits_fn: the first half of the window fills the KV cache,
 * then logits for positions first .. n-2 (ds-eval's model_window). */
static int window(void *u, const int32_t *w, size_t n, size_t first, float *logits, dsq_diag *d)
{
    runner *r = u;
    dsq_state_reset(r->st, 0);
    int rc = dsq_forward(r->m, r->st, 0, w, (int)first, NULL, 0, d);
    if (rc < 0) return rc;
    return dsq_forward(r->m, r->st, 0, w + first, (int)(n - 1 - first), logits, 0, d);
}

static int perplexity(const char *model, const char *text_path, size_t limit)
{
    const size_t n_ctx = 512;
    dsq_diag d;
    dsq_diag_clear(&d);
    dsq_tokenizer *tok = NULL;
    runner r = { 0 };
    char *text = NULL;
    size_t len = 0, n = 0;
    int32_t *ids = NULL;
    /* a .dsq carries its tokenizer in its metadata (ds-eval reads it);
     * here, for brevity, the tokenizer is the one beside the model */
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", model);
    if (!dsq_path_is_dir(dir)) {
        char *sl = strrchr(dir, '/');
        if (sl) *sl = 0; else snprintf(dir, sizeof dir, ".");
    }
    int rc = dsq_tokenizer_load(&tok, dir, &d);
    if (rc == DSQ_OK) rc = dsq_read_file(text_path, (size_t)1 << 30, &text, &len, &d);
    /* llama-perplexity tokenizes with add_special and without parsing
     * special tokens in the text */
    if (rc == DSQ_OK) rc = dsq_tokenizer_encode_ex(tok, text, len, DSQ_TOK_ADD_SPECIAL, &ids, &n, &d);
    if (rc == DSQ_OK && limit && limit < n) n = limit;
    /* the BOS id written over each window's first token, when the
     * tokenizer adds one (ds-eval ppl --bos window) */
    int32_t bos = n > 0 && ids[0] == dsq_tokenizer_bos(tok) ? dsq_tokenizer_bos(tok) : -1;
    dsq_ppl_plan plan;
    if (rc == DSQ_OK) rc = dsq_ppl_plan_init(&plan, n, n_ctx, bos, &d);
    dsq_model_opts mo;
    dsq_model_opts_default(&mo);
    if (rc == DSQ_OK) rc = dsq_model_open(&r.m, model, &mo, &d);
    if (rc == DSQ_OK && !(r.st = dsq_state_create(r.m, 1, (int64_t)n_ctx))) rc = DSQ_ERR_NOMEM;
    dsq_ppl_result res;
    if (rc == DSQ_OK) {
        dsq_eval_hooks h = { .pool = dsq_model_pool(r.m) };
        size_t vocab = (size_t)dsq_model_get_config(r.m)->vocab_size;
        rc = dsq_ppl_run(&plan, ids, vocab, window, &r, NULL, &h, &res, &d);
    }
    if (rc == DSQ_OK)
        printf("ppl %.6f +/- %.5f over %llu tokens (%zu windows of %zu)\n", res.ppl, res.ppl_stderr,
               (unsigned long long)res.count, plan.n_chunks, n_ctx);
    free(ids);
    free(text);
    dsq_state_free(r.st);
    dsq_model_free(r.m);
    dsq_tokenizer_free(tok);
    if (rc < 0) { if (d.status == DSQ_OK) dsq_fail(&d, rc, NULL, NULL, -1, "%s", dsq_strerror(rc)); return fail("perplexity", &d); }
    return 0;
}

int main(int argc, char **argv)
{
    printf("libdsq %s\n", DSQ_VERSION_STRING);
    if (convert_tensor("awq-w4a16")) return 1;
    if (argc >= 3)
        return perplexity(argv[1], argv[2], argc >= 4 ? (size_t)strtoull(argv[3], NULL, 10) : 0);
    return 0;
}
