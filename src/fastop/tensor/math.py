"""Elementwise math, reductions and matmul (PaddlePaddle's ``paddle.tensor.math`` and
``paddle.tensor.linalg``): each function is a registry op called through the dispatcher."""
from __future__ import annotations

import math
import numbers
from typing import Any

from fastop._core.storage import as_dtype
from fastop._tensor import Tensor, add_methods, to_tensor
from fastop.ops._dispatch import current_mode, dispatch
from fastop.ops._registry import registry
from fastop.tensor._common import _op

__all__ = ["tanh", "exp", "log", "sqrt", "square", "abs", "relu", "sigmoid", "matmul", "add",
           "subtract", "multiply", "divide", "mean", "sum", "max",
           # reductions, scans, clipping and tests (section at the end)
           "min", "prod", "cumsum", "clip", "maximum", "minimum", "isnan", "isinf",
           "isfinite", "all", "any", "numel"]


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



# -- reductions, scans, clipping and tests -------------------------------------------------
# (ops bound once: the built-in ops are registered before fastop.tensor is imported)

_min_op, _prod_op, _cumsum_op, _clip_op = (registry.get(f"fastop::{n}")
                                           for n in ("min", "prod", "cumsum", "clip"))
_maximum_op, _minimum_op = registry.get("fastop::maximum"), registry.get("fastop::minimum")
_isnan_op, _isinf_op, _isfinite_op = (registry.get(f"fastop::{n}")
                                      for n in ("isnan", "isinf", "isfinite"))
_all_op, _any_op = registry.get("fastop::all"), registry.get("fastop::any")
_cast_op, _reshape_op = registry.get("fastop::cast"), registry.get("fastop::reshape")
_sum_op, _full_like_op = registry.get("fastop::sum"), registry.get("fastop::full_like")


def _cast_to(x: Tensor, dtype: Any) -> Tensor:
    """x in `dtype` (None: as it is)."""
    if dtype is None or as_dtype(dtype) == as_dtype(x.dtype):
        return x
    return _cast_op(x, dtype=as_dtype(dtype))


def min(x: Tensor, axis: Any = None, keepdim: bool = False,  # noqa: A001
        name: str | None = None) -> Tensor:
    """Minimum over `axis` (all axes when None); NaN wins."""
    return _min_op(x, axis=axis, keepdim=keepdim)


def prod(x: Tensor, axis: Any = None, keepdim: bool = False, dtype: Any = None,
         name: str | None = None) -> Tensor:
    """Product over `axis` (all axes when None), computed in `dtype` when given."""
    return _prod_op(_cast_to(x, dtype), axis=axis, keepdim=keepdim)


def cumsum(x: Tensor, axis: int | None = None, dtype: Any = None,
           name: str | None = None) -> Tensor:
    """Running sums along `axis` (of the flattened x when None), in `dtype` when
    given."""
    x = _cast_to(x, dtype)
    if axis is None:
        return _cumsum_op(_reshape_op(x, shape=[-1]), axis=0)
    return _cumsum_op(x, axis=axis)


def clip(x: Tensor, min: Any = None, max: Any = None,  # noqa: A002 (Paddle's names)
         name: str | None = None) -> Tensor:
    """x limited to [min, max] (None: no bound). Number bounds run as one op whose
    gradient flows where ``min < x < max``; tensor bounds broadcast (``maximum`` /
    ``minimum``)."""
    for bound, label in ((min, "min"), (max, "max")):
        if bound is not None and not isinstance(bound, numbers.Real) and \
                not hasattr(bound, "shape"):
            raise TypeError(f"clip: {label} must be a number, a tensor or None, got "
                            f"{type(bound).__name__}")
    if isinstance(min, numbers.Real) or isinstance(max, numbers.Real) or \
            (min is None and max is None):
        low = -math.inf if not isinstance(min, numbers.Real) else float(min)
        high = math.inf if not isinstance(max, numbers.Real) else float(max)
        x = _clip_op(x, min=low, max=high)
    if min is not None and not isinstance(min, numbers.Real):
        x = _maximum_op(x, min)
    if max is not None and not isinstance(max, numbers.Real):
        x = _minimum_op(x, max)
    return x


def maximum(x: Tensor, y: Tensor, name: str | None = None) -> Tensor:
    """The larger of x and y elementwise (broadcasting; NaN wins)."""
    return _maximum_op(x, y)


def minimum(x: Tensor, y: Tensor, name: str | None = None) -> Tensor:
    """The smaller of x and y elementwise (broadcasting; NaN wins)."""
    return _minimum_op(x, y)


def isnan(x: Tensor, name: str | None = None) -> Tensor:
    """Whether each element is NaN (bool)."""
    return _isnan_op(x)


def isinf(x: Tensor, name: str | None = None) -> Tensor:
    """Whether each element is +inf or -inf (bool)."""
    return _isinf_op(x)


def isfinite(x: Tensor, name: str | None = None) -> Tensor:
    """Whether each element is neither NaN nor infinite (bool)."""
    return _isfinite_op(x)


def all(x: Tensor, axis: Any = None, keepdim: bool = False,  # noqa: A001
        name: str | None = None) -> Tensor:
    """Whether every element over `axis` (all axes when None) is nonzero (bool)."""
    return _all_op(x, axis=axis, keepdim=keepdim)


def any(x: Tensor, axis: Any = None, keepdim: bool = False,  # noqa: A001
        name: str | None = None) -> Tensor:
    """Whether some element over `axis` (all axes when None) is nonzero (bool)."""
    return _any_op(x, axis=axis, keepdim=keepdim)


def numel(x: Tensor, name: str | None = None) -> Tensor:
    """The number of elements, as a 0-d int64 tensor (in static mode an op counting at
    run time, so unknown dims work)."""
    if current_mode() == "eager":
        return to_tensor(x.size, dtype="int64")
    return _sum_op(_cast_op(_full_like_op(x, fill_value=1), dtype=as_dtype("int64")))


add_methods({"min": min, "prod": prod, "cumsum": cumsum, "clip": clip, "maximum": maximum,
             "minimum": minimum, "isnan": isnan, "isinf": isinf, "isfinite": isfinite,
             "all": all, "any": any, "numel": numel})
