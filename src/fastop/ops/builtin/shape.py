"""Built-in shape ops and their gradient rules.

Views (C view kernels of :mod:`fastop._core.views`: the output shares x's memory; no
data moves):

* ``reshape(x, shape=)`` — PaddlePaddle's rules: ``0`` copies x's dim, one ``-1`` is
  inferred; a view of contiguous x (a non-contiguous x is copied first, as numpy does);
* ``transpose(x, perm=)``;
* ``slice(x, axes=, starts=, ends=, strides=[], decrease_axis=[])`` — Python slice
  semantics per axis; ``decrease_axis`` entries are indexed (``x[i]``) and dropped
  (how ``Tensor.__getitem__`` indexes);
* ``squeeze(x, axis=None)`` — drops size-1 dims (all, or those among ``axis``; other
  dims named in ``axis`` are kept, as in PaddlePaddle);
* ``unsqueeze(x, axis=)`` — inserts size-1 dims, one per entry of ``axis``, in order.

Copies: ``concat(xs, axis=0)`` (numpy's concatenate), ``gather(x, index, axis=0)``
(Cython, :mod:`fastop._core.shape_ops`, numpy.take semantics), ``index(x, key=)`` (numpy
advanced indexing: the general case of ``x[key]`` that slice and gather do not cover),
and the backward kernels ``slice_grad``, ``gather_grad`` (Cython scatter-add) and
``index_grad`` (numpy ``add.at``).

Rules: reshape ↔ reshape, transpose → inverse transpose, squeeze ↔ unsqueeze, slice →
slice_grad → slice, concat → slices, gather → gather_grad → gather, index → index_grad →
index.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from fastop._core import shape_ops as _kernels
from fastop._core import views as _views
from fastop.ops._registry import AttrSpec, TensorMeta
from fastop.ops.builtin._table import B
from fastop.ops.builtin.elementwise import shape_attr

__all__ = ["register", "slice_key"]

SLICE_ATTRS = {"axes": list, "starts": list, "ends": list, "strides": [],
               "decrease_axis": []}


def slice_key(ndim: int, axes: Sequence[int], starts: Sequence[int], ends: Sequence[int],
              strides: Sequence[int], decrease_axis: Sequence[int]) -> tuple:
    """The numpy index of a slice op's attributes (ints for decrease_axis entries)."""
    key: list[Any] = [slice(None)] * ndim
    for k, axis in enumerate(axes):
        if axis in decrease_axis:
            key[axis] = starts[k]
        else:
            key[axis] = slice(starts[k], ends[k], strides[k] if strides else 1)
    return tuple(key)


def squeezed_axes(shape: Sequence[Any], axis: Any) -> list[int]:
    """The dims squeeze drops: size-1 dims (among `axis` when given)."""
    nd = len(shape)
    axes = range(nd) if axis is None or axis == [] else [axis] if isinstance(axis, int) \
        else axis
    return sorted({a % nd for a in axes if shape[a] == 1})


def inserted_axes(ndim: int, axis: Any) -> list[int]:
    """Positions, in the output, of the dims unsqueeze inserts (in the order given)."""
    new: list[bool] = [False] * ndim
    for a in [axis] if isinstance(axis, int) else axis:
        new.insert(a + len(new) + 1 if a < 0 else a, True)
    return [i for i, is_new in enumerate(new) if is_new]


# --------------------------------------------------------------------------- rules

def reshape_grad(x, dout, shape):
    return B.reshape(dout, shape=shape_attr(x.shape))


def transpose_grad(dout, perm):
    ndim = len(perm)
    order = [p + ndim if p < 0 else p for p in perm]
    return B.transpose(dout, perm=sorted(range(ndim), key=order.__getitem__))


def squeeze_grad(x, dout, axis):
    drop = squeezed_axes(x.shape, axis)
    return B.unsqueeze(dout, axis=drop) if drop else dout


def unsqueeze_grad(x, dout, axis):
    return B.squeeze(dout, axis=inserted_axes(x.ndim, axis))


def slice_grad_grad(g, axes, starts, ends, strides, decrease_axis):
    return None, B.slice(g, axes=axes, starts=starts, ends=ends, strides=strides,
                         decrease_axis=decrease_axis)


def concat_grad(xs, dout, axis):
    ax = axis + xs[0].ndim if axis < 0 else axis
    bounds = _concat_bounds([x.shape[ax] for x in xs], axis)
    return [B.slice(dout, axes=[ax], starts=[start], ends=[end]) for start, end in bounds]


def gather_grad_grad(index, g, axis):
    return None, None, B.gather(g, index, axis=axis)


def index_grad_grad(g, key):
    return None, B.index(g, key=key)


# --------------------------------------------------------------------------- kernels

def slice_grad_meta(x, dy, axes, starts, ends, strides, decrease_axis):
    return TensorMeta(x.shape, dy.dtype)


def slice_grad_kernel(x, dy, axes, starts, ends, strides, decrease_axis):
    dx = np.zeros(x.shape, dtype=dy.dtype)
    dx[slice_key(x.ndim, axes, starts, ends, strides, decrease_axis)] = dy
    return dx


def concat_meta(xs, axis):
    return TensorMeta(*_concat_meta(xs, axis))


def concat_kernel(xs, axis):
    _concat_meta([TensorMeta(x.shape, x.dtype) for x in xs], axis)
    return np.concatenate(xs, axis=axis)


def index_meta(x, key):
    shape = np.empty([0 if d is None else d for d in x.shape], dtype=np.bool_)[key].shape
    known = np.empty([1 if d is None else d for d in x.shape], dtype=np.bool_)[key].shape
    # a dim computed from an unknown one is unknown (it differs between the two probes)
    return TensorMeta([a if a == b else None for a, b in zip(shape, known)]
                      if None in x.shape else shape, x.dtype)


def index_kernel(x, key):
    return np.ascontiguousarray(x[key])


def index_grad_meta(x, dy, key):
    return TensorMeta(x.shape, dy.dtype)


def index_grad_kernel(x, dy, key):
    dx = np.zeros(x.shape, dtype=dy.dtype)
    np.add.at(dx, key, dy)
    return dx


def register(registry) -> None:
    registry.define_ckernel(
        "fastop::reshape", _views.reshape, attrs={"shape": list},
        doc="x with a new shape (0 copies x's dim, one -1 is inferred); a view of "
            "contiguous x."
    ).grad(needs=("x",), reads={})(reshape_grad)
    registry.define_ckernel(
        "fastop::transpose", _views.transpose, attrs={"perm": list},
        doc="A view of x with its axes permuted: out.shape[i] = x.shape[perm[i]]."
    ).grad()(transpose_grad)
    registry.define_ckernel(
        "fastop::squeeze", _views.squeeze, attrs={"axis": AttrSpec("axis", object, None)},
        doc="A view of x without its size-1 dims (all, or those among axis)."
    ).grad(needs=("x",), reads={})(squeeze_grad)
    registry.define_ckernel(
        "fastop::unsqueeze", _views.unsqueeze, attrs={"axis": AttrSpec("axis", object)},
        doc="A view of x with size-1 dims inserted, one per entry of axis, in order."
    ).grad(needs=("x",), reads={})(unsqueeze_grad)

    slice_grad = registry.define(
        "fastop::slice_grad", inputs=["x", "dy"], outputs=["dx"], attrs=dict(SLICE_ATTRS),
        differentiable=("dy",),
        doc="Backward of slice: zeros shaped like x with dy written into the slice.")
    slice_grad.meta(slice_grad_meta)
    slice_grad.kernel()(slice_grad_kernel)
    slice_grad.grad()(slice_grad_grad)
    registry.define_ckernel(
        "fastop::slice", _views.slice, attrs=dict(SLICE_ATTRS),
        doc="A view x[start:end:stride] along each of `axes` (Python slice semantics: "
            "negative positions count from the end, out-of-range ones are clamped); "
            "axes in decrease_axis are indexed (x[start]) and dropped."
    ).grad_op(slice_grad, needs=("x", "dout"), reads={})

    concat = registry.define(
        "fastop::concat", inputs=["xs*"], outputs=["out"], attrs={"axis": 0},
        doc="Join tensors of one dtype along an existing axis (a copy).")
    concat.meta(concat_meta)
    concat.kernel()(concat_kernel)
    concat.grad(needs=("xs",), reads={})(concat_grad)

    gather_grad = registry.define_ckernel(
        "fastop::gather_grad", _kernels.gather_grad, attrs={"axis": 0},
        differentiable=("dout",), promotes=("x", "dout"),
        doc="Backward of gather: zeros like x with dout added at the gathered positions.")
    gather_grad.grad(needs=("index",))(gather_grad_grad)
    registry.define_ckernel(
        "fastop::gather", _kernels.gather, attrs={"axis": 0}, differentiable=("x",),
        promotes=("x",),
        doc="Select entries of x along axis by an integer index array (numpy.take): "
            "out.shape = x.shape[:axis] + index.shape + x.shape[axis+1:]."
    ).grad_op(gather_grad, needs=("x", "index", "dout"), reads={"x": ("index",)})

    index_grad = registry.define(
        "fastop::index_grad", inputs=["x", "dy"], outputs=["dx"],
        attrs={"key": AttrSpec("key", object)}, differentiable=("dy",),
        doc="Backward of index: zeros shaped like x with dy added at the indexed "
            "positions (numpy's add.at: repeated positions accumulate).")
    index_grad.meta(index_grad_meta)
    index_grad.kernel()(index_grad_kernel)
    index_grad.grad()(index_grad_grad)
    index = registry.define(
        "fastop::index", inputs=["x"], outputs=["out"],
        attrs={"key": AttrSpec("key", object)},
        doc="x[key] by numpy's advanced indexing (integer and boolean arrays in `key`); "
            "a copy.")
    index.meta(index_meta)
    index.kernel()(index_kernel)
    index.grad_op(index_grad, needs=("x", "dout"), reads={})


def _concat_bounds(sizes: Sequence[Any], axis: int) -> list[tuple[int, int]]:
    """slice bounds of each input of a concat in its output. One size may be unknown
    (static graphs): inputs after it are addressed from the end."""
    unknown = [i for i, s in enumerate(sizes) if s is None or s < 0]
    if len(unknown) > 1:
        raise ValueError(f"fastop::concat: the gradient needs the size along axis {axis} "
                         f"of all inputs but one, got {list(sizes)}")
    u = unknown[0] if unknown else len(sizes)
    bounds, start = [], 0
    for s in sizes[:u]:
        bounds.append((start, start + s))
        start += s
    if unknown:
        end = -sum(sizes[u + 1:])
        bounds.append((start, end or _views.SLICE_END))
        for s in sizes[u + 1:]:
            bounds.append((end, end + s or _views.SLICE_END))
            end += s
    return bounds


def _concat_meta(xs: Sequence[TensorMeta], axis: int) -> tuple[list[Any], Any]:
    if not xs:
        raise ValueError("fastop::concat: needs at least one tensor")
    first = xs[0]
    nd = len(first.shape)
    if not -nd <= axis < nd:
        raise ValueError(f"fastop::concat: axis {axis} is out of range for tensors of "
                         f"{nd} dims")
    ax = axis % nd
    out = list(first.shape)
    for i, x in enumerate(xs[1:], 1):
        if x.dtype != first.dtype:
            raise TypeError(f"fastop::concat: all inputs need one dtype; xs[0] is "
                            f"{first.dtype.name}, xs[{i}] is {x.dtype.name}")
        if len(x.shape) != nd or any(
                d != ax and a is not None and b is not None and a != b
                for d, (a, b) in enumerate(zip(first.shape, x.shape))):
            raise ValueError(f"fastop::concat: shapes must match except along axis {axis}; "
                             f"xs[0] has {list(first.shape)}, xs[{i}] has {list(x.shape)}")
        out[ax] = None if out[ax] is None or x.shape[ax] is None else out[ax] + x.shape[ax]
    return out, first.dtype
