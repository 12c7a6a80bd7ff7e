/* fuzz_logp.c - libFuzzer target for the ds-eval base log-prob file
 * ("DSQLOGP", eval_metrics.h): dsq_logp_reader_open_mem on hostile bytes,
 * then verify and a full dsq_kld_run against made-up logits, so hostile
 * records reach dsq_logp_compare. Must never crash, leak or read out of
 * bounds; statuses are not checked.
 *
 * Input: one control byte, then the file.
 *   bit 0  rewrite the token hash so the header and tokens are trusted
 *   bit 1  rewrite the data hash so the records are trusted
 *   bit 2  the fake model's logits include -inf / huge values
 *   bits 3-7 seed of the fake logits
 * Without the rewrites almost every mutation would stop at a hash, so the
 * record parser would never see hostile bytes. Also, per input, one
 * record is encoded from logits taken from the input and compared with the
 * same logits: that KL must be ~0 (an abort otherwise). Seeds:
 * corpus/logp/. */
#include "dsq_mem.h"
#include "dsq_sha256.h"
#include "eval_metrics.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Caps that keep one input cheap; the reader itself has none this small. */
#define MAX_LOGIT_FLOATS ((size_t)1 << 22) /* per window: per_chunk * vocab */

typedef struct fake {
    unsigned seed;
    int wild;
    size_t vocab;
} fake;

static uint32_t mix(uint32_t x)
{
    x ^= x >> 16; x *= 0x7feb352dU; x ^= x >> 15; x *= 0x846ca68bU; x ^= x >> 16;
    return x;
}

/* Deterministic logits from the window contents and the seed. */
static int fake_window(void *u, const int32_t *w, size_t n, size_t first, float *logits, dsq_diag *d)
{
    (void)d;
    fake *f = u;
    size_t rows = n - 1 - first;
    for (size_t j = 0; j < rows; j++) {
        uint32_t h = mix(f->seed * 2654435761u + (uint32_t)w[first + j] * 40503u + (uint32_t)j);
        for (size_t i = 0; i < f->vocab; i++) {
            uint32_t r = mix(h + (uint32_t)i);
            float v = (float)(r % 2000) / 100.0f - 10.0f;
            if (f->wild) {
                if (r % 97 == 0) v = -INFINITY;
                else if (r % 89 == 0) v = 3.0e38f;
                else if (r % 83 == 0) v = -3.0e38f;
            }
            logits[j * f->vocab + i] = v;
        }
    }
    return 0;
}
/* Header fields -> the layout, as the format defines it; 0 when the sizes
 * do not add up (the reader will refuse anyway). */
static int layout(const uint8_t *m, size_t size, size_t *tok_end, size_t *rec_end)
{
    if (size < DSQ_LOGP_HEADER) return 0;
    uint64_t n_ctx = dsq_load_u32le(m + 20), n_chunks = dsq_load_u32le(m + 28);
    uint64_t rec = dsq_load_u32le(m + 44), n_scored = dsq_load_u64le(m + 48);
    if (n_ctx > (1u << 20) || n_chunks > (1u << 20) || rec > (1u << 24) || n_scored > (1u << 24)) return 0;
    uint64_t te = DSQ_LOGP_HEADER + 4 * n_ctx * n_chunks;
    uint64_t re = te + DSQ_SHA256_LEN + rec * n_scored;
    if (re + DSQ_SHA256_LEN > size) return 0;
    *tok_end = (size_t)te;
    *rec_end = (size_t)re;
    return 1;
}

/* Encode one row and compare it with itself: KL(p || p) ~ 0. */
static void self_check(const uint8_t *data, size_t size)
{
    if (size < 2) return;
    int enc = data[0] & 1 ? DSQ_LOGP_TOPK : DSQ_LOGP_U16;
    size_t vocab = 2 + data[1] % 63;
    if (size < 2 + vocab) return;
    int top_k = 1 + (int)(data[0] >> 1) % (int)vocab;
    float logits[64];
    for (size_t i = 0; i < vocab; i++) logits[i] = ((float)data[2 + i] - 128.0f) / 8.0f;
    int32_t target = (int32_t)(data[size - 1] % vocab);
    dsq_logp_info in = { .vocab = (uint32_t)vocab, .n_ctx = 4, .first = 2, .n_chunks = 1,
                         .encoding = (uint32_t)enc, .top_k = (uint32_t)top_k, .bos = -1 };
    in.record_size = (uint32_t)dsq_logp_record_size(enc, vocab, top_k);
    uint8_t rec[16 + 8 * 64 + 2 * 64 + 2], scratch[64] = { 0 };
    if (dsq_logp_encode(&in, logits, target, rec) != DSQ_OK) abort(); /* finite logits encode */
    dsq_logp_cmp c;
    if (dsq_logp_compare(&in, rec, logits, target, scratch, &c) != DSQ_OK) abort();
    for (size_t i = 0; i < vocab; i++)
        if (scratch[i]) abort(); /* scratch must come back zeroed */
    /* u16 rounding and the float32 storage allow a little; anything more is a bug */
    if (!(fabs(c.kld) < 1e-3) || !(fabs(c.nll - c.nll_base) < 1e-3)) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    self_check(data, size);
    if (size < 1) return 0;
    unsigned ctl = data[0];
    size_t n = size - 1;
    /* 4-byte aligned copy, as open_mem wants; also lets us rewrite hashes */
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf) return 0;
    if (n) memcpy(buf, data + 1, n);
    size_t te, re;
    if ((ctl & 3) && layout(buf, n, &te, &re)) {
        if (ctl & 1) dsq_sha256_buf(buf, te, buf + te);
        if (ctl & 2) dsq_sha256_buf(buf + te + DSQ_SHA256_LEN, re - te - DSQ_SHA256_LEN, buf + re);
    }
    dsq_logp_reader r;
    dsq_diag d;
    dsq_diag_clear(&d);
    if (dsq_logp_reader_open_mem(&r, buf, n, "fuzz", &d) == DSQ_OK) {
        dsq_ppl_plan p;
        dsq_logp_reader_plan(&r, &p);
        dsq_diag_clear(&d);
        (void)dsq_logp_reader_verify(&r, &d);
        size_t floats = p.per_chunk * (size_t)r.info.vocab;
        if (r.info.vocab <= (1u << 16) && floats <= MAX_LOGIT_FLOATS) {
            fake f = { ctl >> 3, (ctl >> 2) & 1, r.info.vocab };
            dsq_kld_result k;
            dsq_diag_clear(&d);
            (void)dsq_kld_run(&r, r.info.vocab, fake_window, &f, NULL, &k, &d);
            /* a wrong vocabulary is refused, not trusted */
            dsq_diag_clear(&d);
            if (dsq_kld_run(&r, r.info.vocab + 1, fake_window, &f, NULL, &k, &d) != DSQ_ERR_SHAPE) abort();
        }
        dsq_logp_reader_close(&r);
    }
    /* misaligned buffers are refused, not read */
    if (n >= 2) {
        dsq_diag_clear(&d);
        if (dsq_logp_reader_open_mem(&r, buf + 1, n - 1, NULL, &d) != DSQ_ERR_INVALID_ARG) abort();
    }
    free(buf);
    return 0;
}
