/* inspect.h - what a model file holds, for ds-inspect: a .dsq (one file or
 * an index with its shards), a safetensors file / index / directory, or an
 * export directory (ascend, awq, compressed-tensors) with its per-tensor
 * types. Each is described as a json_object (ds-inspect --json, key order
 * kept) or as text on a FILE the caller chooses; level is the program's
 * display level (1: totals, 2: the listing, 3: per-tensor details). */
#ifndef DSQ_INSPECT_H
#define DSQ_INSPECT_H

#include "container.h"
#include "container_set.h"
#include "dsq_error.h"

#include <json-c/json.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* ---- .dsq ---- */

/* path, format, version, file_size, index and shards (a sharded set),
 * tensors, total, recipe (when the metadata has one), metadata_keys. */
json_object *dsq_inspect_dsq_json(const dsq_ctr_set *set, const char *path);
/* The same for people: the header, recipe and listing (level 2), the
 * totals (level 1), the metadata keys and per-tensor details (level 3). */
void dsq_inspect_dsq_text(FILE *f, const dsq_ctr_set *set, const char *path, int level);

/* Every shard's checksums (dsq_ctr_verify_ex), stopping at the first bad one. */
typedef struct dsq_inspect_verify {
    int status; /* DSQ_OK or the failure */
    double seconds;
    size_t bad_shard; /* the shard checked last */
    size_t bad_index; /* its bad tensor; SIZE_MAX: none */
} dsq_inspect_verify;
int dsq_inspect_dsq_verify(const dsq_ctr_set *set, const dsq_ctr_verify_opts *vo, dsq_inspect_verify *v,
                           dsq_diag *d);
/* "verify": ok, seconds, and bad_index / bad_tensor on a bad tensor. */
json_object *dsq_inspect_dsq_verify_json(const dsq_ctr_set *set, const dsq_inspect_verify *v);
/* "verify: ok, ..." (level 1, when it passed). */
void dsq_inspect_dsq_verify_text(FILE *f, const dsq_ctr_set *set, const dsq_inspect_verify *v, int level);

/* ---- safetensors ---- */

typedef struct dsq_inspect_st dsq_inspect_st;

/* Open path. Listing is lenient (FP8 without companions shown as is, scale
 * values not scanned); verify applies every rule and checks an export's
 * SHA256SUMS. */
int dsq_inspect_st_open(dsq_inspect_st **out, const char *path, int verify, dsq_diag *d);
void dsq_inspect_st_close(dsq_inspect_st *s);
/* path, format, export_format (an export), shards, metadata, tensors
 * (type: an export's per-tensor type), total, verify (when opened so). */
json_object *dsq_inspect_st_json(const dsq_inspect_st *s);
/* The same for people, with config.json's model summary (level 2). */
void dsq_inspect_st_text(FILE *f, const dsq_inspect_st *s, int level);

#endif
