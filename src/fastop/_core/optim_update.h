/* The element loops of fastop's optimizer updates (formulas in optim.pyx), in place
 * over contiguous buffers.
 *
 * `restrict` tells gcc that the parameter, gradient and state buffers do not overlap,
 * so the loops vectorize; the build has no -march, so each function is compiled for
 * AVX-512, AVX2 and the baseline (target_clones) and the best is picked at load time.
 * Scalars arrive already in the buffers' precision.
 */
#ifndef FASTOP_OPTIMIZER_UPDATE_IMPL_H
#define FASTOP_OPTIMIZER_UPDATE_IMPL_H
#include <math.h>
#include <stddef.h>

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define FASTOP_UPDATE_CLONES \
    __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define FASTOP_UPDATE_CLONES
#endif

#define DEFINE_UPDATES(SUFFIX, T, SQRT)                                                  \
    /* p -= lr * (g + wd * p) */                                                         \
    FASTOP_UPDATE_CLONES static void fastop_sgd_##SUFFIX(                                \
        T *restrict p, const T *restrict g, ptrdiff_t n, T lr, T wd)                     \
    {                                                                                    \
        if (wd == 0) {                                                                   \
            for (ptrdiff_t i = 0; i < n; i++)                                            \
                p[i] -= lr * g[i];                                                       \
        } else {                                                                         \
            for (ptrdiff_t i = 0; i < n; i++)                                            \
                p[i] -= lr * (g[i] + wd * p[i]);                                         \
        }                                                                                \
    }                                                                                    \
    /* g' = g + wd * p; v = mu * v + g'; p -= lr * (nesterov ? g' + mu * v : v) */       \
    FASTOP_UPDATE_CLONES static void fastop_momentum_##SUFFIX(                           \
        T *restrict p, const T *restrict g, T *restrict v, ptrdiff_t n, T lr, T mu,      \
        T wd, int nesterov)                                                              \
    {                                                                                    \
        if (nesterov) {                                                                  \
            for (ptrdiff_t i = 0; i < n; i++) {                                          \
                T gi = g[i] + wd * p[i];                                                 \
                T vi = mu * v[i] + gi;                                                   \
                v[i] = vi;                                                               \
                p[i] -= lr * (gi + mu * vi);                                             \
            }                                                                            \
        } else {                                                                         \
            for (ptrdiff_t i = 0; i < n; i++) {                                          \
                T vi = mu * v[i] + (g[i] + wd * p[i]);                                   \
                v[i] = vi;                                                               \
                p[i] -= lr * vi;                                                         \
            }                                                                            \
        }                                                                                \
    }                                                                                    \
    /* g' = g + wd * p; m = b1 m + (1 - b1) g'; v = b2 v + (1 - b2) g'^2;                \
     * p -= step * m / (sqrt(v) + eps), step and eps carrying the bias correction */     \
    FASTOP_UPDATE_CLONES static void fastop_adam_##SUFFIX(                               \
        T *restrict p, const T *restrict g, T *restrict m, T *restrict v, ptrdiff_t n,   \
        T step, T b1, T b2, T eps, T wd)                                                 \
    {                                                                                    \
        T c1 = 1 - b1, c2 = 1 - b2;                                                      \
        for (ptrdiff_t i = 0; i < n; i++) {                                              \
            T gi = g[i] + wd * p[i];                                                     \
            T mi = b1 * m[i] + c1 * gi;                                                  \
            T vi = b2 * v[i] + c2 * gi * gi;                                             \
            m[i] = mi;                                                                   \
            v[i] = vi;                                                                   \
            p[i] -= step * mi / (SQRT(vi) + eps);                                        \
        }                                                                                \
    }

DEFINE_UPDATES(f32, float, sqrtf)
DEFINE_UPDATES(f64, double, sqrt)

#endif
