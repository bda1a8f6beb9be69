# The autograd graph's node base class and the checks every node kind shares (saved
# versions, freed saved tensors). It needs no Tensor, so fastop._tensor cimports Node
# from here for Tensor._node, and the recording (_graph), the walk (_backward) and
# PyLayer (_py_layer) build on it.
from fastop._core.storage cimport DenseTensor


cdef class Node:
    cdef tuple next               # per input slot: the input Tensor if it takes a gradient, else None
    cdef Py_ssize_t n_out
    cdef bint released            # saved tensors freed by a backward without retain_graph

    cdef list run(self, list grads, bint create_graph)
    cdef void release(self)
    cdef str label(self)
    cdef object origin(self)      # what it is the gradient of (an OpDef, a PyLayer class)


cdef bint is_float(DenseTensor t) noexcept
cdef unsigned long long versions(tuple saved, unsigned long long mask)
cdef object modified_error(Node node, unsigned long long now, unsigned long long then)
cdef object released_error(Node node)
cdef unsigned long long ALL_SAVED
