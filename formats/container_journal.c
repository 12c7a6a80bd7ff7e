/* container_journal.c - the resume journal of a .dsq writer: a small JSON
 * file replaced atomically at each checkpoint (docs/dsq-format.md §9). It
 * is our own output, but is still parsed defensively: a journal that does
 * not look right is a state error, never a crash. */
#include "container_layout.h"

#include <json-c/json.h>
#include <stdlib.h>
#include <string.h>

#define JOURNAL_MAX (1u << 30)

void dsq_ctr_wentries_free(dsq_ctr_wentry *e, size_t n)
{
    if (!e) return;
    for (size_t i = 0; i < n; i++) { free(e[i].name); free(e[i].dtype); }
    free(e);
}

static json_object *hex_obj(const uint8_t h[DSQ_SHA256_LEN])
{
    char hex[2 * DSQ_SHA256_LEN + 1];
    dsq_sha256_hex(h, hex);
    return json_object_new_string(hex);
}

static json_object *entry_obj(const dsq_ctr_wentry *w)
{
    const dsq_ctr_tensor_info *t = &w->t;
    json_object *o = json_object_new_object();
    json_object *shape = json_object_new_array();
    json_object *aux = json_object_new_array();
    if (!o || !shape || !aux) {
        json_object_put(o); json_object_put(shape); json_object_put(aux);
        return NULL;
    }
    for (uint32_t i = 0; i < t->ndim; i++) json_object_array_add(shape, json_object_new_int64(t->shape[i]));
    for (int i = 0; i < DSQ_CTR_AUX; i++) json_object_array_add(aux, json_object_new_int64(t->aux[i]));
    json_object_object_add(o, "name", json_object_new_string(w->name));
    json_object_object_add(o, "src_dtype", json_object_new_string(w->dtype ? w->dtype : ""));
    json_object_object_add(o, "role", json_object_new_int64(t->role));
    json_object_object_add(o, "scheme", json_object_new_int64(t->scheme));
    json_object_object_add(o, "shape", shape);
    json_object_object_add(o, "group_size", json_object_new_int64(t->group_size));
    json_object_object_add(o, "pack_version", json_object_new_int64(t->pack_version));
    json_object_object_add(o, "aux", aux);
    json_object_object_add(o, "offset", json_object_new_int64((int64_t)t->offset));
    json_object_object_add(o, "raw_size", json_object_new_int64((int64_t)t->raw_size));
    json_object_object_add(o, "stored_size", json_object_new_int64((int64_t)t->stored_size));
    json_object_object_add(o, "compression", json_object_new_int64(t->compression));
    json_object_object_add(o, "sha256", hex_obj(t->sha256));
    json_object_object_add(o, "stored_sha256", hex_obj(w->stored_sha256));
    return o;
}

int dsq_ctr_journal_save(const char *path, const char *fingerprint,
                         const uint8_t header_sha256[DSQ_SHA256_LEN],
                         const dsq_ctr_wentry *e, size_t n, uint64_t end, dsq_diag *d)
{
    json_object *root = json_object_new_object();
    json_object *arr = json_object_new_array_ext((int)(n < 1u << 30 ? n : 1u << 30));
    if (!root || !arr) {
        json_object_put(root); json_object_put(arr);
        return dsq_fail(d, DSQ_ERR_NOMEM, path, NULL, -1, "out of memory");
    }
    json_object_object_add(root, "dsq_journal", json_object_new_int(1));
    json_object_object_add(root, "fingerprint", json_object_new_string(fingerprint));
    json_object_object_add(root, "end", json_object_new_int64((int64_t)end));
    json_object_object_add(root, "header_sha256", hex_obj(header_sha256));
    json_object_object_add(root, "entries", arr);
    for (size_t i = 0; i < n; i++) {
        json_object *o = entry_obj(&e[i]);
        if (!o) { json_object_put(root); return dsq_fail(d, DSQ_ERR_NOMEM, path, NULL, -1, "out of memory"); }
        json_object_array_add(arr, o);
    }
    size_t len = 0;
    const char *s = json_object_to_json_string_length(
        root, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &len);
    int rc = s ? dsq_write_file_atomic(path, s, len, DSQ_OUT_OVERWRITE, d)
               : dsq_fail(d, DSQ_ERR_NOMEM, path, NULL, -1, "out of memory");
    json_object_put(root);
    return rc;
}

/* ---- load ---- */

static int get_i64(json_object *o, const char *key, int64_t lo, int64_t hi, int64_t *out)
{
    json_object *v;
    if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_int)) return -1;
    int64_t x = json_object_get_int64(v);
    if (x < lo || x > hi) return -1;
    *out = x;
    return 0;
}

static int get_u32(json_object *o, const char *key, uint32_t *out)
{
    int64_t x;
    if (get_i64(o, key, 0, UINT32_MAX, &x)) return -1;
    *out = (uint32_t)x;
    return 0;
}

static int get_hex(json_object *o, const char *key, uint8_t out[DSQ_SHA256_LEN])
{
    json_object *v;
    if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_string)) return -1;
    const char *s = json_object_get_string(v);
    if (strlen(s) != 2 * DSQ_SHA256_LEN) return -1;
    return dsq_sha256_parse_hex(s, out);
}

static int get_str(json_object *o, const char *key, char **out)
{
    json_object *v;
    if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_string)) return -1;
    *out = strdup(json_object_get_string(v));
    return *out ? 0 : -1;
}

static int parse_entry(json_object *o, dsq_ctr_wentry *w)
{
    dsq_ctr_tensor_info *t = &w->t;
    json_object *shape, *aux;
    int64_t x;
    if (!json_object_is_type(o, json_type_object)) return -1;
    if (get_str(o, "name", &w->name) || get_str(o, "src_dtype", &w->dtype)) return -1;
    t->name = w->name;
    t->src_dtype = w->dtype;
    if (get_u32(o, "role", &t->role) || get_u32(o, "scheme", &t->scheme)
        || get_u32(o, "group_size", &t->group_size) || get_u32(o, "pack_version", &t->pack_version)
        || get_u32(o, "compression", &t->compression))
        return -1;
    if (get_i64(o, "offset", 0, INT64_MAX, &x)) return -1;
    t->offset = (uint64_t)x;
    if (get_i64(o, "raw_size", 0, INT64_MAX, &x)) return -1;
    t->raw_size = (uint64_t)x;
    if (get_i64(o, "stored_size", 0, INT64_MAX, &x)) return -1;
    t->stored_size = (uint64_t)x;
    if (!json_object_object_get_ex(o, "shape", &shape) || !json_object_is_type(shape, json_type_array)
        || json_object_array_length(shape) > DSQ_CTR_MAX_DIMS)
        return -1;
    t->ndim = (uint32_t)json_object_array_length(shape);
    for (uint32_t i = 0; i < t->ndim; i++) {
        json_object *v = json_object_array_get_idx(shape, i);
        if (!json_object_is_type(v, json_type_int)) return -1;
        t->shape[i] = json_object_get_int64(v);
    }
    if (!json_object_object_get_ex(o, "aux", &aux) || !json_object_is_type(aux, json_type_array)
        || json_object_array_length(aux) != DSQ_CTR_AUX)
        return -1;
    for (int i = 0; i < DSQ_CTR_AUX; i++) {
        json_object *v = json_object_array_get_idx(aux, (size_t)i);
        if (!json_object_is_type(v, json_type_int)) return -1;
        int64_t a = json_object_get_int64(v);
        if (a < 0 || a > UINT32_MAX) return -1;
        t->aux[i] = (uint32_t)a;
    }
    if (get_hex(o, "sha256", t->sha256) || get_hex(o, "stored_sha256", w->stored_sha256)) return -1;
    if (t->compression > DSQ_CTR_COMP_ZSTD) return -1;
    if (t->compression == DSQ_CTR_COMP_NONE && t->stored_size != t->raw_size) return -1;
    return dsq_ctr_check_info(t, strlen(w->name), strlen(w->dtype), -1, NULL, -1, NULL) < 0 ? -1 : 0;
}

int dsq_ctr_journal_load(const char *path, char **fingerprint,
                         uint8_t header_sha256[DSQ_SHA256_LEN],
                         dsq_ctr_wentry **e, size_t *n, dsq_diag *d)
{
    *fingerprint = NULL;
    *e = NULL;
    *n = 0;
    char *text = NULL;
    size_t len = 0;
    DSQ_TRY(dsq_read_file(path, JOURNAL_MAX, &text, &len, d));
    json_object *root = json_tokener_parse(text);
    free(text);
    int64_t ver;
    json_object *arr;
    dsq_ctr_wentry *w = NULL;
    size_t cnt = 0;
    if (!root || !json_object_is_type(root, json_type_object)
        || get_i64(root, "dsq_journal", 1, 1, &ver)
        || get_str(root, "fingerprint", fingerprint)
        || get_hex(root, "header_sha256", header_sha256)
        || !json_object_object_get_ex(root, "entries", &arr)
        || !json_object_is_type(arr, json_type_array))
        goto bad;
    cnt = json_object_array_length(arr);
    w = calloc(cnt ? cnt : 1, sizeof *w);
    if (!w) goto bad;
    for (size_t i = 0; i < cnt; i++)
        if (parse_entry(json_object_array_get_idx(arr, i), &w[i])) goto bad;
    json_object_put(root);
    *e = w;
    *n = cnt;
    return DSQ_OK;
bad:
    json_object_put(root);
    dsq_ctr_wentries_free(w, cnt);
    free(*fingerprint);
    *fingerprint = NULL;
    return dsq_fail(d, DSQ_ERR_STATE, path, NULL, -1,
                    "resume journal is malformed (delete it to start over)");
}
