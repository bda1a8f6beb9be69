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

import numbers
from typing import Any, Sequence

import numpy as np

from fastop._core.linalg import ACTIVATIONS as FC_ACTIVATIONS
from fastop.autograd import no_grad
from fastop.ops._dispatch import current_mode
from fastop.ops.builtin._table import B
from fastop.tensor.inplace import apply_in_place, tanh_
from fastop.tensor.manipulation import flatten as _flatten

__all__ = ["linear", "relu", "tanh", "sigmoid", "softmax", "log_softmax", "flatten",
           "cross_entropy", "softmax_with_cross_entropy", "mse_loss", "l1_loss",
           "dropout", "layer_norm", "batch_norm", "embedding", "one_hot", "gelu", "silu",
           "leaky_relu", "softplus", "conv1d", "conv2d", "relu_", "tanh_", "softmax_"]

_REDUCTIONS = ("mean", "sum", "none")


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
    if activation not in FC_ACTIVATIONS:
        fused = [name for name in FC_ACTIVATIONS if name]
        raise ValueError(f"linear: activation must be one of {fused} or None, got "
                         f"{activation!r}")
    if bias is not None and len(bias.shape) == 0:     # a 0-D bias broadcasts (PaddlePaddle)
        bias = B.broadcast_to(bias, shape=[weight.shape[-1]])
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


def relu_(x: Any, name: str | None = None) -> Any:
    """In place: max(x, 0) (PaddlePaddle's in-place rules, :mod:`fastop.tensor.inplace`)."""
    return apply_in_place(x, "relu_", B.relu)


def softmax_(x: Any, axis: int = -1, dtype: Any = None, name: str | None = None) -> Any:
    """In place: softmax of x along `axis` (`dtype`, if given, must be x's own)."""
    return apply_in_place(x, "softmax_", lambda s: softmax(s, axis, dtype))


def log_softmax(x: Any, axis: int = -1, dtype: Any = None, name: str | None = None) -> Any:
    if dtype is not None:
        x = B.cast(x, dtype=dtype)
    return B.log_softmax(x, axis=axis)


def flatten(x: Any, start_axis: int = 0, stop_axis: int = -1, name: str | None = None) -> Any:
    """Merge the axes `start_axis`..`stop_axis` into one (:func:`fastop.flatten`)."""
    return _flatten(x, start_axis, stop_axis)


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


# -- regularization, normalization, lookup, activations ------------------------------



_DROPOUT_MODES = ("upscale_in_train", "downscale_in_infer")


def check_dropout_args(where: str, p: Any, mode: Any) -> None:
    """Raise unless `p` is a number in [0, 1] and `mode` a dropout mode."""
    if isinstance(p, bool) or not isinstance(p, numbers.Real) or not 0 <= p <= 1:
        raise ValueError(f"{where}: p must be a number in [0, 1], got {p!r}")
    if mode not in _DROPOUT_MODES:
        raise ValueError(f"{where}: mode must be one of {list(_DROPOUT_MODES)}, got "
                         f"{mode!r}")


def dropout(x: Any, p: float = 0.5, axis: int | Sequence[int] | None = None,
            training: bool = True, mode: str = "upscale_in_train",
            name: str | None = None) -> Any:
    """Zero each element with probability `p` while training (PaddlePaddle's
    ``dropout``).

    ``mode="upscale_in_train"`` scales the kept elements by ``1 / (1 - p)`` while
    training and is the identity otherwise; ``"downscale_in_infer"`` keeps them as they
    are while training and multiplies by ``1 - p`` otherwise. With `axis`, one draw is
    shared along the other dims (the mask has size 1 there). The mask is drawn by the
    op's kernel: a fresh one per call, and per ``Executor.run`` in static mode.
    """
    check_dropout_args("dropout", p, mode)
    if p == 0 or (not training and mode == "upscale_in_train"):
        return x
    if not training:
        return B.multiply(x, 1.0 - float(p))
    if axis is None:
        return B.dropout(x, p=float(p), mode=mode)[0]
    nd = _ndim(x)
    axes = [axis] if isinstance(axis, numbers.Integral) else list(axis)
    if not axes or any(not -nd <= a < nd for a in axes):
        raise ValueError(f"dropout: axis {axis!r} is out of range for a tensor of {nd} "
                         f"dims")
    shared = [d for d in range(nd) if d not in {a % nd for a in axes}]
    if not shared:
        return B.dropout(x, p=float(p), mode=mode)[0]
    # one draw per position of `axis`: the mask of a size-1 slice, broadcast
    ones = B.full_like(B.slice(x, axes=shared, starts=[0] * len(shared),
                             ends=[1] * len(shared)), fill_value=1.0)
    return B.multiply(x, B.dropout(ones, p=float(p), mode=mode)[0])


def layer_norm(x: Any, normalized_shape: int | Sequence[int], weight: Any = None,
               bias: Any = None, epsilon: float = 1e-05, name: str | None = None) -> Any:
    """Normalize over the last ``len(normalized_shape)`` dims: ``(x - mean) /
    sqrt(var + epsilon) * weight + bias`` (weight and bias of ``prod(normalized_shape)``
    elements, in any shape of that size)."""
    shape = [normalized_shape] if isinstance(normalized_shape, numbers.Integral) \
        else list(normalized_shape)
    x_shape = list(x.shape)
    tail = x_shape[len(x_shape) - len(shape):] if len(shape) <= len(x_shape) else None
    if not shape or tail is None or any(
            d is not None and d >= 0 and d != s for d, s in zip(tail, shape)):
        raise ValueError(f"layer_norm: normalized_shape {shape} must be the last dims of "
                         f"x, whose shape is {x_shape}")
    begin = len(x_shape) - len(shape)
    return B.layer_norm(x, weight, bias, epsilon=float(epsilon), begin_norm_axis=begin)[0]


_CHANNEL_LAST = ("NLC", "NHWC", "NDHWC")
_CHANNEL_FIRST = ("NC", "NCL", "NCHW", "NCDHW")


def batch_norm(x: Any, running_mean: Any, running_var: Any, weight: Any = None,
               bias: Any = None, training: bool = False, momentum: float = 0.9,
               epsilon: float = 1e-05, data_format: str = "NCHW",
               use_global_stats: bool | None = None, name: str | None = None) -> Any:
    """Normalize each channel by batch statistics (training) or by the running ones.

    PaddlePaddle's conventions: the channel axis is 1 (``data_format`` "NC", "NCL",
    "NCHW", "NCDHW") or the last ("NLC", "NHWC", "NDHWC"); with batch statistics the
    running ones are updated in place as ``running = running * momentum + batch * (1 -
    momentum)``, with the biased (divided by N) batch variance; ``use_global_stats``
    (default: ``not training``) normalizes with the running statistics.
    """
    if data_format not in _CHANNEL_FIRST + _CHANNEL_LAST:
        raise ValueError(f"batch_norm: data_format must be one of "
                         f"{list(_CHANNEL_FIRST + _CHANNEL_LAST)}, got {data_format!r}")
    nd = _ndim(x)
    if nd < 2:
        raise ValueError(f"batch_norm: x needs a batch and a channel dim, got shape "
                         f"{list(x.shape)}")
    channel = nd - 1 if data_format in _CHANNEL_LAST else 1
    channels = x.shape[channel]
    if channels is not None and channels >= 0 and list(running_mean.shape) != [channels]:
        raise ValueError(f"batch_norm: running_mean must have shape [{channels}] (x's "
                         f"channels), got {list(running_mean.shape)}")
    stat_shape = [-1 if d == channel else 1 for d in range(nd)]
    batch_stats = training if use_global_stats is None else not use_global_stats
    if batch_stats:
        axes = [d for d in range(nd) if d != channel]
        check_batch_statistics("batch_norm", x, axes)
        mean = B.mean(x, axis=axes, keepdim=True)
        centered = B.subtract(x, mean)
        var = B.mean(B.square(centered), axis=axes, keepdim=True)
        _update_running(running_mean, mean, momentum)
        _update_running(running_var, var, momentum)
    else:
        centered = B.subtract(x, B.reshape(running_mean, shape=stat_shape))
        var = B.reshape(running_var, shape=stat_shape)
    out = B.multiply(centered, B.pow(B.add(var, float(epsilon)), -0.5))
    if weight is not None:
        out = B.multiply(out, B.reshape(weight, shape=stat_shape))
    if bias is not None:
        out = B.add(out, B.reshape(bias, shape=stat_shape))
    return out


def check_batch_statistics(who: str, x: Any, axes: Sequence[int]) -> None:
    """Raise a ValueError naming `who` when `x` has no value per channel over `axes`
    (an empty batch): its batch statistics would be NaN, and so would the running ones
    they update. Dims unknown until run time (static mode) are not checked."""
    shape = list(x.shape)
    if any(shape[d] == 0 for d in axes):
        raise ValueError(f"{who}: training needs at least one value per channel to compute "
                         f"batch statistics, got an input of shape {shape}; the running "
                         f"mean and variance are left as they were")


def _update_running(running: Any, batch: Any, momentum: float) -> None:
    """running = running * momentum + batch * (1 - momentum), in place: a set_value in
    eager mode (outside autograd), an op writing the persistable variable in static
    mode."""
    def updated() -> Any:
        flat = B.reshape(batch, shape=list(running.shape))
        return B.multiply(running, float(momentum)), B.multiply(flat, 1.0 - float(momentum))

    if current_mode() == "static":
        B.add(*updated(), out=running)
        return
    with no_grad():
        running.set_value(B.add(*updated()))


def embedding(x: Any, weight: Any, padding_idx: int | None = None,
              max_norm: float | None = None, norm_type: float = 2.0, sparse: bool = False,
              name: str | None = None) -> Any:
    """Rows of `weight` (``[num_embeddings, dim]``) at the int ids `x`; where an id is
    `padding_idx` (negative: counted from the end) the row is zeros and gets no
    gradient. With `max_norm` (PaddlePaddle's ``embedding_renorm_``; eager mode), each
    row that `x` looks up whose `norm_type`-norm exceeds it is first scaled in place, in
    `weight`, to norm ``max_norm`` (``row * max_norm / (norm + 1e-7)``). `sparse` is
    accepted for PaddlePaddle compatibility: the gradient is dense."""
    rows = weight.shape[0]
    if padding_idx is None:
        pad = -1
    else:
        if rows is not None and rows >= 0 and not -rows <= padding_idx < rows:
            raise ValueError(f"embedding: padding_idx must be in [-{rows}, {rows}) "
                             f"(num_embeddings), got {padding_idx}")
        pad = padding_idx + rows if padding_idx < 0 else padding_idx
    if max_norm:
        renorm_looked_up_rows(x, weight, float(max_norm), float(norm_type))
    return B.embedding(x, weight, padding_idx=int(pad))


def renorm_looked_up_rows(x: Any, weight: Any, max_norm: float, norm_type: float) -> None:
    """Scale, in place, the rows of `weight` that the ids `x` look up and whose
    `norm_type`-norm exceeds `max_norm` to norm ``max_norm`` (``max_norm / (norm +
    1e-7)``, PaddlePaddle's ``embedding_renorm_``); not recorded for autograd."""
    if current_mode() != "eager":
        raise ValueError("embedding: max_norm renormalizes the weight in place, which "
                         "fastop does in eager mode only (static mode got max_norm="
                         f"{max_norm})")
    table = weight.numpy()
    ids = np.unique(np.asarray(x.numpy() if hasattr(x, "numpy") else x).reshape(-1))
    norms = np.linalg.norm(table[ids], ord=norm_type, axis=1)
    over = norms > max_norm
    if over.any():
        scaled = table.copy()
        scaled[ids[over]] *= (max_norm / (norms[over] + 1e-7))[:, None].astype(table.dtype)
        with no_grad():
            weight.set_value(scaled)


def one_hot(x: Any, num_classes: int, name: str | None = None) -> Any:
    """float32 ``x.shape + [num_classes]``: 1 at each id of `x` (int, in ``[0,
    num_classes)``)."""
    return B.one_hot(x, num_classes=int(num_classes))


def gelu(x: Any, approximate: bool = False, name: str | None = None) -> Any:
    """``0.5 x (1 + erf(x / sqrt 2))``; `approximate`: the tanh form."""
    return B.gelu(x, approximate=bool(approximate))


def silu(x: Any, name: str | None = None) -> Any:
    """``x * sigmoid(x)``."""
    return B.silu(x)


def leaky_relu(x: Any, negative_slope: float = 0.01, name: str | None = None) -> Any:
    """``x`` where x > 0, ``negative_slope * x`` elsewhere."""
    return B.leaky_relu(x, negative_slope=float(negative_slope))


def softplus(x: Any, beta: float = 1, threshold: float = 20, name: str | None = None) -> Any:
    """``log(1 + exp(beta x)) / beta``, and x where ``beta x > threshold``."""
    return B.softplus(x, beta=float(beta), threshold=float(threshold))


def __getattr__(name: str):
    # conv1d/conv2d live in fastop.nn.conv, loaded on first use (see fastop.nn.__getattr__)
    if name in ("conv1d", "conv2d"):
        from fastop.nn import conv
        return getattr(conv, name)
    raise AttributeError(f"module 'fastop.nn.functional' has no attribute '{name}'")
