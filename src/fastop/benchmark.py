"""The benchmark harness behind ``python -m fastop bench``.

Benchmarks live in ``benchmarks/bench_<topic>.py`` modules, each with a
``register(suite)`` function that adds cases::

    def register(suite):
        n = 100_000 if suite.quick else 4_000_000
        x = np.random.default_rng(0).random(n, dtype=np.float32)
        tx = suite.torch.from_numpy(x) if suite.torch else None
        suite.add("reduce", f"sum f32 {n}", fastop=lambda: reduce.sum(x),
                  numpy=lambda: np.sum(x),
                  torch=(lambda: suite.torch.sum(tx)) if suite.torch else None,
                  work=n, unit="elem", target="≥ 1.0× numpy")

``suite.quick`` selects small sizes, ``suite.torch`` is the torch module (None when it
is not installed or ``--no-torch``), ``suite.threads`` the thread count of this run.

How it measures: every thread count runs in its own subprocess with
``OPENBLAS_NUM_THREADS``, ``OMP_NUM_THREADS``, ``MKL_NUM_THREADS`` and
``FASTOP_NUM_THREADS`` set (and ``torch.set_num_threads``), so numpy's BLAS, torch and
fastop use the same number of threads. In a case, each implementation is warmed up
once, its inner loop count is scaled so that one sample takes ~10 ms (quick) or ~25 ms,
then samples of fastop, numpy and torch are interleaved (rotating their order) so that
machine noise hits all of them alike; with more than one thread, every sample starts
once the threads of the previous one have gone idle (:func:`wait_for_idle_threads`).
The reported time of one call is the median over samples. ``speedup vs numpy = numpy time / fastop time`` (above 1: fastop is faster).
"""
from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import os
import platform
import site
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterator

import fastop

__all__ = ["Case", "Suite", "Result", "measure_case", "speedup", "find_bench_dir",
           "load_modules", "wait_for_idle_threads", "run", "run_command", "format_table",
           "format_markdown", "summarize", "machine_info", "add_arguments", "main"]

IMPLS = ("fastop", "numpy", "torch")
THREAD_ENV = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
              "FASTOP_NUM_THREADS")
SCHEMA = 1
SETTLE_LIMIT = 0.25   # seconds: the longest wait for other threads to go idle


class BenchError(Exception):
    """A usage error of the harness (bad directory, bad case definition)."""


@dataclass
class Case:
    """One benchmark: the same computation in fastop, numpy and torch."""

    group: str
    name: str
    impls: dict[str, Callable[[], Any]]   # "fastop" always; "numpy"/"torch" when given
    work: float = 0.0                     # units of work per call (for rates)
    unit: str = "elem"
    target: str = ""
    setup: Callable[[], Any] | None = None
    module: str = ""

    @property
    def key(self) -> str:
        return f"{self.group}/{self.name}"


class Suite:
    """What ``register(suite)`` receives: the run's settings and :meth:`add`."""

    def __init__(self, quick: bool = False, threads: int = 1, torch: Any = None) -> None:
        self.quick = quick
        self.threads = threads
        self.torch = torch
        self.cases: list[Case] = []
        self.module = ""   # the bench module being registered (set by the loader)
        self.problems: list[str] = []   # suspicious definitions, reported as errors

    def add(self, group: str, name: str, *, fastop: Callable[[], Any],
            numpy: Callable[[], Any] | None = None, torch: Callable[[], Any] | None = None,
            work: float = 0, unit: str = "elem", target: str = "",
            setup: Callable[[], Any] | None = None) -> Case:
        """Add a case. ``fastop``/``numpy``/``torch`` are zero-argument callables doing
        one unit of the computation; ``work`` is the number of ``unit`` per call;
        ``setup`` runs once, untimed, right before the case is measured."""
        where = f"{self.module or 'suite'}: case {group}/{name}"
        if not isinstance(group, str) or not isinstance(name, str) or not group or not name:
            raise BenchError(f"{where}: group and name must be non-empty strings")
        impls = {"fastop": fastop, "numpy": numpy, "torch": torch}
        for impl, fn in impls.items():
            if fn is not None and not callable(fn):
                raise BenchError(f"{where}: {impl}= must be callable or None, "
                                 f"got {type(fn).__name__}")
        if fastop is None:
            raise BenchError(f"{where}: fastop= is required")
        if setup is not None and not callable(setup):
            raise BenchError(f"{where}: setup= must be callable")
        if not isinstance(work, (int, float)) or work < 0:
            raise BenchError(f"{where}: work= must be a number >= 0, got {work!r}")
        if any(c.group == group and c.name == name for c in self.cases):
            raise BenchError(f"{where}: defined twice")
        case = Case(group, name, {k: v for k, v in impls.items() if v is not None},
                    float(work), unit, target, setup, self.module)
        twin = next((c for c in self.cases if _same_calls(c, case)), None)
        if twin is not None:
            self.problems.append(
                f"{where} calls the same functions on the same variables as case "
                f"{twin.key}, so both measure the same thing (a lambda made in a loop "
                f"reads the loop's variables when called: bind them as default "
                f"arguments, lambda x=x: ...)")
        self.cases.append(case)
        return case


def _same_objects(a: tuple | None, b: tuple | None) -> bool:
    return (a is None) == (b is None) and (a is None or (
        len(a) == len(b) and all(x is y for x, y in zip(a, b))))


def _same_call(f: Callable[[], Any], g: Callable[[], Any]) -> bool:
    """Whether two zero-argument callables are certain to do the same thing: the same
    function, or the same code with the very same defaults and closure cells."""
    if f is g:
        return True
    code = getattr(f, "__code__", None)
    return code is not None and code is getattr(g, "__code__", None) \
        and _same_objects(f.__defaults__, g.__defaults__) \
        and _same_objects(f.__closure__, g.__closure__)


def _same_calls(a: Case, b: Case) -> bool:
    """Whether two cases certainly measure the same thing (setups included)."""
    if (a.setup is None) != (b.setup is None) or \
            a.setup is not None and not _same_call(a.setup, b.setup):
        return False
    return a.impls.keys() == b.impls.keys() and all(
        _same_call(a.impls[k], b.impls[k]) for k in a.impls)


@dataclass
class Result:
    """The measurement of one case at one thread count (times are seconds per call)."""

    group: str
    name: str
    threads: int
    unit: str
    work: float
    target: str
    times: dict[str, float] = field(default_factory=dict)     # impl -> median
    min_times: dict[str, float] = field(default_factory=dict)
    samples: int = 0
    error: str = ""

    @property
    def speedup_vs_numpy(self) -> float | None:
        return speedup(self.times.get("numpy"), self.times.get("fastop"))

    @property
    def speedup_vs_torch(self) -> float | None:
        return speedup(self.times.get("torch"), self.times.get("fastop"))

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["speedup_vs_numpy"] = self.speedup_vs_numpy
        d["speedup_vs_torch"] = self.speedup_vs_torch
        fastop = self.times.get("fastop")
        d["fastop_rate"] = self.work / fastop if fastop and self.work else None
        return d


def speedup(other_time: float | None, fastop_time: float | None) -> float | None:
    """How many times faster fastop is: ``other_time / fastop_time`` (None if unknown)."""
    if not other_time or not fastop_time:
        return None
    return other_time / fastop_time


# -- measuring ---------------------------------------------------------------------
@dataclass(frozen=True)
class Settings:
    sample_time: float   # seconds per sample
    repeats: int         # samples per implementation
    case_budget: float   # seconds; slow cases get fewer samples ...
    min_repeats: int     # ... but never fewer than this

    @classmethod
    def for_mode(cls, quick: bool) -> Settings:
        return cls(0.010, 5, 1.0, 3) if quick else cls(0.025, 9, 6.0, 5)


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
    """Inner loop count making one sample last about ``sample_time``, and the
    estimated seconds per call."""
    loops = 1
    while True:
        per_call = _sample(fn, loops, clock)
        if per_call * loops >= sample_time / 5 or loops >= 10**7:
            break
        loops *= 10
    if per_call <= 0:
        return loops, 0.0
    return max(1, round(sample_time / per_call)), per_call


def _other_threads_running() -> int:
    """How many threads of this process, other than the calling one, are running or
    runnable (state R in /proc/self/task/*/stat; 0 where /proc is missing)."""
    me = threading.get_native_id()
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return 0
    running = 0
    for tid in tids:
        if int(tid) == me:
            continue
        try:
            with open(f"/proc/self/task/{tid}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split(None, 1)[0]
        except (OSError, IndexError):
            continue   # the thread ended meanwhile
        running += state == b"R"
    return running


def wait_for_idle_threads(limit: float = SETTLE_LIMIT) -> float:
    """Wait (polling every 0.5 ms, at most ``limit`` s) until no other thread of this
    process runs: the thread pools the previous sample woke (numpy's OpenBLAS spins
    ~0.1 s after a call, torch's and fastop's less) have gone to sleep. Returns the
    seconds waited."""
    start = time.perf_counter()
    while _other_threads_running() and time.perf_counter() - start < limit:
        time.sleep(0.0005)
    return time.perf_counter() - start


def measure_case(case: Case, settings: Settings, threads: int = 1,
                 clock: Callable[[], float] = time.perf_counter,
                 log: list[str] | None = None,
                 settle: Callable[[], Any] | None = None) -> Result:
    """Median time per call of each implementation, samples interleaved.

    ``log``, when given, receives the implementation name of every sample taken, in
    order (used to check the interleaving). ``settle``, when given, runs (untimed)
    before every sample, whichever implementation it is for: the multi-thread worker
    passes :func:`wait_for_idle_threads`, so that no sample shares the cores with the
    threads of the previous one.
    """
    result = Result(case.group, case.name, threads, case.unit, case.work, case.target)
    if case.setup is not None:
        case.setup()
    impls = list(case.impls)
    for impl in impls:  # warm-up: first-call costs (lazy BLAS load, caches) stay out
        case.impls[impl]()
    loops, per_round = {}, 0.0
    for impl in impls:
        loops[impl], per_call = _calibrate(case.impls[impl], settings.sample_time, clock)
        per_round += loops[impl] * per_call
    repeats = settings.repeats if per_round <= 0 else max(
        settings.min_repeats, min(settings.repeats, int(settings.case_budget / per_round)))
    samples: dict[str, list[float]] = {impl: [] for impl in impls}
    for r in range(repeats):
        order = impls[r % len(impls):] + impls[:r % len(impls)]
        for impl in order:
            if settle is not None:
                settle()
            samples[impl].append(_sample(case.impls[impl], loops[impl], clock))
            if log is not None:
                log.append(impl)
    result.times = {impl: statistics.median(s) for impl, s in samples.items()}
    result.min_times = {impl: min(s) for impl, s in samples.items()}
    result.samples = repeats
    return result


# -- finding and loading bench modules -----------------------------------------------
def find_bench_dir(given: str | os.PathLike | None = None) -> Path:
    """The benchmark directory: ``given``, else ``./benchmarks``, else the source
    checkout's ``benchmarks/`` next to the package."""
    if given is not None:
        path = Path(given)
        if not path.is_dir():
            raise BenchError(f"benchmark directory {str(path)!r} does not exist")
        return path
    candidates = [Path.cwd() / "benchmarks",
                  Path(__file__).resolve().parents[2] / "benchmarks"]
    for path in candidates:
        if path.is_dir() and any(path.glob("bench_*.py")):
            return path
    raise BenchError("no benchmarks found: looked for bench_*.py in "
                     + " and ".join(str(p) for p in candidates)
                     + "; run from the repository root or pass --dir DIR")


def bench_files(directory: Path) -> list[Path]:
    files = sorted(directory.glob("bench_*.py"))
    if not files:
        raise BenchError(f"no bench_*.py modules in {directory}")
    return files


def load_modules(directory: Path, suite: Suite) -> list[str]:
    """Import each bench module and call its ``register(suite)``; returns the errors
    (one per module that failed) instead of stopping at the first."""
    errors = []
    if str(directory) not in sys.path:   # bench modules may share helpers
        sys.path.insert(0, str(directory))
    for path in bench_files(directory):
        suite.module = path.stem
        try:
            spec = importlib.util.spec_from_file_location(f"_fastop_{path.stem}", path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            register = getattr(module, "register", None)
            if not callable(register):
                raise BenchError(f"{path.name} has no register(suite) function")
            register(suite)
        except Exception as exc:
            errors.append(f"{path.name}: {_describe(exc)}")
        errors += suite.problems
        suite.problems = []
    suite.module = ""
    return errors


def _describe(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" (at {Path(frames[-1].filename).name}:{frames[-1].lineno})" if frames else ""
    return f"{type(exc).__name__}: {exc}{where}"


# -- the worker: one thread count, one process -----------------------------------------
def _import_torch(threads: int) -> Any:
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(threads)
    return torch


def _worker(args: argparse.Namespace) -> int:
    """Run every case at one thread count; write JSON lines to ``args.worker_out``."""
    torch = None if args.no_torch else _import_torch(args.threads)
    suite = Suite(quick=args.quick, threads=args.threads, torch=torch)
    settings = Settings.for_mode(args.quick)
    settle = wait_for_idle_threads if args.threads > 1 else None
    with open(args.worker_out, "w", encoding="utf-8") as out:
        def emit(**record: Any) -> None:
            out.write(json.dumps(record) + "\n")
            out.flush()

        emit(event="run", fastop_threads=fastop.get_num_threads(),
             torch_threads=torch.get_num_threads() if torch is not None else None)
        for error in load_modules(Path(args.dir), suite):
            emit(event="error", where="register", error=error)
        for case in suite.cases:
            if args.filter and args.filter.lower() not in case.key.lower():
                continue
            emit(event="start", group=case.group, name=case.name)
            try:
                result = measure_case(case, settings, args.threads, settle=settle)
            except Exception as exc:
                result = Result(case.group, case.name, args.threads, case.unit,
                                case.work, case.target, error=_describe(exc))
            emit(event="result", **asdict(result))
            print(f"  [{args.threads} thr] {_row_text(result)}", file=sys.stderr,
                  flush=True)
    return 0


def _installed_dirs() -> set[str]:
    """The site-packages directories a fresh interpreter searches anyway."""
    dirs = [*site.getsitepackages(), site.getusersitepackages()]
    return {os.path.realpath(d) for d in dirs}


def _worker_env(threads: int) -> dict[str, str]:
    """The parent's environment with the thread variables set; a source checkout's
    package directory goes first on PYTHONPATH so the worker imports the same fastop
    (an installed fastop is found anyway; site-packages must not precede the stdlib)."""
    env = dict(os.environ)
    env.update({name: str(threads) for name in THREAD_ENV})
    package_root = os.path.realpath(Path(__file__).resolve().parents[1])
    if package_root not in _installed_dirs():
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (package_root, env.get("PYTHONPATH", "")) if p)
    return env


def _stderr_fd() -> int | None:
    try:
        return sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):   # replaced stderr (tests, IDEs)
        return None


def _run_threads(threads: int, args: argparse.Namespace, directory: Path
                 ) -> tuple[list[Result], list[dict[str, Any]], dict[str, Any]]:
    """Run the worker for one thread count; returns its results, errors, and the thread
    counts it reported in effect."""
    with tempfile.TemporaryDirectory(prefix="fastop-bench-") as tmp:
        out = Path(tmp) / "results.jsonl"
        cmd = [sys.executable, "-m", "fastop.benchmark", "--worker-out", str(out),
               "--threads", str(threads), "--dir", str(directory)]
        cmd += ["--quick"] * args.quick + ["--no-torch"] * args.no_torch
        cmd += ["--filter", args.filter] if args.filter else []
        # whatever bench modules print goes to stderr: stdout carries only the table
        proc = subprocess.run(cmd, env=_worker_env(threads), stdout=_stderr_fd())
        records = [json.loads(line) for line in out.read_text().splitlines()] \
            if out.exists() else []
    results, errors, run_info, started = [], [], {"threads": threads}, None
    for rec in records:
        event = rec.pop("event")
        if event == "run":
            run_info.update(rec)
        elif event == "error":
            errors.append(dict(rec, threads=threads))
        elif event == "start":
            started = rec
        elif event == "result":
            results.append(Result(**rec))
            started = None
    if proc.returncode != 0:
        where = f" while running {started['group']}/{started['name']}" if started else ""
        errors.append({"threads": threads, "where": "worker",
                       "error": f"benchmark process exited with code "
                                f"{proc.returncode}{where}"})
    return results, errors, run_info


# -- reporting -------------------------------------------------------------------------
SIMD_FLAGS = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl")


def machine_info() -> dict[str, Any]:
    """CPU model (with family/model numbers and the SIMD extensions numpy and fastop
    pick kernels by: ratios move with them), core counts, OS and Python versions."""
    cpu = platform.processor() or platform.machine()
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                key, sep, value = line.partition(":")
                key = key.strip()
                if not sep or key in fields:
                    continue
                if key in ("model name", "cpu family", "model", "flags"):
                    fields[key] = value.strip()     # the first processor's
    except OSError:
        pass
    cpu = fields.get("model name", cpu)
    if "cpu family" in fields:
        cpu += f" (family {fields['cpu family']} model {fields.get('model', '?')})"
    flags = set(fields.get("flags", "").split())
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return {"cpu": cpu, "simd": [f for f in SIMD_FLAGS if f in flags],
            "cores": os.cpu_count(), "usable_cores": usable,
            "platform": platform.platform(), "python": platform.python_version()}


def format_time(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def format_ratio(ratio: float | None) -> str:
    return "—" if ratio is None else f"{ratio:.2f}×"


def _row_text(r: Result) -> str:
    if r.error:
        return f"{r.group}/{r.name}: ERROR {r.error}"
    return (f"{r.group}/{r.name}: fastop {format_time(r.times.get('fastop'))}, "
            f"numpy {format_time(r.times.get('numpy'))}, "
            f"torch {format_time(r.times.get('torch'))}")


TABLE_HEADER = ["group", "case", "threads", "fastop", "numpy", "torch", "vs numpy",
                "vs torch", "target"]


def _table_rows(results: list[Result]) -> list[list[str]]:
    rows = []
    for r in results:
        if r.error:
            rows.append([r.group, r.name, str(r.threads), "error", "", "", "", "",
                         r.target])
            continue
        rows.append([r.group, r.name, str(r.threads),
                     *(format_time(r.times.get(i)) for i in IMPLS),
                     format_ratio(r.speedup_vs_numpy), format_ratio(r.speedup_vs_torch),
                     r.target])
    return rows


def format_table(results: list[Result]) -> str:
    """One text table: a row per case and thread count."""
    rows = _table_rows(results)
    widths = [max(len(row[i]) for row in [TABLE_HEADER, *rows])
              for i in range(len(TABLE_HEADER))]
    numeric = set(range(2, 8))

    def line(row: list[str]) -> str:
        return "  ".join(cell.rjust(w) if i in numeric else cell.ljust(w)
                         for i, (cell, w) in enumerate(zip(row, widths))).rstrip()
    return "\n".join([line(TABLE_HEADER), line(["-" * w for w in widths]),
                      *map(line, rows)])


def format_markdown(report: dict[str, Any], results: list[Result]) -> str:
    """The results table in Markdown, headed by the command, date and machine."""
    m, v = report["machine"], report["versions"]
    lines = [f"`{report['command']}` — {report['date']}", "",
             f"{m['cpu']}, {m['cores']} cores, {' '.join(m.get('simd') or ['no SIMD flags'])}; "
             f"Python {m['python']}, numpy {v['numpy']}, "
             f"torch {v['torch'] or 'not installed'}, fastop {v['fastop']}; load average "
             f"{' → '.join(str(x) for x in report['load_average'])}", "",
             "| " + " | ".join(TABLE_HEADER) + " |",
             "|" + "|".join("---:" if 2 <= i < 8 else "---"
                            for i in range(len(TABLE_HEADER))) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in _table_rows(results)]
    return "\n".join(lines) + "\n"


def _load_average() -> float | None:
    return round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None


def _dist_version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def _ordered(results: list[Result]) -> Iterator[Result]:
    """Rows of the same case together, in registration order, by thread count."""
    first: dict[tuple[str, str], int] = {}
    for i, r in enumerate(results):
        first.setdefault((r.group, r.name), i)
    return iter(sorted(results, key=lambda r: (first[(r.group, r.name)], r.threads)))


def run(args: argparse.Namespace) -> int:
    """The parent process: one worker per thread count, then the table and JSON."""
    directory = find_bench_dir(args.dir).resolve()
    bench_files(directory)
    load_before = _load_average()
    started = time.perf_counter()
    results: list[Result] = []
    errors: list[dict[str, Any]] = []
    runs: list[dict[str, Any]] = []
    cores = machine_info()["usable_cores"] or os.cpu_count() or 1
    for threads in args.threads:
        print(f"fastop bench: {threads} thread(s), {directory}", file=sys.stderr,
              flush=True)
        if threads > cores:
            print(f"fastop bench: warning: {threads} threads on {cores} usable cores; "
                  f"fastop uses at most {cores}, numpy and torch may not",
                  file=sys.stderr)
        res, err, info = _run_threads(threads, args, directory)
        results += res
        errors += err
        runs.append(info)
    results = list(_ordered(results))
    duration = time.perf_counter() - started
    print(format_table(results) if results else "no benchmark cases ran")
    print(f"{len(results)} measurements in {duration:.0f} s", file=sys.stderr)
    for e in errors:
        print(f"error [{e['threads']} thr, {e['where']}]: {e['error']}", file=sys.stderr)
    errors += [{"threads": r.threads, "where": f"{r.group}/{r.name}", "error": r.error}
               for r in results if r.error]
    report = {
        "schema": SCHEMA,
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(["python -m fastop bench", *args.argv]),
        "quick": args.quick,
        "threads": args.threads,
        "duration_s": round(duration, 2),
        "machine": machine_info(),
        # other processes' load skews timings: 1-minute load average before and after
        "load_average": [load_before, _load_average()],
        "versions": {"fastop": fastop.__version__,
                     "numpy": _dist_version("numpy"),
                     "torch": _dist_version("torch")},
        "runs": runs,   # per worker: the thread counts fastop and torch really used
        "results": [r.to_json() for r in results],
        "errors": errors,
    }
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n",
                                   encoding="utf-8")
        print(f"results written to {args.json}", file=sys.stderr)
    if args.markdown:
        Path(args.markdown).write_text(format_markdown(report, results), encoding="utf-8")
        print(f"Markdown table written to {args.markdown}", file=sys.stderr)
    return 1 if errors else 0


def summarize(reports: list[dict[str, Any]]) -> str:
    """A Markdown table of several runs' JSON reports: per case and thread count, the
    median time of each implementation and the median of the per-run ratios (each ratio
    compares implementations measured side by side in one run, so ratios are summarized
    as ratios, never recomputed from medians of times taken in different runs)."""
    rows: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    for report in reports:
        for r in report["results"]:
            if not r.get("error"):
                rows.setdefault((r["group"], r["name"], r["threads"]), []).append(r)

    def median(values: list[float | None]) -> float | None:
        known = [v for v in values if v is not None]
        return statistics.median(known) if known else None

    loads = ", ".join(str(rep["load_average"][0]) for rep in reports)
    lines = [f"Medians of {len(reports)} runs (load average at the start of each: {loads}).",
             "", "| " + " | ".join(TABLE_HEADER) + " | runs |",
             "|" + "|".join("---:" if 2 <= i < 8 else "---"
                            for i in range(len(TABLE_HEADER))) + "|---:|"]
    for (group, name, threads), rs in rows.items():
        times = [format_time(median([r["times"].get(i) for r in rs])) for i in IMPLS]
        ratios = [format_ratio(median([r[key] for r in rs]))
                  for key in ("speedup_vs_numpy", "speedup_vs_torch")]
        lines.append("| " + " | ".join([group, name, str(threads), *times, *ratios,
                                        rs[0]["target"], str(len(rs))]) + " |")
    return "\n".join(lines) + "\n"


def _thread_list(text: str) -> list[int]:
    try:
        counts = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        counts = []
    if not counts or any(n < 1 for n in counts):
        raise argparse.ArgumentTypeError(
            f"expected thread counts like '1,2', got {text!r}")
    return counts


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``fastop bench``."""
    parser.add_argument("--quick", action="store_true",
                        help="small sizes and fewer samples (under a minute)")
    parser.add_argument("--json", metavar="FILE", help="also write results as JSON")
    parser.add_argument("--markdown", metavar="FILE",
                        help="also write the table in Markdown (for docs/PERFORMANCE.md)")
    parser.add_argument("--threads", type=_thread_list, default=[1, 2], metavar="N,M",
                        help="thread counts, one process each (default: 1,2)")
    parser.add_argument("--filter", metavar="SUBSTR",
                        help="only cases whose 'group/name' contains SUBSTR")
    parser.add_argument("--dir", metavar="DIR",
                        help="directory of bench_*.py modules (default: ./benchmarks)")
    parser.add_argument("--no-torch", action="store_true",
                        help="do not import torch (skips the torch column)")
    parser.add_argument("--summarize", nargs="+", metavar="JSON",
                        help="measure nothing: print the Markdown table of medians over "
                             "these --json reports of earlier runs")


def _summarize_files(paths: list[str]) -> int:
    reports = []
    for path in paths:
        try:
            reports.append(json.loads(Path(path).read_text(encoding="utf-8")))
        except (OSError, ValueError) as exc:
            raise BenchError(f"--summarize: cannot read {path}: {exc}") from None
        if reports[-1].get("schema") != SCHEMA or "results" not in reports[-1]:
            raise BenchError(f"--summarize: {path} is not a fastop bench --json report")
    print(summarize(reports), end="")
    return 0


def run_command(args: argparse.Namespace) -> int:
    """``fastop bench`` with parsed arguments (``args.argv``: the raw ones); exit code."""
    try:
        if args.summarize:
            return _summarize_files(args.summarize)
        return run(args)
    except BenchError as exc:
        print(f"fastop bench: error: {exc}", file=sys.stderr)
        return 2


def main(argv: list[str] | None = None) -> int:
    """``python -m fastop.benchmark``: the bench command, or (``--worker-out``) a worker."""
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="fastop bench", description=__doc__.split("\n")[0])
    add_arguments(parser)
    parser.add_argument("--worker-out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.argv = argv
    if args.worker_out:
        args.threads = args.threads[0]
        return _worker(args)
    return run_command(args)


if __name__ == "__main__":
    sys.exit(main())
