/* model_verify.h - hash-check the bytes a model uses in place.
 *
 * Compressed .dsq payloads are hash-checked when dsq_ctr_read decompresses
 * them; payloads stored raw are used straight from the mapping, and an export
 * directory's safetensors are mapped too, so they must be checked here (one
 * flipped byte in lm_head can give PPL = inf with exit status 0). Raw
 * payloads are checked against the .dsq index, export files against the
 * directory's SHA256SUMS. dsq_model_open starts this check on a thread of its own before it
 * loads the weights and joins it at the end, so where the disk is the limit
 * the hashing costs no wall time: both read the same pages. */
#ifndef DSQ_MODEL_VERIFY_H
#define DSQ_MODEL_VERIFY_H

#include "container_set.h"
#include "dsq_error.h"

typedef struct dsq_model_verify dsq_model_verify;

/* Start hashing every raw-stored payload of every shard of s (s must outlive
 * the job). cancel (may be NULL) is polled between chunks. */
int dsq_model_verify_start(dsq_model_verify **out, const dsq_ctr_set *s,
                           const volatile int *cancel, dsq_diag *d);
/* Start checking an export directory against its manifest (dir/SHA256SUMS,
 * formats/sha256sums.h: every listed file's SHA-256, no unlisted file), as
 * the .dsq's payloads are checked: on a thread of its own while the weights
 * load. A directory without SHA256SUMS has nothing to check: *out = NULL. */
int dsq_model_verify_dir_start(dsq_model_verify **out, const char *dir, dsq_diag *d);
/* Wait for the job and free it. DSQ_OK, or DSQ_ERR_CHECKSUM naming the shard,
 * tensor and payload offset of the first mismatch, or DSQ_ERR_INTERRUPTED.
 * d may be NULL (the caller already failed and only cleans up). */
int dsq_model_verify_join(dsq_model_verify *j, dsq_diag *d);

#endif
