/* server_req.c - POST /v1/completions bodies, parsed and type-checked.
 *
 * The body is hostile: every field is checked for its JSON type and range
 * and anything off becomes a 400 with an OpenAI-style error naming the
 * field. Unknown fields are ignored, as OpenAI-compatible servers do (lm-eval
 * and other clients send extras such as "user"); fields whose meaning we do
 * not implement and that would change the output ("n" > 1, "best_of",
 * "logit_bias", penalties other than 0) are refused rather than ignored. */
#include "server.h"
#include "chat_reasoning.h"
#include "chat_template.h"

#include <json-c/json.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct perr {
    char *err;
    size_t errn;
    char *param;
    size_t paramn;
} perr;

static int bad(perr *e, int status, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int bad(perr *e, int status, const char *param, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->err, e->errn, fmt, ap);
    va_end(ap);
    snprintf(e->param, e->paramn, "%s", param ? param : "");
    return status;
}

void dsq_srv_params_release(dsq_srv_params *p)
{
    if (!p) return;
    free(p->model);
    for (int i = 0; i < p->n_prompts && p->prompts; i++) {
        free(p->prompts[i].text);
        free(p->prompts[i].ids);
    }
    free(p->prompts);
    for (int i = 0; i < p->n_stop; i++) free(p->stop[i]);
    memset(p, 0, sizeof *p);
}

/* An array of integers as token ids; 0 when v is not such an array. */
static int is_id_array(json_object *v)
{
    if (!json_object_is_type(v, json_type_array)) return 0;
    size_t n = json_object_array_length(v);
    if (n == 0) return 0;
    for (size_t i = 0; i < n; i++)
        if (!json_object_is_type(json_object_array_get_idx(v, i), json_type_int)) return 0;
    return 1;
}

static int take_ids(json_object *v, const dsq_srv_limits *lim, dsq_srv_prompt *pr, perr *e)
{
    size_t n = json_object_array_length(v);
    pr->ids = malloc(n * sizeof *pr->ids);
    if (!pr->ids) return bad(e, DSQ_ERR_NOMEM, "prompt", "out of memory");
    for (size_t i = 0; i < n; i++) {
        int64_t id = json_object_get_int64(json_object_array_get_idx(v, i));
        /* json-c saturates out-of-range integers, so the range check covers them */
        if (id < 0 || id > INT32_MAX || (lim->vocab && (uint64_t)id >= lim->vocab))
            return bad(e, DSQ_ERR_INVALID_ARG, "prompt", "token id %lld at position %zu is outside the vocabulary (0..%zu)",
                       (long long)id, i, lim->vocab ? lim->vocab - 1 : (size_t)INT32_MAX);
        pr->ids[i] = (int32_t)id;
    }
    pr->n_ids = n;
    return DSQ_OK;
}

static int take_text(json_object *v, dsq_srv_prompt *pr, perr *e)
{
    size_t n = (size_t)json_object_get_string_len(v);
    pr->text = malloc(n + 1);
    if (!pr->text) return bad(e, DSQ_ERR_NOMEM, "prompt", "out of memory");
    memcpy(pr->text, json_object_get_string(v), n);
    pr->text[n] = 0;
    pr->len = n;
    return DSQ_OK;
}

/* "prompt": a string, a list of strings, a list of ids, or a list of lists
 * of ids (the four forms of the OpenAI API). */
static int parse_prompt(json_object *v, const dsq_srv_limits *lim, dsq_srv_params *p, perr *e)
{
    if (json_object_is_type(v, json_type_string) || is_id_array(v)) {
        p->prompts = calloc(1, sizeof *p->prompts);
        if (!p->prompts) return bad(e, DSQ_ERR_NOMEM, "prompt", "out of memory");
        p->n_prompts = 1;
        return json_object_is_type(v, json_type_string) ? take_text(v, &p->prompts[0], e)
                                                         : take_ids(v, lim, &p->prompts[0], e);
    }
    if (!json_object_is_type(v, json_type_array))
        return bad(e, DSQ_ERR_JSON, "prompt", "'prompt' must be a string, a list of strings, a list of token ids or a list of such lists");
    size_t n = json_object_array_length(v);
    if (n == 0) return bad(e, DSQ_ERR_INVALID_ARG, "prompt", "'prompt' is an empty list");
    if (n > DSQ_SRV_MAX_PROMPTS) return bad(e, DSQ_ERR_INVALID_ARG, "prompt", "at most %d prompts per request", DSQ_SRV_MAX_PROMPTS);
    p->prompts = calloc(n, sizeof *p->prompts);
    if (!p->prompts) return bad(e, DSQ_ERR_NOMEM, "prompt", "out of memory");
    p->n_prompts = (int)n;
    for (size_t i = 0; i < n; i++) {
        json_object *x = json_object_array_get_idx(v, i);
        int rc;
        if (json_object_is_type(x, json_type_string)) rc = take_text(x, &p->prompts[i], e);
        else if (is_id_array(x)) rc = take_ids(x, lim, &p->prompts[i], e);
        else rc = bad(e, DSQ_ERR_JSON, "prompt", "prompt %zu is neither a string nor a non-empty list of token ids", i);
        if (rc < 0) return rc;
    }
    return DSQ_OK;
}

static int get_num(json_object *o, const char *key, double lo, double hi, double *out, int *present, perr *e)
{
    json_object *v;
    if (present) *present = 0;
    if (!json_object_object_get_ex(o, key, &v) || !v) return DSQ_OK; /* absent or null: default */
    if (!json_object_is_type(v, json_type_double) && !json_object_is_type(v, json_type_int))
        return bad(e, DSQ_ERR_JSON, key, "'%s' must be a number", key);
    double x = json_object_get_double(v);
    if (!isfinite(x) || x < lo || x > hi) return bad(e, DSQ_ERR_INVALID_ARG, key, "'%s' must be in [%g, %g]", key, lo, hi);
    *out = x;
    if (present) *present = 1;
    return DSQ_OK;
}

static int get_int(json_object *o, const char *key, int64_t lo, int64_t hi, int64_t *out, int *present, perr *e)
{
    json_object *v;
    if (present) *present = 0;
    if (!json_object_object_get_ex(o, key, &v) || !v) return DSQ_OK;
    int64_t x;
    if (json_object_is_type(v, json_type_int)) {
        x = json_object_get_int64(v);
    } else if (json_object_is_type(v, json_type_double)) {
        /* 1.0 is the integer 1, as vLLM's request models (pydantic) take
         * it; 1.5 is not an integer */
        double f = json_object_get_double(v);
        if (!isfinite(f) || f != floor(f)) return bad(e, DSQ_ERR_JSON, key, "'%s' must be an integer", key);
        if (f < -9223372036854775808.0 || f >= 9223372036854775808.0)
            return bad(e, DSQ_ERR_INVALID_ARG, key, "'%s' must be in [%lld, %lld]", key, (long long)lo, (long long)hi);
        x = (int64_t)f;
    } else {
        return bad(e, DSQ_ERR_JSON, key, "'%s' must be an integer", key);
    }
    if (x < lo || x > hi) return bad(e, DSQ_ERR_INVALID_ARG, key, "'%s' must be in [%lld, %lld]", key, (long long)lo, (long long)hi);
    *out = x;
    if (present) *present = 1;
    return DSQ_OK;
}

static int get_bool(json_object *o, const char *key, int *out, perr *e)
{
    json_object *v;
    if (!json_object_object_get_ex(o, key, &v) || !v) return DSQ_OK;
    if (!json_object_is_type(v, json_type_boolean)) return bad(e, DSQ_ERR_JSON, key, "'%s' must be true or false", key);
    *out = json_object_get_boolean(v);
    return DSQ_OK;
}

static int add_stop(dsq_srv_params *p, json_object *s, perr *e)
{
    if (!json_object_is_type(s, json_type_string)) return bad(e, DSQ_ERR_JSON, "stop", "'stop' must be a string or a list of strings");
    if (p->n_stop >= DSQ_SRV_MAX_STOP) return bad(e, DSQ_ERR_INVALID_ARG, "stop", "at most %d stop strings", DSQ_SRV_MAX_STOP);
    size_t n = (size_t)json_object_get_string_len(s);
    if (n == 0) return DSQ_OK; /* an empty stop string never matches (gsm8k.h) */
    if (memchr(json_object_get_string(s), 0, n)) return bad(e, DSQ_ERR_INVALID_ARG, "stop", "stop strings may not contain NUL");
    if (!(p->stop[p->n_stop] = strdup(json_object_get_string(s)))) return bad(e, DSQ_ERR_NOMEM, "stop", "out of memory");
    p->n_stop++;
    return DSQ_OK;
}

/* The fields /v1/completions and /v1/chat/completions share; chat: the
 * latter (no prompt; "logprobs" is a boolean there). */
static int parse_fields(json_object *o, const dsq_srv_limits *lim, dsq_srv_params *p, int chat, perr *e)
{
    json_object *v;
    if (json_object_object_get_ex(o, "model", &v) && v) {
        if (!json_object_is_type(v, json_type_string)) return bad(e, DSQ_ERR_JSON, "model", "'model' must be a string");
        if (!(p->model = strdup(json_object_get_string(v)))) return bad(e, DSQ_ERR_NOMEM, "model", "out of memory");
    }
    if (!chat) {
        if (!json_object_object_get_ex(o, "prompt", &v) || !v) return bad(e, DSQ_ERR_INVALID_ARG, "prompt", "'prompt' is required");
        DSQ_TRY(parse_prompt(v, lim, p, e));
    }
    int has = 0;
    DSQ_TRY(get_int(o, "max_tokens", 0, lim->max_tokens, &p->max_tokens, &has, e));
    if (chat) { /* OpenAI's newer name wins, as in vLLM */
        int has2 = 0;
        DSQ_TRY(get_int(o, "max_completion_tokens", 0, lim->max_tokens, &p->max_tokens, &has2, e));
        has |= has2;
    }
    DSQ_TRY(get_num(o, "temperature", 0, 2, &p->temperature, NULL, e));
    DSQ_TRY(get_num(o, "top_p", 0, 1, &p->top_p, NULL, e));
    if (p->top_p <= 0) return bad(e, DSQ_ERR_INVALID_ARG, "top_p", "'top_p' must be in (0, 1]");
    int64_t seed = 0;
    DSQ_TRY(get_int(o, "seed", INT64_MIN, INT64_MAX, &seed, &p->has_seed, e));
    p->seed = (uint64_t)seed;
    int64_t lp = -1;
    int has_lp = 0;
    if (chat) {
        int want = 0;
        DSQ_TRY(get_bool(o, "logprobs", &want, e));
        if (want) return bad(e, DSQ_ERR_INVALID_ARG, "logprobs", "'logprobs' is not supported on chat completions (use /v1/completions)");
    } else {
        DSQ_TRY(get_int(o, "logprobs", 0, DSQ_SRV_MAX_LOGPROBS, &lp, &has_lp, e));
    }
    p->logprobs = has_lp ? (int)lp : -1;
    DSQ_TRY(get_bool(o, "echo", &p->echo, e));
    if (chat && p->echo) return bad(e, DSQ_ERR_INVALID_ARG, "echo", "'echo' is not supported on chat completions");
    /* vLLM (protocol.py CompletionRequest): id-keyed prompt log-probs; it
     * refuses them with stream, and so do we */
    int64_t plp = -1;
    int has_plp = 0;
    DSQ_TRY(get_int(o, "prompt_logprobs", 0, DSQ_SRV_MAX_LOGPROBS, &plp, &has_plp, e));
    p->prompt_logprobs = has_plp ? (int)plp : -1;
    if (chat && has_plp)
        return bad(e, DSQ_ERR_INVALID_ARG, "prompt_logprobs", "'prompt_logprobs' is not supported on chat completions");
    DSQ_TRY(get_bool(o, "stream", &p->stream, e));
    if (p->stream && p->prompt_logprobs >= 0)
        return bad(e, DSQ_ERR_INVALID_ARG, "prompt_logprobs", "'prompt_logprobs' is not available when 'stream' is true");
    DSQ_TRY(get_bool(o, "ignore_eos", &p->ignore_eos, e));
    if (json_object_object_get_ex(o, "stream_options", &v) && v) {
        if (!json_object_is_type(v, json_type_object)) return bad(e, DSQ_ERR_JSON, "stream_options", "'stream_options' must be an object");
        DSQ_TRY(get_bool(v, "include_usage", &p->include_usage, e));
    }
    if (json_object_object_get_ex(o, "stop", &v) && v) {
        if (json_object_is_type(v, json_type_array)) {
            size_t n = json_object_array_length(v);
            for (size_t i = 0; i < n; i++) DSQ_TRY(add_stop(p, json_object_array_get_idx(v, i), e));
        } else {
            DSQ_TRY(add_stop(p, v, e));
        }
    }
    /* options that would change the output and that we do not implement */
    int64_t n = 1, best_of = 1;
    DSQ_TRY(get_int(o, "n", 1, 1, &n, NULL, e));
    DSQ_TRY(get_int(o, "best_of", 1, 1, &best_of, NULL, e));
    double pen = 0;
    DSQ_TRY(get_num(o, "presence_penalty", 0, 0, &pen, NULL, e));
    DSQ_TRY(get_num(o, "frequency_penalty", 0, 0, &pen, NULL, e));
    if (json_object_object_get_ex(o, "logit_bias", &v) && v &&
        !(json_object_is_type(v, json_type_object) && json_object_object_length(v) == 0))
        return bad(e, DSQ_ERR_INVALID_ARG, "logit_bias", "'logit_bias' is not supported");
    /* vLLM's sampling extensions, refused unless they ask for nothing */
    int64_t top_k = -1;
    DSQ_TRY(get_int(o, "top_k", -1, INT32_MAX, &top_k, NULL, e));
    if (top_k > 0) return bad(e, DSQ_ERR_INVALID_ARG, "top_k", "'top_k' is not supported (only -1 or 0: all tokens)");
    double rep = 1, min_p = 0;
    DSQ_TRY(get_num(o, "repetition_penalty", 1, 1, &rep, NULL, e));
    DSQ_TRY(get_num(o, "min_p", 0, 0, &min_p, NULL, e));
    if (json_object_object_get_ex(o, "suffix", &v) && v)
        return bad(e, DSQ_ERR_INVALID_ARG, "suffix", "'suffix' is not supported");
    if (!has && chat) p->max_tokens_auto = 1; /* what the context leaves, capped by the limit */
    if (!has) p->max_tokens = chat ? lim->max_tokens
                                   : lim->default_max_tokens < lim->max_tokens ? lim->default_max_tokens : lim->max_tokens;
    return DSQ_OK;
}

/* The body as a JSON object in *out. */
static int parse_body(const char *body, size_t len, const dsq_srv_limits *lim, json_object **out, perr *e)
{
    *out = NULL;
    if (len > (size_t)INT32_MAX || (lim->max_body && len > lim->max_body))
        return bad(e, DSQ_ERR_INVALID_ARG, NULL, "request body too large");
    json_tokener *tk = json_tokener_new_ex(64); /* nesting limit: no stack exhaustion */
    if (!tk) return bad(e, DSQ_ERR_NOMEM, NULL, "out of memory");
    json_object *o = json_tokener_parse_ex(tk, body, (int)len);
    enum json_tokener_error je = json_tokener_get_error(tk);
    size_t used = tk->char_offset;
    json_tokener_free(tk);
    int rc = DSQ_OK;
    if (!o || je != json_tokener_success) {
        rc = bad(e, DSQ_ERR_JSON, NULL, "invalid JSON body: %s", je == json_tokener_continue ? "unexpected end of input" :
                 je != json_tokener_success ? json_tokener_error_desc(je) : "empty");
    } else {
        while (used < len && (body[used] == ' ' || body[used] == '\n' || body[used] == '\r' || body[used] == '\t')) used++;
        if (used < len) rc = bad(e, DSQ_ERR_JSON, NULL, "invalid JSON body: trailing data after the object");
        else if (!json_object_is_type(o, json_type_object)) rc = bad(e, DSQ_ERR_JSON, NULL, "the body must be a JSON object");
    }
    if (rc < 0) {
        json_object_put(o);
        return rc;
    }
    *out = o;
    return DSQ_OK;
}

static void params_init(dsq_srv_params *p, perr *e)
{
    memset(p, 0, sizeof *p);
    p->temperature = 1.0; /* OpenAI's default; clients that want greedy say 0 */
    p->top_p = 1.0;
    p->logprobs = -1;
    p->prompt_logprobs = -1;
    if (e->errn) e->err[0] = 0;
    if (e->paramn) e->param[0] = 0;
}

int dsq_srv_parse_completion(const char *body, size_t len, const dsq_srv_limits *lim,
                             dsq_srv_params *p, char *err, size_t errn, char *param, size_t paramn)
{
    perr e = { err, errn, param, paramn };
    params_init(p, &e);
    json_object *o;
    DSQ_TRY(parse_body(body, len, lim, &o, &e));
    int rc = parse_fields(o, lim, p, 0, &e);
    json_object_put(o);
    if (rc < 0) dsq_srv_params_release(p);
    return rc;
}

/* ---- /v1/chat/completions, /tokenize, /detokenize ---------------------------- */

/* Fields that ask for what the chat templates do not render (tools) or
 * that would change the output in ways not implemented: refused. */
static int refuse_chat_extras(json_object *o, perr *e)
{
    json_object *v;
    static const char *tool_keys[] = { "tools", "functions" };
    for (size_t i = 0; i < 2; i++)
        if (json_object_object_get_ex(o, tool_keys[i], &v) && v &&
            !(json_object_is_type(v, json_type_array) && json_object_array_length(v) == 0))
            return bad(e, DSQ_ERR_INVALID_ARG, tool_keys[i], "tools and function calls are not supported by this server");
    static const char *choice_keys[] = { "tool_choice", "function_call" };
    for (size_t i = 0; i < 2; i++)
        if (json_object_object_get_ex(o, choice_keys[i], &v) && v &&
            !(json_object_is_type(v, json_type_string) && !strcmp(json_object_get_string(v), "none")))
            return bad(e, DSQ_ERR_INVALID_ARG, choice_keys[i], "tools and function calls are not supported by this server");
    const char *rt = NULL;
    json_object *rf;
    if (json_object_object_get_ex(o, "response_format", &rf) && rf &&
        !(json_object_is_type(rf, json_type_object) && json_object_object_get_ex(rf, "type", &v) &&
          json_object_is_type(v, json_type_string) && !strcmp((rt = json_object_get_string(v)), "text")))
        return bad(e, DSQ_ERR_INVALID_ARG, "response_format", "only 'response_format' {\"type\": \"text\"} is supported");
    if (json_object_object_get_ex(o, "chat_template", &v) && v)
        return bad(e, DSQ_ERR_INVALID_ARG, "chat_template", "a request-level 'chat_template' is not supported (the server renders the model's own)");
    int cont = 0;
    DSQ_TRY(get_bool(o, "continue_final_message", &cont, e));
    if (cont) return bad(e, DSQ_ERR_INVALID_ARG, "continue_final_message", "'continue_final_message' is not supported");
    return DSQ_OK;
}

/* messages + add_generation_prompt + chat_template_kwargs -> the prompt text. */
static int render_messages(json_object *o, const dsq_chat_template *t, int agp_default, char **text,
                           size_t *len, int *thinking, perr *e)
{
    json_object *msgs = NULL, *kw = NULL;
    if (!json_object_object_get_ex(o, "messages", &msgs) || !msgs)
        return bad(e, DSQ_ERR_INVALID_ARG, "messages", "'messages' is required");
    if (!t) return bad(e, DSQ_ERR_UNSUPPORTED, "messages", "no chat template");
    dsq_chat_opts co = { .add_generation_prompt = agp_default };
    DSQ_TRY(get_bool(o, "add_generation_prompt", &co.add_generation_prompt, e));
    json_object_object_get_ex(o, "chat_template_kwargs", &kw);
    dsq_diag d;
    dsq_diag_clear(&d);
    int rc = dsq_chat_kwargs_from_json(kw, &co, &d);
    if (rc < 0) return bad(e, rc == DSQ_ERR_NOMEM ? rc : DSQ_ERR_INVALID_ARG, "chat_template_kwargs", "%s", d.msg);
    dsq_chat_msg *m = NULL;
    size_t n = 0;
    char *arena = NULL;
    rc = dsq_chat_messages_from_json(msgs, &m, &n, &arena, &d);
    if (rc == DSQ_OK) rc = dsq_chat_render(t, m, n, &co, text, len, &d);
    free(m);
    free(arena);
    if (rc < 0) return bad(e, rc == DSQ_ERR_NOMEM ? rc : DSQ_ERR_INVALID_ARG, "messages", "%s", d.msg);
    *thinking = co.thinking || co.enable_thinking;
    return DSQ_OK;
}

int dsq_srv_parse_chat(const char *body, size_t len, const dsq_srv_limits *lim,
                       const dsq_chat_template *t, int reasoning_parser, dsq_srv_params *p,
                       char *err, size_t errn, char *param, size_t paramn)
{
    perr e = { err, errn, param, paramn };
    params_init(p, &e);
    json_object *o;
    DSQ_TRY(parse_body(body, len, lim, &o, &e));
    int rc = parse_fields(o, lim, p, 1, &e);
    if (rc == DSQ_OK) rc = refuse_chat_extras(o, &e);
    char *text = NULL;
    size_t tl = 0;
    int thinking = 0;
    if (rc == DSQ_OK) rc = render_messages(o, t, 1, &text, &tl, &thinking, &e);
    if (rc == DSQ_OK && !(p->prompts = calloc(1, sizeof *p->prompts))) rc = bad(&e, DSQ_ERR_NOMEM, NULL, "out of memory");
    if (rc == DSQ_OK) {
        p->prompts[0].text = text;
        p->prompts[0].len = tl;
        p->n_prompts = 1;
        p->chat = 1;
        p->reasoning = dsq_reasoning_parser_for(reasoning_parser, thinking);
        text = NULL;
    }
    free(text);
    json_object_put(o);
    if (rc < 0) dsq_srv_params_release(p);
    return rc;
}

void dsq_srv_tokenize_release(dsq_srv_tokenize *q)
{
    if (!q) return;
    free(q->model);
    free(q->text);
    memset(q, 0, sizeof *q);
}

int dsq_srv_parse_tokenize(const char *body, size_t len, const dsq_srv_limits *lim,
                           const dsq_chat_template *t, dsq_srv_tokenize *q,
                           char *err, size_t errn, char *param, size_t paramn)
{
    perr e = { err, errn, param, paramn };
    dsq_srv_params dummy;
    params_init(&dummy, &e);
    memset(q, 0, sizeof *q);
    json_object *o, *v;
    DSQ_TRY(parse_body(body, len, lim, &o, &e));
    int rc = DSQ_OK;
    if (json_object_object_get_ex(o, "model", &v) && v) {
        if (!json_object_is_type(v, json_type_string)) rc = bad(&e, DSQ_ERR_JSON, "model", "'model' must be a string");
        else if (!(q->model = strdup(json_object_get_string(v)))) rc = bad(&e, DSQ_ERR_NOMEM, "model", "out of memory");
    }
    int has_prompt = json_object_object_get_ex(o, "prompt", &v) && v;
    int has_msgs = json_object_object_get_ex(o, "messages", NULL);
    if (rc == DSQ_OK && has_prompt == has_msgs)
        rc = bad(&e, DSQ_ERR_INVALID_ARG, has_prompt ? "messages" : "prompt", "give either 'prompt' or 'messages'");
    /* vLLM's defaults: special tokens added for a prompt, not for messages
     * (the template writes them) */
    q->add_special = has_prompt;
    if (rc == DSQ_OK) rc = get_bool(o, "add_special_tokens", &q->add_special, &e);
    if (rc == DSQ_OK) rc = get_bool(o, "return_token_strs", &q->return_token_strs, &e);
    if (rc == DSQ_OK && has_prompt) {
        if (!json_object_is_type(v, json_type_string)) rc = bad(&e, DSQ_ERR_JSON, "prompt", "'prompt' must be a string");
        else {
            dsq_srv_prompt pr = { 0 };
            rc = take_text(v, &pr, &e);
            q->text = pr.text;
            q->len = pr.len;
        }
    } else if (rc == DSQ_OK) {
        int thinking = 0;
        rc = refuse_chat_extras(o, &e);
        if (rc == DSQ_OK) rc = render_messages(o, t, 1, &q->text, &q->len, &thinking, &e);
    }
    json_object_put(o);
    if (rc < 0) dsq_srv_tokenize_release(q);
    return rc;
}

int dsq_srv_parse_detokenize(const char *body, size_t len, const dsq_srv_limits *lim, char **model,
                             int32_t **ids, size_t *n, char *err, size_t errn, char *param, size_t paramn)
{
    perr e = { err, errn, param, paramn };
    dsq_srv_params dummy;
    params_init(&dummy, &e);
    *model = NULL;
    *ids = NULL;
    *n = 0;
    json_object *o, *v;
    DSQ_TRY(parse_body(body, len, lim, &o, &e));
    int rc = DSQ_OK;
    if (json_object_object_get_ex(o, "model", &v) && v) {
        if (!json_object_is_type(v, json_type_string)) rc = bad(&e, DSQ_ERR_JSON, "model", "'model' must be a string");
        else if (!(*model = strdup(json_object_get_string(v)))) rc = bad(&e, DSQ_ERR_NOMEM, "model", "out of memory");
    }
    if (rc == DSQ_OK && (!json_object_object_get_ex(o, "tokens", &v) || !v))
        rc = bad(&e, DSQ_ERR_INVALID_ARG, "tokens", "'tokens' is required");
    if (rc == DSQ_OK && !json_object_is_type(v, json_type_array))
        rc = bad(&e, DSQ_ERR_JSON, "tokens", "'tokens' must be a list of token ids");
    if (rc == DSQ_OK && json_object_array_length(v) > 0) {
        if (!is_id_array(v)) rc = bad(&e, DSQ_ERR_JSON, "tokens", "'tokens' must be a list of token ids");
        else {
            dsq_srv_prompt pr = { 0 };
            rc = take_ids(v, lim, &pr, &e);
            *ids = pr.ids;
            *n = pr.n_ids;
            if (rc < 0 && e.param) snprintf(e.param, e.paramn, "tokens");
        }
    }
    json_object_put(o);
    if (rc < 0) {
        free(*model);
        free(*ids);
        *model = NULL;
        *ids = NULL;
    }
    return rc;
}

char *dsq_srv_error_json(const char *message, const char *type, const char *param, int code)
{
    json_object *j = json_object_new_object(), *e = json_object_new_object();
    json_object_object_add(e, "message", json_object_new_string(message ? message : ""));
    json_object_object_add(e, "type", json_object_new_string(type ? type : "invalid_request_error"));
    json_object_object_add(e, "param", param && param[0] ? json_object_new_string(param) : NULL);
    json_object_object_add(e, "code", json_object_new_int(code));
    json_object_object_add(j, "error", e);
    char *s = strdup(json_object_to_json_string_ext(j, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
    json_object_put(j);
    return s;
}
