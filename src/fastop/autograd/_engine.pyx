# cython: freethreading_compatible = False
"""The autograd engine: grad mode, graph nodes, the eager dispatcher, the backward walk.

A recorded op is a :class:`Node`: ``next`` holds, per input, the input Tensor when it
takes a gradient (else None); each output Tensor points back at its node. Nothing points
from a node to its outputs, so there are no reference cycles: an op that saves one of its
outputs for backward keeps the kernel's raw result and hands the user a view of it.

``backward`` walks the graph in topological order (Kahn's algorithm over the nodes
reachable from the outputs, counting in-edges first), accumulates the gradients of
tensors used several times, and frees saved tensors after use unless ``retain_graph``.
Gradient rules run with grad mode set to ``create_graph``, so rules made of registry ops
are recorded again when higher-order gradients are wanted.
"""
from cpython.object cimport PyObject, PyTypeObject
from cpython.ref cimport Py_INCREF, Py_REFCNT
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM
from libc.stddef cimport ptrdiff_t
from fastop._core.storage cimport (DenseTensor, FASTOP_FLOAT32, FASTOP_FLOAT64,
                                   FASTOP_MAX_NDIM, fastop_attrs, memory_root)
from fastop._core.kernel cimport CKernel
from fastop._tensor cimport (Tensor, add_tensors, as_tensor, full_tensor, view_of,
                             wrap_dense)

import functools
import inspect
from threading import get_ident

import numpy as np

from fastop.ops import _dispatch
from fastop.ops._registry import add_note

__all__ = ["no_grad", "enable_grad", "set_grad_enabled", "is_grad_enabled", "backward",
           "grad", "apply_py_layer", "index", "eager_dispatch", "Node", "PyLayerNode"]


# --------------------------------------------------------------------------- grad mode

cdef extern from *:
    """
    /* Grad mode is per thread, as in PyTorch: no_grad on one thread does not stop
       another from recording, and a new thread starts with recording on. */
    static _Thread_local int fastop_grad_enabled = 1;
    """
    bint _grad_enabled "fastop_grad_enabled"


cdef bint grad_enabled() noexcept:
    return _grad_enabled


def is_grad_enabled() -> bool:
    """Whether ops are recorded for autograd (False inside ``no_grad``)."""
    return _grad_enabled


cdef class set_grad_enabled:
    """Turn recording on or off; restores the previous mode on exit.

    Usable as a context manager (``with set_grad_enabled(False): ...``) and as a
    decorator. Grad mode is per thread: it applies to the thread that set it.
    """
    cdef bint mode
    cdef dict _saved              # thread id -> the modes to restore, innermost last

    def __init__(self, bint mode=True):
        self.mode = mode
        self._saved = {}

    def __enter__(self):
        global _grad_enabled
        self._saved.setdefault(get_ident(), []).append(_grad_enabled)
        _grad_enabled = self.mode
        return self

    def __exit__(self, *exc_info):
        global _grad_enabled
        ident = get_ident()
        cdef bint here = ident in self._saved
        if not here:
            # the block was entered on another thread (a generator resumed on a worker
            # thread): its mode was set there, so this thread's mode (maybe its own
            # block's) stays; the entering thread's record is dropped when it is known
            if len(self._saved) != 1:
                raise RuntimeError(
                    f"{type(self).__name__}: exited on a thread that did not enter it "
                    f"while {len(self._saved)} threads are inside it; use one grad-mode "
                    f"object per thread")
            ident = next(iter(self._saved))
        stack = self._saved[ident]
        mode = stack.pop()
        if here:
            _grad_enabled = mode
        if not stack:
            del self._saved[ident]
        return False

    def __call__(self, func):
        mode = self.mode
        if inspect.isgeneratorfunction(func):
            return _generator_in_mode(func, mode)

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            with set_grad_enabled(mode):
                return func(*args, **kwargs)
        return wrapper


def _generator_in_mode(func, bint mode):
    """A generator function decorated with a grad mode: the mode holds while the
    generator's own code runs (each resumption), not while its caller's does."""
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        gen = func(*args, **kwargs)
        try:
            with set_grad_enabled(mode):
                response = next(gen)
            while True:
                try:
                    request = yield response
                except GeneratorExit:
                    with set_grad_enabled(mode):
                        gen.close()
                    raise
                except BaseException as exc:
                    with set_grad_enabled(mode):
                        response = gen.throw(exc)
                else:
                    with set_grad_enabled(mode):
                        response = gen.send(request)
        except StopIteration as stop:
            return stop.value
    return wrapper


class no_grad(set_grad_enabled):
    """Run without recording ops: results have ``stop_gradient=True``.

    Context manager or decorator (with or without parentheses)::

        with fastop.no_grad():
            y = x * 2

        @fastop.no_grad()
        def evaluate(model, x): ...
    """

    def __new__(cls, func=None):
        if func is not None:                  # @no_grad without parentheses
            return set_grad_enabled(False)(func)
        return super().__new__(cls)

    def __init__(self, func=None):
        super().__init__(False)


class enable_grad(set_grad_enabled):
    """Record ops again inside a ``no_grad`` region (context manager or decorator)."""

    def __init__(self):
        super().__init__(True)


# --------------------------------------------------------------------------- op cache

cdef dict _infos = {}


cdef OpInfo op_info(object op):
    """Per-op facts the eager path needs on every call, computed once per OpDef."""
    cdef OpInfo info = _infos.get(op.name)
    if info is not None and info.op is op:
        return info
    info = OpInfo.__new__(OpInfo)
    info.op = op
    info.n_in = len(op.inputs)
    info.simple = not any(a.optional or a.variadic for a in op.inputs)
    info.fixed = not any(a.variadic for a in op.inputs)
    try:
        info.default_attrs = op.check_attrs({})
    except TypeError:
        info.default_attrs = None          # an attribute is required
    kernel = op.kernels.get("*")
    if isinstance(kernel, CKernel) and info.fixed:
        info.ck = <CKernel>kernel
        for code, name in enumerate(("bool", "int32", "int64", "float32", "float64")):
            if info.ck.fns[code] != NULL and name not in op.kernels:
                info.ck_mask |= 1 << code
        if info.default_attrs is not None:
            try:
                info.ck.pack(info.default_attrs, &info.packed)
                info.defaults_packed = True
            except Exception:             # reported when a call packs them
                pass
    _infos[op.name] = info
    return info


cdef unsigned long long ALL_SAVED = 0xffffffffffffffff   # a version mask: every entry


cdef void _prepare_rule(OpInfo info, object rule):
    op = info.op
    in_names = [a.name for a in op.inputs]
    out_names = [a.name for a in op.outputs]
    info.needs = tuple((True, out_names.index(n)) if n in out_names else
                       (False, in_names.index(n)) for n in rule.needs)
    diff = set(op.differentiable_inputs)
    info.diff = tuple(n in diff for n in in_names)
    info.diff_mask = sum(1 << i for i, d in enumerate(info.diff) if d and i < 64)
    info.save_mask = sum(1 << k for k, n in enumerate(out_names) if n in rule.needs and k < 64)
    if rule.reads is None:                # every gradient reads every needed value
        info.reads_masks = tuple(_reads_mask(rule.needs, rule.needs) if d else 0
                                 for d in info.diff)
    else:
        info.reads_masks = tuple(_reads_mask(rule.needs, rule.reads.get(x, ()))
                                 for x in in_names)
    info.check_versions = any(info.reads_masks)
    info.rule = rule


cdef unsigned long long _reads_mask(tuple needs, tuple reads):
    """Bit k set when `reads` names needs[k]; every bit when it names one from the 64th
    on (those entries are always checked)."""
    cdef unsigned long long mask = 0
    for k, n in enumerate(needs):
        if n in reads:
            if k >= 64:
                return ALL_SAVED
            mask |= 1ULL << k
    return mask


cdef inline bint _is_float(DenseTensor t):
    return t.view.dtype == FASTOP_FLOAT32 or t.view.dtype == FASTOP_FLOAT64


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

    def __repr__(self):
        return f"<{self.label()} node>"


cdef Tensor _zeros_like_meta(tuple meta):
    cdef list shape = meta[0]
    cdef ptrdiff_t dims[FASTOP_MAX_NDIM]
    cdef int i
    for i in range(len(shape)):
        dims[i] = shape[i]
    return full_tensor(len(shape), dims, meta[1], 0.0)


cdef tuple _meta_of(Tensor t):
    return (t.shape, t.view.dtype)


cdef inline bint _fits(object g, Tensor x):
    """g is a Tensor of x's shape and dtype: the usual case, checked before any error
    message is formatted (a gradient that does not fit goes through _check_grad)."""
    if type(g) is not Tensor:
        return False
    cdef Tensor t = <Tensor>g
    if t.view.ndim != x.view.ndim or t.view.dtype != x.view.dtype:
        return False
    cdef int i
    for i in range(t.view.ndim):
        if t.view.shape[i] != x.view.shape[i]:
            return False
    return True


cdef Tensor _check_grad(object g, Tensor x, str who, object what):
    """g as a Tensor, checked against the input x it is the gradient of."""
    cdef Tensor t
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


cdef unsigned long long _versions(tuple saved, unsigned long long mask):
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


cdef object _modified_error(Node node):
    return RuntimeError(
        f"backward through {node.label()}: a tensor it saved for the gradient was "
        f"modified in place after the forward pass (set_value, item assignment, an "
        f"optimizer step or out=), so the gradient would be wrong; modify it after "
        f"backward, or modify a copy")


cdef class OpNode(Node):
    """A registry op: its backward is the op's gradient rule."""
    cdef OpInfo info
    cdef object rule
    cdef dict attrs
    cdef tuple saved              # needed forward values (raw outputs, not the user's views)
    cdef unsigned long long version_mask     # the saved entries the gradients read ...
    cdef unsigned long long saved_versions   # ... and _versions of those when recorded
    cdef tuple layout             # per declared input: tensor count if variadic, else -1
    cdef tuple out_meta           # (shape, dtype) per output, for zero-filling missing grads

    cdef str label(self):
        return f"op '{self.info.op.name}'"

    cdef void release(self):
        Node.release(self)
        self.saved = None

    cdef list run(self, list grads, bint create_graph):
        global _grad_enabled
        cdef OpInfo info = self.info
        cdef Tensor v
        cdef Py_ssize_t k
        if self.version_mask and \
                _versions(self.saved, self.version_mask) != self.saved_versions:
            raise _modified_error(self)
        needed = list(self.saved)
        if create_graph:   # saved outputs rejoin the graph so the rule is differentiable
            for k, (is_out, idx) in enumerate(info.needs):
                if is_out:
                    v = view_of(<DenseTensor>needed[k])
                    v.requires_grad = True
                    v._node = self
                    v._out_index = idx
                    needed[k] = v
        if self.rule.materialize_grads:
            for k in range(self.n_out):
                if grads[k] is None:
                    grads[k] = _zeros_like_meta(self.out_meta[k])
        cdef bint prev = _grad_enabled
        _grad_enabled = create_graph
        try:
            result = self.rule.fn(*needed, *grads, **self.attrs)
        except BaseException as exc:
            add_note(exc, f"raised in the gradient rule of {self.label()}")
            raise
        finally:
            _grad_enabled = prev
        return self._flatten(result)

    cdef list _flatten(self, object result):
        """The rule's result (one gradient per declared input) aligned with `next`."""
        op = self.info.op
        cdef Py_ssize_t n_decl = len(op.inputs), i
        if not isinstance(result, (tuple, list)):
            result = (result,)
        if len(result) != n_decl:
            raise TypeError(f"{self.label()}: the gradient rule returned {len(result)} "
                            f"gradient(s), expected {n_decl} (one per input: "
                            f"{', '.join(a.name for a in op.inputs)}; None for none)")
        cdef list flat = []
        for i in range(n_decl):
            n = -1 if self.layout is None else self.layout[i]
            if n < 0:
                flat.append(result[i])
            elif result[i] is None:
                flat.extend([None] * n)
            else:
                if len(result[i]) != n:
                    raise TypeError(f"{self.label()}: the gradient for variadic input "
                                    f"'{op.inputs[i].name}' has {len(result[i])} entries, "
                                    f"expected {n}")
                flat.extend(result[i])
        for i in range(len(flat)):
            x = self.next[i]
            if x is not None and flat[i] is not None and not _fits(flat[i], <Tensor>x):
                flat[i] = _check_grad(flat[i], <Tensor>x, self.label(),
                                      f"input '{self._input_name(i)}'")
        return flat

    cdef str _input_name(self, Py_ssize_t flat_index):
        op = self.info.op
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


cdef object _released_error(Node node):
    return RuntimeError(
        f"backward through {node.label()} a second time: its saved tensors were freed "
        f"by the first backward; pass retain_graph=True to the first backward() (or "
        f"fastop.grad) to backward through the graph again")


cdef tuple record_op(OpInfo info, tuple inputs, tuple outputs, dict attrs):
    """Record a node for an op call when an input needs a gradient; returns the outputs
    to hand to the user (views of the saved ones)."""
    rule = info.op.grad_rule
    if rule is None:
        return outputs
    if rule is not info.rule:
        _prepare_rule(info, rule)
    cdef Py_ssize_t i, k, n_in = len(inputs)
    cdef tuple next_
    if info.simple and n_in <= 2:                 # the common case, without lists
        e0 = _edge(inputs[0], info.diff_mask & 1)
        if n_in == 1:
            if e0 is None:
                return outputs
            next_ = (e0,)
        else:
            e1 = _edge(inputs[1], info.diff_mask & 2)
            if e0 is None and e1 is None:
                return outputs
            next_ = (e0, e1)
        return _make_node(info, rule, inputs, outputs, attrs, next_, None)
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
                if info.diff[i] and (<Tensor>e).requires_grad:
                    edges.append(e)
                    need = True
                else:
                    edges.append(None)
        elif x is not None and info.diff[i] and (<Tensor>x).requires_grad:
            edges.append(x)
            need = True
        else:
            edges.append(None)
    if not need:
        return outputs
    return _make_node(info, rule, inputs, outputs, attrs, tuple(edges),
                      None if layout is None else tuple(layout))


cdef inline object _edge(object x, unsigned long long differentiable):
    if differentiable and (<Tensor>x).requires_grad:
        return x
    return None


cdef unsigned long long _version_mask(OpInfo info, tuple next_, tuple layout):
    """The saved entries read by the gradients of the inputs that take one (next_ holds
    an edge per input tensor, None where no gradient is taken)."""
    cdef unsigned long long mask = 0
    cdef Py_ssize_t i, j, flat = 0, count
    if layout is None:
        for i in range(len(next_)):
            if next_[i] is not None:
                mask |= <unsigned long long>info.reads_masks[i]
        return mask
    for i in range(len(layout)):
        count = layout[i] if layout[i] >= 0 else 1
        for j in range(flat, flat + count):
            if next_[j] is not None:
                mask |= <unsigned long long>info.reads_masks[i]
                break
        flat += count
    return mask


cdef tuple _make_node(OpInfo info, object rule, tuple inputs, tuple outputs, dict attrs,
                      tuple next_, tuple layout):
    cdef OpNode node = OpNode.__new__(OpNode)
    cdef Py_ssize_t k, n_out = len(outputs)
    cdef Tensor t
    node.next = next_
    node.info = info
    node.rule = rule
    node.attrs = attrs
    node.layout = layout
    node.n_out = n_out
    node.saved = tuple([outputs[idx] if is_out else inputs[idx]
                        for is_out, idx in info.needs]) if info.needs else ()
    if info.check_versions:
        node.version_mask = _version_mask(info, next_, layout)
        if node.version_mask:
            node.saved_versions = _versions(node.saved, node.version_mask)
    if n_out > 1:
        node.out_meta = tuple([_meta_of(<Tensor>o) for o in outputs])
    cdef list result = None if info.save_mask == 0 else list(outputs)
    for k in range(n_out):
        t = <Tensor>outputs[k]
        if not _is_float(t):
            continue
        if info.save_mask >> k & 1:
            t = view_of(t)
            result[k] = t
        t.requires_grad = True
        t._node = node
        t._out_index = k
    return outputs if result is None else tuple(result)


# --------------------------------------------------------------------------- dispatch

cdef object _to_input(object value, object spec, int ref_dtype):
    if value is None or isinstance(value, Tensor):
        return value
    if isinstance(value, (list, tuple)) and spec.variadic:
        return [_to_input(v, spec, ref_dtype) for v in value]
    if isinstance(value, DenseTensor):
        return wrap_dense(value)
    if isinstance(value, (bool, int, float, np.generic)):
        return as_tensor(value, ref_dtype if ref_dtype >= 0 else FASTOP_FLOAT32)
    return as_tensor(value, -1)


cdef int _ref_dtype(list inputs):
    for x in inputs:
        if isinstance(x, DenseTensor):
            return (<DenseTensor>x).view.dtype
        if isinstance(x, (list, tuple)):
            for e in x:
                if isinstance(e, DenseTensor):
                    return (<DenseTensor>e).view.dtype
    return -1


cdef object dispatch_eager(object op, tuple args, dict kwargs):
    """Run an op call eagerly: bind, run its kernel, record a node; one output or a tuple."""
    cdef OpInfo info = op_info(op)
    cdef list inputs
    cdef dict attrs
    cdef const fastop_attrs* packed_ptr = NULL    # set when attrs are already packed
    cdef fastop_attrs packed
    cdef bint plain = len(args) == info.n_in and info.fixed
    if plain and not kwargs and info.defaults_packed:
        inputs = list(args)
        attrs = info.default_attrs
        packed_ptr = &info.packed
    elif plain and info.last_kwargs is not None and _same_attrs(kwargs, info.last_kwargs):
        inputs = list(args)
        attrs = info.last_attrs
        packed = info.last_packed         # a copy: the kernel may run without the GIL
        packed_ptr = &packed
    else:
        inputs, attrs = op.bind(args, kwargs)
        if plain and info.ck is not None and _cacheable(kwargs):
            info.ck.pack(attrs, &packed)
            packed_ptr = &packed
            # copies (the caller may change its lists later), stored with no Python code
            # running in between, so another thread never sees a half-updated cache
            last_kwargs = {k: list(v) if isinstance(v, list) else v
                           for k, v in kwargs.items()}
            info.last_packed = packed
            info.last_attrs = attrs
            info.last_kwargs = last_kwargs
    cdef int ref = _ref_dtype(inputs)
    cdef Py_ssize_t i
    for i in range(len(inputs)):
        x = inputs[i]
        if not isinstance(x, Tensor):
            try:
                inputs[i] = _to_input(x, op.inputs[i], ref)
            except (TypeError, ValueError, OverflowError) as e:
                raise type(e)(f"{op.name}: input '{op.inputs[i].name}' must be a tensor, an "
                              f"array or a number, got {x!r:.60}: {e}") from None
    cdef tuple ins = tuple(inputs)
    cdef tuple outs
    cdef CKernel ck = info.ck
    if ck is not None and not _has_none(ins) and \
            (info.ck_mask >> (<Tensor>ins[ck.dispatch_input]).view.dtype) & 1:
        if packed_ptr == NULL:
            ck.pack(attrs, &packed)
            packed_ptr = &packed
        outs = ck.run(ins, None, packed_ptr, Tensor, attrs)
    else:
        outs = tuple([wrap_dense(<DenseTensor>d) for d in op.invoke(inputs, attrs)])
    if _grad_enabled:
        outs = record_op(info, ins, outs, attrs)
    return outs[0] if len(outs) == 1 else outs


cdef inline bint _has_none(tuple items):
    for x in items:
        if x is None:
            return True
    return False


cdef bint _cacheable(dict kwargs):
    """Whether keyword attributes compare reliably with == (plain Python values)."""
    for value in kwargs.values():
        if isinstance(value, (list, tuple)):
            for v in value:
                if type(v) is not int:
                    return False
        elif not (value is None or type(value) in (bool, int, float, str)):
            return False
    return True


cdef inline bint _same_attrs(dict kwargs, dict last):
    """kwargs == last, with equal types too (1 and 1.0 and True bind differently)."""
    if len(kwargs) != len(last):
        return False
    for key, value in kwargs.items():
        other = last.get(key, _MISSING)
        if type(other) is not type(value) or other != value:
            return False
    return True


cdef object _MISSING = object()


def eager_dispatch(op, args, kwargs):
    """The eager-mode dispatcher installed in :mod:`fastop.ops._dispatch`."""
    return dispatch_eager(op, tuple(args), dict(kwargs))


_dispatch.set_dispatcher("eager", eager_dispatch)


# --------------------------------------------------------------------------- backward

cdef Py_ssize_t _epoch = 0
cdef int _walks = 0         # backward walks in progress (one inside a PyLayer's backward)
# key -> fn, called in order after each outermost backward pass (not fastop.grad); filled
# by fastop.autograd.register_backward_end_hook (DataParallel averages gradients there)
cdef dict _end_hooks = {}
backward_end_hooks = _end_hooks


cdef inline object _acc(object a, object b):
    return b if a is None else add_tensors(<Tensor>a, <Tensor>b)


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
        elif t.grad is None:
            t.grad = _own(g, walk_refs, self.create_graph)
        else:
            t.grad = add_tensors(<Tensor>t.grad, g)


cdef list run_backward(tuple outputs, list grads, bint retain_graph, bint create_graph,
                       tuple inputs, bint allow_unused):
    """Backpropagate grads from outputs; with `inputs`, return their gradients instead of
    accumulating into leaves' ``.grad``."""
    global _walks
    cdef list outer = [] if _walks else None
    cdef list result
    _walks += 1
    try:
        result = _walk(outputs, grads, retain_graph, create_graph, inputs, allow_unused, outer)
    finally:
        _walks -= 1
        if outer is not None:
            _restore(outer)
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
    global _epoch, _grad_enabled
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
            raise RuntimeError(f"backward: output {i} (shape {t.shape}) has "
                               f"stop_gradient=True, so no gradient flows from it; set "
                               f"stop_gradient=False on the inputs that need gradients")
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
    cdef bint prev = _grad_enabled
    _grad_enabled = create_graph
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
                        raise _released_error(n)
                    in_grads = n.run(node_grads, create_graph)
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
        _grad_enabled = prev
    if inputs is None:
        return None
    if not allow_unused:
        for p in range(len(inputs)):
            if walk.captured[p] is None:
                raise RuntimeError(
                    f"fastop.grad: input {p} (shape {inputs[p].shape}) was not used to "
                    f"compute the outputs; pass allow_unused=True to get None for it")
    return walk.captured


cdef Tensor _require_tensor(object value, str what):
    if not isinstance(value, Tensor):
        raise TypeError(f"backward: {what} must be Tensors, got {type(value).__name__}")
    return <Tensor>value


cdef Tensor _root_grad(Tensor out, object grad, Py_ssize_t i):
    if grad is None:
        return full_tensor(out.view.ndim, out.view.shape, out.view.dtype, 1.0)
    if _fits(grad, out):
        return <Tensor>grad
    return _check_grad(grad if isinstance(grad, DenseTensor) else as_tensor(grad, out.view.dtype),
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


# --------------------------------------------------------------------------- PyLayer

cdef class PyLayerNode(Node):
    """The context of one PyLayer call, and its node in the graph (see PyLayerContext)."""
    cdef object cls
    cdef tuple saved
    cdef unsigned long long saved_versions   # _versions(saved) when saved
    cdef tuple saved_out          # per saved tensor: the output index it is, or -1
    cdef tuple non_diff           # outputs marked non-differentiable
    cdef tuple out_meta
    cdef bint no_materialize
    cdef readonly tuple needs_input_grad

    cdef str label(self):
        return f"PyLayer '{self.cls.__name__}'"

    cdef void release(self):
        Node.release(self)
        self.saved = None

    def save_for_backward(self, *tensors):
        """Keep tensors for ``backward`` (read them there with :meth:`saved_tensor`).

        Call it once, in ``forward``. Saving through the context (rather than as an
        attribute) lets fastop free them after backward and save outputs without a
        reference cycle.
        """
        self.saved = tensors
        self.saved_versions = _versions(tensors, ALL_SAVED)

    def saved_tensor(self):
        """The tensors given to :meth:`save_for_backward`, as a tuple (call in backward)."""
        cdef Tensor v
        if self.released:
            raise _released_error(self)
        if self.saved is None:
            return ()
        if _versions(self.saved, ALL_SAVED) != self.saved_versions:
            raise _modified_error(self)
        if not _grad_enabled or self.saved_out is None:
            return self.saved
        out = list(self.saved)                    # create_graph: outputs rejoin the graph
        for k, idx in enumerate(self.saved_out):
            if idx >= 0:
                v = view_of(<DenseTensor>out[k])
                v.requires_grad = True
                v._node = self
                v._out_index = idx
                out[k] = v
        return tuple(out)

    def mark_non_differentiable(self, *tensors):
        """Declare outputs that have no gradient (e.g. indices, masks).

        Call it in ``forward`` with tensors that forward returns. They come out with
        ``stop_gradient=True``, and ``backward`` still receives a gradient argument for
        each of them (zeros, or None after ``set_materialize_grads(False)``).
        """
        self.non_diff = tensors

    def set_materialize_grads(self, bint value):
        """Whether ``backward`` gets zero tensors (True, the default) or None for outputs
        that received no gradient. Call in ``forward``; with False, backward must handle
        None, which saves allocating zeros."""
        self.no_materialize = not value

    cdef list run(self, list grads, bint create_graph):
        global _grad_enabled
        cdef Py_ssize_t k
        if not self.no_materialize:
            for k in range(self.n_out):                 # non-Tensor outputs get None
                if grads[k] is None and self.out_meta[k] is not None:
                    grads[k] = _zeros_like_meta(self.out_meta[k])
        backward_fn = self.cls.backward
        cdef bint prev = _grad_enabled
        _grad_enabled = create_graph
        try:
            if self.n_out == 1:              # a vectorcall, without packing a tuple
                result = backward_fn(self, grads[0])
            else:
                result = backward_fn(self, *grads)
        except BaseException as exc:
            add_note(exc, f"raised in backward of {self.label()}")
            raise
        finally:
            _grad_enabled = prev
        cdef list flat = list(result) if isinstance(result, (tuple, list)) else [result]
        if len(flat) != len(self.next):
            raise TypeError(f"{self.label()}: backward returned {len(flat)} gradient(s), "
                            f"expected {len(self.next)} (one per Tensor input of forward, "
                            f"None for an input without gradient)")
        for k in range(len(flat)):
            x = self.next[k]
            g = flat[k]
            if x is not None and g is not None and not _fits(g, <Tensor>x):
                flat[k] = _check_grad(g, <Tensor>x, self.label(), f"Tensor input {k}")
        return flat


cdef type _context_type = PyLayerNode


def set_context_type(type cls) -> None:
    """The class of PyLayer contexts (``PyLayerContext``, a subclass with ``__dict__``)."""
    global _context_type
    if not issubclass(cls, PyLayerNode):
        raise TypeError(f"set_context_type: expected a subclass of PyLayerNode, got "
                        f"{cls.__name__}")
    if cls.__init__ is not object.__init__:
        raise TypeError(f"set_context_type: {cls.__name__} defines __init__, which would "
                        f"never run (contexts are made by tp_new alone)")
    _context_type = cls


def apply_py_layer(cls, *args, **kwargs):
    """Run ``cls.forward(ctx, *args, **kwargs)`` without recording, then record one node
    whose backward is ``cls.backward``. Tensor arguments (positional, then keyword) are
    the inputs that receive gradients."""
    global _grad_enabled
    cdef list inputs = []
    cdef bint need = False
    for a in args:
        if isinstance(a, Tensor):
            inputs.append(a)
            need |= (<Tensor>a).requires_grad
    if kwargs:
        for a in kwargs.values():
            if isinstance(a, Tensor):
                inputs.append(a)
                need |= (<Tensor>a).requires_grad
    need &= _grad_enabled
    cdef PyLayerNode ctx = _new_context()
    ctx.needs_input_grad = _needs_input_grad(inputs) if need else (False,) * len(inputs)
    ctx.cls = cls
    forward_fn = cls.forward
    cdef bint prev = _grad_enabled
    _grad_enabled = False
    try:
        if kwargs:
            result = forward_fn(ctx, *args, **kwargs)
        elif len(args) == 1:                 # a vectorcall, without packing a tuple
            result = forward_fn(ctx, args[0])
        else:
            result = forward_fn(ctx, *args)
    except BaseException as exc:
        add_note(exc, f"raised in forward of PyLayer '{cls.__name__}'")
        raise
    finally:
        _grad_enabled = prev
    if isinstance(result, Tensor):           # the common case: one Tensor output
        if not need:
            return result
        return _connect_one(ctx, inputs, <Tensor>result)
    cdef bint is_seq = isinstance(result, (tuple, list))
    cdef list outs = list(result) if is_seq else [result]
    cdef bint any_tensor = False
    for o in outs:
        if isinstance(o, Tensor):
            any_tensor = True
            break
    if not any_tensor:
        raise TypeError(f"PyLayer '{cls.__name__}': forward must return a Tensor or a "
                        f"tuple/list with at least one Tensor, got {_describe(result)}")
    if not need:
        return result
    _connect(ctx, inputs, outs)
    if not is_seq:
        return outs[0]
    return tuple(outs) if isinstance(result, tuple) else outs


cdef PyLayerNode _new_context():
    """A context of `_context_type` from its tp_new alone: the type adds no __init__, and
    calling the type would look up and run object.__init__ for nothing."""
    return <PyLayerNode>(<PyTypeObject*>_context_type).tp_new(_context_type,
                                                             <PyObject*>_NO_ARGS, NULL)


cdef tuple _NO_ARGS = ()


cdef tuple _needs_input_grad(list inputs):
    cdef Py_ssize_t k, n = len(inputs)
    if n == 1:                      # shared tuples: nothing to allocate or free per call
        return (True,) if (<Tensor>inputs[0]).requires_grad else (False,)
    cdef tuple flags = PyTuple_New(n)
    for k in range(n):
        flag = True if (<Tensor>inputs[k]).requires_grad else False
        Py_INCREF(flag)
        PyTuple_SET_ITEM(flags, k, flag)
    return flags


cdef tuple _edges(list inputs):
    """Per Tensor input: itself if it takes a gradient, else None (a node's `next`)."""
    cdef Py_ssize_t k, n = len(inputs)
    cdef tuple edges = PyTuple_New(n)
    for k in range(n):
        x = inputs[k]
        if not (<Tensor>x).requires_grad:
            x = None
        Py_INCREF(x)
        PyTuple_SET_ITEM(edges, k, x)
    return edges


cdef Tensor _connect_one(PyLayerNode ctx, list inputs, Tensor out):
    """_connect for a forward that returned one Tensor; returns the user's view of it."""
    ctx.next = _edges(inputs)
    ctx.n_out = 1
    if ctx.saved is not None:
        ctx.saved_out = _saved_positions(ctx.saved, out)
    if not _is_float(out) or (ctx.non_diff is not None and _position(ctx.non_diff, out) >= 0):
        return out
    cdef Tensor v = view_of(out)
    v.requires_grad = True
    v._node = ctx
    v._out_index = 0
    return v


cdef tuple _saved_positions(tuple saved, Tensor out):
    """Per saved tensor: 0 if it is forward's one output, else -1 (ctx.saved_out)."""
    cdef Py_ssize_t k, n = len(saved)
    if n == 1:
        return (0,) if saved[0] is out else (-1,)
    cdef tuple positions = PyTuple_New(n)
    for k in range(n):
        position = 0 if saved[k] is out else -1
        Py_INCREF(position)
        PyTuple_SET_ITEM(positions, k, position)
    return positions


cdef void _connect(PyLayerNode ctx, list inputs, list outs) except *:
    """Make ctx the node of forward's outputs (views of them: ctx keeps the raw ones)."""
    cdef Py_ssize_t k, n = len(outs)
    cdef Tensor v
    ctx.next = _edges(inputs)
    ctx.n_out = n
    cdef tuple non_diff = ctx.non_diff or ()
    if n > 1:
        ctx.out_meta = tuple([_meta_of(<Tensor>o) if isinstance(o, Tensor) else None
                              for o in outs])
    if ctx.saved is not None:
        ctx.saved_out = tuple([_position(outs, s) for s in ctx.saved])
    for k in range(n):
        o = outs[k]
        if not isinstance(o, Tensor) or not _is_float(<Tensor>o) or \
                _position(non_diff, o) >= 0:
            continue
        v = view_of(<Tensor>o)
        v.requires_grad = True
        v._node = ctx
        v._out_index = k
        outs[k] = v


cdef Py_ssize_t _position(object items, object value):
    """Index of value (by identity) in items (a list or tuple), or -1."""
    cdef Py_ssize_t k
    for k in range(len(items)):
        if items[k] is value:
            return k
    return -1


cdef str _describe(object value):
    if isinstance(value, (tuple, list)):
        return f"{type(value).__name__} of ({', '.join(type(v).__name__ for v in value)})"
    return type(value).__name__


# --------------------------------------------------------------------------- indexing

cdef class IndexNode(Node):
    """``x[key]``: the gradient scatters into zeros of x's shape."""
    cdef object key
    cdef tuple meta

    cdef str label(self):
        return "indexing"

    cdef list run(self, list grads, bint create_graph):
        return [_scatter(<Tensor>grads[0], self.key, self.meta)]


cdef class ScatterNode(Node):
    """The gradient of indexing as an op of its own (for higher-order gradients)."""
    cdef object key

    cdef str label(self):
        return "indexing gradient"

    cdef list run(self, list grads, bint create_graph):
        return [index(<Tensor>grads[0], self.key)]


cdef bint _is_advanced(object key):
    for k in key:
        if isinstance(k, (list, np.ndarray, DenseTensor)):
            return True
    return False


cdef tuple _normalize_key(object key):
    key = key if isinstance(key, tuple) else (key,)
    return tuple([np.asarray(k) if isinstance(k, (list, DenseTensor)) else k for k in key])


cdef Tensor _scatter(Tensor g, object key, tuple meta):
    """zeros(meta) with g added at key; recorded (as the adjoint of indexing) if needed."""
    cdef Tensor out = _zeros_like_meta(meta)
    if _is_advanced(key):
        np.add.at(out.numpy(), key, g.numpy())
    else:
        out.numpy()[key] += g.numpy()
    cdef ScatterNode node
    if _grad_enabled and g.requires_grad:
        node = ScatterNode.__new__(ScatterNode)
        node.next = (g,)
        node.n_out = 1
        node.key = key
        out.requires_grad = True
        out._node = node
    return out


def index(Tensor x, key):
    """``x[key]``: a view for basic indexing, a gather (copy) for integer arrays."""
    cdef tuple nkey = _normalize_key(key)
    cdef Tensor out
    if _is_advanced(nkey):
        out = as_tensor(np.ascontiguousarray(x.numpy()[nkey]), -1)
    else:
        view = x._basic_index(nkey)
        out = view if type(view) is Tensor else view_of(<DenseTensor>view)
    cdef IndexNode node
    if _grad_enabled and x.requires_grad and _is_float(x):
        node = IndexNode.__new__(IndexNode)
        node.next = (x,)
        node.n_out = 1
        # index arrays are copied: the gradient must scatter to the positions read now,
        # whatever is later written into the caller's array or tensor
        node.key = tuple([k.copy() if isinstance(k, np.ndarray) else k for k in nkey])
        node.meta = _meta_of(x)
        out.requires_grad = True
        out._node = node
    return out
