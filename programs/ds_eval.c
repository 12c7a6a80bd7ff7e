/* ds_eval.c - ds-eval: perplexity, KL divergence and GSM8K for a model.
 *
 *   ds-eval ppl   --model M --data FILE [--ctx 512] [--limit-tokens N]
 *                 [--save-logits F [--logits-format u16|topk] [--logits-topk K]]
 *   ds-eval kld   --base F --model M [--data FILE]
 *   ds-eval gsm8k --model M --data test.jsonl [--train train.jsonl] [--shots 5]
 *                 [--limit N] [--seed 1234] [--batch B] [--max-new-tokens 256]
 *                 [--out items.jsonl]
 *   ds-eval gsm8k --score completions.jsonl --data test.jsonl [--out items.jsonl]
 *   ds-eval gsm8k --chat [--prompt aisbench-0shot-cot|lm-eval-cot-llama] --data F
 *                 (--endpoint URL | --model M) [--chat-template-kwargs JSON]
 *                 [--samples N] [--temperature T] [--max-tokens N] [--out F]
 *   ds-eval gsm8k|ppl --endpoint URL [--served-model NAME] [--api-key-env VAR]
 *                 [--concurrency N] ... (the model behind an OpenAI-compatible server)
 *
 * The work lives in libdsq (eval_model.h, eval_metrics.h, gsm8k_run.h,
 * endpoint.h); this file parses options, hands them over and prints.
 * Exit codes: 0 ok, 1 error, 2 usage. */
#include "cli.h"
#include "cli_opt.h"
#include "dsq_file.h"
#include "endpoint.h"
#include "eval_metrics.h"
#include "eval_model.h"
#include "gsm8k.h"
#include "gsm8k_run.h"
#include "chat_eval.h"
#include "chat_reasoning.h"
#include "chat_run.h"

#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>


/* the commands, as option-table bits ("gsm8k --score" and "gsm8k --chat" are
 * commands of their own) */
enum { CMD_PPL = 1, CMD_KLD = 2, CMD_GSM = 4, CMD_SCORE = 8, CMD_CHAT = 16 };

enum {
    O_MODEL = DSQ_OPT_FIRST, O_TOKENIZER, O_CTX, O_DATA, O_LIMIT_TOKENS, O_SAVE_LOGITS, O_LOGITS_FORMAT,
    O_LOGITS_TOPK, O_BASE, O_TRAIN, O_SHOTS, O_SEED, O_LIMIT, O_BATCH, O_MAX_NEW, O_BOS,
    O_SCORE, O_OUT, O_ENDPOINT, O_SERVED_MODEL, O_API_KEY_ENV, O_CONCURRENCY,
    O_TIMEOUT, O_RETRIES, O_NO_VERIFY, O_BF16_TERMS, O_FORCE,
    O_CHAT, O_PROMPT, O_CHAT_TEMPLATE, O_REASONING, O_CHAT_KWARGS, O_GEN_KWARGS, O_MAX_TOKENS, O_TEMPERATURE,
    O_TOP_P, O_SAMPLES, O_THINK_END, O_QFIELD, O_AFIELD, O_DSA, O_KVCACHE
};

/* the table is laid out by hand, one row per option */
/* clang-format off */
static const dsq_opt opt_table[] = {
    { .type = DSQ_OPT_TEXT, .help =
"usage: ds-eval <command> [options]\n"
"\n"
"Commands:\n"
"  ppl     perplexity over non-overlapping windows (llama-perplexity rules:\n"
"          each window starts with BOS when the tokenizer adds one, only its\n"
"          second half is scored)\n"
"  kld     KL divergence of a model against base log-probs saved by\n"
"          'ppl --save-logits' (mean/median/p99/max KLD, same top-1, PPL ratio)\n"
"  gsm8k   lm-eval gsm8k v3.0: 5-shot, greedy, strict-match and flexible-extract\n"
"          exact_match; or --score completions made elsewhere; or --chat:\n"
"          through chat completions as AISBench / lm-eval's chat tasks do\n"
"\n"
"Model and tokenizer:\n" },
    { O_MODEL, DSQ_OPT_STR, "model", 'm', "PATH", .help = "safetensors file/index/directory or .dsq file" },
    { O_TOKENIZER, DSQ_OPT_STR, "tokenizer", 0, "PATH", .cmds = CMD_PPL | CMD_KLD | CMD_GSM | CMD_CHAT,
      .help = "tokenizer.json, its directory, or a llama2.c .bin\n(default: for a .dsq the tokenizer its metadata\n"
              "carries, else the model's directory)" },
    { O_CTX, DSQ_OPT_SIZE, "ctx", 0, "N", 3, INT32_MAX, "3..2^31-1", .cmds = CMD_PPL | CMD_GSM | CMD_CHAT,
      .help = "ppl/kld window (default 512); gsm8k: KV cache length\n(default: the model's, min(max positions, 4096))" },
    { O_NO_VERIFY, DSQ_OPT_FLAG, "no-verify", .help = "skip the SHA-256 check of .dsq payloads stored\n"
                                                      "uncompressed (a damaged file then gives wrong numbers)" },
    { O_BF16_TERMS, DSQ_OPT_INT, "bf16-terms", 0, "N", 1, 3,
      .help = "BF16 weights: bf16 terms per f32 activation in the\ndot products, 3 (default: f32 accuracy, the KLD\n"
              "baseline), 2, or 1 (activations rounded to bf16 as\nllama.cpp does: faster, not a baseline)" },
    { O_DSA, DSQ_OPT_CHOICE, "dsa", 0, "fp8|float", .choices = "fp8|float",
      .help = "DeepSeek-V3.2 sparse attention: the indexer and MLA\nlatent with DeepSeek's e4m3 round trips (fp8) or\n"
              "in float (a bf16 indexer's arithmetic)", .def = "fp8" },
    { O_KVCACHE, DSQ_OPT_CHOICE, "kv-cache", 0, "f32|bf16|int8|fp8", .choices = "f32|bf16|int8|fp8",
      .help = "MLA's KV cache per position: f32, bf16, or int8 / fp8\ncodes with a per-token scale (MindIE's C8)", .def = "f32" },
    { .type = DSQ_OPT_TEXT, .help = "\nppl:\n" },
    { O_DATA, DSQ_OPT_STR, "data", 0, "FILE", .help = "text to score (read as bytes)" },
    { O_LIMIT_TOKENS, DSQ_OPT_SIZE, "limit-tokens", 0, "N", 1, .cmds = CMD_PPL, .help = "use only the first N tokens" },
    { O_BOS, DSQ_OPT_STR, "bos", 0, .cmds = CMD_PPL | CMD_KLD | CMD_GSM, .left = "    --bos window|first|no  ",
      .help = "BOS policy (default window): window = BOS over\neach window's first token (llama-perplexity; only\n"
              "when the tokenizer adds BOS); first = BOS once, at\nthe start of the text; no = no BOS at all" },
    { O_SAVE_LOGITS, DSQ_OPT_STR, "save-logits", 0, "F", .cmds = CMD_PPL,
      .help = "also write base log-probs for 'kld' (see below)" },
    { O_LOGITS_FORMAT, DSQ_OPT_CHOICE, "logits-format", 0, .choices = "u16|topk", .cmds = CMD_PPL,
      .left = "    --logits-format u16|topk  ",
      .help = "u16: every token, 16-bit (about 2 x vocab\nbytes per scored token); topk: top K only\n"
              "(small; its KLD is a lower bound)", .def = "u16" },
    { O_LOGITS_TOPK, DSQ_OPT_INT, "logits-topk", 0, "K", 1, DSQ_LOGP_MAX_TOPK, .cmds = CMD_PPL,
      .help = "exact top-K log-probs per position", .def = "16" },
    { .type = DSQ_OPT_TEXT, .help = "kld:\n" },
    { O_BASE, DSQ_OPT_STR, "base", 0, "F", .cmds = CMD_KLD, .help = "file from 'ppl --save-logits' (it holds the tokens)" },
    { O_DATA, DSQ_OPT_STR, "data", 0, "FILE", .help = "optional: re-tokenize and refuse if tokens differ" },
    { O_BOS, DSQ_OPT_STR, "bos", 0, .left = "    --bos window|first|no  ",
      .help = "with --data: the policy the base was made with\n(the base file fixes the windows; default window)" },
    { .type = DSQ_OPT_TEXT, .help =
"      prints mean KLD with a 95% noise band (bootstrap over whole windows,\n"
"      2000 resamples, fixed seed), median, p99, p99.9, max and same top-1\n"
"      (share of positions whose argmax agrees with the base)\n"
"gsm8k:\n" },
    { O_DATA, DSQ_OPT_STR, "data", 0, "FILE", .help = "test split, JSONL {\"question\",\"answer\"}" },
    { O_TRAIN, DSQ_OPT_STR, "train", 0, "FILE", .cmds = CMD_GSM, .help = "few-shot pool (default: train.jsonl beside --data)" },
    { O_SHOTS, DSQ_OPT_INT, "shots", 0, "N", 0, 64, .cmds = CMD_GSM, .help = "few-shot examples",
      .def = DSQ_OPT_DEF(DSQ_GSM8K_SHOTS) },
    { O_SEED, DSQ_OPT_SIZE, "seed", 0, "N", 0, .cmds = CMD_GSM | CMD_CHAT, .help = "few-shot seed (lm-eval's)",
      .def = DSQ_OPT_DEF(DSQ_GSM8K_SEED) },
    { O_LIMIT, DSQ_OPT_SIZE, "limit", 0, "N", 1, .cmds = CMD_GSM | CMD_SCORE | CMD_CHAT, .help = "first N test items only" },
    { O_BATCH, DSQ_OPT_INT, "batch", 0, "B", 1, 4096, .cmds = CMD_GSM | CMD_CHAT, .help = "sequences decoded together", .def = "8" },
    { O_MAX_NEW, DSQ_OPT_SIZE, "max-new-tokens", 0, "N", 1, 1 << 20, "1..1M", .cmds = CMD_GSM,
      .help = "generation cap (lm-eval's max_gen_toks)", .def = DSQ_OPT_DEF(DSQ_GSM8K_MAX_NEW) },
    { O_BOS, DSQ_OPT_STR, "bos", 0, "auto|yes|no", .help = "BOS before each prompt (default auto: as the\n"
                                                             "tokenizer's add_special_tokens does)" },
    { O_SCORE, DSQ_OPT_STR, "score", 0, "FILE", .cmds = CMD_SCORE,
      .help = "score completions from another engine instead of\ngenerating: JSONL with \"completion\", \"response\" or\n"
              "\"resps\" (lm-eval samples), matched by \"doc_id\" or\nline order; no --model needed" },
    { O_OUT, DSQ_OPT_STR, "out", 0, "FILE", .cmds = CMD_GSM | CMD_SCORE | CMD_CHAT,
      .help = "per-item JSONL: doc_id, question, completion, strict,\nflexible, gold, correct_strict, correct_flexible\n"
              "(with --endpoint also written as items arrive; a\nrerun with the same --out continues, -f restarts)" },
    { .type = DSQ_OPT_TEXT, .help =
"\n"
"gsm8k --chat (GSM8K or any numeric-answer JSONL through /v1/chat/completions,\n"
"or in process through the model's chat template, as ds-serve renders it):\n" },
    { O_CHAT, DSQ_OPT_FLAG, "chat", .cmds = CMD_CHAT, .help = "chat completions, scored as --prompt's harness" },
    { O_PROMPT, DSQ_OPT_STR, "prompt", 0, "NAME", .cmds = CMD_CHAT | CMD_GSM,
      .help = "aisbench-0shot-cot (default: AISBench's 0-shot CoT\nchat prompt and scoring, its \"1,234\" -> 234 quirk\n"
              "kept), aisbench-0shot-cot-nocomma (later AISBench:\ncommas dropped first), lm-eval-cot-llama\n"
              "(gsm8k_cot_llama, 8 shots as turns, strict and\nflexible); without --chat: lm-eval-gsm8k (above)" },
    { O_CHAT_KWARGS, DSQ_OPT_STR, "chat-template-kwargs", 0, "JSON", .cmds = CMD_CHAT,
      .left = "    --chat-template-kwargs JSON  ", .help = "e.g. '{\"thinking\": true}'" },
    { O_MAX_TOKENS, DSQ_OPT_SIZE, "max-tokens", 0, "N", 1, 1 << 20, "1..1M", .cmds = CMD_CHAT,
      .help = "reply cap (default: the harness's, 512 / 256)" },
    { O_TEMPERATURE, DSQ_OPT_FLOAT, "temperature", 0, "T", 0, 2, .cmds = CMD_CHAT,
      .help = "(default: the harness's, 0.01 / 0; in process: 0 only)" },
    { O_TOP_P, DSQ_OPT_FLOAT, "top-p", 0, "P", 1e-9, 1, "(0, 1]", .cmds = CMD_CHAT, .help = "nucleus sampling (default: not sent)" },
    { O_SAMPLES, DSQ_OPT_INT, "samples", 0, "N", 1, 1 << 16, .cmds = CMD_CHAT,
      .help = "replies per item: mean accuracy, stderr, pass@N;\nwith --seed S, sample s is sent seed S + s", .def = "1" },
    { O_GEN_KWARGS, DSQ_OPT_STR, "generation-kwargs", 0, "JSON", .cmds = CMD_CHAT,
      .left = "    --generation-kwargs JSON  ",
      .help = "further request fields, as AISBench's\ngeneration_kwargs (e.g. '{\"top_k\": 10,\n"
              "\"repetition_penalty\": 1.03}'); with --endpoint" },
    { O_THINK_END, DSQ_OPT_STR, "think-end", 0, "S", .cmds = CMD_CHAT,
      .help = "lm-eval's think_end_token: score the content after\nthe last S" },
    { O_QFIELD, DSQ_OPT_STR, "question-field", 0, "Q", .cmds = CMD_CHAT, .help = "field names of another data set" },
    { O_AFIELD, DSQ_OPT_STR, "answer-field", 0, "A", .cmds = CMD_CHAT, .help = "(the answer may be a number)" },
    { O_CHAT_TEMPLATE, DSQ_OPT_STR, "chat-template", 0, "T", .cmds = CMD_CHAT,
      .help = "in process: a known template id or file (default:\nthe model's own, recognised by sha256)" },
    { O_REASONING, DSQ_OPT_CHOICE, "reasoning-parser", 0, "P", .choices = "deepseek_r1|deepseek_v3", .cmds = CMD_CHAT,
      .help = "in process: split reasoning_content as ds-serve\n/ vLLM would (deepseek_r1 or deepseek_v3)" },
    { .type = DSQ_OPT_TEXT, .help =
"      --out FILE (chat): per-reply JSONL (raw content, reasoning_content,\n"
"      reasoning_chars, finish, answer, correct); written as replies arrive, a\n"
"      rerun continues it, -f restarts\n" },
    { .type = DSQ_OPT_TEXT, .help =
"\n"
"Served model (gsm8k, ppl, kld): instead of --model, an OpenAI-compatible server\n"
"(vLLM, vllm-ascend, MindIE, ds-serve) through POST /completions:\n" },
    { O_ENDPOINT, DSQ_OPT_STR, "endpoint", 0, "URL", .help = "base URL, e.g. http://127.0.0.1:8000/v1" },
    { O_SERVED_MODEL, DSQ_OPT_STR, "served-model", 0, "NAME", .help = "model name (default: the only one /models lists)" },
    { O_API_KEY_ENV, DSQ_OPT_STR, "api-key-env", 0, "VAR", .help = "send the API key held in environment variable VAR" },
    { O_CONCURRENCY, DSQ_OPT_INT, "concurrency", 0, "N", 1, 1024, .help = "requests in flight", .def = "8" },
    { O_TIMEOUT, DSQ_OPT_FLOAT, "timeout", 0, "S", 0.001, 86400, "seconds in (0, 86400]",
      .help = "seconds per request", .def = "600" },
    { O_RETRIES, DSQ_OPT_INT, "retries", 0, "N", 0, 1000,
      .help = "retries with backoff on connection errors, 429 and\n5xx (0.5 s doubling to 30 s)", .def = "8" },
    { .type = DSQ_OPT_TEXT, .help =
"                          ppl needs --tokenizer: windows go as token ids with\n"
"                          echo + logprobs (prompt log-probs); kld takes the\n"
"                          windows from --base and reports a LOWER BOUND (the\n"
"                          served target-token log-probs only)\n" },
    { .type = DSQ_OPT_TEXT, .help =
"\n"
"Options a command does not use are refused (exit 2), not ignored.\n"
"\n"
"General:\n" },
    DSQ_OPT_THREADS_ROW("worker threads (default: all cores)"),
    { O_FORCE, DSQ_OPT_FLAG, "force", 'f', .help = "overwrite output files" },
    { DSQ_OPT_JSON, DSQ_OPT_FLAG, "json", .help = "print one JSON object on stdout instead of text" },
    { DSQ_OPT_NO_PROGRESS, DSQ_OPT_FLAG, "no-progress", .help = "no progress line (it shows only on a terminal)" },
    { DSQ_OPT_QUIET, DSQ_OPT_FLAG, "quiet", 'q', .left = "-q, --quiet / -v, --verbose  ",
      .help = "less / more messages (repeatable)" },
    { DSQ_OPT_VERBOSE, DSQ_OPT_FLAG, "verbose", 'v' },
    { DSQ_OPT_HELP, DSQ_OPT_FLAG, "help", 'h' },
    { DSQ_OPT_VERSION, DSQ_OPT_FLAG, "version", 'V' },
    { .type = DSQ_OPT_TEXT, .help =
"  -h, --help / -V, --version\n"
"\n"
"Exit status: 0 ok, 1 error (bad input, i/o, interrupted), 2 usage.\n" },
};
/* clang-format on */
static const dsq_opt_spec spec = { opt_table, sizeof opt_table / sizeof opt_table[0], 23, 1, NULL };

typedef struct opts {
    const char *cmd, *model, *tokenizer, *data, *save_logits, *base, *train, *score, *out;
    size_t ctx;            /* 0: command default */
    uint64_t limit_tokens; /* 0: all */
    int logits_format, logits_topk;
    int shots, batch, bos; /* gsm8k bos: -1 auto, 0 no, 1 yes */
    int ppl_bos;           /* ppl/kld: enum dsq_text_bos; gsm8k keeps auto|yes|no (lm-eval's terms) */
    const char *bos_arg;   /* --bos as given: its values depend on the command */
    const dsq_args *args;  /* the parsed options (which were given) */
    uint64_t seed;
    size_t limit, max_new;
    int force;
    const char *endpoint, *served_model, *api_key_env;
    int concurrency, retries;
    double timeout;
    int no_verify;
    int bf16_terms;        /* 0: the engine's default */
    int dsa_mode;          /* enum dsq_dsa_mode: the --dsa choice index */
    int kv_cache;          /* enum dsq_kv_cache: the --kv-cache choice index */
    /* gsm8k --chat */
    int chat;
    const char *prompt, *chat_template, *chat_kwargs, *gen_kwargs, *think_end, *qfield, *afield;
    int reasoning_parser, samples;
    int64_t max_tokens;    /* 0: the suite's */
    double temperature, top_p;
    int has_seed, has_temperature;
} opts;

/* Options a command does not use are an error (exit 2), never silently
 * ignored: the table's command bits say which command uses what; the
 * general options (-T, -f, -q, -v, --json, --no-progress) go everywhere. */
static int check_used(dsq_cli *cli, const opts *o, int ppl, int kld, int gsm)
{
    const dsq_args *a = o->args;
    int rc = dsq_opt_check_cmd(cli, &spec, a,
                               ppl ? CMD_PPL : kld ? CMD_KLD : o->score ? CMD_SCORE : o->chat ? CMD_CHAT : CMD_GSM,
                               gsm && o->score ? "gsm8k --score" : gsm && o->chat ? "gsm8k --chat" : o->cmd);
    if (rc >= 0) return rc;
    if (gsm && !o->chat && o->prompt && strcmp(o->prompt, "lm-eval-gsm8k"))
        return dsq_cli_usage_error(cli, "--prompt %s is a chat suite: give --chat (without it: lm-eval-gsm8k)", o->prompt);
    if (o->chat && o->endpoint &&
        (dsq_opt_given(a, O_CHAT_TEMPLATE) || dsq_opt_given(a, O_REASONING) || dsq_opt_given(a, O_TOKENIZER) ||
         dsq_opt_given(a, O_CTX) || dsq_opt_given(a, O_BATCH)))
        return dsq_cli_usage_error(cli, "--chat-template, --reasoning-parser, --tokenizer, --ctx and --batch are the "
                                        "server's with --endpoint (ds-serve takes the first two)");
    if (ppl && !o->save_logits && (dsq_opt_given(a, O_LOGITS_FORMAT) || dsq_opt_given(a, O_LOGITS_TOPK)))
        return dsq_cli_usage_error(cli, "--logits-format and --logits-topk describe --save-logits: give it too");
    if (kld && o->bos_arg && !o->data)
        return dsq_cli_usage_error(cli, "kld: the base file fixes the windows; --bos checks them against --data: give --data too");
    return -1; /* go on */
}

static int parse(dsq_cli *cli, opts *o, dsq_args *a, int argc, char **argv, int *done)
{
    memset(o, 0, sizeof *o);
    *done = 0;
    int rc = dsq_opt_parse(cli, &spec, argc, argv, a);
    if (rc >= 0) return *done = 1, rc;
    o->args = a;
    o->model = dsq_opt_str(a, O_MODEL);
    o->tokenizer = dsq_opt_str(a, O_TOKENIZER);
    o->data = dsq_opt_str(a, O_DATA);
    o->save_logits = dsq_opt_str(a, O_SAVE_LOGITS);
    o->no_verify = dsq_opt_given(a, O_NO_VERIFY);
    o->bf16_terms = dsq_opt_int(a, O_BF16_TERMS);
    o->dsa_mode = dsq_opt_choice(a, O_DSA);
    o->kv_cache = dsq_opt_choice(a, O_KVCACHE);
    o->base = dsq_opt_str(a, O_BASE);
    o->train = dsq_opt_str(a, O_TRAIN);
    o->score = dsq_opt_str(a, O_SCORE);
    o->out = dsq_opt_str(a, O_OUT);
    o->ctx = (size_t)dsq_opt_u64(a, O_CTX);
    o->limit_tokens = dsq_opt_u64(a, O_LIMIT_TOKENS);
    o->logits_format = dsq_opt_choice(a, O_LOGITS_FORMAT) == 1 ? DSQ_LOGP_TOPK : DSQ_LOGP_U16;
    o->logits_topk = dsq_opt_int(a, O_LOGITS_TOPK);
    o->shots = dsq_opt_int(a, O_SHOTS);
    o->seed = dsq_opt_u64(a, O_SEED);
    o->limit = (size_t)dsq_opt_u64(a, O_LIMIT);
    o->batch = dsq_opt_int(a, O_BATCH);
    o->max_new = (size_t)dsq_opt_u64(a, O_MAX_NEW);
    o->bos = -1;
    o->bos_arg = dsq_opt_str(a, O_BOS); /* checked once the command is known */
    o->endpoint = dsq_opt_str(a, O_ENDPOINT);
    o->served_model = dsq_opt_str(a, O_SERVED_MODEL);
    o->api_key_env = dsq_opt_str(a, O_API_KEY_ENV);
    o->concurrency = dsq_opt_int(a, O_CONCURRENCY);
    o->retries = dsq_opt_int(a, O_RETRIES);
    o->timeout = dsq_opt_float(a, O_TIMEOUT);
    o->force = dsq_opt_given(a, O_FORCE);
    o->chat = dsq_opt_given(a, O_CHAT);
    o->prompt = dsq_opt_str(a, O_PROMPT);
    o->chat_template = dsq_opt_str(a, O_CHAT_TEMPLATE);
    o->chat_kwargs = dsq_opt_str(a, O_CHAT_KWARGS);
    o->gen_kwargs = dsq_opt_str(a, O_GEN_KWARGS);
    o->think_end = dsq_opt_str(a, O_THINK_END);
    o->qfield = dsq_opt_str(a, O_QFIELD);
    o->afield = dsq_opt_str(a, O_AFIELD);
    o->reasoning_parser = dsq_opt_given(a, O_REASONING) ? dsq_reasoning_parser_from_name(dsq_opt_str(a, O_REASONING)) : 0;
    o->samples = dsq_opt_int(a, O_SAMPLES);
    o->has_seed = dsq_opt_given(a, O_SEED);
    o->has_temperature = dsq_opt_given(a, O_TEMPERATURE);
    o->max_tokens = (int64_t)dsq_opt_u64(a, O_MAX_TOKENS);
    o->temperature = dsq_opt_float(a, O_TEMPERATURE);
    o->top_p = dsq_opt_float(a, O_TOP_P);
    for (int k = 0; k < 2; k++) {
        const char *js = k ? o->gen_kwargs : o->chat_kwargs;
        if (!js) continue;
        json_object *kw = json_tokener_parse(js);
        int isobj = kw && json_object_is_type(kw, json_type_object);
        if (kw) json_object_put(kw);
        if (!isobj) return dsq_cli_usage_error(cli, "%s: expected a JSON object, got '%s'",
                                               k ? "--generation-kwargs" : "--chat-template-kwargs", js);
    }
    if (a->npos < 1) return dsq_cli_usage_error(cli, "no command (ppl, kld or gsm8k)");
    o->cmd = a->pos[0];
    if (a->npos > 1) return dsq_cli_usage_error(cli, "unexpected argument '%s'", a->pos[1]);
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
               dsq_opt_given(a, O_CONCURRENCY) || dsq_opt_given(a, O_TIMEOUT) || dsq_opt_given(a, O_RETRIES)) {
        return dsq_cli_usage_error(cli, "--served-model, --api-key-env, --concurrency, --timeout and --retries go with --endpoint");
    }
    if (!o->model && !o->endpoint && !(gsm && o->score)) return dsq_cli_usage_error(cli, "%s needs --model", o->cmd);
    if (kld && !o->base) return dsq_cli_usage_error(cli, "kld needs --base");
    if (!kld && o->base) return dsq_cli_usage_error(cli, "--base is for kld");
    if (!ppl && (o->save_logits || o->limit_tokens)) return dsq_cli_usage_error(cli, "--save-logits and --limit-tokens are for ppl");
    if (kld && o->ctx) return dsq_cli_usage_error(cli, "kld takes its context from the base file");
    if (!gsm && (o->score || o->train || o->out || o->limit)) return dsq_cli_usage_error(cli, "--score, --train, --out and --limit are for gsm8k");
    if (gsm && o->score && o->model) return dsq_cli_usage_error(cli, "--score scores existing completions: drop --model");
    if (!gsm && o->chat) return dsq_cli_usage_error(cli, "--chat is for gsm8k");
    if (o->chat && o->score) return dsq_cli_usage_error(cli, "--chat generates replies: drop --score");
    if (o->chat && !o->prompt) o->prompt = "aisbench-0shot-cot";
    if (o->chat && !dsq_chat_suite_find(o->prompt))
        return dsq_cli_usage_error(cli, "--prompt: expected one of %s, got '%s'", dsq_chat_suite_names(), o->prompt);
    if (o->think_end && o->chat && dsq_chat_suite_find(o->prompt)->kind != DSQ_SUITE_LMEVAL_COT_LLAMA)
        return dsq_cli_usage_error(cli, "--think-end is lm-eval's think_end_token: AISBench suites read reasoning_content");
    if (o->bos_arg) {
        const char *b = o->bos_arg;
        if (gsm) {
            if (!strcmp(b, "auto")) o->bos = -1;
            else if (!strcmp(b, "yes")) o->bos = 1;
            else if (!strcmp(b, "no")) o->bos = 0;
            else return dsq_cli_usage_error(cli, "--bos: gsm8k expects auto, yes or no, got '%s'", b);
        } else {
            int k = 0;
            while (k < 3 && strcmp(b, dsq_text_bos_names[k])) k++;
            if (k == 3) return dsq_cli_usage_error(cli, "--bos: %s expects window, first or no, got '%s'", o->cmd, b);
            o->ppl_bos = k;
        }
    }
    return check_used(cli, o, ppl, kld, gsm);
}

/* ====================================================================== */
/* shared plumbing                                                        */
/* ====================================================================== */


/* the model, its tokenizer and KV cache (eval_model.h), and the progress line */
typedef struct runner {
    dsq_eval_model e;
    dsq_progress prog;
} runner;

/* --tokenizer when given, else the model's own (model_tokenizer.h). */
static int load_tokenizer(const dsq_cli *cli, const opts *o, dsq_tokenizer **tok, dsq_diag *d)
{
    dsq_tok_origin from;
    char where[4096];
    int rc = dsq_tokenizer_for_model(tok, o->model, o->tokenizer, &from, where, sizeof where, d);
    if (rc == DSQ_OK && from == DSQ_TOK_FROM_DSQ_META) dsq_cli_info(cli, 3, "tokenizer from the metadata of %s", where);
    else if (rc == DSQ_OK && from != DSQ_TOK_FROM_ARG) dsq_cli_info(cli, 3, "tokenizer from %s", where);
    else if (rc < 0 && (from == DSQ_TOK_FROM_DSQ_META || from == DSQ_TOK_FROM_DIR))
        dsq_cli_info(cli, 1, "pass --tokenizer to use another tokenizer");
    else if (rc == DSQ_ERR_NOT_FOUND && from == DSQ_TOK_FROM_NONE && d && dsq_path_exists(o->model)) {
        size_t l = strlen(d->msg);   /* the model is there, its tokenizer is not */
        snprintf(d->msg + l, sizeof d->msg - l, "; pass --tokenizer PATH");
    }
    return rc;
}

/* Non-finite logits come from the model, not the data: name its file so
 * the message points at what to check. */
static void name_model(int rc, const char *model, dsq_diag *d)
{
    if (rc != DSQ_ERR_NONFINITE || d->path[0]) return;
    snprintf(d->path, sizeof d->path, "%s", model);
}

static int open_model(const dsq_cli *cli, const opts *o, runner *r, int max_batch, size_t ctx, dsq_diag *d)
{
    dsq_eval_model_opts mo = { .model = o->model, .threads = cli->threads, .no_verify = o->no_verify,
                               .bf16_terms = o->bf16_terms, .dsa_mode = o->dsa_mode, .kv_cache = o->kv_cache, .max_batch = max_batch,
                               .ctx = ctx };
    double t0 = dsq_now();
    DSQ_TRY(dsq_eval_model_open(&r->e, &mo, d));
    if (cli->level >= 3) {
        char info[1024];
        dsq_model_info(r->e.m, info, sizeof info);
        dsq_cli_info(cli, 3, "loaded in %.1f s: %s", dsq_now() - t0, info);
    }
    return DSQ_OK;
}

static void runner_close(runner *r)
{
    dsq_eval_model_close(&r->e);
    memset(r, 0, sizeof *r);
}

static void window_progress(void *u, size_t done, size_t total)
{
    runner *r = u;
    (void)total;
    dsq_progress_update(&r->prog, done);
}

/* A ppl/kld text under its BOS policy (eval_model.h). */
static int tokenize_file(const dsq_cli *cli, const dsq_tokenizer *tok, const char *path, int policy,
                         uint64_t limit, int32_t **ids, size_t *n, dsq_diag *d)
{
    size_t len = 0;
    double t0 = dsq_now();
    int rc = dsq_eval_tokenize_text(tok, path, policy, limit, ids, n, &len, d);
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
    int rc = load_tokenizer(cli, o, &r.e.tok, &d);
    if (rc == DSQ_OK) rc = tokenize_file(cli, r.e.tok, o->data, o->ppl_bos, o->limit_tokens, &tokens, &n_tok, &d);
    if (rc == DSQ_OK && o->limit_tokens && o->limit_tokens < n_tok) n_tok = (size_t)o->limit_tokens;
    dsq_ppl_plan plan;
    /* window: BOS written over every window's first token (when the
     * tokenizer adds one); first: the text's own leading BOS only */
    int32_t bos_id = rc == DSQ_OK && o->ppl_bos == DSQ_TEXT_BOS_WINDOW ? dsq_tokenizer_adds_bos(r.e.tok)
                   : rc == DSQ_OK && o->ppl_bos == DSQ_TEXT_BOS_FIRST ? dsq_tokenizer_bos(r.e.tok) : -1;
    if (rc == DSQ_OK)
        rc = dsq_ppl_plan_init(&plan, n_tok, n_ctx, o->ppl_bos == DSQ_TEXT_BOS_WINDOW ? bos_id : -1, &d);
    if (o->endpoint) return ppl_endpoint(cli, o, &r, tokens, &plan, rc, &d);
    if (rc == DSQ_OK) rc = open_model(cli, o, &r, 1, n_ctx, &d);
    if (rc == DSQ_OK && o->save_logits) {
        rc = dsq_logp_writer_open(&w, o->save_logits, o->force ? DSQ_OUT_OVERWRITE : 0, &plan, tokens,
                                  r.e.vocab, o->logits_format, o->logits_topk, &d);
        have_w = rc == DSQ_OK;
    }
    dsq_ppl_result res;
    double t0 = dsq_now();
    if (rc == DSQ_OK) {
        dsq_cli_info(cli, 3, "%zu windows of %zu tokens, %zu scored per window", plan.n_chunks, n_ctx, plan.per_chunk);
        dsq_progress_begin(&r.prog, cli, "ppl", "windows", plan.n_chunks);
        dsq_eval_hooks h = { .cancel = &dsq_cli_interrupted, .progress = window_progress,
                             .progress_user = &r, .pool = dsq_model_pool(r.e.m) };
        rc = dsq_ppl_run(&plan, tokens, r.e.vocab, dsq_eval_model_window, &r.e, have_w ? &w : NULL, &h, &res, &d);
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
        json_object_object_add(j, "ppl", dsq_cli_json_num(res.ppl));
        json_object_object_add(j, "ppl_stderr", dsq_cli_json_num(res.ppl_stderr));
        json_object_object_add(j, "mean_nll", dsq_cli_json_num(res.mean_nll));
        json_object_object_add(j, "tokens_scored", json_object_new_int64((int64_t)res.count));
        json_object_object_add(j, "windows", json_object_new_int64((int64_t)plan.n_chunks));
        json_object_object_add(j, "n_ctx", json_object_new_int64((int64_t)plan.n_ctx));
        json_object_object_add(j, "bos", json_object_new_string(dsq_text_bos_names[o->ppl_bos]));
        json_object_object_add(j, "bos_id", bos_id >= 0 ? json_object_new_int(bos_id) : NULL);
        json_object_object_add(j, "seconds", dsq_cli_json_num(secs));
        json_object_object_add(j, "tokens_per_s", dsq_cli_json_num(evaluated / secs));
        if (o->save_logits) json_object_object_add(j, "saved_logits", json_object_new_string(o->save_logits));
        dsq_cli_json_print(j, 0);
    } else if (cli->level >= 2) {
        printf("PPL = %.4f +/- %.5f\n", res.ppl, res.ppl_stderr);
        printf("mean NLL %.6f nats/token over %llu tokens (%zu windows of %zu, second half scored, %s)\n",
               res.mean_nll, (unsigned long long)res.count, plan.n_chunks, plan.n_ctx,
               bos_id < 0 ? "no BOS" : o->ppl_bos == DSQ_TEXT_BOS_WINDOW ? "BOS over each window's first token"
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
        rc = load_tokenizer(cli, o, &r.e.tok, &d);
        if (rc == DSQ_OK) rc = dsq_kld_check_base(&base, r.e.tok, o->data, o->ppl_bos, &d);
    }
    dsq_endpoint_opts eo;
    char *served = NULL;
    if (rc == DSQ_OK && o->endpoint && endpoint_opts(cli, o, &eo) < 0) rc = dsq_fail(&d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "no API key");
    if (rc == DSQ_OK && o->endpoint) rc = dsq_ep_resolve_model(&eo, &served, &d);
    else if (rc == DSQ_OK) rc = open_model(cli, o, &r, 1, plan.n_ctx, &d);
    /* with the served model's tokenizer, text-keyed top_logprobs map back to ids */
    dsq_ep_vocab *vocab = NULL;
    if (rc == DSQ_OK && o->endpoint && o->tokenizer && !r.e.tok) rc = load_tokenizer(cli, o, &r.e.tok, &d);
    if (rc == DSQ_OK && o->endpoint && r.e.tok) rc = dsq_ep_vocab_build(&vocab, r.e.tok, &d);
    dsq_kld_result k;
    dsq_ep_kld_info ki = { 0 };
    double t0 = dsq_now();
    if (rc == DSQ_OK) {
        dsq_progress_begin(&r.prog, cli, "kld", "windows", plan.n_chunks);
        dsq_eval_hooks h = { .cancel = &dsq_cli_interrupted, .progress = window_progress,
                             .progress_user = &r, .pool = r.e.m ? dsq_model_pool(r.e.m) : NULL };
        /* served: the top-k or target-token bound of endpoint.h (a lower bound of KL) */
        rc = o->endpoint ? dsq_ep_kld_run(&eo, served, &base, 0, vocab, &h, &k, &ki, &d)
                         : dsq_kld_run(&base, r.e.vocab, dsq_eval_model_window, &r.e, &h, &k, &d);
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
        json_object_object_add(j, "bos", o->bos_arg ? json_object_new_string(dsq_text_bos_names[o->ppl_bos])
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
        json_object_object_add(j, "kld_mean", dsq_cli_json_num(k.kld_mean));
        json_object_object_add(j, "kld_stderr", dsq_cli_json_num(k.kld_stderr));
        json_object_object_add(j, "kld_mean_lo", dsq_cli_json_num(k.kld_mean_lo));
        json_object_object_add(j, "kld_mean_hi", dsq_cli_json_num(k.kld_mean_hi));
        json_object_object_add(j, "kld_median", dsq_cli_json_num(k.kld_median));
        json_object_object_add(j, "kld_p90", dsq_cli_json_num(k.kld_p90));
        json_object_object_add(j, "kld_p95", dsq_cli_json_num(k.kld_p95));
        json_object_object_add(j, "kld_p99", dsq_cli_json_num(k.kld_p99));
        json_object_object_add(j, "kld_p999", dsq_cli_json_num(k.kld_p999));
        json_object_object_add(j, "kld_max", dsq_cli_json_num(k.kld_max));
        json_object_object_add(j, "kld_min", dsq_cli_json_num(k.kld_min));
        json_object_object_add(j, "same_top1", dsq_cli_json_num(k.same_top));
        json_object_object_add(j, "same_top1_stderr", dsq_cli_json_num(k.same_top_stderr));
        json_object_object_add(j, "ppl", dsq_cli_json_num(k.ppl));
        json_object_object_add(j, "ppl_base", dsq_cli_json_num(k.ppl_base));
        json_object_object_add(j, "ppl_ratio", dsq_cli_json_num(k.ppl_ratio));
        json_object_object_add(j, "ppl_delta", dsq_cli_json_num(k.ppl_delta));
        json_object_object_add(j, "ln_ppl_ratio", dsq_cli_json_num(k.ln_ratio_mean));
        json_object_object_add(j, "ln_ppl_ratio_stderr", dsq_cli_json_num(k.ln_ratio_stderr));
        json_object_object_add(j, "dp_rms", dsq_cli_json_num(k.dp_rms));
        json_object_object_add(j, "seconds", dsq_cli_json_num(secs));
        dsq_cli_json_print(j, 0);
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

typedef dsq_gsm8k_result_item item_out;

typedef struct gen_ctx {
    const dsq_cli *cli;
    const opts *o;
    runner *r;
    item_out *items;
    size_t done;
    double t0;
} gen_ctx;

static int gen_done(void *u, size_t idx, dsq_gen_result *res)
{
    gen_ctx *g = u;
    dsq_gsm8k_item_done(g->items, idx, res);
    dsq_progress_update(&g->r->prog, ++g->done);
    return 0;
}

static void on_note(void *ctx, int level, const char *msg)
{
    gen_ctx *g = ctx;
    if (level == 0) dsq_cli_warn(g->cli, "%s", msg);
    else dsq_cli_info(g->cli, level, "%s", msg);
}

static void on_generating(void *ctx, size_t n, size_t max_ctx)
{
    gen_ctx *g = ctx;
    if (g->cli->level >= 3) {
        char info[1024];
        dsq_model_info(g->r->e.m, info, sizeof info);
        dsq_cli_info(g->cli, 3, "loaded in %.1f s: %s", dsq_now() - g->t0, info);
    }
    dsq_cli_info(g->cli, 3, "%zu prompts, %d-shot, batch %d, context %zu", n, g->o->shots, g->o->batch, max_ctx);
    dsq_progress_begin(&g->r->prog, g->cli, "gsm8k", "items", n);
}

/* gsm8k with the model in process (gsm8k_run.h) */
static int generate_all(dsq_cli *cli, const opts *o, const dsq_gsm8k_set *test, size_t n,
                        item_out *items, runner *r, size_t *gen_tokens, dsq_diag *d)
{
    gen_ctx g = { .cli = cli, .o = o, .r = r, .items = items, .t0 = dsq_now() };
    dsq_gsm8k_local_opts lo = {
        .model = { .model = o->model, .threads = cli->threads, .no_verify = o->no_verify, .bf16_terms = o->bf16_terms,
                   .dsa_mode = o->dsa_mode, .kv_cache = o->kv_cache, .max_batch = o->batch, .ctx = o->ctx },
        .tokenizer = o->tokenizer, .data = o->data, .train = o->train, .shots = o->shots, .seed = o->seed,
        .bos = o->bos, .max_new = o->max_new, .cancel = &dsq_cli_interrupted, .note = on_note,
        .generating = on_generating, .ctx = &g };
    int rc = load_tokenizer(cli, o, &r->e.tok, d);
    if (rc == DSQ_OK) rc = dsq_gsm8k_run_local(&r->e, test, n, &lo, gen_done, &g, d);
    dsq_progress_end(&r->prog);
    for (size_t i = 0; i < n; i++) *gen_tokens += items[i].g.n_gen;
    return rc;
}

/* ---- gsm8k --endpoint ---------------------------------------------------- */

static void on_sending(void *ctx, size_t n_todo, const char *model)
{
    gen_ctx *g = ctx;
    dsq_cli_info(g->cli, 3, "%s: model '%s', %zu prompts, %d-shot, %d in flight", g->o->endpoint, model, n_todo,
                 g->o->shots, g->o->concurrency);
    dsq_progress_begin(&g->r->prog, g->cli, "gsm8k", "items", n_todo);
}

static void on_item(void *ctx, size_t done)
{
    gen_ctx *g = ctx;
    dsq_progress_update(&g->r->prog, done);
}

/* gsm8k against a server (gsm8k_run.h): the local run's prompts, sent as
 * text; --out is the journal a rerun continues from. */
static int endpoint_all(dsq_cli *cli, const opts *o, const dsq_gsm8k_set *test, size_t n, item_out *items,
                        runner *r, size_t *gen_tokens, dsq_ep_journal *hold, dsq_diag *d)
{
    dsq_endpoint_opts eo;
    if (endpoint_opts(cli, o, &eo) < 0) return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "no API key");
    gen_ctx g = { .cli = cli, .o = o, .r = r, .items = items };
    dsq_gsm8k_endpoint_opts go = { .data = o->data, .train = o->train, .shots = o->shots, .seed = o->seed,
                                   .max_new = o->max_new, .journal = o->out, .restart = o->force, .note = on_note,
                                   .sending = on_sending, .progress = on_item, .ctx = &g, .hold = hold };
    int rc = dsq_gsm8k_run_endpoint(&eo, test, n, &go, items, d);
    dsq_progress_end(&r->prog);
    /* the rate is of the tokens this run asked for, not those a journal held */
    for (size_t i = 0; i < n; i++) *gen_tokens += items[i].resumed ? 0 : items[i].g.n_gen;
    return rc;
}

/* ---- gsm8k --chat ---------------------------------------------------------- */

typedef struct chat_ctx {
    const dsq_gsm8k_set *set;
    dsq_chat_reply *replies;
    int samples;
    int journal;           /* fd appended to as replies arrive, or -1 */
    dsq_progress *prog;
    size_t done;
} chat_ctx;

static int chat_done(void *u, size_t idx, dsq_chat_reply *r)
{
    chat_ctx *c = u;
    size_t doc = idx / (size_t)c->samples;
    if (c->journal >= 0) {
        char *line = dsq_chat_record_json(doc, (int)(idx % (size_t)c->samples), &c->set->items[doc], r, NULL);
        if (!line) return DSQ_ERR_NOMEM;
        size_t n = strlen(line);
        line[n] = '\n'; /* the terminating NUL becomes the newline: one write, one line */
        ssize_t w = write(c->journal, line, n + 1);
        free(line);
        if (w != (ssize_t)(n + 1)) return DSQ_ERR_IO;
    }
    c->replies[idx] = *r;
    memset(r, 0, sizeof *r);
    dsq_progress_update(c->prog, ++c->done);
    return 0;
}

static void print_chat(const dsq_cli *cli, const opts *o, const dsq_chat_run_opts *ro, const char *tmpl_id,
                       size_t n, const dsq_chat_summary *sm, double secs)
{
    int lm = ro->suite->kind == DSQ_SUITE_LMEVAL_COT_LLAMA;
    size_t pairs = n * (size_t)o->samples;
    char k[32];
    snprintf(k, sizeof k, "pass@%d", o->samples);
    if (cli->json) {
        json_object *j = json_object_new_object();
        json_object_object_add(j, "command", json_object_new_string("gsm8k"));
        json_object_object_add(j, "chat", json_object_new_boolean(1));
        json_object_object_add(j, "prompt", json_object_new_string(ro->suite->name));
        if (tmpl_id) json_object_object_add(j, "chat_template", json_object_new_string(tmpl_id));
        json_object_object_add(j, "n", json_object_new_int64((int64_t)n));
        json_object_object_add(j, "samples", json_object_new_int(o->samples));
        json_object_object_add(j, "missing", json_object_new_int64((int64_t)sm->missing));
        json_object_object_add(j, "temperature", dsq_cli_json_num(ro->temperature));
        json_object_object_add(j, "max_tokens", json_object_new_int64(ro->max_tokens));
        json_object_object_add(j, "gen_tokens", json_object_new_int64((int64_t)sm->gen_tokens));
        json_object_object_add(j, "reasoning_chars", json_object_new_int64((int64_t)sm->reasoning_chars));
        json_object_object_add(j, "seconds", dsq_cli_json_num(secs));
        json_object *a = json_object_new_object();
        json_object_object_add(a, "accuracy", dsq_cli_json_num(sm->acc));
        json_object_object_add(a, "stderr", dsq_cli_json_num(sm->acc_se));
        json_object_object_add(a, "correct", json_object_new_int64((int64_t)sm->correct));
        json_object_object_add(a, k, dsq_cli_json_num(sm->pass_n));
        json_object_object_add(j, lm ? "strict-match" : "accuracy", a);
        if (lm) {
            json_object *f = json_object_new_object();
            json_object_object_add(f, "accuracy", dsq_cli_json_num(sm->acc_flex));
            json_object_object_add(f, "stderr", dsq_cli_json_num(sm->acc_flex_se));
            json_object_object_add(f, "correct", json_object_new_int64((int64_t)sm->correct_flex));
            json_object_object_add(f, k, dsq_cli_json_num(sm->pass_n_flex));
            json_object_object_add(j, "flexible-extract", f);
        }
        dsq_cli_json_print(j, 0);
    } else if (cli->level >= 2) {
        printf("gsm8k chat (%s%s%s), %zu items x %d sample%s, %llu tokens in %.1f s, reasoning %llu chars\n",
               ro->suite->name, tmpl_id ? ", template " : "", tmpl_id ? tmpl_id : "", n, o->samples,
               o->samples > 1 ? "s" : "", (unsigned long long)sm->gen_tokens, secs,
               (unsigned long long)sm->reasoning_chars);
        printf("  %-17s %.4f +/- %.4f  (%zu/%zu)", lm ? "strict-match" : "accuracy", sm->acc, sm->acc_se, sm->correct,
               pairs);
        if (o->samples > 1) printf("  %s %.4f", k, sm->pass_n);
        printf("\n");
        if (lm) {
            printf("  %-17s %.4f +/- %.4f  (%zu/%zu)", "flexible-extract", sm->acc_flex, sm->acc_flex_se,
                   sm->correct_flex, pairs);
            if (o->samples > 1) printf("  %s %.4f", k, sm->pass_n_flex);
            printf("\n");
        }
    }
}

/* GSM8K (or any numeric-answer set) through chat completions: a suite's
 * prompts and scoring (chat_eval.h), replies from --endpoint or generated in
 * process through the model's chat template (chat_run.h). */
static int cmd_gsm8k_chat(dsq_cli *cli, const opts *o)
{
    dsq_diag d;
    dsq_diag_clear(&d);
    dsq_gsm8k_set set;
    int rc = dsq_gsm8k_load_fields(&set, o->data, o->qfield ? o->qfield : "question", o->afield ? o->afield : "answer", &d);
    if (rc < 0) return dsq_cli_fail(cli, rc, &d);
    const dsq_chat_suite *suite = dsq_chat_suite_find(o->prompt);
    dsq_chat_run_opts ro = { .suite = suite, .kwargs_json = o->chat_kwargs,
                             .max_tokens = o->max_tokens ? o->max_tokens : suite->max_tokens,
                             .temperature = o->has_temperature ? o->temperature : suite->temperature,
                             .top_p = o->top_p, .samples = o->samples, .reasoning_parser = o->reasoning_parser,
                             .extra_json = o->gen_kwargs };
    if (o->has_seed) { ro.has_seed = 1; ro.seed = o->seed; }
    else if (suite->has_seed) { ro.has_seed = 1; ro.seed = suite->seed; }
    size_t n = o->limit && o->limit < set.n ? o->limit : set.n, pairs = n * (size_t)o->samples;
    dsq_chat_reply *replies = calloc(pairs ? pairs : 1, sizeof *replies);
    size_t *todo = calloc(pairs ? pairs : 1, sizeof *todo), n_todo = 0, have = 0;
    if (!replies || !todo) rc = dsq_fail(&d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    /* --out is the journal a rerun continues, locked while this run holds
     * it; a file of something else is kept */
    int jfd = -1;
    char *tail = NULL;
    size_t tail_len = 0;
    if (rc == DSQ_OK && o->out) rc = dsq_ep_journal_lock(o->out, &jfd, &d);
    if (rc == DSQ_OK && o->out && o->force && ftruncate(jfd, 0) < 0) rc = dsq_fail_errno(&d, errno, o->out, "cannot truncate");
    if (rc == DSQ_OK && o->out && !o->force)
        rc = dsq_chat_journal_load(o->out, &set, n, o->samples, replies, &have, &tail, &tail_len, &d);
    struct stat ost;
    if (rc == DSQ_OK && o->out && !o->force && !have && !tail_len && stat(o->out, &ost) == 0 && ost.st_size > 0)
        rc = dsq_fail(&d, DSQ_ERR_EXISTS, o->out, NULL, -1,
                      "exists and holds no reply of this run (another file? -f replaces it)");
    for (size_t i = 0; i < pairs && rc == DSQ_OK; i++)
        if (!replies[i].have) todo[n_todo++] = i;
    if (rc == DSQ_OK && have) dsq_cli_info(cli, 2, "%s: %zu of %zu replies already done, continuing", o->out, have, pairs);
    runner r = { 0 };
    chat_ctx cc = { .set = &set, .replies = replies, .samples = o->samples, .journal = jfd, .prog = &r.prog };
    double t0 = dsq_now();
    const char *tmpl_id = NULL;
    if (rc == DSQ_OK && n_todo && o->endpoint) {
        dsq_endpoint_opts eo;
        char *model = NULL;
        if (endpoint_opts(cli, o, &eo) < 0) rc = dsq_fail(&d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "no API key");
        if (rc == DSQ_OK) rc = dsq_ep_resolve_model(&eo, &model, &d);
        if (rc == DSQ_OK) {
            dsq_cli_info(cli, 3, "%s: model '%s', %zu requests (%s), %d in flight", o->endpoint, model, n_todo,
                         suite->name, o->concurrency);
            dsq_progress_begin(&r.prog, cli, "gsm8k chat", "replies", n_todo);
            rc = dsq_chat_run_endpoint(&eo, model, &ro, &set, todo, n_todo, chat_done, &cc, &d);
            dsq_progress_end(&r.prog);
        }
        free(model);
    } else if (rc == DSQ_OK && n_todo) {
        dsq_chat_model_opts mo = {
            .model = { .model = o->model, .threads = cli->threads, .no_verify = o->no_verify, .bf16_terms = o->bf16_terms,
                       .dsa_mode = o->dsa_mode, .kv_cache = o->kv_cache, .max_batch = o->batch, .ctx = o->ctx },
            .tokenizer = o->tokenizer, .chat_template = o->chat_template, .cancel = &dsq_cli_interrupted };
        dsq_progress_begin(&r.prog, cli, "gsm8k chat", "replies", n_todo);
        rc = dsq_chat_run_model(&r.e, &mo, &ro, &set, todo, n_todo, chat_done, &cc, &tmpl_id, &d);
        dsq_progress_end(&r.prog);
    }
    double secs = dsq_now() - t0;
    runner_close(&r);
    dsq_chat_summary sm;
    /* the scored file replaces the journal under its lock, with the records beyond this run's */
    if (rc == DSQ_OK) rc = dsq_chat_score_all(&ro, o->think_end, &set, n, replies, o->out, tail, tail_len, &sm, &d);
    if (jfd >= 0) close(jfd);
    free(tail);
    size_t refused = 0, first = 0;
    for (size_t i = 0; i < pairs && replies; i++)
        if (replies[i].error && !replies[i].have && !refused++) first = i;
    if (rc == DSQ_OK && refused)
        dsq_cli_warn(cli, "the server refused %zu request%s (doc %zu: %s); they count as wrong", refused,
                     refused > 1 ? "s" : "", first / (size_t)o->samples, replies[first].error);
    if (rc == DSQ_OK && sm.missing)
        dsq_cli_warn(cli, "%zu of %zu replies are missing; they count as wrong", sm.missing, pairs);
    if (rc == DSQ_OK) print_chat(cli, o, &ro, tmpl_id, n, &sm, secs);
    for (size_t i = 0; i < pairs && replies; i++) dsq_chat_reply_release(&replies[i]);
    free(replies);
    free(todo);
    dsq_gsm8k_set_release(&set);
    return rc < 0 ? dsq_cli_fail(cli, rc, &d) : DSQ_EXIT_OK;
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
    dsq_ep_journal hold = { .fd = -1 };
    double t0 = dsq_now();
    if (!items) rc = dsq_fail(&d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    else if (o->score) {
        rc = dsq_gsm8k_completions_load(&comp, o->score, test.n, &d);
        if (rc == DSQ_OK) dsq_gsm8k_items_from_completions(&comp, items, n);
    } else if (o->endpoint) {
        rc = endpoint_all(cli, o, &test, n, items, &r, &gen_tokens, &hold, &d);
    } else {
        rc = generate_all(cli, o, &test, n, items, &r, &gen_tokens, &d);
    }
    double secs = dsq_now() - t0;
    runner_close(&r);
    dsq_gsm8k_completions_release(&comp);

    size_t scored = 0, ks = 0, kf = 0;
    if (rc == DSQ_OK) rc = dsq_gsm8k_score_items(&test, items, n, &scored, &ks, &kf, &d);
    size_t resumed = 0, refused = 0, first_refused = n, all_tokens = 0;
    for (size_t i = 0; items && i < n; i++) {
        resumed += (size_t)items[i].resumed;
        all_tokens += items[i].g.n_gen;
        if (items[i].error && !items[i].have && !refused++) first_refused = i;
    }
    if (rc == DSQ_OK && scored == 0 && refused)
        rc = dsq_fail(&d, DSQ_ERR_INVALID_ARG, o->endpoint, NULL, -1, "the server refused every item (doc %zu: %s)",
                      first_refused, items[first_refused].error);
    if (rc == DSQ_OK && scored == 0) rc = dsq_fail(&d, DSQ_ERR_DATA, o->score, NULL, -1, "no completion matches the first %zu items", n);
    /* the scored file replaces the journal it grew from (its lock still held),
     * keeping the journal's items beyond --limit */
    if (rc == DSQ_OK && o->out)
        rc = dsq_gsm8k_write_items(o->out, o->force || o->endpoint, &test, items, n, !o->score, hold.tail, hold.tail_len, &d);
    dsq_ep_journal_close(&hold);
    if (rc == DSQ_OK && refused)
        dsq_cli_warn(cli, "the server refused %zu item%s (doc %zu: %s); they count as wrong", refused, refused > 1 ? "s" : "",
                     first_refused, items[first_refused].error);
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
                /* gen_tokens: all the items'; the rate: this run's tokens over its time */
                json_object_object_add(j, "gen_tokens", json_object_new_int64((int64_t)all_tokens));
                json_object_object_add(j, "resumed", json_object_new_int64((int64_t)resumed));
                json_object_object_add(j, "refused", json_object_new_int64((int64_t)refused));
                json_object_object_add(j, "run_gen_tokens", json_object_new_int64((int64_t)gen_tokens));
                json_object_object_add(j, "seconds", dsq_cli_json_num(secs));
                json_object_object_add(j, "gen_tokens_per_s", dsq_cli_json_num((double)gen_tokens / secs));
            }
            json_object_object_add(js, "exact_match", dsq_cli_json_num(as));
            json_object_object_add(js, "stderr", dsq_cli_json_num(ses));
            json_object_object_add(js, "correct", json_object_new_int64((int64_t)ks));
            json_object_object_add(jf, "exact_match", dsq_cli_json_num(af));
            json_object_object_add(jf, "stderr", dsq_cli_json_num(sef));
            json_object_object_add(jf, "correct", json_object_new_int64((int64_t)kf));
            json_object_object_add(j, "strict-match", js);
            json_object_object_add(j, "flexible-extract", jf);
            dsq_cli_json_print(j, 0);
        } else if (cli->level >= 2) {
            if (o->score) printf("gsm8k (lm-eval v3.0 filters), %zu items, %zu completions from %s\n", n, scored, o->score);
            else if (resumed)
                printf("gsm8k (lm-eval v3.0), %d-shot, seed %llu, %zu items (%zu from %s), %zu new tokens in %.1f s "
                       "(%.1f tokens/s)\n", o->shots, (unsigned long long)o->seed, scored, resumed, o->out, gen_tokens, secs,
                       (double)gen_tokens / secs);
            else printf("gsm8k (lm-eval v3.0), %d-shot, seed %llu, %zu items, %zu tokens in %.1f s (%.1f tokens/s)\n",
                        o->shots, (unsigned long long)o->seed, scored, gen_tokens, secs, (double)gen_tokens / secs);
            printf("  flexible-extract  exact_match %.4f +/- %.4f  (%zu/%zu)\n", af, sef, kf, n);
            printf("  strict-match      exact_match %.4f +/- %.4f  (%zu/%zu)\n", as, ses, ks, n);
        }
    }
    dsq_gsm8k_items_free(items, n);
    dsq_gsm8k_set_release(&test);
    return rc < 0 ? dsq_cli_fail(cli, rc, &d) : DSQ_EXIT_OK;
}

int main(int argc, char **argv)
{
    dsq_cli cli;
    dsq_cli_init(&cli, "ds-eval");
    json_c_set_serialization_double_format("%.10g", JSON_C_OPTION_GLOBAL);
    opts o;
    dsq_args a;
    int done, rc = parse(&cli, &o, &a, argc, argv, &done);
    dsq_args_release(&a);
    if (rc >= 0 || done) return rc;
    if (!strcmp(o.cmd, "ppl")) return cmd_ppl(&cli, &o);
    if (!strcmp(o.cmd, "kld")) return cmd_kld(&cli, &o);
    if (o.chat) return cmd_gsm8k_chat(&cli, &o);
    return cmd_gsm8k(&cli, &o);
}
