"""The executor front end: lowers a Program to a Cython :class:`~fastop._core.executor.Plan`
(once per program version and feed/fetch signature) and runs it; the :class:`Scope`
that holds persistable values (parameters) across runs.

Lowering: ops are scheduled in dependency order (program order unless a variable is
read before the op that writes it; a cycle is an error); every variable gets a slot;
each op becomes a C kernel record (its ``infer``/kernel pointers and packed attrs), a
C view record (reshape, transpose, slice, broadcast_to, ...: the output views the
input's memory) or a Python kernel (py_func and plugin ops alike): a
:class:`~fastop._core.kernel.PythonKernel` bound to the op's attributes and its output
variables' metas, whose results the one C result checker verifies — the same call and
check as eager mode.

Running: a repeated run with the same fetch list goes straight to the previous plan,
whose ``try_run`` checks the feeds' names, dtypes, shapes and layout in C; anything
else takes the signature path (convert feeds, look the plan up, compile on a miss).
"""
from __future__ import annotations

import contextlib
import functools
import heapq
import operator
import weakref
from collections import defaultdict
from typing import Any, Iterator, Sequence

import numpy as np

from fastop._core.executor import SLOT_KINDS, Plan
from fastop._core.kernel import CKernel, PythonKernel
from fastop._core.storage import DenseTensor, as_dtype, from_numpy
from fastop.ops._registry import TensorMeta, add_note, did_you_mean
from fastop.static.framework import Operator, Program, Variable, default_main_program

__all__ = ["Executor", "Scope", "global_scope", "scope_guard"]

_MAX_PLANS = 32   # compiled signatures kept per program
_MAX_OPERANDS = 16  # inputs/outputs a C kernel record holds (executor.pxd)


class Scope:
    """Persistable values by name (DenseTensors), shared by the runs that use it."""

    def __init__(self) -> None:
        self._vars: dict[str, DenseTensor] = {}

    def find_var(self, name: str) -> DenseTensor | None:
        """The tensor of `name` (read it with ``np.asarray``), or None."""
        return self._vars.get(name)

    def __getitem__(self, name: str) -> np.ndarray:
        try:
            return np.asarray(self._vars[name])
        except KeyError:
            hint = did_you_mean(name, self._vars)
            raise KeyError(f"the scope has no variable '{name}'{hint}") from None

    def set(self, name: str, value: Any) -> None:
        """Store a copy of `value` (in the existing buffer when shape and dtype match)."""
        array = np.asarray(value)
        current = self._vars.get(name)
        if current is not None and list(array.shape) == current.shape \
                and current.dtype == array.dtype:
            np.copyto(np.asarray(current), array)
        else:
            self._vars[name] = from_numpy(np.array(array, order="C", copy=True))

    def __contains__(self, name: str) -> bool:
        return name in self._vars

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._vars))

    def __len__(self) -> int:
        return len(self._vars)

    def names(self) -> list[str]:
        return list(self._vars)

    def drop(self, name: str) -> None:
        self._vars.pop(name, None)

    def clear(self) -> None:
        self._vars.clear()

    def __repr__(self) -> str:
        return f"<Scope {len(self._vars)} variables>"


_global_scope = Scope()


def global_scope() -> Scope:
    """The scope executors use unless given another."""
    return _global_scope


@contextlib.contextmanager
def scope_guard(scope: Scope) -> Iterator[None]:
    """Make `scope` the global scope inside the block."""
    global _global_scope
    saved, _global_scope = _global_scope, scope
    try:
        yield
    finally:
        _global_scope = saved


# ----------------------------------------------------------------------------- scheduling

def _schedule(ops: Sequence[Operator], sources: set[str]) -> list[int]:
    """Op indices in dependency order (program order where consistent).

    A read depends on the latest earlier write of the variable; a read of a variable
    that is not a source (feed, persistable, constant) and is written only later
    depends on that later write. Writes wait for earlier writes and reads of the
    previous value. A cycle raises, naming its ops and variables.
    """
    n = len(ops)
    deps: list[dict[int, str]] = [{} for _ in range(n)]
    writers: dict[str, list[int]] = defaultdict(list)
    for i, op in enumerate(ops):
        for v in op.outputs:
            writers[v.name].append(i)
    last_writer: dict[str, int] = {}
    readers: dict[str, list[int]] = defaultdict(list)
    for i, op in enumerate(ops):
        for v in op.input_vars():
            w = last_writer.get(v.name)
            if w is None and v.name not in sources and writers.get(v.name):
                w = writers[v.name][0]          # read before its write: wait for it
            else:
                readers[v.name].append(i)
            if w is not None and w != i:
                deps[i].setdefault(w, v.name)
        for v in op.outputs:
            prev = last_writer.get(v.name)
            if prev is not None and prev != i:
                deps[i].setdefault(prev, v.name)
            for r in readers.pop(v.name, []):
                if r != i:
                    deps[i].setdefault(r, v.name)
            last_writer[v.name] = i
    waiting = [len(d) for d in deps]
    users: list[list[int]] = [[] for _ in range(n)]
    for i, d in enumerate(deps):
        for j in d:
            users[j].append(i)
    ready = [i for i in range(n) if waiting[i] == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for u in users[i]:
            waiting[u] -= 1
            if waiting[u] == 0:
                heapq.heappush(ready, u)
    if len(order) < n:
        raise ValueError("the program has a cycle: " + _describe_cycle(ops, deps, set(order)))
    return order


def _describe_cycle(ops: Sequence[Operator], deps: list[dict[int, str]], done: set[int]) -> str:
    i = next(k for k in range(len(ops)) if k not in done)
    path: list[int] = []
    while i not in path:
        path.append(i)
        i = next(j for j in deps[i] if j not in done)
    cycle = path[path.index(i):]
    return "; ".join(f"op #{a} ({ops[a]}) needs '{deps[a][b]}' from op #{b}"
                     for a, b in zip(cycle, cycle[1:] + cycle[:1]))


# ----------------------------------------------------------------------------- lowering

class _Compiled:
    """A Plan plus what the front end needs to explain errors."""

    def __init__(self, plan: Plan, labels: list[str]) -> None:
        self.plan = plan
        self.labels = labels

    def annotate(self, exc: BaseException) -> None:
        """Name the op that was running when `exc` was raised."""
        k = self.plan.current_op
        if k >= 0:
            add_note(exc, f"raised while running {self.labels[k]}")


class _Variadic:
    """A Python kernel of an op with variadic inputs: the plan passes flat tensors,
    regrouped here into the op's inputs (a list per variadic input)."""

    __slots__ = ("kernel", "sizes")

    def __init__(self, kernel: PythonKernel, sizes: list[int | None]) -> None:
        self.kernel, self.sizes = kernel, sizes

    def __call__(self, *tensors: Any) -> tuple:
        return self.kernel(*_regroup(tensors, self.sizes))


def _regroup(tensors: Sequence[Any], sizes: Sequence[int | None]) -> list[Any]:
    """Flat tensors back into the op's inputs: a list for each variadic input."""
    grouped, k = [], 0
    for size in sizes:
        grouped.append(tensors[k] if size is None else list(tensors[k:k + size]))
        k += 1 if size is None else size
    return grouped


def _flat_inputs(op: Operator) -> list[Variable | None]:
    flat: list[Variable | None] = []
    for x in op.inputs:
        flat.extend(x) if isinstance(x, list) else flat.append(x)
    return flat


def _view_kernel(op: Operator) -> tuple[CKernel, int] | None:
    """The op's C view kernel (reshape, transpose, slice, broadcast_to, ...) and dtype
    code, if it has one for its input's dtype and its output is a temporary (a
    persistable output keeps its own memory)."""
    kernel = op.opdef.kernels.get("*")
    flat = op.input_vars()
    if isinstance(kernel, CKernel) and kernel.is_view and len(op.outputs) == 1 \
            and not op.outputs[0].persistable and flat and None not in flat \
            and flat[0].dtype.name in kernel.dtypes:
        return kernel, flat[0].dtype.code
    return None


def _c_kernel(op: Operator) -> tuple[CKernel, int] | None:
    """The op's C kernel and the dtype code selecting its function, if it has one for
    the dtype of the kernel's dispatch input."""
    flat = _flat_inputs(op)
    if len(flat) > _MAX_OPERANDS or len(op.outputs) > _MAX_OPERANDS:
        return None
    for kernel in dict.fromkeys(k for k in op.opdef.kernels.values()
                                if isinstance(k, CKernel) and not k.is_view):
        d = kernel.dispatch_input
        dispatch = flat[d].dtype if 0 <= d < len(flat) and flat[d] is not None \
            else op.outputs[0].dtype
        if dispatch.name in kernel.dtypes:
            return kernel, dispatch.code
    return None


def _python_call(op: Operator) -> Any:
    """One Python call per run: the op's Python kernel for its dispatch dtype, bound to
    its attributes and checked against the output variables' metas (what the meta
    function said while the program was built: no meta function runs per call); or
    ``OpDef.invoke`` for a C kernel run where it cannot be a record (it reports a dtype
    it lacks with the registry's error)."""
    opdef, attrs = op.opdef, op.attrs
    sizes = [len(x) if isinstance(x, list) else None for x in op.inputs]
    kernel = opdef.plan.kernels[_dispatch_dtype(op)]
    if kernel is not None and not isinstance(kernel, CKernel):
        metas = [TensorMeta(v.shape, v.dtype) for v in op.outputs]
        bound = PythonKernel(opdef.name, kernel, attrs,
                             [(m.shape, m.dtype.code) for m in metas],
                             functools.partial(opdef.explain_results, metas))
        return bound if all(s is None for s in sizes) else _Variadic(bound, sizes)

    def invoke(*tensors: Any) -> tuple:
        return opdef.invoke(_regroup(tensors, sizes), attrs)
    return invoke


def _dispatch_dtype(op: Operator) -> int:
    """The dtype code selecting the op's kernel: its dispatch input's, else the first
    input's (float32 for an op without inputs), as eager dispatch picks it."""
    plan = op.opdef.plan
    if plan.dispatch_input < len(op.inputs):
        x = op.inputs[plan.dispatch_input]
        if isinstance(x, Variable):
            return x.dtype.code
    flat = op.input_vars()
    return flat[0].dtype.code if flat else 3


class _Folded:
    """Values of ops computed at compile time (all inputs constant) and those ops."""

    def __init__(self, written: dict[str, int]) -> None:
        self.values: dict[str, DenseTensor] = {}
        self.ops: set[int] = set()
        self.written = written

    def value(self, var: Variable) -> DenseTensor | None:
        """The constant value of `var`: folded, or a program constant no op writes."""
        if var.name in self.values:
            return self.values[var.name]
        if var.constant is not None and not self.written[var.name]:
            return from_numpy(np.asarray(var.constant, order="C"))
        return None

    def bound(self, var: Variable) -> DenseTensor:
        """The value a constant slot starts every run with."""
        if var.name in self.values:
            return self.values[var.name]
        return from_numpy(np.asarray(var.constant, order="C"))


def _fold_constants(ops: Sequence[Operator], order: Sequence[int],
                    sources: set[str]) -> _Folded:
    """Run, once, the built-in (``fastop::``, known pure) ops whose inputs are all
    constants, such as the scaling of a gradient seed: their outputs become constants
    of the plan. Ops without inputs, ops writing persistable or fed variables, and ops
    that raise are left to run (and report) normally."""
    written: dict[str, int] = defaultdict(int)
    for op in ops:
        for v in op.outputs:
            written[v.name] += 1
    folded = _Folded(written)
    for i in order:
        op = ops[i]
        ins = op.input_vars()
        if op.opdef.namespace != "fastop" or not ins or any(
                o.persistable or o.name in sources or written[o.name] > 1 for o in op.outputs):
            continue
        values = [folded.value(v) for v in ins]
        if any(v is None for v in values):
            continue
        by_var = dict(zip(map(id, ins), values))
        grouped = [[by_var[id(v)] for v in x] if isinstance(x, list)
                   else None if x is None else by_var[id(x)] for x in op.inputs]
        try:
            results = op.opdef.invoke(grouped, op.attrs)
        except Exception:
            continue
        folded.values.update((o.name, r) for o, r in zip(op.outputs, results))
        folded.ops.add(i)
    return folded


def _copies_needed(ops: Sequence[Operator], order: Sequence[int], inline: Sequence[bool],
                   fetch_names: Sequence[str]) -> set[int]:
    """Positions (in `order`) of the view and Python ops whose outputs must be copies.

    Such an op's output may share memory with its inputs (a reshape, a py_func
    returning its argument). When the memory is a persistable's, and an op updates
    that persistable in place (an optimizer step) while the output is still to be
    read, the reader would see the new value instead of the one the program computed
    from: the op then copies its outputs. `inline[k]`: the op at position k writes
    fresh memory (a C kernel).
    """
    updates: dict[str, list[int]] = defaultdict(list)   # persistable -> positions writing it
    for k, i in enumerate(order):
        for v in ops[i].outputs:
            if v.persistable:
                updates[v.name].append(k)
    if not updates:
        return set()
    shares: dict[str, tuple[frozenset[str], int]] = {}  # var -> (persistables, producer)
    copies: set[int] = set()

    def check(name: str, at: int) -> None:
        roots, made = shares.get(name, (frozenset(), -1))
        if any(made < u < at for p in roots for u in updates[p]):
            copies.add(made)
    for k, i in enumerate(order):
        op = ops[i]
        ins = op.input_vars()
        for v in ins:
            check(v.name, k)
        roots: frozenset[str] = frozenset()
        if not inline[k]:
            roots = frozenset().union(
                *(shares.get(v.name, (frozenset(),))[0] for v in ins),
                (v.name for v in ins if v.name in updates))
        for v in op.outputs:
            if not v.persistable:
                shares[v.name] = (roots, k)
    for name in fetch_names:
        check(name, len(order))
    return copies


class _Copying:
    """A Python op's callable whose outputs are copied (see :func:`_copies_needed`)."""

    __slots__ = ("fn",)

    def __init__(self, fn: Any) -> None:
        self.fn = fn

    def __call__(self, *tensors: Any) -> tuple:
        return tuple(t.copy() for t in self.fn(*tensors))


def _compile(program: Program, feeds: dict[str, Any],
             fetch_names: Sequence[str]) -> _Compiled:
    block = program.global_block()
    ops = block.ops
    _check_feeds(block, ops, feeds)
    for name in fetch_names:
        if name not in block.vars:
            hint = did_you_mean(name, block.vars)
            raise ValueError(f"fetch_list: the program has no variable '{name}'{hint}")
    sources = {v.name for v in block.vars.values()
               if v.persistable or v.constant is not None} | set(feeds)
    order = _schedule(ops, sources)
    folded = _fold_constants(ops, order, sources)
    order = [i for i in order if i not in folded.ops]
    labels = [f"op #{i} of the program: {ops[i]}" for i in order]

    views = [_view_kernel(ops[i]) for i in order]
    lowered = [None if v is not None else _c_kernel(ops[i]) for v, i in zip(views, order)]
    copies = _copies_needed(ops, order, [c is not None for c in lowered], fetch_names)
    views = [None if k in copies else v for k, v in enumerate(views)]
    writers: dict[str, list[int]] = defaultdict(list)
    first_access: dict[str, tuple[str, int]] = {}
    for k, i in enumerate(order):
        for v in ops[i].input_vars():
            first_access.setdefault(v.name, ("read", k))
        for v in ops[i].outputs:
            writers[v.name].append(k)
            first_access.setdefault(v.name, ("write", k))
    names: list[str] = []
    slot: dict[str, int] = {}
    for k, i in enumerate(order):
        for v in ops[i].input_vars() + ops[i].outputs:
            if v.name not in slot:
                slot[v.name] = len(names)
                names.append(v.name)
    for name in list(fetch_names) + list(feeds):   # every feed: the plan checks them all
        if name not in slot:
            slot[name] = len(names)
            names.append(name)

    fetched = set(fetch_names)
    kinds, persists, consts = [], [], []
    for name in names:
        var = block.vars[name]
        if var.constant is not None or name in folded.values:
            kinds.append("const")
            consts.append(name)
        elif name in feeds:
            kinds.append("feed")
        elif var.persistable:
            kinds.append("persist")
            access, k = first_access.get(name, ("read", -1))
            persists.append((name, slot[name], labels[k] if access == "read" and k >= 0
                             else "fetch_list" if access == "read" else None))
        elif writers.get(name) and first_access[name][0] == "read":
            k = first_access[name][1]
            raise ValueError(f"variable '{name}' ({var.dtype.name}{var.shape}) is read by "
                             f"{labels[k]} before any op writes it; feed it, or make it a "
                             f"persistable or a constant")
        elif writers.get(name):
            if len(writers[name]) == 1 and views[writers[name][0]] is not None:
                kinds.append("view")
            elif any(lowered[k] is None for k in writers[name]):
                kinds.append("external")
            elif name in fetched or len(writers[name]) > 1:
                kinds.append("fresh")
            else:
                kinds.append("arena")
        else:
            access, k = first_access.get(name, ("read", -1))
            need = labels[k] if k >= 0 else "fetch_list"
            what = "static.data variable" if var.is_data else "variable"
            raise ValueError(f"missing feed: {what} '{name}' ({var.dtype.name}"
                             f"{var.shape}) is needed by {need} but is neither fed nor "
                             f"computed by an op; pass feed={{'{name}': array}}")

    plan = Plan(names, [SLOT_KINDS[k] for k in kinds])
    for name in consts:
        plan.set_const(slot[name], folded.bound(block.vars[name]))
    for k, i in enumerate(order):
        op = ops[i]
        outs = [slot[v.name] for v in op.outputs]
        choice = lowered[k]
        if views[k] is not None and kinds[slot[op.outputs[0].name]] == "view":
            plan.add_ckernel(views[k][0], views[k][1], [slot[v.name] for v in op.input_vars()],
                             outs, op.attrs, op.opdef)
            continue
        if choice is not None:      # an absent optional input is slot -1 (a NULL view)
            plan.add_ckernel(choice[0], choice[1],
                             [-1 if v is None else slot[v.name] for v in _flat_inputs(op)],
                             outs, op.attrs, op.opdef)
            continue
        ins = [-1 if v is None else slot[v.name] for v in _flat_inputs(op)]
        call = _python_call(op)
        plan.add_python(_Copying(call) if k in copies else call, ins, outs, op.opdef)
    plan.set_io([(name, slot[name], value) for name, value in feeds.items()],
                persists, [slot[n] for n in fetch_names])
    return _Compiled(plan, labels)


def _check_feeds(block: Any, ops: Sequence[Operator], feeds: dict[str, Any]) -> None:
    for name, value in feeds.items():
        var = block.vars.get(name)
        if var is None:
            hint = did_you_mean(name, block.vars)
            raise ValueError(f"feed: the program has no variable '{name}'{hint}")
        reader = next((f" (read by op #{i}: {op})" for i, op in enumerate(ops)
                       if any(v is var for v in op.input_vars())), "")
        if var.constant is not None:
            raise ValueError(f"feed: '{name}' is a constant of the program{reader}")
        try:
            dtype = as_dtype(value.dtype)
        except TypeError:
            dtype = None
        if dtype != var.dtype:
            got = value.dtype if dtype is None else dtype.name
            raise TypeError(f"feed '{name}': expected dtype {var.dtype.name} (as declared), "
                            f"got {got}{reader}")
        shape = list(value.shape)
        if len(shape) != var.ndim or any(d is not None and d != s
                                         for d, s in zip(var.shape, shape)):
            declared = "[" + ", ".join("None" if d is None else str(d) for d in var.shape) + "]"
            raise ValueError(f"feed '{name}': expected shape {declared} (as declared), got "
                             f"{shape}{reader}")


# ----------------------------------------------------------------------------- Executor

def _feed_value(block: Any, name: str, value: Any) -> Any:
    """A C-contiguous array or tensor for a fed value (lists take the variable's dtype;
    byte-swapped arrays are converted to native order)."""
    if isinstance(value, np.ndarray):
        if not value.dtype.isnative:
            return np.ascontiguousarray(value, dtype=value.dtype.newbyteorder("="))
        return value if value.flags.c_contiguous else np.ascontiguousarray(value)
    if isinstance(value, DenseTensor):
        return value if value.is_contiguous() else value.contiguous()
    var = block.vars.get(name)
    try:
        return np.asarray(value, dtype=None if var is None else var.dtype.numpy_dtype,
                          order="C")
    except (TypeError, ValueError) as e:
        declared = "" if var is None else f" (declared {var.dtype.name})"
        raise type(e)(f"feed '{name}': cannot read {value!r:.60} as an array{declared}: "
                      f"{e}") from None


def _fetch_name(item: Any) -> str:
    if isinstance(item, Variable):
        return item.name
    if isinstance(item, str):
        return item
    raise TypeError(f"fetch_list items are Variables or names, got {type(item).__name__}")


class _ProgramPlans:
    """An executor's compiled plans of one program version, by feed/fetch signature, and
    the last one used with the fetch list it was used with (the fast path)."""

    __slots__ = ("ref", "version", "plans", "last", "last_fetch")

    def __init__(self, program: Program) -> None:
        self.ref = weakref.ref(program)
        self.version = program._version
        self.plans: dict[tuple, _Compiled] = {}
        self.last: _Compiled | None = None
        self.last_fetch: tuple = ()


class Executor:
    """Runs Programs: ``Executor(place).run(program, feed, fetch_list)``.

    A program is compiled once per (program version, feed names/shapes/dtypes, fetch
    names) and the compiled plan reused; fetches come back as numpy arrays (DenseTensors
    with ``return_numpy=False``). ``feed_var_name``, ``fetch_var_name`` and
    ``use_program_cache`` are accepted for PaddlePaddle compatibility (plans are always
    cached). Every op of the program runs on every run, as in PaddlePaddle.
    """

    def __init__(self, place: Any = None) -> None:
        self.place = place
        # id(program) -> its compiled plans (for its current version)
        self._plans: dict[int, _ProgramPlans] = {}

    def run(self, program: Program | None = None, feed: dict[str, Any] | None = None,
            fetch_list: Sequence[Any] | None = None, feed_var_name: str = "feed",
            fetch_var_name: str = "fetch", scope: Scope | None = None,
            return_numpy: bool = True, use_program_cache: bool = True) -> list[Any]:
        if program is None:
            program = default_main_program()
        elif not isinstance(program, Program):
            raise TypeError(f"Executor.run: expected a Program, got {type(program).__name__}")
        if feed is None:
            feed = {}
        fetch = () if fetch_list is None else fetch_list \
            if type(fetch_list) in (list, tuple) else list(fetch_list)
        scope_vars = (_global_scope if scope is None else scope)._vars
        # fast path: the plan of the previous run, if the fetch list holds the same
        # items and the feeds have its signature (the plan checks them in C)
        entry = self._plans.get(id(program))
        if entry is not None and entry.version == program._version \
                and entry.ref() is program and entry.last is not None and type(feed) is dict \
                and len(fetch) == len(entry.last_fetch) \
                and all(map(operator.is_, fetch, entry.last_fetch)):
            compiled = entry.last
            try:
                outs = compiled.plan.try_run(feed, scope_vars)
            except BaseException as exc:
                compiled.annotate(exc)
                raise
            if outs is not None:
                return [t.numpy() for t in outs] if return_numpy else outs
        compiled, arrays = self._compiled(program, feed, fetch)
        try:
            outs = compiled.plan.run(arrays, scope_vars)
        except BaseException as exc:
            compiled.annotate(exc)
            raise
        return [t.numpy() for t in outs] if return_numpy else outs

    def _compiled(self, program: Program, feed: dict[str, Any],
                  fetch: Sequence[Any]) -> tuple[_Compiled, dict[str, Any]]:
        """The plan for this feed/fetch signature (compiled on first use; it becomes
        the program's fast-path plan) and the feeds as C-contiguous arrays or tensors
        (lists take the variable's dtype)."""
        arrays: dict[str, Any] = {}
        signature = []
        for name, value in feed.items():
            value = _feed_value(program.global_block(), name, value)
            signature.append((name, tuple(value.shape), value.dtype))
            arrays[name] = value
        key = (tuple(signature), tuple(map(_fetch_name, fetch)))
        entry = self._cache(program)
        compiled = entry.plans.get(key)
        if compiled is None:
            compiled = _compile(program, arrays, key[1])
            if len(entry.plans) >= _MAX_PLANS:
                entry.plans.pop(next(iter(entry.plans)))
            entry.plans[key] = compiled
        entry.last, entry.last_fetch = compiled, tuple(fetch)
        return compiled, arrays

    def _cache(self, program: Program) -> _ProgramPlans:
        """The compiled plans of `program`'s current version."""
        entry = self._plans.get(id(program))
        if entry is None or entry.ref() is not program or entry.version != program._version:
            entry = _ProgramPlans(program)
            self._plans = {k: v for k, v in self._plans.items() if v.ref() is not None}
            self._plans[id(program)] = entry
        return entry

    def plan_of(self, program: Program, feed: dict[str, Any] | None = None,
                fetch_list: Sequence[Any] | None = None) -> Plan | None:
        """The compiled plan used for this signature (after a run), for inspection."""
        block = program.global_block()
        values = {n: _feed_value(block, n, v) for n, v in (feed or {}).items()}
        signature = tuple((n, tuple(v.shape), v.dtype) for n, v in values.items())
        compiled = self._cache(program).plans.get(
            (signature, tuple(map(_fetch_name, fetch_list or ()))))
        return None if compiled is None else compiled.plan

    def close(self) -> None:
        self._plans = {}
