/* test_eval_report.c - ds-eval's reports (eval_report.h) as JSON and text,
 * key order and every field's mapping checked against the whole printed
 * line, and the gsm8k run of completions made elsewhere (eval_flow.h):
 * its report, warnings and per-item file. */
#include "dsq_test.h"
#include "dsq_json.h"
#include "eval_flow.h"
#include "eval_report.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* o as ds-eval prints it (plain, %.10g doubles), then freed */
static char *json_line(json_object *o)
{
    char *s = strdup(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
    json_object_put(o);
    return s;
}

static void assert_json(json_object *o, const char *want)
{
    char *got = json_line(o);
    if (strcmp(got, want)) fprintf(stderr, "got:  %s\nwant: %s\n", got, want);
    assert_string_equal(got, want);
    free(got);
}

static void assert_text(void (*fn)(FILE *, const void *), const void *r, const char *want)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    fn(f, r);
    fclose(f);
    if (strcmp(buf, want)) fprintf(stderr, "got:\n%s\nwant:\n%s\n", buf, want);
    assert_string_equal(buf, want);
    free(buf);
}

static void ppl_text(FILE *f, const void *r) { dsq_ppl_report_text(f, r); }
static void kld_text(FILE *f, const void *r) { dsq_kld_report_text(f, r); }
static void gsm_text(FILE *f, const void *r) { dsq_gsm8k_report_text(f, r); }
static void chat_text(FILE *f, const void *r) { dsq_chat_report_text(f, r); }

static void test_json_num(void **state)
{
    (void)state;
    assert_json(dsq_json_double(NAN), "null");
    assert_json(dsq_json_double(INFINITY), "null");
    assert_json(dsq_json_double(2), "2.0");
    assert_json(dsq_json_double(0.125), "0.125");
}

static void test_ppl(void **state)
{
    (void)state;
    dsq_ppl_report r = { .plan = { .n_ctx = 64, .first = 32, .n_chunks = 5, .per_chunk = 31, .bos = 1 },
                         .res = { .n_chunks = 5, .count = 155, .mean_nll = 2.5, .ppl = 12.25, .ppl_stderr = 0.75 },
                         .secs = 4,
                         .bos_id = 1,
                         .bos = DSQ_TEXT_BOS_WINDOW };
    assert_json(dsq_ppl_report_json(&r),
                "{\"command\":\"ppl\",\"ppl\":12.25,\"ppl_stderr\":0.75,\"mean_nll\":2.5,\"tokens_scored\":155,"
                "\"windows\":5,\"n_ctx\":64,\"bos\":\"window\",\"bos_id\":1,\"seconds\":4.0,\"tokens_per_s\":80.0}");
    assert_text(ppl_text, &r,
                "PPL = 12.2500 +/- 0.75000\n"
                "mean NLL 2.500000 nats/token over 155 tokens (5 windows of 64, second half scored, BOS over each "
                "window's first token)\n"
                "80.0 tokens/s (320 tokens in 4.0 s)\n");
    r.bos = DSQ_TEXT_BOS_FIRST;
    r.plan.bos = -1;
    r.saved_logits = "base.logp";
    r.res.ppl = NAN;
    assert_json(dsq_ppl_report_json(&r),
                "{\"command\":\"ppl\",\"ppl\":null,\"ppl_stderr\":0.75,\"mean_nll\":2.5,\"tokens_scored\":155,"
                "\"windows\":5,\"n_ctx\":64,\"bos\":\"first\",\"bos_id\":1,\"seconds\":4.0,\"tokens_per_s\":80.0,"
                "\"saved_logits\":\"base.logp\"}");
    r.res.ppl = 12.25;
    assert_text(ppl_text, &r,
                "PPL = 12.2500 +/- 0.75000\n"
                "mean NLL 2.500000 nats/token over 155 tokens (5 windows of 64, second half scored, BOS once at "
                "the start of the text)\n"
                "80.0 tokens/s (320 tokens in 4.0 s)\n"
                "base log-probs saved to base.logp\n");
    r.bos = DSQ_TEXT_BOS_NO;
    r.bos_id = -1;
    r.saved_logits = NULL;
    char *s = json_line(dsq_ppl_report_json(&r));
    assert_non_null(strstr(s, "\"bos\":\"no\",\"bos_id\":null,"));
    free(s);
}

static dsq_kld_report kld_sample(void)
{
    dsq_kld_report r = { .plan = { .n_ctx = 32, .first = 16, .n_chunks = 3, .per_chunk = 15, .bos = 2 },
                         .k = { .count = 45, .kld_mean = 0.01, .kld_stderr = 0.002, .kld_mean_lo = 0.007, .kld_mean_hi = 0.013, .kld_median = 0.005, .kld_p90 = 0.02, .kld_p95 = 0.03, .kld_p99 = 0.04, .kld_p999 = 0.05, .kld_max = 0.06, .kld_min = 0.0001, .same_top = 0.9, .same_top_stderr = 0.04, .ppl = 10.5, .ppl_base = 10.25, .ppl_ratio = 1.02, .ppl_delta = 0.25, .ln_ratio_mean = 0.0198, .ln_ratio_stderr = 0.003, .dp_rms = 0.011 },
                         .secs = 2,
                         .bos = -1,
                         .base_topk = 16 };
    return r;
}

static void test_kld(void **state)
{
    (void)state;
    dsq_kld_report r = kld_sample();
    const char *tail = "\"tokens_scored\":45,\"kld_mean\":0.01,\"kld_stderr\":0.002,\"kld_mean_lo\":0.007,"
                       "\"kld_mean_hi\":0.013,\"kld_median\":0.005,\"kld_p90\":0.02,\"kld_p95\":0.03,"
                       "\"kld_p99\":0.04,\"kld_p999\":0.05,\"kld_max\":0.06,\"kld_min\":0.0001,\"same_top1\":0.9,"
                       "\"same_top1_stderr\":0.04,\"ppl\":10.5,\"ppl_base\":10.25,\"ppl_ratio\":1.02,"
                       "\"ppl_delta\":0.25,\"ln_ppl_ratio\":0.0198,\"ln_ppl_ratio_stderr\":0.003,\"dp_rms\":0.011,"
                       "\"seconds\":2.0}";
    char want[2048];
    snprintf(want, sizeof want, "{\"command\":\"kld\",\"bos\":\"window\",\"base_window_bos_id\":2,%s", tail);
    assert_json(dsq_kld_report_json(&r), want);
    const char *head = "tokens scored  : 45 (3 windows of 32)\n"
                       "PPL(Q)         : 10.5000   PPL(base): 10.2500\n"
                       "PPL ratio      : 1.020000 (delta +0.2500, ln ratio 0.019800 +/- 0.003000)\n"
                       "Mean    KLD    : 0.010000 +/- 0.002000\n"
                       "Mean    KLD 95%: 0.007000 .. 0.013000 (bootstrap over 3 windows)\n"
                       "Median  KLD    : 0.005000\n"
                       "99.0%   KLD    : 0.040000\n"
                       "99.9%   KLD    : 0.050000\n"
                       "Maximum KLD    : 0.060000\n";
    snprintf(want, sizeof want, "%sSame top-1     : 90.000 +/- 4.000 %%\nRMS dp         : 1.100 %%\n", head);
    assert_text(kld_text, &r, want);

    /* --bos first checked against --data, no per-window BOS in the base */
    r.bos = DSQ_TEXT_BOS_FIRST;
    r.plan.bos = -1;
    snprintf(want, sizeof want, "{\"command\":\"kld\",\"bos\":\"first\",\"base_window_bos_id\":null,%s", tail);
    assert_json(dsq_kld_report_json(&r), want);
    r.bos = -1;
    snprintf(want, sizeof want, "{\"command\":\"kld\",\"bos\":null,\"base_window_bos_id\":null,%s", tail);
    assert_json(dsq_kld_report_json(&r), want);

    /* served: a lower bound, top-k at some positions */
    r = kld_sample();
    r.endpoint = 1;
    r.ki = (dsq_ep_kld_info){
        .topk_positions = 40,
        .exact_positions = 38,
        .text_positions = 7,
        .same_top_count = 40,
        .requested_k = 20,
    };
    snprintf(want, sizeof want,
             "{\"command\":\"kld\",\"bos\":\"window\",\"base_window_bos_id\":2,\"kld_lower_bound\":true,"
             "\"kld_served_form\":\"mixed\",\"prompt_logprobs_k\":20,\"topk_positions\":40,"
             "\"topk_exact_positions\":38,\"topk_text_mapped_positions\":7,\"same_top1_positions\":40,%s",
             tail);
    assert_json(dsq_kld_report_json(&r), want);
    snprintf(want, sizeof want,
             "%s(served model: KLD over the base's top-16 from the served top log-probs (prompt_logprobs k=20; 7 "
             "mapped from text) at 40 of 45 positions, 38 with every base top-k token served; a LOWER BOUND of the "
             "true KLD)\n"
             "(served model: KLD over {target token, rest} only at 5 positions (no id-keyed prompt_logprobs; no "
             "--tokenizer or spellings differ), a LOWER BOUND of the true KLD)\n"
             "Same top-1     : 90.000 +/- 4.000 %% (over the positions the server ranked)\n"
             "RMS dp         : 1.100 %%\n",
             head);
    assert_text(kld_text, &r, want);
    r.ki.topk_positions = 45;
    char *s = json_line(dsq_kld_report_json(&r));
    assert_non_null(strstr(s, "\"kld_served_form\":\"topk\","));
    free(s);
    r.ki = (dsq_ep_kld_info){ 0 };
    s = json_line(dsq_kld_report_json(&r));
    assert_non_null(strstr(s, "\"kld_served_form\":\"target_vs_rest\","));
    free(s);
    snprintf(want, sizeof want,
             "%s(served model: KLD over {target token, rest} only at 45 positions (no id-keyed prompt_logprobs; no "
             "--tokenizer or spellings differ), a LOWER BOUND of the true KLD)\n"
             "Same top-1     : unknown (the server named no token ids)\n"
             "RMS dp         : 1.100 %%\n",
             head);
    assert_text(kld_text, &r, want);
}

static void test_gsm8k(void **state)
{
    (void)state;
    dsq_gsm8k_report r = {
        .n = 8,
        .scored = 7,
        .strict = 2,
        .flexible = 4,
        .shots = 5,
        .seed = 1234,
        .gen_tokens = 300,
        .run_gen_tokens = 200,
        .resumed = 3,
        .refused = 1,
        .secs = 4,
        .journal = "items.jsonl",
    };
    char se2[32], se4[32];
    snprintf(se2, sizeof se2, "%.10g", dsq_gsm8k_stderr(2, 8));
    snprintf(se4, sizeof se4, "%.10g", dsq_gsm8k_stderr(4, 8));
    char want[1024];
    snprintf(want, sizeof want,
             "{\"command\":\"gsm8k\",\"task_version\":3,\"n\":8,\"missing\":1,\"shots\":5,\"seed\":1234,"
             "\"gen_tokens\":300,\"resumed\":3,\"refused\":1,\"run_gen_tokens\":200,\"seconds\":4.0,"
             "\"gen_tokens_per_s\":50.0,\"strict-match\":{\"exact_match\":0.25,\"stderr\":%s,\"correct\":2},"
             "\"flexible-extract\":{\"exact_match\":0.5,\"stderr\":%s,\"correct\":4}}",
             se2, se4);
    assert_json(dsq_gsm8k_report_json(&r), want);
    snprintf(want, sizeof want,
             "gsm8k (lm-eval v3.0), 5-shot, seed 1234, 7 items (3 from items.jsonl), 200 new tokens in 4.0 s "
             "(50.0 tokens/s)\n"
             "  flexible-extract  exact_match 0.5000 +/- %.4f  (4/8)\n"
             "  strict-match      exact_match 0.2500 +/- %.4f  (2/8)\n",
             dsq_gsm8k_stderr(4, 8), dsq_gsm8k_stderr(2, 8));
    assert_text(gsm_text, &r, want);
    r.resumed = 0;
    snprintf(want, sizeof want,
             "gsm8k (lm-eval v3.0), 5-shot, seed 1234, 7 items, 200 tokens in 4.0 s (50.0 tokens/s)\n"
             "  flexible-extract  exact_match 0.5000 +/- %.4f  (4/8)\n"
             "  strict-match      exact_match 0.2500 +/- %.4f  (2/8)\n",
             dsq_gsm8k_stderr(4, 8), dsq_gsm8k_stderr(2, 8));
    assert_text(gsm_text, &r, want);
    /* scored from a file: no generation fields */
    r.score = "comp.jsonl";
    snprintf(want, sizeof want,
             "{\"command\":\"gsm8k\",\"task_version\":3,\"n\":8,\"missing\":1,"
             "\"strict-match\":{\"exact_match\":0.25,\"stderr\":%s,\"correct\":2},"
             "\"flexible-extract\":{\"exact_match\":0.5,\"stderr\":%s,\"correct\":4}}",
             se2, se4);
    assert_json(dsq_gsm8k_report_json(&r), want);
    snprintf(want, sizeof want,
             "gsm8k (lm-eval v3.0 filters), 8 items, 7 completions from comp.jsonl\n"
             "  flexible-extract  exact_match 0.5000 +/- %.4f  (4/8)\n"
             "  strict-match      exact_match 0.2500 +/- %.4f  (2/8)\n",
             dsq_gsm8k_stderr(4, 8), dsq_gsm8k_stderr(2, 8));
    assert_text(gsm_text, &r, want);
}

static void test_chat(void **state)
{
    (void)state;
    dsq_chat_report r = { .suite = "aisbench-0shot-cot", .n = 4, .samples = 1, .temperature = 0.5, .max_tokens = 512, .secs = 2, .sm = { .items = 4, .missing = 1, .samples = 1, .acc = 0.75, .acc_se = 0.25, .pass_n = 0.75, .correct = 3, .gen_tokens = 90, .reasoning_chars = 12 } };
    assert_json(dsq_chat_report_json(&r),
                "{\"command\":\"gsm8k\",\"chat\":true,\"prompt\":\"aisbench-0shot-cot\",\"n\":4,\"samples\":1,"
                "\"missing\":1,\"temperature\":0.5,\"max_tokens\":512,\"gen_tokens\":90,\"reasoning_chars\":12,"
                "\"seconds\":2.0,\"accuracy\":{\"accuracy\":0.75,\"stderr\":0.25,\"correct\":3,\"pass@1\":0.75}}");
    assert_text(chat_text, &r,
                "gsm8k chat (aisbench-0shot-cot), 4 items x 1 sample, 90 tokens in 2.0 s, reasoning 12 chars\n"
                "  accuracy          0.7500 +/- 0.2500  (3/4)\n");
    r = (dsq_chat_report){ .suite = "lm-eval-cot-llama", .lmeval = 1, .template_id = "deepseek-v3", .n = 2, .samples = 3, .temperature = 0, .max_tokens = 256, .secs = 1, .sm = { .items = 2, .samples = 3, .acc = 0.5, .acc_se = 0.125, .pass_n = 1, .correct = 3, .acc_flex = 0.625, .acc_flex_se = 0.0625, .pass_n_flex = 0.5, .correct_flex = 4, .gen_tokens = 60 } };
    assert_json(dsq_chat_report_json(&r),
                "{\"command\":\"gsm8k\",\"chat\":true,\"prompt\":\"lm-eval-cot-llama\",\"chat_template\":"
                "\"deepseek-v3\",\"n\":2,\"samples\":3,\"missing\":0,\"temperature\":0.0,\"max_tokens\":256,"
                "\"gen_tokens\":60,\"reasoning_chars\":0,\"seconds\":1.0,"
                "\"strict-match\":{\"accuracy\":0.5,\"stderr\":0.125,\"correct\":3,\"pass@3\":1.0},"
                "\"flexible-extract\":{\"accuracy\":0.625,\"stderr\":0.0625,\"correct\":4,\"pass@3\":0.5}}");
    assert_text(chat_text, &r,
                "gsm8k chat (lm-eval-cot-llama, template deepseek-v3), 2 items x 3 samples, 60 tokens in 1.0 s, "
                "reasoning 0 chars\n"
                "  strict-match      0.5000 +/- 0.1250  (3/6)  pass@3 1.0000\n"
                "  flexible-extract  0.6250 +/- 0.0625  (4/6)  pass@3 0.5000\n");
}

/* ---- the gsm8k run over completions made elsewhere ---- */

typedef struct seen {
    char notes[4][512];
    int levels[4];
    int n;
} seen;

static void on_note(void *ctx, int level, const char *msg)
{
    seen *s = ctx;
    if (s->n < 4) {
        s->levels[s->n] = level;
        snprintf(s->notes[s->n], sizeof s->notes[0], "%s", msg);
    }
    s->n++;
}

static void test_gsm8k_flow_score(void **state)
{
    (void)state;
    char *dir = dsq_test_tmpdir();
    char data[512], comp[512], out[512], none[512];
    snprintf(data, sizeof data, "%s/test.jsonl", dir);
    snprintf(comp, sizeof comp, "%s/comp.jsonl", dir);
    snprintf(out, sizeof out, "%s/items.jsonl", dir);
    snprintf(none, sizeof none, "%s/none.jsonl", dir);
    const char *test = "{\"question\": \"q0\", \"answer\": \"a\\n#### 5\"}\n"
                       "{\"question\": \"q1\", \"answer\": \"b\\n#### 7\"}\n"
                       "{\"question\": \"q2\", \"answer\": \"c\\n#### 9\"}\n";
    /* doc 0 strict and flexible, doc 1 flexible only, doc 2 missing */
    const char *c = "{\"doc_id\": 0, \"completion\": \"so\\n#### 5\"}\n"
                    "{\"doc_id\": 1, \"completion\": \"it is 7\"}\n";
    const char *far = "{\"doc_id\": 2, \"completion\": \"#### 9\"}\n";
    dsq_test_write(data, test, strlen(test));
    dsq_test_write(comp, c, strlen(c));
    dsq_test_write(none, far, strlen(far));
    seen sn = { 0 };
    dsq_gsm8k_flow_opts o = { .s = { .ev = { .note = on_note, .ctx = &sn } }, .data = data, .score = comp, .out = out, .shots = 5, .seed = 1234, .bos = -1 };
    dsq_gsm8k_report r;
    dsq_diag d;
    dsq_diag_clear(&d);
    assert_int_equal(dsq_gsm8k_flow(&o, &r, &d), DSQ_OK);
    assert_int_equal(r.n, 3);
    assert_int_equal(r.scored, 2);
    assert_int_equal(r.strict, 1);
    assert_int_equal(r.flexible, 2);
    assert_string_equal(r.score, comp);
    assert_int_equal(sn.n, 1);
    assert_int_equal(sn.levels[0], 0);
    assert_string_equal(sn.notes[0], "1 of 3 items have no completion; they count as wrong");
    struct stat st;
    assert_int_equal(stat(out, &st), 0);
    assert_true(st.st_size > 0);

    /* --limit 2: both items there, no warning; the file exists: refused without force */
    sn.n = 0;
    o.limit = 2;
    dsq_diag_clear(&d);
    assert_true(dsq_gsm8k_flow(&o, &r, &d) < 0);
    o.force = 1;
    dsq_diag_clear(&d);
    assert_int_equal(dsq_gsm8k_flow(&o, &r, &d), DSQ_OK);
    assert_int_equal(r.n, 2);
    assert_int_equal(r.scored, 2);
    assert_int_equal(sn.n, 0);

    /* no completion among the first items: an error naming the file */
    o.score = none;
    o.out = NULL;
    dsq_diag_clear(&d);
    assert_int_equal(dsq_gsm8k_flow(&o, &r, &d), DSQ_ERR_DATA);
    assert_string_equal(d.path, none);
    dsq_test_rmtree(dir);
    free(dir);
}

/* ---- ppl then kld on the bundled sample model ---- */

typedef struct events {
    int notes, loaded, begins, ends;
    size_t last_done;
    char label[16];
} events;

static void ev_note(void *ctx, int level, const char *msg)
{
    events *e = ctx;
    e->notes++;
    if (level == 3 && !strncmp(msg, "loaded in ", 10)) e->loaded++;
}
static void ev_begin(void *ctx, const char *label, const char *unit, size_t total)
{
    events *e = ctx;
    (void)unit;
    (void)total;
    e->begins++;
    snprintf(e->label, sizeof e->label, "%s", label);
}
static void ev_progress(void *ctx, size_t done) { ((events *)ctx)->last_done = done; }
static void ev_end(void *ctx) { ((events *)ctx)->ends++; }

static void test_ppl_kld_flow(void **state)
{
    (void)state;
    const char *model = "samples/tiny-dsv3", *text = "samples/data/heldout.txt";
    struct stat st;
    if (stat(model, &st) != 0 || stat(text, &st) != 0) {
        fprintf(stderr, "skip: %s or %s absent\n", model, text);
        skip();
    }
    char *dir = dsq_test_tmpdir();
    char base[512];
    snprintf(base, sizeof base, "%s/base.logp", dir);
    events ev = { 0 };
    dsq_eval_setup s = {
        .model = { .model = model, .threads = 1 },
        .ev = { .note = ev_note, .begin = ev_begin, .progress = ev_progress, .end = ev_end, .ctx = &ev },
    };
    dsq_ppl_flow_opts po = {
        .s = s,
        .data = text,
        .bos = DSQ_TEXT_BOS_WINDOW,
        .limit_tokens = 256,
        .ctx = 64,
        .save_logits = base,
        .logits_format = DSQ_LOGP_U16,
        .logits_topk = 16,
    };
    dsq_ppl_report pr;
    dsq_diag d;
    dsq_diag_clear(&d);
    assert_int_equal(dsq_ppl_flow(&po, &pr, &d), DSQ_OK);
    assert_int_equal(pr.plan.n_ctx, 64);
    assert_int_equal(pr.plan.n_chunks, 4);
    assert_int_equal(pr.res.count, 4 * pr.plan.per_chunk);
    assert_true(pr.bos_id >= 0 && pr.plan.bos == pr.bos_id);
    assert_true(isfinite(pr.res.ppl) && pr.res.ppl > 1);
    assert_string_equal(pr.saved_logits, base);
    assert_string_equal(ev.label, "ppl");
    assert_int_equal(ev.loaded, 1);
    assert_int_equal(ev.begins, 1);
    assert_int_equal(ev.ends, 1);
    assert_int_equal(ev.last_done, 4);
    assert_int_equal(stat(base, &st), 0);

    /* the same model against its own base: the same windows, KLD ~0, same top-1 everywhere */
    ev = (events){ 0 };
    dsq_kld_flow_opts ko = { .s = s, .base = base, .data = text, .bos = -1 };
    dsq_kld_report kr;
    assert_int_equal(dsq_kld_flow(&ko, &kr, &d), DSQ_OK);
    assert_int_equal(kr.plan.n_chunks, 4);
    assert_int_equal(kr.plan.bos, pr.bos_id);
    assert_int_equal(kr.k.count, pr.res.count);
    assert_true(fabs(kr.k.kld_mean) < 1e-6);
    assert_true(kr.k.same_top > 0.999);
    assert_true(fabs(kr.k.ppl - pr.res.ppl) < 1e-6 * pr.res.ppl);
    assert_int_equal(kr.endpoint, 0);
    assert_int_equal(kr.bos, -1);
    assert_string_equal(ev.label, "kld");
    assert_int_equal(ev.last_done, 4);

    /* the base checked against the text under another BOS policy: refused */
    ko.bos = DSQ_TEXT_BOS_NO;
    dsq_diag_clear(&d);
    assert_int_equal(dsq_kld_flow(&ko, &kr, &d), DSQ_ERR_DATA);

    /* the base exists: refused without overwrite, a missing text names itself */
    dsq_diag_clear(&d);
    assert_true(dsq_ppl_flow(&po, &pr, &d) < 0);
    po.save_logits = NULL;
    po.data = "samples/data/no-such-text.txt";
    dsq_diag_clear(&d);
    assert_true(dsq_ppl_flow(&po, &pr, &d) < 0);
    assert_non_null(strstr(d.path, "no-such-text.txt"));
    dsq_test_rmtree(dir);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_json_num),
        cmocka_unit_test(test_ppl),
        cmocka_unit_test(test_kld),
        cmocka_unit_test(test_gsm8k),
        cmocka_unit_test(test_chat),
        cmocka_unit_test(test_gsm8k_flow_score),
        cmocka_unit_test(test_ppl_kld_flow),
    };
    json_c_set_serialization_double_format("%.10g", JSON_C_OPTION_GLOBAL);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
