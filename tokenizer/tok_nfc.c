/* tok_nfc.c - Unicode NFC (the Qwen2 normalizer), from the generated tables
 * in tok_nfc_data.c: canonical decomposition (Hangul algorithmically),
 * canonical ordering, then canonical composition as in the UAX #15 sample
 * code. Input must be valid UTF-8 (the encoder guarantees it). */
#include "tok_internal.h"

#include <stdlib.h>
#include <string.h>

#define SBASE 0xAC00u
#define LBASE 0x1100u
#define VBASE 0x1161u
#define TBASE 0x11A7u
#define LCOUNT 19u
#define VCOUNT 21u
#define TCOUNT 28u
#define NCOUNT (VCOUNT * TCOUNT)
#define SCOUNT (LCOUNT * NCOUNT)

static int in_ranges(const uint32_t (*r)[2], size_t n, uint32_t cp)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < r[mid][0]) hi = mid;
        else if (cp > r[mid][1]) lo = mid + 1;
        else return 1;
    }
    return 0;
}

static unsigned ccc_of(uint32_t cp)
{
    if (cp < 0x300) return 0;
    size_t lo = 0, hi = tok_nfc_ccc_n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < tok_nfc_ccc[mid][0]) hi = mid;
        else if (cp > tok_nfc_ccc[mid][1]) lo = mid + 1;
        else return tok_nfc_ccc[mid][2];
    }
    return 0;
}

int tok_nfc_needed(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        if (p[i] < 0xCC) { i += p[i] < 0x80 ? 1 : 2; continue; } /* below U+0300 */
        uint32_t cp;
        size_t k = tok_utf8_decode(p + i, n - i, &cp);
        if (!k) return 1;
        if (in_ranges(tok_nfc_qc, tok_nfc_qc_n, cp)) return 1;
        i += k;
    }
    return 0;
}

typedef struct { uint32_t *v; size_t n, cap; } cps;

static int cps_push(cps *a, uint32_t x)
{
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 256;
        uint32_t *v = realloc(a->v, cap * sizeof *v);
        if (!v) return DSQ_ERR_NOMEM;
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = x;
    return 0;
}

static int decompose(uint32_t cp, cps *out)
{
    if (cp >= SBASE && cp < SBASE + SCOUNT) {
        uint32_t si = cp - SBASE;
        DSQ_TRY(cps_push(out, LBASE + si / NCOUNT));
        DSQ_TRY(cps_push(out, VBASE + (si % NCOUNT) / TCOUNT));
        if (si % TCOUNT) DSQ_TRY(cps_push(out, TBASE + si % TCOUNT));
        return 0;
    }
    if (cp >= 0xC0) {
        size_t lo = 0, hi = tok_nfc_dec_n;
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (cp < tok_nfc_dec_idx[mid][0]) hi = mid;
            else if (cp > tok_nfc_dec_idx[mid][0]) lo = mid + 1;
            else {
                for (uint32_t k = 0; k < tok_nfc_dec_idx[mid][2]; k++)
                    DSQ_TRY(cps_push(out, tok_nfc_dec_cps[tok_nfc_dec_idx[mid][1] + k]));
                return 0;
            }
        }
    }
    return cps_push(out, cp);
}

/* Primary composite of (a, b), or 0. */
static uint32_t compose(uint32_t a, uint32_t b)
{
    if (a >= LBASE && a < LBASE + LCOUNT && b >= VBASE && b < VBASE + VCOUNT)
        return SBASE + ((a - LBASE) * VCOUNT + (b - VBASE)) * TCOUNT;
    if (a >= SBASE && a < SBASE + SCOUNT && (a - SBASE) % TCOUNT == 0 && b > TBASE && b < TBASE + TCOUNT)
        return a + (b - TBASE);
    size_t lo = 0, hi = tok_nfc_comp_n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        const uint32_t *e = tok_nfc_comp[mid];
        if (a < e[0] || (a == e[0] && b < e[1])) hi = mid;
        else if (a > e[0] || b > e[1]) lo = mid + 1;
        else return e[2];
    }
    return 0;
}

int tok_nfc(const char *s, size_t n, tok_buf *out)
{
    cps d = { 0 };
    int rc = 0;
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n && !rc;) {
        uint32_t cp;
        size_t k = tok_utf8_decode(p + i, n - i, &cp);
        if (!k) { cp = 0xFFFD; k = 1; }
        rc = decompose(cp, &d);
        i += k;
    }
    /* canonical ordering: stable insertion sort of each run of non-starters */
    for (size_t i = 1; i < d.n && !rc; i++) {
        unsigned c = ccc_of(d.v[i]);
        if (!c) continue;
        size_t j = i;
        uint32_t x = d.v[i];
        while (j > 0 && ccc_of(d.v[j - 1]) > c) { d.v[j] = d.v[j - 1]; j--; }
        d.v[j] = x;
    }
    /* composition (UAX #15 sample): compose into place */
    size_t w = 0;
    if (!rc && d.n) {
        size_t starter = 0;
        unsigned last = ccc_of(d.v[0]);
        if (last) last = 256;
        w = 1;
        for (size_t i = 1; i < d.n; i++) {
            uint32_t ch = d.v[i];
            unsigned c = ccc_of(ch);
            uint32_t comp = compose(d.v[starter], ch);
            if (comp && (last < c || last == 0)) {
                d.v[starter] = comp;
                continue;
            }
            if (c == 0) starter = w;
            last = c;
            d.v[w++] = ch;
        }
    }
    for (size_t i = 0; i < w && !rc; i++) {
        char u[4];
        rc = tok_buf_append(out, u, tok_utf8_encode(d.v[i], u));
    }
    if (!rc) rc = tok_buf_append(out, "", 0);
    free(d.v);
    return rc;
}
