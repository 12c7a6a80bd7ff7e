/* tok_util.c - arena, vectors, hash maps and UTF-8 helpers for the tokenizer. */
#include "tok_internal.h"

#include <stdlib.h>
#include <string.h>

/* ---- arena -------------------------------------------------------------- */

struct tok_arena_block {
    struct tok_arena_block *next;
    size_t used, cap;
    max_align_t data[];
};

#define TOK_ARENA_BLOCK (1u << 20)

void *tok_arena_alloc(tok_arena *a, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    struct tok_arena_block *b = a->head;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > TOK_ARENA_BLOCK ? n : TOK_ARENA_BLOCK;
        b = malloc(sizeof *b + cap);
        if (!b) return NULL;
        b->used = 0;
        b->cap = cap;
        b->next = a->head;
        a->head = b;
    }
    void *p = (char *)b->data + b->used;
    b->used += n;
    return p;
}

char *tok_arena_dup(tok_arena *a, const void *s, size_t n)
{
    char *p = tok_arena_alloc(a, n + 1);
    if (!p) return NULL;
    if (n) memcpy(p, s, n);
    p[n] = 0;
    return p;
}

void tok_arena_free(tok_arena *a)
{
    struct tok_arena_block *b = a->head;
    while (b) {
        struct tok_arena_block *nx = b->next;
        free(b);
        b = nx;
    }
    a->head = NULL;
}

/* ---- vectors ------------------------------------------------------------ */

int tok_ids_append(tok_ids *a, const int32_t *x, size_t n)
{
    if (a->cap - a->n < n) {
        size_t cap = a->cap ? a->cap : 64;
        while (cap - a->n < n) {
            if (cap > SIZE_MAX / 8) return DSQ_ERR_OVERFLOW;
            cap *= 2;
        }
        int32_t *v = realloc(a->v, cap * sizeof *v);
        if (!v) return DSQ_ERR_NOMEM;
        a->v = v;
        a->cap = cap;
    }
    if (n) memcpy(a->v + a->n, x, n * sizeof *x);
    a->n += n;
    return 0;
}

int tok_ids_push(tok_ids *a, int32_t x)
{
    if (a->n < a->cap) { a->v[a->n++] = x; return 0; }
    return tok_ids_append(a, &x, 1);
}

int tok_buf_append(tok_buf *b, const void *s, size_t n)
{
    /* always keep room for a terminating NUL */
    if (b->cap - b->n <= n) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap - b->n <= n) {
            if (cap > SIZE_MAX / 4) return DSQ_ERR_OVERFLOW;
            cap *= 2;
        }
        char *v = realloc(b->v, cap);
        if (!v) return DSQ_ERR_NOMEM;
        b->v = v;
        b->cap = cap;
    }
    if (n) memcpy(b->v + b->n, s, n);
    b->n += n;
    b->v[b->n] = 0;
    return 0;
}

/* ---- hashing ------------------------------------------------------------ */

static inline uint64_t mix64(uint64_t x)
{
    x ^= x >> 32;
    x *= 0xd6e8feb86659fd93ull;
    x ^= x >> 32;
    x *= 0xd6e8feb86659fd93ull;
    x ^= x >> 32;
    return x;
}

uint64_t tok_hash(const void *p, size_t n)
{
    const unsigned char *s = p;
    uint64_t h = 0x9e3779b97f4a7c15ull ^ (n * 0xff51afd7ed558ccdull);
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ mix64(w)) * 0x9fb21c651e98df25ull;
        s += 8;
        n -= 8;
    }
    uint64_t w = 0;
    if (n) memcpy(&w, s, n);
    h = (h ^ mix64(w ^ 0x1234567ull)) * 0x9fb21c651e98df25ull;
    return mix64(h) | 1; /* never 0: 0 marks an empty slot */
}

static size_t pow2_for(size_t expect)
{
    size_t cap = 16;
    while (cap < expect * 2 + 16) cap *= 2;
    return cap;
}

/* ---- string map --------------------------------------------------------- */

int tok_smap_init(tok_smap *m, size_t expect)
{
    m->cap = pow2_for(expect);
    m->n = 0;
    m->s = calloc(m->cap, sizeof *m->s);
    return m->s ? 0 : DSQ_ERR_NOMEM;
}

static int smap_grow(tok_smap *m)
{
    size_t cap = m->cap * 2;
    tok_smap_slot *s = calloc(cap, sizeof *s);
    if (!s) return DSQ_ERR_NOMEM;
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->s[i].h) continue;
        size_t j = m->s[i].h & (cap - 1);
        while (s[j].h) j = (j + 1) & (cap - 1);
        s[j] = m->s[i];
    }
    free(m->s);
    m->s = s;
    m->cap = cap;
    return 0;
}

int tok_smap_put(tok_smap *m, const char *k, size_t klen, int32_t val, int replace)
{
    if (klen > UINT32_MAX) return DSQ_ERR_OVERFLOW;
    if ((m->n + 1) * 2 > m->cap) DSQ_TRY(smap_grow(m));
    uint64_t h = tok_hash(k, klen);
    size_t j = h & (m->cap - 1);
    while (m->s[j].h) {
        tok_smap_slot *s = &m->s[j];
        if (s->h == h && s->klen == klen && memcmp(s->k, k, klen) == 0) {
            if (replace) s->val = val;
            return 0;
        }
        j = (j + 1) & (m->cap - 1);
    }
    m->s[j] = (tok_smap_slot){ h, k, (uint32_t)klen, val };
    m->n++;
    return 0;
}

int32_t tok_smap_get(const tok_smap *m, const char *k, size_t klen)
{
    if (!m->s) return -1;
    uint64_t h = tok_hash(k, klen);
    size_t j = h & (m->cap - 1);
    while (m->s[j].h) {
        const tok_smap_slot *s = &m->s[j];
        if (s->h == h && s->klen == klen && memcmp(s->k, k, klen) == 0) return s->val;
        j = (j + 1) & (m->cap - 1);
    }
    return -1;
}

void tok_smap_free(tok_smap *m)
{
    free(m->s);
    memset(m, 0, sizeof *m);
}

/* ---- pair map ------------------------------------------------------------ */

/* Key 0 would be pair (0,0); keys are stored +1-mixed so 0 stays "empty". */
#define PMAP_EMPTY UINT64_MAX

int tok_pmap_init(tok_pmap *m, size_t expect)
{
    m->cap = pow2_for(expect);
    m->n = 0;
    m->s = malloc(m->cap * sizeof *m->s);
    if (!m->s) return DSQ_ERR_NOMEM;
    for (size_t i = 0; i < m->cap; i++) m->s[i].key = PMAP_EMPTY;
    return 0;
}

static int pmap_grow(tok_pmap *m)
{
    size_t cap = m->cap * 2;
    tok_pmap_slot *s = malloc(cap * sizeof *s);
    if (!s) return DSQ_ERR_NOMEM;
    for (size_t i = 0; i < cap; i++) s[i].key = PMAP_EMPTY;
    for (size_t i = 0; i < m->cap; i++) {
        if (m->s[i].key == PMAP_EMPTY) continue;
        size_t j = mix64(m->s[i].key) & (cap - 1);
        while (s[j].key != PMAP_EMPTY) j = (j + 1) & (cap - 1);
        s[j] = m->s[i];
    }
    free(m->s);
    m->s = s;
    m->cap = cap;
    return 0;
}

int tok_pmap_put(tok_pmap *m, int32_t a, int32_t b, uint32_t rank, int32_t id)
{
    if ((m->n + 1) * 2 > m->cap) DSQ_TRY(pmap_grow(m));
    uint64_t key = tok_pmap_key(a, b);
    size_t j = mix64(key) & (m->cap - 1);
    while (m->s[j].key != PMAP_EMPTY) {
        if (m->s[j].key == key) {
            m->s[j].rank = rank;
            m->s[j].id = id;
            return 0;
        }
        j = (j + 1) & (m->cap - 1);
    }
    m->s[j] = (tok_pmap_slot){ key, rank, id };
    m->n++;
    return 0;
}

int tok_pmap_get(const tok_pmap *m, int32_t a, int32_t b, uint32_t *rank, int32_t *id)
{
    if (!m->s) return 0;
    uint64_t key = tok_pmap_key(a, b);
    size_t j = mix64(key) & (m->cap - 1);
    while (m->s[j].key != PMAP_EMPTY) {
        if (m->s[j].key == key) {
            *rank = m->s[j].rank;
            *id = m->s[j].id;
            return 1;
        }
        j = (j + 1) & (m->cap - 1);
    }
    return 0;
}

void tok_pmap_free(tok_pmap *m)
{
    free(m->s);
    memset(m, 0, sizeof *m);
}

/* ---- UTF-8 -------------------------------------------------------------- */

size_t tok_utf8_decode(const unsigned char *p, size_t n, uint32_t *cp)
{
    if (n == 0) return 0;
    unsigned c = p[0];
    if (c < 0x80) { *cp = c; return 1; }
    if (c < 0xC2) return 0;
    if (c < 0xE0) {
        if (n < 2 || (p[1] & 0xC0) != 0x80) return 0;
        *cp = ((c & 0x1Fu) << 6) | (p[1] & 0x3Fu);
        return 2;
    }
    if (c < 0xF0) {
        if (n < 2) return 0;
        unsigned lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
        if (p[1] < lo || p[1] > hi) return 0;
        if (n < 3 || (p[2] & 0xC0) != 0x80) return 0;
        *cp = ((c & 0x0Fu) << 12) | ((p[1] & 0x3Fu) << 6) | (p[2] & 0x3Fu);
        return 3;
    }
    if (c < 0xF5) {
        if (n < 2) return 0;
        unsigned lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
        if (p[1] < lo || p[1] > hi) return 0;
        if (n < 3 || (p[2] & 0xC0) != 0x80) return 0;
        if (n < 4 || (p[3] & 0xC0) != 0x80) return 0;
        *cp = ((c & 0x07u) << 18) | ((p[1] & 0x3Fu) << 12) | ((p[2] & 0x3Fu) << 6) | (p[3] & 0x3Fu);
        return 4;
    }
    return 0;
}

size_t tok_utf8_encode(uint32_t cp, char *out)
{
    unsigned char *o = (unsigned char *)out;
    if (cp < 0x80) { o[0] = (unsigned char)cp; return 1; }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xC0 | (cp >> 6));
        o[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | (cp >> 12));
        o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | (cp >> 18));
    o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

int tok_utf8_valid(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        /* ASCII fast path, 8 bytes at a time */
        while (i + 8 <= n) {
            uint64_t w;
            memcpy(&w, p + i, 8);
            if (w & 0x8080808080808080ull) break;
            i += 8;
        }
        if (i >= n) break;
        if (p[i] < 0x80) { i++; continue; }
        uint32_t cp;
        size_t k = tok_utf8_decode(p + i, n - i, &cp);
        if (!k) return 0;
        i += k;
    }
    return 1;
}

/* Length of the maximal prefix of a well-formed sequence at p (>= 1), for
 * an ill-formed one: the bytes one U+FFFD replaces (Unicode 3.9, "U+FFFD
 * substitution of maximal subparts", which Rust's from_utf8_lossy follows). */
static size_t maximal_subpart(const unsigned char *p, size_t n)
{
    unsigned c = p[0];
    size_t need;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c < 0xE0) need = 2;
    else if (c >= 0xE0 && c < 0xF0) { need = 3; if (c == 0xE0) lo = 0xA0; if (c == 0xED) hi = 0x9F; }
    else if (c >= 0xF0 && c < 0xF5) { need = 4; if (c == 0xF0) lo = 0x90; if (c == 0xF4) hi = 0x8F; }
    else return 1;
    size_t k = 1;
    if (k < n && p[k] >= lo && p[k] <= hi) k++;
    else return 1;
    while (k < need && k < n && (p[k] & 0xC0) == 0x80) k++;
    return k;
}

int tok_utf8_lossy(const char *s, size_t n, tok_buf *out)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0, run = 0;
    while (i < n) {
        uint32_t cp;
        size_t k = p[i] < 0x80 ? 1 : tok_utf8_decode(p + i, n - i, &cp);
        if (k) { i += k; continue; }
        DSQ_TRY(tok_buf_append(out, s + run, i - run));
        DSQ_TRY(tok_buf_append(out, "\xEF\xBF\xBD", 3));
        i += maximal_subpart(p + i, n - i);
        run = i;
    }
    return tok_buf_append(out, s + run, n - run);
}

/* ---- GPT-2 byte <-> unicode alphabet ----------------------------------------
 * bytes_to_unicode(): printable bytes ('!'..'~', 0xA1..0xAC, 0xAE..0xFF) map
 * to themselves, the other 68 bytes to U+0100 + k in byte order. */

static uint16_t b2cp[256];
static int16_t cp2b[0x100 + 68];
static pthread_once_t alphabet_once = PTHREAD_ONCE_INIT;

static void alphabet_init(void)
{
    unsigned k = 0;
    for (unsigned i = 0; i < sizeof cp2b / sizeof cp2b[0]; i++) cp2b[i] = -1;
    for (unsigned b = 0; b < 256; b++) {
        int printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        b2cp[b] = (uint16_t)(printable ? b : 0x100 + k++);
        cp2b[b2cp[b]] = (int16_t)b;
    }
}

uint32_t tok_byte_to_cp(uint8_t b)
{
    pthread_once(&alphabet_once, alphabet_init);
    return b2cp[b];
}

int tok_cp_to_byte(uint32_t cp)
{
    pthread_once(&alphabet_once, alphabet_init);
    return cp < sizeof cp2b / sizeof cp2b[0] ? cp2b[cp] : -1;
}
