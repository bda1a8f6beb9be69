"""Changing shapes and joining tensors (PaddlePaddle's ``paddle.tensor.manipulation``)."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastop._tensor import Tensor
from fastop.ops._dispatch import dispatch
from fastop.tensor._common import ShapeLike, _op, _shape

__all__ = ["reshape", "transpose", "concat"]


def reshape(x: Tensor, shape: ShapeLike, name: str | None = None) -> Tensor:
    """The values in a new shape (one -1 is inferred)."""
    return dispatch(_op("reshape"), (x,), {"shape": _shape(shape)})


def transpose(x: Tensor, perm: Sequence[int], name: str | None = None) -> Tensor:
    """The axes permuted by `perm`."""
    return dispatch(_op("transpose"), (x,), {"perm": perm})


def concat(x: Sequence[Tensor], axis: int = 0, name: str | None = None) -> Tensor:
    """Tensors joined along `axis`."""
    x = list(x) if isinstance(x, tuple) else x    # the registry checks the rest
    return dispatch(_op("concat"), (x,), {"axis": axis})
