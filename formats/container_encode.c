/* container_encode.c - dsq_ctr_encode: hash + optional zstd, thread-safe.
 *
 * Each thread keeps one ZSTD_CCtx (thread-local, freed at thread exit):
 * creating a context per tensor would re-allocate its match tables tens of
 * thousands of times for a MoE model's many small tensors. */
#include "container_layout.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

static pthread_key_t g_cctx_key;
static pthread_once_t g_cctx_once = PTHREAD_ONCE_INIT;
static int g_cctx_key_ok;

static void cctx_free(void *p) { ZSTD_freeCCtx(p); }
static void cctx_key_init(void) { g_cctx_key_ok = pthread_key_create(&g_cctx_key, cctx_free) == 0; }

static ZSTD_CCtx *thread_cctx(int *owned)
{
    pthread_once(&g_cctx_once, cctx_key_init);
    *owned = 0;
    ZSTD_CCtx *c = g_cctx_key_ok ? pthread_getspecific(g_cctx_key) : NULL;
    if (c) return c;
    c = ZSTD_createCCtx();
    if (!c) return NULL;
    if (g_cctx_key_ok && pthread_setspecific(g_cctx_key, c) == 0) return c;
    *owned = 1;  /* no TLS slot: caller frees it */
    return c;
}

/* Frame parameters shared by the one-shot and the streaming path: content
 * size in the header, no zstd checksum (SHA-256 covers the payload), single
 * thread (so the output is deterministic). */
int dsq_ctr_cctx_setup(void *cctx, int level)
{
    ZSTD_CCtx *c = cctx;
    ZSTD_CCtx_reset(c, ZSTD_reset_session_and_parameters);
    if (ZSTD_isError(ZSTD_CCtx_setParameter(c, ZSTD_c_compressionLevel, level))) return -1;
    if (ZSTD_isError(ZSTD_CCtx_setParameter(c, ZSTD_c_checksumFlag, 0))) return -1;
    if (ZSTD_isError(ZSTD_CCtx_setParameter(c, ZSTD_c_contentSizeFlag, 1))) return -1;
    return 0;
}

void dsq_ctr_blob_free(dsq_ctr_blob *b)
{
    if (!b) return;
    free(b->owned);
    memset(b, 0, sizeof *b);
}

size_t dsq_ctr_encode_bound(size_t n)
{
    size_t b = ZSTD_compressBound(n);
    return b > n ? b : n ? n : 1;
}

/* Hash, then compress into dst (cap bytes, >= the bound) or copy raw into it.
 * Fills everything in *out but owned. */
static int encode_to(const void *raw, size_t n, int zstd_level, uint8_t *dst, size_t cap,
                     dsq_ctr_blob *out, dsq_diag *d)
{
    int rc = dsq_sha256_buf(raw, n, out->sha256);
    if (rc < 0) return dsq_fail(d, rc, NULL, NULL, -1, "cannot start SHA-256");
    out->raw_size = n;
    out->data = dst;
    if (zstd_level > 0 && n > 0) {
        size_t z;   /* one frame, as a streamed piece gets (cap >= the bound) */
        DSQ_TRY(dsq_ctr_zstd_frame(raw, n, zstd_level, dst, cap, &z, d));
        if (dsq_ctr_compression_pays(z, n)) {
            out->stored_size = z;
            out->compression = DSQ_CTR_COMP_ZSTD;
            return DSQ_OK;
        }
        /* Not worth it: the raw bytes instead (cap >= n). */
    }
    if (n) memcpy(dst, raw, n);
    out->stored_size = n;
    out->compression = DSQ_CTR_COMP_NONE;
    return DSQ_OK;
}

int dsq_ctr_zstd_frame(const void *raw, size_t n, int zstd_level, void *dst, size_t dst_cap,
                      size_t *stored, dsq_diag *d)
{
    *stored = 0;
    if (zstd_level < 1 || zstd_level > DSQ_CTR_LEVEL_MAX)
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "zstd level %d outside 1..%d",
                        zstd_level, DSQ_CTR_LEVEL_MAX);
    if ((!raw && n) || !dst || dst_cap < dsq_ctr_encode_bound(n))
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1,
                        "no input, or an output buffer below the bound");
    int owned;
    ZSTD_CCtx *c = thread_cctx(&owned);
    if (!c) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    size_t z = dsq_ctr_cctx_setup(c, zstd_level) == 0 ? ZSTD_compress2(c, dst, dst_cap, raw, n)
                                                       : (size_t)-1;
    if (owned) ZSTD_freeCCtx(c);
    if (ZSTD_isError(z))
        return dsq_fail(d, DSQ_ERR_INTERNAL, NULL, NULL, -1, "zstd compression failed: %s",
                        ZSTD_getErrorName(z));
    *stored = z;
    return DSQ_OK;
}

static int encode_args(const void *raw, size_t n, int zstd_level, dsq_diag *d)
{
    if (zstd_level < 0 || zstd_level > DSQ_CTR_LEVEL_MAX)
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1,
                        "zstd level %d outside 0..%d", zstd_level, DSQ_CTR_LEVEL_MAX);
    if (!raw && n)
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "NULL buffer of %zu bytes", n);
    return DSQ_OK;
}

int dsq_ctr_encode_into(const void *raw, size_t n, int zstd_level, void *dst, size_t dst_cap,
                        dsq_ctr_blob *out, dsq_diag *d)
{
    memset(out, 0, sizeof *out);
    DSQ_TRY(encode_args(raw, n, zstd_level, d));
    if (!dst || dst_cap < dsq_ctr_encode_bound(n))
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1,
                        "output buffer of %zu bytes below the bound %zu", dst_cap,
                        dsq_ctr_encode_bound(n));
    int rc = encode_to(raw, n, zstd_level, dst, dst_cap, out, d);
    if (rc < 0) memset(out, 0, sizeof *out);
    return rc;
}

int dsq_ctr_encode(const void *raw, size_t n, int zstd_level, dsq_ctr_blob *out, dsq_diag *d)
{
    memset(out, 0, sizeof *out);
    DSQ_TRY(encode_args(raw, n, zstd_level, d));
    /* Compressing needs the bound; a raw copy only n bytes. */
    size_t cap = zstd_level > 0 && n > 0 ? dsq_ctr_encode_bound(n) : n ? n : 1;
    uint8_t *buf = malloc(cap);
    if (!buf) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory (%zu bytes)", cap);
    int rc = encode_to(raw, n, zstd_level, buf, cap, out, d);
    if (rc < 0) {
        free(buf);
        memset(out, 0, sizeof *out);
        return rc;
    }
    uint8_t *shrunk = realloc(buf, out->stored_size ? out->stored_size : 1);  /* the bound's slack */
    if (shrunk) buf = shrunk;
    out->owned = buf;
    out->data = buf;
    return DSQ_OK;
}
