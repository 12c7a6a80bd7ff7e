/* text_prefix.h - tokenize only as much of a text file as a token limit
 * needs, so memory follows the limit, not the file (`ppl --limit-tokens 4096`
 * of a 100 MB text must not tokenize all of it, about 1 GB of memory). */
#ifndef DSQ_TEXT_PREFIX_H
#define DSQ_TEXT_PREFIX_H

#include "dsq_error.h"
#include "tokenizer.h"

#include <stddef.h>
#include <stdint.h>

/* The first min(limit, all) tokens of encode_ex(text of path, flags); limit
 * 0 means all (the whole file, at most max_bytes). With a limit, a prefix of
 * the file cut at a line end is tokenized, growing 4x until it yields limit
 * + DSQ_PREFIX_MARGIN tokens: tokens far from the cut do not depend on it,
 * so the result equals the first tokens of the whole file's encoding.
 * *bytes is how much of the file was read. */
#define DSQ_PREFIX_MARGIN 64
int dsq_tokenize_file_prefix(const dsq_tokenizer *tok, const char *path, uint64_t limit, size_t max_bytes,
                             unsigned flags, int32_t **ids, size_t *n, size_t *bytes, dsq_diag *d);

#endif
