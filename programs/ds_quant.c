/* ds_quant.c - ds-quant: Hugging Face safetensors (BF16/F16/F32 or
 * DeepSeek FP8-block) -> .dsq with W8A8 / W4A8 / AWQ-w4a16 weights, or a
 * serving export. The work is dsq_quantize_run (convert/quantize.h); this
 * file parses options and prints. */
#include "cli.h"
#include "cli_opt.h"
#include "container.h"
#include "dsq_json.h"
#include "dsq_version.h"
#include "export.h"
#include "quant_report.h"
#include "quantize.h"

#include <json-c/json.h>
#include <malloc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    O_SCHEME = DSQ_OPT_FIRST, O_RECIPE, O_KEEP, O_SCHEME_FOR, O_GROUP, O_DRY, O_ZSTD, O_NONFINITE, O_RESUME,
    O_CLIP, O_SHARD, O_MEM, O_SAMPLE, O_CHECKPOINT, O_NOJOURNAL, O_CALIB, O_CSAMPLES, O_CSEQLEN, O_SEED,
    O_ROTATE, O_ROTSEED, O_SMOOTHM, O_MOECALIB, O_MINTOK, O_ALPHA, O_NOSMOOTH, O_NOCLIP, O_SAVESTATS, O_STATS, O_FORMAT, O_GPTQ, O_GPTQDAMP,
    O_CALIBRAM, O_ATTNBLOCK, O_CROWS, O_CEROWS, O_ROLLBACK, O_SEARCH, O_NOSEARCH, O_FORCE
};

/* What an option needs of the run; options whose needs are not met are
 * refused (exit 2) instead of ignored. Checked in this order. */
enum { N_CALIB = 1, N_CALIB_OR_STATS = 2, N_SQ = 4, N_SMOOTH = 8, N_INT4 = 16, N_WRITE = 32, N_GPTQ = 64,
       N_JOURNAL = 128, N_ROTATE = 256 };
static const dsq_opt_need needs[] = {
    { N_CALIB, "%s shapes the calibration data: it needs --calib" },
    { N_CALIB_OR_STATS, "%s is a calibration option: it needs --calib (or --stats)" },
    { N_SQ, "%s is for SmoothQuant (w8a8, w4a8); awq-w4a16 searches AWQ scales" },
    { N_SMOOTH, "%s is for SmoothQuant (w8a8, w4a8); awq-w4a16 searches AWQ scales" },
    { N_INT4, "%s is for int4 schemes (the clip search); w8a8 and w8a8-dynamic have none" },
    { N_ROTATE, "%s seeds the rotation: it needs --rotate quarot" },
    { N_WRITE, "%s has nothing to do in a --dry-run (nothing is written)" },
    { N_GPTQ, "%s sets GPTQ's dampening: it needs --gptq" },
    { N_JOURNAL, "%s sets the resume journal's interval: not with --no-journal" },
};

enum { HELP_SCHEMES = 1 };

/* the table is laid out by hand, one row per option */
/* clang-format off */
static const dsq_opt opt_table[] = {
    { .type = DSQ_OPT_TEXT, .help =
"Usage: ds-quant --scheme SCHEME [options] IN OUT\n"
"       ds-quant --recipe NAME [options] IN OUT\n"
"       ds-quant --dry-run --scheme SCHEME [options] IN\n"
"\n"
"Convert a Hugging Face checkpoint to a .dsq file in one streaming pass.\n"
"IN is a .safetensors file, a *.safetensors.index.json, or a model directory\n"
"(BF16, F16, F32, or DeepSeek FP8 with 128x128 block scales, dequantized on\n"
"the fly). OUT is a .dsq file, or with --shard-size a directory of .dsq shards\n"
"plus model.dsq.index.json. config.json, tokenizer files and\n"
"generation_config.json are carried into the output metadata.\n"
"\n"
"Schemes:\n" },
    { HELP_SCHEMES, DSQ_OPT_TEXT },
    { .type = DSQ_OPT_TEXT, .help =
"\n"
"Recipe (first matching rule wins; then the recipe's role table):\n" },
    { O_SCHEME, DSQ_OPT_STR, "scheme", 0, "S", .help = "scheme for attention, MLP, expert and shared-expert\n"
      "linears; embeddings, norms, router, router bias,\nlm_head, biases and MTP eh_proj are kept" },
    { O_RECIPE, DSQ_OPT_STR, "recipe", 0, "NAME", .help = "preset instead of --scheme (msModelSlim's DeepSeek recipes):\n"
      "deepseek-w4a8: attention/dense/shared MLP w8a8-dynamic,\nrouted experts w4a8, MTP experts w8a8-dynamic, kv_b_proj kept;\n"
      "deepseek-w8a8 (needs --calib): attention w8a8 static,\nevery MLP w8a8-dynamic, kv_b_proj and router kept" },
    { O_KEEP, DSQ_OPT_STR, "keep", 0, "REGEX", .help = "keep matching tensors in their float type (repeatable)" },
    { O_SCHEME_FOR, DSQ_OPT_STR, "scheme-for", 0, "REGEX=S", .help = "use scheme S for matching tensors (repeatable)" },
    { O_GROUP, DSQ_OPT_INT, "group-size", 0, "G", 0, 1 << 24, .help = "int4 group size: 0 = per output channel, or a\n"
      "multiple of 64 (default: w4a8 0, awq-w4a16 128)" },
    { O_CLIP, DSQ_OPT_FLAG, "clip-search", .help = "per-group MSE clip search (AutoAWQ-style, RTN)" },
    { O_SEARCH, DSQ_OPT_FLAG, "search", .left = "--search, --no-search", .help =
      "int4 (awq-w4a16, w4a8): search each group's scale\n(and zero) by weighted least squares, or keep the\n"
      "plain min/max range (RTN, clip and GPTQ steps alike);\ndefault: w4a8 RTN searches (~1.5 CPU-s per GB), the\n"
      "rest min/max (awq-w4a16, calibrated w4a8, --gptq)" },
    { O_NOSEARCH, DSQ_OPT_FLAG, "no-search" },
    { O_NONFINITE, DSQ_OPT_FLAG, "allow-nonfinite", .help = "convert NaN as 0 and saturate Inf instead of failing" },
    { O_ROTATE, DSQ_OPT_CHOICE, "rotate", 0, "none|quarot", .choices = "none|quarot", .needs = N_WRITE, .def = "none", .help =
      "quarot: rotate the model first (seeded Hadamard rotations fused\n"
      "into the weights, norms folded; msModelSlim's QuaRot for DeepSeek),\n"
      "kept at OUT.rot until the run succeeds; any scheme, recipe, format" },
    { O_ROTSEED, DSQ_OPT_SIZE, "rotate-seed", 0, "S", 0, .needs = N_ROTATE, .help = "the rotations' random signs", .def = "1234" },
    { .type = DSQ_OPT_TEXT, .help =
"\n"
"Calibration (scales from what the model computes; folded into the weights, so\n"
"the output stays a plain model of its scheme):\n" },
    { O_CALIB, DSQ_OPT_STR, "calib", 0, "FILE", .help =
      "calibration text (plain text, paragraphs split at blank\nlines, or JSONL with a \"text\" field). awq-w4a16: AWQ\n"
      "scale search + clip search; w8a8: SmoothQuant + static\nactivation scale/offset (w8a8 needs --calib or --stats);\n"
      "w4a8: smoothing (alpha searched) + int4 clip search;\nw8a8-dynamic: smoothing, alpha searched per group on\n"
      "the simulated int8 output (s = 1 included)" },
    { O_CSAMPLES, DSQ_OPT_INT, "calib-samples", 0, "N", 1, 1 << 20, .needs = N_CALIB, .help =
      "samples, at most: shorter data gives fewer, with a\nwarning, down to 4096 tokens", .def = "128" },
    { O_CSEQLEN, DSQ_OPT_INT, "calib-seqlen", 0, "L", 2, 1 << 20, .needs = N_CALIB,
      .help = "tokens per sample", .def = "512" },
    { O_SEED, DSQ_OPT_SIZE, "seed", 0, "S", 0, .needs = N_CALIB, .help = "sampling seed", .def = "0" },
    { O_MOECALIB, DSQ_OPT_CHOICE, "moe-calib", 0, "all|routed", .choices = "all|routed", .needs = N_CALIB_OR_STATS,
      .help = "all: every token through every expert for statistics\n"
      "(the output still follows the router); routed: experts\nwith fewer than --min-expert-tokens tokens fall back\n"
      "to round-to-nearest, with a warning naming them", .def = "routed" },
    { O_MINTOK, DSQ_OPT_INT, "min-expert-tokens", 0, "N", 0, 1 << 30, .needs = N_CALIB_OR_STATS, .help = "", .def = "16" },
    { O_ALPHA, DSQ_OPT_FLOAT, "alpha", 0, "A", 0, 1, .needs = N_CALIB_OR_STATS | N_SQ, .help =
      "SmoothQuant migration strength 0..1 (given, it fixes\nw4a8's and w8a8-dynamic's alpha instead of searching\nit)", .def = "0.5" },
    { O_SMOOTHM, DSQ_OPT_CHOICE, "smooth", 0, "sq|flex", .choices = "sq|flex", .needs = N_CALIB_OR_STATS | N_SQ, .help =
      "smoothing of w8a8 / w8a8-dynamic groups: sq (SmoothQuant alpha)\n"
      "or flex (msModelSlim's flex smoothing: alpha and beta searched\n"
      "in two stages on each group's quantized output)", .def = "sq" },
    { O_NOSMOOTH, DSQ_OPT_FLAG, "no-smooth", .needs = N_CALIB_OR_STATS | N_SMOOTH, .help =
      "w8a8/w4a8/w8a8-dynamic: static ranges / clipping only,\nno smoothing; with --gptq also awq-w4a16: GPTQ without\n"
      "AWQ scales" },
    { O_NOCLIP, DSQ_OPT_FLAG, "no-clip", .needs = N_CALIB_OR_STATS | N_INT4,
      .help = "calibrated int4: skip the clip search" },
    { O_ATTNBLOCK, DSQ_OPT_INT, "awq-attn-block", 0, "N", 0, 64, .needs = N_CALIB, .help =
      "awq-w4a16: score the attention-input scales on the MLA block\noutput over N calibration sequences, 512 tokens each\n"
      "(default 4; 0: on the q_a / kv_a outputs)" },
    { O_CROWS, DSQ_OPT_INT, "calib-rows", 0, "N", 1, 1 << 20, .needs = N_CALIB, .help =
      "rows sampled per non-expert linear input for the scale,\nalpha and clip searches", .def = "512" },
    { O_CEROWS, DSQ_OPT_INT, "calib-expert-rows", 0, "N", 1, 1 << 20, .needs = N_CALIB, .help =
      "the same per routed expert (at V3's 256 experts each\n64 rows hold ~0.6 GB per layer)", .def = "64" },
    { O_GPTQ, DSQ_OPT_FLAG, "gptq", .needs = N_CALIB_OR_STATS, .help =
      "GPTQ rounding of every int8/int4 linear (all integer\nschemes, w8a8-dynamic included; the format is unchanged):\n"
      "error compensation from each input's Hessian X^T X,\non the AWQ/SmoothQuant-scaled weights after the clip\n"
      "choice; columns in order (no act-order: dsq, AutoAWQ\nGEMM, Ascend and compressed-tensors outputs hold no\n"
      "permutation); needs --calib (or --stats of a --gptq run)" },
    { O_GPTQDAMP, DSQ_OPT_FLOAT, "gptq-damp", 0, "D", 1e-6, 10, .needs = N_GPTQ,
      .help = "GPTQ dampening, fraction of mean diag(H)", .def = "0.01" },
    { O_ROLLBACK, DSQ_OPT_INT, "rollback", 0, "N", 0, 1 << 20, .needs = N_CALIB_OR_STATS, .help =
      "keep the N most quantization-sensitive modules in their\nfloat type: each quantized linear's relative output\n"
      "error as converted (scales, clip, GPTQ, the scheme's\nactivation rounding) on its calibration rows, ranked\n"
      "over the model; gate+up and q_a+kv_a go together,\nrouted experts never; --json and the metadata list them" },
    { O_CALIBRAM, DSQ_OPT_SIZE, "calib-ram", 0, "SIZE", 1, .needs = N_CALIB, .help =
      "calibration memory (K/M/G): hidden states kept in RAM\n(beyond it they spill to files) and GPTQ solves run at\n"
      "once (~0.73 GB each for a V3 expert)", .def = "2G" },
    { O_SAVESTATS, DSQ_OPT_STR, "save-stats", 0, "F", .needs = N_CALIB | N_WRITE, .help =
      "keep the statistics (and searched scales) in F; F is\nalso the per-layer checkpoint that --resume continues\n"
      "(default: OUT.calib.dsq, removed after success)" },
    { O_STATS, DSQ_OPT_STR, "stats", 0, "F", .help = "reuse statistics from --save-stats (no forward pass)" },
    { .type = DSQ_OPT_TEXT, .help =
"\n"
"Output and run:\n" },
    { O_FORMAT, DSQ_OPT_STR, "format", 0, "F", .help =
      "dsq (default): the .dsq container. ascend: msModelSlim\nAscendV1 directory (vllm-ascend / MindIE); awq: AutoAWQ\n"
      "GEMM directory (vLLM); compressed-tensors: vLLM /\nllm-compressor directory. OUT is then a directory of\n"
      "safetensors shards (--shard-size bounds them), config.json,\ntokenizer files and SHA256SUMS, renamed into place when\n"
      "complete. Combinations the target cannot load exit 2\n(docs/serving-exports.md)" },
    { O_FORCE, DSQ_OPT_FLAG, "force", 'f', .help = "overwrite an existing output" },
    { O_RESUME, DSQ_OPT_FLAG, "resume", .needs = N_WRITE, .help =
      "continue an interrupted conversion (byte-identical\nto an uninterrupted run). Every run keeps a resume\n"
      "journal next to OUT until it finishes" },
    { O_NOJOURNAL, DSQ_OPT_FLAG, "no-journal", .needs = N_WRITE, .help =
      "no resume journal (~10% less CPU; an interrupted\nrun then starts over)" },
    { O_CHECKPOINT, DSQ_OPT_FLOAT, "checkpoint-interval", 0, "S", 0, 1e6, .needs = N_WRITE | N_JOURNAL },
    { O_SHARD, DSQ_OPT_SIZE, "shard-size", 0, "SIZE", 1, .help =
      "write OUT as a directory of shards of at most SIZE\n(K/M/G suffixes) each" },
    { O_ZSTD, DSQ_OPT_INT, "zstd-level", 0, "N", 0, DSQ_CTR_LEVEL_MAX, .help = "0 = no compression, 1 (fastest) .. 22", .def = "1" },
    DSQ_OPT_THREADS_ROW("worker threads (default and 0: all cores)"),
    { O_MEM, DSQ_OPT_SIZE, "mem-budget", 0, "SIZE", 1, .help =
      "memory for outputs waiting to be written (default\n512M or 64M per thread, whichever is more)" },
    { O_SAMPLE, DSQ_OPT_INT, "error-sample", 0, "N", 1, 1 << 20, .help =
      "measure quantization error on 1 row in N (1 = every\nrow)", .def = "16" },
    { O_DRY, DSQ_OPT_FLAG, "dry-run", .help = "print the plan (tensor -> scheme), estimated output\n"
                                              "size and peak memory; write nothing (OUT optional)" },
    { DSQ_OPT_JSON, DSQ_OPT_FLAG, "json", .help = "one JSON object on stdout (summary or plan)" },
    { DSQ_OPT_NO_PROGRESS, DSQ_OPT_FLAG, "no-progress", .help = "no progress line on stderr" },
    { DSQ_OPT_QUIET, DSQ_OPT_FLAG, "quiet", 'q', .left = "-q, --quiet / -v, --verbose  ",
      .help = "less / more output (repeatable)" },
    { DSQ_OPT_VERBOSE, DSQ_OPT_FLAG, "verbose", 'v' },
    { DSQ_OPT_HELP, DSQ_OPT_FLAG, "help", 'h', .help = "this help" },
    { DSQ_OPT_VERSION, DSQ_OPT_FLAG, "version", 'V', .help = "version" },
    { .type = DSQ_OPT_TEXT, .help =
"\n"
"Exit status: 0 ok, 1 error (bad input, i/o, interrupted), 2 usage.\n" },
};
/* clang-format on */

static void help_schemes(FILE *f, int id)
{
    (void)id;
    for (int i = 0; i < dsq_scheme_count(); i++) {
        const dsq_scheme *s = dsq_scheme_at(i);
        if (!s) continue;
        fprintf(f, "  %-14s %s%s%s%s\n", s->name, s->description ? s->description : "",
                s->alias ? " (alias " : "", s->alias ? s->alias : "", s->alias ? ")" : "");
    }
    fprintf(f, "  %-14s leave in the source float type\n", "keep");
}

static const dsq_opt_spec spec = { opt_table, sizeof opt_table / sizeof opt_table[0], 24, 0, help_schemes };

/* ---- output helpers ---- */


static void json_error(const dsq_cli *cli, int status, const dsq_diag *d)
{
    if (!cli->json) return;
    char buf[2048];
    if (d && d->status < 0) dsq_diag_format(d, buf, sizeof buf);
    else snprintf(buf, sizeof buf, "%s", dsq_strerror(status));
    json_object *o = dsq_cli_json_tool(cli, "error"), *e = json_object_new_object();
    dsq_json_put_str(e, "code", dsq_status_name(status));
    dsq_json_put_str(e, "message", buf);
    json_object_object_add(o, "error", e);
    dsq_cli_json_print(o, 0);
}

/* ---- progress and reports (dsq_quantize_run's hooks) ---- */

typedef struct run_ctx {
    const dsq_cli *cli;
    const char *calib_path, *input;
    dsq_progress calib_p, conv_p;
    int calib_begun, conv_begun;
} run_ctx;

static void on_progress(void *ctx, const dsq_convert_progress *p)
{
    run_ctx *rx = ctx;
    if (!rx->conv_begun) {
        dsq_progress_begin(&rx->conv_p, rx->cli, "ds-quant", "B", p->bytes_total);
        rx->conv_begun = 1;
    }
    dsq_progress_update(&rx->conv_p, p->bytes_done);
}

static void on_calib_progress(void *ctx, const dsq_calib_progress *p)
{
    run_ctx *rx = ctx;
    if (p->layer < 0 || p->sample < 0) return;
    if (!rx->calib_begun) {
        dsq_progress_begin(&rx->calib_p, rx->cli, "calibrating", "samples",
                           (uint64_t)p->n_layers * (uint64_t)p->n_samples);
        rx->calib_begun = 1;
    }
    dsq_progress_update(&rx->calib_p, (uint64_t)p->layer * (uint64_t)p->n_samples + (uint64_t)p->sample + 1);
}

static void on_note(void *ctx, int level, const char *msg)
{
    run_ctx *rx = ctx;
    if (level == 0) dsq_cli_warn(rx->cli, "%s", msg);
    else dsq_cli_info(rx->cli, level, "%s", msg);
}

static void no_config_warning(const dsq_cli *cli, const char *input)
{
    /* only a single .safetensors file gets here */
    dsq_cli_warn(cli, "no config.json next to '%s': a tensor-only conversion (shapes unchecked, the MTP "
                      "layer found by tensor names only); ds-eval cannot run the output", input);
}

static void on_calibrated(void *ctx, const dsq_calib_result *r)
{
    run_ctx *rx = ctx;
    if (rx->calib_begun) dsq_progress_end(&rx->calib_p);
    rx->calib_begun = 0;
    dsq_calib_totals ct;
    dsq_calib_get_totals(r, &ct);
    if (ct.samples > 0 && ct.samples < ct.samples_requested)
        dsq_cli_warn(rx->cli, "%s: the calibration data fills only %d samples of %d tokens: using %d x %d = %llu "
                              "tokens instead of the %d x %d asked for", rx->calib_path, ct.samples, ct.seqlen,
                     ct.samples, ct.seqlen, (unsigned long long)ct.tokens, ct.samples_requested, ct.seqlen);
    if (!rx->cli->json) dsq_calib_notes(r, on_note, rx);
}

static void on_planned(void *ctx, const dsq_convert *c)
{
    run_ctx *rx = ctx;
    if (!dsq_convert_have_config(c) && !rx->cli->json) no_config_warning(rx->cli, rx->input);
    const dsq_plan *pl = dsq_convert_plan(c);
    dsq_cli_info(rx->cli, 3, "%zu tensors, %.3f GB in, about %.3f GB out before zstd, peak memory about %.0f MB",
                 pl->n, (double)pl->src_bytes / 1e9, (double)pl->est_bytes / 1e9,
                 (double)dsq_convert_peak_estimate(c) / 1e6);
}

/* ---- main ---- */

int main(int argc, char **argv)
{
    dsq_cli cli;
    dsq_cli_init(&cli, "ds-quant");
    /* Tensor-sized buffers come and go tens of thousands of times: keep them
     * in the heap instead of fresh mmaps (page faults + zeroing each time).
     * Memory use is bounded by the pipeline either way. */
    mallopt(M_MMAP_THRESHOLD, 256 << 20);
    mallopt(M_TRIM_THRESHOLD, 512 << 20);
    dsq_args a;
    int rc = dsq_opt_parse(&cli, &spec, argc, argv, &a);
    if (rc >= 0) return rc;
    dsq_convert_opts o;
    dsq_convert_opts_init(&o);
    dsq_calib_opts co;
    dsq_calib_opts_init(&co);
    co.data.take_available = 1;   /* --calib-samples is a cap, as in AutoAWQ (floor: calib_data.h) */
    /* the table's defaults are the library's (dsq_convert_opts_init, dsq_calib_opts_init) */
    const dsq_opt_lib lib[] = {
        { O_ZSTD, o.zstd_level },
        { O_SAMPLE, o.error_sample },
        { O_CSAMPLES, co.data.n_samples },
        { O_CSEQLEN, co.data.seqlen },
        { O_SEED, (double)co.data.seed },
        { O_MOECALIB, co.moe_calib_all ? 0 : 1 },
        { O_CALIBRAM, (double)co.ram_limit },
        { O_MINTOK, co.min_expert_tokens },
        { O_ALPHA, co.alpha },
        { O_SMOOTHM, co.smooth_method == DSQ_SMOOTH_FLEX },
        { O_CROWS, co.awq_tokens },
        { O_CEROWS, co.awq_expert_tokens },
        { O_GPTQDAMP, co.gptq_damp },
    };
    if ((rc = dsq_opt_check_lib(&cli, &spec, lib, sizeof lib / sizeof lib[0])) >= 0) return dsq_args_release(&a), rc;
    const char *scheme = dsq_opt_str(&a, O_SCHEME), *preset = dsq_opt_str(&a, O_RECIPE);
    int group = dsq_opt_given(&a, O_GROUP) ? dsq_opt_int(&a, O_GROUP) : DSQ_GROUP_DEFAULT, dry = dsq_opt_given(&a, O_DRY);
    o.threads = cli.threads;
    o.overwrite = dsq_opt_given(&a, O_FORCE);
    o.zstd_level = dsq_opt_int(&a, O_ZSTD);
    o.allow_nonfinite = dsq_opt_given(&a, O_NONFINITE);
    o.resume = dsq_opt_given(&a, O_RESUME);
    o.clip_search = dsq_opt_given(&a, O_CLIP);
    if (dsq_opt_given(&a, O_SEARCH) || dsq_opt_given(&a, O_NOSEARCH))   /* the last one given wins */
        o.range_search = co.range_search = a.v[O_SEARCH].pos > a.v[O_NOSEARCH].pos ? 1 : -1;
    if (dsq_opt_given(&a, O_SHARD)) o.shard_bytes = dsq_opt_u64(&a, O_SHARD);
    if (dsq_opt_given(&a, O_MEM)) o.mem_budget = dsq_opt_u64(&a, O_MEM);
    o.error_sample = dsq_opt_int(&a, O_SAMPLE);
    o.no_journal = dsq_opt_given(&a, O_NOJOURNAL);
    if (dsq_opt_given(&a, O_CHECKPOINT)) o.checkpoint_seconds = dsq_opt_float(&a, O_CHECKPOINT);
    o.export_format = dsq_opt_str(&a, O_FORMAT);
    co.calib = dsq_opt_str(&a, O_CALIB);
    co.data.n_samples = dsq_opt_int(&a, O_CSAMPLES);
    co.data.seqlen = dsq_opt_int(&a, O_CSEQLEN);
    co.data.seed = dsq_opt_u64(&a, O_SEED);
    co.moe_calib_all = dsq_opt_choice(&a, O_MOECALIB) == 0;
    co.ram_limit = dsq_opt_u64(&a, O_CALIBRAM);
    co.min_expert_tokens = dsq_opt_int(&a, O_MINTOK);
    co.alpha = (float)dsq_opt_float(&a, O_ALPHA);
    co.alpha_set = dsq_opt_given(&a, O_ALPHA);
    if (dsq_opt_given(&a, O_NOSMOOTH)) co.smooth = 0;
    co.smooth_method = dsq_opt_choice(&a, O_SMOOTHM) == 1 ? DSQ_SMOOTH_FLEX : DSQ_SMOOTH_SQ;
    if (dsq_opt_given(&a, O_NOCLIP)) co.clip = 0;
    co.gptq = dsq_opt_given(&a, O_GPTQ);
    if (dsq_opt_given(&a, O_ATTNBLOCK)) co.awq_attn_seqs = dsq_opt_int(&a, O_ATTNBLOCK);
    co.awq_tokens = dsq_opt_int(&a, O_CROWS);
    co.awq_expert_tokens = dsq_opt_int(&a, O_CEROWS);
    co.rollback = dsq_opt_int(&a, O_ROLLBACK);
    co.gptq_damp = dsq_opt_float(&a, O_GPTQDAMP);
    co.save_stats = dsq_opt_str(&a, O_SAVESTATS);
    co.load_stats = dsq_opt_str(&a, O_STATS);
    /* --keep and --scheme-for in command-line order: the first matching rule wins */
    dsq_quantize_rule *rules = calloc((size_t)a.nseq + 1, sizeof *rules);
    size_t nrules = 0;
    if (!rules) return dsq_args_release(&a), dsq_cli_fail(&cli, DSQ_ERR_NOMEM, NULL);
    for (int i = 0; i < a.nseq; i++)
        if (a.seq[i].id == O_KEEP || a.seq[i].id == O_SCHEME_FOR)
            rules[nrules++] = (dsq_quantize_rule){ a.seq[i].id == O_KEEP, a.seq[i].arg };
    dsq_args_release(&a);
    if (dsq_opt_given(&a, O_GROUP) && group % 64 != 0)
        return free(rules), dsq_cli_usage_error(&cli, "bad group size '%d' (0 or a multiple of 64)", group);
    if (o.export_format && strcmp(o.export_format, "dsq") != 0 && !dsq_export_format_known(o.export_format))
        return free(rules), dsq_cli_usage_error(&cli, "unknown --format '%s' (dsq, ascend, awq, "
                                                "compressed-tensors)", o.export_format);
    int npos = a.npos;
    if (npos < 1 || npos > 2 || (npos == 1 && !dry))
        return free(rules), dsq_cli_usage_error(&cli, dry ? "expected IN [OUT]" : "expected IN and OUT");
    if (!scheme == !preset)
        return free(rules), dsq_cli_usage_error(&cli, preset ? "--scheme and --recipe are exclusive"
                                                : "no scheme given (--scheme S or --recipe NAME)");
    if (o.resume && o.overwrite)
        return free(rules), dsq_cli_usage_error(&cli, "--resume and -f are exclusive");
    if (o.resume && o.no_journal)
        return free(rules), dsq_cli_usage_error(&cli, "--resume and --no-journal are exclusive");
    const int calibrating = co.calib || co.load_stats;
    if (co.calib && co.load_stats) return free(rules), dsq_cli_usage_error(&cli, "--calib and --stats are exclusive");
    if (co.load_stats && co.save_stats) return free(rules), dsq_cli_usage_error(&cli, "--stats and --save-stats are exclusive");
    const dsq_scheme *sc = dsq_scheme_by_name(scheme ? scheme : "w4a8"); /* a preset: its routed experts */
    int awq = sc && sc->id == DSQ_SCHEME_AWQ_W4A16, int8 = sc && (sc->id == DSQ_SCHEME_W8A8 || sc->id == DSQ_SCHEME_W8A8_DYNAMIC);
    unsigned have = (co.calib ? N_CALIB : 0) | (calibrating ? N_CALIB_OR_STATS : 0) | (awq ? 0 : N_SQ) |
                    (!awq || co.gptq ? N_SMOOTH : 0) | (int8 ? 0 : N_INT4) | (dry ? 0 : N_WRITE) | (co.gptq ? N_GPTQ : 0) |
                    (o.no_journal ? 0 : N_JOURNAL) |
                    (dsq_opt_choice(&a, O_ROTATE) == 1 ? N_ROTATE : 0);
    if ((rc = dsq_opt_check_needs(&cli, &spec, &a, have, needs, sizeof needs / sizeof needs[0])) >= 0)
        return free(rules), rc;
    o.input = a.pos[0];
    o.output = npos == 2 ? a.pos[1] : NULL;
    cli.progress = cli.progress && !cli.json;

    dsq_quantize_opts q = {
        .scheme = scheme,
        .preset = preset,
        .group_size = group,
        .rules = rules,
        .n_rules = nrules,
        .dry_run = dry,
        .conv = o,
        .calib = co,
        .rotate = dsq_opt_choice(&a, O_ROTATE) == 1,
        .rotate_seed = dsq_opt_u64(&a, O_ROTSEED),
    };
    run_ctx rx = { .cli = &cli, .calib_path = co.calib, .input = o.input };
    dsq_quantize_hooks h = { .cancel = &dsq_cli_interrupted, .calib_progress = cli.progress ? on_calib_progress : NULL,
                             .convert_progress = cli.progress ? on_progress : NULL, .note = on_note,
                             .calibrated = on_calibrated, .planned = on_planned, .ctx = &rx };
    dsq_quantize_result r;
    dsq_diag d;
    dsq_diag_clear(&d);
    rc = dsq_quantize_run(&q, &h, &r, &d);
    free(rules);
    if (rx.calib_begun) dsq_progress_end(&rx.calib_p);
    if (rx.conv_begun) dsq_progress_end(&rx.conv_p);
    int exit_code = DSQ_EXIT_OK;
    if (rc < 0) {
        json_error(&cli, rc, &d);
        if (r.stage == DSQ_QSTAGE_RECIPE && rc != DSQ_ERR_NOMEM) {
            exit_code = dsq_cli_usage_error(&cli, "%s", d.msg);
        } else if (rc == DSQ_ERR_INTERRUPTED && (r.stage == DSQ_QSTAGE_CALIB || r.stage == DSQ_QSTAGE_CONVERT)) {
            dsq_cli_error(&cli, r.stage == DSQ_QSTAGE_CONVERT && o.no_journal
                                    ? "interrupted; nothing was kept (--no-journal)"
                                    : "interrupted; run again with --resume to continue");
            exit_code = DSQ_EXIT_ERROR;
        } else {
            exit_code = dsq_cli_fail(&cli, rc, &d);
            /* a combination the target cannot load */
            if (o.export_format && rc == DSQ_ERR_UNSUPPORTED &&
                (r.stage == DSQ_QSTAGE_PREFLIGHT || r.stage == DSQ_QSTAGE_PREPARE || r.stage == DSQ_QSTAGE_CONVERT))
                exit_code = DSQ_EXIT_USAGE;
            /* -f or --resume refused before any work: the output is not an
             * export dsq wrote (nothing was changed) */
            if (o.export_format && rc == DSQ_ERR_EXISTS && (o.overwrite || o.resume) && r.stage == DSQ_QSTAGE_OUTPUT)
                exit_code = DSQ_EXIT_USAGE;
        }
    } else if (dry) {
        if (!dsq_convert_have_config(r.conv) && !cli.json) no_config_warning(&cli, o.input);
        if (cli.json) {
            json_object *j = dsq_cli_json_tool(&cli, NULL);
            dsq_plan_report_json(j, r.conv, &r.recipe);
            dsq_cli_json_print(j, 0);
        } else {
            dsq_plan_report_text(stdout, r.conv, &r.recipe, cli.level);
        }
    } else {
        dsq_run_report rep = { &r.summary, o.input, o.output, r.threads, o.error_sample, r.calib_json,
                               dsq_peak_rss(), cli.level };
        if (cli.json) {
            json_object *j = dsq_cli_json_tool(&cli, "ok");
            dsq_run_report_json(j, &rep);
            dsq_cli_json_print(j, 0);
        } else if (cli.level >= 2) {
            dsq_run_report_text(stdout, &rep);
        }
    }
    dsq_quantize_result_release(&r);
    return exit_code;
}
