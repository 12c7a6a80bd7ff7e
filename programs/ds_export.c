/* ds_export.c - ds-export: a .dsq (file or sharded set) -> the model
 * directory a serving engine loads (ascend / awq / compressed-tensors).
 * The work is dsq_export_from_dsq (convert/export.h); this file parses
 * options and prints. */
#include "cli.h"
#include "cli_opt.h"
#include "dsq_json.h"
#include "dsq_version.h"
#include "export.h"

#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { O_FORMAT = DSQ_OPT_FIRST, O_SHARD, O_RESUME, O_FORCE };

static const dsq_opt opts[] = {
    { .type = DSQ_OPT_TEXT, .help =
"Usage: ds-export --format F [options] IN.dsq OUT\n"
"\n"
"Unpack a .dsq (a file, or a sharded directory / model.dsq.index.json) into a\n"
"model directory that a serving engine loads as it is. Every tensor's SHA-256\n"
"is checked while reading. The result is byte-identical to\n"
"ds-quant --format F with the same conversion options.\n"
"\n"
"Formats:\n"
"  ascend               msModelSlim AscendV1 (vllm-ascend --quantization ascend, MindIE)\n"
"  awq                  AutoAWQ GEMM (vLLM): awq-w4a16 weights\n"
"  compressed-tensors   vLLM / llm-compressor: awq-w4a16, w8a8-dynamic, w4a8\n"
"\n"
"Options:\n" },
    { O_FORMAT, DSQ_OPT_STR, "format", 0, "F", .help = "output format (required)" },
    { O_SHARD, DSQ_OPT_SIZE, "shard-size", 0, "SIZE", 1,
      .help = "bound each safetensors shard (K/M/G suffixes; default\n4G ascend, 5G otherwise)" },
    { O_RESUME, DSQ_OPT_FLAG, "resume", .help = "continue an interrupted export" },
    { O_FORCE, DSQ_OPT_FLAG, "force", 'f', .help = "replace an existing OUT" },
    { DSQ_OPT_JSON, DSQ_OPT_FLAG, "json", .help = "one JSON summary on stdout" },
    DSQ_OPT_THREADS_ROW("accepted for symmetry (reading is single-threaded)"),
    { DSQ_OPT_QUIET, DSQ_OPT_FLAG, "quiet", 'q', .left = "-q / -v", .help = "less / more output" },
    { DSQ_OPT_VERBOSE, DSQ_OPT_FLAG, "verbose", 'v' },
    { DSQ_OPT_HELP, DSQ_OPT_FLAG, "help", 'h' },
    { DSQ_OPT_VERSION, DSQ_OPT_FLAG, "version", 'V' },
    { .type = DSQ_OPT_TEXT, .help =
"  -h, --help / -V, --version\n"
"\n"
"Exit status: 0 ok, 1 error, 2 usage or a combination the format cannot hold.\n" },
};
static const dsq_opt_spec spec = { opts, sizeof opts / sizeof opts[0], 20, 0, NULL };

static void on_progress(void *ctx, size_t done, size_t total)
{
    dsq_progress *p = ctx;
    p->total = total;
    dsq_progress_update(p, done);
}

int main(int argc, char **argv)
{
    dsq_cli cli;
    dsq_cli_init(&cli, "ds-export");
    dsq_args a;
    int rc = dsq_opt_parse(&cli, &spec, argc, argv, &a);
    if (rc >= 0) return rc;
    dsq_args_release(&a);
    dsq_export_opts o;
    memset(&o, 0, sizeof o);
    o.tool = "ds-export " DSQ_VERSION_STRING;
    o.format = dsq_opt_str(&a, O_FORMAT);
    o.shard_bytes = dsq_opt_u64(&a, O_SHARD);
    o.resume = dsq_opt_given(&a, O_RESUME);
    o.overwrite = dsq_opt_given(&a, O_FORCE);
    if (o.format && !dsq_export_format_known(o.format))
        return dsq_cli_usage_error(&cli, "unknown --format '%s' (ascend, awq, compressed-tensors)", o.format);
    if (a.npos != 2) return dsq_cli_usage_error(&cli, "expected IN.dsq and OUT");
    if (!o.format) return dsq_cli_usage_error(&cli, "no --format given (ascend, awq, compressed-tensors)");
    if (o.resume && o.overwrite) return dsq_cli_usage_error(&cli, "--resume and -f are exclusive");
    const char *in = a.pos[0];
    o.output = a.pos[1];

    dsq_diag d;
    dsq_diag_clear(&d);
    dsq_progress pr;
    memset(&pr, 0, sizeof pr);
    int prog = cli.progress && !cli.json && cli.level >= 2;
    if (prog) dsq_progress_begin(&pr, &cli, "export", "", 0);
    dsq_export_hooks h = { .cancel = &dsq_cli_interrupted, .progress = prog ? on_progress : NULL, .progress_ctx = &pr };
    dsq_export_summary s;
    double t0 = dsq_now();
    rc = dsq_export_from_dsq(in, &o, &h, &s, &d);
    if (prog) dsq_progress_end(&pr);
    if (rc < 0) {
        if (cli.json) {
            char msg[1024];
            dsq_diag_format(&d, msg, sizeof msg);
            json_object *j = json_object_new_object();
            dsq_json_put_str(j, "tool", "ds-export");
            dsq_json_put_str(j, "status", "error");
            dsq_json_put_str(j, "code", dsq_status_name(rc));
            dsq_json_put_str(j, "message", msg);
            dsq_cli_json_print(j, 0);
        }
        int code = dsq_cli_fail(&cli, rc, &d);
        if (rc == DSQ_ERR_INTERRUPTED) dsq_cli_error(&cli, "run again with --resume to continue");
        /* a combination the format cannot hold; -f or --resume refused
         * because OUT (or what is in its way) is not an export dsq wrote */
        return rc == DSQ_ERR_UNSUPPORTED || (rc == DSQ_ERR_EXISTS && (o.overwrite || o.resume)) ? DSQ_EXIT_USAGE
                                                                                               : code;
    }
    if (cli.json) {
        json_object *j = dsq_cli_json_tool(&cli, "ok");
        dsq_json_put_str(j, "input", in);
        dsq_json_put_str(j, "output", o.output);
        dsq_json_put_str(j, "format", s.format);
        dsq_json_put_u64(j, "source_tensors", s.src_tensors);
        dsq_json_put_u64(j, "tensors", s.out_tensors);
        dsq_json_put_int(j, "weight_files", s.shards);
        dsq_json_put_u64(j, "weight_bytes", s.weight_bytes);
        dsq_json_put_u64(j, "bytes_out", s.bytes_out);
        dsq_json_put_u64(j, "dequantized_to_float", s.dequantized);
        dsq_json_put_u64(j, "dropped", s.dropped);
        dsq_json_put_u64(j, "resumed", s.resumed);
        dsq_json_put_num(j, "max_scale_rel_rounding", s.max_scale_rel_rounding, "%.6g");
        dsq_json_put_num(j, "seconds", dsq_now() - t0, "%.3f");
        dsq_json_put_u64(j, "peak_rss_bytes", dsq_peak_rss());
        dsq_cli_json_print(j, 0);
    } else if (cli.level >= 2) {
        printf("%s: %s export, %zu tensors in %d weight file(s), %.2f MB", o.output, s.format, s.out_tensors,
               s.shards, (double)s.bytes_out / 1e6);
        if (s.dequantized) printf(", %zu quantized tensors written as float (the target keeps them unquantized)",
                                  s.dequantized);
        if (s.dropped) printf(", %zu MTP-layer tensors dropped", s.dropped);
        if (s.max_scale_rel_rounding > 0) printf(", scales rounded to 16 bits (max relative change %.3g)",
                                                 s.max_scale_rel_rounding);
        printf(" in %.2f s\n", dsq_now() - t0);
    }
    return DSQ_EXIT_OK;
}
