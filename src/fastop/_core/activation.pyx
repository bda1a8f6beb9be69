# distutils: sources = src/fastop/_core/simd_math_impl.c src/fastop/_core/activation_impl.c
"""Activation kernels with parameters or special functions, and their backward forms
(from x and dout). float32 and float64; any layout (``blockwise.pxd``).

Forward (PaddlePaddle's definitions)::

    gelu(x, approximate=False)   0.5 x (1 + erf(x / sqrt 2))
                 approximate     0.5 x (1 + tanh(u)) = x sigmoid(2u),
                                 u = k (x + 0.044715 x^3),  k = sqrt(2 / pi)
    silu(x)                      x * sigmoid(x)
    leaky_relu(x, negative_slope=0.01)   x if x > 0 else negative_slope * x
    softplus(x, beta=1, threshold=20)    log(1 + exp(beta x)) / beta, x once beta x > threshold

Backward kernels ``<name>_grad(x, dout, ...) -> dx = dout * f'(x)``::

    gelu         0.5 (1 + erf(x / sqrt 2)) + x phi(x),  phi the standard normal density
    approximate  s + 2 x s (1 - s) u',  s = sigmoid(2u),  u' = k (1 + 3 * 0.044715 x^2)
    silu         s (1 + x (1 - s)),  s = sigmoid(x)
    leaky_relu   1 if x > 0 else negative_slope
    softplus     sigmoid(beta x), 1 once beta x > threshold

sigmoid, exp and log run on the SIMD loops of ``simd_math.h``. gelu's erf is libm's for
float64; float32 takes erfc from a fitted approximation in float64 on the SIMD exp
(``activation_impl.c``; libm's scalar erff cost 20x the rest of the step). The
tanh form is computed through sigmoid (1 + tanh(u) = 2 sigmoid(2u)), which keeps its
relative accuracy for very negative x, where 1 + tanh(u) would cancel.
softplus is computed as max(z, 0) + log1p(exp(-|z|)) (z = beta x), accurate for very
negative z too. Attributes: gelu ``ints = [approximate]``; leaky_relu ``f =
[negative_slope]``; softplus ``f = [beta, threshold]``.
"""
from libc.math cimport erf, exp, sqrt
from fastop._core.storage cimport fastop_view, fastop_attrs, FASTOP_FLOAT32, floating_t, view_copy_meta
from fastop._core.kernel cimport CKernel, make_kernel, K_OK, K_ERR_SHAPE, K_ERR_DTYPE
from fastop._core.blockwise cimport run_blocks
from fastop._core.simd_math cimport (fastop_vexp_f32, fastop_vexp_f64, fastop_vlog_f32,
                                     fastop_vlog_f64, fastop_vsigmoid_f32, fastop_vsigmoid_f64)
from fastop._core.kernel import bool_attr

__all__ = ["gelu", "gelu_grad", "silu", "silu_grad", "leaky_relu", "leaky_relu_grad",
           "softplus", "softplus_grad"]

cdef enum:
    GELU = 0
    GELU_TANH = 1
    SILU = 2
    LEAKY_RELU = 3
    SOFTPLUS = 4
    CHUNK = 256                 # elements of the stack buffers
    THREADS_AT = 1 << 15

cdef double SQRT1_2 = sqrt(0.5)
cdef double INV_SQRT_2PI = 1.0 / sqrt(2.0 * 3.141592653589793)
cdef double GELU_K = sqrt(2.0 / 3.141592653589793)
cdef double GELU_C = 0.044715

cdef extern from "activation_impl.h" nogil:
    void fastop_gelu_phi_f32(const float* x, double* two_phi, double* phi, ptrdiff_t n)


ctypedef struct Act:
    int op
    int dtype
    double a                    # negative_slope or beta
    double threshold


# --------------------------------------------------------------------------- formulas

cdef void _log1p_exp_neg_abs(const floating_t* x, floating_t a, floating_t* out,
                             ptrdiff_t n) noexcept nogil:
    """out = log1p(exp(-|a x|)) for n <= CHUNK elements, on the SIMD exp and log: log1p(e)
    as log(u) * e / (u - 1), u = 1 + e (Kahan's identity: as accurate as log, also where
    e is below the rounding of 1 + e), so softplus keeps its relative accuracy for very
    negative inputs."""
    cdef floating_t u[CHUNK]
    cdef floating_t lg[CHUNK]
    cdef ptrdiff_t i
    for i in range(n):
        out[i] = -a * x[i] if a * x[i] > 0 else a * x[i]
    _vexp(out, out, n)
    for i in range(n):
        u[i] = 1 + out[i]
    _vlog(u, lg, n)
    for i in range(n):
        out[i] = out[i] if u[i] == 1 else lg[i] * out[i] / (u[i] - 1)


cdef inline void _vexp(const floating_t* x, floating_t* y, ptrdiff_t n) noexcept nogil:
    if floating_t is float:
        fastop_vexp_f32(x, y, n)
    else:
        fastop_vexp_f64(x, y, n)


cdef inline void _vlog(const floating_t* x, floating_t* y, ptrdiff_t n) noexcept nogil:
    if floating_t is float:
        fastop_vlog_f32(x, y, n)
    else:
        fastop_vlog_f64(x, y, n)


cdef inline void _sigmoid(const floating_t* x, floating_t* y, ptrdiff_t n) noexcept nogil:
    if floating_t is float:
        fastop_vsigmoid_f32(x, y, n)
    else:
        fastop_vsigmoid_f64(x, y, n)


cdef void _forward(const Act* c, const floating_t* x, floating_t* y, ptrdiff_t n) noexcept nogil:
    """y = f(x) for n <= CHUNK contiguous elements (y may be x)."""
    cdef floating_t t[CHUNK]
    cdef double p2[CHUNK]
    cdef floating_t v, a = <floating_t>c.a, th = <floating_t>c.threshold
    cdef ptrdiff_t i
    if c.op == GELU:
        if floating_t is float:
            fastop_gelu_phi_f32(x, p2, NULL, n)
            for i in range(n):
                y[i] = <float>(0.5 * x[i] * p2[i])
        else:
            for i in range(n):
                y[i] = 0.5 * x[i] * (1 + erf(x[i] * SQRT1_2))
    elif c.op == GELU_TANH:
        # 0.5 (1 + tanh(u)) = sigmoid(2u): no cancellation for very negative x
        for i in range(n):
            t[i] = <floating_t>(2 * GELU_K) * (x[i] + <floating_t>GELU_C * x[i] * x[i] * x[i])
        _sigmoid(t, t, n)
        for i in range(n):
            y[i] = x[i] * t[i]
    elif c.op == SILU:
        _sigmoid(x, t, n)
        for i in range(n):
            y[i] = x[i] * t[i]
    elif c.op == LEAKY_RELU:
        for i in range(n):
            y[i] = x[i] if x[i] > 0 else a * x[i]
    else:
        _log1p_exp_neg_abs(x, a, t, n)
        for i in range(n):
            v = a * x[i]
            y[i] = x[i] if v > th else ((v if v > 0 else 0) + t[i]) / a


cdef void _backward(const Act* c, const floating_t* x, const floating_t* dy, floating_t* dx,
                    ptrdiff_t n) noexcept nogil:
    """dx = dy * f'(x) for n <= CHUNK contiguous elements (dx may be x or dy)."""
    cdef floating_t t[CHUNK]
    cdef double p2[CHUNK]
    cdef double ph[CHUNK]
    cdef floating_t v, d, a = <floating_t>c.a, th = <floating_t>c.threshold
    cdef ptrdiff_t i
    if c.op == GELU:
        if floating_t is float:
            fastop_gelu_phi_f32(x, p2, ph, n)
            for i in range(n):
                dx[i] = <float>(dy[i] * (0.5 * p2[i] + x[i] * ph[i]))
        else:
            for i in range(n):
                v = x[i]
                d = 0.5 * (1 + erf(v * SQRT1_2)) + v * INV_SQRT_2PI * exp(-0.5 * v * v)
                dx[i] = dy[i] * d
    elif c.op == GELU_TANH:
        # d/dx x s(2u) = s + 2 x s (1 - s) u',  u' = k (1 + 3 c x^2)
        for i in range(n):
            t[i] = <floating_t>(2 * GELU_K) * (x[i] + <floating_t>GELU_C * x[i] * x[i] * x[i])
        _sigmoid(t, t, n)
        for i in range(n):
            v = x[i]
            d = t[i] + 2 * v * t[i] * (1 - t[i]) * <floating_t>GELU_K * (
                1 + 3 * <floating_t>GELU_C * v * v)
            dx[i] = dy[i] * d
    elif c.op == SILU:
        _sigmoid(x, t, n)
        for i in range(n):
            dx[i] = dy[i] * t[i] * (1 + x[i] * (1 - t[i]))
    elif c.op == LEAKY_RELU:
        for i in range(n):
            dx[i] = dy[i] if x[i] > 0 else a * dy[i]
    else:
        for i in range(n):
            t[i] = a * x[i]
        _sigmoid(t, t, n)
        for i in range(n):
            dx[i] = dy[i] if a * x[i] > th else dy[i] * t[i]


# --------------------------------------------------------------------------- blocks

cdef int _forward_block(void* ctx, char** p, ptrdiff_t n, ptrdiff_t start) noexcept nogil:
    """p: out, x."""
    cdef const Act* c = <const Act*>ctx
    cdef ptrdiff_t done = 0, k
    while done < n:
        k = min(<ptrdiff_t>CHUNK, n - done)
        if c.dtype == FASTOP_FLOAT32:
            _forward(c, <const float*>p[1] + done, <float*>p[0] + done, k)
        else:
            _forward(c, <const double*>p[1] + done, <double*>p[0] + done, k)
        done += k
    return K_OK


cdef int _backward_block(void* ctx, char** p, ptrdiff_t n, ptrdiff_t start) noexcept nogil:
    """p: dx, x, dout."""
    cdef const Act* c = <const Act*>ctx
    cdef ptrdiff_t done = 0, k
    while done < n:
        k = min(<ptrdiff_t>CHUNK, n - done)
        if c.dtype == FASTOP_FLOAT32:
            _backward(c, <const float*>p[1] + done, <const float*>p[2] + done,
                      <float*>p[0] + done, k)
        else:
            _backward(c, <const double*>p[1] + done, <const double*>p[2] + done,
                      <double*>p[0] + done, k)
        done += k
    return K_OK


cdef int _launch(int op, const fastop_attrs* a, fastop_view** ins, int n_in,
                 fastop_view* out) noexcept nogil:
    cdef Act c
    cdef fastop_view* operands[3]
    c.op = op
    c.dtype = ins[0].dtype
    c.a = a.f[0]
    c.threshold = a.f[1]
    operands[0], operands[1] = out, ins[0]
    if n_in == 2:
        operands[2] = ins[1]
    return run_blocks(_forward_block if n_in == 1 else _backward_block, &c, operands, 1,
                      n_in + 1, THREADS_AT)


# --------------------------------------------------------------------------- inference

cdef int _infer_same(fastop_view** ins, int n_in, fastop_view* outs, int n_out,
                     const fastop_attrs* a) noexcept nogil:
    """x (and dout: same shape and dtype) -> out like x."""
    cdef int d
    if n_in == 2:
        if ins[1].dtype != ins[0].dtype:
            return K_ERR_DTYPE
        if ins[1].ndim != ins[0].ndim:
            return K_ERR_SHAPE
        for d in range(ins[0].ndim):
            if ins[0].shape[d] != ins[1].shape[d] and ins[0].shape[d] >= 0 \
                    and ins[1].shape[d] >= 0:
                return K_ERR_SHAPE
    view_copy_meta(ins[0], &outs[0])
    return K_OK


# --------------------------------------------------------------------------- kernels

cdef int _k_gelu(fastop_view** ins, int n_in, fastop_view** outs, int n_out,
                 const fastop_attrs* a) noexcept nogil:
    return _launch(GELU_TANH if a.ints[0] else GELU, a, ins, n_in, outs[0])


cdef int _k_silu(fastop_view** ins, int n_in, fastop_view** outs, int n_out,
                 const fastop_attrs* a) noexcept nogil:
    return _launch(SILU, a, ins, n_in, outs[0])


cdef int _k_leaky_relu(fastop_view** ins, int n_in, fastop_view** outs, int n_out,
                       const fastop_attrs* a) noexcept nogil:
    return _launch(LEAKY_RELU, a, ins, n_in, outs[0])


cdef int _k_softplus(fastop_view** ins, int n_in, fastop_view** outs, int n_out,
                     const fastop_attrs* a) noexcept nogil:
    return _launch(SOFTPLUS, a, ins, n_in, outs[0])


def _number(attrs, name, default):
    value = attrs.get(name, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"attribute '{name}' must be a number, got {value!r}")
    return float(value)


def _pack_gelu(attrs):
    return [1 if bool_attr(attrs, "approximate", False) else 0], [0.0, 0.0]


def _pack_none(attrs):
    return [], [0.0, 0.0]


def _pack_leaky_relu(attrs):
    return [], [_number(attrs, "negative_slope", 0.01), 0.0]


def _pack_softplus(attrs):
    beta = _number(attrs, "beta", 1.0)
    if beta == 0:
        raise ValueError("attribute 'beta' must not be 0")
    return [], [beta, _number(attrs, "threshold", 20.0)]


cdef tuple _pair(str name, tuple attr_names, object packer,
                 int (*fn)(fastop_view**, int, fastop_view**, int,
                           const fastop_attrs*) noexcept nogil):
    """A forward kernel (x) -> out and its backward (x, dout) -> dx, on one function (it
    tells them apart by their number of inputs)."""
    cdef CKernel forward = make_kernel(name, ("x",), ("out",), _infer_same,
                                       NULL, NULL, NULL, fn, fn, 0, attr_names, packer,
                                       4096, True)
    cdef CKernel backward = make_kernel(f"{name}_grad", ("x", "dout"), ("dx",),
                                        _infer_same, NULL, NULL, NULL, fn, fn, 0, attr_names,
                                        packer, 4096, True)
    backward.reasons = {K_ERR_SHAPE: "x and dout must have one shape",
                        K_ERR_DTYPE: "x and dout must have one dtype"}
    return forward, backward


gelu, gelu_grad = _pair("gelu", ("approximate",), _pack_gelu, _k_gelu)
silu, silu_grad = _pair("silu", (), _pack_none, _k_silu)
leaky_relu, leaky_relu_grad = _pair("leaky_relu", ("negative_slope",), _pack_leaky_relu,
                                    _k_leaky_relu)
softplus, softplus_grad = _pair("softplus", ("beta", "threshold"), _pack_softplus,
                                _k_softplus)
