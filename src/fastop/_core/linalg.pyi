"""Matrix-product kernels (Cython): matmul and fc = act(x @ w + b).

Each is a :class:`~fastop._core.kernel.CKernel`; call it on tensors or numpy arrays.
float32/float64 run on OpenBLAS (loaded on the first call); int32/int64 on a blocked loop.
"""
from fastop._core.kernel import CKernel

__all__ = ["matmul", "fc", "ACTIVATIONS"]

#: The activations fc fuses into its GEMM (name -> the code packed into the kernel's
#: attributes; "" for none): the one list of them, which ``fastop::fc``, ``nn.Linear``
#: fusion (``nn.Sequential``), ``nn.functional.linear`` and ``static.nn.fc`` read.
ACTIVATIONS: dict[str, int]

#: ``matmul(x, y, transpose_x=False, transpose_y=False)`` (PaddlePaddle semantics: the
#: flags transpose the last two dims; 1-D operands are vectors whose unit dim is dropped
#: from the result; batch dims broadcast).
matmul: CKernel


#: ``fc(x, w, b=None, activation="")`` = act(x @ w + b): x (..., K), w (K, N), b (N,);
#: activation '', 'tanh', 'sigmoid' or 'relu' (integers: '' or 'relu').
fc: CKernel
