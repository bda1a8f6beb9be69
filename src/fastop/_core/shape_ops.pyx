"""Shape kernels that copy: gather (integer-array indexing along an axis) and its
gradient, gather_grad (a scatter-add into zeros).

``gather(x, index, axis=0)`` follows ``numpy.take``: the output shape is
``x.shape[:axis] + index.shape + x.shape[axis + 1:]``; indices may be negative (counted
from the end); one outside ``[-n, n)`` is an error naming the op.
``gather_grad(x, index, dout, axis=0)`` returns ``dx`` shaped like ``x``: zeros, plus
``dout`` added at the gathered positions (repeated indices accumulate).

The view kernels (reshape, transpose, slice, squeeze, unsqueeze, broadcast_to, expand_as)
are in :mod:`fastop._core.views`. Attributes: ``ints = [axis]``.
"""
from libc.string cimport memcpy, memset
from fastop._core.storage cimport (fastop_view, fastop_attrs, FASTOP_MAX_NDIM, FASTOP_INT32,
                                   FASTOP_INT64, FASTOP_FLOAT32, floating_t, itemsize_of,
                                   view_is_contiguous, view_shape, DenseTensor, as_dense,
                                   dtype_from_code, shape_fits, view_element_offset,
                                   view_copy_meta)
from fastop._core.kernel cimport (CKernel, make_kernel, accept_narrow_ints, K_OK, K_ERR_ATTR, K_ERR_BROADCAST,
                                  K_ERR_DTYPE, K_ERR_SHAPE, K_ERR_VALUE, get_num_threads,
                                  use_threads, normalize_axis)
from fastop._core.parallel cimport parallel_run
from fastop._core.kernel import IndexOutOfRangeError, int_attr, ints_attr

__all__ = ["gather", "gather_grad"]


# x (or dx) seen as [outer..., n, inner...] and out (or dout) as
# [outer..., index..., inner...]; shapes are shared, strides are each tensor's.
ctypedef struct Layout:
    int axis
    int n_index_dims
    int n_inner
    ptrdiff_t n                         # x's length along axis
    ptrdiff_t n_outer
    ptrdiff_t n_index
    ptrdiff_t n_inner_elems
    ptrdiff_t itemsize
    bint inner_contiguous               # inner block is one run in both tensors
    const fastop_view* x
    const fastop_view* out


cdef inline int _axis(const fastop_attrs* a, int ndim) noexcept nogil:
    """The `axis` attribute (default 0) against ndim; -1 when out of range."""
    return normalize_axis(a.ints[0] if a.n_ints > 0 else 0, ndim)


cdef int _infer_gather(fastop_view** ins, int n_in, fastop_view* outs, int n_out,
                       const fastop_attrs* a) noexcept nogil:
    cdef const fastop_view* x = ins[0]
    cdef const fastop_view* index = ins[1]
    cdef int axis = _axis(a, x.ndim), d, nd = 0
    if axis < 0:
        return K_ERR_ATTR
    if index.dtype != FASTOP_INT32 and index.dtype != FASTOP_INT64:
        return K_ERR_DTYPE
    if x.ndim - 1 + index.ndim > FASTOP_MAX_NDIM:
        return K_ERR_SHAPE
    for d in range(axis):
        outs[0].shape[nd] = x.shape[d]
        nd += 1
    for d in range(index.ndim):
        outs[0].shape[nd] = index.shape[d]
        nd += 1
    for d in range(axis + 1, x.ndim):
        outs[0].shape[nd] = x.shape[d]
        nd += 1
    outs[0].ndim = nd
    outs[0].dtype = x.dtype
    return K_OK


cdef int _infer_gather_grad(fastop_view** ins, int n_in, fastop_view* outs, int n_out,
                            const fastop_attrs* a) noexcept nogil:
    """(x, index, dout) -> dx like x; dout must have gather(x, index)'s shape."""
    cdef fastop_view expected
    cdef int d
    if ins[2].dtype != ins[0].dtype:
        return K_ERR_DTYPE
    cdef int status = _infer_gather(ins, 2, &expected, 1, a)
    if status != K_OK:
        return status
    if expected.ndim != ins[2].ndim:
        return K_ERR_SHAPE
    for d in range(expected.ndim):
        if expected.shape[d] != ins[2].shape[d] and expected.shape[d] != -1 \
                and ins[2].shape[d] != -1:
            return K_ERR_SHAPE
    view_copy_meta(ins[0], &outs[0])
    return K_OK


cdef void _layout(const fastop_view* x, const fastop_view* index, const fastop_view* out,
                  int axis, Layout* L) noexcept nogil:
    cdef int d
    cdef ptrdiff_t expect_x, expect_o
    L.axis = axis
    L.x = x
    L.out = out
    L.n = x.shape[axis]
    L.n_index_dims = index.ndim
    L.n_index = index.size
    L.n_inner = x.ndim - axis - 1
    L.itemsize = itemsize_of(x.dtype)
    L.n_outer = 1
    for d in range(axis):
        L.n_outer *= x.shape[d]
    L.n_inner_elems = 1
    L.inner_contiguous = True
    expect_x = L.itemsize
    expect_o = L.itemsize
    for d in range(L.n_inner - 1, -1, -1):
        L.n_inner_elems *= x.shape[axis + 1 + d]
        if x.shape[axis + 1 + d] != 1:
            L.inner_contiguous = L.inner_contiguous and \
                x.strides[axis + 1 + d] == expect_x and \
                out.strides[axis + index.ndim + d] == expect_o
            expect_x *= x.shape[axis + 1 + d]
            expect_o *= x.shape[axis + 1 + d]


cdef ptrdiff_t _index_at(const fastop_view* index, ptrdiff_t j, ptrdiff_t n) noexcept nogil:
    """The j-th index (C order), made non-negative; -1 when out of range."""
    cdef ptrdiff_t off = view_element_offset(index, j), v
    if index.dtype == FASTOP_INT32:
        v = (<const int*>(index.data + off))[0]
    else:
        v = (<const long long*>(index.data + off))[0]
    if v < 0:
        v += n
    return v if 0 <= v < n else -1


cdef inline void _split(const Layout* L, ptrdiff_t o, ptrdiff_t j, ptrdiff_t* xoff,
                        ptrdiff_t* ooff) noexcept nogil:
    """Byte offsets of outer position o (both tensors) and of index position j (out)."""
    cdef int d
    cdef ptrdiff_t q
    xoff[0] = 0
    ooff[0] = 0
    for d in range(L.axis - 1, -1, -1):
        q = o % L.x.shape[d]
        o = o // L.x.shape[d]
        xoff[0] += q * L.x.strides[d]
        ooff[0] += q * L.out.strides[d]
    for d in range(L.n_index_dims - 1, -1, -1):
        q = j % L.out.shape[L.axis + d]
        j = j // L.out.shape[L.axis + d]
        ooff[0] += q * L.out.strides[L.axis + d]


cdef inline ptrdiff_t _inner_offset(const fastop_view* v, int first, int n_inner,
                                    ptrdiff_t k) noexcept nogil:
    """Byte offset of the k-th inner element (dims first.. of v, C order)."""
    cdef int d
    cdef ptrdiff_t off = 0, q
    for d in range(n_inner - 1, -1, -1):
        q = k % v.shape[first + d]
        k = k // v.shape[first + d]
        off += q * v.strides[first + d]
    return off


cdef void _gather_outer(const Layout* L, const fastop_view* index, ptrdiff_t o) noexcept nogil:
    cdef ptrdiff_t j, k, src, xoff, ooff
    cdef ptrdiff_t x_axis_stride = L.x.strides[L.axis]
    cdef const char* xp
    cdef char* op
    cdef int out_inner = L.axis + L.n_index_dims
    for j in range(L.n_index):
        _split(L, o, j, &xoff, &ooff)
        xp = L.x.data + xoff + _index_at(index, j, L.n) * x_axis_stride
        op = L.out.data + ooff
        if L.inner_contiguous:
            memcpy(op, xp, L.n_inner_elems * L.itemsize)
        else:
            for k in range(L.n_inner_elems):
                memcpy(op + _inner_offset(L.out, out_inner, L.n_inner, k),
                       xp + _inner_offset(L.x, L.axis + 1, L.n_inner, k), L.itemsize)


cdef int _check_indices(const fastop_view* index, ptrdiff_t n) noexcept nogil:
    cdef ptrdiff_t j
    for j in range(index.size):
        if _index_at(index, j, n) < 0:
            return K_ERR_VALUE
    return K_OK


# Outer positions (the dims before `axis`) are independent: a large gather or scatter
# splits them into contiguous ranges, two per thread, on fastop's thread pool.

ctypedef struct OuterJob:
    const Layout* L
    const fastop_view* index
    bint scatter                # gather_grad's scatter-add (else gather's copy)
    int npieces


cdef void _outer_range(const OuterJob* j, ptrdiff_t lo, ptrdiff_t hi) noexcept nogil:
    """Outer positions [lo, hi) of a gather or scatter."""
    cdef ptrdiff_t o
    for o in range(lo, hi):
        if not j.scatter:
            _gather_outer(j.L, j.index, o)
        elif j.L.x.dtype == FASTOP_FLOAT32:
            _scatter_outer(j.L, j.index, o, <float*>NULL)
        else:
            _scatter_outer(j.L, j.index, o, <double*>NULL)


cdef void _outer_piece(void* ctx, int k) noexcept nogil:
    """Piece k: the k-th of j.npieces ranges of outer positions (a parallel_run piece)."""
    cdef const OuterJob* j = <const OuterJob*>ctx
    cdef ptrdiff_t n = j.L.n_outer
    _outer_range(j, n * k // j.npieces, n * (k + 1) // j.npieces)


cdef void _run_outer(const Layout* L, const fastop_view* index, bint scatter,
                     ptrdiff_t work) noexcept nogil:
    """Every outer position of a gather (or scatter) moving `work` elements."""
    cdef OuterJob j
    cdef int nt = get_num_threads()
    j.L, j.index, j.scatter = L, index, scatter
    if L.n_outer > 1 and use_threads(work):
        j.npieces = <int>min(L.n_outer, <ptrdiff_t>2 * nt)
        parallel_run(_outer_piece, &j, j.npieces, nt)
    else:
        _outer_range(&j, 0, L.n_outer)


cdef int _gather_kernel(fastop_view** ins, int n_in, fastop_view** outs, int n_out,
                        const fastop_attrs* a) noexcept nogil:
    cdef Layout L
    cdef int axis = _axis(a, ins[0].ndim)
    if _check_indices(ins[1], ins[0].shape[axis]) != K_OK:
        return K_ERR_VALUE
    if outs[0].size == 0:
        return K_OK
    _layout(ins[0], ins[1], outs[0], axis, &L)
    _run_outer(&L, ins[1], False, outs[0].size)
    return K_OK


cdef void _scatter_outer(const Layout* L, const fastop_view* index, ptrdiff_t o,
                         floating_t* tag) noexcept nogil:
    """dx[o, index[j], :] += dout[o, j, :] for every j (L.x is dx, L.out is dout)."""
    cdef ptrdiff_t j, k, xoff, ooff
    cdef floating_t* dst
    cdef const floating_t* src
    cdef int out_inner = L.axis + L.n_index_dims
    for j in range(L.n_index):
        _split(L, o, j, &xoff, &ooff)
        dst = <floating_t*>(L.x.data + xoff + _index_at(index, j, L.n) * L.x.strides[L.axis])
        src = <const floating_t*>(L.out.data + ooff)
        if L.inner_contiguous:
            for k in range(L.n_inner_elems):
                dst[k] += src[k]
        else:
            for k in range(L.n_inner_elems):
                (<floating_t*>(<char*>dst + _inner_offset(L.x, L.axis + 1, L.n_inner, k)))[0] += \
                    (<const floating_t*>(<const char*>src
                                         + _inner_offset(L.out, out_inner, L.n_inner, k)))[0]


cdef void _zero(fastop_view* v) noexcept nogil:
    cdef ptrdiff_t k
    if view_is_contiguous(v):
        memset(v.data, 0, v.size * itemsize_of(v.dtype))
        return
    for k in range(v.size):
        memset(v.data + view_element_offset(v, k), 0, itemsize_of(v.dtype))


cdef int _gather_grad_kernel(fastop_view** ins, int n_in, fastop_view** outs, int n_out,
                             const fastop_attrs* a) noexcept nogil:
    cdef Layout L
    cdef int axis = _axis(a, ins[0].ndim)
    if _check_indices(ins[1], ins[0].shape[axis]) != K_OK:
        return K_ERR_VALUE
    _zero(outs[0])
    if ins[2].size == 0:
        return K_OK
    _layout(outs[0], ins[1], ins[2], axis, &L)
    # outer positions own disjoint rows of dx, so they may run in parallel
    _run_outer(&L, ins[1], True, ins[2].size)
    return K_OK


def _pack_axis(attrs):
    return [int_attr(attrs, "axis", 0)], []


gather = make_kernel("gather", ("x", "index"), ("out",), _infer_gather,
                     _gather_kernel, _gather_kernel, _gather_kernel, _gather_kernel,
                     _gather_kernel, 0, ("axis",), _pack_axis, 0)
gather_grad = make_kernel("gather_grad", ("x", "index", "dout"), ("dx",),
                          _infer_gather_grad, NULL, NULL, NULL, _gather_grad_kernel,
                          _gather_grad_kernel, 0, ("axis",), _pack_axis, 0)
# gather copies elements by itemsize: every integer dtype
accept_narrow_ints(<CKernel>gather, _gather_kernel)
for _k in (gather, gather_grad):
    (<CKernel>_k).reasons = {K_ERR_ATTR: "axis must be in [-ndim, ndim) of x",
                             K_ERR_VALUE: (IndexOutOfRangeError, "each index must be in "
                                          "[-n, n) (n: x's size along axis)")}
