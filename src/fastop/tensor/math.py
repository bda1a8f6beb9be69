"""Elementwise math, reductions and matmul (PaddlePaddle's ``paddle.tensor.math`` and
``paddle.tensor.linalg``): each function is a registry op called through the dispatcher."""
from __future__ import annotations

from typing import Any

from fastop._tensor import Tensor
from fastop.ops._dispatch import dispatch
from fastop.tensor._common import _op

__all__ = ["tanh", "exp", "log", "sqrt", "square", "abs", "relu", "sigmoid", "matmul", "add",
           "subtract", "multiply", "divide", "mean", "sum", "max"]


def tanh(x: Tensor, name: str | None = None) -> Tensor:
    """Elementwise hyperbolic tangent."""
    return dispatch(_op("tanh"), (x,), {})


def exp(x: Tensor, name: str | None = None) -> Tensor:
    """Elementwise e**x."""
    return dispatch(_op("exp"), (x,), {})


def log(x: Tensor, name: str | None = None) -> Tensor:
    """Elementwise natural logarithm."""
    return dispatch(_op("log"), (x,), {})


def sqrt(x: Tensor, name: str | None = None) -> Tensor:
    """Elementwise square root."""
    return dispatch(_op("sqrt"), (x,), {})


def square(x: Tensor, name: str | None = None) -> Tensor:
    """Elementwise x*x."""
    return dispatch(_op("square"), (x,), {})


def abs(x: Tensor, name: str | None = None) -> Tensor:  # noqa: A001 (PaddlePaddle's name)
    return dispatch(_op("abs"), (x,), {})


def relu(x: Tensor, name: str | None = None) -> Tensor:
    """Elementwise max(x, 0)."""
    return dispatch(_op("relu"), (x,), {})


def sigmoid(x: Tensor, name: str | None = None) -> Tensor:
    """Elementwise 1 / (1 + exp(-x))."""
    return dispatch(_op("sigmoid"), (x,), {})


def add(x: Tensor, y: Tensor, name: str | None = None) -> Tensor:
    """x + y, broadcasting like numpy."""
    return dispatch(_op("add"), (x, y), {})


def subtract(x: Tensor, y: Tensor, name: str | None = None) -> Tensor:
    """x - y, broadcasting like numpy."""
    return dispatch(_op("subtract"), (x, y), {})


def multiply(x: Tensor, y: Tensor, name: str | None = None) -> Tensor:
    """x * y, broadcasting like numpy."""
    return dispatch(_op("multiply"), (x, y), {})


def divide(x: Tensor, y: Tensor, name: str | None = None) -> Tensor:
    """x / y, broadcasting like numpy."""
    return dispatch(_op("divide"), (x, y), {})


def matmul(x: Tensor, y: Tensor, transpose_x: bool = False, transpose_y: bool = False,
           name: str | None = None) -> Tensor:
    """Product of the last two dims (transposed as the flags say); batch dims broadcast."""
    return dispatch(_op("matmul"), (x, y),
                    {"transpose_x": transpose_x, "transpose_y": transpose_y})


def mean(x: Tensor, axis: Any = None, keepdim: bool = False,
         name: str | None = None) -> Tensor:
    """Mean over `axis` (all axes when None)."""
    return dispatch(_op("mean"), (x,), {"axis": axis, "keepdim": keepdim})


def sum(x: Tensor, axis: Any = None, dtype: Any = None, keepdim: bool = False,  # noqa: A001
        name: str | None = None) -> Tensor:
    """Sum over `axis` (all axes when None), cast to `dtype` when given."""
    out = dispatch(_op("sum"), (x,), {"axis": axis, "keepdim": keepdim})
    return out if dtype is None else out.astype(dtype)


def max(x: Tensor, axis: Any = None, keepdim: bool = False,  # noqa: A001
        name: str | None = None) -> Tensor:
    """Maximum over `axis` (all axes when None)."""
    return dispatch(_op("max"), (x,), {"axis": axis, "keepdim": keepdim})
