# cython: freethreading_compatible = False
"""The autograd graph's recording: a registry op's node (:class:`OpNode`), ``record_op``,
and the saved-tensor hooks.

A recorded op is an ``OpNode`` (a :class:`fastop.autograd._node.Node`): ``next`` holds,
per input, the input Tensor when it takes a gradient (else None); each output Tensor
points back at its node. Nothing points from a node to its outputs, so there are no
reference cycles: an op that saves one of its outputs for backward keeps the kernel's raw
result and hands the user a view of it.

An op's gradient rule is applied by the registry's one function (``apply_grad_rule``)
with grad mode set to ``create_graph``, so rules made of registry ops are recorded again
when higher-order gradients are wanted; a rule that is one backward op (``grad_op``) runs
that op's kernel directly when no graph is being built (the profiler's hook: that
backward op, one flag check). The backward walk that runs the nodes is
fastop.autograd._backward.
"""
from libc.stddef cimport ptrdiff_t
from libc.stdint cimport int64_t
from fastop._core.storage cimport DenseTensor, FASTOP_MAX_NDIM
from fastop._tensor cimport Tensor, as_tensor, full_tensor, view_of
from fastop.ops._dispatch cimport CallPlan, run_kernel
from fastop.autograd._grad_mode cimport swap_grad_enabled
from fastop.autograd._node cimport (Node, is_float, versions, modified_error)
from fastop._core.profiling cimport EVENT_OP, now_ns, profiling_flag, record

import threading

import numpy as np

from fastop.ops._registry import add_note, apply_grad_rule

__all__ = ["OpNode", "push_saved_hooks", "pop_saved_hooks"]

cdef const int* _profiling = profiling_flag()


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


cdef bint _fed_by_dtype(tuple next_, int dtype) noexcept:
    """Whether an input that takes a gradient has this (integer) dtype: an integer
    output of integer inputs with stop_gradient=False takes gradients, as in
    PaddlePaddle (``x * 2`` of an int64 x); one of float inputs (argmax, top-k's
    indices) does not."""
    for e in next_:
        if e is not None and (<Tensor>e).view.dtype == dtype:
            return True
    return False


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
        if not is_float(t) and not _fed_by_dtype(next_, t.view.dtype) \
                and not plan.op.integer_grads:
            continue
        if plan.save_mask >> k & 1:
            t = view_of(t)
            result[k] = t
        t.requires_grad = True
        t._node = node
        t._out_index = k
    return outputs if result is None else tuple(result)
