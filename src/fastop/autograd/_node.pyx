# cython: freethreading_compatible = False
"""The autograd graph's node base class and the checks all node kinds share.

A :class:`Node` is a recorded op: ``next`` holds, per input, the input Tensor when it
takes a gradient (else None), and ``run`` turns its outputs' gradients into its inputs'.
Its kinds: ``OpNode`` (a registry op, fastop.autograd._graph) and PyLayer's node
(fastop.autograd._py_layer). A node holds nothing about a backward walk in progress
(that is the walk's, fastop.autograd._backward). Nothing here needs the Tensor class, so
fastop._tensor cimports Node from this module without a cycle.
"""
from fastop._core.storage cimport (DenseTensor, FASTOP_FLOAT32, FASTOP_FLOAT64,
                                   FASTOP_FLOAT16, memory_root)

__all__ = ["Node"]


cdef bint is_float(DenseTensor t) noexcept:
    return t.view.dtype == FASTOP_FLOAT32 or t.view.dtype == FASTOP_FLOAT64 \
        or t.view.dtype == FASTOP_FLOAT16

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


cdef object released_error(Node node):
    return RuntimeError(
        f"backward through {node.label()} a second time: its saved tensors were freed "
        f"by the first backward; pass retain_graph=True to the first backward() (or "
        f"fastop.grad) to backward through the graph again")

