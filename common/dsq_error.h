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

/* the status enum, dsq_strerror, dsq_status_name, dsq_diag, dsq_diag_clear
 * and dsq_diag_format are public: include/dsq/dsq_status.h */
#include "dsq/dsq_status.h"

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

/* The library's messages to its caller go through a callback (it never
 * prints): note(ctx, level, msg), level 0 a warning, higher levels
 * information. dsq_notef formats msg (cut at 8 KiB) and calls note, when
 * there is one. */
typedef void (*dsq_note_fn)(void *ctx, int level, const char *msg);
void dsq_notef(dsq_note_fn note, void *ctx, int level, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

#define DSQ_TRY(expr) do { int dsq_try_rc_ = (expr); if (dsq_try_rc_ < 0) return dsq_try_rc_; } while (0)

#endif
