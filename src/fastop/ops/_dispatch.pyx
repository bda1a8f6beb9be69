# cython: freethreading_compatible = False
"""The one dispatch entry: every op call — Tensor operators and methods, ``fastop.<fn>``,
``fastop.ops.<ns>.<op>``, gradient rules, optimizers, indexing, py_func — is
``OpDef.__call__``, i.e. :func:`dispatch`, which hands the call to the mode the calling
thread is in: eager (compute now; installed by :mod:`fastop.autograd._eager` as a C
function) or static (append an operator to the current Program; installed by
:mod:`fastop.static.framework`).

The mode is per thread: ``enable_static()``/``disable_static()`` set the process-wide
default, and ``mode_guard(mode)`` overrides it for the calling thread only (a Variable's
operators use it), so building a Program on one thread leaves another thread's eager
calls eager.

Per-op facts every call needs are computed once, in the op's :class:`CallPlan`: the
default attributes (packed for its Cython kernel), a kernel per dtype code, which inputs
take part in the scalar rule, and the gradient rule's bookkeeping. A plan is rebuilt when
the registry changes (``bump_registry_version``, called by the registry and by an OpDef's
decorators).

Two decisions are written here once for every caller: which kernel runs
(:func:`_kernel_dtype`: eager calls, the static executor, eager backward, ``opcheck``
and the profiler), and what an op's inputs become (:func:`convert_inputs`: eager and
static calls, each mode making its own values through an :class:`InputMode`).

The scalar rule (:func:`group_dtype`), one for every mode: the inputs of an op's dtype
group (all inputs, unless the op names some: ``where``'s condition, ``gather``'s index
are outside) compute in one dtype. A float scalar meeting an integer or bool tensor makes
the group float32; an integer scalar meeting a bool tensor makes it int64; otherwise a
scalar takes the group's tensors' dtype (float32 and float64 tensors together compute in
float64 in elementwise ops, as PaddlePaddle's do). With no tensor in the group, scalars
take their own default dtype (float32, int64, bool).
"""
from cpython.float cimport PyFloat_Check, PyFloat_CheckExact
from cpython.long cimport (PyLong_Check, PyLong_CheckExact, PyLong_AsLongLongAndOverflow)
from fastop._core.storage cimport (DenseTensor, DType, fastop_attrs, fastop_view,
                                   FASTOP_BOOL, FASTOP_UINT8, FASTOP_INT8, FASTOP_INT16,
                                   FASTOP_INT32, FASTOP_INT64, FASTOP_FLOAT32,
                                   FASTOP_FLOAT64, FASTOP_NUM_COMPUTE_DTYPES,
                                   FASTOP_NUM_DTYPES, as_dense, check_initialised,
                                   dtype_code)
from fastop._core.kernel cimport CKernel, PythonKernel, wrap_results

import numpy as np

__all__ = ["OpBase", "CallPlan", "current_mode", "set_mode", "mode_guard",
           "set_static_dispatcher", "bump_registry_version", "registry_version",
           "InputMode", "convert_inputs", "kernel_dtype", "invoke", "same_shape"]

from fastop._core.storage import DTYPE_NAMES as _DTYPE_NAMES


# --------------------------------------------------------------------------- mode

cdef extern from *:
    """
    /* The calling thread's mode override: -1 none (the process default), 0 eager,
       1 static. */
    static _Thread_local int fastop_mode_override = -1;
    """
    int _mode_override "fastop_mode_override"

cdef bint _default_static = False


cdef bint static_mode() noexcept:
    if _mode_override >= 0:
        return _mode_override == 1
    return _default_static


def current_mode() -> str:
    """'eager' or 'static': the calling thread's mode."""
    return "static" if static_mode() else "eager"


def set_mode(str mode) -> None:
    """Set the process-wide default mode (``enable_static``/``disable_static``)."""
    global _default_static
    _default_static = _mode_code(mode) == 1


cdef int _mode_code(str mode) except -1:
    if mode == "eager":
        return 0
    if mode == "static":
        return 1
    raise ValueError(f"mode must be 'eager' or 'static', got {mode!r}")


cdef class mode_guard:
    """``with mode_guard("static"): ...`` runs the block in that mode on this thread only
    (restoring the thread's previous override on exit)."""
    cdef int mode
    cdef int saved

    def __init__(self, str mode):
        self.mode = _mode_code(mode)

    def __enter__(self):
        global _mode_override
        self.saved = _mode_override
        _mode_override = self.mode
        return self

    def __exit__(self, *exc_info):
        global _mode_override
        _mode_override = self.saved
        return False


# --------------------------------------------------------------------------- dispatch

cdef eager_dispatch_fn _eager = NULL
_static_dispatcher = None


cdef void set_eager_dispatch(eager_dispatch_fn fn) noexcept:
    global _eager
    _eager = fn


def set_static_dispatcher(fn) -> None:
    """Install the static-mode dispatcher: ``fn(op, args, kwargs)`` appends an operator."""
    global _static_dispatcher
    _static_dispatcher = fn


cdef int swap_mode_override(int mode) noexcept:
    global _mode_override
    cdef int prev = _mode_override
    _mode_override = mode
    return prev


cdef object call_eager(OpBase op, tuple args, dict kwargs):
    return _eager(op, args, kwargs)


cdef object dispatch(OpBase op, tuple args, dict kwargs):
    if static_mode():
        if _static_dispatcher is None:
            raise RuntimeError(f"{op.name}: no static dispatcher (import fastop installs it)")
        return _static_dispatcher(op, args, {} if kwargs is None else kwargs)
    if _eager is NULL:
        raise RuntimeError(f"{op.name}: no eager dispatcher (import fastop installs it)")
    return _eager(op, args, kwargs)


cdef class OpBase:
    """Calling an op runs it in the calling thread's mode: eager computes and returns
    Tensors; static appends an operator and returns Variables."""

    def __call__(self, *args, **kwargs):
        return dispatch(self, args, kwargs)

    @property
    def plan(self) -> CallPlan:
        """The op's call plan (built now if stale)."""
        return plan_of(self)


# --------------------------------------------------------------------------- plans

cdef unsigned long long _registry_version = 0


def bump_registry_version() -> None:
    """Invalidate every call plan (the registry or an op definition changed)."""
    global _registry_version
    _registry_version += 1


def registry_version() -> int:
    return _registry_version


cdef CallPlan plan_of(OpBase op):
    cdef CallPlan plan = op._plan
    if plan is not None and plan.version == _registry_version:
        return plan
    plan = CallPlan(op)
    op._plan = plan
    return plan


cdef class AttrsMemo:
    pass


cdef class CallPlan:
    """See the module docstring. Read-only from Python (for tests and tools)."""

    def __cinit__(self, op):
        cdef int code
        self.op = op
        self.version = _registry_version
        self.n_in = len(op.inputs)
        # -1: output tensors vary per call (a backward op's variadic or optional
        # gradients): a call returns them as a tuple, even one
        self.n_out = len(op.outputs) if op.fixed_outputs else -1
        self.fixed = not any(a.variadic for a in op.inputs)
        self.simple = not any(a.optional or a.variadic for a in op.inputs)
        try:
            self.default_attrs = op.check_attrs({})
        except TypeError:
            self.default_attrs = None          # an attribute is required
        self.metas = []
        star = op.kernels.get("*")
        self.ck = star if isinstance(star, CKernel) else None
        # the input a Cython kernel reads its dtype from (where's x), else the first
        self.dispatch_input = next((k.dispatch_input for k in (star, *op.kernels.values())
                                    if isinstance(k, CKernel)), 0)
        kernels = []
        for code in range(FASTOP_NUM_DTYPES):
            kernel = op.kernels.get(_DTYPE_NAMES[code])
            if kernel is None and star is not None and (
                    self.ck is None or _DTYPE_NAMES[code] in self.ck.dtypes):
                kernel = star
            if isinstance(kernel, CKernel) and not (<CKernel>kernel).fns[code]:
                kernel = None
            kernels.append(kernel)
        self.kernels = tuple(kernels)
        if self.ck is not None and self.default_attrs is not None and self.fixed:
            try:
                self.ck.pack(self.default_attrs, &self.packed_defaults)
                self.defaults_packed = True
            except Exception:                  # reported when a call packs them
                pass
        group = op.promotes
        self.in_group = tuple(group is None or a.name in group for a in op.inputs)
        self.group_mask = ~0ULL
        self.variadic_mask = 0
        for k, a in enumerate(op.inputs[:64]):
            if not self.in_group[k]:
                self.group_mask &= ~(1ULL << k)
            if a.variadic:
                self.variadic_mask |= 1ULL << k
        self.int_to_float = op.int_to_float
        # elementwise kernels (out[i] from the inputs' element i) promote float32 with
        # float64 tensors, as PaddlePaddle's elementwise ops do, and so do the inputs an
        # op names in promotes= ("compute in one dtype with each other"); other ops take
        # the dtypes they are given (a conv of float32 x and float64 weight is an error)
        self.mixes_floats = (self.ck is not None and self.ck.inplace_safe) or \
            group is not None

    def __repr__(self):
        return f"<CallPlan of {self.op.name}>"

    cdef PythonKernel python_kernel(self, object fn, tuple inputs, dict attrs):
        """The Python kernel `fn` bound to `attrs` with its outputs' metas for `inputs`
        (DenseTensors of a fixed-arity op): memoized for the last few input signatures
        (the meta function runs once per signature). None for an op without a meta
        function on an input signature it has not run on (see _learning_call)."""
        cdef PythonKernel entry
        for entry in self.metas:
            if entry.matches(inputs, attrs):
                return entry
        entry = self.op.python_kernel(fn, inputs, attrs)
        if entry is not None:
            _memoize(self, entry, attrs)
        return entry

    cdef int prepare_rule(self) except -1:
        """Index the gradient rule's needs and the inputs it differentiates (once per
        rule object)."""
        op = self.op
        rule = op.grad_rule
        in_names = [a.name for a in op.inputs]
        out_names = [a.name for a in op.outputs]
        self.needs = tuple((True, out_names.index(n)) if n in out_names else
                           (False, in_names.index(n)) for n in rule.needs)
        diff = set(op.differentiable_inputs)
        self.diff = tuple(n in diff for n in in_names)
        self.diff_mask = sum(1 << i for i, d in enumerate(self.diff) if d and i < 64)
        self.save_mask = sum(1 << k for k, n in enumerate(out_names)
                             if n in rule.needs and k < 64)
        if rule.reads is None:               # every gradient reads every needed value
            self.reads_masks = tuple(_reads_mask(rule.needs, rule.needs) if d else 0
                                     for d in self.diff)
        else:
            self.reads_masks = tuple(_reads_mask(rule.needs, rule.reads.get(x, ()))
                                     for x in in_names)
        self.check_versions = any(self.reads_masks)
        self.backward = None
        if rule.backward_op is not None:
            self.backward = plan_of(<OpBase>rule.backward_op)
            self.backward_args = tuple(rule.backward_args)
        self.rule = rule
        return 0

    def choose(self, inputs) -> tuple:
        """The kernel for `inputs` (see _kernel_dtype) and its dtype code: what a call
        of the op on them runs, in any mode."""
        cdef int code = _kernel_dtype(self, tuple(inputs))
        kernel = self.kernels[code]
        if kernel is None:
            raise TypeError(self.op.no_kernel_message(_DTYPE_NAMES[code],
                                                      _choosing_input(self, tuple(inputs))))
        return kernel, code

    # read-only views for tests and tools
    @property
    def needs(self):
        return self.needs

    @property
    def memoized(self) -> int:
        """How many input signatures have their metas memoized."""
        return len(self.metas)


cdef int _input_dtype(object x) except -2:
    """One input's dtype code: a tensor's; a variadic input's (a list) first tensor's;
    a DType's own; anything else's with a dtype (a static Variable, a TensorMeta, a
    numpy array) that dtype's; -1 for None, an empty list or a value without a dtype."""
    if isinstance(x, DenseTensor):
        return (<DenseTensor>x).view.dtype
    if x is None:
        return -1
    if isinstance(x, (list, tuple)):
        return _input_dtype(x[0]) if len(x) else -1
    if isinstance(x, DType):
        return (<DType>x).code
    dtype = getattr(x, "dtype", None)
    return -1 if dtype is None else dtype_code(dtype)


cdef inline int _kernel_dtype(CallPlan plan, tuple inputs) except -2:
    """The dtype code that chooses the op's kernel — for the eager call, the static
    program and executor, the backward and the checks alike: the dispatch input's dtype
    (a variadic input's first tensor's); when that input is absent, the first present
    input's in declared order; float32 for a call without tensor inputs (a creation
    op). `inputs`: per declared input a tensor, a static Variable, a TensorMeta, an
    array or a DType, a list of them (variadic) or None."""
    if plan.dispatch_input < len(inputs):
        x = inputs[plan.dispatch_input]
        if isinstance(x, DenseTensor):             # the common case, in C
            return (<DenseTensor>x).view.dtype
    return _kernel_dtype_otherwise(plan, inputs)


cdef int _kernel_dtype_otherwise(CallPlan plan, tuple inputs) except -2:
    """_kernel_dtype when the dispatch input is not a tensor."""
    cdef int code
    cdef Py_ssize_t i, n = len(inputs)
    if plan.dispatch_input < n:
        code = _input_dtype(inputs[plan.dispatch_input])
        if code >= 0:
            return code
    for i in range(n):
        code = _input_dtype(inputs[i])
        if code >= 0:
            return code
    return FASTOP_FLOAT32


cdef object _choosing_input(CallPlan plan, tuple inputs):
    """The name of the input whose dtype _kernel_dtype chose the kernel by (None when no
    input has a dtype): for the error of a dtype without a kernel."""
    cdef Py_ssize_t i, n = min(len(inputs), len(plan.op.inputs))
    if plan.dispatch_input < n and _input_dtype(inputs[plan.dispatch_input]) >= 0:
        return plan.op.inputs[plan.dispatch_input].name
    for i in range(n):
        if _input_dtype(inputs[i]) >= 0:
            return plan.op.inputs[i].name
    return None


def kernel_dtype(CallPlan plan, inputs) -> int:
    """The dtype code that chooses the op's kernel for `inputs` (see _kernel_dtype), for
    Python callers (the profiler, ``fastop.testing``)."""
    return _kernel_dtype(plan, tuple(inputs))


cdef tuple run_kernel(CallPlan plan, tuple inputs, dict attrs, const fastop_attrs* packed,
                      object out, type out_cls):
    cdef int code = _kernel_dtype(plan, inputs)
    cdef fastop_attrs own
    cdef PythonKernel entry
    kernel = plan.kernels[code]
    if kernel is None:
        raise TypeError(plan.op.no_kernel_message(_DTYPE_NAMES[code],
                                                  _choosing_input(plan, inputs)))
    if isinstance(kernel, CKernel):
        if packed == NULL:
            (<CKernel>kernel).pack(attrs, &own)
            packed = &own
        return (<CKernel>kernel).run(inputs, out, packed, out_cls, attrs)
    if out is not None:
        raise TypeError(f"{plan.op.name}: out= is taken by ops with a Cython kernel; this "
                        f"op's kernel for {_DTYPE_NAMES[code]} is a Python function")
    entry = plan.python_kernel(kernel, inputs, attrs)
    if entry is None:
        return _learning_call(plan, kernel, inputs, attrs, out_cls)
    return entry.call(inputs, out_cls)


cdef inline void _memoize(CallPlan plan, PythonKernel entry, dict attrs):
    """Keep `entry` for the plan's next calls (fixed-arity ops, the last 4 signatures)."""
    if plan.fixed and attrs is not None:
        plan.metas = [entry] + plan.metas[:3]      # a new list: other threads may read


cdef tuple _learning_call(CallPlan plan, object fn, tuple inputs, dict attrs, type out_cls):
    """A call of an op without a meta function on an input signature it has not run on:
    the op runs the kernel once and learns its outputs' metas from the results
    (``OpDef.first_call``); the bound kernel is memoized as a meta function's would be,
    and this call's results go through the one result checker."""
    cdef PythonKernel entry
    entry, result = plan.op.first_call(fn, inputs, attrs)
    _memoize(plan, entry, attrs)
    return wrap_results(result, entry.n_out, entry.out_metas, out_cls, entry.mismatch)


def invoke(op, inputs, dict attrs, type out_cls=DenseTensor) -> tuple:
    """Run `op`'s kernel on DenseTensors (no autograd, no mode): per declared input a
    tensor, a list of them (variadic) or None; the outputs as `out_cls` tensors. `attrs`
    must be bound and checked (``op.check_attrs``)."""
    cdef CallPlan plan = plan_of(<OpBase>op)
    return run_kernel(plan, tuple(inputs), attrs,
                      &plan.packed_defaults if plan.defaults_packed
                      and attrs is plan.default_attrs else NULL, None, out_cls)


cdef unsigned long long ALL_SAVED = 0xffffffffffffffff


cdef unsigned long long _reads_mask(tuple needs, tuple reads):
    """Bit k set when `reads` names needs[k]; every bit when it names one from the 64th
    on (those entries are always checked)."""
    cdef unsigned long long mask = 0
    for k, n in enumerate(needs):
        if n in reads:
            if k >= 64:
                return ALL_SAVED
            mask |= 1ULL << k
    return mask


# --------------------------------------------------------------------------- scalar rule

# How an input takes part in the scalar rule (see group_dtype): a dtype code (>= 0) for
# a tensor or array, or one of these.
cdef enum:
    KIND_ABSENT = -1
    KIND_BOOL = -2          # a Python/numpy bool
    KIND_INT = -3           # a Python/numpy integer
    KIND_FLOAT = -4         # a Python/numpy float (or a list holding one)
    KIND_OTHER = -5         # a list of tensors (variadic), or anything else


cdef int scalar_kind(object value) noexcept:
    """KIND_BOOL/INT/FLOAT for a Python or numpy scalar, KIND_OTHER otherwise."""
    if PyFloat_Check(value):
        return KIND_FLOAT
    if value is True or value is False:
        return KIND_BOOL
    if PyLong_Check(value):
        return KIND_INT
    if isinstance(value, np.generic):
        if isinstance(value, np.floating):
            return KIND_FLOAT
        if isinstance(value, np.bool_):
            return KIND_BOOL
        if isinstance(value, np.integer):
            return KIND_INT
    return KIND_OTHER


cdef int group_dtype(CallPlan plan, const int* kinds, Py_ssize_t n,
                     bint* cast_tensors) noexcept:
    """The dtype the op's dtype group computes in, from each input's kind (a dtype code
    for a tensor, else a KIND_*); -1 when the group has neither tensors nor scalars.
    `cast_tensors` says whether the group's tensors are cast to it: not when they are of
    different kinds (an int and a float tensor: the kernel reports the mismatch); then
    the scalars take the first tensor's dtype. See the module docstring for the rule."""
    cdef int ref = -1, k, first = -1
    cdef bint has_float = False, has_int = False, has_bool = False, has_f64 = False
    cdef bint mixed = False
    cdef Py_ssize_t i
    for i in range(n):
        if i < 64 and not (plan.group_mask >> i) & 1:
            continue
        k = kinds[i]
        if k >= 0:
            if first < 0:
                first = k
            elif k != first and not (plan.mixes_floats and k >= FASTOP_FLOAT32
                                     and first >= FASTOP_FLOAT32):
                mixed = True                  # only float32/float64 mix into one dtype
            if ref < 0 or (ref == FASTOP_BOOL and k != FASTOP_BOOL):
                ref = k                       # the first tensor, a non-bool one if any
            if k == FASTOP_FLOAT64:
                has_f64 = True
        elif k == KIND_FLOAT:
            has_float = True
        elif k == KIND_INT:
            has_int = True
        elif k == KIND_BOOL:
            has_bool = True
    cast_tensors[0] = not mixed
    if mixed:
        return first
    if ref < 0:
        ref = FASTOP_FLOAT32 if has_float else FASTOP_INT64 if has_int \
            else FASTOP_BOOL if has_bool else -1
    elif ref == FASTOP_FLOAT32 and has_f64:
        ref = FASTOP_FLOAT64
    elif ref < FASTOP_FLOAT32 and has_float:
        ref = FASTOP_FLOAT32
    elif ref == FASTOP_BOOL and has_int:
        ref = FASTOP_INT64
    if plan.int_to_float and 0 <= ref < FASTOP_FLOAT32:
        ref = FASTOP_FLOAT32
    return ref


def same_shape(a, b) -> bool:
    """Whether two values (tensors, or static Variables with None for unknown dims) have
    the same shape: for gradient rules (an unbroadcast that is a no-op), in C for
    tensors."""
    cdef DenseTensor x, y
    cdef int i
    if isinstance(a, DenseTensor) and isinstance(b, DenseTensor):
        x, y = <DenseTensor>a, <DenseTensor>b
        if x.view.ndim != y.view.ndim:
            return False
        for i in range(x.view.ndim):
            if x.view.shape[i] != y.view.shape[i]:
                return False
        return True
    return list(a.shape) == list(b.shape)


# --------------------------------------------------------------------------- inputs

cdef class InputMode:
    """What a mode makes of an op's inputs. :func:`convert_inputs` decides what each input
    becomes — which values are taken, the scalar rule, a scalar's natural dtype, the
    storage-dtype cast and every error; the mode only makes the values: eager Tensors
    (:mod:`fastop.autograd._eager`) or a program's Variables
    (:mod:`fastop.static.framework`, a Python subclass)."""

    cpdef object own(self, object op, object value):
        """`value` when it is one of the mode's tensors (ready to use), else None."""
        raise NotImplementedError(f"{type(self).__name__}.own")

    cpdef object wrap(self, DenseTensor value):
        """A tensor's value as one of the mode's tensors (of its dtype)."""
        raise NotImplementedError(f"{type(self).__name__}.wrap")

    cpdef object scalar(self, object value, int dtype):
        """A Python number (one that fits `dtype`) as the mode's 0-d tensor of `dtype`."""
        raise NotImplementedError(f"{type(self).__name__}.scalar")

    cpdef object cast(self, object value, int dtype):
        """One of the mode's tensors cast to `dtype` (an op, so gradients flow)."""
        raise NotImplementedError(f"{type(self).__name__}.cast")


cdef inline int _dtype_of(object t) except -1:
    """The dtype code of a mode's tensor (a Tensor in C; a Variable through its dtype)."""
    if isinstance(t, DenseTensor):
        return (<DenseTensor>t).view.dtype
    return dtype_code(t.dtype)


cdef inline bint _takes_dtype(object value, int dtype) noexcept:
    """value is a Python float with a float tensor, or a Python int with a non-bool one:
    the scalar takes the tensor's dtype, nothing is promoted."""
    if PyFloat_CheckExact(value):
        return dtype == FASTOP_FLOAT32 or dtype == FASTOP_FLOAT64
    return PyLong_CheckExact(value) and FASTOP_BOOL < dtype < FASTOP_NUM_COMPUTE_DTYPES


cpdef tuple convert_inputs(CallPlan plan, tuple inputs, InputMode mode):
    """The op's inputs (per declared input, as bound) as `mode`'s tensors, by the one rule
    for every mode:

    - a tensor of the mode (a Tensor, a Variable of the program being built) is taken
      as it is; any other tensor, a numpy array or anything numpy reads as an array of
      bools or numbers becomes one of its dtype; a Python or numpy scalar, or a list of
      numbers, is a scalar of the scalar rule (:func:`group_dtype`), which takes its
      natural dtype outside the op's dtype group (float32, int64, bool);
    - a tensor of the storage dtype (float16) the op has no kernel for computes in
      float32, and a tensor of the dtype group is cast to the group's dtype (casts are
      ops of the mode, so gradients flow through them);
    - anything else, a list holding non-numbers, or a value that does not fit the dtype
      it computes in is a TypeError/OverflowError naming the op and the input."""
    cdef Py_ssize_t i, n = len(inputs)
    cdef int kinds[64]
    cdef bint number_list[64]
    cdef int target, k, dtype
    cdef bint cast_tensors
    op = plan.op
    if n == 2 and (plan.group_mask & 3) == 3 and not plan.int_to_float:
        # the operators' common case: a tensor and a Python number of its kind
        t = mode.own(op, inputs[0])
        dtype = _ready_dtype(t)
        if dtype >= 0 and _takes_dtype(inputs[1], dtype):
            return (t, mode.scalar(_fitted(op, 1, inputs[1], dtype), dtype))
        t = mode.own(op, inputs[1])
        dtype = _ready_dtype(t)
        if dtype >= 0 and _takes_dtype(inputs[0], dtype):
            return (mode.scalar(_fitted(op, 0, inputs[0], dtype), dtype), t)
    if n > 64:
        raise TypeError(f"{op.name}: at most 64 inputs")
    cdef list converted = list(inputs)
    for i in range(n):
        x = inputs[i]
        number_list[i] = False
        if x is None:
            kinds[i] = KIND_ABSENT
        elif (plan.variadic_mask >> i) & 1:
            converted[i] = [_tensor_input(plan, mode, i, e) for e in x]
            kinds[i] = KIND_OTHER
        else:
            kinds[i] = scalar_kind(x)
            if kinds[i] != KIND_OTHER:
                continue
            if isinstance(x, (list, tuple)):      # a Python sequence converts like the
                kinds[i] = _number_list_kind(op, i, x)     # scalars it holds
                number_list[i] = True
            else:
                converted[i] = _tensor_input(plan, mode, i, x)
                kinds[i] = _dtype_of(converted[i])
    target = group_dtype(plan, kinds, n, &cast_tensors)
    for i in range(n):
        k = kinds[i]
        if k == KIND_ABSENT or k == KIND_OTHER:
            continue
        in_group = target >= 0 and (plan.group_mask >> i) & 1
        if k >= 0:
            if in_group and cast_tensors and k != target:
                converted[i] = mode.cast(converted[i], target)
            continue
        dtype = target if in_group else _natural_dtype(k)
        if number_list[i]:
            converted[i] = mode.wrap(_number_list(op, i, inputs[i], dtype))
        else:
            converted[i] = mode.scalar(_fitted(op, i, inputs[i], dtype), dtype)
    return tuple(converted)


cdef inline int _ready_dtype(object t) except -2:
    """The dtype code of a mode's tensor the rule takes as it is (initialised, of a
    dtype ops compute in); -1 for None or any other."""
    if isinstance(t, DenseTensor):
        if ((<DenseTensor>t).view.data == NULL and (<DenseTensor>t).view.size) \
                or (<DenseTensor>t).view.dtype >= FASTOP_NUM_COMPUTE_DTYPES:
            return -1
        return (<DenseTensor>t).view.dtype
    return -1 if t is None else dtype_code(t.dtype)


cdef object _tensor_input(CallPlan plan, InputMode mode, Py_ssize_t i, object value):
    """A tensor input (or a variadic input's element) as the mode's tensor: the mode's own,
    or any other tensor or array-like wrapped; a storage dtype the op has no kernel for
    cast to float32 (which holds its values exactly)."""
    cdef DenseTensor dense
    op = plan.op
    t = mode.own(op, value)
    if t is None:
        try:
            dense = as_dense(value)
        except (TypeError, ValueError, OverflowError) as e:
            raise type(e)(f"{op.name}: input '{op.inputs[i].name}' must be a tensor, an "
                          f"array or a number, got {value!r:.60}: {e}") from None
        t = mode.wrap(_initialised(op, i, dense))
    elif isinstance(t, DenseTensor):
        _initialised(op, i, <DenseTensor>t)
    cdef int d = _dtype_of(t)
    if d >= FASTOP_NUM_COMPUTE_DTYPES and plan.kernels[d] is None:
        return mode.cast(t, FASTOP_FLOAT32)
    return t


cdef DenseTensor _initialised(object op, Py_ssize_t i, DenseTensor t):
    if t.view.data == NULL and t.view.size:
        check_initialised(t, f"{op.name}: input '{op.inputs[i].name}'")
    return t


cdef int _number_list_kind(object op, Py_ssize_t i, object value) except? -100:
    """The kind of scalars a Python list or tuple holds (it must hold numbers)."""
    try:
        kind = np.asarray(value).dtype.kind
    except (TypeError, ValueError) as e:
        raise type(e)(f"{op.name}: input '{op.inputs[i].name}' must be a tensor, an array "
                      f"or a number, got {value!r:.60}: {e}") from None
    if kind == "f":
        return KIND_FLOAT
    if kind == "b":
        return KIND_BOOL
    if kind in "iu":
        return KIND_INT
    raise TypeError(f"{op.name}: input '{op.inputs[i].name}' must hold numbers, got "
                    f"{value!r:.60}")


cdef DenseTensor _number_list(object op, Py_ssize_t i, object value, int dtype):
    """A list of numbers as a tensor of `dtype`, refused when a value does not fit it."""
    try:
        return as_dense(np.array(value, dtype=_DTYPE_NAMES[dtype]))
    except (TypeError, ValueError, OverflowError) as e:
        raise type(e)(_no_fit(op, i, value, dtype) + f" ({e})") from None


cdef inline object _fitted(object op, Py_ssize_t i, object value, int dtype):
    """A scalar as the Python number the mode makes a tensor of: refused when it does not
    fit an integer `dtype`."""
    if PyFloat_CheckExact(value) or (PyLong_CheckExact(value) and dtype >= FASTOP_FLOAT32):
        return value                     # the common cases: x * 2.5, x + 1 (a float x)
    return _fitted_integer(op, i, value, dtype)


cdef object _fitted_integer(object op, Py_ssize_t i, object value, int dtype):
    """_fitted for the other cases: a numpy scalar is its Python number; an integer must
    fit an integer dtype (uint8, int8, int16, int32, int64)."""
    cdef int overflow = 0
    cdef long long v
    if isinstance(value, np.generic):
        value = value.item()
    if FASTOP_UINT8 <= dtype <= FASTOP_INT64 and PyLong_Check(value) \
            and not (value is True or value is False):
        v = PyLong_AsLongLongAndOverflow(value, &overflow)
        if overflow or not _INT_MIN[dtype] <= v <= _INT_MAX[dtype]:
            raise OverflowError(_no_fit(op, i, value, dtype))
    return value


# The range of each integer dtype, by code (uint8 .. int64; the others unused).
cdef long long _INT_MIN[FASTOP_NUM_DTYPES]
cdef long long _INT_MAX[FASTOP_NUM_DTYPES]
for _code, _bounds in {FASTOP_UINT8: np.iinfo(np.uint8), FASTOP_INT8: np.iinfo(np.int8),
                       FASTOP_INT16: np.iinfo(np.int16), FASTOP_INT32: np.iinfo(np.int32),
                       FASTOP_INT64: np.iinfo(np.int64)}.items():
    _INT_MIN[_code], _INT_MAX[_code] = int(_bounds.min), int(_bounds.max)
del _code, _bounds


cdef str _no_fit(object op, Py_ssize_t i, object value, int dtype):
    return (f"{op.name}: input '{op.inputs[i].name}' is {value!r:.60}, which does not fit "
            f"the {_DTYPE_NAMES[dtype]} the op computes in")


cdef int _natural_dtype(int kind) noexcept:
    """A scalar's dtype outside a dtype group: float32, int64 or bool."""
    if kind == KIND_FLOAT:
        return FASTOP_FLOAT32
    if kind == KIND_INT:
        return FASTOP_INT64
    return FASTOP_BOOL
