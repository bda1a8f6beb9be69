"""Elementwise math, reductions and matmul (PaddlePaddle's ``paddle.tensor.math`` and
``paddle.tensor.linalg``): each function is a registry op called through the one
dispatch entry, and a Tensor method."""
from __future__ import annotations

import math
import numbers
from typing import Any

from fastop._core.storage import as_dtype
from fastop._tensor import Tensor, to_tensor
from fastop.tensor._common import tensor_methods
from fastop.ops._dispatch import current_mode
from fastop.ops.builtin._table import B

__all__ = ["tanh", "exp", "log", "sqrt", "square", "abs", "relu", "sigmoid", "matmul", "add",
           "subtract", "multiply", "divide", "pow", "neg", "mean", "sum", "max",
           # reductions, scans, clipping and tests (section at the end)
           "min", "prod", "cumsum", "clip", "maximum", "minimum", "isnan", "isinf",
           "isfinite", "all", "any", "numel",
           # PaddlePaddle's compositions (section at the end)
           "scale", "reciprocal",
           # trigonometric, rounding, sign, rsqrt, remainder (section at the end)
           "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "floor", "ceil",
           "round", "trunc", "sign", "rsqrt", "remainder", "mod", "floor_mod"]


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


def pow(x: Tensor, y: Any, name: str | None = None) -> Tensor:  # noqa: A001
    """x ** y elementwise, broadcasting like numpy; `y` a Tensor or a number."""
    return B.pow(x, y)


def neg(x: Tensor, name: str | None = None) -> Tensor:
    """-x elementwise."""
    return B.neg(x)


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
    """Sum over `axis` (all axes when None): int32 and bool x sum into int64, other
    dtypes in their own (PaddlePaddle's rule); in `dtype` when given (x is cast first,
    except int32/bool x summed into int64, which the kernel reads in place)."""
    if dtype is not None:
        dtype = as_dtype(dtype)
        if not (dtype.name == "int64" and as_dtype(x.dtype).name in WIDENED):
            x = _cast_to(x, dtype)
    if axis is None and not keepdim:
        out = B.sum(x)
    else:
        out = B.sum(x, axis=axis, keepdim=keepdim)
    return out if dtype is None else _cast_to(out, dtype)


def max(x: Tensor, axis: Any = None, keepdim: bool = False,  # noqa: A001
        name: str | None = None) -> Tensor:
    """Maximum over `axis` (all axes when None)."""
    if axis is None and not keepdim:
        return B.max(x)
    return B.max(x, axis=axis, keepdim=keepdim)



# -- reductions, scans, clipping and tests -------------------------------------------------



# dtypes `sum` widens to int64 (PaddlePaddle's rule)
WIDENED = ("int32", "bool")


def _cast_to(x: Tensor, dtype: Any) -> Tensor:
    """x in `dtype` (None: as it is)."""
    if dtype is None or as_dtype(dtype) == as_dtype(x.dtype):
        return x
    return B.cast(x, dtype=as_dtype(dtype))


def min(x: Tensor, axis: Any = None, keepdim: bool = False,  # noqa: A001
        name: str | None = None) -> Tensor:
    """Minimum over `axis` (all axes when None); NaN wins."""
    return B.min(x, axis=axis, keepdim=keepdim)


def prod(x: Tensor, axis: Any = None, keepdim: bool = False, dtype: Any = None,
         name: str | None = None) -> Tensor:
    """Product over `axis` (all axes when None) in x's dtype (int32 stays int32, as
    PaddlePaddle documents), computed in `dtype` when given (x is cast first)."""
    return B.prod(_cast_to(x, dtype), axis=axis, keepdim=keepdim)


def cumsum(x: Tensor, axis: int | None = None, dtype: Any = None,
           name: str | None = None) -> Tensor:
    """Running sums along `axis` (of the flattened x when None): int32 x in int64
    (PaddlePaddle's default), other dtypes in their own; in `dtype` when given (x is
    cast first, except int32 x summed into int64)."""
    if dtype is not None:
        dtype = as_dtype(dtype)
        if not (dtype.name == "int64" and as_dtype(x.dtype).name == "int32"):
            x = _cast_to(x, dtype)
    if axis is None:
        out = B.cumsum(B.reshape(x, shape=[-1]), axis=0)
    else:
        out = B.cumsum(x, axis=axis)
    return out if dtype is None else _cast_to(out, dtype)


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
        x = B.clip(x, min=low, max=high)
    if min is not None and not isinstance(min, numbers.Real):
        x = B.maximum(x, min)
    if max is not None and not isinstance(max, numbers.Real):
        x = B.minimum(x, max)
    return x


def maximum(x: Tensor, y: Tensor, name: str | None = None) -> Tensor:
    """The larger of x and y elementwise (broadcasting; NaN wins)."""
    return B.maximum(x, y)


def minimum(x: Tensor, y: Tensor, name: str | None = None) -> Tensor:
    """The smaller of x and y elementwise (broadcasting; NaN wins)."""
    return B.minimum(x, y)


def isnan(x: Tensor, name: str | None = None) -> Tensor:
    """Whether each element is NaN (bool)."""
    return B.isnan(x)


def isinf(x: Tensor, name: str | None = None) -> Tensor:
    """Whether each element is +inf or -inf (bool)."""
    return B.isinf(x)


def isfinite(x: Tensor, name: str | None = None) -> Tensor:
    """Whether each element is neither NaN nor infinite (bool)."""
    return B.isfinite(x)


def all(x: Tensor, axis: Any = None, keepdim: bool = False,  # noqa: A001
        name: str | None = None) -> Tensor:
    """Whether every element over `axis` (all axes when None) is nonzero (bool)."""
    return B.all(x, axis=axis, keepdim=keepdim)


def any(x: Tensor, axis: Any = None, keepdim: bool = False,  # noqa: A001
        name: str | None = None) -> Tensor:
    """Whether some element over `axis` (all axes when None) is nonzero (bool)."""
    return B.any(x, axis=axis, keepdim=keepdim)


def numel(x: Tensor, name: str | None = None) -> Tensor:
    """The number of elements, as a 0-d int64 tensor (in static mode an op counting at
    run time, so unknown dims work)."""
    if current_mode() == "eager":
        return to_tensor(x.size, dtype="int64")
    return B.sum(B.cast(B.full_like(x, fill_value=1), dtype=as_dtype("int64")))


tensor_methods({"min": min, "prod": prod, "cumsum": cumsum, "clip": clip, "maximum": maximum,
             "minimum": minimum, "isnan": isnan, "isinf": isinf, "isfinite": isfinite,
             "all": all, "any": any, "numel": numel})


# --------------------------------------------------------------------------- compositions

_SCALE_ACTS = {"relu": relu, "tanh": tanh, "sigmoid": sigmoid}


def scale(x: Tensor, scale: Any = 1.0, bias: float = 0.0, bias_after_scale: bool = True,
          act: str | None = None, name: str | None = None) -> Tensor:
    """``scale * x + bias`` (``bias_after_scale``), else ``scale * (x + bias)``, then the
    activation `act` (None, "relu", "tanh" or "sigmoid"): PaddlePaddle's ``scale``, in
    x's dtype (an integer x stays integer). `scale` may be a number or a 1-element
    tensor; composed of multiply and add, so it is differentiable."""
    if act is not None and act not in _SCALE_ACTS:
        raise ValueError(f"scale: act must be None or one of {sorted(_SCALE_ACTS)}, got "
                         f"{act!r}")
    out = B.add(B.multiply(x, scale), bias) if bias_after_scale else \
        B.multiply(B.add(x, bias), scale)
    if as_dtype(out.dtype) != as_dtype(x.dtype):      # an integer x: Paddle keeps its dtype
        out = B.cast(out, dtype=as_dtype(x.dtype))
    return out if act is None else _SCALE_ACTS[act](out)


def reciprocal(x: Tensor, name: str | None = None) -> Tensor:
    """Elementwise 1 / x (a float x; the op ``divide``)."""
    return B.divide(1.0, x)


tensor_methods({"scale": scale, "reciprocal": reciprocal})


# ----------------------------------------------------- trigonometric, rounding, remainder

def sin(x: Tensor, name: str | None = None) -> Tensor:
    """Elementwise sine (a float x)."""
    return B.sin(x)


def cos(x: Tensor, name: str | None = None) -> Tensor:
    """Elementwise cosine (a float x)."""
    return B.cos(x)


def tan(x: Tensor, name: str | None = None) -> Tensor:
    """Elementwise tangent (a float x)."""
    return B.tan(x)


def asin(x: Tensor, name: str | None = None) -> Tensor:
    """Elementwise arcsine (a float x; nan outside [-1, 1])."""
    return B.asin(x)


def acos(x: Tensor, name: str | None = None) -> Tensor:
    """Elementwise arccosine (a float x; nan outside [-1, 1])."""
    return B.acos(x)


def atan(x: Tensor, name: str | None = None) -> Tensor:
    """Elementwise arctangent (a float x)."""
    return B.atan(x)


def sinh(x: Tensor, name: str | None = None) -> Tensor:
    """Elementwise hyperbolic sine (a float x)."""
    return B.sinh(x)


def cosh(x: Tensor, name: str | None = None) -> Tensor:
    """Elementwise hyperbolic cosine (a float x)."""
    return B.cosh(x)


def floor(x: Tensor, name: str | None = None) -> Tensor:
    """The largest integer <= x, elementwise, in x's dtype (a float x; zero gradient)."""
    return B.floor(x)


def ceil(x: Tensor, name: str | None = None) -> Tensor:
    """The smallest integer >= x, elementwise, in x's dtype (a float x; zero gradient)."""
    return B.ceil(x)


def round(x: Tensor, name: str | None = None) -> Tensor:  # noqa: A001 (Paddle's name)
    """x rounded to the nearest integer, halves away from zero (``round(-2.5) == -3``,
    PaddlePaddle's kernel, not numpy's half to even); a float x; zero gradient."""
    return B.round(x)


def trunc(input: Tensor, name: str | None = None) -> Tensor:  # noqa: A002 (Paddle's name)
    """x rounded toward zero (an integer x as it is); zero gradient."""
    return B.trunc(input)


def sign(x: Tensor, name: str | None = None) -> Tensor:
    """-1, 0 or 1 by the sign of each element, in x's dtype (zero gradient)."""
    return B.sign(x)


def rsqrt(x: Tensor, name: str | None = None) -> Tensor:
    """Elementwise 1 / sqrt(x) (a float x)."""
    return B.rsqrt(x)


def remainder(x: Tensor, y: Any, name: str | None = None) -> Tensor:
    """x % y elementwise with the sign of y (Python's rule), broadcasting; `y` a Tensor or
    a number. An integer y of 0 is an error; a float one gives nan."""
    return B.remainder(x, y)


mod = remainder            # PaddlePaddle's aliases
floor_mod = remainder

tensor_methods({"sin": sin, "cos": cos, "tan": tan, "asin": asin, "acos": acos, "atan": atan,
                "sinh": sinh, "cosh": cosh, "floor": floor, "ceil": ceil, "round": round,
                "trunc": trunc, "sign": sign, "rsqrt": rsqrt, "remainder": remainder,
                "mod": mod, "floor_mod": floor_mod})
