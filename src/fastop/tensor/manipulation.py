"""Changing shapes and joining tensors (PaddlePaddle's ``paddle.tensor.manipulation``)."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastop._tensor import Tensor
from fastop.ops.builtin._table import B
from fastop.tensor._common import ShapeLike, shape_list

__all__ = ["reshape", "transpose", "concat"]


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
