"""Built-in math ops with numpy kernels: ``min``, ``prod``, ``cumsum``, ``clip``
(PaddlePaddle's ``paddle.tensor.math`` operations the Cython families do not cover).

* ``min(x, axis=None, keepdim=False)`` — NaN wins (numpy's ``amin``); a minimum over
  zero elements is an error naming the op;
* ``prod(x, axis=None, keepdim=False)`` in x's dtype; its gradient is the backward
  kernel ``prod_grad`` (the product of the other elements, exact when some are zero);
* ``cumsum(x, axis=, reverse=False)`` in x's dtype, int32 in int64 (PaddlePaddle's
  default: running sums of int32 overflow) (``reverse``: sums from the end);
* ``clip(x, min=-inf, max=inf)`` — for an integer x the bounds are rounded inward.

Rules: min → max's rule (:func:`fastop.ops.builtin.reduce.max_grad_rule`: the gradient split
evenly among the extrema); prod → prod_grad (first order only); cumsum → cumsum of the
gradient in the other direction; clip → the gradient where ``min < x < max``
(PaddlePaddle's strict bounds), zero elsewhere.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from fastop.ops._registry import AttrSpec, TensorMeta
from fastop.ops.builtin._axes import normalize_axes, normalize_axis, reduced_meta
from fastop.ops.builtin._table import B
from fastop.ops.builtin.reduce import max_grad_rule

__all__ = ["register", "samples", "AXIS_ATTRS"]

NUMERIC = ("int32", "int64", "float32", "float64")
AXIS_ATTRS = {"axis": AttrSpec("axis", object, None), "keepdim": False}


# -- min ------------------------------------------------------------------------------

def min_meta(x, axis, keepdim):
    return reduced_meta("fastop::min", x, axis, keepdim)


def min_kernel(x, axis, keepdim):
    axes = normalize_axes("fastop::min", x.ndim, axis)
    if x.size == 0 or any(x.shape[a] == 0 for a in axes):
        raise ValueError(f"fastop::min: cannot take the minimum over zero elements "
                         f"(x has shape {list(x.shape)}, axis={axis!r})")
    return np.amin(x, axis=axes, keepdims=keepdim)


# -- prod -----------------------------------------------------------------------------

def prod_meta(x, axis, keepdim):
    return reduced_meta("fastop::prod", x, axis, keepdim)


def prod_kernel(x, axis, keepdim):
    axes = normalize_axes("fastop::prod", x.ndim, axis)
    return np.asarray(np.prod(x, axis=axes, keepdims=keepdim, dtype=x.dtype))


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


def prod_grad_kernel(x, dout, axis, keepdim):
    """The backward kernel: dout times the product of the other elements."""
    axes = normalize_axes("fastop::prod_grad", x.ndim, axis)
    if not keepdim:
        dout = np.expand_dims(dout, axes)
    return (_others_product(x, axes) * dout).astype(x.dtype)


# -- cumsum ---------------------------------------------------------------------------

def cumsum_dtype(name: str) -> str:
    """The dtype cumsum writes for an input of dtype `name`: int32 widens to int64."""
    return "int64" if name == "int32" else name


def cumsum_meta(x, axis, reverse):
    normalize_axis("fastop::cumsum", x.ndim, axis)
    return TensorMeta(x.shape, cumsum_dtype(x.dtype.name))


def cumsum_kernel(x, axis, reverse):
    """numpy's cumsum accumulating in the output dtype (int32 read in place into
    int64 sums, no cast copy)."""
    out = cumsum_dtype(x.dtype.name)
    if x.ndim == 0:
        return x.astype(out)
    axis = normalize_axis("fastop::cumsum", x.ndim, axis)
    if not reverse:
        return np.cumsum(x, axis=axis, dtype=out)
    return np.ascontiguousarray(np.flip(np.cumsum(np.flip(x, axis), axis=axis,
                                                  dtype=out), axis))


def cumsum_grad_rule(dout, axis, reverse):
    """Each element feeds the sums after it: the gradient is dout summed from the
    other end."""
    return B.cumsum(dout, axis=axis, reverse=not reverse)


# -- clip -----------------------------------------------------------------------------

def _check_bounds(low: float, high: float) -> None:
    if low > high:
        raise ValueError(f"fastop::clip: min ({low}) must not exceed max ({high})")


def _int_bounds(dtype: np.dtype, low: float, high: float) -> tuple[Any, Any]:
    """Float bounds as bounds of an integer dtype: rounded inward, clamped to its range."""
    info = np.iinfo(dtype)
    lo = info.min if low == -math.inf else max(info.min, min(info.max, math.ceil(low)))
    hi = info.max if high == math.inf else max(info.min, min(info.max, math.floor(high)))
    return dtype.type(lo), dtype.type(hi)


def clip_meta(x, min, max):  # noqa: A002 (PaddlePaddle's attribute names)
    _check_bounds(min, max)
    return x


def clip_kernel(x, min, max):  # noqa: A002
    _check_bounds(min, max)
    if x.dtype.kind == "i":
        low, high = _int_bounds(x.dtype, min, max)
    else:
        low, high = x.dtype.type(min), x.dtype.type(max)
    return np.clip(x, low, high)


def clip_grad_rule(x, dout, min, max):  # noqa: A002
    """dout where min < x < max (PaddlePaddle's strict bounds), zero elsewhere."""
    inside = B.logical_and(B.greater_than(x, float(min)), B.less_than(x, float(max)))
    return B.where(inside, dout, B.full_like(dout, fill_value=0.0))


def register(registry) -> None:
    registry.define(
        "fastop::min", inputs=["x"], attrs=dict(AXIS_ATTRS), meta=min_meta,
        kernels=dict.fromkeys(NUMERIC, min_kernel),
        doc="Minimum over axes (all when axis is None or []); NaN wins; a minimum over "
            "zero elements is an error."
    ).grad(needs=("x", "out"))(max_grad_rule)
    registry.define(
        "fastop::prod", inputs=["x"], attrs=dict(AXIS_ATTRS), meta=prod_meta,
        kernels=dict.fromkeys(NUMERIC, prod_kernel),
        doc="Product over axes (all when axis is None or []) in x's dtype; 1 over zero "
            "elements."
    ).grad_kernel(needs=("x", "dout"))(prod_grad_kernel)
    registry.define(
        "fastop::cumsum", inputs=["x"], attrs={"axis": int, "reverse": False},
        meta=cumsum_meta, kernels=dict.fromkeys(NUMERIC, cumsum_kernel),
        doc="Running sums along axis in x's dtype, int32 in int64 (from the end when "
            "reverse)."
    ).grad(reads={})(cumsum_grad_rule)
    registry.define(
        "fastop::clip", inputs=["x"], attrs={"min": -math.inf, "max": math.inf},
        meta=clip_meta, kernels=dict.fromkeys(NUMERIC, clip_kernel),
        doc="x limited to [min, max] (integer x: bounds rounded inward); the gradient "
            "flows where min < x < max."
    ).grad(needs=("x",), reads={"x": ("x",)})(clip_grad_rule)


def samples() -> dict[str, list[Any]]:
    """opcheck's inputs (prod_grad is checked through prod): float32 and float64,
    distinct values (no tie of min within the finite differences' step), x away from
    zero for prod and from clip's bounds; integer samples for the integer kernels."""
    from fastop.ops.builtin._sampling import Values, sample   # tests and tools only
    v = Values(3)
    f32 = "float32"
    ints = v.rng.integers(-5, 6, (2, 3, 4)).astype("int32")
    return {
        "fastop::min": [sample(v.distinct(2, 3), axis=1),
                        sample(v.distinct(2, 3, 4, dtype=f32), axis=[0, 2], keepdim=True),
                        sample(v.distinct(3, 2), axis=None),
                        sample(ints.astype("int64"), axis=-1)],
        "fastop::prod": [sample(v.away(2, 3), axis=0),
                         sample(v.away(2, 3, 2, dtype=f32), axis=[0, 2], keepdim=True),
                         sample(v.away(4), axis=None),
                         sample(ints, axis=1), sample(ints.astype("int64"), axis=None)],
        "fastop::cumsum": [sample(v.normal(2, 3), axis=1, reverse=True),
                           sample(v.normal(3, 4, dtype=f32), axis=0),
                           sample(ints, axis=-1),
                           sample(np.array([2**31 - 1, 1, 2**31 - 1], "int32"), axis=0,
                                  reverse=True),
                           sample(ints.astype("int64"), axis=1)],
        "fastop::clip": [sample(v.away(2, 3), min=-0.7, max=0.7),
                         sample(v.away(3, 4, dtype=f32), min=-1.0),
                         sample(ints, min=-1.5, max=2.5)],
    }
