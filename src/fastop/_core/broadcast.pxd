# Broadcasting for kernels: shape inference by numpy's rules and a strided iterator
# that walks an output and its (broadcast) inputs in C order, run by run.
#
# Stable API (other kernel families cimport it):
#   broadcast_shape(ins, n_in, out)   -> 0, or BCAST_ERR when the shapes do not broadcast
#   bcast_iter_init(it, out, ins, n_in)
#   bcast_iter_seek(it, start, index, ptrs)      position at linear element `start`
#   bcast_iter_run(it, index)                    elements left in the current run
#   bcast_iter_advance(it, n, index, ptrs)       step n elements (n <= the current run)
# A "run" is a stretch of the last (coalesced) dimension: every operand advances by its
# own constant byte stride inside it. ptrs[0] is the output, ptrs[1 + i] input i.
from libc.stddef cimport ptrdiff_t
from fastop._core.storage cimport fastop_view, FASTOP_MAX_NDIM

cdef enum:
    BCAST_MAX_OPERANDS = 4     # the output plus up to three inputs
    BCAST_ERR = 1              # == kernel.K_ERR_BROADCAST


cdef inline int broadcast_shape(fastop_view** ins, int n_in, fastop_view* out) noexcept nogil:
    """Fill out.ndim/out.shape with the broadcast of the inputs' shapes.

    numpy's rules: shapes align on the right, a dim of 1 stretches. A dim of -1 means
    unknown (static graphs): unknown with 1 or unknown stays unknown, unknown with a
    known n > 1 gives n. Returns 0, or BCAST_ERR on a mismatch.
    """
    cdef int i, j, k, nd = 0
    cdef ptrdiff_t d, r
    for i in range(n_in):
        if ins[i].ndim > nd:
            nd = ins[i].ndim
    out.ndim = nd
    for k in range(nd):
        r = 1
        for i in range(n_in):
            j = k - (nd - ins[i].ndim)
            if j < 0:
                continue
            d = ins[i].shape[j]
            if d == 1 or d == r:
                continue
            if r == 1:
                r = d
            elif d == -1:
                continue
            elif r == -1:
                r = d
            else:
                return BCAST_ERR
        out.shape[k] = r
    return 0


ctypedef struct bcast_iter:
    int nop                                    # 1 + number of inputs
    int ndim                                   # coalesced dims, >= 1
    ptrdiff_t size                             # elements of the output
    ptrdiff_t shape[FASTOP_MAX_NDIM]
    ptrdiff_t strides[BCAST_MAX_OPERANDS][FASTOP_MAX_NDIM]   # bytes; 0 = broadcast
    char* data[BCAST_MAX_OPERANDS]


cdef inline void bcast_iter_init(bcast_iter* it, fastop_view* out, fastop_view** ins,
                                 int n_in) noexcept nogil:
    """Set up iteration over `out` (whose shape is the broadcast of the inputs').

    Dims of size 1 are dropped and neighbouring dims that are contiguous with each
    other in every operand are merged, so a contiguous same-shape call is one run.
    """
    cdef int op, k, j, nd = 0, src
    cdef ptrdiff_t s
    cdef fastop_view* v
    it.nop = n_in + 1
    it.size = out.size
    for op in range(it.nop):
        v = out if op == 0 else ins[op - 1]
        it.data[op] = v.data
    for k in range(out.ndim):
        if out.shape[k] == 1:
            continue
        it.shape[nd] = out.shape[k]
        for op in range(it.nop):
            v = out if op == 0 else ins[op - 1]
            src = k - (out.ndim - v.ndim)
            it.strides[op][nd] = 0 if src < 0 or v.shape[src] == 1 else v.strides[src]
        # merge with the previous dim when every operand steps through both as one
        if nd > 0:
            for op in range(it.nop):
                if it.strides[op][nd - 1] != it.strides[op][nd] * it.shape[nd]:
                    break
            else:
                it.shape[nd - 1] *= it.shape[nd]
                for op in range(it.nop):
                    it.strides[op][nd - 1] = it.strides[op][nd]
                continue
        nd += 1
    if nd == 0:
        it.shape[0] = 1
        for op in range(it.nop):
            it.strides[op][0] = 0
        nd = 1
    it.ndim = nd


cdef inline void bcast_iter_seek(const bcast_iter* it, ptrdiff_t start, ptrdiff_t* index,
                                 char** ptrs) noexcept nogil:
    """index[] and ptrs[] of the element at C-order position `start`."""
    cdef int k, op
    for op in range(it.nop):
        ptrs[op] = it.data[op]
    for k in range(it.ndim - 1, -1, -1):
        index[k] = start % it.shape[k]
        start //= it.shape[k]
        for op in range(it.nop):
            ptrs[op] += index[k] * it.strides[op][k]


cdef inline ptrdiff_t bcast_iter_run(const bcast_iter* it, const ptrdiff_t* index) noexcept nogil:
    """Elements from the current position to the end of its run (the last dim)."""
    return it.shape[it.ndim - 1] - index[it.ndim - 1]


cdef inline void bcast_iter_advance(const bcast_iter* it, ptrdiff_t n, ptrdiff_t* index,
                                    char** ptrs) noexcept nogil:
    """Step n elements forward inside the current run, carrying into outer dims when
    the run ends."""
    cdef int k = it.ndim - 1, op
    index[k] += n
    for op in range(it.nop):
        ptrs[op] += n * it.strides[op][k]
    while k > 0 and index[k] == it.shape[k]:
        for op in range(it.nop):
            ptrs[op] -= index[k] * it.strides[op][k]
        index[k] = 0
        k -= 1
        index[k] += 1
        for op in range(it.nop):
            ptrs[op] += it.strides[op][k]
