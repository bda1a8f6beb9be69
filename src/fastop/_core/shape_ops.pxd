# View kernels: shape ops whose output is a view of their first input (no data moves).
# The static executor reads `fn` into its plan; eager calls go through ViewKernel.__call__.
from fastop._core.storage cimport fastop_view, fastop_attrs

# Set `out` (data pointer into ins[0]'s memory, dtype, ndim, shape, strides, size) from
# the input views; return K_OK or a K_ERR_* code (fastop._core.kernel).
ctypedef int (*view_fn)(fastop_view** ins, int n_in, fastop_view* out,
                        const fastop_attrs* attrs) noexcept nogil


cdef class ViewKernel:
    cdef readonly str name
    cdef readonly tuple input_names
    cdef view_fn fn
    cdef object packer                    # attrs dict -> list of ints; None: no attrs

    cdef int pack(self, dict attrs, fastop_attrs* out) except -1
