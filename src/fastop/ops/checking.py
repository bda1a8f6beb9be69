"""Checking op definitions: a gradient rule against finite differences of its forward.

Used by fastop's own tests for every built-in op and meant for plugin authors too::

    from fastop.ops.checking import check_grad_rule
    check_grad_rule("activations::swish", [np.linspace(-3, 3, 7)], {"beta": 1.0})
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from fastop._core.storage import DenseTensor, from_numpy
from fastop.ops._registry import registry

__all__ = ["check_grad_rule"]


def check_grad_rule(name: str, inputs: Sequence[np.ndarray], attrs: dict | None = None,
                    wrt: Sequence[int] | None = None, douts: Sequence[Any] | None = None,
                    eps: float = 1e-6, tol: float = 1e-6) -> tuple:
    """Run op `name`'s gradient rule on DenseTensors and compare the gradient of each
    input in `wrt` (default: all) with d sum(out * dout) / d input, by central differences
    of the op's forward kernel. Use float64 inputs; they are perturbed in place and
    restored. None stands for an absent optional input (by default `wrt` is every input
    given). `douts` (random by default) may give an output's gradient as None: no
    gradient flows into that output (the rule gets zeros for it, or None when it was
    registered with ``materialize_grads=False``). A gradient the rule returns as None
    counts as zeros. Returns the rule's gradients; raises AssertionError naming the op
    and the input on a mismatch.
    """
    op = registry.get(name)
    if op.grad_rule is None:
        raise AssertionError(f"{name}: has no gradient rule")
    attrs = op.check_attrs(attrs or {})
    wrt = [i for i, a in enumerate(inputs) if a is not None] if wrt is None else wrt

    def dense(values: Sequence[Any]) -> list[DenseTensor | None]:
        return [None if a is None else from_numpy(a) for a in values]

    def forward() -> tuple[DenseTensor, ...]:
        return op.invoke(dense(inputs), attrs)

    outs = forward()
    if douts is None:
        rng = np.random.default_rng(0)
        douts = [rng.standard_normal(o.shape) for o in outs]
    named = dict(zip([a.name for a in op.inputs], dense(inputs)))
    named.update(zip([a.name for a in op.outputs], outs))
    materialize = op.grad_rule.materialize_grads
    out_grads = [from_numpy(np.asarray(d, dtype=np.asarray(o).dtype)) if d is not None
                 else from_numpy(np.zeros(o.shape, np.asarray(o).dtype)) if materialize
                 else None for d, o in zip(douts, outs)]
    grads = op.grad_rule.fn(*[named[n] for n in op.grad_rule.needs], *out_grads, **attrs)
    if len(grads) != len(inputs):
        raise AssertionError(f"{name}: the gradient rule returned {len(grads)} gradients "
                             f"for {len(inputs)} inputs")

    def loss() -> float:
        return sum(np.sum(np.asarray(o) * d) for o, d in zip(forward(), douts)
                   if d is not None)

    for i in wrt:
        x = inputs[i]
        numeric = np.zeros_like(x)
        for idx in np.ndindex(x.shape):
            old = x[idx]
            x[idx] = old + eps
            plus = loss()
            x[idx] = old - eps
            minus = loss()
            x[idx] = old
            numeric[idx] = (plus - minus) / (2 * eps)
        got = np.zeros_like(x) if grads[i] is None else np.asarray(grads[i])
        if got.shape != x.shape:
            raise AssertionError(f"{name}: gradient of input {i} has shape "
                                 f"{list(got.shape)}, the input {list(x.shape)}")
        np.testing.assert_allclose(got, numeric, rtol=tol, atol=tol,
                                   err_msg=f"{name}: gradient of input {i}")
    return grads
