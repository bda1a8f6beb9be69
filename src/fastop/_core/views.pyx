"""View kernels: shape ops whose output is a view of their first input (no data moves).

Each is a :class:`~fastop._core.kernel.CKernel` with ``is_view`` set: its ``infer``
computes the output's dtype and shape (``-1`` for dims unknown until a static graph is
fed), and its kernel function sets the output's data pointer and strides into input
0's memory. Eager dispatch, a raw call and the static executor all run them through the
kernel ABI, without Python (a view costs what a Tensor object costs).

* ``reshape(x, shape=)`` — PaddlePaddle's rules: ``0`` copies x's dim, one ``-1`` is
  inferred. A view of contiguous x; other layouts are copied first (the kernel answers
  ``K_ERR_LAYOUT`` and the caller passes a contiguous copy), as numpy does.
* ``transpose(x, perm=)``: ``out.shape[i] = x.shape[perm[i]]``.
* ``squeeze(x, axis=None)``: drops size-1 dims (all, or those among ``axis``; other dims
  named there are kept, as in PaddlePaddle).
* ``unsqueeze(x, axis=)``: inserts size-1 dims, one per entry of ``axis``, in order.
* ``slice(x, axes=, starts=, ends=, strides=[], decrease_axis=[])``: Python slice
  semantics per axis (negative positions count from the end, out-of-range ones are
  clamped); an axis in ``decrease_axis`` is indexed (``x[i]``: ``ends = starts + 1``) and
  dropped, and its index must be in range.
* ``broadcast_to(x, shape=)`` (``-1`` keeps x's dim) and ``expand_as(x, y)`` (to y's
  shape; y's values are not read): read-only views, stride 0 on broadcast dims.

Attributes are packed as ints: reshape/broadcast_to the shape, transpose the
permutation, squeeze/unsqueeze the axes, slice ``[decrease bit mask, then per axis:
axis, start, end, step]``.
"""
from libc.stddef cimport ptrdiff_t
from fastop._core.storage cimport (fastop_view, fastop_attrs, FASTOP_MAX_NDIM, FASTOP_BOOL,
                                   FASTOP_MAX_ATTR_INTS, itemsize_of, view_is_contiguous,
                                   view_set_contiguous_strides)
from fastop._core.kernel cimport (CKernel, make_kernel, accept_narrow_ints, K_OK, K_ERR_ATTR, K_ERR_BROADCAST,
                                  K_ERR_SHAPE, K_ERR_VALUE, K_ERR_LAYOUT, normalize_axis)
from fastop._core.kernel import IndexOutOfRangeError, ints_attr, int_attr

__all__ = ["reshape", "transpose", "squeeze", "unsqueeze", "slice", "broadcast_to",
           "expand_as", "SLICE_END"]

# A slice bound past any dim (a slice clamps it): an open end (`x[2:]`, `x[::-1]`).
SLICE_END = 2 ** 62


cdef inline void _set_size(fastop_view* v) noexcept nogil:
    cdef ptrdiff_t n = 1
    cdef int i
    for i in range(v.ndim):
        n *= v.shape[i]
    v.size = n


# --------------------------------------------------------------------------- reshape

cdef int _infer_reshape(fastop_view** ins, int n_in, fastop_view* outs, int n_out,
                        const fastop_attrs* a) noexcept nogil:
    cdef const fastop_view* x = ins[0]
    cdef int nd = a.n_ints, i, infer = -1
    cdef ptrdiff_t t, size = 1, rest = 1
    cdef bint size_known = True, rest_known = True
    if nd > FASTOP_MAX_NDIM:
        return K_ERR_ATTR
    for i in range(x.ndim):
        # dims copied with 0 appear on both sides: leave them out of both products, so
        # an unknown copied dim does not hide the inferred one
        if i < nd and a.ints[i] == 0:
            continue
        if x.shape[i] < 0:
            size_known = False
        else:
            size *= x.shape[i]
    for i in range(nd):
        t = a.ints[i]
        if t == 0:
            if i >= x.ndim:
                return K_ERR_ATTR
            outs[0].shape[i] = x.shape[i]
        elif t == -1:
            if infer >= 0:
                return K_ERR_ATTR
            infer = i
        elif t < 0:
            return K_ERR_ATTR
        else:
            outs[0].shape[i] = t
            rest *= t
    if infer >= 0:
        if size_known:
            if rest == 0 or size % rest:
                return K_ERR_SHAPE
            outs[0].shape[infer] = size // rest
        else:
            outs[0].shape[infer] = -1
    elif size_known and size != rest:
        return K_ERR_SHAPE
    outs[0].ndim = nd
    outs[0].dtype = x.dtype
    return K_OK


cdef int _reshape_view(fastop_view** ins, int n_in, fastop_view** outs, int n_out,
                       const fastop_attrs* a) noexcept nogil:
    if not view_is_contiguous(ins[0]):
        return K_ERR_LAYOUT
    outs[0].data = ins[0].data
    view_set_contiguous_strides(outs[0])
    return K_OK


# --------------------------------------------------------------------------- transpose

cdef int _infer_transpose(fastop_view** ins, int n_in, fastop_view* outs, int n_out,
                          const fastop_attrs* a) noexcept nogil:
    cdef const fastop_view* x = ins[0]
    cdef int i, p
    cdef bint seen[FASTOP_MAX_NDIM]
    if a.n_ints != x.ndim:
        return K_ERR_ATTR
    for i in range(x.ndim):
        seen[i] = False
    for i in range(x.ndim):
        p = normalize_axis(a.ints[i], x.ndim)
        if p < 0 or seen[p]:
            return K_ERR_ATTR
        seen[p] = True
        outs[0].shape[i] = x.shape[p]
    outs[0].ndim = x.ndim
    outs[0].dtype = x.dtype
    return K_OK


cdef int _transpose_view(fastop_view** ins, int n_in, fastop_view** outs, int n_out,
                         const fastop_attrs* a) noexcept nogil:
    cdef int i
    for i in range(ins[0].ndim):
        outs[0].strides[i] = ins[0].strides[normalize_axis(a.ints[i], ins[0].ndim)]
    outs[0].data = ins[0].data
    _set_size(outs[0])
    return K_OK


# --------------------------------------------------------------------------- squeeze

cdef int _squeezed(const fastop_view* x, const fastop_attrs* a, bint* drop) noexcept nogil:
    """drop[i]: dim i of x goes (size 1, and among the axes when some are given). A 0-D
    x takes axis 0 or -1 and stays 0-D (PaddlePaddle's rule)."""
    cdef int i, ax
    if x.ndim == 0:
        for i in range(a.n_ints):
            if a.ints[i] != 0 and a.ints[i] != -1:
                return K_ERR_ATTR
        return K_OK
    for i in range(x.ndim):
        drop[i] = a.n_ints == 0 and x.shape[i] == 1
    for i in range(a.n_ints):
        ax = normalize_axis(a.ints[i], x.ndim)
        if ax < 0:
            return K_ERR_ATTR
        drop[ax] = x.shape[ax] == 1
    return K_OK


cdef int _infer_squeeze(fastop_view** ins, int n_in, fastop_view* outs, int n_out,
                        const fastop_attrs* a) noexcept nogil:
    cdef bint drop[FASTOP_MAX_NDIM]
    cdef int i, nd = 0
    if _squeezed(ins[0], a, drop) != K_OK:
        return K_ERR_ATTR
    for i in range(ins[0].ndim):
        if not drop[i]:
            outs[0].shape[nd] = ins[0].shape[i]
            nd += 1
    outs[0].ndim = nd
    outs[0].dtype = ins[0].dtype
    return K_OK


cdef int _squeeze_view(fastop_view** ins, int n_in, fastop_view** outs, int n_out,
                       const fastop_attrs* a) noexcept nogil:
    cdef bint drop[FASTOP_MAX_NDIM]
    cdef int i, nd = 0
    _squeezed(ins[0], a, drop)
    for i in range(ins[0].ndim):
        if not drop[i]:
            outs[0].strides[nd] = ins[0].strides[i]
            nd += 1
    outs[0].data = ins[0].data
    _set_size(outs[0])
    return K_OK


# --------------------------------------------------------------------------- unsqueeze

cdef int _inserted(int ndim, const fastop_attrs* a, bint* new) noexcept nogil:
    """new[i]: dim i of the output is inserted; axes apply in order, each to the shape
    the previous ones made (PaddlePaddle's rule)."""
    cdef int nd = ndim, i, j, pos
    if ndim + a.n_ints > FASTOP_MAX_NDIM:
        return K_ERR_SHAPE
    for i in range(ndim):
        new[i] = False
    for i in range(a.n_ints):
        pos = <int>a.ints[i]
        if pos < -nd - 1 or pos > nd:
            return K_ERR_ATTR
        if pos < 0:
            pos += nd + 1
        for j in range(nd, pos, -1):
            new[j] = new[j - 1]
        new[pos] = True
        nd += 1
    return K_OK


cdef int _infer_unsqueeze(fastop_view** ins, int n_in, fastop_view* outs, int n_out,
                          const fastop_attrs* a) noexcept nogil:
    cdef bint new[FASTOP_MAX_NDIM]
    cdef int status = _inserted(ins[0].ndim, a, new), i, k = 0
    if status != K_OK:
        return status
    for i in range(ins[0].ndim + a.n_ints):
        if new[i]:
            outs[0].shape[i] = 1
        else:
            outs[0].shape[i] = ins[0].shape[k]
            k += 1
    outs[0].ndim = ins[0].ndim + a.n_ints
    outs[0].dtype = ins[0].dtype
    return K_OK


cdef int _unsqueeze_view(fastop_view** ins, int n_in, fastop_view** outs, int n_out,
                         const fastop_attrs* a) noexcept nogil:
    cdef bint new[FASTOP_MAX_NDIM]
    cdef int nd = ins[0].ndim + a.n_ints, i, k = ins[0].ndim - 1
    cdef ptrdiff_t inner = itemsize_of(ins[0].dtype)
    _inserted(ins[0].ndim, a, new)
    for i in range(nd - 1, -1, -1):       # an inserted dim takes the stride a C-contiguous
        if new[i]:                        # layout would give it, so contiguity is kept
            outs[0].strides[i] = inner
        else:
            outs[0].strides[i] = ins[0].strides[k]
            inner = ins[0].strides[k] * ins[0].shape[k]
            k -= 1
    outs[0].data = ins[0].data
    _set_size(outs[0])
    return K_OK


# --------------------------------------------------------------------------- slice

cdef inline ptrdiff_t _clamp(ptrdiff_t v, ptrdiff_t lo, ptrdiff_t hi) noexcept nogil:
    return lo if v < lo else hi if v > hi else v


cdef inline void _bounds(ptrdiff_t start, ptrdiff_t end, ptrdiff_t step, ptrdiff_t dim,
                         ptrdiff_t* first, ptrdiff_t* length) noexcept nogil:
    """Python's slice(start, end, step).indices(dim): the first index and the length."""
    if start < 0:
        start += dim
    if end < 0:
        end += dim
    if step > 0:
        start = _clamp(start, 0, dim)
        end = _clamp(end, 0, dim)
        length[0] = (end - start + step - 1) // step if end > start else 0
    else:
        start = _clamp(start, -1, dim - 1)
        end = _clamp(end, -1, dim - 1)
        length[0] = (start - end - step - 1) // (-step) if start > end else 0
    first[0] = start


cdef int _check_slice(const fastop_view* x, const fastop_attrs* a) noexcept nogil:
    cdef int n = (a.n_ints - 1) // 4, k, ax
    cdef ptrdiff_t start, dim
    cdef unsigned int seen = 0
    if a.n_ints < 1 or (a.n_ints - 1) % 4:
        return K_ERR_ATTR
    for k in range(n):
        ax = normalize_axis(a.ints[1 + 4 * k], x.ndim)
        if ax < 0 or a.ints[4 + 4 * k] == 0 or (seen >> ax) & 1:
            return K_ERR_ATTR
        seen |= 1u << ax
        if (a.ints[0] >> k) & 1:          # an index: must be in range
            start, dim = a.ints[2 + 4 * k], x.shape[ax]
            if dim >= 0 and (start < -dim or start >= dim):
                return K_ERR_VALUE
    return K_OK


cdef int _infer_slice(fastop_view** ins, int n_in, fastop_view* outs, int n_out,
                      const fastop_attrs* a) noexcept nogil:
    cdef const fastop_view* x = ins[0]
    cdef int status = _check_slice(x, a), n = (a.n_ints - 1) // 4, k, i, nd = 0, ax
    cdef ptrdiff_t shape[FASTOP_MAX_NDIM]
    cdef ptrdiff_t first, length
    cdef unsigned int dropped = 0
    if status != K_OK:
        return status
    for i in range(x.ndim):
        shape[i] = x.shape[i]
    for k in range(n):
        ax = normalize_axis(a.ints[1 + 4 * k], x.ndim)
        if (a.ints[0] >> k) & 1:
            dropped |= 1u << ax
        elif x.shape[ax] >= 0:
            _bounds(a.ints[2 + 4 * k], a.ints[3 + 4 * k], a.ints[4 + 4 * k], x.shape[ax],
                    &first, &length)
            shape[ax] = length
    for i in range(x.ndim):
        if not (dropped >> i) & 1:
            outs[0].shape[nd] = shape[i]
            nd += 1
    outs[0].ndim = nd
    outs[0].dtype = x.dtype
    return K_OK


cdef int _slice_view(fastop_view** ins, int n_in, fastop_view** outs, int n_out,
                     const fastop_attrs* a) noexcept nogil:
    cdef const fastop_view* x = ins[0]
    cdef int n = (a.n_ints - 1) // 4, k, i, nd = 0, ax
    cdef ptrdiff_t strides[FASTOP_MAX_NDIM]
    cdef ptrdiff_t first, length, step
    cdef unsigned int dropped = 0
    cdef char* data = x.data
    for i in range(x.ndim):
        strides[i] = x.strides[i]
    for k in range(n):
        ax = normalize_axis(a.ints[1 + 4 * k], x.ndim)
        step = a.ints[4 + 4 * k]
        _bounds(a.ints[2 + 4 * k], a.ints[3 + 4 * k], step, x.shape[ax], &first, &length)
        if (a.ints[0] >> k) & 1:
            dropped |= 1u << ax
            data += first * x.strides[ax]
        else:
            if length > 0:
                data += first * x.strides[ax]
            strides[ax] = x.strides[ax] * step
    for i in range(x.ndim):
        if not (dropped >> i) & 1:
            outs[0].strides[nd] = strides[i]
            nd += 1
    outs[0].data = data
    _set_size(outs[0])
    return K_OK


# --------------------------------------------------------------------------- broadcasts

cdef int _broadcast_shape(const fastop_view* x, int nd, const ptrdiff_t* dims,
                          fastop_view* out) noexcept nogil:
    """out's shape: x broadcast to `dims` (numpy's rules; -1 keeps x's dim, and is
    unknown when x's is)."""
    cdef int lead = nd - x.ndim, i, j
    cdef ptrdiff_t d
    if lead < 0 or nd > FASTOP_MAX_NDIM:
        return K_ERR_BROADCAST
    for i in range(nd):
        j = i - lead
        d = dims[i]
        if d < -1:
            return K_ERR_ATTR
        if d == -1:
            if j < 0:
                return K_ERR_BROADCAST
            d = x.shape[j]
        elif j >= 0 and x.shape[j] >= 0 and x.shape[j] != 1 and x.shape[j] != d:
            return K_ERR_BROADCAST
        out.shape[i] = d
    out.ndim = nd
    out.dtype = x.dtype
    return K_OK


cdef int _broadcast_strides(const fastop_view* x, fastop_view* out) noexcept nogil:
    cdef int lead = out.ndim - x.ndim, i, j
    for i in range(out.ndim):
        j = i - lead
        if j < 0 or (x.shape[j] == 1 and out.shape[i] != 1):
            out.strides[i] = 0
        elif x.shape[j] == out.shape[i]:
            out.strides[i] = x.strides[j]
        else:
            return K_ERR_BROADCAST
    out.data = x.data
    _set_size(out)
    return K_OK


cdef int _infer_broadcast_to(fastop_view** ins, int n_in, fastop_view* outs, int n_out,
                             const fastop_attrs* a) noexcept nogil:
    return _broadcast_shape(ins[0], a.n_ints, a.ints, outs)


cdef int _infer_expand_as(fastop_view** ins, int n_in, fastop_view* outs, int n_out,
                          const fastop_attrs* a) noexcept nogil:
    """x to y's shape; a dim unknown in y (-1: not "keep") is known when x fixes it (a
    dim other than 1)."""
    cdef const fastop_view* x = ins[0]
    cdef const fastop_view* y = ins[1]
    cdef int lead = y.ndim - x.ndim, i, j
    cdef ptrdiff_t xd, yd
    if lead < 0:
        return K_ERR_BROADCAST
    for i in range(y.ndim):
        j = i - lead
        xd = x.shape[j] if j >= 0 else 1
        yd = y.shape[i]
        if yd < 0:
            outs.shape[i] = xd if xd != 1 else -1
        elif xd < 0 or xd == 1 or xd == yd:
            outs.shape[i] = yd
        else:
            return K_ERR_BROADCAST
    outs.ndim = y.ndim
    outs.dtype = x.dtype
    return K_OK


cdef int _broadcast_view(fastop_view** ins, int n_in, fastop_view** outs, int n_out,
                         const fastop_attrs* a) noexcept nogil:
    return _broadcast_strides(ins[0], outs[0])


# --------------------------------------------------------------------------- packers

def _pack_shape(attrs):
    if attrs.get("shape") is None:
        raise TypeError("missing attribute 'shape'")
    return ints_attr(attrs, "shape"), []


def _pack_perm(attrs):
    return ints_attr(attrs, "perm"), []


def _pack_axes(attrs):
    return ints_attr(attrs, "axis"), []


def _pack_slice(attrs):
    axes, starts, ends = (ints_attr(attrs, k) for k in ("axes", "starts", "ends"))
    strides = ints_attr(attrs, "strides") or [1] * len(axes)
    decrease = ints_attr(attrs, "decrease_axis")
    if not len(axes) == len(starts) == len(ends) == len(strides):
        raise ValueError(f"axes, starts, ends (and strides) need one entry per axis, got "
                         f"axes={axes}, starts={starts}, ends={ends}, strides={strides}")
    if len(axes) > FASTOP_MAX_NDIM:
        raise ValueError(f"at most {FASTOP_MAX_NDIM} axes, got {len(axes)}")
    unknown = [d for d in decrease if d not in axes]
    if unknown:
        raise ValueError(f"decrease_axis {unknown} must be among axes {axes}")
    mask, ints = 0, []
    for k, (axis, start, end, step) in enumerate(zip(axes, starts, ends, strides)):
        if axis in decrease:
            mask |= 1 << k
            end, step = start + 1 if start != -1 else SLICE_END, 1
        ints += [axis, start, end, step]
    return [mask] + ints, []


reshape = make_kernel("reshape", ("x",), ("out",), _infer_reshape, _reshape_view,
                      _reshape_view, _reshape_view, _reshape_view, _reshape_view, 0,
                      ("shape",), _pack_shape, 0, False, (), True, False)
transpose = make_kernel("transpose", ("x",), ("out",), _infer_transpose, _transpose_view,
                        _transpose_view, _transpose_view, _transpose_view, _transpose_view,
                        0, ("perm",), _pack_perm, 0, False, (), True, False)
squeeze = make_kernel("squeeze", ("x",), ("out",), _infer_squeeze, _squeeze_view,
                      _squeeze_view, _squeeze_view, _squeeze_view, _squeeze_view, 0,
                      ("axis",), _pack_axes, 0, False, (), True, False)
unsqueeze = make_kernel("unsqueeze", ("x",), ("out",), _infer_unsqueeze, _unsqueeze_view,
                        _unsqueeze_view, _unsqueeze_view, _unsqueeze_view, _unsqueeze_view,
                        0, ("axis",), _pack_axes, 0, False, (), True, False)
slice = make_kernel("slice", ("x",), ("out",), _infer_slice, _slice_view, _slice_view,
                    _slice_view, _slice_view, _slice_view, 0,
                    ("axes", "starts", "ends", "strides", "decrease_axis"), _pack_slice, 0,
                    False, (), True, False)
broadcast_to = make_kernel("broadcast_to", ("x",), ("out",), _infer_broadcast_to,
                           _broadcast_view, _broadcast_view, _broadcast_view,
                           _broadcast_view, _broadcast_view, 0, ("shape",), _pack_shape, 0,
                           False, (), True, True)
expand_as = make_kernel("expand_as", ("x", "y"), ("out",), _infer_expand_as, _broadcast_view,
                        _broadcast_view, _broadcast_view, _broadcast_view, _broadcast_view,
                        0, (), None, 0, False, (), True, True)

# views set pointers and strides alone: every integer dtype
for _k in (reshape, transpose, squeeze, unsqueeze, slice, broadcast_to, expand_as):
    accept_narrow_ints(<CKernel>_k, (<CKernel>_k).fns[FASTOP_BOOL])

(<CKernel>reshape).reasons = {K_ERR_ATTR: "shape may hold one -1 (inferred) and 0 only "
                                          "where x has that dim (copied)",
                              K_ERR_SHAPE: "the new shape must hold as many elements as x"}
(<CKernel>transpose).reasons = {K_ERR_ATTR: "perm must be a permutation of x's axes"}
(<CKernel>squeeze).reasons = {K_ERR_ATTR: "each axis must be in [-ndim, ndim) of x (0 or -1 "
                                         "for a 0-D x)"}
(<CKernel>unsqueeze).reasons = {K_ERR_ATTR: "each axis must be in [-ndim-1, ndim] of the "
                                            "shape it is inserted into",
                                K_ERR_SHAPE: f"the result may have at most "
                                             f"{FASTOP_MAX_NDIM} dims"}
(<CKernel>slice).reasons = {K_ERR_ATTR: "each axis must be in [-ndim, ndim) of x and given "
                                        "once, and strides must not be 0",
                            K_ERR_VALUE: (IndexOutOfRangeError, "an index (decrease_axis) is "
                                                                "out of range for its axis")}
for _k in (broadcast_to, expand_as):
    (<CKernel>_k).reasons = {K_ERR_BROADCAST: "x's shape must broadcast to the target shape "
                                              "(numpy's rules)",
                             K_ERR_ATTR: "the target shape holds dims >= 0, or -1 to keep "
                                         "x's (not at a new leading dim)"}
