# cython: freethreading_compatible = False
"""Eager dispatch: how an op call computes when its thread is in eager mode.

:func:`fastop.ops._dispatch.dispatch` hands every eager op call here (Tensor operators
and methods, ``fastop.<fn>``, gradient rules, optimizer steps, indexing). One path:

1. **bind** — a call giving every input positionally and no attributes takes the op's
   default attributes, packed once for its Cython kernel; a call whose keyword
   attributes equal those of one of the op's last MEMO_DEPTH bindings reuses that
   binding (a backward alternates ``matmul(..., transpose_y=True)`` and
   ``matmul(..., transpose_x=True)``); anything else binds through ``OpDef.bind`` and
   becomes the newest remembered binding, the oldest forgotten;
2. **inputs** — Tensors pass through; anything else converts by the input rule static
   mode shares (:func:`fastop.ops._dispatch.convert_inputs`, here making Tensors):
   Python and numpy scalars, arrays and lists by the one scalar rule, which may also
   cast a tensor of the op's dtype group (an int32 tensor times 2.5 computes in
   float32; the cast is an op of its own, so gradients flow through it); a tensor of a
   storage dtype (float16) that the op has no kernel for is cast to float32;
3. **kernel** — the kernel the plan chooses (:func:`fastop.ops._dispatch.kernel_dtype`,
   the same choice as the static executor's and the backward's): a Cython kernel runs
   through ``CKernel.run`` (views included), a Python kernel through the memoized
   ``PythonKernel`` whose results the C checker wraps straight into Tensors;
4. **record** — with grad mode on and an input needing a gradient, a graph node.
"""
cimport cython
from fastop._core.storage cimport (DenseTensor, fastop_attrs, FASTOP_FLOAT32,
                                   FASTOP_NUM_COMPUTE_DTYPES)
from fastop._tensor cimport Tensor, scalar_tensor, wrap_dense
from fastop.ops._dispatch cimport (OpBase, CallPlan, AttrsMemo, InputMode, plan_of,
                                   run_kernel, set_eager_dispatch, convert_inputs)
from fastop.autograd._grad_mode cimport grad_enabled
from fastop.autograd._graph cimport record_op
from fastop._core.profiling cimport EVENT_OP, now_ns, profiling_flag, record
from libc.stdint cimport int64_t

import numpy as np

from fastop.ops.builtin._table import B

__all__ = ["eager_call"]

from fastop._core.storage import DTYPE_NAMES as _DTYPE_NAMES


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
            while memo is not None:
                if _same_attrs(kwargs, memo.kwargs):
                    attrs = memo.attrs
                    if memo.packed_ok:
                        own = memo.packed   # a copy: the kernel may run without the GIL
                        packed = &own
                    break
                memo = memo.older
    if attrs is None:                        # the general binding
        bound, attrs = op.bind(args, {} if kwargs is None else kwargs)
        inputs = tuple(bound)
        if kwargs and len(args) == plan.n_in and plan.fixed and _cacheable(kwargs):
            memo = AttrsMemo.__new__(AttrsMemo)
            # copies (the caller may change its lists later)
            memo.kwargs = {k: list(v) if isinstance(v, list) else v
                           for k, v in kwargs.items()}
            memo.attrs = {k: list(v) if isinstance(v, list) else v
                          for k, v in attrs.items()}
            if plan.ck is not None:
                plan.ck.pack(attrs, &memo.packed)
                memo.packed_ok = True
                own = memo.packed
                packed = &own
            memo.older = plan.memo
            _forget_oldest(memo)
            plan.memo = memo
    if not _all_tensors(plan, inputs):
        inputs = convert_inputs(plan, inputs, _EAGER_INPUTS)
    cdef tuple outs = run_kernel(plan, inputs, attrs, packed, out, Tensor)
    if grad_enabled():
        outs = record_op(plan, inputs, outs, attrs)
    return outs[0] if plan.n_out == 1 else outs


cdef bint _all_tensors(CallPlan plan, tuple inputs) noexcept:
    """Every input a Tensor, and the dtype group's of one dtype (nothing for
    convert_inputs to do): the common case, decided without building anything."""
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
            return False                      # uninitialised: convert_inputs explains
        d = (<Tensor>x).view.dtype
        if d >= FASTOP_NUM_COMPUTE_DTYPES:
            return False                      # a storage dtype: convert_inputs may cast it
        if i >= 64 or (plan.group_mask >> i) & 1:
            if dtype >= 0 and d != dtype:
                return False
            dtype = d
    return not plan.int_to_float or dtype < 0 or dtype >= FASTOP_FLOAT32


@cython.final
cdef class EagerInputs(InputMode):
    """Eager values for convert_inputs: Tensors (0-d ones for scalars, cached per dtype)."""

    cpdef object own(self, object op, object value):
        return value if isinstance(value, Tensor) else None

    cpdef object wrap(self, DenseTensor value):
        return wrap_dense(value)

    cpdef object scalar(self, object value, int dtype):
        return scalar_tensor(value, dtype)

    cpdef object cast(self, object value, int dtype):
        return _cast(value, dtype)


cdef EagerInputs _EAGER_INPUTS = EagerInputs()


cdef object _cast_op = None


cdef object _cast(object x, int dtype):
    """x cast to `dtype` by the registry's cast op (recorded, so gradients flow)."""
    global _cast_op
    if _cast_op is None:
        _cast_op = B.cast
    return dispatch_eager(<OpBase>_cast_op, (x,), {"dtype": _DTYPE_NAMES[dtype]})


cdef enum:
    MEMO_DEPTH = 4      # keyword calls remembered per op


cdef inline void _forget_oldest(AttrsMemo newest):
    """Cut the chain from `newest` after MEMO_DEPTH entries."""
    cdef int depth = 1
    cdef AttrsMemo memo = newest
    while memo.older is not None:
        if depth == MEMO_DEPTH:
            memo.older = None
            return
        memo = memo.older
        depth += 1


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
