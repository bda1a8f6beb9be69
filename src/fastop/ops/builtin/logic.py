"""Built-in logic ops with numpy kernels (PaddlePaddle's ``paddle.tensor.logic``), none
differentiable, every output bool:

* ``logical_and logical_or logical_xor (x, y)`` — broadcasting; nonzero counts as True;
* ``logical_not(x)``;
* ``isnan isinf isfinite (x)`` — elementwise (integers are finite);
* ``all any (x, axis=None, keepdim=False)`` — reductions (``axis`` None or [] reduces
  everything).
"""
from __future__ import annotations

import numpy as np

from fastop._core.storage import bool_ as _bool
from fastop.ops._registry import TensorMeta
from fastop.ops.builtin._axes import broadcast_meta, normalize_axes, reduced_meta
from fastop.ops.builtin.math import AXIS_ATTRS

__all__ = ["register"]

BINARY = {"logical_and": np.logical_and, "logical_or": np.logical_or,
          "logical_xor": np.logical_xor}
UNARY = {"logical_not": (np.logical_not, "not x (nonzero counts as True)."),
         "isnan": (np.isnan, "Whether each element is NaN."),
         "isinf": (np.isinf, "Whether each element is +inf or -inf."),
         "isfinite": (np.isfinite, "Whether each element is neither NaN nor infinite.")}
REDUCTIONS = {"all": (np.all, "Whether every element over axis is nonzero."),
              "any": (np.any, "Whether some element over axis is nonzero.")}


def register(registry) -> None:
    for name, fn in BINARY.items():
        op = registry.define(f"fastop::{name}", inputs=["x", "y"], differentiable=(),
                             doc=f"{name.split('_')[1]} of x and y elementwise, with "
                                 f"broadcasting (nonzero counts as True).")
        op.meta(lambda x, y, _name=name: TensorMeta(
            broadcast_meta(f"fastop::{_name}", x.shape, y.shape), _bool))
        op.kernel()(fn)

    for name, (fn, doc) in UNARY.items():
        op = registry.define(f"fastop::{name}", inputs=["x"], differentiable=(), doc=doc)
        op.meta(lambda x: TensorMeta(x.shape, _bool))
        op.kernel()(fn)

    for name, (fn, doc) in REDUCTIONS.items():
        op = registry.define(f"fastop::{name}", inputs=["x"], attrs=dict(AXIS_ATTRS),
                             differentiable=(), doc=doc)
        op.meta(lambda x, axis, keepdim, _name=name: reduced_meta(
            f"fastop::{_name}", x, axis, keepdim, _bool))

        def kernel(x, axis, keepdim, _fn=fn, _name=name):
            axes = normalize_axes(f"fastop::{_name}", x.ndim, axis)
            return np.asarray(_fn(x, axis=axes, keepdims=keepdim))
        op.kernel()(kernel)
