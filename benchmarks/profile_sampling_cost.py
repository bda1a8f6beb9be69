"""What sampling the Python stack costs: ``Profiler(sample_python=...)`` (what
``python -m fastop profile`` does, every 5 ms by default) against the same profiler
without sampling, on an eager training loop and on a pure-Python loop.

Rounds are interleaved in one process; each row is the median over the rounds of the
per-round ratio to no sampling, for wall time, the main thread's CPU time and the
process's CPU time (the sampler thread's included), and the samples taken per second.

    OMP_NUM_THREADS=1 PYTHONPATH=src python benchmarks/profile_sampling_cost.py [ROUNDS]
"""
from __future__ import annotations

import statistics
import sys
import time
from typing import Callable

import numpy as np

import fastop
from fastop import nn
from fastop.profiler import Profiler


def python_work(n: int) -> int:
    total = 0
    for i in range(n):
        total += i % 7
    return total


def python_loop() -> None:
    """Pure Python: the GIL is handed over only at the switch interval."""
    for _ in range(100):
        python_work(2000)


def training_loop_of(steps: int = 100) -> Callable[[], None]:
    """An eager loop of two Linear layers and Adam: ops release the GIL often."""
    net = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10))
    opt = fastop.optimizer.Adam(0.01, parameters=net.parameters())
    x = fastop.to_tensor(np.random.default_rng(0).standard_normal((64, 32)).astype("float32"))

    def loop() -> None:
        for _ in range(steps):
            net(x).mean().backward()
            opt.step()
            opt.clear_grad()
    return loop


def main(rounds: int) -> None:
    workloads = {"training loop (ops)": training_loop_of(), "pure Python loop": python_loop}
    intervals = (None, 0.005, 0.001)
    results: dict[tuple[str, float | None], list[tuple[float, float, float, float]]] = {}
    for _ in range(rounds):
        for name, run in workloads.items():
            for interval in intervals:
                with Profiler(sample_python=interval) as prof:
                    wall, cpu, process = (time.perf_counter(), time.thread_time(),
                                          time.process_time())
                    run()
                    wall, cpu, process = (time.perf_counter() - wall,
                                          time.thread_time() - cpu,
                                          time.process_time() - process)
                samples = len(prof.python_samples() or ())
                results.setdefault((name, interval), []).append(
                    (wall, cpu, process, samples / wall))
    print(f"{'workload':<22} {'interval':>8}  {'wall':>7}  {'main CPU':>8}  "
          f"{'process CPU':>11}  {'samples/s':>9}")
    for (name, interval), rows in results.items():
        if interval is None:
            continue
        base = results[(name, None)]

        def change(k: int) -> str:
            ratio = statistics.median(a[k] / b[k] for a, b in zip(rows, base))
            return f"{100 * (ratio - 1):+.1f} %"
        print(f"{name:<22} {interval * 1e3:>5g} ms  {change(0):>7}  {change(1):>8}  "
              f"{change(2):>11}  {statistics.median(r[3] for r in rows):>9.0f}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 21)
