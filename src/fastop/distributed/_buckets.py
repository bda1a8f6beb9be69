"""Gradient averaging in fixed-order flat buckets (Horovod's fusion buffers, PyTorch
DDP's buckets): the gradients of many parameters travel in a few large messages.

:func:`plan_buckets` decides the buckets — in backward order (the last parameter first,
PaddlePaddle's and DDP's order), one dtype each, the first at most
``last_comm_buffer_size`` MB and the others ``comm_buffer_size`` MB (a larger parameter
has a bucket of its own) — from sizes alone, so every rank plans the same buckets.

:class:`GradientBuckets` (eager mode) gives each bucket one flat buffer and each
parameter's ``.grad`` a view into it: backward writes and accumulates gradients straight
into the buffer (a leaf grad hook of the autograd engine,
:func:`fastop.autograd.register_leaf_grad_hook`), the buffer is what MPI reduces in
place, and the averaged result is what the optimizer reads — no packing, no unpacking.
With ``overlap``, a bucket's non-blocking all-reduce starts as soon as the last of its
gradients is final, while backward goes on with the layers below; buckets start in their
fixed order on every rank, so the collectives match. ``comm_dtype`` ("bfloat16",
"float16") sends half the bytes: each rank converts its bucket, the ranks exchange the
pieces (all-to-all), each sums one piece in float32 in rank order, and the pieces come
back (all-gather) — so every rank ends with the same bits.

The static op ``dist::allreduce_mean`` averages one bucket of gradient variables
(:func:`average_flat`). Both scale the sum by 1/world size after the reduction, so eager
and static training compute the same values.
"""
from __future__ import annotations

import weakref
from typing import Any, Sequence

import numpy as np

from fastop._core.storage import empty
from fastop._tensor import from_numpy_tensor
from fastop.autograd import register_leaf_grad_hook
from fastop.distributed._collective import ReduceOp, allreduce_buffers, mpi_buffer
from fastop.distributed._world import World, world

__all__ = ["plan_buckets", "GradientBuckets", "average_flat", "MB", "COMM_DTYPES"]

MB = 1 << 20
# what DataParallel(comm_dtype=...) accepts: the gradients' own dtype, or half the bytes
COMM_DTYPES = ("float32", "bfloat16", "float16")


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


def to_half_bits(values: np.ndarray, comm_dtype: str) -> np.ndarray:
    """float32 `values` in `comm_dtype` ("bfloat16": rounded to nearest even; "float16"),
    as uint16 bits."""
    if comm_dtype == "float16":
        return values.astype(np.float16).view(np.uint16)
    bits = values.astype(np.float32, copy=False).view(np.uint32)
    rounding = (bits >> 16) & 1
    rounding += 0x7FFF
    rounding += bits
    return (rounding >> 16).astype(np.uint16)


def from_half_bits(bits: np.ndarray, comm_dtype: str) -> np.ndarray:
    """uint16 bits of `comm_dtype` values as float32."""
    if comm_dtype == "float16":
        return bits.view(np.float16).astype(np.float32)
    return (bits.astype(np.uint32) << 16).view(np.float32)


class _Bucket:
    """Parameters whose gradients travel together: one flat buffer of their gradients
    (each parameter's ``.grad`` is a view into it), then one flag per parameter (1 where
    this rank has a gradient; summed over the ranks, 0 means no rank has one)."""

    __slots__ = ("params", "grads", "flat", "flags", "size", "ready", "requests", "half")

    def __init__(self, params: list[Any]) -> None:
        self.params = params
        n = sum(p.size for p in params)
        self.size = n + len(params)
        self.flat = np.zeros(self.size, params[0].dtype.name)
        self.flags = self.flat[n:]
        # fastop tensors viewing the buffer: the parameters' .grad
        self.grads = [from_numpy_tensor(v) for v in
                      _views(self.flat, [list(p.shape) for p in params])]
        self.ready = 0            # parameters whose gradient is final in this pass
        self.requests: Any = None  # the all-reduce in flight
        self.half: Any = None     # comm_dtype: (sent bits, received bits) in flight

    def mark(self) -> None:
        """Make the buffer what this rank sends: for each parameter, its gradient (in
        place already when backward gave one), its ``.grad`` copied in when that is
        another tensor (set by the user), zeros when it has none; and its flag."""
        for k, (param, view) in enumerate(zip(self.params, self.grads)):
            grad = param.grad
            if grad is None:
                np.asarray(view).fill(0)
                self.flags[k] = 0
            else:
                if grad is not view:
                    np.copyto(np.asarray(view), np.asarray(grad))
                self.flags[k] = 1

    def finish(self, scale: float) -> None:
        """After the reduction: scale the sums by 1/world size and hand each parameter
        some rank had a gradient for its view; one no rank had keeps ``.grad = None``."""
        n = self.size - len(self.params)
        grads = self.flat[:n]
        np.multiply(grads, scale, out=grads)
        for param, view, flag in zip(self.params, self.grads, self.flags.tolist()):
            if flag != 0 and param.grad is not view:
                param.grad = view


class GradientBuckets:
    """Averages the ``.grad`` of a fixed list of parameters over all ranks, in buckets
    planned once (every rank must hold the same parameter shapes and dtypes, in the
    same order; zero-filled where a rank has no gradient, so message sizes agree). Each
    parameter's ``.grad`` lives in its bucket's buffer from the first backward on.

    With `overlap`, :meth:`gradient_ready` (the engine's ready hook) starts each bucket's
    all-reduce once its gradients are final, in bucket order, while :attr:`armed`;
    :meth:`finish` starts the rest (buckets with a parameter that got no gradient) and
    waits. :meth:`average` does both at once."""

    def __init__(self, params: Sequence[Any], cap_mb: float, first_cap_mb: float,
                 what: str, comm_dtype: str = "float32", overlap: bool = False) -> None:
        params = [p for p in params if p.dtype.is_floating]
        plan = plan_buckets([p.nbytes for p in params], [p.dtype.name for p in params],
                            cap_mb, first_cap_mb)
        self.buckets = [_Bucket([params[i] for i in members]) for members in plan]
        self.comm_dtype = comm_dtype
        self.armed = False        # overlap: start buckets as their gradients get final
        self.started = 0          # buckets whose all-reduce has started in this pass
        total = sum(b.flat.nbytes for b in self.buckets)
        self.what = f"{what} (gradient all_reduce: {len(self.buckets)} bucket(s), " \
                    f"{total / MB:.1f} MB)"
        self._bucket_of: dict[int, _Bucket] = {}
        handles = []
        ready = _ready_hook(self) if overlap else None
        for bucket in self.buckets:
            for param, view in zip(bucket.params, bucket.grads):
                self._bucket_of[id(param)] = bucket
                handles.append(register_leaf_grad_hook(param, ready, buffer=view))
        self._unhook = weakref.finalize(self, _remove_all, handles)

    def close(self) -> None:
        """Unhook the parameters from backward (their ``.grad`` stay what they are)."""
        self._unhook()

    def gradient_ready(self, param: Any) -> None:
        """`param`'s gradient is final in this backward pass: start the buckets that are
        complete, in order; let MPI progress the ones in flight."""
        if not self.armed:
            return
        bucket = self._bucket_of[id(param)]
        bucket.ready += 1
        if bucket.ready == len(bucket.params):
            while self.started < len(self.buckets) and \
                    self.buckets[self.started].ready == len(self.buckets[self.started].params):
                self._start(self.buckets[self.started])
        w = world()
        for bucket in self.buckets[:self.started]:
            if bucket.requests is not None:
                w.MPI.Request.Testall(bucket.requests)

    def finish(self) -> None:
        """Start the buckets not started yet, wait for all, and hand out the averages."""
        self.armed = False
        try:
            while self.started < len(self.buckets):
                self._start(self.buckets[self.started])
            w = world()
            for bucket in self.buckets:
                self._complete(w, bucket)
                bucket.finish(1.0 / w.size)
        finally:
            self.started = 0
            for bucket in self.buckets:
                bucket.ready, bucket.requests, bucket.half = 0, None, None

    def average(self) -> None:
        """Average the gradients now (all buckets; no overlap)."""
        if world().size > 1 and self.buckets:
            self.finish()

    def _start(self, bucket: _Bucket) -> None:
        w = world()
        bucket.mark()
        self.started += 1
        if self.comm_dtype == "float32" or bucket.flat.dtype.itemsize <= 2:
            in_place = w.MPI.IN_PLACE
            bucket.requests = w.start(self.what, lambda: [w.comm.Iallreduce(
                in_place, mpi_buffer(w, bucket.flat), w.MPI.SUM)])
            return
        # half the bytes: an all-to-all of equal pieces (padded to a multiple of ranks)
        piece = -(-bucket.size // w.size)
        sent = np.zeros(piece * w.size, np.uint16)
        sent[:bucket.size] = to_half_bits(bucket.flat, self.comm_dtype)
        received = np.empty_like(sent)
        bucket.half = (sent, received)
        bucket.requests = w.start(self.what, lambda: [w.comm.Ialltoall(
            [sent, w.MPI.UINT16_T], [received, w.MPI.UINT16_T])])

    def _complete(self, w: World, bucket: _Bucket) -> None:
        """Wait for the bucket's reduction; the half-precision exchange then sums this
        rank's piece in float32, in rank order, and gathers the pieces."""
        w.wait(self.what, bucket.requests)
        if bucket.half is None:
            return
        sent, received = bucket.half
        piece = len(sent) // w.size
        parts = received.reshape(w.size, piece)
        total = from_half_bits(parts[0], self.comm_dtype)
        for r in range(1, w.size):
            total += from_half_bits(parts[r], self.comm_dtype)
        mine = to_half_bits(total, self.comm_dtype)
        w.complete(self.what, lambda: w.comm.Iallgather(
            [mine, w.MPI.UINT16_T], [sent, w.MPI.UINT16_T]))
        bucket.flat[:] = from_half_bits(sent[:bucket.size], self.comm_dtype)


def _ready_hook(buckets: GradientBuckets) -> Any:
    """The engine's ready hook for `buckets`' parameters (holding them weakly: the
    engine's hook table must not keep a dropped DataParallel alive)."""
    ref = weakref.ref(buckets)

    def gradient_ready(param: Any) -> None:
        target = ref()
        if target is not None:
            target.gradient_ready(param)
    return gradient_ready


def _remove_all(handles: list) -> None:
    for handle in handles:
        handle.remove()


def average_flat(arrays: Sequence[np.ndarray]) -> np.ndarray:
    """The mean over ranks of `arrays` (one dtype), concatenated into one flat array:
    the kernel of ``dist::allreduce_mean`` (in a world of one process, the
    concatenation). The sum is scaled by 1/world size after the reduction, as
    :class:`GradientBuckets` does, so eager and static training compute the same
    values."""
    w = world()
    flat = np.asarray(empty([sum(a.size for a in arrays)], arrays[0].dtype.name))
    for piece, a in zip(_views(flat, [a.shape for a in arrays]), arrays):
        np.copyto(piece, a)
    if w.size > 1:
        allreduce_buffers(w, [flat], ReduceOp.SUM, "dist::allreduce_mean")
        np.multiply(flat, 1.0 / w.size, out=flat)
    return flat
