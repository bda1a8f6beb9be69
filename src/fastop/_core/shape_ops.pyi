"""Shape kernels (Cython): gather and its scatter-add gradient (copies, each a
:class:`~fastop._core.kernel.CKernel`), and the view kernels expand_as and broadcast_to
(:class:`ViewKernel`: the output is a read-only view of the first input). Call them on
tensors or numpy arrays.
"""
from typing import Any

from fastop._core.kernel import CKernel
from fastop._core.storage import DenseTensor

__all__ = ["gather", "gather_grad", "ViewKernel", "expand_as", "broadcast_to"]


class ViewKernel:
    name: str
    input_names: tuple[str, ...]
    def __call__(self, *inputs: Any, **attrs: Any) -> DenseTensor: ...
    def error(self, status: int, shapes: list[list[int]], ints: list[int]) -> Exception: ...

#: ``gather(x, index int32/int64, axis=0)`` as ``numpy.take``: output shape
#: ``x.shape[:axis] + index.shape + x.shape[axis+1:]``; any dtype; an index outside
#: ``[-n, n)`` raises ValueError naming the op.
gather: CKernel
#: ``gather_grad(x, index, dout, axis=0) -> dx``: zeros like x with dout added at the
#: gathered positions (float32, float64).
gather_grad: CKernel
#: ``expand_as(x, y)``: x broadcast to y's shape (y's values are not read), a view.
expand_as: ViewKernel
#: ``broadcast_to(x, shape=)``: x broadcast to `shape` (``-1`` keeps x's dim), a view.
broadcast_to: ViewKernel
