# fastop's one BLAS module: scipy-openblas32's gemm, loaded lazily with dlopen.
# Every wrapper is row-major, GIL-free, splits large products across fastop's thread
# pool, and never fails once the library is loaded: call ensure_loaded() first
# (kernels do), which loads it on the first call.
from fastop._core.storage cimport floating_t

cdef int ensure_loaded() noexcept nogil
cdef int threads_for(double flops) noexcept nogil

# How a product is split into pieces for fastop's thread pool (fastop._core.parallel):
# along rows (by_rows) or columns of C, `pieces` blocks of `chunk` of its `dim`.
ctypedef struct Split:
    bint by_rows
    int dim, chunk, pieces

cdef Split split_for(int m, int n, int threads) noexcept nogil
cdef void piece_bounds(const Split* s, int t, int* lo, int* hi) noexcept nogil
cdef void gemm_serial(bint trans_a, bint trans_b, int m, int n, int k, floating_t alpha,
                      const floating_t* a, int lda, const floating_t* b, int ldb,
                      floating_t beta, floating_t* c, int ldc) noexcept nogil
cdef void gemm(bint trans_a, bint trans_b, int m, int n, int k, floating_t alpha,
               const floating_t* a, int lda, const floating_t* b, int ldb,
               floating_t beta, floating_t* c, int ldc) noexcept nogil
cdef void gemm_batch_strided(bint trans_a, bint trans_b, int m, int n, int k,
                             floating_t alpha, const floating_t* a, int lda, int stride_a,
                             const floating_t* b, int ldb, int stride_b, floating_t beta,
                             floating_t* c, int ldc, int stride_c, int batch) noexcept nogil
