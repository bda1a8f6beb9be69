"""Built-in embedding ops (Cython kernels from :mod:`fastop._core.embedding`, which run
gather's row copy and scatter-add) and their gradient rules.

``embedding(x, weight, padding_idx=-1)``: rows of ``weight [num_embeddings, dim]``
picked by the int ids ``x`` (each in ``[0, num_embeddings)``), zeros where an id is
``padding_idx`` (-1: none). ``embedding_grad(x, weight, dout, padding_idx=-1) ->
dweight``: the rows of ``dout`` added into zeros like ``weight`` at their ids, the
``padding_idx`` row left zero (padding never trains).

Rules: embedding → embedding_grad (weight only; ids take no gradient); embedding_grad
→ embedding of the incoming gradient (the scatter's adjoint is the lookup), so double
backward works.
"""
from __future__ import annotations

from fastop._core import embedding as _kernels

__all__ = ["register"]


def register(registry) -> None:
    embedding = registry.define_ckernel(
        "fastop::embedding", _kernels.embedding, attrs={"padding_idx": -1},
        differentiable=("weight",),
        doc="Rows of weight [num_embeddings, dim] at the int ids x (out: x.shape + "
            "[dim]); rows whose id is padding_idx (-1: none) are zeros.")
    embedding_grad_op = registry.define_ckernel(
        "fastop::embedding_grad", _kernels.embedding_grad, attrs={"padding_idx": -1},
        differentiable=("dout",),
        doc="Backward of embedding: zeros like weight with dout's rows added at their "
            "ids; the padding_idx row stays zero.")

    @embedding.grad(needs=("x", "weight"), reads={"weight": ("x",)})
    def embedding_grad(x, weight, dout, padding_idx):
        return None, embedding_grad_op(x, weight, dout, padding_idx=padding_idx)

    @embedding_grad_op.grad(needs=("x", "weight"), reads={"dout": ("x",)})
    def embedding_grad_grad(x, weight, g, padding_idx):
        return None, None, embedding(x, g, padding_idx=padding_idx)
