"""Batch samplers: the index batches a DataLoader loads (PaddlePaddle's
``paddle.io.BatchSampler`` and ``DistributedBatchSampler``).

Iterating one yields lists of indices, as in Paddle. The DataLoader asks for the same
batches as int64 arrays instead (:func:`index_batches`): slices of one epoch-long array,
so batching costs no per-index Python work.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sized
from itertools import islice
from typing import Any

import numpy as np

from fastop._job import size_and_rank
from fastop.io._checks import (ArgumentTypeError, ArgumentValueError, check_bool, check_int,
                               check_sized)
from fastop.io.dataset import IterableDataset
from fastop.io.sampler import RandomSampler, Sampler, SequenceSampler, epoch_indices

__all__ = ["BatchSampler", "DistributedBatchSampler", "index_batches"]


def _split(indices: np.ndarray, batch_size: int, drop_last: bool) -> Iterator[np.ndarray]:
    """Consecutive slices of `batch_size` (the last one shorter unless dropped)."""
    stop = len(indices) - len(indices) % batch_size if drop_last else len(indices)
    for start in range(0, stop, batch_size):
        yield indices[start:start + batch_size]


def _num_batches(num_samples: int, batch_size: int, drop_last: bool) -> int:
    return num_samples // batch_size if drop_last else -(-num_samples // batch_size)


class BatchSampler(Sampler[list]):
    """Groups the indices of a sampler into batches of ``batch_size``.

    Give either ``dataset`` (then ``shuffle`` picks a ``RandomSampler`` or a
    ``SequenceSampler`` over it) or ``sampler`` (any iterable of indices).

    >>> list(BatchSampler(dataset=range(5), batch_size=2))
    [[0, 1], [2, 3], [4]]
    >>> list(BatchSampler(sampler=SequenceSampler(range(5)), batch_size=2, drop_last=True))
    [[0, 1], [2, 3]]
    >>> list(BatchSampler(SequenceSampler(range(5)), 2, True))   # PyTorch's order
    [[0, 1], [2, 3]]
    """

    def __init__(self, dataset: Sized | None = None, sampler: Iterable[Any] | None = None,
                 shuffle: bool = False, batch_size: int = 1, drop_last: bool = False) -> None:
        if isinstance(dataset, Sampler) and isinstance(sampler, int) \
                and not isinstance(sampler, bool):
            # PyTorch's positional order, BatchSampler(sampler, batch_size, drop_last),
            # which PaddlePaddle also takes
            dataset, sampler, batch_size, drop_last, shuffle = \
                None, dataset, sampler, shuffle, False
        shuffle = check_bool("BatchSampler", "shuffle", shuffle)
        if dataset is None:
            if sampler is None:
                raise ArgumentValueError("BatchSampler: give either dataset or sampler")
            if not isinstance(sampler, Iterable):
                raise ArgumentTypeError(f"BatchSampler: sampler must be a Sampler or an "
                                        f"iterable of indices, got {type(sampler).__name__}")
            if shuffle:
                raise ArgumentValueError("BatchSampler: shuffle must be False when a "
                                         "sampler is given (the sampler decides the order)")
            self.sampler = sampler
        else:
            if sampler is not None:
                raise ArgumentValueError("BatchSampler: give either dataset or sampler, "
                                         "not both")
            if isinstance(dataset, IterableDataset):
                raise ArgumentTypeError("BatchSampler: dataset must be map-style (an "
                                        "IterableDataset has no indices to batch)")
            self.sampler = RandomSampler(dataset) if shuffle else SequenceSampler(dataset)
        self.batch_size = check_int("BatchSampler", "batch_size", batch_size)
        self.shuffle = shuffle
        self.drop_last = check_bool("BatchSampler", "drop_last", drop_last)

    def __iter__(self) -> Iterator[list]:
        for batch in self._index_batches():
            yield batch.tolist() if isinstance(batch, np.ndarray) else batch

    def __len__(self) -> int:
        return _num_batches(len(self.sampler), self.batch_size, self.drop_last)

    def _index_batches(self) -> Iterator[np.ndarray | list]:
        """The batches as int64 arrays (lists for a sampler that must be iterated)."""
        indices = epoch_indices(self.sampler)
        if indices is not None:
            yield from _split(indices, self.batch_size, self.drop_last)
            return
        it = iter(self.sampler)
        while batch := list(islice(it, self.batch_size)):
            if self.drop_last and len(batch) < self.batch_size:
                return
            yield batch


class DistributedBatchSampler(BatchSampler):
    """The share of one rank (process) of a data set's batches in data-parallel training.

    Every epoch the indices ``0 .. len(dataset) - 1`` are padded to a multiple of
    ``num_replicas`` by repeating the first ones (so every rank gets the same number of
    samples and batches), shuffled with ``numpy.random.RandomState(epoch)`` when
    ``shuffle`` (the same order on every rank: ranks need no communication), and dealt
    out batch by batch: batch ``i`` of rank ``r`` is the slice
    ``[(i * num_replicas + r) * batch_size, ... + batch_size)``; the last, partial round
    is split evenly. Together the ranks cover the data set once per epoch, plus the
    padding; ``drop_last`` drops each rank's last incomplete batch. These are Paddle's
    rules, so fastop and Paddle ranks see the same samples.

    ``num_replicas`` and ``rank`` default to ``fastop.distributed``'s world size and
    rank when it is initialised, else 1 and 0. After a shuffled epoch the epoch counter
    advances by itself (as in Paddle); ``set_epoch(e)`` sets it explicitly.

    >>> s = DistributedBatchSampler(range(10), batch_size=2, num_replicas=3, rank=1)
    >>> list(s)
    [[2, 3], [8, 9]]
    """

    def __init__(self, dataset: Sized, batch_size: int, num_replicas: int | None = None,
                 rank: int | None = None, shuffle: bool = False,
                 drop_last: bool = False) -> None:
        owner = "DistributedBatchSampler"
        size = check_sized(owner, "dataset", dataset)
        self.dataset = dataset
        self.batch_size = check_int(owner, "batch_size", batch_size)
        self.shuffle = check_bool(owner, "shuffle", shuffle)
        self.drop_last = check_bool(owner, "drop_last", drop_last)
        if num_replicas is None or rank is None:
            world, world_rank = size_and_rank()
            num_replicas = world if num_replicas is None else num_replicas
            rank = world_rank if rank is None else rank
        self.nranks = check_int(owner, "num_replicas", num_replicas)
        self.local_rank = check_int(owner, "rank", rank, 0)
        if self.local_rank >= self.nranks:
            raise ArgumentValueError(f"{owner}: rank must be in [0, num_replicas="
                                     f"{self.nranks}), got {rank}")
        self.epoch = 0
        self.num_samples = int(math.ceil(size / self.nranks))
        self.total_size = self.num_samples * self.nranks

    def __len__(self) -> int:
        return _num_batches(self.num_samples, self.batch_size, self.drop_last)

    def set_epoch(self, epoch: int) -> None:
        """Seed the next epoch's shuffle with `epoch` (every rank must pass the same)."""
        self.epoch = check_int("DistributedBatchSampler.set_epoch", "epoch", epoch, 0)

    def _rank_indices(self) -> np.ndarray:
        """This rank's indices for the current epoch (advancing the epoch if shuffled)."""
        # Padding repeats the indices cyclically from the start, as Paddle does.
        indices = np.resize(np.arange(len(self.dataset), dtype=np.int64), self.total_size)
        if self.shuffle:
            indices = indices[np.random.RandomState(self.epoch).permutation(self.total_size)]
            self.epoch += 1
        if self.nranks == 1:
            return indices
        round_size = self.batch_size * self.nranks
        tail = self.total_size % round_size          # a multiple of nranks
        full = indices[:self.total_size - tail].reshape(-1, self.nranks, self.batch_size)
        return np.concatenate([full[:, self.local_rank].ravel(),
                               indices[self.total_size - tail:].reshape(self.nranks, -1)
                               [self.local_rank]])

    def _index_batches(self) -> Iterator[np.ndarray]:
        yield from _split(self._rank_indices(), self.batch_size, self.drop_last)


def index_batches(batch_sampler: Iterable[Any]) -> Iterator[Any]:
    """The batches of `batch_sampler` as int64 arrays when it is one of fastop's batch
    samplers iterated the standard way, else as it yields them."""
    if isinstance(batch_sampler, BatchSampler) and \
            type(batch_sampler).__iter__ is BatchSampler.__iter__:
        return batch_sampler._index_batches()
    return iter(batch_sampler)
