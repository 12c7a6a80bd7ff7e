/* container_read.c - open and validate a .dsq file, look tensors up, read
 * payloads, and verify every checksum in parallel (docs/dsq-format.md §7). */
#include "container_layout.h"

#include "dsq_mem.h"
#include "dsq_thread.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

struct dsq_ctr {
    dsq_map map;              /* file mapping (unused for open_mem) */
    const uint8_t *base;
    uint64_t size;
    char *path;               /* for messages */
    size_t n;
    dsq_ctr_tensor_info *t;
    dsq_ctr_nameset names;
    char *meta;
    size_t meta_len;
    uint64_t index_offset;
};

static const uint8_t g_empty[DSQ_CTR_ALIGN] __attribute__((aligned(64)));

static const char *reader_name(const void *ctx, size_t i)
{
    return ((const struct dsq_ctr *)ctx)->t[i].name;
}

static int all_zero(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++) if (p[i]) return 0;
    return 1;
}

static int hash_eq(const uint8_t *p, size_t n, const uint8_t want[32], int *eq)
{
    uint8_t got[32];
    DSQ_TRY(dsq_sha256_buf(p, n, got));
    *eq = memcmp(got, want, 32) == 0;
    return DSQ_OK;
}

/* ---- open ---- */

/* Check that [a, b) is all zero (padding between regions). */
static int check_pad(const struct dsq_ctr *r, uint64_t a, uint64_t b, const char *what,
                     dsq_diag *d)
{
    for (uint64_t i = a; i < b; i++)
        if (r->base[i])
            return dsq_fail(d, DSQ_ERR_FORMAT, r->path, NULL, (int64_t)i,
                            "non-zero padding byte before the %s", what);
    return DSQ_OK;
}

static int parse_footer(struct dsq_ctr *r, dsq_ctr_footer *f, dsq_diag *d)
{
    const uint64_t min = DSQ_CTR_HEADER_SIZE + DSQ_CTR_FOOTER_SIZE;
    const char *p = r->path;
    if (r->size < 8)
        return dsq_fail(d, DSQ_ERR_TRUNCATED, p, NULL, (int64_t)r->size,
                        "truncated: %llu bytes, not even the 8-byte magic", (unsigned long long)r->size);
    if (memcmp(r->base, DSQ_CTR_MAGIC, 8) != 0)
        return dsq_fail(d, DSQ_ERR_FORMAT, p, NULL, 0, "not a dsq file (bad magic)");
    if (r->size < min)
        return dsq_fail(d, DSQ_ERR_TRUNCATED, p, NULL, (int64_t)r->size,
                        "file of %llu bytes is shorter than header + footer",
                        (unsigned long long)r->size);
    uint64_t fo = r->size - DSQ_CTR_FOOTER_SIZE;
    const uint8_t *fb = r->base + fo;
    if (memcmp(fb, DSQ_CTR_FOOTER_MAGIC, 8) != 0)
        return dsq_fail(d, DSQ_ERR_TRUNCATED, p, NULL, (int64_t)fo,
                        "no footer at end of file (truncated or incomplete write)");
    int eq;
    DSQ_TRY(hash_eq(fb, 160, fb + 160, &eq));
    if (!eq)
        return dsq_fail(d, DSQ_ERR_CHECKSUM, p, NULL, (int64_t)fo, "footer checksum mismatch");
    f->version = dsq_load_u32le(fb + 8);
    if (f->version != DSQ_CTR_VERSION)
        return dsq_fail(d, DSQ_ERR_UNSUPPORTED, p, NULL, (int64_t)fo + 8,
                        "format version %u not supported (this reader knows %u)",
                        f->version, DSQ_CTR_VERSION);
    if (dsq_load_u32le(fb + 12) != DSQ_CTR_FOOTER_SIZE)
        return dsq_fail(d, DSQ_ERR_FORMAT, p, NULL, (int64_t)fo + 12, "bad footer size");
    f->file_size = dsq_load_u64le(fb + 16);
    f->tensor_count = dsq_load_u64le(fb + 24);
    f->index_offset = dsq_load_u64le(fb + 32);
    f->index_length = dsq_load_u64le(fb + 40);
    f->meta_offset = dsq_load_u64le(fb + 48);
    f->meta_length = dsq_load_u64le(fb + 56);
    memcpy(f->header_sha256, fb + 64, 32);
    memcpy(f->index_sha256, fb + 96, 32);
    memcpy(f->meta_sha256, fb + 128, 32);
    if (f->file_size > r->size)
        return dsq_fail(d, DSQ_ERR_TRUNCATED, p, NULL, (int64_t)r->size,
                        "file is %llu bytes but the footer says %llu",
                        (unsigned long long)r->size, (unsigned long long)f->file_size);
    if (f->file_size != r->size)
        return dsq_fail(d, DSQ_ERR_FORMAT, p, NULL, (int64_t)f->file_size,
                        "file is %llu bytes but the footer says %llu",
                        (unsigned long long)r->size, (unsigned long long)f->file_size);
    return DSQ_OK;
}

static int check_header(struct dsq_ctr *r, const dsq_ctr_footer *f, dsq_diag *d)
{
    int eq;
    DSQ_TRY(hash_eq(r->base, DSQ_CTR_HEADER_SIZE, f->header_sha256, &eq));
    if (!eq) return dsq_fail(d, DSQ_ERR_CHECKSUM, r->path, NULL, 0, "header checksum mismatch");
    uint8_t want[DSQ_CTR_HEADER_SIZE];
    dsq_ctr_header_build(want);
    if (dsq_load_u32le(r->base + 8) != DSQ_CTR_VERSION)
        return dsq_fail(d, DSQ_ERR_UNSUPPORTED, r->path, NULL, 8,
                        "format version %u not supported", dsq_load_u32le(r->base + 8));
    if (dsq_load_u32le(r->base + 20) != 0)
        return dsq_fail(d, DSQ_ERR_UNSUPPORTED, r->path, NULL, 20,
                        "unknown header flags 0x%x", dsq_load_u32le(r->base + 20));
    for (size_t i = 8; i < DSQ_CTR_HEADER_SIZE; i++)
        if (r->base[i] != want[i])
            return dsq_fail(d, DSQ_ERR_FORMAT, r->path, NULL, (int64_t)i,
                            "unexpected header field value");
    return DSQ_OK;
}

/* Index and metadata sit at the exact places §1 prescribes. */
static int check_regions(struct dsq_ctr *r, const dsq_ctr_footer *f, dsq_diag *d)
{
    const char *p = r->path;
    uint64_t fo = r->size - DSQ_CTR_FOOTER_SIZE;
    if (f->index_offset < DSQ_CTR_HEADER_SIZE || f->index_offset % DSQ_CTR_ALIGN
        || f->index_offset > fo || f->index_length > fo - f->index_offset)
        return dsq_fail(d, DSQ_ERR_FORMAT, p, NULL, (int64_t)fo + 32,
                        "index range [%llu, +%llu) outside the file or misaligned",
                        (unsigned long long)f->index_offset,
                        (unsigned long long)f->index_length);
    uint64_t want_meta = dsq_ctr_align_u64(f->index_offset + f->index_length, 8);
    if (f->meta_offset != want_meta || f->meta_offset > fo || f->meta_length > fo - f->meta_offset)
        return dsq_fail(d, DSQ_ERR_FORMAT, p, NULL, (int64_t)fo + 48,
                        "metadata range [%llu, +%llu) is not where the index ends",
                        (unsigned long long)f->meta_offset, (unsigned long long)f->meta_length);
    if (dsq_ctr_align_u64(f->meta_offset + f->meta_length, 8) != fo)
        return dsq_fail(d, DSQ_ERR_FORMAT, p, NULL, (int64_t)fo,
                        "footer does not follow the metadata");
    DSQ_TRY(check_pad(r, f->index_offset + f->index_length, f->meta_offset, "metadata", d));
    DSQ_TRY(check_pad(r, f->meta_offset + f->meta_length, fo, "footer", d));
    int eq;
    DSQ_TRY(hash_eq(r->base + f->index_offset, (size_t)f->index_length, f->index_sha256, &eq));
    if (!eq)
        return dsq_fail(d, DSQ_ERR_CHECKSUM, p, NULL, (int64_t)f->index_offset,
                        "index checksum mismatch");
    DSQ_TRY(hash_eq(r->base + f->meta_offset, (size_t)f->meta_length, f->meta_sha256, &eq));
    if (!eq)
        return dsq_fail(d, DSQ_ERR_CHECKSUM, p, NULL, (int64_t)f->meta_offset,
                        "metadata checksum mismatch");
    return DSQ_OK;
}

/* One string of the string table: in range, NUL-terminated, length as said. */
static int strtab_get(struct dsq_ctr *r, const uint8_t *strtab, uint64_t strtab_size,
                      uint32_t off, uint32_t len, uint64_t rec_off, const char *what,
                      const char **out, dsq_diag *d)
{
    if ((uint64_t)off + len >= strtab_size || strtab[(uint64_t)off + len] != 0)
        return dsq_fail(d, DSQ_ERR_FORMAT, r->path, NULL, (int64_t)rec_off,
                        "%s string [%u, +%u) outside the string table or not terminated",
                        what, off, len);
    *out = (const char *)strtab + off;
    return DSQ_OK;
}

static int parse_index(struct dsq_ctr *r, const dsq_ctr_footer *f, dsq_diag *d)
{
    const char *p = r->path;
    const uint8_t *ib = r->base + f->index_offset;
    uint64_t io = f->index_offset, il = f->index_length;
    if (il < DSQ_CTR_INDEX_HDR_SIZE || memcmp(ib, DSQ_CTR_INDEX_MAGIC, 8) != 0)
        return dsq_fail(d, DSQ_ERR_FORMAT, p, NULL, (int64_t)io, "bad index magic");
    uint32_t esz = dsq_load_u32le(ib + 8);
    uint64_t count = dsq_load_u64le(ib + 16), strtab_size = dsq_load_u64le(ib + 24);
    if (esz < DSQ_CTR_ENTRY_SIZE || esz % 8)
        return dsq_fail(d, DSQ_ERR_FORMAT, p, NULL, (int64_t)io + 8, "bad index entry size %u", esz);
    if (dsq_load_u32le(ib + 12) != 0)
        return dsq_fail(d, DSQ_ERR_FORMAT, p, NULL, (int64_t)io + 12, "reserved index field not zero");
    if (count != f->tensor_count)
        return dsq_fail(d, DSQ_ERR_FORMAT, p, NULL, (int64_t)io + 16,
                        "index holds %llu tensors but the footer says %llu",
                        (unsigned long long)count, (unsigned long long)f->tensor_count);
    /* count is bounded by the (hashed) length before anything is allocated. */
    uint64_t body = il - DSQ_CTR_INDEX_HDR_SIZE;
    if (count > body / esz || strtab_size != body - count * esz || count >= UINT32_MAX)
        return dsq_fail(d, DSQ_ERR_FORMAT, p, NULL, (int64_t)io + 16,
                        "index length %llu does not match %llu entries + %llu string bytes",
                        (unsigned long long)il, (unsigned long long)count,
                        (unsigned long long)strtab_size);
    const uint8_t *strtab = ib + DSQ_CTR_INDEX_HDR_SIZE + count * esz;
    r->n = (size_t)count;
    r->t = calloc(r->n ? r->n : 1, sizeof *r->t);
    if (!r->t) return dsq_fail(d, DSQ_ERR_NOMEM, p, NULL, -1, "out of memory for %zu entries", r->n);

    uint64_t expect = DSQ_CTR_HEADER_SIZE;  /* canonical offset of the next payload */
    for (size_t i = 0; i < r->n; i++) {
        uint64_t ro = io + DSQ_CTR_INDEX_HDR_SIZE + (uint64_t)i * esz;
        const uint8_t *e = r->base + ro;
        dsq_ctr_tensor_info *t = &r->t[i];
        if (!all_zero(e + 176, 16))
            return dsq_fail(d, DSQ_ERR_FORMAT, p, NULL, (int64_t)ro + 176,
                            "reserved bytes of index entry %zu not zero", i);
        uint32_t nlen = dsq_load_u32le(e + 28), dlen = dsq_load_u32le(e + 36);
        DSQ_TRY(strtab_get(r, strtab, strtab_size, dsq_load_u32le(e + 24), nlen, ro, "name",
                           &t->name, d));
        DSQ_TRY(strtab_get(r, strtab, strtab_size, dsq_load_u32le(e + 32), dlen, ro, "dtype",
                           &t->src_dtype, d));
        t->offset = dsq_load_u64le(e + 0);
        t->stored_size = dsq_load_u64le(e + 8);
        t->raw_size = dsq_load_u64le(e + 16);
        t->role = dsq_load_u32le(e + 40);
        t->scheme = dsq_load_u32le(e + 44);
        t->compression = dsq_load_u32le(e + 48);
        t->ndim = dsq_load_u32le(e + 52);
        t->group_size = dsq_load_u32le(e + 56);
        t->pack_version = dsq_load_u32le(e + 60);
        for (int k = 0; k < DSQ_CTR_AUX; k++) t->aux[k] = dsq_load_u32le(e + 64 + 4 * k);
        for (int k = 0; k < DSQ_CTR_MAX_DIMS; k++) t->shape[k] = (int64_t)dsq_load_u64le(e + 80 + 8 * k);
        memcpy(t->sha256, e + 144, 32);
        t->index = (uint32_t)i;
        DSQ_TRY(dsq_ctr_check_info(t, nlen, dlen, DSQ_ERR_FORMAT, p, (int64_t)ro, d));
        if (dsq_ctr_nameset_find(&r->names, t->name, reader_name, r) >= 0)
            return dsq_fail(d, DSQ_ERR_FORMAT, p, t->name, (int64_t)ro, "duplicate tensor name");
        if (dsq_ctr_nameset_add(&r->names, i, t->name, reader_name, r) < 0)
            return dsq_fail(d, DSQ_ERR_NOMEM, p, NULL, -1, "out of memory");
        if (t->compression == DSQ_CTR_COMP_NONE) {
            if (t->stored_size != t->raw_size)
                return dsq_fail(d, DSQ_ERR_FORMAT, p, t->name, (int64_t)ro,
                                "uncompressed payload with stored size %llu != raw size %llu",
                                (unsigned long long)t->stored_size,
                                (unsigned long long)t->raw_size);
        } else if (t->compression == DSQ_CTR_COMP_ZSTD) {
            if (t->stored_size == 0)
                return dsq_fail(d, DSQ_ERR_FORMAT, p, t->name, (int64_t)ro, "empty zstd payload");
        } else {
            return dsq_fail(d, DSQ_ERR_UNSUPPORTED, p, t->name, (int64_t)ro + 48,
                            "unknown compression %u", t->compression);
        }
        if (t->offset != expect) {
            return dsq_fail(d, DSQ_ERR_FORMAT, p, t->name, (int64_t)ro,
                            "payload offset %llu %s (expected %llu)",
                            (unsigned long long)t->offset,
                            t->offset < expect ? "overlaps the previous payload" :
                            t->offset % DSQ_CTR_ALIGN ? "is misaligned" : "leaves a gap",
                            (unsigned long long)expect);
        }
        if (t->stored_size > io - t->offset)
            return dsq_fail(d, DSQ_ERR_FORMAT, p, t->name, (int64_t)ro,
                            "payload [%llu, +%llu) runs past the start of the index at %llu",
                            (unsigned long long)t->offset, (unsigned long long)t->stored_size,
                            (unsigned long long)io);
        expect = dsq_ctr_align_u64(t->offset + t->stored_size, DSQ_CTR_ALIGN);
    }
    if (expect != io)
        return dsq_fail(d, DSQ_ERR_FORMAT, p, NULL, (int64_t)io,
                        "payloads end at %llu but the index starts at %llu",
                        (unsigned long long)expect, (unsigned long long)io);
    return DSQ_OK;
}

static int load_metadata(struct dsq_ctr *r, const dsq_ctr_footer *f, dsq_diag *d)
{
    DSQ_TRY(dsq_ctr_check_metadata((const char *)r->base + f->meta_offset,
                                   (size_t)f->meta_length, r->path,
                                   (int64_t)f->meta_offset, d));
    r->meta = malloc((size_t)f->meta_length + 1);
    if (!r->meta) return dsq_fail(d, DSQ_ERR_NOMEM, r->path, NULL, -1, "out of memory");
    memcpy(r->meta, r->base + f->meta_offset, (size_t)f->meta_length);
    r->meta[f->meta_length] = 0;
    r->meta_len = (size_t)f->meta_length;
    return DSQ_OK;
}

static int open_common(struct dsq_ctr *r, dsq_diag *d)
{
    dsq_ctr_footer f;
    DSQ_TRY(parse_footer(r, &f, d));
    DSQ_TRY(check_header(r, &f, d));
    DSQ_TRY(check_regions(r, &f, d));
    DSQ_TRY(parse_index(r, &f, d));
    DSQ_TRY(load_metadata(r, &f, d));
    r->index_offset = f.index_offset;
    return DSQ_OK;
}

int dsq_ctr_open(dsq_ctr **out, const char *path, dsq_diag *d)
{
    *out = NULL;
    struct dsq_ctr *r = calloc(1, sizeof *r);
    if (!r) return dsq_fail(d, DSQ_ERR_NOMEM, path, NULL, -1, "out of memory");
    r->map.fd = -1;
    r->path = strdup(path);
    int rc = r->path ? DSQ_OK : dsq_fail(d, DSQ_ERR_NOMEM, path, NULL, -1, "out of memory");
    if (rc == DSQ_OK) rc = dsq_map_open(&r->map, path, d);
    if (rc == DSQ_OK) {
        r->base = r->map.data ? r->map.data : g_empty;
        r->size = r->map.size;
        rc = open_common(r, d);
    }
    if (rc < 0) { dsq_ctr_close(r); return rc; }
    *out = r;
    return DSQ_OK;
}

int dsq_ctr_open_mem(dsq_ctr **out, const void *data, size_t size, const char *name, dsq_diag *d)
{
    *out = NULL;
    if (!name) name = "<memory>";
    struct dsq_ctr *r = calloc(1, sizeof *r);
    if (!r) return dsq_fail(d, DSQ_ERR_NOMEM, name, NULL, -1, "out of memory");
    r->map.fd = -1;
    r->path = strdup(name);
    r->base = data ? data : g_empty;
    r->size = data ? size : 0;
    int rc = r->path ? open_common(r, d) : dsq_fail(d, DSQ_ERR_NOMEM, name, NULL, -1, "out of memory");
    if (rc < 0) { dsq_ctr_close(r); return rc; }
    *out = r;
    return DSQ_OK;
}

void dsq_ctr_close(dsq_ctr *r)
{
    if (!r) return;
    if (r->map.fd >= 0 || r->map.data) dsq_map_close(&r->map);
    dsq_ctr_nameset_free(&r->names);
    free(r->t);
    free(r->meta);
    free(r->path);
    free(r);
}

/* ---- queries ---- */

size_t dsq_ctr_count(const dsq_ctr *r) { return r->n; }

const dsq_ctr_tensor_info *dsq_ctr_get(const dsq_ctr *r, size_t i)
{
    return i < r->n ? &r->t[i] : NULL;
}

const dsq_ctr_tensor_info *dsq_ctr_find(const dsq_ctr *r, const char *name)
{
    int64_t i = name ? dsq_ctr_nameset_find(&r->names, name, reader_name, r) : -1;
    return i >= 0 ? &r->t[i] : NULL;
}

const char *dsq_ctr_metadata(const dsq_ctr *r, size_t *len)
{
    if (len) *len = r->meta_len;
    return r->meta;
}

uint64_t dsq_ctr_file_size(const dsq_ctr *r) { return r->size; }

void dsq_ctr_totals(const dsq_ctr *r, uint64_t *raw, uint64_t *stored)
{
    uint64_t a = 0, b = 0;
    for (size_t i = 0; i < r->n; i++) { a += r->t[i].raw_size; b += r->t[i].stored_size; }
    if (raw) *raw = a;
    if (stored) *stored = b;
}

const void *dsq_ctr_stored_ptr(const dsq_ctr *r, const dsq_ctr_tensor_info *t)
{
    return r->base + t->offset;
}

const void *dsq_ctr_raw_ptr(const dsq_ctr *r, const dsq_ctr_tensor_info *t)
{
    return t->compression == DSQ_CTR_COMP_NONE ? r->base + t->offset : NULL;
}

/* ---- read ---- */

/* The payload must be one or more regular zstd frames that tile it exactly:
 * no skippable frame (each starts with the frame magic), no trailing bytes.
 * Each frame header is parsed once; the cost is per frame, not per byte. */
static int check_frame(const dsq_ctr *r, const dsq_ctr_tensor_info *t, dsq_diag *d)
{
    const uint8_t *src = r->base + t->offset;
    uint64_t off = 0;
    do {
        uint64_t left = t->stored_size - off;
        if (left < 4 || dsq_load_u32le(src + off) != ZSTD_MAGICNUMBER)
            return dsq_fail(d, DSQ_ERR_FORMAT, r->path, t->name, (int64_t)(t->offset + off),
                            "payload is not a sequence of zstd frames");
        size_t fsz = ZSTD_findFrameCompressedSize(src + off, (size_t)left);
        if (ZSTD_isError(fsz))
            return dsq_fail(d, DSQ_ERR_FORMAT, r->path, t->name, (int64_t)(t->offset + off),
                            "payload is not a sequence of zstd frames (%s)", ZSTD_getErrorName(fsz));
        off += fsz;
    } while (off < t->stored_size);
    return DSQ_OK;
}

int dsq_ctr_read_ex(const dsq_ctr *r, const dsq_ctr_tensor_info *t,
                    void *dst, size_t dst_size, unsigned flags, dsq_diag *d)
{
    if (!t || t->index >= r->n || &r->t[t->index] != t)
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, r->path, NULL, -1, "tensor is not from this file");
    if (dst_size < t->raw_size || (!dst && t->raw_size))
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, r->path, t->name, -1,
                        "buffer of %zu bytes is smaller than the tensor's %llu",
                        dst_size, (unsigned long long)t->raw_size);
    const uint8_t *src = r->base + t->offset;
    if (t->compression == DSQ_CTR_COMP_NONE) {
        if (t->raw_size) memcpy(dst, src, (size_t)t->raw_size);
    } else {
        DSQ_TRY(check_frame(r, t, d));
        ZSTD_DCtx *dc = ZSTD_createDCtx();
        if (!dc) return dsq_fail(d, DSQ_ERR_NOMEM, r->path, t->name, -1, "out of memory");
        size_t got = ZSTD_decompressDCtx(dc, dst, (size_t)t->raw_size, src, (size_t)t->stored_size);
        ZSTD_freeDCtx(dc);
        if (ZSTD_isError(got))
            return dsq_fail(d, DSQ_ERR_FORMAT, r->path, t->name, (int64_t)t->offset,
                            "zstd payload does not decode: %s", ZSTD_getErrorName(got));
        if (got != t->raw_size)
            return dsq_fail(d, DSQ_ERR_FORMAT, r->path, t->name, (int64_t)t->offset,
                            "zstd payload decodes to %zu bytes, expected %llu",
                            got, (unsigned long long)t->raw_size);
    }
    if (!(flags & DSQ_CTR_READ_NOHASH)) {
        int eq;
        DSQ_TRY(hash_eq(dst, (size_t)t->raw_size, t->sha256, &eq));
        if (!eq)
            return dsq_fail(d, DSQ_ERR_CHECKSUM, r->path, t->name, (int64_t)t->offset,
                            "SHA-256 mismatch");
    }
    return DSQ_OK;
}

int dsq_ctr_read(const dsq_ctr *r, const dsq_ctr_tensor_info *t,
                 void *dst, size_t dst_size, dsq_diag *d)
{
    return dsq_ctr_read_ex(r, t, dst, dst_size, 0, d);
}

/* ---- verify ---- */

#define VERIFY_CHUNK (4u << 20)

typedef struct verify_job {
    const dsq_ctr *r;
    const dsq_ctr_verify_opts *o;
    atomic_size_t bad;          /* lowest failing index so far, SIZE_MAX if none */
    atomic_uint_fast64_t done;  /* stored bytes checked */
    uint64_t total;
    pthread_mutex_t mu;         /* guards diag, status and progress calls */
    dsq_diag diag;
    int status;
    ZSTD_DCtx **dctx;           /* one per pool thread */
    uint8_t **buf;              /* one VERIFY_CHUNK buffer per pool thread */
} verify_job;

static int cancelled(const verify_job *j)
{
    return j->o->cancel && *j->o->cancel;
}

static void add_progress(verify_job *j, uint64_t n)
{
    uint64_t done = atomic_fetch_add(&j->done, n) + n;
    if (j->o->progress) {
        pthread_mutex_lock(&j->mu);
        j->o->progress(j->o->progress_ctx, done, j->total);
        pthread_mutex_unlock(&j->mu);
    }
}

static int verify_one(verify_job *j, size_t i, int tid, dsq_diag *d)
{
    const dsq_ctr *r = j->r;
    const dsq_ctr_tensor_info *t = &r->t[i];
    const uint8_t *src = r->base + t->offset;
    dsq_sha256 h;
    DSQ_TRY(dsq_sha256_init(&h));
    int rc = DSQ_OK;
    if (t->compression == DSQ_CTR_COMP_NONE) {
        for (uint64_t o = 0; o < t->raw_size && rc == DSQ_OK; o += VERIFY_CHUNK) {
            size_t k = (size_t)(t->raw_size - o < VERIFY_CHUNK ? t->raw_size - o : VERIFY_CHUNK);
            dsq_sha256_update(&h, src + o, k);
            add_progress(j, k);
            if (cancelled(j)) rc = DSQ_ERR_INTERRUPTED;
        }
    } else if ((rc = check_frame(r, t, d)) == DSQ_OK) {
        ZSTD_DCtx *dc = j->dctx[tid];
        ZSTD_DCtx_reset(dc, ZSTD_reset_session_only);
        ZSTD_inBuffer in = { src, 0, 0 };
        uint64_t produced = 0;
        size_t ret = 1;
        while (rc == DSQ_OK && in.pos < t->stored_size) {
            size_t before = in.pos;
            in.size = (size_t)(t->stored_size - in.pos < VERIFY_CHUNK ? t->stored_size
                                                                       : in.pos + VERIFY_CHUNK);
            ZSTD_outBuffer out = { j->buf[tid], VERIFY_CHUNK, 0 };
            ret = ZSTD_decompressStream(dc, &out, &in);
            if (ZSTD_isError(ret)) {
                rc = dsq_fail(d, DSQ_ERR_FORMAT, r->path, t->name, (int64_t)t->offset,
                              "zstd payload does not decode: %s", ZSTD_getErrorName(ret));
                break;
            }
            produced += out.pos;
            if (produced > t->raw_size) {
                rc = dsq_fail(d, DSQ_ERR_FORMAT, r->path, t->name, (int64_t)t->offset,
                              "zstd payload decodes to more than %llu bytes",
                              (unsigned long long)t->raw_size);
                break;
            }
            dsq_sha256_update(&h, out.dst, out.pos);
            add_progress(j, in.pos - before);
            if (cancelled(j)) rc = DSQ_ERR_INTERRUPTED;
            /* ret == 0 ends a frame; the loop goes on while frames follow. */
        }
        /* Drain output still buffered inside zstd once all input is in. */
        while (rc == DSQ_OK && ret != 0) {
            ZSTD_outBuffer out = { j->buf[tid], VERIFY_CHUNK, 0 };
            ret = ZSTD_decompressStream(dc, &out, &in);
            if (ZSTD_isError(ret) || (out.pos == 0 && ret != 0)) {
                rc = dsq_fail(d, DSQ_ERR_FORMAT, r->path, t->name, (int64_t)t->offset,
                              "zstd payload is incomplete");
                break;
            }
            produced += out.pos;
            if (produced > t->raw_size) {
                rc = dsq_fail(d, DSQ_ERR_FORMAT, r->path, t->name, (int64_t)t->offset,
                              "zstd payload decodes to more than %llu bytes",
                              (unsigned long long)t->raw_size);
                break;
            }
            dsq_sha256_update(&h, out.dst, out.pos);
        }
        if (rc == DSQ_OK && produced != t->raw_size)
            rc = dsq_fail(d, DSQ_ERR_FORMAT, r->path, t->name, (int64_t)t->offset,
                          "zstd payload decodes to %llu bytes, expected %llu",
                          (unsigned long long)produced, (unsigned long long)t->raw_size);
    }
    if (rc < 0) { dsq_sha256_release(&h); return rc; }
    uint8_t got[32];
    dsq_sha256_final(&h, got);
    if (memcmp(got, t->sha256, 32) != 0)
        return dsq_fail(d, DSQ_ERR_CHECKSUM, r->path, t->name, (int64_t)t->offset,
                        "SHA-256 mismatch in payload [%llu, +%llu)",
                        (unsigned long long)t->offset, (unsigned long long)t->stored_size);
    /* Padding after this payload, up to the next aligned offset. */
    uint64_t end = t->offset + t->stored_size;
    uint64_t next = dsq_ctr_align_u64(end, DSQ_CTR_ALIGN);
    for (uint64_t o = end; o < next; o++)
        if (r->base[o])
            return dsq_fail(d, DSQ_ERR_FORMAT, r->path, t->name, (int64_t)o,
                            "non-zero padding byte after the payload");
    return DSQ_OK;
}

static void verify_task(void *ctx, size_t i, int tid)
{
    verify_job *j = ctx;
    /* A lower index already failed: this one cannot be the first bad. */
    if (i > atomic_load(&j->bad) || cancelled(j)) return;
    dsq_diag local;
    dsq_diag_clear(&local);
    int rc = verify_one(j, i, tid, &local);
    if (rc == DSQ_OK) return;
    pthread_mutex_lock(&j->mu);
    if (rc == DSQ_ERR_INTERRUPTED) {
        if (!j->status) j->status = rc;
    } else if (i < atomic_load(&j->bad)) {
        atomic_store(&j->bad, i);
        j->diag = local;
        j->status = rc;
    }
    pthread_mutex_unlock(&j->mu);
}

int dsq_ctr_verify_ex(const dsq_ctr *r, const dsq_ctr_verify_opts *o,
                      size_t *bad_index, dsq_diag *d)
{
    if (bad_index) *bad_index = SIZE_MAX;
    dsq_ctr_verify_opts def = { 0 };
    if (!o) o = &def;
    int nthreads = o->nthreads > 0 ? o->nthreads : dsq_cpu_count();
    if ((size_t)nthreads > r->n) nthreads = r->n ? (int)r->n : 1;
    dsq_pool *pool = nthreads > 1 ? dsq_pool_create(nthreads) : NULL;
    int nt = dsq_pool_size(pool);
    verify_job j = { .r = r, .o = o, .status = DSQ_OK };
    atomic_init(&j.bad, SIZE_MAX);
    atomic_init(&j.done, 0);
    dsq_ctr_totals(r, NULL, &j.total);
    pthread_mutex_init(&j.mu, NULL);
    dsq_diag_clear(&j.diag);
    j.dctx = calloc((size_t)nt, sizeof *j.dctx);
    j.buf = calloc((size_t)nt, sizeof *j.buf);
    int rc = (j.dctx && j.buf) ? DSQ_OK : DSQ_ERR_NOMEM;
    for (int k = 0; rc == DSQ_OK && k < nt; k++) {
        j.dctx[k] = ZSTD_createDCtx();
        j.buf[k] = malloc(VERIFY_CHUNK);
        if (!j.dctx[k] || !j.buf[k]) rc = DSQ_ERR_NOMEM;
    }
    if (rc == DSQ_OK) {
        dsq_pool_run(pool, r->n, verify_task, &j);
        rc = j.status;
        if (rc < 0 && rc != DSQ_ERR_INTERRUPTED) {
            if (bad_index) *bad_index = atomic_load(&j.bad);
            if (d && !d->status) *d = j.diag;
        } else if (rc == DSQ_ERR_INTERRUPTED || cancelled(&j)) {
            rc = dsq_fail(d, DSQ_ERR_INTERRUPTED, r->path, NULL, -1, "verification interrupted");
        }
    } else {
        rc = dsq_fail(d, DSQ_ERR_NOMEM, r->path, NULL, -1, "out of memory");
    }
    for (int k = 0; k < nt; k++) {
        if (j.dctx && j.dctx[k]) ZSTD_freeDCtx(j.dctx[k]);
        if (j.buf) free(j.buf[k]);
    }
    free(j.dctx);
    free(j.buf);
    pthread_mutex_destroy(&j.mu);
    dsq_pool_free(pool);
    return rc;
}

int dsq_ctr_verify(const dsq_ctr *r, int nthreads, size_t *bad_index, dsq_diag *d)
{
    dsq_ctr_verify_opts o = { .nthreads = nthreads };
    return dsq_ctr_verify_ex(r, &o, bad_index, d);
}
