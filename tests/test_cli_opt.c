/* test_cli_opt.c - the programs' option tables (programs/cli_opt.h): values
 * and their bounds, repeated options in order, the shared options acting on
 * the dsq_cli, refusal of options a command or a run does not use, the
 * rows' defaults (applied, checked like given values, shown by -h, tied to
 * a library's) and the -h text rendered from the rows. */
#include "dsq_test.h"
#include "cli_opt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { O_NAME = DSQ_OPT_FIRST, O_COUNT, O_SIZE, O_RATIO, O_MODE, O_KEEP, O_FLAG, O_ONLY_A, O_NEEDS_X };
enum { CMD_A = 1, CMD_B = 2 };
enum { N_X = 1, N_Y = 2 };

/* the table is laid out by hand, one row per option */
/* clang-format off */
static const dsq_opt rows[] = {
    { .type = DSQ_OPT_TEXT, .help = "usage: t [options]\n\n" },
    { O_NAME, DSQ_OPT_STR, "name", 'n', "S", .help = "a name" },
    { O_COUNT, DSQ_OPT_INT, "count", 0, "N", 1, 10, .help = "a count,\nwrapped", .def = "3" },
    { O_SIZE, DSQ_OPT_SIZE, "size", 0, "SIZE", 64, 1 << 20, "64..1M", .help = "a size", .def = "4K" },
    { O_RATIO, DSQ_OPT_FLOAT, "ratio", 0, "R", 0, 1,
      .help = "a ratio whose help runs on to fill the line up to column 79", .def = "0.5" },
    { O_MODE, DSQ_OPT_CHOICE, "mode", 0, "a|b", .choices = "fast|slow", .help = "a mode", .def = "slow" },
    { O_KEEP, DSQ_OPT_STR, "keep", 0, "RE", .help = "repeatable" },
    { O_FLAG, DSQ_OPT_FLAG, "flag", .left = "--flag, --no-flag  ", .help = "custom left column" },
    { O_ONLY_A, DSQ_OPT_FLAG, "only-a", .cmds = CMD_A, .help = "command a only" },
    { O_NEEDS_X, DSQ_OPT_FLAG, "needs-x", .needs = N_X | N_Y },
    { 1, DSQ_OPT_TEXT },
    DSQ_OPT_THREADS_ROW("threads"),
    { DSQ_OPT_QUIET, DSQ_OPT_FLAG, "quiet", 'q' },
    { DSQ_OPT_VERBOSE, DSQ_OPT_FLAG, "verbose", 'v' },
    { DSQ_OPT_JSON, DSQ_OPT_FLAG, "json" },
    { DSQ_OPT_NO_PROGRESS, DSQ_OPT_FLAG, "no-progress" },
    { DSQ_OPT_HELP, DSQ_OPT_FLAG, "help", 'h' },
    { O_NAME, DSQ_OPT_STR, "name", 'n', "S", .help = "the name again: help only" },
};
/* clang-format on */

static void hook(FILE *f, int id) { fprintf(f, "(hook %d)\n", id); }

static const dsq_opt_spec spec = { rows, sizeof rows / sizeof rows[0], 12, 1, hook };

/* Parse a command line given as one string of space-separated words. */
static int parse(dsq_cli *c, dsq_args *a, const char *line)
{
    static char buf[512];
    static char *argv[64];
    snprintf(buf, sizeof buf, "t %s", line);
    int argc = 0;
    for (char *t = strtok(buf, " "); t && argc < 63; t = strtok(NULL, " ")) argv[argc++] = t;
    argv[argc] = NULL;
    dsq_cli_init(c, "t");
    c->progress = 1;
    return dsq_opt_parse(c, &spec, argc, argv, a);
}

static void test_values(void **state)
{
    (void)state;
    dsq_cli c;
    dsq_args a;
    assert_int_equal(parse(&c, &a, "-n x --count 7 --size 4K --ratio 0.25 --mode slow pos1 pos2"), -1);
    assert_string_equal(dsq_opt_str(&a, O_NAME), "x");
    assert_int_equal(dsq_opt_int(&a, O_COUNT), 7);
    assert_int_equal(dsq_opt_u64(&a, O_SIZE), 4096);
    assert_true(dsq_opt_float(&a, O_RATIO) == 0.25);
    assert_int_equal(dsq_opt_choice(&a, O_MODE), 1);
    assert_false(dsq_opt_given(&a, O_FLAG));
        assert_int_equal(a.npos, 2);
    assert_string_equal(a.pos[0], "pos1");
    assert_string_equal(a.pos[1], "pos2");
    dsq_args_release(&a);
    /* the rows' defaults when absent, not counted as given */
    assert_int_equal(parse(&c, &a, "p"), -1);
    assert_int_equal(dsq_opt_int(&a, O_COUNT), 3);
    assert_string_equal(dsq_opt_str(&a, O_COUNT), "3");
    assert_false(dsq_opt_given(&a, O_COUNT));
    assert_int_equal(dsq_opt_u64(&a, O_SIZE), 4096);
    assert_true(dsq_opt_float(&a, O_RATIO) == 0.5);
    assert_int_equal(dsq_opt_choice(&a, O_MODE), 1);
    assert_null(dsq_opt_str(&a, O_NAME)); /* no default: NULL / 0 */
    dsq_args_release(&a);
    /* a given value replaces the default */
    assert_int_equal(parse(&c, &a, "--mode fast --count 9"), -1);
    assert_int_equal(dsq_opt_choice(&a, O_MODE), 0);
    assert_int_equal(dsq_opt_int(&a, O_COUNT), 9);
    dsq_args_release(&a);
}

/* A default is parsed as a given value would be: one outside the bounds,
 * not a number, not a choice, or on a flag is a table error (exit 1) on
 * every command line, -h included. */
static void test_bad_defaults(void **state)
{
    (void)state;
    static const dsq_opt bad[][2] = {
        { { O_COUNT, DSQ_OPT_INT, "count", 0, "N", 1, 10, .def = "11" }, DSQ_OPT_THREADS_ROW("t") },
        { { O_COUNT, DSQ_OPT_INT, "count", 0, "N", 1, 10, .def = "0" }, DSQ_OPT_THREADS_ROW("t") },
        { { O_COUNT, DSQ_OPT_INT, "count", 0, "N", 1, 10, .def = "three" }, DSQ_OPT_THREADS_ROW("t") },
        { { O_SIZE, DSQ_OPT_SIZE, "size", 0, "SIZE", 64, 1 << 20, .def = "2M" }, DSQ_OPT_THREADS_ROW("t") },
        { { O_RATIO, DSQ_OPT_FLOAT, "ratio", 0, "R", 0, 1, .def = "nan" }, DSQ_OPT_THREADS_ROW("t") },
        { { O_MODE, DSQ_OPT_CHOICE, "mode", 0, .choices = "fast|slow", .def = "medium" }, DSQ_OPT_THREADS_ROW("t") },
        { { O_FLAG, DSQ_OPT_FLAG, "flag", .def = "1" }, DSQ_OPT_THREADS_ROW("t") },
        { { DSQ_OPT_HELP, DSQ_OPT_FLAG, "help", 'h' }, { O_COUNT, DSQ_OPT_INT, "count", 0, "N", 1, 10, .def = "-1" } },
    };
    char a0[] = "t", a1[] = "-h";
    char *argv[] = { a0, a1, NULL };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const dsq_opt_spec s = { bad[i], 2, 12, 0, NULL };
        dsq_cli c;
        dsq_args a;
        dsq_cli_init(&c, "t");
        int rc = dsq_opt_parse(&c, &s, i + 1 == sizeof bad / sizeof bad[0] ? 2 : 1, argv, &a);
        if (rc != DSQ_EXIT_ERROR) fail_msg("table %zu: bad default accepted (rc %d)", i, rc);
    }
    /* the same rows with good defaults parse */
    static const dsq_opt good[] = {
        { O_COUNT, DSQ_OPT_INT, "count", 0, "N", 1, 10, .def = "10" },
        { O_SIZE, DSQ_OPT_SIZE, "size", 0, "SIZE", 64, 1 << 20, .def = "1M" },
        { O_MODE, DSQ_OPT_CHOICE, "mode", 0, .choices = "fast|slow", .def = "fast" },
    };
    const dsq_opt_spec s = { good, 3, 12, 0, NULL };
    dsq_cli c;
    dsq_args a;
    dsq_cli_init(&c, "t");
    assert_int_equal(dsq_opt_parse(&c, &s, 1, argv, &a), -1);
    assert_int_equal(dsq_opt_int(&a, O_COUNT), 10);
    assert_int_equal(dsq_opt_u64(&a, O_SIZE), 1 << 20);
    dsq_args_release(&a);
}

/* dsq_opt_check_lib: a table default that is not the library's is refused. */
static void test_lib_defaults(void **state)
{
    (void)state;
    dsq_cli c;
    dsq_cli_init(&c, "t");
    const dsq_opt_lib same[] = { { O_COUNT, 3 }, { O_SIZE, 4096 }, { O_RATIO, 0.5f }, { O_MODE, 1 } };
    assert_int_equal(dsq_opt_check_lib(&c, &spec, same, 4), -1);
    const float damp = 0.01f; /* a float field: the default rounded to float */
    static const dsq_opt frow[] = { { O_RATIO, DSQ_OPT_FLOAT, "ratio", 0, "R", 0, 1, .def = "0.01" } };
    const dsq_opt_spec fs = { frow, 1, 12, 0, NULL };
    assert_int_equal(dsq_opt_check_lib(&c, &fs, (dsq_opt_lib[]){ { O_RATIO, damp } }, 1), -1);
    assert_int_equal(dsq_opt_check_lib(&c, &fs, (dsq_opt_lib[]){ { O_RATIO, 0.011 } }, 1), DSQ_EXIT_ERROR);
    static const dsq_opt_lib differ[][1] = {
        { { O_COUNT, 4 } }, { { O_SIZE, 4095 } }, { { O_RATIO, 0.25 } }, { { O_MODE, 0 } }, { { O_NAME, 0 } }, /* no default */
    };
    for (size_t i = 0; i < sizeof differ / sizeof differ[0]; i++)
        if (dsq_opt_check_lib(&c, &spec, differ[i], 1) != DSQ_EXIT_ERROR) fail_msg("lib default %zu: accepted", i);
}

static void test_bounds(void **state)
{
    (void)state;
    dsq_cli c;
    dsq_args a;
    static const char *const bad[] = {
        "--count 0", "--count 11", "--count x", "--size 63", "--size 2M", "--ratio 1.5", "--ratio nan",
        "--mode medium", "-T 4097", "-T -1", "--count", "--nope", "-x", "-qx",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = parse(&c, &a, bad[i]);
        if (rc != DSQ_EXIT_USAGE) fail_msg("'%s' accepted (rc %d)", bad[i], rc);
    }
    /* the edges are in */
    assert_int_equal(parse(&c, &a, "--count 1 --size 1M --ratio 1 -T 4096"), -1);
    assert_int_equal(c.threads, 4096);
    dsq_args_release(&a);
    assert_int_equal(parse(&c, &a, "-T 0 --count 10 --size 64"), -1);
    assert_int_equal(c.threads, 0);
    dsq_args_release(&a);
}

static void test_order_and_shared(void **state)
{
    (void)state;
    dsq_cli c;
    dsq_args a;
    assert_int_equal(parse(&c, &a, "--keep a -n x --keep b --flag -qqv --json --no-progress -T3"), -1);
    /* every occurrence, in order */
    const char *kept[4];
    int nk = 0;
    for (int i = 0; i < a.nseq; i++)
        if (a.seq[i].id == O_KEEP) kept[nk++] = a.seq[i].arg;
    assert_int_equal(nk, 2);
    assert_string_equal(kept[0], "a");
    assert_string_equal(kept[1], "b");
    assert_int_equal(a.v[O_KEEP].count, 2);
    assert_string_equal(dsq_opt_str(&a, O_KEEP), "b"); /* the last one */
    assert_true(a.v[O_FLAG].pos > a.v[O_KEEP].pos);
    assert_int_equal(c.level, 1);     /* 2 - 2 + 1 */
    assert_int_equal(c.json, 1);
    assert_int_equal(c.threads, 3);
    assert_int_equal(c.progress, 0);
    dsq_args_release(&a);
    assert_int_equal(parse(&c, &a, "-qqqq"), -1);
    assert_int_equal(c.level, 0);     /* never below silent */
    dsq_args_release(&a);
    /* -h prints the help and stops with status 0 */
    FILE *saved = stdout;
    char *text = NULL;
    size_t len = 0;
    stdout = open_memstream(&text, &len);
    int rc = parse(&c, &a, "--count 3 -h");
    fclose(stdout);
    stdout = saved;
    assert_int_equal(rc, DSQ_EXIT_OK);
    assert_non_null(strstr(text, "usage: t [options]"));
    free(text);
}

static void test_refusals(void **state)
{
    (void)state;
    dsq_cli c;
    dsq_args a;
    static const dsq_opt_need needs[] = { { N_X, "%s needs x" }, { N_Y, "%s needs y" } };
    assert_int_equal(parse(&c, &a, "--only-a --needs-x"), -1);
    assert_int_equal(dsq_opt_check_cmd(&c, &spec, &a, CMD_A, "a"), -1);
    assert_int_equal(dsq_opt_check_cmd(&c, &spec, &a, CMD_B, "b"), DSQ_EXIT_USAGE);
    assert_int_equal(dsq_opt_check_needs(&c, &spec, &a, N_X | N_Y, needs, 2), -1);
    assert_int_equal(dsq_opt_check_needs(&c, &spec, &a, N_X, needs, 2), DSQ_EXIT_USAGE);
    assert_int_equal(dsq_opt_check_needs(&c, &spec, &a, N_Y, needs, 2), DSQ_EXIT_USAGE);
    dsq_args_release(&a);
    /* options not given are never refused */
    assert_int_equal(parse(&c, &a, "-n x"), -1);
    assert_int_equal(dsq_opt_check_cmd(&c, &spec, &a, CMD_B, "b"), -1);
    assert_int_equal(dsq_opt_check_needs(&c, &spec, &a, 0, needs, 2), -1);
    dsq_args_release(&a);
}

static void test_help(void **state)
{
    (void)state;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    dsq_opt_help(&spec, f);
    fclose(f);
    /* the rows: left column of 12, help after one space, continuations
     * indented to the help column; long left columns push the help right */
    assert_non_null(strstr(text, "  -n, --name S a name\n"));
    /* defaults after the last line, or on their own line past column 79 */
    assert_non_null(strstr(text, "a count,\n               wrapped (default 3)\n"));
    assert_non_null(strstr(text, "--size SIZE a size (default 4K)\n"));
    assert_non_null(strstr(text, "up to column 79\n               (default 0.5)\n"));
    assert_non_null(strstr(text, "a mode (default slow)\n"));
    assert_null(strstr(text, "a name (default"));
    assert_non_null(strstr(text, "  --flag, --no-flag   custom left column\n"));
    assert_non_null(strstr(text, "(hook 1)\n"));
    assert_non_null(strstr(text, "the name again: help only\n"));
    assert_null(strstr(text, "needs-x"));   /* rows without help are not shown */
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_values),
        cmocka_unit_test(test_bad_defaults),
        cmocka_unit_test(test_lib_defaults),
        cmocka_unit_test(test_bounds),
        cmocka_unit_test(test_order_and_shared),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_help),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
