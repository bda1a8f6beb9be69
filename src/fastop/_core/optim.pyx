# cython: freethreading_compatible = False
# distutils: sources = src/fastop/_core/reduce_impl.c
"""Optimizer kernels: the SGD, Momentum, Adam and AdamW updates, in place, with weight
decay and a gradient-clipping scale fused into the one loop; and the squared L2 norm
that gradient clipping by norm reads.

Each update is one fused loop over contiguous float32/float64 buffers (C in
``optim_update.h``, vectorized per ISA), run without the GIL and split over fastop's
thread pool (:mod:`fastop._core.parallel`) for large parameters. They are
:class:`CKernel` objects in PaddlePaddle's input order (the learning rate a one-element
tensor), registered as ``fastop::sgd_update`` etc.: eager optimizers call them through
the dispatch and static programs append them, both with ``out=`` the parameter and
state tensors they update in place.

Formulas. Every update applies ``g = grad_scale * grad + decay``, where ``grad_scale``
is the optional last input (the clipping factor of ``ClipGradByGlobalNorm`` /
``ClipGradByNorm``; 1 when absent) and ``decay`` is set by the attributes
``regularization_method``/``regularization_coeff`` (PaddlePaddle's momentum-op names):
``""`` none, ``"l2_decay"`` ``coeff * param``, ``"l1_decay"`` ``coeff * sign(param)``::

    sgd:       param -= lr * g
    momentum:  v = mu * v + g;  param -= lr * (g + mu * v if nesterov else v)
    adam:      m = b1 * m + (1 - b1) * g;  v = b2 * v + (1 - b2) * g * g
               param -= lr * sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) + eps * sqrt(1 - b2^t))
               b1^t *= b1;  b2^t *= b2      (the powers start at b1 and b2)
    adamw:     adam without coupled decay, after the decoupled one (with_decay):
               param = param * (1 - lr * coeff) - <adam's step>

``squared_l2_norm(x)`` is ``[sum(x * x)]`` (pairwise sums over fixed pieces of the
contiguous data, combined in float64 in piece order: the same on any thread count).
"""
from libc.math cimport sqrt
from libc.stdlib cimport malloc, free

from fastop._core.storage cimport (fastop_view, fastop_attrs, floating_t, itemsize_of,
                                   view_copy, view_is_contiguous,
                                   view_set_contiguous_strides,
                                   FASTOP_FLOAT32, FASTOP_FLOAT64,
                                   view_copy_meta)
from fastop._core.kernel cimport (CKernel, make_kernel, get_num_threads, use_threads,
                                  K_OK, K_ERR_DTYPE, K_ERR_SHAPE, K_ERR_VALUE,
                                  K_ERR_MEMORY)
from fastop._core.parallel cimport parallel_run
from fastop._core.reduce_impl cimport fastop_dot_f32, fastop_dot_f64
from fastop._core.kernel import bool_attr

__all__ = ["sgd", "momentum", "adam", "adamw", "squared_l2_norm", "DECAY_METHODS"]


# --------------------------------------------------------------------------- loops
# The element loops are C (optim_update.h): restrict pointers and per-ISA clones, one
# loop per decay kind; these entry points pick the kind's loop.

cdef extern from "optim_update.h" nogil:
    void fastop_sgd_f32(float* p, const float* g, Py_ssize_t n, float lr, float s,
                        float wd, int decay)
    void fastop_sgd_f64(double* p, const double* g, Py_ssize_t n, double lr, double s,
                        double wd, int decay)
    void fastop_momentum_f32(float* p, const float* g, float* v, Py_ssize_t n, float lr,
                             float mu, float s, float wd, int decay, int nesterov)
    void fastop_momentum_f64(double* p, const double* g, double* v, Py_ssize_t n,
                             double lr, double mu, double s, double wd, int decay,
                             int nesterov)
    void fastop_adam_f32(float* p, const float* g, float* m, float* v, Py_ssize_t n,
                         float step, float b1, float b2, float eps, float s, float wd,
                         int decay, float keep)
    void fastop_adam_f64(double* p, const double* g, double* m, double* v, Py_ssize_t n,
                         double step, double b1, double b2, double eps, double s,
                         double wd, int decay, double keep)


DECAY_METHODS = {"": 0, "l2_decay": 1, "l1_decay": 2}
"""``regularization_method`` values and their codes in optim_update.h."""


# Drivers: the whole update on the calling thread, or (large tensors) ranges of it on
# fastop's thread pool, a few per thread, taken as they come. Each element's update does
# not depend on the split, so the result is the same on any number of threads.

cdef enum:
    SGD = 0
    MOMENTUM = 1
    ADAM = 2
    PIECES_PER_THREAD = 2
    PIECE_ALIGN = 16        # pieces start at multiples of 16 elements (own cache lines)


ctypedef struct UpdateJob:
    int rule                # SGD, MOMENTUM or ADAM
    bint is_double
    void* param
    const void* grad
    void* m1                # momentum: velocity; adam: first moment
    void* m2                # adam: second moment
    Py_ssize_t n
    double lr               # adam: the bias-corrected step
    double mu, b1, b2, eps  # adam: eps carries the bias correction
    double scale            # grad_scale
    double wd               # the coupled decay's coefficient
    int decay               # its kind (DECAY_METHODS)
    double keep             # adam: 1 - lr * coeff of the decoupled decay (AdamW), else 1
    bint nesterov
    Py_ssize_t chunk        # elements per piece


cdef void _update_range(const UpdateJob* j, Py_ssize_t lo, Py_ssize_t hi,
                        floating_t* tag) noexcept nogil:
    """Elements [lo, hi) of the update."""
    cdef floating_t* p = <floating_t*>j.param + lo
    cdef const floating_t* g = <const floating_t*>j.grad + lo
    cdef Py_ssize_t n = hi - lo
    if floating_t is float:
        if j.rule == SGD:
            fastop_sgd_f32(p, g, n, <float>j.lr, <float>j.scale, <float>j.wd, j.decay)
        elif j.rule == MOMENTUM:
            fastop_momentum_f32(p, g, <float*>j.m1 + lo, n, <float>j.lr, <float>j.mu,
                                <float>j.scale, <float>j.wd, j.decay, j.nesterov)
        else:
            fastop_adam_f32(p, g, <float*>j.m1 + lo, <float*>j.m2 + lo, n, <float>j.lr,
                            <float>j.b1, <float>j.b2, <float>j.eps, <float>j.scale,
                            <float>j.wd, j.decay, <float>j.keep)
    else:
        if j.rule == SGD:
            fastop_sgd_f64(p, g, n, j.lr, j.scale, j.wd, j.decay)
        elif j.rule == MOMENTUM:
            fastop_momentum_f64(p, g, <double*>j.m1 + lo, n, j.lr, j.mu, j.scale, j.wd,
                                j.decay, j.nesterov)
        else:
            fastop_adam_f64(p, g, <double*>j.m1 + lo, <double*>j.m2 + lo, n, j.lr, j.b1,
                            j.b2, j.eps, j.scale, j.wd, j.decay, j.keep)


cdef void _update_piece(void* ctx, int k) noexcept nogil:
    """Piece k of an update (a parallel_run piece function)."""
    cdef const UpdateJob* j = <const UpdateJob*>ctx
    cdef Py_ssize_t lo = min(k * j.chunk, j.n), hi = min(lo + j.chunk, j.n)
    if j.is_double:
        _update_range(j, lo, hi, <double*>NULL)
    else:
        _update_range(j, lo, hi, <float*>NULL)


cdef void _run_update(UpdateJob* j) noexcept nogil:
    cdef int nt = get_num_threads() if use_threads(j.n) else 1
    cdef int npieces
    if nt == 1:
        j.chunk = j.n
        _update_piece(j, 0)
        return
    npieces = nt * PIECES_PER_THREAD
    j.chunk = ((j.n + npieces - 1) // npieces + PIECE_ALIGN - 1) & ~(<Py_ssize_t>PIECE_ALIGN - 1)
    parallel_run(_update_piece, j, <int>((j.n + j.chunk - 1) // j.chunk), nt)


# --------------------------------------------------------------------------- view helpers

cdef inline bint _same_shape(const fastop_view* a, const fastop_view* b) noexcept nogil:
    """Equal ndim and dims, an unknown dim (-1) matching anything."""
    cdef int i
    if a.ndim != b.ndim:
        return False
    for i in range(a.ndim):
        if a.shape[i] != b.shape[i] and a.shape[i] >= 0 and b.shape[i] >= 0:
            return False
    return True


cdef inline bint _is_float(const fastop_view* v) noexcept nogil:
    return v.dtype == FASTOP_FLOAT32 or v.dtype == FASTOP_FLOAT64


cdef inline bint _is_scalar(const fastop_view* v) noexcept nogil:
    """A one-element float tensor (unknown dims allowed before a run)."""
    cdef int i
    if not _is_float(v):
        return False
    for i in range(v.ndim):
        if v.shape[i] != 1 and v.shape[i] >= 0:
            return False
    return True


cdef inline double _read_scalar(const fastop_view* v) noexcept nogil:
    if v.dtype == FASTOP_FLOAT32:
        return (<float*>v.data)[0]
    return (<double*>v.data)[0]


cdef inline void _write_scalar(fastop_view* v, double value) noexcept nogil:
    if v.dtype == FASTOP_FLOAT32:
        (<float*>v.data)[0] = <float>value
    else:
        (<double*>v.data)[0] = value


cdef int _check_like_param(fastop_view** ins, int first, int last) noexcept nogil:
    """ins[first..last) must have param's (ins[0]) shape and dtype."""
    cdef int i
    if not _is_float(ins[0]):
        return K_ERR_DTYPE
    for i in range(first, last):
        if ins[i].dtype != ins[0].dtype:
            return K_ERR_DTYPE
        if not _same_shape(ins[i], ins[0]):
            return K_ERR_SHAPE
    return K_OK


cdef inline bint _scalar_or_absent(fastop_view** ins, int n_in, int at) noexcept nogil:
    """ins[at] is a one-element float tensor, or an absent optional input."""
    return at >= n_in or ins[at] == NULL or _is_scalar(ins[at])


cdef inline double _grad_scale(fastop_view** ins, int n_in, int at) noexcept nogil:
    """The optional grad_scale input at position `at`: its value, 1 when absent."""
    if at < n_in and ins[at] != NULL:
        return _read_scalar(ins[at])
    return 1.0


cdef bint _all_contiguous(fastop_view** views, int n) noexcept nogil:
    cdef int i
    for i in range(n):
        if not view_is_contiguous(views[i]):
            return False
    return True


cdef inline void _take_input(const fastop_view* src, fastop_view* out) noexcept nogil:
    """An output updated in place starts as its input: copy unless it is the input."""
    if out.data != src.data:
        view_copy(src, out)


cdef const char* _packed(const fastop_view* x, char** scratch) noexcept nogil:
    """x's elements as one contiguous run: x's own memory, or (a strided view) a copy in
    a new `scratch` block the caller frees; NULL when that allocation fails."""
    cdef fastop_view packed
    scratch[0] = NULL
    if view_is_contiguous(x):
        return x.data
    packed = x[0]
    packed.data = <char*>malloc(max(x.size, 1) * itemsize_of(x.dtype))
    if packed.data != NULL:
        view_set_contiguous_strides(&packed)
        view_copy(x, &packed)
        scratch[0] = packed.data
    return packed.data


# --------------------------------------------------------------------------- CKernels
# Inputs in PaddlePaddle's order plus an optional trailing grad_scale; outputs are the
# updated param and state, which the caller passes as out= (the same tensors) to update
# in place. make_kernel's trailing arguments: dispatch input 0 (param), attribute names,
# packer, parallel grain 0 (always release the GIL), not elementwise, and the input
# each output overwrites: an output may be that input (the kernels copy it in first,
# then update the output in place); sharing memory with any other input stages the
# output (CKernel.must_stage).
# Packed attributes: ints = [decay kind, (momentum: nesterov)], f = [(rule's floats),
# coefficient].

cdef int _sgd_infer(fastop_view** ins, int n_in, fastop_view* outs, int n_out,
                    const fastop_attrs* attrs) noexcept nogil:
    # ins: param, grad, learning_rate, grad_scale?
    cdef int status = _check_like_param(ins, 1, 2)
    if status != K_OK:
        return status
    if not (_is_scalar(ins[2]) and _scalar_or_absent(ins, n_in, 3)):
        return K_ERR_SHAPE
    view_copy_meta(ins[0], &outs[0])
    return K_OK


cdef int _run_with_grad(UpdateJob* j, const fastop_view* grad) noexcept nogil:
    """Run the update with the gradient as one contiguous run."""
    cdef char* scratch
    j.grad = _packed(grad, &scratch)
    if j.grad == NULL:
        return K_ERR_MEMORY
    _run_update(j)
    free(scratch)
    return K_OK


cdef int _sgd_kernel(fastop_view** ins, int n_in, fastop_view** outs, int n_out,
                     const fastop_attrs* attrs) noexcept nogil:
    cdef UpdateJob j
    if not view_is_contiguous(outs[0]):
        return K_ERR_SHAPE
    _take_input(ins[0], outs[0])
    j.rule, j.is_double, j.param, j.n = (SGD, outs[0].dtype == FASTOP_FLOAT64,
                                         outs[0].data, outs[0].size)
    j.lr, j.scale = _read_scalar(ins[2]), _grad_scale(ins, n_in, 3)
    j.decay, j.wd = <int>attrs.ints[0], attrs.f[0]
    return _run_with_grad(&j, ins[1])


cdef int _momentum_infer(fastop_view** ins, int n_in, fastop_view* outs, int n_out,
                         const fastop_attrs* attrs) noexcept nogil:
    # ins: param, grad, velocity, learning_rate, grad_scale?
    cdef int status = _check_like_param(ins, 1, 3)
    if status != K_OK:
        return status
    if not (_is_scalar(ins[3]) and _scalar_or_absent(ins, n_in, 4)):
        return K_ERR_SHAPE
    view_copy_meta(ins[0], &outs[0])
    view_copy_meta(ins[2], &outs[1])
    return K_OK


cdef int _momentum_kernel(fastop_view** ins, int n_in, fastop_view** outs, int n_out,
                          const fastop_attrs* attrs) noexcept nogil:
    cdef UpdateJob j
    if not _all_contiguous(outs, 2):
        return K_ERR_SHAPE
    _take_input(ins[0], outs[0])
    _take_input(ins[2], outs[1])
    j.rule, j.is_double, j.param, j.m1, j.n = (
        MOMENTUM, outs[0].dtype == FASTOP_FLOAT64, outs[0].data, outs[1].data, outs[0].size)
    j.lr, j.scale = _read_scalar(ins[3]), _grad_scale(ins, n_in, 4)
    j.decay, j.nesterov = <int>attrs.ints[0], attrs.ints[1] != 0
    j.mu, j.wd = attrs.f[0], attrs.f[1]
    return _run_with_grad(&j, ins[1])


cdef int _adam_infer(fastop_view** ins, int n_in, fastop_view* outs, int n_out,
                     const fastop_attrs* attrs) noexcept nogil:
    # ins: param, grad, learning_rate, moment1, moment2, beta1_pow, beta2_pow, grad_scale?
    cdef int status = _check_like_param(ins, 1, 2)
    if status == K_OK:
        status = _check_like_param(ins, 3, 5)
    if status != K_OK:
        return status
    if not (_is_scalar(ins[2]) and _is_scalar(ins[5]) and _is_scalar(ins[6])
            and _scalar_or_absent(ins, n_in, 7)):
        return K_ERR_SHAPE
    view_copy_meta(ins[0], &outs[0])
    view_copy_meta(ins[3], &outs[1])
    view_copy_meta(ins[4], &outs[2])
    view_copy_meta(ins[5], &outs[3])
    view_copy_meta(ins[6], &outs[4])
    return K_OK


cdef int _adam_like(fastop_view** ins, int n_in, fastop_view** outs, double wd,
                    int decay, double coeff, const fastop_attrs* attrs) noexcept nogil:
    """Adam's update, with the coupled decay (wd, decay) or the decoupled one (coeff)."""
    cdef UpdateJob j
    cdef double b1_pow = _read_scalar(ins[5]), b2_pow = _read_scalar(ins[6])
    cdef double lr = _read_scalar(ins[2]), correction
    cdef int i
    if not (0.0 <= b1_pow < 1.0 and 0.0 <= b2_pow < 1.0):
        return K_ERR_VALUE          # checked before anything is written
    if not _all_contiguous(outs, 3):
        return K_ERR_SHAPE
    _take_input(ins[0], outs[0])
    for i in range(1, 3):
        _take_input(ins[i + 2], outs[i])
    correction = sqrt(1.0 - b2_pow)
    j.rule, j.is_double, j.param, j.m1, j.m2, j.n = (
        ADAM, outs[0].dtype == FASTOP_FLOAT64, outs[0].data, outs[1].data, outs[2].data,
        outs[0].size)
    j.lr = lr * correction / (1.0 - b1_pow)
    j.b1, j.b2, j.eps = attrs.f[0], attrs.f[1], attrs.f[2] * correction
    j.scale, j.wd, j.decay, j.keep = _grad_scale(ins, n_in, 7), wd, decay, 1.0 - lr * coeff
    if _run_with_grad(&j, ins[1]) != K_OK:
        return K_ERR_MEMORY
    _write_scalar(outs[3], b1_pow * attrs.f[0])
    _write_scalar(outs[4], b2_pow * attrs.f[1])
    return K_OK


cdef int _adam_kernel(fastop_view** ins, int n_in, fastop_view** outs, int n_out,
                      const fastop_attrs* attrs) noexcept nogil:
    return _adam_like(ins, n_in, outs, attrs.f[3], <int>attrs.ints[0], 0.0, attrs)


cdef int _adamw_kernel(fastop_view** ins, int n_in, fastop_view** outs, int n_out,
                       const fastop_attrs* attrs) noexcept nogil:
    return _adam_like(ins, n_in, outs, 0.0, 0, attrs.f[3] if attrs.ints[0] else 0.0, attrs)


def _decay(dict attrs):
    """(kind code, coefficient) of the regularization_* attributes."""
    method = attrs.get("regularization_method", "") or ""
    code = DECAY_METHODS.get(method) if isinstance(method, str) else None
    if code is None:
        raise ValueError(f"attribute 'regularization_method' must be one of "
                         f"{list(DECAY_METHODS)}, got {method!r}")
    return code, attrs.get("regularization_coeff", 0.0)


def _pack_sgd(dict attrs):
    code, coeff = _decay(attrs)
    return (code,), (coeff,)


def _pack_momentum(dict attrs):
    code, coeff = _decay(attrs)
    return ((code, bool_attr(attrs, "use_nesterov", False)),
            (attrs.get("momentum", 0.9), coeff))


def _pack_adam(dict attrs):
    code, coeff = _decay(attrs)
    return (code,), (attrs.get("beta1", 0.9), attrs.get("beta2", 0.999),
                     attrs.get("epsilon", 1e-8), coeff)


def _pack_adamw(dict attrs):
    return ((bool_attr(attrs, "with_decay", True),),
            (attrs.get("beta1", 0.9), attrs.get("beta2", 0.999), attrs.get("epsilon", 1e-8),
             attrs.get("coeff", 0.01)))


_DECAY_ATTRS = ("regularization_method", "regularization_coeff")

sgd = make_kernel(
    "sgd_update", ("param", "grad", "learning_rate", "grad_scale?"), ("param_out",),
    _sgd_infer, NULL, NULL, NULL, _sgd_kernel, _sgd_kernel,
    0, _DECAY_ATTRS, _pack_sgd, 0, False, ("param",))

momentum = make_kernel(
    "momentum_update",
    ("param", "grad", "velocity", "learning_rate", "grad_scale?"),
    ("param_out", "velocity_out"),
    _momentum_infer, NULL, NULL, NULL, _momentum_kernel, _momentum_kernel,
    0, ("momentum", "use_nesterov", *_DECAY_ATTRS), _pack_momentum, 0, False,
    ("param", "velocity"))

_ADAM_INPUTS = ("param", "grad", "learning_rate", "moment1", "moment2", "beta1_pow",
                "beta2_pow", "grad_scale?")
_ADAM_OUTPUTS = ("param_out", "moment1_out", "moment2_out", "beta1_pow_out",
                 "beta2_pow_out")
_ADAM_UPDATES = ("param", "moment1", "moment2", "beta1_pow", "beta2_pow")

adam = make_kernel(
    "adam_update", _ADAM_INPUTS, _ADAM_OUTPUTS,
    _adam_infer, NULL, NULL, NULL, _adam_kernel, _adam_kernel,
    0, ("beta1", "beta2", "epsilon", *_DECAY_ATTRS), _pack_adam, 0, False, _ADAM_UPDATES)

adamw = make_kernel(
    "adamw_update", _ADAM_INPUTS, _ADAM_OUTPUTS,
    _adam_infer, NULL, NULL, NULL, _adamw_kernel, _adamw_kernel,
    0, ("beta1", "beta2", "epsilon", "coeff", "with_decay"), _pack_adamw, 0, False,
    _ADAM_UPDATES)

_UPDATE_REASONS = {
    K_ERR_DTYPE: "param must be float32 or float64, with grad and state of its dtype",
    K_ERR_SHAPE: "grad and state must have param's shape (the outputs contiguous); "
                 "learning_rate, beta1_pow, beta2_pow and grad_scale one element each",
}
for _k in (sgd, momentum, adam, adamw):
    (<CKernel>_k).reasons = _UPDATE_REASONS
for _k in (adam, adamw):
    (<CKernel>_k).reasons = {**_UPDATE_REASONS,
                             K_ERR_VALUE: "beta1_pow and beta2_pow must be in [0, 1)"}


# --------------------------------------------------------------------------- squared L2 norm

cdef enum:
    NORM_PIECE = 1 << 15    # elements per piece: partial sums fixed by size, not threads
    NORM_STACK = 64         # partial sums kept on the stack (larger inputs: malloc)


ctypedef struct NormJob:
    const char* data
    int dtype
    Py_ssize_t n
    double* partial


cdef void _norm_piece(void* ctx, int k) noexcept nogil:
    cdef const NormJob* j = <const NormJob*>ctx
    cdef Py_ssize_t lo = <Py_ssize_t>k * NORM_PIECE
    cdef Py_ssize_t n = min(<Py_ssize_t>NORM_PIECE, j.n - lo)
    if j.dtype == FASTOP_FLOAT32:
        j.partial[k] = fastop_dot_f32(<const float*>j.data + lo, <const float*>j.data + lo, n)
    else:
        j.partial[k] = fastop_dot_f64(<const double*>j.data + lo, <const double*>j.data + lo, n)


cdef int _sum_squares(const char* data, int dtype, Py_ssize_t n, double* out) noexcept nogil:
    """sum(x * x) of n contiguous elements, piece by piece."""
    cdef double stack[NORM_STACK]
    cdef NormJob j
    cdef Py_ssize_t npieces = (n + NORM_PIECE - 1) // NORM_PIECE, k
    cdef double total = 0.0
    j.data, j.dtype, j.n = data, dtype, n
    if npieces <= NORM_STACK:
        j.partial = &stack[0]
    else:
        j.partial = <double*>malloc(npieces * sizeof(double))
    if j.partial == NULL:
        return K_ERR_MEMORY
    if npieces > 1 and use_threads(n):
        parallel_run(_norm_piece, &j, <int>npieces, get_num_threads())
    else:
        for k in range(npieces):
            _norm_piece(&j, <int>k)
    for k in range(npieces):
        total += j.partial[k]
    if j.partial != &stack[0]:
        free(j.partial)
    out[0] = total
    return K_OK


cdef int _norm_infer(fastop_view** ins, int n_in, fastop_view* outs, int n_out,
                     const fastop_attrs* attrs) noexcept nogil:
    if not _is_float(ins[0]):
        return K_ERR_DTYPE
    outs[0].dtype, outs[0].ndim, outs[0].size, outs[0].shape[0] = ins[0].dtype, 1, 1, 1
    return K_OK


cdef int _norm_kernel(fastop_view** ins, int n_in, fastop_view** outs, int n_out,
                      const fastop_attrs* attrs) noexcept nogil:
    cdef char* scratch
    cdef const char* data = _packed(ins[0], &scratch)
    cdef double total = 0.0
    cdef int status
    if data == NULL:
        return K_ERR_MEMORY
    status = _sum_squares(data, ins[0].dtype, ins[0].size, &total)
    free(scratch)
    if status == K_OK:
        _write_scalar(outs[0], total)
    return status


squared_l2_norm = make_kernel(
    "squared_l2_norm", ("x",), ("out",), _norm_infer,
    NULL, NULL, NULL, _norm_kernel, _norm_kernel, 0, (), None, 0)
(<CKernel>squared_l2_norm).reasons = {K_ERR_DTYPE: "x must be float32 or float64"}
