/* safetensors.c - header parsing and validation, the model object, open
 * for single files and directories, queries, FP8 scale pairing.
 * Sharded indexes are in st_index.c, row conversion in st_read.c. */
#include "st_internal.h"
#include "dsq_mem.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* ===== model object ===== */

dsq_st_model *st_model_new(unsigned flags)
{
    dsq_st_model *m = calloc(1, sizeof *m);
    if (m) m->flags = flags;
    return m;
}

void dsq_st_close(dsq_st_model *m)
{
    if (!m) return;
    for (size_t i = 0; i < m->n; i++) free((char *)m->ents[i].t.name);
    free(m->ents);
    for (int i = 0; i < m->nshards; i++) {
        if (m->shards[i].mapped) dsq_map_close(&m->shards[i].map);
        free(m->shards[i].path);
    }
    free(m->shards);
    for (size_t i = 0; i < m->nmeta; i++) { free(m->meta_keys[i]); free(m->meta_vals[i]); }
    free(m->meta_keys);
    free(m->meta_vals);
    free(m->dir);
    free(m);
}

int st_model_add_shard(dsq_st_model *m, char *path, const dsq_map *map,
                       const uint8_t *buf, uint64_t len, dsq_diag *d)
{
    struct st_shard *ns = realloc(m->shards, (size_t)(m->nshards + 1) * sizeof *ns);
    if (!ns) {
        if (map) { dsq_map tmp = *map; dsq_map_close(&tmp); }
        int rc = dsq_fail(d, DSQ_ERR_NOMEM, path, NULL, -1, "out of memory");
        free(path);
        return rc;
    }
    m->shards = ns;
    struct st_shard *s = &m->shards[m->nshards++];
    memset(s, 0, sizeof *s);
    s->path = path;
    if (map) {
        s->map = *map;
        s->mapped = 1;
        s->buf = map->data;
        s->len = map->size;
    } else {
        s->buf = buf;
        s->len = len;
    }
    return DSQ_OK;
}

static int push_entry(dsq_st_model *m, struct st_entry **out)
{
    if (m->n == m->cap) {
        size_t nc = m->cap ? m->cap * 2 : 64;
        struct st_entry *ne = realloc(m->ents, nc * sizeof *ne);
        if (!ne) return DSQ_ERR_NOMEM;
        m->ents = ne;
        m->cap = nc;
    }
    *out = &m->ents[m->n++];
    memset(*out, 0, sizeof **out);
    (*out)->scale = -1;
    return DSQ_OK;
}

/* ===== header parsing ===== */

/* JSON integer >= 0 (json-c keeps values above INT64_MAX as uint64). */
static int get_u64(json_object *v, uint64_t *out)
{
    if (!v || !json_object_is_type(v, json_type_int)) return -1;
    if (json_object_get_int64(v) < 0) return -2;
    *out = json_object_get_uint64(v);
    return 0;
}

struct span { uint64_t begin, end; size_t ent; };

static int span_cmp(const void *a, const void *b)
{
    const struct span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

static int meta_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int parse_metadata(dsq_st_model *m, int keep, json_object *v, const char *path,
                          uint64_t off, dsq_diag *d)
{
    if (!json_object_is_type(v, json_type_object))
        return dsq_fail(d, DSQ_ERR_FORMAT, path, "__metadata__", (int64_t)off,
                        "__metadata__ is not an object of strings");
    size_t n = 0;
    json_object_object_foreach(v, key, val) {
        if (!json_object_is_type(val, json_type_string))
            return dsq_fail(d, DSQ_ERR_FORMAT, path, "__metadata__", (int64_t)off,
                            "__metadata__ value of '%s' is not a string", key);
        if ((size_t)json_object_get_string_len(val) != strlen(json_object_get_string(val)))
            return dsq_fail(d, DSQ_ERR_FORMAT, path, "__metadata__", (int64_t)off,
                            "__metadata__ value of '%s' contains a nul character", key);
        n++;
    }
    if (!keep || n == 0) return DSQ_OK;
    /* keys and values as parallel arrays sorted by key: sort pointers to
     * "key\0value" pairs, then split */
    char **pairs = calloc(n, sizeof *pairs);
    m->meta_keys = calloc(n, sizeof *m->meta_keys);
    m->meta_vals = calloc(n, sizeof *m->meta_vals);
    if (!pairs || !m->meta_keys || !m->meta_vals) { free(pairs); goto nomem; }
    size_t i = 0;
    json_object_object_foreach(v, k2, v2) {
        pairs[i++] = k2;
        (void)v2;
    }
    qsort(pairs, n, sizeof *pairs, meta_cmp);
    for (i = 0; i < n; i++) {
        json_object *jv = json_object_object_get(v, pairs[i]);
        m->meta_keys[i] = strdup(pairs[i]);
        m->meta_vals[i] = strdup(json_object_get_string(jv));
        m->nmeta = i + 1;
        if (!m->meta_keys[i] || !m->meta_vals[i]) { free(pairs); goto nomem; }
    }
    free(pairs);
    return DSQ_OK;
nomem:
    return dsq_fail(d, DSQ_ERR_NOMEM, path, NULL, -1, "out of memory");
}

/* One entry {"dtype","shape","data_offsets"}; fills e (name set by caller). */
static int parse_entry(struct st_entry *e, json_object *v, const char *path,
                       const char *name, uint64_t off, uint64_t *begin, uint64_t *end,
                       dsq_diag *d)
{
    json_object *jd, *js, *jo;
    if (!json_object_is_type(v, json_type_object))
        return dsq_fail(d, DSQ_ERR_FORMAT, path, name, (int64_t)off, "entry is not an object");
    if (!json_object_object_get_ex(v, "dtype", &jd) || !json_object_is_type(jd, json_type_string))
        return dsq_fail(d, DSQ_ERR_FORMAT, path, name, (int64_t)off, "missing or non-string dtype");
    if (!json_object_object_get_ex(v, "shape", &js) || !json_object_is_type(js, json_type_array))
        return dsq_fail(d, DSQ_ERR_FORMAT, path, name, (int64_t)off, "missing or non-array shape");
    if (!json_object_object_get_ex(v, "data_offsets", &jo) ||
        !json_object_is_type(jo, json_type_array) || json_object_array_length(jo) != 2)
        return dsq_fail(d, DSQ_ERR_FORMAT, path, name, (int64_t)off,
                        "data_offsets is not an array of two integers");

    const char *ds = json_object_get_string(jd);
    e->t.dtype = dsq_dtype_from_name_n(ds, (size_t)json_object_get_string_len(jd));
    if (e->t.dtype == DSQ_DTYPE_INVALID)
        return dsq_fail(d, DSQ_ERR_FORMAT, path, name, (int64_t)off, "unknown dtype '%.64s'", ds);

    size_t nd = json_object_array_length(js);
    if (nd > DSQ_ST_MAX_DIMS)
        return dsq_fail(d, DSQ_ERR_FORMAT, path, name, (int64_t)off,
                        "rank %zu exceeds the maximum of %d", nd, DSQ_ST_MAX_DIMS);
    e->t.ndim = (int)nd;
    uint64_t numel = 1;
    int overflow = 0;
    for (size_t i = 0; i < nd; i++) {
        uint64_t dim;
        int r = get_u64(json_object_array_get_idx(js, i), &dim);
        if (r < 0)
            return dsq_fail(d, DSQ_ERR_FORMAT, path, name, (int64_t)off,
                            "shape[%zu] is not a non-negative integer", i);
        if (dim > (uint64_t)INT64_MAX)
            return dsq_fail(d, DSQ_ERR_OVERFLOW, path, name, (int64_t)off,
                            "shape[%zu] = %llu is too large", i, (unsigned long long)dim);
        e->t.shape[i] = (int64_t)dim;
        if (dsq_mul_u64(numel, dim, &numel) < 0) overflow = 1;
    }
    /* a zero dimension makes numel 0 even if other dims overflow together;
     * still reject: such a shape is not representable by any real writer
     * and later code multiplies dims without checks */
    if (overflow || numel > (uint64_t)INT64_MAX)
        return dsq_fail(d, DSQ_ERR_OVERFLOW, path, name, (int64_t)off,
                        "shape element count overflows");
    {   /* the row view multiplies dims 1..n; make sure that fits too */
        uint64_t c = 1;
        for (int i = 1; i < e->t.ndim; i++)
            if (dsq_mul_u64(c, (uint64_t)e->t.shape[i], &c) < 0 || c > (uint64_t)INT64_MAX)
                return dsq_fail(d, DSQ_ERR_OVERFLOW, path, name, (int64_t)off,
                                "shape element count overflows");
    }
    e->t.numel = numel;
    uint64_t bits;
    if (dsq_mul_u64(numel, dsq_dtype_bits(e->t.dtype), &bits) < 0)
        return dsq_fail(d, DSQ_ERR_OVERFLOW, path, name, (int64_t)off,
                        "byte size of %llu x %s overflows", (unsigned long long)numel,
                        dsq_dtype_name(e->t.dtype));
    if (bits % 8)
        return dsq_fail(d, DSQ_ERR_FORMAT, path, name, (int64_t)off,
                        "%llu elements of %s are not a whole number of bytes",
                        (unsigned long long)numel, dsq_dtype_name(e->t.dtype));
    e->t.nbytes = bits / 8;

    int r1 = get_u64(json_object_array_get_idx(jo, 0), begin);
    int r2 = get_u64(json_object_array_get_idx(jo, 1), end);
    if (r1 < 0 || r2 < 0)
        return dsq_fail(d, DSQ_ERR_FORMAT, path, name, (int64_t)off,
                        "data_offsets are not non-negative integers");
    if (*begin > *end)
        return dsq_fail(d, DSQ_ERR_FORMAT, path, name, (int64_t)off,
                        "data_offsets begin %llu is after end %llu",
                        (unsigned long long)*begin, (unsigned long long)*end);
    if (*end - *begin != e->t.nbytes)
        return dsq_fail(d, DSQ_ERR_FORMAT, path, name, (int64_t)off,
                        "data_offsets span %llu bytes but %s shape needs %llu",
                        (unsigned long long)(*end - *begin), dsq_dtype_name(e->t.dtype),
                        (unsigned long long)e->t.nbytes);
    return DSQ_OK;
}

int st_parse_shard(dsq_st_model *m, int si, dsq_diag *d)
{
    const struct st_shard *s = &m->shards[si];
    const char *path = s->path;
    const uint8_t *buf = s->buf;
    uint64_t len = s->len;

    if (len < 8)
        return dsq_fail(d, DSQ_ERR_TRUNCATED, path, NULL, 0,
                        "file is %llu bytes, too short for the 8-byte header length",
                        (unsigned long long)len);
    uint64_t hn = dsq_load_u64le(buf);
    /* A safetensors file is an 8-byte header length followed by a JSON
     * object, so byte 8 is '{'. Anything else (a .dsq, a pickle, a text
     * file) is not one: say that rather than quote the length its first
     * 8 bytes happen to spell, which reads like a corrupt header. A length
     * over the cap is the same verdict: no writer produces one. */
    if ((len > 8 && buf[8] != '{') || hn > DSQ_ST_MAX_HEADER)
        return dsq_fail(d, DSQ_ERR_FORMAT, path, NULL, 0,
                        "not a safetensors file: %s (%s)", path ? path : "(buffer)",
                        hn > DSQ_ST_MAX_HEADER ? "its first 8 bytes are no plausible header length"
                                               : "no JSON header after the 8-byte length");
    if (hn > len - 8)
        return dsq_fail(d, DSQ_ERR_TRUNCATED, path, NULL, 0,
                        "header length %llu exceeds the %llu bytes after it",
                        (unsigned long long)hn, (unsigned long long)(len - 8));
    const char *hdr = (const char *)buf + 8;
    if (hn == 0 || hdr[0] != '{')
        return dsq_fail(d, DSQ_ERR_FORMAT, path, NULL, 8, "header does not start with '{'");

    json_object *root = NULL;
    struct st_key *keys = NULL;
    size_t nkeys = 0, ent0 = m->n;
    struct span *spans = NULL;
    int rc = st_json_parse(hdr, (size_t)hn, path, 8, &root, d);
    if (rc < 0) return rc;
    if (!json_object_is_type(root, json_type_object)) {
        rc = dsq_fail(d, DSQ_ERR_FORMAT, path, NULL, 8, "header is not a json object");
        goto out;
    }
    char *bad = NULL;
    size_t bad_off = 0;
    rc = st_json_walk(hdr, (size_t)hn, &keys, &nkeys, &bad, &bad_off);
    if (rc < 0) {
        if (rc == DSQ_ERR_NOMEM) rc = dsq_fail(d, rc, path, NULL, -1, "out of memory");
        else if (bad) rc = dsq_fail(d, rc, path, bad, (int64_t)(8 + bad_off), "duplicate key '%s'", bad);
        else if (rc == DSQ_ERR_JSON)
            rc = dsq_fail(d, rc, path, NULL, (int64_t)(8 + bad_off), "invalid json in header");
        else rc = dsq_fail(d, rc, path, NULL, (int64_t)(8 + bad_off),
                           "key with a nul character or a lone surrogate in header");
        free(bad);
        goto out;
    }
    if (nkeys != (size_t)json_object_object_length(root)) {
        rc = dsq_fail(d, DSQ_ERR_FORMAT, path, NULL, 8, "header keys are inconsistent");
        goto out;
    }

    uint64_t data0 = 8 + hn;          /* absolute offset of the byte buffer */
    size_t nspan = 0;
    spans = malloc((nkeys ? nkeys : 1) * sizeof *spans);
    if (!spans) { rc = dsq_fail(d, DSQ_ERR_NOMEM, path, NULL, -1, "out of memory"); goto out; }
    for (size_t k = 0; k < nkeys; k++) {
        const char *name = keys[k].key;
        uint64_t off = 8 + keys[k].off;
        json_object *v = NULL;
        if (!json_object_object_get_ex(root, name, &v)) {
            rc = dsq_fail(d, DSQ_ERR_FORMAT, path, name, (int64_t)off, "header key cannot be read");
            goto out;
        }
        if (strcmp(name, "__metadata__") == 0) {
            rc = parse_metadata(m, si == 0, v, path, off, d);
            if (rc < 0) goto out;
            continue;
        }
        if (name[0] == 0) {
            rc = dsq_fail(d, DSQ_ERR_FORMAT, path, name, (int64_t)off, "empty tensor name");
            goto out;
        }
        struct st_entry *e;
        if (push_entry(m, &e) < 0) {
            rc = dsq_fail(d, DSQ_ERR_NOMEM, path, NULL, -1, "out of memory");
            goto out;
        }
        e->t.name = keys[k].key;      /* take ownership */
        keys[k].key = NULL;
        e->t.shard = si;
        uint64_t b, en;
        rc = parse_entry(e, v, path, e->t.name, off, &b, &en, d);
        if (rc < 0) goto out;
        spans[nspan].begin = b;
        spans[nspan].end = en;
        spans[nspan].ent = m->n - 1;
        nspan++;
    }

    /* offsets must tile [0, last end) exactly (safetensors validate()) */
    qsort(spans, nspan, sizeof *spans, span_cmp);
    uint64_t pos = 0;
    for (size_t k = 0; k < nspan; k++) {
        struct st_entry *e = &m->ents[spans[k].ent];
        if (spans[k].begin != pos) {
            rc = dsq_fail(d, DSQ_ERR_FORMAT, path, e->t.name,
                          (int64_t)(data0 + (spans[k].begin < pos ? spans[k].begin : pos)),
                          "data_offsets begin %llu leaves %s at buffer offset %llu",
                          (unsigned long long)spans[k].begin,
                          spans[k].begin < pos ? "an overlap" : "a hole",
                          (unsigned long long)(spans[k].begin < pos ? spans[k].begin : pos));
            goto out;
        }
        pos = spans[k].end;
    }
    uint64_t need;
    if (__builtin_add_overflow(data0, pos, &need)) {
        rc = dsq_fail(d, DSQ_ERR_OVERFLOW, path, NULL, (int64_t)data0, "data_offsets overflow");
        goto out;
    }
    if (need > len) {
        rc = dsq_fail(d, DSQ_ERR_TRUNCATED, path, nspan ? m->ents[spans[nspan - 1].ent].t.name : NULL,
                      (int64_t)len, "file is %llu bytes but its tensors end at %llu",
                      (unsigned long long)len, (unsigned long long)need);
        goto out;
    }
    if (need < len) {
        rc = dsq_fail(d, DSQ_ERR_FORMAT, path, NULL, (int64_t)need,
                      "%llu bytes after the last tensor are not indexed",
                      (unsigned long long)(len - need));
        goto out;
    }
    for (size_t k = 0; k < nspan; k++) {
        struct st_entry *e = &m->ents[spans[k].ent];
        e->t.file_offset = data0 + spans[k].begin;
        e->t.data = e->t.nbytes ? buf + e->t.file_offset : NULL;
        m->total_bytes += e->t.nbytes;
    }
    rc = DSQ_OK;
out:
    if (rc < 0) {
        /* drop this shard's partial entries */
        for (size_t k = ent0; k < m->n; k++) free((char *)m->ents[k].t.name);
        m->n = ent0;
    }
    free(spans);
    st_keys_free(keys, nkeys);
    json_object_put(root);
    return rc;
}

/* ===== finishing: sort, duplicates, FP8 scales ===== */

static int ent_cmp(const void *a, const void *b)
{
    return strcmp(((const struct st_entry *)a)->t.name, ((const struct st_entry *)b)->t.name);
}

struct st_entry *st_find_entry(const dsq_st_model *m, const char *name)
{
    size_t lo = 0, hi = m->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(m->ents[mid].t.name, name);
        if (c == 0) return &m->ents[mid];
        if (c < 0) lo = mid + 1; else hi = mid;
    }
    return NULL;
}

static uint64_t ceil_div(uint64_t a, uint64_t b) { return a / b + (a % b != 0); }

static void advise_range(const dsq_st_model *m, const dsq_st_tensor *t, int adv);

static int check_scale(dsq_st_model *m, struct st_entry *w, struct st_entry *s, dsq_diag *d)
{
    const char *sp = m->shards[s->t.shard].path;
    if (s->t.dtype != DSQ_DTYPE_F32)
        return dsq_fail(d, DSQ_ERR_FORMAT, sp, s->t.name, (int64_t)s->t.file_offset,
                        "scale '%s' of fp8 tensor '%s' is %s, expected F32",
                        s->t.name, w->t.name, dsq_dtype_name(s->t.dtype));
    uint64_t rows = (uint64_t)dsq_st_rows(&w->t), cols = (uint64_t)dsq_st_cols(&w->t);
    uint64_t er = ceil_div(rows, DSQ_ST_FP8_BLOCK), ec = ceil_div(cols, DSQ_ST_FP8_BLOCK);
    if (s->t.ndim != 2 || (uint64_t)s->t.shape[0] != er || (uint64_t)s->t.shape[1] != ec) {
        char got[64] = "[";
        for (int i = 0; i < s->t.ndim && i < 4; i++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", i ? ", " : "",
                     (long long)s->t.shape[i]);
        snprintf(got + strlen(got), sizeof got - strlen(got), "%s]", s->t.ndim > 4 ? ", ..." : "");
        return dsq_fail(d, DSQ_ERR_SHAPE, sp, s->t.name, (int64_t)s->t.file_offset,
                        "scale '%s' has shape %s, fp8 tensor '%s' [%llu, %llu] needs [%llu, %llu]",
                        s->t.name, got, w->t.name, (unsigned long long)rows,
                        (unsigned long long)cols, (unsigned long long)er, (unsigned long long)ec);
    }
    if (!(m->flags & DSQ_ST_OPEN_NO_SCALE_SCAN)) {
        for (uint64_t k = 0; k < s->t.numel; k++) {
            float v;
            memcpy(&v, s->t.data + 4 * k, 4);
            if (!isfinite(v) || v < 0.0f)
                return dsq_fail(d, DSQ_ERR_NONFINITE, sp, s->t.name,
                                (int64_t)(s->t.file_offset + 4 * k),
                                "scale '%s' of '%s' holds %s at block [%llu, %llu]",
                                s->t.name, w->t.name,
                                isnan(v) ? "nan" : isinf(v) ? (v > 0 ? "inf" : "-inf") : "a negative value",
                                (unsigned long long)(k / ec), (unsigned long long)(k % ec));
        }
        /* the scan paged the scales in; let them go until conversion */
        advise_range(m, &s->t, MADV_DONTNEED);
    }
    return DSQ_OK;
}

int st_model_sort(dsq_st_model *m, dsq_diag *d)
{
    if (m->n > 1) qsort(m->ents, m->n, sizeof *m->ents, ent_cmp);
    for (size_t i = 1; i < m->n; i++) {
        const struct st_entry *a = &m->ents[i - 1], *b = &m->ents[i];
        if (strcmp(a->t.name, b->t.name) == 0)
            return dsq_fail(d, DSQ_ERR_FORMAT, m->shards[b->t.shard].path, b->t.name,
                            (int64_t)b->t.file_offset, "tensor '%s' is in both '%s' and '%s'",
                            b->t.name, m->shards[a->t.shard].path, m->shards[b->t.shard].path);
    }
    return DSQ_OK;
}

int st_model_finish(dsq_st_model *m, dsq_diag *d)
{
    DSQ_TRY(st_model_sort(m, d));
    size_t suf = strlen(DSQ_ST_SCALE_SUFFIX);
    for (size_t i = 0; i < m->n; i++) {
        struct st_entry *w = &m->ents[i];
        if (w->t.dtype != DSQ_DTYPE_F8_E4M3 && w->t.dtype != DSQ_DTYPE_F8_E5M2) continue;
        size_t nl = strlen(w->t.name);
        char *sn = malloc(nl + suf + 1);
        if (!sn) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
        memcpy(sn, w->t.name, nl);
        memcpy(sn + nl, DSQ_ST_SCALE_SUFFIX, suf + 1);
        struct st_entry *s = st_find_entry(m, sn);
        if (!s) {
            int rc = DSQ_OK;
            if (w->t.dtype == DSQ_DTYPE_F8_E4M3 && !(m->flags & DSQ_ST_OPEN_FP8_UNSCALED))
                rc = dsq_fail(d, DSQ_ERR_FORMAT, m->shards[w->t.shard].path, w->t.name,
                              (int64_t)w->t.file_offset,
                              "fp8 tensor '%s' has no scale tensor '%s'", w->t.name, sn);
            free(sn);
            if (rc < 0) return rc;
            continue;
        }
        free(sn);
        int rc = check_scale(m, w, s, d);
        if (rc < 0) return rc;
        w->scale = (int64_t)(s - m->ents);
        s->is_companion = 1;
    }
    return DSQ_OK;
}

/* ===== open ===== */

static char *dir_of(const char *path)
{
    const char *sl = strrchr(path, '/');
    if (!sl) return strdup(".");
    if (sl == path) return strdup("/");
    return strndup(path, (size_t)(sl - path));
}

static int ends_with(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcmp(s + a - b, suf) == 0;
}

static int open_single(dsq_st_model *m, const char *path, dsq_diag *d)
{
    dsq_map map;
    int rc = dsq_map_open(&map, path, d);
    if (rc < 0) return rc;
    char *p = strdup(path);
    if (!p) { dsq_map_close(&map); return dsq_fail(d, DSQ_ERR_NOMEM, path, NULL, -1, "out of memory"); }
    DSQ_TRY(st_model_add_shard(m, p, &map, NULL, 0, d));
    return st_parse_shard(m, 0, d);
}

/* In a directory: the index to use (model.safetensors.index.json, else the
 * only *.safetensors.index.json), else the only *.safetensors file. */
static int resolve_dir(const char *dir, char **index, char **single, dsq_diag *d)
{
    *index = *single = NULL;
    char *p = dsq_path_join(dir, "model.safetensors.index.json");
    if (!p) return dsq_fail(d, DSQ_ERR_NOMEM, dir, NULL, -1, "out of memory");
    if (dsq_path_exists(p)) { *index = p; return DSQ_OK; }
    free(p);
    DIR *dh = opendir(dir);
    if (!dh) return dsq_fail_errno(d, errno, dir, "cannot open directory");
    char *idx = NULL, *st = NULL;
    int nidx = 0, nst = 0;
    struct dirent *de;
    while ((de = readdir(dh))) {
        if (de->d_name[0] == '.') continue;
        if (ends_with(de->d_name, ".safetensors.index.json")) {
            if (!nidx++) idx = strdup(de->d_name);
        } else if (ends_with(de->d_name, ".safetensors")) {
            if (!nst++) st = strdup(de->d_name);
        }
    }
    closedir(dh);
    int rc = DSQ_OK;
    if (nidx == 1 && idx) *index = dsq_path_join(dir, idx);
    else if (nidx > 1)
        rc = dsq_fail(d, DSQ_ERR_FORMAT, dir, NULL, -1,
                      "directory holds %d *.safetensors.index.json files and no "
                      "model.safetensors.index.json", nidx);
    else if (nst == 1 && st) *single = dsq_path_join(dir, st);
    else if (nst == 0)
        rc = dsq_fail(d, DSQ_ERR_NOT_FOUND, dir, NULL, -1, "no .safetensors file in directory");
    else
        rc = dsq_fail(d, DSQ_ERR_FORMAT, dir, NULL, -1,
                      "directory holds %d .safetensors files and no index", nst);
    free(idx);
    free(st);
    if (rc == DSQ_OK && !*index && !*single)
        rc = dsq_fail(d, DSQ_ERR_NOMEM, dir, NULL, -1, "out of memory");
    return rc;
}

int dsq_st_open_ex(dsq_st_model **out, const char *path, unsigned flags, dsq_diag *d)
{
    if (!out || !path) return dsq_fail(d, DSQ_ERR_INVALID_ARG, path, NULL, -1, "no path");
    *out = NULL;
    dsq_st_model *m = st_model_new(flags);
    if (!m) return dsq_fail(d, DSQ_ERR_NOMEM, path, NULL, -1, "out of memory");
    int rc;
    char *index = NULL, *single = NULL;
    if (dsq_path_is_dir(path)) {
        rc = resolve_dir(path, &index, &single, d);
        if (rc < 0) goto fail;
        m->dir = strdup(path);
    } else if (ends_with(path, ".index.json")) {
        index = strdup(path);
        m->dir = dir_of(path);
    } else {
        if (!dsq_path_exists(path)) {
            rc = dsq_fail(d, DSQ_ERR_NOT_FOUND, path, NULL, -1, "no such file");
            goto fail;
        }
        single = strdup(path);
        m->dir = dir_of(path);
    }
    if (!m->dir || (!index && !single)) {
        rc = dsq_fail(d, DSQ_ERR_NOMEM, path, NULL, -1, "out of memory");
        goto fail;
    }
    rc = index ? st_open_index(m, index, m->dir, d) : open_single(m, single, d);
    if (rc < 0) goto fail;
    rc = st_model_finish(m, d);
    if (rc < 0) goto fail;
    free(index);
    free(single);
    *out = m;
    return DSQ_OK;
fail:
    free(index);
    free(single);
    dsq_st_close(m);
    return rc;
}

int dsq_st_open(dsq_st_model **out, const char *path, dsq_diag *d)
{
    return dsq_st_open_ex(out, path, 0, d);
}

int dsq_st_parse_buffer(dsq_st_model **out, const uint8_t *buf, size_t len,
                        const char *name, unsigned flags, dsq_diag *d)
{
    if (!out) return dsq_fail(d, DSQ_ERR_INVALID_ARG, name, NULL, -1, "no output");
    *out = NULL;
    if (!name) name = "<buffer>";
    dsq_st_model *m = st_model_new(flags);
    char *p = strdup(name);
    if (!m || !p || !(m->dir = strdup("."))) {
        free(p);
        dsq_st_close(m);
        return dsq_fail(d, DSQ_ERR_NOMEM, name, NULL, -1, "out of memory");
    }
    int rc = st_model_add_shard(m, p, NULL, buf, len, d);
    if (rc == DSQ_OK) rc = st_parse_shard(m, 0, d);
    if (rc == DSQ_OK) rc = st_model_finish(m, d);
    if (rc < 0) { dsq_st_close(m); return rc; }
    *out = m;
    return DSQ_OK;
}

/* ===== queries ===== */

size_t dsq_st_count(const dsq_st_model *m) { return m ? m->n : 0; }

const dsq_st_tensor *dsq_st_get(const dsq_st_model *m, size_t i)
{
    return m && i < m->n ? &m->ents[i].t : NULL;
}

const dsq_st_tensor *dsq_st_find(const dsq_st_model *m, const char *name)
{
    if (!m || !name) return NULL;
    const struct st_entry *e = st_find_entry(m, name);
    return e ? &e->t : NULL;
}

uint64_t dsq_st_total_bytes(const dsq_st_model *m) { return m ? m->total_bytes : 0; }
int dsq_st_shard_count(const dsq_st_model *m) { return m ? m->nshards : 0; }

const char *dsq_st_shard_path(const dsq_st_model *m, int shard)
{
    return m && shard >= 0 && shard < m->nshards ? m->shards[shard].path : NULL;
}

const char *dsq_st_dir(const dsq_st_model *m) { return m ? m->dir : NULL; }
size_t dsq_st_meta_count(const dsq_st_model *m) { return m ? m->nmeta : 0; }

const char *dsq_st_meta_get(const dsq_st_model *m, const char *key)
{
    if (!m || !key) return NULL;
    size_t lo = 0, hi = m->nmeta;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(m->meta_keys[mid], key);
        if (c == 0) return m->meta_vals[mid];
        if (c < 0) lo = mid + 1; else hi = mid;
    }
    return NULL;
}

int dsq_st_meta_at(const dsq_st_model *m, size_t i, const char **key, const char **value)
{
    if (!m || i >= m->nmeta) return DSQ_ERR_INVALID_ARG;
    if (key) *key = m->meta_keys[i];
    if (value) *value = m->meta_vals[i];
    return DSQ_OK;
}

/* t must be one of m's tensors; checked so a stray pointer cannot index
 * out of bounds. */
const struct st_entry *st_entry_checked(const dsq_st_model *m, const dsq_st_tensor *t)
{
    if (!m || !t || m->n == 0) return NULL;
    /* compare as integers: relational operators on pointers into
     * different objects are undefined */
    uintptr_t base = (uintptr_t)m->ents, p = (uintptr_t)st_entry_of(t);
    if (p < base || p >= base + m->n * sizeof *m->ents ||
        (p - base) % sizeof *m->ents != 0)
        return NULL;
    return &m->ents[(p - base) / sizeof *m->ents];
}

const dsq_st_tensor *dsq_st_scale_of(const dsq_st_model *m, const dsq_st_tensor *t)
{
    const struct st_entry *e = st_entry_checked(m, t);
    return e && e->scale >= 0 ? &m->ents[e->scale].t : NULL;
}

int dsq_st_is_companion(const dsq_st_model *m, const dsq_st_tensor *t)
{
    const struct st_entry *e = st_entry_checked(m, t);
    return e ? e->is_companion : 0;
}

/* ===== paging hints ===== */

static void advise_range(const dsq_st_model *m, const dsq_st_tensor *t, int adv)
{
    const struct st_shard *s = &m->shards[t->shard];
    if (!s->mapped || t->nbytes == 0) return;
    uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t base = (uintptr_t)s->buf;
    uintptr_t a = (uintptr_t)t->data & ~(pg - 1);
    uintptr_t b = ((uintptr_t)t->data + t->nbytes + pg - 1) & ~(pg - 1);
    /* rounding out may touch neighbours' pages: harmless for hints on a
     * read-only file mapping; stay inside the mapping */
    if (a < base) a = base;
    (void)madvise((void *)a, b - a, adv);
}

int dsq_st_advise(const dsq_st_model *m, const dsq_st_tensor *t, enum dsq_st_advice advice)
{
    const struct st_entry *e = st_entry_checked(m, t);
    if (!e) return DSQ_ERR_INVALID_ARG;
    int adv = advice == DSQ_ST_WILLNEED ? MADV_WILLNEED :
              advice == DSQ_ST_DONTNEED ? MADV_DONTNEED :
              advice == DSQ_ST_SEQUENTIAL ? MADV_SEQUENTIAL : -1;
    if (adv < 0) return DSQ_ERR_INVALID_ARG;
    advise_range(m, t, adv);
    if (e->scale >= 0) advise_range(m, &m->ents[e->scale].t, adv);
    return DSQ_OK;
}
