/* sha256sums.c - verify an export directory's SHA256SUMS (see sha256sums.h). */
#include "sha256sums.h"
#include "dsq_file.h"
#include "dsq_sha256.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int listed(char **names, size_t n, const char *s)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(names[i], s)) return 1;
    return 0;
}

static int check_file(const char *dir, const char *name, const uint8_t want[DSQ_SHA256_LEN], dsq_diag *d)
{
    char *p = dsq_path_join(dir, name);
    if (!p) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    if (!dsq_path_exists(p)) {
        int rc = dsq_fail(d, DSQ_ERR_NOT_FOUND, p, NULL, -1, "listed in " DSQ_SUMS_NAME " but missing");
        free(p);
        return rc;
    }
    dsq_map m;
    int rc = dsq_map_open(&m, p, d);
    if (rc == DSQ_OK) {
        uint8_t h[DSQ_SHA256_LEN];
        rc = dsq_sha256_buf(m.data, (size_t)m.size, h);
        dsq_map_close(&m);
        if (rc == DSQ_OK && memcmp(h, want, DSQ_SHA256_LEN) != 0)
            rc = dsq_fail(d, DSQ_ERR_CHECKSUM, p, NULL, -1, "SHA-256 does not match " DSQ_SUMS_NAME);
        else if (rc < 0)
            rc = dsq_fail(d, rc, p, NULL, -1, "cannot hash");
    }
    free(p);
    return rc;
}

void dsq_sums_free(dsq_sums *s)
{
    if (!s) return;
    for (size_t i = 0; i < s->n; i++) free(s->names[i]);
    free(s->names);
    free(s->sha);
    memset(s, 0, sizeof *s);
}

int dsq_sums_parse(const char *txt, size_t len, const char *path, dsq_sums *out, dsq_diag *d)
{
    memset(out, 0, sizeof *out);
    size_t cap = 0, off = 0;
    int rc = DSQ_OK;
    while (rc == DSQ_OK && off < len) {
        const char *line = txt + off, *nl = memchr(line, '\n', len - off);
        size_t ll = nl ? (size_t)(nl - line) : len - off;
        off += ll + 1;
        if (ll == 0) continue;
        char hex[2 * DSQ_SHA256_LEN + 1];
        if (ll < 67 || (line[65] != ' ' && line[65] != '*') || line[64] != ' ') {
            rc = dsq_fail(d, DSQ_ERR_FORMAT, path, NULL, (int64_t)(line - txt), "malformed line");
            break;
        }
        memcpy(hex, line, 64);
        hex[64] = 0;
        char *name = strndup(line + 66, ll - 66);
        if (!name) { rc = dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory"); break; }
        uint8_t want[DSQ_SHA256_LEN];
        if (dsq_sha256_parse_hex(hex, want) < 0 || !name[0] || name[0] == '.' || strchr(name, '/') ||
            strlen(name) != ll - 66 || listed(out->names, out->n, name)) {
            rc = dsq_fail(d, DSQ_ERR_FORMAT, path, NULL, (int64_t)(line - txt), "bad entry '%s'", name);
            free(name);
            break;
        }
        if (out->n == cap) {
            cap = cap ? cap * 2 : 16;
            char **nv = realloc(out->names, cap * sizeof *nv);
            if (nv) out->names = nv;
            uint8_t (*sv)[32] = nv ? realloc(out->sha, cap * sizeof *sv) : NULL;
            if (sv) out->sha = sv;
            if (!nv || !sv) { free(name); rc = dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory"); break; }
        }
        memcpy(out->sha[out->n], want, DSQ_SHA256_LEN);
        out->names[out->n++] = name;
    }
    if (rc < 0) dsq_sums_free(out);
    return rc;
}

int dsq_sums_verify(const char *dir, size_t *nfiles, dsq_diag *d)
{
    char *mp = dsq_path_join(dir, DSQ_SUMS_NAME), *txt = NULL;
    size_t len = 0;
    if (!mp) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    int rc = dsq_read_file(mp, 16u << 20, &txt, &len, d);
    if (rc < 0) {
        free(mp);
        return rc;
    }
    dsq_sums s;
    rc = dsq_sums_parse(txt, len, mp, &s, d);
    for (size_t i = 0; rc == DSQ_OK && i < s.n; i++) rc = check_file(dir, s.names[i], s.sha[i], d);
    if (rc == DSQ_OK) {
        DIR *dh = opendir(dir);
        struct dirent *de;
        while (dh && rc == DSQ_OK && (de = readdir(dh))) {
            if (de->d_name[0] == '.' || !strcmp(de->d_name, DSQ_SUMS_NAME)) continue;
            char *p = dsq_path_join(dir, de->d_name);
            struct stat st;
            if (p && stat(p, &st) == 0 && S_ISREG(st.st_mode) && !listed(s.names, s.n, de->d_name))
                rc = dsq_fail(d, DSQ_ERR_FORMAT, p, NULL, -1, "file not listed in " DSQ_SUMS_NAME);
            free(p);
        }
        if (dh) closedir(dh);
    }
    if (nfiles) *nfiles = s.n;
    dsq_sums_free(&s);
    free(txt);
    free(mp);
    return rc;
}
