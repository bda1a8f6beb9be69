# Elementwise kernels over contiguous blocks: a kernel writes one function that
# computes `n` elements of contiguous operands, and `run_blocks` feeds it the whole
# tensor in C order. Operands are the outputs first, then the inputs, all of one shape;
# runs where every operand has unit stride are computed in place, anything else is
# gathered into stack buffers, computed and scattered back. Work of `threads_at`
# elements or more is split into pieces for fastop's thread pool (parallel.pyx); piece
# boundaries fall on multiples of PIECE_ALIGN elements, so a block function may treat
# aligned pairs of elements together (dropout draws two elements per random word).
#
# The block function also gets the C-order position of its first element: a kernel
# whose result depends on the position (random numbers by counter) computes the same
# values whatever the layout and the number of threads.
#
# Used by elementwise.pyx (blocks_range, under its own threading), activation.pyx and
# random.pyx (run_blocks). Outputs may be inputs themselves (the same view: in place);
# a partial overlap is the caller's to avoid (CKernel.must_stage, or a private copy).
from libc.stddef cimport ptrdiff_t
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t
from fastop._core.storage cimport fastop_view, itemsize_of, FASTOP_MAX_NDIM
from fastop._core.kernel cimport K_OK, get_num_threads, use_threads
from fastop._core.parallel cimport parallel_run
from fastop._core.broadcast cimport (bcast_iter, bcast_iter_init, bcast_iter_seek,
                                     bcast_iter_run, bcast_iter_advance, BCAST_MAX_OPERANDS)

cdef enum:
    BLOCK_ELEMS = 512           # elements per gather buffer (x 8 bytes x 4 operands: 16 KB)
    PIECE_ALIGN = 16            # pieces start at multiples of this many elements
    BLOCK_PIECES_PER_THREAD = 4
    BLOCK_MAX_PIECES = 256

# Compute n elements: p[k] points at operand k's first element (outputs first), all
# contiguous; `start` is the C-order position of that first element in the tensor.
ctypedef int (*block_fn)(void* ctx, char** p, ptrdiff_t n, ptrdiff_t start) noexcept nogil


ctypedef struct BlockJob:
    block_fn fn
    void* ctx
    bcast_iter it
    int n_out
    ptrdiff_t itemsizes[BCAST_MAX_OPERANDS]
    ptrdiff_t chunk                         # elements per threaded piece
    int codes[BLOCK_MAX_PIECES]             # status of each piece


cdef inline void _gather(char* dst, const char* src, ptrdiff_t stride, ptrdiff_t n,
                         ptrdiff_t itemsize) noexcept nogil:
    """dst[i] = src[i * stride] for n elements (dst contiguous)."""
    cdef ptrdiff_t i
    if itemsize == 8:
        for i in range(n):
            (<uint64_t*>dst)[i] = (<const uint64_t*>(src + i * stride))[0]
    elif itemsize == 4:
        for i in range(n):
            (<uint32_t*>dst)[i] = (<const uint32_t*>(src + i * stride))[0]
    elif itemsize == 2:
        for i in range(n):
            (<uint16_t*>dst)[i] = (<const uint16_t*>(src + i * stride))[0]
    else:
        for i in range(n):
            (<uint8_t*>dst)[i] = (<const uint8_t*>(src + i * stride))[0]


cdef inline void _scatter(char* dst, const char* src, ptrdiff_t stride, ptrdiff_t n,
                          ptrdiff_t itemsize) noexcept nogil:
    """dst[i * stride] = src[i] for n elements (src contiguous)."""
    cdef ptrdiff_t i
    if itemsize == 8:
        for i in range(n):
            (<uint64_t*>(dst + i * stride))[0] = (<const uint64_t*>src)[i]
    elif itemsize == 4:
        for i in range(n):
            (<uint32_t*>(dst + i * stride))[0] = (<const uint32_t*>src)[i]
    elif itemsize == 2:
        for i in range(n):
            (<uint16_t*>(dst + i * stride))[0] = (<const uint16_t*>src)[i]
    else:
        for i in range(n):
            (<uint8_t*>(dst + i * stride))[0] = (<const uint8_t*>src)[i]


cdef inline int blocks_range(block_fn fn, void* ctx, const bcast_iter* it,
                             const ptrdiff_t* itemsizes, int n_out, ptrdiff_t start,
                             ptrdiff_t stop) noexcept nogil:
    """Compute elements [start, stop) in C order of the operands `it` walks (its first
    `n_out` operands are the outputs, computed by `fn` from the rest)."""
    cdef ptrdiff_t index[FASTOP_MAX_NDIM]
    cdef ptrdiff_t first_index[FASTOP_MAX_NDIM]
    cdef char* ptrs[BCAST_MAX_OPERANDS]
    cdef char* first_ptrs[BCAST_MAX_OPERANDS]
    cdef char* blocks[BCAST_MAX_OPERANDS]
    cdef uint64_t buffers[BCAST_MAX_OPERANDS][BLOCK_ELEMS]
    cdef int op, status, last = it.ndim - 1
    cdef ptrdiff_t n, filled, done, pos = start
    cdef bint direct = True
    for op in range(it.nop):
        if it.strides[op][last] != itemsizes[op]:
            direct = False
        blocks[op] = <char*>buffers[op]
    bcast_iter_seek(it, start, index, ptrs)
    if direct:
        # every operand has unit stride along runs: compute in place, run by run
        while pos < stop:
            n = min(bcast_iter_run(it, index), stop - pos)
            status = fn(ctx, ptrs, n, pos)
            if status != K_OK:
                return status
            bcast_iter_advance(it, n, index, ptrs)
            pos += n
        return K_OK
    while pos < stop:
        # gather up to BLOCK_ELEMS elements (across runs) of every input, compute, scatter
        for op in range(it.nop):
            first_ptrs[op] = ptrs[op]
        for op in range(last + 1):
            first_index[op] = index[op]
        filled = 0
        while filled < BLOCK_ELEMS and pos + filled < stop:
            n = min(bcast_iter_run(it, index), BLOCK_ELEMS - filled, stop - pos - filled)
            for op in range(n_out, it.nop):
                _gather(blocks[op] + filled * itemsizes[op], ptrs[op], it.strides[op][last],
                        n, itemsizes[op])
            bcast_iter_advance(it, n, index, ptrs)
            filled += n
        status = fn(ctx, blocks, filled, pos)
        if status != K_OK:
            return status
        # walk the same elements again to scatter the outputs (from where the gathering
        # started; the walk ends where it ended)
        for op in range(last + 1):
            index[op] = first_index[op]
        done = 0
        while done < filled:
            n = min(bcast_iter_run(it, index), filled - done)
            for op in range(n_out):
                _scatter(first_ptrs[op], blocks[op] + done * itemsizes[op],
                         it.strides[op][last], n, itemsizes[op])
            bcast_iter_advance(it, n, index, first_ptrs)
            done += n
        pos += filled
        for op in range(it.nop):
            ptrs[op] = first_ptrs[op]
    return K_OK


cdef inline void _blocks_piece(void* job, int t) noexcept nogil:
    cdef BlockJob* j = <BlockJob*>job
    j.codes[t] = blocks_range(j.fn, j.ctx, &j.it, j.itemsizes, j.n_out,
                              min(t * j.chunk, j.it.size), min((t + 1) * j.chunk, j.it.size))


cdef inline int run_blocks(block_fn fn, void* ctx, fastop_view** operands, int n_out,
                           int n_ops, ptrdiff_t threads_at) noexcept nogil:
    """Run `fn` over every element of `operands` (outputs first; one shape), in pieces
    over threads when the size reaches `threads_at` (and use_threads agrees)."""
    cdef BlockJob job
    cdef int i, nt = 1, npieces, status = K_OK
    cdef ptrdiff_t size = operands[0].size
    if size == 0:
        return K_OK
    job.fn, job.ctx, job.n_out = fn, ctx, n_out
    # the iterator takes one "output" (operand 0) and the rest as inputs of its shape
    bcast_iter_init(&job.it, operands[0], operands + 1, n_ops - 1)
    for i in range(n_ops):
        job.itemsizes[i] = itemsize_of(operands[i].dtype)
    if size >= threads_at and use_threads(size):
        nt = get_num_threads()
    if nt <= 1:
        return blocks_range(fn, ctx, &job.it, job.itemsizes, n_out, 0, size)
    npieces = min(nt * BLOCK_PIECES_PER_THREAD, BLOCK_MAX_PIECES)
    job.chunk = ((size + npieces - 1) // npieces + PIECE_ALIGN - 1) & ~(<ptrdiff_t>PIECE_ALIGN - 1)
    npieces = <int>((size + job.chunk - 1) // job.chunk)
    parallel_run(_blocks_piece, &job, npieces, nt)
    for i in range(npieces):
        if job.codes[i] != K_OK:
            status = job.codes[i]
    return status
