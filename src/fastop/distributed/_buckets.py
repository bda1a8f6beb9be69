"""Gradient averaging in fixed-order flat buckets (Horovod's fusion buffers, PyTorch
DDP's buckets): the gradients of many parameters travel in a few large messages.

:func:`plan_buckets` decides the buckets — in backward order (the last parameter first,
PaddlePaddle's and DDP's order), one dtype each, the first at most
``last_comm_buffer_size`` MB and the others ``comm_buffer_size`` MB (a larger parameter
has a bucket of its own) — from sizes alone, so every rank plans the same buckets.

:class:`GradientBuckets` (eager mode) gives each bucket one flat buffer and each
parameter's ``.grad`` a view into it: backward writes and accumulates gradients straight
into the buffer (a leaf grad hook of the autograd engine,
:func:`fastop.autograd.register_leaf_grad_hook`), the buffer is what is averaged in
place, and the averaged result is what the optimizer reads — no packing, no unpacking.
With ``overlap``, a bucket's averaging starts as soon as the last of its gradients is
final, while backward goes on with the layers below; buckets start in their fixed order
on every rank, so the collectives match. Ranks all on one machine average through
shared memory (:class:`_SharedMemory`), ranks on several through MPI's non-blocking
all-reduce (:class:`_MpiAllreduce`). ``comm_dtype`` ("bfloat16",
"float16") sends half the bytes: each rank converts its bucket, the ranks exchange the
pieces (all-to-all), each sums one piece in float32 in rank order, and the pieces come
back (all-gather) — so every rank ends with the same bits.

The static op ``dist::allreduce_mean`` averages one bucket of gradient variables
(:func:`average_flat`). Both scale the sum by 1/world size after the reduction, so eager
and static training compute the same values.
"""
from __future__ import annotations

import atexit
import os
import weakref
from typing import Any, Sequence

import numpy as np

from fastop._core.storage import empty
from fastop._tensor import from_numpy_tensor
from fastop.autograd import register_leaf_grad_hook
from fastop.distributed._collective import ReduceOp, allreduce_buffers, mpi_buffer
from fastop.distributed._world import World, remove_shared_memory_files, world

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

    __slots__ = ("params", "grads", "flat", "flags", "size", "ready", "requests", "stage",
                 "peers", "half")
    NO_BUFFER = "none yet"    # `flat` for a bucket whose buffer comes later (use())

    def __init__(self, params: list[Any], flat: Any = None) -> None:
        self.params = params
        self.size = sum(p.size for p in params) + len(params)
        self.ready = 0            # parameters whose gradient is final in this pass
        self.requests: Any = None  # the MPI request(s) in flight
        self.stage = 0            # shared memory: 1 arrived, 2 own piece reduced
        self.peers: list[np.ndarray] = []     # shared memory: every rank's buffer
        self.half: Any = None     # comm_dtype: (sent bits, received bits) in flight
        if flat is not self.NO_BUFFER:
            self.use(np.zeros(self.size, params[0].dtype.name) if flat is None else flat)

    def use(self, flat: np.ndarray) -> None:
        """Hold the gradients in `flat`: the parameters' .grad views are made on it."""
        self.flat = flat
        self.flags = flat[self.gradients:]
        self.grads = [from_numpy_tensor(v) for v in
                      _views(flat, [list(p.shape) for p in self.params])]

    @property
    def gradients(self) -> int:
        """How many gradient values the buffer holds (before the flags)."""
        return self.size - len(self.params)

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

    def hand_out(self) -> None:
        """After the averaging: hand each parameter some rank had a gradient for its
        view; one no rank had keeps ``.grad = None``."""
        for param, view, flag in zip(self.params, self.grads, self.flags.tolist()):
            if flag != 0 and param.grad is not view:
                param.grad = view


class _MpiAllreduce:
    """Average a bucket with MPI's non-blocking all-reduce of its buffer, in place; the
    sum is scaled by 1/world size when done. (Ranks on several machines.)"""

    def start(self, w: World, bucket: _Bucket, what: str) -> None:
        bucket.requests = w.start(what, lambda: [w.comm.Iallreduce(
            w.MPI.IN_PLACE, mpi_buffer(w, bucket.flat), w.MPI.SUM)])

    def progress(self, w: World, bucket: _Bucket, what: str) -> bool:
        """Let MPI progress the bucket's request(s); True: go on to the next bucket."""
        w.MPI.Request.Testall(bucket.requests)
        return True

    def complete(self, w: World, bucket: _Bucket, what: str) -> None:
        w.wait(what, bucket.requests)
        grads = bucket.flat[:bucket.gradients]
        np.multiply(grads, 1.0 / w.size, out=grads)

    def end_of_pass(self, w: World, what: str) -> None:
        pass


class _HalfExchange(_MpiAllreduce):
    """Average a bucket sending half the bytes (comm_dtype bfloat16 or float16): the
    ranks exchange equal pieces of their rounded buffers (all-to-all), each sums its
    piece in float32 in rank order, and the rounded sums come back (all-gather) — the
    same bits on every rank."""

    def __init__(self, comm_dtype: str) -> None:
        self.comm_dtype = comm_dtype

    def start(self, w: World, bucket: _Bucket, what: str) -> None:
        piece = -(-bucket.size // w.size)       # padded to a multiple of the ranks
        sent = np.zeros(piece * w.size, np.uint16)
        sent[:bucket.size] = to_half_bits(bucket.flat, self.comm_dtype)
        received = np.empty_like(sent)
        bucket.half = (sent, received)
        bucket.requests = w.start(what, lambda: [w.comm.Ialltoall(
            [sent, w.MPI.UINT16_T], [received, w.MPI.UINT16_T])])

    def complete(self, w: World, bucket: _Bucket, what: str) -> None:
        w.wait(what, bucket.requests)
        sent, received = bucket.half
        bucket.half = None
        parts = received.reshape(w.size, -1)
        total = from_half_bits(parts[0], self.comm_dtype)
        for r in range(1, w.size):
            total += from_half_bits(parts[r], self.comm_dtype)
        mine = to_half_bits(total, self.comm_dtype)
        w.complete(what, lambda: w.comm.Iallgather(
            [mine, w.MPI.UINT16_T], [sent, w.MPI.UINT16_T]))
        bucket.flat[:] = from_half_bits(sent[:bucket.size], self.comm_dtype)
        grads = bucket.flat[:bucket.gradients]
        np.multiply(grads, 1.0 / w.size, out=grads)


class _SharedMemory:
    """Average buckets through shared memory, when every rank runs on this machine:
    each rank's buffers live in one MPI shared-memory window, so the ranks read each
    other's gradients directly. Once a bucket is final everywhere (a non-blocking
    barrier), rank r sums piece r of every rank's buffer, in rank order, scaled by
    1/world size, a cache-sized chunk at a time, and writes each chunk of the average
    into piece r of every rank's buffer; after a second barrier every rank's buffer
    holds the average. Piece r of any buffer is read and written by rank r alone, so
    the sums need no staging area and the average no copying back: per rank that
    moves about what copying the buffer once does, whatever MPI's intra-node transport
    (MPICH disables its single-copy transport where ``ptrace_scope`` forbids it); every
    piece is computed once, so the ranks hold the same bits. A rank's buffer is written
    by the others only between a pass's first barrier (which it passes once its
    gradients are final) and the second (which it waits for before reading them): no
    barrier at the end of a pass. The first barriers run on one communicator and the
    second on another, each in bucket order (a bucket is reduced only after the ones
    before it), so the ranks' barriers match whatever their timing."""

    CHUNK = 1 << 15           # elements summed at a time (stays in cache)

    def __init__(self, w: World, nbytes: int) -> None:
        """`nbytes`: the size of every rank's part of the window (the same on all)."""
        self.win = w.MPI.Win.Allocate_shared(max(64, nbytes), 1, comm=w.comm)
        self.chunks: dict[np.dtype, np.ndarray] = {}   # a sum's chunk, per dtype
        self.win.Lock_all(w.MPI.MODE_NOCHECK)
        self.arrived, self.reduced = w.comm.Dup(), w.comm.Dup()   # the two barriers
        _free_at_exit(self)
        self.segments = [np.frombuffer(self.win.Shared_query(r)[0], np.uint8)
                         for r in range(w.size)]
        w.complete("DataParallel: mapping the shared gradient buffers", w.comm.Ibarrier)
        remove_shared_memory_files()        # every rank has mapped them (see _world)

    @staticmethod
    def layout(groups: list[list[Any]]) -> tuple[list[int], int]:
        """Where each bucket's buffer lies in a rank's part of the window (its byte
        offset, 64-byte aligned), and the part's size."""
        places, offset = [], 0
        for group in groups:
            n = sum(p.size for p in group) + len(group)
            places.append(offset)
            offset += -(-n * group[0].dtype.itemsize // 64) * 64
        return places, offset

    def attach(self, w: World, bucket: _Bucket, buffer_at: int) -> None:
        """Give `bucket` every rank's buffer at byte offset `buffer_at` (its own
        zeroed: the parameters' .grad views are made on it)."""
        dtype = np.dtype(bucket.params[0].dtype.name)
        bucket.peers = [seg[buffer_at:buffer_at + bucket.size * dtype.itemsize].view(dtype)
                        for seg in self.segments]
        bucket.peers[w.rank].fill(0)

    def start(self, w: World, bucket: _Bucket, what: str) -> None:
        self.win.Sync()
        bucket.requests = w.start(what, self.arrived.Ibarrier)
        bucket.stage = 1

    def progress(self, w: World, bucket: _Bucket, what: str) -> bool:
        """Reduce the bucket's piece if every rank has arrived; whether it is past
        arriving (the next bucket may be reduced)."""
        if bucket.stage == 1 and w.MPI.Request.Test(bucket.requests):
            self._reduce_own_piece(w, bucket, what)
        return bucket.stage != 1

    def complete(self, w: World, bucket: _Bucket, what: str) -> None:
        if bucket.stage == 1:
            w.wait(what, bucket.requests)
            self._reduce_own_piece(w, bucket, what)
        w.wait(what, bucket.requests)
        self.win.Sync()
        bucket.stage = 0

    def end_of_pass(self, w: World, what: str) -> None:
        pass

    def _reduce_own_piece(self, w: World, bucket: _Bucket, what: str) -> None:
        """Sum this rank's piece over the ranks (rank order), the gradients scaled by
        1/world size (the flags stay counts), into that piece of every rank's buffer;
        then start the second barrier."""
        self.win.Sync()
        piece = -(-bucket.size // w.size)
        begin, end = w.rank * piece, min((w.rank + 1) * piece, bucket.size)
        scale, n = 1.0 / w.size, bucket.gradients
        peers = bucket.peers
        chunk = self.chunks.get(peers[0].dtype)
        if chunk is None:
            chunk = self.chunks[peers[0].dtype] = np.empty(self.CHUNK, peers[0].dtype)
        for lo in range(begin, end, self.CHUNK):
            hi = min(lo + self.CHUNK, end)
            acc = chunk[:hi - lo]
            np.add(peers[0][lo:hi], peers[1][lo:hi], out=acc)
            for r in range(2, w.size):
                np.add(acc, peers[r][lo:hi], out=acc)
            cut = min(max(n, lo), hi) - lo          # gradients before the flags
            np.multiply(acc[:cut], scale, out=acc[:cut])
            for buffer in peers:
                buffer[lo:hi] = acc
        self.win.Sync()
        bucket.requests = w.start(what, self.reduced.Ibarrier)
        bucket.stage = 2


_shared: list = []            # the _SharedMemory transports, freed (collectively) at exit


def _free_at_exit(transport: Any) -> None:
    """Free `transport`'s window when Python exits, before MPI finalizes (every rank
    made the same windows in the same order, so every rank frees them alike; a window's
    memory lives as long as the process otherwise)."""
    if not _shared:
        atexit.register(_free_windows)
    _shared.append(transport)


def _free_windows() -> None:
    w = world()
    if w.failure is not None:
        return                              # a peer may be gone: freeing would wait
    for transport in _shared:
        transport.win.Unlock_all()
        transport.win.Free()
        transport.arrived.Free()
        transport.reduced.Free()
    _shared.clear()


class GradientBuckets:
    """Averages the ``.grad`` of a fixed list of parameters over all ranks, in buckets
    planned once (every rank must hold the same parameter shapes and dtypes, in the
    same order; zero-filled where a rank has no gradient, so message sizes agree). Each
    parameter's ``.grad`` lives in its bucket's buffer from the first backward on.

    The transport: shared memory when every rank runs on this machine
    (:class:`_SharedMemory`; ``FASTOP_DIST_SHM=0`` turns it off), else MPI's
    all-reduce (:class:`_MpiAllreduce`), or the half-precision exchange with
    `comm_dtype` bfloat16/float16 (:class:`_HalfExchange`).

    With `overlap`, :meth:`gradient_ready` (the engine's ready hook) starts each bucket's
    averaging once its gradients are final, in bucket order, while :attr:`armed`;
    :meth:`finish` starts the rest (buckets with a parameter that got no gradient) and
    waits. :meth:`average` does both at once."""

    def __init__(self, params: Sequence[Any], cap_mb: float, first_cap_mb: float,
                 what: str, comm_dtype: str = "float32", overlap: bool = False) -> None:
        params = [p for p in params if p.dtype.is_floating]
        plan = plan_buckets([p.nbytes for p in params], [p.dtype.name for p in params],
                            cap_mb, first_cap_mb)
        members = [[params[i] for i in bucket] for bucket in plan]
        w = world()
        self.transport: Any = _MpiAllreduce()
        if comm_dtype != "float32":
            self.transport = _HalfExchange(comm_dtype)
        elif w.size > 1 and w.local_size == w.size and members and \
                os.environ.get("FASTOP_DIST_SHM", "1") != "0":
            places, nbytes = _SharedMemory.layout(members)
            self.transport = _SharedMemory(w, nbytes)
            self.buckets = []
            for group, place in zip(members, places):
                bucket = _Bucket(group, _Bucket.NO_BUFFER)
                self.transport.attach(w, bucket, place)
                bucket.use(bucket.peers[w.rank])
                self.buckets.append(bucket)
        if not isinstance(self.transport, _SharedMemory):
            self.buckets = [_Bucket(group) for group in members]
        self.armed = False        # overlap: start buckets as their gradients get final
        self.started = 0          # buckets whose averaging has started in this pass
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
        complete, in order; let the ones in flight progress."""
        if not self.armed:
            return
        bucket = self._bucket_of[id(param)]
        bucket.ready += 1
        buckets = self.buckets
        if bucket.ready == len(bucket.params):
            while self.started < len(buckets) and \
                    buckets[self.started].ready == len(buckets[self.started].params):
                self._start(buckets[self.started])
        w = world()
        for bucket in buckets[:self.started]:
            if not self.transport.progress(w, bucket, self.what):
                break

    def finish(self) -> None:
        """Start the buckets not started yet, wait for all, and hand out the averages."""
        self.armed = False
        w = world()
        try:
            while self.started < len(self.buckets):
                self._start(self.buckets[self.started])
            for bucket in self.buckets:
                self.transport.complete(w, bucket, self.what)
                bucket.hand_out()
            self.transport.end_of_pass(w, self.what)
        finally:
            self.started = 0
            for bucket in self.buckets:
                bucket.ready, bucket.requests, bucket.half = 0, None, None

    def average(self) -> None:
        """Average the gradients now (all buckets; no overlap)."""
        if world().size > 1 and self.buckets:
            self.finish()

    def _start(self, bucket: _Bucket) -> None:
        bucket.mark()
        self.started += 1
        self.transport.start(world(), bucket, self.what)


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
