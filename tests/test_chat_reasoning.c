/* test_chat_reasoning.c - reasoning / content split as vLLM's deepseek_r1 and
 * deepseek_v3 parsers do it, whole and streamed. */
#include "dsq_test.h"

#include "chat_reasoning.h"
#include "dsq_sbuf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void check_split(int parser, const char *text, const char *want_r, const char *want_c)
{
    const char *r, *c;
    size_t rn, cn;
    int hr, hc;
    dsq_reasoning_split(parser, text, strlen(text), &r, &rn, &hr, &c, &cn, &hc);
    if (!want_r) assert_int_equal(hr, 0);
    else {
        assert_int_equal(hr, 1);
        if (rn != strlen(want_r) || memcmp(r, want_r, rn)) fail_msg("%s: reasoning [%.*s]", text, (int)rn, r);
    }
    if (!want_c) assert_int_equal(hc, 0);
    else {
        assert_int_equal(hc, 1);
        if (cn != strlen(want_c) || memcmp(c, want_c, cn)) fail_msg("%s: content [%.*s]", text, (int)cn, c);
    }
}

static void test_whole(void **state)
{
    (void)state;
    const int R1 = DSQ_REASONING_DEEPSEEK_R1;
    /* with </think>: before it reasoning, after it content */
    check_split(R1, "Let me add.\n2+3=5</think>\n\nThe answer is 5.", "Let me add.\n2+3=5", "\n\nThe answer is 5.");
    /* a leading <think> is dropped */
    check_split(R1, "<think>\nhmm\n</think>answer", "\nhmm\n", "answer");
    /* without </think>: everything is reasoning, content null (output cut by max_tokens) */
    check_split(R1, "still thinking about it", "still thinking about it", NULL);
    check_split(R1, "<think>cut", "cut", NULL);
    /* nothing after </think>: content null */
    check_split(R1, "done</think>", "done", NULL);
    /* only the first </think> splits */
    check_split(R1, "a</think>b</think>c", "a", "b</think>c");
    check_split(R1, "", "", NULL);
    /* no parser / deepseek_v3 without thinking: all content */
    check_split(DSQ_REASONING_NONE, "a</think>b", NULL, "a</think>b");
    assert_int_equal(dsq_reasoning_parser_for(DSQ_REASONING_DEEPSEEK_V3, 0), DSQ_REASONING_NONE);
    assert_int_equal(dsq_reasoning_parser_for(DSQ_REASONING_DEEPSEEK_V3, 1), R1);
    assert_int_equal(dsq_reasoning_parser_for(R1, 0), R1);
    assert_int_equal(dsq_reasoning_parser_from_name("deepseek_r1"), R1);
    assert_int_equal(dsq_reasoning_parser_from_name("deepseek_v3"), DSQ_REASONING_DEEPSEEK_V3);
    assert_int_equal(dsq_reasoning_parser_from_name("qwen3"), -1);
}

/* Streamed in chunks of every size, the pieces concatenate to the whole split. */
static void test_stream(void **state)
{
    (void)state;
    static const char *outs[] = {
        "Let me add.\n2+3=5</think>\n\nThe answer is 5.",
        "<think>\nhmm </thi nk> <thin\n</think>answer</think>more",
        "no end marker at all, <th",
        "</think>",
        "done</think>",
        "x</think",
        "\xe4\xbd\xa0\xe5\xa5\xbd</think>\xf0\x9f\x98\x80",
        "",
    };
    const int parsers[] = { DSQ_REASONING_DEEPSEEK_R1, DSQ_REASONING_NONE };
    for (size_t pi = 0; pi < 2; pi++)
        for (size_t i = 0; i < sizeof outs / sizeof outs[0]; i++) {
            const char *t = outs[i];
            size_t len = strlen(t);
            const char *wr, *wc;
            size_t wrn, wcn;
            int hr, hc;
            dsq_reasoning_split(parsers[pi], t, len, &wr, &wrn, &hr, &wc, &wcn, &hc);
            for (size_t chunk = 1; chunk <= len + 1; chunk++) {
                dsq_reasoning_stream s;
                dsq_reasoning_stream_init(&s, parsers[pi]);
                dsq_sbuf r = { 0 }, c = { 0 }, dr = { 0 }, dc = { 0 };
                for (size_t at = 0;;) {
                    at = at + chunk < len ? at + chunk : len;
                    dr.n = dc.n = 0;
                    dsq_reasoning_stream_next(&s, t, at, at == len, &dr, &dc);
                    dsq_sb_add(&r, dr.p ? dr.p : "", dr.n);
                    dsq_sb_add(&c, dc.p ? dc.p : "", dc.n);
                    /* a marker is never split across pieces */
                    if (dr.n) assert_null(memmem(dr.p, dr.n, "</think>", 8));
                    if (at == len) break;
                }
                if (r.n != (hr ? wrn : 0) || (r.n && memcmp(r.p, wr, r.n)))
                    fail_msg("parser %d, '%s', chunk %zu: reasoning [%.*s]", parsers[pi], t, chunk, (int)r.n, r.p);
                if (c.n != (hc ? wcn : 0) || (c.n && memcmp(c.p, wc, c.n)))
                    fail_msg("parser %d, '%s', chunk %zu: content [%.*s]", parsers[pi], t, chunk, (int)c.n, c.p);
                free(r.p); free(c.p); free(dr.p); free(dc.p);
            }
        }
}

/* Held back: a partial marker is not emitted until the next bytes decide it. */
static void test_stream_holdback(void **state)
{
    (void)state;
    const char *t = "abc</thi";
    dsq_reasoning_stream s;
    dsq_reasoning_stream_init(&s, DSQ_REASONING_DEEPSEEK_R1);
    dsq_sbuf r = { 0 }, c = { 0 };
    dsq_reasoning_stream_next(&s, t, strlen(t), 0, &r, &c);
    assert_int_equal(r.n, 3);
    assert_int_equal(c.n, 0);
    const char *t2 = "abc</think>x";
    r.n = 0;
    dsq_reasoning_stream_next(&s, t2, strlen(t2), 0, &r, &c);
    assert_int_equal(r.n, 0);
    assert_int_equal(c.n, 1);
    assert_int_equal(c.p[0], 'x');
    free(r.p); free(c.p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_whole),
        cmocka_unit_test(test_stream),
        cmocka_unit_test(test_stream_holdback),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
