# cython: freethreading_compatible = False
"""PyLayer's engine: the context object that is also the graph node, and ``apply``.

``apply`` runs ``cls.forward(ctx, ...)`` without recording and connects forward's Tensor
outputs to one node whose backward is ``cls.backward``. PaddlePaddle's rules:

* inputs: each Tensor argument (positional, then keyword) is one input *slot*; a list or
  tuple argument holding Tensors is one slot too (its Tensors are inputs);
* outputs: backward gets one gradient per Tensor output of forward
  (``return y1, 1, y2, None`` gives ``backward(ctx, dy1, dy2)``), a list of gradients
  for an output that is a list/tuple of Tensors; every Tensor output carries a gradient
  (integer and bool ones too) unless marked non-differentiable;
* backward returns one entry per input slot (a tuple; a lone entry may be returned
  bare): a Tensor or None, a list/tuple of them for a list slot. Fewer entries than
  slots is fine when the missing ones need no gradient;
* a forward that returns one of its inputs itself modifies it in place (its version
  moves on, and a leaf that needs a gradient is refused) unless
  ``ctx.mark_not_inplace`` says otherwise.

fastop's graph holds tensors (not gradient nodes) as edges, so an output is always a new
Tensor object: for an in-place output, one over the input's memory.

The profiler's hook: ``apply`` records the forward call (the backward walk records the
backward).
"""
from cpython.object cimport PyObject, PyTypeObject
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM
from fastop._core.storage cimport DenseTensor, bump_version
from fastop._tensor cimport Tensor, view_of, as_tensor
from fastop.autograd._grad_mode cimport grad_enabled, swap_grad_enabled
from fastop.autograd._node cimport Node, versions, modified_error, released_error, ALL_SAVED
from fastop.autograd._graph cimport (zeros_like_meta, meta_of, grad_fits, saved_hooks,
                                     pack_saved, unpack_saved)

import numpy as np

from fastop._core.profiling cimport EVENT_PYLAYER, now_ns, profiling_flag, record
from libc.stdint cimport int64_t

from fastop.ops._registry import add_note
from fastop.ops.builtin._table import B

__all__ = ["PyLayerNode", "apply_py_layer", "set_context_type"]


cdef class PyLayerNode(Node):
    """The context of one PyLayer call, and its node in the graph (see PyLayerContext)."""
    cdef object cls
    cdef tuple saved
    cdef object unpack_hook            # saved_tensors_hooks: `saved` holds packed values
    cdef unsigned long long saved_versions   # versions(saved) when saved
    cdef tuple saved_out          # per saved tensor: the output index it is, or -1
    cdef tuple non_diff           # outputs marked non-differentiable
    cdef tuple not_inplace        # inputs that forward may return without modifying them
    cdef tuple out_meta           # per Tensor output: (shape, dtype), to make zeros
    cdef tuple out_groups         # per output slot: -1 (a Tensor) or its Tensor count; None:
                                  # every slot one Tensor
    cdef tuple in_groups          # the same for the input slots (`next` is flat)
    cdef bint no_materialize
    cdef bint keep_grad_dtype     # set_grad_in_dtype_consistent(False)
    cdef readonly tuple needs_input_grad

    cdef str label(self):
        return f"PyLayer '{self.cls.__name__}'"

    cdef object origin(self):
        return self.cls

    cdef void release(self):
        Node.release(self)
        self.saved = None

    def save_for_backward(self, *tensors):
        """Keep tensors for ``backward`` (read them there with :meth:`saved_tensor`).

        Call it once, in ``forward``. Saving through the context (rather than as an
        attribute) lets fastop free them after backward and save outputs without a
        reference cycle. Inside ``fastop.autograd.saved_tensors_hooks(pack, unpack)``
        each Tensor is kept as ``pack(tensor)`` and given back as ``unpack(...)``.
        """
        hooks = saved_hooks()
        if hooks is not None:
            self.saved = pack_saved(tensors, hooks[0])
            self.unpack_hook = hooks[1]
            return
        self.saved = tensors
        self.unpack_hook = None
        self.saved_versions = versions(tensors, ALL_SAVED)

    def saved_tensor(self):
        """The tensors given to :meth:`save_for_backward`, as a tuple (call in backward)."""
        cdef Tensor v
        cdef unsigned long long now
        if self.released:
            raise released_error(self)
        if self.saved is None:
            return ()
        if self.unpack_hook is not None:
            return unpack_saved(self.saved, self.unpack_hook)
        now = versions(self.saved, ALL_SAVED)
        if now != self.saved_versions:
            raise modified_error(self, now, self.saved_versions)
        if not grad_enabled() or self.saved_out is None:
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

    def mark_not_inplace(self, *tensors):
        """Declare inputs that forward returns unmodified.

        A forward that returns one of its input Tensors itself is taken to have
        modified it in place (PaddlePaddle's rule): its in-place version moves on, so
        ops that saved it refuse to backward, and a leaf with ``stop_gradient=False`` is
        refused. For the inputs given here, the output is simply a new Tensor sharing
        the input's memory. Call it in ``forward``.
        """
        self.not_inplace = tensors

    def set_materialize_grads(self, bint value):
        """Whether ``backward`` gets zero tensors (True, the default) or None for outputs
        that received no gradient. Call in ``forward``; with False, backward must handle
        None, which saves allocating zeros."""
        self.no_materialize = not value

    def set_grad_in_dtype_consistent(self, bint value):
        """Whether the gradients ``backward`` receives are cast to the dtypes of
        forward's outputs (True, the default). With False, a gradient another PyLayer's
        backward returned in another dtype (e.g. float16 for a float32 tensor) arrives
        as it is. Call in ``forward``."""
        self.keep_grad_dtype = not value

    cdef list run(self, list grads, bint create_graph):
        cdef Py_ssize_t k
        if self.n_out > 1 and not self.no_materialize:
            for k in range(self.n_out):
                if grads[k] is None:
                    grads[k] = zeros_like_meta(self.out_meta[k])
        backward_fn = self.cls.backward
        cdef bint prev = swap_grad_enabled(create_graph)
        try:
            if self.out_groups is None and self.n_out == 1:   # a vectorcall, no tuple
                result = backward_fn(self, grads[0])
            elif self.out_groups is None:
                result = backward_fn(self, *grads)
            else:
                result = backward_fn(self, *_grouped(grads, self.out_groups))
        except BaseException as exc:
            add_note(exc, f"raised in backward of {self.label()}")
            raise
        finally:
            swap_grad_enabled(prev)
        if self.in_groups is None and len(self.next) == 1 and type(result) is Tensor:
            flat = [result]                  # the common case: one input, one gradient
        else:
            flat = self._input_grads(result)
        for k in range(len(flat)):
            x = self.next[k]
            g = flat[k]
            if x is not None and g is not None and not grad_fits(g, <Tensor>x):
                flat[k] = self._fit(g, <Tensor>x, k)
        return flat

    cdef list _input_grads(self, object result):
        """backward's result as one gradient (or None) per flat input, checked against
        the input slots (PaddlePaddle's rules; see the module docstring)."""
        cdef tuple groups = self.in_groups
        cdef Py_ssize_t n_slots = len(groups) if groups is not None else len(self.next)
        cdef Py_ssize_t s, j, count, flat_at = 0
        if isinstance(result, tuple):
            entries = result
        elif isinstance(result, list) and not (n_slots == 1 and groups is not None
                                               and groups[0] >= 0):
            entries = result                 # a list of one entry per slot
        else:
            entries = (result,)              # a lone entry (a list slot's list too)
        if len(entries) > n_slots:
            raise self._count_error(len(entries), n_slots)
        cdef list flat = []
        for s in range(n_slots):
            count = -1 if groups is None else groups[s]
            width = 1 if count < 0 else count
            if s >= len(entries):
                for j in range(flat_at, flat_at + width):
                    if self.next[j] is not None:
                        raise self._count_error(len(entries), n_slots)
                flat.extend([None] * width)
            elif count < 0:
                flat.append(self._grad_value(entries[s], flat_at))
            elif entries[s] is None:
                flat.extend([None] * count)
            elif isinstance(entries[s], (list, tuple)) and len(entries[s]) == count:
                for j in range(count):
                    flat.append(self._grad_value(entries[s][j], flat_at + j))
            else:
                raise ValueError(f"{self.label()}: the gradient for input slot {s} (a list "
                                 f"of {count} Tensors) must be a list or tuple of {count} "
                                 f"Tensors or None, got {_describe(entries[s])}")
            flat_at += width
        return flat

    cdef object _count_error(self, Py_ssize_t got, Py_ssize_t expected):
        return ValueError(f"{self.label()}: backward returned {got} gradient(s), expected "
                          f"{expected} (one per Tensor input of forward, None for an "
                          f"input without gradient)")

    cdef object _grad_value(self, object g, Py_ssize_t k):
        """One gradient as backward returned it: a Tensor or None (arrays and fastop
        storage are taken as Tensors)."""
        if g is None or isinstance(g, Tensor):
            return g
        if isinstance(g, (DenseTensor, np.ndarray)):
            return as_tensor(g, -1)
        raise ValueError(f"{self.label()}: the gradient for Tensor input {k} must be a "
                         f"Tensor or None, got {type(g).__name__}")

    cdef object _fit(self, object g, Tensor x, Py_ssize_t k):
        """g made the gradient of input x: of its shape (else an error: gradients are
        never broadcast) and cast to its dtype, unless x comes from a PyLayer that asked
        for gradients as they are (set_grad_in_dtype_consistent(False))."""
        cdef Tensor t = <Tensor>g
        if t.shape != x.shape:
            raise ValueError(f"{self.label()}: the gradient for Tensor input {k} has shape "
                             f"{t.shape}, expected {x.shape} (the input's shape); "
                             f"gradients are never broadcast")
        if t.view.dtype == x.view.dtype:
            return t
        if isinstance(x._node, PyLayerNode) and (<PyLayerNode>x._node).keep_grad_dtype:
            return t
        return B.cast(t, dtype=x.dtype)


cdef list _grouped(list grads, tuple groups):
    """Flat output gradients as backward's arguments: one per output slot, a list for a
    slot that is a list of Tensors."""
    cdef list args = []
    cdef Py_ssize_t at = 0
    for count in groups:
        if count < 0:
            args.append(grads[at])
            at += 1
        else:
            args.append(grads[at:at + count])
            at += count
    return args


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


cdef const int* _profiling = profiling_flag()


def apply_py_layer(cls, *args, **kwargs):
    """Run ``cls.forward(ctx, *args, **kwargs)`` without recording, then record one node
    whose backward is ``cls.backward``. Tensor arguments (positional, then keyword), and
    the Tensors in list/tuple arguments, are the inputs that receive gradients."""
    if not _profiling[0]:
        return _apply(cls, args, kwargs)
    cdef int64_t start = now_ns()
    try:
        return _apply(cls, args, kwargs)
    finally:
        record(cls, EVENT_PYLAYER, start, args)


cdef object _apply(cls, tuple args, dict kwargs):
    cdef list inputs = []
    cdef bint need = False
    cdef bint lists = False
    for a in args:
        if isinstance(a, Tensor):
            inputs.append(a)
            need |= (<Tensor>a).requires_grad
        elif isinstance(a, (list, tuple)):
            lists = True
    if kwargs:
        for a in kwargs.values():
            if isinstance(a, Tensor):
                inputs.append(a)
                need |= (<Tensor>a).requires_grad
            elif isinstance(a, (list, tuple)):
                lists = True
    cdef list groups = None             # per input slot, when a slot is a list
    if lists:
        inputs, groups, need = _slots(args, kwargs)
    need &= grad_enabled()
    cdef PyLayerNode ctx = _new_context()
    if groups is not None:
        ctx.in_groups = tuple(groups)
    ctx.needs_input_grad = _needs_input_grad(inputs, ctx.in_groups) if need \
        else (False,) * (len(inputs) if groups is None else len(groups))
    ctx.cls = cls
    forward_fn = cls.forward
    cdef bint prev = swap_grad_enabled(False)
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
        swap_grad_enabled(prev)
    if isinstance(result, Tensor):           # the common case: one Tensor output
        if not need:
            return result
        return _connect_one(ctx, inputs, <Tensor>result)
    cdef bint is_seq = isinstance(result, (tuple, list))
    cdef list outs = list(result) if is_seq else [result]
    if not _holds_tensor(outs):
        raise ValueError(f"PyLayer '{cls.__name__}': forward must return a Tensor or a "
                         f"tuple/list with at least one Tensor, got {_describe(result)}")
    if not need:
        return result
    _connect(ctx, inputs, outs)
    if not is_seq:
        return outs[0]
    return tuple(outs) if isinstance(result, tuple) else outs


cdef tuple _slots(tuple args, dict kwargs):
    """The inputs when an argument is a list or tuple: (the Tensors, per input slot -1
    for a Tensor or the count of a list's Tensors (None if no list holds one), whether
    one needs a gradient)."""
    cdef list inputs = [], groups = []
    cdef bint need = False
    cdef Py_ssize_t count
    for a in (args + tuple(kwargs.values())) if kwargs else args:
        if isinstance(a, Tensor):
            inputs.append(a)
            groups.append(-1)
            need |= (<Tensor>a).requires_grad
        elif isinstance(a, (list, tuple)):
            count = 0
            for e in a:
                if isinstance(e, Tensor):
                    inputs.append(e)
                    need |= (<Tensor>e).requires_grad
                    count += 1
            if count:
                groups.append(count)
    return inputs, groups if any([c >= 0 for c in groups]) else None, need


cdef bint _holds_tensor(list outs):
    for o in outs:
        if isinstance(o, Tensor):
            return True
        if isinstance(o, (list, tuple)):
            for e in o:
                if isinstance(e, Tensor):
                    return True
    return False


cdef PyLayerNode _new_context():
    """A context of `_context_type` from its tp_new alone: the type adds no __init__, and
    calling the type would look up and run object.__init__ for nothing."""
    return <PyLayerNode>(<PyTypeObject*>_context_type).tp_new(_context_type,
                                                             <PyObject*>_NO_ARGS, NULL)


cdef tuple _NO_ARGS = ()


cdef tuple _needs_input_grad(list inputs, tuple groups):
    """Per input slot: whether a gradient is taken of it (of any Tensor of a list slot)."""
    cdef Py_ssize_t k, n = len(inputs), at = 0
    if groups is not None:
        flags = []
        for count in groups:
            width = 1 if count < 0 else count
            flags.append(any([(<Tensor>inputs[j]).requires_grad
                              for j in range(at, at + width)]))
            at += width
        return tuple(flags)
    if n == 1:                      # shared tuples: nothing to allocate or free per call
        return (True,) if (<Tensor>inputs[0]).requires_grad else (False,)
    cdef tuple flags_t = PyTuple_New(n)
    for k in range(n):
        flag = True if (<Tensor>inputs[k]).requires_grad else False
        Py_INCREF(flag)
        PyTuple_SET_ITEM(flags_t, k, flag)
    return flags_t


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


cdef int _check_inplace(PyLayerNode ctx, list inputs, Tensor out) except -1:
    """`out` is one of forward's outputs: if it is an input returned as it is (and not
    marked with mark_not_inplace), record the in-place write PaddlePaddle takes it for."""
    if _position(inputs, out) < 0:
        return 0
    if ctx.not_inplace is not None and _position(ctx.not_inplace, out) >= 0:
        return 0
    if out._node is None and out.requires_grad:
        raise ValueError(f"{ctx.label()}: forward returned its input (shape {out.shape}) "
                         f"itself, a leaf Tensor with stop_gradient=False, which cannot be "
                         f"modified in place; return a new Tensor, or call "
                         f"ctx.mark_not_inplace(x) in forward if it is returned unmodified")
    bump_version(out)
    return 0


cdef Tensor _connect_one(PyLayerNode ctx, list inputs, Tensor out):
    """_connect for a forward that returned one Tensor; returns the user's view of it."""
    _check_inplace(ctx, inputs, out)
    ctx.next = _edges(inputs)
    ctx.n_out = 1
    if ctx.saved is not None and ctx.unpack_hook is None:
        ctx.saved_out = _saved_positions(ctx.saved, out)
    if ctx.non_diff is not None and _position(ctx.non_diff, out) >= 0:
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
    """Make ctx the node of forward's Tensor outputs: `outs` (forward's result, one entry
    per slot) gets views of them (ctx keeps the raw ones)."""
    cdef list flat = []
    cdef list groups = []
    cdef bint grouped = False
    cdef Py_ssize_t k, j
    for o in outs:
        if isinstance(o, Tensor):
            flat.append(o)
            groups.append(-1)
        elif isinstance(o, (list, tuple)):
            members = [e for e in o if isinstance(e, Tensor)]
            if members:
                flat.extend(members)
                groups.append(len(members))
                grouped = True
    ctx.next = _edges(inputs)
    ctx.n_out = len(flat)
    if grouped:
        ctx.out_groups = tuple(groups)
    if ctx.n_out > 1:
        ctx.out_meta = tuple([meta_of(o) for o in flat])
    if ctx.saved is not None and ctx.unpack_hook is None:
        ctx.saved_out = tuple([_position(flat, s) for s in ctx.saved])
    cdef Py_ssize_t at = 0
    for k in range(len(outs)):
        o = outs[k]
        if isinstance(o, Tensor):
            outs[k] = _output_view(ctx, inputs, <Tensor>o, at)
            at += 1
        elif isinstance(o, (list, tuple)) and grouped:
            members = list(o)
            for j in range(len(members)):
                if isinstance(members[j], Tensor):
                    members[j] = _output_view(ctx, inputs, <Tensor>members[j], at)
                    at += 1
            outs[k] = type(o)(members)


cdef Tensor _output_view(PyLayerNode ctx, list inputs, Tensor o, Py_ssize_t index):
    """The user's Tensor for flat output `index`: a view connected to ctx (the raw output
    itself if marked non-differentiable)."""
    _check_inplace(ctx, inputs, o)
    if ctx.non_diff is not None and _position(ctx.non_diff, o) >= 0:
        return o
    cdef Tensor v = view_of(o)
    v.requires_grad = True
    v._node = ctx
    v._out_index = index
    return v


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
