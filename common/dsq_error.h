/* dsq_error.h - the one status enum, its strings, and the diagnostic record.
 *
 * Every library function that can fail returns an int status: DSQ_OK (0) or a
 * negative value from enum dsq_status. Values are pinned: they appear in
 * --json output and scripts may test them, so never renumber; append only.
 *
 * A caller that wants more than the code passes a dsq_diag; the library fills
 * it with the file, tensor and byte offset involved and a one-line message
 * (git style: lower case, no trailing full stop). The library never prints. */
#ifndef DSQ_ERROR_H
#define DSQ_ERROR_H

#include <stdint.h>
#include <stddef.h>

enum dsq_status {
    DSQ_OK              =   0,
    DSQ_ERR_NOMEM       =  -1, /* allocation failed */
    DSQ_ERR_IO          =  -2, /* read/write/mmap/fsync/rename failed (errno in diag) */
    DSQ_ERR_NOSPC       =  -3, /* disk full or quota exceeded while writing */
    DSQ_ERR_NOT_FOUND   =  -4, /* file, shard, tensor or key is missing */
    DSQ_ERR_EXISTS      =  -5, /* output exists and overwrite was not asked for */
    DSQ_ERR_FORMAT      =  -6, /* malformed input: header, layout, field values */
    DSQ_ERR_TRUNCATED   =  -7, /* input ends before the data it declares */
    DSQ_ERR_CHECKSUM    =  -8, /* SHA-256 mismatch */
    DSQ_ERR_UNSUPPORTED =  -9, /* valid but not supported: dtype, arch, scheme, version */
    DSQ_ERR_INVALID_ARG = -10, /* caller passed bad parameters */
    DSQ_ERR_OVERFLOW    = -11, /* size or shape arithmetic overflows */
    DSQ_ERR_NONFINITE   = -12, /* NaN or Inf where finite values are required */
    DSQ_ERR_INTERRUPTED = -13, /* SIGINT/SIGTERM or caller cancellation */
    DSQ_ERR_SHAPE       = -14, /* shapes disagree (tensor vs config, scale vs weight) */
    DSQ_ERR_JSON        = -15, /* JSON text does not parse or has the wrong types */
    DSQ_ERR_DATA        = -16, /* bad dataset: missing field, empty file */
    DSQ_ERR_INTERNAL    = -17, /* a dsq bug: an invariant did not hold */
    DSQ_ERR_STATE       = -18, /* resume/checkpoint state does not match this run */
    DSQ_STATUS_MIN      = -18  /* sentinel: lowest valid code */
};

/* Static string for a status ("format error", ...). Never NULL. */
const char *dsq_strerror(int status);
/* Stable identifier for JSON output ("DSQ_ERR_FORMAT"). Never NULL. */
const char *dsq_status_name(int status);

#define DSQ_DIAG_PATH 512
#define DSQ_DIAG_NAME 256
#define DSQ_DIAG_MSG  512

/* Where and why something failed. offset < 0 means "no byte offset". */
typedef struct dsq_diag {
    int      status;
    int64_t  offset;
    char     path[DSQ_DIAG_PATH];   /* file involved, "" if none */
    char     tensor[DSQ_DIAG_NAME]; /* tensor involved, "" if none */
    char     msg[DSQ_DIAG_MSG];     /* one line, no trailing newline */
} dsq_diag;

void dsq_diag_clear(dsq_diag *d);

/* Callers must dsq_diag_clear() a diag before first use: a diag already
 * holding an error keeps it (first cause wins), and stack garbage would look
 * like one. Record a failure in d (d may be NULL) and return status, so callers write
 *   return dsq_fail(d, DSQ_ERR_FORMAT, path, name, off, "bad dtype '%s'", s);
 * path/tensor may be NULL. A diag that already holds an error is not
 * overwritten: the first (innermost) cause wins. */
int dsq_fail(dsq_diag *d, int status, const char *path, const char *tensor,
             int64_t offset, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

/* Same as dsq_fail but appends ": strerror(errno_value)" to the message and
 * maps ENOSPC/EDQUOT to DSQ_ERR_NOSPC. */
int dsq_fail_errno(dsq_diag *d, int errno_value, const char *path,
                   const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* "file 'p': tensor 't' at byte N: msg" (parts omitted when empty). */
void dsq_diag_format(const dsq_diag *d, char *buf, size_t n);

#define DSQ_TRY(expr) do { int dsq_try_rc_ = (expr); if (dsq_try_rc_ < 0) return dsq_try_rc_; } while (0)

#endif
