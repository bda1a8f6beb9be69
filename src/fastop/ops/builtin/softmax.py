"""Built-in softmax ops (Cython kernels from :mod:`fastop._core.softmax`) and their
gradient rules.

``softmax log_softmax (x, axis=-1)``; backward kernels ``softmax_grad(y, dy, axis=)``
and ``log_softmax_grad(y, dy, axis=)``; the fused ``softmax_cross_entropy(logits,
label, ignore_index=-100) -> (loss, softmax)`` with integer labels of shape ``[N]`` or
``[N, 1]`` and loss ``[N, 1]`` (PaddlePaddle's convention), and its backward kernel
``softmax_cross_entropy_grad(label, softmax, dloss)``.

Rules: softmax → softmax_grad, log_softmax → log_softmax_grad, cross-entropy →
softmax_cross_entropy_grad for the loss plus softmax_grad for a gradient flowing into
the softmax output (rarely used: the rule gets None for it, not zeros, so a training
step pays nothing for it). Every backward op is differentiable again (their rules use
elementwise ops, sum and the backward ops themselves), so double backward works
through all of them.
"""
from __future__ import annotations

from typing import Any

from fastop._core import softmax as _kernels

__all__ = ["register"]


def register(registry) -> None:
    def op(name: str) -> Any:
        return registry.get(f"fastop::{name}")

    softmax = registry.define_ckernel(
        "fastop::softmax", _kernels.softmax, attrs={"axis": -1},
        doc="exp(x - max) / sum(exp(x - max)) along axis (numerically stable).")

    @softmax.grad(needs=("out",))
    def _(out, dy, axis):
        return (op("softmax_grad")(out, dy, axis=axis),)

    log_softmax = registry.define_ckernel(
        "fastop::log_softmax", _kernels.log_softmax, attrs={"axis": -1},
        doc="(x - max) - log(sum(exp(x - max))) along axis (numerically stable).")

    @log_softmax.grad(needs=("out",))
    def _(out, dy, axis):
        return (op("log_softmax_grad")(out, dy, axis=axis),)

    softmax_grad = registry.define_ckernel(
        "fastop::softmax_grad", _kernels.softmax_grad, attrs={"axis": -1},
        doc="Backward of softmax: dx = y * (dy - sum(dy * y, axis)) for y = softmax(x).")

    @softmax_grad.grad(needs=("y", "dy"))
    def _(y, dy, g, axis):
        # dx = y * (dy - s), s = sum(dy * y):  d/d(dy) = softmax_grad(y, g),
        # d/dy = g * (dy - s) - dy * sum(g * y)
        mul, total = op("multiply"), op("sum")
        s = total(mul(dy, y), axis=axis, keepdim=True)
        gy = total(mul(g, y), axis=axis, keepdim=True)
        d_y = op("subtract")(mul(g, op("subtract")(dy, s)), mul(dy, gy))
        return d_y, op("softmax_grad")(y, g, axis=axis)

    log_softmax_grad = registry.define_ckernel(
        "fastop::log_softmax_grad", _kernels.log_softmax_grad, attrs={"axis": -1},
        doc="Backward of log_softmax: dx = dy - exp(y) * sum(dy, axis) for "
            "y = log_softmax(x).")

    @log_softmax_grad.grad(needs=("y", "dy"))
    def _(y, dy, g, axis):
        # dx = dy - e * S, e = exp(y), S = sum(dy):  d/d(dy) = g - sum(g * e),
        # d/dy = -g * e * S
        mul, total = op("multiply"), op("sum")
        e = op("exp")(y)
        ge = mul(g, e)
        d_dy = op("subtract")(g, total(ge, axis=axis, keepdim=True))
        d_y = op("neg")(mul(ge, total(dy, axis=axis, keepdim=True)))
        return d_y, d_dy

    ce = registry.define_ckernel(
        "fastop::softmax_cross_entropy", _kernels.softmax_cross_entropy,
        attrs={"ignore_index": -100}, differentiable=("logits",),
        doc="Fused softmax + cross-entropy: loss [*, 1] = -log_softmax(logits)[label] and "
            "softmax [*, C] of logits [*, C]; integer labels [*] or [*, 1]; rows whose "
            "label is ignore_index get loss 0; other labels outside [0, C) are errors.")

    @ce.grad(needs=("label", "softmax"), materialize_grads=False)
    def _(label, softmax, dloss, dsoftmax, ignore_index):
        # dlogits = dloss * (softmax - onehot) + softmax_grad(softmax, dsoftmax); each
        # term only when its output gradient flows (None otherwise). PaddlePaddle drops
        # the second term; fastop keeps it, which double backward needs: the gradient of
        # softmax_cross_entropy_grad reaches the logits through the softmax output.
        dlogits = None
        if dloss is not None:
            dlogits = op("softmax_cross_entropy_grad")(label, softmax, dloss,
                                                       ignore_index=ignore_index)
        if dsoftmax is not None:
            through = op("softmax_grad")(softmax, dsoftmax, axis=-1)
            dlogits = through if dlogits is None else op("add")(dlogits, through)
        return dlogits, None

    ce_grad = registry.define_ckernel(
        "fastop::softmax_cross_entropy_grad", _kernels.softmax_cross_entropy_grad,
        attrs={"ignore_index": -100}, differentiable=("softmax", "dloss"),
        doc="Backward of softmax_cross_entropy: dlogits = dloss * (softmax - "
            "onehot(label)), zero on ignored rows.")

    @ce_grad.grad(needs=("label", "softmax", "dloss"))
    def _(label, softmax, dloss, g, ignore_index):
        # dlogits = r * (softmax - onehot) with r = dloss on kept rows, 0 on ignored ones:
        # d/d(softmax) = g * r, d/d(dloss) = sum(g * (softmax - onehot)) on kept rows.
        # Both come from this op itself: with softmax = 0 it gives -r * onehot, whose
        # row sums are exactly -r; with dloss = 1 it gives the kept rows' softmax - onehot.
        grad_op, total, full_like = op("softmax_cross_entropy_grad"), op("sum"), op("full_like")
        r = op("neg")(total(grad_op(label, full_like(softmax, fill_value=0.0), dloss,
                                    ignore_index=ignore_index), axis=-1, keepdim=True))
        centered = grad_op(label, softmax, full_like(dloss, fill_value=1.0),
                           ignore_index=ignore_index)
        d_dloss = total(op("multiply")(g, centered), axis=-1, keepdim=True)
        return None, op("multiply")(g, r), d_dloss
