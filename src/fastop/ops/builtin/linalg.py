"""Built-in linalg ops: ``fastop::matmul`` and ``fastop::fc`` (Cython kernels from
:mod:`fastop._core.linalg`) with their composite gradient rules.

The rules are written with built-in ops (``matmul`` with transpose flags, ``reshape``,
``sum``, ``sum_to_shape``, ``<act>_grad``), so they work in eager and static mode and are
themselves differentiable. They compute only the gradients asked for
(``needs_input_grad``): for a first layer's input, that saves a GEMM.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from fastop._core import linalg as K
from fastop.ops.builtin._table import B
from fastop.ops.builtin.elementwise import shape_attr

__all__ = ["register", "samples"]


def _reduce_to(g: Any, matrix_shape: list[int], shape: list[int]) -> Any:
    """The gradient `g` of an operand of `shape` that matmul used as `matrix_shape`
    (a 1-D operand given its unit dim) and broadcast (batch dims): summed over the
    batch dims, then reshaped back to `shape`."""
    g_shape = shape_attr(g.shape)
    if g_shape == shape:
        return g
    known = -1 not in g_shape and -1 not in shape
    if known and _prod(g_shape) == _prod(shape):
        return B.reshape(g, shape=shape)
    if g_shape != matrix_shape:
        g = B.sum_to_shape(g, shape=matrix_shape)
    return g if matrix_shape == shape else B.reshape(g, shape=shape)


def _prod(shape: list[int]) -> int:
    out = 1
    for d in shape:
        out *= d
    return out


def matmul_grad_rule(x, y, dout, transpose_x, transpose_y, needs_input_grad=None):
    """dx, dy of out = op(x) @ op(y): dx = dout · op(y)ᵀ, dy = op(x)ᵀ · dout, each
    transposed back when its operand was, then summed over broadcast batch dims."""
    want_x, want_y = needs_input_grad or (True, True)
    x_shape, y_shape = shape_attr(x.shape), shape_attr(y.shape)
    x_matrix, y_matrix = x_shape, y_shape
    if len(x_shape) == 1 or len(y_shape) == 1:
        # Give 1-D operands, and the product, back the unit dim matmul dropped.
        out_shape = shape_attr(dout.shape)
        if len(y_shape) == 1:
            out_shape.append(1)
            y_matrix = [y_shape[0], 1]
            y = B.reshape(y, shape=y_matrix)
        if len(x_shape) == 1:
            out_shape.insert(len(out_shape) - 1, 1)
            x_matrix = [1, x_shape[0]]
            x = B.reshape(x, shape=x_matrix)
        dout = B.reshape(dout, shape=out_shape)
    tx = transpose_x and len(x_shape) > 1
    ty = transpose_y and len(y_shape) > 1
    mm = B.matmul
    dx = dy = None
    if not tx and not ty:
        dx = want_x and mm(dout, y, transpose_y=True)
        dy = want_y and mm(x, dout, transpose_x=True)
    elif tx and not ty:
        dx = want_x and mm(y, dout, transpose_y=True)
        dy = want_y and mm(x, dout)
    elif not tx:
        dx = want_x and mm(dout, y)
        dy = want_y and mm(dout, x, transpose_x=True)
    else:
        dx = want_x and mm(y, dout, transpose_x=True, transpose_y=True)
        dy = want_y and mm(dout, x, transpose_x=True, transpose_y=True)
    return (_reduce_to(dx, x_matrix, x_shape) if want_x else None,
            _reduce_to(dy, y_matrix, y_shape) if want_y else None)


def fc_grad_rule(x, w, b, out, dout, activation, needs_input_grad=None):
    """dz = act'(out)·dout, dx = dz · wᵀ, dw = xᵀ · dz (rows of all leading dims),
    db = Σ_rows dz."""
    want_x, want_w, want_b = needs_input_grad or (True, True, True)
    dz = getattr(B, f"{activation}_grad")(out, dout) if activation else dout
    k, n = shape_attr(w.shape)
    dx = B.matmul(dz, w, transpose_y=True) if want_x else None
    x2, dz2 = x, dz
    if len(x.shape) != 2:
        x2 = B.reshape(x, shape=[-1, k])
        dz2 = B.reshape(dz, shape=[-1, n])
    dw = B.matmul(x2, dz2, transpose_x=True) if want_w else None
    db = None if b is None or not want_b else B.sum(dz2, axis=0)
    return dx, dw, db


def register(registry) -> None:
    registry.define_ckernel(
        "fastop::matmul", K.matmul,
        attrs={"transpose_x": False, "transpose_y": False},
        doc="Matrix product of the last two dims (transposed as the flags say); a 1-D "
            "x is a row and a 1-D y a column vector; batch dims broadcast."
    ).grad(needs=("x", "y"), reads={"x": ("y",), "y": ("x",)})(matmul_grad_rule)
    registry.define_ckernel(
        "fastop::fc", K.fc, attrs={"activation": ""},
        doc="act(x @ w + b) for x (..., K), w (K, N), optional b (N,); activation one "
            f"of {list(K.ACTIVATIONS)}; bias and activation fused into the GEMM."
    ).grad(needs=("x", "w", "b", "out"),
           reads={"x": ("w", "out"), "w": ("x", "out"), "b": ("out",)})(fc_grad_rule)


def samples() -> dict[str, list[Any]]:
    """opcheck's inputs for this family's ops: float32 and float64; matmul with each
    transpose flag, 1-D operands, broadcast batch dims and integers; fc with and without bias,
    with each fused activation (relu's inputs kept away from 0) and batch dims."""
    from fastop.ops.builtin._sampling import Values, sample   # tests and tools only
    v = Values(3)
    f32 = "float32"
    return {
        "fastop::matmul": [[v.normal(2, 3), v.normal(3, 4)],
                           sample(v.normal(3, 2), v.normal(4, 3), transpose_x=True,
                                  transpose_y=True),
                           sample(v.normal(2, 3, dtype=f32), v.normal(4, 3, dtype=f32),
                                  transpose_y=True),
                           [v.normal(3), v.normal(2, 3, 4)],
                           [v.normal(2, 2, 3, dtype=f32), v.normal(3, dtype=f32)],
                           [np.arange(6).reshape(2, 3), np.arange(-6, 6).reshape(3, 4)]],
        "fastop::fc": [sample(v.normal(2, 3), v.normal(3, 4), v.normal(4), activation="tanh"),
                       sample(v.normal(2, 3, dtype=f32), v.normal(3, 2, dtype=f32), None,
                              activation="sigmoid"),
                       [v.normal(2, 2, 3), v.normal(3, 4), v.normal(4)],
                       sample(np.eye(3), v.away(3, 4), v.normal(4) * 0.05,
                              activation="relu")],
    }
