"""Collective communication on fastop tensors, with PaddlePaddle's names and signatures:
:func:`all_reduce`, :func:`broadcast`, :func:`all_gather`, :func:`barrier`,
:func:`get_rank`, :func:`get_world_size`.

Tensors are handed to MPI zero-copy through the buffer protocol and written in place
(a non-contiguous view goes through a contiguous copy). Every collective is a
non-blocking MPI request polled with a deadline (:meth:`World.complete`). In a world of
one process each call is the identity and MPI is never imported.

Before its data moves, each public collective compares what the ranks pass (one
all-gather of a header per call, :func:`_check_agreement`): tensors of different shapes
or dtypes, a different op or source, or a different collective on another rank raise
one ValueError, the same on every rank, naming the collective, the ranks and what each
passed (MPI would reinterpret one rank's float64 as another's float32, or truncate).
``FASTOP_DIST_SKIP_CHECKS=1`` skips the comparison; DataParallel's gradient buckets
never make it (it compares the models once, when it wraps them).
"""
from __future__ import annotations

import enum
from typing import Any, Sequence

import numpy as np

from fastop._core.storage import DenseTensor
from fastop.tensor.creation import zeros
from fastop.distributed._world import World, init_parallel_env, world

__all__ = ["ReduceOp", "get_rank", "get_world_size", "all_reduce", "broadcast",
           "all_gather", "barrier"]


class ReduceOp(enum.IntEnum):
    """How :func:`all_reduce` combines the ranks' values (PaddlePaddle's
    ``paddle.distributed.ReduceOp``). AVG is SUM divided by the world size (floating
    dtypes); MAX and MIN of bool tensors are logical or and and."""

    SUM = 0
    MAX = 1
    MIN = 2
    PROD = 3
    AVG = 4


# MPI's name for each fastop/numpy dtype (new ones at the end: the header sends the index)
_MPI_TYPES = {"bool": "C_BOOL", "int32": "INT32_T", "int64": "INT64_T",
              "float32": "FLOAT", "float64": "DOUBLE", "uint8": "UINT8_T", "int8": "INT8_T",
              "int16": "INT16_T"}


# The header each rank sends before a public collective: the collective, its op (all_reduce)
# or source (broadcast), the dtype, the number of dimensions, then the shape (at most 8).
_KINDS = ("all_reduce", "broadcast", "all_gather")
_DTYPE_NAMES = tuple(_MPI_TYPES)
_MAX_NDIM = 8
_HEADER = 4 + _MAX_NDIM


def _header(fn: str, tensor: DenseTensor, extra: int) -> np.ndarray:
    shape = tensor.shape
    header = np.zeros(_HEADER, np.int64)
    header[:4] = (_KINDS.index(fn), extra, _DTYPE_NAMES.index(tensor.dtype.name), len(shape))
    header[4:4 + len(shape)] = shape
    return header


def _header_text(header: np.ndarray) -> str:
    """``all_reduce(SUM) of float32[2, 3]``: what a rank's header says it passes."""
    kind, extra, dtype, ndim = (int(v) for v in header[:4])
    shape = [int(d) for d in header[4:4 + ndim]]
    fn = _KINDS[kind]
    detail = f"({ReduceOp(extra).name})" if fn == "all_reduce" else \
        f"(src={extra})" if fn == "broadcast" else ""
    return f"{fn}{detail} of {_DTYPE_NAMES[dtype]}{shape}"


def _check_agreement(w: World, fn: str, tensor: DenseTensor, extra: int = 0) -> None:
    """Raise the same ValueError on every rank when the ranks do not all call `fn` with
    a tensor of one shape and dtype (and one op or source, `extra`); one all-gather of
    a header. Skipped with ``FASTOP_DIST_SKIP_CHECKS=1``."""
    if not w.check_collectives:
        return
    mine = _header(fn, tensor, extra)
    everyone = np.empty((w.size, _HEADER), np.int64)
    w.complete(f"{fn} (comparing the ranks' tensors)",
               lambda: w.comm.Iallgather(mpi_buffer(w, mine), mpi_buffer(w, everyone)))
    for rank in range(1, w.size):
        if not np.array_equal(everyone[rank], everyone[0]):
            raise ValueError(
                f"fastop.distributed.{fn} on rank {w.rank} of {w.size}: every rank must "
                f"pass a tensor of the same shape and dtype (and the same op and src), "
                f"but rank 0 calls {_header_text(everyone[0])} and rank {rank} calls "
                f"{_header_text(everyone[rank])}")


class _CompletedTask:
    """What a collective called with ``sync_op=False`` returns: fastop's collectives
    finish before returning, so the task is complete (PaddlePaddle's task API)."""

    def wait(self) -> bool:
        return True

    def is_completed(self) -> bool:
        return True


def _finish(sync_op: bool) -> _CompletedTask | None:
    return None if sync_op else _CompletedTask()


def _check_group(fn: str, group: Any) -> None:
    if group is not None:
        raise ValueError(f"fastop.distributed.{fn}: only the global group (group=None) "
                         f"is supported, got group={group!r}")


def get_rank(group: Any = None) -> int:
    """This process's rank, 0 to ``get_world_size() - 1`` (0 without an MPI launcher)."""
    _check_group("get_rank", group)
    return world().rank


def get_world_size(group: Any = None) -> int:
    """The number of processes of the job (1 without an MPI launcher)."""
    _check_group("get_world_size", group)
    return world().size


def _ready(fn: str, group: Any) -> World:
    _check_group(fn, group)
    init_parallel_env()
    return world()


def _tensor_arg(fn: str, name: str, value: Any) -> DenseTensor:
    """`value` as a tensor a collective may write in place, or a clear error."""
    if not isinstance(value, DenseTensor):
        raise TypeError(f"fastop.distributed.{fn}: '{name}' must be a fastop Tensor, got "
                        f"{type(value).__name__}")
    if value.readonly:
        raise ValueError(f"fastop.distributed.{fn}: '{name}' is a read-only view "
                         f"(shape {value.shape}, e.g. a broadcast); pass a tensor that "
                         f"owns its memory")
    if value.dtype.name not in _MPI_TYPES:
        raise TypeError(f"fastop.distributed.{fn}: '{name}' has dtype {value.dtype.name}; "
                        f"expected one of {sorted(_MPI_TYPES)}")
    return value


def mpi_buffer(w: World, data: Any) -> list:
    """`data` (a contiguous fastop tensor or numpy array) as an MPI buffer spec."""
    return [data, getattr(w.MPI, _MPI_TYPES[data.dtype.name])]


def _check_op(fn: str, op: Any, dtype_name: str) -> ReduceOp:
    """`op` as a ReduceOp valid for the dtype, or a clear error."""
    try:
        op = ReduceOp(op)
    except ValueError:
        raise ValueError(f"fastop.distributed.{fn}: op must be a ReduceOp (SUM, MAX, MIN, "
                         f"PROD, AVG), got {op!r}") from None
    if dtype_name == "bool" and op not in (ReduceOp.MAX, ReduceOp.MIN):
        raise TypeError(f"fastop.distributed.{fn}: a bool tensor reduces with MAX "
                        f"(logical or) or MIN (logical and), got {op.name}")
    if op == ReduceOp.AVG and not dtype_name.startswith("float"):
        raise TypeError(f"fastop.distributed.{fn}: AVG needs a floating tensor, got "
                        f"{dtype_name}; reduce with SUM and divide")
    return op


def _mpi_op(w: World, op: ReduceOp, dtype_name: str) -> Any:
    if dtype_name == "bool":
        return w.MPI.LOR if op == ReduceOp.MAX else w.MPI.LAND
    return getattr(w.MPI, "SUM" if op == ReduceOp.AVG else op.name)


def allreduce_buffers(w: World, buffers: Sequence[Any], op: ReduceOp, what: str) -> None:
    """All-reduce contiguous buffers (fastop tensors or numpy arrays, one dtype) in
    place, as one collective step (their requests are polled together). The caller
    checked `op` (:func:`_check_op`) and that ``w.size > 1``."""
    mpi_op = _mpi_op(w, op, buffers[0].dtype.name)
    in_place = w.MPI.IN_PLACE
    w.complete(what, lambda: [w.comm.Iallreduce(in_place, mpi_buffer(w, b), mpi_op)
                              for b in buffers])
    if op == ReduceOp.AVG:
        for b in buffers:
            array = np.asarray(b)
            np.divide(array, w.size, out=array)


def _written(tensor: DenseTensor, result: DenseTensor) -> None:
    """Store a collective's result in `tensor` and record the in-place write for
    autograd (``set_value`` of a tensor's own memory copies nothing)."""
    if hasattr(tensor, "set_value"):
        tensor.set_value(result)
    elif result is not tensor:
        np.copyto(np.asarray(tensor), np.asarray(result))


def _contiguous(tensor: DenseTensor) -> DenseTensor:
    return tensor if tensor.is_contiguous() else tensor.contiguous()


def all_reduce(tensor: Any, op: ReduceOp = ReduceOp.SUM, group: Any = None,
               sync_op: bool = True) -> _CompletedTask | None:
    """Reduce `tensor` over all ranks with `op` and leave the result in `tensor` on
    every rank (in place, as PaddlePaddle's ``paddle.distributed.all_reduce``).

    >>> import fastop, fastop.distributed as dist
    >>> x = fastop.to_tensor([1.0, 2.0])
    >>> dist.all_reduce(x)              # a world of one process: x stays [1, 2]
    >>> x.numpy().tolist()
    [1.0, 2.0]
    """
    tensor = _tensor_arg("all_reduce", "tensor", tensor)
    op = _check_op("all_reduce", op, tensor.dtype.name)
    w = _ready("all_reduce", group)
    if w.size > 1:
        _check_agreement(w, "all_reduce", tensor, int(op))
        buffer = _contiguous(tensor)
        allreduce_buffers(w, [buffer], op, "all_reduce")
        _written(tensor, buffer)
    return _finish(sync_op)


def broadcast(tensor: Any, src: int, group: Any = None,
              sync_op: bool = True) -> _CompletedTask | None:
    """Copy rank `src`'s `tensor` into `tensor` on every other rank (in place)."""
    tensor = _tensor_arg("broadcast", "tensor", tensor)
    w = _ready("broadcast", group)
    if isinstance(src, bool) or not isinstance(src, (int, np.integer)) \
            or not 0 <= src < w.size:
        raise ValueError(f"fastop.distributed.broadcast: src must be a rank in "
                         f"[0, {w.size}), got {src!r}")
    if w.size > 1:
        _check_agreement(w, "broadcast", tensor, int(src))
    broadcast_tensors(w, [tensor], int(src), f"broadcast from rank {src}")
    return _finish(sync_op)


def broadcast_tensors(w: World, tensors: Sequence[DenseTensor], src: int, what: str) -> None:
    """Broadcast tensors from rank `src` in place, as one collective step."""
    if w.size == 1:
        return
    buffers = [_contiguous(t) for t in tensors]
    w.complete(what, lambda: [w.comm.Ibcast(mpi_buffer(w, b), root=src) for b in buffers])
    for tensor, buffer in zip(tensors, buffers):
        _written(tensor, buffer)


def all_gather(tensor_list: list, tensor: Any, group: Any = None,
               sync_op: bool = True) -> _CompletedTask | None:
    """Gather every rank's `tensor` into `tensor_list`, rank order: an empty list is
    filled with ``get_world_size()`` new tensors (views of one buffer); a list of that
    many tensors of `tensor`'s shape and dtype is written in place."""
    if not isinstance(tensor_list, list):
        raise TypeError(f"fastop.distributed.all_gather: 'tensor_list' must be a list "
                        f"(empty, or one tensor per rank), got {type(tensor_list).__name__}")
    tensor = _tensor_arg("all_gather", "tensor", tensor)
    w = _ready("all_gather", group)
    for i, item in enumerate(tensor_list):
        _tensor_arg("all_gather", f"tensor_list[{i}]", item)
        if item.shape != tensor.shape or item.dtype != tensor.dtype:
            raise ValueError(f"fastop.distributed.all_gather: tensor_list[{i}] is "
                             f"{item.dtype.name}{item.shape}, expected {tensor.dtype.name}"
                             f"{tensor.shape} like 'tensor'")
    if tensor_list and len(tensor_list) != w.size:
        raise ValueError(f"fastop.distributed.all_gather: 'tensor_list' must be empty or "
                         f"hold one tensor per rank ({w.size}), got {len(tensor_list)}")
    gathered = zeros([w.size, *tensor.shape], dtype=tensor.dtype)
    if w.size > 1:
        _check_agreement(w, "all_gather", tensor)
        send = _contiguous(tensor)
        w.complete("all_gather", lambda: w.comm.Iallgather(mpi_buffer(w, send),
                                                           mpi_buffer(w, gathered)))
    else:
        np.copyto(np.asarray(gathered)[0], np.asarray(tensor))
    if tensor_list:
        for i, item in enumerate(tensor_list):
            _written(item, _contiguous(gathered[i]))
    else:
        tensor_list.extend(gathered[i] for i in range(w.size))
    return _finish(sync_op)


def barrier(group: Any = None) -> None:
    """Wait until every rank has called barrier."""
    w = _ready("barrier", group)
    if w.size > 1:
        w.complete("barrier", w.comm.Ibarrier)


def allgather_bytes(w: World, data: bytes, what: str) -> list[bytes]:
    """Every rank's `data`, in rank order (for set-up checks: lengths, then bytes)."""
    if w.size == 1:
        return [data]
    lengths = np.zeros(w.size, np.int64)
    mine = np.array([len(data)], np.int64)
    w.complete(what, lambda: w.comm.Iallgather(mpi_buffer(w, mine), mpi_buffer(w, lengths)))
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    received = bytearray(int(lengths.sum()))
    w.complete(what, lambda: w.comm.Iallgatherv(
        [data, w.MPI.BYTE], [received, lengths.tolist(), offsets.tolist(), w.MPI.BYTE]))
    return [bytes(received[o:o + n]) for o, n in zip(offsets.tolist(), lengths.tolist())]
