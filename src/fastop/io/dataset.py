"""Datasets (PaddlePaddle's ``paddle.io.Dataset`` family).

A map-style dataset has ``__getitem__(index)`` and ``__len__``; an iterable-style one
(``IterableDataset``) only ``__iter__``. ``TensorDataset`` keeps its fields as arrays,
which lets the DataLoader build a batch with one ``take`` per field instead of one
``__getitem__`` per sample (also through ``Subset``/``random_split``).
"""
from __future__ import annotations

import bisect
import math
import warnings
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Generic, NoReturn, TypeVar

import numpy as np

from fastop import _random
from fastop._tensor import Tensor, to_tensor
from fastop.io._checks import ArgumentTypeError, ArgumentValueError, NoIndexingError

__all__ = ["Dataset", "IterableDataset", "TensorDataset", "ComposeDataset", "ChainDataset",
           "ConcatDataset", "Subset", "random_split"]

_T = TypeVar("_T")


class Dataset(Generic[_T]):
    """Base class of map-style datasets: subclasses define ``__getitem__(idx)`` (one
    sample: an array, a number, or a list/tuple/dict of them) and ``__len__``.

    >>> import numpy as np
    >>> class Squares(Dataset):
    ...     def __getitem__(self, idx):
    ...         return np.array([idx * idx], "float32")
    ...     def __len__(self):
    ...         return 4
    >>> Squares()[3]
    array([9.], dtype=float32)
    """

    def __getitem__(self, idx: int) -> _T:
        raise NotImplementedError(f"{type(self).__name__} must define __getitem__")

    def __len__(self) -> int:
        raise NotImplementedError(f"{type(self).__name__} must define __len__")


class IterableDataset(Dataset[_T]):
    """Base class of iterable-style datasets: subclasses define ``__iter__`` (yielding
    samples). With ``num_workers > 0`` every worker iterates its own copy, so split the
    stream with :func:`fastop.io.get_worker_info` (or in ``worker_init_fn``) to avoid
    loading each sample once per worker.
    """

    def __iter__(self) -> Iterator[_T]:
        raise NotImplementedError(f"{type(self).__name__} must define __iter__")

    def __getitem__(self, idx: int) -> NoReturn:
        raise NoIndexingError(f"{type(self).__name__} is an IterableDataset: it has no "
                              f"__getitem__ (iterate it)")

    def __len__(self) -> NoReturn:
        raise NoIndexingError(f"{type(self).__name__} is an IterableDataset: it has no "
                              f"length")


def _as_array(value: Any, i: int) -> np.ndarray:
    if isinstance(value, Tensor):
        return value.numpy()
    arr = np.asarray(value)
    if arr.ndim == 0:
        raise ArgumentValueError(f"TensorDataset: tensors[{i}] is a scalar; every field "
                                 f"needs a first dimension of samples")
    return arr


class TensorDataset(Dataset[tuple]):
    """A dataset whose fields are tensors (or numpy arrays) sharing their first dimension:
    sample ``i`` is ``(tensors[0][i], tensors[1][i], ...)``.

    >>> import numpy as np, fastop
    >>> ds = TensorDataset([fastop.to_tensor(np.arange(6.0).reshape(3, 2)),
    ...                     fastop.to_tensor(np.array([0, 1, 0]))])
    >>> len(ds), ds[1][1].item()
    (3, 1)
    """

    def __init__(self, tensors: Sequence[Any]) -> None:
        if isinstance(tensors, (Tensor, np.ndarray)) or not isinstance(tensors, Sequence) \
                or len(tensors) == 0:
            raise ArgumentTypeError(f"TensorDataset: tensors must be a non-empty list or "
                                    f"tuple of tensors, got {type(tensors).__name__}")
        self.tensors = tensors
        # Numpy views of the fields (no copy): the DataLoader indexes these per batch.
        self._arrays = tuple(_as_array(t, i) for i, t in enumerate(tensors))
        lengths = [a.shape[0] for a in self._arrays]
        if len(set(lengths)) != 1:
            raise ArgumentValueError(f"TensorDataset: every tensor needs the same first "
                                     f"dimension (number of samples), got {lengths}")

    def __getitem__(self, index: int) -> tuple:
        return tuple(to_tensor(a[index]) for a in self._arrays)

    def __len__(self) -> int:
        return self._arrays[0].shape[0]


class ComposeDataset(Dataset[tuple]):
    """Map-style datasets of one length side by side: sample ``i`` is the fields of
    every dataset's sample ``i``, concatenated into one tuple."""

    def __init__(self, datasets: Sequence[Dataset[Any]]) -> None:
        self.datasets = list(datasets)
        if not self.datasets:
            raise ArgumentValueError("ComposeDataset: datasets must not be empty")
        for i, d in enumerate(self.datasets):
            if isinstance(d, IterableDataset):
                raise ArgumentTypeError(f"ComposeDataset: datasets[{i}] is an "
                                        f"IterableDataset; only map-style datasets can be "
                                        f"composed")
        lengths = [len(d) for d in self.datasets]
        if len(set(lengths)) != 1:
            raise ArgumentValueError(f"ComposeDataset: datasets must have one length, got "
                                     f"{lengths}")

    def __len__(self) -> int:
        return len(self.datasets[0])

    def __getitem__(self, idx: int) -> tuple:
        fields: list[Any] = []
        for d in self.datasets:
            sample = d[idx]
            fields.extend(sample if isinstance(sample, (list, tuple)) else [sample])
        return tuple(fields)


class ChainDataset(IterableDataset[Any]):
    """Iterable datasets one after the other."""

    def __init__(self, datasets: Iterable[IterableDataset[Any]]) -> None:
        self.datasets = list(datasets)
        if not self.datasets:
            raise ArgumentValueError("ChainDataset: datasets must not be empty")
        for i, d in enumerate(self.datasets):
            if not isinstance(d, IterableDataset):
                raise ArgumentTypeError(f"ChainDataset: datasets[{i}] must be an "
                                        f"IterableDataset, got {type(d).__name__}")

    def __iter__(self) -> Iterator[Any]:
        for d in self.datasets:
            yield from d


class ConcatDataset(Dataset[_T]):
    """Map-style datasets end to end: indices run through the first, then the second..."""

    def __init__(self, datasets: Iterable[Dataset[Any]]) -> None:
        self.datasets = list(datasets)
        if not self.datasets:
            raise ValueError("ConcatDataset: datasets must not be empty")
        for i, d in enumerate(self.datasets):
            if isinstance(d, IterableDataset):
                raise TypeError(f"ConcatDataset: datasets[{i}] is an IterableDataset; only "
                                f"map-style datasets can be concatenated")
        self.cumulative_sizes = np.cumsum([len(d) for d in self.datasets]).tolist()

    def __len__(self) -> int:
        return self.cumulative_sizes[-1]

    def __getitem__(self, idx: int) -> _T:
        n = len(self)
        if not -n <= idx < n:
            raise IndexError(f"ConcatDataset: index {idx} is out of range for {n} samples")
        idx %= n
        which = bisect.bisect_right(self.cumulative_sizes, idx)
        start = self.cumulative_sizes[which - 1] if which else 0
        return self.datasets[which][idx - start]


class Subset(Dataset[_T]):
    """The samples of `dataset` at `indices`, in that order (repeats allowed)."""

    def __init__(self, dataset: Dataset[_T], indices: Sequence[int]) -> None:
        self.dataset = dataset
        self.indices = indices

    def __getitem__(self, idx: int) -> _T:
        return self.dataset[self.indices[idx]]

    def __len__(self) -> int:
        return len(self.indices)


def _split_lengths(n: int, lengths: Sequence[float]) -> list[int]:
    """Fractions summing to 1 become counts (the remainder spread one by one from the
    first split, as Paddle does); counts are returned as they are."""
    if math.isclose(sum(lengths), 1) and sum(lengths) <= 1:
        for i, frac in enumerate(lengths):
            if not 0 <= frac <= 1:
                raise ValueError(f"random_split: fraction lengths[{i}] = {frac} is not "
                                 f"between 0 and 1")
        counts = [int(math.floor(n * frac)) for frac in lengths]
        for i in range(n - sum(counts)):
            counts[i % len(counts)] += 1
        for i, c in enumerate(counts):
            if c == 0:
                warnings.warn(f"random_split: split {i} is empty", stacklevel=3)
        return counts
    return [int(c) for c in lengths]


def random_split(dataset: Dataset[_T], lengths: Sequence[float],
                 generator: np.random.Generator | None = None) -> list[Subset[_T]]:
    """Split `dataset` at random into non-overlapping subsets of the given lengths
    (counts, or fractions that sum to 1). Draws from fastop's global generator (or
    `generator`), so ``fastop.seed`` makes the split reproducible.

    >>> import fastop
    >>> _ = fastop.seed(0)
    >>> a, b = random_split(range(10), [3, 7])
    >>> len(a), len(b), sorted(list(a) + list(b)) == list(range(10))
    (3, 7, True)
    """
    n = len(dataset)
    counts = _split_lengths(n, lengths)
    if sum(counts) != n or any(c < 0 for c in counts):
        raise ValueError(f"random_split: lengths {list(lengths)} must be non-negative and "
                         f"sum to the dataset's length {n}")
    rng = generator if generator is not None else _random.generator()
    order = rng.permutation(n).tolist()
    offsets = np.cumsum([0, *counts]).tolist()
    return [Subset(dataset, order[start:stop]) for start, stop in zip(offsets, offsets[1:])]
