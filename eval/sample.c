/* sample.c - greedy and temperature / nucleus token choice (sample.h). */
#include "sample.h"
#include "dsq_rand.h"

#include <math.h>
#include <stdlib.h>

static int cand_desc(const void *a, const void *b)
{
    const dsq_sample_cand *x = a, *y = b;
    if (x->p != y->p) return x->p > y->p ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

int32_t dsq_sample_token(const dsq_sample_params *p, uint64_t *rng, const float *row, size_t vocab,
                         dsq_sample_cand *scratch)
{
    if (p->temperature <= 0) {
        size_t best = 0;
        for (size_t i = 1; i < vocab; i++)
            if (row[i] > row[best]) best = i;
        return (int32_t)best;
    }
    float mx = row[0];
    for (size_t i = 1; i < vocab; i++)
        if (row[i] > mx) mx = row[i];
    double sum = 0;
    for (size_t i = 0; i < vocab; i++) {
        scratch[i].p = (float)exp((row[i] - mx) / p->temperature);
        scratch[i].id = (int32_t)i;
        sum += scratch[i].p;
    }
    size_t n = vocab;
    if (p->top_p < 1) {
        qsort(scratch, vocab, sizeof *scratch, cand_desc);
        double c = 0, lim = p->top_p * sum;
        for (n = 0; n < vocab;) {
            c += scratch[n++].p;
            if (c >= lim) break;
        }
        sum = c;
    }
    double u = (double)(dsq_splitmix64(rng) >> 11) * (1.0 / 9007199254740992.0) * sum, acc = 0;
    for (size_t i = 0; i < n; i++) {
        acc += scratch[i].p;
        if (u < acc) return scratch[i].id;
    }
    return scratch[n - 1].id;
}
