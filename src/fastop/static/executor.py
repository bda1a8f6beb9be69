"""The executor front end: lowers a Program to a Cython :class:`~fastop._core.executor.Plan`
(once per program version and feed/fetch signature) and runs it; the :class:`Scope`
that holds persistable values (parameters) across runs.

Lowering: ops are scheduled in dependency order (program order unless a variable is
read before the op that writes it; a cycle is an error); every variable gets a slot;
each op runs the kernel its call plan chooses (``CallPlan.choose``: the same choice as
an eager call's and the backward's), as a C kernel record (its ``infer``/kernel pointers and packed attrs), a
C view record (reshape, transpose, slice, broadcast_to, ...: the output views the
input's memory) or a Python kernel (py_func and plugin ops alike): a
:class:`~fastop._core.kernel.PythonKernel` bound to the op's attributes and its output
variables' metas, whose results the one C result checker verifies — the same call and
check as eager mode.

Running: a repeated run with the same fetch list goes straight to the previous plan,
whose ``try_run`` checks the feeds' names, dtypes, shapes and layout in C; anything
else takes the signature path (convert feeds, look the plan up, compile on a miss).

Caching keeps no program alive (weak references; fetch lists remembered by id), so a
dropped program and its plans are freed. Each signature's plans are a pool: runs of
one program from several threads each take a plan of their own.

Independent ops run at once on fastop's thread pool (``Executor(num_threads=...)``,
default the processors this process may use; the plan decides which ops after timing
its first run: see :mod:`fastop._core.executor`).
"""
from __future__ import annotations

import contextlib
import functools
import heapq
import threading
import weakref
from collections import defaultdict
from typing import Any, Iterator, Sequence

import numpy as np

from fastop._core.executor import SLOT_KINDS, FastPath, Plan
from fastop._core.kernel import CKernel, PythonKernel
from fastop._core.parallel import num_processors
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

def _schedule(ops: Sequence[Operator], ins_of: Sequence[list[Variable]],
              sources: set[str]) -> list[int]:
    """Op indices in dependency order (program order where consistent).

    A read depends on the latest earlier write of the variable; a read of a variable
    that is not a source (feed, persistable, constant) and is written only later
    depends on that later write. Writes wait for earlier writes and reads of the
    previous value. A cycle raises, naming its ops and variables. `ins_of[i]`: op i's
    input Variables.
    """
    n = len(ops)
    deps: list[list[tuple[int, str]]] = [[] for _ in range(n)]   # (op waited for, var)
    first_writer: dict[str, int] = {}
    for i, op in enumerate(ops):
        for v in op.outputs:
            first_writer.setdefault(v.name, i)
    last_writer: dict[str, int] = {}
    readers: dict[str, list[int]] = defaultdict(list)
    in_order = True                     # every dependency points backward
    for i, op in enumerate(ops):
        waits = deps[i]
        for v in ins_of[i]:
            name = v.name
            w = last_writer.get(name)
            if w is None and name not in sources and name in first_writer:
                w = first_writer[name]          # read before its write: wait for it
            else:
                readers[name].append(i)
            if w is not None and w != i:
                waits.append((w, name))
                in_order = in_order and w < i
        for v in op.outputs:
            name = v.name
            prev = last_writer.get(name)
            if prev is not None and prev != i:
                waits.append((prev, name))
            for r in readers.pop(name, ()):
                if r != i:
                    waits.append((r, name))
                    in_order = in_order and r < i
            last_writer[name] = i
    if in_order:
        return list(range(n))
    waiting = [len(d) for d in deps]
    users: list[list[int]] = [[] for _ in range(n)]
    for i, d in enumerate(deps):
        for j, _ in d:
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
        raise ValueError("the program has a cycle: " + _describe_cycle(
            ops, [dict(reversed(d)) for d in deps], set(order)))
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
    """A program compiled for one feed/fetch signature: a pool of Plans (one per thread
    running it at the same time; the first is the one :meth:`Executor.plan_of` shows)
    and what the front end needs to explain errors."""

    __slots__ = ("plan", "free", "plans", "program", "order")

    def __init__(self, plan: Plan, program: Program, order: list[int]) -> None:
        self.plan = plan
        self.free = [plan]          # plans no run is using (list.pop/append are atomic)
        self.plans = [plan]
        self.program = weakref.ref(program)     # a cache must not keep it alive
        self.order = order          # plan op k is program op order[k]

    def spare(self) -> Plan:
        """A plan for a run while every plan of the pool is running: a clone when they
        run in other threads; re-entrance (a Python op running the program it belongs
        to, with the same signature, in the same thread) is an error."""
        me = threading.get_ident()
        if any(p.running and p.thread == me for p in self.plans):
            raise RuntimeError("a Python op ran the program it belongs to (re-entrant "
                               "Executor.run with the same program and signature)")
        plan = self.plan.clone()
        self.plans.append(plan)
        return plan

    def label(self, k: int) -> str:
        """Plan op `k` as errors name it."""
        program = self.program()
        i = self.order[k]
        if program is None:
            return f"op #{i} of the program"
        return f"op #{i} of the program: {program.global_block().ops[i]}"

    def annotate(self, exc: BaseException, plan: Plan) -> None:
        """Name the op that was running when `exc` was raised."""
        k = plan.current_op
        if k >= 0:
            add_note(exc, f"raised while running {self.label(k)}")

    def run(self, feeds: dict[str, Any],
            scope_vars: dict[str, DenseTensor]) -> list[DenseTensor]:
        """Run an idle plan of the pool (the signature path; the fast path is
        :class:`~fastop._core.executor.FastPath`, the same in C)."""
        free = self.free
        try:
            plan = free.pop()
        except IndexError:
            plan = self.spare()
        try:
            return plan.run(feeds, scope_vars)
        except BaseException as exc:
            self.annotate(exc, plan)
            raise
        finally:
            free.append(plan)


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


def _view_record(op: Operator, kernel: Any) -> bool:
    """Whether the op runs as a C view record: a view kernel (reshape, transpose, slice,
    broadcast_to, ...) whose one output is a temporary (a persistable output keeps its
    own memory) of present inputs."""
    return isinstance(kernel, CKernel) and kernel.is_view and len(op.outputs) == 1 \
        and not op.outputs[0].persistable and bool(op.inputs) and None not in op.inputs


def _c_record(op: Operator, kernel: Any) -> bool:
    """Whether the op runs as a C kernel record: a CKernel with operands a record holds."""
    return isinstance(kernel, CKernel) and not kernel.is_view \
        and len(_flat_inputs(op)) <= _MAX_OPERANDS and len(op.outputs) <= _MAX_OPERANDS


def _python_call(op: Operator, kernel: Any) -> Any:
    """One Python call per run: the op's Python kernel, bound to its attributes and
    checked against the output variables' metas (what the meta function said while the
    program was built: no meta function runs per call); or ``OpDef.invoke`` for a C
    kernel run where it cannot be a record."""
    opdef, attrs = op.opdef, op.attrs
    sizes = [len(x) if isinstance(x, list) else None for x in op.inputs]
    if not isinstance(kernel, CKernel):
        metas = [TensorMeta(v.shape, v.dtype) for v in op.outputs]
        bound = PythonKernel(opdef.name, kernel, attrs,
                             [(m.shape, m.dtype.code) for m in metas],
                             functools.partial(opdef.explain_results, metas))
        return bound if all(s is None for s in sizes) else _Variadic(bound, sizes)

    def invoke(*tensors: Any) -> tuple:
        return opdef.invoke(_regroup(tensors, sizes), attrs)
    return invoke


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


def _fold_constants(ops: Sequence[Operator], ins_of: Sequence[list[Variable]],
                    order: Sequence[int], sources: set[str]) -> _Folded:
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
        ins = ins_of[i]
        if not ins or any(v.name not in folded.values and (v.constant is None or written[v.name])
                          for v in ins):
            continue                    # an input that is not a constant (the common case)
        op = ops[i]
        if op.opdef.namespace != "fastop" or op.opdef.ordered or any(
                o.persistable or o.name in sources or written[o.name] > 1 for o in op.outputs):
            continue
        values = [folded.value(v) for v in ins]
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


def _copies_needed(ops: Sequence[Operator], ins_of: Sequence[list[Variable]],
                   order: Sequence[int], inline: Sequence[bool],
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
        ins = ins_of[i]
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
             fetch_names: Sequence[str], num_threads: int = 1) -> _Compiled:
    block = program.global_block()
    ops = block.ops
    ins_of = [op.input_vars() for op in ops]
    _check_feeds(block, ops, ins_of, feeds)
    for name in fetch_names:
        if name not in block.vars:
            hint = did_you_mean(name, block.vars)
            raise ValueError(f"fetch_list: the program has no variable '{name}'{hint}")
    sources = {v.name for v in block.vars.values()
               if v.persistable or v.constant is not None} | set(feeds)
    order = _schedule(ops, ins_of, sources)
    folded = _fold_constants(ops, ins_of, order, sources)
    if folded.ops:
        order = [i for i in order if i not in folded.ops]

    def label(k: int) -> str:
        return f"op #{order[k]} of the program: {ops[order[k]]}"

    kernels = []        # (kernel, dtype code): the op's call plan chooses, as for eager calls
    for k, i in enumerate(order):
        try:
            kernels.append(ops[i].opdef.plan.choose(ops[i].inputs))
        except TypeError as exc:        # no kernel for the op's dtypes
            add_note(exc, f"while compiling {label(k)}")
            raise
    views = [kc if _view_record(ops[i], kc[0]) else None for kc, i in zip(kernels, order)]
    lowered = [kc if v is None and _c_record(ops[i], kc[0]) else None
               for kc, v, i in zip(kernels, views, order)]
    copies = _copies_needed(ops, ins_of, order, [c is not None for c in lowered], fetch_names)
    views = [None if k in copies else v for k, v in enumerate(views)]
    writers: dict[str, list[int]] = defaultdict(list)
    first_access: dict[str, tuple[str, int]] = {}
    names: list[str] = []
    slot: dict[str, int] = {}
    for k, i in enumerate(order):
        for v in ins_of[i]:
            if v.name not in slot:
                slot[v.name] = len(names)
                names.append(v.name)
                first_access[v.name] = ("read", k)
        for v in ops[i].outputs:
            writers[v.name].append(k)
            if v.name not in slot:
                slot[v.name] = len(names)
                names.append(v.name)
                first_access[v.name] = ("write", k)
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
            persists.append((name, slot[name], label(k) if access == "read" and k >= 0
                             else "fetch_list" if access == "read" else None,
                             var.dtype.code, [-1 if d is None else d for d in var.shape]))
        elif writers.get(name) and first_access[name][0] == "read":
            k = first_access[name][1]
            raise ValueError(f"variable '{name}' ({var.dtype.name}{var.shape}) is read by "
                             f"{label(k)} before any op writes it; feed it, or make it a "
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
            need = label(k) if k >= 0 else "fetch_list"
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
            plan.add_ckernel(views[k][0], views[k][1], [slot[v.name] for v in ins_of[i]],
                             outs, op.attrs, op.opdef, op.opdef.ordered)
            continue
        if choice is not None:      # an absent optional input is slot -1 (a NULL view)
            plan.add_ckernel(choice[0], choice[1],
                             [-1 if v is None else slot[v.name] for v in _flat_inputs(op)],
                             outs, op.attrs, op.opdef, op.opdef.ordered)
            continue
        ins = [-1 if v is None else slot[v.name] for v in _flat_inputs(op)]
        call = _python_call(op, kernels[k][0])
        plan.add_python(_Copying(call) if k in copies else call, ins, outs, op.opdef,
                        op.opdef.ordered)
    plan.set_io([(name, slot[name], value) for name, value in feeds.items()],
                persists, [slot[n] for n in fetch_names])
    plan.set_num_threads(num_threads)
    return _Compiled(plan, program, order)


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector (if it runs) inside the block.

    Compiling allocates a few containers per op that live until it ends; with the
    collector on, they triggered full collections traversing the whole program again
    and again: compiling a chain of 10,000 ops took 0.41 s of CPU time, 0.22 s with
    the collector paused. What a compile leaves in reference cycles (an exception
    caught while folding constants) is collected when the collector runs again."""
    import gc
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _check_feeds(block: Any, ops: Sequence[Operator], ins_of: Sequence[list[Variable]],
                 feeds: dict[str, Any]) -> None:
    def reader(var: Variable) -> str:       # error paths only: it scans the ops
        return next((f" (read by op #{i}: {op})" for i, op in enumerate(ops)
                     if any(v is var for v in ins_of[i])), "")
    for name, value in feeds.items():
        var = block.vars.get(name)
        if var is None:
            hint = did_you_mean(name, block.vars)
            raise ValueError(f"feed: the program has no variable '{name}'{hint}"
                             f"{_unfed(block, ins_of, feeds)}")
        if var.constant is not None:
            raise ValueError(f"feed: '{name}' is a constant of the program{reader(var)}")
        try:
            dtype = as_dtype(value.dtype)
        except TypeError:
            dtype = None
        if dtype != var.dtype:
            got = value.dtype if dtype is None else dtype.name
            raise TypeError(f"feed '{name}': expected dtype {var.dtype.name} (as declared), "
                            f"got {got}{reader(var)}")
        shape = list(value.shape)
        if len(shape) != var.ndim or any(d is not None and d != s
                                         for d, s in zip(var.shape, shape)):
            declared = "[" + ", ".join("None" if d is None else str(d) for d in var.shape) + "]"
            raise ValueError(f"feed '{name}': expected shape {declared} (as declared), got "
                             f"{shape}{reader(var)}")


def _unfed(block: Any, ins_of: Sequence[list[Variable]], feeds: dict[str, Any]) -> str:
    """``"; static.data variable 'x' (float32[None, 3]) is not fed"`` for the data
    variables some op reads that `feeds` lacks (the ones a misspelt feed meant)."""
    read = {v.name for ins in ins_of for v in ins}
    unfed = [v for v in block.vars.values()
             if v.is_data and v.name in read and v.name not in feeds]
    if not unfed:
        return ""
    listed = ", ".join(f"'{v.name}' ({v.dtype.name}{v.shape})" for v in unfed)
    return (f"; static.data variable{'s' if len(unfed) > 1 else ''} {listed} "
            f"{'are' if len(unfed) > 1 else 'is'} not fed")


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
    the fast path: the last plan used with the fetch list it was used with.

    Nothing here keeps the program alive: it is held through a weak reference whose
    callback drops this entry (and its plans) when the program is freed, and the fetch
    list is remembered by the ids of its items. An item that is a Variable of this
    program lives as long as the program, so its id is reliable for that long; other
    items are held (a name) or watched through a weak reference (a Variable of another
    program, such as the one a clone was made from)."""

    __slots__ = ("ref", "version", "plans", "fast")

    def __init__(self, program: Program, plans_by_id: dict[int, _ProgramPlans]) -> None:
        self.ref = weakref.ref(program, functools.partial(_forget, plans_by_id, id(program)))
        self.version = program._version
        self.plans: dict[tuple, _Compiled] = {}
        # the last signature's plans and fetch list, in one object replaced whole (a
        # thread never sees half of another's update)
        self.fast: FastPath | None = None

    def remember(self, compiled: _Compiled, fetch: Sequence[Any]) -> None:
        """Make `compiled` with `fetch` the fast path."""
        program = self.ref()
        own = program.global_block().vars if program is not None else {}
        watched = tuple(weakref.ref(item) for item in fetch
                        if isinstance(item, Variable) and own.get(item.name) is not item)
        held = tuple(item for item in fetch if not isinstance(item, Variable))
        self.fast = FastPath(compiled, fetch, watched, held)


def _forget(plans_by_id: dict[int, _ProgramPlans], key: int, ref: weakref.ref) -> None:
    """Drop the plans of a program that was freed (the callback of its weak reference)."""
    entry = plans_by_id.get(key)
    if entry is not None and entry.ref is ref:
        plans_by_id.pop(key, None)


class Executor:
    """Runs Programs: ``Executor(place).run(program, feed, fetch_list)``.

    A program is compiled once per (program version, feed names/shapes/dtypes, fetch
    names) and the compiled plan reused; fetches come back as numpy arrays (DenseTensors
    with ``return_numpy=False``). ``feed_var_name``, ``fetch_var_name`` and
    ``use_program_cache`` are accepted for PaddlePaddle compatibility (plans are always
    cached). Every op of the program runs on every run, as in PaddlePaddle.

    The cache keeps no program alive: a program's plans are dropped when it is freed.
    Threads may run programs at once, the same one included: each concurrent run of a
    signature gets a plan of its own (with its own memory), cloned on first need.

    ``num_threads``: how many threads a run may use for independent ops (the calling
    thread included; default: the processors this process may run on). Ops whose first
    run took 100 µs or more on 8192 elements or more and let the GIL go (numpy releases
    it in its loops, fastop's kernels on large inputs) run on fastop's thread pool when
    another such op is independent of them; smaller ops stay on the calling thread; ordered ops
    (``registry.define(..., ordered=True)``, py_func debug ops with ``out=None``) run on
    it in program order. Results are bitwise those of ``num_threads=1``, which runs
    every op on the calling thread in program order.
    """

    def __init__(self, place: Any = None, num_threads: int | None = None) -> None:
        if num_threads is None:
            num_threads = num_processors()
        elif type(num_threads) is not int or num_threads < 1:
            raise ValueError(f"Executor: num_threads must be an int >= 1 (or None for "
                             f"every processor), got {num_threads!r}")
        self.place = place
        self.num_threads = num_threads
        # id(program) -> its compiled plans (for its current version)
        self._plans: dict[int, _ProgramPlans] = {}
        self._lock = threading.Lock()       # for changes to the cache, not for runs

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
        scope = _global_scope if scope is None else scope
        for hook in program._run_hooks:
            hook(scope)
        scope_vars = scope._vars
        # fast path: the plan of the previous run, if the fetch list holds the same
        # items and the feeds have its signature (the plan checks them in C)
        entry = self._plans.get(id(program))
        if entry is not None and type(feed) is dict and entry.version == program._version:
            fast = entry.fast
            if fast is not None:
                outs = fast.run(fetch, feed, scope_vars)
                if outs is not None:
                    return [t.numpy() for t in outs] if return_numpy else outs
        compiled, arrays = self._compiled(program, feed, fetch)
        outs = compiled.run(arrays, scope_vars)
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
            with _collector_paused():
                compiled = _compile(program, arrays, key[1], self.num_threads)
            with self._lock:
                if len(entry.plans) >= _MAX_PLANS:
                    entry.plans.pop(next(iter(entry.plans)), None)
                compiled = entry.plans.setdefault(key, compiled)
        entry.remember(compiled, fetch)
        return compiled, arrays

    def _cache(self, program: Program) -> _ProgramPlans:
        """The compiled plans of `program`'s current version."""
        entry = self._plans.get(id(program))
        if entry is None or entry.version != program._version:
            with self._lock:
                entry = self._plans.get(id(program))
                if entry is None or entry.version != program._version:
                    entry = _ProgramPlans(program, self._plans)
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
        self._plans.clear()
