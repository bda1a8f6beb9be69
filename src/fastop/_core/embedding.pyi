"""Embedding kernels (Cython, on gather's C functions): lookup of table rows by int ids
with an optional padding row, and its scatter-add gradient.

Each is a :class:`~fastop._core.kernel.CKernel`; call it on tensors or numpy arrays.
"""
from fastop._core.kernel import CKernel

__all__ = ["embedding", "embedding_grad"]

#: ``embedding(x ids, weight [V, D], padding_idx=-1) -> x.shape + [D]``; ids must be in
#: [0, V); rows of padding_idx are zeros.
embedding: CKernel
#: ``embedding_grad(x, weight, dout, padding_idx=-1) -> dweight`` (padding row zero).
embedding_grad: CKernel
