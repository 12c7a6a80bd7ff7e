/* test_quant_report.c - ds-quant's run summary (convert/quant_report.h)
 * from a summary made here: the --json members in order, the measured
 * error (mean, max, the worst first, unmeasured tensors left out), the
 * per-tensor results only at level 3, the export member, and the text. */
#include "dsq_test.h"
#include "quant_report.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static json_object *get(json_object *o, const char *key)
{
    json_object *v = NULL;
    assert_true(json_object_object_get_ex(o, key, &v));
    return v;
}

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

static dsq_tensor_result results[] = {
    { "a.weight", DSQ_SCHEME_W4A8, DSQ_ROLE_MLP_LINEAR, 400, 100, 90, 0.10 },
    { "b.weight", DSQ_SCHEME_W4A8, DSQ_ROLE_MLP_LINEAR, 400, 100, 90, 0.30 },
    { "norm.weight", DSQ_SCHEME_F32, DSQ_ROLE_NORM, 40, 40, 40, -1 }, /* not measured */
    { "c.weight", DSQ_SCHEME_W8A8_DYNAMIC, DSQ_ROLE_MLP_LINEAR, 400, 200, 180, 0.20 },
};

static void summary(dsq_convert_summary *s)
{
    memset(s, 0, sizeof *s);
    s->tensors = 4;
    s->results = results;
    s->count_by_scheme[DSQ_SCHEME_W4A8] = 2;
    s->count_by_scheme[DSQ_SCHEME_F32] = 1;
    s->count_by_scheme[DSQ_SCHEME_W8A8_DYNAMIC] = 1;
    s->bytes_in = s->bytes_converted = 2000000;
    s->bytes_out = 500000;
    s->bytes_raw = 440;
    s->bytes_stored = 400;
    s->seconds = 2;
}

static void test_json(void **state)
{
    (void)state;
    dsq_convert_summary s;
    summary(&s);
    dsq_run_report rp = { &s, "in", "out.dsq", 4, 16, NULL, 1000, 2 };
    json_object *o = json_object_new_object();
    dsq_run_report_json(o, &rp);
    char keys[1024];
    keys_of(o, keys, sizeof keys);
    assert_string_equal(keys, "input,output,shards,tensors,resumed,by_scheme,bytes_in,bytes_converted,bytes_raw,"
                              "bytes_stored,bytes_out,compression_ratio,zstd_ratio,seconds,gb_per_s,peak_rss_bytes,"
                              "threads,error");
    json_object *e = get(o, "error");
    assert_string_equal(json_object_get_string(get(e, "sample_rows")), "1/16");
    assert_int_equal(json_object_get_int(get(e, "measured")), 3);
    assert_true(json_object_get_double(get(e, "mean")) > 0.1999 && json_object_get_double(get(e, "mean")) < 0.2001);
    assert_true(json_object_get_double(get(e, "max")) == 0.3);
    json_object *w = get(e, "worst");
    assert_int_equal(json_object_array_length(w), 3);
    static const char *const order[] = { "b.weight", "c.weight", "a.weight" };
    for (size_t i = 0; i < 3; i++)
        assert_string_equal(json_object_get_string(get(json_object_array_get_idx(w, i), "name")), order[i]);
    assert_string_equal(json_object_get_string(get(json_object_array_get_idx(w, 1), "scheme")), "w8a8-dynamic");
    keys_of(get(o, "by_scheme"), keys, sizeof keys);
    assert_string_equal(keys, "f32,w8a8-dynamic,w4a8");
    assert_true(json_object_get_double(get(o, "compression_ratio")) == 4.0);
    json_object_put(o);

    /* level 3: every tensor's result, unmeasured as null; an export member */
    rp.level = 3;
    s.export.format = "ascend";
    s.export.out_tensors = 7;
    rp.calib_json = "{\"samples\": 4}";
    o = json_object_new_object();
    dsq_run_report_json(o, &rp);
    json_object *tr = get(o, "tensor_results");
    assert_int_equal(json_object_array_length(tr), 4);
    assert_true(json_object_is_type(get(json_object_array_get_idx(tr, 2), "rel_error"), json_type_null));
    assert_int_equal(json_object_get_int(get(get(o, "calibration"), "samples")), 4);
    assert_int_equal(json_object_get_int(get(get(o, "export"), "tensors")), 7);
    json_object_put(o);
}

static void test_text(void **state)
{
    (void)state;
    dsq_convert_summary s;
    summary(&s);
    s.resumed = 1;
    dsq_run_report rp = { &s, "in", "out.dsq", 4, 16, NULL, 2000000, 2 };
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    dsq_run_report_text(f, &rp);
    fclose(f);
    assert_string_equal(text, "out.dsq: 4 tensors, f32 1, w8a8-dynamic 1, w4a8 2 (1 from the interrupted run)\n"
                              "2.00 MB -> 500.00 KB (4.00x) in 2.0 s, 0.00 GB/s, peak RSS 2.00 MB, 4 threads\n"
                              "relative error (1 row in 16): mean 0.2, worst:\n"
                              "  0.3  b.weight (w4a8)\n"
                              "  0.2  c.weight (w8a8-dynamic)\n"
                              "  0.1  a.weight (w4a8)\n");
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_json),
        cmocka_unit_test(test_text),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
