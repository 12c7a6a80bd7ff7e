/* tokenizer.c - public tokenizer API: picks the kind at load, dispatches
 * encode, and implements decode and the lookups (see tokenizer.h). */
#include "tok_internal.h"

#include "dsq_file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- load / free -------------------------------------------------------- */

/* The first non-blank byte of a file: '{' means JSON. -1 on error. */
static int first_byte(const char *path)
{
    int fd = dsq_open_regular(path, NULL);   /* never blocks on a FIFO */
    if (fd < 0) return -1;
    FILE *fp = fdopen(fd, "rb");
    if (!fp) {
        close(fd);
        return -1;
    }
    int c;
    while ((c = fgetc(fp)) != EOF && (c == ' ' || c == '\t' || c == '\n' || c == '\r')) {}
    fclose(fp);
    return c == EOF ? -2 : c;
}

static char *dir_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash) return strdup(".");
    size_t n = (size_t)(slash - path);
    char *s = malloc(n + 2);
    if (!s) return NULL;
    memcpy(s, path, n ? n : 1);
    s[n ? n : 1] = 0;
    if (n == 0) s[0] = '/';
    return s;
}

/* An empty tokenizer object: no ids, lookups and the word cache ready. */
static int tok_new(dsq_tokenizer **out, const char *name, dsq_diag *d)
{
    *out = NULL;
    dsq_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return dsq_fail(d, DSQ_ERR_NOMEM, name, NULL, -1, "out of memory");
    t->bos = t->eos = t->unk = t->l2_space = -1;
    for (int i = 0; i < 256; i++) t->byte_id[i] = -1;
    int rc = tok_cache_init(&t->cache);
    if (rc) { free(t); return dsq_fail(d, rc, name, NULL, -1, "cannot create the word cache"); }
    *out = t;
    return 0;
}

int dsq_tokenizer_load(dsq_tokenizer **out, const char *path, dsq_diag *d)
{
    if (!out || !path) return dsq_fail(d, DSQ_ERR_INVALID_ARG, path, NULL, -1, "null argument");
    *out = NULL;
    dsq_tokenizer *t;
    int rc = tok_new(&t, path, d);
    if (rc) return rc;

    char *json = NULL, *cfg = NULL;
    if (dsq_path_is_dir(path)) {
        json = dsq_path_join(path, "tokenizer.json");
        cfg = dsq_path_join(path, "tokenizer_config.json");
        if (!json || !cfg) { rc = dsq_fail(d, DSQ_ERR_NOMEM, path, NULL, -1, "out of memory"); goto done; }
        if (!dsq_path_exists(json)) {
            char *bin = dsq_path_join(path, "tokenizer.bin");
            if (bin && dsq_path_exists(bin)) {
                t->kind = DSQ_TOK_LLAMA2C;
                rc = tok_l2_load(t, bin, d);
                free(bin);
                goto done;
            }
            free(bin);
            rc = dsq_fail(d, DSQ_ERR_NOT_FOUND, path, NULL, -1,
                          "directory has no tokenizer.json or tokenizer.bin");
            goto done;
        }
        t->kind = DSQ_TOK_HF_BPE;
        rc = tok_hf_load(t, json, dsq_path_exists(cfg) ? cfg : NULL, d);
        goto done;
    }
    int c = first_byte(path);
    if (c == -1) { rc = dsq_fail_errno(d, errno, path, "cannot open tokenizer"); goto done; }
    size_t pl = strlen(path);
    if (c == '{' || c == '[' || (pl >= 5 && strcmp(path + pl - 5, ".json") == 0)) {
        char *dir = dir_of(path);
        if (!dir) { rc = dsq_fail(d, DSQ_ERR_NOMEM, path, NULL, -1, "out of memory"); goto done; }
        cfg = dsq_path_join(dir, "tokenizer_config.json");
        free(dir);
        if (!cfg) { rc = dsq_fail(d, DSQ_ERR_NOMEM, path, NULL, -1, "out of memory"); goto done; }
        t->kind = DSQ_TOK_HF_BPE;
        rc = tok_hf_load(t, path, dsq_path_exists(cfg) ? cfg : NULL, d);
    } else {
        t->kind = DSQ_TOK_LLAMA2C;
        rc = tok_l2_load(t, path, d);
    }
done:
    free(json);
    free(cfg);
    if (rc) { dsq_tokenizer_free(t); return rc; }
    *out = t;
    return 0;
}

int dsq_tokenizer_load_json(dsq_tokenizer **out, const char *tokenizer_json, size_t len,
                            const char *tokenizer_config_json, dsq_diag *d)
{
    if (!out || (!tokenizer_json && len))
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, DSQ_TOK_MEM_JSON, NULL, -1, "null argument");
    *out = NULL;
    dsq_tokenizer *t;
    int rc = tok_new(&t, DSQ_TOK_MEM_JSON, d);
    if (rc) return rc;
    t->kind = DSQ_TOK_HF_BPE;
    tok_text js = { tokenizer_json, len, DSQ_TOK_MEM_JSON };
    tok_text cs = { tokenizer_config_json, tokenizer_config_json ? strlen(tokenizer_config_json) : 0,
                    DSQ_TOK_MEM_CONFIG };
    rc = tok_hf_load_text(t, &js, tokenizer_config_json ? &cs : NULL, d);
    if (rc) { dsq_tokenizer_free(t); return rc; }
    *out = t;
    return 0;
}

void dsq_tokenizer_free(dsq_tokenizer *t)
{
    if (!t) return;
    for (size_t i = 0; i < t->n_pre; i++) tok_regex_free(&t->pre[i].re);
    free(t->pre);
    free(t->added);
    tok_trie_free(&t->trie_raw);
    tok_trie_free(&t->trie_norm);
    tok_smap_free(&t->by_piece);
    tok_smap_free(&t->by_bytes);
    tok_smap_free(&t->l2_map);
    tok_pmap_free(&t->merges);
    tok_cache_free(&t->cache);
    free(t->tmpl_pre);
    free(t->tmpl_post);
    free(t->scores);
    free(t->ent);
    tok_arena_free(&t->arena);
    free(t);
}

int dsq_tokenizer_kind(const dsq_tokenizer *t) { return t ? t->kind : 0; }

/* ---- encode ------------------------------------------------------------- */

int dsq_tokenizer_encode_ex(const dsq_tokenizer *t, const char *text, size_t len,
                            unsigned flags, int32_t **ids, size_t *n, dsq_diag *d)
{
    if (!t || !ids || !n || (!text && len))
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "null argument to tokenizer encode");
    *ids = NULL;
    *n = 0;
    tok_ids out = { 0 };
    int rc;
    if (t->kind == DSQ_TOK_LLAMA2C) {
        rc = tok_l2_encode(t, text, len, flags, &out, d);
    } else {
        tok_buf fixed = { 0 };
        if (len && !tok_utf8_valid(text, len)) {
            rc = tok_utf8_lossy(text, len, &fixed);
            if (rc) { free(fixed.v); return dsq_fail(d, rc, NULL, NULL, -1, "out of memory"); }
            text = fixed.v;
            len = fixed.n;
        }
        rc = tok_hf_encode(t, text ? text : "", len, flags, &out, d);
        free(fixed.v);
    }
    if (rc == 0 && !out.v) {
        /* a non-NULL result even for no tokens */
        rc = tok_ids_push(&out, 0);
        out.n = 0;
    }
    if (rc) {
        free(out.v);
        return dsq_fail(d, rc, NULL, NULL, -1, "tokenizer encode failed");
    }
    *ids = out.v;
    *n = out.n;
    return 0;
}

int dsq_tokenizer_encode(const dsq_tokenizer *t, const char *text, size_t len,
                         int add_special, int32_t **ids, size_t *n, dsq_diag *d)
{
    unsigned f = DSQ_TOK_PARSE_SPECIAL | (add_special ? DSQ_TOK_ADD_SPECIAL : 0u);
    return dsq_tokenizer_encode_ex(t, text, len, f, ids, n, d);
}

/* ---- decode ------------------------------------------------------------- */

/* transformers' clean_up_tokenization: the replacements in order. */
static int cleanup_spaces(tok_buf *b)
{
    static const char *const rep[][2] = {
        { " .", "." }, { " ?", "?" }, { " !", "!" }, { " ,", "," }, { " ' ", "'" },
        { " n't", "n't" }, { " 'm", "'m" }, { " 's", "'s" }, { " 've", "'ve" }, { " 're", "'re" },
    };
    for (size_t r = 0; r < sizeof rep / sizeof rep[0]; r++) {
        size_t fl = strlen(rep[r][0]), tl = strlen(rep[r][1]);
        size_t w = 0, i = 0;
        /* every replacement shrinks the text, so it can be done in place */
        while (i < b->n) {
            if (i + fl <= b->n && memcmp(b->v + i, rep[r][0], fl) == 0) {
                memmove(b->v + w, rep[r][1], tl);
                w += tl;
                i += fl;
            } else {
                b->v[w++] = b->v[i++];
            }
        }
        b->n = w;
        if (b->v) b->v[w] = 0;
    }
    return 0;
}

int dsq_tokenizer_decode(const dsq_tokenizer *t, const int32_t *ids, size_t n,
                         int skip_special, char **text, size_t *len)
{
    if (!t || !text || (!ids && n)) return DSQ_ERR_INVALID_ARG;
    *text = NULL;
    if (len) *len = 0;
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || (size_t)ids[i] >= t->n_ent || !t->ent[ids[i]].piece) return DSQ_ERR_INVALID_ARG;
    tok_buf raw = { 0 }, out = { 0 };
    int rc = 0;
    if (t->kind == DSQ_TOK_LLAMA2C) {
        rc = tok_l2_decode(t, ids, n, skip_special, &raw);
    } else {
        for (size_t i = 0; i < n && !rc; i++) {
            const tok_entry *e = &t->ent[ids[i]];
            if (skip_special && e->special) continue;
            rc = tok_buf_append(&raw, e->bytes, e->bytes_len);
        }
    }
    if (!rc) rc = tok_buf_append(&raw, "", 0);
    /* HF returns a String: String::from_utf8_lossy over the bytes */
    if (!rc) {
        if (tok_utf8_valid(raw.v, raw.n)) {
            out = raw;
            raw = (tok_buf){ 0 };
        } else {
            rc = tok_utf8_lossy(raw.v, raw.n, &out);
            if (!rc) rc = tok_buf_append(&out, "", 0);
        }
    }
    if (!rc && t->kind == DSQ_TOK_HF_BPE && t->cleanup_spaces) rc = cleanup_spaces(&out);
    free(raw.v);
    if (rc) { free(out.v); return rc; }
    *text = out.v;
    if (len) *len = out.n;
    return 0;
}

/* ---- lookups ------------------------------------------------------------ */

int dsq_tokenizer_token_bytes(const dsq_tokenizer *t, int32_t id, const char **bytes, size_t *len)
{
    if (!t || id < 0 || (size_t)id >= t->n_ent || !t->ent[id].piece) return DSQ_ERR_INVALID_ARG;
    if (bytes) *bytes = t->ent[id].bytes;
    if (len) *len = t->ent[id].bytes_len;
    return 0;
}

const char *dsq_tokenizer_piece(const dsq_tokenizer *t, int32_t id)
{
    if (!t || id < 0 || (size_t)id >= t->n_ent) return NULL;
    return t->ent[id].piece;
}

int32_t dsq_tokenizer_find(const dsq_tokenizer *t, const char *token)
{
    if (!t || !token) return -1;
    return tok_smap_get(&t->by_piece, token, strlen(token));
}

int32_t dsq_tokenizer_bos(const dsq_tokenizer *t) { return t ? t->bos : -1; }
int32_t dsq_tokenizer_eos(const dsq_tokenizer *t) { return t ? t->eos : -1; }

int dsq_tokenizer_is_special(const dsq_tokenizer *t, int32_t id)
{
    if (!t || id < 0 || (size_t)id >= t->n_ent) return 0;
    return t->ent[id].special;
}

size_t dsq_tokenizer_vocab_size(const dsq_tokenizer *t) { return t ? t->n_ent : 0; }
