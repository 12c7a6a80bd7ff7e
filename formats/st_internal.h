/* st_internal.h - shared internals of the safetensors reader (safetensors.c,
 * st_index.c, st_read.c, st_json.c). Not part of the public API. */
#ifndef DSQ_ST_INTERNAL_H
#define DSQ_ST_INTERNAL_H

#include "safetensors.h"
#include "dsq_file.h"

#include <json-c/json.h>

/* One tensor plus what the reader knows about it. dsq_st_get() hands out
 * &entry->t; container_of goes back (st_entry_of). */
struct st_entry {
    dsq_st_tensor t;
    int64_t scale;        /* index of the FP8 scale companion, -1 if none */
    int is_companion;     /* this is some FP8 tensor's scale */
};

struct st_shard {
    char *path;           /* as opened / as messages show it */
    dsq_map map;          /* valid when mapped */
    int mapped;
    const uint8_t *buf;   /* whole file bytes (mapping or borrowed buffer) */
    uint64_t len;
};

struct dsq_st_model {
    struct st_entry *ents;      /* sorted by name once open completes */
    size_t n, cap;
    struct st_shard *shards;
    int nshards;
    char *dir;
    char **meta_keys, **meta_vals;  /* shard 0 __metadata__, sorted by key */
    size_t nmeta;
    uint64_t total_bytes;
    unsigned flags;
};

/* ---- st_json.c: what json-c does not give us ----
 * json-c silently keeps the last of duplicate keys and does not report
 * byte offsets, so after json-c accepted a text we walk it once more: every
 * object is checked for duplicate keys (after unescaping), and the keys of
 * the top-level object are returned with their byte offsets. */
struct st_key {
    char *key;            /* unescaped, NUL-free */
    size_t off;           /* offset of the opening quote in the text */
};
/* text[0..len) must already be valid JSON (json-c accepted it) whose top
 * value is an object. On success *keys (sorted by strcmp, caller frees
 * with st_keys_free) and *nkeys hold the top-level keys. On a duplicate
 * key returns DSQ_ERR_FORMAT with *bad_key (malloc'd) and *bad_off set; a
 * NUL (\u0000) or lone surrogate in a key is DSQ_ERR_FORMAT with *bad_key
 * NULL; text json-c tolerates but JSON forbids (single-quoted keys) is
 * DSQ_ERR_JSON; DSQ_ERR_NOMEM. */
int  st_json_walk(const char *text, size_t len, struct st_key **keys,
                  size_t *nkeys, char **bad_key, size_t *bad_off);
void st_keys_free(struct st_key *keys, size_t n);

/* Parse text[0..len) with json-c in strict mode, allowing only JSON
 * whitespace after the value. On error fills d (path, file offset =
 * base_off + position) and returns DSQ_ERR_JSON. */
int  st_json_parse(const char *text, size_t len, const char *path,
                   uint64_t base_off, json_object **out, dsq_diag *d);

/* ---- safetensors.c ---- */
dsq_st_model *st_model_new(unsigned flags);
/* Add shard (takes ownership of path and of map when mapped). */
int  st_model_add_shard(dsq_st_model *m, char *path, const dsq_map *map,
                        const uint8_t *buf, uint64_t len, dsq_diag *d);
/* Parse and validate shard i's bytes, appending its tensors. Metadata is
 * kept when i == 0. */
int  st_parse_shard(dsq_st_model *m, int i, dsq_diag *d);
/* Sort by name and reject duplicate names (across shards). */
int  st_model_sort(dsq_st_model *m, dsq_diag *d);
/* st_model_sort, then pair and check FP8 scales. */
int  st_model_finish(dsq_st_model *m, dsq_diag *d);
struct st_entry *st_find_entry(const dsq_st_model *m, const char *name);
/* The entry of t if t is one of m's tensors, else NULL (stray pointers). */
const struct st_entry *st_entry_checked(const dsq_st_model *m, const dsq_st_tensor *t);

/* ---- st_index.c ---- */
int  st_open_index(dsq_st_model *m, const char *index_path, const char *dir,
                   dsq_diag *d);

static inline const struct st_entry *st_entry_of(const dsq_st_tensor *t)
{
    return (const struct st_entry *)(const void *)
        ((const char *)t - __builtin_offsetof(struct st_entry, t));
}

#endif
