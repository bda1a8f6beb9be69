"""Gradient checking: analytic gradients against central finite differences, in float64.

``gradcheck(fn, inputs)`` builds both Jacobians of ``fn`` (every output element with
respect to every element of every input with ``stop_gradient=False``) and compares them;
``gradgradcheck`` does the same for the first-order gradients, which checks double
backward. Both raise :class:`GradcheckError` describing the first mismatch.

Example::

    >>> import fastop
    >>> from fastop.autograd import gradcheck
    >>> x = fastop.randn([3], dtype="float64")
    >>> x.stop_gradient = False
    >>> gradcheck(lambda t: (t * t).sum(), [x])
    True
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from fastop._tensor import Tensor, to_tensor
from fastop.autograd._backward import grad
from fastop.ops.checking import numerical_jacobian

__all__ = ["gradcheck", "gradgradcheck", "GradcheckError"]


class GradcheckError(AssertionError):
    """Analytic and numerical gradients disagree (or the gradient is not differentiable)."""


def _as_list(values: Any) -> list[Any]:
    return list(values) if isinstance(values, (list, tuple)) else [values]


def _float64_copies(inputs: Sequence[Any]) -> list[Any]:
    """float64 copies of float tensors/arrays (keeping stop_gradient); others as they are."""
    out = []
    for x in inputs:
        if isinstance(x, Tensor) and x.dtype.is_floating:
            out.append(to_tensor(x, dtype="float64", stop_gradient=x.stop_gradient))
        elif isinstance(x, np.ndarray) and x.dtype.kind == "f":
            out.append(to_tensor(x, dtype="float64", stop_gradient=False))
        else:
            out.append(x)
    return out


def _outputs(result: Any) -> list[Any]:
    return [o for o in _as_list(result) if isinstance(o, Tensor) and o.dtype.is_floating]


def _analytic(fn: Callable, xs: list[Any], wrt: list[Any]) -> list[list[np.ndarray]]:
    """J[output][input] of shape (input size, output size), one backward per output
    element."""
    outs = _outputs(fn(*xs))
    jac = [[np.zeros((x.size, o.size)) for x in wrt] for o in outs]
    for oi, o in enumerate(outs):
        if o.stop_gradient:
            continue                                   # constant in every input
        for j in range(o.size):
            seed = np.zeros(o.size)
            seed[j] = 1.0
            grads = grad([o], wrt, [seed.reshape(o.shape)], retain_graph=True,
                         allow_unused=True)
            for c, g in enumerate(grads):
                if g is not None:
                    jac[oi][c][:, j] = g.numpy().reshape(-1)
    return jac


def _numerical(fn: Callable, xs: list[Any], wrt: list[Any], eps: float
               ) -> list[list[np.ndarray]]:
    # with grad mode on: fn may itself call grad(); x.numpy() is a view, perturbed in place
    return numerical_jacobian(lambda: [o.numpy() for o in _outputs(fn(*xs))],
                              [x.numpy() for x in wrt], eps)


def gradcheck(fn: Callable[..., Any], inputs: Any, eps: float = 1e-6, atol: float = 1e-5,
              rtol: float = 1e-3, raise_exception: bool = True) -> bool:
    """Check fn's gradients against central finite differences.

    ``inputs`` is a tensor or a sequence of arguments for ``fn``; float tensors are
    copied to float64 and those with ``stop_gradient=False`` are checked. ``fn``
    returns a tensor or a sequence (non-float entries are ignored). Returns True, or
    raises :class:`GradcheckError` (returns False when ``raise_exception=False``).
    """
    xs = _float64_copies(_as_list(inputs))
    wrt = [x for x in xs if isinstance(x, Tensor) and not x.stop_gradient]
    if not wrt:
        raise ValueError("gradcheck: no input has stop_gradient=False; nothing to check")
    analytic = _analytic(fn, xs, wrt)
    numerical = _numerical(fn, xs, wrt, eps)
    for oi, (rows_a, rows_n) in enumerate(zip(analytic, numerical)):
        for c, (a, n) in enumerate(zip(rows_a, rows_n)):
            if not np.allclose(a, n, atol=atol, rtol=rtol):
                if not raise_exception:
                    return False
                worst = np.unravel_index(np.argmax(np.abs(a - n)), a.shape)
                raise GradcheckError(
                    f"gradcheck of {getattr(fn, '__name__', fn)!s}: d(output {oi})/"
                    f"d(input {c}) differs from finite differences; largest difference "
                    f"at (input element {worst[0]}, output element {worst[1]}): analytic "
                    f"{a[worst]:.6g}, numerical {n[worst]:.6g} (atol={atol}, rtol={rtol})"
                    f"\nanalytic:\n{a}\nnumerical:\n{n}")
    return True


def gradgradcheck(fn: Callable[..., Any], inputs: Any, grad_outputs: Any = None,
                  eps: float = 1e-6, atol: float = 1e-5, rtol: float = 1e-3,
                  raise_exception: bool = True) -> bool:
    """Check double backward: gradcheck of ``(inputs, grad_outputs) -> fastop.grad(
    fn(inputs), inputs, grad_outputs, create_graph=True)``.

    ``grad_outputs`` defaults to random float64 tensors (a fixed seed). A first-order
    gradient that was not recorded (a gradient rule using an op without a gradient
    rule) raises :class:`GradcheckError` saying so.
    """
    xs = _float64_copies(_as_list(inputs))
    wrt_index = [i for i, x in enumerate(xs) if isinstance(x, Tensor) and not x.stop_gradient]
    if not wrt_index:
        raise ValueError("gradgradcheck: no input has stop_gradient=False; nothing to check")
    outs = _outputs(fn(*xs))
    if grad_outputs is None:
        rng = np.random.default_rng(0)
        gos = [to_tensor(rng.standard_normal(o.shape), dtype="float64", stop_gradient=False)
               for o in outs]
    else:
        gos = _float64_copies(_as_list(grad_outputs))
        for g in gos:
            g.stop_gradient = False
    n = len(xs)

    def first_order_grads(*args: Any) -> list[Any]:
        ins, seeds = list(args[:n]), list(args[n:])
        grads = grad(_outputs(fn(*ins)), [ins[i] for i in wrt_index], seeds,
                     create_graph=True, allow_unused=True)
        for i, g in zip(wrt_index, grads):
            if g is not None and g.stop_gradient:
                raise GradcheckError(
                    f"gradgradcheck of {getattr(fn, '__name__', fn)!s}: the gradient for "
                    f"input {i} was not recorded, so it cannot be differentiated again "
                    f"(its gradient rule uses an op without a gradient rule)")
        return [g for g in grads if g is not None]

    return gradcheck(first_order_grads, [*xs, *gos], eps, atol, rtol, raise_exception)
