/* Hot loops of fastop's reductions (sum, dot, max) over contiguous runs, and the
 * affine map the softmax rows use (shift by the max, scale by 1/sum).
 *
 * The build has no -march and no -ffast-math, so gcc may not reorder float additions:
 * every loop here keeps LANES independent accumulators that it is allowed to vectorize,
 * and each function is compiled three times (AVX-512, AVX2, baseline) with
 * target_clones, picked once at load time.
 *
 * Sums are pairwise like numpy's: each block of BLOCK elements is summed in LANES
 * lanes (BLOCK / LANES sequential additions per lane), the lanes are combined as a
 * tree, and block sums are combined as a binary tree (a carry stack), so the rounding
 * error grows with log(n) rather than n.
 */
#include <stddef.h>

#include "reduce_impl.h"
#include "target_clones.h"

#define STACK_DEPTH 64

/* Pairwise sum of TERM(i) over 0 <= i < n (the sum or the dot product of runs). */
#define DEFINE_PAIRWISE(NAME, T, LANES, BLOCK, PARAMS, TERM)                         \
    FASTOP_CLONES T NAME PARAMS                                                      \
    {                                                                                \
        T stack[STACK_DEPTH];                                                        \
        int top = 0;                                                                 \
        ptrdiff_t nblocks = 0, start;                                                \
        if (n < LANES) { /* short run: lanes would cost more than they save */      \
            T s = 0;                                                                 \
            for (start = 0; start < n; start++)                                      \
                s += TERM(start);                                                    \
            return s;                                                                \
        }                                                                            \
        for (start = 0; start < n; start += BLOCK) {                                 \
            ptrdiff_t end = n - start < BLOCK ? n : start + BLOCK, i = start, k;     \
            T acc[LANES] = {0}, tail = 0;                                            \
            int j, w;                                                                \
            for (; i + LANES <= end; i += LANES)                                     \
                for (j = 0; j < LANES; j++)                                          \
                    acc[j] += TERM(i + j);                                           \
            for (; i < end; i++)                                                     \
                tail += TERM(i);                                                     \
            for (w = LANES / 2; w > 0; w /= 2)                                       \
                for (j = 0; j < w; j++)                                              \
                    acc[j] += acc[j + w];                                            \
            /* merge equal-sized partial sums: a binary counter over blocks */       \
            T s = acc[0] + tail;                                                     \
            for (k = ++nblocks; (k & 1) == 0; k >>= 1)                               \
                s += stack[--top];                                                   \
            stack[top++] = s;                                                        \
        }                                                                            \
        T total = 0;                                                                 \
        while (top > 0)                                                              \
            total += stack[--top];                                                   \
        return total;                                                                \
    }

#define SUM_TERM(i) x[i]
#define DOT_TERM(i) (x[i] * y[i])

/* sum(x[0:n]) and dot(x[0:n], y[0:n]), in the element type. */
DEFINE_PAIRWISE(fastop_sum_f32, float, 32, 1024, (const float *x, ptrdiff_t n), SUM_TERM)
DEFINE_PAIRWISE(fastop_sum_f64, double, 32, 1024, (const double *x, ptrdiff_t n), SUM_TERM)
DEFINE_PAIRWISE(fastop_dot_f32, float, 32, 1024,
                (const float *x, const float *y, ptrdiff_t n), DOT_TERM)
DEFINE_PAIRWISE(fastop_dot_f64, double, 32, 1024,
                (const double *x, const double *y, ptrdiff_t n), DOT_TERM)

/* Maximum of a contiguous run (n >= 1); NaN wins, as in numpy. A lane that once held
 * NaN keeps it: `v > NaN` and `v != v` are both false for any other v. */
#define DEFINE_MAX(NAME, T, LANES)                                                   \
    FASTOP_CLONES T NAME(const T *x, ptrdiff_t n)                                    \
    {                                                                                \
        T acc[LANES];                                                                \
        ptrdiff_t i = 0;                                                             \
        int j;                                                                       \
        if (n < LANES) {                                                             \
            T m = x[0];                                                              \
            for (i = 1; i < n; i++)                                                  \
                m = (x[i] > m || x[i] != x[i]) ? x[i] : m;                           \
            return m;                                                                \
        }                                                                            \
        for (j = 0; j < LANES; j++)                                                  \
            acc[j] = x[0];                                                           \
        for (; i + LANES <= n; i += LANES)                                           \
            for (j = 0; j < LANES; j++) {                                            \
                T v = x[i + j];                                                      \
                acc[j] = (v > acc[j] || v != v) ? v : acc[j];                        \
            }                                                                        \
        for (; i < n; i++) {                                                         \
            T v = x[i];                                                              \
            acc[0] = (v > acc[0] || v != v) ? v : acc[0];                            \
        }                                                                            \
        for (j = 1; j < LANES; j++)                                                  \
            acc[0] = (acc[j] > acc[0] || acc[j] != acc[j]) ? acc[j] : acc[0];        \
        return acc[0];                                                               \
    }

DEFINE_MAX(fastop_max_f32, float, 32)
DEFINE_MAX(fastop_max_f64, double, 32)

/* acc[i] += x[i] and acc[i] = max(acc[i], x[i]) (NaN wins): one row into another,
 * the inner step of a reduction over a non-last axis. */
#define DEFINE_ROW_OPS(SUFFIX, T)                                                    \
    FASTOP_CLONES void fastop_addto_##SUFFIX(T *restrict acc, const T *restrict x,  \
                                             ptrdiff_t n)                            \
    {                                                                                \
        for (ptrdiff_t i = 0; i < n; i++)                                            \
            acc[i] += x[i];                                                          \
    }                                                                                \
    FASTOP_CLONES void fastop_maxto_##SUFFIX(T *restrict acc, const T *restrict x,  \
                                             ptrdiff_t n)                            \
    {                                                                                \
        for (ptrdiff_t i = 0; i < n; i++) {                                          \
            T v = x[i];                                                              \
            acc[i] = (v > acc[i] || v != v) ? v : acc[i];                            \
        }                                                                            \
    }

DEFINE_ROW_OPS(f32, float)
DEFINE_ROW_OPS(f64, double)

/* y[i] = a * x[i] + b (in place allowed): x - max (a = 1, b = -max) and scaling
 * (b = 0) in the softmax rows, exact in both uses. */
#define DEFINE_AXPB(SUFFIX, T)                                                       \
    FASTOP_CLONES void fastop_axpb_##SUFFIX(const T *x, T a, T b, T *y, ptrdiff_t n) \
    {                                                                                \
        for (ptrdiff_t i = 0; i < n; i++)                                            \
            y[i] = a * x[i] + b;                                                     \
    }

DEFINE_AXPB(f32, float)
DEFINE_AXPB(f64, double)
