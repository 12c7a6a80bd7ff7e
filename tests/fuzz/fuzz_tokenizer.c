/* fuzz_tokenizer.c - libFuzzer target for the tokenizer (tokenizer.h).
 *
 * Input: one control byte, then the payload. mode = ctl & 7, encode flags
 * (enum dsq_tok_flags) = ctl >> 4; the seeds in corpus/tokenizer/ start
 * with an ASCII digit naming the mode ('0' = 0x30: mode 0, flags 3).
 *   0, 5  payload = tokenizer.json [NUL tokenizer_config.json], loaded with
 *         dsq_tokenizer_load_json (no files); if it loads, fixed strings
 *         and the payload itself are encoded and decoded, and every id is
 *         looked up. Encode must only produce ids decode accepts.
 *   1, 6  payload = text for tokenizer A, built here: byte-level BPE with
 *         merges, a digit Split, added/special tokens, BOS from its config.
 *         decode(encode(x)) must give x back for valid UTF-8 x, and valid
 *         UTF-8 always.
 *   2, 7  payload = text for tokenizer B: NFC, Split behaviours, lstrip /
 *         rstrip / single_word / normalized added tokens, ignore_merges,
 *         byte fallback and <unk>, TemplateProcessing, clean-up spaces.
 *         Crash-freedom only (its decode is lossy by design).
 *   3     payload = text for a llama2.c tokenizer built here (byte
 *         fallback <0xXX>, merges by score); decode(encode(x)) == x for
 *         valid UTF-8 without NUL.
 *   4     payload = a llama2.c tokenizer.bin (loaded from a scratch file,
 *         the only loader for that format), then as mode 0.
 * Must never crash, leak or read out of bounds. */
#include "tokenizer.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(x) do { if (!(x)) { fprintf(stderr, "check failed: %s (line %d)\n", #x, __LINE__); abort(); } } while (0)
#define TEXT_CAP 4096 /* payload bytes encoded per run: keeps one input fast */

/* ---- small helpers --------------------------------------------------------- */

typedef struct { char *p; size_t n, cap; } sb;

static void sb_add(sb *b, const char *s, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap * 2 : 4096;
        while (nc < b->n + n + 1) nc *= 2;
        char *np = realloc(b->p, nc);
        if (!np) abort();
        b->p = np;
        b->cap = nc;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}
static void sb_puts(sb *b, const char *s) { sb_add(b, s, strlen(s)); }

/* GPT-2 bytes_to_unicode. */
static unsigned b2u(unsigned b)
{
    if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE) return b;
    unsigned k = 0;
    for (unsigned x = 0; x < b; x++) k += !((x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE);
    return 256 + k;
}

/* JSON string literal of the byte-level spelling of raw bytes. */
static void sb_bl(sb *b, const char *s)
{
    char e[8];
    sb_puts(b, "\"");
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        unsigned cp = b2u(*p);
        if ((cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z')) {
            char c = (char)cp;
            sb_add(b, &c, 1);
        } else {
            snprintf(e, sizeof e, "\\u%04x", cp);
            sb_puts(b, e);
        }
    }
    sb_puts(b, "\"");
}

/* Strict UTF-8 validity (no overlongs, surrogates or > U+10FFFF). */
static int utf8_ok(const unsigned char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        size_t l;
        unsigned cp, min;
        if (c < 0x80) { i++; continue; }
        if (c >= 0xC2 && c <= 0xDF) { l = 2; cp = c & 0x1F; min = 0x80; }
        else if (c >= 0xE0 && c <= 0xEF) { l = 3; cp = c & 0x0F; min = 0x800; }
        else if (c >= 0xF0 && c <= 0xF4) { l = 4; cp = c & 0x07; min = 0x10000; }
        else return 0;
        if (i + l > n) return 0;
        for (size_t k = 1; k < l; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return 0;
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
        i += l;
    }
    return 1;
}

/* ---- the built-in tokenizers ---------------------------------------------------- */

/* Merges as raw byte pairs "a|b"; every prefix merge comes first. */
static const char *const merges_a[] = {
    "t|h", "th|e", " |t", " t|h", " th|e", "i|n", "in|g", "e|r", " |a", " a|n", " an|d", "a|n", "an|d",
    "o|u", "Q|u", "Qu|e", "Que|s", "Ques|t", "Quest|i", "Questi|o", "Questio|n", "Question|:", "s|t",
    "i|o", "io|n", " |w", " w|h", "e|n", "r|e", "o|n", "1|2", "12|3", "\n|\n", " | ", "  | ", "A|n",
    "An|s", "Ans|w", "Answ|e", "Answe|r", "Answer|:", NULL
};

/* Byte symbols 1..hi-1 (byte 0 is written by the caller), then the merged
 * tokens from 256 on. */
static void add_vocab(sb *b, const char *const *merges, unsigned *id, unsigned hi)
{
    char one[2] = { 0, 0 }, num[24];
    for (unsigned c = 1; c < hi; c++) {
        one[0] = (char)c;
        sb_puts(b, ",");
        sb_bl(b, one);
        snprintf(num, sizeof num, ":%u", c);
        sb_puts(b, num);
    }
    *id = 256;
    for (size_t i = 0; merges[i]; i++) {
        const char *bar = strchr(merges[i], '|');
        char cat[64];
        snprintf(cat, sizeof cat, "%.*s%s", (int)(bar - merges[i]), merges[i], bar + 1);
        sb_puts(b, ",");
        sb_bl(b, cat);
        snprintf(num, sizeof num, ":%u", (*id)++);
        sb_puts(b, num);
    }
}

static void add_merges(sb *b, const char *const *merges)
{
    for (size_t i = 0; merges[i]; i++) {
        const char *bar = strchr(merges[i], '|');
        char l[64], r[64];
        snprintf(l, sizeof l, "%.*s", (int)(bar - merges[i]), merges[i]);
        snprintf(r, sizeof r, "%s", bar + 1);
        sb_puts(b, i ? ",[" : "[["); /* the array and the first pair */
        sb_bl(b, l);
        sb_puts(b, ",");
        sb_bl(b, r);
        sb_puts(b, "]");
    }
}

static dsq_tokenizer *build_a(void)
{
    sb b = { 0 };
    char num[160];
    sb_puts(&b, "{\"version\":\"1.0\",\"truncation\":null,\"padding\":null,\"normalizer\":null,"
                "\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":["
                "{\"type\":\"Split\",\"pattern\":{\"Regex\":\"\\\\p{N}{1,3}\"},\"behavior\":\"Isolated\",\"invert\":false},"
                "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":true}]},"
                "\"post_processor\":{\"type\":\"ByteLevel\",\"trim_offsets\":false},"
                "\"decoder\":{\"type\":\"ByteLevel\"},"
                "\"model\":{\"type\":\"BPE\",\"dropout\":null,\"unk_token\":null,\"byte_fallback\":false,"
                "\"vocab\":{\"\\u0100\":0");
    unsigned id;
    add_vocab(&b, merges_a, &id, 256);
    sb_puts(&b, "},\"merges\":");
    add_merges(&b, merges_a);
    snprintf(num, sizeof num, "]},\"added_tokens\":[{\"id\":%u,\"content\":\"<s>\",\"special\":true,\"normalized\":false},"
             "{\"id\":%u,\"content\":\"</s>\",\"special\":true,\"normalized\":false},", id, id + 1);
    sb_puts(&b, num);
    snprintf(num, sizeof num, "{\"id\":%u,\"content\":\"<|im_end|>\",\"special\":false,\"normalized\":false},"
             "{\"id\":%u,\"content\":\"<\\uff5cUser\\uff5c>\",\"special\":true}]}", id + 2, id + 3);
    sb_puts(&b, num);
    const char *cfg = "{\"add_bos_token\":true,\"add_eos_token\":false,\"bos_token\":\"<s>\","
                      "\"eos_token\":{\"content\":\"</s>\"},\"tokenizer_class\":\"LlamaTokenizerFast\"}";
    dsq_tokenizer *t = NULL;
    dsq_diag d;
    dsq_diag_clear(&d);
    if (dsq_tokenizer_load_json(&t, b.p, b.n, cfg, &d) != DSQ_OK) {
        fprintf(stderr, "fuzz_tokenizer: built-in A: %s: %s\n", d.path, d.msg);
        abort();
    }
    free(b.p);
    return t;
}

static const char *const merges_b[] = { "t|h", "th|e", " |t", "<|s", "<s|>", "e|r", "1|2", NULL };

static dsq_tokenizer *build_b(void)
{
    sb b = { 0 };
    char num[600];
    sb_puts(&b, "{\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"NFC\"}]},"
                "\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":["
                "{\"type\":\"Split\",\"pattern\":{\"String\":\"--\"},\"behavior\":\"Removed\",\"invert\":false},"
                "{\"type\":\"Split\",\"pattern\":{\"Regex\":\"[.,;]\"},\"behavior\":\"MergedWithPrevious\",\"invert\":false},"
                "{\"type\":\"Split\",\"pattern\":{\"Regex\":\"\\\\s+\"},\"behavior\":\"MergedWithNext\",\"invert\":false},"
                "{\"type\":\"Split\",\"pattern\":{\"Regex\":\"[a-z]\"},\"behavior\":\"Contiguous\",\"invert\":true},"
                "{\"type\":\"ByteLevel\",\"add_prefix_space\":true,\"use_regex\":false}]},"
                "\"decoder\":{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"ByteLevel\"}]},"
                "\"model\":{\"type\":\"BPE\",\"ignore_merges\":true,\"byte_fallback\":true,\"fuse_unk\":true,"
                "\"unk_token\":\"<unk>\",\"vocab\":{\"\\u0100\":0");
    unsigned id;
    /* the byte-level alphabet without 0x80-0xFF: those bytes go to
     * <0x80>..<0xBF> (byte fallback) or <unk> (fused) */
    add_vocab(&b, merges_b, &id, 0x80);
    sb_puts(&b, ",\"<unk>\":");
    snprintf(num, sizeof num, "%u", id++);
    sb_puts(&b, num);
    for (unsigned x = 0x80; x < 0xC0; x++) {
        snprintf(num, sizeof num, ",\"<0x%02X>\":%u", x, id++);
        sb_puts(&b, num);
    }
    sb_puts(&b, "},\"merges\":");
    add_merges(&b, merges_b);
    snprintf(num, sizeof num,
             "]},\"added_tokens\":[{\"id\":%u,\"content\":\"<bos>\",\"special\":true},"
             "{\"id\":%u,\"content\":\"</s>\",\"special\":true,\"normalized\":false},"
             "{\"id\":%u,\"content\":\"[m]\",\"lstrip\":true,\"rstrip\":true},"
             "{\"id\":%u,\"content\":\"cafe\\u0301\",\"normalized\":true},"
             "{\"id\":%u,\"content\":\"word\",\"single_word\":true},", id, id + 1, id + 2, id + 3, id + 4);
    sb_puts(&b, num);
    snprintf(num, sizeof num,
             "{\"id\":%u,\"content\":\"\",\"special\":false},"
             /* already in the vocabulary (merge "<s" ">"): takes that id */
             "{\"id\":%u,\"content\":\"<s>\",\"special\":true}],"
             "\"post_processor\":{\"type\":\"Sequence\",\"processors\":[{\"type\":\"ByteLevel\"},"
             "{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<s>\",\"type_id\":0}},"
             "{\"Sequence\":{\"id\":\"A\",\"type_id\":0}},{\"SpecialToken\":{\"id\":\"</s>\",\"type_id\":0}}],"
             "\"special_tokens\":{\"<s>\":{\"id\":\"<s>\",\"ids\":[%u]},\"</s>\":{\"id\":\"</s>\",\"ids\":[%u]}}}]}}",
             id + 5, id + 6, id, id + 1);
    sb_puts(&b, num);
    dsq_tokenizer *t = NULL;
    dsq_diag d;
    dsq_diag_clear(&d);
    if (dsq_tokenizer_load_json(&t, b.p, b.n, "{\"clean_up_tokenization_spaces\":true}", &d) != DSQ_OK) {
        fprintf(stderr, "fuzz_tokenizer: built-in B: %s: %s\n", d.path, d.msg);
        abort();
    }
    free(b.p);
    return t;
}

/* llama2.c tokenizer.bin bytes. */
static void l2_tok(sb *b, float score, const char *s, size_t n)
{
    unsigned char h[8];
    uint32_t sc;
    memcpy(&sc, &score, 4);
    for (int i = 0; i < 4; i++) h[i] = (unsigned char)(sc >> (8 * i));
    for (int i = 0; i < 4; i++) h[4 + i] = (unsigned char)((uint32_t)n >> (8 * i));
    sb_add(b, (const char *)h, 8);
    sb_add(b, s, n);
}

static const char *scratch_path(void)
{
    static char path[512];
    const char *tmp = getenv("TMPDIR");
    if (!path[0]) snprintf(path, sizeof path, "%s/dsq-fuzz-tok-%d.bin", tmp && *tmp ? tmp : "/tmp", (int)getpid());
    return path;
}

static dsq_tokenizer *load_l2_bytes(const void *p, size_t n)
{
    const char *path = scratch_path();
    FILE *fp = fopen(path, "wb");
    if (!fp) return NULL;
    size_t w = n ? fwrite(p, 1, n, fp) : 0;
    fclose(fp);
    dsq_tokenizer *t = NULL;
    dsq_diag d;
    dsq_diag_clear(&d);
    if (w != n || dsq_tokenizer_load(&t, path, &d) != DSQ_OK) t = NULL;
    unlink(path);
    return t;
}

static dsq_tokenizer *build_l2(void)
{
    static const char *const words[] = { "th", "he", "the", " t", " the", "in", "ing", "an", "and",
                                         " a", " and", "er", "  ", "\xc3\xa9", "\xe4\xb8\xad", "Qu",
                                         "Question", "Question:", NULL };
    sb b = { 0 };
    unsigned char hdr[4] = { 16, 0, 0, 0 };
    sb_add(&b, (const char *)hdr, 4);
    l2_tok(&b, 0, "<unk>", 5);
    l2_tok(&b, 0, "\n<s>\n", 5);
    l2_tok(&b, 0, "\n</s>\n", 6);
    char name[8];
    for (unsigned x = 0; x < 256; x++) {
        snprintf(name, sizeof name, "<0x%02X>", x);
        l2_tok(&b, 0, name, 6);
    }
    for (unsigned c = 32; c < 127; c++) {
        char ch = (char)c;
        l2_tok(&b, -1000.0f, &ch, 1);
    }
    for (size_t i = 0; words[i]; i++) l2_tok(&b, (float)strlen(words[i]) - (float)i / 100.0f, words[i], strlen(words[i]));
    dsq_tokenizer *t = load_l2_bytes(b.p, b.n);
    free(b.p);
    if (!t) { fprintf(stderr, "fuzz_tokenizer: built-in llama2.c tokenizer did not load\n"); abort(); }
    return t;
}

/* ---- checks ---------------------------------------------------------------------- */

/* Encode and decode with any flags: the ids must all be known to decode. */
static void exercise(const dsq_tokenizer *t, const char *s, size_t n, unsigned flags)
{
    int32_t *ids = NULL;
    size_t k = 0;
    dsq_diag d;
    dsq_diag_clear(&d);
    if (dsq_tokenizer_encode_ex(t, s, n, flags, &ids, &k, &d) != DSQ_OK) return; /* e.g. regex limits */
    CHECK(ids != NULL);
    for (int skip = 0; skip < 2; skip++) {
        char *txt = NULL;
        size_t tl = 0;
        CHECK(dsq_tokenizer_decode(t, ids, k, skip, &txt, &tl) == DSQ_OK);
        CHECK(txt && txt[tl] == 0 && utf8_ok((const unsigned char *)txt, tl));
        free(txt);
    }
    for (size_t i = 0; i < k; i++) {
        const char *bytes;
        size_t bl;
        CHECK(dsq_tokenizer_token_bytes(t, ids[i], &bytes, &bl) == DSQ_OK);
        CHECK(dsq_tokenizer_piece(t, ids[i]) != NULL);
    }
    free(ids);
}

/* decode(encode(x)) == x (no special tokens added). */
static void roundtrip(const dsq_tokenizer *t, const char *s, size_t n, unsigned parse_special)
{
    int32_t *ids = NULL;
    size_t k = 0;
    CHECK(dsq_tokenizer_encode_ex(t, s, n, parse_special, &ids, &k, NULL) == DSQ_OK);
    char *txt = NULL;
    size_t tl = 0;
    CHECK(dsq_tokenizer_decode(t, ids, k, 0, &txt, &tl) == DSQ_OK);
    CHECK(tl == n && memcmp(txt, s, n) == 0);
    free(txt);
    free(ids);
}

static void lookups(const dsq_tokenizer *t)
{
    size_t vs = dsq_tokenizer_vocab_size(t);
    for (size_t i = 0; i < vs; i++) {
        if (i == 512 && vs > 1024) i = vs - 512; /* the ends are enough */
        const char *p = dsq_tokenizer_piece(t, (int32_t)i);
        const char *bytes;
        size_t bl;
        int rc = dsq_tokenizer_token_bytes(t, (int32_t)i, &bytes, &bl);
        CHECK((p != NULL) == (rc == DSQ_OK));
        if (!p) continue;
        int32_t f = dsq_tokenizer_find(t, p);
        if (f >= 0) CHECK(dsq_tokenizer_piece(t, f) && strcmp(dsq_tokenizer_piece(t, f), p) == 0);
        (void)dsq_tokenizer_is_special(t, (int32_t)i);
    }
    CHECK(dsq_tokenizer_piece(t, -1) == NULL && dsq_tokenizer_piece(t, (int32_t)vs) == NULL);
    int32_t bos = dsq_tokenizer_bos(t), eos = dsq_tokenizer_eos(t);
    CHECK(bos < 0 || dsq_tokenizer_piece(t, bos));
    CHECK(eos < 0 || dsq_tokenizer_piece(t, eos));
}

static const char *const fixed[] = {
    "", "Hello, world! It's 2024: 1234567 tokens.\n\n  Question: x?\nAnswer: 42 #### 42",
    "<s>hi</s> <|im_end|> <\xef\xbd\x9cUser\xef\xbd\x9c> [m] word words cafe\xcc\x81 caf\xc3\xa9",
    "h\xc3\xa9llo w\xc3\xb6rld \xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\x98\x80 \t\r\n -- a.b, c;",
    "bad \xff\xfe utf-8 \xc3 \xed\xa0\x80 \xf4\x90\x80\x80 end",
};

static void any_tokenizer(const dsq_tokenizer *t, const char *payload, size_t n, unsigned flags)
{
    lookups(t);
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) {
        exercise(t, fixed[i], strlen(fixed[i]), flags);
        exercise(t, fixed[i], strlen(fixed[i]), DSQ_TOK_PARSE_SPECIAL);
    }
    exercise(t, payload, n > TEXT_CAP ? TEXT_CAP : n, flags);
}

/* ---- entry ------------------------------------------------------------------------- */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static dsq_tokenizer *tok_a, *tok_b, *tok_l2; /* built once per process */
    if (!tok_a) {
        tok_a = build_a();
        tok_b = build_b();
        tok_l2 = build_l2();
    }
    if (size < 1) return 0;
    unsigned ctl = data[0], mode = ctl & 7, flags = ctl >> 4;
    const char *p = (const char *)data + 1;
    size_t n = size - 1;
    switch (mode) {
    case 0: case 5: {
        const char *nul = memchr(p, 0, n);
        size_t jl = nul ? (size_t)(nul - p) : n;
        char *cfg = NULL;
        if (nul) {
            size_t cl = n - jl - 1;
            cfg = malloc(cl + 1);
            if (!cfg) return 0;
            memcpy(cfg, nul + 1, cl);
            cfg[cl] = 0; /* a NUL inside ends it early: fine */
        }
        dsq_tokenizer *t = NULL;
        dsq_diag d;
        dsq_diag_clear(&d);
        if (dsq_tokenizer_load_json(&t, p, jl, cfg, &d) == DSQ_OK) {
            any_tokenizer(t, p, jl, flags);
            dsq_tokenizer_free(t);
        } else {
            CHECK(t == NULL && d.status < 0 && d.msg[0]);
        }
        free(cfg);
        break;
    }
    case 1: case 6: {
        size_t m = n > TEXT_CAP ? TEXT_CAP : n;
        exercise(tok_a, p, m, flags);
        if (utf8_ok((const unsigned char *)p, m)) {
            roundtrip(tok_a, p, m, 0);
            roundtrip(tok_a, p, m, DSQ_TOK_PARSE_SPECIAL);
        }
        break;
    }
    case 2: case 7:
        exercise(tok_b, p, n > TEXT_CAP ? TEXT_CAP : n, flags);
        break;
    case 3: {
        size_t m = n > TEXT_CAP ? TEXT_CAP : n;
        exercise(tok_l2, p, m, flags);
        if (utf8_ok((const unsigned char *)p, m) && !memchr(p, 0, m)) roundtrip(tok_l2, p, m, 0);
        break;
    }
    case 4: {
        dsq_tokenizer *t = load_l2_bytes(p, n);
        if (t) {
            any_tokenizer(t, p, n, flags);
            dsq_tokenizer_free(t);
        }
        break;
    }
    }
    return 0;
}
