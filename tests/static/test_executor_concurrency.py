"""Independent ops of a static Program run at once on fastop's thread pool
(``fastop._core.executor``'s regions): results bitwise those of ``num_threads=1``, ordered
ops in program order on the calling thread, errors of an op on a pool thread raised by
the run (naming the op), the profiler showing each op on the thread that ran it, and the
cost rule keeping small ops on the calling thread."""
import json
import threading
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import fastop
from fastop import static
from fastop._core import executor as core_executor
from fastop.ops import registry
from fastop.ops._dispatch import mode_guard

from .conftest import assert_arena_sound
from .test_fuzz import Dag, _trainable, steps

MAIN = threading.get_ident()


@pytest.fixture
def every_op():
    """The cost rule offering every op that is not ordered to pool threads."""
    previous = core_executor._set_cost_rule(0, True)
    try:
        yield
    finally:
        core_executor._set_cost_rule(*previous)


def _define(name, kernel, **kw):
    if name in registry:
        registry.remove(name)
    return registry.define(name, inputs=["x"], outputs=["y"], meta=lambda x: x,
                           kernels={"*": kernel}, **kw)


@pytest.fixture
def sleepy():
    """An op recording the thread it ran on, then sleeping 5 ms (the GIL let go, as
    numpy lets it go in its loops): heavy by the cost rule. With ``meet["barrier"]``
    set it waits there instead, so two such ops finish only by running at once (on a
    loaded machine a pool thread may take longer to wake than a few sleeps)."""
    threads, meet = [], {"barrier": None}

    def kernel(x):
        threads.append(threading.get_ident())
        if meet["barrier"] is None:
            time.sleep(0.005)
        else:
            meet["barrier"].wait(timeout=30)
        return x + 1
    op = _define("chkexe::sleepy", kernel)
    yield op, threads, meet
    registry.remove(op.name)


N = 8192     # elements: ops on fewer are never heavy (numpy keeps the GIL in small loops)


def _branches(op, length=2):
    xa = static.data("xa", [N], "float32")
    xb = static.data("xb", [N], "float32")
    ya, yb = xa, xb
    for _ in range(length):
        ya, yb = op(ya), op(yb)
    return ya, yb


FEED = {"xa": np.arange(N, dtype="float32"), "xb": np.full(N, 10, "float32")}


def test_independent_heavy_ops_run_on_two_threads(sleepy):
    op, threads, meet = sleepy
    ya, yb = _branches(op)
    exe = static.Executor(static.CPUPlace(), num_threads=2)
    first = exe.run(static.default_main_program(), feed=FEED, fetch_list=[ya, yb])
    assert set(threads) == {MAIN}           # the first run times each op, serially
    plan = exe.plan_of(static.default_main_program(), FEED, [ya, yb])
    assert plan.schedule is not None and plan.schedule.regions == [(0, 4)]
    threads.clear()
    meet["barrier"] = threading.Barrier(2)
    second = exe.run(static.default_main_program(), feed=FEED, fetch_list=[ya, yb])
    assert len(set(threads)) == 2 and MAIN in threads
    for a, b, want in zip(first, second, (FEED["xa"] + 2, FEED["xb"] + 2)):
        assert np.array_equal(a, want) and np.array_equal(b, want)


def test_num_threads_1_runs_every_op_on_the_caller_in_order(sleepy):
    op, threads, _ = sleepy
    ya, yb = _branches(op)
    exe = static.Executor(static.CPUPlace(), num_threads=1)
    for _ in range(3):
        exe.run(static.default_main_program(), feed=FEED, fetch_list=[ya, yb])
    assert set(threads) == {MAIN}
    assert exe.plan_of(static.default_main_program(), FEED, [ya, yb]).schedule is None


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2"])
def test_num_threads_must_be_a_positive_int(bad):
    with pytest.raises(ValueError, match="num_threads must be an int >= 1"):
        static.Executor(num_threads=bad)


def test_small_ops_stay_on_the_calling_thread(sleepy):
    """The cost rule: a program of 100 small ops has no region (its runs are the serial
    loop, as before), even with two independent chains; nor have slow ops on few
    elements (numpy keeps the GIL in small loops)."""
    op, threads, _ = sleepy
    small = {"xa": np.ones(4, "float32"), "xb": np.ones(4, "float32")}
    xa = static.data("xa", [4], "float32")
    xb = static.data("xb", [4], "float32")
    ya, yb = xa, xb
    for _ in range(50):
        ya, yb = fastop.tanh(ya), fastop.tanh(yb)
    exe = static.Executor(num_threads=2)
    for _ in range(3):
        ra, rb = exe.run(static.default_main_program(), feed=small, fetch_list=[ya, yb])
    plan = exe.plan_of(static.default_main_program(), small, [ya, yb])
    assert plan.n_ops == 100 and plan.schedule is None
    ref = static.Executor(num_threads=1).run(static.default_main_program(), feed=small,
                                             fetch_list=[ya, yb])
    assert np.array_equal(ra, ref[0]) and np.array_equal(rb, ref[1])
    sa, sb = op(xa), op(xb)                 # 5 ms each, on 4 elements
    for _ in range(3):
        exe.run(static.default_main_program(), feed=small, fetch_list=[sa, sb])
    assert exe.plan_of(static.default_main_program(), small, [sa, sb]).schedule is None
    assert set(threads) == {MAIN}


def test_large_numpy_branches_are_bitwise_equal_to_serial():
    """The issue's program, smaller: two chains of numpy tanh ops."""
    op = _define("chkexe::np_tanh", np.tanh)
    try:
        n = 300_000
        xa = static.data("xa", [n], "float32")
        xb = static.data("xb", [n], "float32")
        ya, yb = xa, xb
        for _ in range(3):
            ya, yb = op(ya), op(yb)
        rng = np.random.default_rng(0)
        feed = {"xa": rng.standard_normal(n).astype("float32"),
                "xb": rng.standard_normal(n).astype("float32")}
        main = static.default_main_program()
        serial = static.Executor(num_threads=1)
        conc = static.Executor(num_threads=2)
        want = serial.run(main, feed=feed, fetch_list=[ya, yb])
        assert np.array_equal(want[0], np.tanh(np.tanh(np.tanh(feed["xa"]))))
        for _ in range(3):
            got = conc.run(main, feed=feed, fetch_list=[ya, yb])
            assert all(np.array_equal(g, w) for g, w in zip(got, want))
    finally:
        registry.remove(op.name)


def test_ordered_ops_keep_program_order_on_the_calling_thread(every_op):
    """py_func debug ops (out=None) and registry ops defined with ordered=True run on
    the calling thread in program order, even where nothing else orders them."""
    log = []

    def note(tag):
        def kernel(x):
            log.append((tag, threading.get_ident()))
            return x * 2
        return kernel
    ordered = [_define(f"chkexe::ordered{k}", note(f"op{k}"), ordered=True) for k in range(3)]
    try:
        assert all(op.ordered for op in ordered)
        assert not registry.get("fastop::tanh").ordered
        assert registry.get("fastop::dropout").ordered     # the global random stream
        xs = [static.data(f"x{k}", [4], "float32") for k in range(6)]
        outs = []
        for k, x in enumerate(xs):          # six independent ops, interleaved kinds
            if k % 2:
                static.py_func(lambda a, k=k: log.append((f"debug{k}",
                                                          threading.get_ident())),
                               fastop.tanh(x), None)
            else:
                outs.append(ordered[k // 2](fastop.tanh(x)))
        feed = {f"x{k}": np.full(4, k, "float32") for k in range(6)}
        exe = static.Executor(num_threads=2)
        for _ in range(4):
            log.clear()
            exe.run(static.default_main_program(), feed=feed, fetch_list=outs)
            assert [tag for tag, _ in log] == ["op0", "debug1", "op1", "debug3", "op2",
                                               "debug5"]
            assert {t for _, t in log} == {MAIN}
        assert exe.plan_of(static.default_main_program(), feed, outs).schedule is not None
    finally:
        for op in ordered:
            registry.remove(op.name)


def test_dropout_draws_the_masks_of_a_serial_run(every_op):
    x = static.data("x", [64], "float32")
    outs = [fastop.nn.functional.dropout(fastop.tanh(x), p=0.5) for _ in range(4)]
    feed = {"x": np.ones(64, "float32")}
    results = {}
    for n in (1, 2):
        exe = static.Executor(num_threads=n)
        fastop.seed(7)
        results[n] = [exe.run(static.default_main_program(), feed=feed, fetch_list=outs)
                      for _ in range(3)]
    for serial, conc in zip(results[1], results[2]):
        assert all(np.array_equal(a, b) for a, b in zip(serial, conc))
    assert not np.array_equal(results[1][0][0], results[1][0][1])   # fresh masks


def test_an_error_on_a_pool_thread_names_the_op_and_leaves_the_executor_usable(sleepy):
    op, threads, meet = sleepy
    failing = [False]
    failed_on = []

    def kernel(x):
        time.sleep(0.005)
        if failing[0]:
            meet["barrier"].wait(timeout=30)        # beside the first sleepy op
            failed_on.append(threading.get_ident())
            raise ArithmeticError("bad value in the kernel")
        return x - 1
    bad = _define("chkexe::sometimes_bad", kernel)
    try:
        xa = static.data("xa", [N], "float32")
        xb = static.data("xb", [N], "float32")
        ya, yb = op(op(xa)), bad(xb)
        main = static.default_main_program()
        exe = static.Executor(num_threads=2)
        exe.run(main, feed=FEED, fetch_list=[ya, yb])          # the timing run
        # The two ops meet at a barrier, so they run at once; which thread takes which
        # is the order in which the threads reach the region (the caller usually
        # first, taking the lower-numbered sleepy op): run until the bad op has failed
        # on a pool thread.
        for _ in range(20):
            failing[0], meet["barrier"] = True, threading.Barrier(2)
            with pytest.raises(ArithmeticError, match="bad value") as info:
                exe.run(main, feed=FEED, fetch_list=[ya, yb])
            if failed_on[-1] != MAIN:
                break
        assert failed_on[-1] != MAIN                            # it ran on a pool thread
        notes = "\n".join(getattr(info.value, "__notes__", []))
        assert "chkexe::sometimes_bad" in notes and "raised while running op #" in notes
        failing[0], meet["barrier"] = False, None
        ra, rb = exe.run(main, feed=FEED, fetch_list=[ya, yb])
        assert np.array_equal(ra, FEED["xa"] + 2) and np.array_equal(rb, FEED["xb"] - 1)
    finally:
        registry.remove(bad.name)


def test_profiler_shows_each_op_on_the_thread_that_ran_it(sleepy, tmp_path):
    op, threads, meet = sleepy
    ya, yb = _branches(op)
    main = static.default_main_program()
    exe = static.Executor(num_threads=2)
    exe.run(main, feed=FEED, fetch_list=[ya, yb])
    threads.clear()
    meet["barrier"] = threading.Barrier(2)
    with fastop.profiler.Profiler() as prof:
        exe.run(main, feed=FEED, fetch_list=[ya, yb])
    ran = [e for e in prof.events() if e.name == op.name]
    assert len(ran) == 4
    idents = {prof.threads()[e.thread][0] for e in ran}
    assert idents == set(threads) and len(idents) == 2
    names = {prof.threads()[e.thread][2] for e in ran}
    assert any(name.startswith("fastop pool ") for name in names)
    path = tmp_path / "trace.json"
    prof.export_chrome_tracing(str(path))
    events = [e for e in json.loads(path.read_text())["traceEvents"] if e["name"] == op.name]
    natives = {prof.threads()[e.thread][1] for e in ran}
    assert {e["tid"] for e in events} == natives and len(natives) == 2


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(spec=steps)
def test_random_dags_run_concurrently_match_serial_bitwise(every_op, spec):
    """Random DAGs of registered ops (test_fuzz's) with their gradients, every op
    offered to pool threads: the fetched values are bitwise those of num_threads=1, run
    after run (the first run traces shapes, the later ones run regions on the arena)."""
    dag = Dag(spec)
    with mode_guard("static"):
        main, feed, nodes, grads = dag.static_program()
    for fetch in (nodes + [g for g in grads if g is not None],
                  [g for g in grads if g is not None]):       # temporaries in the arena
        if not fetch:
            continue
        want = static.Executor(num_threads=1).run(main, feed=feed, fetch_list=fetch)
        exe = static.Executor(num_threads=2)
        for _ in range(3):
            got = exe.run(main, feed=feed, fetch_list=fetch)
            for g, w in zip(got, want):
                assert g.dtype == w.dtype and np.array_equal(g, w, equal_nan=True)
        assert_arena_sound(exe.plan_of(main, feed, fetch))
