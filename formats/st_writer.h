/* st_writer.h - spec-compliant safetensors writer (single file or shards).
 *
 * Output matches huggingface/safetensors serialize(): the JSON header lists
 * tensors plus an optional "__metadata__" string map, is space padded so the
 * byte buffer starts at a multiple of 8, and tensors are laid out back to
 * back sorted by descending dtype (enum dsq_dtype order == safetensors
 * alignment order) then by name (bytewise), as prepare() does. Files are
 * written atomically through dsq_outfile (temp name, fsync, rename).
 *
 * Usage:
 *   dsq_st_writer *w = dsq_st_writer_create();
 *   dsq_st_writer_set_meta(w, "format", "pt");
 *   dsq_st_writer_add(w, "a.weight", DSQ_DTYPE_BF16, 2, shape, ptr, nbytes);
 *   rc = dsq_st_writer_write(w, "out.safetensors", 0, 0, &diag);
 *   dsq_st_writer_free(w);
 *
 * Errors from add/set_meta (bad name, nbytes != numel*bits/8, ...) are
 * returned at once and also kept: a later dsq_st_writer_write fails with
 * the first of them, described in its diag. Duplicate names are found by
 * write (DSQ_ERR_INVALID_ARG naming the tensor), which keeps add O(1).
 * Not thread safe. */
#ifndef DSQ_ST_WRITER_H
#define DSQ_ST_WRITER_H

#include "dsq_error.h"
#include "dtype.h"

#include <stdint.h>

typedef struct dsq_st_writer dsq_st_writer;

/* Lazy data source: fill dst with exactly nbytes bytes of tensor name.
 * Return 0 or a negative dsq_status (filling d). */
typedef int (*dsq_st_fill_fn)(void *ctx, const char *name, void *dst,
                              uint64_t nbytes, dsq_diag *d);

/* NULL on allocation failure. */
dsq_st_writer *dsq_st_writer_create(void);
void dsq_st_writer_free(dsq_st_writer *w);

/* Add a tensor. name is copied; data is BORROWED until write returns
 * (may be NULL only when nbytes == 0). ndim 0..8, shape entries >= 0,
 * nbytes must equal numel * bits / 8 (whole bytes). Names must be non-empty
 * valid UTF-8, unique (checked by write) and not "__metadata__".
 * Returns 0, DSQ_ERR_INVALID_ARG, DSQ_ERR_OVERFLOW or DSQ_ERR_NOMEM. */
int dsq_st_writer_add(dsq_st_writer *w, const char *name, enum dsq_dtype dtype,
                      int ndim, const int64_t *shape, const void *data,
                      uint64_t nbytes);
/* Same, but the writer copies the data now (small tensors, temporaries). */
int dsq_st_writer_add_copy(dsq_st_writer *w, const char *name,
                           enum dsq_dtype dtype, int ndim, const int64_t *shape,
                           const void *data, uint64_t nbytes);
/* Same, but data is produced at write time by fill(ctx, name, buf, nbytes)
 * into a writer-owned buffer of nbytes, so a streaming converter needs only
 * one tensor in memory at a time. */
int dsq_st_writer_add_lazy(dsq_st_writer *w, const char *name,
                           enum dsq_dtype dtype, int ndim, const int64_t *shape,
                           dsq_st_fill_fn fill, void *ctx);
/* Set (or replace) a __metadata__ entry; both strings are copied.
 * When sharding, every shard carries the metadata. */
int dsq_st_writer_set_meta(dsq_st_writer *w, const char *key, const char *value);
size_t dsq_st_writer_count(const dsq_st_writer *w);

/* Write everything.
 *   max_shard_bytes == 0: path_or_dir is the output .safetensors file.
 *   max_shard_bytes  > 0: path_or_dir is a directory (created if missing,
 *     mode 0755). Tensors, in name order, are packed greedily into shards of
 *     at most max_shard_bytes of tensor data (a larger tensor gets a shard
 *     of its own), as huggingface_hub split_state_dict_into_shards does.
 *     One shard: "model.safetensors", no index. N > 1 shards:
 *     "model-00001-of-0000N.safetensors" ... plus
 *     "model.safetensors.index.json" =
 *     {"metadata": {"total_size": S}, "weight_map": {name: shard}} with
 *     S = sum of tensor bytes. The index is written last; if any file
 *     fails, the shards this call already wrote are removed again.
 * out_flags: enum dsq_outfile_flags (DSQ_OUT_OVERWRITE to replace files).
 * The writer can be written again (e.g. to another path) afterwards. */
int dsq_st_writer_write(dsq_st_writer *w, const char *path_or_dir,
                        uint64_t max_shard_bytes, unsigned out_flags,
                        dsq_diag *d);

/* Build just the padded header for the tensors as one file (for tests and
 * tools). *out is malloc'd, *len is a multiple of 8, the u64 prefix is not
 * included. */
int dsq_st_writer_header(dsq_st_writer *w, char **out, size_t *len, dsq_diag *d);
/* The same header, and where each tensor's bytes begin in the byte buffer
 * (begin[i] for the i-th tensor added; begin may be NULL), for writers that
 * place the bytes themselves (the serving exports stream each tensor into
 * its offset). */
int dsq_st_writer_layout(dsq_st_writer *w, char **out, size_t *len, uint64_t *begin, dsq_diag *d);

#endif
