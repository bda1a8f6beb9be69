# distutils: sources = src/fastop/_core/parallel_impl.c
"""fastop's thread pool: one kernel call split into pieces (see ``parallel.h``).

Why not OpenMP for these kernels: an OpenMP parallel region ends with a barrier that
waits for every thread of the team, so a worker that is slow to wake (an idle vCPU of a
VM takes hundreds of µs to milliseconds; a core busy with another process longer) holds
up the whole call, and spinning workers (``OMP_WAIT_POLICY=ACTIVE``) steal the core from
other processes. Here the calling thread starts on the pieces at once and waits only for
pieces a worker has actually started; workers spin ``FASTOP_SPIN_US`` µs (default 100)
after a call, then sleep.
"""
import os as _os

__all__ = ["set_spin_us", "get_spin_us", "num_processors"]

cdef extern from "parallel.h" nogil:
    int fastop_parallel_run(fastop_piece_fn fn, void* ctx, int npieces, int nthreads)
    void fastop_parallel_set_spin_us(long us)
    long fastop_parallel_get_spin_us()
    void fastop_parallel_leave_cpu(int cpu)


cdef int parallel_run(fastop_piece_fn fn, void* ctx, int npieces, int nthreads) noexcept nogil:
    """Call fn(ctx, i) for i < npieces on up to `nthreads` threads (the caller included);
    return the number of threads the pieces were offered to."""
    return fastop_parallel_run(fn, ctx, npieces, nthreads)


def num_processors() -> int:
    """Processors this process may run on (its CPU affinity): the most threads worth
    offering pieces to."""
    try:
        return len(_os.sched_getaffinity(0))
    except AttributeError:           # no sched_getaffinity (not Linux)
        return _os.cpu_count() or 1


def set_spin_us(long us) -> None:
    """How long (µs) an idle worker spins before it sleeps."""
    if us < 0:
        raise ValueError(f"parallel.set_spin_us: expected us >= 0, got {us}")
    fastop_parallel_set_spin_us(us)


def get_spin_us() -> int:
    return fastop_parallel_get_spin_us()


def _init_spin():
    value = _os.environ.get("FASTOP_SPIN_US", "")
    if value.isdigit():
        fastop_parallel_set_spin_us(int(value))

_init_spin()


# --------------------------------------------------------------------------- test shim

cdef void _record_piece(void* ctx, int piece) noexcept nogil:
    cdef long* seen = <long*>ctx
    seen[piece] += 1


def _run_counting(int npieces, int nthreads):
    """Run `npieces` pieces that each count their own calls; return the counts and the
    number of threads offered (a test shim)."""
    import numpy as np
    counts = np.zeros(max(npieces, 1), dtype=np.int64)
    cdef long[::1] view = counts
    cdef int offered
    with nogil:
        offered = parallel_run(_record_piece, &view[0], npieces, nthreads)
    return counts[:npieces], offered


def _leave_cpu(int cpu) -> None:
    """Move the calling thread off `cpu` as a pool worker does (a test shim)."""
    fastop_parallel_leave_cpu(cpu)
