"""Loading one batch, in the main process or in a worker: fetchers, and turning the
arrays of a loaded batch into Tensors."""
from __future__ import annotations

from collections.abc import Callable, Mapping
from itertools import islice
from typing import Any

import numpy as np

from fastop._tensor import from_numpy_tensor, to_tensor
from fastop.io.collate import default_collate_fn, default_convert_fn
from fastop.io.dataset import IterableDataset, Subset, TensorDataset

__all__ = ["add_note", "MapFetcher", "IterableFetcher", "make_fetcher", "direct_fields",
           "map_leaves", "converter_for", "tensor_of_fresh_array", "batch_tensor"]

# Arrays of these dtypes (fastop's) become Tensors without a copy; others are converted
# (uint16, uint32, ... to int64), as fastop.to_tensor converts them.
_SHARED_DTYPES = frozenset(np.dtype(t) for t in (np.bool_, np.uint8, np.int8, np.int16,
                                                  np.int32, np.int64, np.float32,
                                                  np.float64, np.float16))


def add_note(exc: BaseException, note: str) -> None:
    """Attach `note` to `exc`, shown under its message in the traceback (Python 3.11+;
    on 3.10 the exception is left as it is)."""
    if hasattr(exc, "add_note"):
        exc.add_note(note)


def _unchanged(value: Any) -> Any:
    return value


def converter_for(dtype: np.dtype) -> Callable[[np.ndarray], Any]:
    """How a fresh array of `dtype` becomes a batch Tensor: shared without a copy when
    fastop has the dtype, converted when it has a close one; arrays of other kinds
    (text, objects) stay numpy arrays."""
    if dtype in _SHARED_DTYPES:
        return from_numpy_tensor
    return to_tensor if dtype.kind in "biuf" else _unchanged


def tensor_of_fresh_array(arr: Any) -> Any:
    """A Tensor over an array nobody else holds (just stacked, indexed or received);
    leaves other than arrays (strings, numbers) are returned as they are."""
    return converter_for(arr.dtype)(arr) if isinstance(arr, np.ndarray) else arr


def batch_tensor(arr: Any) -> Any:
    """Like :func:`tensor_of_fresh_array`, but copies an array that is a view of other
    memory (a collate_fn may return a slice of the dataset's storage, which an in-place
    update of the batch must not change)."""
    if isinstance(arr, np.ndarray) and not arr.flags.owndata and arr.dtype.kind in "biuf":
        return to_tensor(arr)
    return tensor_of_fresh_array(arr)


def map_leaves(batch: Any, fn: Callable[[Any], Any]) -> Any:
    """`batch` with `fn` applied to every leaf; dicts stay dicts, lists and tuples
    become lists (Paddle's DataLoader returns the fields of a sample as a list)."""
    if isinstance(batch, Mapping):
        return {key: map_leaves(value, fn) for key, value in batch.items()}
    if isinstance(batch, (list, tuple)):
        return [map_leaves(value, fn) for value in batch]
    return fn(batch)


def direct_fields(dataset: Any) -> tuple[tuple[np.ndarray, ...], np.ndarray | None] | None:
    """The field arrays of a TensorDataset, seen through any Subsets (with the index
    map the Subsets compose to), or None for any other dataset. Subclasses are excluded:
    they may override ``__getitem__``."""
    index_map = None
    while type(dataset) is Subset:
        indices = np.asarray(dataset.indices, dtype=np.int64)
        index_map = indices if index_map is None else indices.take(index_map)
        dataset = dataset.dataset
    if type(dataset) is not TensorDataset:
        return None
    return dataset._arrays, index_map


class MapFetcher:
    """Loads batches of a map-style dataset given their indices.

    A TensorDataset with the default collate is batched with one ``take`` per field
    (measured 3.9 us for 64 rows of 64 float32 against 8.3 us for ``a[idx]``); anything
    else loads the samples one by one and collates them.
    """

    def __init__(self, dataset: Any, auto_collate: bool, collate_fn: Callable | None) -> None:
        self.dataset = dataset
        self.auto_collate = auto_collate
        self.collate_fn = collate_fn or (default_collate_fn if auto_collate
                                         else default_convert_fn)
        self.fields = direct_fields(dataset) if auto_collate and collate_fn is None else None

    def fetch(self, indices: Any) -> Any:
        """The batch at `indices` (one index when automatic batching is off), as numpy
        arrays in its structure."""
        if self.fields is not None:
            arrays, index_map = self.fields
            if index_map is not None:
                indices = index_map.take(indices)
            return [a.take(indices, axis=0) for a in arrays]
        if not self.auto_collate:
            return self.collate_fn(self._sample(indices))
        if isinstance(indices, np.ndarray):
            indices = indices.tolist()       # datasets get Python ints, as in Paddle
        return self.collate_fn([self._sample(i) for i in indices])

    def _sample(self, index: int) -> Any:
        """``dataset[index]``; an exception it raises names the index (a note)."""
        try:
            return self.dataset[index]
        except Exception as exc:
            add_note(exc, f"DataLoader: raised by dataset[{index}] (sample index {index})")
            raise


class IterableFetcher:
    """Loads batches from an iterable dataset's iterator; raises StopIteration once it
    is exhausted (or holds only a short batch that drop_last drops)."""

    def __init__(self, dataset: Any, auto_collate: bool, collate_fn: Callable | None,
                 drop_last: bool) -> None:
        self.iterator = iter(dataset)
        self.auto_collate = auto_collate
        self.collate_fn = collate_fn or (default_collate_fn if auto_collate
                                         else default_convert_fn)
        self.drop_last = drop_last

    def fetch(self, batch_size: int | None) -> Any:
        if not self.auto_collate:
            return self.collate_fn(next(self.iterator))
        samples = list(islice(self.iterator, batch_size))
        if not samples or (self.drop_last and len(samples) < batch_size):
            raise StopIteration
        return self.collate_fn(samples)


def make_fetcher(dataset: Any, auto_collate: bool, collate_fn: Callable | None,
                 drop_last: bool) -> MapFetcher | IterableFetcher:
    if isinstance(dataset, IterableDataset):
        return IterableFetcher(dataset, auto_collate, collate_fn, drop_last)
    return MapFetcher(dataset, auto_collate, collate_fn)
