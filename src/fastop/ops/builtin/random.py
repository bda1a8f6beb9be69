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

from typing import Any

import numpy as np

from fastop._core import random as K
from fastop.ops.builtin._table import B

__all__ = ["register", "samples"]

ATTRS = {"p": 0.5, "mode": "upscale_in_train"}


def dropout_grad_rule(mask, dout, dmask, p, mode, seed):
    """dout through the saved mask, scaled as the forward (the bool mask takes none)."""
    return None if dout is None else B.dropout_grad(mask, dout, p=p, mode=mode)


def dropout_grad_grad_rule(mask, g, p, mode):
    """dropout_grad is linear in dout: its gradient is itself, on g."""
    return None, B.dropout_grad(mask, g, p=p, mode=mode)


def register(registry) -> None:
    registry.define_ckernel(
        "fastop::dropout", K.dropout, attrs={**ATTRS, "seed": 0}, differentiable=("x",),
        ordered=True,       # draws from the global random stream: in program order
        doc="Drop each element with probability p (mask False, out 0); kept ones are "
            "scaled by 1 / (1 - p) in mode 'upscale_in_train', kept as they are in "
            "'downscale_in_infer'. seed=0 draws a fresh mask on every call."
    ).grad(needs=("mask",), materialize_grads=False,
           reads={"x": ("mask",)})(dropout_grad_rule)
    registry.define_ckernel(
        "fastop::dropout_grad", K.dropout_grad, attrs=dict(ATTRS), differentiable=("dout",),
        doc="Backward of dropout: dx = dout * mask * scale (the forward's scale)."
    ).grad(needs=("mask",), reads={"dout": ("mask",)})(dropout_grad_grad_rule)


def samples() -> dict[str, list[Any]]:
    """opcheck's inputs. dropout's each with a nonzero seed, which fixes the mask (a
    function of the seed and the element's index), so the finite differences, the eager
    and the static run all see the same one: with seed=0 every kernel call draws a fresh
    mask and no check of a gradient or of eager against static could agree. float32 and
    float64, both modes. dropout_grad (called by dropout's rule, not its ``grad_op``)
    gets its own, with masks of its bool dtype."""
    from fastop.ops.builtin._sampling import Values, sample   # tests and tools only
    v = Values(9)
    f32 = "float32"
    mask = np.array([[True, False, True], [True, True, False]])
    return {
        "fastop::dropout": [
            sample(v.normal(3, 4), p=0.4, seed=11),
            sample(v.normal(2, 5, dtype=f32), p=0.25, mode="downscale_in_infer", seed=3),
            sample(v.normal(4), p=0.0, seed=5)],
        "fastop::dropout_grad": [
            sample(mask, v.normal(2, 3), p=0.25),
            sample(mask[0], v.normal(3, dtype=f32), p=0.5, mode="downscale_in_infer")],
    }
