/* fastop's own thread pool for splitting one kernel call into pieces (parallel_impl.c).
 *
 * fastop_parallel_run(fn, ctx, npieces, nthreads) calls fn(ctx, i) once for every
 * i < npieces and returns when all calls have returned. The calling thread takes pieces
 * itself from the start; up to nthreads - 1 pool workers take pieces as they arrive. A
 * worker that is slow to wake (an idle vCPU, a core busy with another process) therefore
 * costs nothing: the caller never waits for a thread to show up, only for pieces that a
 * worker has already started (spinning, then yielding the core, never sleeping: waking
 * a sleeping thread on an idle vCPU is slow). Idle workers spin for a bounded time
 * (FASTOP_SPIN_US, default 100 µs) and then sleep on a futex, so back-to-back calls
 * find them awake and an idle process leaves both cores alone. Workers are kept off the
 * caller's CPU (two threads on one CPU run a call at one thread's speed, and the
 * kernel's balancer may leave them together for milliseconds): sleeping workers are
 * woken with that CPU taken out of their affinity (restored once awake), and a worker
 * that takes up a job on the caller's CPU anyway moves to another allowed CPU first.
 *
 * One call runs at a time; a call made while another is running (another Python thread,
 * or from inside a piece) runs its pieces serially on its own thread. */
#ifndef FASTOP_PARALLEL_H
#define FASTOP_PARALLEL_H

typedef void (*fastop_piece_fn)(void* ctx, int piece);

/* Returns how many threads the pieces were offered to (1: the caller alone, as when
 * nthreads or npieces is 1). npieces must be at most 65535; more run serially. */
int fastop_parallel_run(fastop_piece_fn fn, void* ctx, int npieces, int nthreads);
/* Microseconds an idle worker spins before it sleeps (and the caller, waiting for a
 * worker's piece, before it starts yielding). */
void fastop_parallel_set_spin_us(long us);
long fastop_parallel_get_spin_us(void);
/* If the calling thread runs on `cpu` and may run elsewhere, move it elsewhere (Linux;
 * elsewhere a no-op). A worker calls it with its caller's CPU on taking up a job. */
void fastop_parallel_leave_cpu(int cpu);

#endif
