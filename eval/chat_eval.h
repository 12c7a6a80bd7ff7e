/* chat_eval.h - GSM8K (and any numeric-answer set) through chat completions,
 * as the harnesses that publish deployments' figures measure it.
 *
 * Each prompt suite is one table row reproducing one harness exactly:
 *
 *  aisbench-0shot-cot   AISBench gsm8k_gen_0_shot_cot_chat_prompt with
 *                       vllm-api-general-chat: one user turn
 *                       "Answer the following question.The last line of the
 *                       response should follow this format: \"answer:$ANSWER\"
 *                       (without quotes), where ANSWER is a number. Let's think
 *                       step by step.\n\nQuestion: {question}", no stop strings,
 *                       max_out_len 512, temperature 0.01. The prediction is
 *                       reasoning_content + "</think>" + content (reasoning
 *                       alone when content is empty, else content), then
 *                       extract_non_reasoning_content (text after the last
 *                       "</think>" when there is no "<think>", else every
 *                       <think>...</think> removed; stripped), then
 *                       gsm8k_postprocess: text.split("Question:")[0], the
 *                       last match of -?\d+\.\d+|-?\d+ or "NULL". Correct when
 *                       pred == ref or |float(pred) - int(ref)| < 1e-6, ref
 *                       being answer.split("#### ")[1] without commas.
 *                       The quirk: commas stay in the prediction, so "1,234"
 *                       yields "234" and a right answer written with a
 *                       thousands separator scores wrong (AISBench releases
 *                       before the comma fix).
 *  aisbench-0shot-cot-nocomma  the same with the later AISBench fix: commas
 *                       removed before the numbers are found ("1,234" ->
 *                       "1234").
 *  lm-eval-cot-llama    lm-eval gsm8k_cot_llama with --apply_chat_template
 *                       (fewshot_as_multiturn): the 8 fixed shots as
 *                       user/assistant turns, the question as the last user
 *                       turn; local-chat-completions' request (temperature 0,
 *                       max_tokens 256, the first 4 "until" strings as stop,
 *                       seed 1234); only message.content is read (after the
 *                       last --think-end string, left-stripped, when given);
 *                       strict "The final answer is ((-?[$0-9.,]{2,})|(-?[0-9]+))"
 *                       and flexible "(-?[$0-9.,]{2,})|(-?[0-9]+)", last match
 *                       each; exact_match after removing ",", "$",
 *                       "(?s).*#### ", "\.$" and "\.$" again, case-folded.
 *
 * (lm-eval's gsm8k v3, 5-shot through /v1/completions, is gsm8k.h.)
 *
 * Digits: Python's \d also matches non-ASCII decimal digits; here only
 * 0-9 count (a model answering in, say, fullwidth digits scores "NULL"
 * where AISBench would read the number).
 *
 * A data set other than GSM8K (--data with --question-field/--answer-field)
 * uses the same prompts and extraction; its answer is the text after
 * "#### " when present, else the whole answer field.
 *
 * Library code: nothing prints. */
#ifndef DSQ_CHAT_EVAL_H
#define DSQ_CHAT_EVAL_H

#include "dsq_error.h"
#include "gsm8k.h"

#include <stddef.h>
#include <stdint.h>

enum dsq_chat_suite_kind { DSQ_SUITE_AISBENCH = 1, DSQ_SUITE_LMEVAL_COT_LLAMA = 2 };

typedef struct dsq_chat_suite {
    const char *name;
    int kind;                      /* enum dsq_chat_suite_kind */
    int strip_commas;              /* AISBench's later gsm8k_postprocess */
    int64_t max_tokens;            /* the harness's default */
    double temperature;            /* the harness's default */
    int has_seed;                  /* the harness sends a seed */
    uint64_t seed;
    const char *const *stops;      /* sent as "stop" */
    size_t n_stops;
} dsq_chat_suite;

const dsq_chat_suite *dsq_chat_suite_find(const char *name);
/* Names for messages: "aisbench-0shot-cot, aisbench-0shot-cot-nocomma, lm-eval-cot-llama". */
const char *dsq_chat_suite_names(void);

/* The conversation for one question as a JSON "messages" array (malloc'd
 * text). */
int  dsq_chat_suite_messages(const dsq_chat_suite *s, const char *question, size_t qlen,
                             char **json, dsq_diag *d);

/* ---- one answer ------------------------------------------------------------------ */

/* What the harness makes of a reply: content / reasoning_content as the
 * server sent them (has_* 0 for null or absent). think_end (lm-eval's
 * think_end_token, NULL: none). *pred malloc'd. */
int  dsq_chat_prediction(const dsq_chat_suite *s, const char *content, size_t clen, int has_content,
                         const char *reasoning, size_t rlen, int has_reasoning,
                         const char *think_end, char **pred, size_t *plen);

/* AISBench's two post-processors (exposed for tests). *out malloc'd. */
int  dsq_aisbench_non_reasoning(const char *text, size_t len, char **out, size_t *olen);
int  dsq_aisbench_gsm8k_post(const char *text, size_t len, int strip_commas, char **out);
/* answer.split("#### ")[1].replace(",", "") (the whole answer when it has
 * no "#### "). */
int  dsq_aisbench_reference(const char *answer, size_t len, char **out);
/* pred == ref or |float(pred) - int(ref)| < 1e-6 (Python's float / int
 * parsing: surrounding whitespace, "_" between digits, inf/nan). */
int  dsq_aisbench_is_equal(const char *pred, const char *ref);

typedef struct dsq_chat_score {
    char *answer;          /* AISBench: pred; lm-eval: the strict extraction */
    char *flexible;        /* lm-eval: the flexible extraction (NULL for AISBench) */
    int correct;           /* AISBench: is_equal; lm-eval: strict exact_match */
    int correct_flexible;  /* lm-eval */
} dsq_chat_score;

/* Score a prediction (from dsq_chat_prediction) against the item's answer
 * field. sc: a gsm8k scorer (lm-eval's filters and normalisation). */
int  dsq_chat_score_item(const dsq_chat_suite *s, dsq_gsm8k_scorer *sc, const char *pred, size_t plen,
                         const char *answer, size_t alen, dsq_chat_score *out);
void dsq_chat_score_release(dsq_chat_score *s);

/* ---- aggregates --------------------------------------------------------------------- */

/* Unbiased pass@k for c correct of n samples: 1 - C(n-c, k) / C(n, k). */
double dsq_pass_at_k(int n, int c, int k);
/* Mean and standard error over problems of per-problem accuracies
 * (correct[i] of samples each): the mean of all samples, and the sample
 * standard deviation of the per-problem means / sqrt(problems) (lm-eval's
 * mean_stderr when samples is 1). */
void dsq_chat_accuracy(const int *correct, size_t problems, int samples, double *mean, double *stderr_);

#endif
