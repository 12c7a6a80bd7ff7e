/* fuzz_serve.c - libFuzzer target for the HTTP JSON on both sides of
 * ds-eval --endpoint / ds-serve, on arbitrary bytes:
 *   - ds-serve's request-body parser (POST /v1/completions), with small
 *     limits so the range checks are reached; what it accepts must respect
 *     them;
 *   - ds-serve's chat bodies (POST /v1/chat/completions, rendered by the
 *     V3.1 template and by V3.2's encoder), /tokenize and /detokenize;
 *   - the reasoning split, whole and streamed (the pieces must concatenate
 *     to the whole split for any text);
 *   - ds-eval's response parsers: completions, chat completions, /models,
 *     prompt log-probs (OpenAI echo form and vLLM's prompt_logprobs) and
 *     error objects.
 * Must never crash, leak or read out of bounds; checked invariants abort.
 * Seeds: corpus/serve/. */
#include "chat_reasoning.h"
#include "chat_run.h"
#include "chat_template.h"
#include "dsq_sbuf.h"
#include "endpoint.h"
#include "server.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(x) do { if (!(x)) abort(); } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *body = (const char *)data;
    dsq_srv_limits lim = { .max_body = 1 << 16, .max_tokens = 64, .default_max_tokens = 16, .vocab = 1000 };
    dsq_srv_params p;
    char err[256], param[64];
    if (dsq_srv_parse_completion(body, size, &lim, &p, err, sizeof err, param, sizeof param) == DSQ_OK) {
        CHECK(p.n_prompts >= 1 && p.n_prompts <= DSQ_SRV_MAX_PROMPTS);
        CHECK(p.max_tokens >= 0 && p.max_tokens <= lim.max_tokens);
        CHECK(p.temperature >= 0 && p.temperature <= 2 && p.top_p > 0 && p.top_p <= 1);
        CHECK(p.logprobs >= -1 && p.logprobs <= DSQ_SRV_MAX_LOGPROBS);
        CHECK(p.n_stop >= 0 && p.n_stop <= DSQ_SRV_MAX_STOP);
        for (int i = 0; i < p.n_stop; i++) CHECK(p.stop[i] && p.stop[i][0]);
        for (int i = 0; i < p.n_prompts; i++) {
            const dsq_srv_prompt *pr = &p.prompts[i];
            CHECK((pr->text != NULL) != (pr->ids != NULL));
            for (size_t k = 0; pr->ids && k < pr->n_ids; k++) CHECK(pr->ids[k] >= 0 && (size_t)pr->ids[k] < lim.vocab);
        }
        dsq_srv_params_release(&p);
    } else {
        CHECK(err[0]);
    }

    static const char *const ids_[] = { "deepseek-v3.1", "deepseek-v3.2" };
    for (int t = 0; t < 2; t++) {
        dsq_chat_template *tm = NULL;
        if (dsq_chat_template_by_id(&tm, ids_[t], "<B>", NULL) != DSQ_OK) abort();
        if (dsq_srv_parse_chat(body, size, &lim, tm, DSQ_REASONING_DEEPSEEK_V3, &p, err, sizeof err, param, sizeof param) == DSQ_OK) {
            CHECK(p.chat && p.n_prompts == 1 && p.prompts[0].text && strlen(p.prompts[0].text) <= p.prompts[0].len);
            CHECK(p.reasoning == DSQ_REASONING_NONE || p.reasoning == DSQ_REASONING_DEEPSEEK_R1);
            dsq_srv_params_release(&p);
        } else {
            CHECK(err[0]);
        }
        dsq_srv_tokenize q;
        if (dsq_srv_parse_tokenize(body, size, &lim, tm, &q, err, sizeof err, param, sizeof param) == DSQ_OK) {
            CHECK(q.text);
            dsq_srv_tokenize_release(&q);
        }
        dsq_chat_template_free(tm);
    }
    char *model = NULL;
    int32_t *tids = NULL;
    size_t ntid = 0;
    if (dsq_srv_parse_detokenize(body, size, &lim, &model, &tids, &ntid, err, sizeof err, param, sizeof param) == DSQ_OK) {
        for (size_t i = 0; i < ntid; i++) CHECK(tids[i] >= 0 && (size_t)tids[i] < lim.vocab);
        free(model);
        free(tids);
    }
    dsq_chat_reply cr;
    if (dsq_chat_parse_reply(body, size, &cr, NULL) == DSQ_OK) {
        CHECK(cr.have);
        dsq_chat_reply_release(&cr);
    }
    /* the reasoning split: streamed pieces concatenate to the whole split
     * when "<think>" occurs only at the start or not at all */
    if (!memmem(body, size, "<think>", 7) || (size >= 7 && !memcmp(body, "<think>", 7) && !memmem(body + 1, size - 1, "<think>", 7))) {
        const char *wr, *wc;
        size_t wrn, wcn;
        int hr, hc;
        dsq_reasoning_split(DSQ_REASONING_DEEPSEEK_R1, body, size, &wr, &wrn, &hr, &wc, &wcn, &hc);
        dsq_reasoning_stream rs;
        dsq_reasoning_stream_init(&rs, DSQ_REASONING_DEEPSEEK_R1);
        dsq_sbuf r = { 0 }, cc = { 0 };
        size_t step = size % 7 + 1;
        for (size_t at = 0;;) {
            at = at + step < size ? at + step : size;
            dsq_reasoning_stream_next(&rs, body, at, at == size, &r, &cc);
            if (at == size) break;
        }
        CHECK(r.n == (hr ? wrn : 0) && (!r.n || !memcmp(r.p, wr, r.n)));
        CHECK(cc.n == (hc ? wcn : 0) && (!cc.n || !memcmp(cc.p, wc, cc.n)));
        free(r.p);
        free(cc.p);
    }

    dsq_ep_completion c;
    if (dsq_ep_parse_completion(body, size, &c, NULL) == DSQ_OK) {
        CHECK(c.text && strlen(c.text) <= c.len);
        free(c.text);
    }
    char **ids = NULL;
    size_t n = 0;
    if (dsq_ep_parse_models(body, size, &ids, &n, NULL) == DSQ_OK)
        for (size_t i = 0; i < n; i++) CHECK(ids[i]);
    dsq_ep_free_models(ids, n);
    static const int32_t prompt[6] = { 0, 1, 2, 3, 4, 5 };
    double lp[6];
    for (size_t np = 0; np <= 6; np += 3)
        if (dsq_ep_parse_prompt_logprobs(body, size, prompt, np, lp, NULL) == DSQ_OK)
            for (size_t i = 1; i < np; i++) CHECK(isfinite(lp[i]) && lp[i] <= 1e-6);
    /* vLLM's id-keyed prompt_logprobs: at most cap entries, ids < vocab, the prompt token present */
    int32_t tid[6 * 3], top1[6];
    double tlp[6 * 3];
    int tn[6], have;
    if (dsq_ep_parse_prompt_topk(body, size, prompt, 6, 8, 3, tid, tlp, tn, top1, &have, NULL) == DSQ_OK && have)
        for (size_t i = 1; i < 6; i++) {
            CHECK(tn[i] >= 1 && tn[i] <= 3 && top1[i] >= -1 && top1[i] < 8);
            int seen = 0;
            for (int k = 0; k < tn[i]; k++) {
                CHECK(tid[i * 3 + (size_t)k] >= 0 && tid[i * 3 + (size_t)k] < 8 && tlp[i * 3 + (size_t)k] <= 0);
                seen |= tid[i * 3 + (size_t)k] == prompt[i];
            }
            CHECK(seen);
        }
    char msg[64];
    dsq_ep_error_text(body, size, msg, sizeof msg);
    CHECK(strlen(msg) < sizeof msg);
    char *e = dsq_srv_error_json(body && size ? "m" : "", "t", "p", 400);
    CHECK(e);
    free(e);
    return 0;
}
