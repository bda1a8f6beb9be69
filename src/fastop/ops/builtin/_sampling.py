"""Sample values for the built-in families' ``samples()`` (inputs of
:func:`fastop.testing.opcheck`): seeded, so a failing sample is the same on every run,
and with the shapes of values kept away from points where an op is not differentiable."""
from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["Values", "sample"]


class Values:
    """Seeded sample arrays: ``v = Values(); v.normal(2, 3, dtype="float32")``."""

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)

    def normal(self, *shape: int, dtype: str = "float64") -> np.ndarray:
        """Standard normal values."""
        return self.rng.standard_normal(shape).astype(dtype)

    def positive(self, *shape: int, dtype: str = "float64") -> np.ndarray:
        """Values in [0.2, 1.5) (away from 0 and its kinks: log, sqrt, pow's base)."""
        return self.rng.uniform(0.2, 1.5, shape).astype(dtype)

    def away(self, *shape: int, dtype: str = "float64") -> np.ndarray:
        """Values with 0.2 <= |x| < 1.5, alternating in sign (abs, sign, relu, max)."""
        signs = np.where(np.arange(int(np.prod(shape))).reshape(shape) % 2, 1.0, -1.0)
        return (self.rng.uniform(0.2, 1.5, shape) * signs).astype(dtype)

    def distinct(self, *shape: int, dtype: str = "float64") -> np.ndarray:
        """Distinct values 0.1 apart, centred on 0, in random order: no maximum or
        comparison changes within the finite differences' step."""
        n = int(np.prod(shape))
        return ((self.rng.permutation(n) - n / 2 + 0.5) * 0.1).reshape(shape).astype(dtype)


def sample(*inputs: Any, **attrs: Any) -> Any:
    """A :class:`fastop.testing.Sample`: one call's inputs with its attributes."""
    from fastop.testing import Sample   # the tools layer; samples are made for tests only
    return Sample(*inputs, **attrs)
