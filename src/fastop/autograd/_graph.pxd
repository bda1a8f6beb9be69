# The autograd graph's node and the recording/backward entry points, cimported by the
# eager layer (fastop._tensor, fastop.autograd._eager, fastop.autograd._py_layer).
# Functions take `object` where a Tensor goes: fastop._tensor cimports this file.
from fastop._core.storage cimport DenseTensor
from fastop.ops._dispatch cimport CallPlan


cdef class Node:
    cdef tuple next               # per input slot: the input Tensor if it takes a gradient, else None
    cdef list buffer              # output gradients gathered during a backward walk
    cdef Py_ssize_t n_out
    cdef Py_ssize_t deps          # edges from not-yet-run nodes into this one
    cdef Py_ssize_t epoch         # the walk that last visited this node
    cdef bint released            # saved tensors freed by a backward without retain_graph

    cdef list run(self, list grads, bint create_graph)
    cdef void release(self)
    cdef str label(self)
    cdef object origin(self)      # what it is the gradient of (an OpDef, a PyLayer class)


cdef tuple record_op(CallPlan plan, tuple inputs, tuple outputs, dict attrs)
cdef list run_backward(tuple outputs, list grads, bint retain_graph, bint create_graph,
                       tuple inputs, bint allow_unused)

# shared with PyLayer nodes
cdef bint is_float(DenseTensor t) noexcept
cdef object zeros_like_meta(tuple meta)
cdef tuple meta_of(object t)
cdef bint grad_fits(object g, object x)
cdef object check_grad(object g, object x, str who, object what)
cdef unsigned long long versions(tuple saved, unsigned long long mask)
cdef object modified_error(Node node, unsigned long long now, unsigned long long then)
cdef object released_error(Node node)
cdef unsigned long long ALL_SAVED

# saved_tensors_hooks (per thread): the innermost (pack, unpack) or None; packing and
# unpacking the values a node saves
cdef tuple saved_hooks()
cdef tuple pack_saved(tuple values, object pack_hook)
cdef tuple unpack_saved(tuple packed, object unpack_hook)
