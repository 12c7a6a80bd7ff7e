/* test_serve.c - the JSON on both sides of ds-serve / ds-eval --endpoint:
 * request bodies (defaults, the four prompt forms, type and range errors
 * naming the field), OpenAI error objects, and the client's response
 * parsers (completions, /models, prompt log-probs in the OpenAI echo form
 * and vLLM's prompt_logprobs form), plus the resumable gsm8k journal; the
 * integer fields' integral floats, how much of a growing text a stream may
 * send, and log-probs asked beyond a (served) model's vocabulary. */
#include "dsq_test.h"
#include "endpoint.h"
#include "server.h"
#include "chat_reasoning.h"
#include "chat_template.h"
#include "chat_run.h"
#include "calib_fixture.h"
#include "dsq_file.h"
#include "synth_ckpt.h"

#include <curl/curl.h>
#include <json-c/json.h>

#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const dsq_srv_limits lim = { .max_body = 4096, .max_tokens = 100, .default_max_tokens = 16, .vocab = 50 };

static int parse(const char *body, dsq_srv_params *p, char *err, char *param)
{
    return dsq_srv_parse_completion(body, strlen(body), &lim, p, err, 256, param, 64);
}

static void test_request_ok(void **st)
{
    (void)st;
    dsq_srv_params p;
    char err[256], param[64];
    assert_int_equal(parse("{\"prompt\": \"hi\"}", &p, err, param), DSQ_OK);
    assert_int_equal(p.n_prompts, 1);
    assert_string_equal(p.prompts[0].text, "hi");
    assert_int_equal(p.max_tokens, 16);          /* OpenAI's default */
    assert_true(p.temperature == 1.0 && p.top_p == 1.0);
    assert_int_equal(p.logprobs, -1);
    assert_false(p.echo || p.stream || p.has_seed);
    dsq_srv_params_release(&p);

    assert_int_equal(parse("{\"model\": \"m\", \"prompt\": [[1, 2], [3]], \"max_tokens\": 0, \"temperature\": 0,"
                           " \"stop\": [\"Question:\", \"\", \"</s>\"], \"logprobs\": 3, \"echo\": true, \"seed\": -1,"
                           " \"stream\": true, \"stream_options\": {\"include_usage\": true}, \"user\": \"x\"}", &p, err, param), DSQ_OK);
    assert_string_equal(p.model, "m");
    assert_int_equal(p.n_prompts, 2);
    assert_int_equal(p.prompts[0].n_ids, 2);
    assert_int_equal(p.prompts[1].ids[0], 3);
    assert_int_equal(p.max_tokens, 0);
    assert_int_equal(p.n_stop, 2);              /* the empty stop string never matches: dropped */
    assert_string_equal(p.stop[1], "</s>");
    assert_int_equal(p.logprobs, 3);
    assert_true(p.echo && p.stream && p.include_usage && p.has_seed);
    assert_true(p.seed == UINT64_MAX);
    dsq_srv_params_release(&p);

    assert_int_equal(parse("{\"prompt\": [\"a\", \"b\"], \"stop\": \"x\"}", &p, err, param), DSQ_OK);
    assert_int_equal(p.n_prompts, 2);
    assert_int_equal(p.n_stop, 1);
    dsq_srv_params_release(&p);
    assert_int_equal(parse("{\"prompt\": [4, 5, 49]}", &p, err, param), DSQ_OK);
    assert_int_equal(p.n_prompts, 1);
    assert_int_equal(p.prompts[0].n_ids, 3);
    dsq_srv_params_release(&p);
}

static void test_request_errors(void **st)
{
    (void)st;
    static const struct { const char *body, *param; int status; } cases[] = {
        { "", "", DSQ_ERR_JSON },
        { "{\"prompt\": \"a\"", "", DSQ_ERR_JSON },
        { "{\"prompt\": \"a\"} x", "", DSQ_ERR_JSON },
        { "[1]", "", DSQ_ERR_JSON },
        { "{}", "prompt", DSQ_ERR_INVALID_ARG },
        { "{\"prompt\": null}", "prompt", DSQ_ERR_INVALID_ARG },
        { "{\"prompt\": 3}", "prompt", DSQ_ERR_JSON },
        { "{\"prompt\": []}", "prompt", DSQ_ERR_INVALID_ARG },
        { "{\"prompt\": [50]}", "prompt", DSQ_ERR_INVALID_ARG },
        { "{\"prompt\": [-1]}", "prompt", DSQ_ERR_INVALID_ARG },
        { "{\"prompt\": [[1], 2]}", "prompt", DSQ_ERR_JSON },
        { "{\"prompt\": [1.5]}", "prompt", DSQ_ERR_JSON },
        { "{\"prompt\": \"a\", \"max_tokens\": 101}", "max_tokens", DSQ_ERR_INVALID_ARG },
        { "{\"prompt\": \"a\", \"max_tokens\": 1.25}", "max_tokens", DSQ_ERR_JSON },
        { "{\"prompt\": \"a\", \"temperature\": 3}", "temperature", DSQ_ERR_INVALID_ARG },
        { "{\"prompt\": \"a\", \"top_p\": 0}", "top_p", DSQ_ERR_INVALID_ARG },
        { "{\"prompt\": \"a\", \"logprobs\": 21}", "logprobs", DSQ_ERR_INVALID_ARG },
        { "{\"prompt\": \"a\", \"logprobs\": true}", "logprobs", DSQ_ERR_JSON },
        { "{\"prompt\": \"a\", \"echo\": 1}", "echo", DSQ_ERR_JSON },
        { "{\"prompt\": \"a\", \"stop\": [\"x\", 2]}", "stop", DSQ_ERR_JSON },
        { "{\"prompt\": \"a\", \"model\": 7}", "model", DSQ_ERR_JSON },
        { "{\"prompt\": \"a\", \"n\": 2}", "n", DSQ_ERR_INVALID_ARG },
        { "{\"prompt\": \"a\", \"logit_bias\": {\"1\": 5}}", "logit_bias", DSQ_ERR_INVALID_ARG },
        { "{\"prompt\": \"a\", \"stream_options\": 1}", "stream_options", DSQ_ERR_JSON },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        dsq_srv_params p;
        char err[256], param[64];
        int rc = parse(cases[i].body, &p, err, param);
        if (rc != cases[i].status || strcmp(param, cases[i].param)) fail_msg("case %zu '%s': rc %d param '%s' (%s)", i, cases[i].body, rc, param, err);
        assert_true(err[0] != 0);
        assert_null(p.prompts); /* released on error */
    }
    /* body over the limit */
    char *big = malloc(5000);
    assert_non_null(big);
    memset(big, ' ', 4999);
    big[4999] = 0;
    dsq_srv_params p;
    char err[256], param[64];
    assert_int_equal(parse(big, &p, err, param), DSQ_ERR_INVALID_ARG);
    free(big);
    char *e = dsq_srv_error_json("bad \"x\"", NULL, "prompt", 400);
    assert_string_equal(e, "{\"error\":{\"message\":\"bad \\\"x\\\"\",\"type\":\"invalid_request_error\",\"param\":\"prompt\",\"code\":400}}");
    free(e);
}

static void test_responses(void **st)
{
    (void)st;
    const char *r1 = "{\"choices\":[{\"index\":0,\"text\":\" 42\\n\",\"finish_reason\":\"stop\"}],"
                     "\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":3}}";
    dsq_ep_completion c;
    assert_int_equal(dsq_ep_parse_completion(r1, strlen(r1), &c, NULL), DSQ_OK);
    assert_string_equal(c.text, " 42\n");
    assert_string_equal(c.finish, "stop");
    assert_int_equal(c.prompt_tokens, 12);
    assert_int_equal(c.completion_tokens, 3);
    free(c.text);
    const char *bad[] = { "", "{}", "{\"choices\": []}", "{\"choices\": [{\"text\": 1}]}", "<html>" };
    for (size_t i = 0; i < 5; i++) assert_int_equal(dsq_ep_parse_completion(bad[i], strlen(bad[i]), &c, NULL), DSQ_ERR_JSON);

    const char *m = "{\"object\":\"list\",\"data\":[{\"id\":\"a\"},{\"id\":\"b\"}]}";
    char **ids;
    size_t n;
    assert_int_equal(dsq_ep_parse_models(m, strlen(m), &ids, &n, NULL), DSQ_OK);
    assert_int_equal(n, 2);
    assert_string_equal(ids[1], "b");
    dsq_ep_free_models(ids, n);
    assert_int_equal(dsq_ep_parse_models("{\"data\":[{}]}", 13, &ids, &n, NULL), DSQ_ERR_JSON);

    int32_t prompt[4] = { 0, 7, 8, 9 };
    double lp[4];
    const char *e1 = "{\"choices\":[{\"text\":\"\",\"logprobs\":{\"token_logprobs\":[null,-1.25,-0.5,-3,-2]}}]}";
    assert_int_equal(dsq_ep_parse_prompt_logprobs(e1, strlen(e1), prompt, 4, lp, NULL), DSQ_OK);
    assert_true(isnan(lp[0]) && lp[1] == -1.25 && lp[2] == -0.5 && lp[3] == -3);
    const char *e2 = "{\"choices\":[{\"text\":\"\",\"prompt_logprobs\":[null,{\"7\":{\"logprob\":-1.5},\"3\":{\"logprob\":-0.1}},"
                     "{\"8\":{\"logprob\":-2}},{\"9\":{\"logprob\":-0.25}}]}]}";
    assert_int_equal(dsq_ep_parse_prompt_logprobs(e2, strlen(e2), prompt, 4, lp, NULL), DSQ_OK);
    assert_true(lp[1] == -1.5 && lp[2] == -2 && lp[3] == -0.25);
    const char *short1 = "{\"choices\":[{\"text\":\"\",\"logprobs\":{\"token_logprobs\":[null,-1]}}]}";
    assert_int_equal(dsq_ep_parse_prompt_logprobs(short1, strlen(short1), prompt, 4, lp, NULL), DSQ_ERR_JSON);
    const char *pos = "{\"choices\":[{\"text\":\"\",\"logprobs\":{\"token_logprobs\":[null,0.5,-1,-1]}}]}";
    assert_int_equal(dsq_ep_parse_prompt_logprobs(pos, strlen(pos), prompt, 4, lp, NULL), DSQ_ERR_JSON);
    const char *noecho = "{\"choices\":[{\"text\":\"x\",\"logprobs\":null}]}";
    assert_int_equal(dsq_ep_parse_prompt_logprobs(noecho, strlen(noecho), prompt, 4, lp, NULL), DSQ_ERR_JSON);

    char msg[64];
    const char *er = "{\"error\":{\"message\":\"Incorrect API key\",\"type\":\"x\"}}";
    dsq_ep_error_text(er, strlen(er), msg, sizeof msg);
    assert_string_equal(msg, "Incorrect API key");
    dsq_ep_error_text("Bad\nGateway", 11, msg, sizeof msg);
    assert_string_equal(msg, "Bad Gateway");
}

/* vLLM's prompt_logprobs: the request field, the id-keyed response parser,
 * and the per-position top-k KLD, which must equal dsq_logp_compare's on a
 * topk base when every base top-k token is served, and only fall below it
 * when one is not. */
static void test_prompt_topk(void **st)
{
    (void)st;
    dsq_srv_params p;
    char err[256], param[64];
    assert_int_equal(parse("{\"prompt\": [1, 2], \"prompt_logprobs\": 5}", &p, err, param), DSQ_OK);
    assert_int_equal(p.prompt_logprobs, 5);
    dsq_srv_params_release(&p);
    assert_int_equal(parse("{\"prompt\": [1, 2]}", &p, err, param), DSQ_OK);
    assert_int_equal(p.prompt_logprobs, -1);
    dsq_srv_params_release(&p);
    assert_int_not_equal(parse("{\"prompt\": [1, 2], \"prompt_logprobs\": 2, \"stream\": true}", &p, err, param), DSQ_OK);
    assert_string_equal(param, "prompt_logprobs");
    assert_int_not_equal(parse("{\"prompt\": [1, 2], \"prompt_logprobs\": 21}", &p, err, param), DSQ_OK);
    assert_int_not_equal(parse("{\"prompt\": [1, 2], \"prompt_logprobs\": \"3\"}", &p, err, param), DSQ_OK);

    const int32_t prompt[3] = { 7, 3, 9 };
    int32_t ids[3 * 3], top1[3];
    double lps[3 * 3];
    int n[3], have = -1;
    const char *ok = "{\"choices\": [{\"text\": \"\", \"prompt_logprobs\": [null,"
                     " {\"3\": {\"logprob\": -2.5, \"rank\": 4}, \"1\": {\"logprob\": -0.5, \"rank\": 1},"
                     "  \"2\": {\"logprob\": -1.5, \"rank\": 2}},"
                     " {\"9\": {\"logprob\": -0.25, \"rank\": 1}}]}]}";
    assert_int_equal(dsq_ep_parse_prompt_topk(ok, strlen(ok), prompt, 3, 50, 3, ids, lps, n, top1, &have, NULL), DSQ_OK);
    assert_int_equal(have, 1);
    assert_int_equal(n[1], 3);
    assert_int_equal(n[2], 1);
    assert_int_equal(top1[1], 1);
    assert_int_equal(top1[2], 9);
    assert_true(ids[3] == 3 && lps[3] == -2.5);
    const char *plain = "{\"choices\": [{\"text\": \"\", \"logprobs\": {\"token_logprobs\": [null, -1, -2]}}]}";
    assert_int_equal(dsq_ep_parse_prompt_topk(plain, strlen(plain), prompt, 3, 50, 3, ids, lps, n, top1, &have, NULL), DSQ_OK);
    assert_int_equal(have, 0);
    const char *bad[] = {
        "{\"choices\": [{\"prompt_logprobs\": [null, {\"4\": {\"logprob\": -1}}, {\"9\": {\"logprob\": -1}}]}]}", /* no prompt token */
        "{\"choices\": [{\"prompt_logprobs\": [null, {\"3\": {\"logprob\": -1}, \"50\": {\"logprob\": -1}}, {\"9\": {\"logprob\": -1}}]}]}",
        "{\"choices\": [{\"prompt_logprobs\": [null, {\"3\": {\"logprob\": 1}}, {\"9\": {\"logprob\": -1}}]}]}",
        "{\"choices\": [{\"prompt_logprobs\": [null, {\"3\": {\"logprob\": -1}, \"x\": {\"logprob\": -1}}, {\"9\": {\"logprob\": -1}}]}]}",
        "{\"choices\": [{\"prompt_logprobs\": [null, {\"3\": -1}, {\"9\": {\"logprob\": -1}}]}]}",
        "{\"choices\": [{\"prompt_logprobs\": [null, {\"3\": {\"logprob\": -1}, \"1\": {\"logprob\": -1}, \"2\": {\"logprob\": -1},"
        " \"4\": {\"logprob\": -1}}, {\"9\": {\"logprob\": -1}}]}]}",   /* more than cap */
        "{\"choices\": [{\"prompt_logprobs\": [null, {\"3\": {\"logprob\": -1}}]}]}",                      /* short */
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        assert_int_equal(dsq_ep_parse_prompt_topk(bad[i], strlen(bad[i]), prompt, 3, 50, 3, ids, lps, n, top1, &have, NULL),
                         DSQ_ERR_JSON);

    enum { V = 50, K = 4 };
    dsq_logp_info info = { .vocab = V, .encoding = DSQ_LOGP_TOPK, .top_k = K };
    info.record_size = (uint32_t)dsq_logp_record_size(DSQ_LOGP_TOPK, V, K);
    uint8_t *rec = malloc(info.record_size), scratch[V] = { 0 };
    float base[V], q[V];
    uint64_t s = 12345;
    for (int row = 0; row < 20; row++) {
        for (int i = 0; i < V; i++) {
            s = s * 6364136223846793005ULL + 1442695040888963407ULL;
            base[i] = (float)((double)(s >> 40) / (double)(1ULL << 24) * (row % 2 ? 8 : 3));
            q[i] = base[i] + (float)(((s >> 20) & 1023) / 1024.0 - 0.5) * 0.7f;
        }
        assert_int_equal(dsq_logp_encode(&info, base, row % V, rec), DSQ_OK);
        dsq_logp_cmp cmp;
        assert_int_equal(dsq_logp_compare(&info, rec, q, row % V, scratch, &cmp), DSQ_OK);
        double lse = dsq_log_sum_exp(q, V), sl[V], kl;
        int32_t si[V];
        int exact = 0;
        for (int i = 0; i < V; i++) { si[i] = V - 1 - i; sl[i] = (double)q[V - 1 - i] - lse; }
        assert_int_equal(dsq_ep_kl_topk(&info, rec, si, sl, V, &kl, &exact), 0);
        assert_int_equal(exact, 1);
        assert_true(fabs(kl - cmp.kld) <= 1e-9 * fabs(cmp.kld) + 1e-15);
        /* drop the base's top-1 from the served list: merged into the tail, lower */
        uint32_t t0;
        memcpy(&t0, rec + 16, 4);
        int m = 0;
        for (int i = 0; i < V; i++) if ((uint32_t)si[i] != t0) { si[m] = si[i]; sl[m] = sl[i]; m++; }
        double kl2;
        assert_int_equal(dsq_ep_kl_topk(&info, rec, si, sl, m, &kl2, &exact), 0);
        assert_int_equal(exact, 0);
        assert_true(kl2 <= kl * (1 + 1e-12) + 1e-15);
    }
    memset(rec + 16, 0xff, 4); /* an id >= vocab */
    double kl;
    int exact;
    assert_int_equal(dsq_ep_kl_topk(&info, rec, ids, lps, 0, &kl, &exact), -1);
    free(rec);
}

/* Text-keyed top_logprobs mapped back to ids through the tokenizer: only
 * unambiguous texts, "token_id:N", and only when the server spells the
 * prompt tokens as the tokenizer decodes them. */
static void test_text_topk(void **st)
{
    (void)st;
    dsq_tokenizer *tok = NULL;
    if (dsq_tokenizer_load(&tok, "samples/tiny-dsv3", NULL) < 0) {
        fprintf(stderr, "skip: samples/tiny-dsv3 tokenizer absent (samples/make_samples.sh)\n");
        return;
    }
    dsq_ep_vocab *v = NULL;
    assert_int_equal(dsq_ep_vocab_build(&v, tok, NULL), DSQ_OK);
    int32_t u[4];
    int nu = 0;
    char *txt[4];
    for (int32_t id = 100; id < (int32_t)dsq_tokenizer_vocab_size(tok) && nu < 4; id++) {
        char *t = NULL;
        size_t l = 0;
        assert_int_equal(dsq_tokenizer_decode(tok, &id, 1, 0, &t, &l), DSQ_OK);
        int ok = l > 0 && strlen(t) == l && !strchr(t, '"') && !strchr(t, '\\') && (unsigned char)t[0] >= 32;
        for (size_t i = 0; ok && i < l; i++) ok = (unsigned char)t[i] >= 32 && (unsigned char)t[i] < 127;
        if (ok && dsq_ep_vocab_lookup(v, t, l) == id) { u[nu] = id; txt[nu] = t; nu++; }
        else free(t);
    }
    assert_int_equal(nu, 4);
    assert_int_equal(dsq_ep_vocab_lookup(v, "token_id:7", 10), 7);
    assert_int_equal(dsq_ep_vocab_lookup(v, "token_id:x", 10), -1);
    assert_int_equal(dsq_ep_vocab_lookup(v, "\x01\x02never a token\x03", 18), -1);
    const int32_t prompt[3] = { u[0], u[1], u[2] };
    char body[2048];
    snprintf(body, sizeof body, "{\"choices\": [{\"text\": \"\", \"logprobs\": {\"tokens\": [\"%s\", \"%s\", \"%s\"],"
             " \"token_logprobs\": [null, -0.5, -2.0], \"top_logprobs\": [null, {\"%s\": -0.5, \"token_id:9\": -1.5},"
             " {\"%s\": -0.25, \"%s\": -2.0}]}}]}", txt[0], txt[1], txt[2], txt[1], txt[3], txt[2]);
    int32_t ids[3 * 4], top1[3];
    double lps[3 * 4];
    int n[3], have = -1;
    assert_int_equal(dsq_ep_parse_prompt_texttopk(body, strlen(body), prompt, 3, v, 4, ids, lps, n, top1, &have, NULL), DSQ_OK);
    assert_int_equal(have, 1);
    assert_int_equal(n[1], 2);                       /* the prompt token, then token_id:9 */
    assert_true(ids[4] == u[1] && lps[4] == -0.5 && ids[5] == 9 && lps[5] == -1.5);
    assert_int_equal(top1[1], u[1]);
    assert_int_equal(n[2], 2);
    assert_true(ids[8] == u[2] && ids[9] == u[3] && lps[9] == -0.25);
    assert_int_equal(top1[2], u[3]);
    /* a server that spells a prompt token otherwise: no mapping at all */
    snprintf(body, sizeof body, "{\"choices\": [{\"text\": \"\", \"logprobs\": {\"tokens\": [\"%s\", \"%sX\", \"%s\"],"
             " \"token_logprobs\": [null, -0.5, -2.0], \"top_logprobs\": [null, {\"%s\": -0.5}, {\"%s\": -2.0}]}}]}",
             txt[0], txt[1], txt[2], txt[1], txt[2]);
    assert_int_equal(dsq_ep_parse_prompt_texttopk(body, strlen(body), prompt, 3, v, 4, ids, lps, n, top1, &have, NULL), DSQ_OK);
    assert_int_equal(have, 0);
    for (int i = 0; i < 4; i++) free(txt[i]);
    dsq_ep_vocab_free(v);
    dsq_tokenizer_free(tok);
}

static void test_journal(void **st)
{
    (void)st;
    const char *data = "{\"question\": \"q0\", \"answer\": \"#### 1\"}\n{\"question\": \"q1\", \"answer\": \"#### 2\"}\n"
                       "{\"question\": \"q2\", \"answer\": \"#### 3\"}\n";
    dsq_gsm8k_set test;
    assert_int_equal(dsq_gsm8k_parse(&test, data, strlen(data), "t", NULL), DSQ_OK);
    char *dir = dsq_test_tmpdir(), path[1024];
    snprintf(path, sizeof path, "%s/j.jsonl", dir);
    dsq_ep_journal j;
    dsq_ep_item items[3] = { 0 };
    size_t have;
    assert_int_equal(dsq_ep_journal_open(&j, path, 0, &test, 3, items, &have, NULL), DSQ_OK);
    assert_int_equal(have, 0);
    dsq_ep_item a = { .completion = (char[]){ "x #### 2" }, .len = 8, .prompt_tokens = 5, .gen_tokens = 4, .finish = "stop" };
    assert_int_equal(dsq_ep_journal_append(&j, 1, &test.items[1], &a, NULL), DSQ_OK);
    dsq_ep_journal_close(&j);
    /* a second record cut short by a kill is dropped and truncated away */
    FILE *f = fopen(path, "ab");
    assert_non_null(f);
    fputs("{\"doc_id\": 2, \"question\": \"q2\", \"compl", f);
    fclose(f);
    assert_int_equal(dsq_ep_journal_open(&j, path, 0, &test, 3, items, &have, NULL), DSQ_OK);
    assert_int_equal(have, 1);
    assert_true(items[1].have && !items[0].have && !items[2].have);
    assert_string_equal(items[1].completion, "x #### 2");
    assert_int_equal(items[1].gen_tokens, 4);
    assert_string_equal(items[1].finish, "stop");
    a.completion = (char[]){ "y" };
    a.len = 1;
    assert_int_equal(dsq_ep_journal_append(&j, 0, &test.items[0], &a, NULL), DSQ_OK);
    dsq_ep_journal_close(&j);
    free(items[1].completion);
    memset(items, 0, sizeof items);
    assert_int_equal(dsq_ep_journal_open(&j, path, 0, &test, 3, items, &have, NULL), DSQ_OK);
    assert_int_equal(have, 2);
    dsq_ep_journal_close(&j);
    free(items[0].completion);
    free(items[1].completion);
    /* a run of fewer items keeps the others as they were, for the file that replaces the journal */
    memset(items, 0, sizeof items);
    assert_int_equal(dsq_ep_journal_open(&j, path, 0, &test, 1, items, &have, NULL), DSQ_OK);
    assert_int_equal(have, 1);
    assert_true(items[0].have && !items[1].have);
    assert_non_null(j.tail);
    assert_int_equal(j.tail_len, strlen(j.tail)); /* NUL-free: exactly the lines */
    assert_non_null(strstr(j.tail, "\"doc_id\":1,"));
    assert_int_equal(j.tail[j.tail_len - 1], '\n');
    /* while a run holds it, a second one is refused and the file left alone */
    dsq_ep_journal j2;
    dsq_ep_item items2[3] = { 0 };
    dsq_diag ld;
    dsq_diag_clear(&ld);
    assert_int_equal(dsq_ep_journal_open(&j2, path, 1, &test, 3, items2, &have, &ld), DSQ_ERR_EXISTS);
    assert_non_null(strstr(ld.msg, "another ds-eval run is writing this journal"));
    dsq_ep_journal_close(&j2);
    /* a refused item is journaled with its error and asked again by the next run */
    dsq_ep_item e = { .prompt_tokens = -1, .gen_tokens = -1, .error = "HTTP 400: maximum context length" };
    assert_int_equal(dsq_ep_journal_append(&j, 2, &test.items[2], &e, NULL), DSQ_OK);
    dsq_ep_journal_close(&j);
    free(items[0].completion);
    memset(items, 0, sizeof items);
    assert_int_equal(dsq_ep_journal_open(&j, path, 0, &test, 3, items, &have, NULL), DSQ_OK);
    assert_int_equal(have, 2);
    assert_true(items[0].have && items[1].have && !items[2].have);
    assert_null(j.tail);
    dsq_ep_journal_close(&j);
    free(items[0].completion);
    free(items[1].completion);
    /* which answers are one item's refusal, which a server's deterministic 5xx */
    assert_true(dsq_ep_item_refusal(400, "HTTP 400: This model's maximum context length is 2048 tokens"));
    assert_true(dsq_ep_item_refusal(400, "the request exceeds the available context size, try increasing it"));
    assert_false(dsq_ep_item_refusal(400, "HTTP 400: unknown field 'stop'"));
    assert_false(dsq_ep_item_refusal(500, "context length"));
    const char *ll = "{\"error\":{\"code\":500,\"message\":\"Unsupported param: echo\",\"type\":\"server_error\"}}";
    assert_true(dsq_ep_permanent_5xx(500, ll, strlen(ll)));
    assert_false(dsq_ep_permanent_5xx(503, ll, strlen(ll)));
    assert_false(dsq_ep_permanent_5xx(500, "Internal Server Error", 21));
    const char *oom = "{\"error\":{\"message\":\"CUDA out of memory\"}}";
    assert_false(dsq_ep_permanent_5xx(500, oom, strlen(oom)));
    /* another dataset's journal is refused */
    dsq_gsm8k_set other;
    const char *od = "{\"question\": \"zz\", \"answer\": \"#### 1\"}\n{\"question\": \"q1\", \"answer\": \"#### 2\"}\n";
    assert_int_equal(dsq_gsm8k_parse(&other, od, strlen(od), "o", NULL), DSQ_OK);
    memset(items, 0, sizeof items);
    dsq_diag d;
    dsq_diag_clear(&d);
    assert_int_equal(dsq_ep_journal_open(&j, path, 0, &other, 2, items, &have, &d), DSQ_ERR_STATE);
    dsq_ep_journal_close(&j);
    for (int i = 0; i < 3; i++) free(items[i].completion);
    assert_non_null(strstr(d.msg, "question differs"));
    /* restart (-f) truncates */
    memset(items, 0, sizeof items);
    assert_int_equal(dsq_ep_journal_open(&j, path, 1, &other, 2, items, &have, NULL), DSQ_OK);
    assert_int_equal(have, 0);
    dsq_ep_journal_close(&j);
    dsq_gsm8k_set_release(&other);
    dsq_gsm8k_set_release(&test);
    dsq_test_rmtree(dir);
    free(dir);
}

/* /v1/chat/completions bodies: messages rendered by the template, the
 * thinking switch choosing the reasoning parser, refusals naming the field. */
static void test_chat_request(void **st)
{
    (void)st;
    dsq_chat_template *t;
    dsq_diag d;
    dsq_diag_clear(&d);
    assert_int_equal(dsq_chat_template_by_id(&t, "deepseek-v3.1", "<B>", &d), DSQ_OK);
    dsq_srv_params p;
    char err[600], param[64];
    const char *b = "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"max_completion_tokens\": 7,"
                    " \"chat_template_kwargs\": {\"thinking\": true}}";
    assert_int_equal(dsq_srv_parse_chat(b, strlen(b), &lim, t, DSQ_REASONING_DEEPSEEK_V3, &p, err, sizeof err, param, 64), DSQ_OK);
    assert_int_equal(p.chat, 1);
    assert_int_equal(p.n_prompts, 1);
    assert_string_equal(p.prompts[0].text, "<B><\xef\xbd\x9cUser\xef\xbd\x9c>hi<\xef\xbd\x9c" "Assistant\xef\xbd\x9c><think>");
    assert_int_equal(p.max_tokens, 7);
    assert_int_equal(p.reasoning, DSQ_REASONING_DEEPSEEK_R1); /* deepseek_v3 + thinking */
    dsq_srv_params_release(&p);
    b = "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"add_generation_prompt\": false}";
    assert_int_equal(dsq_srv_parse_chat(b, strlen(b), &lim, t, DSQ_REASONING_DEEPSEEK_V3, &p, err, sizeof err, param, 64), DSQ_OK);
    assert_string_equal(p.prompts[0].text, "<B><\xef\xbd\x9cUser\xef\xbd\x9c>hi");
    assert_int_equal(p.reasoning, DSQ_REASONING_NONE);
    assert_int_equal(p.max_tokens_auto, 1);
    dsq_srv_params_release(&p);
    static const struct { const char *body, *param; } bad[] = {
        { "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tools\": [{\"type\": \"function\"}]}", "tools" },
        { "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tool_choice\": \"auto\"}", "tool_choice" },
        { "{\"messages\": [{\"role\": \"tool\", \"content\": \"x\"}]}", "messages" },
        { "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"logprobs\": true}", "logprobs" },
        { "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"response_format\": {\"type\": \"json_object\"}}", "response_format" },
        { "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"chat_template_kwargs\": 3}", "chat_template_kwargs" },
        { "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"echo\": true}", "echo" },
        { "{\"prompt\": \"x\"}", "messages" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = dsq_srv_parse_chat(bad[i].body, strlen(bad[i].body), &lim, t, 0, &p, err, sizeof err, param, 64);
        assert_true(rc < 0);
        if (strcmp(param, bad[i].param)) fail_msg("%s: param '%s' (%s)", bad[i].body, param, err);
    }
    /* /tokenize: a prompt (special tokens added by default) or messages (not) */
    dsq_srv_tokenize q;
    b = "{\"prompt\": \"hi\", \"return_token_strs\": true}";
    assert_int_equal(dsq_srv_parse_tokenize(b, strlen(b), &lim, t, &q, err, sizeof err, param, 64), DSQ_OK);
    assert_string_equal(q.text, "hi");
    assert_true(q.add_special && q.return_token_strs);
    dsq_srv_tokenize_release(&q);
    b = "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"add_generation_prompt\": false}";
    assert_int_equal(dsq_srv_parse_tokenize(b, strlen(b), &lim, t, &q, err, sizeof err, param, 64), DSQ_OK);
    assert_string_equal(q.text, "<B><\xef\xbd\x9cUser\xef\xbd\x9c>hi");
    assert_false(q.add_special);
    dsq_srv_tokenize_release(&q);
    b = "{\"prompt\": \"hi\", \"messages\": []}";
    assert_true(dsq_srv_parse_tokenize(b, strlen(b), &lim, t, &q, err, sizeof err, param, 64) < 0);
    char *model;
    int32_t *ids;
    size_t n;
    b = "{\"tokens\": [1, 2, 49]}";
    assert_int_equal(dsq_srv_parse_detokenize(b, strlen(b), &lim, &model, &ids, &n, err, sizeof err, param, 64), DSQ_OK);
    assert_int_equal(n, 3);
    assert_int_equal(ids[2], 49);
    free(ids);
    b = "{\"tokens\": [1, 50]}"; /* beyond the vocabulary */
    assert_true(dsq_srv_parse_detokenize(b, strlen(b), &lim, &model, &ids, &n, err, sizeof err, param, 64) < 0);
    assert_string_equal(param, "tokens");
    b = "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"top_k\": 10}";
    assert_true(dsq_srv_parse_chat(b, strlen(b), &lim, t, 0, &p, err, sizeof err, param, 64) < 0);
    assert_string_equal(param, "top_k");
    b = "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"top_k\": -1, \"repetition_penalty\": 1.0}";
    assert_int_equal(dsq_srv_parse_chat(b, strlen(b), &lim, t, 0, &p, err, sizeof err, param, 64), DSQ_OK);
    dsq_srv_params_release(&p);
    dsq_chat_template_free(t);

    /* ds-eval's request: the suite's fields, then --generation-kwargs over them */
    dsq_chat_run_opts ro = { .suite = dsq_chat_suite_find("lm-eval-cot-llama"), .max_tokens = 9, .temperature = 0,
                             .has_seed = 1, .seed = 1234, .samples = 2, .kwargs_json = "{\"thinking\":true}",
                             .extra_json = "{\"top_k\":10,\"max_tokens\":7}" };
    char *rq = dsq_chat_request_json(&ro, "m", "[{\"role\":\"user\",\"content\":\"q\"}]", 1);
    json_object *rj = json_tokener_parse(rq), *v;
    assert_true(json_object_object_get_ex(rj, "seed", &v) && json_object_get_int64(v) == 1235);
    assert_true(json_object_object_get_ex(rj, "max_tokens", &v) && json_object_get_int64(v) == 7);
    assert_true(json_object_object_get_ex(rj, "top_k", &v) && json_object_get_int64(v) == 10);
    assert_true(json_object_object_get_ex(rj, "stop", &v) && json_object_array_length(v) == 4);
    assert_true(json_object_object_get_ex(rj, "chat_template_kwargs", &v));
    json_object_put(rj);
    free(rq);
    dsq_chat_reply cr;
    b = "{\"choices\":[{\"message\":{\"content\":null,\"reasoning\":\"r\"},\"finish_reason\":\"length\"}],"
        "\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":5}}";
    assert_int_equal(dsq_chat_parse_reply(b, strlen(b), &cr, NULL), DSQ_OK);
    assert_null(cr.content);
    assert_string_equal(cr.reasoning, "r");
    assert_string_equal(cr.finish, "length");
    assert_int_equal(cr.completion_tokens, 5);
    dsq_chat_reply_release(&cr);
}

/* Integer fields take integral floats (1.0), as vLLM's request models do;
 * 1.5 and values beyond int64 are refused naming the field. */
static void test_integral_floats(void **st)
{
    (void)st;
    dsq_srv_params p;
    char err[256], param[64];
    assert_int_equal(parse("{\"prompt\": \"hi\", \"max_tokens\": 1.0, \"logprobs\": 2.0, \"seed\": -3.0, \"n\": 1.0,"
                           " \"prompt_logprobs\": 0e0}", &p, err, param), DSQ_OK);
    assert_int_equal(p.max_tokens, 1);
    assert_int_equal(p.logprobs, 2);
    assert_int_equal(p.prompt_logprobs, 0);
    assert_true(p.has_seed && p.seed == (uint64_t)-3);
    dsq_srv_params_release(&p);
    static const struct { const char *body, *param; int status; } cases[] = {
        { "{\"prompt\": \"hi\", \"max_tokens\": 1.5}", "max_tokens", DSQ_ERR_JSON },
        { "{\"prompt\": \"hi\", \"max_tokens\": 101.0}", "max_tokens", DSQ_ERR_INVALID_ARG },
        { "{\"prompt\": \"hi\", \"max_tokens\": -1.0}", "max_tokens", DSQ_ERR_INVALID_ARG },
        { "{\"prompt\": \"hi\", \"seed\": 1e30}", "seed", DSQ_ERR_INVALID_ARG },
        { "{\"prompt\": \"hi\", \"seed\": -1e30}", "seed", DSQ_ERR_INVALID_ARG },
        { "{\"prompt\": \"hi\", \"logprobs\": 0.5}", "logprobs", DSQ_ERR_JSON },
        { "{\"prompt\": \"hi\", \"n\": 2.0}", "n", DSQ_ERR_INVALID_ARG },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        assert_int_equal(parse(cases[i].body, &p, err, param), cases[i].status);
        assert_string_equal(param, cases[i].param);
    }
}

/* What a stream may send of a growing text: whole characters only, the
 * last hold - 1 bytes kept back (a stop string may still complete there),
 * no trailing U+FFFD. Every prefix of a text of 1- to 4-byte characters
 * and U+FFFD, every hold. */
static void test_stream_safe_len(void **st)
{
    (void)st;
    const char *t = "a\xc3\xa9" "\xe4\xbd\xa0" "\xf0\x9f\x98\x80" "\xef\xbf\xbd" "b\xe5\xa5\xbd" "\xef\xbf\xbd";
    size_t n = strlen(t);
    for (size_t len = 0; len <= n; len++) {
        /* only prefixes that end on a character boundary are decoded texts */
        if (len < n && ((unsigned char)t[len] & 0xC0) == 0x80) continue;
        for (size_t hold = 0; hold < 12; hold++) {
            size_t k = dsq_srv_stream_safe_len(t, len, hold);
            assert_true(k <= len);
            if (hold) assert_true(k == 0 || k + hold - 1 <= len);
            assert_true(k == len || ((unsigned char)t[k] & 0xC0) != 0x80); /* a character boundary */
            assert_false(k >= 3 && !memcmp(t + k - 3, "\xef\xbf\xbd", 3));
            /* the most it may send: nothing whole is held back needlessly */
            size_t want = hold == 0 ? len : len + 1 > hold ? len + 1 - hold : 0;
            while (want > 0 && want < len && ((unsigned char)t[want] & 0xC0) == 0x80) want--;
            while (want >= 3 && !memcmp(t + want - 3, "\xef\xbf\xbd", 3)) want -= 3;
            assert_int_equal(k, want);
        }
    }
    assert_int_equal(dsq_srv_stream_safe_len("ab\xe4\xbd\xa0\xe5\xa5\xbd", 8, 3), 5); /* not 6: inside U+597D */
    assert_int_equal(dsq_srv_stream_safe_len("x", 1, 0), 1);
    assert_int_equal(dsq_srv_stream_safe_len("", 0, 4), 0);
}

static size_t collect(char *p, size_t sz, size_t n, void *user)
{
    char **buf = user;
    size_t have = *buf ? strlen(*buf) : 0;
    char *b = realloc(*buf, have + sz * n + 1);
    if (!b) return 0;
    memcpy(b + have, p, sz * n);
    b[have + sz * n] = 0;
    *buf = b;
    return sz * n;
}

/* POST body to the server's path; the response body (malloc'd) and status. */
static char *post(int port, const char *path, const char *body, long *status)
{
    char url[128], *out = NULL;
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", port, path);
    CURL *c = curl_easy_init();
    assert_non_null(c);
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &out);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 60L);
    assert_int_equal(curl_easy_perform(c), CURLE_OK);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, status);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    assert_non_null(out);
    return out;
}

/* logprobs (and prompt_logprobs) above the vocabulary, served by a model of
 * 8 tokens: every position lists the 8 tokens once, with log-probs whose
 * probabilities sum to 1 (nothing read beyond what the model computed). */
static void test_logprobs_small_vocab(void **st)
{
    (void)st;
    char *dir = dsq_test_tmpdir();
    dsq_synth_opts so;
    memset(&so, 0, sizeof so);
    so.arch = DSQ_SYNTH_LLAMA;
    so.hidden = 64;
    so.intermediate = 96;
    so.vocab = 8;
    so.heads = 4;
    so.kv_heads = 4;
    so.layers = 1;
    so.dtype = DSQ_DTYPE_F32;
    so.seed = 5;
    dsq_diag d;
    dsq_diag_clear(&d);
    assert_int_equal(dsq_synth_write(&so, dir, DSQ_OUT_OVERWRITE, NULL, &d), DSQ_OK);
    /* a byte-level tokenizer (every byte a token) whose ids 0..7, the
     * model's vocabulary, are the bytes 'a'..'h' */
    char tok[8192], *w = tok;
    w += sprintf(w, "{\"version\": \"1.0\", \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, "
                    "\"use_regex\": false}, \"decoder\": {\"type\": \"ByteLevel\"}, \"added_tokens\": [], "
                    "\"model\": {\"type\": \"BPE\", \"vocab\": {");
    for (unsigned b = 0; b < 256; b++)
        w += sprintf(w, "%s\"\\u%04x\": %u", b ? ", " : "", dsq_test_b2u(b), (b - 'a') & 255u);
    w += sprintf(w, "}, \"merges\": []}}");
    char *tp = dsq_path_join(dir, "tokenizer.json");
    dsq_test_write(tp, tok, strlen(tok));
    free(tp);
    tp = dsq_path_join(dir, "tokenizer_config.json");
    dsq_test_write(tp, "{}", 2);
    free(tp);
    dsq_server_opts o;
    dsq_server_opts_default(&o);
    o.model_path = dir;
    o.threads = 1;
    o.slots = 1;
    o.queue = 2;
    o.ctx = 64;
#ifdef __GLIBC__
    /* fresh heap memory reads as zeros (token id 0, a duplicate key that
     * would hide a read past what the engine wrote); make it non-zero */
    mallopt(M_PERTURB, 0x5a);
#endif
    dsq_server *srv = NULL;
    int rc = dsq_server_start(&srv, &o, &d);
    if (rc) fprintf(stderr, "ds-serve: %s\n", d.msg);
    assert_int_equal(rc, DSQ_OK);
    long status = 0;
    char *r = post(dsq_server_port(srv), "/v1/completions",
                   "{\"prompt\": [2, 3, 4, 5], \"max_tokens\": 3, \"temperature\": 1, \"seed\": 1, \"ignore_eos\": true,"
                   " \"logprobs\": 20, \"echo\": true, \"prompt_logprobs\": 20}", &status);
    assert_int_equal(status, 200);
    json_object *j = json_tokener_parse(r), *ch, *L, *tops, *toks, *plp;
    assert_non_null(j);
    assert_true(json_object_object_get_ex(j, "choices", &ch));
    ch = json_object_array_get_idx(ch, 0);
    assert_true(json_object_object_get_ex(ch, "logprobs", &L) && json_object_object_get_ex(L, "top_logprobs", &tops) &&
                json_object_object_get_ex(L, "tokens", &toks));
    assert_int_equal(json_object_array_length(tops), 4 + 3);
    for (size_t i = 1; i < 7; i++) {
        json_object *t = json_object_array_get_idx(tops, i);
        assert_true(json_object_is_type(t, json_type_object));
        assert_int_equal(json_object_object_length(t), 8);
        assert_true(json_object_object_get_ex(t, json_object_get_string(json_object_array_get_idx(toks, i)), NULL));
        double sum = 0;
        json_object_object_foreach(t, key, v) {
            (void)key;
            double lp = json_object_get_double(v);
            assert_true(isfinite(lp) && lp <= 0);
            sum += exp(lp);
        }
        assert_true(fabs(sum - 1) < 1e-4);
    }
    assert_true(json_object_object_get_ex(ch, "prompt_logprobs", &plp));
    for (size_t i = 1; i < 4; i++) {
        json_object *m = json_object_array_get_idx(plp, i);
        assert_int_equal(json_object_object_length(m), 8);
        double sum = 0;
        json_object_object_foreach(m, key, v) {
            json_object *lp;
            assert_true(atoi(key) >= 0 && atoi(key) < 8);
            assert_true(json_object_object_get_ex(v, "logprob", &lp));
            sum += exp(json_object_get_double(lp));
        }
        assert_true(fabs(sum - 1) < 1e-4);
    }
    json_object_put(j);
    free(r);
    dsq_server_stop(srv, 0, NULL);
#ifdef __GLIBC__
    mallopt(M_PERTURB, 0);
#endif
    dsq_test_rmtree(dir);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_request_ok),
        cmocka_unit_test(test_request_errors),
        cmocka_unit_test(test_responses),
        cmocka_unit_test(test_prompt_topk),
        cmocka_unit_test(test_text_topk),
        cmocka_unit_test(test_journal),
        cmocka_unit_test(test_chat_request),
        cmocka_unit_test(test_integral_floats),
        cmocka_unit_test(test_stream_safe_len),
        cmocka_unit_test(test_logprobs_small_vocab),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
