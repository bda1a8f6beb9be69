/* Counter-based random bits and the dropout loops (see random_impl.h).
 *
 * SplitMix64 (Steele, Lea, Flood 2014; the seeding generator of xoshiro) passes
 * BigCrush, and its state is a plain counter: word i = mix(key + i * golden). That makes
 * a mask computable in any order, so a call's words are reserved once with an atomic
 * add and threads fill their own pieces. The mixing costs two 64-bit multiplies per
 * word, i.e. per two elements; the mask loop is written over words so that gcc
 * vectorizes it (AVX-512 has a 64-bit vector multiply; AVX2 builds it from 32-bit ones),
 * and each function is compiled for AVX-512, AVX2 and the baseline (target_clones).
 */
#include <stdint.h>
#include <string.h>

#include "random_impl.h"
#include "target_clones.h"

#define GOLDEN 0x9e3779b97f4a7c15ULL
#define MASK_CHUNK 512                 /* elements of a mask computed before it is used */

static uint64_t rng_key = 0x853c49e6748fea9bULL;
static uint64_t rng_counter = 0;

static inline uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

uint64_t fastop_rng_key(uint64_t seed)
{
    /* two rounds: nearby seeds give unrelated keys */
    return mix64(mix64(seed + GOLDEN) ^ 0x6a09e667f3bcc909ULL);
}

void fastop_rng_seed(uint64_t seed)
{
    __atomic_store_n(&rng_key, fastop_rng_key(seed), __ATOMIC_RELAXED);
    __atomic_store_n(&rng_counter, 0, __ATOMIC_RELAXED);
}

uint64_t fastop_rng_take(uint64_t nwords, uint64_t *key)
{
    *key = __atomic_load_n(&rng_key, __ATOMIC_RELAXED);
    return __atomic_fetch_add(&rng_counter, nwords, __ATOMIC_RELAXED);
}

/* keep[2j], keep[2j + 1] for words word0 .. word0 + nwords - 1: two bytes per word */
FASTOP_CLONES static void keep_pairs(uint8_t *keep, ptrdiff_t nwords, uint64_t key,
                                     uint64_t word0, uint64_t threshold)
{
    uint64_t state = key + word0 * GOLDEN;
    for (ptrdiff_t j = 0; j < nwords; j++) {
        uint64_t r = mix64(state + (uint64_t)j * GOLDEN);
        keep[2 * j] = (r & 0xffffffffULL) >= threshold;
        keep[2 * j + 1] = (r >> 32) >= threshold;
    }
}

/* The mask of elements [start, start + n): pairs of elements share a word, so an odd
 * start takes the high half of its first word alone. */
static void keep_range(uint8_t *keep, ptrdiff_t n, uint64_t key, uint64_t word0,
                       ptrdiff_t start, uint64_t threshold)
{
    uint64_t word = word0 + (uint64_t)(start >> 1);
    if (n <= 0)
        return;
    if (start & 1) {
        keep[0] = (mix64(key + word * GOLDEN) >> 32) >= threshold;
        keep++;
        n--;
        word++;
    }
    keep_pairs(keep, n >> 1, key, word, threshold);
    if (n & 1)
        keep[n - 1] = (mix64(key + (word + (uint64_t)(n >> 1)) * GOLDEN) & 0xffffffffULL)
                      >= threshold;
}

#define DEFINE_DROPOUT(NAME, SCALE_NAME, T)                                            \
    FASTOP_CLONES void SCALE_NAME(const uint8_t *mask, const T *dy, T *dx, ptrdiff_t n, \
                                  T scale)                                             \
    {                                                                                  \
        for (ptrdiff_t i = 0; i < n; i++)                                              \
            dx[i] = mask[i] ? dy[i] * scale : (T)0;                                    \
    }                                                                                  \
                                                                                       \
    void NAME(const T *x, T *y, uint8_t *mask, ptrdiff_t n, uint64_t key,              \
              uint64_t word0, ptrdiff_t start, uint64_t threshold, T scale)            \
    {                                                                                  \
        /* in chunks, so the mask is read back from L1 */                              \
        for (ptrdiff_t done = 0; done < n; done += MASK_CHUNK) {                       \
            ptrdiff_t k = n - done < MASK_CHUNK ? n - done : MASK_CHUNK;               \
            keep_range(mask + done, k, key, word0, start + done, threshold);           \
            SCALE_NAME(mask + done, x + done, y + done, k, scale);                     \
        }                                                                              \
    }

DEFINE_DROPOUT(fastop_dropout_f32, fastop_masked_scale_f32, float)
DEFINE_DROPOUT(fastop_dropout_f64, fastop_masked_scale_f64, double)
