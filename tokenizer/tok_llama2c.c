/* tok_llama2c.c - karpathy/llama2.c tokenizer.bin and its encode().
 *
 * File: int32 max_token_length, then until EOF per token: float32 score,
 * int32 len, len bytes (little-endian). Token strings are used as C strings,
 * as run.c does (sprintf "%s%s", strcmp lookups).
 *
 * encode() is run.c's: optional BOS (1); if the text is non-empty, the
 * vocabulary's " " token (dummy prefix); one token per UTF-8 code point
 * (or its bytes + 3 when the code point is not a token; at most 4 bytes
 * are gathered); then repeatedly merge the adjacent pair whose
 * concatenation is a token with the highest score (> -1e10), the leftmost
 * on ties; optional EOS (2). run.c rescans all pairs per merge (O(n^2));
 * we keep the same choice with a heap of (score, position) so whole
 * documents encode in O(n log n). Text stops at the first NUL byte, as
 * run.c's C string does. A string in the vocabulary twice resolves to its
 * lowest id (run.c's bsearch picks an arbitrary one). */
#include "tok_internal.h"

#include "dsq_file.h"
#include "dsq_mem.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define L2_MAX_FILE ((size_t)256 << 20)
#define L2_BOS 1
#define L2_EOS 2

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

int tok_l2_load(dsq_tokenizer *t, const char *path, dsq_diag *d)
{
    char *buf = NULL;
    size_t len = 0;
    DSQ_TRY(dsq_read_file(path, L2_MAX_FILE, &buf, &len, d));
    int rc = 0;
    if (len < 4) { rc = dsq_fail(d, DSQ_ERR_TRUNCATED, path, NULL, 0, "llama2.c tokenizer: no header"); goto out; }
    int32_t maxlen = (int32_t)dsq_load_u32le(buf);
    if (maxlen < 0) { rc = dsq_fail(d, DSQ_ERR_FORMAT, path, NULL, 0, "llama2.c tokenizer: negative max_token_length"); goto out; }
    t->max_token_length = maxlen;
    /* count the records, validating as we go */
    size_t n = 0, off = 4;
    while (off < len) {
        if (len - off < 8) { rc = dsq_fail(d, DSQ_ERR_TRUNCATED, path, NULL, (int64_t)off, "llama2.c tokenizer: token %zu header cut short", n); goto out; }
        int32_t l = (int32_t)dsq_load_u32le(buf + off + 4);
        if (l < 0) { rc = dsq_fail(d, DSQ_ERR_FORMAT, path, NULL, (int64_t)off + 4, "llama2.c tokenizer: token %zu has negative length %d", n, l); goto out; }
        if ((size_t)l > len - off - 8) { rc = dsq_fail(d, DSQ_ERR_TRUNCATED, path, NULL, (int64_t)off + 8, "llama2.c tokenizer: token %zu of %d bytes runs past the end", n, l); goto out; }
        off += 8 + (size_t)l;
        if (++n >= TOK_MAX_ID) { rc = dsq_fail(d, DSQ_ERR_FORMAT, path, NULL, (int64_t)off, "llama2.c tokenizer: too many tokens"); goto out; }
    }
    if (n < 3) { rc = dsq_fail(d, DSQ_ERR_FORMAT, path, NULL, (int64_t)off, "llama2.c tokenizer: %zu tokens; need <unk>, <s>, </s> at least", n); goto out; }
    t->n_ent = n;
    t->ent = calloc(n, sizeof *t->ent);
    t->scores = malloc(n * sizeof *t->scores);
    if (!t->ent || !t->scores || tok_smap_init(&t->l2_map, n) || tok_smap_init(&t->by_piece, n)) {
        rc = dsq_fail(d, DSQ_ERR_NOMEM, path, NULL, -1, "out of memory");
        goto out;
    }
    off = 4;
    for (size_t i = 0; i < n; i++) {
        t->scores[i] = dsq_bits_f32(dsq_load_u32le(buf + off));
        size_t l = dsq_load_u32le(buf + off + 4);
        const char *s = buf + off + 8;
        off += 8 + l;
        char *piece = tok_arena_dup(&t->arena, s, l);
        if (!piece) { rc = dsq_fail(d, DSQ_ERR_NOMEM, path, NULL, -1, "out of memory"); goto out; }
        size_t cl = strlen(piece); /* C-string semantics, as run.c */
        tok_entry *e = &t->ent[i];
        e->piece = piece;
        e->piece_len = (uint32_t)cl;
        e->bytes = piece;
        e->bytes_len = (uint32_t)cl;
        /* "<0xHH>" stands for one byte (run.c decode) */
        if (cl == 6 && memcmp(piece, "<0x", 3) == 0 && piece[5] == '>' && hexval(piece[3]) >= 0 && hexval(piece[4]) >= 0) {
            char *b = tok_arena_alloc(&t->arena, 2);
            if (!b) { rc = dsq_fail(d, DSQ_ERR_NOMEM, path, NULL, -1, "out of memory"); goto out; }
            b[0] = (char)(hexval(piece[3]) * 16 + hexval(piece[4]));
            b[1] = 0;
            e->bytes = b;
            e->bytes_len = 1;
        }
        if (tok_smap_put(&t->l2_map, piece, cl, (int32_t)i, 0) || tok_smap_put(&t->by_piece, piece, cl, (int32_t)i, 0)) {
            rc = dsq_fail(d, DSQ_ERR_NOMEM, path, NULL, -1, "out of memory");
            goto out;
        }
    }
    /* run.c sizes its merge buffer from max_token_length; we use the real
     * longest piece so a lying header cannot matter */
    t->max_token_length = 0;
    for (size_t i = 0; i < n; i++)
        if (t->ent[i].piece_len > (uint32_t)t->max_token_length) t->max_token_length = (int32_t)t->ent[i].piece_len;
    t->bos = L2_BOS;
    t->eos = L2_EOS;
    for (int i = 0; i < 3; i++) t->ent[i].special = 1;
    t->l2_space = tok_smap_get(&t->l2_map, " ", 1);
out:
    free(buf);
    return rc;
}

/* Score of the token that tokens a and b concatenate to; *id -1 when none
 * or when run.c would never pick it (score not > -1e10, NaN). */
static float pair_score(const dsq_tokenizer *t, int32_t a, int32_t b, tok_buf *tmp, int32_t *id)
{
    const tok_entry *x = &t->ent[a], *y = &t->ent[b];
    *id = -1;
    tmp->n = 0;
    if (tok_buf_append(tmp, x->piece, x->piece_len) || tok_buf_append(tmp, y->piece, y->piece_len)) return 0;
    int32_t k = tok_smap_get(&t->l2_map, tmp->v, tmp->n);
    if (k < 0) return 0;
    float s = t->scores[k];
    if (!(s > -1e10f)) return 0;
    *id = k;
    return s;
}

/* Min-heap key: higher score first, then lower position. */
static uint64_t heap_key(float score, uint32_t pos)
{
    uint32_t u = dsq_f32_bits(score);
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u); /* ascending order of score */
    return ((uint64_t)(~u) << 32) | pos;
}

static int heap_push(uint64_t **h, size_t *n, size_t *cap, uint64_t x)
{
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 256;
        uint64_t *v = realloc(*h, c * sizeof *v);
        if (!v) return DSQ_ERR_NOMEM;
        *h = v;
        *cap = c;
    }
    uint64_t *a = *h;
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (a[p] <= x) break;
        a[i] = a[p];
        i = p;
    }
    a[i] = x;
    return 0;
}

static uint64_t heap_pop(uint64_t *a, size_t *n)
{
    uint64_t top = a[0], x = a[--(*n)];
    size_t i = 0, m = *n;
    for (;;) {
        size_t l = 2 * i + 1;
        if (l >= m) break;
        size_t c = (l + 1 < m && a[l + 1] < a[l]) ? l + 1 : l;
        if (a[c] >= x) break;
        a[i] = a[c];
        i = c;
    }
    if (m) a[i] = x;
    return top;
}

int tok_l2_encode(const dsq_tokenizer *t, const char *text, size_t len, unsigned flags, tok_ids *out, dsq_diag *d)
{
    const char *nul = len ? memchr(text, 0, len) : NULL;
    if (nul) len = (size_t)(nul - text);
    if (len > INT32_MAX - 16)
        return dsq_fail(d, DSQ_ERR_OVERFLOW, NULL, NULL, -1, "text of %zu bytes is too long to encode at once", len);
    int bos = (flags & (DSQ_TOK_ADD_SPECIAL | DSQ_TOK_FORCE_BOS)) != 0;
    int eos = (flags & DSQ_TOK_FORCE_EOS) != 0;
    tok_ids seq = { 0 };
    tok_buf tmp = { 0 };
    uint64_t *heap = NULL;
    size_t hn = 0, hcap = 0;
    int32_t *prev = NULL, *next = NULL;
    int rc = 0;
    /* room for any two pieces: pair_score then never allocates */
    tmp.cap = 2 * (size_t)t->max_token_length + 2;
    tmp.v = malloc(tmp.cap);
    if (!tmp.v) rc = DSQ_ERR_NOMEM;
    if (!rc && bos) rc = tok_ids_push(&seq, L2_BOS);
    if (!rc && len && t->l2_space >= 0) rc = tok_ids_push(&seq, t->l2_space);
    /* one token per code point, or its bytes + 3 */
    const unsigned char *c = (const unsigned char *)text;
    size_t i = 0;
    while (!rc && i < len) {
        size_t k = 1;
        /* run.c: gather continuation bytes while fewer than 4 */
        while (i + k < len && (c[i + k] & 0xC0) == 0x80 && k < 4) k++;
        int32_t id = tok_smap_get(&t->l2_map, text + i, k);
        /* the lookup string is a C string: never holds a NUL, fine here */
        if (id >= 0) {
            rc = tok_ids_push(&seq, id);
        } else {
            for (size_t b = 0; b < k && !rc; b++) {
                int32_t bid = (int32_t)c[i + b] + 3;
                if ((size_t)bid >= t->n_ent) {
                    rc = dsq_fail(d, DSQ_ERR_FORMAT, NULL, NULL, (int64_t)(i + b),
                                  "llama2.c tokenizer has no byte token for 0x%02x", c[i + b]);
                    break;
                }
                rc = tok_ids_push(&seq, bid);
            }
        }
        i += k;
    }
    if (rc) goto out;
    size_t m = seq.n;
    prev = malloc((m ? m : 1) * sizeof *prev);
    next = malloc((m ? m : 1) * sizeof *next);
    if (!prev || !next) { rc = DSQ_ERR_NOMEM; goto out; }
    for (size_t j = 0; j < m && !rc; j++) {
        prev[j] = (int32_t)j - 1;
        next[j] = j + 1 < m ? (int32_t)j + 1 : -1;
        int32_t id = -1;
        float s = j + 1 < m ? pair_score(t, seq.v[j], seq.v[j + 1], &tmp, &id) : 0;
        if (j + 1 < m && id >= 0) rc = heap_push(&heap, &hn, &hcap, heap_key(s, (uint32_t)j));
    }
    while (!rc && hn) {
        uint64_t top = heap_pop(heap, &hn);
        uint32_t pos = (uint32_t)top;
        if (seq.v[pos] < 0 || next[pos] < 0) continue;
        int32_t q = next[pos], id;
        float s = pair_score(t, seq.v[pos], seq.v[q], &tmp, &id);
        /* stale entry: the pair changed since it was pushed */
        if (id < 0 || heap_key(s, pos) != top) continue;
        seq.v[pos] = id;
        seq.v[q] = -1;
        next[pos] = next[q];
        if (next[q] >= 0) prev[next[q]] = (int32_t)pos;
        int32_t p = prev[pos], nid;
        if (p >= 0) {
            s = pair_score(t, seq.v[p], seq.v[pos], &tmp, &nid);
            if (nid >= 0) rc = heap_push(&heap, &hn, &hcap, heap_key(s, (uint32_t)p));
        }
        if (!rc && next[pos] >= 0) {
            s = pair_score(t, seq.v[pos], seq.v[next[pos]], &tmp, &nid);
            if (nid >= 0) rc = heap_push(&heap, &hn, &hcap, heap_key(s, pos));
        }
    }
    for (int32_t j = m ? 0 : -1; !rc && j >= 0; j = next[j]) rc = tok_ids_push(out, seq.v[j]);
    if (!rc && eos) rc = tok_ids_push(out, L2_EOS);
out:
    free(seq.v);
    free(tmp.v);
    free(heap);
    free(prev);
    free(next);
    return rc;
}

int tok_l2_decode(const dsq_tokenizer *t, const int32_t *ids, size_t n, int skip_special, tok_buf *out)
{
    for (size_t i = 0; i < n; i++) {
        const tok_entry *e = &t->ent[ids[i]];
        if (skip_special && e->special) continue;
        const char *s = e->bytes;
        size_t l = e->bytes_len;
        /* SentencePiece drops the dummy-prefix space at the start and after
         * BOS (run.c decode does the latter) */
        if ((i == 0 || ids[i - 1] == L2_BOS) && l && s[0] == ' ' && e->bytes == e->piece) { s++; l--; }
        DSQ_TRY(tok_buf_append(out, s, l));
    }
    return 0;
}
