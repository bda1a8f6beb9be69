"""Built-in optimizer update ops: ``fastop::sgd_update``, ``momentum_update``,
``adam_update`` (Cython kernels in :mod:`fastop._core.optim`).

Inputs follow PaddlePaddle's update ops (the learning rate is a one-element tensor, so a
static program can keep it in a variable). Outputs are the updated parameter and state;
called with ``out=`` the same tensors, the update happens in place — that is how static
``minimize`` appends them. They are not differentiable.
"""
from fastop._core import optim


def register(registry) -> None:
    registry.define_ckernel(
        "fastop::sgd_update", optim.sgd, attrs={"weight_decay": 0.0},
        differentiable=(),
        doc="param_out = param - lr * (grad + weight_decay * param)")
    registry.define_ckernel(
        "fastop::momentum_update", optim.momentum,
        attrs={"momentum": 0.9, "use_nesterov": False, "weight_decay": 0.0},
        differentiable=(),
        doc="velocity_out = momentum * velocity + g; param_out = param - lr * "
            "(g + momentum * velocity_out if use_nesterov else velocity_out), "
            "g = grad + weight_decay * param")
    registry.define_ckernel(
        "fastop::adam_update", optim.adam,
        attrs={"beta1": 0.9, "beta2": 0.999, "epsilon": 1e-8, "weight_decay": 0.0},
        differentiable=(),
        doc="Adam with bias correction through beta1_pow/beta2_pow (b^t, starting at b) "
            "and L2 weight decay added to the gradient")
