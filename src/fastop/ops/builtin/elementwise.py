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

from fastop._core import elementwise as _kernels
from fastop._core.storage import DType, empty, float32
from fastop.ops._dispatch import same_shape
from fastop.ops._registry import AttrSpec, TensorMeta
from fastop.ops.builtin._table import B

__all__ = ["register", "unbroadcast", "shape_attr"]

UNARY_DOCS = {
    "neg": "-x.",
    "abs": "|x|.",
    "sign": "-1, 0 or 1 by the sign of x (nan stays nan).",
    "exp": "e ** x (SIMD; overflows to inf, underflows through subnormals to 0).",
    "log": "Natural logarithm (SIMD; log(0) = -inf, log(x < 0) = nan).",
    "sqrt": "Square root (nan for x < 0).",
    "square": "x * x.",
    "tanh": "Hyperbolic tangent (SIMD).",
    "sigmoid": "1 / (1 + exp(-x)) (SIMD; accurate for very negative x).",
    "relu": "max(x, 0); nan stays nan.",
}

# backward kernels of unary ops, from the forward output y and the output gradient dy
BACKWARD_DOCS = {
    "tanh": "dy * (1 - y^2)",
    "sigmoid": "dy * y * (1 - y)",
    "relu": "dy where y > 0, else 0",
    "sqrt": "dy / (2 y)",
}

BINARY_DOCS = {
    "add": "x + y.",
    "subtract": "x - y.",
    "multiply": "x * y.",
    "divide": "x / y (true division: integers compute in float32).",
    "pow": "x ** y (integers: y must be >= 0).",
    "maximum": "The larger of x and y; nan wins, like numpy.maximum.",
    "minimum": "The smaller of x and y; nan wins, like numpy.minimum.",
}

COMPARE_DOCS = {
    "equal": "x == y", "not_equal": "x != y", "less_than": "x < y",
    "less_equal": "x <= y", "greater_than": "x > y", "greater_equal": "x >= y",
}


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

def neg_grad(dout):
    return B.neg(dout)


def abs_grad(x, dout):
    return B.multiply(dout, B.sign(x))


def sign_grad(dout):
    # zero, written as dout * 0 so that it stays differentiable (in dout) again
    return B.multiply(dout, 0)


def exp_grad(out, dout):
    return B.multiply(dout, out)


def log_grad(x, dout):
    return B.divide(dout, x)


def square_grad(x, dout):
    return B.multiply(dout, B.multiply(x, 2))


# Rules of the backward kernels (dx = dy * f'(y)); g is the gradient arriving at dx.

def tanh_grad_grad(y, dy, g):
    return B.multiply(B.multiply(g, dy), B.multiply(y, -2)), B.tanh_grad(y, g)


def sigmoid_grad_grad(y, dy, g):
    return (B.multiply(B.multiply(g, dy), B.add(B.multiply(y, -2), 1)),
            B.sigmoid_grad(y, g))


def relu_grad_grad(y, g):
    return None, B.relu_grad(y, g)


def sqrt_grad_grad(y, dy, g):
    return (B.divide(B.multiply(B.multiply(g, dy), -0.5), B.square(y)),
            B.sqrt_grad(y, g))


# --------------------------------------------------------------------------- binary rules

def add_grad(x, y, dout, needs_input_grad=None):
    want_x, want_y = _wanted(needs_input_grad, 2)
    return (unbroadcast(dout, x) if want_x else None,
            unbroadcast(dout, y) if want_y else None)


def subtract_grad(x, y, dout, needs_input_grad=None):
    want_x, want_y = _wanted(needs_input_grad, 2)
    return (unbroadcast(dout, x) if want_x else None,
            unbroadcast(B.neg(dout), y) if want_y else None)


def multiply_grad(x, y, dout, needs_input_grad=None):
    want_x, want_y = _wanted(needs_input_grad, 2)
    return (unbroadcast(B.multiply(dout, y), x) if want_x else None,
            unbroadcast(B.multiply(dout, x), y) if want_y else None)


def divide_grad(x, y, out, dout, needs_input_grad=None):
    want_x, want_y = _wanted(needs_input_grad, 2)
    return (unbroadcast(B.divide(dout, y), x) if want_x else None,
            unbroadcast(B.neg(B.divide(B.multiply(dout, out), y)), y) if want_y else None)


def pow_grad(x, y, out, dout, needs_input_grad=None):
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


def maximum_grad(x, y, dout):
    return _select_grads(B.greater_equal(x, y), x, y, dout)


def minimum_grad(x, y, dout):
    return _select_grads(B.less_equal(x, y), x, y, dout)


def where_grad(condition, x, y, dout):
    return (None, *_select_grads(condition, x, y, dout))


def cast_grad(x, dout, dtype):
    return B.cast(dout, dtype=x.dtype)


# --------------------------------------------------------------------------- creation

def full_meta(shape, fill_value, dtype):
    return TensorMeta(shape, dtype)


def full_kernel(shape, fill_value, dtype):
    out = empty(shape, dtype)
    return _kernels.full_like(out, fill_value=fill_value, out=out)


def register(registry) -> None:
    def unary(name: str) -> Any:
        return registry.define_ckernel(f"fastop::{name}", getattr(_kernels, name),
                                       doc=UNARY_DOCS[name])

    for name, rule in (("neg", neg_grad), ("sign", sign_grad)):
        unary(name).grad()(rule)
    for name, rule in (("abs", abs_grad), ("log", log_grad), ("square", square_grad)):
        unary(name).grad(needs=("x",))(rule)
    unary("exp").grad(needs=("out",))(exp_grad)

    # tanh, sigmoid, relu, sqrt: the gradient is one backward kernel of (y, dy)
    backward_rules = {"tanh": (tanh_grad_grad, ("y", "dy")),
                      "sigmoid": (sigmoid_grad_grad, ("y", "dy")),
                      "relu": (relu_grad_grad, ("y",)),
                      "sqrt": (sqrt_grad_grad, ("y", "dy"))}
    for name, formula in BACKWARD_DOCS.items():
        rule, needs = backward_rules[name]
        backward = registry.define_ckernel(
            f"fastop::{name}_grad", getattr(_kernels, f"{name}_grad"),
            differentiable=("dy",) if name == "relu" else None,
            doc=f"Backward of {name} from its output: {formula}.")
        backward.grad(needs=needs)(rule)
        unary(name).grad_op(backward, needs=("out", "dout"))

    def binary(name: str, **options: Any) -> Any:
        return registry.define_ckernel(f"fastop::{name}", getattr(_kernels, name),
                                       doc=BINARY_DOCS[name], **options)

    binary("add").grad(needs=("x", "y"), reads={})(add_grad)
    binary("subtract").grad(needs=("x", "y"), reads={})(subtract_grad)
    binary("multiply").grad(needs=("x", "y"), reads={"x": ("y",), "y": ("x",)})(
        multiply_grad)
    binary("divide", int_to_float=True).grad(
        needs=("x", "y", "out"), reads={"x": ("y",), "y": ("y", "out")})(divide_grad)
    binary("pow").grad(needs=("x", "y", "out"),
                       reads={"x": ("x", "y"), "y": ("x", "out")})(pow_grad)
    binary("maximum").grad(needs=("x", "y"))(maximum_grad)
    binary("minimum").grad(needs=("x", "y"))(minimum_grad)

    for name, formula in COMPARE_DOCS.items():
        registry.define_ckernel(f"fastop::{name}", getattr(_kernels, name),
                                differentiable=(), doc=f"{formula}, elementwise (bool).")

    registry.define_ckernel(
        "fastop::where", _kernels.where, differentiable=("x", "y"), promotes=("x", "y"),
        doc="x where condition (bool) holds, else y; all three broadcast together."
    ).grad(needs=("condition", "x", "y"),
           reads={"x": ("condition",), "y": ("condition",)})(where_grad)

    registry.define_ckernel(
        "fastop::cast", _kernels.cast, attrs={"dtype": AttrSpec("dtype", DType)},
        doc="x converted to dtype (to bool: x != 0; float to int truncates)."
    ).grad(needs=("x",), reads={})(cast_grad)

    registry.define_ckernel(
        "fastop::full_like", _kernels.full_like, differentiable=(),
        attrs={"fill_value": AttrSpec("fill_value", object, 0.0)},
        doc="A tensor of x's shape and dtype, every element fill_value.")

    full = registry.define(
        "fastop::full", inputs=(), outputs=("out",),
        attrs={"shape": list, "fill_value": AttrSpec("fill_value", object, 0.0),
               "dtype": AttrSpec("dtype", DType, float32)},
        doc="A new tensor of `shape` and `dtype`, every element fill_value.")
    full.meta(full_meta)
    full.kernel()(full_kernel)
