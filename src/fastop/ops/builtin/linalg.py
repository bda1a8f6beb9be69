"""Built-in linalg ops: ``fastop::matmul`` and ``fastop::fc`` (Cython kernels from
:mod:`fastop._core.linalg`) with their composite gradient rules.

The rules are written with registered ops (``fastop::matmul`` with transpose flags,
``fastop::reshape``, ``fastop::sum``, ``fastop::sum_to_shape``, ``fastop::<act>_grad``),
looked up when a rule runs, so they work in eager and static mode and are themselves
differentiable.
"""
from __future__ import annotations

from typing import Any

from fastop._core import linalg as _kernels
from fastop.ops._dispatch import current_mode

__all__ = ["register"]


def register(registry) -> None:
    matmul = registry.define_ckernel(
        "fastop::matmul", _kernels.matmul,
        attrs={"transpose_x": False, "transpose_y": False},
        doc="Matrix product of the last two dims (transposed as the flags say); a 1-D "
            "x is a row and a 1-D y a column vector; batch dims broadcast.")

    @matmul.grad(needs=("x", "y"), reads={"x": ("y",), "y": ("x",)})
    def _(x, y, dout, transpose_x, transpose_y):
        return _matmul_grad(registry, x, y, dout, transpose_x, transpose_y)

    fc = registry.define_ckernel(
        "fastop::fc", _kernels.fc, attrs={"activation": ""},
        doc="act(x @ w + b) for x (..., K), w (K, N), optional b (N,); activation one "
            "of '', 'tanh', 'sigmoid', 'relu'; bias and activation fused into the GEMM.")

    @fc.grad(needs=("x", "w", "b", "out"),
             reads={"x": ("w", "out"), "w": ("x", "out"), "b": ("out",)})
    def _(x, w, b, out, dout, activation):
        return _fc_grad(registry, x, w, b, out, dout, activation)


def _dims(shape: Any) -> list[int]:
    """A shape as a list for reshape, unknown dims as -1."""
    return [-1 if d is None or d < 0 else int(d) for d in shape]


def _reduce_to(registry, g: Any, shape: list[int]) -> Any:
    """The gradient `g` of a value of `shape` that was broadcast (batch dims) or given a
    unit dim (1-D matmul operands): summed or reshaped back to `shape`."""
    g_shape = _dims(g.shape)
    if g_shape == shape:
        return g
    known = -1 not in g_shape and -1 not in shape
    if known and _prod(g_shape) == _prod(shape):
        return registry.get("fastop::reshape")(g, shape=shape)
    return registry.get("fastop::sum_to_shape")(g, shape=shape)


def _prod(shape: list[int]) -> int:
    out = 1
    for d in shape:
        out *= d
    return out


def _wants_grad(value: Any) -> bool:
    """False for an eager value marked stop_gradient (data, frozen weights): no gradient
    of it is ever asked for, and for a first layer's input skipping it saves a GEMM.
    Static graphs compute every gradient: a data variable may be a ``gradients()``
    target, and the executor prunes gradient ops nobody reads."""
    return current_mode() != "eager" or not getattr(value, "stop_gradient", False)


def _matmul_grad(registry, x, y, dout, transpose_x: bool, transpose_y: bool):
    """dx, dy of out = op(x) @ op(y): dx = dout · op(y)ᵀ, dy = op(x)ᵀ · dout, each
    transposed back when its operand was, then summed over broadcast batch dims."""
    mm = registry.get("fastop::matmul")
    want_x, want_y = _wants_grad(x), _wants_grad(y)
    x_shape, y_shape = _dims(x.shape), _dims(y.shape)
    if len(x_shape) == 1 or len(y_shape) == 1:
        # Give 1-D operands, and the product, back the unit dim matmul dropped.
        reshape = registry.get("fastop::reshape")
        out_shape = _dims(dout.shape)
        if len(y_shape) == 1:
            out_shape.append(1)
            y = reshape(y, shape=[y_shape[0], 1])
        if len(x_shape) == 1:
            out_shape.insert(len(out_shape) - 1, 1)
            x = reshape(x, shape=[1, x_shape[0]])
        dout = reshape(dout, shape=out_shape)
    tx = transpose_x and len(x_shape) > 1
    ty = transpose_y and len(y_shape) > 1
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
    return (_reduce_to(registry, dx, x_shape) if want_x else None,
            _reduce_to(registry, dy, y_shape) if want_y else None)


def _fc_grad(registry, x, w, b, out, dout, activation: str):
    """dz = act'(out)·dout, dx = dz · wᵀ, dw = xᵀ · dz (rows of all leading dims),
    db = Σ_rows dz."""
    mm = registry.get("fastop::matmul")
    dz = registry.get(f"fastop::{activation}_grad")(out, dout) if activation else dout
    k, n = _dims(w.shape)
    dx = mm(dz, w, transpose_y=True) if _wants_grad(x) else None
    x2, dz2 = x, dz
    if len(x.shape) != 2:
        reshape = registry.get("fastop::reshape")
        x2 = reshape(x, shape=[-1, k])
        dz2 = reshape(dz, shape=[-1, n])
    dw = mm(x2, dz2, transpose_x=True) if _wants_grad(w) else None
    db = None if b is None or not _wants_grad(b) else registry.get("fastop::sum")(dz2, axis=0)
    return dx, dw, db
