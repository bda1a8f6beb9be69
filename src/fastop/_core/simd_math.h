/* Vectorized transcendental and activation functions over contiguous arrays.
 *
 * The contract shared by the elementwise kernels (elementwise.pyx) and the fused
 * GEMM epilogues (linalg): y[i] = f(x[i]) for 0 <= i < n. In place is allowed
 * (x == y); partial overlap is not. Any alignment is accepted.
 *
 * Implementation (simd_math_impl.c): branch-free polynomial / rational
 * approximations with range reduction, AVX-512 when the CPU has it (chosen at run
 * time, the build has no -march flag), AVX2+FMA clones, and a portable scalar
 * fallback. Accuracy: a few ULP against the correctly rounded result; inf, -inf and
 * nan map as libm does (exp(+inf) = inf, exp(-inf) = 0, exp overflows to inf,
 * log(0) = -inf, log(x < 0) = nan, tanh(+-inf) = +-1, sigmoid(-inf) = 0).
 * The functions are thread-safe and do not touch errno or the FP environment's
 * exception flags in any way a caller may rely on.
 */
#ifndef FASTOP_SIMD_MATH_H
#define FASTOP_SIMD_MATH_H
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

void fastop_vexp_f32(const float *x, float *y, ptrdiff_t n);
void fastop_vexp_f64(const double *x, double *y, ptrdiff_t n);

/* Natural logarithm. */
void fastop_vlog_f32(const float *x, float *y, ptrdiff_t n);
void fastop_vlog_f64(const double *x, double *y, ptrdiff_t n);

void fastop_vtanh_f32(const float *x, float *y, ptrdiff_t n);
void fastop_vtanh_f64(const double *x, double *y, ptrdiff_t n);

/* Logistic sigmoid 1 / (1 + exp(-x)). */
void fastop_vsigmoid_f32(const float *x, float *y, ptrdiff_t n);
void fastop_vsigmoid_f64(const double *x, double *y, ptrdiff_t n);

/* max(x, 0); nan stays nan. */
void fastop_vrelu_f32(const float *x, float *y, ptrdiff_t n);
void fastop_vrelu_f64(const double *x, double *y, ptrdiff_t n);

#ifdef __cplusplus
}
#endif
#endif
