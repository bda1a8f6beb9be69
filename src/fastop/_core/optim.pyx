# cython: freethreading_compatible = False
"""Optimizer update kernels: SGD, Momentum, Adam (L2 weight decay), in place.

Each update is one fused loop over contiguous float32/float64 buffers (C in
``optim_update.h``, vectorized per ISA), run without the GIL and split over fastop's
thread pool (:mod:`fastop._core.parallel`) for large parameters. Two ways in:

* ``sgd_step``/``momentum_step``/``adam_step`` — the eager fast path, called by
  ``Optimizer.step`` on a parameter, its gradient and its state tensors;
* ``sgd``/``momentum``/``adam`` — :class:`CKernel` objects (learning rate as a
  one-element tensor input, as in PaddlePaddle's update ops), registered as
  ``fastop::sgd_update`` etc. so static programs append them and the executor calls
  them; called with ``out=`` the param/state tensors they update in place.

Formulas (``g = grad + weight_decay * param``)::

    sgd:       param -= lr * g
    momentum:  v = mu * v + g;  param -= lr * (g + mu * v if nesterov else v)
    adam:      m = b1 * m + (1 - b1) * g;  v = b2 * v + (1 - b2) * g * g
               param -= lr * sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) + eps * sqrt(1 - b2^t))
               b1^t *= b1;  b2^t *= b2      (the powers start at b1 and b2)
"""
from libc.math cimport sqrt

from fastop._core.storage cimport (DenseTensor, fastop_view, fastop_attrs, floating_t,
                                   bump_version, view_copy, view_is_contiguous,
                                   views_overlap, FASTOP_FLOAT32, FASTOP_FLOAT64)
from fastop._core.kernel cimport (CKernel, make_kernel, get_num_threads, use_threads,
                                  K_OK, K_ERR_DTYPE, K_ERR_SHAPE)
from fastop._core.parallel cimport parallel_run

__all__ = ["sgd", "momentum", "adam", "sgd_step", "momentum_step", "adam_step"]


# --------------------------------------------------------------------------- loops
# The element loops are C (optim_update.h): restrict pointers and per-ISA clones.

cdef extern from "optim_update.h" nogil:
    void fastop_sgd_f32(float* p, const float* g, Py_ssize_t n, float lr, float wd)
    void fastop_sgd_f64(double* p, const double* g, Py_ssize_t n, double lr, double wd)
    void fastop_momentum_f32(float* p, const float* g, float* v, Py_ssize_t n, float lr,
                             float mu, float wd, int nesterov)
    void fastop_momentum_f64(double* p, const double* g, double* v, Py_ssize_t n,
                             double lr, double mu, double wd, int nesterov)
    void fastop_adam_f32(float* p, const float* g, float* m, float* v, Py_ssize_t n,
                         float step, float b1, float b2, float eps, float wd)
    void fastop_adam_f64(double* p, const double* g, double* m, double* v, Py_ssize_t n,
                         double step, double b1, double b2, double eps, double wd)


cdef inline void _sgd_loop(floating_t* param, const floating_t* grad, Py_ssize_t n,
                           double lr, double wd) noexcept nogil:
    if floating_t is float:
        fastop_sgd_f32(param, grad, n, <float>lr, <float>wd)
    else:
        fastop_sgd_f64(param, grad, n, lr, wd)


cdef inline void _momentum_loop(floating_t* param, const floating_t* grad,
                                floating_t* velocity, Py_ssize_t n, double lr, double mu,
                                double wd, bint nesterov) noexcept nogil:
    if floating_t is float:
        fastop_momentum_f32(param, grad, velocity, n, <float>lr, <float>mu, <float>wd,
                            nesterov)
    else:
        fastop_momentum_f64(param, grad, velocity, n, lr, mu, wd, nesterov)


cdef inline void _adam_loop(floating_t* param, const floating_t* grad, floating_t* m1,
                            floating_t* m2, Py_ssize_t n, double lr, double b1, double b2,
                            double eps, double wd, double b1_pow,
                            double b2_pow) noexcept nogil:
    cdef double correction = sqrt(1.0 - b2_pow)
    cdef double step = lr * correction / (1.0 - b1_pow)
    if floating_t is float:
        fastop_adam_f32(param, grad, m1, m2, n, <float>step, <float>b1, <float>b2,
                        <float>(eps * correction), <float>wd)
    else:
        fastop_adam_f64(param, grad, m1, m2, n, step, b1, b2, eps * correction, wd)


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
    double lr, mu, wd, b1, b2, eps, b1_pow, b2_pow
    bint nesterov
    Py_ssize_t chunk        # elements per piece


cdef void _update_range(const UpdateJob* j, Py_ssize_t lo, Py_ssize_t hi,
                        floating_t* tag) noexcept nogil:
    """Elements [lo, hi) of the update."""
    cdef floating_t* param = <floating_t*>j.param + lo
    cdef const floating_t* grad = <const floating_t*>j.grad + lo
    if j.rule == SGD:
        _sgd_loop(param, grad, hi - lo, j.lr, j.wd)
    elif j.rule == MOMENTUM:
        _momentum_loop(param, grad, <floating_t*>j.m1 + lo, hi - lo, j.lr, j.mu, j.wd,
                       j.nesterov)
    else:
        _adam_loop(param, grad, <floating_t*>j.m1 + lo, <floating_t*>j.m2 + lo, hi - lo,
                   j.lr, j.b1, j.b2, j.eps, j.wd, j.b1_pow, j.b2_pow)


cdef void _update_piece(void* ctx, int k) noexcept nogil:
    """Piece k of an update (a parallel_run piece function)."""
    cdef const UpdateJob* j = <const UpdateJob*>ctx
    cdef Py_ssize_t lo = min(k * j.chunk, j.n), hi = min(lo + j.chunk, j.n)
    if j.is_double:
        _update_range(j, lo, hi, <double*>NULL)
    else:
        _update_range(j, lo, hi, <float*>NULL)


cdef void _run_update(UpdateJob* j, floating_t* tag) noexcept nogil:
    cdef int nt = get_num_threads() if use_threads(j.n) else 1
    cdef int npieces
    j.is_double = floating_t is double
    if nt == 1:
        _update_range(j, 0, j.n, tag)
        return
    npieces = nt * PIECES_PER_THREAD
    j.chunk = ((j.n + npieces - 1) // npieces + PIECE_ALIGN - 1) & ~(<Py_ssize_t>PIECE_ALIGN - 1)
    parallel_run(_update_piece, j, <int>((j.n + j.chunk - 1) // j.chunk), nt)


cdef void _sgd(floating_t* param, const floating_t* grad, Py_ssize_t n, double lr,
               double wd) noexcept nogil:
    cdef UpdateJob j
    j.rule, j.param, j.grad, j.n, j.lr, j.wd = SGD, param, grad, n, lr, wd
    _run_update(&j, param)


cdef void _momentum(floating_t* param, const floating_t* grad, floating_t* velocity,
                    Py_ssize_t n, double lr, double mu, double wd,
                    bint nesterov) noexcept nogil:
    cdef UpdateJob j
    j.rule, j.param, j.grad, j.m1, j.n = MOMENTUM, param, grad, velocity, n
    j.lr, j.mu, j.wd, j.nesterov = lr, mu, wd, nesterov
    _run_update(&j, param)


cdef void _adam(floating_t* param, const floating_t* grad, floating_t* m1, floating_t* m2,
                Py_ssize_t n, double lr, double b1, double b2, double eps, double wd,
                double b1_pow, double b2_pow) noexcept nogil:
    cdef UpdateJob j
    j.rule, j.param, j.grad, j.m1, j.m2, j.n = ADAM, param, grad, m1, m2, n
    j.lr, j.b1, j.b2, j.eps, j.wd, j.b1_pow, j.b2_pow = lr, b1, b2, eps, wd, b1_pow, b2_pow
    _run_update(&j, param)


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


cdef inline bint _is_scalar(const fastop_view* v) noexcept nogil:
    """A one-element float tensor (unknown dims allowed before a run)."""
    cdef int i
    if v.dtype != FASTOP_FLOAT32 and v.dtype != FASTOP_FLOAT64:
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


cdef inline void _copy_meta(const fastop_view* src, fastop_view* dst) noexcept nogil:
    cdef int i
    dst.dtype = src.dtype
    dst.ndim = src.ndim
    dst.size = src.size
    for i in range(src.ndim):
        dst.shape[i] = src.shape[i]


cdef int _check_like_param(fastop_view** ins, int first, int last) noexcept nogil:
    """ins[first..last) must have param's (ins[0]) shape and dtype."""
    cdef int i
    if ins[0].dtype != FASTOP_FLOAT32 and ins[0].dtype != FASTOP_FLOAT64:
        return K_ERR_DTYPE
    for i in range(first, last):
        if ins[i].dtype != ins[0].dtype:
            return K_ERR_DTYPE
        if not _same_shape(ins[i], ins[0]):
            return K_ERR_SHAPE
    return K_OK


cdef bint _all_contiguous(fastop_view** views, int n) noexcept nogil:
    cdef int i
    for i in range(n):
        if not view_is_contiguous(views[i]):
            return False
    return True


# --------------------------------------------------------------------------- CKernels
# Inputs in PaddlePaddle's order; outputs are the updated param and state, which the
# caller passes as out= (the same tensors) to update in place. make_kernel's trailing
# arguments: dispatch input 0 (param), attribute names, packer, parallel grain 0
# (always release the GIL), not elementwise, and the input each output overwrites: an
# output may be that input (the kernels copy it in first, then update the output in
# place); sharing memory with any other input stages the output (CKernel.must_stage).

cdef int _sgd_infer(fastop_view** ins, int n_in, fastop_view* outs, int n_out,
                    const fastop_attrs* attrs) noexcept nogil:
    # ins: param, grad, learning_rate
    cdef int status = _check_like_param(ins, 1, 2)
    if status != K_OK:
        return status
    if not _is_scalar(ins[2]):
        return K_ERR_SHAPE
    _copy_meta(ins[0], &outs[0])
    return K_OK


cdef int _sgd_kernel(fastop_view** ins, int n_in, fastop_view** outs, int n_out,
                     const fastop_attrs* attrs) noexcept nogil:
    cdef fastop_view* p = outs[0]
    if not _all_contiguous(ins, 2) or not view_is_contiguous(p):
        return K_ERR_SHAPE
    if p.data != ins[0].data:
        view_copy(ins[0], p)
    if p.dtype == FASTOP_FLOAT32:
        _sgd(<float*>p.data, <float*>ins[1].data, p.size, _read_scalar(ins[2]), attrs.f[0])
    else:
        _sgd(<double*>p.data, <double*>ins[1].data, p.size, _read_scalar(ins[2]), attrs.f[0])
    return K_OK


cdef int _momentum_infer(fastop_view** ins, int n_in, fastop_view* outs, int n_out,
                         const fastop_attrs* attrs) noexcept nogil:
    # ins: param, grad, velocity, learning_rate
    cdef int status = _check_like_param(ins, 1, 3)
    if status != K_OK:
        return status
    if not _is_scalar(ins[3]):
        return K_ERR_SHAPE
    _copy_meta(ins[0], &outs[0])
    _copy_meta(ins[2], &outs[1])
    return K_OK


cdef int _momentum_kernel(fastop_view** ins, int n_in, fastop_view** outs, int n_out,
                          const fastop_attrs* attrs) noexcept nogil:
    cdef fastop_view* p = outs[0]
    cdef fastop_view* v = outs[1]
    if not _all_contiguous(ins, 3) or not _all_contiguous(outs, 2):
        return K_ERR_SHAPE
    if p.data != ins[0].data:
        view_copy(ins[0], p)
    if v.data != ins[2].data:
        view_copy(ins[2], v)
    if p.dtype == FASTOP_FLOAT32:
        _momentum(<float*>p.data, <float*>ins[1].data, <float*>v.data, p.size,
                  _read_scalar(ins[3]), attrs.f[0], attrs.f[1], attrs.ints[0] != 0)
    else:
        _momentum(<double*>p.data, <double*>ins[1].data, <double*>v.data, p.size,
                  _read_scalar(ins[3]), attrs.f[0], attrs.f[1], attrs.ints[0] != 0)
    return K_OK


cdef int _adam_infer(fastop_view** ins, int n_in, fastop_view* outs, int n_out,
                     const fastop_attrs* attrs) noexcept nogil:
    # ins: param, grad, learning_rate, moment1, moment2, beta1_pow, beta2_pow
    cdef int status = _check_like_param(ins, 1, 2)
    if status == K_OK:
        status = _check_like_param(ins, 3, 5)
    if status != K_OK:
        return status
    if not (_is_scalar(ins[2]) and _is_scalar(ins[5]) and _is_scalar(ins[6])):
        return K_ERR_SHAPE
    _copy_meta(ins[0], &outs[0])
    _copy_meta(ins[3], &outs[1])
    _copy_meta(ins[4], &outs[2])
    _copy_meta(ins[5], &outs[3])
    _copy_meta(ins[6], &outs[4])
    return K_OK


cdef int _adam_kernel(fastop_view** ins, int n_in, fastop_view** outs, int n_out,
                      const fastop_attrs* attrs) noexcept nogil:
    cdef fastop_view* p = outs[0]
    cdef double b1_pow = _read_scalar(ins[5]), b2_pow = _read_scalar(ins[6])
    cdef int i
    if not _all_contiguous(ins, 5) or not _all_contiguous(outs, 3):
        return K_ERR_SHAPE
    for i in range(3):
        if outs[i].data != ins[0 if i == 0 else i + 2].data:
            view_copy(ins[0 if i == 0 else i + 2], outs[i])
    if p.dtype == FASTOP_FLOAT32:
        _adam(<float*>p.data, <float*>ins[1].data, <float*>outs[1].data,
              <float*>outs[2].data, p.size, _read_scalar(ins[2]), attrs.f[0], attrs.f[1],
              attrs.f[2], attrs.f[3], b1_pow, b2_pow)
    else:
        _adam(<double*>p.data, <double*>ins[1].data, <double*>outs[1].data,
              <double*>outs[2].data, p.size, _read_scalar(ins[2]), attrs.f[0], attrs.f[1],
              attrs.f[2], attrs.f[3], b1_pow, b2_pow)
    _write_scalar(outs[3], b1_pow * attrs.f[0])
    _write_scalar(outs[4], b2_pow * attrs.f[1])
    return K_OK


def _pack_sgd(dict attrs):
    return (), (attrs.get("weight_decay", 0.0),)


def _pack_momentum(dict attrs):
    return ((1 if attrs.get("use_nesterov", False) else 0,),
            (attrs.get("momentum", 0.9), attrs.get("weight_decay", 0.0)))


def _pack_adam(dict attrs):
    return (), (attrs.get("beta1", 0.9), attrs.get("beta2", 0.999),
                attrs.get("epsilon", 1e-8), attrs.get("weight_decay", 0.0))


sgd = make_kernel(
    "fastop::sgd_update", ("param", "grad", "learning_rate"), ("param_out",),
    _sgd_infer, NULL, NULL, NULL, _sgd_kernel, _sgd_kernel,
    0, ("weight_decay",), _pack_sgd, 0, False, ("param",))

momentum = make_kernel(
    "fastop::momentum_update", ("param", "grad", "velocity", "learning_rate"),
    ("param_out", "velocity_out"),
    _momentum_infer, NULL, NULL, NULL, _momentum_kernel, _momentum_kernel,
    0, ("momentum", "use_nesterov", "weight_decay"), _pack_momentum, 0, False,
    ("param", "velocity"))

adam = make_kernel(
    "fastop::adam_update",
    ("param", "grad", "learning_rate", "moment1", "moment2", "beta1_pow", "beta2_pow"),
    ("param_out", "moment1_out", "moment2_out", "beta1_pow_out", "beta2_pow_out"),
    _adam_infer, NULL, NULL, NULL, _adam_kernel, _adam_kernel,
    0, ("beta1", "beta2", "epsilon", "weight_decay"), _pack_adam, 0, False,
    ("param", "moment1", "moment2", "beta1_pow", "beta2_pow"))


# --------------------------------------------------------------------------- eager path

cdef int _check_state(str op, str what, DenseTensor param, DenseTensor t) except -1:
    if t.view.dtype != param.view.dtype or not _same_shape(&t.view, &param.view):
        raise ValueError(f"{op}: {what} must match the parameter (shape {param.shape}, "
                         f"dtype {param.dtype.name}), got shape {t.shape}, "
                         f"dtype {t.dtype.name}")
    if not view_is_contiguous(&t.view):
        raise ValueError(f"{op}: {what} must be contiguous")
    if t.readonly:
        raise ValueError(f"{op}: {what} is read-only")
    return 0


cdef int _check_param(str op, DenseTensor param, DenseTensor grad) except -1:
    if param.view.dtype != FASTOP_FLOAT32 and param.view.dtype != FASTOP_FLOAT64:
        raise TypeError(f"{op}: parameters must be float32 or float64, got "
                        f"{param.dtype.name}")
    if not view_is_contiguous(&param.view) or param.readonly:
        raise ValueError(f"{op}: the parameter must be a contiguous, writable tensor")
    if grad.view.dtype != param.view.dtype or not _same_shape(&grad.view, &param.view):
        raise ValueError(f"{op}: the gradient (shape {grad.shape}, dtype "
                         f"{grad.dtype.name}) does not match the parameter (shape "
                         f"{param.shape}, dtype {param.dtype.name})")
    return 0


cdef int _check_separate(str op, tuple names, tuple tensors) except -1:
    """The update loops read and write their buffers as non-overlapping (restrict): no
    two of them may share memory."""
    cdef Py_ssize_t i, j
    for i in range(len(tensors)):
        for j in range(i):
            if views_overlap(&(<DenseTensor>tensors[j]).view, &(<DenseTensor>tensors[i]).view):
                raise ValueError(f"{op}: {names[i]} shares memory with {names[j]}; the "
                                 f"parameter, its gradient and its state must be separate "
                                 f"buffers")
    return 0


def sgd_step(DenseTensor param not None, DenseTensor grad not None, double lr,
             double weight_decay=0.0) -> None:
    """``param -= lr * (grad + weight_decay * param)``, in place."""
    _check_param("fastop::sgd_update", param, grad)
    grad = grad.contiguous()
    _check_separate("fastop::sgd_update", ("param", "grad"), (param, grad))
    bump_version(param)
    with nogil:
        if param.view.dtype == FASTOP_FLOAT32:
            _sgd(<float*>param.view.data, <float*>grad.view.data, param.view.size,
                 lr, weight_decay)
        else:
            _sgd(<double*>param.view.data, <double*>grad.view.data, param.view.size,
                 lr, weight_decay)


def momentum_step(DenseTensor param not None, DenseTensor grad not None,
                  DenseTensor velocity not None, double lr, double momentum=0.9,
                  bint use_nesterov=False, double weight_decay=0.0) -> None:
    """Heavy-ball (or Nesterov) momentum update of param and velocity, in place."""
    _check_param("fastop::momentum_update", param, grad)
    _check_state("fastop::momentum_update", "velocity", param, velocity)
    grad = grad.contiguous()
    _check_separate("fastop::momentum_update", ("param", "grad", "velocity"),
                    (param, grad, velocity))
    bump_version(param)
    bump_version(velocity)
    with nogil:
        if param.view.dtype == FASTOP_FLOAT32:
            _momentum(<float*>param.view.data, <float*>grad.view.data,
                      <float*>velocity.view.data, param.view.size, lr, momentum,
                      weight_decay, use_nesterov)
        else:
            _momentum(<double*>param.view.data, <double*>grad.view.data,
                      <double*>velocity.view.data, param.view.size, lr, momentum,
                      weight_decay, use_nesterov)


def adam_step(DenseTensor param not None, DenseTensor grad not None,
              DenseTensor moment1 not None, DenseTensor moment2 not None, double lr,
              double beta1, double beta2, double epsilon, double weight_decay,
              double beta1_pow, double beta2_pow) -> None:
    """Adam update of param and both moments, in place; ``beta*_pow`` are b^t for this
    step (b at the first step)."""
    _check_param("fastop::adam_update", param, grad)
    _check_state("fastop::adam_update", "moment1", param, moment1)
    _check_state("fastop::adam_update", "moment2", param, moment2)
    if not (0.0 <= beta1_pow < 1.0 and 0.0 <= beta2_pow < 1.0):
        raise ValueError(f"fastop::adam_update: beta1_pow and beta2_pow must be in [0, 1), "
                         f"got {beta1_pow} and {beta2_pow}")
    grad = grad.contiguous()
    _check_separate("fastop::adam_update", ("param", "grad", "moment1", "moment2"),
                    (param, grad, moment1, moment2))
    bump_version(param)
    bump_version(moment1)
    bump_version(moment2)
    with nogil:
        if param.view.dtype == FASTOP_FLOAT32:
            _adam(<float*>param.view.data, <float*>grad.view.data,
                  <float*>moment1.view.data, <float*>moment2.view.data, param.view.size,
                  lr, beta1, beta2, epsilon, weight_decay, beta1_pow, beta2_pow)
        else:
            _adam(<double*>param.view.data, <double*>grad.view.data,
                  <double*>moment1.view.data, <double*>moment2.view.data, param.view.size,
                  lr, beta1, beta2, epsilon, weight_decay, beta1_pow, beta2_pow)
