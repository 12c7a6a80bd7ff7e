/* test_safetensors.c - dtype table, fp8 decoding, and the safetensors reader
 * against valid and deliberately corrupt inputs built in memory. Every
 * failure case checks the exact status. */
#include "dsq_test.h"
#include "dsq_mem.h"
#include "dtype.h"
#include "safetensors.h"
#include "dsq_thread.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ===== helpers ===== */

struct fbuf { uint8_t *p; size_t n; };

/* [u64 len][hdr][data] */
static struct fbuf mkfile(const char *hdr, const void *data, size_t dn)
{
    size_t hn = strlen(hdr);
    struct fbuf f = { malloc(8 + hn + dn + 1), 8 + hn + dn };
    assert_non_null(f.p);
    dsq_store_u64le(f.p, hn);
    memcpy(f.p + 8, hdr, hn);
    if (dn) memcpy(f.p + 8 + hn, data, dn);
    return f;
}

static int parse_flags(const char *hdr, const void *data, size_t dn, unsigned flags,
                       dsq_diag *d)
{
    struct fbuf f = mkfile(hdr, data, dn);
    dsq_st_model *m = NULL;
    dsq_diag_clear(d);
    int rc = dsq_st_parse_buffer(&m, f.p, f.n, "t.safetensors", flags, d);
    if (rc == DSQ_OK) assert_non_null(m); else assert_null(m);
    dsq_st_close(m);
    free(f.p);
    return rc;
}

static int parse(const char *hdr, const void *data, size_t dn, dsq_diag *d)
{
    return parse_flags(hdr, data, dn, 0, d);
}

#define EXPECT(status, hdr, data, dn) do {                                      \
        dsq_diag d_;                                                            \
        int rc_ = parse(hdr, data, dn, &d_);                                    \
        if (rc_ != (status)) fprintf(stderr, "got %d (%s)\n", rc_, d_.msg);     \
        assert_int_equal(rc_, status);                                          \
        if ((status) < 0) assert_string_equal(d_.path, "t.safetensors");        \
    } while (0)

static uint8_t zeros[4096];

/* ===== dtype ===== */

static void test_dtype_table(void **state)
{
    (void)state;
    static const char *names[] = { "BOOL", "F4", "F6_E2M3", "F6_E3M2", "U8", "I8", "F8_E5M2",
        "F8_E4M3", "F8_E8M0", "F8_E4M3FNUZ", "F8_E5M2FNUZ", "I16", "U16", "F16", "BF16", "I32",
        "U32", "F32", "C64", "F64", "I64", "U64" };
    static const unsigned bits[] = { 8, 4, 6, 6, 8, 8, 8, 8, 8, 8, 8, 16, 16, 16, 16, 32, 32, 32,
        64, 64, 64, 64 };
    assert_int_equal(sizeof names / sizeof names[0], DSQ_DTYPE_COUNT - 1);
    for (int i = 1; i < DSQ_DTYPE_COUNT; i++) {
        assert_string_equal(dsq_dtype_name((enum dsq_dtype)i), names[i - 1]);
        assert_int_equal(dsq_dtype_from_name(names[i - 1]), i);
        assert_int_equal(dsq_dtype_bits((enum dsq_dtype)i), bits[i - 1]);
    }
    assert_int_equal(DSQ_DTYPE_BF16, 15);           /* pinned */
    assert_int_equal(DSQ_DTYPE_F8_E4M3, 8);
    assert_int_equal(dsq_dtype_from_name("bf16"), DSQ_DTYPE_INVALID);
    assert_int_equal(dsq_dtype_from_name("F8"), DSQ_DTYPE_INVALID);
    assert_int_equal(dsq_dtype_from_name(""), DSQ_DTYPE_INVALID);
    assert_int_equal(dsq_dtype_from_name(NULL), DSQ_DTYPE_INVALID);
    assert_int_equal(dsq_dtype_from_name_n("F32x", 3), DSQ_DTYPE_F32);
    assert_int_equal(dsq_dtype_bits((enum dsq_dtype)99), 0);
    assert_string_equal(dsq_dtype_name((enum dsq_dtype)-1), "INVALID");
}

/* reference decoders written from the format definitions */
static float ref_e4m3(unsigned x)
{
    int s = x >> 7, e = (x >> 3) & 15, m = x & 7;
    if (e == 15 && m == 7) return NAN;
    float v = e ? ldexpf(1.0f + m / 8.0f, e - 7) : ldexpf((float)m, -9);
    return s ? -v : v;
}

static float ref_e5m2(unsigned x)
{
    int s = x >> 7, e = (x >> 2) & 31, m = x & 3;
    float v;
    if (e == 31) v = m ? NAN : INFINITY;
    else v = e ? ldexpf(1.0f + m / 4.0f, e - 15) : ldexpf((float)m, -16);
    return s ? -v : v;
}

static void test_fp8_tables(void **state)
{
    (void)state;
    for (unsigned x = 0; x < 256; x++) {
        float a = dsq_fp8_e4m3_to_f32((uint8_t)x), b = ref_e4m3(x);
        if (isnan(b)) assert_true(isnan(a));
        else assert_int_equal(dsq_f32_bits(a), dsq_f32_bits(b));
        a = dsq_fp8_e5m2_to_f32((uint8_t)x);
        b = ref_e5m2(x);
        if (isnan(b)) assert_true(isnan(a));
        else assert_int_equal(dsq_f32_bits(a), dsq_f32_bits(b));
        /* encoders invert the decoders on every non-NaN code */
        if (!isnan(ref_e4m3(x))) assert_int_equal(dsq_f32_to_fp8_e4m3(ref_e4m3(x)), x);
        if (!isnan(ref_e5m2(x))) assert_int_equal(dsq_f32_to_fp8_e5m2(ref_e5m2(x)), x);
    }
    assert_true(dsq_fp8_e4m3_to_f32(0x7e) == 448.0f);
    assert_true(isnan(dsq_fp8_e4m3_to_f32(0x7f)));
    assert_true(isnan(dsq_fp8_e4m3_to_f32(0xff)));
    assert_true(dsq_fp8_e4m3_to_f32(0x38) == 1.0f);
    assert_true(dsq_fp8_e4m3_to_f32(0x01) == 0x1p-9f);
    assert_true(dsq_fp8_e5m2_to_f32(0x7b) == 57344.0f);
    assert_true(isinf(dsq_fp8_e5m2_to_f32(0x7c)));
    /* rounding: ties to even, saturation, NaN */
    assert_int_equal(dsq_f32_to_fp8_e4m3(1.0625f), 0x38);     /* halfway 1 .. 1.125 -> even */
    assert_int_equal(dsq_f32_to_fp8_e4m3(1.1875f), 0x3a);     /* halfway 1.125 .. 1.25 -> 1.25 */
    assert_int_equal(dsq_f32_to_fp8_e4m3(1000.0f), 0x7e);
    assert_int_equal(dsq_f32_to_fp8_e4m3(-1000.0f), 0xfe);
    assert_int_equal(dsq_f32_to_fp8_e4m3(NAN), 0x7f);
    assert_int_equal(dsq_f32_to_fp8_e4m3(0x1p-11f), 0x00);    /* below half of min subnormal */
    assert_int_equal(dsq_f32_to_fp8_e4m3(0x1.8p-10f), 0x01);  /* 0.75 * 2^-9 */
    assert_int_equal(dsq_f32_to_fp8_e4m3(0x1.fp-7f), 0x08);   /* rounds up to min normal */
    assert_int_equal(dsq_f32_to_fp8_e5m2(61440.0f), 0x7c);    /* tie past max -> inf */
    assert_int_equal(dsq_f32_to_fp8_e5m2(60000.0f), 0x7b);
    assert_true(dsq_fp8_e8m0_to_f32(127) == 1.0f);
    assert_true(dsq_fp8_e8m0_to_f32(130) == 8.0f);
    assert_true(isnan(dsq_fp8_e8m0_to_f32(255)));
}

/* ===== valid files ===== */

static void test_valid_basic(void **state)
{
    (void)state;
    float a[4] = { 1, 2, 3, 4 };
    uint16_t b[3] = { 0x3f80, 0xc000, 0x0000 };    /* bf16 1, -2, 0 */
    uint8_t data[16 + 6 + 4];
    memcpy(data, a, 16);
    memcpy(data + 16, b, 6);
    float s = 7.5f;
    memcpy(data + 22, &s, 4);
    const char *hdr =
        "{\"__metadata__\":{\"format\":\"pt\",\"a\":\"b\"},"
        "\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]},"
        "\"v\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[16,22]},"
        "\"empty\":{\"dtype\":\"F16\",\"shape\":[0,5],\"data_offsets\":[22,22]},"
        "\"scalar\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[22,26]}}   ";
    struct fbuf f = mkfile(hdr, data, sizeof data);
    dsq_st_model *m;
    dsq_diag d;
    assert_int_equal(dsq_st_parse_buffer(&m, f.p, f.n, "x", 0, &d), DSQ_OK);
    assert_int_equal(dsq_st_count(m), 4);
    assert_string_equal(dsq_st_get(m, 0)->name, "empty");   /* sorted by name */
    assert_string_equal(dsq_st_get(m, 3)->name, "w");
    assert_null(dsq_st_get(m, 4));
    assert_int_equal(dsq_st_shard_count(m), 1);
    assert_string_equal(dsq_st_shard_path(m, 0), "x");
    assert_string_equal(dsq_st_dir(m), ".");
    assert_int_equal(dsq_st_meta_count(m), 2);
    assert_string_equal(dsq_st_meta_get(m, "format"), "pt");
    assert_null(dsq_st_meta_get(m, "nope"));
    const char *k, *v;
    assert_int_equal(dsq_st_meta_at(m, 0, &k, &v), DSQ_OK);
    assert_string_equal(k, "a");
    assert_int_equal(dsq_st_meta_at(m, 2, &k, &v), DSQ_ERR_INVALID_ARG);
    assert_int_equal(dsq_st_total_bytes(m), 26);

    const dsq_st_tensor *w = dsq_st_find(m, "w");
    assert_non_null(w);
    assert_int_equal(w->dtype, DSQ_DTYPE_F32);
    assert_int_equal(w->ndim, 2);
    assert_int_equal(w->numel, 4);
    assert_int_equal(w->nbytes, 16);
    assert_int_equal(w->file_offset, 8 + strlen(hdr));
    assert_ptr_equal(w->data, f.p + 8 + strlen(hdr));
    float out[4];
    assert_int_equal(dsq_st_read_rows_f32(m, w, 1, 1, out, &d), DSQ_OK);
    assert_true(out[0] == 3 && out[1] == 4);

    const dsq_st_tensor *vt = dsq_st_find(m, "v");
    assert_int_equal(dsq_st_rows(vt), 1);
    assert_int_equal(dsq_st_cols(vt), 3);
    assert_int_equal(dsq_st_read_rows_f32(m, vt, 0, 1, out, &d), DSQ_OK);
    assert_true(out[0] == 1 && out[1] == -2 && out[2] == 0);

    const dsq_st_tensor *e = dsq_st_find(m, "empty");
    assert_int_equal(e->numel, 0);
    assert_null(e->data);
    assert_int_equal(dsq_st_rows(e), 0);
    assert_int_equal(dsq_st_cols(e), 5);
    assert_int_equal(dsq_st_read_rows_f32(m, e, 0, 0, NULL, &d), DSQ_OK);

    const dsq_st_tensor *sc = dsq_st_find(m, "scalar");
    assert_int_equal(sc->ndim, 0);
    assert_int_equal(sc->numel, 1);
    assert_int_equal(dsq_st_read_rows_f32(m, sc, 0, 1, out, &d), DSQ_OK);
    assert_true(out[0] == 7.5f);
    assert_null(dsq_st_find(m, "nope"));
    assert_false(dsq_st_is_companion(m, w));
    assert_null(dsq_st_scale_of(m, w));
    assert_int_equal(dsq_st_advise(m, w, DSQ_ST_DONTNEED), DSQ_OK);   /* no-op on buffers */

    /* row range checks */
    assert_int_equal(dsq_st_read_rows_f32(m, w, 1, 2, out, &d), DSQ_ERR_INVALID_ARG);
    assert_int_equal(dsq_st_read_rows_f32(m, w, -1, 1, out, &d), DSQ_ERR_INVALID_ARG);
    dsq_st_tensor fake = *w;
    assert_int_equal(dsq_st_read_rows_f32(m, &fake, 0, 1, out, &d), DSQ_ERR_INVALID_ARG);
    dsq_st_close(m);
    free(f.p);

    /* empty header object and no tensors is a valid (empty) file */
    EXPECT(DSQ_OK, "{}", NULL, 0);
    EXPECT(DSQ_OK, "{\"__metadata__\":{}}", NULL, 0);
    /* two zero-size tensors at the same offset tile fine */
    EXPECT(DSQ_OK, "{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]},"
                   "\"b\":{\"dtype\":\"I8\",\"shape\":[0],\"data_offsets\":[0,0]},"
                   "\"c\":{\"dtype\":\"I8\",\"shape\":[2],\"data_offsets\":[0,2]}}", zeros, 2);
    /* F4: two per byte; unknown extra keys in an entry are ignored */
    EXPECT(DSQ_OK, "{\"a\":{\"dtype\":\"F4\",\"shape\":[4],\"data_offsets\":[0,2],\"x\":1}}", zeros, 2);
    /* escaped names are unescaped */
    {
        struct fbuf g = mkfile("{\"a\\u00e9\\n\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
                               zeros, 1);
        assert_int_equal(dsq_st_parse_buffer(&m, g.p, g.n, "x", 0, &d), DSQ_OK);
        assert_non_null(dsq_st_find(m, "a\xc3\xa9\n"));
        dsq_st_close(m);
        free(g.p);
    }
}

/* ===== header structure ===== */

static void test_truncated(void **state)
{
    (void)state;
    dsq_diag d;
    dsq_st_model *m;
    dsq_diag_clear(&d);
    uint8_t tiny[5] = { 2, 0, 0, 0, 0 };
    assert_int_equal(dsq_st_parse_buffer(&m, tiny, 5, "t.safetensors", 0, &d), DSQ_ERR_TRUNCATED);
    assert_int_equal(d.offset, 0);
    assert_int_equal(dsq_st_parse_buffer(&m, tiny, 0, "t.safetensors", 0, &d), DSQ_ERR_TRUNCATED);
    /* header length larger than the file */
    uint8_t buf[16] = { 100, 0, 0, 0, 0, 0, 0, 0, '{', '}' };
    assert_int_equal(dsq_st_parse_buffer(&m, buf, 10, "t.safetensors", 0, &d), DSQ_ERR_TRUNCATED);
    /* header length over the 100,000,000 cap (even if the file were big) */
    dsq_store_u64le(buf, 100000001ull);
    assert_int_equal(dsq_st_parse_buffer(&m, buf, 10, "t.safetensors", 0, &d), DSQ_ERR_FORMAT);
    dsq_store_u64le(buf, UINT64_MAX);
    dsq_diag_clear(&d); /* the first failure is kept: start afresh */
    assert_int_equal(dsq_st_parse_buffer(&m, buf, 10, "t.safetensors", 0, &d), DSQ_ERR_FORMAT);
    assert_non_null(strstr(d.msg, "not a safetensors file"));
    /* not a safetensors file at all: a text file, a .dsq. The message must
     * say so, not quote a header length the first 8 bytes happen to spell
     * ("header length 738734374976 exceeds the limit") */
    {
        const char *txt = "hello world, this is text\n";
        dsq_diag_clear(&d);
        assert_int_equal(dsq_st_parse_buffer(&m, (const uint8_t *)txt, strlen(txt), "x.txt", 0, &d), DSQ_ERR_FORMAT);
        assert_non_null(strstr(d.msg, "not a safetensors file"));
        uint8_t odd[16] = { 4, 0, 0, 0, 0, 0, 0, 0, 'D', 'S', 'Q', '1' }; /* small length, no JSON */
        dsq_diag_clear(&d);
        assert_int_equal(dsq_st_parse_buffer(&m, odd, 12, "y.bin", 0, &d), DSQ_ERR_FORMAT);
        assert_non_null(strstr(d.msg, "not a safetensors file"));
    }
    /* data shorter than declared */
    const char *h = "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}";
    EXPECT(DSQ_ERR_TRUNCATED, h, zeros, 12);
    EXPECT(DSQ_OK, h, zeros, 16);
    /* bytes after the last tensor are a hole */
    EXPECT(DSQ_ERR_FORMAT, h, zeros, 17);
    /* header cut in the middle of the JSON */
    EXPECT(DSQ_ERR_JSON, "{\"a\":{\"dtype\":\"F32\"", NULL, 0);
}

static void test_header_json(void **state)
{
    (void)state;
    EXPECT(DSQ_ERR_FORMAT, "", NULL, 0);
    EXPECT(DSQ_ERR_FORMAT, " {}", NULL, 0);               /* must start with '{' */
    EXPECT(DSQ_ERR_FORMAT, "[]", NULL, 0);
    EXPECT(DSQ_ERR_JSON, "{,}", NULL, 0);
    EXPECT(DSQ_ERR_JSON, "{\"a\":}", NULL, 0);
    EXPECT(DSQ_ERR_JSON, "{'a':1}", NULL, 0);
    EXPECT(DSQ_ERR_JSON, "{} x", NULL, 0);                 /* trailing garbage */
    EXPECT(DSQ_ERR_JSON, "{}{}", NULL, 0);
    EXPECT(DSQ_OK, "{} \n\t ", NULL, 0);                   /* trailing whitespace is padding */
    EXPECT(DSQ_ERR_JSON, "{\"\xff\":1}", NULL, 0);         /* not UTF-8 */
    {   /* NUL byte inside the header */
        struct fbuf f = mkfile("{\"a\":1}  ", NULL, 0);
        f.p[8 + 7] = 0;
        dsq_st_model *m;
        dsq_diag d;
        dsq_diag_clear(&d);
        assert_int_equal(dsq_st_parse_buffer(&m, f.p, f.n, "t.safetensors", 0, &d), DSQ_ERR_JSON);
        assert_int_equal(d.offset, 8 + 7);
        free(f.p);
    }
    /* entries of the wrong kind */
    EXPECT(DSQ_ERR_FORMAT, "{\"a\":1}", NULL, 0);
    EXPECT(DSQ_ERR_FORMAT, "{\"a\":{\"shape\":[1],\"data_offsets\":[0,1]}}", zeros, 1);
    EXPECT(DSQ_ERR_FORMAT, "{\"a\":{\"dtype\":\"U8\",\"data_offsets\":[0,1]}}", zeros, 1);
    EXPECT(DSQ_ERR_FORMAT, "{\"a\":{\"dtype\":\"U8\",\"shape\":[1]}}", zeros, 1);
    EXPECT(DSQ_ERR_FORMAT, "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0]}}", zeros, 1);
    EXPECT(DSQ_ERR_FORMAT, "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1,2]}}", zeros, 1);
    EXPECT(DSQ_ERR_FORMAT, "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,\"1\"]}}", zeros, 1);
    EXPECT(DSQ_ERR_FORMAT, "{\"a\":{\"dtype\":\"U8\",\"shape\":[1.0],\"data_offsets\":[0,1]}}", zeros, 1);
    EXPECT(DSQ_ERR_FORMAT, "{\"a\":{\"dtype\":\"U8\",\"shape\":[-1],\"data_offsets\":[0,1]}}", zeros, 1);
    EXPECT(DSQ_ERR_FORMAT, "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[-1,0]}}", zeros, 1);
    EXPECT(DSQ_ERR_FORMAT, "{\"a\":{\"dtype\":1,\"shape\":[1],\"data_offsets\":[0,1]}}", zeros, 1);
    EXPECT(DSQ_ERR_FORMAT, "{\"\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", zeros, 1);
    /* rank 9 */
    EXPECT(DSQ_ERR_FORMAT, "{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],"
                           "\"data_offsets\":[0,1]}}", zeros, 1);
    EXPECT(DSQ_OK, "{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1],"
                   "\"data_offsets\":[0,1]}}", zeros, 1);
}

static void test_dtype_shape_errors(void **state)
{
    (void)state;
    dsq_diag d;
    /* unknown dtype */
    EXPECT(DSQ_ERR_FORMAT, "{\"a\":{\"dtype\":\"F128\",\"shape\":[1],\"data_offsets\":[0,16]}}", zeros, 16);
    parse("{\"a\":{\"dtype\":\"bf16\",\"shape\":[1],\"data_offsets\":[0,2]}}", zeros, 2, &d);
    assert_string_equal(d.tensor, "a");
    assert_non_null(strstr(d.msg, "unknown dtype 'bf16'"));
    assert_int_equal(d.offset, 8 + 1);          /* the entry's key in the header */
    /* dtype/shape do not match the byte span */
    EXPECT(DSQ_ERR_FORMAT, "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,16]}}", zeros, 16);
    EXPECT(DSQ_ERR_FORMAT, "{\"a\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[0,16]}}", zeros, 16);
    /* begin after end */
    EXPECT(DSQ_ERR_FORMAT, "{\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[4,0]}}", zeros, 4);
    /* shape overflow */
    EXPECT(DSQ_ERR_OVERFLOW, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1099511627776,1099511627776],"
                             "\"data_offsets\":[0,4]}}", zeros, 4);
    /* numel fits but numel * 32 bits does not */
    EXPECT(DSQ_ERR_OVERFLOW, "{\"a\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904],"
                             "\"data_offsets\":[0,4]}}", zeros, 4);
    EXPECT(DSQ_ERR_OVERFLOW, "{\"a\":{\"dtype\":\"U8\",\"shape\":[18446744073709551615],"
                             "\"data_offsets\":[0,4]}}", zeros, 4);
    /* zero dim does not hide an overflowing product of the others */
    EXPECT(DSQ_ERR_OVERFLOW, "{\"a\":{\"dtype\":\"U8\",\"shape\":[0,4294967296,4294967296],"
                             "\"data_offsets\":[0,0]}}", NULL, 0);
    /* offsets beyond any file */
    EXPECT(DSQ_ERR_FORMAT, "{\"a\":{\"dtype\":\"U8\",\"shape\":[0],"
                           "\"data_offsets\":[18446744073709551615,18446744073709551615]}}", NULL, 0);
    /* 3 x F4 = 12 bits: not whole bytes */
    EXPECT(DSQ_ERR_FORMAT, "{\"a\":{\"dtype\":\"F4\",\"shape\":[3],\"data_offsets\":[0,2]}}", zeros, 2);
    EXPECT(DSQ_ERR_FORMAT, "{\"a\":{\"dtype\":\"F6_E2M3\",\"shape\":[3],\"data_offsets\":[0,2]}}", zeros, 2);
    EXPECT(DSQ_OK, "{\"a\":{\"dtype\":\"F6_E2M3\",\"shape\":[4],\"data_offsets\":[0,3]}}", zeros, 3);
}

static void test_offsets_tiling(void **state)
{
    (void)state;
    dsq_diag d;
    /* overlap */
    EXPECT(DSQ_ERR_FORMAT, "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
                           "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[2,6]}}", zeros, 6);
    parse("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
          "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[2,6]}}", zeros, 6, &d);
    assert_string_equal(d.tensor, "b");
    assert_non_null(strstr(d.msg, "overlap"));
    /* gap */
    EXPECT(DSQ_ERR_FORMAT, "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
                           "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[5,9]}}", zeros, 9);
    parse("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
          "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[5,9]}}", zeros, 9, &d);
    assert_non_null(strstr(d.msg, "hole"));
    /* first tensor not at 0 */
    EXPECT(DSQ_ERR_FORMAT, "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[1,5]}}", zeros, 5);
    /* identical spans */
    EXPECT(DSQ_ERR_FORMAT, "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
                           "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", zeros, 4);
    /* out of order in the header is fine as long as they tile */
    EXPECT(DSQ_OK, "{\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[4,8]},"
                   "\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", zeros, 8);
}

static void test_metadata_and_duplicates(void **state)
{
    (void)state;
    dsq_diag d;
    EXPECT(DSQ_ERR_FORMAT, "{\"__metadata__\":{\"a\":1}}", NULL, 0);
    EXPECT(DSQ_ERR_FORMAT, "{\"__metadata__\":{\"a\":{\"b\":\"c\"}}}", NULL, 0);
    EXPECT(DSQ_ERR_FORMAT, "{\"__metadata__\":{\"a\":null}}", NULL, 0);
    EXPECT(DSQ_ERR_FORMAT, "{\"__metadata__\":[\"a\"]}", NULL, 0);
    EXPECT(DSQ_ERR_FORMAT, "{\"__metadata__\":\"x\"}", NULL, 0);
    EXPECT(DSQ_ERR_FORMAT, "{\"__metadata__\":{\"a\":\"x\\u0000y\"}}", NULL, 0);
    /* duplicate tensor names, also when spelled with escapes */
    const char *dup = "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                      "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}";
    EXPECT(DSQ_ERR_FORMAT, dup, zeros, 2);
    parse(dup, zeros, 2, &d);
    assert_string_equal(d.tensor, "a");
    assert_non_null(strstr(d.msg, "duplicate"));
    EXPECT(DSQ_ERR_FORMAT, "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                           "\"\\u0061\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}", zeros, 2);
    /* duplicate key inside an entry or the metadata */
    EXPECT(DSQ_ERR_FORMAT, "{\"a\":{\"dtype\":\"U8\",\"dtype\":\"U8\",\"shape\":[1],"
                           "\"data_offsets\":[0,1]}}", zeros, 1);
    EXPECT(DSQ_ERR_FORMAT, "{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", NULL, 0);
    /* names with a NUL or a lone surrogate */
    EXPECT(DSQ_ERR_FORMAT, "{\"a\\u0000b\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", zeros, 1);
    EXPECT(DSQ_ERR_FORMAT, "{\"a\\ud800\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", zeros, 1);
    EXPECT(DSQ_OK, "{\"a\\ud83d\\ude00\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", zeros, 1);
}

/* ===== conversions ===== */

static void test_bf16_f16_all_values(void **state)
{
    (void)state;
    enum { N = 65536 };
    uint16_t *h = malloc(N * 2);
    float *out = malloc(N * sizeof *out);
    for (int i = 0; i < N; i++) h[i] = (uint16_t)i;
    for (int pass = 0; pass < 2; pass++) {
        char hdr[160];
        snprintf(hdr, sizeof hdr, "{\"t\":{\"dtype\":\"%s\",\"shape\":[256,256],"
                 "\"data_offsets\":[0,131072]}}", pass ? "F16" : "BF16");
        struct fbuf f = mkfile(hdr, h, N * 2);
        dsq_st_model *m;
        dsq_diag d;
        assert_int_equal(dsq_st_parse_buffer(&m, f.p, f.n, "x", 0, &d), DSQ_OK);
        const dsq_st_tensor *t = dsq_st_find(m, "t");
        assert_int_equal(dsq_st_read_rows_f32(m, t, 0, 256, out, &d), DSQ_OK);
        for (int i = 0; i < N; i++) {
            float ref = pass ? dsq_f16_to_f32((uint16_t)i) : dsq_bf16_to_f32((uint16_t)i);
            if (isnan(ref)) assert_true(isnan(out[i]));
            else assert_int_equal(dsq_f32_bits(out[i]), dsq_f32_bits(ref));
        }
        /* a partial read with an odd start and length (tail loop) */
        assert_int_equal(dsq_st_read_rows_f32(m, t, 3, 1, out, &d), DSQ_OK);
        for (int i = 0; i < 256; i++) {
            float ref = pass ? dsq_f16_to_f32((uint16_t)(768 + i)) : dsq_bf16_to_f32((uint16_t)(768 + i));
            if (!isnan(ref)) assert_true(out[i] == ref);
        }
        dsq_st_close(m);
        free(f.p);
    }
    /* exact spot values */
    assert_true(dsq_f16_to_f32(0x3c00) == 1.0f);
    free(h);
    free(out);
}

static void test_int_and_f64(void **state)
{
    (void)state;
    uint8_t data[4 + 4 + 8 + 16 + 16 + 2];
    int8_t i8[4] = { -128, -1, 0, 127 };
    uint8_t u8[4] = { 0, 1, 200, 255 };
    int16_t i16[4] = { -32768, -2, 3, 32767 };
    int32_t i32[4] = { -100000, 0, 7, 2147483647 };
    double f64[2] = { 0.5, -1e30 };
    uint8_t bl[2] = { 0, 5 };
    size_t o = 0;
    memcpy(data + o, i8, 4); o += 4;
    memcpy(data + o, u8, 4); o += 4;
    memcpy(data + o, i16, 8); o += 8;
    memcpy(data + o, i32, 16); o += 16;
    memcpy(data + o, f64, 16); o += 16;
    memcpy(data + o, bl, 2); o += 2;
    const char *hdr = "{\"i8\":{\"dtype\":\"I8\",\"shape\":[4],\"data_offsets\":[0,4]},"
        "\"u8\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[4,8]},"
        "\"i16\":{\"dtype\":\"I16\",\"shape\":[2,2],\"data_offsets\":[8,16]},"
        "\"i32\":{\"dtype\":\"I32\",\"shape\":[4,1],\"data_offsets\":[16,32]},"
        "\"f64\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[32,48]},"
        "\"b\":{\"dtype\":\"BOOL\",\"shape\":[2],\"data_offsets\":[48,50]}}";
    struct fbuf f = mkfile(hdr, data, o);
    dsq_st_model *m;
    dsq_diag d;
    assert_int_equal(dsq_st_parse_buffer(&m, f.p, f.n, "x", 0, &d), DSQ_OK);
    float out[4];
    assert_int_equal(dsq_st_read_rows_f32(m, dsq_st_find(m, "i8"), 0, 1, out, &d), DSQ_OK);
    assert_true(out[0] == -128 && out[1] == -1 && out[2] == 0 && out[3] == 127);
    assert_int_equal(dsq_st_read_rows_f32(m, dsq_st_find(m, "u8"), 0, 1, out, &d), DSQ_OK);
    assert_true(out[2] == 200 && out[3] == 255);
    assert_int_equal(dsq_st_read_rows_f32(m, dsq_st_find(m, "i16"), 0, 2, out, &d), DSQ_OK);
    assert_true(out[0] == -32768 && out[1] == -2 && out[2] == 3 && out[3] == 32767);
    assert_int_equal(dsq_st_read_rows_f32(m, dsq_st_find(m, "i32"), 1, 3, out, &d), DSQ_OK);
    assert_true(out[0] == 0 && out[1] == 7 && out[2] == 2147483648.0f);
    assert_int_equal(dsq_st_read_rows_f32(m, dsq_st_find(m, "f64"), 0, 1, out, &d), DSQ_OK);
    assert_true(out[0] == 0.5f && out[1] == -1e30f);
    assert_int_equal(dsq_st_read_rows_f32(m, dsq_st_find(m, "b"), 0, 1, out, &d), DSQ_OK);
    assert_true(out[0] == 0 && out[1] == 1);
    dsq_st_close(m);
    free(f.p);

    /* unsupported conversions */
    f = mkfile("{\"c\":{\"dtype\":\"C64\",\"shape\":[1],\"data_offsets\":[0,8]},"
               "\"f4\":{\"dtype\":\"F4\",\"shape\":[2],\"data_offsets\":[8,9]}}", zeros, 9);
    assert_int_equal(dsq_st_parse_buffer(&m, f.p, f.n, "x", 0, &d), DSQ_OK);
    assert_int_equal(dsq_st_read_rows_f32(m, dsq_st_find(m, "c"), 0, 1, out, &d), DSQ_ERR_UNSUPPORTED);
    assert_int_equal(dsq_st_read_rows_f32(m, dsq_st_find(m, "f4"), 0, 1, out, &d), DSQ_ERR_UNSUPPORTED);
    dsq_st_close(m);
    free(f.p);
}

/* ===== FP8 block scales ===== */

/* FP8 weight [R, C] with scale [ceil(R/128), ceil(C/128)] */
static struct fbuf fp8_file(int R, int C, const uint8_t *w, const float *s, int sr, int sc,
                            const char *sdtype)
{
    size_t wn = (size_t)R * C, sn = (size_t)sr * sc * (strcmp(sdtype, "F32") ? 2 : 4);
    char hdr[512];
    snprintf(hdr, sizeof hdr,
             "{\"l.weight\":{\"dtype\":\"F8_E4M3\",\"shape\":[%d,%d],\"data_offsets\":[0,%zu]},"
             "\"l.weight_scale_inv\":{\"dtype\":\"%s\",\"shape\":[%d,%d],\"data_offsets\":[%zu,%zu]}}",
             R, C, wn, sdtype, sr, sc, wn, wn + sn);
    uint8_t *data = calloc(1, wn + sn + 1);
    memcpy(data, w, wn);
    if (s) memcpy(data + wn, s, sn);
    struct fbuf f = mkfile(hdr, data, wn + sn);
    free(data);
    return f;
}

static void test_fp8_ragged_dequant(void **state)
{
    (void)state;
    /* 130 x 200: blocks rows [0,128) [128,130), cols [0,128) [128,200) */
    enum { R = 130, C = 200 };
    static uint8_t w[R * C];
    /* codes: 0x38 = 1.0, 0x40 = 2.0, 0xb8 = -1.0, 0x01 = 2^-9, 0x7e = 448, 0x44 = 3.0 */
    static const uint8_t codes[] = { 0x38, 0x40, 0xb8, 0x01, 0x7e, 0x44 };
    static const float vals[] = { 1.0f, 2.0f, -1.0f, 0x1p-9f, 448.0f, 3.0f };
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++) w[i * C + j] = codes[(i * 7 + j) % 6];
    float s[4] = { 0.5f, 2.0f, 3.0f, 0.25f };   /* [[0.5, 2], [3, 0.25]] */
    struct fbuf f = fp8_file(R, C, w, s, 2, 2, "F32");
    dsq_st_model *m;
    dsq_diag d;
    assert_int_equal(dsq_st_parse_buffer(&m, f.p, f.n, "x", 0, &d), DSQ_OK);
    const dsq_st_tensor *t = dsq_st_find(m, "l.weight");
    const dsq_st_tensor *sc = dsq_st_find(m, "l.weight_scale_inv");
    assert_ptr_equal(dsq_st_scale_of(m, t), sc);
    assert_true(dsq_st_is_companion(m, sc));
    assert_false(dsq_st_is_companion(m, t));
    float *out = malloc(R * C * sizeof *out);
    assert_int_equal(dsq_st_read_rows_f32(m, t, 0, R, out, &d), DSQ_OK);
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++) {
            float want = vals[(i * 7 + j) % 6] * s[(i / 128) * 2 + j / 128];
            assert_true(out[i * C + j] == want);
        }
    /* hand-computed spots: (0,0): code idx 0 -> 1.0 * 0.5; (0,128): idx 128%6=2 -> -1 * 2;
     * (128,0): idx 896%6=2 -> -1 * 3; (129,199): idx (903+199)%6=4 -> 448 * 0.25 */
    assert_true(out[0] == 0.5f);
    assert_true(out[128] == -2.0f);
    assert_true(out[128 * C] == -3.0f);
    assert_true(out[129 * C + 199] == 112.0f);
    assert_true(out[1 * C + 5] == 0.5f);             /* (7+5)%6=0 -> 1.0 * 0.5 */
    assert_true(out[3] == 0x1p-10f);                 /* 2^-9 subnormal * 0.5 */
    /* partial read across the row-block boundary */
    float *part = malloc(3 * C * sizeof *part);
    assert_int_equal(dsq_st_read_rows_f32(m, t, 127, 3, part, &d), DSQ_OK);
    assert_memory_equal(part, out + 127 * C, 3 * C * sizeof *part);
    free(part);
    free(out);
    dsq_st_close(m);
    free(f.p);
}

/* dsq_st_pread_rows + dsq_st_rows_f32_from (the conversion's read path):
 * from a real file, the bytes of rows [127, 130) of an FP8 tensor with a
 * ragged 2x2 scale grid equal the mapping's, and converting them gives what
 * dsq_st_read_rows_f32 gives; a model over a buffer has no descriptor. */
static void test_pread_rows(void **state)
{
    (void)state;
    enum { R = 130, C = 200 };
    static uint8_t w[R * C];
    for (int i = 0; i < R * C; i++) w[i] = (uint8_t)((i * 37) % 251 & 0x77);   /* finite codes */
    float sc[4] = { 0.5f, 2.0f, 3.0f, 0.25f };
    struct fbuf f = fp8_file(R, C, w, sc, 2, 2, "F32");
    char *dir = dsq_test_tmpdir();
    char path[4200];
    snprintf(path, sizeof path, "%s/m.safetensors", dir);
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(f.p, 1, f.n, fp), f.n);
    fclose(fp);
    dsq_st_model *m, *mb;
    dsq_diag d;
    dsq_diag_clear(&d);
    assert_int_equal(dsq_st_open(&m, path, &d), DSQ_OK);
    const dsq_st_tensor *t = dsq_st_find(m, "l.weight");
    assert_non_null(t);
    uint8_t raw[3 * C];
    assert_int_equal(dsq_st_pread_rows(m, t, 127, 3, raw, &d), DSQ_OK);
    assert_memory_equal(raw, t->data + 127 * C, sizeof raw);
    float a[3 * C], b[3 * C];
    assert_int_equal(dsq_st_rows_f32_from(m, t, raw, 127, 3, a, &d), DSQ_OK);
    assert_int_equal(dsq_st_read_rows_f32(m, t, 127, 3, b, &d), DSQ_OK);
    assert_memory_equal(a, b, sizeof a);
    assert_int_equal(dsq_st_pread_rows(m, t, 129, 2, raw, &d), DSQ_ERR_INVALID_ARG);
    assert_int_equal(dsq_st_rows_f32_from(m, t, NULL, 0, 1, a, &d), DSQ_ERR_INVALID_ARG);
    dsq_st_close(m);
    assert_int_equal(dsq_st_parse_buffer(&mb, f.p, f.n, "x", 0, &d), DSQ_OK);
    assert_int_equal(dsq_st_pread_rows(mb, dsq_st_find(mb, "l.weight"), 0, 1, raw, &d), DSQ_ERR_UNSUPPORTED);
    dsq_st_close(mb);
    unlink(path);
    rmdir(dir);
    free(dir);
    free(f.p);
}

static void test_fp8_scale_errors(void **state)
{
    (void)state;
    enum { R = 130, C = 200 };
    static uint8_t w[R * C];
    float s[6] = { 1, 1, 1, 1, 1, 1 };
    dsq_st_model *m;
    dsq_diag d;

    /* missing companion */
    {
        char hdr[256];
        snprintf(hdr, sizeof hdr, "{\"l.weight\":{\"dtype\":\"F8_E4M3\",\"shape\":[%d,%d],"
                 "\"data_offsets\":[0,%d]}}", R, C, R * C);
        struct fbuf f = mkfile(hdr, w, R * C);
        dsq_diag_clear(&d);
        assert_int_equal(dsq_st_parse_buffer(&m, f.p, f.n, "x", 0, &d), DSQ_ERR_FORMAT);
        assert_string_equal(d.tensor, "l.weight");
        assert_non_null(strstr(d.msg, "l.weight_scale_inv"));
        /* allowed on request: raw fp8 values */
        assert_int_equal(dsq_st_parse_buffer(&m, f.p, f.n, "x", DSQ_ST_OPEN_FP8_UNSCALED, &d), DSQ_OK);
        float out[C];
        assert_int_equal(dsq_st_read_rows_f32(m, dsq_st_find(m, "l.weight"), 0, 1, out, &d), DSQ_OK);
        assert_true(out[0] == 0.0f);
        dsq_st_close(m);
        free(f.p);
    }
    /* misshaped companion: [1, 2] instead of [2, 2]; [2, 3]; rank 1 */
    struct fbuf f = fp8_file(R, C, w, s, 1, 2, "F32");
    dsq_diag_clear(&d);
    assert_int_equal(dsq_st_parse_buffer(&m, f.p, f.n, "x", 0, &d), DSQ_ERR_SHAPE);
    assert_string_equal(d.tensor, "l.weight_scale_inv");
    assert_non_null(strstr(d.msg, "'l.weight'"));
    free(f.p);
    f = fp8_file(R, C, w, s, 2, 3, "F32");
    assert_int_equal(dsq_st_parse_buffer(&m, f.p, f.n, "x", 0, &d), DSQ_ERR_SHAPE);
    free(f.p);
    /* wrong scale dtype */
    f = fp8_file(R, C, w, s, 2, 2, "BF16");
    assert_int_equal(dsq_st_parse_buffer(&m, f.p, f.n, "x", 0, &d), DSQ_ERR_FORMAT);
    free(f.p);
    /* NaN, Inf, negative scale values */
    const float bad[3] = { NAN, INFINITY, -1.0f };
    for (int k = 0; k < 3; k++) {
        float s2[4] = { 1, 1, 1, 1 };
        s2[3] = bad[k];
        f = fp8_file(R, C, w, s2, 2, 2, "F32");
        dsq_diag_clear(&d);
        assert_int_equal(dsq_st_parse_buffer(&m, f.p, f.n, "x", 0, &d), DSQ_ERR_NONFINITE);
        assert_string_equal(d.tensor, "l.weight_scale_inv");
        /* offset of element 3 of the scale: header + weight bytes + 12 */
        uint64_t hn = dsq_load_u64le(f.p);
        assert_int_equal(d.offset, (int64_t)(8 + hn + R * C + 12));
        /* skipping the scan opens it */
        assert_int_equal(dsq_st_parse_buffer(&m, f.p, f.n, "x", DSQ_ST_OPEN_NO_SCALE_SCAN, &d), DSQ_OK);
        dsq_st_close(m);
        free(f.p);
    }
    /* a zero scale (all-zero block) is fine */
    float s3[4] = { 0, 1, 1, 1 };
    f = fp8_file(R, C, w, s3, 2, 2, "F32");
    assert_int_equal(dsq_st_parse_buffer(&m, f.p, f.n, "x", 0, &d), DSQ_OK);
    dsq_st_close(m);
    free(f.p);
}

/* ===== concurrency: many threads converting rows of one model ===== */

struct par_ctx {
    const dsq_st_model *m;
    const dsq_st_tensor *t;
    float *out;
    int64_t cols;
    int errors;
};

static void par_row(void *vctx, size_t item, int tid)
{
    (void)tid;
    struct par_ctx *c = vctx;
    dsq_diag d;
    dsq_diag_clear(&d);
    if (dsq_st_read_rows_f32(c->m, c->t, (int64_t)item, 1, c->out + item * (size_t)c->cols, &d) != DSQ_OK)
        __atomic_add_fetch(&c->errors, 1, __ATOMIC_RELAXED);
}

static void test_concurrent_reads(void **state)
{
    (void)state;
    enum { R = 300, C = 260 };
    static uint8_t w[R * C];
    for (int i = 0; i < R * C; i++) w[i] = (uint8_t)((i * 13) % 0x7e);
    float s[9];
    for (int k = 0; k < 9; k++) s[k] = 0.5f + (float)k;
    struct fbuf f = fp8_file(R, C, w, s, 3, 3, "F32");
    dsq_st_model *m;
    dsq_diag d;
    dsq_diag_clear(&d);
    assert_int_equal(dsq_st_parse_buffer(&m, f.p, f.n, "x", 0, &d), DSQ_OK);
    const dsq_st_tensor *t = dsq_st_find(m, "l.weight");
    float *serial = malloc(R * C * sizeof *serial), *par = calloc(R * C, sizeof *par);
    assert_int_equal(dsq_st_read_rows_f32(m, t, 0, R, serial, &d), DSQ_OK);
    dsq_pool *pool = dsq_pool_create(4);
    struct par_ctx c = { m, t, par, C, 0 };
    dsq_pool_run(pool, R, par_row, &c);
    dsq_pool_free(pool);
    assert_int_equal(c.errors, 0);
    assert_memory_equal(serial, par, R * C * sizeof *par);
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++)
            assert_true(serial[i * C + j] == dsq_fp8_e4m3_to_f32(w[i * C + j]) * s[(i / 128) * 3 + j / 128]);
    free(serial);
    free(par);
    dsq_st_close(m);
    free(f.p);
}

/* ===== files and directories ===== */

static void test_open_paths(void **state)
{
    (void)state;
    char *dir = dsq_test_tmpdir();
    char p[4200];
    dsq_st_model *m;
    dsq_diag d;
    struct fbuf f = mkfile("{\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}}",
                           zeros, 24);
    /* empty directory */
    assert_int_equal(dsq_st_open(&m, dir, &d), DSQ_ERR_NOT_FOUND);
    snprintf(p, sizeof p, "%s/one.safetensors", dir);
    dsq_test_write(p, f.p, f.n);
    assert_int_equal(dsq_st_open(&m, p, &d), DSQ_OK);
    assert_string_equal(dsq_st_dir(m), dir);
    assert_string_equal(dsq_st_shard_path(m, 0), p);
    const dsq_st_tensor *t = dsq_st_find(m, "a");
    assert_int_equal(t->file_offset, f.n - 24);
    assert_int_equal(dsq_st_advise(m, t, DSQ_ST_WILLNEED), DSQ_OK);
    assert_int_equal(dsq_st_advise(m, t, DSQ_ST_DONTNEED), DSQ_OK);
    float out[6];
    assert_int_equal(dsq_st_read_rows_f32(m, t, 0, 2, out, &d), DSQ_OK);   /* still readable */
    dsq_st_close(m);
    /* directory with exactly one file */
    assert_int_equal(dsq_st_open(&m, dir, &d), DSQ_OK);
    assert_int_equal(dsq_st_count(m), 1);
    dsq_st_close(m);
    /* two files and no index */
    snprintf(p, sizeof p, "%s/two.safetensors", dir);
    dsq_test_write(p, f.p, f.n);
    assert_int_equal(dsq_st_open(&m, dir, &d), DSQ_ERR_FORMAT);
    /* truncated file on disk */
    dsq_test_write(p, f.p, f.n - 1);
    dsq_diag_clear(&d);
    assert_int_equal(dsq_st_open(&m, p, &d), DSQ_ERR_TRUNCATED);
    assert_string_equal(d.path, p);
    dsq_test_write(p, f.p, 3);
    assert_int_equal(dsq_st_open(&m, p, &d), DSQ_ERR_TRUNCATED);
    dsq_test_write(p, f.p, 0);
    assert_int_equal(dsq_st_open(&m, p, &d), DSQ_ERR_TRUNCATED);
    snprintf(p, sizeof p, "%s/missing.safetensors", dir);
    assert_int_equal(dsq_st_open(&m, p, &d), DSQ_ERR_NOT_FOUND);
    assert_null(m);
    free(f.p);
    dsq_test_rmtree(dir);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dtype_table),
        cmocka_unit_test(test_fp8_tables),
        cmocka_unit_test(test_valid_basic),
        cmocka_unit_test(test_truncated),
        cmocka_unit_test(test_header_json),
        cmocka_unit_test(test_dtype_shape_errors),
        cmocka_unit_test(test_offsets_tiling),
        cmocka_unit_test(test_metadata_and_duplicates),
        cmocka_unit_test(test_bf16_f16_all_values),
        cmocka_unit_test(test_int_and_f64),
        cmocka_unit_test(test_fp8_ragged_dequant),
        cmocka_unit_test(test_pread_rows),
        cmocka_unit_test(test_fp8_scale_errors),
        cmocka_unit_test(test_concurrent_reads),
        cmocka_unit_test(test_open_paths),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
