/* kvq.c - MLA's cache stored in 16 or 8 bits per value (opts.kv_cache).
 *
 * MLA caches, per position and layer, the normed latent (kv_lora_rank
 * values, 512 at V3) and the roped k_pe (64): 2304 bytes in float32. The
 * deployments keep them in 8 bits (MindIE's "C8"); dsq offers:
 *   bf16  2 bytes per value (round to nearest even)         1152 B at V3
 *   int8  code = rint(x / s), s = amax / 127 per part       584 B
 *   fp8   code = e4m3(x / s), s = amax / 448 per part       584 B
 * Row layout: [latent codes][k_pe codes][f32 latent scale][f32 k_pe scale]
 * (no scales for bf16); the latent and k_pe have their own scale because
 * their magnitudes differ (the latent is RMS-normed, k_pe is not).
 *
 * The attention paths read a float cache laid out as a layer's float32
 * cache would be. With a quantized cache, each layer call dequantizes the
 * rows its sequences already hold into one float view (one layer's worth of
 * memory for the whole model), and the tokens of the call write their codes
 * to the store and the values those codes give back to the view, so a
 * position reads the same numbers in the call that wrote it and in every
 * later one. */
#include "model.h"
#include "dsa.h"
#include "dsq_mem.h"

#include <math.h>
#include <string.h>

static int is_coded(int mode) { return mode == DSQ_KV_INT8 || mode == DSQ_KV_FP8; }

size_t dsq_kvq_row_bytes(int mode, int64_t R, int64_t rope)
{
    if (mode == DSQ_KV_BF16) return (size_t)(R + rope) * 2;
    if (is_coded(mode)) return (size_t)(R + rope) + 2 * sizeof(float);
    return (size_t)(R + rope) * sizeof(float);
}

/* One part (n values): codes into c, scale returned, the values the codes
 * give back into out. */
static float put_part(int mode, const float *x, int64_t n, uint8_t *c, float *out)
{
    if (n <= 0) return 0.0f;
    float amax = 0.0f;
    for (int64_t i = 0; i < n; i++) amax = fmaxf(amax, fabsf(x[i]));
    if (!(amax > 0.0f) || !isfinite(amax)) {
        memset(c, 0, (size_t)n);
        for (int64_t i = 0; i < n; i++) out[i] = 0.0f;
        return 0.0f;
    }
    if (mode == DSQ_KV_INT8) {
        float s = amax / 127.0f;
        for (int64_t i = 0; i < n; i++) {
            float q = rintf(x[i] / s);
            q = q > 127.0f ? 127.0f : q < -127.0f ? -127.0f : q;
            c[i] = (uint8_t)(int8_t)q;
            out[i] = q * s;
        }
        return s;
    }
    float s = amax / 448.0f;
    for (int64_t i = 0; i < n; i++) {
        c[i] = dsq_e4m3_encode(x[i] / s);
        out[i] = dsq_e4m3_decode(c[i]) * s;
    }
    return s;
}

static void get_part(int mode, const uint8_t *c, int64_t n, float s, float *out)
{
    if (mode == DSQ_KV_INT8)
        for (int64_t i = 0; i < n; i++) out[i] = (float)(int8_t)c[i] * s;
    else
        for (int64_t i = 0; i < n; i++) out[i] = dsq_e4m3_decode(c[i]) * s;
}

void dsq_kvq_put(int mode, const float *lat, int64_t R, const float *pe, int64_t rope, uint8_t *row,
                 float *lat_out, float *pe_out)
{
    if (mode == DSQ_KV_BF16) {
        uint16_t *h = (uint16_t *)(void *)row;
        for (int64_t i = 0; i < R; i++) {
            uint16_t b = dsq_f32_to_bf16(lat[i]);
            memcpy(&h[i], &b, 2);
            lat_out[i] = dsq_bf16_to_f32(b);
        }
        for (int64_t i = 0; i < rope; i++) {
            uint16_t b = dsq_f32_to_bf16(pe[i]);
            memcpy(&h[R + i], &b, 2);
            pe_out[i] = dsq_bf16_to_f32(b);
        }
        return;
    }
    float s[2];
    s[0] = put_part(mode, lat, R, row, lat_out);
    s[1] = put_part(mode, pe, rope, row + R, pe_out);
    memcpy(row + R + rope, s, sizeof s);
}

void dsq_kvq_get(int mode, const uint8_t *row, int64_t R, int64_t rope, float *lat, float *pe)
{
    if (mode == DSQ_KV_BF16) {
        for (int64_t i = 0; i < R + rope; i++) {
            uint16_t b;
            memcpy(&b, row + 2 * i, 2);
            float v = dsq_bf16_to_f32(b);
            if (i < R) lat[i] = v;
            else pe[i - R] = v;
        }
        return;
    }
    float s[2];
    memcpy(s, row + R + rope, sizeof s);
    get_part(mode, row, R, s[0], lat);
    get_part(mode, row + R, rope, s[1], pe);
}

/* Rows [0, n) of sequence seq into the view. */
static void fill_seq(const dsq_state *s, int l, int seq, int64_t n)
{
    const dsq_model *m = s->m;
    const int64_t R = m->cfg.kv_lora_rank, rope = m->cfg.qk_rope_head_dim, ctx = s->max_ctx;
    const size_t rb = dsq_kvq_row_bytes(m->opts.kv_cache, R, rope);
    const uint8_t *q = s->kvq[l] + (size_t)seq * (size_t)ctx * rb;
    float *lat = s->kvf + (size_t)seq * (size_t)(ctx * m->kv_width), *pe = lat + ctx * R;
    for (int64_t i = 0; i < n; i++) dsq_kvq_get(m->opts.kv_cache, q + (size_t)i * rb, R, rope, lat + i * R, pe + i * rope);
}

void dsq_kvq_view(dsq_state *s, int l, dsq_run *r)
{
    const dsq_model *m = s->m;
    r->kv.cache = s->kvf;
    r->kv.qcache = s->kvq[l];
    r->kv.qseq_stride = s->max_ctx *
                        (int64_t)dsq_kvq_row_bytes(m->opts.kv_cache, m->cfg.kv_lora_rank, m->cfg.qk_rope_head_dim);
    /* each sequence of the call: the rows before its first token here */
    for (int t = 0; t < r->T; t++) {
        int seq = r->kv.seq_of ? r->kv.seq_of[t] : r->kv.seq0;
        int first = 1;
        for (int u = 0; u < t && first; u++) first = (r->kv.seq_of ? r->kv.seq_of[u] : r->kv.seq0) != seq;
        if (!first) continue;
        int64_t lo = dsq_kv_index(r, t);
        for (int u = t + 1; u < r->T; u++)
            if ((r->kv.seq_of ? r->kv.seq_of[u] : r->kv.seq0) == seq && dsq_kv_index(r, u) < lo) lo = dsq_kv_index(r, u);
        fill_seq(s, l, seq, lo);
    }
}

int64_t dsq_model_kv_bytes_per_token(const dsq_model *m)
{
    size_t row = m->is_mla ? dsq_kvq_row_bytes(m->opts.kv_cache, m->cfg.kv_lora_rank, m->cfg.qk_rope_head_dim)
                           : (size_t)m->kv_width * sizeof(float);
    return (int64_t)m->n_layers * (int64_t)(row + (m->dsa ? m->dsa_row : 0));
}
