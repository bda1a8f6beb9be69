"""Built-in reduction ops and their gradient rules.

Cython kernels (:mod:`fastop._core.reduce`): ``sum mean max`` (``axis=None|int|list``,
``keepdim=False``; no axis or ``[]`` reduces everything), ``argmax(axis=None, keepdim=)``
(int64, not differentiable) and ``sum_to_shape(x, shape=)`` (the gradient of a
broadcast; ``-1`` keeps x's dim). Views (C view kernels of :mod:`fastop._core.shape_ops`
returning a read-only DenseTensor that shares x's memory, stride 0 on broadcast dims):
``broadcast_to(x, shape=)`` (``-1`` keeps x's dim) and ``expand_as(x, y)`` (to y's shape,
which works when y's shape is only known at run time, as in static graphs).

Gradient rules are compositions of registered ops, looked up when the rule runs:
sum → unsqueeze + expand_as; mean → the same, scaled by 1/count; max → the gradient
split evenly among the maxima (mask = x == max); sum_to_shape ↔ expand_as/broadcast_to.
"""
from __future__ import annotations

from typing import Any, Sequence

from fastop._core import reduce as _kernels
from fastop._core import shape_ops as _views
from fastop._core.storage import as_dtype
from fastop.ops._registry import TensorMeta

__all__ = ["register", "reduced_axes", "known_dims"]

AXIS_ATTRS = {"axis": None, "keepdim": False}


def known_dims(shape: Sequence[Any]) -> list[int]:
    """A shape as an attribute list: unknown dims (None or negative) as -1."""
    return [-1 if d is None or d < 0 else int(d) for d in shape]


def reduced_axes(ndim: int, axis: Any) -> list[int]:
    """The sorted, non-negative axes a reduction over `axis` removes."""
    if axis is None or axis == []:
        return list(range(ndim))
    axes = [axis] if isinstance(axis, int) else list(axis)
    return sorted(a + ndim if a < 0 else a for a in axes)


def _broadcast_shape(op: str, shape: Sequence[Any], target: Sequence[int]) -> list[Any]:
    """The shape `shape` broadcasts to under `target` (-1: keep; None: unknown)."""
    lead = len(target) - len(shape)
    if lead < 0:
        raise ValueError(f"{op}: cannot broadcast shape {list(shape)} to {list(target)} "
                         f"(fewer dims)")
    out = []
    for i, t in enumerate(target):
        d = shape[i - lead] if i >= lead else 1
        if t == -1:
            if i < lead:
                raise ValueError(f"{op}: -1 in shape {list(target)} at a new leading dim")
            out.append(d)
        elif d is not None and d != 1 and d != t:
            raise ValueError(f"{op}: cannot broadcast shape {list(shape)} to {list(target)}")
        else:
            out.append(t)
    return out


def register(registry) -> None:
    def op(name: str) -> Any:
        return registry.get(f"fastop::{name}")

    def back_to(x: Any, dy: Any, axis: Any, keepdim: bool) -> Any:
        """dy of a reduction of x, with its reduced dims restored as size 1."""
        axes = reduced_axes(len(x.shape), axis)
        return dy if keepdim or not axes else op("unsqueeze")(dy, axis=axes)

    sum_ = registry.define_ckernel(
        "fastop::sum", _kernels.sum, attrs=dict(AXIS_ATTRS),
        doc="Sum over axes (all when axis is None or []) in x's dtype; floats are summed "
            "pairwise (error grows like log n).")

    @sum_.grad(needs=("x",), reads={})
    def _(x, dy, axis, keepdim):
        return (op("expand_as")(back_to(x, dy, axis, keepdim), x),)

    mean = registry.define_ckernel(
        "fastop::mean", _kernels.mean, attrs=dict(AXIS_ATTRS),
        doc="Mean over axes (all when axis is None or []); NaN over zero elements.")

    @mean.grad(needs=("x",), reads={})
    def _(x, dy, axis, keepdim):
        dy = back_to(x, dy, axis, keepdim)
        dims = [x.shape[a] for a in reduced_axes(len(x.shape), axis)]
        if all(d is not None and d >= 0 for d in dims):
            count = 1
            for d in dims:
                count *= d
            scaled = op("multiply")(dy, 1.0 / count if count else float("nan"))
        else:   # unknown until run time (static graphs): count with the graph
            ones = op("full_like")(x, fill_value=1.0)
            scaled = op("divide")(dy, op("sum")(ones, axis=axis, keepdim=True))
        return (op("expand_as")(scaled, x),)

    max_ = registry.define_ckernel(
        "fastop::max", _kernels.max, attrs=dict(AXIS_ATTRS),
        doc="Maximum over axes (all when axis is None or []); NaN wins; a maximum over "
            "zero elements is an error.")

    @max_.grad(needs=("x", "out"))
    def _(x, out, dy, axis, keepdim):
        expand_as = op("expand_as")
        hit = op("cast")(op("equal")(x, expand_as(back_to(x, out, axis, keepdim), x)),
                         dtype=as_dtype(x.dtype).name)
        ties = op("sum")(hit, axis=axis, keepdim=True)
        share = op("divide")(back_to(x, dy, axis, keepdim), ties)
        return (op("multiply")(hit, expand_as(share, x)),)

    registry.define_ckernel(
        "fastop::argmax", _kernels.argmax, attrs=dict(AXIS_ATTRS), differentiable=(),
        doc="int64 index of the first maximum along axis (flattened, C order, when axis "
            "is None); the first NaN counts as the maximum.")

    sum_to_shape = registry.define_ckernel(
        "fastop::sum_to_shape", _kernels.sum_to_shape, attrs={"shape": list},
        doc="Sum x down to `shape`, a shape x broadcasts from (the gradient of a "
            "broadcast); -1 in shape keeps x's dim.")

    @sum_to_shape.grad(needs=("x",), reads={})
    def _(x, dy, shape):
        return (op("expand_as")(dy, x),)

    broadcast_to = registry.define(
        "fastop::broadcast_to", inputs=["x"], outputs=["out"], attrs={"shape": list},
        doc="A read-only view of x broadcast to `shape` (numpy's rules; -1 keeps x's "
            "dim); no copy.")

    @broadcast_to.meta
    def _(x, shape):
        return TensorMeta(_broadcast_shape("fastop::broadcast_to", x.shape, shape), x.dtype)

    broadcast_to.kernel()(_views.broadcast_to)     # a C view kernel (fastop._core.shape_ops)

    @broadcast_to.grad(needs=("x",), reads={})
    def _(x, dy, shape):
        return (op("sum_to_shape")(dy, shape=known_dims(x.shape)),)

    expand_as = registry.define(
        "fastop::expand_as", inputs=["x", "y"], outputs=["out"], differentiable=("x",),
        doc="A read-only view of x broadcast to y's shape (y's values are not read).")

    @expand_as.meta
    def _(x, y):
        lead = len(y.shape) - len(x.shape)
        if lead < 0:
            raise ValueError(f"fastop::expand_as: cannot broadcast shape {x.shape} to "
                             f"{y.shape} (fewer dims)")
        out = []
        for i, yd in enumerate(y.shape):
            xd = x.shape[i - lead] if i >= lead else 1
            if yd is None:  # unknown unless x fixes it (a dim other than 1)
                out.append(xd if xd != 1 else None)
            elif xd is None or xd in (1, yd):
                out.append(yd)
            else:
                raise ValueError(f"fastop::expand_as: cannot broadcast shape {x.shape} to "
                                 f"{y.shape}")
        return TensorMeta(out, x.dtype)

    expand_as.kernel()(_views.expand_as)           # a C view kernel (fastop._core.shape_ops)

    @expand_as.grad(needs=("x",), reads={})
    def _(x, dy):
        return op("sum_to_shape")(dy, shape=known_dims(x.shape)), None
