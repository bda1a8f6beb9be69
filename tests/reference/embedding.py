"""numpy twins of the embedding kernels (:mod:`fastop._core.embedding`)."""
from __future__ import annotations

import numpy as np

__all__ = ["embedding", "embedding_grad"]


def _check(x: np.ndarray, weight: np.ndarray) -> None:
    if x.size and (x.min() < 0 or x.max() >= weight.shape[0]):
        raise ValueError("each id must be in [0, num_embeddings)")


def embedding(x: np.ndarray, weight: np.ndarray, padding_idx: int = -1) -> np.ndarray:
    _check(x, weight)
    out = weight[x]
    if padding_idx >= 0:
        out[x == padding_idx] = 0
    return out


def embedding_grad(x: np.ndarray, weight: np.ndarray, dout: np.ndarray,
                   padding_idx: int = -1) -> np.ndarray:
    _check(x, weight)
    dweight = np.zeros_like(weight)
    np.add.at(dweight, x.reshape(-1), dout.reshape(-1, weight.shape[1]))
    if padding_idx >= 0:
        dweight[padding_idx] = 0
    return dweight
