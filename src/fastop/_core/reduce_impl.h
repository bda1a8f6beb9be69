/* The contiguous-run loops of reduce_impl.c (pairwise sums, dot, max, the accumulate
 * steps of axis reductions, and softmax's affine map), each built for AVX-512, AVX2 and
 * a baseline and picked at load time. Declared once here; Cython sees it through
 * reduce_impl.pxd. */
#ifndef FASTOP_REDUCE_IMPL_H
#define FASTOP_REDUCE_IMPL_H
#include <stddef.h>

float fastop_sum_f32(const float *x, ptrdiff_t n);
double fastop_sum_f64(const double *x, ptrdiff_t n);
float fastop_dot_f32(const float *x, const float *y, ptrdiff_t n);
double fastop_dot_f64(const double *x, const double *y, ptrdiff_t n);
float fastop_max_f32(const float *x, ptrdiff_t n);
double fastop_max_f64(const double *x, ptrdiff_t n);
/* acc[i] += x[i] / acc[i] = max(acc[i], x[i]) (nan wins) */
void fastop_addto_f32(float *acc, const float *x, ptrdiff_t n);
void fastop_addto_f64(double *acc, const double *x, ptrdiff_t n);
void fastop_maxto_f32(float *acc, const float *x, ptrdiff_t n);
void fastop_maxto_f64(double *acc, const double *x, ptrdiff_t n);
/* y = a * x + b */
void fastop_axpb_f32(const float *x, float a, float b, float *y, ptrdiff_t n);
void fastop_axpb_f64(const double *x, double a, double b, double *y, ptrdiff_t n);

#endif
