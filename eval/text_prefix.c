/* text_prefix.c - tokenize a bounded prefix of a text file (see
 * text_prefix.h). */
#include "text_prefix.h"
#include "dsq_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Read up to want bytes from the start of fd into a fresh buffer. */
static int read_head(int fd, const char *path, size_t want, char **out, size_t *got, dsq_diag *d)
{
    char *b = malloc(want + 1);
    if (!b) return dsq_fail(d, DSQ_ERR_NOMEM, path, NULL, -1, "out of memory");
    size_t n = 0;
    while (n < want) {
        ssize_t r = pread(fd, b + n, want - n, (off_t)n);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) { int rc = dsq_fail_errno(d, errno, path, "read failed"); free(b); return rc; }
        if (r == 0) break;
        n += (size_t)r;
    }
    b[n] = 0;
    *out = b;
    *got = n;
    return DSQ_OK;
}

int dsq_tokenize_file_prefix(const dsq_tokenizer *tok, const char *path, uint64_t limit, size_t max_bytes,
                             unsigned flags, int32_t **ids, size_t *n, size_t *bytes, dsq_diag *d)
{
    *ids = NULL;
    *n = 0;
    *bytes = 0;
    /* the open never waits for a FIFO's writer; reads block as usual, and a
     * FIFO nobody writes to reads as empty */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) return dsq_fail_errno(d, errno, path, "cannot open");
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        int rc = dsq_fail_errno(d, errno, path, "cannot set blocking reads");
        close(fd);
        return rc;
    }
    struct stat st;
    int rc = fstat(fd, &st) == 0 ? DSQ_OK : dsq_fail_errno(d, errno, path, "cannot stat");
    /* pipes and devices have no size: read them whole (up to max_bytes) */
    size_t size = rc == DSQ_OK && S_ISREG(st.st_mode) ? (size_t)st.st_size : max_bytes;
    if (rc == DSQ_OK && S_ISREG(st.st_mode) && (uint64_t)st.st_size > max_bytes)
        rc = dsq_fail(d, DSQ_ERR_FORMAT, path, NULL, (int64_t)max_bytes, "file larger than the %zu-byte limit",
                      max_bytes);
    /* a generous first guess: a few bytes per token, never below 64 KiB */
    size_t want = limit && limit < max_bytes / 16 ? (size_t)limit * 16 : size;
    if (want < (64u << 10)) want = 64u << 10;
    while (rc == DSQ_OK) {
        if (want > size || !S_ISREG(st.st_mode)) want = size;
        char *text = NULL;
        size_t got = 0;
        rc = read_head(fd, path, want, &text, &got, d);
        if (rc < 0) break;
        int whole = got < want || got == size;
        size_t use = got;
        if (!whole) {
            /* cut after the last line end, so the cut touches one pre-token */
            while (use > 0 && text[use - 1] != '\n') use--;
            if (use == 0) use = got;   /* one huge line: cut where it is */
        }
        int32_t *t = NULL;
        size_t k = 0;
        rc = dsq_tokenizer_encode_ex(tok, text, use, flags, &t, &k, d);
        free(text);
        if (rc < 0) break;
        if (whole || (limit && k >= limit + DSQ_PREFIX_MARGIN)) {
            if (limit && k > limit) k = (size_t)limit;
            *ids = t;
            *n = k;
            *bytes = use;
            break;
        }
        free(t);
        want = want > size / 4 ? size : want * 4;
    }
    close(fd);
    return rc;
}
