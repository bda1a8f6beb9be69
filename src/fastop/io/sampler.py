"""Samplers: the order in which a DataLoader visits a map-style dataset's indices
(PaddlePaddle's ``paddle.io.Sampler`` family).

Every sampler here can hand over a whole epoch's indices as one int64 array
(:func:`epoch_indices`), which ``BatchSampler`` slices into batches: a DataLoader over a
``TensorDataset`` then never walks indices one by one in Python. Iterating a sampler
yields Python ints, as Paddle's do. Shuffles draw from fastop's global generator, so
``fastop.seed(n)`` makes them reproducible (pass ``generator=`` for a private stream).
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence, Sized
from itertools import islice
from typing import Any, Generic, TypeVar

import numpy as np

from fastop import _random
from fastop.io._checks import ArgumentValueError, check_bool, check_int, check_sized

__all__ = ["Sampler", "SequenceSampler", "RandomSampler", "WeightedRandomSampler",
           "SubsetRandomSampler", "epoch_indices"]

_T = TypeVar("_T")


class Sampler(Generic[_T]):
    """Base class of samplers: subclasses define ``__iter__`` (the indices of one epoch)
    and usually ``__len__``.

    >>> class EvenSampler(Sampler):
    ...     def __iter__(self):
    ...         return iter(range(0, len(self.data_source), 2))
    >>> list(EvenSampler(range(5)))
    [0, 2, 4]
    """

    def __init__(self, data_source: Sized | None = None) -> None:
        self.data_source = data_source

    def __iter__(self) -> Iterator[_T]:
        raise NotImplementedError(f"{type(self).__name__} must define __iter__ (the indices "
                                  f"of one epoch)")


class _ArraySampler(Sampler[int]):
    """A sampler whose epoch is computed as one array; iteration walks that array."""

    def __iter__(self) -> Iterator[int]:
        return iter(self._epoch_indices().tolist())

    def _epoch_indices(self) -> np.ndarray:
        """The whole epoch as one int64 array."""
        raise NotImplementedError


def epoch_indices(sampler: Any) -> np.ndarray | None:
    """One epoch of `sampler` as an int64 array when it is one of fastop's samplers
    iterated the standard way, else None (then it has to be iterated).

    A subclass that overrides ``__iter__`` is iterated, so its own order is respected.
    """
    if isinstance(sampler, _ArraySampler) and type(sampler).__iter__ is _ArraySampler.__iter__:
        return sampler._epoch_indices()
    return None


class SequenceSampler(_ArraySampler):
    """Indices ``0, 1, ..., len(data_source) - 1`` in order.

    >>> list(SequenceSampler(range(4)))
    [0, 1, 2, 3]
    """

    def __init__(self, data_source: Sized) -> None:
        check_sized("SequenceSampler", "data_source", data_source)
        self.data_source = data_source

    def __len__(self) -> int:
        return len(self.data_source)

    def _epoch_indices(self) -> np.ndarray:
        return np.arange(len(self.data_source), dtype=np.int64)


class RandomSampler(_ArraySampler):
    """Indices in random order: a permutation of the whole data source, or with
    ``replacement=True`` ``num_samples`` independent draws.

    ``generator`` is, as in Paddle, an iterator of indices to yield instead of random
    ones (at most ``num_samples`` are taken); fastop also accepts a
    ``numpy.random.Generator`` to draw from instead of fastop's global one.

    >>> import fastop
    >>> _ = fastop.seed(0)
    >>> sorted(RandomSampler(range(5)))
    [0, 1, 2, 3, 4]
    """

    def __init__(self, data_source: Sized, replacement: bool = False,
                 num_samples: int | None = None, generator: Any = None) -> None:
        n = check_sized("RandomSampler", "data_source", data_source)
        self.data_source = data_source
        self.replacement = check_bool("RandomSampler", "replacement", replacement)
        self._num_samples = (None if num_samples is None else
                             check_int("RandomSampler", "num_samples", num_samples))
        if not replacement and self.num_samples > n:
            raise ValueError(f"RandomSampler: num_samples ({self.num_samples}) must not "
                             f"exceed the data source's length ({n}) when replacement=False")
        if self.num_samples <= 0:
            raise ValueError(f"RandomSampler: num_samples must be a positive integer, got "
                             f"{self.num_samples} (the data source is empty)")
        self.generator = generator

    @property
    def num_samples(self) -> int:
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def __len__(self) -> int:
        return self.num_samples

    def _epoch_indices(self) -> np.ndarray:
        generator = self.generator
        if generator is not None and not isinstance(generator, np.random.Generator):
            return np.fromiter(islice(generator, self.num_samples), dtype=np.int64)
        rng = generator if generator is not None else _random.generator()
        n = len(self.data_source)
        if self.replacement:
            return rng.integers(0, n, self.num_samples, dtype=np.int64)
        return rng.permutation(n)[:self.num_samples]


class WeightedRandomSampler(_ArraySampler):
    """``num_samples`` indices drawn with probabilities proportional to ``weights``
    (with replacement by default).

    >>> import fastop
    >>> _ = fastop.seed(0)
    >>> list(WeightedRandomSampler([0.0, 1.0, 0.0], num_samples=3))
    [1, 1, 1]
    """

    def __init__(self, weights: Any, num_samples: int, replacement: bool = True) -> None:
        self.num_samples = check_int("WeightedRandomSampler", "num_samples", num_samples)
        # Paddle's type for a non-bool replacement here is ValueError
        self.replacement = check_bool("WeightedRandomSampler", "replacement", replacement,
                                      ArgumentValueError)
        w = np.asarray(weights, dtype=np.float64)
        if w.ndim != 1 or w.size == 0:
            raise ArgumentValueError(f"WeightedRandomSampler: weights must be a non-empty "
                                     f"1-D sequence, got shape {list(w.shape)}")
        self.weights = w

    def __len__(self) -> int:
        return self.num_samples

    def _checked_weights(self) -> np.ndarray:
        """The weights as probabilities. Checked when sampling, as PaddlePaddle does
        (a sampler may be made before its weights are filled in)."""
        w = self.weights
        if not np.all(np.isfinite(w)) or np.any(w < 0):
            raise ArgumentValueError("WeightedRandomSampler: weights must be finite and "
                                     "non-negative")
        positive = int(np.count_nonzero(w))
        if positive == 0:
            raise ArgumentValueError("WeightedRandomSampler: at least one weight must be "
                                     "positive")
        if not self.replacement and positive < self.num_samples:
            raise ArgumentValueError(f"WeightedRandomSampler: with replacement=False, "
                                     f"num_samples ({self.num_samples}) must not exceed the "
                                     f"number of positive weights ({positive})")
        return w / w.sum()

    def _epoch_indices(self) -> np.ndarray:
        p = self._checked_weights()
        return _random.generator().choice(p.size, self.num_samples,
                                          replace=self.replacement, p=p)


class SubsetRandomSampler(_ArraySampler):
    """The given indices, in a random order each epoch (without replacement).

    >>> import fastop
    >>> _ = fastop.seed(0)
    >>> sorted(SubsetRandomSampler([1, 3, 5]))
    [1, 3, 5]
    """

    def __init__(self, indices: Sequence[int]) -> None:
        if len(indices) == 0:
            raise ValueError("SubsetRandomSampler: indices must not be empty")
        self.indices = indices
        self._array = np.asarray(indices, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.indices)

    def _epoch_indices(self) -> np.ndarray:
        return self._array[_random.generator().permutation(self._array.size)]
