"""numpy twins of the activation kernels (:mod:`fastop._core.activation`)."""
from __future__ import annotations

import math

import numpy as np

__all__ = ["gelu", "gelu_grad", "silu", "silu_grad", "leaky_relu", "leaky_relu_grad",
           "softplus", "softplus_grad"]

_erfc = np.vectorize(math.erfc, otypes=[np.float64])
_K = math.sqrt(2.0 / math.pi)


def _typed(fn):
    """Compute in float64, return x's dtype."""
    def wrapper(x, *rest, **attrs):
        out = fn(np.asarray(x, np.float64), *[np.asarray(r, np.float64) for r in rest],
                 **attrs)
        return out.astype(np.asarray(x).dtype)
    wrapper.__name__, wrapper.__doc__ = fn.__name__, fn.__doc__
    return wrapper


def _sigmoid(z):
    """1 / (1 + exp(-z)) without cancellation or overflow on either side."""
    e = np.exp(-np.abs(z))
    return np.where(z >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


@_typed
def gelu(x, approximate=False):
    if approximate:          # 0.5 (1 + tanh(u)) = sigmoid(2u)
        return x * _sigmoid(2.0 * _K * (x + 0.044715 * x ** 3))
    return 0.5 * x * _erfc(-x / math.sqrt(2.0))     # 1 + erf(v) = erfc(-v): no cancelling


@_typed
def gelu_grad(x, dout, approximate=False):
    if approximate:
        s = _sigmoid(2.0 * _K * (x + 0.044715 * x ** 3))
        d = s + 2.0 * x * s * (1 - s) * _K * (1 + 3 * 0.044715 * x * x)
    else:
        d = 0.5 * _erfc(-x / math.sqrt(2.0)) + x * np.exp(-0.5 * x * x) / math.sqrt(
            2.0 * math.pi)
    return dout * d


@_typed
def silu(x):
    return x * _sigmoid(x)


@_typed
def silu_grad(x, dout):
    s = _sigmoid(x)
    return dout * s * (1.0 + x * (1.0 - s))


@_typed
def leaky_relu(x, negative_slope=0.01):
    return np.where(x > 0, x, negative_slope * x)


@_typed
def leaky_relu_grad(x, dout, negative_slope=0.01):
    return np.where(x > 0, dout, negative_slope * dout)


@_typed
def softplus(x, beta=1.0, threshold=20.0):
    z = beta * x
    return np.where(z > threshold, x, np.logaddexp(0.0, z) / beta)


@_typed
def softplus_grad(x, dout, beta=1.0, threshold=20.0):
    z = beta * x
    return np.where(z > threshold, dout, dout * _sigmoid(z))
