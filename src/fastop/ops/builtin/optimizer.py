"""Built-in optimizer ops: the updates ``fastop::sgd_update``, ``momentum_update``,
``adam_update``, ``adamw_update`` and ``squared_l2_norm`` (the gradient clipping's
reduction); Cython kernels in :mod:`fastop._core.optim`.

Inputs follow PaddlePaddle's update ops (the learning rate is a one-element tensor, so a
static program can keep it in a variable), plus an optional trailing ``grad_scale``
(one element) that multiplies the gradient: clipping by norm is folded into the update
instead of rewriting the gradient first. Weight decay is fused too
(``regularization_method`` ``"l2_decay"``/``"l1_decay"``, AdamW's decoupled ``coeff``).
Outputs are the updated parameter and state; called with ``out=`` the same tensors, the
update happens in place — that is how the optimizers use them in both modes. The
updates are not differentiable.
"""
from __future__ import annotations

from typing import Any

from fastop._core import optim as K
from fastop.ops.builtin._table import B

__all__ = ["register", "samples"]

_DECAY = {"regularization_method": "", "regularization_coeff": 0.0}
_DECAY_DOC = ("g = grad_scale * grad + regularization_coeff * (param for 'l2_decay', "
              "sign(param) for 'l1_decay')")


def squared_l2_norm_grad_rule(x, dout):
    return B.multiply(B.multiply(x, 2.0), dout)


def register(registry) -> None:
    registry.define_ckernel(
        "fastop::sgd_update", K.sgd, attrs=dict(_DECAY), differentiable=(),
        doc=f"param_out = param - lr * g, {_DECAY_DOC}")
    registry.define_ckernel(
        "fastop::momentum_update", K.momentum,
        attrs={"momentum": 0.9, "use_nesterov": False, **_DECAY}, differentiable=(),
        doc="velocity_out = momentum * velocity + g; param_out = param - lr * "
            f"(g + momentum * velocity_out if use_nesterov else velocity_out), {_DECAY_DOC}")
    registry.define_ckernel(
        "fastop::adam_update", K.adam,
        attrs={"beta1": 0.9, "beta2": 0.999, "epsilon": 1e-8, **_DECAY}, differentiable=(),
        doc="Adam with bias correction through beta1_pow/beta2_pow (b^t, starting at b) "
            f"on {_DECAY_DOC}")
    registry.define_ckernel(
        "fastop::adamw_update", K.adamw,
        attrs={"beta1": 0.9, "beta2": 0.999, "epsilon": 1e-8, "coeff": 0.01,
               "with_decay": True},
        differentiable=(),
        doc="AdamW: param = param * (1 - lr * coeff) (when with_decay) followed by "
            "adam_update's step on grad_scale * grad")
    registry.define_ckernel(
        "fastop::squared_l2_norm", K.squared_l2_norm,
        doc="out = [sum(x * x)], shape [1] (gradient clipping by norm reads it)"
    ).grad(needs=("x",))(squared_l2_norm_grad_rule)


def samples() -> dict[str, list[Any]]:
    """opcheck's inputs for this family's ops: float32 and float64 parameters, with and
    without grad_scale, each weight decay, Nesterov momentum, AdamW without decay."""
    from fastop.ops.builtin._sampling import Values, sample   # tests and tools only
    v = Values(6)
    f32 = "float32"

    def lr(dtype: str = "float64") -> Any:
        return v.positive(1, dtype=dtype) * 0.1

    def adam_state(*shape: int, dtype: str = "float64") -> list[Any]:
        """moment1, moment2, beta1_pow, beta2_pow."""
        return [v.normal(*shape, dtype=dtype), v.positive(*shape, dtype=dtype),
                v.positive(1, dtype=dtype) * 0.5, v.positive(1, dtype=dtype) * 0.5]

    return {
        "fastop::sgd_update": [
            [v.normal(2, 3), v.normal(2, 3), lr()],
            sample(v.away(4, dtype=f32), v.normal(4, dtype=f32), lr(f32),
                   v.positive(1, dtype=f32), regularization_method="l1_decay",
                   regularization_coeff=0.01)],
        "fastop::momentum_update": [
            [v.normal(2, 3), v.normal(2, 3), v.normal(2, 3), lr()],
            sample(v.normal(4, dtype=f32), v.normal(4, dtype=f32), v.normal(4, dtype=f32),
                   lr(f32), v.positive(1, dtype=f32), momentum=0.8, use_nesterov=True,
                   regularization_method="l2_decay", regularization_coeff=0.01)],
        "fastop::adam_update": [
            [v.normal(2, 3), v.normal(2, 3), lr(), *adam_state(2, 3)],
            sample(v.normal(4, dtype=f32), v.normal(4, dtype=f32), lr(f32),
                   *adam_state(4, dtype=f32), v.positive(1, dtype=f32), beta1=0.8,
                   regularization_method="l2_decay", regularization_coeff=0.01)],
        "fastop::adamw_update": [
            [v.normal(2, 3), v.normal(2, 3), lr(), *adam_state(2, 3)],
            sample(v.normal(4, dtype=f32), v.normal(4, dtype=f32), lr(f32),
                   *adam_state(4, dtype=f32), None, coeff=0.1, with_decay=False)],
        "fastop::squared_l2_norm": [[v.normal(2, 3)], [v.normal(5, dtype=f32)]],
    }
