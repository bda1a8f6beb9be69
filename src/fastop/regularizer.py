"""Weight decay (PaddlePaddle's ``paddle.regularizer``): ``L2Decay(coeff)`` adds
``coeff * param`` to a parameter's gradient, ``L1Decay(coeff)`` adds
``coeff * sign(param)``.

Give one to an optimizer as ``weight_decay=`` (a float there means ``L2Decay(float)``);
the optimizers fuse the decay into their update kernels (no separate pass over the
parameters). Called directly, a regularizer returns its decay term.

>>> import numpy as np, fastop
>>> param = fastop.to_tensor(np.array([-2.0, 0.0, 3.0], "float32"))
>>> L1Decay(0.5)(param).numpy().tolist()
[-0.5, 0.0, 0.5]
"""
from __future__ import annotations

import math
from typing import Any

from fastop.ops.builtin._table import B

__all__ = ["WeightDecayRegularizer", "L1Decay", "L2Decay"]


class WeightDecayRegularizer:
    """Base class of weight decay: a coefficient and the term it adds to a gradient.
    ``method`` names the decay for the update kernels (their ``regularization_method``)."""

    method: str = ""

    def __init__(self, coeff: float = 0.0) -> None:
        name = type(self).__name__
        if isinstance(coeff, bool) or not isinstance(coeff, (int, float)):
            raise TypeError(f"{name}: coeff must be a float, got {type(coeff).__name__} "
                            f"{coeff!r}")
        if not math.isfinite(coeff) or coeff < 0:
            raise ValueError(f"{name}: coeff must be a finite non-negative float, got {coeff}")
        self._coeff = float(coeff)

    @property
    def coeff(self) -> float:
        return self._coeff

    def __call__(self, param: Any, grad: Any = None, block: Any = None) -> Any:
        """The decay term of `param` (PaddlePaddle's signature: `grad` and `block` are
        not needed)."""
        raise NotImplementedError(f"{type(self).__name__} must define __call__")

    def __str__(self) -> str:
        return f"{type(self).__name__}, coeff={self._coeff:f}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}(coeff={self._coeff})"


class L2Decay(WeightDecayRegularizer):
    """``grad + coeff * param`` (a float ``weight_decay`` means this)."""

    method = "l2_decay"

    def __call__(self, param: Any, grad: Any = None, block: Any = None) -> Any:
        return B.multiply(param, self._coeff)


class L1Decay(WeightDecayRegularizer):
    """``grad + coeff * sign(param)``: pushes weights to exactly zero (sparse models)."""

    method = "l1_decay"

    def __call__(self, param: Any, grad: Any = None, block: Any = None) -> Any:
        return B.multiply(B.sign(param), self._coeff)
