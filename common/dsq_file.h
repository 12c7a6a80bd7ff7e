/* dsq_file.h - atomic output files and read-only mappings.
 *
 * Every file dsq writes goes through dsq_outfile: bytes go to a temporary
 * name in the destination directory, and only dsq_outfile_commit() makes
 * them visible under the final name (fsync file, rename, fsync directory).
 * Any error path calls dsq_outfile_abort(), which removes the temporary.
 *
 * Signals: temporaries are kept in a small process-wide registry, and
 * dsq_tmpfiles_unlink_all() (async-signal-safe: only unlink(2)) removes every
 * one not marked "keep". The CLIs call it from their SIGINT/SIGTERM handler;
 * the library itself installs no handlers. Resumable conversions mark their
 * partial file "keep" so an interrupted run can continue. */
#ifndef DSQ_FILE_H
#define DSQ_FILE_H

#include "dsq_dio.h"
#include "dsq_error.h"

#include <stddef.h>
#include <stdint.h>

typedef struct dsq_outfile {
    int fd;
    int slot;            /* registry slot, -1 if none */
    uint64_t written;    /* bytes appended so far (sequential writes) */
    char *path;          /* final name */
    char *tmp_path;      /* temporary name (the final name when direct) */
    int direct;          /* output is a character device or FIFO: written in
                          * place, no temporary, no rename, nothing removed */
    uint64_t flushed;    /* writeback started for [0, flushed) */
    uint64_t waited;     /* writeback finished for [0, waited) */
    /* DSQ_OUT_DIRECT_IO staging; stage == NULL: plain buffered writes */
    uint8_t *stage;      /* DSQ_OUT_STAGE_BYTES, aligned; holds [stage_off, written) */
    uint64_t stage_off;  /* multiple of DSQ_OUT_DIO_ALIGN */
    int dio_fd;          /* the temporary opened O_DIRECT (valid while stage) */
    struct dsq_dio *ring; /* writes the full stages on its thread (dsq_dio.h) */
    struct dsq_syncer *bg; /* DSQ_OUT_SYNC_BEHIND: background fdatasync, or NULL */
} dsq_outfile;

/* Direct I/O (DSQ_OUT_DIRECT_IO, used for .dsq containers): appends are
 * gathered in an aligned staging buffer and written with O_DIRECT in
 * DSQ_OUT_STAGE_BYTES pieces, bypassing the page cache, by a second thread
 * from a ring of DSQ_DIO_STAGES stages (dsq_dio.h), so the appender waits
 * for the disk only when the ring is full. A failed write is reported by
 * a later append, sync, truncate or commit: within DSQ_OUT_DIO_LAG bytes. A buffered write
 * costs the kernel a copy of every byte into freshly allocated page-cache
 * pages plus their writeback: well over ten times the CPU per GB written
 * of O_DIRECT (dd shows it), enough to be a large share of a w8a8-dynamic
 * conversion's CPU. The partial last block is written padded
 * with zeros and the file cut back to 'written' at every sync, commit and
 * detach, so the bytes on disk and the durability points are those of the
 * buffered path. Where O_DIRECT is refused (tmpfs, some network file
 * systems: open or first write says EINVAL) the file silently stays
 * buffered; so does it after any dsq_outfile_pwrite (not an append). */
#define DSQ_OUT_DIO_ALIGN DSQ_DIO_ALIGN
#define DSQ_OUT_STAGE_BYTES DSQ_DIO_STAGE_BYTES
#define DSQ_OUT_DIO_LAG ((uint64_t)DSQ_DIO_STAGES * DSQ_DIO_STAGE_BYTES)

/* Appends start the kernel's writeback every DSQ_OUT_FLUSH_BYTES and wait
 * for the window before that, so dirty pages keep flowing to the disk while
 * the conversion runs: without it the kernel writes nothing until about 10%
 * of RAM is dirty, and the commit's fsync then waits for all of it (0.4 s
 * for a 0.47 GB output here, minutes for a 671B one), and the dirty pages
 * push the source out of the page cache. */
#define DSQ_OUT_FLUSH_BYTES (16u << 20)

enum dsq_outfile_flags {
    DSQ_OUT_OVERWRITE = 1 << 0, /* replace an existing final file */
    DSQ_OUT_KEEP_TMP  = 1 << 1, /* signal cleanup leaves the temporary (resume) */
    DSQ_OUT_REOPEN    = 1 << 2, /* open an existing temporary without truncating */
    DSQ_OUT_DIRECT_IO = 1 << 3, /* appends bypass the page cache (see above) */
    DSQ_OUT_SYNC_BEHIND = 1 << 4 /* fdatasync in the background every
                                  * DSQ_SYNCER_BYTES (dsq_syncer.h) */
};

/* Temporary name used for path: "<dir>/.<base>.partial". Deterministic so a
 * resumed run finds it. Caller frees. */
char *dsq_outfile_tmp_name(const char *path);

/* What already sits at the final name decides how it is written:
 *  - nothing or a regular file: temporary + rename (a regular file only with
 *    DSQ_OUT_OVERWRITE);
 *  - a symbolic link: followed; its target is what gets replaced, the link
 *    stays a link;
 *  - a character device or FIFO (/dev/null, a pipe): written directly, with
 *    or without the flag, because nothing is replaced;
 *  - anything else (directory, block device, socket): refused. */
int  dsq_outfile_open(dsq_outfile *f, const char *path, unsigned flags, dsq_diag *d);
/* Append all n bytes (retries short writes); ENOSPC maps to DSQ_ERR_NOSPC.
 * Starts writeback behind the appends (DSQ_OUT_FLUSH_BYTES). */
int  dsq_outfile_write(dsq_outfile *f, const void *buf, size_t n, dsq_diag *d);
/* Write at an absolute offset (does not move 'written'). */
int  dsq_outfile_pwrite(dsq_outfile *f, const void *buf, size_t n, uint64_t off, dsq_diag *d);
/* Zero bytes until 'written' is a multiple of align. */
int  dsq_outfile_pad(dsq_outfile *f, size_t align, dsq_diag *d);
/* Cut the file back to len <= written and append from there (roll back a
 * payload; resume). */
int  dsq_outfile_truncate(dsq_outfile *f, uint64_t len, dsq_diag *d);
/* Make the temporary durable: fsync it (used by resume checkpoints). */
int  dsq_outfile_sync(dsq_outfile *f, dsq_diag *d);
/* The same without waiting: every byte appended so far is handed to the
 * kernel and a flush of [0, *upto) is asked of the background syncer;
 * dsq_outfile_synced says when it is durable. Without DSQ_OUT_SYNC_BEHIND
 * (or its thread) this is dsq_outfile_sync, and [0, *upto) is durable on
 * return. */
int  dsq_outfile_sync_begin(dsq_outfile *f, uint64_t *upto, dsq_diag *d);
/* 1 when [0, upto) is durable, 0 not yet, < 0 when a background flush
 * failed (the status, with the file named in d). */
int  dsq_outfile_synced(dsq_outfile *f, uint64_t upto, dsq_diag *d);
/* fsync, close, rename to the final name, fsync the directory. On failure the
 * temporary is removed. After commit f holds no resources. */
int  dsq_outfile_commit(dsq_outfile *f, dsq_diag *d);
/* Close and remove the temporary. Safe on a zeroed or committed struct. */
void dsq_outfile_abort(dsq_outfile *f);
/* Close but keep the temporary (interrupted resumable run). */
void dsq_outfile_detach(dsq_outfile *f);

void dsq_tmpfiles_unlink_all(void);

/* Read-only whole-file mapping. An empty file maps to data == NULL, size 0. */
typedef struct dsq_map {
    const uint8_t *data;
    uint64_t size;
    int fd;
} dsq_map;

int  dsq_map_open(dsq_map *m, const char *path, dsq_diag *d);
void dsq_map_close(dsq_map *m);

/* Whole small file into a NUL-terminated heap buffer (max bytes cap). */
/* Open path for reading without ever blocking on a special file: the open
 * is non-blocking (a FIFO with no writer, a tty or a device opens at once),
 * then anything but a regular file is refused with DSQ_ERR_FORMAT "not a
 * regular file (FIFO)" / "(device)" / "(directory)" before a read can
 * block, and the descriptor is switched back to blocking reads. Every file
 * of a model, export, tokenizer, checksum list or journal is opened this
 * way. Returns the descriptor (>= 0, O_CLOEXEC) or a negative status. */
int dsq_open_regular(const char *path, dsq_diag *d);
/* dsq_read_file for data the user names, which may be a pipe on purpose
 * (a shell's process substitution): regular files and pipes are read
 * (devices, sockets and directories are refused); the open never waits for
 * a writer, so a FIFO nobody writes to reads as empty instead of hanging.
 * Same limits and errors otherwise. */
int dsq_read_file_or_pipe(const char *path, size_t max, char **out, size_t *len, dsq_diag *d);
int dsq_read_file(const char *path, size_t max, char **out, size_t *len, dsq_diag *d);
/* Write a small file atomically (temp + rename). */
int dsq_write_file_atomic(const char *path, const void *data, size_t n, unsigned flags, dsq_diag *d);

int dsq_path_exists(const char *path);
int dsq_path_is_dir(const char *path);
/* 1 when path is a character device or FIFO (written in place), else 0. */
int dsq_path_is_special(const char *path);
/* 1 when a and b name the same file (device and inode, so links, "./x" and
 * hard links all match), 0 otherwise or when either does not exist. */
int dsq_path_same_file(const char *a, const char *b);
/* dir + "/" + name; caller frees. */
char *dsq_path_join(const char *dir, const char *name);

#endif
