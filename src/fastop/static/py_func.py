"""``py_func``: a Python function as an operator of a static Program.

Rules (PaddlePaddle's ``py_func``, seeds 000/001):

* ``func(*x)`` runs on every ``Executor.run``; it gets DenseTensors (``np.asarray`` reads
  them without copying, numpy functions take them directly) and returns numpy arrays or
  tensors, one per ``out`` variable. ``out=None`` makes a debugging op: it still runs,
  its result is ignored.
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

import warnings
from typing import Any, Callable, Sequence

import numpy as np

from fastop._core.storage import DenseTensor, as_dtype, from_numpy
from fastop._env import env_flag
from fastop.ops import ArgSpec, TensorMeta
from fastop.static.framework import Operator, Variable, default_main_program

__all__ = ["py_func", "PyFuncOp", "set_strict"]

_strict = env_flag("FASTOP_STRICT")


def set_strict(enabled: bool = True) -> None:
    """Make a py_func result that breaks its declared shape/dtype an error."""
    global _strict
    _strict = bool(enabled)


def _func_name(func: Callable) -> str:
    return getattr(func, "__qualname__", None) or getattr(func, "__name__", None) or repr(func)


def _shape_str(shape: Sequence[Any]) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


class PyFuncOp:
    """The op definition of one py_func call (forward, or the gradient op calling
    ``backward_func``): declared output metas, a Python kernel, no attributes."""

    name = "py_func"
    attrs: dict[str, Any] = {}
    inputs = (ArgSpec("x", variadic=True),)
    outputs = (ArgSpec("out", variadic=True),)
    plugin = "fastop"

    def __init__(self, func: Callable, out_metas: Sequence[TensorMeta],
                 out_names: Sequence[str], *, role: str = "forward",
                 expected: int | None = None, keep: Sequence[int] | None = None,
                 backward_func: Callable | None = None,
                 skip_positions: Sequence[int] = ()) -> None:
        self.func = func
        self.role = role
        self.out_metas = list(out_metas)
        self.out_names = list(out_names)
        self.expected = len(self.out_metas) if expected is None else expected
        self.keep = list(range(len(self.out_metas))) if keep is None else list(keep)
        self.backward_func = backward_func
        self.skip_positions = sorted(skip_positions)
        self.label = ("py_func" if role == "forward" else "py_func_grad") + \
            f"[{_func_name(func)}]"
        # per output, for a fast check: numpy dtype, the shape as a tuple when fully
        # known, else (ndim, positions of the known dims, their sizes)
        self._checks = [(m.dtype.numpy_dtype, None if None in m.shape else tuple(m.shape),
                         len(m.shape), [i for i, d in enumerate(m.shape) if d is not None],
                         [d for d in m.shape if d is not None]) for m in self.out_metas]
        self._single = self.expected == 1 and self.keep == [0]
        self._dtype0, self._shape0 = self._checks[0][:2] if self._checks else (None, None)
        self._warned: set[tuple[str, str]] = set()

    # -- the OpDef interface the IR, backward and executor use --------------------------
    @property
    def grad_rule(self) -> Callable | None:
        return self.backward_func

    differentiable_inputs = ("x",)

    def check_attrs(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if attrs:
            raise TypeError(f"{self.label}: takes no attributes, got {sorted(attrs)}")
        return {}

    def infer_meta(self, metas: Sequence[Any], attrs: dict[str, Any]) -> list[TensorMeta]:
        return list(self.out_metas)

    def runner(self) -> Callable[..., tuple]:
        """The executor's callable: run the function, check and wrap its results."""
        return self._run

    def direct_call(self) -> tuple | None:
        """For one output: ``(func, finish, numpy dtype, ndim, [(position, size)] of the
        known dims)``, so the executor calls the function itself and takes a fresh
        C-contiguous array as declared without Python in between; other results go to
        ``finish(result, tensors)`` (Plan.add_python). None for other arities."""
        if not self._single:
            return None
        np_dtype, _, ndim, positions, sizes = self._checks[0]
        return (self.func, self._finish, np_dtype, ndim, tuple(zip(positions, sizes)))

    # -- running ------------------------------------------------------------------------
    def _run(self, *tensors: Any) -> tuple:
        return self._finish(self.func(*tensors), tensors)

    def _finish(self, result: Any, tensors: Sequence[Any]) -> tuple:
        """The function's result checked against the declaration; the outputs."""
        if self._single:
            # the common case, checked inline: one fresh C-contiguous array as declared
            if type(result) is np.ndarray and result.base is None \
                    and result.dtype == self._dtype0 and result.flags.c_contiguous \
                    and (result.shape == self._shape0 or self._known_dims_fit(result.shape, 0)):
                return (from_numpy(result),)
            if not isinstance(result, (list, tuple)):
                return (self._conform(result, 0, tensors),)
        if self.expected == 0:
            return ()
        values = list(result) if isinstance(result, (list, tuple)) else [result]
        if len(values) != self.expected:
            what = "gradients" if self.role == "backward" else "outputs"
            raise ValueError(
                f"{self.label}: {_func_name(self.func)} returned {len(values)} value(s), "
                f"expected {self.expected} {what}"
                + (f" ({', '.join(self.out_names)})" if self.role == "forward" else ""))
        return tuple([self._conform(values[i], k, tensors)
                      for i, k in zip(self.keep, range(len(self.keep)))])

    def _known_dims_fit(self, shape: tuple, k: int) -> bool:
        """Whether `shape` has output `k`'s declared rank and known dims."""
        ndim, positions, sizes = self._checks[k][2:]
        return len(shape) == ndim and [shape[i] for i in positions] == sizes

    def _conform(self, value: Any, k: int, inputs: Sequence[Any]) -> DenseTensor:
        """Output `k`'s value checked against its declaration, as a DenseTensor."""
        np_dtype, _, ndim, positions, sizes = self._checks[k]
        if type(value) is np.ndarray and value.base is None and value.dtype == np_dtype \
                and value.flags.c_contiguous and self._known_dims_fit(value.shape, k):
            return from_numpy(value)         # fresh memory as declared: no copy, no alias
        meta, name = self.out_metas[k], self.out_names[k]
        if value is None:
            if self.role == "backward" and None not in meta.shape:
                return from_numpy(np.zeros(meta.shape, meta.dtype.numpy_dtype))
            raise ValueError(
                f"{self.label}: {_func_name(self.func)} returned None for '{name}'"
                + (", a gradient that is needed and whose shape "
                   f"{_shape_str(meta.shape)} is not fully known; return an array"
                   if self.role == "backward" else ""))
        if isinstance(value, DenseTensor):
            array, shape = value, value.shape
            if value.dtype != meta.dtype:
                array = self._convert(np.asarray(value), meta, name)
        else:
            array = value if type(value) is np.ndarray else np.asarray(value)
            shape = array.shape
            if array.dtype != meta.dtype.numpy_dtype:
                array = self._convert(array, meta, name)
        if len(shape) != ndim or [shape[i] for i in positions] != sizes:
            self._break_contract(name, f"shape {_shape_str(meta.shape)}",
                                 f"shape {list(shape)}")
        if type(array) is np.ndarray:
            owned = array.base is None       # fresh memory: cannot alias an input
            if not array.flags.c_contiguous:
                array = np.ascontiguousarray(array)
            tensor = from_numpy(array)
        else:
            owned, tensor = False, array if array.is_contiguous() else array.contiguous()
        return tensor if owned or not _aliases(tensor, inputs) else tensor.copy()

    def _convert(self, array: np.ndarray, meta: TensorMeta, name: str) -> np.ndarray:
        try:
            actual = as_dtype(array.dtype).name
        except TypeError:
            actual = str(array.dtype)
        self._break_contract(name, f"dtype {meta.dtype.name}", f"dtype {actual}",
                             f"converting it to {meta.dtype.name}")
        return array.astype(meta.dtype.numpy_dtype)

    def _break_contract(self, name: str, declared: str, actual: str,
                        resolution: str = "using the returned value") -> None:
        message = (f"{self.label}: '{name}' was declared with {declared} but "
                   f"{_func_name(self.func)} returned {actual}")
        if _strict:
            raise ValueError(message + " (strict mode)")
        if (name, declared) not in self._warned:
            self._warned.add((name, declared))
            warnings.warn(f"{message}; {resolution}", RuntimeWarning,
                          stacklevel=6)

    # -- gradient -----------------------------------------------------------------------
    def build_grad(self, op: Operator, out_grads: Sequence[Variable | None],
                   needs_grad: Sequence[bool]) -> list[Variable | None]:
        """Append the gradient op (calling ``backward_func``); one grad per input."""
        xs: list[Variable] = op.inputs[0]
        visible = [v for i, v in enumerate(xs + op.outputs) if i not in self.skip_positions]
        wanted = [i for i, need in enumerate(needs_grad) if need]
        gop = PyFuncOp(self.backward_func,
                       [TensorMeta(xs[i].shape, xs[i].dtype) for i in wanted],
                       [xs[i].name + "@GRAD" for i in wanted], role="backward",
                       expected=len(xs), keep=wanted)
        grads = op.block.append_op(gop, [visible + list(out_grads)])
        grads = list(grads) if isinstance(grads, tuple) else [grads]
        result: list[Variable | None] = [None] * len(xs)
        for i, g in zip(wanted, grads):
            result[i] = g
        return result


def _aliases(tensor: DenseTensor, inputs: Sequence[Any]) -> bool:
    """Whether `tensor` shares memory with an input (whose buffer the executor reuses)."""
    start, end = tensor.data_ptr, tensor.data_ptr + tensor.nbytes
    for x in inputs:
        if isinstance(x, DenseTensor) and x.data_ptr < end and start < x.data_ptr + x.nbytes:
            return True
    return False


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
    op = PyFuncOp(func, [TensorMeta(v.shape, v.dtype) for v in outs], [v.name for v in outs],
                  backward_func=backward_func, skip_positions=positions)
    default_main_program().current_block().append_op(op, [xs], outputs=outs)
    return out
