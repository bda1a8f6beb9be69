"""fastop's global random state: one numpy Generator that `fastop.seed` resets.

Creation functions (randn, rand), initializers and static-mode parameter init ops all
draw from it, so ``fastop.seed(n)`` makes a run reproducible in either mode. Kernels
that draw random bits themselves (dropout's mask, without the GIL) use the C stream of
:mod:`fastop._core.random`, which ``seed`` restarts too. The
generator is made on first use: importing ``numpy.random`` costs ~15 ms of
``import fastop`` that a program without randomness need not pay.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from fastop._core import random as kernel_random

if TYPE_CHECKING:
    import numpy as np

__all__ = ["seed", "generator", "next_seed"]

_generator: "np.random.Generator | None" = None


def seed(value: int) -> "np.random.Generator":
    """Reset the global generator; returns it."""
    global _generator
    import numpy as np
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 0:
        raise ValueError(f"seed: expected a non-negative int, got {value!r}")
    _generator = np.random.default_rng(int(value))
    kernel_random.seed(int(value) % 2**64)
    return _generator


def generator() -> "np.random.Generator":
    """The global generator (replaced when `seed` is called: don't cache it)."""
    global _generator
    if _generator is None:
        import numpy as np
        _generator = np.random.default_rng()
    return _generator


def next_seed() -> int:
    """A seed drawn from the global generator, for ops that carry their own (static init)."""
    return int(generator().integers(0, 2**63 - 1))
