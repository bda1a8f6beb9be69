"""Built-in elementwise ops with numpy kernels (PaddlePaddle's ``paddle.sin``, ``floor``,
``rsqrt``, ``remainder``... that the Cython family :mod:`.elementwise` does not cover).

* trigonometric and hyperbolic ``sin cos tan asin acos atan sinh cosh (x)`` and ``rsqrt(x)``
  (``1 / sqrt(x)``) — float32 and float64, x's dtype (outside the domain: nan, as numpy);
* rounding ``floor ceil round (x)`` (float) and ``trunc(x)`` (float and integer; an integer
  x is returned as it is) — ``round`` rounds half away from zero (PaddlePaddle's kernel,
  C's ``round``: ``round(-2.5) = -3``), not half to even as numpy's ``round`` does;
* ``remainder(x, y)`` — Python's ``%`` (the result takes the sign of y), broadcasting,
  int32/int64/float32/float64; an integer y of 0 is an error naming the op, a float y of
  0 gives nan.

Rules (composed of built-in ops, so differentiable again): sin → dout·cos x, cos →
−dout·sin x, tan → dout·(1 + out²), asin → dout/√(1 − x²), acos → −dout/√(1 − x²), atan →
dout/(1 + x²), sinh → dout·cosh x, cosh → dout·sinh x, rsqrt → −½·dout·out³; floor, ceil,
round and trunc have a zero gradient (as in PaddlePaddle); remainder → (dout,
−dout·floor(x / y)), each summed back to its operand's shape.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from fastop.ops._registry import TensorMeta
from fastop.ops.builtin._axes import broadcast_meta
from fastop.ops.builtin._table import B
from fastop.ops.builtin.elementwise import unbroadcast

__all__ = ["register", "samples"]

FLOATS = ("float32", "float64")
NUMERIC = ("int32", "int64", "float32", "float64")


def same_meta(x):
    """A one-input elementwise op's output: x's shape and dtype."""
    return x


# -- kernels --------------------------------------------------------------------------

def asin_kernel(x):
    with np.errstate(invalid="ignore"):           # |x| > 1: nan, without numpy's warning
        return np.arcsin(x)


def acos_kernel(x):
    with np.errstate(invalid="ignore"):
        return np.arccos(x)


def rsqrt_kernel(x):
    """1 / sqrt(x) in x's dtype (0 gives inf, x < 0 nan)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.reciprocal(np.sqrt(x))


def round_kernel(x):
    """Half away from zero: the integer part plus sign(x) where the fraction is at least
    a half (``x - trunc(x)`` is exact, so no ``x + 0.5`` rounding error; -0.2 stays -0.)."""
    whole = np.trunc(x)
    with np.errstate(invalid="ignore"):            # inf - inf: nan, and inf stays inf
        return np.where(np.abs(x - whole) >= 0.5, whole + np.sign(x), whole).astype(
            x.dtype, copy=False)


def trunc_kernel(x):
    """Rounded toward zero; an integer x as it is (numpy's trunc would make it float)."""
    return x.copy() if x.dtype.kind == "i" else np.trunc(x)


def remainder_meta(x, y):
    if x.dtype != y.dtype:
        raise TypeError(f"fastop::remainder: x and y must have the same dtype (cast one "
                        f"first); got x: {x.dtype.name}, y: {y.dtype.name}")
    return TensorMeta(broadcast_meta("fastop::remainder", x.shape, y.shape), x.dtype)


def remainder_kernel(x, y):
    """Python's ``x % y`` (numpy's remainder): the sign of y."""
    if y.dtype.kind == "i":
        if not np.all(y):
            raise ValueError("fastop::remainder: y holds 0: integer division by zero (an "
                             "integer remainder needs a nonzero divisor)")
        return np.remainder(x, y)
    with np.errstate(invalid="ignore", divide="ignore"):     # y == 0: nan, as Paddle
        return np.remainder(x, y)


# -- gradient rules -------------------------------------------------------------------

def sin_grad_rule(x, dout):
    return B.multiply(dout, B.cos(x))


def cos_grad_rule(x, dout):
    return B.neg(B.multiply(dout, B.sin(x)))


def tan_grad_rule(out, dout):
    return B.multiply(dout, B.add(B.square(out), 1.0))


def asin_grad_rule(x, dout):
    return B.divide(dout, B.sqrt(B.subtract(1.0, B.square(x))))


def acos_grad_rule(x, dout):
    return B.neg(B.divide(dout, B.sqrt(B.subtract(1.0, B.square(x)))))


def atan_grad_rule(x, dout):
    return B.divide(dout, B.add(B.square(x), 1.0))


def sinh_grad_rule(x, dout):
    return B.multiply(dout, B.cosh(x))


def cosh_grad_rule(x, dout):
    return B.multiply(dout, B.sinh(x))


def rsqrt_grad_rule(out, dout):
    return B.multiply(B.multiply(dout, -0.5), B.multiply(out, B.square(out)))


def zero_grad_rule(dout):
    """floor, ceil, round, trunc: piecewise constant, so zero (PaddlePaddle's rule), written
    as dout * 0 so that it stays differentiable in dout."""
    return B.multiply(dout, 0)


def remainder_grad_rule(x, y, dout, needs_input_grad=None):
    """x % y = x - floor(x / y) * y: dx = dout, dy = -dout * floor(x / y)."""
    want_x, want_y = (True, True) if needs_input_grad is None else needs_input_grad
    return (unbroadcast(dout, x) if want_x else None,
            unbroadcast(B.neg(B.multiply(dout, B.floor(B.divide(x, y)))), y)
            if want_y else None)


def register(registry) -> None:
    # ---------------------------------------------------------------- trigonometric
    registry.define(
        "fastop::sin", inputs=["x"], meta=same_meta, kernels=dict.fromkeys(FLOATS, np.sin),
        doc="Sine, elementwise."
    ).grad(needs=("x",), reads={"x": ("x",)})(sin_grad_rule)
    registry.define(
        "fastop::cos", inputs=["x"], meta=same_meta, kernels=dict.fromkeys(FLOATS, np.cos),
        doc="Cosine, elementwise."
    ).grad(needs=("x",), reads={"x": ("x",)})(cos_grad_rule)
    registry.define(
        "fastop::tan", inputs=["x"], meta=same_meta, kernels=dict.fromkeys(FLOATS, np.tan),
        doc="Tangent, elementwise."
    ).grad(needs=("out",), reads={"x": ("out",)})(tan_grad_rule)
    registry.define(
        "fastop::asin", inputs=["x"], meta=same_meta,
        kernels=dict.fromkeys(FLOATS, asin_kernel),
        doc="Arcsine, elementwise (nan outside [-1, 1])."
    ).grad(needs=("x",), reads={"x": ("x",)})(asin_grad_rule)
    registry.define(
        "fastop::acos", inputs=["x"], meta=same_meta,
        kernels=dict.fromkeys(FLOATS, acos_kernel),
        doc="Arccosine, elementwise (nan outside [-1, 1])."
    ).grad(needs=("x",), reads={"x": ("x",)})(acos_grad_rule)
    registry.define(
        "fastop::atan", inputs=["x"], meta=same_meta, kernels=dict.fromkeys(FLOATS, np.arctan),
        doc="Arctangent, elementwise."
    ).grad(needs=("x",), reads={"x": ("x",)})(atan_grad_rule)
    registry.define(
        "fastop::sinh", inputs=["x"], meta=same_meta, kernels=dict.fromkeys(FLOATS, np.sinh),
        doc="Hyperbolic sine, elementwise."
    ).grad(needs=("x",), reads={"x": ("x",)})(sinh_grad_rule)
    registry.define(
        "fastop::cosh", inputs=["x"], meta=same_meta, kernels=dict.fromkeys(FLOATS, np.cosh),
        doc="Hyperbolic cosine, elementwise."
    ).grad(needs=("x",), reads={"x": ("x",)})(cosh_grad_rule)
    registry.define(
        "fastop::rsqrt", inputs=["x"], meta=same_meta,
        kernels=dict.fromkeys(FLOATS, rsqrt_kernel),
        doc="1 / sqrt(x), elementwise (inf at 0, nan for x < 0)."
    ).grad(needs=("out",), reads={"x": ("out",)})(rsqrt_grad_rule)

    # ---------------------------------------------------------------- rounding
    registry.define(
        "fastop::floor", inputs=["x"], meta=same_meta, kernels=dict.fromkeys(FLOATS, np.floor),
        doc="The largest integer <= x, elementwise (zero gradient)."
    ).grad(reads={})(zero_grad_rule)
    registry.define(
        "fastop::ceil", inputs=["x"], meta=same_meta, kernels=dict.fromkeys(FLOATS, np.ceil),
        doc="The smallest integer >= x, elementwise (zero gradient)."
    ).grad(reads={})(zero_grad_rule)
    registry.define(
        "fastop::round", inputs=["x"], meta=same_meta,
        kernels=dict.fromkeys(FLOATS, round_kernel),
        doc="x rounded to the nearest integer, halves away from zero (zero gradient)."
    ).grad(reads={})(zero_grad_rule)
    registry.define(
        "fastop::trunc", inputs=["x"], meta=same_meta,
        kernels=dict.fromkeys(NUMERIC, trunc_kernel),
        doc="x rounded toward zero (an integer x as it is; zero gradient)."
    ).grad(reads={})(zero_grad_rule)

    # ---------------------------------------------------------------- binary
    registry.define(
        "fastop::remainder", inputs=["x", "y"], meta=remainder_meta,
        kernels=dict.fromkeys(NUMERIC, remainder_kernel),
        doc="x % y with the sign of y (Python's and PaddlePaddle's), broadcasting."
    ).grad(needs=("x", "y"), reads={"x": (), "y": ("x", "y")})(remainder_grad_rule)


def samples() -> dict[str, list[Any]]:
    """opcheck's inputs: float32 and float64 (integers for trunc and remainder), 0-D
    included; values inside asin/acos's domain and rsqrt's, and kept away from the jumps
    of the rounding ops (integers, and halves for round) and of remainder (x / y away
    from integers)."""
    from fastop.ops.builtin._sampling import Values   # tests and tools only
    v = Values(5)
    f32 = "float32"
    # fractions in [0.15, 0.35] or [0.65, 0.85]: 0.15 from every jump of floor, ceil,
    # trunc and round
    steps = np.array([-2.7, -1.2, -0.3, 0.2, 0.8, 1.3, 2.75, -3.65])
    unit = v.rng.uniform(-0.9, 0.9, (2, 3))
    rounding = [[steps.reshape(2, 4)], [steps.astype(f32)], [np.array(1.3)]]
    ints = np.array([[-7, -3, 0], [4, 5, 9]])
    divisors = np.array([[2.0, -3.0, 2.5], [-1.5, 4.0, 3.5]])
    return {
        "fastop::sin": [[v.normal(2, 3)], [v.normal(4, dtype=f32)], [np.array(0.4)]],
        "fastop::cos": [[v.normal(2, 3)], [v.normal(4, dtype=f32)], [np.array(0.4)]],
        "fastop::tan": [[v.rng.uniform(-1.2, 1.2, (2, 3))],
                        [v.rng.uniform(-1.2, 1.2, 4).astype(f32)]],
        "fastop::asin": [[unit], [unit.astype(f32)], [np.array(-0.5)]],
        "fastop::acos": [[unit], [unit.astype(f32)]],
        "fastop::atan": [[v.normal(2, 3)], [v.normal(4, dtype=f32)]],
        "fastop::sinh": [[v.normal(2, 3)], [v.normal(4, dtype=f32)]],
        "fastop::cosh": [[v.normal(2, 3)], [v.normal(4, dtype=f32)]],
        "fastop::rsqrt": [[v.positive(2, 3)], [v.positive(4, dtype=f32)], [np.array(0.7)]],
        "fastop::floor": rounding,
        "fastop::ceil": rounding,
        "fastop::round": rounding,
        "fastop::trunc": rounding + [[ints], [ints.astype("int32")]],
        # x / y at least 0.1 from an integer (the jumps of x % y)
        "fastop::remainder": [[np.array([[5.3, -4.1, 7.0], [3.2, -9.5, 1.1]]), divisors],
                              [np.array([5.3, -4.1, 7.4], f32), np.float32([2.0, 3.0, -2.5])],
                              [np.array([[5.3], [-4.1]]), np.array([2.0, -3.0])],
                              [ints, np.array([3, -4, 2])],
                              [ints.astype("int32"), np.array([5, 2, -3], "int32")]],
    }
