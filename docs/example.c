/* example.c - libdsq from a program of your own, through its public API
 * (<dsq/dsq.h>) and nothing else:
 *
 *   cc example.c $(pkg-config --cflags --libs dsq) -o example
 *   ./example                          # the library's version and schemes
 *   ./example MODEL TEXT [TOKENS]      # + the model, a greedy continuation
 *                                      #   and its perplexity on TEXT
 *
 * MODEL is anything ds-eval takes: a .dsq, a safetensors checkpoint
 * directory, a serving export directory, a llama2.c .bin. The perplexity
 * is computed exactly as `ds-eval ppl -m MODEL --data TEXT --limit-tokens
 * TOKENS` computes it (512-token windows, llama-perplexity's rules);
 * tests/cli/install.sh builds this file against the installed headers and
 * compares the two.
 *
 * Errors: every call returns a negative dsq_status and fills a dsq_diag
 * naming file, tensor and offset; dsq_diag_format makes it one line. */
#include <dsq/dsq.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(const char *what, int rc, const dsq_diag *d)
{
    char msg[1024];
    dsq_diag_format(d, msg, sizeof msg);
    fprintf(stderr, "example: %s: %s\n", what, msg[0] ? msg : dsq_strerror(rc));
    return 1;
}

static char *read_text(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    size_t cap = 0, n = 0;
    while (f) {
        if (n == cap) {
            char *b = realloc(buf, cap = cap ? 2 * cap : 1 << 16);
            if (!b) break;
            buf = b;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) {
            fclose(f);
            *len = n;
            return buf;
        }
    }
    if (f) fclose(f);
    free(buf);
    return NULL;
}

/* Greedy: the most likely next token, n times, printed as text. */
static int continue_text(dsq_lm *lm, const char *prompt, int n, dsq_diag *d)
{
    dsq_lm_info info;
    dsq_lm_get_info(lm, &info);
    int32_t *ids = NULL;
    size_t n_ids = 0;
    float *logits = malloc(sizeof(float) * (size_t)info.vocab_size);
    int32_t *out = malloc(sizeof(int32_t) * (size_t)n);
    int rc = logits && out ? DSQ_OK : DSQ_ERR_NOMEM;
    if (rc == DSQ_OK) rc = dsq_lm_encode(lm, prompt, strlen(prompt), DSQ_LM_ADD_SPECIAL, &ids, &n_ids, d);
    if (rc == DSQ_OK) rc = dsq_lm_forward(lm, ids, n_ids, logits, 0, d);
    for (int i = 0; rc == DSQ_OK && i < n; i++) {
        int32_t best = 0;
        for (int32_t v = 1; v < (int32_t)info.vocab_size; v++)
            if (logits[v] > logits[best]) best = v;
        out[i] = best;
        if (best == dsq_lm_eos(lm)) { n = i; break; }
        if (i + 1 < n) rc = dsq_lm_forward(lm, &best, 1, logits, 0, d);
    }
    char *text = NULL;
    if (rc == DSQ_OK) rc = dsq_lm_decode(lm, out, (size_t)n, DSQ_LM_SKIP_SPECIAL, &text, NULL, d);
    if (rc == DSQ_OK) printf("greedy: \"%s\" -> \"%s\"\n", prompt, text);
    dsq_free(text);
    dsq_free(ids);
    free(out);
    free(logits);
    dsq_lm_rewind(lm, 0);
    return rc;
}

int main(int argc, char **argv)
{
    printf("libdsq %s (header %s)\n", dsq_version_string(), DSQ_VERSION_STRING);
    if (dsq_version_number() / 100 != DSQ_VERSION_NUMBER / 100) {
        fprintf(stderr, "example: built for libdsq %s, running with %s\n", DSQ_VERSION_STRING, dsq_version_string());
        return 1;
    }
    printf("schemes:");
    for (int i = 0; dsq_scheme_name(i); i++) printf(" %s", dsq_scheme_name(i));
    printf("\n");
    if (argc < 3) return 0;

    dsq_diag d;
    dsq_diag_clear(&d);
    dsq_lm *lm = NULL;
    int rc = dsq_lm_open(&lm, argv[1], NULL, &d); /* all cores, default context, its own tokenizer */
    if (rc < 0) return fail("open", rc, &d);
    dsq_lm_info info;
    dsq_lm_get_info(lm, &info);
    printf("model: %s, %lld layers, hidden %lld, vocab %lld, %.1f MB of weights\n", info.architecture,
           (long long)info.num_layers, (long long)info.hidden_size, (long long)info.vocab_size,
           (double)info.weight_bytes / 1e6);

    rc = continue_text(lm, "Once upon a time", 8, &d);
    size_t len = 0;
    char *text = rc == DSQ_OK ? read_text(argv[2], &len) : NULL;
    if (rc == DSQ_OK && !text) {
        fprintf(stderr, "example: cannot read '%s'\n", argv[2]);
        dsq_lm_free(lm);
        return 1;
    }
    dsq_perplexity p;
    size_t limit = argc >= 4 ? (size_t)strtoull(argv[3], NULL, 10) : 0;
    if (rc == DSQ_OK) rc = dsq_lm_perplexity(lm, text, len, 512, limit, &p, &d);
    if (rc == DSQ_OK)
        printf("ppl %.6f +/- %.5f over %llu tokens (%zu windows of 512)\n", p.ppl, p.ppl_error,
               (unsigned long long)p.tokens, p.windows);
    free(text);
    dsq_lm_free(lm);
    return rc < 0 ? fail("perplexity", rc, &d) : 0;
}
