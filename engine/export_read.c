/* export_read.c - the engine's side of a serving export: each linear is
 * asked of its format's unpacker in the table (xfmt/xfmt.h); see
 * export_read.h. */
#include "export_read.h"

int dsq_export_read_linear(const dsq_export_info *x, const dsq_st_model *st, const char *module,
                           int64_t rows, int64_t cols, uint8_t **blob, size_t *blob_size,
                           float **bias, dsq_diag *d)
{
    return dsq_xfmt_unpack_linear(x, st, module, rows, cols, blob, blob_size, bias, d);
}

int dsq_export_linear_shape(const dsq_export_info *x, const dsq_st_model *st, const char *module,
                            int64_t *rows, int64_t *cols, dsq_diag *d)
{
    return dsq_xfmt_linear_shape(x, st, module, rows, cols, d);
}

int dsq_export_module_of(const dsq_export_info *x, const dsq_st_tensor *t, char *buf, size_t n)
{
    return dsq_xfmt_module_of(x, t, buf, n);
}
