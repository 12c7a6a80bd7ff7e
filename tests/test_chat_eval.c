/* test_chat_eval.c - the chat prompt suites against their harnesses' rules:
 * AISBench's prompt, prediction string, extract_non_reasoning_content,
 * gsm8k_postprocess (and its "1,234" quirk) and is_equal; lm-eval
 * gsm8k_cot_llama's multi-turn shots, content-only reading with the
 * think-end split, strict / flexible filters and exact_match; pass@k and the
 * sampled accuracy's standard error. */
#include "dsq_test.h"

#include "chat_eval.h"

#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *s_pred(const dsq_chat_suite *s, const char *c, const char *r, const char *te)
{
    char *p;
    assert_int_equal(dsq_chat_prediction(s, c, c ? strlen(c) : 0, c != NULL, r, r ? strlen(r) : 0, r != NULL, te,
                                         &p, NULL), DSQ_OK);
    return p;
}

static void test_aisbench(void **st)
{
    (void)st;
    const dsq_chat_suite *s = dsq_chat_suite_find("aisbench-0shot-cot");
    assert_non_null(s);
    assert_int_equal(s->max_tokens, 512);
    char *j;
    assert_int_equal(dsq_chat_suite_messages(s, "What is 2+3?", 12, &j, NULL), DSQ_OK);
    assert_string_equal(j, "[{\"role\":\"user\",\"content\":\"Answer the following question.The last line of the response "
                           "should follow this format: \\\"answer:$ANSWER\\\" (without quotes), where ANSWER is a number. "
                           "Let's think step by step.\\n\\nQuestion: What is 2+3?\"}]");
    free(j);
    /* output.py: reasoning + "</think>" + content; reasoning alone; content alone */
    char *p = s_pred(s, "answer:5", "2+3=5", NULL);
    assert_string_equal(p, "2+3=5</think>answer:5");
    free(p);
    p = s_pred(s, "", "only thinking 7", NULL);
    assert_string_equal(p, "only thinking 7");
    free(p);
    p = s_pred(s, "answer:5", NULL, NULL);
    assert_string_equal(p, "answer:5");
    free(p);
    /* extract_non_reasoning_content (its docstring's examples) */
    static const char *nr[][2] = {
        { "This is a test.</think> How are you?", "How are you?" },
        { "Start<think>reasoning here</think> End", "Start End" },
        { "a</think>b</think> c ", "c" },
        { "<think>x</think>y<think>z", "y<think>z" },
        { "  plain  ", "plain" },
    };
    for (size_t i = 0; i < sizeof nr / sizeof nr[0]; i++) {
        char *o;
        assert_int_equal(dsq_aisbench_non_reasoning(nr[i][0], strlen(nr[i][0]), &o, NULL), DSQ_OK);
        if (strcmp(o, nr[i][1])) fail_msg("non_reasoning('%s') = '%s'", nr[i][0], o);
        free(o);
    }
    /* gsm8k_postprocess: before "Question:", the last number; the comma quirk */
    static const char *pp[][3] = {
        { "so 3.5 and then answer:12", "12", "12" },
        { "total is 1,234", "234", "1234" },
        { "x = -7.25.", "-7.25", "-7.25" },
        { "no digits", "NULL", "NULL" },
        { "answer:8\nQuestion: 99", "8", "8" },
        { "a-b5 c--3 4.x", "4", "4" },
        { "1.2.3", "1.2", "1.2" }, /* findall: "1.2", then "3" ... the last is "3" */
    };
    for (size_t i = 0; i < sizeof pp / sizeof pp[0]; i++) {
        char *o;
        assert_int_equal(dsq_aisbench_gsm8k_post(pp[i][0], strlen(pp[i][0]), 0, &o), DSQ_OK);
        const char *want = i == 6 ? "3" : pp[i][1];
        if (strcmp(o, want)) fail_msg("gsm8k_postprocess('%s') = '%s', want '%s'", pp[i][0], o, want);
        free(o);
        assert_int_equal(dsq_aisbench_gsm8k_post(pp[i][0], strlen(pp[i][0]), 1, &o), DSQ_OK);
        want = i == 6 ? "3" : pp[i][2];
        if (strcmp(o, want)) fail_msg("nocomma('%s') = '%s', want '%s'", pp[i][0], o, want);
        free(o);
    }
    char *ref;
    const char *ans = "She pays 1,000 + 234 = <<1000+234=1234>>1,234\n#### 1,234";
    assert_int_equal(dsq_aisbench_reference(ans, strlen(ans), &ref), DSQ_OK);
    assert_string_equal(ref, "1234");
    assert_true(dsq_aisbench_is_equal("1234", ref));
    assert_true(dsq_aisbench_is_equal("1234.0000001", ref));
    assert_false(dsq_aisbench_is_equal("1234.01", ref));
    assert_false(dsq_aisbench_is_equal("NULL", ref));
    assert_false(dsq_aisbench_is_equal("234", ref));
    assert_true(dsq_aisbench_is_equal("18", " 18\n"));
    assert_false(dsq_aisbench_is_equal("18", "18.0")); /* int("18.0") raises */
    free(ref);
    /* the whole chain, both versions: the right answer written "1,234" */
    dsq_gsm8k_scorer *sc;
    assert_int_equal(dsq_gsm8k_scorer_create(&sc, NULL), DSQ_OK);
    dsq_chat_score r;
    const char *pred = "step</think>The total is 1,234.\nanswer:1,234";
    assert_int_equal(dsq_chat_score_item(s, sc, pred, strlen(pred), ans, strlen(ans), &r), DSQ_OK);
    assert_string_equal(r.answer, "234");
    assert_false(r.correct);
    dsq_chat_score_release(&r);
    const dsq_chat_suite *s2 = dsq_chat_suite_find("aisbench-0shot-cot-nocomma");
    assert_int_equal(dsq_chat_score_item(s2, sc, pred, strlen(pred), ans, strlen(ans), &r), DSQ_OK);
    assert_string_equal(r.answer, "1234");
    assert_true(r.correct);
    dsq_chat_score_release(&r);
    /* numbers in the reasoning do not count once content follows */
    pred = "<think>maybe 99</think>answer:5";
    assert_int_equal(dsq_chat_score_item(s, sc, pred, strlen(pred), "#### 5", 6, &r), DSQ_OK);
    assert_string_equal(r.answer, "5");
    assert_true(r.correct);
    dsq_chat_score_release(&r);
    dsq_gsm8k_scorer_free(sc);
}

static void test_lmeval_cot_llama(void **st)
{
    (void)st;
    const dsq_chat_suite *s = dsq_chat_suite_find("lm-eval-cot-llama");
    assert_non_null(s);
    assert_int_equal(s->n_stops, 4);
    assert_string_equal(s->stops[2], "Q:");
    char *j;
    assert_int_equal(dsq_chat_suite_messages(s, "Q?", 2, &j, NULL), DSQ_OK);
    json_object *a = json_tokener_parse(j);
    free(j);
    assert_int_equal(json_object_array_length(a), 17); /* 8 shots as user/assistant, then the question */
    json_object *m, *v;
    m = json_object_array_get_idx(a, 1);
    assert_true(json_object_object_get_ex(m, "role", &v));
    assert_string_equal(json_object_get_string(v), "assistant");
    m = json_object_array_get_idx(a, 16);
    assert_true(json_object_object_get_ex(m, "content", &v));
    assert_string_equal(json_object_get_string(v),
                        "Given the following problem, reason and give a final answer to the problem.\nProblem: Q?\n"
                        "Your response should end with \"The final answer is [answer]\" where [answer] is the response to the problem.\n");
    m = json_object_array_get_idx(a, 3);
    assert_true(json_object_object_get_ex(m, "content", &v));
    assert_string_equal(json_object_get_string(v), "There are originally 3 cars. 2 more cars arrive. 3 + 2 = 5. The final answer is 5");
    json_object_put(a);
    /* content only; the think-end split */
    char *p = s_pred(s, "a</think>b</think>  The final answer is 5", "ignored 9", "</think>");
    assert_string_equal(p, "The final answer is 5");
    free(p);
    p = s_pred(s, NULL, "reasoning only 9", NULL);
    assert_string_equal(p, "");
    free(p);
    dsq_gsm8k_scorer *sc;
    assert_int_equal(dsq_gsm8k_scorer_create(&sc, NULL), DSQ_OK);
    dsq_chat_score r;
    const char *ans = "blah\n#### 1,234";
    const char *pred = "The final answer is 7. Then 12. The final answer is $1,234.";
    assert_int_equal(dsq_chat_score_item(s, sc, pred, strlen(pred), ans, strlen(ans), &r), DSQ_OK);
    assert_string_equal(r.answer, "$1,234."); /* the last strict match */
    assert_string_equal(r.flexible, "$1,234.");
    assert_true(r.correct && r.correct_flexible);
    dsq_chat_score_release(&r);
    pred = "It is 12 then 5";
    assert_int_equal(dsq_chat_score_item(s, sc, pred, strlen(pred), "#### 5", 6, &r), DSQ_OK);
    assert_string_equal(r.answer, "[invalid]");
    assert_string_equal(r.flexible, "5");
    assert_true(!r.correct && r.correct_flexible);
    dsq_chat_score_release(&r);
    dsq_gsm8k_scorer_free(sc);
}

static void test_aggregates(void **st)
{
    (void)st;
    assert_true(fabs(dsq_pass_at_k(4, 1, 1) - 0.25) < 1e-12);
    assert_true(fabs(dsq_pass_at_k(4, 1, 4) - 1.0) < 1e-12);
    assert_true(fabs(dsq_pass_at_k(4, 0, 2)) < 1e-12);
    assert_true(fabs(dsq_pass_at_k(5, 2, 2) - (1.0 - 3.0 / 10.0)) < 1e-12); /* 1 - C(3,2)/C(5,2) */
    int c[4] = { 2, 0, 1, 1 };
    double m, se;
    dsq_chat_accuracy(c, 4, 2, &m, &se);
    assert_true(fabs(m - 0.5) < 1e-12);
    /* per-problem 1, 0, .5, .5: sd = sqrt(0.5/3), / sqrt(4) */
    assert_true(fabs(se - sqrt(0.5 / 3.0) / 2.0) < 1e-12);
    int one[3] = { 1, 0, 1 };
    dsq_chat_accuracy(one, 3, 1, &m, &se);
    assert_true(fabs(se - dsq_gsm8k_stderr(2, 3)) < 1e-12); /* lm-eval's mean_stderr */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_aisbench),
        cmocka_unit_test(test_lmeval_cot_llama),
        cmocka_unit_test(test_aggregates),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
