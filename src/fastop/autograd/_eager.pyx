# cython: freethreading_compatible = False
"""Eager dispatch: how an op call computes when its thread is in eager mode.

:func:`fastop.ops._dispatch.dispatch` hands every eager op call here (Tensor operators
and methods, ``fastop.<fn>``, gradient rules, optimizer steps, indexing). One path:

1. **bind** — a call giving every input positionally and no attributes takes the op's
   default attributes, packed once for its Cython kernel; a call whose keyword
   attributes equal the previous call's reuses that call's binding; anything else binds
   through ``OpDef.bind`` (and becomes the remembered call);
2. **inputs** — Tensors pass through; Python and numpy scalars, arrays and lists become
   Tensors by the one scalar rule (:func:`fastop.ops._dispatch.group_dtype`), which may
   also cast a tensor of the op's dtype group (an int32 tensor times 2.5 computes in
   float32; the cast is an op of its own, so gradients flow through it);
   A tensor of a storage dtype (float16, uint8) that the op has no kernel for is cast
   to float32 first (also recorded);
3. **kernel** — the plan's kernel for the dispatch input's dtype: a Cython kernel runs
   through ``CKernel.run`` (views included), a Python kernel through the memoized
   ``PythonKernel`` whose results the C checker wraps straight into Tensors;
4. **record** — with grad mode on and an input needing a gradient, a graph node.
"""
from cpython.float cimport PyFloat_CheckExact
from cpython.long cimport PyLong_Check, PyLong_CheckExact, PyLong_AsLongLongAndOverflow
from fastop._core.storage cimport (DenseTensor, fastop_attrs, check_initialised, FASTOP_BOOL,
                                   FASTOP_INT32, FASTOP_INT64, FASTOP_FLOAT32, FASTOP_FLOAT64,
                                   FASTOP_NUM_COMPUTE_DTYPES)
from fastop._core.kernel cimport CKernel
from fastop._tensor cimport Tensor, as_tensor, scalar_tensor, wrap_dense
from fastop.ops._dispatch cimport (OpBase, CallPlan, AttrsMemo, plan_of, run_kernel,
                                   set_eager_dispatch, group_dtype, scalar_kind,
                                   KIND_ABSENT, KIND_BOOL, KIND_INT, KIND_FLOAT, KIND_OTHER)
from fastop.autograd._grad_mode cimport grad_enabled
from fastop.autograd._graph cimport record_op
from fastop._core.profiling cimport EVENT_OP, now_ns, profiling_flag, record
from libc.stdint cimport int64_t

import numpy as np

from fastop.ops.builtin._table import B

__all__ = ["eager_call"]

from fastop._core.storage import DTYPE_NAMES as _DTYPE_NAMES
cdef int MAX_INPUTS = 64


cdef const int* _profiling = profiling_flag()


cdef object dispatch_eager(OpBase op, tuple args, dict kwargs):
    """Run an op call now: bind, convert inputs, run the kernel, record a node; one
    output, or a tuple of them. The profiler's hook: one check of its flag per call."""
    if _profiling[0]:
        return _profiled(op, args, kwargs)
    return _run(op, args, kwargs)


cdef object _profiled(OpBase op, tuple args, dict kwargs):
    """_run, recorded as an event of `op` with its arguments' shapes."""
    cdef int64_t start = now_ns()
    try:
        return _run(op, args, kwargs)
    finally:
        record(op, EVENT_OP, start, args)


cdef inline object _run(OpBase op, tuple args, dict kwargs):
    cdef CallPlan plan = plan_of(op)
    cdef tuple inputs = args
    cdef dict attrs = None
    cdef const fastop_attrs* packed = NULL
    cdef fastop_attrs own
    cdef AttrsMemo memo
    out = None
    if kwargs and "out" in kwargs:           # in-place updates (optimizer steps)
        kwargs = dict(kwargs)
        out = kwargs.pop("out")
    if len(args) == plan.n_in and plan.fixed:
        if not kwargs:
            attrs = plan.default_attrs
            if plan.defaults_packed:
                packed = &plan.packed_defaults
        else:
            memo = plan.memo
            if memo is not None and _same_attrs(kwargs, memo.kwargs):
                attrs = memo.attrs
                if memo.packed_ok:
                    own = memo.packed       # a copy: the kernel may run without the GIL
                    packed = &own
    if attrs is None:                        # the general binding
        bound, attrs = op.bind(args, {} if kwargs is None else kwargs)
        inputs = tuple(bound)
        if kwargs and len(args) == plan.n_in and plan.fixed and _cacheable(kwargs):
            memo = AttrsMemo.__new__(AttrsMemo)
            # copies (the caller may change its lists later)
            memo.kwargs = {k: list(v) if isinstance(v, list) else v
                           for k, v in kwargs.items()}
            memo.attrs = attrs
            if plan.ck is not None:
                plan.ck.pack(attrs, &memo.packed)
                memo.packed_ok = True
                own = memo.packed
                packed = &own
            plan.memo = memo
    if not _all_tensors(plan, inputs):
        inputs = _as_tensors(plan, inputs)
    cdef tuple outs = run_kernel(plan, inputs, attrs, packed, out, Tensor)
    if grad_enabled():
        outs = record_op(plan, inputs, outs, attrs)
    return outs[0] if plan.n_out == 1 else outs


cdef bint _all_tensors(CallPlan plan, tuple inputs) noexcept:
    """Every input a Tensor, and the dtype group's of one dtype (nothing to convert):
    the common case, decided without building anything."""
    cdef Py_ssize_t i, n = len(inputs)
    cdef int dtype = -1, d
    if n != plan.n_in:
        return False
    for i in range(n):
        x = inputs[i]
        if x is None:
            continue
        if not isinstance(x, Tensor):
            return False
        if (<DenseTensor>x).view.data == NULL and (<DenseTensor>x).view.size:
            return False                      # uninitialised: _as_tensors explains
        d = (<Tensor>x).view.dtype
        if d >= FASTOP_NUM_COMPUTE_DTYPES:
            return False                      # a storage dtype: _as_tensors may cast it
        if i >= 64 or (plan.group_mask >> i) & 1:
            if dtype >= 0 and d != dtype:
                return False
            dtype = d
    return not plan.int_to_float or dtype < 0 or dtype >= FASTOP_FLOAT32


cdef tuple _as_tensors(CallPlan plan, tuple inputs):
    """The inputs as Tensors by the scalar rule (see the module docstring)."""
    cdef Py_ssize_t i, n = len(inputs)
    if n == 2 and (plan.group_mask & 3) == 3 and not plan.int_to_float:
        # the operators' common case: a tensor and a Python number of its kind
        if isinstance(inputs[0], Tensor) and _takes_dtype(inputs[1], <Tensor>inputs[0]):
            return (inputs[0], _scalar(plan.op, 1, inputs[1], (<Tensor>inputs[0]).view.dtype))
        if isinstance(inputs[1], Tensor) and _takes_dtype(inputs[0], <Tensor>inputs[1]):
            return (_scalar(plan.op, 0, inputs[0], (<Tensor>inputs[1]).view.dtype), inputs[1])
    cdef int kinds[64]
    cdef bint sequence[64]
    cdef int target, k, dtype
    cdef bint cast_tensors
    cdef list converted = list(inputs)
    op = plan.op
    if n > MAX_INPUTS:
        raise TypeError(f"{op.name}: at most {MAX_INPUTS} inputs")
    for i in range(n):
        x = inputs[i]
        sequence[i] = False
        if x is None:
            kinds[i] = KIND_ABSENT
        elif isinstance(x, DenseTensor):
            _check_initialised(op, i, <DenseTensor>x)
            converted[i] = _computable(plan, wrap_dense(<DenseTensor>x))
            kinds[i] = (<DenseTensor>converted[i]).view.dtype
        elif i < 64 and (plan.variadic_mask >> i) & 1:
            converted[i] = [_computable(plan, _input_tensor(op, i, e, -1)) for e in x]
            kinds[i] = KIND_OTHER
        else:
            kinds[i] = scalar_kind(x)
            if kinds[i] != KIND_OTHER:
                continue
            if isinstance(x, (list, tuple)):     # a Python sequence converts like the
                kinds[i] = _sequence_kind(op, i, x)   # scalars it holds
                sequence[i] = True
            else:                                # an array: a tensor of its own dtype
                converted[i] = _computable(plan, _input_tensor(op, i, x, -1))
                kinds[i] = (<Tensor>converted[i]).view.dtype
    target = group_dtype(plan, kinds, n, &cast_tensors)
    for i in range(n):
        k = kinds[i]
        if k == KIND_ABSENT or k == KIND_OTHER:
            continue
        in_group = target >= 0 and (i >= 64 or (plan.group_mask >> i) & 1)
        if k >= 0:
            if in_group and cast_tensors and k != target:
                converted[i] = _cast(converted[i], target)
            continue
        dtype = target if in_group else _natural_dtype(k)
        converted[i] = _input_tensor(op, i, inputs[i], dtype) if sequence[i] \
            else _scalar(op, i, inputs[i], dtype)
    return tuple(converted)


cdef inline bint _takes_dtype(object value, Tensor t) noexcept:
    """value is a Python float with a float tensor, or a Python int with a non-bool
    initialised tensor: the scalar takes the tensor's dtype, nothing is promoted."""
    if (t.view.data == NULL and t.view.size) or t.view.dtype >= FASTOP_NUM_COMPUTE_DTYPES:
        return False
    if PyFloat_CheckExact(value):
        return t.view.dtype >= FASTOP_FLOAT32
    return PyLong_CheckExact(value) and t.view.dtype != FASTOP_BOOL


cdef int _sequence_kind(object op, Py_ssize_t i, object value) except? -100:
    """The kind of scalars a Python list or tuple holds."""
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


cdef int _natural_dtype(int kind) noexcept:
    if kind == KIND_FLOAT:
        return FASTOP_FLOAT32
    if kind == KIND_INT:
        return FASTOP_INT64
    return FASTOP_BOOL


cdef int _check_initialised(object op, Py_ssize_t i, DenseTensor t) except -1:
    if t.view.data == NULL and t.view.size:
        check_initialised(t, f"{op.name}: input '{op.inputs[i].name}'")
    return 0


cdef Tensor _input_tensor(object op, Py_ssize_t i, object value, int dtype):
    """An array, list or tensor given as input `i`, as a Tensor (of `dtype` if >= 0)."""
    try:
        t = as_tensor(value, dtype)
    except (TypeError, ValueError, OverflowError) as e:
        raise type(e)(f"{op.name}: input '{op.inputs[i].name}' must be a tensor, an array "
                      f"or a number, got {value!r:.60}: {e}") from None
    _check_initialised(op, i, <DenseTensor>t)
    return <Tensor>t


cdef Tensor _scalar(object op, Py_ssize_t i, object value, int dtype):
    """A scalar given as input `i`, as a 0-d Tensor of `dtype` (refused when the value
    does not fit an integer dtype)."""
    cdef int overflow = 0
    cdef long long v
    if PyFloat_CheckExact(value) or (PyLong_CheckExact(value) and dtype >= FASTOP_FLOAT32):
        return scalar_tensor(value, dtype)  # the common cases: x * 2.5, x + 1 (a float x)
    if isinstance(value, np.generic):
        value = value.item()
    if (dtype == FASTOP_INT32 or dtype == FASTOP_INT64) and PyLong_Check(value) \
            and not (value is True or value is False):
        v = PyLong_AsLongLongAndOverflow(value, &overflow)
        if overflow or (dtype == FASTOP_INT32 and not -2147483648 <= v <= 2147483647):
            raise OverflowError(f"{op.name}: input '{op.inputs[i].name}' is "
                                f"{value!r:.60}, which does not fit the "
                                f"{_DTYPE_NAMES[dtype]} the op computes in")
    return scalar_tensor(value, dtype)


cdef Tensor _computable(CallPlan plan, Tensor t):
    """t, or t cast to float32 when it has a storage dtype (float16, uint8) that the op
    has no kernel for: storage dtypes compute in float32, which holds their values
    exactly."""
    cdef int d = t.view.dtype
    if d < FASTOP_NUM_COMPUTE_DTYPES or plan.kernels[d] is not None:
        return t
    return <Tensor>_cast(t, FASTOP_FLOAT32)


cdef object _cast_op = None


cdef object _cast(object x, int dtype):
    """x cast to `dtype` by the registry's cast op (recorded, so gradients flow)."""
    global _cast_op
    if _cast_op is None:
        _cast_op = B.cast
    return dispatch_eager(<OpBase>_cast_op, (x,), {"dtype": _DTYPE_NAMES[dtype]})


cdef bint _cacheable(dict kwargs):
    """Whether keyword attributes compare reliably with == (plain Python values)."""
    for value in kwargs.values():
        if isinstance(value, (list, tuple)):
            for v in value:
                if type(v) is not int:
                    return False
        elif not (value is None or type(value) in (bool, int, float, str)):
            return False
    return True


cdef inline bint _same_attrs(dict kwargs, dict last):
    """kwargs == last, with equal types too (1 and 1.0 and True bind differently)."""
    if len(kwargs) != len(last):
        return False
    for key, value in kwargs.items():
        other = last.get(key, _MISSING)
        if type(other) is not type(value) or other != value:
            return False
    return True


cdef object _MISSING = object()


def eager_call(op, *args, **kwargs):
    """Run `op` eagerly whatever the thread's mode (for tools and tests)."""
    return dispatch_eager(<OpBase?>op, args, kwargs)


set_eager_dispatch(dispatch_eager)
