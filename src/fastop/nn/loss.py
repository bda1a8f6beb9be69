"""Loss layers: CrossEntropyLoss (softmax applied by default), MSELoss, L1Loss."""
from __future__ import annotations

from typing import Any

from fastop.nn import functional as F
from fastop.nn.layer import Layer

__all__ = ["CrossEntropyLoss", "MSELoss", "L1Loss"]


class CrossEntropyLoss(Layer):
    """Softmax cross-entropy of logits and integer (or soft) labels, PaddlePaddle's
    ``CrossEntropyLoss``: softmax is applied to the input unless ``use_softmax=False``.
    See :func:`fastop.nn.functional.cross_entropy`."""

    def __init__(self, weight: Any = None, ignore_index: int = -100, reduction: str = "mean",
                 soft_label: bool = False, axis: int = -1, use_softmax: bool = True,
                 label_smoothing: float = 0.0, name: str | None = None) -> None:
        super().__init__()
        F._check_reduction("CrossEntropyLoss", reduction)
        self.weight = weight
        self.ignore_index, self.reduction, self.soft_label = ignore_index, reduction, soft_label
        self.axis, self.use_softmax, self.label_smoothing = axis, use_softmax, label_smoothing

    def forward(self, input: Any, label: Any) -> Any:
        return F.cross_entropy(input, label, weight=self.weight,
                               ignore_index=self.ignore_index,
                               reduction=self.reduction, soft_label=self.soft_label,
                               axis=self.axis, use_softmax=self.use_softmax,
                               label_smoothing=self.label_smoothing)

    def extra_repr(self) -> str:
        return f"reduction={self.reduction!r}, use_softmax={self.use_softmax}"


class MSELoss(Layer):
    """Mean squared error: ``(input - label) ** 2`` reduced by `reduction`."""

    def __init__(self, reduction: str = "mean") -> None:
        super().__init__()
        F._check_reduction("MSELoss", reduction)
        self.reduction = reduction

    def forward(self, input: Any, label: Any) -> Any:
        return F.mse_loss(input, label, self.reduction)

    def extra_repr(self) -> str:
        return f"reduction={self.reduction!r}"


class L1Loss(Layer):
    """Mean absolute error: ``|input - label|`` reduced by `reduction`."""

    def __init__(self, reduction: str = "mean", name: str | None = None) -> None:
        super().__init__()
        F._check_reduction("L1Loss", reduction)
        self.reduction = reduction

    def forward(self, input: Any, label: Any) -> Any:
        return F.l1_loss(input, label, self.reduction)

    def extra_repr(self) -> str:
        return f"reduction={self.reduction!r}"
