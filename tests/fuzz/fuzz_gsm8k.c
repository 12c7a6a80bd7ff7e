/* fuzz_gsm8k.c - libFuzzer target for the gsm8k task code (gsm8k.h) on
 * arbitrary bytes:
 *   - the dataset JSONL parser, then few-shot prompts over what parsed;
 *   - the completions JSONL parser (ds-eval gsm8k --score);
 *   - the answer filters (strict-match, flexible-extract), the exact_match
 *     normalisation and stop strings on the raw text;
 *   - batched greedy generation against a fake model whose next token is a
 *     function of the sequence so far, run with one slot and with several:
 *     the completions must be identical (batching never changes output).
 * Must never crash, leak or read out of bounds; checked invariants abort.
 * Seeds: corpus/gsm8k/. */
#include "gsm8k.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(x) do { if (!(x)) abort(); } while (0)

static dsq_gsm8k_scorer *scorer(void)
{
    static dsq_gsm8k_scorer *sc; /* compiled once per process */
    if (!sc && dsq_gsm8k_scorer_create(&sc, NULL) != DSQ_OK) abort();
    return sc;
}

/* Filters, normalisation and stop strings on one text. */
static void check_text(const char *t, size_t n, const char *ref, size_t ref_n)
{
    dsq_gsm8k_scorer *sc = scorer();
    for (int f = 0; f < 2; f++) {
        char *out = NULL;
        CHECK(dsq_gsm8k_extract(sc, f, t, n, &out) == DSQ_OK);
        CHECK(strlen(out) <= n || strcmp(out, DSQ_GSM8K_INVALID) == 0);
        free(out);
    }
    char *norm = NULL;
    size_t nl = 0;
    CHECK(dsq_gsm8k_normalize(sc, t, n, &norm, &nl) == DSQ_OK);
    CHECK(nl <= n && norm[nl] == 0);
    free(norm);
    int m = 0;
    CHECK(dsq_gsm8k_exact_match(sc, t, n, t, n, &m) == DSQ_OK);
    CHECK(m == 1);
    size_t p = dsq_gsm8k_stop_pos(t, n, dsq_gsm8k_stops, 3);
    CHECK(p <= n);
    if (p < n) {
        int hit = 0;
        for (int i = 0; i < 3; i++) {
            size_t sl = strlen(dsq_gsm8k_stops[i]);
            hit |= p + sl <= n && memcmp(t + p, dsq_gsm8k_stops[i], sl) == 0;
        }
        CHECK(hit);
    }
    /* nothing before p starts a stop string */
    for (size_t i = 0; i < p && i < 4096; i++)
        for (int s = 0; s < 3; s++) {
            size_t sl = strlen(dsq_gsm8k_stops[s]);
            CHECK(!(i + sl <= n && memcmp(t + i, dsq_gsm8k_stops[s], sl) == 0));
        }
    dsq_gsm8k_score sco;
    CHECK(dsq_gsm8k_score_item(sc, t, n, ref, ref_n, dsq_gsm8k_stops, 3, &sco) == DSQ_OK);
    CHECK(sco.strict && sco.flexible && sco.gold);
    dsq_gsm8k_score_release(&sco);
}

/* ---- fake model for dsq_gsm8k_generate ----------------------------------- */

#define VOCAB 258      /* bytes, then EOS (256) and a never-decoded id (257) */
#define EOS_ID 256
#define MAX_SLOTS 4

typedef struct fake {
    const uint8_t *script; /* bytes the model "says" */
    size_t script_n;
    uint64_t h[MAX_SLOTS]; /* per slot: hash of the sequence so far */
} fake;

static uint64_t hstep(uint64_t h, int32_t t)
{
    h ^= (uint64_t)(uint32_t)t + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    return h * 0xff51afd7ed558ccdull;
}

/* The next token depends only on the sequence, never on the slot. */
static void fake_logits(const fake *f, uint64_t h, float *logits)
{
    memset(logits, 0, VOCAB * sizeof *logits);
    uint64_t r = h ^ (h >> 29);
    int32_t t;
    if (r % 23 == 0) t = EOS_ID;
    else if (r % 31 == 0) t = 257;
    else t = f->script_n ? f->script[(r >> 8) % f->script_n] : 'x';
    logits[t] = 1.0f;
}

static int fake_prefill(void *u, int slot, const int32_t *t, size_t n, float *logits, dsq_diag *d)
{
    (void)d;
    fake *f = u;
    CHECK(slot >= 0 && slot < MAX_SLOTS && n >= 1);
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        CHECK(t[i] >= 0 && t[i] < VOCAB);
        h = hstep(h, t[i]);
    }
    f->h[slot] = h;
    fake_logits(f, h, logits);
    return 0;
}

static int fake_decode(void *u, const int *slots, const int32_t *t, int n, float *logits, dsq_diag *d)
{
    (void)d;
    fake *f = u;
    for (int i = 0; i < n; i++) {
        CHECK(slots[i] >= 0 && slots[i] < MAX_SLOTS);
        for (int j = 0; j < i; j++) CHECK(slots[j] != slots[i]);
        CHECK(t[i] >= 0 && t[i] < VOCAB && t[i] != EOS_ID);
        f->h[slots[i]] = hstep(f->h[slots[i]], t[i]);
        fake_logits(f, f->h[slots[i]], logits + (size_t)i * VOCAB);
    }
    return 0;
}

/* Ids below 256 are bytes; others are skipped, like special tokens.
 * Exactly len + 1 bytes, NUL-terminated, so ASan sees any overrun. */
static int fake_detok(void *u, const int32_t *ids, size_t n, char **text, size_t *len)
{
    (void)u;
    char *s = malloc(n + 1);
    if (!s) return DSQ_ERR_NOMEM;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (ids[i] >= 0 && ids[i] < 256) s[k++] = (char)ids[i];
    s[k] = 0;
    char *r = realloc(s, k + 1);
    *text = r ? r : s;
    *len = k;
    return 0;
}

typedef struct res {
    char *text;
    size_t len, n_prompt, n_gen;
    int stop, truncated, seen;
} res;

typedef struct done_ctx { res *r; size_t n; } done_ctx;

static int on_done(void *u, size_t idx, dsq_gen_result *g)
{
    done_ctx *c = u;
    CHECK(idx < c->n && !c->r[idx].seen);
    CHECK(g->text && g->text[g->len] == 0);
    CHECK(dsq_gsm8k_stop_pos(g->text, g->len, dsq_gsm8k_stops, 3) == g->len);
    res *r = &c->r[idx];
    r->seen = 1;
    r->text = g->text; /* kept */
    g->text = NULL;
    r->len = g->len;
    r->n_prompt = g->n_prompt;
    r->n_gen = g->n_gen;
    r->stop = g->stop;
    r->truncated = g->truncated;
    return 0;
}

static void check_generate(const uint8_t *data, size_t size)
{
    if (size < 4) return;
    size_t max_new = 1 + data[0] % 24;
    size_t max_ctx = max_new + 1 + data[1] % 48;
    int slots = 1 + data[2] % MAX_SLOTS;
    const uint8_t *body = data + 3;
    size_t bn = size - 3;
    if (bn > 4096) bn = 4096; /* keep one input cheap */
    /* prompts: the body's lines (at most 8), as byte tokens */
    int32_t *prompts[8];
    size_t np[8], n_req = 0, pos = 0;
    while (pos < bn && n_req < 8) {
        const uint8_t *nl = memchr(body + pos, '\n', bn - pos);
        size_t end = nl ? (size_t)(nl - body) : bn;
        if (end > pos) {
            prompts[n_req] = malloc((end - pos) * sizeof(int32_t));
            if (!prompts[n_req]) break;
            for (size_t i = pos; i < end; i++) prompts[n_req][i - pos] = body[i];
            np[n_req++] = end - pos;
        }
        pos = end + 1;
    }
    const int32_t eos = EOS_ID;
    dsq_gen_opts o = { .max_new_tokens = max_new, .max_ctx = max_ctx, .stops = dsq_gsm8k_stops,
                       .n_stops = 3, .eos = &eos, .n_eos = 1 };
    res r1[8] = { 0 }, rk[8] = { 0 };
    fake f1 = { body, bn, { 0 } }, fk = f1;
    dsq_gen_ops ops1 = { .user = &f1, .vocab = VOCAB, .n_slots = 1, .prefill = fake_prefill,
                         .decode = fake_decode, .detok = fake_detok };
    dsq_gen_ops opsk = ops1;
    opsk.user = &fk;
    opsk.n_slots = slots;
    done_ctx c1 = { r1, n_req }, ck = { rk, n_req };
    int rc1 = dsq_gsm8k_generate(&ops1, &o, (const int32_t *const *)prompts, np, n_req, on_done, &c1, NULL);
    int rck = dsq_gsm8k_generate(&opsk, &o, (const int32_t *const *)prompts, np, n_req, on_done, &ck, NULL);
    CHECK(rc1 == rck);
    for (size_t i = 0; i < n_req && rc1 == DSQ_OK; i++) {
        CHECK(r1[i].seen && rk[i].seen);
        CHECK(r1[i].len == rk[i].len && memcmp(r1[i].text, rk[i].text, r1[i].len) == 0);
        CHECK(r1[i].n_gen == rk[i].n_gen && r1[i].stop == rk[i].stop);
        CHECK(r1[i].n_prompt == rk[i].n_prompt && r1[i].truncated == rk[i].truncated);
        CHECK(r1[i].n_gen <= max_new && r1[i].n_prompt <= max_ctx - max_new);
        CHECK(r1[i].n_prompt + r1[i].n_gen <= max_ctx);
    }
    for (size_t i = 0; i < n_req; i++) {
        free(r1[i].text);
        free(rk[i].text);
        free(prompts[i]);
    }
}

/* ---- entry ------------------------------------------------------------------ */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *text = (const char *)data;
    dsq_diag d;
    dsq_diag_clear(&d);
    dsq_gsm8k_set set;
    if (dsq_gsm8k_parse(&set, text, size, "fuzz", &d) == DSQ_OK) {
        CHECK(set.n > 0);
        for (size_t i = 0; i < set.n; i++) {
            const dsq_gsm8k_item *it = &set.items[i];
            CHECK(it->question[it->question_len] == 0 && it->answer[it->answer_len] == 0);
            if (i < 8) check_text(it->answer, it->answer_len, it->answer, it->answer_len);
        }
        int shots = set.n < 5 ? (int)set.n : 5;
        dsq_gsm8k_fewshot fs;
        CHECK(dsq_gsm8k_fewshot_init(&fs, set.n, shots, size) == DSQ_OK);
        size_t idx[5];
        for (size_t i = 0; i < set.n && i < 4; i++) {
            CHECK(dsq_gsm8k_fewshot_next(&fs, idx) == DSQ_OK);
            for (int k = 0; k < shots; k++) {
                CHECK(idx[k] < set.n);
                for (int j = 0; j < k; j++) CHECK(idx[j] != idx[k]); /* sample() never repeats */
            }
            char *p = NULL;
            size_t pl = 0;
            CHECK(dsq_gsm8k_prompt(&set, idx, shots, &set.items[i], &p, &pl) == DSQ_OK);
            size_t want = sizeof "Question: \nAnswer:" - 1 + set.items[i].question_len;
            for (int k = 0; k < shots; k++)
                want += sizeof "Question: \nAnswer: \n\n" - 1 + set.items[idx[k]].question_len +
                        set.items[idx[k]].answer_len;
            CHECK(pl == want && p[pl] == 0 && memcmp(p, "Question: ", 10) == 0);
            CHECK(memcmp(p + pl - 8, "\nAnswer:", 8) == 0);
            free(p);
        }
        dsq_gsm8k_set_release(&set);
    }
    dsq_gsm8k_completions comp;
    dsq_diag_clear(&d);
    size_t n_docs = size ? 1 + data[size - 1] % 64 : 1;
    if (dsq_gsm8k_completions_parse(&comp, text, size, "fuzz", n_docs, &d) == DSQ_OK) {
        size_t present = 0;
        for (size_t i = 0; i < comp.n_docs; i++)
            if (comp.text[i]) {
                present++;
                CHECK(comp.text[i][comp.len[i]] == 0);
                if (i < 8) check_text(comp.text[i], comp.len[i], "#### 42", 7);
            }
        CHECK(present == comp.n_present && present > 0);
        dsq_gsm8k_completions_release(&comp);
    }
    check_text(text, size, text, size);
    check_generate(data, size);
    return 0;
}
