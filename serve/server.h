/* server.h - ds-serve: an OpenAI-compatible HTTP server over dsq's engine.
 *
 * Three parts, one job each:
 *   server_req.c     request bodies of POST /v1/completions -> dsq_srv_params
 *                    (hostile JSON, type-checked; no model, no sockets: the
 *                    fuzz target drives it directly), and the error object
 *   server_engine.c  the engine thread: a bounded queue of sequences, a fixed
 *                    set of KV-cache slots, prefill per sequence and ONE
 *                    dsq_forward_batch_decode step for every active sequence
 *                    at a time (concurrent requests share the GEMMs)
 *   server_http.c    libmicrohttpd glue: routes, bearer token, body limit,
 *                    JSON and server-sent-event responses, client disconnects,
 *                    CORS
 *   server_conn.c    the connection guard: read deadline, eviction of idle
 *                    connections at the limit (no client can lock others out)
 *
 * Generation follows ds-eval's local path exactly (gsm8k.h): greedy is the
 * argmax with the lowest id on ties, the completion is the decoded text
 * (special tokens skipped) cut at the earliest stop string, and a sequence
 * ends at an EOS id (the tokenizer's and the config's). So ds-eval
 * --endpoint against ds-serve gives the same completions as in-process.
 *
 * Library rules: nothing prints or exits. */
#ifndef DSQ_SERVER_H
#define DSQ_SERVER_H

#include "dsq_error.h"

#include <stddef.h>
#include <stdint.h>

#define DSQ_SRV_MAX_STOP 16      /* stop strings per request */
#define DSQ_SRV_MAX_LOGPROBS 20  /* OpenAI's cap on "logprobs" */
#define DSQ_SRV_MAX_PROMPTS 64   /* prompts in one request */

/* What the server accepts (command-line limits). */
typedef struct dsq_srv_limits {
    size_t max_body;       /* bytes of a request body */
    int64_t max_tokens;    /* cap on "max_tokens" */
    int64_t default_max_tokens; /* when the request has none (OpenAI: 16) */
    size_t vocab;          /* token ids in prompts must be below it; 0: not checked */
} dsq_srv_limits;

typedef struct dsq_srv_prompt {
    char *text;            /* text prompt (NUL-terminated), or NULL */
    size_t len;
    int32_t *ids;          /* token-id prompt, or NULL */
    size_t n_ids;
} dsq_srv_prompt;

/* A parsed POST /v1/completions body. */
typedef struct dsq_srv_params {
    char *model;           /* NULL when absent */
    dsq_srv_prompt *prompts;
    int n_prompts;
    int64_t max_tokens;
    double temperature;    /* 0: greedy */
    double top_p;          /* (0, 1] */
    int has_seed;
    uint64_t seed;
    char *stop[DSQ_SRV_MAX_STOP];
    int n_stop;
    int logprobs;          /* -1: none; else top alternatives per token (0..20) */
    int echo;
    int prompt_logprobs;   /* vLLM's extension: -1 none; else top alternatives per prompt
                            * position, id-keyed (0..20; vLLM's default --max-logprobs) */
    int stream;
    int include_usage;     /* stream_options.include_usage */
    int ignore_eos;        /* vLLM's extension: EOS ids do not end the sequence */
    /* /v1/chat/completions */
    int chat;              /* prompts[0] is the conversation as the chat template renders it */
    int reasoning;         /* enum dsq_reasoning_parser in force for this request */
    int max_tokens_auto;   /* no max_tokens given: what the context leaves, up to the limit */
} dsq_srv_params;

/* Parse and type-check a body. On error returns DSQ_ERR_JSON (or
 * DSQ_ERR_INVALID_ARG for values out of range) with a message in err and
 * the offending field in param ("" when none); p is then released. */
int  dsq_srv_parse_completion(const char *body, size_t len, const dsq_srv_limits *lim,
                              dsq_srv_params *p, char *err, size_t errn,
                              char *param, size_t paramn);
void dsq_srv_params_release(dsq_srv_params *p);

/* A POST /v1/chat/completions body: the completion fields (logprobs only
 * false, no echo), "messages" rendered by the chat template t (NULL: every
 * request refused) with "add_generation_prompt" (default true) and
 * "chat_template_kwargs"; tools, function calls, response formats other
 * than text, a request-level template and continue_final_message are
 * refused. reasoning_parser: the server's enum dsq_reasoning_parser. */
struct dsq_chat_template;
int  dsq_srv_parse_chat(const char *body, size_t len, const dsq_srv_limits *lim,
                        const struct dsq_chat_template *t, int reasoning_parser, dsq_srv_params *p,
                        char *err, size_t errn, char *param, size_t paramn);

/* vLLM's POST /tokenize: {"prompt"} or {"messages", "add_generation_prompt",
 * "chat_template_kwargs"}, "add_special_tokens" (default: true for a prompt,
 * false for messages), "return_token_strs". */
typedef struct dsq_srv_tokenize {
    char *model;
    char *text;            /* the prompt, or the rendered conversation */
    size_t len;
    int add_special;
    int return_token_strs;
} dsq_srv_tokenize;
int  dsq_srv_parse_tokenize(const char *body, size_t len, const dsq_srv_limits *lim,
                            const struct dsq_chat_template *t, dsq_srv_tokenize *q,
                            char *err, size_t errn, char *param, size_t paramn);
void dsq_srv_tokenize_release(dsq_srv_tokenize *q);
/* vLLM's POST /detokenize: {"tokens": [ids]}. */
int  dsq_srv_parse_detokenize(const char *body, size_t len, const dsq_srv_limits *lim, char **model,
                              int32_t **ids, size_t *n, char *err, size_t errn, char *param, size_t paramn);

/* How much of a completion's text (UTF-8, len bytes, still growing) a
 * stream may send: everything but the last hold - 1 bytes (hold: the
 * longest stop string, which may still complete there), never half a
 * character, and no trailing U+FFFD (a character whose other bytes are in
 * the next token). */
size_t dsq_srv_stream_safe_len(const char *text, size_t len, size_t hold);

/* {"error": {"message", "type", "param", "code"}} as malloc'd JSON text. */
char *dsq_srv_error_json(const char *message, const char *type, const char *param, int code);

/* ---- the server ------------------------------------------------------------ */

typedef struct dsq_server dsq_server;

typedef struct dsq_server_opts {
    const char *model_path;     /* anything dsq_model_open accepts */
    const char *tokenizer_path; /* NULL: the .dsq metadata or the model's directory */
    const char *served_name;    /* NULL: the model path's last component */
    const char *host;           /* NULL: 127.0.0.1 */
    int port;                   /* 0: any free port (dsq_server_port says which) */
    const char *api_key;        /* NULL: no authentication */
    int threads;                /* engine threads, 0: all cores */
    int bf16_terms;             /* dsq_model_opts.bf16_terms (0: the default, 3) */
    int dsa_mode;               /* dsq_model_opts.dsa_mode (DeepSeek-V3.2: fp8 or float) */
    int kv_cache;               /* dsq_model_opts.kv_cache (MLA: f32, bf16, int8, fp8) */
    int slots;                  /* sequences decoded together (KV-cache slots) */
    int queue;                  /* sequences waiting beyond the slots; more -> 503 */
    int64_t ctx;                /* context per slot, 0: the model's default */
    int max_connections;        /* beyond it a new client evicts the longest-waiting idle one */
    int max_connections_per_client; /* per client address, 0: no limit */
    int idle_timeout;           /* seconds a client may send nothing (while the server waits for it) */
    double read_timeout;        /* seconds for a whole request (headers and body) to arrive */
    const char *const *allowed_origins; /* CORS: origins answered ("*": any); NULL / 0: none (copied) */
    int n_allowed_origins;
    const char *chat_template;  /* NULL: the model's own; else a template id or file (chat_template.h) */
    int reasoning_parser;       /* enum dsq_reasoning_parser for /v1/chat/completions */
    dsq_srv_limits lim;
} dsq_server_opts;

void dsq_server_opts_default(dsq_server_opts *o);

/* Load the model and tokenizer, start the engine thread and the HTTP
 * daemon. */
int  dsq_server_start(dsq_server **out, const dsq_server_opts *o, dsq_diag *d);
int  dsq_server_port(const dsq_server *s);
/* The chat template's id, or NULL with *why saying why chat completions
 * are refused (the model has no known template). */
const char *dsq_server_chat_template(const dsq_server *s, const char **why);
/* One line about the loaded model (for the log). */
const char *dsq_server_model_info(const dsq_server *s);
/* Stop taking requests (new ones get 503), let those in flight finish for
 * up to drain_s seconds, then cancel the rest, stop and free everything.
 * final (may be NULL) receives the counters as they stood at the end. */
struct dsq_server_stats;
void dsq_server_stop(dsq_server *s, double drain_s, struct dsq_server_stats *final);

/* Counters for the log. */
typedef struct dsq_server_stats {
    uint64_t requests, completed, rejected_busy, bad_requests, cancelled;
    uint64_t prompt_tokens, gen_tokens, decode_steps, decode_rows;
} dsq_server_stats;
void dsq_server_get_stats(dsq_server *s, dsq_server_stats *st);

#endif
