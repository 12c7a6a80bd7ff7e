/* container_set.c - a .dsq model as one file or as index + shards (see
 * container_set.h). The index is hostile input like everything else: strict
 * JSON, no duplicate keys, shard names confined to the index's directory,
 * and the index and the shards must agree in both directions. */
#include "container_set.h"
#include "dsq_file.h"
#include "st_internal.h"

#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SET_INDEX_MAX (1u << 30)

struct dsq_ctr_set {
    char *index;                /* NULL for a single file */
    dsq_ctr **ctr;
    char **path;
    size_t n;
};

/* Shard i's file name (what the weight_map names). */
static const char *shard_name(const dsq_ctr_set *s, size_t i)
{
    const char *b = strrchr(s->path[i], '/');
    return b ? b + 1 : s->path[i];
}

static dsq_ctr *shard_named(const dsq_ctr_set *s, const char *file)
{
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(shard_name(s, i), file) == 0) return s->ctr[i];
    return NULL;
}

void dsq_ctr_set_close(dsq_ctr_set *s)
{
    if (!s) return;
    for (size_t i = 0; i < s->n; i++) {
        dsq_ctr_close(s->ctr[i]);
        free(s->path[i]);
    }
    free(s->ctr);
    free(s->path);
    free(s->index);
    free(s);
}

size_t dsq_ctr_set_shards(const dsq_ctr_set *s) { return s->n; }
dsq_ctr *dsq_ctr_set_shard(const dsq_ctr_set *s, size_t i) { return i < s->n ? s->ctr[i] : NULL; }
const char *dsq_ctr_set_shard_path(const dsq_ctr_set *s, size_t i) { return i < s->n ? s->path[i] : NULL; }
const char *dsq_ctr_set_index_path(const dsq_ctr_set *s) { return s->index; }

const dsq_ctr_tensor_info *dsq_ctr_set_find(const dsq_ctr_set *s, const char *name, dsq_ctr **shard)
{
    for (size_t i = 0; i < s->n; i++) {
        const dsq_ctr_tensor_info *t = dsq_ctr_find(s->ctr[i], name);
        if (t) {
            if (shard) *shard = s->ctr[i];
            return t;
        }
    }
    if (shard) *shard = NULL;
    return NULL;
}

int dsq_ctr_file_is_dsq(const char *path)
{
    if (dsq_path_is_dir(path)) return 0;
    int fd = dsq_open_regular(path, NULL);   /* a FIFO is no .dsq: never wait on it */
    if (fd < 0) return 0;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        close(fd);
        return 0;
    }
    unsigned char head[8];
    size_t n = fread(head, 1, sizeof head, f);
    fclose(f);
    /* A .dsq cut short before its magic (0 or 1 bytes left by a failed
     * copy) is still a .dsq, so the open reports "truncated" instead of
     * looking for a safetensors checkpoint beside it. */
    size_t l = strlen(path);
    if (n < sizeof head) return l > 4 && strcmp(path + l - 4, ".dsq") == 0;
    return dsq_ctr_is_dsq(head, n);
}

/* The index path for a directory or an index file, else NULL. */
static char *index_of(const char *path)
{
    if (dsq_path_is_dir(path)) {
        char *p = dsq_path_join(path, DSQ_CTR_INDEX_NAME);
        if (p && dsq_path_exists(p)) return p;
        free(p);
        return NULL;
    }
    size_t l = strlen(path), k = strlen(DSQ_CTR_INDEX_NAME);
    if (l >= k && strcmp(path + l - k, DSQ_CTR_INDEX_NAME) == 0 && dsq_path_exists(path)) return strdup(path);
    return NULL;
}

int dsq_ctr_set_is_dsq(const char *path)
{
    if (dsq_ctr_file_is_dsq(path)) return 1;
    char *ix = index_of(path);
    free(ix);
    return ix != NULL;
}

/* A shard name: a plain .dsq file name in the index's directory. */
static int good_shard_name(const char *s)
{
    size_t l = strlen(s);
    return l > 4 && !strchr(s, '/') && s[0] != '.' && strcmp(s + l - 4, ".dsq") == 0;
}

static int add_shard(dsq_ctr_set *s, const char *dir, const char *file, dsq_diag *d)
{
    if (shard_named(s, file)) return DSQ_OK;
    char *p = dsq_path_join(dir, file);
    dsq_ctr **nc = realloc(s->ctr, (s->n + 1) * sizeof *nc);
    if (nc) s->ctr = nc;
    char **np = realloc(s->path, (s->n + 1) * sizeof *np);
    if (np) s->path = np;
    if (!p || !nc || !np) {
        free(p);
        return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    }
    int rc = dsq_ctr_open(&s->ctr[s->n], p, d);
    if (rc < 0) {
        free(p);
        return rc;
    }
    s->path[s->n++] = p;
    return DSQ_OK;
}

static int open_index(dsq_ctr_set *s, const char *ix, dsq_diag *d)
{
    char *text = NULL;
    size_t len = 0;
    DSQ_TRY(dsq_read_file(ix, SET_INDEX_MAX, &text, &len, d));
    json_object *root = NULL;
    int rc = st_json_parse(text, len, ix, 0, &root, d);
    if (rc == DSQ_OK) {   /* json-c keeps the last of duplicate keys: refuse them */
        struct st_key *keys = NULL;
        size_t nk = 0, off = 0;
        char *bad = NULL;
        rc = st_json_walk(text, len, &keys, &nk, &bad, &off);
        if (rc == DSQ_ERR_FORMAT)
            dsq_fail(d, rc, ix, bad, (int64_t)off, "duplicate key '%s'", bad ? bad : "");
        else if (rc < 0)
            dsq_fail(d, rc, ix, NULL, -1, "invalid JSON");
        free(bad);
        st_keys_free(keys, nk);
    }
    free(text);
    json_object *wm = NULL, *meta = NULL, *v;
    if (rc == DSQ_OK && (!json_object_is_type(root, json_type_object) ||
                         !json_object_object_get_ex(root, "weight_map", &wm) ||
                         !json_object_is_type(wm, json_type_object)))
        rc = dsq_fail(d, DSQ_ERR_FORMAT, ix, NULL, -1, "no \"weight_map\" object");
    char *dir = NULL;
    if (rc == DSQ_OK) {
        dir = strdup(ix);
        if (!dir) rc = dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
        else {
            char *sl = strrchr(dir, '/');
            if (sl) sl[1] = 0;
            else strcpy(dir, ".");
        }
    }
    size_t listed = 0;
    if (rc == DSQ_OK) {
        json_object_object_foreach(wm, name, file) {
            if (rc < 0) break;
            if (!json_object_is_type(file, json_type_string) || !good_shard_name(json_object_get_string(file))) {
                rc = dsq_fail(d, DSQ_ERR_FORMAT, ix, name, -1, "weight_map value is not a .dsq file name in the "
                              "index's directory");
                break;
            }
            rc = add_shard(s, dir, json_object_get_string(file), d);
            listed++;
        }
    }
    /* both directions: every listed tensor is in its shard, and every
     * shard's tensor is listed there */
    if (rc == DSQ_OK) {
        json_object_object_foreach(wm, name, file) {
            const char *fn = json_object_get_string(file);
            dsq_ctr *c = shard_named(s, fn);
            if (!c || !dsq_ctr_find(c, name)) {
                rc = dsq_fail(d, DSQ_ERR_NOT_FOUND, ix, name, -1, "tensor listed in the index is not in shard '%s'",
                              fn);
                break;
            }
        }
    }
    size_t held = 0;
    for (size_t i = 0; i < s->n && rc == DSQ_OK; i++) {
        for (size_t k = 0; k < dsq_ctr_count(s->ctr[i]) && rc == DSQ_OK; k++) {
            const char *nm = dsq_ctr_get(s->ctr[i], k)->name;
            json_object *f;
            if (!json_object_object_get_ex(wm, nm, &f) || strcmp(json_object_get_string(f), shard_name(s, i)))
                rc = dsq_fail(d, DSQ_ERR_FORMAT, s->path[i], nm, -1, "tensor is not listed for this shard in %s",
                              ix);
            held++;
        }
    }
    if (rc == DSQ_OK && held != listed)
        rc = dsq_fail(d, DSQ_ERR_FORMAT, ix, NULL, -1, "index lists %zu tensors, the shards hold %zu", listed, held);
    if (rc == DSQ_OK && json_object_object_get_ex(root, "metadata", &meta) &&
        json_object_object_get_ex(meta, "shards", &v) &&
        (!json_object_is_type(v, json_type_int) || json_object_get_int64(v) != (int64_t)s->n))
        rc = dsq_fail(d, DSQ_ERR_FORMAT, ix, NULL, -1, "metadata.shards says %s, the weight_map names %zu files",
                      json_object_get_string(v), s->n);
    if (rc == DSQ_OK && s->n == 0) rc = dsq_fail(d, DSQ_ERR_FORMAT, ix, NULL, -1, "the weight_map is empty");
    free(dir);
    json_object_put(root);
    return rc;
}

int dsq_ctr_set_open(dsq_ctr_set **out, const char *path, dsq_diag *d)
{
    *out = NULL;
    dsq_ctr_set *s = calloc(1, sizeof *s);
    if (!s) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    int rc;
    if (dsq_ctr_file_is_dsq(path)) {   /* a set of one, named exactly as given */
        s->ctr = calloc(1, sizeof *s->ctr);
        s->path = calloc(1, sizeof *s->path);
        if (!s->ctr || !s->path || !(s->path[0] = strdup(path)))
            rc = dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
        else if ((rc = dsq_ctr_open(&s->ctr[0], path, d)) == DSQ_OK)
            s->n = 1;
        else
            free(s->path[0]);
    } else {
        s->index = index_of(path);
        rc = s->index ? open_index(s, s->index, d)
                      : dsq_fail(d, DSQ_ERR_NOT_FOUND, path, NULL, -1, "not a .dsq file, and no %s there",
                                 DSQ_CTR_INDEX_NAME);
    }
    if (rc < 0) {
        dsq_ctr_set_close(s);
        return rc;
    }
    *out = s;
    return DSQ_OK;
}
