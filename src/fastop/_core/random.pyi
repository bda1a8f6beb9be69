"""Random kernels (Cython): dropout with its mask drawn in the kernel from fastop's
counter-based generator, and dropout's backward. float32 and float64.

Each is a :class:`~fastop._core.kernel.CKernel`; call it on tensors or numpy arrays.
"""
from fastop._core.kernel import CKernel

__all__ = ["dropout", "dropout_grad", "seed", "MODES"]

#: The dropout conventions: ``"upscale_in_train"`` (kept elements scaled by
#: ``1 / (1 - p)``) and ``"downscale_in_infer"`` (kept as they are).
MODES: tuple[str, str]

def seed(value: int) -> None:
    """Restart the global stream from `value` (a non-negative int below 2**64)."""

#: ``dropout(x, p=0.5, mode="upscale_in_train", seed=0) -> (out, mask bool)``: each
#: element dropped with probability p; seed=0 draws fresh bits on every call, another
#: seed the same mask every time.
dropout: CKernel
#: ``dropout_grad(mask, dout, p=0.5, mode="upscale_in_train") -> dx = mask * dout *
#: scale``.
dropout_grad: CKernel
