"""Built-in activations with parameters or special functions (Cython kernels from
:mod:`fastop._core.activation`) and their gradient rules.

``gelu(x, approximate=False)``, ``silu(x)``, ``leaky_relu(x, negative_slope=0.01)``,
``softplus(x, beta=1.0, threshold=20.0)`` (PaddlePaddle's definitions), each with a
backward kernel ``<name>_grad(x, dout, ...) -> dout * f'(x)``.

Rules: each op → its backward kernel (``grad_op``); each backward kernel → ``d dout =
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
from typing import Any

import numpy as np

from fastop._core import activation as K
from fastop.ops.builtin._table import B

__all__ = ["register", "samples"]

_K = math.sqrt(2.0 / math.pi)
_C = 0.044715


def _one_minus(v: Any) -> Any:
    return B.subtract(1.0, v)


# -- gelu -----------------------------------------------------------------------------

def gelu_second(x: Any, approximate: bool) -> Any:
    """gelu''(x)."""
    if not approximate:
        phi = B.multiply(B.exp(B.multiply(B.square(x), -0.5)),
                         1.0 / math.sqrt(2.0 * math.pi))
        return B.multiply(phi, B.subtract(2.0, B.square(x)))
    # f = x s, s = sigmoid(2u): f'' = q (4 u' + 4 x u'^2 (1 - 2 s) + 2 x u''),
    # q = s (1 - s), u' = k (1 + 3 c x^2), u'' = 6 k c x
    x2 = B.square(x)
    s = B.sigmoid(B.multiply(B.add(x, B.multiply(B.multiply(x2, x), _C)), 2.0 * _K))
    du = B.multiply(B.add(B.multiply(x2, 3.0 * _C), 1.0), _K)
    q = B.multiply(s, _one_minus(s))
    curve = B.multiply(B.multiply(B.multiply(x, B.square(du)),
                                  B.subtract(1.0, B.multiply(s, 2.0))), 4.0)
    inner = B.add(B.add(B.multiply(du, 4.0), curve), B.multiply(x2, 12.0 * _K * _C))
    return B.multiply(q, inner)


def gelu_grad_grad_rule(x, dout, g, approximate):
    """d x = g dout gelu''(x), d dout = gelu_grad(x, g)."""
    return (B.multiply(B.multiply(g, dout), gelu_second(x, approximate)),
            B.gelu_grad(x, g, approximate=approximate))


# -- silu -----------------------------------------------------------------------------

def silu_second(x: Any) -> Any:
    """silu''(x) = s (1 - s) (2 + x (1 - 2 s)), s = sigmoid(x)."""
    s = B.sigmoid(x)
    return B.multiply(B.multiply(s, _one_minus(s)),
                      B.add(B.multiply(x, B.subtract(1.0, B.multiply(s, 2.0))), 2.0))


def silu_grad_grad_rule(x, dout, g):
    """d x = g dout silu''(x), d dout = silu_grad(x, g)."""
    return B.multiply(B.multiply(g, dout), silu_second(x)), B.silu_grad(x, g)


# -- leaky_relu -----------------------------------------------------------------------

def leaky_relu_grad_grad_rule(x, dout, g, negative_slope):
    """d x = 0 (piecewise linear; g * 0 keeps it recorded), d dout =
    leaky_relu_grad(x, g)."""
    return B.multiply(g, 0.0), B.leaky_relu_grad(x, g, negative_slope=negative_slope)


# -- softplus -------------------------------------------------------------------------

def softplus_second(x: Any, beta: float, threshold: float) -> Any:
    """softplus''(x) = beta s (1 - s), s = sigmoid(beta x); 0 above the threshold."""
    z = B.multiply(x, beta)
    s = B.sigmoid(z)
    curve = B.multiply(B.multiply(s, _one_minus(s)), beta)
    return B.where(B.greater_than(z, threshold), B.full_like(curve, fill_value=0.0), curve)


def softplus_grad_grad_rule(x, dout, g, beta, threshold):
    """d x = g dout softplus''(x), d dout = softplus_grad(x, g)."""
    return (B.multiply(B.multiply(g, dout), softplus_second(x, beta, threshold)),
            B.softplus_grad(x, g, beta=beta, threshold=threshold))


def register(registry) -> None:
    gelu_grad = registry.define_ckernel(
        "fastop::gelu_grad", K.gelu_grad, attrs={"approximate": False},
        doc="Backward of gelu: dout * gelu'(x).")
    gelu_grad.grad(needs=("x", "dout"))(gelu_grad_grad_rule)
    registry.define_ckernel(
        "fastop::gelu", K.gelu, attrs={"approximate": False},
        doc="0.5 x (1 + erf(x / sqrt 2)); approximate: 0.5 x (1 + tanh(sqrt(2/pi) "
            "(x + 0.044715 x^3)))."
    ).grad_op(gelu_grad, needs=("x", "dout"))

    silu_grad = registry.define_ckernel(
        "fastop::silu_grad", K.silu_grad, doc="Backward of silu: dout * s (1 + x (1 - s)).")
    silu_grad.grad(needs=("x", "dout"))(silu_grad_grad_rule)
    registry.define_ckernel(
        "fastop::silu", K.silu, doc="x * sigmoid(x)."
    ).grad_op(silu_grad, needs=("x", "dout"))

    leaky_relu_grad = registry.define_ckernel(
        "fastop::leaky_relu_grad", K.leaky_relu_grad, attrs={"negative_slope": 0.01},
        doc="Backward of leaky_relu: dout where x > 0, negative_slope * dout elsewhere.")
    leaky_relu_grad.grad(needs=("x", "dout"))(leaky_relu_grad_grad_rule)
    registry.define_ckernel(
        "fastop::leaky_relu", K.leaky_relu, attrs={"negative_slope": 0.01},
        doc="x where x > 0, negative_slope * x elsewhere."
    ).grad_op(leaky_relu_grad, needs=("x", "dout"))

    softplus_grad = registry.define_ckernel(
        "fastop::softplus_grad", K.softplus_grad, attrs={"beta": 1.0, "threshold": 20.0},
        doc="Backward of softplus: dout * sigmoid(beta x), dout above the threshold.")
    softplus_grad.grad(needs=("x", "dout"))(softplus_grad_grad_rule)
    registry.define_ckernel(
        "fastop::softplus", K.softplus, attrs={"beta": 1.0, "threshold": 20.0},
        doc="log(1 + exp(beta x)) / beta, x where beta x > threshold (computed without "
            "overflow)."
    ).grad_op(softplus_grad, needs=("x", "dout"))


def samples() -> dict[str, list[Any]]:
    """opcheck's inputs: float32 and float64, every attribute setting, x away from the
    kinks (leaky_relu's 0, softplus's threshold). The backward kernels, checked through
    their forward op's double gradient, get their own too (their numpy twins are
    compared on them)."""
    from fastop.ops.builtin._sampling import Values, sample   # tests and tools only
    v = Values(7)
    f32 = "float32"
    return {
        "fastop::gelu": [[v.away(2, 3)], sample(v.away(3, 2), approximate=True),
                         [v.normal(4, dtype=f32)]],
        "fastop::silu": [[v.normal(2, 3)], [v.normal(3, dtype=f32)]],
        "fastop::leaky_relu": [sample(v.away(2, 3), negative_slope=0.2),
                               [v.away(2, 2, dtype=f32)]],
        "fastop::softplus": [sample(v.normal(2, 3), beta=1.5),
                             sample(np.array([[-1.2, 0.1, 0.3], [0.7, 1.1, 2.0]]), beta=2.0,
                                    threshold=1.0),
                             [v.normal(3, dtype=f32)]],
        "fastop::gelu_grad": [[v.away(2, 3), v.normal(2, 3)],
                              sample(v.away(3, dtype=f32), v.normal(3, dtype=f32),
                                     approximate=True)],
        "fastop::silu_grad": [[v.normal(2, 3), v.normal(2, 3)],
                              [v.normal(3, dtype=f32), v.normal(3, dtype=f32)]],
        "fastop::leaky_relu_grad": [
            sample(v.away(2, 3), v.normal(2, 3), negative_slope=0.2),
            [v.away(3, dtype=f32), v.normal(3, dtype=f32)]],
        "fastop::softplus_grad": [sample(v.normal(2, 3), v.normal(2, 3), beta=1.5),
                                  sample(np.array([-1.2, 0.1, 0.3, 0.7, 2.0]), v.normal(5),
                                         beta=2.0, threshold=1.0),
                                  [v.normal(3, dtype=f32), v.normal(3, dtype=f32)]],
    }
