/* sample.h - token choice for generation: greedy or temperature / nucleus
 * sampling from a seeded stream.
 *
 * One sampler serves ds-serve's completions and ds-eval's in-process
 * generation, so a request sent with a seed to ds-serve and the same
 * request generated in process choose the same tokens. */
#ifndef DSQ_SAMPLE_H
#define DSQ_SAMPLE_H

#include <stddef.h>
#include <stdint.h>

typedef struct dsq_sample_params {
    double temperature; /* <= 0: greedy (argmax, lowest id on ties) */
    double top_p;       /* nucleus mass in (0, 1]; 1: the whole vocabulary */
} dsq_sample_params;

/* A candidate of the draw (scratch space: vocab of them). */
typedef struct dsq_sample_cand {
    float p;
    int32_t id;
} dsq_sample_cand;

/* The token chosen from one row of logits. Greedy: argmax. Otherwise
 * softmax(logits / temperature); with top_p < 1 the candidates sorted by
 * probability (ties: lower id first) are cut where their mass first reaches
 * top_p of the total; then one draw u in [0, mass) from the stream *rng
 * (dsq_splitmix64, dsq_rand.h) picks the first candidate whose running mass
 * exceeds u. scratch: vocab entries (unused when greedy). */
int32_t dsq_sample_token(const dsq_sample_params *p, uint64_t *rng, const float *row, size_t vocab,
                         dsq_sample_cand *scratch);

#endif
