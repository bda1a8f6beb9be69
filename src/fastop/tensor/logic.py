"""Comparisons and logic (PaddlePaddle's ``paddle.tensor.logic``): elementwise
comparisons, equal_all, logical and/or/xor/not. Each is also a Tensor method; all
return bool tensors.

>>> import fastop
>>> x, y = fastop.to_tensor([1, 2, 3]), fastop.to_tensor([1, 0, 3])
>>> x.equal(y).tolist(), fastop.equal_all(x, y).item()
([True, False, True], False)
>>> fastop.logical_and(x > 1, y > 0).tolist()
[False, False, True]
"""
from __future__ import annotations

from typing import Any

import numpy as np

from fastop._tensor import Tensor
from fastop.tensor._common import tensor_methods
from fastop.ops.builtin._table import B

__all__ = ["equal", "not_equal", "greater_than", "greater_equal", "less_than",
           "less_equal", "equal_all", "logical_and", "logical_or", "logical_xor",
           "logical_not"]


def equal(x: Tensor, y: Any, name: str | None = None) -> Tensor:
    """x == y elementwise (broadcasting)."""
    return B.equal(x, y)


def not_equal(x: Tensor, y: Any, name: str | None = None) -> Tensor:
    """x != y elementwise (broadcasting)."""
    return B.not_equal(x, y)


def greater_than(x: Tensor, y: Any, name: str | None = None) -> Tensor:
    """x > y elementwise (broadcasting)."""
    return B.greater_than(x, y)


def greater_equal(x: Tensor, y: Any, name: str | None = None) -> Tensor:
    """x >= y elementwise (broadcasting)."""
    return B.greater_equal(x, y)


def less_than(x: Tensor, y: Any, name: str | None = None) -> Tensor:
    """x < y elementwise (broadcasting)."""
    return B.less_than(x, y)


def less_equal(x: Tensor, y: Any, name: str | None = None) -> Tensor:
    """x <= y elementwise (broadcasting)."""
    return B.less_equal(x, y)


def equal_all(x: Tensor, y: Tensor, name: str | None = None) -> Tensor:
    """A 0-d bool tensor: whether x and y have one shape and equal elements."""
    if list(x.shape) != list(y.shape):
        return B.all(np.array(False))     # a constant in static mode
    return B.all(B.equal(x, y))


def logical_and(x: Tensor, y: Tensor, out: Any = None, name: str | None = None) -> Tensor:
    """x and y elementwise (nonzero counts as True; broadcasting)."""
    return B.logical_and(x, y)


def logical_or(x: Tensor, y: Tensor, out: Any = None, name: str | None = None) -> Tensor:
    """x or y elementwise (nonzero counts as True; broadcasting)."""
    return B.logical_or(x, y)


def logical_xor(x: Tensor, y: Tensor, out: Any = None, name: str | None = None) -> Tensor:
    """x xor y elementwise (nonzero counts as True; broadcasting)."""
    return B.logical_xor(x, y)


def logical_not(x: Tensor, out: Any = None, name: str | None = None) -> Tensor:
    """not x elementwise (nonzero counts as True)."""
    return B.logical_not(x)


tensor_methods({name: globals()[name] for name in __all__})
