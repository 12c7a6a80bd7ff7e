/* server_engine.c - the engine thread of ds-serve.
 *
 * Requests become jobs (one per prompt) in a bounded queue. The engine owns
 * a dsq_state of `slots` sequences; each turn it drops jobs whose client
 * left, admits queued jobs into free slots (prefill, one sequence at a
 * time, which also yields the first token), then runs ONE batched decode
 * step (dsq_forward_batch_decode) over every running job. So concurrent
 * requests share each step's GEMMs instead of queueing one by one.
 *
 * Token choice and stopping mirror dsq_gsm8k_generate (gsm8k.c) step for
 * step: EOS ids end a job before being emitted, otherwise the id is
 * appended, the completion re-decoded and cut at the earliest stop string,
 * and max_tokens ends it. Greedy uses the same argmax (lowest id on ties),
 * so a greedy completion equals ds-eval's in-process one. */
#include "server_internal.h"
#include "eval_metrics.h"
#include "gsm8k.h"
#include "sample.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PREFILL_ROWS 256 /* logits rows per prefill call when the prompt's log-probs are asked */

int srv_detok(const dsq_server *s, const int32_t *ids, size_t n, char **text, size_t *len)
{
    /* as ds-eval's gen_detok: special tokens skipped, ids without a token
     * (padding rows of a larger lm_head) dropped */
    size_t tv = dsq_tokenizer_vocab_size(s->tok), k = 0;
    int32_t *keep = malloc((n ? n : 1) * sizeof *keep);
    if (!keep) return DSQ_ERR_NOMEM;
    for (size_t i = 0; i < n; i++)
        if (ids[i] >= 0 && (size_t)ids[i] < tv && dsq_tokenizer_piece(s->tok, ids[i])) keep[k++] = ids[i];
    int rc = dsq_tokenizer_decode(s->tok, keep, k, 1, text, len);
    free(keep);
    return rc;
}

static void request_free(srv_request *r)
{
    for (int i = 0; i < r->n_jobs && r->jobs; i++) {
        srv_job *j = &r->jobs[i];
        free(j->prompt); free(j->gen); free(j->gen_lp); free(j->gen_top_id); free(j->gen_top_lp);
        free(j->prompt_lp); free(j->prompt_rank); free(j->prompt_top_id); free(j->prompt_top_lp);
        free(j->text); free(j->pub_text);
    }
    free(r->jobs);
    dsq_srv_params_release(&r->p);
    free(r);
}

void srv_request_unref_locked(srv_request *r)
{
    if (--r->refs == 0) request_free(r);
}

int srv_submit(dsq_server *s, srv_request *r)
{
    pthread_mutex_lock(&s->mu);
    int rc = DSQ_OK;
    int free_slots = s->o.slots - s->n_active;
    if (s->stopping) rc = DSQ_ERR_STATE;
    else if (s->q_len + r->n_jobs > s->o.queue + free_slots) rc = DSQ_ERR_NOMEM;
    else {
        for (int i = 0; i < r->n_jobs; i++) {
            r->jobs[i].slot = -1;
            s->queue[(s->q_head + s->q_len++) % s->q_cap] = &r->jobs[i];
        }
        r->refs += r->n_jobs;
        s->stats.requests++;
        pthread_cond_signal(&s->work_cv);
    }
    if (rc == DSQ_ERR_NOMEM) s->stats.rejected_busy++;
    pthread_mutex_unlock(&s->mu);
    return rc;
}

/* ---- token choice: sample.h, the sampler ds-eval's in-process generation uses ---- */

static int32_t choose(const dsq_srv_params *p, uint64_t *rng, const float *row, size_t vocab, dsq_sample_cand *scratch)
{
    const dsq_sample_params sp = { .temperature = p->temperature, .top_p = p->top_p };
    return dsq_sample_token(&sp, rng, row, vocab, scratch);
}

/* The k most likely ids of a row with their log-probs (descending, ties by id). */
static void top_k(const float *row, size_t vocab, int k, int32_t *ids, double *lps)
{
    double lse = dsq_log_sum_exp(row, vocab);
    int have = 0;
    for (size_t i = 0; i < vocab; i++) {
        float v = row[i];
        if (have == k && !(v > row[ids[k - 1]])) continue;
        int at = have < k ? have++ : k - 1;
        while (at > 0 && v > row[ids[at - 1]]) { ids[at] = ids[at - 1]; at--; }
        ids[at] = (int32_t)i;
    }
    for (int i = 0; i < have; i++) lps[i] = (double)row[ids[i]] - lse;
}

/* vLLM's rank of a token (vllm/v1/sample/ops/logprobs.py
 * batched_count_greater_than: the count of log-probs >= the token's, itself
 * included), so tied tokens share the worse rank. */
static int64_t rank_of(const float *row, size_t vocab, int32_t t)
{
    int64_t r = 0;
    for (size_t i = 0; i < vocab; i++) r += row[i] >= row[t];
    return r;
}

/* ---- job life ------------------------------------------------------------------ */

static int is_eos(const dsq_server *s, int32_t t)
{
    for (size_t i = 0; i < s->n_eos; i++) if (s->eos[i] == t) return 1;
    return 0;
}

static size_t max_stop_len(const dsq_srv_params *p)
{
    size_t m = 0;
    for (int i = 0; i < p->n_stop; i++) { size_t l = strlen(p->stop[i]); if (l > m) m = l; }
    return m;
}

static void finish(dsq_server *s, srv_job *j, int how, const char *err)
{
    pthread_mutex_lock(&s->mu);
    if (err) snprintf(j->err, sizeof j->err, "%s", err);
    j->finished = how;
    j->req->n_finished++;
    if (j->slot >= 0) { s->slot_job[j->slot] = NULL; s->n_active--; }
    if (how == SRV_FIN_ERROR && j->req->cancelled) s->stats.cancelled++;
    s->stats.gen_tokens += j->n_gen;
    s->stats.prompt_tokens += j->n_prompt;
    if (j->req->n_finished == j->req->n_jobs && how != SRV_FIN_ERROR) s->stats.completed++;
    srv_request_unref_locked(j->req);
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

size_t dsq_srv_stream_safe_len(const char *text, size_t len, size_t hold)
{
    size_t n = hold == 0 ? len : len > hold - 1 ? len - (hold - 1) : 0;
    /* never half a character: the text is UTF-8, so a cut inside one lands
     * on a continuation byte; back up to the character's first byte */
    while (n > 0 && n < len && ((unsigned char)text[n] & 0xC0) == 0x80) n--;
    while (n >= 3 && !memcmp(text + n - 3, "\xef\xbf\xbd", 3)) n -= 3;
    return n;
}

/* Publish what can no longer change for streaming: the text up to
 * dsq_srv_stream_safe_len, and every generated token (its log-probs go out
 * with the next event even while its text is held back, as vLLM streams
 * them). */
static void publish(dsq_server *s, srv_job *j)
{
    size_t n = dsq_srv_stream_safe_len(j->text, j->len, max_stop_len(&j->req->p));
    char *c = NULL;
    if (n > j->pub_len && (c = malloc(n + 1))) {
        memcpy(c, j->text, n);
        c[n] = 0;
    }
    pthread_mutex_lock(&s->mu);
    if (c) {
        free(j->pub_text);
        j->pub_text = c;
        j->pub_len = n;
    }
    j->pub_ntok = j->n_gen;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/* Decode the generated ids into j->text. */
static int refresh_text(dsq_server *s, srv_job *j)
{
    char *txt = NULL;
    size_t n = 0;
    if (srv_detok(s, j->gen, j->n_gen, &txt, &n) < 0) {
        free(txt);
        finish(s, j, SRV_FIN_ERROR, "cannot decode generated tokens");
        return -1;
    }
    free(j->text);
    j->text = txt;
    j->len = n;
    return 0;
}

/* Take token t chosen from row; returns 1 when the job finished. Without
 * stop strings or streaming the text is decoded once at the end (the
 * per-step decode is what stop strings need, as in gsm8k.c). */
static int accept(dsq_server *s, srv_job *j, int32_t t, const float *row)
{
    const dsq_srv_params *p = &j->req->p;
    int track = p->n_stop > 0 || p->stream;
    if (!p->ignore_eos && is_eos(s, t)) {
        if (!track && refresh_text(s, j) < 0) return 1;
        finish(s, j, SRV_FIN_STOP, NULL);
        return 1;
    }
    if (p->logprobs >= 0) {
        j->gen_lp[j->n_gen] = -dsq_token_nll(row, s->vocab, t);
        if (j->gen_k)
            top_k(row, s->vocab, (int)j->gen_k, j->gen_top_id + j->n_gen * j->gen_k, j->gen_top_lp + j->n_gen * j->gen_k);
    }
    j->gen[j->n_gen++] = t;
    j->next = t;
    if (track) {
        if (refresh_text(s, j) < 0) return 1;
        size_t cut = dsq_gsm8k_stop_pos(j->text, j->len, (const char *const *)p->stop, (size_t)p->n_stop);
        if (cut < j->len) {
            j->len = cut;
            j->text[cut] = 0;
            finish(s, j, SRV_FIN_STOP, NULL);
            return 1;
        }
    }
    if ((int64_t)j->n_gen >= p->max_tokens) {
        if (!track && refresh_text(s, j) < 0) return 1;
        finish(s, j, SRV_FIN_LENGTH, NULL);
        return 1;
    }
    if (p->stream) publish(s, j);
    return 0;
}

static int alloc_job(dsq_server *s, srv_job *j)
{
    const dsq_srv_params *p = &j->req->p;
    /* a model has no more alternatives than its vocabulary */
    size_t mt = (size_t)p->max_tokens + 1, k = p->logprobs > 0 ? (size_t)p->logprobs : 0;
    if (k > s->vocab) k = s->vocab;
    j->gen_k = k;
    j->gen = malloc(mt * sizeof *j->gen);
    j->gen_lp = malloc(mt * sizeof *j->gen_lp);
    j->gen_top_id = malloc((mt * k + 1) * sizeof *j->gen_top_id);
    j->gen_top_lp = malloc((mt * k + 1) * sizeof *j->gen_top_lp);
    if (srv_scores_prompt(p)) {
        size_t pk = p->echo && p->logprobs > 0 ? (size_t)p->logprobs : 0;
        if (p->prompt_logprobs > 0 && (size_t)p->prompt_logprobs > pk) pk = (size_t)p->prompt_logprobs;
        if (pk > s->vocab) pk = s->vocab;
        j->prompt_k = pk;
        j->prompt_lp = calloc(j->n_prompt, sizeof *j->prompt_lp);
        j->prompt_rank = calloc(j->n_prompt, sizeof *j->prompt_rank);
        j->prompt_top_id = calloc(j->n_prompt * pk + 1, sizeof *j->prompt_top_id);
        j->prompt_top_lp = calloc(j->n_prompt * pk + 1, sizeof *j->prompt_top_lp);
        if (!j->prompt_lp || !j->prompt_rank || !j->prompt_top_id || !j->prompt_top_lp) return DSQ_ERR_NOMEM;
    }
    return j->gen && j->gen_lp && j->gen_top_id && j->gen_top_lp ? DSQ_OK : DSQ_ERR_NOMEM;
}

/* Prefill job j into its slot; row receives the logits after the last
 * prompt token. With echo + logprobs every prompt position is scored
 * (logits in PREFILL_ROWS chunks so memory stays bounded). */
static int prefill(dsq_server *s, srv_job *j, float *row, float *rows, dsq_diag *d)
{
    const dsq_srv_params *p = &j->req->p;
    dsq_state_reset(s->st, j->slot);
    if (!srv_scores_prompt(p))
        return dsq_forward(s->m, s->st, j->slot, j->prompt, (int)j->n_prompt, row, DSQ_FWD_LAST_LOGITS, d);
    size_t k = j->prompt_k;
    for (size_t at = 0; at < j->n_prompt; at += PREFILL_ROWS) {
        size_t n = j->n_prompt - at < PREFILL_ROWS ? j->n_prompt - at : PREFILL_ROWS;
        DSQ_TRY(dsq_forward(s->m, s->st, j->slot, j->prompt + at, (int)n, rows, 0, d));
        for (size_t r = 0; r < n; r++) {
            size_t pos = at + r + 1; /* row r predicts prompt[pos] */
            const float *x = rows + r * s->vocab;
            if (pos < j->n_prompt) {
                j->prompt_lp[pos] = -dsq_token_nll(x, s->vocab, j->prompt[pos]);
                j->prompt_rank[pos] = rank_of(x, s->vocab, j->prompt[pos]);
                if (k) top_k(x, s->vocab, (int)k, j->prompt_top_id + pos * k, j->prompt_top_lp + pos * k);
            } else {
                memcpy(row, x, s->vocab * sizeof *row);
            }
        }
    }
    return DSQ_OK;
}

static void *engine_main(void *arg)
{
    dsq_server *s = arg;
    int ns = s->o.slots;
    size_t V = s->vocab;
    float *logits = malloc((size_t)ns * V * sizeof *logits);
    float *rows = malloc((size_t)PREFILL_ROWS * V * sizeof *rows);
    dsq_sample_cand *scratch = malloc(V * sizeof *scratch);
    int *ids = malloc((size_t)ns * sizeof *ids);
    int32_t *toks = malloc((size_t)ns * sizeof *toks);
    srv_job **admit = malloc((size_t)ns * sizeof *admit), **run = malloc((size_t)ns * sizeof *run);
    int oom = !logits || !rows || !scratch || !ids || !toks || !admit || !run;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        /* jobs whose client left (or the server is quitting) free their slot */
        for (int i = 0; i < ns; i++) {
            srv_job *j = s->slot_job[i];
            if (j && (j->req->cancelled || s->quit)) {
                pthread_mutex_unlock(&s->mu);
                finish(s, j, SRV_FIN_ERROR, "cancelled");
                pthread_mutex_lock(&s->mu);
            }
        }
        int na = 0;
        for (int i = 0; i < ns && s->q_len; i++) {
            if (s->slot_job[i]) continue;
            srv_job *j = s->queue[s->q_head];
            s->q_head = (s->q_head + 1) % s->q_cap;
            s->q_len--;
            if (j->req->cancelled || s->quit || oom) {
                pthread_mutex_unlock(&s->mu);
                finish(s, j, SRV_FIN_ERROR, oom ? "out of memory" : "cancelled");
                pthread_mutex_lock(&s->mu);
                i--; /* the slot is still free */
                continue;
            }
            j->slot = i;
            s->slot_job[i] = j;
            s->n_active++;
            admit[na++] = j;
        }
        if (na == 0 && s->n_active == 0) {
            if (s->quit && s->q_len == 0) break;
            pthread_cond_wait(&s->work_cv, &s->mu);
            continue;
        }
        pthread_mutex_unlock(&s->mu);

        dsq_diag d;
        for (int a = 0; a < na; a++) {
            srv_job *j = admit[a];
            dsq_diag_clear(&d);
            int rc = alloc_job(s, j);
            if (rc == DSQ_OK) rc = prefill(s, j, logits, rows, &d);
            if (rc < 0) { finish(s, j, SRV_FIN_ERROR, d.msg[0] ? d.msg : dsq_strerror(rc)); continue; }
            if (j->req->p.max_tokens == 0) { finish(s, j, SRV_FIN_LENGTH, NULL); continue; }
            accept(s, j, choose(&j->req->p, &j->rng, logits, V, scratch), logits);
        }
        int n = 0;
        for (int i = 0; i < ns; i++) {
            srv_job *j = s->slot_job[i]; /* only this thread writes slot_job */
            if (j && j->gen && !j->finished) { run[n] = j; ids[n] = i; toks[n] = j->next; n++; }
        }
        if (n > 0) {
            dsq_diag_clear(&d);
            int rc = dsq_forward_batch_decode(s->m, s->st, toks, ids, n, logits, &d);
            pthread_mutex_lock(&s->mu);
            s->stats.decode_steps++;
            s->stats.decode_rows += (uint64_t)n;
            pthread_mutex_unlock(&s->mu);
            for (int k = 0; k < n; k++) {
                const float *row = logits + (size_t)k * V;
                if (rc < 0) finish(s, run[k], SRV_FIN_ERROR, d.msg[0] ? d.msg : dsq_strerror(rc));
                else accept(s, run[k], choose(&run[k]->req->p, &run[k]->rng, row, V, scratch), row);
            }
        }
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    free(logits); free(rows); free(scratch); free(ids); free(toks); free(admit); free(run);
    return NULL;
}

int srv_engine_start(dsq_server *s, dsq_diag *d)
{
    s->q_cap = s->o.queue + s->o.slots; /* waiting jobs + those about to take a free slot */
    s->queue = calloc((size_t)s->q_cap, sizeof *s->queue);
    s->slot_job = calloc((size_t)s->o.slots, sizeof *s->slot_job);
    if (!s->queue || !s->slot_job) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    if (pthread_create(&s->engine, NULL, engine_main, s))
        return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "cannot start the engine thread");
    s->engine_started = 1;
    return DSQ_OK;
}

void srv_engine_stop(dsq_server *s)
{
    if (!s->engine_started) return;
    pthread_mutex_lock(&s->mu);
    s->quit = 1;
    pthread_cond_broadcast(&s->work_cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->engine, NULL);
    s->engine_started = 0;
}
