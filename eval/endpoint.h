/* endpoint.h - ds-eval against an OpenAI-compatible server (vLLM,
 * vllm-ascend, MindIE, ds-serve): the same measurements as the local path
 * with the model behind /v1/completions.
 *
 *  - gsm8k: the caller builds the lm-eval prompts (gsm8k.h) and scores the
 *    completions exactly as the local run; here they are sent as text with
 *    temperature 0, the task's stop strings and max_tokens, N at a time.
 *  - ppl: the windows of eval_metrics.h, sent as token-id prompts with
 *    echo + logprobs (the prompt's log-probs, as lm-eval's loglikelihood
 *    requests); the scored positions and the PPL / stderr formulas are
 *    dsq_ppl_run's.
 *
 * The response parsers are separate functions so the fuzz target can drive
 * them with hostile bytes. Library code: nothing prints. */
#ifndef DSQ_ENDPOINT_H
#define DSQ_ENDPOINT_H

#include "dsq_error.h"
#include "eval_metrics.h"
#include "gsm8k.h"
#include "tokenizer.h"

#include <stddef.h>
#include <stdint.h>

typedef struct dsq_endpoint_opts {
    const char *url;          /* base, e.g. http://127.0.0.1:8000/v1 */
    const char *api_key;      /* NULL: none */
    const char *model;        /* NULL: the only model /v1/models lists */
    int concurrency;          /* requests in flight */
    double timeout_s;         /* per request */
    int retries;
    volatile int *cancel;
} dsq_endpoint_opts;

/* ---- response parsers ------------------------------------------------------------ */

/* GET /models: the ids of "data": [{"id": str}, ...]. */
int dsq_ep_parse_models(const char *body, size_t len, char ***ids, size_t *n, dsq_diag *d);
void dsq_ep_free_models(char **ids, size_t n);

typedef struct dsq_ep_completion {
    char *text;               /* choices[0].text (malloc'd) */
    size_t len;
    char finish[16];          /* "stop", "length", ... or "" */
    int64_t prompt_tokens, completion_tokens; /* usage, -1 when absent */
    char *error;              /* dsq_ep_complete_all: the server refused this prompt alone
                               * (over its context: HTTP 400 / 413 / 422 saying so); text NULL */
} dsq_ep_completion;

int  dsq_ep_parse_completion(const char *body, size_t len, dsq_ep_completion *c, dsq_diag *d);
/* The prompt's log-probs from an echo + logprobs response: lp[i] for
 * i in [1, n_prompt) (lp[0] has no context and is set to NaN). Takes
 * choices[0].logprobs.token_logprobs, or vLLM's choices[0].prompt_logprobs
 * ([null, {"id": {"logprob": x}}, ...]) given token ids. */
int  dsq_ep_parse_prompt_logprobs(const char *body, size_t len, const int32_t *prompt, size_t n_prompt,
                                  double *lp, dsq_diag *d);
/* vLLM's id-keyed choices[0].prompt_logprobs, position by position:
 * [null, {"<id>": {"logprob": x, "rank": r, "decoded_token": s}, ...}, ...].
 * For each position i in [1, n_prompt) up to cap (id, log-prob) pairs go to
 * ids / lps[i * cap ..], their count to n[i] and the id of rank 1 to
 * top1[i] (-1 when no entry says rank 1). The prompt token must be there
 * (that is what vLLM guarantees); ids must be < vocab. *have is 0 and the
 * rest untouched when the response has no prompt_logprobs list (a server
 * that ignores the field): the caller falls back to token_logprobs. */
int  dsq_ep_parse_prompt_topk(const char *body, size_t len, const int32_t *prompt, size_t n_prompt,
                              size_t vocab, int cap, int32_t *ids, double *lps, int *n, int32_t *top1,
                              int *have, dsq_diag *d);
/* Token text -> id for text-keyed top_logprobs: each id decoded alone
 * (dsq_tokenizer_decode, as ds-serve and vLLM's decoded_token spell it);
 * a text that several ids decode to is ambiguous and maps to nothing. */
typedef struct dsq_ep_vocab dsq_ep_vocab;
int     dsq_ep_vocab_build(dsq_ep_vocab **v, const dsq_tokenizer *t, dsq_diag *d);
void    dsq_ep_vocab_free(dsq_ep_vocab *v);
/* The id, -1 when no id decodes to s, -2 when several do. "token_id:N"
 * (vLLM's --return-tokens-as-token-ids) is id N. */
int32_t dsq_ep_vocab_lookup(const dsq_ep_vocab *v, const char *s, size_t len);

/* The OpenAI echo form's choices[0].logprobs.top_logprobs mapped to ids
 * with v, into the same arrays as dsq_ep_parse_prompt_topk (the prompt
 * token first, from token_logprobs; then each unambiguous key; top1[i] the
 * id of the largest entry when its key maps, else -1). *have is 1 only when
 * logprobs.tokens spells every prompt token exactly as v decodes it (the
 * check that server and tokenizer agree on spelling; otherwise the caller
 * keeps the two-bucket bound). */
int  dsq_ep_parse_prompt_texttopk(const char *body, size_t len, const int32_t *prompt, size_t n_prompt,
                                  const dsq_ep_vocab *v, int cap, int32_t *ids, double *lps, int *n,
                                  int32_t *top1, int *have, dsq_diag *d);
/* The "error.message" of an OpenAI error body, or a prefix of the body. */
void dsq_ep_error_text(const char *body, size_t len, char *out, size_t n);
/* 1 when an error answer refuses one prompt only (longer than the server's
 * context), so a run records it as that item's error and goes on. */
int  dsq_ep_item_refusal(long status, const char *msg);
/* A DSQ_ERR_JSON (an answer not of the OpenAI shape) re-said naming the
 * URL of path, with a hint when the base URL does not end in /v1 (servers
 * answer their own shapes at their root); other statuses pass through. */
int  dsq_ep_not_openai(const dsq_endpoint_opts *o, const char *path, int rc, dsq_diag *d);
/* 1 when a 5xx answer says a parameter is not supported: retrying cannot help. */
int  dsq_ep_permanent_5xx(long status, const char *body, size_t len);

/* ---- runs ------------------------------------------------------------------------ */

/* Check the server and settle the model name: GET /models; a refused key,
 * a non-OpenAI answer and an unknown model are errors naming the URL.
 * *model is malloc'd. */
int dsq_ep_resolve_model(const dsq_endpoint_opts *o, char **model, dsq_diag *d);

/* Called (serialized) as each completion arrives, or with c->error set for
 * a prompt the server refused by itself (longer than its context): that
 * item's error, the run goes on. A negative return stops the run with that
 * status. */
typedef int (*dsq_ep_done_fn)(void *user, size_t index, dsq_ep_completion *c);

/* Complete prompts[todo[k]] for k < n_todo, o->concurrency at a time,
 * greedy (temperature 0), with the given stops and max_tokens. */
int dsq_ep_complete_all(const dsq_endpoint_opts *o, const char *model,
                        const char *const *prompts, const size_t *lens,
                        const size_t *todo, size_t n_todo, size_t max_tokens,
                        const char *const *stops, size_t n_stops,
                        dsq_ep_done_fn done, void *user, dsq_diag *d);

/* Perplexity over the windows of p, as dsq_ppl_run computes it. */
int dsq_ep_ppl_run(const dsq_endpoint_opts *o, const char *model, const dsq_ppl_plan *p,
                   const int32_t *tokens, const dsq_eval_hooks *h, dsq_ppl_result *r, dsq_diag *d);



/* KL divergence against a base saved by `ppl --save-logits`, from what an
 * OpenAI-style server gives, over the base file's windows. Each window is
 * one request with echo + logprobs (OpenAI) and vLLM's prompt_logprobs = k
 * (k = top_k of the request; 0: 20, vLLM's default --max-logprobs, or the
 * base's top_k when that is larger).
 *
 *  - id-keyed (the server answered prompt_logprobs: vLLM, ds-serve): the
 *    base top-k formula of eval_metrics.h, with the served log-prob of each
 *    base top-k token and the served mass outside them as 1 - their sum.
 *    Where every base top-k token is among the served ones (counted in
 *    exact_positions) the value is the one `ds-eval kld` computes locally
 *    from the same base when that is a topk base (its lower bound). A
 *    u16 base is used through its top-k only (everything else one bucket),
 *    so that too is a lower bound, looser than the local u16 value. A base top-k token the server
 *    did not list is merged into the tail bucket on both sides, which by the
 *    log-sum inequality only lowers the value. same_top is the fraction of
 *    positions where the served rank-1 id is the base's top-1, over the
 *    positions where the server named its rank 1 (same_top_count).
 *  - text-keyed only (plain OpenAI top_logprobs, logprobs = 5 asked): with
 *    vocab (built from the served model's tokenizer) the keys are mapped
 *    back to ids where the text is unambiguous (one id decodes to it;
 *    dsq_ep_vocab_lookup), for windows whose echoed tokens the server
 *    spells exactly as the tokenizer decodes them; ambiguous keys join the
 *    tail bucket, and the same top-k formula applies (text_positions).
 *  - otherwise (no vocab, or spellings that disagree) the vocabulary is
 *    merged into two buckets, {target} and the rest: a much looser lower
 *    bound, zero exactly when the two agree on every target probability;
 *    same_top is NaN.
 * Either way the KLD reported is a LOWER BOUND of KL(base || served); PPL,
 * PPL ratio, ln ratio and RMS dp are exact. The base's data hash is
 * verified first. */
/* One position: the base top-k formula of dsq_logp_compare (eval_metrics.h)
 * for base record rec with the served log-probs lps of ids[0..n). Base
 * top-k tokens the server did not list join the tail bucket (a lower bound
 * by the log-sum inequality); *exact: all were listed, so on a topk base
 * the value is dsq_logp_compare's. -1 on a malformed record. */
int dsq_ep_kl_topk(const dsq_logp_info *info, const uint8_t *rec, const int32_t *ids, const double *lps, int n,
                   double *kl, int *exact);

typedef struct dsq_ep_kld_info {
    uint64_t topk_positions;   /* positions computed from id-keyed top-k */
    uint64_t exact_positions;  /* ... with every base top-k token served */
    uint64_t text_positions;   /* ... of which mapped from text-keyed top_logprobs */
    uint64_t same_top_count;   /* positions whose served top-1 is known */
    int requested_k;
} dsq_ep_kld_info;

int dsq_ep_kld_run(const dsq_endpoint_opts *o, const char *model, const dsq_logp_reader *base,
                   int top_k, const dsq_ep_vocab *vocab, const dsq_eval_hooks *h, dsq_kld_result *r,
                   dsq_ep_kld_info *info, dsq_diag *d);

/* ---- gsm8k journal (--out) ---------------------------------------------------------
 *
 * ds-eval gsm8k --endpoint appends one JSON line per finished item to --out
 * ({"doc_id", "question", "completion", "prompt_tokens", "gen_tokens",
 * "stop"}, or "error" for an item the server refused) with one write(2) on
 * an O_APPEND descriptor and fsyncs it, so a rerun with the same --out asks
 * only for the items still missing (and those that failed). The file is
 * locked (flock) while a run holds it: a second run on the same --out is
 * refused, never interleaved. Reading it back: a last line cut short by a
 * kill is dropped (and truncated away); any other unparsable line, or a
 * question that differs from the dataset's, is DSQ_ERR_STATE (another run's
 * file). Records of items beyond this run's n (an earlier run with a larger
 * --limit) stay in the file and are kept in tail, for the caller to carry
 * into whatever replaces the journal: no item once paid for is dropped. */
typedef struct dsq_ep_item {
    char *completion;         /* malloc'd */
    size_t len;
    int64_t prompt_tokens, gen_tokens; /* -1 unknown */
    char finish[16];
    const char *error;        /* append: the server's refusal of this item (NULL: none) */
    int have;
} dsq_ep_item;

typedef struct dsq_ep_journal {
    int fd;
    char *path;
    char *tail;               /* the lines of records with doc_id >= n, each ending in '\n'; NUL-terminated */
    size_t tail_len;
} dsq_ep_journal;

/* Open path for appending under an exclusive lock (DSQ_ERR_EXISTS naming
 * the file when another process holds it); unless restart, first load the
 * items it holds (doc_id < n) into items[n] and count them in *n_have. */
int  dsq_ep_journal_open(dsq_ep_journal *j, const char *path, int restart, const dsq_gsm8k_set *test,
                         size_t n, dsq_ep_item *items, size_t *n_have, dsq_diag *d);
/* Parse journal bytes as dsq_ep_journal_open reads them (no file): the
 * fuzz target's entry. *keep: the bytes up to the last complete line. */
int  dsq_ep_journal_parse(const char *buf, size_t len, const char *path, const dsq_gsm8k_set *test, size_t n,
                          dsq_ep_item *items, size_t *n_have, char **tail, size_t *tail_len, size_t *keep,
                          dsq_diag *d);
int  dsq_ep_journal_append(dsq_ep_journal *j, size_t doc, const dsq_gsm8k_item *it,
                           const dsq_ep_item *item, dsq_diag *d);
/* Open path (created when absent) for appending with O_APPEND and take
 * its exclusive lock: *fd, or DSQ_ERR_EXISTS when another process holds
 * it (the chat journal of ds-eval gsm8k --chat shares it). */
int  dsq_ep_journal_lock(const char *path, int *fd, dsq_diag *d);
/* Release the lock and the memory (the caller has replaced the file or not). */
void dsq_ep_journal_close(dsq_ep_journal *j);

#endif
