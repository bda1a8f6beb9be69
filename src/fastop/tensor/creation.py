"""Creating tensors: from data, filled, random, ranges (PaddlePaddle's
``paddle.tensor.creation``). Filled tensors are the ``fastop::full`` and
``fastop::full_like`` ops (so they work in static mode too); random and range tensors
are drawn with numpy from fastop's generator (``fastop.seed``)."""
from __future__ import annotations

from typing import Any

import numpy as np

from fastop import _random
from fastop._core.storage import as_dtype
from fastop._tensor import Tensor, from_numpy_tensor as from_numpy, to_tensor
from fastop.ops._dispatch import current_mode
from fastop.ops.builtin._table import B
from fastop.tensor._common import ShapeLike, shape_list

__all__ = ["to_tensor", "from_numpy", "randn", "rand", "zeros", "ones", "full",
           "zeros_like", "ones_like", "full_like", "arange", "seed",
           # uninitialized tensors (section at the end)
           "empty", "empty_like"]

_MAX_BYTES = 2 ** 63 - 1


def _new_shape(fn: str, shape: Any, dtype: Any) -> list[int]:
    """A new tensor's shape: dims >= 0 whose byte count fits the address space."""
    dims = shape_list(shape, f"fastop.{fn}: shape")
    if any(d < 0 for d in dims):
        raise ValueError(f"fastop.{fn}: shape must hold dims >= 0, got {dims}")
    nbytes = as_dtype(dtype).itemsize
    for d in dims:
        nbytes *= d
    if nbytes > _MAX_BYTES:
        raise ValueError(f"fastop.{fn}: shape {dims} of {as_dtype(dtype).name} is too big "
                         f"({nbytes} bytes)")
    return dims


def _float_dtype(fn: str, dtype: Any) -> np.dtype:
    dtype = as_dtype("float32" if dtype is None else dtype)
    if not dtype.is_floating:
        raise TypeError(f"fastop.{fn}: dtype must be float32 or float64, got {dtype.name}")
    return dtype.numpy_dtype


def seed(value: int) -> np.random.Generator:
    """Reset fastop's global random generator: runs using randn/rand/initializers become
    reproducible."""
    return _random.seed(value)


def randn(shape: ShapeLike, dtype: Any = None, name: str | None = None) -> Tensor:
    """Standard-normal samples (float32 unless dtype says otherwise)."""
    dtype = _float_dtype("randn", dtype)
    return from_numpy(_random.generator().standard_normal(_new_shape("randn", shape, dtype),
                                                          dtype=dtype))


def rand(shape: ShapeLike, dtype: Any = None, name: str | None = None) -> Tensor:
    """Uniform samples in [0, 1) (float32 unless dtype says otherwise)."""
    dtype = _float_dtype("rand", dtype)
    return from_numpy(_random.generator().random(_new_shape("rand", shape, dtype),
                                                 dtype=dtype))


def full(shape: ShapeLike, fill_value: Any, dtype: Any = None,
         name: str | None = None) -> Tensor:
    """A tensor of `shape` filled with fill_value (float32 unless dtype says otherwise):
    the op ``fastop::full``."""
    dtype = as_dtype("float32" if dtype is None else dtype)
    return B.full(shape=_new_shape("full", shape, dtype), fill_value=fill_value, dtype=dtype)


def zeros(shape: ShapeLike, dtype: Any = None, name: str | None = None) -> Tensor:
    """A tensor of `shape` filled with 0 (float32 unless dtype says otherwise)."""
    return full(shape, 0, dtype)


def ones(shape: ShapeLike, dtype: Any = None, name: str | None = None) -> Tensor:
    """A tensor of `shape` filled with 1 (float32 unless dtype says otherwise)."""
    return full(shape, 1, dtype)


def full_like(x: Tensor, fill_value: Any, dtype: Any = None,
              name: str | None = None) -> Tensor:
    """A tensor of x's shape (known at run time for a static Variable) and dtype (or
    `dtype`), filled with fill_value: the op ``fastop::full_like``."""
    if dtype is not None and as_dtype(dtype) != as_dtype(x.dtype):
        x = B.cast(x, dtype=dtype)
    return B.full_like(x, fill_value=fill_value)


def zeros_like(x: Tensor, dtype: Any = None, name: str | None = None) -> Tensor:
    return full_like(x, 0, dtype)


def ones_like(x: Tensor, dtype: Any = None, name: str | None = None) -> Tensor:
    return full_like(x, 1, dtype)


def arange(start: Any = 0, end: Any = None, step: Any = 1, dtype: Any = None,
           name: str | None = None) -> Tensor:
    """Evenly spaced values in [start, end): int64 for integer arguments, else float32."""
    if end is None:
        start, end = 0, start
    for label, value in (("start", start), ("end", end), ("step", step)):
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float,
                                                                         np.number)):
            raise TypeError(f"fastop.arange: {label} must be a number, got {value!r}")
    if step == 0:
        raise ValueError("fastop.arange: step must not be 0")
    if dtype is None:
        ints = all(isinstance(v, (int, np.integer)) for v in (start, end, step))
        dtype = "int64" if ints else "float32"
    dtype = as_dtype(dtype)
    count = max(0, int(np.ceil((end - start) / step)))
    _new_shape("arange", [count], dtype)
    return from_numpy(np.arange(start, end, step, dtype=dtype.numpy_dtype))



# -- uninitialized tensors ------------------------------------------------------------------

def empty(shape: ShapeLike, dtype: Any = None, name: str | None = None) -> Tensor:
    """A tensor of `shape` whose values are not set (float32 unless dtype says
    otherwise): fastop's allocator without a fill. In static mode, the ``fastop::full``
    op (an executor slot must hold defined values)."""
    dtype = as_dtype("float32" if dtype is None else dtype)
    if current_mode() == "static":
        return full(shape, 0, dtype)
    return from_numpy(np.empty(_new_shape("empty", shape, dtype), dtype=dtype.numpy_dtype))


def empty_like(x: Tensor, dtype: Any = None, name: str | None = None) -> Tensor:
    """An uninitialized tensor of x's shape (and dtype, unless given)."""
    return empty(x.shape, x.dtype if dtype is None else dtype)
