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

from fastop._core import norm as K
from fastop.ops.builtin._table import B

__all__ = ["register", "samples"]


def _dims(shape: Any) -> list[int]:
    return [-1 if d is None or d < 0 else int(d) for d in shape]


class _Rows:
    """Reductions over the rows of x (the dims from begin_norm_axis on) and over its
    leading dims."""

    def __init__(self, x: Any, begin_norm_axis: int) -> None:
        nd = len(x.shape)
        b = begin_norm_axis + nd if begin_norm_axis < 0 else begin_norm_axis
        self.x = x
        self.row_axes, self.lead_axes = list(range(b, nd)), list(range(b))
        self.row_shape = _dims(x.shape[b:])

    def sum(self, v: Any) -> Any:
        return B.sum(v, axis=self.row_axes, keepdim=True)

    def mean(self, v: Any) -> Any:
        return B.mean(v, axis=self.row_axes, keepdim=True)

    def inv_count(self) -> Any:
        """1 / (elements per row): a number, or a value when a dim is known only at run
        time (static graphs)."""
        if -1 not in self.row_shape:
            return 1.0 / math.prod(self.row_shape)
        ones = B.full_like(self.x, fill_value=1.0)
        return B.divide(1.0, self.sum(ones))

    def param(self, p: Any) -> Any:
        """A weight-like value (one element per row element) shaped like a row."""
        if _dims(p.shape) == self.row_shape:
            return p
        return B.reshape(p, shape=self.row_shape)

    def to_param(self, v: Any, like: Any) -> Any:
        """v (x's shape) summed over the leading dims and shaped like `like`."""
        total = B.sum(v, axis=self.lead_axes) if self.lead_axes else v
        if _dims(total.shape) == _dims(like.shape):
            return total
        return B.reshape(total, shape=_dims(like.shape))


def _plus(a: Any, b: Any) -> Any:
    """a + b where either may be None (no term)."""
    return b if a is None else a if b is None else B.add(a, b)


def layer_norm_grad_rule(x, weight, bias, mean, rstd, dout, dmean, drstd, epsilon,
                         begin_norm_axis):
    """layer_norm_grad for out's gradient, plus the terms of mean and rstd when a
    gradient flows into them."""
    dx = dweight = dbias = None
    if dout is not None:
        dx, dw, db = B.layer_norm_grad(x, mean, rstd, dout, weight,
                                       begin_norm_axis=begin_norm_axis)
        dweight = None if weight is None else dw
        if bias is not None:
            dbias = db if _dims(db.shape) == _dims(bias.shape) else \
                B.reshape(db, shape=_dims(bias.shape))
    if dmean is not None or drstd is not None:
        rows = _Rows(x, begin_norm_axis)
        inv_n = rows.inv_count()
        if dmean is not None:
            dx = _plus(dx, B.expand_as(B.multiply(dmean, inv_n), x))
        if drstd is not None:
            # d rstd / dx = -rstd^3 (x - mean) / n
            rstd3 = B.multiply(rstd, B.multiply(rstd, rstd))
            coef = B.neg(B.multiply(B.multiply(drstd, rstd3), inv_n))
            dx = _plus(dx, B.multiply(coef, B.subtract(x, mean)))
    return dx, dweight, dbias


def layer_norm_grad_grad_rule(x, mean, rstd, dout, weight, gdx, gdweight, gdbias,
                         begin_norm_axis):
    # dx = r * P(g), P(v) = v - mean(v) - xhat * mean(v * xhat), g = dout * w,
    # xhat = (x - m) * r, with m and r independent inputs. Through xhat every term
    # reaches x, m and r via u = dL/dxhat: dL/dx = u r, dL/dm = -r sum(u),
    # dL/dr = sum(u (x - m)) plus r's explicit factor in dx.
    rows = _Rows(x, begin_norm_axis)
    centered = B.subtract(x, mean)
    xhat = B.multiply(centered, rstd)
    w = None if weight is None else rows.param(weight)
    g = dout if w is None else B.multiply(dout, w)
    u = d_dout = d_weight = d_rstd = None
    if gdx is not None:
        a = gdx
        c1, c2 = rows.mean(g), rows.mean(B.multiply(g, xhat))
        ca = rows.mean(B.multiply(a, xhat))
        t = B.multiply(rstd, B.subtract(B.subtract(a, rows.mean(a)), B.multiply(xhat, ca)))
        d_dout = t if w is None else B.multiply(t, w)
        if weight is not None:
            d_weight = rows.to_param(B.multiply(dout, t), weight)
        u = B.neg(B.multiply(rstd, B.add(B.multiply(g, ca), B.multiply(a, c2))))
        d_rstd = B.subtract(B.subtract(rows.sum(B.multiply(a, g)),
                                       B.multiply(rows.sum(a), c1)),
                            B.multiply(rows.sum(B.multiply(g, xhat)), ca))
    if gdweight is not None:
        bw = rows.param(gdweight)
        u = _plus(u, B.multiply(bw, dout))
        d_dout = _plus(d_dout, B.multiply(bw, xhat))
    if gdbias is not None:
        d_dout = _plus(d_dout, B.expand_as(rows.param(gdbias), x))
    if u is None:
        return None, None, d_rstd, d_dout, d_weight
    d_rstd = _plus(d_rstd, rows.sum(B.multiply(u, centered)))
    return (B.multiply(u, rstd), B.neg(B.multiply(rstd, rows.sum(u))), d_rstd, d_dout,
            d_weight)


def register(registry) -> None:
    registry.define_ckernel(
        "fastop::layer_norm", K.layer_norm, attrs={"epsilon": 1e-5, "begin_norm_axis": 1},
        doc="Normalize each row of x (dims from begin_norm_axis on): (x - mean) * rstd * "
            "weight + bias, rstd = 1 / sqrt(var + epsilon); also returns mean and rstd "
            "(x's leading dims, 1 in the normalized ones)."
    ).grad(needs=("x", "weight", "bias", "mean", "rstd"),
           materialize_grads=False)(layer_norm_grad_rule)
    registry.define_ckernel(
        "fastop::layer_norm_grad", K.layer_norm_grad, attrs={"begin_norm_axis": 1},
        doc="Backward of layer_norm from its saved mean and rstd: dx = rstd * (g - "
            "mean(g) - xhat * mean(g * xhat)), g = dout * weight; dweight = sum(dout * "
            "xhat), dbias = sum(dout) over rows."
    ).grad(needs=("x", "mean", "rstd", "dout", "weight"),
           materialize_grads=False)(layer_norm_grad_grad_rule)


def samples() -> dict[str, list[Any]]:
    """opcheck's inputs: float32 and float64, weight and bias in a row's shape or flat,
    either left out, normalization from the first, a middle and the last dim. Small
    shapes: the double-gradient check differentiates every element. layer_norm_grad
    (called by layer_norm's rule, not its ``grad_op``) gets its own: mean and rstd as
    the independent inputs its rule takes them for (rstd positive)."""
    from fastop.ops.builtin._sampling import Values, sample   # tests and tools only
    v = Values(4)
    f32 = "float32"
    return {
        "fastop::layer_norm": [
            sample(v.normal(2, 3, 2), v.normal(6), v.normal(3, 2), begin_norm_axis=1),
            sample(v.normal(3, 4, dtype=f32), v.normal(4, dtype=f32), None,
                   begin_norm_axis=-1),
            sample(v.normal(2, 3), None, v.normal(3), epsilon=1e-3),
            sample(v.normal(2, 2, 3), None, None, begin_norm_axis=0)],
        "fastop::layer_norm_grad": [
            sample(v.normal(3, 4), v.normal(3, 1), v.positive(3, 1), v.normal(3, 4),
                   v.normal(4)),
            sample(v.normal(2, 3, 2, dtype=f32), v.normal(2, 1, 1, dtype=f32),
                   v.positive(2, 1, 1, dtype=f32), v.normal(2, 3, 2, dtype=f32), None),
            sample(v.normal(2, 2, 3), v.normal(2, 2, 1), v.positive(2, 2, 1),
                   v.normal(2, 2, 3), v.normal(3), begin_norm_axis=2)],
    }
