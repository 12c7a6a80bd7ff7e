/* convert_check.h - config.json against the tensor shapes, at plan time
 * (issue 14.7). A .dsq whose config contradicts its tensors converts "fine"
 * and is refused later by ds-eval; this refuses it before any work, naming
 * the config key and the tensor that disagree. */
#ifndef DSQ_CONVERT_CHECK_H
#define DSQ_CONVERT_CHECK_H

#include "model_config.h"
#include "safetensors.h"

/* cfg_path names config.json in messages. DSQ_OK or DSQ_ERR_SHAPE (a
 * shape disagrees, a tensor the config implies is missing, or a tensor the
 * config says cannot exist is present). Unknown architectures: DSQ_OK. */
int dsq_conv_check_config(const dsq_model_config *cfg, const dsq_st_model *m,
                          const char *cfg_path, dsq_diag *d);

#endif
