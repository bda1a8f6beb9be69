"""Pure-numpy twins of the elementwise kernels (:mod:`fastop._core.elementwise`).

Same names, same inputs, same result dtypes: the oracle the kernel tests compare with.
Binary ops take operands of one dtype and broadcast by numpy's rules; comparisons
return bool; unary math keeps the input's dtype.
"""
from __future__ import annotations

import numpy as np

__all__ = ["neg", "abs", "sign", "exp", "log", "sqrt", "square", "tanh", "sigmoid", "relu",
           "tanh_grad", "sigmoid_grad", "relu_grad", "sqrt_grad",
           "add", "subtract", "multiply", "divide", "pow", "maximum", "minimum",
           "equal", "not_equal", "less_than", "less_equal", "greater_than", "greater_equal",
           "where", "cast", "full", "full_like"]


def neg(x):
    return np.negative(x)


def abs(x):  # noqa: A001 - the op's name
    return np.abs(x)


def sign(x):
    return np.sign(x)


def exp(x):
    return np.exp(x)


def log(x):
    return np.log(x)


def sqrt(x):
    return np.sqrt(x)


def square(x):
    return np.square(x)


def tanh(x):
    return np.tanh(x)


def sigmoid(x):
    """1 / (1 + exp(-x)), written as exp(x) / (1 + exp(x)) for x < 0 so that it never
    overflows and stays accurate for very negative x."""
    x = np.asarray(x)
    z = np.exp(-np.abs(x))
    return np.where(x < 0, z / (1 + z), 1 / (1 + z)).astype(x.dtype)


def relu(x):
    return np.maximum(x, np.zeros((), np.asarray(x).dtype))


def tanh_grad(y, dy):
    """Gradient of tanh from its output y: dy * (1 - y^2)."""
    return dy * (1 - y * y)


def sigmoid_grad(y, dy):
    """Gradient of sigmoid from its output y: dy * y * (1 - y)."""
    return dy * y * (1 - y)


def relu_grad(y, dy):
    """Gradient of relu from its output y: dy where y > 0, else 0."""
    return np.where(y > 0, dy, np.zeros((), np.asarray(dy).dtype))


def sqrt_grad(y, dy):
    """Gradient of sqrt from its output y: dy / (2 y)."""
    return 0.5 * dy / y


def add(x, y):
    return np.add(x, y)


def subtract(x, y):
    return np.subtract(x, y)


def multiply(x, y):
    return np.multiply(x, y)


def divide(x, y):
    return np.true_divide(x, y)


def pow(x, y):  # noqa: A001
    return np.power(x, y)


def maximum(x, y):
    return np.maximum(x, y)


def minimum(x, y):
    return np.minimum(x, y)


def equal(x, y):
    return np.equal(x, y)


def not_equal(x, y):
    return np.not_equal(x, y)


def less_than(x, y):
    return np.less(x, y)


def less_equal(x, y):
    return np.less_equal(x, y)


def greater_than(x, y):
    return np.greater(x, y)


def greater_equal(x, y):
    return np.greater_equal(x, y)


def where(condition, x, y):
    return np.where(condition, x, y)


def cast(x, dtype):
    return np.asarray(x).astype(np.dtype(str(dtype)))


def full(shape, fill_value, dtype):
    return np.full(shape, fill_value, dtype=np.dtype(str(dtype)))


def full_like(x, fill_value):
    return np.full_like(x, fill_value)
