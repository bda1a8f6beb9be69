"""BLAS for fastop: scipy-openblas32's sgemm/dgemm, loaded lazily with dlopen.

``import fastop`` does not load the library (a ~5 ms dlopen of a 25 MB library that
many programs never need): the first kernel that needs it calls :func:`ensure_loaded`,
which finds the ``scipy_openblas32`` package without importing it, dlopens its shared
library and keeps typed function pointers.

Threads: OpenBLAS itself runs single-threaded (its own pool is never started); a large
product is split into pieces (blocks of rows or columns of C, or ranges of a batch) that
fastop's thread pool (:mod:`fastop._core.parallel`) runs, each piece calling the
single-threaded kernel. The calling thread starts on the pieces at once, so a worker
slow to wake costs nothing but its share; idle workers spin ~100 µs and then sleep,
instead of spinning ~0.1 s as OpenBLAS's do, which matters when numpy's and torch's
thread pools share the cores. The thread count comes from :func:`set_num_threads`, else
``FASTOP_NUM_THREADS``, ``OMP_NUM_THREADS`` or ``OPENBLAS_NUM_THREADS``, else the
number of processors.

The wrappers are row-major (``CblasRowMajor``), GIL-free, and each docstring is its
formula; ``op(X)`` is ``X`` or ``Xᵀ`` as the ``trans_*`` flag says.
"""
from libc.stdlib cimport calloc, free
from posix.dlfcn cimport dlopen, dlsym, dlerror, RTLD_NOW, RTLD_LOCAL

from fastop._core.storage cimport floating_t
from fastop._core.parallel cimport parallel_run

from fastop._core.parallel import num_processors

__all__ = ["load", "library_path", "set_num_threads", "get_num_threads"]

cdef enum:
    CblasRowMajor = 101
    CblasNoTrans = 111
    CblasTrans = 112
    SPLIT_ALIGN = 32            # pieces of C are multiples of this many rows/cols
    PIECES_PER_THREAD = 1       # every piece packs the whole other operand: see split_for
    MIN_FLOPS_PER_THREAD = 1 << 20   # m·n·k per thread (~20 µs) below which splitting loses
    # The warm-up product of fault_in_buffers: C[M×N] = A[M×K] · B[K×N] in float32.
    WARM_M = 128
    WARM_K = 384
    WARM_N = 400

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

cdef sgemm_t _sgemm = NULL
cdef dgemm_t _dgemm = NULL
cdef sgemm_batch_t _sgemm_batch = NULL
cdef dgemm_batch_t _dgemm_batch = NULL
cdef bint _loaded = False
cdef int _threads = 1
_path = None


def _init_threads():
    import os
    global _threads
    for name in ("FASTOP_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        value = os.environ.get(name, "")
        if value.isdigit() and int(value) > 0:
            _threads = min(int(value), num_processors())
            return
    _threads = num_processors()

_init_threads()


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
    """Load the library now (idempotent); return its path. Raises ImportError."""
    global _loaded, _path, _sgemm, _dgemm, _sgemm_batch, _dgemm_batch
    cdef void* handle
    if _loaded:
        return _path
    import os
    path = _find_library()
    # OpenBLAS sizes its thread pool from the environment when it is loaded: ask for
    # none, fastop splits the work itself.
    saved = os.environ.get("OPENBLAS_NUM_THREADS")
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    try:
        handle = dlopen(path.encode(), RTLD_NOW | RTLD_LOCAL)
    finally:
        if saved is None:
            del os.environ["OPENBLAS_NUM_THREADS"]
        else:
            os.environ["OPENBLAS_NUM_THREADS"] = saved
    if handle is NULL:
        raise ImportError(f"cannot load {path}: {dlerror().decode(errors='replace')}")
    _path = path
    _sgemm = <sgemm_t>_symbol(handle, b"scipy_cblas_sgemm")
    _dgemm = <dgemm_t>_symbol(handle, b"scipy_cblas_dgemm")
    _sgemm_batch = <sgemm_batch_t>_symbol(handle, b"scipy_cblas_sgemm_batch_strided")
    _dgemm_batch = <dgemm_batch_t>_symbol(handle, b"scipy_cblas_dgemm_batch_strided")
    (<set_threads_t>_symbol(handle, b"scipy_openblas_set_num_threads"))(1)
    _loaded = True
    with nogil:
        fault_in_buffers()
    return path


ctypedef struct WarmJob:
    const float* a
    const float* b
    float* c                    # one WARM_M × WARM_N block per piece


cdef void _warm_piece(void* job, int t) noexcept nogil:
    cdef WarmJob* j = <WarmJob*>job
    _sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, WARM_M, WARM_N, WARM_K, 1, j.a, WARM_K,
           j.b, WARM_N, 0, j.c + <ptrdiff_t>t * WARM_M * WARM_N, WARM_N)


cdef void fault_in_buffers() noexcept nogil:
    """Run one float32 product of WARM_M×WARM_K · WARM_K×WARM_N per thread, at once, so
    that OpenBLAS maps the pages of each packing buffer the threads will use.

    OpenBLAS packs op(B) into a small panel of a 32 MB buffer it maps lazily, and its
    Haswell sgemm kernel (the one it picks on Zen too) prefetches past the end of that
    panel. While the pages after the panel have never been touched, those prefetches
    find no page, and the kernel ran at 11-14 GFLOP/s instead of 31-35 on the 2-vCPU
    EPYC development VM (64×784 · 784×256: 1.8 ms against 0.73 ms; torch's MKL 0.76 ms).
    Writing the 104 KB after the panel was enough to switch it. This product, split
    by OpenBLAS into halves of K and N, packs 96 KB of B right where later products'
    panels start (after OpenBLAS's P×Q block of packed A) and 160 KB of A before it.
    About 1 ms, once, when the library is loaded; float64 (dgemm) measured no
    difference. Each thread runs it at the same time so that each maps the buffer it
    takes from OpenBLAS's table."""
    cdef WarmJob job
    cdef int threads = _threads
    job.a = <const float*>calloc(WARM_M * WARM_K, sizeof(float))
    job.b = <const float*>calloc(WARM_K * WARM_N, sizeof(float))
    job.c = <float*>calloc(<size_t>threads * WARM_M * WARM_N, sizeof(float))
    if job.a is not NULL and job.b is not NULL and job.c is not NULL:
        parallel_run(_warm_piece, &job, threads, threads)
    free(<void*>job.a)
    free(<void*>job.b)
    free(job.c)


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
    """Threads a large product is split across (at most the number of processors)."""
    global _threads
    if n < 1:
        raise ValueError(f"blas.set_num_threads: expected n >= 1, got {n}")
    _threads = min(n, num_processors())


def get_num_threads() -> int:
    return _threads


cdef int threads_for(double flops) noexcept nogil:
    """Threads worth splitting a product of m·n·k = `flops` multiply-adds across."""
    cdef double most = flops / MIN_FLOPS_PER_THREAD
    return _threads if most >= _threads else max(1, <int>most)


cdef Split split_for(int m, int n, int threads) noexcept nogil:
    """How to split an m×n C for `threads` threads: along rows when C is at least as tall
    as wide (B, the operand every piece then packs whole, is the smaller), else along
    columns; PIECES_PER_THREAD pieces per thread, each a multiple of SPLIT_ALIGN (the
    kernels' register blocking). Pieces are taken as they come (a thread that starts
    late takes fewer), but each one repacks the shared operand: on a Zen 5 VM two pieces
    per thread made 2-thread matmul 256 float64 342-370 µs, one piece 307 µs (512:
    2.39-2.5 ms, 2.28-2.35 ms)."""
    cdef Split s
    s.by_rows = m >= n
    s.dim = m if s.by_rows else n
    s.chunk = max(1, ((s.dim + threads * PIECES_PER_THREAD - 1) // (threads * PIECES_PER_THREAD)
                      + SPLIT_ALIGN - 1) // SPLIT_ALIGN * SPLIT_ALIGN)
    s.pieces = (s.dim + s.chunk - 1) // s.chunk
    return s


cdef void piece_bounds(const Split* s, int t, int* lo, int* hi) noexcept nogil:
    """Rows (or columns) lo..hi of piece t."""
    lo[0] = min(s.dim, t * s.chunk)
    hi[0] = min(s.dim, lo[0] + s.chunk)


cdef void gemm_serial(bint trans_a, bint trans_b, int m, int n, int k, floating_t alpha,
                      const floating_t* a, int lda, const floating_t* b, int ldb,
                      floating_t beta, floating_t* c, int ldc) noexcept nogil:
    """C[m×n] = alpha · op(A)[m×k] · op(B)[k×n] + beta · C on the calling thread."""
    cdef int ta = CblasTrans if trans_a else CblasNoTrans
    cdef int tb = CblasTrans if trans_b else CblasNoTrans
    if floating_t is float:
        _sgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
    else:
        _dgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)


# One threaded gemm or gemm_batch_strided call; the pointers are float* or double*.
ctypedef struct GemmJob:
    Split split
    bint trans_a, trans_b, is_double
    int m, n, k, lda, ldb, ldc, stride_a, stride_b, stride_c, batch
    double alpha, beta
    const void* a
    const void* b
    void* c


cdef void _gemm_part(const GemmJob* j, const floating_t* a, const floating_t* b,
                     floating_t* c, int t) noexcept nogil:
    """Piece t of a split product: rows lo..hi of op(A) and C, or columns of op(B) and C."""
    cdef int lo, hi
    piece_bounds(&j.split, t, &lo, &hi)
    if hi <= lo:
        return
    if j.split.by_rows:
        gemm_serial(j.trans_a, j.trans_b, hi - lo, j.n, j.k, <floating_t>j.alpha,
                    a + <ptrdiff_t>lo * (1 if j.trans_a else j.lda), j.lda, b, j.ldb,
                    <floating_t>j.beta, c + <ptrdiff_t>lo * j.ldc, j.ldc)
    else:
        gemm_serial(j.trans_a, j.trans_b, j.m, hi - lo, j.k, <floating_t>j.alpha, a, j.lda,
                    b + <ptrdiff_t>lo * (j.ldb if j.trans_b else 1), j.ldb,
                    <floating_t>j.beta, c + lo, j.ldc)


cdef void _gemm_piece(void* job, int t) noexcept nogil:
    cdef GemmJob* j = <GemmJob*>job
    if j.is_double:
        _gemm_part(j, <const double*>j.a, <const double*>j.b, <double*>j.c, t)
    else:
        _gemm_part(j, <const float*>j.a, <const float*>j.b, <float*>j.c, t)


cdef void gemm(bint trans_a, bint trans_b, int m, int n, int k, floating_t alpha,
               const floating_t* a, int lda, const floating_t* b, int ldb,
               floating_t beta, floating_t* c, int ldc) noexcept nogil:
    """C[m×n] = alpha · op(A)[m×k] · op(B)[k×n] + beta · C, row-major with leading dims;
    a large product is split into row (or column) blocks of C taken by fastop's threads
    (fastop._core.parallel)."""
    cdef int threads = threads_for(<double>m * n * k)
    cdef GemmJob job
    if threads == 1:
        gemm_serial(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
        return
    job.split = split_for(m, n, threads)
    job.trans_a, job.trans_b, job.is_double = trans_a, trans_b, floating_t is double
    job.m, job.n, job.k, job.lda, job.ldb, job.ldc = m, n, k, lda, ldb, ldc
    job.alpha, job.beta, job.a, job.b, job.c = alpha, beta, a, b, c
    parallel_run(_gemm_piece, &job, job.split.pieces, threads)


cdef inline void _batch1(int ta, int tb, int m, int n, int k, floating_t alpha,
                         const floating_t* a, int lda, int stride_a, const floating_t* b,
                         int ldb, int stride_b, floating_t beta, floating_t* c, int ldc,
                         int stride_c, int batch) noexcept nogil:
    if floating_t is float:
        _sgemm_batch(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, stride_a, b, ldb,
                     stride_b, beta, c, ldc, stride_c, batch)
    else:
        _dgemm_batch(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, stride_a, b, ldb,
                     stride_b, beta, c, ldc, stride_c, batch)


cdef void _batch_part(const GemmJob* j, const floating_t* a, const floating_t* b,
                      floating_t* c, int t) noexcept nogil:
    """Piece t of a split batch: products lo..hi."""
    cdef int lo, hi
    piece_bounds(&j.split, t, &lo, &hi)
    if hi > lo:
        _batch1(CblasTrans if j.trans_a else CblasNoTrans,
                CblasTrans if j.trans_b else CblasNoTrans, j.m, j.n, j.k,
                <floating_t>j.alpha, a + <ptrdiff_t>lo * j.stride_a, j.lda, j.stride_a,
                b + <ptrdiff_t>lo * j.stride_b, j.ldb, j.stride_b, <floating_t>j.beta,
                c + <ptrdiff_t>lo * j.stride_c, j.ldc, j.stride_c, hi - lo)


cdef void _batch_piece(void* job, int t) noexcept nogil:
    cdef GemmJob* j = <GemmJob*>job
    if j.is_double:
        _batch_part(j, <const double*>j.a, <const double*>j.b, <double*>j.c, t)
    else:
        _batch_part(j, <const float*>j.a, <const float*>j.b, <float*>j.c, t)


cdef void gemm_batch_strided(bint trans_a, bint trans_b, int m, int n, int k,
                             floating_t alpha, const floating_t* a, int lda, int stride_a,
                             const floating_t* b, int ldb, int stride_b, floating_t beta,
                             floating_t* c, int ldc, int stride_c, int batch) noexcept nogil:
    """C_i = alpha · op(A_i) · op(B_i) + beta · C_i for i < batch, where
    X_i starts at x + i · stride_x (strides in elements; 0 repeats a matrix).

    Threads take contiguous ranges of the batch when it divides evenly or is large;
    otherwise each product is split as in :func:`gemm`.
    """
    cdef int threads = threads_for(<double>m * n * k * batch), i
    cdef GemmJob job
    if threads == 1:
        _batch1(CblasTrans if trans_a else CblasNoTrans,
                CblasTrans if trans_b else CblasNoTrans, m, n, k, alpha, a, lda, stride_a,
                b, ldb, stride_b, beta, c, ldc, stride_c, batch)
    elif batch % threads == 0 or batch >= 4 * threads:
        job.split.by_rows = True
        job.split.dim = batch
        job.split.pieces = min(batch, threads * PIECES_PER_THREAD)
        job.split.chunk = (batch + job.split.pieces - 1) // job.split.pieces
        job.split.pieces = (batch + job.split.chunk - 1) // job.split.chunk
        job.trans_a, job.trans_b, job.is_double = trans_a, trans_b, floating_t is double
        job.m, job.n, job.k, job.lda, job.ldb, job.ldc = m, n, k, lda, ldb, ldc
        job.stride_a, job.stride_b, job.stride_c = stride_a, stride_b, stride_c
        job.alpha, job.beta, job.a, job.b, job.c = alpha, beta, a, b, c
        parallel_run(_batch_piece, &job, job.split.pieces, threads)
    else:
        for i in range(batch):
            gemm(trans_a, trans_b, m, n, k, alpha, a + <ptrdiff_t>i * stride_a, lda,
                 b + <ptrdiff_t>i * stride_b, ldb, beta, c + <ptrdiff_t>i * stride_c, ldc)


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
