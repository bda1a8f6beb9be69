# distutils: sources = src/fastop/_core/norm_impl.c
"""Layer normalization kernels: forward, and backward from the saved row statistics.

``layer_norm(x, weight?, bias?, epsilon=1e-5, begin_norm_axis=1) -> (out, mean, rstd)``
normalizes every row of x, a row being the elements of the dims from
``begin_norm_axis`` on (PaddlePaddle's convention)::

    mean = sum(x_row) / n,   rstd = 1 / sqrt(sum((x_row - mean)^2) / n + epsilon)
    out  = (x_row - mean) * rstd * weight + bias

``weight`` and ``bias`` (optional) hold one value per element of a row, in any shape of
that size. ``mean`` and ``rstd`` keep x's leading dims and have size 1 in the
normalized ones (so they broadcast against x).

``layer_norm_grad(x, mean, rstd, dout, weight?, begin_norm_axis=1) -> (dx, dweight,
dbias)`` (weight last: the static executor drops absent trailing inputs), with ``xhat = (x - mean) * rstd`` and ``g = dout * weight``::

    dx = rstd * (g - mean_row(g) - xhat * mean_row(g * xhat))
    dweight = sum over rows of dout * xhat,   dbias = sum over rows of dout

(``dweight``/``dbias`` have weight's shape, or the normalized dims' without one).

Rows are computed by the loops of ``norm_impl.c`` (SIMD, two passes over a row while
it is in L1). Rows of C-contiguous operands are used in place; other layouts are
packed row by row into a buffer. Large inputs split rows over threads (backward keeps a
dweight/dbias partial per piece and adds them in piece order, so results do not depend
on timing). Attributes: ``ints = [begin_norm_axis]``, ``f = [epsilon]``.
"""
from libc.stdlib cimport malloc, calloc, free
from fastop._core.storage cimport (fastop_view, fastop_attrs, FASTOP_FLOAT32, floating_t,
                                   itemsize_of, view_is_contiguous, view_element_offset,
                                   view_copy_meta)
from fastop._core.kernel cimport (CKernel, make_kernel, K_OK, K_ERR_ATTR, K_ERR_DTYPE,
                                  K_ERR_SHAPE, K_ERR_MEMORY, get_num_threads, use_threads,
                                  normalize_axis)
from fastop._core.parallel cimport parallel_run
from fastop._core.kernel import int_attr

__all__ = ["layer_norm", "layer_norm_grad"]

cdef extern from "norm_impl.h" nogil:
    void fastop_layer_norm_row_f32(const float* x, float* y, ptrdiff_t n, float eps,
                                   const float* w, const float* b, float* mean, float* rstd)
    void fastop_layer_norm_row_f64(const double* x, double* y, ptrdiff_t n, double eps,
                                   const double* w, const double* b, double* mean,
                                   double* rstd)
    void fastop_layer_norm_grad_row_f32(const float* x, const float* dy, float* dx,
                                        ptrdiff_t n, float mean, float rstd, const float* w,
                                        float* dw, float* db)
    void fastop_layer_norm_grad_row_f64(const double* x, const double* dy, double* dx,
                                        ptrdiff_t n, double mean, double rstd,
                                        const double* w, double* dw, double* db)

cdef enum:
    ROW_COST = 4                # a row element costs about four elementwise ones
    PIECES_PER_THREAD = 4
    MAX_PIECES = 256


ctypedef struct Rows:
    ptrdiff_t nrows, n          # rows, elements per row
    double eps
    bint direct                 # x, dout and out/dx C-contiguous: rows used in place
    const fastop_view* x
    const fastop_view* dy       # backward: dout
    fastop_view* y              # forward: out; backward: dx
    const fastop_view* mean     # forward: written; backward: read
    const fastop_view* rstd
    const char* w               # contiguous weight and bias, or NULL
    const char* b
    char* partials              # backward: dweight, dbias per piece (2 * n each)
    int npieces
    int status


# --------------------------------------------------------------------------- rows

cdef inline const floating_t* _row_in(const fastop_view* v, ptrdiff_t r, ptrdiff_t n,
                                      bint direct, floating_t* buf) noexcept nogil:
    """Row r of v: in place when v is contiguous, else gathered into buf."""
    cdef ptrdiff_t j
    if direct:
        return <const floating_t*>v.data + r * n
    for j in range(n):
        buf[j] = (<const floating_t*>(v.data + view_element_offset(v, r * n + j)))[0]
    return buf


cdef inline void _row_out(fastop_view* v, ptrdiff_t r, ptrdiff_t n,
                          const floating_t* buf) noexcept nogil:
    """Scatter a row computed into buf (the non-direct case)."""
    cdef ptrdiff_t j
    for j in range(n):
        (<floating_t*>(v.data + view_element_offset(v, r * n + j)))[0] = buf[j]


cdef inline floating_t* _at(const fastop_view* v, ptrdiff_t k, floating_t* tag) noexcept nogil:
    return <floating_t*>(v.data + view_element_offset(v, k))


cdef void _forward_rows(Rows* R, ptrdiff_t lo, ptrdiff_t hi, floating_t* tag) noexcept nogil:
    cdef ptrdiff_t r, n = R.n
    cdef floating_t* buf = NULL
    cdef const floating_t* x
    cdef floating_t* y
    cdef floating_t m, s
    if not R.direct:
        buf = <floating_t*>malloc(2 * n * sizeof(floating_t) + 1)
        if buf == NULL:
            R.status = K_ERR_MEMORY
            return
    for r in range(lo, hi):
        x = _row_in(R.x, r, n, R.direct, buf)
        y = <floating_t*>R.y.data + r * n if R.direct else buf + n
        if floating_t is float:
            fastop_layer_norm_row_f32(x, y, n, <float>R.eps, <const float*>R.w,
                                      <const float*>R.b, &m, &s)
        else:
            fastop_layer_norm_row_f64(x, y, n, R.eps, <const double*>R.w,
                                      <const double*>R.b, &m, &s)
        if not R.direct:
            _row_out(R.y, r, n, y)
        _at(R.mean, r, tag)[0] = m
        _at(R.rstd, r, tag)[0] = s
    free(buf)


cdef void _backward_rows(Rows* R, ptrdiff_t lo, ptrdiff_t hi, floating_t* dw,
                         floating_t* db) noexcept nogil:
    cdef ptrdiff_t r, n = R.n
    cdef floating_t* buf = NULL
    cdef const floating_t* x
    cdef const floating_t* dy
    cdef floating_t* dx
    if not R.direct:
        buf = <floating_t*>malloc(3 * n * sizeof(floating_t) + 1)
        if buf == NULL:
            R.status = K_ERR_MEMORY
            return
    for r in range(lo, hi):
        x = _row_in(R.x, r, n, R.direct, buf)
        dy = _row_in(R.dy, r, n, R.direct, buf + n)
        dx = <floating_t*>R.y.data + r * n if R.direct else buf + 2 * n
        if floating_t is float:
            fastop_layer_norm_grad_row_f32(x, dy, dx, n, _at(R.mean, r, dw)[0],
                                           _at(R.rstd, r, dw)[0], <const float*>R.w, dw, db)
        else:
            fastop_layer_norm_grad_row_f64(x, dy, dx, n, _at(R.mean, r, dw)[0],
                                           _at(R.rstd, r, dw)[0], <const double*>R.w, dw, db)
        if not R.direct:
            _row_out(R.y, r, n, dx)
    free(buf)


cdef void _forward_piece(void* ctx, int k) noexcept nogil:
    cdef Rows* R = <Rows*>ctx
    cdef ptrdiff_t lo = R.nrows * k // R.npieces, hi = R.nrows * (k + 1) // R.npieces
    if R.x.dtype == FASTOP_FLOAT32:
        _forward_rows(R, lo, hi, <float*>NULL)
    else:
        _forward_rows(R, lo, hi, <double*>NULL)


cdef void _backward_piece(void* ctx, int k) noexcept nogil:
    """Rows of piece k, accumulating dweight and dbias into the piece's own partials."""
    cdef Rows* R = <Rows*>ctx
    cdef ptrdiff_t lo = R.nrows * k // R.npieces, hi = R.nrows * (k + 1) // R.npieces
    cdef ptrdiff_t isz = itemsize_of(R.x.dtype)
    cdef char* dw = R.partials + 2 * k * R.n * isz
    if R.x.dtype == FASTOP_FLOAT32:
        _backward_rows(R, lo, hi, <float*>dw, <float*>(dw + R.n * isz))
    else:
        _backward_rows(R, lo, hi, <double*>dw, <double*>(dw + R.n * isz))


cdef int _pieces(const Rows* R) noexcept nogil:
    """How many pieces to split the rows into (1: run on the calling thread)."""
    if R.nrows < 2 or not use_threads(R.nrows * R.n * ROW_COST):
        return 1
    return <int>min(R.nrows, <ptrdiff_t>get_num_threads() * PIECES_PER_THREAD, MAX_PIECES)


# --------------------------------------------------------------------------- setup

cdef inline fastop_view* _optional(fastop_view** ins, int n_in, int i) noexcept nogil:
    """Optional input i, NULL when absent (None, or left off the end: the static
    executor passes only the inputs present, trailing optional ones dropped)."""
    return ins[i] if i < n_in else NULL


cdef int _norm_axis(const fastop_attrs* a, int ndim) noexcept nogil:
    """begin_norm_axis normalized against ndim; -1 if it is not in [-ndim, ndim)."""
    return normalize_axis(a.ints[0] if a.n_ints > 0 else 1, ndim)


cdef ptrdiff_t _prod(const fastop_view* v, int lo, int hi) noexcept nogil:
    """Product of dims [lo, hi) of v; -1 if one is unknown."""
    cdef ptrdiff_t p = 1
    cdef int d
    for d in range(lo, hi):
        if v.shape[d] < 0:
            return -1
        p *= v.shape[d]
    return p


cdef bint _size_is(const fastop_view* v, ptrdiff_t size) noexcept nogil:
    """Whether v has `size` elements (unknown dims on either side pass)."""
    cdef ptrdiff_t p = _prod(v, 0, v.ndim)
    return p < 0 or size < 0 or p == size


cdef void _set_rows_meta(const fastop_view* x, int b, fastop_view* out) noexcept nogil:
    """out: x's dtype, x's dims before b, 1 from b on."""
    cdef int d
    out.dtype = x.dtype
    out.ndim = x.ndim
    for d in range(x.ndim):
        out.shape[d] = x.shape[d] if d < b else 1


cdef int _check_param(const fastop_view* x, const fastop_view* p, ptrdiff_t n) noexcept nogil:
    if p == NULL:
        return K_OK
    if p.dtype != x.dtype:
        return K_ERR_DTYPE
    return K_OK if _size_is(p, n) else K_ERR_SHAPE


cdef int _infer_layer_norm(fastop_view** ins, int n_in, fastop_view* outs, int n_out,
                           const fastop_attrs* a) noexcept nogil:
    """(x, weight?, bias?) -> (out like x, mean, rstd: x's leading dims, then 1s)."""
    cdef int b = _norm_axis(a, ins[0].ndim), status
    if b < 0:
        return K_ERR_ATTR
    cdef ptrdiff_t n = _prod(ins[0], b, ins[0].ndim)
    status = _check_param(ins[0], _optional(ins, n_in, 1), n)
    if status == K_OK:
        status = _check_param(ins[0], _optional(ins, n_in, 2), n)
    if status != K_OK:
        return status
    view_copy_meta(ins[0], &outs[0])
    _set_rows_meta(ins[0], b, &outs[1])
    _set_rows_meta(ins[0], b, &outs[2])
    return K_OK


cdef int _infer_layer_norm_grad(fastop_view** ins, int n_in, fastop_view* outs, int n_out,
                                const fastop_attrs* a) noexcept nogil:
    """(x, mean, rstd, dout, weight?) -> (dx like x, dweight, dbias like weight, or like
    the normalized dims of x without one)."""
    cdef const fastop_view* x = ins[0]
    cdef const fastop_view* weight = _optional(ins, n_in, 4)
    cdef int b = _norm_axis(a, x.ndim), d, status
    if b < 0:
        return K_ERR_ATTR
    cdef ptrdiff_t n = _prod(x, b, x.ndim), nrows = _prod(x, 0, b)
    status = _check_param(x, weight, n)
    if status != K_OK:
        return status
    for d in range(1, 4):
        if ins[d].dtype != x.dtype:
            return K_ERR_DTYPE
    if not (_size_is(ins[1], nrows) and _size_is(ins[2], nrows)) or ins[3].ndim != x.ndim:
        return K_ERR_SHAPE
    for d in range(x.ndim):
        if ins[3].shape[d] != x.shape[d] and ins[3].shape[d] >= 0 and x.shape[d] >= 0:
            return K_ERR_SHAPE
    view_copy_meta(x, &outs[0])
    if weight != NULL:
        view_copy_meta(weight, &outs[1])
    else:
        outs[1].dtype = x.dtype
        outs[1].ndim = x.ndim - b
        for d in range(b, x.ndim):
            outs[1].shape[d - b] = x.shape[d]
    view_copy_meta(&outs[1], &outs[2])
    return K_OK


cdef const char* _packed(const fastop_view* v, char** owned) noexcept nogil:
    """v's elements in C order, contiguous: v's own memory or a copy (kept in *owned
    for the caller to free)."""
    cdef ptrdiff_t k, isz
    owned[0] = NULL
    if v == NULL or view_is_contiguous(v):
        return NULL if v == NULL else v.data
    isz = itemsize_of(v.dtype)
    owned[0] = <char*>malloc(v.size * isz + 1)
    if owned[0] == NULL:
        return NULL
    for k in range(v.size):
        if isz == 4:
            (<float*>owned[0])[k] = (<const float*>(v.data + view_element_offset(v, k)))[0]
        else:
            (<double*>owned[0])[k] = (<const double*>(v.data + view_element_offset(v, k)))[0]
    return owned[0]


cdef void _setup(Rows* R, const fastop_view* x, int b, double eps) noexcept nogil:
    R.nrows = _prod(x, 0, b)
    R.n = _prod(x, b, x.ndim)
    R.eps = eps
    R.x = x
    R.status = K_OK
    R.npieces = 1


# --------------------------------------------------------------------------- kernels

cdef int _layer_norm_kernel(fastop_view** ins, int n_in, fastop_view** outs, int n_out,
                            const fastop_attrs* a) noexcept nogil:
    cdef Rows R
    cdef char* owned_w
    cdef char* owned_b
    _setup(&R, ins[0], _norm_axis(a, ins[0].ndim), a.f[0])
    R.y, R.mean, R.rstd = outs[0], outs[1], outs[2]
    R.direct = view_is_contiguous(ins[0]) and view_is_contiguous(outs[0])
    cdef fastop_view* weight = _optional(ins, n_in, 1)
    cdef fastop_view* bias = _optional(ins, n_in, 2)
    R.w = _packed(weight, &owned_w)
    R.b = _packed(bias, &owned_b)
    if (weight != NULL and R.w == NULL) or (bias != NULL and R.b == NULL):
        R.status = K_ERR_MEMORY
    elif R.nrows > 0:
        R.npieces = _pieces(&R)
        if R.npieces > 1:
            parallel_run(_forward_piece, &R, R.npieces, get_num_threads())
        else:
            _forward_piece(&R, 0)
    free(owned_w)
    free(owned_b)
    return R.status


cdef void _sum_partials(Rows* R, fastop_view* out, int which, floating_t* tag) noexcept nogil:
    """out = the pieces' partials `which` (0: dweight, 1: dbias), added in piece order."""
    cdef ptrdiff_t j, n = R.n
    cdef int k
    cdef floating_t s
    cdef const floating_t* p = <const floating_t*>R.partials + which * n
    for j in range(n):
        s = 0
        for k in range(R.npieces):
            s += p[2 * k * n + j]
        _at(out, j, tag)[0] = s


cdef int _layer_norm_grad_kernel(fastop_view** ins, int n_in, fastop_view** outs, int n_out,
                                 const fastop_attrs* a) noexcept nogil:
    cdef Rows R
    cdef char* owned_w
    cdef ptrdiff_t isz = itemsize_of(ins[0].dtype)
    cdef fastop_view* weight = _optional(ins, n_in, 4)
    _setup(&R, ins[0], _norm_axis(a, ins[0].ndim), 0.0)
    R.w = _packed(weight, &owned_w)
    R.mean, R.rstd, R.dy, R.y = ins[1], ins[2], ins[3], outs[0]
    R.direct = view_is_contiguous(ins[0]) and view_is_contiguous(ins[3]) \
        and view_is_contiguous(outs[0])
    R.npieces = _pieces(&R)
    R.partials = <char*>calloc(2 * R.npieces * R.n + 1, isz)
    if R.partials == NULL or (weight != NULL and R.w == NULL):
        R.status = K_ERR_MEMORY
    else:
        if R.npieces > 1:
            parallel_run(_backward_piece, &R, R.npieces, get_num_threads())
        elif R.nrows > 0:
            _backward_piece(&R, 0)
        if R.status == K_OK:
            if ins[0].dtype == FASTOP_FLOAT32:
                _sum_partials(&R, outs[1], 0, <float*>NULL)
                _sum_partials(&R, outs[2], 1, <float*>NULL)
            else:
                _sum_partials(&R, outs[1], 0, <double*>NULL)
                _sum_partials(&R, outs[2], 1, <double*>NULL)
    free(R.partials)
    free(owned_w)
    return R.status


def _pack_grad(attrs):
    return [int_attr(attrs, "begin_norm_axis", 1)], []


def _pack(attrs):
    epsilon = attrs.get("epsilon", 1e-5)
    if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)) or epsilon < 0:
        raise ValueError(f"attribute 'epsilon' must be a non-negative number, got "
                         f"{epsilon!r}")
    return _pack_grad(attrs)[0], [float(epsilon)]


layer_norm = make_kernel("layer_norm", ("x", "weight?", "bias?"),
                         ("out", "mean", "rstd"), _infer_layer_norm, NULL, NULL, NULL,
                         _layer_norm_kernel, _layer_norm_kernel, 0,
                         ("epsilon", "begin_norm_axis"), _pack)
layer_norm_grad = make_kernel("layer_norm_grad",
                              ("x", "mean", "rstd", "dout", "weight?"),
                              ("dx", "dweight", "dbias"), _infer_layer_norm_grad, NULL, NULL,
                              NULL, _layer_norm_grad_kernel, _layer_norm_grad_kernel, 0,
                              ("begin_norm_axis",), _pack_grad)
_REASONS = {
    K_ERR_ATTR: "begin_norm_axis must be in [-ndim, ndim) of x",
    K_ERR_DTYPE: "weight, bias, mean, rstd and dout need x's dtype",
    K_ERR_SHAPE: "weight and bias need one element per element of a row "
                 "(x.shape[begin_norm_axis:]), mean and rstd one per row, dout x's shape",
}
for _k in (layer_norm, layer_norm_grad):
    (<CKernel>_k).reasons = _REASONS
