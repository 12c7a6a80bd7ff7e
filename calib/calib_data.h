/* calib_data.h - calibration text -> a fixed matrix of token ids.
 *
 * Input (--calib FILE):
 *   - JSONL: one JSON object per non-empty line with a string field "text"
 *     (other fields are ignored). Chosen when the file name ends in .jsonl or
 *     .json, or its first non-blank byte is '{'.
 *   - plain text otherwise: documents are separated by blank lines (lines
 *     holding only spaces, tabs or CR).
 * A file with NUL bytes is refused as binary. Empty documents are skipped.
 *
 * Sampling (--calib-samples N, --calib-seqlen L, --seed S): the documents are
 * put in a seeded random order (Fisher-Yates over splitmix64(S)), tokenized in
 * that order with the tokenizer's add_special behaviour (BOS where the model
 * config asks for it) and concatenated until N*L tokens are there; the stream
 * is then cut into N samples of L tokens (AutoAWQ get_calib_dataset does the
 * same concatenate-and-split, without the shuffle). Only the documents needed
 * are tokenized, so a huge file costs one read plus N*L tokens of work. The
 * result is a pure function of (file bytes, tokenizer, N, L, S).
 *
 * Errors: DSQ_ERR_DATA for an empty/binary file, a JSONL line that is not an
 * object with a string "text", or fewer than N*L tokens in the whole file (the
 * message says how many there are and how many samples they would fill),
 * unless take_available (then only below the DSQ_CALIB_MIN_TOKENS floor);
 * DSQ_ERR_INVALID_ARG for N < 1, L < 2 or N*L above 2^31; the diag names the
 * file, and for JSONL the line and its byte offset. */
#ifndef DSQ_CALIB_DATA_H
#define DSQ_CALIB_DATA_H

#include "dsq_error.h"
#include "dsq_sha256.h"
#include "tokenizer.h"

#include <stddef.h>
#include <stdint.h>

#define DSQ_CALIB_SAMPLES_DEFAULT 128
#define DSQ_CALIB_SEQLEN_DEFAULT  512
/* With take_available, the fewest tokens calibration accepts (or the N*L
 * asked for, when that is less). Why 4,096: the statistics are per input
 * channel maxima and means, and AWQ searches on DSQ_CALIB_AWQ_TOKENS (512)
 * sampled rows per input, so a few thousand tokens is where they stop
 * moving with the sample; and in a DeepSeek-V3 MoE layer (top-8 of 256
 * experts) an expert sees 1/32 of the tokens on average: 4,096 tokens give
 * it ~128, 8x the 16 (DSQ_CALIB_MIN_EXPERT_TOKENS) below which it falls
 * back to RTN. Fewer, and most experts would be "calibrated" in name only. */
#define DSQ_CALIB_MIN_TOKENS      4096

enum dsq_calib_format {
    DSQ_CALIB_FMT_AUTO  = 0,
    DSQ_CALIB_FMT_TEXT  = 1,
    DSQ_CALIB_FMT_JSONL = 2
};

typedef struct dsq_calib_data_opts {
    int n_samples;      /* default 128 */
    int seqlen;         /* default 512 */
    uint64_t seed;      /* default 0 */
    int format;         /* enum dsq_calib_format */
    int take_available; /* data short of N*L: use floor(tokens / L) samples
                           when that reaches min(DSQ_CALIB_MIN_TOKENS, N*L)
                           (AutoAWQ and llm-compressor treat N as a cap);
                           default 0: refuse */
} dsq_calib_data_opts;

void dsq_calib_data_opts_init(dsq_calib_data_opts *o);

typedef struct dsq_calib_data {
    int32_t *tokens;           /* [n_samples][seqlen] */
    int n_samples, seqlen;
    int requested_samples;     /* N asked for (> n_samples: data was short) */
    size_t n_docs;             /* non-empty documents in the file */
    size_t docs_used;          /* documents tokenized to fill the samples */
    uint8_t sha256[DSQ_SHA256_LEN]; /* of the token matrix (int32 LE): data identity */
} dsq_calib_data;

/* Read, sample and tokenize path (see top). */
int  dsq_calib_data_load(dsq_calib_data *cd, const char *path, const dsq_tokenizer *tok,
                         const dsq_calib_data_opts *o, dsq_diag *d);
/* Same from documents already in memory (docs[i] of lens[i] bytes). name is
 * used in messages. */
int  dsq_calib_data_from_docs(dsq_calib_data *cd, const char *const *docs, const size_t *lens,
                              size_t ndocs, const dsq_tokenizer *tok, const dsq_calib_data_opts *o,
                              const char *name, dsq_diag *d);
/* From a pre-tokenized id stream (tests, benchmarks): the first N*L ids,
 * cut into N samples. DSQ_ERR_DATA when n < N*L. */
int  dsq_calib_data_from_ids(dsq_calib_data *cd, const int32_t *ids, size_t n,
                             const dsq_calib_data_opts *o, dsq_diag *d);
void dsq_calib_data_release(dsq_calib_data *cd);

#endif
