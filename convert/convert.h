/* convert.h - the ds-quant conversion pipeline: safetensors in, .dsq out.
 *
 * One streaming pass. Tensors are planned (recipe.h), then read, converted to
 * float32 in small row blocks (FP8-block weights dequantized on the fly),
 * quantized, hashed and zstd-compressed by a pool of worker threads, and
 * appended to the container by one writer thread in the plan's order:
 * SOURCE ORDER (shard index, then byte offset in the shard), which reads each
 * input file front to back. Nothing depends on thread timing, so the output
 * is byte-identical for any thread count, and a resumed run (the container's
 * journal) is byte-identical to an uninterrupted one.
 *
 * Memory: each worker holds one row block of float32 (~1 MiB) and the output
 * blob of the tensor it is working on (quantize writes rows straight into it;
 * dsq_ctr_encode then hashes and compresses it). Tensors whose output blob is larger than
 * stream_bytes are cut into row pieces of about piece_bytes that several
 * workers quantize at once; each worker compresses its piece's rows into a
 * zstd frame of their own and adds them to the tensor's SHA-256 in file
 * order, and the writer streams the frames into the file (one payload of
 * several frames) and keeps only the small scale /
 * zero / row-sum sections until the tensor ends. Finished outputs wait for
 * the writer in a window of at most 2*threads+2 items and mem_budget bytes.
 * Source pages are dropped from the process (madvise DONTNEED) as soon as a
 * row block has been read, because mapped file pages count toward RSS. So
 * peak RSS is about threads x 2 x stream_bytes + mem_budget + fixed, whatever
 * the model size.
 *
 * Quantization error: for each converted tensor the pipeline measures
 * ||W - deq(Q(W))|| / ||W|| on a row sample: the first ceil(n/error_sample)
 * rows of every row block (blocks are ~1 MiB of float32, so the sample is
 * spread over the whole tensor and is the same for any thread count),
 * re-quantized on their own into a small blob and dequantized (rows are
 * independent, so the codes are those stored). Default error_sample 16
 * (~6% extra quantize + dequantize work); 1 measures every row. Float
 * passthrough of a float source (bf16 from BF16, f32 from F32/F16) is exact
 * and not measured.
 *
 * Resume: every run keeps the container's journal (unless no_journal) and,
 * for sharded output, "<OUT>/.dsq-resume" (fingerprint + committed shards).
 * The fingerprint covers the input files (name, size, mtime, header hash),
 * the plan and the byte-changing options; a mismatch is DSQ_ERR_STATE.
 *
 * Output: a .dsq file, or with shard_bytes > 0 a directory of
 * model-NNNNN-of-MMMMM.dsq files (tensors packed greedily in plan order,
 * by estimated raw size, at most shard_bytes each unless one tensor is
 * larger) plus model.dsq.index.json:
 *   {"metadata": {"format": "dsq", "total_size": S, "shards": N},
 *    "weight_map": {"<tensor>": "<shard file>", ...}}
 * Every shard carries the full metadata JSON.
 *
 * Metadata JSON (keys in this order):
 *   {"format": "dsq", "tool": "ds-quant <version>",
 *    "source": {"path": IN, "format": "safetensors", "total_bytes": N,
 *               "files": [{"name", "size", "header_sha256"}]},
 *    "config": <config.json>, "tokenizer": {"tokenizer.json": ..,
 *    "tokenizer_config.json": .., "special_tokens_map.json": ..},
 *    "generation_config": <generation_config.json>,
 *    "recipe": {"scheme", "preset", "group_size", "rules": [...],
 *               "roles": {...}, "calibration": "none (RTN)" or {...},
 *               "clip_search", "allow_nonfinite", "zstd_level"}}
 * Side files are embedded verbatim (validated as JSON); absent ones are
 * omitted. Hashing whole inputs would cost a second read of the model, so
 * the source is identified by each file's size and the SHA-256 of its
 * safetensors header (which pins every name, dtype, shape and offset).
 *
 * Library code: nothing is printed. Progress goes to a callback (called on
 * the writer thread), cancellation comes in through a flag, and the result is
 * a summary struct. */
#ifndef DSQ_CONVERT_H
#define DSQ_CONVERT_H

#include "calib.h"
#include "dsq_error.h"
#include "export.h"
#include "recipe.h"
#include "scheme.h"

#include <stddef.h>
#include <stdint.h>

typedef struct dsq_convert_progress {
    uint64_t bytes_done, bytes_total;    /* source bytes converted / planned */
    uint64_t bytes_out;                  /* bytes written to the output */
    size_t   tensors_done, tensors_total;
    const char *tensor;                  /* last tensor written */
} dsq_convert_progress;

typedef void (*dsq_convert_progress_fn)(void *ctx, const dsq_convert_progress *p);

typedef struct dsq_convert_opts {
    const char *input;          /* .safetensors file, index file or model directory */
    const char *output;         /* .dsq file; a directory when shard_bytes > 0 */
    const dsq_recipe *recipe;   /* borrowed */
    int threads;                /* workers; <= 0: all cores */
    int zstd_level;             /* 0 = store raw, 1..22; default 1 */
    int overwrite;              /* replace existing output (-f) */
    int resume;                 /* continue an interrupted run (--resume) */
    int no_journal;             /* do not keep a resume journal: an interrupted
                                   run cannot be resumed, but the writer skips
                                   hashing the compressed bytes and the
                                   periodic fsync (~10% less CPU) */
    int allow_nonfinite;        /* NaN -> 0, Inf saturates (else an error) */
    int clip_search;            /* per-group MSE clip search (--clip-search) */
    int range_search;           /* int4 searched group params (dsq_qparams.range_search;
                                   --search 1, --no-search -1, 0 default) */
    int error_sample;           /* measure error on 1 row in N; 0 = default 16 */
    uint64_t shard_bytes;       /* 0: one file */
    uint64_t mem_budget;        /* finished outputs waiting for the writer;
                                   0 = default: 512 MiB or 64 MiB per
                                   thread, whichever is more */
    uint64_t stream_bytes;      /* blobs above this are streamed; 0 = 4 MiB
                                   (.dsq), 64 MiB (exports) */
    uint64_t piece_bytes;       /* streamed piece size; 0 = 4 MiB */
    double checkpoint_seconds;  /* resume journal interval; < 0 = writer default */
    const char *tool;           /* "ds-quant 0.1.0" (metadata "tool") */
    /* Calibration (calib/calib.h), borrowed, may be NULL (RTN): every tensor
     * with an entry has its scales folded in (dsq_calib_apply_rows on each
     * float row block, before quantization) and takes the entry's importance,
     * clip search and static activation parameters. calib_json (may be NULL)
     * is the metadata "recipe.calibration" value (dsq_calib_summary_json with
     * timing 0); the calibration's fingerprint joins the resume fingerprint. */
    const dsq_calib_result *calib;
    const char *calib_json;
    dsq_convert_progress_fn progress;
    void *progress_ctx;
    const volatile int *cancel; /* polled; nonzero stops with DSQ_ERR_INTERRUPTED */
    /* Export (convert/export.h): NULL or "dsq" writes the .dsq container;
     * "ascend", "awq" or "compressed-tensors" stream the same blobs into a
     * model directory at output instead (shard_bytes then bounds its
     * safetensors shards; 0 = the format's default). Refusals (a scheme the
     * target cannot load) come from dsq_convert_prepare, before anything is
     * written. */
    const char *export_format;
} dsq_convert_opts;

/* Fill defaults (zstd level 1, all cores, ...). */
void dsq_convert_opts_init(dsq_convert_opts *o);

typedef struct dsq_tensor_result {
    const char *name;           /* borrowed from the converter */
    uint32_t scheme;            /* enum dsq_scheme_id */
    uint32_t role;              /* enum dsq_role */
    uint64_t src_bytes, raw_bytes, stored_bytes;
    double rel_error;           /* sqrt(err2/ref2) on the sample; -1: not
                                   measured (exact passthrough, or written by
                                   an earlier run before --resume) */
} dsq_tensor_result;

typedef struct dsq_convert_summary {
    size_t tensors;             /* in the output */
    dsq_export_summary export;  /* export runs only (format NULL otherwise) */
    size_t resumed;             /* of those, already written by an earlier run */
    size_t count_by_scheme[DSQ_SCHEME_ID_COUNT];
    uint64_t src_by_scheme[DSQ_SCHEME_ID_COUNT];    /* source bytes */
    uint64_t stored_by_scheme[DSQ_SCHEME_ID_COUNT]; /* payload bytes in the file */
    uint64_t bytes_in;          /* source bytes (all tensors incl. FP8 scales) */
    uint64_t bytes_converted;   /* source bytes processed by this run */
    uint64_t bytes_raw;         /* payload bytes before zstd */
    uint64_t bytes_stored;      /* payload bytes after zstd */
    uint64_t bytes_out;         /* total output file bytes (all shards) */
    int shards;                 /* 0 for a single file */
    double seconds;             /* wall time of dsq_convert_run */
    dsq_tensor_result *results; /* [tensors], plan order */
} dsq_convert_summary;

typedef struct dsq_convert dsq_convert;

/* Output preconditions that need no work (stats and directory listings only):
 * the output (or any shard) is not an input file (device + inode), exists only
 * with -f, is not a device, FIFO or directory where a file is meant, and
 * --resume has something to resume in the same layout (single file vs
 * --shard-size). Called by dsq_convert_run; callers with an expensive step
 * before it (calibration) call it first. */
int dsq_convert_check_output(const dsq_convert_opts *o, dsq_diag *d);
/* The same for a serving export directory (ds-quant --format, ds-export):
 * OUT must not be, or contain, the input; it may exist only as a directory
 * and with -f or --resume, and then only as an export dsq wrote; the
 * leftovers of an interrupted run are recovered or refused
 * (dsq_export_prepare_output, export.h). */
int dsq_export_check_output(const char *out, const char *in, int overwrite, int resume, dsq_diag *d);

/* Open the input, read config.json and the tokenizer files, build the plan.
 * Fails on a missing shard, a model directory or shard index without
 * config.json (one .safetensors file may lack it: tensor-only), a config.json
 * that contradicts the tensor shapes, an unreadable or malformed config.json /
 * tokenizer file, an unsupported tensor (see dsq_recipe_decide). Nothing is
 * written. */
int dsq_convert_prepare(dsq_convert **out, const dsq_convert_opts *o, dsq_diag *d);

const dsq_plan *dsq_convert_plan(const dsq_convert *c);
/* The model config's num_hidden_layers as used by the plan (0 if unknown),
 * and whether a config.json was found. */
int dsq_convert_have_config(const dsq_convert *c);
/* Estimated peak resident memory of dsq_convert_run, in bytes. */
uint64_t dsq_convert_peak_estimate(const dsq_convert *c);
/* The metadata JSON that the output will carry. */
const char *dsq_convert_metadata(const dsq_convert *c);

/* Convert. On success the output exists under its final name and *s holds
 * the summary (its arrays live until dsq_convert_free). On failure nothing
 * appears under the final name; an interruption (cancel flag) keeps the
 * partial file and its journal for --resume and returns
 * DSQ_ERR_INTERRUPTED, any other error removes them. May be called once. */
int dsq_convert_run(dsq_convert *c, dsq_convert_summary *s, dsq_diag *d);

void dsq_convert_free(dsq_convert *c);

#endif
