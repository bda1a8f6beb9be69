"""Type stubs for fastop._core.optim (Cython): in-place optimizer updates with fused
weight decay and gradient scale, and the squared L2 norm used by gradient clipping."""
from fastop._core.kernel import CKernel

DECAY_METHODS: dict[str, int]

sgd: CKernel
"""sgd_update(param, grad, learning_rate, grad_scale?) -> (param_out,);
attrs: regularization_method, regularization_coeff."""
momentum: CKernel
"""momentum_update(param, grad, velocity, learning_rate, grad_scale?)
-> (param_out, velocity_out); attrs: momentum, use_nesterov, regularization_method,
regularization_coeff."""
adam: CKernel
"""adam_update(param, grad, learning_rate, moment1, moment2, beta1_pow, beta2_pow,
grad_scale?) -> (param_out, moment1_out, moment2_out, beta1_pow_out, beta2_pow_out);
attrs: beta1, beta2, epsilon, regularization_method, regularization_coeff."""
adamw: CKernel
"""adamw_update(<adam_update's inputs>) -> <adam_update's outputs>; attrs: beta1, beta2,
epsilon, coeff, with_decay (decoupled weight decay)."""
squared_l2_norm: CKernel
"""squared_l2_norm(x) -> (out,): [sum(x * x)]."""
