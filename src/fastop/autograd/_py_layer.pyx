# cython: freethreading_compatible = False
"""PyLayer's engine: the context object that is also the graph node, and ``apply``.

``apply`` runs ``cls.forward(ctx, ...)`` without recording and connects forward's Tensor
outputs to one node whose backward is ``cls.backward``. Seed 004's rules: backward gets
one gradient per *Tensor* output of forward (``return y1, 1, y2, None`` gives
``backward(ctx, dy1, dy2)``) and returns one gradient per Tensor input.
The profiler's hook: ``apply`` records the forward call (the backward walk records the
backward).
"""
from cpython.object cimport PyObject, PyTypeObject
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM
from fastop._core.storage cimport DenseTensor
from fastop._tensor cimport Tensor, view_of
from fastop.autograd._grad_mode cimport grad_enabled, swap_grad_enabled
from fastop.autograd._graph cimport (Node, is_float, zeros_like_meta, meta_of, grad_fits,
                                     check_grad, versions, modified_error, released_error,
                                     ALL_SAVED)

from fastop._core.profiling cimport EVENT_PYLAYER, now_ns, profiling_flag, record
from libc.stdint cimport int64_t

from fastop.ops._registry import add_note

__all__ = ["PyLayerNode", "apply_py_layer", "set_context_type"]


cdef class PyLayerNode(Node):
    """The context of one PyLayer call, and its node in the graph (see PyLayerContext)."""
    cdef object cls
    cdef tuple saved
    cdef unsigned long long saved_versions   # versions(saved) when saved
    cdef tuple saved_out          # per saved tensor: the output index it is, or -1
    cdef tuple non_diff           # outputs marked non-differentiable
    cdef tuple out_meta           # per output: (shape, dtype) of a Tensor, None otherwise
    cdef tuple tensor_meta        # the same for the Tensor outputs alone
    cdef bint no_materialize
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
        reference cycle.
        """
        self.saved = tensors
        self.saved_versions = versions(tensors, ALL_SAVED)

    def saved_tensor(self):
        """The tensors given to :meth:`save_for_backward`, as a tuple (call in backward)."""
        cdef Tensor v
        if self.released:
            raise released_error(self)
        if self.saved is None:
            return ()
        if versions(self.saved, ALL_SAVED) != self.saved_versions:
            raise modified_error(self)
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

    def set_materialize_grads(self, bint value):
        """Whether ``backward`` gets zero tensors (True, the default) or None for outputs
        that received no gradient. Call in ``forward``; with False, backward must handle
        None, which saves allocating zeros."""
        self.no_materialize = not value

    cdef list run(self, list grads, bint create_graph):
        cdef Py_ssize_t k
        if self.n_out > 1:                  # one gradient per Tensor output (rule 2)
            grads = [grads[k] for k in range(self.n_out) if self.out_meta[k] is not None]
            if not self.no_materialize:
                for k in range(len(grads)):
                    if grads[k] is None:
                        grads[k] = zeros_like_meta(self.tensor_meta[k])
        backward_fn = self.cls.backward
        cdef bint prev = swap_grad_enabled(create_graph)
        try:
            if self.n_out == 1:              # a vectorcall, without packing a tuple
                result = backward_fn(self, grads[0])
            else:
                result = backward_fn(self, *grads)
        except BaseException as exc:
            add_note(exc, f"raised in backward of {self.label()}")
            raise
        finally:
            swap_grad_enabled(prev)
        cdef list flat = list(result) if isinstance(result, (tuple, list)) else [result]
        if len(flat) != len(self.next):
            raise TypeError(f"{self.label()}: backward returned {len(flat)} gradient(s), "
                            f"expected {len(self.next)} (one per Tensor input of forward, "
                            f"None for an input without gradient)")
        for k in range(len(flat)):
            x = self.next[k]
            g = flat[k]
            if x is not None and g is not None and not grad_fits(g, <Tensor>x):
                flat[k] = check_grad(g, <Tensor>x, self.label(), f"Tensor input {k}")
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


cdef const int* _profiling = profiling_flag()


def apply_py_layer(cls, *args, **kwargs):
    """Run ``cls.forward(ctx, *args, **kwargs)`` without recording, then record one node
    whose backward is ``cls.backward``. Tensor arguments (positional, then keyword) are
    the inputs that receive gradients."""
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
    for a in args:
        if isinstance(a, Tensor):
            inputs.append(a)
            need |= (<Tensor>a).requires_grad
    if kwargs:
        for a in kwargs.values():
            if isinstance(a, Tensor):
                inputs.append(a)
                need |= (<Tensor>a).requires_grad
    need &= grad_enabled()
    cdef PyLayerNode ctx = _new_context()
    ctx.needs_input_grad = _needs_input_grad(inputs) if need else (False,) * len(inputs)
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
    if not is_float(out) or (ctx.non_diff is not None and _position(ctx.non_diff, out) >= 0):
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
        ctx.out_meta = tuple([meta_of(<Tensor>o) if isinstance(o, Tensor) else None
                              for o in outs])
        ctx.tensor_meta = tuple([m for m in ctx.out_meta if m is not None])
    if ctx.saved is not None:
        ctx.saved_out = tuple([_position(outs, s) for s in ctx.saved])
    for k in range(n):
        o = outs[k]
        if not isinstance(o, Tensor) or not is_float(<Tensor>o) or \
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
