"""Built-in activations with parameters or special functions (Cython kernels from
:mod:`fastop._core.activation`) and their gradient rules.

``gelu(x, approximate=False)``, ``silu(x)``, ``leaky_relu(x, negative_slope=0.01)``,
``softplus(x, beta=1.0, threshold=20.0)`` (PaddlePaddle's definitions), each with a
backward kernel ``<name>_grad(x, dout, ...) -> dout * f'(x)``.

Rules: each op → its backward kernel; each backward kernel → ``d dout =
<name>_grad(x, g)`` and ``d x = g * dout * f''(x)``, with f'' written with registered
ops, so double backward works:

    gelu         f'' = phi(x) (2 - x^2),  phi(x) = exp(-x^2 / 2) / sqrt(2 pi)
    approximate  f = x s, s = sigmoid(2u):  f'' = s (1 - s) (4 u' + 4 x u'^2 (1 - 2 s)
                 + 2 x u''),  u = k (x + c x^3), u' = k (1 + 3 c x^2), u'' = 6 k c x
    silu         f'' = s (1 - s) (2 + x (1 - 2 s)),  s = sigmoid(x)
    leaky_relu   f'' = 0
    softplus     f'' = beta s (1 - s),  s = sigmoid(beta x)  (0 above the threshold)
"""
from __future__ import annotations

import math
from typing import Any, Callable

from fastop._core import activation as _kernels

__all__ = ["register"]

_K = math.sqrt(2.0 / math.pi)
_C = 0.044715


def register(registry) -> None:
    get = registry.get
    add, multiply, subtract = get("fastop::add"), get("fastop::multiply"), \
        get("fastop::subtract")
    square, exp, sigmoid = get("fastop::square"), get("fastop::exp"), \
        get("fastop::sigmoid")
    where, greater_than, full_like = get("fastop::where"), get("fastop::greater_than"), \
        get("fastop::full_like")

    def one_minus(v: Any) -> Any:
        return subtract(1.0, v)

    def gelu_second(x: Any, approximate: bool) -> Any:
        if not approximate:
            phi = multiply(exp(multiply(square(x), -0.5)), 1.0 / math.sqrt(2.0 * math.pi))
            return multiply(phi, subtract(2.0, square(x)))
        # f = x s, s = sigmoid(2u): f'' = q (4 u' + 4 x u'^2 (1 - 2 s) + 2 x u''),
        # q = s (1 - s), u' = k (1 + 3 c x^2), u'' = 6 k c x
        x2 = square(x)
        s = sigmoid(multiply(add(x, multiply(multiply(x2, x), _C)), 2.0 * _K))
        du = multiply(add(multiply(x2, 3.0 * _C), 1.0), _K)
        q = multiply(s, one_minus(s))
        inner = add(add(multiply(du, 4.0),
                        multiply(multiply(multiply(x, square(du)), subtract(1.0, multiply(
                            s, 2.0))), 4.0)),
                    multiply(x2, 12.0 * _K * _C))
        return multiply(q, inner)

    def silu_second(x: Any) -> Any:
        s = sigmoid(x)
        return multiply(multiply(s, one_minus(s)),
                        add(multiply(x, subtract(1.0, multiply(s, 2.0))), 2.0))

    def softplus_second(x: Any, beta: float, threshold: float) -> Any:
        z = multiply(x, beta)
        s = sigmoid(z)
        curve = multiply(multiply(s, one_minus(s)), beta)
        return where(greater_than(z, threshold), full_like(curve, fill_value=0.0), curve)

    def define(name: str, attrs: dict[str, Any], doc: str, grad_doc: str,
               second: Callable[..., Any] | None) -> None:
        """The op, its backward kernel and both rules."""
        op = registry.define_ckernel(f"fastop::{name}", getattr(_kernels, name),
                                     attrs=dict(attrs), doc=doc)
        grad_op = registry.define_ckernel(f"fastop::{name}_grad",
                                          getattr(_kernels, f"{name}_grad"),
                                          attrs=dict(attrs), doc=grad_doc)

        def activation_grad(x, dout, **attrs):
            return (grad_op(x, dout, **attrs),)

        def activation_grad_grad(x, dout, g, **attrs):
            d_dout = grad_op(x, g, **attrs)
            if second is None:                  # piecewise linear: f'' = 0
                return multiply(g, 0.0), d_dout
            return multiply(multiply(g, dout), second(x, **attrs)), d_dout

        activation_grad.__name__ = f"{name}_grad"
        activation_grad_grad.__name__ = f"{name}_grad_grad"
        op.grad(needs=("x",))(activation_grad)
        grad_op.grad(needs=("x", "dout"))(activation_grad_grad)

    define("gelu", {"approximate": False},
           "0.5 x (1 + erf(x / sqrt 2)); approximate: 0.5 x (1 + tanh(sqrt(2/pi) "
           "(x + 0.044715 x^3))).",
           "Backward of gelu: dout * gelu'(x).", gelu_second)
    define("silu", {}, "x * sigmoid(x).", "Backward of silu: dout * s (1 + x (1 - s)).",
           silu_second)
    define("leaky_relu", {"negative_slope": 0.01},
           "x where x > 0, negative_slope * x elsewhere.",
           "Backward of leaky_relu: dout where x > 0, negative_slope * dout elsewhere.",
           None)
    define("softplus", {"beta": 1.0, "threshold": 20.0},
           "log(1 + exp(beta x)) / beta, x where beta x > threshold (computed without "
           "overflow).",
           "Backward of softplus: dout * sigmoid(beta x), dout above the threshold.",
           softplus_second)
