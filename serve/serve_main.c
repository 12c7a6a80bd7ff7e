/* serve_main.c - ds-serve: an OpenAI-compatible server over dsq's engine.
 *
 *   ds-serve -m MODEL [--port 8000] [--host 127.0.0.1] [--port-file F]
 *            [--served-model-name NAME] [--api-key-env VAR] [--slots 8]
 *            [--queue 64] [--ctx N] [--max-body BYTES] [--max-tokens N]
 *
 * The work is in libdsq (serve/server.h); this file parses options, starts
 * the server, waits for SIGINT/SIGTERM and drains. Exit: 0 ok, 1 error,
 * 2 usage. */
#include "cli.h"
#include "dsq_file.h"
#include "dsa.h"
#include "server.h"

#include <getopt.h>
#include <json-c/json.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char usage_text[] =
"usage: ds-serve -m MODEL [options]\n"
"\n"
"Serves MODEL (.dsq, safetensors file/index/directory) over an OpenAI-compatible\n"
"HTTP API: GET /health, GET /v1/models, POST /v1/completions (prompt as text or\n"
"token ids, one or a list; max_tokens, temperature (0 = greedy), top_p, seed,\n"
"stop, logprobs, echo, stream, vLLM's prompt_logprobs). Concurrent requests are decoded together.\n"
"\n"
"  -m, --model PATH          the model\n"
"      --tokenizer PATH      tokenizer (default: the .dsq metadata or the\n"
"                            model's directory)\n"
"      --served-model-name N name in /v1/models and requests (default: the\n"
"                            model path's last component)\n"
"      --host ADDR           IPv4 address to bind (default 127.0.0.1)\n"
"  -p, --port N              port (default 8000; 0 = any free port)\n"
"      --port-file F         write the bound port to F once listening\n"
"      --api-key-env VAR     require 'Authorization: Bearer <$VAR>'\n"
"      --slots N             sequences decoded together (default 8)\n"
"      --queue N             sequences waiting beyond the slots; more get\n"
"                            503 (default 64)\n"
"      --ctx N               context per sequence (default: the model's,\n"
"                            min(max positions, 4096))\n"
"      --max-body BYTES      request body limit (default 8M)\n"
"      --max-tokens N        cap on max_tokens (default 4096)\n"
"      --drain-seconds S     on SIGINT/SIGTERM, let requests in flight\n"
"                            finish for up to S seconds (default 30)\n"
"  -T, --threads N           engine threads (default: all cores)\n"
"      --bf16-terms N        BF16 weights: bf16 terms per f32 activation in\n"
"                            the dot products, 3 (default: f32 accuracy), 2,\n"
"                            or 1 (rounded to bf16 as llama.cpp: faster)\n"
"      --dsa fp8|float       DeepSeek-V3.2 sparse attention: DeepSeek's e4m3\n"
"                            round trips (fp8, the default) or float\n"
"      --json                log lines as JSON\n"
"  -q, --quiet / -v, --verbose\n"
"  -h, --help / -V, --version\n"
"\n"
"Exit status: 0 ok (stopped by a signal), 1 error, 2 usage.\n";

enum { O_TOKENIZER = 256, O_NAME, O_HOST, O_PORT_FILE, O_KEY_ENV, O_SLOTS, O_QUEUE, O_CTX, O_MAX_BODY,
       O_MAX_TOKENS, O_DRAIN, O_JSON, O_BF16_TERMS, O_DSA };

int main(int argc, char **argv)
{
    static const struct option lo[] = {
        { "model", required_argument, 0, 'm' },        { "tokenizer", required_argument, 0, O_TOKENIZER },
        { "served-model-name", required_argument, 0, O_NAME }, { "host", required_argument, 0, O_HOST },
        { "port", required_argument, 0, 'p' },         { "port-file", required_argument, 0, O_PORT_FILE },
        { "api-key-env", required_argument, 0, O_KEY_ENV }, { "slots", required_argument, 0, O_SLOTS },
        { "queue", required_argument, 0, O_QUEUE },    { "ctx", required_argument, 0, O_CTX },
        { "max-body", required_argument, 0, O_MAX_BODY }, { "max-tokens", required_argument, 0, O_MAX_TOKENS },
        { "drain-seconds", required_argument, 0, O_DRAIN }, { "json", no_argument, 0, O_JSON },
        { "bf16-terms", required_argument, 0, O_BF16_TERMS },
        { "dsa", required_argument, 0, O_DSA },
        { "threads", required_argument, 0, 'T' },      { "quiet", no_argument, 0, 'q' },
        { "verbose", no_argument, 0, 'v' },            { "help", no_argument, 0, 'h' },
        { "version", no_argument, 0, 'V' },            { 0, 0, 0, 0 }
    };
    dsq_cli cli;
    dsq_cli_init(&cli, "ds-serve");
    signal(SIGPIPE, SIG_IGN); /* a client that hangs up must not kill the server */
    dsq_server_opts o;
    dsq_server_opts_default(&o);
    o.port = 8000;
    const char *port_file = NULL, *key_env = NULL;
    double drain = 30;
    uint64_t u;
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":m:p:T:qvhV", lo, NULL)) != -1) {
        const char *a = optarg;
        switch (c) {
        case 'm': o.model_path = a; break;
        case O_TOKENIZER: o.tokenizer_path = a; break;
        case O_NAME: o.served_name = a; break;
        case O_HOST: o.host = a; break;
        case O_PORT_FILE: port_file = a; break;
        case O_KEY_ENV: key_env = a; break;
        case 'p': if (dsq_cli_parse_int(a, 0, 65535, &o.port)) return dsq_cli_usage_error(&cli, "--port: expected 0..65535, got '%s'", a); break;
        case O_SLOTS: if (dsq_cli_parse_int(a, 1, 1024, &o.slots)) return dsq_cli_usage_error(&cli, "--slots: expected 1..1024, got '%s'", a); break;
        case O_QUEUE: if (dsq_cli_parse_int(a, 0, 1 << 20, &o.queue)) return dsq_cli_usage_error(&cli, "--queue: expected 0..1048576, got '%s'", a); break;
        case O_CTX:
            if (dsq_cli_parse_u64(a, 2, INT32_MAX, &u)) return dsq_cli_usage_error(&cli, "--ctx: expected 2..2^31-1, got '%s'", a);
            o.ctx = (int64_t)u;
            break;
        case O_MAX_BODY:
            if (dsq_cli_parse_u64(a, 64, 1u << 30, &u)) return dsq_cli_usage_error(&cli, "--max-body: expected 64..1G, got '%s'", a);
            o.lim.max_body = (size_t)u;
            break;
        case O_MAX_TOKENS:
            if (dsq_cli_parse_u64(a, 1, 1u << 20, &u)) return dsq_cli_usage_error(&cli, "--max-tokens: expected 1..1M, got '%s'", a);
            o.lim.max_tokens = (int64_t)u;
            break;
        case O_DRAIN: if (dsq_cli_parse_float(a, 0, 86400, &drain)) return dsq_cli_usage_error(&cli, "--drain-seconds: bad value '%s'", a); break;
        case O_JSON: cli.json = 1; break;
        case O_BF16_TERMS: if (dsq_cli_parse_int(a, 1, 3, &o.bf16_terms)) return dsq_cli_usage_error(&cli, "--bf16-terms: expected 1..3, got '%s'", a); break;
        case O_DSA: if ((o.dsa_mode = dsq_dsa_mode_parse(a)) < 0) return dsq_cli_usage_error(&cli, "--dsa: expected fp8 or float, got '%s'", a); break;
        case 'T': if (dsq_cli_parse_int(a, 0, 4096, &cli.threads)) return dsq_cli_usage_error(&cli, "-T: expected 0..4096, got '%s'", a); break;
        case 'q': cli.level--; break;
        case 'v': cli.level++; break;
        case 'h': fputs(usage_text, stdout); return DSQ_EXIT_OK;
        case 'V': dsq_cli_version(&cli); return DSQ_EXIT_OK;
        case ':': return dsq_cli_usage_error(&cli, "option '%s' needs a value", argv[optind - 1]);
        default: return dsq_cli_usage_error(&cli, "unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc) return dsq_cli_usage_error(&cli, "unexpected argument '%s'", argv[optind]);
    if (!o.model_path) return dsq_cli_usage_error(&cli, "--model is required");
    if (cli.level < 0) cli.level = 0;
    o.threads = cli.threads;
    if (key_env) {
        o.api_key = getenv(key_env);
        if (!o.api_key || !o.api_key[0]) return dsq_cli_usage_error(&cli, "--api-key-env: environment variable %s is unset or empty", key_env);
    }
    dsq_diag d;
    dsq_diag_clear(&d);
    dsq_server *s = NULL;
    double t0 = dsq_now();
    int rc = dsq_server_start(&s, &o, &d);
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
        puts(json_object_to_json_string_ext(j, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
        json_object_put(j);
    } else if (cli.level >= 2) {
        printf("ds-serve: listening on http://%s:%d/v1 (%d slots, queue %d%s)\n", o.host ? o.host : "127.0.0.1", port,
               o.slots, o.queue, o.api_key ? ", API key required" : "");
    }
    fflush(stdout);
    dsq_cli_info(&cli, 3, "model loaded in %.1f s: %s", dsq_now() - t0, dsq_server_model_info(s));
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
