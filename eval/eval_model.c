/* eval_model.c - a model opened for evaluation (see eval_model.h). */
#include "eval_model.h"
#include "text_prefix.h"

#include <stdlib.h>
#include <string.h>

#define MAX_TEXT ((size_t)1 << 30) /* a scored text: 1 GiB at most */

const char *const dsq_text_bos_names[3] = { "window", "first", "no" };

int dsq_eval_model_open(dsq_eval_model *r, const dsq_eval_model_opts *o, dsq_diag *d)
{
    dsq_model_opts mo;
    dsq_model_opts_default(&mo);
    mo.threads = o->threads;
    mo.no_verify = o->no_verify;
    mo.bf16_terms = o->bf16_terms;
    mo.dsa_mode = o->dsa_mode;
    mo.kv_cache = o->kv_cache;
    DSQ_TRY(dsq_model_open(&r->m, o->model, &mo, d));
    /* Positions past max_position_embeddings were never trained: a window
     * that long gives a number (ppl 481 instead of 7.1) that means nothing. */
    int64_t mpe = dsq_model_get_config(r->m)->max_position_embeddings;
    if (mpe > 0 && (int64_t)o->ctx > mpe)
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, o->model, NULL, -1,
                        "context %zu exceeds the model's max_position_embeddings (%lld): positions past it "
                        "were never trained, so the result would be meaningless; use --ctx %lld or less",
                        o->ctx, (long long)mpe, (long long)mpe);
    r->vocab = (size_t)dsq_model_get_config(r->m)->vocab_size;
    r->st = dsq_state_create(r->m, o->max_batch, (int64_t)o->ctx);
    if (!r->st)
        return dsq_fail(d, DSQ_ERR_NOMEM, o->model, NULL, -1, "cannot allocate the KV cache for %d x %zu tokens",
                        o->max_batch, o->ctx);
    return DSQ_OK;
}

void dsq_eval_model_close(dsq_eval_model *r)
{
    dsq_state_free(r->st);
    dsq_model_free(r->m);
    dsq_tokenizer_free(r->tok);
    memset(r, 0, sizeof *r);
}

int dsq_eval_model_window(void *user, const int32_t *w, size_t n, size_t first, float *logits, dsq_diag *d)
{
    dsq_eval_model *r = user;
    dsq_state_reset(r->st, 0);
    DSQ_TRY(dsq_forward(r->m, r->st, 0, w, (int)first, NULL, 0, d));
    return dsq_forward(r->m, r->st, 0, w + first, (int)(n - 1 - first), logits, 0, d);
}

int32_t dsq_tokenizer_adds_bos(const dsq_tokenizer *t)
{
    int32_t *ids = NULL, bos = dsq_tokenizer_bos(t), res = -1;
    size_t n = 0;
    if (bos >= 0 && dsq_tokenizer_encode(t, "", 0, 1, &ids, &n, NULL) == 0 && n >= 1 && ids[0] == bos) res = bos;
    free(ids);
    return res;
}

int dsq_eval_tokenize_text(const dsq_tokenizer *tok, const char *path, int policy, uint64_t limit, int32_t **ids,
                           size_t *n, size_t *bytes, dsq_diag *d)
{
    if (policy == DSQ_TEXT_BOS_FIRST && dsq_tokenizer_bos(tok) < 0)
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "--bos first: the tokenizer has no BOS token");
    size_t len = 0;
    unsigned flags = policy == DSQ_TEXT_BOS_NO ? 0u
                   : policy == DSQ_TEXT_BOS_FIRST ? (unsigned)(DSQ_TOK_ADD_SPECIAL | DSQ_TOK_FORCE_BOS)
                   : (unsigned)DSQ_TOK_ADD_SPECIAL;
    int rc = dsq_tokenize_file_prefix(tok, path, limit, MAX_TEXT, flags, ids, n, &len, d);
    if (bytes) *bytes = len;
    return rc;
}

int dsq_kld_check_base(const dsq_logp_reader *base, const dsq_tokenizer *tok, const char *data, int policy,
                       dsq_diag *d)
{
    dsq_ppl_plan plan;
    dsq_logp_reader_plan(base, &plan);
    int32_t *tokens = NULL, *win = NULL;
    size_t n = 0;
    int rc = dsq_eval_tokenize_text(tok, data, policy, 0, &tokens, &n, NULL, d);
    /* the policy shows in the header too: window writes its BOS id there */
    int32_t want_bos = policy == DSQ_TEXT_BOS_WINDOW && rc == DSQ_OK ? dsq_tokenizer_adds_bos(tok) : -1;
    if (rc == DSQ_OK && plan.bos != want_bos)
        rc = dsq_fail(d, DSQ_ERR_DATA, base->path, NULL, -1, "the base was made with %s, not --bos %s",
                      plan.bos >= 0 ? "--bos window" : "--bos first or no", dsq_text_bos_names[policy]);
    if (rc == DSQ_OK && (n < plan.n_chunks * plan.n_ctx || !(win = malloc(plan.n_ctx * sizeof *win))))
        rc = dsq_fail(d, DSQ_ERR_DATA, data, NULL, -1, "the base was computed on different tokens (%zu here, it needs %zu)",
                      n, plan.n_chunks * plan.n_ctx);
    for (size_t c = 0; rc == DSQ_OK && c < plan.n_chunks; c++) {
        dsq_ppl_window(&plan, tokens, c, win);
        if (memcmp(win, base->tokens + c * plan.n_ctx, plan.n_ctx * sizeof *win))
            rc = dsq_fail(d, DSQ_ERR_DATA, data, NULL, -1,
                          "the base was computed on different tokens (window %zu differs; made with "
                          "another --bos than %s?)", c, dsq_text_bos_names[policy]);
    }
    free(tokens);
    free(win);
    return rc;
}
