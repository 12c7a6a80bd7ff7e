/* ds_inspect.c - ds-inspect: list (and with --verify, check) a .dsq file,
 * a .safetensors file, or a safetensors model directory.
 *
 *   ds-inspect [--verify] [--json] [-q|-v] [-T N] [-h] [-V] [--] PATH
 *
 * Exit: 0 ok, 1 bad input (unreadable, malformed, checksum mismatch),
 * 2 usage. Text goes to stdout; --json prints one object on stdout instead
 * (also on failure, with an "error" member). */
#include "cli.h"
#include "cli_opt.h"
#include "container.h"
#include "container_set.h"
#include "dsq_file.h"
#include "inspect.h"

#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct inspect_opts {
    int verify;
    const char *path;
} inspect_opts;

enum { O_VERIFY = DSQ_OPT_FIRST };

static const dsq_opt opts[] = {
    { .type = DSQ_OPT_TEXT, .help =
"Usage: ds-inspect [OPTIONS] PATH\n"
"\n"
"List the tensors of a .dsq file, a .safetensors file, a\n"
"*.safetensors.index.json or a model directory: name, dtype or scheme,\n"
"shape, raw and stored bytes, totals, and for .dsq the recipe.\n"
"\n"
"Options:\n" },
    { O_VERIFY, DSQ_OPT_FLAG, "verify", .help = "check every checksum (.dsq: SHA-256 of every payload and\n"
                                               "zero padding; safetensors: full validation including FP8\n"
                                               "scale finiteness)" },
    { DSQ_OPT_JSON, DSQ_OPT_FLAG, "json", .help = "print one JSON object on stdout" },
    { DSQ_OPT_QUIET, DSQ_OPT_FLAG, "quiet", 'q', .left = "-q, -v", .help = "less / more output (repeatable)" },
    { DSQ_OPT_VERBOSE, DSQ_OPT_FLAG, "verbose", 'v' },
    { DSQ_OPT_THREADS, DSQ_OPT_INT, "threads", 'T', "N", 0, DSQ_OPT_THREADS_MAX, "0..4096 (0 = all cores)", .left = "-T N",
      .help = "threads for --verify (0 = all cores, default)" },
    { DSQ_OPT_NO_PROGRESS, DSQ_OPT_FLAG, "no-progress" },
    { DSQ_OPT_HELP, DSQ_OPT_FLAG, "help", 'h', .help = "show this help" },
    { DSQ_OPT_VERSION, DSQ_OPT_FLAG, "version", 'V' },
    { .type = DSQ_OPT_TEXT, .help =
"  -V, --version\n"
"\n"
"Exit status: 0 ok, 1 bad or unreadable input, 2 usage error.\n" },
};
static const dsq_opt_spec spec = { opts, sizeof opts / sizeof opts[0], 12, 0, NULL };

static json_object *json_error(int status, const dsq_diag *d)
{
    json_object *e = json_object_new_object();
    json_object_object_add(e, "status", json_object_new_string(dsq_status_name(status)));
    json_object_object_add(e, "code", json_object_new_int(status));
    char msg[2048];
    if (d && d->status < 0) dsq_diag_format(d, msg, sizeof msg);
    else snprintf(msg, sizeof msg, "%s", dsq_strerror(status));
    json_object_object_add(e, "message", json_object_new_string(msg));
    if (d && d->tensor[0]) json_object_object_add(e, "tensor", json_object_new_string(d->tensor));
    if (d && d->offset >= 0) json_object_object_add(e, "offset", json_object_new_int64(d->offset));
    return e;
}

/* Fail: --json gets an object on stdout, text mode a message on stderr. */
static int fail(const dsq_cli *c, json_object *root, int status, const dsq_diag *d)
{
    if (c->json) {
        if (!root) root = json_object_new_object();
        json_object_object_add(root, "ok", json_object_new_boolean(0));
        json_object_object_add(root, "error", json_error(status, d));
        dsq_cli_json_print(root, 1);
        dsq_cli_fail(c, status, d);
        return DSQ_EXIT_ERROR;
    }
    json_object_put(root);
    return dsq_cli_fail(c, status, d);
}

/* ---- .dsq ---- */

static void verify_progress(void *ctx, uint64_t done, uint64_t total)
{
    dsq_progress *p = ctx;
    (void)total;
    dsq_progress_update(p, done);
}

static int inspect_dsq(const dsq_cli *c, const inspect_opts *o)
{
    dsq_diag d;
    dsq_diag_clear(&d);
    dsq_ctr_set *set;
    int rc = dsq_ctr_set_open(&set, o->path, &d);
    if (rc < 0) return fail(c, NULL, rc, &d);
    json_object *root = NULL;
    if (c->json) root = dsq_inspect_dsq_json(set, o->path);
    else dsq_inspect_dsq_text(stdout, set, o->path, c->level);
    if (o->verify) {
        uint64_t raw = 0, stored = 0;
        for (size_t k = 0; k < dsq_ctr_set_shards(set); k++) {
            uint64_t a, b;
            dsq_ctr_totals(dsq_ctr_set_shard(set, k), &a, &b);
            raw += a;
            stored += b;
        }
        dsq_progress prog;
        dsq_progress_begin(&prog, c, "verify", "B", stored);
        dsq_ctr_verify_opts vo = { .nthreads = c->threads, .cancel = &dsq_cli_interrupted,
                                   .progress = verify_progress, .progress_ctx = &prog };
        dsq_inspect_verify v;
        dsq_diag_clear(&d);
        rc = dsq_inspect_dsq_verify(set, &vo, &v, &d);
        dsq_progress_end(&prog);
        if (c->json) json_object_object_add(root, "verify", dsq_inspect_dsq_verify_json(set, &v));
        else dsq_inspect_dsq_verify_text(stdout, set, &v, c->level);
    }
    dsq_ctr_set_close(set);
    if (rc < 0) return fail(c, root, rc, &d);
    if (c->json) {
        json_object_object_add(root, "ok", json_object_new_boolean(1));
        dsq_cli_json_print(root, 1);
    }
    return DSQ_EXIT_OK;
}

/* ---- safetensors ---- */

static int inspect_st(const dsq_cli *c, const inspect_opts *o)
{
    dsq_diag d;
    dsq_diag_clear(&d);
    dsq_inspect_st *s;
    int rc = dsq_inspect_st_open(&s, o->path, o->verify, &d);
    if (rc < 0) return fail(c, NULL, rc, &d);
    if (c->json) {
        json_object *root = dsq_inspect_st_json(s);
        json_object_object_add(root, "ok", json_object_new_boolean(1));
        dsq_cli_json_print(root, 1);
    } else {
        dsq_inspect_st_text(stdout, s, c->level);
    }
    dsq_inspect_st_close(s);
    return DSQ_EXIT_OK;
}

/* ---- main ---- */

static int ends_with(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcmp(s + a - b, suf) == 0;
}

int main(int argc, char **argv)
{
    dsq_cli c;
    dsq_cli_init(&c, "ds-inspect");
    inspect_opts o = { 0 };
    dsq_args a;
    int rc = dsq_opt_parse(&c, &spec, argc, argv, &a);
    if (rc >= 0) return rc;
    dsq_args_release(&a);
    if (a.npos > 1) return dsq_cli_usage_error(&c, "only one PATH is accepted");
    if (a.npos < 1) return dsq_cli_usage_error(&c, "missing PATH");
    o.path = a.pos[0];
    o.verify = dsq_opt_given(&a, O_VERIFY);

    if (!dsq_path_exists(o.path)) {
        dsq_diag d;
        dsq_diag_clear(&d);
        dsq_fail(&d, DSQ_ERR_NOT_FOUND, o.path, NULL, -1, "no such file or directory");
        return fail(&c, NULL, DSQ_ERR_NOT_FOUND, &d);
    }
    if (dsq_ctr_file_is_dsq(o.path) || ends_with(o.path, ".dsq") || dsq_ctr_set_is_dsq(o.path)) rc = inspect_dsq(&c, &o);
    else rc = inspect_st(&c, &o);
    if (rc == DSQ_EXIT_OK && dsq_cli_interrupted) rc = DSQ_EXIT_ERROR;
    return rc;
}
