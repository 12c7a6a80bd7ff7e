/* container_layout.h - internal to the container: on-disk encodings shared by
 * the writer and the reader (docs/dsq-format.md gives the byte layout).
 * Not a public header: include container.h instead. */
#ifndef DSQ_CONTAINER_LAYOUT_H
#define DSQ_CONTAINER_LAYOUT_H

#include "container.h"

#include <stdint.h>
#include <stddef.h>

/* Footer fields (§6). */
typedef struct dsq_ctr_footer {
    uint32_t version;
    uint64_t file_size;
    uint64_t tensor_count;
    uint64_t index_offset, index_length;
    uint64_t meta_offset, meta_length;
    uint8_t  header_sha256[DSQ_SHA256_LEN];
    uint8_t  index_sha256[DSQ_SHA256_LEN];
    uint8_t  meta_sha256[DSQ_SHA256_LEN];
} dsq_ctr_footer;

/* The one valid v1 header. */
void dsq_ctr_header_build(uint8_t out[DSQ_CTR_HEADER_SIZE]);
/* Serialise f and append its self-hash. Returns DSQ_OK or DSQ_ERR_NOMEM. */
int  dsq_ctr_footer_build(const dsq_ctr_footer *f, uint8_t out[DSQ_CTR_FOOTER_SIZE]);

/* Index record (§4.2) for t with the given string-table offsets. */
void dsq_ctr_record_build(const dsq_ctr_tensor_info *t, uint32_t name_off,
                          uint32_t name_len, uint32_t dtype_off, uint32_t dtype_len,
                          uint8_t out[DSQ_CTR_ENTRY_SIZE]);

/* Checks shared by writer input and reader records: name length/NUL,
 * dtype length, ndim, dims >= 0 with unused dims 0, numel fits int64.
 * Fails with status 'bad' (DSQ_ERR_FORMAT for files, DSQ_ERR_INVALID_ARG
 * for writer input), naming path/offset. */
int  dsq_ctr_check_info(const dsq_ctr_tensor_info *t, size_t name_len,
                        size_t dtype_len, int bad, const char *path, int64_t offset,
                        dsq_diag *d);

/* Metadata must be one JSON object (UTF-8, nothing but whitespace after). */
int  dsq_ctr_check_metadata(const char *json, size_t len, const char *path,
                            int64_t offset, dsq_diag *d);

/* A tensor held by the writer: info plus the strings it owns, and the
 * SHA-256 of the stored bytes (resume journal only). */
typedef struct dsq_ctr_wentry {
    dsq_ctr_tensor_info t;   /* t.name / t.src_dtype point at name / dtype */
    char *name;
    char *dtype;
    uint8_t stored_sha256[DSQ_SHA256_LEN];
} dsq_ctr_wentry;

/* Resume journal (container_journal.c, format in docs/dsq-format.md §9).
 * save: atomically replace path with entries e[0..n). load: parse path into
 * a fresh array (*e, *n; free with dsq_ctr_wentries_free) and return the
 * fingerprint and header hash it records; DSQ_ERR_STATE if malformed. */
int  dsq_ctr_journal_save(const char *path, const char *fingerprint,
                          const uint8_t header_sha256[DSQ_SHA256_LEN],
                          const dsq_ctr_wentry *e, size_t n, uint64_t end, dsq_diag *d);
int  dsq_ctr_journal_load(const char *path, char **fingerprint,
                          uint8_t header_sha256[DSQ_SHA256_LEN],
                          dsq_ctr_wentry **e, size_t *n, dsq_diag *d);
void dsq_ctr_wentries_free(dsq_ctr_wentry *e, size_t n);

/* Set the zstd frame parameters every payload uses on a ZSTD_CCtx *
 * (level, content size on, checksum off, single thread). 0 or -1. */
int  dsq_ctr_cctx_setup(void *cctx, int level);

/* The "pays" rule of dsq_ctr_encode: stored < 98% of raw. */
static inline int dsq_ctr_compression_pays(uint64_t stored, uint64_t raw)
{
    /* 128-bit product: raw may be near 2^64 in a hostile caller's hands. */
    return (unsigned __int128)stored * 50u < (unsigned __int128)raw * 49u;
}

static inline uint64_t dsq_ctr_align_u64(uint64_t x, uint64_t a)
{
    return (x + (a - 1)) / a * a;
}

/* FNV-1a, for the name hash tables. */
static inline uint64_t dsq_ctr_hash_name(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

/* Open-addressing name set over an external array of names: slots hold
 * index + 1 (0 = empty). Capacity is a power of two, load <= 1/2. */
typedef struct dsq_ctr_nameset {
    uint32_t *slot;
    size_t cap;     /* power of two, or 0 */
    size_t used;
} dsq_ctr_nameset;

/* Look name up; names(ctx, i) gives the i-th name. Returns index or -1. */
int64_t dsq_ctr_nameset_find(const dsq_ctr_nameset *s, const char *name,
                             const char *(*names)(const void *ctx, size_t i),
                             const void *ctx);
/* Insert index i (name not present). Grows as needed; DSQ_OK or NOMEM. */
int     dsq_ctr_nameset_add(dsq_ctr_nameset *s, size_t i, const char *name,
                            const char *(*names)(const void *ctx, size_t i),
                            const void *ctx);
void    dsq_ctr_nameset_free(dsq_ctr_nameset *s);

#endif
