"""numpy twins of the reduction kernels (:mod:`fastop._core.reduce`) and of
``broadcast_to``."""
from __future__ import annotations

from typing import Sequence

import numpy as np

__all__ = ["sum", "mean", "max", "argmax", "sum_to_shape", "broadcast_to"]

_builtin_sum = sum


def _axes(axis: int | Sequence[int] | None) -> tuple[int, ...] | None:
    """fastop's axis attribute as numpy's: None or [] reduce everything."""
    if axis is None:
        return None
    if isinstance(axis, (int, np.integer)):
        return (int(axis),)
    return tuple(int(a) for a in axis) or None


def sum(x: np.ndarray, axis=None, keepdim: bool = False) -> np.ndarray:
    """Sum in x's dtype, int32 and bool in int64 (PaddlePaddle's rule; int64 and the
    narrow integers wrap like numpy's)."""
    dtype = np.int64 if x.dtype in (np.int32, np.bool_) else x.dtype
    return np.asarray(np.sum(x, axis=_axes(axis), keepdims=keepdim, dtype=dtype))


def mean(x: np.ndarray, axis=None, keepdim: bool = False) -> np.ndarray:
    """Mean in x's dtype; NaN over zero elements."""
    axes = _axes(axis)
    count = x.size if axes is None else int(np.prod([x.shape[a] for a in axes]))
    total = np.sum(x, axis=axes, keepdims=keepdim, dtype=x.dtype)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.asarray(total / x.dtype.type(count) if count else total * np.nan,
                          dtype=x.dtype)


def max(x: np.ndarray, axis=None, keepdim: bool = False) -> np.ndarray:
    """Maximum; NaN wins; raises ValueError over zero elements."""
    return np.asarray(np.max(x, axis=_axes(axis), keepdims=keepdim))


def argmax(x: np.ndarray, axis: int | None = None, keepdim: bool = False) -> np.ndarray:
    """int64 index of the first maximum (first NaN); flattened when axis is None."""
    return np.asarray(np.argmax(x, axis=axis, keepdims=keepdim), dtype=np.int64)


def sum_to_shape(x: np.ndarray, shape: Sequence[int]) -> np.ndarray:
    """Sum x down to `shape` (x must broadcast from it; -1 in shape keeps x's dim)."""
    lead = x.ndim - len(shape)
    if lead < 0:
        raise ValueError(f"sum_to_shape: cannot sum shape {list(x.shape)} to {list(shape)}")
    target = [x.shape[lead + i] if s == -1 else s for i, s in enumerate(shape)]
    axes = tuple(range(lead)) + tuple(
        lead + i for i, s in enumerate(target) if s == 1 and x.shape[lead + i] != 1)
    if any(s not in (1, x.shape[lead + i]) for i, s in enumerate(target)):
        raise ValueError(f"sum_to_shape: cannot sum shape {list(x.shape)} to {list(shape)}")
    return np.sum(x, axis=axes, dtype=x.dtype).reshape(target)


def broadcast_to(x: np.ndarray, shape: Sequence[int]) -> np.ndarray:
    """numpy's broadcast_to; -1 in shape keeps x's (right-aligned) dim."""
    lead = len(shape) - x.ndim
    target = [x.shape[i - lead] if s == -1 and i >= lead else s for i, s in enumerate(shape)]
    return np.broadcast_to(x, target)
