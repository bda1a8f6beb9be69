"""The harness behind ``python -m fastop bench``: fastop, numpy and PyTorch measured side
by side, one process per thread count. ``bench_*.py`` modules beside it add cases in a
``register(suite)`` function (see README.md here).

What the harness does itself, because no benchmark library does it: it interleaves the
samples of fastop, numpy and torch (rotating their order every round) so machine noise
hits all three alike; with more than one thread every sample starts once the threads of
the previous one have gone idle (:func:`wait_for_idle_threads`); it records the SIMD
extensions the kernels pick by. pyperf does the rest: the ``--json`` file is a pyperf
BenchmarkSuite (one benchmark per case, implementation and thread count; its values are
the samples), pyperf collects the machine record (CPU model, affinity, load, versions)
into every run, and ``python -m pyperf stats|compare_to|hist`` read our files. pyperf and
not pytest-benchmark: the harness is a command rather than a pytest session, and pyperf's
file format and tools serve any program that writes runs; pyperf's own Runner is not used
because it measures one benchmark at a time, and interleaving is the point.
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pyperf

import fastop

IMPLS = ("fastop", "numpy", "torch")
THREAD_ENV = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
              "FASTOP_NUM_THREADS")
SIMD_FLAGS = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl")


class BenchError(Exception):
    """A usage error: no bench modules, a bad case definition, a file that is no report."""


@dataclass
class Case:
    group: str
    name: str
    impls: dict[str, Callable[[], Any]]   # "fastop" always; "numpy"/"torch" when given
    target: str = ""                      # the goal for this case, shown as is

    @property
    def key(self) -> str:
        return f"{self.group}/{self.name}"


class Suite:
    """What ``register(suite)`` receives: ``quick`` (small sizes), ``threads`` (of this
    process), ``torch`` (the module, or None) and :meth:`add`."""

    def __init__(self, quick: bool = False, threads: int = 1, torch: Any = None) -> None:
        self.quick, self.threads, self.torch = quick, threads, torch
        self.cases: list[Case] = []

    def add(self, group: str, name: str, *, fastop: Callable[[], Any],
            numpy: Callable[[], Any] | None = None, torch: Callable[[], Any] | None = None,
            target: str = "") -> Case:
        """Add a case: zero-argument callables doing the same computation once each."""
        impls = {k: v for k, v in {"fastop": fastop, "numpy": numpy, "torch": torch}.items()
                 if v is not None}
        bad = [k for k, v in impls.items() if not callable(v)]
        if "fastop" not in impls or bad or any(c.key == f"{group}/{name}" for c in self.cases):
            raise BenchError(f"case {group}/{name}: " + (
                f"{bad[0]}= must be callable" if bad else
                "fastop= is required" if "fastop" not in impls else "defined twice"))
        self.cases.append(Case(group, name, impls, target))
        return self.cases[-1]


# -- measuring ---------------------------------------------------------------------------
def _sample(fn: Callable[[], Any], loops: int, clock: Callable[[], float]) -> float:
    """Seconds per call over ``loops`` calls, with the garbage collector off."""
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


def _calibrate(fn: Callable[[], Any], sample_time: float,
               clock: Callable[[], float]) -> tuple[int, float]:
    """The loop count making one sample last ~``sample_time``, and seconds per call."""
    loops = 1
    while True:
        per_call = _sample(fn, loops, clock)
        if per_call * loops >= sample_time / 5 or loops >= 10**7:
            return (max(1, round(sample_time / per_call)) if per_call > 0 else loops), per_call
        loops *= 10


def measure(case: Case, quick: bool = False, settle: Callable[[], Any] | None = None,
            clock: Callable[[], float] = time.perf_counter
            ) -> dict[str, tuple[int, list[float]]]:
    """Per implementation: its loop count and its samples (seconds per call), taken in
    rounds that each sample every implementation once, in a rotating order. ``settle``
    runs, untimed, before every sample. Slow cases take fewer rounds (a time budget),
    never fewer than a minimum."""
    sample_time, rounds, budget, min_rounds = (0.010, 5, 1.0, 3) if quick else (0.025, 9, 6.0, 5)
    impls = list(case.impls)
    for fn in case.impls.values():   # first-call costs (lazy BLAS load, caches) stay out
        fn()
    loops, round_time = {}, 0.0
    for impl in impls:
        loops[impl], per_call = _calibrate(case.impls[impl], sample_time, clock)
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
    """Threads of this process other than the caller in state R (0 without /proc)."""
    me, running = threading.get_native_id(), 0
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return 0
    for tid in tids:
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


# -- the worker: one thread count, one process ---------------------------------------------
def load_modules(directory: Path, suite: Suite) -> list[str]:
    """Import each ``bench_*.py`` and call its ``register(suite)``; one error per module
    that fails, the others still register."""
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
    frame = traceback.extract_tb(exc.__traceback__)[-1:]
    return f"{type(exc).__name__}: {exc}" + "".join(
        f" (at {Path(f.filename).name}:{f.lineno})" for f in frame)


def _worker(out: str, threads: int, directory: str, quick: bool, no_torch: bool,
            filter: str, command: str) -> int:
    """Measure every case at one thread count; write JSON lines to ``out``: a pyperf
    suite per measurement, ``{"start": key}`` before one, ``{"error": ...}`` on failure."""
    torch = None
    if not no_torch and importlib.util.find_spec("torch") is not None:
        import torch
        torch.set_num_threads(threads)
    suite = Suite(quick, threads, torch)
    errors = load_modules(Path(directory), suite)
    cpu_flags = next((line.split(":")[1].split() for line in open("/proc/cpuinfo")
                      if line.startswith("flags")), []) if os.path.exists("/proc/cpuinfo") else []
    versions = {f"{lib.__name__}_version": lib.__version__
                for lib in (fastop, sys.modules["numpy"], torch) if lib is not None}
    common = dict(versions, command=command, threads=threads,
                  cpu_simd=" ".join(f for f in SIMD_FLAGS if f in cpu_flags) or "none",
                  fastop_threads=fastop.get_num_threads(),
                  **({"torch_threads": torch.get_num_threads()} if torch else {}))
    cases = [c for c in suite.cases if filter.lower() in c.key.lower()]
    settle = wait_for_idle_threads if threads > 1 else None
    on_terminal = sys.stderr.isatty()
    if on_terminal:
        from tqdm import tqdm
        cases = tqdm(cases, desc=f"{threads} thread(s)", unit="case", leave=False)
    say = cases.write if on_terminal else lambda line: print(line, file=sys.stderr, flush=True)
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
                            group=case.group, case=case.name, impl=impl, loops=loops,
                            **({"target": case.target} if case.target else {}))
                pyperf.Benchmark([pyperf.Run(values, metadata=meta)]).dump(f)
            say(f"  [{threads} thr] {case.key}: " + ", ".join(
                f"{impl} {format_time(statistics.median(v))}" for impl, (_, v) in measured.items()))
    return 0


# -- the parent: one worker per thread count, then the report -----------------------------
def _worker_env(threads: int) -> dict[str, str]:
    """The environment with every thread variable set, and, for a fastop used from a
    source checkout, its directory first on PYTHONPATH (site-packages never goes there:
    it would precede the standard library)."""
    env = dict(os.environ, **{name: str(threads) for name in THREAD_ENV})
    root = os.path.realpath(Path(fastop.__file__).parents[1])
    if root not in {os.path.realpath(d) for d in site.getsitepackages()}:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    return env


def run(args: Any) -> int:
    """``fastop bench`` (options as cli.py defines them); the exit code."""
    if args.summarize:
        print(format_markdown([_load_report(path) for path in args.summarize]), end="")
        return 0
    directory = Path(args.dir).resolve()
    if not any(directory.glob("bench_*.py")):
        raise BenchError(f"no bench_*.py modules in {directory}")
    config = {"directory": str(directory), "quick": args.quick, "no_torch": args.no_torch,
              "filter": args.filter or "", "command": " ".join(["fastop bench", *args.argv])}
    benchmarks: list[pyperf.Benchmark] = []
    errors: list[str] = []
    for threads in args.threads:
        print(f"fastop bench: {threads} thread(s), {directory}", file=sys.stderr, flush=True)
        with tempfile.TemporaryDirectory(prefix="fastop-bench-") as tmp:
            out = Path(tmp) / "worker.jsonl"
            # what bench modules print goes to stderr: stdout carries only the table
            proc = subprocess.run([sys.executable, __file__, json.dumps(
                dict(config, out=str(out), threads=threads))], env=_worker_env(threads),
                stdout=sys.stderr.fileno() if hasattr(sys.stderr, "fileno") else None)
            started = None
            for line in out.read_text().splitlines() if out.exists() else []:
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
    if not benchmarks:
        errors.append("no benchmark case ran" + (f" (--filter {args.filter!r})" if args.filter else ""))
    suites = [pyperf.BenchmarkSuite(benchmarks)] if benchmarks else []
    if suites:
        print(format_text(suites))
    for error in errors:
        print(f"error {error}", file=sys.stderr)
    for option, write in (("json", lambda p: suites[0].dump(p, compact=False, replace=True)),
                          ("markdown", lambda p: Path(p).write_text(format_markdown(suites))),
                          ("plot", lambda p: plot(suites, p))):
        if getattr(args, option) and suites:
            write(getattr(args, option))
            print(f"fastop bench: wrote {getattr(args, option)}", file=sys.stderr)
    return 1 if errors else 0


def _load_report(path: str) -> pyperf.BenchmarkSuite:
    try:
        suite = pyperf.BenchmarkSuite.load(path)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise BenchError(f"--summarize: cannot read {path}: {exc}") from None
    if not all("impl" in b.get_metadata() for b in suite):
        raise BenchError(f"--summarize: {path} is not a fastop bench --json report")
    return suite


# -- reporting --------------------------------------------------------------------------------
def table(suites: list[pyperf.BenchmarkSuite]) -> list[dict[str, Any]]:
    """A row per case and thread count, in the order measured: the median time of each
    implementation over the runs (files), and the median of the per-run ratios ``other
    time / fastop time`` (above 1: fastop is faster). A ratio only ever compares samples
    taken in one run: ratios are never recomputed from times of different runs."""
    runs: list[dict[tuple, dict[str, Any]]] = []
    for suite in suites:
        rows: dict[tuple, dict[str, Any]] = {}
        for bench in suite:
            m = bench.get_metadata()
            row = rows.setdefault((m["group"], m["case"], m["threads"]), {"target": m.get("target", "")})
            row[m["impl"]] = bench.median()
        runs.append(rows)

    def median(values: list[float]) -> float | None:
        return statistics.median(values) if values else None
    result = []
    for key in dict.fromkeys(k for rows in runs for k in rows):
        present = [rows[key] for rows in runs if key in rows]
        result.append({"group": key[0], "case": key[1], "threads": key[2], "runs": len(present),
                       "target": present[0]["target"],
                       **{impl: median([r[impl] for r in present if impl in r]) for impl in IMPLS},
                       **{f"vs {o}": median([r[o] / r["fastop"] for r in present if o in r])
                          for o in IMPLS[1:]}})
    return result


HEADER = ["group", "case", "threads", *IMPLS, "vs numpy", "vs torch", "target"]


def format_time(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    unit, scale = next((u, s) for u, s in (("s", 1), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9))
                       if seconds >= s or u == "ns")
    return f"{seconds / scale:.3g} {unit}"


def _cells(row: dict[str, Any]) -> list[str]:
    ratios = ["—" if row[k] is None else f"{row[k]:.2f}×" for k in ("vs numpy", "vs torch")]
    return [row["group"], row["case"], str(row["threads"]),
            *(format_time(row[i]) for i in IMPLS), *ratios, row["target"]]


def format_text(suites: list[pyperf.BenchmarkSuite]) -> str:
    """The table as aligned text (names left, figures right)."""
    rows = [HEADER, *map(_cells, table(suites))]
    widths = [max(len(r[i]) for r in rows) for i in range(len(HEADER))]
    rows.insert(1, ["-" * w for w in widths])
    return "\n".join("  ".join(c.rjust(w) if 2 <= i < 8 else c.ljust(w) for i, (c, w)
                               in enumerate(zip(r, widths))).rstrip() for r in rows)


def format_markdown(suites: list[pyperf.BenchmarkSuite]) -> str:
    """The table in Markdown, headed by the command, dates, machine and load averages."""
    m = suites[0].get_metadata()
    runs = [b.get_metadata() for s in suites for b in s]
    loads = sorted(r["load_avg_1min"] for r in runs if "load_avg_1min" in r)
    dates = sorted(r["date"] for r in runs if "date" in r)
    lines = [f"`{m.get('command', 'fastop bench')}`, {len(suites)} run(s), "
             f"{dates[0][:16] if dates else '?'} to {dates[-1][:16] if dates else '?'}", "",
             f"{m.get('cpu_model_name', '?')}, {m.get('cpu_count', '?')} CPUs, SIMD "
             f"{m.get('cpu_simd', '?')}; Python {m.get('python_version', '?')}, numpy "
             f"{m.get('numpy_version', '?')}, torch {m.get('torch_version', 'not used')}, "
             f"fastop {m.get('fastop_version', '?')}; load average "
             + (f"{loads[0]:.2f}–{loads[-1]:.2f}" if loads else "unknown"), "",
             "| " + " | ".join(HEADER) + " | runs |",
             "|" + "|".join("---:" if 2 <= i < 8 else "---" for i in range(len(HEADER))) + "|---:|"]
    lines += ["| " + " | ".join([*_cells(row), str(row["runs"])]) + " |" for row in table(suites)]
    return "\n".join(lines) + "\n"


def plot(suites: list[pyperf.BenchmarkSuite], path: str) -> None:
    """A horizontal bar chart of the ratios vs numpy and vs torch per case (log scale)."""
    import matplotlib
    matplotlib.use("Agg")   # files only: no display needed
    import matplotlib.pyplot as plt
    rows = table(suites)
    labels = [f"{r['group']}/{r['case']} ({r['threads']} thr)" for r in rows]
    fig, ax = plt.subplots(figsize=(10, 1.6 + 0.3 * len(rows)))
    for offset, other in ((-0.2, "numpy"), (0.2, "torch")):
        ratios = [r[f"vs {other}"] or 0 for r in rows]   # 0: no bar where no twin ran
        if any(ratios):
            ax.barh([i + offset for i in range(len(rows))], ratios, height=0.4,
                    label=f"{other} time / fastop time")
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set(xscale="log", yticks=range(len(rows)), xlabel="above 1: fastop is faster")
    ax.set_yticklabels(labels, fontsize=8)
    ax.invert_yaxis()
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=2, frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":   # a worker, started by run()
    config = json.loads(sys.argv[1])
    sys.exit(_worker(config.pop("out"), config.pop("threads"), **config))
