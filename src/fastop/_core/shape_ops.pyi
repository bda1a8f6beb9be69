"""Shape kernels that copy (Cython): gather and its scatter-add gradient, each a
:class:`~fastop._core.kernel.CKernel`. Call them on tensors or numpy arrays. The view
kernels are in :mod:`fastop._core.views`.
"""
from fastop._core.kernel import CKernel

__all__ = ["gather", "gather_grad"]

#: ``gather(x, index int32/int64, axis=0)`` as ``numpy.take``: output shape
#: ``x.shape[:axis] + index.shape + x.shape[axis+1:]``; any dtype; an index outside
#: ``[-n, n)`` raises ValueError naming the op.
gather: CKernel
#: ``gather_grad(x, index, dout, axis=0) -> dx``: zeros like x with dout added at the
#: gathered positions (float32, float64).
gather_grad: CKernel
