/* The element loops of fastop's optimizer updates (formulas in optim.pyx), in place
 * over contiguous buffers.
 *
 * Every loop first forms the gradient it applies, g' = s * g + decay term, with s the
 * clipping scale (1 when the gradient is not clipped by norm) and the decay term one of
 * three kinds, each a loop of its own so that none tests the kind per element:
 *   none (0), L2: wd * p (1), L1: wd * sign(p) (2).
 * (A single loop computing `wd * p` with wd = 0 would turn an infinite parameter into
 * NaN, hence the separate "none" loop.)
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

enum { FASTOP_DECAY_NONE = 0, FASTOP_DECAY_L2 = 1, FASTOP_DECAY_L1 = 2 };

/* The gradient an update applies, for each decay kind. */
#define FASTOP_GRAD_none(T, g, p, s, wd) ((s) * (g))
#define FASTOP_GRAD_l2(T, g, p, s, wd) ((s) * (g) + (wd) * (p))
#define FASTOP_GRAD_l1(T, g, p, s, wd) ((s) * (g) + (wd) * (T)(((p) > 0) - ((p) < 0)))

#define DEFINE_UPDATES(SUFFIX, T, SQRT, DECAY)                                           \
    /* p -= lr * g' */                                                                   \
    FASTOP_UPDATE_CLONES static void fastop_sgd_##DECAY##_##SUFFIX(                      \
        T *restrict p, const T *restrict g, ptrdiff_t n, T lr, T s, T wd)                \
    {                                                                                    \
        for (ptrdiff_t i = 0; i < n; i++)                                                \
            p[i] -= lr * FASTOP_GRAD_##DECAY(T, g[i], p[i], s, wd);                      \
    }                                                                                    \
    /* v = mu * v + g'; p -= lr * (nesterov ? g' + mu * v : v) */                        \
    FASTOP_UPDATE_CLONES static void fastop_momentum_##DECAY##_##SUFFIX(                 \
        T *restrict p, const T *restrict g, T *restrict v, ptrdiff_t n, T lr, T mu,      \
        T s, T wd, int nesterov)                                                         \
    {                                                                                    \
        if (nesterov) {                                                                  \
            for (ptrdiff_t i = 0; i < n; i++) {                                          \
                T gi = FASTOP_GRAD_##DECAY(T, g[i], p[i], s, wd);                        \
                T vi = mu * v[i] + gi;                                                   \
                v[i] = vi;                                                               \
                p[i] -= lr * (gi + mu * vi);                                             \
            }                                                                            \
        } else {                                                                         \
            for (ptrdiff_t i = 0; i < n; i++) {                                          \
                T vi = mu * v[i] + FASTOP_GRAD_##DECAY(T, g[i], p[i], s, wd);            \
                v[i] = vi;                                                               \
                p[i] -= lr * vi;                                                         \
            }                                                                            \
        }                                                                                \
    }                                                                                    \
    /* m = b1 m + (1 - b1) g'; v = b2 v + (1 - b2) g'^2;                                 \
     * p = keep * p - step * m / (sqrt(v) + eps), step and eps carrying the bias         \
     * correction, keep = 1 - lr * coeff the decoupled decay of AdamW (1 for Adam) */    \
    FASTOP_UPDATE_CLONES static void fastop_adam_##DECAY##_##SUFFIX(                     \
        T *restrict p, const T *restrict g, T *restrict m, T *restrict v, ptrdiff_t n,   \
        T step, T b1, T b2, T eps, T s, T wd, T keep)                                    \
    {                                                                                    \
        T c1 = 1 - b1, c2 = 1 - b2;                                                      \
        for (ptrdiff_t i = 0; i < n; i++) {                                              \
            T gi = FASTOP_GRAD_##DECAY(T, g[i], p[i], s, wd);                            \
            T mi = b1 * m[i] + c1 * gi;                                                  \
            T vi = b2 * v[i] + c2 * gi * gi;                                             \
            m[i] = mi;                                                                   \
            v[i] = vi;                                                                   \
            p[i] = keep * p[i] - step * mi / (SQRT(vi) + eps);                           \
        }                                                                                \
    }

#define DEFINE_ALL_DECAYS(SUFFIX, T, SQRT)                                               \
    DEFINE_UPDATES(SUFFIX, T, SQRT, none)                                                \
    DEFINE_UPDATES(SUFFIX, T, SQRT, l2)                                                  \
    DEFINE_UPDATES(SUFFIX, T, SQRT, l1)                                                  \
    /* The entry points: the loop of the decay kind `decay`. */                          \
    static inline void fastop_sgd_##SUFFIX(T *p, const T *g, ptrdiff_t n, T lr, T s,     \
                                           T wd, int decay)                              \
    {                                                                                    \
        if (decay == FASTOP_DECAY_L2)                                                    \
            fastop_sgd_l2_##SUFFIX(p, g, n, lr, s, wd);                                  \
        else if (decay == FASTOP_DECAY_L1)                                               \
            fastop_sgd_l1_##SUFFIX(p, g, n, lr, s, wd);                                  \
        else                                                                             \
            fastop_sgd_none_##SUFFIX(p, g, n, lr, s, wd);                                \
    }                                                                                    \
    static inline void fastop_momentum_##SUFFIX(T *p, const T *g, T *v, ptrdiff_t n,     \
                                                T lr, T mu, T s, T wd, int decay,        \
                                                int nesterov)                            \
    {                                                                                    \
        if (decay == FASTOP_DECAY_L2)                                                    \
            fastop_momentum_l2_##SUFFIX(p, g, v, n, lr, mu, s, wd, nesterov);            \
        else if (decay == FASTOP_DECAY_L1)                                               \
            fastop_momentum_l1_##SUFFIX(p, g, v, n, lr, mu, s, wd, nesterov);            \
        else                                                                             \
            fastop_momentum_none_##SUFFIX(p, g, v, n, lr, mu, s, wd, nesterov);          \
    }                                                                                    \
    static inline void fastop_adam_##SUFFIX(T *p, const T *g, T *m, T *v, ptrdiff_t n,   \
                                            T step, T b1, T b2, T eps, T s, T wd,        \
                                            int decay, T keep)                           \
    {                                                                                    \
        if (decay == FASTOP_DECAY_L2)                                                    \
            fastop_adam_l2_##SUFFIX(p, g, m, v, n, step, b1, b2, eps, s, wd, keep);      \
        else if (decay == FASTOP_DECAY_L1)                                               \
            fastop_adam_l1_##SUFFIX(p, g, m, v, n, step, b1, b2, eps, s, wd, keep);      \
        else                                                                             \
            fastop_adam_none_##SUFFIX(p, g, m, v, n, step, b1, b2, eps, s, wd, keep);    \
    }

DEFINE_ALL_DECAYS(f32, float, sqrtf)
DEFINE_ALL_DECAYS(f64, double, sqrt)

#endif
