/* tok_internal.h - shared between the tokenizer's source files (tokenizer.c,
 * tok_hf.c, tok_pretok.c, tok_bpe.c, tok_llama2c.c, tok_nfc.c). Not public. */
#ifndef DSQ_TOK_INTERNAL_H
#define DSQ_TOK_INTERNAL_H

#include "dsq_error.h"
#include "tokenizer.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

/* Hostile files: ids at or above this are refused (real vocabularies are
 * at most a few hundred thousand). */
#define TOK_MAX_ID (1 << 21)
/* Words longer than this (bytes) are not cached (HF caches < 256 chars). */
#define TOK_CACHE_MAX_WORD 256

/* ---- small utilities ---------------------------------------------------- */

/* Arena of immutable strings: blocks never move, so pointers stay valid. */
typedef struct tok_arena {
    struct tok_arena_block *head;
} tok_arena;
char *tok_arena_dup(tok_arena *a, const void *s, size_t n); /* NUL-terminated copy */
void *tok_arena_alloc(tok_arena *a, size_t n);
void  tok_arena_free(tok_arena *a);

/* Growable vectors. */
typedef struct { int32_t *v; size_t n, cap; } tok_ids;
int  tok_ids_push(tok_ids *a, int32_t x);
int  tok_ids_append(tok_ids *a, const int32_t *x, size_t n);

typedef struct { char *v; size_t n, cap; } tok_buf;
int  tok_buf_append(tok_buf *b, const void *s, size_t n);

uint64_t tok_hash(const void *p, size_t n);

/* Byte string -> int32 map; keys are borrowed (must outlive the map). */
typedef struct tok_smap_slot { uint64_t h; const char *k; uint32_t klen; int32_t val; } tok_smap_slot;
typedef struct tok_smap { tok_smap_slot *s; size_t cap, n; } tok_smap;
int     tok_smap_init(tok_smap *m, size_t expect);
/* Insert; an existing key keeps its value unless replace is set. */
int     tok_smap_put(tok_smap *m, const char *k, size_t klen, int32_t val, int replace);
int32_t tok_smap_get(const tok_smap *m, const char *k, size_t klen); /* -1 if absent */
void    tok_smap_free(tok_smap *m);

/* (left id, right id) -> (rank, merged id). */
typedef struct tok_pmap_slot { uint64_t key; uint32_t rank; int32_t id; } tok_pmap_slot;
typedef struct tok_pmap { tok_pmap_slot *s; size_t cap, n; } tok_pmap;
int  tok_pmap_init(tok_pmap *m, size_t expect);
int  tok_pmap_put(tok_pmap *m, int32_t a, int32_t b, uint32_t rank, int32_t id); /* replaces */
/* Returns 1 and fills rank/id when present. */
static inline uint64_t tok_pmap_key(int32_t a, int32_t b) { return ((uint64_t)(uint32_t)a << 32) | (uint32_t)b; }
int  tok_pmap_get(const tok_pmap *m, int32_t a, int32_t b, uint32_t *rank, int32_t *id);
void tok_pmap_free(tok_pmap *m);

/* UTF-8 helpers. */
/* Length of the valid UTF-8 sequence at p (1..4), or 0 when invalid; sets *cp. */
size_t tok_utf8_decode(const unsigned char *p, size_t n, uint32_t *cp);
size_t tok_utf8_encode(uint32_t cp, char *out);
/* 1 when all of s is valid UTF-8. */
int    tok_utf8_valid(const char *s, size_t n);
/* Copy with every maximal invalid subpart replaced by U+FFFD (as Rust's
 * String::from_utf8_lossy). */
int    tok_utf8_lossy(const char *s, size_t n, tok_buf *out);

/* ---- the tokenizer object ----------------------------------------------- */

typedef struct tok_entry {
    const char *piece;   /* vocabulary string (NUL-terminated), NULL = hole */
    const char *bytes;   /* what it decodes to (byte-level undone) */
    uint32_t piece_len, bytes_len;
    uint8_t special;     /* HF added token with special=true / BOS, EOS */
    uint8_t added;       /* HF added token */
} tok_entry;

enum tok_split_behavior {
    TOK_SPLIT_REMOVED, TOK_SPLIT_ISOLATED, TOK_SPLIT_MERGED_PREV,
    TOK_SPLIT_MERGED_NEXT, TOK_SPLIT_CONTIGUOUS
};

typedef struct tok_regex {
    pcre2_code *code;
    int jit;             /* pcre2_jit_compile succeeded */
} tok_regex;

enum tok_pre_type { TOK_PRE_SPLIT = 1, TOK_PRE_BYTELEVEL = 2 };

typedef struct tok_pre {
    int type;
    tok_regex re;        /* Split pattern; ByteLevel with use_regex: GPT-2 regex */
    int behavior;
    int invert;
    int add_prefix_space;
    int use_regex;
} tok_pre;

typedef struct tok_added {
    const char *content; /* as matched (normalized content for normalized tokens) */
    size_t len;
    int32_t id;
    uint8_t special, lstrip, rstrip, single_word, normalized;
} tok_added;

/* Byte trie over added-token contents for leftmost-longest matching. */
typedef struct tok_trie_node {
    int32_t child;       /* first child node index, -1 none */
    int32_t sibling;     /* next sibling, -1 none */
    int32_t token;       /* index into tok_added array ending here, -1 none */
    uint8_t byte;
} tok_trie_node;

typedef struct tok_trie {
    tok_trie_node *nodes;
    size_t n, cap;
    uint8_t first[256]; /* 1 when some token starts with this byte */
    int any;
} tok_trie;

enum tok_norm { TOK_NORM_NONE = 0, TOK_NORM_NFC = 1 };

/* Word cache: pre-token bytes -> ids. Bounded; emptied when full. */
typedef struct tok_cache {
    pthread_mutex_t mu;
    struct tok_cache_slot { uint64_t h; uint32_t koff, klen, voff, vlen; } *slots;
    size_t cap, n;
    tok_buf data;        /* keys and id arrays, addressed by offset */
} tok_cache;

struct dsq_tokenizer {
    int kind;
    tok_arena arena;
    tok_entry *ent;      /* [n_ent] indexed by id */
    size_t n_ent;
    tok_smap by_piece;   /* piece -> id (added tokens by content) */
    int32_t bos, eos;

    /* HF byte-level BPE */
    int norm;
    tok_pre *pre;
    size_t n_pre;
    tok_added *added;
    size_t n_added;
    tok_trie trie_raw;   /* added tokens with normalized=false */
    tok_trie trie_norm;  /* normalized=true (matched after normalization) */
    tok_smap by_bytes;   /* raw bytes -> id for model vocab (ignore_merges) */
    tok_pmap merges;
    int32_t byte_id[256];/* initial symbol per byte, -1 when absent */
    int ignore_merges;
    int byte_fallback;
    int32_t unk;         /* -1 none */
    int fuse_unk;
    int add_bos, add_eos;/* for add_special */
    int32_t *tmpl_pre, *tmpl_post; /* TemplateProcessing special ids */
    size_t n_tmpl_pre, n_tmpl_post;
    int cleanup_spaces;
    tok_cache cache;

    /* llama2.c */
    float *scores;
    tok_smap l2_map;     /* piece -> lowest id */
    int32_t l2_space;    /* id of " " or -1 */
    int32_t max_token_length;
};

/* tok_hf.c */
/* JSON text to load from: len bytes (need not be NUL-terminated); name is
 * what messages call it (a path, or a label for text held in memory). */
typedef struct tok_text { const char *text; size_t len; const char *name; } tok_text;
int  tok_hf_load(dsq_tokenizer *t, const char *json_path, const char *config_path, dsq_diag *d);
/* The shared loader: cfg may be NULL (no tokenizer_config.json). */
int  tok_hf_load_text(dsq_tokenizer *t, const tok_text *json, const tok_text *cfg, dsq_diag *d);
/* tok_llama2c.c */
int  tok_l2_load(dsq_tokenizer *t, const char *path, dsq_diag *d);
int  tok_l2_encode(const dsq_tokenizer *t, const char *text, size_t len, unsigned flags, tok_ids *out, dsq_diag *d);
int  tok_l2_decode(const dsq_tokenizer *t, const int32_t *ids, size_t n, int skip_special, tok_buf *out);
/* tok_pretok.c */
int  tok_regex_compile(tok_regex *re, const char *pattern, size_t len, const char *what, dsq_diag *d);
void tok_regex_free(tok_regex *re);
int  tok_trie_add(tok_trie *tr, const char *s, size_t n, int32_t token);
void tok_trie_free(tok_trie *tr);
int  tok_hf_encode(const dsq_tokenizer *t, const char *text, size_t len, unsigned flags, tok_ids *out, dsq_diag *d);
/* tok_bpe.c */
int  tok_bpe_word(const dsq_tokenizer *t, const char *w, size_t n, tok_ids *out);
int  tok_cache_init(tok_cache *c);
void tok_cache_free(tok_cache *c);
/* tok_nfc.c: 1 when s may change under NFC (has a char outside the quick-check-yes set) */
int  tok_nfc_needed(const char *s, size_t n);
int  tok_nfc(const char *s, size_t n, tok_buf *out);

/* tok_nfc_data.c (generated): ranges {first, last, ccc}; canonical full
 * decompositions {cp, offset, len} into tok_nfc_dec_cps; primary composites
 * {first, second, composite} sorted by (first, second); quick-check ranges
 * {first, last} of characters that may change a string under NFC. */
extern const uint32_t tok_nfc_ccc[][3];
extern const size_t tok_nfc_ccc_n;
extern const uint32_t tok_nfc_dec_idx[][3];
extern const size_t tok_nfc_dec_n;
extern const uint32_t tok_nfc_dec_cps[];
extern const uint32_t tok_nfc_comp[][3];
extern const size_t tok_nfc_comp_n;
extern const uint32_t tok_nfc_qc[][2];
extern const size_t tok_nfc_qc_n;

/* GPT-2 bytes_to_unicode: byte -> code point, and the inverse (-1 outside). */
uint32_t tok_byte_to_cp(uint8_t b);
int      tok_cp_to_byte(uint32_t cp);

#endif
