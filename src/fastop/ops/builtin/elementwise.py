"""Built-in elementwise ops (Cython kernels from :mod:`fastop._core.elementwise`) and
their gradient rules.

Unary ``neg abs sign exp log sqrt square tanh sigmoid relu`` keep x's dtype; backward
kernels ``tanh_grad sigmoid_grad relu_grad sqrt_grad (y, dy)`` take the forward output
(tanh, sigmoid, relu and sqrt differentiate by them directly: ``grad_op``); binary ``add
subtract multiply divide pow maximum minimum`` and the comparisons ``equal not_equal
less_than less_equal greater_than greater_equal`` (bool output) take two tensors of one
dtype — a Python scalar, and a tensor of the op's dtype group, follow the scalar rule of
:mod:`fastop.ops._dispatch` — and broadcast by numpy's rules; ``divide`` is true
division (integers compute in float32); ``where(condition, x, y)``, ``cast(x, dtype=)``,
``full_like(x, fill_value=)`` and ``full(shape=, fill_value=, dtype=)``.

Gradient rules compose built-in ops (through :data:`B`), so they work on whatever values
the current mode passes (eager Tensors, static Variables) and are differentiable again:
the backward kernels have rules of their own. Gradients of broadcast operands are summed
back to the operand's shape with ``fastop::sum_to_shape``.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from fastop._core import elementwise as K
from fastop._core.storage import DType, empty, float32
from fastop.ops._dispatch import same_shape
from fastop.ops._registry import AttrSpec, TensorMeta
from fastop.ops.builtin._table import B

__all__ = ["register", "samples", "unbroadcast", "shape_attr"]

def shape_attr(shape: Sequence[Any]) -> list[int]:
    """A value's shape as a ``shape=`` attribute: unknown dims (None, -1) as -1."""
    return [-1 if d is None or d < 0 else int(d) for d in shape]


def unbroadcast(g: Any, like: Any) -> Any:
    """g summed down to the shape of `like` (the gradient of a broadcast)."""
    if same_shape(g, like):
        return g
    return B.sum_to_shape(g, shape=shape_attr(like.shape))


def _wanted(needs_input_grad: Sequence[bool] | None, n: int) -> Sequence[bool]:
    return (True,) * n if needs_input_grad is None else needs_input_grad


# --------------------------------------------------------------------------- unary rules

def neg_grad_rule(dout):
    return B.neg(dout)


def abs_grad_rule(x, dout):
    return B.multiply(dout, B.sign(x))


def sign_grad_rule(dout):
    # zero, written as dout * 0 so that it stays differentiable (in dout) again
    return B.multiply(dout, 0)


def exp_grad_rule(out, dout):
    return B.multiply(dout, out)


def log_grad_rule(x, dout):
    return B.divide(dout, x)


def square_grad_rule(x, dout):
    return B.multiply(dout, B.multiply(x, 2))


# Rules of the backward kernels (dx = dy * f'(y)); g is the gradient arriving at dx.

def tanh_grad_grad_rule(y, dy, g):
    return B.multiply(B.multiply(g, dy), B.multiply(y, -2)), B.tanh_grad(y, g)


def sigmoid_grad_grad_rule(y, dy, g):
    return (B.multiply(B.multiply(g, dy), B.add(B.multiply(y, -2), 1)),
            B.sigmoid_grad(y, g))


def relu_grad_grad_rule(y, g):
    return None, B.relu_grad(y, g)


def sqrt_grad_grad_rule(y, dy, g):
    return (B.divide(B.multiply(B.multiply(g, dy), -0.5), B.square(y)),
            B.sqrt_grad(y, g))


# --------------------------------------------------------------------------- binary rules

def add_grad_rule(x, y, dout, needs_input_grad=None):
    want_x, want_y = _wanted(needs_input_grad, 2)
    return (unbroadcast(dout, x) if want_x else None,
            unbroadcast(dout, y) if want_y else None)


def subtract_grad_rule(x, y, dout, needs_input_grad=None):
    want_x, want_y = _wanted(needs_input_grad, 2)
    return (unbroadcast(dout, x) if want_x else None,
            unbroadcast(B.neg(dout), y) if want_y else None)


def multiply_grad_rule(x, y, dout, needs_input_grad=None):
    want_x, want_y = _wanted(needs_input_grad, 2)
    return (unbroadcast(B.multiply(dout, y), x) if want_x else None,
            unbroadcast(B.multiply(dout, x), y) if want_y else None)


def divide_grad_rule(x, y, out, dout, needs_input_grad=None):
    want_x, want_y = _wanted(needs_input_grad, 2)
    return (unbroadcast(B.divide(dout, y), x) if want_x else None,
            unbroadcast(B.neg(B.divide(B.multiply(dout, out), y)), y) if want_y else None)


def pow_grad_rule(x, y, out, dout, needs_input_grad=None):
    want_x, want_y = _wanted(needs_input_grad, 2)
    dx = dy = None
    if want_x:
        dx = unbroadcast(B.multiply(dout, B.multiply(y, B.pow(x, B.subtract(y, 1)))), x)
    if want_y:
        dy = unbroadcast(B.multiply(B.multiply(dout, out), B.log(x)), y)
    return dx, dy


def _select_grads(mask: Any, x: Any, y: Any, g: Any) -> tuple[Any, Any]:
    """g routed to x where mask holds, to y elsewhere."""
    zeros = B.full_like(g, fill_value=0)
    return (unbroadcast(B.where(mask, g, zeros), x),
            unbroadcast(B.where(mask, zeros, g), y))


def maximum_grad_rule(x, y, dout):
    return _select_grads(B.greater_equal(x, y), x, y, dout)


def minimum_grad_rule(x, y, dout):
    return _select_grads(B.less_equal(x, y), x, y, dout)


def where_grad_rule(condition, x, y, dout):
    return (None, *_select_grads(condition, x, y, dout))


def cast_grad_rule(x, dout, dtype):
    return B.cast(dout, dtype=x.dtype)


# --------------------------------------------------------------------------- creation

def full_meta(shape, fill_value, dtype):
    return TensorMeta(shape, dtype)


def full_kernel(shape, fill_value, dtype):
    out = empty(shape, dtype)
    return K.full_like(out, fill_value=fill_value, out=out)


def register(registry) -> None:
    # ---------------------------------------------------------------- unary
    registry.define_ckernel("fastop::neg", K.neg, doc="-x.").grad()(neg_grad_rule)
    registry.define_ckernel("fastop::abs", K.abs, doc="|x|.").grad(needs=("x",))(abs_grad_rule)
    registry.define_ckernel(
        "fastop::sign", K.sign, doc="-1, 0 or 1 by the sign of x (nan stays nan)."
    ).grad()(sign_grad_rule)
    registry.define_ckernel(
        "fastop::exp", K.exp,
        doc="e ** x (SIMD; overflows to inf, underflows through subnormals to 0)."
    ).grad(needs=("out",))(exp_grad_rule)
    registry.define_ckernel(
        "fastop::log", K.log, doc="Natural logarithm (SIMD; log(0) = -inf, log(x < 0) = nan)."
    ).grad(needs=("x",))(log_grad_rule)
    registry.define_ckernel(
        "fastop::square", K.square, doc="x * x.").grad(needs=("x",))(square_grad_rule)

    # tanh, sigmoid, relu, sqrt: the gradient is one backward kernel of (y, dy)
    tanh_grad = registry.define_ckernel(
        "fastop::tanh_grad", K.tanh_grad, doc="Backward of tanh from its output: dy * (1 - y^2).")
    tanh_grad.grad(needs=("y", "dy"))(tanh_grad_grad_rule)
    registry.define_ckernel(
        "fastop::tanh", K.tanh, doc="Hyperbolic tangent (SIMD)."
    ).grad_op(tanh_grad, needs=("out", "dout"))

    sigmoid_grad = registry.define_ckernel(
        "fastop::sigmoid_grad", K.sigmoid_grad,
        doc="Backward of sigmoid from its output: dy * y * (1 - y).")
    sigmoid_grad.grad(needs=("y", "dy"))(sigmoid_grad_grad_rule)
    registry.define_ckernel(
        "fastop::sigmoid", K.sigmoid,
        doc="1 / (1 + exp(-x)) (SIMD; accurate for very negative x)."
    ).grad_op(sigmoid_grad, needs=("out", "dout"))

    relu_grad = registry.define_ckernel(
        "fastop::relu_grad", K.relu_grad, differentiable=("dy",),
        doc="Backward of relu from its output: dy where y > 0, else 0.")
    relu_grad.grad(needs=("y",))(relu_grad_grad_rule)
    registry.define_ckernel(
        "fastop::relu", K.relu, doc="max(x, 0); nan stays nan."
    ).grad_op(relu_grad, needs=("out", "dout"))

    sqrt_grad = registry.define_ckernel(
        "fastop::sqrt_grad", K.sqrt_grad, doc="Backward of sqrt from its output: dy / (2 y).")
    sqrt_grad.grad(needs=("y", "dy"))(sqrt_grad_grad_rule)
    registry.define_ckernel(
        "fastop::sqrt", K.sqrt, doc="Square root (nan for x < 0)."
    ).grad_op(sqrt_grad, needs=("out", "dout"))

    # ---------------------------------------------------------------- binary
    registry.define_ckernel(
        "fastop::add", K.add, doc="x + y."
    ).grad(needs=("x", "y"), reads={})(add_grad_rule)
    registry.define_ckernel(
        "fastop::subtract", K.subtract, doc="x - y."
    ).grad(needs=("x", "y"), reads={})(subtract_grad_rule)
    registry.define_ckernel(
        "fastop::multiply", K.multiply, doc="x * y."
    ).grad(needs=("x", "y"), reads={"x": ("y",), "y": ("x",)})(multiply_grad_rule)
    registry.define_ckernel(
        "fastop::divide", K.divide, int_to_float=True,
        doc="x / y (true division: integers compute in float32)."
    ).grad(needs=("x", "y", "out"), reads={"x": ("y",), "y": ("y", "out")})(divide_grad_rule)
    registry.define_ckernel(
        "fastop::pow", K.pow, doc="x ** y (integers: y must be >= 0)."
    ).grad(needs=("x", "y", "out"), reads={"x": ("x", "y"), "y": ("x", "out")})(pow_grad_rule)
    registry.define_ckernel(
        "fastop::maximum", K.maximum,
        doc="The larger of x and y; nan wins, like numpy.maximum."
    ).grad(needs=("x", "y"))(maximum_grad_rule)
    registry.define_ckernel(
        "fastop::minimum", K.minimum,
        doc="The smaller of x and y; nan wins, like numpy.minimum."
    ).grad(needs=("x", "y"))(minimum_grad_rule)

    # ---------------------------------------------------------------- comparisons (bool)
    registry.define_ckernel("fastop::equal", K.equal, differentiable=(),
                            doc="x == y, elementwise (bool).")
    registry.define_ckernel("fastop::not_equal", K.not_equal, differentiable=(),
                            doc="x != y, elementwise (bool).")
    registry.define_ckernel("fastop::less_than", K.less_than, differentiable=(),
                            doc="x < y, elementwise (bool).")
    registry.define_ckernel("fastop::less_equal", K.less_equal, differentiable=(),
                            doc="x <= y, elementwise (bool).")
    registry.define_ckernel("fastop::greater_than", K.greater_than, differentiable=(),
                            doc="x > y, elementwise (bool).")
    registry.define_ckernel("fastop::greater_equal", K.greater_equal, differentiable=(),
                            doc="x >= y, elementwise (bool).")

    # ---------------------------------------------------------------- select, cast, fill
    registry.define_ckernel(
        "fastop::where", K.where, differentiable=("x", "y"), promotes=("x", "y"),
        doc="x where condition (bool) holds, else y; all three broadcast together."
    ).grad(needs=("condition", "x", "y"),
           reads={"x": ("condition",), "y": ("condition",)})(where_grad_rule)
    registry.define_ckernel(
        "fastop::cast", K.cast, attrs={"dtype": AttrSpec("dtype", DType)},
        integer_grads=True,
        doc="x converted to dtype (to bool: x != 0; float to int truncates)."
    ).grad(needs=("x",), reads={})(cast_grad_rule)
    registry.define_ckernel(
        "fastop::full_like", K.full_like, differentiable=(),
        attrs={"fill_value": AttrSpec("fill_value", object, 0.0)},
        doc="A tensor of x's shape and dtype, every element fill_value.")
    full = registry.define(
        "fastop::full", inputs=(), outputs=("out",),
        attrs={"shape": list, "fill_value": AttrSpec("fill_value", object, 0.0),
               "dtype": AttrSpec("dtype", DType, float32)},
        doc="A new tensor of `shape` and `dtype`, every element fill_value.")
    full.meta(full_meta)
    full.kernel()(full_kernel)


def samples() -> dict[str, list[Any]]:
    """opcheck's inputs for this family's ops (backward kernels are checked through
    their forward op): float32, float64 and the integer kernels, broadcasting operands,
    values away from the kinks of abs/sign/relu/maximum and in the domains of log, sqrt
    and pow."""
    from fastop.ops.builtin._sampling import Values, sample   # tests and tools only
    v = Values(1)
    f32 = "float32"
    bools = np.array([[True, False, True], [False, True, True]])
    ints = np.arange(-3, 3).reshape(2, 3)                  # int64; int32 below
    ints32 = np.array([1, 0, 2], dtype=np.int32)
    compare = [[v.normal(2, 3), v.normal(3)],
               [v.distinct(4, dtype=f32), v.distinct(4, dtype=f32)], [ints, ints[::-1]]]
    return {
        "fastop::neg": [[v.normal(2, 3)], [v.normal(4, dtype=f32)], [ints]],
        "fastop::abs": [[v.away(2, 3)], [v.away(5, dtype=f32)], [ints32]],
        "fastop::sign": [[v.away(2, 3)], [v.away(5, dtype=f32)], [ints]],
        "fastop::exp": [[v.normal(2, 3)], [v.normal(5, dtype=f32)]],
        "fastop::log": [[v.positive(2, 3)], [v.positive(5, dtype=f32)]],
        "fastop::square": [[v.normal(2, 3)], [v.normal(5, dtype=f32)], [ints32]],
        "fastop::tanh": [[v.normal(2, 3)], [v.normal(5, dtype=f32)]],
        "fastop::sigmoid": [[v.normal(2, 3)], [v.normal(5, dtype=f32)]],
        "fastop::relu": [[v.away(2, 3)], [v.away(5, dtype=f32)], [ints]],
        "fastop::sqrt": [[v.positive(2, 3)], [v.positive(5, dtype=f32)]],
        "fastop::add": [[v.normal(2, 3), v.normal(3)],
                        [v.normal(2, 1, dtype=f32), v.normal(3, dtype=f32)], [ints, ints[0]]],
        "fastop::subtract": [[v.normal(2, 1), v.normal(3)],
                             [v.normal(2, 3, dtype=f32), v.normal(2, 3, dtype=f32)],
                             [ints32, ints32]],
        "fastop::multiply": [[v.normal(2, 3), v.normal(1, 3)],
                             [v.normal(3, dtype=f32), v.normal(2, 3, dtype=f32)],
                             [ints, ints[:1]]],
        "fastop::divide": [[v.normal(2, 3), v.away(3)],
                           [v.normal(2, 3, dtype=f32), v.away(2, 3, dtype=f32)]],
        "fastop::pow": [[v.positive(2, 3), v.normal(3)],
                        [v.positive(2, 3, dtype=f32), v.positive(2, 3, dtype=f32)],
                        [ints, np.abs(ints)]],
        "fastop::maximum": [[v.normal(2, 3), v.away(3)],
                            [v.away(2, 3, dtype=f32), v.normal(2, 3, dtype=f32) + 2.0],
                            [ints, ints[::-1]]],
        "fastop::minimum": [[v.normal(2, 3), v.away(3)],
                            [v.away(2, 3, dtype=f32), v.normal(2, 3, dtype=f32) + 2.0],
                            [ints32, ints32[::-1]]],
        "fastop::equal": compare,
        "fastop::not_equal": compare,
        "fastop::less_than": compare,
        "fastop::less_equal": compare,
        "fastop::greater_than": compare,
        "fastop::greater_equal": compare,
        "fastop::where": [[bools, v.normal(2, 3), v.normal(3)],
                          [bools, v.normal(2, 3, dtype=f32), v.normal(2, 3, dtype=f32)]],
        # to float64 only: the finite differences of a float32 result are too coarse
        "fastop::cast": [sample(v.normal(2, 3), dtype="float64"),
                         sample(v.normal(2, 3, dtype=f32), dtype="float64")],
        "fastop::full_like": [sample(v.normal(2, 3), fill_value=2.0),
                              sample(v.normal(4, dtype=f32), fill_value=-1.5)],
        "fastop::full": [sample(shape=[2, 3], fill_value=2.0, dtype="float64"),
                         sample(shape=[4], fill_value=0.5, dtype="float32")],
    }
