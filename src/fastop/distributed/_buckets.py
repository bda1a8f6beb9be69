"""Gradient averaging in fixed-order flat buckets (Horovod's fusion buffers, PyTorch
DDP's buckets): the gradients of many parameters travel in a few large messages.

:func:`plan_buckets` decides the buckets — in backward order (the last parameter first,
PaddlePaddle's order), one dtype each, the first at most ``last_comm_buffer_size`` MB
and the others ``comm_buffer_size`` MB (a larger parameter has a bucket of its own) —
from sizes alone, so every rank plans the same buckets. :class:`GradientAverager`
(eager mode) averages the parameters' ``.grad`` through one flat buffer per bucket,
filled anew at each step (fastop's allocator recycles the block) and handed back as the
averaged gradients' memory; the static op ``dist::allreduce_mean`` averages one bucket
of gradient variables (:func:`average_flat`).
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from fastop._core.storage import empty
from fastop._tensor import from_numpy_tensor
from fastop.distributed._collective import ReduceOp, allreduce_buffers
from fastop.distributed._world import world

__all__ = ["plan_buckets", "GradientAverager", "average_flat", "MB"]

MB = 1 << 20


def plan_buckets(nbytes: Sequence[int], dtypes: Sequence[str], cap_mb: float,
                 first_cap_mb: float) -> list[list[int]]:
    """Indices of the tensors in each bucket, in reduction order: from the last tensor
    to the first, a tensor joining the open bucket of its dtype while that stays within
    its cap (``first_cap_mb`` for the first bucket, ``cap_mb`` after)."""
    buckets: list[list[int]] = []
    open_bucket: dict[str, tuple[list[int], int]] = {}   # dtype -> (bucket, its bytes)
    for i in reversed(range(len(nbytes))):
        members, size = open_bucket.get(dtypes[i], (None, 0))
        if members is not None and size + nbytes[i] <= MB * (
                first_cap_mb if members is buckets[0] else cap_mb):
            members.append(i)
        else:
            members, size = [i], 0
            buckets.append(members)
        open_bucket[dtypes[i]] = (members, size + nbytes[i])
    return buckets


def _views(flat: np.ndarray, shapes: Sequence[Sequence[int]]) -> list[np.ndarray]:
    """Consecutive pieces of `flat` with the given shapes (views, no copies)."""
    views, offset = [], 0
    for shape in shapes:
        n = int(np.prod(shape, dtype=np.int64))
        views.append(flat[offset:offset + n].reshape(shape))
        offset += n
    return views


class _Bucket:
    """Parameters whose gradients travel together in one flat buffer: each gradient
    times 1/world size (zeros where this rank has none), then one flag per parameter
    (1/world size where this rank has a gradient), summed over the ranks."""

    __slots__ = ("params", "shapes", "size", "dtype", "buffer", "pieces")

    def __init__(self, params: list[Any]) -> None:
        self.params = params
        self.shapes = [list(p.shape) for p in params]
        self.size = sum(p.size for p in params) + len(params)
        self.dtype = params[0].dtype
        self.buffer: Any = None
        self.pieces: list[np.ndarray] = []

    def pack(self, scale: float) -> None:
        """Fill a new buffer. New, not reused: the averaged gradients are handed out as
        views of it; fastop's allocator recycles the block once they are dropped."""
        self.buffer = empty([self.size], self.dtype)
        flat = np.asarray(self.buffer)
        self.pieces = _views(flat, self.shapes)
        flags = flat[self.size - len(self.params):]
        for k, (param, piece) in enumerate(zip(self.params, self.pieces)):
            grad = param.grad
            if grad is None:
                piece.fill(0)
                flags[k] = 0
            else:
                np.multiply(np.asarray(grad), scale, out=piece)
                flags[k] = scale

    def unpack(self) -> None:
        """Give each parameter its averaged gradient (a view of the buffer, as the
        engine gives new tensors, never writing into a .grad); a parameter no rank had
        a gradient for keeps ``.grad = None`` (its flags summed to 0), as in one
        process."""
        flags = np.asarray(self.buffer)[self.size - len(self.params):].tolist()
        for param, piece, flag in zip(self.params, self.pieces, flags):
            if flag != 0:
                param.grad = from_numpy_tensor(piece)
        self.buffer, self.pieces = None, []


class GradientAverager:
    """Averages the ``.grad`` of a fixed list of parameters over all ranks, in buckets
    planned once (every rank must hold the same parameter shapes and dtypes, in the
    same order; zero-filled where a rank has no gradient, so message sizes agree).
    Scaling by 1/world size while packing saves a pass over the summed buffer."""

    def __init__(self, params: Sequence[Any], cap_mb: float, first_cap_mb: float,
                 what: str) -> None:
        params = [p for p in params if p.dtype.is_floating]
        plan = plan_buckets([p.nbytes for p in params], [p.dtype.name for p in params],
                            cap_mb, first_cap_mb)
        self.buckets = [_Bucket([params[i] for i in members]) for members in plan]
        total = sum(b.size * b.dtype.itemsize for b in self.buckets)
        self.what = f"{what} (gradient all_reduce: {len(self.buckets)} bucket(s), " \
                    f"{total / MB:.1f} MB)"

    def average(self) -> None:
        w = world()
        if w.size == 1 or not self.buckets:
            return
        for bucket in self.buckets:
            bucket.pack(1.0 / w.size)
        allreduce_buffers(w, [b.buffer for b in self.buckets], ReduceOp.SUM, self.what)
        for bucket in self.buckets:
            bucket.unpack()


def average_flat(arrays: Sequence[np.ndarray]) -> np.ndarray:
    """The mean over ranks of `arrays` (one dtype), concatenated into one flat array:
    the kernel of ``dist::allreduce_mean`` (in a world of one process, the
    concatenation). Scaled by 1/world size while packed, like :class:`GradientAverager`,
    so eager and static training compute the same values."""
    w = world()
    flat = np.asarray(empty([sum(a.size for a in arrays)], arrays[0].dtype.name))
    for piece, a in zip(_views(flat, [a.shape for a in arrays]), arrays):
        np.multiply(a, 1.0 / w.size, out=piece)
    if w.size > 1:
        allreduce_buffers(w, [flat], ReduceOp.SUM, "dist::allreduce_mean")
    return flat
