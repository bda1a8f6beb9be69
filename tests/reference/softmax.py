"""numpy twins of the softmax kernels (:mod:`fastop._core.softmax`)."""
from __future__ import annotations

import numpy as np

__all__ = ["softmax", "log_softmax", "softmax_grad", "log_softmax_grad",
           "softmax_cross_entropy", "softmax_cross_entropy_grad"]


def _shifted(x: np.ndarray, axis: int) -> np.ndarray:
    """x minus its max along axis (rows of zero length stay empty)."""
    if x.size == 0:
        return x.copy()
    return x - np.max(x, axis=axis, keepdims=True)


def _rows_of_0d(fn):
    """Treat a 0-d tensor as one row of one element (as the kernels do)."""
    def wrapper(*arrays, axis=-1):
        if arrays[0].ndim == 0:
            return fn(*[a.reshape(1) for a in arrays], axis=0).reshape(())
        return fn(*arrays, axis=axis)
    wrapper.__name__, wrapper.__doc__ = fn.__name__, fn.__doc__
    return wrapper


@_rows_of_0d
def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    e = np.exp(_shifted(x, axis))
    return e / np.sum(e, axis=axis, keepdims=True)


@_rows_of_0d
def log_softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    z = _shifted(x, axis)
    with np.errstate(divide="ignore"):    # rows of no elements: log(0) = -inf
        return z - np.log(np.sum(np.exp(z), axis=axis, keepdims=True))


@_rows_of_0d
def softmax_grad(y: np.ndarray, dy: np.ndarray, axis: int = -1) -> np.ndarray:
    """dx = y * (dy - sum(dy * y)) for y = softmax(x)."""
    return y * (dy - np.sum(dy * y, axis=axis, keepdims=True))


@_rows_of_0d
def log_softmax_grad(y: np.ndarray, dy: np.ndarray, axis: int = -1) -> np.ndarray:
    """dx = dy - exp(y) * sum(dy) for y = log_softmax(x)."""
    return dy - np.exp(y) * np.sum(dy, axis=axis, keepdims=True)


def _rows(label: np.ndarray, logits_shape: tuple) -> np.ndarray:
    """Labels as a flat int64 array with one entry per row of logits."""
    return np.asarray(label, dtype=np.int64).reshape(-1) if len(logits_shape) > 1 \
        else np.asarray(label, dtype=np.int64).reshape(1)


def softmax_cross_entropy(logits: np.ndarray, label: np.ndarray, ignore_index: int = -100):
    """(loss [*, 1], softmax [*, C]); loss = -log_softmax(logits)[label], 0 where the
    label is ignore_index; other labels outside [0, C) raise ValueError."""
    c = logits.shape[-1]
    flat = logits.reshape(int(np.prod(logits.shape[:-1])), c)
    lab = _rows(label, logits.shape)
    keep = lab != ignore_index
    if np.any(keep & ((lab < 0) | (lab >= c))):
        raise ValueError(f"softmax_cross_entropy: labels must be in [0, {c}), got "
                         f"{lab[keep & ((lab < 0) | (lab >= c))][:5].tolist()}")
    logp = log_softmax(flat, axis=-1)
    loss = np.zeros((flat.shape[0], 1), dtype=logits.dtype)
    rows = np.nonzero(keep)[0]
    loss[rows, 0] = -logp[rows, lab[rows]]
    return (loss.reshape(*logits.shape[:-1], 1),
            softmax(flat, axis=-1).reshape(logits.shape))


def softmax_cross_entropy_grad(label: np.ndarray, softmax: np.ndarray, dloss: np.ndarray,
                               ignore_index: int = -100) -> np.ndarray:
    """dlogits = dloss * (softmax - onehot(label)); zero rows where ignored."""
    c = softmax.shape[-1]
    sm = softmax.reshape(int(np.prod(softmax.shape[:-1])), c)
    lab = _rows(label, softmax.shape)
    keep = lab != ignore_index
    if np.any(keep & ((lab < 0) | (lab >= c))):
        raise ValueError(f"softmax_cross_entropy_grad: labels must be in [0, {c})")
    g = sm.copy()
    rows = np.nonzero(keep)[0]
    g[rows, lab[rows]] -= 1
    g *= dloss.reshape(-1, 1) * keep[:, None]
    return g.reshape(softmax.shape).astype(softmax.dtype)
