/* eval_report.h - the results of ds-eval's commands (ppl, kld, gsm8k,
 * gsm8k --chat) as one JSON object or as the text report.
 *
 * A report holds what a run measured and the settings that name it; the
 * JSON builders return a new object (the caller prints and frees it; its
 * numbers are json-c doubles, NaN / Inf as null, printed in the caller's
 * serialization format), the text writers write to the stream the caller
 * gives. Library code: nothing chooses stdout or stderr here. */
#ifndef DSQ_EVAL_REPORT_H
#define DSQ_EVAL_REPORT_H

#include "chat_run.h"
#include "endpoint.h"
#include "eval_metrics.h"

#include <json-c/json.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct dsq_ppl_report {
    dsq_ppl_plan plan;
    dsq_ppl_result res;
    double secs;
    int32_t bos_id;           /* the BOS the policy put in, -1 none */
    int bos;                  /* enum dsq_text_bos */
    const char *saved_logits; /* --save-logits path, or NULL */
} dsq_ppl_report;

typedef struct dsq_kld_report {
    dsq_ppl_plan plan; /* the base's windows */
    dsq_kld_result k;
    dsq_ep_kld_info ki; /* served: how the bound was computed */
    int endpoint;       /* the model was a server's (a lower bound) */
    unsigned base_topk; /* top-k the base file holds */
    int bos;            /* enum dsq_text_bos checked against --data, -1 not checked */
    double secs;
} dsq_kld_report;

typedef struct dsq_gsm8k_report {
    size_t n, scored;        /* items; items with a completion */
    size_t strict, flexible; /* correct ones */
    const char *score;       /* completions scored from this file, or NULL (generated) */
    const char *journal;     /* --out the resumed items came from */
    int shots;
    uint64_t seed;
    size_t gen_tokens;     /* all the items' */
    size_t run_gen_tokens; /* this run's */
    size_t resumed, refused;
    double secs;
} dsq_gsm8k_report;

typedef struct dsq_chat_report {
    const char *suite;       /* dsq_chat_suite name */
    int lmeval;              /* strict-match and flexible-extract (lm-eval-cot-llama) */
    const char *template_id; /* in process: the chat template used, else NULL */
    size_t n;
    int samples;
    double temperature;
    int64_t max_tokens;
    dsq_chat_summary sm;
    double secs;
} dsq_chat_report;

json_object *dsq_ppl_report_json(const dsq_ppl_report *r);
json_object *dsq_kld_report_json(const dsq_kld_report *r);
json_object *dsq_gsm8k_report_json(const dsq_gsm8k_report *r);
json_object *dsq_chat_report_json(const dsq_chat_report *r);

void dsq_ppl_report_text(FILE *f, const dsq_ppl_report *r);
void dsq_kld_report_text(FILE *f, const dsq_kld_report *r);
void dsq_gsm8k_report_text(FILE *f, const dsq_gsm8k_report *r);
void dsq_chat_report_text(FILE *f, const dsq_chat_report *r);

#endif
