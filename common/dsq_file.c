/* dsq_file.c - atomic output files, mappings, small-file helpers. */
#include "dsq_file.h"
#include "dsq_syncer.h"
#include "dsq_mem.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- temporary-file registry (read from signal handlers) ---- */

#define MAX_TMP 64
static char g_tmp[MAX_TMP][PATH_MAX];
static volatile sig_atomic_t g_tmp_used[MAX_TMP]; /* 0 free, 1 remove, 2 keep */
static pthread_mutex_t g_tmp_mu = PTHREAD_MUTEX_INITIALIZER;

static int registry_add(const char *path, int keep)
{
    int slot = -1;
    if (strlen(path) >= PATH_MAX) return -1;
    pthread_mutex_lock(&g_tmp_mu);
    for (int i = 0; i < MAX_TMP; i++) {
        if (!g_tmp_used[i]) {
            strcpy(g_tmp[i], path);
            g_tmp_used[i] = keep ? 2 : 1;
            slot = i;
            break;
        }
    }
    pthread_mutex_unlock(&g_tmp_mu);
    return slot;
}

static void registry_del(int slot)
{
    if (slot < 0) return;
    pthread_mutex_lock(&g_tmp_mu);
    g_tmp_used[slot] = 0;
    pthread_mutex_unlock(&g_tmp_mu);
}

void dsq_tmpfiles_unlink_all(void)
{
    for (int i = 0; i < MAX_TMP; i++)
        if (g_tmp_used[i] == 1) unlink(g_tmp[i]);
}

/* ---- paths ---- */

char *dsq_path_join(const char *dir, const char *name)
{
    size_t a = strlen(dir), b = strlen(name);
    char *p = malloc(a + b + 2);
    if (!p) return NULL;
    memcpy(p, dir, a);
    size_t o = a;
    if (a && dir[a - 1] != '/') p[o++] = '/';
    memcpy(p + o, name, b + 1);
    return p;
}

int dsq_path_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

int dsq_path_is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int dsq_path_is_special(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode));
}

int dsq_path_same_file(const char *a, const char *b)
{
    struct stat sa, sb;
    if (!a || !b || stat(a, &sa) != 0 || stat(b, &sb) != 0) return 0;
    return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

static char *dir_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash) return strdup(".");
    if (slash == path) return strdup("/");
    return strndup(path, (size_t)(slash - path));
}

char *dsq_outfile_tmp_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    size_t dlen = slash ? (size_t)(slash - path + 1) : 0;
    size_t n = dlen + 1 + strlen(base) + sizeof ".partial";
    char *t = malloc(n);
    if (!t) return NULL;
    snprintf(t, n, "%.*s.%s.partial", (int)dlen, path, base);
    return t;
}

/* ---- outfile ---- */

/* A character device or FIFO: open it as it is. O_TRUNC and O_CREAT have
 * no meaning there, and a rename would replace the device node itself. */
static int open_direct(dsq_outfile *f, const char *path, dsq_diag *d)
{
    f->direct = 1;
    f->path = strdup(path);
    f->tmp_path = strdup(path);
    if (!f->path || !f->tmp_path) {
        free(f->path); free(f->tmp_path);
        f->path = f->tmp_path = NULL;
        return dsq_fail(d, DSQ_ERR_NOMEM, path, NULL, -1, "out of memory");
    }
    f->fd = open(path, O_WRONLY | O_CLOEXEC | O_NOCTTY);
    if (f->fd < 0) {
        int rc = dsq_fail_errno(d, errno, path, "cannot open for writing");
        free(f->path); free(f->tmp_path);
        f->path = f->tmp_path = NULL;
        return rc;
    }
    return DSQ_OK;
}

/* ---- direct I/O staging (DSQ_OUT_DIRECT_IO, see dsq_file.h) ---- */

/* Write all of buf at off through fd; -errno on failure. */
static int pwrite_all(int fd, const uint8_t *p, size_t n, uint64_t off)
{
    while (n) {
        ssize_t w = pwrite(fd, p, n, (off_t)off);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return -errno;
        if (w == 0) return -ENOSPC;
        p += w;
        n -= (size_t)w;
        off += (uint64_t)w;
    }
    return 0;
}

static void dio_free(dsq_outfile *f)
{
    if (!f->stage) return;
    (void)dsq_dio_stop(f->ring);   /* writes what is queued; callers that care drained */
    close(f->dio_fd);
    f->ring = NULL;
    f->stage = NULL;
    f->dio_fd = -1;
}

/* Wait for the ring's writes; a failure is the file's write error. */
static int dio_drain(dsq_outfile *f, dsq_diag *d)
{
    int e = dsq_dio_drain(f->ring);
    if (e < 0)
        return dsq_fail_errno(d, -e, f->tmp_path, "write failed after byte %llu",
                              (unsigned long long)dsq_dio_done(f->ring));
    return DSQ_OK;
}

/* Fill the stage with the file's bytes [stage_off, written) after an open
 * of an existing temporary or a truncation (the ring drained). */
static int dio_load(dsq_outfile *f, dsq_diag *d)
{
    f->stage_off = f->written / DSQ_OUT_DIO_ALIGN * DSQ_OUT_DIO_ALIGN;
    size_t n = (size_t)(f->written - f->stage_off);
    if (!n) return DSQ_OK;
    int rfd = open(f->tmp_path, O_RDONLY | O_CLOEXEC);
    if (rfd < 0) return dsq_fail_errno(d, errno, f->tmp_path, "cannot reopen to read its last block");
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(rfd, f->stage + got, n - got, (off_t)(f->stage_off + got));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            int e = r < 0 ? errno : EIO;
            close(rfd);
            return dsq_fail_errno(d, e, f->tmp_path, "cannot read back its last block");
        }
        got += (size_t)r;
    }
    close(rfd);
    return DSQ_OK;
}

/* Best effort: no O_DIRECT (or no memory or thread for the ring) leaves f
 * buffered. */
static void dio_start(dsq_outfile *f)
{
    if (f->direct) return;
    int fd = open(f->tmp_path, O_WRONLY | O_DIRECT | O_CLOEXEC);
    if (fd < 0) return;
    f->ring = dsq_dio_start(fd, f->fd);
    if (!f->ring) {
        close(fd);
        return;
    }
    f->stage = dsq_dio_stage(f->ring);
    f->dio_fd = fd;
    dsq_diag scratch;
    dsq_diag_clear(&scratch);
    if (dio_load(f, &scratch) < 0) dio_free(f);
}

/* Everything appended so far onto the file, which ends exactly at
 * 'written': the ring's writes, then the partial block zero-padded in
 * place, then the size cut back. The stage keeps that block, to be written
 * again whole later. A file system that takes O_DIRECT at open but not at
 * write (EINVAL) gets the bytes through the buffered descriptor, and f
 * stays buffered from then on. */
static int dio_flush(dsq_outfile *f, dsq_diag *d)
{
    DSQ_TRY(dio_drain(f, d));
    int left = dsq_dio_refused(f->ring);
    size_t n = (size_t)(f->written - f->stage_off);
    if (n) {
        size_t padded = (n + DSQ_OUT_DIO_ALIGN - 1) / DSQ_OUT_DIO_ALIGN * DSQ_OUT_DIO_ALIGN;
        memset(f->stage + n, 0, padded - n);
        int e = left ? -EINVAL : pwrite_all(f->dio_fd, f->stage, padded, f->stage_off);
        if (e == -EINVAL) {
            left = 1;
            e = pwrite_all(f->fd, f->stage, padded, f->stage_off);
        }
        if (e < 0)
            return dsq_fail_errno(d, -e, f->tmp_path, "write failed at byte %llu",
                                  (unsigned long long)f->stage_off);
        if (ftruncate(f->fd, (off_t)f->written) != 0)
            return dsq_fail_errno(d, errno, f->tmp_path, "cannot truncate to %llu bytes",
                                  (unsigned long long)f->written);
    }
    if (left) dio_free(f);
    return DSQ_OK;
}

/* Ask the background syncer for a flush every DSQ_SYNCER_BYTES of bytes
 * on the file (the stages' bytes are not until the ring wrote them). */
static void sync_behind(dsq_outfile *f)
{
    if (!f->bg) return;
    uint64_t on_file = f->stage ? dsq_dio_done(f->ring) : f->written;
    if (on_file >= dsq_syncer_asked(f->bg) + DSQ_SYNCER_BYTES) dsq_syncer_ask(f->bg, on_file);
}

static int dio_append(dsq_outfile *f, const uint8_t *p, size_t n, dsq_diag *d)
{
    while (n && f->stage) {
        size_t have = (size_t)(f->written - f->stage_off);
        size_t k = DSQ_OUT_STAGE_BYTES - have < n ? DSQ_OUT_STAGE_BYTES - have : n;
        memcpy(f->stage + have, p, k);
        f->written += k;
        p += k;
        n -= k;
        if (have + k == DSQ_OUT_STAGE_BYTES) {
            int e = dsq_dio_next(f->ring, DSQ_OUT_STAGE_BYTES, f->stage_off);
            if (e < 0)
                return dsq_fail_errno(d, -e, f->tmp_path, "write failed after byte %llu",
                                      (unsigned long long)dsq_dio_done(f->ring));
            f->stage_off += DSQ_OUT_STAGE_BYTES;
            f->stage = dsq_dio_stage(f->ring);
            if (dsq_dio_refused(f->ring)) {   /* the new stage is empty */
                DSQ_TRY(dio_drain(f, d));
                dio_free(f);
            }
            sync_behind(f);
        }
    }
    if (n) {   /* left the direct path mid-way: the rest buffered */
        DSQ_TRY(dsq_outfile_pwrite(f, p, n, f->written, d));
        f->written += n;
    }
    return DSQ_OK;
}

int dsq_outfile_open(dsq_outfile *f, const char *path, unsigned flags, dsq_diag *d)
{
    memset(f, 0, sizeof *f);
    f->fd = -1;
    f->slot = -1;
    f->dio_fd = -1;
    struct stat st;
    char *resolved = NULL;
    if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode)) {
        /* Replace the file the link points at, never the link itself. */
        resolved = realpath(path, NULL);
        if (!resolved)
            return dsq_fail_errno(d, errno, path, "output is a symbolic link that cannot be resolved");
        path = resolved;
    }
    if (stat(path, &st) == 0) {
        if (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode)) {
            int rc = open_direct(f, path, d);
            free(resolved);
            return rc;
        }
        if (!S_ISREG(st.st_mode)) {
            int rc = dsq_fail(d, DSQ_ERR_EXISTS, path, NULL, -1,
                              "output exists and is not a regular file; not replacing it");
            free(resolved);
            return rc;
        }
        if (!(flags & DSQ_OUT_OVERWRITE)) {
            int rc = dsq_fail(d, DSQ_ERR_EXISTS, path, NULL, -1, "output exists (use -f to overwrite)");
            free(resolved);
            return rc;
        }
    }
    f->path = strdup(path);
    f->tmp_path = dsq_outfile_tmp_name(path);
    free(resolved);
    if (!f->path || !f->tmp_path) {
        const char *p = f->path ? f->path : "output";
        int rc = dsq_fail(d, DSQ_ERR_NOMEM, p, NULL, -1, "out of memory");
        dsq_outfile_abort(f);
        return rc;
    }
    /* Register before creating, so a signal between the two still cleans up. */
    f->slot = registry_add(f->tmp_path, (flags & DSQ_OUT_KEEP_TMP) != 0);
    int oflags = O_WRONLY | O_CREAT | O_CLOEXEC | ((flags & DSQ_OUT_REOPEN) ? 0 : O_TRUNC);
    f->fd = open(f->tmp_path, oflags, 0644);
    if (f->fd < 0) {
        int e = errno;
        int rc = dsq_fail_errno(d, e, f->tmp_path, "cannot create temporary file");
        registry_del(f->slot);
        f->slot = -1;
        free(f->path); free(f->tmp_path);
        f->path = f->tmp_path = NULL;
        return rc;
    }
    if (flags & DSQ_OUT_REOPEN) {
        off_t end = lseek(f->fd, 0, SEEK_END);
        f->written = end > 0 ? (uint64_t)end : 0;
    }
    if (flags & DSQ_OUT_DIRECT_IO) dio_start(f);
    if (flags & DSQ_OUT_SYNC_BEHIND) f->bg = dsq_syncer_start(f->fd);   /* NULL: in place */
    return DSQ_OK;
}

int dsq_outfile_pwrite(dsq_outfile *f, const void *buf, size_t n, uint64_t off, dsq_diag *d)
{
    if (f->stage) {   /* not an append: the staged bytes first, buffered from now on */
        DSQ_TRY(dio_flush(f, d));
        dio_free(f);
    }
    const uint8_t *p = buf;
    while (n) {
        /* A FIFO cannot seek: sequential writes go through write(2). */
        ssize_t w = f->direct && off == f->written ? write(f->fd, p, n)
                                                   : pwrite(f->fd, p, n, (off_t)off);
        if (w < 0) {
            if (errno == EINTR) continue;
            return dsq_fail_errno(d, errno, f->tmp_path, "write failed at byte %llu",
                                  (unsigned long long)off);
        }
        if (w == 0) return dsq_fail_errno(d, ENOSPC, f->tmp_path, "write made no progress");
        p += w;
        n -= (size_t)w;
        off += (uint64_t)w;
    }
    return DSQ_OK;
}

/* Keep dirty pages flowing (see DSQ_OUT_FLUSH_BYTES): start writeback of
 * the newest full window, then wait for the one before it, which has had a
 * window's worth of appends to finish. Errors are left to the commit's
 * fsync, which reports them; sync_file_range only schedules. */
static void flush_behind(dsq_outfile *f)
{
    if (f->direct || f->fd < 0) return;
    if (f->written < f->flushed) f->flushed = f->waited = 0;   /* truncated: start over */
    if (f->written - f->flushed < DSQ_OUT_FLUSH_BYTES) return;
    uint64_t end = f->written / DSQ_OUT_FLUSH_BYTES * DSQ_OUT_FLUSH_BYTES;
    (void)sync_file_range(f->fd, (off_t)f->flushed, (off_t)(end - f->flushed), SYNC_FILE_RANGE_WRITE);
    if (f->flushed > f->waited)
        (void)sync_file_range(f->fd, (off_t)f->waited, (off_t)(f->flushed - f->waited),
                              SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE |
                              SYNC_FILE_RANGE_WAIT_AFTER);
    f->waited = f->flushed;
    f->flushed = end;
}

int dsq_outfile_write(dsq_outfile *f, const void *buf, size_t n, dsq_diag *d)
{
    if (f->stage) return dio_append(f, buf, n, d);
    DSQ_TRY(dsq_outfile_pwrite(f, buf, n, f->written, d));
    f->written += n;
    flush_behind(f);
    sync_behind(f);
    return DSQ_OK;
}

int dsq_outfile_pad(dsq_outfile *f, size_t align, dsq_diag *d)
{
    static const uint8_t zeros[4096];
    uint64_t target = (f->written + align - 1) / align * align;
    while (f->written < target) {
        size_t k = (size_t)(target - f->written);
        if (k > sizeof zeros) k = sizeof zeros;
        DSQ_TRY(dsq_outfile_write(f, zeros, k, d));
    }
    return DSQ_OK;
}

int dsq_outfile_truncate(dsq_outfile *f, uint64_t len, dsq_diag *d)
{
    if (len > f->written)
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, f->tmp_path, NULL, -1, "truncate beyond the end");
    /* a write still queued would land past the cut */
    if (f->stage) DSQ_TRY(dio_drain(f, d));
    if (ftruncate(f->fd, (off_t)len) != 0)
        return dsq_fail_errno(d, errno, f->tmp_path, "cannot truncate to %llu bytes", (unsigned long long)len);
    f->written = len;
    dsq_syncer_truncated(f->bg, len);
    if (f->stage && len < f->stage_off) {
        /* the cut block is on disk: stage it again */
        int rc = dio_load(f, d);
        if (rc < 0) dio_free(f);
        return rc;
    }
    return DSQ_OK;
}

int dsq_outfile_sync(dsq_outfile *f, dsq_diag *d)
{
    if (f->direct) return DSQ_OK; /* devices and pipes have nothing to sync */
    if (f->stage) DSQ_TRY(dio_flush(f, d));
    if (fsync(f->fd) != 0) return dsq_fail_errno(d, errno, f->tmp_path, "fsync failed");
    /* a background flush that failed took the error off this descriptor */
    int r = dsq_syncer_done(f->bg, 0);
    if (r < 0) return dsq_fail_errno(d, -r, f->tmp_path, "fdatasync failed");
    return DSQ_OK;
}

int dsq_outfile_sync_begin(dsq_outfile *f, uint64_t *upto, dsq_diag *d)
{
    *upto = f->written;
    if (!f->bg) return dsq_outfile_sync(f, d);
    if (f->stage) DSQ_TRY(dio_flush(f, d));
    dsq_syncer_ask(f->bg, f->written);
    return DSQ_OK;
}

int dsq_outfile_synced(dsq_outfile *f, uint64_t upto, dsq_diag *d)
{
    if (!f->bg) return 1;
    int r = dsq_syncer_done(f->bg, upto);
    if (r < 0) return dsq_fail_errno(d, -r, f->tmp_path, "fdatasync failed");
    return r;
}

static void release(dsq_outfile *f, int remove_tmp)
{
    (void)dsq_syncer_stop(f->bg);   /* before its descriptor closes */
    f->bg = NULL;
    dio_free(f);
    if (f->fd >= 0) close(f->fd);
    f->fd = -1;
    if (remove_tmp && f->tmp_path && !f->direct) unlink(f->tmp_path);
    registry_del(f->slot);
    f->slot = -1;
    free(f->path);
    free(f->tmp_path);
    f->path = f->tmp_path = NULL;
    f->direct = 0;
}

int dsq_outfile_commit(dsq_outfile *f, dsq_diag *d)
{
    int rc = DSQ_OK;
    if (f->direct) {
        /* No temporary and no rename; a close error still loses data. */
        if (close(f->fd) != 0) rc = dsq_fail_errno(d, errno, f->path, "close failed");
        f->fd = -1;
        release(f, 0);
        return rc;
    }
    if (f->stage && (rc = dio_flush(f, d)) < 0) {
        release(f, 1);
        return rc;
    }
    /* The syncer first: a flush of its that failed took the error off the
     * descriptor, and the fsync below would then succeed. */
    int e = dsq_syncer_stop(f->bg);
    f->bg = NULL;
    if (e < 0 || fsync(f->fd) != 0) {
        rc = dsq_fail_errno(d, e < 0 ? -e : errno, f->tmp_path, "fsync failed");
        release(f, 1);
        return rc;
    }
    if (close(f->fd) != 0) {
        f->fd = -1;
        rc = dsq_fail_errno(d, errno, f->tmp_path, "close failed");
        release(f, 1);
        return rc;
    }
    f->fd = -1;
    if (rename(f->tmp_path, f->path) != 0) {
        rc = dsq_fail_errno(d, errno, f->path, "cannot rename '%s' into place", f->tmp_path);
        release(f, 1);
        return rc;
    }
    /* The rename is durable only once the directory entry is on disk. */
    char *dir = dir_of(f->path);
    if (dir) {
        int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) {
            if (fsync(dfd) != 0 && errno != EINVAL)
                rc = dsq_fail_errno(d, errno, dir, "fsync of directory failed");
            close(dfd);
        }
        free(dir);
    }
    release(f, 0);
    return rc;
}

void dsq_outfile_abort(dsq_outfile *f)
{
    if (!f) return;
    if (f->fd < 0 && !f->path && !f->tmp_path) return;
    release(f, 1);
}

void dsq_outfile_detach(dsq_outfile *f)
{
    if (!f) return;
    if (f->stage) {   /* best effort, like the page cache's writeback */
        dsq_diag scratch;
        dsq_diag_clear(&scratch);
        (void)dio_flush(f, &scratch);
    }
    release(f, 0);
}

int dsq_write_file_atomic(const char *path, const void *data, size_t n, unsigned flags, dsq_diag *d)
{
    dsq_outfile f;
    DSQ_TRY(dsq_outfile_open(&f, path, flags, d));
    int rc = dsq_outfile_write(&f, data, n, d);
    if (rc < 0) { dsq_outfile_abort(&f); return rc; }
    return dsq_outfile_commit(&f, d);
}

/* ---- reading ---- */

/* A read-only shared mapping of fd, started on a 2 MiB boundary and
 * advised for huge pages (dsq_aligned_alloc says why). With both, page cache
 * that a fault brings in is read as 2 MiB folios and mapped by one entry
 * each, so reading it costs one TLB entry and one fault per 2 MiB instead
 * of per 4 KiB: a steady rate where 4 KiB pages vary by more than 2x, and a
 * much faster first pass. Pages already cached in small folios stay small. Falls back to a plain mapping. */
static void *map_aligned(int fd, size_t size)
{
    const size_t huge = DSQ_HUGE_PAGE;
    if (size >= huge && size <= SIZE_MAX - huge) {
        uint8_t *res = mmap(NULL, size + huge, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (res != MAP_FAILED) {
            uint8_t *al = (uint8_t *)(((uintptr_t)res + huge - 1) & ~(uintptr_t)(huge - 1));
            void *p = mmap(al, size, PROT_READ, MAP_SHARED | MAP_FIXED, fd, 0);
            if (p != MAP_FAILED) {
                /* give back the reservation around the file mapping */
                const size_t pg = (size_t)sysconf(_SC_PAGESIZE), used = (size + pg - 1) / pg * pg;
                const size_t tail = (size_t)(res + size + huge - (al + used));
                if (al > res) munmap(res, (size_t)(al - res));
                if (tail > 0) munmap(al + used, tail);
#ifdef MADV_HUGEPAGE
                (void)madvise(p, size, MADV_HUGEPAGE);
#endif
                return p;
            }
            munmap(res, size + huge);
        }
    }
    return mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
}

int dsq_map_open(dsq_map *m, const char *path, dsq_diag *d)
{
    memset(m, 0, sizeof *m);
    m->fd = dsq_open_regular(path, d);
    if (m->fd < 0) {
        int rc = m->fd;
        m->fd = -1;
        return rc;
    }
    struct stat st;
    if (fstat(m->fd, &st) != 0) {
        int rc = dsq_fail_errno(d, errno, path, "cannot stat");
        close(m->fd);
        m->fd = -1;
        return rc;
    }
    m->size = (uint64_t)st.st_size;
    if (m->size == 0) return DSQ_OK;
    void *p = map_aligned(m->fd, (size_t)m->size);
    if (p == MAP_FAILED) {
        int rc = dsq_fail_errno(d, errno, path, "mmap failed");
        close(m->fd);
        m->fd = -1;
        return rc;
    }
    m->data = p;
    return DSQ_OK;
}

void dsq_map_close(dsq_map *m)
{
    if (!m) return;
    if (m->data) munmap((void *)m->data, (size_t)m->size);
    if (m->fd >= 0) close(m->fd);
    m->data = NULL;
    m->size = 0;
    m->fd = -1;
}

int dsq_open_regular(const char *path, dsq_diag *d)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) return dsq_fail_errno(d, errno, path, "cannot open");
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int rc = dsq_fail_errno(d, errno, path, "cannot stat");
        close(fd);
        return rc;
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return dsq_fail(d, DSQ_ERR_FORMAT, path, NULL, -1, "not a regular file (%s)",
                        S_ISFIFO(st.st_mode) ? "FIFO" : S_ISDIR(st.st_mode) ? "directory"
                        : S_ISSOCK(st.st_mode) ? "socket" : "device");
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        int rc = dsq_fail_errno(d, errno, path, "cannot set blocking reads");
        close(fd);
        return rc;
    }
    return fd;
}

static int read_fp(FILE *fp, const char *path, size_t max, char **out, size_t *len, dsq_diag *d);

int dsq_read_file(const char *path, size_t max, char **out, size_t *len, dsq_diag *d)
{
    *out = NULL;
    if (len) *len = 0;
    int fd = dsq_open_regular(path, d);
    if (fd < 0) return fd;
    FILE *fp = fdopen(fd, "rb");
    if (!fp) {
        int rc = dsq_fail_errno(d, errno, path, "cannot open");
        close(fd);
        return rc;
    }
    return read_fp(fp, path, max, out, len, d);
}

int dsq_read_file_or_pipe(const char *path, size_t max, char **out, size_t *len, dsq_diag *d)
{
    *out = NULL;
    if (len) *len = 0;
    /* The open never waits for a writer (O_NONBLOCK); reads then block as
     * usual. A FIFO that nobody writes to reads as empty (read(2) returns 0
     * on a pipe without writers), so the caller reports an empty file
     * instead of hanging. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) return dsq_fail_errno(d, errno, path, "cannot open");
    struct stat st;
    int rc = DSQ_OK;
    if (fstat(fd, &st) != 0) rc = dsq_fail_errno(d, errno, path, "cannot stat");
    else if (!S_ISREG(st.st_mode) && !S_ISFIFO(st.st_mode))
        rc = dsq_fail(d, DSQ_ERR_FORMAT, path, NULL, -1, "not a regular file or pipe");
    int fl = rc == DSQ_OK ? fcntl(fd, F_GETFL) : -1;
    if (rc == DSQ_OK && (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0))
        rc = dsq_fail_errno(d, errno, path, "cannot set blocking reads");
    FILE *fp = rc == DSQ_OK ? fdopen(fd, "rb") : NULL;
    if (rc == DSQ_OK && !fp) rc = dsq_fail_errno(d, errno, path, "cannot open");
    if (rc != DSQ_OK) {
        close(fd);
        return rc;
    }
    return read_fp(fp, path, max, out, len, d);
}

static int read_fp(FILE *fp, const char *path, size_t max, char **out, size_t *len, dsq_diag *d)
{
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap + 1);
    if (!buf) { fclose(fp); return dsq_fail(d, DSQ_ERR_NOMEM, path, NULL, -1, "out of memory"); }
    for (;;) {
        if (n == cap) {
            if (cap >= max) {
                free(buf); fclose(fp);
                return dsq_fail(d, DSQ_ERR_FORMAT, path, NULL, (int64_t)max,
                                "file larger than the %zu-byte limit", max);
            }
            cap = cap * 2 > max ? max : cap * 2;
            char *nb = realloc(buf, cap + 1);
            if (!nb) { free(buf); fclose(fp); return dsq_fail(d, DSQ_ERR_NOMEM, path, NULL, -1, "out of memory"); }
            buf = nb;
        }
        size_t r = fread(buf + n, 1, cap - n, fp);
        n += r;
        if (r == 0) break;
    }
    int err = ferror(fp);
    fclose(fp);
    if (err) { free(buf); return dsq_fail(d, DSQ_ERR_IO, path, NULL, -1, "read failed"); }
    buf[n] = 0;
    *out = buf;
    if (len) *len = n;
    return DSQ_OK;
}
