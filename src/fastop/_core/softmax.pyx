# distutils: sources = src/fastop/_core/reduce_impl.c src/fastop/_core/simd_math_impl.c
"""Softmax kernels: softmax, log_softmax along an axis, their backward kernels, and the
fused softmax + cross-entropy with integer labels (forward and backward).

All are numerically stable (the row maximum is subtracted before ``exp``). A kernel
works row by row: a row is the run of elements along ``axis`` (the last axis for
cross-entropy); rows are independent, so large inputs split rows over threads. When
every operand of a row is unit-stride along the axis, the row runs on the SIMD loops of
``reduce_impl.c`` (max, pairwise sum, dot) and ``simd_math.h`` (exp, and for softmax and
cross-entropy three passes per row: the max; exp(x - max) and its sum fused, while the
next row is prefetched; the scaling). The cross-entropy gradient is one pass, streamed
to memory when it is 8 MB or more. Other strides take a scalar loop with libm. Rows of
at most SHORT_ROW (32) elements stored back to back (a 64×10 batch of logits) would
spend more on those calls than on their elements: softmax and cross-entropy run them as
blocks of CHUNK elements with one SIMD exp per block, and the gradient as one plain
loop per row.

Formulas (per row; ``g`` is the row's loss gradient)::

    softmax          y = exp(x - m) / s,     m = max(x), s = sum(exp(x - m))
    log_softmax      y = (x - m) - log(s)
    softmax_grad     dx = y * (dy - sum(dy * y))
    log_softmax_grad dx = dy - exp(y) * sum(dy)
    cross-entropy    loss = log(s) - (x[label] - m),  softmax = y
    its gradient     dlogits = g * (softmax - onehot(label))

Rows whose label equals ``ignore_index`` get loss 0 and gradient 0; any other label
outside ``[0, classes)`` is an error naming the op. Attributes: ``ints = [axis]`` for
softmax and log_softmax (and their grads), ``ints = [ignore_index]`` for cross-entropy.
"""
from libc.math cimport exp, log
from fastop._core.storage cimport (fastop_view, fastop_attrs, FASTOP_MAX_NDIM, FASTOP_INT32,
                                   FASTOP_INT64, FASTOP_FLOAT32, floating_t,
                                   view_copy_meta)
from fastop._core.kernel cimport (CKernel, make_kernel, K_OK, K_ERR_ATTR, K_ERR_DTYPE, K_ERR_SHAPE,
                                  K_ERR_VALUE, get_num_threads, use_threads, normalize_axis)
from fastop._core.parallel cimport parallel_run
from fastop._core.kernel import int_attr

from fastop._core.simd_math cimport (FASTOP_STREAM_MIN_BYTES, fastop_vexp_f32, fastop_vexp_f64,
                                     fastop_vexp_shift_sum_f32, fastop_vexp_shift_sum_f64,
                                     fastop_vscale_f32, fastop_vscale_f64)
from fastop._core.reduce_impl cimport (fastop_sum_f32, fastop_sum_f64, fastop_dot_f32,
                                       fastop_dot_f64, fastop_max_f32, fastop_max_f64)

__all__ = ["softmax", "log_softmax", "softmax_grad", "log_softmax_grad",
           "softmax_cross_entropy", "softmax_cross_entropy_grad"]

cdef enum:
    SOFTMAX = 0
    LOG_SOFTMAX = 1
    SOFTMAX_GRAD = 2
    LOG_SOFTMAX_GRAD = 3
    CE = 4
    CE_GRAD = 5
    CHUNK = 512           # elements of a stack buffer (exp of a piece of a row)
    EXP_COST = 2          # a row element costs about two elementwise ones (threads sooner)
    ROWS_PER_PIECE = 16   # rows of a threaded piece (more pieces than threads balance load)
    PIECES_PER_THREAD = 4 # ... but at least this many pieces per thread when rows are few
    MAX_PIECES = 4096
    SHORT_ROW = 32        # rows this short and back to back run as blocks: _short_block


ctypedef struct Rows:
    int mode
    int axis                            # the axis of the rows in `shape`
    int ndim
    ptrdiff_t n                         # row length
    ptrdiff_t nrows
    ptrdiff_t ignore_index
    bint stream                         # write results with non-temporal stores
    bint short_rows                     # softmax / cross-entropy rows run as blocks
    ptrdiff_t block_rows                # ... of this many rows (CHUNK elements)
    const fastop_view* shape            # the operand whose dims define the rows
    const fastop_view* v[4]             # operands, in the order of the kernel's in+out
    int npieces                         # threaded: rows are split into this many ranges


# --------------------------------------------------------------------------- row math

cdef inline floating_t _max(const floating_t* x, ptrdiff_t n, ptrdiff_t s) noexcept nogil:
    """Row maximum (n >= 1); NaN wins."""
    cdef ptrdiff_t i
    cdef floating_t m = x[0], v
    if s == 1:
        if floating_t is float:
            return fastop_max_f32(x, n)
        else:
            return fastop_max_f64(x, n)
    for i in range(1, n):
        v = x[i * s]
        if v > m or v != v:
            m = v
    return m


cdef inline floating_t _sum(const floating_t* x, ptrdiff_t n) noexcept nogil:
    if floating_t is float:
        return fastop_sum_f32(x, n)
    else:
        return fastop_sum_f64(x, n)


cdef inline void _vexp(const floating_t* x, floating_t* y, ptrdiff_t n) noexcept nogil:
    if floating_t is float:
        fastop_vexp_f32(x, y, n)
    else:
        fastop_vexp_f64(x, y, n)


cdef inline floating_t _vexp_shift_sum(const floating_t* x, floating_t shift, floating_t* y,
                                      ptrdiff_t n, const floating_t* next_x,
                                      const floating_t* next_y) noexcept nogil:
    """y = exp(x - shift) over a contiguous run, returning sum(y): one pass (SIMD) that
    also prefetches the next row (next_x, next_y; or both NULL)."""
    if floating_t is float:
        return fastop_vexp_shift_sum_f32(x, shift, y, n, next_x, next_y)
    else:
        return fastop_vexp_shift_sum_f64(x, shift, y, n, next_x, next_y)


cdef inline void _vscale(const floating_t* x, floating_t a, floating_t* y, ptrdiff_t n,
                         ptrdiff_t hot, bint stream) noexcept nogil:
    """y = a * x over a contiguous run, then y[hot] -= a if hot is in [0, n) (SIMD);
    stream: non-temporal stores (a large result that will not stay in cache)."""
    if floating_t is float:
        fastop_vscale_f32(x, a, y, n, hot, stream)
    else:
        fastop_vscale_f64(x, a, y, n, hot, stream)


cdef floating_t _softmax_row(const floating_t* x, ptrdiff_t xs, floating_t* y, ptrdiff_t ys,
                             ptrdiff_t n, floating_t* m_out, const floating_t* next_x,
                             const floating_t* next_y) noexcept nogil:
    """y = exp(x - max) / sum; returns the sum, sets *m_out = max. Contiguous rows take
    three passes: the max, exp and sum fused, the scaling (the last two in L1); next_x and
    next_y (the next row, or NULL) are prefetched meanwhile."""
    cdef ptrdiff_t i
    cdef floating_t m = _max(x, n, xs), s = 0, inv
    m_out[0] = m
    if xs == 1 and ys == 1:
        s = _vexp_shift_sum(x, m, y, n, next_x, next_y)
        _vscale(y, 1 / s, y, n, -1, False)
    else:
        for i in range(n):
            y[i * ys] = exp(x[i * xs] - m)
            s += y[i * ys]
        inv = 1 / s
        for i in range(n):
            y[i * ys] = y[i * ys] * inv
    return s


cdef floating_t _log_sum_exp_shifted(const floating_t* x, ptrdiff_t xs, ptrdiff_t n,
                                     floating_t m) noexcept nogil:
    """log(sum(exp(x - m))) without writing anything but a stack buffer."""
    cdef floating_t buf[CHUNK]
    cdef floating_t s = 0
    cdef ptrdiff_t i, c, k
    if xs == 1:
        for c in range((n + CHUNK - 1) // CHUNK):
            k = min(<ptrdiff_t>CHUNK, n - c * CHUNK)
            s += _vexp_shift_sum(x + c * CHUNK, m, buf, k, NULL, NULL)
    else:
        for i in range(n):
            s += exp(x[i * xs] - m)
    return log(s)


cdef void _log_softmax_row(const floating_t* x, ptrdiff_t xs, floating_t* y, ptrdiff_t ys,
                           ptrdiff_t n) noexcept nogil:
    cdef floating_t m = _max(x, n, xs)
    cdef floating_t lse = _log_sum_exp_shifted(x, xs, n, m)
    cdef ptrdiff_t i
    for i in range(n):
        y[i * ys] = (x[i * xs] - m) - lse


cdef void _softmax_grad_row(const floating_t* y, ptrdiff_t ys, const floating_t* dy,
                            ptrdiff_t dys, floating_t* dx, ptrdiff_t dxs,
                            ptrdiff_t n) noexcept nogil:
    cdef ptrdiff_t i
    cdef floating_t dot = 0
    if ys == 1 and dys == 1:
        if floating_t is float:
            dot = fastop_dot_f32(y, dy, n)
        else:
            dot = fastop_dot_f64(y, dy, n)
    else:
        for i in range(n):
            dot += y[i * ys] * dy[i * dys]
    for i in range(n):
        dx[i * dxs] = y[i * ys] * (dy[i * dys] - dot)


cdef void _log_softmax_grad_row(const floating_t* y, ptrdiff_t ys, const floating_t* dy,
                                ptrdiff_t dys, floating_t* dx, ptrdiff_t dxs,
                                ptrdiff_t n) noexcept nogil:
    cdef floating_t buf[CHUNK]
    cdef floating_t s = 0
    cdef ptrdiff_t i, c, k
    if dys == 1:
        s = _sum(dy, n)
    else:
        for i in range(n):
            s += dy[i * dys]
    if ys == 1 and dys == 1 and dxs == 1:
        for c in range((n + CHUNK - 1) // CHUNK):
            k = min(<ptrdiff_t>CHUNK, n - c * CHUNK)
            _vexp(y + c * CHUNK, buf, k)
            for i in range(k):
                dx[c * CHUNK + i] = dy[c * CHUNK + i] - buf[i] * s
    else:
        for i in range(n):
            dx[i * dxs] = dy[i * dys] - exp(y[i * ys]) * s


# --------------------------------------------------------------------------- rows

cdef inline ptrdiff_t _row_offset(const Rows* R, const fastop_view* v, ptrdiff_t r) noexcept nogil:
    """Byte offset in v of row r (rows enumerate the dims of R.shape but the axis)."""
    cdef int d
    cdef ptrdiff_t off = 0, q
    if R.ndim <= 2:     # one row dim: no division
        return r * v.strides[1 - R.axis] if R.ndim == 2 else 0
    for d in range(R.ndim - 1, -1, -1):
        if d != R.axis:
            q = r % R.shape.shape[d]
            r = r // R.shape.shape[d]
            off += q * v.strides[d]
    return off


cdef inline ptrdiff_t _label_at(const fastop_view* label, ptrdiff_t off) noexcept nogil:
    if label.dtype == FASTOP_INT32:
        return (<const int*>(label.data + off))[0]
    return (<const long long*>(label.data + off))[0]


cdef inline ptrdiff_t _step(const fastop_view* v, int axis, floating_t* tag) noexcept nogil:
    """Element step of v along the rows' axis (1 for a 0-d tensor)."""
    if v.ndim == 0:
        return 1
    return v.strides[axis] // <ptrdiff_t>sizeof(floating_t)


cdef inline void _next_row(const Rows* R, ptrdiff_t r, int in_at, int out_at,
                           const floating_t** next_x, const floating_t** next_y) noexcept nogil:
    """Where row r + 1 of operands in_at and out_at starts (NULL past the last row)."""
    if r + 1 < R.nrows:
        next_x[0] = <const floating_t*>(R.v[in_at].data + _row_offset(R, R.v[in_at], r + 1))
        next_y[0] = <const floating_t*>(R.v[out_at].data + _row_offset(R, R.v[out_at], r + 1))
    else:
        next_x[0] = NULL
        next_y[0] = NULL


cdef void _row(Rows* R, ptrdiff_t r, floating_t* tag) noexcept nogil:
    """Compute row r of R's kernel."""
    cdef const fastop_view** v = R.v
    cdef int a = R.axis
    cdef ptrdiff_t n = R.n, label, i, xs, ys
    cdef floating_t m, s, g
    cdef const floating_t* x
    cdef floating_t* y
    cdef const floating_t* next_x
    cdef const floating_t* next_y
    if R.mode == SOFTMAX or R.mode == LOG_SOFTMAX:
        x = <const floating_t*>(v[0].data + _row_offset(R, v[0], r))
        y = <floating_t*>(v[1].data + _row_offset(R, v[1], r))
        if R.mode == SOFTMAX:
            _next_row(R, r, 0, 1, &next_x, &next_y)
            _softmax_row(x, _step(v[0], a, tag), y, _step(v[1], a, tag), n, &m, next_x,
                         next_y)
        else:
            _log_softmax_row(x, _step(v[0], a, tag), y, _step(v[1], a, tag), n)
    elif R.mode == SOFTMAX_GRAD or R.mode == LOG_SOFTMAX_GRAD:
        x = <const floating_t*>(v[0].data + _row_offset(R, v[0], r))
        y = <floating_t*>(v[2].data + _row_offset(R, v[2], r))
        if R.mode == SOFTMAX_GRAD:
            _softmax_grad_row(x, _step(v[0], a, tag),
                              <const floating_t*>(v[1].data + _row_offset(R, v[1], r)),
                              _step(v[1], a, tag), y, _step(v[2], a, tag), n)
        else:
            _log_softmax_grad_row(x, _step(v[0], a, tag),
                                  <const floating_t*>(v[1].data + _row_offset(R, v[1], r)),
                                  _step(v[1], a, tag), y, _step(v[2], a, tag), n)
    elif R.mode == CE:
        # v: logits, label, loss, softmax
        x = <const floating_t*>(v[0].data + _row_offset(R, v[0], r))
        y = <floating_t*>(v[3].data + _row_offset(R, v[3], r))
        label = _label_at(v[1], _row_offset(R, v[1], r))
        _next_row(R, r, 0, 3, &next_x, &next_y)
        s = _softmax_row(x, _step(v[0], a, tag), y, _step(v[3], a, tag), n, &m, next_x,
                         next_y)
        if label == R.ignore_index:       # any other label is in [0, n): _check_labels
            g = 0
        else:
            g = log(s) - (x[label * _step(v[0], a, tag)] - m)
        (<floating_t*>(v[2].data + _row_offset(R, v[2], r)))[0] = g
    else:
        # v: label, softmax, dloss, dlogits
        x = <const floating_t*>(v[1].data + _row_offset(R, v[1], r))
        y = <floating_t*>(v[3].data + _row_offset(R, v[3], r))
        label = _label_at(v[0], _row_offset(R, v[0], r))
        g = (<const floating_t*>(v[2].data + _row_offset(R, v[2], r)))[0]
        if label == R.ignore_index:
            g = 0
            label = -1
        xs = _step(v[1], a, tag)
        ys = _step(v[3], a, tag)
        if xs == 1 and ys == 1:
            _vscale(x, g, y, n, label, R.stream)
        else:
            for i in range(n):
                y[i * ys] = x[i * xs] * g
            if label >= 0:
                y[label * ys] -= g


cdef void _short_block(const Rows* R, ptrdiff_t lo, ptrdiff_t hi,
                       floating_t* tag) noexcept nogil:
    """Rows [lo, hi) of softmax or cross-entropy when rows are short and contiguous: a
    call of the SIMD loops per row costs more than a row of ten classes, so the block
    takes each row's max and shift, then one SIMD exp over the whole block, then each
    row's sum and scaling (and, for cross-entropy, its loss)."""
    cdef ptrdiff_t n = R.n, rows = hi - lo, r, i, label
    cdef floating_t mx[CHUNK]
    cdef const floating_t* x = <const floating_t*>(R.v[0].data + lo * R.v[0].strides[0])
    cdef floating_t* y
    cdef floating_t m, v, s, inv, g
    y = <floating_t*>(R.v[1 if R.mode == SOFTMAX else 3].data + lo * n * <ptrdiff_t>sizeof(floating_t))
    for r in range(rows):
        m = x[r * n]
        for i in range(1, n):          # NaN wins, as in _max
            v = x[r * n + i]
            if v > m or v != v:
                m = v
        mx[r] = m
        for i in range(n):
            y[r * n + i] = x[r * n + i] - m
    _vexp(y, y, rows * n)
    for r in range(rows):
        s = 0
        for i in range(n):
            s += y[r * n + i]
        inv = 1 / s
        for i in range(n):
            y[r * n + i] = y[r * n + i] * inv
        if R.mode == CE:
            label = _label_at(R.v[1], _row_offset(R, R.v[1], lo + r))
            if label == R.ignore_index:
                g = 0
            else:
                g = log(s) - (x[r * n + label] - mx[r])
            (<floating_t*>(R.v[2].data + _row_offset(R, R.v[2], lo + r)))[0] = g


cdef void _short_grad_block(const Rows* R, ptrdiff_t lo, ptrdiff_t hi,
                            floating_t* tag) noexcept nogil:
    """Rows [lo, hi) of the cross-entropy gradient when rows are short and contiguous:
    g * softmax, less g at the label, in one plain loop per row (no call per row)."""
    cdef ptrdiff_t n = R.n, r, i, label
    cdef const floating_t* x = <const floating_t*>(R.v[1].data + lo * R.v[1].strides[0])
    cdef floating_t* y = <floating_t*>(R.v[3].data + lo * R.v[3].strides[0])
    cdef floating_t g
    for r in range(hi - lo):
        label = _label_at(R.v[0], _row_offset(R, R.v[0], lo + r))
        g = (<const floating_t*>(R.v[2].data + _row_offset(R, R.v[2], lo + r)))[0]
        if label == R.ignore_index:
            g = 0
            label = -1
        for i in range(n):
            y[r * n + i] = x[r * n + i] * g
        if label >= 0:
            y[r * n + label] -= g


cdef void _rows_range(Rows* R, ptrdiff_t lo, ptrdiff_t hi, floating_t* tag) noexcept nogil:
    """Rows [lo, hi) of R's kernel: in blocks when R.short_rows, else row by row."""
    cdef ptrdiff_t r
    if R.short_rows and R.mode == CE_GRAD:
        _short_grad_block(R, lo, hi, tag)
    elif R.short_rows:
        r = lo
        while r < hi:
            _short_block(R, r, min(hi, r + R.block_rows), tag)
            r += R.block_rows
    else:
        for r in range(lo, hi):
            _row(R, r, tag)


cdef bint _dense_rows(const fastop_view* v, ptrdiff_t n, ptrdiff_t itemsize) noexcept nogil:
    """v (2-d) holds its rows of n elements back to back."""
    return v.strides[1] == itemsize and v.strides[0] == n * itemsize


cdef int _check_labels(const Rows* R) noexcept nogil:
    """K_ERR_VALUE when a label is neither ignore_index nor a class in [0, n). Checked
    before any row is written, so a failed call leaves its outputs as they were."""
    cdef const fastop_view* labels = R.v[1 if R.mode == CE else 0]
    cdef ptrdiff_t r, label
    for r in range(R.nrows):
        label = _label_at(labels, _row_offset(R, labels, r))
        if label != R.ignore_index and (label < 0 or label >= R.n):
            return K_ERR_VALUE
    return K_OK


cdef void _rows_piece(void* ctx, int k) noexcept nogil:
    """Rows of piece k (a parallel_run piece function): the k-th of R.npieces ranges."""
    cdef Rows* R = <Rows*>ctx
    cdef ptrdiff_t r
    cdef ptrdiff_t lo = R.nrows * k // R.npieces, hi = R.nrows * (k + 1) // R.npieces
    if R.shape.dtype == FASTOP_FLOAT32:
        _rows_range(R, lo, hi, <float*>NULL)
    else:
        _rows_range(R, lo, hi, <double*>NULL)


cdef int _run_rows(Rows* R, floating_t* tag) noexcept nogil:
    cdef ptrdiff_t r
    cdef int nt
    if (R.mode == CE or R.mode == CE_GRAD) and _check_labels(R) != K_OK:
        return K_ERR_VALUE
    if R.n == 0:        # no classes: every label is ignore_index (checked), loss 0
        if R.mode == CE:
            for r in range(R.nrows):
                (<floating_t*>(R.v[2].data + _row_offset(R, R.v[2], r)))[0] = 0
        return K_OK
    if R.nrows > 1 and use_threads(R.nrows * R.n * EXP_COST):
        # ranges of ROWS_PER_PIECE rows taken as they come (fastop._core.parallel)
        nt = get_num_threads()
        R.npieces = <int>min(R.nrows, max((R.nrows + ROWS_PER_PIECE - 1) // ROWS_PER_PIECE,
                                          <ptrdiff_t>nt * PIECES_PER_THREAD), MAX_PIECES)
        parallel_run(_rows_piece, R, R.npieces, nt)
    else:
        _rows_range(R, 0, R.nrows, tag)
    return K_OK


cdef int _launch(int mode, int axis, ptrdiff_t ignore_index, const fastop_view* shape,
                 fastop_view** ins, int n_in, fastop_view** outs, int n_out) noexcept nogil:
    cdef Rows R
    cdef int i
    cdef ptrdiff_t itemsize
    R.mode = mode
    R.axis = axis
    R.ndim = shape.ndim
    R.shape = shape
    R.n = shape.shape[axis] if shape.ndim > 0 else 1
    R.nrows = 1
    for i in range(shape.ndim):
        if i != axis:
            R.nrows *= shape.shape[i]
    R.ignore_index = ignore_index
    # the gradient's rows are written once and not read again here: past the cache
    # sizes, stream them to memory (as elementwise results are)
    R.stream = mode == CE_GRAD and R.nrows * R.n * (
        4 if shape.dtype == FASTOP_FLOAT32 else 8) >= FASTOP_STREAM_MIN_BYTES
    for i in range(n_in):
        R.v[i] = ins[i]
    for i in range(n_out):
        R.v[n_in + i] = outs[i]
    itemsize = 4 if shape.dtype == FASTOP_FLOAT32 else 8
    R.short_rows = shape.ndim == 2 and axis == 1 and 0 < R.n <= SHORT_ROW
    if R.short_rows and mode == CE_GRAD:        # softmax in, dlogits out
        R.short_rows = (not R.stream and _dense_rows(R.v[1], R.n, itemsize)
                        and _dense_rows(R.v[3], R.n, itemsize))
    elif R.short_rows:                          # logits (or x) in, softmax out
        R.short_rows = ((mode == SOFTMAX or mode == CE) and _dense_rows(R.v[0], R.n, itemsize)
                        and _dense_rows(R.v[1 if mode == SOFTMAX else 3], R.n, itemsize))
    R.block_rows = CHUNK // R.n if R.n > 0 else 1
    if shape.dtype == FASTOP_FLOAT32:
        return _run_rows(&R, <float*>NULL)
    return _run_rows(&R, <double*>NULL)


# --------------------------------------------------------------------------- softmax

cdef int _norm_axis(const fastop_attrs* a, int ndim) noexcept nogil:
    """ints[0] normalized against ndim (a 0-d tensor takes axis 0 or -1); -1 if invalid."""
    return normalize_axis(a.ints[0] if a.n_ints > 0 else -1, ndim if ndim > 0 else 1)


cdef int _same_shape(const fastop_view* a, const fastop_view* b) noexcept nogil:
    cdef int d
    if a.ndim != b.ndim:
        return 0
    for d in range(a.ndim):
        if a.shape[d] != b.shape[d] and a.shape[d] != -1 and b.shape[d] != -1:
            return 0
    return 1


cdef int _infer_unary(fastop_view** ins, int n_in, fastop_view* outs, int n_out,
                      const fastop_attrs* a) noexcept nogil:
    if _norm_axis(a, ins[0].ndim) < 0:
        return K_ERR_ATTR
    view_copy_meta(ins[0], &outs[0])
    return K_OK


cdef int _infer_grad(fastop_view** ins, int n_in, fastop_view* outs, int n_out,
                     const fastop_attrs* a) noexcept nogil:
    """(y, dy) -> dx: same shapes, same dtypes."""
    if _norm_axis(a, ins[0].ndim) < 0:
        return K_ERR_ATTR
    if ins[0].dtype != ins[1].dtype:
        return K_ERR_DTYPE
    if not _same_shape(ins[0], ins[1]):
        return K_ERR_SHAPE
    view_copy_meta(ins[0], &outs[0])
    return K_OK


cdef int _softmax_kernel(fastop_view** ins, int n_in, fastop_view** outs, int n_out,
                         const fastop_attrs* a) noexcept nogil:
    return _launch(SOFTMAX, _norm_axis(a, ins[0].ndim), 0, ins[0], ins, n_in, outs, n_out)


cdef int _log_softmax_kernel(fastop_view** ins, int n_in, fastop_view** outs, int n_out,
                             const fastop_attrs* a) noexcept nogil:
    return _launch(LOG_SOFTMAX, _norm_axis(a, ins[0].ndim), 0, ins[0], ins, n_in, outs, n_out)


cdef int _softmax_grad_kernel(fastop_view** ins, int n_in, fastop_view** outs, int n_out,
                              const fastop_attrs* a) noexcept nogil:
    return _launch(SOFTMAX_GRAD, _norm_axis(a, ins[0].ndim), 0, ins[0], ins, n_in, outs,
                   n_out)


cdef int _log_softmax_grad_kernel(fastop_view** ins, int n_in, fastop_view** outs,
                                  int n_out, const fastop_attrs* a) noexcept nogil:
    return _launch(LOG_SOFTMAX_GRAD, _norm_axis(a, ins[0].ndim), 0, ins[0], ins, n_in, outs,
                   n_out)


def _pack_axis(attrs):
    return [int_attr(attrs, "axis", -1)], []


# --------------------------------------------------------------------------- cross-entropy

cdef int _check_rows(const fastop_view* logits, const fastop_view* v,
                     bint allow_flat) noexcept nogil:
    """v has logits' leading dims and a last dim of 1 (or, if allow_flat, no last dim)."""
    cdef int d, lead = logits.ndim - 1
    if v.ndim == lead + 1:
        if v.shape[lead] != 1 and v.shape[lead] != -1:
            return 0
    elif not (allow_flat and v.ndim == lead):
        return 0
    for d in range(lead):
        if v.shape[d] != logits.shape[d] and v.shape[d] != -1 and logits.shape[d] != -1:
            return 0
    return 1


cdef int _infer_ce(fastop_view** ins, int n_in, fastop_view* outs, int n_out,
                   const fastop_attrs* a) noexcept nogil:
    """(logits [*, C], label [*] or [*, 1]) -> (loss [*, 1], softmax [*, C])."""
    cdef const fastop_view* logits = ins[0]
    cdef const fastop_view* label = ins[1]
    if label.dtype != FASTOP_INT32 and label.dtype != FASTOP_INT64:
        return K_ERR_DTYPE
    if logits.ndim < 1 or not _check_rows(logits, label, True):
        return K_ERR_SHAPE
    view_copy_meta(logits, &outs[0])
    outs[0].shape[logits.ndim - 1] = 1
    view_copy_meta(logits, &outs[1])
    return K_OK


cdef int _infer_ce_grad(fastop_view** ins, int n_in, fastop_view* outs, int n_out,
                        const fastop_attrs* a) noexcept nogil:
    """(label, softmax [*, C], dloss [*, 1]) -> dlogits [*, C]."""
    cdef const fastop_view* label = ins[0]
    cdef const fastop_view* sm = ins[1]
    if label.dtype != FASTOP_INT32 and label.dtype != FASTOP_INT64:
        return K_ERR_DTYPE
    if ins[2].dtype != sm.dtype:
        return K_ERR_DTYPE
    if sm.ndim < 1 or not _check_rows(sm, label, True) or not _check_rows(sm, ins[2], False):
        return K_ERR_SHAPE
    view_copy_meta(sm, &outs[0])
    return K_OK


cdef int _ce_kernel(fastop_view** ins, int n_in, fastop_view** outs, int n_out,
                    const fastop_attrs* a) noexcept nogil:
    return _launch(CE, ins[0].ndim - 1, a.ints[0], ins[0], ins, n_in, outs, n_out)


cdef int _ce_grad_kernel(fastop_view** ins, int n_in, fastop_view** outs, int n_out,
                         const fastop_attrs* a) noexcept nogil:
    return _launch(CE_GRAD, ins[1].ndim - 1, a.ints[0], ins[1], ins, n_in, outs, n_out)


def _pack_ignore_index(attrs):
    return [int_attr(attrs, "ignore_index", -100)], []


# --------------------------------------------------------------------------- kernels

cdef tuple AXIS = ("axis",)

softmax = make_kernel("softmax", ("x",), ("out",), _infer_unary, NULL, NULL, NULL,
                      _softmax_kernel, _softmax_kernel, 0, AXIS, _pack_axis, 0)
log_softmax = make_kernel("log_softmax", ("x",), ("out",), _infer_unary, NULL, NULL,
                          NULL, _log_softmax_kernel, _log_softmax_kernel, 0, AXIS,
                          _pack_axis, 0)
softmax_grad = make_kernel("softmax_grad", ("y", "dy"), ("dx",), _infer_grad, NULL,
                           NULL, NULL, _softmax_grad_kernel, _softmax_grad_kernel, 0, AXIS,
                           _pack_axis, 0)
log_softmax_grad = make_kernel("log_softmax_grad", ("y", "dy"), ("dx",),
                               _infer_grad, NULL, NULL, NULL, _log_softmax_grad_kernel,
                               _log_softmax_grad_kernel, 0, AXIS, _pack_axis, 0)
softmax_cross_entropy = make_kernel(
    "softmax_cross_entropy", ("logits", "label"), ("loss", "softmax"), _infer_ce,
    NULL, NULL, NULL, _ce_kernel, _ce_kernel, 0, ("ignore_index",), _pack_ignore_index, 0)
softmax_cross_entropy_grad = make_kernel(
    "softmax_cross_entropy_grad", ("label", "softmax", "dloss"), ("dlogits",),
    _infer_ce_grad, NULL, NULL, NULL, _ce_grad_kernel, _ce_grad_kernel, 1, ("ignore_index",),
    _pack_ignore_index, 0)
# what their errors mean (CKernel.reasons)
for _k in (softmax, log_softmax, softmax_grad, log_softmax_grad):
    (<CKernel>_k).reasons = {K_ERR_ATTR: "axis must be in [-ndim, ndim)"}
for _k in (softmax_cross_entropy, softmax_cross_entropy_grad):
    (<CKernel>_k).reasons = {K_ERR_VALUE: "each label must be a class in [0, C) (C: the "
                                          "logits' size along the class axis) or equal "
                                          "ignore_index"}
