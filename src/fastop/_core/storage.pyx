# cython: freethreading_compatible = False
"""Tensor storage: a strided n-d view over 64-byte-aligned memory it owns, or over
another object's buffer (numpy array, DLPack producer) that it keeps alive.

DenseTensor is what kernels, the executor and Python ops exchange. It exports the
buffer protocol, ``__array__`` and ``__dlpack__``, so ``np.asarray(t)`` shares memory
with ``t``, and :func:`from_numpy`/:func:`from_dlpack` share memory the other way.
Views (reshape of contiguous data, transpose, basic slicing, broadcast) never copy.
"""
from cpython.buffer cimport (PyBUF_C_CONTIGUOUS, PyBUF_F_CONTIGUOUS, PyBUF_ANY_CONTIGUOUS,
                             PyBUF_FORMAT, PyBUF_ND, PyBUF_STRIDES, PyBUF_WRITABLE,
                             PyBUF_RECORDS, PyBUF_RECORDS_RO, PyObject_GetBuffer,
                             PyBuffer_Release)
from cpython.pycapsule cimport (PyCapsule_New, PyCapsule_GetPointer, PyCapsule_IsValid,
                                PyCapsule_SetName, PyCapsule_GetName, PyCapsule_CheckExact)
from cpython.ref cimport Py_INCREF, Py_DECREF, PyObject
from cpython.pyport cimport PY_SSIZE_T_MAX

cdef extern from *:
    # GCC/Clang: a * b into *result; whether it overflowed
    bint __builtin_mul_overflow(ptrdiff_t a, ptrdiff_t b, ptrdiff_t* result) nogil
from libc.stdint cimport int64_t, uint8_t, uint16_t, int32_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc

cdef extern from "stdlib.h" nogil:
    int posix_memalign(void** memptr, size_t alignment, size_t size)

cdef extern from "sys/mman.h" nogil:
    int madvise(void* addr, size_t length, int advice)
    int MADV_HUGEPAGE

# Large buffers are whole 2 MiB pages, 2 MiB-aligned and marked for transparent huge
# pages, as numpy does: first-touch page faults otherwise cost as much as an elementwise
# kernel on 1e7 floats. Freed ones are kept for reuse (see "large blocks" below).
cdef size_t HUGE_PAGE = 2 << 20
cdef size_t HUGE_PAGE_THRESHOLD = 4 << 20
from libc.string cimport memcpy, memset

import operator

import numpy as np
cimport numpy as cnp

cnp.import_array()

__all__ = ["DType", "DenseTensor", "bool_", "int32", "int64", "float32", "float64",
           "float16", "uint8", "int8", "int16", "DTYPE_NAMES", "as_dtype", "empty", "zeros", "from_numpy", "from_dlpack", "empty_cache",
           "take_view_shape",
           "MAX_NDIM"]

MAX_NDIM = FASTOP_MAX_NDIM
cdef ptrdiff_t ALIGNMENT = 64
cdef const char* FORMATS[FASTOP_NUM_DTYPES]
FORMATS[:] = [b"?", b"B", b"b", b"h", b"i", b"q", b"f", b"d", b"e"]


# --------------------------------------------------------------------------- dtypes

cdef class DType:
    """A fastop element type. Compares equal to its name and to the numpy dtype."""

    def __init__(self, int code, str name):
        self.code = code
        self.name = name
        self.itemsize = itemsize_of(code)
        self.numpy_dtype = np.dtype("bool" if name == "bool" else name)

    def __eq__(self, other):
        if isinstance(other, DType):
            return (<DType>other).code == self.code
        try:
            return as_dtype(other).code == self.code
        except (TypeError, ValueError):
            return NotImplemented

    def __hash__(self):
        return hash(self.name)

    def __repr__(self):
        return f"fastop.{self.name}"

    def __str__(self):
        return self.name

    def __reduce__(self):
        return (as_dtype, (self.name,))

    @property
    def is_floating(self):
        return self.code == FASTOP_FLOAT32 or self.code == FASTOP_FLOAT64 \
            or self.code == FASTOP_FLOAT16

    @property
    def is_storage_only(self):
        """Whether kernels compute in this dtype (False for float16, which tensors hold
        and `cast` converts, and ops compute in float32)."""
        return self.code >= FASTOP_NUM_COMPUTE_DTYPES


bool_ = DType(FASTOP_BOOL, "bool")
uint8 = DType(FASTOP_UINT8, "uint8")
int8 = DType(FASTOP_INT8, "int8")
int16 = DType(FASTOP_INT16, "int16")
int32 = DType(FASTOP_INT32, "int32")
int64 = DType(FASTOP_INT64, "int64")
float32 = DType(FASTOP_FLOAT32, "float32")
float64 = DType(FASTOP_FLOAT64, "float64")
float16 = DType(FASTOP_FLOAT16, "float16")
cdef tuple DTYPES = (bool_, uint8, int8, int16, int32, int64, float32, float64, float16)
DTYPE_NAMES = tuple([d.name for d in DTYPES])
cdef dict _BY_NAME = {d.name: d for d in DTYPES}
_BY_NAME.update({"bool_": bool_, "float": float32, "double": float64, "int": int64,
                 "long": int64, "fp32": float32, "fp64": float64, "half": float16,
                 "fp16": float16})


cdef DType dtype_from_code(int code):
    return <DType>DTYPES[code]


def as_dtype(dtype) -> DType:
    """Resolve a dtype given as DType, name ('float32'), numpy dtype or Python type."""
    if isinstance(dtype, DType):
        return dtype
    if isinstance(dtype, str):
        found = _BY_NAME.get(dtype.lower().replace("paddle.", "").replace("fastop.", ""))
        if found is not None:
            return found
    elif dtype is float:
        return float32
    elif dtype is int:
        return int64
    elif dtype is bool:
        return bool_
    try:
        name = np.dtype(dtype).name
    except TypeError:
        raise TypeError(f"expected a dtype (one of {[d.name for d in DTYPES]}), "
                        f"got {dtype!r}") from None
    if name in _BY_NAME:
        return _BY_NAME[name]
    raise TypeError(f"unsupported dtype {name!r}: fastop supports "
                    f"{[d.name for d in DTYPES]}")


cdef int dtype_code(object dtype) except -1:
    return (<DType>as_dtype(dtype)).code


cdef int _code_from_format(const char* fmt, Py_ssize_t itemsize) except -1:
    """Map a buffer-protocol struct format to a dtype code (native byte order only)."""
    cdef char c = fmt[0]
    if c == b'@' or c == b'=' or c == b'<':
        c = fmt[1]
    elif c == b'>' or c == b'!':
        raise TypeError("big-endian buffers are not supported")
    if c == b'?':
        return FASTOP_BOOL
    if c == b'B' and itemsize == 1:
        return FASTOP_UINT8
    if c == b'b' and itemsize == 1:
        return FASTOP_INT8
    if c == b'e' and itemsize == 2:
        return FASTOP_FLOAT16
    if c == b'f' and itemsize == 4:
        return FASTOP_FLOAT32
    if c == b'd' and itemsize == 8:
        return FASTOP_FLOAT64
    if c in (b'i', b'l', b'q', b'h'):
        if itemsize == 2:
            return FASTOP_INT16
        if itemsize == 4:
            return FASTOP_INT32
        if itemsize == 8:
            return FASTOP_INT64
    raise TypeError(f"unsupported buffer format {fmt.decode()!r} (itemsize {itemsize}): "
                    f"fastop supports {', '.join(DTYPE_NAMES)}")


# --------------------------------------------------------------------------- view helpers

cdef bint view_is_contiguous(const fastop_view* v) noexcept nogil:
    cdef ptrdiff_t expected = itemsize_of(v.dtype)
    cdef int i
    if v.size <= 1:
        return True
    for i in range(v.ndim - 1, -1, -1):
        if v.shape[i] != 1:
            if v.strides[i] != expected:
                return False
            expected *= v.shape[i]
    return True


cdef void view_set_contiguous_strides(fastop_view* v) noexcept nogil:
    cdef ptrdiff_t stride = itemsize_of(v.dtype)
    cdef ptrdiff_t size = 1
    cdef int i
    for i in range(v.ndim - 1, -1, -1):
        v.strides[i] = stride
        stride *= v.shape[i]
        size *= v.shape[i]
    v.size = size


cdef bint shape_fits(int ndim, const ptrdiff_t* shape, int dtype) noexcept nogil:
    """Whether a tensor of `shape` takes at most PY_SSIZE_T_MAX bytes (checked on the
    nonzero dims, as numpy does): beyond, the product of the dims wraps around to a
    small size and indexing runs past the buffer. No division: this runs on every
    kernel call."""
    cdef ptrdiff_t nbytes = itemsize_of(dtype)
    cdef int i
    for i in range(ndim):
        if shape[i] > 0 and __builtin_mul_overflow(nbytes, shape[i], &nbytes):
            return False
    return True


cdef int _raise_too_big(int ndim, const ptrdiff_t* shape, int dtype) except -1:
    raise ValueError(f"shape {[shape[i] for i in range(ndim)]} of "
                     f"{dtype_from_code(dtype).name} is too big: more than "
                     f"{PY_SSIZE_T_MAX} bytes")


cdef ptrdiff_t checked_size(int ndim, const ptrdiff_t* shape, int dtype) except -1:
    """The element count of `shape`; ValueError when it does not fit (shape_fits)."""
    cdef ptrdiff_t size = 1
    cdef int i
    if not shape_fits(ndim, shape, dtype):
        _raise_too_big(ndim, shape, dtype)
    for i in range(ndim):
        size *= shape[i]
    return size


cdef void _extent(const fastop_view* v, char** lo, char** hi) noexcept nogil:
    """The bytes a (non-empty) view touches: [lo, hi)."""
    cdef int i
    cdef ptrdiff_t step
    lo[0] = v.data
    hi[0] = v.data + itemsize_of(v.dtype)
    for i in range(v.ndim):
        step = (v.shape[i] - 1) * v.strides[i]
        if step < 0:
            lo[0] += step
        else:
            hi[0] += step


cdef bint views_overlap(const fastop_view* a, const fastop_view* b) noexcept nogil:
    """Whether two views may share bytes (their extents intersect)."""
    cdef char* a_lo
    cdef char* a_hi
    cdef char* b_lo
    cdef char* b_hi
    if a.size == 0 or b.size == 0:
        return False
    _extent(a, &a_lo, &a_hi)
    _extent(b, &b_lo, &b_hi)
    return a_lo < b_hi and b_lo < a_hi


cdef bint view_same_layout(const fastop_view* a, const fastop_view* b) noexcept nogil:
    """Whether two views are the same elements: data pointer, dtype, shape, strides."""
    cdef int i
    if a.data != b.data or not view_same_meta(a, b):
        return False
    for i in range(a.ndim):
        if a.shape[i] != 1 and a.strides[i] != b.strides[i]:
            return False
    return True


cdef int view_assign(const fastop_view* src, fastop_view* dst) noexcept nogil:
    """Copy src into dst (same shape and dtype) when their memory may overlap: nothing
    for the same elements, a staging copy for any other overlap. -1: out of memory."""
    cdef fastop_view staged
    if view_same_layout(src, dst):
        return 0
    if not views_overlap(src, dst):
        view_copy(src, dst)
        return 0
    staged = src[0]
    view_set_contiguous_strides(&staged)
    staged.data = <char*>malloc(staged.size * itemsize_of(staged.dtype))
    if staged.data == NULL:
        return -1
    view_copy(src, &staged)
    view_copy(&staged, dst)
    free(staged.data)
    return 0


cdef void view_copy(const fastop_view* src, fastop_view* dst) noexcept nogil:
    """Copy src into dst element by element (same shape and dtype, any strides)."""
    cdef ptrdiff_t itemsize = itemsize_of(src.dtype)
    cdef ptrdiff_t index[FASTOP_MAX_NDIM]
    cdef ptrdiff_t i, n = src.size, inner, s_in, d_in
    cdef int nd = src.ndim, d
    cdef char* sp
    cdef char* dp
    if n == 0:
        return
    if view_is_contiguous(src) and view_is_contiguous(dst):
        memcpy(dst.data, src.data, n * itemsize)
        return
    if nd == 0:
        memcpy(dst.data, src.data, itemsize)
        return
    memset(index, 0, sizeof(index))
    inner = src.shape[nd - 1]
    s_in = src.strides[nd - 1]
    d_in = dst.strides[nd - 1]
    while True:
        sp = src.data
        dp = dst.data
        for d in range(nd - 1):
            sp += index[d] * src.strides[d]
            dp += index[d] * dst.strides[d]
        if itemsize == 4:
            for i in range(inner):
                (<uint32_t*>(dp + i * d_in))[0] = (<uint32_t*>(sp + i * s_in))[0]
        elif itemsize == 8:
            for i in range(inner):
                (<uint64_t*>(dp + i * d_in))[0] = (<uint64_t*>(sp + i * s_in))[0]
        elif itemsize == 2:
            for i in range(inner):
                (<uint16_t*>(dp + i * d_in))[0] = (<uint16_t*>(sp + i * s_in))[0]
        else:
            for i in range(inner):
                (<uint8_t*>(dp + i * d_in))[0] = (<uint8_t*>(sp + i * s_in))[0]
        d = nd - 2
        while d >= 0:
            index[d] += 1
            if index[d] < src.shape[d]:
                break
            index[d] = 0
            d -= 1
        if d < 0:
            return



cdef int _normalize_shape(object shape, ptrdiff_t* out, ptrdiff_t known_size=-1) except -1:
    """Read a shape (int or sequence, one -1 allowed when known_size is given)."""
    if isinstance(shape, (int, np.integer)):
        shape = (shape,)
    cdef int ndim = len(shape), i, infer = -1
    cdef ptrdiff_t prod = 1
    if ndim > FASTOP_MAX_NDIM:
        raise ValueError(f"at most {FASTOP_MAX_NDIM} dimensions are supported, got {ndim}")
    for i in range(ndim):
        try:
            out[i] = operator.index(shape[i])
        except TypeError:
            raise TypeError(f"invalid shape {list(shape)}: dimensions must be integers, "
                            f"got {shape[i]!r}") from None
        if out[i] == -1 and known_size >= 0 and infer < 0:
            infer = i
        elif out[i] < 0:
            raise ValueError(f"invalid shape {list(shape)}: dimensions must be >= 0"
                             + (" (one -1 may be inferred)" if known_size >= 0 else ""))
        else:
            prod *= out[i]
    if infer >= 0:
        if prod == 0 or known_size % prod != 0:
            raise ValueError(f"cannot reshape a tensor of {known_size} elements "
                             f"into shape {list(shape)}")
        out[infer] = known_size // prod
    return ndim


# --------------------------------------------------------------------------- owners

cdef class _HeldBuffer:
    """Holds another object's Py_buffer for as long as a DenseTensor borrows it."""
    cdef Py_buffer buf
    cdef bint held

    def __dealloc__(self):
        if self.held:
            PyBuffer_Release(&self.buf)


cdef extern from *:
    """
    typedef struct { void *data; int64_t device_type_and_id_pad[1]; } _unused_fastop;
    typedef struct { int32_t device_type; int32_t device_id; } DLDevice;
    typedef struct { uint8_t code; uint8_t bits; uint16_t lanes; } DLDataType;
    typedef struct {
        void *data; DLDevice device; int32_t ndim; DLDataType dtype;
        int64_t *shape; int64_t *strides; uint64_t byte_offset;
    } DLTensor;
    typedef struct DLManagedTensor {
        DLTensor dl_tensor; void *manager_ctx;
        void (*deleter)(struct DLManagedTensor *self);
    } DLManagedTensor;
    typedef struct { uint32_t major; uint32_t minor; } DLPackVersion;
    typedef struct DLManagedTensorVersioned {
        DLPackVersion version; void *manager_ctx;
        void (*deleter)(struct DLManagedTensorVersioned *self);
        uint64_t flags; DLTensor dl_tensor;
    } DLManagedTensorVersioned;
    """
    ctypedef struct DLDevice:
        int32_t device_type
        int32_t device_id
    ctypedef struct DLDataType:
        uint8_t code
        uint8_t bits
        uint16_t lanes
    ctypedef struct DLTensor:
        void* data
        DLDevice device
        int32_t ndim
        DLDataType dtype
        int64_t* shape
        int64_t* strides
        uint64_t byte_offset
    ctypedef struct DLManagedTensor:
        DLTensor dl_tensor
        void* manager_ctx
        void (*deleter)(DLManagedTensor*) noexcept
    ctypedef struct DLPackVersion:
        uint32_t major
        uint32_t minor
    ctypedef struct DLManagedTensorVersioned:
        DLPackVersion version
        void* manager_ctx
        void (*deleter)(DLManagedTensorVersioned*) noexcept
        uint64_t flags
        DLTensor dl_tensor

cdef enum:
    DLPACK_FLAG_READ_ONLY = 1
    kDLCPU = 1
    kDLInt = 0
    kDLUInt = 1
    kDLFloat = 2
    kDLBool = 6


cdef class _DLPackOwner:
    """Calls the producer's deleter when the last consumer view dies."""
    cdef DLManagedTensor* managed
    cdef DLManagedTensorVersioned* versioned

    cdef object fastop_source(self):
        """The DenseTensor that exported the capsule when fastop did, else None."""
        return _fastop_exporter(self.managed, self.versioned)

    def __dealloc__(self):
        if self.managed is not NULL and self.managed.deleter is not NULL:
            self.managed.deleter(self.managed)
        if self.versioned is not NULL and self.versioned.deleter is not NULL:
            self.versioned.deleter(self.versioned)


cdef void _dlpack_deleter(DLManagedTensor* managed) noexcept with gil:
    Py_DECREF(<object>managed.manager_ctx)
    free(managed)


cdef void _dlpack_deleter_versioned(DLManagedTensorVersioned* managed) noexcept with gil:
    Py_DECREF(<object>managed.manager_ctx)
    free(managed)


cdef void _dlpack_capsule_destructor(object capsule) noexcept:
    # Only called for an unconsumed capsule (consumers rename it to "used_dltensor").
    if PyCapsule_IsValid(capsule, b"dltensor"):
        managed = <DLManagedTensor*>PyCapsule_GetPointer(capsule, b"dltensor")
        managed.deleter(managed)


cdef void _dlpack_versioned_capsule_destructor(object capsule) noexcept:
    if PyCapsule_IsValid(capsule, b"dltensor_versioned"):
        managed = <DLManagedTensorVersioned*>PyCapsule_GetPointer(capsule, b"dltensor_versioned")
        managed.deleter(managed)


# --------------------------------------------------------------------------- DenseTensor

cdef class DenseTensor:
    """A strided n-d array of one dtype: fastop's tensor storage.

    Create with :func:`empty`, :func:`zeros`, :func:`from_numpy` or :func:`from_dlpack`.
    ``np.asarray(t)`` returns a numpy array sharing ``t``'s memory.
    """

    def __cinit__(self):
        self.view.ndim = 0
        self.view.size = 1
        self.view.data = NULL
        self.view.dtype = FASTOP_FLOAT32
        self._alloc = NULL
        self.owner = None
        self.readonly = False

    def __dealloc__(self):
        if self._alloc is not NULL:
            if self._small_class:
                _release_small(self._alloc, self._small_class - 1)
            elif self._large_bytes:
                _release_large(self._alloc, self._large_bytes)
            else:
                free(self._alloc)
            self._alloc = NULL

    # -- metadata --------------------------------------------------------------
    @property
    def shape(self) -> list:
        """The shape as a list of ints (PaddlePaddle's convention)."""
        return [self.view.shape[i] for i in range(self.view.ndim)]

    @property
    def ndim(self) -> int:
        return self.view.ndim

    @property
    def size(self) -> int:
        return self.view.size

    @property
    def dtype(self) -> DType:
        return <DType>DTYPES[self.view.dtype]

    @property
    def strides(self) -> tuple:
        """Strides in bytes, as numpy reports them."""
        return tuple(self.view.strides[i] for i in range(self.view.ndim))

    @property
    def itemsize(self) -> int:
        return itemsize_of(self.view.dtype)

    @property
    def nbytes(self) -> int:
        return self.view.size * itemsize_of(self.view.dtype)

    @property
    def offset(self) -> int:
        """Byte offset of element [0, ..., 0] from the start of the owning allocation."""
        base = self
        while isinstance(base, DenseTensor) and (<DenseTensor>base).owner is not None \
                and isinstance((<DenseTensor>base).owner, DenseTensor):
            base = (<DenseTensor>base).owner
        if isinstance(base, DenseTensor) and (<DenseTensor>base)._alloc is not NULL:
            return <ptrdiff_t>(self.view.data - <char*>(<DenseTensor>base)._alloc)
        return 0

    @property
    def data_ptr(self) -> int:
        """Address of element [0, ..., 0] (for zero-copy checks and debugging)."""
        return <size_t>self.view.data

    def is_contiguous(self) -> bool:
        return view_is_contiguous(&self.view)

    def __len__(self):
        if self.view.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self.view.shape[0]

    # -- numpy interop -----------------------------------------------------------
    def __getbuffer__(self, Py_buffer* buffer, int flags):
        check_initialised(self)
        cdef bint contiguous = view_is_contiguous(&self.view)
        if (flags & PyBUF_WRITABLE) == PyBUF_WRITABLE and self.readonly:
            raise BufferError("this tensor is a read-only view (e.g. a broadcast)")
        if ((flags & PyBUF_C_CONTIGUOUS) == PyBUF_C_CONTIGUOUS
                or (flags & PyBUF_ANY_CONTIGUOUS) == PyBUF_ANY_CONTIGUOUS
                or (flags & PyBUF_STRIDES) != PyBUF_STRIDES) and not contiguous:
            raise BufferError("tensor is not C-contiguous; call .contiguous() first")
        if (flags & PyBUF_F_CONTIGUOUS) == PyBUF_F_CONTIGUOUS and self.view.ndim > 1 \
                and not contiguous:
            raise BufferError("tensor is not Fortran-contiguous")
        buffer.buf = self.view.data
        buffer.obj = self
        buffer.len = self.view.size * itemsize_of(self.view.dtype)
        buffer.readonly = self.readonly
        buffer.itemsize = itemsize_of(self.view.dtype)
        buffer.format = <char*>FORMATS[self.view.dtype] if (flags & PyBUF_FORMAT) else NULL
        buffer.ndim = self.view.ndim
        buffer.shape = <Py_ssize_t*>self.view.shape if (flags & PyBUF_ND) else NULL
        buffer.strides = <Py_ssize_t*>self.view.strides if (flags & PyBUF_STRIDES) else NULL
        buffer.suboffsets = NULL
        buffer.internal = NULL

    def __releasebuffer__(self, Py_buffer* buffer):
        pass

    def __array__(self, dtype=None, copy=None):
        arr = as_ndarray(self)
        if dtype is not None and np.dtype(dtype) != arr.dtype:
            if copy is False:
                raise ValueError("a dtype conversion needs a copy")
            return arr.astype(dtype)
        if copy:
            return arr.copy()
        return arr

    def numpy(self, set_to_1d=False):
        """A numpy array sharing this tensor's memory (no copy). `set_to_1d` is
        PaddlePaddle 2.5's flag, which PaddlePaddle 3 accepts and ignores, as here: a 0-D
        tensor gives a 0-D array (``x.numpy(False)`` in scripts of that time)."""
        return as_ndarray(self)

    def __dlpack_device__(self):
        return (kDLCPU, 0)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """Export as a DLPack capsule: versioned (1.0, with the read-only flag) when the
        consumer asks for ``max_version >= (1, 0)``, else the legacy unversioned form."""
        if dl_device is not None and tuple(dl_device) != (kDLCPU, 0):
            raise BufferError("fastop tensors live on the CPU")
        check_initialised(self)
        source = self.copy() if copy else self
        cdef bint versioned = max_version is not None and max_version[0] >= 1
        if not versioned and (<DenseTensor>source).readonly:
            # the legacy capsule has no read-only flag: its consumer would write through
            raise BufferError("__dlpack__: a read-only tensor cannot be exported as a "
                              "legacy (unversioned) DLPack capsule; pass "
                              "max_version=(1, 0) or copy=True")
        cdef int nd = self.view.ndim
        cdef size_t head = sizeof(DLManagedTensorVersioned) if versioned else sizeof(DLManagedTensor)
        cdef char* block = <char*>malloc(head + 2 * (nd + 1) * sizeof(int64_t))
        if block is NULL:
            raise MemoryError()
        cdef DLTensor* dl
        cdef DLManagedTensor* legacy
        cdef DLManagedTensorVersioned* modern
        if versioned:
            modern = <DLManagedTensorVersioned*>block
            modern.version.major = 1
            modern.version.minor = 0
            modern.flags = (DLPACK_FLAG_READ_ONLY if (<DenseTensor>source).readonly else 0) \
                | (2 if copy else 0)
            modern.manager_ctx = <void*>source
            modern.deleter = _dlpack_deleter_versioned
            dl = &modern.dl_tensor
        else:
            legacy = <DLManagedTensor*>block
            legacy.manager_ctx = <void*>source
            legacy.deleter = _dlpack_deleter
            dl = &legacy.dl_tensor
        _fill_dltensor(<DenseTensor>source, dl, <int64_t*>(block + head))
        Py_INCREF(source)
        if versioned:
            return PyCapsule_New(block, b"dltensor_versioned",
                                 <void(*)(object) noexcept>_dlpack_versioned_capsule_destructor)
        return PyCapsule_New(block, b"dltensor",
                             <void(*)(object) noexcept>_dlpack_capsule_destructor)

    # -- views -------------------------------------------------------------------
    cdef DenseTensor _new_view(self):
        """A new tensor of the same Python type sharing this one's memory."""
        cdef DenseTensor out = type(self).__new__(type(self))
        out.view = self.view
        out.owner = self.owner if isinstance(self.owner, DenseTensor) else self
        out.readonly = self.readonly
        return out

    def reshape(self, *shape):
        """A view with a new shape (one -1 inferred); copies only if not contiguous."""
        if len(shape) == 1 and not isinstance(shape[0], int):
            shape = tuple(shape[0])
        cdef DenseTensor src = self if view_is_contiguous(&self.view) else self.contiguous()
        cdef ptrdiff_t dims[FASTOP_MAX_NDIM]
        cdef int nd = _normalize_shape(shape, dims, src.view.size), i
        if checked_size(nd, dims, src.view.dtype) != src.view.size:
            raise ValueError(f"cannot reshape a tensor of shape {self.shape} "
                             f"({self.view.size} elements) into shape {list(shape)}")
        cdef DenseTensor out = src._new_view()
        out.view.ndim = nd
        for i in range(nd):
            out.view.shape[i] = dims[i]
        view_set_contiguous_strides(&out.view)
        return out

    def transpose(self, *perm):
        """A view with permuted axes (reversed when no permutation is given)."""
        if len(perm) == 1 and not isinstance(perm[0], int):
            perm = tuple(perm[0])
        cdef int nd = self.view.ndim, i, p
        if not perm:
            perm = tuple(range(nd - 1, -1, -1))
        if sorted([(q + nd) if q < 0 else q for q in perm]) != list(range(nd)):
            raise ValueError(f"transpose: perm {list(perm)} is not a permutation of the "
                             f"{nd} axes of a tensor of shape {self.shape}")
        cdef DenseTensor out = self._new_view()
        for i in range(nd):
            p = perm[i]
            if p < 0:
                p += nd
            out.view.shape[i] = self.view.shape[p]
            out.view.strides[i] = self.view.strides[p]
        return out

    permute = transpose

    @property
    def T(self):
        return self.transpose()

    def broadcast_to(self, shape):
        """A read-only view expanded to `shape` by numpy's rules (stride 0, no copy)."""
        cdef ptrdiff_t dims[FASTOP_MAX_NDIM]
        cdef int nd = _normalize_shape(shape, dims), i, j
        if nd < self.view.ndim:
            raise ValueError(f"cannot broadcast shape {self.shape} to {list(shape)}")
        cdef DenseTensor out = self._new_view()
        out.view.ndim = nd
        for i in range(nd):
            j = i - (nd - self.view.ndim)
            out.view.shape[i] = dims[i]
            if j < 0:
                out.view.strides[i] = 0
            elif self.view.shape[j] == dims[i]:
                out.view.strides[i] = self.view.strides[j]
            elif self.view.shape[j] == 1:
                out.view.strides[i] = 0
            else:
                raise ValueError(f"cannot broadcast shape {self.shape} to {list(shape)}")
        out.view.size = checked_size(nd, dims, self.view.dtype)
        out.readonly = True
        return out

    def __getitem__(self, key):
        """Basic indexing (ints, slices, None, Ellipsis) returns a view."""
        return self._basic_index(key)

    def _basic_index(self, key):
        if not isinstance(key, tuple):
            key = (key,)
        n_specified = sum(1 for k in key if k is not None and k is not Ellipsis)
        if n_specified > self.view.ndim:
            raise IndexError(f"too many indices ({n_specified}) for a tensor of "
                             f"shape {self.shape}")
        expanded = []
        for k in key:
            if k is Ellipsis:
                expanded.extend([slice(None)] * (self.view.ndim - n_specified))
                n_specified = self.view.ndim
            else:
                expanded.append(k)
        cdef int n_new = 0, n_dropped = 0      # (a loop: a generator would allocate)
        for k in expanded:
            if k is None:
                n_new += 1
            elif isinstance(k, (int, np.integer)) and not isinstance(k, bool):
                n_dropped += 1
        if self.view.ndim + n_new - n_dropped > FASTOP_MAX_NDIM:
            raise IndexError(f"indexing a tensor of shape {self.shape} with {key!r} would "
                             f"give {self.view.ndim + n_new - n_dropped} dims; at most "
                             f"{FASTOP_MAX_NDIM} are supported")
        cdef DenseTensor out = self._new_view()
        cdef int src_axis = 0, nd = 0
        cdef ptrdiff_t start, stop, step, length, idx
        cdef char* data = self.view.data
        for k in expanded:
            if k is None:
                out.view.shape[nd] = 1
                out.view.strides[nd] = 0
                nd += 1
            elif isinstance(k, slice):
                start, stop, step = k.indices(self.view.shape[src_axis])
                length = len(range(start, stop, step))
                if length > 0:
                    data += start * self.view.strides[src_axis]
                out.view.shape[nd] = length
                out.view.strides[nd] = self.view.strides[src_axis] * step
                nd += 1
                src_axis += 1
            elif isinstance(k, (int, np.integer)) and not isinstance(k, bool):
                idx = k
                if idx < 0:
                    idx += self.view.shape[src_axis]
                if idx < 0 or idx >= self.view.shape[src_axis]:
                    raise IndexError(f"index {k} is out of bounds for axis {src_axis} "
                                     f"with size {self.view.shape[src_axis]}")
                data += idx * self.view.strides[src_axis]
                src_axis += 1
            else:
                raise IndexError(f"unsupported index {k!r}: DenseTensor takes ints, "
                                 f"slices, None and Ellipsis")
        while src_axis < self.view.ndim:
            out.view.shape[nd] = self.view.shape[src_axis]
            out.view.strides[nd] = self.view.strides[src_axis]
            nd += 1
            src_axis += 1
        out.view.ndim = nd
        out.view.data = data
        out.view.size = 1
        for i in range(nd):
            out.view.size *= out.view.shape[i]
        return out

    cpdef DenseTensor contiguous(self):
        """This tensor if C-contiguous, else a contiguous copy."""
        if view_is_contiguous(&self.view):
            return self
        return self.copy()

    def copy(self):
        """A contiguous copy that owns its memory."""
        check_initialised(self)
        cdef DenseTensor out = alloc_like(type(self), &self.view)
        with nogil:
            view_copy(&self.view, &out.view)
        return out

    def item(self, *args):
        """An element as a Python scalar: the only one (no arguments), the one at a flat
        index (``item(5)``) or at a position (``item(1, 2)``), as numpy's and
        PaddlePaddle's ``item``."""
        if not args and self.view.size != 1:
            raise ValueError(f"item() needs a tensor of one element, got shape {self.shape}")
        return self.numpy().item(*args)

    def tolist(self):
        return self.numpy().tolist()

    def __repr__(self):
        return f"DenseTensor(shape={self.shape}, dtype={self.dtype.name},\n{self.numpy()!r})"


cdef void _fill_dltensor(DenseTensor t, DLTensor* dl, int64_t* dims) noexcept:
    """Describe t's view in a DLTensor; dims has room for 2 * ndim int64s."""
    cdef int nd = t.view.ndim, i
    cdef ptrdiff_t itemsize = itemsize_of(t.view.dtype)
    cdef int64_t* strides = dims + nd
    for i in range(nd):
        dims[i] = t.view.shape[i]
        strides[i] = t.view.strides[i] // itemsize
    dl.data = t.view.data
    dl.device.device_type = kDLCPU
    dl.device.device_id = 0
    dl.ndim = nd
    dl.dtype.lanes = 1
    dl.dtype.bits = 8 * itemsize
    dl.dtype.code = (kDLBool if t.view.dtype == FASTOP_BOOL else
                     kDLInt if FASTOP_INT8 <= t.view.dtype <= FASTOP_INT64
                     else kDLUInt if t.view.dtype == FASTOP_UINT8 else kDLFloat)
    dl.shape = dims
    dl.strides = strides
    dl.byte_offset = 0


cdef int[FASTOP_NUM_DTYPES] _NPY_TYPES = [cnp.NPY_BOOL, cnp.NPY_UINT8, cnp.NPY_INT8,
                                         cnp.NPY_INT16, cnp.NPY_INT32, cnp.NPY_INT64,
                                         cnp.NPY_FLOAT32, cnp.NPY_FLOAT64, cnp.NPY_FLOAT16]


cdef DenseTensor memory_root(DenseTensor t):
    """The tensor whose memory t views, which keeps the memory's version: t itself
    unless t views another tensor, directly or through what t borrows from it — numpy
    arrays (as_ndarray, np.asarray, numpy views of those), memoryviews and other buffer
    exports, or fastop's own DLPack capsules."""
    cdef object owner = t.owner
    cdef PyObject* base
    while owner is not None:
        if isinstance(owner, DenseTensor):
            t = <DenseTensor>owner
            owner = t.owner
        elif cnp.PyArray_Check(owner):
            base = cnp.PyArray_BASE(<cnp.ndarray>owner)     # NULL: the array owns its data
            owner = <object>base if base != NULL else None
        elif isinstance(owner, memoryview):
            try:
                owner = owner.obj
            except ValueError:                # released: nothing further to follow
                break
        elif isinstance(owner, _HeldBuffer):
            base = <PyObject*>(<_HeldBuffer>owner).buf.obj
            owner = <object>base if base != NULL else None
        elif isinstance(owner, _DLPackOwner):
            owner = (<_DLPackOwner>owner).fastop_source()
        elif PyCapsule_CheckExact(owner):
            owner = _capsule_source(owner)
        else:
            break
    return t


cdef object _capsule_source(object capsule):
    """The DenseTensor that exported a DLPack capsule another library consumed (numpy
    keeps it as an array's base), when fastop made it; else None. Only capsules named as
    DLPack (and numpy) name them are read."""
    cdef const char* name = PyCapsule_GetName(capsule)
    if name == NULL:
        return None
    cdef bytes key = <bytes>name
    if key in (b"dltensor_versioned", b"used_dltensor_versioned",
               b"numpy_dltensor_versioned"):
        return _fastop_exporter(
            NULL, <DLManagedTensorVersioned*>PyCapsule_GetPointer(capsule, name))
    if key in (b"dltensor", b"used_dltensor", b"numpy_dltensor"):
        return _fastop_exporter(<DLManagedTensor*>PyCapsule_GetPointer(capsule, name), NULL)
    return None


cdef object _fastop_exporter(DLManagedTensor* managed, DLManagedTensorVersioned* versioned):
    """The DenseTensor behind a managed DLPack tensor (either version, NULL for the
    other) when fastop's deleter says fastop exported it, else None."""
    if managed is not NULL and managed.deleter == _dlpack_deleter:
        return <object>managed.manager_ctx
    if versioned is not NULL and versioned.deleter == _dlpack_deleter_versioned:
        return <object>versioned.manager_ctx
    return None


cpdef object as_ndarray(DenseTensor t):
    """A numpy array viewing t's memory, made with numpy's C API (no memoryview, no
    format parsing: ~4x cheaper than ``np.asarray(memoryview(t))``); it keeps t alive."""
    if t.view.data == NULL and t.view.size:
        check_initialised(t)
    return ndarray_of(&t.view, t, t.readonly)


cdef int check_initialised(DenseTensor t, str who=None) except -1:
    if t.view.data == NULL and t.view.size:
        raise ValueError(f"{who or type(t).__name__}: this {type(t).__name__} was never "
                         f"initialised (made by __new__ alone, or by a subclass whose "
                         f"__init__ does not call the base class's); create tensors with "
                         f"fastop.to_tensor, or call super().__init__(data)")
    return 0


cdef object ndarray_of(const fastop_view* v, object base, bint readonly):
    """A numpy array over the memory a view describes; `base` keeps it alive."""
    cdef cnp.ndarray arr = cnp.PyArray_New(
        cnp.ndarray, v.ndim, <cnp.npy_intp*>v.shape, _NPY_TYPES[v.dtype],
        <cnp.npy_intp*>v.strides, v.data, 0, 0 if readonly else cnp.NPY_ARRAY_WRITEABLE,
        None)
    cnp.set_array_base(arr, base)
    return arr


# --------------------------------------------------------------------------- small blocks

# Buffers of up to SMALL_CLASSES * SMALL_STEP bytes (a 64-element float32 tensor) are
# recycled: in an eager chain of tiny ops, posix_memalign + free of each result's
# buffer cost more than the op's arithmetic. Freed blocks wait in one stack per size
# class (64, 128, 192, 256 bytes, 64-byte aligned), at most SMALL_KEEP each; the rest
# go back to the C allocator. Only touched with the GIL held (allocation makes a Python
# object; deallocation runs in tp_dealloc).
cdef enum:
    SMALL_STEP = 64
    SMALL_CLASSES = 4
    SMALL_KEEP = 256

cdef void* _small_blocks[SMALL_CLASSES][SMALL_KEEP]
cdef int _small_count[SMALL_CLASSES]


cdef inline void* _take_small(int cls) noexcept:
    """A 64-byte-aligned block of (cls + 1) * SMALL_STEP bytes; NULL if out of memory."""
    cdef void* ptr = NULL
    if _small_count[cls]:
        _small_count[cls] -= 1
        return _small_blocks[cls][_small_count[cls]]
    if posix_memalign(&ptr, ALIGNMENT, (cls + 1) * SMALL_STEP) != 0:
        return NULL
    return ptr


cdef inline void _release_small(void* ptr, int cls) noexcept:
    if _small_count[cls] < SMALL_KEEP:
        _small_blocks[cls][_small_count[cls]] = ptr
        _small_count[cls] += 1
    else:
        free(ptr)


def _small_block_counts() -> list:
    """Free small blocks waiting per size class (64, 128, 192, 256 bytes): a test shim."""
    return [_small_count[i] for i in range(SMALL_CLASSES)]


# --------------------------------------------------------------------------- large blocks

# Buffers of HUGE_PAGE_THRESHOLD or more are kept when freed, at most LARGE_KEEP blocks
# and _large_limit bytes (256 MiB; FASTOP_LARGE_CACHE_MB in the environment sets it,
# 0 turns the cache off), and handed to the next request of the same size in whole huge
# pages, newest first; past the bounds the oldest go back to the C allocator. A fresh
# block costs an mmap, a page fault per huge page, the kernel zeroing every page, and an
# munmap when freed: 1.7 ms of system time for a 40 MB result, more than the kernel that
# fills it. In a VM that reports free memory to its host (virtio-balloon free page
# reporting), a freed block's pages can also be handed back to the host and faulted in
# again one 4 KiB page at a time: eager tanh on 1e7 float32 with two threads took
# 5-18 ms in some processes instead of 2. An allocation the C allocator refuses gives
# the cached blocks back and is tried once more. Same rule as the small blocks: only touched
# with the GIL held.
cdef enum:
    LARGE_KEEP = 8

cdef void* _large_blocks[LARGE_KEEP]      # oldest first
cdef size_t _large_sizes[LARGE_KEEP]
cdef int _large_count = 0
cdef size_t _large_cached = 0             # bytes in the cache


cdef size_t _large_limit_from_env() except? 0:
    import os
    text = os.environ.get("FASTOP_LARGE_CACHE_MB", "256")
    try:
        megabytes = int(text)
        if megabytes < 0:
            raise ValueError
    except ValueError:
        raise ValueError(f"FASTOP_LARGE_CACHE_MB must be a whole number of megabytes "
                         f">= 0, got {text!r}") from None
    return <size_t>megabytes << 20


cdef size_t _large_limit = _large_limit_from_env()


cdef inline size_t _large_capacity(size_t nbytes) noexcept:
    """The bytes a large request gets: whole huge pages."""
    return (nbytes + HUGE_PAGE - 1) // HUGE_PAGE * HUGE_PAGE


cdef void _drop_large(int i) noexcept:
    """Take cached block i out of the cache (the caller frees or hands it out)."""
    global _large_count, _large_cached
    _large_cached -= _large_sizes[i]
    _large_count -= 1
    for i in range(i, _large_count):
        _large_blocks[i] = _large_blocks[i + 1]
        _large_sizes[i] = _large_sizes[i + 1]


cdef void _free_large_blocks() noexcept:
    """Give every cached large block back to the C allocator."""
    while _large_count:
        free(_large_blocks[0])
        _drop_large(0)


cdef void* _take_large(size_t capacity) noexcept:
    """A 2 MiB-aligned block of `capacity` bytes (whole huge pages); NULL if out of memory."""
    cdef void* ptr = NULL
    cdef int i
    for i in range(_large_count - 1, -1, -1):
        if _large_sizes[i] == capacity:
            ptr = _large_blocks[i]
            _drop_large(i)
            return ptr
    if posix_memalign(&ptr, HUGE_PAGE, capacity) != 0:
        return NULL
    madvise(ptr, capacity, MADV_HUGEPAGE)   # advisory: failure only loses the speed-up
    return ptr


cdef void _release_large(void* ptr, size_t capacity) noexcept:
    global _large_count, _large_cached
    if capacity > _large_limit:
        free(ptr)
        return
    while _large_count == LARGE_KEEP or _large_cached + capacity > _large_limit:
        free(_large_blocks[0])
        _drop_large(0)
    _large_blocks[_large_count] = ptr
    _large_sizes[_large_count] = capacity
    _large_count += 1
    _large_cached += capacity


def empty_cache() -> None:
    """Give the freed blocks fastop keeps for reuse back to the C allocator (and so the
    large ones to the system). Live tensors are untouched."""
    cdef int cls
    _free_large_blocks()
    for cls in range(SMALL_CLASSES):
        while _small_count[cls]:
            _small_count[cls] -= 1
            free(_small_blocks[cls][_small_count[cls]])


def _large_block_sizes() -> list:
    """Sizes of the freed large blocks waiting for reuse, oldest first: a test shim."""
    return [_large_sizes[i] for i in range(_large_count)]


# --------------------------------------------------------------------------- constructors

cdef void* _take_block(DenseTensor out, size_t nbytes) noexcept:
    """A 64-byte-aligned block of `nbytes` for `out`, from the cache of its size class
    (recorded in `out`, to give it back there); NULL if out of memory."""
    cdef void* ptr = NULL
    cdef int small
    if nbytes <= SMALL_CLASSES * SMALL_STEP:
        small = (<int>nbytes - 1) // SMALL_STEP if nbytes > 0 else 0
        out._small_class = small + 1
        return _take_small(small)
    if nbytes >= HUGE_PAGE_THRESHOLD:
        if nbytes > (<size_t>-1) - HUGE_PAGE:        # rounding up would wrap
            return NULL
        out._large_bytes = _large_capacity(nbytes)
        return _take_large(out._large_bytes)
    if posix_memalign(&ptr, ALIGNMENT, nbytes) != 0:
        return NULL
    return ptr


cdef DenseTensor alloc_tensor(type cls, int ndim, const ptrdiff_t* shape, int dtype):
    """A new C-contiguous, 64-byte-aligned tensor of type `cls` (uninitialized)."""
    if not shape_fits(ndim, shape, dtype):
        _raise_too_big(ndim, shape, dtype)
    cdef DenseTensor out = cls.__new__(cls)
    cdef int i
    cdef void* ptr
    out.view.ndim = ndim
    out.view.dtype = dtype
    for i in range(ndim):
        out.view.shape[i] = shape[i]
    view_set_contiguous_strides(&out.view)
    cdef size_t nbytes = out.view.size * itemsize_of(dtype)
    ptr = _take_block(out, nbytes)
    if ptr is NULL and _large_count:
        # out of memory while freed large blocks stay mapped: give them back, try again
        _free_large_blocks()
        ptr = _take_block(out, nbytes)
    if ptr is NULL:
        out._small_class = 0
        out._large_bytes = 0
        raise MemoryError(f"cannot allocate {nbytes} bytes for a tensor")
    out._alloc = ptr
    out.view.data = <char*>ptr
    return out


cdef DenseTensor alloc_like(type cls, const fastop_view* like):
    return alloc_tensor(cls, like.ndim, like.shape, like.dtype)


def empty(shape, dtype="float32") -> DenseTensor:
    """An uninitialized contiguous tensor."""
    cdef ptrdiff_t dims[FASTOP_MAX_NDIM]
    cdef int nd = _normalize_shape(shape, dims)
    return alloc_tensor(DenseTensor, nd, dims, dtype_code(dtype))


def zeros(shape, dtype="float32") -> DenseTensor:
    cdef DenseTensor out = empty(shape, dtype)
    memset(out.view.data, 0, out.view.size * itemsize_of(out.view.dtype))
    return out


cdef DenseTensor _borrow_buffer(type cls, object obj):
    cdef _HeldBuffer held = _HeldBuffer()
    cdef bint readonly = False
    try:
        PyObject_GetBuffer(obj, &held.buf, PyBUF_RECORDS)
    except (BufferError, TypeError, ValueError):  # read-only exporters
        PyObject_GetBuffer(obj, &held.buf, PyBUF_RECORDS_RO)
        readonly = True
    held.held = True
    if held.buf.ndim > FASTOP_MAX_NDIM:
        raise ValueError(f"at most {FASTOP_MAX_NDIM} dimensions are supported, "
                         f"got {held.buf.ndim}")
    cdef DenseTensor out = cls.__new__(cls)
    out.view.dtype = _code_from_format(held.buf.format, held.buf.itemsize)
    out.view.ndim = held.buf.ndim
    out.view.data = <char*>held.buf.buf
    out.view.size = 1
    for i in range(held.buf.ndim):
        out.view.shape[i] = held.buf.shape[i]
        out.view.strides[i] = held.buf.strides[i]
        out.view.size *= held.buf.shape[i]
    out.owner = held
    out.readonly = readonly
    return out


cdef int _code_from_ndarray(cnp.ndarray arr) noexcept:
    """fastop's dtype code for a native-byte-order array, or -1 when fastop has no such
    dtype (the buffer-protocol path then raises the error that says why)."""
    if not cnp.PyArray_ISNOTSWAPPED(arr):
        return -1
    cdef int type_num = cnp.PyArray_TYPE(arr)
    if type_num == cnp.NPY_FLOAT32:
        return FASTOP_FLOAT32
    if type_num == cnp.NPY_FLOAT64:
        return FASTOP_FLOAT64
    if type_num == cnp.NPY_BOOL:
        return FASTOP_BOOL
    if type_num == cnp.NPY_FLOAT16:
        return FASTOP_FLOAT16
    if type_num == cnp.NPY_UINT8:
        return FASTOP_UINT8
    if cnp.PyTypeNum_ISSIGNED(type_num):
        if cnp.PyArray_ITEMSIZE(arr) == 1:
            return FASTOP_INT8
        if cnp.PyArray_ITEMSIZE(arr) == 2:
            return FASTOP_INT16
        if cnp.PyArray_ITEMSIZE(arr) == 4:
            return FASTOP_INT32
        if cnp.PyArray_ITEMSIZE(arr) == 8:
            return FASTOP_INT64
    return -1


cdef DenseTensor _borrow_ndarray(type cls, cnp.ndarray arr, int dtype):
    """Wrap an ndarray through numpy's C API: no memoryview and no format string to
    parse (about 3x cheaper than the buffer protocol). The tensor holds the array, whose
    reference also stops numpy from resizing it underneath."""
    cdef int i, ndim = cnp.PyArray_NDIM(arr)
    if ndim > FASTOP_MAX_NDIM:
        raise ValueError(f"at most {FASTOP_MAX_NDIM} dimensions are supported, got {ndim}")
    cdef DenseTensor out = cls.__new__(cls)
    cdef cnp.npy_intp* dims = cnp.PyArray_DIMS(arr)
    cdef cnp.npy_intp* strides = cnp.PyArray_STRIDES(arr)
    out.view.dtype = dtype
    out.view.ndim = ndim
    out.view.data = <char*>cnp.PyArray_DATA(arr)
    out.view.size = 1
    for i in range(ndim):
        out.view.shape[i] = dims[i]
        out.view.strides[i] = strides[i]
        out.view.size *= dims[i]
    out.owner = arr
    out.readonly = not cnp.PyArray_ISWRITEABLE(arr)
    return out


cdef DenseTensor wrap_ndarray(type cls, object obj):
    cdef int dtype
    if cnp.PyArray_CheckExact(obj):
        dtype = _code_from_ndarray(<cnp.ndarray>obj)
        if dtype >= 0:
            return _borrow_ndarray(cls, <cnp.ndarray>obj, dtype)
    return None


cdef int numpy_type_num(int code) noexcept nogil:
    return _NPY_TYPES[code]


cdef inline DenseTensor _borrow(type cls, object obj):
    """Zero-copy wrapper of an ndarray (C-API fast path) or of any other buffer."""
    cdef int dtype
    if cnp.PyArray_CheckExact(obj):
        dtype = _code_from_ndarray(<cnp.ndarray>obj)
        if dtype >= 0:
            return _borrow_ndarray(cls, <cnp.ndarray>obj, dtype)
    return _borrow_buffer(cls, obj)


def from_numpy(array, cls=DenseTensor) -> DenseTensor:
    """Wrap a numpy array (or any buffer) without copying; the tensor keeps it alive.

    Arrays of an unsupported dtype raise; non-native byte order raises.
    """
    if isinstance(array, DenseTensor) and type(array) is cls:
        return array
    return _borrow(cls, array)


cdef DenseTensor as_dense(object obj, int dtype=-1):
    """A DenseTensor for obj: itself, a zero-copy wrapper, or a converted copy."""
    if isinstance(obj, DenseTensor) and (dtype < 0 or (<DenseTensor>obj).view.dtype == dtype):
        return <DenseTensor>obj
    arr = np.asarray(obj, dtype=None if dtype < 0 else (<DType>DTYPES[dtype]).numpy_dtype)
    if arr.dtype.kind == "u" and arr.dtype.itemsize == 2:     # uint16: int64 holds it
        arr = arr.astype(np.int64)
    return _borrow(DenseTensor, arr)


def take_view_shape(DenseTensor t, DenseTensor view) -> None:
    """Give `t` the shape and strides of `view`, a view of exactly t's elements in the
    same order (what the in-place ``squeeze_``/``unsqueeze_`` do to the tensor itself),
    and count it as an in-place write: values autograd saved of `t` before are then
    refused, as after a write to its memory."""
    cdef int i
    if view.view.data != t.view.data or view.view.size != t.view.size or \
            view.view.dtype != t.view.dtype:
        raise ValueError(f"take_view_shape: the view (shape {view.shape}, "
                         f"{view.dtype.name}) does not hold the tensor's elements (shape "
                         f"{t.shape}, {t.dtype.name})")
    t.view.ndim = view.view.ndim
    for i in range(view.view.ndim):
        t.view.shape[i] = view.view.shape[i]
        t.view.strides[i] = view.view.strides[i]
    bump_version(t)


def from_dlpack(obj, cls=DenseTensor) -> DenseTensor:
    """Import a DLPack producer (an object with ``__dlpack__``) without copying."""
    if hasattr(obj, "__dlpack__"):
        try:
            capsule = obj.__dlpack__(max_version=(1, 0))
        except TypeError:  # a producer that predates DLPack 1.0
            capsule = obj.__dlpack__()
    else:
        capsule = obj
    cdef _DLPackOwner owner = _DLPackOwner()
    cdef DLTensor* dl
    cdef bint readonly = False
    if PyCapsule_IsValid(capsule, b"dltensor_versioned"):
        versioned = <DLManagedTensorVersioned*>PyCapsule_GetPointer(capsule, b"dltensor_versioned")
        if versioned.version.major > 1:
            raise BufferError(f"from_dlpack: DLPack {versioned.version.major}.x is not supported")
        dl = &versioned.dl_tensor
        readonly = (versioned.flags & DLPACK_FLAG_READ_ONLY) != 0
        _check_dltensor(dl)
        owner.versioned = versioned
        PyCapsule_SetName(capsule, b"used_dltensor_versioned")
    elif PyCapsule_IsValid(capsule, b"dltensor"):
        managed = <DLManagedTensor*>PyCapsule_GetPointer(capsule, b"dltensor")
        dl = &managed.dl_tensor
        _check_dltensor(dl)
        owner.managed = managed
        PyCapsule_SetName(capsule, b"used_dltensor")
    else:
        raise TypeError("from_dlpack expects an object with __dlpack__ or an unused "
                        "DLPack capsule")
    cdef DenseTensor out = cls.__new__(cls)
    cdef int code = _code_from_dldtype(dl.dtype)
    cdef ptrdiff_t itemsize = itemsize_of(code)
    out.view.dtype = code
    out.view.ndim = dl.ndim
    out.view.data = <char*>dl.data + dl.byte_offset
    for i in range(dl.ndim):
        out.view.shape[i] = dl.shape[i]
    if dl.strides is NULL:
        view_set_contiguous_strides(&out.view)
    else:
        out.view.size = 1
        for i in range(dl.ndim):
            out.view.strides[i] = dl.strides[i] * itemsize
            out.view.size *= dl.shape[i]
    out.owner = owner
    out.readonly = readonly
    return out


cdef int _check_dltensor(DLTensor* dl) except -1:
    if dl.device.device_type != kDLCPU:
        raise BufferError(f"from_dlpack: only CPU tensors are supported "
                          f"(device type {dl.device.device_type})")
    if dl.ndim > FASTOP_MAX_NDIM:
        raise ValueError(f"from_dlpack: at most {FASTOP_MAX_NDIM} dimensions are supported, "
                         f"got {dl.ndim}")
    _code_from_dldtype(dl.dtype)
    return 0


cdef int _code_from_dldtype(DLDataType dtype) except -1:
    if dtype.lanes == 1:
        if dtype.code == kDLFloat and dtype.bits == 32:
            return FASTOP_FLOAT32
        if dtype.code == kDLFloat and dtype.bits == 64:
            return FASTOP_FLOAT64
        if dtype.code == kDLInt and dtype.bits == 8:
            return FASTOP_INT8
        if dtype.code == kDLInt and dtype.bits == 16:
            return FASTOP_INT16
        if dtype.code == kDLInt and dtype.bits == 32:
            return FASTOP_INT32
        if dtype.code == kDLInt and dtype.bits == 64:
            return FASTOP_INT64
        if dtype.code == kDLBool and dtype.bits == 8:
            return FASTOP_BOOL
        if dtype.code == kDLFloat and dtype.bits == 16:
            return FASTOP_FLOAT16
        if dtype.code == kDLUInt and dtype.bits == 8:
            return FASTOP_UINT8
    raise TypeError(f"from_dlpack: unsupported dtype (code {dtype.code}, {dtype.bits} bits, "
                    f"{dtype.lanes} lanes); fastop supports {', '.join(DTYPE_NAMES)}")
