/* awq_int.h - internals shared by the scale search (awq.c) and the
 * attention block loss (awq_attn.c); not part of the library's interface. */
#ifndef DSQ_AWQ_INT_H
#define DSQ_AWQ_INT_H

#include "awq.h"

/* A consumer of a scaling group with its target scheme. */
typedef struct dsq_awq_cons {
    const dsq_linear *l;
    const dsq_scheme *sc;        /* NULL: float (exact under any s) */
    dsq_qshape shape;
    size_t blob_size;
    const dsq_act_stats *site;   /* for static activation ranges */
    int range_search;            /* dsq_qparams.range_search of the candidates */
} dsq_awq_cons;

/* W [out][in] as float32 (caller frees), NULL when out of memory. */
float *dsq_awq_deq_f32(const dsq_linear *l, dsq_pool *pool);
/* y [T][rows] = x [T][cols] * W^T for float W */
void   dsq_awq_sgemm_nt(const float *x, int64_t T, const float *w, int64_t rows, int64_t cols, float *y);
/* The consumer's output for candidate s (NULL = 1): quantize W s with its
 * scheme into blob (blob_size bytes), run the scheme's gemm on xs = x / s. */
int    dsq_awq_run_quant(const dsq_awq_cons *c, const float *w, const float *s, const float *xs, int64_t T,
                         uint8_t *blob, float *y, dsq_pool *pool, dsq_diag *d);
/* sum of squared differences */
double dsq_awq_sqdiff(const float *a, const float *b, size_t n);

/* loss[c] += the attention block's squared output error for candidate c
 * (awq.h ATTN) over site's kept sequences; cs: the group's two consumers. */
int    dsq_awq_attn_losses(const dsq_scale_group *g, const dsq_act_stats *site, dsq_awq_cons *cs,
                           const dsq_search_opts *o, float *const *cand, int C, double *loss, double *elems,
                           int64_t *rows, dsq_diag *d);

#endif
