"""Built-in embedding ops (Cython kernels from :mod:`fastop._core.embedding`, which run
gather's row copy and scatter-add) and their gradient rules.

``embedding(x, weight, padding_idx=-1)``: rows of ``weight [num_embeddings, dim]``
picked by the int ids ``x`` (each in ``[0, num_embeddings)``), zeros where an id is
``padding_idx`` (-1: none). ``embedding_grad(x, weight, dout, padding_idx=-1) ->
dweight``: the rows of ``dout`` added into zeros like ``weight`` at their ids, the
``padding_idx`` row left zero (padding never trains).

``one_hot(x, num_classes=)`` (numpy kernel): float32 ``x.shape + [num_classes]`` with a
1 at each id (each in ``[0, num_classes)``); not differentiable.

Rules: embedding → embedding_grad (``grad_op``; weight only; ids take no gradient);
embedding_grad → embedding of the incoming gradient (the scatter's adjoint is the
lookup), so double backward works.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from fastop._core import embedding as K
from fastop._core.storage import float32
from fastop.ops._registry import TensorMeta
from fastop.ops.builtin._table import B

__all__ = ["register", "samples"]


# -- embedding's backward kernel ------------------------------------------------------

def embedding_grad_grad_rule(x, weight, g, padding_idx):
    """The scatter-add is linear in dout; its adjoint is the lookup of g's rows."""
    return None, None, B.embedding(x, g, padding_idx=padding_idx)


# -- one_hot --------------------------------------------------------------------------

def one_hot_meta(x, num_classes):
    if num_classes < 1:
        raise ValueError(f"fastop::one_hot: num_classes must be >= 1, got {num_classes}")
    if x.dtype.name not in ("int32", "int64"):
        raise TypeError(f"fastop::one_hot: x must hold int32 or int64 ids, got "
                        f"{x.dtype.name}")
    return TensorMeta([*x.shape, num_classes], float32)


def one_hot_kernel(x, num_classes):
    if x.size and (x.min() < 0 or x.max() >= num_classes):
        raise ValueError(f"fastop::one_hot: each id must be in [0, {num_classes}), got "
                         f"ids in [{x.min()}, {x.max()}]")
    out = np.zeros((*x.shape, num_classes), dtype=np.float32)
    np.put_along_axis(out, x[..., None].astype(np.int64), 1.0, axis=-1)
    return out


def register(registry) -> None:
    embedding_grad = registry.define_ckernel(
        "fastop::embedding_grad", K.embedding_grad, attrs={"padding_idx": -1},
        differentiable=("dout",),
        doc="Backward of embedding: zeros like weight with dout's rows added at their "
            "ids; the padding_idx row stays zero.")
    embedding_grad.grad(needs=("x", "weight"), reads={"dout": ("x",)})(
        embedding_grad_grad_rule)
    registry.define_ckernel(
        "fastop::embedding", K.embedding, attrs={"padding_idx": -1},
        differentiable=("weight",),
        doc="Rows of weight [num_embeddings, dim] at the int ids x (out: x.shape + "
            "[dim]); rows whose id is padding_idx (-1: none) are zeros."
    ).grad_op(embedding_grad, needs=("x", "weight", "dout"), reads={"weight": ("x",)})
    registry.define(
        "fastop::one_hot", inputs=["x"], attrs={"num_classes": int}, differentiable=(),
        meta=one_hot_meta, kernels=dict.fromkeys(("int32", "int64"), one_hot_kernel),
        doc="float32 x.shape + [num_classes]: 1 at each int id of x (each in [0, "
            "num_classes)), 0 elsewhere.")


def samples() -> dict[str, list[Any]]:
    """opcheck's inputs: int64 and int32 ids (repeated ids: their rows' gradients add
    up), float32 and float64 tables, with and without a padding row. embedding_grad,
    checked through embedding's double gradient, gets its own too (its numpy twin is
    compared on them)."""
    from fastop.ops.builtin._sampling import Values, sample   # tests and tools only
    v = Values(8)
    ids = np.array([[0, 3], [3, 1]])
    return {
        "fastop::embedding": [
            sample(ids, v.normal(4, 3), padding_idx=1),
            sample(ids.astype("int32"), v.normal(5, 2, dtype="float32")),
            sample(np.array([2, 2, 0]), v.normal(3, 4), padding_idx=0)],
        "fastop::embedding_grad": [
            sample(ids, v.normal(4, 3), v.normal(2, 2, 3), padding_idx=1),
            sample(ids.astype("int32"), v.normal(5, 2, dtype="float32"),
                   v.normal(2, 2, 2, dtype="float32"))],
        "fastop::one_hot": [sample(ids, num_classes=4),
                            sample(np.array([0, 2, 1], "int32"), num_classes=3)],
    }
