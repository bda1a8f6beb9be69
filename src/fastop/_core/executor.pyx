# cython: freethreading_compatible = False
"""The static executor's run loop: a compiled :class:`Plan` of a Program.

The Python front end (``fastop.static.executor``) lowers a Program into a Plan once per
(program version, feed/fetch signature): every variable becomes a *slot* (a
``fastop_view``), every operator an ``OpRecord`` — a Cython kernel's ``infer``/kernel C
pointers with its packed attributes, or a Python callable (one Python call per run).

Where a slot's memory comes from (``SlotKind``):

* arena — temporaries written by C kernels live at planned offsets of one arena,
  laid out by liveness after the first successful run (which records every shape,
  allocating each temporary on its own and freeing it after its last use);
  two slots share bytes only if their live ranges ``[first write, last use]`` don't
  overlap, so the arena stays near the minimum live set;
* fresh — fetched temporaries, allocated each run and handed out without a copy;
* external — results of Python ops, kept in the memory they came in;
* feed — the caller's arrays, borrowed without copying;
* persist — the scope's tensors (parameters), read and updated in place;
* const — constants, bound once (an op writing one gets a buffer of its own for that
  run: every run starts from the constant);
* view — outputs of view kernels (expand_as, broadcast_to): a view of the input's
  memory, set by a C function each run; the input's memory lives as long as the view.

Each run calls every C kernel's ``infer`` on the live input views (a few ns) and checks
the result against the slot: a shape that changed (a Python op returning another batch
size) gets its own buffer for that run and the arena is laid out again afterwards.

A Plan runs one run at a time (its slots are that run's state): a second thread runs a
:meth:`Plan.clone`, and :class:`FastPath` takes an idle plan of the front end's pool.

The profiler's hook: a run checks its flag once; a profiled run records each op record
(named by the op definition the front end gave it) and the run itself.

Independent ops at once (``Plan.set_num_threads(n)``, n > 1; the front end's default):
the first run times each op. An op is *heavy* when it took at least ``_min_op_ns``
(100 µs), touched at least ``_min_op_elements`` (8192, inputs and outputs) and may gain
from running beside others: a Python op (numpy releases the GIL in its loops), or a C
kernel at or above its grain (called without the GIL) while fastop's kernels use one
thread (``set_num_threads(1)``, ``OMP_NUM_THREADS=1``; with more, a large kernel
already uses the cores itself). An ordered op (``OpDef.ordered``: py_func debug ops,
side effects) never is. Where two heavy ops are independent (neither reaches the other
through the ops' data dependencies: reads after writes, writes after reads and writes,
a read of a view or of a Python op's result counting as a read of the memory it may
alias, ordered ops after the previous ordered op), the plan-order range from the first
to the second is a *region* (each heavy op paired with the first earlier one it is
independent of, so that a program written branch after branch overlaps them whole;
overlapping ranges merged). A run runs the ops outside regions as before, in plan order
on the calling thread; a region is one call of fastop's thread
pool (``parallel_run``) whose pieces schedule its ops: each thread takes the
lowest-numbered op whose dependencies are done — the caller any op, a pool thread only
a heavy one — and runs it holding the GIL, which the op's kernel lets go. Small ops thus
stay on the calling thread, a plan without two independent heavy ops (a program of small
ops) runs the serial loop untouched, and results are bitwise those of a serial run (each
op computes the same thing from the same inputs; random kernels are ordered ops, so they
draw the same words). Kernels called inside a region run their own loops on one thread
(the pool is busy with the region). An arena slot touched in a region keeps its bytes
until the last op of the region that may start before its users end (``region_last``:
one not depending on all of them), so no op running beside them writes over it.
An exception in a region stops it after the ops in flight; the run then raises it,
``current_op`` naming the op.
"""
from cpython.mem cimport PyMem_Malloc, PyMem_Realloc, PyMem_Free
from libc.stddef cimport ptrdiff_t
from libc.stdlib cimport qsort
from libc.string cimport memcpy, memset

from fastop._core.storage cimport (DenseTensor, fastop_view, fastop_attrs, FASTOP_BOOL,
                                   FASTOP_NUM_DTYPES, FASTOP_MAX_NDIM, alloc_tensor, alloc_like,
                                   as_dense,
                                   itemsize_of, view_copy, view_assign,
                                   view_set_contiguous_strides, dtype_from_code,
                                   view_same_meta, view_fits_meta, view_shape, view_is_contiguous,
                                   ndarray_of)
from fastop._core.kernel cimport (CKernel, PythonKernel, K_OK, K_ERR_LAYOUT, MAX_OPERANDS,
                                   get_num_threads)
from fastop._core.parallel cimport parallel_run
from fastop._core.profiling cimport (EVENT_RUN, EVENT_STATIC_OP, now_ns, profiling_flag,
                                     record, record_views)
from libc.stdint cimport int64_t

import threading

import numpy as np


cdef extern from "pythread.h":
    unsigned long PyThread_get_thread_ident() nogil

cdef extern from "<sched.h>" nogil:
    int sched_yield()

cdef extern from *:
    """
    static inline int fastop_load_int(const int* p) {
        return __atomic_load_n(p, __ATOMIC_ACQUIRE);
    }
    static inline void fastop_store_int(int* p, int v) {
        __atomic_store_n(p, v, __ATOMIC_RELEASE);
    }
    """
    int load_int "fastop_load_int"(const int* p) nogil
    void store_int "fastop_store_int"(int* p, int v) nogil

__all__ = ["Plan", "FastPath", "SLOT_KINDS"]

SLOT_KINDS = {"arena": SLOT_ARENA, "fresh": SLOT_FRESH, "external": SLOT_EXTERNAL,
              "feed": SLOT_FEED, "persist": SLOT_PERSIST, "const": SLOT_CONST,
              "view": SLOT_VIEW}

cdef Py_ssize_t ALIGN = 64
cdef const int* _profiling = profiling_flag()
# The cost rule: an op runs on a pool thread when its timing run took at least this long
# (and it let the GIL go). Handing an op to another thread costs a GIL hand-over and,
# for a sleeping worker, a wake-up: tens of µs on this VM, so only ops of 100 µs or more
# gain from it.
cdef int64_t _min_op_ns = 100_000
# ... and touched this many elements (inputs and outputs): numpy lets the GIL go only in
# loops of more than 500 elements, and a smaller op costs less than the hand-over. The
# floor also keeps a slowed-down first run (valgrind, a loaded machine) from making
# small ops heavy.
cdef Py_ssize_t _min_op_elements = 8192
cdef bint _every_op = False     # the test shim's: every op not ordered is heavy


def _set_cost_rule(int64_t min_ns, bint every_op=False) -> tuple:
    """Set the cost rule (a test shim: `every_op` offers every op that is not ordered to
    pool threads, whatever its time); returns the previous ``(min_ns, every_op)``.
    Plans compiled afterwards use it."""
    global _min_op_ns, _every_op
    previous = (_min_op_ns, _every_op)
    _min_op_ns, _every_op = min_ns, every_op
    return previous


cdef str _describe(fastop_view* v):
    return dtype_from_code(v.dtype).name + str(
        [v.shape[d] if v.shape[d] >= 0 else None for d in range(v.ndim)])


cdef class Plan:
    """A Program compiled for one feed/fetch signature; :meth:`run` executes it.

    Built by the front end: ``Plan(names, kinds)``, then :meth:`add_ckernel` /
    :meth:`add_python` in execution order, :meth:`set_const`, :meth:`set_io`.
    """

    def __cinit__(self, list names, list kinds):
        cdef int n = len(names), i
        if len(kinds) != n:
            raise ValueError(f"Plan: {n} names but {len(kinds)} kinds")
        for i in range(n):
            if not SLOT_ARENA <= kinds[i] <= SLOT_VIEW:
                raise ValueError(f"Plan: slot '{names[i]}' has kind {kinds[i]}, not one of "
                                 f"SLOT_KINDS")
        self.n_slots = n
        self.n_ops = 0
        self.capacity = 16
        self.ops = <OpRecord*>PyMem_Malloc(self.capacity * sizeof(OpRecord))
        self.views = <fastop_view*>PyMem_Malloc((n + 1) * sizeof(fastop_view))
        self.planned = <fastop_view*>PyMem_Malloc((n + 1) * sizeof(fastop_view))
        self.kinds = <int*>PyMem_Malloc((n + 1) * sizeof(int))
        self.first_def = <int*>PyMem_Malloc((n + 1) * sizeof(int))
        self.last_use = <int*>PyMem_Malloc((n + 1) * sizeof(int))
        self.dirty = <char*>PyMem_Malloc(n + 1)
        if not (self.ops and self.views and self.planned and self.kinds and self.first_def
                and self.last_use and self.dirty):
            raise MemoryError()
        memset(self.views, 0, (n + 1) * sizeof(fastop_view))
        memset(self.planned, 0, (n + 1) * sizeof(fastop_view))
        memset(self.dirty, 0, n + 1)
        for i in range(n):
            self.kinds[i] = kinds[i]
            self.first_def[i] = -1
            self.last_use[i] = -1
        self.names = list(names)
        self.objs = [None] * n
        self.py_calls = []
        self.py_ins = []
        self.py_outs = []
        self.op_defs = []
        self.consts = {}
        self.feed_slots = []
        self.persist_slots = []
        self.fetch_slots = []
        self.current_op = -1
        self.num_threads = 1

    def __dealloc__(self):
        PyMem_Free(self.ops)
        PyMem_Free(self.views)
        PyMem_Free(self.planned)
        PyMem_Free(self.kinds)
        PyMem_Free(self.first_def)
        PyMem_Free(self.last_use)
        PyMem_Free(self.dirty)
        PyMem_Free(self.waiting)
        PyMem_Free(self.ready)

    # -- building ------------------------------------------------------------------
    cdef int _check_slot(self, object s, str what, bint absent_ok) except -1:
        """Refuse an index outside the slot table (it would be used to index C arrays);
        -1 (an absent input) only where `absent_ok`."""
        if type(s) is not int or not (0 <= s < self.n_slots or (absent_ok and s == -1)):
            raise ValueError(f"{what} slot {s!r} is not a slot of this plan (it has "
                             f"{self.n_slots})")
        return 0

    cdef OpRecord* _new_record(self, int kind, list ins, list outs, str who) except NULL:
        cdef int i, s
        cdef OpRecord* rec
        for slot in ins:
            self._check_slot(slot, f"{who}: input", kind != OP_VIEW)   # -1: absent
        for slot in outs:
            self._check_slot(slot, f"{who}: output", False)
        if self.n_ops == self.capacity:
            self.capacity *= 2
            rec = <OpRecord*>PyMem_Realloc(self.ops, self.capacity * sizeof(OpRecord))
            if rec is NULL:
                raise MemoryError()
            self.ops = rec
        rec = &self.ops[self.n_ops]
        memset(rec, 0, sizeof(OpRecord))
        rec.kind = kind
        rec.dispatch = -1
        rec.n_in = len(ins) if kind != OP_PY else 0     # Python ops: slots in py_ins/py_outs
        rec.n_out = len(outs)
        if kind != OP_PY and (rec.n_out > MAX_OPERANDS or rec.n_in > MAX_OPERANDS):
            raise ValueError(f"a kernel record holds at most {MAX_OPERANDS} inputs and "
                             f"outputs, got {rec.n_in} and {rec.n_out}")
        for i in range(len(ins)):
            s = ins[i]
            if kind != OP_PY:
                rec.ins[i] = s
            if s >= 0:
                self.last_use[s] = self.n_ops
        for i in range(rec.n_out):
            s = outs[i]
            if kind != OP_PY:
                rec.outs[i] = s
            rec.reads_output = rec.reads_output or s in ins
            rec.writes_persist = rec.writes_persist or self.kinds[s] == SLOT_PERSIST
            if self.first_def[s] < 0:
                self.first_def[s] = self.n_ops
            self.last_use[s] = self.n_ops
        return rec

    def add_ckernel(self, CKernel kernel, int dtype, list ins, list outs, dict attrs,
                    op=None, bint ordered=False) -> None:
        """Append a call of `kernel`'s function for dtype code `dtype`; a view kernel's
        output slot (of kind view) then views its first input's memory. `op`: the op
        definition the profiler names the record by; `ordered`: the op runs on the
        calling thread after the ordered ops before it (it has side effects)."""
        if dtype < 0 or dtype >= FASTOP_NUM_DTYPES or kernel.fns[dtype] is NULL \
                or kernel.infer is NULL:
            raise ValueError(f"{kernel.name}: no C function for dtype code {dtype}")
        if kernel.is_view and (len(outs) != 1 or self.kinds[outs[0]] != SLOT_VIEW):
            raise ValueError(f"{kernel.name}: a view kernel writes one slot of kind view")
        cdef fastop_attrs packed
        kernel.pack(attrs, &packed)
        cdef OpRecord* rec = self._new_record(OP_VIEW if kernel.is_view else OP_C, ins, outs,
                                              kernel.name)
        rec.infer = kernel.infer
        rec.fn = kernel.fns[dtype]
        rec.dtype = dtype
        if 0 <= kernel.dispatch_input < rec.n_in:
            rec.dispatch = kernel.dispatch_input
        rec.grain = kernel.parallel_grain
        rec.attrs = packed
        rec.ordered = ordered
        self.py_calls.append(kernel)
        self.py_ins.append(tuple(ins) if kernel.is_view else None)
        self.py_outs.append(tuple(outs) if kernel.is_view else None)
        self.op_defs.append(op)
        self.n_ops += 1

    def add_python(self, fn, list ins, list outs, op=None, bint ordered=False) -> None:
        """Append a Python op: ``fn(*tensors)`` returns one DenseTensor per output. A
        :class:`~fastop._core.kernel.PythonKernel` is called directly from C (its results
        checked and wrapped by the one C result checker).

        `ins` may hold -1 for an absent input (passed as None). `op`: the op definition
        the profiler names the record by; `ordered`: as for :meth:`add_ckernel`.
        """
        self._new_record(OP_PY, ins, outs, "Python op").ordered = ordered
        self.py_calls.append(fn)
        self.py_ins.append(tuple(ins))
        self.py_outs.append(tuple(outs))
        self.op_defs.append(op)
        self.n_ops += 1

    def python_calls(self) -> list:
        """The callables of the plan's Python ops, in run order (for inspection)."""
        return [c for c in self.py_calls if not isinstance(c, CKernel)]

    def set_const(self, int slot, DenseTensor value) -> None:
        self._check_slot(slot, "constant", False)
        self.consts[slot] = value
        self.objs[slot] = value
        self.views[slot] = self.planned[slot] = value.view

    def set_io(self, list feeds, list persists, list fetches) -> None:
        """Feeds ``[(name, slot, value)]`` (`value`: the fed array the plan was compiled
        for; its dtype and shape are the plan's feed signature, see :meth:`try_run`),
        persistables ``[(name, slot, reader, dtype code, shape)]`` (`reader` describes the
        first op reading the value before any op writes it, None if an op writes it
        first; dtype and shape, -1 for an unknown dim, are the variable's declaration,
        which the scope's value must match), fetch slots."""
        cdef int s, d
        for name, slot, value in feeds:
            self._check_slot(slot, "feed", False)
        for persist in persists:
            self._check_slot(persist[1], "persistable", False)
            if len(persist[4]) > FASTOP_MAX_NDIM or not 0 <= persist[3] < FASTOP_NUM_DTYPES:
                raise ValueError(f"persistable '{persist[0]}': bad declaration "
                                 f"{persist[3:]}")
        for slot in fetches:
            self._check_slot(slot, "fetch", False)
        self.feed_slots = []
        for name, s, value in feeds:
            self.planned[s] = as_dense(value).view      # the signature: dtype and shape
            self.feed_slots.append((name, s))
        self.persist_slots = []
        for name, s, reader, dtype, shape in persists:
            self.planned[s].data = NULL                  # the declaration, checked by _bind
            self.planned[s].dtype = dtype
            self.planned[s].ndim = len(shape)
            for d in range(len(shape)):
                self.planned[s].shape[d] = shape[d]
            self.persist_slots.append((name, s, reader))
        self.fetch_slots = fetches

    def clone(self) -> Plan:
        """The same compiled program with run state of its own (slot views, arena,
        bound values): what a second thread runs while this plan runs in a first. Its
        first run traces shapes and lays its own arena out."""
        cdef int n = self.n_slots, s
        cdef Plan c = Plan.__new__(Plan, self.names, [self.kinds[s] for s in range(n)])
        cdef OpRecord* ops = <OpRecord*>PyMem_Realloc(c.ops, self.capacity * sizeof(OpRecord))
        if ops is NULL:
            raise MemoryError()
        c.ops, c.capacity, c.n_ops = ops, self.capacity, self.n_ops
        memcpy(c.ops, self.ops, self.n_ops * sizeof(OpRecord))
        memcpy(c.first_def, self.first_def, n * sizeof(int))
        memcpy(c.last_use, self.last_use, n * sizeof(int))
        c.py_calls, c.py_ins = list(self.py_calls), list(self.py_ins)
        c.py_outs, c.op_defs = list(self.py_outs), list(self.op_defs)
        for s, value in self.consts.items():
            c.set_const(s, value)
        c.feed_slots = list(self.feed_slots)
        for name, s in self.feed_slots:
            c.planned[s] = self.planned[s]
        for name, s, reader in self.persist_slots:
            c.planned[s] = self.planned[s]          # the declaration
        c.persist_slots, c.fetch_slots = list(self.persist_slots), list(self.fetch_slots)
        # its first run traces shapes in plan order, freeing temporaries as they die:
        # serially, so it times its ops and plans its own regions
        c.num_threads, c.timing = self.num_threads, self.num_threads > 1
        return c

    def set_num_threads(self, int n) -> None:
        """Let runs use up to `n` threads (the caller included) for independent ops; 1
        runs every op on the calling thread in plan order. With n > 1 the next run times
        each op and plans which may run at once (see the module docstring)."""
        if n < 1:
            raise ValueError(f"Plan.set_num_threads: expected n >= 1, got {n}")
        self.num_threads = n
        self.schedule = None
        self.timing = n > 1

    # -- running -----------------------------------------------------------------------
    def run(self, dict feeds, dict scope) -> list:
        """Run every op once; return the fetched values as DenseTensors.

        `feeds` maps names to arrays of the planned dtype and shape; `scope` maps
        persistable names to DenseTensors (created ones are added to it).
        """
        return self._run(feeds, scope, False)

    def try_run(self, dict feeds, dict scope):
        """:meth:`run` if `feeds` has this plan's signature — the same names, each a
        C-contiguous numpy array or DenseTensor of the planned dtype and shape — else
        None, without running (the front end then finds or compiles the right plan)."""
        return self._run(feeds, scope, True)

    cdef object _run(self, dict feeds, dict scope, bint check):
        cdef int i
        cdef int64_t start = now_ns() if _profiling[0] else 0   # the profiler's hook
        if self.running:
            raise RuntimeError("a Python op ran the program it belongs to (re-entrant "
                               "Executor.run with the same program and signature)")
        self.running = True
        self.thread = PyThread_get_thread_ident()
        self.scope = scope
        self.stale = False
        self.current_op = -1
        if self.live_until is None:
            self._lifetimes()
        try:
            if not self._bind(feeds, check):
                return None
            if self.schedule is not None:
                self._run_scheduled(start)
            elif self.timing:
                self._run_timed(start)
            else:
                for i in range(self.n_ops):
                    self.current_op = i
                    if start:
                        self._run_profiled(i)
                    else:
                        self._run_op(i)
            self.current_op = -1
            result = self._fetch()
            if self.timing:
                self._plan_concurrency()
            if not self.traced or self.stale:
                self._lay_out_arena()
            if start:
                record("Executor.run", EVENT_RUN, start, None)
            return result
        finally:
            self._release()
            self.scope = None
            self.running = False

    cdef int _run_op(self, int i) except -1:
        cdef int s
        if self.ops[i].kind == OP_C:
            self._run_c(i)
        elif self.ops[i].kind == OP_VIEW:
            self._run_view(i)
        else:
            self._run_py(i)
        if not self.traced:                 # tracing: free temporaries as they die
            for s in <list>self.release_at[i]:
                self.objs[s] = None
        return 0

    cdef int _run_profiled(self, int i) except -1:
        """_run_op, recorded as an event of the record's op with its inputs' views."""
        cdef int64_t start = now_ns()
        try:
            self._run_op(i)
        finally:
            self._record_op(i, start)
        return 0

    cdef int _record_op(self, int i, int64_t start) except -1:
        cdef OpRecord* rec = &self.ops[i]
        cdef fastop_view* ins[MAX_OPERANDS]
        cdef int j, n = 0, s
        if rec.kind == OP_C:
            for j in range(rec.n_in):
                ins[j] = &self.views[rec.ins[j]] if rec.ins[j] >= 0 else NULL
            n = rec.n_in
        else:
            for s in <tuple>self.py_ins[i]:
                if n == MAX_OPERANDS:
                    break
                ins[n] = &self.views[s] if s >= 0 else NULL
                n += 1
        op = self.op_defs[i]
        record_views(self.py_calls[i] if op is None else op, EVENT_STATIC_OP, start, ins, n)
        return 0

    # -- independent ops at once -----------------------------------------------------
    cdef int _run_timed(self, int64_t start) except -1:
        """The serial loop, timing each op and noting whether it may gain from running
        beside others (what the cost rule reads): one touching at least
        ``_min_op_elements`` that is a Python op (numpy lets the GIL go in its loops) or
        a C kernel called without the GIL while fastop's kernels run on one thread (with
        more, a large kernel already uses the cores itself)."""
        cdef int i, s
        cdef int64_t t
        cdef Py_ssize_t elements
        cdef OpRecord* rec
        for i in range(self.n_ops):
            self.current_op = i
            t = now_ns()
            if start:
                self._run_profiled(i)
            else:
                self._run_op(i)
            rec = &self.ops[i]
            rec.first_ns = now_ns() - t
            elements = 0
            if rec.kind == OP_C:
                for s in range(rec.n_in):
                    if rec.ins[s] >= 0:
                        elements += self.views[rec.ins[s]].size
                for s in range(rec.n_out):
                    elements += self.views[rec.outs[s]].size
            else:
                for s in <tuple>self.py_ins[i] + <tuple>self.py_outs[i]:
                    if s >= 0:
                        elements += self.views[s].size
            rec.releases = elements >= _min_op_elements and (rec.kind == OP_PY or (
                rec.kind == OP_C and rec.n_out > 0 and get_num_threads() == 1
                and self.views[rec.outs[0]].size >= rec.grain))
        return 0

    cdef tuple _dependencies(self):
        """Per op, the earlier ops it must wait for: the last writer of each slot it
        reads, and of each it writes; for a write also every reader since that writer.
        A read of a view's or a Python op's result reads the memory it may alias (the
        slots it came from, transitively); an ordered op waits for the previous one.
        Also, per slot, the ops touching its memory."""
        cdef int i, s
        cdef OpRecord* rec
        cdef int last_ordered = -1
        last_write = {}
        readers = {}
        aliases = {}            # slot -> the slots whose memory it may be
        touches = {}
        preds = []
        for i in range(self.n_ops):
            rec = &self.ops[i]
            if rec.kind == OP_C:
                ins = [rec.ins[j] for j in range(rec.n_in)]
                outs = [rec.outs[j] for j in range(rec.n_out)]
            else:
                ins, outs = self.py_ins[i], self.py_outs[i]
            waits = set()
            read = set()
            for s in ins:
                if s >= 0:
                    read.add(s)
                    read.update(aliases.get(s, ()))
            for s in read:
                if s in last_write:
                    waits.add(last_write[s])
                readers.setdefault(s, []).append(i)
                touches.setdefault(s, []).append(i)
            for s in outs:
                touches.setdefault(s, []).append(i)
                if s in last_write:
                    waits.add(last_write[s])
                waits.update(readers.pop(s, ()))
                last_write[s] = i
            if rec.ordered:
                if last_ordered >= 0:
                    waits.add(last_ordered)
                last_ordered = i
            if rec.kind != OP_C:
                for s in outs:
                    aliases[s] = frozenset(read)
            else:
                for s in outs:
                    aliases.pop(s, None)
            waits.discard(i)
            preds.append(sorted(waits))
        return preds, touches

    cdef int _plan_concurrency(self) except -1:
        """After the timing run: the heavy ops (the cost rule), and the regions where
        two of them are independent. No regions: the plan stays serial."""
        cdef int i, k
        cdef OpRecord* rec
        self.timing = False
        self.schedule = None
        heavy = []
        for i in range(self.n_ops):
            rec = &self.ops[i]
            if not rec.ordered and (_every_op or (rec.releases
                                                  and rec.first_ns >= _min_op_ns)):
                heavy.append(i)
        if len(heavy) < 2:
            return 0
        preds, touches = self._dependencies()
        cdef object one = 1     # bit sets are Python ints (C shifts would overflow)
        bit = {h: one << k for k, h in enumerate(heavy)}
        above = [0] * self.n_ops        # per op: its heavy ancestors, a bit per heavy op
        for i in range(self.n_ops):
            a = 0
            for p in <list>preds[i]:
                a |= <object>above[p] | bit.get(p, 0)
            above[i] = a
        spans = []
        earlier = 0
        for k, i in enumerate(heavy):
            independent = earlier & ~above[i]
            if independent:             # from the first heavy op it does not reach
                spans.append([heavy[(independent & -independent).bit_length() - 1], i + 1])
            earlier |= one << k
        if not spans:
            return 0
        spans.sort()
        regions = [spans[0]]
        for lo, hi in spans[1:]:
            last = regions[len(regions) - 1]
            if lo < last[1]:
                last[1] = max(last[1], hi)
            else:
                regions.append([lo, hi])
        self.schedule = Schedule(self.n_ops, [tuple(r) for r in regions], heavy, preds)
        self._alloc_run_state()
        self._keep_apart(preds, touches)
        if self.traced:
            self.stale = True           # keep the regions' slots apart in the arena
        return 0

    cdef int _keep_apart(self, list preds, dict touches) except -1:
        """``region_last``: for each arena slot touched in a region, the latest op
        that may start before every op touching it has ended (one in the same region
        that does not depend on all of them), when later than the slot's last use. The
        arena gives the slot's bytes to no slot first written up to that op."""
        cdef int i, r, lo, hi, u, last
        cdef dict region_last = {}
        cdef object one = 1     # bit sets are Python ints (C shifts would overflow)
        below = []              # per op of a region: the ops after it that depend on it,
        region_of = {}          # a bit per op of the region (bit 0: the region's lo)
        for r, (lo, hi) in enumerate(self.schedule.regions):
            after = [0] * (hi - lo)
            for i in range(hi - 1, lo - 1, -1):
                after[i - lo] |= one << (i - lo)
                for p in <list>preds[i]:
                    if p >= lo:
                        after[p - lo] |= after[i - lo]
            below.append(after)
            for i in range(lo, hi):
                region_of[i] = r
        for s, ops in touches.items():
            if self.kinds[<int>s] != SLOT_ARENA:
                continue
            last = max(<int>self.live_until[s], max(ops))
            latest = last
            for u in ops:
                r = region_of.get(u, -1)
                if r < 0:
                    continue
                lo, hi = self.schedule.regions[r]
                if last + 1 >= hi:
                    continue
                # ops of the region after `last` that do not depend on u
                free = ((one << (hi - lo)) - 1) & ~((one << (last + 1 - lo)) - 1) \
                    & ~(<list>below[r])[u - lo]
                if free:
                    latest = max(latest, lo + free.bit_length() - 1)
            if latest > last:
                region_last[s] = latest
        self.region_last = region_last
        return 0

    cdef int _alloc_run_state(self) except -1:
        PyMem_Free(self.waiting)
        PyMem_Free(self.ready)
        self.waiting = <int*>PyMem_Malloc((self.n_ops + 1) * sizeof(int))
        self.ready = <int*>PyMem_Malloc((self.n_ops + 1) * sizeof(int))
        if self.waiting is NULL or self.ready is NULL:
            raise MemoryError()
        return 0

    cdef int _run_scheduled(self, int64_t start) except -1:
        """The ops in plan order, each region as one call of the thread pool."""
        cdef int i = 0, r = 0, lo, hi
        cdef list regions = self.schedule.regions
        self.profiled = start
        while i < self.n_ops:
            if r < len(regions):
                lo, hi = regions[r]
                if i == lo:
                    self._run_region(r)
                    i = hi
                    r += 1
                    continue
            self.current_op = i
            if start:
                self._run_profiled(i)
            else:
                self._run_op(i)
            i += 1
        return 0

    cdef int _run_region(self, int r) except -1:
        """Run region `r`'s ops on up to num_threads threads; raise the first error."""
        cdef Schedule sch = self.schedule
        cdef int lo, hi, i, n = self.num_threads
        lo, hi = sch.regions[r]
        self.n_ready = 0
        for i in range(lo, hi):
            self.waiting[i] = sch.indegree[i]
            if sch.indegree[i] == 0:
                self.ready[self.n_ready] = i
                self.n_ready += 1
        self.left = hi - lo
        self.heavy_left = sch.region_heavy[r]
        self.completions = 0
        self.failed = False
        self.error = None
        self.current_op = -1
        with nogil:
            parallel_run(_region_piece, <void*>self, n, n)
        if not self.failed and self.left > 0:
            # A piece goes to whichever thread claims it first: where pool threads
            # claimed every piece (the caller descheduled meanwhile), the ops only the
            # caller may run (ordered ones) are still to do, and nothing is in flight.
            self._work()
        if self.error is not None:
            error, self.error = self.error, None
            self.current_op = self.error_op
            raise error
        return 0

    cdef void _work(self) noexcept:
        """One thread's part of a region (the GIL held, let go while waiting): take
        ready ops (the caller any, a pool thread heavy ones) until none is left for it
        or an op failed."""
        cdef bint caller = PyThread_get_thread_ident() == self.thread
        cdef int i, seen
        if not caller:
            _name_pool_thread()
        while not self.failed and self.left > 0 and (caller or self.heavy_left > 0):
            i = self._take(caller)
            if i < 0:                       # wait for an op in flight to end
                seen = self.completions
                with nogil:
                    while load_int(&self.completions) == seen:
                        sched_yield()
                continue
            try:
                if self.profiled:
                    self._run_profiled(i)
                else:
                    self._run_op(i)
            except BaseException as exc:
                if self.error is None:
                    self.error = exc
                    self.error_op = i
                self.failed = True
            self._finish(i)

    cdef int _take(self, bint caller):
        """The lowest-numbered ready op this thread may run (-1: none), taken."""
        cdef int k, i, best = -1
        cdef int* heavy = self.schedule.heavy
        for k in range(self.n_ready):
            i = self.ready[k]
            if (caller or heavy[i]) and (best < 0 or i < self.ready[best]):
                best = k
        if best < 0:
            return -1
        i = self.ready[best]
        self.n_ready -= 1
        self.ready[best] = self.ready[self.n_ready]
        if heavy[i]:
            self.heavy_left -= 1
        return i

    cdef void _finish(self, int i):
        """Op `i` ended: its dependents that waited only for it are ready."""
        cdef Schedule sch = self.schedule
        cdef int k, d
        for k in range(sch.dep_start[i], sch.dep_start[i + 1]):
            d = sch.deps[k]
            self.waiting[d] -= 1
            if self.waiting[d] == 0:
                self.ready[self.n_ready] = d
                self.n_ready += 1
        self.left -= 1
        store_int(&self.completions, self.completions + 1)

    cdef bint _bind(self, dict feeds, bint check) except -1:
        """Bind feeds and persistables to their slots. With `check`, return False (binding
        nothing) unless the feeds match the plan's signature."""
        cdef int s
        cdef DenseTensor t
        if check:
            if len(feeds) != len(self.feed_slots):
                return False
            for name, s in self.feed_slots:
                value = feeds.get(name)
                if not (type(value) is np.ndarray or isinstance(value, DenseTensor)):
                    return False
                try:
                    t = as_dense(value)
                except TypeError:       # a dtype the front end converts (byte-swapped)
                    return False
                if not (view_same_meta(&t.view, &self.planned[s])
                        and view_is_contiguous(&t.view)):
                    return False
                self.objs[s] = t
                self.views[s] = t.view
        else:
            for name, s in self.feed_slots:
                t = as_dense(feeds[name])
                self.objs[s] = t
                self.views[s] = t.view
        for name, s, reader in self.persist_slots:
            value = self.scope.get(name)
            if value is None:
                if reader is not None:
                    raise RuntimeError(
                        f"persistable variable '{name}' has no value in the scope but is "
                        f"read by {reader}; run the startup program first (or load the "
                        f"parameters)")
                self.objs[s] = None
                self.views[s].ndim = -1
            else:
                t = <DenseTensor?>value
                if not view_fits_meta(&t.view, &self.planned[s]):
                    raise ValueError(
                        f"persistable variable '{name}' holds {_describe(&t.view)} in the "
                        f"scope, but the program declares it "
                        f"{_describe(&self.planned[s])}; set a value of that dtype and "
                        f"shape (scope.set('{name}', array))")
                self.objs[s] = t
                self.views[s] = t.view
        return True

    cdef void _release(self):
        cdef int s, k
        for s in range(self.n_slots):
            k = self.kinds[s]
            if self.dirty[s]:
                self.views[s] = self.planned[s]
                self.dirty[s] = 0
                self.objs[s] = None
            elif k == SLOT_CONST:
                if self.views[s].data != self.planned[s].data:     # written this run
                    self.views[s] = self.planned[s]
                    self.objs[s] = self.consts[s]
            elif k != SLOT_ARENA:
                self.objs[s] = None

    cdef int _run_c(self, int i) except -1:
        cdef OpRecord* rec = &self.ops[i]
        cdef fastop_view* ins[MAX_OPERANDS]
        cdef fastop_view* outs[MAX_OPERANDS]
        cdef fastop_view metas[MAX_OPERANDS]
        cdef fastop_view previous[MAX_OPERANDS]
        cdef int j, s, status
        cdef list kept = None, staging = None
        for j in range(rec.n_in):          # an absent optional input: a NULL view
            ins[j] = &self.views[rec.ins[j]] if rec.ins[j] >= 0 else NULL
        if rec.dispatch >= 0 and ins[rec.dispatch].dtype != rec.dtype:
            raise TypeError(
                f"{self.py_calls[i].name}: input "
                f"'{self.names[rec.ins[rec.dispatch]]}' has dtype "
                f"{dtype_from_code(ins[rec.dispatch].dtype).name} at run time, the plan "
                f"expected {dtype_from_code(rec.dtype).name}")
        status = rec.infer(ins, rec.n_in, metas, rec.n_out, &rec.attrs)
        if status != K_OK:
            self._kernel_error(i, status, ins)
        if rec.reads_output:
            # an output slot is also an input: the kernel reads the value the slot had
            # (kept alive here) even when the slot gets a new buffer below
            kept = [self.objs[rec.ins[j]] if rec.ins[j] >= 0 else None
                    for j in range(rec.n_in)]
            for j in range(rec.n_in):
                if rec.ins[j] >= 0:
                    previous[j] = self.views[rec.ins[j]]
                    ins[j] = &previous[j]
        for j in range(rec.n_out):
            s = rec.outs[j]
            if not (self.kinds[s] == SLOT_ARENA and self.traced and not self.dirty[s]
                    and view_same_meta(&metas[j], &self.views[s])):
                self._provide(s, &metas[j])
            outs[j] = &self.views[s]
        if rec.writes_persist:
            # a persistable keeps its buffer; an input sharing it other than element
            # for element with an in-place-safe kernel must not see half-written data
            for j in range(rec.n_out):
                if (<CKernel>self.py_calls[i]).must_stage(ins, rec.n_in, outs[j], j):
                    staged = alloc_like(DenseTensor, outs[j])
                    if staging is None:
                        staging = []
                    staging.append((j, staged))
                    outs[j] = &(<DenseTensor>staged).view
        if rec.n_out and outs[0].size >= rec.grain:
            with nogil:
                status = rec.fn(ins, rec.n_in, outs, rec.n_out, &rec.attrs)
        else:
            status = rec.fn(ins, rec.n_in, outs, rec.n_out, &rec.attrs)
        if status != K_OK:
            self._kernel_error(i, status, ins)
        if staging is not None:
            for j, staged in staging:
                view_copy(&(<DenseTensor>staged).view, &self.views[rec.outs[j]])
        return 0

    cdef int _kernel_error(self, int i, int status, fastop_view** ins) except -1:
        """Raise the kernel's own error (naming its inputs, shapes and dtypes)."""
        cdef OpRecord* rec = &self.ops[i]
        described = [(None, None) if ins[j] == NULL else
                     (view_shape(ins[j]), dtype_from_code(ins[j].dtype).name)
                     for j in range(rec.n_in)]
        (<CKernel>self.py_calls[i])._raise(status, described)
        return -1

    cdef int _provide(self, int s, const fastop_view* meta) except -1:
        """Give slot `s` a buffer for `meta` (shape/dtype) for this run."""
        cdef int k = self.kinds[s]
        cdef DenseTensor t
        if k == SLOT_PERSIST:
            if self.objs[s] is not None:
                t = <DenseTensor>self.objs[s]
                if view_same_meta(meta, &t.view):
                    return 0
                raise ValueError(
                    f"persistable variable '{self.names[s]}' has shape {t.shape} "
                    f"{t.dtype.name}; the op writes shape {view_shape(meta)} "
                    f"{dtype_from_code(meta.dtype).name}")
            t = alloc_tensor(DenseTensor, meta.ndim, meta.shape, meta.dtype)
            self.scope[self.names[s]] = t
        else:
            t = alloc_tensor(DenseTensor, meta.ndim, meta.shape, meta.dtype)
            if k == SLOT_ARENA:
                self.dirty[s] = 1
                if self.traced:
                    self.stale = True
        self.objs[s] = t
        self.views[s] = t.view
        return 0

    cdef DenseTensor _wrap(self, int s):
        """A DenseTensor for slot `s` (a view into the arena for arena slots, a read-only
        view of the viewed memory for view slots)."""
        obj = self.objs[s]
        is_view = self.kinds[s] == SLOT_VIEW
        if obj is not None and not is_view:
            return <DenseTensor>obj
        cdef DenseTensor t = DenseTensor.__new__(DenseTensor)
        t.view = self.views[s]
        t.owner = self.arena if obj is None else obj
        t.readonly = is_view
        return t

    cdef int _run_view(self, int i) except -1:
        cdef OpRecord* rec = &self.ops[i]
        cdef fastop_view* ins[MAX_OPERANDS]
        cdef int j, out = rec.outs[0]
        cdef fastop_view* out_view = &self.views[out]
        cdef DenseTensor copied
        for j in range(rec.n_in):
            ins[j] = &self.views[rec.ins[j]]
        cdef int status = rec.infer(ins, rec.n_in, out_view, 1, &rec.attrs)
        if status == K_OK:
            status = rec.fn(ins, rec.n_in, &out_view, 1, &rec.attrs)
        owner = self.objs[rec.ins[0]]      # the owner of the viewed memory (None: arena)
        if status == K_ERR_LAYOUT:         # a layout the kernel cannot view: a copy
            copied = alloc_like(DenseTensor, ins[0])
            view_copy(ins[0], &copied.view)
            ins[0] = &copied.view
            rec.infer(ins, rec.n_in, out_view, 1, &rec.attrs)
            status = rec.fn(ins, rec.n_in, &out_view, 1, &rec.attrs)
            owner = copied
        if status != K_OK:
            self._kernel_error(i, status, ins)
        self.objs[out] = owner
        return 0

    cdef int _run_py(self, int i) except -1:
        cdef tuple slots = <tuple>self.py_ins[i]
        cdef int n = len(slots), j, s
        cdef list args = [None] * n
        cdef DenseTensor t, dst
        call = self.py_calls[i]
        if type(call) is PythonKernel:     # numpy arrays straight from the slots
            for j in range(n):
                s = slots[j]
                if s >= 0:
                    owner = self.objs[s]
                    args[j] = ndarray_of(&self.views[s], self.arena if owner is None
                                         else owner, self.kinds[s] == SLOT_VIEW)
            results = (<PythonKernel>call).call_arrays(args, DenseTensor)
        else:
            for j in range(n):
                s = slots[j]
                if s >= 0:
                    args[j] = self._wrap(s)
            results = call(*args)
        for j, s in enumerate(<tuple>self.py_outs[i]):
            t = <DenseTensor?>results[j]
            if self.kinds[s] == SLOT_PERSIST:
                # the scope owns its values: copy (the result may be an input, a feed
                # or a view into the arena), in place when the shape stays
                dst = <DenseTensor?>self.objs[s] if self.objs[s] is not None else None
                if dst is not None and view_same_meta(&t.view, &dst.view):
                    if view_assign(&t.view, &dst.view) < 0:
                        raise MemoryError()
                    continue
                copied = alloc_like(DenseTensor, &t.view)
                view_copy(&t.view, &(<DenseTensor>copied).view)
                t = <DenseTensor>copied
                self.scope[self.names[s]] = t
            elif self.kinds[s] == SLOT_ARENA:
                self.dirty[s] = 1
            self.objs[s] = t
            self.views[s] = t.view
        return 0

    cdef list _fetch(self):
        cdef list out = []
        cdef int s, k
        cdef DenseTensor t
        for k, s in enumerate(self.fetch_slots):
            if self.kinds[s] == SLOT_FRESH and self.objs[s] is not None \
                    and s not in self.fetch_slots[:k]:        # a repeated fetch: a copy
                out.append(self.objs[s])
            else:
                t = alloc_tensor(DenseTensor, self.views[s].ndim, self.views[s].shape,
                                 self.views[s].dtype)
                view_copy(&self.views[s], &t.view)
                out.append(t)
        return out

    cdef int _lifetimes(self) except -1:
        """How long each slot's memory is needed: to its last use, and longer when a
        view kernel's or a Python op's result (possibly a view: reshape, broadcast)
        lives on, or when it is fetched (after the last op). Latest ops first, so
        chains extend."""
        cdef int s, t, i
        last_use = [self.last_use[s] for s in range(self.n_slots)]
        for s in self.fetch_slots:
            last_use[s] = self.n_ops
        for i in range(self.n_ops - 1, -1, -1):
            if self.ops[i].kind != OP_C and self.ops[i].n_out:
                until = max([last_use[s] for s in self.py_outs[i]])
                for s in self.py_ins[i]:
                    if s >= 0 and last_use[s] < until:
                        last_use[s] = until
        self.release_at = [[] for i in range(self.n_ops)]
        for s in range(self.n_slots):
            if self.kinds[s] == SLOT_ARENA and 0 <= last_use[s] < self.n_ops:
                self.release_at[last_use[s]].append(s)
        self.live_until = last_use
        return 0

    cdef int _lay_out_arena(self) except -1:
        """Place every arena slot at an offset: biggest first, lowest offset that no
        slot with an overlapping live range occupies (greedy by size). Records the
        arena's size and the minimum live set (the most bytes live at one op).

        The placed slots whose live ranges overlap a new one are found through a max
        tree over the slots sorted by first write (each leaf: a placed slot's last
        use), so a layout costs O(n log n + conflicts) rather than O(n^2): a chain of
        10,000 ops took 3.7 s here before."""
        cdef int m = 0, s, k, e, p, hi, lo, mid, n_busy, leaves = 1
        cdef ptrdiff_t off, total = 0, live = 0, peak = 0
        last_use = self.live_until
        for s in range(self.n_slots):
            if self.kinds[s] == SLOT_ARENA and self.first_def[s] >= 0:
                m += 1
        cdef ArenaSlot* slots = <ArenaSlot*>PyMem_Malloc((m + 1) * sizeof(ArenaSlot))
        cdef int* by_first = <int*>PyMem_Malloc((m + 1) * sizeof(int))
        cdef long long* keys = <long long*>PyMem_Malloc((m + 1) * sizeof(long long))
        cdef int* leaf_of = <int*>PyMem_Malloc((m + 1) * sizeof(int))
        cdef Busy* busy = <Busy*>PyMem_Malloc((m + 1) * sizeof(Busy))
        cdef ptrdiff_t* delta = <ptrdiff_t*>PyMem_Malloc((self.n_ops + 2) * sizeof(ptrdiff_t))
        while leaves < m:
            leaves *= 2
        cdef int* tree = <int*>PyMem_Malloc(2 * leaves * sizeof(int))
        try:
            if not (slots and by_first and keys and leaf_of and busy and delta and tree):
                raise MemoryError()
            k = 0
            for s in range(self.n_slots):
                if self.kinds[s] == SLOT_ARENA and self.first_def[s] >= 0:
                    slots[k].slot = s
                    slots[k].size = self.views[s].size * itemsize_of(self.views[s].dtype)
                    slots[k].aligned = (slots[k].size + ALIGN - 1) // ALIGN * ALIGN
                    slots[k].first = self.first_def[s]
                    slots[k].last = max(<int>last_use[s], slots[k].first)
                    if self.schedule is not None and s in self.region_last:
                        slots[k].last = max(slots[k].last, <int>self.region_last[s])
                    k += 1
            # placement order: biggest first, then earliest first write, then slot
            qsort(slots, m, sizeof(ArenaSlot), _cmp_placement)
            # the tree's leaves: the slots by first write (key: first << 32 | index)
            for k in range(m):
                keys[k] = (<long long>slots[k].first << 32) | k
            qsort(keys, m, sizeof(long long), _cmp_key)
            for p in range(m):
                by_first[p] = <int>(keys[p] & 0xffffffff)
                leaf_of[by_first[p]] = p
            for p in range(2 * leaves):
                tree[p] = -1
            for e in range(m):
                # placed slots among those first written no later than e's last use
                lo, hi = 0, m
                while lo < hi:
                    mid = (lo + hi) // 2
                    if slots[by_first[mid]].first <= slots[e].last:
                        lo = mid + 1
                    else:
                        hi = mid
                n_busy = _collect(tree, 1, 0, leaves, hi, slots[e].first, by_first,
                                  slots, busy, 0)
                for k in range(1, n_busy):
                    if _cmp_busy(&busy[k - 1], &busy[k]) > 0:
                        # often already in order: the slots live at once were placed
                        # one above the other in the order of their first writes
                        qsort(busy, n_busy, sizeof(Busy), _cmp_busy)
                        break
                off = 0
                for k in range(n_busy):
                    if off + slots[e].aligned <= busy[k].offset:
                        break
                    off = max(off, busy[k].offset + busy[k].aligned)
                slots[e].offset = off
                total = max(total, off + slots[e].aligned)
                p = leaf_of[e] + leaves
                tree[p] = slots[e].last
                p //= 2
                while p >= 1 and tree[p] < slots[e].last:
                    tree[p] = slots[e].last
                    p //= 2
            memset(delta, 0, (self.n_ops + 2) * sizeof(ptrdiff_t))
            for k in range(m):
                delta[slots[k].first] += slots[k].size
                delta[min(slots[k].last, self.n_ops) + 1] -= slots[k].size
            for k in range(self.n_ops + 1):
                live += delta[k]
                peak = max(peak, live)
            self.arena = alloc_tensor(DenseTensor, 1, &total, FASTOP_BOOL)
            for k in range(m):
                s = slots[k].slot
                self.planned[s] = self.views[s]
                self.planned[s].data = self.arena.view.data + slots[k].offset
                view_set_contiguous_strides(&self.planned[s])
                self.dirty[s] = 1       # _release points the slot at its planned view
        finally:
            PyMem_Free(slots)
            PyMem_Free(by_first)
            PyMem_Free(keys)
            PyMem_Free(leaf_of)
            PyMem_Free(busy)
            PyMem_Free(delta)
            PyMem_Free(tree)
        self.arena_bytes = total
        self.min_live_bytes = peak
        self.traced = True
        self.stale = False
        return 0

    def arena_layout(self) -> list:
        """``[(name, offset, bytes, first op, last op)]`` of the arena slots (after the
        first run), for inspecting the memory plan."""
        cdef int s
        if not self.traced:
            return []
        return [(self.names[s], <ptrdiff_t>(self.planned[s].data - self.arena.view.data),
                 self.planned[s].size * itemsize_of(self.planned[s].dtype),
                 self.first_def[s], max(<int>self.live_until[s], self.first_def[s]))
                for s in range(self.n_slots)
                if self.kinds[s] == SLOT_ARENA and self.first_def[s] >= 0]


cdef void _name_pool_thread() noexcept:
    """Name a pool thread running ops ("fastop pool <native id>", not Python's
    "Dummy-<n>"): the profiler's tables and trace tracks show it."""
    try:
        t = threading.current_thread()
        if type(t) is threading._DummyThread:
            t.name = f"fastop pool {t.native_id}"
    except Exception:       # a name is only a label: never fail a run over it
        pass


cdef void _region_piece(void* ctx, int piece) noexcept nogil:
    """A piece of a region's pool call: the thread's part of the region."""
    with gil:
        (<Plan>ctx)._work()


cdef class Schedule:
    """Which ops of a Plan may run at once: plan-order ranges (regions) run on the pool,
    each op waiting for its dependencies inside its region (built once, shared by no
    other plan)."""

    def __cinit__(self, int n_ops, list regions, list heavy, list preds):
        cdef int i, r, k, p, lo, hi, n_edges = 0
        self.n_ops = n_ops
        self.regions = regions
        self.heavy_ops = heavy
        self.heavy = <int*>PyMem_Malloc((n_ops + 1) * sizeof(int))
        self.indegree = <int*>PyMem_Malloc((n_ops + 1) * sizeof(int))
        self.dep_start = <int*>PyMem_Malloc((n_ops + 2) * sizeof(int))
        self.region_heavy = <int*>PyMem_Malloc((len(regions) + 1) * sizeof(int))
        if not (self.heavy and self.indegree and self.dep_start and self.region_heavy):
            raise MemoryError()
        memset(self.heavy, 0, (n_ops + 1) * sizeof(int))
        memset(self.indegree, 0, (n_ops + 1) * sizeof(int))
        memset(self.dep_start, 0, (n_ops + 2) * sizeof(int))
        for i in heavy:
            self.heavy[i] = 1
        region_of = [-1] * n_ops
        for r, (lo, hi) in enumerate(regions):
            self.region_heavy[r] = 0
            for i in range(lo, hi):
                region_of[i] = r
                self.region_heavy[r] += self.heavy[i]
        # dependencies inside a region (those before it are done when it starts)
        for i in range(n_ops):
            for p in <list>preds[i]:
                if region_of[i] >= 0 and region_of[p] == region_of[i]:
                    self.indegree[i] += 1
                    self.dep_start[p + 1] += 1
                    n_edges += 1
        for i in range(n_ops):
            self.dep_start[i + 1] += self.dep_start[i]
        self.deps = <int*>PyMem_Malloc((n_edges + 1) * sizeof(int))
        if self.deps is NULL:
            raise MemoryError()
        fill = [self.dep_start[i] for i in range(n_ops)]
        for i in range(n_ops):
            for p in <list>preds[i]:
                if region_of[i] >= 0 and region_of[p] == region_of[i]:
                    k = fill[p]
                    self.deps[k] = i
                    fill[p] = k + 1

    def __dealloc__(self):
        PyMem_Free(self.heavy)
        PyMem_Free(self.indegree)
        PyMem_Free(self.dep_start)
        PyMem_Free(self.deps)
        PyMem_Free(self.region_heavy)


cdef class FastPath:
    """An executor's fast path for one program: the plan pool of the signature it ran
    last and the fetch list it ran with, remembered by the ids of its items (the front
    end keeps those ids valid, see ``fastop.static.executor._ProgramPlans``).

    ``pool`` is the front end's compiled signature: ``pool.free`` (a list of idle
    Plans), ``pool.spare()`` (a plan when none is idle) and ``pool.annotate(exc,
    plan)`` (names the op that raised). In C, because it runs on every run."""

    cdef readonly object pool
    cdef list free
    cdef tuple ids
    cdef tuple watched
    cdef tuple held

    def __init__(self, pool, fetch, tuple watched, tuple held):
        self.pool = pool
        self.free = pool.free
        self.ids = tuple([id(item) for item in fetch])
        self.watched = watched        # weak references that must still be alive
        self.held = held              # items kept alive so that their ids stay theirs

    def run(self, fetch, dict feeds, dict scope):
        """The fetched tensors, or None (running nothing) unless `fetch` (a list or
        tuple) holds the remembered items and `feeds` has the plan's signature."""
        cdef Py_ssize_t i, n = len(fetch)
        cdef Plan plan
        if n != len(self.ids):
            return None
        for i in range(n):
            if id(fetch[i]) != self.ids[i]:
                return None
        for ref in self.watched:
            if ref() is None:
                return None
        try:
            plan = self.free.pop()
        except IndexError:
            plan = self.pool.spare()
        try:
            return plan._run(feeds, scope, True)
        except BaseException as exc:
            self.pool.annotate(exc, plan)
            raise
        finally:
            self.free.append(plan)


cdef struct ArenaSlot:
    int slot
    int first
    int last
    ptrdiff_t size
    ptrdiff_t aligned
    ptrdiff_t offset


cdef struct Busy:
    ptrdiff_t offset
    ptrdiff_t aligned


cdef int _cmp_placement(const void* a, const void* b) noexcept nogil:
    cdef const ArenaSlot* x = <const ArenaSlot*>a
    cdef const ArenaSlot* y = <const ArenaSlot*>b
    if x.aligned != y.aligned:
        return -1 if x.aligned > y.aligned else 1
    if x.first != y.first:
        return -1 if x.first < y.first else 1
    return (x.slot > y.slot) - (x.slot < y.slot)


cdef int _cmp_key(const void* a, const void* b) noexcept nogil:
    cdef long long x = (<const long long*>a)[0], y = (<const long long*>b)[0]
    return (x > y) - (x < y)


cdef int _cmp_busy(const void* a, const void* b) noexcept nogil:
    cdef const Busy* x = <const Busy*>a
    cdef const Busy* y = <const Busy*>b
    if x.offset != y.offset:
        return -1 if x.offset < y.offset else 1
    return (x.aligned > y.aligned) - (x.aligned < y.aligned)


cdef int _collect(const int* tree, int node, int lo, int hi, int limit, int first,
                  const int* by_first, const ArenaSlot* slots, Busy* busy,
                  int n) noexcept nogil:
    """Append to `busy` the placed slots among leaves [0, limit) of the max tree whose
    last use is at least `first` (their live ranges overlap); the new count."""
    cdef int mid
    if lo >= limit or tree[node] < first:
        return n
    if hi - lo == 1:
        busy[n].offset = slots[by_first[lo]].offset
        busy[n].aligned = slots[by_first[lo]].aligned
        return n + 1
    mid = (lo + hi) // 2
    n = _collect(tree, 2 * node, lo, mid, limit, first, by_first, slots, busy, n)
    return _collect(tree, 2 * node + 1, mid, hi, limit, first, by_first, slots, busy, n)
