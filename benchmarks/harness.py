"""The harness behind ``python -m fastop bench``: fastop, numpy and PyTorch measured side
by side, one process per thread count, over the ``register(suite)`` functions of the
``bench_*.py`` modules beside it (see README.md here).

What it does itself, because no benchmark library does: it interleaves the samples of
fastop, numpy and torch, rotating their order every round, so machine noise hits all
three alike; with more than one thread each sample starts once the previous sample's
threads have gone idle (:func:`wait_for_idle_threads`). pyperf does the rest: ``--json``
writes a pyperf BenchmarkSuite (a benchmark per case, implementation and thread count,
its values the samples), into which pyperf records the machine (CPU, affinity, load,
Python); ``python -m pyperf stats|compare_to|hist`` read it. pyperf rather than
pytest-benchmark because this is a command, not a pytest session; pyperf's Runner is not
used because it measures one benchmark at a time, and interleaving is the point.
"""
from __future__ import annotations

import gc
import importlib.util
import json
import os
import site
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Callable, NamedTuple

import numpy
import pyperf

import fastop

IMPLS = ("fastop", "numpy", "torch")
THREAD_ENV = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
              "FASTOP_NUM_THREADS")
SIMD_FLAGS = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl")


class BenchError(Exception):
    """A usage error: no bench modules, a bad case, a file that is no report."""


class Case(NamedTuple):
    group: str
    name: str
    impls: dict[str, Callable[[], Any]]   # "fastop" always, "numpy"/"torch" when given
    target: str = ""                      # the goal for the case, shown as is

    @property
    def key(self) -> str:
        return f"{self.group}/{self.name}"


class Suite:
    """What ``register(suite)`` gets: ``quick`` (small sizes), ``threads`` (of this
    process), ``torch`` (the module, or None) and :meth:`add`."""

    def __init__(self, quick: bool = False, threads: int = 1, torch: Any = None) -> None:
        self.quick, self.threads, self.torch = quick, threads, torch
        self.cases: list[Case] = []

    def add(self, group: str, name: str, *, fastop: Callable[[], Any],
            numpy: Callable[[], Any] | None = None, torch: Callable[[], Any] | None = None,
            target: str = "") -> None:
        """A case: zero-argument callables doing the same computation once each."""
        if not callable(fastop) or not all(f is None or callable(f) for f in (numpy, torch)):
            raise BenchError(f"case {group}/{name}: fastop= must be callable, numpy= and "
                             f"torch= callable or None")
        if any(c.key == f"{group}/{name}" for c in self.cases):
            raise BenchError(f"case {group}/{name}: defined twice")
        impls = {k: f for k, f in (("fastop", fastop), ("numpy", numpy), ("torch", torch))
                 if f is not None}
        self.cases.append(Case(group, name, impls, target))


# -- measuring ---------------------------------------------------------------------------
def _sample(fn: Callable[[], Any], loops: int, clock: Callable[[], float]) -> float:
    """Seconds per call over ``loops`` calls, the garbage collector off."""
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        start = clock()
        for _ in range(loops):
            fn()
        return (clock() - start) / loops
    finally:
        if gc_was_enabled:
            gc.enable()


def measure(case: Case, quick: bool = False, settle: Callable[[], Any] | None = None,
            clock: Callable[[], float] = time.perf_counter
            ) -> dict[str, tuple[int, list[float]]]:
    """Per implementation, its loop count and its samples (seconds per call). Each
    implementation runs once untimed (first-call costs stay out), gets a loop count that
    makes a sample last ~25 ms (10 ms quick), then rounds sample every implementation
    once, in a rotating order, ``settle()`` (untimed) before each sample. Slow cases get
    fewer rounds (a time budget per case), never fewer than a minimum."""
    sample_time, rounds, budget, min_rounds = \
        (0.010, 5, 1.0, 3) if quick else (0.025, 9, 6.0, 5)
    impls, loops, round_time = list(case.impls), {}, 0.0
    for impl in impls:
        fn, n = case.impls[impl], 1
        fn()
        while (per_call := _sample(fn, n, clock)) * n < sample_time / 5 and n < 10**7:
            n *= 10
        loops[impl] = max(1, round(sample_time / per_call)) if per_call > 0 else n
        round_time += loops[impl] * per_call
    if round_time > 0:
        rounds = max(min_rounds, min(rounds, int(budget / round_time)))
    samples: dict[str, list[float]] = {impl: [] for impl in impls}
    for r in range(rounds):
        for impl in impls[r % len(impls):] + impls[:r % len(impls)]:
            if settle is not None:
                settle()
            samples[impl].append(_sample(case.impls[impl], loops[impl], clock))
    return {impl: (loops[impl], samples[impl]) for impl in impls}


def _other_threads_running() -> int:
    """Threads of this process but the caller's in state R (0 without /proc)."""
    me, running = threading.get_native_id(), 0
    for tid in os.listdir("/proc/self/task") if os.path.isdir("/proc/self/task") else ():
        try:
            with open(f"/proc/self/task/{tid}/stat", "rb") as f:
                running += int(tid) != me and f.read().rsplit(b")", 1)[1].split()[0] == b"R"
        except (OSError, IndexError):
            continue   # the thread ended meanwhile
    return running


def wait_for_idle_threads(limit: float = 0.25) -> float:
    """Wait (polling every 0.5 ms, at most ``limit`` s) until no other thread of this
    process runs: the pools the previous sample woke (numpy's OpenBLAS spins ~0.1 s after
    a call) have gone to sleep and leave the cores to the next sample (measurements in
    docs/PERFORMANCE.md). Returns the seconds waited."""
    start = time.perf_counter()
    while _other_threads_running() and time.perf_counter() - start < limit:
        time.sleep(0.0005)
    return time.perf_counter() - start


# -- the worker: one thread count, one process -------------------------------------------
def load_modules(directory: Path, suite: Suite) -> list[str]:
    """Run each ``bench_*.py`` and its ``register(suite)``; an error per module that
    fails, the others register all the same."""
    errors = []
    sys.path.insert(0, str(directory))   # bench modules may import each other's helpers
    for path in sorted(directory.glob("bench_*.py")):
        try:
            spec = importlib.util.spec_from_file_location(path.stem, path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            register = getattr(module, "register", None)
            register(suite) if callable(register) else errors.append(
                f"{path.name}: no register(suite) function")
        except Exception as exc:
            errors.append(f"{path.name}: {_describe(exc)}")
    return errors


def _describe(exc: BaseException) -> str:
    where = "".join(f" (at {Path(f.filename).name}:{f.lineno})"
                    for f in traceback.extract_tb(exc.__traceback__)[-1:])
    return f"{type(exc).__name__}: {exc}{where}"


def _simd() -> str:
    """The SIMD extensions of the CPU that numpy and fastop pick kernels by."""
    cpuinfo = Path("/proc/cpuinfo").read_text() if os.path.exists("/proc/cpuinfo") else ""
    flags = next((ln.split() for ln in cpuinfo.splitlines() if ln.startswith("flags")), [])
    return " ".join(f for f in SIMD_FLAGS if f in flags) or "unknown"


def _worker(out: str, threads: int, directory: str, quick: bool, no_torch: bool,
            only: str, command: str) -> None:
    """Measure the cases at one thread count, writing JSON lines to ``out``: one pyperf
    suite per implementation measured, ``{"start": key}`` before a case (so a crash can
    be named), ``{"error": text}``."""
    torch = None
    if not no_torch and importlib.util.find_spec("torch") is not None:
        import torch
        torch.set_num_threads(threads)
    suite = Suite(quick, threads, torch)
    errors = load_modules(Path(directory), suite)
    common = {f"{lib.__name__}_version": lib.__version__
              for lib in (fastop, numpy, torch) if lib is not None}
    common.update(command=command, threads=threads, cpu_simd=_simd(),
                  fastop_threads=fastop.get_num_threads())
    if torch is not None:
        common["torch_threads"] = torch.get_num_threads()
    cases = [c for c in suite.cases if only.lower() in c.key.lower()]
    settle = wait_for_idle_threads if threads > 1 else None
    say = lambda line: print(line, file=sys.stderr, flush=True)   # noqa: E731
    if sys.stderr.isatty():   # a progress bar on a terminal, plain lines elsewhere
        from tqdm import tqdm
        cases = tqdm(cases, desc=f"{threads} thread(s)", unit="case", leave=False)
        say = cases.write
    with open(out, "w", encoding="utf-8") as f:
        def emit(**record: Any) -> None:
            f.write(json.dumps(record) + "\n")
            f.flush()
        for error in errors:
            emit(error=error)
        for case in cases:
            emit(start=case.key)
            try:
                measured = measure(case, quick, settle)
            except Exception as exc:
                emit(error=f"{case.key}: {_describe(exc)}")
                continue
            for impl, (loops, values) in measured.items():
                meta = dict(common, name=f"{case.key} [{impl}, {threads} thread(s)]",
                            group=case.group, case=case.name, impl=impl, loops=loops)
                if case.target:   # pyperf refuses empty metadata
                    meta["target"] = case.target
                pyperf.Benchmark([pyperf.Run(values, metadata=meta)]).dump(f)
            say(f"  [{threads} thr] {case.key}: " + ", ".join(
                f"{impl} {format_time(statistics.median(values))}"
                for impl, (_, values) in measured.items()))


# -- the parent: a worker per thread count, then the report -------------------------------
def _worker_env(threads: int) -> dict[str, str]:
    """The environment with the thread variables set and, for a fastop used from a source
    checkout, its directory first on PYTHONPATH (never site-packages: it would precede
    the standard library)."""
    env = dict(os.environ, **{name: str(threads) for name in THREAD_ENV})
    root = os.path.realpath(Path(fastop.__file__).parents[1])
    if root not in {os.path.realpath(d) for d in site.getsitepackages()}:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    return env


def _run_worker(threads: int, config: dict[str, Any]
                ) -> tuple[list[pyperf.Benchmark], list[str]]:
    with tempfile.TemporaryDirectory(prefix="fastop-bench-") as tmp:
        out = Path(tmp) / "worker.jsonl"
        # what bench modules print goes to stderr: stdout carries only the table
        try:
            stdout = sys.stderr.fileno()
        except (AttributeError, OSError, ValueError):   # a replaced stderr (notebooks)
            stdout = None
        proc = subprocess.run([sys.executable, __file__, json.dumps(
            dict(config, out=str(out), threads=threads))], env=_worker_env(threads),
            stdout=stdout)
        records = out.read_text().splitlines() if out.exists() else []
    benchmarks, errors, started = [], [], None
    for line in records:
        record = json.loads(line)
        if "benchmarks" in record:
            benchmarks += pyperf.BenchmarkSuite.loads(line).get_benchmarks()
            started = None
        elif "start" in record:
            started = record["start"]
        else:
            errors.append(f"[{threads} thread(s)] {record['error']}")
    if proc.returncode:
        errors.append(f"[{threads} thread(s)] the benchmark process exited with code "
                      f"{proc.returncode}" + (f" while running {started}" if started else ""))
    return benchmarks, errors


def run(args: Any) -> int:
    """``fastop bench`` with the options cli.py parsed; the exit code."""
    if args.summarize:
        suites = [_load_report(path) for path in args.summarize]
        print(format_report(suites), end="")
        if args.plot:        # the medians over the runs: a steadier picture than one run
            plot(suites, args.plot)
            print(f"fastop bench: wrote {args.plot}", file=sys.stderr)
        return 0
    directory = Path(args.dir).resolve()
    if not any(directory.glob("bench_*.py")):
        raise BenchError(f"no bench_*.py modules in {directory}")
    config = {"directory": str(directory), "quick": args.quick, "no_torch": args.no_torch,
              "only": args.filter or "", "command": " ".join(["fastop bench", *args.argv])}
    benchmarks, errors = [], []
    for threads in args.threads:
        print(f"fastop bench: {threads} thread(s), {directory}", file=sys.stderr, flush=True)
        done, failed = _run_worker(threads, config)
        benchmarks, errors = benchmarks + done, errors + failed
    if not benchmarks:
        print("fastop bench: no case ran" + (f" (--filter {args.filter!r})" if args.filter
                                             else ""), file=sys.stderr)
        return 1
    suite = pyperf.BenchmarkSuite(benchmarks)
    print(format_table([suite]))
    for error in errors:
        print(f"error {error}", file=sys.stderr)
    for path, write in ((args.json, lambda p: suite.dump(p, compact=False, replace=True)),
                        (args.markdown, lambda p: Path(p).write_text(format_report([suite]))),
                        (args.plot, lambda p: plot([suite], p))):
        if path:
            write(path)
            print(f"fastop bench: wrote {path}", file=sys.stderr)
    return 1 if errors else 0


def _load_report(path: str) -> pyperf.BenchmarkSuite:
    try:
        suite = pyperf.BenchmarkSuite.load(path)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise BenchError(f"--summarize: cannot read {path}: {exc}") from None
    if not all("impl" in b.get_metadata() for b in suite):
        raise BenchError(f"--summarize: {path} is not a fastop bench --json file")
    return suite


# -- reporting ----------------------------------------------------------------------------
def table(suites: list[pyperf.BenchmarkSuite]) -> list[dict[str, Any]]:
    """A row per case and thread count, in the order measured: each implementation's
    median time over the runs (files), and the median of the per-run ratios ``other time
    / fastop time`` (above 1: fastop is faster). A ratio only compares samples of one run:
    ratios are never recomputed from times of different runs."""
    runs = []
    for suite in suites:
        rows: dict[tuple, dict[str, Any]] = {}
        for bench in suite:
            m = bench.get_metadata()
            rows.setdefault((m["group"], m["case"], m["threads"]),
                            {"target": m.get("target", "")})[m["impl"]] = bench.median()
        runs.append(rows)

    def median(values: list[float]) -> float | None:
        return statistics.median(values) if values else None
    result = []
    for key in dict.fromkeys(k for rows in runs for k in rows):
        present = [rows[key] for rows in runs if key in rows]
        result.append({"group": key[0], "case": key[1], "threads": key[2],
                       "target": present[0]["target"], "runs": len(present),
                       **{i: median([r[i] for r in present if i in r]) for i in IMPLS},
                       **{f"vs {o}": median([r[o] / r["fastop"] for r in present if o in r])
                          for o in IMPLS[1:]}})
    return result


def format_time(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    unit, scale = next((u, s) for u, s in (("s", 1), ("ms", 1e-3), ("µs", 1e-6),
                                           ("ns", 1e-9)) if seconds >= s or u == "ns")
    return f"{seconds / scale:.3g} {unit}"


def format_table(suites: list[pyperf.BenchmarkSuite]) -> str:
    """The rows as a Markdown table padded to line up in a terminal too."""
    header = ["group", "case", "threads", *IMPLS, "vs numpy", "vs torch", "target", "runs"]
    rows = [header] + [[r["group"], r["case"], str(r["threads"]),
                        *(format_time(r[i]) for i in IMPLS),
                        *("—" if r[k] is None else f"{r[k]:.2f}×" for k in header[6:8]),
                        r["target"], str(r["runs"])] for r in table(suites)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    figures = {2, 3, 4, 5, 6, 7, 9}   # right-aligned
    rows.insert(1, [("-" * (w - 1) + ":") if i in figures else "-" * w
                    for i, w in enumerate(widths)])
    return "\n".join("| " + " | ".join(c.rjust(w) if i in figures else c.ljust(w)
                                       for i, (c, w) in enumerate(zip(row, widths))) + " |"
                     for row in rows)


def format_report(suites: list[pyperf.BenchmarkSuite]) -> str:
    """The table headed by the command, the dates, the machine and the load averages."""
    m = suites[0].get_metadata()
    runs = [b.get_metadata() for s in suites for b in s]
    loads = sorted(r["load_avg_1min"] for r in runs if "load_avg_1min" in r) or [float("nan")]
    dates = sorted(r["date"][:16] for r in runs if "date" in r) or ["?"]
    return (f"`{m.get('command', 'fastop bench')}`: {len(suites)} run(s), {dates[0]} to "
            f"{dates[-1]}\n\n{m.get('cpu_model_name', '?')}, {m.get('cpu_count', '?')} CPUs, "
            f"SIMD {m.get('cpu_simd', '?')}; Python {m.get('python_version', '?')}, numpy "
            f"{m.get('numpy_version', '?')}, torch {m.get('torch_version', 'not used')}, "
            f"fastop {m.get('fastop_version', '?')}; load average {loads[0]:.2f} to "
            f"{loads[-1]:.2f}\n\n{format_table(suites)}\n")


def plot(suites: list[pyperf.BenchmarkSuite], path: str) -> None:
    """Horizontal bars of the ratios vs numpy and vs torch per case, on a log scale."""
    import matplotlib
    matplotlib.use("Agg")   # files only: no display needed
    import matplotlib.pyplot as plt
    rows = table(suites)
    fig, ax = plt.subplots(figsize=(10, 1.6 + 0.3 * len(rows)))
    for offset, other in ((-0.2, "numpy"), (0.2, "torch")):
        ratios = [r[f"vs {other}"] or 0 for r in rows]   # 0: no bar where no twin ran
        if any(ratios):
            ax.barh([i + offset for i in range(len(rows))], ratios, height=0.4,
                    label=f"{other} time / fastop time")
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set(xscale="log", yticks=range(len(rows)), xlabel="above 1: fastop is faster")
    ax.set_yticklabels([f"{r['group']}/{r['case']} ({r['threads']} thr)" for r in rows],
                       fontsize=8)
    ax.invert_yaxis()
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=2, frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":   # a worker, started by run()
    config = json.loads(sys.argv[1])
    _worker(config.pop("out"), config.pop("threads"), **config)
