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

from fastop._core import shape_ops as K
from fastop._core import views as V
from fastop.ops._registry import AttrSpec, TensorMeta
from fastop.ops.builtin._table import B
from fastop.ops.builtin.elementwise import shape_attr

__all__ = ["register", "samples", "slice_key"]

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
    """The dims squeeze drops: size-1 dims (among `axis` when given); none of a 0-D x."""
    nd = len(shape)
    if nd == 0:
        return []
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

def reshape_grad_rule(x, dout, shape):
    return B.reshape(dout, shape=shape_attr(x.shape))


def transpose_grad_rule(dout, perm):
    ndim = len(perm)
    order = [p + ndim if p < 0 else p for p in perm]
    return B.transpose(dout, perm=sorted(range(ndim), key=order.__getitem__))


def squeeze_grad_rule(x, dout, axis):
    drop = squeezed_axes(x.shape, axis)
    return B.unsqueeze(dout, axis=drop) if drop else dout


def unsqueeze_grad_rule(x, dout, axis):
    return B.squeeze(dout, axis=inserted_axes(x.ndim, axis))


def slice_grad_grad_rule(g, axes, starts, ends, strides, decrease_axis):
    return None, B.slice(g, axes=axes, starts=starts, ends=ends, strides=strides,
                         decrease_axis=decrease_axis)


def concat_grad_rule(xs, dout, axis):
    ax = axis + xs[0].ndim if axis < 0 else axis
    bounds = _concat_bounds([x.shape[ax] for x in xs], axis)
    return [B.slice(dout, axes=[ax], starts=[start], ends=[end]) for start, end in bounds]


def gather_grad_grad_rule(index, g, axis):
    return None, None, B.gather(g, index, axis=axis)


def index_grad_grad_rule(g, key):
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
        "fastop::reshape", V.reshape, attrs={"shape": list},
        doc="x with a new shape (0 copies x's dim, one -1 is inferred); a view of "
            "contiguous x."
    ).grad(needs=("x",), reads={})(reshape_grad_rule)
    registry.define_ckernel(
        "fastop::transpose", V.transpose, attrs={"perm": list},
        doc="A view of x with its axes permuted: out.shape[i] = x.shape[perm[i]]."
    ).grad()(transpose_grad_rule)
    registry.define_ckernel(
        "fastop::squeeze", V.squeeze, attrs={"axis": AttrSpec("axis", object, None)},
        doc="A view of x without its size-1 dims (all, or those among axis)."
    ).grad(needs=("x",), reads={})(squeeze_grad_rule)
    registry.define_ckernel(
        "fastop::unsqueeze", V.unsqueeze, attrs={"axis": AttrSpec("axis", object)},
        doc="A view of x with size-1 dims inserted, one per entry of axis, in order."
    ).grad(needs=("x",), reads={})(unsqueeze_grad_rule)

    slice_grad = registry.define(
        "fastop::slice_grad", inputs=["x", "dy"], outputs=["dx"], attrs=dict(SLICE_ATTRS),
        differentiable=("dy",),
        doc="Backward of slice: zeros shaped like x with dy written into the slice.")
    slice_grad.meta(slice_grad_meta)
    slice_grad.kernel()(slice_grad_kernel)
    slice_grad.grad()(slice_grad_grad_rule)
    registry.define_ckernel(
        "fastop::slice", V.slice, attrs=dict(SLICE_ATTRS),
        doc="A view x[start:end:stride] along each of `axes` (Python slice semantics: "
            "negative positions count from the end, out-of-range ones are clamped); "
            "axes in decrease_axis are indexed (x[start]) and dropped."
    ).grad_op(slice_grad, needs=("x", "dout"), reads={})

    concat = registry.define(
        "fastop::concat", inputs=["xs*"], outputs=["out"], attrs={"axis": 0},
        doc="Join tensors of one dtype along an existing axis (a copy).")
    concat.meta(concat_meta)
    concat.kernel()(concat_kernel)
    concat.grad(needs=("xs",), reads={})(concat_grad_rule)

    gather_grad = registry.define_ckernel(
        "fastop::gather_grad", K.gather_grad, attrs={"axis": 0},
        differentiable=("dout",), promotes=("x", "dout"),
        doc="Backward of gather: zeros like x with dout added at the gathered positions.")
    gather_grad.grad(needs=("index",))(gather_grad_grad_rule)
    registry.define_ckernel(
        "fastop::gather", K.gather, attrs={"axis": 0}, differentiable=("x",),
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
    index_grad.grad()(index_grad_grad_rule)
    index = registry.define(
        "fastop::index", inputs=["x"], outputs=["out"],
        attrs={"key": AttrSpec("key", object)},
        doc="x[key] by numpy's advanced indexing (integer and boolean arrays in `key`); "
            "a copy.")
    index.meta(index_meta)
    index.kernel()(index_kernel)
    index.grad_op(index_grad, needs=("x", "dout"), reads={})



def samples() -> dict[str, list[Any]]:
    """opcheck's inputs for this family's ops: float32 and float64; reshape with 0 and
    -1; slices with negative starts, strides and a decreased axis; gather and index with
    repeated positions (their gradients accumulate)."""
    from fastop.ops.builtin._sampling import Values, sample   # tests and tools only
    v = Values(5)
    f32 = "float32"
    return {
        "fastop::reshape": [sample(v.normal(2, 3), shape=[3, 2]),
                            sample(v.normal(2, 3, 4, dtype=f32), shape=[0, -1])],
        "fastop::transpose": [sample(v.normal(2, 3), perm=[1, 0]),
                              sample(v.normal(2, 3, 4, dtype=f32), perm=[2, 0, 1])],
        "fastop::squeeze": [sample(v.normal(2, 1, 3), axis=[1]),
                            sample(v.normal(1, 3, 1, dtype=f32))],
        "fastop::unsqueeze": [sample(v.normal(2, 3), axis=[1]),
                              sample(v.normal(3, dtype=f32), axis=[0, -1])],
        "fastop::slice": [sample(v.normal(3, 4), axes=[0, 1], starts=[0, 1], ends=[2, 3]),
                          sample(v.normal(4, 5, dtype=f32), axes=[1, 0], starts=[-4, 3],
                                 ends=[5, 0], strides=[2, -1]),
                          sample(v.normal(3, 4), axes=[0], starts=[1], ends=[2],
                                 decrease_axis=[0])],
        "fastop::concat": [sample([v.normal(2, 3), v.normal(1, 3)], axis=0),
                           sample([v.normal(2, 1, dtype=f32), v.normal(2, 2, dtype=f32),
                                   v.normal(2, 3, dtype=f32)], axis=-1)],
        "fastop::gather": [sample(v.normal(4, 3), np.array([0, 2, 2]), axis=0),
                           sample(v.normal(2, 3, dtype=f32), np.array([[2, 0], [1, 1]]),
                                  axis=1)],
        "fastop::index": [sample(v.normal(3, 4), key=(np.array([0, 2, 0]), np.array([1, 3, 1]))),
                          sample(v.normal(3, 4, dtype=f32),
                                 key=np.array([True, False, True]))],
    }


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
        bounds.append((start, end or V.SLICE_END))
        for s in sizes[u + 1:]:
            bounds.append((end, end + s or V.SLICE_END))
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
