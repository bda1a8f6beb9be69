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
import re
import site
import statistics
import subprocess
import sys
import tempfile
import textwrap
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
        missed = missed_summary(suites)
        if missed:
            print(f"fastop bench: {len(missed)} row(s) miss their target:", *missed,
                  sep="\n", file=sys.stderr)
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
    missed = missed_summary([suite])
    if missed:
        print(f"fastop bench: {len(missed)} row(s) miss their target:", *missed, sep="\n",
              file=sys.stderr)
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


# -- targets: which rows meet theirs ------------------------------------------------------
class Goal(NamedTuple):
    """One checkable part of a case's target: fastop's time at most ``bound`` seconds
    (``against`` None), or ``against``'s time over fastop's at least ``bound``."""
    text: str
    against: str | None
    bound: float
    strict: bool = False        # "<" / ">" rather than "≤" / "≥"
    threads: int | None = None  # "(1 thread)": checked at that thread count only


TIME_UNITS = {"s": 1.0, "ms": 1e-3, "µs": 1e-6, "us": 1e-6, "ns": 1e-9}
_NUMBER = r"(\d+(?:\.\d+)?)"
_NOTE = r"(?:\s*\((?P<note>[^)]*)\))?\s*$"   # a trailing "(...)": a note, or "(1 thread)"
# "≤ 4 µs", "< 0.5 s", "≤ 20 µs/run (Paddle 330 µs)", "≤ 1.25 ms/step": fastop's time per call
_TIME_GOAL = re.compile(r"(?P<op>≤|<=|<)\s*" + _NUMBER + r"\s*(?P<unit>s|ms|µs|us|ns)"
                        r"(?:/(?:run|step|call))?" + _NOTE)
# "≥ 1.5× torch", "≥ 1.0× torch (1 thread)", "≥ 3× torch.autograd.Function": a ratio
_RATIO_GOAL = re.compile(r"(?P<op>≥|>=|>)\s*" + _NUMBER + r"\s*[×x]\s*(?P<impl>numpy|torch)"
                         r"(?:\.[\w.]+)?" + _NOTE)
# "≤ 1.5× numpy time": fastop's time at most 1.5 numpy's, i.e. vs numpy ≥ 1 / 1.5
_INVERSE_GOAL = re.compile(r"(?P<op>≤|<=|<)\s*" + _NUMBER + r"\s*[×x]\s*(?P<impl>numpy|torch)"
                           r"\s+time" + _NOTE)


def _clauses(target: str) -> list[str]:
    """The parts of a target separated by "," or ";" outside parentheses."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(target):
        depth += (char == "(") - (char == ")")
        if char in ",;" and depth == 0:
            parts.append(target[start:i])
            start = i + 1
    return [p.strip() for p in [*parts, target[start:]] if p.strip()]


def parse_target(target: str) -> list[Goal]:
    """The parts of a target the numbers of its row can check: a time per call of fastop
    (``≤ 4 µs``), a ratio against numpy or torch (``≥ 1.5× torch``, ``≤ 1.5× numpy
    time``), each optionally followed by a parenthesized note, ``(1 thread)`` restricting
    it to one thread. Other parts (``µs/op``, ``≤ 2 % over ...``, prose) are not
    checked: the row's numbers do not say them."""
    goals = []
    for clause in _clauses(target):
        match = (_TIME_GOAL.fullmatch(clause) or _RATIO_GOAL.fullmatch(clause)
                 or _INVERSE_GOAL.fullmatch(clause))
        if match is None:
            continue
        note = (match.group("note") or "").strip()
        threads = int(note.split()[0]) if re.fullmatch(r"\d+ threads?", note) else None
        strict, value = match.group("op") in "<>", float(match.group(2))
        if match.re is _TIME_GOAL:
            goals.append(Goal(clause, None, value * TIME_UNITS[match.group("unit")],
                              strict, threads))
        elif match.re is _RATIO_GOAL:
            goals.append(Goal(clause, match.group("impl"), value, strict, threads))
        elif value > 0:
            goals.append(Goal(clause, match.group("impl"), 1 / value, strict, threads))
    return goals


def missed_goals(row: dict[str, Any]) -> tuple[list[Goal], list[Goal]]:
    """The goals of a :func:`table` row that its numbers check: (checked, missed). A goal
    for another thread count, or against an implementation that did not run, is not
    checked."""
    checked, missed = [], []
    for goal in parse_target(row["target"]):
        if goal.threads is not None and goal.threads != row["threads"]:
            continue
        value = row["fastop"] if goal.against is None else row[f"vs {goal.against}"]
        if value is None:
            continue
        checked.append(goal)
        # a time must stay at most its bound, a ratio at least its bound
        margin = goal.bound - value if goal.against is None else value - goal.bound
        if margin < 0 or (goal.strict and margin == 0):
            missed.append(goal)
    return checked, missed


def target_mark(row: dict[str, Any]) -> str:
    """The table's ``met`` cell: ✓ every checked goal met, ✗ one missed, empty when the
    target has no goal the row's numbers check."""
    checked, missed = missed_goals(row)
    return "✗" if missed else "✓" if checked else ""


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


MET_LEGEND = ("met: ✓ the row's numbers meet every part of its target they can check (a "
              "time per call, a ratio against numpy or torch), ✗ they miss one, empty: "
              "nothing of the target is checked from the row (per-op times, overheads).")


def missed_summary(suites: list[pyperf.BenchmarkSuite]) -> list[str]:
    """A line per row that misses its target: the case, what it missed, its numbers."""
    lines = []
    for row in table(suites):
        _, missed = missed_goals(row)
        if missed:
            numbers = ", ".join([f"fastop {format_time(row['fastop'])}", *(
                f"{row[f'vs {o}']:.2f}× {o}" for o in IMPLS[1:] if row[f"vs {o}"])])
            lines.append(f"✗ {row['group']}/{row['case']} ({row['threads']} thr): misses "
                         f"{'; '.join(g.text for g in missed)} ({numbers})")
    return lines


def format_table(suites: list[pyperf.BenchmarkSuite]) -> str:
    """The rows as a Markdown table padded to line up in a terminal too."""
    header = ["group", "case", "threads", *IMPLS, "vs numpy", "vs torch", "target", "met",
              "runs"]
    rows = [header] + [[r["group"], r["case"], str(r["threads"]),
                        *(format_time(r[i]) for i in IMPLS),
                        *("—" if r[k] is None else f"{r[k]:.2f}×" for k in header[6:8]),
                        r["target"], target_mark(r), str(r["runs"])] for r in table(suites)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    figures = {2, 3, 4, 5, 6, 7, 10}   # right-aligned
    rows.insert(1, [("-" * (w - 1) + ":") if i in figures else "-" * w
                    for i, w in enumerate(widths)])
    return "\n".join("| " + " | ".join(c.rjust(w) if i in figures else c.ljust(w)
                                       for i, (c, w) in enumerate(zip(row, widths))) + " |"
                     for row in rows)


def report_header(suites: list[pyperf.BenchmarkSuite]) -> tuple[str, str]:
    """What a report says of its runs: the command, how many runs and their dates; the
    machine, the versions and the load averages."""
    m = suites[0].get_metadata()
    runs = [b.get_metadata() for s in suites for b in s]
    loads = sorted(r["load_avg_1min"] for r in runs if "load_avg_1min" in r) or [float("nan")]
    dates = sorted(r["date"][:16] for r in runs if "date" in r) or ["?"]
    return (f"`{m.get('command', 'fastop bench')}`: {len(suites)} run(s), {dates[0]} to "
            f"{dates[-1]}",
            f"{m.get('cpu_model_name', '?')}, {m.get('cpu_count', '?')} CPUs, "
            f"SIMD {m.get('cpu_simd', '?')}; Python {m.get('python_version', '?')}, numpy "
            f"{m.get('numpy_version', '?')}, torch {m.get('torch_version', 'not used')}, "
            f"fastop {m.get('fastop_version', '?')}; load average {loads[0]:.2f} to "
            f"{loads[-1]:.2f}")


def format_report(suites: list[pyperf.BenchmarkSuite]) -> str:
    """The table headed by the command, the dates, the machine and the load averages,
    followed by what its ``met`` column means."""
    runs, machine = report_header(suites)
    return f"{runs}\n\n{machine}\n\n{format_table(suites)}\n\n{MET_LEGEND}\n"


def _columns(sizes: list[int], count: int) -> list[list[int]]:
    """Consecutive groups (their row counts ``sizes``) split into at most ``count``
    columns of about the same number of rows, in order."""
    columns, share, filled = [[]], sum(sizes) / count, 0
    for i, size in enumerate(sizes):
        if columns[-1] and filled + size / 2 > share * len(columns) and len(columns) < count:
            columns.append([])
        columns[-1].append(i)
        filled += size
    return columns


PLOT_COLORS = {"numpy": "tab:blue", "torch": "tab:orange"}
PLOT_MARKERS = "o^sDv"   # one per thread count
PLOT_ROW_INCHES = 0.2    # the height of a case's row


def plot(suites: list[pyperf.BenchmarkSuite], path: str) -> None:
    """One figure to read at its size (about 1200 px wide at 100 dpi): a panel per group of
    cases, in up to two columns; per case, numpy's and torch's time over fastop's on a log
    scale (a marker shape per thread count), the parity line at 1, a black tick at each
    ratio its target asks for, and ✗ before a case that misses its target
    (:func:`missed_goals`). The title names the runs, the machine and the dates."""
    import matplotlib
    matplotlib.use("Agg")   # files only: no display needed
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    rows = table(suites)
    cases: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in rows:
        cases.setdefault((row["group"], row["case"]), []).append(row)
    groups: dict[str, list[tuple[str, str]]] = {}
    for key in cases:
        groups.setdefault(key[0], []).append(key)
    threads = sorted({row["threads"] for row in rows})
    marker = {t: PLOT_MARKERS[i % len(PLOT_MARKERS)] for i, t in enumerate(threads)}
    ratios = [row[f"vs {o}"] for row in rows for o in PLOT_COLORS if row[f"vs {o}"]]
    goals = [g.bound for row in rows for g in parse_target(row["target"]) if g.against]
    low, high = min([*ratios, *goals, 1.0]) / 1.6, max([*ratios, *goals, 1.0]) * 1.6

    names, sizes = list(groups), [len(members) for members in groups.values()]
    columns = _columns(sizes, 2 if sum(sizes) > 24 else 1)
    tallest = max(sum(sizes[i] + 2 for i in column) for column in columns)
    fig = plt.figure(figsize=(6.0 * len(columns), 1.6 + PLOT_ROW_INCHES * tallest),
                     layout="constrained")
    grid = fig.add_gridspec(1, len(columns))
    for c, column in enumerate(columns):
        heights = [sizes[i] + 2 for i in column]
        panels = grid[c].subgridspec(len(column) + 1, 1, height_ratios=[
            *heights, max(0.01, tallest - sum(heights))])
        for p, i in enumerate(column):
            ax = fig.add_subplot(panels[p])
            _plot_group(ax, [cases[key] for key in groups[names[i]]], marker, low, high)
            ax.set_title(names[i], loc="left", fontsize=9, fontweight="bold", pad=2)
            if p < len(column) - 1:   # the scale once, under each column's last panel
                ax.tick_params(axis="x", which="both", labelbottom=False)
            else:
                ax.set_xlabel("numpy's or torch's time / fastop's time", fontsize=8)
    runs, machine = report_header(suites)
    width = 14 * 6 * len(columns)   # characters of the title's size in a line
    fig.suptitle("\n".join(textwrap.wrap(
        "fastop bench: numpy's and torch's time over fastop's (right of 1: fastop is "
        "faster)", width) + textwrap.wrap(runs.replace("`", ""), width)
        + textwrap.wrap(machine, width)), fontsize=9)
    handles = [*(Line2D([], [], color=color, marker="o", linestyle="", label=f"{impl} time / "
                        f"fastop time") for impl, color in PLOT_COLORS.items()),
               *(Line2D([], [], color="gray", marker=marker[t], linestyle="",
                        label=f"{t} thread(s)") for t in threads if len(threads) > 1),
               Line2D([], [], color="black", marker="|", markersize=10, linestyle="",
                      label="goal of the target"),
               Line2D([], [], color="red", marker="$✗$", linestyle="",
                      label="misses its target")]
    fig.legend(handles=handles, loc="outside lower center",
               ncol=len(handles) if len(columns) > 1 else (len(handles) + 1) // 2,
               frameon=False, fontsize=8)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _ratio_text(value: float, position: int) -> str:
    """A tick of the ratio axis: ``0.1×``, ``1×``, ``10×``."""
    return f"{value:g}×"


def _plot_group(ax: Any, cases: list[list[dict[str, Any]]], marker: dict[int, str],
                low: float, high: float) -> None:
    """One group's panel: a row per case (its thread counts' rows), numpy's ratios just
    above the row's middle and torch's just below."""
    from matplotlib.ticker import LogLocator, NullFormatter
    labels, label_colors = [], []
    for y, case_rows in enumerate(cases):
        missed = any(missed_goals(row)[1] for row in case_rows)
        labels.append(("✗ " if missed else "") + case_rows[0]["case"])
        label_colors.append("red" if missed else "black")
        for offset, impl in ((-0.18, "numpy"), (0.18, "torch")):
            for row in case_rows:
                if row[f"vs {impl}"]:
                    ax.plot(row[f"vs {impl}"], y + offset, marker[row["threads"]],
                            color=PLOT_COLORS[impl], markersize=5)
            for goal in {g.bound for row in case_rows for g in parse_target(row["target"])
                         if g.against == impl}:
                ax.plot(goal, y + offset, "|", color="black", markersize=9,
                        markeredgewidth=1.5)
        if not any(row[f"vs {impl}"] for row in case_rows for impl in PLOT_COLORS):
            ax.text(high, y, "fastop alone: " + ", ".join(   # no twin: its time instead
                format_time(row["fastop"]) for row in case_rows) + " ", fontsize=7,
                color="0.35", ha="right", va="center")
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set(xscale="log", xlim=(low, high), ylim=(len(cases) - 0.5, -0.5),
           yticks=range(len(cases)))
    ax.set_yticklabels(labels, fontsize=7.5)
    for tick, color in zip(ax.get_yticklabels(), label_colors):
        tick.set_color(color)
    if high / low < 100:   # under two decades: ticks at 1, 2 and 5 of each
        ax.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(_ratio_text)
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.tick_params(axis="x", labelsize=7.5)
    ax.grid(axis="x", which="major", color="0.9")
    ax.set_axisbelow(True)


if __name__ == "__main__":   # a worker, started by run()
    config = json.loads(sys.argv[1])
    _worker(config.pop("out"), config.pop("threads"), **config)
