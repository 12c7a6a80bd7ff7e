/* calib_int.h - internals shared by the calibration driver's files; not
 * part of the library's interface (calib.h is). The driver, by part:
 *   calib.c             options, the run context, the run (data, embeddings,
 *                       the forward pass layer by layer, or a --stats file)
 *   calib_result.c      the result: entries by tensor name, fallbacks,
 *                       rollbacks, coverage, fingerprint, summary JSON
 *   calib_groups.c      per-group decisions and folding their scales
 *   calib_linear.c      per-linear entries: clip, static ranges, GPTQ jobs
 *   calib_gptq.c        the parallel GPTQ phase of a fresh layer
 *   calib_rollback.c    --rollback: sensitivities and the choice
 *   calib_layer.c       one layer: groups, entries, GPTQ, sensitivities
 *   calib_checkpoint.c  the statistics file as input and as the per-layer
 *                       checkpoint: layer statistics, fingerprint, metadata */
#ifndef DSQ_CALIB_INT_H
#define DSQ_CALIB_INT_H

#include "calib.h"
#include "gptq.h"
#include "sens.h"
#include "dsq_file.h"
#include "dsq_json.h"
#include "smooth.h"
#include "stats.h"
#include "stats_file.h"
#include "tokenizer.h"

#include <stdint.h>

/* ==== result (calib_result.c) ============================================= */

struct dsq_calib_result {
    dsq_calib_tensor *e;
    size_t n, cap;
    int64_t *hash;              /* open addressing over e[], -1 empty */
    size_t hcap;
    void **blocks;              /* owned allocations (scales, names) */
    size_t nb, cb;
    char **fb_name, **fb_reason;
    size_t nfb, cfb;
    int n_layers;
    uint64_t **cov;             /* [layer] routed tokens per expert */
    int *cov_n;
    dsq_calib_totals tot;
    char *info;                 /* summary JSON pieces known up front */
    /* AWQ clip choices (one byte per 128 weights, ~5.2 GB at 671B) live in
     * an unlinked temporary file, mapped read-only once the run ends: the
     * pages are file-backed, so the kernel can drop them and RAM stays
     * bounded while the converter reads them tensor by tensor. */
    int clip_fd1;               /* file descriptor + 1 (0: none yet) */
    uint64_t clip_used;
    int64_t *clip_off;          /* [entry] byte offset in the file, -1 none */
    size_t clip_noff;
    uint8_t *clip_map;
    size_t clip_maplen;
    size_t *rb;                 /* --rollback: entry indices, most sensitive first */
    size_t nrb;
    size_t sens_missing;        /* quantized linears whose sensitivity is unknown */
};

/* A zeroed allocation (bytes 0: 1 byte) owned by the result, freed with it;
 * NULL when out of memory. */
void *dsq_calib_own(dsq_calib_result *r, size_t bytes);
/* s copied into the result's memory */
char *dsq_calib_own_str(dsq_calib_result *r, const char *s);
/* Find or create the entry of name; shapes must agree. */
int   dsq_calib_entry(dsq_calib_result *r, const char *name, int64_t rows, int64_t cols, dsq_calib_tensor **out,
                      dsq_diag *d);

/* ==== run context (calib.c) =============================================== */

typedef struct calib_run {
    const dsq_calib_opts *o;
    dsq_calib_result *r;
    dsq_model *m;
    const dsq_model_config *cfg;
    const dsq_scheme *scheme;     /* opts.scheme */
    int flavor;
    int moe_all;                  /* statistics came from every token through every expert */
    dsq_stats_writer *w;          /* fresh statistics go here (save_stats) */
    dsq_stats_reader *rd;         /* --stats */
    dsq_calib_progress_fn progress;
    void *pctx;
    const volatile int *cancel;
    double t0;
    int n_samples;
    /* the data the statistics came from (this run's, or the --stats file's) */
    char *data_file;
    int data_samples, data_seqlen;
    uint64_t data_seed;
    dsq_diag *d;
    dsq_gptq_hset hs;             /* --gptq: this layer's X^T X per non-expert site */
    dsq_gptq_moe moe;             /* --gptq: the layer's MoE input rows + routing */
} calib_run;

/* The int4 group-parameter search mode of calibration's quantizations
 * (calib.c explains the choice). */
int    dsq_calib_search_mode(const dsq_calib_opts *o, const dsq_scheme *sc);
/* Whole sequences kept for the attention block loss (calib.h awq_attn_seqs) */
int    dsq_calib_attn_seqs(const calib_run *c);
double dsq_calib_now(void);       /* monotonic seconds */
double dsq_calib_cpu_now(void);   /* process CPU seconds */
/* The progress callback, if any. */
void   dsq_calib_report(calib_run *c, int layer, int sample, const char *phase);
/* The scheme of linear l (NULL: float) and its group size. */
int    dsq_calib_target_of(calib_run *c, const dsq_linear *l, const dsq_scheme **sc, int32_t *gs);
/* dsq_search_opts target callback (ctx: the calib_run). */
int    dsq_calib_search_target(void *ctx, const char *t, int64_t rows, int64_t cols, const dsq_scheme **sc,
                               int32_t *gs);

/* ==== per-group decisions (calib_groups.c) ================================= */

/* M_FLEX: --smooth flex on int8-weight groups (static or dynamic W8A8).
 * M_SMOOTH_SEARCH: w4a8, both grids; M_SMOOTH_SEARCH_W8: w8a8-dynamic, the
 * SmoothQuant alpha grid only (int8 weights leave AWQ's salient-channel
 * scaling little to protect; the activation side is what smoothing fixes). */
enum { M_NONE = 0, M_AWQ = 1, M_SMOOTH_SEARCH = 2, M_SMOOTH_FIXED = 3, M_SMOOTH_SEARCH_W8 = 4, M_FLEX = 5 };

/* The method of group g (M_*), from its consumers' schemes and the options. */
int dsq_calib_group_method(calib_run *c, const dsq_scale_group *g, int *method);
/* Routed expert e saw too few tokens: round-to-nearest (calib.h min_expert_tokens). */
int dsq_calib_expert_fallback(const calib_run *c, const dsq_layer_stats *ls, int e);
/* Fold s into the result: producer rows absorb 1/s, consumers get s. */
int dsq_calib_apply_group(calib_run *c, const dsq_scale_group *g, const float *s);

/* ==== per-linear entries (calib_linear.c) ================================== */

typedef void (*lin_fn)(void *ctx, const dsq_linear *l);

/* fn on every linear of the layer: attention, router, dense / shared MLP,
 * then each routed expert's gate, up, down. */
void dsq_calib_each_linear(const dsq_layer *ly, int n_experts, lin_fn fn, void *ctx);

/* One GPTQ solve of a fresh run, queued while the layer's entries are made
 * (the scales, clip and importance it uses are final by then). */
typedef struct gjob {
    const dsq_linear *l;
    size_t ti;              /* its entry's index: entries made later in the layer may move r->e */
    dsq_calib_tensor *t;    /* &r->e[ti], set by dsq_calib_gptq_phase once the layer's entries are all made */
    const dsq_scheme *sc;
    dsq_qshape sh;
    uint8_t *blob;          /* owned by the result */
    size_t bs;
    const char *name;       /* its statistics-file entry */
    const char *site;       /* its input site */
    int done, rtn;          /* solved (blob valid); factorization fell back to RTN */
} gjob;

typedef struct lin_ctx {
    calib_run *c;
    const dsq_layer_stats *ls;
    const dsq_layer *ly;
    float *dmin, *dmax;     /* union of calibrated expert down ranges (w8a8 fallback) */
    uint8_t *fb_done;       /* [n_experts] fallback already listed */
    int fresh;              /* token samples available: check clipping on outputs */
    uint8_t *clipv;         /* per linear in dsq_calib_each_linear order: 0/1 clip decision, 255 n/a */
    size_t nclip, capclip;
    uint8_t decision;       /* of the linear being processed */
    const uint8_t *clip_in; /* decisions read back (statistics file), or NULL */
    size_t nclip_in;
    gjob *jobs;             /* --gptq, fresh: the layer's solves (dsq_calib_gptq_phase) */
    size_t njobs, capjobs;
    int rc;
} lin_ctx;

/* dsq_calib_each_linear callback: the linear's entry (lin_ctx; x->rc). */
void dsq_calib_lin_cb(void *ctx, const dsq_linear *l);
/* A GPTQ blob (solved or read back) becomes the tensor's. */
int  dsq_calib_gptq_keep(calib_run *c, dsq_calib_tensor *t, const dsq_scheme *sc, const dsq_qshape *sh,
                         uint8_t *blob, size_t bs);
/* An optional statistics entry of this run (--stats file or checkpoint):
 * its error goes to *tmp, so an absent one (DSQ_ERR_NOT_FOUND) is no error. */
int  dsq_calib_stats_try(calib_run *c, const char *name, void **buf, size_t *n, dsq_diag *tmp);
/* End of the run: map the clip file and point the entries into it. */
int  dsq_calib_clip_map(calib_run *c);

/* ==== the GPTQ phase (calib_gptq.c) ======================================== */

/* Solve the layer's queued jobs (x->jobs), checkpoint and keep them. */
int dsq_calib_gptq_phase(lin_ctx *x);

/* ==== rollback (calib_rollback.c) ========================================== */

/* dsq_calib_each_linear callback: the linear's sensitivity (lin_ctx; x->rc). */
void dsq_calib_sens_cb(void *ctx, const dsq_linear *l);
/* Mark the o->rollback most sensitive served modules' entries rolled back. */
int  dsq_calib_pick_rollback(calib_run *c);

/* ==== one layer (calib_layer.c) ============================================ */

/* Decide and fold every group of a loaded layer, then its entries; fresh:
 * ls has token samples and the searches run, else results are read back. */
int dsq_calib_do_layer(calib_run *c, int layer, const dsq_layer_stats *ls, int fresh);

/* ==== checkpoint (calib_checkpoint.c) ====================================== */

/* The layer's site statistics and expert counts into the writer. */
int   dsq_calib_write_layer_stats(calib_run *c, const dsq_layer_stats *ls);
/* A required statistics entry (the --stats file, else the checkpoint). */
int   dsq_calib_src_get(calib_run *c, const char *name, void **buf, size_t *n);
/* Routed experts of layer (0: dense). */
int   dsq_calib_n_experts(const calib_run *c, int layer);
/* A layer whose statistics come from a file (--stats or the checkpoint). */
int   dsq_calib_layer_from_file(calib_run *c, int layer);
/* The checkpoint's fingerprint (hex, 65 bytes): model config, data tokens
 * and every option that changes the statistics. */
int   dsq_calib_stats_fingerprint(calib_run *c, const dsq_calib_data *cd, char *out);
/* The statistics file's metadata JSON (caller frees; NULL: out of memory). */
char *dsq_calib_stats_meta(calib_run *c, const dsq_calib_data *cd);
/* --stats: the file must describe this model. */
int   dsq_calib_check_stats_meta(calib_run *c);
/* The open statistics file (c->rd) is this run's own finished checkpoint:
 * its recorded fingerprint must equal this run's (data cd and options),
 * else DSQ_ERR_STATE; a file without one is refused too. */
int   dsq_calib_check_own_stats(calib_run *c, const dsq_calib_data *cd);

#endif
