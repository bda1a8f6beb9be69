"""Built-in shape ops and their gradient rules.

Views (Python kernels that return a DenseTensor sharing the input's memory, built with
the storage's view methods; no data moves):

* ``reshape(x, shape=)`` — PaddlePaddle's rules: ``0`` copies x's dim, one ``-1`` is
  inferred; a view of contiguous x (a non-contiguous x is copied first, as numpy does);
* ``transpose(x, perm=)``;
* ``slice(x, axes=, starts=, ends=, strides=[])`` — Python slice semantics per axis;
* ``squeeze(x, axis=None)`` — drops size-1 dims (all, or those among ``axis``; other
  dims named in ``axis`` are kept, as in PaddlePaddle);
* ``unsqueeze(x, axis=)`` — inserts size-1 dims, one per entry of ``axis``, in order.

Copies: ``concat(xs, axis=0)`` (numpy's concatenate, a memcpy per input block),
``gather(x, index, axis=0)`` (Cython, :mod:`fastop._core.shape_ops`, numpy.take
semantics), and the backward kernels ``slice_grad`` (zeros with dy written into the
slice) and ``gather_grad`` (Cython scatter-add).

Rules (compositions of registered ops): reshape ↔ reshape, transpose → inverse
transpose, squeeze ↔ unsqueeze, slice → slice_grad → slice, concat → slices,
gather → gather_grad → gather.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from fastop._core import shape_ops as _kernels
from fastop._core.storage import from_numpy
from fastop.ops._registry import AttrSpec, TensorMeta

__all__ = ["register"]


# --------------------------------------------------------------------------- shape logic

def _reshape_target(op: str, shape: Sequence[Any], target: Sequence[int]) -> list[Any]:
    """Resolve 0 (copy x's dim) and -1 (infer) in a reshape target; None if unknown."""
    out: list[Any] = []
    infer = None
    for i, t in enumerate(target):
        if t == 0:
            if i >= len(shape):
                raise ValueError(f"{op}: shape {list(target)} copies dim {i} (0) but x has "
                                 f"only {len(shape)} dims")
            out.append(shape[i])
        elif t == -1:
            if infer is not None:
                raise ValueError(f"{op}: shape {list(target)} has more than one -1")
            infer = i
            out.append(None)
        elif t < 0:
            raise ValueError(f"{op}: invalid shape {list(target)}")
        else:
            out.append(int(t))
    # dims copied with 0 appear on both sides: leave them out, so that an unknown
    # copied dim does not hide the inferred one
    copied = {i for i, t in enumerate(target) if t == 0}
    size = _prod([d for i, d in enumerate(shape) if i not in copied])
    rest = _prod([d for i, d in enumerate(out) if i != infer and i not in copied])
    if infer is not None:
        if size is not None and rest is not None:
            if rest == 0 or size % rest:
                raise ValueError(f"{op}: cannot reshape x of shape {list(shape)} into "
                                 f"{list(target)}")
            out[infer] = size // rest
    elif size is not None and rest is not None and size != rest:
        raise ValueError(f"{op}: cannot reshape x of shape {list(shape)} into "
                         f"{list(target)}")
    return out


def _prod(dims: Sequence[Any]) -> int | None:
    out = 1
    for d in dims:
        if d is None:
            return None
        out *= d
    return out


def _perm(op: str, ndim: int, perm: Sequence[int]) -> list[int]:
    norm = [p + ndim if p < 0 else p for p in perm]
    if sorted(norm) != list(range(ndim)):
        raise ValueError(f"{op}: perm {list(perm)} is not a permutation of the {ndim} axes "
                         f"of x")
    return norm


def _slices(op: str, shape: Sequence[Any], axes, starts, ends, strides) -> list[slice]:
    n = len(axes)
    if len(starts) != n or len(ends) != n or (strides and len(strides) != n):
        raise ValueError(f"{op}: axes, starts, ends (and strides) must have one entry per "
                         f"axis, got {list(axes)}, {list(starts)}, {list(ends)}, "
                         f"{list(strides)}")
    key = [slice(None)] * len(shape)
    for i, a in enumerate(axes):
        if not -len(shape) <= a < len(shape):
            raise ValueError(f"{op}: axis {a} is out of range for x of shape {list(shape)}")
        step = strides[i] if strides else 1
        if step == 0:
            raise ValueError(f"{op}: strides must not be 0")
        key[a] = slice(starts[i], ends[i], step)
    return key


def _squeezed(op: str, shape: Sequence[Any], axis: Any) -> list[int]:
    """The dims squeeze drops: size-1 dims (among `axis` when given)."""
    nd = len(shape)
    axes = range(nd) if axis is None or axis == [] else [axis] if isinstance(axis, int) \
        else axis
    for a in axes:
        if not -nd <= a < nd:
            raise ValueError(f"{op}: axis {a} is out of range for x of shape {list(shape)}")
    return sorted({a % nd for a in axes if shape[a] == 1})


def _inserted(op: str, ndim: int, axis: Any) -> list[int]:
    """Positions, in the output, of the dims unsqueeze inserts (in the order given)."""
    dims: list[bool] = [False] * ndim
    for a in [axis] if isinstance(axis, int) else axis:
        if not -len(dims) - 1 <= a <= len(dims):
            raise ValueError(f"{op}: axis {a} is out of range for a tensor of {len(dims)} dims")
        dims.insert(a + len(dims) + 1 if a < 0 else a, True)
    return [i for i, new in enumerate(dims) if new]


def _dims(shape: Sequence[Any]) -> list[int]:
    return [-1 if d is None or d < 0 else int(d) for d in shape]


# --------------------------------------------------------------------------- ops

def register(registry) -> None:
    def op(name: str) -> Any:
        return registry.get(f"fastop::{name}")

    any_attr = AttrSpec("axis", object)

    reshape = registry.define(
        "fastop::reshape", inputs=["x"], outputs=["out"], attrs={"shape": list},
        doc="x with a new shape (0 copies x's dim, one -1 is inferred); a view of "
            "contiguous x.")

    @reshape.meta
    def _(x, shape):
        return TensorMeta(_reshape_target("fastop::reshape", x.shape, shape), x.dtype)

    @reshape.kernel()
    def _(x, shape):
        return from_numpy(x).reshape(_reshape_target("fastop::reshape", x.shape, shape))

    @reshape.grad(needs=("x",), reads={})
    def _(x, dy, shape):
        return (op("reshape")(dy, shape=_dims(x.shape)),)

    transpose = registry.define(
        "fastop::transpose", inputs=["x"], outputs=["out"], attrs={"perm": list},
        doc="A view of x with its axes permuted: out.shape[i] = x.shape[perm[i]].")

    @transpose.meta
    def _(x, perm):
        return TensorMeta([x.shape[p] for p in _perm("fastop::transpose", x.ndim, perm)],
                          x.dtype)

    @transpose.kernel()
    def _(x, perm):
        return from_numpy(x).transpose(_perm("fastop::transpose", x.ndim, perm))

    @transpose.grad()
    def _(dy, perm):
        norm = _perm("fastop::transpose", len(perm), perm)
        return (op("transpose")(dy, perm=sorted(range(len(norm)), key=norm.__getitem__)),)

    slice_op = registry.define(
        "fastop::slice", inputs=["x"], outputs=["out"],
        attrs={"axes": list, "starts": list, "ends": list, "strides": []},
        doc="A view x[start:end:stride] along each of `axes` (Python slice semantics: "
            "negative positions count from the end, out-of-range ones are clamped).")

    @slice_op.meta
    def _(x, axes, starts, ends, strides):
        key = _slices("fastop::slice", x.shape, axes, starts, ends, strides)
        return TensorMeta([None if d is None else len(range(*k.indices(d)))
                           for d, k in zip(x.shape, key)], x.dtype)

    @slice_op.kernel()
    def _(x, axes, starts, ends, strides):
        return from_numpy(x)[tuple(_slices("fastop::slice", x.shape, axes, starts, ends,
                                           strides))]

    @slice_op.grad(needs=("x",), reads={})
    def _(x, dy, axes, starts, ends, strides):
        return (op("slice_grad")(x, dy, axes=axes, starts=starts, ends=ends,
                                 strides=strides),)

    slice_grad = registry.define(
        "fastop::slice_grad", inputs=["x", "dy"], outputs=["dx"],
        attrs={"axes": list, "starts": list, "ends": list, "strides": []},
        differentiable=("dy",),
        doc="Backward of slice: zeros shaped like x with dy written into the slice.")

    @slice_grad.meta
    def _(x, dy, axes, starts, ends, strides):
        return TensorMeta(x.shape, dy.dtype)

    @slice_grad.kernel()
    def _(x, dy, axes, starts, ends, strides):
        dx = np.zeros(x.shape, dtype=dy.dtype)
        dx[tuple(_slices("fastop::slice_grad", x.shape, axes, starts, ends, strides))] = dy
        return dx

    @slice_grad.grad()
    def _(g, axes, starts, ends, strides):
        return None, op("slice")(g, axes=axes, starts=starts, ends=ends, strides=strides)

    concat = registry.define(
        "fastop::concat", inputs=["xs*"], outputs=["out"], attrs={"axis": 0},
        doc="Join tensors of one dtype along an existing axis (a copy).")

    @concat.meta
    def _(xs, axis):
        return TensorMeta(*_concat_meta(xs, axis))

    @concat.kernel()
    def _(xs, axis):
        _concat_meta([TensorMeta(x.shape, x.dtype) for x in xs], axis)
        return np.concatenate(xs, axis=axis)

    @concat.grad(needs=("xs",), reads={})
    def _(xs, dy, axis):
        ax = axis + len(xs[0].shape) if axis < 0 else axis
        bounds = _concat_bounds([x.shape[ax] for x in xs], axis)
        return ([op("slice")(dy, axes=[ax], starts=[start], ends=[end])
                 for start, end in bounds],)

    gather = registry.define_ckernel(
        "fastop::gather", _kernels.gather, attrs={"axis": 0}, differentiable=("x",),
        doc="Select entries of x along axis by an integer index array (numpy.take): "
            "out.shape = x.shape[:axis] + index.shape + x.shape[axis+1:].")

    @gather.grad(needs=("x", "index"), reads={"x": ("index",)})
    def _(x, index, dy, axis):
        return op("gather_grad")(x, index, dy, axis=axis), None

    gather_grad = registry.define_ckernel(
        "fastop::gather_grad", _kernels.gather_grad, attrs={"axis": 0},
        differentiable=("dout",),
        doc="Backward of gather: zeros like x with dout added at the gathered positions.")

    @gather_grad.grad(needs=("index",))
    def _(index, g, axis):
        return None, None, op("gather")(g, index, axis=axis)

    squeeze = registry.define(
        "fastop::squeeze", inputs=["x"], outputs=["out"], attrs={"axis": None},
        doc="A view of x without its size-1 dims (all, or those among axis).")

    @squeeze.meta
    def _(x, axis):
        drop = _squeezed("fastop::squeeze", x.shape, axis)
        return TensorMeta([d for i, d in enumerate(x.shape) if i not in drop], x.dtype)

    @squeeze.kernel()
    def _(x, axis):
        drop = _squeezed("fastop::squeeze", x.shape, axis)
        return from_numpy(x)[tuple(0 if i in drop else slice(None) for i in range(x.ndim))]

    @squeeze.grad(needs=("x",), reads={})
    def _(x, dy, axis):
        drop = _squeezed("fastop::squeeze", x.shape, axis)
        return (op("unsqueeze")(dy, axis=drop) if drop else dy,)

    unsqueeze = registry.define(
        "fastop::unsqueeze", inputs=["x"], outputs=["out"], attrs={"axis": any_attr},
        doc="A view of x with size-1 dims inserted, one per entry of axis, in order.")

    @unsqueeze.meta
    def _(x, axis):
        new = _inserted("fastop::unsqueeze", x.ndim, axis)
        dims = iter(x.shape)
        return TensorMeta([1 if i in new else next(dims)
                           for i in range(x.ndim + len(new))], x.dtype)

    @unsqueeze.kernel()
    def _(x, axis):
        new = _inserted("fastop::unsqueeze", x.ndim, axis)
        return from_numpy(x)[tuple(None if i in new else slice(None)
                                   for i in range(x.ndim + len(new)))]

    @unsqueeze.grad(needs=("x",), reads={})
    def _(x, dy, axis):
        return (op("squeeze")(dy, axis=_inserted("fastop::unsqueeze", len(x.shape), axis)),)


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
        bounds.append((start, end or _END))
        for s in sizes[u + 1:]:
            bounds.append((end, end + s or _END))
            end += s
    return bounds


_END = 2**62   # a slice end past any dim (slice clamps it)


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
