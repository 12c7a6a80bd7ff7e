/* eval_flow.c - ds-eval's commands as whole runs (eval_flow.h). */
#include "eval_flow.h"
#include "chat_run.h"
#include "dsq_file.h"
#include "gsm8k.h"
#include "gsm8k_run.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void note(const dsq_eval_events *ev, int level, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void note(const dsq_eval_events *ev, int level, const char *fmt, ...)
{
    if (!ev->note) return;
    char msg[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    ev->note(ev->ctx, level, msg);
}

static void begin(const dsq_eval_events *ev, const char *label, const char *unit, size_t total)
{
    if (ev->begin) ev->begin(ev->ctx, label, unit, total);
}

static void progress(const dsq_eval_events *ev, size_t done)
{
    if (ev->progress) ev->progress(ev->ctx, done);
}

static void end(const dsq_eval_events *ev)
{
    if (ev->end) ev->end(ev->ctx);
}

static void window_progress(void *u, size_t done, size_t total)
{
    (void)total;
    progress(u, done);
}

/* The tokenizer of the setup: --tokenizer when given, else the model's own
 * (model_tokenizer.h), with where it came from as information. */
static int load_tokenizer(const dsq_eval_setup *s, dsq_tokenizer **tok, dsq_diag *d)
{
    dsq_tok_origin from;
    char where[4096];
    const char *model = s->model.model;
    int rc = dsq_tokenizer_for_model(tok, model, s->tokenizer, &from, where, sizeof where, d);
    if (rc == DSQ_OK && from == DSQ_TOK_FROM_DSQ_META) note(&s->ev, 3, "tokenizer from the metadata of %s", where);
    else if (rc == DSQ_OK && from != DSQ_TOK_FROM_ARG) note(&s->ev, 3, "tokenizer from %s", where);
    else if (rc < 0 && (from == DSQ_TOK_FROM_DSQ_META || from == DSQ_TOK_FROM_DIR))
        note(&s->ev, 1, "pass --tokenizer to use another tokenizer");
    else if (rc == DSQ_ERR_NOT_FOUND && from == DSQ_TOK_FROM_NONE && d && model && dsq_path_exists(model)) {
        size_t l = strlen(d->msg); /* the model is there, its tokenizer is not */
        snprintf(d->msg + l, sizeof d->msg - l, "; pass --tokenizer PATH");
    }
    return rc;
}

/* Non-finite logits come from the model, not the data: name its file so
 * the message points at what to check. */
static void name_model(int rc, const char *model, dsq_diag *d)
{
    if (rc != DSQ_ERR_NONFINITE || d->path[0]) return;
    snprintf(d->path, sizeof d->path, "%s", model);
}

static void loaded_note(const dsq_eval_events *ev, const dsq_eval_model *e, double t0)
{
    char info[1024];
    dsq_model_info(e->m, info, sizeof info);
    note(ev, 3, "loaded in %.1f s: %s", now() - t0, info);
}

static int open_model(const dsq_eval_setup *s, dsq_eval_model *e, int max_batch, size_t ctx, dsq_diag *d)
{
    dsq_eval_model_opts mo = s->model;
    mo.max_batch = max_batch;
    mo.ctx = ctx;
    double t0 = now();
    DSQ_TRY(dsq_eval_model_open(e, &mo, d));
    loaded_note(&s->ev, e, t0);
    return DSQ_OK;
}

/* ---- ppl ---------------------------------------------------------------- */

int dsq_ppl_flow(const dsq_ppl_flow_opts *o, dsq_ppl_report *rep, dsq_diag *d)
{
    const dsq_eval_setup *s = &o->s;
    const dsq_eval_events *ev = &s->ev;
    memset(rep, 0, sizeof *rep);
    rep->bos = o->bos;
    rep->saved_logits = o->save_logits;
    dsq_eval_model e = { 0 };
    int32_t *tokens = NULL;
    size_t n_tok = 0, n_ctx = o->ctx ? o->ctx : 512, len = 0;
    int rc = load_tokenizer(s, &e.tok, d);
    double t0 = now();
    if (rc == DSQ_OK) rc = dsq_eval_tokenize_text(e.tok, o->data, o->bos, o->limit_tokens, &tokens, &n_tok, &len, d);
    if (rc == DSQ_OK) note(ev, 3, "%s: %zu bytes -> %zu tokens in %.2f s", o->data, len, n_tok, now() - t0);
    if (rc == DSQ_OK && o->limit_tokens && o->limit_tokens < n_tok) n_tok = (size_t)o->limit_tokens;
    /* window: BOS written over every window's first token (when the
     * tokenizer adds one); first: the text's own leading BOS only */
    rep->bos_id = rc == DSQ_OK && o->bos == DSQ_TEXT_BOS_WINDOW  ? dsq_tokenizer_adds_bos(e.tok)
                  : rc == DSQ_OK && o->bos == DSQ_TEXT_BOS_FIRST ? dsq_tokenizer_bos(e.tok)
                                                                 : -1;
    if (rc == DSQ_OK)
        rc = dsq_ppl_plan_init(&rep->plan, n_tok, n_ctx, o->bos == DSQ_TEXT_BOS_WINDOW ? rep->bos_id : -1, d);
    const dsq_ppl_plan *plan = &rep->plan;
    if (s->endpoint) {
        /* the same windows, scored from the server's prompt log-probs */
        char *model = NULL;
        t0 = now();
        if (rc == DSQ_OK) rc = dsq_ep_resolve_model(s->endpoint, &model, d);
        if (rc == DSQ_OK) {
            note(ev, 3, "%s: model '%s', %zu windows of %zu tokens, %d in flight", s->endpoint->url, model,
                 plan->n_chunks, plan->n_ctx, s->endpoint->concurrency);
            begin(ev, "ppl", "windows", plan->n_chunks);
            dsq_eval_hooks h = { .cancel = ev->cancel, .progress = window_progress, .progress_user = (void *)ev };
            rc = dsq_ep_ppl_run(s->endpoint, model, plan, tokens, &h, &rep->res, d);
            end(ev);
        }
        free(model);
        rep->bos_id = plan->bos; /* endpoint: always per-window BOS */
        rep->secs = now() - t0;
        free(tokens);
        dsq_eval_model_close(&e);
        return rc;
    }
    dsq_logp_writer w = { 0 };
    int have_w = 0;
    if (rc == DSQ_OK) rc = open_model(s, &e, 1, n_ctx, d);
    if (rc == DSQ_OK && o->save_logits) {
        rc = dsq_logp_writer_open(&w, o->save_logits, o->overwrite ? DSQ_OUT_OVERWRITE : 0, plan, tokens, e.vocab,
                                  o->logits_format, o->logits_topk, d);
        have_w = rc == DSQ_OK;
    }
    t0 = now();
    if (rc == DSQ_OK) {
        note(ev, 3, "%zu windows of %zu tokens, %zu scored per window", plan->n_chunks, n_ctx, plan->per_chunk);
        begin(ev, "ppl", "windows", plan->n_chunks);
        dsq_eval_hooks h = {
            .cancel = ev->cancel,
            .progress = window_progress,
            .progress_user = (void *)ev,
            .pool = dsq_model_pool(e.m),
        };
        rc = dsq_ppl_run(plan, tokens, e.vocab, dsq_eval_model_window, &e, have_w ? &w : NULL, &h, &rep->res, d);
        name_model(rc, s->model.model, d);
        end(ev);
    }
    rep->secs = now() - t0;
    if (have_w) {
        if (rc == DSQ_OK) rc = dsq_logp_writer_commit(&w, d);
        else dsq_logp_writer_abort(&w);
    }
    free(tokens);
    dsq_eval_model_close(&e);
    return rc;
}

/* ---- kld ---------------------------------------------------------------- */

int dsq_kld_flow(const dsq_kld_flow_opts *o, dsq_kld_report *rep, dsq_diag *d)
{
    const dsq_eval_setup *s = &o->s;
    const dsq_eval_events *ev = &s->ev;
    const dsq_endpoint_opts *ep = s->endpoint;
    memset(rep, 0, sizeof *rep);
    rep->endpoint = ep != NULL;
    rep->bos = o->bos;
    dsq_logp_reader base;
    DSQ_TRY(dsq_logp_reader_open(&base, o->base, d));
    dsq_logp_reader_plan(&base, &rep->plan);
    rep->base_topk = base.info.top_k;
    dsq_eval_model e = { 0 };
    int rc = DSQ_OK;
    if (o->data) {
        /* the base must have been computed on exactly these windows */
        rc = load_tokenizer(s, &e.tok, d);
        if (rc == DSQ_OK) rc = dsq_kld_check_base(&base, e.tok, o->data, o->bos >= 0 ? o->bos : 0, d);
    }
    char *served = NULL;
    if (rc == DSQ_OK && ep) rc = dsq_ep_resolve_model(ep, &served, d);
    else if (rc == DSQ_OK) rc = open_model(s, &e, 1, rep->plan.n_ctx, d);
    /* with the served model's tokenizer, text-keyed top_logprobs map back to ids */
    dsq_ep_vocab *vocab = NULL;
    if (rc == DSQ_OK && ep && s->tokenizer && !e.tok) rc = load_tokenizer(s, &e.tok, d);
    if (rc == DSQ_OK && ep && e.tok) rc = dsq_ep_vocab_build(&vocab, e.tok, d);
    double t0 = now();
    if (rc == DSQ_OK) {
        begin(ev, "kld", "windows", rep->plan.n_chunks);
        dsq_eval_hooks h = {
            .cancel = ev->cancel,
            .progress = window_progress,
            .progress_user = (void *)ev,
            .pool = e.m ? dsq_model_pool(e.m) : NULL,
        };
        /* served: the top-k or target-token bound of endpoint.h (a lower bound of KL) */
        rc = ep ? dsq_ep_kld_run(ep, served, &base, 0, vocab, &h, &rep->k, &rep->ki, d)
                : dsq_kld_run(&base, e.vocab, dsq_eval_model_window, &e, &h, &rep->k, d);
        if (!ep) name_model(rc, s->model.model, d);
        end(ev);
    }
    free(served);
    dsq_ep_vocab_free(vocab);
    rep->secs = now() - t0;
    dsq_logp_reader_close(&base);
    dsq_eval_model_close(&e);
    return rc;
}

/* ---- gsm8k -------------------------------------------------------------- */

typedef struct gen_ctx {
    const dsq_gsm8k_flow_opts *o;
    const dsq_eval_model *e;
    dsq_gsm8k_result_item *items;
    size_t done;
    double t0;
} gen_ctx;

static int gen_done(void *u, size_t idx, dsq_gen_result *res)
{
    gen_ctx *g = u;
    dsq_gsm8k_item_done(g->items, idx, res);
    progress(&g->o->s.ev, ++g->done);
    return 0;
}

static void on_note(void *ctx, int level, const char *msg)
{
    gen_ctx *g = ctx;
    note(&g->o->s.ev, level, "%s", msg);
}

static void on_generating(void *ctx, size_t n, size_t max_ctx)
{
    gen_ctx *g = ctx;
    const dsq_eval_events *ev = &g->o->s.ev;
    loaded_note(ev, g->e, g->t0);
    note(ev, 3, "%zu prompts, %d-shot, batch %d, context %zu", n, g->o->shots, g->o->s.model.max_batch, max_ctx);
    begin(ev, "gsm8k", "items", n);
}

static void on_sending(void *ctx, size_t n_todo, const char *model)
{
    gen_ctx *g = ctx;
    const dsq_eval_setup *s = &g->o->s;
    note(&s->ev, 3, "%s: model '%s', %zu prompts, %d-shot, %d in flight", s->endpoint->url, model, n_todo,
         g->o->shots, s->endpoint->concurrency);
    begin(&s->ev, "gsm8k", "items", n_todo);
}

static void on_item(void *ctx, size_t done)
{
    gen_ctx *g = ctx;
    progress(&g->o->s.ev, done);
}

/* Completions for items[0..n): with the model in process, or from the
 * server (the same prompts sent as text; out is the journal a rerun
 * continues from, left in hold, locked). */
static int generate(const dsq_gsm8k_flow_opts *o, dsq_eval_model *e, const dsq_gsm8k_set *test, size_t n,
                    dsq_gsm8k_result_item *items, dsq_ep_journal *hold, dsq_diag *d)
{
    const dsq_eval_setup *s = &o->s;
    gen_ctx g = { .o = o, .e = e, .items = items, .t0 = now() };
    int rc;
    if (s->endpoint) {
        dsq_gsm8k_endpoint_opts go = {
            .data = o->data,
            .train = o->train,
            .shots = o->shots,
            .seed = o->seed,
            .max_new = o->max_new,
            .journal = o->out,
            .restart = o->force,
            .note = on_note,
            .sending = on_sending,
            .progress = on_item,
            .ctx = &g,
            .hold = hold,
        };
        rc = dsq_gsm8k_run_endpoint(s->endpoint, test, n, &go, items, d);
    } else {
        dsq_gsm8k_local_opts lo = {
            .model = s->model,
            .tokenizer = s->tokenizer,
            .data = o->data,
            .train = o->train,
            .shots = o->shots,
            .seed = o->seed,
            .bos = o->bos,
            .max_new = o->max_new,
            .cancel = s->ev.cancel,
            .note = on_note,
            .generating = on_generating,
            .ctx = &g,
        };
        rc = load_tokenizer(s, &e->tok, d);
        if (rc == DSQ_OK) rc = dsq_gsm8k_run_local(e, test, n, &lo, gen_done, &g, d);
    }
    end(&s->ev);
    return rc;
}

int dsq_gsm8k_flow(const dsq_gsm8k_flow_opts *o, dsq_gsm8k_report *rep, dsq_diag *d)
{
    memset(rep, 0, sizeof *rep);
    rep->score = o->score;
    rep->journal = o->out;
    rep->shots = o->shots;
    rep->seed = o->seed;
    dsq_gsm8k_set test;
    DSQ_TRY(dsq_gsm8k_load(&test, o->data, d));
    size_t n = o->limit && o->limit < test.n ? o->limit : test.n;
    dsq_gsm8k_result_item *items = calloc(n, sizeof *items);
    dsq_gsm8k_completions comp = { 0 };
    dsq_ep_journal hold = { .fd = -1 };
    dsq_eval_model e = { 0 };
    double t0 = now();
    int rc = DSQ_OK;
    if (!items) rc = dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    else if (o->score) {
        rc = dsq_gsm8k_completions_load(&comp, o->score, test.n, d);
        if (rc == DSQ_OK) dsq_gsm8k_items_from_completions(&comp, items, n);
    } else rc = generate(o, &e, &test, n, items, &hold, d);
    rep->secs = now() - t0;
    dsq_eval_model_close(&e);
    dsq_gsm8k_completions_release(&comp);

    rep->n = n;
    if (rc == DSQ_OK) rc = dsq_gsm8k_score_items(&test, items, n, &rep->scored, &rep->strict, &rep->flexible, d);
    size_t first_refused = n;
    for (size_t i = 0; items && i < n; i++) {
        rep->resumed += (size_t)items[i].resumed;
        rep->gen_tokens += items[i].g.n_gen;
        /* the rate is of the tokens this run asked for, not those a journal held */
        rep->run_gen_tokens += items[i].resumed ? 0 : items[i].g.n_gen;
        if (items[i].error && !items[i].have && !rep->refused++) first_refused = i;
    }
    if (rc == DSQ_OK && rep->scored == 0 && rep->refused)
        rc = dsq_fail(d, DSQ_ERR_INVALID_ARG, o->s.endpoint ? o->s.endpoint->url : NULL, NULL, -1, "the server refused every item (doc %zu: %s)",
                      first_refused, items[first_refused].error);
    if (rc == DSQ_OK && rep->scored == 0)
        rc = dsq_fail(d, DSQ_ERR_DATA, o->score, NULL, -1, "no completion matches the first %zu items", n);
    /* the scored file replaces the journal it grew from (its lock still held),
     * keeping the journal's items beyond the limit */
    if (rc == DSQ_OK && o->out)
        rc = dsq_gsm8k_write_items(o->out, o->force || o->s.endpoint, &test, items, n, !o->score, hold.tail,
                                   hold.tail_len, d);
    dsq_ep_journal_close(&hold);
    if (rc == DSQ_OK && rep->refused)
        note(&o->s.ev, 0, "the server refused %zu item%s (doc %zu: %s); they count as wrong", rep->refused,
             rep->refused > 1 ? "s" : "", first_refused, items[first_refused].error);
    /* Items without a completion count as wrong: lm-eval scores every item,
     * so a partial run must not look better than the full one would. */
    if (rc == DSQ_OK && rep->scored < n)
        note(&o->s.ev, 0, "%zu of %zu items have no completion; they count as wrong", n - rep->scored, n);
    dsq_gsm8k_items_free(items, n);
    dsq_gsm8k_set_release(&test);
    return rc;
}

/* ---- gsm8k --chat ------------------------------------------------------- */

typedef struct chat_ctx {
    const dsq_gsm8k_set *set;
    dsq_chat_reply *replies;
    int samples;
    int journal; /* fd appended to as replies arrive, or -1 */
    const dsq_eval_events *ev;
    size_t done;
} chat_ctx;

static int chat_done(void *u, size_t idx, dsq_chat_reply *r)
{
    chat_ctx *c = u;
    size_t doc = idx / (size_t)c->samples;
    if (c->journal >= 0) {
        char *line = dsq_chat_record_json(doc, (int)(idx % (size_t)c->samples), &c->set->items[doc], r, NULL);
        if (!line) return DSQ_ERR_NOMEM;
        size_t n = strlen(line);
        line[n] = '\n'; /* the terminating NUL becomes the newline: one write, one line */
        ssize_t w = write(c->journal, line, n + 1);
        free(line);
        if (w != (ssize_t)(n + 1)) return DSQ_ERR_IO;
    }
    c->replies[idx] = *r;
    memset(r, 0, sizeof *r);
    progress(c->ev, ++c->done);
    return 0;
}

/* The replies still to ask for (todo[0..n_todo)), from the server or the model. */
static int chat_replies(const dsq_chat_flow_opts *o, const dsq_chat_run_opts *ro, const dsq_gsm8k_set *set,
                        const size_t *todo, size_t n_todo, chat_ctx *cc, dsq_eval_model *e, const char **tmpl_id,
                        dsq_diag *d)
{
    const dsq_eval_setup *s = &o->s;
    int rc = DSQ_OK;
    if (s->endpoint) {
        char *model = NULL;
        rc = dsq_ep_resolve_model(s->endpoint, &model, d);
        if (rc == DSQ_OK) {
            note(&s->ev, 3, "%s: model '%s', %zu requests (%s), %d in flight", s->endpoint->url, model, n_todo,
                 ro->suite->name, s->endpoint->concurrency);
            begin(&s->ev, "gsm8k chat", "replies", n_todo);
            rc = dsq_chat_run_endpoint(s->endpoint, model, ro, set, todo, n_todo, chat_done, cc, d);
            end(&s->ev);
        }
        free(model);
        return rc;
    }
    dsq_chat_model_opts mo = {
        .model = s->model,
        .tokenizer = s->tokenizer,
        .chat_template = o->chat_template,
        .cancel = s->ev.cancel,
    };
    begin(&s->ev, "gsm8k chat", "replies", n_todo);
    rc = dsq_chat_run_model(e, &mo, ro, set, todo, n_todo, chat_done, cc, tmpl_id, d);
    end(&s->ev);
    return rc;
}

int dsq_chat_flow(const dsq_chat_flow_opts *o, dsq_chat_report *rep, dsq_diag *d)
{
    const dsq_chat_suite *suite = o->suite;
    memset(rep, 0, sizeof *rep);
    dsq_gsm8k_set set;
    DSQ_TRY(dsq_gsm8k_load_fields(&set, o->data, o->qfield ? o->qfield : "question",
                                  o->afield ? o->afield : "answer", d));
    dsq_chat_run_opts ro = {
        .suite = suite,
        .kwargs_json = o->kwargs_json,
        .max_tokens = o->max_tokens ? o->max_tokens : suite->max_tokens,
        .temperature = o->has_temperature ? o->temperature : suite->temperature,
        .top_p = o->top_p,
        .samples = o->samples,
        .reasoning_parser = o->reasoning_parser,
        .extra_json = o->extra_json,
    };
    if (o->has_seed) {
        ro.has_seed = 1;
        ro.seed = o->seed;
    } else if (suite->has_seed) {
        ro.has_seed = 1;
        ro.seed = suite->seed;
    }
    size_t n = o->limit && o->limit < set.n ? o->limit : set.n, pairs = n * (size_t)o->samples;
    dsq_chat_reply *replies = calloc(pairs ? pairs : 1, sizeof *replies);
    size_t *todo = calloc(pairs ? pairs : 1, sizeof *todo), n_todo = 0, have = 0;
    int rc = DSQ_OK;
    if (!replies || !todo) rc = dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    /* out is the journal a rerun continues, locked while this run holds
     * it; a file of something else is kept */
    int jfd = -1;
    char *tail = NULL;
    size_t tail_len = 0;
    if (rc == DSQ_OK && o->out) rc = dsq_ep_journal_lock(o->out, &jfd, d);
    if (rc == DSQ_OK && o->out && o->force && ftruncate(jfd, 0) < 0)
        rc = dsq_fail_errno(d, errno, o->out, "cannot truncate");
    if (rc == DSQ_OK && o->out && !o->force)
        rc = dsq_chat_journal_load(o->out, &set, n, o->samples, replies, &have, &tail, &tail_len, d);
    struct stat ost;
    if (rc == DSQ_OK && o->out && !o->force && !have && !tail_len && stat(o->out, &ost) == 0 && ost.st_size > 0)
        rc = dsq_fail(d, DSQ_ERR_EXISTS, o->out, NULL, -1,
                      "exists and holds no reply of this run (another file? -f replaces it)");
    for (size_t i = 0; i < pairs && rc == DSQ_OK; i++)
        if (!replies[i].have) todo[n_todo++] = i;
    if (rc == DSQ_OK && have) note(&o->s.ev, 2, "%s: %zu of %zu replies already done, continuing", o->out, have, pairs);
    chat_ctx cc = { .set = &set, .replies = replies, .samples = o->samples, .journal = jfd, .ev = &o->s.ev };
    dsq_eval_model e = { 0 };
    double t0 = now();
    if (rc == DSQ_OK && n_todo) rc = chat_replies(o, &ro, &set, todo, n_todo, &cc, &e, &rep->template_id, d);
    rep->secs = now() - t0;
    dsq_eval_model_close(&e);
    /* the scored file replaces the journal under its lock, with the records beyond this run's */
    if (rc == DSQ_OK)
        rc = dsq_chat_score_all(&ro, o->think_end, &set, n, replies, o->out, tail, tail_len, &rep->sm, d);
    if (jfd >= 0) close(jfd);
    free(tail);
    size_t refused = 0, first = 0;
    for (size_t i = 0; i < pairs && replies; i++)
        if (replies[i].error && !replies[i].have && !refused++) first = i;
    if (rc == DSQ_OK && refused)
        note(&o->s.ev, 0, "the server refused %zu request%s (doc %zu: %s); they count as wrong", refused,
             refused > 1 ? "s" : "", first / (size_t)o->samples, replies[first].error);
    if (rc == DSQ_OK && rep->sm.missing)
        note(&o->s.ev, 0, "%zu of %zu replies are missing; they count as wrong", rep->sm.missing, pairs);
    rep->suite = suite->name;
    rep->lmeval = suite->kind == DSQ_SUITE_LMEVAL_COT_LLAMA;
    rep->n = n;
    rep->samples = o->samples;
    rep->temperature = ro.temperature;
    rep->max_tokens = ro.max_tokens;
    for (size_t i = 0; i < pairs && replies; i++) dsq_chat_reply_release(&replies[i]);
    free(replies);
    free(todo);
    dsq_gsm8k_set_release(&set);
    return rc;
}
