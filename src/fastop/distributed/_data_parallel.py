"""``fastop.DataParallel``: data-parallel training of an eager model over MPI ranks.

Wrapping a layer broadcasts its parameters and buffers from rank 0 (after checking that
every rank built the same model); from then on each ``loss.backward()`` that follows a
forward pass through the wrapper averages the parameters' gradients over the ranks, in
fixed-order flat buckets, before it returns. The parameters' ``.grad`` are views into
the buckets' buffers, and each bucket's non-blocking all-reduce starts as soon as its
gradients are final — from a leaf grad hook of the autograd engine
(:func:`fastop.autograd.register_leaf_grad_hook`) — while backward computes the
gradients of the layers below; a backward-end hook
(:func:`fastop.autograd.register_backward_end_hook`) starts the buckets left (a
parameter without a gradient) and waits for all (see :mod:`._buckets`). Each rank feeds
its own share of the batch; the optimizer then applies the same averaged gradients
everywhere, so the parameters stay identical on every rank.
"""
from __future__ import annotations

import contextlib
import json
import weakref
from collections import OrderedDict
from typing import Any, Iterator

from fastop._core.storage import DenseTensor
from fastop.autograd import is_grad_enabled, register_backward_end_hook
from fastop.distributed._buckets import COMM_DTYPES, GradientBuckets
from fastop.distributed._collective import allgather_bytes, broadcast_tensors
from fastop.distributed._world import World, init_parallel_env, world
from fastop.nn.layer import Layer
from fastop.ops._dispatch import current_mode

__all__ = ["DataParallel", "synced_by_data_parallel"]

# id(parameter) -> the live DataParallel averaging its gradient (DistributedOptimizer
# leaves those to it). The DataParallel holds the parameter, so the id stays its own.
_SYNCED: "weakref.WeakValueDictionary[int, DataParallel]" = weakref.WeakValueDictionary()


def synced_by_data_parallel(param: Any) -> bool:
    """Whether a live :class:`DataParallel` averages this parameter's gradient."""
    return id(param) in _SYNCED


def _describe(layer: Layer) -> dict[str, list]:
    """Names, shapes, dtypes (and trainability) of a layer's parameters and buffers."""
    params = [[name, list(p.shape), p.dtype.name, not p.stop_gradient]
              for name, p in layer.named_parameters()]
    buffers = [[name, list(b.shape), b.dtype.name] for name, b in layer.named_buffers()
               if isinstance(b, DenseTensor)]
    return {"parameter": params, "buffer": buffers}


def _first_difference(reference: dict, other: dict, rank: int) -> str | None:
    for kind in ("parameter", "buffer"):
        ours = {entry[0]: entry[1:] for entry in reference[kind]}
        theirs = {entry[0]: entry[1:] for entry in other[kind]}
        for name, entry in ours.items():
            if name not in theirs:
                return f"rank {rank} has no {kind} '{name}' (rank 0: {_fmt(entry)})"
            if theirs[name] != entry:
                return (f"{kind} '{name}' is {_fmt(entry)} on rank 0 but "
                        f"{_fmt(theirs[name])} on rank {rank}")
        extra = [name for name in theirs if name not in ours]
        if extra:
            return f"rank {rank} has a {kind} '{extra[0]}' that rank 0 has not"
        if list(ours) != list(theirs):
            return f"the {kind}s of rank {rank} come in another order than rank 0's"
    return None


def _fmt(entry: list) -> str:
    """``float32[3, 4]``, with `` (frozen)`` for a parameter with stop_gradient."""
    shape, dtype = entry[0], entry[1]
    return f"{dtype}{shape}" + (" (frozen)" if len(entry) > 2 and not entry[2] else "")


def _check_same_model(w: World, layer: Layer) -> None:
    """Raise, on every rank alike, when the ranks' models differ (the first
    difference, by name): a mismatch would otherwise hang or corrupt the training."""
    mine = _describe(layer)
    everyone = [json.loads(b) for b in allgather_bytes(
        w, json.dumps(mine).encode(), "DataParallel: comparing the ranks' models")]
    for rank, other in enumerate(everyone[1:], start=1):
        difference = _first_difference(everyone[0], other, rank)
        if difference is not None:
            raise ValueError(f"DataParallel: every rank must wrap the same model, but "
                             f"{difference}")


class DataParallel(Layer):
    """Run `layers` data-parallel over the ranks of the job (PaddlePaddle's
    ``paddle.DataParallel``; eager mode).

    Each rank calls the wrapper on its own part of the batch; ``loss.backward()`` then
    leaves the gradients averaged over the ranks in every parameter's ``.grad``, so an
    optimizer step makes the same update everywhere (the gradient of the mean loss over
    the global batch, when the ranks' shares are of equal size).

    Args:
        layers: the model; its parameters and buffers are broadcast from rank 0 now.
        strategy: accepted for PaddlePaddle compatibility (unused).
        comm_buffer_size: the bucket size in MB (``bucket_cap_mb`` is the same).
        last_comm_buffer_size: the size in MB of the first bucket reduced, which holds
            the last parameters.
        find_unused_parameters: accepted for PaddlePaddle compatibility: parameters that
            get no gradient are always handled (below).
        group: must be None (the world).
        bucket_cap_mb: PyTorch's name for ``comm_buffer_size``.
        comm_dtype: what the gradients travel as: ``"float32"`` (their own dtype, the
            default), or ``"bfloat16"``/``"float16"``, half the bytes: each rank rounds
            its gradients to it, and the sum is taken in float32 (then rounded once
            more for the way back), the same on every rank.

    Gradients are averaged once per backward pass that follows a forward pass through
    the wrapper with grad enabled, outside :meth:`no_sync`. A rank without a gradient for
    a parameter contributes zeros; a parameter no rank has a gradient for keeps
    ``.grad = None`` (the optimizer skips it, as in one process). Frozen parameters
    (``stop_gradient=True`` when wrapped) are not averaged.

    Each averaged parameter's ``.grad`` is a view into its bucket's flat buffer (as
    PyTorch's ``gradient_as_bucket_view=True``): backward adds into it in place, MPI
    reduces it in place, and the optimizer reads it; ``clear_grad()`` keeps its
    meaning (the next backward overwrites the buffer instead of adding to it). A
    ``.grad`` you keep from one step therefore changes with the next backward; copy it
    to keep it. Each bucket's averaging starts as soon as backward has made its
    gradients final, and ``backward()`` returns once all are done. Ranks all on one
    machine average through shared memory, ranks on several through MPI's all-reduce
    (``FASTOP_DIST_SHM=0``, set alike on every rank, uses MPI's on one machine too).
    ``state_dict`` and
    ``set_state_dict`` are the wrapped model's (no ``_layers.`` prefix). In a world of
    one process the wrapper only forwards calls.

    >>> import fastop
    >>> model = fastop.DataParallel(fastop.nn.Linear(4, 2))
    >>> loss = model(fastop.ones([3, 4])).mean()
    >>> loss.backward()
    >>> sorted(model.state_dict())
    ['bias', 'weight']
    """

    def __init__(self, layers: Layer, strategy: Any = None, comm_buffer_size: float = 25,
                 last_comm_buffer_size: float = 1, find_unused_parameters: bool = False,
                 group: Any = None, *, bucket_cap_mb: float | None = None,
                 comm_dtype: str = "float32") -> None:
        if not isinstance(layers, Layer):
            raise TypeError(f"DataParallel: 'layers' must be a fastop.nn.Layer, got "
                            f"{type(layers).__name__}")
        if group is not None:
            raise ValueError(f"DataParallel: only the global group (group=None) is "
                             f"supported, got group={group!r}")
        if current_mode() != "eager":
            raise RuntimeError("DataParallel works in eager mode; in static mode wrap the "
                               "optimizer: fastop.distributed.DistributedOptimizer(opt)"
                               ".minimize(loss)")
        if bucket_cap_mb is not None:
            comm_buffer_size = bucket_cap_mb
        for label, value in (("comm_buffer_size", comm_buffer_size),
                             ("last_comm_buffer_size", last_comm_buffer_size)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ValueError(f"DataParallel: {label} must be a positive number of MB, "
                                 f"got {value!r}")
        if comm_dtype not in COMM_DTYPES:
            raise ValueError(f"DataParallel: comm_dtype must be one of "
                             f"{', '.join(map(repr, COMM_DTYPES))}, got {comm_dtype!r}")
        super().__init__()
        self._layers = layers
        init_parallel_env()
        w = world()
        self._grad_need_sync = True
        self._buckets: GradientBuckets | None = None
        self._syncs = w.size > 1          # a world of one process only forwards calls
        self.find_unused_parameters = bool(find_unused_parameters)
        if not self._syncs:
            return
        _check_same_model(w, layers)
        state = [p for _, p in layers.named_parameters()] + \
            [b for _, b in layers.named_buffers() if isinstance(b, DenseTensor)]
        broadcast_tensors(w, state, 0,
                          "DataParallel: broadcasting parameters and buffers from rank 0")
        params = [p for p in layers.parameters() if not p.stop_gradient]
        buckets = GradientBuckets(params, comm_buffer_size, last_comm_buffer_size,
                                  "DataParallel", comm_dtype, overlap=True)
        object.__setattr__(self, "_buckets", buckets)
        for p in params:
            _SYNCED[id(p)] = self

        def wait_after_backward() -> None:
            if buckets.armed:
                buckets.finish()
        handle = register_backward_end_hook(wait_after_backward)
        weakref.finalize(self, _release, handle, buckets)

    def forward(self, *inputs: Any, **kwargs: Any) -> Any:
        if self._syncs and self._grad_need_sync and is_grad_enabled():
            self._buckets.armed = True
        return self._layers(*inputs, **kwargs)

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        """Gradients of forward/backward passes inside stay local and accumulate; the
        first backward after a forward outside averages the accumulated sum (gradient
        accumulation without a collective per micro-batch).

        >>> import fastop
        >>> model = fastop.DataParallel(fastop.nn.Linear(2, 1))
        >>> with model.no_sync():
        ...     model(fastop.ones([1, 2])).sum().backward()
        >>> model(fastop.ones([1, 2])).sum().backward()   # averages both passes' sum
        """
        saved = self._grad_need_sync
        self._grad_need_sync = False
        try:
            yield
        finally:
            self._grad_need_sync = saved

    # the wrapped model's state, under its own names (as PaddlePaddle's DataParallel)
    def state_dict(self, destination: dict | None = None, include_sublayers: bool = True,
                   structured_name_prefix: str = "") -> "OrderedDict[str, Any]":
        return self._layers.state_dict(destination, include_sublayers,
                                       structured_name_prefix)

    def set_state_dict(self, state_dict: dict, use_structured_name: bool = True
                       ) -> tuple[list[str], list[str]]:
        return self._layers.set_state_dict(state_dict, use_structured_name)

    load_dict = set_state_dict
    set_dict = set_state_dict


def _release(handle: Any, buckets: GradientBuckets) -> None:
    """A dropped DataParallel: its backward-end hook goes, its parameters are unhooked."""
    handle.remove()
    buckets.close()
