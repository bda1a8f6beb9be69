# The contract of fastop's tensor storage: the C view every kernel sees, the dtype
# codes, and the DenseTensor class that owns or borrows memory. cimport it; never
# reach into another module's internals.
from libc.stddef cimport ptrdiff_t

cdef extern from "tensor_view.h":
    enum: FASTOP_MAX_NDIM
    enum: FASTOP_MAX_ATTR_INTS
    enum:
        FASTOP_BOOL
        FASTOP_UINT8
        FASTOP_INT8
        FASTOP_INT16
        FASTOP_INT32
        FASTOP_INT64
        FASTOP_FLOAT32
        FASTOP_FLOAT64
        FASTOP_NUM_COMPUTE_DTYPES
        FASTOP_FLOAT16
        FASTOP_NUM_DTYPES
    ctypedef struct fastop_view:
        char* data
        int dtype
        int ndim
        ptrdiff_t size
        ptrdiff_t shape[FASTOP_MAX_NDIM]
        ptrdiff_t strides[FASTOP_MAX_NDIM]
    ctypedef struct fastop_attrs:
        int n_ints
        ptrdiff_t ints[FASTOP_MAX_ATTR_INTS]
        double f[4]

ctypedef fused numeric_t:
    float
    double
    int
    long long

ctypedef fused floating_t:
    float
    double

cdef inline ptrdiff_t itemsize_of(int dtype) noexcept nogil:
    """Bytes per element of a dtype code."""
    if dtype == FASTOP_BOOL or dtype == FASTOP_UINT8 or dtype == FASTOP_INT8:
        return 1
    if dtype == FASTOP_INT32 or dtype == FASTOP_FLOAT32:
        return 4
    if dtype == FASTOP_FLOAT16 or dtype == FASTOP_INT16:
        return 2
    return 8

cdef inline bint view_same_meta(const fastop_view* a, const fastop_view* b) noexcept nogil:
    """Whether two views have the same dtype and shape (strides may differ)."""
    cdef int i
    if a.dtype != b.dtype or a.ndim != b.ndim:
        return False
    for i in range(a.ndim):
        if a.shape[i] != b.shape[i]:
            return False
    return True

cdef inline void view_copy_meta(const fastop_view* src, fastop_view* dst) noexcept nogil:
    """dst takes src's dtype, shape and size (an infer function's "like its input")."""
    cdef int i
    dst.dtype = src.dtype
    dst.ndim = src.ndim
    dst.size = src.size
    for i in range(src.ndim):
        dst.shape[i] = src.shape[i]

cdef inline bint view_fits_meta(const fastop_view* have, const fastop_view* want) noexcept nogil:
    """Whether `have` has `want`'s dtype, rank and every known dim (-1: unknown)."""
    cdef int i
    if have.dtype != want.dtype or have.ndim != want.ndim:
        return False
    for i in range(want.ndim):
        if want.shape[i] >= 0 and have.shape[i] != want.shape[i]:
            return False
    return True

cdef inline ptrdiff_t view_element_offset(const fastop_view* v, ptrdiff_t k) noexcept nogil:
    """Byte offset from v.data of v's k-th element in C order (any strides)."""
    cdef ptrdiff_t off = 0
    cdef int d
    for d in range(v.ndim - 1, -1, -1):
        off += (k % v.shape[d]) * v.strides[d]
        k = k // v.shape[d]
    return off

cdef inline list view_shape(const fastop_view* v):
    """A view's shape as a Python list (for error messages)."""
    return [v.shape[i] for i in range(v.ndim)]

cdef bint view_is_contiguous(const fastop_view* v) noexcept nogil
cdef void view_set_contiguous_strides(fastop_view* v) noexcept nogil
cdef bint shape_fits(int ndim, const ptrdiff_t* shape, int dtype) noexcept nogil
cdef void view_copy(const fastop_view* src, fastop_view* dst) noexcept nogil
cdef bint views_overlap(const fastop_view* a, const fastop_view* b) noexcept nogil
cdef bint view_same_layout(const fastop_view* a, const fastop_view* b) noexcept nogil
cdef int view_assign(const fastop_view* src, fastop_view* dst) noexcept nogil


cdef class DType:
    cdef readonly int code
    cdef readonly str name
    cdef readonly Py_ssize_t itemsize
    cdef readonly object numpy_dtype


cdef class DenseTensor:
    cdef fastop_view view
    # What keeps the memory alive: None when this tensor owns `_alloc`; otherwise the
    # owning DenseTensor, a borrowed numpy array, a held Py_buffer, or a DLPack capsule
    # owner.
    cdef object owner
    cdef void* _alloc
    cdef unsigned char _small_class   # 1 + size class of a recycled small block, else 0
    cdef size_t _large_bytes          # capacity of a large block kept for reuse when freed
    cdef unsigned int _version        # in-place writes made through fastop to this memory;
                                      # kept on the memory's root tensor (memory_root)
    cdef readonly bint readonly
    cdef object __weakref__

    cdef DenseTensor _new_view(self)
    cpdef DenseTensor contiguous(self)


# Raise unless t has memory: a DenseTensor made by __new__ alone (a Tensor subclass whose
# __init__ does not call the base one) has none, and reading it would crash.
cdef int check_initialised(DenseTensor t, str who=*) except -1


# The tensor whose memory t views (t itself unless it views another, directly or
# through numpy arrays of that tensor's memory): where the memory's version is kept.
cdef DenseTensor memory_root(DenseTensor t)


cdef inline void bump_version(DenseTensor t) noexcept:
    """Record an in-place write to t's memory: the autograd engine refuses to use
    values it saved before the write."""
    cdef DenseTensor root = memory_root(t)
    root._version += 1


cdef DType dtype_from_code(int code)
cdef int dtype_code(object dtype) except -1
cdef DenseTensor alloc_tensor(type cls, int ndim, const ptrdiff_t* shape, int dtype)
cdef DenseTensor alloc_like(type cls, const fastop_view* like)
cdef DenseTensor as_dense(object obj, int dtype=*)
# A zero-copy tensor of class `cls` over an ndarray of a fastop dtype (numpy's C API,
# no buffer-protocol parsing); None when `obj` is not such an array.
cdef DenseTensor wrap_ndarray(type cls, object obj)
# numpy's type number for a dtype code
cdef int numpy_type_num(int code) noexcept nogil
cpdef object as_ndarray(DenseTensor t)
# A numpy array over the memory `v` describes, kept alive by `base`.
cdef object ndarray_of(const fastop_view* v, object base, bint readonly)
