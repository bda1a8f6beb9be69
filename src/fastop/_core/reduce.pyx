# distutils: sources = src/fastop/_core/reduce_impl.c
"""Reduction kernels: sum, mean, max, argmax along any axes (keepdim), sum_to_shape.

Every reduction is planned the same way: size-1 dims are dropped, the remaining dims
are split into kept and reduced ones, each group is ordered by input stride and
adjacent dims that are contiguous with each other are merged. Then one of two loops
runs:

* rows: the innermost reduced dim is unit-stride (or nothing is): each output element
  reduces contiguous runs with the SIMD loops of ``reduce_impl.c`` (pairwise sums,
  like numpy's), other strides fall back to a scalar loop;
* columns: the innermost kept dim is unit-stride in input and output: whole rows of
  the input are added (max-ed) into a chunk of the output that stays in L1.

Work above ``use_threads`` runs on fastop's thread pool (:mod:`fastop._core.parallel`):
over ranges of output elements or of output tiles (the same result as one thread), or
(a full reduction) over pieces of one run, combined afterwards in piece order (the same
result for the same thread count, within rounding of the serial one).

``sum`` of int32 or bool input writes int64 (accumulated in int64, read in place: no
cast copy); such sums take the rows loop. Sums of uint8, int8 and int16 keep their dtype
(PaddlePaddle's documented rule), wrapping like numpy's ``sum(dtype=x.dtype)``.

Attributes are packed as ``ints = [keepdim, *axes]`` (no axes: reduce everything),
argmax as ``[keepdim, has_axis, axis]``, sum_to_shape as ``ints = shape``.
"""
from libc.math cimport NAN
from libc.string cimport memset
from libc.stdint cimport int8_t, int16_t
from fastop._core.storage cimport (fastop_view, fastop_attrs, FASTOP_MAX_NDIM, FASTOP_INT32,
                                   FASTOP_INT64, FASTOP_FLOAT32, FASTOP_FLOAT64, FASTOP_BOOL,
                                   FASTOP_INT8, FASTOP_INT16, itemsize_of)
from fastop._core.kernel cimport (CKernel, make_kernel, accept_narrow_ints, K_OK, K_ERR_ATTR, K_ERR_SHAPE,
                                  get_num_threads, use_threads, normalize_axis)
from fastop._core.parallel cimport parallel_run
from fastop._core.kernel import bool_attr, int_attr, ints_attr

from fastop._core.reduce_impl cimport (fastop_sum_f32, fastop_sum_f64, fastop_max_f32,
                                       fastop_max_f64, fastop_addto_f32,
                                       fastop_addto_f64, fastop_maxto_f32,
                                       fastop_maxto_f64)

__all__ = ["sum", "mean", "max", "argmax", "sum_to_shape"]

# The element types these loops read: fastop's numeric dtypes; uchar is uint8 and bool
# (one byte, 0 or 1) for sum.
ctypedef unsigned char uchar
ctypedef fused reduce_t:
    float
    double
    int
    long long
    int16_t
    int8_t
    uchar

cdef enum:
    OP_SUM = 0
    OP_MEAN = 1
    OP_MAX = 2
    COL_CHUNK = 2048      # output elements per column tile (8-16 KB: stays in L1)
    MAX_PIECES = 256      # at most this many pieces of one run reduced in parallel
    PIECES_PER_THREAD = 8 # ranges of outputs/tiles per thread, taken as they come
    WORK_SHIFT = 3        # a reduction does ~1/8 of an elementwise op's work per element


ctypedef struct Plan:
    int nk                              # kept dims (after merging)
    int nr                              # reduced dims (after merging)
    ptrdiff_t kshape[FASTOP_MAX_NDIM]
    ptrdiff_t kin[FASTOP_MAX_NDIM]      # byte strides in the input
    ptrdiff_t kout[FASTOP_MAX_NDIM]     # byte strides in the output
    ptrdiff_t rshape[FASTOP_MAX_NDIM]
    ptrdiff_t rin[FASTOP_MAX_NDIM]
    ptrdiff_t nout                      # output elements
    ptrdiff_t nred                      # input elements per output element
    bint widen                          # integer sum into int64 (int32/bool input)


# --------------------------------------------------------------------------- planning

cdef inline ptrdiff_t _abs(ptrdiff_t v) noexcept nogil:
    return -v if v < 0 else v


cdef void _sort_dims(ptrdiff_t* shape, ptrdiff_t* sin, ptrdiff_t* sout, int n) noexcept nogil:
    """Insertion sort by |input stride|, largest first (sout may be NULL)."""
    cdef int i, j
    cdef ptrdiff_t a, b, c
    for i in range(1, n):
        a = shape[i]
        b = sin[i]
        c = sout[i] if sout != NULL else 0
        j = i - 1
        while j >= 0 and _abs(sin[j]) < _abs(b):
            shape[j + 1] = shape[j]
            sin[j + 1] = sin[j]
            if sout != NULL:
                sout[j + 1] = sout[j]
            j -= 1
        shape[j + 1] = a
        sin[j + 1] = b
        if sout != NULL:
            sout[j + 1] = c


cdef int _merge_dims(ptrdiff_t* shape, ptrdiff_t* sin, ptrdiff_t* sout, int n) noexcept nogil:
    """Merge neighbours whose strides make them one dim; returns the new count."""
    cdef int i, m = 0
    for i in range(n):
        if m > 0 and sin[m - 1] == sin[i] * shape[i] and (
                sout == NULL or sout[m - 1] == sout[i] * shape[i]):
            shape[m - 1] *= shape[i]
            sin[m - 1] = sin[i]
            if sout != NULL:
                sout[m - 1] = sout[i]
        else:
            shape[m] = shape[i]
            sin[m] = sin[i]
            if sout != NULL:
                sout[m] = sout[i]
            m += 1
    return m


cdef void _make_plan(const fastop_view* x, const fastop_view* out, const bint* reduced,
                     const int* outdim, Plan* p) noexcept nogil:
    """Plan reducing x into out. outdim[d]: the output dim of input dim d (kept dims)."""
    cdef int d
    p.nk = 0
    p.nr = 0
    p.nout = 1
    p.nred = 1
    p.widen = out.dtype == FASTOP_INT64 and x.dtype != FASTOP_INT64
    for d in range(x.ndim):
        if reduced[d]:
            p.nred *= x.shape[d]
        else:
            p.nout *= x.shape[d]
        if x.shape[d] == 1:
            continue
        if reduced[d]:
            p.rshape[p.nr] = x.shape[d]
            p.rin[p.nr] = x.strides[d]
            p.nr += 1
        else:
            p.kshape[p.nk] = x.shape[d]
            p.kin[p.nk] = x.strides[d]
            p.kout[p.nk] = out.strides[outdim[d]]
            p.nk += 1
    _sort_dims(p.rshape, p.rin, NULL, p.nr)
    _sort_dims(p.kshape, p.kin, p.kout, p.nk)
    p.nr = _merge_dims(p.rshape, p.rin, NULL, p.nr)
    p.nk = _merge_dims(p.kshape, p.kin, p.kout, p.nk)
    if p.nr == 0:           # nothing to reduce: a run of one element per output
        p.rshape[0] = 1
        p.rin[0] = 0
        p.nr = 1


cdef inline void _kept_offsets(const Plan* p, ptrdiff_t o, ptrdiff_t* xoff,
                               ptrdiff_t* ooff) noexcept nogil:
    """Input and output byte offsets of output element o (kept dims, last fastest)."""
    cdef int i
    cdef ptrdiff_t q
    if p.nk == 1:       # one kept dim: no division
        xoff[0] = o * p.kin[0]
        ooff[0] = o * p.kout[0]
        return
    xoff[0] = 0
    ooff[0] = 0
    for i in range(p.nk - 1, -1, -1):
        q = o % p.kshape[i]
        o = o // p.kshape[i]
        xoff[0] += q * p.kin[i]
        ooff[0] += q * p.kout[i]


cdef inline ptrdiff_t _advance(ptrdiff_t* idx, const ptrdiff_t* shape, const ptrdiff_t* stride,
                               int n, ptrdiff_t off) noexcept nogil:
    """Step an odometer over n dims (last fastest); returns the new byte offset."""
    cdef int i = n - 1
    while i >= 0:
        idx[i] += 1
        off += stride[i]
        if idx[i] < shape[i]:
            return off
        off -= idx[i] * stride[i]
        idx[i] = 0
        i -= 1
    return off


# --------------------------------------------------------------------------- runs

cdef inline double _run_sum(const reduce_t* x, ptrdiff_t n, ptrdiff_t step) noexcept nogil:
    """Float sum of n elements `step` apart (in elements); pairwise SIMD when contiguous."""
    cdef ptrdiff_t i
    cdef double acc = 0
    if reduce_t is float:
        if step == 1:
            return fastop_sum_f32(x, n)
    elif reduce_t is double:
        if step == 1:
            return fastop_sum_f64(x, n)
    for i in range(n):
        acc += x[i * step]
    return acc


cdef inline long long _run_isum(const reduce_t* x, ptrdiff_t n, ptrdiff_t step) noexcept nogil:
    """Integer sum (wraps like numpy's int64 accumulation)."""
    cdef ptrdiff_t i
    cdef long long acc = 0
    for i in range(n):
        acc += <long long>x[i * step]
    return acc


cdef inline reduce_t _max2(reduce_t a, reduce_t b) noexcept nogil:
    """max with NaN winning (for floats)."""
    if reduce_t is float or reduce_t is double:
        return b if (b > a or b != b) else a
    else:
        return b if b > a else a


cdef inline reduce_t _run_max(const reduce_t* x, ptrdiff_t n, ptrdiff_t step) noexcept nogil:
    cdef ptrdiff_t i
    cdef reduce_t m = x[0]
    if reduce_t is float:
        if step == 1:
            return fastop_max_f32(x, n)
    elif reduce_t is double:
        if step == 1:
            return fastop_max_f64(x, n)
    for i in range(1, n):
        m = _max2(m, x[i * step])
    return m


cdef inline void _rows_addto(reduce_t* acc, const reduce_t* x, ptrdiff_t n,
                             bint is_max) noexcept nogil:
    """acc[i] += x[i], or acc[i] = max(acc[i], x[i]), over a contiguous run."""
    cdef ptrdiff_t i
    if reduce_t is float:
        if is_max:
            fastop_maxto_f32(acc, x, n)
        else:
            fastop_addto_f32(acc, x, n)
    elif reduce_t is double:
        if is_max:
            fastop_maxto_f64(acc, x, n)
        else:
            fastop_addto_f64(acc, x, n)
    else:
        if is_max:
            for i in range(n):
                acc[i] = _max2(acc[i], x[i])
        else:
            for i in range(n):
                acc[i] += x[i]


# --------------------------------------------------------------------------- loops

cdef void _reduce_one(int op, const Plan* p, const char* xdata, char* odata, ptrdiff_t o,
                      reduce_t* tag) noexcept nogil:
    """Reduce the input elements of output element o (the rows loop)."""
    cdef ptrdiff_t xoff, ooff, off = 0, r, nrows
    cdef ptrdiff_t idx[FASTOP_MAX_NDIM]
    cdef int nouter = p.nr - 1
    cdef ptrdiff_t n = p.rshape[nouter]
    cdef ptrdiff_t step = p.rin[nouter] // sizeof(reduce_t)
    cdef double acc = 0
    cdef long long iacc = 0
    cdef reduce_t m
    cdef const reduce_t* row
    _kept_offsets(p, o, &xoff, &ooff)
    memset(idx, 0, sizeof(idx))
    nrows = p.nred // n
    m = (<const reduce_t*>(xdata + xoff))[0]
    for r in range(nrows):
        row = <const reduce_t*>(xdata + xoff + off)
        if op == OP_MAX:
            m = _max2(m, _run_max(row, n, step))
        elif reduce_t is float or reduce_t is double:
            acc += _run_sum(row, n, step)
        else:
            iacc += _run_isum(row, n, step)
        off = _advance(idx, p.rshape, p.rin, nouter, off)
    if op == OP_MAX:
        (<reduce_t*>(odata + ooff))[0] = m
    elif reduce_t is float or reduce_t is double:
        (<reduce_t*>(odata + ooff))[0] = <reduce_t>(acc / p.nred if op == OP_MEAN else acc)
    elif p.widen:
        (<long long*>(odata + ooff))[0] = iacc
    else:
        (<reduce_t*>(odata + ooff))[0] = <reduce_t>iacc


# --------------------------------------------------------------------------- threads

cdef enum:
    JOB_OUTPUTS = 0     # the rows loop: iteration o reduces output element o
    JOB_RUN = 1         # one long run: iteration k reduces piece k into a partial result
    JOB_TILES = 2       # the columns loop: iteration t reduces tile t
    JOB_ARGMAX = 3      # argmax along an axis: iteration o fills output element o


# One threaded loop of this module: `count` independent iterations, split into `npieces`
# contiguous ranges that fastop's thread pool runs.
ctypedef struct ReduceJob:
    int kind
    int op
    int dtype
    int npieces
    ptrdiff_t count
    const Plan* p
    const char* xdata
    char* odata
    ptrdiff_t nchunks           # JOB_TILES: column chunks per output row
    ptrdiff_t n                 # JOB_RUN: run length
    ptrdiff_t piece             # JOB_RUN: elements per piece
    double* partial             # JOB_RUN: sum of each piece
    void* mpartial              # JOB_RUN: max of each piece (reduce_t[])
    const fastop_view* x        # JOB_ARGMAX
    fastop_view* out
    int axis


cdef inline int _dtype_of(reduce_t* tag) noexcept nogil:
    if reduce_t is float:
        return FASTOP_FLOAT32
    elif reduce_t is double:
        return FASTOP_FLOAT64
    elif reduce_t is int:
        return FASTOP_INT32
    elif reduce_t is int16_t:
        return FASTOP_INT16
    elif reduce_t is int8_t:
        return FASTOP_INT8
    elif reduce_t is uchar:
        return FASTOP_BOOL
    else:
        return FASTOP_INT64


cdef void _job_range(const ReduceJob* j, ptrdiff_t lo, ptrdiff_t hi,
                     reduce_t* tag) noexcept nogil:
    """Iterations [lo, hi) of a job, each exactly as the serial loop runs it."""
    cdef ptrdiff_t i, start
    cdef const reduce_t* x
    for i in range(lo, hi):
        if j.kind == JOB_OUTPUTS:
            _reduce_one(j.op, j.p, j.xdata, j.odata, i, tag)
        elif j.kind == JOB_TILES:
            _reduce_tile(j.op, j.p, j.xdata, j.odata, i, j.nchunks, tag)
        elif j.kind == JOB_ARGMAX:
            _argmax_row(j.x, j.out, j.axis, i, tag)
        elif reduce_t is float or reduce_t is double:
            start = i * j.piece
            x = <const reduce_t*>j.xdata + start
            if j.op == OP_MAX:
                (<reduce_t*>j.mpartial)[i] = _run_max(x, min(j.piece, j.n - start), 1)
            else:
                j.partial[i] = _run_sum(x, min(j.piece, j.n - start), 1)


cdef void _job_piece(void* ctx, int k) noexcept nogil:
    """Piece k of a job: its k-th range of iterations (a parallel_run piece function)."""
    cdef const ReduceJob* j = <const ReduceJob*>ctx
    cdef ptrdiff_t lo = j.count * k // j.npieces, hi = j.count * (k + 1) // j.npieces
    if j.dtype == FASTOP_FLOAT32:
        _job_range(j, lo, hi, <float*>NULL)
    elif j.dtype == FASTOP_FLOAT64:
        _job_range(j, lo, hi, <double*>NULL)
    elif j.dtype == FASTOP_INT32:
        _job_range(j, lo, hi, <int*>NULL)
    elif j.dtype == FASTOP_INT64:
        _job_range(j, lo, hi, <long long*>NULL)
    elif j.dtype == FASTOP_INT16:
        _job_range(j, lo, hi, <int16_t*>NULL)
    elif j.dtype == FASTOP_INT8:
        _job_range(j, lo, hi, <int8_t*>NULL)
    else:
        _job_range(j, lo, hi, <uchar*>NULL)


cdef void _run_job(ReduceJob* j, int nt, int per_thread) noexcept nogil:
    """Run j.count iterations on `nt` threads as about `per_thread` ranges per thread."""
    j.npieces = <int>min(j.count, <ptrdiff_t>nt * per_thread)
    parallel_run(_job_piece, j, j.npieces, nt)


cdef void _reduce_rows(int op, const Plan* p, const char* xdata, char* odata,
                       ptrdiff_t total, reduce_t* tag) noexcept nogil:
    cdef ptrdiff_t o, k, n, piece, npieces, xoff, ooff
    cdef int nt = get_num_threads()
    cdef double partial[MAX_PIECES]
    cdef reduce_t mpartial[MAX_PIECES]
    cdef double acc
    cdef ReduceJob job
    cdef bint one_run = p.nr == 1 and p.rin[0] == sizeof(reduce_t)
    if not use_threads(total >> WORK_SHIFT):
        for o in range(p.nout):
            _reduce_one(op, p, xdata, odata, o, tag)
        return
    job.op, job.dtype, job.p, job.xdata, job.odata = op, _dtype_of(tag), p, xdata, odata
    if p.nout >= nt or not one_run or not (reduce_t is float or reduce_t is double):
        job.kind, job.count = JOB_OUTPUTS, p.nout
        _run_job(&job, nt, PIECES_PER_THREAD)
        return
    # few outputs, each one long run: split each run into pieces over the threads
    # (several per thread, taken as they come, so a thread the OS delays holds up the
    # others less); the partial results are combined in piece order
    n = p.rshape[0]
    npieces = min(4 * nt, <int>MAX_PIECES)
    piece = (n + npieces - 1) // npieces
    npieces = (n + piece - 1) // piece
    job.kind, job.n, job.piece = JOB_RUN, n, piece
    job.partial, job.mpartial = partial, mpartial
    for o in range(p.nout):
        _kept_offsets(p, o, &xoff, &ooff)
        job.xdata = xdata + xoff
        job.count = npieces
        _run_job(&job, nt, <int>npieces)
        if op == OP_MAX:
            (<reduce_t*>(odata + ooff))[0] = _run_max(mpartial, npieces, 1)
        else:
            acc = 0
            for k in range(npieces):
                acc += partial[k]
            (<reduce_t*>(odata + ooff))[0] = <reduce_t>(acc / p.nred if op == OP_MEAN
                                                          else acc)


cdef void _reduce_tile(int op, const Plan* p, const char* xdata, char* odata,
                       ptrdiff_t t, ptrdiff_t nchunks, reduce_t* tag) noexcept nogil:
    """One tile of the columns loop: COL_CHUNK outputs of one output row."""
    cdef int last = p.nk - 1
    cdef ptrdiff_t width = p.kshape[last], q = t // nchunks
    cdef ptrdiff_t c0 = (t % nchunks) * COL_CHUNK
    cdef ptrdiff_t n = min(<ptrdiff_t>COL_CHUNK, width - c0), xoff = 0, ooff = 0, off = 0
    cdef ptrdiff_t r, i, qq = q
    cdef ptrdiff_t idx[FASTOP_MAX_NDIM]
    cdef reduce_t* acc
    cdef const char* xrow
    for i in range(last - 1, -1, -1):
        xoff += (qq % p.kshape[i]) * p.kin[i]
        ooff += (qq % p.kshape[i]) * p.kout[i]
        qq = qq // p.kshape[i]
    acc = <reduce_t*>(odata + ooff) + c0
    xrow = xdata + xoff + c0 * sizeof(reduce_t)
    memset(idx, 0, sizeof(idx))
    if op == OP_MAX:
        for i in range(n):
            acc[i] = (<const reduce_t*>xrow)[i]
    else:
        memset(acc, 0, n * sizeof(reduce_t))
    for r in range(p.nred):
        if op != OP_MAX or r > 0:
            _rows_addto(acc, <const reduce_t*>(xrow + off), n, op == OP_MAX)
        off = _advance(idx, p.rshape, p.rin, p.nr, off)
    if reduce_t is float or reduce_t is double:
        if op == OP_MEAN:
            for i in range(n):
                acc[i] = <reduce_t>(acc[i] / <double>p.nred)


cdef void _reduce_columns(int op, const Plan* p, const char* xdata, char* odata,
                          ptrdiff_t total, reduce_t* tag) noexcept nogil:
    cdef ptrdiff_t width = p.kshape[p.nk - 1]
    cdef ptrdiff_t nchunks = (width + COL_CHUNK - 1) // COL_CHUNK
    cdef ptrdiff_t ntiles = (p.nout // width) * nchunks, t
    cdef ReduceJob job
    if use_threads(total >> WORK_SHIFT) and ntiles > 1:
        job.kind, job.op, job.dtype, job.p = JOB_TILES, op, _dtype_of(tag), p
        job.xdata, job.odata, job.count, job.nchunks = xdata, odata, ntiles, nchunks
        _run_job(&job, get_num_threads(), PIECES_PER_THREAD)
    else:
        for t in range(ntiles):
            _reduce_tile(op, p, xdata, odata, t, nchunks, tag)


cdef void _fill_empty(int op, const Plan* p, char* odata, reduce_t* tag) noexcept nogil:
    """Outputs of a reduction over zero elements: 0 for sum, NaN for mean."""
    cdef ptrdiff_t o, xoff, ooff
    for o in range(p.nout):
        _kept_offsets(p, o, &xoff, &ooff)
        if reduce_t is float or reduce_t is double:
            (<reduce_t*>(odata + ooff))[0] = <reduce_t>(NAN if op == OP_MEAN else 0)
        elif p.widen:
            (<long long*>(odata + ooff))[0] = 0
        else:
            (<reduce_t*>(odata + ooff))[0] = 0


cdef void _reduce(int op, const Plan* p, const fastop_view* x, fastop_view* out,
                  reduce_t* tag) noexcept nogil:
    cdef ptrdiff_t elem = sizeof(reduce_t)
    if p.nout == 0:
        return
    if p.nred == 0:
        _fill_empty(op, p, out.data, tag)
    elif not p.widen and p.rin[p.nr - 1] != elem and p.nk > 0 and p.kin[p.nk - 1] == elem \
            and p.kout[p.nk - 1] == elem:
        _reduce_columns(op, p, x.data, out.data, x.size, tag)
    else:
        _reduce_rows(op, p, x.data, out.data, x.size, tag)


cdef int _dispatch(int op, const fastop_view* x, fastop_view* out, const bint* reduced,
                   const int* outdim) noexcept nogil:
    cdef Plan p
    _make_plan(x, out, reduced, outdim, &p)
    if x.dtype == FASTOP_FLOAT32:
        _reduce(op, &p, x, out, <float*>NULL)
    elif x.dtype == FASTOP_FLOAT64:
        _reduce(op, &p, x, out, <double*>NULL)
    elif x.dtype == FASTOP_INT32:
        _reduce(op, &p, x, out, <int*>NULL)
    elif x.dtype == FASTOP_INT64:
        _reduce(op, &p, x, out, <long long*>NULL)
    elif x.dtype == FASTOP_INT16:
        _reduce(op, &p, x, out, <int16_t*>NULL)
    elif x.dtype == FASTOP_INT8:
        _reduce(op, &p, x, out, <int8_t*>NULL)
    else:                                  # bool, uint8
        _reduce(op, &p, x, out, <uchar*>NULL)
    return K_OK


# --------------------------------------------------------------------------- sum/mean/max

cdef int _axes_mask(const fastop_view* x, const fastop_attrs* a, bint* reduced) noexcept nogil:
    """reduced[d] for the axes in ints[1:] (all when none); K_ERR_ATTR if invalid. A
    0-D x takes axis 0 or -1 (PaddlePaddle's rule: the tensor itself, reduced)."""
    cdef int d, k, ax
    if x.ndim == 0:
        for k in range(1, a.n_ints):
            if a.ints[k] != 0 and a.ints[k] != -1:
                return K_ERR_ATTR
        return K_OK
    for d in range(x.ndim):
        reduced[d] = a.n_ints <= 1
    for k in range(1, a.n_ints):
        ax = normalize_axis(a.ints[k], x.ndim)
        if ax < 0 or reduced[ax]:
            return K_ERR_ATTR
        reduced[ax] = True
    return K_OK


cdef int _infer_sum(fastop_view** ins, int n_in, fastop_view* outs, int n_out,
                    const fastop_attrs* a) noexcept nogil:
    """As _infer_reduce; int32 and bool sum into int64 (PaddlePaddle's and numpy's
    rule: a sum of many int32 values overflows int32)."""
    cdef int rc = _infer_reduce(ins, n_in, outs, n_out, a)
    if ins[0].dtype == FASTOP_INT32 or ins[0].dtype == FASTOP_BOOL:
        outs[0].dtype = FASTOP_INT64
    return rc


cdef int _infer_reduce(fastop_view** ins, int n_in, fastop_view* outs, int n_out,
                       const fastop_attrs* a) noexcept nogil:
    cdef bint reduced[FASTOP_MAX_NDIM]
    cdef int d, nd = 0
    cdef bint keepdim = a.n_ints > 0 and a.ints[0] != 0
    cdef const fastop_view* x = ins[0]
    if _axes_mask(x, a, reduced) != K_OK:
        return K_ERR_ATTR
    for d in range(x.ndim):
        if not reduced[d]:
            outs[0].shape[nd] = x.shape[d]
            nd += 1
        elif keepdim:
            outs[0].shape[nd] = 1
            nd += 1
    outs[0].ndim = nd
    outs[0].dtype = x.dtype
    return K_OK


cdef int _infer_max(fastop_view** ins, int n_in, fastop_view* outs, int n_out,
                    const fastop_attrs* a) noexcept nogil:
    """As _infer_reduce; a max over zero elements has no value (K_ERR_SHAPE)."""
    cdef bint reduced[FASTOP_MAX_NDIM]
    cdef int d
    if _axes_mask(ins[0], a, reduced) != K_OK:
        return K_ERR_ATTR
    for d in range(ins[0].ndim):
        if reduced[d] and ins[0].shape[d] == 0:
            return K_ERR_SHAPE
    return _infer_reduce(ins, n_in, outs, n_out, a)


cdef int _run_axes(int op, fastop_view** ins, fastop_view** outs,
                   const fastop_attrs* a) noexcept nogil:
    cdef bint reduced[FASTOP_MAX_NDIM]
    cdef int outdim[FASTOP_MAX_NDIM]
    cdef int d, nd = 0
    cdef bint keepdim = a.n_ints > 0 and a.ints[0] != 0
    _axes_mask(ins[0], a, reduced)
    for d in range(ins[0].ndim):
        outdim[d] = nd
        if keepdim or not reduced[d]:
            nd += 1
    return _dispatch(op, ins[0], outs[0], reduced, outdim)


cdef int _sum_kernel(fastop_view** ins, int n_in, fastop_view** outs, int n_out,
                     const fastop_attrs* a) noexcept nogil:
    return _run_axes(OP_SUM, ins, outs, a)


cdef int _mean_kernel(fastop_view** ins, int n_in, fastop_view** outs, int n_out,
                      const fastop_attrs* a) noexcept nogil:
    return _run_axes(OP_MEAN, ins, outs, a)


cdef int _max_kernel(fastop_view** ins, int n_in, fastop_view** outs, int n_out,
                     const fastop_attrs* a) noexcept nogil:
    return _run_axes(OP_MAX, ins, outs, a)


def _pack_axes(attrs):
    return [int(bool_attr(attrs, "keepdim", False)), *ints_attr(attrs, "axis")], []


# --------------------------------------------------------------------------- sum_to_shape

cdef int _infer_sum_to_shape(fastop_view** ins, int n_in, fastop_view* outs, int n_out,
                             const fastop_attrs* a) noexcept nogil:
    """Output = the attribute shape; -1 there keeps x's dim. x must broadcast to it."""
    cdef const fastop_view* x = ins[0]
    cdef int j, lead = x.ndim - a.n_ints
    cdef ptrdiff_t t, xd
    if lead < 0:
        return K_ERR_SHAPE
    for j in range(a.n_ints):
        t = a.ints[j]
        xd = x.shape[lead + j]
        if t < -1:
            return K_ERR_ATTR
        if t == -1:
            outs[0].shape[j] = xd
        elif t == xd or t == 1 or xd == -1:
            outs[0].shape[j] = t
        else:
            return K_ERR_SHAPE
    outs[0].ndim = a.n_ints
    outs[0].dtype = x.dtype
    return K_OK


cdef int _sum_to_shape_kernel(fastop_view** ins, int n_in, fastop_view** outs, int n_out,
                              const fastop_attrs* a) noexcept nogil:
    cdef bint reduced[FASTOP_MAX_NDIM]
    cdef int outdim[FASTOP_MAX_NDIM]
    cdef int d, lead = ins[0].ndim - a.n_ints
    for d in range(ins[0].ndim):
        reduced[d] = d < lead or ins[0].shape[d] != outs[0].shape[d - lead]
        outdim[d] = d - lead if d >= lead else 0
    return _dispatch(OP_SUM, ins[0], outs[0], reduced, outdim)


def _pack_shape(attrs):
    if "shape" not in attrs:
        raise TypeError("missing attribute 'shape'")
    return ints_attr(attrs, "shape"), []


# --------------------------------------------------------------------------- argmax

cdef inline ptrdiff_t _run_argmax(const reduce_t* x, ptrdiff_t n, ptrdiff_t step) noexcept nogil:
    """Index of the first maximum (of the first NaN, as numpy) of a run."""
    cdef ptrdiff_t i, best_i = 0
    cdef reduce_t best = x[0], v
    if reduce_t is float or reduce_t is double:
        if best != best:
            return 0
    for i in range(1, n):
        v = x[i * step]
        if v > best:
            best = v
            best_i = i
        elif reduce_t is float or reduce_t is double:
            if v != v:
                return i
    return best_i


cdef int _argmax_axis(const fastop_attrs* a, int ndim) noexcept nogil:
    """The normalized axis, -1 for a flattened argmax, -2 if invalid."""
    cdef int ax
    if a.n_ints < 3 or a.ints[1] == 0:
        return -1
    ax = normalize_axis(a.ints[2], ndim)
    return ax if ax >= 0 else -2


cdef int _infer_argmax(fastop_view** ins, int n_in, fastop_view* outs, int n_out,
                       const fastop_attrs* a) noexcept nogil:
    cdef const fastop_view* x = ins[0]
    cdef int axis = _argmax_axis(a, x.ndim), d, nd = 0
    cdef bint keepdim = a.n_ints > 0 and a.ints[0] != 0
    if axis == -2:
        return K_ERR_ATTR
    for d in range(x.ndim):
        if (axis == -1 or d == axis) and x.shape[d] == 0:
            return K_ERR_SHAPE
        if axis != -1 and d != axis:
            outs[0].shape[nd] = x.shape[d]
            nd += 1
        elif keepdim:
            outs[0].shape[nd] = 1
            nd += 1
    outs[0].ndim = nd
    outs[0].dtype = FASTOP_INT64
    return K_OK


cdef void _argmax_row(const fastop_view* x, fastop_view* out, int axis, ptrdiff_t o,
                      reduce_t* tag) noexcept nogil:
    """argmax along `axis` for the o-th position of the other dims (C order)."""
    cdef int d, od = out.ndim - 1
    cdef ptrdiff_t q, xoff = 0, ooff = 0
    cdef bint keepdim = out.ndim == x.ndim
    for d in range(x.ndim - 1, -1, -1):
        if d == axis:
            if keepdim:
                od -= 1
            continue
        q = o % x.shape[d]
        o = o // x.shape[d]
        xoff += q * x.strides[d]
        ooff += q * out.strides[od]
        od -= 1
    (<long long*>(out.data + ooff))[0] = _run_argmax(
        <const reduce_t*>(x.data + xoff), x.shape[axis], x.strides[axis] // sizeof(reduce_t))


cdef void _argmax(const fastop_view* x, fastop_view* out, int axis, reduce_t* tag) noexcept nogil:
    cdef ptrdiff_t o, nout, i, best_i = 0, off = 0
    cdef ptrdiff_t idx[FASTOP_MAX_NDIM]
    cdef reduce_t best, v
    cdef ReduceJob job
    if axis >= 0:
        nout = x.size // x.shape[axis]
        if use_threads(x.size) and nout > 1:
            job.kind, job.dtype, job.count = JOB_ARGMAX, _dtype_of(tag), nout
            job.x, job.out, job.axis = x, out, axis
            _run_job(&job, get_num_threads(), 2)
        else:
            for o in range(nout):
                _argmax_row(x, out, axis, o, tag)
        return
    # flattened: the first maximum in C order, whatever the strides
    memset(idx, 0, sizeof(idx))
    best = (<const reduce_t*>x.data)[0]
    for i in range(x.size):
        v = (<const reduce_t*>(x.data + off))[0]
        if reduce_t is float or reduce_t is double:
            if v != v:
                best_i = i
                break
        if v > best:
            best = v
            best_i = i
        off = _advance(idx, x.shape, x.strides, x.ndim, off)
    (<long long*>out.data)[0] = best_i


cdef int _argmax_kernel(fastop_view** ins, int n_in, fastop_view** outs, int n_out,
                        const fastop_attrs* a) noexcept nogil:
    cdef int axis = _argmax_axis(a, ins[0].ndim)
    if ins[0].dtype == FASTOP_FLOAT32:
        _argmax(ins[0], outs[0], axis, <float*>NULL)
    elif ins[0].dtype == FASTOP_FLOAT64:
        _argmax(ins[0], outs[0], axis, <double*>NULL)
    elif ins[0].dtype == FASTOP_INT32:
        _argmax(ins[0], outs[0], axis, <int*>NULL)
    elif ins[0].dtype == FASTOP_INT64:
        _argmax(ins[0], outs[0], axis, <long long*>NULL)
    elif ins[0].dtype == FASTOP_INT16:
        _argmax(ins[0], outs[0], axis, <int16_t*>NULL)
    elif ins[0].dtype == FASTOP_INT8:
        _argmax(ins[0], outs[0], axis, <int8_t*>NULL)
    else:                                  # uint8
        _argmax(ins[0], outs[0], axis, <uchar*>NULL)
    return K_OK


def _pack_argmax(attrs):
    axis = attrs.get("axis")
    return [int(bool_attr(attrs, "keepdim", False)), int(axis is not None),
            0 if axis is None else int_attr(attrs, "axis", None)], []


# --------------------------------------------------------------------------- kernels

cdef tuple AXES = ("axis", "keepdim")

sum = make_kernel("sum", ("x",), ("out",), _infer_sum, _sum_kernel, _sum_kernel,
                  _sum_kernel, _sum_kernel, _sum_kernel, 0, AXES, _pack_axes, 0)
mean = make_kernel("mean", ("x",), ("out",), _infer_reduce, NULL, NULL, NULL,
                   _mean_kernel, _mean_kernel, 0, AXES, _pack_axes, 0)
max = make_kernel("max", ("x",), ("out",), _infer_max, NULL, _max_kernel,
                  _max_kernel, _max_kernel, _max_kernel, 0, AXES, _pack_axes, 0)
argmax = make_kernel("argmax", ("x",), ("out",), _infer_argmax, NULL,
                     _argmax_kernel, _argmax_kernel, _argmax_kernel, _argmax_kernel, 0, AXES,
                     _pack_argmax, 0)
sum_to_shape = make_kernel("sum_to_shape", ("x",), ("out",), _infer_sum_to_shape,
                           NULL, _sum_to_shape_kernel, _sum_to_shape_kernel,
                           _sum_to_shape_kernel, _sum_to_shape_kernel, 0, ("shape",),
                           _pack_shape, 0)

# uint8, int8 and int16 run the integer kernels (typed loops for each: reduce_t)
for _kernel in (sum, max, argmax, sum_to_shape):
    accept_narrow_ints(<CKernel>_kernel, (<CKernel>_kernel).fns[FASTOP_INT32])
del _kernel

# what their errors mean (CKernel.reasons)
_AXES_ERROR = "each axis must be in [-ndim, ndim) of x (0 or -1 for a 0-D x), and given once"
(<CKernel>sum).reasons = {K_ERR_ATTR: _AXES_ERROR}
(<CKernel>mean).reasons = {K_ERR_ATTR: _AXES_ERROR}
(<CKernel>max).reasons = {K_ERR_ATTR: _AXES_ERROR,
                          K_ERR_SHAPE: "a max over zero elements has no value"}
(<CKernel>argmax).reasons = {K_ERR_ATTR: "axis must be in [-ndim, ndim) of x",
                             K_ERR_SHAPE: "an argmax over zero elements has no value"}
(<CKernel>sum_to_shape).reasons = {K_ERR_ATTR: "shape's dims must be >= -1",
                                   K_ERR_SHAPE: "x must broadcast to shape (one dim of "
                                                "shape per trailing dim of x)"}
