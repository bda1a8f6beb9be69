# The one dispatch entry of every op call, the per-op call plan, the execution mode and
# the scalar rule. cimported by the eager layer (fastop.autograd._eager), which installs
# the eager dispatcher here.
from fastop._core.storage cimport DenseTensor, fastop_attrs
from fastop._core.kernel cimport CKernel, PythonKernel


cdef class AttrsMemo:
    """The keyword attributes of one of an op's recent calls, bound, checked and packed;
    `older` is the call remembered before it (a short chain, newest first)."""
    cdef dict kwargs
    cdef dict attrs
    cdef fastop_attrs packed
    cdef bint packed_ok
    cdef AttrsMemo older


cdef class CallPlan:
    """What an op's calls need that depends only on the op: built at its first call,
    rebuilt when the registry changes (registry_version)."""
    cdef readonly object op
    cdef unsigned long long version
    cdef readonly Py_ssize_t n_in
    cdef readonly Py_ssize_t n_out
    cdef readonly bint fixed            # no variadic inputs
    cdef readonly bint simple           # no optional or variadic inputs
    cdef readonly dict default_attrs    # the attributes of a call giving none (None: one
                                        # is required)
    cdef fastop_attrs packed_defaults   # default_attrs packed for `ck`
    cdef readonly bint defaults_packed
    cdef readonly CKernel ck            # the op's Cython kernel (None: Python kernels)
    cdef readonly tuple kernels         # per dtype code: a CKernel, a Python kernel, None
    cdef readonly int dispatch_input    # the input whose dtype selects the kernel
    cdef readonly tuple in_group        # per input: takes part in the scalar rule
    cdef unsigned long long group_mask  # the same as bits (inputs beyond 64: in the group)
    cdef unsigned long long variadic_mask   # bit i: input i is variadic
    cdef readonly bint int_to_float     # integer/bool inputs compute in float32 (divide)
    cdef readonly bint mixes_floats     # float32 and float64 tensors compute in float64
    cdef AttrsMemo memo                 # the last keyword calls, newest first (eager)
    cdef list metas                     # PythonKernel entries by input signature (eager)
    # the gradient rule, prepared for recording (see prepare_rule)
    cdef readonly object rule
    cdef tuple needs                    # per needed value: (is_output, index)
    cdef tuple diff                     # per declared input: takes gradients
    cdef unsigned long long diff_mask   # the same as bits (inputs beyond 64: see diff)
    cdef unsigned long long save_mask   # bit k: the rule needs output k
    cdef tuple reads_masks              # per input: bit k set when its gradient reads needs[k]
    cdef bint check_versions            # some gradient reads saved values' contents
    cdef readonly CallPlan backward     # a kernel rule's backward op's plan (else None)
    cdef tuple backward_args            # per backward input: (source, index) (see prepare_rule)

    cdef PythonKernel python_kernel(self, object fn, tuple inputs, dict attrs)
    cdef int prepare_rule(self) except -1


cdef class OpBase:
    """The base of OpDef: calling an op is this class's __call__ (one C entry)."""
    cdef CallPlan _plan


ctypedef object (*eager_dispatch_fn)(OpBase op, tuple args, dict kwargs)

cdef class InputMode:
    """What a mode makes of an op's inputs (convert_inputs decides what they become)."""
    cpdef object own(self, object op, object value)
    cpdef object wrap(self, DenseTensor value)
    cpdef object scalar(self, object value, int dtype)
    cpdef object cast(self, object value, int dtype)


cdef CallPlan plan_of(OpBase op)
# The inputs as `mode`'s tensors by the one input rule (scalar rule included).
cpdef tuple convert_inputs(CallPlan plan, tuple inputs, InputMode mode)
# Run the op's kernel for its inputs' dtype: `inputs` per declared input a DenseTensor, a
# list of them (variadic) or None; `packed` the attrs packed for its CKernel (NULL: pack
# them); outputs as `out_cls` tensors (into `out` for a CKernel when given).
cdef tuple run_kernel(CallPlan plan, tuple inputs, dict attrs, const fastop_attrs* packed,
                      object out, type out_cls)
cdef object dispatch(OpBase op, tuple args, dict kwargs)
cdef object call_eager(OpBase op, tuple args, dict kwargs)      # whatever the mode
cdef int swap_mode_override(int mode) noexcept   # -1 none, 0 eager, 1 static; the previous
cdef void set_eager_dispatch(eager_dispatch_fn fn) noexcept
cdef bint static_mode() noexcept
