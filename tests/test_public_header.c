/* test_public_header.c - include/dsq.h compiles on its own and exposes the
 * pieces a program needs to convert and evaluate (a link-level smoke test). */
#include "dsq.h"
#include "dsq_test.h"

static void test_umbrella(void **state)
{
    (void)state;
    assert_non_null(dsq_scheme_by_name("awq-w4a16"));
    assert_non_null(dsq_scheme_by_name("w4a16"));
    assert_string_equal(dsq_strerror(DSQ_OK), "success");
    assert_non_null(DSQ_VERSION_STRING);
}

int main(void)
{
    const struct CMUnitTest tests[] = { cmocka_unit_test(test_umbrella) };
    return cmocka_run_group_tests_name("public_header", tests, NULL, NULL);
}
