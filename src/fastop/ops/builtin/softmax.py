"""Built-in softmax ops (Cython kernels from :mod:`fastop._core.softmax`) and their
gradient rules.

``softmax log_softmax (x, axis=-1)``; backward kernels ``softmax_grad(y, dy, axis=)``
and ``log_softmax_grad(y, dy, axis=)``; the fused ``softmax_cross_entropy(logits,
label, ignore_index=-100) -> (loss, softmax)`` with integer labels of shape ``[N]`` or
``[N, 1]`` and loss ``[N, 1]`` (PaddlePaddle's convention), and its backward kernel
``softmax_cross_entropy_grad(label, softmax, dloss)``.

Rules: softmax → softmax_grad and log_softmax → log_softmax_grad (each one backward
kernel: ``grad_op``); cross-entropy → softmax_cross_entropy_grad for the loss (a kernel
rule), plus softmax_grad when a gradient flows into the softmax output too (rarely: the
composite rule then runs, getting None for an output no gradient reaches). Every backward op is
differentiable again (their rules use elementwise ops, sum and the backward ops
themselves), so double backward works through all of them.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from fastop._core import softmax as K
from fastop.ops.builtin._table import B

__all__ = ["register", "samples"]


def softmax_grad_grad_rule(y, dy, g, axis):
    # dx = y * (dy - s), s = sum(dy * y):  d/d(dy) = softmax_grad(y, g),
    # d/dy = g * (dy - s) - dy * sum(g * y)
    s = B.sum(B.multiply(dy, y), axis=axis, keepdim=True)
    gy = B.sum(B.multiply(g, y), axis=axis, keepdim=True)
    d_y = B.subtract(B.multiply(g, B.subtract(dy, s)), B.multiply(dy, gy))
    return d_y, B.softmax_grad(y, g, axis=axis)


def log_softmax_grad_grad_rule(y, dy, g, axis):
    # dx = dy - e * S, e = exp(y), S = sum(dy):  d/d(dy) = g - sum(g * e),
    # d/dy = -g * e * S
    ge = B.multiply(g, B.exp(y))
    d_dy = B.subtract(g, B.sum(ge, axis=axis, keepdim=True))
    d_y = B.neg(B.multiply(ge, B.sum(dy, axis=axis, keepdim=True)))
    return d_y, d_dy


def softmax_cross_entropy_grad_rule(label, softmax, dloss, dsoftmax, ignore_index):
    # dlogits = dloss * (softmax - onehot) + softmax_grad(softmax, dsoftmax); each
    # term only when its output gradient flows (None otherwise). PaddlePaddle drops
    # the second term; fastop keeps it, which double backward needs: the gradient of
    # softmax_cross_entropy_grad reaches the logits through the softmax output.
    dlogits = None
    if dloss is not None:
        dlogits = B.softmax_cross_entropy_grad(label, softmax, dloss,
                                               ignore_index=ignore_index)
    if dsoftmax is not None:
        through = B.softmax_grad(softmax, dsoftmax, axis=-1)
        dlogits = through if dlogits is None else B.add(dlogits, through)
    return dlogits, None


def softmax_cross_entropy_grad_grad_rule(label, softmax, dloss, g, ignore_index):
    # dlogits = r * (softmax - onehot) with r = dloss on kept rows, 0 on ignored ones:
    # d/d(softmax) = g * r, d/d(dloss) = sum(g * (softmax - onehot)) on kept rows.
    # Both come from this op itself: with softmax = 0 it gives -r * onehot, whose
    # row sums are exactly -r; with dloss = 1 it gives the kept rows' softmax - onehot.
    grad_op = B.softmax_cross_entropy_grad
    r = B.neg(B.sum(grad_op(label, B.full_like(softmax, fill_value=0.0), dloss,
                            ignore_index=ignore_index), axis=-1, keepdim=True))
    centered = grad_op(label, softmax, B.full_like(dloss, fill_value=1.0),
                       ignore_index=ignore_index)
    d_dloss = B.sum(B.multiply(g, centered), axis=-1, keepdim=True)
    return None, B.multiply(g, r), d_dloss


def register(registry) -> None:
    softmax_grad = registry.define_ckernel(
        "fastop::softmax_grad", K.softmax_grad, attrs={"axis": -1},
        doc="Backward of softmax: dx = y * (dy - sum(dy * y, axis)) for y = softmax(x).")
    softmax_grad.grad(needs=("y", "dy"))(softmax_grad_grad_rule)
    registry.define_ckernel(
        "fastop::softmax", K.softmax, attrs={"axis": -1},
        doc="exp(x - max) / sum(exp(x - max)) along axis (numerically stable)."
    ).grad_op(softmax_grad, needs=("out", "dout"))

    log_softmax_grad = registry.define_ckernel(
        "fastop::log_softmax_grad", K.log_softmax_grad, attrs={"axis": -1},
        doc="Backward of log_softmax: dx = dy - exp(y) * sum(dy, axis) for "
            "y = log_softmax(x).")
    log_softmax_grad.grad(needs=("y", "dy"))(log_softmax_grad_grad_rule)
    registry.define_ckernel(
        "fastop::log_softmax", K.log_softmax, attrs={"axis": -1},
        doc="(x - max) - log(sum(exp(x - max))) along axis (numerically stable)."
    ).grad_op(log_softmax_grad, needs=("out", "dout"))

    ce_grad = registry.define_ckernel(
        "fastop::softmax_cross_entropy_grad", K.softmax_cross_entropy_grad,
        attrs={"ignore_index": -100}, differentiable=("softmax", "dloss"),
        promotes=("softmax", "dloss"),
        doc="Backward of softmax_cross_entropy: dlogits = dloss * (softmax - "
            "onehot(label)), zero on ignored rows.")
    ce_grad.grad(needs=("label", "softmax", "dloss"))(softmax_cross_entropy_grad_grad_rule)
    registry.define_ckernel(
        "fastop::softmax_cross_entropy", K.softmax_cross_entropy,
        attrs={"ignore_index": -100}, differentiable=("logits",), promotes=("logits",),
        doc="Fused softmax + cross-entropy: loss [*, 1] = -log_softmax(logits)[label] and "
            "softmax [*, C] of logits [*, C]; integer labels [*] or [*, 1]; rows whose "
            "label is ignore_index get loss 0; other labels outside [0, C) are errors."
    ).grad_op(ce_grad, needs=("label", "softmax", "dloss"),
              otherwise=softmax_cross_entropy_grad_rule)


def samples() -> dict[str, list[Any]]:
    """opcheck's inputs for this family's ops: float32 and float64, each axis;
    cross-entropy with labels [N] and [N, 1], int64 and int32, an ignored row."""
    from fastop.ops.builtin._sampling import Values, sample   # tests and tools only
    v = Values(4)
    f32 = "float32"
    return {
        "fastop::softmax": [sample(v.normal(2, 3), axis=-1),
                            sample(v.normal(3, 2, 2, dtype=f32), axis=1)],
        "fastop::log_softmax": [sample(v.normal(2, 3), axis=0),
                                sample(v.normal(2, 4, dtype=f32), axis=-1)],
        "fastop::softmax_cross_entropy": [
            [v.normal(3, 3), np.array([2, 0, -100], dtype=np.int64)],
            [v.normal(4, 3, dtype=f32), np.array([[1], [0], [2], [1]], dtype=np.int32)],
            sample(v.normal(3, 4), np.array([3, 1, 0], dtype=np.int64), ignore_index=1)],
    }
