/* test_dpw.c - positional O_DIRECT writes (common/dsq_dpw.h) give the bytes
 * buffered pwrite gives: writes of odd lengths at odd offsets in any order,
 * overlapping, across stage boundaries, past the end of the file, on the
 * direct path (a directory on a disk: the build directory) and on the
 * buffered fallback. */
#include "dsq_test.h"
#include "dsq_dpw.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static uint64_t g_rng = 0x13198a2e03707344ull;
static uint32_t rnd(void) { return dsq_test_xorshift(&g_rng); }

#define SIZE ((size_t)DSQ_DPW_STAGE * 2 + 12345)

/* Random writes to the file and to an image; returns 1 if they went direct. */
static int run(const char *path, int force_buffered)
{
    uint8_t *img = calloc(1, SIZE), *src = malloc(SIZE), *back = malloc(SIZE);
    assert_true(img && src && back);
    for (size_t i = 0; i < SIZE; i++) src[i] = (uint8_t)rnd();
    int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0644);
    assert_true(fd >= 0);
    dsq_dpw w;
    dsq_dpw_open(&w, fd, path);
    if (force_buffered) {   /* as where O_DIRECT is refused */
        dsq_dpw_close(&w);
        dsq_dpw_open(&w, fd, "/dev/null/not-a-file");
        assert_false(dsq_dpw_direct(&w));
    }
    int direct = dsq_dpw_direct(&w);
    uint64_t hi = 0;
    /* fixed cases: one byte, inside one block, block-aligned whole blocks,
     * a run across the stage boundary, then random ones */
    const uint64_t fo[] = { 0, 5, 4096, 8190, DSQ_DPW_STAGE - 7, 3 };
    const size_t fl[] = { 1, 100, 8192, 5, 20000, DSQ_DPW_STAGE + 9000 };
    for (int k = 0; k < 70; k++) {
        uint64_t off;
        size_t n;
        if (k < 6) {
            off = fo[k];
            n = fl[k];
        } else {
            off = rnd() % (SIZE - 1);
            n = 1 + rnd() % (k % 3 == 0 ? 300000 : 5000);
            if (off + n > SIZE) n = SIZE - off;
        }
        const uint8_t *p = src + rnd() % (SIZE - n + 1);
        memcpy(img + off, p, n);
        if (off + n > hi) hi = off + n;
        dsq_diag d;
        dsq_diag_clear(&d);
        assert_int_equal(dsq_dpw_pwrite(&w, p, n, off, &d), 0);
    }
    dsq_diag d;
    dsq_diag_clear(&d);
    assert_int_equal(dsq_dpw_sync(&w, &d), DSQ_OK);
    assert_null(w.bg);   /* stopped: a second sync is a plain fsync */
    assert_int_equal(dsq_dpw_sync(&w, &d), DSQ_OK);
    dsq_dpw_close(&w);
    assert_int_equal(ftruncate(fd, (off_t)hi), 0);
    close(fd);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fread(back, 1, SIZE, f), hi);
    fclose(f);
    assert_memory_equal(back, img, hi);
    unlink(path);
    free(img);
    free(src);
    free(back);
    return direct;
}

static void test_direct_and_buffered(void **state)
{
    (void)state;
    const char *b = getenv("BUILD");
    char path[512];
    snprintf(path, sizeof path, "%s/test_dpw.tmp", b && *b ? b : "build");
    int direct = run(path, 0);
    if (!direct) fprintf(stderr, "test_dpw: %s refuses O_DIRECT: only the fallback ran\n", path);
    assert_int_equal(run(path, 1), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_direct_and_buffered),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
