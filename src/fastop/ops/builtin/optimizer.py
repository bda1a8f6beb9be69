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
from fastop._core import optim
from fastop.ops.builtin._table import B

_DECAY = {"regularization_method": "", "regularization_coeff": 0.0}
_DECAY_DOC = ("g = grad_scale * grad + regularization_coeff * (param for 'l2_decay', "
              "sign(param) for 'l1_decay')")


def squared_l2_norm_grad(x, dout):
    return B.multiply(B.multiply(x, 2.0), dout)


def register(registry) -> None:
    registry.define_ckernel(
        "fastop::sgd_update", optim.sgd, attrs=dict(_DECAY), differentiable=(),
        doc=f"param_out = param - lr * g, {_DECAY_DOC}")
    registry.define_ckernel(
        "fastop::momentum_update", optim.momentum,
        attrs={"momentum": 0.9, "use_nesterov": False, **_DECAY}, differentiable=(),
        doc="velocity_out = momentum * velocity + g; param_out = param - lr * "
            f"(g + momentum * velocity_out if use_nesterov else velocity_out), {_DECAY_DOC}")
    registry.define_ckernel(
        "fastop::adam_update", optim.adam,
        attrs={"beta1": 0.9, "beta2": 0.999, "epsilon": 1e-8, **_DECAY}, differentiable=(),
        doc="Adam with bias correction through beta1_pow/beta2_pow (b^t, starting at b) "
            f"on {_DECAY_DOC}")
    registry.define_ckernel(
        "fastop::adamw_update", optim.adamw,
        attrs={"beta1": 0.9, "beta2": 0.999, "epsilon": 1e-8, "coeff": 0.01,
               "with_decay": True},
        differentiable=(),
        doc="AdamW: param = param * (1 - lr * coeff) (when with_decay) followed by "
            "adam_update's step on grad_scale * grad")
    registry.define_ckernel(
        "fastop::squared_l2_norm", optim.squared_l2_norm,
        doc="out = [sum(x * x)], shape [1] (gradient clipping by norm reads it)"
    ).grad(needs=("x",))(squared_l2_norm_grad)
