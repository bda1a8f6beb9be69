"""Built-in logic ops with numpy kernels (PaddlePaddle's ``paddle.tensor.logic``), none
differentiable, every output bool:

* ``logical_and logical_or logical_xor (x, y)`` — broadcasting; nonzero counts as True;
* ``logical_not(x)``;
* ``isnan isinf isfinite (x)`` — elementwise (integers are finite);
* ``all any (x, axis=None, keepdim=False)`` — reductions (``axis`` None or [] reduces
  everything).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from fastop._core.storage import bool_
from fastop.ops._registry import TensorMeta
from fastop.ops.builtin._axes import broadcast_meta, normalize_axes, reduced_meta
from fastop.ops.builtin.math import AXIS_ATTRS

__all__ = ["register", "samples"]


def logical_and_meta(x, y):
    return TensorMeta(broadcast_meta("fastop::logical_and", x.shape, y.shape), bool_)


def logical_or_meta(x, y):
    return TensorMeta(broadcast_meta("fastop::logical_or", x.shape, y.shape), bool_)


def logical_xor_meta(x, y):
    return TensorMeta(broadcast_meta("fastop::logical_xor", x.shape, y.shape), bool_)


def elementwise_bool_meta(x):
    """The meta of a one-input test: x's shape, bool."""
    return TensorMeta(x.shape, bool_)


def all_meta(x, axis, keepdim):
    return reduced_meta("fastop::all", x, axis, keepdim, bool_)


def all_kernel(x, axis, keepdim):
    return np.asarray(np.all(x, axis=normalize_axes("fastop::all", x.ndim, axis),
                             keepdims=keepdim))


def any_meta(x, axis, keepdim):
    return reduced_meta("fastop::any", x, axis, keepdim, bool_)


def any_kernel(x, axis, keepdim):
    return np.asarray(np.any(x, axis=normalize_axes("fastop::any", x.ndim, axis),
                             keepdims=keepdim))


def register(registry) -> None:
    registry.define(
        "fastop::logical_and", inputs=["x", "y"], differentiable=(), meta=logical_and_meta,
        kernels={"*": np.logical_and},
        doc="and of x and y elementwise, with broadcasting (nonzero counts as True).")
    registry.define(
        "fastop::logical_or", inputs=["x", "y"], differentiable=(), meta=logical_or_meta,
        kernels={"*": np.logical_or},
        doc="or of x and y elementwise, with broadcasting (nonzero counts as True).")
    registry.define(
        "fastop::logical_xor", inputs=["x", "y"], differentiable=(), meta=logical_xor_meta,
        kernels={"*": np.logical_xor},
        doc="xor of x and y elementwise, with broadcasting (nonzero counts as True).")
    registry.define(
        "fastop::logical_not", inputs=["x"], differentiable=(), meta=elementwise_bool_meta,
        kernels={"*": np.logical_not}, doc="not x (nonzero counts as True).")
    registry.define(
        "fastop::isnan", inputs=["x"], differentiable=(), meta=elementwise_bool_meta,
        kernels={"*": np.isnan}, doc="Whether each element is NaN.")
    registry.define(
        "fastop::isinf", inputs=["x"], differentiable=(), meta=elementwise_bool_meta,
        kernels={"*": np.isinf}, doc="Whether each element is +inf or -inf.")
    registry.define(
        "fastop::isfinite", inputs=["x"], differentiable=(), meta=elementwise_bool_meta,
        kernels={"*": np.isfinite}, doc="Whether each element is neither NaN nor infinite.")
    registry.define(
        "fastop::all", inputs=["x"], attrs=dict(AXIS_ATTRS), differentiable=(),
        meta=all_meta, kernels={"*": all_kernel},
        doc="Whether every element over axis is nonzero.")
    registry.define(
        "fastop::any", inputs=["x"], attrs=dict(AXIS_ATTRS), differentiable=(),
        meta=any_meta, kernels={"*": any_kernel},
        doc="Whether some element over axis is nonzero.")


def samples() -> dict[str, list[Any]]:
    """opcheck's inputs: float32, float64, integer and bool operands, broadcasting,
    NaN and infinities for the tests, each reduction axis form."""
    from fastop.ops.builtin._sampling import sample   # tests and tools only
    special = np.array([[0.0, 1.5, np.nan], [np.inf, -np.inf, -2.0]])
    ints = np.array([[0, 1, 2], [3, 0, -1]], "int32")
    flags = np.array([True, False, True])
    binary = [[special, special[1]], [special.astype("float32"), np.float32([0, 1, 2])],
              [ints, flags], [flags, ints.astype("int64")]]
    unary = [[special], [special.astype("float32")], [ints]]
    reduce = [sample(special != 0, axis=1), sample(special, axis=None, keepdim=True),
              sample(special.astype("float32"), axis=[0, 1]), sample(ints, axis=0)]
    return {"fastop::logical_and": binary, "fastop::logical_or": binary,
            "fastop::logical_xor": binary, "fastop::logical_not": unary,
            "fastop::isnan": unary, "fastop::isinf": unary, "fastop::isfinite": unary,
            "fastop::all": reduce, "fastop::any": reduce}
