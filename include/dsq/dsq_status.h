/* dsq_status.h - libdsq's status codes and the diagnostic record.
 *
 * Part of the public API (<dsq/dsq.h> includes it). Every libdsq function
 * that can fail returns an int status: DSQ_OK (0) or a negative value of
 * enum dsq_status. Values are pinned: they appear in --json output and
 * scripts may test them, so they are never renumbered; new codes are
 * appended below DSQ_STATUS_MIN's current value.
 *
 * A caller that wants more than the code passes a dsq_diag; the library
 * fills it with the file, tensor and byte offset involved and a one-line
 * message (lower case, no trailing full stop). The library never prints and
 * never exits. */
#ifndef DSQ_STATUS_H
#define DSQ_STATUS_H

#include <stddef.h>
#include <stdint.h>

/* DSQ_API marks the functions libdsq.so exports; everything else in the
 * library is built with hidden visibility. */
#ifndef DSQ_API
#if defined(__GNUC__) && __GNUC__ >= 4
#define DSQ_API __attribute__((visibility("default")))
#else
#define DSQ_API
#endif
#endif

#ifdef __cplusplus
extern "C" {
#endif

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

/* dsq_strerror():
 * Returns a static, human-readable description of status ("format error").
 * Never NULL: an unknown value gives a generic string. Thread-safe. */
DSQ_API const char *dsq_strerror(int status);

/* dsq_status_name():
 * Returns the stable identifier of status ("DSQ_ERR_FORMAT"), as --json
 * output prints it. Never NULL. Thread-safe. */
DSQ_API const char *dsq_status_name(int status);

#define DSQ_DIAG_PATH 512
#define DSQ_DIAG_NAME 256
#define DSQ_DIAG_MSG  512

/* Where and why something failed. The caller owns it (usually on the
 * stack); offset < 0 means "no byte offset". */
typedef struct dsq_diag {
    int      status;                /* the status of the first failure, DSQ_OK if none */
    int64_t  offset;
    char     path[DSQ_DIAG_PATH];   /* file involved, "" if none */
    char     tensor[DSQ_DIAG_NAME]; /* tensor involved, "" if none */
    char     msg[DSQ_DIAG_MSG];     /* one line, no trailing newline */
} dsq_diag;

/* dsq_diag_clear():
 * Empties d (status DSQ_OK, no offset, empty strings). Call it before first
 * use: a diag already holding an error keeps it (the first, innermost cause
 * wins), and stack garbage would look like one. */
DSQ_API void dsq_diag_clear(dsq_diag *d);

/* dsq_diag_format():
 * Writes d as one line, "file 'p': tensor 't' at byte N: msg" (parts
 * omitted when empty), NUL-terminated and truncated to n bytes. */
DSQ_API void dsq_diag_format(const dsq_diag *d, char *buf, size_t n);

#ifdef __cplusplus
}
#endif

#endif
