/* Vectorized exp, log, tanh, sigmoid and relu (see simd_math.h for the contract).
 *
 * Each function is written once, as a branch-free scalar formula (selects instead of
 * branches, bit casts through memcpy, rounding by the 1.5 * 2^p "magic number" add), so
 * that GCC vectorizes the loop around it. The loop is compiled three times: for
 * x86-64-v4 (AVX-512, 512-bit vectors), x86-64-v3 (AVX2 + FMA) and the baseline; the
 * first call picks the widest one the CPU runs (__builtin_cpu_supports). The build has
 * no -march flag, so this is how one wheel gets the fast paths.
 *
 * Algorithms (Cody-Waite range reduction + polynomials). Measured max error against
 * float64 over all float32 inputs: exp 1.0, log 1.9, tanh 3.3, sigmoid 2.6 ULP;
 * float64: exp 1.0, log 2.0, tanh 2.3, sigmoid 2.6 ULP.
 *   exp(x)   = 2^k * (1 + expm1(r)),  x = k ln2 + r, |r| <= ln2/2; 2^k applied as two
 *              factors so that results in the subnormal range and overflow come out right.
 *   tanh(x)  = sign(x) * e / (e + 2), e = expm1(2|x|) = 2^k expm1(r) + (2^k - 1): no
 *              cancellation near 0, exactly +-1 once |x| is large.
 *   sigmoid  = 1 / (1 + z) for x >= 0, z / (1 + z) for x < 0, z = exp(-|x|).
 *   log(x)   = k ln2 + 2 atanh(s), x = 2^k m, m in [sqrt(1/2), sqrt(2)), s = (m-1)/(m+1).
 * expm1(r) is a fitted polynomial (float32) or a Taylor polynomial (float64), atanh(s)
 * a Taylor polynomial; their truncation error is below a quarter ULP.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "simd_math.h"

#define INLINE static inline __attribute__((always_inline))

INLINE float f32_from_bits(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
INLINE uint32_t f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
INLINE double f64_from_bits(uint64_t u) { double f; memcpy(&f, &u, 8); return f; }
INLINE uint64_t f64_bits(double f) { uint64_t u; memcpy(&u, &f, 8); return u; }

/* ----------------------------------------------------------------------- float32 */

static const float LOG2E_F = 1.44269504088896341f;
static const float LN2_HI_F = 0.693359375f;            /* 8 significant bits: k*hi exact */
static const float LN2_LO_F = -2.12194440e-4f;
static const float ROUND_F = 12582912.0f;              /* 1.5 * 2^23 */

/* (expm1(r) - r) / r^2 for |r| <= ln2/2: a degree-4 polynomial fitted for the
 * relative error of expm1 (3e-9, a twentieth of an ULP). */
static const float EXPM1_C0 = 0.4999999701976776f, EXPM1_C1 = 0.1666651964187622f,
                   EXPM1_C2 = 0.04166731238365173f, EXPM1_C3 = 0.008368815295398235f,
                   EXPM1_C4 = 0.0013881729682907462f;

/* Reduce x (|x| <= 128) to x = k ln2 + r; returns r, sets the integer k. */
INLINE float reduce_ln2_f32(float x, int32_t *k)
{
    float shifted = x * LOG2E_F + ROUND_F;
    float kf = shifted - ROUND_F;
    *k = (int32_t)(f32_bits(shifted) - f32_bits(ROUND_F));
    float r = kf * -LN2_HI_F + x;
    return kf * -LN2_LO_F + r;
}

INLINE float pow2i_f32(int32_t k) { return f32_from_bits((uint32_t)(k + 127) << 23); }

INLINE float exp_f32(float x)
{
    /* Clamp to where exp is a normal, subnormal or overflowing float; nan passes. */
    float xc = x > 89.0f ? 89.0f : x;
    xc = xc < -105.0f ? -105.0f : xc;
    int32_t k;
    float r = reduce_ln2_f32(xc, &k);
    float q = EXPM1_C4;
    q = q * r + EXPM1_C3;
    q = q * r + EXPM1_C2;
    q = q * r + EXPM1_C1;
    q = q * r + EXPM1_C0;
    float e = (r * r) * q + r + 1.0f;
    int32_t k1 = k >> 1;
    return e * pow2i_f32(k1) * pow2i_f32(k - k1);
}

/* tanh(|x|) = e / (e + 2) with e = expm1(2|x|) = 2^k expm1(2s) + (2^k - 1), where
 * 2|x| = k ln2 + 2s. expm1(2s) = s (2 + s Q(s)) with Q(s) = 4 q(2s): the fitted
 * coefficients times powers of two, so the doubling costs nothing. */
INLINE float tanh_f32(float x)
{
    float a = fabsf(x);
    a = a > 10.0f ? 10.0f : a;                    /* tanh(10) rounds to 1 */
    float shifted = a * (2.0f * LOG2E_F) + ROUND_F;
    float kf = shifted - ROUND_F;
    int32_t k = (int32_t)(f32_bits(shifted) - f32_bits(ROUND_F));
    float s = kf * (-0.5f * LN2_HI_F) + a;
    s = kf * (-0.5f * LN2_LO_F) + s;
    float q = 64.0f * EXPM1_C4;
    q = q * s + 32.0f * EXPM1_C3;
    q = q * s + 16.0f * EXPM1_C2;
    q = q * s + 8.0f * EXPM1_C1;
    q = q * s + 4.0f * EXPM1_C0;
    float em = (q * s + 2.0f) * s;
    float scale = pow2i_f32(k);
    float e = em * scale + (scale - 1.0f);
    return copysignf(e / (e + 2.0f), x);
}

INLINE float sigmoid_f32(float x)
{
    float z = exp_f32(-fabsf(x));
    float r = 1.0f / (1.0f + z);
    return x < 0.0f ? z * r : r;
}

INLINE float log_f32(float x)
{
    /* Subnormals: scale into the normal range first. */
    int tiny = x < 1.17549435e-38f;
    float xs = tiny ? x * 8388608.0f : x;
    uint32_t ix = f32_bits(xs) - 0x3f3504f3u;             /* bits of sqrt(1/2) */
    int32_t k = ((int32_t)ix >> 23) - (tiny ? 23 : 0);
    float m = f32_from_bits((ix & 0x007fffffu) + 0x3f3504f3u);
    float f = m - 1.0f;
    float s = f / (f + 2.0f);
    float z = s * s;
    float p = 2.0f / 11;
    p = p * z + 2.0f / 9;
    p = p * z + 2.0f / 7;
    p = p * z + 2.0f / 5;
    p = p * z + 2.0f / 3;
    float kf = (float)k;
    float y = kf * LN2_HI_F + (kf * LN2_LO_F + (s * z * p + 2.0f * s));
    y = x == INFINITY ? x : y;
    return x > 0.0f ? y : (x == 0.0f ? -INFINITY : NAN);
}

INLINE float relu_f32(float x) { return x < 0.0f ? 0.0f : x; }

/* ----------------------------------------------------------------------- float64 */

static const double LOG2E_D = 1.4426950408889634074;
static const double LN2_HI_D = 6.93147180369123816490e-01;  /* low 32 bits zero */
static const double LN2_LO_D = 1.90821492927058770002e-10;
static const double ROUND_D = 6755399441055744.0;           /* 1.5 * 2^52 */

/* expm1(r) for |r| <= ln2/2: Taylor to r^14 (truncation < 3e-19 relative). */
INLINE double expm1_poly_f64(double r)
{
    double p = 1.0 / 87178291200.0;
    p = p * r + 1.0 / 6227020800.0;
    p = p * r + 1.0 / 479001600.0;
    p = p * r + 1.0 / 39916800.0;
    p = p * r + 1.0 / 3628800.0;
    p = p * r + 1.0 / 362880.0;
    p = p * r + 1.0 / 40320.0;
    p = p * r + 1.0 / 5040.0;
    p = p * r + 1.0 / 720.0;
    p = p * r + 1.0 / 120.0;
    p = p * r + 1.0 / 24.0;
    p = p * r + 1.0 / 6.0;
    p = p * r + 0.5;
    return (p * r) * r + r;
}

INLINE double reduce_ln2_f64(double x, int64_t *k)
{
    double shifted = x * LOG2E_D + ROUND_D;
    double kf = shifted - ROUND_D;
    *k = (int64_t)(f64_bits(shifted) - f64_bits(ROUND_D));
    double r = kf * -LN2_HI_D + x;
    return kf * -LN2_LO_D + r;
}

INLINE double pow2i_f64(int64_t k) { return f64_from_bits((uint64_t)(k + 1023) << 52); }

INLINE double exp_f64(double x)
{
    double xc = x > 710.0 ? 710.0 : x;
    xc = xc < -746.0 ? -746.0 : xc;
    int64_t k;
    double r = reduce_ln2_f64(xc, &k);
    int64_t k1 = k >> 1;
    return (1.0 + expm1_poly_f64(r)) * pow2i_f64(k1) * pow2i_f64(k - k1);
}

INLINE double tanh_f64(double x)
{
    double a = fabs(x) * 2.0;
    a = a > 40.0 ? 40.0 : a;                      /* tanh(20) rounds to 1 */
    int64_t k;
    double r = reduce_ln2_f64(a, &k);
    double scale = pow2i_f64(k);
    double e = expm1_poly_f64(r) * scale + (scale - 1.0);
    return copysign(e / (e + 2.0), x);
}

INLINE double sigmoid_f64(double x)
{
    double z = exp_f64(-fabs(x));
    double r = 1.0 / (1.0 + z);
    return x < 0.0 ? z * r : r;
}

INLINE double log_f64(double x)
{
    int tiny = x < 2.2250738585072014e-308;
    double xs = tiny ? x * 18014398509481984.0 : x;                 /* 2^54 */
    uint64_t ix = f64_bits(xs) - 0x3fe6a09e667f3bcdull;             /* sqrt(1/2) */
    /* the exponent from the high word: AVX2 has 32-bit but no 64-bit arithmetic shifts */
    int32_t k = ((int32_t)(uint32_t)(ix >> 32) >> 20) - (tiny ? 54 : 0);
    double m = f64_from_bits((ix & 0x000fffffffffffffull) + 0x3fe6a09e667f3bcdull);
    double f = m - 1.0;
    double s = f / (f + 2.0);
    double z = s * s;
    /* 2 atanh(s) = 2s + 2s^3/3 + ...; |s| <= 0.1716, terms to s^23. */
    double p = 2.0 / 23;
    p = p * z + 2.0 / 21;
    p = p * z + 2.0 / 19;
    p = p * z + 2.0 / 17;
    p = p * z + 2.0 / 15;
    p = p * z + 2.0 / 13;
    p = p * z + 2.0 / 11;
    p = p * z + 2.0 / 9;
    p = p * z + 2.0 / 7;
    p = p * z + 2.0 / 5;
    p = p * z + 2.0 / 3;
    double kf = (double)k;
    double y = kf * LN2_HI_D + (kf * LN2_LO_D + (s * z * p + 2.0 * s));
    y = x == INFINITY ? x : y;
    return x > 0.0 ? y : (x == 0.0 ? -INFINITY : NAN);
}

INLINE double relu_f64(double x) { return x < 0.0 ? 0.0 : x; }

/* ----------------------------------------------------------------------- binary */

/* The loop of each binary op; the switch sits outside the loops. maximum/minimum let
 * nan through from either side, like numpy. */
#define BINARY_BODY(T)                                                              \
    ptrdiff_t i;                                                                    \
    switch (op) {                                                                   \
    case FASTOP_BIN_ADD: for (i = 0; i < n; i++) y[i] = a[i] + b[i]; break;         \
    case FASTOP_BIN_SUB: for (i = 0; i < n; i++) y[i] = a[i] - b[i]; break;         \
    case FASTOP_BIN_MUL: for (i = 0; i < n; i++) y[i] = a[i] * b[i]; break;         \
    case FASTOP_BIN_DIV: for (i = 0; i < n; i++) y[i] = a[i] / b[i]; break;         \
    case FASTOP_BIN_MAX:                                                            \
        for (i = 0; i < n; i++) y[i] = (a[i] >= b[i] || a[i] != a[i]) ? a[i] : b[i];\
        break;                                                                      \
    case FASTOP_BIN_MIN:                                                            \
        for (i = 0; i < n; i++) y[i] = (a[i] <= b[i] || a[i] != a[i]) ? a[i] : b[i];\
        break;                                                                      \
    case FASTOP_BIN_TANH_GRAD:                                                      \
        for (i = 0; i < n; i++) y[i] = b[i] * ((T)1 - a[i] * a[i]);                 \
        break;                                                                      \
    case FASTOP_BIN_SIGMOID_GRAD:                                                   \
        for (i = 0; i < n; i++) y[i] = b[i] * a[i] * ((T)1 - a[i]);                 \
        break;                                                                      \
    case FASTOP_BIN_RELU_GRAD:                                                      \
        for (i = 0; i < n; i++) y[i] = a[i] > 0 ? b[i] : (T)0;                      \
        break;                                                                      \
    case FASTOP_BIN_SQRT_GRAD:                                                      \
        for (i = 0; i < n; i++) y[i] = (T)0.5 * b[i] / a[i];                        \
        break;                                                                      \
    default: break;                                                                 \
    }

/* ----------------------------------------------------------------------- exp-sum */

/* Softmax's fused row step: y = exp(x - shift) and its sum in the same pass. Each block
 * of EXP_SUM_BLOCK elements is summed in W lanes (the nested loop vectorizes: lane j
 * adds element i + j, no reordering of float additions is needed), the lanes as a tree,
 * and the block sums in float64, so the sum's rounding error does not grow with n; the
 * last n % W elements are summed in T, in order (so a row shorter than a vector sums
 * exactly as a plain loop does).
 * Per vector of x, the same offset of the next row (next_x, next_y) is prefetched: the
 * rows' first pass (their max) then finds them in cache instead of waiting on memory
 * while this row's exp computes. Elements past the last whole vector take the scalar
 * loop in _v3/_base and a padded vector in _v4 (its padding is not summed). */
#define EXP_SUM_BLOCK 512
#define EXP_SUM_BODY(T, fn, W)                                                      \
    ptrdiff_t body = n - n % W;                                                     \
    double total = 0;                                                               \
    for (ptrdiff_t start = 0; start < body; start += EXP_SUM_BLOCK) {               \
        ptrdiff_t end = body - start < EXP_SUM_BLOCK ? body : start + EXP_SUM_BLOCK; \
        T acc[W] = {0};                                                             \
        for (ptrdiff_t i = start; i < end; i += W) {                                \
            if (next_x != NULL) {                                                   \
                __builtin_prefetch(next_x + i, 0, 3);                               \
                __builtin_prefetch(next_y + i, 1, 3);                               \
            }                                                                       \
            _Pragma("GCC ivdep")  /* y[k] depends on x[k] only: in place is fine */ \
            for (int j = 0; j < W; j++) {                                           \
                T e = fn(x[i + j] - shift);                                         \
                y[i + j] = e;                                                       \
                acc[j] += e;                                                        \
            }                                                                       \
        }                                                                           \
        for (int w = W / 2; w > 0; w /= 2)                                          \
            for (int j = 0; j < w; j++)                                             \
                acc[j] += acc[j + w];                                               \
        total += acc[0];                                                            \
    }
#define EXP_SUM_SCALAR_TAIL(T, fn)                                                  \
    T tail = 0;                                                                     \
    for (ptrdiff_t i = body; i < n; i++) {                                          \
        y[i] = fn(x[i] - shift);                                                    \
        tail += y[i];                                                               \
    }                                                                               \
    return (T)(total + tail);
#define EXP_SUM_PARAMS(T)                                                           \
    (const T *x, T shift, T *y, ptrdiff_t n, const T *next_x, const T *next_y)

/* y = a * x (the scaling loop; GCC vectorizes it for each build). */
#define SCALE_BODY(T)                                                               \
    for (ptrdiff_t i = 0; i < n; i++)                                               \
        y[i] = a * x[i];

/* ----------------------------------------------------------------------- dispatch */

/* 0 = baseline, 1 = x86-64-v3 (AVX2+FMA), 2 = x86-64-v4 (AVX-512): the best the CPU
 * runs, lowered by the environment variable FASTOP_SIMD_LEVEL (tests use it to check
 * every build on one machine). */
static int isa_level(void)
{
    static int cached = -1;               /* every thread computes the same value */
    int level = __atomic_load_n(&cached, __ATOMIC_RELAXED);
    if (level < 0) {
        int best = 0;
#if defined(__x86_64__) && defined(__GNUC__)
        __builtin_cpu_init();
        if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq")
                && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl"))
            best = 2;
        else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
            best = 1;
#endif
        const char *forced = getenv("FASTOP_SIMD_LEVEL");
        if (forced != NULL && forced[0] >= '0' && forced[0] < '0' + best)
            best = forced[0] - '0';
        level = best;
        __atomic_store_n(&cached, level, __ATOMIC_RELAXED);
    }
    return level;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define TARGET_V4 __attribute__((target("arch=x86-64-v4,prefer-vector-width=512")))
#define TARGET_V3 __attribute__((target("arch=x86-64-v3")))

/* Results of FASTOP_STREAM_MIN_BYTES or more go to memory with non-temporal stores:
 * they would not stay in cache anyway, and a streaming store skips reading each line
 * before writing it (a third of the memory traffic of y = f(x)). Unary functions
 * stream each vector as it is computed, so computing overlaps the memory traffic;
 * binary ones (little computing) go through an L1 buffer of STREAM_CHUNK_BYTES. The
 * chunk is kept short so that loading the inputs and streaming the result interleave:
 * with 8 KB chunks (reads, then a burst of writes) y = a + b at 1e7 float32 took
 * 2.45-2.6 ms on one Zen 5 core, with 2 KB chunks 2.0-2.15 ms (plain stores: 2.5 ms). */
#define STREAM_CHUNK_BYTES 2048

/* How many of n elements of `itemsize` bytes from y come before y's next cache line
 * boundary (y aligned to itemsize): the ones a streaming loop stores as usual. */
INLINE ptrdiff_t line_head(const void *y, size_t itemsize, ptrdiff_t n)
{
    ptrdiff_t head = (ptrdiff_t)(((64 - ((uintptr_t)y & 63)) & 63) / itemsize);
    return head < n ? head : n;
}

TARGET_V4 static void stream_copy_v4(char *dst, const char *src, ptrdiff_t bytes)
{
    ptrdiff_t head = line_head(dst, 1, bytes);
    memcpy(dst, src, (size_t)head);
    dst += head, src += head, bytes -= head;
    for (; bytes >= 64; bytes -= 64, dst += 64, src += 64)
        _mm512_stream_si512((__m512i *)dst, _mm512_loadu_si512(src));
    memcpy(dst, src, (size_t)bytes);
}

/* The last bytes (< 64) of a run into a zero-padded vector buffer and back, with byte-
 * masked vector loads and stores: the buffer is written and read whole, so reading it
 * back is forwarded from the store (a memcpy of the tail is not, and stalls), and the
 * masked-off bytes past the run are never touched. */
TARGET_V4 INLINE void tail_load_v4(void *buf, const void *x, ptrdiff_t bytes)
{
    __mmask64 keep = _cvtu64_mask64(((uint64_t)1 << bytes) - 1);
    _mm512_store_si512(buf, _mm512_maskz_loadu_epi8(keep, x));
}

TARGET_V4 INLINE void tail_store_v4(void *y, const void *buf, ptrdiff_t bytes)
{
    __mmask64 keep = _cvtu64_mask64(((uint64_t)1 << bytes) - 1);
    _mm512_mask_storeu_epi8(y, keep, _mm512_load_si512(buf));
}

/* One function, four builds, one dispatcher. x == y (in place) is fine: element i is
 * read before it is written (GCC versions the loops for aliasing).
 *   _v4:        AVX-512; the last n % W elements (less than a vector) go through a
 *               padded one-vector buffer (masked loads and stores) instead of GCC's
 *               scalar epilogue, so short rows (GEMM epilogues, small tensors) stay
 *               vectorized;
 *   _v4_stream: AVX-512 with non-temporal stores (y aligned to its element size);
 *   _v3, _base: AVX2+FMA and the baseline. */
#define DEFINE_VFUNC(name, T, fn)                                                   \
    TARGET_V4 static void name##_v4(const T *x, T *y, ptrdiff_t n)                 \
    {                                                                               \
        enum { W = 64 / sizeof(T) };                                                \
        ptrdiff_t body = n - n % W;                                                 \
        for (ptrdiff_t i = 0; i < body; i++)                                        \
            y[i] = fn(x[i]);                                                        \
        if (body < n) {                                                             \
            T buf[W] __attribute__((aligned(64)));                                  \
            ptrdiff_t bytes = (n - body) * (ptrdiff_t)sizeof(T);                    \
            tail_load_v4(buf, x + body, bytes);                                     \
            for (int i = 0; i < W; i++)                                             \
                buf[i] = fn(buf[i]);                                                \
            tail_store_v4(y + body, buf, bytes);                                    \
        }                                                                           \
    }                                                                               \
    TARGET_V4 static void name##_v4_stream(const T *x, T *y, ptrdiff_t n)          \
    {                                                                               \
        enum { W = 64 / sizeof(T) };                                                \
        ptrdiff_t head = line_head(y, sizeof(T), n);                                \
        name##_v4(x, y, head);                                                      \
        x += head, y += head, n -= head;                                            \
        ptrdiff_t body = n - n % W;                                                 \
        for (ptrdiff_t i = 0; i < body; i += W) {                                   \
            T v[W] __attribute__((aligned(64)));                                    \
            for (int j = 0; j < W; j++)                                             \
                v[j] = fn(x[i + j]);                                                \
            _mm512_stream_si512((__m512i *)(y + i), _mm512_load_si512(v));          \
        }                                                                           \
        name##_v4(x + body, y + body, n - body);                                    \
        _mm_sfence();                                                               \
    }                                                                               \
    TARGET_V3 static void name##_v3(const T *x, T *y, ptrdiff_t n)                 \
    { for (ptrdiff_t i = 0; i < n; i++) y[i] = fn(x[i]); }                          \
    static void name##_base(const T *x, T *y, ptrdiff_t n)                          \
    { for (ptrdiff_t i = 0; i < n; i++) y[i] = fn(x[i]); }                          \
    void name(const T *x, T *y, ptrdiff_t n)                                        \
    {                                                                               \
        int level = isa_level();                                                    \
        if (level == 2 && n * (ptrdiff_t)sizeof(T) >= FASTOP_STREAM_MIN_BYTES       \
                && (uintptr_t)y % sizeof(T) == 0)                                   \
            name##_v4_stream(x, y, n);                                              \
        else if (level == 2)                                                        \
            name##_v4(x, y, n);                                                     \
        else if (level == 1)                                                        \
            name##_v3(x, y, n);                                                     \
        else                                                                        \
            name##_base(x, y, n);                                                   \
    }

#define DEFINE_VBINARY(name, T)                                                     \
    TARGET_V4 static void name##_v4(int op, const T *a, const T *b, T *y, ptrdiff_t n) \
    { BINARY_BODY(T) }                                                              \
    TARGET_V3 static void name##_v3(int op, const T *a, const T *b, T *y, ptrdiff_t n) \
    { BINARY_BODY(T) }                                                              \
    static void name##_base(int op, const T *a, const T *b, T *y, ptrdiff_t n)      \
    { BINARY_BODY(T) }                                                              \
    /* The elements before y's first cache line boundary are stored as usual, so   \
     * every chunk after them streams whole lines (a chunk ending inside a line    \
     * made its neighbours write that line with plain stores, reading it first:    \
     * 2.9 ms instead of 2.0 for 1e7 float32 at numpy's 16-byte alignment). */     \
    TARGET_V4 static void name##_v4_stream(int op, const T *a, const T *b, T *y,   \
                                           ptrdiff_t n)                             \
    {                                                                               \
        enum { CHUNK = STREAM_CHUNK_BYTES / sizeof(T) };                            \
        T buf[CHUNK] __attribute__((aligned(64)));                                  \
        ptrdiff_t head = line_head(y, sizeof(T), n);                                \
        name##_v4(op, a, b, y, head);                                               \
        for (ptrdiff_t i = head; i < n; i += CHUNK) {                               \
            ptrdiff_t m = n - i < CHUNK ? n - i : CHUNK;                            \
            name##_v4(op, a + i, b + i, buf, m);                                    \
            stream_copy_v4((char *)(y + i), (const char *)buf, m * (ptrdiff_t)sizeof(T)); \
        }                                                                           \
        _mm_sfence();                                                               \
    }                                                                               \
    void name(int op, const T *a, const T *b, T *y, ptrdiff_t n)                    \
    {                                                                               \
        int level = isa_level();                                                    \
        if (level == 2 && n * (ptrdiff_t)sizeof(T) >= FASTOP_STREAM_MIN_BYTES       \
                && (uintptr_t)y % sizeof(T) == 0)                                   \
            name##_v4_stream(op, a, b, y, n);                                       \
        else if (level == 2) name##_v4(op, a, b, y, n);                             \
        else if (level == 1) name##_v3(op, a, b, y, n);                             \
        else name##_base(op, a, b, y, n);                                           \
    }
#define DEFINE_VEXP_SUM(name, T, fn)                                                \
    TARGET_V4 static T name##_v4 EXP_SUM_PARAMS(T)                                  \
    {                                                                               \
        enum { W = 64 / sizeof(T) };                                                \
        EXP_SUM_BODY(T, fn, W)                                                      \
        if (body < n) {                                                             \
            T buf[W] __attribute__((aligned(64)));                                  \
            ptrdiff_t bytes = (n - body) * (ptrdiff_t)sizeof(T);                    \
            tail_load_v4(buf, x + body, bytes);                                     \
            for (int j = 0; j < W; j++)                                             \
                buf[j] = fn(buf[j] - shift);                                        \
            tail_store_v4(y + body, buf, bytes);                                    \
            T tail = 0;                                                             \
            for (ptrdiff_t j = 0; j < n - body; j++)                                \
                tail += buf[j];                                                     \
            total += tail;                                                          \
        }                                                                           \
        return (T)total;                                                            \
    }                                                                               \
    TARGET_V3 static T name##_v3 EXP_SUM_PARAMS(T)                                  \
    {                                                                               \
        enum { W = 32 / sizeof(T) };                                                \
        EXP_SUM_BODY(T, fn, W)                                                      \
        EXP_SUM_SCALAR_TAIL(T, fn)                                                  \
    }                                                                               \
    static T name##_base EXP_SUM_PARAMS(T)                                          \
    {                                                                               \
        enum { W = 16 / sizeof(T) };                                                \
        EXP_SUM_BODY(T, fn, W)                                                      \
        EXP_SUM_SCALAR_TAIL(T, fn)                                                  \
    }                                                                               \
    T name EXP_SUM_PARAMS(T)                                                        \
    {                                                                               \
        int level = isa_level();                                                    \
        if (next_y == NULL)                                                         \
            next_x = NULL;                                                          \
        if (level == 2)                                                             \
            return name##_v4(x, shift, y, n, next_x, next_y);                       \
        if (level == 1)                                                             \
            return name##_v3(x, shift, y, n, next_x, next_y);                       \
        return name##_base(x, shift, y, n, next_x, next_y);                         \
    }

/* y = a * x, minus a at y[hot] (see simd_math.h). With stream set (and y aligned to its
 * element size) the AVX-512 build writes whole cache lines with non-temporal stores,
 * subtracting at hot inside the vector that holds it (reading it back after a
 * streaming store would wait on memory), and fences before returning. */
#define DEFINE_VSCALE(name, T)                                                      \
    TARGET_V4 static void name##_v4(const T *x, T a, T *y, ptrdiff_t n)            \
    { SCALE_BODY(T) }                                                               \
    TARGET_V4 static void name##_v4_stream(const T *x, T a, T *y, ptrdiff_t n,     \
                                           ptrdiff_t hot)                           \
    {                                                                               \
        enum { W = 64 / sizeof(T) };                                                \
        ptrdiff_t head = line_head(y, sizeof(T), n);                                \
        ptrdiff_t body = head + (n - head) - (n - head) % W;                        \
        name##_v4(x, a, y, head);                                                   \
        for (ptrdiff_t i = head; i < body; i += W) {                                \
            T v[W] __attribute__((aligned(64)));                                    \
            for (int j = 0; j < W; j++)                                             \
                v[j] = a * x[i + j];                                                \
            if ((size_t)(hot - i) < (size_t)W)                                      \
                v[hot - i] -= a;                                                    \
            _mm512_stream_si512((__m512i *)(y + i), _mm512_load_si512(v));          \
        }                                                                           \
        name##_v4(x + body, a, y + body, n - body);                                 \
        _mm_sfence();                                                               \
        if ((0 <= hot && hot < head) || (body <= hot && hot < n))                   \
            y[hot] -= a;                                                            \
    }                                                                               \
    TARGET_V3 static void name##_v3(const T *x, T a, T *y, ptrdiff_t n)            \
    { SCALE_BODY(T) }                                                               \
    static void name##_base(const T *x, T a, T *y, ptrdiff_t n)                     \
    { SCALE_BODY(T) }                                                               \
    void name(const T *x, T a, T *y, ptrdiff_t n, ptrdiff_t hot, int stream)        \
    {                                                                               \
        int level = isa_level();                                                    \
        if (level == 2 && stream && (uintptr_t)y % sizeof(T) == 0) {                \
            name##_v4_stream(x, a, y, n, hot);                                      \
            return;                                                                 \
        }                                                                           \
        if (level == 2)                                                             \
            name##_v4(x, a, y, n);                                                  \
        else if (level == 1)                                                        \
            name##_v3(x, a, y, n);                                                  \
        else                                                                        \
            name##_base(x, a, y, n);                                                \
        if (0 <= hot && hot < n)                                                    \
            y[hot] -= a;                                                            \
    }
#else
#define DEFINE_VFUNC(name, T, fn)                                                   \
    void name(const T *x, T *y, ptrdiff_t n)                                        \
    { for (ptrdiff_t i = 0; i < n; i++) y[i] = fn(x[i]); }
#define DEFINE_VBINARY(name, T)                                                     \
    void name(int op, const T *a, const T *b, T *y, ptrdiff_t n) { BINARY_BODY(T) }
#define DEFINE_VEXP_SUM(name, T, fn)                                                \
    T name EXP_SUM_PARAMS(T)                                                        \
    {                                                                               \
        enum { W = 16 / sizeof(T) };                                                \
        if (next_y == NULL)                                                         \
            next_x = NULL;                                                          \
        EXP_SUM_BODY(T, fn, W)                                                      \
        EXP_SUM_SCALAR_TAIL(T, fn)                                                  \
    }
#define DEFINE_VSCALE(name, T)                                                      \
    void name(const T *x, T a, T *y, ptrdiff_t n, ptrdiff_t hot, int stream)        \
    {                                                                               \
        SCALE_BODY(T)                                                               \
        if (0 <= hot && hot < n)                                                    \
            y[hot] -= a;                                                            \
    }
#endif

DEFINE_VFUNC(fastop_vexp_f32, float, exp_f32)
DEFINE_VFUNC(fastop_vexp_f64, double, exp_f64)
DEFINE_VFUNC(fastop_vlog_f32, float, log_f32)
DEFINE_VFUNC(fastop_vlog_f64, double, log_f64)
DEFINE_VFUNC(fastop_vtanh_f32, float, tanh_f32)
DEFINE_VFUNC(fastop_vtanh_f64, double, tanh_f64)
DEFINE_VFUNC(fastop_vsigmoid_f32, float, sigmoid_f32)
DEFINE_VFUNC(fastop_vsigmoid_f64, double, sigmoid_f64)
DEFINE_VFUNC(fastop_vrelu_f32, float, relu_f32)
DEFINE_VFUNC(fastop_vrelu_f64, double, relu_f64)
DEFINE_VEXP_SUM(fastop_vexp_shift_sum_f32, float, exp_f32)
DEFINE_VEXP_SUM(fastop_vexp_shift_sum_f64, double, exp_f64)
DEFINE_VSCALE(fastop_vscale_f32, float)
DEFINE_VSCALE(fastop_vscale_f64, double)
DEFINE_VBINARY(fastop_vbinary_f32, float)
DEFINE_VBINARY(fastop_vbinary_f64, double)
