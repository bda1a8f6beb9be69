"""fastop.profiler: which calls it records (eager ops, plugin Python ops, PyLayer, backward
nodes nested under backward(), optimizer updates, static ops and py_func, user ranges),
from several threads; the summary; the Chrome trace; Paddle's schedule."""
import gc
import json
import os
import threading
from collections import Counter

import numpy as np
import pytest

import fastop
from fastop import nn, static
from fastop.autograd import PyLayer
from fastop.profiler import (Profiler, ProfilerState, RecordEvent, SortedKeys,
                             export_chrome_tracing, make_scheduler, record_function)

pytest.importorskip("fastop_activations")


def tensor(shape, grad=False, seed=0):
    data = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    return fastop.to_tensor(data, stop_gradient=not grad)


def named(prof, name):
    return [e for e in prof.events() if e.name == name]


def counts(prof, category=None):
    return Counter(e.name for e in prof.events() if category in (None, e.category))


class cus_tanh(PyLayer):
    """Seed 004's PyLayer; its forward calls an op (recorded nested in it)."""

    @staticmethod
    def forward(ctx, x):
        y = fastop.tanh(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, dy):
        y, = ctx.saved_tensor()
        return fastop.to_tensor(np.asarray(dy) * (1 - np.square(np.asarray(y))))


# -- what is recorded ---------------------------------------------------------------------
def test_eager_ops_are_recorded_with_names_counts_and_inputs():
    x = tensor([2, 3])
    with Profiler() as prof:
        y = x + 1
        for _ in range(3):
            y = fastop.tanh(y)
        fastop.matmul(y, tensor([3, 4]))
    assert counts(prof, "op") == {"fastop::add": 1, "fastop::tanh": 3, "fastop::matmul": 1}
    add, = named(prof, "fastop::add")
    assert add.inputs == (("float32", (2, 3)), "scalar") and add.plugin == "fastop"
    assert add.python is None                           # a Cython kernel
    assert named(prof, "fastop::matmul")[0].inputs == (("float32", (2, 3)),
                                                       ("float32", (3, 4)))
    step, = named(prof, "ProfileStep#0")                # the whole run: one step
    assert all(e.parent is step for e in prof.events() if e.category == "op")


def test_nothing_is_recorded_outside_the_profiler():
    x = tensor([3])
    prof = Profiler()
    fastop.exp(x)
    prof.start()
    fastop.tanh(x)
    prof.stop()
    fastop.exp(x)
    assert counts(prof, "op") == {"fastop::tanh": 1}


def test_backward_nodes_nest_under_the_backward_call():
    x = tensor([2, 3], grad=True)
    with Profiler() as prof:
        fastop.tanh(x).sum().backward()
    walk, = named(prof, "backward")
    nodes = [e for e in prof.events() if e.category == "backward node"]
    assert sorted(n.name for n in nodes) == ["fastop::sum.backward", "fastop::tanh.backward"]
    assert all(n.parent is walk for n in nodes)
    grad_op, = named(prof, "fastop::tanh_grad")         # the kernel rule's backward op
    assert grad_op.parent.name == "fastop::tanh.backward"
    assert grad_op.inputs == (("float32", (2, 3)), ("float32", (2, 3)))
    assert walk.start_ns <= grad_op.start_ns and grad_op.end_ns <= walk.end_ns


def test_grad_is_recorded_as_grad():
    x = tensor([4], grad=True)
    with Profiler() as prof:
        fastop.grad([fastop.exp(x).sum()], [x])
    assert len(named(prof, "grad")) == 1 and not named(prof, "backward")


def test_plugin_python_op_names_its_plugin_and_kernel():
    swish = fastop.ops.activations.swish
    x = tensor([2, 3], grad=True)
    with Profiler() as prof:
        swish(x).sum().backward()
    forward, = named(prof, "activations::swish")
    backward_op, = named(prof, "activations::swish_grad")
    node, = named(prof, "activations::swish.backward")
    kernel = swish.kernel_for("float32")
    assert forward.plugin == "fastop-activations" and node.plugin == "fastop-activations"
    assert forward.python[0] == f"{kernel.__module__}:{kernel.__qualname__}"
    assert forward.python[1:] == (kernel.__code__.co_filename,
                                  kernel.__code__.co_firstlineno)
    assert backward_op.python is not None and backward_op.parent is node
    assert node.python is None                          # the rule itself is fastop's


def test_pylayer_forward_and_backward_are_recorded_with_their_functions():
    x = tensor([2, 3], grad=True)
    with Profiler() as prof:
        cus_tanh.apply(x).mean().backward()
    forward, = named(prof, "cus_tanh.forward")
    backward, = named(prof, "cus_tanh.backward")
    assert forward.category == "PyLayer" and backward.category == "backward node"
    assert forward.python[0] == f"{__name__}:cus_tanh.forward"
    assert backward.python[0] == f"{__name__}:cus_tanh.backward"
    assert backward.python[2] == cus_tanh.backward.__code__.co_firstlineno
    inner, = named(prof, "fastop::tanh")                # an op called by forward
    assert inner.parent is forward
    assert backward.parent.name == "backward" and forward.inputs == (("float32", (2, 3)),)


def test_optimizer_updates_are_op_calls():
    layer = nn.Linear(3, 2)
    opt = fastop.optimizer.Adam(learning_rate=0.01, parameters=layer.parameters())
    with Profiler() as prof:
        for _ in range(2):
            layer(tensor([4, 3])).mean().backward()
            opt.step()
            opt.clear_grad()
    updates = named(prof, "fastop::adam_update")
    assert len(updates) == 4                            # weight and bias, two steps
    assert {u.inputs[0][1] for u in updates} == {(3, 2), (2,)}


def np_tanh(x):
    return np.tanh(x)


def test_static_runs_record_each_op_and_py_func():
    main, startup = static.Program(), static.Program()
    fastop.enable_static()
    try:
        with static.program_guard(main, startup):
            x = static.data("x", [None, 4], "float32")
            hidden = static.nn.fc(x, 3)
            out = main.current_block().create_var(name="act", dtype="float32",
                                                  shape=hidden.shape)
            static.py_func(np_tanh, hidden, out)
            loss = fastop.mean(out)
        exe = static.Executor(fastop.CPUPlace())
        exe.run(startup)
        feed = {"x": np.ones((5, 4), np.float32)}
        with Profiler() as prof:
            for _ in range(2):
                exe.run(main, feed=feed, fetch_list=[loss])
    finally:
        fastop.disable_static()
    runs = named(prof, "Executor.run")
    assert len(runs) == 2
    program_ops = [getattr(op.opdef, "label", None) or op.opdef.name
                   for op in main.global_block().ops]
    for run in runs:
        inside = [e for e in prof.events() if e.parent is run]
        assert [e.name for e in inside] == program_ops
        assert all(e.category == "static op" for e in inside)
    py_func, = {e.name for e in prof.events() if e.name.startswith("py_func")}
    event = named(prof, py_func)[0]
    assert event.python[0] == f"{__name__}:np_tanh"
    assert event.inputs == (("float32", (5, 3)),)


def test_ops_from_two_threads_go_to_their_own_tracks():
    barrier = threading.Barrier(2)

    def work(fn, n):
        x = tensor([8])
        barrier.wait()
        for _ in range(n):
            fn(x)
    workers = [threading.Thread(target=work, args=(fastop.tanh, 200), name="tanh-worker"),
               threading.Thread(target=work, args=(fastop.exp, 150), name="exp-worker")]
    with Profiler() as prof:
        for t in workers:
            t.start()
        for t in workers:
            t.join()
    threads = {index: name for index, (_, _, name) in enumerate(prof.threads())}
    per_thread = Counter((threads[e.thread], e.name) for e in prof.events())
    assert per_thread[("tanh-worker", "fastop::tanh")] == 200
    assert per_thread[("exp-worker", "fastop::exp")] == 150
    assert per_thread[("tanh-worker", "fastop::exp")] == 0
    assert per_thread[("exp-worker", "fastop::tanh")] == 0
    assert {"MainThread", "tanh-worker", "exp-worker"} <= set(threads.values())


def test_record_function_marks_ranges_as_context_and_decorator():
    @record_function("loss")
    def loss_of(x):
        return fastop.tanh(x).sum()

    x = tensor([3])
    with Profiler() as prof:
        with RecordEvent("forward"):
            loss_of(x)
            loss_of(x)
        event = RecordEvent("manual")
        event.begin()
        fastop.exp(x)
        event.end()
    region, = named(prof, "forward")
    losses = named(prof, "loss")
    assert len(losses) == 2 and all(e.parent is region for e in losses)
    assert all(e.category == "user" for e in losses + [region])
    assert {e.name for e in prof.events() if e.parent in losses} == {"fastop::tanh",
                                                                     "fastop::sum"}
    assert named(prof, "fastop::exp")[0].parent.name == "manual"
    with RecordEvent("off"):                            # not recording: nothing happens
        pass


def test_a_failing_call_is_recorded_and_the_profiler_keeps_working():
    with Profiler() as prof:
        with pytest.raises(ValueError, match="matmul"):
            fastop.matmul(tensor([2, 3]), tensor([4, 5]))
        fastop.tanh(tensor([2]))
    assert counts(prof, "op") == {"fastop::matmul": 1, "fastop::tanh": 1}


def test_self_time_is_total_minus_nested_calls():
    x = tensor([16, 16], grad=True)
    with Profiler() as prof:
        for _ in range(3):
            cus_tanh.apply(fastop.ops.activations.swish(x)).sum().backward()
    events = prof.events()
    for e in events:
        children = [c for c in events if c.parent is e]
        assert e.self_ns == e.duration_ns - sum(c.duration_ns for c in children)
        assert all(e.start_ns <= c.start_ns and c.end_ns <= e.end_ns for c in children)
        assert e.depth == (0 if e.parent is None else e.parent.depth + 1)
    top = [e for e in events if e.parent is None]
    assert sum(e.self_ns for e in events) == sum(e.duration_ns for e in top)


def test_record_shapes_false_records_no_inputs():
    with Profiler(record_shapes=False) as prof:
        fastop.tanh(tensor([2]))
    assert named(prof, "fastop::tanh")[0].inputs is None


# -- the summary ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def trained():
    """A profile of a few steps of a small network with a plugin op and a PyLayer."""
    swish = fastop.ops.activations.swish
    layer = nn.Linear(8, 4)
    opt = fastop.optimizer.SGD(learning_rate=0.1, parameters=layer.parameters())
    with Profiler() as prof:
        for step in range(4):
            x = tensor([16 if step % 2 else 8, 8], seed=step)
            loss = cus_tanh.apply(swish(layer(x))).mean()
            loss.backward()
            opt.step()
            opt.clear_grad()
            prof.step()
    return prof


def table_rows(text):
    """{first cell: cells} of the table's rows."""
    lines = text.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:1] in (["Name"],
                                                                             ["Plugin"]))
    rows = {}
    for line in lines[header + 2:]:
        if line.startswith("---"):
            break
        if not line.startswith("    "):
            cells = line.rsplit(None, 7)
            rows[cells[0]] = cells[1:]
    return rows


def test_summary_rows_per_op(trained):
    text = trained.summary_table()
    assert text.startswith("fastop profiler: ")
    rows = table_rows(text)
    swish, fc = rows["activations::swish"], rows["fastop::fc"]
    assert swish[0] == "4" and float(swish[-1]) == 100.0      # calls, Python %
    assert float(fc[-1]) == 0.0
    assert rows["ProfileStep"][0] == "5"      # four steps, then the one stop closes
    assert rows["fastop::sgd_update"][0] == "8"
    assert "plugin fastop-activations; Python fastop_activations" in text
    assert rows["cus_tanh.forward"][0] == "4"
    total_self_pct = sum(float(r[-2]) for r in rows.values())
    assert abs(total_self_pct - 100) < 1


def test_summary_sorts_groups_and_limits(trained):
    by_calls = list(table_rows(trained.summary_table("calls")))
    calls = [int(table_rows(trained.summary_table("calls"))[n][0]) for n in by_calls]
    assert calls == sorted(calls, reverse=True)
    assert list(table_rows(trained.summary_table(SortedKeys.CPUTotal))) == \
        list(table_rows(trained.summary_table("total")))
    plugins = table_rows(trained.summary_table(group_by="plugin"))
    assert {"fastop", "fastop-activations", __name__} <= set(plugins)
    # the plugin's kernels are Python; its ops' backward nodes are fastop's code
    assert float(plugins["fastop-activations"][-1]) > 50
    assert float(plugins["fastop-activations"][-1]) > float(plugins["fastop"][-1])
    shapes = table_rows(trained.summary_table(group_by="shape", op_detail=False))
    assert shapes["activations::swish [[8, 4]]"][0] == "2"
    assert shapes["activations::swish [[16, 4]]"][0] == "2"
    limited = trained.summary_table(row_limit=3, op_detail=False)
    assert len(table_rows(limited)) == 3 and "more rows (row_limit=3)" in limited
    assert "\nthread MainThread (tid " in trained.summary_table(thread_sep=True)
    assert "Total(us)" in trained.summary_table(time_unit="us")


def test_summary_prints(trained, capsys):
    trained.summary(sort_by="self", group_by="plugin")
    assert capsys.readouterr().out == trained.summary_table("self", group_by="plugin") + "\n"


@pytest.mark.parametrize("kwargs, message", [
    ({"sorted_by": "fast"}, "sorted_by must be one of"),
    ({"sorted_by": SortedKeys.GPUTotal}, "fastop runs on the CPU"),
    ({"group_by": "module"}, "group_by must be one of"),
    ({"time_unit": "min"}, "time_unit must be one of"),
])
def test_summary_arguments_are_checked(trained, kwargs, message):
    with pytest.raises(ValueError, match=message):
        trained.summary_table(**kwargs)


def test_summary_of_nothing_says_so():
    prof = Profiler(scheduler=(5, 6))
    with prof:
        fastop.tanh(tensor([2]))
    assert "nothing was recorded" in prof.summary_table()


# -- the Chrome trace -----------------------------------------------------------------
REQUIRED_KEYS = ("name", "ph", "ts", "dur", "pid", "tid")


def test_chrome_trace_is_valid_trace_event_format(trained, tmp_path):
    path = tmp_path / "trace.json"
    trained.export_chrome_tracing(str(path))
    doc = json.loads(path.read_text())
    events = doc["traceEvents"]
    assert all(all(k in e for k in REQUIRED_KEYS) for e in events)
    assert {e["ph"] for e in events} == {"X", "M"}
    complete = [e for e in events if e["ph"] == "X"]
    assert len(complete) == len(trained.events())
    assert all(isinstance(e["ts"], (int, float)) and e["dur"] >= 0 for e in complete)
    named_tids = {e["tid"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {e["tid"] for e in complete} <= named_tids
    swish = next(e for e in complete if e["name"] == "activations::swish")
    assert swish["cat"] == "op" and swish["args"]["plugin"] == "fastop-activations"
    assert swish["args"]["input shapes"] == [[8, 4]]
    assert swish["args"]["input dtypes"] == ["float32"]
    assert swish["args"]["source"].endswith(".py:" + swish["args"]["source"].split(":")[-1])
    walk = next(e for e in complete if e["name"] == "backward")   # nested in time
    inner = [e for e in complete if e["cat"] == "backward node"
             and walk["ts"] <= e["ts"] <= walk["ts"] + walk["dur"]]
    assert inner and all(e["ts"] + e["dur"] <= walk["ts"] + walk["dur"] + 1e-3
                         for e in inner)


def test_export_writes_json_only(trained, tmp_path):
    trained.export(str(tmp_path / "t.json"))
    assert json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    with pytest.raises(ValueError, match="format must be 'json'"):
        trained.export(str(tmp_path / "t.pb"), format="pb")
    with pytest.raises(RuntimeError, match="nothing was recorded"):
        Profiler().export_chrome_tracing(str(tmp_path / "none.json"))


# -- Paddle's schedule --------------------------------------------------------------------
def test_make_scheduler_follows_paddle():
    schedule = make_scheduler(closed=1, ready=1, record=2, repeat=2, skip_first=1)
    S = ProfilerState
    assert [schedule(i) for i in range(10)] == [
        S.CLOSED, S.CLOSED, S.READY, S.RECORD, S.RECORD_AND_RETURN,
        S.CLOSED, S.READY, S.RECORD, S.RECORD_AND_RETURN, S.CLOSED]
    with pytest.raises(ValueError, match="record >= 1"):
        make_scheduler(closed=0, ready=0, record=0)


def test_scheduler_range_records_those_steps_and_calls_on_trace_ready(tmp_path):
    ready = []
    x = tensor([2])
    with Profiler(scheduler=(2, 4), on_trace_ready=ready.append) as prof:
        for step in range(6):
            for _ in range(step + 1):       # step i runs i + 1 ops
                fastop.tanh(x)
            prof.step()
    assert ready == [prof]
    assert len(named(prof, "fastop::tanh")) == 3 + 4
    assert sorted(e.name for e in prof.events() if e.category == "step") == \
        ["ProfileStep#2", "ProfileStep#3"]


def test_repeated_periods_each_reach_on_trace_ready(tmp_path):
    schedule = make_scheduler(closed=1, ready=0, record=1, repeat=3)
    prof = Profiler(scheduler=schedule, on_trace_ready=export_chrome_tracing(str(tmp_path)))
    prof.start()
    for _ in range(7):
        fastop.tanh(tensor([2]))
        prof.step()
    prof.stop()
    files = sorted(tmp_path.glob("*.fastop_trace.json"))
    assert len(files) == 3
    assert all(json.loads(f.read_text())["traceEvents"] for f in files)


def test_profilers_nest_and_each_sees_its_own_window():
    x = tensor([2])
    outer, inner = Profiler(), Profiler()
    outer.start()
    fastop.exp(x)
    with inner:
        fastop.tanh(x)
    fastop.sigmoid(x)
    with pytest.raises(RuntimeError, match="already running"):
        outer.start()
    outer.stop()
    assert counts(inner, "op") == {"fastop::tanh": 1}
    assert counts(outer, "op") == {"fastop::exp": 1, "fastop::tanh": 1, "fastop::sigmoid": 1}
    with pytest.raises(RuntimeError, match="not running"):
        outer.stop()
    with pytest.raises(RuntimeError, match="not running"):
        Profiler().step()
    with outer:                                         # a new period replaces the last
        fastop.tanh(x)
    assert counts(outer, "op") == {"fastop::tanh": 1}


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="start_batch < end_batch"):
        Profiler(scheduler=(3, 3))
    with pytest.raises(TypeError, match="scheduler must be"):
        Profiler(scheduler="all")
    with pytest.raises(TypeError, match="on_trace_ready must be callable"):
        Profiler(on_trace_ready="trace.json")
    from fastop.profiler import ProfilerTarget
    with pytest.warns(UserWarning, match="GPU is not supported"):
        Profiler(targets=[ProfilerTarget.CPU, ProfilerTarget.GPU])


def test_profiler_is_a_lazy_attribute_of_fastop():
    import subprocess
    import sys
    code = ("import sys, fastop; assert 'fastop.profiler' not in sys.modules; "
            "assert fastop.profiler.Profiler")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


# -- storage dtypes, bad paths, profilers nobody holds ------------------------------------
def test_summary_and_trace_name_float16_and_uint8_inputs(tmp_path):
    half = fastop.to_tensor(np.ones(3, "float16"))
    byte = fastop.to_tensor(np.ones(3, "uint8"))
    with Profiler() as prof:
        half.astype("float32")
        byte.astype("float32")
    table = prof.summary_table(group_by="shape")
    assert "fastop::cast [[3]]" in table
    dtypes = [e.inputs[0][0] for e in prof.events() if e.name == "fastop::cast"]
    assert dtypes == ["float16", "uint8"]
    prof.export_chrome_tracing(str(tmp_path / "t.json"))
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    assert [e["args"]["input dtypes"] for e in events if e["name"] == "fastop::cast"] == \
        [["float16"], ["uint8"]]


def test_export_errors_name_the_path_given_not_a_temporary(tmp_path):
    with Profiler() as prof:
        fastop.ones([2]).sum()
    missing = tmp_path / "missing" / "t.json"
    with pytest.raises(FileNotFoundError) as info:
        prof.export_chrome_tracing(str(missing))
    assert str(missing) in str(info.value) and ".fastop_trace" not in str(info.value)
    assert f"directory {str(tmp_path / 'missing')!r} does not exist" in str(info.value)
    (tmp_path / "t.json").mkdir()               # the rename over a directory fails
    with pytest.raises(OSError) as info:
        prof.export_chrome_tracing(str(tmp_path / "t.json"))
    assert str(tmp_path / "t.json") in str(info.value)
    assert ".tmp" not in str(info.value)
    assert os.listdir(tmp_path) == ["t.json"]   # no temporary left behind


def test_export_writes_with_the_umask_not_0600(tmp_path):
    with Profiler() as prof:
        fastop.ones([2]).sum()
    old = os.umask(0o022)
    try:
        prof.export_chrome_tracing(str(tmp_path / "t.json"))
    finally:
        os.umask(old)
    assert os.stat(tmp_path / "t.json").st_mode & 0o777 == 0o644


def test_a_profiler_nobody_holds_stops_recording():
    from fastop._core import profiling
    prof = Profiler()
    prof.start()
    assert profiling.is_active()
    del prof
    gc.collect()
    assert not profiling.is_active()
    with Profiler() as outer:                   # a dropped nested one leaves the outer on
        inner = Profiler()
        inner.start()
        del inner
        gc.collect()
        assert profiling.is_active()
        fastop.ones([2]).sum()
    assert not profiling.is_active() and named(outer, "fastop::sum")


# -- the time outside ops, and the sampled Python stack (issue 26) -------------------------
def spin_in_python(seconds):
    """The user's own Python between ops (a data pipeline, say)."""
    import time
    start, n = time.perf_counter(), 0
    while time.perf_counter() - start < seconds:
        n += 1
    return n


def test_the_time_outside_ops_is_a_row_and_the_sampled_stack_says_where_it_went(tmp_path):
    x = tensor([16, 16])
    with Profiler(sample_python=0.001) as prof:
        for _ in range(3):
            spin_in_python(0.1)
            fastop.tanh(x @ x)
            prof.step()
    text = prof.summary_table(op_detail=True)
    rows = {line[:20].strip(): line.split() for line in text.splitlines()}
    outside = rows["outside fastop ops"]
    steps = [e for e in prof.events() if e.category == "step"]
    assert outside[3] == str(len(steps)) == "4"        # calls: one per step (3 and the end)
    assert float(outside[5]) == pytest.approx(sum(e.self_ns for e in steps) / 1e6, abs=2e-3)
    assert float(rows["ProfileStep"][3]) == 0.0        # its self time moved to that row
    assert float(outside[-2]) > 90
    samples = prof.python_samples()
    assert len(samples) > 10 and samples.thread == threading.get_ident()
    section = text[text.index("Where the "):]
    line = next(l for l in section.splitlines() if l.startswith("spin_in_python"))
    assert float(line.split()[3]) > 80                 # Total %: the loop is the time
    assert line.split()[4].endswith(f"test_profiler.py:"
                                    f"{spin_in_python.__code__.co_firstlineno}")
    prof.export_chrome_tracing(str(tmp_path / "t.json"))
    trace = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    spins = [e for e in trace if e["name"] == "spin_in_python"]
    assert spins and all(e["cat"] == "python (sampled)" for e in spins)
    # calls with no sample between them are one span (the ops between take microseconds)
    assert sum(e["dur"] for e in spins) > 0.8 * 300e3  # of 3 x 100 ms, in microseconds


def test_without_sampling_no_samples_and_no_section():
    with Profiler() as prof:
        fastop.ones([2]).sum()
        prof.step()
    assert prof.python_samples() is None
    text = prof.summary_table()
    assert "outside fastop ops" in text and "Where the " not in text
    with pytest.raises(ValueError, match="sample_python must be None or seconds"):
        Profiler(sample_python=0)
    assert not any(t.name == "fastop-stack-sampler" for t in threading.enumerate())


def test_samples_of_the_launcher_alone_are_not_the_scripts_time():
    """The table of where the time outside ops went counts only samples that caught the
    script (the launcher's own frames before its first line or after its last are
    left out), so the script's <module> is on the stack of 100 % of it."""
    from fastop.profiler import PythonFrame, PythonSamples, _sampled_table
    samples = PythonSamples(thread=1, interval=0.005)
    samples.frames = [PythonFrame("cli", "/x/fastop/cli.py", 1, True),
                      PythonFrame("train.py", "/w/train.py", 1, False),
                      PythonFrame("prepare_batch", "/w/train.py", 5, False)]
    samples.stacks = [(0,), (0, 1, 2), (0, 1)]
    samples.times = [10, 20, 30, 40]
    samples.stack_ids = [0, 1, 2, 0]          # the launcher first and last
    table = _sampled_table(samples, [], [(1, 0, "main")], (0, 40), "ms", None)
    assert "(2 samples there)" in table
    rows = {line.split()[0]: line.split() for line in table.splitlines()
            if line.startswith(("train.py", "prepare_batch", "cli"))}
    assert float(rows["train.py"][3]) == 100.0
    assert float(rows["prepare_batch"][3]) == 50.0
    assert "cli" not in rows
