"""Creating tensors: from data, filled, random, ranges (PaddlePaddle's ``paddle.tensor.creation``)."""
from __future__ import annotations

from typing import Any

import numpy as np

from fastop import _random
from fastop._core.storage import as_dtype
from fastop._tensor import Tensor, from_numpy_tensor as from_numpy, to_tensor
from fastop.ops._dispatch import current_mode, dispatch
from fastop.tensor._common import ShapeLike, _float_dtype, _op, _shape

__all__ = ["to_tensor", "from_numpy", "randn", "rand", "zeros", "ones", "full",
           "zeros_like", "ones_like", "full_like", "arange", "seed",
           # uninitialized tensors (section at the end)
           "empty", "empty_like"]


def seed(value: int) -> np.random.Generator:
    """Reset fastop's global random generator: runs using randn/rand/initializers become
    reproducible."""
    return _random.seed(value)


def randn(shape: ShapeLike, dtype: Any = None, name: str | None = None) -> Tensor:
    """Standard-normal samples (float32 unless dtype says otherwise)."""
    arr = _random.generator().standard_normal(_shape(shape), dtype=_float_dtype(dtype))
    return from_numpy(arr)


def rand(shape: ShapeLike, dtype: Any = None, name: str | None = None) -> Tensor:
    """Uniform samples in [0, 1) (float32 unless dtype says otherwise)."""
    arr = _random.generator().random(_shape(shape), dtype=_float_dtype(dtype))
    return from_numpy(arr)


def full(shape: ShapeLike, fill_value: Any, dtype: Any = None,
         name: str | None = None) -> Tensor:
    """A tensor of `shape` filled with fill_value (float32 unless dtype says otherwise).
    In static mode this appends the ``fastop::full`` op."""
    dtype = as_dtype("float32" if dtype is None else dtype)
    if current_mode() == "static":
        return dispatch(_op("full"), (), {"shape": _shape(shape),
                                          "fill_value": float(fill_value), "dtype": dtype})
    return from_numpy(np.full(_shape(shape), fill_value, dtype=dtype.numpy_dtype))


def zeros(shape: ShapeLike, dtype: Any = None, name: str | None = None) -> Tensor:
    return full(shape, 0, dtype)


def ones(shape: ShapeLike, dtype: Any = None, name: str | None = None) -> Tensor:
    return full(shape, 1, dtype)


def full_like(x: Tensor, fill_value: Any, dtype: Any = None,
              name: str | None = None) -> Tensor:
    return full(x.shape, fill_value, x.dtype if dtype is None else dtype)


def zeros_like(x: Tensor, dtype: Any = None, name: str | None = None) -> Tensor:
    return full_like(x, 0, dtype)


def ones_like(x: Tensor, dtype: Any = None, name: str | None = None) -> Tensor:
    return full_like(x, 1, dtype)


def arange(start: Any = 0, end: Any = None, step: Any = 1, dtype: Any = None,
           name: str | None = None) -> Tensor:
    """Evenly spaced values in [start, end): int64 for integer arguments, else float32."""
    if end is None:
        start, end = 0, start
    if dtype is None:
        ints = all(isinstance(v, (int, np.integer)) for v in (start, end, step))
        dtype = "int64" if ints else "float32"
    return from_numpy(np.arange(start, end, step, dtype=as_dtype(dtype).numpy_dtype))



# -- uninitialized tensors ------------------------------------------------------------------

def empty(shape: ShapeLike, dtype: Any = None, name: str | None = None) -> Tensor:
    """A tensor of `shape` whose values are not set (float32 unless dtype says
    otherwise): fastop's allocator without a fill. In static mode, the ``fastop::full``
    op (an executor slot must hold defined values)."""
    dtype = as_dtype("float32" if dtype is None else dtype)
    if current_mode() == "static":
        return full(shape, 0, dtype)
    return from_numpy(np.empty(_shape(shape), dtype=dtype.numpy_dtype))


def empty_like(x: Tensor, dtype: Any = None, name: str | None = None) -> Tensor:
    """An uninitialized tensor of x's shape (and dtype, unless given)."""
    return empty(x.shape, x.dtype if dtype is None else dtype)
