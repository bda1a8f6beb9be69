"""Built-in reduction ops and broadcast views, and their gradient rules.

Cython kernels (:mod:`fastop._core.reduce`): ``sum mean max`` (``axis=None|int|list``,
``keepdim=False``; no axis or ``[]`` reduces everything; a sum of int32 or bool is
int64, PaddlePaddle's rule; mean takes floats only, as PaddlePaddle documents),
``argmax(axis=None, keepdim=)`` (int64, not differentiable) and
``sum_to_shape(x, shape=)`` (the gradient of a broadcast, in x's dtype; ``-1`` keeps
x's dim). Views (C view kernels of :mod:`fastop._core.views`,
read-only, stride 0 on broadcast dims): ``broadcast_to(x, shape=)`` (``-1`` keeps x's
dim) and ``expand_as(x, y)`` (to y's shape, which works when y's shape is only known at
run time, as in static graphs).

Rules: sum → expand_as (the reduced dims restored first only where broadcasting needs
them); mean → the same, scaled by 1/count; max → the gradient split evenly among the
maxima (mask = x == max); sum_to_shape ↔ expand_as/broadcast_to.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from fastop._core import reduce as K
from fastop._core import views as V
from fastop._core.storage import DenseTensor
from fastop.ops.builtin._table import B
from fastop.ops.builtin.elementwise import shape_attr

__all__ = ["register", "samples", "reduced_axes"]

AXIS_ATTRS = {"axis": None, "keepdim": False}


def reduced_axes(ndim: int, axis: Any) -> list[int]:
    """The sorted, non-negative axes a reduction over `axis` removes (none of a 0-D x,
    whose axis 0 or -1 is the tensor itself)."""
    if ndim == 0:
        return []
    if axis is None or axis == []:
        return list(range(ndim))
    axes = [axis] if isinstance(axis, int) else list(axis)
    return sorted(a + ndim if a < 0 else a for a in axes)


def restore_dims(x: Any, dy: Any, axis: Any, keepdim: bool) -> Any:
    """dy of a reduction of x with the reduced dims back as size 1 — only where
    broadcasting dy against x needs them (not for keepdim, nor when every reduced dim
    leads: a 0-d or trailing-shaped dy broadcasts as it is)."""
    if keepdim or axis is None:
        return dy
    axes = reduced_axes(x.ndim, axis)
    if axes == list(range(len(axes))):
        return dy
    return B.unsqueeze(dy, axis=axes)


def sum_grad_rule(x, dout, axis, keepdim):
    return B.expand_as(restore_dims(x, dout, axis, keepdim), x)


def mean_grad_rule(x, dout, axis, keepdim):
    if axis is None and isinstance(x, DenseTensor):     # loss.mean(): the common case
        return B.expand_as(B.multiply(dout, 1.0 / x.size if x.size else float("nan")), x)
    dims = [x.shape[a] for a in reduced_axes(x.ndim, axis)]
    if all(d is not None and d >= 0 for d in dims):
        count = 1
        for d in dims:
            count *= d
        scaled = B.multiply(dout, 1.0 / count if count else float("nan"))
    else:   # unknown until run time (static graphs): count with the graph
        ones = B.full_like(x, fill_value=1.0)
        scaled = B.divide(dout, B.sum(ones, axis=axis, keepdim=keepdim))
    return B.expand_as(restore_dims(x, scaled, axis, keepdim), x)


def max_grad_rule(x, out, dout, axis, keepdim):
    """The gradient split evenly among the maxima (mask = x == max)."""
    hit = B.cast(B.equal(x, B.expand_as(restore_dims(x, out, axis, keepdim), x)),
                 dtype=x.dtype)
    ties = B.sum(hit, axis=axis, keepdim=True)
    share = B.divide(restore_dims(x, dout, axis, keepdim), ties)
    return B.multiply(hit, B.expand_as(share, x))


def sum_to_shape_grad_rule(x, dout, shape):
    return B.expand_as(dout, x)


def broadcast_to_grad_rule(x, dout, shape):
    return B.sum_to_shape(dout, shape=shape_attr(x.shape))


def expand_as_grad_rule(x, dout):
    return B.sum_to_shape(dout, shape=shape_attr(x.shape)), None


def register(registry) -> None:
    registry.define_ckernel(
        "fastop::sum", K.sum, attrs=dict(AXIS_ATTRS),
        doc="Sum over axes (all when axis is None or []) in x's dtype, int32 and bool in "
            "int64 (PaddlePaddle's rule); floats are summed pairwise (error grows like "
            "log n)."
    ).grad(needs=("x",), reads={})(sum_grad_rule)
    registry.define_ckernel(
        "fastop::mean", K.mean, attrs=dict(AXIS_ATTRS),
        doc="Mean over axes (all when axis is None or []); NaN over zero elements."
    ).grad(needs=("x",), reads={})(mean_grad_rule)
    registry.define_ckernel(
        "fastop::max", K.max, attrs=dict(AXIS_ATTRS),
        doc="Maximum over axes (all when axis is None or []); NaN wins; a maximum over "
            "zero elements is an error."
    ).grad(needs=("x", "out"))(max_grad_rule)
    registry.define_ckernel(
        "fastop::argmax", K.argmax, attrs=dict(AXIS_ATTRS), differentiable=(),
        doc="int64 index of the first maximum along axis (flattened, C order, when axis "
            "is None); the first NaN counts as the maximum.")
    registry.define_ckernel(
        "fastop::sum_to_shape", K.sum_to_shape, attrs={"shape": list},
        doc="Sum x down to `shape`, a shape x broadcasts from (the gradient of a "
            "broadcast); -1 in shape keeps x's dim."
    ).grad(needs=("x",), reads={})(sum_to_shape_grad_rule)
    registry.define_ckernel(
        "fastop::broadcast_to", V.broadcast_to, attrs={"shape": list},
        doc="A read-only view of x broadcast to `shape` (numpy's rules; -1 keeps x's "
            "dim); no copy."
    ).grad(needs=("x",), reads={})(broadcast_to_grad_rule)
    registry.define_ckernel(
        "fastop::expand_as", V.expand_as, differentiable=("x",),
        doc="A read-only view of x broadcast to y's shape (y's values are not read)."
    ).grad(needs=("x",), reads={})(expand_as_grad_rule)


def samples() -> dict[str, list[Any]]:
    """opcheck's inputs for this family's ops: float32 and float64, one axis, several,
    all, negative and keepdim; distinct values for max (no tie changes within the finite
    differences' step) and argmax; the integer and bool kernels too (int32 sums that
    overflow int32)."""
    from fastop.ops.builtin._sampling import Values, sample   # tests and tools only
    v = Values(2)
    f32 = "float32"
    ints = np.arange(6).reshape(2, 3)
    return {
        "fastop::sum": [sample(v.normal(2, 3), axis=1),
                        sample(v.normal(2, 3, 4, dtype=f32), axis=[0, 2], keepdim=True),
                        [v.normal(3, 2)], sample(ints, axis=0),
                        sample(np.array([[2**31 - 1, 5], [1, -7]], "int32"), axis=0),
                        [np.array([2**31 - 1, 2**31 - 1, 3], "int32")],
                        sample(ints.astype("int32")[:, ::2], axis=1, keepdim=True),
                        sample(ints % 2 == 0, axis=1), [ints > 2]],
        "fastop::mean": [sample(v.normal(2, 3), axis=[0, 1], keepdim=True),
                         sample(v.normal(2, 3, 4, dtype=f32), axis=-1),
                         [v.normal(4)]],
        "fastop::max": [sample(v.distinct(2, 3), axis=0),
                        sample(v.distinct(2, 3, 4, dtype=f32), axis=[1, 2], keepdim=True),
                        [v.distinct(5)], sample(ints.astype("int32"), axis=-1)],
        "fastop::argmax": [sample(v.distinct(2, 3), axis=1),
                           sample(v.distinct(2, 3, dtype=f32), axis=0, keepdim=True),
                           [v.distinct(2, 3)], sample(ints[::-1], axis=0)],
        "fastop::sum_to_shape": [sample(v.normal(2, 3), shape=[1, 3]),
                                 sample(v.normal(4, 2, 3, dtype=f32), shape=[2, -1])],
        "fastop::broadcast_to": [sample(v.normal(1, 3), shape=[2, 3]),
                                 sample(v.normal(3, 1, dtype=f32), shape=[2, -1, 4])],
        "fastop::expand_as": [[v.normal(1, 3), v.normal(2, 3)],
                              [v.normal(3, 1, dtype=f32), v.normal(2, 3, 4, dtype=f32)]],
    }
