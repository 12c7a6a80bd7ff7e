/* dsq_syncer.h - a background thread that makes a file's bytes durable
 * (fdatasync) while its writer keeps writing.
 *
 * Why: a disk may take writes into its cache several times faster than it
 * persists them, and persist them only when asked (a flush). An output
 * written with no flush until its commit pays for all of it there, at the
 * end of the conversion, and the resume journal's first checkpoint would
 * block the writer the same way. Asking for a flush every
 * DSQ_SYNCER_BYTES from another thread keeps the disk's backlog short, so
 * the commit's fsync and a checkpoint find little left to do, and the
 * compute never waits for the disk.
 *
 * The writer says how far the file is written (dsq_syncer_ask: every byte
 * below 'upto' has been handed to the kernel); the thread calls fdatasync
 * and then records that [0, upto) is durable. A checkpoint that may only
 * name durable bytes asks, and later polls dsq_syncer_done, instead of
 * blocking in its own fsync. The first fdatasync error is kept and
 * returned by every later done / stop (the caller's own fsync at commit
 * would report it too). */
#ifndef DSQ_SYNCER_H
#define DSQ_SYNCER_H

#include <stdint.h>

typedef struct dsq_syncer dsq_syncer;

/* Ask for a background flush each time this many more bytes are written. */
#define DSQ_SYNCER_BYTES (64ull << 20)

/* A syncer for fd (not owned; it must stay open until dsq_syncer_stop).
 * NULL when no thread can be started: callers then sync in place. */
dsq_syncer *dsq_syncer_start(int fd);
/* Bytes [0, upto) are written: make them durable in the background. */
void dsq_syncer_ask(dsq_syncer *s, uint64_t upto);
/* Bytes asked for so far (0 for NULL). */
uint64_t dsq_syncer_asked(const dsq_syncer *s);
/* 1 when [0, upto) is durable, 0 when not yet, -errno after a failed flush. */
int dsq_syncer_done(dsq_syncer *s, uint64_t upto);
/* The file was cut back to len: wait for a flush in flight, then forget
 * what lay beyond len (it will be written again). */
void dsq_syncer_truncated(dsq_syncer *s, uint64_t len);
/* Stop and free the thread (waits for a flush in flight); 0 or the first
 * flush's -errno. Safe on NULL. */
int dsq_syncer_stop(dsq_syncer *s);

#endif
