/* test_common.c - errors, half conversions, atomic files, thread pool, SHA-256. */
#include "dsq_test.h"
#include "dsq_crc32c.h"
#include "dsq_error.h"
#include "dsq_file.h"
#include "dsq_mem.h"
#include "dsq_sha256.h"
#include "dsq_syncer.h"
#include "dsq_thread.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <errno.h>
#include <fcntl.h>
#include <time.h>

static void test_strerror_covers_all(void **state)
{
    (void)state;
    for (int s = 0; s >= DSQ_STATUS_MIN; s--) {
        assert_string_not_equal(dsq_strerror(s), "unknown error");
        assert_string_not_equal(dsq_status_name(s), "DSQ_ERR_UNKNOWN");
    }
    assert_string_equal(dsq_strerror(DSQ_STATUS_MIN - 1), "unknown error");
}

static void test_diag_first_cause_wins(void **state)
{
    (void)state;
    dsq_diag d;
    dsq_diag_clear(&d);
    int rc = dsq_fail(&d, DSQ_ERR_FORMAT, "a.safetensors", "w", 42, "bad dtype '%s'", "X9");
    assert_int_equal(rc, DSQ_ERR_FORMAT);
    dsq_fail(&d, DSQ_ERR_IO, "b", NULL, -1, "later");
    char buf[1024];
    dsq_diag_format(&d, buf, sizeof buf);
    assert_string_equal(buf, "'a.safetensors': tensor 'w': at byte 42: bad dtype 'X9'");
}

static void test_bf16_f16_roundtrip(void **state)
{
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = dsq_bf16_to_f32((uint16_t)h);
        if (isnan(f)) continue;
        assert_int_equal(dsq_f32_to_bf16(f), h);
        float g = dsq_f16_to_f32((uint16_t)h);
        if (isnan(g)) continue;
        assert_int_equal(dsq_f32_to_f16(g), h);
    }
    /* ties to even: 1 + 2^-8 is halfway between two bf16 values */
    assert_int_equal(dsq_f32_to_bf16(1.00390625f), 0x3f80);
    assert_int_equal(dsq_f32_to_bf16(1.01171875f), 0x3f82);
    assert_int_equal(dsq_f32_to_f16(65520.0f), 0x7c00);
}

static void test_checked_mul(void **state)
{
    (void)state;
    size_t r;
    assert_int_equal(dsq_mul_size(SIZE_MAX / 2, 3, &r), -1);
    assert_int_equal(dsq_mul_size(1000, 1000, &r), 0);
    assert_int_equal(r, 1000000);
}

static void test_sha256_known(void **state)
{
    (void)state;
    uint8_t d[32];
    char hex[65];
    assert_int_equal(dsq_sha256_buf("abc", 3, d), DSQ_OK);
    dsq_sha256_hex(d, hex);
    assert_string_equal(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    uint8_t e[32];
    assert_int_equal(dsq_sha256_parse_hex(hex, e), 0);
    assert_memory_equal(d, e, 32);
    assert_int_equal(dsq_sha256_parse_hex("zz", e), -1);
}

static void add_item(void *ctx, size_t i, int tid)
{
    (void)tid;
    atomic_fetch_add((atomic_size_t *)ctx, i + 1);
}

static void test_pool_runs_every_item(void **state)
{
    (void)state;
    dsq_pool *p = dsq_pool_create(3);
    assert_non_null(p);
    for (int rep = 0; rep < 50; rep++) {
        atomic_size_t sum = 0;
        dsq_pool_run(p, 1000, add_item, &sum);
        assert_int_equal(atomic_load(&sum), 1000 * 1001 / 2);
    }
    dsq_pool_free(p);
}

/* Back-to-back jobs of a few items, the decode pattern: every item runs
 * exactly once per job whether the workers spin between jobs (default),
 * sleep at once (DSQ_POOL_SPIN_US=0: every job wakes them through the
 * condition variable) or spin briefly and then sleep, with a pause between
 * jobs longer than that spin. */
struct once_ctx {
    atomic_int hits[64];
};

static void hit_item(void *ctx, size_t i, int tid)
{
    (void)tid;
    atomic_fetch_add(&((struct once_ctx *)ctx)->hits[i], 1);
}

static void test_pool_short_jobs_each_item_once(void **state)
{
    (void)state;
    const char *spins[] = { NULL, "0", "1" };
    for (int s = 0; s < 3; s++) {
        if (spins[s]) setenv("DSQ_POOL_SPIN_US", spins[s], 1);
        else unsetenv("DSQ_POOL_SPIN_US");
        dsq_pool *p = dsq_pool_create(3);
        assert_non_null(p);
        for (int rep = 0; rep < 2000; rep++) {
            struct once_ctx c;
            size_t n = 2 + (size_t)(rep % 63);
            for (int i = 0; i < 64; i++) atomic_init(&c.hits[i], 0);
            dsq_pool_run(p, n, hit_item, &c);
            for (size_t i = 0; i < 64; i++) assert_int_equal(atomic_load(&c.hits[i]), i < n ? 1 : 0);
            if (s == 2 && rep % 100 == 0) usleep(2000);   /* past the 1 us spin: workers sleep */
        }
        dsq_pool_free(p);
    }
    unsetenv("DSQ_POOL_SPIN_US");
}

/* The spin setting: the environment reaches a new pool, the setter changes
 * it between jobs (bench_pool switches settings on one pool), values out of
 * range are refused and leave it as it was, and jobs after each change run
 * every item once. */
static void test_pool_spin_setting(void **state)
{
    (void)state;
    setenv("DSQ_POOL_SPIN_US", "7", 1);
    dsq_pool *p = dsq_pool_create(2);
    assert_non_null(p);
    unsetenv("DSQ_POOL_SPIN_US");
    assert_int_equal(dsq_pool_spin_us(p), 7);
    assert_int_equal(dsq_pool_set_spin_us(p, -1), -1);
    assert_int_equal(dsq_pool_set_spin_us(p, DSQ_POOL_SPIN_US_MAX + 1), -1);
    assert_int_equal(dsq_pool_spin_us(p), 7);
    assert_int_equal(dsq_pool_set_spin_us(NULL, 5), -1);
    const long settings[] = { 0, 50, 1, 0 };
    for (int s = 0; s < 4; s++) {
        assert_int_equal(dsq_pool_set_spin_us(p, settings[s]), 0);
        assert_int_equal(dsq_pool_spin_us(p), settings[s]);
        for (int rep = 0; rep < 300; rep++) {
            struct once_ctx c;
            size_t n = 2 + (size_t)(rep % 31);
            for (int i = 0; i < 64; i++) atomic_init(&c.hits[i], 0);
            dsq_pool_run(p, n, hit_item, &c);
            for (size_t i = 0; i < 64; i++) assert_int_equal(atomic_load(&c.hits[i]), i < n ? 1 : 0);
            if (rep % 100 == 0) usleep(500);   /* longer than a 1 us spin: workers sleep */
        }
    }
    dsq_pool_free(p);
    /* the default: spin with no more threads than CPUs, not with more
     * (a spinning thread would hold a CPU that one with work needs) */
    p = dsq_pool_create(1);
    assert_non_null(p);
    assert_true(dsq_pool_spin_us(p) > 0);
    dsq_pool_free(p);
    p = dsq_pool_create(dsq_cpu_count() + 1);
    assert_non_null(p);
    assert_int_equal(dsq_pool_spin_us(p), 0);
    dsq_pool_free(p);
    setenv("DSQ_POOL_SPIN_US", "3", 1);   /* the environment overrides both */
    p = dsq_pool_create(dsq_cpu_count() + 1);
    assert_non_null(p);
    assert_int_equal(dsq_pool_spin_us(p), 3);
    dsq_pool_free(p);
    unsetenv("DSQ_POOL_SPIN_US");
}

static void test_atomic_outfile(void **state)
{
    (void)state;
    char *dir = dsq_test_tmpdir();
    char *path = dsq_path_join(dir, "out.bin");
    dsq_diag d;
    dsq_diag_clear(&d);
    dsq_outfile f;
    assert_int_equal(dsq_outfile_open(&f, path, 0, &d), DSQ_OK);
    assert_int_equal(dsq_outfile_write(&f, "hello", 5, &d), DSQ_OK);
    assert_int_equal(dsq_outfile_pad(&f, 64, &d), DSQ_OK);
    assert_int_equal(f.written, 64);
    assert_false(dsq_path_exists(path));          /* not visible before commit */
    assert_int_equal(dsq_outfile_commit(&f, &d), DSQ_OK);
    assert_true(dsq_path_exists(path));
    /* refuses to overwrite without the flag, and leaves no temporary */
    assert_int_equal(dsq_outfile_open(&f, path, 0, &d), DSQ_ERR_EXISTS);
    char *tmp = dsq_outfile_tmp_name(path);
    assert_false(dsq_path_exists(tmp));
    /* abort removes the temporary and keeps the old file */
    dsq_diag_clear(&d);
    assert_int_equal(dsq_outfile_open(&f, path, DSQ_OUT_OVERWRITE, &d), DSQ_OK);
    assert_true(dsq_path_exists(tmp));
    dsq_outfile_abort(&f);
    assert_false(dsq_path_exists(tmp));
    char *buf;
    size_t n;
    assert_int_equal(dsq_read_file(path, 1 << 20, &buf, &n, &d), DSQ_OK);
    assert_int_equal(n, 64);
    assert_memory_equal(buf, "hello", 5);
    free(buf);
    free(tmp);
    free(path);
    dsq_test_rmtree(dir);
    free(dir);
}

static void test_enospc_is_clean(void **state)
{
    (void)state;
    if (access("/dev/full", W_OK) != 0) { skip(); }
    /* /dev/full: every write fails with ENOSPC; we write through pwrite. */
    dsq_outfile f;
    memset(&f, 0, sizeof f);
    f.fd = open("/dev/full", O_WRONLY);
    f.slot = -1;
    f.tmp_path = strdup("/dev/full");
    dsq_diag d;
    dsq_diag_clear(&d);
    char buf[4096] = {0};
    int rc = dsq_outfile_write(&f, buf, sizeof buf, &d);
    assert_int_equal(rc, DSQ_ERR_NOSPC);
    close(f.fd);
    free(f.tmp_path);
}

/* CRC-32C: the standard check value, the crc32 instruction path against the
 * byte-table reference at every length and misalignment around the 8-byte
 * and four-quarter boundaries, streaming in two calls, and that a one-byte
 * change anywhere changes the 4-quarter record (the resume ledger's). */
static void test_crc32c(void **state)
{
    (void)state;
    assert_true(dsq_crc32c(0, "123456789", 9) == 0xE3069283u);
    assert_true(dsq_crc32c_ref(0, "123456789", 9) == 0xE3069283u);
    assert_true(dsq_crc32c(0, NULL, 0) == 0);
    enum { N = 4096 };
    uint8_t *buf = malloc(N + 8);
    assert_non_null(buf);
    uint32_t x = 12345;
    for (size_t i = 0; i < N + 8; i++) buf[i] = (uint8_t)((x = x * 1103515245u + 12345u) >> 23);
    for (size_t off = 0; off < 8; off++)
        for (size_t n = 0; n <= 300; n += (n < 80 ? 1 : 7)) {
            const uint8_t *p = buf + off;
            uint32_t r = dsq_crc32c_ref(0, p, n);
            assert_true(dsq_crc32c(0, p, n) == r);
            size_t cut = n / 3;
            assert_true(dsq_crc32c(dsq_crc32c(0, p, cut), p + cut, n - cut) == r);
            uint8_t a[DSQ_CRC32C_X4_LEN], b[DSQ_CRC32C_X4_LEN];
            dsq_crc32c_x4(p, n, a);
            dsq_crc32c_x4_ref(p, n, b);
            assert_memory_equal(a, b, sizeof a);
            /* quarter 3 ends at n: its CRC is that of the last n - 3n/4 bytes */
            uint32_t q3 = dsq_crc32c_ref(0, p + n * 3 / 4, n - n * 3 / 4);
            assert_true(((uint32_t)a[12] | (uint32_t)a[13] << 8 | (uint32_t)a[14] << 16 |
                         (uint32_t)a[15] << 24) == q3);
        }
    uint8_t base[DSQ_CRC32C_X4_LEN], got[DSQ_CRC32C_X4_LEN];
    dsq_crc32c_x4(buf, N, base);
    for (size_t i = 0; i < N; i += 61) {
        buf[i] ^= 0x10;
        dsq_crc32c_x4(buf, N, got);
        assert_memory_not_equal(base, got, sizeof got);
        buf[i] ^= 0x10;
    }
    free(buf);
}

/* dsq_dio: more stages than the ring holds, each a different pattern,
 * land in order at their offsets; then a length O_DIRECT refuses (not a
 * multiple of the block) goes through the buffered descriptor and says
 * so. Where the directory refuses O_DIRECT at open, both go buffered. */
static void test_dio_ring(void **state)
{
    (void)state;
    char *dir = dsq_test_tmpdir();
    char *path = dsq_path_join(dir, "ring.bin");
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    assert_true(fd >= 0);
    int dfd = open(path, O_WRONLY | O_DIRECT | O_CLOEXEC);
    dsq_dio *a = dsq_dio_start(dfd >= 0 ? dfd : fd, fd);
    assert_non_null(a);
    const unsigned nst = 3 * DSQ_DIO_STAGES + 1;
    for (unsigned i = 0; i < nst; i++) {
        uint8_t *st = dsq_dio_stage(a);
        assert_true(((uintptr_t)st % DSQ_DIO_ALIGN) == 0);
        memset(st, (int)(i + 1), DSQ_DIO_STAGE_BYTES);
        assert_int_equal(dsq_dio_next(a, DSQ_DIO_STAGE_BYTES, (uint64_t)i * DSQ_DIO_STAGE_BYTES), 0);
    }
    assert_int_equal(dsq_dio_drain(a), 0);
    assert_int_equal(dsq_dio_done(a), (uint64_t)nst * DSQ_DIO_STAGE_BYTES);
    assert_int_equal(dsq_dio_refused(a), 0);
    const uint64_t tail_off = (uint64_t)nst * DSQ_DIO_STAGE_BYTES;
    memset(dsq_dio_stage(a), 0xEE, 1000);
    assert_int_equal(dsq_dio_next(a, 1000, tail_off), 0);
    assert_int_equal(dsq_dio_drain(a), 0);
    assert_int_equal(dsq_dio_refused(a), dfd >= 0);   /* EINVAL: written buffered */
    assert_int_equal(dsq_dio_done(a), tail_off + 1000);
    assert_int_equal(dsq_dio_stop(a), 0);
    close(fd);
    if (dfd >= 0) close(dfd);
    char *got;
    size_t n;
    dsq_diag d;
    dsq_diag_clear(&d);
    assert_int_equal(dsq_read_file(path, tail_off + 2000, &got, &n, &d), DSQ_OK);
    assert_int_equal(n, tail_off + 1000);
    for (unsigned i = 0; i < nst; i++) {
        const uint8_t *p = (const uint8_t *)got + (size_t)i * DSQ_DIO_STAGE_BYTES;
        assert_int_equal(p[0], i + 1);
        assert_int_equal(p[DSQ_DIO_STAGE_BYTES - 1], i + 1);
    }
    assert_int_equal((uint8_t)got[tail_off], 0xEE);
    assert_int_equal((uint8_t)got[tail_off + 999], 0xEE);
    free(got);
    unlink(path);
    rmdir(dir);
    free(path);
    free(dir);
}

/* DSQ_OUT_DIRECT_IO: appends of odd sizes across the staging buffer's
 * boundary, a sync mid-block (the file must then hold exactly what was
 * appended), a truncation back into an already written piece, a detach and
 * reopen (resume), a pwrite that leaves the direct path: the committed file
 * must equal the same operations on a plain buffer. Where the temporary
 * directory refuses O_DIRECT this checks the buffered path instead. */
static void test_outfile_direct_io(void **state)
{
    (void)state;
    char *dir = dsq_test_tmpdir();
    char *path = dsq_path_join(dir, "dio.bin");
    char *tmp = dsq_outfile_tmp_name(path);
    const size_t total = DSQ_OUT_STAGE_BYTES * 2 + 12345;
    uint8_t *src = malloc(total), *want = calloc(1, total);
    assert_non_null(src);
    assert_non_null(want);
    uint32_t x = 7;
    for (size_t i = 0; i < total; i++) src[i] = (uint8_t)((x = x * 1664525u + 1013904223u) >> 24);
    dsq_diag d;
    dsq_diag_clear(&d);
    dsq_outfile f;
    assert_int_equal(dsq_outfile_open(&f, path, DSQ_OUT_DIRECT_IO | DSQ_OUT_KEEP_TMP | DSQ_OUT_SYNC_BEHIND, &d), DSQ_OK);
    size_t at = 0, step = 1;
    while (at < DSQ_OUT_STAGE_BYTES + 5000) {       /* odd sizes, growing */
        size_t k = step < DSQ_OUT_STAGE_BYTES + 5000 - at ? step : DSQ_OUT_STAGE_BYTES + 5000 - at;
        assert_int_equal(dsq_outfile_write(&f, src + at, k, &d), DSQ_OK);
        at += k;
        step = step * 3 + 1;
    }
    assert_int_equal(dsq_outfile_sync(&f, &d), DSQ_OK);
    struct stat st;
    assert_int_equal(stat(tmp, &st), 0);
    assert_int_equal((uint64_t)st.st_size, at);     /* exact size after a sync */
    /* back into the first, already written piece; then on */
    assert_int_equal(dsq_outfile_truncate(&f, 1000, &d), DSQ_OK);
    at = 1000;
    assert_int_equal(dsq_outfile_write(&f, src + at, DSQ_OUT_STAGE_BYTES, &d), DSQ_OK);
    at += DSQ_OUT_STAGE_BYTES;
    dsq_outfile_detach(&f);
    assert_int_equal(stat(tmp, &st), 0);
    assert_int_equal((uint64_t)st.st_size, at);
    assert_int_equal(dsq_outfile_open(&f, path, DSQ_OUT_DIRECT_IO | DSQ_OUT_REOPEN | DSQ_OUT_SYNC_BEHIND, &d), DSQ_OK);
    assert_int_equal(f.written, at);
    assert_int_equal(dsq_outfile_write(&f, src + at, total - at - 100, &d), DSQ_OK);
    at = total - 100;
    /* not an append: the rest of the file is buffered */
    assert_int_equal(dsq_outfile_pwrite(&f, "ABCD", 4, 10, &d), DSQ_OK);
    assert_int_equal(dsq_outfile_write(&f, src + at, 100, &d), DSQ_OK);
    assert_int_equal(dsq_outfile_commit(&f, &d), DSQ_OK);
    memcpy(want, src, total);
    memcpy(want + 10, "ABCD", 4);
    char *got;
    size_t n;
    assert_int_equal(dsq_read_file(path, total + 1, &got, &n, &d), DSQ_OK);
    assert_int_equal(n, total);
    assert_memory_equal(got, want, total);
    free(got);
    free(src);
    free(want);
    unlink(path);
    rmdir(dir);
    free(tmp);
    free(path);
    free(dir);
}

/* Poll a syncer until [0, upto) is durable or a flush failed. The bound
 * only stops a hung test; it is not a speed check. */
static int syncer_wait(dsq_syncer *s, uint64_t upto)
{
    int r = 0;
    for (int i = 0; i < 60000 && (r = dsq_syncer_done(s, upto)) == 0; i++) {
        struct timespec ts = { 0, 1000000 };
        nanosleep(&ts, NULL);
    }
    return r;
}

static void test_syncer(void **state)
{
    (void)state;
    char *dir = dsq_test_tmpdir();
    char *path = dsq_path_join(dir, "s.bin");
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "0123456789", 10), 10);
    dsq_syncer *s = dsq_syncer_start(fd);
    assert_non_null(s);
    assert_int_equal(dsq_syncer_done(s, 1), 0);      /* nothing asked yet */
    dsq_syncer_ask(s, 10);
    assert_int_equal(dsq_syncer_asked(s), 10);
    assert_int_equal(syncer_wait(s, 10), 1);
    assert_int_equal(dsq_syncer_done(s, 11), 0);     /* never past what was asked */
    dsq_syncer_ask(s, 5);                            /* asks only move forward */
    assert_int_equal(dsq_syncer_asked(s), 10);
    /* cut back: what lay past the cut is not durable any more */
    assert_int_equal(ftruncate(fd, 4), 0);
    dsq_syncer_truncated(s, 4);
    assert_int_equal(dsq_syncer_asked(s), 4);
    assert_int_equal(dsq_syncer_done(s, 4), 1);
    assert_int_equal(dsq_syncer_done(s, 5), 0);
    assert_int_equal(dsq_syncer_stop(s), 0);
    assert_int_equal(dsq_syncer_stop(NULL), 0);
    close(fd);

    /* A flush that fails (a pipe cannot be synced: EINVAL) is reported by
     * every later done and by stop. */
    int pp[2];
    assert_int_equal(pipe(pp), 0);
    s = dsq_syncer_start(pp[1]);
    assert_non_null(s);
    dsq_syncer_ask(s, 1);
    assert_int_equal(syncer_wait(s, 1), -EINVAL);
    assert_int_equal(dsq_syncer_done(s, 0), -EINVAL);
    assert_int_equal(dsq_syncer_stop(s), -EINVAL);
    close(pp[0]);
    close(pp[1]);

    /* An outfile's two-step sync: every byte appended is durable once
     * synced says so, and the file commits whole. */
    char *out = dsq_path_join(dir, "o.bin");
    dsq_diag d;
    dsq_diag_clear(&d);
    dsq_outfile f;
    assert_int_equal(dsq_outfile_open(&f, out, DSQ_OUT_DIRECT_IO | DSQ_OUT_SYNC_BEHIND, &d), DSQ_OK);
    assert_non_null(f.bg);
    assert_int_equal(dsq_outfile_write(&f, "hello", 5, &d), DSQ_OK);
    uint64_t upto = 0;
    assert_int_equal(dsq_outfile_sync_begin(&f, &upto, &d), DSQ_OK);
    assert_int_equal(upto, 5);
    int r = 0;
    for (int i = 0; i < 60000 && (r = dsq_outfile_synced(&f, upto, &d)) == 0; i++) {
        struct timespec ts = { 0, 1000000 };
        nanosleep(&ts, NULL);
    }
    assert_int_equal(r, 1);
    struct stat st;
    char *tmp = dsq_outfile_tmp_name(out);
    assert_int_equal(stat(tmp, &st), 0);
    assert_int_equal(st.st_size, 5);                 /* the staged bytes are on the file */
    assert_int_equal(dsq_outfile_write(&f, " world", 6, &d), DSQ_OK);
    assert_int_equal(dsq_outfile_commit(&f, &d), DSQ_OK);
    assert_null(f.bg);
    char *got;
    size_t n;
    assert_int_equal(dsq_read_file(out, 100, &got, &n, &d), DSQ_OK);
    assert_int_equal(n, 11);
    assert_memory_equal(got, "hello world", 11);
    free(got);
    /* without the flag the first step syncs in place */
    assert_int_equal(dsq_outfile_open(&f, out, DSQ_OUT_OVERWRITE, &d), DSQ_OK);
    assert_null(f.bg);
    assert_int_equal(dsq_outfile_write(&f, "abc", 3, &d), DSQ_OK);
    assert_int_equal(dsq_outfile_sync_begin(&f, &upto, &d), DSQ_OK);
    assert_int_equal(dsq_outfile_synced(&f, upto, &d), 1);
    dsq_outfile_abort(&f);
    free(tmp);
    free(out);
    free(path);
    dsq_test_rmtree(dir);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_strerror_covers_all),
        cmocka_unit_test(test_diag_first_cause_wins),
        cmocka_unit_test(test_bf16_f16_roundtrip),
        cmocka_unit_test(test_checked_mul),
        cmocka_unit_test(test_sha256_known),
        cmocka_unit_test(test_crc32c),
        cmocka_unit_test(test_pool_runs_every_item),
        cmocka_unit_test(test_pool_short_jobs_each_item_once),
        cmocka_unit_test(test_pool_spin_setting),
        cmocka_unit_test(test_atomic_outfile),
        cmocka_unit_test(test_dio_ring),
        cmocka_unit_test(test_outfile_direct_io),
        cmocka_unit_test(test_syncer),
        cmocka_unit_test(test_enospc_is_clean),
    };
    return cmocka_run_group_tests_name("common", tests, NULL, NULL);
}
