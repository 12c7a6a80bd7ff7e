/* eval_main.c - ds-eval: perplexity, KL divergence and GSM8K for a model.
 *
 *   ds-eval ppl   --model M --data FILE [--ctx 512] [--limit-tokens N]
 *                 [--save-logits F [--logits-format u16|topk] [--logits-topk K]]
 *   ds-eval kld   --base F --model M [--data FILE]
 *   ds-eval gsm8k --model M --data test.jsonl [--train train.jsonl] [--shots 5]
 *                 [--limit N] [--seed 1234] [--batch B] [--max-new-tokens 256]
 *                 [--out items.jsonl]
 *   ds-eval gsm8k --score completions.jsonl --data test.jsonl [--out items.jsonl]
 *   ds-eval gsm8k|ppl --endpoint URL [--served-model NAME] [--api-key-env VAR]
 *                 [--concurrency N] ... (the model behind an OpenAI-compatible server)
 *
 * The measuring logic lives in libdsq (eval_metrics.h, gsm8k.h); this file
 * parses options, wires the model and tokenizer into the callbacks there,
 * and prints. Exit codes: 0 ok, 1 error, 2 usage. */
#include "cli.h"
#include "container.h"
#include "container_set.h"
#include "dsq_file.h"
#include "endpoint.h"
#include "eval_metrics.h"
#include "gsm8k.h"
#include "llama2c.h"
#include "model.h"
#include "text_prefix.h"
#include "tokenizer.h"
#include "model_tokenizer.h"

#include <getopt.h>
#include <json-c/json.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TEXT ((size_t)1 << 30) /* --data cap for ppl: 1 GiB of text */

static const char usage_text[] =
"usage: ds-eval <command> [options]\n"
"\n"
"Commands:\n"
"  ppl     perplexity over non-overlapping windows (llama-perplexity rules:\n"
"          each window starts with BOS when the tokenizer adds one, only its\n"
"          second half is scored)\n"
"  kld     KL divergence of a model against base log-probs saved by\n"
"          'ppl --save-logits' (mean/median/p99/max KLD, same top-1, PPL ratio)\n"
"  gsm8k   lm-eval gsm8k v3.0: 5-shot, greedy, strict-match and flexible-extract\n"
"          exact_match; or --score completions made elsewhere\n"
"\n"
"Model and tokenizer:\n"
"  -m, --model PATH        safetensors file/index/directory or .dsq file\n"
"      --tokenizer PATH    tokenizer.json, its directory, or a llama2.c .bin\n"
"                          (default: for a .dsq the tokenizer its metadata\n"
"                          carries, else the model's directory)\n"
"      --ctx N             ppl/kld window (default 512); gsm8k: KV cache length\n"
"                          (default: the model's, min(max positions, 4096))\n"
"      --no-verify         skip the SHA-256 check of .dsq payloads stored\n"
"                          uncompressed (a damaged file then gives wrong numbers)\n"
"      --bf16-terms N      BF16 weights: bf16 terms per f32 activation in the\n"
"                          dot products, 3 (default: f32 accuracy, the KLD\n"
"                          baseline), 2, or 1 (activations rounded to bf16 as\n"
"                          llama.cpp does: faster, not a baseline)\n"
"      --dsa fp8|float     DeepSeek-V3.2 sparse attention: the indexer and MLA\n"
"                          latent with DeepSeek's e4m3 round trips (fp8, the\n"
"                          default) or in float (a bf16 indexer's arithmetic)\n"
"\n"
"ppl:\n"
"      --data FILE         text to score (read as bytes)\n"
"      --limit-tokens N    use only the first N tokens\n"
"      --bos window|first|no   BOS policy (default window): window = BOS over\n"
"                          each window's first token (llama-perplexity; only\n"
"                          when the tokenizer adds BOS); first = BOS once, at\n"
"                          the start of the text; no = no BOS at all\n"
"      --save-logits F     also write base log-probs for 'kld' (see below)\n"
"      --logits-format u16|topk   u16: every token, 16-bit (default, about\n"
"                          2 x vocab bytes per scored token); topk: top K only\n"
"                          (small; its KLD is a lower bound)\n"
"      --logits-topk K     exact top-K log-probs per position (default 16)\n"
"kld:\n"
"      --base F            file from 'ppl --save-logits' (it holds the tokens)\n"
"      --data FILE         optional: re-tokenize and refuse if tokens differ\n"
"      --bos window|first|no   with --data: the policy the base was made with\n"
"                          (the base file fixes the windows; default window)\n"
"      prints mean KLD with a 95% noise band (bootstrap over whole windows,\n"
"      2000 resamples, fixed seed), median, p99, p99.9, max and same top-1\n"
"      (share of positions whose argmax agrees with the base)\n"
"gsm8k:\n"
"      --data FILE         test split, JSONL {\"question\",\"answer\"}\n"
"      --train FILE        few-shot pool (default: train.jsonl beside --data)\n"
"      --shots N           few-shot examples (default 5)\n"
"      --seed N            few-shot seed (default 1234, lm-eval's)\n"
"      --limit N           first N test items only\n"
"      --batch B           sequences decoded together (default 8)\n"
"      --max-new-tokens N  generation cap (default 256, lm-eval's max_gen_toks)\n"
"      --bos auto|yes|no   BOS before each prompt (default auto: as the\n"
"                          tokenizer's add_special_tokens does)\n"
"      --score FILE        score completions from another engine instead of\n"
"                          generating: JSONL with \"completion\", \"response\" or\n"
"                          \"resps\" (lm-eval samples), matched by \"doc_id\" or\n"
"                          line order; no --model needed\n"
"      --out FILE          per-item JSONL: doc_id, question, completion, strict,\n"
"                          flexible, gold, correct_strict, correct_flexible\n"
"                          (with --endpoint also written as items arrive; a\n"
"                          rerun with the same --out continues, -f restarts)\n"
"\n"
"Served model (gsm8k, ppl, kld): instead of --model, an OpenAI-compatible server\n"
"(vLLM, vllm-ascend, MindIE, ds-serve) through POST /completions:\n"
"      --endpoint URL      base URL, e.g. http://127.0.0.1:8000/v1\n"
"      --served-model NAME model name (default: the only one /models lists)\n"
"      --api-key-env VAR   send the API key held in environment variable VAR\n"
"      --concurrency N     requests in flight (default 8)\n"
"      --timeout S         seconds per request (default 600)\n"
"      --retries N         retries with backoff on connection errors, 429 and\n"
"                          5xx (default 8; 0.5 s doubling to 30 s)\n"
"                          ppl needs --tokenizer: windows go as token ids with\n"
"                          echo + logprobs (prompt log-probs); kld takes the\n"
"                          windows from --base and reports a LOWER BOUND (the\n"
"                          served target-token log-probs only)\n"
"\n"
"Options a command does not use are refused (exit 2), not ignored.\n"
"\n"
"General:\n"
"  -T, --threads N         worker threads (default: all cores)\n"
"  -f, --force             overwrite output files\n"
"      --json              print one JSON object on stdout instead of text\n"
"      --no-progress       no progress line (it shows only on a terminal)\n"
"  -q, --quiet / -v, --verbose   less / more messages (repeatable)\n"
"  -h, --help / -V, --version\n"
"\n"
"Exit status: 0 ok, 1 error (bad input, i/o, interrupted), 2 usage.\n";

/* ppl/kld BOS policy (--bos); gsm8k keeps auto|yes|no (lm-eval's terms) */
enum ppl_bos { PPL_BOS_WINDOW = 0, PPL_BOS_FIRST = 1, PPL_BOS_NO = 2 };
static const char *const ppl_bos_names[] = { "window", "first", "no" };

enum {
    O_TOKENIZER = 256, O_CTX, O_DATA, O_LIMIT_TOKENS, O_SAVE_LOGITS, O_LOGITS_FORMAT,
    O_LOGITS_TOPK, O_BASE, O_TRAIN, O_SHOTS, O_SEED, O_LIMIT, O_BATCH, O_MAX_NEW, O_BOS,
    O_SCORE, O_OUT, O_JSON, O_NO_PROGRESS, O_ENDPOINT, O_SERVED_MODEL, O_API_KEY_ENV, O_CONCURRENCY,
    O_TIMEOUT, O_RETRIES, O_NO_VERIFY, O_BF16_TERMS, O_DSA
};

typedef struct opts {
    const char *cmd, *model, *tokenizer, *data, *save_logits, *base, *train, *score, *out;
    size_t ctx;            /* 0: command default */
    uint64_t limit_tokens; /* 0: all */
    int logits_format, logits_topk;
    int shots, batch, bos; /* gsm8k bos: -1 auto, 0 no, 1 yes */
    int ppl_bos;           /* ppl/kld: enum ppl_bos */
    const char *bos_arg;   /* --bos as given: its values depend on the command */
    unsigned long long seen; /* bit (opt - 256) per long option given, see check_used */
    uint64_t seed;
    size_t limit, max_new;
    int force;
    const char *endpoint, *served_model, *api_key_env;
    int concurrency, retries;
    double timeout;
    int no_verify;
    int bf16_terms;        /* 0: the engine's default */
    int dsa_mode;          /* enum dsq_dsa_mode */
} opts;

#define BIT(opt) (1ull << ((opt) - 256))

/* Options a command does not use are an error (exit 2), never silently
 * ignored: `ppl --bos no` used to be accepted and do nothing. The general
 * options (-T, -f, -q, -v, --json, --no-progress) are accepted everywhere. */
static int check_used(dsq_cli *cli, const opts *o, int ppl, int kld, int gsm)
{
    static const struct { int opt; const char *name; } names[] = {
        { O_TOKENIZER, "--tokenizer" }, { O_CTX, "--ctx" }, { O_DATA, "--data" },
        { O_LIMIT_TOKENS, "--limit-tokens" }, { O_SAVE_LOGITS, "--save-logits" },
        { O_LOGITS_FORMAT, "--logits-format" }, { O_LOGITS_TOPK, "--logits-topk" }, { O_BASE, "--base" },
        { O_TRAIN, "--train" }, { O_SHOTS, "--shots" }, { O_SEED, "--seed" }, { O_LIMIT, "--limit" },
        { O_BATCH, "--batch" }, { O_MAX_NEW, "--max-new-tokens" }, { O_BOS, "--bos" },
        { O_SCORE, "--score" }, { O_OUT, "--out" },
    };
    unsigned long long ok;
    const char *what = o->cmd;
    if (ppl)
        ok = BIT(O_TOKENIZER) | BIT(O_CTX) | BIT(O_DATA) | BIT(O_LIMIT_TOKENS) | BIT(O_SAVE_LOGITS) |
             BIT(O_LOGITS_FORMAT) | BIT(O_LOGITS_TOPK) | BIT(O_BOS);
    else if (kld)
        ok = BIT(O_TOKENIZER) | BIT(O_DATA) | BIT(O_BASE) | BIT(O_BOS);
    else if (gsm && o->score) {
        ok = BIT(O_SCORE) | BIT(O_DATA) | BIT(O_OUT) | BIT(O_LIMIT);
        what = "gsm8k --score";
    } else
        ok = BIT(O_TOKENIZER) | BIT(O_CTX) | BIT(O_DATA) | BIT(O_TRAIN) | BIT(O_SHOTS) | BIT(O_SEED) |
             BIT(O_LIMIT) | BIT(O_BATCH) | BIT(O_MAX_NEW) | BIT(O_BOS) | BIT(O_OUT);
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if ((o->seen & BIT(names[i].opt)) && !(ok & BIT(names[i].opt)))
            return dsq_cli_usage_error(cli, "%s does not use %s", what, names[i].name);
    if (ppl && !o->save_logits && (o->seen & (BIT(O_LOGITS_FORMAT) | BIT(O_LOGITS_TOPK))))
        return dsq_cli_usage_error(cli, "--logits-format and --logits-topk describe --save-logits: give it too");
    if (kld && o->bos_arg && !o->data)
        return dsq_cli_usage_error(cli, "kld: the base file fixes the windows; --bos checks them against --data: give --data too");
    return -1; /* go on */
}

static int parse(dsq_cli *cli, opts *o, int argc, char **argv, int *done)
{
    static const struct option lo[] = {
        { "model", required_argument, 0, 'm' },      { "tokenizer", required_argument, 0, O_TOKENIZER },
        { "ctx", required_argument, 0, O_CTX },      { "data", required_argument, 0, O_DATA },
        { "limit-tokens", required_argument, 0, O_LIMIT_TOKENS },
        { "save-logits", required_argument, 0, O_SAVE_LOGITS },
        { "logits-format", required_argument, 0, O_LOGITS_FORMAT },
        { "logits-topk", required_argument, 0, O_LOGITS_TOPK },
        { "base", required_argument, 0, O_BASE },    { "train", required_argument, 0, O_TRAIN },
        { "shots", required_argument, 0, O_SHOTS },  { "seed", required_argument, 0, O_SEED },
        { "limit", required_argument, 0, O_LIMIT },  { "batch", required_argument, 0, O_BATCH },
        { "max-new-tokens", required_argument, 0, O_MAX_NEW },
        { "bos", required_argument, 0, O_BOS },      { "score", required_argument, 0, O_SCORE },
        { "out", required_argument, 0, O_OUT },      { "json", no_argument, 0, O_JSON },
        { "no-progress", no_argument, 0, O_NO_PROGRESS },
        { "endpoint", required_argument, 0, O_ENDPOINT }, { "served-model", required_argument, 0, O_SERVED_MODEL },
        { "api-key-env", required_argument, 0, O_API_KEY_ENV }, { "concurrency", required_argument, 0, O_CONCURRENCY },
        { "timeout", required_argument, 0, O_TIMEOUT }, { "retries", required_argument, 0, O_RETRIES },
        { "no-verify", no_argument, 0, O_NO_VERIFY }, { "bf16-terms", required_argument, 0, O_BF16_TERMS },
        { "dsa", required_argument, 0, O_DSA },
        { "threads", required_argument, 0, 'T' },    { "force", no_argument, 0, 'f' },
        { "quiet", no_argument, 0, 'q' },            { "verbose", no_argument, 0, 'v' },
        { "help", no_argument, 0, 'h' },             { "version", no_argument, 0, 'V' },
        { 0, 0, 0, 0 }
    };
    memset(o, 0, sizeof *o);
    o->logits_format = DSQ_LOGP_U16;
    o->logits_topk = 16;
    o->shots = DSQ_GSM8K_SHOTS;
    o->seed = DSQ_GSM8K_SEED;
    o->batch = 8;
    o->bos = -1;
    o->max_new = DSQ_GSM8K_MAX_NEW;
    o->concurrency = 8;
    o->retries = 8;
    o->timeout = 600;
    *done = 0;
    int c, no_progress = 0;
    uint64_t u;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":m:T:fqvhV", lo, NULL)) != -1) {
        const char *a = optarg;
        if (c >= 256 && c < 256 + 64) o->seen |= 1ull << (c - 256);
        switch (c) {
        case 'm': o->model = a; break;
        case O_TOKENIZER: o->tokenizer = a; break;
        case O_DATA: o->data = a; break;
        case O_SAVE_LOGITS: o->save_logits = a; break;
        case O_NO_VERIFY: o->no_verify = 1; break;
        case O_BF16_TERMS:
            if (dsq_cli_parse_int(a, 1, 3, &o->bf16_terms))
                return dsq_cli_usage_error(cli, "--bf16-terms: expected 1..3, got '%s'", a);
            break;
        case O_DSA:
            if ((o->dsa_mode = dsq_dsa_mode_parse(a)) < 0)
                return dsq_cli_usage_error(cli, "--dsa: expected fp8 or float, got '%s'", a);
            break;
        case O_BASE: o->base = a; break;
        case O_TRAIN: o->train = a; break;
        case O_SCORE: o->score = a; break;
        case O_OUT: o->out = a; break;
        case O_CTX:
            if (dsq_cli_parse_u64(a, 3, INT32_MAX, &u)) return dsq_cli_usage_error(cli, "--ctx: expected 3..2^31-1, got '%s'", a);
            o->ctx = (size_t)u;
            break;
        case O_LIMIT_TOKENS:
            if (dsq_cli_parse_u64(a, 1, UINT64_MAX, &o->limit_tokens)) return dsq_cli_usage_error(cli, "--limit-tokens: bad number '%s'", a);
            break;
        case O_LOGITS_FORMAT:
            if (!strcmp(a, "u16")) o->logits_format = DSQ_LOGP_U16;
            else if (!strcmp(a, "topk")) o->logits_format = DSQ_LOGP_TOPK;
            else return dsq_cli_usage_error(cli, "--logits-format: expected u16 or topk, got '%s'", a);
            break;
        case O_LOGITS_TOPK:
            if (dsq_cli_parse_int(a, 1, DSQ_LOGP_MAX_TOPK, &o->logits_topk)) return dsq_cli_usage_error(cli, "--logits-topk: expected 1..%d, got '%s'", DSQ_LOGP_MAX_TOPK, a);
            break;
        case O_SHOTS:
            if (dsq_cli_parse_int(a, 0, 64, &o->shots)) return dsq_cli_usage_error(cli, "--shots: expected 0..64, got '%s'", a);
            break;
        case O_SEED:
            if (dsq_cli_parse_u64(a, 0, UINT64_MAX, &o->seed)) return dsq_cli_usage_error(cli, "--seed: bad number '%s'", a);
            break;
        case O_LIMIT:
            if (dsq_cli_parse_u64(a, 1, SIZE_MAX, &u)) return dsq_cli_usage_error(cli, "--limit: bad number '%s'", a);
            o->limit = (size_t)u;
            break;
        case O_BATCH:
            if (dsq_cli_parse_int(a, 1, 4096, &o->batch)) return dsq_cli_usage_error(cli, "--batch: expected 1..4096, got '%s'", a);
            break;
        case O_MAX_NEW:
            if (dsq_cli_parse_u64(a, 1, 1u << 20, &u)) return dsq_cli_usage_error(cli, "--max-new-tokens: bad number '%s'", a);
            o->max_new = (size_t)u;
            break;
        case O_BOS: o->bos_arg = a; break;   /* checked once the command is known */
        case O_ENDPOINT: o->endpoint = a; break;
        case O_SERVED_MODEL: o->served_model = a; break;
        case O_API_KEY_ENV: o->api_key_env = a; break;
        case O_CONCURRENCY:
            if (dsq_cli_parse_int(a, 1, 1024, &o->concurrency)) return dsq_cli_usage_error(cli, "--concurrency: expected 1..1024, got '%s'", a);
            break;
        case O_RETRIES:
            if (dsq_cli_parse_int(a, 0, 1000, &o->retries)) return dsq_cli_usage_error(cli, "--retries: expected 0..1000, got '%s'", a);
            break;
        case O_TIMEOUT:
            if (dsq_cli_parse_float(a, 0.001, 86400, &o->timeout)) return dsq_cli_usage_error(cli, "--timeout: expected seconds in (0, 86400], got '%s'", a);
            break;
        case O_JSON: cli->json = 1; break;
        case O_NO_PROGRESS: no_progress = 1; break;
        case 'T':
            if (dsq_cli_parse_int(a, 0, 4096, &cli->threads)) return dsq_cli_usage_error(cli, "-T: expected 0..4096, got '%s'", a);
            break;
        case 'f': o->force = 1; break;
        case 'q': cli->level--; break;
        case 'v': cli->level++; break;
        case 'h': fputs(usage_text, stdout); *done = 1; return DSQ_EXIT_OK;
        case 'V': dsq_cli_version(cli); *done = 1; return DSQ_EXIT_OK;
        case ':':
            if (optopt && optopt < 256) return dsq_cli_usage_error(cli, "option '-%c' needs a value", optopt);
            return dsq_cli_usage_error(cli, "option '%s' needs a value", argv[optind - 1]);
        default:
            if (optopt && optopt < 256) return dsq_cli_usage_error(cli, "unknown option '-%c'", optopt);
            return dsq_cli_usage_error(cli, "unknown option '%s'", argv[optind - 1]);
        }
    }
    if (cli->level < 0) cli->level = 0;
    if (no_progress || cli->level < 2) cli->progress = 0;
    if (optind >= argc) return dsq_cli_usage_error(cli, "no command (ppl, kld or gsm8k)");
    o->cmd = argv[optind++];
    if (optind < argc) return dsq_cli_usage_error(cli, "unexpected argument '%s'", argv[optind]);
    if (strcmp(o->cmd, "ppl") && strcmp(o->cmd, "kld") && strcmp(o->cmd, "gsm8k"))
        return dsq_cli_usage_error(cli, "unknown command '%s' (ppl, kld or gsm8k)", o->cmd);
    int ppl = !strcmp(o->cmd, "ppl"), kld = !strcmp(o->cmd, "kld"), gsm = !strcmp(o->cmd, "gsm8k");
    if (!o->data && !kld) return dsq_cli_usage_error(cli, "%s needs --data", o->cmd);
    if (o->endpoint) {
        if (kld && o->data && !o->tokenizer) return dsq_cli_usage_error(cli, "kld --endpoint --data needs --tokenizer");
        if (o->model) return dsq_cli_usage_error(cli, "--endpoint replaces --model: drop one");
        if (o->score) return dsq_cli_usage_error(cli, "--score scores existing completions: drop --endpoint");
        if (o->save_logits) return dsq_cli_usage_error(cli, "--save-logits needs every token's log-prob: use --model");
        if (ppl && !o->tokenizer) return dsq_cli_usage_error(cli, "ppl --endpoint needs --tokenizer (the served model's)");
        if (o->bos_arg) return dsq_cli_usage_error(cli, "--bos: with --endpoint the server's tokenizer decides BOS");
    } else if (o->served_model || o->api_key_env ||
               (o->seen & (BIT(O_CONCURRENCY) | BIT(O_TIMEOUT) | BIT(O_RETRIES)))) {
        return dsq_cli_usage_error(cli, "--served-model, --api-key-env, --concurrency, --timeout and --retries go with --endpoint");
    }
    if (!o->model && !o->endpoint && !(gsm && o->score)) return dsq_cli_usage_error(cli, "%s needs --model", o->cmd);
    if (kld && !o->base) return dsq_cli_usage_error(cli, "kld needs --base");
    if (!kld && o->base) return dsq_cli_usage_error(cli, "--base is for kld");
    if (!ppl && (o->save_logits || o->limit_tokens)) return dsq_cli_usage_error(cli, "--save-logits and --limit-tokens are for ppl");
    if (kld && o->ctx) return dsq_cli_usage_error(cli, "kld takes its context from the base file");
    if (!gsm && (o->score || o->train || o->out || o->limit)) return dsq_cli_usage_error(cli, "--score, --train, --out and --limit are for gsm8k");
    if (gsm && o->score && o->model) return dsq_cli_usage_error(cli, "--score scores existing completions: drop --model");
    if (o->bos_arg) {
        const char *a = o->bos_arg;
        if (gsm) {
            if (!strcmp(a, "auto")) o->bos = -1;
            else if (!strcmp(a, "yes")) o->bos = 1;
            else if (!strcmp(a, "no")) o->bos = 0;
            else return dsq_cli_usage_error(cli, "--bos: gsm8k expects auto, yes or no, got '%s'", a);
        } else {
            int k = 0;
            while (k < 3 && strcmp(a, ppl_bos_names[k])) k++;
            if (k == 3) return dsq_cli_usage_error(cli, "--bos: %s expects window, first or no, got '%s'", o->cmd, a);
            o->ppl_bos = k;
        }
    }
    return check_used(cli, o, ppl, kld, gsm);
}

/* ====================================================================== */
/* shared plumbing                                                        */
/* ====================================================================== */

static void print_json(json_object *j)
{
    puts(json_object_to_json_string_ext(j, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
    json_object_put(j);
}

static json_object *jnum(double v) { return isfinite(v) ? json_object_new_double(v) : json_object_new_null(); }

/* The model's directory (or the model itself when it is one). */
static char *model_dir(const char *model)
{
    if (dsq_path_is_dir(model)) return strdup(model);
    char *c = strdup(model);
    if (!c) return NULL;
    char *sl = strrchr(c, '/');
    if (!sl) { free(c); return strdup("."); }
    if (sl == c) sl[1] = 0; else *sl = 0;
    return c;
}

typedef struct runner {
    dsq_model *m;
    dsq_state *st;
    dsq_tokenizer *tok;
    size_t vocab;
    dsq_progress prog;
} runner;

/* --tokenizer when given; for a .dsq model the tokenizer in its metadata,
 * else the one beside it; for safetensors the model's directory. */
static int load_tokenizer(const dsq_cli *cli, const opts *o, dsq_tokenizer **tok, dsq_diag *d)
{
    if (o->tokenizer) return dsq_tokenizer_load(tok, o->tokenizer, d);
    if (!dsq_path_exists(o->model)) return dsq_fail(d, DSQ_ERR_NOT_FOUND, o->model, NULL, -1, "no such model file or directory");
    int dsq = dsq_ctr_set_is_dsq(o->model);
    if (dsq) {
        int rc = dsq_tokenizer_from_dsq(o->model, tok, d);
        if (rc == 1) dsq_cli_info(cli, 3, "tokenizer from the metadata of %s", o->model);
        if (rc == 1) return DSQ_OK;
        if (rc < 0) {
            dsq_cli_info(cli, 1, "pass --tokenizer to use another tokenizer");
            return rc;
        }
    }
    if (!dsq && dsq_llama2c_is_checkpoint(o->model)) {
        /* a llama2.c .bin: its tokenizer by llama2.c's names beside it */
        char *t = dsq_llama2c_find_tokenizer(o->model);
        if (!t) return dsq_fail(d, DSQ_ERR_NOT_FOUND, o->model, NULL, -1,
                                "no tokenizer.bin or tok<vocab>.bin beside this llama2.c checkpoint; pass --tokenizer PATH");
        int rc = dsq_tokenizer_load(tok, t, d);
        if (rc == DSQ_OK) dsq_cli_info(cli, 3, "tokenizer from %s", t);
        free(t);
        return rc;
    }
    char *dir = model_dir(o->model);
    if (!dir) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    int rc;
    char *j = dsq_path_join(dir, "tokenizer.json"), *b = dsq_path_join(dir, "tokenizer.bin");
    if (!j || !b) rc = dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    else if (!dsq_path_exists(j) && !dsq_path_exists(b))
        rc = dsq_fail(d, DSQ_ERR_NOT_FOUND, o->model, NULL, -1,
                      "%sno tokenizer.json or tokenizer.bin in %s; pass --tokenizer PATH",
                      dsq ? "no tokenizer in the .dsq metadata and " : "", dir);
    else {
        rc = dsq_tokenizer_load(tok, dir, d);
        if (rc == DSQ_OK) dsq_cli_info(cli, 3, "tokenizer from %s", dir);
        else dsq_cli_info(cli, 1, "pass --tokenizer to use another tokenizer");
    }
    free(j);
    free(b);
    free(dir);
    return rc;
}

/* Non-finite logits come from the model, not the data: name its file
 * (issue 14.14) so the message points at what to check. */
static void name_model(int rc, const char *model, dsq_diag *d)
{
    if (rc != DSQ_ERR_NONFINITE || d->path[0]) return;
    snprintf(d->path, sizeof d->path, "%s", model);
}

static int open_model(const dsq_cli *cli, const opts *o, runner *r, int max_batch, size_t ctx, dsq_diag *d)
{
    dsq_model_opts mo;
    dsq_model_opts_default(&mo);
    mo.threads = cli->threads;
    mo.no_verify = o->no_verify;
    mo.bf16_terms = o->bf16_terms;
    mo.dsa_mode = o->dsa_mode;
    double t0 = dsq_now();
    int rc = dsq_model_open(&r->m, o->model, &mo, d);
    if (rc < 0) return rc;
    /* Positions past max_position_embeddings were never trained: a window
     * that long gives a number (ppl 481 instead of 7.1) that means nothing. */
    int64_t mpe = dsq_model_get_config(r->m)->max_position_embeddings;
    if (mpe > 0 && (int64_t)ctx > mpe)
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, o->model, NULL, -1,
                        "context %zu exceeds the model's max_position_embeddings (%lld): positions past it "
                        "were never trained, so the result would be meaningless; use --ctx %lld or less",
                        ctx, (long long)mpe, (long long)mpe);
    r->vocab = (size_t)dsq_model_get_config(r->m)->vocab_size;
    r->st = dsq_state_create(r->m, max_batch, (int64_t)ctx);
    if (!r->st) return dsq_fail(d, DSQ_ERR_NOMEM, o->model, NULL, -1, "cannot allocate the KV cache for %d x %zu tokens", max_batch, ctx);
    if (cli->level >= 3) {
        char info[1024];
        dsq_model_info(r->m, info, sizeof info);
        dsq_cli_info(cli, 3, "loaded in %.1f s: %s", dsq_now() - t0, info);
    }
    return DSQ_OK;
}

static void runner_close(runner *r)
{
    dsq_state_free(r->st);
    dsq_model_free(r->m);
    dsq_tokenizer_free(r->tok);
    memset(r, 0, sizeof *r);
}

/* dsq_window_logits_fn over the model: fill the cache with the first half,
 * then compute logits for positions first .. n-2 (the last token's logits
 * predict nothing inside the window, so it is not run). */
static int model_window(void *u, const int32_t *w, size_t n, size_t first, float *logits, dsq_diag *d)
{
    runner *r = u;
    dsq_state_reset(r->st, 0);
    DSQ_TRY(dsq_forward(r->m, r->st, 0, w, (int)first, NULL, 0, d));
    return dsq_forward(r->m, r->st, 0, w + first, (int)(n - 1 - first), logits, 0, d);
}

static void window_progress(void *u, size_t done, size_t total)
{
    runner *r = u;
    (void)total;
    dsq_progress_update(&r->prog, done);
}

/* Whether encode(add_special) puts BOS in front (llama-perplexity's add_bos). */
static int32_t tokenizer_adds_bos(const dsq_tokenizer *t)
{
    int32_t *ids = NULL, bos = dsq_tokenizer_bos(t), res = -1;
    size_t n = 0;
    if (bos >= 0 && dsq_tokenizer_encode(t, "", 0, 1, &ids, &n, NULL) == 0 && n >= 1 && ids[0] == bos)
        res = bos;
    free(ids);
    return res;
}

/* Tokenize a ppl/kld text under a BOS policy. llama-perplexity:
 * common_tokenize(text, add_special = true, parse_special = false), so
 * "<s>" in the text stays text; "first" forces the BOS even where the
 * tokenizer adds none, "no" adds no special token at all. With a token
 * limit only the prefix that yields it is read (text_prefix.h). */
static int tokenize_file(const dsq_cli *cli, const dsq_tokenizer *tok, const char *path, int policy,
                         uint64_t limit, int32_t **ids, size_t *n, dsq_diag *d)
{
    if (policy == PPL_BOS_FIRST && dsq_tokenizer_bos(tok) < 0)
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "--bos first: the tokenizer has no BOS token");
    size_t len = 0;
    double t0 = dsq_now();
    unsigned flags = policy == PPL_BOS_NO ? 0u
                   : policy == PPL_BOS_FIRST ? (unsigned)(DSQ_TOK_ADD_SPECIAL | DSQ_TOK_FORCE_BOS)
                   : (unsigned)DSQ_TOK_ADD_SPECIAL;
    int rc = dsq_tokenize_file_prefix(tok, path, limit, MAX_TEXT, flags, ids, n, &len, d);
    if (rc == DSQ_OK) dsq_cli_info(cli, 3, "%s: %zu bytes -> %zu tokens in %.2f s", path, len, *n, dsq_now() - t0);
    return rc;
}

/* ====================================================================== */
/* ppl                                                                    */
/* ====================================================================== */

/* bos_id: the BOS the policy put in (window: over each window's first token;
 * first: the text's leading one), -1 for none */
static void print_ppl(const dsq_cli *cli, const opts *o, const dsq_ppl_plan *plan, const dsq_ppl_result *res, double secs,
                      int32_t bos_id);

/* Endpoint settings from the options; the key comes from the environment
 * only (never the command line, never printed). */
static int endpoint_opts(const dsq_cli *cli, const opts *o, dsq_endpoint_opts *eo)
{
    memset(eo, 0, sizeof *eo);
    eo->url = o->endpoint;
    eo->model = o->served_model;
    eo->concurrency = o->concurrency;
    eo->timeout_s = o->timeout;
    eo->retries = o->retries;
    eo->cancel = &dsq_cli_interrupted;
    if (o->api_key_env) {
        eo->api_key = getenv(o->api_key_env);
        if (!eo->api_key || !eo->api_key[0]) {
            dsq_cli_error(cli, "--api-key-env: environment variable %s is unset or empty", o->api_key_env);
            return -1;
        }
    }
    return 0;
}

/* ppl --endpoint: the same windows, scored from the server's prompt log-probs. */
static int ppl_endpoint(dsq_cli *cli, const opts *o, runner *r, int32_t *tokens, const dsq_ppl_plan *plan,
                        int rc, dsq_diag *d)
{
    dsq_endpoint_opts eo;
    char *model = NULL;
    dsq_ppl_result res;
    double t0 = dsq_now();
    if (rc == DSQ_OK && endpoint_opts(cli, o, &eo) < 0) { free(tokens); runner_close(r); return DSQ_EXIT_ERROR; }
    if (rc == DSQ_OK) rc = dsq_ep_resolve_model(&eo, &model, d);
    if (rc == DSQ_OK) {
        dsq_cli_info(cli, 3, "%s: model '%s', %zu windows of %zu tokens, %d in flight", o->endpoint, model,
                     plan->n_chunks, plan->n_ctx, o->concurrency);
        dsq_progress_begin(&r->prog, cli, "ppl", "windows", plan->n_chunks);
        dsq_eval_hooks h = { .cancel = &dsq_cli_interrupted, .progress = window_progress, .progress_user = r };
        rc = dsq_ep_ppl_run(&eo, model, plan, tokens, &h, &res, d);
        dsq_progress_end(&r->prog);
    }
    free(model);
    free(tokens);
    runner_close(r);
    if (rc < 0) return dsq_cli_fail(cli, rc, d);
    print_ppl(cli, o, plan, &res, dsq_now() - t0, plan->bos);   /* endpoint: always per-window BOS */
    return DSQ_EXIT_OK;
}

static int cmd_ppl(dsq_cli *cli, const opts *o)
{
    dsq_diag d;
    dsq_diag_clear(&d);
    runner r = { 0 };
    int32_t *tokens = NULL;
    size_t n_tok = 0, n_ctx = o->ctx ? o->ctx : 512;
    dsq_logp_writer w = { 0 };
    int have_w = 0;
    int rc = load_tokenizer(cli, o, &r.tok, &d);
    if (rc == DSQ_OK) rc = tokenize_file(cli, r.tok, o->data, o->ppl_bos, o->limit_tokens, &tokens, &n_tok, &d);
    if (rc == DSQ_OK && o->limit_tokens && o->limit_tokens < n_tok) n_tok = (size_t)o->limit_tokens;
    dsq_ppl_plan plan;
    /* window: BOS written over every window's first token (when the
     * tokenizer adds one); first: the text's own leading BOS only */
    int32_t bos_id = rc == DSQ_OK && o->ppl_bos == PPL_BOS_WINDOW ? tokenizer_adds_bos(r.tok)
                   : rc == DSQ_OK && o->ppl_bos == PPL_BOS_FIRST ? dsq_tokenizer_bos(r.tok) : -1;
    if (rc == DSQ_OK)
        rc = dsq_ppl_plan_init(&plan, n_tok, n_ctx, o->ppl_bos == PPL_BOS_WINDOW ? bos_id : -1, &d);
    if (o->endpoint) return ppl_endpoint(cli, o, &r, tokens, &plan, rc, &d);
    if (rc == DSQ_OK) rc = open_model(cli, o, &r, 1, n_ctx, &d);
    if (rc == DSQ_OK && o->save_logits) {
        rc = dsq_logp_writer_open(&w, o->save_logits, o->force ? DSQ_OUT_OVERWRITE : 0, &plan, tokens,
                                  r.vocab, o->logits_format, o->logits_topk, &d);
        have_w = rc == DSQ_OK;
    }
    dsq_ppl_result res;
    double t0 = dsq_now();
    if (rc == DSQ_OK) {
        dsq_cli_info(cli, 3, "%zu windows of %zu tokens, %zu scored per window", plan.n_chunks, n_ctx, plan.per_chunk);
        dsq_progress_begin(&r.prog, cli, "ppl", "windows", plan.n_chunks);
        dsq_eval_hooks h = { .cancel = &dsq_cli_interrupted, .progress = window_progress,
                             .progress_user = &r, .pool = dsq_model_pool(r.m) };
        rc = dsq_ppl_run(&plan, tokens, r.vocab, model_window, &r, have_w ? &w : NULL, &h, &res, &d);
        name_model(rc, o->model, &d);
        dsq_progress_end(&r.prog);
    }
    double secs = dsq_now() - t0;
    if (have_w) {
        if (rc == DSQ_OK) rc = dsq_logp_writer_commit(&w, &d);
        else dsq_logp_writer_abort(&w);
    }
    free(tokens);
    runner_close(&r);
    if (rc < 0) return dsq_cli_fail(cli, rc, &d);
    print_ppl(cli, o, &plan, &res, secs, bos_id);
    return DSQ_EXIT_OK;
}

static void print_ppl(const dsq_cli *cli, const opts *o, const dsq_ppl_plan *pl, const dsq_ppl_result *rs, double secs,
                      int32_t bos_id)
{
    const dsq_ppl_plan plan = *pl;
    const dsq_ppl_result res = *rs;
    double evaluated = (double)(plan.n_chunks * plan.n_ctx);
    if (cli->json) {
        json_object *j = json_object_new_object();
        json_object_object_add(j, "command", json_object_new_string("ppl"));
        json_object_object_add(j, "ppl", jnum(res.ppl));
        json_object_object_add(j, "ppl_stderr", jnum(res.ppl_stderr));
        json_object_object_add(j, "mean_nll", jnum(res.mean_nll));
        json_object_object_add(j, "tokens_scored", json_object_new_int64((int64_t)res.count));
        json_object_object_add(j, "windows", json_object_new_int64((int64_t)plan.n_chunks));
        json_object_object_add(j, "n_ctx", json_object_new_int64((int64_t)plan.n_ctx));
        json_object_object_add(j, "bos", json_object_new_string(ppl_bos_names[o->ppl_bos]));
        json_object_object_add(j, "bos_id", bos_id >= 0 ? json_object_new_int(bos_id) : NULL);
        json_object_object_add(j, "seconds", jnum(secs));
        json_object_object_add(j, "tokens_per_s", jnum(evaluated / secs));
        if (o->save_logits) json_object_object_add(j, "saved_logits", json_object_new_string(o->save_logits));
        print_json(j);
    } else if (cli->level >= 2) {
        printf("PPL = %.4f +/- %.5f\n", res.ppl, res.ppl_stderr);
        printf("mean NLL %.6f nats/token over %llu tokens (%zu windows of %zu, second half scored, %s)\n",
               res.mean_nll, (unsigned long long)res.count, plan.n_chunks, plan.n_ctx,
               bos_id < 0 ? "no BOS" : o->ppl_bos == PPL_BOS_WINDOW ? "BOS over each window's first token"
                                                                  : "BOS once at the start of the text");
        printf("%.1f tokens/s (%.0f tokens in %.1f s)\n", evaluated / secs, evaluated, secs);
        if (o->save_logits) printf("base log-probs saved to %s\n", o->save_logits);
    }
}

/* ====================================================================== */
/* kld                                                                    */
/* ====================================================================== */

static int cmd_kld(dsq_cli *cli, const opts *o)
{
    dsq_diag d;
    dsq_diag_clear(&d);
    runner r = { 0 };
    dsq_logp_reader base;
    int rc = dsq_logp_reader_open(&base, o->base, &d);
    if (rc < 0) return dsq_cli_fail(cli, rc, &d);
    dsq_ppl_plan plan;
    dsq_logp_reader_plan(&base, &plan);
    if (o->data) {
        /* the base must have been computed on exactly these windows */
        int32_t *tokens = NULL, *win = NULL;
        size_t n = 0;
        rc = load_tokenizer(cli, o, &r.tok, &d);
        if (rc == DSQ_OK) rc = tokenize_file(cli, r.tok, o->data, o->ppl_bos, 0, &tokens, &n, &d);
        /* the policy shows in the header too: window writes its BOS id there */
        int32_t want_bos = o->ppl_bos == PPL_BOS_WINDOW && rc == DSQ_OK ? tokenizer_adds_bos(r.tok) : -1;
        if (rc == DSQ_OK && plan.bos != want_bos)
            rc = dsq_fail(&d, DSQ_ERR_DATA, o->base, NULL, -1,
                          "the base was made with %s, not --bos %s", plan.bos >= 0 ? "--bos window" : "--bos first or no",
                          ppl_bos_names[o->ppl_bos]);
        if (rc == DSQ_OK && (n < plan.n_chunks * plan.n_ctx || !(win = malloc(plan.n_ctx * sizeof *win))))
            rc = dsq_fail(&d, DSQ_ERR_DATA, o->data, NULL, -1, "the base was computed on different tokens (%zu here, it needs %zu)",
                          n, plan.n_chunks * plan.n_ctx);
        for (size_t c = 0; rc == DSQ_OK && c < plan.n_chunks; c++) {
            dsq_ppl_window(&plan, tokens, c, win);
            if (memcmp(win, base.tokens + c * plan.n_ctx, plan.n_ctx * sizeof *win))
                rc = dsq_fail(&d, DSQ_ERR_DATA, o->data, NULL, -1,
                              "the base was computed on different tokens (window %zu differs; made with "
                              "another --bos than %s?)", c, ppl_bos_names[o->ppl_bos]);
        }
        free(tokens);
        free(win);
    }
    dsq_endpoint_opts eo;
    char *served = NULL;
    if (rc == DSQ_OK && o->endpoint && endpoint_opts(cli, o, &eo) < 0) rc = dsq_fail(&d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "no API key");
    if (rc == DSQ_OK && o->endpoint) rc = dsq_ep_resolve_model(&eo, &served, &d);
    else if (rc == DSQ_OK) rc = open_model(cli, o, &r, 1, plan.n_ctx, &d);
    /* with the served model's tokenizer, text-keyed top_logprobs map back to ids */
    dsq_ep_vocab *vocab = NULL;
    if (rc == DSQ_OK && o->endpoint && o->tokenizer && !r.tok) rc = load_tokenizer(cli, o, &r.tok, &d);
    if (rc == DSQ_OK && o->endpoint && r.tok) rc = dsq_ep_vocab_build(&vocab, r.tok, &d);
    dsq_kld_result k;
    dsq_ep_kld_info ki = { 0 };
    double t0 = dsq_now();
    if (rc == DSQ_OK) {
        dsq_progress_begin(&r.prog, cli, "kld", "windows", plan.n_chunks);
        dsq_eval_hooks h = { .cancel = &dsq_cli_interrupted, .progress = window_progress,
                             .progress_user = &r, .pool = r.m ? dsq_model_pool(r.m) : NULL };
        /* served: the top-k or target-token bound of endpoint.h (a lower bound of KL) */
        rc = o->endpoint ? dsq_ep_kld_run(&eo, served, &base, 0, vocab, &h, &k, &ki, &d)
                         : dsq_kld_run(&base, r.vocab, model_window, &r, &h, &k, &d);
        if (!o->endpoint) name_model(rc, o->model, &d);
        dsq_progress_end(&r.prog);
    }
    free(served);
    dsq_ep_vocab_free(vocab);
    double secs = dsq_now() - t0;
    unsigned base_topk = base.info.top_k;
    dsq_logp_reader_close(&base);
    runner_close(&r);
    if (rc < 0) return dsq_cli_fail(cli, rc, &d);
    if (cli->json) {
        json_object *j = json_object_new_object();
        json_object_object_add(j, "command", json_object_new_string("kld"));
        /* the base fixes the windows: per-window BOS is in its header; "first"
         * and "no" look alike there, so they are named only when --data
         * checked them */
        json_object_object_add(j, "bos", o->bos_arg ? json_object_new_string(ppl_bos_names[o->ppl_bos])
                                         : plan.bos >= 0 ? json_object_new_string("window") : NULL);
        json_object_object_add(j, "base_window_bos_id", plan.bos >= 0 ? json_object_new_int(plan.bos) : NULL);
        if (o->endpoint) {
            json_object_object_add(j, "kld_lower_bound", json_object_new_boolean(1));
            json_object_object_add(j, "kld_served_form", json_object_new_string(
                ki.topk_positions == k.count ? "topk" : ki.topk_positions ? "mixed" : "target_vs_rest"));
            json_object_object_add(j, "prompt_logprobs_k", json_object_new_int(ki.requested_k));
            json_object_object_add(j, "topk_positions", json_object_new_int64((int64_t)ki.topk_positions));
            json_object_object_add(j, "topk_exact_positions", json_object_new_int64((int64_t)ki.exact_positions));
            json_object_object_add(j, "topk_text_mapped_positions", json_object_new_int64((int64_t)ki.text_positions));
            json_object_object_add(j, "same_top1_positions", json_object_new_int64((int64_t)ki.same_top_count));
        }
        json_object_object_add(j, "tokens_scored", json_object_new_int64((int64_t)k.count));
        json_object_object_add(j, "kld_mean", jnum(k.kld_mean));
        json_object_object_add(j, "kld_stderr", jnum(k.kld_stderr));
        json_object_object_add(j, "kld_mean_lo", jnum(k.kld_mean_lo));
        json_object_object_add(j, "kld_mean_hi", jnum(k.kld_mean_hi));
        json_object_object_add(j, "kld_median", jnum(k.kld_median));
        json_object_object_add(j, "kld_p90", jnum(k.kld_p90));
        json_object_object_add(j, "kld_p95", jnum(k.kld_p95));
        json_object_object_add(j, "kld_p99", jnum(k.kld_p99));
        json_object_object_add(j, "kld_p999", jnum(k.kld_p999));
        json_object_object_add(j, "kld_max", jnum(k.kld_max));
        json_object_object_add(j, "kld_min", jnum(k.kld_min));
        json_object_object_add(j, "same_top1", jnum(k.same_top));
        json_object_object_add(j, "same_top1_stderr", jnum(k.same_top_stderr));
        json_object_object_add(j, "ppl", jnum(k.ppl));
        json_object_object_add(j, "ppl_base", jnum(k.ppl_base));
        json_object_object_add(j, "ppl_ratio", jnum(k.ppl_ratio));
        json_object_object_add(j, "ppl_delta", jnum(k.ppl_delta));
        json_object_object_add(j, "ln_ppl_ratio", jnum(k.ln_ratio_mean));
        json_object_object_add(j, "ln_ppl_ratio_stderr", jnum(k.ln_ratio_stderr));
        json_object_object_add(j, "dp_rms", jnum(k.dp_rms));
        json_object_object_add(j, "seconds", jnum(secs));
        print_json(j);
    } else if (cli->level >= 2) {
        printf("tokens scored  : %llu (%zu windows of %zu)\n", (unsigned long long)k.count, plan.n_chunks, plan.n_ctx);
        printf("PPL(Q)         : %.4f   PPL(base): %.4f\n", k.ppl, k.ppl_base);
        printf("PPL ratio      : %.6f (delta %+.4f, ln ratio %.6f +/- %.6f)\n", k.ppl_ratio, k.ppl_delta,
               k.ln_ratio_mean, k.ln_ratio_stderr);
        printf("Mean    KLD    : %.6f +/- %.6f\n", k.kld_mean, k.kld_stderr);
        printf("Mean    KLD 95%%: %.6f .. %.6f (bootstrap over %zu windows)\n", k.kld_mean_lo, k.kld_mean_hi,
               plan.n_chunks);
        printf("Median  KLD    : %.6f\n", k.kld_median);
        printf("99.0%%   KLD    : %.6f\n", k.kld_p99);
        printf("99.9%%   KLD    : %.6f\n", k.kld_p999);
        printf("Maximum KLD    : %.6f\n", k.kld_max);
        if (o->endpoint && ki.topk_positions)
            printf("(served model: KLD over the base's top-%u from the served top log-probs (prompt_logprobs k=%d; %llu "
                   "mapped from text) at %llu of %llu positions, %llu with every base top-k token served; a LOWER BOUND "
                   "of the true KLD)\n", base_topk, ki.requested_k, (unsigned long long)ki.text_positions,
                   (unsigned long long)ki.topk_positions, (unsigned long long)k.count, (unsigned long long)ki.exact_positions);
        if (o->endpoint && ki.topk_positions < k.count)
            printf("(served model: KLD over {target token, rest} only at %llu positions (no id-keyed prompt_logprobs; no --tokenizer or spellings differ), "
                   "a LOWER BOUND of the true KLD)\n", (unsigned long long)(k.count - ki.topk_positions));
        if (!o->endpoint || ki.same_top_count)
            printf("Same top-1     : %.3f +/- %.3f %%%s\n", 100 * k.same_top, 100 * k.same_top_stderr,
                   o->endpoint && ki.same_top_count < k.count ? " (over the positions the server ranked)" : "");
        else printf("Same top-1     : unknown (the server named no token ids)\n");
        printf("RMS dp         : %.3f %%\n", 100 * k.dp_rms);
    }
    return DSQ_EXIT_OK;
}

/* ====================================================================== */
/* gsm8k                                                                  */
/* ====================================================================== */

typedef struct item_out {
    char *completion;
    size_t len;
    dsq_gsm8k_score s;
    dsq_gen_result g;      /* generation stats (text not kept here) */
    int have;
} item_out;

typedef struct gen_ctx {
    runner *r;
    item_out *items;
    size_t done;
} gen_ctx;

static int gen_prefill(void *u, int slot, const int32_t *t, size_t n, float *logits, dsq_diag *d)
{
    runner *r = u;
    if (n > INT32_MAX) return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "prompt too long");
    dsq_state_reset(r->st, slot);
    return dsq_forward(r->m, r->st, slot, t, (int)n, logits, DSQ_FWD_LAST_LOGITS, d);
}

static int gen_decode(void *u, const int *slots, const int32_t *t, int n, float *logits, dsq_diag *d)
{
    runner *r = u;
    return dsq_forward_batch_decode(r->m, r->st, t, slots, n, logits, d);
}

/* Decode as lm-eval's tok_decode does (special tokens skipped); ids the
 * tokenizer does not know (padding rows of a larger lm_head) are dropped. */
static int gen_detok(void *u, const int32_t *ids, size_t n, char **text, size_t *len)
{
    runner *r = u;
    size_t tv = dsq_tokenizer_vocab_size(r->tok), k = 0;
    int32_t *keep = malloc((n ? n : 1) * sizeof *keep);
    if (!keep) return DSQ_ERR_NOMEM;
    for (size_t i = 0; i < n; i++)
        if (ids[i] >= 0 && (size_t)ids[i] < tv && dsq_tokenizer_piece(r->tok, ids[i])) keep[k++] = ids[i];
    int rc = dsq_tokenizer_decode(r->tok, keep, k, 1, text, len);
    free(keep);
    return rc;
}

static int gen_done(void *u, size_t idx, dsq_gen_result *res)
{
    gen_ctx *g = u;
    item_out *it = &g->items[idx];
    it->completion = res->text;
    it->len = res->len;
    it->g = *res;
    it->g.text = NULL;
    it->have = 1;
    res->text = NULL;
    dsq_progress_update(&g->r->prog, ++g->done);
    return 0;
}

static const char *stop_name(int s)
{
    switch (s) {
    case DSQ_GEN_STOP_STRING: return "stop";
    case DSQ_GEN_STOP_EOS:    return "eos";
    case DSQ_GEN_STOP_LENGTH: return "length";
    default:                  return "";
    }
}

static int write_items(const opts *o, const dsq_gsm8k_set *test, const item_out *items, size_t n,
                       int generated, dsq_diag *d)
{
    dsq_outfile f;
    DSQ_TRY(dsq_outfile_open(&f, o->out, o->force ? DSQ_OUT_OVERWRITE : 0, d));
    int rc = DSQ_OK;
    for (size_t i = 0; i < n && rc == DSQ_OK; i++) {
        if (!items[i].have) continue;
        const item_out *it = &items[i];
        json_object *j = json_object_new_object();
        json_object_object_add(j, "doc_id", json_object_new_int64((int64_t)i));
        json_object_object_add(j, "question", json_object_new_string_len(test->items[i].question, (int)test->items[i].question_len));
        json_object_object_add(j, "completion", json_object_new_string_len(it->completion, (int)it->len));
        json_object_object_add(j, "strict", json_object_new_string(it->s.strict));
        json_object_object_add(j, "flexible", json_object_new_string(it->s.flexible));
        json_object_object_add(j, "gold", json_object_new_string(it->s.gold));
        json_object_object_add(j, "correct_strict", json_object_new_boolean(it->s.correct_strict));
        json_object_object_add(j, "correct_flexible", json_object_new_boolean(it->s.correct_flexible));
        if (generated) {
            json_object_object_add(j, "prompt_tokens", json_object_new_int64((int64_t)it->g.n_prompt));
            json_object_object_add(j, "gen_tokens", json_object_new_int64((int64_t)it->g.n_gen));
            json_object_object_add(j, "stop", json_object_new_string(stop_name(it->g.stop)));
            if (it->g.truncated) json_object_object_add(j, "prompt_truncated", json_object_new_boolean(1));
        }
        size_t sl;
        const char *s = json_object_to_json_string_length(j, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &sl);
        rc = dsq_outfile_write(&f, s, sl, d);
        if (rc == DSQ_OK) rc = dsq_outfile_write(&f, "\n", 1, d);
        json_object_put(j);
    }
    if (rc == DSQ_OK) return dsq_outfile_commit(&f, d);
    dsq_outfile_abort(&f);
    return rc;
}

/* train.jsonl next to the test file, when --train is not given. */
static char *default_train(const char *data)
{
    const char *sl = strrchr(data, '/');
    size_t dl = sl ? (size_t)(sl - data) + 1 : 0;
    char *p = malloc(dl + sizeof "train.jsonl");
    if (!p) return NULL;
    memcpy(p, data, dl);
    memcpy(p + dl, "train.jsonl", sizeof "train.jsonl");
    return p;
}

static int generate_all(dsq_cli *cli, const opts *o, const dsq_gsm8k_set *test, size_t n,
                        item_out *items, runner *r, size_t *gen_tokens, dsq_diag *d)
{
    dsq_gsm8k_set train = { 0 };
    char *train_path = o->train ? strdup(o->train) : default_train(o->data);
    int32_t **prompts = calloc(n, sizeof *prompts);
    size_t *np = calloc(n, sizeof *np);
    int rc = (!train_path || !prompts || !np) ? dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory") : DSQ_OK;
    if (rc == DSQ_OK && o->shots > 0) {
        rc = dsq_gsm8k_load(&train, train_path, d);
        if (rc == DSQ_ERR_NOT_FOUND && !o->train)
            dsq_cli_warn(cli, "%d-shot prompts need a training split: give --train FILE (default: %s, "
                         "absent) or --shots 0", o->shots, train_path);
    }
    if (rc == DSQ_OK) rc = load_tokenizer(cli, o, &r->tok, d);
    dsq_gsm8k_fewshot fs;
    if (rc == DSQ_OK && dsq_gsm8k_fewshot_init(&fs, train.n, o->shots, o->seed) < 0)
        rc = dsq_fail(d, DSQ_ERR_DATA, train_path, NULL, -1, "%d shots but only %zu training items", o->shots, train.n);
    /* prompts in doc order: each doc takes the next draw, as lm-eval */
    unsigned flags = DSQ_TOK_PARSE_SPECIAL | (o->bos == 1 ? DSQ_TOK_FORCE_BOS : o->bos == -1 ? DSQ_TOK_ADD_SPECIAL : 0);
    size_t shots[64];
    for (size_t i = 0; i < n && rc == DSQ_OK; i++) {
        char *p;
        size_t pl;
        rc = dsq_gsm8k_fewshot_next(&fs, shots);
        if (rc == DSQ_OK) rc = dsq_gsm8k_prompt(&train, shots, o->shots, &test->items[i], &p, &pl);
        if (rc < 0) { rc = dsq_fail(d, rc, NULL, NULL, -1, "cannot build prompt %zu", i); break; }
        rc = dsq_tokenizer_encode_ex(r->tok, p, pl, flags, &prompts[i], &np[i], d);
        free(p);
    }
    dsq_gsm8k_set_release(&train);
    if (rc == DSQ_OK) rc = open_model(cli, o, r, o->batch, o->ctx, d);
    if (rc == DSQ_OK) {
        size_t max_ctx = (size_t)dsq_state_max_ctx(r->st);
        for (size_t i = 0; i < n; i++)
            for (size_t k = 0; k < np[i]; k++)
                if (prompts[i][k] < 0 || (size_t)prompts[i][k] >= r->vocab) {
                    rc = dsq_fail(d, DSQ_ERR_DATA, NULL, NULL, -1, "prompt %zu has token id %d beyond the model's %zu logits",
                                  i, (int)prompts[i][k], r->vocab);
                    i = n;
                    break;
                }
        if (rc == DSQ_OK && max_ctx <= o->max_new)
            rc = dsq_fail(d, DSQ_ERR_INVALID_ARG, o->model, NULL, -1, "context %zu leaves no room for %zu new tokens (raise --ctx)",
                          max_ctx, o->max_new);
        /* stop strings: the task's plus the EOS text (lm-eval appends it) */
        const char *stops[4] = { dsq_gsm8k_stops[0], dsq_gsm8k_stops[1], dsq_gsm8k_stops[2], NULL };
        size_t n_stops = 3;
        char *eos_text = NULL;
        int32_t eos[1 + DSQ_CFG_MAX_EOS];
        size_t n_eos = 0;
        int32_t te = dsq_tokenizer_eos(r->tok);
        size_t el;
        if (te >= 0) {
            eos[n_eos++] = te;
            if (dsq_tokenizer_decode(r->tok, &te, 1, 0, &eos_text, &el) == 0 && el) stops[n_stops++] = eos_text;
        }
        const dsq_model_config *cfg = dsq_model_get_config(r->m);
        for (int i = 0; i < cfg->n_eos; i++) {
            int dup = 0;
            for (size_t k = 0; k < n_eos; k++) dup |= eos[k] == (int32_t)cfg->eos_token_ids[i];
            if (!dup) eos[n_eos++] = (int32_t)cfg->eos_token_ids[i];
        }
        dsq_gen_ops ops = { .user = r, .vocab = r->vocab, .n_slots = o->batch, .prefill = gen_prefill,
                            .decode = gen_decode, .detok = gen_detok };
        dsq_gen_opts go = { .max_new_tokens = o->max_new, .max_ctx = max_ctx, .stops = stops,
                            .n_stops = n_stops, .eos = eos, .n_eos = n_eos, .cancel = &dsq_cli_interrupted };
        gen_ctx g = { .r = r, .items = items };
        if (rc == DSQ_OK) {
            dsq_cli_info(cli, 3, "%zu prompts, %d-shot, batch %d, context %zu", n, o->shots, o->batch, max_ctx);
            dsq_progress_begin(&r->prog, cli, "gsm8k", "items", n);
            rc = dsq_gsm8k_generate(&ops, &go, (const int32_t *const *)prompts, np, n, gen_done, &g, d);
            dsq_progress_end(&r->prog);
        }
        free(eos_text);
        for (size_t i = 0; i < n; i++) *gen_tokens += items[i].g.n_gen;
    }
    for (size_t i = 0; i < n; i++) free(prompts ? prompts[i] : NULL);
    free(prompts);
    free(np);
    free(train_path);
    return rc;
}

/* ---- gsm8k --endpoint ---------------------------------------------------- */

typedef struct ep_ctx {
    const dsq_gsm8k_set *test;
    item_out *items;
    dsq_ep_journal *journal;
    dsq_progress *prog;
    size_t done;
} ep_ctx;

static int stop_code(const char *finish)
{
    return !strcmp(finish, "length") ? DSQ_GEN_STOP_LENGTH : !strcmp(finish, "stop") ? DSQ_GEN_STOP_STRING : 0;
}

/* One completion arrived (calls are serialized): cut at the task's stop
 * strings as lm-eval does with an API model's output, journal it, keep it. */
static int ep_done(void *u, size_t idx, dsq_ep_completion *c)
{
    ep_ctx *e = u;
    item_out *it = &e->items[idx];
    c->len = dsq_gsm8k_stop_pos(c->text, c->len, dsq_gsm8k_stops, 3);
    c->text[c->len] = 0;
    dsq_ep_item ji = { .completion = c->text, .len = c->len, .prompt_tokens = c->prompt_tokens,
                       .gen_tokens = c->completion_tokens };
    snprintf(ji.finish, sizeof ji.finish, "%s", c->finish);
    dsq_diag d;
    dsq_diag_clear(&d);
    if (e->journal) DSQ_TRY(dsq_ep_journal_append(e->journal, idx, &e->test->items[idx], &ji, &d));
    it->completion = c->text;
    it->len = c->len;
    c->text = NULL;
    it->g.n_prompt = c->prompt_tokens > 0 ? (size_t)c->prompt_tokens : 0;
    it->g.n_gen = c->completion_tokens > 0 ? (size_t)c->completion_tokens : 0;
    it->g.stop = stop_code(c->finish);
    it->have = 1;
    dsq_progress_update(e->prog, ++e->done);
    return 0;
}

/* gsm8k against a server: the local run's prompts (same few-shot draws),
 * sent as text; --out is the journal a rerun continues from. */
static int endpoint_all(dsq_cli *cli, const opts *o, const dsq_gsm8k_set *test, size_t n, item_out *items,
                        dsq_progress *prog, size_t *gen_tokens, dsq_diag *d)
{
    dsq_endpoint_opts eo;
    if (endpoint_opts(cli, o, &eo) < 0) return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "no API key");
    dsq_gsm8k_set train = { 0 };
    char *train_path = o->train ? strdup(o->train) : default_train(o->data);
    char **prompts = calloc(n, sizeof *prompts);
    size_t *pl = calloc(n, sizeof *pl), *todo = calloc(n, sizeof *todo);
    dsq_ep_item *old = calloc(n, sizeof *old);
    int rc = (!train_path || !prompts || !pl || !todo || !old) ? dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory") : DSQ_OK;
    if (rc == DSQ_OK && o->shots > 0) rc = dsq_gsm8k_load(&train, train_path, d);
    dsq_gsm8k_fewshot fs;
    if (rc == DSQ_OK && dsq_gsm8k_fewshot_init(&fs, train.n, o->shots, o->seed) < 0)
        rc = dsq_fail(d, DSQ_ERR_DATA, train_path, NULL, -1, "%d shots but only %zu training items", o->shots, train.n);
    size_t shots[64];
    for (size_t i = 0; i < n && rc == DSQ_OK; i++) { /* every doc takes its draw, done or not */
        rc = dsq_gsm8k_fewshot_next(&fs, shots);
        if (rc == DSQ_OK) rc = dsq_gsm8k_prompt(&train, shots, o->shots, &test->items[i], &prompts[i], &pl[i]);
        if (rc < 0) rc = dsq_fail(d, rc, NULL, NULL, -1, "cannot build prompt %zu", i);
    }
    dsq_gsm8k_set_release(&train);
    dsq_ep_journal j = { .fd = -1 };
    size_t have = 0, n_todo = 0;
    if (rc == DSQ_OK && o->out) rc = dsq_ep_journal_open(&j, o->out, o->force, test, n, old, &have, d);
    for (size_t i = 0; i < n && rc == DSQ_OK; i++) {
        if (old[i].have) {
            items[i].completion = old[i].completion;
            items[i].len = old[i].len;
            old[i].completion = NULL;
            items[i].g.n_prompt = old[i].prompt_tokens > 0 ? (size_t)old[i].prompt_tokens : 0;
            items[i].g.n_gen = old[i].gen_tokens > 0 ? (size_t)old[i].gen_tokens : 0;
            items[i].g.stop = stop_code(old[i].finish);
            items[i].have = 1;
        } else {
            todo[n_todo++] = i;
        }
    }
    if (rc == DSQ_OK && have) dsq_cli_info(cli, 2, "%s: %zu of %zu items already done, continuing", o->out, have, n);
    char *model = NULL;
    if (rc == DSQ_OK && n_todo) rc = dsq_ep_resolve_model(&eo, &model, d);
    if (rc == DSQ_OK && n_todo) {
        dsq_cli_info(cli, 3, "%s: model '%s', %zu prompts, %d-shot, %d in flight", o->endpoint, model, n_todo,
                     o->shots, o->concurrency);
        ep_ctx e = { .test = test, .items = items, .journal = o->out ? &j : NULL, .prog = prog, .done = 0 };
        dsq_progress_begin(prog, cli, "gsm8k", "items", n_todo);
        rc = dsq_ep_complete_all(&eo, model, (const char *const *)prompts, pl, todo, n_todo, o->max_new,
                                 dsq_gsm8k_stops, 3, ep_done, &e, d);
        dsq_progress_end(prog);
    }
    if (o->out) dsq_ep_journal_close(&j);
    for (size_t i = 0; i < n; i++) *gen_tokens += items[i].g.n_gen;
    for (size_t i = 0; i < n; i++) { free(prompts ? prompts[i] : NULL); free(old ? old[i].completion : NULL); }
    free(model);
    free(prompts);
    free(pl);
    free(todo);
    free(old);
    free(train_path);
    return rc;
}

static int cmd_gsm8k(dsq_cli *cli, const opts *o)
{
    dsq_diag d;
    dsq_diag_clear(&d);
    dsq_gsm8k_set test;
    int rc = dsq_gsm8k_load(&test, o->data, &d);
    if (rc < 0) return dsq_cli_fail(cli, rc, &d);
    size_t n = o->limit && o->limit < test.n ? o->limit : test.n;
    item_out *items = calloc(n, sizeof *items);
    runner r = { 0 };
    dsq_gsm8k_completions comp = { 0 };
    size_t gen_tokens = 0;
    double t0 = dsq_now();
    if (!items) rc = dsq_fail(&d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    else if (o->score) {
        rc = dsq_gsm8k_completions_load(&comp, o->score, test.n, &d);
        for (size_t i = 0; i < n && rc == DSQ_OK; i++) {
            if (!comp.text[i]) continue;
            items[i].completion = comp.text[i];
            /* kept as scored: cut at the task's stop strings */
            items[i].len = dsq_gsm8k_stop_pos(comp.text[i], comp.len[i], dsq_gsm8k_stops, 3);
            comp.text[i][items[i].len] = 0;
            comp.text[i] = NULL;
            items[i].have = 1;
        }
    } else if (o->endpoint) {
        rc = endpoint_all(cli, o, &test, n, items, &r.prog, &gen_tokens, &d);
    } else {
        rc = generate_all(cli, o, &test, n, items, &r, &gen_tokens, &d);
    }
    double secs = dsq_now() - t0;
    runner_close(&r);
    dsq_gsm8k_completions_release(&comp);

    /* score: the stop strings are applied again (a no-op on our own output) */
    size_t scored = 0, ks = 0, kf = 0;
    dsq_gsm8k_scorer *sc = NULL;
    if (rc == DSQ_OK) rc = dsq_gsm8k_scorer_create(&sc, &d);
    for (size_t i = 0; i < n && rc == DSQ_OK; i++) {
        if (!items[i].have) continue;
        rc = dsq_gsm8k_score_item(sc, items[i].completion, items[i].len, test.items[i].answer,
                                  test.items[i].answer_len, dsq_gsm8k_stops, 3, &items[i].s);
        if (rc < 0) { rc = dsq_fail(&d, rc, NULL, NULL, -1, "cannot score item %zu", i); break; }
        scored++;
        ks += (size_t)items[i].s.correct_strict;
        kf += (size_t)items[i].s.correct_flexible;
    }
    dsq_gsm8k_scorer_free(sc);
    if (rc == DSQ_OK && scored == 0) rc = dsq_fail(&d, DSQ_ERR_DATA, o->score, NULL, -1, "no completion matches the first %zu items", n);
    if (rc == DSQ_OK && o->out) {
        opts wo = *o;
        wo.force |= o->endpoint != NULL; /* the scored file replaces the journal it grew from */
        rc = write_items(&wo, &test, items, n, !o->score, &d);
    }
    /* Items without a completion count as wrong: lm-eval scores every item,
     * so a partial run must not look better than the full one would. */
    if (rc == DSQ_OK && scored < n)
        dsq_cli_warn(cli, "%zu of %zu items have no completion; they count as wrong", n - scored, n);
    if (rc == DSQ_OK) {
        double as = (double)ks / (double)n, af = (double)kf / (double)n;
        double ses = dsq_gsm8k_stderr(ks, n), sef = dsq_gsm8k_stderr(kf, n);
        if (cli->json) {
            json_object *j = json_object_new_object(), *js = json_object_new_object(), *jf = json_object_new_object();
            json_object_object_add(j, "command", json_object_new_string("gsm8k"));
            json_object_object_add(j, "task_version", json_object_new_int(3));
            json_object_object_add(j, "n", json_object_new_int64((int64_t)n));
            json_object_object_add(j, "missing", json_object_new_int64((int64_t)(n - scored)));
            if (!o->score) {
                json_object_object_add(j, "shots", json_object_new_int(o->shots));
                json_object_object_add(j, "seed", json_object_new_int64((int64_t)o->seed));
                json_object_object_add(j, "gen_tokens", json_object_new_int64((int64_t)gen_tokens));
                json_object_object_add(j, "seconds", jnum(secs));
                json_object_object_add(j, "gen_tokens_per_s", jnum((double)gen_tokens / secs));
            }
            json_object_object_add(js, "exact_match", jnum(as));
            json_object_object_add(js, "stderr", jnum(ses));
            json_object_object_add(js, "correct", json_object_new_int64((int64_t)ks));
            json_object_object_add(jf, "exact_match", jnum(af));
            json_object_object_add(jf, "stderr", jnum(sef));
            json_object_object_add(jf, "correct", json_object_new_int64((int64_t)kf));
            json_object_object_add(j, "strict-match", js);
            json_object_object_add(j, "flexible-extract", jf);
            print_json(j);
        } else if (cli->level >= 2) {
            if (o->score) printf("gsm8k (lm-eval v3.0 filters), %zu items, %zu completions from %s\n", n, scored, o->score);
            else printf("gsm8k (lm-eval v3.0), %d-shot, seed %llu, %zu items, %zu tokens in %.1f s (%.1f tokens/s)\n",
                        o->shots, (unsigned long long)o->seed, scored, gen_tokens, secs, (double)gen_tokens / secs);
            printf("  flexible-extract  exact_match %.4f +/- %.4f  (%zu/%zu)\n", af, sef, kf, n);
            printf("  strict-match      exact_match %.4f +/- %.4f  (%zu/%zu)\n", as, ses, ks, n);
        }
    }
    for (size_t i = 0; i < n && items; i++) {
        free(items[i].completion);
        dsq_gsm8k_score_release(&items[i].s);
    }
    free(items);
    dsq_gsm8k_set_release(&test);
    return rc < 0 ? dsq_cli_fail(cli, rc, &d) : DSQ_EXIT_OK;
}

int main(int argc, char **argv)
{
    dsq_cli cli;
    dsq_cli_init(&cli, "ds-eval");
    json_c_set_serialization_double_format("%.10g", JSON_C_OPTION_GLOBAL);
    opts o;
    int done, rc = parse(&cli, &o, argc, argv, &done);
    if (rc >= 0 || done) return rc;
    if (!strcmp(o.cmd, "ppl")) return cmd_ppl(&cli, &o);
    if (!strcmp(o.cmd, "kld")) return cmd_kld(&cli, &o);
    return cmd_gsm8k(&cli, &o);
}
