/* container_layout.c - byte encodings and checks shared by the container
 * writer and reader, plus the role table. */
#include "container_layout.h"

#include "dsq_mem.h"

#include <json-c/json.h>
#include <stdlib.h>
#include <string.h>

/* ---- roles ---- */

static const char *const g_role_names[DSQ_ROLE_COUNT] = {
    [DSQ_ROLE_OTHER]                = "other",
    [DSQ_ROLE_EMBED]                = "embed",
    [DSQ_ROLE_NORM]                 = "norm",
    [DSQ_ROLE_ATTN_LINEAR]          = "attn_linear",
    [DSQ_ROLE_MLP_LINEAR]           = "mlp_linear",
    [DSQ_ROLE_EXPERT_LINEAR]        = "expert_linear",
    [DSQ_ROLE_SHARED_EXPERT_LINEAR] = "shared_expert_linear",
    [DSQ_ROLE_ROUTER]               = "router",
    [DSQ_ROLE_ROUTER_BIAS]          = "router_bias",
    [DSQ_ROLE_LM_HEAD]              = "lm_head",
    [DSQ_ROLE_LINEAR_BIAS]          = "linear_bias",
    [DSQ_ROLE_MTP]                  = "mtp",
    [DSQ_ROLE_QUANT_AUX]            = "quant_aux",
    [DSQ_ROLE_CALIB_STATS]          = "calib_stats",
    [DSQ_ROLE_INDEXER_LINEAR]       = "indexer_linear",
};

const char *dsq_role_name(uint32_t role)
{
    if (role < DSQ_ROLE_COUNT && g_role_names[role]) return g_role_names[role];
    return "other";
}

int dsq_role_from_name(const char *name, uint32_t *role)
{
    for (uint32_t i = 0; name && i < DSQ_ROLE_COUNT; i++) {
        if (g_role_names[i] && strcmp(g_role_names[i], name) == 0) {
            if (role) *role = i;
            return DSQ_OK;
        }
    }
    return DSQ_ERR_NOT_FOUND;
}

int64_t dsq_ctr_numel(const dsq_ctr_tensor_info *t)
{
    if (t->ndim > DSQ_CTR_MAX_DIMS) return -1;
    int64_t n = 1;
    for (uint32_t i = 0; i < t->ndim; i++) if (t->shape[i] == 0) return 0;
    for (uint32_t i = 0; i < t->ndim; i++) {
        if (t->shape[i] < 0 || __builtin_mul_overflow(n, t->shape[i], &n)) return -1;
    }
    return n;
}

int dsq_ctr_is_dsq(const void *head, size_t n)
{
    return head && n >= 8 && memcmp(head, DSQ_CTR_MAGIC, 8) == 0;
}

/* ---- header / footer / record ---- */

void dsq_ctr_header_build(uint8_t out[DSQ_CTR_HEADER_SIZE])
{
    memset(out, 0, DSQ_CTR_HEADER_SIZE);
    memcpy(out, DSQ_CTR_MAGIC, 8);
    dsq_store_u32le(out + 8, DSQ_CTR_VERSION);
    dsq_store_u32le(out + 12, DSQ_CTR_HEADER_SIZE);
    dsq_store_u32le(out + 16, DSQ_CTR_ALIGN);
    dsq_store_u32le(out + 20, 0);
}

int dsq_ctr_footer_build(const dsq_ctr_footer *f, uint8_t out[DSQ_CTR_FOOTER_SIZE])
{
    memset(out, 0, DSQ_CTR_FOOTER_SIZE);
    memcpy(out, DSQ_CTR_FOOTER_MAGIC, 8);
    dsq_store_u32le(out + 8, f->version);
    dsq_store_u32le(out + 12, DSQ_CTR_FOOTER_SIZE);
    dsq_store_u64le(out + 16, f->file_size);
    dsq_store_u64le(out + 24, f->tensor_count);
    dsq_store_u64le(out + 32, f->index_offset);
    dsq_store_u64le(out + 40, f->index_length);
    dsq_store_u64le(out + 48, f->meta_offset);
    dsq_store_u64le(out + 56, f->meta_length);
    memcpy(out + 64, f->header_sha256, 32);
    memcpy(out + 96, f->index_sha256, 32);
    memcpy(out + 128, f->meta_sha256, 32);
    return dsq_sha256_buf(out, 160, out + 160);
}

void dsq_ctr_record_build(const dsq_ctr_tensor_info *t, uint32_t name_off,
                          uint32_t name_len, uint32_t dtype_off, uint32_t dtype_len,
                          uint8_t out[DSQ_CTR_ENTRY_SIZE])
{
    memset(out, 0, DSQ_CTR_ENTRY_SIZE);
    dsq_store_u64le(out + 0, t->offset);
    dsq_store_u64le(out + 8, t->stored_size);
    dsq_store_u64le(out + 16, t->raw_size);
    dsq_store_u32le(out + 24, name_off);
    dsq_store_u32le(out + 28, name_len);
    dsq_store_u32le(out + 32, dtype_off);
    dsq_store_u32le(out + 36, dtype_len);
    dsq_store_u32le(out + 40, t->role);
    dsq_store_u32le(out + 44, t->scheme);
    dsq_store_u32le(out + 48, t->compression);
    dsq_store_u32le(out + 52, t->ndim);
    dsq_store_u32le(out + 56, t->group_size);
    dsq_store_u32le(out + 60, t->pack_version);
    for (int i = 0; i < DSQ_CTR_AUX; i++) dsq_store_u32le(out + 64 + 4 * i, t->aux[i]);
    for (int i = 0; i < DSQ_CTR_MAX_DIMS; i++)
        dsq_store_u64le(out + 80 + 8 * i, (uint64_t)(i < (int)t->ndim ? t->shape[i] : 0));
    memcpy(out + 144, t->sha256, 32);
}

/* ---- checks ---- */

int dsq_ctr_check_info(const dsq_ctr_tensor_info *t, size_t name_len,
                       size_t dtype_len, int bad, const char *path, int64_t offset,
                       dsq_diag *d)
{
    const char *nm = t->name;
    if (!nm || name_len == 0)
        return dsq_fail(d, bad, path, NULL, offset, "empty tensor name");
    if (name_len > DSQ_CTR_MAX_NAME)
        return dsq_fail(d, bad, path, NULL, offset,
                        "tensor name of %zu bytes exceeds %d", name_len, DSQ_CTR_MAX_NAME);
    if (memchr(nm, 0, name_len))
        return dsq_fail(d, bad, path, NULL, offset, "tensor name contains NUL");
    if (dtype_len > DSQ_CTR_MAX_DTYPE)
        return dsq_fail(d, bad, path, nm, offset,
                        "dtype name of %zu bytes exceeds %d", dtype_len, DSQ_CTR_MAX_DTYPE);
    if (dtype_len && memchr(t->src_dtype, 0, dtype_len))
        return dsq_fail(d, bad, path, nm, offset, "dtype name contains NUL");
    if (t->ndim > DSQ_CTR_MAX_DIMS)
        return dsq_fail(d, bad, path, nm, offset,
                        "ndim %u exceeds %d", t->ndim, DSQ_CTR_MAX_DIMS);
    for (uint32_t i = 0; i < DSQ_CTR_MAX_DIMS; i++) {
        if (i < t->ndim && t->shape[i] < 0)
            return dsq_fail(d, bad, path, nm, offset,
                            "negative dimension %lld", (long long)t->shape[i]);
        if (i >= t->ndim && t->shape[i] != 0)
            return dsq_fail(d, bad, path, nm, offset,
                            "dimension %u set beyond ndim %u", i, t->ndim);
    }
    if (dsq_ctr_numel(t) < 0)
        return dsq_fail(d, bad, path, nm, offset, "element count overflows");
    return DSQ_OK;
}

int dsq_ctr_check_metadata(const char *json, size_t len, const char *path,
                           int64_t offset, dsq_diag *d)
{
    if (len > DSQ_CTR_MAX_META)
        return dsq_fail(d, DSQ_ERR_FORMAT, path, NULL, offset,
                        "metadata of %zu bytes exceeds the limit", len);
    if (memchr(json, 0, len))
        return dsq_fail(d, DSQ_ERR_JSON, path, NULL, offset, "metadata contains NUL");
    if (len > INT32_MAX)
        return dsq_fail(d, DSQ_ERR_JSON, path, NULL, offset, "metadata too large");
    json_tokener *tok = json_tokener_new_ex(256);
    if (!tok) return dsq_fail(d, DSQ_ERR_NOMEM, path, NULL, offset, "out of memory");
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
    /* Leading whitespace is fine JSON but strict json-c refuses it. */
    size_t skip = 0;
    while (skip < len && strchr(" \t\r\n", json[skip])) skip++;
    json_object *o = json_tokener_parse_ex(tok, json + skip, (int)(len - skip));
    enum json_tokener_error err = json_tokener_get_error(tok);
    size_t used = skip + json_tokener_get_parse_end(tok);
    json_tokener_free(tok);
    int rc = DSQ_OK;
    if (!o || err != json_tokener_success) {
        rc = dsq_fail(d, DSQ_ERR_JSON, path, NULL, offset + (int64_t)used,
                      "metadata is not valid JSON: %s",
                      err == json_tokener_continue ? "unexpected end" :
                      json_tokener_error_desc(err));
    } else if (!json_object_is_type(o, json_type_object)) {
        rc = dsq_fail(d, DSQ_ERR_JSON, path, NULL, offset, "metadata is not a JSON object");
    } else {
        for (size_t i = used; i < len; i++) {
            if (!strchr(" \t\r\n", json[i])) {
                rc = dsq_fail(d, DSQ_ERR_JSON, path, NULL, offset + (int64_t)i,
                              "trailing data after the metadata object");
                break;
            }
        }
    }
    json_object_put(o);
    return rc;
}

/* ---- name set ---- */

int64_t dsq_ctr_nameset_find(const dsq_ctr_nameset *s, const char *name,
                             const char *(*names)(const void *ctx, size_t i),
                             const void *ctx)
{
    if (!s->cap) return -1;
    size_t mask = s->cap - 1;
    for (size_t h = (size_t)dsq_ctr_hash_name(name) & mask;; h = (h + 1) & mask) {
        uint32_t v = s->slot[h];
        if (!v) return -1;
        if (strcmp(names(ctx, v - 1), name) == 0) return (int64_t)(v - 1);
    }
}

static void nameset_put(uint32_t *slot, size_t cap, const char *name, uint32_t v)
{
    size_t mask = cap - 1;
    size_t h = (size_t)dsq_ctr_hash_name(name) & mask;
    while (slot[h]) h = (h + 1) & mask;
    slot[h] = v;
}

int dsq_ctr_nameset_add(dsq_ctr_nameset *s, size_t i, const char *name,
                        const char *(*names)(const void *ctx, size_t i),
                        const void *ctx)
{
    if (i >= UINT32_MAX) return DSQ_ERR_OVERFLOW;
    if ((s->used + 1) * 2 > s->cap) {
        size_t ncap = s->cap ? s->cap * 2 : 64;
        uint32_t *ns = calloc(ncap, sizeof *ns);
        if (!ns) return DSQ_ERR_NOMEM;
        for (size_t k = 0; k < s->cap; k++)
            if (s->slot[k]) nameset_put(ns, ncap, names(ctx, s->slot[k] - 1), s->slot[k]);
        free(s->slot);
        s->slot = ns;
        s->cap = ncap;
    }
    nameset_put(s->slot, s->cap, name, (uint32_t)(i + 1));
    s->used++;
    return DSQ_OK;
}

void dsq_ctr_nameset_free(dsq_ctr_nameset *s)
{
    free(s->slot);
    memset(s, 0, sizeof *s);
}
