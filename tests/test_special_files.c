/* test_special_files.c - special files in a model or export never block a
 * reader: a FIFO (no writer) standing for config.json, a safetensors shard,
 * the index, tokenizer.json, SHA256SUMS or a llama2.c checkpoint is refused
 * with "not a regular file (FIFO)" at once; user data read with
 * dsq_read_file_or_pipe takes a pipe with a writer and reads a FIFO with no
 * writer as empty. An alarm turns a blocking open into a failure instead of
 * a hung test. */
#include "dsq_test.h"

#include "dsq_file.h"
#include "llama2c.h"
#include "model_config.h"
#include "safetensors.h"
#include "sha256sums.h"
#include "tokenizer.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_alarm(int sig)
{
    (void)sig;
    static const char msg[] = "blocked on a special file for 20 s\n";
    if (write(2, msg, sizeof msg - 1) < 0) _exit(3);
    _exit(3);
}

static char *fifo_at(const char *dir, const char *name)
{
    char *p = malloc(strlen(dir) + strlen(name) + 2);
    sprintf(p, "%s/%s", dir, name);
    assert_int_equal(mkfifo(p, 0600), 0);
    return p;
}

static void expect_fifo_refused(int rc, const dsq_diag *d)
{
    assert_true(rc < 0);
    if (!strstr(d->msg, "not a regular file")) fail_msg("message: %s", d->msg);
}

static void test_model_files_as_fifos(void **st)
{
    (void)st;
    signal(SIGALRM, on_alarm);
    alarm(20);
    char *dir = dsq_test_tmpdir();
    dsq_diag d;

    char *cfg = fifo_at(dir, "config.json");
    dsq_model_config c;
    dsq_diag_clear(&d);
    expect_fifo_refused(dsq_model_config_load(&c, cfg, &d), &d);

    char *shard = fifo_at(dir, "model.safetensors");
    dsq_st_model *m = NULL;
    dsq_diag_clear(&d);
    expect_fifo_refused(dsq_st_open(&m, shard, &d), &d);
    dsq_diag_clear(&d);
    expect_fifo_refused(dsq_st_open(&m, dir, &d), &d);   /* found by the directory scan */

    char *index = fifo_at(dir, "model.safetensors.index.json");
    dsq_diag_clear(&d);
    expect_fifo_refused(dsq_st_open(&m, index, &d), &d);

    char *tok = fifo_at(dir, "tokenizer.json");
    dsq_tokenizer *t = NULL;
    dsq_diag_clear(&d);
    assert_true(dsq_tokenizer_load(&t, tok, &d) < 0);

    char *sums = fifo_at(dir, "SHA256SUMS");
    size_t nfiles = 0;
    dsq_diag_clear(&d);
    expect_fifo_refused(dsq_sums_verify(dir, &nfiles, &d), &d);

    char *bin = fifo_at(dir, "model.bin");
    dsq_llama2c l;
    dsq_diag_clear(&d);
    expect_fifo_refused(dsq_llama2c_open(&l, bin, &d), &d);

    char *buf = NULL;
    size_t len = 0;
    dsq_diag_clear(&d);
    expect_fifo_refused(dsq_read_file(cfg, 1024, &buf, &len, &d), &d);
    /* user data: a FIFO nobody writes to reads as empty, without waiting */
    dsq_diag_clear(&d);
    assert_int_equal(dsq_read_file_or_pipe(cfg, 1024, &buf, &len, &d), DSQ_OK);
    assert_int_equal(len, 0);
    free(buf);
    alarm(0);
    free(cfg);
    free(shard);
    free(index);
    free(tok);
    free(sums);
    free(bin);
    dsq_test_rmtree(dir);
    free(dir);
}

/* A pipe with a writer (what a shell's process substitution hands over as
 * /dev/fd/N) is read to its end. */
static void test_user_data_pipe_is_read(void **st)
{
    (void)st;
    signal(SIGALRM, on_alarm);
    alarm(20);
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        static const char line[] = "{\"question\": \"1+1\", \"answer\": \"#### 2\"}\n";
        ssize_t w = write(fds[1], line, sizeof line - 1);
        _exit(w == (ssize_t)(sizeof line - 1) ? 0 : 1);
    }
    close(fds[1]);
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fds[0]);
    char *buf = NULL;
    size_t len = 0;
    dsq_diag d;
    dsq_diag_clear(&d);
    int rc = dsq_read_file_or_pipe(path, 4096, &buf, &len, &d);
    int status = 0;
    waitpid(pid, &status, 0);
    close(fds[0]);
    alarm(0);
    assert_int_equal(rc, DSQ_OK);
    assert_int_equal(WEXITSTATUS(status), 0);
    assert_non_null(strstr(buf, "\"answer\": \"#### 2\""));
    free(buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_model_files_as_fifos),
        cmocka_unit_test(test_user_data_pipe_is_read),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
