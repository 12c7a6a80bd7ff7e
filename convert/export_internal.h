/* export_internal.h - the state of one export run (export.c): the format's
 * plan (xfmt/xfmt.h) plus the files, shards and resume state. Not a public
 * API. */
#ifndef DSQ_EXPORT_INTERNAL_H
#define DSQ_EXPORT_INTERNAL_H

#include "dsq_dpw.h"
#include "export.h"
#include "xfmt.h"

#include <json-c/json.h>

struct dsq_export {
    dsq_xplan p;                  /* the format's decisions, target tensors */
    dsq_export_opts o;
    json_object *meta;            /* parsed metadata */
    int nshards;
    char *dir;                    /* final */
    char *tmpdir;                 /* partial */
    size_t resume_from;
    int committed;
    /* current shard */
    int cur;
    int fd;
    dsq_dpw dpw;                  /* fd's writes, past the page cache */
    uint64_t data_start;
    size_t next;                  /* next source index expected */
    dsq_export_summary sum;
    int keep_partial;             /* finish refused to replace OUT: keep for --resume */
};

/* ---- the output directory (export_dir.c) ---- */

/* The resume state in the partial directory: "<fingerprint> <committed
 * shards>". It stays until the finished export is in place, so a crash at
 * any step of finish leaves what --resume continues from. */
#define DSQ_XDIR_STATE ".dsq-export-state"

enum { XD_ABSENT, XD_DIR, XD_FILE, XD_LINK, XD_OTHER };
/* What path is, without following a link. */
int dsq_xdir_kind(const char *path);
/* "<parent>/.<base><suffix>" for path "<parent>/<base>". */
char *dsq_xdir_sibling(const char *path, const char *suffix);
/* 1: dir is an export dsq wrote (export_dir.c says how that is known);
 * 0: it is not, why says what is in the way; < 0: out of memory. */
int dsq_xdir_export_ours(const char *dir, char *why, size_t wn);
/* Remove the export dir: only the files its SHA256SUMS lists, the manifest
 * and the resume state, then the directory. Refused (DSQ_ERR_EXISTS, nothing
 * removed) when it is not an export dsq wrote. */
int dsq_xdir_remove_export(const char *dir, dsq_diag *d);
/* 1: dir is a partial directory dsq made (regular files only, with the
 * resume state); 0: not, with why. */
int dsq_xdir_partial_ours(const char *dir, char *why, size_t wn);
/* Remove a partial directory dsq made (its regular files, then itself);
 * -1 and nothing removed when it is not one. */
int dsq_xdir_remove_partial(const char *dir);
/* The resume state of dir (a partial directory, or OUT after a crash
 * between the final rename and the state's removal): 1 and filled, 0 when
 * absent or malformed. */
int dsq_xdir_state_read(const char *dir, char *fp, size_t fpn, int *committed);
/* Test hook: DSQ_TEST_KILL_AT=STEP in the environment makes the process
 * raise SIGKILL when it reaches the named step of dsq_export_finish, so
 * tests/cli/export_safety.sh can check that --resume recovers from a crash
 * at every step. Without the variable it does nothing. */
void dsq_xdir_kill_point(const char *step);

#endif
