/* The erfc approximation of the float32 gelu (see activation_impl.h).
 *
 * erfc(z) = t exp(-z^2 + P(2t - 1)), t = 1 / (1 + z / 2), z >= 0. P is a degree-10
 * least-squares Chebyshev fit of log(erfc(z) / t) + z^2 over z in [0, 10] (2e5 points,
 * Python's math.erfc as the target), written as monomials of s = 2t - 1 for Horner's
 * rule; evaluated in float64 it stays within 2.5e-8 of erfc (relative), a fraction of a
 * float32 ulp. The polynomial, the division and the selects are branch-free, so gcc
 * vectorizes the loop (4 or 8 doubles a step with AVX2/AVX-512 and FMA); exp runs on
 * simd_math's vector exp. libm's scalar erff cost twenty times the rest of a gelu step.
 */
#include <math.h>
#include <stddef.h>

#include "activation_impl.h"
#include "simd_math.h"
#include "target_clones.h"

#define CHUNK 256

static const double P[11] = {
    -6.71794079e-01, 6.72643193e-01, 4.73427988e-02, -4.68945587e-02, -9.86461833e-03,
    8.81265626e-03, 1.71500699e-03, -2.27893530e-03, -5.53432004e-05, 5.02992448e-04,
    -1.29088293e-04};
static const double SQRT1_2 = 0.70710678118654752440;
static const double INV_SQRT_2PI = 0.39894228040143267794;

/* arg[i] = -z^2 + P(2t - 1) and t[i], z = |x| / sqrt 2 */
FASTOP_CLONES static void erfc_args(const float *x, double *arg, double *t, ptrdiff_t n)
{
    for (ptrdiff_t i = 0; i < n; i++) {
        double z = fabs((double)x[i]) * SQRT1_2;
        double ti = 1.0 / (1.0 + 0.5 * z);
        double s = 2.0 * ti - 1.0;
        double p = P[10];
        p = p * s + P[9];
        p = p * s + P[8];
        p = p * s + P[7];
        p = p * s + P[6];
        p = p * s + P[5];
        p = p * s + P[4];
        p = p * s + P[3];
        p = p * s + P[2];
        p = p * s + P[1];
        p = p * s + P[0];
        arg[i] = p - z * z;
        t[i] = ti;
    }
}

FASTOP_CLONES static void two_phi_from(const float *x, const double *e, const double *t,
                                       double *two_phi, ptrdiff_t n)
{
    for (ptrdiff_t i = 0; i < n; i++) {
        double c = t[i] * e[i];
        two_phi[i] = x[i] < 0 ? c : 2.0 - c;
    }
}

FASTOP_CLONES static void half_neg_square(const float *x, double *y, ptrdiff_t n)
{
    for (ptrdiff_t i = 0; i < n; i++)
        y[i] = -0.5 * (double)x[i] * (double)x[i];
}

void fastop_gelu_phi_f32(const float *x, double *two_phi, double *phi, ptrdiff_t n)
{
    double t[CHUNK];
    for (ptrdiff_t done = 0; done < n; done += CHUNK) {
        ptrdiff_t k = n - done < CHUNK ? n - done : CHUNK;
        erfc_args(x + done, two_phi + done, t, k);
        fastop_vexp_f64(two_phi + done, two_phi + done, k);
        two_phi_from(x + done, two_phi + done, t, two_phi + done, k);
        if (phi) {
            half_neg_square(x + done, phi + done, k);
            fastop_vexp_f64(phi + done, phi + done, k);
            for (ptrdiff_t i = 0; i < k; i++)
                phi[done + i] *= INV_SQRT_2PI;
        }
    }
}
