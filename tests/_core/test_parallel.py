"""fastop._core.parallel: the thread pool that runs a kernel call's pieces."""
import os
import sys
import threading

import numpy as np
import pytest

from fastop._core import elementwise, parallel
from fastop._core.storage import from_numpy


@pytest.mark.parametrize("npieces", [0, 1, 2, 3, 7, 64, 1000])
@pytest.mark.parametrize("nthreads", [1, 2, 4])
def test_every_piece_runs_exactly_once(npieces, nthreads):
    counts, offered = parallel._run_counting(npieces, nthreads)
    assert counts.tolist() == [1] * npieces
    assert offered == (1 if nthreads == 1 or npieces <= 1 else nthreads)


def test_many_pieces_beyond_the_ticket_range_run_serially_and_once():
    counts, offered = parallel._run_counting(70000, 2)
    assert offered == 1 and (counts == 1).all()


def test_back_to_back_calls_with_sleeping_workers():
    old = parallel.get_spin_us()
    try:
        parallel.set_spin_us(0)      # workers sleep at once: every call wakes them
        for _ in range(200):
            counts, _ = parallel._run_counting(8, 2)
            assert (counts == 1).all()
    finally:
        parallel.set_spin_us(old)


def test_concurrent_callers_each_get_all_their_pieces():
    """Calls from several Python threads at once (kernels release the GIL): one uses
    the pool, the others run serially; none loses or repeats a piece."""
    errors = []

    def call_many():
        for _ in range(300):
            counts, _ = parallel._run_counting(16, 2)
            if not (counts == 1).all():
                errors.append(counts.tolist())

    threads = [threading.Thread(target=call_many) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_concurrent_kernels_compute_the_right_results():
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal(300_000).astype(np.float32) for _ in range(3)]
    outs = [np.empty_like(x) for x in xs]
    bad = []

    def run(x, out):
        for _ in range(20):
            elementwise.tanh(from_numpy(x), out=from_numpy(out))
            if not np.allclose(out, np.tanh(x), rtol=1e-5, atol=1e-6):
                bad.append(True)

    threads = [threading.Thread(target=run, args=pair) for pair in zip(xs, outs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not bad


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_pool_works_in_a_forked_child():
    parallel._run_counting(8, 2)          # the parent's workers exist
    pid = os.fork()
    if pid == 0:                          # child: its workers must be started afresh
        counts, _ = parallel._run_counting(64, 2)
        os._exit(0 if (counts == 1).all() else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_set_spin_us_validates():
    with pytest.raises(ValueError, match="parallel.set_spin_us: expected us >= 0, got -1"):
        parallel.set_spin_us(-1)


WORKER_PLACEMENT = r"""
import os, sys, time
import numpy as np
from fastop._core import linalg, parallel
from fastop._core.storage import from_numpy

parallel.set_spin_us(int(sys.argv[1]))    # 0: the worker sleeps between jobs; else spins
before = set(os.listdir("/proc/self/task"))
parallel._run_counting(64, 2)                       # starts the pool's worker
(worker,) = {int(t) for t in set(os.listdir("/proc/self/task")) - before}
allowed = os.sched_getaffinity(0)
here = min(allowed)
os.sched_setaffinity(0, {here})                     # the caller (this thread) stays here
os.sched_setaffinity(worker, {here})                # the worker is moved here too ...
os.sched_setaffinity(worker, allowed)               # ... and left free to move again
time.sleep(0.01)

def last_cpu(tid):
    with open(f"/proc/self/task/{tid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[36])

a = from_numpy(np.ones((384, 384)))
for _ in range(5):
    linalg.matmul(a, a)
# a woken worker restores its affinity once it runs, which on a busy machine can be
# after the caller finished the job alone: wait for it (bounded)
deadline = time.monotonic() + 5
while sorted(os.sched_getaffinity(worker)) != sorted(allowed) and time.monotonic() < deadline:
    time.sleep(0.001)
print(here, last_cpu(worker), sorted(os.sched_getaffinity(worker)) == sorted(allowed))
parallel.set_spin_us(0)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs Linux and two allowed CPUs")
@pytest.mark.parametrize("spin_us", [0, 10_000_000], ids=["sleeping", "spinning"])
def test_a_worker_runs_off_its_callers_cpu_and_keeps_its_affinity(spin_us):
    """A sleeping worker is woken with the caller's CPU taken out of its affinity (then
    restored); a spinning one found there moves off it."""
    import subprocess
    env = dict(os.environ, FASTOP_NUM_THREADS="2")
    out = subprocess.run([sys.executable, "-c", WORKER_PLACEMENT, str(spin_us)], env=env,
                         check=True, capture_output=True, text=True).stdout.split()
    caller_cpu, worker_cpu, restored = int(out[0]), int(out[1]), out[2]
    assert worker_cpu != caller_cpu and restored == "True"


@pytest.mark.skipif(not sys.platform.startswith("linux") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs Linux and two allowed CPUs")
def test_leave_cpu_moves_the_thread_and_keeps_its_affinity():
    allowed = os.sched_getaffinity(0)
    here = min(allowed)
    seen = {}

    def thread():
        os.sched_setaffinity(0, {here})          # now running on `here` ...
        os.sched_setaffinity(0, allowed)         # ... and free to stay there
        seen["before"] = _cpu()
        parallel._leave_cpu(here)
        seen["after"] = _cpu()
        seen["affinity"] = os.sched_getaffinity(0)

    t = threading.Thread(target=thread)
    t.start()
    t.join()
    assert seen["before"] == here
    assert seen["after"] != here
    assert seen["affinity"] == allowed


def _cpu():
    """The CPU the calling thread runs on."""
    with open("/proc/thread-self/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[36])
