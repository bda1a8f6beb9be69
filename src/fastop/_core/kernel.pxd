# The kernel ABI: how a Cython kernel is described so that eager dispatch, the
# static executor and the profiler can call it without Python in the loop.
from libc.stddef cimport ptrdiff_t
from fastop._core.storage cimport (fastop_view, fastop_attrs, DenseTensor, FASTOP_NUM_DTYPES,
                                   FASTOP_UINT8, FASTOP_INT8, FASTOP_INT16)

# Status codes returned by infer/kernel functions (0 = ok). CKernel turns them into
# exceptions that name the op, its inputs, their shapes and dtypes.
cdef enum:
    K_OK = 0
    K_ERR_BROADCAST = 1     # input shapes do not broadcast
    K_ERR_DTYPE = 2         # inputs' dtypes differ / dtype not accepted
    K_ERR_ATTR = 3          # an attribute is invalid for these inputs (e.g. axis)
    K_ERR_SHAPE = 4         # shapes incompatible in an op-specific way (matmul inner dims)
    K_ERR_VALUE = 5         # a value is out of range (e.g. a label >= n_classes)
    K_ERR_MEMORY = 6
    K_ERR_LAYOUT = 7        # a view kernel cannot view this layout of input 0 (a reshape
                            # of non-contiguous data): the caller passes a contiguous copy

cdef inline int normalize_axis(ptrdiff_t axis, int ndim) noexcept nogil:
    """`axis` in [-ndim, ndim) as a non-negative axis; -1 when it is out of range."""
    if axis < 0:
        axis += ndim
    return <int>axis if 0 <= axis < ndim else -1

# infer: fill out[i].dtype, .ndim, .shape from the inputs (data untouched). A dim of
# -1 means "unknown" (static graphs before a feed); infer propagates it.
ctypedef int (*infer_fn)(fastop_view** ins, int n_in, fastop_view* outs, int n_out,
                         const fastop_attrs* attrs) noexcept nogil
# kernel: compute outs from ins; views are already validated by infer and allocated.
# A *view kernel* (CKernel.is_view) writes no data: outs[0] arrives with the inferred
# dtype/ndim/shape and the kernel sets its data pointer and strides into ins[0]'s memory.
ctypedef int (*kernel_fn)(fastop_view** ins, int n_in, fastop_view** outs, int n_out,
                          const fastop_attrs* attrs) noexcept nogil


cdef enum:
    MAX_OPERANDS = 16                     # inputs, and outputs, of one kernel


cdef class CKernel:
    cdef readonly str name
    cdef readonly tuple input_names
    cdef readonly tuple output_names
    cdef readonly tuple attr_names
    cdef infer_fn infer
    cdef kernel_fn fns[FASTOP_NUM_DTYPES]
    cdef readonly int dispatch_input      # whose dtype selects fns[...]
    cdef readonly Py_ssize_t parallel_grain  # release the GIL at this many elements
    cdef readonly bint inplace_safe       # out[i] depends on the inputs' element i alone:
                                          # an output may be any input (same elements)
    cdef signed char update_of[MAX_OPERANDS]  # update kernels: the input output j
                                          # overwrites, the one input it may be (-1: none)
    cdef object packer                    # attrs dict -> (ints, floats); None: no attrs
    cdef fastop_attrs defaults            # the packer's result for no attributes given
    cdef bint defaults_packed             # (once packed, by the first such call)
    cdef readonly dict reasons            # status -> what it means for this kernel
                                          # (None, or a status not in it: _REASONS)
    cdef readonly bint is_view            # the output views input 0's memory (see above)
    cdef readonly bint view_readonly      # ... read-only (a broadcast: stride 0)

    cdef int pack(self, dict attrs, fastop_attrs* out) except -1
    cdef kernel_fn resolve(self, int dtype) except NULL
    cdef int infer_views(self, fastop_view** ins, int n_in, fastop_view* outs,
                         const fastop_attrs* attrs, dict given=*) except -1
    cdef tuple run(self, tuple inputs, object out, const fastop_attrs* attrs, type out_cls,
                   dict given=*)
    cdef bint must_stage(self, fastop_view** ins, int n_in, const fastop_view* out,
                         int out_index) noexcept nogil
    cdef object _call_into(self, tuple inputs, DenseTensor out)
    cdef tuple _run_view(self, fastop_view** ins, int n_in, fastop_view* meta, tuple inputs,
                         const fastop_attrs* attrs, type out_cls, dict given)


cdef CKernel make_kernel(str name, tuple input_names, tuple output_names, infer_fn infer,
                         kernel_fn f_bool, kernel_fn f_i32, kernel_fn f_i64,
                         kernel_fn f_f32, kernel_fn f_f64,
                         int dispatch_input=*, tuple attr_names=*, object packer=*,
                         Py_ssize_t parallel_grain=*, bint inplace_safe=*,
                         tuple updates=*, bint is_view=*, bint view_readonly=*)

# The narrow integer dtypes (uint8, int8, int16) run `fn`: for a kernel whose int32/int64
# function handles every integer dtype (make_kernel takes bool, int32, int64, float32 and
# float64 functions).
cdef inline void accept_narrow_ints(CKernel k, kernel_fn fn) noexcept:
    k.fns[FASTOP_UINT8] = fn
    k.fns[FASTOP_INT8] = fn
    k.fns[FASTOP_INT16] = fn

# A view's owner: the tensor whose memory `src` views (src itself when it owns it).
cdef object view_owner(DenseTensor src)

# A Python kernel bound to one call's attributes and its outputs' expected metas: calls the
# function on numpy views of DenseTensor inputs and wraps its results through
# wrap_results. The static executor keeps one per Python op; eager dispatch keeps a few per
# op, keyed by the inputs' dtypes and shapes (`matches`).
cdef class PythonKernel:
    cdef readonly str op_name
    cdef readonly object fn
    cdef readonly dict attrs
    cdef readonly object mismatch         # callable(result) -> values (wrap_results)
    cdef readonly list metas              # the expected output metas as given
    cdef int n_out
    cdef fastop_view* out_metas
    cdef int n_in                         # -1: no input signature (not memoized)
    cdef fastop_view* in_sig
    cdef tuple call(self, object inputs, type out_cls)
    cdef tuple call_arrays(self, list arrays, type out_cls)
    cdef bint matches(self, tuple inputs, dict attrs) noexcept


# The one result checker of Python kernels (eager calls, the executor, py_func): `result`
# (an array, or a tuple/list of `n_out`) checked against `metas` (dtype, ndim and the
# known dims: -1 unknown) and wrapped, zero-copy, as `out_cls` tensors. A result that does
# not fit goes to `mismatch(result)`, which raises the op's error or returns the values to
# take as they are (py_func's warn-then-strict policy).
cdef tuple wrap_results(object result, int n_out, const fastop_view* metas, type out_cls,
                        object mismatch)

cdef int get_num_threads() noexcept nogil
cdef bint use_threads(Py_ssize_t work) noexcept nogil
