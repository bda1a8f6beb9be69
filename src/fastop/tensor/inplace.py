"""PaddlePaddle's in-place tensor functions and methods (``x.add_(y)``, ``x.exp_()``,
``x.zero_()``...): each returns x itself, its memory now holding the result.

One mechanism for all of them: the out-of-place function computes the value through
the one dispatch entry, from :func:`fastop._tensor.inplace_source` (x, or for a
non-leaf that takes gradients a copy of x's value before the write, so a gradient that
reads the op's input reads the old value), and
:func:`fastop._tensor.inplace_store` writes it into x and hands x the value's place in
the autograd graph. So, as in PaddlePaddle:

* the write is counted in x's version: a value autograd saved of x before it (``y =
  x * x`` saves x) is refused at backward instead of giving a wrong gradient;
* a non-leaf that takes gradients is differentiated through the in-place op;
* a leaf with ``stop_gradient=False`` (a parameter) is refused with PaddlePaddle's
  ``ValueError`` ("Leaf Var ... can't use inplace strategy") while gradients are
  recorded; under ``fastop.no_grad()`` it is written like any tensor;
* the result must keep x's shape and dtype (``x.add_(y)`` with a y that broadcasts x
  larger is an error), except for the shape methods (``squeeze_``, ``unsqueeze_``,
  ``reshape_``, ``flatten_``), which give x the shape of a view of its elements (the
  same memory).

In static mode they are the out-of-place ops, as in PaddlePaddle.

>>> import fastop
>>> x = fastop.to_tensor([1.0, 4.0])
>>> x.sqrt_() is x, x.numpy()
(True, array([1., 2.], dtype=float32))
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from fastop import _random
from fastop._core.storage import as_dtype
from fastop._tensor import (Tensor, add_methods, from_numpy_tensor, inplace_source,
                            inplace_store, to_tensor)
from fastop.ops.builtin._table import B
from fastop.tensor import manipulation as _manipulation, math as _math
from fastop.tensor._common import tensor_methods
from fastop.tensor.creation import full_like

__all__ = ["add_", "subtract_", "multiply_", "divide_", "pow_", "scale_", "clip_", "exp_",
           "log_", "sqrt_", "tanh_", "abs_", "neg_", "reciprocal_", "zero_", "fill_", "uniform_",
           "normal_", "squeeze_", "unsqueeze_", "reshape_", "flatten_", "assign",
           # trigonometric, rounding, remainder, scatter, masked_fill (section at the end)
           "sin_", "cos_", "tan_", "asin_", "acos_", "atan_", "sinh_", "cosh_", "floor_",
           "ceil_", "round_", "trunc_", "rsqrt_", "remainder_", "mod_", "floor_mod_",
           "scatter_", "masked_fill_"]


def apply_in_place(x: Any, who: str, compute: Callable[[Any], Any],
              same_memory: bool = False) -> Any:
    """x given the value compute(source) computes in place (see the module docstring;
    `same_memory` for the shape methods, whose value is a view of x's elements); a
    static Variable gets the out-of-place value."""
    if not isinstance(x, Tensor):
        from fastop.static.framework import Variable
        if isinstance(x, Variable):            # static mode: the out-of-place op
            return compute(x)
        raise TypeError(f"{who}: x must be a Tensor, got {type(x).__name__}")
    return inplace_store(x, compute(inplace_source(x, who, same_memory)), who)


def add_(x: Tensor, y: Any, name: str | None = None) -> Tensor:
    """In place: x + y (y broadcasts to x's shape)."""
    return apply_in_place(x, "add_", lambda s: _math.add(s, y))


def subtract_(x: Tensor, y: Any, name: str | None = None) -> Tensor:
    """In place: x - y."""
    return apply_in_place(x, "subtract_", lambda s: _math.subtract(s, y))


def multiply_(x: Tensor, y: Any, name: str | None = None) -> Tensor:
    """In place: x * y."""
    return apply_in_place(x, "multiply_", lambda s: _math.multiply(s, y))


def divide_(x: Tensor, y: Any, name: str | None = None) -> Tensor:
    """In place: x / y."""
    return apply_in_place(x, "divide_", lambda s: _math.divide(s, y))


def pow_(x: Tensor, y: float, name: str | None = None) -> Tensor:
    """In place: x ** y, for a number y (PaddlePaddle's rule and message)."""
    if isinstance(y, bool) or not isinstance(y, (int, float, np.number)):
        raise TypeError(f"pow_: y must be scalar type, but received: {type(y)} ")
    return apply_in_place(x, "pow_", lambda s: _math.pow(s, y))


def neg_(x: Tensor, name: str | None = None) -> Tensor:
    """In place: -x."""
    return apply_in_place(x, "neg_", _math.neg)


def scale_(x: Tensor, scale: Any = 1.0, bias: float = 0.0, bias_after_scale: bool = True,
           act: str | None = None, name: str | None = None) -> Tensor:
    """In place: :func:`fastop.scale` (``scale * x + bias``...)."""
    return apply_in_place(x, "scale_", lambda s: _math.scale(s, scale, bias, bias_after_scale,
                                                         act))


def clip_(x: Tensor, min: Any = None, max: Any = None,  # noqa: A002 (Paddle's names)
          name: str | None = None) -> Tensor:
    """In place: x limited to [min, max]."""
    return apply_in_place(x, "clip_", lambda s: _math.clip(s, min, max))


def exp_(x: Tensor, name: str | None = None) -> Tensor:
    """In place: e ** x."""
    return apply_in_place(x, "exp_", _math.exp)


def log_(x: Tensor, name: str | None = None) -> Tensor:
    """In place: the natural logarithm of x."""
    return apply_in_place(x, "log_", _math.log)


def sqrt_(x: Tensor, name: str | None = None) -> Tensor:
    """In place: the square root of x."""
    return apply_in_place(x, "sqrt_", _math.sqrt)


def tanh_(x: Tensor, name: str | None = None) -> Tensor:
    """In place: tanh(x)."""
    return apply_in_place(x, "tanh_", _math.tanh)


def abs_(x: Tensor, name: str | None = None) -> Tensor:
    """In place: |x|."""
    return apply_in_place(x, "abs_", _math.abs)


def reciprocal_(x: Tensor, name: str | None = None) -> Tensor:
    """In place: 1 / x."""
    return apply_in_place(x, "reciprocal_", _math.reciprocal)


def _overwritten(source: Tensor, value: Tensor) -> Tensor:
    """`value` (which does not depend on x) as the result of an op on `source`: when
    source stands for a non-leaf's old value, ``where(False, source, value)``, so the
    gradient flowing back into the old value is zero (as PaddlePaddle's fill_ and
    random fills give) instead of the graph being cut."""
    if not source.stop_gradient and not source.is_leaf:
        return B.where(full_like(source, False, "bool"), source, value)
    return value


def _filled(source: Tensor, value: Any) -> Tensor:
    return _overwritten(source, B.full_like(source, fill_value=value))


def zero_(x: Tensor, name: str | None = None) -> Tensor:
    """In place: every element 0."""
    return apply_in_place(x, "zero_", lambda s: _filled(s, 0))


def fill_(x: Tensor, value: Any, name: str | None = None) -> Tensor:
    """In place: every element `value` (a number)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.number)):
        raise TypeError(f"fill_: value must be a number, got {type(value).__name__}")
    return apply_in_place(x, "fill_", lambda s: _filled(s, value))


def _drawn(source: Tensor, draw: Callable[[np.random.Generator], np.ndarray],
           seed: int = 0) -> Tensor:
    """Random values of source's shape and dtype from fastop's generator (or a fresh
    one seeded with `seed` when nonzero, as PaddlePaddle's seed argument)."""
    rng = _random.generator() if not seed else np.random.default_rng(seed)
    values = draw(rng).astype(as_dtype(source.dtype).numpy_dtype, copy=False)
    return _overwritten(source, from_numpy_tensor(np.ascontiguousarray(values)))


def _require_eager(x: Any, who: str) -> None:
    if not isinstance(x, Tensor):
        raise TypeError(f"{who}: x must be an eager Tensor (random values are drawn when "
                        f"called; in a static program initialise parameters with "
                        f"fastop.initializer), got {type(x).__name__}")


def uniform_(x: Tensor, min: float = -1.0, max: float = 1.0,  # noqa: A002
             seed: int = 0, name: str | None = None) -> Tensor:
    """In place: samples of U[min, max) (a float x)."""
    _require_eager(x, "uniform_")
    if not min <= max:
        raise ValueError(f"uniform_: min must be <= max, got min={min}, max={max}")
    return apply_in_place(x, "uniform_", lambda s: _drawn(
        s, lambda rng: rng.uniform(min, max, size=s.shape), seed))


def normal_(x: Tensor, mean: float = 0.0, std: float = 1.0,
            name: str | None = None) -> Tensor:
    """In place: samples of N(mean, std**2) (a float x)."""
    _require_eager(x, "normal_")
    if not std >= 0:
        raise ValueError(f"normal_: std must be >= 0, got {std}")
    return apply_in_place(x, "normal_", lambda s: _drawn(
        s, lambda rng: rng.normal(mean, std, size=s.shape)))


def squeeze_(x: Tensor, axis: Any = None, name: str | None = None) -> Tensor:
    """In place: x without its size-1 dims (all, or those among `axis`); same memory."""
    return apply_in_place(x, "squeeze_", lambda s: _manipulation.squeeze(s, axis), True)


def unsqueeze_(x: Tensor, axis: Any, name: str | None = None) -> Tensor:
    """In place: x with size-1 dims inserted at `axis`; same memory."""
    return apply_in_place(x, "unsqueeze_", lambda s: _manipulation.unsqueeze(s, axis), True)


def reshape_(x: Tensor, shape: Any, name: str | None = None) -> Tensor:
    """In place: x in a new shape (0 copies a dim, one -1 is inferred); same memory,
    so x's layout must allow the view (a contiguous x always does)."""
    return apply_in_place(x, "reshape_", lambda s: _manipulation.reshape(s, shape), True)


def flatten_(x: Tensor, start_axis: int = 0, stop_axis: int = -1,
             name: str | None = None) -> Tensor:
    """In place: the dims start_axis..stop_axis merged into one; same memory."""
    return apply_in_place(x, "flatten_", lambda s: _manipulation.flatten(s, start_axis,
                                                                     stop_axis), True)


def assign(x: Any, output: Tensor | None = None) -> Tensor:
    """A copy of x (a tensor, array, list or number) that stays in the graph; with
    `output`, x's values written into it in place (x broadcast to output's shape and
    cast to its dtype) and output returned: PaddlePaddle's ``assign``."""
    if not isinstance(x, Tensor):
        x = to_tensor(x if output is None else np.asarray(x, output.dtype.numpy_dtype))
    if output is None:
        return _manipulation.clone(x)
    return apply_in_place(output, "assign", lambda s: _overwritten(
        s, _manipulation.cast(B.broadcast_to(x, shape=list(s.shape)), s.dtype)))


def setitem_recorded(x: Tensor, key: Any, value: Any) -> None:
    """``x[key] = value`` for an x that takes gradients while grad mode is on
    (``Tensor.__setitem__`` hands it here): x becomes ``where(mask, placed values,
    old x)``, so the kept elements pass their gradient to x's old value and, for a
    value that takes gradients, the written ones to it (placed by a gather, which sums
    the gradient of a broadcast value). A leaf x is refused with PaddlePaddle's
    ValueError."""
    source = inplace_source(x, "__setitem__")
    mask = np.zeros(x.shape, dtype=bool)
    mask[key] = True
    if isinstance(value, Tensor) and not value.stop_gradient:
        placed = _placed(x, key, value)
    else:
        values = np.zeros(x.shape, dtype=as_dtype(x.dtype).numpy_dtype)
        values[key] = value.numpy() if isinstance(value, Tensor) else value
        placed = from_numpy_tensor(values)
    inplace_store(x, B.where(from_numpy_tensor(mask), placed, source), "__setitem__")


def _placed(x: Tensor, key: Any, value: Tensor) -> Tensor:
    """A tensor of x's shape holding `value` (broadcast) at `key`, differentiable in
    value: a gather of its elements by position."""
    region = np.empty(x.shape, dtype=np.int8)[key].shape
    positions = np.zeros(x.shape, dtype=np.int64)
    positions[key] = np.arange(int(np.prod(region)), dtype=np.int64).reshape(region)
    if value.dtype != x.dtype:
        value = _manipulation.cast(value, x.dtype)
    flat = B.reshape(B.broadcast_to(value, shape=list(region)), shape=[-1])
    return B.reshape(B.gather(flat, from_numpy_tensor(positions.reshape(-1)), axis=0),
                     shape=list(x.shape))


# --------------------------------- trigonometric, rounding, remainder, scatter, masked_fill

def sin_(x: Tensor, name: str | None = None) -> Tensor:
    """In place: sin(x)."""
    return apply_in_place(x, "sin_", _math.sin)


def cos_(x: Tensor, name: str | None = None) -> Tensor:
    """In place: cos(x)."""
    return apply_in_place(x, "cos_", _math.cos)


def tan_(x: Tensor, name: str | None = None) -> Tensor:
    """In place: tan(x)."""
    return apply_in_place(x, "tan_", _math.tan)


def asin_(x: Tensor, name: str | None = None) -> Tensor:
    """In place: arcsin(x)."""
    return apply_in_place(x, "asin_", _math.asin)


def acos_(x: Tensor, name: str | None = None) -> Tensor:
    """In place: arccos(x)."""
    return apply_in_place(x, "acos_", _math.acos)


def atan_(x: Tensor, name: str | None = None) -> Tensor:
    """In place: arctan(x)."""
    return apply_in_place(x, "atan_", _math.atan)


def sinh_(x: Tensor, name: str | None = None) -> Tensor:
    """In place: sinh(x)."""
    return apply_in_place(x, "sinh_", _math.sinh)


def cosh_(x: Tensor, name: str | None = None) -> Tensor:
    """In place: cosh(x)."""
    return apply_in_place(x, "cosh_", _math.cosh)


def floor_(x: Tensor, name: str | None = None) -> Tensor:
    """In place: floor(x)."""
    return apply_in_place(x, "floor_", _math.floor)


def ceil_(x: Tensor, name: str | None = None) -> Tensor:
    """In place: ceil(x)."""
    return apply_in_place(x, "ceil_", _math.ceil)


def round_(x: Tensor, name: str | None = None) -> Tensor:
    """In place: x rounded, halves away from zero."""
    return apply_in_place(x, "round_", _math.round)


def trunc_(input: Tensor, name: str | None = None) -> Tensor:  # noqa: A002 (Paddle's name)
    """In place: x rounded toward zero."""
    return apply_in_place(input, "trunc_", _math.trunc)


def rsqrt_(x: Tensor, name: str | None = None) -> Tensor:
    """In place: 1 / sqrt(x)."""
    return apply_in_place(x, "rsqrt_", _math.rsqrt)


def remainder_(x: Tensor, y: Any, name: str | None = None) -> Tensor:
    """In place: x % y (the sign of y; y broadcasts to x's shape)."""
    return apply_in_place(x, "remainder_", lambda s: _math.remainder(s, y))


mod_ = remainder_          # PaddlePaddle's aliases
floor_mod_ = remainder_


def scatter_(x: Tensor, index: Tensor, updates: Tensor, overwrite: bool = True,
             name: str | None = None) -> Tensor:
    """In place: :func:`fastop.scatter` (rows of x at index replaced by updates)."""
    return apply_in_place(x, "scatter_", lambda s: _manipulation.scatter(s, index, updates,
                                                                         overwrite))


def masked_fill_(x: Tensor, mask: Tensor, value: Any, name: str | None = None) -> Tensor:
    """In place: :func:`fastop.masked_fill` (mask broadcasts to x's shape)."""
    return apply_in_place(x, "masked_fill_", lambda s: _manipulation.masked_fill(s, mask,
                                                                                 value))


_EAGER_ONLY = ("uniform_", "normal_")       # random values drawn now: no program op

tensor_methods({name: globals()[name] for name in __all__
                if name not in _EAGER_ONLY and name != "assign"})
add_methods({name: globals()[name] for name in _EAGER_ONLY})
