"""Axis arguments of the Python-kernel reductions and scans (``math``, ``search``,
``logic`` families): checked once, with errors naming the op."""
from __future__ import annotations

import operator
from typing import Any, Sequence

from fastop.ops._registry import TensorMeta

__all__ = ["normalize_axes", "normalize_axis", "reduced_meta", "broadcast_meta"]


def normalize_axis(op: str, ndim: int, axis: Any) -> int:
    """One axis in [-ndim, ndim) as a non-negative int (a 0-d tensor takes 0 or -1)."""
    try:
        a = operator.index(axis)
    except TypeError:
        raise TypeError(f"{op}: axis must be an integer, got {axis!r}") from None
    n = max(ndim, 1)
    if not -n <= a < n:
        raise ValueError(f"{op}: axis {a} is out of range for a tensor of {ndim} dims "
                         f"(expected [-{n}, {n}))")
    return a + n if a < 0 else a


def normalize_axes(op: str, ndim: int, axis: Any) -> tuple[int, ...]:
    """Sorted non-negative axes: None or [] means every axis; each axis once."""
    if axis is None or (isinstance(axis, (list, tuple)) and not axis):
        return tuple(range(ndim))
    items = list(axis) if isinstance(axis, (list, tuple)) else [axis]
    axes = [normalize_axis(op, ndim, a) for a in items]
    if len(set(axes)) != len(axes):
        raise ValueError(f"{op}: axis {list(items)} names an axis twice")
    return tuple(sorted(a for a in axes if a < ndim))


def reduced_meta(op: str, x: TensorMeta, axis: Any, keepdim: bool, dtype: Any = None
                 ) -> TensorMeta:
    """The meta of a reduction of x over `axis`."""
    axes = normalize_axes(op, x.ndim, axis)
    shape = [1 if i in axes else d for i, d in enumerate(x.shape)] if keepdim else \
        [d for i, d in enumerate(x.shape) if i not in axes]
    return TensorMeta(shape, x.dtype if dtype is None else dtype)


def broadcast_meta(op: str, a: Sequence[int | None], b: Sequence[int | None]
                   ) -> list[int | None]:
    """numpy's broadcast of two shapes (None: unknown)."""
    nd = max(len(a), len(b))
    out: list[int | None] = []
    for i in range(nd):
        da = a[i - nd + len(a)] if i >= nd - len(a) else 1
        db = b[i - nd + len(b)] if i >= nd - len(b) else 1
        if da == 1:
            out.append(db)
        elif db == 1 or da == db or db is None:
            out.append(da)
        elif da is None:
            out.append(db)
        else:
            raise ValueError(f"{op}: shapes {list(a)} and {list(b)} do not broadcast")
    return out
