"""Type stubs for fastop._core.optim (Cython): in-place optimizer updates."""
from fastop._core.kernel import CKernel
from fastop._core.storage import DenseTensor

sgd: CKernel
"""sgd_update(param, grad, learning_rate) -> (param_out,); attrs: weight_decay."""
momentum: CKernel
"""momentum_update(param, grad, velocity, learning_rate) -> (param_out, velocity_out);
attrs: momentum, use_nesterov, weight_decay."""
adam: CKernel
"""adam_update(param, grad, learning_rate, moment1, moment2, beta1_pow, beta2_pow)
-> (param_out, moment1_out, moment2_out, beta1_pow_out, beta2_pow_out);
attrs: beta1, beta2, epsilon, weight_decay."""

def sgd_step(param: DenseTensor, grad: DenseTensor, lr: float,
             weight_decay: float = 0.0) -> None: ...
def momentum_step(param: DenseTensor, grad: DenseTensor, velocity: DenseTensor, lr: float,
                  momentum: float = 0.9, use_nesterov: bool = False,
                  weight_decay: float = 0.0) -> None: ...
def adam_step(param: DenseTensor, grad: DenseTensor, moment1: DenseTensor,
              moment2: DenseTensor, lr: float, beta1: float, beta2: float, epsilon: float,
              weight_decay: float, beta1_pow: float, beta2_pow: float) -> None: ...
