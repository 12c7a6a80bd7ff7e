/* export.h - write a converted model as a directory a serving engine loads:
 * msModelSlim "AscendV1" (vllm-ascend / MindIE), AutoAWQ GEMM or
 * compressed-tensors (vLLM). Each format is one module of xfmt/ (one row of
 * its table: plan, pack, config); the contracts are docs/serving-exports.md.
 * This file owns what every format shares: shards, resume, side files and
 * SHA256SUMS.
 *
 * The writer consumes the dsq scheme blobs (quant/scheme.h) of the source
 * tensors, one at a time in a fixed order (the conversion plan's, which is
 * also the order of a .dsq's index), so ds-quant --format F streams straight
 * into it and ds-export feeds it from a .dsq: same input bytes, same output
 * bytes.
 *
 * Planning (dsq_export_open) happens before anything is written: every
 * target tensor's name, dtype and shape follows from the source tensor's
 * name, role, scheme and shape, so each safetensors shard's header is known
 * in advance and tensor data is written at its final offset (pwrite) as its
 * source blob arrives. Tensors are laid out as safetensors' own writer does
 * (descending dtype, then name). Unsupported (format, scheme, role)
 * combinations are refused here with DSQ_ERR_UNSUPPORTED naming the tensor.
 *
 * Files: OUT is built as "<parent>/.<base>.partial/" and renamed to OUT only
 * when complete. A shard is committed (fsync + rename inside the partial
 * directory) when its last source tensor has arrived, and ".dsq-export-state"
 * records "<fingerprint> <committed shards>"; --resume continues from the
 * first uncommitted shard (dsq_export_resume_from). finish writes
 * config.json, the tokenizer / generation files (from the model metadata),
 * the safetensors index when sharded, the format's description file
 * (quant_model_description.json for ascend) and SHA256SUMS (sha256sum -c
 * format, every other file, sorted by name).
 *
 * What dsq did not write is never removed: -f (overwrite) replaces only an
 * export dsq wrote (recognised by its SHA256SUMS, which lists every file of
 * it) and removes only the files that manifest lists; no link is followed
 * when removing; a partial directory that dsq did not make is refused
 * untouched. The resume state stays until the finished export is in place,
 * and the leftovers of a crash at any step of finish are recovered by the
 * next run (dsq_export_prepare_output). */
#ifndef DSQ_EXPORT_H
#define DSQ_EXPORT_H

#include "dsq_error.h"
#include "dtype.h"
#include "recipe.h"
#include "scheme.h"
#include "xfmt.h"

#include <stddef.h>
#include <stdint.h>

/* dsq_export_src, one source tensor: xfmt/xfmt.h. */

typedef struct dsq_export_opts {
    const char *format;         /* "ascend", "awq", "compressed-tensors" */
    const char *output;         /* directory */
    uint64_t shard_bytes;       /* 0: the format's default */
    int overwrite, resume;
    const char *meta_json;      /* the .dsq metadata (config, tokenizer, ...) */
    const char *fingerprint;    /* identifies input + options (resume check) */
    const char *tool;           /* "ds-quant 0.x" */
    int plan_only;              /* plan and check only: touch no file */
} dsq_export_opts;

typedef struct dsq_export_summary {
    const char *format;
    size_t src_tensors, out_tensors, dequantized, dropped, resumed;
    size_t from_source;         /* quantized in the input, written from the source weight */
    int shards;                 /* weight files */
    uint64_t weight_bytes;      /* tensor data bytes written */
    uint64_t bytes_out;         /* all files */
    double max_scale_rel_rounding; /* worst |s16 - s|/s over F16/BF16 scales */
} dsq_export_summary;

typedef struct dsq_export dsq_export;

/* Names of the formats, NULL-terminated ("dsq" is not one: it is the
 * container itself). */
const char *const *dsq_export_formats(void);
int dsq_export_format_known(const char *name);

/* Plan, check and prepare the output (partial directory). Nothing appears
 * under opts->output before finish. Errors: DSQ_ERR_UNSUPPORTED (combination
 * the target cannot load: message says what to do), DSQ_ERR_EXISTS,
 * DSQ_ERR_STATE (resume of something else), DSQ_ERR_JSON (metadata). On a
 * refusal nothing is created. */
int dsq_export_open(dsq_export **out, const dsq_export_opts *o, const dsq_export_src *src,
                    size_t n, dsq_diag *d);
/* Source tensors [0, k) are in committed shards of an earlier run: feed
 * tensors from k on. */
size_t dsq_export_resume_from(const dsq_export *ex);
/* The blob of source tensor i (must be the next one). The blob is checked
 * (dsq_qview_init) against the plan. */
int dsq_export_put(dsq_export *ex, size_t i, const void *blob, size_t size, dsq_diag *d);
/* 1 when every target tensor of source i is row-local (float, int8, per-row
 * scales, ...): it may then be fed in row pieces with put_rows, so a
 * streamed tensor (e.g. a 1.85 GB embedding) is never held whole. */
int dsq_export_rowwise(const dsq_export *ex, size_t i);
/* Rows [row0, row0 + nrows) of source tensor i as a valid blob of just those
 * rows (the converter's piece blob). Pieces come in row order; the one that
 * ends the tensor completes it, like dsq_export_put. Same bytes as put. */
int dsq_export_put_rows(dsq_export *ex, size_t i, int64_t row0, int64_t nrows, const void *blob, size_t size,
                        dsq_diag *d);
/* 1 when the target holds source tensor i in float although its blob is
 * quantized (a module its loader runs unquantized, e.g. AscendV1's
 * kv_b_proj): a writer that has the source weight gives it with
 * dsq_export_put_float_rows instead of the blob, so the export holds the
 * source's weight rather than its dequantized codes. */
int dsq_export_from_source(const dsq_export *ex, size_t i);
/* Rows [row0, row0 + nrows) of source tensor i (one with from_source) as
 * float32 values, in row order; the piece that ends the tensor completes it,
 * like dsq_export_put. */
int dsq_export_put_float_rows(dsq_export *ex, size_t i, int64_t row0, int64_t nrows, const float *w,
                              dsq_diag *d);
/* The dtype the scales of source tensor i are stored in (F32, BF16, F16), or
 * DSQ_DTYPE_INVALID when it is not exported as a quantized linear. A
 * conversion for this export rounds the codes against scales of that dtype
 * (dsq_qparams.scale_dtype). */
enum dsq_dtype dsq_export_scale_dtype(const dsq_export *ex, size_t i);
/* Write the remaining files and rename the directory into place (an OUT
 * that exists by then is moved aside, checked again to be an export dsq
 * wrote, and removed after the rename). */
int dsq_export_finish(dsq_export *ex, dsq_export_summary *s, dsq_diag *d);
/* keep != 0: leave the partial directory for --resume; else remove it. */
void dsq_export_free(dsq_export *ex, int keep);
/* Free after a run that ended with status rc and return rc: the partial
 * directory is kept for --resume when rc is DSQ_ERR_INTERRUPTED or
 * DSQ_ERR_NOSPC (the message then says to free some space and resume). */
int dsq_export_end(dsq_export *ex, int rc, dsq_diag *d);

/* The output checks and crash recovery every export run does before any
 * work (dsq_export_open does them too). OUT must not be a symbolic link; the
 * leftovers of an interrupted replacement (".<OUT>.old") are put back (a
 * crash between its two renames) or removed (after them) when dsq wrote
 * them; a ".<OUT>.partial" dsq did not make is refused. An existing OUT
 * needs overwrite or resume and must be an export dsq wrote; resume over it
 * also needs a partial directory or a finish a crash interrupted.
 * DSQ_ERR_EXISTS (with overwrite or resume set: OUT or a leftover is not
 * dsq's, nothing was changed), DSQ_ERR_NOMEM, DSQ_ERR_IO. */
int dsq_export_prepare_output(const char *out, int overwrite, int resume, dsq_diag *d);
/* The summary so far (valid after open). */
void dsq_export_get_summary(const dsq_export *ex, dsq_export_summary *s);

/* ---- a .dsq to an export directory (ds-export) ---- */

typedef struct dsq_export_hooks {
    volatile int *cancel;        /* set (by a signal handler): stop, keep the partial output */
    void (*progress)(void *ctx, size_t done, size_t total); /* tensors, after each */
    void *progress_ctx;
} dsq_export_hooks;

/* Export in (a .dsq file, a sharded directory or its model.dsq.index.json)
 * as o->format into o->output (o->shard_bytes, overwrite, resume and tool
 * apply; the fingerprint and metadata come from the .dsq). The output is
 * checked before anything is read; every tensor is read with its SHA-256
 * checked and written in the .dsq's order, so the result is byte-identical
 * to a conversion with --format. resume continues an interrupted export of
 * the same .dsq and options. hooks may be NULL. Errors: DSQ_ERR_UNSUPPORTED
 * (a combination the format cannot hold), DSQ_ERR_INTERRUPTED (the partial
 * directory is kept for resume), and those of dsq_export_open / finish. */
int dsq_export_from_dsq(const char *in, const dsq_export_opts *o, const dsq_export_hooks *hooks,
                        dsq_export_summary *s, dsq_diag *d);

#endif
