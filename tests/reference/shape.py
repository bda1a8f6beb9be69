"""numpy twins of the shape ops (:mod:`fastop.ops.builtin.shape`,
:mod:`fastop._core.shape_ops`). They return numpy views or copies as numpy does."""
from __future__ import annotations

from typing import Sequence

import numpy as np

__all__ = ["reshape", "transpose", "concat", "slice", "slice_grad", "gather", "gather_grad",
           "squeeze", "unsqueeze"]

_slice = slice


def reshape(x: np.ndarray, shape: Sequence[int]) -> np.ndarray:
    """PaddlePaddle's reshape: 0 copies x's dim at that position, one -1 is inferred."""
    return np.reshape(x, [x.shape[i] if s == 0 else s for i, s in enumerate(shape)])


def transpose(x: np.ndarray, perm: Sequence[int]) -> np.ndarray:
    return np.transpose(x, perm)


def concat(xs: Sequence[np.ndarray], axis: int = 0) -> np.ndarray:
    return np.concatenate(xs, axis=axis)


def _index(ndim: int, axes, starts, ends, strides) -> tuple:
    key = [_slice(None)] * ndim
    for i, a in enumerate(axes):
        key[a] = _slice(starts[i], ends[i], strides[i] if strides else 1)
    return tuple(key)


def slice(x: np.ndarray, axes: Sequence[int], starts: Sequence[int], ends: Sequence[int],
          strides: Sequence[int] = (), decrease_axis: Sequence[int] = ()) -> np.ndarray:
    """x[start:end:stride] along each of `axes` (Python slice semantics), with the
    axes of `decrease_axis` (each of length 1 then) dropped."""
    out = x[_index(x.ndim, axes, starts, ends, strides)]
    return out.squeeze(axis=tuple(decrease_axis)) if len(decrease_axis) else out


def slice_grad(x: np.ndarray, dy: np.ndarray, axes, starts, ends, strides=()) -> np.ndarray:
    """Zeros like x with dy written where slice took its values."""
    dx = np.zeros_like(x)
    dx[_index(x.ndim, axes, starts, ends, strides)] = dy
    return dx


def gather(x: np.ndarray, index: np.ndarray, axis: int = 0) -> np.ndarray:
    return np.take(x, index, axis=axis)


def gather_grad(x: np.ndarray, index: np.ndarray, dout: np.ndarray, axis: int = 0) -> np.ndarray:
    """Zeros like x, plus dout scattered back (repeated indices accumulate)."""
    axis = axis % x.ndim
    dx = np.zeros_like(x)
    moved = np.moveaxis(dout, list(range(axis, axis + index.ndim)), list(range(index.ndim)))
    np.add.at(np.moveaxis(dx, axis, 0), index, moved)
    return dx


def squeeze(x: np.ndarray, axis=None) -> np.ndarray:
    """Drop size-1 dims (all, or those among `axis`; other dims are kept as in Paddle)."""
    axes = range(x.ndim) if axis is None or axis == [] else \
        [axis] if isinstance(axis, int) else axis
    drop = tuple(sorted({a % x.ndim for a in axes if x.shape[a] == 1}))
    return np.squeeze(x, axis=drop)


def unsqueeze(x: np.ndarray, axis) -> np.ndarray:
    """Insert size-1 dims, one per entry of `axis`, in order (Paddle's semantics)."""
    out = x
    for a in [axis] if isinstance(axis, int) else axis:
        out = np.expand_dims(out, a if a >= 0 else a + out.ndim + 1)
    return out
