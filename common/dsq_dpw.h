/* dsq_dpw.h - positional writes that bypass the page cache (O_DIRECT), for
 * files written at scattered offsets (the export shards: safetensors
 * regions filled tensor by tensor and row piece by row piece).
 *
 * Why: a buffered write copies every byte into a freshly allocated page-
 * cache page; for an export that copy (copy_folio_from_iter_atomic) can be
 * about half of the CPU time (`perf record` shows it).
 * dsq_outfile's O_DIRECT stage (dsq_file.h) covers append-only files.
 *
 * How: each write goes out in DSQ_OUT_DIO_ALIGN blocks from an aligned
 * stage. A block the write covers only in part is read back first (O_DIRECT,
 * zeros past the end of the file) and merged, so any order of writes gives
 * the bytes a buffered pwrite would. The file may end up longer than its
 * last byte (rounded up to the block): the caller truncates it to its size
 * before the fsync, as it would anyway. One thread per writer.
 * Where O_DIRECT is refused (tmpfs, some network file systems; at open or
 * at the first write), writes go through the caller's buffered descriptor. */
#ifndef DSQ_DPW_H
#define DSQ_DPW_H

#include "dsq_error.h"

#include <stddef.h>
#include <stdint.h>

typedef struct dsq_dpw {
    int fd;            /* the caller's buffered descriptor (not owned) */
    int dio_fd;        /* O_DIRECT descriptor of the same file, or -1 */
    uint8_t *stage;    /* DSQ_DPW_STAGE bytes, aligned */
    char *path;        /* for messages (a copy) */
    struct dsq_syncer *bg;  /* background fdatasync (dsq_syncer.h), or NULL */
    uint64_t out;      /* bytes written so far, any offsets: paces bg */
} dsq_dpw;

#define DSQ_DPW_STAGE (8u << 20)

/* Start direct writes to path, already open as fd (O_WRONLY or O_RDWR).
 * Best effort: without O_DIRECT or the stage's memory, w writes through fd. */
void dsq_dpw_open(dsq_dpw *w, int fd, const char *path);
/* Write buf[0, n) at byte off. */
int dsq_dpw_pwrite(dsq_dpw *w, const void *buf, size_t n, uint64_t off, dsq_diag *d);
/* Make everything written durable: the background syncer's flushes
 * (every DSQ_SYNCER_BYTES written, so this finds little left) are stopped,
 * then fsync(fd). A failed flush of the syncer's is reported here. */
int dsq_dpw_sync(dsq_dpw *w, dsq_diag *d);
/* Nonzero while writes bypass the page cache. */
int dsq_dpw_direct(const dsq_dpw *w);
/* Release the O_DIRECT descriptor, the stage and the path (fd stays
 * open); safe on a zeroed or closed writer. */
void dsq_dpw_close(dsq_dpw *w);

#endif
