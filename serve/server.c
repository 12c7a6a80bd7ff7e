/* server.c - ds-serve's lifecycle: load the model and its tokenizer, start
 * the engine thread and the HTTP daemon; drain and stop. */
#include "server_internal.h"
#include "container.h"
#include "container_set.h"
#include "model_tokenizer.h"
#include "chat_template.h"
#include "dsq_file.h"

#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

void dsq_server_opts_default(dsq_server_opts *o)
{
    memset(o, 0, sizeof *o);
    o->slots = 8;
    o->queue = 64;
    o->max_connections = 256;
    o->max_connections_per_client = 32;
    o->idle_timeout = 15;
    o->read_timeout = 30;
    o->lim.max_body = 8u << 20;
    o->lim.max_tokens = 4096;
    o->lim.default_max_tokens = 16;
}

/* The model path's last component ("tiny-dsv3" for samples/tiny-dsv3/). */
static char *default_name(const char *path)
{
    char *c = strdup(path);
    if (!c) return NULL;
    size_t n = strlen(c);
    while (n > 1 && c[n - 1] == '/') c[--n] = 0;
    char *sl = strrchr(c, '/');
    char *r = strdup(sl ? sl + 1 : c);
    free(c);
    return r;
}

int dsq_server_start(dsq_server **out, const dsq_server_opts *o, dsq_diag *d)
{
    *out = NULL;
    if (o->slots < 1 || o->queue < 0 || !o->model_path)
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "need a model, >= 1 slot and a queue >= 0");
    if (o->max_connections < 1 || o->max_connections_per_client < 0 || o->idle_timeout < 1 || !(o->read_timeout > 0))
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "need >= 1 connection and timeouts above 0");
    dsq_server *s = calloc(1, sizeof *s);
    if (!s) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    s->o = *o;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    pthread_cond_init(&s->work_cv, NULL);
    s->o.allowed_origins = NULL;
    s->o.n_allowed_origins = 0;
    if (o->n_allowed_origins > 0 && (s->origins = calloc((size_t)o->n_allowed_origins, sizeof *s->origins))) {
        for (int i = 0; i < o->n_allowed_origins && (s->origins[i] = strdup(o->allowed_origins[i])); i++)
            s->o.n_allowed_origins++;
        s->o.allowed_origins = (const char *const *)s->origins;
    }
    s->served_name = o->served_name ? strdup(o->served_name) : default_name(o->model_path);
    s->api_key = o->api_key ? strdup(o->api_key) : NULL;
    int rc = !s->served_name || (o->api_key && !s->api_key) || s->o.n_allowed_origins != (o->n_allowed_origins > 0 ? o->n_allowed_origins : 0) ? dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory") : DSQ_OK;
    if (rc == DSQ_OK) rc = dsq_tokenizer_for_model(&s->tok, o->model_path, o->tokenizer_path, NULL, NULL, 0, d);
    if (rc == DSQ_OK) {
        /* the chat template: a chosen one must load; without a choice, a
         * model with no known template still serves /v1/completions and
         * chat requests are answered with the reason */
        dsq_diag cd;
        dsq_diag_clear(&cd);
        int crc = dsq_chat_template_for_model(&s->chat, o->model_path, o->tokenizer_path, o->chat_template, &cd);
        if (crc < 0) {
            s->chat = NULL;
            dsq_diag_format(&cd, s->chat_err, sizeof s->chat_err);
            if (o->chat_template) rc = dsq_fail(d, crc, cd.path[0] ? cd.path : NULL, NULL, -1, "--chat-template: %s", cd.msg);
        }
    }
    dsq_model_opts mo;
    dsq_model_opts_default(&mo);
    mo.threads = o->threads;
    mo.bf16_terms = o->bf16_terms;
    mo.dsa_mode = o->dsa_mode;
    mo.kv_cache = o->kv_cache;
    if (rc == DSQ_OK) rc = dsq_model_open(&s->m, o->model_path, &mo, d);
    if (rc == DSQ_OK) {
        const dsq_model_config *cfg = dsq_model_get_config(s->m);
        s->vocab = (size_t)cfg->vocab_size;
        /* positions past max_position_embeddings were never trained (ds-eval refuses them too) */
        if (cfg->max_position_embeddings > 0 && o->ctx > cfg->max_position_embeddings)
            rc = dsq_fail(d, DSQ_ERR_INVALID_ARG, o->model_path, NULL, -1,
                          "context %lld exceeds the model's max_position_embeddings (%lld): positions past it were "
                          "never trained, so completions would be meaningless; use --ctx %lld or less",
                          (long long)o->ctx, (long long)cfg->max_position_embeddings, (long long)cfg->max_position_embeddings);
    }
    if (rc == DSQ_OK) {
        const dsq_model_config *cfg = dsq_model_get_config(s->m);
        s->st = dsq_state_create(s->m, o->slots, o->ctx);
        if (!s->st) rc = dsq_fail(d, DSQ_ERR_NOMEM, o->model_path, NULL, -1, "cannot allocate the KV cache for %d x %lld tokens",
                                  o->slots, (long long)o->ctx);
        else s->ctx = dsq_state_max_ctx(s->st);
        /* EOS ids: the tokenizer's and the config's, as ds-eval gsm8k */
        int32_t te = dsq_tokenizer_eos(s->tok);
        if (te >= 0) s->eos[s->n_eos++] = te;
        for (int i = 0; i < cfg->n_eos && s->n_eos < sizeof s->eos / sizeof s->eos[0]; i++) {
            int dup = 0;
            for (size_t k = 0; k < s->n_eos; k++) dup |= s->eos[k] == (int32_t)cfg->eos_token_ids[i];
            if (!dup) s->eos[s->n_eos++] = (int32_t)cfg->eos_token_ids[i];
        }
        s->o.lim.vocab = s->vocab;
        dsq_model_info(s->m, s->info, sizeof s->info);
    }
    if (rc == DSQ_OK) rc = srv_engine_start(s, d);
    if (rc == DSQ_OK) rc = srv_http_start(s, d);
    if (rc < 0) {
        dsq_server_stop(s, 0, NULL);
        return rc;
    }
    *out = s;
    return DSQ_OK;
}

int dsq_server_port(const dsq_server *s) { return s->port; }
const char *dsq_server_model_info(const dsq_server *s) { return s->info; }

const char *dsq_server_chat_template(const dsq_server *s, const char **why)
{
    if (why) *why = s->chat ? NULL : s->chat_err;
    return s->chat ? dsq_chat_template_id(s->chat) : NULL;
}

void dsq_server_get_stats(dsq_server *s, dsq_server_stats *st)
{
    pthread_mutex_lock(&s->mu);
    *st = s->stats;
    pthread_mutex_unlock(&s->mu);
}

void dsq_server_stop(dsq_server *s, double drain_s, dsq_server_stats *final)
{
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->stopping = 1; /* new completions get 503 */
    pthread_mutex_unlock(&s->mu);
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        pthread_mutex_lock(&s->mu);
        int busy = s->n_active + s->q_len;
        pthread_mutex_unlock(&s->mu);
        clock_gettime(CLOCK_MONOTONIC, &t);
        if (!busy || !s->engine_started || (double)(t.tv_sec - t0.tv_sec) + 1e-9 * (double)(t.tv_nsec - t0.tv_nsec) >= drain_s) break;
        usleep(20000);
    }
    srv_engine_stop(s);   /* cancels what is left; waiting handlers wake up */
    srv_http_stop(s);
    if (final) *final = s->stats; /* every thread has stopped */
    dsq_state_free(s->st);
    dsq_model_free(s->m);
    dsq_tokenizer_free(s->tok);
    dsq_chat_template_free(s->chat);
    free(s->queue);
    free(s->slot_job);
    free(s->served_name);
    for (int i = 0; i < s->o.n_allowed_origins; i++) free(s->origins[i]);
    free(s->origins);
    if (s->api_key) memset(s->api_key, 0, strlen(s->api_key));
    free(s->api_key);
    pthread_cond_destroy(&s->cv);
    pthread_cond_destroy(&s->work_cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
}
