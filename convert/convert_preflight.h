/* convert_preflight.h - config.json against the tensor shapes, at plan
 * time. A .dsq whose config contradicts its tensors would convert "fine"
 * and be refused later by ds-eval; this refuses it before any work, naming
 * the config key and the tensor that disagree. (The output's preconditions
 * are in convert.h: dsq_convert_check_output, dsq_export_check_output.) */
#ifndef DSQ_CONVERT_PREFLIGHT_H
#define DSQ_CONVERT_PREFLIGHT_H

#include "model_config.h"
#include "safetensors.h"

/* cfg_path names config.json in messages. DSQ_OK or DSQ_ERR_SHAPE (a
 * shape disagrees, a tensor the config implies is missing, or a tensor the
 * config says cannot exist is present). Unknown architectures: DSQ_OK. */
int dsq_conv_check_config(const dsq_model_config *cfg, const dsq_st_model *m,
                          const char *cfg_path, dsq_diag *d);

#endif
