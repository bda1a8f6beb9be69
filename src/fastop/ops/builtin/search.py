"""Built-in search ops with numpy kernels (PaddlePaddle's ``paddle.tensor.search``):

* ``argmin(x, axis=None, keepdim=False)`` — int64 index of the first minimum (the
  flattened, C-order index when axis is None); the first NaN counts as the minimum;
* ``topk(x, k=, axis=-1, largest=True, sorted=True) -> (values, indices)`` — the k
  largest (or smallest) along axis, sorted, ties in index order; indices int64;
* ``take_along_axis(arr, indices, axis=)`` — numpy's ``take_along_axis`` (shapes other
  than along axis broadcast), with the backward kernel ``take_along_axis_grad(arr,
  indices, dout, axis=)`` (a scatter-add into zeros like arr; repeated indices add up);
* ``nonzero(x)`` — int64 ``[count, ndim]`` coordinates of the nonzero elements (the
  count is known only when it runs).

Rules: topk → take_along_axis_grad of its values' gradient at its indices;
take_along_axis → take_along_axis_grad (``grad_op``) → take_along_axis (each the
other's adjoint).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from fastop._core.storage import int64
from fastop.ops._registry import AttrSpec, TensorMeta
from fastop.ops.builtin._axes import broadcast_meta, normalize_axis, reduced_meta
from fastop.ops.builtin._table import B

__all__ = ["register", "samples"]

NUMERIC = ("int32", "int64", "float32", "float64")
# argmin, as the argmax kernel: every integer dtype too (PaddlePaddle's docs list uint8
# and int16 for both)
ARG_DTYPES = ("uint8", "int8", "int16", *NUMERIC)


# -- argmin ---------------------------------------------------------------------------

def argmin_meta(x, axis, keepdim):
    if axis is not None:
        axis = normalize_axis("fastop::argmin", x.ndim, axis)
    return reduced_meta("fastop::argmin", x, axis, keepdim, int64)


def argmin_kernel(x, axis, keepdim):
    if axis is not None:
        axis = normalize_axis("fastop::argmin", x.ndim, axis)
    if x.size == 0 or (axis is not None and x.ndim and x.shape[axis] == 0):
        raise ValueError(f"fastop::argmin: cannot take the argmin over zero elements "
                         f"(x has shape {list(x.shape)}, axis={axis!r})")
    if axis is None:
        index = np.asarray(np.argmin(x), dtype=np.int64)
        return index.reshape((1,) * x.ndim) if keepdim else index
    return np.argmin(x, axis=axis, keepdims=keepdim).astype(np.int64)


# -- take_along_axis and its backward kernel ------------------------------------------

def _along_meta(op: str, arr: TensorMeta, indices: TensorMeta, axis: int) -> list:
    """The output shape of take_along_axis: arr's and indices' shapes broadcast, but
    indices' length along axis."""
    if arr.ndim != indices.ndim:
        raise ValueError(f"{op}: indices must have arr's number of dims ({arr.ndim}), got "
                         f"shape {indices.shape}")
    ax = normalize_axis(op, arr.ndim, axis)
    out = broadcast_meta(op, [1 if i == ax else d for i, d in enumerate(arr.shape)],
                         [1 if i == ax else d for i, d in enumerate(indices.shape)])
    out[ax] = indices.shape[ax]
    return out


def _check_indices(op: str, indices: np.ndarray) -> None:
    if indices.dtype.kind not in "iu":
        raise TypeError(f"{op}: indices must be int32 or int64, got {indices.dtype}")


def take_along_axis_meta(arr, indices, axis):
    return TensorMeta(_along_meta("fastop::take_along_axis", arr, indices, axis), arr.dtype)


def take_along_axis_kernel(arr, indices, axis):
    _check_indices("fastop::take_along_axis", indices)
    _along_meta("fastop::take_along_axis", TensorMeta(arr.shape, arr.dtype),
                TensorMeta(indices.shape, indices.dtype), axis)
    return np.take_along_axis(arr, indices, axis=axis)


def take_along_axis_grad_meta(arr, indices, dout, axis):
    return TensorMeta(arr.shape, dout.dtype)


def take_along_axis_grad_kernel(arr, indices, dout, axis):
    _check_indices("fastop::take_along_axis_grad", indices)
    ax = normalize_axis("fastop::take_along_axis_grad", arr.ndim, axis)
    shape = list(dout.shape)
    shape[ax] = arr.shape[ax]
    grad = np.zeros(shape, dtype=dout.dtype)
    grids = list(np.ix_(*[np.arange(s) for s in dout.shape]))
    grids[ax] = np.broadcast_to(indices, dout.shape)
    np.add.at(grad, tuple(grids), dout)
    spread = tuple(d for d in range(arr.ndim) if arr.shape[d] == 1 != grad.shape[d])
    return grad.sum(axis=spread, keepdims=True) if spread else grad


def take_along_axis_grad_grad_rule(indices, g, axis):
    """The scatter-add is linear in dout; its adjoint is the gather at the same
    indices."""
    return None, None, B.take_along_axis(g, indices, axis=axis)


# -- topk -----------------------------------------------------------------------------

def _topk_axis(x_shape: list, k: int, axis: int) -> int:
    """topk's axis, non-negative, after checking k against x's size along it."""
    ax = normalize_axis("fastop::topk", len(x_shape), axis)
    n = x_shape[ax] if x_shape else 1
    if k < 0 or (n is not None and k > n):
        raise ValueError(f"fastop::topk: k must be in [0, {n}] (x's size along axis "
                         f"{axis}), got {k}")
    return ax


def topk_meta(x, k, axis, largest, sorted):  # noqa: A002 (Paddle's attribute name)
    ax = _topk_axis(x.shape, k, axis)
    shape = [k if i == ax else d for i, d in enumerate(x.shape)]
    return TensorMeta(shape, x.dtype), TensorMeta(shape, int64)


def topk_kernel(x, k, axis, largest, sorted):  # noqa: A002
    ax = _topk_axis(list(x.shape), k, axis)
    if x.ndim == 0:
        return x.copy(), np.zeros((), np.int64)
    key = (-x if x.dtype.kind == "f" else ~x) if largest else x
    order = np.argsort(key, axis=ax, kind="stable")
    index = np.take(order, np.arange(k), axis=ax).astype(np.int64)
    return np.take_along_axis(x, index, axis=ax), index


def topk_grad_rule(x, indices, dvalues, dindices, k, axis, largest, sorted):  # noqa: A002
    """The values' gradient scattered back to their indices (the int64 indices take
    none)."""
    if dvalues is None:
        return None
    if len(x.shape) == 0:
        return dvalues
    return B.take_along_axis_grad(x, indices, dvalues, axis=axis)


# -- nonzero --------------------------------------------------------------------------

def nonzero_meta(x):
    return TensorMeta([None, x.ndim], int64)


def nonzero_kernel(x):
    return np.ascontiguousarray(np.argwhere(x).astype(np.int64))


def register(registry) -> None:
    registry.define(
        "fastop::argmin", inputs=["x"],
        attrs={"axis": AttrSpec("axis", object, None), "keepdim": False}, differentiable=(),
        meta=argmin_meta, kernels=dict.fromkeys(ARG_DTYPES, argmin_kernel),
        doc="int64 index of the first minimum along axis (flattened, C order, when axis "
            "is None); the first NaN counts as the minimum.")
    take_along_axis_grad = registry.define(
        "fastop::take_along_axis_grad", inputs=["arr", "indices", "dout"], outputs=["darr"],
        attrs={"axis": int}, differentiable=("dout",), meta=take_along_axis_grad_meta,
        kernels=dict.fromkeys(("float32", "float64"), take_along_axis_grad_kernel),
        doc="Backward of take_along_axis: zeros like arr with dout added at indices "
            "(repeated indices add up).")
    take_along_axis_grad.grad(needs=("indices",), reads={"dout": ("indices",)})(
        take_along_axis_grad_grad_rule)
    registry.define(
        "fastop::take_along_axis", inputs=["arr", "indices"], attrs={"axis": int},
        differentiable=("arr",), meta=take_along_axis_meta,
        kernels={"*": take_along_axis_kernel},
        doc="numpy.take_along_axis: arr's elements at indices along axis (other dims "
            "broadcast)."
    ).grad_op(take_along_axis_grad, needs=("arr", "indices", "dout"),
              reads={"arr": ("indices",)})
    registry.define(
        "fastop::topk", inputs=["x"], outputs=["values", "indices"],
        attrs={"k": int, "axis": -1, "largest": True, "sorted": True},
        differentiable=("x",), meta=topk_meta, kernels=dict.fromkeys(NUMERIC, topk_kernel),
        doc="The k largest (or smallest) elements along axis, in order (ties by index), "
            "and their int64 indices."
    ).grad(needs=("x", "indices"), materialize_grads=False,
           reads={"x": ("indices",)})(topk_grad_rule)
    registry.define(
        "fastop::nonzero", inputs=["x"], differentiable=(), meta=nonzero_meta,
        kernels={"*": nonzero_kernel},
        doc="int64 [count, ndim]: the coordinates (C order) of x's nonzero elements.")


def samples() -> dict[str, list[Any]]:
    """opcheck's inputs: float32 and float64 (distinct values for topk, so no tie
    changes place within the finite differences' step), integer samples, NaN for
    argmin, repeated indices (their gradients add up) and broadcasting for
    take_along_axis. take_along_axis_grad, checked through take_along_axis's double
    gradient, gets its own too."""
    from fastop.ops.builtin._sampling import Values, sample   # tests and tools only
    v = Values(6)
    f32 = "float32"
    ints = v.rng.integers(-9, 9, (3, 4, 5)).astype("int32")
    nan = np.array([[3.0, np.nan, -1.0], [0.0, 2.0, np.nan]])
    return {
        "fastop::argmin": [sample(v.distinct(3, 4), axis=1),
                           sample(v.distinct(2, 3, 4, dtype=f32), axis=-1, keepdim=True),
                           sample(nan, axis=None), sample(ints, axis=None, keepdim=True),
                           sample(ints.astype("int64"), axis=0)],
        "fastop::topk": [sample(v.distinct(2, 4), k=2, axis=1),
                         sample(v.distinct(4, 3, dtype=f32), k=3, axis=0, largest=False),
                         sample(v.distinct(5), k=0),
                         sample(ints, k=2, axis=1, largest=False)],
        "fastop::take_along_axis": [
            sample(v.normal(3, 2), np.array([[2, 0], [2, 2]]), axis=0),
            sample(v.normal(3, 4, dtype=f32), np.array([[0, 3], [1, 1], [3, 0]], "int32"),
                   axis=1),
            sample(v.normal(1, 4), np.array([[3, 0], [1, 1], [0, 0]]), axis=1),
            sample(ints, np.zeros((1, 4, 2), "int64"), axis=2)],
        "fastop::take_along_axis_grad": [
            sample(v.normal(3, 2), np.array([[2, 0], [2, 2]]), v.normal(2, 2), axis=0),
            sample(v.normal(1, 4, dtype=f32), np.array([[3, 0], [1, 1], [0, 0]]),
                   v.normal(3, 2, dtype=f32), axis=1)],
        "fastop::nonzero": [[v.normal(3, 4) > 0],
                            [np.array([[0.0, 1.5], [-2.0, 0.0]], f32)],
                            [np.array([0.0, 0.0])], [ints]],
    }
