"""Data-parallel training: a 784-1024-1024-10 tanh MLP (1.9M parameters, 7.4 MB of
float32 gradients), softmax cross-entropy, SGD.

As a script — the figures of the data-parallel issue, side by side in one run::

    python benchmarks/bench_distributed.py --ranks 1,2,4,8 [--repeats 3] [--steps 10] [--plot]

For each rank count N, interleaved over ``--repeats`` rounds (medians reported), one
thread per rank, ranks started by ``python -m fastop.distributed.launch``:

* weak scaling (256 samples per rank): ``DataParallel``; the no-communication ceiling
  (N independent processes taking plain steps at once); the bare all-reduce limit (N
  ranks taking plain steps plus one bare mpi4py ``Allreduce`` of the gradients' bytes
  per step), and, in the same job, that ``Allreduce`` alone, DataParallel's averaging
  of the same gradients alone (its buckets' ``average()``), and a memory copy of the
  same bytes; torch DistributedDataParallel (gloo) when torch is installed;
* strong scaling (global batch 1024, 1024/N per rank): ``DataParallel``, its speed-up
  over one process on the whole batch, the ceiling, torch DDP.

Each ``DataParallel`` row gives the share of a rank's step spent in DataParallel's code
(starting buckets during backward, waiting for them at its end). ``--plot [FILE]``
draws both scalings (matplotlib). The world-of-one overhead (goal ≤ 2 %) comes last.

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

WEAK_PER_RANK = 256
TORCH_WORKER = "torch"


def _step_batch(per: int, rank: int):
    rng = np.random.default_rng(rank + 1)
    x = rng.standard_normal((per, SIZES[0])).astype(np.float32)
    y = rng.integers(0, SIZES[-1], per).astype(np.int64)
    return x, y


def _time_steps(step, steps: int, sync=None) -> list[float]:
    for _ in range(3):
        step()
    times = []
    for _ in range(steps):
        if sync is not None:
            sync()
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return times


def worker(out: str, mode: str, per: int, steps: int) -> None:
    """One run (one process, or every rank of a launched job); rank 0 writes its
    medians to `out`. `mode`: ``dp`` (DataParallel; alone: plain), ``plain`` (no
    communication: one of the ceiling's independent processes), ``bare`` (plain steps
    plus one mpi4py Allreduce of the gradients' bytes; then that Allreduce and a copy
    of the bytes alone), ``torch`` (torch DDP, gloo)."""
    if mode == TORCH_WORKER:
        return torch_worker(out, per, steps)
    import fastop.distributed as dist
    from fastop.autograd import register_backward_end_hook
    from fastop.distributed import _buckets
    dist.init_parallel_env()
    rank, world = dist.get_rank(), dist.get_world_size()
    net = mlp()
    x, y = _step_batch(per, rank)
    tx, ty = fastop.to_tensor(x), fastop.to_tensor(y)
    opt = fastop.optimizer.SGD(0.01, parameters=net.parameters())
    loss_fn = nn.CrossEntropyLoss()
    in_dp = [0.0]
    model, result = net, {}
    if mode == "dp" and world > 1:
        model = fastop.DataParallel(net)
        for name in ("gradient_ready", "finish"):      # time DataParallel's own code
            original = getattr(_buckets.GradientBuckets, name)

            def timed(*args, _original=original):
                start = time.perf_counter()
                try:
                    return _original(*args)
                finally:
                    in_dp[0] += time.perf_counter() - start
            setattr(_buckets.GradientBuckets, name, timed)
    flat = np.zeros(sum(int(np.prod(p.shape)) for p in net.parameters()), np.float32)
    if mode == "bare" and world > 1:
        from mpi4py import MPI
        register_backward_end_hook(lambda: MPI.COMM_WORLD.Allreduce(MPI.IN_PLACE, flat))

    def step():
        loss_fn(model(tx), ty).backward()
        opt.step()
        opt.clear_grad()
    sync = dist.barrier if world > 1 and mode != "plain" else None
    shares = []

    def measured():
        in_dp[0] = 0.0
        start = time.perf_counter()
        step()
        shares.append(in_dp[0] / (time.perf_counter() - start))
    times = _time_steps(measured, steps, sync)
    result["step"] = statistics.median(times)
    result["share"] = statistics.median(shares[3:]) if mode == "dp" and world > 1 else 0.0
    if mode == "bare":
        copy_to = np.empty_like(flat)
        result["memcpy"] = statistics.median(_time_steps(
            lambda: np.copyto(copy_to, flat), steps))
        if world > 1:
            from mpi4py import MPI
            result["allreduce"] = statistics.median(_time_steps(
                lambda: MPI.COMM_WORLD.Allreduce(MPI.IN_PLACE, flat), steps, dist.barrier))
            buckets = _buckets.GradientBuckets(net.parameters(), 25, 1, "bench")
            for p in net.parameters():      # from the first average on: the buckets' views
                p.grad = fastop.ones(p.shape)
            result["averaging"] = statistics.median(_time_steps(
                buckets.average, steps, dist.barrier))
    if rank == 0:
        Path(out).write_text(json.dumps(result))


def torch_worker(out: str, per: int, steps: int) -> None:
    """torch's step on the same MLP, under DistributedDataParallel (gloo) with several
    ranks (the launcher's PMI_RANK/PMI_SIZE; the port in FASTOP_BENCH_PORT)."""
    import torch
    import torch.distributed as tdist
    torch.set_num_threads(1)
    rank, world = int(os.environ.get("PMI_RANK", 0)), int(os.environ.get("PMI_SIZE", 1))
    torch.manual_seed(0)
    layers = []
    for i, (n_in, n_out) in enumerate(zip(SIZES[:-1], SIZES[1:])):
        layers.append(torch.nn.Linear(n_in, n_out))
        if i < len(SIZES) - 2:
            layers.append(torch.nn.Tanh())
    net = model = torch.nn.Sequential(*layers)
    if world > 1:
        tdist.init_process_group(
            "gloo", init_method=f"tcp://127.0.0.1:{os.environ['FASTOP_BENCH_PORT']}",
            rank=rank, world_size=world)
        model = torch.nn.parallel.DistributedDataParallel(net)
    x, y = _step_batch(per, rank)
    tx, ty = torch.from_numpy(x), torch.from_numpy(y)
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step():
        loss_fn(model(tx), ty).backward()
        opt.step()
        opt.zero_grad()
    times = _time_steps(step, steps, tdist.barrier if world > 1 else None)
    if rank == 0:
        Path(out).write_text(json.dumps({"step": statistics.median(times)}))
    if world > 1:
        tdist.destroy_process_group()


def _free_port() -> int:
    import socket
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_job(mode: str, ranks: int, per: int, steps: int) -> dict:
    """Run one measurement: `ranks` launched ranks (``plain``: that many independent
    processes at once), one thread each; rank 0's (for ``plain``: the slowest
    process's) result."""
    env = {**os.environ, **{var: "1" for var in
                            ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                             "FASTOP_NUM_THREADS")}, "FASTOP_BENCH_PORT": str(_free_port())}
    with tempfile.TemporaryDirectory() as tmp:
        outs = [os.path.join(tmp, f"result{k}.json") for k in range(ranks)]
        args = [str(HERE), "--worker", mode, "--per", str(per), "--steps", str(steps),
                "--out"]
        if mode == "plain" or ranks == 1:
            procs = [subprocess.Popen([sys.executable, *args, out], env=env)
                     for out in (outs if mode == "plain" else outs[:1])]
        else:
            procs = [subprocess.Popen([sys.executable, "-m", "fastop.distributed.launch",
                                       "-n", str(ranks), "--threads", "1", *args, outs[0]],
                                      env=env)]
        if any(p.wait(timeout=900) for p in procs):
            raise RuntimeError(f"the {mode} run at {ranks} ranks failed")
        results = [json.loads(Path(out).read_text()) for out in outs[:len(procs)]]
        return max(results, key=lambda r: r["step"])


def _median(rows: list[dict], key: str) -> float:
    values = [r[key] for r in rows if key in r]
    return statistics.median(values) if values else float("nan")


def measure(ranks: list[int], repeats: int, steps: int, with_torch: bool) -> dict:
    """{(scaling, N, mode): [results]}, interleaved: every round runs every case once."""
    cases = []
    for n in ranks:
        cases += [("weak", n, m) for m in ("dp", "plain", "bare")]
        cases += [("strong", n, m) for m in ("dp", "plain")]
        if with_torch:
            cases += [("weak", n, TORCH_WORKER), ("strong", n, TORCH_WORKER)]
    results: dict = {case: [] for case in cases}
    for _ in range(repeats):
        for scaling, n, mode in cases:
            per = WEAK_PER_RANK if scaling == "weak" else GLOBAL_BATCH // n
            results[scaling, n, mode].append(run_job(mode, n, per, steps))
    return results


def report(results: dict, ranks: list[int], with_torch: bool) -> list[dict]:
    """Print the tables; the rows (for the plot)."""
    rows = []
    print(f"\nweak scaling, {WEAK_PER_RANK} samples per rank (ms per step, medians):")
    print(f"{'ranks':>5} {'DataParallel':>12} {'ceiling':>8} {'% of ceiling':>12} "
          f"{'bare limit':>10} {'allreduce':>9} {'DP averaging':>12} {'memcpy':>7} "
          f"{'DP share':>8}"
          + (f" {'torch DDP':>9}" if with_torch else ""))
    for n in ranks:
        r = {"ranks": n, "scaling": "weak",
             "dp": _median(results["weak", n, "dp"], "step"),
             "ceiling": _median(results["weak", n, "plain"], "step"),
             "bare": _median(results["weak", n, "bare"], "step"),
             "allreduce": _median(results["weak", n, "bare"], "allreduce"),
             "memcpy": _median(results["weak", n, "bare"], "memcpy"),
             "averaging": _median(results["weak", n, "bare"], "averaging"),
             "share": _median(results["weak", n, "dp"], "share")}
        if with_torch:
            r["torch"] = _median(results["weak", n, TORCH_WORKER], "step")
        rows.append(r)
        print(f"{n:>5} {1e3 * r['dp']:>12.1f} {1e3 * r['ceiling']:>8.1f} "
              f"{100 * r['ceiling'] / r['dp']:>11.0f}% {1e3 * r['bare']:>10.1f} "
              f"{1e3 * r['allreduce']:>9.2f} {1e3 * r['averaging']:>12.2f} "
              f"{1e3 * r['memcpy']:>7.2f} "
              f"{100 * r['share']:>7.1f}%" + (f" {1e3 * r['torch']:>9.1f}" if with_torch else ""))
    one = _median(results["strong", ranks[0], "dp"], "step") if ranks[0] == 1 else None
    print(f"\nstrong scaling, global batch {GLOBAL_BATCH} (ms per step, medians"
          f"{'; speed-up over 1 process' if one else ''}):")
    print(f"{'ranks':>5} {'DataParallel':>12} {'speed-up':>8} {'ceiling':>8} {'DP share':>8}"
          + (f" {'torch DDP':>9} {'speed-up':>8}" if with_torch else ""))
    torch_one = _median(results["strong", 1, TORCH_WORKER], "step") \
        if with_torch and one else None
    for n in ranks:
        r = {"ranks": n, "scaling": "strong",
             "dp": _median(results["strong", n, "dp"], "step"),
             "ceiling": _median(results["strong", n, "plain"], "step"),
             "share": _median(results["strong", n, "dp"], "share")}
        r["speedup"] = one / r["dp"] if one else float("nan")
        line = (f"{n:>5} {1e3 * r['dp']:>12.1f} {r['speedup']:>7.2f}x "
                f"{1e3 * r['ceiling']:>8.1f} {100 * r['share']:>7.1f}%")
        if with_torch:
            r["torch"] = _median(results["strong", n, TORCH_WORKER], "step")
            r["torch_speedup"] = torch_one / r["torch"] if torch_one else float("nan")
            line += f" {1e3 * r['torch']:>9.1f} {r['torch_speedup']:>7.2f}x"
        rows.append(r)
        print(line)
    return rows


def plot(rows: list[dict], path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (weak_ax, strong_ax) = plt.subplots(1, 2, figsize=(11, 4))
    weak = [r for r in rows if r["scaling"] == "weak"]
    n = [r["ranks"] for r in weak]
    for key, label in (("dp", "DataParallel"), ("ceiling", "no communication (ceiling)"),
                       ("bare", "plain + bare Allreduce (limit)"), ("torch", "torch DDP gloo")):
        if all(key in r for r in weak):
            weak_ax.plot(n, [1e3 * r[key] for r in weak], marker="o", label=label)
    weak_ax.set(xlabel="ranks", ylabel="ms per step", title=f"weak scaling, "
                f"{WEAK_PER_RANK} per rank", xticks=n)
    weak_ax.legend()
    strong = [r for r in rows if r["scaling"] == "strong"]
    n = [r["ranks"] for r in strong]
    strong_ax.plot(n, n, linestyle=":", color="grey", label="linear")
    strong_ax.plot(n, [r["speedup"] for r in strong], marker="o", label="DataParallel")
    if all("torch_speedup" in r for r in strong):
        strong_ax.plot(n, [r["torch_speedup"] for r in strong], marker="o",
                       label="torch DDP gloo")
    strong_ax.set(xlabel="ranks", ylabel="speed-up over 1 process",
                  title=f"strong scaling, global batch {GLOBAL_BATCH}", xticks=n)
    strong_ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    print(f"plot: {path}")


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


def _time(fn, repeat: int = 1) -> float:
    fn()
    start = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - start) / repeat


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", default="1,2,4,8",
                        help="rank counts, comma-separated (default 1,2,4,8)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--plot", nargs="?", const="bench_distributed.png", default=None,
                        metavar="FILE", help="draw the scalings (default file: "
                                             "bench_distributed.png)")
    parser.add_argument("--no-torch", action="store_true", help="skip torch DDP")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--per", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.out, args.worker, args.per, args.steps)
        return 0
    ranks = sorted({int(n) for n in args.ranks.split(",")} | {1})
    with_torch = not args.no_torch
    if with_torch:
        try:
            import torch  # noqa: F401
        except ImportError:
            with_torch = False
            print("torch is not installed: no torch DDP rows")
    load_before = os.getloadavg()
    results = measure(ranks, args.repeats, args.steps, with_torch)
    load_after = os.getloadavg()
    print(f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f} "
          f"({os.cpu_count()} cores); 784-1024-1024-10 MLP, one thread per rank, "
          f"medians of {args.repeats} rounds x {args.steps} steps")
    rows = report(results, ranks, with_torch)
    if args.plot:
        plot(rows, args.plot)
    fastop.set_num_threads(1)
    for label, sizes, batch, pairs in (("this step", SIZES, GLOBAL_BATCH, 7),
                                       ("a 784-256-256-10 batch-64 step",
                                        (784, 256, 256, 10), 64, 15)):
        fastest, median = world_of_one_overhead(sizes, batch, pairs)
        print(f"DataParallel in a world of one process adds {100 * fastest:+.2f} % to "
              f"{label} (fastest samples; median of pairs {100 * median:+.2f} %; "
              f"goal <= 2 %)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
