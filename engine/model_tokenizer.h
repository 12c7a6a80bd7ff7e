/* model_tokenizer.h - the tokenizer a .dsq carries in its metadata.
 *
 * ds-quant embeds the source's tokenizer files in the container metadata
 * ({"tokenizer": {"tokenizer.json": .., "tokenizer_config.json": ..}},
 * docs/dsq-format.md), so a .dsq is evaluated or served with no side files.
 * ds-eval and ds-serve both load it through here. */
#ifndef DSQ_MODEL_TOKENIZER_H
#define DSQ_MODEL_TOKENIZER_H
#include "dsq_error.h"
#include "tokenizer.h"

/* path: a .dsq file or a sharded set (every shard carries the metadata).
 * Returns 1 when loaded, 0 when the metadata holds no tokenizer, < 0 on
 * error (diag names the .dsq and keeps the tokenizer loader's message). */
int dsq_tokenizer_from_dsq(const char *path, dsq_tokenizer **tok, dsq_diag *d);

#endif
