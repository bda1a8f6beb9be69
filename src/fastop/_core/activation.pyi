"""Activation kernels (Cython): gelu, silu, leaky_relu, softplus and their backward forms
``<name>_grad(x, dout, ...) -> dout * f'(x)``. float32 and float64, any layout.

Each is a :class:`~fastop._core.kernel.CKernel`; call it on tensors or numpy arrays.
"""
from fastop._core.kernel import CKernel

__all__ = ["gelu", "gelu_grad", "silu", "silu_grad", "leaky_relu", "leaky_relu_grad",
           "softplus", "softplus_grad"]

#: ``gelu(x, approximate=False)``: 0.5 x (1 + erf(x / sqrt 2)), or the tanh form.
gelu: CKernel
gelu_grad: CKernel
#: ``silu(x)``: x * sigmoid(x).
silu: CKernel
silu_grad: CKernel
#: ``leaky_relu(x, negative_slope=0.01)``: x if x > 0 else negative_slope * x.
leaky_relu: CKernel
leaky_relu_grad: CKernel
#: ``softplus(x, beta=1, threshold=20)``: log(1 + exp(beta x)) / beta, x above the
#: threshold.
softplus: CKernel
softplus_grad: CKernel
