# distutils: sources = src/fastop/_core/simd_math_impl.c
"""Matrix products: ``matmul`` and ``fc`` = act(x @ w + b).

* ``matmul(x, y, transpose_x=False, transpose_y=False)`` follows PaddlePaddle: the flags
  transpose the last two dims; a 1-D ``x`` is a row vector and a 1-D ``y`` a column
  vector (their unit dim is dropped from the result); leading (batch) dims broadcast.
* ``fc(x, w, b?, activation="")``: ``x`` is ``(..., K)``, ``w`` ``(K, N)``, ``b``
  ``(N,)``. The epilogue is fused: the output ``(..., N)`` is filled with ``b``, the GEMM
  accumulates onto it (beta = 1), then the vectorized activation (``tanh``, ``sigmoid``,
  ``relu``) runs over it. With several threads each piece is a block of rows (or
  columns) that gets fill, GEMM and activation, so the block is still in its core's
  cache.

float32/float64 call OpenBLAS (:mod:`fastop._core.blas`, loaded on the first call). An
operand whose last two dims are row- or column-major is passed as it is (a transposed
view becomes a BLAS trans flag); other layouts are copied once. Batches go to
``gemm_batch_strided``. int32/int64 use a blocked loop (wrapping on overflow like
numpy).
"""
from libc.limits cimport INT_MAX
from libc.stdlib cimport malloc, free
from libc.string cimport memcpy, memset

from fastop._core.storage cimport (DenseTensor, fastop_view, fastop_attrs,
                                   FASTOP_MAX_NDIM, FASTOP_NUM_DTYPES,
                                   FASTOP_INT32, FASTOP_INT64, FASTOP_FLOAT32,
                                   FASTOP_FLOAT64, numeric_t, floating_t, itemsize_of,
                                   view_is_contiguous, view_set_contiguous_strides,
                                   view_copy)
from fastop._core.kernel cimport (CKernel, make_kernel, K_OK, K_ERR_DTYPE,
                                  K_ERR_ATTR, K_ERR_SHAPE, K_ERR_BROADCAST, K_ERR_MEMORY,
                                  get_num_threads, use_threads)
from fastop._core.blas cimport (ensure_loaded, gemm, gemm_batch_strided, gemm_serial,
                                threads_for, Split, split_for, piece_bounds)
from fastop._core.parallel cimport parallel_run
from fastop._core.kernel import bool_attr

from fastop._core.simd_math cimport (fastop_vtanh_f32, fastop_vtanh_f64,
                                     fastop_vsigmoid_f32, fastop_vsigmoid_f64,
                                     fastop_vrelu_f32, fastop_vrelu_f64)

__all__ = ["matmul", "fc", "ACTIVATIONS"]

cdef enum:
    ACT_NONE = 0
    ACT_TANH = 1
    ACT_SIGMOID = 2
    ACT_RELU = 3
    LOOP_BLOCK_K = 128      # blocking of the integer loop: a 128 x 256 panel of y
    LOOP_BLOCK_N = 256      # stays in L2 while every row of x streams past it
    LOOP_BLOCK_M = 32

# The activations fc fuses (the one list of them: the op, nn and static.nn read it).
ACTIVATIONS = {"": ACT_NONE, "tanh": ACT_TANH, "sigmoid": ACT_SIGMOID, "relu": ACT_RELU}


# --------------------------------------------------------------------------- views

cdef bint _overlaps(const fastop_view* a, const fastop_view* b) noexcept nogil:
    """Whether the memory spans of two views intersect."""
    cdef char* lo[2]
    cdef char* hi[2]
    cdef const fastop_view* v
    cdef int i, d
    cdef ptrdiff_t ext
    if a.size == 0 or b.size == 0:
        return False
    for i in range(2):
        v = a if i == 0 else b
        lo[i] = v.data
        hi[i] = v.data + itemsize_of(v.dtype)
        for d in range(v.ndim):
            ext = (v.shape[d] - 1) * v.strides[d]
            if ext < 0:
                lo[i] += ext
            else:
                hi[i] += ext
    return lo[0] < hi[1] and lo[1] < hi[0]


cdef int _make_contiguous(fastop_view* v, void** buf) noexcept nogil:
    """Point `v` at a new C-contiguous copy of its data; the caller frees ``*buf``."""
    cdef fastop_view src = v[0]
    buf[0] = malloc(max(v.size, 1) * itemsize_of(v.dtype))
    if buf[0] is NULL:
        return K_ERR_MEMORY
    v.data = <char*>buf[0]
    view_set_contiguous_strides(v)
    view_copy(&src, v)
    return K_OK


cdef bint _strides_divisible(const fastop_view* v) noexcept nogil:
    """Whether every stride (of a dim longer than 1) is a whole number of elements."""
    cdef ptrdiff_t item = itemsize_of(v.dtype)
    cdef int d
    for d in range(v.ndim):
        if v.shape[d] > 1 and v.strides[d] % item != 0:
            return False
    return True


cdef bint _blas_layout(ptrdiff_t rows, ptrdiff_t cols, ptrdiff_t rs, ptrdiff_t cs,
                       bint* trans, int* ld) noexcept nogil:
    """Whether a rows×cols matrix with element strides (rs, cs) is a BLAS operand:
    row-major (trans=0, leading dim rs) or column-major, i.e. the transpose of a
    row-major cols×rows matrix (trans=1, leading dim cs)."""
    cdef ptrdiff_t lead
    trans[0], ld[0] = False, 0
    if rows <= 1 and cols <= 1:
        trans[0], lead = False, 1
    elif rows <= 1:                      # one row: unit stride, or a strided column
        trans[0], lead = cs != 1, cols if cs == 1 else cs
    elif cols <= 1:                      # one column: any positive row stride
        trans[0], lead = False, rs
    elif cs == 1 and rs >= cols:
        trans[0], lead = False, rs
    elif rs == 1 and cs >= rows:
        trans[0], lead = True, cs
    else:
        return False
    ld[0] = <int>lead
    return 0 < lead <= INT_MAX


# --------------------------------------------------------------------------- loops

# One blocked-loop product; its blocks of LOOP_BLOCK_M rows are independent, so a large
# product splits them into contiguous ranges, two per thread, on fastop's thread pool.
ctypedef struct GemmLoopJob:
    int dtype
    ptrdiff_t m, n, k, xs_m, xs_k, ys_k, ys_n
    const void* x
    const void* y
    void* c
    bint accumulate
    ptrdiff_t n_iblocks
    int npieces


cdef void _gemm_blocks(const GemmLoopJob* p, ptrdiff_t ib_lo, ptrdiff_t ib_hi,
                       numeric_t* tag) noexcept nogil:
    """Row blocks [ib_lo, ib_hi) of c (+)= x · y.

    Blocked so that a LOOP_BLOCK_K × LOOP_BLOCK_N panel of y stays in cache while the
    rows of x pass.
    """
    cdef ptrdiff_t ib, i, i_end, kb, kk, k_end, jb, j, j_end
    cdef ptrdiff_t m = p.m, n = p.n, k = p.k, xs_m = p.xs_m, xs_k = p.xs_k
    cdef ptrdiff_t ys_k = p.ys_k, ys_n = p.ys_n
    cdef ptrdiff_t n_kblocks = (k + LOOP_BLOCK_K - 1) // LOOP_BLOCK_K
    cdef ptrdiff_t n_jblocks = (n + LOOP_BLOCK_N - 1) // LOOP_BLOCK_N
    cdef const numeric_t* x = <const numeric_t*>p.x
    cdef const numeric_t* y = <const numeric_t*>p.y
    cdef numeric_t* c = <numeric_t*>p.c
    cdef numeric_t a
    cdef numeric_t* c_row
    cdef const numeric_t* y_row
    for ib in range(ib_lo, ib_hi):
        i_end = min(m, (ib + 1) * LOOP_BLOCK_M)
        if not p.accumulate:
            memset(c + ib * LOOP_BLOCK_M * n, 0,
                   (i_end - ib * LOOP_BLOCK_M) * n * sizeof(numeric_t))
        for kb in range(n_kblocks):
            k_end = min(k, (kb + 1) * LOOP_BLOCK_K)
            for jb in range(n_jblocks):
                j_end = min(n, (jb + 1) * LOOP_BLOCK_N)
                for i in range(ib * LOOP_BLOCK_M, i_end):
                    c_row = c + i * n
                    for kk in range(kb * LOOP_BLOCK_K, k_end):
                        a = x[i * xs_m + kk * xs_k]
                        y_row = y + kk * ys_k
                        if ys_n == 1:
                            for j in range(jb * LOOP_BLOCK_N, j_end):
                                c_row[j] += a * y_row[j]
                        else:
                            for j in range(jb * LOOP_BLOCK_N, j_end):
                                c_row[j] += a * y_row[j * ys_n]


cdef void _gemm_loop_piece(void* ctx, int t) noexcept nogil:
    """Piece t: the t-th of p.npieces ranges of row blocks (a parallel_run piece)."""
    cdef const GemmLoopJob* p = <const GemmLoopJob*>ctx
    cdef ptrdiff_t lo = p.n_iblocks * t // p.npieces
    cdef ptrdiff_t hi = p.n_iblocks * (t + 1) // p.npieces
    if p.dtype == FASTOP_INT32:
        _gemm_blocks(p, lo, hi, <int*>NULL)
    elif p.dtype == FASTOP_INT64:
        _gemm_blocks(p, lo, hi, <long long*>NULL)
    elif p.dtype == FASTOP_FLOAT32:
        _gemm_blocks(p, lo, hi, <float*>NULL)
    else:
        _gemm_blocks(p, lo, hi, <double*>NULL)


cdef void _gemm_loop(ptrdiff_t m, ptrdiff_t n, ptrdiff_t k,
                     const numeric_t* x, ptrdiff_t xs_m, ptrdiff_t xs_k,
                     const numeric_t* y, ptrdiff_t ys_k, ptrdiff_t ys_n,
                     numeric_t* c, bint accumulate) noexcept nogil:
    """c[m×n] (+)= x[m×k] · y[k×n] with element strides; c is C-contiguous. Row blocks
    are split across threads for large products."""
    cdef GemmLoopJob p
    cdef int threads = get_num_threads() if use_threads(m * n * k // 16) else 1
    p.m, p.n, p.k, p.xs_m, p.xs_k, p.ys_k, p.ys_n = m, n, k, xs_m, xs_k, ys_k, ys_n
    p.x, p.y, p.c, p.accumulate = x, y, c, accumulate
    p.n_iblocks = (m + LOOP_BLOCK_M - 1) // LOOP_BLOCK_M
    if threads == 1 or p.n_iblocks < 2:
        _gemm_blocks(&p, 0, p.n_iblocks, c)
        return
    if numeric_t is int:
        p.dtype = FASTOP_INT32
    elif numeric_t is float:
        p.dtype = FASTOP_FLOAT32
    elif numeric_t is double:
        p.dtype = FASTOP_FLOAT64
    else:
        p.dtype = FASTOP_INT64
    p.npieces = <int>min(p.n_iblocks, <ptrdiff_t>2 * threads)
    parallel_run(_gemm_loop_piece, &p, p.npieces, threads)


cdef void _act(floating_t* y, ptrdiff_t n, int act) noexcept nogil:
    """y = act(y) in place, vectorized (simd_math.h)."""
    if floating_t is float:
        if act == ACT_TANH:
            fastop_vtanh_f32(y, y, n)
        elif act == ACT_SIGMOID:
            fastop_vsigmoid_f32(y, y, n)
        elif act == ACT_RELU:
            fastop_vrelu_f32(y, y, n)
    else:
        if act == ACT_TANH:
            fastop_vtanh_f64(y, y, n)
        elif act == ACT_SIGMOID:
            fastop_vsigmoid_f64(y, y, n)
        elif act == ACT_RELU:
            fastop_vrelu_f64(y, y, n)


cdef void _fc_block(bint trans_x, bint trans_w, int rows, int cols, int k,
                    const floating_t* x, int ldx, const floating_t* w, int ldw,
                    const floating_t* b, floating_t* out, int ldo, int act) noexcept nogil:
    """out[rows×cols] (leading dim ldo) = act(op(x) · op(w) + b) on the calling thread:
    out starts as b on every row, the GEMM accumulates onto it (beta = 1), and the
    activation runs over the block while it is still in this core's cache."""
    cdef ptrdiff_t i
    for i in range(rows):
        if b is not NULL:
            memcpy(out + i * ldo, b, cols * sizeof(floating_t))
        elif k == 0:
            memset(out + i * ldo, 0, cols * sizeof(floating_t))
    if k > 0:
        gemm_serial(trans_x, trans_w, rows, cols, k, 1, x, ldx, w, ldw,
                    1 if b is not NULL else 0, out, ldo)
    if act == ACT_NONE:
        return
    if cols == ldo:
        _act(out, <ptrdiff_t>rows * cols, act)
    else:
        for i in range(rows):
            _act(out + i * ldo, cols, act)


# One threaded fc call; the pointers are float* or double* (b may be NULL).
ctypedef struct FcJob:
    Split split
    bint trans_x, trans_w, is_double
    int m, n, k, ldx, ldw, act
    const void* x
    const void* w
    const void* b
    void* out


cdef void _fc_part(const FcJob* j, const floating_t* x, const floating_t* w,
                   const floating_t* b, floating_t* out, int t) noexcept nogil:
    """Piece t of a split fc: rows lo..hi of out (fill, GEMM, activation), or columns."""
    cdef int lo, hi
    piece_bounds(&j.split, t, &lo, &hi)
    if hi <= lo:
        return
    if j.split.by_rows:
        _fc_block(j.trans_x, j.trans_w, hi - lo, j.n, j.k,
                  x + <ptrdiff_t>lo * (1 if j.trans_x else j.ldx), j.ldx, w, j.ldw, b,
                  out + <ptrdiff_t>lo * j.n, j.n, j.act)
    else:
        _fc_block(j.trans_x, j.trans_w, j.m, hi - lo,
                  j.k, x, j.ldx, w + <ptrdiff_t>lo * (j.ldw if j.trans_w else 1), j.ldw,
                  b + lo if b is not NULL else NULL, out + lo, j.n, j.act)


cdef void _fc_piece(void* job, int t) noexcept nogil:
    cdef FcJob* j = <FcJob*>job
    if j.is_double:
        _fc_part(j, <const double*>j.x, <const double*>j.w, <const double*>j.b,
                 <double*>j.out, t)
    else:
        _fc_part(j, <const float*>j.x, <const float*>j.w, <const float*>j.b,
                 <float*>j.out, t)


cdef void _fc_blas(const floating_t* x, ptrdiff_t xs_m, ptrdiff_t xs_k,
                   const floating_t* w, ptrdiff_t ws_k, ptrdiff_t ws_n,
                   const floating_t* b, floating_t* out, int m, int n, int k,
                   int act) noexcept nogil:
    """out = act(x · w + b) with BLAS; a large product is split into row (or column)
    blocks of out that fastop's threads take (fastop._core.parallel), each computing
    its block's GEMM and epilogue."""
    cdef bint trans_x, trans_w
    cdef int ldx, ldw
    cdef int threads = threads_for(<double>m * n * k)
    cdef FcJob job
    _blas_layout(m, k, xs_m, xs_k, &trans_x, &ldx)
    _blas_layout(k, n, ws_k, ws_n, &trans_w, &ldw)
    if threads == 1:
        _fc_block(trans_x, trans_w, m, n, k, x, ldx, w, ldw, b, out, max(n, 1), act)
        return
    job.split = split_for(m, n, threads)
    job.trans_x, job.trans_w, job.is_double = trans_x, trans_w, floating_t is double
    job.m, job.n, job.k, job.ldx, job.ldw, job.act = m, n, k, ldx, ldw, act
    job.x, job.w, job.b, job.out = x, w, b, out
    parallel_run(_fc_piece, &job, job.split.pieces, threads)


# --------------------------------------------------------------------------- matmul

ctypedef struct MatmulPlan:
    ptrdiff_t m, n, k
    ptrdiff_t xs_m, xs_k          # element strides of op(x), an m×k matrix
    ptrdiff_t ys_k, ys_n          # element strides of op(y), a k×n matrix
    int nb                        # batch dims, after merging contiguous ones
    ptrdiff_t bshape[FASTOP_MAX_NDIM]
    ptrdiff_t xs_b[FASTOP_MAX_NDIM]   # element strides over the batch (0: broadcast)
    ptrdiff_t ys_b[FASTOP_MAX_NDIM]
    ptrdiff_t os_b[FASTOP_MAX_NDIM]


cdef inline bint _transpose_x(const fastop_view* x, const fastop_attrs* attrs) noexcept nogil:
    return x.ndim >= 2 and attrs.n_ints > 0 and attrs.ints[0] != 0


cdef inline bint _transpose_y(const fastop_view* y, const fastop_attrs* attrs) noexcept nogil:
    return y.ndim >= 2 and attrs.n_ints > 1 and attrs.ints[1] != 0


cdef void _matrix(const fastop_view* v, bint left, bint trans, ptrdiff_t* rows,
                  ptrdiff_t* cols, ptrdiff_t* rs, ptrdiff_t* cs) noexcept nogil:
    """Shape and byte strides of op(v) as a matrix: a 1-D left operand is a row, a
    1-D right operand a column."""
    cdef int nd = v.ndim
    if nd == 1:
        if left:
            rows[0], cols[0], rs[0], cs[0] = 1, v.shape[0], 0, v.strides[0]
        else:
            rows[0], cols[0], rs[0], cs[0] = v.shape[0], 1, v.strides[0], 0
    elif trans:
        rows[0], cols[0] = v.shape[nd - 1], v.shape[nd - 2]
        rs[0], cs[0] = v.strides[nd - 1], v.strides[nd - 2]
    else:
        rows[0], cols[0] = v.shape[nd - 2], v.shape[nd - 1]
        rs[0], cs[0] = v.strides[nd - 2], v.strides[nd - 1]


cdef inline ptrdiff_t _batch_dim(const fastop_view* v, int i, int nb) noexcept nogil:
    """Size of v along output batch dim i of nb (1 where v has no such dim)."""
    cdef int nbv = v.ndim - 2 if v.ndim > 2 else 0
    return v.shape[i - (nb - nbv)] if i >= nb - nbv else 1


cdef int matmul_infer(fastop_view** ins, int n_in, fastop_view* outs, int n_out,
                      const fastop_attrs* attrs) noexcept nogil:
    cdef fastop_view* x = ins[0]
    cdef fastop_view* y = ins[1]
    cdef fastop_view* out = outs
    cdef ptrdiff_t m, kx, ky, n, rs, cs, dx, dy
    cdef int nb, i, nd = 0
    if x.dtype != y.dtype:
        return K_ERR_DTYPE
    if x.ndim == 0 or y.ndim == 0:
        return K_ERR_SHAPE
    _matrix(x, True, _transpose_x(x, attrs), &m, &kx, &rs, &cs)
    _matrix(y, False, _transpose_y(y, attrs), &ky, &n, &rs, &cs)
    if kx >= 0 and ky >= 0 and kx != ky:
        return K_ERR_SHAPE
    nb = max(x.ndim, y.ndim) - 2 if max(x.ndim, y.ndim) > 2 else 0
    out.size = 1
    for i in range(nb):
        dx = _batch_dim(x, i, nb)
        dy = _batch_dim(y, i, nb)
        if dx == dy or dy == 1:
            out.shape[i] = dx
        elif dx == 1 or dx < 0:
            out.shape[i] = dy
        elif dy < 0:
            out.shape[i] = dx
        else:
            return K_ERR_BROADCAST
    nd = nb
    if x.ndim > 1:
        out.shape[nd] = m
        nd += 1
    if y.ndim > 1:
        out.shape[nd] = n
        nd += 1
    out.ndim = nd
    out.dtype = x.dtype
    for i in range(nd):
        out.size = -1 if out.size < 0 or out.shape[i] < 0 else out.size * out.shape[i]
    return K_OK


cdef void _plan_matmul(const fastop_view* x, const fastop_view* y, const fastop_view* out,
                       bint tx, bint ty, MatmulPlan* p) noexcept nogil:
    """Element strides of op(x), op(y) and of the three operands over the batch dims,
    with dims of length 1 dropped and contiguous dims merged (inner ones last)."""
    cdef ptrdiff_t item = itemsize_of(x.dtype), rs, cs, rows, cols
    cdef int nb = out.ndim - (x.ndim > 1) - (y.ndim > 1), i, nbx, nby, d = 0
    _matrix(x, True, tx, &p.m, &p.k, &rs, &cs)
    p.xs_m, p.xs_k = rs // item, cs // item
    _matrix(y, False, ty, &rows, &p.n, &rs, &cs)
    p.ys_k, p.ys_n = rs // item, cs // item
    nbx = x.ndim - 2 if x.ndim > 2 else 0
    nby = y.ndim - 2 if y.ndim > 2 else 0
    for i in range(nb):
        if out.shape[i] == 1:
            continue
        p.bshape[d] = out.shape[i]
        p.xs_b[d] = x.strides[i - (nb - nbx)] // item \
            if i >= nb - nbx and x.shape[i - (nb - nbx)] != 1 else 0
        p.ys_b[d] = y.strides[i - (nb - nby)] // item \
            if i >= nb - nby and y.shape[i - (nb - nby)] != 1 else 0
        p.os_b[d] = out.strides[i] // item
        if d > 0 and p.xs_b[d - 1] == p.xs_b[d] * p.bshape[d] \
                and p.ys_b[d - 1] == p.ys_b[d] * p.bshape[d] \
                and p.os_b[d - 1] == p.os_b[d] * p.bshape[d]:
            p.bshape[d - 1] *= p.bshape[d]
            p.xs_b[d - 1], p.ys_b[d - 1], p.os_b[d - 1] = p.xs_b[d], p.ys_b[d], p.os_b[d]
        else:
            d += 1
    p.nb = d


cdef bint _next_index(ptrdiff_t* index, const ptrdiff_t* shape, int nd) noexcept nogil:
    """Advance a multi-index over `shape` (last dim fastest); False after the last."""
    cdef int d = nd - 1
    while d >= 0:
        index[d] += 1
        if index[d] < shape[d]:
            return True
        index[d] = 0
        d -= 1
    return False


cdef void _matmul_blas(const floating_t* x, const floating_t* y, floating_t* out,
                       const MatmulPlan* p) noexcept nogil:
    """out = op(x) · op(y) per batch with BLAS; out is C-contiguous."""
    cdef bint trans_x, trans_y, batched
    cdef int lda, ldb, inner = p.nb - 1, d
    cdef ptrdiff_t index[FASTOP_MAX_NDIM]
    cdef ptrdiff_t xo, yo, oo, i
    _blas_layout(p.m, p.k, p.xs_m, p.xs_k, &trans_x, &lda)
    _blas_layout(p.k, p.n, p.ys_k, p.ys_n, &trans_y, &ldb)
    if p.nb == 0:
        gemm(trans_x, trans_y, p.m, p.n, p.k, 1, x, lda, y, ldb, 0, out, max(p.n, 1))
        return
    # The innermost batch dim goes to gemm_batch_strided; outer ones loop here.
    batched = 0 <= p.xs_b[inner] <= INT_MAX and 0 <= p.ys_b[inner] <= INT_MAX \
        and p.os_b[inner] <= INT_MAX and p.bshape[inner] <= INT_MAX
    memset(index, 0, sizeof(index))
    while True:
        xo = yo = oo = 0
        for d in range(inner):
            xo += index[d] * p.xs_b[d]
            yo += index[d] * p.ys_b[d]
            oo += index[d] * p.os_b[d]
        if batched:
            gemm_batch_strided(trans_x, trans_y, p.m, p.n, p.k, 1, x + xo, lda,
                               p.xs_b[inner], y + yo, ldb, p.ys_b[inner], 0, out + oo,
                               max(p.n, 1), p.os_b[inner], p.bshape[inner])
        else:
            for i in range(p.bshape[inner]):
                gemm(trans_x, trans_y, p.m, p.n, p.k, 1, x + xo + i * p.xs_b[inner], lda,
                     y + yo + i * p.ys_b[inner], ldb, 0, out + oo + i * p.os_b[inner],
                     max(p.n, 1))
        if not _next_index(index, p.bshape, inner):
            return


cdef void _matmul_loop(const numeric_t* x, const numeric_t* y, numeric_t* out,
                       const MatmulPlan* p) noexcept nogil:
    """out = op(x) · op(y) per batch with the blocked loop; out is C-contiguous."""
    cdef ptrdiff_t index[FASTOP_MAX_NDIM]
    cdef ptrdiff_t xo, yo, oo
    cdef int d
    memset(index, 0, sizeof(index))
    while True:
        xo = yo = oo = 0
        for d in range(p.nb):
            xo += index[d] * p.xs_b[d]
            yo += index[d] * p.ys_b[d]
            oo += index[d] * p.os_b[d]
        _gemm_loop(p.m, p.n, p.k, x + xo, p.xs_m, p.xs_k, y + yo, p.ys_k, p.ys_n,
                   out + oo, False)
        if not _next_index(index, p.bshape, p.nb):
            return


cdef inline bint _fits_blas(ptrdiff_t m, ptrdiff_t n, ptrdiff_t k) noexcept nogil:
    return m <= INT_MAX and n <= INT_MAX and k <= INT_MAX


cdef int _prepare_operand(fastop_view* v, bint left, bint trans, bint blas,
                          void** buf) noexcept nogil:
    """Copy `v` to contiguous memory unless the kernel can read it where it is."""
    cdef ptrdiff_t rows, cols, rs, cs, item = itemsize_of(v.dtype)
    cdef bint t
    cdef int ld
    if not _strides_divisible(v):
        return _make_contiguous(v, buf)
    if blas:
        _matrix(v, left, trans, &rows, &cols, &rs, &cs)
        if not _blas_layout(rows, cols, rs // item, cs // item, &t, &ld):
            return _make_contiguous(v, buf)
    return K_OK


cdef int _output_target(fastop_view* dest, const fastop_view* out, fastop_view** ins,
                        int n_in, void** buf) noexcept nogil:
    """Compute into `out` itself when it is C-contiguous and overlaps no input,
    else into a new buffer (``*buf``, copied to `out` afterwards)."""
    cdef int i
    cdef bint direct = view_is_contiguous(out)
    dest[0] = out[0]
    for i in range(n_in):
        if ins[i] is not NULL and _overlaps(out, ins[i]):
            direct = False
    if direct:
        return K_OK
    buf[0] = malloc(max(out.size, 1) * itemsize_of(out.dtype))
    if buf[0] is NULL:
        return K_ERR_MEMORY
    dest.data = <char*>buf[0]
    view_set_contiguous_strides(dest)
    return K_OK


cdef int matmul_fn(fastop_view** ins, int n_in, fastop_view** outs, int n_out,
                   const fastop_attrs* attrs) noexcept nogil:
    cdef fastop_view x = ins[0][0]
    cdef fastop_view y = ins[1][0]
    cdef fastop_view dest
    cdef void* bufs[3]
    cdef MatmulPlan p
    cdef bint tx = _transpose_x(&x, attrs), ty = _transpose_y(&y, attrs)
    cdef bint is_float = x.dtype == FASTOP_FLOAT32 or x.dtype == FASTOP_FLOAT64
    cdef bint blas
    cdef int status
    cdef ptrdiff_t m, n, k, rs, cs
    if outs[0].size == 0:
        return K_OK
    _matrix(&x, True, tx, &m, &k, &rs, &cs)
    _matrix(&y, False, ty, &k, &n, &rs, &cs)
    blas = is_float and _fits_blas(m, n, k)
    if blas and ensure_loaded() != 0:
        return K_ERR_DTYPE    # no BLAS: ensure_loaded() warned why
    bufs[0] = bufs[1] = bufs[2] = NULL
    status = _prepare_operand(&x, True, tx, blas, &bufs[0])
    if status == K_OK:
        status = _prepare_operand(&y, False, ty, blas, &bufs[1])
    if status == K_OK:
        status = _output_target(&dest, outs[0], ins, 2, &bufs[2])
    if status == K_OK:
        _plan_matmul(&x, &y, &dest, tx, ty, &p)
        if p.k == 0:
            memset(dest.data, 0, dest.size * itemsize_of(dest.dtype))
        elif blas and x.dtype == FASTOP_FLOAT32:
            _matmul_blas(<const float*>x.data, <const float*>y.data, <float*>dest.data, &p)
        elif blas:
            _matmul_blas(<const double*>x.data, <const double*>y.data, <double*>dest.data, &p)
        elif x.dtype == FASTOP_FLOAT32:
            _matmul_loop(<const float*>x.data, <const float*>y.data, <float*>dest.data, &p)
        elif x.dtype == FASTOP_FLOAT64:
            _matmul_loop(<const double*>x.data, <const double*>y.data, <double*>dest.data, &p)
        elif x.dtype == FASTOP_INT32:
            _matmul_loop(<const int*>x.data, <const int*>y.data, <int*>dest.data, &p)
        else:
            _matmul_loop(<const long long*>x.data, <const long long*>y.data,
                         <long long*>dest.data, &p)
        if bufs[2] is not NULL:
            view_copy(&dest, outs[0])
    free(bufs[0])
    free(bufs[1])
    free(bufs[2])
    return status


# --------------------------------------------------------------------------- fc

cdef inline bint _has_bias(fastop_view** ins, int n_in) noexcept nogil:
    return n_in > 2 and ins[2] is not NULL


cdef int fc_infer(fastop_view** ins, int n_in, fastop_view* outs, int n_out,
                  const fastop_attrs* attrs) noexcept nogil:
    cdef fastop_view* x = ins[0]
    cdef fastop_view* w = ins[1]
    cdef fastop_view* out = outs
    cdef int i, act = attrs.ints[0]
    cdef ptrdiff_t k
    if x.dtype != w.dtype or _has_bias(ins, n_in) and ins[2].dtype != x.dtype:
        return K_ERR_DTYPE
    if act != ACT_NONE and act != ACT_RELU and \
            x.dtype != FASTOP_FLOAT32 and x.dtype != FASTOP_FLOAT64:
        return K_ERR_ATTR       # tanh/sigmoid of an integer product
    if x.ndim < 1 or w.ndim != 2:
        return K_ERR_SHAPE
    k = x.shape[x.ndim - 1]
    if k >= 0 and w.shape[0] >= 0 and k != w.shape[0]:
        return K_ERR_SHAPE
    if _has_bias(ins, n_in) and (ins[2].ndim != 1 or ins[2].shape[0] >= 0 and
                                 w.shape[1] >= 0 and ins[2].shape[0] != w.shape[1]):
        return K_ERR_SHAPE
    out.ndim = x.ndim
    out.dtype = x.dtype
    out.size = 1
    for i in range(x.ndim - 1):
        out.shape[i] = x.shape[i]
    out.shape[x.ndim - 1] = w.shape[1]
    for i in range(out.ndim):
        out.size = -1 if out.size < 0 or out.shape[i] < 0 else out.size * out.shape[i]
    return K_OK


cdef bint _rows_stride(const fastop_view* x, ptrdiff_t* rs) noexcept nogil:
    """The one byte stride between consecutive rows of x viewed as (prod(shape[:-1]),
    shape[-1]); False when its leading dims do not merge into one."""
    cdef int d
    cdef ptrdiff_t expected = 0
    rs[0] = 0
    for d in range(x.ndim - 2, -1, -1):
        if x.shape[d] == 1:
            continue
        if expected == 0:
            rs[0] = x.strides[d]
        elif x.strides[d] != expected:
            return False
        expected = x.strides[d] * x.shape[d]
    return True


cdef void _fc_loop(const numeric_t* x, ptrdiff_t xs_m, ptrdiff_t xs_k,
                   const numeric_t* w, ptrdiff_t ws_k, ptrdiff_t ws_n,
                   const numeric_t* b, numeric_t* out, ptrdiff_t m, ptrdiff_t n,
                   ptrdiff_t k, int act) noexcept nogil:
    """out = act(x · w + b) with the blocked loop (integers, or floats with a dim beyond
    BLAS's int range)."""
    cdef ptrdiff_t i
    if b is not NULL:
        for i in range(m):
            memcpy(out + i * n, b, n * sizeof(numeric_t))
    _gemm_loop(m, n, k, x, xs_m, xs_k, w, ws_k, ws_n, out, b is not NULL)
    if numeric_t is float or numeric_t is double:
        _act(out, m * n, act)
    elif act == ACT_RELU:
        for i in range(m * n):
            if out[i] < 0:
                out[i] = 0


cdef int fc_fn(fastop_view** ins, int n_in, fastop_view** outs, int n_out,
               const fastop_attrs* attrs) noexcept nogil:
    cdef fastop_view x = ins[0][0]
    cdef fastop_view w = ins[1][0]
    cdef fastop_view b
    cdef fastop_view dest
    cdef bint has_b = _has_bias(ins, n_in), blas
    cdef void* bufs[4]
    cdef int status = K_OK, act = attrs.ints[0]
    cdef ptrdiff_t item = itemsize_of(x.dtype), m = 1, n = w.shape[1], k = w.shape[0]
    cdef ptrdiff_t xs_m, i
    cdef bint t
    cdef int ld
    if outs[0].size == 0:
        return K_OK
    for i in range(x.ndim - 1):
        m *= x.shape[i]
    blas = (x.dtype == FASTOP_FLOAT32 or x.dtype == FASTOP_FLOAT64) and _fits_blas(m, n, k)
    if blas and ensure_loaded() != 0:
        return K_ERR_DTYPE    # no BLAS: ensure_loaded() warned why
    bufs[0] = bufs[1] = bufs[2] = bufs[3] = NULL
    # x as an m×k matrix: its leading dims must merge and (for BLAS) it must be row-
    # or column-major; otherwise a contiguous copy is.
    if not _strides_divisible(&x) or not _rows_stride(&x, &xs_m) or blas and not \
            _blas_layout(m, k, xs_m // item, x.strides[x.ndim - 1] // item, &t, &ld):
        status = _make_contiguous(&x, &bufs[0])
        xs_m = k * item
    if status == K_OK:
        status = _prepare_operand(&w, False, False, blas, &bufs[1])
    if status == K_OK and has_b:
        b = ins[2][0]
        if b.shape[0] > 1 and b.strides[0] != item:
            status = _make_contiguous(&b, &bufs[2])
    if status == K_OK:
        status = _output_target(&dest, outs[0], ins, n_in, &bufs[3])
    if status != K_OK:
        pass
    elif not blas:
        if x.dtype == FASTOP_INT32:
            _fc_loop(<const int*>x.data, xs_m // item, x.strides[x.ndim - 1] // item,
                     <const int*>w.data, w.strides[0] // item, w.strides[1] // item,
                     <const int*>b.data if has_b else NULL, <int*>dest.data, m, n, k, act)
        elif x.dtype == FASTOP_INT64:
            _fc_loop(<const long long*>x.data, xs_m // item, x.strides[x.ndim - 1] // item,
                     <const long long*>w.data, w.strides[0] // item, w.strides[1] // item,
                     <const long long*>b.data if has_b else NULL, <long long*>dest.data,
                     m, n, k, act)
        elif x.dtype == FASTOP_FLOAT32:
            _fc_loop(<const float*>x.data, xs_m // item, x.strides[x.ndim - 1] // item,
                     <const float*>w.data, w.strides[0] // item, w.strides[1] // item,
                     <const float*>b.data if has_b else NULL, <float*>dest.data, m, n, k, act)
        else:
            _fc_loop(<const double*>x.data, xs_m // item, x.strides[x.ndim - 1] // item,
                     <const double*>w.data, w.strides[0] // item, w.strides[1] // item,
                     <const double*>b.data if has_b else NULL, <double*>dest.data,
                     m, n, k, act)
    elif x.dtype == FASTOP_FLOAT32:
        _fc_blas(<const float*>x.data, xs_m // item, x.strides[x.ndim - 1] // item,
                 <const float*>w.data, w.strides[0] // item, w.strides[1] // item,
                 <const float*>b.data if has_b else NULL, <float*>dest.data, m, n, k, act)
    else:
        _fc_blas(<const double*>x.data, xs_m // item, x.strides[x.ndim - 1] // item,
                 <const double*>w.data, w.strides[0] // item, w.strides[1] // item,
                 <const double*>b.data if has_b else NULL, <double*>dest.data, m, n, k, act)
    if status == K_OK and bufs[3] is not NULL:
        view_copy(&dest, outs[0])
    for i in range(4):
        free(bufs[i])
    return status


# --------------------------------------------------------------------------- kernels

def _pack_matmul(dict attrs):
    return (int(bool_attr(attrs, "transpose_x", False)),
            int(bool_attr(attrs, "transpose_y", False))), ()


def _pack_fc(dict attrs):
    activation = attrs.get("activation") or ""
    code = ACTIVATIONS.get(activation)
    if code is None:
        raise ValueError(f"activation must be one of "
                         f"{list(ACTIVATIONS)}, got {activation!r}")
    return (code,), ()


matmul = make_kernel("matmul", ("x", "y"), ("out",), matmul_infer,
                     NULL, matmul_fn, matmul_fn, matmul_fn, matmul_fn,
                     0, ("transpose_x", "transpose_y"), _pack_matmul, 1)

fc = make_kernel("fc", ("x", "w", "b?"), ("out",), fc_infer,
                 NULL, fc_fn, fc_fn, fc_fn, fc_fn, 0, ("activation",), _pack_fc, 1)
