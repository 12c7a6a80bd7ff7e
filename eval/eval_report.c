/* eval_report.c - ds-eval's results as JSON and as text (eval_report.h).
 * The key order and the text are what scripts and docs compare: each key
 * is added in the order it is printed. */
#include "eval_report.h"
#include "dsq_json.h"
#include "eval_model.h"
#include "gsm8k.h"

static void put_num(json_object *j, const char *key, double v)
{
    json_object_object_add(j, key, dsq_json_double(v));
}

static void put_int(json_object *j, const char *key, int64_t v)
{
    json_object_object_add(j, key, json_object_new_int64(v));
}

static void put_str(json_object *j, const char *key, const char *v)
{
    json_object_object_add(j, key, v ? json_object_new_string(v) : NULL);
}

static const char *bos_name(int bos)
{
    return bos >= 0 && bos < 3 ? dsq_text_bos_names[bos] : NULL;
}

/* ---- ppl ---------------------------------------------------------------- */

json_object *dsq_ppl_report_json(const dsq_ppl_report *r)
{
    double evaluated = (double)(r->plan.n_chunks * r->plan.n_ctx);
    json_object *j = json_object_new_object();
    put_str(j, "command", "ppl");
    put_num(j, "ppl", r->res.ppl);
    put_num(j, "ppl_stderr", r->res.ppl_stderr);
    put_num(j, "mean_nll", r->res.mean_nll);
    put_int(j, "tokens_scored", (int64_t)r->res.count);
    put_int(j, "windows", (int64_t)r->plan.n_chunks);
    put_int(j, "n_ctx", (int64_t)r->plan.n_ctx);
    put_str(j, "bos", bos_name(r->bos));
    json_object_object_add(j, "bos_id", r->bos_id >= 0 ? json_object_new_int(r->bos_id) : NULL);
    put_num(j, "seconds", r->secs);
    put_num(j, "tokens_per_s", evaluated / r->secs);
    if (r->saved_logits) put_str(j, "saved_logits", r->saved_logits);
    return j;
}

void dsq_ppl_report_text(FILE *f, const dsq_ppl_report *r)
{
    double evaluated = (double)(r->plan.n_chunks * r->plan.n_ctx);
    fprintf(f, "PPL = %.4f +/- %.5f\n", r->res.ppl, r->res.ppl_stderr);
    fprintf(f, "mean NLL %.6f nats/token over %llu tokens (%zu windows of %zu, second half scored, %s)\n",
            r->res.mean_nll, (unsigned long long)r->res.count, r->plan.n_chunks, r->plan.n_ctx,
            r->bos_id < 0                   ? "no BOS"
            : r->bos == DSQ_TEXT_BOS_WINDOW ? "BOS over each window's first token"
                                            : "BOS once at the start of the text");
    fprintf(f, "%.1f tokens/s (%.0f tokens in %.1f s)\n", evaluated / r->secs, evaluated, r->secs);
    if (r->saved_logits) fprintf(f, "base log-probs saved to %s\n", r->saved_logits);
}

/* ---- kld ---------------------------------------------------------------- */

json_object *dsq_kld_report_json(const dsq_kld_report *r)
{
    const dsq_kld_result *k = &r->k;
    const dsq_ep_kld_info *ki = &r->ki;
    json_object *j = json_object_new_object();
    put_str(j, "command", "kld");
    /* the base fixes the windows: per-window BOS is in its header; "first"
     * and "no" look alike there, so they are named only when --data
     * checked them */
    const char *bos = r->bos >= 0 ? bos_name(r->bos) : NULL;
    if (!bos && r->plan.bos >= 0) bos = "window";
    put_str(j, "bos", bos);
    json_object_object_add(j, "base_window_bos_id", r->plan.bos >= 0 ? json_object_new_int(r->plan.bos) : NULL);
    if (r->endpoint) {
        json_object_object_add(j, "kld_lower_bound", json_object_new_boolean(1));
        const char *form = ki->topk_positions ? "mixed" : "target_vs_rest";
        put_str(j, "kld_served_form", ki->topk_positions == k->count ? "topk" : form);
        json_object_object_add(j, "prompt_logprobs_k", json_object_new_int(ki->requested_k));
        put_int(j, "topk_positions", (int64_t)ki->topk_positions);
        put_int(j, "topk_exact_positions", (int64_t)ki->exact_positions);
        put_int(j, "topk_text_mapped_positions", (int64_t)ki->text_positions);
        put_int(j, "same_top1_positions", (int64_t)ki->same_top_count);
    }
    put_int(j, "tokens_scored", (int64_t)k->count);
    put_num(j, "kld_mean", k->kld_mean);
    put_num(j, "kld_stderr", k->kld_stderr);
    put_num(j, "kld_mean_lo", k->kld_mean_lo);
    put_num(j, "kld_mean_hi", k->kld_mean_hi);
    put_num(j, "kld_median", k->kld_median);
    put_num(j, "kld_p90", k->kld_p90);
    put_num(j, "kld_p95", k->kld_p95);
    put_num(j, "kld_p99", k->kld_p99);
    put_num(j, "kld_p999", k->kld_p999);
    put_num(j, "kld_max", k->kld_max);
    put_num(j, "kld_min", k->kld_min);
    put_num(j, "same_top1", k->same_top);
    put_num(j, "same_top1_stderr", k->same_top_stderr);
    put_num(j, "ppl", k->ppl);
    put_num(j, "ppl_base", k->ppl_base);
    put_num(j, "ppl_ratio", k->ppl_ratio);
    put_num(j, "ppl_delta", k->ppl_delta);
    put_num(j, "ln_ppl_ratio", k->ln_ratio_mean);
    put_num(j, "ln_ppl_ratio_stderr", k->ln_ratio_stderr);
    put_num(j, "dp_rms", k->dp_rms);
    put_num(j, "seconds", r->secs);
    return j;
}

void dsq_kld_report_text(FILE *f, const dsq_kld_report *r)
{
    const dsq_kld_result *k = &r->k;
    const dsq_ep_kld_info *ki = &r->ki;
    fprintf(f, "tokens scored  : %llu (%zu windows of %zu)\n", (unsigned long long)k->count, r->plan.n_chunks,
            r->plan.n_ctx);
    fprintf(f, "PPL(Q)         : %.4f   PPL(base): %.4f\n", k->ppl, k->ppl_base);
    fprintf(f, "PPL ratio      : %.6f (delta %+.4f, ln ratio %.6f +/- %.6f)\n", k->ppl_ratio, k->ppl_delta,
            k->ln_ratio_mean, k->ln_ratio_stderr);
    fprintf(f, "Mean    KLD    : %.6f +/- %.6f\n", k->kld_mean, k->kld_stderr);
    fprintf(f, "Mean    KLD 95%%: %.6f .. %.6f (bootstrap over %zu windows)\n", k->kld_mean_lo, k->kld_mean_hi,
            r->plan.n_chunks);
    fprintf(f, "Median  KLD    : %.6f\n", k->kld_median);
    fprintf(f, "99.0%%   KLD    : %.6f\n", k->kld_p99);
    fprintf(f, "99.9%%   KLD    : %.6f\n", k->kld_p999);
    fprintf(f, "Maximum KLD    : %.6f\n", k->kld_max);
    if (r->endpoint && ki->topk_positions)
        fprintf(f,
                "(served model: KLD over the base's top-%u from the served top log-probs (prompt_logprobs k=%d; "
                "%llu mapped from text) at %llu of %llu positions, %llu with every base top-k token served; a "
                "LOWER BOUND of the true KLD)\n",
                r->base_topk, ki->requested_k, (unsigned long long)ki->text_positions,
                (unsigned long long)ki->topk_positions, (unsigned long long)k->count,
                (unsigned long long)ki->exact_positions);
    if (r->endpoint && ki->topk_positions < k->count)
        fprintf(f,
                "(served model: KLD over {target token, rest} only at %llu positions (no id-keyed "
                "prompt_logprobs; no --tokenizer or spellings differ), a LOWER BOUND of the true KLD)\n",
                (unsigned long long)(k->count - ki->topk_positions));
    if (!r->endpoint || ki->same_top_count)
        fprintf(f, "Same top-1     : %.3f +/- %.3f %%%s\n", 100 * k->same_top, 100 * k->same_top_stderr,
                r->endpoint && ki->same_top_count < k->count ? " (over the positions the server ranked)" : "");
    else fprintf(f, "Same top-1     : unknown (the server named no token ids)\n");
    fprintf(f, "RMS dp         : %.3f %%\n", 100 * k->dp_rms);
}

/* ---- gsm8k -------------------------------------------------------------- */

static json_object *gsm8k_filter_json(size_t correct, size_t n)
{
    json_object *j = json_object_new_object();
    put_num(j, "exact_match", (double)correct / (double)n);
    put_num(j, "stderr", dsq_gsm8k_stderr(correct, n));
    put_int(j, "correct", (int64_t)correct);
    return j;
}

json_object *dsq_gsm8k_report_json(const dsq_gsm8k_report *r)
{
    json_object *j = json_object_new_object();
    put_str(j, "command", "gsm8k");
    json_object_object_add(j, "task_version", json_object_new_int(3));
    put_int(j, "n", (int64_t)r->n);
    put_int(j, "missing", (int64_t)(r->n - r->scored));
    if (!r->score) {
        json_object_object_add(j, "shots", json_object_new_int(r->shots));
        put_int(j, "seed", (int64_t)r->seed);
        /* gen_tokens: all the items'; the rate: this run's tokens over its time */
        put_int(j, "gen_tokens", (int64_t)r->gen_tokens);
        put_int(j, "resumed", (int64_t)r->resumed);
        put_int(j, "refused", (int64_t)r->refused);
        put_int(j, "run_gen_tokens", (int64_t)r->run_gen_tokens);
        put_num(j, "seconds", r->secs);
        put_num(j, "gen_tokens_per_s", (double)r->run_gen_tokens / r->secs);
    }
    json_object_object_add(j, "strict-match", gsm8k_filter_json(r->strict, r->n));
    json_object_object_add(j, "flexible-extract", gsm8k_filter_json(r->flexible, r->n));
    return j;
}

void dsq_gsm8k_report_text(FILE *f, const dsq_gsm8k_report *r)
{
    double rate = (double)r->run_gen_tokens / r->secs;
    if (r->score)
        fprintf(f, "gsm8k (lm-eval v3.0 filters), %zu items, %zu completions from %s\n", r->n, r->scored, r->score);
    else if (r->resumed)
        fprintf(f,
                "gsm8k (lm-eval v3.0), %d-shot, seed %llu, %zu items (%zu from %s), %zu new tokens in %.1f s "
                "(%.1f tokens/s)\n",
                r->shots, (unsigned long long)r->seed, r->scored, r->resumed, r->journal, r->run_gen_tokens, r->secs,
                rate);
    else
        fprintf(f, "gsm8k (lm-eval v3.0), %d-shot, seed %llu, %zu items, %zu tokens in %.1f s (%.1f tokens/s)\n",
                r->shots, (unsigned long long)r->seed, r->scored, r->run_gen_tokens, r->secs, rate);
    fprintf(f, "  flexible-extract  exact_match %.4f +/- %.4f  (%zu/%zu)\n", (double)r->flexible / (double)r->n,
            dsq_gsm8k_stderr(r->flexible, r->n), r->flexible, r->n);
    fprintf(f, "  strict-match      exact_match %.4f +/- %.4f  (%zu/%zu)\n", (double)r->strict / (double)r->n,
            dsq_gsm8k_stderr(r->strict, r->n), r->strict, r->n);
}

/* ---- gsm8k --chat ------------------------------------------------------- */

static json_object *chat_filter_json(double acc, double se, size_t correct, const char *pass_key, double pass)
{
    json_object *j = json_object_new_object();
    put_num(j, "accuracy", acc);
    put_num(j, "stderr", se);
    put_int(j, "correct", (int64_t)correct);
    put_num(j, pass_key, pass);
    return j;
}

json_object *dsq_chat_report_json(const dsq_chat_report *r)
{
    const dsq_chat_summary *sm = &r->sm;
    char k[32];
    snprintf(k, sizeof k, "pass@%d", r->samples);
    json_object *j = json_object_new_object();
    put_str(j, "command", "gsm8k");
    json_object_object_add(j, "chat", json_object_new_boolean(1));
    put_str(j, "prompt", r->suite);
    if (r->template_id) put_str(j, "chat_template", r->template_id);
    put_int(j, "n", (int64_t)r->n);
    json_object_object_add(j, "samples", json_object_new_int(r->samples));
    put_int(j, "missing", (int64_t)sm->missing);
    put_num(j, "temperature", r->temperature);
    put_int(j, "max_tokens", r->max_tokens);
    put_int(j, "gen_tokens", (int64_t)sm->gen_tokens);
    put_int(j, "reasoning_chars", (int64_t)sm->reasoning_chars);
    put_num(j, "seconds", r->secs);
    json_object_object_add(j, r->lmeval ? "strict-match" : "accuracy",
                           chat_filter_json(sm->acc, sm->acc_se, sm->correct, k, sm->pass_n));
    if (r->lmeval)
        json_object_object_add(j, "flexible-extract",
                               chat_filter_json(sm->acc_flex, sm->acc_flex_se, sm->correct_flex, k, sm->pass_n_flex));
    return j;
}

void dsq_chat_report_text(FILE *f, const dsq_chat_report *r)
{
    const dsq_chat_summary *sm = &r->sm;
    size_t pairs = r->n * (size_t)r->samples;
    char k[32];
    snprintf(k, sizeof k, "pass@%d", r->samples);
    fprintf(f, "gsm8k chat (%s%s%s), %zu items x %d sample%s, %llu tokens in %.1f s, reasoning %llu chars\n",
            r->suite, r->template_id ? ", template " : "", r->template_id ? r->template_id : "", r->n, r->samples,
            r->samples > 1 ? "s" : "", (unsigned long long)sm->gen_tokens, r->secs,
            (unsigned long long)sm->reasoning_chars);
    fprintf(f, "  %-17s %.4f +/- %.4f  (%zu/%zu)", r->lmeval ? "strict-match" : "accuracy", sm->acc, sm->acc_se,
            sm->correct, pairs);
    if (r->samples > 1) fprintf(f, "  %s %.4f", k, sm->pass_n);
    fprintf(f, "\n");
    if (r->lmeval) {
        fprintf(f, "  %-17s %.4f +/- %.4f  (%zu/%zu)", "flexible-extract", sm->acc_flex, sm->acc_flex_se,
                sm->correct_flex, pairs);
        if (r->samples > 1) fprintf(f, "  %s %.4f", k, sm->pass_n_flex);
        fprintf(f, "\n");
    }
}
