/* dsq_error.c - status strings and diagnostic formatting. */
#include "dsq_error.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char *dsq_strerror(int status)
{
    switch (status) {
    case DSQ_OK:              return "success";
    case DSQ_ERR_NOMEM:       return "out of memory";
    case DSQ_ERR_IO:          return "i/o error";
    case DSQ_ERR_NOSPC:       return "no space left on device";
    case DSQ_ERR_NOT_FOUND:   return "not found";
    case DSQ_ERR_EXISTS:      return "already exists";
    case DSQ_ERR_FORMAT:      return "malformed input";
    case DSQ_ERR_TRUNCATED:   return "truncated input";
    case DSQ_ERR_CHECKSUM:    return "checksum mismatch";
    case DSQ_ERR_UNSUPPORTED: return "unsupported";
    case DSQ_ERR_INVALID_ARG: return "invalid argument";
    case DSQ_ERR_OVERFLOW:    return "size overflow";
    case DSQ_ERR_NONFINITE:   return "non-finite value";
    case DSQ_ERR_INTERRUPTED: return "interrupted";
    case DSQ_ERR_SHAPE:       return "shape mismatch";
    case DSQ_ERR_JSON:        return "invalid json";
    case DSQ_ERR_DATA:        return "bad dataset";
    case DSQ_ERR_INTERNAL:    return "internal error";
    case DSQ_ERR_STATE:       return "resume state mismatch";
    default:                  return "unknown error";
    }
}

const char *dsq_status_name(int status)
{
    switch (status) {
#define C(x) case x: return #x;
    C(DSQ_OK) C(DSQ_ERR_NOMEM) C(DSQ_ERR_IO) C(DSQ_ERR_NOSPC) C(DSQ_ERR_NOT_FOUND)
    C(DSQ_ERR_EXISTS) C(DSQ_ERR_FORMAT) C(DSQ_ERR_TRUNCATED) C(DSQ_ERR_CHECKSUM)
    C(DSQ_ERR_UNSUPPORTED) C(DSQ_ERR_INVALID_ARG) C(DSQ_ERR_OVERFLOW)
    C(DSQ_ERR_NONFINITE) C(DSQ_ERR_INTERRUPTED) C(DSQ_ERR_SHAPE) C(DSQ_ERR_JSON)
    C(DSQ_ERR_DATA) C(DSQ_ERR_INTERNAL) C(DSQ_ERR_STATE)
#undef C
    default: return "DSQ_ERR_UNKNOWN";
    }
}

void dsq_diag_clear(dsq_diag *d)
{
    if (!d) return;
    memset(d, 0, sizeof *d);
    d->offset = -1;
}

static void copy_str(char *dst, size_t n, const char *src)
{
    if (!src) { dst[0] = 0; return; }
    snprintf(dst, n, "%s", src);
}

static int vfail(dsq_diag *d, int status, const char *path, const char *tensor,
                 int64_t offset, const char *fmt, va_list ap)
{
    if (!d || d->status < 0) return status;
    d->status = status;
    d->offset = offset;
    copy_str(d->path, sizeof d->path, path);
    copy_str(d->tensor, sizeof d->tensor, tensor);
    vsnprintf(d->msg, sizeof d->msg, fmt, ap);
    return status;
}

int dsq_fail(dsq_diag *d, int status, const char *path, const char *tensor,
             int64_t offset, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    status = vfail(d, status, path, tensor, offset, fmt, ap);
    va_end(ap);
    return status;
}

int dsq_fail_errno(dsq_diag *d, int errno_value, const char *path, const char *fmt, ...)
{
    int status = (errno_value == ENOSPC
#ifdef EDQUOT
                  || errno_value == EDQUOT
#endif
                  ) ? DSQ_ERR_NOSPC : (errno_value == ENOENT ? DSQ_ERR_NOT_FOUND
                  : (errno_value == EEXIST ? DSQ_ERR_EXISTS : DSQ_ERR_IO));
    if (!d || d->status < 0) return status;
    va_list ap;
    va_start(ap, fmt);
    vfail(d, status, path, NULL, -1, fmt, ap);
    va_end(ap);
    size_t len = strlen(d->msg);
    snprintf(d->msg + len, sizeof d->msg - len, ": %s", strerror(errno_value));
    return status;
}

void dsq_diag_format(const dsq_diag *d, char *buf, size_t n)
{
    size_t used = 0;
    if (!n) return;
    buf[0] = 0;
#define APPEND(...) do { if (used < n) { int w_ = snprintf(buf + used, n - used, __VA_ARGS__); \
        if (w_ > 0) used += (size_t)w_; } } while (0)
    if (d->path[0]) APPEND("'%s': ", d->path);
    if (d->tensor[0]) APPEND("tensor '%s': ", d->tensor);
    if (d->offset >= 0) APPEND("at byte %lld: ", (long long)d->offset);
    APPEND("%s", d->msg[0] ? d->msg : dsq_strerror(d->status));
#undef APPEND
}

void dsq_notef(dsq_note_fn note, void *ctx, int level, const char *fmt, ...)
{
    if (!note) return;
    char msg[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    note(ctx, level, msg);
}
