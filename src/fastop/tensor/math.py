"""Elementwise math, reductions and matmul (PaddlePaddle's ``paddle.tensor.math`` and
``paddle.tensor.linalg``): each function is a registry op called through the one
dispatch entry, and a Tensor method."""
from __future__ import annotations

from typing import Any

from fastop._tensor import Tensor
from fastop.ops.builtin._table import B

__all__ = ["tanh", "exp", "log", "sqrt", "square", "abs", "relu", "sigmoid", "matmul", "add",
           "subtract", "multiply", "divide", "mean", "sum", "max"]


def tanh(x: Tensor, name: str | None = None) -> Tensor:
    """Elementwise hyperbolic tangent."""
    return B.tanh(x)


def exp(x: Tensor, name: str | None = None) -> Tensor:
    """Elementwise e**x."""
    return B.exp(x)


def log(x: Tensor, name: str | None = None) -> Tensor:
    """Elementwise natural logarithm."""
    return B.log(x)


def sqrt(x: Tensor, name: str | None = None) -> Tensor:
    """Elementwise square root."""
    return B.sqrt(x)


def square(x: Tensor, name: str | None = None) -> Tensor:
    """Elementwise x*x."""
    return B.square(x)


def abs(x: Tensor, name: str | None = None) -> Tensor:  # noqa: A001 (PaddlePaddle's name)
    """Elementwise |x|."""
    return B.abs(x)


def relu(x: Tensor, name: str | None = None) -> Tensor:
    """Elementwise max(x, 0)."""
    return B.relu(x)


def sigmoid(x: Tensor, name: str | None = None) -> Tensor:
    """Elementwise 1 / (1 + exp(-x))."""
    return B.sigmoid(x)


def add(x: Tensor, y: Tensor, name: str | None = None) -> Tensor:
    """x + y, broadcasting like numpy."""
    return B.add(x, y)


def subtract(x: Tensor, y: Tensor, name: str | None = None) -> Tensor:
    """x - y, broadcasting like numpy."""
    return B.subtract(x, y)


def multiply(x: Tensor, y: Tensor, name: str | None = None) -> Tensor:
    """x * y, broadcasting like numpy."""
    return B.multiply(x, y)


def divide(x: Tensor, y: Tensor, name: str | None = None) -> Tensor:
    """x / y, broadcasting like numpy; true division (integers compute in float32)."""
    return B.divide(x, y)


def matmul(x: Tensor, y: Tensor, transpose_x: bool = False, transpose_y: bool = False,
           name: str | None = None) -> Tensor:
    """Product of the last two dims (transposed as the flags say); batch dims broadcast."""
    if transpose_x or transpose_y:
        return B.matmul(x, y, transpose_x=transpose_x, transpose_y=transpose_y)
    return B.matmul(x, y)


def mean(x: Tensor, axis: Any = None, keepdim: bool = False,
         name: str | None = None) -> Tensor:
    """Mean over `axis` (all axes when None)."""
    if axis is None and not keepdim:
        return B.mean(x)
    return B.mean(x, axis=axis, keepdim=keepdim)


def sum(x: Tensor, axis: Any = None, dtype: Any = None, keepdim: bool = False,  # noqa: A001
        name: str | None = None) -> Tensor:
    """Sum over `axis` (all axes when None), in `dtype` when given (x is cast first)."""
    if dtype is not None:
        x = B.cast(x, dtype=dtype)
    if axis is None and not keepdim:
        return B.sum(x)
    return B.sum(x, axis=axis, keepdim=keepdim)


def max(x: Tensor, axis: Any = None, keepdim: bool = False,  # noqa: A001
        name: str | None = None) -> Tensor:
    """Maximum over `axis` (all axes when None)."""
    if axis is None and not keepdim:
        return B.max(x)
    return B.max(x, axis=axis, keepdim=keepdim)
