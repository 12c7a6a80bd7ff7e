/* endpoint_journal.c - the resumable per-item file of ds-eval gsm8k
 * --endpoint (endpoint.h). Each record is one write(2) on an O_APPEND
 * descriptor, fsync'd: an evaluation of a big model is hours long, and a
 * kill or a dropped connection must cost at most the items in flight. The
 * file is flock'ed while a run holds it, so two runs on one --out never
 * interleave their lines. */
#include "endpoint.h"
#include "dsq_file.h"

#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_JOURNAL ((size_t)1 << 31)

/* One record: *doc_out the doc_id; items[doc] filled when doc < n. */
static int parse_line(const char *line, size_t len, const dsq_gsm8k_set *test, size_t n, dsq_ep_item *items,
                      size_t *n_have, const char *path, size_t lineno, size_t *doc_out, dsq_diag *d)
{
    if (len > INT32_MAX) return dsq_fail(d, DSQ_ERR_STATE, path, NULL, -1, "line %zu is too long", lineno);
    json_tokener *tk = json_tokener_new_ex(16);
    json_object *o = tk ? json_tokener_parse_ex(tk, line, (int)len) : NULL;
    int ok = tk && json_tokener_get_error(tk) == json_tokener_success && json_object_is_type(o, json_type_object);
    json_tokener_free(tk);
    json_object *id, *q, *c, *x;
    int rc = DSQ_OK;
    if (!ok || !json_object_object_get_ex(o, "doc_id", &id) || !json_object_is_type(id, json_type_int) ||
        json_object_get_int64(id) < 0 || !json_object_object_get_ex(o, "completion", &c) || !json_object_is_type(c, json_type_string)) {
        rc = dsq_fail(d, DSQ_ERR_STATE, path, NULL, -1, "line %zu is not a ds-eval gsm8k record (another file? -f starts over)", lineno);
    } else {
        size_t doc = (size_t)json_object_get_int64(id);
        *doc_out = doc;
        if (doc < n) {
            if (doc >= test->n || !json_object_object_get_ex(o, "question", &q) || !json_object_is_type(q, json_type_string) ||
                (size_t)json_object_get_string_len(q) != test->items[doc].question_len ||
                memcmp(json_object_get_string(q), test->items[doc].question, test->items[doc].question_len)) {
                rc = dsq_fail(d, DSQ_ERR_STATE, path, NULL, -1, "line %zu: doc %zu's question differs from --data "
                              "(a file from another dataset? -f starts over)", lineno, doc);
            } else if (json_object_object_get_ex(o, "error", &x) && !json_object_is_type(x, json_type_null)) {
                /* the server refused this item: asked again */
            } else if (!items[doc].have) {
                dsq_ep_item *it = &items[doc];
                it->len = (size_t)json_object_get_string_len(c);
                it->completion = malloc(it->len + 1);
                if (!it->completion) rc = dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
                else {
                    memcpy(it->completion, json_object_get_string(c), it->len);
                    it->completion[it->len] = 0;
                    it->prompt_tokens = json_object_object_get_ex(o, "prompt_tokens", &x) && json_object_is_type(x, json_type_int)
                                        ? json_object_get_int64(x) : -1;
                    it->gen_tokens = json_object_object_get_ex(o, "gen_tokens", &x) && json_object_is_type(x, json_type_int)
                                     ? json_object_get_int64(x) : -1;
                    if (json_object_object_get_ex(o, "stop", &x) && json_object_is_type(x, json_type_string))
                        snprintf(it->finish, sizeof it->finish, "%s", json_object_get_string(x));
                    it->have = 1;
                    (*n_have)++;
                }
            }
        }
    }
    json_object_put(o);
    return rc;
}

int dsq_ep_journal_parse(const char *buf, size_t len, const char *path, const dsq_gsm8k_set *test, size_t n,
                         dsq_ep_item *items, size_t *n_have, char **tail, size_t *tail_len, size_t *keep,
                         dsq_diag *d)
{
    *n_have = 0;
    *tail = NULL;
    *tail_len = 0;
    *keep = 0;
    size_t at = 0, lineno = 0, cap = 0;
    int rc = DSQ_OK;
    while (at < len && rc == DSQ_OK) {
        const char *nl = memchr(buf + at, '\n', len - at);
        lineno++;
        if (!nl) break; /* a last line cut short by a kill: dropped */
        size_t ll = (size_t)(nl - (buf + at)), doc = 0;
        int blank = 1;
        for (size_t i = 0; i < ll; i++) blank &= buf[at + i] == ' ' || buf[at + i] == '\r' || buf[at + i] == '\t';
        if (!blank) {
            doc = 0;
            rc = parse_line(buf + at, ll, test, n, items, n_have, path, lineno, &doc, d);
            if (rc == DSQ_OK && doc >= n) { /* another run's larger --limit: kept as written */
                if (*tail_len + ll + 2 > cap) { /* the line, its newline and a NUL */
                    size_t nc = (*tail_len + ll + 2) * 2;
                    char *t = realloc(*tail, nc);
                    if (!t) { rc = dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory"); break; }
                    *tail = t;
                    cap = nc;
                }
                memcpy(*tail + *tail_len, buf + at, ll + 1);
                *tail_len += ll + 1;
                (*tail)[*tail_len] = 0;
            }
        }
        at += ll + 1;
        if (rc == DSQ_OK) *keep = at;
    }
    if (rc < 0) {
        free(*tail);
        *tail = NULL;
        *tail_len = 0;
    }
    return rc;
}

/* Open and lock path; the descriptor must still be the file the path names
 * once the lock is held (a run that finished meanwhile replaced it). */
static int open_locked(dsq_ep_journal *j, const char *path, dsq_diag *d)
{
    for (int tries = 0; tries < 8; tries++) {
        int fd = open(path, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (fd < 0) return dsq_fail_errno(d, errno, path, "cannot open the journal");
        struct stat a, b;
        if (fstat(fd, &a) < 0) { int e = errno; close(fd); return dsq_fail_errno(d, e, path, "cannot stat"); }
        if (!S_ISREG(a.st_mode)) {
            close(fd);
            return dsq_fail(d, DSQ_ERR_INVALID_ARG, path, NULL, -1, "the journal is not a regular file");
        }
        if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
            int e = errno;
            close(fd);
            if (e == EWOULDBLOCK || e == EAGAIN)
                return dsq_fail(d, DSQ_ERR_EXISTS, path, NULL, -1, "another ds-eval run is writing this journal; "
                                "wait for it to finish or give another --out");
            return dsq_fail_errno(d, e, path, "cannot lock the journal");
        }
        if (stat(path, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino) {
            j->fd = fd;
            return DSQ_OK;
        }
        close(fd);
    }
    return dsq_fail(d, DSQ_ERR_IO, path, NULL, -1, "the journal keeps being replaced while it is opened");
}

int dsq_ep_journal_lock(const char *path, int *fd, dsq_diag *d)
{
    dsq_ep_journal j = { .fd = -1 };
    int rc = open_locked(&j, path, d);
    *fd = j.fd;
    return rc;
}

static int read_all(int fd, const char *path, char **out, size_t *len, dsq_diag *d)
{
    *out = NULL;
    *len = 0;
    struct stat st;
    if (fstat(fd, &st) < 0) return dsq_fail_errno(d, errno, path, "cannot stat");
    if ((uint64_t)st.st_size > MAX_JOURNAL) return dsq_fail(d, DSQ_ERR_FORMAT, path, NULL, -1, "the journal exceeds 2 GiB");
    size_t n = (size_t)st.st_size, at = 0;
    char *buf = malloc(n + 1);
    if (!buf) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    while (at < n) {
        ssize_t r = pread(fd, buf + at, n - at, (off_t)at);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) { int e = errno; free(buf); return dsq_fail_errno(d, e, path, "cannot read"); }
        if (r == 0) break;
        at += (size_t)r;
    }
    buf[at] = 0;
    *out = buf;
    *len = at;
    return DSQ_OK;
}

int dsq_ep_journal_open(dsq_ep_journal *j, const char *path, int restart, const dsq_gsm8k_set *test,
                        size_t n, dsq_ep_item *items, size_t *n_have, dsq_diag *d)
{
    memset(j, 0, sizeof *j);
    j->fd = -1;
    *n_have = 0;
    if (!(j->path = strdup(path))) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    DSQ_TRY(open_locked(j, path, d));
    /* under the lock: truncating never tears another run's lines */
    if (restart) {
        if (ftruncate(j->fd, 0) < 0) return dsq_fail_errno(d, errno, path, "cannot truncate");
        return DSQ_OK;
    }
    char *buf = NULL;
    size_t len = 0, keep = 0;
    DSQ_TRY(read_all(j->fd, path, &buf, &len, d));
    int rc = dsq_ep_journal_parse(buf, len, path, test, n, items, n_have, &j->tail, &j->tail_len, &keep, d);
    free(buf);
    if (rc < 0) return rc;
    if (keep < len && ftruncate(j->fd, (off_t)keep) < 0) return dsq_fail_errno(d, errno, path, "cannot truncate");
    return DSQ_OK;
}

int dsq_ep_journal_append(dsq_ep_journal *j, size_t doc, const dsq_gsm8k_item *it, const dsq_ep_item *item, dsq_diag *d)
{
    json_object *o = json_object_new_object();
    json_object_object_add(o, "doc_id", json_object_new_int64((int64_t)doc));
    json_object_object_add(o, "question", json_object_new_string_len(it->question, (int)it->question_len));
    json_object_object_add(o, "completion", json_object_new_string_len(item->completion ? item->completion : "",
                                                                        item->completion ? (int)item->len : 0));
    if (item->error) {
        json_object_object_add(o, "error", json_object_new_string(item->error));
    } else {
        json_object_object_add(o, "prompt_tokens", json_object_new_int64(item->prompt_tokens));
        json_object_object_add(o, "gen_tokens", json_object_new_int64(item->gen_tokens));
        json_object_object_add(o, "stop", json_object_new_string(item->finish));
    }
    size_t n;
    const char *s = json_object_to_json_string_length(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &n);
    char *line = malloc(n + 1);
    int rc = DSQ_OK;
    if (!line) rc = dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    else {
        memcpy(line, s, n);
        line[n] = '\n';
        /* one write of the whole line on O_APPEND: it lands whole at the end */
        ssize_t w;
        do w = write(j->fd, line, n + 1); while (w < 0 && errno == EINTR);
        if (w != (ssize_t)(n + 1)) {
            int e = w < 0 ? errno : ENOSPC;
            /* a short write left part of a line: cut it off so the next record starts a line */
            struct stat st;
            if (w > 0 && fstat(j->fd, &st) == 0 && st.st_size >= w && ftruncate(j->fd, st.st_size - w) < 0) { /* kept: a rerun drops it */ }
            rc = dsq_fail_errno(d, e, j->path, "cannot append");
        }
        if (rc == DSQ_OK && fdatasync(j->fd) < 0) rc = dsq_fail_errno(d, errno, j->path, "cannot sync");
    }
    free(line);
    json_object_put(o);
    return rc;
}

void dsq_ep_journal_close(dsq_ep_journal *j)
{
    if (j->fd >= 0) close(j->fd); /* releases the lock */
    free(j->path);
    free(j->tail);
    j->fd = -1;
    j->path = NULL;
    j->tail = NULL;
    j->tail_len = 0;
}
