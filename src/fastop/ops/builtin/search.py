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
take_along_axis ↔ take_along_axis_grad (each the other's adjoint).
"""
from __future__ import annotations

import numpy as np

from fastop._core.storage import int64
from fastop.ops._registry import AttrSpec, TensorMeta
from fastop.ops.builtin._axes import broadcast_meta, normalize_axis, reduced_meta

__all__ = ["register"]

NUMERIC = ("int32", "int64", "float32", "float64")


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


def register(registry) -> None:
    # -- argmin -----------------------------------------------------------------------
    argmin = registry.define(
        "fastop::argmin", inputs=["x"],
        attrs={"axis": AttrSpec("axis", object, None), "keepdim": False}, differentiable=(),
        doc="int64 index of the first minimum along axis (flattened, C order, when axis "
            "is None); the first NaN counts as the minimum.")

    @argmin.meta
    def argmin_meta(x, axis, keepdim):
        if axis is not None:
            axis = normalize_axis("fastop::argmin", x.ndim, axis)
        return reduced_meta("fastop::argmin", x, axis, keepdim, int64)

    @argmin.kernel(*NUMERIC)
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

    # -- take_along_axis ----------------------------------------------------------------
    take = registry.define(
        "fastop::take_along_axis", inputs=["arr", "indices"], attrs={"axis": int},
        differentiable=("arr",),
        doc="numpy.take_along_axis: arr's elements at indices along axis (other dims "
            "broadcast).")
    take_grad_op = registry.define(
        "fastop::take_along_axis_grad", inputs=["arr", "indices", "dout"], outputs=["darr"],
        attrs={"axis": int}, differentiable=("dout",),
        doc="Backward of take_along_axis: zeros like arr with dout added at indices "
            "(repeated indices add up).")

    @take.meta
    def take_meta(arr, indices, axis):
        return TensorMeta(_along_meta("fastop::take_along_axis", arr, indices, axis),
                          arr.dtype)

    @take.kernel()
    def take_kernel(arr, indices, axis):
        _check_indices("fastop::take_along_axis", indices)
        _along_meta("fastop::take_along_axis", TensorMeta(arr.shape, arr.dtype),
                    TensorMeta(indices.shape, indices.dtype), axis)
        return np.take_along_axis(arr, indices, axis=axis)

    @take.grad(needs=("arr", "indices"), reads={"arr": ("indices",)})
    def take_along_axis_grad(arr, indices, dout, axis):
        return take_grad_op(arr, indices, dout, axis=axis), None

    @take_grad_op.meta
    def take_grad_meta(arr, indices, dout, axis):
        return TensorMeta(arr.shape, dout.dtype)

    @take_grad_op.kernel("float32", "float64")
    def take_grad_kernel(arr, indices, dout, axis):
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

    @take_grad_op.grad(needs=("indices",), reads={"dout": ("indices",)})
    def take_along_axis_grad_grad(indices, g, axis):
        return None, None, take(g, indices, axis=axis)

    # -- topk -------------------------------------------------------------------------
    topk = registry.define(
        "fastop::topk", inputs=["x"], outputs=["values", "indices"],
        attrs={"k": int, "axis": -1, "largest": True, "sorted": True},
        differentiable=("x",),
        doc="The k largest (or smallest) elements along axis, in order (ties by index), "
            "and their int64 indices.")

    def topk_check(x_shape, k, axis) -> int:
        ax = normalize_axis("fastop::topk", len(x_shape), axis)
        n = x_shape[ax] if x_shape else 1
        if k < 0 or (n is not None and k > n):
            raise ValueError(f"fastop::topk: k must be in [0, {n}] (x's size along axis "
                             f"{axis}), got {k}")
        return ax

    @topk.meta
    def topk_meta(x, k, axis, largest, sorted):  # noqa: A002 (Paddle's attribute name)
        ax = topk_check(x.shape, k, axis)
        shape = [k if i == ax else d for i, d in enumerate(x.shape)]
        return TensorMeta(shape, x.dtype), TensorMeta(shape, int64)

    @topk.kernel(*NUMERIC)
    def topk_kernel(x, k, axis, largest, sorted):  # noqa: A002
        ax = topk_check(x.shape, k, axis)
        if x.ndim == 0:
            return x.copy(), np.zeros((), np.int64)
        key = (-x if x.dtype.kind == "f" else ~x) if largest else x
        order = np.argsort(key, axis=ax, kind="stable")
        index = np.take(order, np.arange(k), axis=ax).astype(np.int64)
        return np.take_along_axis(x, index, axis=ax), index

    @topk.grad(needs=("x", "indices"), materialize_grads=False, reads={"x": ("indices",)})
    def topk_grad(x, indices, dvalues, dindices, k, axis, largest, sorted):  # noqa: A002
        if dvalues is None:
            return (None,)
        if len(x.shape) == 0:
            return (dvalues,)
        return (take_grad_op(x, indices, dvalues, axis=axis),)

    # -- nonzero ----------------------------------------------------------------------
    nonzero = registry.define(
        "fastop::nonzero", inputs=["x"], differentiable=(),
        doc="int64 [count, ndim]: the coordinates (C order) of x's nonzero elements.")

    @nonzero.meta
    def nonzero_meta(x):
        return TensorMeta([None, x.ndim], int64)

    @nonzero.kernel()
    def nonzero_kernel(x):
        return np.ascontiguousarray(np.argwhere(x).astype(np.int64))
