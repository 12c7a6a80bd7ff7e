/* tokenizer.h - text <-> token ids for the models dsq evaluates.
 *
 * Two kinds behind one API:
 *
 *  - Hugging Face tokenizer.json with a byte-level BPE model (DeepSeek-V3/R1,
 *    Llama-3, Qwen2): normalizer (none, Sequence, NFC), pre_tokenizer
 *    (Sequence of Split / ByteLevel), model.vocab + model.merges (both the
 *    "a b" and ["a","b"] forms, ignore_merges, byte_fallback), added_tokens
 *    (special and not, lstrip/rstrip/single_word/normalized), post_processor
 *    (ByteLevel, TemplateProcessing, Sequence) and the ByteLevel decoder.
 *    tokenizer_config.json next to it, when present, supplies add_bos_token,
 *    add_eos_token, bos_token, eos_token, tokenizer_class and
 *    clean_up_tokenization_spaces. Checked id for id against Hugging Face's
 *    Rust tokenizers (tests/cli/tokenizer_parity.sh). Regexes run on PCRE2
 *    with Oniguruma's \s and \w spelled out (see tok_pretok.c).
 *    Anything else (WordPiece, Unigram, Lowercase, Metaspace, ...) fails at
 *    load with DSQ_ERR_UNSUPPORTED naming the JSON path; malformed files fail
 *    with DSQ_ERR_FORMAT / DSQ_ERR_JSON, also naming the JSON path.
 *
 *  - karpathy/llama2.c tokenizer.bin (e.g. stories260K tok512.bin): int32
 *    max_token_length, then per token float score, int32 len, len bytes.
 *    Encoding is exactly run.c encode(): dummy-prefix " " token, greedy
 *    best-score pair merges, <0xXX> byte fallback (ids 3 + byte), BOS 1,
 *    EOS 2.
 *
 * Input text: HF treats text as a Rust String (valid UTF-8 by construction).
 * dsq_tokenizer_encode accepts any bytes: every invalid UTF-8 sequence is
 * replaced by U+FFFD first (maximal-subpart rule, as Rust's
 * String::from_utf8_lossy), so the ids are those HF gives for the lossy
 * string. NUL bytes are ordinary characters (len is explicit).
 *
 * Thread safety: a loaded tokenizer is immutable apart from an internal,
 * mutex-guarded word cache; any number of threads may call encode / decode /
 * piece / find on the same tokenizer concurrently. load/free are not
 * concurrent with anything else on the same object.
 *
 * Speed (bench/bench_tokenizer.c): DeepSeek-V3 on wikitext, one core,
 * roughly 20-40 MB/s encode; loading the 7.8 MB tokenizer.json ~0.3 s. */
#ifndef DSQ_TOKENIZER_H
#define DSQ_TOKENIZER_H

#include "dsq_error.h"

#include <stddef.h>
#include <stdint.h>

typedef struct dsq_tokenizer dsq_tokenizer;

enum dsq_tokenizer_kind {
    DSQ_TOK_HF_BPE  = 1, /* tokenizer.json, byte-level BPE */
    DSQ_TOK_LLAMA2C = 2  /* llama2.c tokenizer.bin */
};

/* path: a tokenizer.json file (tokenizer_config.json beside it is read too),
 * a model directory with tokenizer.json (or a llama2.c tokenizer.bin), or a
 * llama2.c .bin file: a file is JSON when its name ends in ".json" or its
 * first non-blank byte is '{' or '[', else llama2.c .bin.
 * On success *out owns everything; free with dsq_tokenizer_free. */
int  dsq_tokenizer_load(dsq_tokenizer **out, const char *path, dsq_diag *d);

/* The same for a Hugging Face tokenizer.json held in memory (e.g. the
 * "tokenizer" object a .dsq carries in its metadata): len bytes of JSON
 * text (need not be NUL-terminated), plus the tokenizer_config.json text
 * (NUL-terminated) or NULL when there is none. Gives exactly the tokenizer
 * dsq_tokenizer_load gives for the two files side by side. Messages name
 * the texts DSQ_TOK_MEM_JSON and DSQ_TOK_MEM_CONFIG. The caller keeps its
 * buffers; nothing points into them after the call. */
#define DSQ_TOK_MEM_JSON   "<tokenizer.json>"
#define DSQ_TOK_MEM_CONFIG "<tokenizer_config.json>"
int  dsq_tokenizer_load_json(dsq_tokenizer **out, const char *tokenizer_json, size_t len,
                             const char *tokenizer_config_json, dsq_diag *d);
void dsq_tokenizer_free(dsq_tokenizer *t);

int  dsq_tokenizer_kind(const dsq_tokenizer *t);

/* Flags for dsq_tokenizer_encode_ex. */
enum dsq_tok_flags {
    DSQ_TOK_ADD_SPECIAL   = 1 << 0, /* BOS/EOS as the config says (see encode) */
    DSQ_TOK_PARSE_SPECIAL = 1 << 1, /* match added/special tokens in the text (HF default) */
    DSQ_TOK_FORCE_BOS     = 1 << 2, /* prepend BOS even if the config says not */
    DSQ_TOK_FORCE_EOS     = 1 << 3  /* append EOS even if the config says not */
};

/* Encode len bytes of text (not NUL-terminated necessarily). Added tokens
 * such as "<｜end▁of▁sentence｜>" in the text become their ids, as HF does
 * (leave DSQ_TOK_PARSE_SPECIAL out of encode_ex to keep special ones as
 * plain text: HF's split_special_tokens / encode_special_tokens).
 * add_special != 0 adds what the tokenizer adds for add_special_tokens=True:
 *   HF: BOS when tokenizer_config.json add_bos_token is true (EOS likewise),
 *       or, without those keys, the TemplateProcessing single template;
 *   llama2.c: BOS (1) only, as run.c generate() does (FORCE_EOS adds 2).
 * *ids is malloc'd (free() it; non-NULL even when *n == 0). */
int  dsq_tokenizer_encode(const dsq_tokenizer *t, const char *text, size_t len,
                          int add_special, int32_t **ids, size_t *n, dsq_diag *d);
/* Same with explicit dsq_tok_flags. encode(.., add_special, ..) is
 * encode_ex(.., DSQ_TOK_PARSE_SPECIAL | (add_special ? DSQ_TOK_ADD_SPECIAL : 0), ..). */
int  dsq_tokenizer_encode_ex(const dsq_tokenizer *t, const char *text, size_t len,
                             unsigned flags, int32_t **ids, size_t *n, dsq_diag *d);

/* Decode ids to text as HF tokenizer.decode does: byte-level tokens back to
 * bytes, added tokens as their content, invalid UTF-8 in the result replaced
 * by U+FFFD, clean_up_tokenization_spaces when the config asks (default
 * off). skip_special drops special tokens (HF special=true; llama2.c: ids
 * 0-2). llama2.c kind: run.c decode() rules (<0xXX> to the byte, a leading
 * space dropped after BOS) and, as SentencePiece, also at the very start,
 * so decode(encode(x)) == x. *text is malloc'd and NUL-terminated (*len,
 * if given, excludes the NUL). Unknown ids -> DSQ_ERR_INVALID_ARG. */
int  dsq_tokenizer_decode(const dsq_tokenizer *t, const int32_t *ids, size_t n,
                          int skip_special, char **text, size_t *len);

/* Raw bytes one token stands for (byte-level mapping undone, <0xXX> to its
 * byte; no lossy repair, so a token may be part of a UTF-8 character). For
 * streaming output: concatenate and print complete characters. Returns 0 or
 * DSQ_ERR_INVALID_ARG for an unknown id. The pointer lives as long as t. */
int  dsq_tokenizer_token_bytes(const dsq_tokenizer *t, int32_t id,
                               const char **bytes, size_t *len);

/* The token's string as written in the vocabulary ("Ġthe", "<｜User｜>",
 * llama2.c: " the"); NUL-terminated, NULL for an unknown id. */
const char *dsq_tokenizer_piece(const dsq_tokenizer *t, int32_t id);

/* Id of a token given by its vocabulary string (as dsq_tokenizer_piece
 * returns; added tokens by content), or -1. */
int32_t dsq_tokenizer_find(const dsq_tokenizer *t, const char *token);

/* -1 when the tokenizer has none. */
int32_t dsq_tokenizer_bos(const dsq_tokenizer *t);
int32_t dsq_tokenizer_eos(const dsq_tokenizer *t);
/* 1 for special tokens (HF added_tokens with special=true, and the config's
 * BOS/EOS; llama2.c ids 0-2). */
int     dsq_tokenizer_is_special(const dsq_tokenizer *t, int32_t id);

/* One past the largest id (vocab and added tokens). Ids below it with no
 * token (holes) have piece NULL. */
size_t  dsq_tokenizer_vocab_size(const dsq_tokenizer *t);

#endif
