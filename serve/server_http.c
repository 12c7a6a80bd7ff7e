/* server_http.c - libmicrohttpd glue for ds-serve.
 *
 * The daemon runs a thread per connection, so a handler may block while its
 * request is generated; it wakes every 100 ms to check that the client is
 * still connected (a zero-byte MSG_PEEK read means the peer closed) and, if
 * not, cancels the request so the engine frees its slot at the next step.
 * The request-completed callback cancels too (a stream whose write failed).
 *
 * Routes: GET (and HEAD) /health, /v1/models, /v1/models/{id}; POST
 * /v1/completions, POST /v1/chat/completions, and vLLM's POST /tokenize and
 * /detokenize; CORS preflights (OPTIONS) on any path. Errors are OpenAI error
 * objects: 400 bad JSON / types / values or a request that can never be
 * admitted, 401 missing or wrong bearer token, 404 unknown route or model, 405
 * wrong method, 413 body over the limit, 503 queue full or shutting down, 500
 * engine failure. Route, method, key and Content-Length are checked on the
 * headers, before a body byte is read. */
#include "server_internal.h"
#include "server_conn.h"
#include "chat_reasoning.h"
#include "chat_template.h"
#include "dsq_sbuf.h"

#include <json-c/json.h>
#include <microhttpd.h>
#include <arpa/inet.h>
#include <ctype.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

typedef struct conn_ctx {
    dsq_server *s;
    char *body;
    size_t len, cap;
    int too_big;
    srv_request *req;          /* holds one reference */
} conn_ctx;

typedef struct stream_ctx {
    dsq_server *s;
    struct MHD_Connection *c;
    srv_request *req;          /* holds one reference */
    size_t *sent;              /* bytes of text sent per job */
    struct stream_pos {        /* per job: */
        size_t tok;            /* log-prob positions sent (echoed prompt, then generated) */
        size_t off;            /* their characters (text_offset) */
        int echoed;            /* the prompt went out (echo) */
    } *pos;
    int *final_sent;
    int usage_sent, done_sent;
    int role_sent;             /* chat: the first chunk (delta.role) went out */
    dsq_reasoning_stream *rs;  /* chat: per job */
    char *out;                 /* pending bytes */
    size_t out_len, out_off;
} stream_ctx;

static const char *json_str(json_object *j)
{
    return json_object_to_json_string_ext(j, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
}

/* CORS as vLLM's --allowed-origins (Starlette's CORSMiddleware): an
 * allowed Origin is echoed in Access-Control-Allow-Origin ("*" when any
 * origin is allowed), others get no CORS header and the browser keeps the
 * answer from the page. */
static int origin_allowed(const dsq_server *s, const char *origin, int *any)
{
    *any = 0;
    for (int i = 0; origin && i < s->o.n_allowed_origins; i++) {
        if (!strcmp(s->o.allowed_origins[i], "*")) { *any = 1; return 1; }
        if (!strcmp(s->o.allowed_origins[i], origin)) return 1;
    }
    return 0;
}

static void add_cors(struct MHD_Connection *c, struct MHD_Response *r)
{
    const dsq_server *s = srv_conn_server(c);
    const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
    int any;
    if (!s || !origin_allowed(s, origin, &any)) return;
    MHD_add_response_header(r, "Access-Control-Allow-Origin", any ? "*" : origin);
    if (!any) MHD_add_response_header(r, "Vary", "Origin");
}

static enum MHD_Result send_text(struct MHD_Connection *c, unsigned code, char *text, const char *type)
{
    if (!text) return MHD_NO;
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    if (!r) { free(text); return MHD_NO; }
    MHD_add_response_header(r, "Content-Type", type);
    add_cors(c, r);
    enum MHD_Result ret = MHD_queue_response(c, code, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result send_json(struct MHD_Connection *c, unsigned code, json_object *j)
{
    char *t = strdup(json_str(j));
    json_object_put(j);
    return send_text(c, code, t, "application/json");
}

static enum MHD_Result send_error(dsq_server *s, struct MHD_Connection *c, unsigned code, const char *type,
                                  const char *param, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
static enum MHD_Result send_error(dsq_server *s, struct MHD_Connection *c, unsigned code, const char *type,
                                  const char *param, const char *fmt, ...)
{
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (code == 400 || code == 413) {
        pthread_mutex_lock(&s->mu);
        s->stats.bad_requests++;
        pthread_mutex_unlock(&s->mu);
    }
    return send_text(c, code, dsq_srv_error_json(msg, type, param, (int)code), "application/json");
}

static int client_gone(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return 1;
    struct pollfd pfd = { .fd = ci->connect_fd, .events = POLLIN | POLLRDHUP };
    if (poll(&pfd, 1, 0) <= 0) return 0;
    if (pfd.revents & (POLLRDHUP | POLLHUP | POLLERR)) return 1;
    char b;
    return recv(ci->connect_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

static void conn_timeout(dsq_server *s, struct MHD_Connection *c, int working)
{
    /* none while the server works on the answer (the client waits for it;
     * client_gone notices one that leaves); the idle limit again after,
     * counted from now */
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, working ? 0u : (unsigned)s->o.idle_timeout);
}

static void timed_wait(dsq_server *s, int ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += (long)ms * 1000000L;
    if (ts.tv_nsec >= 1000000000L) { ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
    pthread_cond_timedwait(&s->cv, &s->mu, &ts);
}

static void cancel_locked(dsq_server *s, srv_request *r)
{
    if (r->n_finished < r->n_jobs && !r->cancelled) {
        r->cancelled = 1;
        pthread_cond_signal(&s->work_cv);
    }
}

/* ---- JSON bodies ----------------------------------------------------------- */

static json_object *token_text(const dsq_server *s, int32_t id)
{
    char *t = NULL;
    size_t n = 0;
    if (dsq_tokenizer_decode(s->tok, &id, 1, 0, &t, &n) < 0 || !t) { free(t); return json_object_new_string(""); }
    json_object *j = json_object_new_string_len(t, (int)n);
    free(t);
    return j;
}

/* Characters of UTF-8 text: text_offset counts them, as OpenAI and vLLM
 * (Python string lengths) do. */
static size_t utf8_chars(const char *t, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++) c += ((unsigned char)t[i] & 0xC0) != 0x80;
    return c;
}

/* A log-prob as JSON: -inf (and NaN) is no JSON number; OpenAI and vLLM
 * send -9999.0. */
static json_object *lp_num(double lp) { return json_object_new_double(lp > -9999.0 ? lp : -9999.0); }

/* One position's top_logprobs: the chosen token first, then the k most
 * likely, keyed by token text (a key once), so up to k + 1 entries as
 * OpenAI and vLLM (serving_completion.py _create_completion_logprobs) give. */
static json_object *top_obj(const dsq_server *s, int32_t id, double lp, const int32_t *ids, const double *lps, size_t k)
{
    json_object *o = json_object_new_object();
    for (size_t i = 0; i <= k; i++) {
        json_object *t = token_text(s, i ? ids[i - 1] : id);
        const char *key = json_object_get_string(t);
        if (!json_object_object_get_ex(o, key, NULL)) json_object_object_add(o, key, lp_num(i ? lps[i - 1] : lp));
        json_object_put(t);
    }
    return o;
}

/* OpenAI legacy logprobs: tokens, token_logprobs, top_logprobs, text_offset
 * (plus token_ids, which vLLM can also return, so clients need not map
 * strings back to ids), for positions [from, to) of the echoed prompt
 * followed by the generated tokens; *off: the character offset of `from`,
 * advanced past `to` (a stream continues where its last event ended). */
static json_object *logprobs_obj(const dsq_server *s, const srv_job *j, size_t from, size_t to, size_t *off)
{
    const dsq_srv_params *p = &j->req->p;
    size_t np = p->echo ? j->n_prompt : 0;
    size_t pk = (size_t)p->logprobs < j->prompt_k ? (size_t)p->logprobs : j->prompt_k; /* called with logprobs >= 0 */
    json_object *L = json_object_new_object(), *toks = json_object_new_array(), *lps = json_object_new_array(),
                *tops = json_object_new_array(), *offs = json_object_new_array(), *tids = json_object_new_array();
    for (size_t i = from; i < to; i++) {
        int in_prompt = i < np;
        size_t g = in_prompt ? 0 : i - np;
        int32_t id = in_prompt ? j->prompt[i] : j->gen[g];
        json_object *t = token_text(s, id);
        json_object_array_add(offs, json_object_new_int64((int64_t)*off));
        *off += utf8_chars(json_object_get_string(t), (size_t)json_object_get_string_len(t));
        json_object_array_add(toks, t);
        json_object_array_add(tids, json_object_new_int(id));
        if (in_prompt && i == 0) {
            json_object_array_add(lps, NULL);
            json_object_array_add(tops, NULL);
        } else if (in_prompt) {
            json_object_array_add(lps, lp_num(j->prompt_lp[i]));
            json_object_array_add(tops, top_obj(s, id, j->prompt_lp[i], j->prompt_top_id + i * j->prompt_k,
                                                j->prompt_top_lp + i * j->prompt_k, pk));
        } else {
            json_object_array_add(lps, lp_num(j->gen_lp[g]));
            json_object_array_add(tops, top_obj(s, id, j->gen_lp[g], j->gen_top_id + g * j->gen_k,
                                                j->gen_top_lp + g * j->gen_k, j->gen_k));
        }
    }
    json_object_object_add(L, "tokens", toks);
    json_object_object_add(L, "token_logprobs", lps);
    json_object_object_add(L, "top_logprobs", tops);
    json_object_object_add(L, "text_offset", offs);
    json_object_object_add(L, "token_ids", tids);
    return L;
}

/* vLLM's choices[].prompt_logprobs (vllm/entrypoints/openai/serving_completion.py
 * at 00463e627b4cbe549b5e9815a2bdb0100ae88ea9,
 * request_output_to_completion_response; Logprob in vllm/logprobs.py):
 * [null, {"<id>": {"logprob", "rank", "decoded_token"}, ...}, ...], one map
 * per prompt position holding the prompt token first, then the top k by
 * rank 1..k (the prompt token once when it is among them). */
static json_object *lp_entry(const dsq_server *s, int32_t id, double lp, int64_t rank)
{
    json_object *e = json_object_new_object();
    json_object_object_add(e, "logprob", lp_num(lp));
    json_object_object_add(e, "rank", json_object_new_int64(rank));
    json_object_object_add(e, "decoded_token", token_text(s, id));
    return e;
}

static json_object *prompt_logprobs_obj(const dsq_server *s, const srv_job *j)
{
    int k = srv_prompt_logprobs_k(&j->req->p);
    if (k < 0) return NULL;
    if ((size_t)k > j->prompt_k) k = (int)j->prompt_k; /* the vocabulary is smaller */
    json_object *a = json_object_new_array();
    json_object_array_add(a, NULL);
    for (size_t i = 1; i < j->n_prompt; i++) {
        json_object *m = json_object_new_object();
        char key[16];
        snprintf(key, sizeof key, "%d", (int)j->prompt[i]);
        json_object_object_add(m, key, lp_entry(s, j->prompt[i], j->prompt_lp[i], j->prompt_rank[i]));
        for (int r = 0; r < k; r++) {
            int32_t id = j->prompt_top_id[i * j->prompt_k + (size_t)r];
            snprintf(key, sizeof key, "%d", (int)id);
            if (!json_object_object_get_ex(m, key, NULL))
                json_object_object_add(m, key, lp_entry(s, id, j->prompt_top_lp[i * j->prompt_k + (size_t)r], r + 1));
        }
        json_object_array_add(a, m);
    }
    return a;
}

static json_object *head_obj(const dsq_server *s, const srv_request *r, int chunk)
{
    json_object *j = json_object_new_object();
    char id[64];
    snprintf(id, sizeof id, "%s-dsq-%llu", r->p.chat ? "chatcmpl" : "cmpl", (unsigned long long)r->id);
    json_object_object_add(j, "id", json_object_new_string(id));
    json_object_object_add(j, "object", json_object_new_string(!r->p.chat ? "text_completion"
                                                               : chunk ? "chat.completion.chunk" : "chat.completion"));
    json_object_object_add(j, "created", json_object_new_int64(r->created));
    json_object_object_add(j, "model", json_object_new_string(s->served_name));
    return j;
}

static json_object *usage_obj(const srv_request *r)
{
    int64_t pt = 0, ct = 0;
    for (int i = 0; i < r->n_jobs; i++) { pt += (int64_t)r->jobs[i].n_prompt; ct += (int64_t)r->jobs[i].n_gen; }
    json_object *u = json_object_new_object();
    json_object_object_add(u, "prompt_tokens", json_object_new_int64(pt));
    json_object_object_add(u, "completion_tokens", json_object_new_int64(ct));
    json_object_object_add(u, "total_tokens", json_object_new_int64(pt + ct));
    return u;
}

static const char *finish_name(int f) { return f == SRV_FIN_LENGTH ? "length" : "stop"; }

/* The echoed prompt: the request's text, or the ids decoded (*owned: what
 * to free). */
static void echo_text(const dsq_server *s, const srv_job *j, const char **t, size_t *n, char **owned)
{
    const dsq_srv_prompt *pr = &j->req->p.prompts[j->index];
    char *d = NULL;
    size_t dl = 0;
    *owned = NULL;
    if (pr->text) {
        *t = pr->text;
        *n = pr->len;
        return;
    }
    if (dsq_tokenizer_decode(s->tok, j->prompt, j->n_prompt, 0, &d, &dl) < 0 || !d) {
        free(d);
        d = NULL;
        dl = 0;
    }
    *t = d ? d : "";
    *n = dl;
    *owned = d;
}

/* a + b as a JSON string */
static json_object *str2(const char *a, size_t an, const char *b, size_t bn)
{
    if (!an) return json_object_new_string_len(b, (int)bn);
    char *all = malloc(an + bn + 1);
    if (!all) return NULL;
    memcpy(all, a, an);
    if (bn) memcpy(all + an, b, bn);
    json_object *o = json_object_new_string_len(all, (int)(an + bn));
    free(all);
    return o;
}

/* The chat message of one choice: content and reasoning_content split as
 * the request's reasoning parser says (null where vLLM answers null). */
static json_object *chat_message(const srv_request *r, const srv_job *jb)
{
    const char *rs, *cs;
    size_t rn, cn;
    int hr, hc;
    dsq_reasoning_split(r->p.reasoning, jb->text ? jb->text : "", jb->len, &rs, &rn, &hr, &cs, &cn, &hc);
    json_object *m = json_object_new_object();
    json_object_object_add(m, "role", json_object_new_string("assistant"));
    json_object_object_add(m, "content", hc ? json_object_new_string_len(cs, (int)cn) : NULL);
    json_object_object_add(m, "reasoning_content", hr ? json_object_new_string_len(rs, (int)rn) : NULL);
    json_object_object_add(m, "tool_calls", json_object_new_array());
    return m;
}

static json_object *completion_obj(const dsq_server *s, const srv_request *r)
{
    json_object *j = head_obj(s, r, 0), *ch = json_object_new_array();
    if (r->p.chat) {
        for (int i = 0; i < r->n_jobs; i++) {
            const srv_job *jb = &r->jobs[i];
            json_object *c = json_object_new_object();
            json_object_object_add(c, "index", json_object_new_int(i));
            json_object_object_add(c, "message", chat_message(r, jb));
            json_object_object_add(c, "logprobs", NULL);
            json_object_object_add(c, "finish_reason", json_object_new_string(finish_name(jb->finished)));
            json_object_array_add(ch, c);
        }
        json_object_object_add(j, "choices", ch);
        json_object_object_add(j, "usage", usage_obj(r));
        return j;
    }
    for (int i = 0; i < r->n_jobs; i++) {
        const srv_job *jb = &r->jobs[i];
        json_object *c = json_object_new_object();
        const char *pt = "";
        size_t pl = 0, off = 0;
        char *owned = NULL;
        if (r->p.echo) echo_text(s, jb, &pt, &pl, &owned);
        json_object_object_add(c, "index", json_object_new_int(i));
        json_object_object_add(c, "text", str2(pt, pl, jb->text ? jb->text : "", jb->len));
        free(owned);
        json_object_object_add(c, "logprobs", r->p.logprobs >= 0 ?
                               logprobs_obj(s, jb, 0, (r->p.echo ? jb->n_prompt : 0) + jb->n_gen, &off) : NULL);
        json_object_object_add(c, "finish_reason", json_object_new_string(finish_name(jb->finished)));
        json_object_object_add(c, "prompt_logprobs", prompt_logprobs_obj(s, jb));
        json_object_array_add(ch, c);
    }
    json_object_object_add(j, "choices", ch);
    json_object_object_add(j, "usage", usage_obj(r));
    return j;
}

/* ---- streaming -------------------------------------------------------------- */

static int sse_append(stream_ctx *sc, json_object *j)
{
    size_t n;
    const char *t = json_object_to_json_string_length(j, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &n);
    char *b = realloc(sc->out, sc->out_len + n + 8);
    if (!b) { json_object_put(j); return -1; }
    sc->out = b;
    memcpy(b + sc->out_len, "data: ", 6);
    memcpy(b + sc->out_len + 6, t, n);
    memcpy(b + sc->out_len + 6 + n, "\n\n", 2);
    sc->out_len += n + 8;
    json_object_put(j);
    return 0;
}

/* A chat chunk: delta with the role (first), reasoning and / or content. */
static json_object *chat_chunk(const dsq_server *s, const srv_request *r, int idx, int role,
                               const dsq_sbuf *rb, const dsq_sbuf *cb, int fin)
{
    json_object *j = head_obj(s, r, 1), *ch = json_object_new_array(), *c = json_object_new_object();
    json_object *delta = json_object_new_object();
    if (role) {
        json_object_object_add(delta, "role", json_object_new_string("assistant"));
        json_object_object_add(delta, "content", json_object_new_string(""));
    }
    if (rb && rb->n) json_object_object_add(delta, "reasoning_content", json_object_new_string_len(rb->p, (int)rb->n));
    if (cb && cb->n) json_object_object_add(delta, "content", json_object_new_string_len(cb->p, (int)cb->n));
    json_object_object_add(c, "index", json_object_new_int(idx));
    json_object_object_add(c, "delta", delta);
    json_object_object_add(c, "logprobs", NULL);
    json_object_object_add(c, "finish_reason", fin ? json_object_new_string(finish_name(fin)) : NULL);
    json_object_array_add(ch, c);
    json_object_object_add(j, "choices", ch);
    return j;
}

/* The next chat events of job i: new reasoning / content, then the end. */
static int chat_fill(stream_ctx *sc, int i, int *any)
{
    srv_request *r = sc->req;
    srv_job *j = &r->jobs[i];
    const char *t = j->finished ? j->text : j->pub_text;
    size_t n = j->finished ? j->len : j->pub_len;
    dsq_sbuf rb = { 0 }, cb = { 0 };
    dsq_reasoning_stream_next(&sc->rs[i], t ? t : "", t ? n : 0, j->finished != 0, &rb, &cb);
    int rc = 0;
    if (rb.oom || cb.oom) rc = -1;
    else if (rb.n || cb.n) {
        rc = sse_append(sc, chat_chunk(sc->s, r, i, 0, &rb, &cb, 0));
        *any = 1;
    }
    if (rc == 0 && j->finished) {
        rc = sse_append(sc, chat_chunk(sc->s, r, i, 0, NULL, NULL, j->finished));
        sc->final_sent[i] = 1;
        *any = 1;
    }
    free(rb.p);
    free(cb.p);
    return rc;
}

static json_object *chunk(const dsq_server *s, const srv_request *r, int idx, json_object *text, json_object *lp, int fin)
{
    json_object *j = head_obj(s, r, 1), *ch = json_object_new_array(), *c = json_object_new_object();
    json_object_object_add(c, "index", json_object_new_int(idx));
    json_object_object_add(c, "text", text);
    json_object_object_add(c, "logprobs", lp);
    json_object_object_add(c, "finish_reason", fin ? json_object_new_string(finish_name(fin)) : NULL);
    json_object_array_add(ch, c);
    json_object_object_add(j, "choices", ch);
    return j;
}

/* A completion event of job i: text t[0..n), the prompt before it in the
 * job's first event (echo, as vLLM streams it), and the log-probs of the
 * positions not sent yet up to `to`. */
static int completion_event(stream_ctx *sc, int i, const char *t, size_t n, size_t to, int fin)
{
    srv_request *r = sc->req;
    const srv_job *j = &r->jobs[i];
    struct stream_pos *ps = &sc->pos[i];
    const char *pt = "";
    size_t pl = 0;
    char *owned = NULL;
    if (r->p.echo && !ps->echoed) {
        echo_text(sc->s, j, &pt, &pl, &owned);
        ps->echoed = 1;
    }
    json_object *text = str2(pt, pl, t, n);
    free(owned);
    json_object *lp = r->p.logprobs >= 0 ? logprobs_obj(sc->s, j, ps->tok, to, &ps->off) : NULL;
    ps->tok = to;
    return sse_append(sc, chunk(sc->s, r, i, text, lp, fin));
}

/* Build the next events under the lock; 1 produced something, 0 nothing yet,
 * -1 the stream is over (after [DONE]) or failed. */
static int stream_fill(stream_ctx *sc)
{
    dsq_server *s = sc->s;
    srv_request *r = sc->req;
    int any = 0, all = 1;
    if (r->p.chat && !sc->role_sent) {
        for (int i = 0; i < r->n_jobs; i++)
            if (sse_append(sc, chat_chunk(s, r, i, 1, NULL, NULL, 0)) < 0) return -1;
        sc->role_sent = 1;
        any = 1;
    }
    for (int i = 0; i < r->n_jobs; i++) {
        srv_job *j = &r->jobs[i];
        if (sc->final_sent[i]) continue;
        if (j->finished == SRV_FIN_ERROR) return -1;
        if (r->p.chat) {
            if (!j->finished) all = 0;
            if (chat_fill(sc, i, &any) < 0) return -1;
            continue;
        }
        size_t np = r->p.echo ? j->n_prompt : 0;
        if (j->finished) {
            size_t from = sc->sent[i] < j->len ? sc->sent[i] : j->len;
            if (completion_event(sc, i, j->text ? j->text + from : "", j->len - from, np + j->n_gen, j->finished) < 0) return -1;
            sc->final_sent[i] = 1;
            any = 1;
        } else {
            all = 0;
            /* new text, or new tokens whose log-probs (or the echoed
             * prompt) are asked for; tokens are published after the prefill,
             * so the prompt's scores are there too */
            int toks = j->pub_ntok > 0 && np + j->pub_ntok > sc->pos[i].tok &&
                       (r->p.logprobs >= 0 || (r->p.echo && !sc->pos[i].echoed));
            if (j->pub_len > sc->sent[i] || toks) {
                size_t from = sc->sent[i] < j->pub_len ? sc->sent[i] : j->pub_len;
                if (completion_event(sc, i, j->pub_text ? j->pub_text + from : "", j->pub_len - from, np + j->pub_ntok, 0) < 0)
                    return -1;
                sc->sent[i] = j->pub_len > sc->sent[i] ? j->pub_len : sc->sent[i];
                any = 1;
            }
        }
    }
    if (all && !sc->done_sent) {
        if (r->p.include_usage && !sc->usage_sent) {
            json_object *u = head_obj(s, r, 1);
            json_object_object_add(u, "choices", json_object_new_array());
            json_object_object_add(u, "usage", usage_obj(r));
            if (sse_append(sc, u) < 0) return -1;
            sc->usage_sent = 1;
        }
        char *b = realloc(sc->out, sc->out_len + 14);
        if (!b) return -1;
        sc->out = b;
        memcpy(b + sc->out_len, "data: [DONE]\n\n", 14);
        sc->out_len += 14;
        sc->done_sent = 1;
        return 1;
    }
    if (all && sc->done_sent) return -1;
    return any;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    stream_ctx *sc = cls;
    dsq_server *s = sc->s;
    (void)pos;
    for (;;) {
        if (sc->out_off < sc->out_len) {
            size_t n = sc->out_len - sc->out_off < max ? sc->out_len - sc->out_off : max;
            memcpy(buf, sc->out + sc->out_off, n);
            sc->out_off += n;
            conn_timeout(s, sc->c, 0); /* the client must take it within the idle limit */
            return (ssize_t)n;
        }
        conn_timeout(s, sc->c, 1);  /* waiting for tokens is not the client's idling */
        sc->out_len = sc->out_off = 0;
        pthread_mutex_lock(&s->mu);
        int got;
        while ((got = stream_fill(sc)) == 0) {
            timed_wait(s, 100);
            if (sc->req->cancelled) { got = -2; break; }
            pthread_mutex_unlock(&s->mu);
            int gone = client_gone(sc->c);
            pthread_mutex_lock(&s->mu);
            if (gone) { cancel_locked(s, sc->req); got = -2; break; }
        }
        if (got < 0 && sc->out_len == 0) {
            int done = sc->done_sent;
            if (!done) cancel_locked(s, sc->req);
            pthread_mutex_unlock(&s->mu);
            return done ? MHD_CONTENT_READER_END_OF_STREAM : MHD_CONTENT_READER_END_WITH_ERROR;
        }
        pthread_mutex_unlock(&s->mu);
    }
}

static void stream_free(void *cls)
{
    stream_ctx *sc = cls;
    pthread_mutex_lock(&sc->s->mu);
    cancel_locked(sc->s, sc->req);
    srv_request_unref_locked(sc->req);
    pthread_mutex_unlock(&sc->s->mu);
    free(sc->sent);
    free(sc->pos);
    free(sc->final_sent);
    free(sc->rs);
    free(sc->out);
    free(sc);
}

/* ---- routes ------------------------------------------------------------------ */

static json_object *model_obj(const dsq_server *s)
{
    json_object *m = json_object_new_object();
    json_object_object_add(m, "id", json_object_new_string(s->served_name));
    json_object_object_add(m, "object", json_object_new_string("model"));
    json_object_object_add(m, "created", json_object_new_int64((int64_t)time(NULL)));
    json_object_object_add(m, "owned_by", json_object_new_string("dsq"));
    json_object_object_add(m, "root", json_object_new_string(s->o.model_path));
    json_object_object_add(m, "max_model_len", json_object_new_int64(s->ctx));
    return m;
}

static enum MHD_Result do_models(dsq_server *s, struct MHD_Connection *c)
{
    json_object *j = json_object_new_object(), *a = json_object_new_array();
    json_object_array_add(a, model_obj(s));
    json_object_object_add(j, "object", json_object_new_string("list"));
    json_object_object_add(j, "data", a);
    return send_json(c, 200, j);
}

/* A model id in a path as it was sent, %XX escapes decoded ("org%2Fname"). */
static int same_id(const char *path, const char *id)
{
    for (;;) {
        int ch = (unsigned char)*path;
        if (ch == '%') {
            if (!isxdigit((unsigned char)path[1]) || !isxdigit((unsigned char)path[2])) return 0;
            char hex[3] = { path[1], path[2], 0 };
            ch = (int)strtol(hex, NULL, 16);
            if (!ch) return 0;
            path += 3;
        } else if (ch) {
            path++;
        }
        if (ch != (unsigned char)*id) return 0;
        if (!ch) return 1;
        id++;
    }
}

/* GET /v1/models/{id}: the model object, as the OpenAI API's retrieve. */
static enum MHD_Result do_model(dsq_server *s, struct MHD_Connection *c, const char *id)
{
    if (!same_id(id, s->served_name))
        return send_error(s, c, 404, "invalid_request_error", "model", "the model '%s' does not exist (this server serves '%s')",
                          id, s->served_name);
    return send_json(c, 200, model_obj(s));
}

static enum MHD_Result do_completions(dsq_server *s, struct MHD_Connection *c, conn_ctx *cc, int chat)
{
    if (cc->too_big)
        return send_error(s, c, 413, "invalid_request_error", NULL, "request body over the limit of %zu bytes", s->o.lim.max_body);
    if (chat && !s->chat)
        return send_error(s, c, 400, "invalid_request_error", "messages", "chat completions are not available: %s", s->chat_err);
    dsq_srv_params p;
    char err[600], param[64];
    int rc = chat ? dsq_srv_parse_chat(cc->body ? cc->body : "", cc->len, &s->o.lim, s->chat, s->o.reasoning_parser, &p,
                                       err, sizeof err, param, sizeof param)
                  : dsq_srv_parse_completion(cc->body ? cc->body : "", cc->len, &s->o.lim, &p, err, sizeof err, param, sizeof param);
    if (rc == DSQ_ERR_NOMEM) return send_error(s, c, 500, "server_error", NULL, "out of memory");
    if (rc < 0) return send_error(s, c, 400, "invalid_request_error", param, "%s", err);
    if (p.model && strcmp(p.model, s->served_name)) {
        enum MHD_Result ret = send_error(s, c, 404, "invalid_request_error", "model", "the model '%s' does not exist (this server serves '%s')",
                                         p.model, s->served_name);
        dsq_srv_params_release(&p);
        return ret;
    }
    srv_request *r = calloc(1, sizeof *r);
    if (!r || !(r->jobs = calloc((size_t)p.n_prompts, sizeof *r->jobs))) {
        free(r);
        dsq_srv_params_release(&p);
        return send_error(s, c, 500, "server_error", NULL, "out of memory");
    }
    r->p = p;
    r->n_jobs = p.n_prompts;
    r->refs = 1;
    r->created = (int64_t)time(NULL);
    /* text prompts are tokenized as HF / vLLM do: specials parsed, BOS added
     * when the tokenizer adds one (ds-eval's --bos auto); a rendered
     * conversation carries its own BOS, so nothing is added to it (vLLM's
     * add_special_tokens=false for chat) */
    const char *msg = NULL;
    char mbuf[300];
    for (int i = 0; i < r->n_jobs && !msg; i++) {
        srv_job *j = &r->jobs[i];
        dsq_srv_prompt *pr = &r->p.prompts[i];
        j->req = r;
        j->index = i;
        j->slot = -1;
        if (pr->ids) {
            j->prompt = malloc(pr->n_ids * sizeof *j->prompt);
            if (j->prompt) memcpy(j->prompt, pr->ids, pr->n_ids * sizeof *j->prompt);
            j->n_prompt = pr->n_ids;
            if (!j->prompt) msg = "out of memory";
        } else if (dsq_tokenizer_encode_ex(s->tok, pr->text, pr->len,
                                           DSQ_TOK_PARSE_SPECIAL | (r->p.chat ? 0 : DSQ_TOK_ADD_SPECIAL),
                                           &j->prompt, &j->n_prompt, NULL) < 0) {
            msg = "cannot tokenize the prompt";
        }
        if (!msg && j->n_prompt == 0) msg = "the prompt is empty (no tokens)";
        if (!msg && r->p.max_tokens_auto && (int64_t)j->n_prompt < s->ctx && s->ctx - (int64_t)j->n_prompt < r->p.max_tokens)
            r->p.max_tokens = s->ctx - (int64_t)j->n_prompt;
        for (size_t k = 0; !msg && k < j->n_prompt; k++)
            if (j->prompt[k] < 0 || (size_t)j->prompt[k] >= s->vocab) msg = "the prompt has a token id beyond the model's vocabulary";
        if (!msg && (int64_t)j->n_prompt + r->p.max_tokens > s->ctx) {
            snprintf(mbuf, sizeof mbuf, "this model's maximum context length is %lld tokens; the prompt has %zu and max_tokens is %lld",
                     (long long)s->ctx, j->n_prompt, (long long)r->p.max_tokens);
            msg = mbuf;
        }
        j->rng = r->p.has_seed ? r->p.seed + (uint64_t)i : (uint64_t)time(NULL) ^ ((uint64_t)(uintptr_t)j << 16);
    }
    pthread_mutex_lock(&s->mu);
    r->id = ++s->next_id;
    pthread_mutex_unlock(&s->mu);
    if (!msg && (int64_t)r->n_jobs > (int64_t)s->o.slots + s->o.queue) {
        /* never admitted, however long the client waits: not a 503 */
        snprintf(mbuf, sizeof mbuf, "the request has %d prompts; this server takes at most %lld at a time (%d slots + a queue of %d)",
                 r->n_jobs, (long long)s->o.slots + s->o.queue, s->o.slots, s->o.queue);
        msg = mbuf;
    }
    if (msg) {
        const char *bad = r->p.chat ? "messages" : "prompt"; /* r may be freed by the unref */
        pthread_mutex_lock(&s->mu);
        srv_request_unref_locked(r);
        pthread_mutex_unlock(&s->mu);
        return send_error(s, c, 400, "invalid_request_error", bad, "%s", msg);
    }
    rc = srv_submit(s, r);
    if (rc < 0) {
        pthread_mutex_lock(&s->mu);
        srv_request_unref_locked(r);
        pthread_mutex_unlock(&s->mu);
        return send_error(s, c, 503, "server_error", NULL, rc == DSQ_ERR_STATE ? "the server is shutting down"
                                                                        : "the server is busy (request queue full); retry later");
    }
    cc->req = r; /* cc's reference: dropped by the completed callback */
    if (r->p.stream) {
        stream_ctx *sc = calloc(1, sizeof *sc);
        if (sc) {
            sc->sent = calloc((size_t)r->n_jobs, sizeof *sc->sent);
            sc->pos = calloc((size_t)r->n_jobs, sizeof *sc->pos);
            sc->final_sent = calloc((size_t)r->n_jobs, sizeof *sc->final_sent);
            sc->rs = calloc((size_t)r->n_jobs, sizeof *sc->rs);
        }
        if (!sc || !sc->sent || !sc->pos || !sc->final_sent || !sc->rs) {
            if (sc) { free(sc->sent); free(sc->pos); free(sc->final_sent); free(sc->rs); free(sc); }
            return MHD_NO;
        }
        for (int i = 0; i < r->n_jobs; i++) dsq_reasoning_stream_init(&sc->rs[i], r->p.reasoning);
        sc->s = s;
        sc->c = c;
        sc->req = r;
        pthread_mutex_lock(&s->mu);
        r->refs++;
        pthread_mutex_unlock(&s->mu);
        struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_read, sc, stream_free);
        if (!resp) { stream_free(sc); return MHD_NO; }
        MHD_add_response_header(resp, "Content-Type", "text/event-stream");
        MHD_add_response_header(resp, "Cache-Control", "no-cache");
        add_cors(c, resp);
        enum MHD_Result ret = MHD_queue_response(c, 200, resp);
        MHD_destroy_response(resp);
        return ret;
    }
    conn_timeout(s, c, 1);
    pthread_mutex_lock(&s->mu);
    while (r->n_finished < r->n_jobs && !r->cancelled) {
        timed_wait(s, 100);
        pthread_mutex_unlock(&s->mu);
        int gone = client_gone(c);
        pthread_mutex_lock(&s->mu);
        if (gone) cancel_locked(s, r);
    }
    int cancelled = r->cancelled && r->n_finished < r->n_jobs;
    pthread_mutex_unlock(&s->mu);
    conn_timeout(s, c, 0);
    if (cancelled) return MHD_NO; /* client gone: nothing to answer */
    for (int i = 0; i < r->n_jobs; i++)
        if (r->jobs[i].finished == SRV_FIN_ERROR)
            return send_error(s, c, 500, "server_error", NULL, "generation failed: %s", r->jobs[i].err);
    return send_json(c, 200, completion_obj(s, r));
}

/* vLLM's /tokenize: {"count", "max_model_len", "tokens", "token_strs"}. */
static enum MHD_Result do_tokenize(dsq_server *s, struct MHD_Connection *c, conn_ctx *cc)
{
    if (cc->too_big)
        return send_error(s, c, 413, "invalid_request_error", NULL, "request body over the limit of %zu bytes", s->o.lim.max_body);
    dsq_srv_tokenize q;
    char err[600], param[64];
    int rc = dsq_srv_parse_tokenize(cc->body ? cc->body : "", cc->len, &s->o.lim, s->chat, &q, err, sizeof err, param, sizeof param);
    if (rc == DSQ_ERR_NOMEM) return send_error(s, c, 500, "server_error", NULL, "out of memory");
    if (rc < 0 && !s->chat && !strcmp(param, "messages"))
        return send_error(s, c, 400, "invalid_request_error", "messages", "chat templates are not available: %s", s->chat_err);
    if (rc < 0) return send_error(s, c, 400, "invalid_request_error", param, "%s", err);
    if (q.model && strcmp(q.model, s->served_name)) {
        enum MHD_Result ret = send_error(s, c, 404, "invalid_request_error", "model", "the model '%s' does not exist (this server serves '%s')",
                                         q.model, s->served_name);
        dsq_srv_tokenize_release(&q);
        return ret;
    }
    int32_t *ids = NULL;
    size_t n = 0;
    rc = dsq_tokenizer_encode_ex(s->tok, q.text, q.len, DSQ_TOK_PARSE_SPECIAL | (q.add_special ? DSQ_TOK_ADD_SPECIAL : 0),
                                 &ids, &n, NULL);
    if (rc < 0) {
        dsq_srv_tokenize_release(&q);
        return send_error(s, c, 500, "server_error", NULL, "cannot tokenize the prompt");
    }
    json_object *j = json_object_new_object(), *t = json_object_new_array();
    json_object *strs = q.return_token_strs ? json_object_new_array() : NULL;
    for (size_t i = 0; i < n; i++) {
        json_object_array_add(t, json_object_new_int(ids[i]));
        if (strs) {
            const char *pc = dsq_tokenizer_piece(s->tok, ids[i]);
            json_object_array_add(strs, json_object_new_string(pc ? pc : ""));
        }
    }
    json_object_object_add(j, "count", json_object_new_int64((int64_t)n));
    json_object_object_add(j, "max_model_len", json_object_new_int64(s->ctx));
    json_object_object_add(j, "tokens", t);
    json_object_object_add(j, "token_strs", strs);
    free(ids);
    dsq_srv_tokenize_release(&q);
    return send_json(c, 200, j);
}

/* vLLM's /detokenize: {"prompt"} (special tokens kept, as vLLM decodes). */
static enum MHD_Result do_detokenize(dsq_server *s, struct MHD_Connection *c, conn_ctx *cc)
{
    if (cc->too_big)
        return send_error(s, c, 413, "invalid_request_error", NULL, "request body over the limit of %zu bytes", s->o.lim.max_body);
    char err[600], param[64], *model = NULL;
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = dsq_srv_parse_detokenize(cc->body ? cc->body : "", cc->len, &s->o.lim, &model, &ids, &n, err, sizeof err,
                                      param, sizeof param);
    if (rc == DSQ_ERR_NOMEM) return send_error(s, c, 500, "server_error", NULL, "out of memory");
    if (rc < 0) return send_error(s, c, 400, "invalid_request_error", param, "%s", err);
    if (model && strcmp(model, s->served_name)) {
        enum MHD_Result ret = send_error(s, c, 404, "invalid_request_error", "model", "the model '%s' does not exist (this server serves '%s')",
                                         model, s->served_name);
        free(model);
        free(ids);
        return ret;
    }
    free(model);
    char *text = NULL;
    size_t tl = 0;
    /* ids below the model's vocabulary may still have no token (padding rows) */
    for (size_t i = 0; i < n; i++)
        if (!dsq_tokenizer_piece(s->tok, ids[i])) {
            int32_t bad_id = ids[i];
            free(ids);
            return send_error(s, c, 400, "invalid_request_error", "tokens", "token id %d has no token in the tokenizer", bad_id);
        }
    rc = dsq_tokenizer_decode(s->tok, ids, n, 0, &text, &tl);
    free(ids);
    if (rc < 0) {
        free(text);
        return send_error(s, c, 500, "server_error", NULL, "cannot decode the tokens");
    }
    json_object *j = json_object_new_object();
    json_object_object_add(j, "prompt", json_object_new_string_len(text, (int)tl));
    free(text);
    return send_json(c, 200, j);
}

static int authorized(dsq_server *s, struct MHD_Connection *c)
{
    if (!s->api_key) return 1;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (!h || strncmp(h, "Bearer ", 7)) return 0;
    h += 7;
    size_t a = strlen(h), b = strlen(s->api_key);
    unsigned char diff = a != b;
    for (size_t i = 0; i < a; i++) diff |= (unsigned char)(h[i] ^ s->api_key[i % (b ? b : 1)]); /* no early exit */
    return diff == 0;
}

enum route { R_NONE, R_HEALTH, R_MODELS, R_MODEL, R_COMPLETIONS, R_CHAT, R_TOKENIZE, R_DETOKENIZE };

static enum route route_of(const char *url)
{
    static const struct { const char *path; enum route r; } tab[] = {
        { "/health", R_HEALTH }, { "/v1/models", R_MODELS }, { "/v1/completions", R_COMPLETIONS },
        { "/v1/chat/completions", R_CHAT }, { "/tokenize", R_TOKENIZE }, { "/detokenize", R_DETOKENIZE },
    };
    for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++)
        if (!strcmp(url, tab[i].path)) return tab[i].r;
    if (!strncmp(url, "/v1/models/", 11) && url[11]) return R_MODEL;
    return R_NONE;
}

/* 405 with the Allow header the status requires. */
static enum MHD_Result send_405(struct MHD_Connection *c, const char *allow, const char *url)
{
    char msg[300];
    snprintf(msg, sizeof msg, "use %s for %.200s", allow, url);
    char *t = dsq_srv_error_json(msg, "invalid_request_error", NULL, 405);
    if (!t) return MHD_NO;
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(t), t, MHD_RESPMEM_MUST_FREE);
    if (!r) { free(t); return MHD_NO; }
    MHD_add_response_header(r, "Content-Type", "application/json");
    MHD_add_response_header(r, "Allow", allow);
    add_cors(c, r);
    enum MHD_Result ret = MHD_queue_response(c, 405, r);
    MHD_destroy_response(r);
    return ret;
}

/* A CORS preflight (OPTIONS with Access-Control-Request-Method), answered
 * before authentication on any path as Starlette's CORSMiddleware does in
 * vLLM: 200 "OK" for an allowed origin and method, 400 "Disallowed CORS
 * origin / method" otherwise; requested headers are allowed (mirrored, as
 * vLLM's default --allowed-headers '*'). */
static enum MHD_Result preflight(dsq_server *s, struct MHD_Connection *c, const char *want_method)
{
    const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
    const char *hdrs = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Access-Control-Request-Headers");
    static const char *const methods[] = { "GET", "HEAD", "POST", "OPTIONS" };
    int any, ok_origin = origin_allowed(s, origin, &any), ok_method = 0;
    for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++) ok_method |= !strcmp(want_method, methods[i]);
    char text[64];
    snprintf(text, sizeof text, ok_origin && ok_method ? "OK" : "Disallowed CORS %s%s%s", ok_origin ? "" : "origin",
             !ok_origin && !ok_method ? ", " : "", ok_method ? "" : "method");
    char *t = strdup(text);
    if (!t) return MHD_NO;
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(t), t, MHD_RESPMEM_MUST_FREE);
    if (!r) { free(t); return MHD_NO; }
    MHD_add_response_header(r, "Content-Type", "text/plain; charset=utf-8");
    MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET, HEAD, POST, OPTIONS");
    MHD_add_response_header(r, "Access-Control-Max-Age", "600");
    if (ok_origin) {
        MHD_add_response_header(r, "Access-Control-Allow-Origin", any ? "*" : origin);
        if (!any) MHD_add_response_header(r, "Vary", "Origin");
    }
    if (hdrs) MHD_add_response_header(r, "Access-Control-Allow-Headers", hdrs);
    enum MHD_Result ret = MHD_queue_response(c, ok_origin && ok_method ? 200 : 400, r);
    MHD_destroy_response(r);
    return ret;
}

/* Everything decided on the headers alone, before any body byte is read:
 * route, method, API key, and a Content-Length over the limit. 1 when a
 * response was queued (*ret says how), 0 to read the body. */
static int refuse_on_headers(dsq_server *s, struct MHD_Connection *c, const char *url, const char *method,
                             enum route rt, enum MHD_Result *ret)
{
    const char *acrm = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Access-Control-Request-Method");
    if (!strcmp(method, "OPTIONS") && acrm) return *ret = preflight(s, c, acrm), 1;
    int get = !strcmp(method, "GET") || !strcmp(method, "HEAD"), post = !strcmp(method, "POST");
    int get_route = rt == R_HEALTH || rt == R_MODELS || rt == R_MODEL;
    if (rt == R_NONE) return *ret = send_error(s, c, 404, "invalid_request_error", NULL, "no route %s %s", method, url), 1;
    if (rt == R_HEALTH && !get) return *ret = send_405(c, "GET, HEAD", url), 1;
    if (rt != R_HEALTH && !authorized(s, c))
        return *ret = send_error(s, c, 401, "invalid_request_error", NULL, "missing or incorrect API key (send 'Authorization: Bearer KEY')"), 1;
    if (get_route && !get) return *ret = send_405(c, "GET, HEAD", url), 1;
    if (!get_route && !post) return *ret = send_405(c, "POST", url), 1;
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl) {
        char *end;
        unsigned long long n = strtoull(cl, &end, 10);
        if (end != cl && n > s->o.lim.max_body)
            return *ret = send_error(s, c, 413, "invalid_request_error", NULL, "request body of %llu bytes is over the limit of %zu bytes",
                                     n, s->o.lim.max_body), 1;
    }
    return 0;
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                               const char *version, const char *upload, size_t *upload_size, void **con_cls)
{
    dsq_server *s = cls;
    conn_ctx *cc = *con_cls;
    (void)version;
    enum route rt = route_of(url);
    if (!cc) {
        /* the headers are in, no body byte has been read */
        enum MHD_Result ret;
        if (refuse_on_headers(s, c, url, method, rt, &ret)) return ret;
        if (rt == R_HEALTH) {
            json_object *j = json_object_new_object();
            json_object_object_add(j, "status", json_object_new_string("ok"));
            return send_json(c, 200, j);
        }
        if (rt == R_MODELS) return do_models(s, c);
        if (rt == R_MODEL) return do_model(s, c, url + 11);
        if (!(cc = calloc(1, sizeof *cc))) return MHD_NO;
        cc->s = s;
        *con_cls = cc;
        return MHD_YES;
    }
    if (*upload_size) {
        size_t n = *upload_size;
        if (!cc->too_big && cc->len + n <= s->o.lim.max_body) {
            if (cc->len + n + 1 > cc->cap) {
                size_t cap = (cc->len + n + 1) * 2;
                if (cap > s->o.lim.max_body + 1) cap = s->o.lim.max_body + 1;
                char *b = realloc(cc->body, cap);
                if (!b) return MHD_NO;
                cc->body = b;
                cc->cap = cap;
            }
            memcpy(cc->body + cc->len, upload, n);
            cc->len += n;
            cc->body[cc->len] = 0;
        } else {
            cc->too_big = 1; /* keep reading (up to --read-timeout), answer 413 at the end */
            free(cc->body);
            cc->body = NULL;
            cc->len = cc->cap = 0;
        }
        *upload_size = 0;
        return MHD_YES;
    }
    srv_conn_set_working(c, 1);
    if (rt == R_TOKENIZE) return do_tokenize(s, c, cc);
    if (rt == R_DETOKENIZE) return do_detokenize(s, c, cc);
    return do_completions(s, c, cc, rt == R_CHAT);
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode tc)
{
    dsq_server *s = cls;
    conn_ctx *cc = *con_cls;
    (void)tc;
    /* the connection waits for its next request: the idle and read limits again */
    srv_conn_set_working(c, 0);
    conn_timeout(s, c, 0);
    if (!cc) return;
    if (cc->req) {
        pthread_mutex_lock(&s->mu);
        cancel_locked(s, cc->req); /* a no-op when it finished */
        srv_request_unref_locked(cc->req);
        pthread_mutex_unlock(&s->mu);
    }
    free(cc->body);
    free(cc);
    *con_cls = NULL;
}

int srv_http_start(dsq_server *s, dsq_diag *d)
{
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)s->o.port);
    const char *host = s->o.host ? s->o.host : "127.0.0.1";
    if (inet_pton(AF_INET, host, &a.sin_addr) != 1)
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "bad IPv4 address '%s'", host);
    int rc = srv_conns_start(s, d);
    if (rc < 0) return rc;
    s->daemon = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL,
                                 0, srv_conns_accept, s, handler, s,
                                 MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&a,
                                 MHD_OPTION_CONNECTION_LIMIT, srv_conns_hard_limit(s),
                                 MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)s->o.max_connections_per_client,
                                 MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)s->o.idle_timeout,
                                 MHD_OPTION_NOTIFY_COMPLETED, completed, s,
                                 MHD_OPTION_NOTIFY_CONNECTION, srv_conns_notify, s,
                                 MHD_OPTION_END);
    if (!s->daemon) return dsq_fail(d, DSQ_ERR_IO, NULL, NULL, -1, "cannot listen on %s:%d (port in use?)", host, s->o.port);
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? (int)di->port : s->o.port;
    return DSQ_OK;
}

void srv_http_stop(dsq_server *s)
{
    if (s->daemon) MHD_stop_daemon(s->daemon);
    s->daemon = NULL;
    srv_conns_stop(s);
}
