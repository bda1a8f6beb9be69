/* Vectorized transcendental and activation functions over contiguous arrays.
 *
 * The contract shared by the elementwise kernels (elementwise.pyx) and the fused
 * GEMM epilogues (linalg) and softmax: y[i] = f(x[i]) for 0 <= i < n. In place is
 * allowed (x == y); partial overlap is not. Any alignment is accepted.
 *
 * Implementation (simd_math_impl.c): branch-free polynomials with range reduction,
 * built for AVX-512, AVX2+FMA and the baseline and chosen at run time (the build has
 * no -march flag); FASTOP_SIMD_LEVEL=0|1 in the environment caps the choice at the
 * baseline or AVX2 build, for testing. Results of FASTOP_STREAM_MIN_BYTES (8 MB) and
 * more are written with non-temporal stores (they do not stay in cache).
 *
 * Accuracy: a few ULP (see simd_math_impl.c for the measured maxima). inf, -inf and
 * nan map as libm does: exp(+inf) = inf, exp(-inf) = 0, exp overflows to inf and
 * underflows through subnormals, log(0) = -inf, log(x < 0) = nan, tanh(+-inf) = +-1,
 * sigmoid(-inf) = 0. Thread-safe; errno is never set.
 */
#ifndef FASTOP_SIMD_MATH_H
#define FASTOP_SIMD_MATH_H
#include <stddef.h>

#define FASTOP_STREAM_MIN_BYTES ((ptrdiff_t)8 << 20)

#ifdef __cplusplus
extern "C" {
#endif

void fastop_vexp_f32(const float *x, float *y, ptrdiff_t n);
void fastop_vexp_f64(const double *x, double *y, ptrdiff_t n);

/* Softmax's row step: y[i] = exp(x[i] - shift) for 0 <= i < n, returning sum(y), in one
 * pass over x (summed in blocks, block sums in float64: the error does not grow with n).
 * next_x, next_y: the next row's input and output (n elements each, or both NULL),
 * prefetched into cache while this row computes. In place (x == y) is allowed; partial
 * overlap is not. */
float fastop_vexp_shift_sum_f32(const float *x, float shift, float *y, ptrdiff_t n,
                                const float *next_x, const float *next_y);
double fastop_vexp_shift_sum_f64(const double *x, double shift, double *y, ptrdiff_t n,
                                 const double *next_x, const double *next_y);

/* y[i] = a * x[i], then y[hot] -= a if 0 <= hot < n: a scaling (hot = -1), or the
 * softmax-cross-entropy gradient a * (p - onehot(hot)) of a row. stream != 0: results
 * that will not stay in cache (a large output written row by row) go to memory with
 * non-temporal stores, fenced before returning. In place (x == y) is allowed. */
void fastop_vscale_f32(const float *x, float a, float *y, ptrdiff_t n, ptrdiff_t hot,
                       int stream);
void fastop_vscale_f64(const double *x, double a, double *y, ptrdiff_t n, ptrdiff_t hot,
                       int stream);

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

/* Binary elementwise y[i] = a[i] op b[i] over contiguous arrays (y may be a or b). */
enum {
    FASTOP_BIN_ADD = 0,
    FASTOP_BIN_SUB = 1,
    FASTOP_BIN_MUL = 2,
    FASTOP_BIN_DIV = 3,
    FASTOP_BIN_MAX = 4,          /* nan wins, like numpy.maximum */
    FASTOP_BIN_MIN = 5,
    /* 6: unused */
    FASTOP_BIN_TANH_GRAD = 7,    /* a = tanh output y, b = dy: dy * (1 - y^2) */
    FASTOP_BIN_SIGMOID_GRAD = 8, /* dy * y * (1 - y) */
    FASTOP_BIN_RELU_GRAD = 9,    /* y > 0 ? dy : 0 */
    FASTOP_BIN_SQRT_GRAD = 10    /* 0.5 * dy / y */
};
void fastop_vbinary_f32(int op, const float *a, const float *b, float *y, ptrdiff_t n);
void fastop_vbinary_f64(int op, const double *a, const double *b, double *y, ptrdiff_t n);

#ifdef __cplusplus
}
#endif
#endif
