"""Searching and selecting (PaddlePaddle's ``paddle.tensor.search``): argmax, argmin,
topk, where, nonzero. Each is also a Tensor method (``x.argmax(axis=1)``).

>>> import fastop
>>> x = fastop.to_tensor([[1.0, 5.0, 2.0], [7.0, 0.0, 3.0]])
>>> x.argmax(axis=1).tolist(), fastop.argmin(x).item()
([1, 0], 4)
>>> values, indices = fastop.topk(x, k=2)
>>> values.tolist(), indices.tolist()
([[5.0, 2.0], [7.0, 3.0]], [[1, 2], [0, 2]])
"""
from __future__ import annotations

import numbers
from typing import Any

from fastop._core.storage import as_dtype
from fastop._tensor import Tensor
from fastop.tensor._common import tensor_methods
from fastop.ops.builtin._table import B

__all__ = ["argmax", "argmin", "topk", "where", "nonzero"]

_argmax = B.argmax
_argmin = B.argmin
_topk = B.topk
_where = B.where
_nonzero = B.nonzero
_cast = B.cast
_full_like = B.full_like
_slice = B.slice

_INDEX_DTYPES = ("int32", "int64")


def _index_dtype(where: str, dtype: Any) -> Any:
    dt = as_dtype(dtype)
    if dt.name not in _INDEX_DTYPES:
        raise ValueError(f"{where}: dtype must be int32 or int64, got {dt.name}")
    return dt


def _scalar_axis(where: str, x: Any, axis: Any) -> Any:
    """`axis`, except for a 0-D x, where PaddlePaddle takes axis 0 or -1 as its one
    position: then None (the whole tensor; the result is 0-D)."""
    if axis is None or len(x.shape) != 0:
        return axis
    if _as_int(where, "axis", axis) not in (0, -1):
        raise ValueError(f"{where}: x is 0-D, so axis must be 0, -1 or None; got {axis!r}")
    return None


def _as_int(where: str, name: str, value: Any) -> int:
    """An int argument that may come as a one-element Tensor (PaddlePaddle allows it)."""
    if isinstance(value, Tensor):
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{where}: {name} must be an int, got {value!r}")
    return int(value)


def argmax(x: Tensor, axis: int | None = None, keepdim: bool = False,
           dtype: Any = "int64", name: str | None = None) -> Tensor:
    """Index of the first maximum along `axis` (of the flattened x when None)."""
    dt = _index_dtype("argmax", dtype)
    out = _argmax(x, axis=_scalar_axis("argmax", x, axis), keepdim=keepdim)
    return out if dt.name == "int64" else _cast(out, dtype=dt)


def argmin(x: Tensor, axis: int | None = None, keepdim: bool = False,
           dtype: Any = "int64", name: str | None = None) -> Tensor:
    """Index of the first minimum along `axis` (of the flattened x when None)."""
    dt = _index_dtype("argmin", dtype)
    out = _argmin(x, axis=_scalar_axis("argmin", x, axis), keepdim=keepdim)
    return out if dt.name == "int64" else _cast(out, dtype=dt)


def topk(x: Tensor, k: int | Tensor, axis: int | None = None, largest: bool = True,
         sorted: bool = True, name: str | None = None) -> tuple[Tensor, Tensor]:  # noqa: A002
    """The `k` largest (or smallest) values along `axis` (default the last) and their
    int64 indices, in order; ties keep index order."""
    k = _as_int("topk", "k", k)
    return _topk(x, k=k, axis=-1 if axis is None else axis, largest=bool(largest),
                 sorted=bool(sorted))


def _scalar_like(value: Any, like: Any) -> Any:
    """A Python number as a tensor of `like`'s dtype (broadcasts against it)."""
    ref = _slice(like, axes=list(range(len(like.shape))), starts=[0] * len(like.shape),
                 ends=[1] * len(like.shape)) if like.shape else like
    return _full_like(ref, fill_value=value)


def where(condition: Tensor, x: Any = None, y: Any = None,
          name: str | None = None) -> Any:
    """Elements of `x` where `condition` holds, of `y` elsewhere (all three broadcast;
    a number takes the other operand's dtype, two numbers int64 or float32). ``where(condition)`` alone is ``nonzero(condition,
    as_tuple=True)``."""
    if x is None and y is None:
        return nonzero(condition, as_tuple=True)
    if x is None or y is None:
        raise ValueError("where: give both x and y, or neither")
    x_number, y_number = (isinstance(v, numbers.Number) for v in (x, y))
    if x_number and y_number:          # ints: int64; otherwise the default float32
        ints = all(isinstance(v, numbers.Integral) for v in (x, y))
        ref = _cast(condition, dtype="int64" if ints else "float32")
        x, y = _scalar_like(x, ref), _scalar_like(y, ref)
    elif x_number:
        x = _scalar_like(x, y)
    elif y_number:
        y = _scalar_like(y, x)
    return _where(condition, x, y)


def nonzero(x: Tensor, as_tuple: bool = False) -> Any:
    """int64 coordinates of the nonzero elements: ``[count, ndim]``, or with
    `as_tuple` one ``[count, 1]`` tensor per dim."""
    coords = _nonzero(x)
    if not as_tuple:
        return coords
    return tuple(_slice(coords, axes=[1], starts=[d], ends=[d + 1])
                 for d in range(len(x.shape)))


tensor_methods({"argmax": argmax, "argmin": argmin, "topk": topk, "where": where,
             "nonzero": nonzero})
