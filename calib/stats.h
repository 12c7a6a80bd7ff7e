/* stats.h - activation statistics of every linear's input, collected layer
 * by layer over the engine's per-layer forward.
 *
 * A "site" is one linear input. Linears that read the same tensor share a
 * site, named after the first of them: q/k/v -> q_proj; kv_a_proj_with_mqa
 * -> q_a_proj (or q_proj without q_lora_rank); up_proj -> gate_proj of the
 * same MLP/expert; the router (mlp.gate) and the shared experts' gate/up all
 * read post_attention_layernorm's output -> the router's site "mlp.gate.weight".
 * dsq_calib_site_of() gives the site of any linear name.
 *
 * Per site and input channel j, over the rows (tokens) the linear saw:
 *   absmax_j = max |x_j|          (SmoothQuant act scale)
 *   sum_abs_j = sum |x_j|         (AWQ x_mean = sum_abs / count)
 *   sum_sq_j  = sum x_j^2         (RMS: clip-search importance; diag of X^T X)
 *   min_j, max_j                  (static activation ranges, w8a8)
 * plus count (rows) and, optionally, a token subsample: a reservoir of up to
 * sample_cap rows (Vitter's algorithm R with a splitmix64 stream seeded by
 * (seed, layer, site name)), used by the AWQ / smoothing searches to measure
 * the output error of candidate scales. Sums are double and rows are added in
 * token order, so the statistics do not depend on the thread count.
 *
 * MoE: an expert's sites see only the tokens routed to it (the hook gets
 * token_index); expert_tokens[e] counts them. With DSQ_LAYER_ALL_EXPERTS every
 * expert sees every token (statistics only; the layer output still follows the
 * router) and the routed counts are recomputed from the router's input, so the
 * coverage report stays meaningful.
 *
 * Non-finite activations are an error (DSQ_ERR_NONFINITE naming the linear):
 * statistics never hold NaN or Inf. */
#ifndef DSQ_STATS_H
#define DSQ_STATS_H

#include "dsq_error.h"
#include "dsq_sha256.h"
#include "model.h"

#include <stddef.h>
#include <stdint.h>

/* ---- one site -------------------------------------------------------- */

typedef struct dsq_act_stats {
    char *name;          /* site name (HF weight name of the first reader) */
    int64_t in;          /* channels */
    uint64_t count;      /* rows accumulated */
    float *absmax;       /* [in] */
    float *vmin, *vmax;  /* [in]; +-FLT_MAX-free: 0 when count == 0 */
    double *sum_abs;     /* [in] */
    double *sum_sq;      /* [in] */
    /* optional X^T X blocks (AWQ clip search, never saved): for each run of
     * DSQ_COV_BLOCK input columns b, cov[b][i][k] = sum over rows of
     * x[128b + i] x[128b + k] (row stride DSQ_COV_BLOCK, the last block
     * narrower when in % 128 != 0). NULL unless dsq_act_stats_enable_cov. */
    double *cov;
    /* token subsample (never saved) */
    float *sample;       /* [sample_cap][in] */
    int sample_cap, sample_n;
    uint64_t rng;
    /* whole sequences (never saved): the AWQ attention-input group is scored
     * on the attention block's output, which needs every token's context,
     * not a reservoir of rows. The first seq_cap sequences the site saw
     * (in sample order, so deterministic), each its first seq_len rows
     * (a causal prefix is a valid sequence), positions 0.. */
    float *seqs;         /* [seq_cap][seq_len][in] */
    int seq_cap, seq_n, seq_len;
} dsq_act_stats;

int  dsq_act_stats_init(dsq_act_stats *s, const char *name, int64_t in, int sample_cap, uint64_t seed);
void dsq_act_stats_release(dsq_act_stats *s);
/* Start accumulating the X^T X blocks (before the first add; in x 128
 * doubles). */
#define DSQ_COV_BLOCK 128
int  dsq_act_stats_enable_cov(dsq_act_stats *s);
/* Add T rows of x ([T][in]). pool may be NULL. Returns DSQ_ERR_NONFINITE
 * (nothing added) when x holds NaN/Inf; *bad (may be NULL) gets its index. */
int  dsq_act_stats_add(dsq_act_stats *s, const float *x, int64_t T, dsq_pool *pool, int64_t *bad);
/* Keep x ([T][in], one whole sequence from position 0) as the next of at
 * most cap sequences, its first min(T, max_len) rows (max_len 0: all); the
 * first sequence fixes seq_len, later shorter ones are skipped. */
int  dsq_act_stats_keep_seq(dsq_act_stats *s, const float *x, int64_t T, int cap, int max_len);
/* dst += src (same in). Reservoirs are not merged (dst keeps its own). */
int  dsq_act_stats_merge(dsq_act_stats *dst, const dsq_act_stats *src);
/* Per-channel derived values; 0 for a site that saw nothing. */
static inline double dsq_act_stats_mean_abs(const dsq_act_stats *s, int64_t j)
{
    return s->count ? s->sum_abs[j] / (double)s->count : 0.0;
}
double dsq_act_stats_rms(const dsq_act_stats *s, int64_t j);

/* ---- one layer ------------------------------------------------------- */

typedef struct dsq_layer_stats {
    int layer;
    dsq_act_stats *sites;
    int nsites, cap;
    int *hash;             /* open addressing over site names, -1 = empty */
    int hcap;
    int n_experts;         /* routed experts (0 for dense layers) */
    uint64_t *expert_tokens; /* [n_experts] tokens the router sent to each */
    uint64_t tokens;       /* tokens through the layer */
} dsq_layer_stats;

int  dsq_layer_stats_init(dsq_layer_stats *ls, int layer, int n_experts);
void dsq_layer_stats_release(dsq_layer_stats *ls);
/* Find a site (NULL if absent) / find or create one. */
dsq_act_stats *dsq_layer_stats_find(const dsq_layer_stats *ls, const char *site);
int  dsq_layer_stats_get(dsq_layer_stats *ls, const char *site, int64_t in, int sample_cap, uint64_t seed,
                         dsq_act_stats **out);
/* dst += src: sites by name (created in dst when missing), expert counts. */
int  dsq_layer_stats_merge(dsq_layer_stats *dst, const dsq_layer_stats *src);

/* Site of a linear weight name (see top) into buf; q_lora: config
 * q_lora_rank > 0. Returns buf. */
const char *dsq_calib_site_of(const char *linear, int q_lora, char *buf, size_t n);
/* Routed expert index in a name ("...mlp.experts.17.up_proj.weight" -> 17),
 * or -1. */
int dsq_calib_expert_of(const char *name);

/* ---- hidden states between layers ------------------------------------ */

/* All samples' hidden states [n][T][hidden] between two layers. RAM when
 * they fit ram_limit and no spill base is given; otherwise two files
 * "<spill_base>.h0" / ".h1" (read from one, write the other, swap per layer),
 * so a crash mid-layer never leaves a half-updated state and a checkpoint can
 * name the file holding a complete layer output. */
typedef struct dsq_hstore dsq_hstore;

/* spill_base NULL: RAM if it fits, else unlinked temporary files in $TMPDIR.
 * keep: spill files survive dsq_hstore_free (checkpoints). */
int  dsq_hstore_open(dsq_hstore **h, int n, int T, int64_t hidden, uint64_t ram_limit, const char *spill_base,
                     int keep, dsq_diag *d);
void dsq_hstore_free(dsq_hstore *h, int remove_files);
int  dsq_hstore_is_file(const dsq_hstore *h);
int  dsq_hstore_current(const dsq_hstore *h);     /* file index holding the input (0/1) */
void dsq_hstore_shape(const dsq_hstore *h, int *n, int *T);
/* Working buffer holding sample i of the current state ([T][hidden]); valid
 * until the next get. */
int  dsq_hstore_get(dsq_hstore *h, int i, float **buf, dsq_diag *d);
/* Store the buffer from get as sample i of the next state. */
int  dsq_hstore_put(dsq_hstore *h, int i, const float *buf, dsq_diag *d);
/* The next state becomes current: fsync it (files). */
int  dsq_hstore_swap(dsq_hstore *h, dsq_diag *d);
/* Resume: make file idx current after checking its SHA-256. */
int  dsq_hstore_adopt(dsq_hstore *h, int idx, const uint8_t sha[DSQ_SHA256_LEN], dsq_diag *d);

/* ---- collection ------------------------------------------------------- */

typedef struct dsq_collect_opts {
    int sample_cap_dense;   /* reservoir rows for non-expert sites (0: none) */
    int sample_cap_expert;  /* reservoir rows for routed-expert sites */
    uint64_t seed;
    unsigned layer_flags;   /* enum dsq_layer_flags (DSQ_LAYER_ALL_EXPERTS) */
    const volatile int *cancel;
    void (*on_sample)(void *ctx, int layer, int sample);
    void *ctx;
    /* optional: also called with every site's input rows, after the
     * statistics took them (GPTQ Hessians, calib/gptq.h); nonzero stops */
    int (*tap)(void *tap_ctx, const char *site, const float *x, int64_t T, int64_t in,
               const int32_t *token_index);
    void *tap_ctx;
    int cov;                /* accumulate X^T X blocks at every site (AWQ clip search) */
    /* keep the first attn_seqs sequences (attn_seq_len rows each, 0: all) of
     * the attention input site (q_a_proj / q_proj) for the attention block
     * loss (awq.h); V3 at 4 x 512: 4 x 512 x 7168 x 4 B = 59 MB a layer */
    int attn_seqs, attn_seq_len;
} dsq_collect_opts;

/* Run layer `layer` on every sample of h (current state), collecting into ls
 * (initialised by the caller); with write_next the outputs become the next
 * state and *sha (may be NULL) receives the SHA-256 of all outputs in sample
 * order; without it the state is left as it was (statistics only, e.g. a
 * second collection of the same layer with other caps). The layer is loaded
 * (dsq_model_layer_load) before the first sample and stays loaded: the
 * caller releases it after using its weights. */
int dsq_collect_layer(dsq_model *m, int layer, dsq_hstore *h, int write_next, const dsq_collect_opts *o,
                      dsq_layer_stats *ls, uint8_t sha[DSQ_SHA256_LEN], dsq_diag *d);

#endif
