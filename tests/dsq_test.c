/* dsq_test.c - see dsq_test.h. */
#include "dsq_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

char *dsq_test_tmpdir(void)
{
    const char *base = getenv("TMPDIR");
    char tmpl[4096];
    snprintf(tmpl, sizeof tmpl, "%s/dsq-test-XXXXXX", base && *base ? base : "/tmp");
    char *p = mkdtemp(tmpl);
    assert_non_null(p);
    return strdup(p);
}

void dsq_test_rmtree(const char *path)
{
    if (!path || strlen(path) < 8 || strstr(path, "dsq-test-") == NULL) return;
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    if (system(cmd) != 0) { /* best effort */ }
}

char *dsq_test_shared(const char *rel)
{
    const char *roots[] = { getenv("DSQ_SHARED"), "../shared", "../../shared" };
    for (size_t i = 0; i < sizeof roots / sizeof roots[0]; i++) {
        if (!roots[i]) continue;
        char p[4096];
        snprintf(p, sizeof p, "%s/data/%s", roots[i], rel);
        if (access(p, R_OK) == 0) return strdup(p);
    }
    return NULL;
}

void dsq_test_write(const char *path, const void *data, size_t n)
{
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(data, 1, n, fp), n);
    assert_int_equal(fclose(fp), 0);
}

/* DSQ_TEST_SKIP: a cmocka name pattern ('*' and '?') of cases not to run,
 * read before main (make check leaves out slow quality cases this way). */
__attribute__((constructor)) static void dsq_test_skip_from_env(void)
{
    const char *p = getenv("DSQ_TEST_SKIP");
    if (p && *p) cmocka_set_skip_filter(p);
}

unsigned dsq_test_b2u(unsigned b)
{
    int printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    if (printable) return b;
    unsigned k = 0;
    for (unsigned x = 0; x < b; x++) {
        int p = (x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE);
        k += !p;
    }
    return 256 + k;
}
