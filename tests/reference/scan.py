"""numpy twins of the numpy-kernel reductions and scans of
:mod:`fastop.ops.builtin.math` whose dtype rules matter: ``prod`` and ``cumsum``."""
from __future__ import annotations

import numpy as np

__all__ = ["prod", "cumsum"]


def prod(x: np.ndarray, axis=None, keepdim: bool = False) -> np.ndarray:
    """Product in x's dtype (PaddlePaddle keeps int32 here; its `dtype=` argument
    casts first); 1 over zero elements."""
    axes = None if axis is None or axis == [] else \
        (axis,) if isinstance(axis, int) else tuple(axis)
    return np.asarray(np.prod(x, axis=axes, keepdims=keepdim, dtype=x.dtype))


def cumsum(x: np.ndarray, axis: int, reverse: bool = False) -> np.ndarray:
    """Running sums in x's dtype, int32 in int64 (PaddlePaddle's default)."""
    dtype = np.int64 if x.dtype == np.int32 else x.dtype
    if x.ndim == 0:
        return x.astype(dtype)
    if reverse:
        return np.flip(np.cumsum(np.flip(x, axis), axis=axis, dtype=dtype), axis)
    return np.cumsum(x, axis=axis, dtype=dtype)
