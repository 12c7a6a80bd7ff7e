/* fuzz_container.c - libFuzzer target: the .dsq reader on arbitrary bytes.
 *
 * Parses from memory (dsq_ctr_open_mem, no files), then exercises every
 * read path on whatever opened: lookups, metadata, read (with and without
 * hash), raw views and a single-threaded verify. Must never crash, leak or
 * read out of bounds; any status is acceptable.
 *
 * Built with -DDSQ_FUZZ_GEN_MAIN it is instead a small program that writes
 * the seed corpus (tests/fuzz/corpus/container/) with the real writer:
 *   cc -DDSQ_FUZZ_GEN_MAIN ... tests/fuzz/fuzz_container.c libdsq.a -o gen
 *   ./gen tests/fuzz/corpus/container */
#include "container.h"
#include "dsq_sha256.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_READ (16u << 20)  /* skip reads of absurd declared sizes */

static void exercise(const uint8_t *data, size_t size)
{
    dsq_ctr *r = NULL;
    if (dsq_ctr_open_mem(&r, data, size, "fuzz", NULL) != DSQ_OK) return;
    size_t mlen = 0;
    const char *meta = dsq_ctr_metadata(r, &mlen);
    if (!meta || strlen(meta) != mlen) abort();
    uint64_t raw = 0, stored = 0;
    dsq_ctr_totals(r, &raw, &stored);
    for (size_t i = 0; i < dsq_ctr_count(r); i++) {
        const dsq_ctr_tensor_info *t = dsq_ctr_get(r, i);
        if (dsq_ctr_find(r, t->name) != t) abort();   /* names are unique */
        if (t->offset + t->stored_size > size) abort(); /* validated in bounds */
        const uint8_t *v = dsq_ctr_raw_ptr(r, t);
        if (v && t->raw_size) {
            volatile uint8_t sink = v[0] ^ v[t->raw_size - 1];
            (void)sink;
        }
        if (t->raw_size <= MAX_READ) {
            uint8_t *dst = malloc(t->raw_size ? (size_t)t->raw_size : 1);
            if (dst) {
                dsq_ctr_read(r, t, dst, (size_t)t->raw_size, NULL);
                dsq_ctr_read_ex(r, t, dst, (size_t)t->raw_size, DSQ_CTR_READ_NOHASH, NULL);
                free(dst);
            }
        }
    }
    if (raw <= 64u * MAX_READ) {
        size_t bad;
        dsq_ctr_verify(r, 1, &bad, NULL);
    }
    dsq_ctr_close(r);
}

static uint64_t ld64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

/* Random bytes almost never carry valid SHA-256s, which would confine the
 * fuzzer to the footer checks. So each input is also tried "resealed":
 * header, index and metadata hashes recomputed over the ranges the footer
 * names (when in bounds), then the footer's own hash. */
static void reseal(uint8_t *b, size_t n)
{
    if (n < DSQ_CTR_HEADER_SIZE + DSQ_CTR_FOOTER_SIZE) return;
    uint8_t *f = b + n - DSQ_CTR_FOOTER_SIZE;
    uint64_t io = ld64(f + 32), il = ld64(f + 40), mo = ld64(f + 48), ml = ld64(f + 56);
    dsq_sha256_buf(b, DSQ_CTR_HEADER_SIZE, f + 64);
    if (il <= n && io <= n - il) dsq_sha256_buf(b + io, (size_t)il, f + 96);
    if (ml <= n && mo <= n - ml) dsq_sha256_buf(b + mo, (size_t)ml, f + 128);
    dsq_sha256_buf(f, 160, f + 160);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    exercise(data, size);
    uint8_t *copy = malloc(size ? size : 1);
    if (!copy) return 0;
    if (size) memcpy(copy, data, size);
    reseal(copy, size);
    exercise(copy, size);
    free(copy);
    return 0;
}

#ifdef DSQ_FUZZ_GEN_MAIN
#include <stdio.h>

static int gen(const char *dir, const char *name, int variant)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    dsq_ctr_writer *w;
    dsq_diag d;
    dsq_diag_clear(&d);
    if (dsq_ctr_writer_open(&w, path, DSQ_OUT_OVERWRITE, &d) != DSQ_OK) return 1;
    uint8_t buf[600];
    for (size_t i = 0; i < sizeof buf; i++) buf[i] = (uint8_t)(i % 5 == 0 ? i : 0x3c);
    dsq_ctr_tensor_info t;
    memset(&t, 0, sizeof t);
    t.src_dtype = "BF16";
    t.ndim = 2;
    t.shape[0] = 10;
    t.shape[1] = 30;
    int rc = DSQ_OK;
    if (variant >= 1) {
        t.name = "model.embed_tokens.weight";
        t.role = DSQ_ROLE_EMBED;
        t.scheme = 1;
        rc |= dsq_ctr_writer_add(w, &t, buf, sizeof buf, 3, &d);      /* zstd */
        t.name = "model.layers.0.self_attn.q_proj.weight";
        t.role = DSQ_ROLE_ATTN_LINEAR;
        t.scheme = 2;
        t.group_size = 0;
        rc |= dsq_ctr_writer_add(w, &t, buf, 100, 0, &d);             /* raw */
        t.name = "model.norm.weight";
        t.role = DSQ_ROLE_NORM;
        t.ndim = 1;
        t.shape[1] = 0;
        rc |= dsq_ctr_writer_begin(w, &t, 1, &d);                      /* streamed */
        rc |= dsq_ctr_writer_chunk(w, buf, 200, &d);
        rc |= dsq_ctr_writer_chunk(w, buf + 200, 100, &d);
        rc |= dsq_ctr_writer_end(w, &d);
    }
    if (variant >= 2) {
        t.name = "empty";
        t.ndim = 1;
        t.shape[0] = 0;
        rc |= dsq_ctr_writer_add(w, &t, NULL, 0, 3, &d);
        t.name = "scalar";
        t.ndim = 0;
        t.shape[0] = 0;
        t.src_dtype = NULL;
        rc |= dsq_ctr_writer_add(w, &t, buf, 4, 0, &d);
    }
    if (variant >= 1)
        rc |= dsq_ctr_writer_set_metadata(w, "{\"recipe\":{\"default\":\"w8a8-dynamic\"},"
                                          "\"tool\":\"seed\",\"config\":{\"hidden_size\":30}}", &d);
    if (rc != DSQ_OK) { dsq_ctr_writer_abort(w); return 1; }
    return dsq_ctr_writer_finish(w, &d) != DSQ_OK;
}

/* Copy src to dst, optionally truncated (keep < 0: keep all) or with one
 * byte flipped (flip_at >= 0). */
static int derive(const char *dir, const char *src, const char *dst, long keep, long flip_at)
{
    char a[4096], b[4096];
    snprintf(a, sizeof a, "%s/%s", dir, src);
    snprintf(b, sizeof b, "%s/%s", dir, dst);
    FILE *in = fopen(a, "rb");
    if (!in) return 1;
    static uint8_t buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf, in);
    fclose(in);
    if (keep >= 0 && (size_t)keep < n) n = (size_t)keep;
    if (flip_at >= 0 && (size_t)flip_at < n) buf[flip_at] ^= 0x10;
    FILE *out = fopen(b, "wb");
    if (!out) return 1;
    fwrite(buf, 1, n, out);
    return fclose(out) != 0;
}

int main(int argc, char **argv)
{
    if (argc != 2) { fprintf(stderr, "usage: %s DIR\n", argv[0]); return 2; }
    const char *dir = argv[1];
    int bad = 0;
    bad |= gen(dir, "empty.dsq", 0);
    bad |= gen(dir, "three.dsq", 1);
    bad |= gen(dir, "five.dsq", 2);
    bad |= derive(dir, "three.dsq", "truncated.bin", 700, -1);
    bad |= derive(dir, "three.dsq", "payload_flip.bin", -1, 130); /* raw payload: verify fails */
    bad |= derive(dir, "five.dsq", "no_footer.bin", 64, -1);
    return bad;
}
#endif
