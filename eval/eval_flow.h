/* eval_flow.h - ds-eval's commands as whole runs: ppl, kld, gsm8k and
 * gsm8k --chat, each from its options to its report (eval_report.h).
 *
 * A run loads the tokenizer, opens the model (or resolves the served model
 * of an endpoint), runs the evaluation, writes its files and closes
 * everything again. What a program shows on the way (information,
 * warnings, a progress line) reaches it through dsq_eval_events; nothing
 * here prints. */
#ifndef DSQ_EVAL_FLOW_H
#define DSQ_EVAL_FLOW_H

#include "endpoint.h"
#include "eval_model.h"
#include "eval_report.h"

#include <stddef.h>
#include <stdint.h>

typedef struct dsq_eval_events {
    /* level 0: a warning; else information for that verbosity (1 errors' hints, 2 results, 3 progress) */
    void (*note)(void *ctx, int level, const char *msg);
    /* total units (label "ppl", unit "windows") start, progress, end */
    void (*begin)(void *ctx, const char *label, const char *unit, size_t total);
    void (*progress)(void *ctx, size_t done);
    void (*end)(void *ctx);
    void *ctx;
    volatile int *cancel; /* polled by the runs in process (an endpoint's is its own) */
} dsq_eval_events;

/* What every run evaluates: a model in process, or a served one. */
typedef struct dsq_eval_setup {
    dsq_eval_model_opts model;         /* .model; max_batch and ctx: gsm8k's (ppl and kld set their own) */
    const char *tokenizer;             /* NULL: the model's own */
    const dsq_endpoint_opts *endpoint; /* a server instead of the model, or NULL */
    dsq_eval_events ev;
} dsq_eval_setup;

typedef struct dsq_ppl_flow_opts {
    dsq_eval_setup s;
    const char *data;        /* the text */
    int bos;                 /* enum dsq_text_bos */
    uint64_t limit_tokens;   /* 0: all */
    size_t ctx;              /* window; 0: 512 */
    const char *save_logits; /* base log-probs for kld, or NULL */
    int overwrite;
    int logits_format, logits_topk; /* DSQ_LOGP_U16 / DSQ_LOGP_TOPK, K */
} dsq_ppl_flow_opts;

/* Perplexity of data over non-overlapping windows (llama-perplexity's
 * rules), with an endpoint from the server's prompt log-probs (always
 * per-window BOS there). */
int dsq_ppl_flow(const dsq_ppl_flow_opts *o, dsq_ppl_report *r, dsq_diag *d);

typedef struct dsq_kld_flow_opts {
    dsq_eval_setup s;
    const char *base; /* from ppl --save-logits (its windows and tokens) */
    const char *data; /* NULL, or the text the base must have been made from */
    int bos;          /* data's enum dsq_text_bos; -1: not given (window) */
} dsq_kld_flow_opts;

/* KL divergence against the base; served: a lower bound (endpoint.h). */
int dsq_kld_flow(const dsq_kld_flow_opts *o, dsq_kld_report *r, dsq_diag *d);

typedef struct dsq_gsm8k_flow_opts {
    dsq_eval_setup s;
    const char *data;  /* the test split */
    const char *train; /* NULL: train.jsonl beside data */
    const char *score; /* score these completions instead of generating, or NULL */
    const char *out;   /* per-item JSONL (an endpoint's journal), or NULL */
    int force;         /* overwrite out; an endpoint's journal starts over */
    int shots;
    uint64_t seed;
    int bos; /* -1 auto, 0 no, 1 yes */
    size_t max_new;
    size_t limit; /* first items only; 0: all */
} dsq_gsm8k_flow_opts;

/* lm-eval gsm8k v3.0: completions generated, fetched from the endpoint or
 * read from score, scored, written to out. Items without a completion
 * count as wrong (a warning); none at all is an error. */
int dsq_gsm8k_flow(const dsq_gsm8k_flow_opts *o, dsq_gsm8k_report *r, dsq_diag *d);

typedef struct dsq_chat_flow_opts {
    dsq_eval_setup s;
    const char *data, *qfield, *afield; /* fields NULL: "question", "answer" */
    const dsq_chat_suite *suite;
    const char *kwargs_json, *extra_json;
    int64_t max_tokens; /* 0: the suite's */
    int has_temperature;
    double temperature; /* else the suite's */
    double top_p;       /* 0: not sent */
    int has_seed;
    uint64_t seed; /* else the suite's (when it sends one) */
    int samples, reasoning_parser;
    const char *chat_template; /* in process: NULL the model's own */
    const char *think_end;
    const char *out; /* per-reply journal a rerun continues, or NULL */
    int force;       /* start it over */
    size_t limit;
} dsq_chat_flow_opts;

/* GSM8K (or any numeric-answer set) through chat completions: the suite's
 * prompts and scoring (chat_eval.h), replies from the endpoint or generated
 * in process (chat_run.h), journalled to out as they arrive. */
int dsq_chat_flow(const dsq_chat_flow_opts *o, dsq_chat_report *r, dsq_diag *d);

#endif
