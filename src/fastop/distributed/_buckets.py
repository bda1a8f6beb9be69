"""Gradient averaging in fixed-order flat buckets (Horovod's fusion buffers, PyTorch
DDP's buckets): the gradients of many parameters travel in a few large messages.

:func:`plan_buckets` decides the buckets — in backward order (the last parameter first,
PaddlePaddle's order), one dtype each, the first at most ``last_comm_buffer_size`` MB
and the others ``comm_buffer_size`` MB (a larger parameter has a bucket of its own) —
from sizes alone, so every rank plans the same buckets. :class:`GradientAverager`
(eager mode) keeps one flat buffer per bucket and averages the parameters' ``.grad``
through it; the static op ``dist::allreduce_mean`` averages one bucket of gradient
variables (:func:`average_flat`).
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from fastop._core.storage import empty
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
    """Parameters whose gradients travel together: one flat buffer holding each
    gradient, then one flag per parameter (1 where this rank has a gradient)."""

    __slots__ = ("params", "buffer", "pieces", "flags")

    def __init__(self, params: list[Any]) -> None:
        self.params = params
        shapes = [list(p.shape) for p in params]
        total = sum(int(np.prod(s, dtype=np.int64)) for s in shapes) + len(params)
        self.buffer = empty([total], params[0].dtype)       # fastop's allocator: reused
        flat = np.asarray(self.buffer)
        self.pieces = _views(flat, shapes)
        self.flags = flat[total - len(params):]

    def pack(self) -> None:
        for k, (param, piece) in enumerate(zip(self.params, self.pieces)):
            grad = param.grad
            if grad is None:
                piece.fill(0)
                self.flags[k] = 0
            else:
                np.copyto(piece, np.asarray(grad))
                self.flags[k] = 1

    def unpack(self) -> None:
        """Write the averaged gradients back: in place where a parameter has a writable
        gradient, as a new tensor where it had none; a parameter no rank had a gradient
        for keeps ``.grad = None`` (its flag averaged to 0), as in one process."""
        from fastop import to_tensor
        for param, piece, flag in zip(self.params, self.pieces, self.flags.tolist()):
            if flag == 0:
                continue
            grad = param.grad
            if grad is None or grad.readonly or not grad.stop_gradient:
                param.grad = to_tensor(piece)
            else:
                np.copyto(np.asarray(grad), piece)


class GradientAverager:
    """Averages the ``.grad`` of a fixed list of parameters over all ranks, in buckets
    planned once (every rank must hold the same parameter shapes and dtypes, in the
    same order; zero-filled where a rank has no gradient, so message sizes agree)."""

    def __init__(self, params: Sequence[Any], cap_mb: float, first_cap_mb: float,
                 what: str) -> None:
        params = [p for p in params if p.dtype.is_floating]
        plan = plan_buckets([p.nbytes for p in params], [p.dtype.name for p in params],
                            cap_mb, first_cap_mb)
        self.buckets = [_Bucket([params[i] for i in members]) for members in plan]
        total = sum(b.buffer.nbytes for b in self.buckets)
        self.what = f"{what} (gradient all_reduce: {len(self.buckets)} bucket(s), " \
                    f"{total / MB:.1f} MB)"

    def average(self) -> None:
        w = world()
        if w.size == 1 or not self.buckets:
            return
        for bucket in self.buckets:
            bucket.pack()
        allreduce_buffers(w, [b.buffer for b in self.buckets], ReduceOp.AVG, self.what)
        for bucket in self.buckets:
            bucket.unpack()


def average_flat(arrays: Sequence[np.ndarray]) -> np.ndarray:
    """The mean over ranks of `arrays` (one dtype), concatenated into one flat array:
    the kernel of ``dist::allreduce_mean`` (in a world of one process, the
    concatenation)."""
    total = sum(a.size for a in arrays)
    flat = np.asarray(empty([total], arrays[0].dtype.name))
    for piece, a in zip(_views(flat, [a.shape for a in arrays]), arrays):
        np.copyto(piece, a)
    w = world()
    if w.size > 1:
        allreduce_buffers(w, [flat], ReduceOp.AVG, "dist::allreduce_mean")
    return flat
