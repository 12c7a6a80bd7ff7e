/* eval_metrics.h - perplexity and KL divergence the way llama-perplexity
 * measures them, plus the base log-prob file that KLD compares against.
 *
 * Windows (llama.cpp tools/perplexity, perplexity()):
 *   The text is tokenized once (with the tokenizer's BOS when it adds one)
 *   and cut into n_chunks = floor(n_tokens / n_ctx) non-overlapping windows
 *   of n_ctx tokens; leftover tokens are not used. Each window is evaluated
 *   from an empty cache. When a BOS id is given, the first token of every
 *   window is replaced by BOS (the replaced token is neither input nor
 *   scored). Only the second half is scored: with first = n_ctx / 2, the
 *   logits after positions first .. n_ctx-2 predict tokens first+1 ..
 *   n_ctx-1, so each window scores n_ctx - 1 - first tokens (255 of 512),
 *   and every scored token has at least n_ctx/2 tokens of context.
 *   PPL = exp(mean NLL); its stderr is llama.cpp's:
 *   ppl * sqrt((mean(nll^2) - mean(nll)^2) / (count - 1)).
 *
 * NLL is -log_softmax(logits)[target] computed in double: max-subtracted
 * sum of exp over the row, so float logits of any range are safe.
 *
 * The model enters only through dsq_window_logits_fn, so everything here is
 * testable with hand-made logits. Library code: nothing prints. */
#ifndef DSQ_EVAL_METRICS_H
#define DSQ_EVAL_METRICS_H

#include "dsq_error.h"
#include "dsq_file.h"
#include "dsq_sha256.h"
#include "dsq_thread.h"

#include <stddef.h>
#include <stdint.h>

/* ---- per-row math --------------------------------------------------------- */

/* log(sum(exp(x))) in double, max-subtracted. n >= 1. */
double  dsq_log_sum_exp(const float *x, size_t n);
/* -log_softmax(x)[target] = log_sum_exp(x) - x[target]. */
double  dsq_token_nll(const float *x, size_t n, int32_t target);
/* Index of the largest value; the lowest index on ties (torch.argmax). */
int32_t dsq_argmax_f32(const float *x, size_t n);

/* ---- windows ------------------------------------------------------------------ */

typedef struct dsq_ppl_plan {
    size_t  n_ctx;       /* window length */
    size_t  first;       /* n_ctx / 2: first position whose logits are scored */
    size_t  n_chunks;    /* windows */
    size_t  per_chunk;   /* scored tokens per window: n_ctx - 1 - first */
    int32_t bos;         /* id written over each window's first token, -1 none */
} dsq_ppl_plan;

/* n_ctx in [3, 2^31) so each window scores at least one token
 * (DSQ_ERR_INVALID_ARG otherwise). DSQ_ERR_DATA "the text tokenizes to only
 * N tokens, fewer than one window of n_ctx" when not even one window fits. */
int  dsq_ppl_plan_init(dsq_ppl_plan *p, size_t n_tokens, size_t n_ctx, int32_t bos, dsq_diag *d);
/* Copy window `chunk` (n_ctx tokens, BOS replaced) into out. */
void dsq_ppl_window(const dsq_ppl_plan *p, const int32_t *tokens, size_t chunk, int32_t *out);

/* Evaluate window[0..n) from an empty cache and write the logits after
 * positions first .. n-2 (n - 1 - first rows of vocab floats, row-major). */
typedef int (*dsq_window_logits_fn)(void *user, const int32_t *window, size_t n,
                                    size_t first, float *logits, dsq_diag *d);

/* Progress, cancellation and threads, all optional (zero the struct). */
typedef struct dsq_eval_hooks {
    volatile int *cancel;                       /* polled between windows */
    void (*progress)(void *user, size_t done_chunks, size_t n_chunks);
    void *progress_user;
    dsq_pool *pool;                             /* per-position math in parallel */
} dsq_eval_hooks;

typedef struct dsq_ppl_result {
    size_t   n_chunks;
    uint64_t count;        /* tokens scored */
    double   nll_sum, nll2_sum;
    double   mean_nll;     /* nats per token */
    double   ppl;
    double   ppl_stderr;
} dsq_ppl_result;

struct dsq_logp_writer;

/* Run all windows of the plan over tokens (the full tokenized text, of at
 * least n_chunks * n_ctx tokens). When save != NULL each scored position is
 * also appended to it (the caller opened it with the same plan and tokens,
 * and commits it afterwards). Results are identical whatever the pool size:
 * per-position values are summed in position order. */
int dsq_ppl_run(const dsq_ppl_plan *p, const int32_t *tokens, size_t vocab,
                dsq_window_logits_fn fn, void *user, struct dsq_logp_writer *save,
                const dsq_eval_hooks *h, dsq_ppl_result *r, dsq_diag *d);

/* ---- base log-prob file ("DSQLOGP1") ------------------------------------------------
 *
 * What `ds-eval ppl --save-logits F` writes and `ds-eval kld --base F`
 * reads: the windows it evaluated and, for each scored position, the base
 * model's log-probabilities, compactly. All integers little-endian.
 *
 *   offset 0   header, 64 bytes:
 *     char[8] magic "DSQLOGP\0"
 *     u32 version (1)            u32 header_size (64)
 *     u32 vocab                  u32 n_ctx
 *     u32 first                  u32 n_chunks
 *     u32 encoding (1 u16, 2 topk)   u32 top_k (1..256)
 *     i32 bos (-1 none)          u32 record_size
 *     u64 n_scored = n_chunks * (n_ctx - 1 - first)
 *     u8[8] zero
 *   64         i32 tokens[n_chunks * n_ctx]: the windows exactly as fed
 *              (BOS already written over each window's first token)
 *   then       u8[32] SHA-256 of header + tokens ("token hash")
 *   then       n_scored records of record_size bytes, window-major
 *   then       u8[32] SHA-256 of all record bytes
 *   The file size must equal exactly the sum of these parts.
 *
 *   Record (position j predicting token t):
 *     f32 target_lp   log p(t), exact (float32 of the double computation)
 *     f32 tail_lp     log of the total probability of the tokens the record
 *                     does not represent (below), exact; -inf when none
 *     f32 scale       u16 only: quantization step, else 0
 *     f32 min_lp      u16 only: log-prob of code 0, else 0
 *     top_k x { u32 id, f32 lp }   the top_k most likely tokens, exact,
 *                                  by lp descending, ties by id ascending
 *     u16 only: u16 code[vocab] (+2 zero bytes when vocab is odd)
 *
 *   encoding u16 (default): every token's log-prob, quantized as llama.cpp
 *     does: min_lp = max(lowest lp, top lp - 16), scale = (top lp - min_lp)
 *     / 65535, code = round((lp - min_lp) / scale) for lp > min_lp, else 0.
 *     Decoded lp = min_lp + scale * code, off by at most scale / 2 <=
 *     16 / 131070 = 1.22e-4 nats. Represented tokens: the top_k (exact) and
 *     every token with code > 0; tokens with code 0 (more than 16 nats below
 *     the top, p < 1.2e-7 each, or rounded to the floor) are the tail.
 *     Size: 16 + 8 top_k + 2 vocab bytes per position (DeepSeek-V3, vocab
 *     129,280: 253 KiB; 512-token windows score 255 positions each).
 *   encoding topk: only the top_k tokens plus the exact tail mass: 16 + 8
 *     top_k bytes per position, small enough for whole corpora, but see the
 *     lower bound below.
 *
 * KLD per position is computed in double over the represented tokens R plus
 * the tail as one bucket T:
 *     KL = sum_{i in R} p_i (lp_i - lq_i) + P_T (log P_T - log Q_T)
 * with P_T = exp(tail_lp) and Q_T the new model's mass outside R. The p_i of
 * R are first rescaled so they sum to exactly 1 - P_T, which cancels the
 * u16 rounding errors to first order. Merging the tail into one bucket can
 * only lower KL (log-sum inequality):
 *   - u16: the tail is the tokens more than 16 nats below the top, so the
 *     loss is negligible. Measured on 129,280-token rows with KL ~1e-4 and
 *     top_k 16: relative error <= 3e-4, KL of identical logits ~1e-9.
 *   - topk: a lower bound that is tight only when the top_k tokens hold
 *     nearly all the mass; on flat (high-entropy) rows it can be far below
 *     the true KL. Use it for a quick look, u16 for numbers to publish.
 *
 * kld refuses a base whose token hash or data hash does not match
 * (DSQ_ERR_CHECKSUM), and a model whose vocabulary size differs. A data
 * file given to kld is re-tokenized and compared with the stored tokens. */

#define DSQ_LOGP_MAGIC "DSQLOGP"
#define DSQ_LOGP_VERSION 1
#define DSQ_LOGP_HEADER 64
#define DSQ_LOGP_MAX_TOPK 256

enum dsq_logp_encoding {
    DSQ_LOGP_U16  = 1,
    DSQ_LOGP_TOPK = 2
};

typedef struct dsq_logp_info {
    uint32_t vocab, n_ctx, first, n_chunks, encoding, top_k, record_size;
    int32_t  bos;
    uint64_t n_scored;
} dsq_logp_info;

/* Bytes of one record for this encoding. */
size_t dsq_logp_record_size(int encoding, size_t vocab, int top_k);

/* Encode one position (logits of vocab floats, target token) into rec. */
int dsq_logp_encode(const dsq_logp_info *info, const float *logits, int32_t target,
                    uint8_t *rec);

/* KL(base || new) and friends for one record against new logits.
 * scratch: vocab bytes, zeroed on entry and on return. */
typedef struct dsq_logp_cmp {
    double kld;
    double nll;          /* new model: -log q(t) */
    double nll_base;     /* -target_lp */
    int    same_top;     /* argmax(new) == base top-1 */
} dsq_logp_cmp;

/* DSQ_ERR_FORMAT for a record holding an id >= vocab or a NaN value (the
 * data hash only proves the file is what was written, not that it is sane). */
int dsq_logp_compare(const dsq_logp_info *info, const uint8_t *rec, const float *logits,
                     int32_t target, uint8_t *scratch, dsq_logp_cmp *out);

typedef struct dsq_logp_writer {
    dsq_outfile   out;
    dsq_logp_info info;
    dsq_sha256    data_hash;
    uint8_t      *buf;         /* one window's records */
    uint64_t      written;     /* records so far */
    int           open;
} dsq_logp_writer;

/* Create path atomically (dsq_outfile flags, e.g. DSQ_OUT_OVERWRITE) and
 * write header, tokens and token hash for plan p over tokens. */
int  dsq_logp_writer_open(dsq_logp_writer *w, const char *path, unsigned flags,
                          const dsq_ppl_plan *p, const int32_t *tokens, size_t vocab,
                          int encoding, int top_k, dsq_diag *d);
/* Append n encoded records (n * record_size bytes, in order). */
int  dsq_logp_writer_append(dsq_logp_writer *w, const uint8_t *recs, size_t n, dsq_diag *d);
/* All n_scored records must have been appended; writes the data hash. */
int  dsq_logp_writer_commit(dsq_logp_writer *w, dsq_diag *d);
void dsq_logp_writer_abort(dsq_logp_writer *w);

typedef struct dsq_logp_reader {
    dsq_map        map;
    dsq_logp_info  info;
    const int32_t *tokens;       /* n_chunks * n_ctx, windows as fed */
    const uint8_t *records;
    uint8_t        token_hash[DSQ_SHA256_LEN];
    char          *path;
    int            borrowed;     /* map.data is the caller's (open_mem) */
} dsq_logp_reader;

/* Map and validate: magic, version, fields in range, exact file size,
 * token hash. Token ids are checked against vocab. Does not read the
 * records (dsq_kld_run hashes them as it goes; dsq_logp_reader_verify
 * does it all at once). */
int  dsq_logp_reader_open(dsq_logp_reader *r, const char *path, dsq_diag *d);
/* The same checks on a whole file held in memory (tests, fuzzing): data
 * must be 4-byte aligned (tokens are used in place; DSQ_ERR_INVALID_ARG
 * otherwise) and outlive the reader, which never frees it. name is used in
 * messages and as r->path (NULL: "<memory>"). */
int  dsq_logp_reader_open_mem(dsq_logp_reader *r, const void *data, size_t size,
                              const char *name, dsq_diag *d);
int  dsq_logp_reader_verify(const dsq_logp_reader *r, dsq_diag *d);
void dsq_logp_reader_close(dsq_logp_reader *r);
/* The plan the base was computed with. */
void dsq_logp_reader_plan(const dsq_logp_reader *r, dsq_ppl_plan *p);

/* ---- KL divergence run ------------------------------------------------------------------ */

typedef struct dsq_kld_result {
    uint64_t count;
    double kld_mean, kld_stderr;
    double kld_min, kld_p01, kld_p05, kld_p10, kld_median, kld_p90, kld_p95, kld_p99,
           kld_p999, kld_max;
    double same_top;            /* fraction of positions with the same argmax */
    double same_top_stderr;
    double ppl, ppl_base;       /* exp(mean nll) of new and base over the same tokens */
    double ppl_ratio;           /* ppl / ppl_base */
    double ppl_delta;           /* ppl - ppl_base */
    double ln_ratio_mean;       /* mean(nll - nll_base) = ln(ppl / ppl_base) */
    double ln_ratio_stderr;
    double dp_rms;              /* RMS of p(t) - p_base(t) */
    /* Noise band of kld_mean: 95% percentile-bootstrap interval over whole
     * windows (dsq_kld_bootstrap; DSQ_KLD_BOOT_N resamples, fixed seed, so
     * the same KLs give the same band). Windows, not positions, are the
     * resampled unit because KL is correlated inside a window (a flipped
     * digit changes what follows); equal to kld_mean with one window. */
    double kld_mean_lo, kld_mean_hi;
} dsq_kld_result;

#define DSQ_KLD_BOOT_N    2000
#define DSQ_KLD_BOOT_SEED 0x6b6c64626f6f7431ull   /* "kldboot1" */

/* Percentile bootstrap of the mean of klds[count] (in position order,
 * window-major, per_window positions per window; a short last window is its
 * own unit): n_boot resamples of the windows with replacement, xorshift64*
 * from seed; *lo / *hi = the 2.5th / 97.5th percentiles of the resampled
 * means. Pure function of its arguments. n_boot == 0 or count == 0: both
 * the plain mean (0 for count == 0). DSQ_ERR_NOMEM only. */
int dsq_kld_bootstrap(const float *klds, uint64_t count, size_t per_window, unsigned n_boot, uint64_t seed,
                      double *lo, double *hi);

/* Evaluate every stored window with fn and compare with the base. Verifies
 * the records' SHA-256 while reading; on mismatch returns DSQ_ERR_CHECKSUM
 * and no result. vocab must equal the base's. */
int dsq_kld_run(const dsq_logp_reader *base, size_t vocab, dsq_window_logits_fn fn,
                void *user, const dsq_eval_hooks *h, dsq_kld_result *r, dsq_diag *d);

/* Running sums of a KL comparison, added in position order; shared by
 * dsq_kld_run and the served-model path (endpoint.h) so both report the
 * same statistics the same way. */
typedef struct dsq_kld_sums {
    double kld, kld2, nll, nll_base, diff, diff2, dp2;
} dsq_kld_sums;
/* One scored position: its KL, and the new and base negative log-probs of
 * the target token. */
void dsq_kld_sums_add(dsq_kld_sums *s, double kld, double nll, double nll_base);
/* Fill every field of r but same_top / same_top_stderr from count positions:
 * the sums and the per-position KLs klds[count] in position order, windows
 * of per_window positions (for the bootstrap band; sorted in place after,
 * count > 0). DSQ_ERR_NOMEM only. */
int dsq_kld_finish(dsq_kld_result *r, const dsq_kld_sums *s, float *klds, uint64_t count, size_t per_window);

/* Linear-interpolated percentile of sorted v[n] (numpy's default and
 * llama.cpp's), q in [0, 1]. */
double dsq_percentile_sorted(const float *v, size_t n, double q);

#endif
