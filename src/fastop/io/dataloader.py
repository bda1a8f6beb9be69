"""``DataLoader``: batches of a dataset as Tensors (PaddlePaddle's ``paddle.io.DataLoader``).

In the main process (``num_workers=0``) a batch is loaded when it is asked for. A
``TensorDataset`` (also through ``Subset``/``random_split``) with the default collate is
the fast path: one ``take`` per field over the epoch's index array, and the result
becomes a Tensor without a copy. With ``num_workers > 0`` worker processes load batches
ahead (``prefetch_factor`` per worker) and pass them through shared memory
(:mod:`fastop.io._multiprocess`; multiprocessing is imported only then).
"""
from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from itertools import repeat
from typing import Any

from fastop.io._checks import ArgumentTypeError, ArgumentValueError, check_bool, check_int
from fastop.io._fetch import (IterableFetcher, MapFetcher, add_note, batch_tensor, converter_for,
                              make_fetcher, map_leaves)
from fastop.io.batch_sampler import BatchSampler, index_batches
from fastop.io.dataset import IterableDataset
from fastop.io.worker import describe_task
from fastop.static import CPUPlace

__all__ = ["DataLoader"]


def _check_places(places: Any) -> None:
    for place in places if isinstance(places, (list, tuple)) else [places]:
        if place is None or isinstance(place, CPUPlace) or \
                (isinstance(place, str) and place.lower() == "cpu"):
            continue
        raise ValueError(f"DataLoader: places must be CPU places (fastop runs on the CPU: "
                         f"None, fastop.CPUPlace() or 'cpu'), got {place!r}")


def _check_callable(name: str, value: Any) -> Any:
    if value is not None and not callable(value):
        raise TypeError(f"DataLoader: {name} must be callable or None, got "
                        f"{type(value).__name__}")
    return value


class DataLoader:
    """Iterates a dataset in batches of Tensors.

    A batch has the structure of a sample: a sample ``(image, label)`` gives a list
    ``[images, labels]`` of stacked Tensors, a dict gives a dict, a lone array a Tensor.

    Args (PaddlePaddle's):
        dataset: a map-style ``Dataset`` (``__getitem__`` + ``__len__``) or an
            ``IterableDataset``.
        feed_list: static-mode variables the batch's fields feed, in order; required by
            ``return_list=False``.
        places: where batches go: None, ``fastop.CPUPlace()`` or ``'cpu'`` (or a list
            of them); fastop runs on the CPU.
        return_list: True: batches as above; False: a dict from each ``feed_list``
            variable's name to its field (for ``Executor.run(feed=...)``).
        batch_sampler: yields the index lists of the batches; excludes ``batch_size``,
            ``shuffle`` and ``drop_last``.
        batch_size: samples per batch; None turns automatic batching off (each sample
            already is a batch, passed through ``default_convert_fn``).
        shuffle: reshuffle the indices every epoch (map-style datasets).
        drop_last: drop the last batch when it is incomplete.
        collate_fn: turns a list of samples into a batch (default:
            ``fastop.io.default_collate_fn``).
        num_workers: worker processes loading batches; 0 loads in the main process.
        use_buffer_reader: accepted for compatibility; loading in the main process is
            synchronous here, and workers always load ahead.
        prefetch_factor: batches each worker loads ahead.
        use_shared_memory: pass large arrays from workers through shared memory
            (otherwise through the pipe, pickled).
        timeout: seconds to wait for a worker's batch before raising (0: forever).
        worker_init_fn: called with the worker id in each worker before it loads.
        persistent_workers: keep the workers alive from one epoch to the next.

    >>> import numpy as np, fastop
    >>> from fastop.io import TensorDataset
    >>> ds = TensorDataset([np.arange(10, dtype="float32").reshape(5, 2),
    ...                     np.arange(5)])
    >>> [x.shape for x, y in DataLoader(ds, batch_size=2)]
    [[2, 2], [2, 2], [1, 2]]
    """

    def __init__(self, dataset: Any, feed_list: Sequence[Any] | None = None,
                 places: Any = None, return_list: bool = True,
                 batch_sampler: Any = None, batch_size: int | None = 1,
                 shuffle: bool = False, drop_last: bool = False,
                 collate_fn: Callable[[list], Any] | None = None, num_workers: int = 0,
                 use_buffer_reader: bool = True, prefetch_factor: int = 2,
                 use_shared_memory: bool = True, timeout: float = 0,
                 worker_init_fn: Callable[[int], Any] | None = None,
                 persistent_workers: bool = False) -> None:
        self.dataset = dataset
        self.return_list = check_bool("DataLoader", "return_list", return_list)
        if not self.return_list and not feed_list:
            raise ValueError("DataLoader: return_list=False needs feed_list (the variables "
                             "the batch's fields feed, in order)")
        self.feed_list = list(feed_list) if feed_list else None
        _check_places(places)
        self.places = places
        self.collate_fn = _check_callable("collate_fn", collate_fn)
        self.worker_init_fn = _check_callable("worker_init_fn", worker_init_fn)
        self.num_workers = check_int("DataLoader", "num_workers", num_workers, 0)
        self.use_buffer_reader = check_bool("DataLoader", "use_buffer_reader",
                                            use_buffer_reader)
        self.prefetch_factor = check_int("DataLoader", "prefetch_factor", prefetch_factor, 1)
        self.use_shared_memory = check_bool("DataLoader", "use_shared_memory",
                                            use_shared_memory)
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout < 0:
            raise ArgumentValueError(f"DataLoader: timeout must be a non-negative number "
                                     f"of seconds, got {timeout!r}")
        self.timeout = timeout
        self.persistent_workers = check_bool("DataLoader", "persistent_workers",
                                             persistent_workers)
        shuffle = check_bool("DataLoader", "shuffle", shuffle)
        self.drop_last = check_bool("DataLoader", "drop_last", drop_last)

        self.iterable = isinstance(dataset, IterableDataset)
        if self.iterable:
            if shuffle:
                raise ArgumentValueError("DataLoader: an IterableDataset cannot be "
                                         "shuffled (shuffle=True); shuffle inside its "
                                         "__iter__")
            if batch_sampler is not None:
                raise ArgumentValueError("DataLoader: an IterableDataset takes no "
                                         "batch_sampler (it has no indices)")
        elif not (hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__")):
            raise ArgumentTypeError(f"DataLoader: dataset must be a map-style dataset "
                                    f"(with __getitem__ and __len__) or an IterableDataset, "
                                    f"got {type(dataset).__name__}")

        if batch_sampler is not None:
            if batch_size != 1 or shuffle or drop_last:
                raise ArgumentValueError("DataLoader: batch_size, shuffle and drop_last "
                                         "must keep their defaults when a batch_sampler is "
                                         "given (it decides the batches)")
            self.batch_sampler = batch_sampler
            self.batch_size = None
        elif batch_size is None:
            self.batch_sampler = None
            self.batch_size = None
        else:
            self.batch_size = check_int("DataLoader", "batch_size", batch_size, 1)
            self.batch_sampler = None if self.iterable else BatchSampler(
                dataset=dataset, batch_size=self.batch_size, shuffle=shuffle,
                drop_last=self.drop_last)
        self.auto_collate_batch = batch_sampler is not None or batch_size is not None
        self._pool: Any = None                  # the persistent workers, once started

    def __len__(self) -> int:
        if self.iterable:
            # TypeError (Paddle raises ValueError): list(loader) treats it as "no length".
            raise TypeError("DataLoader: a loader over an IterableDataset has no length")
        if self.batch_sampler is not None:
            return len(self.batch_sampler)
        return len(self.dataset)

    def __call__(self) -> Iterator[Any]:
        return self.__iter__()

    def _tasks(self) -> Iterator[Any]:
        """What each batch's fetch gets: index arrays, sample indices, or batch sizes."""
        if self.iterable:
            return repeat(self.batch_size)
        if self.batch_sampler is not None:
            return index_batches(self.batch_sampler)
        return iter(range(len(self.dataset)))

    def _output(self, batch: Any) -> Any:
        if self.return_list:
            return batch
        leaves: list[Any] = []
        map_leaves(batch, leaves.append)
        if len(leaves) != len(self.feed_list):
            raise ValueError(f"DataLoader: the batch has {len(leaves)} fields but feed_list "
                             f"has {len(self.feed_list)} variables")
        return {getattr(var, "name", var): leaf for var, leaf in zip(self.feed_list, leaves)}

    def __iter__(self) -> Iterator[Any]:
        if self.num_workers == 0:
            return self._iter_in_process()
        from fastop.io._multiprocess import MultiProcessIterator
        if self.persistent_workers:
            if self._pool is None or not self._pool.alive:
                self._pool = self._new_pool()
            pool, owns = self._pool, False
        else:
            pool, owns = self._new_pool(), True
        return MultiProcessIterator(pool, self._tasks(), self.iterable,
                                    self.prefetch_factor, self.timeout, owns, self._output)

    def _new_pool(self) -> Any:
        from fastop.io._multiprocess import WorkerPool
        return WorkerPool(self.dataset, self.collate_fn, self.worker_init_fn,
                          self.auto_collate_batch, self.drop_last, self.num_workers,
                          self.use_shared_memory)

    def _iter_in_process(self) -> Iterator[Any]:
        fetcher = make_fetcher(self.dataset, self.auto_collate_batch, self.collate_fn,
                               self.drop_last)
        tasks = self._tasks()
        if isinstance(fetcher, MapFetcher) and fetcher.fields is not None and self.return_list:
            # The fast path: fresh arrays from take, each field's conversion chosen once.
            converters = [converter_for(a.dtype) for a in fetcher.fields[0]]
            for indices in tasks:
                yield [convert(a) for convert, a in zip(converters, fetcher.fetch(indices))]
            return
        iterable = isinstance(fetcher, IterableFetcher)
        for batch_index, task in enumerate(tasks):
            try:
                batch = fetcher.fetch(task)
            except StopIteration:
                if iterable:
                    return
                raise
            except Exception as exc:
                add_note(exc, f"DataLoader: while loading batch {batch_index} "
                              f"({describe_task(task)})")
                raise
            yield self._output(map_leaves(batch, batch_tensor))
