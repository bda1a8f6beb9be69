"""Checking op definitions: a gradient rule against finite differences of its forward,
and the comparison and finite-difference helpers every check shares.

Used by fastop's own tests for every built-in op; plugin authors use them through
:mod:`fastop.testing` (``opcheck`` runs all the checks of an op)::

    from fastop.testing import check_grad_rule
    check_grad_rule("activations::swish", [np.linspace(-3, 3, 7)], {"beta": 1.0})
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from fastop._core.storage import DenseTensor, from_numpy
from fastop.ops._registry import OpDef, apply_grad_rule, registry

__all__ = ["Sample", "check_grad_rule", "run_grad_rule", "numerical_jacobian", "assert_close",
           "default_tolerance"]

class Sample:
    """One sample for :func:`opcheck`: the op's inputs (numpy arrays; a list of arrays
    for a variadic input, None for an absent optional one) and attributes for this
    sample only: ``Sample(x, w, stride=2)``."""

    __slots__ = ("inputs", "attrs")

    def __init__(self, *inputs: Any, **attrs: Any) -> None:
        self.inputs = list(inputs)
        self.attrs = attrs

    def __repr__(self) -> str:
        return f"Sample(shapes={_each(np.shape, self.inputs)}, attrs={self.attrs})"


def _each(fn: Callable[[Any], Any], inputs: Sequence[Any]) -> list[Any]:
    """``fn`` applied to every array of an op's inputs, keeping their nesting (a list for
    a variadic input, None for an absent optional one)."""
    return [None if x is None else [fn(v) for v in x] if isinstance(x, list) else fn(x)
            for x in inputs]


# (rtol, atol) by the kind of the less precise of the two values compared: torch's
# assert_close defaults, and exact comparison for integers and booleans.
_TOLERANCES = {np.dtype("float16"): (1e-3, 1e-5), np.dtype("float32"): (1.3e-6, 1e-5),
               np.dtype("float64"): (1e-7, 1e-7)}


def default_tolerance(*dtypes: Any) -> tuple[float, float]:
    """``(rtol, atol)`` for comparing values of these dtypes: the loosest one's."""
    found = [_TOLERANCES.get(np.dtype(d), (0.0, 0.0)) for d in dtypes]
    return max(t[0] for t in found), max(t[1] for t in found)


def assert_close(actual: Any, expected: Any, *, rtol: float | None = None,
                 atol: float | None = None, equal_nan: bool = True, msg: str = "") -> None:
    """Assert ``|actual - expected| <= atol + rtol * |expected|`` elementwise, numpy style
    (arrays, tensors, scalars), with the same shape.

    Tolerances not given come from the less precise dtype of the two (float16
    1e-3/1e-5, float32 1.3e-6/1e-5, float64 1e-7/1e-7 as ``(rtol, atol)``; integers and
    booleans compare exactly). The AssertionError starts with ``msg`` and gives the
    number of mismatches and the largest absolute error with its index and both values.
    """
    a, e = np.asarray(actual), np.asarray(expected)
    prefix = f"{msg}: " if msg else ""
    if a.shape != e.shape:
        raise AssertionError(f"{prefix}shape {list(a.shape)} differs from the expected "
                             f"{list(e.shape)}")
    default_rtol, default_atol = default_tolerance(a.dtype, e.dtype)
    rtol = default_rtol if rtol is None else rtol
    atol = default_atol if atol is None else atol
    a64, e64 = a.astype(np.float64), e.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        error = np.abs(a64 - e64)
        bad = ~(error <= atol + rtol * np.abs(e64))
    both_nan = np.isnan(a64) & np.isnan(e64)
    if equal_nan:
        bad &= ~both_nan
    bad &= ~((a64 == e64) & np.isinf(e64))        # the same infinity
    if not bad.any():
        return
    error = np.where(bad, np.nan_to_num(error, nan=np.inf), 0.0)
    worst = np.unravel_index(int(np.argmax(error)), a.shape) if a.ndim else ()
    raise AssertionError(
        f"{prefix}not close: {int(bad.sum())} of {a.size} element(s) differ; largest "
        f"error {error[worst]:.3g} at index {tuple(int(i) for i in worst)}: "
        f"{a64[worst].item()!r} vs expected {e64[worst].item()!r} (rtol={rtol:g}, "
        f"atol={atol:g})")


def numerical_jacobian(evaluate: Callable[[], Sequence[Any]], inputs: Sequence[np.ndarray],
                       eps: float) -> list[list[np.ndarray]]:
    """Jacobians by central differences: ``J[output][input]`` of shape (input size,
    output size).

    ``evaluate()`` computes the outputs (array-likes of any shape) from ``inputs``,
    which it reads as they are: each input's elements are perturbed in place by
    ``±eps``, one at a time, and restored. Inputs must be writable and contiguous.
    """
    def flat_outputs() -> list[np.ndarray]:   # copies: an output may view an input
        return [np.array(o, dtype=np.float64).reshape(-1) for o in evaluate()]

    sizes = [o.size for o in flat_outputs()]
    jac = [[np.zeros((x.size, n)) for x in inputs] for n in sizes]
    for c, x in enumerate(inputs):
        flat = x.reshape(-1)
        if not np.shares_memory(flat, x) and x.size:
            raise ValueError("numerical_jacobian perturbs its inputs in place: give "
                             "contiguous arrays")
        for k in range(flat.size):
            orig = flat[k]
            flat[k] = orig + eps
            plus = flat_outputs()
            flat[k] = orig - eps
            minus = flat_outputs()
            flat[k] = orig
            for oi in range(len(sizes)):
                jac[oi][c][k, :] = (plus[oi] - minus[oi]) / (2 * eps)
    return jac


def _as_op(op: OpDef | str) -> OpDef:
    return op if isinstance(op, OpDef) else registry.get(op)


def _dense(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        return [from_numpy(np.asarray(v)) for v in value]
    return from_numpy(np.asarray(value))


def run_grad_rule(op: OpDef | str, inputs: Sequence[Any], outputs: Sequence[Any],
                  out_grads: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    """Run an op's gradient rule on numpy values: its ``needs`` taken from the forward
    ``inputs`` and ``outputs``, ``out_grads`` one per output (None: no gradient flows
    into it; zeros unless the rule was registered with ``materialize_grads=False``).

    Returns one gradient per input as numpy arrays (a list for a variadic input, None
    where the rule gives none); an AssertionError when the rule returns the wrong count.
    """
    op = _as_op(op)
    rule = op.grad_rule
    if rule is None:
        raise AssertionError(f"{op.name}: has no gradient rule")
    if rule.backward_op is not None:
        # as backward does: integer outputs carry no gradient; into an output the
        # backward op leaves out, one is dropped if declared, else an error
        out_grads = [g if np.asarray(o).dtype.kind == "f" else None
                     for g, o in zip(out_grads, outputs)]
        rule.screen_output_grads(op, out_grads)
    named = dict(zip([a.name for a in op.inputs], map(_dense, inputs)))
    named.update(zip([a.name for a in op.outputs], map(_dense, outputs)))
    grads_in = [from_numpy(np.asarray(g, dtype=np.asarray(o).dtype)) if g is not None
                else from_numpy(np.zeros(np.shape(o), np.asarray(o).dtype))
                if rule.materialize_grads else None for g, o in zip(out_grads, outputs)]
    try:
        result = apply_grad_rule(op, [named[n] for n in rule.needs], grads_in, attrs)
    except TypeError as exc:
        if "the gradient rule returned" in str(exc):
            raise AssertionError(str(exc)) from None
        raise
    return [None if g is None else [np.asarray(v) for v in g] if isinstance(g, (list, tuple))
            else np.asarray(g) for g in result]


def _leaves(inputs: Sequence[Any], wrt: Sequence[int]) -> list[tuple[int, int | None]]:
    """(input index, index in a variadic list or None) of every array to perturb."""
    return [(i, k) for i in wrt
            for k in (range(len(inputs[i])) if isinstance(inputs[i], list) else [None])]


def check_grad_rule(op: OpDef | str, inputs: Sequence[Any], attrs: dict | None = None,
                    wrt: Sequence[int] | None = None, douts: Sequence[Any] | None = None,
                    eps: float = 1e-6, tol: float = 1e-6, *,
                    rtol: float | None = None) -> list[Any]:
    """Compare op `op`'s gradient rule with d sum(out * dout) / d input, by central
    differences of the op's forward kernel, for each input in `wrt` (default: every
    differentiable input of a floating dtype).

    `inputs` are numpy arrays (a list for a variadic input, None for an absent optional
    one); use float64. They are copied, never modified. `douts` (random by default) may
    give an output's gradient as None: no gradient flows into that output. Tolerances:
    ``atol=tol``, ``rtol`` (default ``tol``). Returns the rule's gradients; raises an
    AssertionError naming the op, the input and the largest error on a mismatch.
    """
    op = _as_op(op)
    attrs = op.check_attrs(attrs or {})
    inputs = [None if x is None else [np.array(v, order="C") for v in x]
              if isinstance(x, (list, tuple)) else np.array(x, order="C") for x in inputs]
    if wrt is None:
        diff = set(op.differentiable_inputs)
        wrt = [i for i, (spec, x) in enumerate(zip(op.inputs, inputs))
               if spec.name in diff and x is not None
               and all(np.asarray(v).dtype.kind == "f" for v in (x if isinstance(x, list) else [x]))]

    def forward() -> tuple[DenseTensor, ...]:
        return op.invoke([_dense(x) for x in inputs], attrs)

    outs = [np.array(o) for o in forward()]
    if douts is None:       # none into an output declared non-differentiable
        rng = np.random.default_rng(0)
        nondiff = () if op.grad_rule is None else op.grad_rule.nondifferentiable
        douts = [rng.standard_normal(o.shape) for o in outs]
        douts = [None if k in nondiff else d for k, d in enumerate(douts)]
    grads = run_grad_rule(op, inputs, outs, douts, attrs)

    def loss() -> list[float]:
        return [sum(np.sum(np.asarray(o, np.float64) * d) for o, d in zip(forward(), douts)
                    if d is not None)]

    leaves = _leaves(inputs, wrt)
    arrays = [inputs[i] if k is None else inputs[i][k] for i, k in leaves]
    numeric = numerical_jacobian(loss, arrays, eps)[0]
    for (i, k), x, num in zip(leaves, arrays, numeric):
        got = grads[i] if k is None or grads[i] is None else grads[i][k]
        where = f"input '{op.inputs[i].name}'" + ("" if k is None else f"[{k}]")
        if got is None:
            got = np.zeros_like(x)        # no gradient: zero, which the numbers must say
        assert_close(got, num.reshape(x.shape), rtol=tol if rtol is None else rtol,
                     atol=tol, msg=f"{op.name}: gradient of {where} against finite "
                                   f"differences")
    return grads
