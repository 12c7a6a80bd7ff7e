/* chat_run.c - chat replies from a server or in process (see chat_run.h). */
#include "chat_run.h"
#include "chat_reasoning.h"
#include "chat_template.h"
#include "dsq_file.h"
#include "gsm8k_run.h"
#include "http_client.h"

#include <json-c/json.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void dsq_chat_reply_release(dsq_chat_reply *r)
{
    if (!r) return;
    free(r->content);
    free(r->reasoning);
    free(r->error);
    memset(r, 0, sizeof *r);
}

char *dsq_chat_request_json(const dsq_chat_run_opts *o, const char *model, const char *messages_json,
                            int sample)
{
    json_object *j = json_object_new_object();
    json_object_object_add(j, "model", json_object_new_string(model));
    json_object_object_add(j, "messages", json_tokener_parse(messages_json));
    json_object_object_add(j, "max_tokens", json_object_new_int64(o->max_tokens));
    json_object_object_add(j, "temperature", json_object_new_double(o->temperature));
    if (o->top_p > 0) json_object_object_add(j, "top_p", json_object_new_double(o->top_p));
    if (o->has_seed) json_object_object_add(j, "seed", json_object_new_int64((int64_t)(o->seed + (uint64_t)sample)));
    if (o->suite->n_stops) {
        json_object *st = json_object_new_array();
        for (size_t i = 0; i < o->suite->n_stops; i++) json_object_array_add(st, json_object_new_string(o->suite->stops[i]));
        json_object_object_add(j, "stop", st);
    }
    if (o->kwargs_json) json_object_object_add(j, "chat_template_kwargs", json_tokener_parse(o->kwargs_json));
    json_object_object_add(j, "stream", json_object_new_boolean(0));
    json_object *x = o->extra_json ? json_tokener_parse(o->extra_json) : NULL;
    if (x && json_object_is_type(x, json_type_object)) {
        json_object_object_foreach(x, k, v) json_object_object_add(j, k, json_object_get(v));
    }
    if (x) json_object_put(x);
    const char *t = json_object_to_json_string_ext(j, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
    char *s = t ? strdup(t) : NULL;
    json_object_put(j);
    return s;
}

static int opt_str(json_object *m, const char *key, char **out, size_t *len, dsq_diag *d)
{
    json_object *v = NULL;
    *out = NULL;
    *len = 0;
    if (!json_object_object_get_ex(m, key, &v) || !v || json_object_is_type(v, json_type_null)) return 0;
    if (!json_object_is_type(v, json_type_string))
        return dsq_fail(d, DSQ_ERR_JSON, NULL, NULL, -1, "chat completion: message.%s is not a string", key);
    *len = (size_t)json_object_get_string_len(v);
    *out = malloc(*len + 1);
    if (!*out) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    memcpy(*out, json_object_get_string(v), *len);
    (*out)[*len] = 0;
    return 1;
}

int dsq_chat_parse_reply(const char *body, size_t len, dsq_chat_reply *r, dsq_diag *d)
{
    memset(r, 0, sizeof *r);
    r->prompt_tokens = r->completion_tokens = -1;
    json_tokener *tk = json_tokener_new_ex(64);
    json_object *j = tk && len <= INT32_MAX ? json_tokener_parse_ex(tk, body, (int)len) : NULL;
    json_tokener_free(tk);
    json_object *ch, *c0 = NULL, *m = NULL, *v;
    int rc = DSQ_OK;
    if (!j || !json_object_object_get_ex(j, "choices", &ch) || !json_object_is_type(ch, json_type_array) ||
        json_object_array_length(ch) < 1 || !(c0 = json_object_array_get_idx(ch, 0)) ||
        !json_object_object_get_ex(c0, "message", &m) || !json_object_is_type(m, json_type_object)) {
        rc = dsq_fail(d, DSQ_ERR_JSON, NULL, NULL, -1, "chat completion: no choices[0].message");
    }
    if (rc == DSQ_OK) rc = opt_str(m, "content", &r->content, &r->clen, d);
    if (rc >= 0) {
        /* vLLM: reasoning_content (newer releases also "reasoning"), as AISBench reads them */
        rc = opt_str(m, "reasoning_content", &r->reasoning, &r->rlen, d);
        if (rc == 0) rc = opt_str(m, "reasoning", &r->reasoning, &r->rlen, d);
    }
    if (rc >= 0) {
        rc = DSQ_OK;
        if (json_object_object_get_ex(c0, "finish_reason", &v) && json_object_is_type(v, json_type_string))
            snprintf(r->finish, sizeof r->finish, "%s", json_object_get_string(v));
        json_object *u;
        if (json_object_object_get_ex(j, "usage", &u) && json_object_is_type(u, json_type_object)) {
            if (json_object_object_get_ex(u, "prompt_tokens", &v) && json_object_is_type(v, json_type_int))
                r->prompt_tokens = json_object_get_int64(v);
            if (json_object_object_get_ex(u, "completion_tokens", &v) && json_object_is_type(v, json_type_int))
                r->completion_tokens = json_object_get_int64(v);
        }
        r->have = 1;
    }
    if (j) json_object_put(j);
    if (rc < 0) dsq_chat_reply_release(r);
    return rc;
}

/* ---- against a server --------------------------------------------------------- */

typedef struct ep_run {
    const dsq_endpoint_opts *eo;
    const char *model;
    const dsq_chat_run_opts *o;
    const dsq_gsm8k_set *set;
    const size_t *todo;
    size_t n_todo, next;
    dsq_chat_reply_fn done;
    void *user;
    pthread_mutex_t mu;
    int rc;
    dsq_diag d;
} ep_run;

static void set_err(ep_run *e, int rc, const dsq_diag *d)
{
    pthread_mutex_lock(&e->mu);
    if (e->rc == DSQ_OK) {
        e->rc = rc;
        if (d) e->d = *d;
    }
    pthread_mutex_unlock(&e->mu);
}

static void *ep_worker(void *arg)
{
    ep_run *e = arg;
    dsq_diag d;
    dsq_diag_clear(&d);
    dsq_http *h = NULL;
    dsq_http_opts ho = { .base_url = e->eo->url, .api_key = e->eo->api_key,
                         .timeout_s = e->eo->timeout_s > 0 ? e->eo->timeout_s : 600,
                         .retries = e->eo->retries, .backoff_s = 0.5, .cancel = e->eo->cancel,
                         .permanent = dsq_ep_permanent_5xx };
    int rc = dsq_http_create(&h, &ho, &d);
    if (rc < 0) { set_err(e, rc, &d); return NULL; }
    for (;;) {
        pthread_mutex_lock(&e->mu);
        size_t k = e->next < e->n_todo && e->rc == DSQ_OK ? e->next++ : (size_t)-1;
        pthread_mutex_unlock(&e->mu);
        if (k == (size_t)-1) break;
        size_t idx = e->todo[k], item = idx / (size_t)e->o->samples;
        int sample = (int)(idx % (size_t)e->o->samples);
        const dsq_gsm8k_item *it = &e->set->items[item];
        char *msgs = NULL, *body = NULL, *resp = NULL;
        size_t rl = 0;
        long st = 0;
        rc = dsq_chat_suite_messages(e->o->suite, it->question, it->question_len, &msgs, &d);
        if (rc == DSQ_OK && !(body = dsq_chat_request_json(e->o, e->model, msgs, sample)))
            rc = dsq_fail(&d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
        if (rc == DSQ_OK) rc = dsq_http_call(h, "/chat/completions", body, strlen(body), &st, &resp, &rl, &d);
        dsq_chat_reply r = { 0 };
        int refused = 0;
        if (rc == DSQ_OK && st != 200) {
            char msg[300], why[340];
            dsq_ep_error_text(resp, rl, msg, sizeof msg);
            snprintf(why, sizeof why, "HTTP %ld: %s", st, msg);
            if (dsq_ep_item_refusal(st, why)) { /* this request alone is over the server's context: its error */
                r.prompt_tokens = r.completion_tokens = -1;
                if (!(r.error = strdup(why))) rc = dsq_fail(&d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
                refused = 1;
            } else {
                rc = dsq_fail(&d, st >= 400 && st < 500 ? DSQ_ERR_INVALID_ARG : DSQ_ERR_IO, e->eo->url, NULL, -1,
                              "item %zu: /chat/completions HTTP %ld: %s", item, st, msg);
            }
        }
        if (rc == DSQ_OK && !refused)
            rc = dsq_ep_not_openai(e->eo, "/chat/completions", dsq_chat_parse_reply(resp, rl, &r, &d), &d);
        if (rc == DSQ_OK) {
            pthread_mutex_lock(&e->mu);
            int crc = e->rc == DSQ_OK ? e->done(e->user, idx, &r) : DSQ_OK;
            pthread_mutex_unlock(&e->mu);
            dsq_chat_reply_release(&r);
            if (crc < 0) rc = crc;
        }
        free(msgs);
        free(body);
        free(resp);
        if (rc < 0) { set_err(e, rc, &d); break; }
    }
    dsq_http_free(h);
    return NULL;
}

int dsq_chat_run_endpoint(const dsq_endpoint_opts *eo, const char *model, const dsq_chat_run_opts *o,
                          const dsq_gsm8k_set *set, const size_t *todo, size_t n_todo,
                          dsq_chat_reply_fn done, void *user, dsq_diag *d)
{
    ep_run e = { .eo = eo, .model = model, .o = o, .set = set, .todo = todo, .n_todo = n_todo,
                 .done = done, .user = user };
    dsq_diag_clear(&e.d);
    pthread_mutex_init(&e.mu, NULL);
    int nt = eo->concurrency > 0 ? eo->concurrency : 1;
    if ((size_t)nt > n_todo) nt = n_todo ? (int)n_todo : 1;
    pthread_t *th = calloc((size_t)nt, sizeof *th);
    if (!th) { pthread_mutex_destroy(&e.mu); return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory"); }
    int started = 0;
    for (int i = 0; i < nt; i++) {
        if (pthread_create(&th[i], NULL, ep_worker, &e) != 0) break;
        started++;
    }
    if (!started) ep_worker(&e);
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    free(th);
    pthread_mutex_destroy(&e.mu);
    if (e.rc < 0) {
        if (d && d->status == 0) *d = e.d;
        return e.rc;
    }
    return DSQ_OK;
}

/* ---- in process ----------------------------------------------------------------- */

typedef struct local_ctx {
    const dsq_chat_run_opts *o;
    const size_t *todo;
    int parser;
    dsq_chat_reply_fn done;
    void *user;
} local_ctx;

static int local_done(void *u, size_t k, dsq_gen_result *g)
{
    local_ctx *c = u;
    dsq_chat_reply r;
    memset(&r, 0, sizeof r);
    const char *rs, *cs;
    size_t rn, cn;
    int hr, hc;
    dsq_reasoning_split(c->parser, g->text ? g->text : "", g->len, &rs, &rn, &hr, &cs, &cn, &hc);
    if (hc && !(r.content = strndup(cs, cn))) return DSQ_ERR_NOMEM;
    if (hr && !(r.reasoning = strndup(rs, rn))) { free(r.content); return DSQ_ERR_NOMEM; }
    r.clen = hc ? cn : 0;
    r.rlen = hr ? rn : 0;
    snprintf(r.finish, sizeof r.finish, "%s", g->stop == DSQ_GEN_STOP_LENGTH ? "length" : "stop");
    r.prompt_tokens = (int64_t)g->n_prompt;
    r.completion_tokens = (int64_t)g->n_gen;
    r.have = 1;
    int rc = c->done(c->user, c->todo[k], &r);
    dsq_chat_reply_release(&r);
    return rc;
}

int dsq_chat_run_local(const dsq_gen_ops *ops, size_t max_ctx, const dsq_tokenizer *tok,
                       const dsq_chat_template *t, const int32_t *eos, size_t n_eos,
                       const dsq_chat_run_opts *o, const dsq_gsm8k_set *set, const size_t *todo,
                       size_t n_todo, volatile int *cancel, dsq_chat_reply_fn done, void *user,
                       dsq_diag *d)
{
    if (o->extra_json)
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1,
                        "--generation-kwargs are sent to a server: give --endpoint");
    if ((size_t)o->max_tokens >= max_ctx || o->max_tokens < 1)
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1,
                        "context %zu leaves no room for %lld new tokens (raise --ctx or lower --max-tokens)",
                        max_ctx, (long long)o->max_tokens);
    dsq_chat_opts co = { .add_generation_prompt = 1 };
    json_object *kw = o->kwargs_json ? json_tokener_parse(o->kwargs_json) : NULL;
    int rc = dsq_chat_kwargs_from_json(kw, &co, d);
    if (kw) json_object_put(kw);
    if (rc < 0) return rc;
    co.add_generation_prompt = 1;
    int32_t **prompts = calloc(n_todo ? n_todo : 1, sizeof *prompts);
    size_t *np = calloc(n_todo ? n_todo : 1, sizeof *np);
    if (!prompts || !np) rc = dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    for (size_t k = 0; k < n_todo && rc == DSQ_OK; k++) {
        const dsq_gsm8k_item *it = &set->items[todo[k] / (size_t)o->samples];
        char *mj = NULL, *arena = NULL, *text = NULL;
        size_t n = 0, tl = 0;
        dsq_chat_msg *m = NULL;
        json_object *arr = NULL;
        rc = dsq_chat_suite_messages(o->suite, it->question, it->question_len, &mj, d);
        if (rc == DSQ_OK && !(arr = json_tokener_parse(mj))) rc = dsq_fail(d, DSQ_ERR_INTERNAL, NULL, NULL, -1, "messages");
        if (rc == DSQ_OK) rc = dsq_chat_messages_from_json(arr, &m, &n, &arena, d);
        if (rc == DSQ_OK) rc = dsq_chat_render(t, m, n, &co, &text, &tl, d);
        if (rc == DSQ_OK) rc = dsq_tokenizer_encode_ex(tok, text, tl, DSQ_TOK_PARSE_SPECIAL, &prompts[k], &np[k], d);
        for (size_t i = 0; rc == DSQ_OK && i < np[k]; i++)
            if (prompts[k][i] < 0 || (size_t)prompts[k][i] >= ops->vocab)
                rc = dsq_fail(d, DSQ_ERR_DATA, NULL, NULL, -1, "item %zu: token id %d beyond the model's %zu logits",
                              todo[k] / (size_t)o->samples, (int)prompts[k][i], ops->vocab);
        if (rc == DSQ_OK && np[k] + (size_t)o->max_tokens > max_ctx)
            rc = dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1,
                          "item %zu: the prompt has %zu tokens; with %lld new ones it exceeds the context %zu",
                          todo[k] / (size_t)o->samples, np[k], (long long)o->max_tokens, max_ctx);
        free(mj);
        free(arena);
        free(text);
        free(m);
        if (arr) json_object_put(arr);
    }
    if (rc == DSQ_OK) {
        local_ctx c = { .o = o, .todo = todo, .parser = dsq_reasoning_parser_for(o->reasoning_parser, co.thinking || co.enable_thinking),
                        .done = done, .user = user };
        /* sampling: reply s of an item draws from seed + s, the stream
         * ds-serve seeds for a request sent with that seed (the endpoint
         * path sends seed + s), so both give the same replies */
        uint64_t *seeds = malloc((n_todo ? n_todo : 1) * sizeof *seeds);
        if (!seeds) rc = dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
        for (size_t k = 0; seeds && k < n_todo; k++)
            seeds[k] = (o->has_seed ? o->seed : 0) + (uint64_t)(todo[k] % (size_t)o->samples);
        dsq_gen_opts go = { .max_new_tokens = (size_t)o->max_tokens, .max_ctx = max_ctx, .stops = o->suite->stops,
                            .n_stops = o->suite->n_stops, .eos = eos, .n_eos = n_eos, .cancel = cancel,
                            .sample = { .temperature = o->temperature, .top_p = o->top_p > 0 ? o->top_p : 1 },
                            .seeds = seeds };
        if (rc == DSQ_OK)
            rc = dsq_gsm8k_generate(ops, &go, (const int32_t *const *)prompts, np, n_todo, local_done, &c, d);
        free(seeds);
    }
    for (size_t k = 0; k < n_todo && prompts; k++) free(prompts[k]);
    free(prompts);
    free(np);
    return rc;
}

int dsq_chat_run_model(dsq_eval_model *r, const dsq_chat_model_opts *mo, const dsq_chat_run_opts *o,
                       const dsq_gsm8k_set *set, const size_t *todo, size_t n_todo, dsq_chat_reply_fn done,
                       void *user, const char **template_id, dsq_diag *d)
{
    dsq_chat_template *t = NULL;
    *template_id = NULL;
    int rc = r->tok ? DSQ_OK : dsq_tokenizer_for_model(&r->tok, mo->model.model, mo->tokenizer, NULL, NULL, 0, d);
    if (rc == DSQ_OK) rc = dsq_chat_template_for_model(&t, mo->model.model, mo->tokenizer, mo->chat_template, d);
    if (rc == DSQ_OK) *template_id = dsq_chat_template_id(t); /* a static string */
    if (rc == DSQ_OK) rc = dsq_eval_model_open(r, &mo->model, d);
    if (rc == DSQ_OK) {
        int32_t eos[1 + DSQ_CFG_MAX_EOS];
        size_t n_eos = dsq_eval_eos_ids(r, eos, sizeof eos / sizeof eos[0]);
        dsq_gen_ops ops;
        dsq_eval_gen_ops(r, mo->model.max_batch, &ops);
        rc = dsq_chat_run_local(&ops, (size_t)dsq_state_max_ctx(r->st), r->tok, t, eos, n_eos, o, set, todo, n_todo,
                                mo->cancel, done, user, d);
    }
    dsq_chat_template_free(t);
    return rc;
}

/* ---- journal, scores, summary ---------------------------------------------------- */

char *dsq_chat_record_json(size_t doc, int sample, const dsq_gsm8k_item *it, const dsq_chat_reply *r,
                           const dsq_chat_score *sc)
{
    json_object *j = json_object_new_object();
    json_object_object_add(j, "doc_id", json_object_new_int64((int64_t)doc));
    json_object_object_add(j, "sample", json_object_new_int(sample));
    json_object_object_add(j, "question", json_object_new_string_len(it->question, (int)it->question_len));
    json_object_object_add(j, "content", r->content ? json_object_new_string_len(r->content, (int)r->clen) : NULL);
    json_object_object_add(j, "reasoning_content", r->reasoning ? json_object_new_string_len(r->reasoning, (int)r->rlen) : NULL);
    json_object_object_add(j, "reasoning_chars", json_object_new_int64(r->reasoning ? (int64_t)r->rlen : 0));
    json_object_object_add(j, "finish", json_object_new_string(r->finish));
    json_object_object_add(j, "prompt_tokens", json_object_new_int64(r->prompt_tokens));
    json_object_object_add(j, "gen_tokens", json_object_new_int64(r->completion_tokens));
    if (r->error) json_object_object_add(j, "error", json_object_new_string(r->error));
    if (sc) {
        json_object_object_add(j, "answer", json_object_new_string(sc->answer ? sc->answer : ""));
        if (sc->flexible) json_object_object_add(j, "flexible", json_object_new_string(sc->flexible));
        json_object_object_add(j, "correct", json_object_new_boolean(sc->correct));
        if (sc->flexible) json_object_object_add(j, "correct_flexible", json_object_new_boolean(sc->correct_flexible));
    }
    const char *t = json_object_to_json_string_ext(j, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
    char *s = t ? strdup(t) : NULL;
    json_object_put(j);
    return s;
}

/* One complete JSON object in [p, p + n), or NULL. */
static json_object *parse_line(const char *p, size_t n)
{
    json_tokener *tk = json_tokener_new_ex(64);
    if (!tk) return NULL;
    json_object *j = json_tokener_parse_ex(tk, p, (int)n);
    int ok = j && json_tokener_get_error(tk) == json_tokener_success && json_object_is_type(j, json_type_object);
    json_tokener_free(tk);
    if (!ok && j) { json_object_put(j); j = NULL; }
    return j;
}

int dsq_chat_journal_load(const char *path, const dsq_gsm8k_set *set, size_t n, int samples,
                          dsq_chat_reply *replies, size_t *have, char **tail, size_t *tail_len, dsq_diag *d)
{
    *have = 0;
    *tail = NULL;
    *tail_len = 0;
    if (!dsq_path_exists(path)) return DSQ_OK;
    size_t cap = 0;
    char *buf = NULL;
    size_t len = 0;
    DSQ_TRY(dsq_read_file(path, (size_t)1 << 32, &buf, &len, d));
    int rc = DSQ_OK;
    size_t lineno = 0;
    for (char *p = buf, *e = buf + len; p < e && rc == DSQ_OK;) {
        char *nl = memchr(p, '\n', (size_t)(e - p));
        size_t ll = nl ? (size_t)(nl - p) : (size_t)(e - p);
        lineno++;
        json_object *j = NULL, *v;
        int64_t doc = -1, sample = -1;
        /* a line cut short by a crash (the last one) is dropped: it is asked again */
        if (ll && ll <= INT32_MAX && (j = parse_line(p, ll))) {
            if (json_object_object_get_ex(j, "doc_id", &v) && json_object_is_type(v, json_type_int)) doc = json_object_get_int64(v);
            if (json_object_object_get_ex(j, "sample", &v) && json_object_is_type(v, json_type_int)) sample = json_object_get_int64(v);
            int refused = json_object_object_get_ex(j, "error", &v) && !json_object_is_type(v, json_type_null);
            if (doc >= 0 && (size_t)doc < n && sample >= 0 && sample < samples && refused) {
                /* the server refused it: asked again */
            } else if (doc >= 0 && (size_t)doc < n && sample >= 0 && sample < samples) {
                const dsq_gsm8k_item *it = &set->items[doc];
                if (!json_object_object_get_ex(j, "question", &v) || !json_object_is_type(v, json_type_string) ||
                    (size_t)json_object_get_string_len(v) != it->question_len ||
                    memcmp(json_object_get_string(v), it->question, it->question_len)) {
                    rc = dsq_fail(d, DSQ_ERR_STATE, path, NULL, -1,
                                  "line %zu: doc %lld is another question than --data has (another data set? -f restarts)",
                                  lineno, (long long)doc);
                } else {
                    dsq_chat_reply *r = &replies[(size_t)doc * (size_t)samples + (size_t)sample];
                    dsq_chat_reply_release(r);
                    r->prompt_tokens = r->completion_tokens = -1;
                    if (opt_str(j, "content", &r->content, &r->clen, d) < 0 ||
                        opt_str(j, "reasoning_content", &r->reasoning, &r->rlen, d) < 0) {
                        rc = dsq_fail(d, DSQ_ERR_STATE, path, NULL, -1, "line %zu: bad content", lineno);
                    } else {
                        if (json_object_object_get_ex(j, "finish", &v) && json_object_is_type(v, json_type_string))
                            snprintf(r->finish, sizeof r->finish, "%s", json_object_get_string(v));
                        if (json_object_object_get_ex(j, "prompt_tokens", &v) && json_object_is_type(v, json_type_int))
                            r->prompt_tokens = json_object_get_int64(v);
                        if (json_object_object_get_ex(j, "gen_tokens", &v) && json_object_is_type(v, json_type_int))
                            r->completion_tokens = json_object_get_int64(v);
                        if (!r->have) (*have)++;
                        r->have = 1;
                    }
                }
            } else if (doc >= 0 && sample >= 0 && nl) { /* a larger run's record: kept as written */
                if (*tail_len + ll + 1 > cap) {
                    size_t nc = (*tail_len + ll + 1) * 2;
                    char *t = realloc(*tail, nc);
                    if (!t) rc = dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
                    else { *tail = t; cap = nc; }
                }
                if (rc == DSQ_OK) {
                    memcpy(*tail + *tail_len, p, ll + 1);
                    *tail_len += ll + 1;
                }
            }
            json_object_put(j);
        }
        p = nl ? nl + 1 : e;
    }
    free(buf);
    if (rc < 0) { free(*tail); *tail = NULL; *tail_len = 0; }
    return rc;
}

int dsq_chat_score_all(const dsq_chat_run_opts *o, const char *think_end, const dsq_gsm8k_set *set,
                       size_t n, const dsq_chat_reply *replies, const char *out_path,
                       const char *tail, size_t tail_len, dsq_chat_summary *s, dsq_diag *d)
{
    memset(s, 0, sizeof *s);
    s->items = n;
    s->samples = o->samples;
    dsq_gsm8k_scorer *sc = NULL;
    int rc = dsq_gsm8k_scorer_create(&sc, d);
    int *c1 = calloc(n ? n : 1, sizeof *c1), *c2 = calloc(n ? n : 1, sizeof *c2);
    if (rc == DSQ_OK && (!c1 || !c2)) rc = dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    dsq_outfile f;
    int open = 0;
    if (rc == DSQ_OK && out_path) {
        rc = dsq_outfile_open(&f, out_path, DSQ_OUT_OVERWRITE, d);
        open = rc == DSQ_OK;
    }
    for (size_t i = 0; i < n && rc == DSQ_OK; i++)
        for (int k = 0; k < o->samples && rc == DSQ_OK; k++) {
            const dsq_chat_reply *r = &replies[i * (size_t)o->samples + (size_t)k];
            if (!r->have) { s->missing++; continue; }
            char *pred = NULL;
            size_t pl = 0;
            dsq_chat_score cs;
            rc = dsq_chat_prediction(o->suite, r->content, r->clen, r->content != NULL, r->reasoning, r->rlen,
                                     r->reasoning != NULL, think_end, &pred, &pl);
            if (rc == DSQ_OK)
                rc = dsq_chat_score_item(o->suite, sc, pred, pl, set->items[i].answer, set->items[i].answer_len, &cs);
            free(pred);
            if (rc < 0) { rc = dsq_fail(d, rc, NULL, NULL, -1, "cannot score item %zu", i); break; }
            c1[i] += cs.correct;
            c2[i] += cs.correct_flexible;
            if (r->completion_tokens > 0) s->gen_tokens += (uint64_t)r->completion_tokens;
            if (r->reasoning) s->reasoning_chars += r->rlen;
            if (open) {
                char *line = dsq_chat_record_json(i, k, &set->items[i], r, &cs);
                rc = line ? dsq_outfile_write(&f, line, strlen(line), d) : dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
                if (rc == DSQ_OK) rc = dsq_outfile_write(&f, "\n", 1, d);
                free(line);
            }
            dsq_chat_score_release(&cs);
        }
    if (open) {
        if (rc == DSQ_OK && tail_len) rc = dsq_outfile_write(&f, tail, tail_len, d);
        if (rc == DSQ_OK) rc = dsq_outfile_commit(&f, d);
        else dsq_outfile_abort(&f);
    }
    if (rc == DSQ_OK) {
        dsq_chat_accuracy(c1, n, o->samples, &s->acc, &s->acc_se);
        dsq_chat_accuracy(c2, n, o->samples, &s->acc_flex, &s->acc_flex_se);
        double p1 = 0, p2 = 0;
        for (size_t i = 0; i < n; i++) {
            s->correct += (size_t)c1[i];
            s->correct_flex += (size_t)c2[i];
            p1 += dsq_pass_at_k(o->samples, c1[i], o->samples);
            p2 += dsq_pass_at_k(o->samples, c2[i], o->samples);
        }
        s->pass_n = n ? p1 / (double)n : 0;
        s->pass_n_flex = n ? p2 / (double)n : 0;
    }
    free(c1);
    free(c2);
    dsq_gsm8k_scorer_free(sc);
    return rc;
}
