/* xfmt.h - serving export formats: one module per format behind one table.
 *
 * A serving format (AscendV1 for vllm-ascend / MindIE, AutoAWQ GEMM and
 * compressed-tensors for vLLM) is one file, xfmt_<name>.c, holding all the
 * format knows, and one row of the table (xfmt.c):
 *   detect  parse its description (quant_model_description.json or
 *           config.json quantization_config) into a dsq_export_info;
 *   spec    how one linear module of such a directory is stored;
 *   plan    which target tensors (name, dtype, shape, packing) a source
 *           tensor becomes, or a refusal naming it;
 *   pack    the bytes of a target tensor from a dsq scheme blob;
 *   unpack  a stored linear back into a dsq scheme blob (codes copied,
 *           never re-quantized);
 *   config  the quantization_config written into config.json, and any
 *           description file of its own.
 * The contracts are docs/serving-exports.md, sections "## AscendV1",
 * "## AutoAWQ GEMM" and "## compressed-tensors".
 *
 * Who uses it: convert/export.c (files, shards, resume, SHA256SUMS) drives
 * plan / pack / config; engine/export_read.c asks the table to unpack; the
 * detection runs wherever a model directory is opened. A new format is a new
 * file and a new table row. A model's new tensors need nothing when they
 * arrive float (everything not planned as a quantized linear is written
 * float, and described so); a linear the target's loader runs unquantized
 * whatever the recipe chose is one entry of that format's keep_float.
 *
 * Input is hostile on the read side: every JSON type, tensor dtype, shape
 * and value range is checked, errors name the file and the tensor. */
#ifndef DSQ_XFMT_H
#define DSQ_XFMT_H

#include "container.h"
#include "dsq_error.h"
#include "dtype.h"
#include "safetensors.h"
#include "scheme.h"

#include <stddef.h>
#include <stdint.h>

/* ================= reading: detection and per-module storage ================= */

enum dsq_export_kind {
    DSQ_EXPORT_NONE   = 0,
    DSQ_EXPORT_ASCEND = 1,   /* serving-exports.md "## AscendV1" */
    DSQ_EXPORT_AWQ    = 2,   /* "## AutoAWQ GEMM" */
    DSQ_EXPORT_CT     = 3    /* "## compressed-tensors" */
};

/* How one linear module is stored. */
enum dsq_export_qtype {
    DSQ_EQ_FLOAT = 0,        /* plain "<m>.weight" (F32/F16/BF16) */
    DSQ_EQ_ASCEND_W8A8_DYNAMIC,
    DSQ_EQ_ASCEND_W8A8,      /* static, per-tensor asymmetric activations */
    DSQ_EQ_ASCEND_W4A8_DYNAMIC,
    DSQ_EQ_AWQ_GEMM,
    DSQ_EQ_CT_PACK,          /* compressed-tensors pack-quantized (int4 weight only) */
    DSQ_EQ_CT_INT            /* compressed-tensors int-quantized (int8 / int4-in-int8) */
};

typedef struct dsq_export_spec {
    enum dsq_export_qtype type;
    int bits;                /* CT: 4 or 8 */
    int group_size;          /* 0 = per output channel (AWQ: the run's G) */
    int symmetric;           /* CT */
    int act_dynamic;         /* CT int-quantized: per-token dynamic activations */
    int float_if_absent;     /* AWQ with an empty modules_to_not_convert: newer vLLM
                                infers float modules from the checkpoint's dtypes,
                                so a plain float weight is allowed */
    const char *src;         /* where the decision came from, for messages */
} dsq_export_spec;

typedef struct dsq_export_info dsq_export_info;  /* opaque */

#define DSQ_EXPORT_ASCEND_DESC "quant_model_description.json"

/* Inspect dir. A directory is an export when it holds a format's description
 * file (AscendV1: quant_model_description.json) or config.json's
 * quantization_config.quant_method names a format ("awq",
 * "compressed-tensors"). Anything else (no description, another
 * quant_method such as DeepSeek's "fp8") is a plain checkpoint: *out = NULL
 * and DSQ_OK. Malformed descriptions: DSQ_ERR_JSON / DSQ_ERR_FORMAT /
 * DSQ_ERR_UNSUPPORTED naming the file and the key. */
int  dsq_export_detect(const char *dir, dsq_export_info **out, dsq_diag *d);
/* Same from JSON texts already in memory (tests, fuzzing). desc may be NULL
 * (not ascend); config may be NULL. name_desc/name_cfg appear in messages. */
int  dsq_export_parse(const char *desc, size_t desc_len, const char *name_desc,
                      const char *config, size_t config_len, const char *name_cfg,
                      dsq_export_info **out, dsq_diag *d);
void dsq_export_info_free(dsq_export_info *x);

enum dsq_export_kind dsq_export_kind_of(const dsq_export_info *x);
const char *dsq_export_kind_name(enum dsq_export_kind k);
/* The file the description came from (for messages). */
const char *dsq_export_desc_file(const dsq_export_info *x);

/* Storage of linear module `module` (no ".weight" suffix). Embeddings,
 * lm_head and the MoE router (mlp.gate) are float in every target loader.
 * Ascend: the "<module>.weight" description entry is REQUIRED (vllm-ascend
 * raises KeyError without it); a missing entry or an unknown type is
 * DSQ_ERR_FORMAT / DSQ_ERR_UNSUPPORTED naming it. */
int  dsq_export_spec_of(const dsq_export_info *x, const char *module, dsq_export_spec *spec,
                        dsq_diag *d);

/* Ascend: the description type of a tensor name, or NULL. */
const char *dsq_export_ascend_type(const dsq_export_info *x, const char *tensor);
/* config.json's torch_dtype ("bfloat16", ...; "" when absent or unread). */
const char *dsq_export_torch_dtype(const dsq_export_info *x);

/* Read linear `module` ("model.layers.0.self_attn.o_proj") of shape
 * [rows = out_features, cols = in_features] through its format's unpacker.
 * Returns 1 with *blob (dsq_aligned_alloc'd, caller frees) of *blob_size
 * bytes when it is quantized; *bias is set (malloc'd, caller frees) only
 * when a bias is folded into the stored tensors (Ascend W8A8 quant_bias) and
 * is nonzero. Returns 0 when the module is stored as float (the caller reads
 * "<module>.weight" as for any checkpoint). Negative dsq_status on a
 * contract violation. */
int dsq_xfmt_unpack_linear(const dsq_export_info *x, const dsq_st_model *st, const char *module,
                           int64_t rows, int64_t cols, uint8_t **blob, size_t *blob_size,
                           float **bias, dsq_diag *d);
/* Shape of a quantized linear from its stored tensors. 1 and rows/cols when
 * module is quantized, 0 when float, negative on error. */
int dsq_xfmt_linear_shape(const dsq_export_info *x, const dsq_st_model *st, const char *module,
                          int64_t *rows, int64_t *cols, dsq_diag *d);
/* 1 (and the module name in buf) when tensor t is the primary tensor of a
 * quantized linear of this export ("<m>.weight" of an int8 linear,
 * "<m>.qweight", "<m>.weight_packed"); else 0. */
int dsq_xfmt_module_of(const dsq_export_info *x, const dsq_st_tensor *t, char *buf, size_t n);

/* ================= writing: the plan ================= */

/* One source tensor (as planned / as stored in a .dsq). */
typedef struct dsq_export_src {
    const char *name;           /* borrowed */
    dsq_role_info role;
    const dsq_scheme *scheme;
    enum dsq_dtype src_dtype;   /* source float type (DSQ_DTYPE_INVALID: unknown) */
    int ndim;
    int64_t shape[8];
    dsq_qshape qshape;          /* rows x cols view + group size of the blob */
} dsq_export_src;

/* How a target tensor's bytes are made from its source blob: the kinds every
 * format shares; a format's own packings are numbered from XK_FORMAT on and
 * made by its pack function. */
enum dsq_xkind {
    XK_FLOAT = 0,        /* deq(blob) as the target float dtype */
    XK_I8,               /* int8 codes [N, K] (w8 schemes) */
    XK_SCALE,            /* scales [N, groups] in the target dtype */
    XK_ZEROS_F32,        /* float32 zeros [N, 1] */
    XK_FORMAT = 16       /* first kind of a format's own */
};

typedef struct dsq_xtensor {
    char *name;
    enum dsq_dtype dtype;
    int ndim;
    int64_t shape[8];
    uint64_t nbytes;
    int kind;            /* enum dsq_xkind or a format's own */
    const char *desc;    /* ascend description type, or NULL */
    size_t src;          /* source tensor index */
    int shard;           /* placement, filled by the writer */
    uint64_t off;        /* offset in the shard's data section */
} dsq_xtensor;

/* Per source tensor decision, filled by the format's plan function. */
typedef struct dsq_xsrc {
    int drop;            /* not exported (MTP for awq / ct) */
    int dequant;         /* quantized in the .dsq, exported float */
    int quantized;       /* exported as a quantized linear */
    int from_source;     /* quantized in the .dsq but held float by the target
                            (keep_float): written from the source weight where
                            the writer has it, else dequantized */
    const char *type;    /* ascend type of its entries / ct scheme label */
    enum dsq_dtype scale_dtype; /* dtype its scales are stored in (quantized) */
    size_t first, count; /* its target tensors */
} dsq_xsrc;

typedef struct dsq_xfmt dsq_xfmt;

/* The plan of one export: the format's decisions for every source tensor. */
typedef struct dsq_xplan {
    const dsq_xfmt *f;
    const dsq_export_src *src;
    size_t nsrc;
    dsq_xsrc *xs;
    dsq_xtensor *xt;
    size_t nxt, capxt;
    enum dsq_dtype model_dtype;   /* config torch_dtype (BF16 default) */
    struct json_object *meta;     /* parsed model metadata (borrowed) */
    int32_t awq_group;            /* AWQ int4 group size in use (-2 unset) */
    size_t dequantized, dropped;
    double max_scale_rel_rounding; /* worst |s16 - s|/s over F16/BF16 scales */
    /* static W8A8 fused pairs: first member's params by pair key */
    char **pair_key;
    float *pair_scale;
    int32_t *pair_off;
    size_t npair;
    float *fbuf;                  /* dequantize scratch */
    size_t fcap;
} dsq_xplan;

/* Reader of one storage type: the tensor that marks the module as stored so,
 * and the unpacker filling a blob. */
struct dsq_xrd;
struct dsq_xqb;
typedef struct dsq_xreader {
    enum dsq_export_qtype type;
    const char *primary;          /* tensor suffix marking the linear as stored so */
    int (*unpack)(const struct dsq_xrd *r, struct dsq_xqb *b, float **bias);
    /* [out, in] from the primary tensor (a 2-d matrix); NULL: its own shape */
    void (*shape)(const dsq_st_model *st, const char *module, const dsq_st_tensor *primary,
                  int64_t *rows, int64_t *cols);
} dsq_xreader;

/* One format (one table row). */
struct dsq_xfmt {
    const char *name;             /* --format value */
    enum dsq_export_kind kind;
    const char *weights_base;     /* "model" / "quant_model_weights" */
    uint64_t default_shard;       /* bytes */
    const uint32_t *schemes;      /* scheme ids a quantized linear may have, 0xFFFFFFFF-terminated */
    /* ---- detection ---- */
    const char *desc_file;        /* its own description file, or NULL */
    const char *quant_method;     /* config.json quantization_config.quant_method, or NULL */
    /* Parse the description: root is the description file's JSON (desc_file)
     * or config.json's quantization_config object. */
    int (*parse)(dsq_export_info *x, struct json_object *root, dsq_diag *d);
    int (*spec_of)(const dsq_export_info *x, const char *module, dsq_export_spec *spec, dsq_diag *d);
    const dsq_xreader *readers;   /* terminated by a NULL unpack */
    /* ---- writing ---- */
    /* Name suffixes of linears the target's loader holds in float whatever
     * the recipe chose (NULL-terminated, or NULL): one entry per module a
     * model adds that the target runs unquantized. */
    const char *const *keep_float;
    /* Decide source tensor i: fill p->xs[i] and add its target tensors with
     * dsq_x_add. DSQ_ERR_UNSUPPORTED (naming the tensor) refuses. */
    int (*plan)(dsq_xplan *p, size_t i, dsq_diag *d);
    /* Whole-model checks after planning (fused pairs, group sizes, ...). */
    int (*check)(dsq_xplan *p, dsq_diag *d);
    /* Bytes of a target tensor of one of the format's own kinds (rows of v). */
    int (*pack)(dsq_xplan *p, const dsq_xtensor *x, const dsq_qview *v, uint8_t *dst, dsq_diag *d);
    /* 1 when a kind of its own is row-local (may be packed from row pieces). */
    int (*row_local)(int kind);
    /* Edit config.json (a copy owned by the caller). */
    int (*config)(dsq_xplan *p, struct json_object *cfg, dsq_diag *d);
    /* Its own description file: *name and a new object, or *out NULL. */
    int (*describe)(const dsq_xplan *p, const char **name, struct json_object **out, dsq_diag *d);
};

/* The table, NULL-terminated, and look-ups. */
const dsq_xfmt *const *dsq_xfmt_table(void);
const dsq_xfmt *dsq_xfmt_find(const char *name);
const dsq_xfmt *dsq_xfmt_of_kind(enum dsq_export_kind k);

/* Plan every source tensor with format f (meta: the .dsq metadata object,
 * borrowed). On failure the plan holds what was planned; free it with
 * dsq_xplan_free either way. */
int  dsq_xplan_make(dsq_xplan *p, const dsq_xfmt *f, const dsq_export_src *src, size_t n,
                    struct json_object *meta, dsq_diag *d);
void dsq_xplan_free(dsq_xplan *p);
/* Bytes of target tensor x from the view v of its source blob (v may hold a
 * row piece of a row-local tensor: then dst gets those rows). */
int  dsq_xplan_pack(dsq_xplan *p, const dsq_xtensor *x, const dsq_qview *v, uint8_t *dst, dsq_diag *d);
/* 1 when every target tensor of source i is row-local. */
int  dsq_xplan_rowwise(const dsq_xplan *p, size_t i);

/* ---- helpers for the format files ---- */

/* Add a target tensor "<base><suffix>" for source i. */
int dsq_x_add(dsq_xplan *p, size_t i, const char *base, const char *suffix,
              enum dsq_dtype dt, int ndim, const int64_t *shape, int kind,
              const char *desc, dsq_diag *d);
/* Float entry (dequantized if the blob is quantized) in dtype dt. */
int dsq_x_add_float(dsq_xplan *p, size_t i, enum dsq_dtype dt, dsq_diag *d);
/* Float dtype a float tensor keeps: its source type, FP8 -> BF16, F64 -> F32. */
enum dsq_dtype dsq_x_keep_dtype(const dsq_export_src *s);
/* "model.layers.3.mlp.experts.0.gate_proj" from "...gate_proj.weight"
 * (malloc'd), NULL when the name does not end in ".weight". */
char *dsq_x_module(const char *name);
/* 1 when the format's loader holds source i in float (keep_float). */
int dsq_x_target_float(const dsq_xplan *p, size_t i);
/* 1 when the source is a linear weight in a decoder layer (the roles a
 * recipe quantizes). */
int dsq_x_is_linear(const dsq_export_src *s);
/* 1 for the V3.2 indexer linears every target loads unquantized (wk,
 * weights_proj). */
int dsq_x_indexer_float_only(const char *name);
/* The refusal of a quantized indexer_float_only linear (DSQ_ERR_UNSUPPORTED,
 * naming the tensor), for the targets that cannot hold one. */
int dsq_x_refuse_quantized_indexer(const dsq_export_src *s, dsq_diag *d);
int dsq_x_ends_with(const char *s, const char *suf);
/* Fused partner of a module ("q_a_proj" <-> "kv_a_proj_with_mqa",
 * "gate_proj" <-> "up_proj"): index of the partner's weight, or -1. */
long dsq_x_partner(const dsq_xplan *p, size_t i);
/* Every routed expert of a layer (MTP and dropped ones aside) exported
 * alike: all float or all quantized with one type and group size. vLLM
 * builds one FusedMoE per layer with one quant method (awq_marlin.py,
 * compressed_tensors_moe.py), so a mixed layer does not load. engine names
 * the loader in the message. */
int dsq_x_check_experts(const dsq_xplan *p, const char *engine, dsq_diag *d);
/* Store f in dtype dt at dst[i]; is_scale: note its rounding. -1 when F16
 * cannot hold a finite f. */
int dsq_x_put_float(dsq_xplan *p, enum dsq_dtype dt, uint8_t *dst, size_t i, float f, int is_scale);
/* Refusal of a scale F16 cannot hold. */
int dsq_x_scale_overflow(const dsq_xtensor *x, int64_t n, int64_t g, float s, dsq_diag *d);
/* All int4 codes of row n (0..15, as stored) into out[0..cols). */
void dsq_x_row_codes(const dsq_qview *v, int64_t n, uint8_t *out);
static inline float dsq_x_scale_at(const dsq_qview *v, int64_t n, int64_t g)
{
    return v->scales[(size_t)n * (size_t)v->layout.ngroups + (size_t)g];
}

extern const dsq_xfmt dsq_xfmt_ascend;
extern const dsq_xfmt dsq_xfmt_awq;
extern const dsq_xfmt dsq_xfmt_ct;

#endif
