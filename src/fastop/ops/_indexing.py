"""``x[key]`` as registry ops, for eager Tensors and static Variables alike.

Basic indexing (ints, slices, ``None``, ``...``) is one ``fastop::slice`` view (ints are
its ``decrease_axis``) and, for ``None``, one ``fastop::unsqueeze``. One integer array
(a list, numpy array or integer tensor) on one axis, with basic entries elsewhere, is a
``fastop::gather`` along that axis after the basic part. Anything else numpy's advanced
indexing allows (several arrays, boolean masks) is ``fastop::index``. Every one of them
has a gradient rule, so indexing is differentiable in both modes.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from fastop._core.storage import DenseTensor
from fastop._core.views import SLICE_END
from fastop.ops.builtin._table import B

__all__ = ["getitem"]


def getitem(x: Any, key: Any) -> Any:
    """``x[key]`` for a Tensor or a static Variable (see the module docstring)."""
    items = list(key) if isinstance(key, tuple) else [key]
    arrays = [i for i, k in enumerate(items) if _is_array(k)]
    if not arrays:
        return _basic(x, items)
    if len(arrays) == 1 and _gatherable(items, arrays[0]):
        items = _expand_ellipsis(items, x.ndim)
        position = next(i for i, k in enumerate(items) if _is_array(k))
        basic = items[:position] + [slice(None)] + items[position + 1:]
        # the array's axis in the basic result: the dims kept (or added) before it
        axis = sum(1 for k in items[:position] if not _is_int(k))
        index = _index_tensor(items[position])
        return B.gather(_basic(x, basic), index, axis=axis)
    return B.index(x, key=tuple(_frozen(k) for k in items))


def _expand_ellipsis(items: list[Any], ndim: int) -> list[Any]:
    given = sum(1 for k in items if k is not None and k is not Ellipsis)
    if given > ndim:
        raise IndexError(f"too many indices ({given}) for a tensor of {ndim} dims")
    if sum(1 for k in items if k is Ellipsis) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    expanded: list[Any] = []
    for k in items:
        if k is Ellipsis:
            expanded.extend([slice(None)] * (ndim - given))
        else:
            expanded.append(k)
    return expanded


def _basic(x: Any, items: list[Any]) -> Any:
    expanded = _expand_ellipsis(items, x.ndim)
    axes, starts, ends, strides, decrease, new_axes = [], [], [], [], [], []
    axis = out = 0
    for k in expanded:
        if k is None:
            new_axes.append(out)
            out += 1
        elif _is_int(k):
            axes.append(axis)
            starts.append(int(k))
            ends.append(int(k) + 1 if int(k) != -1 else SLICE_END)
            strides.append(1)
            decrease.append(axis)
            axis += 1
        elif isinstance(k, slice):
            step = 1 if k.step is None else int(k.step)
            if step == 0:
                raise ValueError("slice step cannot be zero")
            if k != slice(None):
                axes.append(axis)
                starts.append(_bound(k.start, step, start=True))
                ends.append(_bound(k.stop, step, start=False))
                strides.append(step)
            axis += 1
            out += 1
        else:
            raise IndexError(f"unsupported index {k!r}: use ints, slices, None, ..., or "
                             f"integer/boolean arrays")
    result = x
    if axes or not new_axes:
        result = B.slice(x, axes=axes, starts=starts, ends=ends, strides=strides,
                         decrease_axis=decrease)
    if new_axes:
        result = B.unsqueeze(result, axis=new_axes)
    return result


def _bound(value: Any, step: int, start: bool) -> int:
    """A slice bound as the slice op takes it (an open end past any dim)."""
    if value is None:
        if step > 0:
            return 0 if start else SLICE_END
        return SLICE_END if start else -SLICE_END
    return int(value)


def _is_int(k: Any) -> bool:
    return isinstance(k, (int, np.integer)) and not isinstance(k, (bool, np.bool_))


def _is_array(k: Any) -> bool:
    if isinstance(k, (list, np.ndarray, DenseTensor)) or isinstance(k, (bool, np.bool_)):
        return True
    return hasattr(k, "block") and hasattr(k, "dtype")      # a static Variable


def _gatherable(items: list[Any], position: int) -> bool:
    """One integer array whose gather matches numpy: no boolean mask, and no int index
    separated from it by a slice (numpy then moves the array's dims to the front)."""
    k = items[position]
    dtype = getattr(k, "dtype", None)
    if isinstance(k, (bool, np.bool_)) or (
            dtype is not None and getattr(dtype, "name", str(dtype)) == "bool"):
        return False
    if isinstance(k, list) and np.asarray(k).dtype.kind != "i":
        return False
    ints = [i for i, e in enumerate(items) if _is_int(e)]
    if not ints:
        return True
    span = range(min(ints + [position]), max(ints + [position]) + 1)
    return all(_is_int(items[i]) or i == position for i in span)


def _index_tensor(k: Any) -> Any:
    """An integer index as a gather input: a copy for arrays, lists and tensors (the
    gradient must scatter to the positions read now, whatever is later written into the
    caller's index), a static Variable as it is."""
    if isinstance(k, (list, np.ndarray, DenseTensor)):
        return np.array(k, dtype=np.int64 if isinstance(k, list) else None)
    return k


def _frozen(k: Any) -> Any:
    """A key entry as the index op's attribute: arrays copied (see _index_tensor)."""
    if isinstance(k, DenseTensor):
        return np.array(k, copy=True)
    if isinstance(k, (list, np.ndarray)):
        return np.array(k)
    if hasattr(k, "block"):
        raise IndexError(f"indexing a static Variable by Variable '{k.name}' works for one "
                         f"integer index on one axis (a gather); this key needs numpy's "
                         f"general advanced indexing")
    return k
