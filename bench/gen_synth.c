/* gen_synth.c - write a synthetic Hugging Face checkpoint with the real
 * DeepSeek-V3 tensor names and shapes (or Llama / Qwen2), BF16 or FP8-block,
 * for benchmarking and testing ds-quant at real tensor sizes.
 *
 *   build/bench/gen_synth --experts 128 --vocab 8192 OUTDIR      (~11.7 GB)
 *   build/bench/gen_synth --tiny --fp8 OUTDIR                    (tests)
 *
 * Streaming: one tensor in memory at a time (see tests/fixtures/synth_ckpt.h). */
#include "cli.h"
#include "synth_ckpt.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(void)
{
    printf(
"Usage: gen_synth [options] OUTDIR\n"
"  --tiny              tiny DeepSeek-shaped model (hidden 256, 8 experts, MTP)\n"
"  --arch A            deepseek_v3 (default), llama, qwen2\n"
"  --layers N          decoder layers (default 1)\n"
"  --dense K           first K layers dense (first_k_dense_replace, default 0)\n"
"  --experts E         routed experts per MoE layer (default 256)\n"
"  --vocab V           vocabulary size (default 129280)\n"
"  --mtp               add the MTP layer (index = layers)\n"
"  --fp8               DeepSeek FP8-block linears (F8_E4M3 + weight_scale_inv)\n"
"  --dtype T           BF16 (default), F16 or F32 for float tensors\n"
"  --shard-size SIZE   shards of at most SIZE (K/M/G) + index (default: one file)\n"
"  --seed S            value seed (default 1)\n"
"  -f                  overwrite existing files\n"
"The default is the real DeepSeek-V3 shape: hidden 7168, moe_intermediate 2048,\n"
"q_lora 1536, kv_lora 512, 128 heads.\n");
}

int main(int argc, char **argv)
{
    dsq_cli cli;
    dsq_cli_init(&cli, "gen_synth");
    dsq_synth_opts o;
    dsq_synth_defaults_v3(&o);
    static const struct option lo[] = {
        { "tiny", no_argument, NULL, 't' },      { "arch", required_argument, NULL, 'a' },
        { "layers", required_argument, NULL, 'l' }, { "dense", required_argument, NULL, 'd' },
        { "experts", required_argument, NULL, 'e' }, { "vocab", required_argument, NULL, 'V' },
        { "mtp", no_argument, NULL, 'm' },       { "fp8", no_argument, NULL, '8' },
        { "dtype", required_argument, NULL, 'D' }, { "shard-size", required_argument, NULL, 's' },
        { "seed", required_argument, NULL, 'S' }, { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 }
    };
    /* Options are applied after --tiny, wherever it appears. */
    int tiny = 0, fp8 = 0, mtp = -1;
    long layers = -1, dense = -1, experts = -1, vocab = -1;
    uint64_t shard = 0, seed = 1;
    const char *arch = NULL, *dtype = NULL;
    unsigned flags = 0;
    int ch;
    while ((ch = getopt_long(argc, argv, "hf", lo, NULL)) != -1) {
        switch (ch) {
        case 'h': usage(); return 0;
        case 'f': flags = 1; break;
        case 't': tiny = 1; break;
        case 'a': arch = optarg; break;
        case 'l': layers = strtol(optarg, NULL, 10); break;
        case 'd': dense = strtol(optarg, NULL, 10); break;
        case 'e': experts = strtol(optarg, NULL, 10); break;
        case 'V': vocab = strtol(optarg, NULL, 10); break;
        case 'm': mtp = 1; break;
        case '8': fp8 = 1; break;
        case 'D': dtype = optarg; break;
        case 's':
            if (dsq_cli_parse_u64(optarg, 1, UINT64_MAX, &shard) < 0)
                return dsq_cli_usage_error(&cli, "bad shard size '%s'", optarg);
            break;
        case 'S':
            if (dsq_cli_parse_u64(optarg, 0, UINT64_MAX, &seed) < 0)
                return dsq_cli_usage_error(&cli, "bad seed '%s'", optarg);
            break;
        default: return dsq_cli_usage_error(&cli, "bad option");
        }
    }
    if (optind + 1 != argc) return dsq_cli_usage_error(&cli, "expected OUTDIR");
    if (tiny) dsq_synth_defaults_tiny(&o);
    if (arch) {
        if (!strcmp(arch, "llama")) o.arch = DSQ_SYNTH_LLAMA;
        else if (!strcmp(arch, "qwen2")) o.arch = DSQ_SYNTH_QWEN2;
        else if (strcmp(arch, "deepseek_v3") != 0) return dsq_cli_usage_error(&cli, "unknown arch '%s'", arch);
        if (o.arch != DSQ_SYNTH_DEEPSEEK_V3 && !tiny) {
            o.hidden = 4096; o.intermediate = 14336; o.heads = 32; o.kv_heads = 8; o.vocab = 32000;
        }
        if (o.arch != DSQ_SYNTH_DEEPSEEK_V3) { o.kv_heads = o.heads / 2 ? o.heads / 2 : 1; o.mtp = 0; }
    }
    if (layers >= 0) o.layers = layers;
    if (dense >= 0) o.dense_layers = dense;
    if (experts >= 0) o.experts = experts;
    if (vocab > 0) o.vocab = vocab;
    if (mtp > 0) o.mtp = 1;
    o.fp8 = fp8;
    o.shard_bytes = shard;
    o.seed = seed;
    if (dtype) {
        o.dtype = dsq_dtype_from_name(dtype);
        if (o.dtype != DSQ_DTYPE_BF16 && o.dtype != DSQ_DTYPE_F16 && o.dtype != DSQ_DTYPE_F32)
            return dsq_cli_usage_error(&cli, "bad dtype '%s' (BF16, F16, F32)", dtype);
    }
    if (o.dense_layers > o.layers) o.dense_layers = o.layers;
    if (o.experts > 0) dsq_synth_fit_routing(&o);   /* any --experts gives a config ds-quant accepts */
    dsq_diag d;
    dsq_diag_clear(&d);
    uint64_t total = 0;
    double t0 = dsq_now();
    int rc = dsq_synth_write(&o, argv[optind], flags ? 1u : 0u, &total, &d);
    if (rc < 0) return dsq_cli_fail(&cli, rc, &d);
    dsq_cli_info(&cli, 2, "wrote %s: %.3f GB of tensors in %.1f s", argv[optind], (double)total / 1e9,
                 dsq_now() - t0);
    return 0;
}
