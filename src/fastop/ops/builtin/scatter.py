"""The built-in ``scatter`` op with a numpy kernel: PaddlePaddle's
``paddle.scatter(x, index, updates, overwrite=True)``.

Rows of x (along axis 0) are replaced by rows of `updates`: ``out[index[i]] =
updates[i]``. `index` is 1-D (then ``updates.shape == [len(index)] + x.shape[1:]``) or
0-D (one row: ``updates.shape == x.shape[1:]``), int32 or int64, each entry in
``[0, x.shape[0])``. With ``overwrite=True`` the last of repeated indices wins
(PaddlePaddle's CPU kernel writes in index order); with ``overwrite=False`` the indexed
rows are zeroed first and then every update is added, so repeated indices accumulate.

Rule (PaddlePaddle's ``scatter_grad``): x takes dout with the indexed rows zeroed (their
values were replaced), updates takes ``gather(dout, index)`` — for every entry of index,
so with ``overwrite=True`` a repeated index gives each of its updates the row's gradient,
as PaddlePaddle does, although only the last one was written. Composed of scatter and
gather, so it is differentiable again.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from fastop.ops.builtin._table import B

__all__ = ["register", "samples"]

DTYPES = ("int32", "int64", "float32", "float64")
INDEX_DTYPES = ("int32", "int64")


def scatter_meta(x, index, updates, overwrite):
    """x's meta, after checking index (0-D or 1-D integers) and the updates' shape."""
    if index.dtype.name not in INDEX_DTYPES:
        raise TypeError(f"fastop::scatter: index must be int32 or int64, got "
                        f"{index.dtype.name}")
    if len(x.shape) == 0:
        raise ValueError("fastop::scatter: x must have at least 1 dim (its rows are "
                         "replaced), got a 0-D x")
    if len(index.shape) > 1:
        raise ValueError(f"fastop::scatter: index must be 1-D or 0-D, got shape "
                         f"{list(index.shape)}")
    want = list(x.shape[1:]) if len(index.shape) == 0 else [index.shape[0], *x.shape[1:]]
    if len(updates.shape) != len(want) or any(
            a is not None and b is not None and a != b for a, b in zip(updates.shape, want)):
        raise ValueError(f"fastop::scatter: updates must have shape {want} (index of shape "
                         f"{list(index.shape)} into x of shape {list(x.shape)}), got "
                         f"{list(updates.shape)}")
    if updates.dtype != x.dtype:
        raise TypeError(f"fastop::scatter: updates must have x's dtype {x.dtype.name}, got "
                        f"{updates.dtype.name}")
    return x


def scatter_kernel(x, index, updates, overwrite):
    rows = index.reshape(-1)
    values = updates.reshape((rows.size,) + x.shape[1:])
    bad = (rows < 0) | (rows >= x.shape[0])
    if bad.any():
        raise ValueError(f"fastop::scatter: index holds {int(rows[bad][0])}, out of range for "
                         f"x with {x.shape[0]} rows (expected 0 <= index < {x.shape[0]})")
    out = x.copy()
    if overwrite:
        # the last occurrence of each row: first occurrences in the reversed index
        last = rows.size - 1 - np.unique(rows[::-1], return_index=True)[1]
        out[rows[last]] = values[last]
    else:
        out[rows] = 0
        np.add.at(out, rows, values)
    return out


def scatter_grad_rule(index, dout, overwrite):
    """dx: dout with the indexed rows zeroed; dupdates: the indexed rows of dout."""
    picked = B.gather(dout, index, axis=0)
    return (B.scatter(dout, index, B.full_like(picked, fill_value=0), overwrite=True), None,
            picked)


def register(registry) -> None:
    registry.define(
        "fastop::scatter", inputs=["x", "index", "updates"], attrs={"overwrite": True},
        meta=scatter_meta, kernels=dict.fromkeys(DTYPES, scatter_kernel),
        differentiable=("x", "updates"), promotes=("x",),
        doc="Rows of x along axis 0 replaced by updates at index (overwrite=False: the "
            "rows zeroed, then the updates added)."
    ).grad(needs=("index",), reads={"x": ("index",), "updates": ("index",)})(
        scatter_grad_rule)


def samples() -> dict[str, list[Any]]:
    """opcheck's inputs: float64, float32 and integers; 1-D and 0-D index, int32 and
    int64; repeated indices only with overwrite=False (with overwrite=True PaddlePaddle's
    rule gives every repeated update a gradient, which finite differences do not)."""
    from fastop.ops.builtin._sampling import Values, sample   # tests and tools only
    v = Values(7)
    f32 = "float32"
    return {
        "fastop::scatter": [
            sample(v.normal(4, 3), np.array([2, 0]), v.normal(2, 3)),
            sample(v.normal(4, 3), np.array([2, 1, 2, 0], "int32"), v.normal(4, 3),
                   overwrite=False),
            sample(v.normal(3, 2, dtype=f32), np.array([1, 1]), v.normal(2, 2, dtype=f32),
                   overwrite=False),
            sample(v.normal(3, 2), np.array(1), v.normal(2)),
            sample(np.arange(6).reshape(3, 2), np.array([2, 0]),
                   np.array([[7, 8], [9, 10]])),
        ],
    }
