"""numpy twins of the layer-norm kernels (:mod:`fastop._core.norm`)."""
from __future__ import annotations

import numpy as np

__all__ = ["layer_norm", "layer_norm_grad"]


def _rows(x: np.ndarray, begin_norm_axis: int) -> np.ndarray:
    """x as [rows, n]: the dims before begin_norm_axis flattened, the rest flattened."""
    b = begin_norm_axis % x.ndim
    return x.reshape(int(np.prod(x.shape[:b])), int(np.prod(x.shape[b:]))), b


def layer_norm(x: np.ndarray, weight: np.ndarray | None = None,
               bias: np.ndarray | None = None, epsilon: float = 1e-5,
               begin_norm_axis: int = 1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(out, mean, rstd); mean and rstd keep x's leading dims, 1 in the normalized ones."""
    rows, b = _rows(x, begin_norm_axis)
    with np.errstate(invalid="ignore", divide="ignore"):   # rows of no elements: nan
        mean = rows.mean(axis=1, keepdims=True) if rows.shape[1] else \
            np.full((rows.shape[0], 1), np.nan)
        rstd = 1.0 / np.sqrt(((rows - mean) ** 2).mean(axis=1, keepdims=True) + epsilon) \
            if rows.shape[1] else np.full((rows.shape[0], 1), np.nan)
    out = (rows - mean) * rstd
    if weight is not None:
        out = out * weight.reshape(-1)
    if bias is not None:
        out = out + bias.reshape(-1)
    stat_shape = x.shape[:b] + (1,) * (x.ndim - b)
    return (out.reshape(x.shape).astype(x.dtype), mean.reshape(stat_shape).astype(x.dtype),
            rstd.reshape(stat_shape).astype(x.dtype))


def layer_norm_grad(x: np.ndarray, mean: np.ndarray, rstd: np.ndarray, dout: np.ndarray,
                    weight: np.ndarray | None = None, begin_norm_axis: int = 1
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(dx, dweight, dbias) from the saved mean and rstd."""
    rows, b = _rows(x, begin_norm_axis)
    dy = dout.reshape(rows.shape)
    mean, rstd = mean.reshape(-1, 1), rstd.reshape(-1, 1)
    xhat = (rows - mean) * rstd
    g = dy * weight.reshape(-1) if weight is not None else dy
    dx = rstd * (g - g.mean(axis=1, keepdims=True)
                 - xhat * (g * xhat).mean(axis=1, keepdims=True))
    param_shape = weight.shape if weight is not None else x.shape[b:]
    dweight = (dy * xhat).sum(axis=0).reshape(param_shape)
    dbias = dy.sum(axis=0).reshape(param_shape)
    return (dx.reshape(x.shape).astype(x.dtype), dweight.astype(x.dtype),
            dbias.astype(x.dtype))
