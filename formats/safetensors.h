/* safetensors.h - validated, mmap'd read access to safetensors checkpoints.
 *
 * File layout (huggingface/safetensors, see docs/checkpoints.md, "safetensors"):
 *   [u64 LE N][N bytes JSON header, may be space padded][byte buffer]
 *   header: {"NAME": {"dtype": "BF16", "shape": [..], "data_offsets": [b, e]},
 *            ..., "__metadata__": {"k": "v"}}   (offsets relative to buffer)
 *
 * dsq_st_open() validates everything before returning (the input is treated
 * as hostile: nothing is ever read out of bounds):
 *   - N <= DSQ_ST_MAX_HEADER (100,000,000) and 8 + N <= file size
 *   - header is JSON (json-c, strict, UTF-8), first byte '{', only spaces or
 *     other JSON whitespace after the object, no duplicate keys anywhere
 *   - each entry has a known dtype name, shape of <= 8 non-negative integers,
 *     data_offsets [begin, end] with begin <= end, and numel * bits / 8
 *     (overflow checked, must be a whole number of bytes) == end - begin
 *   - offsets tile the buffer: sorted by begin, the first is 0, each begin is
 *     the previous end, and file size == 8 + N + last end
 *   - __metadata__ is a string -> string map
 *   - tensor names are unique across all shards
 *   - FP8 block scales (DeepSeek-V3, docs/checkpoints.md, "FP8 E4M3 weights
 *     and weight_scale_inv"): every F8_E4M3 tensor
 *     X has a companion "X_scale_inv" (for X.weight: X.weight_scale_inv),
 *     F32, shape [ceil(rows/128), ceil(cols/128)] where rows/cols is the
 *     row view below; all values finite and >= 0. A missing or misshaped
 *     companion fails with DSQ_ERR_FORMAT / DSQ_ERR_SHAPE naming both
 *     tensors; a NaN, Inf or negative value fails with DSQ_ERR_NONFINITE
 *     naming the scale tensor and the absolute file offset of the value.
 *     The F8_E5M2 companion is optional but validated when present.
 *   - sharded checkpoints: see dsq_st_open().
 * Every error fills the dsq_diag with the file, tensor and byte offset.
 *
 * Row view: a tensor of shape [d0, d1, ...] is read as a matrix of
 * rows = d0 and cols = d1 * d2 * ... ; rank-0 and rank-1 tensors are one row
 * of numel columns.
 *
 * Thread safety: after open the model is immutable; every query and
 * dsq_st_read_rows_f32 may be called from several threads at once.
 * dsq_st_advise only changes kernel paging hints, also safe. */
#ifndef DSQ_SAFETENSORS_H
#define DSQ_SAFETENSORS_H

#include "dsq_error.h"
#include "dtype.h"

#include <stddef.h>
#include <stdint.h>

#define DSQ_ST_MAX_DIMS   8
#define DSQ_ST_MAX_HEADER 100000000ull        /* safetensors MAX_HEADER_SIZE */
#define DSQ_ST_FP8_BLOCK  128                 /* DeepSeek weight_block_size */
#define DSQ_ST_SCALE_SUFFIX "_scale_inv"

typedef struct dsq_st_tensor {
    const char     *name;          /* NUL-terminated, owned by the model */
    enum dsq_dtype  dtype;
    int             ndim;          /* 0..DSQ_ST_MAX_DIMS */
    int64_t         shape[DSQ_ST_MAX_DIMS]; /* unused dims are 0 */
    uint64_t        numel;         /* product of shape (1 for rank 0) */
    uint64_t        nbytes;        /* numel * bits / 8 == end - begin */
    const uint8_t  *data;          /* into the mapping; NULL when nbytes == 0.
                                      Not aligned in general: load with memcpy */
    uint64_t        file_offset;   /* absolute byte offset of data in its file */
    int             shard;         /* index into dsq_st_shard_path() */
} dsq_st_tensor;

typedef struct dsq_st_model dsq_st_model;   /* opaque */

/* dsq_st_open_ex flags. */
enum dsq_st_open_flags {
    /* Accept F8_E4M3 tensors without a _scale_inv companion (they then read
     * as raw fp8 values). For non-DeepSeek FP8 files. */
    DSQ_ST_OPEN_FP8_UNSCALED   = 1u << 0,
    /* Check scale shapes but do not read the scale values at open. */
    DSQ_ST_OPEN_NO_SCALE_SCAN  = 1u << 1
};

/* Open a checkpoint. path is one of:
 *   - a .safetensors file;
 *   - a *.safetensors.index.json file;
 *   - a directory holding model.safetensors.index.json (else exactly one
 *     *.safetensors.index.json), or, without an index, exactly one
 *     *.safetensors file.
 * Sharded rules: the index must be {"weight_map": {name: shard file}, ...}
 * ("metadata" and its total_size are ignored). Every shard named must exist
 * (DSQ_ERR_NOT_FOUND) and hold every tensor mapped to it (DSQ_ERR_NOT_FOUND);
 * a tensor in a shard that the weight_map does not map to that shard is
 * DSQ_ERR_FORMAT; a file in the directory named like a sibling shard
 * (same "<prefix>-NNNNN-of-MMMMM.safetensors" family) that the weight_map
 * never references is DSQ_ERR_FORMAT; names are unique across shards.
 * Shard names must be relative and must not contain "..".
 * On success *out owns the mappings; free with dsq_st_close(). On failure
 * *out is NULL. */
int  dsq_st_open(dsq_st_model **out, const char *path, dsq_diag *d);
int  dsq_st_open_ex(dsq_st_model **out, const char *path, unsigned flags,
                    dsq_diag *d);
/* Parse one safetensors file held in memory (no file I/O). buf is borrowed
 * and must outlive the model; name is used in messages and as the shard
 * path. Same validation as dsq_st_open. Used by the fuzz target and tests. */
int  dsq_st_parse_buffer(dsq_st_model **out, const uint8_t *buf, size_t len,
                         const char *name, unsigned flags, dsq_diag *d);
void dsq_st_close(dsq_st_model *m);

/* Tensors of all shards, sorted by name (strcmp). */
size_t dsq_st_count(const dsq_st_model *m);
const dsq_st_tensor *dsq_st_get(const dsq_st_model *m, size_t i);
/* Binary search by exact name; NULL if absent. */
const dsq_st_tensor *dsq_st_find(const dsq_st_model *m, const char *name);
/* Sum of nbytes over all tensors (the index's total_size). */
uint64_t dsq_st_total_bytes(const dsq_st_model *m);

int  dsq_st_shard_count(const dsq_st_model *m);
/* Path of shard i as opened (dir + "/" + file for sharded checkpoints);
 * NULL if out of range. */
const char *dsq_st_shard_path(const dsq_st_model *m, int shard);
/* Directory that holds config.json, tokenizer files etc. ("." for a bare
 * file name; for dsq_st_parse_buffer, "."). */
const char *dsq_st_dir(const dsq_st_model *m);

/* __metadata__ of shard 0 (sorted by key). get returns NULL if absent. */
size_t      dsq_st_meta_count(const dsq_st_model *m);
const char *dsq_st_meta_get(const dsq_st_model *m, const char *key);
/* i-th pair in key order; 0 on success, DSQ_ERR_INVALID_ARG if out of range. */
int         dsq_st_meta_at(const dsq_st_model *m, size_t i,
                           const char **key, const char **value);

/* FP8 block scales. scale_of returns the validated F32 companion of an FP8
 * tensor (NULL for other tensors or unscaled FP8). is_companion returns 1
 * if t is the scale of some FP8 tensor; converters skip those because
 * dsq_st_read_rows_f32 already applies them. */
const dsq_st_tensor *dsq_st_scale_of(const dsq_st_model *m, const dsq_st_tensor *t);
int  dsq_st_is_companion(const dsq_st_model *m, const dsq_st_tensor *t);

/* Row view (see top of file). */
static inline int64_t dsq_st_rows(const dsq_st_tensor *t)
{
    return t->ndim >= 2 ? t->shape[0] : 1;
}
static inline int64_t dsq_st_cols(const dsq_st_tensor *t)
{
    if (t->ndim < 2) return (int64_t)t->numel;
    int64_t c = 1;
    for (int i = 1; i < t->ndim; i++) c *= t->shape[i]; /* cannot overflow:
                                                            checked at open */
    return c;
}

/* Convert rows [row0, row0 + nrows) of t to float32 into out
 * (nrows * cols floats, row-major). Supported: F32, F16, BF16, F64,
 * F8_E4M3 (times its block scale: W[i,j] = fp8[i,j] * s[i/128][j/128], edge
 * blocks ragged), F8_E5M2 (scaled if it has a companion), F8_E8M0,
 * BOOL, U8, I8, I16, U16, I32, U32, I64, U64 (integers converted to the
 * nearest float). Others (F4, F6_*, FNUZ, C64): DSQ_ERR_UNSUPPORTED.
 * A row range outside [0, rows]: DSQ_ERR_INVALID_ARG. Values are copied
 * as is (no NaN check). Safe to call concurrently. */
int  dsq_st_read_rows_f32(const dsq_st_model *m, const dsq_st_tensor *t,
                          int64_t row0, int64_t nrows, float *out, dsq_diag *d);
/* The same over source bytes the caller holds: src is the bytes of rows
 * [row0, row0 + nrows) of t, as dsq_st_pread_rows gives them (an FP8
 * tensor's scale is still read from the model). */
int  dsq_st_rows_f32_from(const dsq_st_model *m, const dsq_st_tensor *t, const void *src,
                          int64_t row0, int64_t nrows, float *out, dsq_diag *d);
/* Copy the source bytes of rows [row0, row0 + nrows) of t (nbytes / rows
 * each) into dst with pread(2). Why not the mapping: a conversion reading
 * the checkpoint through its mapping (even populated ahead, then a
 * fault-free pass over 4 KiB-page mappings) stalls its BF16 -> f32 loop on
 * the mapping's TLB misses, a large share of its CPU; the kernel's copy
 * into a reused, cache-hot buffer costs a fraction of that. DSQ_ERR_UNSUPPORTED when the shard is not a file descriptor
 * (a model opened over a buffer): use the mapping then. Thread-safe. */
int  dsq_st_pread_rows(const dsq_st_model *m, const dsq_st_tensor *t, int64_t row0, int64_t nrows,
                       void *dst, dsq_diag *d);

/* Paging hints for a tensor's bytes (madvise, rounded out to pages; for FP8
 * also its scale). DONTNEED drops the pages from this process's RSS after a
 * converter is done with a tensor, so peak RSS does not grow with model
 * size; the data stays readable (it is paged in again on access). No-op
 * for models from dsq_st_parse_buffer. Returns 0 or DSQ_ERR_IO. */
enum dsq_st_advice {
    DSQ_ST_WILLNEED   = 1,
    DSQ_ST_DONTNEED   = 2,
    DSQ_ST_SEQUENTIAL = 3
};
int  dsq_st_advise(const dsq_st_model *m, const dsq_st_tensor *t,
                   enum dsq_st_advice advice);

#endif
