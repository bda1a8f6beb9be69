"""Layer normalization kernels (Cython): forward with the row statistics, and backward
from them. float32 and float64.

Each is a :class:`~fastop._core.kernel.CKernel`; call it on tensors or numpy arrays.
"""
from fastop._core.kernel import CKernel

__all__ = ["layer_norm", "layer_norm_grad"]

#: ``layer_norm(x, weight?, bias?, epsilon=1e-5, begin_norm_axis=1) -> (out, mean,
#: rstd)``: each row (the dims from begin_norm_axis on) as (x - mean) * rstd * weight +
#: bias; mean and rstd keep x's leading dims, 1 in the normalized ones.
layer_norm: CKernel
#: ``layer_norm_grad(x, mean, rstd, dout, weight?, begin_norm_axis=1) -> (dx, dweight,
#: dbias)``.
layer_norm_grad: CKernel
