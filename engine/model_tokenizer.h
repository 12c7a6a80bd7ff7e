/* model_tokenizer.h - the tokenizer of a model: the one a .dsq carries in
 * its metadata, the one beside a llama2.c checkpoint, or the one in a
 * safetensors model's directory.
 *
 * ds-quant embeds the source's tokenizer files in the container metadata
 * ({"tokenizer": {"tokenizer.json": .., "tokenizer_config.json": ..}},
 * docs/dsq-format.md), so a .dsq is evaluated or served with no side files.
 * ds-eval, ds-serve and calibration all find a model's tokenizer through
 * dsq_tokenizer_for_model, so every tool takes the same models. */
#ifndef DSQ_MODEL_TOKENIZER_H
#define DSQ_MODEL_TOKENIZER_H
#include "dsq_error.h"
#include "tokenizer.h"

/* path: a .dsq file or a sharded set (every shard carries the metadata).
 * Returns 1 when loaded, 0 when the metadata holds no tokenizer, < 0 on
 * error (diag names the .dsq and keeps the tokenizer loader's message). */
int dsq_tokenizer_from_dsq(const char *path, dsq_tokenizer **tok, dsq_diag *d);

/* Where dsq_tokenizer_for_model found (or looked for) the tokenizer. */
typedef enum dsq_tok_origin {
    DSQ_TOK_FROM_NONE = 0,   /* nothing found to load */
    DSQ_TOK_FROM_ARG,        /* the path the caller gave */
    DSQ_TOK_FROM_DSQ_META,   /* the .dsq's metadata */
    DSQ_TOK_FROM_FILE,       /* a llama2.c tokenizer.bin / tok<vocab>.bin beside the checkpoint */
    DSQ_TOK_FROM_DIR,        /* tokenizer.json / tokenizer.bin in the model's directory */
} dsq_tok_origin;

/* The tokenizer of model (a .dsq file or sharded set, a llama2.c .bin, a
 * safetensors file / index / directory, an export directory): tokenizer
 * when not NULL (a tokenizer.json, its directory or a llama2.c .bin), else
 * the .dsq metadata's, else a llama2.c checkpoint's by llama2.c's names
 * beside it, else tokenizer.json / tokenizer.bin in the model's directory.
 * origin (may be NULL) says where it came from, or where loading failed;
 * where (may be NULL, where_len bytes) gets that file or directory.
 * DSQ_ERR_NOT_FOUND when the model or any tokenizer for it is missing (the
 * message names what was looked for; a program adds how to give one). */
int dsq_tokenizer_for_model(dsq_tokenizer **tok, const char *model, const char *tokenizer,
                            dsq_tok_origin *origin, char *where, size_t where_len, dsq_diag *d);

#endif
