/* ds_export.c - ds-export: a .dsq (file or sharded set) -> the model
 * directory a serving engine loads (ascend / awq / compressed-tensors).
 * Every tensor is read with its SHA-256 checked, then handed to the same
 * writer ds-quant --format uses, in the .dsq's order, so both give the same
 * bytes. */
#include "cli.h"
#include "dsq_json.h"
#include "container.h"
#include "container_set.h"
#include "convert.h"
#include "dsq_sha256.h"
#include "dsq_version.h"
#include "export.h"
#include "recipe.h"

#include <getopt.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(void)
{
    printf(
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
"Options:\n"
"  --format F           output format (required)\n"
"  --shard-size SIZE    bound each safetensors shard (K/M/G suffixes; default\n"
"                       4G ascend, 5G otherwise)\n"
"  --resume             continue an interrupted export\n"
"  -f, --force          replace an existing OUT\n"
"  --json               one JSON summary on stdout\n"
"  -T, --threads N      accepted for symmetry (reading is single-threaded)\n"
"  -q / -v              less / more output\n"
"  -h, --help / -V, --version\n"
"\n"
"Exit status: 0 ok, 1 error, 2 usage or a combination the format cannot hold.\n");
}

enum { OPT_FORMAT = 256, OPT_SHARD, OPT_RESUME, OPT_JSON };

static int64_t config_layers(const char *meta)
{
    json_object *m = json_tokener_parse(meta), *c, *n;
    int64_t v = 0;
    if (m && json_object_object_get_ex(m, "config", &c) && json_object_is_type(c, json_type_object) &&
        json_object_object_get_ex(c, "num_hidden_layers", &n) && json_object_is_type(n, json_type_int))
        v = json_object_get_int64(n);
    json_object_put(m);
    return v;
}

/* Tensors in .dsq order: shard by shard, index order within each. */
static int build_src(dsq_ctr_set *set, const char *meta, dsq_export_src **out, const dsq_ctr_tensor_info ***infos,
                     dsq_ctr ***owners, size_t *n, dsq_diag *d)
{
    size_t total = 0;
    for (size_t s = 0; s < dsq_ctr_set_shards(set); s++) total += dsq_ctr_count(dsq_ctr_set_shard(set, s));
    dsq_export_src *v = calloc(total ? total : 1, sizeof *v);
    const dsq_ctr_tensor_info **inf = calloc(total ? total : 1, sizeof *inf);
    dsq_ctr **own = calloc(total ? total : 1, sizeof *own);
    if (!v || !inf || !own) {
        free(v); free(inf); free(own);
        return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    }
    int64_t layers = config_layers(meta);
    size_t k = 0;
    for (size_t s = 0; s < dsq_ctr_set_shards(set); s++) {
        dsq_ctr *r = dsq_ctr_set_shard(set, s);
        for (size_t i = 0; i < dsq_ctr_count(r); i++, k++) {
            const dsq_ctr_tensor_info *t = dsq_ctr_get(r, i);
            dsq_export_src *x = &v[k];
            inf[k] = t;
            own[k] = r;
            x->name = t->name;
            dsq_role_classify(t->name, layers, &x->role);
            x->scheme = dsq_scheme_by_id(t->scheme);
            if (!x->scheme) {
                free(v); free(inf); free(own);
                return dsq_fail(d, DSQ_ERR_UNSUPPORTED, dsq_ctr_set_shard_path(set, s), t->name, -1,
                                "unknown scheme id %u", t->scheme);
            }
            x->src_dtype = dsq_dtype_from_name(t->src_dtype);
            x->ndim = (int)t->ndim;
            int64_t rows = 1, cols = 1;
            for (uint32_t j = 0; j < t->ndim && j < 8; j++) {
                x->shape[j] = t->shape[j];
                if (t->ndim >= 2 && j == 0) rows = t->shape[0];
                else cols *= t->shape[j];
            }
            int rc = dsq_qshape_init(&x->qshape, x->scheme, rows, cols, (int32_t)t->group_size);
            if (rc < 0) {
                free(v); free(inf); free(own);
                return dsq_fail(d, rc, dsq_ctr_set_shard_path(set, s), t->name, -1, "bad shape for %s",
                                x->scheme->name);
            }
        }
    }
    *out = v;
    *infos = inf;
    *owners = own;
    *n = total;
    return DSQ_OK;
}

/* One JSON object on stdout, built with json-c (no hand escaping), freed. */
static void put_json(json_object *o)
{
    puts(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
    json_object_put(o);
}

int main(int argc, char **argv)
{
    dsq_cli cli;
    dsq_cli_init(&cli, "ds-export");
    static const struct option lo[] = {
        { "help", no_argument, NULL, 'h' },   { "version", no_argument, NULL, 'V' },
        { "quiet", no_argument, NULL, 'q' },  { "verbose", no_argument, NULL, 'v' },
        { "force", no_argument, NULL, 'f' },  { "threads", required_argument, NULL, 'T' },
        { "format", required_argument, NULL, OPT_FORMAT },
        { "shard-size", required_argument, NULL, OPT_SHARD },
        { "resume", no_argument, NULL, OPT_RESUME },
        { "json", no_argument, NULL, OPT_JSON },
        { NULL, 0, NULL, 0 }
    };
    dsq_export_opts o;
    memset(&o, 0, sizeof o);
    o.tool = "ds-export " DSQ_VERSION_STRING;
    int ch, threads;
    uint64_t u;
    while ((ch = getopt_long(argc, argv, ":hVqvfT:", lo, NULL)) != -1) {
        switch (ch) {
        case 'h': usage(); return DSQ_EXIT_OK;
        case 'V': dsq_cli_version(&cli); return DSQ_EXIT_OK;
        case 'q': cli.level = cli.level > 0 ? cli.level - 1 : 0; break;
        case 'v': cli.level++; break;
        case 'f': o.overwrite = 1; break;
        case 'T':
            if (dsq_cli_parse_int(optarg, 0, 1024, &threads) < 0)
                return dsq_cli_usage_error(&cli, "bad thread count '%s'", optarg);
            break;
        case OPT_FORMAT:
            if (!dsq_export_format_known(optarg))
                return dsq_cli_usage_error(&cli, "unknown --format '%s' (ascend, awq, compressed-tensors)", optarg);
            o.format = optarg;
            break;
        case OPT_SHARD:
            if (dsq_cli_parse_u64(optarg, 1, UINT64_MAX, &u) < 0)
                return dsq_cli_usage_error(&cli, "bad shard size '%s'", optarg);
            o.shard_bytes = u;
            break;
        case OPT_RESUME: o.resume = 1; break;
        case OPT_JSON: cli.json = 1; break;
        case ':': return dsq_cli_usage_error(&cli, "option '%s' needs a value", argv[optind - 1]);
        default: return dsq_cli_usage_error(&cli, "unknown option '%s'", argv[optind - 1]);
        }
    }
    if (argc - optind != 2) return dsq_cli_usage_error(&cli, "expected IN.dsq and OUT");
    if (!o.format) return dsq_cli_usage_error(&cli, "no --format given (ascend, awq, compressed-tensors)");
    if (o.resume && o.overwrite) return dsq_cli_usage_error(&cli, "--resume and -f are exclusive");
    const char *in = argv[optind];
    o.output = argv[optind + 1];

    dsq_diag d;
    dsq_diag_clear(&d);
    int rc = dsq_export_check_output(o.output, in, o.overwrite, o.resume, &d);
    if (rc < 0) return dsq_cli_fail(&cli, rc, &d);
    dsq_ctr_set *set = NULL;
    rc = dsq_ctr_set_open(&set, in, &d);
    if (rc < 0) return dsq_cli_fail(&cli, rc, &d);
    const char *meta = dsq_ctr_metadata(dsq_ctr_set_shard(set, 0), NULL);
    /* Resume fingerprint: the .dsq's identity (every tensor's hash). */
    char fp[2 * DSQ_SHA256_LEN + 1] = "-";
    dsq_sha256 h;
    if (dsq_sha256_init(&h) == DSQ_OK) {
        for (size_t s = 0; s < dsq_ctr_set_shards(set); s++) {
            dsq_ctr *r = dsq_ctr_set_shard(set, s);
            for (size_t i = 0; i < dsq_ctr_count(r); i++) dsq_sha256_update(&h, dsq_ctr_get(r, i)->sha256, DSQ_SHA256_LEN);
        }
        dsq_sha256_update(&h, meta, strlen(meta));
        char tail[96];
        snprintf(tail, sizeof tail, "%s %llu", o.format, (unsigned long long)o.shard_bytes);
        dsq_sha256_update(&h, tail, strlen(tail));
        uint8_t dig[DSQ_SHA256_LEN];
        dsq_sha256_final(&h, dig);
        dsq_sha256_hex(dig, fp);
    }
    o.fingerprint = fp;
    o.meta_json = meta;
    dsq_export_src *src = NULL;
    const dsq_ctr_tensor_info **inf = NULL;
    dsq_ctr **own = NULL;
    size_t n = 0;
    dsq_export *ex = NULL;
    rc = build_src(set, meta, &src, &inf, &own, &n, &d);
    if (rc == DSQ_OK) rc = dsq_export_open(&ex, &o, src, n, &d);
    int refused = rc == DSQ_ERR_UNSUPPORTED;
    double t0 = dsq_now();
    uint8_t *buf = NULL;
    size_t cap = 0;
    dsq_progress pr;
    int prog = cli.progress && !cli.json && cli.level >= 2;
    if (rc == DSQ_OK && prog) dsq_progress_begin(&pr, &cli, "export", "", (uint64_t)n);
    for (size_t i = rc == DSQ_OK ? dsq_export_resume_from(ex) : n; rc == DSQ_OK && i < n; i++) {
        if (dsq_cli_interrupted) {
            rc = dsq_fail(&d, DSQ_ERR_INTERRUPTED, NULL, NULL, -1, "interrupted");
            break;
        }
        size_t need = (size_t)inf[i]->raw_size;
        if (need > cap) {
            uint8_t *nb = realloc(buf, need);
            if (!nb) { rc = dsq_fail(&d, DSQ_ERR_NOMEM, NULL, inf[i]->name, -1, "out of memory"); break; }
            buf = nb;
            cap = need;
        }
        rc = dsq_ctr_read(own[i], inf[i], buf, cap, &d);   /* checks the SHA-256 */
        if (rc == DSQ_OK) rc = dsq_export_put(ex, i, buf, need, &d);
        if (rc == DSQ_ERR_UNSUPPORTED) refused = 1;
        if (prog) dsq_progress_update(&pr, i + 1);
    }
    if (prog && ex) dsq_progress_end(&pr);
    free(buf);
    dsq_export_summary s;
    memset(&s, 0, sizeof s);
    if (rc == DSQ_OK) rc = dsq_export_finish(ex, &s, &d);
    dsq_export_free(ex, rc == DSQ_ERR_INTERRUPTED);
    int code = DSQ_EXIT_OK;
    if (rc < 0) {
        if (cli.json) {
            char msg[1024];
            dsq_diag_format(&d, msg, sizeof msg);
            json_object *j = json_object_new_object();
            dsq_json_put_str(j, "tool", "ds-export");
            dsq_json_put_str(j, "status", "error");
            dsq_json_put_str(j, "code", dsq_status_name(rc));
            dsq_json_put_str(j, "message", msg);
            put_json(j);
        }
        code = dsq_cli_fail(&cli, rc, &d);
        if (rc == DSQ_ERR_INTERRUPTED) dsq_cli_error(&cli, "run again with --resume to continue");
        if (refused) code = DSQ_EXIT_USAGE;
    } else if (cli.json) {
        json_object *j = json_object_new_object();
        dsq_json_put_str(j, "tool", "ds-export");
        dsq_json_put_str(j, "version", DSQ_VERSION_STRING);
        dsq_json_put_str(j, "status", "ok");
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
        put_json(j);
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
    free(src);
    free(inf);
    free(own);
    dsq_ctr_set_close(set);
    return code;
}
