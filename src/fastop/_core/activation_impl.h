/* Hot loops of the activation kernels that gcc does not vectorize well from Cython
 * (activation_impl.c): each built for AVX-512, AVX2 and a baseline, picked at load time. */
#ifndef FASTOP_ACTIVATION_IMPL_H
#define FASTOP_ACTIVATION_IMPL_H
#include <stddef.h>

/* For n float32 elements: two_phi[i] = 2 Phi(x[i]) = 1 + erf(x[i] / sqrt 2), computed in
 * float64 as erfc(|x| / sqrt 2) (no cancellation for negative x) with a fitted
 * approximation (relative error < 2.5e-8); and, when phi is not NULL, the standard
 * normal density phi[i] = exp(-x[i]^2 / 2) / sqrt(2 pi). */
void fastop_gelu_phi_f32(const float *x, double *two_phi, double *phi, ptrdiff_t n);

#endif
