/* quant_main.c - ds-quant: Hugging Face safetensors (BF16/F16/F32 or
 * DeepSeek FP8-block) -> .dsq with W8A8 / W4A8 / AWQ-w4a16 weights.
 * Parses options, calls the convert library, prints. */
#include "calib.h"
#include "llama2c.h"
#include "cli.h"
#include "dsq_json.h"
#include "container.h"
#include "convert.h"
#include "dsq_file.h"
#include "export.h"
#include "dsq_version.h"
#include "recipe.h"
#include "scheme.h"
#include "dsq_thread.h"

#include <getopt.h>
#include <malloc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void usage(void)
{
    printf(
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
"Schemes:\n");
    for (int i = 0; i < dsq_scheme_count(); i++) {
        const dsq_scheme *s = dsq_scheme_at(i);
        if (!s) continue;
        printf("  %-14s %s%s%s%s\n", s->name, s->description ? s->description : "",
               s->alias ? " (alias " : "", s->alias ? s->alias : "", s->alias ? ")" : "");
    }
    printf(
"  %-14s leave in the source float type\n"
"\n"
"Recipe (first matching rule wins; then the recipe's role table):\n"
"  --scheme S               scheme for attention, MLP, expert and shared-expert\n"
"                           linears; embeddings, norms, router, router bias,\n"
"                           lm_head, biases and MTP eh_proj are kept\n"
"  --recipe NAME            preset instead of --scheme (msModelSlim's DeepSeek recipes):\n"
"                           deepseek-w4a8: attention/dense/shared MLP w8a8-dynamic,\n"
"                           routed experts w4a8, MTP experts w8a8-dynamic, kv_b_proj kept;\n"
"                           deepseek-w8a8 (needs --calib): attention w8a8 static,\n"
"                           every MLP w8a8-dynamic, kv_b_proj and router kept\n"
"  --keep REGEX             keep matching tensors in their float type (repeatable)\n"
"  --scheme-for REGEX=S     use scheme S for matching tensors (repeatable)\n"
"  --group-size G           int4 group size: 0 = per output channel, or a\n"
"                           multiple of 64 (default: w4a8 0, awq-w4a16 128)\n"
"  --clip-search            per-group MSE clip search (AutoAWQ-style, RTN)\n"
"  --search, --no-search    int4 (awq-w4a16, w4a8): search each group's scale\n"
"                           (and zero) by weighted least squares, or keep the\n"
"                           plain min/max range (RTN, clip and GPTQ steps alike);\n"
"                           default: w4a8 RTN searches (~1.5 CPU-s per GB), the\n"
"                           rest min/max (awq-w4a16, calibrated w4a8, --gptq)\n"
"  --allow-nonfinite        convert NaN as 0 and saturate Inf instead of failing\n"
"\n"
"Calibration (scales from what the model computes; folded into the weights, so\n"
"the output stays a plain model of its scheme):\n"
"  --calib FILE             calibration text (plain text, paragraphs split at blank\n"
"                           lines, or JSONL with a \"text\" field). awq-w4a16: AWQ\n"
"                           scale search + clip search; w8a8: SmoothQuant + static\n"
"                           activation scale/offset (w8a8 needs --calib or --stats);\n"
"                           w4a8: smoothing (alpha searched) + int4 clip search;\n"
"                           w8a8-dynamic: smoothing, alpha searched per group on\n"
"                           the simulated int8 output (s = 1 included)\n"
"  --calib-samples N        samples (default 128; at most: shorter data gives\n"
"                           fewer, with a warning, down to 4096 tokens)\n"
"  --calib-seqlen L         tokens per sample (default 512)\n"
"  --seed S                 sampling seed (default 0)\n"
"  --moe-calib all|routed   all: every token through every expert for statistics\n"
"                           (the output still follows the router); routed (default):\n"
"                           experts with fewer than --min-expert-tokens tokens fall\n"
"                           back to round-to-nearest, with a warning naming them\n"
"  --min-expert-tokens N    (default 16)\n"
"  --alpha A                SmoothQuant migration strength 0..1 (default 0.5; for\n"
"                           w4a8 and w8a8-dynamic it fixes alpha instead of\n"
"                           searching it)\n"
"  --no-smooth              w8a8/w4a8/w8a8-dynamic: static ranges / clipping only,\n"
"                           no smoothing; with --gptq also awq-w4a16: GPTQ without\n"
"                           AWQ scales\n"
"  --no-clip                calibrated int4: skip the clip search\n"
"  --awq-attn-block N       awq-w4a16: score the attention-input scales on the MLA block\n"
"                           output over N calibration sequences, 512 tokens each\n"
"                           (default 4; 0: on the q_a / kv_a outputs)\n"
"  --calib-rows N           rows sampled per non-expert linear input for the scale,\n"
"                           alpha and clip searches (default 512)\n"
"  --calib-expert-rows N    the same per routed expert (default 64: at V3's 256\n"
"                           experts each 64 rows hold ~0.6 GB per layer)\n"
"  --gptq                   GPTQ rounding of every int8/int4 linear (all integer\n"
"                           schemes, w8a8-dynamic included; the format is unchanged):\n"
"                           error compensation from each input's Hessian X^T X,\n"
"                           on the AWQ/SmoothQuant-scaled weights after the clip\n"
"                           choice; columns in order (no act-order: dsq, AutoAWQ\n"
"                           GEMM, Ascend and compressed-tensors outputs hold no\n"
"                           permutation); needs --calib (or --stats of a --gptq run)\n"
"  --gptq-damp D            GPTQ dampening, fraction of mean diag(H) (default 0.01)\n"
"  --rollback N             keep the N most quantization-sensitive modules in their\n"
"                           float type: each quantized linear's relative output\n"
"                           error as converted (scales, clip, GPTQ, the scheme's\n"
"                           activation rounding) on its calibration rows, ranked\n"
"                           over the model; gate+up and q_a+kv_a go together,\n"
"                           routed experts never; --json and the metadata list them\n"
"  --calib-ram SIZE         calibration memory (K/M/G): hidden states kept in RAM\n"
"                           (beyond it they spill to files) and GPTQ solves run at\n"
"                           once (~0.73 GB each for a V3 expert) (default 2G)\n"
"  --save-stats F           keep the statistics (and searched scales) in F; F is\n"
"                           also the per-layer checkpoint that --resume continues\n"
"                           (default: OUT.calib.dsq, removed after success)\n"
"  --stats F                reuse statistics from --save-stats (no forward pass)\n"
"\n"
"Output and run:\n"
"  --format F               dsq (default): the .dsq container. ascend: msModelSlim\n"
"                           AscendV1 directory (vllm-ascend / MindIE); awq: AutoAWQ\n"
"                           GEMM directory (vLLM); compressed-tensors: vLLM /\n"
"                           llm-compressor directory. OUT is then a directory of\n"
"                           safetensors shards (--shard-size bounds them), config.json,\n"
"                           tokenizer files and SHA256SUMS, renamed into place when\n"
"                           complete. Combinations the target cannot load exit 2\n"
"                           (README \"Serving exports\")\n"
"  -f, --force              overwrite an existing output\n"
"  --resume                 continue an interrupted conversion (byte-identical\n"
"                           to an uninterrupted run). Every run keeps a resume\n"
"                           journal next to OUT until it finishes\n"
"  --no-journal             no resume journal (~10%% less CPU; an interrupted\n"
"                           run then starts over)\n"
"  --shard-size SIZE        write OUT as a directory of shards of at most SIZE\n"
"                           (K/M/G suffixes) each\n"
"  --zstd-level N           0 = no compression, 1..22 (default 1: fastest)\n"
"  -T, --threads N          worker threads (default and 0: all cores)\n"
"  --mem-budget SIZE        memory for outputs waiting to be written (default\n"
"                           512M or 64M per thread, whichever is more)\n"
"  --error-sample N         measure quantization error on 1 row in N (default 16;\n"
"                           1 = every row)\n"
"  --dry-run                print the plan (tensor -> scheme), estimated output\n"
"                           size and peak memory; write nothing (OUT optional)\n"
"  --json                   one JSON object on stdout (summary or plan)\n"
"  --no-progress            no progress line on stderr\n"
"  -q, --quiet / -v, --verbose   less / more output (repeatable)\n"
"  -h, --help               this help\n"
"  -V, --version            version\n"
"\n"
"Exit status: 0 ok, 1 error (bad input, i/o, interrupted), 2 usage.\n", "keep");
}

enum {
    OPT_SCHEME = 256, OPT_RECIPE, OPT_KEEP, OPT_SCHEME_FOR, OPT_GROUP, OPT_DRY, OPT_ZSTD,
    OPT_NONFINITE, OPT_RESUME, OPT_CLIP, OPT_SHARD, OPT_JSON, OPT_NOPROG, OPT_MEM,
    OPT_SAMPLE, OPT_CHECKPOINT, OPT_NOJOURNAL, OPT_CALIB, OPT_CSAMPLES, OPT_CSEQLEN, OPT_SEED,
    OPT_MOECALIB, OPT_MINTOK, OPT_ALPHA, OPT_NOSMOOTH, OPT_NOCLIP, OPT_SAVESTATS, OPT_STATS,
    OPT_FORMAT, OPT_GPTQ, OPT_GPTQDAMP, OPT_CALIBRAM, OPT_ATTNBLOCK, OPT_CROWS, OPT_CEROWS, OPT_ROLLBACK,
    OPT_SEARCH, OPT_NOSEARCH
};

typedef struct rule_arg { int keep; const char *s; } rule_arg;

/* the temporary Hugging Face copy of a llama2.c input, removed at exit */
static char *llama2c_tmp;
static void remove_llama2c_tmp(void) { dsq_llama2c_temp_dir_remove(llama2c_tmp); llama2c_tmp = NULL; }

#define SEEN(opt) (1ull << ((opt) - 256))

/* Options this run would not use are refused (exit 2) instead of ignored:
 * a --alpha on an AWQ run or a --calib-samples without --calib used to be
 * accepted and do nothing. NULL: all used; else the message. */
static const char *unused_option(unsigned long long seen, const char *scheme, int calib, int stats, int dry,
                                 int no_journal, char *buf, size_t n)
{
    static const struct { int opt; const char *name; } nm[] = {
        { OPT_CSAMPLES, "--calib-samples" }, { OPT_CSEQLEN, "--calib-seqlen" }, { OPT_SEED, "--seed" },
        { OPT_SAVESTATS, "--save-stats" }, { OPT_MOECALIB, "--moe-calib" }, { OPT_MINTOK, "--min-expert-tokens" },
        { OPT_ALPHA, "--alpha" }, { OPT_NOSMOOTH, "--no-smooth" }, { OPT_NOCLIP, "--no-clip" },
        { OPT_RESUME, "--resume" }, { OPT_NOJOURNAL, "--no-journal" }, { OPT_CHECKPOINT, "--checkpoint-interval" },
        { OPT_GPTQ, "--gptq" }, { OPT_GPTQDAMP, "--gptq-damp" }, { OPT_CALIBRAM, "--calib-ram" },
        { OPT_ATTNBLOCK, "--awq-attn-block" }, { OPT_CROWS, "--calib-rows" },
        { OPT_CEROWS, "--calib-expert-rows" }, { OPT_ROLLBACK, "--rollback" },
    };
    const dsq_scheme *sc = dsq_scheme_by_name(scheme ? scheme : "w4a8"); /* a preset: its routed experts */
    for (size_t i = 0; i < sizeof nm / sizeof nm[0]; i++) {
        int o = nm[i].opt;
        if (!(seen & SEEN(o))) continue;
        const char *why = NULL;
        if ((o == OPT_CSAMPLES || o == OPT_CSEQLEN || o == OPT_SEED || o == OPT_SAVESTATS || o == OPT_CALIBRAM ||
             o == OPT_ATTNBLOCK || o == OPT_CROWS || o == OPT_CEROWS) &&
            !calib)
            why = "shapes the calibration data: it needs --calib";
        else if ((o == OPT_MOECALIB || o == OPT_MINTOK || o == OPT_ALPHA || o == OPT_NOSMOOTH || o == OPT_NOCLIP ||
                  o == OPT_GPTQ || o == OPT_ROLLBACK) &&
                 !calib && !stats)
            why = "is a calibration option: it needs --calib (or --stats)";
        else if ((o == OPT_ALPHA || (o == OPT_NOSMOOTH && !(seen & SEEN(OPT_GPTQ)))) && sc &&
                 sc->id == DSQ_SCHEME_AWQ_W4A16)
            why = "is for SmoothQuant (w8a8, w4a8); awq-w4a16 searches AWQ scales";
        else if (o == OPT_NOCLIP && sc && (sc->id == DSQ_SCHEME_W8A8 || sc->id == DSQ_SCHEME_W8A8_DYNAMIC))
            why = "is for int4 schemes (the clip search); w8a8 and w8a8-dynamic have none";
        else if ((o == OPT_RESUME || o == OPT_NOJOURNAL || o == OPT_CHECKPOINT || o == OPT_SAVESTATS) && dry)
            why = "has nothing to do in a --dry-run (nothing is written)";
        else if (o == OPT_GPTQDAMP && !(seen & SEEN(OPT_GPTQ)))
            why = "sets GPTQ's dampening: it needs --gptq";
        else if (o == OPT_CHECKPOINT && no_journal)
            why = "sets the resume journal's interval: not with --no-journal";
        if (why) {
            snprintf(buf, n, "%s %s", nm[i].name, why);
            return buf;
        }
    }
    return NULL;
}

/* ---- output helpers ---- */

/* One JSON object on stdout, built with json-c (no hand escaping), freed. */
static void put_json(json_object *o)
{
    puts(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
    json_object_put(o);
}

static json_object *tool_json(const char *status)
{
    json_object *o = json_object_new_object();
    dsq_json_put_str(o, "tool", "ds-quant");
    dsq_json_put_str(o, "version", DSQ_VERSION_STRING);
    if (status) dsq_json_put_str(o, "status", status);
    return o;
}

static void fmt_bytes(char *buf, size_t n, double b)
{
    const char *u[] = { "B", "KB", "MB", "GB", "TB" };
    int i = 0;
    while (b >= 1000 && i < 4) { b /= 1000; i++; }
    snprintf(buf, n, i ? "%.2f %s" : "%.0f %s", b, u[i]);
}

static void shape_str(char *buf, size_t n, const dsq_plan_entry *e)
{
    size_t o = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < e->ndim && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, "%s%lld", i ? "," : "", (long long)e->shape[i]);
    if (o < n) snprintf(buf + o, n - o, "]");
}

static int print_plan(const dsq_cli *cli, const dsq_convert *c, const dsq_recipe *r)
{
    const dsq_plan *p = dsq_convert_plan(c);
    uint64_t peak = dsq_convert_peak_estimate(c);
    char reason[1200], shp[160];
    if (cli->json) {
        json_object *o = tool_json(NULL), *by = json_object_new_object(), *plan = json_object_new_array();
        dsq_json_put_bool(o, "dry_run", 1);
        dsq_json_put_u64(o, "tensors", p->n);
        dsq_json_put_u64(o, "source_bytes", p->src_bytes);
        dsq_json_put_u64(o, "estimated_output_bytes", p->est_bytes);
        dsq_json_put_u64(o, "estimated_peak_rss_bytes", peak);
        dsq_json_put_int(o, "num_hidden_layers", p->num_hidden_layers);
        for (int s = 0; s < DSQ_SCHEME_ID_COUNT; s++) {
            if (!p->count_by_scheme[s]) continue;
            json_object *k = json_object_new_object();
            dsq_json_put_u64(k, "tensors", p->count_by_scheme[s]);
            dsq_json_put_u64(k, "estimated_bytes", p->bytes_by_scheme[s]);
            json_object_object_add(by, dsq_scheme_by_id((uint32_t)s)->name, k);
        }
        json_object_object_add(o, "by_scheme", by);
        for (size_t i = 0; i < p->n; i++) {
            const dsq_plan_entry *e = &p->v[i];
            json_object *t = json_object_new_object(), *shape = json_object_new_array();
            dsq_plan_reason(r, e, reason, sizeof reason);
            for (int d = 0; d < e->ndim; d++) json_object_array_add(shape, json_object_new_int64(e->shape[d]));
            dsq_json_put_str(t, "name", e->name);
            dsq_json_put_str(t, "role", dsq_role_name(e->role.role));
            dsq_json_put_bool(t, "mtp", e->role.mtp);
            dsq_json_put_str(t, "dtype", dsq_dtype_name(e->src_dtype));
            json_object_object_add(t, "shape", shape);
            dsq_json_put_str(t, "scheme", e->scheme->name);
            dsq_json_put_int(t, "group_size", e->qshape.group_size);
            dsq_json_put_u64(t, "source_bytes", e->src_bytes);
            dsq_json_put_u64(t, "estimated_bytes", e->est_bytes);
            dsq_json_put_str(t, "rule", reason);
            json_object_array_add(plan, t);
        }
        json_object_object_add(o, "plan", plan);
        put_json(o);
        return DSQ_EXIT_OK;
    }
    if (cli->level >= 2) {
        printf("%-60s %-20s %-8s %-18s %-13s %5s %12s  %s\n", "tensor", "role", "dtype", "shape",
               "scheme", "group", "est. bytes", "rule");
        for (size_t i = 0; i < p->n; i++) {
            const dsq_plan_entry *e = &p->v[i];
            dsq_plan_reason(r, e, reason, sizeof reason);
            shape_str(shp, sizeof shp, e);
            printf("%-60s %-20s %-8s %-18s %-13s %5d %12llu  %s%s\n", e->name,
                   dsq_role_name(e->role.role), dsq_dtype_name(e->src_dtype), shp, e->scheme->name,
                   (int)e->qshape.group_size, (unsigned long long)e->est_bytes, reason,
                   e->role.mtp ? " [mtp]" : "");
        }
        printf("\n");
    }
    char a[32], b[32], m[32];
    fmt_bytes(a, sizeof a, (double)p->src_bytes);
    fmt_bytes(b, sizeof b, (double)p->est_bytes);
    fmt_bytes(m, sizeof m, (double)peak);
    printf("%zu tensors:", p->n);
    for (int s = 0; s < DSQ_SCHEME_ID_COUNT; s++)
        if (p->count_by_scheme[s]) printf(" %s %zu", dsq_scheme_by_id((uint32_t)s)->name, p->count_by_scheme[s]);
    printf("\nsource %s -> estimated output %s before zstd; estimated peak memory %s\n", a, b, m);
    return DSQ_EXIT_OK;
}

static int cmp_err(const void *a, const void *b)
{
    const dsq_tensor_result *x = *(const dsq_tensor_result *const *)a;
    const dsq_tensor_result *y = *(const dsq_tensor_result *const *)b;
    if (x->rel_error != y->rel_error) return x->rel_error > y->rel_error ? -1 : 1;
    return strcmp(x->name, y->name);
}

static void print_summary(const dsq_cli *cli, const dsq_convert_summary *s, const char *in,
                          const char *out, int threads, int sample, const char *calib_json)
{
    uint64_t peak = dsq_peak_rss();
    double gbs = s->seconds > 0 ? (double)s->bytes_converted / s->seconds / 1e9 : 0;
    /* Worst tensors by measured error. */
    size_t nm = 0;
    const dsq_tensor_result **m = calloc(s->tensors ? s->tensors : 1, sizeof *m);
    double sum = 0;
    for (size_t i = 0; m && i < s->tensors; i++)
        if (s->results[i].rel_error >= 0) { m[nm++] = &s->results[i]; sum += s->results[i].rel_error; }
    if (m) qsort(m, nm, sizeof *m, cmp_err);
    size_t nworst = nm < 10 ? nm : 10;

    if (cli->json) {
        json_object *o = tool_json("ok"), *by = json_object_new_object();
        dsq_json_put_str(o, "input", in);
        dsq_json_put_str(o, "output", out);
        dsq_json_put_int(o, "shards", s->shards);
        dsq_json_put_u64(o, "tensors", s->tensors);
        dsq_json_put_u64(o, "resumed", s->resumed);
        for (int k = 0; k < DSQ_SCHEME_ID_COUNT; k++) {
            if (!s->count_by_scheme[k]) continue;
            json_object *e = json_object_new_object();
            dsq_json_put_u64(e, "tensors", s->count_by_scheme[k]);
            dsq_json_put_u64(e, "source_bytes", s->src_by_scheme[k]);
            dsq_json_put_u64(e, "stored_bytes", s->stored_by_scheme[k]);
            json_object_object_add(by, dsq_scheme_by_id((uint32_t)k)->name, e);
        }
        json_object_object_add(o, "by_scheme", by);
        dsq_json_put_u64(o, "bytes_in", s->bytes_in);
        dsq_json_put_u64(o, "bytes_converted", s->bytes_converted);
        dsq_json_put_u64(o, "bytes_raw", s->bytes_raw);
        dsq_json_put_u64(o, "bytes_stored", s->bytes_stored);
        dsq_json_put_u64(o, "bytes_out", s->bytes_out);
        dsq_json_put_num(o, "compression_ratio", s->bytes_out ? (double)s->bytes_in / (double)s->bytes_out : 0.0,
                         "%.4f");
        dsq_json_put_num(o, "zstd_ratio", s->bytes_stored ? (double)s->bytes_raw / (double)s->bytes_stored : 0.0,
                         "%.4f");
        dsq_json_put_num(o, "seconds", s->seconds, "%.3f");
        dsq_json_put_num(o, "gb_per_s", gbs, "%.3f");
        dsq_json_put_u64(o, "peak_rss_bytes", peak);
        dsq_json_put_int(o, "threads", threads);
        json_object *err = json_object_new_object(), *worst = json_object_new_array();
        char rows[32];
        snprintf(rows, sizeof rows, "1/%d", sample);
        dsq_json_put_str(err, "metric", "||W - deq(Q(W))|| / ||W||");
        dsq_json_put_str(err, "sample_rows", rows);
        dsq_json_put_u64(err, "measured", nm);
        dsq_json_put_num(err, "mean", nm ? sum / (double)nm : 0.0, "%.6g");
        dsq_json_put_num(err, "max", nm ? m[0]->rel_error : 0.0, "%.6g");
        for (size_t i = 0; i < nworst; i++) {
            json_object *w = json_object_new_object();
            dsq_json_put_str(w, "name", m[i]->name);
            dsq_json_put_str(w, "scheme", dsq_scheme_by_id(m[i]->scheme)->name);
            dsq_json_put_num(w, "rel_error", m[i]->rel_error, "%.6g");
            json_object_array_add(worst, w);
        }
        json_object_object_add(err, "worst", worst);
        json_object_object_add(o, "error", err);
        if (cli->level >= 3) {
            json_object *tr = json_object_new_array();
            for (size_t i = 0; i < s->tensors; i++) {
                const dsq_tensor_result *t = &s->results[i];
                json_object *e = json_object_new_object();
                dsq_json_put_str(e, "name", t->name);
                dsq_json_put_str(e, "role", dsq_role_name(t->role));
                dsq_json_put_str(e, "scheme", dsq_scheme_by_id(t->scheme)->name);
                dsq_json_put_u64(e, "source_bytes", t->src_bytes);
                dsq_json_put_u64(e, "raw_bytes", t->raw_bytes);
                dsq_json_put_u64(e, "stored_bytes", t->stored_bytes);
                /* negative: not measured (the row sample skipped it) */
                dsq_json_put_num(e, "rel_error", t->rel_error >= 0 ? t->rel_error : NAN, "%.6g");
                json_object_array_add(tr, e);
            }
            json_object_object_add(o, "tensor_results", tr);
        }
        /* the library's calibration summary is JSON text; parsed, so a
         * broken one is a null here instead of a broken document */
        if (calib_json) json_object_object_add(o, "calibration", json_tokener_parse(calib_json));
        if (s->export.format) {
            json_object *x = json_object_new_object();
            dsq_json_put_str(x, "format", s->export.format);
            dsq_json_put_u64(x, "tensors", s->export.out_tensors);
            dsq_json_put_int(x, "weight_files", s->export.shards);
            dsq_json_put_u64(x, "weight_bytes", s->export.weight_bytes);
            dsq_json_put_u64(x, "dequantized_to_float", s->export.dequantized);
            dsq_json_put_u64(x, "dropped", s->export.dropped);
            dsq_json_put_u64(x, "resumed", s->export.resumed);
            dsq_json_put_num(x, "max_scale_rel_rounding", s->export.max_scale_rel_rounding, "%.6g");
            json_object_object_add(o, "export", x);
        }
        put_json(o);
    } else if (cli->level >= 2) {
        char a[32], b[32], r[32];
        fmt_bytes(a, sizeof a, (double)s->bytes_in);
        fmt_bytes(b, sizeof b, (double)s->bytes_out);
        fmt_bytes(r, sizeof r, (double)peak);
        printf("%s: %zu tensors", out, s->tensors);
        for (int k = 0; k < DSQ_SCHEME_ID_COUNT; k++)
            if (s->count_by_scheme[k]) printf(", %s %zu", dsq_scheme_by_id((uint32_t)k)->name, s->count_by_scheme[k]);
        if (s->resumed) printf(" (%zu from the interrupted run)", s->resumed);
        printf("\n%s -> %s (%.2fx) in %.1f s, %.2f GB/s, peak RSS %s, %d threads\n", a, b,
               s->bytes_out ? (double)s->bytes_in / (double)s->bytes_out : 0.0, s->seconds, gbs, r, threads);
        if (s->export.format) {
            printf("%s export: %zu tensors in %d file(s)", s->export.format, s->export.out_tensors,
                   s->export.shards);
            if (s->export.dequantized)
                printf(", %zu quantized tensors written as float (the target keeps them unquantized)",
                       s->export.dequantized);
            if (s->export.dropped) printf(", %zu MTP-layer tensors dropped (the target has no MTP layer)",
                                          s->export.dropped);
            if (s->export.max_scale_rel_rounding > 0)
                printf(", scales rounded to 16 bits (max relative change %.3g)", s->export.max_scale_rel_rounding);
            printf("\n");
        }
        if (nm) {
            printf("relative error (1 row in %d): mean %.4g, worst:\n", sample, sum / (double)nm);
            for (size_t i = 0; i < (nworst < 5 ? nworst : 5); i++)
                printf("  %.4g  %s (%s)\n", m[i]->rel_error, m[i]->name, dsq_scheme_by_id(m[i]->scheme)->name);
        }
    }
    free(m);
}

static void json_error(const dsq_cli *cli, int status, const dsq_diag *d)
{
    if (!cli->json) return;
    char buf[2048];
    if (d && d->status < 0) dsq_diag_format(d, buf, sizeof buf);
    else snprintf(buf, sizeof buf, "%s", dsq_strerror(status));
    json_object *o = tool_json("error"), *e = json_object_new_object();
    dsq_json_put_str(e, "code", dsq_status_name(status));
    dsq_json_put_str(e, "message", buf);
    json_object_object_add(o, "error", e);
    put_json(o);
}

/* ---- progress ---- */

typedef struct prog_ctx { dsq_progress p; int begun; const dsq_cli *cli; } prog_ctx;

static void on_progress(void *ctx, const dsq_convert_progress *p)
{
    prog_ctx *pc = ctx;
    if (!pc->begun) {
        dsq_progress_begin(&pc->p, pc->cli, "ds-quant", "B", p->bytes_total);
        pc->begun = 1;
    }
    dsq_progress_update(&pc->p, p->bytes_done);
}

/* ---- calibration ---- */

/* The scheme the recipe gives a tensor (NULL: kept float). */
static int recipe_target(void *ctx, const char *name, int64_t rows, int64_t cols, const dsq_scheme **sc,
                         int32_t *gs)
{
    const dsq_recipe *r = ctx;
    dsq_plan_entry e;
    int64_t shape[2] = { rows, cols };
    int rc = dsq_recipe_decide(r, name, DSQ_DTYPE_BF16, 2, shape, 0, &e, NULL);
    if (rc < 0) return rc;
    *sc = e.kept ? NULL : e.scheme;
    *gs = e.qshape.group_size;
    return DSQ_OK;
}

typedef struct calib_prog { dsq_progress p; int begun; const dsq_cli *cli; } calib_prog;

static void on_calib_progress(void *ctx, const dsq_calib_progress *p)
{
    calib_prog *pc = ctx;
    if (p->layer < 0 || p->sample < 0) return;
    if (!pc->begun) {
        dsq_progress_begin(&pc->p, pc->cli, "calibrating", "samples",
                           (uint64_t)p->n_layers * (uint64_t)p->n_samples);
        pc->begun = 1;
    }
    dsq_progress_update(&pc->p, (uint64_t)p->layer * (uint64_t)p->n_samples + (uint64_t)p->sample + 1);
}

static void report_calibration(const dsq_cli *cli, const dsq_calib_result *r)
{
    size_t nf = dsq_calib_fallback_count(r);
    for (size_t i = 0; i < nf && i < 8; i++) {
        const char *why;
        const char *name = dsq_calib_fallback(r, i, &why);
        dsq_cli_warn(cli, "%s: %s", name, why);
    }
    if (nf > 8)
        dsq_cli_warn(cli, "%zu more experts fell back to round-to-nearest (--json lists them; "
                          "--moe-calib all calibrates every expert)", nf - 8);
    dsq_calib_totals t;
    dsq_calib_get_totals(r, &t);
    for (int l = 0; l < t.layers; l++) {
        const uint64_t *tok;
        int n;
        if (dsq_calib_coverage(r, l, &tok, &n) < 0 || n == 0) continue;
        uint64_t lo = tok[0], hi = tok[0], zero = 0;
        for (int e = 0; e < n; e++) {
            if (tok[e] < lo) lo = tok[e];
            if (tok[e] > hi) hi = tok[e];
            zero += tok[e] == 0;
        }
        dsq_cli_info(cli, 3, "layer %d: tokens per expert %llu..%llu, %llu experts saw none", l,
                     (unsigned long long)lo, (unsigned long long)hi, (unsigned long long)zero);
    }
    dsq_cli_info(cli, 2, "calibration: %llu tokens, %d groups searched (output MSE %.4g -> %.4g), %d smoothed, "
                         "%zu experts on RTN fallback, %.1f s",
                 (unsigned long long)t.tokens, t.groups_searched, t.loss_identity, t.loss_best, t.groups_smoothed,
                 t.fallback_experts, t.seconds);
    for (size_t i = 0; i < dsq_calib_rollback_count(r); i++) {
        double sv;
        const char *name = dsq_calib_rollback(r, i, &sv);
        dsq_cli_info(cli, 2, "rollback: %s stays float (relative output error %.3g when quantized)", name, sv);
    }
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
    static const struct option lo[] = {
        { "help", no_argument, NULL, 'h' },          { "version", no_argument, NULL, 'V' },
        { "quiet", no_argument, NULL, 'q' },         { "verbose", no_argument, NULL, 'v' },
        { "force", no_argument, NULL, 'f' },         { "threads", required_argument, NULL, 'T' },
        { "scheme", required_argument, NULL, OPT_SCHEME },
        { "recipe", required_argument, NULL, OPT_RECIPE },
        { "keep", required_argument, NULL, OPT_KEEP },
        { "scheme-for", required_argument, NULL, OPT_SCHEME_FOR },
        { "group-size", required_argument, NULL, OPT_GROUP },
        { "dry-run", no_argument, NULL, OPT_DRY },
        { "zstd-level", required_argument, NULL, OPT_ZSTD },
        { "allow-nonfinite", no_argument, NULL, OPT_NONFINITE },
        { "resume", no_argument, NULL, OPT_RESUME },
        { "clip-search", no_argument, NULL, OPT_CLIP },
        { "search", no_argument, NULL, OPT_SEARCH },
        { "no-search", no_argument, NULL, OPT_NOSEARCH },
        { "shard-size", required_argument, NULL, OPT_SHARD },
        { "json", no_argument, NULL, OPT_JSON },
        { "no-progress", no_argument, NULL, OPT_NOPROG },
        { "mem-budget", required_argument, NULL, OPT_MEM },
        { "error-sample", required_argument, NULL, OPT_SAMPLE },
        { "checkpoint-interval", required_argument, NULL, OPT_CHECKPOINT },
        { "no-journal", no_argument, NULL, OPT_NOJOURNAL },
        { "calib", required_argument, NULL, OPT_CALIB },
        { "calib-samples", required_argument, NULL, OPT_CSAMPLES },
        { "calib-seqlen", required_argument, NULL, OPT_CSEQLEN },
        { "seed", required_argument, NULL, OPT_SEED },
        { "moe-calib", required_argument, NULL, OPT_MOECALIB },
        { "min-expert-tokens", required_argument, NULL, OPT_MINTOK },
        { "alpha", required_argument, NULL, OPT_ALPHA },
        { "no-smooth", no_argument, NULL, OPT_NOSMOOTH },
        { "no-clip", no_argument, NULL, OPT_NOCLIP },
        { "save-stats", required_argument, NULL, OPT_SAVESTATS },
        { "stats", required_argument, NULL, OPT_STATS },
        { "format", required_argument, NULL, OPT_FORMAT },
        { "gptq", no_argument, NULL, OPT_GPTQ },
        { "gptq-damp", required_argument, NULL, OPT_GPTQDAMP },
        { "rollback", required_argument, NULL, OPT_ROLLBACK },
        { "calib-ram", required_argument, NULL, OPT_CALIBRAM },
        { "awq-attn-block", required_argument, NULL, OPT_ATTNBLOCK },
        { "calib-rows", required_argument, NULL, OPT_CROWS },
        { "calib-expert-rows", required_argument, NULL, OPT_CEROWS },
        { NULL, 0, NULL, 0 }
    };
    dsq_convert_opts o;
    dsq_convert_opts_init(&o);
    const char *scheme = NULL, *preset = NULL;
    int group = DSQ_GROUP_DEFAULT, dry = 0, noprog = 0;
    dsq_calib_opts co;
    dsq_calib_opts_init(&co);
    co.data.take_available = 1;   /* --calib-samples is a cap, as in AutoAWQ (floor: calib_data.h) */
    rule_arg *rules = calloc((size_t)argc + 1, sizeof *rules);
    size_t nrules = 0;
    if (!rules) return dsq_cli_fail(&cli, DSQ_ERR_NOMEM, NULL);
    int ch;
    uint64_t u;
    double dv;
    unsigned long long seen = 0;
    while ((ch = getopt_long(argc, argv, ":hVqvfT:", lo, NULL)) != -1) {
        if (ch >= 256 && ch < 256 + 64) seen |= SEEN(ch);
        switch (ch) {
        case 'h': usage(); free(rules); return DSQ_EXIT_OK;
        case 'V': dsq_cli_version(&cli); free(rules); return DSQ_EXIT_OK;
        case 'q': cli.level = cli.level > 0 ? cli.level - 1 : 0; break;
        case 'v': cli.level++; break;
        case 'f': o.overwrite = 1; break;
        case 'T':
            if (dsq_cli_parse_int(optarg, 0, 1024, &o.threads) < 0)
                return free(rules), dsq_cli_usage_error(&cli, "bad thread count '%s' (0 = all cores, or 1..1024)",
                                                        optarg);
            break;
        case OPT_SCHEME: scheme = optarg; break;
        case OPT_RECIPE: preset = optarg; break;
        case OPT_KEEP: rules[nrules++] = (rule_arg){ 1, optarg }; break;
        case OPT_SCHEME_FOR: rules[nrules++] = (rule_arg){ 0, optarg }; break;
        case OPT_GROUP:
            if (dsq_cli_parse_int(optarg, 0, 1 << 24, &group) < 0 || group % 64 != 0)
                return free(rules), dsq_cli_usage_error(&cli, "bad group size '%s' (0 or a multiple of 64)", optarg);
            break;
        case OPT_DRY: dry = 1; break;
        case OPT_ZSTD:
            if (dsq_cli_parse_int(optarg, 0, DSQ_CTR_LEVEL_MAX, &o.zstd_level) < 0)
                return free(rules), dsq_cli_usage_error(&cli, "bad zstd level '%s' (0..%d)", optarg, DSQ_CTR_LEVEL_MAX);
            break;
        case OPT_NONFINITE: o.allow_nonfinite = 1; break;
        case OPT_RESUME: o.resume = 1; break;
        case OPT_CLIP: o.clip_search = 1; break;
        case OPT_SEARCH: o.range_search = co.range_search = 1; break;
        case OPT_NOSEARCH: o.range_search = co.range_search = -1; break;
        case OPT_SHARD:
            if (dsq_cli_parse_u64(optarg, 1, UINT64_MAX, &u) < 0)
                return free(rules), dsq_cli_usage_error(&cli, "bad shard size '%s'", optarg);
            o.shard_bytes = u;
            break;
        case OPT_JSON: cli.json = 1; break;
        case OPT_NOPROG: noprog = 1; break;
        case OPT_MEM:
            if (dsq_cli_parse_u64(optarg, 1, UINT64_MAX, &u) < 0)
                return free(rules), dsq_cli_usage_error(&cli, "bad memory size '%s'", optarg);
            o.mem_budget = u;
            break;
        case OPT_SAMPLE:
            if (dsq_cli_parse_int(optarg, 1, 1 << 20, &o.error_sample) < 0)
                return free(rules), dsq_cli_usage_error(&cli, "bad error sample '%s'", optarg);
            break;
        case OPT_NOJOURNAL: o.no_journal = 1; break;
        case OPT_CALIB: co.calib = optarg; break;
        case OPT_CSAMPLES:
            if (dsq_cli_parse_int(optarg, 1, 1 << 20, &co.data.n_samples) < 0)
                return free(rules), dsq_cli_usage_error(&cli, "bad sample count '%s'", optarg);
            break;
        case OPT_CSEQLEN:
            if (dsq_cli_parse_int(optarg, 2, 1 << 20, &co.data.seqlen) < 0)
                return free(rules), dsq_cli_usage_error(&cli, "bad sequence length '%s' (2..)", optarg);
            break;
        case OPT_SEED:
            if (dsq_cli_parse_u64(optarg, 0, UINT64_MAX, &co.data.seed) < 0)
                return free(rules), dsq_cli_usage_error(&cli, "bad seed '%s'", optarg);
            break;
        case OPT_MOECALIB:
            if (!strcmp(optarg, "all")) co.moe_calib_all = 1;
            else if (!strcmp(optarg, "routed")) co.moe_calib_all = 0;
            else return free(rules), dsq_cli_usage_error(&cli, "--moe-calib wants 'all' or 'routed', got '%s'", optarg);
            break;
        case OPT_CALIBRAM:
            if (dsq_cli_parse_u64(optarg, 1, UINT64_MAX, &u) < 0)
                return free(rules), dsq_cli_usage_error(&cli, "bad memory size '%s'", optarg);
            co.ram_limit = u;
            break;
        case OPT_MINTOK:
            if (dsq_cli_parse_int(optarg, 0, 1 << 30, &co.min_expert_tokens) < 0)
                return free(rules), dsq_cli_usage_error(&cli, "bad token count '%s'", optarg);
            break;
        case OPT_ALPHA:
            if (dsq_cli_parse_float(optarg, 0, 1, &dv) < 0)
                return free(rules), dsq_cli_usage_error(&cli, "bad alpha '%s' (0..1)", optarg);
            co.alpha = (float)dv;
            co.alpha_set = 1;
            break;
        case OPT_NOSMOOTH: co.smooth = 0; break;
        case OPT_NOCLIP: co.clip = 0; break;
        case OPT_GPTQ: co.gptq = 1; break;
        case OPT_ATTNBLOCK:
            if (dsq_cli_parse_int(optarg, 0, 64, &co.awq_attn_seqs) < 0)
                return free(rules), dsq_cli_usage_error(&cli, "bad sequence count '%s' (0..64)", optarg);
            break;
        case OPT_CROWS:
            if (dsq_cli_parse_int(optarg, 1, 1 << 20, &co.awq_tokens) < 0)
                return free(rules), dsq_cli_usage_error(&cli, "bad row count '%s' (1..1048576)", optarg);
            break;
        case OPT_CEROWS:
            if (dsq_cli_parse_int(optarg, 1, 1 << 20, &co.awq_expert_tokens) < 0)
                return free(rules), dsq_cli_usage_error(&cli, "bad row count '%s' (1..1048576)", optarg);
            break;
        case OPT_ROLLBACK:
            if (dsq_cli_parse_int(optarg, 0, 1 << 20, &co.rollback) < 0)
                return free(rules), dsq_cli_usage_error(&cli, "bad rollback count '%s' (0..1048576)", optarg);
            break;
        case OPT_GPTQDAMP:
            if (dsq_cli_parse_float(optarg, 1e-6, 10, &dv) < 0)
                return free(rules), dsq_cli_usage_error(&cli, "bad GPTQ dampening '%s' (1e-6..10)", optarg);
            co.gptq_damp = dv;
            break;
        case OPT_SAVESTATS: co.save_stats = optarg; break;
        case OPT_STATS: co.load_stats = optarg; break;
        case OPT_FORMAT:
            if (strcmp(optarg, "dsq") != 0 && !dsq_export_format_known(optarg))
                return free(rules), dsq_cli_usage_error(&cli, "unknown --format '%s' (dsq, ascend, awq, "
                                                        "compressed-tensors)", optarg);
            o.export_format = optarg;
            break;
        case OPT_CHECKPOINT:
            if (dsq_cli_parse_float(optarg, 0, 1e6, &dv) < 0)
                return free(rules), dsq_cli_usage_error(&cli, "bad checkpoint interval '%s'", optarg);
            o.checkpoint_seconds = dv;
            break;
        case ':': return free(rules), dsq_cli_usage_error(&cli, "option '%s' needs a value", argv[optind - 1]);
        default: return free(rules), dsq_cli_usage_error(&cli, "unknown option '%s'", argv[optind - 1]);
        }
    }
    int npos = argc - optind;
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
    char why[160];
    if (unused_option(seen, scheme, co.calib != NULL, co.load_stats != NULL, dry, o.no_journal, why, sizeof why))
        return free(rules), dsq_cli_usage_error(&cli, "%s", why);
    o.input = argv[optind];
    o.output = npos == 2 ? argv[optind + 1] : NULL;
    if (dsq_llama2c_is_checkpoint(o.input)) {
        /* a llama2.c .bin: convert from its exact float32 Hugging Face copy
         * (with tokenizer.bin / tok<vocab>.bin beside it, for calibration) */
        dsq_diag ld;
        dsq_diag_clear(&ld);
        int lrc = dsq_llama2c_to_temp_dir(o.input, NULL, &llama2c_tmp, &ld);
        if (lrc < 0) return free(rules), dsq_cli_fail(&cli, lrc, &ld);
        atexit(remove_llama2c_tmp);
        dsq_cli_info(&cli, 3, "%s: llama2.c checkpoint, read through %s", o.input, llama2c_tmp);
        o.input = llama2c_tmp;
    }
    cli.progress = cli.progress && !noprog && !cli.json && cli.level >= 2;

    /* Recipe errors are usage errors: unknown scheme, bad regex, w8a8. */
    dsq_recipe recipe;
    dsq_diag d;
    dsq_diag_clear(&d);
    int rc = preset ? dsq_recipe_init_preset(&recipe, preset, &d)
                    : dsq_recipe_init_ex(&recipe, scheme, calibrating, &d);
    if (rc == DSQ_OK) {
        recipe.group_size = group;
        recipe.calibrated = calibrating;
    }
    for (size_t i = 0; rc == DSQ_OK && i < nrules; i++)
        rc = rules[i].keep ? dsq_recipe_add_keep(&recipe, rules[i].s, &d)
                           : dsq_recipe_add_rule(&recipe, rules[i].s, &d);
    /* identifies the recipe in the calibration checkpoint's fingerprint */
    char target_id[4096];
    size_t tl = (size_t)snprintf(target_id, sizeof target_id, "scheme=%s preset=%s group=%d",
                                 scheme ? scheme : "", preset ? preset : "", group);
    for (size_t i = 0; i < nrules && tl < sizeof target_id; i++)
        tl += (size_t)snprintf(target_id + tl, sizeof target_id - tl, " %s%s", rules[i].keep ? "keep:" : "rule:",
                               rules[i].s);
    free(rules);
    if (rc < 0) {
        json_error(&cli, rc, &d);
        if (rc == DSQ_ERR_NOMEM) return dsq_cli_fail(&cli, rc, &d);
        return dsq_cli_usage_error(&cli, "%s", d.msg);
    }
    o.recipe = &recipe;
    o.cancel = &dsq_cli_interrupted;
    prog_ctx pc = { .cli = &cli };
    if (cli.progress) {
        o.progress = on_progress;
        o.progress_ctx = &pc;
    }

    /* Every output precondition before the first expensive step (issue 14). */
    if (!dry && (rc = dsq_convert_check_output(&o, &d)) < 0) {
        json_error(&cli, rc, &d);
        dsq_recipe_release(&recipe);
        return dsq_cli_fail(&cli, rc, &d);
    }

    /* Calibration runs before the conversion pass; its checkpoint is the
     * statistics file (default OUT.calib.dsq), so --resume continues it, and
     * a finished one is reused as is. */
    dsq_calib_result *cres = NULL;
    char *cjson = NULL, *cjson_t = NULL, *ckpt = NULL;
    if (calibrating && !dry) {
        /* Open the input and build the plan before calibrating (which can
         * take hours and writes its checkpoint): a config.json that
         * contradicts the tensors (or is missing), a missing shard and what
         * an export format cannot hold are refused now. */
        dsq_convert *chk = NULL;
        rc = dsq_convert_prepare(&chk, &o, &d);
        dsq_convert_free(chk);
        if (rc < 0) {
            json_error(&cli, rc, &d);
            dsq_recipe_release(&recipe);
            int code = dsq_cli_fail(&cli, rc, &d);
            return o.export_format && rc == DSQ_ERR_UNSUPPORTED ? DSQ_EXIT_USAGE : code;
        }
    }
    if (calibrating && !dry) {
        co.scheme = scheme ? scheme : dsq_recipe_preset_calib_scheme(preset);
        co.group_size = group;
        co.target = recipe_target;
        co.target_ctx = &recipe;
        co.target_id = target_id;
        co.threads = o.threads;
        co.overwrite = o.overwrite;
        if (co.calib && !co.save_stats) {
            size_t n = strlen(o.output) + sizeof ".calib.dsq";
            ckpt = malloc(n);
            if (!ckpt) return dsq_cli_fail(&cli, DSQ_ERR_NOMEM, NULL);
            snprintf(ckpt, n, "%s.calib.dsq", o.output);
            co.save_stats = ckpt;
            co.overwrite = 1;
        }
        if (o.resume && co.save_stats && dsq_path_exists(co.save_stats)) {
            co.load_stats = co.save_stats;   /* calibration finished before the interruption */
            co.save_stats = NULL;
        } else {
            co.resume = o.resume;
        }
        calib_prog cp = { .cli = &cli };
        rc = dsq_calib_run(o.input, &co, &cres, cli.progress ? on_calib_progress : NULL, &cp,
                           &dsq_cli_interrupted, &d);
        if (cp.begun) dsq_progress_end(&cp.p);
        if (rc == DSQ_OK) rc = dsq_calib_summary_json(cres, 0, &cjson);
        if (rc == DSQ_OK) rc = dsq_calib_summary_json(cres, 1, &cjson_t);
        if (rc < 0) {
            json_error(&cli, rc, &d);
            if (rc == DSQ_ERR_INTERRUPTED) dsq_cli_error(&cli, "interrupted; run again with --resume to continue");
            else dsq_cli_fail(&cli, rc, &d);
            dsq_calib_result_free(cres);
            dsq_recipe_release(&recipe);
            free(ckpt);
            return DSQ_EXIT_ERROR;
        }
        dsq_calib_totals ct;
        dsq_calib_get_totals(cres, &ct);
        if (ct.samples > 0 && ct.samples < ct.samples_requested)
            dsq_cli_warn(&cli, "%s: the calibration data fills only %d samples of %d tokens: using %d x %d = %llu "
                               "tokens instead of the %d x %d asked for", co.calib, ct.samples, ct.seqlen, ct.samples,
                         ct.seqlen, (unsigned long long)ct.tokens, ct.samples_requested, ct.seqlen);
        if (!cli.json) report_calibration(&cli, cres);
        /* rolled-back linears stay float: exact-name keep rules ahead of
         * every other rule */
        for (size_t i = 0; rc == DSQ_OK && i < dsq_calib_rollback_count(cres); i++)
            rc = dsq_recipe_keep_exact(&recipe, dsq_calib_rollback(cres, i, NULL), &d);
        if (rc < 0) {
            json_error(&cli, rc, &d);
            dsq_cli_fail(&cli, rc, &d);
            dsq_calib_result_free(cres);
            dsq_recipe_release(&recipe);
            free(ckpt);
            free(cjson);
            free(cjson_t);
            return DSQ_EXIT_ERROR;
        }
        o.calib = cres;
        o.calib_json = cjson;
    }

    dsq_convert *c = NULL;
    rc = dsq_convert_prepare(&c, &o, &d);
    if (rc < 0) {
        json_error(&cli, rc, &d);
        dsq_recipe_release(&recipe);
        dsq_calib_result_free(cres);
        free(cjson);
        free(cjson_t);
        free(ckpt);
        if (o.export_format && rc == DSQ_ERR_UNSUPPORTED) {   /* the target cannot load it */
            dsq_cli_fail(&cli, rc, &d);
            return DSQ_EXIT_USAGE;
        }
        return dsq_cli_fail(&cli, rc, &d);
    }
    if (!dsq_convert_have_config(c) && !cli.json)   /* only a single .safetensors file gets here */
        dsq_cli_warn(&cli, "no config.json next to '%s': a tensor-only conversion (shapes unchecked, the MTP "
                           "layer found by tensor names only); ds-eval cannot run the output", o.input);
    int exit_code = DSQ_EXIT_OK;
    if (!dry) {
        const dsq_plan *pl = dsq_convert_plan(c);
        dsq_cli_info(&cli, 3, "%zu tensors, %.3f GB in, about %.3f GB out before zstd, peak memory about %.0f MB",
                     pl->n, (double)pl->src_bytes / 1e9, (double)pl->est_bytes / 1e9,
                     (double)dsq_convert_peak_estimate(c) / 1e6);
        if (!o.resume && !o.shard_bytes && o.output) {
            char *tmp = dsq_outfile_tmp_name(o.output);
            if (tmp && dsq_path_exists(tmp))
                dsq_cli_warn(&cli, "discarding the partial output of an interrupted run "
                                   "(use --resume to continue it)");
            free(tmp);
        }
    }
    if (dry) {
        exit_code = print_plan(&cli, c, &recipe);
    } else {
        dsq_convert_summary s;
        rc = dsq_convert_run(c, &s, &d);
        if (pc.begun) dsq_progress_end(&pc.p);
        if (rc == DSQ_ERR_INTERRUPTED) {
            json_error(&cli, rc, &d);
            dsq_cli_error(&cli, o.no_journal ? "interrupted; nothing was kept (--no-journal)"
                                             : "interrupted; run again with --resume to continue");
            exit_code = DSQ_EXIT_ERROR;
        } else if (rc < 0) {
            json_error(&cli, rc, &d);
            exit_code = dsq_cli_fail(&cli, rc, &d);
            if (o.export_format && rc == DSQ_ERR_UNSUPPORTED) exit_code = DSQ_EXIT_USAGE;
        } else {
            int threads = o.threads > 0 ? o.threads : dsq_cpu_count();
            print_summary(&cli, &s, o.input, o.output, threads, o.error_sample, cjson_t);
            if (ckpt) unlink(ckpt);   /* the default checkpoint is not kept after success */
        }
    }
    dsq_convert_free(c);
    dsq_recipe_release(&recipe);
    dsq_calib_result_free(cres);
    free(cjson);
    free(cjson_t);
    free(ckpt);
    return exit_code;
}
