/* test_gsm8k.c - lm-eval gsm8k v3 semantics: filters, exact_match, prompts,
 * CPython-compatible few-shot sampling, dataset errors, stop strings,
 * completion files and batched greedy generation with a scripted model. */
#include "dsq_test.h"
#include "gsm8k.h"

#include <regex.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- filters and exact_match, against values printed by CPython 3.11 ----- */

/* input, strict, flexible, normalize(input), normalize(strict), normalize(flexible) */
static const char *const golden[][6] = {
    { "$1,234.", "[invalid]", "$1,234.", "1234", "[invalid]", "1234" },
    { "#### -5", "-5", "-5", "-5", "-5", "-5" },
    { "The answer is #### 1,234.", "1,234.", "1,234.", "1234", "1234", "1234" },
    { "3 apples and 45 pears, total 48.", "[invalid]", "48.", "3 apples and 45 pears total 48", "[invalid]", "48" },
    { "no number here", "[invalid]", "[invalid]", "no number here", "[invalid]", "[invalid]" },
    { "-5", "[invalid]", "-5", "-5", "[invalid]", "-5" },
    { "He paid $18.\n#### 18", "18", "18", "18", "18", "18" },
    { "5...", "[invalid]", "5...", "5..", "[invalid]", "5.." },
    { "a #### b #### 7", "7", "7", "7", "7", "7" },
    { "5.\n", "[invalid]", "5.", "5\n", "[invalid]", "5" },
    { "Costs 1.5 and -2", "[invalid]", "-2", "costs 1.5 and -2", "[invalid]", "-2" },
    { "x\n#### 72\n\nQuestion: y 9", "72", "9", "72\n\nquestion: y 9", "72", "9" },
    { "#### $3", "[invalid]", "$3", "3", "[invalid]", "3" },
    { "####  4", "[invalid]", "4", " 4", "[invalid]", "4" },
    { "total: 1,000,000 dollars", "[invalid]", "1,000,000", "total: 1000000 dollars", "[invalid]", "1000000" },
    { ".,", "[invalid]", ".,", "", "[invalid]", "" },
    { "-.5", "[invalid]", "-.5", "-.5", "[invalid]", "-.5" },
    { "7", "[invalid]", "7", "7", "[invalid]", "7" },
    { "ABC", "[invalid]", "[invalid]", "abc", "[invalid]", "[invalid]" },
    { "[INVALID]", "[invalid]", "[invalid]", "[invalid]", "[invalid]", "[invalid]" },
    { "12\n#### 1.0.", "1.0.", "1.0.", "1.0", "1.0", "1.0" },
};

static void expect_norm(dsq_gsm8k_scorer *sc, const char *in, const char *want)
{
    char *out;
    size_t n;
    assert_int_equal(dsq_gsm8k_normalize(sc, in, strlen(in), &out, &n), 0);
    assert_string_equal(out, want);
    assert_int_equal(n, strlen(want));
    free(out);
}

static void test_filters_match_python(void **state)
{
    (void)state;
    dsq_gsm8k_scorer *sc;
    assert_int_equal(dsq_gsm8k_scorer_create(&sc, NULL), 0);
    for (size_t i = 0; i < sizeof golden / sizeof golden[0]; i++) {
        const char *const *g = golden[i];
        char *st, *fl;
        assert_int_equal(dsq_gsm8k_extract(sc, DSQ_GSM8K_STRICT, g[0], strlen(g[0]), &st), 0);
        assert_int_equal(dsq_gsm8k_extract(sc, DSQ_GSM8K_FLEXIBLE, g[0], strlen(g[0]), &fl), 0);
        if (strcmp(st, g[1]) || strcmp(fl, g[2]))
            fail_msg("case %zu '%s': strict '%s' (want '%s'), flexible '%s' (want '%s')", i, g[0], st,
                     g[1], fl, g[2]);
        expect_norm(sc, g[0], g[3]);
        expect_norm(sc, st, g[4]);
        expect_norm(sc, fl, g[5]);
        free(st);
        free(fl);
    }
    char *x;
    assert_int_equal(dsq_gsm8k_extract(sc, 7, "1", 1, &x), DSQ_ERR_INVALID_ARG);
    /* bytes that are not UTF-8 do not upset the byte-mode regexes */
    assert_int_equal(dsq_gsm8k_extract(sc, DSQ_GSM8K_FLEXIBLE, "\xff\xfe 42 \xc3", 7, &x), 0);
    assert_string_equal(x, "42");
    free(x);
    dsq_gsm8k_scorer_free(sc);
}

static void test_exact_match(void **state)
{
    (void)state;
    dsq_gsm8k_scorer *sc;
    assert_int_equal(dsq_gsm8k_scorer_create(&sc, NULL), 0);
    const char *gold = "Janet sells 16 - 3 - 4 = <<16-3-4=9>>9 duck eggs.\nShe makes $18.\n#### 1,018";
    struct { const char *pred; int want; } cases[] = {
        { "1018", 1 }, { "1,018", 1 }, { "$1,018.", 1 }, { "1018.0", 0 }, { "[invalid]", 0 },
        { "blah #### 1018", 1 }, { "1018\n", 0 }, { "-1018", 0 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int m;
        assert_int_equal(dsq_gsm8k_exact_match(sc, cases[i].pred, strlen(cases[i].pred), gold,
                                               strlen(gold), &m), 0);
        if (m != cases[i].want) fail_msg("'%s': match %d, want %d", cases[i].pred, m, cases[i].want);
    }
    int m;
    assert_int_equal(dsq_gsm8k_exact_match(sc, "ABC", 3, "abc", 3, &m), 0);
    assert_int_equal(m, 1); /* ignore_case */

    dsq_gsm8k_score s;
    const char *comp = "She makes 9 * 2 = $18.\n#### 18\n\nQuestion: next 77";
    assert_int_equal(dsq_gsm8k_score_item(sc, comp, strlen(comp), "x\n#### 18", 9, dsq_gsm8k_stops, 3, &s), 0);
    assert_string_equal(s.strict, "18");
    assert_string_equal(s.flexible, "18"); /* 77 is past the stop string */
    assert_string_equal(s.gold, "18");
    assert_int_equal(s.correct_strict, 1);
    assert_int_equal(s.correct_flexible, 1);
    dsq_gsm8k_score_release(&s);
    /* without stop strings the last number wins */
    assert_int_equal(dsq_gsm8k_score_item(sc, comp, strlen(comp), "x\n#### 18", 9, NULL, 0, &s), 0);
    assert_string_equal(s.flexible, "77");
    assert_int_equal(s.correct_flexible, 0);
    dsq_gsm8k_score_release(&s);
    dsq_gsm8k_scorer_free(sc);

    /* mean_stderr: sample std / sqrt(n) */
    assert_true(dsq_gsm8k_stderr(0, 1) == 0);
    double se = dsq_gsm8k_stderr(3, 4); /* x = 1,1,1,0: sd = 0.5 */
    assert_true(se > 0.25 - 1e-12 && se < 0.25 + 1e-12);
}

/* ---- prompts and few-shot sampling ------------------------------------------- */

static void test_prompt_bytes(void **state)
{
    (void)state;
    dsq_gsm8k_item tr[2] = {
        { .question = (char[]){ "Q0?" }, .question_len = 3, .answer = (char[]){ "a0\n#### 1" }, .answer_len = 9 },
        { .question = (char[]){ "Two  spaces" }, .question_len = 11, .answer = (char[]){ "x\n#### 2" }, .answer_len = 8 },
    };
    dsq_gsm8k_set train = { tr, 2 };
    dsq_gsm8k_item doc = { .question = (char[]){ "Test?" }, .question_len = 5 };
    size_t shots[2] = { 1, 0 };
    char *p;
    size_t n;
    assert_int_equal(dsq_gsm8k_prompt(&train, shots, 2, &doc, &p, &n), 0);
    const char *want = "Question: Two  spaces\nAnswer: x\n#### 2\n\n"
                       "Question: Q0?\nAnswer: a0\n#### 1\n\n"
                       "Question: Test?\nAnswer:";
    assert_string_equal(p, want);
    assert_int_equal(n, strlen(want));
    free(p);
    assert_int_equal(dsq_gsm8k_prompt(&train, shots, 0, &doc, &p, &n), 0);
    assert_string_equal(p, "Question: Test?\nAnswer:");
    free(p);
    size_t bad = 2;
    assert_int_equal(dsq_gsm8k_prompt(&train, &bad, 1, &doc, &p, &n), DSQ_ERR_INVALID_ARG);
}

/* Values printed by CPython 3.11:
 *   r = random.Random(1234); [r.sample(range(7473), 5) for _ in range(3)]
 *   random.Random(1234).getrandbits(32) x3
 *   r = random.Random(0); r.sample(range(10), 5), r.sample(range(30), 8)
 *   random.Random(2**40 + 5).sample(range(100000), 3) */
static void test_python_random(void **state)
{
    (void)state;
    dsq_pyrand r;
    dsq_pyrand_seed(&r, 1234);
    assert_int_equal(dsq_pyrand_u32(&r), 4150886329u);
    assert_int_equal(dsq_pyrand_u32(&r), 3342196574u);
    assert_int_equal(dsq_pyrand_u32(&r), 1892932127u);

    static const size_t want[3][5] = {
        { 6374, 3610, 957, 61, 742 }, { 7462, 6610, 4769, 286, 5501 }, { 5677, 687, 806, 6279, 2905 },
    };
    dsq_gsm8k_fewshot f;
    assert_int_equal(dsq_gsm8k_fewshot_init(&f, 7473, 5, DSQ_GSM8K_SEED), 0);
    for (int i = 0; i < 3; i++) {
        size_t got[5];
        assert_int_equal(dsq_gsm8k_fewshot_next(&f, got), 0);
        for (int j = 0; j < 5; j++) assert_int_equal(got[j], want[i][j]);
    }
    /* pool branch (n <= setsize), including k > 5 */
    size_t a[5], b[8], c[3];
    dsq_pyrand_seed(&r, 0);
    assert_int_equal(dsq_pyrand_sample(&r, 10, 5, a), 0);
    assert_int_equal(dsq_pyrand_sample(&r, 30, 8, b), 0);
    static const size_t wa[5] = { 6, 9, 0, 2, 4 }, wb[8] = { 15, 12, 25, 26, 9, 29, 11, 18 };
    for (int j = 0; j < 5; j++) assert_int_equal(a[j], wa[j]);
    for (int j = 0; j < 8; j++) assert_int_equal(b[j], wb[j]);
    /* a seed wider than 32 bits */
    dsq_pyrand_seed(&r, (1ull << 40) + 5);
    assert_int_equal(dsq_pyrand_sample(&r, 100000, 3, c), 0);
    assert_int_equal(c[0], 66110);
    assert_int_equal(c[1], 67753);
    assert_int_equal(c[2], 35206);
    assert_int_equal(dsq_pyrand_sample(&r, 3, 4, c), DSQ_ERR_INVALID_ARG);
    assert_int_equal(dsq_gsm8k_fewshot_init(&f, 3, 4, 1), DSQ_ERR_INVALID_ARG);

    /* determinism: the same seed gives the same draws */
    dsq_gsm8k_fewshot f1, f2;
    dsq_gsm8k_fewshot_init(&f1, 500, 5, 99);
    dsq_gsm8k_fewshot_init(&f2, 500, 5, 99);
    for (int i = 0; i < 50; i++) {
        size_t x[5], y[5];
        dsq_gsm8k_fewshot_next(&f1, x);
        dsq_gsm8k_fewshot_next(&f2, y);
        assert_memory_equal(x, y, sizeof x);
        for (int j = 0; j < 5; j++)
            for (int k = j + 1; k < 5; k++) assert_true(x[j] != x[k]);
    }
}

/* ---- dataset errors ------------------------------------------------------------- */

static void expect_load_error(const char *text, const char *needle)
{
    dsq_gsm8k_set s;
    dsq_diag d;
    dsq_diag_clear(&d);
    int rc = dsq_gsm8k_parse(&s, text, strlen(text), "data.jsonl", &d);
    assert_int_equal(rc, DSQ_ERR_DATA);
    assert_null(s.items);
    char buf[1024];
    dsq_diag_format(&d, buf, sizeof buf);
    if (!strstr(buf, needle)) fail_msg("message '%s' lacks '%s'", buf, needle);
    assert_non_null(strstr(buf, "data.jsonl"));
}

static void test_dataset_errors(void **state)
{
    (void)state;
    const char *ok = "{\"question\": \"q1\", \"answer\": \"a\\n#### 1\"}\n";
    char buf[512];
    snprintf(buf, sizeof buf, "%s%s{\"question\": \"q\", \"answer\": \"x\"\n", ok, ok);
    expect_load_error(buf, "line 3: invalid JSON");
    snprintf(buf, sizeof buf, "%s{\"answer\": \"x\"}\n", ok);
    expect_load_error(buf, "line 2: missing \"question\" field");
    snprintf(buf, sizeof buf, "%s\n\n{\"question\": \"q\"}\n", ok);
    expect_load_error(buf, "line 4: missing \"answer\" field");
    expect_load_error("{\"question\": \"q\", \"answer\": 5}", "line 1: \"answer\" is not a string");
    expect_load_error("[1, 2]\n", "line 1: not a JSON object");
    expect_load_error("{\"question\": \"q\", \"answer\": \"a\"} trailing\n", "line 1: invalid JSON");
    expect_load_error("{'question': 'q'}\n", "line 1: invalid JSON");
    expect_load_error("", "empty dataset");
    expect_load_error("\n  \n\t\n", "empty dataset");

    dsq_gsm8k_set s;
    const char *two = "\n{\"question\": \"Q\\u2019s\", \"answer\": \"A\", \"extra\": [1]}\r\n"
                      "{\"answer\": \"B\", \"question\": \"R\"}";
    assert_int_equal(dsq_gsm8k_parse(&s, two, strlen(two), "x", NULL), 0);
    assert_int_equal(s.n, 2);
    assert_string_equal(s.items[0].question, "Q\xe2\x80\x99s");
    assert_int_equal(s.items[0].line, 2);
    assert_string_equal(s.items[1].answer, "B");
    assert_int_equal(s.items[1].line, 3);
    dsq_gsm8k_set_release(&s);
    const char *bom = "\xef\xbb\xbf{\"question\": \"q\", \"answer\": \"a\"}\n";
    assert_int_equal(dsq_gsm8k_parse(&s, bom, strlen(bom), "x", NULL), 0);
    assert_int_equal(s.n, 1);
    dsq_gsm8k_set_release(&s);

    dsq_diag d;
    dsq_diag_clear(&d);
    assert_int_equal(dsq_gsm8k_load(&s, "/nonexistent/test.jsonl", &d), DSQ_ERR_NOT_FOUND);
}

/* ---- stop strings ---------------------------------------------------------------- */

static void test_stop_strings(void **state)
{
    (void)state;
    const char *t = "It is 5.\n#### 5\n\nQuestion: what</s>";
    assert_int_equal(dsq_gsm8k_stop_pos(t, strlen(t), dsq_gsm8k_stops, 3), strlen("It is 5.\n#### 5\n\n"));
    const char *u = "a</s>b<|im_end|>Question:";
    assert_int_equal(dsq_gsm8k_stop_pos(u, strlen(u), dsq_gsm8k_stops, 3), 1);
    const char *v = "x<|im_end|>y</s>";
    assert_int_equal(dsq_gsm8k_stop_pos(v, strlen(v), dsq_gsm8k_stops, 3), 1);
    assert_int_equal(dsq_gsm8k_stop_pos("no stop", 7, dsq_gsm8k_stops, 3), 7);
    assert_int_equal(dsq_gsm8k_stop_pos("Questio", 7, dsq_gsm8k_stops, 3), 7);
    const char *extra[] = { "", "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>", "Question:" };
    const char *w = "42<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>Question:";
    assert_int_equal(dsq_gsm8k_stop_pos(w, strlen(w), extra, 3), 2);
    assert_int_equal(dsq_gsm8k_stop_pos("Question:", 9, dsq_gsm8k_stops, 3), 0);
}

/* ---- completions files ------------------------------------------------------------- */

static void expect_comp_error(const char *text, size_t n_docs, const char *needle)
{
    dsq_gsm8k_completions c;
    dsq_diag d;
    dsq_diag_clear(&d);
    assert_int_equal(dsq_gsm8k_completions_parse(&c, text, strlen(text), "c.jsonl", n_docs, &d), DSQ_ERR_DATA);
    char buf[1024];
    dsq_diag_format(&d, buf, sizeof buf);
    if (!strstr(buf, needle)) fail_msg("message '%s' lacks '%s'", buf, needle);
}

static void test_completions_file(void **state)
{
    (void)state;
    const char *answers[3] = { "a\n#### 5", "b\n#### 1,200", "c\n#### 7" };
    const char *text =
        "{\"doc_id\": 2, \"resps\": [[\"The answer is 7.\\n#### 7\"]], \"filtered_resps\": [\"7\"]}\n"
        "\n"
        "{\"doc_id\": 0, \"completion\": \"so 4 apples\\n#### 4\"}\n"
        "{\"doc_id\": 1, \"response\": \"That is $1,200.\"}\n";
    dsq_gsm8k_completions c;
    assert_int_equal(dsq_gsm8k_completions_parse(&c, text, strlen(text), "c", 3, NULL), 0);
    assert_int_equal(c.n_present, 3);
    dsq_gsm8k_scorer *sc;
    assert_int_equal(dsq_gsm8k_scorer_create(&sc, NULL), 0);
    size_t ks = 0, kf = 0;
    for (size_t i = 0; i < 3; i++) {
        dsq_gsm8k_score s;
        assert_non_null(c.text[i]);
        assert_int_equal(dsq_gsm8k_score_item(sc, c.text[i], c.len[i], answers[i], strlen(answers[i]),
                                              dsq_gsm8k_stops, 3, &s), 0);
        ks += (size_t)s.correct_strict;
        kf += (size_t)s.correct_flexible;
        dsq_gsm8k_score_release(&s);
    }
    assert_int_equal(ks, 1); /* doc 2 only: doc 0 says 4, doc 1 has no #### */
    assert_int_equal(kf, 2); /* docs 1 and 2 */
    dsq_gsm8k_completions_release(&c);
    dsq_gsm8k_scorer_free(sc);

    /* by ordinal, and resps as a flat list / plain string */
    const char *ord = "{\"resps\": [\"x 1\"]}\n{\"resps\": \"y 2\"}\n";
    assert_int_equal(dsq_gsm8k_completions_parse(&c, ord, strlen(ord), "c", 5, NULL), 0);
    assert_string_equal(c.text[0], "x 1");
    assert_string_equal(c.text[1], "y 2");
    assert_null(c.text[2]);
    assert_int_equal(c.n_present, 2);
    dsq_gsm8k_completions_release(&c);

    expect_comp_error("{\"doc_id\": 0, \"completion\": \"a\"}\n{\"doc_id\": 0, \"completion\": \"b\"}\n", 3,
                      "line 2: a second completion for doc 0");
    expect_comp_error("{\"doc_id\": 3, \"completion\": \"a\"}\n", 3, "line 1: doc 3 is beyond the 3 items");
    expect_comp_error("{\"doc_id\": \"1\", \"completion\": \"a\"}\n", 3, "line 1: \"doc_id\" is not a non-negative integer");
    expect_comp_error("{\"doc_id\": -1, \"completion\": \"a\"}\n", 3, "line 1: \"doc_id\" is not");
    expect_comp_error("{\"completion\": \"a\"}\n{\"text\": \"b\"}\n", 3, "line 2: no \"completion\"");
    expect_comp_error("{\"resps\": [[]]}\n", 3, "line 1: \"resps\" holds no string");
    expect_comp_error("{\"completion\": \"a\"}\n{oops\n", 3, "line 2: invalid JSON");
    expect_comp_error("", 3, "empty completions file");
}

/* ---- generation with a scripted model ---------------------------------------------------- */

enum { T_A, T_1, T_2, T_NL, T_Q, T_X, T_EOS, T_V };
static const char *const piece[T_V] = { "A", " 1", "2", "\n", "Question:", " x", "" };

/* Each request's last prompt token picks a script; the model emits it. */
static const int script[4][8] = {
    { T_A, T_1, T_NL, T_Q, T_X, T_X, T_X, T_X },   /* stop string */
    { T_2, T_EOS, T_2, T_2, T_2, T_2, T_2, T_2 },  /* EOS */
    { T_A, T_A, T_A, T_A, T_A, T_A, T_A, T_A },    /* length */
    { T_2, T_2, T_2, T_2, T_2, T_2, T_2, T_2 },    /* truncated prompt, length */
};

typedef struct {
    int which[2], step[2];
    int max_batch, prefills;
    char *text[4];
    dsq_gen_result res[4];
} fake;

static void one_hot(float *row, int t)
{
    for (int i = 0; i < T_V; i++) row[i] = i == t ? 3.0f : (float)-i;
}

static int fake_prefill(void *u, int slot, const int32_t *tok, size_t n, float *logits, dsq_diag *d)
{
    (void)d;
    fake *f = u;
    assert_true(slot >= 0 && slot < 2);
    f->which[slot] = tok[n - 1];
    f->step[slot] = 0;
    f->prefills++;
    one_hot(logits, script[f->which[slot]][0]);
    return 0;
}

static int fake_decode(void *u, const int *slots, const int32_t *tok, int n, float *logits, dsq_diag *d)
{
    (void)d;
    fake *f = u;
    if (n > f->max_batch) f->max_batch = n;
    for (int i = 0; i < n; i++) {
        int s = slots[i];
        int st = ++f->step[s];
        assert_int_equal(tok[i], script[f->which[s]][st - 1]); /* fed back what it chose */
        one_hot(logits + (size_t)i * T_V, script[f->which[s]][st]);
    }
    return 0;
}

static int fake_detok(void *u, const int32_t *ids, size_t n, char **text, size_t *len)
{
    (void)u;
    char buf[256] = "";
    for (size_t i = 0; i < n; i++) strcat(buf, piece[ids[i]]);
    *text = strdup(buf);
    *len = strlen(buf);
    return 0;
}

static int fake_done(void *u, size_t idx, dsq_gen_result *r)
{
    fake *f = u;
    assert_true(idx < 4);
    assert_null(f->text[idx]);
    f->res[idx] = *r;
    f->text[idx] = r->text;
    r->text = NULL; /* keep it */
    return 0;
}

static void test_generate(void **state)
{
    (void)state;
    fake f = { 0 };
    dsq_gen_ops ops = { .user = &f, .vocab = T_V, .n_slots = 2, .prefill = fake_prefill,
                        .decode = fake_decode, .detok = fake_detok };
    int32_t eos = T_EOS;
    dsq_gen_opts o = { .max_new_tokens = 5, .max_ctx = 10, .stops = dsq_gsm8k_stops, .n_stops = 3,
                       .eos = &eos, .n_eos = 1 };
    int32_t p0[] = { T_X, 0 }, p1[] = { 1 }, p2[] = { T_X, T_X, 2 };
    int32_t p3[] = { T_X, T_X, T_X, T_X, T_X, T_X, T_X, 3 }; /* 8 > 10 - 5 */
    const int32_t *prompts[4] = { p0, p1, p2, p3 };
    size_t np[4] = { 2, 1, 3, 8 };
    assert_int_equal(dsq_gsm8k_generate(&ops, &o, prompts, np, 4, fake_done, &f, NULL), 0);
    assert_string_equal(f.text[0], "A 1\n");
    assert_int_equal(f.res[0].stop, DSQ_GEN_STOP_STRING);
    assert_int_equal(f.res[0].n_gen, 4);
    assert_string_equal(f.text[1], "2");
    assert_int_equal(f.res[1].stop, DSQ_GEN_STOP_EOS);
    assert_int_equal(f.res[1].n_gen, 1);
    assert_string_equal(f.text[2], "AAAAA");
    assert_int_equal(f.res[2].stop, DSQ_GEN_STOP_LENGTH);
    assert_string_equal(f.text[3], "22222");
    assert_int_equal(f.res[3].truncated, 1);
    assert_int_equal(f.res[3].n_prompt, 5);
    assert_int_equal(f.prefills, 4);
    assert_int_equal(f.max_batch, 2);
    for (int i = 0; i < 4; i++) free(f.text[i]);

    volatile int cancel = 1;
    fake g = { 0 };
    ops.user = &g;
    o.cancel = &cancel;
    assert_int_equal(dsq_gsm8k_generate(&ops, &o, prompts, np, 4, fake_done, &g, NULL), DSQ_ERR_INTERRUPTED);
    o.max_ctx = 5;
    assert_int_equal(dsq_gsm8k_generate(&ops, &o, prompts, np, 4, fake_done, &g, NULL), DSQ_ERR_INVALID_ARG);
}

/* ---- token choice (sample.h) -------------------------------------------------------------- */

/* Greedy is the argmax with the lowest id on ties; a draw at temperature T
 * follows softmax(logits / T) (frequencies over many draws, within 4.5
 * standard errors); top_p keeps the most likely tokens until their mass
 * reaches top_p (ties: lower id first) and never draws another; the stream
 * depends only on its seed. */
static void test_sample_token(void **state)
{
    (void)state;
    enum { V = 5, N = 40000 };
    const float row[V] = { 1.0f, 2.0f, 0.5f, 2.0f, -1.0f };
    dsq_sample_cand scratch[V];
    dsq_sample_params greedy = { 0 };
    uint64_t rng = 1;
    assert_int_equal(dsq_sample_token(&greedy, &rng, row, V, scratch), 1);
    assert_int_equal(rng, 1); /* greedy draws nothing */
    const double temps[2] = { 1.0, 0.5 };
    for (int k = 0; k < 2; k++) {
        dsq_sample_params p = { .temperature = temps[k], .top_p = 1 };
        double z = 0, want[V];
        for (int i = 0; i < V; i++) z += want[i] = exp(row[i] / temps[k]);
        int count[V] = { 0 };
        rng = 42;
        for (int n = 0; n < N; n++) count[dsq_sample_token(&p, &rng, row, V, scratch)]++;
        for (int i = 0; i < V; i++) {
            double q = want[i] / z, se = sqrt(q * (1 - q) / N);
            if (fabs((double)count[i] / N - q) > 4.5 * se + 1e-9)
                fail_msg("T %.1f token %d: drawn %.4f, softmax %.4f", temps[k], i, (double)count[i] / N, q);
        }
    }
    /* nucleus: tokens 1 and 3 (equal, most likely) hold 0.38 + 0.38 of the mass at T 1: top_p 0.5
     * keeps both (the first alone is short of it), 0.3 keeps token 1 only */
    dsq_sample_params nuc = { .temperature = 1, .top_p = 0.5 };
    int seen[V] = { 0 };
    rng = 7;
    for (int n = 0; n < 2000; n++) seen[dsq_sample_token(&nuc, &rng, row, V, scratch)]++;
    assert_true(seen[1] > 0 && seen[3] > 0);
    assert_int_equal(seen[0] + seen[2] + seen[4], 0);
    nuc.top_p = 0.3;
    for (int n = 0; n < 200; n++) assert_int_equal(dsq_sample_token(&nuc, &rng, row, V, scratch), 1);
    /* the same seed, the same draws; another seed, other draws */
    dsq_sample_params p = { .temperature = 1, .top_p = 1 };
    uint64_t a = 99, b = 99, c = 100;
    int same = 1, differ = 0;
    for (int n = 0; n < 64; n++) {
        int32_t x = dsq_sample_token(&p, &a, row, V, scratch), y = dsq_sample_token(&p, &b, row, V, scratch);
        same &= x == y;
        differ |= x != dsq_sample_token(&p, &c, row, V, scratch);
    }
    assert_true(same);
    assert_true(differ);
}

/* ---- the real data, when ../shared has it ---------------------------------------------------- */

static void test_shared_gsm8k(void **state)
{
    (void)state;
    char *test = dsq_test_shared("gsm8k/test.jsonl"), *train = dsq_test_shared("gsm8k/train.jsonl");
    if (!test || !train) {
        free(test); free(train);
        skip(); /* ../shared/data/gsm8k absent */
    }
    dsq_gsm8k_set te, tr;
    dsq_diag d;
    dsq_diag_clear(&d);
    assert_int_equal(dsq_gsm8k_load(&te, test, &d), 0);
    assert_int_equal(dsq_gsm8k_load(&tr, train, &d), 0);
    assert_int_equal(te.n, 1319);
    assert_int_equal(tr.n, 7473);
    dsq_gsm8k_scorer *sc;
    assert_int_equal(dsq_gsm8k_scorer_create(&sc, NULL), 0);
    regex_t num;
    assert_int_equal(regcomp(&num, "^-?[0-9]+(\\.[0-9]+)?$", REG_EXTENDED | REG_NOSUB), 0);
    for (size_t i = 0; i < te.n; i++) {
        const dsq_gsm8k_item *it = &te.items[i];
        dsq_gsm8k_score s;
        /* the reference answer scored as a completion: both filters right */
        assert_int_equal(dsq_gsm8k_score_item(sc, it->answer, it->answer_len, it->answer, it->answer_len,
                                              dsq_gsm8k_stops, 3, &s), 0);
        if (regexec(&num, s.gold, 0, NULL, 0) != 0) fail_msg("item %zu: gold '%s' is not a number", i, s.gold);
        if (!s.correct_strict || !s.correct_flexible)
            fail_msg("item %zu: its own answer scores %d/%d", i, s.correct_strict, s.correct_flexible);
        dsq_gsm8k_score_release(&s);
    }
    regfree(&num);
    /* the first test prompt uses lm-eval's first draw */
    dsq_gsm8k_fewshot f;
    size_t shots[5];
    dsq_gsm8k_fewshot_init(&f, tr.n, 5, DSQ_GSM8K_SEED);
    dsq_gsm8k_fewshot_next(&f, shots);
    char *p;
    size_t n;
    assert_int_equal(dsq_gsm8k_prompt(&tr, shots, 5, &te.items[0], &p, &n), 0);
    assert_int_equal(strncmp(p, "Question: ", 10), 0);
    assert_int_equal(memcmp(p + 10, tr.items[6374].question, tr.items[6374].question_len), 0);
    assert_true(n > 12 && strcmp(p + n - 8, "\nAnswer:") == 0);
    free(p);
    dsq_gsm8k_scorer_free(sc);
    dsq_gsm8k_set_release(&te);
    dsq_gsm8k_set_release(&tr);
    free(test);
    free(train);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_filters_match_python),
        cmocka_unit_test(test_exact_match),
        cmocka_unit_test(test_prompt_bytes),
        cmocka_unit_test(test_python_random),
        cmocka_unit_test(test_dataset_errors),
        cmocka_unit_test(test_stop_strings),
        cmocka_unit_test(test_completions_file),
        cmocka_unit_test(test_generate),
        cmocka_unit_test(test_sample_token),
        cmocka_unit_test(test_shared_gsm8k),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
