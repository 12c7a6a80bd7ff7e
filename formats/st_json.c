/* st_json.c - strict json-c parsing plus a second walk over the (already
 * valid) text that json-c cannot do for us: duplicate keys and byte offsets.
 *
 * Why a second walk: safetensors forbids duplicate keys, and json-c keeps
 * only the last value of a repeated key without telling. The walk runs only
 * after json-c accepted the text, so it may assume well-formed JSON; it is
 * still bounds checked everywhere (never trust an assumption with hostile
 * bytes). Recursion depth is bounded by json-c's own depth limit (32). */
#include "st_internal.h"

#include <stdlib.h>
#include <string.h>

struct walk {
    const char *s;
    size_t n, i;
    char *bad_key;
    size_t bad_off;
    int depth;
};

static int is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static void skip_ws(struct walk *w)
{
    while (w->i < w->n && is_ws(w->s[w->i])) w->i++;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int read_u4(struct walk *w, size_t at, unsigned *out)
{
    if (at + 4 > w->n) return -1;
    unsigned v = 0;
    for (int k = 0; k < 4; k++) {
        int h = hexval(w->s[at + (size_t)k]);
        if (h < 0) return -1;
        v = v << 4 | (unsigned)h;
    }
    *out = v;
    return 0;
}

static size_t put_utf8(char *o, unsigned cp)
{
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xc0 | cp >> 6); o[1] = (char)(0x80 | (cp & 0x3f)); return 2; }
    if (cp < 0x10000) {
        o[0] = (char)(0xe0 | cp >> 12); o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        o[2] = (char)(0x80 | (cp & 0x3f)); return 3;
    }
    o[0] = (char)(0xf0 | cp >> 18); o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3f)); o[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* String at w->i (a '"'). With out != NULL, unescape into a malloc'd
 * string. Returns 0, -1 malformed / NUL / lone surrogate, -2 no memory. */
static int walk_string(struct walk *w, char **out)
{
    size_t start = ++w->i, end = start;
    int esc = 0;
    while (end < w->n && w->s[end] != '"') {
        if (w->s[end] == '\\') { esc = 1; end++; }
        end++;
    }
    if (end >= w->n) return -1;
    w->i = end + 1;
    if (!out) return 0;
    /* unescaped text is never longer than the escaped text */
    char *o = malloc(end - start + 1);
    if (!o) return -2;
    size_t k = 0;
    if (!esc) {
        memcpy(o, w->s + start, end - start);
        k = end - start;
    } else {
        for (size_t j = start; j < end; j++) {
            char c = w->s[j];
            if (c != '\\') { o[k++] = c; continue; }
            if (++j >= end) goto bad;
            switch (w->s[j]) {
            case '"': o[k++] = '"'; break;
            case '\\': o[k++] = '\\'; break;
            case '/': o[k++] = '/'; break;
            case 'b': o[k++] = '\b'; break;
            case 'f': o[k++] = '\f'; break;
            case 'n': o[k++] = '\n'; break;
            case 'r': o[k++] = '\r'; break;
            case 't': o[k++] = '\t'; break;
            case 'u': {
                unsigned cp, lo;
                if (read_u4(w, j + 1, &cp) < 0 || j + 5 > end) goto bad;
                j += 4;
                if (cp >= 0xdc00 && cp <= 0xdfff) goto bad;       /* lone low */
                if (cp >= 0xd800 && cp <= 0xdbff) {
                    if (j + 6 >= end + 0 || w->s[j + 1] != '\\' || w->s[j + 2] != 'u' ||
                        read_u4(w, j + 3, &lo) < 0 || lo < 0xdc00 || lo > 0xdfff)
                        goto bad;
                    j += 6;
                    cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                }
                if (cp == 0) goto bad;
                /* \uXXXX is 6 bytes escaped, at most 3 bytes unescaped;
                 * a surrogate pair is 12 escaped, 4 unescaped */
                k += put_utf8(o + k, cp);
                break;
            }
            default: goto bad;
            }
        }
    }
    o[k] = 0;
    if (memchr(o, 0, k)) goto bad;   /* raw NUL never passes json-c, but be sure */
    *out = o;
    return 0;
bad:
    free(o);
    return -1;
}

static int key_cmp(const void *a, const void *b)
{
    return strcmp(((const struct st_key *)a)->key, ((const struct st_key *)b)->key);
}

void st_keys_free(struct st_key *keys, size_t n)
{
    if (!keys) return;
    for (size_t i = 0; i < n; i++) free(keys[i].key);
    free(keys);
}

static int walk_value(struct walk *w, struct st_key **keep, size_t *nkeep);

static int walk_object(struct walk *w, struct st_key **keep, size_t *nkeep)
{
    struct st_key *keys = NULL;
    size_t n = 0, cap = 0;
    int rc = DSQ_OK;
    w->i++;                                  /* '{' */
    if (++w->depth > 64) { rc = DSQ_ERR_JSON; goto out; }
    for (;;) {
        skip_ws(w);
        if (w->i >= w->n) { rc = DSQ_ERR_JSON; goto out; }
        if (w->s[w->i] == '}') { w->i++; break; }
        if (w->s[w->i] == ',') { w->i++; continue; }
        if (w->s[w->i] != '"') { rc = DSQ_ERR_JSON; goto out; }
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 16;
            struct st_key *nk = realloc(keys, nc * sizeof *nk);
            if (!nk) { rc = DSQ_ERR_NOMEM; goto out; }
            keys = nk; cap = nc;
        }
        size_t off = w->i;
        char *k = NULL;
        int r = walk_string(w, &k);
        if (r == -2) { rc = DSQ_ERR_NOMEM; goto out; }
        if (r < 0) { w->bad_off = off; rc = DSQ_ERR_FORMAT; goto out; }
        keys[n].key = k; keys[n].off = off; n++;
        skip_ws(w);
        if (w->i >= w->n || w->s[w->i] != ':') { rc = DSQ_ERR_JSON; goto out; }
        w->i++;
        rc = walk_value(w, NULL, NULL);
        if (rc < 0) goto out;
    }
    w->depth--;
    if (n > 1) {
        qsort(keys, n, sizeof *keys, key_cmp);
        for (size_t j = 1; j < n; j++) {
            if (strcmp(keys[j - 1].key, keys[j].key) == 0) {
                /* report the later occurrence in the text */
                size_t a = keys[j - 1].off, b = keys[j].off;
                w->bad_off = a > b ? a : b;
                w->bad_key = strdup(keys[j].key);
                rc = DSQ_ERR_FORMAT;
                goto out;
            }
        }
    }
    if (keep) { *keep = keys; *nkeep = n; return DSQ_OK; }
out:
    st_keys_free(keys, n);
    return rc;
}

static int walk_value(struct walk *w, struct st_key **keep, size_t *nkeep)
{
    skip_ws(w);
    if (w->i >= w->n) return DSQ_ERR_JSON;
    char c = w->s[w->i];
    if (c == '{') return walk_object(w, keep, nkeep);
    if (c == '[') {
        w->i++;
        if (++w->depth > 64) return DSQ_ERR_JSON;
        for (;;) {
            skip_ws(w);
            if (w->i >= w->n) return DSQ_ERR_JSON;
            if (w->s[w->i] == ']') { w->i++; break; }
            if (w->s[w->i] == ',') { w->i++; continue; }
            int rc = walk_value(w, NULL, NULL);
            if (rc < 0) return rc;
        }
        w->depth--;
        return DSQ_OK;
    }
    if (c == '"') return walk_string(w, NULL) < 0 ? DSQ_ERR_JSON : DSQ_OK;
    /* number or literal: runs until a delimiter */
    size_t start = w->i;
    while (w->i < w->n && !is_ws(w->s[w->i]) && w->s[w->i] != ',' &&
           w->s[w->i] != '}' && w->s[w->i] != ']')
        w->i++;
    return w->i > start ? DSQ_OK : DSQ_ERR_JSON;
}

int st_json_walk(const char *text, size_t len, struct st_key **keys,
                 size_t *nkeys, char **bad_key, size_t *bad_off)
{
    struct walk w = { .s = text, .n = len, .i = 0, .bad_key = NULL, .bad_off = 0 };
    *keys = NULL; *nkeys = 0;
    *bad_key = NULL; *bad_off = 0;
    skip_ws(&w);
    if (w.i >= w.n || w.s[w.i] != '{') { *bad_off = w.i; return DSQ_ERR_JSON; }
    int rc = walk_object(&w, keys, nkeys);
    if (rc < 0) {
        *bad_key = w.bad_key;
        *bad_off = w.bad_off ? w.bad_off : w.i;
    }
    return rc;
}

int st_json_parse(const char *text, size_t len, const char *path,
                  uint64_t base_off, json_object **out, dsq_diag *d)
{
    *out = NULL;
    if (len > 0x7fffffffu)
        return dsq_fail(d, DSQ_ERR_JSON, path, NULL, (int64_t)base_off,
                        "json text of %zu bytes is too large", len);
    const char *nul = memchr(text, 0, len);
    if (nul)
        return dsq_fail(d, DSQ_ERR_JSON, path, NULL, (int64_t)(base_off + (uint64_t)(nul - text)),
                        "nul byte in json text");
    json_tokener *tok = json_tokener_new();
    if (!tok) return dsq_fail(d, DSQ_ERR_NOMEM, path, NULL, -1, "out of memory");
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_ALLOW_TRAILING_CHARS |
                                JSON_TOKENER_VALIDATE_UTF8);
    json_object *obj = json_tokener_parse_ex(tok, text, (int)len);
    enum json_tokener_error err = json_tokener_get_error(tok);
    size_t end = json_tokener_get_parse_end(tok);
    json_tokener_free(tok);
    if (!obj) {
        if (err == json_tokener_continue)
            return dsq_fail(d, DSQ_ERR_JSON, path, NULL, (int64_t)(base_off + len),
                            "json text ends early");
        return dsq_fail(d, DSQ_ERR_JSON, path, NULL, (int64_t)(base_off + end),
                        "invalid json: %s", json_tokener_error_desc(err));
    }
    for (size_t i = end; i < len; i++) {
        if (!is_ws(text[i])) {
            json_object_put(obj);
            return dsq_fail(d, DSQ_ERR_JSON, path, NULL, (int64_t)(base_off + i),
                            "unexpected data after the json value");
        }
    }
    *out = obj;
    return DSQ_OK;
}
