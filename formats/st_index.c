/* st_index.c - sharded checkpoints: model.safetensors.index.json.
 *
 * The index is {"metadata": {...}, "weight_map": {tensor: shard file}}.
 * total_size is not trusted (DeepSeek's converter writes empty metadata).
 * Every shard is parsed and validated like a single file, then the shards'
 * contents are checked against the weight_map in both directions. */
#include "st_internal.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define INDEX_MAX_BYTES (1u << 30)

struct wm_entry {
    const char *name;     /* borrowed from the json object */
    const char *file;
    int shard;
};

static int wm_cmp(const void *a, const void *b)
{
    return strcmp(((const struct wm_entry *)a)->name, ((const struct wm_entry *)b)->name);
}

static int str_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int bad_shard_name(const char *s)
{
    if (!*s || s[0] == '/') return 1;
    for (const char *p = s; *p; ) {           /* reject any ".." component */
        const char *e = strchr(p, '/');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (n == 2 && p[0] == '.' && p[1] == '.') return 1;
        if (!e) break;
        p = e + 1;
    }
    return 0;
}

/* "<prefix>-NNNNN-of-MMMMM.safetensors" -> "<prefix>-of-MMMMM" (malloc'd),
 * NULL if the name does not follow the shard pattern. */
static char *shard_family(const char *name)
{
    static const char ext[] = ".safetensors";
    size_t n = strlen(name), ne = sizeof ext - 1;
    if (n <= ne || strcmp(name + n - ne, ext) != 0) return NULL;
    n -= ne;
    size_t k = n;
    while (k > 0 && isdigit((unsigned char)name[k - 1])) k--;
    if (k == n || k < 4 || memcmp(name + k - 4, "-of-", 4) != 0) return NULL;
    size_t total = k;                       /* digits of MMMMM start here */
    size_t j = k - 4;
    size_t idx_end = j;
    while (j > 0 && isdigit((unsigned char)name[j - 1])) j--;
    if (j == idx_end || j == 0 || name[j - 1] != '-') return NULL;
    size_t plen = j - 1;
    size_t tlen = n - total;
    char *f = malloc(plen + 4 + tlen + 1);
    if (!f) return NULL;
    memcpy(f, name, plen);
    memcpy(f + plen, "-of-", 4);
    memcpy(f + plen + 4, name + total, tlen);
    f[plen + 4 + tlen] = 0;
    return f;
}

/* A file in dir that looks like a sibling of a referenced shard but that
 * the weight_map never names means the index and the files disagree. */
static int check_unreferenced(const char *dir, char **files, int nfiles, const char *index_path,
                              dsq_diag *d)
{
    DIR *dh = opendir(dir);
    if (!dh) return dsq_fail_errno(d, errno, dir, "cannot open directory");
    int rc = DSQ_OK;
    struct dirent *de;
    while (rc == DSQ_OK && (de = readdir(dh))) {
        if (de->d_name[0] == '.') continue;
        const char *nm = de->d_name;
        if (bsearch(&nm, files, (size_t)nfiles, sizeof *files, str_cmp)) continue;
        char *fam = shard_family(nm);
        if (!fam) continue;
        for (int i = 0; i < nfiles && rc == DSQ_OK; i++) {
            char *f2 = shard_family(files[i]);
            if (f2 && strcmp(f2, fam) == 0)
                rc = dsq_fail(d, DSQ_ERR_FORMAT, index_path, NULL, -1,
                              "shard '%s' is in the directory but not in the weight_map", nm);
            free(f2);
        }
        free(fam);
    }
    closedir(dh);
    return rc;
}

int st_open_index(dsq_st_model *m, const char *index_path, const char *dir, dsq_diag *d)
{
    char *text = NULL;
    size_t len = 0;
    json_object *root = NULL;
    struct wm_entry *wm = NULL;
    char **files = NULL;
    struct st_key *keys = NULL;
    size_t nkeys = 0, nwm = 0;
    int nfiles = 0;

    int rc = dsq_read_file(index_path, INDEX_MAX_BYTES, &text, &len, d);
    if (rc < 0) return rc;
    rc = st_json_parse(text, len, index_path, 0, &root, d);
    if (rc < 0) goto out;
    if (!json_object_is_type(root, json_type_object)) {
        rc = dsq_fail(d, DSQ_ERR_FORMAT, index_path, NULL, 0, "index is not a json object");
        goto out;
    }
    char *bad = NULL;
    size_t bad_off = 0;
    rc = st_json_walk(text, len, &keys, &nkeys, &bad, &bad_off);
    if (rc < 0) {
        if (rc == DSQ_ERR_NOMEM) rc = dsq_fail(d, rc, index_path, NULL, -1, "out of memory");
        else if (bad) rc = dsq_fail(d, rc, index_path, bad, (int64_t)bad_off,
                                    "'%s' is listed twice in the index", bad);
        else if (rc == DSQ_ERR_JSON)
            rc = dsq_fail(d, rc, index_path, NULL, (int64_t)bad_off, "invalid json in index");
        else rc = dsq_fail(d, rc, index_path, NULL, (int64_t)bad_off,
                           "key with a nul character or a lone surrogate in index");
        free(bad);
        goto out;
    }
    json_object *jwm;
    if (!json_object_object_get_ex(root, "weight_map", &jwm) ||
        !json_object_is_type(jwm, json_type_object)) {
        rc = dsq_fail(d, DSQ_ERR_FORMAT, index_path, NULL, 0, "index has no weight_map object");
        goto out;
    }
    size_t n = (size_t)json_object_object_length(jwm);
    if (n == 0) {
        rc = dsq_fail(d, DSQ_ERR_FORMAT, index_path, NULL, 0, "weight_map is empty");
        goto out;
    }
    wm = calloc(n, sizeof *wm);
    files = calloc(n, sizeof *files);
    if (!wm || !files) { rc = dsq_fail(d, DSQ_ERR_NOMEM, index_path, NULL, -1, "out of memory"); goto out; }
    json_object_object_foreach(jwm, key, val) {
        if (!json_object_is_type(val, json_type_string) ||
            (size_t)json_object_get_string_len(val) != strlen(json_object_get_string(val)) ||
            bad_shard_name(json_object_get_string(val))) {
            rc = dsq_fail(d, DSQ_ERR_FORMAT, index_path, key, -1,
                          "weight_map entry of '%s' is not a relative shard file name", key);
            goto out;
        }
        wm[nwm].name = key;
        wm[nwm].file = json_object_get_string(val);
        files[nwm] = (char *)wm[nwm].file;
        nwm++;
    }
    qsort(wm, nwm, sizeof *wm, wm_cmp);
    qsort(files, nwm, sizeof *files, str_cmp);
    for (size_t i = 0; i < nwm; i++)
        if (nfiles == 0 || strcmp(files[nfiles - 1], files[i]) != 0) files[nfiles++] = files[i];
    for (size_t i = 0; i < nwm; i++) {
        char **f = bsearch(&wm[i].file, files, (size_t)nfiles, sizeof *files, str_cmp);
        wm[i].shard = (int)(f - files);
    }

    for (int s = 0; s < nfiles; s++) {
        char *p = dsq_path_join(dir, files[s]);
        if (!p) { rc = dsq_fail(d, DSQ_ERR_NOMEM, index_path, NULL, -1, "out of memory"); goto out; }
        if (!dsq_path_exists(p)) {
            const char *first = NULL;
            for (size_t i = 0; i < nwm && !first; i++) if (wm[i].shard == s) first = wm[i].name;
            rc = dsq_fail(d, DSQ_ERR_NOT_FOUND, p, first, -1,
                          "shard '%s' named in '%s' does not exist", files[s], index_path);
            free(p);
            goto out;
        }
        dsq_map map;
        rc = dsq_map_open(&map, p, d);
        if (rc < 0) { free(p); goto out; }
        rc = st_model_add_shard(m, p, &map, NULL, 0, d);
        if (rc < 0) goto out;
        rc = st_parse_shard(m, s, d);
        if (rc < 0) goto out;
    }
    rc = st_model_sort(m, d);
    if (rc < 0) goto out;

    /* both directions: shard contents vs weight_map (both sorted by name) */
    size_t i = 0, j = 0;
    while (i < m->n || j < nwm) {
        int c = i >= m->n ? 1 : j >= nwm ? -1 : strcmp(m->ents[i].t.name, wm[j].name);
        if (c < 0) {
            const dsq_st_tensor *t = &m->ents[i].t;
            rc = dsq_fail(d, DSQ_ERR_FORMAT, m->shards[t->shard].path, t->name,
                          (int64_t)t->file_offset, "tensor '%s' is not in the weight_map of '%s'",
                          t->name, index_path);
            goto out;
        }
        if (c > 0) {
            rc = dsq_fail(d, DSQ_ERR_NOT_FOUND, m->shards[wm[j].shard].path, wm[j].name, -1,
                          "tensor '%s' listed in the weight_map is missing from shard '%s'",
                          wm[j].name, wm[j].file);
            goto out;
        }
        const dsq_st_tensor *t = &m->ents[i].t;
        if (t->shard != wm[j].shard) {
            rc = dsq_fail(d, DSQ_ERR_FORMAT, m->shards[t->shard].path, t->name,
                          (int64_t)t->file_offset,
                          "tensor '%s' is in shard '%s' but the weight_map names '%s'",
                          t->name, files[t->shard], wm[j].file);
            goto out;
        }
        i++; j++;
    }
    rc = check_unreferenced(dir, files, nfiles, index_path, d);
out:
    st_keys_free(keys, nkeys);
    free(files);
    free(wm);
    json_object_put(root);
    free(text);
    return rc;
}
