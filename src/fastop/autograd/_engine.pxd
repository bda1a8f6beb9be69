# The autograd engine's graph node and per-op cache, shared with fastop._tensor.
from fastop._core.storage cimport fastop_attrs
from fastop._core.kernel cimport CKernel


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


cdef class OpInfo:
    cdef readonly object op       # the OpDef
    cdef CKernel ck               # its Cython kernel (None: Python kernels, or variadic)
    cdef dict default_attrs       # attributes when none are given (None: one is required)
    cdef fastop_attrs packed      # default_attrs packed for `ck`
    cdef bint defaults_packed     # `packed` is valid (packing the defaults succeeded)
    cdef dict last_kwargs         # the keyword attributes of the last call...
    cdef dict last_attrs          # ...bound and checked...
    cdef fastop_attrs last_packed # ...and packed: reused when a call repeats them
    cdef Py_ssize_t n_in
    cdef bint simple              # no optional or variadic inputs
    cdef bint fixed               # no variadic inputs (one tensor or None per input)
    cdef object rule              # the grad rule `needs`/`diff` were computed for
    cdef tuple needs              # per needed value: (is_output, index)
    cdef tuple diff               # per declared input: takes gradients
    cdef unsigned long long diff_mask   # the same as bits (inputs beyond 64: see diff)
    cdef unsigned long long save_mask   # bit k: the rule needs output k (saved, so the
                                        # user gets a view of it)
    cdef tuple reads_masks        # per declared input: bit k set when its gradient reads
                                  # the value of needs[k] (GradRule.reads)
    cdef bint check_versions      # some gradient reads saved values (not only shapes)
    cdef int ck_mask              # bit d set: `ck` computes dtype code d


cdef bint grad_enabled() noexcept
cdef OpInfo op_info(object op)
cdef tuple record_op(OpInfo info, tuple inputs, tuple outputs, dict attrs)
cdef object dispatch_eager(object op, tuple args, dict kwargs)
cdef list run_backward(tuple outputs, list grads, bint retain_graph, bint create_graph,
                       tuple inputs, bint allow_unused)
