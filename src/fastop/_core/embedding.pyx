"""Embedding lookup kernels: rows of a table picked by integer ids, and the gradient.

``embedding(x, weight, padding_idx=-1)``: ``out[..., :] = weight[x[...], :]`` for ids
``x`` (int32/int64, any shape) and a 2-D table ``weight [num_embeddings, dim]``; output
``x.shape + [dim]``. Every id must be in ``[0, num_embeddings)`` (PaddlePaddle's rule:
no counting from the end). Where an id equals ``padding_idx`` (``-1``: none) the output
row is zeros.

``embedding_grad(x, weight, dout, padding_idx=-1) -> dweight``: zeros like ``weight``
with each ``dout`` row added to row ``x[...]`` (repeated ids accumulate); the
``padding_idx`` row stays zero, so padding never trains.

Both run gather's own C functions (:mod:`fastop._core.shape_ops`: the row copy and the
scatter-add, threaded there) along axis 0 and add the id check and the padding rows;
nothing of the gather is written twice. Attributes: ``ints = [padding_idx]``.
"""
from libc.string cimport memset
from fastop._core.storage cimport (fastop_view, fastop_attrs, FASTOP_INT32, FASTOP_INT64,
                                   FASTOP_NUM_DTYPES, itemsize_of, view_is_contiguous,
                                   view_element_offset)
from fastop._core.kernel cimport (CKernel, make_kernel, infer_fn, kernel_fn, K_OK,
                                  K_ERR_ATTR, K_ERR_DTYPE, K_ERR_SHAPE, K_ERR_VALUE)
from fastop._core.kernel import int_attr
from fastop._core import shape_ops

__all__ = ["embedding", "embedding_grad"]

# gather's and gather_grad's C functions, read once (their CKernels live as long as the
# shape_ops module this one imports)
cdef infer_fn _gather_infer = (<CKernel>shape_ops.gather).infer
cdef infer_fn _gather_grad_infer = (<CKernel>shape_ops.gather_grad).infer
cdef kernel_fn _gather_fns[FASTOP_NUM_DTYPES]
cdef kernel_fn _gather_grad_fns[FASTOP_NUM_DTYPES]
for _i in range(FASTOP_NUM_DTYPES):
    _gather_fns[_i] = (<CKernel>shape_ops.gather).fns[_i]
    _gather_grad_fns[_i] = (<CKernel>shape_ops.gather_grad).fns[_i]


cdef inline long long _id_at(const fastop_view* ids, ptrdiff_t k) noexcept nogil:
    cdef ptrdiff_t off = k * itemsize_of(ids.dtype) if view_is_contiguous(ids) \
        else view_element_offset(ids, k)
    if ids.dtype == FASTOP_INT32:
        return (<const int*>(ids.data + off))[0]
    return (<const long long*>(ids.data + off))[0]


cdef int _check(const fastop_view* ids, const fastop_view* weight,
                const fastop_attrs* a) noexcept nogil:
    """K_OK, or why the call is invalid: a bad table, ids or padding_idx."""
    if ids.dtype != FASTOP_INT32 and ids.dtype != FASTOP_INT64:
        return K_ERR_DTYPE
    if weight.ndim != 2:
        return K_ERR_SHAPE
    if a.ints[0] < -1 or (weight.shape[0] >= 0 and a.ints[0] >= weight.shape[0]):
        return K_ERR_ATTR
    return K_OK


cdef int _check_ids(const fastop_view* ids, ptrdiff_t rows) noexcept nogil:
    cdef ptrdiff_t k
    cdef long long v
    for k in range(ids.size):
        v = _id_at(ids, k)
        if v < 0 or v >= rows:
            return K_ERR_VALUE
    return K_OK


cdef void _zero_row(fastop_view* v, ptrdiff_t row, ptrdiff_t dim) noexcept nogil:
    """Zero elements [row * dim, (row + 1) * dim) (C order) of v."""
    cdef ptrdiff_t j, isz = itemsize_of(v.dtype)
    if view_is_contiguous(v):
        memset(v.data + row * dim * isz, 0, dim * isz)
        return
    for j in range(dim):
        memset(v.data + view_element_offset(v, row * dim + j), 0, isz)


cdef int _infer_embedding(fastop_view** ins, int n_in, fastop_view* outs, int n_out,
                          const fastop_attrs* a) noexcept nogil:
    """(x ids, weight [V, D]) -> x.shape + [D] in weight's dtype."""
    cdef fastop_view* gather_ins[2]
    cdef fastop_attrs axis0
    cdef int status = _check(ins[0], ins[1], a)
    if status != K_OK:
        return status
    gather_ins[0], gather_ins[1] = ins[1], ins[0]
    axis0.n_ints = 1
    axis0.ints[0] = 0
    return _gather_infer(gather_ins, 2, outs, 1, &axis0)


cdef int _infer_embedding_grad(fastop_view** ins, int n_in, fastop_view* outs, int n_out,
                               const fastop_attrs* a) noexcept nogil:
    """(x ids, weight, dout [x.shape + [D]]) -> dweight like weight."""
    cdef fastop_view* gather_ins[3]
    cdef fastop_attrs axis0
    cdef int status = _check(ins[0], ins[1], a)
    if status != K_OK:
        return status
    gather_ins[0], gather_ins[1], gather_ins[2] = ins[1], ins[0], ins[2]
    axis0.n_ints = 1
    axis0.ints[0] = 0
    return _gather_grad_infer(gather_ins, 3, outs, 1, &axis0)


cdef int _embedding_kernel(fastop_view** ins, int n_in, fastop_view** outs, int n_out,
                           const fastop_attrs* a) noexcept nogil:
    cdef fastop_view* gather_ins[2]
    cdef fastop_attrs axis0
    cdef ptrdiff_t k, dim = ins[1].shape[1], pad = a.ints[0]
    if _check_ids(ins[0], ins[1].shape[0]) != K_OK:
        return K_ERR_VALUE
    gather_ins[0], gather_ins[1] = ins[1], ins[0]
    axis0.n_ints = 1
    axis0.ints[0] = 0
    cdef int status = _gather_fns[ins[1].dtype](gather_ins, 2, outs, 1, &axis0)
    if status != K_OK or pad < 0:
        return status
    for k in range(ins[0].size):
        if _id_at(ins[0], k) == pad:
            _zero_row(outs[0], k, dim)
    return K_OK


cdef int _embedding_grad_kernel(fastop_view** ins, int n_in, fastop_view** outs, int n_out,
                                const fastop_attrs* a) noexcept nogil:
    cdef fastop_view* gather_ins[3]
    cdef fastop_attrs axis0
    if _check_ids(ins[0], ins[1].shape[0]) != K_OK:
        return K_ERR_VALUE
    gather_ins[0], gather_ins[1], gather_ins[2] = ins[1], ins[0], ins[2]
    axis0.n_ints = 1
    axis0.ints[0] = 0
    cdef int status = _gather_grad_fns[ins[1].dtype](gather_ins, 3, outs, 1, &axis0)
    if status == K_OK and a.ints[0] >= 0:
        _zero_row(outs[0], a.ints[0], ins[1].shape[1])
    return status


def _pack(attrs):
    return [int_attr(attrs, "padding_idx", -1)], []


embedding = make_kernel("embedding", ("x", "weight"), ("out",), _infer_embedding,
                        _embedding_kernel, _embedding_kernel, _embedding_kernel,
                        _embedding_kernel, _embedding_kernel, 1, ("padding_idx",), _pack, 0)
embedding_grad = make_kernel("embedding_grad", ("x", "weight", "dout"), ("dweight",),
                             _infer_embedding_grad, NULL, NULL, NULL, _embedding_grad_kernel,
                             _embedding_grad_kernel, 1, ("padding_idx",), _pack, 0)
for _k in (embedding, embedding_grad):
    (<CKernel>_k).reasons = {
        K_ERR_DTYPE: "ids (x) must be int32 or int64, and dout must have weight's dtype",
        K_ERR_SHAPE: "weight must be 2-D [num_embeddings, embedding_dim] (and dout "
                     "x.shape + [embedding_dim])",
        K_ERR_ATTR: "padding_idx must be -1 (none) or in [0, num_embeddings)",
        K_ERR_VALUE: "each id must be in [0, num_embeddings)",
    }
