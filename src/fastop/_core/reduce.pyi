"""Reduction kernels (Cython): sum, mean, max, argmax, sum_to_shape.

Each is a :class:`~fastop._core.kernel.CKernel`; call it on a tensor or numpy array.
"""
from fastop._core.kernel import CKernel

__all__ = ["sum", "mean", "max", "argmax", "sum_to_shape"]

#: ``sum(x, axis=None|int|list, keepdim=False)`` (int32, int64, float32, float64;
#: the output keeps x's dtype; floats are summed pairwise like numpy).
sum: CKernel
#: ``mean(x, axis=None|int|list, keepdim=False)`` (float32, float64; NaN over nothing).
mean: CKernel
#: ``max(x, axis=None|int|list, keepdim=False)``; NaN wins; an empty reduction raises.
max: CKernel
#: ``argmax(x, axis=None|int, keepdim=False)``: int64 index of the first maximum
#: (flattened, C order, when axis is None).
argmax: CKernel
#: ``sum_to_shape(x, shape=list)``: sum x down to a shape it broadcasts from (the
#: gradient of a broadcast); ``-1`` in ``shape`` keeps x's dim.
sum_to_shape: CKernel
