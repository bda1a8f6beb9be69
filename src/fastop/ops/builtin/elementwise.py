"""Built-in elementwise ops (Cython kernels from :mod:`fastop._core.elementwise`) and
their gradient rules.

Unary ``neg abs sign exp log sqrt square tanh sigmoid relu`` keep x's dtype; backward
kernels ``tanh_grad sigmoid_grad relu_grad sqrt_grad (y, dy)`` take the forward output;
binary ``add subtract multiply divide pow maximum minimum`` and the comparisons
``equal not_equal less_than less_equal greater_than greater_equal`` (bool output) take
two tensors of one dtype (a Python scalar takes the tensor's dtype) and broadcast by
numpy's rules; ``where(condition, x, y)``, ``cast(x, dtype=)``, ``full_like(x,
fill_value=)`` and ``full(shape=, fill_value=, dtype=)``.

Every gradient rule is a composition of registered ops looked up when it runs, so it
works on whatever values the current mode passes (DenseTensors, eager Tensors, static
Variables) and is differentiable again: the backward kernels have rules of their own.
Gradients of broadcast operands are summed back to the operand's shape with
``fastop::sum_to_shape``.
"""
from __future__ import annotations

from typing import Any

from fastop._core import elementwise as _kernels
from fastop._core.storage import DType, empty, float32
from fastop.ops._registry import AttrSpec, TensorMeta

__all__ = ["register"]

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

BINARY_DOCS = {
    "add": "x + y.",
    "subtract": "x - y.",
    "multiply": "x * y.",
    "divide": "x / y (true division; floats only).",
    "pow": "x ** y (integers: y must be >= 0).",
    "maximum": "The larger of x and y; nan wins, like numpy.maximum.",
    "minimum": "The smaller of x and y; nan wins, like numpy.minimum.",
}

COMPARE_DOCS = {
    "equal": "x == y", "not_equal": "x != y", "less_than": "x < y",
    "less_equal": "x <= y", "greater_than": "x > y", "greater_equal": "x >= y",
}


def _shape_attr(shape: Any) -> list[int]:
    """A value's shape as a `shape=` attribute: unknown dims (None, -1) as -1."""
    return [-1 if d is None or d < 0 else int(d) for d in shape]


def register(registry) -> None:
    def op(name: str) -> Any:
        return registry.get(f"fastop::{name}")

    def unbroadcast(g: Any, like: Any) -> Any:
        """g summed down to the shape of `like` (the gradient of a broadcast)."""
        if list(g.shape) == list(like.shape):
            return g
        return op("sum_to_shape")(g, shape=_shape_attr(like.shape))

    def unary(name: str) -> Any:
        return registry.define_ckernel(f"fastop::{name}", getattr(_kernels, name),
                                       doc=UNARY_DOCS[name])

    # -- unary math -------------------------------------------------------------
    @unary("neg").grad()
    def _(dy):
        return (op("neg")(dy),)

    @unary("abs").grad(needs=("x",))
    def _(x, dy):
        return (op("multiply")(dy, op("sign")(x)),)

    @unary("sign").grad()
    def _(dy):
        # zero, written as dy * 0 so that it stays differentiable (in dy) again
        return (op("multiply")(dy, 0),)

    @unary("exp").grad(needs=("out",))
    def _(out, dy):
        return (op("multiply")(dy, out),)

    @unary("log").grad(needs=("x",))
    def _(x, dy):
        return (op("divide")(dy, x),)

    @unary("sqrt").grad(needs=("out",))
    def _(out, dy):
        return (op("sqrt_grad")(out, dy),)

    @unary("square").grad(needs=("x",))
    def _(x, dy):
        return (op("multiply")(dy, op("multiply")(x, 2)),)

    @unary("tanh").grad(needs=("out",))
    def _(out, dy):
        return (op("tanh_grad")(out, dy),)

    @unary("sigmoid").grad(needs=("out",))
    def _(out, dy):
        return (op("sigmoid_grad")(out, dy),)

    @unary("relu").grad(needs=("out",))
    def _(out, dy):
        return (op("relu_grad")(out, dy),)

    # -- backward kernels, differentiable again ------------------------------------
    # Each is dx = dy * f'(y); below g is the gradient arriving at dx.
    tanh_grad = registry.define_ckernel(
        "fastop::tanh_grad", _kernels.tanh_grad,
        doc="Backward of tanh from its output: dy * (1 - y^2).")

    @tanh_grad.grad(needs=("y", "dy"))
    def _(y, dy, g):
        mul = op("multiply")
        return mul(mul(g, dy), mul(y, -2)), op("tanh_grad")(y, g)

    sigmoid_grad = registry.define_ckernel(
        "fastop::sigmoid_grad", _kernels.sigmoid_grad,
        doc="Backward of sigmoid from its output: dy * y * (1 - y).")

    @sigmoid_grad.grad(needs=("y", "dy"))
    def _(y, dy, g):
        mul = op("multiply")
        return (mul(mul(g, dy), op("add")(mul(y, -2), 1)),
                op("sigmoid_grad")(y, g))

    relu_grad = registry.define_ckernel(
        "fastop::relu_grad", _kernels.relu_grad, differentiable=("dy",),
        doc="Backward of relu from its output: dy where y > 0, else 0.")

    @relu_grad.grad(needs=("y",))
    def _(y, g):
        return None, op("relu_grad")(y, g)

    sqrt_grad = registry.define_ckernel(
        "fastop::sqrt_grad", _kernels.sqrt_grad,
        doc="Backward of sqrt from its output: dy / (2 y).")

    @sqrt_grad.grad(needs=("y", "dy"))
    def _(y, dy, g):
        mul = op("multiply")
        return (op("divide")(mul(mul(g, dy), -0.5), op("square")(y)),
                op("sqrt_grad")(y, g))

    # -- binary arithmetic ----------------------------------------------------------
    def binary(name: str) -> Any:
        return registry.define_ckernel(f"fastop::{name}", getattr(_kernels, name),
                                       doc=BINARY_DOCS[name])

    @binary("add").grad(needs=("x", "y"), reads={})
    def _(x, y, g):
        return unbroadcast(g, x), unbroadcast(g, y)

    @binary("subtract").grad(needs=("x", "y"), reads={})
    def _(x, y, g):
        return unbroadcast(g, x), unbroadcast(op("neg")(g), y)

    @binary("multiply").grad(needs=("x", "y"), reads={"x": ("y",), "y": ("x",)})
    def _(x, y, g):
        mul = op("multiply")
        return unbroadcast(mul(g, y), x), unbroadcast(mul(g, x), y)

    @binary("divide").grad(needs=("x", "y", "out"), reads={"x": ("y",), "y": ("y", "out")})
    def _(x, y, out, g):
        div = op("divide")
        return (unbroadcast(div(g, y), x),
                unbroadcast(op("neg")(div(op("multiply")(g, out), y)), y))

    @binary("pow").grad(needs=("x", "y", "out"),
                        reads={"x": ("x", "y"), "y": ("x", "out")})
    def _(x, y, out, g):
        mul = op("multiply")
        dx = mul(g, mul(y, op("pow")(x, op("subtract")(y, 1))))
        dy = mul(mul(g, out), op("log")(x))
        return unbroadcast(dx, x), unbroadcast(dy, y)

    def select_grads(mask: Any, x: Any, y: Any, g: Any) -> tuple[Any, Any]:
        """g routed to x where mask holds, to y elsewhere."""
        zeros = op("full_like")(g, fill_value=0)
        where = op("where")
        return unbroadcast(where(mask, g, zeros), x), unbroadcast(where(mask, zeros, g), y)

    @binary("maximum").grad(needs=("x", "y"))
    def _(x, y, g):
        return select_grads(op("greater_equal")(x, y), x, y, g)

    @binary("minimum").grad(needs=("x", "y"))
    def _(x, y, g):
        return select_grads(op("less_equal")(x, y), x, y, g)

    # -- comparisons (bool output, no gradient) ---------------------------------------
    for name, formula in COMPARE_DOCS.items():
        registry.define_ckernel(f"fastop::{name}", getattr(_kernels, name),
                                differentiable=(),
                                doc=f"{formula}, elementwise (bool).")

    # -- selection, conversion, creation ---------------------------------------------
    where = registry.define_ckernel(
        "fastop::where", _kernels.where, differentiable=("x", "y"),
        doc="x where condition (bool) holds, else y; all three broadcast together.")

    @where.grad(needs=("condition", "x", "y"),
                reads={"x": ("condition",), "y": ("condition",)})
    def _(condition, x, y, g):
        return (None, *select_grads(condition, x, y, g))

    cast = registry.define_ckernel(
        "fastop::cast", _kernels.cast, attrs={"dtype": AttrSpec("dtype", DType)},
        doc="x converted to dtype (to bool: x != 0; float to int truncates).")

    @cast.grad(needs=("x",), reads={})
    def _(x, g, dtype):
        return (op("cast")(g, dtype=x.dtype),)

    registry.define_ckernel(
        "fastop::full_like", _kernels.full_like, differentiable=(),
        attrs={"fill_value": AttrSpec("fill_value", object, 0.0)},
        doc="A tensor of x's shape and dtype, every element fill_value.")

    full = registry.define(
        "fastop::full", inputs=(), outputs=("out",),
        attrs={"shape": list, "fill_value": AttrSpec("fill_value", object, 0.0),
               "dtype": AttrSpec("dtype", DType, float32)},
        doc="A new tensor of `shape` and `dtype`, every element fill_value.")

    @full.meta
    def _(shape, fill_value, dtype):
        return TensorMeta(shape, dtype)

    @full.kernel()
    def _(shape, fill_value, dtype):
        out = empty(shape, dtype)
        return _kernels.full_like(out, fill_value=fill_value, out=out)
