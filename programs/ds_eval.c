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
 * The work lives in libdsq (eval_flow.h runs each command, eval_report.h
 * renders its result); this file parses options, hands them over and prints.
 * Exit codes: 0 ok, 1 error, 2 usage. */
#include "cli.h"
#include "cli_opt.h"
#include "chat_eval.h"
#include "chat_reasoning.h"
#include "eval_flow.h"
#include "gsm8k.h"

#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


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
      .help = "(default: the harness's, 0.01 / 0); in process\nsampled as ds-serve samples (reply s: seed + s)" },
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
/* the commands: the library's runs (eval_flow.h), their reports printed  */
/* ====================================================================== */

/* What a run shows on the way (eval_flow.h's events; ctx: the progress
 * line, which knows the cli): messages and the progress line. */
static void on_note(void *ctx, int level, const char *msg)
{
    const dsq_cli *cli = ((const dsq_progress *)ctx)->cli;
    if (level == 0) dsq_cli_warn(cli, "%s", msg);
    else dsq_cli_info(cli, level, "%s", msg);
}
static void on_begin(void *ctx, const char *label, const char *unit, size_t n)
{
    dsq_progress *p = ctx;
    dsq_progress_begin(p, p->cli, label, unit, n);
}
static void on_progress(void *ctx, size_t done) { dsq_progress_update(ctx, done); }
static void on_end(void *ctx) { dsq_progress_end(ctx); }

/* One command's run; its report as JSON (--json) or text (from level 2). */
static int run(const dsq_cli *cli, const opts *o, const dsq_eval_setup *s, dsq_diag *d)
{
    FILE *text = !cli->json && cli->level >= 2 ? stdout : NULL;
    json_object *j = NULL;
    int rc;
    if (!strcmp(o->cmd, "ppl")) {
        dsq_ppl_flow_opts po = {
            .s = *s,
            .data = o->data,
            .bos = o->ppl_bos,
            .limit_tokens = o->limit_tokens,
            .ctx = o->ctx,
            .save_logits = o->save_logits,
            .overwrite = o->force,
            .logits_format = o->logits_format,
            .logits_topk = o->logits_topk,
        };
        dsq_ppl_report r;
        rc = dsq_ppl_flow(&po, &r, d);
        if (rc == DSQ_OK && cli->json) j = dsq_ppl_report_json(&r);
        else if (rc == DSQ_OK && text) dsq_ppl_report_text(text, &r);
    } else if (!strcmp(o->cmd, "kld")) {
        dsq_kld_flow_opts ko = { .s = *s, .base = o->base, .data = o->data, .bos = o->bos_arg ? o->ppl_bos : -1 };
        dsq_kld_report r;
        rc = dsq_kld_flow(&ko, &r, d);
        if (rc == DSQ_OK && cli->json) j = dsq_kld_report_json(&r);
        else if (rc == DSQ_OK && text) dsq_kld_report_text(text, &r);
    } else if (o->chat) {
        dsq_chat_flow_opts co = {
            .s = *s,
            .data = o->data,
            .qfield = o->qfield,
            .afield = o->afield,
            .suite = dsq_chat_suite_find(o->prompt),
            .kwargs_json = o->chat_kwargs,
            .extra_json = o->gen_kwargs,
            .max_tokens = o->max_tokens,
            .has_temperature = o->has_temperature,
            .temperature = o->temperature,
            .top_p = o->top_p,
            .has_seed = o->has_seed,
            .seed = o->seed,
            .samples = o->samples,
            .reasoning_parser = o->reasoning_parser,
            .chat_template = o->chat_template,
            .think_end = o->think_end,
            .out = o->out,
            .force = o->force,
            .limit = o->limit,
        };
        dsq_chat_report r;
        rc = dsq_chat_flow(&co, &r, d);
        if (rc == DSQ_OK && cli->json) j = dsq_chat_report_json(&r);
        else if (rc == DSQ_OK && text) dsq_chat_report_text(text, &r);
    } else {
        dsq_gsm8k_flow_opts go = {
            .s = *s,
            .data = o->data,
            .train = o->train,
            .score = o->score,
            .out = o->out,
            .force = o->force,
            .shots = o->shots,
            .seed = o->seed,
            .bos = o->bos,
            .max_new = o->max_new,
            .limit = o->limit,
        };
        dsq_gsm8k_report r;
        rc = dsq_gsm8k_flow(&go, &r, d);
        if (rc == DSQ_OK && cli->json) j = dsq_gsm8k_report_json(&r);
        else if (rc == DSQ_OK && text) dsq_gsm8k_report_text(text, &r);
    }
    if (j) dsq_cli_json_print(j, 0);
    return rc;
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
    /* the API key comes from the environment only (never the command line, never printed) */
    dsq_endpoint_opts eo = {
        .url = o.endpoint,
        .model = o.served_model,
        .api_key = o.api_key_env ? getenv(o.api_key_env) : NULL,
        .concurrency = o.concurrency,
        .timeout_s = o.timeout,
        .retries = o.retries,
        .cancel = &dsq_cli_interrupted,
    };
    if (o.api_key_env && (!eo.api_key || !eo.api_key[0])) {
        dsq_cli_error(&cli, "--api-key-env: environment variable %s is unset or empty", o.api_key_env);
        return DSQ_EXIT_ERROR;
    }
    dsq_progress prog = { .cli = &cli };
    dsq_eval_model_opts mo = {
        .model = o.model,
        .threads = cli.threads,
        .no_verify = o.no_verify,
        .bf16_terms = o.bf16_terms,
        .dsa_mode = o.dsa_mode,
        .kv_cache = o.kv_cache,
        .max_batch = o.batch,
        .ctx = o.ctx,
    };
    dsq_eval_events ev = {
        .note = on_note,
        .begin = on_begin,
        .progress = on_progress,
        .end = on_end,
        .ctx = &prog,
        .cancel = &dsq_cli_interrupted,
    };
    dsq_eval_setup s = { .model = mo, .tokenizer = o.tokenizer, .endpoint = o.endpoint ? &eo : NULL, .ev = ev };
    dsq_diag d;
    dsq_diag_clear(&d);
    rc = run(&cli, &o, &s, &d);
    return rc < 0 ? dsq_cli_fail(&cli, rc, &d) : DSQ_EXIT_OK;
}
