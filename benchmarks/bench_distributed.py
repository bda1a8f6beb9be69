"""Data-parallel training: a 784-1024-1024-10 tanh MLP (1.9M parameters), softmax
cross-entropy, SGD, global batch 1024.

As a script — the figures of the distributed issue, side by side in one run::

    OMP_NUM_THREADS=1 python benchmarks/bench_distributed.py [--repeats 5] [--steps 10]

alternates, ``--repeats`` times, one process with one thread on the whole batch,
``mpiexec -n 2`` ranks with one thread each on half of it (DataParallel), two
independent one-thread processes on half of it each at the same time (the ceiling the
machine sets without communication), and 2 ranks taking plain steps on half of it plus
one bare mpi4py ``Allreduce`` of a buffer the size of all gradients per step (the limit
of data parallelism here: the compute, and the one collective it cannot do without),
and reports the median step times, the speed-ups
(target ≥ 1.6×), the share of a rank's step spent
averaging gradients — packing, all-reduce and unpacking, waits for the other rank
included — (target ≤ 25 %), what DataParallel adds to a step in a world of one process
(target ≤ 2 %: plain and wrapped steps interleaved in one process), and the
load average before and after (the machine's other users slow some runs down).

As a harness module (``python -m fastop bench``): the step of the MLP, plain and
wrapped in DataParallel in a world of one process.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import fastop
from fastop import nn

SIZES = (784, 1024, 1024, 10)
GLOBAL_BATCH = 1024
HERE = Path(__file__).resolve()


def mlp(sizes=SIZES) -> nn.Sequential:
    fastop.seed(0)
    layers = []
    for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(n_in, n_out))
        if i < len(sizes) - 2:
            layers.append(nn.Tanh())
    return nn.Sequential(*layers)


def training_step(net, model, batch: int, rank: int = 0, world: int = 1):
    """One SGD step of `model` (wrapping `net`) on this rank's share of a fixed batch."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, net[0].in_features)).astype(np.float32)
    y = rng.integers(0, net[-1].out_features, batch)
    share = slice(rank * batch // world, (rank + 1) * batch // world)
    tx, ty = fastop.to_tensor(x[share]), fastop.to_tensor(y[share])
    opt = fastop.optimizer.SGD(0.01, parameters=net.parameters())
    loss_fn = nn.CrossEntropyLoss()

    def step():
        loss_fn(model(tx), ty).backward()
        opt.step()
        opt.clear_grad(set_to_zero=False)
    return step


# -- the harness's cases ---------------------------------------------------------------

def register(suite) -> None:
    sizes = (784, 256, 256, 10) if suite.quick else SIZES
    batch = 64 if suite.quick else GLOBAL_BATCH
    name = f"MLP {'-'.join(map(str, sizes))} step, batch {batch}"
    for label, wrap in (("plain", False), ("DataParallel, world of one", True)):
        net = mlp(sizes)
        suite.add("distributed", f"{name}, {label}",
                  fastop=training_step(net, fastop.DataParallel(net) if wrap else net, batch))


# -- the script ------------------------------------------------------------------------

def worker(out: str, steps: int, batch: int, bare: bool) -> None:
    """One run (one process, or every rank of an mpiexec job): median step time and,
    with several ranks, median time of the gradient averaging (timed by backward-end
    hooks registered around DataParallel's own); rank 0 writes them to `out`. `bare`:
    no DataParallel, one in-place mpi4py Allreduce of a gradient-sized buffer instead."""
    import fastop.distributed as dist
    from fastop.autograd import register_backward_end_hook
    dist.init_parallel_env()
    rank, world = dist.get_rank(), dist.get_world_size()
    net = mlp()
    marks = {}
    register_backward_end_hook(lambda: marks.__setitem__("start", time.perf_counter()))
    if bare and world > 1:
        from mpi4py import MPI
        flat = np.zeros(sum(int(np.prod(p.shape)) for p in net.parameters()), np.float32)
        register_backward_end_hook(lambda: MPI.COMM_WORLD.Allreduce(MPI.IN_PLACE, flat))
        model = net
    else:
        model = fastop.DataParallel(net) if world > 1 else net
    register_backward_end_hook(lambda: marks.__setitem__("end", time.perf_counter()))
    step = training_step(net, model, batch, rank, world)
    for _ in range(3):
        step()
    times, comm = [], []
    for _ in range(steps):
        dist.barrier()
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
        comm.append(marks["end"] - marks["start"])
    if rank == 0:
        Path(out).write_text(json.dumps({"step": statistics.median(times),
                                         "comm": statistics.median(comm) if world > 1
                                         else 0.0, "threads": fastop.get_num_threads()}))


def world_of_one_overhead(sizes, batch: int, pairs: int) -> tuple[float, float]:
    """What wrapping adds to a step in one process, from interleaved samples of the
    plain and the wrapped step: the ratio of their fastest samples - 1 (other load only
    ever adds time) and the median of the per-pair ratios - 1."""
    plain_net, wrapped_net = mlp(sizes), mlp(sizes)
    plain = training_step(plain_net, plain_net, batch)
    wrapped = training_step(wrapped_net, fastop.DataParallel(wrapped_net), batch)
    repeat = max(1, int(0.05 / _time(plain)))          # ~50 ms per sample
    samples: dict = {plain: [], wrapped: []}
    for k in range(pairs):
        for fn in ((plain, wrapped) if k % 2 else (wrapped, plain)):
            samples[fn].append(_time(fn, repeat))
    ratios = [w / p for p, w in zip(samples[plain], samples[wrapped])]
    return min(samples[wrapped]) / min(samples[plain]) - 1, statistics.median(ratios) - 1


def wrapper_cost(calls: int = 20000, repeats: int = 7) -> float:
    """Seconds DataParallel adds to one forward call in a world of one process (it adds
    nothing else there: no backward hook): DataParallel(Identity) against Identity, the
    fastest of `repeats` timings of `calls` calls each — a cost too small to see in a
    step's noise, measured where it can be seen."""
    x = fastop.ones([1])
    bare = nn.Identity()
    wrapped = fastop.DataParallel(nn.Identity())
    best = {bare: float("inf"), wrapped: float("inf")}
    for _ in range(repeats):
        for layer in best:
            start = time.perf_counter()
            for _ in range(calls):
                layer(x)
            best[layer] = min(best[layer], (time.perf_counter() - start) / calls)
    return best[wrapped] - best[bare]


def _time(fn, repeat: int = 1) -> float:
    fn()
    start = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - start) / repeat


def run_once(kind: str, steps: int) -> dict:
    """``one``: one process on the global batch; ``mpi``: 2 ranks under mpiexec;
    ``pair``: 2 independent processes at once, each on half the batch — the speed-up
    the machine allows without any communication (its other users, shared caches and
    memory bandwidth set it); ``bare``: 2 ranks, plain steps plus one bare Allreduce of
    the gradients' size — the limit with the communication data parallelism needs."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "FASTOP_NUM_THREADS": "1",
           "OPENBLAS_NUM_THREADS": "1"}
    with tempfile.TemporaryDirectory() as tmp:
        outs = [os.path.join(tmp, f"result{k}.json") for k in range(2)]
        batch = GLOBAL_BATCH // 2 if kind == "pair" else GLOBAL_BATCH
        cmds = [[sys.executable, str(HERE), "--worker", out, "--steps", str(steps),
                 "--batch", str(batch)] for out in outs[:2 if kind == "pair" else 1]]
        if kind in ("mpi", "bare"):
            mpiexec = Path(sys.executable).parent / "mpiexec"
            cmds = [[str(mpiexec), "-n", "2", sys.executable, "-m", "mpi4py", *cmds[0][1:],
                     *(["--bare"] if kind == "bare" else [])]]
        procs = [subprocess.Popen(cmd, env=env) for cmd in cmds]
        if any(p.wait(timeout=600) for p in procs):
            raise RuntimeError(f"a {kind} run failed")
        results = [json.loads(Path(out).read_text()) for out in outs[:len(cmds)]]
        return max(results, key=lambda r: r["step"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--worker", metavar="OUT", help=argparse.SUPPRESS)
    parser.add_argument("--batch", type=int, default=GLOBAL_BATCH, help=argparse.SUPPRESS)
    parser.add_argument("--bare", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.steps, args.batch, args.bare)
        return 0
    load_before = os.getloadavg()
    one, two, pair, bare = [], [], [], []
    for _ in range(args.repeats):
        one.append(run_once("one", args.steps))
        two.append(run_once("mpi", args.steps))
        pair.append(run_once("pair", args.steps))
        bare.append(run_once("bare", args.steps))
    load_after = os.getloadavg()
    t1 = statistics.median(r["step"] for r in one)
    t2 = statistics.median(r["step"] for r in two)
    ceiling = t1 / statistics.median(r["step"] for r in pair)
    limit = t1 / statistics.median(r["step"] for r in bare)
    share = statistics.median(r["comm"] / r["step"] for r in two)
    speedups = sorted(a["step"] / b["step"] for a, b in zip(one, two))
    fastop.set_num_threads(1)
    overhead_big = world_of_one_overhead(SIZES, GLOBAL_BATCH, pairs=7)
    overhead_small = world_of_one_overhead((784, 256, 256, 10), 64, pairs=15)
    small_net = mlp((784, 256, 256, 10))
    small_step = min(_time(training_step(small_net, small_net, 64)) for _ in range(15))
    per_call = wrapper_cost()
    print(f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f} "
          f"({os.cpu_count()} cores)")
    print(f"784-1024-1024-10 MLP, global batch {GLOBAL_BATCH}, medians of {args.repeats} "
          f"runs x {args.steps} steps:")
    print(f"  1 process, 1 thread:      {1e3 * t1:7.1f} ms/step")
    print(f"  2 ranks, 1 thread each:   {1e3 * t2:7.1f} ms/step  speed-up {t1 / t2:.2f}x "
          f"(goal >= 1.6; per repeat {', '.join(f'{s:.2f}' for s in speedups)})")
    print(f"  2 independent processes on half the batch each, at once: speed-up "
          f"{ceiling:.2f}x (what the machine allows without communication)")
    print(f"  2 ranks, plain steps + one bare Allreduce of all gradients: speed-up "
          f"{limit:.2f}x (the limit with the communication needed); DataParallel reaches "
          f"{100 * (t1 / t2) / limit:.1f} % of it")
    print(f"  gradient averaging share of a rank's step: {100 * share:.1f} % (goal <= 25 %)")
    for label, (fastest, median) in (("this step", overhead_big),
                                     ("a 784-256-256-10 batch-64 step", overhead_small)):
        print(f"DataParallel in a world of one process adds {100 * fastest:+.2f} % to "
              f"{label} (fastest samples; median of pairs {100 * median:+.2f} %; "
              f"goal <= 2 %)")
    print(f"  measured where it shows: the wrapper adds {1e6 * per_call:.2f} us per forward "
          f"call = {100 * per_call / small_step:.3f} % of the {1e3 * small_step:.1f} ms "
          f"batch-64 step")
    return 0


if __name__ == "__main__":
    sys.exit(main())
