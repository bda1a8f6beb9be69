"""Where the time goes: fastop's profiler (PaddlePaddle's ``paddle.profiler``).

Every op call goes through one dispatch entry (eager) or one run loop (static), and
that is where the profiler looks: while a :class:`Profiler` records, each op call —
built-in, plugin op, py_func, a PyLayer's forward and backward, the nodes of a backward
pass (nested under their ``backward()`` call), optimizer updates — becomes an event with
its op, start and end (``CLOCK_MONOTONIC``), thread, and its inputs' shapes and dtypes.
The recorder is C (:mod:`fastop._core.profiling`): off, it costs one flag check per op;
on, well under a microsecond per op. Events are decoded here, once, when read.

* :meth:`Profiler.summary` prints a table per op (or per plugin, or per input shape):
  calls, total and self time, mean, max, share of the time, and the share spent in
  Python kernels (the numpy code of plugin ops and py_func, PyLayer bodies);
* :meth:`Profiler.export_chrome_tracing` writes the Trace Event Format that
  chrome://tracing and https://ui.perfetto.dev open: one track per thread, nested calls
  stacked;
* :class:`RecordEvent` (also :func:`record_function`) marks your own ranges, as a
  context manager or a decorator;
* the time in no op (your Python between the ops) is the summary's ``outside fastop
  ops`` row; ``Profiler(sample_python=seconds)`` samples the Python stack of the thread
  that started it (a thread reading ``sys._current_frames()``) to say which functions
  that time went to, in the summary and on a track of the trace (``python -m fastop
  profile`` does, every 5 ms).

Paddle's scheduling works as in Paddle: ``scheduler=(2, 5)`` or :func:`make_scheduler`,
``Profiler.step()`` once per iteration (each step is a ``ProfileStep#N`` range), and
``on_trace_ready`` (e.g. :func:`export_chrome_tracing`) called when a recording period
ends. Unlike Paddle, nothing is written unless asked (no default ``./profiler_log/``)
and input shapes are recorded by default (they are cheap here).

    with fastop.profiler.Profiler() as prof:
        train_one_epoch()
    prof.summary(sorted_by="self", group_by="op")
    prof.export_chrome_tracing("trace.json")
"""
from __future__ import annotations

import contextlib
import datetime
import enum
import inspect
import json
import os
import socket
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterable
from typing import Any, TextIO

from fastop._core import profiling as _recorder
from fastop._core.kernel import CKernel
from fastop._core.storage import DTYPE_NAMES, as_dtype
from fastop._files import atomic_write
from fastop.ops._dispatch import kernel_dtype

__all__ = ["Profiler", "ProfilerState", "ProfilerTarget", "SortedKeys", "RecordEvent",
           "record_function", "make_scheduler", "export_chrome_tracing", "ProfilerEvent"]

_KINDS = _recorder.EVENT_KINDS
_CATEGORY = {_KINDS["op"]: "op", _KINDS["static_op"]: "static op",
             _KINDS["pylayer"]: "PyLayer", _KINDS["node"]: "backward node",
             _KINDS["backward"]: "autograd", _KINDS["run"]: "static",
             _KINDS["user"]: "user", _KINDS["step"]: "step"}
_DTYPE_NAMES = DTYPE_NAMES     # by dtype code: every dtype, the storage dtype float16 too
_TIME_UNITS = {"s": 1e9, "ms": 1e6, "us": 1e3, "ns": 1.0}
_NO_PLUGIN = "-"


# ----------------------------------------------------------------------------- states

class ProfilerState(enum.Enum):
    """Where a :class:`Profiler` is in its schedule (Paddle's states): CLOSED and READY
    record nothing; RECORD records; RECORD_AND_RETURN is the last recorded step of a
    period, after which ``on_trace_ready`` is called."""
    CLOSED = 0
    READY = 1
    RECORD = 2
    RECORD_AND_RETURN = 3


class ProfilerTarget(enum.Enum):
    """Devices to profile. fastop runs on the CPU only: GPU is refused with a warning."""
    CPU = 0
    GPU = 1


class SortedKeys(enum.Enum):
    """Paddle's sort keys for :meth:`Profiler.summary` (the GPU ones do not apply)."""
    CPUTotal = "total"
    CPUAvg = "mean"
    CPUMax = "max"
    CPUMin = "min"
    GPUTotal = "gpu_total"
    GPUAvg = "gpu_mean"
    GPUMax = "gpu_max"
    GPUMin = "gpu_min"


_SORT_KEYS = ("total", "self", "calls", "mean", "max", "min")
_GROUPS = ("op", "plugin", "shape")


def make_scheduler(*, closed: int, ready: int, record: int, repeat: int = 0,
                   skip_first: int = 0) -> Callable[[int], ProfilerState]:
    """A schedule (Paddle's): after `skip_first` steps, cycles of `closed` steps not
    recorded, `ready` steps not recorded, `record` steps recorded (the last one
    RECORD_AND_RETURN), `repeat` times (0: until the profiler stops)."""
    if min(closed, ready, repeat, skip_first) < 0 or record < 1:
        raise ValueError(f"make_scheduler: closed, ready, repeat and skip_first must be "
                         f">= 0 and record >= 1, got closed={closed}, ready={ready}, "
                         f"record={record}, repeat={repeat}, skip_first={skip_first}")
    period = closed + ready + record

    def schedule(step: int) -> ProfilerState:
        if step < skip_first:
            return ProfilerState.CLOSED
        cycle, at = divmod(step - skip_first, period)
        if repeat > 0 and cycle >= repeat:
            return ProfilerState.CLOSED
        if at < closed + ready:
            return ProfilerState.CLOSED if at < closed else ProfilerState.READY
        return ProfilerState.RECORD_AND_RETURN if at == period - 1 else ProfilerState.RECORD
    return schedule


def _always_record(step: int) -> ProfilerState:
    return ProfilerState.RECORD


def _range_scheduler(scheduler: Any) -> Callable[[int], ProfilerState]:
    """Paddle's ``scheduler=(start_batch, end_batch)``: record steps [start, end)."""
    if len(scheduler) != 2 or not all(isinstance(s, int) for s in scheduler) \
            or not 0 <= scheduler[0] < scheduler[1]:
        raise ValueError(f"Profiler: scheduler=(start_batch, end_batch) with "
                         f"0 <= start_batch < end_batch, got {scheduler!r}")
    start, end = scheduler
    return make_scheduler(closed=max(start - 1, 0), ready=1 if start else 0,
                          record=end - start, repeat=1)


def export_chrome_tracing(dir_name: str, worker_name: str | None = None
                          ) -> Callable[[Profiler], None]:
    """An ``on_trace_ready`` callback (Paddle's): each recorded period is written to
    ``dir_name/<worker_name>_time_<timestamp>.fastop_trace.json`` (worker_name defaults
    to ``host_<hostname>pid_<pid>``)."""
    os.makedirs(dir_name, exist_ok=True)

    def write(prof: Profiler) -> None:
        worker = worker_name or f"host_{socket.gethostname()}pid_{os.getpid()}"
        stamp = datetime.datetime.now().strftime("%Y_%m_%d_%H_%M_%S_%f")
        prof.export_chrome_tracing(os.path.join(
            dir_name, f"{worker}_time_{stamp}.fastop_trace.json"))
    return write


# ----------------------------------------------------------------------------- user ranges

class RecordEvent(contextlib.ContextDecorator):
    """A range of your own in the profile (Paddle's ``RecordEvent``, PyTorch's
    ``record_function``): ``with RecordEvent("data"): ...``, ``@RecordEvent("loss")``
    on a function, or ``begin()`` / ``end()``. Records only while a profiler records;
    otherwise it costs a flag check."""

    def __init__(self, name: str) -> None:
        self.name = str(name)
        self._start: int | None = None

    def begin(self) -> None:
        """Start the range now."""
        self._start = _recorder.now() if _recorder.is_active() else None

    def end(self) -> None:
        """End the range now (nothing if it was not begun while recording)."""
        if self._start is not None:
            _recorder.record_range(self.name, _KINDS["user"], self._start)
            self._start = None

    def __enter__(self) -> RecordEvent:
        self.begin()
        return self

    def __exit__(self, *exc_info: Any) -> bool:
        self.end()
        return False

    def _recreate_cm(self) -> RecordEvent:
        # as a decorator: each call (recursive, or on another thread) its own range
        return type(self)(self.name)

    def __repr__(self) -> str:
        return f"RecordEvent({self.name!r})"


record_function = RecordEvent


# ----------------------------------------------------------------------------- events

class ProfilerEvent:
    """One recorded call: its name and category, start/end in ns (``CLOCK_MONOTONIC``),
    thread, inputs (per input ``(dtype, shape)``, None, ``"scalar"`` or a list of those;
    None when shapes were not recorded), the op or PyLayer it ran (`source`), its
    plugin, the Python function that ran for it (``"module:qualname"``, file, line) if
    any, and — once nested — its parent event, depth and self time."""

    __slots__ = ("name", "category", "start_ns", "end_ns", "thread", "inputs", "source",
                 "plugin", "python", "parent", "depth", "self_ns")

    def __init__(self, name: str, category: str, start_ns: int, end_ns: int, thread: int,
                 inputs: tuple | None, source: Any, plugin: str,
                 python: tuple[str, str | None, int | None] | None) -> None:
        self.name, self.category = name, category
        self.start_ns, self.end_ns, self.thread = start_ns, end_ns, thread
        self.inputs, self.source, self.plugin, self.python = inputs, source, plugin, python
        self.parent: ProfilerEvent | None = None
        self.depth = 0
        self.self_ns = self.duration_ns

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns

    @property
    def group_name(self) -> str:
        """The name events are grouped under (every ProfileStep#N is ``ProfileStep``)."""
        return "ProfileStep" if self.category == "step" else self.name

    def shapes_text(self) -> str:
        """The input shapes as text, e.g. ``[[32, 64], scalar]`` ("" if not recorded)."""
        return "" if self.inputs is None else \
            "[" + ", ".join(_entry_text(e) for e in self.inputs) + "]"

    def __repr__(self) -> str:
        return (f"<ProfilerEvent {self.name} ({self.category}) "
                f"{self.duration_ns / 1e3:.1f} us on thread {self.thread}>")


def _entry_text(entry: Any) -> str:
    if entry is None:
        return "None"
    if isinstance(entry, list):
        return "[" + ", ".join(_entry_text(e) for e in entry) + "]"
    if entry == "scalar":
        return "scalar"
    return str(list(entry[1]))


def _decode_inputs(inputs: tuple | None) -> tuple | None:
    """The recorder's entries as (dtype name, shape) / None / "scalar" / lists."""
    if inputs is None:
        return None

    def entry(e: Any) -> Any:
        if e is None:
            return None
        if isinstance(e, list):
            return [entry(x) for x in e]
        return "scalar" if e[0] < 0 else (_DTYPE_NAMES[e[0]], e[1])
    return tuple(entry(e) for e in inputs)


def _python_source(fn: Any) -> tuple[str, str | None, int | None] | None:
    """("module:qualname", file, first line) of a Python function (unwrapped)."""
    if fn is None or isinstance(fn, CKernel):
        return None
    fn = inspect.unwrap(fn)
    code = getattr(fn, "__code__", None)
    module = getattr(fn, "__module__", None) or "?"
    qualname = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    return (f"{module}:{qualname}", code.co_filename if code else None,
            code.co_firstlineno if code else None)


def _dispatch_code(plan: Any, inputs: tuple | None) -> int | None:
    """The dtype code that chose the kernel (the call plan's one rule, on the recorded
    dtypes), or None when the inputs were not recorded."""
    if inputs is None:
        return None

    def dtype(e: Any) -> Any:
        if isinstance(e, list):
            return [dtype(x) for x in e]
        return None if e is None or e[0] < 0 else as_dtype(DTYPE_NAMES[e[0]])
    return kernel_dtype(plan, tuple(dtype(e) for e in inputs))


class _Resolver:
    """Names, plugins and Python functions of what the recorder saw (cached: a trace
    holds the same few ops many times)."""

    def __init__(self) -> None:
        self.cache: dict[tuple, tuple] = {}

    def op(self, op: Any, inputs: tuple | None) -> tuple[str, str, Any]:
        if not hasattr(op, "plan"):              # a static record without its OpDef
            return getattr(op, "name", type(op).__name__), _NO_PLUGIN, None
        plan = op.plan
        code = _dispatch_code(plan, inputs)
        key = (id(op), code)
        if key not in self.cache:
            kernels = plan.kernels
            if code is not None:
                kernel = kernels[code]
            else:                                # shapes not recorded: any Python one
                kernel = next((k for k in kernels if k is not None
                               and not isinstance(k, CKernel)), None)
            # a py_func op is shown by its label (py_func[fn]); the cache holds the op
            # itself too, so the id in its key stays that op's
            self.cache[key] = (getattr(op, "label", None) or op.name, op.plugin,
                               _python_source(kernel), op)
        return self.cache[key][:3]

    def event(self, kind: int, what: Any, start: int, end: int, thread: int,
              inputs: tuple | None) -> ProfilerEvent:
        category = _CATEGORY[kind]
        plugin, python = _NO_PLUGIN, None
        if kind in (_KINDS["op"], _KINDS["static_op"]):
            name, plugin, python = self.op(what, inputs)
        elif kind in (_KINDS["pylayer"], _KINDS["node"]):
            if isinstance(what, type):           # a PyLayer class
                forward = kind == _KINDS["pylayer"]
                name = f"{what.__name__}.{'forward' if forward else 'backward'}"
                plugin = what.__module__
                python = _python_source(getattr(what, "forward" if forward else "backward",
                                                None))
            else:                                # an op's node: the rule is framework code
                name, plugin, _ = self.op(what, None)
                name += ".backward"
        elif kind == _KINDS["step"]:
            name = f"ProfileStep#{what}"
        else:
            name = str(what)
        return ProfilerEvent(name, category, start, end, thread, _decode_inputs(inputs),
                             what, plugin, python)


def _nest(events: list[ProfilerEvent]) -> list[ProfilerEvent]:
    """Sort by thread and start, and set each event's parent, depth and self time: on
    one thread calls nest, so an event's parent is the innermost earlier event still
    open when it starts."""
    events.sort(key=lambda e: (e.thread, e.start_ns, -e.end_ns))
    stack: list[ProfilerEvent] = []
    for e in events:
        while stack and (stack[-1].thread != e.thread or stack[-1].end_ns < e.end_ns):
            stack.pop()                          # closed before e, or another thread
        if stack:
            e.parent = stack[-1]
            e.parent.self_ns -= e.duration_ns
        e.depth = len(stack)
        stack.append(e)
    return events


# ----------------------------------------------------------------------------- Python stacks

_FASTOP_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
OUTSIDE_OPS = "outside fastop ops"


class PythonFrame:
    """A function (code object) seen in the sampled stacks: its label (``load_data``,
    ``import sklearn`` for a module being imported, ``train.py`` for the script), file
    and first line, and whether it is a caller above the profiled code (fastop's
    command line, runpy), which the stacks leave out."""

    __slots__ = ("label", "file", "line", "launcher")

    def __init__(self, label: str, file: str, line: int, launcher: bool) -> None:
        self.label, self.file, self.line, self.launcher = label, file, line, launcher

    @property
    def where(self) -> str:
        return f"{_short_path(self.file)}:{self.line}" if self.file[:1] != "<" else self.file


class PythonSamples:
    """The Python stacks of one thread, sampled while a :class:`Profiler` recorded
    (``Profiler(sample_python=seconds)``): ``times`` (``CLOCK_MONOTONIC`` ns, as the
    events), ``stack_ids`` (per sample, an index into ``stacks``), ``stacks`` (tuples of
    indices into ``frames``, outermost first), ``frames`` (:class:`PythonFrame`),
    ``thread`` (its ident) and ``interval`` (seconds asked between samples)."""

    def __init__(self, thread: int, interval: float) -> None:
        self.thread, self.interval = thread, interval
        self.times: list[int] = []
        self.stack_ids: list[int] = []
        self.stacks: list[tuple[int, ...]] = []
        self.frames: list[PythonFrame] = []

    def __len__(self) -> int:
        return len(self.times)


class _StackSampler:
    """A daemon thread taking the Python stack of one thread every `interval` seconds
    (``sys._current_frames``: py-spy's idea, inside the process). A sample costs the
    sampled thread one GIL hand-over; while it runs Python, the interpreter hands the
    GIL over every ``sys.getswitchinterval()`` (5 ms) at most, so samples come that
    often then, and each is weighted by the time since the one before. It sleeps with
    ``time.sleep`` (cheaper than a timed wait on an Event): stopping takes up to one
    interval."""

    def __init__(self, thread: int, interval: float) -> None:
        self.samples = PythonSamples(thread, interval)
        self._codes: dict[Any, int] = {}          # code object -> index into frames (-1: left out)
        self._stacks: dict[tuple[int, ...], int] = {}
        self._done = False
        self._thread = threading.Thread(target=self._run, name="fastop-stack-sampler",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> PythonSamples:
        self._done = True
        if self._thread is not threading.current_thread():   # (a collection run by it)
            self._thread.join()
        return self.samples

    def _run(self) -> None:
        samples, target, now = self.samples, self.samples.thread, _recorder.now
        current_frames, sleep, interval = sys._current_frames, time.sleep, samples.interval
        codes, stacks = self._codes, self._stacks
        while True:
            sleep(interval)
            if self._done:
                return
            frame = current_frames().get(target)
            if frame is None:                     # the thread has ended
                continue
            t = now()
            entries = []
            while frame is not None:
                index = codes.get(frame.f_code)
                if index is None:
                    index = codes[frame.f_code] = self._frame(frame)
                if index >= 0:
                    entries.append(index)
                frame = frame.f_back
            key = tuple(reversed(entries))
            stack = stacks.get(key)
            if stack is None:
                stack = stacks[key] = len(samples.stacks)
                samples.stacks.append(key)
            samples.times.append(t)
            samples.stack_ids.append(stack)

    def _frame(self, frame: Any) -> int:
        """The index of a new code object's :class:`PythonFrame`; -1 for importlib's
        own frames (an import shows as ``import <module>``)."""
        code = frame.f_code
        file = code.co_filename
        if file.startswith("<frozen importlib"):
            return -1
        module = frame.f_globals.get("__name__", "?")
        if code.co_name != "<module>":
            label = code.co_qualname
        elif module == "__main__":
            label = os.path.basename(file)
        else:
            label = f"import {module}"
        launcher = file.startswith(_FASTOP_DIR) or module == "runpy"
        self.samples.frames.append(PythonFrame(label, file, code.co_firstlineno, launcher))
        return len(self.samples.frames) - 1


def _user_stack(samples: PythonSamples, stack: tuple[int, ...]) -> tuple[int, ...]:
    """The stack without its launcher frames at the outer end (``python -m fastop
    profile``'s own and runpy's: the script's ``<module>`` is the root)."""
    frames = samples.frames
    start = 0
    while start < len(stack) - 1 and frames[stack[start]].launcher:
        start += 1
    return stack[start:]


def _in_script(samples: PythonSamples, i: int) -> bool:
    """Whether sample `i` caught the script running (not the launcher alone)."""
    stack = _user_stack(samples, samples.stacks[samples.stack_ids[i]])
    return bool(stack) and not samples.frames[stack[0]].launcher


def _op_intervals(events: list[ProfilerEvent], thread: int) -> list[tuple[int, int]]:
    """The union of the times `thread` (an event thread index) spent in fastop: every
    event but steps and user ranges, merged into disjoint sorted intervals."""
    spans = sorted((e.start_ns, e.end_ns) for e in events
                   if e.thread == thread and e.category not in ("step", "user"))
    merged: list[list[int]] = []
    for start, end in spans:
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(a, b) for a, b in merged]


def _outside_weights(samples: PythonSamples, window: tuple[int, int],
                     intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """(sample index, weight in ns) of each sample in `window` taken outside every
    interval: its weight is the time since the sample before (or the window's start)."""
    out, k, previous = [], 0, window[0]
    for i, t in enumerate(samples.times):
        if not window[0] <= t <= window[1]:
            continue
        while k < len(intervals) and intervals[k][1] < t:
            k += 1
        if not (k < len(intervals) and intervals[k][0] <= t):
            out.append((i, t - previous))
        previous = t
    return out


def _sampled_table(samples: PythonSamples, events: list[ProfilerEvent],
                   threads: list[tuple[int, int, str]], window: tuple[int, int],
                   time_unit: str, row_limit: int | None) -> str:
    """Where the time outside fastop ops went on the sampled thread: per function, its
    time with it on the stack (Total) and at the top of it (Self), estimated from the
    samples and scaled to that thread's exact time outside ops."""
    index = next((i for i, t in enumerate(threads) if t[0] == samples.thread), None)
    intervals = _op_intervals(events, index) if index is not None else []
    steps = [e for e in events if e.thread == index and e.category == "step"]
    begin = min((e.start_ns for e in steps), default=window[0])   # the steps' extent
    end = max((e.end_ns for e in steps), default=window[1])
    outside = max(end - begin - sum(min(b, end) - max(a, begin) for a, b in intervals
                                    if b > begin and a < end), 0)
    # A sample of the launcher alone (before the script's first line, after its last)
    # is not the script's time.
    weighted = [(i, w) for i, w in _outside_weights(samples, (begin, end), intervals)
                if _in_script(samples, i)]
    name = threads[index][2] if index is not None else "the sampled thread"
    scale = _TIME_UNITS[time_unit]
    head = (f"\nWhere the {outside / scale:.3f} {time_unit} {OUTSIDE_OPS} on {name} went: "
            f"its Python stack sampled every {samples.interval * 1e3:g} ms "
            f"({len(weighted)} samples there)")
    if not weighted:
        return head + ": no sample fell there"
    total_weight = sum(w for _, w in weighted) or 1
    inclusive: dict[int, int] = {}
    own: dict[int, int] = {}
    frames = samples.frames
    for i, w in weighted:
        stack = _user_stack(samples, samples.stacks[samples.stack_ids[i]])
        first_import = next((k for k, f in enumerate(stack)
                             if frames[f].label.startswith("import ")), None)
        if first_import is not None:         # an import is one row: all it runs is its
            stack = stack[:first_import + 1]
        for f in set(stack):
            inclusive[f] = inclusive.get(f, 0) + w
        if stack:
            own[stack[-1]] = own.get(stack[-1], 0) + w
    ordered = sorted(inclusive, key=lambda f: (-inclusive[f], -own.get(f, 0)))
    shown = ordered[:row_limit or 15]
    width = min(max([8] + [len(frames[f].label) for f in shown]), 50)
    header = (f"{'Function':<{width}}  {'Total(' + time_unit + ')':>11}  "
              f"{'Self(' + time_unit + ')':>11}  {'Total %':>7}  Where")
    rule = "-" * (len(header) + 24)
    lines = [head, rule, header, rule]
    for f in shown:
        label = frames[f].label
        label = label if len(label) <= width else label[:width - 1] + "…"
        t, o = inclusive[f] / total_weight * outside, own.get(f, 0) / total_weight * outside
        lines.append(f"{label:<{width}}  {t / scale:>11.3f}  {o / scale:>11.3f}  "
                     f"{100 * t / (outside or 1):>7.1f}  {frames[f].where}")
    lines.append(rule)
    if len(shown) < len(ordered):
        lines.append(f"... {len(ordered) - len(shown)} more functions")
    lines.append("Total: time with the function on the stack; Self: at its top (in it, or "
                 "in C code it called; an import's\nSelf: all it ran, the trace shows "
                 "inside). Estimated from the samples (each weighted by the time since\nthe "
                 "one before), scaled to the exact time outside ops.")
    return "\n".join(lines)


def _sampled_spans(samples: PythonSamples, window: tuple[int, int]
                   ) -> list[tuple[int, int, int, int]]:
    """The sampled stacks as nested spans ``(depth, frame, start_ns, end_ns)``: a frame
    on the stack in consecutive samples (under the same callers) is one span, from the
    sample before its first to its last."""
    spans: list[tuple[int, int, int, int]] = []
    open_: list[list[int]] = []                      # per depth: [frame, start, end]
    previous = window[0]
    for t, stack_id in zip(samples.times, samples.stack_ids):
        if not window[0] <= t <= window[1]:
            continue
        stack = _user_stack(samples, samples.stacks[stack_id])
        same = 0
        while same < min(len(stack), len(open_)) and open_[same][0] == stack[same]:
            same += 1
        for depth in range(len(open_) - 1, same - 1, -1):
            f, start, end = open_.pop()
            spans.append((depth, f, start, end))
        for entry in open_:
            entry[2] = t
        open_ += [[f, previous, t] for f in stack[same:]]
        previous = t
    for depth in range(len(open_) - 1, -1, -1):
        f, start, end = open_.pop()
        spans.append((depth, f, start, end))
    return sorted(spans, key=lambda s: (s[2], s[0]))


# ----------------------------------------------------------------------------- the profiler

class Profiler:
    """Record every op call while it runs: a context manager, or :meth:`start` /
    :meth:`stop` (PaddlePaddle's ``paddle.profiler.Profiler``).

    ``targets``: :class:`ProfilerTarget` list (CPU; GPU is refused with a warning).
    ``scheduler``: None (record from start to stop), ``(start_batch, end_batch)`` (record
    the steps in that range), or a function ``step -> ProfilerState`` such as
    :func:`make_scheduler`; steps are counted by :meth:`step`. ``on_trace_ready``:
    called with the profiler when a recording period ends (None: nothing is written).
    ``record_shapes``: record the inputs' shapes and dtypes (the ``shape`` grouping and
    the trace's arguments need them). ``sample_python``: seconds between samples of the
    Python stack of the thread that starts the profiler, while it records (None: no
    sampling): the summary then says which functions the time outside fastop ops went
    to, and the trace shows the sampled stack on a track of its own.

    Profilers nest: one started while another records sees the calls of its own time
    window, the other sees them too (a script with a profiler of its own can run under
    ``python -m fastop profile``). A profiler that nobody holds any more stops recording
    (``p = Profiler(); p.start(); del p`` would otherwise record every op forever).
    """

    def __init__(self, *, targets: Iterable[ProfilerTarget] | None = None,
                 scheduler: Callable[[int], ProfilerState] | tuple[int, int] | None = None,
                 on_trace_ready: Callable[[Profiler], Any] | None = None,
                 record_shapes: bool = True, sample_python: float | None = None) -> None:
        for target in targets or ():
            if target is not ProfilerTarget.CPU:
                warnings.warn(f"fastop.profiler: {target} is not supported; profiling the "
                              f"CPU", stacklevel=2)
        if scheduler is None:
            self._scheduler = _always_record
        elif callable(scheduler):
            self._scheduler = scheduler
        elif isinstance(scheduler, (tuple, list)):
            self._scheduler = _range_scheduler(scheduler)
        else:
            raise TypeError(f"Profiler: scheduler must be None, (start_batch, end_batch) or "
                            f"a function of the step number, got {type(scheduler).__name__}")
        if on_trace_ready is not None and not callable(on_trace_ready):
            raise TypeError(f"Profiler: on_trace_ready must be callable, got "
                            f"{type(on_trace_ready).__name__}")
        if sample_python is not None and not (isinstance(sample_python, (int, float))
                                              and 0 < sample_python <= 1):
            raise ValueError(f"Profiler: sample_python must be None or seconds between "
                             f"samples in (0, 1], got {sample_python!r}")
        self.on_trace_ready = on_trace_ready
        self.record_shapes = bool(record_shapes)
        self.sample_python = sample_python
        self._sampled_thread = threading.get_ident()
        self._sampler: _StackSampler | None = None
        self._samples: PythonSamples | None = None      # the last recorded period's
        self.step_num = 0
        self.current_state = ProfilerState.CLOSED
        self._running = False
        self._recording = False
        self._step_start = 0
        self._trace: _recorder.Trace | None = None      # the last recorded period's:
        self._window = (0, 0)                           # its events in [since, until]
        self._recording_trace: _recorder.Trace | None = None
        self._events: list[ProfilerEvent] | None = None

    def __del__(self) -> None:
        # Its recording session holds the recorder on: release it with the profiler.
        if getattr(self, "_recording", False):
            self._recording = False
            _recorder.stop()
            if self._sampler is not None:
                self._sampler.stop()

    # -- the schedule ---------------------------------------------------------------
    def __enter__(self) -> Profiler:
        self.start()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()

    def start(self) -> None:
        """Enter step 0 and record if the schedule says so."""
        if self._running:
            raise RuntimeError("Profiler.start: this profiler is already running")
        self.step_num = 0
        self.current_state = self._state(0)
        self._sampled_thread = threading.get_ident()
        if self._records(self.current_state):
            self._begin()
        self._running = True
        self._step_start = _recorder.now()

    def step(self) -> None:
        """Mark the end of one iteration (a ``ProfileStep#N`` range) and move the schedule
        on: a period that ends hands its data to ``on_trace_ready``."""
        if not self._running:
            raise RuntimeError("Profiler.step: the profiler is not running; call start() "
                               "first (or use it as a context manager)")
        self._end_step()
        previous = self.current_state
        self.step_num += 1
        self.current_state = self._state(self.step_num)
        if self._recording and (previous is ProfilerState.RECORD_AND_RETURN
                                or not self._records(self.current_state)):
            self._finish(ready=previous is ProfilerState.RECORD_AND_RETURN)
        if not self._recording and self._records(self.current_state):
            self._begin()
        self._step_start = _recorder.now()

    def stop(self) -> None:
        """Stop; the data of a recording period is kept and handed to
        ``on_trace_ready``."""
        if not self._running:
            raise RuntimeError("Profiler.stop: the profiler is not running")
        self._end_step()
        self._running = False
        self.current_state = ProfilerState.CLOSED
        if self._recording:
            self._finish(ready=True)

    def _state(self, step: int) -> ProfilerState:
        state = self._scheduler(step)
        if not isinstance(state, ProfilerState):
            raise TypeError(f"Profiler: the scheduler returned {state!r} for step {step}, "
                            f"expected a ProfilerState")
        return state

    @staticmethod
    def _records(state: ProfilerState) -> bool:
        return state in (ProfilerState.RECORD, ProfilerState.RECORD_AND_RETURN)

    def _begin(self) -> None:
        self._since = _recorder.now()
        self._recording_trace = _recorder.start(self.record_shapes)
        self._recording = True
        if self.sample_python is not None:
            self._sampler = _StackSampler(self._sampled_thread, float(self.sample_python))

    def _end_step(self) -> None:
        if self._recording:
            _recorder.record_range(self.step_num, _KINDS["step"], self._step_start)

    def _finish(self, ready: bool) -> None:
        _recorder.stop()
        self._trace, self._recording_trace = self._recording_trace, None
        self._window = (self._since, _recorder.now())
        self._samples = self._sampler.stop() if self._sampler is not None else None
        self._sampler = None
        self._events = None
        self._recording = False
        if ready and self.on_trace_ready is not None:
            self.on_trace_ready(self)

    # -- reading ----------------------------------------------------------------------
    def events(self) -> list[ProfilerEvent]:
        """The last recorded period's events, by thread and start time, nested (each
        knows its parent, depth and self time)."""
        if self._trace is None:
            return []
        if self._events is None:
            resolver = _Resolver()
            self._events = _nest([resolver.event(*e)
                                  for e in self._trace.events(*self._window)])
        return self._events

    def python_samples(self) -> PythonSamples | None:
        """The last recorded period's samples of the Python stack (None without
        ``sample_python``)."""
        return self._samples

    def threads(self) -> list[tuple[int, int, str]]:
        """Per thread index of the events (``ProfilerEvent.thread``): (ident, native
        thread id, name)."""
        return list(self._trace.threads) if self._trace is not None else []

    def summary(self, sorted_by: SortedKeys | str = SortedKeys.CPUTotal,
                op_detail: bool = True, thread_sep: bool = False, time_unit: str = "ms",
                *, group_by: str = "op", row_limit: int | None = None,
                sort_by: str | None = None, file: TextIO | None = None) -> None:
        """Print the table of :meth:`summary_table` (to `file`, default stdout)."""
        print(self.summary_table(sorted_by, op_detail, thread_sep, time_unit,
                                 group_by=group_by, row_limit=row_limit, sort_by=sort_by),
              file=file or sys.stdout)

    def summary_table(self, sorted_by: SortedKeys | str = SortedKeys.CPUTotal,
                      op_detail: bool = True, thread_sep: bool = False,
                      time_unit: str = "ms", *, group_by: str = "op",
                      row_limit: int | None = None, sort_by: str | None = None) -> str:
        """The summary as text: a row per op (``group_by="op"``), per plugin
        (``"plugin"``) or per op and input shapes (``"shape"``) with calls, total time,
        self time (total minus the calls nested in it), mean, max, self time as a share
        of all recorded time, and the share of the row's self time spent in Python
        kernels. ``sorted_by`` (``sort_by``, PyTorch's spelling): "total", "self",
        "calls", "mean", "max", "min" or a :class:`SortedKeys`; ``op_detail``: a line
        under each op naming its plugin and Python function; ``thread_sep``: a table per
        thread; ``time_unit``: "s", "ms", "us" or "ns"; ``row_limit``: the top rows only.
        """
        key = _sort_key(sort_by if sort_by is not None else sorted_by)
        if group_by not in _GROUPS:
            raise ValueError(f"Profiler.summary: group_by must be one of {_GROUPS}, got "
                             f"{group_by!r}")
        if time_unit not in _TIME_UNITS:
            raise ValueError(f"Profiler.summary: time_unit must be one of "
                             f"{tuple(_TIME_UNITS)}, got {time_unit!r}")
        events = self.events()
        if not events:
            return ("fastop.profiler: nothing was recorded (no op ran while the profiler "
                    "recorded, or it never recorded: see its scheduler)")
        threads = self.threads()
        parts = [_headline(events, threads, time_unit)]
        if thread_sep:
            for index in sorted({e.thread for e in events}):
                _, native, name = threads[index]
                mine = [e for e in events if e.thread == index]
                parts.append(f"\nthread {name} (tid {native}):\n"
                             + _table(mine, key, group_by, time_unit, op_detail, row_limit))
        else:
            parts.append(_table(events, key, group_by, time_unit, op_detail, row_limit))
        if self._samples is not None:
            parts.append(_sampled_table(self._samples, events, threads, self._window,
                                        time_unit, row_limit))
        return "\n".join(parts)

    def export(self, path: str, format: str = "json") -> None:
        """Write the trace (Paddle's ``export``): ``format="json"`` is the Chrome trace of
        :meth:`export_chrome_tracing`, the only format fastop writes."""
        if format != "json":
            raise ValueError(f"Profiler.export: format must be 'json' (the Chrome trace "
                             f"format), got {format!r}")
        self.export_chrome_tracing(path)

    def export_chrome_tracing(self, path: str, *, process_name: str | None = None) -> None:
        """Write the events in the Trace Event Format (chrome://tracing, Perfetto): a
        complete ("X") event per call with name, category, ts and dur in microseconds,
        pid, tid and its inputs, plugin and Python function as args; a track per thread
        named after it; with ``sample_python``, the sampled Python stack on a track of
        its own. `process_name` names the process's track (default: the script,
        ``sys.argv[0]``). Written atomically (a temporary file renamed), with the
        permissions of the user's umask; a file that cannot be written is an OSError
        naming `path` (and its directory when that is missing), not the temporary."""
        if self._trace is None:
            raise RuntimeError("Profiler.export_chrome_tracing: nothing was recorded yet")
        document = chrome_trace(self.events(), self.threads(), process_name,
                                self._samples, self._window)
        path = os.fspath(path)
        directory = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(directory):
            raise FileNotFoundError(f"Profiler.export_chrome_tracing: cannot write "
                                    f"{path!r}: directory {directory!r} does not exist")
        text = json.dumps(document, separators=(",", ":")).encode()
        try:
            atomic_write(path, lambda out: out.write(text))
        except OSError as exc:
            raise type(exc)(exc.errno, f"Profiler.export_chrome_tracing: cannot write "
                                       f"{path!r}: {exc.strerror}") from exc

    def __repr__(self) -> str:
        return f"<Profiler {self.current_state.name.lower()}, step {self.step_num}>"


# ----------------------------------------------------------------------------- the summary

def _sort_key(value: SortedKeys | str) -> str:
    if isinstance(value, SortedKeys):
        if value.value.startswith("gpu"):
            raise ValueError(f"Profiler.summary: {value} sorts by GPU time; fastop runs on "
                             f"the CPU (use {SortedKeys.CPUTotal} and the like)")
        return value.value
    if value not in _SORT_KEYS:
        raise ValueError(f"Profiler.summary: sorted_by must be one of {_SORT_KEYS} or a "
                         f"SortedKeys, got {value!r}")
    return value


class _Row:
    __slots__ = ("name", "calls", "total", "self", "max", "min", "python", "detail")

    def __init__(self, name: str, detail: str) -> None:
        self.name, self.detail = name, detail
        self.calls = self.total = self.self = self.max = self.python = 0
        self.min = None

    def add(self, e: ProfilerEvent, outermost: bool, self_ns: int) -> None:
        self.calls += 1
        d = e.duration_ns
        if outermost:          # a recursive call's time is inside its caller's already
            self.total += d
        self.self += self_ns
        self.max = max(self.max, d)
        self.min = d if self.min is None else min(self.min, d)
        if e.python is not None:
            self.python += self_ns

    def add_outside(self, e: ProfilerEvent) -> None:
        """A step's time outside every call nested in it (its self time)."""
        self.calls += 1
        self.total += e.self_ns
        self.self += e.self_ns
        self.max = max(self.max, e.self_ns)
        self.min = e.self_ns if self.min is None else min(self.min, e.self_ns)

    def value(self, key: str) -> float:
        return {"total": self.total, "self": self.self, "calls": self.calls,
                "mean": self.total / self.calls, "max": self.max, "min": self.min}[key]


def _detail(e: ProfilerEvent) -> str:
    """Where a row's op comes from, when not from fastop itself: its plugin (a
    PyLayer's module) and the Python function that ran."""
    parts = []
    if e.plugin not in (_NO_PLUGIN, "fastop"):
        parts.append(("module " if isinstance(e.source, type) else "plugin ") + e.plugin)
    if e.python is not None:
        where = f" ({_short_path(e.python[1])}:{e.python[2]})" if e.python[1] else ""
        parts.append(f"Python {e.python[0]}{where}")
    return "; ".join(parts)


def _short_path(path: str) -> str:
    """`path` relative to the working directory when under it, else to the sys.path
    entry holding it (``fastop_vision/_kernels.py``)."""
    relative = os.path.relpath(path)
    if not relative.startswith(".."):
        return relative
    roots = [os.path.abspath(p) for p in sys.path if p and path.startswith(os.path.abspath(p))]
    return os.path.relpath(path, max(roots, key=len)) if roots else path


def _group_key(e: ProfilerEvent, group_by: str) -> str:
    if group_by == "plugin":
        return e.plugin
    if group_by == "shape":
        return f"{e.group_name} {e.shapes_text()}".rstrip()
    return e.group_name


def _is_outermost(e: ProfilerEvent, group_by: str) -> bool:
    """No enclosing event of the same group (a recursive PyLayer, a py_func calling
    ops of its own plugin): then its total counts."""
    key, parent = _group_key(e, group_by), e.parent
    while parent is not None:
        if _group_key(parent, group_by) == key:
            return False
        parent = parent.parent
    return True


def _table(events: list[ProfilerEvent], key: str, group_by: str, time_unit: str,
           op_detail: bool, row_limit: int | None) -> str:
    rows: dict[str, _Row] = {}
    for e in events:
        k = _group_key(e, group_by)
        row = rows.get(k)
        if row is None:
            row = rows[k] = _Row(k, _detail(e) if op_detail and group_by != "plugin" else "")
        if e.category == "step":        # its self time: the row outside fastop ops
            row.add(e, _is_outermost(e, group_by), 0)
            outside = rows.get(OUTSIDE_OPS)
            if outside is None:
                outside = rows[OUTSIDE_OPS] = _Row(OUTSIDE_OPS, _OUTSIDE_DETAIL
                                                   if op_detail else "")
            outside.add_outside(e)
        else:
            row.add(e, _is_outermost(e, group_by), e.self_ns)
    ordered = sorted(rows.values(), key=lambda r: r.value(key), reverse=True)
    shown = ordered[:row_limit] if row_limit else ordered
    recorded = sum(r.self for r in rows.values()) or 1
    scale = _TIME_UNITS[time_unit]
    title = {"op": "Name", "plugin": "Plugin", "shape": "Name and input shapes"}[group_by]
    width = min(max([len(title)] + [len(r.name) for r in shown]), 60)
    header = (f"{title:<{width}}  {'Calls':>7}  {'Total(' + time_unit + ')':>11}  "
              f"{'Self(' + time_unit + ')':>11}  {'Mean(' + time_unit + ')':>11}  "
              f"{'Max(' + time_unit + ')':>11}  {'Self %':>6}  {'Python %':>8}")
    rule = "-" * len(header)
    lines = [rule, header, rule]
    for r in shown:
        name = r.name if len(r.name) <= width else r.name[:width - 1] + "…"
        lines.append(f"{name:<{width}}  {r.calls:>7}  {r.total / scale:>11.3f}  "
                     f"{r.self / scale:>11.3f}  {r.total / r.calls / scale:>11.3f}  "
                     f"{r.max / scale:>11.3f}  {100 * r.self / recorded:>6.1f}  "
                     f"{100 * r.python / r.self if r.self else 0.0:>8.1f}")
        if r.detail:
            lines.append(f"    {r.detail}")
    lines.append(rule)
    if len(shown) < len(ordered):
        lines.append(f"... {len(ordered) - len(shown)} more rows (row_limit={row_limit})")
    lines.append("Self: total minus the calls nested in it; Self %: share of all recorded "
                 "time; Python %: share of the\nrow's self time in Python kernels (plugin "
                 "numpy kernels, py_func, PyLayer forward/backward).")
    return "\n".join(lines)


_OUTSIDE_DETAIL = ("the Python between the ops, in no op or range of yours: your script's "
                   "own code, imports, data loading")


def _headline(events: list[ProfilerEvent], threads: list[tuple[int, int, str]],
              time_unit: str) -> str:
    recorded = sum(e.self_ns for e in events)
    python = sum(e.self_ns for e in events if e.python is not None)
    outside = sum(e.self_ns for e in events if e.category == "step")
    ops = sum(1 for e in events if e.category in ("op", "static op"))
    scale = _TIME_UNITS[time_unit]
    used = sorted({e.thread for e in events})
    names = ", ".join(threads[i][2] for i in used)
    return (f"fastop profiler: {recorded / scale:.3f} {time_unit} recorded on "
            f"{len(used)} thread{'s' if len(used) != 1 else ''} ({names}), "
            f"{len(events)} events, {ops} op calls; {python / scale:.3f} {time_unit} "
            f"({100 * python / (recorded or 1):.1f} %) in Python kernels"
            + (f"; {outside / scale:.3f} {time_unit} ({100 * outside / (recorded or 1):.1f} "
               f"%) {OUTSIDE_OPS}" if outside else ""))


# ----------------------------------------------------------------------------- Chrome trace

def chrome_trace(events: list[ProfilerEvent], threads: list[tuple[int, int, str]],
                 process_name: str | None = None, samples: PythonSamples | None = None,
                 window: tuple[int, int] = (0, 0)) -> dict:
    """The Trace Event Format document of `events` (see
    :meth:`Profiler.export_chrome_tracing`), and of the sampled Python stacks in
    `window`. Every event, metadata included, has name, ph, ts, dur, pid and tid."""
    pid = os.getpid()
    name = process_name or os.path.basename(sys.argv[0]) or "python"
    out: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "ts": 0, "dur": 0, "pid": pid, "tid": 0,
         "args": {"name": f"fastop ({name})"}}]
    tids = [native for _, native, _ in threads]
    for index in sorted({e.thread for e in events}):
        _, native, name = threads[index]
        out.append({"name": "thread_name", "ph": "M", "ts": 0, "dur": 0, "pid": pid,
                    "tid": native, "args": {"name": name}})
        out.append({"name": "thread_sort_index", "ph": "M", "ts": 0, "dur": 0, "pid": pid,
                    "tid": native, "args": {"sort_index": index}})
    for e in events:
        args: dict[str, Any] = {}
        if e.inputs is not None:
            args["input shapes"] = [_entry_json(x, shape=True) for x in e.inputs]
            args["input dtypes"] = [_entry_json(x, shape=False) for x in e.inputs]
        if e.plugin != _NO_PLUGIN:
            args["plugin"] = e.plugin
        if e.python is not None:
            args["python"] = e.python[0]
            if e.python[1]:
                args["source"] = f"{e.python[1]}:{e.python[2]}"
        out.append({"name": e.name, "cat": e.category, "ph": "X",
                    "ts": round(e.start_ns / 1e3, 3), "dur": round(e.duration_ns / 1e3, 3),
                    "pid": pid, "tid": tids[e.thread], "args": args})
    if samples is not None and len(samples):
        out += _sampled_trace(samples, threads, window, pid)
    return {"traceEvents": out, "displayTimeUnit": "ms",
            "otherData": {"producer": "fastop.profiler", "clock": "CLOCK_MONOTONIC"}}


def _sampled_trace(samples: PythonSamples, threads: list[tuple[int, int, str]],
                   window: tuple[int, int], pid: int) -> list[dict[str, Any]]:
    """The sampled stacks as a track of their own (a thread id no real thread has),
    under the sampled thread's track: one "X" event per span of a function."""
    native, name = next(((n, m) for ident, n, m in threads if ident == samples.thread),
                        (0, "thread"))
    tid = _SAMPLED_TID_BASE + native
    out: list[dict[str, Any]] = [
        {"name": "thread_name", "ph": "M", "ts": 0, "dur": 0, "pid": pid, "tid": tid,
         "args": {"name": f"{name}: Python stack (sampled every "
                          f"{samples.interval * 1e3:g} ms)"}},
        {"name": "thread_sort_index", "ph": "M", "ts": 0, "dur": 0, "pid": pid, "tid": tid,
         "args": {"sort_index": len(threads)}}]
    for depth, f, start, end in _sampled_spans(samples, window):
        frame = samples.frames[f]
        out.append({"name": frame.label, "cat": "python (sampled)", "ph": "X",
                    "ts": round(start / 1e3, 3), "dur": round((end - start) / 1e3, 3),
                    "pid": pid, "tid": tid, "args": {"source": frame.where}})
    return out


_SAMPLED_TID_BASE = 1 << 30     # above any Linux thread id (pid_max is at most 2**22)


def _entry_json(entry: Any, shape: bool) -> Any:
    if entry is None or entry == "scalar":
        return entry
    if isinstance(entry, list):
        return [_entry_json(x, shape) for x in entry]
    return list(entry[1]) if shape else entry[0]
