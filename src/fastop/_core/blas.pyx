"""BLAS for fastop: scipy-openblas32's sgemm/dgemm, loaded lazily with dlopen.

``import fastop`` does not load the library (it costs tens of milliseconds): the first
kernel that needs it calls :func:`ensure_loaded`, which finds the ``scipy_openblas32``
package without importing it, dlopens its shared library and keeps typed function
pointers. Thread count: :func:`set_num_threads` works before and after loading; at load
time an earlier request, else ``FASTOP_NUM_THREADS``, is applied (otherwise OpenBLAS
keeps its own default, which honours ``OPENBLAS_NUM_THREADS``).

The wrappers are row-major (``CblasRowMajor``), GIL-free, and each docstring is its
formula; ``op(X)`` is ``X`` or ``Xᵀ`` as the ``trans_*`` flag says.
"""
from posix.dlfcn cimport dlopen, dlsym, dlerror, RTLD_NOW, RTLD_LOCAL

from fastop._core.storage cimport floating_t

__all__ = ["load", "library_path", "set_num_threads", "get_num_threads"]

cdef enum:
    CblasRowMajor = 101
    CblasNoTrans = 111
    CblasTrans = 112

ctypedef void (*sgemm_t)(int order, int trans_a, int trans_b, int m, int n, int k,
                         float alpha, const float* a, int lda, const float* b, int ldb,
                         float beta, float* c, int ldc) noexcept nogil
ctypedef void (*dgemm_t)(int order, int trans_a, int trans_b, int m, int n, int k,
                         double alpha, const double* a, int lda, const double* b, int ldb,
                         double beta, double* c, int ldc) noexcept nogil
ctypedef void (*sgemm_batch_t)(int order, int trans_a, int trans_b, int m, int n, int k,
                               float alpha, const float* a, int lda, int stride_a,
                               const float* b, int ldb, int stride_b, float beta,
                               float* c, int ldc, int stride_c, int batch) noexcept nogil
ctypedef void (*dgemm_batch_t)(int order, int trans_a, int trans_b, int m, int n, int k,
                               double alpha, const double* a, int lda, int stride_a,
                               const double* b, int ldb, int stride_b, double beta,
                               double* c, int ldc, int stride_c, int batch) noexcept nogil
ctypedef void (*set_threads_t)(int n) noexcept nogil
ctypedef int (*get_threads_t)() noexcept nogil

cdef sgemm_t _sgemm = NULL
cdef dgemm_t _dgemm = NULL
cdef sgemm_batch_t _sgemm_batch = NULL
cdef dgemm_batch_t _dgemm_batch = NULL
cdef set_threads_t _set_threads = NULL
cdef get_threads_t _get_threads = NULL
cdef bint _loaded = False
cdef int _requested_threads = 0   # set_num_threads before loading; 0 = none
_path = None


def _find_library() -> str:
    """Path of scipy-openblas32's shared library, found without importing the package."""
    import importlib.util
    import os
    spec = importlib.util.find_spec("scipy_openblas32")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("fastop needs the 'scipy-openblas32' package for matmul/fc on "
                          "float32/float64 (pip install scipy-openblas32)")
    lib_dir = os.path.join(list(spec.submodule_search_locations)[0], "lib")
    names = sorted(n for n in os.listdir(lib_dir) if n.startswith("libscipy_openblas")
                   and (n.endswith(".so") or n.endswith(".dylib")))
    if not names:
        raise ImportError(f"no libscipy_openblas shared library in {lib_dir}")
    return os.path.join(lib_dir, names[0])


cdef void* _symbol(void* handle, bytes name) except NULL:
    cdef void* ptr = dlsym(handle, name)
    if ptr is NULL:
        raise ImportError(f"{_path}: missing symbol {name.decode()}")
    return ptr


def load() -> str:
    """Load the BLAS library now (idempotent); return its path. Raises ImportError."""
    global _loaded, _path, _sgemm, _dgemm, _sgemm_batch, _dgemm_batch
    global _set_threads, _get_threads
    if _loaded:
        return _path
    import os
    path = _find_library()
    cdef void* handle = dlopen(path.encode(), RTLD_NOW | RTLD_LOCAL)
    if handle is NULL:
        raise ImportError(f"cannot load {path}: {dlerror().decode(errors='replace')}")
    _path = path
    _sgemm = <sgemm_t>_symbol(handle, b"scipy_cblas_sgemm")
    _dgemm = <dgemm_t>_symbol(handle, b"scipy_cblas_dgemm")
    _sgemm_batch = <sgemm_batch_t>_symbol(handle, b"scipy_cblas_sgemm_batch_strided")
    _dgemm_batch = <dgemm_batch_t>_symbol(handle, b"scipy_cblas_dgemm_batch_strided")
    _set_threads = <set_threads_t>_symbol(handle, b"scipy_openblas_set_num_threads")
    _get_threads = <get_threads_t>_symbol(handle, b"scipy_openblas_get_num_threads")
    env = os.environ.get("FASTOP_NUM_THREADS", "")
    cdef int n = _requested_threads or (int(env) if env.isdigit() else 0)
    if n > 0:
        _set_threads(n)
    _loaded = True
    return path


def library_path():
    """Path of the loaded BLAS library, or None while it is not loaded."""
    return _path


cdef int ensure_loaded() noexcept nogil:
    """0 once the library is loaded (loading it on the first call); -1, after a
    warning saying why, if it cannot be."""
    if _loaded:
        return 0
    with gil:
        try:
            load()
        except Exception as exc:
            import warnings
            warnings.warn(f"fastop: BLAS unavailable, float32/float64 matmul and fc "
                          f"cannot run: {exc}", RuntimeWarning, stacklevel=2)
            return -1
    return 0


def set_num_threads(int n) -> None:
    """Threads OpenBLAS uses; remembered and applied at load if not loaded yet."""
    global _requested_threads
    if n < 1:
        raise ValueError(f"blas.set_num_threads: expected n >= 1, got {n}")
    _requested_threads = n
    if _loaded:
        _set_threads(n)


def get_num_threads() -> int:
    """Threads OpenBLAS uses (loads the library unless a count was set before)."""
    if not _loaded and _requested_threads:
        return _requested_threads
    load()
    return _get_threads()


cdef void gemm(bint trans_a, bint trans_b, int m, int n, int k, floating_t alpha,
               const floating_t* a, int lda, const floating_t* b, int ldb,
               floating_t beta, floating_t* c, int ldc) noexcept nogil:
    """C[m×n] = alpha · op(A)[m×k] · op(B)[k×n] + beta · C, row-major with leading dims."""
    cdef int ta = CblasTrans if trans_a else CblasNoTrans
    cdef int tb = CblasTrans if trans_b else CblasNoTrans
    if floating_t is float:
        _sgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
    else:
        _dgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)


cdef void gemm_batch_strided(bint trans_a, bint trans_b, int m, int n, int k,
                             floating_t alpha, const floating_t* a, int lda, int stride_a,
                             const floating_t* b, int ldb, int stride_b, floating_t beta,
                             floating_t* c, int ldc, int stride_c, int batch) noexcept nogil:
    """C_i = alpha · op(A_i) · op(B_i) + beta · C_i for i < batch, where
    X_i starts at x + i · stride_x (strides in elements; 0 repeats a matrix)."""
    cdef int ta = CblasTrans if trans_a else CblasNoTrans
    cdef int tb = CblasTrans if trans_b else CblasNoTrans
    if floating_t is float:
        _sgemm_batch(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, stride_a, b, ldb,
                     stride_b, beta, c, ldc, stride_c, batch)
    else:
        _dgemm_batch(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, stride_a, b, ldb,
                     stride_b, beta, c, ldc, stride_c, batch)


# --------------------------------------------------------------------------- test shims

cdef floating_t* _first(floating_t[:, :, ::1] x) noexcept:
    """Address of x's first element, NULL when x is empty."""
    return &x[0, 0, 0] if x.shape[0] and x.shape[1] and x.shape[2] else NULL


cdef list _dims(floating_t[:, :, ::1] x):
    return [x.shape[0], x.shape[1], x.shape[2]]


def _gemm(floating_t[:, :, ::1] a, floating_t[:, :, ::1] b, floating_t[:, :, ::1] c,
          double alpha=1.0, double beta=0.0, bint trans_a=False, bint trans_b=False):
    """c[0] = alpha · op(a[0]) · op(b[0]) + beta · c[0] on C-contiguous arrays of
    shape (1, rows, cols) (a test shim)."""
    cdef int m = c.shape[1], n = c.shape[2]
    cdef int k = a.shape[1] if trans_a else a.shape[2]
    if (a.shape[2] if trans_a else a.shape[1]) != m or \
            (b.shape[2] if trans_b else b.shape[1]) != k or \
            (b.shape[1] if trans_b else b.shape[2]) != n:
        raise ValueError(f"_gemm: shapes a {_dims(a)}, b {_dims(b)}, c {_dims(c)} "
                         f"do not match")
    load()
    cdef floating_t* pa = _first(a)
    cdef floating_t* pb = _first(b)
    cdef floating_t* pc = _first(c)
    with nogil:
        gemm(trans_a, trans_b, m, n, k, <floating_t>alpha, pa, max(a.shape[2], 1),
             pb, max(b.shape[2], 1), <floating_t>beta, pc, max(n, 1))


def _gemm_batch_strided(floating_t[:, :, ::1] a, floating_t[:, :, ::1] b,
                        floating_t[:, :, ::1] c, double alpha=1.0, double beta=0.0):
    """c[i] = alpha · a[i or 0] · b[i or 0] + beta · c[i]; a batch of 1 repeats (a test
    shim)."""
    cdef int batch = c.shape[0], m = c.shape[1], n = c.shape[2], k = a.shape[2]
    if a.shape[1] != m or b.shape[1] != k or b.shape[2] != n or \
            a.shape[0] not in (1, batch) or b.shape[0] not in (1, batch):
        raise ValueError(f"_gemm_batch_strided: shapes a {_dims(a)}, b {_dims(b)}, "
                         f"c {_dims(c)} do not match")
    load()
    cdef floating_t* pa = _first(a)
    cdef floating_t* pb = _first(b)
    cdef floating_t* pc = _first(c)
    cdef int stride_a = m * k if a.shape[0] > 1 else 0
    cdef int stride_b = k * n if b.shape[0] > 1 else 0
    with nogil:
        gemm_batch_strided(False, False, m, n, k, <floating_t>alpha, pa, max(k, 1),
                           stride_a, pb, max(n, 1), stride_b, <floating_t>beta, pc,
                           max(n, 1), m * n, batch)
