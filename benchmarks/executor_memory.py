"""Memory of an executor that runs many short-lived programs: RSS growth over 1000
Programs built, run (twice: compile, then the fast path) and dropped, one Executor.

Target (the issue "nothing leaks"): growth <= 5 MiB; before the executor's caches held
no strong reference to a program, every program stayed alive (+22 MiB for these small
ones, +95 MiB in the issue's). Not part of ``python -m fastop bench`` (which times
calls); run it as::

    PYTHONPATH=src python benchmarks/executor_memory.py [--programs 1000]
"""
import argparse
import gc
import os

import numpy as np

import fastop
from fastop import static


def rss_mib() -> float:
    """Resident set size now (Linux ``/proc/self/statm``)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def one_program(exe: static.Executor, k: int) -> None:
    """A program of C kernels and a py_func, run twice and dropped."""
    main = static.Program()
    with static.program_guard(main, static.Program()):
        x = static.data("x", [16, 16], "float32")
        h = fastop.tanh(x @ x + float(k))
        y = main.current_block().create_var(name="y", dtype="float32", shape=[16, 16])
        y = static.py_func(np.tanh, h, y)
        z = (y * 2.0).sum()
    for _ in range(2):
        exe.run(main, feed={"x": np.ones((16, 16), np.float32)}, fetch_list=[z, "y"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--programs", type=int, default=1000)
    args = parser.parse_args()
    fastop.enable_static()
    exe = static.Executor()
    for k in range(50):             # warm-up: allocator pools, caches, lazy imports
        one_program(exe, k)
    gc.collect()
    before = rss_mib()
    for k in range(args.programs):
        one_program(exe, k)
    gc.collect()
    after = rss_mib()
    print(f"RSS {before:.1f} MiB after warm-up, {after:.1f} MiB after {args.programs} "
          f"programs: growth {after - before:.2f} MiB (target <= 5 MiB); programs still "
          f"cached by the executor: {len(exe._plans)}")


if __name__ == "__main__":
    main()
