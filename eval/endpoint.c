/* endpoint.c - ds-eval --endpoint: requests, response parsing, and the
 * concurrent runs for gsm8k and ppl (endpoint.h). */
#include "endpoint.h"
#include "http_client.h"

#include <ctype.h>
#include <json-c/json.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- parsers ------------------------------------------------------------------------ */

/* ppl and kld against a server lacking the capability they need */
#define NEED_ECHO "ppl and kld need the prompt's log-probs, echo + logprobs on /v1/completions: " \
                  "vLLM and ds-serve return them, llama-server does not"

/* case-insensitive substring */
static int has_word(const char *s, const char *w)
{
    size_t n = strlen(w);
    for (; *s; s++)
        if (!strncasecmp(s, w, n)) return 1;
    return 0;
}

static json_object *parse_obj(const char *body, size_t len, const char *what, dsq_diag *d)
{
    if (len > INT32_MAX) { dsq_fail(d, DSQ_ERR_JSON, NULL, NULL, -1, "%s: response too large", what); return NULL; }
    json_tokener *tk = json_tokener_new_ex(64);
    json_object *o = tk ? json_tokener_parse_ex(tk, body, (int)len) : NULL;
    int ok = tk && json_tokener_get_error(tk) == json_tokener_success;
    json_tokener_free(tk);
    if (!ok || !json_object_is_type(o, json_type_object)) {
        json_object_put(o);
        dsq_fail(d, DSQ_ERR_JSON, NULL, NULL, -1, "%s: the response is not a JSON object (not an OpenAI-compatible server?)", what);
        return NULL;
    }
    return o;
}

void dsq_ep_error_text(const char *body, size_t len, char *out, size_t n)
{
    if (!n) return;
    out[0] = 0;
    json_object *o = parse_obj(body ? body : "", body ? len : 0, "error", NULL), *e, *m;
    if (o && json_object_object_get_ex(o, "error", &e) && e) {
        if (json_object_is_type(e, json_type_object) && json_object_object_get_ex(e, "message", &m) &&
            json_object_is_type(m, json_type_string))
            snprintf(out, n, "%s", json_object_get_string(m));
        else if (json_object_is_type(e, json_type_string))
            snprintf(out, n, "%s", json_object_get_string(e));
    }
    json_object_put(o);
    if (!out[0] && body) {
        size_t k = len < n - 1 ? len : n - 1, w = 0;
        for (size_t i = 0; i < k; i++) out[w++] = (body[i] >= 32 && body[i] < 127) ? body[i] : ' ';
        out[w] = 0;
    }
}

int dsq_ep_item_refusal(long status, const char *msg)
{
    if (status != 400 && status != 413 && status != 422) return 0;
    /* vLLM / OpenAI: "maximum context length is N tokens"; llama-server:
     * "exceeds the available context size"; ds-serve: "longer than the context" */
    return has_word(msg, "context") || has_word(msg, "too long") || has_word(msg, "too many tokens");
}

int dsq_ep_permanent_5xx(long status, const char *body, size_t len)
{
    if (status < 500 || status == 502 || status == 503 || status == 504) return 0; /* proxies, overload */
    char msg[300];
    json_object *o = parse_obj(body, len, "error", NULL), *e;
    int json_err = o && json_object_object_get_ex(o, "error", &e);
    json_object_put(o);
    if (!json_err) return 0;
    dsq_ep_error_text(body, len, msg, sizeof msg);
    /* llama-server: HTTP 500 "Unsupported param: echo" on every try */
    return has_word(msg, "unsupported") || has_word(msg, "not supported");
}

int dsq_ep_parse_models(const char *body, size_t len, char ***ids, size_t *n, dsq_diag *d)
{
    *ids = NULL;
    *n = 0;
    json_object *o = parse_obj(body, len, "/models", d), *data;
    if (!o) return DSQ_ERR_JSON;
    int rc = DSQ_OK;
    if (!json_object_object_get_ex(o, "data", &data) || !json_object_is_type(data, json_type_array))
        rc = dsq_fail(d, DSQ_ERR_JSON, NULL, NULL, -1, "/models: no \"data\" list (not an OpenAI-compatible server?)");
    size_t k = rc == DSQ_OK ? json_object_array_length(data) : 0;
    if (rc == DSQ_OK && !(*ids = calloc(k ? k : 1, sizeof **ids))) rc = dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    for (size_t i = 0; i < k && rc == DSQ_OK; i++) {
        json_object *m = json_object_array_get_idx(data, i), *id;
        if (!json_object_is_type(m, json_type_object) || !json_object_object_get_ex(m, "id", &id) ||
            !json_object_is_type(id, json_type_string)) {
            rc = dsq_fail(d, DSQ_ERR_JSON, NULL, NULL, -1, "/models: entry %zu has no string \"id\"", i);
            break;
        }
        if (!((*ids)[(*n)++] = strdup(json_object_get_string(id)))) rc = dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    }
    json_object_put(o);
    if (rc < 0) { dsq_ep_free_models(*ids, *n); *ids = NULL; *n = 0; }
    return rc;
}

void dsq_ep_free_models(char **ids, size_t n)
{
    for (size_t i = 0; ids && i < n; i++) free(ids[i]);
    free(ids);
}

static json_object *first_choice(json_object *o, dsq_diag *d)
{
    json_object *ch;
    if (!json_object_object_get_ex(o, "choices", &ch) || !json_object_is_type(ch, json_type_array) ||
        json_object_array_length(ch) < 1 || !json_object_is_type(json_object_array_get_idx(ch, 0), json_type_object)) {
        dsq_fail(d, DSQ_ERR_JSON, NULL, NULL, -1, "completion: no \"choices\" (not an OpenAI-compatible server?)");
        return NULL;
    }
    return json_object_array_get_idx(ch, 0);
}

int dsq_ep_parse_completion(const char *body, size_t len, dsq_ep_completion *c, dsq_diag *d)
{
    memset(c, 0, sizeof *c);
    c->prompt_tokens = c->completion_tokens = -1;
    json_object *o = parse_obj(body, len, "completion", d), *ch, *t, *u, *x;
    if (!o) return DSQ_ERR_JSON;
    int rc = DSQ_OK;
    if (!(ch = first_choice(o, d))) rc = DSQ_ERR_JSON;
    else if (!json_object_object_get_ex(ch, "text", &t) || !json_object_is_type(t, json_type_string))
        rc = dsq_fail(d, DSQ_ERR_JSON, NULL, NULL, -1, "completion: choices[0].text is not a string");
    if (rc == DSQ_OK) {
        c->len = (size_t)json_object_get_string_len(t);
        if (!(c->text = malloc(c->len + 1))) rc = dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
        else { memcpy(c->text, json_object_get_string(t), c->len); c->text[c->len] = 0; }
        if (json_object_object_get_ex(ch, "finish_reason", &x) && json_object_is_type(x, json_type_string))
            snprintf(c->finish, sizeof c->finish, "%s", json_object_get_string(x));
        if (json_object_object_get_ex(o, "usage", &u) && json_object_is_type(u, json_type_object)) {
            if (json_object_object_get_ex(u, "prompt_tokens", &x) && json_object_is_type(x, json_type_int))
                c->prompt_tokens = json_object_get_int64(x);
            if (json_object_object_get_ex(u, "completion_tokens", &x) && json_object_is_type(x, json_type_int))
                c->completion_tokens = json_object_get_int64(x);
        }
    }
    json_object_put(o);
    return rc;
}

static int num(json_object *x, double *v)
{
    if (!json_object_is_type(x, json_type_double) && !json_object_is_type(x, json_type_int)) return 0;
    *v = json_object_get_double(x);
    return isfinite(*v) && *v <= 1e-6; /* a log-prob: finite, not above 0 (small slack for rounding) */
}

int dsq_ep_parse_prompt_logprobs(const char *body, size_t len, const int32_t *prompt, size_t n_prompt,
                                 double *lp, dsq_diag *d)
{
    json_object *o = parse_obj(body, len, "completion", d), *ch, *L, *arr;
    if (!o) return DSQ_ERR_JSON;
    int rc = DSQ_OK;
    if (n_prompt) lp[0] = NAN;
    if (!(ch = first_choice(o, d))) rc = DSQ_ERR_JSON;
    else if (json_object_object_get_ex(ch, "prompt_logprobs", &arr) && json_object_is_type(arr, json_type_array)) {
        /* vLLM: [null, {"<id>": {"logprob": x, ...}, ...}, ...] */
        if (json_object_array_length(arr) < n_prompt)
            rc = dsq_fail(d, DSQ_ERR_JSON, NULL, NULL, -1, "prompt_logprobs has %zu entries for %zu prompt tokens",
                          json_object_array_length(arr), n_prompt);
        for (size_t i = 1; i < n_prompt && rc == DSQ_OK; i++) {
            json_object *e = json_object_array_get_idx(arr, i), *t, *v;
            char key[16];
            snprintf(key, sizeof key, "%d", (int)prompt[i]);
            if (!json_object_is_type(e, json_type_object) || !json_object_object_get_ex(e, key, &t) ||
                !json_object_is_type(t, json_type_object) || !json_object_object_get_ex(t, "logprob", &v) || !num(v, &lp[i]))
                rc = dsq_fail(d, DSQ_ERR_JSON, NULL, NULL, -1, "prompt_logprobs[%zu] has no log-prob for token %d", i, (int)prompt[i]);
        }
    } else if (!json_object_object_get_ex(ch, "logprobs", &L) || !json_object_is_type(L, json_type_object) ||
               !json_object_object_get_ex(L, "token_logprobs", &arr) || !json_object_is_type(arr, json_type_array)) {
        rc = dsq_fail(d, DSQ_ERR_JSON, NULL, NULL, -1, "no prompt log-probs in the response: the server ignored echo + logprobs "
                      "(" NEED_ECHO ")");
    } else {
        if (json_object_array_length(arr) < n_prompt)
            rc = dsq_fail(d, DSQ_ERR_JSON, NULL, NULL, -1, "token_logprobs has %zu entries for %zu prompt tokens (echo ignored?)",
                          json_object_array_length(arr), n_prompt);
        for (size_t i = 1; i < n_prompt && rc == DSQ_OK; i++)
            if (!num(json_object_array_get_idx(arr, i), &lp[i]))
                rc = dsq_fail(d, DSQ_ERR_JSON, NULL, NULL, -1, "token_logprobs[%zu] is not a log-prob", i);
    }
    json_object_put(o);
    return rc;
}

int dsq_ep_parse_prompt_topk(const char *body, size_t len, const int32_t *prompt, size_t n_prompt,
                             size_t vocab, int cap, int32_t *ids, double *lps, int *n, int32_t *top1,
                             int *have, dsq_diag *d)
{
    *have = 0;
    json_object *o = parse_obj(body, len, "completion", d), *ch, *arr;
    if (!o) return DSQ_ERR_JSON;
    int rc = DSQ_OK;
    if (!(ch = first_choice(o, d))) rc = DSQ_ERR_JSON;
    else if (!json_object_object_get_ex(ch, "prompt_logprobs", &arr) || !json_object_is_type(arr, json_type_array)) {
        json_object_put(o);
        return DSQ_OK; /* not vLLM-style: the caller uses token_logprobs */
    } else if (json_object_array_length(arr) < n_prompt) {
        rc = dsq_fail(d, DSQ_ERR_JSON, NULL, NULL, -1, "prompt_logprobs has %zu entries for %zu prompt tokens",
                      json_object_array_length(arr), n_prompt);
    }
    for (size_t i = 1; i < n_prompt && rc == DSQ_OK; i++) {
        json_object *e = json_object_array_get_idx(arr, i);
        int k = 0, seen = 0;
        top1[i] = -1;
        if (!json_object_is_type(e, json_type_object)) {
            rc = dsq_fail(d, DSQ_ERR_JSON, NULL, NULL, -1, "prompt_logprobs[%zu] is not an object", i);
            break;
        }
        json_object_object_foreach(e, key, val) {
            char *end;
            long id = strtol(key, &end, 10);
            json_object *v, *rk;
            double lp;
            if (!key[0] || *end || id < 0 || (size_t)id >= vocab) {
                rc = dsq_fail(d, DSQ_ERR_JSON, NULL, NULL, -1, "prompt_logprobs[%zu]: key '%.20s' is not a token id "
                              "below %zu", i, key, vocab);
                break;
            }
            if (!json_object_is_type(val, json_type_object) || !json_object_object_get_ex(val, "logprob", &v) || !num(v, &lp)) {
                rc = dsq_fail(d, DSQ_ERR_JSON, NULL, NULL, -1, "prompt_logprobs[%zu][%ld] has no log-prob", i, id);
                break;
            }
            if (k == cap) {
                rc = dsq_fail(d, DSQ_ERR_JSON, NULL, NULL, -1, "prompt_logprobs[%zu] has more than the %d entries asked for",
                              i, cap);
                break;
            }
            ids[i * (size_t)cap + (size_t)k] = (int32_t)id;
            lps[i * (size_t)cap + (size_t)k] = lp > 0 ? 0 : lp;
            k++;
            seen |= id == prompt[i];
            if (json_object_object_get_ex(val, "rank", &rk) && json_object_is_type(rk, json_type_int) &&
                json_object_get_int64(rk) == 1 && top1[i] < 0)
                top1[i] = (int32_t)id;
        }
        if (rc == DSQ_OK && !seen)
            rc = dsq_fail(d, DSQ_ERR_JSON, NULL, NULL, -1, "prompt_logprobs[%zu] has no log-prob for token %d", i, (int)prompt[i]);
        n[i] = k;
    }
    json_object_put(o);
    if (rc == DSQ_OK) *have = 1;
    return rc;
}

/* ---- requests --------------------------------------------------------------------------- */

/* Response bounds: a /models list; a completion (text up to max_tokens);
 * an echo answer, per prompt position up to k entries of a few hundred bytes. */
#define MAX_MODELS ((size_t)16 << 20)
#define MAX_ANSWER ((size_t)64 << 20)
static size_t echo_bound(size_t n_ctx, size_t k) { return MAX_ANSWER + n_ctx * k * 512; }

static int make_http(const dsq_endpoint_opts *o, dsq_http **h, dsq_diag *d)
{
    dsq_http_opts ho = { .base_url = o->url, .api_key = o->api_key, .timeout_s = o->timeout_s > 0 ? o->timeout_s : 600,
                         .retries = o->retries, .backoff_s = 0.5, .cancel = o->cancel, .max_body = MAX_ANSWER,
                         .permanent = dsq_ep_permanent_5xx };
    return dsq_http_create(h, &ho, d);
}

/* The URL of base + path, as the client joins them. */
static void join_url(const dsq_endpoint_opts *o, const char *path, char *url, size_t n)
{
    size_t ul = strlen(o->url);
    while (ul && o->url[ul - 1] == '/') ul--;
    snprintf(url, n, "%.*s%s", (int)(ul < 500 ? ul : 500), o->url, path);
}

/* A response that is not the OpenAI answer expected: name the URL, and
 * point at /v1 when the base lacks it (llama-server, for one, answers
 * /models and /completions at its root in its own shapes). */
int dsq_ep_not_openai(const dsq_endpoint_opts *o, const char *path, int rc, dsq_diag *d)
{
    if (rc != DSQ_ERR_JSON || !d) return rc;
    char m[sizeof d->msg], url[600];
    snprintf(m, sizeof m, "%s", d->msg);
    join_url(o, path, url, sizeof url);
    size_t ul = strlen(o->url);
    while (ul && o->url[ul - 1] == '/') ul--;
    int v1 = ul >= 3 && !memcmp(o->url + ul - 3, "/v1", 3);
    dsq_diag_clear(d);
    if (v1) return dsq_fail(d, rc, url, NULL, -1, "%.400s", m);
    return dsq_fail(d, rc, url, NULL, -1, "%.400s; the base URL of an OpenAI-compatible server usually ends in /v1 "
                    "(--endpoint %.*s/v1?)", m, (int)(ul < 300 ? ul : 300), o->url);
}

/* One call; anything but 200 becomes an error naming the URL. echo: the
 * request asks for the prompt's log-probs. *stp: the HTTP status (0 none). */
static int call_st(const dsq_endpoint_opts *o, dsq_http *h, const char *path, const char *body, size_t bl, int echo,
                   char **resp, size_t *rl, long *stp, dsq_diag *d)
{
    long st = 0;
    *stp = 0;
    DSQ_TRY(dsq_http_call(h, path, body, bl, &st, resp, rl, d));
    *stp = st;
    if (st == 200) return DSQ_OK;
    char msg[300], url[600];
    dsq_ep_error_text(*resp, *rl, msg, sizeof msg);
    join_url(o, path, url, sizeof url);
    free(*resp);
    *resp = NULL;
    if ((st == 401 || st == 403) && !o->api_key)
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, url, NULL, -1, "the server wants an API key (HTTP %ld) and none was sent: "
                        "give it with --api-key-env VAR: %s", st, msg);
    if (st == 401 || st == 403)
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, url, NULL, -1, "the server refused the API key (HTTP %ld): %s", st, msg);
    if (echo && st != 404 && (has_word(msg, "echo") || has_word(msg, "logprob")))
        return dsq_fail(d, DSQ_ERR_UNSUPPORTED, url, NULL, -1, "HTTP %ld: %s; " NEED_ECHO, st, msg);
    if (st == 404)
        return dsq_fail(d, DSQ_ERR_NOT_FOUND, url, NULL, -1, "HTTP 404 (is this the /v1 base of an OpenAI-compatible server?): %s", msg);
    return dsq_fail(d, st >= 400 && st < 500 ? DSQ_ERR_INVALID_ARG : DSQ_ERR_IO, url, NULL, -1, "HTTP %ld: %s", st, msg);
}

static int call_ok(const dsq_endpoint_opts *o, dsq_http *h, const char *path, const char *body, size_t bl, int echo,
                   char **resp, size_t *rl, dsq_diag *d)
{
    long st;
    return call_st(o, h, path, body, bl, echo, resp, rl, &st, d);
}

int dsq_ep_resolve_model(const dsq_endpoint_opts *o, char **model, dsq_diag *d)
{
    *model = NULL;
    dsq_http *h;
    DSQ_TRY(make_http(o, &h, d));
    char *resp = NULL, **ids = NULL;
    size_t rl = 0, n = 0;
    dsq_http_set_max_body(h, MAX_MODELS);
    int rc = call_ok(o, h, "/models", NULL, 0, 0, &resp, &rl, d);
    if (rc == DSQ_OK) rc = dsq_ep_not_openai(o, "/models", dsq_ep_parse_models(resp, rl, &ids, &n, d), d);
    if (rc == DSQ_OK) {
        if (o->model) {
            int found = 0;
            for (size_t i = 0; i < n; i++) found |= !strcmp(ids[i], o->model);
            if (!found) rc = dsq_fail(d, DSQ_ERR_NOT_FOUND, o->url, NULL, -1, "the server does not list model '%s' (it has %zu; "
                                      "first: '%s')", o->model, n, n ? ids[0] : "");
            else *model = strdup(o->model);
        } else if (n == 1) {
            *model = strdup(ids[0]);
        } else {
            rc = dsq_fail(d, DSQ_ERR_INVALID_ARG, o->url, NULL, -1, "the server lists %zu models; pick one with --served-model", n);
        }
        if (rc == DSQ_OK && !*model) rc = dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    }
    dsq_ep_free_models(ids, n);
    free(resp);
    dsq_http_free(h);
    return rc;
}

/* ---- concurrent runs --------------------------------------------------------------------- */

typedef struct ep_run ep_run;
typedef int (*ep_task)(ep_run *r, dsq_http *h, size_t k, dsq_diag *d);

struct ep_run {
    const dsq_endpoint_opts *o;
    const char *model;
    ep_task task;
    size_t n, next;
    pthread_mutex_t mu;
    int rc;
    dsq_diag d;
    /* gsm8k */
    const char *const *prompts;
    const size_t *lens, *todo;
    size_t max_tokens;
    const char *const *stops;
    size_t n_stops;
    dsq_ep_done_fn done;
    void *user;
    /* kld */
    const dsq_logp_reader *base;
    const dsq_ep_vocab *vocab;  /* NULL: text-keyed answers keep the two-bucket bound */
    int req_k;
    double *kl;            /* [n_chunks * per_chunk] */
    signed char *top;      /* same top-1: 1, 0, or -1 unknown */
    unsigned char *mode;   /* 0 two buckets, 1 top-k, 2 top-k with every base top-k token served; +2 text-keyed */
    /* ppl */
    const dsq_ppl_plan *plan;
    const int32_t *tokens;
    double *nll;           /* [n_chunks * per_chunk] */
    size_t n_done;
    const dsq_eval_hooks *h;
};

static void *worker(void *arg)
{
    ep_run *r = arg;
    dsq_http *h = NULL;
    dsq_diag d;
    dsq_diag_clear(&d);
    int rc = make_http(r->o, &h, &d);
    for (;;) {
        pthread_mutex_lock(&r->mu);
        if (rc < 0 && r->rc == DSQ_OK) { r->rc = rc; r->d = d; }
        if (r->o->cancel && *r->o->cancel && r->rc == DSQ_OK) {
            r->rc = DSQ_ERR_INTERRUPTED;
            dsq_fail(&r->d, DSQ_ERR_INTERRUPTED, NULL, NULL, -1, "interrupted");
        }
        int stop = r->rc < 0 || r->next >= r->n;
        size_t k = r->next++;
        pthread_mutex_unlock(&r->mu);
        if (stop) break;
        dsq_diag_clear(&d);
        rc = r->task(r, h, k, &d);
    }
    dsq_http_free(h);
    return NULL;
}

static int run_all(ep_run *r, dsq_diag *d)
{
    int nt = r->o->concurrency > 0 ? r->o->concurrency : 1;
    if ((size_t)nt > r->n) nt = r->n ? (int)r->n : 1;
    pthread_t *th = calloc((size_t)nt, sizeof *th);
    if (!th) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    pthread_mutex_init(&r->mu, NULL);
    dsq_diag_clear(&r->d);
    int started = 0;
    for (int i = 0; i < nt; i++)
        if (pthread_create(&th[i], NULL, worker, r) == 0) started++; else break;
    if (!started) worker(r);
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    free(th);
    pthread_mutex_destroy(&r->mu);
    if (r->rc < 0 && d) *d = r->d;
    return r->rc;
}

static int gsm_task(ep_run *r, dsq_http *h, size_t k, dsq_diag *d)
{
    size_t idx = r->todo[k];
    json_object *b = json_object_new_object(), *st = json_object_new_array();
    json_object_object_add(b, "model", json_object_new_string(r->model));
    json_object_object_add(b, "prompt", json_object_new_string_len(r->prompts[idx], (int)r->lens[idx]));
    json_object_object_add(b, "max_tokens", json_object_new_int64((int64_t)r->max_tokens));
    json_object_object_add(b, "temperature", json_object_new_double(0));
    for (size_t i = 0; i < r->n_stops; i++) json_object_array_add(st, json_object_new_string(r->stops[i]));
    json_object_object_add(b, "stop", st);
    size_t bl;
    const char *body = json_object_to_json_string_length(b, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &bl);
    char *resp = NULL;
    size_t rl = 0;
    long status = 0;
    int rc = call_st(r->o, h, "/completions", body, bl, 0, &resp, &rl, &status, d);
    json_object_put(b);
    dsq_ep_completion c = { 0 };
    if (rc < 0 && d && dsq_ep_item_refusal(status, d->msg)) {
        /* this prompt alone is over the server's context: its error, the run goes on */
        c.prompt_tokens = c.completion_tokens = -1;
        if (!(c.error = strdup(d->msg))) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
        dsq_diag_clear(d);
        rc = DSQ_OK;
    } else if (rc == DSQ_OK) {
        rc = dsq_ep_not_openai(r->o, "/completions", dsq_ep_parse_completion(resp, rl, &c, d), d);
    }
    free(resp);
    if (rc < 0) return rc;
    pthread_mutex_lock(&r->mu);
    if (r->rc == DSQ_OK) rc = r->done(r->user, idx, &c);
    pthread_mutex_unlock(&r->mu);
    free(c.text);
    free(c.error);
    return rc;
}

int dsq_ep_complete_all(const dsq_endpoint_opts *o, const char *model,
                        const char *const *prompts, const size_t *lens,
                        const size_t *todo, size_t n_todo, size_t max_tokens,
                        const char *const *stops, size_t n_stops,
                        dsq_ep_done_fn done, void *user, dsq_diag *d)
{
    ep_run r = { .o = o, .model = model, .task = gsm_task, .n = n_todo, .prompts = prompts, .lens = lens,
                 .todo = todo, .max_tokens = max_tokens, .stops = stops, .n_stops = n_stops, .done = done, .user = user };
    if (!n_todo) return DSQ_OK;
    return run_all(&r, d);
}

static int ppl_task(ep_run *r, dsq_http *h, size_t c, dsq_diag *d)
{
    const dsq_ppl_plan *p = r->plan;
    int32_t *win = malloc(p->n_ctx * sizeof *win);
    double *lp = malloc(p->n_ctx * sizeof *lp);
    if (!win || !lp) { free(win); free(lp); return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory"); }
    dsq_ppl_window(p, r->tokens, c, win);
    json_object *b = json_object_new_object(), *ids = json_object_new_array();
    for (size_t i = 0; i < p->n_ctx; i++) json_object_array_add(ids, json_object_new_int(win[i]));
    json_object_object_add(b, "model", json_object_new_string(r->model));
    json_object_object_add(b, "prompt", ids);
    /* lm-eval's loglikelihood request: one new token, echo the prompt with its log-probs */
    json_object_object_add(b, "max_tokens", json_object_new_int(1));
    json_object_object_add(b, "temperature", json_object_new_double(0));
    json_object_object_add(b, "echo", json_object_new_boolean(1));
    json_object_object_add(b, "logprobs", json_object_new_int(1));
    size_t bl;
    const char *body = json_object_to_json_string_length(b, JSON_C_TO_STRING_PLAIN, &bl);
    char *resp = NULL;
    size_t rl = 0;
    dsq_http_set_max_body(h, echo_bound(p->n_ctx, 2));
    int rc = call_ok(r->o, h, "/completions", body, bl, 1, &resp, &rl, d);
    json_object_put(b);
    if (rc == DSQ_OK) rc = dsq_ep_not_openai(r->o, "/completions", dsq_ep_parse_prompt_logprobs(resp, rl, win, p->n_ctx, lp, d), d);
    free(resp);
    if (rc == DSQ_OK) {
        /* logits after positions first .. n-2 predict tokens first+1 .. n-1 */
        for (size_t j = 0; j < p->per_chunk; j++) r->nll[c * p->per_chunk + j] = -lp[p->first + 1 + j];
        pthread_mutex_lock(&r->mu);
        r->n_done++;
        if (r->h && r->h->progress) r->h->progress(r->h->progress_user, r->n_done, p->n_chunks);
        pthread_mutex_unlock(&r->mu);
    } else {
        dsq_fail(d, rc, NULL, NULL, -1, "window %zu", c);
    }
    free(win);
    free(lp);
    return rc;
}

int dsq_ep_ppl_run(const dsq_endpoint_opts *o, const char *model, const dsq_ppl_plan *p,
                   const int32_t *tokens, const dsq_eval_hooks *h, dsq_ppl_result *res, dsq_diag *d)
{
    memset(res, 0, sizeof *res);
    if (!p->n_chunks) return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "empty plan");
    ep_run r = { .o = o, .model = model, .task = ppl_task, .n = p->n_chunks, .plan = p, .tokens = tokens, .h = h };
    r.nll = malloc(p->n_chunks * p->per_chunk * sizeof *r.nll);
    if (!r.nll) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    int rc = run_all(&r, d);
    if (rc == DSQ_OK) {
        /* summed in window and position order, exactly as dsq_ppl_run */
        double sum = 0, sum2 = 0;
        uint64_t count = 0;
        for (size_t i = 0; i < p->n_chunks * p->per_chunk; i++) {
            sum += r.nll[i];
            sum2 += r.nll[i] * r.nll[i];
            count++;
        }
        res->n_chunks = p->n_chunks;
        res->count = count;
        res->nll_sum = sum;
        res->nll2_sum = sum2;
        res->mean_nll = sum / (double)count;
        res->ppl = exp(res->mean_nll);
        double var = sum2 / (double)count - res->mean_nll * res->mean_nll;
        res->ppl_stderr = count > 1 && var > 0 ? res->ppl * sqrt(var / (double)(count - 1)) : 0;
    }
    free(r.nll);
    return rc;
}

/* log(1 - exp(x)) for x <= 0, accurate near 0 and below. */
static double log1mexp(double x)
{
    return x > -0.693147 ? log(-expm1(x)) : log1p(-exp(x));
}

static float rec_f32(const uint8_t *p) { float v; memcpy(&v, p, 4); return v; }
static uint32_t rec_u32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }

/* Two buckets, {target} and the rest (endpoint.h): the bound left when the
 * server names its alternatives by text only. */
static double kl_two_bucket(double lp, double lq)
{
    double pt = exp(lp), kl = pt * (lp - lq);
    if (pt < 1) {
        double lpr = log1mexp(lp), lqr = lq < 0 ? log1mexp(lq) : -690.8; /* served rest mass 0: clamp at 1e-300 */
        kl += exp(lpr) * (lpr - lqr);
    }
    return kl;
}

/* (endpoint.h) */
int dsq_ep_kl_topk(const dsq_logp_info *info, const uint8_t *rec, const int32_t *ids, const double *lps, int n,
                   double *out, int *exact)
{
    int K = (int)info->top_k;
    const uint8_t *kp = rec + 16;
    float tail_lp = rec_f32(rec + 4);
    if (isnan(tail_lp) || tail_lp > 0) return -1;
    double A = 0, S = 0, Sk = 0, Su = 0, Qk = 0;
    for (int i = 0; i < K; i++) {
        uint32_t id = rec_u32(kp + 8 * i);
        double lp = rec_f32(kp + 8 * i + 4), p = exp(lp);
        if (id >= info->vocab || isnan(lp)) return -1;
        int at = -1;
        for (int m = 0; m < n && at < 0; m++) if ((uint32_t)ids[m] == id) at = m;
        S += p;
        if (at >= 0) { A += p * (lp - lps[at]); Sk += p; Qk += exp(lps[at]); }
        else Su += p;
    }
    *exact = Su == 0;
    if (info->encoding == DSQ_LOGP_U16) {
        /* u16: tail_lp is the mass below the codes, not outside the top-k;
         * the coded tokens are not served, so everything outside the top-k
         * is one bucket (still a lower bound) */
        tail_lp = S < 1 ? (float)log1p(-S) : -INFINITY;
    }
    /* rescale the base top-k to sum to 1 - P_T, exactly as dsq_logp_compare:
     * sum over the known ones of r p (lp + log r - lq) = r A + r Sk log r */
    double pt = isfinite(tail_lp) ? exp((double)tail_lp) : 0, r = 1, kl = A;
    if (S > 0 && pt < 1) {
        r = (1 - pt) / S;
        kl = r * A + r * Sk * log(r);
    }
    double PT = pt + r * Su, logPT = Su == 0 || PT <= 0 ? (double)tail_lp : log(PT);
    if (PT > 0) {
        double QT = 1 - Qk, logQT = QT > 0 ? log(QT) : -690.8; /* served mass outside: clamp at 1e-300 */
        kl += PT * (logPT - logQT);
    }
    *out = kl;
    return 0;
}

static int kld_task(ep_run *r, dsq_http *h, size_t c, dsq_diag *d)
{
    const dsq_ppl_plan *p = r->plan;
    const dsq_logp_info *info = &r->base->info;
    int cap = r->req_k + 1; /* vLLM: the top k plus the prompt token */
    const int32_t *win = r->base->tokens + c * p->n_ctx;
    double *lp = malloc(p->n_ctx * sizeof *lp), *lps = malloc(p->n_ctx * (size_t)cap * sizeof *lps);
    int32_t *ids = malloc(p->n_ctx * (size_t)cap * sizeof *ids), *top1 = malloc(p->n_ctx * sizeof *top1);
    int *cnt = malloc(p->n_ctx * sizeof *cnt), have = 0, rc = DSQ_OK;
    if (!lp || !lps || !ids || !top1 || !cnt) rc = dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    char *resp = NULL;
    size_t rl = 0;
    if (rc == DSQ_OK) {
        json_object *b = json_object_new_object(), *pr = json_object_new_array();
        for (size_t i = 0; i < p->n_ctx; i++) json_object_array_add(pr, json_object_new_int(win[i]));
        json_object_object_add(b, "model", json_object_new_string(r->model));
        json_object_object_add(b, "prompt", pr);
        json_object_object_add(b, "max_tokens", json_object_new_int(1));
        json_object_object_add(b, "temperature", json_object_new_double(0));
        json_object_object_add(b, "echo", json_object_new_boolean(1));
        /* 5: OpenAI's cap for the legacy completions API, enough for the text-keyed fallback */
        json_object_object_add(b, "logprobs", json_object_new_int(r->vocab ? 5 : 1));
        json_object_object_add(b, "prompt_logprobs", json_object_new_int(r->req_k));
        size_t bl;
        const char *body = json_object_to_json_string_length(b, JSON_C_TO_STRING_PLAIN, &bl);
        dsq_http_set_max_body(h, echo_bound(p->n_ctx, (size_t)cap + 5));
        rc = call_ok(r->o, h, "/completions", body, bl, 1, &resp, &rl, d);
        json_object_put(b);
    }
    if (rc == DSQ_OK)
        rc = dsq_ep_not_openai(r->o, "/completions",
                        dsq_ep_parse_prompt_topk(resp, rl, win, p->n_ctx, info->vocab, cap, ids, lps, cnt, top1, &have, d), d);
    int text = 0;
    if (rc == DSQ_OK && !have && r->vocab) {
        rc = dsq_ep_parse_prompt_texttopk(resp, rl, win, p->n_ctx, r->vocab, cap, ids, lps, cnt, top1, &have, d);
        text = have;
    }
    if (rc == DSQ_OK && !have) rc = dsq_ep_parse_prompt_logprobs(resp, rl, win, p->n_ctx, lp, d);
    free(resp);
    for (size_t j = 0; j < p->per_chunk && rc == DSQ_OK; j++) {
        size_t pos = p->first + 1 + j, at = c * p->per_chunk + j;
        const uint8_t *rec = r->base->records + at * info->record_size;
        double lpb = rec_f32(rec), lq = 0;
        if (!isfinite(lpb) || lpb > 0) { rc = dsq_fail(d, DSQ_ERR_FORMAT, r->base->path, NULL, -1, "record %zu: bad target log-prob", at); break; }
        double kl;
        int exact = 0;
        if (have) {
            for (int m = 0; m < cnt[pos]; m++)
                if (ids[pos * (size_t)cap + (size_t)m] == win[pos]) { lq = lps[pos * (size_t)cap + (size_t)m]; break; }
            if (dsq_ep_kl_topk(info, rec, ids + pos * (size_t)cap, lps + pos * (size_t)cap, cnt[pos], &kl, &exact) < 0) {
                rc = dsq_fail(d, DSQ_ERR_FORMAT, r->base->path, NULL, -1, "record %zu: malformed top-k", at);
                break;
            }
            r->top[at] = top1[pos] < 0 ? -1 : (uint32_t)top1[pos] == rec_u32(rec + 16);
        } else {
            lq = lp[pos] > 0 ? 0 : lp[pos];
            kl = kl_two_bucket(lpb, lq);
            r->top[at] = -1;
        }
        r->kl[at] = have || kl > 0 ? kl : 0; /* top-k: unclamped, as dsq_kld_run */
        r->nll[at] = -lq;
        r->mode[at] = (unsigned char)(have ? 1 + exact + 2 * text : 0);
    }
    if (rc == DSQ_OK) {
        pthread_mutex_lock(&r->mu);
        r->n_done++;
        if (r->h && r->h->progress) r->h->progress(r->h->progress_user, r->n_done, p->n_chunks);
        pthread_mutex_unlock(&r->mu);
    } else {
        dsq_fail(d, rc, NULL, NULL, -1, "window %zu", c);
    }
    free(lp); free(lps); free(ids); free(top1); free(cnt);
    return rc;
}

int dsq_ep_kld_run(const dsq_endpoint_opts *o, const char *model, const dsq_logp_reader *base,
                   int top_k, const dsq_ep_vocab *vocab, const dsq_eval_hooks *h, dsq_kld_result *res,
                   dsq_ep_kld_info *info, dsq_diag *d)
{
    memset(res, 0, sizeof *res);
    memset(info, 0, sizeof *info);
    DSQ_TRY(dsq_logp_reader_verify(base, d));
    dsq_ppl_plan p;
    dsq_logp_reader_plan(base, &p);
    if (!p.n_chunks) return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "empty base");
    size_t n = p.n_chunks * p.per_chunk;
    int k = top_k;
    if (k <= 0) { /* vLLM's default --max-logprobs: the more ids served, the more base top-k tokens matched */
        k = (int)base->info.top_k;
        if (k < 20) k = 20;
    }
    info->requested_k = k;
    ep_run r = { .o = o, .model = model, .task = kld_task, .n = p.n_chunks, .plan = &p, .base = base,
                 .vocab = vocab, .req_k = k, .h = h };
    r.nll = malloc(n * sizeof *r.nll);
    r.kl = malloc(n * sizeof *r.kl);
    r.top = malloc(n);
    r.mode = malloc(n);
    float *klds = malloc(n * sizeof *klds);
    int rc = r.nll && r.kl && r.top && r.mode && klds ? run_all(&r, d) : dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    double s_top = 0;
    if (rc == DSQ_OK) {
        /* summed in position order, as dsq_kld_run */
        dsq_kld_sums sums = { 0 };
        for (size_t i = 0; i < n; i++) {
            double lp = rec_f32(base->records + i * base->info.record_size), kl = r.kl[i];
            klds[i] = (float)kl;
            dsq_kld_sums_add(&sums, kl, r.nll[i], -lp);
            info->topk_positions += r.mode[i] > 0;
            info->exact_positions += r.mode[i] == 2 || r.mode[i] == 4;
            info->text_positions += r.mode[i] >= 3;
            if (r.top[i] >= 0) { info->same_top_count++; s_top += r.top[i]; }
        }
        rc = dsq_kld_finish(res, &sums, klds, n, p.per_chunk);
        if (rc < 0) rc = dsq_fail(d, rc, NULL, NULL, -1, "out of memory");
    }
    if (rc == DSQ_OK) {
        double m = (double)info->same_top_count;
        res->same_top = m > 0 ? s_top / m : NAN;
        res->same_top_stderr = m > 1 ? sqrt(res->same_top * (1 - res->same_top) / (m - 1)) : NAN;
    }
    free(r.nll); free(r.kl); free(r.top); free(r.mode);
    free(klds);
    return rc;
}

/* ---- text-keyed top_logprobs ----------------------------------------------------------- */

typedef struct vocab_ent { const char *s; size_t len; int32_t id; } vocab_ent;

struct dsq_ep_vocab {
    char **text;          /* [n] each id decoded alone */
    size_t *len;
    vocab_ent *by_text;   /* sorted by (len, bytes); id -2 where ambiguous */
    size_t n;
};

static int ent_cmp(const void *a, const void *b)
{
    const vocab_ent *x = a, *y = b;
    if (x->len != y->len) return x->len < y->len ? -1 : 1;
    return memcmp(x->s, y->s, x->len);
}

void dsq_ep_vocab_free(dsq_ep_vocab *v)
{
    if (!v) return;
    for (size_t i = 0; v->text && i < v->n; i++) free(v->text[i]);
    free(v->text);
    free(v->len);
    free(v->by_text);
    free(v);
}

int dsq_ep_vocab_build(dsq_ep_vocab **out, const dsq_tokenizer *t, dsq_diag *d)
{
    *out = NULL;
    size_t n = dsq_tokenizer_vocab_size(t);
    dsq_ep_vocab *v = calloc(1, sizeof *v);
    if (v) { v->n = n; v->text = calloc(n ? n : 1, sizeof *v->text); v->len = calloc(n ? n : 1, sizeof *v->len);
             v->by_text = calloc(n ? n : 1, sizeof *v->by_text); }
    if (!v || !v->text || !v->len || !v->by_text) { dsq_ep_vocab_free(v); return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory"); }
    for (size_t i = 0; i < n; i++) {
        int32_t id = (int32_t)i;
        if (dsq_tokenizer_decode(t, &id, 1, 0, &v->text[i], &v->len[i]) < 0 || !v->text[i]) {
            free(v->text[i]);
            v->text[i] = strdup(""); /* an id without text: never matched (ambiguous with the others) */
            v->len[i] = 0;
            if (!v->text[i]) { dsq_ep_vocab_free(v); return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory"); }
        }
        v->by_text[i] = (vocab_ent){ v->text[i], v->len[i], id };
    }
    qsort(v->by_text, n, sizeof *v->by_text, ent_cmp);
    for (size_t i = 0; i + 1 < n; i++)
        if (!ent_cmp(&v->by_text[i], &v->by_text[i + 1])) v->by_text[i].id = v->by_text[i + 1].id = -2;
    *out = v;
    return DSQ_OK;
}

int32_t dsq_ep_vocab_lookup(const dsq_ep_vocab *v, const char *s, size_t len)
{
    if (len > 9 && !memcmp(s, "token_id:", 9)) {
        char *end;
        long id = strtol(s + 9, &end, 10);
        return end == s + len && id >= 0 && (size_t)id < v->n && isdigit((unsigned char)s[9]) ? (int32_t)id : -1;
    }
    vocab_ent key = { s, len, 0 };
    const vocab_ent *e = bsearch(&key, v->by_text, v->n, sizeof key, ent_cmp);
    return e ? e->id : -1;
}

int dsq_ep_parse_prompt_texttopk(const char *body, size_t len, const int32_t *prompt, size_t n_prompt,
                                 const dsq_ep_vocab *v, int cap, int32_t *ids, double *lps, int *n,
                                 int32_t *top1, int *have, dsq_diag *d)
{
    *have = 0;
    json_object *o = parse_obj(body, len, "completion", d), *ch, *L, *toks, *tl, *tops;
    if (!o) return DSQ_ERR_JSON;
    int rc = DSQ_OK;
    if (!(ch = first_choice(o, d))) rc = DSQ_ERR_JSON;
    else if (!json_object_object_get_ex(ch, "logprobs", &L) || !json_object_is_type(L, json_type_object) ||
             !json_object_object_get_ex(L, "tokens", &toks) || !json_object_is_type(toks, json_type_array) ||
             !json_object_object_get_ex(L, "token_logprobs", &tl) || !json_object_is_type(tl, json_type_array) ||
             !json_object_object_get_ex(L, "top_logprobs", &tops) || !json_object_is_type(tops, json_type_array) ||
             json_object_array_length(toks) < n_prompt || json_object_array_length(tl) < n_prompt ||
             json_object_array_length(tops) < n_prompt) {
        json_object_put(o);
        return DSQ_OK; /* nothing to map: the two-bucket bound */
    }
    int agree = 1;
    for (size_t i = 1; i < n_prompt && agree; i++) {
        json_object *t = json_object_array_get_idx(toks, i);
        size_t id = (size_t)prompt[i];
        agree = id < v->n && json_object_is_type(t, json_type_string) &&
                (size_t)json_object_get_string_len(t) == v->len[id] && !memcmp(json_object_get_string(t), v->text[id], v->len[id]);
    }
    for (size_t i = 1; i < n_prompt && agree && rc == DSQ_OK; i++) {
        json_object *e = json_object_array_get_idx(tops, i);
        double lq, best = -INFINITY;
        if (!num(json_object_array_get_idx(tl, i), &lq)) {
            rc = dsq_fail(d, DSQ_ERR_JSON, NULL, NULL, -1, "token_logprobs[%zu] is not a log-prob", i);
            break;
        }
        int k = 0;
        ids[i * (size_t)cap] = prompt[i];
        lps[i * (size_t)cap] = lq > 0 ? 0 : lq;
        k = 1;
        top1[i] = -1;
        if (!json_object_is_type(e, json_type_object)) { n[i] = k; continue; }
        json_object_object_foreach(e, key, val) {
            double lp;
            if (!num(val, &lp)) {
                rc = dsq_fail(d, DSQ_ERR_JSON, NULL, NULL, -1, "top_logprobs[%zu]: a value is not a log-prob", i);
                break;
            }
            int32_t id = dsq_ep_vocab_lookup(v, key, strlen(key));
            if (lp > best) { best = lp; top1[i] = id >= 0 ? id : -1; }
            if (id < 0 || id == prompt[i] || k == cap) continue;
            ids[i * (size_t)cap + (size_t)k] = id;
            lps[i * (size_t)cap + (size_t)k] = lp > 0 ? 0 : lp;
            k++;
        }
        if (best < lq) top1[i] = -1; /* the top list left out a likelier prompt token: not a top list */
        n[i] = k;
    }
    json_object_put(o);
    if (rc == DSQ_OK) *have = agree;
    return rc;
}
