/* convert_meta.h - the converter's JSON: output metadata (with the source
 * config and tokenizer files), the resume fingerprint and the shard index.
 * Internal to convert/. */
#ifndef DSQ_CONVERT_META_H
#define DSQ_CONVERT_META_H

#include "convert_internal.h"

/* Read config.json and tokenizer / generation files next to the input,
 * set c->have_config and c->num_hidden_layers, build c->meta. A present but
 * unreadable or malformed file is an error naming it; a missing config.json
 * is DSQ_ERR_NOT_FOUND unless the input is a single .safetensors file. */
int dsq_conv_build_metadata(dsq_convert *c, dsq_diag *d);
/* The input is one .safetensors file (a regular file, not a shard index):
 * the only input that may come without config.json (tensor-only). */
int dsq_conv_input_is_tensor_file(const char *input);

/* c->fingerprint: SHA-256 (hex) of everything that determines the tensor
 * payload bytes: tool version, each input file's name, size, mtime and
 * header hash, the plan, and the options that change bytes. (The metadata is
 * written at finish, so it need not match.) */
int dsq_conv_fingerprint(dsq_convert *c, dsq_diag *d);

/* model.dsq.index.json text for sharded output (malloc'd; NULL on OOM). */
char *dsq_conv_index_json(const dsq_convert *c);

#endif
