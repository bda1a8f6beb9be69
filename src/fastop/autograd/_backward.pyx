# cython: freethreading_compatible = False
"""The backward walk: ``backward`` (into leaves' ``.grad``) and ``grad`` (returned).

:func:`_walk` is Kahn's algorithm over the nodes reachable from the outputs: count each
node's in-edges, then run a node once all its consumers have given it their gradients,
accumulating the gradients of tensors used several times; saved tensors are freed after
use unless ``retain_graph``. What a walk keeps (each node's gathered gradients and
pending in-edges, the ready stack) is the walk's own (:class:`_Walk`), so a walk nested
in a PyLayer's backward leaves the enclosing one untouched. ``fastop.grad``'s
differences (walk only the nodes between outputs and inputs, capture the inputs'
gradients instead of writing ``.grad``) are :class:`_GradWalk`'s methods, outside the
walk. A leaf's ``.grad`` is accumulated under a lock, so threads running backward into
shared parameters lose no update.

The profiler's hooks (one flag check each): the walk itself (a ``backward``/``grad``
event) and each node it runs (nested under it).

Leaf hooks (:func:`fastop.autograd.register_leaf_grad_hook`, what DataParallel overlaps
its communication with): while any is registered, a ``backward`` walk writes a hooked
leaf's gradient into the leaf's fixed buffer (in place) and the outermost walk counts
the edges into each hooked leaf, calling its ``ready`` when the last one has been
walked. With none registered the walk does one pointer check per leaf edge more.
"""
cimport cython
from cpython.dict cimport PyDict_GetItemWithError, PyDict_SetDefault
from cpython.object cimport PyObject
from cpython.pythread cimport (PyThread_type_lock, PyThread_allocate_lock,
                               PyThread_acquire_lock, PyThread_release_lock, WAIT_LOCK,
                               NOWAIT_LOCK)
from cpython.ref cimport Py_REFCNT
from libc.stdint cimport int64_t
from fastop._core.storage cimport DenseTensor, FASTOP_NUM_COMPUTE_DTYPES
from fastop._tensor cimport (Tensor, add_tensors, as_tensor, full_tensor,
                             set_backward_walk)
from fastop.ops._dispatch cimport swap_mode_override
from fastop.autograd._grad_mode cimport swap_grad_enabled
from fastop.autograd._node cimport Node, released_error
from fastop.autograd._graph cimport check_grad, grad_fits
from fastop._core.profiling cimport (EVENT_BACKWARD, EVENT_NODE, now_ns, profiling_flag,
                                     record)

import warnings

import numpy as np

from fastop.ops.builtin._table import B

__all__ = ["backward", "grad"]

cdef const int* _profiling = profiling_flag()
cdef int _walks = 0         # backward walks in progress (one inside a PyLayer's backward)
# key -> fn, called in order after each outermost backward pass (not fastop.grad); filled
# by fastop.autograd.register_backward_end_hook (DataParallel averages gradients there)
cdef dict _end_hooks = {}
backward_end_hooks = _end_hooks
# id(leaf) -> its LeafGradHook; filled by fastop.autograd.register_leaf_grad_hook
cdef dict _leaf_hooks = {}
leaf_grad_hooks = _leaf_hooks


@cython.final
cdef class LeafGradHook:
    """What backward does for one leaf besides storing its ``.grad`` (see
    :func:`fastop.autograd.register_leaf_grad_hook`): write the gradient into `buffer`
    (a tensor of the leaf's shape and dtype, or None), call ``ready(leaf)`` once the
    outermost pass's gradient is final (or None)."""
    cdef readonly Tensor leaf
    cdef readonly object buffer
    cdef readonly object ready

    def __init__(self, Tensor leaf, buffer, ready):
        self.leaf, self.buffer, self.ready = leaf, buffer, ready


cdef inline LeafGradHook _leaf_hook(Tensor t):
    """t's hook, or None (the dict is keyed by id: the entry holds its leaf, so an id
    reused by another tensor does not match)."""
    cdef PyObject* found = PyDict_GetItemWithError(_leaf_hooks, id(t))
    if found is NULL or (<LeafGradHook>found).leaf is not t:
        return None
    return <LeafGradHook>found


cdef void _store_in_buffer(Tensor t, Tensor g, Tensor buffer) except *:
    """Leaf t's .grad becomes buffer holding .grad + g: added in place when .grad is the
    buffer already, else written over it (zeros left by clear_grad are not made)."""
    cdef object out = np.asarray(buffer)
    _lock_leaves()
    try:
        if t._grad is buffer:
            np.add(out, np.asarray(g), out=out)
        elif t._grad is None:
            np.copyto(out, np.asarray(g))
        else:
            np.add(np.asarray(t._grad), np.asarray(g), out=out)
        t._grad = buffer
        t._grad_zeroed = False
        t._grad_version += 1
    finally:
        PyThread_release_lock(_leaf_lock)


cdef void _count_leaf_edge(dict leaf_edges, Tensor t) except *:
    """One more edge of this walk into t, when t has a ready hook."""
    cdef LeafGradHook hook = _leaf_hook(t)
    if hook is not None and hook.ready is not None:
        leaf_edges[id(t)] = leaf_edges.get(id(t), 0) + 1


cdef void _leaf_edge_walked(dict leaf_edges, Tensor t) except *:
    """An edge into t has been walked: call t's ready hook after the last one."""
    cdef object left = leaf_edges.get(id(t))
    if left is None:
        return
    if left == 1:
        del leaf_edges[id(t)]
        _leaf_hook(t).ready(t)
    else:
        leaf_edges[id(t)] = left - 1


cdef inline object _acc(object a, object b):
    return b if a is None else _sum_grads(<Tensor>a, <Tensor>b)


cdef Tensor _sum_grads(Tensor a, Tensor b):
    """a + b in their dtype: a sum of float16 gradients is computed in float32 (a storage
    dtype) and cast back, so a tensor's gradient keeps its dtype."""
    cdef Tensor s = add_tensors(a, b)
    if a.view.dtype >= FASTOP_NUM_COMPUTE_DTYPES and s.view.dtype != a.view.dtype:
        s = <Tensor>B.cast(s, dtype=a.dtype)
    return s


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


# --------------------------------------------------------------------------- walk state

@cython.freelist(16)
@cython.final
@cython.no_gc       # only the walk's dict and stack refer to it: it is in no cycle
cdef class _Pending:
    """A node in one walk: the gradients its outputs gathered so far, and its in-edges
    from nodes that have not run yet (-1: on the ready stack)."""
    cdef Node node
    cdef list grads
    cdef Py_ssize_t deps


cdef class _Walk:
    """One ``backward`` pass: the reached nodes' state, the stack, and leaves' .grad."""
    cdef dict pending             # Node -> its _Pending, for every node the walk reached
    cdef list stack               # a list used as an array with an explicit top: list.pop()
    cdef Py_ssize_t top           # frees the storage when it empties, the next append
    cdef bint create_graph        # allocates it again
    cdef bint retain_graph
    cdef bint buffered            # leaf hooks exist: hooked leaves' .grad go to buffers
    cdef dict leaf_edges          # id(hooked leaf) -> edges not walked yet (or None:
                                  # no ready hooks run in this walk)

    cdef bint reaches(self, Node n) except -1:
        """Whether the walk goes to n (every node for backward)."""
        return True

    cdef bint runs(self, Node n, list grads) except -1:
        """Whether n runs, given the gradients of its outputs."""
        return True

    cdef void skip_output(self, Tensor t, Py_ssize_t i) except *:
        """Output i takes no gradient: PaddlePaddle skips it silently; a warning says why
        no .grad appears (stacklevel 1: Cython adds no frame, so it names the caller's
        line)."""
        warnings.warn(f"backward: nothing to do: {_no_gradient(t, i)}", UserWarning,
                      stacklevel=1)

    cdef void keep_grad(self, Tensor t, Tensor g) except *:
        """Add g to the .grad of t, a non-leaf that called retain_grads() (a copy: the
        walk goes on using g)."""
        self.deliver_leaf(t, g, 0)

    cdef void deliver_leaf(self, Tensor t, Tensor g, Py_ssize_t walk_refs) except *:
        """Add g to leaf t's .grad; the walk refers to g `walk_refs` times."""
        cdef LeafGradHook hook
        if not t.requires_grad:       # stop_gradient set after the graph was recorded
            return
        if self.buffered and not self.create_graph:
            hook = _leaf_hook(t)
            if hook is not None and hook.buffer is not None:
                _store_in_buffer(t, g, <Tensor>hook.buffer)
                return
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


cdef inline _Pending _find(_Walk walk, Node n):
    """n's state in this walk, or None where the walk has not reached n."""
    cdef PyObject* found = PyDict_GetItemWithError(walk.pending, n)
    return None if found is NULL else <_Pending>found


cdef _Pending _visit(_Walk walk, Node n):
    """n's state in this walk, started (and n pushed for counting) on the first visit
    (one dict lookup: most nodes are visited once)."""
    cdef _Pending p = _Pending.__new__(_Pending)
    cdef PyObject* found = PyDict_SetDefault(walk.pending, n, p)
    if found is not <PyObject*>p:
        return <_Pending>found
    p.node = n
    p.grads = [None] * n.n_out
    _push(walk, p)
    return p


cdef inline void _push(_Walk walk, _Pending p) except *:
    if walk.top < len(walk.stack):
        walk.stack[walk.top] = p
    else:
        walk.stack.append(p)
    walk.top += 1


cdef inline _Pending _pop(_Walk walk):
    walk.top -= 1
    cdef _Pending p = <_Pending>walk.stack[walk.top]
    walk.stack[walk.top] = None
    return p


cdef str _no_gradient(Tensor t, Py_ssize_t i):
    return (f"output {i} (shape {t.shape}) has stop_gradient=True, so no gradient flows "
            f"from it; set stop_gradient=False on the inputs that need gradients")


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


# --------------------------------------------------------------------------- fastop.grad

cdef class _GradWalk(_Walk):
    """One ``fastop.grad`` pass: only the nodes on a path from the outputs to an input
    are walked and run (and freed), the graph beyond the inputs is left as it is for
    later passes, and the inputs' gradients are captured instead of written to .grad."""
    cdef dict leaf_pos            # id(leaf input) -> positions in `captured`
    cdef dict node_pos            # id(an input's node) -> [(output index, position)]
    cdef list captured
    cdef set keep                 # ids of the nodes that run or are inputs' nodes
    cdef set running              # ids of the nodes that run

    cdef bint reaches(self, Node n) except -1:
        return id(n) in self.keep

    cdef bint runs(self, Node n, list grads) except -1:
        """Capture the gradients of the inputs n made; whether n runs (an input's node
        leading to no other input does not)."""
        if grads is not None and id(n) in self.node_pos:
            for idx, p in self.node_pos[id(n)]:
                self.captured[p] = grads[idx]
        return id(n) in self.running

    cdef void skip_output(self, Tensor t, Py_ssize_t i) except *:
        raise RuntimeError(f"fastop.grad: {_no_gradient(t, i)}")

    cdef void keep_grad(self, Tensor t, Tensor g) except *:
        """fastop.grad returns gradients and writes no .grad, retained ones neither."""

    cdef void deliver_leaf(self, Tensor t, Tensor g, Py_ssize_t walk_refs) except *:
        for p in self.leaf_pos.get(id(t), ()):
            self.captured[p] = _acc(self.captured[p], g)

    cdef void find_nodes(self, tuple outputs, tuple inputs) except *:
        """Where each input's gradient goes, and the nodes to walk (post-order DFS: a
        node runs if an edge leads to an input leaf, an input's node, or a node that
        runs)."""
        cdef Py_ssize_t p, k
        cdef Tensor t
        cdef Node n, m
        cdef bint go
        self.captured = [None] * len(inputs)
        self.leaf_pos, self.node_pos = {}, {}
        for p in range(len(inputs)):
            t = _require_tensor(inputs[p], "inputs")
            if t._node is None:
                self.leaf_pos.setdefault(id(t), []).append(p)
            else:
                self.node_pos.setdefault(id(t._node), []).append((t._out_index, p))
        cdef dict runs = {}             # id(node) -> whether it runs
        self.keep = set()
        for out in outputs:
            n = _require_tensor(out, "outputs")._node
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
                                go = go or id(e) in self.leaf_pos
                            else:
                                go = go or id(m) in self.keep
                    runs[id(n)] = go
                    if go or id(n) in self.node_pos:
                        self.keep.add(id(n))
        self.running = {key for key, value in runs.items() if value}

    cdef list result(self, tuple inputs, bint allow_unused):
        if not allow_unused:
            for p in range(len(inputs)):
                if self.captured[p] is None:
                    raise RuntimeError(
                        f"fastop.grad: input {p} (shape {inputs[p].shape}) was not used "
                        f"to compute the outputs; pass allow_unused=True to get None for "
                        f"it")
        return self.captured


# --------------------------------------------------------------------------- the walk

cdef void _seed(_Walk walk, tuple outputs, list grads) except *:
    """Give the outputs their gradients (ones where grads has None); their nodes are the
    walk's first."""
    cdef Py_ssize_t i
    cdef Tensor t, g
    cdef _Pending p
    for i in range(len(outputs)):
        t = _require_tensor(outputs[i], "outputs")
        if not t.requires_grad:
            walk.skip_output(t, i)
            continue
        g = _root_grad(t, grads[i], i)
        if t._node is None:                       # a leaf: its own gradient
            walk.deliver_leaf(t, g if grads[i] is None or walk.create_graph
                              else <Tensor>g.copy(), -1)
        elif walk.reaches(t._node):
            if t._retains_grad:
                walk.keep_grad(t, g)
            p = _visit(walk, t._node)
            p.grads[t._out_index] = _acc(p.grads[t._out_index], g)


cdef void _walk(_Walk walk, tuple outputs, list grads) except *:
    """Backpropagate grads from outputs (Kahn's algorithm)."""
    cdef Py_ssize_t i
    cdef Tensor t
    cdef Node n, m
    cdef _Pending p, q
    _seed(walk, outputs, grads)
    while walk.top:                               # count in-edges of reachable nodes
        p = _pop(walk)
        if walk.runs(p.node, None):
            for e in p.node.next or ():
                if e is not None:
                    m = (<Tensor>e)._node
                    if m is not None and walk.reaches(m):
                        q = _visit(walk, m)
                        q.deps += 1
                    elif m is None and walk.leaf_edges is not None:
                        _count_leaf_edge(walk.leaf_edges, <Tensor>e)
    for i in range(len(outputs)):                 # ready: the outputs' nodes that no
        n = (<Tensor>outputs[i])._node            # other reachable node feeds
        p = None if n is None else _find(walk, n)
        if p is not None and p.deps == 0:
            p.deps = -1                           # pushed once even if several outputs
            _push(walk, p)
    cdef list node_grads, in_grads
    cdef tuple edges
    while walk.top:                               # Kahn: a node runs once all its
        p = _pop(walk)                            # consumers have given their grads
        n, node_grads, p.grads = p.node, p.grads, None
        if not walk.runs(n, node_grads):          # fastop.grad: an input's node
            continue
        in_grads = None
        for x in node_grads:
            if x is not None:
                if n.released:
                    raise released_error(n)
                in_grads = _profiled_run(n, node_grads, walk.create_graph) \
                    if _profiling[0] else n.run(node_grads, walk.create_graph)
                break
        edges = n.next or ()
        if not walk.retain_graph:
            n.release()
        for i in range(len(edges)):
            if edges[i] is None:
                continue
            t = <Tensor>edges[i]
            x = None if in_grads is None else in_grads[i]
            m = t._node
            if m is None:
                if x is not None:             # refs: x, in_grads, a pass-through's grads
                    walk.deliver_leaf(t, <Tensor>x, 1 + _count(in_grads, x)
                                      + _count(node_grads, x))
                if walk.leaf_edges is not None:
                    _leaf_edge_walked(walk.leaf_edges, t)
            else:
                q = _find(walk, m)
                if q is None:                 # fastop.grad: a node it does not walk
                    continue
                if x is not None:
                    if t._retains_grad:
                        walk.keep_grad(t, <Tensor>x)
                    q.grads[t._out_index] = _acc(q.grads[t._out_index], x)
                q.deps -= 1
                if q.deps == 0:
                    _push(walk, q)


cdef list run_backward(tuple outputs, list grads, bint retain_graph, bint create_graph,
                       tuple inputs, bint allow_unused):
    """Backpropagate grads from outputs; with `inputs`, return their gradients instead of
    accumulating into leaves' ``.grad``."""
    global _walks
    cdef int64_t start = now_ns() if _profiling[0] else 0   # the profiler's hook
    cdef _Walk walk = _Walk.__new__(_Walk) if inputs is None \
        else _GradWalk.__new__(_GradWalk)
    walk.pending, walk.stack = {}, []
    walk.create_graph, walk.retain_graph = create_graph, retain_graph
    if _leaf_hooks and inputs is None:
        walk.buffered = True
        if not _walks:
            walk.leaf_edges = {}
    if inputs is not None:
        (<_GradWalk>walk).find_nodes(outputs, inputs)
    _walks += 1
    cdef int mode = swap_mode_override(0)     # gradient rules compute, whatever the mode
    cdef bint prev = swap_grad_enabled(create_graph)
    try:
        _walk(walk, outputs, grads)
    finally:
        swap_grad_enabled(prev)
        swap_mode_override(mode)
        _walks -= 1
        if start:
            record("backward" if inputs is None else "grad", EVENT_BACKWARD, start, outputs)
    if inputs is not None:
        return (<_GradWalk>walk).result(inputs, allow_unused)
    if _end_hooks and not _walks:
        for hook in tuple(_end_hooks.values()):
            hook()
    return None


set_backward_walk(run_backward)
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