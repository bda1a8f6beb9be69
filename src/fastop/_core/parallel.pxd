# fastop's thread pool (parallel.h): split one kernel call into pieces that the calling
# thread and idle pool workers take as they come. Defined once, in fastop._core.parallel;
# other modules cimport it from there (one pool per process).
cdef extern from "parallel.h" nogil:
    ctypedef void (*fastop_piece_fn)(void* ctx, int piece) noexcept nogil

cdef int parallel_run(fastop_piece_fn fn, void* ctx, int npieces, int nthreads) noexcept nogil
