# cython: freethreading_compatible = False
"""The eager Tensor: DenseTensor storage plus autograd state, with numpy-style operators.

Operators are the hot path of eager mode, so they stay in Cython: each is a registry op
(``x + y`` is ``fastop.ops.fastop.add``) called through the one dispatch entry, which
converts scalars by the one scalar rule and records a graph node when grad mode is on
and an input needs a gradient. Named methods (``x.sum()``, ``x.reshape(...)``) are the
Python tensor functions themselves, bound by :func:`add_methods`.
"""
from cpython.buffer cimport PyBUF_C_CONTIGUOUS, PyBuffer_Release, PyObject_GetBuffer
from cpython.float cimport PyFloat_Check
from cpython.long cimport PyLong_Check
from cpython.object cimport PyTypeObject
from libc.stddef cimport ptrdiff_t
from libc.string cimport memcpy
from fastop._core.storage cimport (DenseTensor, FASTOP_BOOL, FASTOP_FLOAT32, FASTOP_FLOAT64,
                                   FASTOP_FLOAT16, FASTOP_INT32, FASTOP_INT64,
                                   FASTOP_MAX_NDIM, FASTOP_NUM_DTYPES,
                                   alloc_tensor, bump_version,
                                   dtype_code, as_ndarray, memory_root)
from fastop.ops._dispatch cimport OpBase, call_eager, dispatch
from fastop.autograd._grad_mode cimport grad_enabled

import numpy as np

from fastop._core.storage import DTYPE_NAMES, as_dtype, from_numpy, take_view_shape
from fastop.ops import _indexing
from fastop.ops._registry import registry

__all__ = ["Tensor", "to_tensor", "from_numpy_tensor", "add_methods"]


# --------------------------------------------------------------------------- operators

cdef enum:
    ADD, SUB, MUL, DIV, POW, MATMUL, EQ, NE, LT, LE, GT, GE, NEG, ABS, CAST, TRANSPOSE, MOD,
    N_OPS

cdef tuple _OP_NAMES = ("add", "subtract", "multiply", "divide", "pow", "matmul", "equal",
                        "not_equal", "less_than", "less_equal", "greater_than",
                        "greater_equal", "neg", "abs", "cast", "transpose", "remainder")
cdef list _ops = [None] * N_OPS
cdef tuple _DTYPE_NAMES = DTYPE_NAMES
cdef dict _NUMPY_CODES = {np.dtype(name): code for code, name in enumerate(_DTYPE_NAMES)}


cdef inline OpBase _op(int which):
    """The registry op behind an operator (looked up at its first use)."""
    cdef object op = _ops[which]
    if op is None:
        op = _ops[which] = registry.get("fastop::" + _OP_NAMES[which])
    return <OpBase>op


cdef backward_walk_fn _backward_walk = NULL   # fastop.autograd._backward installs it


cdef void set_backward_walk(backward_walk_fn fn) noexcept:
    global _backward_walk
    _backward_walk = fn


cdef list _scalar_cache = [None] * FASTOP_NUM_DTYPES  # per dtype: (value, 0-d Tensor)


cdef Tensor scalar_tensor(object value, int dtype):
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
    elif dtype != FASTOP_BOOL:                   # float16, uint8, int8, int16: numpy
        as_ndarray(t)[()] = value                # converts
    else:
        (<char*>t.view.data)[0] = 1 if value else 0
    t.readonly = True
    _scalar_cache[dtype] = (value, t)
    return t


cdef inline bint _is_operand(object value):
    """What an operator takes as its other operand (else NotImplemented: Python then
    tries the other operand's reflected operator, e.g. a static Variable's)."""
    return PyFloat_Check(value) or PyLong_Check(value) or isinstance(value, DenseTensor) \
        or isinstance(value, (np.generic, np.ndarray, list, tuple))


cdef object _binary(int which, object a, object b):
    """`a OP b` where at least one side is a Tensor."""
    if not _is_operand(b if isinstance(a, Tensor) else a):
        return NotImplemented
    return dispatch(_op(which), (a, b), None)


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
    elif dtype != FASTOP_BOOL:                   # float16, uint8, int8, int16: numpy
        as_ndarray(t).fill(value)                # converts
    else:
        for i in range(n):
            (<char*>t.view.data)[i] = value != 0
    return t


cdef Tensor add_tensors(Tensor a, Tensor b):
    """a + b through the built-in add (recorded when grad mode is on)."""
    return <Tensor>call_eager(_op(ADD), (a, b), None)


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
        try:
            arr = np.asarray(data)
        except ValueError as exc:       # a ragged nested list
            raise ValueError(f"to_tensor: 'data' must be rectangular (every list at one "
                             f"depth of the same length), got {type(data).__name__} "
                             f"{str(data)[:60]}: {exc}") from None
        if arr.dtype.kind == "f" and dtype is None:   # given a dtype: no float32 detour
            arr = arr.astype(np.float32)
    if arr.dtype.kind not in "biuf":
        got = (f"a numpy array of dtype {arr.dtype}" if isinstance(data, np.ndarray)
               else f"{type(data).__name__} (numpy reads it as dtype {arr.dtype})")
        raise TypeError(f"to_tensor: 'data' must hold numbers (bool, integers or floats), "
                        f"got {got}")
    cdef int code = dtype_code(dtype) if dtype is not None else _NUMPY_CODES.get(arr.dtype, -1)
    if code < 0:       # other numpy types: float128 -> float32, other integers -> int64
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
    """Make t take gradients (stop_gradient=False). Integer tensors too, as in
    PaddlePaddle: their gradients are in their own dtype (through integer ops; a cast
    to float passes the float gradient back cast to the integer dtype)."""
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

    @property
    def inplace_version(self) -> int:
        """In-place changes made so far to this tensor's memory (PaddlePaddle's name):
        item assignment, set_value, in-place ops, optimizer steps. Views of one memory
        share the count."""
        return memory_root(self)._version

    def backward(self, grad_tensor=None, bint retain_graph=False):
        """Accumulate d(self)/d(leaf) into the ``.grad`` of every leaf with
        ``stop_gradient=False``.

        ``grad_tensor`` is the gradient of self (ones when None). The graph's saved
        tensors are freed afterwards unless ``retain_graph=True``; backward through a
        freed graph raises.
        """
        if _backward_walk == NULL:
            import fastop.autograd._backward    # installs the walk
        _backward_walk((self,), [grad_tensor], retain_graph, False, None, False)

    @property
    def grad(self):
        """The accumulated gradient (a Tensor of this tensor's shape and dtype), or None."""
        if self._grad_zeroed:
            zeros = full_tensor(self.view.ndim, self.view.shape, self.view.dtype, 0.0)
            if self._grad_zeroed:   # still: a big fill lets another thread's backward in
                self._grad = zeros
                self._grad_zeroed = False
        return self._grad

    @grad.setter
    def grad(self, value):
        cdef Tensor g
        self._grad_zeroed = False
        self._grad_version += 1
        if value is None:
            self._grad = None
            return
        if not isinstance(value, Tensor):
            raise TypeError(f"Tensor.grad: expected a Tensor of shape {self.shape} and dtype "
                            f"{self.dtype.name}, or None; got {type(value).__name__}")
        g = <Tensor>value
        if g.shape != self.shape or g.view.dtype != self.view.dtype:
            raise ValueError(f"Tensor.grad: expected a Tensor of shape {self.shape} and dtype "
                             f"{self.dtype.name} (this tensor's), got shape {g.shape} and "
                             f"dtype {g.dtype.name}")
        self._grad = g

    def clear_grad(self, bint set_to_zero=True):
        """Reset ``.grad``: to zeros (``set_to_zero``, Paddle's default) or None.

        The zeros are made when ``.grad`` is next read: a backward pass that comes first
        gives the leaf its gradient as is, instead of adding it to zeros (a training
        step's clear_grad + backward thereby saves a fill and an add per parameter)."""
        self._grad_zeroed = set_to_zero and (self._grad is not None or self._grad_zeroed)
        self._grad = None

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
        return dispatch(_op(CAST), (self,), {"dtype": as_dtype(dtype)})

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
        return _indexing.getitem(self, key)

    def __setitem__(self, key, value):
        """Write values in place (numpy indexing rules). On a non-leaf that takes
        gradients the write is recorded (the overwritten elements pass no gradient
        back); a leaf that takes gradients is written only under ``no_grad``, as in
        PaddlePaddle."""
        if self.requires_grad and grad_enabled():
            from fastop.tensor.inplace import setitem_recorded   # the eager layer above
            setitem_recorded(self, key, value)
            return
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

    def __mod__(self, other):
        return _binary(MOD, self, other)

    def __rmod__(self, other):
        return _binary(MOD, other, self)

    def __matmul__(self, other):
        return _binary(MATMUL, self, other)

    def __rmatmul__(self, other):
        return _binary(MATMUL, other, self)

    def __neg__(self):
        return dispatch(_op(NEG), (self,), None)

    def __pos__(self):
        return self

    def __abs__(self):
        return dispatch(_op(ABS), (self,), None)

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

    @property
    def T(self) -> Tensor:
        """The axes reversed (a view)."""
        return dispatch(_op(TRANSPOSE), (self,), {"perm": list(range(self.view.ndim - 1, -1, -1))})


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


# --------------------------------------------------------------------------- retain_grads

def retain_grads(Tensor self) -> None:
    """Keep this tensor's gradient in ``.grad`` after backward also when it is not a
    leaf (PaddlePaddle's ``Tensor.retain_grads``): each backward pass through it adds
    its gradient there, as for a leaf. Leaves keep theirs anyway; a tensor no gradient
    flows into (stop_gradient=True) gets none."""
    if self._node is not None:
        self._retains_grad = True


# --------------------------------------------------------------------------- in-place ops
# PaddlePaddle's in-place tensor methods (``x.add_(y)``, ``x.exp_()``...,
# fastop.tensor.inplace) compute the out-of-place op through the one dispatch entry,
# from inplace_source(x), then inplace_store writes the value into x's memory.

def inplace_source(Tensor x, str who, bint same_memory=False) -> Tensor:
    """What an in-place op on x computes from: x itself when no gradient is recorded
    for x; for a non-leaf that takes gradients, a stand-in for x's value before the
    change, carrying x's place in the graph (inplace_store then hands x the result's):
    a copy, so a gradient that reads the op's input reads the old value, as in
    PaddlePaddle; a view of x's memory (`same_memory`) for the shape methods. A leaf
    that takes gradients is refused with PaddlePaddle's error (a ValueError): its
    .grad would be the gradient of a value it no longer holds."""
    cdef Tensor old
    if not x.requires_grad or not grad_enabled():
        return x
    if x._node is None:
        raise ValueError(f"{who}: (InvalidArgument) Leaf Var ({x.name or ''}) that doesn't "
                         f"stop gradient can't use inplace strategy. x (shape {x.shape}) "
                         f"is a leaf with stop_gradient=False, such as a parameter: change "
                         f"it under fastop.no_grad(), or use the out-of-place "
                         f"{who.rstrip('_')}")
    old = view_of(x) if same_memory else <Tensor>x.copy()
    old.requires_grad = True
    old._node = x._node
    old._out_index = x._out_index
    return old


def inplace_store(Tensor x, Tensor value, str who) -> Tensor:
    """Make x hold `value` (the op's result) and return x: a view of x's elements
    (squeeze_, reshape_...) gives x its shape; any other value is written into x's
    memory, and must have x's shape and dtype. The change is counted (a value autograd
    saved of x before is refused at backward) and x takes value's place in the graph
    when the op was recorded."""
    if value.view.data == x.view.data and value.view.size == x.view.size \
            and value.view.dtype == x.view.dtype:
        take_view_shape(x, value)
    else:
        _write_values(x, value, who)
    if value._node is not None:
        x.requires_grad = True
        x._node = value._node
        x._out_index = value._out_index
    return x


cdef int _write_values(Tensor x, Tensor value, str who) except -1:
    """Copy value into x's memory (of x's shape and dtype), counted as a write."""
    if value.shape != x.shape:
        raise ValueError(f"{who}: the result has shape {value.shape}, but an in-place op "
                         f"keeps x's shape {x.shape} (the other operand may not broadcast "
                         f"x to a larger shape)")
    if value.view.dtype != x.view.dtype:
        raise TypeError(f"{who}: the result is {value.dtype.name}, but an in-place op keeps "
                        f"x's dtype {x.dtype.name}; cast the other operand, or use the "
                        f"out-of-place {who.rstrip('_')}")
    if x.readonly:
        raise ValueError(f"{who}: x (shape {x.shape}) is read-only")
    np.copyto(as_ndarray(x), as_ndarray(value))
    bump_version(x)
    return 0


add_methods({"retain_grads": retain_grads})

