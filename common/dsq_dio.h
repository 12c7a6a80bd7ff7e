/* dsq_dio.h - O_DIRECT appends written by a background thread from a ring
 * of aligned stages, so the writer never waits for the disk while a stage
 * is free.
 *
 * Why: an O_DIRECT pwrite returns only once the device has the bytes. The
 * .dsq writer wrote its 8 MiB stage in place, so its thread slept in the
 * disk for the whole output: 1.25-1.5 s of a 2.6-4 s w8a8-dynamic
 * conversion of the 16-expert layer at -T 2 (off-CPU time by stack,
 * `perf record -a -e sched:sched_switch`), while the workers filled the
 * ordered window and then slept too. A second thread that writes stage k
 * while the writer fills stage k + 1 overlaps the disk with the compute.
 *
 * Order: stages are written one at a time in the order handed over, so
 * [0, dsq_dio_done) is always a prefix of the file as the caller wrote it.
 * A failed write is sticky: it is returned by the next dsq_dio_next or
 * dsq_dio_drain, and nothing after it is written. A write refused with
 * EINVAL (a file system that takes O_DIRECT at open but not at write) goes
 * through the buffered descriptor instead, as do all later ones, and
 * dsq_dio_refused says so. One caller thread. */
#ifndef DSQ_DIO_H
#define DSQ_DIO_H

#include <stddef.h>
#include <stdint.h>

typedef struct dsq_dio dsq_dio;

#define DSQ_DIO_ALIGN 4096u
/* 3 x 4 MiB: one stage being written, one filled, one filling; the
 * stages are memory first touched by each writer, and page zeroing is
 * slow (a fraction of a GB/s on a VM), so the ring is kept no larger than
 * 12 MiB in all. */
#define DSQ_DIO_STAGES 3
#define DSQ_DIO_STAGE_BYTES (4u << 20)

/* A ring writing through dio_fd (O_DIRECT) or, after EINVAL, fd. Neither is
 * owned. NULL when memory or the thread cannot be had. */
dsq_dio *dsq_dio_start(int dio_fd, int fd);
/* The stage being filled: DSQ_DIO_STAGE_BYTES, aligned to DSQ_DIO_ALIGN. */
uint8_t *dsq_dio_stage(dsq_dio *a);
/* Hand the filled stage over, to be written as n bytes (a multiple of the
 * alignment) at off; on return dsq_dio_stage is the next free one (waits
 * for one). 0, or -errno of an earlier failed write (the stage is then not
 * queued). */
int dsq_dio_next(dsq_dio *a, size_t n, uint64_t off);
/* Wait until every handed stage is written; 0 or -errno of the first
 * failure. The stage being filled keeps its bytes. */
int dsq_dio_drain(dsq_dio *a);
/* End of the written prefix: bytes [0, done) of the handed stages are on
 * the file (0 before the first). */
uint64_t dsq_dio_done(dsq_dio *a);
/* 1 once a write was refused with EINVAL and went through fd. */
int dsq_dio_refused(dsq_dio *a);
/* Drain, stop the thread and free the ring; 0 or -errno as drain. Safe on
 * NULL. */
int dsq_dio_stop(dsq_dio *a);

#endif
