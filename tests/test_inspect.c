/* test_inspect.c - the descriptions ds-inspect prints (convert/inspect.h):
 * a .dsq's JSON (keys in order, per-tensor fields, totals, recipe) and
 * text listing, --verify's result on a good and a flipped payload, and a
 * safetensors export directory with its per-tensor types. */
#include "dsq_test.h"
#include "inspect.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CORPUS "tests/fuzz/corpus/container/"

/* The object's keys, comma-separated, in order. */
static void keys_of(json_object *o, char *buf, size_t n)
{
    buf[0] = 0;
    json_object_object_foreach(o, k, v)
    {
        (void)v;
        size_t l = strlen(buf);
        snprintf(buf + l, n - l, "%s%s", l ? "," : "", k);
    }
}

static json_object *get(json_object *o, const char *key)
{
    json_object *v = NULL;
    assert_true(json_object_object_get_ex(o, key, &v));
    return v;
}

static char *render_dsq(const dsq_ctr_set *set, const char *path, int level)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    dsq_inspect_dsq_text(f, set, path, level);
    fclose(f);
    return text;
}

static void test_dsq(void **state)
{
    (void)state;
    dsq_diag d;
    dsq_ctr_set *set;
    assert_int_equal(dsq_ctr_set_open(&set, CORPUS "five.dsq", &d), DSQ_OK);
    json_object *j = dsq_inspect_dsq_json(set, "five.dsq");
    char keys[512];
    keys_of(j, keys, sizeof keys);
    assert_string_equal(keys, "path,format,version,file_size,tensors,total,recipe,metadata_keys");
    assert_string_equal(json_object_get_string(get(j, "format")), "dsq");
    assert_int_equal(json_object_get_int64(get(j, "file_size")), 2024);
    json_object *t = get(j, "tensors");
    assert_int_equal(json_object_array_length(t), 5);
    json_object *e = json_object_array_get_idx(t, 0);
    keys_of(e, keys, sizeof keys);
    assert_string_equal(keys, "name,scheme,scheme_id,role,src_dtype,shape,group_size,pack_version,raw_bytes,"
                              "stored_bytes,compression,offset,sha256");
    assert_string_equal(json_object_get_string(get(e, "name")), "model.embed_tokens.weight");
    assert_string_equal(json_object_get_string(get(e, "scheme")), "bf16");
    assert_string_equal(json_object_get_string(get(e, "role")), "embed");
    assert_string_equal(json_object_get_string(get(e, "compression")), "zstd");
    assert_int_equal(json_object_get_int64(json_object_array_get_idx(get(e, "shape"), 1)), 30);
    assert_int_equal(json_object_get_int64(get(e, "stored_bytes")), 159);
    json_object *tot = get(j, "total");
    assert_int_equal(json_object_get_int64(get(tot, "count")), 5);
    assert_int_equal(json_object_get_int64(get(tot, "raw_bytes")), 1004);
    assert_int_equal(json_object_get_int64(get(tot, "stored_bytes")), 403);
    assert_string_equal(json_object_get_string(get(get(j, "recipe"), "default")), "w8a8-dynamic");
    json_object_put(j);

    /* text: the listing at level 2, totals only at 1, details at 3 */
    char *text = render_dsq(set, "five.dsq", 2);
    assert_non_null(strstr(text, "five.dsq: dsq v1, 5 tensors, 2024 bytes\nrecipe: {\"default\":\"w8a8-dynamic\"}\n"));
    assert_non_null(strstr(text, "\nmodel.norm.weight                       w8a8-dynamic   [10]        "
                                 "                      300            140 zstd\n"));
    assert_non_null(strstr(text, "total: 5 tensors, raw 1004 bytes (1004 B), stored 403 bytes (403 B), 40.1%\n"));
    assert_null(strstr(text, "sha256"));
    assert_null(strstr(text, "metadata keys"));
    free(text);
    text = render_dsq(set, "five.dsq", 1);
    assert_string_equal(text, "total: 5 tensors, raw 1004 bytes (1004 B), stored 403 bytes (403 B), 40.1%\n");
    free(text);
    text = render_dsq(set, "five.dsq", 3);
    assert_non_null(strstr(text, "    role embed, src BF16, group 0, pack v0, offset 64, sha256 ed6a2b7a"));
    assert_non_null(strstr(text, "metadata keys: recipe tool config\n"));
    free(text);

    dsq_ctr_verify_opts vo = { .nthreads = 1 };
    dsq_inspect_verify v;
    assert_int_equal(dsq_inspect_dsq_verify(set, &vo, &v, &d), DSQ_OK);
    json_object *vj = dsq_inspect_dsq_verify_json(set, &v);
    keys_of(vj, keys, sizeof keys);
    assert_string_equal(keys, "ok,seconds");
    json_object_put(vj);
    dsq_ctr_set_close(set);

    /* a flipped payload bit: the bad tensor is named */
    assert_int_equal(dsq_ctr_set_open(&set, CORPUS "payload_flip.bin", &d), DSQ_OK);
    assert_int_equal(dsq_inspect_dsq_verify(set, &vo, &v, &d), DSQ_ERR_CHECKSUM);
    vj = dsq_inspect_dsq_verify_json(set, &v);
    keys_of(vj, keys, sizeof keys);
    assert_string_equal(keys, "ok,seconds,bad_index,bad_tensor");
    assert_false(json_object_get_boolean(get(vj, "ok")));
    assert_string_equal(json_object_get_string(get(vj, "bad_tensor")), "model.embed_tokens.weight");
    json_object_put(vj);
    text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    dsq_inspect_dsq_verify_text(f, set, &v, 2); /* a failure prints no "verify: ok" */
    fclose(f);
    assert_string_equal(text, "");
    free(text);
    dsq_ctr_set_close(set);
}

/* A safetensors file of the given tensors (name, dtype, shape [n], n bytes of zeros). */
static void write_st(const char *path, const char *const *names, const char *const *dtypes, const int *bytes,
                     int n)
{
    char hdr[2048] = "{\"__metadata__\":{\"format\":\"pt\"}";
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        int esz = 2;
        if (!strcmp(dtypes[i], "I32")) esz = 4;
        size_t l = strlen(hdr);
        snprintf(hdr + l, sizeof hdr - l, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[%d],\"data_offsets\":[%zu,%zu]}",
                 names[i], dtypes[i], bytes[i] / esz, off, off + (size_t)bytes[i]);
        off += (size_t)bytes[i];
    }
    strcat(hdr, "}");
    while (strlen(hdr) % 8) strcat(hdr, " ");
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    uint64_t hl = strlen(hdr);
    fwrite(&hl, 8, 1, f);
    fputs(hdr, f);
    for (size_t i = 0; i < off; i++) fputc(0, f);
    fclose(f);
}

static void test_st_export(void **state)
{
    (void)state;
    char *dir = dsq_test_tmpdir(), path[1024];
    static const char *const names[] = { "model.layers.0.mlp.down_proj.qweight", "model.layers.0.mlp.down_proj.scales",
                                         "model.norm.weight" };
    static const char *const dtypes[] = { "I32", "F16", "F16" };
    static const int bytes[] = { 16, 8, 8 };
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    write_st(path, names, dtypes, bytes, 3);
    snprintf(path, sizeof path, "%s/config.json", dir);
    const char *cfg = "{\"quantization_config\": {\"quant_method\": \"awq\"}}";
    dsq_test_write(path, cfg, strlen(cfg));

    dsq_diag d;
    dsq_inspect_st *s;
    assert_int_equal(dsq_inspect_st_open(&s, dir, 0, &d), DSQ_OK);
    json_object *j = dsq_inspect_st_json(s);
    char keys[512];
    keys_of(j, keys, sizeof keys);
    assert_string_equal(keys, "path,format,export_format,shards,metadata,tensors,total");
    assert_string_equal(json_object_get_string(get(j, "export_format")), "awq");
    assert_string_equal(json_object_get_string(get(get(j, "metadata"), "format")), "pt");
    json_object *t = get(j, "tensors");
    assert_int_equal(json_object_array_length(t), 3);
    /* quantized tensors and their scales are the export's; the rest float */
    for (size_t i = 0; i < 3; i++) {
        json_object *e = json_object_array_get_idx(t, i);
        const char *name = json_object_get_string(get(e, "name"));
        const char *want = strstr(name, "norm") ? "FLOAT" : "awq";
        assert_string_equal(json_object_get_string(get(e, "type")), want);
        keys_of(e, keys, sizeof keys);
        assert_string_equal(keys, "name,dtype,shape,bytes,shard,offset,type");
    }
    assert_int_equal(json_object_get_int64(get(get(j, "total"), "bytes")), 32);
    json_object_put(j);

    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    dsq_inspect_st_text(f, s, 2);
    fclose(f);
    assert_non_null(strstr(text, ": safetensors, 1 shard, 3 tensors, awq export\n"));
    assert_non_null(strstr(text, "  type\n"));
    assert_non_null(strstr(text, "model.norm.weight                     F16      [4]                 "
                                 "                8  FLOAT\n"));
    assert_non_null(strstr(text, "total: 3 tensors, 32 bytes (32 B)\n"));
    free(text);
    dsq_inspect_st_close(s);

    /* --verify: the structure checked; no SHA256SUMS here, so no manifest count */
    assert_int_equal(dsq_inspect_st_open(&s, dir, 1, &d), DSQ_OK);
    j = dsq_inspect_st_json(s);
    keys_of(get(j, "verify"), keys, sizeof keys);
    assert_string_equal(keys, "ok");
    json_object_put(j);
    dsq_inspect_st_close(s);
    assert_int_not_equal(dsq_inspect_st_open(&s, "tests/does-not-exist.safetensors", 0, &d), DSQ_OK);
    assert_null(s);
    dsq_test_rmtree(dir);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dsq),
        cmocka_unit_test(test_st_export),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
