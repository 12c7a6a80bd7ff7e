/* gsm8k.h - the lm-evaluation-harness `gsm8k` task (metadata version 3.0),
 * reproduced in C so dsq can score a model without Python.
 *
 * What lm-eval does (lm_eval/tasks/gsm8k/gsm8k.yaml v3.0, api/samplers.py,
 * filters/extraction.py, api/metrics.py), and where it lives here:
 *
 *  1. Data: JSONL, one {"question": str, "answer": str} object per line
 *     (openai/grade-school-math). The answer is a chain of thought ending in
 *     "#### N".                                    -> dsq_gsm8k_load
 *  2. Few-shot: num_fewshot 5 drawn from the train split by
 *     random.Random(1234).sample(train_docs, 5), one draw per test doc, in
 *     test-doc order, all from the same generator. -> dsq_pyrand_*,
 *     dsq_gsm8k_fewshot_next (a bit-exact port of CPython's MT19937 seeding,
 *     getrandbits and Random.sample; see gsm8k.c for the assumptions).
 *  3. Prompt: for each shot  doc_to_text + target_delimiter " " + answer +
 *     fewshot_delimiter "\n\n", then doc_to_text of the test doc, where
 *     doc_to_text is "Question: {q}\nAnswer:".     -> dsq_gsm8k_prompt
 *  4. Generation: greedy, until "Question:", "</s>", "<|im_end|>" (plus the
 *     tokenizer's EOS), at most 256 new tokens (lm-eval's max_gen_toks
 *     default). The decoded completion is cut at the earliest stop string.
 *                                                  -> dsq_gsm8k_generate,
 *                                                     dsq_gsm8k_stop_pos
 *  5. Filters: "strict-match" = regex `#### (\-?[0-9\.\,]+)`, first match;
 *     "flexible-extract" = `(-?[$0-9.,]{2,})|(-?[0-9]+)`, last match
 *     (group_select -1), the non-empty group. Both strip() the result and
 *     fall back to "[invalid]".                   -> dsq_gsm8k_extract
 *  6. Metric exact_match: re.sub each of ",", "\$", "(?s).*#### ", "\.$"
 *     with "" on prediction and reference (the full answer text), in that
 *     order, then lower-case both and compare.    -> dsq_gsm8k_exact_match
 *     Accuracy is the mean; its stderr is lm-eval's mean_stderr (sample
 *     standard deviation / sqrt(n)).              -> dsq_gsm8k_stderr
 *
 * Regexes run through PCRE2 in byte mode (no UTF check), so model output that
 * is not valid UTF-8 cannot make a filter fail. Every pattern involved only
 * looks at ASCII, and `$` keeps Python's meaning (end, or before a final
 * newline). Lower-casing is ASCII-only: the strings it sees after filtering
 * are digits, '.', ',', '-', '$' or "[invalid]".
 *
 * Library code: nothing here prints. Errors come back as dsq_status codes
 * with a dsq_diag naming the file and line. */
#ifndef DSQ_GSM8K_H
#define DSQ_GSM8K_H

#include "dsq_error.h"
#include "sample.h"

#include <stddef.h>
#include <stdint.h>

/* ---- dataset ------------------------------------------------------------ */

typedef struct dsq_gsm8k_item {
    char  *question;     /* NUL-terminated; may contain further NULs (len is exact) */
    size_t question_len;
    char  *answer;
    size_t answer_len;
    size_t line;         /* 1-based line number in the file */
} dsq_gsm8k_item;

typedef struct dsq_gsm8k_set {
    dsq_gsm8k_item *items;
    size_t n;
} dsq_gsm8k_set;

/* Load a JSONL file. Blank (whitespace-only) lines are skipped; anything
 * else must be one JSON object with string fields "question" and "answer"
 * (other fields are ignored). Errors (DSQ_ERR_DATA, diag names the file):
 *   "line N: invalid JSON: <json-c message>", "line N: not a JSON object",
 *   "line N: missing \"question\" field", "line N: \"answer\" is not a string",
 *   "empty dataset: no items". I/O errors are DSQ_ERR_IO / DSQ_ERR_NOT_FOUND.
 * On failure s is left empty. */
int  dsq_gsm8k_load(dsq_gsm8k_set *s, const char *path, dsq_diag *d);
/* Any numeric-answer set: the question and answer under other field names
 * (the answer may then be a JSON number, kept as its text). */
int  dsq_gsm8k_load_fields(dsq_gsm8k_set *s, const char *path, const char *qfield,
                           const char *afield, dsq_diag *d);
/* Same from memory; name is used in messages. */
int  dsq_gsm8k_parse(dsq_gsm8k_set *s, const char *text, size_t len,
                     const char *name, dsq_diag *d);
void dsq_gsm8k_set_release(dsq_gsm8k_set *s);

/* ---- CPython-compatible random numbers ---------------------------------- */

/* MT19937 seeded like CPython's random.Random(seed) for a non-negative int
 * seed (init_by_array over the 32-bit words of the seed). */
typedef struct dsq_pyrand {
    uint32_t mt[624];
    int      idx;
} dsq_pyrand;

void     dsq_pyrand_seed(dsq_pyrand *r, uint64_t seed);
uint32_t dsq_pyrand_u32(dsq_pyrand *r);                /* genrand_uint32 */
/* random.getrandbits(k) for 1 <= k <= 32. */
uint32_t dsq_pyrand_bits(dsq_pyrand *r, int k);
/* random._randbelow(n) (rejection on getrandbits(n.bit_length())), n >= 1. */
uint32_t dsq_pyrand_below(dsq_pyrand *r, uint32_t n);
/* random.sample(range(n), k) into out[k]: the same indices, same order.
 * n < 2^32, k <= n. DSQ_ERR_INVALID_ARG otherwise, DSQ_ERR_NOMEM. */
int      dsq_pyrand_sample(dsq_pyrand *r, size_t n, size_t k, size_t *out);

/* ---- few-shot prompts ------------------------------------------------------ */

#define DSQ_GSM8K_SHOTS 5      /* num_fewshot */
#define DSQ_GSM8K_SEED  1234   /* lm-eval's default fewshot_random_seed */
#define DSQ_GSM8K_MAX_NEW 256  /* lm-eval's default max_gen_toks */

/* The sampler state: one generator for the whole run, one draw per test doc
 * in doc order (as lm-eval's ContextSampler with fewshot_split != test_split). */
typedef struct dsq_gsm8k_fewshot {
    dsq_pyrand rng;
    size_t n_train;
    int shots;
} dsq_gsm8k_fewshot;

/* shots in [0, n_train]; DSQ_ERR_INVALID_ARG otherwise. */
int dsq_gsm8k_fewshot_init(dsq_gsm8k_fewshot *f, size_t n_train, int shots, uint64_t seed);
/* Indices into the train set for the next test doc (out[shots]). */
int dsq_gsm8k_fewshot_next(dsq_gsm8k_fewshot *f, size_t *out);

/* Build the prompt: "Question: {q}\nAnswer: {a}\n\n" for each shot, then
 * "Question: {q}\nAnswer:". Byte-exact; *out is malloc'd, NUL-terminated,
 * *len excludes the NUL. DSQ_ERR_INVALID_ARG for an index out of range. */
int dsq_gsm8k_prompt(const dsq_gsm8k_set *train, const size_t *shots, int n_shots,
                     const dsq_gsm8k_item *doc, char **out, size_t *len);

/* ---- stop strings ---------------------------------------------------------- */

/* The task's `until` list ("Question:", "</s>", "<|im_end|>"). */
extern const char *const dsq_gsm8k_stops[3];

/* Offset of the earliest occurrence of any of the stop strings (empty ones
 * are ignored), or len when none occurs. Cutting there equals lm-eval's
 * `for term in until: s = s.split(term)[0]`. */
size_t dsq_gsm8k_stop_pos(const char *text, size_t len,
                          const char *const *stops, size_t n_stops);

/* ---- filters and metric ------------------------------------------------------ */

enum dsq_gsm8k_filter {
    DSQ_GSM8K_STRICT   = 0, /* "strict-match" */
    DSQ_GSM8K_FLEXIBLE = 1  /* "flexible-extract" */
};

#define DSQ_GSM8K_INVALID "[invalid]"

/* Compiled patterns plus match data. Not thread-safe: one per thread. */
typedef struct dsq_gsm8k_scorer dsq_gsm8k_scorer;

int  dsq_gsm8k_scorer_create(dsq_gsm8k_scorer **out, dsq_diag *d);
void dsq_gsm8k_scorer_free(dsq_gsm8k_scorer *sc);

/* Apply one filter to a completion: the extracted answer (stripped) or
 * "[invalid]". *out is malloc'd and NUL-terminated. */
int dsq_gsm8k_extract(dsq_gsm8k_scorer *sc, int filter, const char *text, size_t len,
                      char **out);
/* exact_match's normalisation: regexes_to_ignore in order, then lower(). */
int dsq_gsm8k_normalize(dsq_gsm8k_scorer *sc, const char *text, size_t len,
                        char **out, size_t *out_len);
/* *match = 1 when normalize(pred) == normalize(ref). */
int dsq_gsm8k_exact_match(dsq_gsm8k_scorer *sc, const char *pred, size_t pred_len,
                          const char *ref, size_t ref_len, int *match);

/* Everything lm-eval reports for one item. */
typedef struct dsq_gsm8k_score {
    char *strict;       /* strict-match filter output */
    char *flexible;     /* flexible-extract filter output */
    char *gold;         /* normalised reference (the number after "#### ") */
    int   correct_strict;
    int   correct_flexible;
} dsq_gsm8k_score;

/* Score a completion against the doc's full answer text. The completion is
 * first cut at the earliest of stops[] (pass the task stops plus the EOS
 * text; n_stops 0 to skip), as lm-eval's generate_until does. */
int  dsq_gsm8k_score_item(dsq_gsm8k_scorer *sc, const char *completion, size_t len,
                          const char *answer, size_t answer_len,
                          const char *const *stops, size_t n_stops,
                          dsq_gsm8k_score *out);
void dsq_gsm8k_score_release(dsq_gsm8k_score *s);

/* lm-eval's mean_stderr for k successes out of n 0/1 values:
 * sqrt(sum((x - mean)^2) / (n - 1)) / sqrt(n); 0 when n < 2. */
double dsq_gsm8k_stderr(size_t k, size_t n);

/* ---- completions produced elsewhere (ds-eval gsm8k --score) ------------------ */

/* JSONL, one object per non-blank line. The completion text is taken from
 * the first present of:
 *   "completion": str
 *   "response":   str
 *   "resps":      str | [str, ...] | [[str, ...], ...]   (lm-eval samples
 *                 files: resps[0][0])
 * The doc is "doc_id" (a non-negative integer) when present, else the
 * record's 0-based ordinal among non-blank lines. Errors (DSQ_ERR_DATA)
 * name the line: invalid JSON, no completion field, doc_id not an integer or
 * >= n_docs, duplicate doc_id; an empty file is an error too. */
typedef struct dsq_gsm8k_completions {
    char  **text;       /* [n_docs], NULL where the file has no completion */
    size_t *len;        /* [n_docs] */
    size_t  n_docs;
    size_t  n_present;
} dsq_gsm8k_completions;

int  dsq_gsm8k_completions_load(dsq_gsm8k_completions *c, const char *path,
                                size_t n_docs, dsq_diag *d);
int  dsq_gsm8k_completions_parse(dsq_gsm8k_completions *c, const char *text, size_t len,
                                 const char *name, size_t n_docs, dsq_diag *d);
void dsq_gsm8k_completions_release(dsq_gsm8k_completions *c);

/* ---- batched generation --------------------------------------------------- */

/* The model as generation sees it: a fixed number of sequence slots, each
 * with its own KV cache. */
typedef struct dsq_gen_ops {
    void  *user;
    size_t vocab;      /* logits per row */
    int    n_slots;    /* sequences that can be in flight at once (>= 1) */
    /* Clear slot's cache, run the n prompt tokens through it and write the
     * logits after the last one (vocab floats). */
    int (*prefill)(void *user, int slot, const int32_t *tokens, size_t n,
                   float *logits, dsq_diag *d);
    /* Append tokens[i] to slot slots[i] for i < n and write each slot's next
     * logits to logits + i*vocab. Slots are distinct. */
    int (*decode)(void *user, const int *slots, const int32_t *tokens, int n,
                  float *logits, dsq_diag *d);
    /* Text of generated ids (the CLI skips special tokens, as lm-eval's
     * tok_decode does). *text malloc'd and NUL-terminated (at least
     * *len + 1 bytes: the completion is cut in place at a stop string). */
    int (*detok)(void *user, const int32_t *ids, size_t n, char **text, size_t *len);
} dsq_gen_ops;

enum dsq_gen_stop {
    DSQ_GEN_STOP_STRING = 1, /* a stop string appeared */
    DSQ_GEN_STOP_EOS    = 2, /* an end-of-sequence id was chosen */
    DSQ_GEN_STOP_LENGTH = 3  /* max_new_tokens reached (prompts are cut to
                                max_ctx - max_new_tokens, so the context
                                cannot fill first) */
};

typedef struct dsq_gen_opts {
    size_t max_new_tokens;        /* >= 1 */
    size_t max_ctx;               /* > max_new_tokens; prompts longer than
                                     max_ctx - max_new_tokens keep their last
                                     tokens, as lm-eval left-truncates */
    const char *const *stops;     /* stop strings on the decoded text */
    size_t n_stops;
    const int32_t *eos;           /* ids that end a sequence (not emitted) */
    size_t n_eos;
    volatile int *cancel;         /* polled between steps; may be NULL */
    dsq_sample_params sample;     /* zero: greedy */
    const uint64_t *seeds;        /* sampling: request i draws from the stream
                                     seeded seeds[i] (as ds-serve seeds a
                                     request's choice i with seed + i); NULL:
                                     seed i */
} dsq_gen_opts;

typedef struct dsq_gen_result {
    char  *text;            /* completion cut at the earliest stop string */
    size_t len;
    size_t n_prompt;        /* prompt tokens actually fed */
    size_t n_gen;           /* generated tokens fed back (excl. EOS) */
    int    stop;            /* enum dsq_gen_stop */
    int    truncated;       /* the prompt was left-truncated */
} dsq_gen_result;

/* Called once per request as it finishes (any order). To keep the text the
 * callback takes r->text and sets it to NULL (then free() it later);
 * otherwise it is freed on return. A negative return aborts the run with
 * that status. */
typedef int (*dsq_gen_done_fn)(void *user, size_t index, dsq_gen_result *r);

/* Continuation of n_req prompts using up to ops->n_slots slots at a time:
 * greedy (argmax, lowest id on ties), or sampled as o->sample says
 * (sample.h); a request's tokens do not depend on the slots or on the other
 * requests. prompts[i]/n_prompt[i] are token ids.
 * Returns DSQ_ERR_INTERRUPTED when *cancel became non-zero. */
int dsq_gsm8k_generate(const dsq_gen_ops *ops, const dsq_gen_opts *o,
                       const int32_t *const *prompts, const size_t *n_prompt,
                       size_t n_req, dsq_gen_done_fn done, void *done_user,
                       dsq_diag *d);

#endif
