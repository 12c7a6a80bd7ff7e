/* container_set.h - a .dsq model as one file or as shards with an index.
 *
 * `ds-quant --shard-size` writes OUT/model-0000k-of-0000N.dsq plus
 * OUT/model.dsq.index.json:
 *   {"metadata": {"format": "dsq", "total_size": RAW_BYTES, "shards": N},
 *    "weight_map": {"tensor name": "model-0000k-of-0000N.dsq", ...}}
 * A set opens every shard (each is a complete, self-validating .dsq) and
 * checks the index against them: shard names are plain file names in the
 * index's directory, every listed tensor is in its shard, no shard holds a
 * tensor the index does not list or lists elsewhere, no tensor is listed
 * twice (a JSON duplicate key), and the shard count matches. A single .dsq
 * file is a set of one. Readers use the set exactly like one container. */
#ifndef DSQ_CONTAINER_SET_H
#define DSQ_CONTAINER_SET_H

#include "container.h"
#include "dsq_error.h"

#include <stddef.h>

#define DSQ_CTR_INDEX_NAME "model.dsq.index.json"

typedef struct dsq_ctr_set dsq_ctr_set;

/* path: a .dsq file, a directory holding model.dsq.index.json, or that
 * index file itself. */
int  dsq_ctr_set_open(dsq_ctr_set **out, const char *path, dsq_diag *d);
void dsq_ctr_set_close(dsq_ctr_set *s);

/* 1 when path is a file that starts with the .dsq magic. */
int dsq_ctr_file_is_dsq(const char *path);
/* 1 when path is a .dsq file or a sharded .dsq (directory or index). */
int dsq_ctr_set_is_dsq(const char *path);

size_t dsq_ctr_set_shards(const dsq_ctr_set *s);
dsq_ctr *dsq_ctr_set_shard(const dsq_ctr_set *s, size_t i);
const char *dsq_ctr_set_shard_path(const dsq_ctr_set *s, size_t i);
/* The index file, or NULL for a single .dsq. */
const char *dsq_ctr_set_index_path(const dsq_ctr_set *s);

/* The tensor and the shard holding it (*shard may be NULL). */
const dsq_ctr_tensor_info *dsq_ctr_set_find(const dsq_ctr_set *s, const char *name, dsq_ctr **shard);

#endif
