/* fastop's thread pool: see parallel.h for what it does and why. */
#define _GNU_SOURCE
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <linux/futex.h>
#include <sys/syscall.h>
#endif

#include "parallel.h"

#define MAX_WORKERS 63

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;   /* one job at a time */
static int n_workers = 0;                 /* started workers (under pool_lock) */
static uint32_t last_generation = 0;      /* of the latest job (under pool_lock) */

/* The job: generation << 32 | npieces << 16 | next unclaimed piece. A worker claims a
 * piece with a compare-and-swap that includes the generation, so a late worker never
 * takes a piece of a newer job believing it belongs to an older one. */
static _Atomic uint64_t ticket;
static _Atomic uint32_t generation;       /* futex word idle workers sleep on */
static _Atomic uint32_t remaining;        /* pieces not finished */
static _Atomic int workers_sleeping;
static _Atomic int job_helpers;           /* workers with an index below this help */
static _Atomic long spin_ns = 100000;
/* Written by the caller before the ticket is published (release) and read by a worker
 * only after it claimed a piece (acquire): the job cannot finish, hence not change,
 * before that piece is done. */
static fastop_piece_fn job_fn;
static void* job_ctx;
#ifdef __linux__
static _Atomic pid_t worker_tid[MAX_WORKERS];   /* 0 until the worker has started */
/* Who may touch worker i's affinity, steered[i]: the caller steering it
 * (AFFINITY_CALLER_BUSY) or the worker moving itself (AFFINITY_WORKER_BUSY) claims it
 * from AFFINITY_FREE with a compare-and-swap. AFFINITY_STEERED: narrowed by the caller,
 * steer_restore[i] holds the set to restore; it is written only by the caller holding
 * AFFINITY_CALLER_BUSY and read only by the worker while it is AFFINITY_STEERED. */
enum { AFFINITY_FREE, AFFINITY_STEERED, AFFINITY_CALLER_BUSY, AFFINITY_WORKER_BUSY };
static _Atomic int steered[MAX_WORKERS];
static cpu_set_t steer_restore[MAX_WORKERS];
#endif
static _Atomic int job_cpu = -1;         /* the caller's CPU when it posted the job */

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static inline long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long)ts.tv_sec * 1000000000L + ts.tv_nsec;
}

/* Sleep while *word == value (a spurious return is fine: callers re-check). */
static void wait_on(_Atomic uint32_t* word, uint32_t value) {
#ifdef __linux__
    syscall(SYS_futex, (uint32_t*)word, FUTEX_WAIT_PRIVATE, value, NULL, NULL, 0);
#else
    struct timespec pause = {0, 20000};
    if (atomic_load(word) == value)
        nanosleep(&pause, NULL);
#endif
}

static void wake_all(_Atomic uint32_t* word) {
#ifdef __linux__
    syscall(SYS_futex, (uint32_t*)word, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
#else
    (void)word;
#endif
}

/* Spin up to spin_ns while *word == value; whether it changed. */
static int spin_while(_Atomic uint32_t* word, uint32_t value) {
    long deadline = now_ns() + atomic_load_explicit(&spin_ns, memory_order_relaxed);
    for (unsigned i = 1;; i++) {
        if (atomic_load(word) != value)
            return 1;
        cpu_relax();
        if ((i & 63) == 0 && now_ns() >= deadline)
            return 0;
    }
}

#ifdef __linux__
/* Take `cpu` out of thread `tid`'s affinity (0: the calling thread) when it is in it and
 * another CPU is too; `allowed` receives the affinity it had. Whether it was narrowed. */
static int narrow_off(pid_t tid, int cpu, cpu_set_t* allowed) {
    cpu_set_t elsewhere;
    if (cpu < 0 || cpu >= CPU_SETSIZE ||
            sched_getaffinity(tid, sizeof *allowed, allowed) != 0 ||
            !CPU_ISSET(cpu, allowed) || CPU_COUNT(allowed) < 2)
        return 0;
    elsewhere = *allowed;
    CPU_CLR(cpu, &elsewhere);
    return sched_setaffinity(tid, sizeof elsewhere, &elsewhere) == 0;
}
#endif

/* Move the calling worker off `cpu` (the CPU the job's caller runs on), if it is there
 * and the process may run elsewhere. A worker woken by the caller was often placed on
 * the caller's own CPU (in this VM; likely because the kernel counts an idle vCPU as
 * preempted, so not available) and the balancer left the two busy, cache-hot threads
 * together for milliseconds: the call then ran at one thread's speed. Measured on the
 * 2-vCPU development VM, matmul 256 float32 after an idle gap: 320-390 µs per call in
 * the samples where this happened, 190-210 µs otherwise. Narrowing the affinity migrates
 * the thread at once; restoring it keeps the worker free to move later. */
void fastop_parallel_leave_cpu(int cpu) {
#ifdef __linux__
    cpu_set_t allowed;
    if (cpu >= 0 && sched_getcpu() == cpu && narrow_off(0, cpu, &allowed))
        sched_setaffinity(0, sizeof allowed, &allowed);
#else
    (void)cpu;
#endif
}

/* Before waking sleeping workers, keep them off the caller's CPU `cpu`: the kernel
 * places a woken thread by its affinity, so narrowing it first puts the worker on an
 * idle CPU at once, where moving it after it woke (fastop_parallel_leave_cpu) first
 * waits for a time slice on the caller's busy CPU. Measured on the 2-vCPU development
 * VM, matmul 256 float32 after an idle gap: the first 2-11 calls of a sample ran at one
 * thread's speed or slower (350-500 µs, against 179 µs once the worker joined). Each
 * worker restores its affinity once awake. */
static void steer_sleepers(int cpu, int helpers) {
#ifdef __linux__
    int i;
    pid_t tid;
    for (i = 0; i < helpers; i++) {
        int expected = AFFINITY_FREE;
        tid = atomic_load(&worker_tid[i]);
        if (tid == 0 || !atomic_compare_exchange_strong(&steered[i], &expected,
                                                        AFFINITY_CALLER_BUSY))
            continue;
        atomic_store(&steered[i], narrow_off(tid, cpu, &steer_restore[i]) ? AFFINITY_STEERED
                                                                          : AFFINITY_FREE);
    }
#else
    (void)cpu;
    (void)helpers;
#endif
}

/* A steered worker, awake: free to run anywhere it may again. */
static void unsteer(int index) {
#ifdef __linux__
    cpu_set_t restore;
    int state;
    while ((state = atomic_load(&steered[index])) == AFFINITY_CALLER_BUSY)
        cpu_relax();                      /* the caller is a few system calls from done */
    if (state == AFFINITY_STEERED) {
        restore = steer_restore[index];
        atomic_store(&steered[index], AFFINITY_FREE);
        sched_setaffinity(0, sizeof restore, &restore);
    }
#else
    (void)index;
#endif
}

/* Worker `index` moves itself off the caller's CPU (fastop_parallel_leave_cpu) unless
 * the caller is steering it right now. */
static void worker_leave_cpu(int index, int cpu) {
#ifdef __linux__
    int expected = AFFINITY_FREE;
    if (!atomic_compare_exchange_strong(&steered[index], &expected, AFFINITY_WORKER_BUSY))
        return;
    fastop_parallel_leave_cpu(cpu);
    atomic_store(&steered[index], AFFINITY_FREE);
#else
    (void)index;
    fastop_parallel_leave_cpu(cpu);
#endif
}

/* Claim and run pieces of job `gen` until none is left. */
static void run_pieces(uint32_t gen) {
    uint64_t t = atomic_load_explicit(&ticket, memory_order_acquire);
    for (;;) {
        if ((uint32_t)(t >> 32) != gen || (t & 0xffff) >= ((t >> 16) & 0xffff))
            return;
        if (!atomic_compare_exchange_weak_explicit(&ticket, &t, t + 1,
                                                   memory_order_acq_rel,
                                                   memory_order_acquire))
            continue;
        job_fn(job_ctx, (int)(t & 0xffff));
        atomic_fetch_sub(&remaining, 1);
        t = atomic_load_explicit(&ticket, memory_order_acquire);
    }
}

static void* worker_main(void* arg) {
    int index = (int)(intptr_t)arg;
    uint32_t seen = 0;
#ifdef __linux__
    atomic_store(&worker_tid[index], (pid_t)syscall(SYS_gettid));
#endif
    for (;;) {
        uint32_t gen = atomic_load(&generation);
        if (gen == seen && !spin_while(&generation, seen)) {
            atomic_fetch_add(&workers_sleeping, 1);
            while (atomic_load(&generation) == seen)
                wait_on(&generation, seen);
            atomic_fetch_sub(&workers_sleeping, 1);
        }
        seen = atomic_load(&generation);
        unsteer(index);
        if (index < atomic_load_explicit(&job_helpers, memory_order_relaxed)) {
            worker_leave_cpu(index, atomic_load_explicit(&job_cpu, memory_order_relaxed));
            run_pieces(seen);
        }
    }
    return NULL;
}

/* In a forked child the workers do not exist and the lock may be held by a thread
 * that does not exist either. */
static void after_fork_in_child(void) {
    pthread_mutex_init(&pool_lock, NULL);
    n_workers = 0;
    atomic_store(&workers_sleeping, 0);
    /* a job the parent was running must not look open to the child's new workers */
    atomic_store(&ticket, 0);
    atomic_store(&remaining, 0);
    atomic_store(&job_helpers, 0);
#ifdef __linux__
    for (int i = 0; i < MAX_WORKERS; i++) {
        atomic_store(&worker_tid[i], 0);
        atomic_store(&steered[i], AFFINITY_FREE);
    }
#endif
}

static void start_workers(int wanted) {
    static int fork_handler_installed = 0;
    pthread_attr_t attr;
    pthread_t thread;
    if (!fork_handler_installed) {
        pthread_atfork(NULL, NULL, after_fork_in_child);
        fork_handler_installed = 1;
    }
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    while (n_workers < wanted && n_workers < MAX_WORKERS) {
        if (pthread_create(&thread, &attr, worker_main, (void*)(intptr_t)n_workers) != 0)
            break;
        n_workers++;
    }
    pthread_attr_destroy(&attr);
}

int fastop_parallel_run(fastop_piece_fn fn, void* ctx, int npieces, int nthreads) {
    int i, helpers, cpu = -1;
    uint32_t gen, left;
    if (npieces <= 0)
        return 1;
    if (nthreads <= 1 || npieces == 1 || npieces > 0xffff ||
            pthread_mutex_trylock(&pool_lock) != 0) {
        for (i = 0; i < npieces; i++)
            fn(ctx, i);
        return 1;
    }
    start_workers(nthreads - 1);
    helpers = nthreads - 1 < n_workers ? nthreads - 1 : n_workers;
    job_fn = fn;
    job_ctx = ctx;
#ifdef __linux__
    cpu = sched_getcpu();
    atomic_store_explicit(&job_cpu, cpu, memory_order_relaxed);
#endif
    atomic_store_explicit(&job_helpers, helpers, memory_order_relaxed);
    atomic_store(&remaining, (uint32_t)npieces);
    gen = ++last_generation;
    if (gen == 0)             /* 0 is what a new worker has "seen" */
        gen = ++last_generation;
    atomic_store_explicit(&ticket, (uint64_t)gen << 32 | (uint64_t)npieces << 16,
                          memory_order_release);
    atomic_store(&generation, gen);
    if (atomic_load(&workers_sleeping)) {
        steer_sleepers(cpu, helpers);
        wake_all(&generation);
    }
    run_pieces(gen);
    /* Only pieces a worker is running are left: spin, then yield the core to whatever
     * else is runnable, but never sleep, so no wake-up of an idle vCPU is on the critical
     * path when the worker finishes. */
    while ((left = atomic_load(&remaining)) != 0) {
        if (!spin_while(&remaining, left))
            sched_yield();
    }
    pthread_mutex_unlock(&pool_lock);
    return helpers + 1;
}

void fastop_parallel_set_spin_us(long us) {
    atomic_store(&spin_ns, (us < 0 ? 0 : us) * 1000L);
}

long fastop_parallel_get_spin_us(void) {
    return atomic_load(&spin_ns) / 1000L;
}
