"""View kernels (Cython): shape ops whose output views their first input's memory, each a
:class:`~fastop._core.kernel.CKernel` with ``is_view`` set. Called on a tensor they return
a DenseTensor sharing its memory (a contiguous copy's for a reshape of non-contiguous
data); broadcast_to and expand_as return read-only views.
"""
from fastop._core.kernel import CKernel

__all__ = ["reshape", "transpose", "squeeze", "unsqueeze", "slice", "broadcast_to",
           "expand_as", "SLICE_END"]

#: A slice bound past any dim: an open end.
SLICE_END: int
#: ``reshape(x, shape=)``: 0 copies x's dim, one -1 is inferred.
reshape: CKernel
#: ``transpose(x, perm=)``: ``out.shape[i] = x.shape[perm[i]]``.
transpose: CKernel
#: ``squeeze(x, axis=None)``: drops size-1 dims (all, or those among axis).
squeeze: CKernel
#: ``unsqueeze(x, axis=)``: inserts size-1 dims, one per axis, in order.
unsqueeze: CKernel
#: ``slice(x, axes=, starts=, ends=, strides=[], decrease_axis=[])``: Python slices per axis;
#: decrease_axis entries are indexed and dropped.
slice: CKernel
#: ``broadcast_to(x, shape=)``: -1 keeps x's dim; a read-only view.
broadcast_to: CKernel
#: ``expand_as(x, y)``: x broadcast to y's shape; a read-only view.
expand_as: CKernel
