/* ds_serve.c - ds-serve: an OpenAI-compatible server over dsq's engine.
 *
 *   ds-serve -m MODEL [--port 8000] [--host 127.0.0.1] [--port-file F]
 *            [--served-model-name NAME] [--api-key-env VAR] [--slots 8]
 *            [--queue 64] [--ctx N] [--max-body BYTES] [--max-tokens N]
 *            [--max-connections 256] [--max-connections-per-client 32]
 *            [--idle-timeout 15] [--read-timeout 30] [--allowed-origins LIST]
 *
 * The work is in libdsq (serve/server.h); this file parses options, starts
 * the server, waits for SIGINT/SIGTERM and drains. Exit: 0 ok, 1 error,
 * 2 usage. */
#include "chat_reasoning.h"
#include "cli.h"
#include "cli_opt.h"
#include "dsq_file.h"
#include "server.h"

#include <json-c/json.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { O_MODEL = DSQ_OPT_FIRST, O_TOKENIZER, O_NAME, O_HOST, O_PORT, O_PORT_FILE, O_KEY_ENV, O_SLOTS, O_QUEUE, O_CTX,
       O_MAX_BODY, O_MAX_TOKENS, O_DRAIN, O_BF16_TERMS, O_CHAT_TEMPLATE, O_REASONING, O_DSA, O_KVCACHE,
       O_MAX_CONN, O_MAX_CONN_CLIENT, O_IDLE_TIMEOUT, O_READ_TIMEOUT, O_ORIGINS };

/* the table is laid out by hand, one row per option */
/* clang-format off */
static const dsq_opt opts[] = {
    { .type = DSQ_OPT_TEXT, .help =
"usage: ds-serve -m MODEL [options]\n"
"\n"
"Serves MODEL (.dsq, safetensors file/index/directory) over an OpenAI-compatible\n"
"HTTP API: GET /health, GET /v1/models, POST /v1/completions (prompt as text or\n"
"token ids, one or a list; max_tokens, temperature (0 = greedy), top_p, seed,\n"
"stop, logprobs, echo, stream, vLLM's prompt_logprobs), POST\n"
"/v1/chat/completions (messages rendered exactly by the model's DeepSeek chat\n"
"template, chat_template_kwargs, stream, reasoning_content), vLLM's POST\n"
"/tokenize and /detokenize. Concurrent requests are decoded together.\n"
"\n" },
    { O_MODEL, DSQ_OPT_STR, "model", 'm', "PATH", .help = "the model" },
    { O_TOKENIZER, DSQ_OPT_STR, "tokenizer", 0, "PATH", .help = "tokenizer (default: the .dsq metadata or the\nmodel's directory)" },
    { O_NAME, DSQ_OPT_STR, "served-model-name", 0, "N", .help = "name in /v1/models and requests (default: the\nmodel path's last component)" },
    { O_HOST, DSQ_OPT_STR, "host", 0, "ADDR", .help = "IPv4 address to bind (default 127.0.0.1)" },
    { O_PORT, DSQ_OPT_INT, "port", 'p', "N", 0, 65535, .help = "port (0 = any free port)", .def = "8000" },
    { O_PORT_FILE, DSQ_OPT_STR, "port-file", 0, "F", .help = "write the bound port to F once listening" },
    { O_KEY_ENV, DSQ_OPT_STR, "api-key-env", 0, "VAR", .help = "require 'Authorization: Bearer <$VAR>'" },
    { O_CHAT_TEMPLATE, DSQ_OPT_STR, "chat-template", 0, "T",
      .help = "the chat template: a known template's id\n(deepseek-v3, deepseek-v3-0324, deepseek-r1,\n"
              "deepseek-r1-0528, deepseek-v3.1, deepseek-v3.2-exp,\ndeepseek-v3.2, ...) or a file holding one's text\n"
              "(default: the model's own, recognised by its\nsha256; unknown templates are refused)" },
    { O_REASONING, DSQ_OPT_CHOICE, "reasoning-parser", 0, "P", .choices = "deepseek_r1|deepseek_v3",
      .help = "split reasoning_content from content as vLLM's\ndeepseek_r1 or deepseek_v3 parser (default: none)" },
    { O_SLOTS, DSQ_OPT_INT, "slots", 0, "N", 1, 1024, .help = "sequences decoded together", .def = "8" },
    { O_QUEUE, DSQ_OPT_INT, "queue", 0, "N", 0, 1 << 20, .help = "sequences waiting beyond the slots; more get\n503", .def = "64" },
    { O_CTX, DSQ_OPT_SIZE, "ctx", 0, "N", 2, INT32_MAX, "2..2^31-1",
      .help = "context per sequence (default: the model's,\nmin(max positions, 4096))" },
    { O_MAX_BODY, DSQ_OPT_SIZE, "max-body", 0, "BYTES", 64, 1u << 30, "64..1G", .help = "request body limit", .def = "8M" },
    { O_MAX_TOKENS, DSQ_OPT_SIZE, "max-tokens", 0, "N", 1, 1u << 20, "1..1M", .help = "cap on max_tokens", .def = "4096" },
    { O_MAX_CONN, DSQ_OPT_INT, "max-connections", 0, "N", 1, 4096,
      .help = "open connections; a new client beyond it closes\nthe one idle or reading longest", .def = "256" },
    { O_MAX_CONN_CLIENT, DSQ_OPT_INT, "max-connections-per-client", 0, "N", 0, 4096,
      .help = "open connections per client address (0 = no\nlimit, e.g. behind a proxy)", .def = "32" },
    { O_IDLE_TIMEOUT, DSQ_OPT_INT, "idle-timeout", 0, "S", 1, 86400,
      .help = "close a connection whose client sends or takes\nnothing for S seconds", .def = "15" },
    { O_READ_TIMEOUT, DSQ_OPT_FLOAT, "read-timeout", 0, "S", 0.1, 86400,
      .help = "close a connection whose request (headers and\nbody) has not arrived S seconds after the\n"
              "connection opened or the previous answer ended", .def = "30" },
    { O_ORIGINS, DSQ_OPT_STR, "allowed-origins", 0, "LIST",
      .help = "CORS: origins browsers may call from, as vLLM's\n--allowed-origins: a JSON list or comma-separated\n"
              "('[\"http://localhost:3000\"]', '*' = any;\ndefault: none)" },
    { O_DRAIN, DSQ_OPT_FLOAT, "drain-seconds", 0, "S", 0, 86400,
      .help = "on SIGINT/SIGTERM, let requests in flight\nfinish for up to S seconds", .def = "30" },
    DSQ_OPT_THREADS_ROW("engine threads (default: all cores)"),
    { O_BF16_TERMS, DSQ_OPT_INT, "bf16-terms", 0, "N", 1, 3,
      .help = "BF16 weights: bf16 terms per f32 activation in\nthe dot products, 3 (default: f32 accuracy), 2,\n"
              "or 1 (rounded to bf16 as llama.cpp: faster)" },
    { O_DSA, DSQ_OPT_CHOICE, "dsa", 0, "fp8|float", .choices = "fp8|float",
      .help = "DeepSeek-V3.2 sparse attention: DeepSeek's e4m3\nround trips (fp8) or float", .def = "fp8" },
    { O_KVCACHE, DSQ_OPT_CHOICE, "kv-cache", 0, "f32|bf16|int8|fp8", .choices = "f32|bf16|int8|fp8",
      .help = "MLA's KV cache per position: f32, bf16, or\nint8 / fp8 codes with a per-token scale", .def = "f32" },
    { DSQ_OPT_JSON, DSQ_OPT_FLAG, "json", .help = "log lines as JSON" },
    { DSQ_OPT_QUIET, DSQ_OPT_FLAG, "quiet", 'q' },
    { DSQ_OPT_VERBOSE, DSQ_OPT_FLAG, "verbose", 'v' },
    { DSQ_OPT_HELP, DSQ_OPT_FLAG, "help", 'h' },
    { DSQ_OPT_VERSION, DSQ_OPT_FLAG, "version", 'V' },
    { .type = DSQ_OPT_TEXT, .help =
"  -q, --quiet / -v, --verbose\n"
"  -h, --help / -V, --version\n"
"\n"
"Exit status: 0 ok (stopped by a signal), 1 error, 2 usage.\n" },
};
/* clang-format on */
static const dsq_opt_spec spec = { opts, sizeof opts / sizeof opts[0], 25, 1, NULL };

static void free_origins(char **out, int *n)
{
    while (*n > 0) free(out[--*n]);
}

/* vLLM's --allowed-origins is a JSON list; a comma-separated one is taken
 * too. On failure nothing stays allocated. */
static int parse_origins(const char *v, char **out, int *n, int max)
{
    while (*v == ' ') v++;
    if (*v == '[') {
        json_object *j = json_tokener_parse(v);
        int ok = j && json_object_is_type(j, json_type_array) && (int)json_object_array_length(j) <= max;
        for (size_t i = 0; ok && i < json_object_array_length(j); i++) {
            json_object *e = json_object_array_get_idx(j, i);
            ok = json_object_is_type(e, json_type_string) && json_object_get_string_len(e) > 0 &&
                 (out[(*n)++] = strdup(json_object_get_string(e))) != NULL;
        }
        json_object_put(j);
        if (!ok) free_origins(out, n);
        return ok ? 0 : -1;
    }
    for (const char *p = v; *p;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        while (len && p[0] == ' ') { p++; len--; }
        while (len && p[len - 1] == ' ') len--;
        if (len) {
            if (*n >= max || !(out[*n] = strndup(p, len))) return free_origins(out, n), -1;
            (*n)++;
        }
        p = e ? e + 1 : p + strlen(p);
    }
    return 0;
}

int main(int argc, char **argv)
{
    dsq_cli cli;
    dsq_cli_init(&cli, "ds-serve");
    signal(SIGPIPE, SIG_IGN); /* a client that hangs up must not kill the server */
    dsq_server_opts o;
    dsq_server_opts_default(&o);
    dsq_args a;
    int rc = dsq_opt_parse(&cli, &spec, argc, argv, &a);
    if (rc >= 0) return rc;
    if (a.npos > 0) return dsq_args_release(&a), dsq_cli_usage_error(&cli, "unexpected argument '%s'", a.pos[0]);
    dsq_args_release(&a);
    /* the table's defaults are the library's (dsq_server_opts_default) */
    const dsq_opt_lib lib[] = {
        { O_SLOTS, o.slots },
        { O_QUEUE, o.queue },
        { O_MAX_BODY, (double)o.lim.max_body },
        { O_MAX_TOKENS, (double)o.lim.max_tokens },
        { O_MAX_CONN, o.max_connections },
        { O_MAX_CONN_CLIENT, o.max_connections_per_client },
        { O_IDLE_TIMEOUT, o.idle_timeout },
        { O_READ_TIMEOUT, o.read_timeout },
        { O_DSA, o.dsa_mode },
        { O_KVCACHE, o.kv_cache },
    };
    if ((rc = dsq_opt_check_lib(&cli, &spec, lib, sizeof lib / sizeof lib[0])) >= 0) return rc;
    o.model_path = dsq_opt_str(&a, O_MODEL);
    o.tokenizer_path = dsq_opt_str(&a, O_TOKENIZER);
    o.served_name = dsq_opt_str(&a, O_NAME);
    o.host = dsq_opt_str(&a, O_HOST);
    o.port = dsq_opt_int(&a, O_PORT);
    o.slots = dsq_opt_int(&a, O_SLOTS);
    o.queue = dsq_opt_int(&a, O_QUEUE);
    o.ctx = (int64_t)dsq_opt_u64(&a, O_CTX);
    o.lim.max_body = (size_t)dsq_opt_u64(&a, O_MAX_BODY);
    o.lim.max_tokens = (int64_t)dsq_opt_u64(&a, O_MAX_TOKENS);
    o.bf16_terms = dsq_opt_int(&a, O_BF16_TERMS);
    o.max_connections = dsq_opt_int(&a, O_MAX_CONN);
    o.max_connections_per_client = dsq_opt_int(&a, O_MAX_CONN_CLIENT);
    o.idle_timeout = dsq_opt_int(&a, O_IDLE_TIMEOUT);
    o.read_timeout = dsq_opt_float(&a, O_READ_TIMEOUT);
    const char *origins = dsq_opt_str(&a, O_ORIGINS);
    o.dsa_mode = dsq_opt_choice(&a, O_DSA);
    o.kv_cache = dsq_opt_choice(&a, O_KVCACHE);
    o.chat_template = dsq_opt_str(&a, O_CHAT_TEMPLATE);
    if (dsq_opt_given(&a, O_REASONING)) o.reasoning_parser = dsq_reasoning_parser_from_name(dsq_opt_str(&a, O_REASONING));
    const char *port_file = dsq_opt_str(&a, O_PORT_FILE), *key_env = dsq_opt_str(&a, O_KEY_ENV);
    double drain = dsq_opt_float(&a, O_DRAIN);
    if (!o.model_path) return dsq_cli_usage_error(&cli, "--model is required");
    o.threads = cli.threads;
    if (key_env) {
        o.api_key = getenv(key_env);
        if (!o.api_key || !o.api_key[0]) return dsq_cli_usage_error(&cli, "--api-key-env: environment variable %s is unset or empty", key_env);
    }
    char *olist[64];
    int n_olist = 0;
    if (origins && parse_origins(origins, olist, &n_olist, 64) < 0)
        return dsq_cli_usage_error(&cli, "--allowed-origins: want a JSON list of strings or comma-separated origins (at most 64)");
    o.allowed_origins = (const char *const *)olist;
    o.n_allowed_origins = n_olist;
    dsq_diag d;
    dsq_diag_clear(&d);
    dsq_server *s = NULL;
    double t0 = dsq_now();
    rc = dsq_server_start(&s, &o, &d);
    free_origins(olist, &n_olist); /* the server keeps its own copy */
    if (rc < 0) return dsq_cli_fail(&cli, rc, &d);
    int port = dsq_server_port(s);
    if (port_file) {
        char buf[32];
        int n = snprintf(buf, sizeof buf, "%d\n", port);
        rc = dsq_write_file_atomic(port_file, buf, (size_t)n, DSQ_OUT_OVERWRITE, &d);
        if (rc < 0) { dsq_server_stop(s, 0, NULL); return dsq_cli_fail(&cli, rc, &d); }
    }
    if (cli.json) {
        json_object *j = json_object_new_object();
        json_object_object_add(j, "event", json_object_new_string("listening"));
        json_object_object_add(j, "host", json_object_new_string(o.host ? o.host : "127.0.0.1"));
        json_object_object_add(j, "port", json_object_new_int(port));
        json_object_object_add(j, "load_seconds", json_object_new_double(dsq_now() - t0));
        dsq_cli_json_print(j, 0);
    } else if (cli.level >= 2) {
        printf("ds-serve: listening on http://%s:%d/v1 (%d slots, queue %d%s)\n", o.host ? o.host : "127.0.0.1", port,
               o.slots, o.queue, o.api_key ? ", API key required" : "");
    }
    fflush(stdout);
    dsq_cli_info(&cli, 3, "model loaded in %.1f s: %s", dsq_now() - t0, dsq_server_model_info(s));
    const char *why = NULL, *tmpl = dsq_server_chat_template(s, &why);
    if (tmpl) dsq_cli_info(&cli, 2, "chat template: %s", tmpl);
    else dsq_cli_info(&cli, 2, "no chat completions: %s", why);
    while (!dsq_cli_interrupted) usleep(50000);
    dsq_cli_info(&cli, 2, "stopping: draining requests in flight (up to %.0f s)", drain);
    dsq_server_stats st;
    dsq_server_stop(s, drain, &st);
    dsq_cli_info(&cli, 3, "%llu requests, %llu completed, %llu busy (503), %llu bad, %llu cancelled; "
                 "%llu prompt + %llu generated tokens; %llu decode steps, %.2f sequences per step",
                 (unsigned long long)st.requests, (unsigned long long)st.completed, (unsigned long long)st.rejected_busy,
                 (unsigned long long)st.bad_requests, (unsigned long long)st.cancelled,
                 (unsigned long long)st.prompt_tokens, (unsigned long long)st.gen_tokens,
                 (unsigned long long)st.decode_steps,
                 st.decode_steps ? (double)st.decode_rows / (double)st.decode_steps : 0.0);
    return DSQ_EXIT_OK;
}
