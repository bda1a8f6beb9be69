/* fastop's random bits for kernels (random_impl.c): a counter-based generator.
 *
 * Word i of a stream with key k is SplitMix64's output for state k + i * golden, so any
 * range of words is computed independently (threads and blocks draw their own part,
 * and the result does not depend on either). The global stream's key is set by
 * fastop.seed (fastop_rng_seed); each kernel call takes a fresh range of words from it
 * with one atomic add (fastop_rng_take), so calls never reuse bits. */
#ifndef FASTOP_RANDOM_IMPL_H
#define FASTOP_RANDOM_IMPL_H
#include <stddef.h>
#include <stdint.h>

/* Set the global stream: key derived from `seed`, counter back to 0. */
void fastop_rng_seed(uint64_t seed);
/* Reserve `nwords` words of the global stream: returns the first word's index and
 * stores the stream's key in *key. Thread-safe. */
uint64_t fastop_rng_take(uint64_t nwords, uint64_t *key);
/* The key of a private stream for a fixed seed (an op's `seed` attribute). */
uint64_t fastop_rng_key(uint64_t seed);

/* Dropout of n contiguous elements whose first one is element `start` of the call
 * (element q draws the low (q even) or high (q odd) 32 bits of word word0 + q / 2):
 * kept when those bits are >= threshold (threshold in [0, 2^32]: the drop probability
 * times 2^32). mask[i] = kept; y[i] = kept ? x[i] * scale : 0. y may be x. */
void fastop_dropout_f32(const float *x, float *y, uint8_t *mask, ptrdiff_t n,
                        uint64_t key, uint64_t word0, ptrdiff_t start, uint64_t threshold,
                        float scale);
void fastop_dropout_f64(const double *x, double *y, uint8_t *mask, ptrdiff_t n,
                        uint64_t key, uint64_t word0, ptrdiff_t start, uint64_t threshold,
                        double scale);
/* dx[i] = mask[i] ? dy[i] * scale : 0 (dx may be dy). */
void fastop_masked_scale_f32(const uint8_t *mask, const float *dy, float *dx, ptrdiff_t n,
                             float scale);
void fastop_masked_scale_f64(const uint8_t *mask, const double *dy, double *dx,
                             ptrdiff_t n, double scale);

#endif
