"""``py_func``: a Python function as an operator of a static Program.

Each ``py_func`` call makes an op definition (:class:`PyFuncOp`, an ordinary
:class:`~fastop.ops.OpDef`, not added to the global registry) carrying its functions:
inputs ``x0 .. x{n-1}``, outputs ``out0 .. out{m-1}`` with the declared metas, ``func``
as its Python kernel and, with ``backward_func``, a gradient rule appending the
backward op. The executor, ``append_backward``, saving and the profiler treat it like
any op. Rules (PaddlePaddle's ``py_func``, seeds 000/001):

* ``func(*x)`` runs on every ``Executor.run`` on numpy arrays (views of the inputs) and
  returns one array per ``out`` variable. ``out=None`` makes a debugging op: it still
  runs, its result is ignored; it is ordered (``OpDef.ordered``): the executor runs such
  ops on the calling thread in program order, never beside other ops.
* The declared ``out`` shape/dtype is a contract: a result whose known dims or dtype
  differ warns once (naming op, variable, declared and actual) and is an error in
  strict mode (:func:`set_strict`, or ``FASTOP_STRICT=1``); a wrong count of results
  is always an error.
* ``backward_func`` receives forward inputs + forward outputs (minus
  ``skip_vars_in_backward_input``, which must be among them) + output gradients (None
  for an output without gradient), and returns one gradient per input (None for an
  input without gradient).
"""
from __future__ import annotations

import itertools
import warnings
from typing import Any, Callable, Sequence

import numpy as np

from fastop._core.storage import DenseTensor, as_dtype
from fastop._env import env_flag
from fastop._errors import caller_outside_fastop
from fastop.ops import ArgSpec, OpDef, TensorMeta
from fastop.ops._dispatch import mode_guard
from fastop.static.framework import Variable, default_main_program

__all__ = ["py_func", "PyFuncOp", "PyFuncSource", "set_strict"]

_strict = env_flag("FASTOP_STRICT")
_ids = itertools.count()


def set_strict(enabled: bool = True) -> None:
    """Make a py_func result that breaks its declared shape/dtype an error."""
    global _strict
    _strict = bool(enabled)


def _func_name(func: Callable) -> str:
    return getattr(func, "__qualname__", None) or getattr(func, "__name__", None) or repr(func)


def _shape_str(shape: Sequence[Any]) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


class PyFuncSource:
    """What a py_func op is made of: enough to rebuild it (saving a program records it
    with its functions' ``module:qualname``).

    ``role`` is "forward" (``func``; ``backward_func`` its gradient) or "backward" (the
    gradient op calling ``backward_func``: it returns ``expected`` values, of which the
    outputs are those at ``keep``). Inputs from ``optional_from`` on may be None (the
    output gradients a backward op receives). A plain class, not a dataclass: making
    one at import cost 1.5M instructions of ``import fastop``."""

    __slots__ = ("func", "in_metas", "in_names", "out_metas", "out_names", "role",
                 "backward_func", "skip_positions", "expected", "keep", "optional_from")

    def __init__(self, func: Callable, in_metas: list[TensorMeta], in_names: list[str],
                 out_metas: list[TensorMeta], out_names: list[str], role: str = "forward",
                 backward_func: Callable | None = None,
                 skip_positions: list[int] | None = None, expected: int | None = None,
                 keep: list[int] | None = None, optional_from: int | None = None) -> None:
        self.func, self.in_metas, self.in_names = func, in_metas, in_names
        self.out_metas, self.out_names, self.role = out_metas, out_names, role
        self.backward_func = backward_func
        self.skip_positions = [] if skip_positions is None else skip_positions
        self.expected, self.keep, self.optional_from = expected, keep, optional_from

    @property
    def n_inputs(self) -> int:
        return len(self.in_metas)


class PyFuncOp(OpDef):
    """The op definition of one py_func call (forward, or the gradient op calling
    ``backward_func``). Its results follow py_func's contract (:meth:`explain_results`)
    instead of the registry's strict check."""

    def __init__(self, source: PyFuncSource) -> None:
        n_opt = source.optional_from
        inputs = tuple(ArgSpec(f"x{i}", optional=n_opt is not None and i >= n_opt)
                       for i in range(source.n_inputs))
        outputs = tuple(ArgSpec(f"out{i}") for i in range(len(source.out_metas)))
        label = "py_func" if source.role == "forward" else "py_func_grad"
        super().__init__(f"{label}::{_identifier(_func_name(source.func))}_{next(_ids)}",
                         inputs, outputs, {}, doc=f"{label}[{_func_name(source.func)}]",
                         source=source, ordered=not outputs)   # out=None: a debug op
        self.meta(self._declared)
        self.kernel()(source.func)
        if source.backward_func is not None:
            self._attach_grad()
        self._warned: set[tuple[str, str]] = set()
        self.expected = len(outputs) if source.expected is None else source.expected
        self.keep = list(range(len(outputs))) if source.keep is None else source.keep

    @property
    def label(self) -> str:
        return self.doc

    def _declared(self, *metas: Any) -> list[TensorMeta]:
        return list(self.source.out_metas)

    # -- the result contract ----------------------------------------------------------
    def explain_results(self, metas: Sequence[TensorMeta], result: Any) -> list[Any]:
        """Results the C check refused: a wrong count is an error; a dtype or known dim
        that differs from the declaration warns (an error in strict mode) and the value
        is taken (converted to the declared dtype); a None gradient is zeros when its
        shape is known."""
        if not self.outputs:
            return []
        values = list(result) if isinstance(result, (list, tuple)) else [result]
        if len(values) != self.expected:
            what = "gradients" if self.source.role == "backward" else "outputs"
            raise ValueError(
                f"{self.label}: {_func_name(self.source.func)} returned {len(values)} "
                f"value(s), expected {self.expected} {what}"
                + (f" ({', '.join(self.source.out_names)})"
                   if self.source.role == "forward" else ""))
        return [self._conform(values[i], k) for k, i in enumerate(self.keep)]

    def _conform(self, value: Any, k: int) -> Any:
        meta, name = self.source.out_metas[k], self.source.out_names[k]
        if value is None:
            if self.source.role == "backward" and None not in meta.shape:
                return np.zeros(meta.shape, meta.dtype.numpy_dtype)
            raise ValueError(
                f"{self.label}: {_func_name(self.source.func)} returned None for '{name}'"
                + (", a gradient that is needed and whose shape "
                   f"{_shape_str(meta.shape)} is not fully known; return an array"
                   if self.source.role == "backward" else ""))
        array = value if isinstance(value, DenseTensor) else np.asarray(value)
        actual = array.dtype.name if isinstance(array, DenseTensor) else str(array.dtype)
        if actual != meta.dtype.name:
            self._break_contract(name, f"dtype {meta.dtype.name}", f"dtype {actual}",
                                 f"converting it to {meta.dtype.name}")
            array = np.asarray(array).astype(meta.dtype.numpy_dtype)
        shape = list(array.shape)
        if len(shape) != len(meta.shape) or any(
                d is not None and d != s for d, s in zip(meta.shape, shape)):
            self._break_contract(name, f"shape {_shape_str(meta.shape)}", f"shape {shape}")
        return array

    def _break_contract(self, name: str, declared: str, actual: str,
                        resolution: str = "using the returned value") -> None:
        message = (f"{self.label}: '{name}' was declared with {declared} but "
                   f"{_func_name(self.source.func)} returned {actual}")
        if _strict:
            raise ValueError(message + " (strict mode)")
        if (name, declared) not in self._warned:
            self._warned.add((name, declared))
            warnings.warn(f"{message}; {resolution}", RuntimeWarning,
                          stacklevel=caller_outside_fastop())    # the user's exe.run line

    # -- gradient -----------------------------------------------------------------------
    def _attach_grad(self) -> None:
        source = self.source
        names = [a.name for a in self.inputs] + [a.name for a in self.outputs]
        visible = tuple(n for i, n in enumerate(names) if i not in source.skip_positions)

        def py_func_grad(*values: Any, needs_input_grad: Sequence[bool] | None = None
                         ) -> list[Any]:
            """Append the op calling backward_func; one gradient per input."""
            forward, grads = values[:len(visible)], values[len(visible):]
            wanted = [i for i, need in
                      enumerate(needs_input_grad or [True] * source.n_inputs) if need]
            grad_op = PyFuncOp(PyFuncSource(
                source.backward_func,
                [_meta(v) for v in forward] + [_meta(g) for g in grads],
                [f"x{i}" for i in range(len(forward) + len(grads))],
                [source.in_metas[i] for i in wanted],
                [f"{source.in_names[i]}@GRAD" for i in wanted], role="backward",
                expected=source.n_inputs, keep=wanted, optional_from=len(forward)))
            with mode_guard("static"):
                made = grad_op(*forward, *grads)
            made = list(made) if isinstance(made, tuple) else [made]
            result: list[Any] = [None] * source.n_inputs
            for i, g in zip(wanted, made):
                result[i] = g
            return result

        self.grad(needs=visible, materialize_grads=False)(py_func_grad)


def _meta(value: Any) -> TensorMeta | None:
    return None if value is None else TensorMeta(value.shape, value.dtype)


def _identifier(name: str) -> str:
    cleaned = "".join(c if c.isalnum() else "_" for c in name).strip("_") or "func"
    return cleaned if not cleaned[0].isdigit() else "f" + cleaned


def _as_vars(value: Any, what: str) -> list[Variable]:
    items = list(value) if isinstance(value, (list, tuple)) else [value]
    for v in items:
        if not isinstance(v, Variable):
            raise TypeError(f"py_func: {what} must be a Variable or a list/tuple of "
                            f"Variables, got {type(v).__name__}")
    return items


def py_func(func: Callable, x: Any, out: Any, backward_func: Callable | None = None,
            skip_vars_in_backward_input: Any = None) -> Any:
    """Append a Python op computing ``out = func(*x)``; returns `out`.

    See the module docstring for every rule. Example (seed 001)::

        hidden = fastop.static.py_func(func=np.tanh, x=hidden, out=new_hidden,
                                       backward_func=tanh_grad,
                                       skip_vars_in_backward_input=hidden)
    """
    if not callable(func):
        raise TypeError(f"py_func: func must be callable, got {type(func).__name__}")
    if backward_func is not None and not callable(backward_func):
        raise TypeError(f"py_func: backward_func must be callable or None, got "
                        f"{type(backward_func).__name__}")
    xs = _as_vars(x, "x") if x is not None else []
    outs = [] if out is None else _as_vars(out, "out")
    skip = [] if skip_vars_in_backward_input is None else \
        _as_vars(skip_vars_in_backward_input, "skip_vars_in_backward_input")
    candidates = xs + outs
    positions = []
    for v in skip:
        index = next((i for i, c in enumerate(candidates) if c is v), None)
        if index is None:
            raise ValueError(f"py_func: skip_vars_in_backward_input contains "
                             f"'{v.name}', which is neither an input x nor an output out "
                             f"of this py_func")
        positions.append(index)
    op = PyFuncOp(PyFuncSource(func, [_meta(v) for v in xs], [v.name for v in xs],
                               [_meta(v) for v in outs], [v.name for v in outs],
                               backward_func=backward_func, skip_positions=positions))
    default_main_program().current_block().append_op(op, xs, outputs=outs)
    return out
