# The eager Tensor: DenseTensor storage plus autograd state. cimported by the eager
# layer's modules (fastop.autograd._graph, _backward, _eager, _py_layer), which build and
# walk the graph and dispatch ops.
from libc.stddef cimport ptrdiff_t
from fastop._core.storage cimport DenseTensor
from fastop.autograd._node cimport Node


cdef class Tensor(DenseTensor):
    cdef bint requires_grad       # the negation of `stop_gradient` (zero-init: False)
    cdef object _grad             # accumulated gradient (a Tensor) or None
    cdef bint _grad_zeroed        # clear_grad() left zeros, not yet made (see clear_grad)
    cdef readonly Py_ssize_t _grad_version  # +1 per gradient given (backward, .grad =)
    cdef Node _node               # the graph node that produced this tensor (None: a leaf)
    cdef int _out_index           # which output of `_node` this tensor is
    cdef bint _retains_grad       # retain_grads(): a non-leaf keeps its .grad after backward
                                  # (beside _out_index: fills its padding, no size change)
    cdef public object name


cdef Tensor wrap_dense(DenseTensor d)
cdef Tensor as_tensor(object value, int dtype)
cdef Tensor full_tensor(int ndim, const ptrdiff_t* shape, int dtype, double value)
cdef Tensor add_tensors(Tensor a, Tensor b)
cdef Tensor view_of(DenseTensor src)
cdef Tensor scalar_tensor(object value, int dtype)


# The backward walk (fastop.autograd._backward.run_backward), installed by that module when
# it loads: Tensor.backward calls it through this pointer, so this module needs no cimport
# of the walk (which cimports Tensor).
ctypedef list (*backward_walk_fn)(tuple outputs, list grads, bint retain_graph,
                                  bint create_graph, tuple inputs, bint allow_unused)
cdef void set_backward_walk(backward_walk_fn fn) noexcept
