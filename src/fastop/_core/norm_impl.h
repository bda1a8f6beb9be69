/* Row loops of layer normalization (norm_impl.c), each built for AVX-512, AVX2 and a
 * baseline and picked at load time. A row is n contiguous elements; w and b (the
 * per-element scale and shift) may be NULL.
 *
 *   forward   mean = sum(x) / n,  rstd = 1 / sqrt(sum((x - mean)^2) / n + eps)
 *             y = (x - mean) * rstd * w + b
 *   backward  xhat = (x - mean) * rstd,  g = dy * w
 *             dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
 *             dw += dy * xhat,  db += dy       (accumulated over rows; each may be NULL)
 */
#ifndef FASTOP_NORM_IMPL_H
#define FASTOP_NORM_IMPL_H
#include <stddef.h>

void fastop_layer_norm_row_f32(const float *x, float *y, ptrdiff_t n, float eps,
                               const float *w, const float *b, float *mean, float *rstd);
void fastop_layer_norm_row_f64(const double *x, double *y, ptrdiff_t n, double eps,
                               const double *w, const double *b, double *mean,
                               double *rstd);
void fastop_layer_norm_grad_row_f32(const float *x, const float *dy, float *dx, ptrdiff_t n,
                                    float mean, float rstd, const float *w, float *dw,
                                    float *db);
void fastop_layer_norm_grad_row_f64(const double *x, const double *dy, double *dx,
                                    ptrdiff_t n, double mean, double rstd, const double *w,
                                    double *dw, double *db);

#endif
