/* export_internal.h - the export format table and the state the per-format
 * files (export_ascend.c, export_awq.c, export_ct.c) share with export.c.
 * Not a public API. */
#ifndef DSQ_EXPORT_INTERNAL_H
#define DSQ_EXPORT_INTERNAL_H

#include "dsq_dpw.h"
#include "export.h"

#include <json-c/json.h>

/* How a target tensor's bytes are made from its source blob. */
enum dsq_xkind {
    XK_FLOAT = 0,        /* deq(blob) as the target float dtype */
    XK_I8,               /* int8 codes [N, K] (w8 schemes) */
    XK_I8_FROM_I4,       /* int4 codes, one per int8 byte [N, K] (ct w4a8) */
    XK_SCALE,            /* scales [N, groups] in the target dtype */
    XK_ZEROS_F32,        /* float32 zeros [N, 1] */
    XK_INPUT_SCALE,      /* [1] f32 act_scale */
    XK_INPUT_OFFSET,     /* [1] f32 act_offset */
    XK_DEQ_SCALE,        /* [N] f32 or i64 (f32 bits) act_scale * s_w */
    XK_QUANT_BIAS,       /* [N] i32 -act_offset * rowsum */
    XK_ASC_W4,           /* int8 [N/2, K], int4 pairs along N */
    XK_ASC_SCALE_BIAS,   /* f32 [N, 1] or [N, 16] */
    XK_AWQ_QWEIGHT,      /* i32 [K, N/8] AWQ order */
    XK_AWQ_QZEROS,       /* i32 [K/G, N/8] */
    XK_AWQ_SCALES,       /* f16 [K/G, N] */
    XK_CT_PACKED,        /* i32 [N, K/8] sequential, q + 8 */
    XK_CT_ZP,            /* i32 [ceil(N/8), K/G], packed along N */
    XK_CT_SHAPE          /* i64 [2] = [N, K] */
};

typedef struct dsq_xtensor {
    char *name;
    enum dsq_dtype dtype;
    int ndim;
    int64_t shape[8];
    uint64_t nbytes;
    enum dsq_xkind kind;
    const char *desc;    /* ascend description type, or NULL */
    size_t src;          /* source tensor index */
    int shard;
    uint64_t off;        /* offset in the shard's byte buffer */
} dsq_xtensor;

/* Per source tensor decision, filled by the format's plan function. */
typedef struct dsq_xsrc {
    int drop;            /* not exported (MTP for awq / ct) */
    int dequant;         /* quantized in the .dsq, exported float */
    int quantized;       /* exported as a quantized linear */
    const char *type;    /* ascend type of its entries / ct scheme label */
    size_t first, count; /* its target tensors */
} dsq_xsrc;

typedef struct dsq_export_format dsq_export_format;

struct dsq_export {
    const dsq_export_format *f;
    dsq_export_opts o;
    const dsq_export_src *src;
    size_t nsrc;
    dsq_xsrc *xs;
    dsq_xtensor *xt;
    size_t nxt, capxt;
    enum dsq_dtype model_dtype;   /* config torch_dtype (BF16 default) */
    json_object *meta;            /* parsed metadata */
    int32_t awq_group;            /* AWQ/ct int4 group size in use (-2 unset) */
    int nshards;
    char *dir;                    /* final */
    char *tmpdir;                 /* partial */
    size_t resume_from;
    int committed;
    /* current shard */
    int cur;
    int fd;
    dsq_dpw dpw;                  /* fd's writes, past the page cache */
    uint64_t data_start;
    size_t next;                  /* next source index expected */
    /* static W8A8 fused pairs: first member's params by pair key */
    char **pair_key;
    float *pair_scale;
    int32_t *pair_off;
    size_t npair;
    dsq_export_summary sum;
    float *fbuf;                  /* dequantize scratch */
    size_t fcap;
};

/* One format (one table row). */
struct dsq_export_format {
    const char *name;
    const char *weights_base;     /* "model" / "quant_model_weights" */
    uint64_t default_shard;       /* bytes */
    /* Decide source tensor i: fill ex->xs[i] and add its target tensors with
     * dsq_x_add. DSQ_ERR_UNSUPPORTED (naming the tensor) refuses. */
    int (*plan)(dsq_export *ex, size_t i, dsq_diag *d);
    /* Whole-model checks after planning (fused pairs, group sizes, ...). */
    int (*check)(dsq_export *ex, dsq_diag *d);
    /* Edit config.json (a copy owned by the caller). */
    int (*config)(dsq_export *ex, json_object *cfg, dsq_diag *d);
    /* Extra files (description), written into tmpdir. May be NULL. */
    int (*extra)(dsq_export *ex, dsq_diag *d);
};

extern const dsq_export_format dsq_xfmt_ascend;
extern const dsq_export_format dsq_xfmt_awq;
extern const dsq_export_format dsq_xfmt_ct;

/* Add a target tensor "<base><suffix>" for source i. */
int dsq_x_add(dsq_export *ex, size_t i, const char *base, const char *suffix,
              enum dsq_dtype dt, int ndim, const int64_t *shape, enum dsq_xkind kind,
              const char *desc, dsq_diag *d);
/* Float entry (dequantized if the blob is quantized) in dtype dt. */
int dsq_x_add_float(dsq_export *ex, size_t i, enum dsq_dtype dt, dsq_diag *d);
/* Float dtype a float tensor keeps: its source type, FP8 -> BF16, F64 -> F32. */
enum dsq_dtype dsq_x_keep_dtype(const dsq_export_src *s);
/* "model.layers.3.mlp.experts.0.gate_proj" from "...gate_proj.weight"
 * (malloc'd), NULL when the name does not end in ".weight". */
char *dsq_x_module(const char *name);
/* 1 when the source is a linear weight in a decoder layer (the roles a
 * recipe quantizes). */
int dsq_x_is_linear(const dsq_export_src *s);
/* Fused partner of a module ("q_a_proj" <-> "kv_a_proj_with_mqa",
 * "gate_proj" <-> "up_proj"): index of the partner's weight, or -1. */
long dsq_x_partner(const dsq_export *ex, size_t i);
/* Every routed expert of a layer (MTP and dropped ones aside) exported
 * alike: all float or all quantized with one type and group size. vLLM
 * builds one FusedMoE per layer with one quant method (awq_marlin.py,
 * compressed_tensors_moe.py), so a mixed layer does not load. engine names
 * the loader in the message. */
int dsq_x_check_experts(const dsq_export *ex, const char *engine, dsq_diag *d);
/* Serialize a json object into tmpdir/name (atomic). */
int dsq_x_write_json(dsq_export *ex, const char *name, json_object *o, int pretty, dsq_diag *d);

#endif
