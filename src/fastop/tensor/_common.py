"""What the tensor-function modules share: shape arguments, and binding the functions
as methods."""
from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any, Callable, Union

import numpy as np

from fastop._core.storage import as_dtype
from fastop._tensor import Tensor, add_methods

ShapeLike = Union[int, Sequence[int], Tensor]

# Every tensor function bound as a Tensor method, by method name: static mode binds the
# same ones as Variable methods (fastop.static.framework.add_variable_methods).
TENSOR_METHODS: dict[str, Callable[..., Any]] = {}


def tensor_methods(methods: dict[str, Callable[..., Any]]) -> None:
    """Make tensor functions methods of eager Tensors (and, through TENSOR_METHODS, of
    static Variables), as PaddlePaddle binds its tensor functions."""
    add_methods(methods)
    TENSOR_METHODS.update(methods)


def shape_list(shape: Any, what: str = "shape") -> list[int]:
    """A shape argument (an int, a sequence of ints or an integer Tensor) as a list;
    a float dim is refused, not truncated."""
    if isinstance(shape, Tensor):
        dims = shape.numpy().reshape(-1).tolist()
    elif isinstance(shape, (int, np.integer)):
        dims = [shape]
    else:
        try:
            dims = list(shape)
        except TypeError:
            raise TypeError(f"{what} must be an int or a sequence of ints, got "
                            f"{shape!r}") from None
    try:
        return [operator.index(d) for d in dims]
    except TypeError:
        raise TypeError(f"{what} must hold integers, got {shape!r}") from None


def float_dtype(dtype: Any) -> np.dtype:
    return as_dtype("float32" if dtype is None else dtype).numpy_dtype


def tensor_format(x: Tensor, format_spec: str) -> str:
    """``format(x, spec)``/f-strings: a 0-D tensor formats as its number (``f"{loss:.4f}"``),
    as in PaddlePaddle; other tensors only with an empty spec (their repr)."""
    if x.ndim == 0:
        return format(x.item(), format_spec)
    return object.__format__(x, format_spec)


add_methods({"__format__": tensor_format})
