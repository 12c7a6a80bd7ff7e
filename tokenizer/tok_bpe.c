/* tok_bpe.c - byte-level BPE of one pre-token, with a bounded word cache.
 *
 * Merging follows HF Word::merge_all: repeatedly apply the lowest-ranked
 * merge present, the leftmost one on ties. A min-heap of (rank, position)
 * with lazy invalidation makes a word of n bytes O(n log n); stale heap
 * entries are recognised because each pair has exactly one rank. */
#include "tok_internal.h"

#include <stdlib.h>
#include <string.h>

/* ---- cache ----------------------------------------------------------------- */

#define CACHE_SLOTS (1u << 16)
#define CACHE_BYTES ((size_t)24 << 20)

int tok_cache_init(tok_cache *c)
{
    memset(c, 0, sizeof *c);
    if (pthread_mutex_init(&c->mu, NULL)) return DSQ_ERR_INTERNAL;
    c->cap = CACHE_SLOTS;
    c->slots = calloc(c->cap, sizeof *c->slots);
    if (!c->slots) { pthread_mutex_destroy(&c->mu); return DSQ_ERR_NOMEM; }
    return 0;
}

void tok_cache_free(tok_cache *c)
{
    if (!c->slots) return;
    pthread_mutex_destroy(&c->mu);
    free(c->slots);
    free(c->data.v);
    memset(c, 0, sizeof *c);
}

/* Appends the cached ids to out: 1 hit, 0 miss, <0 error. */
static int cache_get(tok_cache *c, uint64_t h, const char *w, size_t n, tok_ids *out)
{
    int rc = 0;
    pthread_mutex_lock(&c->mu);
    size_t j = h & (c->cap - 1);
    while (c->slots[j].h) {
        const struct tok_cache_slot *s = &c->slots[j];
        if (s->h == h && s->klen == n && memcmp(c->data.v + s->koff, w, n) == 0) {
            rc = tok_ids_append(out, (const int32_t *)(const void *)(c->data.v + s->voff), s->vlen);
            if (rc == 0) rc = 1;
            break;
        }
        j = (j + 1) & (c->cap - 1);
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

static void cache_put(tok_cache *c, uint64_t h, const char *w, size_t n, const int32_t *ids, size_t k)
{
    pthread_mutex_lock(&c->mu);
    if ((c->n + 1) * 2 > c->cap || c->data.n + n + k * 4 + 8 > CACHE_BYTES) {
        /* full: start over (cheap, and the hot words come straight back) */
        memset(c->slots, 0, c->cap * sizeof *c->slots);
        c->n = 0;
        c->data.n = 0;
    }
    size_t j = h & (c->cap - 1);
    while (c->slots[j].h) {
        const struct tok_cache_slot *s = &c->slots[j];
        if (s->h == h && s->klen == n && memcmp(c->data.v + s->koff, w, n) == 0) goto done;
        j = (j + 1) & (c->cap - 1);
    }
    size_t koff = c->data.n;
    static const char pad[4] = { 0 };
    if (tok_buf_append(&c->data, w, n)) goto done;
    size_t voff = (c->data.n + 3) & ~(size_t)3; /* int32 alignment */
    if (tok_buf_append(&c->data, pad, voff - c->data.n)) goto done;
    if (tok_buf_append(&c->data, ids, k * sizeof *ids)) goto done;
    c->slots[j] = (struct tok_cache_slot){ h, (uint32_t)koff, (uint32_t)n, (uint32_t)voff, (uint32_t)k };
    c->n++;
done:
    pthread_mutex_unlock(&c->mu);
}

/* ---- merging --------------------------------------------------------------------- */

static inline void heap_push(uint64_t *h, size_t *n, uint64_t x)
{
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (h[p] <= x) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = x;
}

static inline uint64_t heap_pop(uint64_t *h, size_t *n)
{
    uint64_t top = h[0], x = h[--(*n)];
    size_t i = 0, m = *n;
    for (;;) {
        size_t l = 2 * i + 1;
        if (l >= m) break;
        size_t r = l + 1, c = (r < m && h[r] < h[l]) ? r : l;
        if (h[c] >= x) break;
        h[i] = h[c];
        i = c;
    }
    if (m) h[i] = x;
    return top;
}

#define STACK_SYMS 64

/* BPE of the byte string w[0..n) into ids appended to out. */
static int merge_word(const dsq_tokenizer *t, const char *w, size_t n, tok_ids *out)
{
    int32_t s_sym[STACK_SYMS], s_prev[STACK_SYMS], s_next[STACK_SYMS];
    uint64_t s_heap[STACK_SYMS * 3];
    int32_t *sym = s_sym, *prev = s_prev, *next = s_next;
    uint64_t *heap = s_heap;
    void *block = NULL;
    if (n > STACK_SYMS) {
        /* every merge pushes at most 2 entries: the heap holds < 3n */
        size_t bytes = n * (3 * sizeof(int32_t) + 3 * sizeof(uint64_t));
        block = malloc(bytes);
        if (!block) return DSQ_ERR_NOMEM;
        heap = block;
        sym = (int32_t *)(heap + 3 * n);
        prev = sym + n;
        next = prev + n;
    }
    /* initial symbols; bytes without a token become unk (fused if asked) or
     * are dropped, as HF does without byte_fallback */
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = t->byte_id[(uint8_t)w[i]];
        if (id < 0) {
            if (t->unk < 0) continue;
            if (t->fuse_unk && m > 0 && sym[m - 1] == t->unk) continue;
            id = t->unk;
        }
        sym[m++] = id;
    }
    size_t hn = 0;
    for (size_t i = 0; i < m; i++) {
        prev[i] = (int32_t)i - 1;
        next[i] = i + 1 < m ? (int32_t)i + 1 : -1;
        uint32_t r;
        int32_t nid;
        if (i + 1 < m && tok_pmap_get(&t->merges, sym[i], sym[i + 1], &r, &nid))
            heap_push(heap, &hn, ((uint64_t)r << 32) | i);
    }
    while (hn) {
        uint64_t top = heap_pop(heap, &hn);
        uint32_t rank = (uint32_t)(top >> 32), pos = (uint32_t)top;
        if (sym[pos] < 0) continue; /* merged away */
        int32_t q = next[pos];
        if (q < 0) continue;
        uint32_t r;
        int32_t nid;
        if (!tok_pmap_get(&t->merges, sym[pos], sym[q], &r, &nid) || r != rank) continue;
        sym[pos] = nid;
        sym[q] = -1;
        next[pos] = next[q];
        if (next[q] >= 0) prev[next[q]] = (int32_t)pos;
        int32_t p = prev[pos];
        if (p >= 0 && tok_pmap_get(&t->merges, sym[p], sym[pos], &r, &nid))
            heap_push(heap, &hn, ((uint64_t)r << 32) | (uint32_t)p);
        if (next[pos] >= 0 && tok_pmap_get(&t->merges, sym[pos], sym[next[pos]], &r, &nid))
            heap_push(heap, &hn, ((uint64_t)r << 32) | pos);
    }
    int rc = 0;
    for (int32_t i = m ? 0 : -1; i >= 0 && !rc; i = next[i]) rc = tok_ids_push(out, sym[i]);
    free(block);
    return rc;
}

int tok_bpe_word(const dsq_tokenizer *t, const char *w, size_t n, tok_ids *out)
{
    if (n == 0) return 0;
    if (t->ignore_merges) {
        int32_t id = tok_smap_get(&t->by_bytes, w, n);
        if (id >= 0) return tok_ids_push(out, id);
    }
    if (n == 1) {
        int32_t id = t->byte_id[(uint8_t)w[0]];
        if (id < 0) id = t->unk;
        return id >= 0 ? tok_ids_push(out, id) : 0;
    }
    tok_cache *c = (tok_cache *)&t->cache; /* internally synchronised */
    uint64_t h = 0;
    if (n <= TOK_CACHE_MAX_WORD) {
        h = tok_hash(w, n);
        int rc = cache_get(c, h, w, n, out);
        if (rc) return rc < 0 ? rc : 0;
    }
    size_t before = out->n;
    DSQ_TRY(merge_word(t, w, n, out));
    if (n <= TOK_CACHE_MAX_WORD) cache_put(c, h, w, n, out->v + before, out->n - before);
    return 0;
}
