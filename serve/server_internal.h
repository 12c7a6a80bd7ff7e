/* server_internal.h - what server_engine.c and server_http.c share.
 *
 * Locking: one mutex (srv->mu) guards the queue, the slot table and every
 * field marked [mu] below; srv->cv is broadcast whenever a job publishes
 * text or finishes, srv->work_cv when work arrives for the engine. Fields
 * marked [engine] belong to the engine thread while the job is queued or
 * running; HTTP threads read them only after seeing `finished` under the
 * lock (the engine never touches a finished job again). */
#ifndef DSQ_SERVER_INTERNAL_H
#define DSQ_SERVER_INTERNAL_H

#include "server.h"
#include "model.h"
#include "tokenizer.h"

#include <pthread.h>

typedef struct srv_request srv_request;

enum srv_finish { SRV_RUNNING = 0, SRV_FIN_STOP = 1, SRV_FIN_LENGTH = 2, SRV_FIN_ERROR = 3 };

typedef struct srv_job {
    srv_request *req;
    int index;                 /* choice index */
    int32_t *prompt;           /* [n_prompt] */
    size_t n_prompt;
    /* [engine] */
    int32_t *gen;              /* generated ids (EOS not included) */
    double *gen_lp;            /* [n_gen] log-prob of each generated id */
    int32_t *gen_top_id;       /* [n_gen * gen_k] top alternatives (logprobs > 0) */
    double *gen_top_lp;
    size_t gen_k;              /* alternatives kept per generated token: logprobs, at most the vocabulary */
    size_t n_gen;
    double *prompt_lp;         /* [n_prompt] echo + logprobs or prompt_logprobs; [0] unused */
    int64_t *prompt_rank;      /* [n_prompt] 1 + ids with a larger logit (vLLM's rank) */
    int32_t *prompt_top_id;    /* [n_prompt * prompt_k] */
    double *prompt_top_lp;
    size_t prompt_k;           /* stride of prompt_top_*: the larger of the two asks, at most the vocabulary */
    char *text;                /* decoded completion (cut at a stop when finished) */
    size_t len;
    uint64_t rng;
    int slot;                  /* -1 while queued */
    int32_t next;              /* token to feed at the next decode step */
    /* [mu] */
    size_t pub_len;            /* bytes of text safe to stream */
    char *pub_text;            /* copy of text[0..pub_len) for streaming */
    size_t pub_ntok;           /* generated tokens whose ids and log-probs may be streamed */
    int finished;              /* enum srv_finish */
    char err[256];
} srv_job;

struct srv_request {
    dsq_srv_params p;
    srv_job *jobs;
    int n_jobs;
    int n_finished;            /* [mu] */
    int cancelled;             /* [mu] client gone or server stopping */
    int refs;                  /* [mu] HTTP side + jobs the engine still holds */
    uint64_t id;
    int64_t created;
};

struct dsq_server {
    dsq_server_opts o;
    char *served_name;
    char *api_key;
    char info[1024];
    dsq_model *m;
    dsq_state *st;
    dsq_tokenizer *tok;
    struct dsq_chat_template *chat; /* NULL: chat requests get chat_err */
    char chat_err[600];
    size_t vocab;
    int64_t ctx;
    int32_t eos[17];
    size_t n_eos;

    pthread_mutex_t mu;
    pthread_cond_t cv, work_cv;
    pthread_t engine;
    int engine_started;
    int stopping;              /* [mu] no new requests */
    int quit;                  /* [mu] engine must exit */
    srv_job **queue;           /* [mu] ring of waiting jobs */
    int q_head, q_len, q_cap;
    srv_job **slot_job;        /* [mu] [slots] */
    int n_active;              /* [mu] */
    uint64_t next_id;          /* [mu] */
    dsq_server_stats stats;    /* [mu] */

    struct MHD_Daemon *daemon;
    struct srv_conns *conns;   /* server_conn.c */
    char **origins;            /* the copy o.allowed_origins points to */
    int port;
};

/* server_engine.c */
int  srv_engine_start(dsq_server *s, dsq_diag *d);
void srv_engine_stop(dsq_server *s);
/* Queue every job of r (takes one reference per job). DSQ_ERR_STATE when
 * the server is stopping, DSQ_ERR_NOMEM when the queue has no room. */
int  srv_submit(dsq_server *s, srv_request *r);
/* Drop one reference under the lock; frees the request at zero. */
void srv_request_unref_locked(srv_request *r);
/* Decode ids as the completion text (special tokens skipped). */
int  srv_detok(const dsq_server *s, const int32_t *ids, size_t n, char **text, size_t *len);

/* server_http.c */
int  srv_http_start(dsq_server *s, dsq_diag *d);
void srv_http_stop(dsq_server *s);

/* The prompt is scored (every position's log-prob) for echo + logprobs and
 * for vLLM's prompt_logprobs; vLLM derives prompt_logprobs from logprobs
 * when echo is set (protocol.py to_sampling_params), and so does the
 * response here. */
static inline int srv_scores_prompt(const dsq_srv_params *p)
{
    return (p->echo && p->logprobs >= 0) || p->prompt_logprobs >= 0;
}
static inline int srv_prompt_logprobs_k(const dsq_srv_params *p)
{
    return p->prompt_logprobs >= 0 ? p->prompt_logprobs : p->echo ? p->logprobs : -1;
}

#endif
