/* test_container.c - .dsq container: round trip, corruption detection,
 * hostile layouts, atomic/interrupted writes, resume, disk full. */
#include "dsq_test.h"

#include "container.h"
#include "dsq_file.h"
#include "dsq_mem.h"
#include "dsq_sha256.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zstd.h>

/* ---- helpers ---- */

static char *g_dir;

static char *tpath(const char *name)
{
    return dsq_path_join(g_dir, name);
}

static int setup(void **state)
{
    (void)state;
    g_dir = dsq_test_tmpdir();
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    dsq_test_rmtree(g_dir);
    free(g_dir);
    g_dir = NULL;
    return 0;
}

static uint8_t *read_all(const char *path, size_t *n)
{
    char *buf = NULL;
    assert_int_equal(dsq_read_file(path, 1u << 30, &buf, n, NULL), DSQ_OK);
    return (uint8_t *)buf;
}

/* Deterministic pseudo-random bytes (xorshift). */
static void fill_random(uint8_t *p, size_t n, uint64_t seed)
{
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        p[i] = (uint8_t)(x >> 24);
    }
}

/* Compressible "BF16-like" bytes: small values, repeating high bytes. */
static void fill_smooth(uint8_t *p, size_t n, uint64_t seed)
{
    fill_random(p, n, seed);
    for (size_t i = 0; i < n; i++) if (i % 2) p[i] = 0x3c; else p[i] &= 0x0f;
}

static dsq_ctr_tensor_info mkinfo(const char *name, uint32_t role, int64_t d0, int64_t d1)
{
    dsq_ctr_tensor_info t;
    memset(&t, 0, sizeof t);
    t.name = name;
    t.src_dtype = "BF16";
    t.role = role;
    t.scheme = 7;
    t.ndim = d1 ? 2 : 1;
    t.shape[0] = d0;
    if (d1) t.shape[1] = d1;
    t.group_size = 128;
    t.pack_version = 1;
    t.aux[0] = 42;
    return t;
}

#define N_STD 8
static const char *const std_names[N_STD] = {
    "model.embed_tokens.weight",   /* streamed zstd */
    "model.layers.0.input_layernorm.weight", /* raw, level 0 */
    "model.layers.0.self_attn.q_proj.weight", /* compressible, level 3 */
    "model.layers.0.mlp.experts.0.up_proj.weight", /* random, level 3 -> raw */
    "empty",                        /* zero bytes */
    "scalar",                       /* rank 0 */
    "model.layers.0.mlp.gate.weight", /* streamed raw */
    "lm_head.weight",               /* blob via encode on "another thread" */
};

/* The standard payload of tensor i (deterministic). */
static size_t std_size(int i)
{
    static const size_t sz[N_STD] = { 300000, 4096, 65536, 20000, 0, 4, 10001, 33333 };
    return sz[i];
}

static uint8_t *std_bytes(int i)
{
    size_t n = std_size(i);
    uint8_t *p = malloc(n ? n : 1);
    if (i == 3) fill_random(p, n, (uint64_t)i + 1); else fill_smooth(p, n, (uint64_t)i + 1);
    return p;
}

static const char *std_meta = "{\"recipe\": {\"default\": \"w8a8\"}, \"tool\": \"test\", \"x\": [1,2,3]}";

/* Write tensors [from, to) of the standard set into an open writer. */
static void write_std_range(dsq_ctr_writer *w, int from, int to)
{
    dsq_diag d;
    dsq_diag_clear(&d);
    for (int i = from; i < to; i++) {
        uint8_t *b = std_bytes(i);
        size_t n = std_size(i);
        dsq_ctr_tensor_info t = mkinfo(std_names[i], (uint32_t)i, (int64_t)n / 2, 0);
        if (i == 5) { t.ndim = 0; t.shape[0] = 0; }
        if (i == 4) t.shape[0] = 0;
        if (i == 0 || i == 6) {
            t.raw_size = i == 0 ? n : 0;
            assert_int_equal(dsq_ctr_writer_begin(w, &t, i == 0 ? 3 : 0, &d), DSQ_OK);
            for (size_t o = 0; o < n; o += 7777) {
                size_t k = n - o < 7777 ? n - o : 7777;
                assert_int_equal(dsq_ctr_writer_chunk(w, b + o, k, &d), DSQ_OK);
            }
            assert_int_equal(dsq_ctr_writer_end(w, &d), DSQ_OK);
        } else if (i == 7) {
            dsq_ctr_blob blob;
            assert_int_equal(dsq_ctr_encode(b, n, 1, &blob, &d), DSQ_OK);
            assert_int_equal(dsq_ctr_writer_add_blob(w, &t, &blob, &d), DSQ_OK);
            dsq_ctr_blob_free(&blob);
        } else {
            int level = i == 1 ? 0 : 3;
            assert_int_equal(dsq_ctr_writer_add(w, &t, b, n, level, &d), DSQ_OK);
        }
        free(b);
    }
}

static void write_std(const char *path)
{
    dsq_ctr_writer *w;
    dsq_diag d;
    dsq_diag_clear(&d);
    assert_int_equal(dsq_ctr_writer_open(&w, path, DSQ_OUT_OVERWRITE, &d), DSQ_OK);
    write_std_range(w, 0, N_STD);
    assert_int_equal(dsq_ctr_writer_set_metadata(w, std_meta, &d), DSQ_OK);
    assert_int_equal(dsq_ctr_writer_finish(w, &d), DSQ_OK);
}

/* After editing header/index/metadata bytes, recompute the hashes in the
 * footer so the edit reaches the structural checks behind them. */
static void reseal(uint8_t *b, size_t n)
{
    uint8_t *f = b + n - DSQ_CTR_FOOTER_SIZE;
    uint64_t io = dsq_load_u64le(f + 32), il = dsq_load_u64le(f + 40);
    uint64_t mo = dsq_load_u64le(f + 48), ml = dsq_load_u64le(f + 56);
    dsq_sha256_buf(b, DSQ_CTR_HEADER_SIZE, f + 64);
    if (il <= n && io <= n - il) dsq_sha256_buf(b + io, il, f + 96);
    if (ml <= n && mo <= n - ml) dsq_sha256_buf(b + mo, ml, f + 128);
    dsq_sha256_buf(f, 160, f + 160);
}

static int open_mem_rc(const uint8_t *b, size_t n, dsq_diag *d)
{
    dsq_ctr *r = NULL;
    int rc = dsq_ctr_open_mem(&r, b, n, "mem", d);
    if (rc == DSQ_OK) assert_non_null(r); else assert_null(r);
    dsq_ctr_close(r);
    return rc;
}

/* ---- round trip ---- */

static void test_round_trip(void **state)
{
    (void)state;
    char *p = tpath("rt.dsq");
    write_std(p);
    dsq_ctr *r;
    dsq_diag d;
    dsq_diag_clear(&d);
    assert_int_equal(dsq_ctr_open(&r, p, &d), DSQ_OK);
    assert_int_equal(dsq_ctr_count(r), N_STD);
    size_t mlen;
    assert_string_equal(dsq_ctr_metadata(r, &mlen), std_meta);
    assert_int_equal(mlen, strlen(std_meta));
    uint64_t raw_total = 0;
    for (int i = 0; i < N_STD; i++) {
        const dsq_ctr_tensor_info *t = dsq_ctr_get(r, (size_t)i);
        assert_non_null(t);
        assert_ptr_equal(dsq_ctr_find(r, std_names[i]), t);
        assert_string_equal(t->name, std_names[i]);
        assert_string_equal(t->src_dtype, "BF16");
        assert_int_equal(t->role, (uint32_t)i);
        assert_int_equal(t->scheme, 7);
        assert_int_equal(t->group_size, 128);
        assert_int_equal(t->pack_version, 1);
        assert_int_equal(t->aux[0], 42);
        assert_int_equal(t->index, (uint32_t)i);
        assert_int_equal(t->offset % DSQ_CTR_ALIGN, 0);
        assert_int_equal(t->raw_size, std_size(i));
        raw_total += t->raw_size;
        if (i == 5) assert_int_equal(t->ndim, 0);
        else assert_int_equal(t->shape[0], i == 4 ? 0 : (int64_t)std_size(i) / 2);
        uint8_t *want = std_bytes(i);
        uint8_t *got = malloc(std_size(i) + 1);
        assert_int_equal(dsq_ctr_read(r, t, got, std_size(i), &d), DSQ_OK);
        assert_memory_equal(got, want, std_size(i));
        const uint8_t *view = dsq_ctr_raw_ptr(r, t);
        if (t->compression == DSQ_CTR_COMP_NONE) {
            assert_non_null(view);
            assert_int_equal((uintptr_t)view % 64, 0);
            if (std_size(i)) assert_memory_equal(view, want, std_size(i));
            assert_int_equal(t->stored_size, t->raw_size);
        } else {
            assert_null(view);
            assert_true(t->stored_size < t->raw_size);
        }
        uint8_t sha[32];
        dsq_sha256_buf(want, std_size(i), sha);
        assert_memory_equal(sha, t->sha256, 32);
        free(want);
        free(got);
    }
    /* Which paths compressed: streamed zstd, compressible, encode(level 1). */
    assert_int_equal(dsq_ctr_get(r, 0)->compression, DSQ_CTR_COMP_ZSTD);
    assert_int_equal(dsq_ctr_get(r, 1)->compression, DSQ_CTR_COMP_NONE);
    assert_int_equal(dsq_ctr_get(r, 2)->compression, DSQ_CTR_COMP_ZSTD);
    assert_int_equal(dsq_ctr_get(r, 3)->compression, DSQ_CTR_COMP_NONE); /* did not pay */
    assert_int_equal(dsq_ctr_get(r, 6)->compression, DSQ_CTR_COMP_NONE);
    assert_int_equal(dsq_ctr_get(r, 7)->compression, DSQ_CTR_COMP_ZSTD);
    assert_null(dsq_ctr_find(r, "nope"));
    assert_null(dsq_ctr_get(r, N_STD));
    uint64_t raw, stored;
    dsq_ctr_totals(r, &raw, &stored);
    assert_int_equal(raw, raw_total);
    assert_true(stored < raw);
    /* dst too small */
    uint8_t small[8];
    assert_int_equal(dsq_ctr_read(r, dsq_ctr_get(r, 1), small, sizeof small, NULL), DSQ_ERR_INVALID_ARG);
    size_t bad = 0;
    assert_int_equal(dsq_ctr_verify(r, 1, &bad, &d), DSQ_OK);
    assert_int_equal(bad, SIZE_MAX);
    assert_int_equal(dsq_ctr_verify(r, 4, &bad, &d), DSQ_OK);
    dsq_ctr_close(r);

    /* Deterministic: writing the same content twice gives the same bytes. */
    char *p2 = tpath("rt2.dsq");
    write_std(p2);
    size_t n1, n2;
    uint8_t *a = read_all(p, &n1), *b = read_all(p2, &n2);
    assert_int_equal(n1, n2);
    assert_memory_equal(a, b, n1);
    assert_true(dsq_ctr_is_dsq(a, n1));
    free(a); free(b);
    /* No temporaries left behind. */
    char *tmp = dsq_outfile_tmp_name(p);
    assert_false(dsq_path_exists(tmp));
    free(tmp);
    free(p); free(p2);
}

static void test_empty_and_many(void **state)
{
    (void)state;
    char *p = tpath("empty.dsq");
    dsq_ctr_writer *w;
    assert_int_equal(dsq_ctr_writer_open(&w, p, 0, NULL), DSQ_OK);
    assert_int_equal(dsq_ctr_writer_finish(w, NULL), DSQ_OK);
    dsq_ctr *r;
    assert_int_equal(dsq_ctr_open(&r, p, NULL), DSQ_OK);
    assert_int_equal(dsq_ctr_count(r), 0);
    assert_string_equal(dsq_ctr_metadata(r, NULL), "{}");
    assert_int_equal(dsq_ctr_verify(r, 0, NULL, NULL), DSQ_OK);
    dsq_ctr_close(r);
    /* Exists without overwrite. */
    dsq_diag d;
    dsq_diag_clear(&d);
    assert_int_equal(dsq_ctr_writer_open(&w, p, 0, &d), DSQ_ERR_EXISTS);
    assert_null(w);

    /* Thousands of tiny tensors: name hash tables grow, lookups work. */
    assert_int_equal(dsq_ctr_writer_open(&w, p, DSQ_OUT_OVERWRITE, NULL), DSQ_OK);
    char name[64];
    for (int i = 0; i < 3000; i++) {
        snprintf(name, sizeof name, "model.layers.%d.mlp.experts.%d.w", i / 256, i % 256);
        dsq_ctr_tensor_info t = mkinfo(name, DSQ_ROLE_EXPERT_LINEAR, 1, 0);
        uint8_t v = (uint8_t)i;
        assert_int_equal(dsq_ctr_writer_add(w, &t, &v, 1, 0, NULL), DSQ_OK);
        assert_int_equal(dsq_ctr_writer_find(w, name), i);
    }
    assert_int_equal(dsq_ctr_writer_count(w), 3000);
    assert_int_equal(dsq_ctr_writer_finish(w, NULL), DSQ_OK);
    assert_int_equal(dsq_ctr_open(&r, p, NULL), DSQ_OK);
    assert_int_equal(dsq_ctr_count(r), 3000);
    for (int i = 0; i < 3000; i++) {
        snprintf(name, sizeof name, "model.layers.%d.mlp.experts.%d.w", i / 256, i % 256);
        const dsq_ctr_tensor_info *t = dsq_ctr_find(r, name);
        assert_non_null(t);
        assert_int_equal(t->index, (uint32_t)i);
        assert_int_equal(*(const uint8_t *)dsq_ctr_raw_ptr(r, t), (uint8_t)i);
    }
    assert_int_equal(dsq_ctr_verify(r, 3, NULL, NULL), DSQ_OK);
    dsq_ctr_close(r);
    free(p);
}

static void test_writer_input_checks(void **state)
{
    (void)state;
    char *p = tpath("inputs.dsq");
    dsq_ctr_writer *w;
    dsq_diag d;
    assert_int_equal(dsq_ctr_writer_open(&w, p, 0, NULL), DSQ_OK);
    uint8_t buf[256] = { 1, 2, 3 };
    dsq_ctr_tensor_info t = mkinfo("a", 0, 4, 0);
    assert_int_equal(dsq_ctr_writer_add(w, &t, buf, 4, 0, NULL), DSQ_OK);
    dsq_diag_clear(&d);
    assert_int_equal(dsq_ctr_writer_add(w, &t, buf, 4, 0, &d), DSQ_ERR_INVALID_ARG);
    assert_string_equal(d.tensor, "a");
    t.name = "";
    assert_int_equal(dsq_ctr_writer_add(w, &t, buf, 4, 0, NULL), DSQ_ERR_INVALID_ARG);
    t = mkinfo("b", 0, 4, 0);
    t.ndim = 9;
    assert_int_equal(dsq_ctr_writer_add(w, &t, buf, 4, 0, NULL), DSQ_ERR_INVALID_ARG);
    t = mkinfo("b", 0, -4, 0);
    assert_int_equal(dsq_ctr_writer_add(w, &t, buf, 4, 0, NULL), DSQ_ERR_INVALID_ARG);
    t = mkinfo("b", 0, INT64_MAX, 4);
    assert_int_equal(dsq_ctr_writer_add(w, &t, buf, 4, 0, NULL), DSQ_ERR_INVALID_ARG);
    t = mkinfo("b", 0, 4, 0);
    t.src_dtype = "A_VERY_LONG_DTYPE_NAME_THAT_IS_TOO_LONG";
    assert_int_equal(dsq_ctr_writer_add(w, &t, buf, 4, 0, NULL), DSQ_ERR_INVALID_ARG);
    t = mkinfo("b", 0, 4, 0);
    assert_int_equal(dsq_ctr_writer_add(w, &t, buf, 4, 23, NULL), DSQ_ERR_INVALID_ARG);
    assert_int_equal(dsq_ctr_writer_add(w, &t, buf, 4, -1, NULL), DSQ_ERR_INVALID_ARG);
    /* Metadata must be one JSON object. */
    assert_int_equal(dsq_ctr_writer_set_metadata(w, "[1,2]", NULL), DSQ_ERR_JSON);
    assert_int_equal(dsq_ctr_writer_set_metadata(w, "{\"a\":1} x", NULL), DSQ_ERR_JSON);
    assert_int_equal(dsq_ctr_writer_set_metadata(w, "{\"a\":1,}", NULL), DSQ_ERR_JSON);
    assert_int_equal(dsq_ctr_writer_set_metadata(w, "{\"a\":", NULL), DSQ_ERR_JSON);
    assert_int_equal(dsq_ctr_writer_set_metadata(w, "{\"a\":\"\xff\"}", NULL), DSQ_ERR_JSON);
    assert_int_equal(dsq_ctr_writer_set_metadata(w, " {\"a\": 1}\n", NULL), DSQ_OK);
    /* A streamed tensor breaking its promise is rolled back cleanly. */
    t = mkinfo("s", 0, 4, 0);
    t.raw_size = 100;
    assert_int_equal(dsq_ctr_writer_begin(w, &t, 3, NULL), DSQ_OK);
    assert_int_equal(dsq_ctr_writer_add(w, &t, buf, 4, 0, NULL), DSQ_ERR_INVALID_ARG); /* open stream */
    assert_int_equal(dsq_ctr_writer_chunk(w, buf, 50, NULL), DSQ_OK);
    assert_int_equal(dsq_ctr_writer_end(w, NULL), DSQ_ERR_INVALID_ARG);
    assert_int_equal(dsq_ctr_writer_chunk(w, buf, 1, NULL), DSQ_ERR_INVALID_ARG); /* none open */
    t.raw_size = 10;
    assert_int_equal(dsq_ctr_writer_begin(w, &t, 0, NULL), DSQ_OK);
    assert_int_equal(dsq_ctr_writer_chunk(w, buf, 11, NULL), DSQ_ERR_INVALID_ARG);
    t.raw_size = 0;
    assert_int_equal(dsq_ctr_writer_begin(w, &t, 0, NULL), DSQ_OK);
    assert_int_equal(dsq_ctr_writer_chunk(w, buf, 3, NULL), DSQ_OK);
    assert_int_equal(dsq_ctr_writer_end(w, NULL), DSQ_OK);
    assert_int_equal(dsq_ctr_writer_count(w), 2);
    assert_int_equal(dsq_ctr_writer_finish(w, NULL), DSQ_OK);
    dsq_ctr *r;
    assert_int_equal(dsq_ctr_open(&r, p, NULL), DSQ_OK);
    assert_int_equal(dsq_ctr_count(r), 2);
    assert_string_equal(dsq_ctr_metadata(r, NULL), " {\"a\": 1}\n");
    assert_int_equal(dsq_ctr_verify(r, 2, NULL, NULL), DSQ_OK);
    dsq_ctr_close(r);

    /* finish with an open stream fails, frees, and leaves nothing. */
    assert_int_equal(dsq_ctr_writer_open(&w, p, DSQ_OUT_OVERWRITE, NULL), DSQ_OK);
    assert_int_equal(dsq_ctr_writer_begin(w, &t, 0, NULL), DSQ_OK);
    char *tmp = strdup(dsq_ctr_writer_tmp_path(w));
    assert_int_equal(dsq_ctr_writer_finish(w, NULL), DSQ_ERR_INVALID_ARG);
    assert_false(dsq_path_exists(tmp));
    free(tmp);
    free(p);
}

/* ---- corruption ---- */

static void test_payload_bitflips(void **state)
{
    (void)state;
    char *p = tpath("flip.dsq");
    write_std(p);
    size_t n;
    uint8_t *orig = read_all(p, &n);
    uint8_t *b = malloc(n);
    dsq_ctr *r;
    assert_int_equal(dsq_ctr_open_mem(&r, orig, n, "x", NULL), DSQ_OK);
    for (size_t i = 0; i < N_STD; i++) {
        const dsq_ctr_tensor_info *t = dsq_ctr_get(r, i);
        if (!t->stored_size) continue;
        uint64_t pos[3] = { t->offset, t->offset + t->stored_size / 2, t->offset + t->stored_size - 1 };
        for (int k = 0; k < 3; k++) {
            memcpy(b, orig, n);
            b[pos[k]] ^= (uint8_t)(1u << (k + i) % 8);
            dsq_ctr *r2;
            dsq_diag d;
            dsq_diag_clear(&d);
            /* Open does not hash payloads: it succeeds ... */
            assert_int_equal(dsq_ctr_open_mem(&r2, b, n, "x", &d), DSQ_OK);
            /* ... and verify names the tensor. */
            size_t bad = 12345;
            int rc = dsq_ctr_verify(r2, 3, &bad, &d);
            assert_true(rc == DSQ_ERR_CHECKSUM || rc == DSQ_ERR_FORMAT);
            assert_int_equal(bad, i);
            assert_string_equal(d.tensor, t->name);
            assert_int_equal(d.offset, (int64_t)t->offset);
            /* read() of that tensor fails too. */
            uint8_t *dst = malloc(t->raw_size + 1);
            rc = dsq_ctr_read(r2, dsq_ctr_get(r2, i), dst, t->raw_size, NULL);
            assert_true(rc == DSQ_ERR_CHECKSUM || rc == DSQ_ERR_FORMAT);
            free(dst);
            dsq_ctr_close(r2);
        }
    }
    /* Two bad tensors: the lower index is reported, with any thread count. */
    memcpy(b, orig, n);
    b[dsq_ctr_get(r, 6)->offset] ^= 1;
    b[dsq_ctr_get(r, 2)->offset + 5] ^= 1;
    for (int th = 1; th <= 4; th++) {
        dsq_ctr *r2;
        size_t bad;
        assert_int_equal(dsq_ctr_open_mem(&r2, b, n, "x", NULL), DSQ_OK);
        assert_true(dsq_ctr_verify(r2, th, &bad, NULL) < 0);
        assert_int_equal(bad, 2);
        dsq_ctr_close(r2);
    }
    /* Non-zero padding between payloads is caught by verify. */
    {
        size_t k = 0;  /* first tensor followed by real padding */
        for (; k < N_STD; k++) {
            const dsq_ctr_tensor_info *t = dsq_ctr_get(r, k);
            if ((t->offset + t->stored_size) % 64) break;
        }
        memcpy(b, orig, n);
        const dsq_ctr_tensor_info *t = dsq_ctr_get(r, k);
        b[t->offset + t->stored_size] = 0x55;
        dsq_ctr *r2;
        size_t bad;
        dsq_diag d;
        dsq_diag_clear(&d);
        assert_int_equal(dsq_ctr_open_mem(&r2, b, n, "x", NULL), DSQ_OK);
        assert_int_equal(dsq_ctr_verify(r2, 2, &bad, &d), DSQ_ERR_FORMAT);
        assert_int_equal(bad, k);
        assert_int_equal(d.offset, (int64_t)(t->offset + t->stored_size));
        dsq_ctr_close(r2);
    }
    dsq_ctr_close(r);
    free(orig); free(b); free(p);
}

static uint64_t footer_u64(const uint8_t *b, size_t n, int off)
{
    return dsq_load_u64le(b + n - DSQ_CTR_FOOTER_SIZE + off);
}

/* Any single bit flip in header, index, metadata, padding between them or
 * footer is rejected by open. */
static void test_structure_bitflips(void **state)
{
    (void)state;
    char *p = tpath("sflip.dsq");
    write_std(p);
    size_t n;
    uint8_t *orig = read_all(p, &n);
    uint8_t *b = malloc(n);
    uint64_t io = footer_u64(orig, n, 32);
    size_t tested = 0;
    for (size_t pos = 0; pos < n; pos++) {
        if (pos >= DSQ_CTR_HEADER_SIZE && pos < io) continue;  /* payloads: verify's job */
        memcpy(b, orig, n);
        b[pos] ^= (uint8_t)(1u << (pos % 8));
        dsq_diag d;
        dsq_diag_clear(&d);
        int rc = open_mem_rc(b, n, &d);
        if (rc >= 0) fail_msg("flip at byte %zu accepted", pos);
        assert_true(d.offset >= 0);
        tested++;
    }
    assert_true(tested > 1000);
    free(orig); free(b); free(p);
}

static void test_truncation(void **state)
{
    (void)state;
    char *p = tpath("trunc.dsq");
    write_std(p);
    size_t n;
    uint8_t *orig = read_all(p, &n);
    /* Every length class: tiny files, inside the header, every length from
     * the last payload's end through index, metadata and footer, around
     * each payload boundary, and a stride through the payloads. Each from a
     * heap copy of exactly that size, so ASan sees any read past the end. */
    uint64_t io = footer_u64(orig, n, 32);
    dsq_ctr *full;
    assert_int_equal(dsq_ctr_open_mem(&full, orig, n, "x", NULL), DSQ_OK);
    const dsq_ctr_tensor_info *lt = dsq_ctr_get(full, N_STD - 1);
    uint64_t tail_from = lt->offset + lt->stored_size - 70;
    for (size_t len = 0; len < n; len++) {
        int near_boundary = 0;
        for (size_t i = 0; i < N_STD; i++) {
            uint64_t o = dsq_ctr_get(full, i)->offset;
            if (len + 2 >= o && len <= o + 2) near_boundary = 1;
        }
        if (!(len < 300 || len >= tail_from || near_boundary || len % 4099 == 0 || len + 1 == io))
            continue;
        uint8_t *b = malloc(len ? len : 1);
        memcpy(b, orig, len);
        dsq_diag d;
        dsq_diag_clear(&d);
        int rc = open_mem_rc(len ? b : NULL, len, &d);
        if (rc >= 0) fail_msg("truncation to %zu bytes accepted", len);
        if (len >= 8 && rc != DSQ_ERR_TRUNCATED && rc != DSQ_ERR_FORMAT)
            fail_msg("truncation to %zu: status %d", len, rc);
        free(b);
    }
    dsq_ctr_close(full);
    /* Appended junk is rejected too. */
    uint8_t *b = malloc(n + 64);
    memcpy(b, orig, n);
    memset(b + n, 0, 64);
    assert_true(open_mem_rc(b, n + 64, NULL) < 0);
    /* A truncated file on disk, via the mmap path. */
    char *q = tpath("trunc2.dsq");
    dsq_test_write(q, orig, n - 1);
    dsq_ctr *r;
    assert_int_equal(dsq_ctr_open(&r, q, NULL), DSQ_ERR_TRUNCATED);
    dsq_test_write(q, orig, 0);
    assert_true(dsq_ctr_open(&r, q, NULL) < 0);
    assert_int_equal(dsq_ctr_open(&r, "/nonexistent/x.dsq", NULL), DSQ_ERR_NOT_FOUND);
    free(b); free(orig); free(p); free(q);
}

/* Hostile but well-sealed files: hashes are right, the layout is wrong. */
static void test_hostile_layouts(void **state)
{
    (void)state;
    char *p = tpath("hostile.dsq");
    write_std(p);
    size_t n;
    uint8_t *orig = read_all(p, &n);
    uint8_t *b = malloc(n);
    uint64_t io = footer_u64(orig, n, 32);
    uint8_t *rec0 = NULL;
#define REC(i) (b + io + DSQ_CTR_INDEX_HDR_SIZE + (size_t)(i) * DSQ_CTR_ENTRY_SIZE)
#define CASE(expect, edit) do { \
        memcpy(b, orig, n); edit; reseal(b, n); \
        dsq_diag d_; dsq_diag_clear(&d_); \
        int rc_ = open_mem_rc(b, n, &d_); \
        if (rc_ != (expect)) fail_msg("line %d: got %d (%s), want %d", __LINE__, rc_, d_.msg, expect); \
    } while (0)
    (void)rec0;
    /* sanity: reseal of an unmodified file is a no-op */
    CASE(DSQ_OK, (void)0);
    /* overlapping: tensor 2 starts where tensor 1 does */
    CASE(DSQ_ERR_FORMAT, dsq_store_u64le(REC(2), dsq_load_u64le(REC(1))));
    /* gap / out of range / misaligned */
    CASE(DSQ_ERR_FORMAT, dsq_store_u64le(REC(2), dsq_load_u64le(REC(2)) + 64));
    CASE(DSQ_ERR_FORMAT, dsq_store_u64le(REC(2), dsq_load_u64le(REC(2)) + 1));
    CASE(DSQ_ERR_FORMAT, dsq_store_u64le(REC(0), UINT64_MAX - 10));
    CASE(DSQ_ERR_FORMAT, dsq_store_u64le(REC(N_STD - 1), n * 2));
    /* sizes: stored past the index, raw != stored for raw payload */
    CASE(DSQ_ERR_FORMAT, dsq_store_u64le(REC(N_STD - 1) + 8, UINT64_MAX));
    CASE(DSQ_ERR_FORMAT, dsq_store_u64le(REC(1) + 16, dsq_load_u64le(REC(1) + 16) + 1));
    CASE(DSQ_ERR_FORMAT, dsq_store_u64le(REC(1) + 8, dsq_load_u64le(REC(1) + 8) + 64));
    /* duplicate name: copy tensor 0's name reference into tensor 1 */
    CASE(DSQ_ERR_FORMAT, memcpy(REC(1) + 24, REC(0) + 24, 8));
    /* string out of range, unterminated */
    CASE(DSQ_ERR_FORMAT, dsq_store_u32le(REC(0) + 24, 0x7fffffff));
    CASE(DSQ_ERR_FORMAT, dsq_store_u32le(REC(0) + 28, dsq_load_u32le(REC(0) + 28) - 1));
    /* ndim, dims */
    CASE(DSQ_ERR_FORMAT, dsq_store_u32le(REC(0) + 52, 9));
    CASE(DSQ_ERR_FORMAT, dsq_store_u64le(REC(0) + 80, (uint64_t)-5));
    CASE(DSQ_ERR_FORMAT, dsq_store_u64le(REC(0) + 80 + 8 * 7, 3));
    CASE(DSQ_ERR_FORMAT, (dsq_store_u32le(REC(0) + 52, 3),
                          dsq_store_u64le(REC(0) + 88, 1ull << 40),
                          dsq_store_u64le(REC(0) + 96, 1ull << 40)));
    /* compression */
    CASE(DSQ_ERR_UNSUPPORTED, dsq_store_u32le(REC(0) + 48, 2));
    /* reserved bytes */
    CASE(DSQ_ERR_FORMAT, REC(3)[180] = 1);
    /* index header: count, entry size, strtab size */
    CASE(DSQ_ERR_FORMAT, dsq_store_u64le(b + io + 16, N_STD + 1));
    CASE(DSQ_ERR_FORMAT, dsq_store_u64le(b + io + 16, UINT64_MAX / 2));
    CASE(DSQ_ERR_FORMAT, dsq_store_u32le(b + io + 8, 100));
    CASE(DSQ_ERR_FORMAT, dsq_store_u64le(b + io + 24, 1));
    /* count in footer vs index */
    CASE(DSQ_ERR_FORMAT, dsq_store_u64le(b + n - DSQ_CTR_FOOTER_SIZE + 24, N_STD - 1));
    /* footer ranges */
    CASE(DSQ_ERR_FORMAT, dsq_store_u64le(b + n - DSQ_CTR_FOOTER_SIZE + 32, io + 64));
    CASE(DSQ_ERR_FORMAT, dsq_store_u64le(b + n - DSQ_CTR_FOOTER_SIZE + 40, UINT64_MAX - 100));
    CASE(DSQ_ERR_FORMAT, dsq_store_u64le(b + n - DSQ_CTR_FOOTER_SIZE + 48, 0));
    CASE(DSQ_ERR_FORMAT, dsq_store_u64le(b + n - DSQ_CTR_FOOTER_SIZE + 56, 1ull << 62));
    CASE(DSQ_ERR_TRUNCATED, dsq_store_u64le(b + n - DSQ_CTR_FOOTER_SIZE + 16, n + 1000));
    CASE(DSQ_ERR_FORMAT, dsq_store_u64le(b + n - DSQ_CTR_FOOTER_SIZE + 16, n - 1));
    /* header / footer versions and flags */
    CASE(DSQ_ERR_UNSUPPORTED, dsq_store_u32le(b + 8, 2));
    CASE(DSQ_ERR_UNSUPPORTED, dsq_store_u32le(b + 20, 1));
    CASE(DSQ_ERR_FORMAT, b[40] = 1);
    CASE(DSQ_ERR_UNSUPPORTED, dsq_store_u32le(b + n - DSQ_CTR_FOOTER_SIZE + 8, 2));
    /* metadata not JSON (resealed, so only the JSON check can catch it) */
    {
        uint64_t mo = footer_u64(orig, n, 48);
        CASE(DSQ_ERR_JSON, b[mo] = '[');
        CASE(DSQ_ERR_JSON, b[mo + 1] = 0);
    }
    /* a zstd payload that is not one frame: caught by read/verify */
    {
        dsq_ctr *r;
        assert_int_equal(dsq_ctr_open_mem(&r, orig, n, "x", NULL), DSQ_OK);
        const dsq_ctr_tensor_info *t = dsq_ctr_get(r, 2);
        memcpy(b, orig, n);
        memset(b + t->offset, 0, 4);  /* kill the frame magic */
        dsq_ctr *r2;
        size_t bad;
        assert_int_equal(dsq_ctr_open_mem(&r2, b, n, "x", NULL), DSQ_OK);
        assert_int_equal(dsq_ctr_verify(r2, 1, &bad, NULL), DSQ_ERR_FORMAT);
        assert_int_equal(bad, 2);
        uint8_t *dst = malloc(t->raw_size);
        assert_int_equal(dsq_ctr_read(r2, dsq_ctr_get(r2, 2), dst, t->raw_size, NULL), DSQ_ERR_FORMAT);
        free(dst);
        dsq_ctr_close(r2);
        dsq_ctr_close(r);
    }
#undef CASE
#undef REC
    free(orig); free(b); free(p);
}

/* ---- framed payloads (a sequence of zstd frames) ---- */

/* A streamed tensor written as frames made elsewhere (dsq_ctr_zstd_frame,
 * as the conversion's workers do) reads back, verifies and resumes like a
 * one-frame payload; its stored bytes really hold several frames; a bad
 * frame is refused by the writer, and a payload whose second frame is not a
 * regular one by the reader. */
static void test_frames(void **state)
{
    (void)state;
    enum { NP = 5, PIECE = 70001 };
    size_t n = 64 + (size_t)NP * PIECE;
    uint8_t *raw = malloc(n);
    fill_smooth(raw, n, 11);
    fill_random(raw + 64 + PIECE, PIECE, 12);          /* one piece incompressible */
    char *p = tpath("frames.dsq");
    char *tmp = dsq_outfile_tmp_name(p);
    dsq_ctr_writer *w;
    dsq_diag d;
    dsq_diag_clear(&d);
    size_t cap = dsq_ctr_encode_bound(PIECE), fs;
    uint8_t *fr = malloc(cap);

    assert_int_equal(dsq_ctr_writer_open_ex(&w, p, DSQ_CTR_RESUME, "fp-f", &d), DSQ_OK);
    dsq_ctr_writer_set_checkpoint_interval(w, 0);
    dsq_ctr_tensor_info t = mkinfo("framed", 1, (int64_t)n / 2, 0);
    t.raw_size = n;
    assert_int_equal(dsq_ctr_writer_begin_frames(w, &t, 1, &d), DSQ_OK);
    assert_int_equal(dsq_ctr_writer_chunk(w, raw, 64, &d), DSQ_OK);   /* a frame of its own */
    for (int i = 0; i < NP; i++) {
        const uint8_t *pc = raw + 64 + (size_t)i * PIECE;
        assert_int_equal(dsq_ctr_zstd_frame(pc, PIECE, 1, fr, cap, &fs, &d), DSQ_OK);
        assert_int_equal(dsq_ctr_writer_frame(w, pc, PIECE, fr, fs, &d), DSQ_OK);
    }
    assert_int_equal(dsq_ctr_writer_end(w, &d), DSQ_OK);
    /* the same bytes, hashed by the caller: same digest, same payload */
    dsq_ctr_tensor_info th = mkinfo("framed-hashed", 1, (int64_t)n / 2, 0);
    th.raw_size = n;
    assert_int_equal(dsq_ctr_writer_begin_frames_hashed(w, &th, 1, &d), DSQ_OK);
    assert_int_equal(dsq_ctr_writer_chunk(w, raw, 64, &d), DSQ_OK);
    for (int i = 0; i < NP; i++) {
        const uint8_t *pc = raw + 64 + (size_t)i * PIECE;
        assert_int_equal(dsq_ctr_zstd_frame(pc, PIECE, 1, fr, cap, &fs, &d), DSQ_OK);
        assert_int_equal(dsq_ctr_writer_frame(w, NULL, PIECE, fr, fs, &d), DSQ_OK);
    }
    uint8_t dig[DSQ_SHA256_LEN];
    assert_int_equal(dsq_sha256_buf(raw, n, dig), DSQ_OK);
    assert_int_equal(dsq_ctr_writer_end_digest(w, dig, &d), DSQ_OK);
    dsq_ctr_tensor_info e = mkinfo("framed-empty", 1, 0, 0);
    assert_int_equal(dsq_ctr_writer_begin_frames(w, &e, 3, &d), DSQ_OK);
    assert_int_equal(dsq_ctr_writer_end(w, &d), DSQ_OK);   /* no frame: an empty one */
    /* refused: a frame of other bytes' size, a level-0 framed payload, a
     * frame on a one-frame stream; each leaves the writer usable */
    dsq_ctr_tensor_info b = mkinfo("bad", 1, 4, 0);
    assert_int_equal(dsq_ctr_writer_begin_frames(w, &b, 0, NULL), DSQ_ERR_INVALID_ARG);
    assert_int_equal(dsq_ctr_writer_begin_frames(w, &b, 1, NULL), DSQ_OK);
    assert_int_equal(dsq_ctr_zstd_frame(raw, 8, 1, fr, cap, &fs, NULL), DSQ_OK);
    assert_int_equal(dsq_ctr_writer_frame(w, raw, 9, fr, fs, NULL), DSQ_ERR_INVALID_ARG);
    assert_int_equal(dsq_ctr_writer_begin(w, &b, 1, NULL), DSQ_OK);
    assert_int_equal(dsq_ctr_writer_frame(w, raw, 8, fr, fs, NULL), DSQ_ERR_INVALID_ARG);
    /* a caller-hashed payload ends only with its digest, a plain one only without */
    assert_int_equal(dsq_ctr_writer_begin_frames_hashed(w, &b, 1, NULL), DSQ_OK);
    assert_int_equal(dsq_ctr_writer_end(w, NULL), DSQ_ERR_INVALID_ARG);
    assert_int_equal(dsq_ctr_writer_begin(w, &b, 1, NULL), DSQ_OK);
    assert_int_equal(dsq_ctr_writer_end_digest(w, dig, NULL), DSQ_ERR_INVALID_ARG);
    assert_int_equal(dsq_ctr_writer_end(w, NULL), DSQ_OK);
    assert_int_equal(dsq_ctr_writer_count(w), 4);
    /* interrupted here: the resume re-hashes the framed payload from disk */
    assert_int_equal(dsq_ctr_writer_detach(w, &d), DSQ_OK);
    assert_int_equal(dsq_ctr_writer_open_ex(&w, p, DSQ_CTR_RESUME, "fp-f", &d), DSQ_OK);
    assert_int_equal(dsq_ctr_writer_count(w), 4);
    assert_int_equal(dsq_ctr_writer_finish(w, &d), DSQ_OK);

    dsq_ctr *r;
    assert_int_equal(dsq_ctr_open(&r, p, &d), DSQ_OK);
    const dsq_ctr_tensor_info *ti = dsq_ctr_find(r, "framed");
    assert_non_null(ti);
    assert_int_equal(ti->compression, DSQ_CTR_COMP_ZSTD);
    assert_int_equal(ti->raw_size, n);
    const uint8_t *sp = dsq_ctr_stored_ptr(r, ti);
    size_t first = ZSTD_findFrameCompressedSize(sp, ti->stored_size);
    assert_false(ZSTD_isError(first));
    assert_true(first < ti->stored_size);                /* more than one frame */
    uint8_t *got = malloc(n);
    assert_int_equal(dsq_ctr_read(r, ti, got, n, &d), DSQ_OK);
    assert_memory_equal(got, raw, n);
    uint8_t want[DSQ_SHA256_LEN];
    assert_int_equal(dsq_sha256_buf(raw, n, want), DSQ_OK);
    assert_memory_equal(ti->sha256, want, DSQ_SHA256_LEN);
    const dsq_ctr_tensor_info *tc = dsq_ctr_find(r, "framed-hashed");
    assert_int_equal(tc->stored_size, ti->stored_size);
    assert_memory_equal(tc->sha256, want, DSQ_SHA256_LEN);
    assert_memory_equal(dsq_ctr_stored_ptr(r, tc), sp, ti->stored_size);
    const dsq_ctr_tensor_info *te = dsq_ctr_find(r, "framed-empty");
    assert_int_equal(te->raw_size, 0);
    assert_true(te->stored_size > 0);
    size_t bad;
    assert_int_equal(dsq_ctr_verify(r, 2, &bad, &d), DSQ_OK);
    uint64_t off = ti->offset + first;   /* where the second frame starts */
    size_t sidx = ti->index;
    dsq_ctr_close(r);

    /* the second frame made skippable: read and verify refuse the payload */
    size_t fn;
    uint8_t *f = read_all(p, &fn);
    dsq_store_u32le(f + off, 0x184D2A50u);
    assert_int_equal(dsq_ctr_open_mem(&r, f, fn, "x", NULL), DSQ_OK);
    assert_int_equal(dsq_ctr_read(r, dsq_ctr_get(r, sidx), got, n, NULL), DSQ_ERR_FORMAT);
    assert_int_equal(dsq_ctr_verify(r, 1, &bad, NULL), DSQ_ERR_FORMAT);
    assert_int_equal(bad, sidx);
    dsq_ctr_close(r);
    free(f);
    free(got);
    free(fr);
    free(raw);
    free(tmp);
    free(p);
}

/* ---- interrupted writes ---- */

static void on_term(int sig)
{
    (void)sig;
    dsq_tmpfiles_unlink_all();
    _exit(1);
}

static void slow_writer_child(const char *path, int with_handler)
{
    if (with_handler) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_term;
        sigaction(SIGTERM, &sa, NULL);
    }
    dsq_ctr_writer *w;
    if (dsq_ctr_writer_open(&w, path, DSQ_OUT_OVERWRITE, NULL) != DSQ_OK) _exit(3);
    uint8_t buf[4096];
    memset(buf, 7, sizeof buf);
    for (int i = 0;; i++) {
        char name[32];
        snprintf(name, sizeof name, "t%d", i);
        dsq_ctr_tensor_info t = mkinfo(name, 0, 2048, 0);
        if (dsq_ctr_writer_add(w, &t, buf, sizeof buf, 0, NULL) != DSQ_OK) _exit(4);
        usleep(2000);
        if (i > 5000) break;
    }
    dsq_ctr_writer_finish(w, NULL);
    _exit(0);
}

static void wait_for_size(const char *path, off_t min)
{
    struct stat st;
    for (int i = 0; i < 5000; i++) {
        if (stat(path, &st) == 0 && st.st_size >= min) return;
        usleep(1000);
    }
    fail_msg("temporary %s never grew", path);
}

static void test_interrupted_write(void **state)
{
    (void)state;
    for (int mode = 0; mode < 2; mode++) {
        char *p = tpath(mode ? "term.dsq" : "kill.dsq");
        char *tmp = dsq_outfile_tmp_name(p);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) slow_writer_child(p, mode);
        wait_for_size(tmp, 64 * 1024);
        kill(pid, mode ? SIGTERM : SIGKILL);
        int st;
        assert_int_equal(waitpid(pid, &st, 0), pid);
        /* Never a file under the final name. */
        assert_false(dsq_path_exists(p));
        if (mode) {
            /* The handler removed the temporary as well. */
            assert_false(dsq_path_exists(tmp));
        } else {
            /* SIGKILL cannot be handled: the partial stays, under its
             * hidden temporary name only, and is not a valid .dsq. */
            assert_true(dsq_path_exists(tmp));
            dsq_ctr *r;
            assert_true(dsq_ctr_open(&r, tmp, NULL) < 0);
            unlink(tmp);
        }
        free(tmp);
        free(p);
    }
}

/* ---- resume ---- */

static void test_resume(void **state)
{
    (void)state;
    char *clean = tpath("clean.dsq");
    write_std(clean);
    size_t n_clean;
    uint8_t *want = read_all(clean, &n_clean);

    char *p = tpath("resume.dsq");
    char *tmp = dsq_outfile_tmp_name(p);
    char journal[4200];
    snprintf(journal, sizeof journal, "%s.journal", tmp);
    dsq_ctr_writer *w;
    dsq_diag d;
    dsq_diag_clear(&d);

    /* Run 1: half the tensors, then an orderly detach. */
    assert_int_equal(dsq_ctr_writer_open_ex(&w, p, DSQ_CTR_RESUME, "fp-1", &d), DSQ_OK);
    dsq_ctr_writer_set_checkpoint_interval(w, 0);
    write_std_range(w, 0, 4);
    assert_int_equal(dsq_ctr_writer_detach(w, &d), DSQ_OK);
    assert_true(dsq_path_exists(tmp));
    assert_true(dsq_path_exists(journal));
    assert_false(dsq_path_exists(p));

    /* Wrong fingerprint: state error, partial untouched. */
    struct stat st0, st1;
    assert_int_equal(stat(tmp, &st0), 0);
    dsq_diag_clear(&d);
    assert_int_equal(dsq_ctr_writer_open_ex(&w, p, DSQ_CTR_RESUME, "fp-2", &d), DSQ_ERR_STATE);
    assert_null(w);
    assert_int_equal(stat(tmp, &st1), 0);
    assert_int_equal(st0.st_size, st1.st_size);

    /* Run 2: two more tensors, then "crash" (child exits without detach)
     * after one more unjournaled tensor. */
    pid_t pid = fork();
    if (pid == 0) {
        dsq_ctr_writer *cw;
        if (dsq_ctr_writer_open_ex(&cw, p, DSQ_CTR_RESUME, "fp-1", NULL) != DSQ_OK) _exit(1);
        if (dsq_ctr_writer_count(cw) != 4) { fprintf(stderr, "count %zu\n", dsq_ctr_writer_count(cw)); _exit(2); }
        dsq_ctr_writer_set_checkpoint_interval(cw, 0);
        write_std_range(cw, 4, 6);
        dsq_ctr_writer_set_checkpoint_interval(cw, 1e9);
        write_std_range(cw, 6, 7);
        _exit(0);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);

    /* Run 3: resumes after tensor 5, finishes. */
    dsq_diag_clear(&d);
    assert_int_equal(dsq_ctr_writer_open_ex(&w, p, DSQ_CTR_RESUME, "fp-1", &d), DSQ_OK);
    assert_int_equal(dsq_ctr_writer_count(w), 6);
    for (int i = 0; i < 6; i++) assert_string_equal(dsq_ctr_writer_name(w, (size_t)i), std_names[i]);
    assert_int_equal(dsq_ctr_writer_bytes(w), dsq_ctr_writer_get(w, 5)->offset + dsq_ctr_writer_get(w, 5)->stored_size);
    write_std_range(w, 6, N_STD);
    assert_int_equal(dsq_ctr_writer_set_metadata(w, std_meta, &d), DSQ_OK);
    assert_int_equal(dsq_ctr_writer_finish(w, &d), DSQ_OK);
    assert_false(dsq_path_exists(tmp));
    assert_false(dsq_path_exists(journal));
    size_t n_got;
    uint8_t *got = read_all(p, &n_got);
    assert_int_equal(n_got, n_clean);
    assert_memory_equal(got, want, n_clean);
    free(got);

    /* A damaged partial: the payload of tensor 2 is overwritten. Resume
     * keeps tensors 0..1 only, and the result is still identical. */
    unlink(p);
    assert_int_equal(dsq_ctr_writer_open_ex(&w, p, DSQ_CTR_RESUME, "fp-1", &d), DSQ_OK);
    dsq_ctr_writer_set_checkpoint_interval(w, 0);
    write_std_range(w, 0, 5);
    uint64_t off2 = dsq_ctr_writer_get(w, 2)->offset;
    assert_int_equal(dsq_ctr_writer_detach(w, &d), DSQ_OK);
    int fd = open(tmp, O_WRONLY);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, "XX", 2, (off_t)off2 + 10), 2);
    close(fd);
    assert_int_equal(dsq_ctr_writer_open_ex(&w, p, DSQ_CTR_RESUME, "fp-1", &d), DSQ_OK);
    assert_int_equal(dsq_ctr_writer_count(w), 2);
    write_std_range(w, 2, N_STD);
    assert_int_equal(dsq_ctr_writer_set_metadata(w, std_meta, &d), DSQ_OK);
    assert_int_equal(dsq_ctr_writer_finish(w, &d), DSQ_OK);
    got = read_all(p, &n_got);
    assert_int_equal(n_got, n_clean);
    assert_memory_equal(got, want, n_clean);
    free(got);

    /* A malformed journal is a state error; a non-resume open clears it. */
    unlink(p);
    dsq_test_write(journal, "{nope", 5);
    assert_int_equal(dsq_ctr_writer_open_ex(&w, p, DSQ_CTR_RESUME, "fp-1", NULL), DSQ_ERR_STATE);
    assert_int_equal(dsq_ctr_writer_open(&w, p, 0, NULL), DSQ_OK);
    assert_false(dsq_path_exists(journal));
    dsq_ctr_writer_abort(w);
    assert_false(dsq_path_exists(tmp));
    /* Resume with no journal at all starts from scratch. */
    assert_int_equal(dsq_ctr_writer_open_ex(&w, p, DSQ_CTR_RESUME, "fp-1", NULL), DSQ_OK);
    assert_int_equal(dsq_ctr_writer_count(w), 0);
    dsq_ctr_writer_abort(w);
    assert_false(dsq_path_exists(tmp));
    assert_false(dsq_path_exists(journal));

    free(want); free(clean); free(p); free(tmp);
}

/* Checkpoints with an interval go in two steps (the flush in the output's
 * background syncer, the journal at a later add once it is done): a run
 * that dies at any point leaves a journal naming a prefix of the tensors,
 * with the end offset of exactly that prefix, and resuming from it gives
 * the clean file. */
static void test_resume_async_checkpoints(void **state)
{
    (void)state;
    char *clean = tpath("aclean.dsq");
    write_std(clean);
    size_t n_clean;
    uint8_t *want = read_all(clean, &n_clean);
    char *p = tpath("aresume.dsq");
    for (int stop = 1; stop <= N_STD; stop += 3) {
        unlink(p);
        pid_t pid = fork();
        if (pid == 0) {
            dsq_ctr_writer *cw;
            if (dsq_ctr_writer_open_ex(&cw, p, DSQ_CTR_RESUME, "fp-a", NULL) != DSQ_OK) _exit(1);
            dsq_ctr_writer_set_checkpoint_interval(cw, 1e-9);   /* > 0: the two-step path */
            write_std_range(cw, 0, stop);
            _exit(0);   /* "crash": no detach, no final checkpoint */
        }
        int status;
        assert_int_equal(waitpid(pid, &status, 0), pid);
        assert_true(WIFEXITED(status));
        assert_int_equal(WEXITSTATUS(status), 0);
        dsq_ctr_writer *w;
        dsq_diag d;
        dsq_diag_clear(&d);
        assert_int_equal(dsq_ctr_writer_open_ex(&w, p, DSQ_CTR_RESUME, "fp-a", &d), DSQ_OK);
        size_t have = dsq_ctr_writer_count(w);
        assert_true(have <= (size_t)stop);
        for (size_t i = 0; i < have; i++) assert_string_equal(dsq_ctr_writer_name(w, i), std_names[i]);
        if (have)
            assert_int_equal(dsq_ctr_writer_bytes(w), dsq_ctr_writer_get(w, have - 1)->offset +
                                                          dsq_ctr_writer_get(w, have - 1)->stored_size);
        write_std_range(w, (int)have, N_STD);
        assert_int_equal(dsq_ctr_writer_set_metadata(w, std_meta, &d), DSQ_OK);
        assert_int_equal(dsq_ctr_writer_finish(w, &d), DSQ_OK);
        size_t n_got;
        uint8_t *got = read_all(p, &n_got);
        assert_int_equal(n_got, n_clean);
        assert_memory_equal(got, want, n_clean);
        free(got);
    }
    unlink(p);
    free(want); free(clean); free(p);
}

/* ---- disk full ---- */

/* In a child: private mount namespace with a 256 KiB tmpfs (needs root or
 * user namespaces; skipped otherwise). Exit 0 pass, 77 skip, else fail. */
static int nospc_child(const char *dir)
{
    if (unshare(CLONE_NEWNS) != 0) return 77;
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) return 77;
    if (mount("tmpfs", dir, "tmpfs", 0, "size=256k") != 0) return 77;
    char *p = dsq_path_join(dir, "full.dsq");
    char *tmp = dsq_outfile_tmp_name(p);
    dsq_ctr_writer *w;
    dsq_diag d;
    dsq_diag_clear(&d);
    if (dsq_ctr_writer_open(&w, p, 0, &d) != DSQ_OK) return 10;
    size_t n = 1u << 20;
    uint8_t *buf = malloc(n);
    fill_random(buf, n, 9);
    /* The writer stages appends for O_DIRECT and a second thread writes
     * the stages (dsq_file.h), so the full disk is seen at a later append:
     * within DSQ_OUT_DIO_LAG bytes of the limit, not at the first byte past it. */
    char name[32];
    int rc = DSQ_OK;
    dsq_ctr_tensor_info t = mkinfo("big", 0, (int64_t)n, 0);
    for (int i = 0; rc == DSQ_OK && (size_t)i * n <= DSQ_OUT_DIO_LAG + (256u << 10); i++) {
        snprintf(name, sizeof name, "big%d", i);
        t.name = name;
        rc = dsq_ctr_writer_add(w, &t, buf, n, 0, &d);
    }
    if (rc != DSQ_ERR_NOSPC) return 11;
    if (d.status != DSQ_ERR_NOSPC) return 12;
    /* Later calls report the sticky failure; abort cleans up. */
    t.name = "next";
    if (dsq_ctr_writer_add(w, &t, buf, 16, 0, NULL) != DSQ_ERR_NOSPC) return 13;
    dsq_ctr_writer_abort(w);
    if (dsq_path_exists(tmp) || dsq_path_exists(p)) return 14;
    /* finish after a failure also cleans up. */
    if (dsq_ctr_writer_open(&w, p, 0, NULL) != DSQ_OK) return 15;
    t.name = "big";
    dsq_ctr_writer_add(w, &t, buf, n, 0, NULL);
    if (dsq_ctr_writer_finish(w, NULL) != DSQ_ERR_NOSPC) return 16;
    if (dsq_path_exists(tmp) || dsq_path_exists(p)) return 17;
    free(buf); free(p); free(tmp);
    return 0;
}

static void test_disk_full(void **state)
{
    (void)state;
    char *dir = tpath("tmpfs");
    assert_int_equal(mkdir(dir, 0755), 0);
    pid_t pid = fork();
    if (pid == 0) _exit(nospc_child(dir));
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    free(dir);
    if (WEXITSTATUS(st) == 77) skip();
    assert_int_equal(WEXITSTATUS(st), 0);
}

static void test_roles(void **state)
{
    (void)state;
    uint32_t r;
    for (uint32_t i = 0; i < DSQ_ROLE_COUNT; i++) {
        assert_int_equal(dsq_role_from_name(dsq_role_name(i), &r), DSQ_OK);
        assert_int_equal(r, i);
    }
    assert_string_equal(dsq_role_name(DSQ_ROLE_EXPERT_LINEAR), "expert_linear");
    assert_string_equal(dsq_role_name(999), "other");
    assert_int_equal(dsq_role_from_name("bogus", &r), DSQ_ERR_NOT_FOUND);
    dsq_ctr_tensor_info t;
    memset(&t, 0, sizeof t);
    assert_int_equal(dsq_ctr_numel(&t), 1);
    t.ndim = 2; t.shape[0] = 3; t.shape[1] = 5;
    assert_int_equal(dsq_ctr_numel(&t), 15);
    t.shape[1] = INT64_MAX;
    assert_int_equal(dsq_ctr_numel(&t), -1);
    t.shape[0] = 0;
    assert_int_equal(dsq_ctr_numel(&t), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_empty_and_many, setup, teardown),
        cmocka_unit_test_setup_teardown(test_writer_input_checks, setup, teardown),
        cmocka_unit_test_setup_teardown(test_payload_bitflips, setup, teardown),
        cmocka_unit_test_setup_teardown(test_structure_bitflips, setup, teardown),
        cmocka_unit_test_setup_teardown(test_truncation, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hostile_layouts, setup, teardown),
        cmocka_unit_test_setup_teardown(test_interrupted_write, setup, teardown),
        cmocka_unit_test_setup_teardown(test_resume, setup, teardown),
        cmocka_unit_test_setup_teardown(test_frames, setup, teardown),
        cmocka_unit_test_setup_teardown(test_resume_async_checkpoints, setup, teardown),
        cmocka_unit_test_setup_teardown(test_disk_full, setup, teardown),
        cmocka_unit_test(test_roles),
    };
    return cmocka_run_group_tests_name("container", tests, NULL, NULL);
}
