/* convert_ledger.c - source-hash ledger for --resume (see convert_ledger.h). */
#include "convert_ledger.h"
#include "dsq_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct rec {
    char *name;
    size_t seq;              /* line number: the last record of a name wins */
    char hex[2 * DSQ_SHA256_LEN + 1];
} rec;

struct dsq_ledger {
    char *path;
    int fd;
    rec *r;
    size_t n, cap;
    int dirty;               /* appended since the last fdatasync */
};

static void to_hex(const uint8_t *h, char *out)
{
    for (int i = 0; i < DSQ_SHA256_LEN; i++) snprintf(out + 2 * i, 3, "%02x", h[i]);
}

static int push(dsq_ledger *l, const char *name, size_t nl, const char *hex)
{
    if (l->n == l->cap) {
        size_t nc = l->cap ? 2 * l->cap : 256;
        rec *nr = realloc(l->r, nc * sizeof *nr);
        if (!nr) return DSQ_ERR_NOMEM;
        l->r = nr;
        l->cap = nc;
    }
    rec *e = &l->r[l->n];
    if (!(e->name = strndup(name, nl))) return DSQ_ERR_NOMEM;
    memcpy(e->hex, hex, sizeof e->hex);
    e->seq = l->n;
    l->n++;
    return DSQ_OK;
}

static int by_name(const void *a, const void *b)
{
    const rec *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : (x->seq < y->seq ? -1 : x->seq > y->seq);
}

/* Lines of an earlier run; a torn last line (crash mid-append) is ignored. */
static int load(dsq_ledger *l, dsq_diag *d)
{
    char *txt = NULL;
    size_t len = 0;
    int rc = dsq_read_file(l->path, (size_t)1 << 30, &txt, &len, NULL);
    if (rc < 0) return DSQ_OK;   /* none yet: every reuse will be refused */
    const size_t H = 2 * DSQ_SHA256_LEN;
    for (char *p = txt, *end = txt + len; p < end && rc == DSQ_OK;) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl) break;
        if ((size_t)(nl - p) > H + 1 && p[H] == ' ') {
            char hex[2 * DSQ_SHA256_LEN + 1];
            memcpy(hex, p, H);
            hex[H] = 0;
            if (push(l, p + H + 1, (size_t)(nl - p) - H - 1, hex) < 0)
                rc = dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
        }
        p = nl + 1;
    }
    free(txt);
    /* A tensor re-converted after an earlier resume was recorded again:
     * sort by (name, line) and keep each name's last record. */
    if (rc == DSQ_OK && l->n > 1) {
        qsort(l->r, l->n, sizeof *l->r, by_name);
        size_t k = 0;
        for (size_t i = 0; i < l->n; i++) {
            if (i + 1 < l->n && !strcmp(l->r[i].name, l->r[i + 1].name)) { free(l->r[i].name); continue; }
            l->r[k++] = l->r[i];
        }
        l->n = k;
    }
    return rc;
}

int dsq_ledger_open(dsq_ledger **out, const char *path, int resume, dsq_diag *d)
{
    *out = NULL;
    dsq_ledger *l = calloc(1, sizeof *l);
    if (!l || !(l->path = strdup(path))) {
        free(l);
        return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    }
    l->fd = -1;
    int rc = resume ? load(l, d) : DSQ_OK;
    if (rc == DSQ_OK) {
        l->fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | (resume ? 0 : O_TRUNC), 0644);
        if (l->fd < 0) rc = dsq_fail_errno(d, errno, path, "cannot open the resume ledger");
    }
    if (rc < 0) {
        dsq_ledger_close(l, 0);
        return rc;
    }
    *out = l;
    return DSQ_OK;
}

void dsq_ledger_rows(const dsq_st_tensor *t, int64_t rows, int64_t r0, int64_t n,
                     const uint8_t **p, size_t *len)
{
    /* Byte offsets scale with the row index; exact because nbytes is a
     * whole number of rows for every source dtype. */
    uint64_t a = rows > 0 ? t->nbytes * (uint64_t)r0 / (uint64_t)rows : 0;
    uint64_t b = rows > 0 ? t->nbytes * (uint64_t)(r0 + n) / (uint64_t)rows : t->nbytes;
    *p = t->data ? t->data + a : NULL;
    *len = t->data ? (size_t)(b - a) : 0;
}

int dsq_ledger_combine(const dsq_st_model *m, const dsq_st_tensor *t, const uint8_t *digests,
                       size_t npieces, uint8_t out[DSQ_SHA256_LEN])
{
    dsq_sha256 h;
    DSQ_TRY(dsq_sha256_init(&h));
    dsq_sha256_update(&h, digests, npieces * DSQ_SHA256_LEN);
    const dsq_st_tensor *s = dsq_st_scale_of(m, t);
    if (s && s->data) {
        uint8_t sd[DSQ_SHA256_LEN];
        if (dsq_sha256_buf(s->data, (size_t)s->nbytes, sd) < 0) {
            dsq_sha256_release(&h);
            return DSQ_ERR_NOMEM;
        }
        dsq_sha256_update(&h, sd, sizeof sd);
    }
    dsq_sha256_final(&h, out);
    return DSQ_OK;
}

void dsq_ledger_block(const uint8_t *p, size_t len, uint8_t brec[DSQ_CRC32C_X4_LEN])
{
    dsq_crc32c_x4(p, len, brec);
}

int dsq_ledger_hash(const dsq_st_model *m, const dsq_st_tensor *t, int64_t rows,
                    int64_t piece_rows, int64_t block_rows, uint8_t out[DSQ_SHA256_LEN])
{
    if (rows < 1) rows = 1;
    if (piece_rows < 1 || piece_rows > rows) piece_rows = rows;
    if (block_rows < 1 || block_rows > piece_rows) block_rows = piece_rows;
    size_t np = (size_t)((rows + piece_rows - 1) / piece_rows);
    uint8_t *dg = malloc(np * DSQ_SHA256_LEN);
    if (!dg) return DSQ_ERR_NOMEM;
    int rc = DSQ_OK;
    for (size_t i = 0; i < np && rc == DSQ_OK; i++) {
        int64_t r0 = (int64_t)i * piece_rows, n = rows - r0 < piece_rows ? rows - r0 : piece_rows;
        dsq_sha256 h;
        if ((rc = dsq_sha256_init(&h)) < 0) break;
        /* blocks cut from the piece's first row, as the workers cut them */
        for (int64_t s = r0; s < r0 + n; s += block_rows) {
            int64_t k = r0 + n - s < block_rows ? r0 + n - s : block_rows;
            const uint8_t *p;
            size_t len;
            uint8_t brec[DSQ_CRC32C_X4_LEN];
            dsq_ledger_rows(t, rows, s, k, &p, &len);
            dsq_ledger_block(p, len, brec);
            dsq_sha256_update(&h, brec, sizeof brec);
        }
        dsq_sha256_final(&h, dg + i * DSQ_SHA256_LEN);
    }
    if (rc == DSQ_OK) rc = dsq_ledger_combine(m, t, dg, np, out);
    free(dg);
    return rc;
}

int dsq_ledger_add(dsq_ledger *l, const char *name, const uint8_t sha[DSQ_SHA256_LEN], dsq_diag *d)
{
    char hex[2 * DSQ_SHA256_LEN + 1];
    to_hex(sha, hex);
    size_t nl = strlen(name), n = 2 * DSQ_SHA256_LEN + 1 + nl + 1;
    char *line = malloc(n + 1);
    if (!line) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    snprintf(line, n + 1, "%s %s\n", hex, name);
    size_t off = 0;
    int rc = DSQ_OK;
    while (off < n && rc == DSQ_OK) {
        ssize_t w = write(l->fd, line + off, n - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) rc = dsq_fail_errno(d, w < 0 ? errno : ENOSPC, l->path, "cannot append to the resume ledger");
        else off += (size_t)w;
    }
    free(line);
    if (rc == DSQ_OK) l->dirty = 1;
    return rc;
}

int dsq_ledger_sync(dsq_ledger *l, dsq_diag *d)
{
    if (!l || !l->dirty) return DSQ_OK;
    /* durable before any tensor it records can be named by a checkpoint */
    if (fdatasync(l->fd) != 0) return dsq_fail_errno(d, errno, l->path, "fdatasync failed");
    l->dirty = 0;
    return DSQ_OK;
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(((const rec *)a)->name, ((const rec *)b)->name);
}

int dsq_ledger_check(const dsq_ledger *l, const char *name, const uint8_t sha[DSQ_SHA256_LEN], dsq_diag *d)
{
    char hex[2 * DSQ_SHA256_LEN + 1];
    to_hex(sha, hex);
    rec key = { .name = (char *)name };
    const rec *e = l->n ? bsearch(&key, l->r, l->n, sizeof *l->r, cmp_name) : NULL;
    if (e) {
        if (strcmp(e->hex, hex) == 0) return DSQ_OK;
        return dsq_fail(d, DSQ_ERR_STATE, l->path, name, -1,
                        "the source bytes of tensor '%s' changed since the interrupted run (size and mtime "
                        "may be the same); start over with -f", name);
    }
    return dsq_fail(d, DSQ_ERR_STATE, l->path, name, -1,
                    "no record of the source bytes tensor '%s' was made from, so reusing it is not safe; "
                    "start over with -f", name);
}

void dsq_ledger_close(dsq_ledger *l, int remove)
{
    if (!l) return;
    if (l->fd >= 0) close(l->fd);
    if (remove && l->path) unlink(l->path);
    for (size_t i = 0; i < l->n; i++) free(l->r[i].name);
    free(l->r);
    free(l->path);
    free(l);
}
