/* convert_guard.c - every precondition on a conversion's output that can be
 * checked before any work is done (issue 14: 4, 5, 6).
 *
 * A calibration takes hours; an "output exists" found after it wastes them.
 * So these checks only stat files and list two directories, and the CLI runs
 * them before the first expensive step. dsq_convert_run runs them again, so
 * the library never relies on the caller for them. */
#include "convert.h"
#include "dsq_file.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int has_suffix(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcmp(s + a - b, suf) == 0;
}

static char *input_dir(const char *in)
{
    if (dsq_path_is_dir(in)) return strdup(in);
    const char *slash = strrchr(in, '/');
    if (!slash) return strdup(".");
    if (slash == in) return strdup("/");
    return strndup(in, (size_t)(slash - in));
}

/* out must not be the same file (device + inode: names lie through links,
 * "./" and hard links) as the input or any file conversion reads from the
 * input's directory (shards, index, config, tokenizer files). */
static int check_not_input(const char *out, const char *in, dsq_diag *d)
{
    if (dsq_path_same_file(out, in))
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, out, NULL, -1,
                        "output is an input ('%s'); refusing to overwrite the source", in);
    char *dir = input_dir(in);
    if (!dir) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    DIR *dh = opendir(dir);
    struct dirent *de;
    int rc = DSQ_OK;
    while (dh && rc == DSQ_OK && (de = readdir(dh))) {
        if (!has_suffix(de->d_name, ".safetensors") && !has_suffix(de->d_name, ".json")) continue;
        char *p = dsq_path_join(dir, de->d_name);
        if (!p) { rc = dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory"); break; }
        if (dsq_path_same_file(out, p))
            rc = dsq_fail(d, DSQ_ERR_INVALID_ARG, out, NULL, -1,
                          "output is an input ('%s'); refusing to overwrite the source", p);
        free(p);
    }
    if (dh) closedir(dh);
    free(dir);
    return rc;
}

static int check_single(const dsq_convert_opts *o, dsq_diag *d)
{
    const char *out = o->output;
    struct stat st;
    DSQ_TRY(check_not_input(out, o->input, d));
    if (stat(out, &st) == 0) {
        if (S_ISDIR(st.st_mode))
            return dsq_fail(d, DSQ_ERR_EXISTS, out, NULL, -1,
                            "output is a directory (use --shard-size for sharded output)");
        if (!S_ISREG(st.st_mode))
            return dsq_fail(d, DSQ_ERR_EXISTS, out, NULL, -1,
                            "output is not a regular file: a .dsq is written with seeks and "
                            "renamed into place, so it needs a regular file");
        if (o->resume)
            return dsq_fail(d, DSQ_ERR_EXISTS, out, NULL, -1,
                            "output exists: the earlier run finished, there is nothing to resume");
        if (!o->overwrite)
            return dsq_fail(d, DSQ_ERR_EXISTS, out, NULL, -1, "output exists (use -f to overwrite)");
    }
    return DSQ_OK;
}

static int check_sharded(const dsq_convert_opts *o, dsq_diag *d)
{
    const char *out = o->output;
    if (dsq_path_exists(out) && !dsq_path_is_dir(out)) {
        /* An interrupted single-file run left OUT's partial; --shard-size
         * would start over and leave it (and its journal) behind forever. */
        return dsq_fail(d, DSQ_ERR_EXISTS, out, NULL, -1, "output exists and is not a directory");
    }
    if (o->resume) {
        char *tmp = dsq_outfile_tmp_name(out);
        int single = tmp && dsq_path_exists(tmp);
        free(tmp);
        if (single)
            return dsq_fail(d, DSQ_ERR_STATE, out, NULL, -1,
                            "the interrupted run wrote a single file, not shards: resume it "
                            "without --shard-size, or start over with -f");
    }
    char *idx = dsq_path_join(out, "model.dsq.index.json");
    if (!idx) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    int rc = check_not_input(idx, o->input, d);
    if (rc == DSQ_OK && dsq_path_exists(idx) && o->resume)
        rc = dsq_fail(d, DSQ_ERR_EXISTS, out, NULL, -1,
                      "output exists: the earlier run finished, there is nothing to resume");
    if (rc == DSQ_OK && dsq_path_exists(idx) && !o->overwrite)
        rc = dsq_fail(d, DSQ_ERR_EXISTS, out, NULL, -1, "output exists (use -f to overwrite)");
    free(idx);
    /* Shards of any count already in the directory: -f replaces them. */
    DIR *dh = rc == DSQ_OK ? opendir(out) : NULL;
    struct dirent *de;
    while (dh && rc == DSQ_OK && (de = readdir(dh))) {
        int a, b, end = 0;
        if (sscanf(de->d_name, "model-%5d-of-%5d.dsq%n", &a, &b, &end) != 2 || end <= 0 || de->d_name[end])
            continue;
        char *p = dsq_path_join(out, de->d_name);
        rc = p ? check_not_input(p, o->input, d) : dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
        free(p);
    }
    if (dh) closedir(dh);
    return rc;
}

/* An export directory replaced with -f is removed whole: it must not be,
 * or contain, the input (`ds-quant --format F model/ model/`, or OUT a
 * parent of IN, would delete the source weights). Compared by real path:
 * names lie through links and "./". */
int dsq_export_check_output(const char *out, const char *in, int overwrite, int resume, dsq_diag *d)
{
    if (!out || !*out) return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "no output path");
    if (!in) return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "no input path");
    DSQ_TRY(check_not_input(out, in, d));
    char *ro = realpath(out, NULL), *ri = realpath(in, NULL);
    int rc = DSQ_OK;
    if (ro && ri) {
        size_t n = strlen(ro);
        if (!strcmp(ro, ri) || (!strncmp(ro, ri, n) && (ri[n] == '/' || !strcmp(ro, "/"))))
            rc = dsq_fail(d, DSQ_ERR_INVALID_ARG, out, NULL, -1,
                          "output is an input: the export directory holds '%s'; refusing to replace the source", in);
    }
    free(ro);
    free(ri);
    if (rc == DSQ_OK && dsq_path_exists(out) && !dsq_path_is_dir(out))
        rc = dsq_fail(d, DSQ_ERR_EXISTS, out, NULL, -1, "output exists and is not a directory");
    else if (rc == DSQ_OK && dsq_path_exists(out) && !overwrite && !resume)
        rc = dsq_fail(d, DSQ_ERR_EXISTS, out, NULL, -1, "output exists (use -f to overwrite)");
    return rc;
}

int dsq_convert_check_output(const dsq_convert_opts *o, dsq_diag *d)
{
    if (!o || !o->output || !*o->output)
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "no output path");
    if (!o->input) return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "no input path");
    if (o->export_format && strcmp(o->export_format, "dsq") != 0)   /* a serving export: a directory */
        return dsq_export_check_output(o->output, o->input, o->overwrite, o->resume, d);
    return o->shard_bytes ? check_sharded(o, d) : check_single(o, d);
}
