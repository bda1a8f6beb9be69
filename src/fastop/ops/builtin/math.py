"""Built-in math ops with numpy kernels: ``min``, ``prod``, ``cumsum``, ``clip``
(PaddlePaddle's ``paddle.tensor.math`` operations the Cython families do not cover).

* ``min(x, axis=None, keepdim=False)`` — NaN wins (numpy's ``amin``); a minimum over
  zero elements is an error naming the op;
* ``prod(x, axis=None, keepdim=False)`` in x's dtype; its gradient is the backward
  kernel ``prod_grad`` (the product of the other elements, exact when some are zero);
* ``cumsum(x, axis=, reverse=False)`` in x's dtype (``reverse``: sums from the end);
* ``clip(x, min=-inf, max=inf)`` — for an integer x the bounds are rounded inward.

Rules: min as max's (the gradient split evenly among the minima); prod → prod_grad
(first order only); cumsum → cumsum of the gradient in the other direction; clip → the
gradient where ``min < x < max`` (PaddlePaddle's strict bounds), zero elsewhere.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from fastop._core.storage import as_dtype
from fastop.ops._registry import AttrSpec
from fastop.ops.builtin._axes import normalize_axes, normalize_axis, reduced_meta

__all__ = ["register"]

NUMERIC = ("int32", "int64", "float32", "float64")
AXIS_ATTRS = {"axis": AttrSpec("axis", object, None), "keepdim": False}


def _int_bounds(dtype: np.dtype, low: float, high: float) -> tuple[Any, Any]:
    """Float bounds as bounds of an integer dtype: rounded inward, clamped to its range."""
    info = np.iinfo(dtype)
    lo = info.min if low == -math.inf else max(info.min, min(info.max, math.ceil(low)))
    hi = info.max if high == math.inf else max(info.min, min(info.max, math.floor(high)))
    return dtype.type(lo), dtype.type(hi)


def _others_product(x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """For every element, the product of the other elements of its reduction group
    (prefix times suffix products: exact when the group holds zeros)."""
    if not axes:
        return np.ones_like(x)
    kept = [a for a in range(x.ndim) if a not in axes]
    moved = np.transpose(x, kept + list(axes))
    flat = moved.reshape(moved.shape[:len(kept)] + (-1,))
    ones = np.ones(flat.shape[:-1] + (1,), dtype=x.dtype)
    before = np.cumprod(np.concatenate([ones, flat[..., :-1]], axis=-1), axis=-1)
    after = np.flip(np.cumprod(np.flip(np.concatenate([flat[..., 1:], ones], axis=-1),
                                       axis=-1), axis=-1), axis=-1)
    others = (before * after).reshape(moved.shape)
    return np.transpose(others, np.argsort(kept + list(axes)))


def register(registry) -> None:
    get = registry.get
    cast, equal, expand_as, unsqueeze = get("fastop::cast"), get("fastop::equal"), \
        get("fastop::expand_as"), get("fastop::unsqueeze")
    sum_, divide, multiply = get("fastop::sum"), get("fastop::divide"), \
        get("fastop::multiply")
    where, full_like = get("fastop::where"), get("fastop::full_like")
    greater_than, less_than = get("fastop::greater_than"), get("fastop::less_than")
    logical_and = get("fastop::logical_and")

    def restore_dims(x: Any, v: Any, axis: Any, keepdim: bool) -> Any:
        """v (a reduction of x) with its reduced dims back as size 1."""
        axes = list(normalize_axes("fastop::min", len(x.shape), axis))
        return v if keepdim or not axes else unsqueeze(v, axis=axes)

    # -- min ------------------------------------------------------------------------
    min_op = registry.define(
        "fastop::min", inputs=["x"], attrs=dict(AXIS_ATTRS),
        doc="Minimum over axes (all when axis is None or []); NaN wins; a minimum over "
            "zero elements is an error.")

    @min_op.meta
    def min_meta(x, axis, keepdim):
        return reduced_meta("fastop::min", x, axis, keepdim)

    @min_op.kernel(*NUMERIC)
    def min_kernel(x, axis, keepdim):
        axes = normalize_axes("fastop::min", x.ndim, axis)
        if x.size == 0 or any(x.shape[a] == 0 for a in axes):
            raise ValueError(f"fastop::min: cannot take the minimum over zero elements "
                             f"(x has shape {list(x.shape)}, axis={axis!r})")
        return np.amin(x, axis=axes, keepdims=keepdim)

    @min_op.grad(needs=("x", "out"))
    def min_grad(x, out, dout, axis, keepdim):
        hit = cast(equal(x, expand_as(restore_dims(x, out, axis, keepdim), x)),
                   dtype=as_dtype(x.dtype).name)
        ties = sum_(hit, axis=axis, keepdim=True)
        share = divide(restore_dims(x, dout, axis, keepdim), ties)
        return (multiply(hit, expand_as(share, x)),)

    # -- prod -----------------------------------------------------------------------
    prod_op = registry.define(
        "fastop::prod", inputs=["x"], attrs=dict(AXIS_ATTRS),
        doc="Product over axes (all when axis is None or []) in x's dtype; 1 over zero "
            "elements.")

    @prod_op.meta
    def prod_meta(x, axis, keepdim):
        return reduced_meta("fastop::prod", x, axis, keepdim)

    @prod_op.kernel(*NUMERIC)
    def prod_kernel(x, axis, keepdim):
        axes = normalize_axes("fastop::prod", x.ndim, axis)
        return np.asarray(np.prod(x, axis=axes, keepdims=keepdim, dtype=x.dtype))

    @prod_op.grad_kernel(needs=("x", "dout"))
    def prod_grad(x, dout, axis, keepdim):
        axes = normalize_axes("fastop::prod_grad", x.ndim, axis)
        if not keepdim:
            dout = np.expand_dims(dout, axes)
        return (_others_product(x, axes) * dout).astype(x.dtype)

    # -- cumsum ---------------------------------------------------------------------
    cumsum_op = registry.define(
        "fastop::cumsum", inputs=["x"], attrs={"axis": int, "reverse": False},
        doc="Running sums along axis in x's dtype (from the end when reverse).")

    @cumsum_op.meta
    def cumsum_meta(x, axis, reverse):
        normalize_axis("fastop::cumsum", x.ndim, axis)
        return x

    @cumsum_op.kernel(*NUMERIC)
    def cumsum_kernel(x, axis, reverse):
        if x.ndim == 0:
            return x.copy()
        axis = normalize_axis("fastop::cumsum", x.ndim, axis)
        if not reverse:
            return np.cumsum(x, axis=axis, dtype=x.dtype)
        return np.ascontiguousarray(np.flip(np.cumsum(np.flip(x, axis), axis=axis,
                                                      dtype=x.dtype), axis))

    @cumsum_op.grad(reads={})
    def cumsum_grad(dout, axis, reverse):
        return (cumsum_op(dout, axis=axis, reverse=not reverse),)

    # -- clip -----------------------------------------------------------------------
    clip_op = registry.define(
        "fastop::clip", inputs=["x"], attrs={"min": -math.inf, "max": math.inf},
        doc="x limited to [min, max] (integer x: bounds rounded inward); the gradient "
            "flows where min < x < max.")

    @clip_op.meta
    def clip_meta(x, min, max):  # noqa: A002 (PaddlePaddle's attribute names)
        if min > max:
            raise ValueError(f"fastop::clip: min ({min}) must not exceed max ({max})")
        return x

    @clip_op.kernel(*NUMERIC)
    def clip_kernel(x, min, max):  # noqa: A002
        if min > max:
            raise ValueError(f"fastop::clip: min ({min}) must not exceed max ({max})")
        if x.dtype.kind == "i":
            low, high = _int_bounds(x.dtype, min, max)
        else:
            low, high = x.dtype.type(min), x.dtype.type(max)
        return np.clip(x, low, high)

    @clip_op.grad(needs=("x",), reads={"x": ("x",)})
    def clip_grad(x, dout, min, max):  # noqa: A002
        inside = logical_and(greater_than(x, float(min)), less_than(x, float(max)))
        return (where(inside, dout, full_like(dout, fill_value=0.0)),)
