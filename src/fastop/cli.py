"""fastop's command line: ``python -m fastop`` (or the ``fastop`` script).

Commands (one ``add_parser`` and one handler each in :func:`build_parser`):
  ``bench``  run the benchmarks of a source checkout's ``benchmarks/`` against numpy and
             PyTorch (the harness, ``benchmarks/harness.py``, is imported only here);
  ``ops``    list every registered op: its plugin (distribution) and version, inputs,
             outputs, attributes with defaults, dtypes, and its gradient rule;
  ``profile`` run a script under :class:`fastop.profiler.Profiler`, sampling its Python
             stack, and print where the time went, ops and the Python outside them;
             write the Chrome trace (``<script>.trace.json``).
"""
from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import os
import sys
import threading
from typing import Any, Callable

from fastop import plugins
from fastop._core.kernel import CKernel
from fastop._version import __version__
from fastop.ops import OpDef, registry
from fastop.ops._registry import REQUIRED

__all__ = ["main", "op_info"]


def _jsonable(value: Any) -> Any:
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    name = getattr(value, "name", None)   # DType
    return name if isinstance(name, str) else repr(value)


def op_info(op: OpDef) -> dict[str, Any]:
    """Everything ``fastop ops`` shows about one op, as JSON-able data."""
    attrs = []
    for spec in op.attrs.values():
        entry = {"name": spec.name, "type": spec.type.__name__}
        if spec.default is not REQUIRED:
            entry["default"] = _jsonable(spec.default)
        attrs.append(entry)
    if op.grad_rule is None:
        gradient = None
    elif op.grad_rule.kernel_op:
        gradient = f"kernel {op.grad_rule.kernel_op}"
    else:
        gradient = "composite"
    kinds = {"cython" if isinstance(k, CKernel) else "python" for k in op.kernels.values()}
    return {"name": op.name, "plugin": op.plugin, "version": op.version,
            "inputs": [str(a) for a in op.inputs], "outputs": [str(a) for a in op.outputs],
            "attrs": attrs, "dtypes": op.dtypes, "kernels": sorted(kinds),
            "gradient": gradient, "doc": op.doc.strip().split("\n")[0] if op.doc else ""}


def _attr_text(attr: dict[str, Any]) -> str:
    return f"{attr['name']}={attr['default']!r}" if "default" in attr else attr["name"]


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _op_lines(info: dict[str, Any]) -> list[str]:
    """Two lines per op: its signature; dtypes, kernel kind, gradient and doc line."""
    args = ", ".join([*info["inputs"], *map(_attr_text, info["attrs"])])
    dtypes = " ".join("any dtype" if d == "*" else d for d in info["dtypes"])
    details = [dtypes or "no kernel",
               " and ".join(info["kernels"]) + " kernel" if info["kernels"] else "",
               f"gradient: {info['gradient']}" if info["gradient"] else "no gradient"]
    doc = f" — {info['doc']}" if info["doc"] else ""
    return [f"{info['name']}({args}) -> {', '.join(info['outputs'])}",
            "    " + "; ".join(d for d in details if d) + doc]


def cmd_ops(args: argparse.Namespace) -> int:
    """``fastop ops``: the op listing, grouped by the plugin that provides each op."""
    if args.namespace:
        try:
            registry.namespace(args.namespace)
        except AttributeError as exc:
            print(f"fastop ops: error: {exc}", file=sys.stderr)
            return 2
    infos = [op_info(op) for op in registry.ops(args.namespace)]
    prefix = f"{args.namespace}::" if args.namespace else ""
    loaded = [{"name": p.name, "version": p.version, "module": p.module,
               "entry_point": p.entry_point, "directory": p.directory,
               "ops": [name for name in p.ops if name.startswith(prefix)], "error": p.error}
              for p in plugins.list()]
    if args.namespace:          # only the plugins, and their ops, of that namespace
        loaded = [p for p in loaded if p["ops"] or p["error"]]
    if args.json:
        print(json.dumps({"fastop": __version__, "namespace": args.namespace,
                          "plugins": loaded, "ops": infos}, indent=2))
        return 0
    # built-in plugin first, then in load order; ops defined outside any plugin last
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {
        (p["name"], p["version"]): [] for p in loaded}
    for info in infos:
        groups.setdefault((info["plugin"], info["version"]), []).append(info)
    groups = {key: members for key, members in groups.items() if members}
    modules = {(p["name"], p["version"]): p["module"] for p in loaded}
    lines = []
    for (plugin, version), members in groups.items():
        module = modules.get((plugin, version))
        origin = f"plugin module {module}" if module else "defined outside a plugin"
        lines.append(f"{plugin} {version}".strip() + f": {_plural(len(members), 'op')} "
                     f"({origin})")
        lines += ["  " + line for info in members for line in _op_lines(info)]
        lines.append("")
    lines += [f"{p['name']} {p['version']}".strip() + f": failed to load ({p['error']})"
              for p in loaded if p["error"] is not None]
    distributions = {plugin for plugin, _ in groups}
    lines.append(f"{_plural(len(infos), 'op')} from {_plural(len(distributions), 'distribution')}"
                 + (f" in namespace {args.namespace!r}" if args.namespace else ""))
    print("\n".join(lines))
    return 0


def _harness_dirs(given: str | None) -> list[str]:
    """Where ``harness.py`` may be: the ``--dir`` given, ``./benchmarks``, and the
    ``benchmarks/`` of the source checkout this fastop was imported from."""
    checkout = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.realpath(__file__)))), "benchmarks")
    return list(dict.fromkeys([*([given] if given else []), "benchmarks", checkout]))


def cmd_bench(args: argparse.Namespace) -> int:
    """``fastop bench``: find the harness, import it, run it (see benchmarks/harness.py).
    Nothing of it is imported before: ``ops`` and ``--version`` do not pay for it."""
    def fail(message: str) -> int:
        print(f"fastop bench: error: {message}", file=sys.stderr)
        return 2
    missing = [name for name in ("pyperf", "tqdm", *["matplotlib"] * bool(args.plot))
               if importlib.util.find_spec(name) is None]
    if missing:
        return fail(f"needs {' and '.join(missing)}: pip install {' '.join(missing)}")
    if args.dir and not os.path.isdir(args.dir):
        return fail(f"benchmark directory {args.dir!r} does not exist")
    places = _harness_dirs(args.dir)
    found = next((os.path.join(p, "harness.py") for p in places
                  if os.path.isfile(os.path.join(p, "harness.py"))), None)
    if found is None:
        return fail("no harness.py in " + ", ".join(places) + ": run from a fastop "
                    "checkout's root or pass --dir (its benchmarks/ directory)")
    args.dir = args.dir or os.path.dirname(found)
    spec = importlib.util.spec_from_file_location("fastop_bench_harness", found)
    harness = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(harness)
    try:
        return harness.run(args)
    except harness.BenchError as exc:
        return fail(str(exc))


def _steps(text: str) -> tuple[int, int | None]:
    """``--steps A:B`` (steps A to B-1) or ``A:`` (from A on)."""
    first, colon, last = text.partition(":")
    try:
        start, end = int(first), (int(last) if last.strip() else None)
    except ValueError:
        start, end = -1, None
    if not colon or start < 0 or (end is not None and end <= start):
        raise argparse.ArgumentTypeError(f"expected steps like '5:20' (steps 5 to 19) or "
                                         f"'5:' (from step 5 on), got {text!r}")
    return start, end


def _sample_ms(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 1000:
        raise argparse.ArgumentTypeError(f"expected milliseconds between 0 (no sampling) "
                                         f"and 1000, got {text!r}")
    return value


def _add_profile_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", metavar="TRACE.json",
                        help="where to write the Chrome trace (open it in ui.perfetto.dev "
                             "or chrome://tracing); a directory: <script>.trace.json in it "
                             "(default: <script>.trace.json here)")
    parser.add_argument("--no-trace", action="store_true", help="write no trace")
    parser.add_argument("--sort", choices=("total", "self", "calls", "mean", "max", "min"),
                        default="total", help="order of the rows (default: total)")
    parser.add_argument("--group", choices=("op", "plugin", "shape"), default="op",
                        help="a row per op, per plugin, or per op and input shapes")
    parser.add_argument("--rows", type=int, metavar="N", help="only the first N rows")
    parser.add_argument("--steps", type=_steps, metavar="A:B",
                        help="record only steps A to B-1 (the steady state); a step ends "
                             "at each optimizer update (Optimizer.step) and static run "
                             "(Executor.run) of the script")
    parser.add_argument("--sample-ms", type=_sample_ms, default=5.0, metavar="MS",
                        help="sample the script's Python stack every MS milliseconds "
                             "(default: 5; 0: no sampling)")


_PROFILE_OPTIONS = ("--out", "--sort", "--group", "--rows", "--steps", "--sample-ms")
_PROFILE_FLAGS = ("--no-trace",)


def _split_profile_argv(rest: list[str]) -> tuple[list[str], list[str]]:
    """The script's arguments and the profile options among them (those of
    :func:`_add_profile_options`, with their values) anywhere before a ``--``;
    everything else, and everything after ``--``, is the script's, in order."""
    own, script = [], []
    i = 0
    while i < len(rest):
        token = rest[i]
        if token == "--":
            script += rest[i + 1:]
            break
        if token in _PROFILE_OPTIONS:
            own += rest[i:i + 2]
            i += 2
            continue
        mine = token.split("=", 1)[0] in _PROFILE_OPTIONS or token in _PROFILE_FLAGS
        (own if mine else script).append(token)
        i += 1
    return own, script


def _run_script(path: str, argv: list[str]) -> int:
    """Run `path` as ``python path argv...`` would (``__main__``, its own sys.argv, its
    directory first on sys.path); its exit code."""
    import runpy
    import traceback
    saved_argv, saved_path = sys.argv, sys.path[0]
    sys.argv, sys.path[0] = [path, *argv], os.path.dirname(os.path.abspath(path))
    try:
        runpy.run_path(path, run_name="__main__")
        return 0
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        print(exc.code, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("fastop profile: interrupted; the profile so far:", file=sys.stderr)
        return 130
    except BaseException:      # the script's own error: its traceback, then the profile
        traceback.print_exc()
        return 1
    finally:
        sys.argv, sys.path[0] = saved_argv, saved_path


class _StepCounter:
    """While active, each optimizer update (``Optimizer.step``) and static run
    (``Executor.run``) the profiled thread makes ends a profiler step (the outermost
    one, when they nest): the steps ``--steps`` selects."""

    def __init__(self, prof: Any) -> None:
        from fastop.optimizer.optimizer import Optimizer
        from fastop.static.executor import Executor
        self.prof, self.count, self._depth = prof, 0, 0
        self._thread = threading.get_ident()
        self._methods = [(Optimizer, "step"), (Executor, "run")]
        self._saved = [cls.__dict__[name] for cls, name in self._methods]

    def __enter__(self) -> _StepCounter:
        for (cls, name), method in zip(self._methods, self._saved):
            setattr(cls, name, self._counting(method))
        return self

    def __exit__(self, *exc_info: Any) -> None:
        for (cls, name), method in zip(self._methods, self._saved):
            setattr(cls, name, method)

    def _counting(self, method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        def counted(*args: Any, **kwargs: Any) -> Any:
            if threading.get_ident() != self._thread:
                return method(*args, **kwargs)
            self._depth += 1
            try:
                return method(*args, **kwargs)
            finally:
                self._depth -= 1
                if self._depth == 0:
                    self.count += 1
                    self.prof.step()
        return counted


def _trace_path(args: argparse.Namespace) -> str | None:
    """Where the trace goes: ``--out`` (a directory: the default name in it), else
    ``<script name>.trace.json`` in the working directory; None with ``--no-trace``."""
    if args.no_trace:
        return None
    name = os.path.splitext(os.path.basename(args.script))[0] + ".trace.json"
    if args.out is None:
        return name
    return os.path.join(args.out, name) if os.path.isdir(args.out) else args.out


def _steps_scheduler(steps: tuple[int, int | None] | None) -> Any:
    """The profiler's scheduler for ``--steps`` (None: record the whole run)."""
    from fastop.profiler import ProfilerState
    if steps is None:
        return None
    start, end = steps
    if end is not None:
        return steps

    def from_start(step: int) -> ProfilerState:
        return ProfilerState.RECORD if step >= start else ProfilerState.CLOSED
    return from_start


def cmd_profile(args: argparse.Namespace) -> int:
    """``fastop profile script.py [args]``: the script runs under the profiler, its
    Python stack sampled; then the summary and the trace. Profile options may also
    follow the script."""
    from fastop.profiler import Profiler
    own, script_argv = _split_profile_argv(args.script_args)
    parser = argparse.ArgumentParser(prog="fastop profile", allow_abbrev=False)
    _add_profile_options(parser)
    parser.parse_args(own, namespace=args)
    if not os.path.isfile(args.script):
        print(f"fastop profile: error: no such script: {args.script!r}", file=sys.stderr)
        return 2
    trace = _trace_path(args)
    if trace is not None:       # checked before the script runs, not after
        out_dir = os.path.dirname(os.path.abspath(trace))
        if not os.path.isdir(out_dir):
            print(f"fastop profile: error: --out {args.out!r}: directory {out_dir!r} does "
                  f"not exist", file=sys.stderr)
            return 2
    prof = Profiler(scheduler=_steps_scheduler(args.steps),
                    sample_python=args.sample_ms / 1e3 if args.sample_ms else None)
    prof.start()
    try:
        with _StepCounter(prof) as steps:
            code = _run_script(args.script, script_argv)
    finally:
        prof.stop()
    sys.stdout.flush()
    print()
    prof.summary(sorted_by=args.sort, group_by=args.group, row_limit=args.rows)
    if args.steps is not None:
        start, end = args.steps
        last = steps.count if end is None else min(end, steps.count + 1)
        recorded = f"steps {start} to {last - 1}" if last > start else "no step"
        print(f"fastop profile: {steps.count} steps (one ends at each Optimizer.step() "
              f"and Executor.run()); --steps {start}:{'' if end is None else end} "
              f"recorded {recorded}", file=sys.stderr)
    if trace is not None and prof.events():
        try:
            prof.export_chrome_tracing(trace, process_name=os.path.basename(args.script))
        except OSError as exc:
            print(f"fastop profile: error: {exc}", file=sys.stderr)
            return code or 1
        print(f"fastop profile: trace written to {trace} (open it in "
              f"https://ui.perfetto.dev or chrome://tracing)", file=sys.stderr)
    return code


def _thread_counts(text: str) -> list[int]:
    counts = [int(p) for p in text.split(",") if p.strip().isdigit()]
    if not counts or len(counts) != len(text.split(",")) or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"expected thread counts like '1,2', got {text!r}")
    return counts


def _add_bench_arguments(bench: argparse.ArgumentParser) -> None:
    bench.add_argument("--quick", action="store_true",
                       help="small sizes and fewer samples (about a minute)")
    bench.add_argument("--json", metavar="FILE",
                       help="also write the samples (a pyperf BenchmarkSuite file)")
    bench.add_argument("--markdown", metavar="FILE",
                       help="also write the table in Markdown (for docs/PERFORMANCE.md)")
    bench.add_argument("--plot", metavar="FILE.png",
                       help="also draw one figure of the ratios per case with their "
                            "targets' goals (needs matplotlib; with --summarize: their "
                            "medians over the runs)")
    bench.add_argument("--threads", type=_thread_counts, default=[1, 2], metavar="N,M",
                       help="thread counts, one process each (default: 1,2)")
    bench.add_argument("--filter", metavar="SUBSTR",
                       help="only cases whose 'group/name' contains SUBSTR")
    bench.add_argument("--dir", metavar="DIR",
                       help="directory of bench_*.py modules (default: ./benchmarks, "
                            "else the source checkout's)")
    bench.add_argument("--no-torch", action="store_true",
                       help="do not import torch (skips the torch column)")
    bench.add_argument("--summarize", nargs="+", metavar="JSON",
                       help="measure nothing: the Markdown table of medians over these "
                            "--json files of earlier runs")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fastop", description="fastop: a small, fast deep-learning framework.")
    parser.add_argument("--version", action="version",
                        version=f"fastop {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    bench = commands.add_parser("bench", help="benchmark fastop against numpy and PyTorch")
    _add_bench_arguments(bench)
    bench.set_defaults(handler=cmd_bench)

    ops = commands.add_parser("ops", help="list every registered op")
    ops.add_argument("--namespace", metavar="NS", help="only ops of this namespace")
    ops.add_argument("--json", action="store_true", help="machine-readable output")
    ops.set_defaults(handler=cmd_ops)

    profile = commands.add_parser(
        "profile", help="run a Python script under the profiler",
        description="Run SCRIPT (as `python SCRIPT ARGS...` would) under "
                    "fastop.profiler.Profiler, sampling its Python stack, then print the "
                    "time per op, the time outside fastop ops and the Python functions it "
                    "went to, and write the trace. The options may also come after the "
                    "script; arguments after `--` all go to it.")
    _add_profile_options(profile)
    profile.add_argument("script", metavar="SCRIPT", help="the Python script to run")
    profile.add_argument("script_args", nargs=argparse.REMAINDER, metavar="ARGS",
                         help="its arguments")
    profile.set_defaults(handler=cmd_profile)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m fastop`` and the ``fastop`` script; the exit code."""
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    args.argv = argv[1:]
    try:
        return args.handler(args)
    except BrokenPipeError:
        # The reader went away (`fastop ops | head`): not an error of ours. Point stdout
        # at devnull so the interpreter's final flush does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
