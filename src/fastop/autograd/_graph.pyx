# cython: freethreading_compatible = False
"""The autograd graph: nodes, recording, and the backward walk.

A recorded op is a :class:`Node`: ``next`` holds, per input, the input Tensor when it
takes a gradient (else None); each output Tensor points back at its node. Nothing points
from a node to its outputs, so there are no reference cycles: an op that saves one of its
outputs for backward keeps the kernel's raw result and hands the user a view of it.

``backward`` walks the graph in topological order (Kahn's algorithm over the nodes
reachable from the outputs, counting in-edges first), accumulates the gradients of
tensors used several times, and frees saved tensors after use unless ``retain_graph``.
An op's gradient rule is applied by the registry's one function (``apply_grad_rule``)
with grad mode set to ``create_graph``, so rules made of registry ops are recorded again
when higher-order gradients are wanted; a rule that is one backward op (``grad_op``) runs
that op's kernel directly when no graph is being built. A leaf's ``.grad`` is
accumulated under a lock, so threads running backward into shared parameters lose no
update.

The profiler's hooks (one flag check each): the walk itself (a ``backward``/``grad``
event), each node it runs (nested under it), and a kernel rule's backward op.
"""
from cpython.pythread cimport (PyThread_type_lock, PyThread_allocate_lock,
                               PyThread_acquire_lock, PyThread_release_lock, WAIT_LOCK,
                               NOWAIT_LOCK)
from cpython.ref cimport Py_REFCNT
from libc.stddef cimport ptrdiff_t
from fastop._core.storage cimport (DenseTensor, FASTOP_FLOAT32, FASTOP_FLOAT64,
                                   FASTOP_FLOAT16, FASTOP_MAX_NDIM,
                                   FASTOP_NUM_COMPUTE_DTYPES, memory_root)
from fastop._tensor cimport (Tensor, add_tensors, as_tensor, full_tensor, view_of)
from fastop.ops._dispatch cimport CallPlan, run_kernel, swap_mode_override
from fastop.autograd._grad_mode cimport grad_enabled, swap_grad_enabled
from fastop._core.profiling cimport (EVENT_BACKWARD, EVENT_NODE, EVENT_OP, now_ns,
                                     profiling_flag, record)
from libc.stdint cimport int64_t

import threading
import warnings

import numpy as np

from fastop.ops._registry import add_note, apply_grad_rule
from fastop.ops.builtin._table import B

__all__ = ["backward", "grad", "Node", "push_saved_hooks", "pop_saved_hooks"]


cdef bint is_float(DenseTensor t) noexcept:
    return t.view.dtype == FASTOP_FLOAT32 or t.view.dtype == FASTOP_FLOAT64 \
        or t.view.dtype == FASTOP_FLOAT16


# --------------------------------------------------------------------------- nodes

cdef class Node:
    """A recorded op in the graph. Subclasses compute input gradients in :meth:`run`."""

    cdef list run(self, list grads, bint create_graph):
        raise NotImplementedError

    cdef void release(self):
        """After backward without retain_graph: drop what the graph holds (edges, saved
        tensors) so activations are freed even while the output is alive."""
        self.released = True
        self.next = None

    cdef str label(self):
        return type(self).__name__

    cdef object origin(self):
        return type(self)

    def __repr__(self):
        return f"<{self.label()} node>"


cdef object zeros_like_meta(tuple meta):
    cdef list shape = meta[0]
    cdef ptrdiff_t dims[FASTOP_MAX_NDIM]
    cdef int i
    for i in range(len(shape)):
        dims[i] = shape[i]
    return full_tensor(len(shape), dims, meta[1], 0.0)


cdef tuple meta_of(object t):
    return ((<Tensor>t).shape, (<Tensor>t).view.dtype)


cdef bint grad_fits(object g, object input):
    """g is a Tensor of x's shape and dtype: the usual case, checked before any error
    message is formatted (a gradient that does not fit goes through check_grad)."""
    if type(g) is not Tensor:
        return False
    cdef Tensor t = <Tensor>g, x = <Tensor>input
    if t.view.ndim != x.view.ndim or t.view.dtype != x.view.dtype:
        return False
    cdef int i
    for i in range(t.view.ndim):
        if t.view.shape[i] != x.view.shape[i]:
            return False
    return True


cdef object check_grad(object g, object input, str who, object what):
    """g as a Tensor, checked against the input x it is the gradient of."""
    cdef Tensor t, x = <Tensor>input
    if isinstance(g, Tensor):
        t = <Tensor>g
    elif isinstance(g, (DenseTensor, np.ndarray)):
        t = as_tensor(g, -1)
    else:
        raise TypeError(f"{who}: the gradient for {what} must be a Tensor or None, got "
                        f"{type(g).__name__}")
    cdef int i
    cdef bint same = t.view.ndim == x.view.ndim
    if same:
        for i in range(t.view.ndim):
            if t.view.shape[i] != x.view.shape[i]:
                same = False
                break
    if not same:
        raise ValueError(f"{who}: the gradient for {what} has shape {t.shape}, expected "
                         f"{x.shape} (the input's shape); gradients are never broadcast")
    if t.view.dtype != x.view.dtype:
        raise TypeError(f"{who}: the gradient for {what} has dtype {t.dtype.name}, "
                        f"expected {x.dtype.name} (the input's dtype)")
    return t


cdef unsigned long long ALL_SAVED = 0xffffffffffffffff   # a version mask: every entry


cdef unsigned long long versions(tuple saved, unsigned long long mask):
    """The sum of the memory versions of saved entries k with bit k of `mask` set (every
    entry from the 64th on): it grows when any of them is written in place (versions
    only increase), so one number checks them all."""
    cdef unsigned long long total = 0
    cdef DenseTensor root
    cdef Py_ssize_t k = -1
    for x in saved:
        k += 1
        if k < 64 and not (mask >> k) & 1:
            continue
        if isinstance(x, DenseTensor):
            root = memory_root(<DenseTensor>x)
            total += root._version
        elif isinstance(x, (list, tuple)):
            for e in x:
                if isinstance(e, DenseTensor):
                    root = memory_root(<DenseTensor>e)
                    total += root._version
    return total


cdef object modified_error(Node node, unsigned long long now, unsigned long long then):
    return RuntimeError(
        f"backward through {node.label()}: a tensor it saved for the gradient was "
        f"modified in place after the forward pass (set_value, item assignment, an "
        f"optimizer step, out=, or a PyLayer returning its input), so the gradient "
        f"would be wrong; modify it after backward, or modify a copy (in-place versions "
        f"of the saved tensors: received tensor_version:{now} != "
        f"wrapper_version_snapshot:{then})")


# --------------------------------------------------------------------------- saved hooks

# saved_tensors_hooks: per thread, like grad mode. The C counter makes the check on every
# recorded op one thread-local read; the hooks themselves live in a threading.local.
cdef extern from *:
    """
    static _Thread_local int fastop_saved_hooks_depth = 0;
    """
    int _hooks_depth "fastop_saved_hooks_depth"

_hooks = threading.local()


def push_saved_hooks(pack_hook, unpack_hook) -> None:
    """Make (pack_hook, unpack_hook) this thread's innermost saved-tensor hooks."""
    global _hooks_depth
    stack = getattr(_hooks, "stack", None)
    if stack is None:
        stack = _hooks.stack = []
    stack.append((pack_hook, unpack_hook))
    _hooks_depth = len(stack)


def pop_saved_hooks() -> None:
    """Drop this thread's innermost saved-tensor hooks."""
    global _hooks_depth
    stack = getattr(_hooks, "stack", None)
    if not stack:
        raise RuntimeError("saved_tensors_hooks: exited more often than entered on this "
                           "thread")
    stack.pop()
    _hooks_depth = len(stack)


cdef tuple saved_hooks():
    """This thread's innermost (pack_hook, unpack_hook), or None."""
    if not _hooks_depth:
        return None
    return _hooks.stack[len(_hooks.stack) - 1]


cdef class _Packed:
    """What a pack hook returned for one saved tensor (told apart from other saved
    values, which are kept as they are)."""
    cdef object value


cdef object _pack_one(object value, object pack_hook):
    cdef _Packed p
    if isinstance(value, Tensor):
        p = _Packed.__new__(_Packed)
        p.value = pack_hook(value)
        return p
    if isinstance(value, (list, tuple)):
        return type(value)([_pack_one(e, pack_hook) for e in value])
    return value


cdef tuple pack_saved(tuple values, object pack_hook):
    """values with each Tensor (also inside lists/tuples) replaced by what pack_hook
    returns for it; the hook runs without recording."""
    cdef bint prev = swap_grad_enabled(False)
    try:
        return tuple([_pack_one(v, pack_hook) for v in values])
    finally:
        swap_grad_enabled(prev)


cdef object _unpack_one(object value, object unpack_hook):
    if isinstance(value, _Packed):
        t = unpack_hook((<_Packed>value).value)
        if isinstance(t, Tensor):
            return t
        if isinstance(t, DenseTensor):
            return view_of(<DenseTensor>t)
        raise TypeError(f"saved_tensors_hooks: unpack_hook must return a Tensor, got "
                        f"{type(t).__name__}")
    if isinstance(value, (list, tuple)):
        return type(value)([_unpack_one(e, unpack_hook) for e in value])
    return value


cdef tuple unpack_saved(tuple packed, object unpack_hook):
    """The saved values back from pack_saved's result (the hook runs without
    recording)."""
    cdef bint prev = swap_grad_enabled(False)
    try:
        return tuple([_unpack_one(v, unpack_hook) for v in packed])
    finally:
        swap_grad_enabled(prev)


cdef class OpNode(Node):
    """A registry op: its backward is the op's gradient rule."""
    cdef CallPlan plan
    cdef object rule
    cdef dict attrs
    cdef tuple saved              # needed forward values (raw outputs, not the user's views)
    cdef unsigned long long version_mask     # the saved entries the gradients read ...
    cdef unsigned long long saved_versions   # ... and versions() of those when recorded
    cdef tuple layout             # per declared input: tensor count if variadic, else -1
    cdef tuple out_meta           # (shape, dtype) per output, for zero-filling missing grads
    cdef object unpack_hook       # saved_tensors_hooks: `saved` holds what packing made

    cdef str label(self):
        return f"op '{self.plan.op.name}'"

    cdef object origin(self):
        return self.plan.op

    cdef void release(self):
        Node.release(self)
        self.saved = None

    cdef list run(self, list grads, bint create_graph):
        cdef CallPlan plan = self.plan
        cdef Py_ssize_t k
        cdef Tensor v
        cdef unsigned long long now
        if self.version_mask:
            now = versions(self.saved, self.version_mask)
            if now != self.saved_versions:
                raise modified_error(self, now, self.saved_versions)
        cdef tuple saved = self.saved if self.unpack_hook is None \
            else unpack_saved(self.saved, self.unpack_hook)
        if plan.backward is not None and self._kernel_path(grads) and not create_graph:
            return self._flatten(self._backward_kernel(saved, grads))
        if self.rule.materialize_grads:
            for k in range(self.n_out):
                if grads[k] is None:
                    grads[k] = zeros_like_meta(self.out_meta[k])
        needed = list(saved)
        if create_graph and self.unpack_hook is None:
            # saved outputs rejoin the graph so the rule is differentiable
            for k, (is_out, idx) in enumerate(plan.needs):
                if is_out:
                    v = view_of(<DenseTensor>needed[k])
                    v.requires_grad = True
                    v._node = self
                    v._out_index = idx
                    needed[k] = v
        cdef bint prev = swap_grad_enabled(create_graph)
        try:
            result = apply_grad_rule(plan.op, needed, grads, self.attrs,
                                     self._needs_input_grad()
                                     if self.rule.wants_needs_input_grad else None)
        except BaseException as exc:
            add_note(exc, f"raised in the gradient rule of {self.label()}")
            raise
        finally:
            swap_grad_enabled(prev)
        return self._flatten(result)

    cdef bint _kernel_path(self, list grads) except -1:
        """Whether the backward op computes this call's gradients: no output it does not
        take carries a gradient (one that is declared non-differentiable is dropped; one
        that is not is an error without an ``otherwise`` rule to take it). Missing
        gradients of those it takes become zeros."""
        cdef Py_ssize_t k
        cdef tuple taken = self.rule.kernel_outputs
        if self.n_out == 1:
            return True
        for k in range(self.n_out):
            if grads[k] is not None and k not in taken:
                self.rule.screen_output_grads(self.plan.op, grads)
                break
        for k in range(self.n_out):
            if grads[k] is not None and k not in taken:
                return False
        for k in taken:
            if grads[k] is None:
                grads[k] = zeros_like_meta(self.out_meta[k])
        return True

    cdef tuple _backward_kernel(self, tuple saved, list grads):
        """A kernel rule, run as its backward op's kernel (no graph is built): the
        gradients of the declared inputs (None for those that take none)."""
        cdef CallPlan plan = self.plan
        cdef CallPlan back = plan.backward
        cdef tuple args = tuple([saved[k] if src == 0 else grads[k]
                                 for src, k in plan.backward_args])
        cdef int64_t start = now_ns() if _profiling[0] else 0   # the profiler's hook
        try:
            outs = run_kernel(back, args, self.attrs,
                              &back.packed_defaults if back.defaults_packed
                              and self.attrs is plan.default_attrs else NULL, None, Tensor)
        except BaseException as exc:
            add_note(exc, f"raised in the gradient rule of {self.label()}")
            raise
        if start:
            record(back.op, EVENT_OP, start, args)
        if back.n_out < 0:       # variadic or optional gradients (rule.grad_layout)
            return self.rule.gradients_by_input(outs, saved)
        cdef Py_ssize_t i, j = 0, n = len(plan.diff)
        if n == 1:
            return (outs[0],) if plan.diff[0] else (None,)
        cdef list result = [None] * n
        for i in range(n):
            if plan.diff[i]:
                result[i] = outs[j]
                j += 1
        return tuple(result)

    cdef tuple _needs_input_grad(self):
        """Per declared input: whether a gradient is taken of it (of any entry of a
        variadic input)."""
        cdef Py_ssize_t i, j, flat = 0, count
        if self.layout is None:
            return tuple([e is not None for e in self.next])
        cdef list needs = []
        for i in range(len(self.layout)):
            count = self.layout[i] if self.layout[i] >= 0 else 1
            needs.append(any([self.next[j] is not None for j in range(flat, flat + count)]))
            flat += count
        return tuple(needs)

    cdef list _flatten(self, object result):
        """The rule's result (one gradient per declared input) aligned with `next`."""
        op = self.plan.op
        cdef Py_ssize_t n_decl = len(op.inputs), i
        cdef list flat
        if self.layout is None:
            flat = list(result)
        else:
            flat = []
            for i in range(n_decl):
                n = self.layout[i]
                if n < 0:
                    flat.append(result[i])
                elif result[i] is None:
                    flat.extend([None] * n)
                else:
                    if len(result[i]) != n:
                        raise TypeError(f"{self.label()}: the gradient for variadic input "
                                        f"'{op.inputs[i].name}' has {len(result[i])} "
                                        f"entries, expected {n}")
                    flat.extend(result[i])
        for i in range(len(flat)):
            x = self.next[i]
            if x is not None and flat[i] is not None and not grad_fits(flat[i], <Tensor>x):
                flat[i] = check_grad(flat[i], <Tensor>x, self.label(),
                                     f"input '{self._input_name(i)}'")
        return flat

    cdef str _input_name(self, Py_ssize_t flat_index):
        op = self.plan.op
        if self.layout is None:
            return op.inputs[flat_index].name
        cdef Py_ssize_t i, n
        for i in range(len(op.inputs)):
            n = self.layout[i]
            if n < 0:
                if flat_index == 0:
                    return op.inputs[i].name
                flat_index -= 1
            elif flat_index < n:
                return f"{op.inputs[i].name}[{flat_index}]"
            else:
                flat_index -= n
        return "?"


cdef object released_error(Node node):
    return RuntimeError(
        f"backward through {node.label()} a second time: its saved tensors were freed "
        f"by the first backward; pass retain_graph=True to the first backward() (or "
        f"fastop.grad) to backward through the graph again")


cdef tuple record_op(CallPlan plan, tuple inputs, tuple outputs, dict attrs):
    """Record a node for an op call when an input needs a gradient; returns the outputs
    to hand to the user (views of the saved ones)."""
    cdef Py_ssize_t i, n_in = len(inputs)
    if plan.simple:         # every input a Tensor: most calls need no gradient, say so fast
        for i in range(n_in):
            if (<Tensor>inputs[i]).requires_grad:
                break
        else:
            return outputs
    rule = plan.op.grad_rule
    if rule is None:
        return outputs
    if rule is not plan.rule:
        plan.prepare_rule()
    cdef tuple next_
    if plan.simple and n_in <= 2:                 # the common case, without lists
        e0 = _edge(inputs[0], plan.diff_mask & 1)
        if n_in == 1:
            if e0 is None:
                return outputs
            next_ = (e0,)
        else:
            e1 = _edge(inputs[1], plan.diff_mask & 2)
            if e0 is None and e1 is None:
                return outputs
            next_ = (e0, e1)
        return _make_node(plan, rule, inputs, outputs, attrs, next_, None)
    cdef list edges = []
    cdef list layout = None
    cdef bint need = False
    for i in range(n_in):
        x = inputs[i]
        if isinstance(x, (list, tuple)):
            if layout is None:
                layout = [-1] * len(inputs)
            layout[i] = len(x)
            for e in x:
                if plan.diff[i] and (<Tensor>e).requires_grad:
                    edges.append(e)
                    need = True
                else:
                    edges.append(None)
        elif x is not None and plan.diff[i] and (<Tensor>x).requires_grad:
            edges.append(x)
            need = True
        else:
            edges.append(None)
    if not need:
        return outputs
    return _make_node(plan, rule, inputs, outputs, attrs, tuple(edges),
                      None if layout is None else tuple(layout))


cdef inline object _edge(object x, unsigned long long differentiable):
    if differentiable and (<Tensor>x).requires_grad:
        return x
    return None


cdef unsigned long long _version_mask(CallPlan plan, tuple next_, tuple layout):
    """The saved entries read by the gradients of the inputs that take one (next_ holds
    an edge per input tensor, None where no gradient is taken)."""
    cdef unsigned long long mask = 0
    cdef Py_ssize_t i, j, flat = 0, count
    if layout is None:
        for i in range(len(next_)):
            if next_[i] is not None:
                mask |= <unsigned long long>plan.reads_masks[i]
        return mask
    for i in range(len(layout)):
        count = layout[i] if layout[i] >= 0 else 1
        for j in range(flat, flat + count):
            if next_[j] is not None:
                mask |= <unsigned long long>plan.reads_masks[i]
                break
        flat += count
    return mask


cdef tuple _make_node(CallPlan plan, object rule, tuple inputs, tuple outputs, dict attrs,
                      tuple next_, tuple layout):
    cdef OpNode node = OpNode.__new__(OpNode)
    cdef Py_ssize_t k, n_out = len(outputs)
    cdef Tensor t
    node.next = next_
    node.plan = plan
    node.rule = rule
    node.attrs = attrs
    node.layout = layout
    node.n_out = n_out
    node.saved = tuple([outputs[idx] if is_out else inputs[idx]
                        for is_out, idx in plan.needs]) if plan.needs else ()
    hooks = saved_hooks()
    if hooks is not None:       # the hooks own what is kept: no version to check
        if node.saved:
            node.saved = pack_saved(node.saved, hooks[0])
            node.unpack_hook = hooks[1]
    elif plan.check_versions:
        node.version_mask = _version_mask(plan, next_, layout)
        if node.version_mask:
            node.saved_versions = versions(node.saved, node.version_mask)
    if n_out > 1:
        node.out_meta = tuple([meta_of(<Tensor>o) for o in outputs])
    cdef list result = None if plan.save_mask == 0 else list(outputs)
    for k in range(n_out):
        t = <Tensor>outputs[k]
        if not is_float(t):
            continue
        if plan.save_mask >> k & 1:
            t = view_of(t)
            result[k] = t
        t.requires_grad = True
        t._node = node
        t._out_index = k
    return outputs if result is None else tuple(result)


# --------------------------------------------------------------------------- backward

cdef const int* _profiling = profiling_flag()
cdef Py_ssize_t _epoch = 0
cdef int _walks = 0         # backward walks in progress (one inside a PyLayer's backward)
# key -> fn, called in order after each outermost backward pass (not fastop.grad); filled
# by fastop.autograd.register_backward_end_hook (DataParallel averages gradients there)
cdef dict _end_hooks = {}
backward_end_hooks = _end_hooks


cdef inline object _acc(object a, object b):
    return b if a is None else _sum_grads(<Tensor>a, <Tensor>b)


cdef Tensor _sum_grads(Tensor a, Tensor b):
    """a + b in their dtype: a sum of float16 gradients is computed in float32 (a storage
    dtype) and cast back, so a tensor's gradient keeps its dtype."""
    cdef Tensor s = add_tensors(a, b)
    if a.view.dtype >= FASTOP_NUM_COMPUTE_DTYPES and s.view.dtype != a.view.dtype:
        s = <Tensor>B.cast(s, dtype=a.dtype)
    return s


cdef inline void _visit(Node n, Py_ssize_t epoch, list stack, Py_ssize_t* top,
                        list outer) except *:
    """Start n's state for this walk. `outer` (a walk nested in another one's PyLayer
    backward): remember the state the enclosing walk had, restored afterwards."""
    if outer is not None:
        outer.append((n, n.epoch, n.deps, n.buffer))
    n.epoch = epoch
    n.deps = 0
    n.buffer = [None] * n.n_out
    _push(stack, top, n)


cdef void _restore(list outer):
    cdef Node n
    for item in reversed(outer):
        n = <Node>item[0]
        n.epoch, n.deps, n.buffer = item[1], item[2], item[3]


# The walk's stacks are lists used as arrays with an explicit top: list.pop() shrinks
# (frees) the list's storage when it empties and the next append allocates it again.

cdef inline void _push(list stack, Py_ssize_t* top, Node n) except *:
    if top[0] < len(stack):
        stack[top[0]] = n
    else:
        stack.append(n)
    top[0] += 1


cdef inline Node _pop(list stack, Py_ssize_t* top):
    top[0] -= 1
    cdef Node n = <Node>stack[top[0]]
    stack[top[0]] = None
    return n


cdef Tensor _own(Tensor g, Py_ssize_t walk_refs, bint create_graph):
    """g, or a copy of it when someone else may hold it or its memory (it becomes a
    leaf's .grad, which the user and optimizers may change in place). Like torch's
    AccumulateGrad, a gradient is taken as is when its only references are the
    `walk_refs` the backward walk holds (-1: g is the walk's own) and it owns its memory
    (or borrows an array nobody else refers to)."""
    if create_graph or walk_refs < 0:
        return g
    if Py_REFCNT(g) <= walk_refs:
        if g._alloc is not NULL:
            return g
        owner = g.owner
        if type(owner) is np.ndarray and Py_REFCNT(owner) == 2 \
                and owner.base is None:         # referred to by g and the local alone
            return g
    return <Tensor>g.copy()


cdef inline Py_ssize_t _count(list items, object value):
    """How many times `value` (by identity) is in `items`."""
    cdef Py_ssize_t k, n = 0
    if items is not None:
        for k in range(len(items)):
            if items[k] is value:
                n += 1
    return n


cdef class _Walk:
    """One backward pass: where captured gradients go (``fastop.grad``) or leaves' .grad."""
    cdef dict leaf_pos            # id(leaf) -> positions in `captured`
    cdef dict node_pos            # id(node) -> [(output index, position)]
    cdef list captured
    cdef set runs                 # fastop.grad: ids of the nodes that run (see _nodes_to_run)
    cdef bint create_graph

    cdef void deliver_leaf(self, Tensor t, Tensor g, Py_ssize_t walk_refs) except *:
        """Give leaf t the gradient g, which the walk refers to `walk_refs` times."""
        if self.captured is not None:
            for p in self.leaf_pos.get(id(t), ()):
                self.captured[p] = _acc(self.captured[p], g)
        elif not t.requires_grad:       # stop_gradient set after the graph was recorded
            return
        else:
            _lock_leaves()
            try:
                if t._grad is None:         # (zeros left by clear_grad: not yet made)
                    t._grad = _own(g, walk_refs, self.create_graph)
                    t._grad_zeroed = False
                else:
                    t._grad = _sum_grads(<Tensor>t._grad, g)
                t._grad_version += 1
            finally:
                PyThread_release_lock(_leaf_lock)


# Leaves' .grad are read, summed and written back under this lock: the sum may release
# the GIL (a big kernel), and threads running backward into shared parameters would
# otherwise lose each other's updates.
cdef PyThread_type_lock _leaf_lock = PyThread_allocate_lock()


cdef int _lock_leaves() except -1:
    """Take _leaf_lock; wait without the GIL (its holder may need the GIL to finish)."""
    cdef int got
    if _leaf_lock == NULL:
        raise MemoryError()
    if not PyThread_acquire_lock(_leaf_lock, NOWAIT_LOCK):
        with nogil:
            got = PyThread_acquire_lock(_leaf_lock, WAIT_LOCK)
    return 0


cdef list run_backward(tuple outputs, list grads, bint retain_graph, bint create_graph,
                       tuple inputs, bint allow_unused):
    """Backpropagate grads from outputs; with `inputs`, return their gradients instead of
    accumulating into leaves' ``.grad``."""
    global _walks
    cdef int64_t start = now_ns() if _profiling[0] else 0   # the profiler's hook
    cdef list outer = [] if _walks else None
    cdef list result
    _walks += 1
    cdef int mode = swap_mode_override(0)     # gradient rules compute, whatever the mode
    try:
        result = _walk(outputs, grads, retain_graph, create_graph, inputs, allow_unused,
                       outer)
    finally:
        swap_mode_override(mode)
        _walks -= 1
        if outer is not None:
            _restore(outer)
        if start:
            record("backward" if inputs is None else "grad", EVENT_BACKWARD, start, outputs)
    if _end_hooks and inputs is None and outer is None:
        for hook in tuple(_end_hooks.values()):
            hook()
    return result


cdef set _nodes_to_run(tuple outputs, _Walk walk):
    """For ``fastop.grad``: the ids of the nodes on a path from the outputs to an input.
    Only they are walked and run (and freed); the graph beyond the inputs is left as it
    is, for later backward passes. Post-order DFS: a node runs if an edge leads to an
    input leaf, an input's node, or a node that runs."""
    cdef dict runs = {}             # id(node) -> whether it runs
    cdef set keep = set()           # nodes that run or are inputs' nodes
    cdef list stack
    cdef Node n, m
    cdef Py_ssize_t k
    cdef bint go
    for out in outputs:
        n = (<Tensor>out)._node
        if n is None or id(n) in runs:
            continue
        runs[id(n)] = False
        stack = [(n, 0)]
        while stack:
            n, k = stack[len(stack) - 1]
            edges = n.next or ()
            while k < len(edges):
                e = edges[k]
                k += 1
                if e is not None:
                    m = (<Tensor>e)._node
                    if m is not None and id(m) not in runs:
                        stack[len(stack) - 1] = (n, k)
                        runs[id(m)] = False
                        stack.append((m, 0))
                        break
            else:
                stack.pop()
                go = False
                for e in edges:
                    if e is not None:
                        m = (<Tensor>e)._node
                        if m is None:
                            go = go or id(e) in walk.leaf_pos
                        else:
                            go = go or id(m) in keep
                runs[id(n)] = go
                if go or id(n) in walk.node_pos:
                    keep.add(id(n))
    walk.runs = {key for key, value in runs.items() if value}
    return keep


cdef list _walk(tuple outputs, list grads, bint retain_graph, bint create_graph,
                tuple inputs, bint allow_unused, list outer):
    global _epoch
    _epoch += 1
    cdef Py_ssize_t epoch = _epoch, i, p
    cdef _Walk walk = _Walk.__new__(_Walk)
    walk.create_graph = create_graph
    cdef Tensor t, g
    cdef Node n, m
    cdef set keep = None            # fastop.grad: the nodes worth visiting
    if inputs is not None:
        walk.captured = [None] * len(inputs)
        walk.leaf_pos = {}
        walk.node_pos = {}
        for p in range(len(inputs)):
            t = _require_tensor(inputs[p], "inputs")
            if t._node is None:
                walk.leaf_pos.setdefault(id(t), []).append(p)
            else:
                walk.node_pos.setdefault(id(t._node), []).append((t._out_index, p))
        for i in range(len(outputs)):
            _require_tensor(outputs[i], "outputs")
        keep = _nodes_to_run(outputs, walk)
    cdef list stack = []
    cdef Py_ssize_t top = 0
    for i in range(len(outputs)):
        t = _require_tensor(outputs[i], "outputs")
        if not t.requires_grad:
            message = (f"output {i} (shape {t.shape}) has stop_gradient=True, so no "
                       f"gradient flows from it; set stop_gradient=False on the inputs "
                       f"that need gradients")
            if inputs is not None:
                raise RuntimeError(f"fastop.grad: {message}")
            # PaddlePaddle skips such an output silently; a warning says why no .grad
            # appears (stacklevel 1: Cython adds no frame, so it names the caller's line)
            warnings.warn(f"backward: nothing to do: {message}", UserWarning, stacklevel=1)
            continue
        g = _root_grad(t, grads[i], i)
        if t._node is None:                       # a leaf: its own gradient
            walk.deliver_leaf(t, g if grads[i] is None or create_graph else <Tensor>g.copy(),
                              -1)
            continue
        n = t._node
        if keep is not None and id(n) not in keep:
            continue
        if n.epoch != epoch:
            _visit(n, epoch, stack, &top, outer)
        n.buffer[t._out_index] = _acc(n.buffer[t._out_index], g)
    while top:                                    # count in-edges of reachable nodes
        n = _pop(stack, &top)
        if keep is not None and id(n) not in walk.runs:
            continue
        for e in n.next or ():
            if e is not None:
                m = (<Tensor>e)._node
                if m is not None and (keep is None or id(m) in keep):
                    if m.epoch != epoch:
                        _visit(m, epoch, stack, &top, outer)
                    m.deps += 1
    for i in range(len(outputs)):                 # ready: the outputs' nodes that no
        n = (<Tensor>outputs[i])._node            # other reachable node feeds
        if n is not None and n.epoch == epoch and n.deps == 0:
            n.deps = -1                           # pushed once even if several outputs
            _push(stack, &top, n)
    cdef list node_grads, in_grads
    cdef tuple edges
    cdef bint prev = swap_grad_enabled(create_graph)
    try:
        while top:                                # Kahn: a node runs once all its
            n = _pop(stack, &top)                 # consumers have given their grads
            node_grads = n.buffer
            n.buffer = None
            if walk.node_pos is not None and id(n) in walk.node_pos:
                for idx, p in walk.node_pos[id(n)]:
                    walk.captured[p] = node_grads[idx]
                if id(n) not in walk.runs:        # an input's node leading to no other
                    continue
            in_grads = None
            for x in node_grads:
                if x is not None:
                    if n.released:
                        raise released_error(n)
                    in_grads = _profiled_run(n, node_grads, create_graph) \
                        if _profiling[0] else n.run(node_grads, create_graph)
                    break
            edges = n.next or ()
            if not retain_graph:
                n.release()
            for i in range(len(edges)):
                e = edges[i]
                if e is None:
                    continue
                t = <Tensor>e
                x = None if in_grads is None else in_grads[i]
                m = t._node
                if m is None:
                    if x is not None:         # refs: x, in_grads, a pass-through's buffer
                        walk.deliver_leaf(t, <Tensor>x, 1 + _count(in_grads, x)
                                          + _count(node_grads, x))
                elif keep is None or id(m) in keep:
                    if x is not None:
                        m.buffer[t._out_index] = _acc(m.buffer[t._out_index], x)
                    m.deps -= 1
                    if m.deps == 0:
                        _push(stack, &top, m)
    finally:
        swap_grad_enabled(prev)
    if inputs is None:
        return None
    if not allow_unused:
        for p in range(len(inputs)):
            if walk.captured[p] is None:
                raise RuntimeError(
                    f"fastop.grad: input {p} (shape {inputs[p].shape}) was not used to "
                    f"compute the outputs; pass allow_unused=True to get None for it")
    return walk.captured


cdef list _profiled_run(Node n, list grads, bint create_graph):
    """n.run, recorded as a node event (its inputs: the gradients it receives)."""
    cdef int64_t start = now_ns()
    try:
        return n.run(grads, create_graph)
    finally:
        record(n.origin(), EVENT_NODE, start, grads)


cdef Tensor _require_tensor(object value, str what):
    if not isinstance(value, Tensor):
        raise TypeError(f"backward: {what} must be Tensors, got {type(value).__name__}")
    return <Tensor>value


cdef Tensor _root_grad(Tensor out, object grad, Py_ssize_t i):
    if grad is None:
        return full_tensor(out.view.ndim, out.view.shape, out.view.dtype, 1.0)
    if grad_fits(grad, out):
        return <Tensor>grad
    return <Tensor>check_grad(grad if isinstance(grad, DenseTensor) else as_tensor(grad, out.view.dtype),
                       out, "backward", f"output {i}")


cdef tuple _as_tuple(object x):
    if x is None:
        return None
    return tuple(x) if isinstance(x, (list, tuple)) else (x,)


def backward(tensors, grad_tensors=None, bint retain_graph=False) -> None:
    """Accumulate the gradients of ``tensors`` (weighted by ``grad_tensors``, ones when
    None) into the ``.grad`` of the leaves that need them (PaddlePaddle's
    ``paddle.autograd.backward``)."""
    cdef tuple outs = _as_tuple(tensors)
    cdef tuple gs = _as_tuple(grad_tensors)
    if gs is None:
        gs = (None,) * len(outs)
    if len(gs) != len(outs):
        raise ValueError(f"backward: got {len(outs)} tensors but {len(gs)} grad_tensors")
    run_backward(outs, list(gs), retain_graph, False, None, False)


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, bint create_graph=False,
         only_inputs=True, bint allow_unused=False, no_grad_vars=None) -> list:
    """The gradients of ``outputs`` with respect to ``inputs``, as a list (one per input).

    Leaves' ``.grad`` are not touched. ``grad_outputs`` weights each output (ones when
    None). ``create_graph=True`` records the gradient computation itself, so the result
    can be differentiated again (higher-order gradients); ``retain_graph`` defaults to
    ``create_graph``. An input not used to compute the outputs raises unless
    ``allow_unused=True`` (then its gradient is None).
    """
    if no_grad_vars is not None:
        raise NotImplementedError("grad: no_grad_vars is not supported; set "
                                  "stop_gradient=True on those tensors instead")
    cdef tuple outs = _as_tuple(outputs)
    cdef tuple ins = _as_tuple(inputs)
    cdef tuple gs = _as_tuple(grad_outputs)
    if gs is None:
        gs = (None,) * len(outs)
    if len(gs) != len(outs):
        raise ValueError(f"grad: got {len(outs)} outputs but {len(gs)} grad_outputs")
    cdef bint retain = create_graph if retain_graph is None else retain_graph
    return run_backward(outs, list(gs), retain, create_graph, ins, allow_unused)
