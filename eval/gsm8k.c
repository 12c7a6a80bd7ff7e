/* gsm8k.c - lm-eval's gsm8k task: data, few-shot sampling, prompts, stop
 * strings, filters, exact_match, completion files and batched greedy
 * generation (see gsm8k.h for the task definition).
 *
 * Few-shot sampling, and why it is bit-exact with lm-eval:
 * lm-eval builds ContextSampler(list(train_docs), rnd=random.Random(seed))
 * (seed = fewshot_random_seed, default 1234) and, for each test doc in
 * order, calls rnd.sample(train_docs, num_fewshot). random.sample depends
 * only on len(population), k and the generator, so porting CPython's MT19937
 * (init_by_array seeding), getrandbits, _randbelow and sample() reproduces
 * the same indices; tests/test_gsm8k.c checks them against values printed by
 * CPython 3.11. What this cannot guarantee: that the train file is in the same
 * order as the Hugging Face `gsm8k/main` train split lm-eval loaded (the
 * openai/grade-school-math train.jsonl is the source of that split), that the
 * run starts at test doc 0 with no other draws in between (true for a plain
 * `lm_eval --tasks gsm8k` run, not for --samples or multi-rank splits), and
 * that a future CPython keeps Random.sample's algorithm (unchanged since 3.x
 * introduced the setsize rule). */
#include "gsm8k.h"
#include "dsq_file.h"
#include "dsq_sbuf.h"

#include <json-c/json.h>
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define GSM8K_MAX_FILE ((size_t)1 << 31) /* 2 GiB: far above any real split */

/* ====================================================================== */
/* JSONL reading                                                          */
/* ====================================================================== */

static int is_blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isspace((unsigned char)s[i])) return 0;
    return 1;
}

/* Parse one line into a JSON object. *obj is NULL and an error is recorded
 * when the line is not exactly one JSON object (trailing text included). */
static int parse_line(json_tokener *tok, const char *line, size_t n, const char *name,
                      size_t lineno, json_object **obj, dsq_diag *d)
{
    *obj = NULL;
    if (n > (size_t)INT32_MAX)
        return dsq_fail(d, DSQ_ERR_DATA, name, NULL, -1, "line %zu: line too long", lineno);
    json_tokener_reset(tok);
    json_object *o = json_tokener_parse_ex(tok, line, (int)n);
    enum json_tokener_error je = json_tokener_get_error(tok);
    if (!o || je != json_tokener_success) {
        const char *why = je == json_tokener_continue ? "unexpected end of line"
                                                       : json_tokener_error_desc(je);
        if (o) json_object_put(o);
        return dsq_fail(d, DSQ_ERR_DATA, name, NULL, -1, "line %zu: invalid JSON: %s", lineno, why);
    }
    size_t end = json_tokener_get_parse_end(tok);
    if (end < n && !is_blank(line + end, n - end)) {
        json_object_put(o);
        return dsq_fail(d, DSQ_ERR_DATA, name, NULL, -1,
                        "line %zu: invalid JSON: unexpected text after the object", lineno);
    }
    if (!json_object_is_type(o, json_type_object)) {
        json_object_put(o);
        return dsq_fail(d, DSQ_ERR_DATA, name, NULL, -1, "line %zu: not a JSON object", lineno);
    }
    *obj = o;
    return DSQ_OK;
}

/* Iterate lines: calls fn for each non-blank line with its 1-based number. */
typedef int (*line_fn)(void *ctx, const char *line, size_t n, size_t lineno);

static int for_each_line(const char *text, size_t len, line_fn fn, void *ctx)
{
    size_t pos = 0, lineno = 0;
    if (len >= 3 && !memcmp(text, "\xef\xbb\xbf", 3)) pos = 3; /* UTF-8 byte order mark */
    while (pos < len) {
        const char *nl = memchr(text + pos, '\n', len - pos);
        size_t end = nl ? (size_t)(nl - text) : len;
        lineno++;
        if (!is_blank(text + pos, end - pos)) {
            int rc = fn(ctx, text + pos, end - pos, lineno);
            if (rc < 0) return rc;
        }
        pos = end + 1;
    }
    return DSQ_OK;
}

static char *dup_mem(const char *s, size_t n)
{
    char *p = malloc(n + 1);
    if (!p) return NULL;
    memcpy(p, s, n);
    p[n] = 0;
    return p;
}

/* Fetch a required string field (numbers too, as their JSON text, when
 * numbers is set). */
static int get_str(json_object *o, const char *key, const char *name, size_t lineno,
                   char **out, size_t *out_len, int numbers, dsq_diag *d)
{
    json_object *v;
    if (!json_object_object_get_ex(o, key, &v) || !v)
        return dsq_fail(d, DSQ_ERR_DATA, name, NULL, -1, "line %zu: missing \"%s\" field", lineno, key);
    if (!json_object_is_type(v, json_type_string) &&
        !(numbers && (json_object_is_type(v, json_type_int) || json_object_is_type(v, json_type_double))))
        return dsq_fail(d, DSQ_ERR_DATA, name, NULL, -1, "line %zu: \"%s\" is not a string%s", lineno, key,
                        numbers ? " or a number" : "");
    size_t n = (size_t)json_object_get_string_len(v);
    *out = dup_mem(json_object_get_string(v), n);
    if (!*out) return dsq_fail(d, DSQ_ERR_NOMEM, name, NULL, -1, "out of memory");
    *out_len = n;
    return DSQ_OK;
}

typedef struct {
    dsq_gsm8k_set *s;
    size_t cap;
    json_tokener *tok;
    const char *name;
    const char *qkey, *akey;  /* field names */
    int numbers;              /* numeric answers accepted */
    dsq_diag *d;
} load_ctx;

/* No GSM8K item comes near this (the longest is under 2 KB), and a prompt
 * this long cannot fit any context: refuse it before json-c, the prompt
 * and the tokenizer each copy it (a 100 MB question would cost over a GB of
 * memory). */
#define GSM8K_MAX_LINE ((size_t)1 << 20)

static int load_line(void *vctx, const char *line, size_t n, size_t lineno)
{
    load_ctx *c = vctx;
    json_object *o;
    if (n > GSM8K_MAX_LINE)
        return dsq_fail(c->d, DSQ_ERR_DATA, c->name, NULL, -1,
                        "line %zu is %zu bytes, longer than any GSM8K item can be (limit %zu)", lineno, n,
                        GSM8K_MAX_LINE);
    int rc = parse_line(c->tok, line, n, c->name, lineno, &o, c->d);
    if (rc < 0) return rc;
    dsq_gsm8k_item it = { .line = lineno };
    rc = get_str(o, c->qkey, c->name, lineno, &it.question, &it.question_len, 0, c->d);
    if (rc == DSQ_OK) rc = get_str(o, c->akey, c->name, lineno, &it.answer, &it.answer_len, c->numbers, c->d);
    json_object_put(o);
    if (rc < 0) { free(it.question); free(it.answer); return rc; }
    if (c->s->n == c->cap) {
        size_t nc = c->cap ? c->cap * 2 : 256;
        dsq_gsm8k_item *ni = realloc(c->s->items, nc * sizeof *ni);
        if (!ni) {
            free(it.question); free(it.answer);
            return dsq_fail(c->d, DSQ_ERR_NOMEM, c->name, NULL, -1, "out of memory");
        }
        c->s->items = ni;
        c->cap = nc;
    }
    c->s->items[c->s->n++] = it;
    return DSQ_OK;
}

static int parse_fields(dsq_gsm8k_set *s, const char *text, size_t len, const char *name,
                        const char *qkey, const char *akey, int numbers, dsq_diag *d)
{
    memset(s, 0, sizeof *s);
    json_tokener *tok = json_tokener_new();
    if (!tok) return dsq_fail(d, DSQ_ERR_NOMEM, name, NULL, -1, "out of memory");
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT);
    load_ctx c = { .s = s, .tok = tok, .name = name, .qkey = qkey, .akey = akey, .numbers = numbers, .d = d };
    int rc = for_each_line(text, len, load_line, &c);
    json_tokener_free(tok);
    if (rc == DSQ_OK && s->n == 0)
        rc = dsq_fail(d, DSQ_ERR_DATA, name, NULL, -1, "empty dataset: no items");
    if (rc < 0) dsq_gsm8k_set_release(s);
    return rc;
}

int dsq_gsm8k_parse(dsq_gsm8k_set *s, const char *text, size_t len, const char *name, dsq_diag *d)
{
    return parse_fields(s, text, len, name, "question", "answer", 0, d);
}

int dsq_gsm8k_load_fields(dsq_gsm8k_set *s, const char *path, const char *qfield, const char *afield,
                          dsq_diag *d)
{
    memset(s, 0, sizeof *s);
    char *buf;
    size_t len;
    int rc = dsq_read_file_or_pipe(path, GSM8K_MAX_FILE, &buf, &len, d);
    if (rc < 0) return rc;
    int std = !strcmp(qfield, "question") && !strcmp(afield, "answer");
    rc = parse_fields(s, buf, len, path, qfield, afield, !std, d);
    free(buf);
    return rc;
}

int dsq_gsm8k_load(dsq_gsm8k_set *s, const char *path, dsq_diag *d)
{
    return dsq_gsm8k_load_fields(s, path, "question", "answer", d);
}

void dsq_gsm8k_set_release(dsq_gsm8k_set *s)
{
    if (!s) return;
    for (size_t i = 0; i < s->n; i++) {
        free(s->items[i].question);
        free(s->items[i].answer);
    }
    free(s->items);
    s->items = NULL;
    s->n = 0;
}

/* ====================================================================== */
/* CPython random                                                         */
/* ====================================================================== */

enum { MT_N = 624, MT_M = 397 };

static void mt_init_genrand(dsq_pyrand *r, uint32_t s)
{
    r->mt[0] = s;
    for (int i = 1; i < MT_N; i++)
        r->mt[i] = 1812433253u * (r->mt[i - 1] ^ (r->mt[i - 1] >> 30)) + (uint32_t)i;
    r->idx = MT_N;
}

/* init_by_array from Modules/_randommodule.c. */
static void mt_init_by_array(dsq_pyrand *r, const uint32_t *key, size_t len)
{
    mt_init_genrand(r, 19650218u);
    uint32_t *mt = r->mt;
    size_t i = 1, j = 0;
    for (size_t k = MT_N > len ? MT_N : len; k; k--) {
        mt[i] = (mt[i] ^ ((mt[i - 1] ^ (mt[i - 1] >> 30)) * 1664525u)) + key[j] + (uint32_t)j;
        i++; j++;
        if (i >= MT_N) { mt[0] = mt[MT_N - 1]; i = 1; }
        if (j >= len) j = 0;
    }
    for (size_t k = MT_N - 1; k; k--) {
        mt[i] = (mt[i] ^ ((mt[i - 1] ^ (mt[i - 1] >> 30)) * 1566083941u)) - (uint32_t)i;
        i++;
        if (i >= MT_N) { mt[0] = mt[MT_N - 1]; i = 1; }
    }
    mt[0] = 0x80000000u;
    r->idx = MT_N;
}

void dsq_pyrand_seed(dsq_pyrand *r, uint64_t seed)
{
    /* random_seed(): the absolute value's 32-bit words, least significant
     * first; zero is one word [0]. */
    uint32_t key[2] = { (uint32_t)seed, (uint32_t)(seed >> 32) };
    mt_init_by_array(r, key, key[1] ? 2 : 1);
}

uint32_t dsq_pyrand_u32(dsq_pyrand *r)
{
    static const uint32_t mag01[2] = { 0u, 0x9908b0dfu };
    uint32_t *mt = r->mt, y;
    if (r->idx >= MT_N) {
        int kk;
        for (kk = 0; kk < MT_N - MT_M; kk++) {
            y = (mt[kk] & 0x80000000u) | (mt[kk + 1] & 0x7fffffffu);
            mt[kk] = mt[kk + MT_M] ^ (y >> 1) ^ mag01[y & 1u];
        }
        for (; kk < MT_N - 1; kk++) {
            y = (mt[kk] & 0x80000000u) | (mt[kk + 1] & 0x7fffffffu);
            mt[kk] = mt[kk + (MT_M - MT_N)] ^ (y >> 1) ^ mag01[y & 1u];
        }
        y = (mt[MT_N - 1] & 0x80000000u) | (mt[0] & 0x7fffffffu);
        mt[MT_N - 1] = mt[MT_M - 1] ^ (y >> 1) ^ mag01[y & 1u];
        r->idx = 0;
    }
    y = mt[r->idx++];
    y ^= (y >> 11);
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= (y >> 18);
    return y;
}

uint32_t dsq_pyrand_bits(dsq_pyrand *r, int k)
{
    return dsq_pyrand_u32(r) >> (32 - k);
}

uint32_t dsq_pyrand_below(dsq_pyrand *r, uint32_t n)
{
    int k = 32 - __builtin_clz(n); /* n.bit_length(), n >= 1 */
    uint32_t v = dsq_pyrand_bits(r, k);
    while (v >= n) v = dsq_pyrand_bits(r, k);
    return v;
}

int dsq_pyrand_sample(dsq_pyrand *r, size_t n, size_t k, size_t *out)
{
    if (k > n || n > UINT32_MAX) return DSQ_ERR_INVALID_ARG;
    if (k == 0) return DSQ_OK;
    /* Random.sample: a pool copy when it is smaller than a k-element set,
     * otherwise rejection against a set of chosen indices. */
    double setsize = 21;
    if (k > 5) setsize += pow(4.0, ceil(log((double)k * 3) / log(4.0)));
    if ((double)n <= setsize) {
        size_t *pool = malloc(n * sizeof *pool);
        if (!pool) return DSQ_ERR_NOMEM;
        for (size_t i = 0; i < n; i++) pool[i] = i;
        for (size_t i = 0; i < k; i++) {
            size_t j = dsq_pyrand_below(r, (uint32_t)(n - i));
            out[i] = pool[j];
            pool[j] = pool[n - i - 1];
        }
        free(pool);
        return DSQ_OK;
    }
    /* open-addressing set of size >= 2k (power of two) */
    size_t cap = 16;
    while (cap < 2 * k) cap *= 2;
    size_t *set = malloc(cap * sizeof *set);
    if (!set) return DSQ_ERR_NOMEM;
    for (size_t i = 0; i < cap; i++) set[i] = SIZE_MAX;
    for (size_t i = 0; i < k; i++) {
        for (;;) {
            size_t j = dsq_pyrand_below(r, (uint32_t)n);
            size_t h = (j * 0x9e3779b97f4a7c15ull) & (cap - 1);
            while (set[h] != SIZE_MAX && set[h] != j) h = (h + 1) & (cap - 1);
            if (set[h] == j) continue; /* already chosen: draw again */
            set[h] = j;
            out[i] = j;
            break;
        }
    }
    free(set);
    return DSQ_OK;
}

/* ====================================================================== */
/* few-shot prompts                                                       */
/* ====================================================================== */

int dsq_gsm8k_fewshot_init(dsq_gsm8k_fewshot *f, size_t n_train, int shots, uint64_t seed)
{
    memset(f, 0, sizeof *f);
    if (shots < 0 || (size_t)shots > n_train || n_train > UINT32_MAX) return DSQ_ERR_INVALID_ARG;
    dsq_pyrand_seed(&f->rng, seed);
    f->n_train = n_train;
    f->shots = shots;
    return DSQ_OK;
}

int dsq_gsm8k_fewshot_next(dsq_gsm8k_fewshot *f, size_t *out)
{
    return dsq_pyrand_sample(&f->rng, f->n_train, (size_t)f->shots, out);
}

#define SB_LIT(b, s) dsq_sb_add((b), (s), sizeof(s) - 1)

int dsq_gsm8k_prompt(const dsq_gsm8k_set *train, const size_t *shots, int n_shots,
                     const dsq_gsm8k_item *doc, char **out, size_t *len)
{
    *out = NULL;
    if (len) *len = 0;
    dsq_sbuf b = { 0 };
    for (int i = 0; i < n_shots; i++) {
        if (!train || shots[i] >= train->n) { free(b.p); return DSQ_ERR_INVALID_ARG; }
        const dsq_gsm8k_item *e = &train->items[shots[i]];
        /* doc_to_text + target_delimiter + doc_to_target + fewshot_delimiter */
        SB_LIT(&b, "Question: ");
        dsq_sb_add(&b, e->question, e->question_len);
        SB_LIT(&b, "\nAnswer: ");
        dsq_sb_add(&b, e->answer, e->answer_len);
        SB_LIT(&b, "\n\n");
    }
    SB_LIT(&b, "Question: ");
    dsq_sb_add(&b, doc->question, doc->question_len);
    SB_LIT(&b, "\nAnswer:");
    if (b.oom) { free(b.p); return DSQ_ERR_NOMEM; }
    *out = b.p;
    if (len) *len = b.n;
    return DSQ_OK;
}

/* ====================================================================== */
/* stop strings                                                           */
/* ====================================================================== */

const char *const dsq_gsm8k_stops[3] = { "Question:", "</s>", "<|im_end|>" };

size_t dsq_gsm8k_stop_pos(const char *text, size_t len, const char *const *stops, size_t n_stops)
{
    size_t best = len;
    for (size_t i = 0; i < n_stops; i++) {
        size_t sl = stops[i] ? strlen(stops[i]) : 0;
        if (!sl || sl > len) continue;
        const char *p = memmem(text, best + sl - 1 < len ? best + sl - 1 : len, stops[i], sl);
        if (p && (size_t)(p - text) < best) best = (size_t)(p - text);
    }
    return best;
}

/* ====================================================================== */
/* filters and exact_match                                                */
/* ====================================================================== */

/* Patterns exactly as in gsm8k.yaml (YAML "\\-" is the regex "\-"). */
static const char *const filter_pat[2] = {
    "#### (\\-?[0-9\\.\\,]+)",
    "(-?[$0-9.,]{2,})|(-?[0-9]+)",
};
static const char *const ignore_pat[4] = { ",", "\\$", "(?s).*#### ", "\\.$" };

struct dsq_gsm8k_scorer {
    pcre2_code *filter[2];
    pcre2_code *ignore[4];
    pcre2_match_data *md;
};

static pcre2_code *compile(const char *pat, dsq_diag *d)
{
    int err;
    PCRE2_SIZE off;
    pcre2_code *c = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, 0, &err, &off, NULL);
    if (!c) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        dsq_fail(d, DSQ_ERR_INTERNAL, NULL, NULL, -1, "regex '%s' at %zu: %s", pat, (size_t)off, (char *)msg);
    }
    return c;
}

int dsq_gsm8k_scorer_create(dsq_gsm8k_scorer **out, dsq_diag *d)
{
    *out = NULL;
    dsq_gsm8k_scorer *sc = calloc(1, sizeof *sc);
    if (!sc) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    int ok = 1;
    for (int i = 0; i < 2 && ok; i++) ok = (sc->filter[i] = compile(filter_pat[i], d)) != NULL;
    for (int i = 0; i < 4 && ok; i++) ok = (sc->ignore[i] = compile(ignore_pat[i], d)) != NULL;
    if (ok) {
        sc->md = pcre2_match_data_create(8, NULL);
        if (!sc->md) { ok = 0; dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory"); }
    }
    if (!ok) {
        dsq_gsm8k_scorer_free(sc);
        return d && d->status < 0 ? d->status : DSQ_ERR_INTERNAL;
    }
    *out = sc;
    return DSQ_OK;
}

void dsq_gsm8k_scorer_free(dsq_gsm8k_scorer *sc)
{
    if (!sc) return;
    for (int i = 0; i < 2; i++) pcre2_code_free(sc->filter[i]);
    for (int i = 0; i < 4; i++) pcre2_code_free(sc->ignore[i]);
    pcre2_match_data_free(sc->md);
    free(sc);
}

/* Python str.strip() on the ASCII whitespace a match could hold (none, for
 * these patterns; kept for fidelity). */
static void strip(const char **s, size_t *n)
{
    while (*n && isspace((unsigned char)(*s)[0])) { (*s)++; (*n)--; }
    while (*n && isspace((unsigned char)(*s)[*n - 1])) (*n)--;
}

int dsq_gsm8k_extract(dsq_gsm8k_scorer *sc, int filter, const char *text, size_t len, char **out)
{
    *out = NULL;
    if (filter != DSQ_GSM8K_STRICT && filter != DSQ_GSM8K_FLEXIBLE) return DSQ_ERR_INVALID_ARG;
    pcre2_code *re = sc->filter[filter];
    /* re.findall: successive non-overlapping matches from the left. strict
     * keeps the first (group_select 0), flexible the last (-1). */
    const char *best = NULL;
    size_t best_n = 0;
    PCRE2_SIZE start = 0;
    while (start <= len) {
        int rc = pcre2_match(re, (PCRE2_SPTR)text, len, start, 0, sc->md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) return DSQ_ERR_INTERNAL; /* match limit: cannot happen for these patterns */
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(sc->md);
        /* the first group that took part and is non-empty (findall tuple,
         * then [m for m in match if m][0]) */
        for (int g = 1; g < rc; g++) {
            if (ov[2 * g] != PCRE2_UNSET && ov[2 * g + 1] > ov[2 * g]) {
                best = text + ov[2 * g];
                best_n = ov[2 * g + 1] - ov[2 * g];
                break;
            }
        }
        if (filter == DSQ_GSM8K_STRICT) break;
        start = ov[1] > ov[0] ? ov[1] : ov[0] + 1;
    }
    if (!best) {
        *out = strdup(DSQ_GSM8K_INVALID);
    } else {
        strip(&best, &best_n);
        *out = dup_mem(best, best_n);
    }
    return *out ? DSQ_OK : DSQ_ERR_NOMEM;
}

int dsq_gsm8k_normalize(dsq_gsm8k_scorer *sc, const char *text, size_t len,
                        char **out, size_t *out_len)
{
    *out = NULL;
    /* Every substitution deletes, so len + 1 bytes always suffice. */
    char *a = dup_mem(text, len), *b = malloc(len + 1);
    if (!a || !b) { free(a); free(b); return DSQ_ERR_NOMEM; }
    size_t n = len;
    for (int i = 0; i < 4; i++) {
        PCRE2_SIZE outlen = len + 1;
        int rc = pcre2_substitute(sc->ignore[i], (PCRE2_SPTR)a, n, 0, PCRE2_SUBSTITUTE_GLOBAL,
                                  sc->md, NULL, (PCRE2_SPTR)"", 0, (PCRE2_UCHAR *)b, &outlen);
        if (rc < 0) { free(a); free(b); return DSQ_ERR_INTERNAL; }
        char *t = a; a = b; b = t;
        n = outlen;
    }
    free(b);
    for (size_t i = 0; i < n; i++) a[i] = (char)tolower((unsigned char)a[i]);
    a[n] = 0;
    *out = a;
    if (out_len) *out_len = n;
    return DSQ_OK;
}

int dsq_gsm8k_exact_match(dsq_gsm8k_scorer *sc, const char *pred, size_t pred_len,
                          const char *ref, size_t ref_len, int *match)
{
    char *p, *r;
    size_t pn, rn;
    *match = 0;
    int rc = dsq_gsm8k_normalize(sc, pred, pred_len, &p, &pn);
    if (rc < 0) return rc;
    rc = dsq_gsm8k_normalize(sc, ref, ref_len, &r, &rn);
    if (rc < 0) { free(p); return rc; }
    *match = pn == rn && memcmp(p, r, pn) == 0;
    free(p);
    free(r);
    return DSQ_OK;
}

int dsq_gsm8k_score_item(dsq_gsm8k_scorer *sc, const char *completion, size_t len,
                         const char *answer, size_t answer_len,
                         const char *const *stops, size_t n_stops, dsq_gsm8k_score *out)
{
    memset(out, 0, sizeof *out);
    len = dsq_gsm8k_stop_pos(completion, len, stops, n_stops);
    int rc = dsq_gsm8k_extract(sc, DSQ_GSM8K_STRICT, completion, len, &out->strict);
    if (rc == DSQ_OK) rc = dsq_gsm8k_extract(sc, DSQ_GSM8K_FLEXIBLE, completion, len, &out->flexible);
    if (rc == DSQ_OK) rc = dsq_gsm8k_normalize(sc, answer, answer_len, &out->gold, NULL);
    if (rc == DSQ_OK)
        rc = dsq_gsm8k_exact_match(sc, out->strict, strlen(out->strict), answer, answer_len,
                                   &out->correct_strict);
    if (rc == DSQ_OK)
        rc = dsq_gsm8k_exact_match(sc, out->flexible, strlen(out->flexible), answer, answer_len,
                                   &out->correct_flexible);
    if (rc < 0) dsq_gsm8k_score_release(out);
    return rc;
}

void dsq_gsm8k_score_release(dsq_gsm8k_score *s)
{
    if (!s) return;
    free(s->strict);
    free(s->flexible);
    free(s->gold);
    memset(s, 0, sizeof *s);
}

double dsq_gsm8k_stderr(size_t k, size_t n)
{
    if (n < 2) return 0.0;
    double mu = (double)k / (double)n;
    /* k ones at (1 - mu)^2 and n - k zeros at mu^2 */
    double ss = (double)k * (1 - mu) * (1 - mu) + (double)(n - k) * mu * mu;
    return sqrt(ss / (double)(n - 1)) / sqrt((double)n);
}

/* ====================================================================== */
/* completions files                                                      */
/* ====================================================================== */

typedef struct {
    dsq_gsm8k_completions *c;
    json_tokener *tok;
    const char *name;
    size_t ordinal;
    dsq_diag *d;
} comp_ctx;

/* The completion string of a record, or NULL (error recorded). */
static int completion_of(json_object *o, const char *name, size_t lineno,
                         const char **s, size_t *n, dsq_diag *d)
{
    static const char *const keys[] = { "completion", "response", "resps" };
    for (size_t k = 0; k < 3; k++) {
        json_object *v;
        if (!json_object_object_get_ex(o, keys[k], &v)) continue;
        /* resps: unwrap [[str]] / [str] to the first string */
        for (int depth = 0; depth < 2 && v && json_object_is_type(v, json_type_array); depth++)
            v = json_object_array_length(v) ? json_object_array_get_idx(v, 0) : NULL;
        if (!v || !json_object_is_type(v, json_type_string))
            return dsq_fail(d, DSQ_ERR_DATA, name, NULL, -1,
                            "line %zu: \"%s\" holds no string", lineno, keys[k]);
        *s = json_object_get_string(v);
        *n = (size_t)json_object_get_string_len(v);
        return DSQ_OK;
    }
    return dsq_fail(d, DSQ_ERR_DATA, name, NULL, -1,
                    "line %zu: no \"completion\", \"response\" or \"resps\" field", lineno);
}

static int comp_line(void *vctx, const char *line, size_t n, size_t lineno)
{
    comp_ctx *c = vctx;
    json_object *o;
    int rc = parse_line(c->tok, line, n, c->name, lineno, &o, c->d);
    if (rc < 0) return rc;
    size_t doc = c->ordinal++;
    json_object *v;
    if (json_object_object_get_ex(o, "doc_id", &v)) {
        if (!json_object_is_type(v, json_type_int) || json_object_get_int64(v) < 0) {
            json_object_put(o);
            return dsq_fail(c->d, DSQ_ERR_DATA, c->name, NULL, -1,
                            "line %zu: \"doc_id\" is not a non-negative integer", lineno);
        }
        doc = (size_t)json_object_get_int64(v);
    }
    if (doc >= c->c->n_docs) {
        json_object_put(o);
        return dsq_fail(c->d, DSQ_ERR_DATA, c->name, NULL, -1,
                        "line %zu: doc %zu is beyond the %zu items of the dataset",
                        lineno, doc, c->c->n_docs);
    }
    if (c->c->text[doc]) {
        json_object_put(o);
        return dsq_fail(c->d, DSQ_ERR_DATA, c->name, NULL, -1,
                        "line %zu: a second completion for doc %zu", lineno, doc);
    }
    const char *s = NULL;
    size_t sn = 0;
    rc = completion_of(o, c->name, lineno, &s, &sn, c->d);
    if (rc == DSQ_OK) {
        c->c->text[doc] = dup_mem(s, sn);
        c->c->len[doc] = sn;
        if (!c->c->text[doc]) rc = dsq_fail(c->d, DSQ_ERR_NOMEM, c->name, NULL, -1, "out of memory");
        else c->c->n_present++;
    }
    json_object_put(o);
    return rc;
}

int dsq_gsm8k_completions_parse(dsq_gsm8k_completions *c, const char *text, size_t len,
                                const char *name, size_t n_docs, dsq_diag *d)
{
    memset(c, 0, sizeof *c);
    c->n_docs = n_docs;
    c->text = calloc(n_docs ? n_docs : 1, sizeof *c->text);
    c->len = calloc(n_docs ? n_docs : 1, sizeof *c->len);
    json_tokener *tok = json_tokener_new();
    if (!c->text || !c->len || !tok) {
        if (tok) json_tokener_free(tok);
        dsq_gsm8k_completions_release(c);
        return dsq_fail(d, DSQ_ERR_NOMEM, name, NULL, -1, "out of memory");
    }
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT);
    comp_ctx cc = { .c = c, .tok = tok, .name = name, .d = d };
    int rc = for_each_line(text, len, comp_line, &cc);
    json_tokener_free(tok);
    if (rc == DSQ_OK && c->n_present == 0)
        rc = dsq_fail(d, DSQ_ERR_DATA, name, NULL, -1, "empty completions file: no records");
    if (rc < 0) dsq_gsm8k_completions_release(c);
    return rc;
}

int dsq_gsm8k_completions_load(dsq_gsm8k_completions *c, const char *path, size_t n_docs,
                               dsq_diag *d)
{
    memset(c, 0, sizeof *c);
    char *buf;
    size_t len;
    int rc = dsq_read_file_or_pipe(path, GSM8K_MAX_FILE, &buf, &len, d);
    if (rc < 0) return rc;
    rc = dsq_gsm8k_completions_parse(c, buf, len, path, n_docs, d);
    free(buf);
    return rc;
}

void dsq_gsm8k_completions_release(dsq_gsm8k_completions *c)
{
    if (!c) return;
    if (c->text)
        for (size_t i = 0; i < c->n_docs; i++) free(c->text[i]);
    free(c->text);
    free(c->len);
    memset(c, 0, sizeof *c);
}

/* ====================================================================== */
/* batched generation                                                    */
/* ====================================================================== */

typedef struct {
    size_t req;        /* request index */
    int32_t *gen;      /* generated ids */
    size_t n_gen;
    size_t n_prompt;
    int32_t next;      /* token to feed at the next decode step */
    int truncated;
    int active;
    uint64_t rng;      /* sampling stream of the request */
} gen_slot;

static int is_eos(const dsq_gen_opts *o, int32_t t)
{
    for (size_t i = 0; i < o->n_eos; i++)
        if (o->eos[i] == t) return 1;
    return 0;
}

static int finish(gen_slot *s, int stop, const dsq_gen_ops *ops, const dsq_gen_opts *o,
                  dsq_gen_done_fn done, void *done_user, dsq_diag *d)
{
    dsq_gen_result r = { .n_prompt = s->n_prompt, .n_gen = s->n_gen, .stop = stop,
                         .truncated = s->truncated };
    int rc = ops->detok(ops->user, s->gen, s->n_gen, &r.text, &r.len);
    if (rc < 0) return dsq_fail(d, rc, NULL, NULL, -1, "cannot decode generated tokens");
    if (!r.text && !(r.text = calloc(1, 1))) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    r.len = dsq_gsm8k_stop_pos(r.text, r.len, o->stops, o->n_stops);
    r.text[r.len] = 0;
    s->active = 0;
    rc = done(done_user, s->req, &r);
    free(r.text); /* NULL when the callback kept it */
    return rc;
}

/* Accept token t for slot s: returns 1 when the slot finished. */
static int accept(gen_slot *s, int32_t t, const dsq_gen_ops *ops, const dsq_gen_opts *o,
                  dsq_gen_done_fn done, void *done_user, int *rc, dsq_diag *d)
{
    *rc = DSQ_OK;
    if (is_eos(o, t)) { *rc = finish(s, DSQ_GEN_STOP_EOS, ops, o, done, done_user, d); return 1; }
    s->gen[s->n_gen++] = t;
    s->next = t;
    if (o->n_stops) {
        char *txt;
        size_t n;
        int r = ops->detok(ops->user, s->gen, s->n_gen, &txt, &n);
        if (r < 0) { *rc = dsq_fail(d, r, NULL, NULL, -1, "cannot decode generated tokens"); return 1; }
        int hit = dsq_gsm8k_stop_pos(txt, n, o->stops, o->n_stops) < n;
        free(txt);
        if (hit) { *rc = finish(s, DSQ_GEN_STOP_STRING, ops, o, done, done_user, d); return 1; }
    }
    if (s->n_gen >= o->max_new_tokens) {
        *rc = finish(s, DSQ_GEN_STOP_LENGTH, ops, o, done, done_user, d);
        return 1;
    }
    return 0;
}

int dsq_gsm8k_generate(const dsq_gen_ops *ops, const dsq_gen_opts *o,
                       const int32_t *const *prompts, const size_t *n_prompt,
                       size_t n_req, dsq_gen_done_fn done, void *done_user, dsq_diag *d)
{
    if (!ops || !o || ops->n_slots < 1 || !ops->vocab || o->max_new_tokens < 1 ||
        o->max_ctx <= o->max_new_tokens)
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1,
                        "generation needs >= 1 slot, >= 1 new token and a context above it");
    int ns = ops->n_slots;
    size_t vocab = ops->vocab, max_prompt = o->max_ctx - o->max_new_tokens;
    gen_slot *slots = calloc((size_t)ns, sizeof *slots);
    int *ids = malloc((size_t)ns * sizeof *ids);
    int32_t *toks = malloc((size_t)ns * sizeof *toks);
    float *logits = malloc((size_t)ns * vocab * sizeof *logits);
    dsq_sample_cand *scratch = o->sample.temperature > 0 ? malloc(vocab * sizeof *scratch) : NULL;
    int rc = DSQ_OK;
    if (!slots || !ids || !toks || !logits || (o->sample.temperature > 0 && !scratch)) {
        rc = dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
        goto out;
    }
    for (int i = 0; i < ns && rc == DSQ_OK; i++) {
        slots[i].gen = malloc(o->max_new_tokens * sizeof *slots[i].gen);
        if (!slots[i].gen) rc = dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    }
    size_t next_req = 0;
    while (rc == DSQ_OK) {
        if (o->cancel && *o->cancel) { rc = DSQ_ERR_INTERRUPTED; break; }
        /* fill free slots: prefill gives the first token directly */
        for (int i = 0; i < ns && next_req < n_req && rc == DSQ_OK; i++) {
            while (!slots[i].active && next_req < n_req && rc == DSQ_OK) {
                gen_slot *s = &slots[i];
                size_t req = next_req++, np = n_prompt[req];
                const int32_t *p = prompts[req];
                s->req = req;
                s->n_gen = 0;
                s->rng = o->seeds ? o->seeds[req] : (uint64_t)req;
                s->truncated = np > max_prompt;
                if (s->truncated) { p += np - max_prompt; np = max_prompt; }
                s->n_prompt = np;
                if (np == 0) {
                    rc = dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "request %zu has an empty prompt", req);
                    break;
                }
                rc = ops->prefill(ops->user, i, p, np, logits, d);
                if (rc < 0) break;
                s->active = 1;
                accept(s, dsq_sample_token(&o->sample, &s->rng, logits, vocab, scratch), ops, o, done, done_user, &rc,
                       d);
            }
        }
        if (rc < 0) break;
        int n = 0;
        for (int i = 0; i < ns; i++)
            if (slots[i].active) { ids[n] = i; toks[n] = slots[i].next; n++; }
        if (n == 0) break; /* nothing in flight and nothing pending */
        rc = ops->decode(ops->user, ids, toks, n, logits, d);
        if (rc < 0) break;
        for (int k = 0; k < n && rc == DSQ_OK; k++)
            accept(&slots[ids[k]],
                   dsq_sample_token(&o->sample, &slots[ids[k]].rng, logits + (size_t)k * vocab, vocab, scratch), ops,
                   o, done, done_user, &rc, d);
    }
out:
    if (slots)
        for (int i = 0; i < ns; i++) free(slots[i].gen);
    free(slots);
    free(ids);
    free(toks);
    free(logits);
    free(scratch);
    return rc;
}
