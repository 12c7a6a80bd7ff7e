/* dsq_dpw.c - positional O_DIRECT writes (dsq_dpw.h). */
#include "dsq_dpw.h"
#include "dsq_file.h"   /* DSQ_OUT_DIO_ALIGN */
#include "dsq_syncer.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define A ((uint64_t)DSQ_OUT_DIO_ALIGN)

void dsq_dpw_open(dsq_dpw *w, int fd, const char *path)
{
    memset(w, 0, sizeof *w);
    w->fd = fd;
    w->dio_fd = -1;
    w->path = strdup(path);
    /* The disk persists only when flushed: flush behind the writes so the
     * shard's commit does not wait for all of them (dsq_syncer.h). */
    w->bg = dsq_syncer_start(fd);
    int dfd = open(path, O_RDWR | O_DIRECT | O_CLOEXEC);
    if (dfd < 0) return;
    void *st = NULL;
    if (posix_memalign(&st, DSQ_OUT_DIO_ALIGN, DSQ_DPW_STAGE) != 0) {
        close(dfd);
        return;
    }
    w->dio_fd = dfd;
    w->stage = st;
}

/* stage is set exactly while dio_fd is open (a zeroed writer has neither) */
static void dio_release(dsq_dpw *w)
{
    if (w->stage) close(w->dio_fd);
    free(w->stage);
    w->dio_fd = -1;
    w->stage = NULL;
}

void dsq_dpw_close(dsq_dpw *w)
{
    (void)dsq_syncer_stop(w->bg);
    w->bg = NULL;
    dio_release(w);
    free(w->path);
    w->path = NULL;
}

int dsq_dpw_direct(const dsq_dpw *w) { return w->stage != NULL; }

int dsq_dpw_sync(dsq_dpw *w, dsq_diag *d)
{
    /* the syncer first: a failed flush of its took the error off fd */
    int e = dsq_syncer_stop(w->bg);
    w->bg = NULL;
    if (e < 0 || fsync(w->fd) != 0)
        return dsq_fail_errno(d, e < 0 ? -e : errno, w->path, "fsync failed");
    return DSQ_OK;
}

/* errno of a failure, 0 when done */
static int buffered(int fd, const uint8_t *p, size_t n, uint64_t off)
{
    while (n) {
        ssize_t r = pwrite(fd, p, n, (off_t)off);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return r < 0 ? errno : EIO;
        p += r;
        n -= (size_t)r;
        off += (uint64_t)r;
    }
    return 0;
}

/* The file's block at off (aligned) into dst; zeros past its end. */
static int read_block(int fd, uint8_t *dst, uint64_t off)
{
    size_t got = 0;
    while (got < A) {
        ssize_t r = pread(fd, dst + got, A - got, (off_t)(off + got));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return errno;
        if (r == 0) break;
        got += (size_t)r;
    }
    memset(dst + got, 0, A - got);
    return 0;
}

static int direct(dsq_dpw *w, const uint8_t *p, size_t n, uint64_t off)
{
    const uint64_t end = off + n;
    uint64_t c0 = off / A * A;
    while (c0 < end) {
        uint64_t c1 = c0 + DSQ_DPW_STAGE;
        uint64_t lim = (end + A - 1) / A * A;
        if (c1 > lim) c1 = lim;
        /* partly covered blocks at either end keep the file's bytes */
        int e = 0;
        if (c0 < off) e = read_block(w->dio_fd, w->stage, c0);
        if (!e && end < c1 && (c1 - A > c0 || c0 >= off))
            e = read_block(w->dio_fd, w->stage + (c1 - A - c0), c1 - A);
        if (e) return e;
        uint64_t a = off > c0 ? off : c0, b = end < c1 ? end : c1;
        memcpy(w->stage + (a - c0), p + (a - off), (size_t)(b - a));
        size_t len = (size_t)(c1 - c0), done = 0;
        while (done < len) {
            ssize_t r = pwrite(w->dio_fd, w->stage + done, len - done, (off_t)(c0 + done));
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) return r < 0 ? errno : EIO;
            done += (size_t)r;
        }
        c0 = c1;
    }
    return 0;
}

int dsq_dpw_pwrite(dsq_dpw *w, const void *buf, size_t n, uint64_t off, dsq_diag *d)
{
    if (!n) return DSQ_OK;
    int e;
    if (w->stage) {
        e = direct(w, buf, n, off);
        if (e != EINVAL) goto done;
        /* O_DIRECT taken at open, refused at write: buffered from now on.
         * What the direct path wrote is on the file already; the buffered
         * descriptor sees it (the kernel keeps both views coherent). */
        dio_release(w);
    }
    e = buffered(w->fd, buf, n, off);
done:
    if (e) return dsq_fail_errno(d, e, w->path, "write failed at byte %llu", (unsigned long long)off);
    w->out += n;
    if (w->out - dsq_syncer_asked(w->bg) >= DSQ_SYNCER_BYTES) dsq_syncer_ask(w->bg, w->out);
    return DSQ_OK;
}
