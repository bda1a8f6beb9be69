"""Turning a list of samples into a batch (PaddlePaddle's ``default_collate_fn`` and
``default_convert_fn``)."""
from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from fastop._tensor import Tensor, from_numpy_tensor

__all__ = ["default_collate_fn", "default_convert_fn"]


def _stack(arrays: list[np.ndarray]) -> np.ndarray:
    try:
        return np.stack(arrays)
    except ValueError:
        shapes = sorted({tuple(a.shape) for a in arrays})
        raise ValueError(f"default_collate_fn: the samples' arrays must have one shape to be "
                         f"stacked into a batch, got shapes {[list(s) for s in shapes]} "
                         f"(pad them, or pass a collate_fn)") from None


def default_collate_fn(batch: Sequence[Any]) -> Any:
    """Stack a list of samples field by field: arrays are stacked along a new first axis,
    numbers become an array, strings stay a list, dicts and lists are collated per key
    or position (a list of fields comes back as a list). Samples that are Tensors give
    a Tensor.

    >>> import numpy as np
    >>> out = default_collate_fn([{"x": np.zeros(2), "y": 1}, {"x": np.ones(2), "y": 0}])
    >>> out["x"].shape, out["y"]
    ((2, 2), array([1, 0]))
    """
    if len(batch) == 0:
        raise ValueError("default_collate_fn: the batch is empty")
    sample = batch[0]
    if isinstance(sample, np.ndarray):
        return _stack(batch)
    if isinstance(sample, Tensor):
        return from_numpy_tensor(_stack([t.numpy() for t in batch]))
    if isinstance(sample, (str, bytes)):
        return list(batch)
    if isinstance(sample, numbers.Number):
        return np.array(batch)
    if isinstance(sample, Mapping):
        return {key: default_collate_fn([s[key] for s in batch]) for key in sample}
    if isinstance(sample, Sequence):
        width = len(sample)
        if any(len(s) != width for s in batch):
            raise RuntimeError(f"default_collate_fn: every sample must have the same number "
                               f"of fields, got {sorted({len(s) for s in batch})}")
        return [default_collate_fn(list(fields)) for fields in zip(*batch)]
    raise TypeError(f"default_collate_fn: a sample may hold arrays, Tensors, numbers, "
                    f"strings, dicts and lists, got {type(sample).__name__}")


def default_convert_fn(batch: Any) -> Any:
    """The collate function when automatic batching is off (``batch_size=None``): the
    sample is already a batch; lists and dicts are walked, everything else kept."""
    if isinstance(batch, (Tensor, np.ndarray, str, bytes)):
        return batch
    if isinstance(batch, Mapping):
        return {key: default_convert_fn(value) for key, value in batch.items()}
    if isinstance(batch, Sequence):
        return [default_convert_fn(item) for item in batch]
    return batch
