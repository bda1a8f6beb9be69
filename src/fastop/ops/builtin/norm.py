"""Built-in layer normalization ops (Cython kernels from :mod:`fastop._core.norm`) and
their gradient rules.

``layer_norm(x, weight?, bias?, epsilon=1e-5, begin_norm_axis=1) -> (out, mean, rstd)``
normalizes each row of x (the dims from ``begin_norm_axis`` on); ``mean`` and ``rstd =
1 / sqrt(var + epsilon)`` keep x's leading dims with size 1 in the normalized ones.
``layer_norm_grad(x, mean, rstd, dout, weight?, begin_norm_axis=1) -> (dx, dweight,
dbias)`` is its backward kernel.

Rules (compositions of registered ops, so they run in both modes and differentiate
again): layer_norm → layer_norm_grad for ``out``, plus the terms of ``mean`` and
``rstd`` when a gradient flows into them (they are differentiable outputs: d mean / dx
= 1/n, d rstd / dx = -rstd^3 (x - mean) / n). layer_norm_grad's rule takes ``mean`` and
``rstd`` as independent inputs (their dependence on x reaches x through layer_norm's
rule), which makes it exact to any order.
"""
from __future__ import annotations

import math
from typing import Any

from fastop._core import norm as _kernels

__all__ = ["register"]


def _dims(shape: Any) -> list[int]:
    return [-1 if d is None or d < 0 else int(d) for d in shape]


class _Rows:
    """Reductions over the rows of x (the dims from begin_norm_axis on) and over its
    leading dims, with the ops they need bound once."""

    def __init__(self, ops: dict[str, Any], x: Any, begin_norm_axis: int) -> None:
        nd = len(x.shape)
        b = begin_norm_axis + nd if begin_norm_axis < 0 else begin_norm_axis
        self.ops, self.x = ops, x
        self.row_axes, self.lead_axes = list(range(b, nd)), list(range(b))
        self.row_shape = _dims(x.shape[b:])

    def sum(self, v: Any) -> Any:
        return self.ops["sum"](v, axis=self.row_axes, keepdim=True)

    def mean(self, v: Any) -> Any:
        return self.ops["mean"](v, axis=self.row_axes, keepdim=True)

    def inv_count(self) -> Any:
        """1 / (elements per row): a number, or a value when a dim is known only at run
        time (static graphs)."""
        if -1 not in self.row_shape:
            return 1.0 / math.prod(self.row_shape)
        ones = self.ops["full_like"](self.x, fill_value=1.0)
        return self.ops["divide"](1.0, self.sum(ones))

    def param(self, p: Any) -> Any:
        """A weight-like value (one element per row element) shaped like a row."""
        if _dims(p.shape) == self.row_shape:
            return p
        return self.ops["reshape"](p, shape=self.row_shape)

    def to_param(self, v: Any, like: Any) -> Any:
        """v (x's shape) summed over the leading dims and shaped like `like`."""
        total = self.ops["sum"](v, axis=self.lead_axes) if self.lead_axes else v
        if _dims(total.shape) == _dims(like.shape):
            return total
        return self.ops["reshape"](total, shape=_dims(like.shape))


def _plus(add: Any, a: Any, b: Any) -> Any:
    """a + b where either may be None (no term)."""
    return b if a is None else a if b is None else add(a, b)


def register(registry) -> None:
    ops = {name: registry.get(f"fastop::{name}")
           for name in ("add", "subtract", "multiply", "divide", "neg", "sum", "mean",
                        "reshape", "expand_as", "full_like")}
    add, subtract, multiply, neg = ops["add"], ops["subtract"], ops["multiply"], ops["neg"]

    layer_norm = registry.define_ckernel(
        "fastop::layer_norm", _kernels.layer_norm,
        attrs={"epsilon": 1e-5, "begin_norm_axis": 1},
        doc="Normalize each row of x (dims from begin_norm_axis on): (x - mean) * rstd * "
            "weight + bias, rstd = 1 / sqrt(var + epsilon); also returns mean and rstd "
            "(x's leading dims, 1 in the normalized ones).")
    layer_norm_grad_op = registry.define_ckernel(
        "fastop::layer_norm_grad", _kernels.layer_norm_grad, attrs={"begin_norm_axis": 1},
        doc="Backward of layer_norm from its saved mean and rstd: dx = rstd * (g - "
            "mean(g) - xhat * mean(g * xhat)), g = dout * weight; dweight = sum(dout * "
            "xhat), dbias = sum(dout) over rows.")

    @layer_norm.grad(needs=("x", "weight", "bias", "mean", "rstd"), materialize_grads=False)
    def layer_norm_grad(x, weight, bias, mean, rstd, dout, dmean, drstd, epsilon,
                        begin_norm_axis):
        dx = dweight = dbias = None
        if dout is not None:
            dx, dw, db = layer_norm_grad_op(x, mean, rstd, dout, weight,
                                            begin_norm_axis=begin_norm_axis)
            dweight = None if weight is None else dw
            if bias is not None:
                dbias = db if _dims(db.shape) == _dims(bias.shape) else \
                    ops["reshape"](db, shape=_dims(bias.shape))
        if dmean is not None or drstd is not None:
            rows = _Rows(ops, x, begin_norm_axis)
            inv_n = rows.inv_count()
            if dmean is not None:
                dx = _plus(add, dx, ops["expand_as"](multiply(dmean, inv_n), x))
            if drstd is not None:
                # d rstd / dx = -rstd^3 (x - mean) / n
                coef = neg(multiply(multiply(drstd, multiply(rstd, multiply(rstd, rstd))),
                                    inv_n))
                dx = _plus(add, dx, multiply(coef, subtract(x, mean)))
        return dx, dweight, dbias

    @layer_norm_grad_op.grad(needs=("x", "mean", "rstd", "dout", "weight"),
                             materialize_grads=False)
    def layer_norm_grad_grad(x, mean, rstd, dout, weight, gdx, gdweight, gdbias,
                             begin_norm_axis):
        # dx = r * P(g), P(v) = v - mean(v) - xhat * mean(v * xhat), g = dout * w,
        # xhat = (x - m) * r, with m and r independent inputs. Through xhat every term
        # reaches x, m and r via u = dL/dxhat: dL/dx = u r, dL/dm = -r sum(u),
        # dL/dr = sum(u (x - m)) plus r's explicit factor in dx.
        rows = _Rows(ops, x, begin_norm_axis)
        centered = subtract(x, mean)
        xhat = multiply(centered, rstd)
        w = None if weight is None else rows.param(weight)
        g = dout if w is None else multiply(dout, w)
        u = d_dout = d_weight = d_rstd = None
        if gdx is not None:
            a = gdx
            c1, c2, ca = rows.mean(g), rows.mean(multiply(g, xhat)), rows.mean(
                multiply(a, xhat))
            t = multiply(rstd, subtract(subtract(a, rows.mean(a)), multiply(xhat, ca)))
            d_dout = t if w is None else multiply(t, w)
            if weight is not None:
                d_weight = rows.to_param(multiply(dout, t), weight)
            u = neg(multiply(rstd, add(multiply(g, ca), multiply(a, c2))))
            d_rstd = subtract(subtract(rows.sum(multiply(a, g)), multiply(rows.sum(a), c1)),
                              multiply(rows.sum(multiply(g, xhat)), ca))
        if gdweight is not None:
            bw = rows.param(gdweight)
            u = _plus(add, u, multiply(bw, dout))
            d_dout = _plus(add, d_dout, multiply(bw, xhat))
        if gdbias is not None:
            d_dout = _plus(add, d_dout, ops["expand_as"](rows.param(gdbias), x))
        if u is None:
            return None, None, d_rstd, d_dout, d_weight
        d_rstd = _plus(add, d_rstd, rows.sum(multiply(u, centered)))
        return (multiply(u, rstd), neg(multiply(rstd, rows.sum(u))), d_rstd, d_dout,
                d_weight)
