"""Softmax kernels (Cython): softmax, log_softmax, their backward kernels, and fused
softmax + cross-entropy with integer labels. float32 and float64.

Each is a :class:`~fastop._core.kernel.CKernel`; call it on tensors or numpy arrays.
"""
from fastop._core.kernel import CKernel

__all__ = ["softmax", "log_softmax", "softmax_grad", "log_softmax_grad",
           "softmax_cross_entropy", "softmax_cross_entropy_grad"]

#: ``softmax(x, axis=-1)``: ``exp(x - max) / sum(exp(x - max))`` along axis.
softmax: CKernel
#: ``log_softmax(x, axis=-1)``: ``(x - max) - log(sum(exp(x - max)))``.
log_softmax: CKernel
#: ``softmax_grad(y, dy, axis=-1) -> dx = y * (dy - sum(dy * y, axis))``.
softmax_grad: CKernel
#: ``log_softmax_grad(y, dy, axis=-1) -> dx = dy - exp(y) * sum(dy, axis)``.
log_softmax_grad: CKernel
#: ``softmax_cross_entropy(logits [*, C], label [*] or [*, 1] int32/int64,
#: ignore_index=-100) -> (loss [*, 1], softmax [*, C])``; a label outside
#: ``[0, C)`` (other than ignore_index) raises ValueError naming the op.
softmax_cross_entropy: CKernel
#: ``softmax_cross_entropy_grad(label, softmax, dloss [*, 1], ignore_index=-100)
#: -> dlogits = dloss * (softmax - onehot(label))``.
softmax_cross_entropy_grad: CKernel
