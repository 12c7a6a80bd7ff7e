/* tok_hf.c - load a Hugging Face tokenizer.json (byte-level BPE) and its
 * tokenizer_config.json into a dsq_tokenizer.
 *
 * Everything is validated: a missing or mistyped field fails with
 * DSQ_ERR_FORMAT naming its JSON path ("model.merges[12]"); a known but
 * unsupported component fails with DSQ_ERR_UNSUPPORTED naming its path and
 * type. Semantics follow huggingface/tokenizers (Rust): see the comments at
 * each component. */
#include "tok_internal.h"

#include "dsq_file.h"

#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOK_JSON_MAX ((size_t)1 << 30)

typedef struct ctx {
    dsq_tokenizer *t;
    const char *path;
    dsq_diag *d;
} ctx;

#define FAIL(c, st, ...) dsq_fail((c)->d, (st), (c)->path, NULL, -1, __VA_ARGS__)

/* Parse len bytes of JSON text (need not be NUL-terminated); name is used
 * in messages. The whole input must be one JSON value plus blanks. */
static int parse_json(const char *name, const char *buf, size_t len, json_object **out, dsq_diag *d)
{
    *out = NULL;
    if (len > TOK_JSON_MAX)
        return dsq_fail(d, DSQ_ERR_FORMAT, name, NULL, -1, "json text of %zu bytes is too large", len);
    json_tokener *tk = json_tokener_new_ex(64);
    if (!tk) return dsq_fail(d, DSQ_ERR_NOMEM, name, NULL, -1, "out of memory");
    json_object *o = json_tokener_parse_ex(tk, buf ? buf : "", (int)len);
    enum json_tokener_error je = json_tokener_get_error(tk);
    size_t end = json_tokener_get_parse_end(tk);
    int rc = 0;
    if (!o || je != json_tokener_success) {
        rc = dsq_fail(d, DSQ_ERR_JSON, name, NULL, (int64_t)end, "invalid json: %s",
                      je == json_tokener_continue ? "unexpected end of input" : json_tokener_error_desc(je));
        json_object_put(o);
        o = NULL;
    } else {
        while (end < len && (buf[end] == ' ' || buf[end] == '\n' || buf[end] == '\r' || buf[end] == '\t')) end++;
        if (end != len) {
            rc = dsq_fail(d, DSQ_ERR_JSON, name, NULL, (int64_t)end, "invalid json: trailing data");
            json_object_put(o);
            o = NULL;
        }
    }
    json_tokener_free(tk);
    *out = o;
    return rc;
}

static json_object *get(json_object *o, const char *key)
{
    json_object *v = NULL;
    if (!o || !json_object_is_type(o, json_type_object)) return NULL;
    if (!json_object_object_get_ex(o, key, &v)) return NULL;
    return v; /* NULL also for JSON null */
}

/* Optional boolean: absent or null gives def. */
static int get_bool(ctx *c, json_object *o, const char *key, const char *where, int def, int *out)
{
    json_object *v = get(o, key);
    if (!v) { *out = def; return 0; }
    if (!json_object_is_type(v, json_type_boolean))
        return FAIL(c, DSQ_ERR_FORMAT, "%s.%s: expected a boolean", where, key);
    *out = json_object_get_boolean(v);
    return 0;
}

static const char *type_of(json_object *o)
{
    json_object *ty = get(o, "type");
    return ty && json_object_is_type(ty, json_type_string) ? json_object_get_string(ty) : NULL;
}

static int get_id(ctx *c, json_object *v, const char *where, int32_t *out)
{
    if (!v || !json_object_is_type(v, json_type_int))
        return FAIL(c, DSQ_ERR_FORMAT, "%s: expected an integer id", where);
    int64_t x = json_object_get_int64(v);
    if (x < 0 || x >= TOK_MAX_ID)
        return FAIL(c, DSQ_ERR_FORMAT, "%s: id %lld out of range [0, %d)", where, (long long)x, TOK_MAX_ID);
    *out = (int32_t)x;
    return 0;
}

/* ---- model: vocab and merges -------------------------------------------- */

/* The piece's bytes under the byte-level alphabet; pieces with a character
 * outside it decode to their own UTF-8 (HF ByteLevel decoder). Returns 1
 * when every character was in the alphabet. */
static int piece_bytes(const char *s, size_t n, char *out, size_t *outn)
{
    size_t i = 0, k = 0;
    while (i < n) {
        uint32_t cp;
        size_t l = tok_utf8_decode((const unsigned char *)s + i, n - i, &cp);
        int b = l ? tok_cp_to_byte(cp) : -1;
        if (b < 0) { memcpy(out, s, n); *outn = n; return 0; }
        out[k++] = (char)b;
        i += l;
    }
    *outn = k;
    return 1;
}

static int set_entry(ctx *c, int32_t id, const char *s, size_t n, int added, const char *where)
{
    dsq_tokenizer *t = c->t;
    tok_entry *e = &t->ent[id];
    if (e->piece && !added)
        return FAIL(c, DSQ_ERR_FORMAT, "%s: duplicate id %d", where, id);
    char *piece = tok_arena_dup(&t->arena, s, n);
    char *bytes = tok_arena_alloc(&t->arena, n + 1);
    if (!piece || !bytes) return FAIL(c, DSQ_ERR_NOMEM, "out of memory");
    size_t bn = 0;
    int mapped = piece_bytes(s, n, bytes, &bn);
    bytes[bn] = 0;
    e->piece = piece;
    e->piece_len = (uint32_t)n;
    e->bytes = bytes;
    e->bytes_len = (uint32_t)bn;
    if (!added && mapped) {
        int rc = tok_smap_put(&t->by_bytes, bytes, bn, id, 0);
        if (rc) return FAIL(c, rc, "out of memory");
    }
    int rc = tok_smap_put(&t->by_piece, piece, n, id, added);
    if (rc) return FAIL(c, rc, "out of memory");
    return 0;
}

static int load_merges(ctx *c, json_object *merges)
{
    dsq_tokenizer *t = c->t;
    if (!merges) return 0; /* a BPE without merges is just its vocab */
    if (!json_object_is_type(merges, json_type_array))
        return FAIL(c, DSQ_ERR_FORMAT, "model.merges: expected an array");
    size_t n = json_object_array_length(merges);
    int rc = tok_pmap_init(&t->merges, n);
    if (rc) return FAIL(c, rc, "out of memory");
    tok_buf cat = { 0 };
    for (size_t i = 0; i < n; i++) {
        json_object *m = json_object_array_get_idx(merges, i);
        const char *a = NULL, *b = NULL;
        size_t al = 0, bl = 0;
        if (m && json_object_is_type(m, json_type_string)) {
            /* "a b": exactly one space (HF rejects anything else) */
            const char *s = json_object_get_string(m);
            size_t sl = (size_t)json_object_get_string_len(m);
            const char *sp = memchr(s, ' ', sl);
            if (!sp || memchr(sp + 1, ' ', sl - (size_t)(sp + 1 - s))) {
                free(cat.v);
                return FAIL(c, DSQ_ERR_FORMAT, "model.merges[%zu]: expected \"a b\" with one space", i);
            }
            a = s; al = (size_t)(sp - s);
            b = sp + 1; bl = sl - al - 1;
        } else if (m && json_object_is_type(m, json_type_array) && json_object_array_length(m) == 2 &&
                   json_object_is_type(json_object_array_get_idx(m, 0), json_type_string) &&
                   json_object_is_type(json_object_array_get_idx(m, 1), json_type_string)) {
            json_object *x = json_object_array_get_idx(m, 0), *y = json_object_array_get_idx(m, 1);
            a = json_object_get_string(x); al = (size_t)json_object_get_string_len(x);
            b = json_object_get_string(y); bl = (size_t)json_object_get_string_len(y);
        } else {
            free(cat.v);
            return FAIL(c, DSQ_ERR_FORMAT, "model.merges[%zu]: expected a string or a pair of strings", i);
        }
        int32_t ia = tok_smap_get(&t->by_piece, a, al), ib = tok_smap_get(&t->by_piece, b, bl);
        if (ia < 0 || ib < 0) {
            free(cat.v);
            return FAIL(c, DSQ_ERR_FORMAT, "model.merges[%zu]: token '%.*s' not in model.vocab", i,
                        ia < 0 ? (int)(al > 64 ? 64 : al) : (int)(bl > 64 ? 64 : bl), ia < 0 ? a : b);
        }
        cat.n = 0;
        if (tok_buf_append(&cat, a, al) || tok_buf_append(&cat, b, bl)) {
            free(cat.v);
            return FAIL(c, DSQ_ERR_NOMEM, "out of memory");
        }
        int32_t im = tok_smap_get(&t->by_piece, cat.v, cat.n);
        if (im < 0) {
            free(cat.v);
            return FAIL(c, DSQ_ERR_FORMAT, "model.merges[%zu]: merged token '%.*s' not in model.vocab", i,
                        (int)(cat.n > 64 ? 64 : cat.n), cat.v);
        }
        /* a repeated pair keeps the later rank, as HF's HashMap collect does */
        rc = tok_pmap_put(&t->merges, ia, ib, (uint32_t)i, im);
        if (rc) { free(cat.v); return FAIL(c, rc, "out of memory"); }
    }
    free(cat.v);
    return 0;
}

static int load_model(ctx *c, json_object *root, int32_t *max_id)
{
    dsq_tokenizer *t = c->t;
    json_object *model = get(root, "model");
    if (!model || !json_object_is_type(model, json_type_object))
        return FAIL(c, DSQ_ERR_FORMAT, "model: missing or not an object");
    const char *ty = type_of(model);
    if (ty && strcmp(ty, "BPE") != 0)
        return FAIL(c, DSQ_ERR_UNSUPPORTED, "model.type '%s': only BPE is supported", ty);
    if (!ty && !get(model, "merges"))
        return FAIL(c, DSQ_ERR_FORMAT, "model.type: missing");
    json_object *v = get(model, "dropout");
    if (v && !(json_object_is_type(v, json_type_double) || json_object_is_type(v, json_type_int)))
        return FAIL(c, DSQ_ERR_FORMAT, "model.dropout: expected a number or null");
    if (v && json_object_get_double(v) != 0.0)
        return FAIL(c, DSQ_ERR_UNSUPPORTED, "model.dropout: BPE dropout is not supported");
    static const char *const affix[] = { "continuing_subword_prefix", "end_of_word_suffix" };
    for (int i = 0; i < 2; i++) {
        v = get(model, affix[i]);
        if (v && !json_object_is_type(v, json_type_string))
            return FAIL(c, DSQ_ERR_FORMAT, "model.%s: expected a string or null", affix[i]);
        if (v && json_object_get_string_len(v) > 0)
            return FAIL(c, DSQ_ERR_UNSUPPORTED, "model.%s: not supported", affix[i]);
    }
    DSQ_TRY(get_bool(c, model, "fuse_unk", "model", 0, &t->fuse_unk));
    DSQ_TRY(get_bool(c, model, "byte_fallback", "model", 0, &t->byte_fallback));
    DSQ_TRY(get_bool(c, model, "ignore_merges", "model", 0, &t->ignore_merges));

    json_object *vocab = get(model, "vocab");
    if (!vocab || !json_object_is_type(vocab, json_type_object))
        return FAIL(c, DSQ_ERR_FORMAT, "model.vocab: missing or not an object");
    /* first pass: the largest id, so entries can be allocated once */
    {
        json_object_object_foreach(vocab, key, val) {
            int64_t x = json_object_is_type(val, json_type_int) ? json_object_get_int64(val) : -1;
            if (x < 0 || x >= TOK_MAX_ID) {
                int32_t id; /* format the path only on the error path */
                char where[96];
                snprintf(where, sizeof where, "model.vocab['%.40s']", key);
                return get_id(c, val, where, &id);
            }
            if (x > *max_id) *max_id = (int32_t)x;
        }
    }
    json_object *added = get(root, "added_tokens");
    if (added && json_object_is_type(added, json_type_array)) {
        for (size_t i = 0; i < json_object_array_length(added); i++) {
            json_object *id = get(json_object_array_get_idx(added, i), "id");
            if (id && json_object_is_type(id, json_type_int)) {
                int64_t x = json_object_get_int64(id);
                if (x >= 0 && x < TOK_MAX_ID && x > *max_id) *max_id = (int32_t)x;
            }
        }
    }
    t->n_ent = (size_t)(*max_id + 1);
    t->ent = calloc(t->n_ent ? t->n_ent : 1, sizeof *t->ent);
    size_t nv = (size_t)json_object_object_length(vocab);
    int rc = t->ent ? tok_smap_init(&t->by_piece, nv + 1024) : DSQ_ERR_NOMEM;
    if (!rc) rc = tok_smap_init(&t->by_bytes, nv);
    if (rc) return FAIL(c, rc, "out of memory");
    {
        json_object_object_foreach(vocab, key, val) {
            int32_t id = (int32_t)json_object_get_int64(val);
            if (c->t->ent[id].piece)
                return FAIL(c, DSQ_ERR_FORMAT, "model.vocab['%.40s']: duplicate id %d", key, id);
            DSQ_TRY(set_entry(c, id, key, strlen(key), 0, "model.vocab"));
        }
    }
    DSQ_TRY(load_merges(c, get(model, "merges")));
    v = get(model, "unk_token");
    if (v) {
        if (!json_object_is_type(v, json_type_string))
            return FAIL(c, DSQ_ERR_FORMAT, "model.unk_token: expected a string or null");
        t->unk = tok_smap_get(&t->by_piece, json_object_get_string(v), (size_t)json_object_get_string_len(v));
        if (t->unk < 0) return FAIL(c, DSQ_ERR_FORMAT, "model.unk_token: not in model.vocab");
    }
    /* initial symbols: one per byte, through the byte-level alphabet */
    for (int b = 0; b < 256; b++) {
        char u[4];
        size_t l = tok_utf8_encode(tok_byte_to_cp((uint8_t)b), u);
        t->byte_id[b] = tok_smap_get(&t->by_piece, u, l);
    }
    return 0;
}

/* ---- added tokens ------------------------------------------------------- */

static int load_added(ctx *c, json_object *root)
{
    dsq_tokenizer *t = c->t;
    json_object *arr = get(root, "added_tokens");
    if (!arr) return 0;
    if (!json_object_is_type(arr, json_type_array))
        return FAIL(c, DSQ_ERR_FORMAT, "added_tokens: expected an array");
    size_t n = json_object_array_length(arr);
    t->added = calloc(n ? n : 1, sizeof *t->added);
    if (!t->added) return FAIL(c, DSQ_ERR_NOMEM, "out of memory");
    tok_buf norm = { 0 };
    for (size_t i = 0; i < n; i++) {
        json_object *a = json_object_array_get_idx(arr, i);
        char where[64];
        snprintf(where, sizeof where, "added_tokens[%zu]", i);
        if (!a || !json_object_is_type(a, json_type_object))
            return FAIL(c, DSQ_ERR_FORMAT, "%s: expected an object", where);
        int32_t id;
        char w2[80];
        snprintf(w2, sizeof w2, "%s.id", where);
        DSQ_TRY(get_id(c, get(a, "id"), w2, &id));
        json_object *content = get(a, "content");
        if (!content || !json_object_is_type(content, json_type_string))
            return FAIL(c, DSQ_ERR_FORMAT, "%s.content: missing or not a string", where);
        const char *s = json_object_get_string(content);
        size_t sl = (size_t)json_object_get_string_len(content);
        tok_added *ad = &t->added[t->n_added];
        int special, lstrip, rstrip, single, normalized;
        DSQ_TRY(get_bool(c, a, "special", where, 0, &special));
        DSQ_TRY(get_bool(c, a, "lstrip", where, 0, &lstrip));
        DSQ_TRY(get_bool(c, a, "rstrip", where, 0, &rstrip));
        DSQ_TRY(get_bool(c, a, "single_word", where, 0, &single));
        /* HF default: normalized = !special */
        DSQ_TRY(get_bool(c, a, "normalized", where, !special, &normalized));
        /* HF re-derives added-token ids at load: content already in the
         * model vocabulary takes the vocabulary's id, whatever the file says */
        int32_t vid = tok_smap_get(&t->by_piece, s, sl);
        if (vid >= 0 && !t->ent[vid].added) id = vid;
        DSQ_TRY(set_entry(c, id, s, sl, 1, where));
        tok_entry *e = &t->ent[id];
        e->added = 1;
        e->special = (uint8_t)special;
        /* an added token decodes to its content unless every character is
         * in the byte-level alphabet (HF runs the ByteLevel decoder on it) */
        if (sl == 0) continue; /* HF ignores empty added tokens */
        const char *match = e->piece;
        size_t ml = sl;
        if (normalized && t->norm == TOK_NORM_NFC && tok_nfc_needed(s, sl)) {
            norm.n = 0;
            int rc = tok_nfc(s, sl, &norm);
            if (rc) { free(norm.v); return FAIL(c, rc, "out of memory"); }
            match = tok_arena_dup(&t->arena, norm.v, norm.n);
            ml = norm.n;
            if (!match) { free(norm.v); return FAIL(c, DSQ_ERR_NOMEM, "out of memory"); }
        }
        *ad = (tok_added){ match, ml, id, (uint8_t)special, (uint8_t)lstrip, (uint8_t)rstrip,
                           (uint8_t)single, (uint8_t)normalized };
        int rc = tok_trie_add(normalized ? &t->trie_norm : &t->trie_raw, match, ml, (int32_t)t->n_added);
        if (rc) { free(norm.v); return FAIL(c, rc, "out of memory"); }
        t->n_added++;
    }
    free(norm.v);
    return 0;
}

/* ---- normalizer ------------------------------------------------------------ */

static int load_normalizer(ctx *c, json_object *n, const char *where, int depth)
{
    if (!n) return 0;
    if (depth > 8) return FAIL(c, DSQ_ERR_UNSUPPORTED, "%s: nested too deeply", where);
    const char *ty = type_of(n);
    if (!ty) return FAIL(c, DSQ_ERR_FORMAT, "%s.type: missing", where);
    if (strcmp(ty, "Sequence") == 0) {
        json_object *list = get(n, "normalizers");
        if (!list || !json_object_is_type(list, json_type_array))
            return FAIL(c, DSQ_ERR_FORMAT, "%s.normalizers: missing or not an array", where);
        for (size_t i = 0; i < json_object_array_length(list); i++) {
            char w[128];
            snprintf(w, sizeof w, "%s.normalizers[%zu]", where, i);
            DSQ_TRY(load_normalizer(c, json_object_array_get_idx(list, i), w, depth + 1));
        }
        return 0;
    }
    if (strcmp(ty, "NFC") == 0) {
        c->t->norm = TOK_NORM_NFC;
        return 0;
    }
    return FAIL(c, DSQ_ERR_UNSUPPORTED, "%s: normalizer type '%s' is not supported", where, ty);
}

/* ---- pre-tokenizer ---------------------------------------------------------- */

/* HF ByteLevel's regex (GPT-2). */
static const char gpt2_regex[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static int regex_quote(const char *s, size_t n, tok_buf *out)
{
    /* \Q..\E breaks if the literal contains \E; escape byte by byte instead */
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch < 0x80 && !((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z'))) {
            char e[8];
            snprintf(e, sizeof e, "\\x{%x}", ch);
            DSQ_TRY(tok_buf_append(out, e, strlen(e)));
        } else {
            DSQ_TRY(tok_buf_append(out, s + i, 1));
        }
    }
    return 0;
}

/* tok_regex_compile's message, with the file named. */
static int compile_re(ctx *c, tok_regex *re, const char *pat, size_t len, const char *where)
{
    dsq_diag local;
    dsq_diag_clear(&local);
    int rc = tok_regex_compile(re, pat, len, where, &local);
    return rc ? FAIL(c, rc, "%s", local.msg) : 0;
}

static int add_pre(ctx *c, json_object *p, const char *where, int depth)
{
    dsq_tokenizer *t = c->t;
    if (depth > 8) return FAIL(c, DSQ_ERR_UNSUPPORTED, "%s: nested too deeply", where);
    const char *ty = type_of(p);
    if (!ty) return FAIL(c, DSQ_ERR_FORMAT, "%s.type: missing", where);
    if (strcmp(ty, "Sequence") == 0) {
        json_object *list = get(p, "pretokenizers");
        if (!list || !json_object_is_type(list, json_type_array))
            return FAIL(c, DSQ_ERR_FORMAT, "%s.pretokenizers: missing or not an array", where);
        for (size_t i = 0; i < json_object_array_length(list); i++) {
            char w[128];
            snprintf(w, sizeof w, "%s.pretokenizers[%zu]", where, i);
            DSQ_TRY(add_pre(c, json_object_array_get_idx(list, i), w, depth + 1));
        }
        return 0;
    }
    if (t->n_pre && t->pre[t->n_pre - 1].type == TOK_PRE_BYTELEVEL)
        return FAIL(c, DSQ_ERR_UNSUPPORTED, "%s: only a ByteLevel step may end the pre_tokenizer sequence", where);
    if (t->n_pre >= 64) return FAIL(c, DSQ_ERR_UNSUPPORTED, "%s: too many pre-tokenizers", where);
    tok_pre *np = realloc(t->pre, (t->n_pre + 1) * sizeof *t->pre);
    if (!np) return FAIL(c, DSQ_ERR_NOMEM, "out of memory");
    t->pre = np;
    tok_pre *pre = &t->pre[t->n_pre];
    memset(pre, 0, sizeof *pre);
    if (strcmp(ty, "ByteLevel") == 0) {
        pre->type = TOK_PRE_BYTELEVEL;
        /* HF defaults: add_prefix_space true, use_regex true */
        DSQ_TRY(get_bool(c, p, "add_prefix_space", where, 1, &pre->add_prefix_space));
        DSQ_TRY(get_bool(c, p, "use_regex", where, 1, &pre->use_regex));
        if (pre->use_regex) {
            pre->behavior = TOK_SPLIT_ISOLATED;
            DSQ_TRY(compile_re(c, &pre->re, gpt2_regex, sizeof gpt2_regex - 1, where));
        }
        t->n_pre++;
        return 0;
    }
    if (strcmp(ty, "Split") != 0)
        return FAIL(c, DSQ_ERR_UNSUPPORTED, "%s: pre_tokenizer type '%s' is not supported", where, ty);
    pre->type = TOK_PRE_SPLIT;
    json_object *beh = get(p, "behavior");
    static const char *const names[] = { "Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous" };
    if (!beh || !json_object_is_type(beh, json_type_string))
        return FAIL(c, DSQ_ERR_FORMAT, "%s.behavior: missing or not a string", where);
    int found = -1;
    for (int i = 0; i < 5; i++)
        if (strcmp(json_object_get_string(beh), names[i]) == 0) found = i;
    if (found < 0)
        return FAIL(c, DSQ_ERR_FORMAT, "%s.behavior: unknown '%.40s'", where, json_object_get_string(beh));
    pre->behavior = found;
    DSQ_TRY(get_bool(c, p, "invert", where, 0, &pre->invert));
    json_object *pat = get(p, "pattern");
    json_object *rx = get(pat, "Regex"), *str = get(pat, "String");
    if (rx && json_object_is_type(rx, json_type_string)) {
        DSQ_TRY(compile_re(c, &pre->re, json_object_get_string(rx), (size_t)json_object_get_string_len(rx),
                           where));
    } else if (str && json_object_is_type(str, json_type_string)) {
        tok_buf q = { 0 };
        int rc = regex_quote(json_object_get_string(str), (size_t)json_object_get_string_len(str), &q);
        if (!rc) rc = tok_buf_append(&q, "", 0);
        if (rc) { free(q.v); return FAIL(c, rc, "out of memory"); }
        /* an empty String pattern matches nothing: leave re.code NULL */
        if (q.n) rc = compile_re(c, &pre->re, q.v, q.n, where);
        free(q.v);
        if (rc) return rc;
    } else {
        return FAIL(c, DSQ_ERR_FORMAT, "%s.pattern: expected {\"Regex\": s} or {\"String\": s}", where);
    }
    t->n_pre++;
    return 0;
}

/* ---- post-processor and decoder --------------------------------------------- */

static int template_ids(ctx *c, json_object *pp, json_object *item, const char *where, tok_ids *out)
{
    json_object *st = get(item, "SpecialToken");
    json_object *name = get(st, "id");
    if (!name || !json_object_is_type(name, json_type_string))
        return FAIL(c, DSQ_ERR_FORMAT, "%s.SpecialToken.id: missing or not a string", where);
    json_object *spec = get(get(pp, "special_tokens"), json_object_get_string(name));
    json_object *ids = get(spec, "ids");
    if (!ids || !json_object_is_type(ids, json_type_array))
        return FAIL(c, DSQ_ERR_FORMAT, "post_processor.special_tokens['%.40s'].ids: missing",
                    json_object_get_string(name));
    for (size_t i = 0; i < json_object_array_length(ids); i++) {
        int32_t id;
        DSQ_TRY(get_id(c, json_object_array_get_idx(ids, i), "post_processor.special_tokens ids", &id));
        if ((size_t)id >= c->t->n_ent || !c->t->ent[id].piece)
            return FAIL(c, DSQ_ERR_FORMAT, "post_processor.special_tokens: id %d is not a token", id);
        if (tok_ids_push(out, id)) return FAIL(c, DSQ_ERR_NOMEM, "out of memory");
    }
    return 0;
}

static int load_post(ctx *c, json_object *pp, const char *where, int depth)
{
    dsq_tokenizer *t = c->t;
    if (!pp) return 0;
    if (depth > 8) return FAIL(c, DSQ_ERR_UNSUPPORTED, "%s: nested too deeply", where);
    const char *ty = type_of(pp);
    if (!ty) return FAIL(c, DSQ_ERR_FORMAT, "%s.type: missing", where);
    if (strcmp(ty, "ByteLevel") == 0) return 0; /* offsets only */
    if (strcmp(ty, "Sequence") == 0) {
        json_object *list = get(pp, "processors");
        if (!list || !json_object_is_type(list, json_type_array))
            return FAIL(c, DSQ_ERR_FORMAT, "%s.processors: missing or not an array", where);
        for (size_t i = 0; i < json_object_array_length(list); i++) {
            char w[128];
            snprintf(w, sizeof w, "%s.processors[%zu]", where, i);
            DSQ_TRY(load_post(c, json_object_array_get_idx(list, i), w, depth + 1));
        }
        return 0;
    }
    if (strcmp(ty, "TemplateProcessing") != 0)
        return FAIL(c, DSQ_ERR_UNSUPPORTED, "%s: post_processor type '%s' is not supported", where, ty);
    if (t->tmpl_pre || t->tmpl_post)
        return FAIL(c, DSQ_ERR_UNSUPPORTED, "%s: more than one TemplateProcessing", where);
    json_object *single = get(pp, "single");
    if (!single || !json_object_is_type(single, json_type_array))
        return FAIL(c, DSQ_ERR_FORMAT, "%s.single: missing or not an array", where);
    tok_ids pre = { 0 }, post = { 0 };
    int seen_a = 0, rc = 0;
    for (size_t i = 0; i < json_object_array_length(single) && !rc; i++) {
        json_object *item = json_object_array_get_idx(single, i);
        char w[128];
        snprintf(w, sizeof w, "%s.single[%zu]", where, i);
        if (get(item, "Sequence")) {
            json_object *sid = get(get(item, "Sequence"), "id");
            if (seen_a || !sid || !json_object_is_type(sid, json_type_string) ||
                strcmp(json_object_get_string(sid), "A") != 0)
                rc = FAIL(c, DSQ_ERR_FORMAT, "%s: expected one Sequence 'A'", w);
            seen_a = 1;
        } else if (get(item, "SpecialToken")) {
            rc = template_ids(c, pp, item, w, seen_a ? &post : &pre);
        } else {
            rc = FAIL(c, DSQ_ERR_FORMAT, "%s: expected SpecialToken or Sequence", w);
        }
    }
    if (!rc && !seen_a) rc = FAIL(c, DSQ_ERR_FORMAT, "%s.single: no Sequence 'A'", where);
    if (rc) { free(pre.v); free(post.v); return rc; }
    /* non-NULL arrays even when empty: "present" means a template exists */
    if (!pre.v && tok_ids_push(&pre, 0) == 0) pre.n = 0;
    if (!post.v && tok_ids_push(&post, 0) == 0) post.n = 0;
    t->tmpl_pre = pre.v; t->n_tmpl_pre = pre.n;
    t->tmpl_post = post.v; t->n_tmpl_post = post.n;
    if (!t->tmpl_pre || !t->tmpl_post) return FAIL(c, DSQ_ERR_NOMEM, "out of memory");
    return 0;
}

static int check_decoder(ctx *c, json_object *dec, const char *where, int depth)
{
    if (!dec) return FAIL(c, DSQ_ERR_UNSUPPORTED, "%s: missing; only the ByteLevel decoder is supported", where);
    if (depth > 8) return FAIL(c, DSQ_ERR_UNSUPPORTED, "%s: nested too deeply", where);
    const char *ty = type_of(dec);
    if (!ty) return FAIL(c, DSQ_ERR_FORMAT, "%s.type: missing", where);
    if (strcmp(ty, "ByteLevel") == 0) return 0;
    if (strcmp(ty, "Sequence") == 0) {
        json_object *list = get(dec, "decoders");
        if (!list || !json_object_is_type(list, json_type_array) || json_object_array_length(list) == 0)
            return FAIL(c, DSQ_ERR_FORMAT, "%s.decoders: missing or empty", where);
        for (size_t i = 0; i < json_object_array_length(list); i++) {
            char w[128];
            snprintf(w, sizeof w, "%s.decoders[%zu]", where, i);
            DSQ_TRY(check_decoder(c, json_object_array_get_idx(list, i), w, depth + 1));
        }
        return 0;
    }
    return FAIL(c, DSQ_ERR_UNSUPPORTED, "%s: decoder type '%s' is not supported", where, ty);
}

/* ---- tokenizer_config.json ------------------------------------------------- */

/* bos_token / eos_token: a string or an AddedToken object {"content": s}. */
static int config_token(ctx *c, json_object *cfg, const char *key, int32_t *out)
{
    json_object *v = get(cfg, key);
    if (!v) return 0;
    if (json_object_is_type(v, json_type_object)) v = get(v, "content");
    if (!v || !json_object_is_type(v, json_type_string))
        return FAIL(c, DSQ_ERR_FORMAT, "%s: expected a string or {\"content\": string}", key);
    int32_t id = tok_smap_get(&c->t->by_piece, json_object_get_string(v), (size_t)json_object_get_string_len(v));
    if (id < 0)
        return FAIL(c, DSQ_ERR_FORMAT, "%s: token '%.64s' is not in the vocabulary", key, json_object_get_string(v));
    *out = id;
    return 0;
}

static int load_config(dsq_tokenizer *t, const tok_text *src, dsq_diag *d)
{
    ctx c = { t, src->name, d };
    json_object *cfg = NULL;
    DSQ_TRY(parse_json(src->name, src->text, src->len, &cfg, d));
    int rc = 0;
    if (!json_object_is_type(cfg, json_type_object)) {
        rc = FAIL(&c, DSQ_ERR_FORMAT, "expected a json object");
        goto out;
    }
    if ((rc = config_token(&c, cfg, "bos_token", &t->bos))) goto out;
    if ((rc = config_token(&c, cfg, "eos_token", &t->eos))) goto out;
    /* LlamaTokenizerFast (DeepSeek) rebuilds its post-processor from
     * add_bos_token (default true) / add_eos_token (default false); other
     * classes only honour the keys when present (newer transformers). */
    json_object *cls = get(cfg, "tokenizer_class");
    int llama = cls && json_object_is_type(cls, json_type_string) &&
                strncmp(json_object_get_string(cls), "LlamaTokenizer", 14) == 0;
    json_object *ab = get(cfg, "add_bos_token"), *ae = get(cfg, "add_eos_token");
    if (llama || ab || ae) {
        if ((rc = get_bool(&c, cfg, "add_bos_token", "config", llama, &t->add_bos))) goto out;
        if ((rc = get_bool(&c, cfg, "add_eos_token", "config", 0, &t->add_eos))) goto out;
        /* config overrides TemplateProcessing */
        free(t->tmpl_pre); free(t->tmpl_post);
        t->tmpl_pre = t->tmpl_post = NULL;
        t->n_tmpl_pre = t->n_tmpl_post = 0;
    }
    /* transformers < 4.45 defaulted to true; we follow the newer default */
    rc = get_bool(&c, cfg, "clean_up_tokenization_spaces", "config", 0, &t->cleanup_spaces);
out:
    json_object_put(cfg);
    return rc;
}

/* ---- entry ---------------------------------------------------------------- */

/* File and memory loads both end here: one tokenizer.json text and an
 * optional tokenizer_config.json text (cfg NULL or cfg->text NULL: none). */
int tok_hf_load_text(dsq_tokenizer *t, const tok_text *json, const tok_text *cfg, dsq_diag *d)
{
    ctx c = { t, json->name, d };
    json_object *root = NULL;
    DSQ_TRY(parse_json(json->name, json->text, json->len, &root, d));
    int rc = 0;
    int32_t max_id = -1;
    if (!json_object_is_type(root, json_type_object)) {
        rc = FAIL(&c, DSQ_ERR_FORMAT, "expected a json object");
        goto out;
    }
    json_object *tr = get(root, "truncation"), *pad = get(root, "padding");
    if (tr || pad) {
        rc = FAIL(&c, DSQ_ERR_UNSUPPORTED, "%s: truncation/padding in tokenizer.json are not supported",
                  tr ? "truncation" : "padding");
        goto out;
    }
    if ((rc = load_normalizer(&c, get(root, "normalizer"), "normalizer", 0))) goto out;
    json_object *pre = get(root, "pre_tokenizer");
    if (pre && (rc = add_pre(&c, pre, "pre_tokenizer", 0))) goto out;
    if (!t->n_pre || t->pre[t->n_pre - 1].type != TOK_PRE_BYTELEVEL) {
        rc = FAIL(&c, DSQ_ERR_UNSUPPORTED, "pre_tokenizer: no ByteLevel step; only byte-level BPE is supported");
        goto out;
    }
    if ((rc = load_model(&c, root, &max_id))) goto out;
    if ((rc = load_added(&c, root))) goto out;
    if ((rc = load_post(&c, get(root, "post_processor"), "post_processor", 0))) goto out;
    if ((rc = check_decoder(&c, get(root, "decoder"), "decoder", 0))) goto out;
    for (int b = 0; b < 256; b++) {
        if (t->byte_id[b] < 0 && t->byte_fallback) {
            char name[8];
            snprintf(name, sizeof name, "<0x%02X>", b);
            t->byte_id[b] = tok_smap_get(&t->by_piece, name, 6);
        }
        if (t->byte_id[b] < 0 && t->unk < 0) {
            /* HF would silently drop such bytes; refuse instead */
            rc = FAIL(&c, DSQ_ERR_FORMAT, "model.vocab: byte 0x%02x has no token in the byte-level alphabet", b);
            goto out;
        }
    }
    /* without tokenizer_config.json, BOS/EOS come from the template */
    if (t->n_tmpl_pre) t->bos = t->tmpl_pre[0];
    if (t->n_tmpl_post) t->eos = t->tmpl_post[t->n_tmpl_post - 1];
    if (cfg && cfg->text && (rc = load_config(t, cfg, d))) goto out;
    if (t->bos >= 0) t->ent[t->bos].special = 1;
    if (t->eos >= 0) t->ent[t->eos].special = 1;
out:
    json_object_put(root);
    return rc;
}

int tok_hf_load(dsq_tokenizer *t, const char *json_path, const char *config_path, dsq_diag *d)
{
    char *jbuf = NULL, *cbuf = NULL;
    size_t jlen = 0, clen = 0;
    DSQ_TRY(dsq_read_file(json_path, TOK_JSON_MAX, &jbuf, &jlen, d));
    int rc = config_path ? dsq_read_file(config_path, TOK_JSON_MAX, &cbuf, &clen, d) : 0;
    if (rc == 0) {
        tok_text js = { jbuf, jlen, json_path }, cs = { cbuf, clen, config_path };
        rc = tok_hf_load_text(t, &js, config_path ? &cs : NULL, d);
    }
    free(jbuf);
    free(cbuf);
    return rc;
}
