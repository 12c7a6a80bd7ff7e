/* tok_pretok.c - the HF encode pipeline up to BPE: added-token splitting,
 * normalization, pre-tokenization (Split / ByteLevel), then per-word BPE.
 *
 * Semantics follow huggingface/tokenizers (Rust), which runs its regexes on
 * Oniguruma (Ruby syntax); we run them on PCRE2 with UTF+UCP. Differences
 * we correct: Oniguruma's \s is [\t\n\v\f\r\x{85}\p{Z}] (PCRE2's lacks U+0085
 * and adds U+180E) and its \w is [\p{L}\p{M}\p{N}\p{Pc}] (PCRE2's lacks the
 * marks), so \s \S \w \W outside classes and \s \w inside classes are
 * spelled out; ^ and $ are line anchors in Ruby syntax (PCRE2_MULTILINE).
 * Still different: \S and \W inside a class, and \b (PCRE2's own \w). */
#include "tok_internal.h"

#include <stdlib.h>
#include <string.h>

/* ---- regex -------------------------------------------------------------- */

/* Oniguruma's classes, spelled out so PCRE2's own \s (which adds U+180E)
 * and \w (which lacks marks) do not leak in. */
#define ONIG_S "\\t\\n\\x{0B}\\f\\r\\x{85}\\p{Z}"
#define ONIG_W "\\p{L}\\p{M}\\p{N}\\p{Pc}"

static int rewrite_pattern(const char *p, size_t n, tok_buf *out)
{
    int in_class = 0, in_quote = 0;
    for (size_t i = 0; i < n; i++) {
        char ch = p[i];
        if (in_quote) {
            if (ch == '\\' && i + 1 < n && p[i + 1] == 'E') { in_quote = 0; DSQ_TRY(tok_buf_append(out, "\\E", 2)); i++; }
            else DSQ_TRY(tok_buf_append(out, &ch, 1));
            continue;
        }
        if (ch == '\\' && i + 1 < n) {
            char nx = p[i + 1];
            const char *rep = NULL;
            i++;
            if (nx == 'Q') { in_quote = 1; DSQ_TRY(tok_buf_append(out, "\\Q", 2)); continue; }
            if (!in_class) {
                if (nx == 's') rep = "[" ONIG_S "]";
                else if (nx == 'S') rep = "[^" ONIG_S "]";
                else if (nx == 'w') rep = "[" ONIG_W "]";
                else if (nx == 'W') rep = "[^" ONIG_W "]";
            } else {
                if (nx == 's') rep = ONIG_S;
                else if (nx == 'w') rep = ONIG_W;
            }
            if (rep) { DSQ_TRY(tok_buf_append(out, rep, strlen(rep))); continue; }
            char e[2] = { '\\', nx };
            DSQ_TRY(tok_buf_append(out, e, 2));
            continue;
        }
        if (!in_class && ch == '[') {
            in_class = 1;
            DSQ_TRY(tok_buf_append(out, "[", 1));
            /* a ']' right after '[' or '[^' is literal */
            if (i + 1 < n && p[i + 1] == '^') { DSQ_TRY(tok_buf_append(out, "^", 1)); i++; }
            if (i + 1 < n && p[i + 1] == ']') { DSQ_TRY(tok_buf_append(out, "]", 1)); i++; }
            continue;
        }
        if (in_class && ch == '[' && i + 1 < n && p[i + 1] == ':') {
            /* POSIX class [:name:] inside a class: copy through ":]" */
            const char *end = NULL;
            for (size_t k = i + 2; k + 1 < n; k++)
                if (p[k] == ':' && p[k + 1] == ']') { end = p + k + 2; break; }
            if (end) {
                DSQ_TRY(tok_buf_append(out, p + i, (size_t)(end - (p + i))));
                i = (size_t)(end - p) - 1;
                continue;
            }
        }
        if (in_class && ch == ']') in_class = 0;
        DSQ_TRY(tok_buf_append(out, &ch, 1));
    }
    return tok_buf_append(out, "", 0);
}

int tok_regex_compile(tok_regex *re, const char *pattern, size_t len, const char *what, dsq_diag *d)
{
    tok_buf pat = { 0 };
    int rc = rewrite_pattern(pattern, len, &pat);
    if (rc) { free(pat.v); return dsq_fail(d, rc, NULL, NULL, -1, "out of memory"); }
    int err = 0;
    PCRE2_SIZE off = 0;
    re->code = pcre2_compile((PCRE2_SPTR)pat.v, pat.n, PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE, &err, &off, NULL);
    free(pat.v);
    if (!re->code) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(err, msg, sizeof msg);
        return dsq_fail(d, DSQ_ERR_FORMAT, NULL, NULL, -1, "%s.pattern: bad regex at offset %zu: %s",
                        what, (size_t)off, (const char *)msg);
    }
    re->jit = pcre2_jit_compile(re->code, PCRE2_JIT_COMPLETE) == 0;
    return 0;
}

void tok_regex_free(tok_regex *re)
{
    pcre2_code_free(re->code);
    re->code = NULL;
}

/* ---- per-call state ------------------------------------------------------- */

typedef struct span { uint32_t s, e; uint8_t m; } span;
typedef struct { span *v; size_t n, cap; } spans;

#define MAX_LEVELS 66

typedef struct state {
    const dsq_tokenizer *t;
    pcre2_match_data *md;
    pcre2_match_context *mc;
    pcre2_jit_stack *js;
    spans lv[MAX_LEVELS];
    tok_buf prefix;      /* ByteLevel add_prefix_space copy */
    tok_ids *out;
    dsq_diag *d;
} state;

static int spans_push(spans *a, size_t s, size_t e, int m)
{
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 64;
        span *v = realloc(a->v, cap * sizeof *v);
        if (!v) return DSQ_ERR_NOMEM;
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = (span){ (uint32_t)s, (uint32_t)e, (uint8_t)m };
    return 0;
}

/* One search from 'from'; 1 with the match in *ms, *me, 0 none, <0 error. */
static int rx_search(state *st, const tok_regex *re, const char *s, size_t n, size_t from, size_t *ms, size_t *me)
{
    for (int attempt = 0; attempt < 2; attempt++) {
        int rc = pcre2_match(re->code, (PCRE2_SPTR)s, n, from, PCRE2_NO_UTF_CHECK, st->md, st->mc);
        if (rc >= 0) {
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(st->md);
            *ms = ov[0];
            *me = ov[1];
            return 1;
        }
        if (rc == PCRE2_ERROR_NOMATCH) return 0;
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT && !st->js) {
            st->js = pcre2_jit_stack_create(64 * 1024, 64 * 1024 * 1024, NULL);
            if (!st->js) return DSQ_ERR_NOMEM;
            pcre2_jit_stack_assign(st->mc, NULL, st->js);
            continue;
        }
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(rc, msg, sizeof msg);
        return dsq_fail(st->d, DSQ_ERR_UNSUPPORTED, NULL, NULL, (int64_t)from,
                        "pre-tokenizer regex failed: %s", (const char *)msg);
    }
    return DSQ_ERR_INTERNAL;
}

static size_t char_len(const char *s, size_t n, size_t i)
{
    if (i >= n) return 1;
    unsigned c = (unsigned char)s[i];
    size_t k = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    return i + k <= n ? k : n - i;
}

/* HF Pattern::find_matches over Oniguruma's find_iter: (span, is_match),
 * gaps included. An empty match right after the previous match is refused
 * and the search moves on one character. */
static int find_matches(state *st, const tok_regex *re, const char *s, size_t n, int invert, spans *out)
{
    out->n = 0;
    if (n == 0) return spans_push(out, 0, 0, 0);
    if (!re->code) return spans_push(out, 0, n, invert); /* empty String pattern */
    size_t prev = 0, from = 0, last_match_end = (size_t)-1;
    while (from <= n) {
        size_t ms = 0, me = 0;
        int rc = rx_search(st, re, s, n, from, &ms, &me);
        if (rc < 0) return rc;
        if (rc == 0) break;
        if (ms == me && last_match_end == me) {
            from += char_len(s, n, from);
            continue;
        }
        from = me;
        last_match_end = me;
        if (prev != ms) DSQ_TRY(spans_push(out, prev, ms, invert));
        DSQ_TRY(spans_push(out, ms, me, !invert));
        prev = me;
    }
    if (prev != n) DSQ_TRY(spans_push(out, prev, n, invert));
    return 0;
}

/* NormalizedString::split: turn (span, is_match) into the kept spans. */
static void apply_behavior(spans *a, int behavior)
{
    size_t w = 0;
    int prev_match = 0;
    switch (behavior) {
    case TOK_SPLIT_ISOLATED:
        for (size_t i = 0; i < a->n; i++) a->v[i].m = 0;
        return;
    case TOK_SPLIT_REMOVED:
        for (size_t i = 0; i < a->n; i++) if (!a->v[i].m) a->v[w++] = a->v[i];
        a->n = w;
        return;
    case TOK_SPLIT_CONTIGUOUS:
        for (size_t i = 0; i < a->n; i++) {
            int m = a->v[i].m;
            if (m == prev_match && w > 0) a->v[w - 1].e = a->v[i].e;
            else a->v[w++] = (span){ a->v[i].s, a->v[i].e, 0 };
            prev_match = m;
        }
        a->n = w;
        return;
    case TOK_SPLIT_MERGED_PREV:
        for (size_t i = 0; i < a->n; i++) {
            int m = a->v[i].m;
            if (m && !prev_match && w > 0) a->v[w - 1].e = a->v[i].e;
            else a->v[w++] = (span){ a->v[i].s, a->v[i].e, 0 };
            prev_match = m;
        }
        a->n = w;
        return;
    case TOK_SPLIT_MERGED_NEXT: {
        /* fold from the right, then the kept spans are in reverse order */
        size_t r = a->n;
        for (size_t k = a->n; k-- > 0;) {
            span sp = a->v[k];
            if (sp.m && !prev_match && r < a->n) a->v[r].s = sp.s;
            else a->v[--r] = (span){ sp.s, sp.e, 0 };
            prev_match = sp.m;
        }
        memmove(a->v, a->v + r, (a->n - r) * sizeof *a->v);
        a->n -= r;
        return;
    }
    }
}

/* ---- pre-tokenizer recursion ----------------------------------------------- */

static int pretok(state *st, size_t level, const char *s, size_t n);

static int split_with(state *st, size_t level, const tok_regex *re, int behavior, int invert,
                      const char *s, size_t n)
{
    spans *sp = &st->lv[level];
    DSQ_TRY(find_matches(st, re, s, n, invert, sp));
    apply_behavior(sp, behavior);
    /* recursion below uses deeper levels only, so sp stays valid */
    for (size_t i = 0; i < sp->n; i++) {
        span x = sp->v[i];
        if (x.e > x.s) DSQ_TRY(pretok(st, level + 1, s + x.s, x.e - x.s));
    }
    return 0;
}

static int pretok(state *st, size_t level, const char *s, size_t n)
{
    const dsq_tokenizer *t = st->t;
    if (level >= t->n_pre) return tok_bpe_word(t, s, n, st->out);
    const tok_pre *p = &t->pre[level];
    if (p->type == TOK_PRE_SPLIT) return split_with(st, level, &p->re, p->behavior, p->invert, s, n);
    /* ByteLevel (always last): prefix space, GPT-2 regex, then BPE */
    if (p->add_prefix_space && (n == 0 || s[0] != ' ')) {
        st->prefix.n = 0;
        DSQ_TRY(tok_buf_append(&st->prefix, " ", 1));
        DSQ_TRY(tok_buf_append(&st->prefix, s, n));
        s = st->prefix.v;
        n = st->prefix.n;
    }
    if (!p->use_regex) return n ? tok_bpe_word(t, s, n, st->out) : 0;
    return split_with(st, level, &p->re, TOK_SPLIT_ISOLATED, 0, s, n);
}

/* ---- added tokens ------------------------------------------------------------ */

int tok_trie_add(tok_trie *tr, const char *s, size_t n, int32_t token)
{
    if (!tr->nodes) {
        tr->cap = 256;
        tr->nodes = malloc(tr->cap * sizeof *tr->nodes);
        if (!tr->nodes) return DSQ_ERR_NOMEM;
        tr->nodes[0] = (tok_trie_node){ -1, -1, -1, 0 };
        tr->n = 1;
    }
    int32_t cur = 0;
    for (size_t i = 0; i < n; i++) {
        uint8_t b = (uint8_t)s[i];
        int32_t ch = tr->nodes[cur].child;
        while (ch >= 0 && tr->nodes[ch].byte != b) ch = tr->nodes[ch].sibling;
        if (ch < 0) {
            if (tr->n == tr->cap) {
                if (tr->cap > (size_t)INT32_MAX / 2) return DSQ_ERR_OVERFLOW;
                tok_trie_node *v = realloc(tr->nodes, tr->cap * 2 * sizeof *v);
                if (!v) return DSQ_ERR_NOMEM;
                tr->nodes = v;
                tr->cap *= 2;
            }
            ch = (int32_t)tr->n++;
            tr->nodes[ch] = (tok_trie_node){ -1, tr->nodes[cur].child, -1, b };
            tr->nodes[cur].child = ch;
        }
        cur = ch;
    }
    tr->nodes[cur].token = token; /* a repeated content: the later token wins */
    tr->first[(uint8_t)s[0]] = 1;
    tr->any = 1;
    return 0;
}

void tok_trie_free(tok_trie *tr)
{
    free(tr->nodes);
    memset(tr, 0, sizeof *tr);
}

/* Longest token starting at s[0..n), -1 if none; *len its length. */
static int32_t trie_longest(const tok_trie *tr, const char *s, size_t n, size_t *len)
{
    int32_t cur = 0, best = -1;
    for (size_t i = 0; i < n; i++) {
        int32_t ch = tr->nodes[cur].child;
        uint8_t b = (uint8_t)s[i];
        while (ch >= 0 && tr->nodes[ch].byte != b) ch = tr->nodes[ch].sibling;
        if (ch < 0) break;
        cur = ch;
        if (tr->nodes[cur].token >= 0) { best = tr->nodes[cur].token; *len = i + 1; }
    }
    return best;
}

/* White_Space, the Rust regex crate's \s (HF's lstrip/rstrip). */
static int is_ws(uint32_t c)
{
    return (c >= 9 && c <= 13) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

static pthread_once_t word_once = PTHREAD_ONCE_INIT;
static pcre2_code *word_re;
static void word_init(void)
{
    int err;
    PCRE2_SIZE off;
    word_re = pcre2_compile((PCRE2_SPTR) "^[\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\x{200C}\\x{200D}]", PCRE2_ZERO_TERMINATED,
                            PCRE2_UTF | PCRE2_UCP, &err, &off, NULL);
}

/* HF's single_word test is the Rust regex crate's \w (Unicode word
 * character: Alphabetic, marks, Nd, Pc, Join_Control) on the char at s[0..n). */
static int is_word_char(state *st, const char *s, size_t n)
{
    unsigned c = (unsigned char)s[0];
    if (c < 0x80) return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    pthread_once(&word_once, word_init);
    if (!word_re) return 0;
    return pcre2_match(word_re, (PCRE2_SPTR)s, n, 0, PCRE2_NO_UTF_CHECK, st->md, NULL) >= 0;
}

/* Start of the last character in s[0..n). */
static size_t last_char(const char *s, size_t n)
{
    size_t i = n - 1;
    while (i > 0 && ((unsigned char)s[i] & 0xC0) == 0x80) i--;
    return i;
}

typedef struct seg { size_t s, e; int32_t id; } seg;
typedef struct { seg *v; size_t n, cap; } segs;

static int segs_push(segs *a, size_t s, size_t e, int32_t id)
{
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 16;
        seg *v = realloc(a->v, cap * sizeof *v);
        if (!v) return DSQ_ERR_NOMEM;
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = (seg){ s, e, id };
    return 0;
}

/* AddedVocabulary::find_matches: leftmost-longest non-overlapping matches,
 * then single_word / lstrip / rstrip. Segments with id -1 are plain text. */
static int split_added(state *st, const tok_trie *tr, const char *s, size_t n, int parse_special, segs *out)
{
    const dsq_tokenizer *t = st->t;
    out->n = 0;
    size_t start_offset = 0, pos = 0;
    while (tr->any && pos < n) {
        size_t i = pos, len = 0;
        int32_t k = -1;
        for (; i < n; i++) {
            if (!tr->first[(uint8_t)s[i]]) continue;
            k = trie_longest(tr, s + i, n - i, &len);
            if (k >= 0) break;
        }
        if (k < 0) break;
        pos = i + len;
        const tok_added *a = &t->added[k];
        if (!parse_special && a->special) continue;
        size_t start = i, stop = i + len;
        if (a->single_word) {
            int start_space = start == 0 || !is_word_char(st, s + last_char(s, start), start - last_char(s, start));
            int stop_space = stop == n || !is_word_char(st, s + stop, char_len(s, n, stop));
            if (!start_space || !stop_space) continue;
        }
        if (a->lstrip) {
            size_t ns = start;
            while (ns > 0) {
                size_t b = last_char(s, ns);
                uint32_t cp;
                if (!tok_utf8_decode((const unsigned char *)s + b, ns - b, &cp) || !is_ws(cp)) break;
                ns = b;
            }
            start = ns > start_offset ? ns : start_offset;
        }
        if (a->rstrip) {
            while (stop < n) {
                uint32_t cp;
                size_t l = tok_utf8_decode((const unsigned char *)s + stop, n - stop, &cp);
                if (!l || !is_ws(cp)) break;
                stop += l;
            }
        }
        if (start < start_offset) start = start_offset;
        if (start_offset < start) DSQ_TRY(segs_push(out, start_offset, start, -1));
        DSQ_TRY(segs_push(out, start, stop, a->id));
        start_offset = stop;
        if (pos < stop) pos = stop;
    }
    if (start_offset < n) DSQ_TRY(segs_push(out, start_offset, n, -1));
    return 0;
}

/* ---- the pipeline -------------------------------------------------------------- */

static int encode_text(state *st, const char *s, size_t n, int parse_special, segs *tmp)
{
    const dsq_tokenizer *t = st->t;
    DSQ_TRY(split_added(st, &t->trie_norm, s, n, parse_special, tmp));
    for (size_t i = 0; i < tmp->n; i++) {
        seg g = tmp->v[i];
        if (g.id >= 0) DSQ_TRY(tok_ids_push(st->out, g.id));
        else if (g.e > g.s) DSQ_TRY(pretok(st, 0, s + g.s, g.e - g.s));
    }
    return 0;
}

int tok_hf_encode(const dsq_tokenizer *t, const char *text, size_t len, unsigned flags, tok_ids *out, dsq_diag *d)
{
    if (len > UINT32_MAX - 8)
        return dsq_fail(d, DSQ_ERR_OVERFLOW, NULL, NULL, -1, "text of %zu bytes is too long to encode at once", len);
    state st = { 0 };
    st.t = t;
    st.out = out;
    st.d = d;
    segs raw = { 0 }, tmp = { 0 };
    tok_buf norm = { 0 };
    int rc = 0;
    st.md = pcre2_match_data_create(1, NULL);
    st.mc = pcre2_match_context_create(NULL);
    if (!st.md || !st.mc) { rc = DSQ_ERR_NOMEM; goto out; }
    /* bound backtracking on hostile patterns */
    pcre2_set_match_limit(st.mc, 50u * 1000 * 1000);
    pcre2_set_depth_limit(st.mc, 1000u * 1000);

    int add = (flags & DSQ_TOK_ADD_SPECIAL) != 0;
    int parse_special = (flags & DSQ_TOK_PARSE_SPECIAL) != 0;
    int force_bos = (flags & DSQ_TOK_FORCE_BOS) && t->bos >= 0;
    int force_eos = (flags & DSQ_TOK_FORCE_EOS) && t->eos >= 0;
    if (force_bos) rc = tok_ids_push(out, t->bos);
    for (size_t k = 0; add && k < t->n_tmpl_pre && !rc; k++)
        if (!(k == 0 && force_bos && t->tmpl_pre[0] == t->bos)) rc = tok_ids_push(out, t->tmpl_pre[k]);
    if (!rc && add && t->add_bos && !force_bos && t->bos >= 0) rc = tok_ids_push(out, t->bos);
    if (rc) goto out;

    if ((rc = split_added(&st, &t->trie_raw, text, len, parse_special, &raw))) goto out;
    for (size_t i = 0; i < raw.n && !rc; i++) {
        seg g = raw.v[i];
        if (g.id >= 0) { rc = tok_ids_push(out, g.id); continue; }
        const char *s = text + g.s;
        size_t n = g.e - g.s;
        if (t->norm == TOK_NORM_NFC && tok_nfc_needed(s, n)) {
            norm.n = 0;
            if ((rc = tok_nfc(s, n, &norm))) break;
            if (norm.n > UINT32_MAX - 8) { rc = DSQ_ERR_OVERFLOW; break; }
            s = norm.v;
            n = norm.n;
        }
        rc = encode_text(&st, s, n, parse_special, &tmp);
    }
    if (rc) goto out;

    if (add) rc = tok_ids_append(out, t->tmpl_post, t->n_tmpl_post);
    if (!rc && add && t->add_eos && !force_eos && t->eos >= 0) rc = tok_ids_push(out, t->eos);
    if (!rc && force_eos && !(add && out->n && out->v[out->n - 1] == t->eos)) rc = tok_ids_push(out, t->eos);
out:
    for (size_t i = 0; i < MAX_LEVELS; i++) free(st.lv[i].v);
    free(st.prefix.v);
    free(raw.v);
    free(tmp.v);
    free(norm.v);
    pcre2_match_data_free(st.md);
    pcre2_match_context_free(st.mc);
    if (st.js) pcre2_jit_stack_free(st.js);
    if (rc == DSQ_ERR_NOMEM) return dsq_fail(d, rc, NULL, NULL, -1, "out of memory while encoding");
    return rc;
}
