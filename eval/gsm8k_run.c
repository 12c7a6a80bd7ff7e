/* gsm8k_run.c - GSM8K generation on a model in process (see gsm8k_run.h). */
#include "gsm8k_run.h"
#include "model_config.h"
#include "dsq_file.h"

#include <json-c/json.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *dsq_gsm8k_default_train(const char *data)
{
    const char *sl = strrchr(data, '/');
    size_t dl = sl ? (size_t)(sl - data) + 1 : 0;
    char *p = malloc(dl + sizeof "train.jsonl");
    if (!p) return NULL;
    memcpy(p, data, dl);
    memcpy(p + dl, "train.jsonl", sizeof "train.jsonl");
    return p;
}

int dsq_gsm8k_prompts(const dsq_gsm8k_set *test, size_t n, const char *train_path, int shots, uint64_t seed,
                      char **prompts, size_t *lens, dsq_diag *d)
{
    dsq_gsm8k_set train = { 0 };
    int rc = DSQ_OK;
    if (shots > 0) rc = dsq_gsm8k_load(&train, train_path, d);
    dsq_gsm8k_fewshot fs;
    if (rc == DSQ_OK && dsq_gsm8k_fewshot_init(&fs, train.n, shots, seed) < 0)
        rc = dsq_fail(d, DSQ_ERR_DATA, train_path, NULL, -1, "%d shots but only %zu training items", shots, train.n);
    size_t draw[64];
    for (size_t i = 0; i < n && rc == DSQ_OK; i++) { /* every doc takes its draw, as lm-eval */
        rc = dsq_gsm8k_fewshot_next(&fs, draw);
        if (rc == DSQ_OK) rc = dsq_gsm8k_prompt(&train, draw, shots, &test->items[i], &prompts[i], &lens[i]);
        if (rc < 0) rc = dsq_fail(d, rc, NULL, NULL, -1, "cannot build prompt %zu", i);
    }
    dsq_gsm8k_set_release(&train);
    return rc;
}

static int gen_prefill(void *u, int slot, const int32_t *t, size_t n, float *logits, dsq_diag *d)
{
    dsq_eval_model *r = u;
    if (n > INT32_MAX) return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "prompt too long");
    dsq_state_reset(r->st, slot);
    return dsq_forward(r->m, r->st, slot, t, (int)n, logits, DSQ_FWD_LAST_LOGITS, d);
}

static int gen_decode(void *u, const int *slots, const int32_t *t, int n, float *logits, dsq_diag *d)
{
    dsq_eval_model *r = u;
    return dsq_forward_batch_decode(r->m, r->st, t, slots, n, logits, d);
}

/* Decode as lm-eval's tok_decode does (special tokens skipped); ids the
 * tokenizer does not know (padding rows of a larger lm_head) are dropped. */
static int gen_detok(void *u, const int32_t *ids, size_t n, char **text, size_t *len)
{
    dsq_eval_model *r = u;
    size_t tv = dsq_tokenizer_vocab_size(r->tok), k = 0;
    int32_t *keep = malloc((n ? n : 1) * sizeof *keep);
    if (!keep) return DSQ_ERR_NOMEM;
    for (size_t i = 0; i < n; i++)
        if (ids[i] >= 0 && (size_t)ids[i] < tv && dsq_tokenizer_piece(r->tok, ids[i])) keep[k++] = ids[i];
    int rc = dsq_tokenizer_decode(r->tok, keep, k, 1, text, len);
    free(keep);
    return rc;
}

void dsq_eval_gen_ops(dsq_eval_model *r, int n_slots, dsq_gen_ops *ops)
{
    dsq_gen_ops g = { .user = r, .vocab = r->vocab, .n_slots = n_slots, .prefill = gen_prefill,
                      .decode = gen_decode, .detok = gen_detok };
    *ops = g;
}

size_t dsq_eval_eos_ids(const dsq_eval_model *r, int32_t *eos, size_t cap)
{
    size_t n_eos = 0;
    int32_t te = dsq_tokenizer_eos(r->tok);
    if (te >= 0 && n_eos < cap) eos[n_eos++] = te;
    const dsq_model_config *cfg = dsq_model_get_config(r->m);
    for (int i = 0; i < cfg->n_eos && n_eos < cap; i++) {
        int dup = 0;
        for (size_t k = 0; k < n_eos; k++) dup |= eos[k] == (int32_t)cfg->eos_token_ids[i];
        if (!dup) eos[n_eos++] = (int32_t)cfg->eos_token_ids[i];
    }
    return n_eos;
}

#define notef(h_, level_, ...) dsq_notef((h_)->note, (h_)->ctx, level_, __VA_ARGS__)

/* The stop strings (the task's plus the EOS text, which lm-eval appends)
 * and the EOS ids (the tokenizer's and the model config's), then generate. */
static int generate(dsq_eval_model *r, const dsq_gsm8k_local_opts *o, int32_t **prompts, const size_t *np, size_t n,
                    dsq_gen_done_fn done, void *done_ctx, dsq_diag *d)
{
    size_t max_ctx = (size_t)dsq_state_max_ctx(r->st);
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < np[i]; k++)
            if (prompts[i][k] < 0 || (size_t)prompts[i][k] >= r->vocab)
                return dsq_fail(d, DSQ_ERR_DATA, NULL, NULL, -1, "prompt %zu has token id %d beyond the model's %zu logits",
                                i, (int)prompts[i][k], r->vocab);
    if (max_ctx <= o->max_new)
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, o->model.model, NULL, -1,
                        "context %zu leaves no room for %zu new tokens (raise --ctx)", max_ctx, o->max_new);
    const char *stops[4] = { dsq_gsm8k_stops[0], dsq_gsm8k_stops[1], dsq_gsm8k_stops[2], NULL };
    size_t n_stops = 3;
    char *eos_text = NULL;
    int32_t eos[1 + DSQ_CFG_MAX_EOS];
    size_t n_eos = dsq_eval_eos_ids(r, eos, sizeof eos / sizeof eos[0]), el;
    int32_t te = dsq_tokenizer_eos(r->tok);
    if (te >= 0 && dsq_tokenizer_decode(r->tok, &te, 1, 0, &eos_text, &el) == 0 && el) stops[n_stops++] = eos_text;
    dsq_gen_ops ops;
    dsq_eval_gen_ops(r, o->model.max_batch, &ops);
    dsq_gen_opts go = { .max_new_tokens = o->max_new, .max_ctx = max_ctx, .stops = stops, .n_stops = n_stops,
                        .eos = eos, .n_eos = n_eos, .cancel = o->cancel };
    if (o->generating) o->generating(o->ctx, n, max_ctx);
    int rc = dsq_gsm8k_generate(&ops, &go, (const int32_t *const *)prompts, np, n, done, done_ctx, d);
    free(eos_text);
    return rc;
}

int dsq_gsm8k_run_local(dsq_eval_model *r, const dsq_gsm8k_set *test, size_t n, const dsq_gsm8k_local_opts *o,
                        dsq_gen_done_fn done, void *done_ctx, dsq_diag *d)
{
    char *train_path = o->train ? strdup(o->train) : dsq_gsm8k_default_train(o->data);
    char **text = calloc(n ? n : 1, sizeof *text);
    size_t *tl = calloc(n ? n : 1, sizeof *tl), *np = calloc(n ? n : 1, sizeof *np);
    int32_t **prompts = calloc(n ? n : 1, sizeof *prompts);
    int rc = (!train_path || !text || !tl || !np || !prompts) ? dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory")
                                                              : DSQ_OK;
    if (rc == DSQ_OK) {
        rc = dsq_gsm8k_prompts(test, n, train_path, o->shots, o->seed, text, tl, d);
        if (rc == DSQ_ERR_NOT_FOUND && o->shots > 0 && !o->train)
            notef(o, 0, "%d-shot prompts need a training split: give --train FILE (default: %s, absent) or --shots 0",
                  o->shots, train_path);
    }
    if (rc == DSQ_OK && !r->tok) rc = dsq_tokenizer_for_model(&r->tok, o->model.model, o->tokenizer, NULL, NULL, 0, d);
    /* BOS: as the tokenizer's add_special_tokens does, forced, or none */
    unsigned flags = DSQ_TOK_PARSE_SPECIAL | (o->bos == 1 ? DSQ_TOK_FORCE_BOS : o->bos == -1 ? DSQ_TOK_ADD_SPECIAL : 0);
    for (size_t i = 0; i < n && rc == DSQ_OK; i++) rc = dsq_tokenizer_encode_ex(r->tok, text[i], tl[i], flags, &prompts[i], &np[i], d);
    if (rc == DSQ_OK) rc = dsq_eval_model_open(r, &o->model, d);
    if (rc == DSQ_OK) rc = generate(r, o, prompts, np, n, done, done_ctx, d);
    for (size_t i = 0; i < n; i++) {
        free(text ? text[i] : NULL);
        free(prompts ? prompts[i] : NULL);
    }
    free(text);
    free(tl);
    free(np);
    free(prompts);
    free(train_path);
    return rc;
}

/* ---- the items of a run ---- */

int dsq_gsm8k_item_done(void *items, size_t idx, dsq_gen_result *res)
{
    dsq_gsm8k_result_item *it = (dsq_gsm8k_result_item *)items + idx;
    it->completion = res->text;
    it->len = res->len;
    it->g = *res;
    it->g.text = NULL;
    it->have = 1;
    res->text = NULL;
    return 0;
}

void dsq_gsm8k_items_from_completions(dsq_gsm8k_completions *c, dsq_gsm8k_result_item *items, size_t n)
{
    for (size_t i = 0; i < n && i < c->n_docs; i++) {
        if (!c->text[i]) continue;
        items[i].completion = c->text[i];
        /* kept as scored: cut at the task's stop strings */
        items[i].len = dsq_gsm8k_stop_pos(c->text[i], c->len[i], dsq_gsm8k_stops, 3);
        c->text[i][items[i].len] = 0;
        c->text[i] = NULL;
        items[i].have = 1;
    }
}

int dsq_gsm8k_score_items(const dsq_gsm8k_set *test, dsq_gsm8k_result_item *items, size_t n, size_t *scored,
                          size_t *strict, size_t *flexible, dsq_diag *d)
{
    *scored = *strict = *flexible = 0;
    dsq_gsm8k_scorer *sc = NULL;
    int rc = dsq_gsm8k_scorer_create(&sc, d);
    for (size_t i = 0; i < n && rc == DSQ_OK; i++) {
        if (!items[i].have) continue;
        rc = dsq_gsm8k_score_item(sc, items[i].completion, items[i].len, test->items[i].answer,
                                  test->items[i].answer_len, dsq_gsm8k_stops, 3, &items[i].s);
        if (rc < 0) { rc = dsq_fail(d, rc, NULL, NULL, -1, "cannot score item %zu", i); break; }
        ++*scored;
        *strict += (size_t)items[i].s.correct_strict;
        *flexible += (size_t)items[i].s.correct_flexible;
    }
    dsq_gsm8k_scorer_free(sc);
    return rc;
}

static const char *stop_name(int s)
{
    switch (s) {
    case DSQ_GEN_STOP_STRING: return "stop";
    case DSQ_GEN_STOP_EOS:    return "eos";
    case DSQ_GEN_STOP_LENGTH: return "length";
    default:                  return "";
    }
}

int dsq_gsm8k_write_items(const char *path, int overwrite, const dsq_gsm8k_set *test,
                          const dsq_gsm8k_result_item *items, size_t n, int generated,
                          const char *tail, size_t tail_len, dsq_diag *d)
{
    dsq_outfile f;
    DSQ_TRY(dsq_outfile_open(&f, path, overwrite ? DSQ_OUT_OVERWRITE : 0, d));
    int rc = DSQ_OK;
    for (size_t i = 0; i < n && rc == DSQ_OK; i++) {
        const dsq_gsm8k_result_item *it = &items[i];
        if (!it->have && it->error) {
            json_object *j = json_object_new_object();
            json_object_object_add(j, "doc_id", json_object_new_int64((int64_t)i));
            json_object_object_add(j, "question", json_object_new_string_len(test->items[i].question, (int)test->items[i].question_len));
            json_object_object_add(j, "completion", json_object_new_string(""));
            json_object_object_add(j, "error", json_object_new_string(it->error));
            size_t sl;
            const char *t = json_object_to_json_string_length(j, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &sl);
            rc = dsq_outfile_write(&f, t, sl, d);
            if (rc == DSQ_OK) rc = dsq_outfile_write(&f, "\n", 1, d);
            json_object_put(j);
            continue;
        }
        if (!items[i].have) continue;
        json_object *j = json_object_new_object();
        json_object_object_add(j, "doc_id", json_object_new_int64((int64_t)i));
        json_object_object_add(j, "question", json_object_new_string_len(test->items[i].question, (int)test->items[i].question_len));
        json_object_object_add(j, "completion", json_object_new_string_len(it->completion, (int)it->len));
        json_object_object_add(j, "strict", json_object_new_string(it->s.strict));
        json_object_object_add(j, "flexible", json_object_new_string(it->s.flexible));
        json_object_object_add(j, "gold", json_object_new_string(it->s.gold));
        json_object_object_add(j, "correct_strict", json_object_new_boolean(it->s.correct_strict));
        json_object_object_add(j, "correct_flexible", json_object_new_boolean(it->s.correct_flexible));
        if (generated) {
            json_object_object_add(j, "prompt_tokens", json_object_new_int64((int64_t)it->g.n_prompt));
            json_object_object_add(j, "gen_tokens", json_object_new_int64((int64_t)it->g.n_gen));
            json_object_object_add(j, "stop", json_object_new_string(stop_name(it->g.stop)));
            if (it->g.truncated) json_object_object_add(j, "prompt_truncated", json_object_new_boolean(1));
        }
        size_t sl;
        const char *t = json_object_to_json_string_length(j, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &sl);
        rc = dsq_outfile_write(&f, t, sl, d);
        if (rc == DSQ_OK) rc = dsq_outfile_write(&f, "\n", 1, d);
        json_object_put(j);
    }
    if (rc == DSQ_OK && tail_len) rc = dsq_outfile_write(&f, tail, tail_len, d); /* kept as the journal held them */
    if (rc == DSQ_OK) return dsq_outfile_commit(&f, d);
    dsq_outfile_abort(&f);
    return rc;
}

void dsq_gsm8k_items_free(dsq_gsm8k_result_item *items, size_t n)
{
    for (size_t i = 0; i < n && items; i++) {
        free(items[i].completion);
        free(items[i].error);
        dsq_gsm8k_score_release(&items[i].s);
    }
    free(items);
}

/* ---- against a server ---- */

typedef struct ep_ctx {
    const dsq_gsm8k_set *test;
    dsq_gsm8k_result_item *items;
    dsq_ep_journal *journal;
    const dsq_gsm8k_endpoint_opts *o;
    size_t done;
} ep_ctx;

static int stop_code(const char *finish)
{
    return !strcmp(finish, "length") ? DSQ_GEN_STOP_LENGTH : !strcmp(finish, "stop") ? DSQ_GEN_STOP_STRING : 0;
}

/* One completion arrived (calls are serialized): cut at the task's stop
 * strings as lm-eval does with an API model's output, journal it, keep it. */
static int ep_done(void *u, size_t idx, dsq_ep_completion *c)
{
    ep_ctx *e = u;
    dsq_gsm8k_result_item *it = &e->items[idx];
    dsq_diag d;
    dsq_diag_clear(&d);
    if (c->error) { /* refused by the server: that item's error, journaled so the file tells */
        dsq_ep_item ji = { .prompt_tokens = -1, .gen_tokens = -1, .error = c->error };
        if (e->journal) DSQ_TRY(dsq_ep_journal_append(e->journal, idx, &e->test->items[idx], &ji, &d));
        free(it->error);
        it->error = c->error;
        c->error = NULL;
        if (e->o->progress) e->o->progress(e->o->ctx, ++e->done);
        return 0;
    }
    c->len = dsq_gsm8k_stop_pos(c->text, c->len, dsq_gsm8k_stops, 3);
    c->text[c->len] = 0;
    dsq_ep_item ji = { .completion = c->text, .len = c->len, .prompt_tokens = c->prompt_tokens,
                       .gen_tokens = c->completion_tokens };
    snprintf(ji.finish, sizeof ji.finish, "%s", c->finish);
    if (e->journal) DSQ_TRY(dsq_ep_journal_append(e->journal, idx, &e->test->items[idx], &ji, &d));
    it->completion = c->text;
    it->len = c->len;
    c->text = NULL;
    it->g.n_prompt = c->prompt_tokens > 0 ? (size_t)c->prompt_tokens : 0;
    it->g.n_gen = c->completion_tokens > 0 ? (size_t)c->completion_tokens : 0;
    it->g.stop = stop_code(c->finish);
    it->have = 1;
    if (e->o->progress) e->o->progress(e->o->ctx, ++e->done);
    return 0;
}

int dsq_gsm8k_run_endpoint(const dsq_endpoint_opts *eo, const dsq_gsm8k_set *test, size_t n,
                           const dsq_gsm8k_endpoint_opts *o, dsq_gsm8k_result_item *items, dsq_diag *d)
{
    char *train_path = o->train ? strdup(o->train) : dsq_gsm8k_default_train(o->data);
    char **prompts = calloc(n ? n : 1, sizeof *prompts);
    size_t *pl = calloc(n ? n : 1, sizeof *pl), *todo = calloc(n ? n : 1, sizeof *todo);
    dsq_ep_item *old = calloc(n ? n : 1, sizeof *old);
    int rc = (!train_path || !prompts || !pl || !todo || !old) ? dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory")
                                                               : DSQ_OK;
    /* the local run's prompts: the same few-shot draws */
    if (rc == DSQ_OK) rc = dsq_gsm8k_prompts(test, n, train_path, o->shots, o->seed, prompts, pl, d);
    dsq_ep_journal j = { .fd = -1 };
    size_t have = 0, n_todo = 0;
    if (rc == DSQ_OK && o->journal) rc = dsq_ep_journal_open(&j, o->journal, o->restart, test, n, old, &have, d);
    for (size_t i = 0; i < n && rc == DSQ_OK; i++) {
        if (old[i].have) {
            items[i].completion = old[i].completion;
            items[i].len = old[i].len;
            old[i].completion = NULL;
            items[i].g.n_prompt = old[i].prompt_tokens > 0 ? (size_t)old[i].prompt_tokens : 0;
            items[i].g.n_gen = old[i].gen_tokens > 0 ? (size_t)old[i].gen_tokens : 0;
            items[i].g.stop = stop_code(old[i].finish);
            items[i].have = 1;
            items[i].resumed = 1;
        } else {
            todo[n_todo++] = i;
        }
    }
    if (rc == DSQ_OK && have && o->note) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s: %zu of %zu items already done, continuing", o->journal, have, n);
        o->note(o->ctx, 2, msg);
    }
    char *model = NULL;
    if (rc == DSQ_OK && n_todo) rc = dsq_ep_resolve_model(eo, &model, d);
    if (rc == DSQ_OK && n_todo) {
        ep_ctx e = { .test = test, .items = items, .journal = o->journal ? &j : NULL, .o = o, .done = 0 };
        if (o->sending) o->sending(o->ctx, n_todo, model);
        rc = dsq_ep_complete_all(eo, model, (const char *const *)prompts, pl, todo, n_todo, o->max_new,
                                 dsq_gsm8k_stops, 3, ep_done, &e, d);
    }
    if (o->journal && o->hold) *o->hold = j; /* the caller replaces the file under the lock, then closes */
    else if (o->journal) dsq_ep_journal_close(&j);
    for (size_t i = 0; i < n; i++) {
        free(prompts ? prompts[i] : NULL);
        free(old ? old[i].completion : NULL);
    }
    free(model);
    free(prompts);
    free(pl);
    free(todo);
    free(old);
    free(train_path);
    return rc;
}
