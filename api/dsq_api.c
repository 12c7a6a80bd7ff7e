/* dsq_api.c - the public API (include/dsq/dsq.h) over the library's modules.
 *
 * A small facade: a dsq_lm is the engine's model, one sequence's KV cache
 * and the model's tokenizer, found as the programs find it. Perplexity is
 * ds-eval ppl's computation (eval/eval_metrics.h) with the default BOS
 * policy. Everything here is exported from libdsq.so (DSQ_API); the rest of
 * the library is built with hidden visibility. */
/* the library's version (common/dsq_version.h, which the Makefile reads
 * too), taken before the public header's own macros replace it */
#include "dsq_version.h"
static const char lib_version[] = DSQ_VERSION_STRING;
enum { LIB_VERSION = DSQ_VERSION_MAJOR * 10000 + DSQ_VERSION_MINOR * 100 + DSQ_VERSION_PATCH };
#undef DSQ_VERSION_MAJOR
#undef DSQ_VERSION_MINOR
#undef DSQ_VERSION_PATCH
#undef DSQ_VERSION_STRING
#include "dsq/dsq.h"

#include "dsq_error.h"
#include "dsq_file.h"
#include "eval_metrics.h"
#include "model.h"
#include "model_tokenizer.h"
#include "scheme.h"
#include "tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The public header repeats the version (it cannot include the library's
 * own headers): a different number does not compile, and
 * tests/test_public_header.c compares the strings. */
_Static_assert(LIB_VERSION == DSQ_VERSION_NUMBER, "include/dsq/dsq.h and common/dsq_version.h disagree");

struct dsq_lm {
    dsq_model     *m;
    dsq_state     *st;
    dsq_tokenizer *tok;   /* NULL when the model has none */
    int64_t        ctx;
    size_t         vocab;
};

unsigned dsq_version_number(void) { return LIB_VERSION; }
const char *dsq_version_string(void) { return lib_version; }
void dsq_free(void *p) { free(p); }

const char *dsq_scheme_name(int index)
{
    const dsq_scheme *s = index >= 0 ? dsq_scheme_at(index) : NULL;
    return s ? s->name : NULL;
}

const char *dsq_scheme_description(int index)
{
    const dsq_scheme *s = index >= 0 ? dsq_scheme_at(index) : NULL;
    return s ? s->description : NULL;
}

void dsq_lm_options_default(dsq_lm_options *o)
{
    if (!o) return;
    memset(o, 0, sizeof *o);
}

/* The model's tokenizer, found as every dsq program finds it
 * (dsq_tokenizer_for_model). When the caller named none, a model without
 * one opens without one (*tok NULL); a tokenizer that is there but does not
 * load is an error. */
static int find_tokenizer(const char *path, const char *named, dsq_tokenizer **tok, dsq_diag *d)
{
    dsq_diag local;
    dsq_diag_clear(&local);
    dsq_tok_origin origin = DSQ_TOK_FROM_ARG;
    *tok = NULL;
    int rc = dsq_tokenizer_for_model(tok, path, named, &origin, NULL, 0, &local);
    if (rc == DSQ_ERR_NOT_FOUND && !named) return DSQ_OK;
    if (rc < 0 && d && d->status == DSQ_OK) *d = local;
    return rc < 0 ? rc : DSQ_OK;
}

int dsq_lm_open(dsq_lm **out, const char *path, const dsq_lm_options *opts, dsq_diag *d)
{
    if (!out || !path) return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "dsq_lm_open: NULL argument");
    *out = NULL;
    dsq_lm_options o;
    if (opts) o = *opts; else dsq_lm_options_default(&o);
    if (o.context < 0) return dsq_fail(d, DSQ_ERR_INVALID_ARG, path, NULL, -1, "negative context %lld", (long long)o.context);
    if (!dsq_path_exists(path)) return dsq_fail(d, DSQ_ERR_NOT_FOUND, path, NULL, -1, "no such model file or directory");
    dsq_lm *lm = calloc(1, sizeof *lm);
    if (!lm) return dsq_fail(d, DSQ_ERR_NOMEM, path, NULL, -1, "out of memory");
    int rc = find_tokenizer(path, o.tokenizer, &lm->tok, d);
    dsq_model_opts mo;
    dsq_model_opts_default(&mo);
    mo.threads = o.threads;
    mo.no_verify = o.no_verify;
    if (rc == DSQ_OK) rc = dsq_model_open(&lm->m, path, &mo, d);
    if (rc == DSQ_OK) {
        const dsq_model_config *c = dsq_model_get_config(lm->m);
        int64_t mpe = c->max_position_embeddings;
        lm->vocab = (size_t)c->vocab_size;
        lm->ctx = o.context ? o.context : (mpe > 0 && mpe < 4096 ? mpe : 4096);
        /* positions past max_position_embeddings were never trained */
        if (mpe > 0 && lm->ctx > mpe)
            rc = dsq_fail(d, DSQ_ERR_INVALID_ARG, path, NULL, -1,
                          "context %lld exceeds the model's max_position_embeddings (%lld)", (long long)lm->ctx,
                          (long long)mpe);
    }
    if (rc == DSQ_OK && !(lm->st = dsq_state_create(lm->m, 1, lm->ctx)))
        rc = dsq_fail(d, DSQ_ERR_NOMEM, path, NULL, -1, "cannot allocate the KV cache for %lld tokens", (long long)lm->ctx);
    if (rc < 0) {
        dsq_lm_free(lm);
        return rc;
    }
    *out = lm;
    return DSQ_OK;
}

void dsq_lm_free(dsq_lm *lm)
{
    if (!lm) return;
    dsq_state_free(lm->st);
    dsq_model_free(lm->m);
    dsq_tokenizer_free(lm->tok);
    free(lm);
}

int dsq_lm_get_info(const dsq_lm *lm, dsq_lm_info *info)
{
    if (!lm || !info) return DSQ_ERR_INVALID_ARG;
    const dsq_model_config *c = dsq_model_get_config(lm->m);
    memset(info, 0, sizeof *info);
    snprintf(info->architecture, sizeof info->architecture, "%s", c->architecture);
    info->vocab_size = c->vocab_size;
    info->hidden_size = c->hidden_size;
    info->num_layers = c->num_hidden_layers;
    info->max_position = c->max_position_embeddings > 0 ? c->max_position_embeddings : 0;
    info->context = lm->ctx;
    info->weight_bytes = dsq_model_weight_bytes(lm->m);
    info->has_tokenizer = lm->tok != NULL;
    return DSQ_OK;
}

int dsq_lm_describe(const dsq_lm *lm, char *buf, size_t size)
{
    if (!lm) return DSQ_ERR_INVALID_ARG;
    char empty[1];
    return dsq_model_info(lm->m, buf && size ? buf : empty, buf && size ? size : sizeof empty);
}

int dsq_lm_forward(dsq_lm *lm, const int32_t *tokens, size_t n, float *logits, unsigned flags, dsq_diag *d)
{
    if (!lm || !tokens || n == 0) return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "dsq_lm_forward: no tokens");
    if (flags & ~(unsigned)DSQ_LM_ALL_LOGITS)
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "dsq_lm_forward: unknown flags 0x%x", flags);
    int64_t pos = dsq_state_pos(lm->st, 0);
    if ((uint64_t)n > (uint64_t)(lm->ctx - pos) || n > INT32_MAX)
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1,
                        "%zu tokens at position %lld pass the context of %lld", n, (long long)pos, (long long)lm->ctx);
    for (size_t i = 0; i < n; i++)
        if (tokens[i] < 0 || (size_t)tokens[i] >= lm->vocab)
            return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "token %zu: id %d out of range [0, %zu)", i,
                            (int)tokens[i], lm->vocab);
    return dsq_forward(lm->m, lm->st, 0, tokens, (int)n, logits,
                       (flags & DSQ_LM_ALL_LOGITS) ? 0u : (unsigned)DSQ_FWD_LAST_LOGITS, d);
}

int64_t dsq_lm_position(const dsq_lm *lm) { return lm ? dsq_state_pos(lm->st, 0) : -1; }

int dsq_lm_rewind(dsq_lm *lm, int64_t pos)
{
    return lm ? dsq_state_truncate(lm->st, 0, pos) : DSQ_ERR_INVALID_ARG;
}

static int need_tokenizer(const dsq_lm *lm, dsq_diag *d)
{
    if (!lm) return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "NULL model");
    if (!lm->tok) return dsq_fail(d, DSQ_ERR_NOT_FOUND, NULL, NULL, -1, "the model has no tokenizer");
    return DSQ_OK;
}

int dsq_lm_encode(const dsq_lm *lm, const char *text, size_t len, unsigned flags, int32_t **ids, size_t *n,
                  dsq_diag *d)
{
    DSQ_TRY(need_tokenizer(lm, d));
    if ((!text && len) || !ids || !n || (flags & ~(unsigned)(DSQ_LM_ADD_SPECIAL | DSQ_LM_PARSE_SPECIAL)))
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "dsq_lm_encode: bad arguments");
    unsigned f = ((flags & DSQ_LM_ADD_SPECIAL) ? (unsigned)DSQ_TOK_ADD_SPECIAL : 0u) |
                 ((flags & DSQ_LM_PARSE_SPECIAL) ? (unsigned)DSQ_TOK_PARSE_SPECIAL : 0u);
    return dsq_tokenizer_encode_ex(lm->tok, text ? text : "", len, f, ids, n, d);
}

int dsq_lm_decode(const dsq_lm *lm, const int32_t *ids, size_t n, unsigned flags, char **text, size_t *len,
                  dsq_diag *d)
{
    DSQ_TRY(need_tokenizer(lm, d));
    if ((!ids && n) || !text || (flags & ~(unsigned)DSQ_LM_SKIP_SPECIAL))
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "dsq_lm_decode: bad arguments");
    static const int32_t none[1] = { 0 };
    int rc = dsq_tokenizer_decode(lm->tok, ids ? ids : none, n, (flags & DSQ_LM_SKIP_SPECIAL) != 0, text, len);
    if (rc < 0) return dsq_fail(d, rc, NULL, NULL, -1, "cannot decode the ids (an unknown id?)");
    return DSQ_OK;
}

int32_t dsq_lm_bos(const dsq_lm *lm) { return lm && lm->tok ? dsq_tokenizer_bos(lm->tok) : -1; }
int32_t dsq_lm_eos(const dsq_lm *lm) { return lm && lm->tok ? dsq_tokenizer_eos(lm->tok) : -1; }

/* dsq_window_logits_fn: the first half of the window fills the cache, then
 * logits for positions first .. n-2 (ds-eval's model_window). */
static int lm_window(void *u, const int32_t *w, size_t n, size_t first, float *logits, dsq_diag *d)
{
    dsq_lm *lm = u;
    dsq_state_reset(lm->st, 0);
    DSQ_TRY(dsq_forward(lm->m, lm->st, 0, w, (int)first, NULL, 0, d));
    return dsq_forward(lm->m, lm->st, 0, w + first, (int)(n - 1 - first), logits, 0, d);
}

/* The BOS that encode(add_special) puts in front, -1 for none
 * (llama-perplexity's add_bos). */
static int32_t adds_bos(const dsq_tokenizer *t)
{
    int32_t *ids = NULL, bos = dsq_tokenizer_bos(t), res = -1;
    size_t n = 0;
    if (bos >= 0 && dsq_tokenizer_encode(t, "", 0, 1, &ids, &n, NULL) == 0 && n >= 1 && ids[0] == bos) res = bos;
    free(ids);
    return res;
}

int dsq_lm_perplexity(dsq_lm *lm, const char *text, size_t len, size_t window, size_t max_tokens,
                      dsq_perplexity *out, dsq_diag *d)
{
    DSQ_TRY(need_tokenizer(lm, d));
    if ((!text && len) || !out) return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "dsq_lm_perplexity: bad arguments");
    if (!window) window = 512;
    if ((uint64_t)window > (uint64_t)lm->ctx)
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "window of %zu tokens beyond the context of %lld",
                        window, (long long)lm->ctx);
    int32_t *ids = NULL;
    size_t n = 0;
    /* llama-perplexity: add_special, special-token strings stay text */
    int rc = dsq_tokenizer_encode_ex(lm->tok, text ? text : "", len, DSQ_TOK_ADD_SPECIAL, &ids, &n, d);
    if (rc == DSQ_OK && max_tokens && max_tokens < n) n = max_tokens;
    dsq_ppl_plan plan;
    if (rc == DSQ_OK) rc = dsq_ppl_plan_init(&plan, n, window, adds_bos(lm->tok), d);
    dsq_ppl_result res;
    if (rc == DSQ_OK) {
        dsq_eval_hooks h = { .pool = dsq_model_pool(lm->m) };
        rc = dsq_ppl_run(&plan, ids, lm->vocab, lm_window, lm, NULL, &h, &res, d);
        dsq_state_reset(lm->st, 0);
    }
    free(ids);
    if (rc < 0) return rc;
    out->ppl = res.ppl;
    out->ppl_error = res.ppl_stderr;
    out->tokens = res.count;
    out->windows = res.n_chunks;
    return DSQ_OK;
}
