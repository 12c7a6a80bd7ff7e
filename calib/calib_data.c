/* calib_data.c - calibration text -> token matrix (see calib_data.h). */
#include "calib_data.h"
#include "dsq_rand.h"
#include "dsq_file.h"

#include <json-c/json.h>

#define DSQ_STR_(x) #x
#define DSQ_STR(x) DSQ_STR_(x)
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

void dsq_calib_data_opts_init(dsq_calib_data_opts *o)
{
    memset(o, 0, sizeof *o);
    o->n_samples = DSQ_CALIB_SAMPLES_DEFAULT;
    o->seqlen = DSQ_CALIB_SEQLEN_DEFAULT;
}

void dsq_calib_data_release(dsq_calib_data *cd)
{
    if (!cd) return;
    free(cd->tokens);
    memset(cd, 0, sizeof *cd);
}

static int check_opts(const dsq_calib_data_opts *o, const char *name, size_t *need, dsq_diag *d)
{
    if (o->n_samples < 1 || o->seqlen < 2)
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, name, NULL, -1,
                        "calibration needs at least 1 sample of 2 tokens (got %d x %d)", o->n_samples, o->seqlen);
    uint64_t n = (uint64_t)o->n_samples * (uint64_t)o->seqlen;
    if (n > (1ull << 31))
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, name, NULL, -1, "%d samples x %d tokens is too many",
                        o->n_samples, o->seqlen);
    *need = (size_t)n;
    return DSQ_OK;
}

static int finish(dsq_calib_data *cd, const dsq_calib_data_opts *o, int n_samples)
{
    cd->n_samples = n_samples;
    cd->requested_samples = o->n_samples;
    cd->seqlen = o->seqlen;
    return dsq_sha256_buf(cd->tokens, (size_t)n_samples * (size_t)o->seqlen * sizeof(int32_t), cd->sha256);
}

int dsq_calib_data_from_ids(dsq_calib_data *cd, const int32_t *ids, size_t n, const dsq_calib_data_opts *o,
                            dsq_diag *d)
{
    memset(cd, 0, sizeof *cd);
    size_t need;
    DSQ_TRY(check_opts(o, NULL, &need, d));
    if (n < need || !ids)
        return dsq_fail(d, DSQ_ERR_DATA, NULL, NULL, -1, "calibration stream has %zu tokens, %d x %d need %zu", n,
                        o->n_samples, o->seqlen, need);
    cd->tokens = malloc(need * sizeof(int32_t));
    if (!cd->tokens) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    memcpy(cd->tokens, ids, need * sizeof(int32_t));
    cd->n_docs = cd->docs_used = 1;
    int rc = finish(cd, o, o->n_samples);
    if (rc < 0) dsq_calib_data_release(cd);
    return rc;
}

/* ---- documents ------------------------------------------------------- */

typedef struct span {
    const char *p;
    size_t n;
    size_t line;       /* 1-based line of a JSONL record, 0 for text */
} span;

typedef struct doclist {
    span *v;
    size_t n, cap;
} doclist;

static int push(doclist *l, const char *p, size_t n, size_t line)
{
    if (l->n == l->cap) {
        size_t nc = l->cap ? l->cap * 2 : 1024;
        span *nv = realloc(l->v, nc * sizeof *nv);
        if (!nv) return DSQ_ERR_NOMEM;
        l->v = nv;
        l->cap = nc;
    }
    l->v[l->n++] = (span){ p, n, line };
    return DSQ_OK;
}

static int is_blank_line(const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != ' ' && p[i] != '\t' && p[i] != '\r') return 0;
    return 1;
}

/* Plain text: paragraphs separated by blank lines. */
static int split_text(const char *buf, size_t len, doclist *l)
{
    size_t i = 0, start = 0;
    int in_doc = 0;
    while (i <= len) {
        size_t e = i;
        while (e < len && buf[e] != '\n') e++;
        int blank = is_blank_line(buf + i, e - i);
        if (blank && in_doc) {
            DSQ_TRY(push(l, buf + start, i - start, 0));
            in_doc = 0;
        } else if (!blank && !in_doc) {
            start = i;
            in_doc = 1;
        }
        i = e + 1;
    }
    if (in_doc) DSQ_TRY(push(l, buf + start, len - start, 0));
    return DSQ_OK;
}

/* Parse one JSONL line; *text / *tlen borrow from the returned object. */
static int jsonl_text(const char *line, size_t n, json_object **obj, const char **text, size_t *tlen)
{
    json_tokener *tk = json_tokener_new();
    if (!tk) return DSQ_ERR_NOMEM;
    *obj = json_tokener_parse_ex(tk, line, (int)n);
    enum json_tokener_error err = json_tokener_get_error(tk);
    size_t used = json_tokener_get_parse_end(tk);
    json_tokener_free(tk);
    if (!*obj || err != json_tokener_success) {
        json_object_put(*obj);
        *obj = NULL;
        return DSQ_ERR_JSON;
    }
    for (size_t i = used; i < n; i++)
        if (line[i] != ' ' && line[i] != '\t' && line[i] != '\r') {
            json_object_put(*obj);
            *obj = NULL;
            return DSQ_ERR_JSON;
        }
    json_object *t;
    if (!json_object_is_type(*obj, json_type_object) || !json_object_object_get_ex(*obj, "text", &t) ||
        !json_object_is_type(t, json_type_string)) {
        json_object_put(*obj);
        *obj = NULL;
        return DSQ_ERR_DATA;
    }
    *text = json_object_get_string(t);
    *tlen = (size_t)json_object_get_string_len(t);
    return DSQ_OK;
}

static int split_jsonl(const char *buf, size_t len, const char *path, doclist *l, dsq_diag *d)
{
    size_t i = 0, line = 0;
    while (i < len) {
        size_t e = i;
        while (e < len && buf[e] != '\n') e++;
        line++;
        if (!is_blank_line(buf + i, e - i)) {
            if (e - i > (size_t)INT32_MAX)
                return dsq_fail(d, DSQ_ERR_DATA, path, NULL, (int64_t)i, "line %zu is too long", line);
            json_object *obj = NULL;
            const char *t;
            size_t tn;
            int rc = jsonl_text(buf + i, e - i, &obj, &t, &tn);
            if (rc == DSQ_ERR_NOMEM) return dsq_fail(d, rc, path, NULL, -1, "out of memory");
            if (rc == DSQ_ERR_JSON)
                return dsq_fail(d, DSQ_ERR_DATA, path, NULL, (int64_t)i, "line %zu is not one JSON value", line);
            if (rc < 0)
                return dsq_fail(d, DSQ_ERR_DATA, path, NULL, (int64_t)i,
                                "line %zu is not an object with a string field \"text\"", line);
            int nonempty = tn > 0 && !is_blank_line(t, tn);
            json_object_put(obj);
            if (nonempty && push(l, buf + i, e - i, line) < 0)
                return dsq_fail(d, DSQ_ERR_NOMEM, path, NULL, -1, "out of memory");
        }
        i = e + 1;
    }
    return DSQ_OK;
}

/* ---- sampling -------------------------------------------------------- */

typedef struct idbuf {
    int32_t *v;
    size_t n, need;
} idbuf;

static int take(idbuf *b, const dsq_tokenizer *tok, const char *text, size_t n, const char *name, size_t line,
                dsq_diag *d)
{
    int32_t *ids = NULL;
    size_t k = 0;
    /* Only the tokens still needed are kept, so tokenize a prefix of a long
     * document (memory stays bounded by the tokens needed, not by the
     * document's size): cut after a
     * space or line end, grow 4x until it yields the tokens needed plus a
     * margin (tokens far from the cut do not depend on it), so the result
     * is the same as tokenizing the whole document. */
    size_t rem = b->need - b->n, margin = 64;
    size_t use = rem < SIZE_MAX / 64 ? (rem + margin) * 16 : n;
    if (use < (64u << 10)) use = 64u << 10;
    int rc;
    for (;;) {
        size_t cut = use >= n ? n : use;
        if (cut < n) {
            while (cut > 0 && text[cut - 1] != ' ' && text[cut - 1] != '\n') cut--;
            if (cut == 0) {            /* no break at all: cut at a UTF-8 boundary */
                cut = use;
                while (cut > 1 && ((unsigned char)text[cut] & 0xC0) == 0x80) cut--;
            }
        }
        rc = dsq_tokenizer_encode(tok, text, cut, 1, &ids, &k, d);
        if (rc < 0 || cut == n || k >= rem + margin) break;
        free(ids);
        ids = NULL;
        use = use > n / 4 ? n : use * 4;
    }
    if (rc < 0) {
        free(ids);
        if (line) return dsq_fail(d, rc, name, NULL, -1, "cannot tokenize line %zu", line);
        return dsq_fail(d, rc, name, NULL, -1, "cannot tokenize calibration text");
    }
    size_t c = b->need - b->n < k ? b->need - b->n : k;
    memcpy(b->v + b->n, ids, c * sizeof *ids);
    b->n += c;
    free(ids);
    return DSQ_OK;
}

static int sample_docs(dsq_calib_data *cd, const span *docs, size_t ndocs, int jsonl, const dsq_tokenizer *tok,
                       const dsq_calib_data_opts *o, const char *name, dsq_diag *d)
{
    size_t need;
    DSQ_TRY(check_opts(o, name, &need, d));
    if (!tok) return dsq_fail(d, DSQ_ERR_INVALID_ARG, name, NULL, -1, "no tokenizer for calibration text");
    if (ndocs == 0) return dsq_fail(d, DSQ_ERR_DATA, name, NULL, -1, "calibration data holds no text");
    size_t *order = malloc(ndocs * sizeof *order);
    idbuf b = { malloc(need * sizeof(int32_t)), 0, need };
    if (!order || !b.v) {
        free(order);
        free(b.v);
        return dsq_fail(d, DSQ_ERR_NOMEM, name, NULL, -1, "out of memory");
    }
    for (size_t i = 0; i < ndocs; i++) order[i] = i;
    uint64_t st = o->seed ^ 0x63616c6962726174ull; /* "calibrat" */
    for (size_t i = ndocs - 1; i > 0; i--) {
        size_t j = (size_t)(dsq_splitmix64(&st) % (uint64_t)(i + 1));
        size_t t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    int rc = DSQ_OK;
    size_t used = 0;
    for (size_t k = 0; k < ndocs && b.n < need && rc == DSQ_OK; k++) {
        const span *s = &docs[order[k]];
        used++;
        if (!jsonl) {
            rc = take(&b, tok, s->p, s->n, name, 0, d);
            continue;
        }
        json_object *obj = NULL;
        const char *t;
        size_t tn;
        rc = jsonl_text(s->p, s->n, &obj, &t, &tn);
        if (rc == DSQ_OK) rc = take(&b, tok, t, tn, name, s->line, d);
        else rc = dsq_fail(d, DSQ_ERR_INTERNAL, name, NULL, -1, "line %zu changed while reading", s->line);
        json_object_put(obj);
    }
    free(order);
    int n_samples = o->n_samples;
    size_t fit = b.n / (size_t)o->seqlen;   /* whole samples the data fills */
    size_t floor_tok = need < DSQ_CALIB_MIN_TOKENS ? need : DSQ_CALIB_MIN_TOKENS;
    if (rc == DSQ_OK && b.n < need && o->take_available && fit >= 1 && fit * (size_t)o->seqlen >= floor_tok) {
        n_samples = (int)fit;               /* the data is short: take what it has */
    } else if (rc == DSQ_OK && b.n < need) {
        rc = dsq_fail(d, DSQ_ERR_DATA, name, NULL, -1,
                      "calibration data has %zu tokens in %zu documents: enough for %zu samples of %d, "
                      "but %d samples x %d tokens need %zu%s (use fewer --calib-samples, a shorter "
                      "--calib-seqlen or more text)",
                      b.n, ndocs, fit, o->seqlen, o->n_samples, o->seqlen, need,
                      o->take_available ? ", and fewer than the floor of " DSQ_STR(DSQ_CALIB_MIN_TOKENS)
                                          " whole-sample tokens is too little to calibrate" : "");
    }
    if (rc < 0) {
        free(b.v);
        return rc;
    }
    memset(cd, 0, sizeof *cd);
    cd->tokens = b.v;
    cd->n_docs = ndocs;
    cd->docs_used = used;
    rc = finish(cd, o, n_samples);
    if (rc < 0) dsq_calib_data_release(cd);
    return rc;
}

int dsq_calib_data_from_docs(dsq_calib_data *cd, const char *const *docs, const size_t *lens, size_t ndocs,
                             const dsq_tokenizer *tok, const dsq_calib_data_opts *o, const char *name,
                             dsq_diag *d)
{
    memset(cd, 0, sizeof *cd);
    doclist l = { 0 };
    for (size_t i = 0; i < ndocs; i++)
        if (lens[i] > 0 && !is_blank_line(docs[i], lens[i]) && push(&l, docs[i], lens[i], 0) < 0) {
            free(l.v);
            return dsq_fail(d, DSQ_ERR_NOMEM, name, NULL, -1, "out of memory");
        }
    int rc = sample_docs(cd, l.v, l.n, 0, tok, o, name, d);
    free(l.v);
    return rc;
}

static int ends_with(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcmp(s + a - b, suf) == 0;
}

int dsq_calib_data_load(dsq_calib_data *cd, const char *path, const dsq_tokenizer *tok,
                        const dsq_calib_data_opts *o, dsq_diag *d)
{
    memset(cd, 0, sizeof *cd);
    size_t need;
    DSQ_TRY(check_opts(o, path, &need, d));
    dsq_map map;
    DSQ_TRY(dsq_map_open(&map, path, d));
    const char *buf = (const char *)map.data;
    size_t len = (size_t)map.size;
    int rc = DSQ_OK;
    if (len == 0 || is_blank_line(buf, len)) rc = dsq_fail(d, DSQ_ERR_DATA, path, NULL, -1, "calibration file is empty");
    const char *nul = rc == DSQ_OK ? memchr(buf, 0, len) : NULL;
    if (nul)
        rc = dsq_fail(d, DSQ_ERR_DATA, path, NULL, (int64_t)(nul - buf),
                      "calibration file has a NUL byte: binary data, not text or JSONL");
    int jsonl = o->format == DSQ_CALIB_FMT_JSONL;
    if (rc == DSQ_OK && o->format == DSQ_CALIB_FMT_AUTO) {
        size_t i = 0;
        while (i < len && (buf[i] == ' ' || buf[i] == '\t' || buf[i] == '\r' || buf[i] == '\n')) i++;
        jsonl = ends_with(path, ".jsonl") || ends_with(path, ".json") || (i < len && buf[i] == '{');
    }
    doclist l = { 0 };
    if (rc == DSQ_OK) {
        if (jsonl) rc = split_jsonl(buf, len, path, &l, d);
        else if (split_text(buf, len, &l) < 0) rc = dsq_fail(d, DSQ_ERR_NOMEM, path, NULL, -1, "out of memory");
    }
    if (rc == DSQ_OK && l.n == 0)
        rc = dsq_fail(d, DSQ_ERR_DATA, path, NULL, -1, jsonl ? "no line has a non-empty \"text\"" : "no text");
    if (rc == DSQ_OK) rc = sample_docs(cd, l.v, l.n, jsonl, tok, o, path, d);
    free(l.v);
    dsq_map_close(&map);
    return rc;
}
