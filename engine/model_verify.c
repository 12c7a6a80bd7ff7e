/* model_verify.c - background SHA-256 check of raw-stored payloads and of
 * export directories (see model_verify.h). */
#include "model_verify.h"
#include "container.h"
#include "dsq_file.h"
#include "dsq_sha256.h"
#include "sha256sums.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Hash in slices so a cancel is seen within about a second even on a
 * multi-gigabyte tensor. */
#define SLICE (64u << 20)

struct dsq_model_verify {
    pthread_t th;
    const dsq_ctr_set *s;
    char *dir;                 /* an export directory instead of s */
    const volatile int *cancel;
    int rc;
    dsq_diag diag;
};

static int check_one(dsq_model_verify *j, dsq_ctr *r, const char *path, const dsq_ctr_tensor_info *t)
{
    const uint8_t *p = dsq_ctr_raw_ptr(r, t);
    if (!p || t->raw_size == 0) return DSQ_OK;   /* compressed: dsq_ctr_read checks it */
    dsq_sha256 h;
    if (dsq_sha256_init(&h) < 0) return dsq_fail(&j->diag, DSQ_ERR_NOMEM, path, t->name, -1, "out of memory");
    for (uint64_t o = 0; o < t->raw_size; o += SLICE) {
        if (j->cancel && *j->cancel) {
            dsq_sha256_release(&h);
            return dsq_fail(&j->diag, DSQ_ERR_INTERRUPTED, path, t->name, -1, "interrupted");
        }
        uint64_t n = t->raw_size - o < SLICE ? t->raw_size - o : SLICE;
        dsq_sha256_update(&h, p + o, (size_t)n);
    }
    uint8_t got[DSQ_SHA256_LEN];
    dsq_sha256_final(&h, got);
    if (memcmp(got, t->sha256, DSQ_SHA256_LEN) != 0)
        return dsq_fail(&j->diag, DSQ_ERR_CHECKSUM, path, t->name, (int64_t)t->offset,
                        "SHA-256 of the stored payload does not match the index: the file is "
                        "damaged (use --no-verify only if you accept wrong results)");
    return DSQ_OK;
}

static int check_dir(dsq_model_verify *j)
{
    int rc = dsq_sums_verify(j->dir, NULL, &j->diag);
    if (rc == DSQ_ERR_CHECKSUM) {
        char file[DSQ_DIAG_PATH];
        snprintf(file, sizeof file, "%s", j->diag.path);
        dsq_diag_clear(&j->diag);
        rc = dsq_fail(&j->diag, rc, file, NULL, -1,
                      "SHA-256 does not match " DSQ_SUMS_NAME ": the file is damaged (use --no-verify only if "
                      "you accept wrong results)");
    }
    return rc;
}

static void *run(void *arg)
{
    dsq_model_verify *j = arg;
    if (j->dir) {
        j->rc = check_dir(j);
        return NULL;
    }
    int rc = DSQ_OK;
    for (size_t i = 0; rc == DSQ_OK && i < dsq_ctr_set_shards(j->s); i++) {
        dsq_ctr *r = dsq_ctr_set_shard(j->s, i);
        const char *path = dsq_ctr_set_shard_path(j->s, i);
        for (size_t k = 0; rc == DSQ_OK && k < dsq_ctr_count(r); k++)
            rc = check_one(j, r, path, dsq_ctr_get(r, k));
    }
    j->rc = rc;
    return NULL;
}

static int start(dsq_model_verify *j, dsq_model_verify **out, dsq_diag *d)
{
    dsq_diag_clear(&j->diag);
    if (pthread_create(&j->th, NULL, run, j) != 0) {
        /* No thread: check on the caller's thread rather than not at all. */
        run(j);
        int rc = j->rc;
        if (rc < 0 && d) *d = j->diag;
        free(j->dir);
        free(j);
        return rc;
    }
    *out = j;
    return DSQ_OK;
}

int dsq_model_verify_start(dsq_model_verify **out, const dsq_ctr_set *s,
                           const volatile int *cancel, dsq_diag *d)
{
    *out = NULL;
    dsq_model_verify *j = calloc(1, sizeof *j);
    if (!j) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    j->s = s;
    j->cancel = cancel;
    return start(j, out, d);
}

int dsq_model_verify_dir_start(dsq_model_verify **out, const char *dir, dsq_diag *d)
{
    *out = NULL;
    char *m = dsq_path_join(dir, DSQ_SUMS_NAME);
    if (!m) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    int has = dsq_path_exists(m);
    free(m);
    if (!has) return DSQ_OK;
    dsq_model_verify *j = calloc(1, sizeof *j);
    if (!j || !(j->dir = strdup(dir))) {
        free(j);
        return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    }
    return start(j, out, d);
}

int dsq_model_verify_join(dsq_model_verify *j, dsq_diag *d)
{
    if (!j) return DSQ_OK;
    pthread_join(j->th, NULL);
    int rc = j->rc;
    if (rc < 0 && d) *d = j->diag;
    free(j->dir);
    free(j);
    return rc;
}
