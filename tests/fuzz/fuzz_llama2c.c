/* fuzz_llama2c.c - libFuzzer target: the llama2.c readers on arbitrary bytes.
 *
 * Byte 0 picks the reader: even = a model checkpoint (run.c's header and
 * float arrays, formats/llama2c.c), odd = a tokenizer.bin (tokenizer/
 * tok_llama2c.c, loaded from a scratch file as dsq_tokenizer_load does).
 * A checkpoint that parses must lay every array inside the bytes it was
 * given (else abort); a tokenizer that loads must encode and decode a few
 * strings. Must never crash, leak or read out of bounds; any status is
 * acceptable. */
#include "llama2c.h"
#include "tokenizer.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_layout(const dsq_llama2c_config *c, const dsq_llama2c_layout *l, uint64_t size)
{
    const uint64_t offs[] = { l->emb, l->att_norm, l->wq, l->wk, l->wv, l->wo, l->ffn_norm,
                              l->w1, l->w2, l->w3, l->norm, l->freq_real, l->freq_imag, l->cls };
    if (l->total != size) abort();
    for (size_t i = 0; i < sizeof offs / sizeof *offs; i++)
        if (offs[i] > size || offs[i] % 4) abort();
    if (c->dim <= 0 || c->n_layers <= 0 || c->n_heads <= 0 || c->n_kv_heads <= 0 || c->vocab_size <= 0) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    const uint8_t *p = data + 1;
    size_t n = size - 1;
    dsq_diag d;
    dsq_diag_clear(&d);
    if (!(data[0] & 1)) {
        dsq_llama2c_config c;
        dsq_llama2c_layout l;
        if (dsq_llama2c_parse(p, n, "fuzz.bin", &c, &l, &d) == DSQ_OK) check_layout(&c, &l, n);
        return 0;
    }
    char path[64];
    snprintf(path, sizeof path, "/tmp/dsq-fuzz-l2tok-%d.bin", (int)getpid());
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    /* a '{' first byte would make it a Hugging Face tokenizer.json (another target) */
    if (n > 0 && p[0] == '{') n = 0;
    if (n && fwrite(p, 1, n, f) != n) {
        fclose(f);
        unlink(path);
        return 0;
    }
    fclose(f);
    dsq_tokenizer *t = NULL;
    if (dsq_tokenizer_load(&t, path, &d) == DSQ_OK && t) {
        static const char *const texts[] = { "", "a", "hello world", "\xe4\xbd\xa0\xe5\xa5\xbd", " <s> </s>" };
        for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) {
            int32_t *ids = NULL;
            size_t nid = 0;
            dsq_diag_clear(&d);
            if (dsq_tokenizer_encode(t, texts[i], strlen(texts[i]), 0, &ids, &nid, &d) == DSQ_OK) {
                char *s = NULL;
                size_t sl = 0;
                if (dsq_tokenizer_decode(t, ids, nid, 0, &s, &sl) == DSQ_OK) free(s);
            }
            free(ids);
        }
        dsq_tokenizer_free(t);
    }
    unlink(path);
    return 0;
}
