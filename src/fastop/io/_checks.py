"""Argument checks shared by fastop.io's classes: each error names the class or
function (``owner``), the argument, what was expected and what came."""
from __future__ import annotations

from typing import Any

import numpy as np

from fastop._errors import ArgumentTypeError, ArgumentValueError

__all__ = ["ArgumentTypeError", "ArgumentValueError", "NoIndexingError", "check_bool",
           "check_int", "check_sized"]


class NoIndexingError(TypeError, RuntimeError):
    """``len()`` or ``[i]`` of an IterableDataset: a TypeError (``list(ds)`` then takes
    the dataset as one without a length) and, as in PaddlePaddle, a RuntimeError."""


def check_bool(owner: str, name: str, value: Any,
               error: type[Exception] = ArgumentTypeError) -> bool:
    """A bool (numpy's too); anything else raises `error`."""
    if not isinstance(value, (bool, np.bool_)):
        raise error(f"{owner}: {name} must be a bool, got {type(value).__name__} "
                    f"{value!r}")
    return bool(value)


def check_int(owner: str, name: str, value: Any, minimum: int = 1) -> int:
    """An int >= minimum (bools refused)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        kind = "a positive integer" if minimum == 1 else \
            "a non-negative integer" if minimum == 0 else f"an integer >= {minimum}"
        raise ArgumentValueError(f"{owner}: {name} must be {kind}, got {value!r}")
    return int(value)


def check_sized(owner: str, name: str, value: Any) -> int:
    """len(value), for arguments that must be map-style datasets."""
    try:
        return len(value)
    except TypeError:
        raise TypeError(f"{owner}: {name} must have a length (a map-style dataset), got "
                        f"{type(value).__name__}") from None
