"""Python-kernel test ops (namespace ``eagertest``) exercising the generic eager path.

They are defined through the one registry like any plugin op, with composite gradient
rules made of each other (so they are differentiable to any order) or a Python backward
kernel (``tanh_k``, differentiable once).
"""
from __future__ import annotations

import numpy as np
import pytest

import fastop
from fastop.ops import registry

NS = "eagertest"


def _define() -> None:
    same = lambda x, *rest, **attrs: x  # noqa: E731 - meta: like the first input

    mul = registry.define(f"{NS}::mul", inputs=["x", "y"], meta=same,
                          kernels={"*": lambda x, y: x * y})

    @mul.grad(needs=("x", "y"))
    def _(x, y, dout):
        return mul(dout, y), mul(dout, x)

    plus = registry.define(f"{NS}::plus", inputs=["x", "y"], meta=same,
                           kernels={"*": lambda x, y: x + y})

    @plus.grad()
    def _(dout):
        return dout, dout

    scale = registry.define(f"{NS}::scale", inputs=["x"], attrs={"alpha": 1.0}, meta=same,
                            kernels={"*": lambda x, alpha: x * x.dtype.type(alpha)})

    @scale.grad()
    def _(dout, alpha):
        return scale(dout, alpha=alpha)

    sin = registry.define(f"{NS}::sin", inputs=["x"], meta=same, kernels={"*": np.sin})
    cos = registry.define(f"{NS}::cos", inputs=["x"], meta=same, kernels={"*": np.cos})

    @sin.grad(needs=("x",))
    def _(x, dout):
        return mul(dout, cos(x))

    @cos.grad(needs=("x",))
    def _(x, dout):
        return mul(dout, scale(sin(x), alpha=-1.0))

    tanh_k = registry.define(f"{NS}::tanh_k", inputs=["x"], meta=same,
                             kernels={"*": np.tanh})

    @tanh_k.grad_kernel(needs=("out", "dout"))
    def _(out, dout):
        return dout * (1 - out * out)

    # Two outputs: (2x, 3x). Missing output gradients are zero-filled for the rule.
    twice = registry.define(f"{NS}::two_three", inputs=["x"], outputs=["a", "b"],
                            meta=lambda x: (x, x),
                            kernels={"*": lambda x: (2 * x, 3 * x)})

    @twice.grad()
    def _(da, db):
        return plus(scale(da, alpha=2.0), scale(db, alpha=3.0))

    # The same op, its rule told None (not zeros) for an output without gradient.
    sparse = registry.define(f"{NS}::two_three_sparse", inputs=["x"], outputs=["a", "b"],
                             meta=lambda x: (x, x),
                             kernels={"*": lambda x: (2 * x, 3 * x)})
    seen = []          # (da is None, db is None) per call, for the tests

    @sparse.grad(materialize_grads=False)
    def _(da, db):
        seen.append((da is None, db is None))
        terms = [scale(g, alpha=k) for g, k in ((da, 2.0), (db, 3.0)) if g is not None]
        return terms[0] if len(terms) == 1 else plus(*terms)
    sparse.seen = seen

    # Variadic input: the rule returns a list of gradients for `xs`.
    total = registry.define(f"{NS}::total", inputs=["xs*"],
                            meta=lambda xs: xs[0], kernels={"*": lambda xs: sum(xs)})

    @total.grad(needs=("xs",))
    def _(xs, dout):
        return ([dout] * len(xs),)

    # Broken rules, for the error paths.
    wrong_shape = registry.define(f"{NS}::wrong_shape", inputs=["x"], meta=same,
                                  kernels={"*": lambda x: x.copy()})

    @wrong_shape.grad()
    def _(dout):
        return fastop.to_tensor(np.ones(dout.shape + [1], dtype=dout.dtype.numpy_dtype))

    wrong_count = registry.define(f"{NS}::wrong_count", inputs=["x"], meta=same,
                                  kernels={"*": lambda x: x.copy()})

    @wrong_count.grad()
    def _(dout):
        return dout, dout

    raising = registry.define(f"{NS}::raising", inputs=["x"], meta=same,
                              kernels={"*": lambda x: x.copy()})

    @raising.grad()
    def _(dout):
        raise ZeroDivisionError("boom in a gradient rule")


    # 70 inputs: dx0 reads x69 alone, a needed value past the 64th (checked all the same)
    many = [f"x{i}" for i in range(70)]
    wide = registry.define(f"{NS}::wide", inputs=many, meta=same,
                           kernels={"*": lambda *xs: xs[0] * xs[-1]}, differentiable=("x0",))

    @wide.grad(needs=tuple(many), reads={"x0": ("x69",)})
    def _(*args):
        return (registry.get("fastop::multiply")(args[-1], args[69]),) + (None,) * 69


if f"{NS}::mul" not in registry:
    _define()


@pytest.fixture
def ops():
    """The ``fastop.ops.eagertest`` namespace."""
    return registry.namespace(NS)
