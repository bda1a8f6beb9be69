"""Metrics: ``accuracy`` on one batch, and ``Metric`` classes that accumulate over many
(PaddlePaddle's ``paddle.metric``).

A ``Metric`` is used as ``m.update(*m.compute(pred, label))`` per batch (``compute``
turns network outputs into the statistics ``update`` adds up; by default it passes
its arguments through), then ``m.accumulate()`` for the result so far, ``m.reset()``
between epochs, ``m.name()`` for logging.
"""
from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import Any

import numpy as np

from fastop._tensor import Tensor, from_numpy_tensor

__all__ = ["Metric", "Accuracy", "Precision", "Recall", "Auc", "accuracy"]


def _as_numpy(owner: str, name: str, value: Any) -> np.ndarray:
    if isinstance(value, Tensor):
        return value.numpy()
    if isinstance(value, (np.ndarray, np.generic, list, tuple, int, float)):
        return np.asarray(value)
    raise TypeError(f"{owner}: {name} must be a Tensor or a numpy array, got "
                    f"{type(value).__name__}")


def _top_k_indices(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest scores along the last axis, largest first; ties go to
    the lower index (as Paddle's topk)."""
    return np.argsort(-scores, axis=-1, kind="stable")[..., :k]


def _store_count(owner: str, name: str, target: Any, value: int) -> None:
    if not isinstance(target, Tensor):
        raise TypeError(f"{owner}: {name} must be a Tensor (it receives the count), got "
                        f"{type(target).__name__}")
    target.set_value(np.full(target.shape, value))


def accuracy(input: Any, label: Any, k: int = 1, correct: Tensor | None = None,
             total: Tensor | None = None, name: str | None = None) -> Tensor:
    """The fraction of samples whose label is among the ``k`` highest scores.

    Args:
        input: scores of shape ``[sample_number, class_dim]`` (float32 or float64).
        label: integer labels of shape ``[sample_number, 1]`` or ``[sample_number]``.
        k: how many of the top scores count as a hit.
        correct, total: optional Tensors that receive this batch's number of hits and
            of samples (as Paddle's static graph writes them).

    Returns a 0-D Tensor of the input's dtype.

    >>> import fastop
    >>> pred = fastop.to_tensor([[0.2, 0.1, 0.4, 0.1, 0.1], [0.2, 0.3, 0.1, 0.15, 0.25]])
    >>> label = fastop.to_tensor([[2], [0]])
    >>> float(accuracy(pred, label, k=1)), float(accuracy(pred, label, k=2))
    (0.5, 0.5)
    """
    scores = _as_numpy("accuracy", "input", input)
    labels = _as_numpy("accuracy", "label", label)
    if scores.ndim != 2 or scores.shape[0] == 0:
        raise ValueError(f"accuracy: input must have shape [sample_number, class_dim] with "
                         f"at least one sample, got {list(scores.shape)}")
    n, classes = scores.shape
    if labels.shape not in ((n,), (n, 1)):
        raise ValueError(f"accuracy: label must have shape [{n}, 1] or [{n}] (one label "
                         f"per row of input), got {list(labels.shape)}")
    if labels.dtype.kind not in "iu":
        raise TypeError(f"accuracy: label must hold integers (class indices), got dtype "
                        f"{labels.dtype}")
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= classes:
        raise ValueError(f"accuracy: k must be an integer in [1, class_dim={classes}], "
                         f"got {k!r}")
    hits = int((_top_k_indices(scores, k) == labels.reshape(n, 1)).any(axis=1).sum())
    if correct is not None:
        _store_count("accuracy", "correct", correct, hits)
    if total is not None:
        _store_count("accuracy", "total", total, n)
    dtype = scores.dtype if scores.dtype.kind == "f" and scores.dtype.itemsize >= 4 \
        else np.dtype(np.float32)
    return from_numpy_tensor(np.asarray(hits / n, dtype=dtype))


class Metric(abc.ABC):
    """Base class of metrics: subclasses define ``reset``, ``update``, ``accumulate``
    and ``name``, and may define ``compute`` (by default it returns its arguments).

    >>> class MeanValue(Metric):
    ...     def __init__(self): self.reset()
    ...     def reset(self): self.sum, self.count = 0.0, 0
    ...     def update(self, values):
    ...         self.sum += float(np.sum(values))
    ...         self.count += len(values)
    ...     def accumulate(self): return self.sum / self.count if self.count else 0.0
    ...     def name(self): return "mean"
    >>> m = MeanValue(); m.update(np.array([1.0, 3.0])); m.accumulate()
    2.0
    """

    @abc.abstractmethod
    def reset(self) -> None:
        """Clear the accumulated state."""

    @abc.abstractmethod
    def update(self, *args: Any) -> Any:
        """Add a batch's statistics (the outputs of ``compute``)."""

    @abc.abstractmethod
    def accumulate(self) -> Any:
        """The metric over everything added since the last ``reset``."""

    @abc.abstractmethod
    def name(self) -> Any:
        """The metric's name (a list of names for a metric with several values)."""

    def compute(self, *args: Any) -> Any:
        """Turn network outputs and labels into what ``update`` takes (here: unchanged)."""
        return args


class Accuracy(Metric):
    """Top-k accuracy accumulated over batches, for each k in ``topk``.

    >>> import fastop
    >>> m = Accuracy()
    >>> pred = fastop.to_tensor([[0.1, 0.2, 0.3, 0.4], [0.1, 0.4, 0.3, 0.2],
    ...                          [0.1, 0.2, 0.4, 0.3], [0.1, 0.2, 0.3, 0.4]])
    >>> label = fastop.to_tensor([[0], [1], [2], [3]])
    >>> m.update(m.compute(pred, label))
    0.75
    >>> m.accumulate(), m.name()
    (0.75, ['acc'])
    """

    def __init__(self, topk: int | Sequence[int] = (1,), name: str | None = None,
                 *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        topk = (topk,) if isinstance(topk, (int, np.integer)) else tuple(topk)
        if not topk or any(isinstance(k, bool) or not isinstance(k, (int, np.integer))
                           or k < 1 for k in topk):
            raise ValueError(f"Accuracy: topk must be a positive integer or a non-empty "
                             f"sequence of them, got {topk!r}")
        self.topk = topk
        self.maxk = max(topk)
        base = name or "acc"
        self._name = [f"{base}_top{k}" for k in topk] if self.maxk != 1 else [base]
        self.reset()

    def compute(self, pred: Any, label: Any, *args: Any) -> Tensor:
        """The hit mask of the top ``maxk`` predictions: float32 of shape
        ``[..., maxk]``, 1 where the label is that prediction. ``label`` holds class
        indices (shape ``[..., 1]`` or ``[N]``) or one-hot rows."""
        scores = _as_numpy("Accuracy.compute", "pred", pred)
        labels = _as_numpy("Accuracy.compute", "label", label)
        if scores.ndim == 0 or scores.shape[-1] < self.maxk:
            raise ValueError(f"Accuracy.compute: pred needs at least maxk={self.maxk} "
                             f"classes in its last axis, got shape {list(scores.shape)}")
        top = _top_k_indices(scores, self.maxk)
        if labels.ndim == 1 or (labels.ndim == 2 and labels.shape[-1] == 1):
            labels = labels.reshape(-1, 1)
        elif labels.shape[-1] != 1:
            labels = labels.argmax(axis=-1)[..., None]       # one-hot rows
        if labels.shape[:-1] != top.shape[:-1]:
            raise ValueError(f"Accuracy.compute: label (shape {list(labels.shape)}) must "
                             f"have one class per row of pred (shape {list(scores.shape)})")
        return from_numpy_tensor((top == labels).astype(np.float32))

    def update(self, correct: Any, *args: Any) -> float | list[float]:
        """Add a batch's hit mask (from ``compute``); returns the batch's accuracy (a
        list, one per k, when there are several)."""
        hits = _as_numpy("Accuracy.update", "correct", correct)
        if hits.ndim == 0 or hits.shape[-1] < self.maxk:
            raise ValueError(f"Accuracy.update: correct must have maxk={self.maxk} columns "
                             f"(the output of compute), got shape {list(hits.shape)}")
        num_samples = int(np.prod(hits.shape[:-1]))
        accs = []
        for i, k in enumerate(self.topk):
            num_corrects = hits[..., :k].sum()
            accs.append(float(num_corrects) / num_samples if num_samples else 0.0)
            self.total[i] += num_corrects
            self.count[i] += num_samples
        return accs[0] if len(self.topk) == 1 else accs

    def reset(self) -> None:
        self.total = [0.0] * len(self.topk)
        self.count = [0] * len(self.topk)

    def accumulate(self) -> float | list[float]:
        res = [float(t) / c if c > 0 else 0.0 for t, c in zip(self.total, self.count)]
        return res[0] if len(self.topk) == 1 else res

    def name(self) -> list[str]:
        return self._name


def _binary_inputs(owner: str, preds: Any, labels: Any) -> tuple[np.ndarray, np.ndarray]:
    p = _as_numpy(owner, "preds", preds).reshape(-1)
    y = _as_numpy(owner, "labels", labels).reshape(-1)
    if p.shape != y.shape:
        raise ValueError(f"{owner}: preds and labels must hold one value per sample, got "
                         f"{p.size} predictions and {y.size} labels")
    return p, y


class Precision(Metric):
    """Binary precision ``tp / (tp + fp)``; a prediction counts as positive when it
    rounds to 1 (``floor(p + 0.5) == 1``)."""

    def __init__(self, name: str = "precision", *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._name = name
        self.reset()

    def update(self, preds: Any, labels: Any) -> None:
        p, y = _binary_inputs("Precision.update", preds, labels)
        positive = np.floor(p + 0.5).astype(np.int32) == 1
        self.tp += int(np.count_nonzero(positive & (y == 1)))
        self.fp += int(np.count_nonzero(positive & (y != 1)))

    def reset(self) -> None:
        self.tp = 0
        self.fp = 0

    def accumulate(self) -> float:
        predicted = self.tp + self.fp
        return self.tp / predicted if predicted else 0.0

    def name(self) -> str:
        return self._name


class Recall(Metric):
    """Binary recall ``tp / (tp + fn)``; a prediction counts as positive when
    ``rint(p) == 1`` (Paddle's rounding: 0.5 rounds to 0)."""

    def __init__(self, name: str = "recall", *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._name = name
        self.reset()

    def update(self, preds: Any, labels: Any) -> None:
        p, y = _binary_inputs("Recall.update", preds, labels)
        relevant = y == 1
        hit = np.rint(p).astype(np.int32) == 1
        self.tp += int(np.count_nonzero(relevant & hit))
        self.fn += int(np.count_nonzero(relevant & ~hit))

    def reset(self) -> None:
        self.tp = 0
        self.fn = 0

    def accumulate(self) -> float:
        relevant = self.tp + self.fn
        return self.tp / relevant if relevant else 0.0

    def name(self) -> str:
        return self._name


class Auc(Metric):
    """Area under the ROC curve of a binary classifier, from ``num_thresholds + 1``
    histogram buckets of the positive-class probability (``preds[:, 1]``)."""

    def __init__(self, curve: str = "ROC", num_thresholds: int = 4095, name: str = "auc",
                 *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if curve != "ROC":
            raise ValueError(f"Auc: only curve='ROC' is implemented (as in Paddle's Python "
                             f"metric), got {curve!r}")
        if isinstance(num_thresholds, bool) or not isinstance(num_thresholds, int) or \
                num_thresholds < 1:
            raise ValueError(f"Auc: num_thresholds must be a positive integer, got "
                             f"{num_thresholds!r}")
        self._curve = curve
        self._num_thresholds = num_thresholds
        self._name = name
        self.reset()

    def update(self, preds: Any, labels: Any) -> None:
        """Add a batch: ``preds`` of shape ``[N, 2]`` (class probabilities), ``labels``
        of N zeros and ones."""
        p = _as_numpy("Auc.update", "preds", preds)
        y = _as_numpy("Auc.update", "labels", labels).reshape(-1)
        if p.ndim != 2 or p.shape[1] < 2 or p.shape[0] != y.size:
            raise ValueError(f"Auc.update: preds must have shape [N, 2] with N = number of "
                             f"labels ({y.size}), got {list(p.shape)}")
        buckets = (p[:, 1] * self._num_thresholds).astype(np.int64)
        if buckets.size and (buckets.min() < 0 or buckets.max() > self._num_thresholds):
            raise ValueError("Auc.update: the positive-class probabilities preds[:, 1] must "
                             "lie in [0, 1]")
        size = self._num_thresholds + 1
        positive = y.astype(bool)
        self._stat_pos += np.bincount(buckets[positive], minlength=size)
        self._stat_neg += np.bincount(buckets[~positive], minlength=size)

    @staticmethod
    def trapezoid_area(x1: float, x2: float, y1: float, y2: float) -> float:
        return abs(x1 - x2) * (y1 + y2) / 2.0

    def accumulate(self) -> float:
        # Walk the buckets from the highest threshold down, as cumulative sums.
        tot_pos = np.cumsum(self._stat_pos[::-1])
        tot_neg = np.cumsum(self._stat_neg[::-1])
        prev_pos = np.concatenate(([0.0], tot_pos[:-1]))
        prev_neg = np.concatenate(([0.0], tot_neg[:-1]))
        auc = float(np.sum(self.trapezoid_area(tot_neg, prev_neg, tot_pos, prev_pos)))
        pos, neg = tot_pos[-1], tot_neg[-1]
        return auc / pos / neg if pos > 0 and neg > 0 else 0.0

    def reset(self) -> None:
        self._stat_pos = np.zeros(self._num_thresholds + 1)
        self._stat_neg = np.zeros(self._num_thresholds + 1)

    def name(self) -> str:
        return self._name
