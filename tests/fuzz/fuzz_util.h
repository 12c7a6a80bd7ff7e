/* fuzz_util.h - helpers shared by the fuzz targets that need files on disk
 * (index parsers, statistics files, calibration data, the engine loader):
 * one scratch directory per process, removed at exit. Header-only so the
 * replay build (one target + replay_driver.c) needs no extra object. */
#ifndef DSQ_FUZZ_UTIL_H
#define DSQ_FUZZ_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char fz_dir[256];

static inline void fz_cleanup(void)
{
    char cmd[300];
    if (!fz_dir[0]) return;
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", fz_dir);
    if (system(cmd) != 0) { /* best effort */ }
}

/* The process's scratch directory (created on first use). */
static inline const char *fz_scratch(void)
{
    if (!fz_dir[0]) {
        const char *t = getenv("TMPDIR");
        snprintf(fz_dir, sizeof fz_dir, "%s/dsq-fuzz-XXXXXX", t && *t ? t : "/tmp");
        if (!mkdtemp(fz_dir)) abort();
        atexit(fz_cleanup);
    }
    return fz_dir;
}

/* fz_scratch()/name, in a static buffer per call site's slot. */
static inline const char *fz_path(int slot, const char *name)
{
    static char p[8][512];
    snprintf(p[slot & 7], sizeof p[0], "%s/%s", fz_scratch(), name);
    return p[slot & 7];
}

static inline void fz_write(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (n && fwrite(data, 1, n, f) != n) abort();
    if (fclose(f) != 0) abort();
}

#endif
