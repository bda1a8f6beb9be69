# cython: freethreading_compatible = False
"""The eager Tensor: DenseTensor storage plus autograd state, with numpy-style operators.

Arithmetic dunders are the hot path of eager mode, so they stay in Cython: each built-in
op's OpDef and CKernel are resolved from the registry once (at first use), a Python
scalar becomes a 0-d tensor of the other operand's dtype, and the kernel runs through
``CKernel.run``; a graph node is recorded only when grad mode is on and an input needs a
gradient. Everything else (``fastop.tanh(x)``, ``x.mean()``, plugin ops) goes through the
op registry and the eager dispatcher of :mod:`fastop.autograd._engine`.
"""
from cpython.buffer cimport PyBUF_C_CONTIGUOUS, PyBuffer_Release, PyObject_GetBuffer
from cpython.float cimport PyFloat_Check
from cpython.long cimport PyLong_Check
from cpython.object cimport PyTypeObject
from libc.stddef cimport ptrdiff_t
from libc.string cimport memcpy
from fastop._core.storage cimport (DenseTensor, FASTOP_BOOL, FASTOP_FLOAT32, FASTOP_FLOAT64,
                                   FASTOP_INT32, FASTOP_INT64, FASTOP_MAX_NDIM,
                                   alloc_tensor, bump_version, dtype_code)
from fastop._core.kernel cimport CKernel
from fastop.autograd._engine cimport (OpInfo, dispatch_eager, grad_enabled, op_info,
                                      record_op, run_backward)

import numpy as np

from fastop._core.storage import as_dtype, from_numpy
from fastop.autograd import _engine
from fastop.ops._dispatch import dispatch
from fastop.ops._registry import registry

__all__ = ["Tensor", "to_tensor", "from_numpy_tensor", "add_methods"]


# --------------------------------------------------------------------------- fast ops

cdef enum:
    ADD, SUB, MUL, DIV, POW, MATMUL, EQ, NE, LT, LE, GT, GE, NEG, N_FAST

cdef tuple _FAST_NAMES = ("add", "subtract", "multiply", "divide", "pow", "matmul",
                          "equal", "not_equal", "less_than", "less_equal", "greater_than",
                          "greater_equal", "neg")
cdef list _fast = [None] * N_FAST
cdef tuple _DTYPE_NAMES = ("bool", "int32", "int64", "float32", "float64")
cdef dict _NUMPY_CODES = {np.dtype(name): code for code, name in enumerate(_DTYPE_NAMES)}


cdef OpInfo _fast_info(int which):
    """The op behind an operator, looked up in the registry at first use only."""
    cdef object info = _fast[which]
    if info is None:
        info = op_info(registry.get("fastop::" + _FAST_NAMES[which]))
        _fast[which] = info
    return <OpInfo>info


cdef object _run(OpInfo info, tuple ins):
    """Run a built-in op on Tensors: its CKernel directly when it covers the dtype."""
    cdef CKernel ck = info.ck
    if ck is None or not info.defaults_packed or \
            not (info.ck_mask >> (<Tensor>ins[ck.dispatch_input]).view.dtype) & 1:
        return dispatch_eager(info.op, ins, {})
    cdef tuple outs = ck.run(ins, None, &info.packed, Tensor)
    if grad_enabled():
        for x in ins:
            if (<Tensor>x).requires_grad:
                outs = record_op(info, ins, outs, info.default_attrs)
                break
    return outs[0]


cdef list _scalar_cache = [None] * 5    # per dtype: (value, read-only 0-d Tensor)


cdef Tensor _scalar(object value, int dtype):
    """A 0-d read-only Tensor holding a Python number, in the given dtype. The last one
    made per dtype is reused (`x + 1` in a loop allocates once)."""
    cached = _scalar_cache[dtype]
    if cached is not None and type((<tuple>cached)[0]) is type(value) \
            and (<tuple>cached)[0] == value and value != 0:     # (-0.0 == 0.0)
        return <Tensor>(<tuple>cached)[1]
    cdef Tensor t = <Tensor>alloc_tensor(Tensor, 0, NULL, dtype)
    if dtype == FASTOP_FLOAT32:
        (<float*>t.view.data)[0] = value
    elif dtype == FASTOP_FLOAT64:
        (<double*>t.view.data)[0] = value
    elif dtype == FASTOP_INT64:
        (<long long*>t.view.data)[0] = value
    elif dtype == FASTOP_INT32:
        (<int*>t.view.data)[0] = value
    else:
        (<char*>t.view.data)[0] = 1 if value else 0
    t.readonly = True
    _scalar_cache[dtype] = (value, t)
    return t


cdef inline bint _is_number(object v):
    return PyFloat_Check(v) or PyLong_Check(v)


cdef object _operand(object value, Tensor like):
    """The other operand of an operator as a Tensor (None: not a supported type)."""
    if isinstance(value, Tensor):
        return value
    if _is_number(value):
        return _scalar(value, like.view.dtype)
    if isinstance(value, DenseTensor):
        return wrap_dense(value)
    if isinstance(value, np.generic):
        return _scalar(value.item(), like.view.dtype)
    if isinstance(value, (np.ndarray, list, tuple)):
        return as_tensor(value, -1 if isinstance(value, np.ndarray) else like.view.dtype)
    return None


cdef Tensor _promote(Tensor t):
    """An integer/bool tensor meeting a float scalar computes in float32 (like Paddle)."""
    return t.astype("float32")


cdef inline bint _is_float_scalar(object v):
    """A Python float or a numpy floating scalar (np.float32 is not a Python float)."""
    return PyFloat_Check(v) or isinstance(v, np.floating)


cdef Tensor _promote_for(Tensor t, object scalar):
    """An integer/bool tensor `t` as it meets `scalar`: float32 for a float scalar; int64
    for a bool tensor and an integer scalar (`mask == 2` compares numbers, as in numpy
    and PyTorch, not True with True); else `t`."""
    if _is_float_scalar(scalar):
        return _promote(t)
    if t.view.dtype == FASTOP_BOOL and not isinstance(scalar, (bool, np.bool_)) and (
            PyLong_Check(scalar) or isinstance(scalar, np.integer)):
        return t.astype("int64")
    return t


cdef object _binary(int which, object a, object b):
    """`a OP b` where at least one side is a Tensor."""
    cdef bint tensor_first = isinstance(a, Tensor)
    cdef Tensor t = <Tensor>(a if tensor_first else b)
    value = b if tensor_first else a
    if t.view.dtype < FASTOP_FLOAT32:
        t = _promote_for(t, value)
    try:
        other = _operand(value, t)
    except (TypeError, ValueError, OverflowError) as e:
        raise type(e)(f"fastop::{_FAST_NAMES[which]}: the operand {value!r:.60} does not "
                      f"go with the {t.dtype.name} tensor of shape {t.shape}: {e}") from None
    if other is None:
        return NotImplemented
    cdef Tensor x = t if tensor_first else <Tensor>other
    cdef Tensor y = <Tensor>other if tensor_first else t
    if which == DIV and x.view.dtype < FASTOP_FLOAT32 and y.view.dtype < FASTOP_FLOAT32:
        x, y = _promote(x), _promote(y)       # true division, as in numpy and Paddle
    return _run(_fast_info(which), (x, y))


cdef object _call(str name, tuple args, dict kwargs):
    """Call the registry op ``fastop::<name>`` through the current mode's dispatcher."""
    return dispatch(registry.get("fastop::" + name), args, kwargs)


# --------------------------------------------------------------------------- helpers

cdef Tensor view_of(DenseTensor src):
    """A new Tensor (no autograd state) sharing src's memory."""
    cdef Tensor out = Tensor.__new__(Tensor)
    out.view = src.view
    out.owner = src.owner if isinstance(src.owner, DenseTensor) else src
    out.readonly = src.readonly
    return out


cdef Tensor wrap_dense(DenseTensor d):
    """d itself if it is a Tensor, else a Tensor view of it (zero-copy)."""
    if isinstance(d, Tensor):
        return <Tensor>d
    return view_of(d)


cdef Tensor as_tensor(object value, int dtype):
    """A Tensor for value (a tensor, array, nested list or number); dtype -1 keeps its own."""
    if isinstance(value, DenseTensor) and (dtype < 0 or (<DenseTensor>value).view.dtype == dtype):
        return wrap_dense(value)
    arr = np.asarray(value, dtype=None if dtype < 0 else _DTYPE_NAMES[dtype])
    return <Tensor>from_numpy(arr, Tensor)


cdef Tensor full_tensor(int ndim, const ptrdiff_t* shape, int dtype, double value):
    """A new contiguous Tensor filled with value."""
    cdef Tensor t = <Tensor>alloc_tensor(Tensor, ndim, shape, dtype)
    cdef Py_ssize_t i, n = t.view.size
    if dtype == FASTOP_FLOAT32:
        for i in range(n):
            (<float*>t.view.data)[i] = <float>value
    elif dtype == FASTOP_FLOAT64:
        for i in range(n):
            (<double*>t.view.data)[i] = value
    elif dtype == FASTOP_INT64:
        for i in range(n):
            (<long long*>t.view.data)[i] = <long long>value
    elif dtype == FASTOP_INT32:
        for i in range(n):
            (<int*>t.view.data)[i] = <int>value
    else:
        for i in range(n):
            (<char*>t.view.data)[i] = value != 0
    return t


cdef Tensor add_tensors(Tensor a, Tensor b):
    """a + b through the built-in add (recorded when grad mode is on)."""
    return <Tensor>_run(_fast_info(ADD), (a, b))


# --------------------------------------------------------------------------- creation

def to_tensor(data, dtype=None, place=None, stop_gradient=True) -> Tensor:
    """A new Tensor holding a copy of data (a number, nested list, numpy array or tensor).

    The dtype is ``dtype`` when given, else the data's (Python floats give float32,
    ints int64, like PaddlePaddle). ``stop_gradient=False`` makes a trainable leaf
    (how parameters are made). ``place`` is accepted for PaddlePaddle compatibility
    (fastop runs on the CPU).
    """
    if isinstance(data, DenseTensor):
        arr = (<DenseTensor>data).numpy()
    elif isinstance(data, np.ndarray):
        arr = data
    else:
        arr = np.asarray(data)
        if arr.dtype.kind == "f":
            arr = arr.astype(np.float32)
    if arr.dtype.kind not in "biuf":
        got = (f"a numpy array of dtype {arr.dtype}" if isinstance(data, np.ndarray)
               else f"{type(data).__name__} (numpy reads it as dtype {arr.dtype})")
        raise TypeError(f"to_tensor: 'data' must hold numbers (bool, integers or floats), "
                        f"got {got}")
    cdef int code = dtype_code(dtype) if dtype is not None else _NUMPY_CODES.get(arr.dtype, -1)
    if code < 0:       # other numpy types: float16 -> float32, small/unsigned ints -> int64
        code = FASTOP_FLOAT32 if arr.dtype.kind == "f" else FASTOP_INT64
        if arr.dtype == np.uint64 and arr.size and arr.max() > np.iinfo(np.int64).max:
            raise OverflowError(f"to_tensor: 'data' holds the uint64 value {arr.max()}, "
                                f"which does not fit the int64 it would become; pass "
                                f"dtype= to convert explicitly")
    cdef ptrdiff_t shape[FASTOP_MAX_NDIM]
    cdef int i, nd = arr.ndim
    if nd > FASTOP_MAX_NDIM:
        raise ValueError(f"to_tensor: at most {FASTOP_MAX_NDIM} dimensions, got {nd}")
    for i in range(nd):
        shape[i] = arr.shape[i]
    cdef Tensor t = <Tensor>alloc_tensor(Tensor, nd, shape, code)
    cdef Py_buffer buf
    if _NUMPY_CODES.get(arr.dtype, -1) == code and arr.flags.c_contiguous:
        PyObject_GetBuffer(arr, &buf, PyBUF_C_CONTIGUOUS)
        memcpy(t.view.data, buf.buf, buf.len)
        PyBuffer_Release(&buf)
    else:
        np.copyto(t.numpy(), arr, casting="unsafe")
    if not stop_gradient:
        _require_grad(t, "to_tensor")
    return t


cdef int _require_grad(Tensor t, str who) except -1:
    """Make t take gradients: floating dtypes only (an integer gradient would be
    truncated, as in PyTorch)."""
    if t.view.dtype != FASTOP_FLOAT32 and t.view.dtype != FASTOP_FLOAT64:
        raise TypeError(f"{who}: stop_gradient=False needs a float32 or float64 tensor, "
                        f"got {t.dtype.name} (cast it first: x.astype('float32'))")
    t.requires_grad = True
    return 0


def from_numpy_tensor(array, stop_gradient=True) -> Tensor:
    """A Tensor sharing a numpy array's memory (no copy; the tensor keeps it alive),
    like ``torch.from_numpy``. For Python ops that compute with numpy."""
    cdef Tensor t = view_of(array) if isinstance(array, DenseTensor) else \
        <Tensor>from_numpy(array, Tensor)
    if not stop_gradient:
        _require_grad(t, "from_numpy")
    return t


# --------------------------------------------------------------------------- Tensor

cdef class Tensor(DenseTensor):
    """An n-d array of one dtype that records operations for automatic differentiation.

    Create one with ``fastop.to_tensor``, ``fastop.randn`` and friends. Operators work
    like numpy's (broadcasting, Python scalars taking the tensor's dtype). A tensor
    created by the user is a *leaf*; with ``stop_gradient=False`` (parameters), every
    op on it is recorded, and ``backward()`` fills its ``.grad``.

    Example::

        >>> import fastop
        >>> x = fastop.to_tensor([1.0, 2.0], stop_gradient=False)
        >>> (x * x).sum().backward()
        >>> x.grad.numpy()
        array([2., 4.], dtype=float32)
    """

    __array_ufunc__ = None   # numpy defers to Tensor's reflected operators (a + t)

    def __init__(self, data, dtype=None, stop_gradient=True):
        """``Tensor(data)`` is ``fastop.to_tensor(data, dtype, stop_gradient=...)``."""
        cdef Tensor src = to_tensor(data, dtype)
        self.view = src.view
        self.owner = src
        self.readonly = src.readonly
        if not stop_gradient:
            _require_grad(self, "Tensor")

    # -- autograd state ----------------------------------------------------------
    @property
    def stop_gradient(self) -> bool:
        """True (the default for created tensors): no gradient flows into this tensor.
        Parameters have False; results of ops are False when an input is False."""
        return not self.requires_grad

    @stop_gradient.setter
    def stop_gradient(self, bint value):
        if value:
            self.requires_grad = False
        elif not self.requires_grad:
            _require_grad(self, "stop_gradient")

    @property
    def is_leaf(self) -> bool:
        """True for tensors made by the user rather than by a recorded op."""
        return self._node is None

    def backward(self, grad_tensor=None, bint retain_graph=False):
        """Accumulate d(self)/d(leaf) into the ``.grad`` of every leaf with
        ``stop_gradient=False``.

        ``grad_tensor`` is the gradient of self (ones when None). The graph's saved
        tensors are freed afterwards unless ``retain_graph=True``; backward through a
        freed graph raises.
        """
        run_backward((self,), [grad_tensor], retain_graph, False, None, False)

    def clear_grad(self, bint set_to_zero=True):
        """Reset ``.grad``: to a new zero tensor (``set_to_zero``, Paddle's default) or None."""
        cdef Tensor g
        if self.grad is not None and set_to_zero:
            g = <Tensor>self.grad
            self.grad = full_tensor(g.view.ndim, g.view.shape, g.view.dtype, 0.0)
        else:
            self.grad = None

    clear_gradient = clear_grad

    def gradient(self):
        """The gradient as a numpy array, or None (PaddlePaddle's ``Tensor.gradient``)."""
        return None if self.grad is None else self.grad.numpy()

    def __deepcopy__(self, memo):
        """A copy of a leaf tensor's data, stop_gradient and gradient (for copy.deepcopy
        of layers). Non-leaf tensors refuse: their graph cannot be copied."""
        if self._node is not None:
            raise RuntimeError("deepcopy: only leaf tensors (made by the user, not by an "
                               "op on tensors that need gradients) can be copied; use "
                               "detach() first")
        cdef Tensor out = <Tensor>self.copy()
        out.requires_grad = self.requires_grad
        out.name = self.name
        out.grad = None if self.grad is None else (<Tensor>self.grad).copy()
        memo[id(self)] = out
        return out

    def __reduce__(self):
        """Pickle as (values, dtype, stop_gradient); the graph and gradient are dropped."""
        return (to_tensor, (self.numpy().copy(), self.dtype.name, None,
                            not self.requires_grad))

    def detach(self) -> Tensor:
        """A view of the same memory that is cut from the graph (stop_gradient=True)."""
        return view_of(self)

    # -- values ------------------------------------------------------------------
    def set_value(self, value) -> None:
        """Overwrite this tensor's values in place with an array/tensor of the same shape
        (cast to this tensor's dtype). Used to load parameters."""
        arr = np.asarray(value)
        if list(arr.shape) != self.shape:
            raise ValueError(f"set_value: expected a value of shape {self.shape}, got "
                             f"{list(arr.shape)}")
        if arr.dtype.kind not in "biuf":
            raise TypeError(f"set_value: expected numbers for a {self.dtype.name} tensor, "
                            f"got a value of dtype {arr.dtype}")
        if not np.can_cast(arr.dtype, self.dtype.numpy_dtype, casting="same_kind"):
            raise TypeError(f"set_value: a value of dtype {arr.dtype} cannot be stored in the "
                            f"{self.dtype.name} tensor without losing its kind (cast it "
                            f"first)")
        np.copyto(self.numpy(), arr, casting="same_kind")
        bump_version(self)

    def astype(self, dtype) -> Tensor:
        """A copy converted to dtype (the op ``fastop::cast``)."""
        return _call("cast", (self,), {"dtype": as_dtype(dtype)})

    cast = astype

    def __bool__(self):
        return bool(self.item())

    def __float__(self):
        return float(self.item())

    def __int__(self):
        return int(self.item())

    def __hash__(self):
        return id(self) >> 4

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    def __repr__(self):
        body = np.array2string(self.numpy(), separator=", ", prefix="       ")
        return (f"Tensor(shape={self.shape}, dtype={self.dtype.name}, place=Place(cpu), "
                f"stop_gradient={not self.requires_grad},\n       {body})")

    __str__ = __repr__

    # -- indexing ----------------------------------------------------------------
    def __getitem__(self, key):
        """Basic indexing (ints, slices, None, ...) gives a view; integer arrays gather
        (a copy). Both are differentiable."""
        return _engine.index(self, key)

    def __setitem__(self, key, value):
        """Write values in place (numpy indexing rules). Not recorded by autograd, so a
        tensor that needs a gradient can only be written under ``no_grad``."""
        if self.requires_grad and grad_enabled():
            raise RuntimeError(f"in-place assignment to a tensor with stop_gradient=False "
                               f"(shape {self.shape}) is not differentiable; do it under "
                               f"fastop.no_grad() or use set_value")
        self.numpy()[key] = value.numpy() if isinstance(value, DenseTensor) else value
        bump_version(self)

    # -- operators -----------------------------------------------------------------
    def __add__(self, other):
        return _binary(ADD, self, other)

    def __radd__(self, other):
        return _binary(ADD, other, self)

    def __sub__(self, other):
        return _binary(SUB, self, other)

    def __rsub__(self, other):
        return _binary(SUB, other, self)

    def __mul__(self, other):
        return _binary(MUL, self, other)

    def __rmul__(self, other):
        return _binary(MUL, other, self)

    def __truediv__(self, other):
        return _binary(DIV, self, other)

    def __rtruediv__(self, other):
        return _binary(DIV, other, self)

    def __pow__(self, other, mod):
        return _binary(POW, self, other)

    def __rpow__(self, other, mod):
        return _binary(POW, other, self)

    def __matmul__(self, other):
        return _binary(MATMUL, self, other)

    def __rmatmul__(self, other):
        return _binary(MATMUL, other, self)

    def __neg__(self):
        return _run(_fast_info(NEG), (self,))

    def __pos__(self):
        return self

    def __abs__(self):
        return _call("abs", (self,), {})

    def __eq__(self, other):
        return _binary(EQ, self, other)

    def __ne__(self, other):
        return _binary(NE, self, other)

    def __lt__(self, other):
        return _binary(LT, self, other)

    def __le__(self, other):
        return _binary(LE, self, other)

    def __gt__(self, other):
        return _binary(GT, self, other)

    def __ge__(self, other):
        return _binary(GE, self, other)

    # -- methods mirroring fastop functions (PaddlePaddle's Tensor methods) ------------
    def mean(self, axis=None, keepdim=False, name=None) -> Tensor:
        return _call("mean", (self,), {"axis": axis, "keepdim": keepdim})

    def sum(self, axis=None, dtype=None, keepdim=False, name=None) -> Tensor:
        out = _call("sum", (self,), {"axis": axis, "keepdim": keepdim})
        return out if dtype is None else out.astype(dtype)

    def max(self, axis=None, keepdim=False, name=None) -> Tensor:
        return _call("max", (self,), {"axis": axis, "keepdim": keepdim})

    def reshape(self, *shape, name=None) -> Tensor:
        """A tensor of a new shape (one -1 inferred): ``x.reshape([2, 3])``."""
        if len(shape) == 1 and not isinstance(shape[0], int):
            shape = shape[0]
        return _call("reshape", (self,), {"shape": list(shape)})

    def transpose(self, *perm, name=None) -> Tensor:
        """Permute the axes: ``x.transpose([1, 0])`` (reversed when none given)."""
        if len(perm) == 1 and not isinstance(perm[0], int):
            perm = perm[0]
        perm = list(perm) or list(range(self.view.ndim - 1, -1, -1))
        return _call("transpose", (self,), {"perm": perm})

    @property
    def T(self) -> Tensor:
        return self.transpose()

    def matmul(self, y, transpose_x=False, transpose_y=False, name=None) -> Tensor:
        return _call("matmul", (self, y),
                     {"transpose_x": transpose_x, "transpose_y": transpose_y})

    def tanh(self, name=None) -> Tensor:
        return _call("tanh", (self,), {})

    def exp(self, name=None) -> Tensor:
        return _call("exp", (self,), {})

    def log(self, name=None) -> Tensor:
        return _call("log", (self,), {})

    def sqrt(self, name=None) -> Tensor:
        return _call("sqrt", (self,), {})

    def square(self, name=None) -> Tensor:
        return _call("square", (self,), {})

    def abs(self, name=None) -> Tensor:
        return _call("abs", (self,), {})


# --------------------------------------------------------------------------- methods

cdef extern from "Python.h":
    void PyType_Modified(PyTypeObject* type)


def add_methods(dict methods) -> None:
    """Make Python functions Tensor methods (``x.argmax()`` is ``fastop.argmax(x)``), as
    PaddlePaddle binds its tensor functions: each function is written once, with its
    signature and docstring, and the method is the function itself. Extension types are
    immutable from Python, so the functions go into the type's dict here."""
    cdef PyTypeObject* tp = <PyTypeObject*>Tensor
    for name, fn in methods.items():
        if not callable(fn):
            raise TypeError(f"add_methods: {name} is not callable")
    (<dict><object>tp.tp_dict).update(methods)
    PyType_Modified(tp)
