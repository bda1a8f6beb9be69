"""numpy twins of the linalg kernels (:mod:`fastop._core.linalg`)."""
from __future__ import annotations

import numpy as np

__all__ = ["matmul", "fc", "ACTIVATIONS"]


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return np.exp(-np.logaddexp(0, -z)).astype(z.dtype)


ACTIVATIONS = {
    "": lambda z: z,
    "tanh": np.tanh,
    "sigmoid": _sigmoid,
    "relu": lambda z: np.maximum(z, 0).astype(z.dtype),
}


def matmul(x: np.ndarray, y: np.ndarray, transpose_x: bool = False,
           transpose_y: bool = False) -> np.ndarray:
    """PaddlePaddle's matmul: the flags transpose the last two dims of a >= 2-D operand;
    1-D operands are vectors; batch dims broadcast."""
    if transpose_x and x.ndim > 1:
        x = np.swapaxes(x, -1, -2)
    if transpose_y and y.ndim > 1:
        y = np.swapaxes(y, -1, -2)
    return np.asarray(np.matmul(x, y))


def fc(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None,
       activation: str = "") -> np.ndarray:
    """act(x @ w + b) for x (..., K), w (K, N), b (N,) or None."""
    z = np.matmul(x, w)
    if b is not None:
        z = z + b
    return np.asarray(ACTIVATIONS[activation or ""](z))
