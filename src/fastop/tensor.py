"""Eager mode: Tensor, creation functions, math functions and autograd entry points.

Every name here is re-exported as ``fastop.<name>``. The math functions have
PaddlePaddle's signatures and are the registry's ops (``fastop.tanh`` is
``fastop.ops.fastop.tanh``), called through the current mode's dispatcher, so they also
work on static-mode variables.

For another layer that needs trainable tensors (parameters): make them with
``fastop.to_tensor(array, stop_gradient=False)`` (a copy) and update their values in
place with ``Tensor.set_value(array)``.
"""
from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any, Union

import numpy as np

from fastop import _random
from fastop._core.storage import as_dtype
from fastop._tensor import Tensor, from_numpy_tensor as from_numpy, to_tensor
from fastop.autograd._engine import (enable_grad, grad, is_grad_enabled, no_grad,
                                     set_grad_enabled)
from fastop.ops._dispatch import current_mode, dispatch
from fastop.ops._registry import registry

__all__ = [
    "Tensor", "to_tensor", "from_numpy", "randn", "rand", "zeros", "ones", "full",
    "zeros_like", "ones_like", "full_like", "arange", "seed",
    "tanh", "exp", "log", "sqrt", "square", "abs", "relu", "sigmoid", "matmul", "add",
    "subtract", "multiply", "divide", "mean", "sum", "max", "reshape", "transpose",
    "concat", "no_grad", "enable_grad", "set_grad_enabled", "is_grad_enabled", "grad",
]

ShapeLike = Union[int, Sequence[int], Tensor]


_ops: dict[str, Any] = {}
_ops_version = -1


def _op(name: str) -> Any:
    """The OpDef ``fastop::<name>``, looked up again only when the registry changes."""
    global _ops_version
    if _ops_version != registry.version:
        _ops.clear()
        _ops_version = registry.version
    op = _ops.get(name)
    if op is None:
        op = _ops[name] = registry.get("fastop::" + name)
    return op


def _shape(shape: Any) -> list[int]:
    """A shape argument (an int, a sequence of ints or an integer Tensor) as a list;
    a float dim is refused, not truncated."""
    if isinstance(shape, Tensor):
        dims = shape.numpy().reshape(-1).tolist()
    elif isinstance(shape, (int, np.integer)):
        dims = [shape]
    else:
        dims = list(shape)
    try:
        return [operator.index(d) for d in dims]
    except TypeError:
        raise TypeError(f"shape must hold integers, got {shape!r}") from None


def _float_dtype(dtype: Any) -> np.dtype:
    return as_dtype("float32" if dtype is None else dtype).numpy_dtype


# --------------------------------------------------------------------------- creation

def seed(value: int) -> np.random.Generator:
    """Reset fastop's global random generator: runs using randn/rand/initializers become
    reproducible."""
    return _random.seed(value)


def randn(shape: ShapeLike, dtype: Any = None, name: str | None = None) -> Tensor:
    """Standard-normal samples (float32 unless dtype says otherwise)."""
    arr = _random.generator().standard_normal(_shape(shape), dtype=_float_dtype(dtype))
    return from_numpy(arr)


def rand(shape: ShapeLike, dtype: Any = None, name: str | None = None) -> Tensor:
    """Uniform samples in [0, 1) (float32 unless dtype says otherwise)."""
    arr = _random.generator().random(_shape(shape), dtype=_float_dtype(dtype))
    return from_numpy(arr)


def full(shape: ShapeLike, fill_value: Any, dtype: Any = None,
         name: str | None = None) -> Tensor:
    """A tensor of `shape` filled with fill_value (float32 unless dtype says otherwise).
    In static mode this appends the ``fastop::full`` op."""
    dtype = as_dtype("float32" if dtype is None else dtype)
    if current_mode() == "static":
        return dispatch(_op("full"), (), {"shape": _shape(shape),
                                          "fill_value": float(fill_value), "dtype": dtype})
    return from_numpy(np.full(_shape(shape), fill_value, dtype=dtype.numpy_dtype))


def zeros(shape: ShapeLike, dtype: Any = None, name: str | None = None) -> Tensor:
    return full(shape, 0, dtype)


def ones(shape: ShapeLike, dtype: Any = None, name: str | None = None) -> Tensor:
    return full(shape, 1, dtype)


def full_like(x: Tensor, fill_value: Any, dtype: Any = None,
              name: str | None = None) -> Tensor:
    return full(x.shape, fill_value, x.dtype if dtype is None else dtype)


def zeros_like(x: Tensor, dtype: Any = None, name: str | None = None) -> Tensor:
    return full_like(x, 0, dtype)


def ones_like(x: Tensor, dtype: Any = None, name: str | None = None) -> Tensor:
    return full_like(x, 1, dtype)


def arange(start: Any = 0, end: Any = None, step: Any = 1, dtype: Any = None,
           name: str | None = None) -> Tensor:
    """Evenly spaced values in [start, end): int64 for integer arguments, else float32."""
    if end is None:
        start, end = 0, start
    if dtype is None:
        ints = all(isinstance(v, (int, np.integer)) for v in (start, end, step))
        dtype = "int64" if ints else "float32"
    return from_numpy(np.arange(start, end, step, dtype=as_dtype(dtype).numpy_dtype))


# --------------------------------------------------------------------------- math (registry ops)

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
