/* export_dir.c - what an export may remove, and the leftovers of a crash
 * (see export_internal.h).
 *
 * An export is built in "<parent>/.<base>.partial/" and renamed to OUT when
 * complete; with -f an existing OUT is first renamed to "<parent>/.<base>.old/"
 * and removed after the new one is in place. Everything here that removes a
 * file first proves that dsq wrote it, and never follows a symbolic link
 * (the directory is opened with O_NOFOLLOW, entries are examined with
 * fstatat(AT_SYMLINK_NOFOLLOW) and removed with unlinkat, which removes a
 * link itself, never its target):
 *
 *  - an export directory is dsq's when its SHA256SUMS is a manifest in the
 *    form dsq writes (formats/sha256sums.h) that lists a weight file of one
 *    of the formats, and every entry of the directory is a regular file that
 *    manifest lists, the manifest itself, or the resume state an interrupted
 *    finish left (DSQ_XDIR_STATE). Only the files it lists are removed.
 *    An empty directory is dsq's too (there is nothing to remove).
 *  - a partial directory is dsq's when every entry is a regular file and it
 *    holds the resume state (or only temporaries of an interrupted write).
 *
 * Anything else is refused untouched, with the name of what is in the way. */
#include "export_internal.h"
#include "dsq_file.h"
#include "sha256sums.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SUMS_MAX (16u << 20)

void dsq_xdir_kill_point(const char *step)
{
    const char *e = getenv("DSQ_TEST_KILL_AT");
    if (e && !strcmp(e, step)) raise(SIGKILL);
}

char *dsq_xdir_sibling(const char *path, const char *suffix)
{
    char *cp = strdup(path);
    if (!cp) return NULL;
    size_t n = strlen(cp);
    while (n > 1 && cp[n - 1] == '/') cp[--n] = 0;
    char *slash = strrchr(cp, '/');
    const char *base = slash ? slash + 1 : cp;
    size_t dl = slash ? (size_t)(slash - cp) + 1 : 0;
    size_t m = dl + strlen(base) + strlen(suffix) + 2;
    char *out = malloc(m);
    if (out) snprintf(out, m, "%.*s.%s%s", (int)dl, cp, base, suffix);
    free(cp);
    return out;
}

int dsq_xdir_kind(const char *path)
{
    /* "link/" would resolve the link: look at "link" */
    char buf[4096];
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') n--;
    if (n < strlen(path) && n < sizeof buf) {
        memcpy(buf, path, n);
        buf[n] = 0;
        path = buf;
    }
    struct stat st;
    if (lstat(path, &st) != 0) return errno == ENOENT || errno == ENOTDIR ? XD_ABSENT : XD_OTHER;
    if (S_ISLNK(st.st_mode)) return XD_LINK;
    if (S_ISDIR(st.st_mode)) return XD_DIR;
    return S_ISREG(st.st_mode) ? XD_FILE : XD_OTHER;
}

static int open_dir(const char *dir)
{
    return open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
}

static int is_regular_at(int dfd, const char *name)
{
    struct stat st;
    return fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode);
}

static int has_suffix(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

/* The weight file of some format: "<base>.safetensors" or
 * "<base>-NNNNN-of-NNNNN.safetensors". */
static int weight_name(const char *name)
{
    const dsq_xfmt *const *t = dsq_xfmt_table();
    for (size_t i = 0; t[i]; i++) {
        const char *b = t[i]->weights_base;
        size_t n = strlen(b);
        if (strncmp(name, b, n) != 0) continue;
        if (!strcmp(name + n, ".safetensors")) return 1;
        int a, c, end = 0;
        if (sscanf(name + n, "-%5d-of-%5d.safetensors%n", &a, &c, &end) == 2 && end > 0 && !name[n + (size_t)end])
            return 1;
    }
    return 0;
}

static int listed(const dsq_sums *s, const char *name)
{
    for (size_t i = 0; i < s->n; i++)
        if (!strcmp(s->names[i], name)) return 1;
    return 0;
}

/* The manifest of the directory open at dfd, read without following a link
 * and bounded (hostile input). 1 and *s filled: parsed; 0: absent or not a
 * manifest (why says which); < 0: out of memory. */
static int read_sums(int dfd, dsq_sums *s, char *why, size_t wn)
{
    memset(s, 0, sizeof *s);
    int fd = openat(dfd, DSQ_SUMS_NAME, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > SUMS_MAX) {
        snprintf(why, wn, fd < 0 && errno == ENOENT ? "it has no " DSQ_SUMS_NAME
                                                    : "its " DSQ_SUMS_NAME " is not a regular file of at most 16 MiB");
        if (fd >= 0) close(fd);
        return 0;
    }
    size_t len = (size_t)st.st_size, got = 0;
    char *txt = malloc(len + 1);
    if (!txt) {
        close(fd);
        return DSQ_ERR_NOMEM;
    }
    while (got < len) {
        ssize_t r = read(fd, txt + got, len - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    close(fd);
    int rc = dsq_sums_parse(txt, got, DSQ_SUMS_NAME, s, NULL);
    free(txt);
    if (rc == DSQ_ERR_NOMEM) return rc;
    if (rc < 0) {
        snprintf(why, wn, "its " DSQ_SUMS_NAME " is not a manifest dsq writes");
        return 0;
    }
    return 1;
}

/* 1: the directory open at dfd is an export dsq wrote (see the top), with
 * its manifest in *s; 0: it is not (why says what is in the way); < 0: out
 * of memory. */
static int export_ours(int dfd, dsq_sums *s, char *why, size_t wn)
{
    memset(s, 0, sizeof *s);
    int dup_fd = dup(dfd);
    DIR *dh = dup_fd >= 0 ? fdopendir(dup_fd) : NULL;
    if (!dh) {
        if (dup_fd >= 0) close(dup_fd);
        snprintf(why, wn, "it cannot be listed (%s)", strerror(errno));
        return 0;
    }
    struct dirent *de;
    size_t entries = 0;
    char first[3][256];   /* the first names in sort order, to report */
    while ((de = readdir(dh))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        size_t j = entries < 3 ? entries : 3;
        entries++;
        while (j > 0 && strcmp(de->d_name, first[j - 1]) < 0) {
            if (j < 3) memcpy(first[j], first[j - 1], sizeof first[j]);
            j--;
        }
        if (j < 3) snprintf(first[j], sizeof first[j], "%s", de->d_name);
    }
    if (!entries) {   /* an empty directory: nothing to remove */
        closedir(dh);
        return 1;
    }
    int ok = read_sums(dfd, s, why, wn);
    if (!ok) {   /* say what it holds: the file a user would miss */
        size_t l = strlen(why);
        for (size_t j = 0; j < entries && j < 3 && l < wn; j++, l = strlen(why))
            snprintf(why + l, wn - l, "%s'%s'", j ? ", " : " (it holds ", first[j]);
        if (l < wn) snprintf(why + l, wn - l, "%s)", entries > 3 ? ", ..." : "");
    }
    if (ok == 1) {
        int w = 0;
        for (size_t i = 0; i < s->n && !w; i++) w = weight_name(s->names[i]);
        if (!w) {
            snprintf(why, wn, "its " DSQ_SUMS_NAME " lists no weight file of an export");
            ok = 0;
        }
    }
    rewinddir(dh);
    while (ok == 1 && (de = readdir(dh))) {
        const char *n = de->d_name;
        if (!strcmp(n, ".") || !strcmp(n, "..")) continue;
        int known = !strcmp(n, DSQ_SUMS_NAME) || !strcmp(n, DSQ_XDIR_STATE) || listed(s, n);
        if (!known) {
            snprintf(why, wn, "it holds '%.200s', which is not part of the export (not in its " DSQ_SUMS_NAME ")", n);
            ok = 0;
        } else if (!is_regular_at(dfd, n)) {
            snprintf(why, wn, "its '%.200s' is not a regular file", n);
            ok = 0;
        }
    }
    closedir(dh);
    if (ok != 1) dsq_sums_free(s);
    return ok;
}

int dsq_xdir_export_ours(const char *dir, char *why, size_t wn)
{
    int dfd = open_dir(dir);
    if (dfd < 0) {
        snprintf(why, wn, "it cannot be opened as a directory (%s)", strerror(errno));
        return 0;
    }
    dsq_sums s;
    int ok = export_ours(dfd, &s, why, wn);
    dsq_sums_free(&s);
    close(dfd);
    return ok;
}

int dsq_xdir_remove_export(const char *dir, dsq_diag *d)
{
    char why[320] = "";
    int dfd = open_dir(dir);
    if (dfd < 0) return dsq_fail_errno(d, errno, dir, "cannot open the directory");
    dsq_sums s;
    int ok = export_ours(dfd, &s, why, sizeof why);
    if (ok <= 0) {
        close(dfd);
        return ok < 0 ? dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory")
                      : dsq_fail(d, DSQ_ERR_EXISTS, dir, NULL, -1,
                                 "not removed: it is not an export dsq wrote (%s)", why);
    }
    /* The files it lists, then the state, the manifest last: a crash in
     * between leaves a directory still recognised (and removed) as dsq's. */
    for (size_t i = 0; i < s.n; i++) unlinkat(dfd, s.names[i], 0);
    unlinkat(dfd, DSQ_XDIR_STATE, 0);
    unlinkat(dfd, DSQ_SUMS_NAME, 0);
    dsq_sums_free(&s);
    close(dfd);
    if (rmdir(dir) != 0) return dsq_fail_errno(d, errno, dir, "cannot remove the replaced export");
    return DSQ_OK;
}

/* A temporary of an atomic write (dsq_outfile: ".<name>.partial"). */
static int temp_name(const char *n)
{
    return n[0] == '.' && has_suffix(n, ".partial");
}

int dsq_xdir_partial_ours(const char *dir, char *why, size_t wn)
{
    int dfd = open_dir(dir);
    if (dfd < 0) {
        snprintf(why, wn, "it is not a directory (%s)", strerror(errno));
        return 0;
    }
    DIR *dh = fdopendir(dfd);
    if (!dh) {
        close(dfd);
        snprintf(why, wn, "it cannot be listed");
        return 0;
    }
    int ok = 1, state = 0, other = 0;
    struct dirent *de;
    while (ok && (de = readdir(dh))) {
        const char *n = de->d_name;
        if (!strcmp(n, ".") || !strcmp(n, "..")) continue;
        if (!is_regular_at(dirfd(dh), n)) {
            snprintf(why, wn, "its '%.200s' is not a regular file", n);
            ok = 0;
        }
        if (!strcmp(n, DSQ_XDIR_STATE)) state = 1;
        else if (!temp_name(n)) other = 1;
    }
    closedir(dh);
    if (ok && other && !state) {
        snprintf(why, wn, "it has no %s", DSQ_XDIR_STATE);
        ok = 0;
    }
    return ok;
}

int dsq_xdir_remove_partial(const char *dir)
{
    char why[320];
    if (dsq_xdir_kind(dir) != XD_DIR || dsq_xdir_partial_ours(dir, why, sizeof why) != 1) return -1;
    int dfd = open_dir(dir);
    DIR *dh = dfd >= 0 ? fdopendir(dfd) : NULL;
    if (!dh) {
        if (dfd >= 0) close(dfd);
        return -1;
    }
    struct dirent *de;
    while ((de = readdir(dh)))
        if (is_regular_at(dirfd(dh), de->d_name)) unlinkat(dirfd(dh), de->d_name, 0);
    closedir(dh);
    return rmdir(dir) == 0 ? 0 : -1;
}

int dsq_xdir_state_read(const char *dir, char *fp, size_t fpn, int *committed)
{
    char *p = dsq_path_join(dir, DSQ_XDIR_STATE), *txt = NULL;
    size_t len;
    int ok = 0;
    if (p && dsq_xdir_kind(p) == XD_FILE && dsq_read_file(p, 4096, &txt, &len, NULL) == DSQ_OK) {
        char f[129];
        int k;
        if (sscanf(txt, "%128s %d", f, &k) == 2 && k >= 0 && strlen(f) < fpn) {
            snprintf(fp, fpn, "%s", f);
            *committed = k;
            ok = 1;
        }
    }
    free(txt);
    free(p);
    return ok;
}

/* The leftovers of a replacement a crash interrupted: "<parent>/.<base>.old".
 * Between the two renames OUT is absent and .old holds the export it had:
 * it is put back. After them .old is the replaced export: it is removed.
 * Either way only when it is dsq's; anything else is reported. */
static int recover_old(const char *out, dsq_diag *d)
{
    char *old = dsq_xdir_sibling(out, ".old");
    if (!old) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    int rc = DSQ_OK, k = dsq_xdir_kind(old);
    char why[320] = "";
    if (k == XD_ABSENT) {
        /* nothing left */
    } else if (k != XD_DIR) {
        rc = dsq_fail(d, DSQ_ERR_EXISTS, old, NULL, -1,
                      "in the way of replacing %s, and not a directory dsq made; move it away", out);
    } else {
        int ok = dsq_xdir_export_ours(old, why, sizeof why);
        if (ok < 0) {
            rc = dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
        } else if (!ok) {
            rc = dsq_fail(d, DSQ_ERR_EXISTS, old, NULL, -1,
                          "left by an interrupted replacement of %s, but %s: nothing was removed; move it away",
                          out, why);
        } else if (dsq_xdir_kind(out) == XD_ABSENT) {
            if (rename(old, out) != 0)
                rc = dsq_fail_errno(d, errno, old, "cannot put the export an interrupted run moved aside back");
        } else {
            rc = dsq_xdir_remove_export(old, d);
        }
    }
    free(old);
    return rc;
}

int dsq_export_prepare_output(const char *out, int overwrite, int resume, dsq_diag *d)
{
    if (!out || !*out) return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "no output path");
    int k = dsq_xdir_kind(out);
    if (k == XD_LINK)
        return dsq_fail(d, DSQ_ERR_EXISTS, out, NULL, -1,
                        "output is a symbolic link: an export is renamed into place and never written or "
                        "replaced through a link; name the directory itself");
    if (k == XD_FILE || k == XD_OTHER)
        return dsq_fail(d, DSQ_ERR_EXISTS, out, NULL, -1, "output exists and is not a directory");
    DSQ_TRY(recover_old(out, d));
    char *tmp = dsq_xdir_sibling(out, ".partial");
    if (!tmp) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    int tk = dsq_xdir_kind(tmp), rc = DSQ_OK;
    char why[320] = "";
    if (tk != XD_ABSENT && (tk != XD_DIR || dsq_xdir_partial_ours(tmp, why, sizeof why) != 1))
        rc = dsq_fail(d, DSQ_ERR_EXISTS, tmp, NULL, -1,
                      "in the way of the partial export, and not one dsq made (%s): nothing was removed; "
                      "move it away", tk == XD_DIR ? why : tk == XD_LINK ? "a symbolic link" : "not a directory");
    if (rc == DSQ_OK && dsq_xdir_kind(out) == XD_DIR) {
        if (!overwrite && !resume) {
            rc = dsq_fail(d, DSQ_ERR_EXISTS, out, NULL, -1, "output exists (use -f to overwrite)");
        } else {
            int ok = dsq_xdir_export_ours(out, why, sizeof why);
            char fp[130];
            int n;
            if (ok < 0)
                rc = dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
            else if (!ok)
                rc = dsq_fail(d, DSQ_ERR_EXISTS, out, NULL, -1,
                              "%s replaces only an export dsq wrote, and %s: nothing was changed",
                              overwrite ? "-f" : "--resume", why);
            else if (!overwrite && tk == XD_ABSENT && !dsq_xdir_state_read(out, fp, sizeof fp, &n))
                rc = dsq_fail(d, DSQ_ERR_EXISTS, out, NULL, -1,
                              "output exists: the earlier run finished, there is nothing to resume "
                              "(use -f to replace it)");
        }
    }
    free(tmp);
    return rc;
}
