/* test_st_writer.c - the safetensors writer: exact header bytes, layout
 * order, round trips through the reader, sharding, and the sharded-index
 * failure cases (missing shard, duplicate listing, tensor missing from its
 * shard, unlisted tensor, unreferenced sibling shard). */
#include "dsq_test.h"
#include "dsq_file.h"
#include "dsq_mem.h"
#include "safetensors.h"
#include "st_writer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char *join(const char *dir, const char *name)
{
    char *p = dsq_path_join(dir, name);
    assert_non_null(p);
    return p;
}

static char *slurp(const char *path, size_t *len)
{
    char *buf;
    dsq_diag d;
    dsq_diag_clear(&d);
    assert_int_equal(dsq_read_file(path, 1 << 26, &buf, len, &d), DSQ_OK);
    return buf;
}

static void test_header_bytes(void **state)
{
    (void)state;
    dsq_st_writer *w = dsq_st_writer_create();
    float a[2] = { 1, 2 };
    uint16_t b[3] = { 1, 2, 3 };
    int64_t s2[1] = { 2 }, s3[2] = { 1, 3 };
    assert_int_equal(dsq_st_writer_add(w, "b", DSQ_DTYPE_BF16, 2, s3, b, 6), DSQ_OK);
    assert_int_equal(dsq_st_writer_add(w, "a", DSQ_DTYPE_F32, 1, s2, a, 8), DSQ_OK);
    assert_int_equal(dsq_st_writer_set_meta(w, "format", "pt"), DSQ_OK);
    char *h;
    size_t n;
    dsq_diag d;
    dsq_diag_clear(&d);
    assert_int_equal(dsq_st_writer_header(w, &h, &n, &d), DSQ_OK);
    /* F32 (higher alignment) first, then BF16; padded to a multiple of 8 */
    const char *want = "{\"__metadata__\":{\"format\":\"pt\"},"
        "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
        "\"b\":{\"dtype\":\"BF16\",\"shape\":[1,3],\"data_offsets\":[8,14]}}";
    assert_int_equal(n % 8, 0);
    assert_true(n >= strlen(want) && n < strlen(want) + 8);
    assert_memory_equal(h, want, strlen(want));
    for (size_t i = strlen(want); i < n; i++) assert_int_equal(h[i], ' ');
    free(h);
    dsq_st_writer_free(w);
}

static void test_roundtrip_single(void **state)
{
    (void)state;
    char *dir = dsq_test_tmpdir();
    char *path = join(dir, "x.safetensors");
    dsq_st_writer *w = dsq_st_writer_create();
    static float f32[6] = { 1, -2, 3.5f, 4, 5, 6 };
    static uint16_t bf[4] = { 0x3f80, 0x4000, 0xbf80, 0 };
    static uint8_t u8[3] = { 1, 2, 3 };
    static int64_t i64[1] = { -5 };
    int64_t s23[2] = { 2, 3 }, s4[1] = { 4 }, s3[1] = { 3 };
    assert_int_equal(dsq_st_writer_add(w, "z.f32", DSQ_DTYPE_F32, 2, s23, f32, 24), DSQ_OK);
    assert_int_equal(dsq_st_writer_add(w, "a.bf16", DSQ_DTYPE_BF16, 1, s4, bf, 8), DSQ_OK);
    assert_int_equal(dsq_st_writer_add_copy(w, "m.u8", DSQ_DTYPE_U8, 1, s3, u8, 3), DSQ_OK);
    assert_int_equal(dsq_st_writer_add(w, "scalar", DSQ_DTYPE_I64, 0, NULL, i64, 8), DSQ_OK);
    assert_int_equal(dsq_st_writer_add(w, "empty", DSQ_DTYPE_F16, 1, (int64_t[]){ 0 }, NULL, 0), DSQ_OK);
    assert_int_equal(dsq_st_writer_set_meta(w, "format", "pt"), DSQ_OK);
    assert_int_equal(dsq_st_writer_set_meta(w, "format", "dsq"), DSQ_OK);   /* replaces */
    /* every character JSON must escape, plus '/' and UTF-8 that it need not */
    static const char note[] = "q\"b\\s/n\nt\tc\x01 \xc3\xa9";
    assert_int_equal(dsq_st_writer_set_meta(w, "note \"x\"", note), DSQ_OK);
    assert_int_equal(dsq_st_writer_count(w), 5);
    dsq_diag d;
    dsq_diag_clear(&d);
    assert_int_equal(dsq_st_writer_write(w, path, 0, 0, &d), DSQ_OK);
    /* exists: refused without overwrite, fine with it */
    dsq_diag_clear(&d);
    assert_int_equal(dsq_st_writer_write(w, path, 0, 0, &d), DSQ_ERR_EXISTS);
    dsq_diag_clear(&d);
    assert_int_equal(dsq_st_writer_write(w, path, 0, DSQ_OUT_OVERWRITE, &d), DSQ_OK);
    dsq_st_writer_free(w);

    dsq_st_model *m;
    assert_int_equal(dsq_st_open(&m, path, &d), DSQ_OK);
    assert_int_equal(dsq_st_count(m), 5);
    assert_string_equal(dsq_st_meta_get(m, "format"), "dsq");
    assert_string_equal(dsq_st_meta_get(m, "note \"x\""), note);
    /* byte buffer starts 8-aligned */
    size_t len;
    char *raw = slurp(path, &len);
    static const char esc[] = "\"note \\\"x\\\"\":\"q\\\"b\\\\s/n\\nt\\tc\\u0001 \xc3\xa9\"";
    assert_non_null(memmem(raw, len, esc, sizeof esc - 1));
    assert_int_equal(dsq_load_u64le(raw) % 8, 0);
    free(raw);
    /* layout: descending dtype enum (I64 21, F32 18, BF16 15, F16 14, U8 5) */
    const dsq_st_tensor *ti = dsq_st_find(m, "scalar"), *tf = dsq_st_find(m, "z.f32"),
                        *tb = dsq_st_find(m, "a.bf16"), *tu = dsq_st_find(m, "m.u8");
    assert_true(ti->file_offset < tf->file_offset);
    assert_true(tf->file_offset < tb->file_offset);
    assert_true(tb->file_offset < tu->file_offset);
    assert_int_equal(ti->file_offset % 8, 0);
    assert_memory_equal(tf->data, f32, 24);
    assert_memory_equal(tb->data, bf, 8);
    assert_memory_equal(tu->data, u8, 3);
    assert_memory_equal(ti->data, i64, 8);
    assert_int_equal(tf->shape[0], 2);
    assert_int_equal(tf->shape[1], 3);
    float out[4];
    assert_int_equal(dsq_st_read_rows_f32(m, tb, 0, 1, out, &d), DSQ_OK);
    assert_true(out[0] == 1 && out[1] == 2 && out[2] == -1 && out[3] == 0);
    dsq_st_close(m);
    free(path);
    dsq_test_rmtree(dir);
    free(dir);
}

static void test_writer_errors(void **state)
{
    (void)state;
    char *dir = dsq_test_tmpdir();
    char *path = join(dir, "e.safetensors");
    uint8_t buf[16] = { 0 };
    int64_t s4[1] = { 4 }, sneg[1] = { -1 }, s3[1] = { 3 };
    dsq_diag d;

    dsq_st_writer *w = dsq_st_writer_create();
    assert_int_equal(dsq_st_writer_add(w, "a", DSQ_DTYPE_F32, 1, s4, buf, 15), DSQ_ERR_INVALID_ARG);
    assert_int_equal(dsq_st_writer_add(w, "b", DSQ_DTYPE_F32, 1, s4, buf, 16), DSQ_OK);
    dsq_diag_clear(&d);
    assert_int_equal(dsq_st_writer_write(w, path, 0, 0, &d), DSQ_ERR_INVALID_ARG);
    assert_string_equal(d.tensor, "a");                  /* sticky first error */
    assert_false(dsq_path_exists(path));
    dsq_st_writer_free(w);

    w = dsq_st_writer_create();
    assert_int_equal(dsq_st_writer_add(w, "", DSQ_DTYPE_U8, 1, s4, buf, 4), DSQ_ERR_INVALID_ARG);
    dsq_st_writer_free(w);
    w = dsq_st_writer_create();
    assert_int_equal(dsq_st_writer_add(w, "__metadata__", DSQ_DTYPE_U8, 1, s4, buf, 4), DSQ_ERR_INVALID_ARG);
    dsq_st_writer_free(w);
    w = dsq_st_writer_create();
    assert_int_equal(dsq_st_writer_add(w, "x", DSQ_DTYPE_U8, 1, sneg, buf, 0), DSQ_ERR_INVALID_ARG);
    dsq_st_writer_free(w);
    w = dsq_st_writer_create();
    assert_int_equal(dsq_st_writer_add(w, "x", DSQ_DTYPE_F4, 1, s3, buf, 2), DSQ_ERR_INVALID_ARG);
    dsq_st_writer_free(w);
    w = dsq_st_writer_create();
    assert_int_equal(dsq_st_writer_add(w, "bad\xff", DSQ_DTYPE_U8, 1, s4, buf, 4), DSQ_ERR_INVALID_ARG);
    dsq_st_writer_free(w);
    w = dsq_st_writer_create();
    assert_int_equal(dsq_st_writer_add(w, "x", (enum dsq_dtype)0, 1, s4, buf, 4), DSQ_ERR_INVALID_ARG);
    dsq_st_writer_free(w);
    w = dsq_st_writer_create();
    int64_t big[2] = { INT64_MAX, 4 };
    assert_int_equal(dsq_st_writer_add(w, "x", DSQ_DTYPE_U8, 2, big, buf, 4), DSQ_ERR_OVERFLOW);
    dsq_st_writer_free(w);

    /* duplicate names are found at write */
    w = dsq_st_writer_create();
    assert_int_equal(dsq_st_writer_add(w, "x", DSQ_DTYPE_U8, 1, s4, buf, 4), DSQ_OK);
    assert_int_equal(dsq_st_writer_add(w, "x", DSQ_DTYPE_U8, 1, s4, buf, 4), DSQ_OK);
    dsq_diag_clear(&d);
    assert_int_equal(dsq_st_writer_write(w, path, 0, 0, &d), DSQ_ERR_INVALID_ARG);
    assert_string_equal(d.tensor, "x");
    dsq_st_writer_free(w);
    free(path);
    dsq_test_rmtree(dir);
    free(dir);
}

static int fill_iota(void *ctx, const char *name, void *dst, uint64_t nbytes, dsq_diag *d)
{
    (void)d;
    int *calls = ctx;
    (*calls)++;
    uint8_t *p = dst;
    for (uint64_t i = 0; i < nbytes; i++) p[i] = (uint8_t)(i + (uint8_t)name[0]);
    return 0;
}

static int fill_fail(void *ctx, const char *name, void *dst, uint64_t nbytes, dsq_diag *d)
{
    (void)ctx; (void)dst; (void)nbytes;
    return dsq_fail(d, DSQ_ERR_IO, NULL, name, -1, "source went away");
}

static void test_lazy_and_fp8(void **state)
{
    (void)state;
    char *dir = dsq_test_tmpdir();
    char *path = join(dir, "l.safetensors");
    int calls = 0;
    dsq_st_writer *w = dsq_st_writer_create();
    int64_t s[2] = { 3, 5 };
    assert_int_equal(dsq_st_writer_add_lazy(w, "a", DSQ_DTYPE_U8, 2, s, fill_iota, &calls), DSQ_OK);
    assert_int_equal(dsq_st_writer_add_lazy(w, "b", DSQ_DTYPE_I16, 2, s, fill_iota, &calls), DSQ_OK);
    /* FP8 weight 3 x 5 with a 1 x 1 block scale */
    uint8_t w8[15];
    for (int i = 0; i < 15; i++) w8[i] = dsq_f32_to_fp8_e4m3((float)(i - 7));
    float sc = 0.25f;
    int64_t s11[2] = { 1, 1 };
    assert_int_equal(dsq_st_writer_add(w, "q.weight", DSQ_DTYPE_F8_E4M3, 2, s, w8, 15), DSQ_OK);
    assert_int_equal(dsq_st_writer_add(w, "q.weight_scale_inv", DSQ_DTYPE_F32, 2, s11, &sc, 4), DSQ_OK);
    dsq_diag d;
    dsq_diag_clear(&d);
    assert_int_equal(dsq_st_writer_write(w, path, 0, 0, &d), DSQ_OK);
    assert_int_equal(calls, 2);
    dsq_st_writer_free(w);

    dsq_st_model *m;
    assert_int_equal(dsq_st_open(&m, path, &d), DSQ_OK);
    const dsq_st_tensor *a = dsq_st_find(m, "a"), *b = dsq_st_find(m, "b");
    for (int i = 0; i < 15; i++) assert_int_equal(a->data[i], (uint8_t)(i + 'a'));
    for (int i = 0; i < 30; i++) assert_int_equal(b->data[i], (uint8_t)(i + 'b'));
    const dsq_st_tensor *q = dsq_st_find(m, "q.weight");
    assert_non_null(dsq_st_scale_of(m, q));
    float out[15];
    assert_int_equal(dsq_st_read_rows_f32(m, q, 0, 3, out, &d), DSQ_OK);
    for (int i = 0; i < 15; i++) assert_true(out[i] == (float)(i - 7) * 0.25f);
    dsq_st_close(m);

    /* a failing fill aborts the write and leaves nothing behind */
    w = dsq_st_writer_create();
    assert_int_equal(dsq_st_writer_add_lazy(w, "a", DSQ_DTYPE_U8, 2, s, fill_fail, NULL), DSQ_OK);
    dsq_diag_clear(&d);
    assert_int_equal(dsq_st_writer_write(w, path, 0, DSQ_OUT_OVERWRITE, &d), DSQ_ERR_IO);
    assert_string_equal(d.tensor, "a");
    dsq_st_writer_free(w);
    assert_int_equal(dsq_st_open(&m, path, &d), DSQ_OK);   /* the old file is intact */
    assert_int_equal(dsq_st_count(m), 4);
    dsq_st_close(m);
    free(path);
    dsq_test_rmtree(dir);
    free(dir);
}

/* three shards: t0..t5, 64 bytes each, 128-byte shards */
static void write_sharded(const char *dir, float data[6][16])
{
    dsq_st_writer *w = dsq_st_writer_create();
    int64_t s[2] = { 4, 4 };
    for (int t = 0; t < 6; t++) {
        char nm[32];
        snprintf(nm, sizeof nm, "t%d", t);
        for (int i = 0; i < 16; i++) data[t][i] = (float)(t * 100 + i);
        assert_int_equal(dsq_st_writer_add(w, nm, DSQ_DTYPE_F32, 2, s, data[t], 64), DSQ_OK);
    }
    dsq_st_writer_set_meta(w, "format", "pt");
    dsq_diag d;
    dsq_diag_clear(&d);
    assert_int_equal(dsq_st_writer_write(w, dir, 128, DSQ_OUT_OVERWRITE, &d), DSQ_OK);
    dsq_st_writer_free(w);
}

static int open_status(const char *dir, dsq_diag *d)
{
    dsq_st_model *m = NULL;
    dsq_diag_clear(d);
    int rc = dsq_st_open(&m, dir, d);
    dsq_st_close(m);
    return rc;
}

/* replace the first occurrence of from with to in the file */
static void edit_file(const char *path, const char *from, const char *to)
{
    size_t len;
    char *s = slurp(path, &len);
    char *p = strstr(s, from);
    assert_non_null(p);
    size_t nf = strlen(from), nt = strlen(to);
    char *o = malloc(len - nf + nt + 1);
    memcpy(o, s, (size_t)(p - s));
    memcpy(o + (p - s), to, nt);
    memcpy(o + (p - s) + nt, p + nf, len - (size_t)(p - s) - nf);
    dsq_test_write(path, o, len - nf + nt);
    free(o);
    free(s);
}

static void test_sharded(void **state)
{
    (void)state;
    char *root = dsq_test_tmpdir();
    char *dir = join(root, "ckpt");
    static float data[6][16];
    write_sharded(dir, data);
    char *idx = join(dir, "model.safetensors.index.json");
    char *sh1 = join(dir, "model-00001-of-00003.safetensors");
    char *sh2 = join(dir, "model-00002-of-00003.safetensors");
    char *sh3 = join(dir, "model-00003-of-00003.safetensors");
    assert_true(dsq_path_exists(idx));
    assert_true(dsq_path_exists(sh3));
    size_t len;
    char *text = slurp(idx, &len);
    assert_non_null(strstr(text, "\"total_size\": 384"));
    assert_non_null(strstr(text, "\"t5\": \"model-00003-of-00003.safetensors\""));
    free(text);

    dsq_st_model *m;
    dsq_diag d;
    dsq_diag_clear(&d);
    assert_int_equal(dsq_st_open(&m, dir, &d), DSQ_OK);
    assert_int_equal(dsq_st_count(m), 6);
    assert_int_equal(dsq_st_shard_count(m), 3);
    assert_string_equal(dsq_st_shard_path(m, 1), sh2);
    assert_string_equal(dsq_st_dir(m), dir);
    assert_string_equal(dsq_st_meta_get(m, "format"), "pt");
    assert_int_equal(dsq_st_total_bytes(m), 384);
    for (int t = 0; t < 6; t++) {
        const dsq_st_tensor *ten = dsq_st_get(m, (size_t)t);
        assert_int_equal(ten->shard, t / 2);
        float out[16];
        assert_int_equal(dsq_st_read_rows_f32(m, ten, 0, 4, out, &d), DSQ_OK);
        assert_memory_equal(out, data[t], 64);
    }
    dsq_st_close(m);
    /* the index file itself also opens */
    assert_int_equal(open_status(idx, &d), DSQ_OK);

    /* a tensor listed twice in the weight_map */
    edit_file(idx, "\"t0\":", "\"t1\": \"model-00001-of-00003.safetensors\",\n    \"t0\":");
    assert_int_equal(open_status(dir, &d), DSQ_ERR_FORMAT);
    assert_string_equal(d.tensor, "t1");
    assert_non_null(strstr(d.msg, "twice"));
    write_sharded(dir, data);

    /* shard lacking a tensor the weight_map lists */
    edit_file(idx, "\"t0\":", "\"t9\": \"model-00002-of-00003.safetensors\",\n    \"t0\":");
    assert_int_equal(open_status(dir, &d), DSQ_ERR_NOT_FOUND);
    assert_string_equal(d.tensor, "t9");
    assert_string_equal(d.path, sh2);
    write_sharded(dir, data);

    /* a tensor in a shard but not in the weight_map */
    edit_file(idx, "\"t3\": \"model-00002-of-00003.safetensors\",", "");
    assert_int_equal(open_status(dir, &d), DSQ_ERR_FORMAT);
    assert_string_equal(d.tensor, "t3");
    write_sharded(dir, data);

    /* weight_map names the wrong shard */
    edit_file(idx, "\"t3\": \"model-00002", "\"t3\": \"model-00001");
    assert_int_equal(open_status(dir, &d), DSQ_ERR_FORMAT);
    assert_string_equal(d.tensor, "t3");
    write_sharded(dir, data);

    /* missing shard */
    assert_int_equal(unlink(sh2), 0);
    assert_int_equal(open_status(dir, &d), DSQ_ERR_NOT_FOUND);
    assert_string_equal(d.path, sh2);
    write_sharded(dir, data);

    /* truncated shard */
    text = slurp(sh3, &len);
    dsq_test_write(sh3, text, len - 1);
    free(text);
    assert_int_equal(open_status(dir, &d), DSQ_ERR_TRUNCATED);
    assert_string_equal(d.path, sh3);
    write_sharded(dir, data);

    /* a sibling shard file the weight_map never references */
    char *stray = join(dir, "model-00004-of-00003.safetensors");
    text = slurp(sh1, &len);
    dsq_test_write(stray, text, len);
    free(text);
    assert_int_equal(open_status(dir, &d), DSQ_ERR_FORMAT);
    assert_non_null(strstr(d.msg, "model-00004-of-00003.safetensors"));
    assert_int_equal(unlink(stray), 0);
    free(stray);
    /* an unrelated .safetensors file next to the shards is ignored */
    stray = join(dir, "consolidated.safetensors");
    text = slurp(sh1, &len);
    dsq_test_write(stray, text, len);
    free(text);
    assert_int_equal(open_status(dir, &d), DSQ_OK);
    assert_int_equal(unlink(stray), 0);
    free(stray);

    /* the same tensor in two shards: map t2 to shard 1 and put a copy there */
    {
        dsq_st_writer *w = dsq_st_writer_create();
        int64_t s[2] = { 4, 4 };
        assert_int_equal(dsq_st_writer_add(w, "t0", DSQ_DTYPE_F32, 2, s, data[0], 64), DSQ_OK);
        assert_int_equal(dsq_st_writer_add(w, "t1", DSQ_DTYPE_F32, 2, s, data[1], 64), DSQ_OK);
        assert_int_equal(dsq_st_writer_add(w, "t2", DSQ_DTYPE_F32, 2, s, data[2], 64), DSQ_OK);
        dsq_diag_clear(&d);
        assert_int_equal(dsq_st_writer_write(w, sh1, 0, DSQ_OUT_OVERWRITE, &d), DSQ_OK);
        dsq_st_writer_free(w);
        assert_int_equal(open_status(dir, &d), DSQ_ERR_FORMAT);
        assert_string_equal(d.tensor, "t2");
    }
    write_sharded(dir, data);

    /* hostile shard names in the index */
    edit_file(idx, "\"t0\": \"model-00001", "\"t0\": \"../model-00001");
    assert_int_equal(open_status(dir, &d), DSQ_ERR_FORMAT);
    write_sharded(dir, data);
    edit_file(idx, "\"t0\": \"model-00001", "\"t0\": \"/model-00001");
    assert_int_equal(open_status(dir, &d), DSQ_ERR_FORMAT);
    write_sharded(dir, data);
    /* broken index json; empty weight_map; weight_map of non-strings */
    edit_file(idx, "\"weight_map\": {", "\"weight_map\": {{");
    assert_int_equal(open_status(dir, &d), DSQ_ERR_JSON);
    dsq_test_write(idx, "{\"weight_map\":{}}", 17);
    assert_int_equal(open_status(dir, &d), DSQ_ERR_FORMAT);
    dsq_test_write(idx, "{\"weight_map\":{\"t0\":1}}", 23);
    assert_int_equal(open_status(dir, &d), DSQ_ERR_FORMAT);
    dsq_test_write(idx, "{\"metadata\":{}}", 15);
    assert_int_equal(open_status(dir, &d), DSQ_ERR_FORMAT);
    /* DeepSeek-style empty metadata is fine */
    write_sharded(dir, data);
    edit_file(idx, "\"total_size\": 384", "");
    assert_int_equal(open_status(dir, &d), DSQ_OK);

    /* one shard is enough: model.safetensors and no index */
    char *dir1 = join(root, "one");
    {
        dsq_st_writer *w = dsq_st_writer_create();
        int64_t s[2] = { 4, 4 };
        assert_int_equal(dsq_st_writer_add(w, "t0", DSQ_DTYPE_F32, 2, s, data[0], 64), DSQ_OK);
        dsq_diag_clear(&d);
        assert_int_equal(dsq_st_writer_write(w, dir1, 1 << 20, 0, &d), DSQ_OK);
        dsq_st_writer_free(w);
        char *p = join(dir1, "model.safetensors");
        assert_true(dsq_path_exists(p));
        free(p);
        p = join(dir1, "model.safetensors.index.json");
        assert_false(dsq_path_exists(p));
        free(p);
        assert_int_equal(open_status(dir1, &d), DSQ_OK);
    }
    /* a tensor larger than max_shard_bytes gets a shard of its own */
    {
        char *dir2 = join(root, "big");
        dsq_st_writer *w = dsq_st_writer_create();
        int64_t s[2] = { 4, 4 };
        assert_int_equal(dsq_st_writer_add(w, "a", DSQ_DTYPE_F32, 2, s, data[0], 64), DSQ_OK);
        assert_int_equal(dsq_st_writer_add(w, "b", DSQ_DTYPE_F32, 2, s, data[1], 64), DSQ_OK);
        dsq_diag_clear(&d);
        assert_int_equal(dsq_st_writer_write(w, dir2, 10, 0, &d), DSQ_OK);
        dsq_st_writer_free(w);
        dsq_diag_clear(&d);
        assert_int_equal(dsq_st_open(&m, dir2, &d), DSQ_OK);
        assert_int_equal(dsq_st_shard_count(m), 2);
        dsq_st_close(m);
        free(dir2);
    }
    free(dir1);
    free(idx); free(sh1); free(sh2); free(sh3);
    free(dir);
    dsq_test_rmtree(root);
    free(root);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_header_bytes),
        cmocka_unit_test(test_roundtrip_single),
        cmocka_unit_test(test_writer_errors),
        cmocka_unit_test(test_lazy_and_fp8),
        cmocka_unit_test(test_sharded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
