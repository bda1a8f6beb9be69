"""Built-in random ops (Cython kernels from :mod:`fastop._core.random`) and their
gradient rules.

``dropout(x, p=0.5, mode="upscale_in_train", seed=0) -> (out, mask)``: the kernel draws
the mask from fastop's generator on every call (a static program gets a fresh mask on
every ``Executor.run``; ``fastop.seed`` makes runs reproducible; a nonzero ``seed``
fixes the mask). ``mask`` is bool and takes no gradient. ``dropout_grad(mask, dout, p,
mode) -> dx = dout * mask * scale`` (scale ``1 / (1 - p)`` in ``upscale_in_train``
mode, 1 in ``downscale_in_infer``).

Rules: dropout → dropout_grad (reading the saved mask only); dropout_grad →
dropout_grad of the incoming gradient (it is linear in dout), so double backward works.
"""
from __future__ import annotations

from fastop._core import random as _kernels

__all__ = ["register"]


def register(registry) -> None:
    attrs = {"p": 0.5, "mode": "upscale_in_train"}
    dropout = registry.define_ckernel(
        "fastop::dropout", _kernels.dropout, attrs={**attrs, "seed": 0},
        differentiable=("x",),
        doc="Drop each element with probability p (mask False, out 0); kept ones are "
            "scaled by 1 / (1 - p) in mode 'upscale_in_train', kept as they are in "
            "'downscale_in_infer'. seed=0 draws a fresh mask on every call.")
    dropout_grad_op = registry.define_ckernel(
        "fastop::dropout_grad", _kernels.dropout_grad, attrs=dict(attrs),
        differentiable=("dout",),
        doc="Backward of dropout: dx = dout * mask * scale (the forward's scale).")

    @dropout.grad(needs=("mask",), materialize_grads=False, reads={"x": ("mask",)})
    def dropout_grad(mask, dout, dmask, p, mode, seed):
        return (None if dout is None else dropout_grad_op(mask, dout, p=p, mode=mode),)

    @dropout_grad_op.grad(needs=("mask",), reads={"dout": ("mask",)})
    def dropout_grad_grad(mask, g, p, mode):
        return None, dropout_grad_op(mask, g, p=p, mode=mode)
