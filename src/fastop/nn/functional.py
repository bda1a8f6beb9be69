"""``fastop.nn.functional``: PaddlePaddle's functional API, written with registered ops.

Every function calls ops of the registry (``fastop::fc``, ``fastop::softmax_cross_entropy``,
...), so it computes on Tensors in eager mode and appends operators in static mode, and
autograd differentiates it through the ops' gradient rules.

>>> import numpy as np, fastop
>>> import fastop.nn.functional as F
>>> x = fastop.to_tensor(np.array([[1.0, 2.0, 3.0]], "float32"))
>>> float(F.cross_entropy(x, fastop.to_tensor(np.array([2]))).numpy())  # doctest: +ELLIPSIS
0.407...
"""
from __future__ import annotations

import math
from typing import Any

from fastop.ops.builtin._table import B

__all__ = ["linear", "relu", "tanh", "sigmoid", "softmax", "log_softmax", "flatten",
           "cross_entropy", "softmax_with_cross_entropy", "mse_loss", "l1_loss"]

_REDUCTIONS = ("mean", "sum", "none")
_FC_ACTIVATIONS = ("", "tanh", "relu", "sigmoid")


def _ndim(x: Any) -> int:
    return len(x.shape)


def _check_reduction(where: str, reduction: str) -> None:
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{where}: reduction must be one of {list(_REDUCTIONS)}, got "
                         f"{reduction!r}")


def _reduce(loss: Any, reduction: str) -> Any:
    if reduction == "mean":
        return B.mean(loss)
    if reduction == "sum":
        return B.sum(loss)
    return loss


# -- layers' building blocks --------------------------------------------------------------

def linear(x: Any, weight: Any, bias: Any = None, name: str | None = None,
           activation: str | None = None) -> Any:
    """``x @ weight + bias`` with weight of shape ``[in, out]`` (the fused fc kernel).

    `activation` (``"tanh"``, ``"relu"``, ``"sigmoid"``; a fastop extension) runs in the
    same kernel.
    """
    activation = activation or ""
    if activation not in _FC_ACTIVATIONS:
        raise ValueError(f"linear: activation must be one of {list(_FC_ACTIVATIONS[1:])} "
                         f"or None, got {activation!r}")
    return B.fc(x, weight, bias, activation=activation)


def relu(x: Any, name: str | None = None) -> Any:
    return B.relu(x)


def tanh(x: Any, name: str | None = None) -> Any:
    return B.tanh(x)


def sigmoid(x: Any, name: str | None = None) -> Any:
    return B.sigmoid(x)


def softmax(x: Any, axis: int = -1, dtype: Any = None, name: str | None = None) -> Any:
    """exp(x) / sum(exp(x)) along `axis` (after casting to `dtype` if given)."""
    if dtype is not None:
        x = B.cast(x, dtype=dtype)
    return B.softmax(x, axis=axis)


def log_softmax(x: Any, axis: int = -1, dtype: Any = None, name: str | None = None) -> Any:
    if dtype is not None:
        x = B.cast(x, dtype=dtype)
    return B.log_softmax(x, axis=axis)


def flatten(x: Any, start_axis: int = 0, stop_axis: int = -1, name: str | None = None) -> Any:
    """Merge the axes `start_axis`..`stop_axis` into one."""
    shape = list(x.shape)
    nd = len(shape)
    start, stop = start_axis % nd if nd else 0, stop_axis % nd if nd else 0
    if start > stop:
        raise ValueError(f"flatten: start_axis ({start_axis}) must not come after "
                         f"stop_axis ({stop_axis}) for a tensor of {nd} dims")
    middle = shape[start:stop + 1]
    merged = -1 if any(d is None or d < 0 for d in middle) else math.prod(middle)
    new = [(-1 if d is None else d) for d in shape[:start]] + [merged] + \
        [(-1 if d is None else d) for d in shape[stop + 1:]]
    if new.count(-1) > 1:
        raise ValueError(f"flatten: cannot flatten shape {shape} with several unknown dims")
    return B.reshape(x, shape=new)


# -- losses ---------------------------------------------------------------------------------

def _move_axis_last(x: Any, axis: int) -> tuple[Any, list[int] | None, list[int] | None]:
    """Transpose `axis` to the end: (x moved, the permutation, the one that undoes it);
    no transpose and None permutations when `axis` is already last."""
    nd = _ndim(x)
    axis = axis % nd
    if axis == nd - 1:
        return x, None, None
    perm = [d for d in range(nd) if d != axis] + [axis]
    inverse = [perm.index(d) for d in range(nd)]
    return B.transpose(x, perm=perm), perm, inverse


def cross_entropy(input: Any, label: Any, weight: Any = None, ignore_index: int = -100,
                  reduction: str = "mean", soft_label: bool = False, axis: int = -1,
                  use_softmax: bool = True, label_smoothing: float = 0.0,
                  name: str | None = None) -> Any:
    """Cross-entropy between `input` logits (probabilities when ``use_softmax=False``)
    and `label`, PaddlePaddle's semantics.

    Hard labels are integers of shape ``input.shape`` without `axis` or with it of size
    1; rows labeled `ignore_index` count zero (and, with ``reduction="mean"`` and
    ``ignore_index >= 0``, are left out of the mean). Soft labels (``soft_label=True``)
    have `input`'s shape. `weight` (one per class) scales each row's loss by its
    label's weight, and the mean becomes ``sum(w * loss) / sum(w)``.
    ``reduction="none"`` keeps `axis` with size 1.
    """
    _check_reduction("cross_entropy", reduction)
    if not 0.0 <= label_smoothing < 1.0:
        raise ValueError(f"cross_entropy: label_smoothing must be in [0, 1), got "
                         f"{label_smoothing}")
    if weight is not None and label_smoothing:
        raise ValueError("cross_entropy: weight and label_smoothing cannot be combined")
    x, perm, inverse = _move_axis_last(input, axis)
    if soft_label:
        if perm is not None:
            label = B.transpose(label, perm=perm)
        loss = _soft_cross_entropy(x, label, use_softmax, label_smoothing)
        row_weight = None if weight is None else \
            B.sum(B.multiply(label, weight), axis=-1, keepdim=True)
    else:
        if perm is not None and _ndim(label) == _ndim(input):
            label = B.transpose(label, perm=perm)
        loss = _hard_cross_entropy(x, label, ignore_index, use_softmax, label_smoothing)
        row_weight = None if weight is None else _label_weight(x, label, weight, ignore_index)
    if row_weight is not None:
        loss = B.multiply(loss, row_weight)
        if reduction == "mean":
            return B.divide(B.sum(loss), B.sum(row_weight))
    elif reduction == "mean" and not soft_label and ignore_index >= 0:
        valid = B.cast(B.not_equal(label, ignore_index), dtype=loss.dtype)
        count = B.maximum(B.sum(valid), 1.0)
        return B.divide(B.sum(loss), count)
    if reduction != "none":
        return _reduce(loss, reduction)
    return loss if inverse is None else B.transpose(loss, perm=inverse)


def _label_weight(x: Any, label: Any, weight: Any, ignore_index: int) -> Any:
    """weight[label] per row (``[..., 1]``), 0 for ignored rows."""
    if _ndim(label) == _ndim(x) - 1:
        label = B.unsqueeze(label, axis=-1)
    keep = B.cast(B.not_equal(label, ignore_index), dtype=label.dtype)
    picked = B.gather(weight, B.multiply(label, keep))   # ignored rows pick 0
    return B.multiply(picked, B.cast(keep, dtype=picked.dtype))


def _hard_cross_entropy(x: Any, label: Any, ignore_index: int, use_softmax: bool,
                        label_smoothing: float) -> Any:
    """Per-row loss ``[..., 1]`` for integer labels, class axis last; 0 on ignored rows."""
    logits = x if use_softmax else B.log(x)
    loss, _ = B.softmax_cross_entropy(logits, label, ignore_index=ignore_index)
    if use_softmax and not label_smoothing:
        return loss
    valid = B.cast(B.not_equal(label, ignore_index), dtype=loss.dtype)
    if _ndim(label) == _ndim(x) - 1:
        valid = B.unsqueeze(valid, axis=-1)
    if not use_softmax:
        # softmax(log p) = p / sum(p): remove the log-normalizer so the loss is -log p[y]
        norm = B.log(B.sum(x, axis=-1, keepdim=True))
        loss = B.subtract(loss, B.multiply(norm, valid))
    if label_smoothing:
        # (1 - eps) * CE(onehot) + eps * CE(uniform)
        log_p = B.log_softmax(logits, axis=-1)
        uniform = B.neg(B.mean(log_p, axis=-1, keepdim=True))
        loss = B.add(B.multiply(loss, 1.0 - label_smoothing),
                          B.multiply(B.multiply(uniform, valid), label_smoothing))
    return loss


def _soft_cross_entropy(x: Any, label: Any, use_softmax: bool, label_smoothing: float) -> Any:
    """Per-row loss ``[..., 1]`` = -sum(label * log p), class axis last."""
    log_p = B.log_softmax(x, axis=-1) if use_softmax else B.log(x)
    if label_smoothing:
        classes = x.shape[-1]
        label = B.add(B.multiply(label, 1.0 - label_smoothing),
                           label_smoothing / classes)
    return B.neg(B.sum(B.multiply(label, log_p), axis=-1, keepdim=True))


def softmax_with_cross_entropy(logits: Any, label: Any, soft_label: bool = False,
                               ignore_index: int = -100, numeric_stable_mode: bool = True,
                               return_softmax: bool = False, axis: int = -1) -> Any:
    """Per-row loss (``[..., 1]``), and the softmax when `return_softmax`."""
    x, perm, inverse = _move_axis_last(logits, axis)
    if perm is not None and _ndim(label) == _ndim(logits):
        label = B.transpose(label, perm=perm)
    if soft_label:
        loss = _soft_cross_entropy(x, label, True, 0.0)
        sm = B.softmax(x, axis=-1) if return_softmax else None
    else:
        loss, sm = B.softmax_cross_entropy(x, label, ignore_index=ignore_index)
    if inverse is not None:
        loss = B.transpose(loss, perm=inverse)
        sm = None if sm is None else B.transpose(sm, perm=inverse)
    return (loss, sm) if return_softmax else loss


def mse_loss(input: Any, label: Any, reduction: str = "mean", name: str | None = None) -> Any:
    """``(input - label) ** 2``, reduced."""
    _check_reduction("mse_loss", reduction)
    return _reduce(B.square(B.subtract(input, label)), reduction)


def l1_loss(input: Any, label: Any, reduction: str = "mean", name: str | None = None) -> Any:
    """``|input - label|``, reduced."""
    _check_reduction("l1_loss", reduction)
    return _reduce(B.abs(B.subtract(input, label)), reduction)
