"""Activation layers with parameters or special functions: ``GELU``, ``SiLU``,
``LeakyReLU``, ``Softplus`` (PaddlePaddle's names and defaults; each calls its
:mod:`fastop.nn.functional` twin)."""
from __future__ import annotations

from typing import Any

from fastop.nn import functional as F
from fastop.nn.layer import Layer

__all__ = ["GELU", "SiLU", "LeakyReLU", "Softplus"]


class GELU(Layer):
    """``0.5 x (1 + erf(x / sqrt 2))``, or its tanh form with ``approximate=True``."""

    def __init__(self, approximate: bool = False, name: str | None = None) -> None:
        super().__init__(name_scope=name)
        self._approximate = bool(approximate)

    def forward(self, x: Any) -> Any:
        return F.gelu(x, self._approximate)

    def extra_repr(self) -> str:
        return f"approximate={self._approximate}"


class SiLU(Layer):
    """``x * sigmoid(x)``."""

    def __init__(self, name: str | None = None) -> None:
        super().__init__(name_scope=name)

    def forward(self, x: Any) -> Any:
        return F.silu(x)


class LeakyReLU(Layer):
    """``x`` where x > 0, ``negative_slope * x`` elsewhere."""

    def __init__(self, negative_slope: float = 0.01, name: str | None = None) -> None:
        super().__init__(name_scope=name)
        self._negative_slope = float(negative_slope)

    def forward(self, x: Any) -> Any:
        return F.leaky_relu(x, self._negative_slope)

    def extra_repr(self) -> str:
        return f"negative_slope={self._negative_slope}"


class Softplus(Layer):
    """``log(1 + exp(beta x)) / beta``, and x where ``beta x > threshold``."""

    def __init__(self, beta: float = 1, threshold: float = 20,
                 name: str | None = None) -> None:
        super().__init__(name_scope=name)
        self._beta, self._threshold = float(beta), float(threshold)
        if self._beta == 0:
            raise ValueError("Softplus: beta must not be 0")

    def forward(self, x: Any) -> Any:
        return F.softplus(x, self._beta, self._threshold)

    def extra_repr(self) -> str:
        return f"beta={self._beta}, threshold={self._threshold}"
