/* dsq_rand.h - the one seeded random stream of the library: splitmix64
 * (Steele, Lea and Flood, "Fast splittable pseudorandom number
 * generators", 2014). Its output depends only on the seed, so every seeded
 * choice dsq makes (calibration sample order and reservoirs, rotation signs,
 * sampled tokens) is the same on every host and thread count.
 * Header-only: draws sit on inner loops. */
#ifndef DSQ_RAND_H
#define DSQ_RAND_H

#include <stdint.h>

/* The next value of the stream whose state is *state (advanced). */
static inline uint64_t dsq_splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

#endif
