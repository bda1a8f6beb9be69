"""Built-in softmax ops (Cython kernels from :mod:`fastop._core.softmax`) and their
gradient rules.

``softmax log_softmax (x, axis=-1)``; backward kernels ``softmax_grad(y, dy, axis=)``
and ``log_softmax_grad(y, dy, axis=)``; the fused ``softmax_cross_entropy(logits,
label, ignore_index=-100) -> (loss, softmax)`` with integer labels of shape ``[N]`` or
``[N, 1]`` and loss ``[N, 1]`` (PaddlePaddle's convention), and its backward kernel
``softmax_cross_entropy_grad(label, softmax, dloss)``.

Rules: softmax → softmax_grad, log_softmax → log_softmax_grad, cross-entropy →
softmax_cross_entropy_grad (through the loss only: the softmax output is auxiliary, as
in PaddlePaddle). softmax_grad and log_softmax_grad are differentiable again (their
rules use elementwise ops and sum); softmax_cross_entropy_grad is not.
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

    @ce.grad(needs=("label", "softmax"))
    def _(label, softmax, dloss, dsoftmax, ignore_index):
        # As in PaddlePaddle, the softmax output is auxiliary: only the loss carries a
        # gradient (engines pass zeros for dsoftmax; adding softmax_grad of zeros
        # would cost two passes per step). Differentiate fastop::softmax instead.
        return op("softmax_cross_entropy_grad")(label, softmax, dloss,
                                                ignore_index=ignore_index), None

    registry.define_ckernel(
        "fastop::softmax_cross_entropy_grad", _kernels.softmax_cross_entropy_grad,
        attrs={"ignore_index": -100}, differentiable=(),
        doc="Backward of softmax_cross_entropy: dlogits = dloss * (softmax - "
            "onehot(label)), zero on ignored rows.")
