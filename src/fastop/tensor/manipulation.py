"""Changing shapes and joining tensors (PaddlePaddle's ``paddle.tensor.manipulation``)."""
from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any

from fastop._core.storage import as_dtype
from fastop._tensor import Tensor
from fastop.ops.builtin._table import B
from fastop.tensor._common import ShapeLike, shape_list, tensor_methods

__all__ = ["reshape", "transpose", "concat",
           # stacking, splitting, squeezing, gathering, casting (section at the end)
           "stack", "split", "chunk", "squeeze", "unsqueeze", "gather", "take_along_axis",
           "cast", "flatten", "clone", "broadcast_to", "expand", "expand_as",
           # writing rows and masked elements (section at the end)
           "scatter", "masked_fill"]


def reshape(x: Tensor, shape: ShapeLike, name: str | None = None) -> Tensor:
    """The values in a new shape (a view where the layout allows): 0 copies x's dim,
    one -1 is inferred."""
    return B.reshape(x, shape=shape_list(shape))


def transpose(x: Tensor, perm: Sequence[int] | None = None, name: str | None = None) -> Tensor:
    """The axes permuted by `perm` (reversed when None); a view."""
    return B.transpose(x, perm=list(range(x.ndim - 1, -1, -1)) if perm is None else perm)


def concat(x: Sequence[Tensor], axis: int = 0, name: str | None = None) -> Tensor:
    """Tensors joined along `axis`."""
    x = list(x) if isinstance(x, tuple) else x    # the registry checks the rest
    return B.concat(x, axis=axis)



# -- stacking, splitting, squeezing, gathering, casting ---------------------------------



def _axis_arg(where: str, axis: Any, ndim: int) -> int:
    """An axis (an int or a one-element Tensor) as a non-negative int < ndim."""
    if isinstance(axis, Tensor):
        axis = axis.item()
    if isinstance(axis, bool) or not isinstance(axis, numbers.Integral):
        raise TypeError(f"{where}: axis must be an int, got {axis!r}")
    if not -ndim <= axis < ndim:
        raise ValueError(f"{where}: axis {axis} is out of range for {ndim} dims")
    return int(axis) % ndim


def _axes_arg(axis: Any) -> Any:
    """An axis argument that may be a Tensor, as ints."""
    if isinstance(axis, Tensor):
        values = axis.tolist()
        return values if isinstance(values, list) else int(values)
    return axis


def stack(x: Sequence[Tensor], axis: int = 0, name: str | None = None) -> Tensor:
    """Tensors of one shape joined along a new axis."""
    if not isinstance(x, (list, tuple)) or not x:
        raise ValueError(f"stack: x must be a non-empty list of tensors, got {x!r:.60}")
    shapes = [list(t.shape) for t in x]
    if any(s != shapes[0] for s in shapes[1:]):
        raise ValueError(f"stack: all tensors need one shape, got {shapes}")
    axis = _axis_arg("stack", axis, len(shapes[0]) + 1)
    return B.concat([B.unsqueeze(t, axis=[axis]) for t in x], axis=axis)


def _section_sizes(where: str, length: Any, num_or_sections: Any) -> list[int]:
    """Sizes of the pieces of a dim of `length`: equal parts, or the given sizes (one
    may be -1: the rest)."""
    if isinstance(num_or_sections, Tensor):
        num_or_sections = num_or_sections.tolist()
    if isinstance(num_or_sections, numbers.Integral) and not isinstance(num_or_sections,
                                                                          bool):
        parts = int(num_or_sections)
        if parts <= 0 or length is None or length < 0 or length % parts:
            raise ValueError(f"{where}: cannot split a dim of size {length} into "
                             f"{num_or_sections} equal parts")
        return [length // parts] * parts
    sizes = [s.item() if isinstance(s, Tensor) else s for s in num_or_sections]
    if any(isinstance(s, bool) or not isinstance(s, numbers.Integral) for s in sizes) or \
            sizes.count(-1) > 1 or any(s < -1 for s in sizes):
        raise ValueError(f"{where}: sections must be ints (one may be -1), got "
                         f"{num_or_sections!r}")
    if -1 in sizes:
        if length is None or length < 0:
            raise ValueError(f"{where}: a -1 section needs the dim's size, which is "
                             f"unknown")
        sizes[sizes.index(-1)] = length - (sum(sizes) + 1)
    if length is not None and length >= 0 and (sum(sizes) != length or min(sizes) < 0):
        raise ValueError(f"{where}: sections {list(num_or_sections)} do not add up to "
                         f"the dim's size {length}")
    return [int(s) for s in sizes]


def split(x: Tensor, num_or_sections: int | Sequence[int], axis: int = 0,
          name: str | None = None) -> list[Tensor]:
    """x cut along `axis` into equal parts (an int) or parts of the given sizes (one
    may be -1); the parts are views."""
    axis = _axis_arg("split", axis, len(x.shape))
    sizes = _section_sizes("split", x.shape[axis], num_or_sections)
    parts, start = [], 0
    for size in sizes:
        parts.append(B.slice(x, axes=[axis], starts=[start], ends=[start + size]))
        start += size
    return parts


def chunk(x: Tensor, chunks: int, axis: int = 0, name: str | None = None) -> list[Tensor]:
    """x cut along `axis` into `chunks` equal parts."""
    return split(x, chunks, axis)


def squeeze(x: Tensor, axis: Any = None, name: str | None = None) -> Tensor:
    """x without its size-1 dims (all, or those among `axis`)."""
    return B.squeeze(x, axis=_axes_arg(axis))


def unsqueeze(x: Tensor, axis: Any, name: str | None = None) -> Tensor:
    """x with size-1 dims inserted at `axis` (an int or a list, in order)."""
    return B.unsqueeze(x, axis=_axes_arg(axis))


def gather(x: Tensor, index: Tensor, axis: Any = None, name: str | None = None) -> Tensor:
    """Entries of x along `axis` (default 0) at the int `index` (numpy.take)."""
    return B.gather(x, index, axis=0 if axis is None else int(_axes_arg(axis)))


def take_along_axis(arr: Tensor, indices: Tensor, axis: int,
                    name: str | None = None) -> Tensor:
    """numpy.take_along_axis: arr's elements at `indices` along `axis`."""
    return B.take_along_axis(arr, indices, axis=int(_axes_arg(axis)))


def cast(x: Tensor, dtype: Any) -> Tensor:
    """x converted to `dtype` (a copy)."""
    return B.cast(x, dtype=as_dtype(dtype))


def flatten(x: Tensor, start_axis: int = 0, stop_axis: int = -1,
            name: str | None = None) -> Tensor:
    """The dims `start_axis`..`stop_axis` merged into one (a view of contiguous x)."""
    shape = list(x.shape)
    nd = len(shape)
    if nd == 0:
        return B.reshape(x, shape=[1])
    start, stop = _axis_arg("flatten", start_axis, nd), _axis_arg("flatten", stop_axis, nd)
    if start > stop:
        raise ValueError(f"flatten: start_axis ({start_axis}) must not come after "
                         f"stop_axis ({stop_axis}) for a tensor of {nd} dims")
    known = [-1 if d is None or d < 0 else d for d in shape]
    middle = known[start:stop + 1]
    merged = -1 if -1 in middle else math.prod(middle)
    new = known[:start] + [merged] + known[stop + 1:]
    if new.count(-1) > 1:
        raise ValueError(f"flatten: cannot flatten shape {shape} with several unknown dims")
    return B.reshape(x, shape=new)


def broadcast_to(x: Tensor, shape: ShapeLike, name: str | None = None) -> Tensor:
    """x broadcast to `shape` (numpy's rules; -1 keeps x's dim): a read-only view."""
    return B.broadcast_to(x, shape=shape_list(shape))


def expand(x: Tensor, shape: ShapeLike, name: str | None = None) -> Tensor:
    """PaddlePaddle's name for :func:`broadcast_to`."""
    return B.broadcast_to(x, shape=shape_list(shape))


def expand_as(x: Tensor, y: Tensor, name: str | None = None) -> Tensor:
    """x broadcast to y's shape (a read-only view; y's values are not used)."""
    return B.expand_as(x, y)


def clone(x: Tensor, name: str | None = None) -> Tensor:
    """A copy of x that stays in the graph (its gradient flows back to x)."""
    return B.cast(x, dtype=as_dtype(x.dtype))


tensor_methods({"split": split, "chunk": chunk, "squeeze": squeeze, "unsqueeze": unsqueeze,
                "gather": gather, "take_along_axis": take_along_axis, "flatten": flatten,
                "clone": clone, "expand": expand, "expand_as": expand_as})


# ----------------------------------------------------- writing rows and masked elements

def scatter(x: Tensor, index: Tensor, updates: Tensor, overwrite: bool = True,
            name: str | None = None) -> Tensor:
    """x with rows (along axis 0) replaced: ``out[index[i]] = updates[i]`` for a 1-D
    int32/int64 `index` (a 0-D index replaces one row by an updates of x.shape[1:]);
    repeated indices: the last wins, or with ``overwrite=False`` the rows are zeroed and
    every update is added (PaddlePaddle's ``scatter``)."""
    return B.scatter(x, index, updates, overwrite=bool(overwrite))


def masked_fill(x: Tensor, mask: Tensor, value: Any, name: str | None = None) -> Tensor:
    """x with `value` where the bool `mask` (broadcasting with x) holds: PaddlePaddle's
    ``masked_fill``, ``where(mask, value, x)``. `value` is a number (taken in x's dtype)
    or a tensor (0-D, or broadcasting; cast to x's dtype); x's gradient is zero where
    mask holds, a tensor value's is the sum of the gradient over the masked elements."""
    mask_dtype = getattr(mask, "dtype", None)
    if mask_dtype is None or as_dtype(mask_dtype).name != "bool":
        got = as_dtype(mask_dtype).name if mask_dtype is not None else type(mask).__name__
        raise TypeError(f"masked_fill: mask must be a bool Tensor, got {got}")
    dtype = as_dtype(x.dtype)
    if isinstance(value, (numbers.Number, bool)):
        value = B.full(shape=[], fill_value=value, dtype=dtype)
    elif hasattr(value, "shape") and hasattr(value, "dtype"):
        if as_dtype(value.dtype) != dtype:
            value = B.cast(value, dtype=dtype)
    else:
        raise TypeError(f"masked_fill: value must be a number or a Tensor, got "
                        f"{type(value).__name__}")
    return B.where(mask, value, x)


tensor_methods({"scatter": scatter, "masked_fill": masked_fill})
