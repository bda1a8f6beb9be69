"""Reverse-mode differentiation of a Program: :func:`append_backward`, :func:`gradients`.

For every op between the sources and the targets, in reverse order, the op's gradient
rule is applied (``apply_grad_rule``, the function eager autograd uses too) to
Variables under the static dispatcher, so it appends gradient operators. A py_func's
rule appends an op calling its ``backward_func``. Gradients of a variable used several
times are summed with ``fastop::add``; a missing output gradient is zero-filled
(``fastop::full_like``) unless the rule takes None for it (``materialize_grads=False``,
as py_func's does). Gradient ops whose results nobody needs are removed at the end.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from fastop.ops._registry import apply_grad_rule
from fastop.ops.builtin._table import B
from fastop.static.framework import (Block, Operator, Program, Variable, program_guard,
                                     static_mode_guard)

__all__ = ["append_backward", "gradients"]


def _differentiable(op: Operator) -> bool:
    return op.opdef.grad_rule is not None and bool(op.opdef.differentiable_inputs)


def _diff_pairs(op: Operator) -> list[tuple[int, int | None, Variable]]:
    """(input position, place in a variadic input's list or None, variable) of the
    inputs that take gradients."""
    names = set(op.opdef.differentiable_inputs)
    pairs: list[tuple[int, int | None, Variable]] = []
    for k, (spec, x) in enumerate(zip(op.opdef.inputs, op.inputs)):
        if spec.name not in names or x is None:
            continue
        if isinstance(x, list):
            pairs.extend((k, j, v) for j, v in enumerate(x) if v is not None)
        else:
            pairs.append((k, None, x))
    return pairs


def _carries_gradient(op: Operator) -> list[Variable]:
    """The outputs of `op` a gradient can flow back through: floating ones not declared
    non-differentiable (an integer or bool output never carries one)."""
    nondiff = op.opdef.grad_rule.nondifferentiable
    return [o for k, o in enumerate(op.outputs) if o.dtype.is_floating and k not in nondiff]


def _requiring(ops: Sequence[Operator], sources: set[int], blocked: set[int]) -> set[int]:
    """Ids of the variables whose gradient flows back to a source."""
    req = set(sources) - blocked
    for op in ops:
        if _differentiable(op) and any(id(v) in req for _, _, v in _diff_pairs(op)):
            req.update(id(o) for o in _carries_gradient(op)
                       if (not o.stop_gradient or id(o) in sources) and id(o) not in blocked)
    return req


def _grad_inputs(op: Operator, out_grads: list[Variable | None],
                 req: set[int]) -> list[tuple[Variable, Any]]:
    """Append the gradient ops of `op`; (input variable, its gradient) pairs."""
    opdef = op.opdef
    if opdef.grad_rule.backward_op is not None:
        out_grads = list(out_grads)
        opdef.grad_rule.screen_output_grads(opdef, out_grads)
    filled = out_grads if not opdef.grad_rule.materialize_grads else \
        [g if g is not None else B.full_like(o, fill_value=0.0)
         for g, o in zip(out_grads, op.outputs)]
    in_names = [a.name for a in opdef.inputs]
    needed = [op.inputs[in_names.index(n)] if n in in_names else op.output(n)
              for n in opdef.grad_rule.needs]
    diff = set(opdef.differentiable_inputs)
    needs_input_grad = [spec.name in diff and any(
        v is not None and id(v) in req for v in (x if isinstance(x, list) else [x]))
        for spec, x in zip(opdef.inputs, op.inputs)]
    results = apply_grad_rule(opdef, needed, filled, op.attrs, needs_input_grad)
    pairs = []
    for k, j, v in _diff_pairs(op):
        g = results[k]
        if j is not None:
            g = None if g is None else g[j]
        pairs.append((v, g))
    return pairs


def _backward(targets: Sequence[Variable], target_grads: Sequence[Any] | None,
              sources: set[int], blocked: set[int]
              ) -> tuple[dict[int, Variable], int, set[str]]:
    """Append gradient ops; (gradients by variable id, ops and var names before)."""
    block: Block = targets[0].block
    program: Program = block.program
    for t in targets:
        if t.block is not block:
            raise ValueError(f"gradients: target '{t.name}' belongs to another program")
    n_ops, n_vars = len(block.ops), set(block.vars)
    forward = block.ops[:n_ops]
    req = _requiring(forward, sources, blocked)
    needed = {id(t) for t in targets}
    path = []
    for op in reversed(forward):
        if _differentiable(op) and any(id(o) in needed and id(o) in req for o in op.outputs):
            path.append(op)
            needed.update(id(v) for _, _, v in _diff_pairs(op) if id(v) in req)
    grads: dict[int, Variable] = {}
    with program_guard(program), static_mode_guard():
        for i, t in enumerate(targets):
            given = None if target_grads is None else target_grads[i]
            if given is not None:
                grads[id(t)] = given
            elif None in t.shape:
                grads[id(t)] = B.full_like(t, fill_value=1.0)
            else:
                grads[id(t)] = block._constant(np.ones(t.shape), t.dtype)
        for op in path:
            out_grads = [grads.get(id(o)) for o in op.outputs]
            if all(g is None for g in out_grads):
                continue
            for v, g in _grad_inputs(op, out_grads, req):
                if g is None or id(v) not in req:
                    continue
                if not isinstance(g, Variable):
                    raise TypeError(f"{op.type}: the gradient rule returned "
                                    f"{type(g).__name__} for '{v.name}', expected a Variable")
                old = grads.get(id(v))
                grads[id(v)] = g if old is None else B.add(old, g)
    return grads, n_ops, n_vars


def _prune(block: Block, n_ops: int, n_vars: set[str], keep: Sequence[Variable]) -> None:
    """Drop gradient ops (appended after op `n_ops`) whose outputs nobody uses."""
    live = {id(v) for v in keep}
    kept = []
    for op in reversed(block.ops[n_ops:]):
        if any(id(o) in live for o in op.outputs):
            kept.append(op)
            live.update(id(v) for v in op.input_vars() + op.outputs)
    block.ops[n_ops:] = kept[::-1]
    for name in [n for n in block.vars if n not in n_vars]:
        if id(block.vars[name]) not in live:
            del block.vars[name]
    block.program._bump()


def _name_grads(block: Block, pairs: Sequence[tuple[Variable, Variable]],
                n_vars: set[str]) -> None:
    """Rename gradients made by this pass ``<var>@GRAD`` (PaddlePaddle's naming) where
    the name is free and the variable is no other variable's gradient."""
    renamed: set[int] = set()
    for v, g in pairs:
        name = v.name + "@GRAD"
        if g is None or g.name in n_vars or g.constant is not None or id(g) in renamed \
                or name in block.vars:
            continue
        del block.vars[g.name]
        g.name = name
        block.vars[name] = g
        renamed.add(id(g))
    block.program._bump()


def append_backward(loss: Variable, parameter_list: Sequence[Any] | None = None,
                    no_grad_set: Sequence[Any] | None = None
                    ) -> list[tuple[Variable, Variable]]:
    """Append the gradient ops of `loss`; returns ``[(parameter, gradient), ...]``.

    Gradients flow to every variable not marked ``stop_gradient`` (parameters, data
    declared with ``stop_gradient=False``); `parameter_list` (Variables or names)
    restricts the returned pairs, `no_grad_set` blocks variables.
    """
    block = loss.block
    blocked = _ids(block, no_grad_set)
    if parameter_list is None:
        params = [p for p in block.all_parameters() if p.trainable]
    else:
        params = [block.var(p) if isinstance(p, str) else p for p in parameter_list]
    produced = {id(o) for op in block.ops for o in op.outputs}
    sources = {id(v) for v in block.vars.values()
               if not v.stop_gradient and id(v) not in produced} | {id(p) for p in params}
    grads, n_ops, n_vars = _backward([loss], None, sources, blocked)
    pairs = [(p, grads[id(p)]) for p in params if id(p) in grads]
    _prune(block, n_ops, n_vars, [g for _, g in pairs])
    _name_grads(block, pairs, n_vars)
    return pairs


def gradients(targets: Any, inputs: Any, target_gradients: Any = None,
              no_grad_set: Sequence[Any] | None = None) -> list[Variable | None]:
    """Append ops computing d(sum of targets)/d(input) for each input (None when an
    input does not affect the targets). `target_gradients` seeds the targets."""
    targets = list(targets) if isinstance(targets, (list, tuple)) else [targets]
    inputs = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
    if target_gradients is not None:
        target_gradients = list(target_gradients) if isinstance(
            target_gradients, (list, tuple)) else [target_gradients]
        if len(target_gradients) != len(targets):
            raise ValueError(f"gradients: {len(target_gradients)} target_gradients for "
                             f"{len(targets)} targets")
    block = targets[0].block
    grads, n_ops, n_vars = _backward(targets, target_gradients, {id(x) for x in inputs},
                                     _ids(block, no_grad_set))
    result = [grads.get(id(x)) for x in inputs]
    _prune(block, n_ops, n_vars, [g for g in result if g is not None])
    _name_grads(block, list(zip(inputs, result)), n_vars)
    return result


def _ids(block: Block, variables: Sequence[Any] | None) -> set[int]:
    return {id(block.var(v) if isinstance(v, str) else v) for v in variables or ()}
