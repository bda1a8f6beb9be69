"""What the tensor-function modules share: the built-in ops they call and shape
arguments."""
from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any, Union

import numpy as np

from fastop._core.storage import as_dtype
from fastop._tensor import Tensor
from fastop.ops._registry import registry

ShapeLike = Union[int, Sequence[int], Tensor]

_ops: dict[str, Any] = {}
_ops_version = -1


def _op(name: str) -> Any:
    """The OpDef ``fastop::<name>``, looked up again only when the registry changes."""
    global _ops_version
    if _ops_version != registry.version:
        _ops.clear()
        _ops_version = registry.version
    op = _ops.get(name)
    if op is None:
        op = _ops[name] = registry.get("fastop::" + name)
    return op


def _shape(shape: Any) -> list[int]:
    """A shape argument (an int, a sequence of ints or an integer Tensor) as a list;
    a float dim is refused, not truncated."""
    if isinstance(shape, Tensor):
        dims = shape.numpy().reshape(-1).tolist()
    elif isinstance(shape, (int, np.integer)):
        dims = [shape]
    else:
        dims = list(shape)
    try:
        return [operator.index(d) for d in dims]
    except TypeError:
        raise TypeError(f"shape must hold integers, got {shape!r}") from None


def _float_dtype(dtype: Any) -> np.dtype:
    return as_dtype("float32" if dtype is None else dtype).numpy_dtype
