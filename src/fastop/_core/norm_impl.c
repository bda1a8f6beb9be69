/* Layer normalization over contiguous rows (see norm_impl.h for the formulas).
 *
 * The build has no -ffast-math, so gcc may not reorder float additions by itself: the
 * sums keep LANES independent accumulators that it vectorizes, within blocks of BLOCK
 * elements whose sums are added in double (the error does not grow with long rows).
 * The mean comes first and the variance is summed from (x - mean)^2 (two passes over
 * the row, which stays in L1): no cancellation when the mean is large against the
 * spread. Forward is two reading passes and one writing pass; backward two of each,
 * dw and db accumulated in the first. Each public function is compiled for AVX-512,
 * AVX2 and the baseline (target_clones); the helpers are inlined into each clone, with
 * the presence of w, dw and db as constants, so every variant is a straight loop.
 */
#include <math.h>
#include <stddef.h>

#include "norm_impl.h"
#include "target_clones.h"

#define INLINE static inline __attribute__((always_inline))
#define BLOCK 1024

#define DEFINE_ROWS(SUFFIX, T, LANES, SQRT)                                                \
    /* sum(x) and sum((x - mean)^2) over a row */                                          \
    INLINE double sum_##SUFFIX(const T *x, ptrdiff_t n)                                    \
    {                                                                                      \
        double total = 0;                                                                  \
        for (ptrdiff_t start = 0; start < n; start += BLOCK) {                             \
            ptrdiff_t end = n - start < BLOCK ? n : start + BLOCK, i = start;              \
            T acc[LANES] = {0}, tail = 0;                                                  \
            for (; i + LANES <= end; i += LANES)                                           \
                for (int j = 0; j < LANES; j++)                                            \
                    acc[j] += x[i + j];                                                    \
            for (; i < end; i++)                                                           \
                tail += x[i];                                                              \
            for (int w = LANES / 2; w > 0; w /= 2)                                         \
                for (int j = 0; j < w; j++)                                                \
                    acc[j] += acc[j + w];                                                  \
            total += (double)(acc[0] + tail);                                              \
        }                                                                                  \
        return total;                                                                      \
    }                                                                                      \
                                                                                           \
    INLINE double sqdev_##SUFFIX(const T *x, ptrdiff_t n, T mean)                          \
    {                                                                                      \
        double total = 0;                                                                  \
        for (ptrdiff_t start = 0; start < n; start += BLOCK) {                             \
            ptrdiff_t end = n - start < BLOCK ? n : start + BLOCK, i = start;              \
            T acc[LANES] = {0}, tail = 0;                                                  \
            for (; i + LANES <= end; i += LANES)                                           \
                for (int j = 0; j < LANES; j++) {                                          \
                    T d = x[i + j] - mean;                                                 \
                    acc[j] += d * d;                                                       \
                }                                                                          \
            for (; i < end; i++)                                                           \
                tail += (x[i] - mean) * (x[i] - mean);                                     \
            for (int w = LANES / 2; w > 0; w /= 2)                                         \
                for (int j = 0; j < w; j++)                                                \
                    acc[j] += acc[j + w];                                                  \
            total += (double)(acc[0] + tail);                                              \
        }                                                                                  \
        return total;                                                                      \
    }                                                                                      \
                                                                                           \
    INLINE void normalize_##SUFFIX(const T *x, T *y, ptrdiff_t n, T mean, T rstd,          \
                                   const T *w, const T *b, const int has_w,                \
                                   const int has_b)                                        \
    {                                                                                      \
        for (ptrdiff_t i = 0; i < n; i++) {                                                \
            T v = (x[i] - mean) * rstd;                                                    \
            if (has_w)                                                                     \
                v *= w[i];                                                                 \
            if (has_b)                                                                     \
                v += b[i];                                                                 \
            y[i] = v;                                                                      \
        }                                                                                  \
    }                                                                                      \
                                                                                           \
    FASTOP_CLONES void fastop_layer_norm_row_##SUFFIX(const T *x, T *y, ptrdiff_t n, T eps, \
                                                      const T *w, const T *b, T *mean_out, \
                                                      T *rstd_out)                         \
    {                                                                                      \
        T mean = (T)(sum_##SUFFIX(x, n) / (double)n);                                      \
        T var = (T)(sqdev_##SUFFIX(x, n, mean) / (double)n);                               \
        T rstd = (T)1 / SQRT(var + eps);                                                   \
        *mean_out = mean;                                                                  \
        *rstd_out = rstd;                                                                  \
        if (w && b)                                                                        \
            normalize_##SUFFIX(x, y, n, mean, rstd, w, b, 1, 1);                           \
        else if (w)                                                                        \
            normalize_##SUFFIX(x, y, n, mean, rstd, w, b, 1, 0);                           \
        else if (b)                                                                        \
            normalize_##SUFFIX(x, y, n, mean, rstd, w, b, 0, 1);                           \
        else                                                                               \
            normalize_##SUFFIX(x, y, n, mean, rstd, w, b, 0, 0);                           \
    }                                                                                      \
                                                                                           \
    INLINE void grad_row_##SUFFIX(const T *x, const T *dy, T *dx, ptrdiff_t n, T mean,     \
                                  T rstd, const T *w, T *dw, T *db, const int has_w,       \
                                  const int has_dwb)                                       \
    {                                                                                      \
        /* pass 1: sum(g), sum(g * xhat); dw += dy * xhat, db += dy */                     \
        double sum_g = 0, sum_gx = 0;                                                      \
        for (ptrdiff_t start = 0; start < n; start += BLOCK) {                             \
            ptrdiff_t end = n - start < BLOCK ? n : start + BLOCK, i = start;              \
            T acc_g[LANES] = {0}, acc_gx[LANES] = {0}, tail_g = 0, tail_gx = 0;            \
            for (; i + LANES <= end; i += LANES)                                           \
                for (int j = 0; j < LANES; j++) {                                          \
                    T xh = (x[i + j] - mean) * rstd;                                       \
                    T g = has_w ? dy[i + j] * w[i + j] : dy[i + j];                        \
                    acc_g[j] += g;                                                         \
                    acc_gx[j] += g * xh;                                                   \
                    if (has_dwb) {                                                         \
                        dw[i + j] += dy[i + j] * xh;                                       \
                        db[i + j] += dy[i + j];                                            \
                    }                                                                      \
                }                                                                          \
            for (; i < end; i++) {                                                         \
                T xh = (x[i] - mean) * rstd;                                               \
                T g = has_w ? dy[i] * w[i] : dy[i];                                        \
                tail_g += g;                                                               \
                tail_gx += g * xh;                                                         \
                if (has_dwb) {                                                             \
                    dw[i] += dy[i] * xh;                                                   \
                    db[i] += dy[i];                                                        \
                }                                                                          \
            }                                                                              \
            for (int w2 = LANES / 2; w2 > 0; w2 /= 2)                                      \
                for (int j = 0; j < w2; j++) {                                             \
                    acc_g[j] += acc_g[j + w2];                                             \
                    acc_gx[j] += acc_gx[j + w2];                                           \
                }                                                                          \
            sum_g += (double)(acc_g[0] + tail_g);                                          \
            sum_gx += (double)(acc_gx[0] + tail_gx);                                       \
        }                                                                                  \
        /* pass 2: dx = rstd * (g - c1 - xhat * c2) */                                     \
        T c1 = (T)(sum_g / (double)n), c2 = (T)(sum_gx / (double)n);                       \
        for (ptrdiff_t i = 0; i < n; i++) {                                                \
            T xh = (x[i] - mean) * rstd;                                                   \
            T g = has_w ? dy[i] * w[i] : dy[i];                                            \
            dx[i] = rstd * (g - c1 - xh * c2);                                             \
        }                                                                                  \
    }                                                                                      \
                                                                                           \
    FASTOP_CLONES void fastop_layer_norm_grad_row_##SUFFIX(const T *x, const T *dy, T *dx,  \
                                                           ptrdiff_t n, T mean, T rstd,    \
                                                           const T *w, T *dw, T *db)       \
    {                                                                                      \
        if (w && dw)                                                                       \
            grad_row_##SUFFIX(x, dy, dx, n, mean, rstd, w, dw, db, 1, 1);                  \
        else if (w)                                                                        \
            grad_row_##SUFFIX(x, dy, dx, n, mean, rstd, w, dw, db, 1, 0);                  \
        else if (dw)                                                                       \
            grad_row_##SUFFIX(x, dy, dx, n, mean, rstd, w, dw, db, 0, 1);                  \
        else                                                                               \
            grad_row_##SUFFIX(x, dy, dx, n, mean, rstd, w, dw, db, 0, 0);                  \
    }

DEFINE_ROWS(f32, float, 32, sqrtf)
DEFINE_ROWS(f64, double, 16, sqrt)
