/* export_detect.h - recognise a serving export directory and parse its
 * quantization description (hostile input: every JSON type is checked).
 *
 * ../shared/docs/formats.md sections 3-5. A directory is an export when:
 *   - it holds quant_model_description.json          -> AscendV1 (msModelSlim,
 *     vllm-ascend / MindIE; config.json has no quantization_config);
 *   - config.json quantization_config.quant_method == "awq" (version "gemm")
 *                                                     -> AutoAWQ GEMM;
 *   - quant_method == "compressed-tensors"            -> compressed-tensors.
 * Anything else (no description, no or another quant_method, e.g. DeepSeek's
 * "fp8") is a plain checkpoint: detect returns DSQ_OK with *out == NULL.
 *
 * The parsed description answers one question per linear module
 * ("model.layers.3.mlp.experts.0.up_proj"): how is it stored? The tensor
 * side (names, dtypes, shapes, packing) is engine/export_read.c's job. */
#ifndef DSQ_EXPORT_DETECT_H
#define DSQ_EXPORT_DETECT_H

#include "dsq_error.h"

#include <stddef.h>
#include <stdint.h>

enum dsq_export_kind {
    DSQ_EXPORT_NONE   = 0,
    DSQ_EXPORT_ASCEND = 1,   /* formats.md 4 */
    DSQ_EXPORT_AWQ    = 2,   /* formats.md 3 */
    DSQ_EXPORT_CT     = 3    /* formats.md 5 */
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
                                infers float modules from the checkpoint's dtypes
                                (formats.md 3.4), so a plain float weight is allowed */
    const char *src;         /* where the decision came from, for messages */
} dsq_export_spec;

typedef struct dsq_export_info dsq_export_info;  /* opaque */

#define DSQ_EXPORT_ASCEND_DESC "quant_model_description.json"

/* Inspect dir. *out = NULL (and DSQ_OK) for a plain checkpoint; else a
 * parsed description to free with dsq_export_info_free. Malformed descriptions:
 * DSQ_ERR_JSON / DSQ_ERR_FORMAT / DSQ_ERR_UNSUPPORTED naming the file and
 * the key. */
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
 * raises KeyError without it; formats.md 4.1); a missing entry or an
 * unknown type is DSQ_ERR_FORMAT / DSQ_ERR_UNSUPPORTED naming it. */
int  dsq_export_spec_of(const dsq_export_info *x, const char *module, dsq_export_spec *spec,
                        dsq_diag *d);

/* Ascend: the description type of a tensor name, or NULL. */
const char *dsq_export_ascend_type(const dsq_export_info *x, const char *tensor);
/* config.json's torch_dtype ("bfloat16", ...; "" when absent or unread). */
const char *dsq_export_torch_dtype(const dsq_export_info *x);

#endif
